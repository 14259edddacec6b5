// Matrix multiplication (2-D, batched, broadcast batch dims) and linear.
#include "core/ops/op_utils.h"

namespace gradsleuth {

namespace {

// (B..., N, K) @ (B..., K, M) with broadcast batch dims; both operands >= 2-D.
Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  const int64_t N = a.size(-2), K = a.size(-1), K2 = b.size(-2), M = b.size(-1);
  GS_CHECK(K == K2, "matmul", "shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
           " cannot be multiplied: the inner dims differ (", K, " vs ", K2,
           "). For x @ W with W (out, in), "
           "did you mean x @ W.t()?");
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "matmul");
  const int64_t B = numel_of(batch);
  DType ct = result_type(a, b);
  GS_CHECK(ct != kBool, "matmul", "not defined for bool tensors");
  Shape sa = batch, sb = batch;
  sa.push_back(N);
  sa.push_back(K);
  sb.push_back(K);
  sb.push_back(M);
  // Broadcast to the full batch, then fold batch dims into one when the
  // operand's layout allows it (it always does for contiguous or expanded dims).
  auto fold = [&](const Tensor& t, const Shape& s, int64_t r, int64_t c) {
    Tensor e = detail::prepare(t, ct, s);
    Strides st = e.strides();
    const int64_t nb = static_cast<int64_t>(batch.size());
    // Batch dims fold into one with stride st[nb-1] if they are laid out back to back.
    bool ok = true;
    for (int64_t d = 0; d + 1 < nb; ++d) ok &= st[d] == st[d + 1] * s[d + 1];
    if (!ok) e = detail::contiguous_raw(e);
    const int64_t bstride = nb ? e.strides()[nb - 1] : 0;
    return detail::make_alias(e, {B, r, c}, {bstride, e.strides()[nb], e.strides()[nb + 1]}, e.offset());
  };
  Tensor A = fold(a, sa, N, K), Bm = fold(b, sb, K, M);
  Tensor out = empty({B, N, M}, TensorOptions(ct).device(a.device()));
  backend_of(a).bmm(out, A, Bm);
  Shape os = batch;
  os.push_back(N);
  os.push_back(M);
  return detail::make_alias(out, os, contiguous_strides(os), 0);
}

// True for the strides of a 2-D column-major (transposed) matrix with more than one row and column.
bool transposed_2d(const Strides& st) { return st.size() == 2 && st[0] == 1 && st[1] > 1; }

// a (N, K) @ b (K, M), both 2-D on one device, as a float32 product whose every value the kernel
// rounds to `through` as it stores it; its storage is marked so (Storage::mark_rounded_through).
// Undefined where the backend has no such kernel for them (Backend::bmm_round_through says which
// dtypes it takes).
Tensor matmul_rounded_through(const Tensor& a, const Tensor& b, DType through) {
  if (a.dim() != 2 || b.dim() != 2 || a.device() != b.device() || a.size(1) != b.size(0)) return Tensor();
  const int64_t N = a.size(0), M = b.size(1);
  Tensor out = empty({1, N, M}, TensorOptions(kFloat32).device(a.device()));
  const auto batch_of_one = [](const Tensor& t) {
    return detail::make_alias(t, {1, t.size(0), t.size(1)}, {0, t.stride(0), t.stride(1)}, t.offset());
  };
  if (!backend_of(a).bmm_round_through(out, batch_of_one(a), batch_of_one(b), through)) return Tensor();
  out.storage()->mark_rounded_through(through);
  return detail::make_alias(out, {N, M}, {M, 1}, 0);
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (autocast_enabled()) [[unlikely]] {
    detail::AutocastScope ac("matmul");
    return matmul(ac.cast(a), ac.cast(b));
  }
  detail::check_same_device("matmul", a, b);
  GS_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul", "both operands need at least 1 dim, got ", a.str(), " and ",
           b.str());
  // 1-D operands become matrices, and the added dim is removed from the result.
  const Tensor a2 = a.dim() == 1 ? detail::make_alias(a, {1, a.size(0)}, {0, a.stride(0)}, a.offset()) : a;
  const Tensor b2 = b.dim() == 1 ? detail::make_alias(b, {b.size(0), 1}, {b.stride(0), 0}, b.offset()) : b;
  Tensor out = matmul_nd(a2, b2);
  if (a.dim() == 1 || b.dim() == 1) {
    Shape s = out.shape();
    if (b.dim() == 1) s.pop_back();
    if (a.dim() == 1) s.erase(s.end() - (b.dim() == 1 ? 1 : 2));
    out = detail::make_alias(out, s, contiguous_strides(s), 0);
  }
  notify_op("matmul", {a, b}, out);
  if (needs_grad(a, b)) {
    // C = A B:  dA = dC B^T,  dB = A^T dC  (batch dims that were broadcast are summed by sum_to).
    SavedTensor sa(b.requires_grad() ? a : Tensor(), "matmul"), sb(a.requires_grad() ? b : Tensor(), "matmul");
    record("matmul", out, {&a, &b},
           [sa, sb, ra = a.requires_grad(), rb = b.requires_grad(), sha = a.shape(), shb = b.shape(),
            sb_layout = b.strides()](const Tensor& g, Node& n) {
             Tensor ga, gb;
             // Restore the 1-D operands' dims so the 2-D formulas apply.
             Tensor g2 = g;
             if (sha.size() == 1) g2 = g2.unsqueeze(sha.size() == 1 && shb.size() == 1 ? 0 : -2);
             if (shb.size() == 1) g2 = g2.unsqueeze(-1);
             if (ra) {
               Tensor bv = sb.unpack(n);
               Tensor b2 = shb.size() == 1 ? bv.unsqueeze(-1) : bv;
               ga = sum_to(matmul(g2, b2.transpose(-1, -2)), sha.size() == 1 ? Shape{1, sha[0]} : sha).reshape(sha);
             }
             if (rb) {
               // b is a transposed view (linear's w.t()): compute dB^T = dC^T A, so the gradient has
               // the layout of b and reaches w contiguous, without the strided copy AccumulateGrad
               // would otherwise make (a quarter of an MLP step).
               const bool b_transposed = shb.size() == 2 && g2.dim() == 2 && transposed_2d(sb_layout);
               // When b is also a 16-bit cast of a float32 weight (autocast's, under linear) whose
               // float32 gradient the cast's fused backward will round, the product rounds as it
               // stores, reading the 16-bit operands as saved (no widened copies, no rounding pass).
               if (const std::optional<DType> through = detail::rounded_through(n, 1); through && b_transposed && sha.size() == 2) {
                 Tensor r = matmul_rounded_through(g2.transpose(0, 1), sa.unpack_as_saved(n), *through);
                 if (r.defined()) gb = r.transpose(0, 1);
               }
               if (!gb.defined()) {
                 Tensor av = sa.unpack(n);
                 Tensor a2v = sha.size() == 1 ? av.unsqueeze(0) : av;
                 if (b_transposed)
                   gb = matmul(g2.transpose(0, 1), a2v).transpose(0, 1);
                 else
                   gb = sum_to(matmul(a2v.transpose(-1, -2), g2), shb.size() == 1 ? Shape{shb[0], 1} : shb)
                            .reshape(shb);
               }
             }
             return tensor_list{ga, gb};
           });
  }
  return out;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (autocast_enabled()) [[unlikely]] {
    detail::AutocastScope ac("linear");
    return linear(ac.cast(x), ac.cast(w), ac.cast(b));
  }
  GS_CHECK(w.dim() == 2, "linear", "weight must be 2-D (out_features, in_features), got ", w.str());
  GS_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1), "linear", "input ", x.str(), " has ", x.dim() ? x.size(-1) : 0,
           " features but the weight ", w.str(), " expects ", w.size(1), " (weight is (out_features, in_features))");
  Tensor y = matmul(x, w.t());
  return b.defined() ? y + b : y;
}

}  // namespace gradsleuth
