// Reductions and the softmax family. A reduction's backward broadcasts the
// gradient back over the reduced dims (keepdim view + expand).
#include <cmath>
#include <limits>

#include "core/ops/op_utils.h"

namespace gradsleuth {

namespace {

// Normalises `dims` (empty = all) into a per-dim flag array; checks duplicates.
std::vector<bool> reduced_flags(const Tensor& x, const Dims& dims, const char* op) {
  std::vector<bool> r(static_cast<size_t>(std::max<int64_t>(x.dim(), 1)), dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, x.dim(), op);
    GS_CHECK(!r[w] || dims.empty(), op, "dim ", w, " appears more than once in ", shape_str(dims));
    r[w] = true;
  }
  return r;
}

Shape keepdim_shape(const Tensor& x, const std::vector<bool>& r) {
  Shape s = x.shape();
  for (int64_t d = 0; d < x.dim(); ++d)
    if (r[d]) s[d] = 1;
  return s;
}

Shape result_shape(const Tensor& x, const std::vector<bool>& r, bool keepdim) {
  if (keepdim) return keepdim_shape(x, r);
  Shape s;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!r[d]) s.push_back(x.shape()[d]);
  return s;
}

// Runs the backend reduction into a keepdim-shaped tensor (no autograd).
Tensor reduce_raw(ReduceOp op, const Tensor& x, const std::vector<bool>& r, DType out_dtype) {
  Tensor out = empty(keepdim_shape(x, r), TensorOptions(out_dtype).device(x.device()));
  if (x.dim() == 0) {
    backend_of(x).copy(out, x);
    return out;
  }
  std::vector<char> flags(r.begin(), r.end());
  Tensor in = x.dtype() == out_dtype ? x : x.to(out_dtype);
  backend_of(x).reduce(op, out, in, reinterpret_cast<const bool*>(flags.data()));
  return out;
}

// Whether a contiguous float32 CPU tensor holds an infinity.
bool has_inf(const Tensor& t) {
  const float* p = static_cast<const float*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::isinf(p[i])) return true;
  return false;
}

bool has_inf64(const Tensor& t) {
  const double* p = static_cast<const double*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::isinf(p[i])) return true;
  return false;
}

// Gradient g of a reduced result, expanded back to x's shape.
Tensor expand_grad(const Tensor& g, const Shape& keep_shape, const Shape& in_shape) {
  return g.reshape(keep_shape).expand(in_shape);
}

}  // namespace

Tensor sum(const Tensor& x, const Dims& dims, bool keepdim) {
  if (autocast_enabled()) [[unlikely]] {
    detail::AutocastScope ac("sum");
    return sum(ac.cast(x), dims, keepdim);
  }
  auto r = reduced_flags(x, dims, "sum");
  // Integer and bool sums accumulate in int64, as in PyTorch.
  DType dt = is_floating(x.dtype()) ? x.dtype() : kInt64;
  Tensor out = reduce_raw(ReduceOp::Sum, x, r, dt);
  Shape keep = out.shape();
  out = detail::make_alias(out, result_shape(x, r, keepdim), contiguous_strides(result_shape(x, r, keepdim)), 0);
  notify_op("sum", {x}, out);
  if (needs_grad(x))  // each input element contributed once: gradient = g broadcast back
    record("sum", out, {&x},
           [keep, in = x.shape()](const Tensor& g, Node&) { return tensor_list{expand_grad(g, keep, in)}; });
  return out;
}

Tensor mean(const Tensor& x, const Dims& dims, bool keepdim) {
  if (autocast_enabled()) [[unlikely]] {
    detail::AutocastScope ac("mean");
    return mean(ac.cast(x), dims, keepdim);
  }
  // As in PyTorch, an integer mean has no output dtype to infer (truncating it would be wrong,
  // and silently picking float32 would hide that the data are integers).
  GS_CHECK(x.is_floating_point(), "mean", "could not infer the output dtype: the input ", x.str(),
           " must be floating point (PyTorch: \"Input dtype must be either a floating point or complex dtype\"). "
           "Convert first: x.to(gs::kFloat32).mean(), or use sum(x) for an integer total");
  auto r = reduced_flags(x, dims, "mean");
  int64_t count = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (r[d]) count *= x.shape()[d];
  // An empty selection gives 0 / 0 = NaN, as in PyTorch (sum is 0, the count 0). A float16 or
  // bfloat16 mean sums and divides in float32 and rounds once: the mean of values near the
  // largest float16 is finite even where their sum is not.
  const DType compute = is_reduced_float(x.dtype()) ? kFloat32 : x.dtype();
  Tensor s = reduce_raw(ReduceOp::Sum, x, r, compute);
  auto divide = [&](const Tensor& t) {
    backend_of(t).binary(
        BinaryOp::Div, t, t,
        detail::prepare(full({}, static_cast<double>(count), TensorOptions(t.dtype()).device(t.device())), t.dtype(),
                        t.shape()));
  };
  if (compute == kFloat32 && s.device().is_cpu() && has_inf(s)) {
    // The float32 sum overflowed, yet the mean of finite values is in range: sum in float64.
    Tensor wide = reduce_raw(ReduceOp::Sum, x, r, kFloat64);
    divide(wide);
    backend_of(s).copy(s, wide);
  } else if (compute == kFloat64 && s.device().is_cpu() && has_inf64(s)) {
    // The same in float64: the terms scaled by 2^-64 (exact for normal values), summed, divided.
    Tensor scaled = reduce_raw(ReduceOp::Sum, x * std::ldexp(1.0, -64), r, kFloat64);
    divide(scaled);
    backend_of(scaled).binary(
        BinaryOp::Mul, scaled, scaled,
        detail::prepare(full({}, std::ldexp(1.0, 64), TensorOptions(kFloat64)), kFloat64, scaled.shape()));
    backend_of(s).copy(s, scaled);
  } else {
    divide(s);
  }
  if (compute != x.dtype()) {
    Tensor rounded = empty(s.shape(), TensorOptions(x.dtype()).device(x.device()));
    backend_of(s).copy(rounded, s);
    s = rounded;
  }
  s = detail::make_alias(s, result_shape(x, r, keepdim), contiguous_strides(result_shape(x, r, keepdim)), 0);
  notify_op("mean", {x}, s);
  if (needs_grad(x))
    record("mean", s, {&x}, [keep = keepdim_shape(x, r), in = x.shape(), count](const Tensor& g, Node&) {
      return tensor_list{expand_grad(g / static_cast<double>(count), keep, in)};
    });
  return s;
}

// amax/amin: the gradient is shared evenly among the elements equal to the extremum.
// A max/min over an empty dim has no value (sum has 0, logsumexp -inf): raise, as PyTorch does.
static void check_nonempty_reduction(const Tensor& x, const std::vector<bool>& r, const char* name) {
  for (int64_t d = 0; d < x.dim(); ++d)
    GS_CHECK(!r[d] || x.shape()[d] > 0, name, "cannot reduce over dim ", d, " of ", x.str(),
             ": it is empty, so "
             "there is no ",
             (std::string(name).find("max") != std::string::npos ? "maximum" : "minimum"),
             " to return. Check the size first (x.size(", d,
             ") > 0), or use a reduction that has a value on "
             "an empty set (sum gives 0, logsumexp -inf).");
}

static Tensor extreme(ReduceOp op, const char* name, const Tensor& x, const Dims& dims, bool keepdim) {
  auto r = reduced_flags(x, dims, name);
  check_nonempty_reduction(x, r, name);
  Tensor out = reduce_raw(op, x, r, x.dtype());
  Shape keep = out.shape();
  out = detail::make_alias(out, result_shape(x, r, keepdim), contiguous_strides(result_shape(x, r, keepdim)), 0);
  notify_op(name, {x}, out);
  if (needs_grad(x)) {
    std::vector<int64_t> rd;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (r[d]) rd.push_back(d);
    record(name, out, {&x},
           [sx = SavedTensor(x, name), so = SavedTensor(out, name, true), keep, rd](const Tensor& g, Node& n) {
             Tensor xv = sx.unpack(n), m = so.unpack(n).reshape(keep);
             Tensor hit = (xv.detach() == m.detach()).to(g.dtype());
             Tensor count = sum(hit, Dims(rd), true);
             return tensor_list{g.reshape(keep) * hit / count};
           });
  }
  return out;
}
Tensor amax(const Tensor& x, const Dims& dims, bool keepdim) {
  return extreme(ReduceOp::Max, "amax", x, dims, keepdim);
}
Tensor amin(const Tensor& x, const Dims& dims, bool keepdim) {
  return extreme(ReduceOp::Min, "amin", x, dims, keepdim);
}

// Index of the max (min) along `dim`; over the flattened tensor when dim is absent.
static Tensor arg_extreme(bool is_max, const char* name, const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  if (!dim) return arg_extreme(is_max, name, x.reshape({-1}), 0, false);
  const int64_t d = wrap_dim(*dim, x.dim(), name);
  GS_CHECK(x.dim() == 0 || x.shape()[d] > 0, name, "cannot take ", name, " over the empty dim ", d, " of ", x.str());
  if (x.dim() == 0) return zeros({}, kInt64);
  Shape ks = x.shape();
  ks[d] = 1;
  Tensor out = empty(ks, TensorOptions(kInt64).device(x.device()));
  backend_of(x).arg_reduce(is_max, out, x, d);
  if (!keepdim) out = out.squeeze(d);
  notify_op(name, {x}, out);
  return out;
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme(true, "argmax", x, dim, keepdim);
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme(false, "argmin", x, dim, keepdim);
}

// max(x, dim): the values; gather's backward sends the gradient to the first maximum.
Tensor max(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = wrap_dim(dim, x.dim(), "max");
  check_nonempty_reduction(x, reduced_flags(x, {d}, "max"), "max");
  Tensor idx = argmax(x, d, true);
  Tensor v = gather(x, d, idx);
  return keepdim ? v : v.squeeze(d);
}
Tensor min(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = wrap_dim(dim, x.dim(), "min");
  check_nonempty_reduction(x, reduced_flags(x, {d}, "min"), "min");
  Tensor idx = argmin(x, d, true);
  Tensor v = gather(x, d, idx);
  return keepdim ? v : v.squeeze(d);
}

// var = sum((x - mean)^2) / (n - unbiased), two passes (numerically safer than E[x^2] - E[x]^2)
// on x divided by its largest magnitude per slice, so that neither the deviations nor their
// squares overflow or underflow where the variance, or the std, is in range: var = q s^2 and
// std = sqrt(q) s, q the variance of x / s. The backwards are written out (g 2 (x - mean) / (n - u)
// and g (x - mean) / ((n - u) std)), finite wherever the results are.
namespace {
struct Spread {
  std::vector<bool> r;
  int64_t n = 1, denom = 1;
};
Spread spread_of(const Tensor& x, const Dims& dims, bool unbiased, const char* op) {
  GS_CHECK(x.is_floating_point(), op, "std and var only support floating-point tensors (as in PyTorch), got ",
           x.str(), "; convert first: x.to(gs::kFloat32)");
  Spread sp;
  sp.r = reduced_flags(x, dims, op);
  for (int64_t d = 0; d < x.dim(); ++d)
    if (sp.r[d]) sp.n *= x.shape()[d];
  sp.denom = sp.n - (unbiased ? 1 : 0);
  GS_CHECK(sp.denom > 0, op, "needs at least ", unbiased ? 2 : 1, " elements per reduction, got ", sp.n, " in ",
           x.str(), (unbiased ? "; pass unbiased=false for a single element" : ""));
  return sp;
}
// x - mean(x) as (x / s - mean(x / s)) and s, s the detached largest |x| per slice: x - mean
// overflows for values of both signs near the max. Differentiable (s is a constant).
std::pair<Tensor, Tensor> centered(const Tensor& x, const Dims& dims) {
  Tensor s;
  {
    NoGradGuard ng;
    Tensor m = amax(abs(x.detach()), dims, true);
    s = where(logical_and(m > 0.0, isfinite(m)), m, ones_like(m));
  }
  Tensor c = x / s;
  return {c - mean(c, dims, true), s};
}
// q and s (keepdim shapes), without autograd.
std::pair<Tensor, Tensor> scaled_variance(const Tensor& x, const Dims& dims, const Spread& sp) {
  NoGradGuard ng;
  Tensor m = amax(abs(x), dims, true);
  Tensor s = where(logical_and(m > 0.0, isfinite(m)), m, ones_like(m));
  Tensor c = x / s;
  c = c - mean(c, dims, true);
  return {sum(c * c, dims, true) / static_cast<double>(sp.denom), s};
}
}  // namespace

Tensor var(const Tensor& x, const Dims& dims, bool unbiased, bool keepdim) {
  // float16/bfloat16: in float32, one rounding at the end.
  if (x.is_floating_point() && is_reduced_float(x.dtype()))
    return var(x.to(kFloat32), dims, unbiased, keepdim).to(x.dtype());
  const Spread sp = spread_of(x, dims, unbiased, "var");
  auto [q, s] = scaled_variance(x, dims, sp);
  Tensor v;
  {
    NoGradGuard ng;
    v = (q * s * s).reshape(result_shape(x, sp.r, keepdim));
  }
  if (needs_grad(x))
    record("var", v, {&x},
           [sx = SavedTensor(x, "var"), dims, keep = keepdim_shape(x, sp.r), k = 2.0 / static_cast<double>(sp.denom)](
               const Tensor& g, Node& n) {
             Tensor xv = sx.unpack(n);
             auto [c, s] = centered(xv, dims);
             // g 2 (x - mean) / (n - u), g first: (x - mean) 2 alone overflows near the max
             const Tensor gc = g.reshape(keep) * c;
             return tensor_list{k <= 1 ? gc * (s * k) : (gc * s) * k};
           });
  return v;
}

// std = sqrt(var). At zero spread (a constant row) the derivative of sqrt is infinite and var's
// is 0; like PyTorch, the gradient there is the subgradient 0.
Tensor std(const Tensor& x, const Dims& dims, bool unbiased, bool keepdim) {
  // float16/bfloat16: in float32, one rounding at the end (not the sqrt of a rounded variance,
  // which underflows to 0 for a spread near the dtype's smallest values).
  if (x.is_floating_point() && is_reduced_float(x.dtype()))
    return std(x.to(kFloat32), dims, unbiased, keepdim).to(x.dtype());
  const Spread sp = spread_of(x, dims, unbiased, "std");
  auto [q, s] = scaled_variance(x, dims, sp);
  Tensor out;
  {
    NoGradGuard ng;
    out = (sqrt(q) * s).reshape(result_shape(x, sp.r, keepdim));
  }
  if (needs_grad(x))
    record("std", out, {&x},
           [sx = SavedTensor(x, "std"), dims, keep = keepdim_shape(x, sp.r), denom = static_cast<double>(sp.denom)](
               const Tensor& g, Node& n) {
             // g (x - mean) / ((n - u) std) = g c / ((n - u) sqrt(q)) in the scaled terms (s cancels):
             // neither the rounded std (few digits when subnormal) nor x - mean (overflows) enters.
             auto [c, s] = centered(sx.unpack(n), dims);
             Tensor rq = sqrt(sum(c * c, dims, true) / denom);
             Tensor flat = rq.detach() == 0.0;
             // 1 in the masked places keeps the unused branch finite (no inf in a double backward).
             Tensor safe = where(flat, ones_like(rq.detach()), rq);
             Tensor zero = zeros({}, TensorOptions(g.dtype()).device(g.device()));
             return tensor_list{where(flat, zero, (g.reshape(keep) * c) / (safe * denom))};
           });
  return out;
}

// ---- softmax family --------------------------------------------------------------
// The kernel works on the last dim of a contiguous tensor; other dims are moved there.
static Tensor softmax_forward(const Tensor& x, int64_t d, bool log, const char* name) {
  GS_CHECK(x.is_floating_point(), name, "expects a floating-point tensor, got ", x.str(),
           " (PyTorch has no integer softmax either); convert first: x.to(gs::kFloat32)");
  if (x.dim() == 0) return log ? zeros_like(x) : ones_like(x);
  const bool last = d == x.dim() - 1;
  Tensor in = detail::contiguous_raw(last ? x : detail::transpose_raw(x, d, x.dim() - 1));
  Tensor out = empty(in.shape(), TensorOptions(x.dtype()).device(x.device()));
  backend_of(x).softmax_lastdim(out, in, log);
  return last ? out : detail::contiguous_raw(detail::transpose_raw(out, d, x.dim() - 1));
}

Tensor softmax(const Tensor& x, int64_t dim) {
  if (autocast_enabled()) [[unlikely]] {
    detail::AutocastScope ac("softmax");
    return softmax(ac.cast(x), dim);
  }
  const int64_t d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "softmax");
  Tensor y = softmax_forward(x, d, false, "softmax");
  notify_op("softmax", {x}, y);
  if (needs_grad(x))  // dx = y * (g - sum(g * y, dim))
    record("softmax", y, {&x}, [sy = SavedTensor(y, "softmax", true), d](const Tensor& g, Node& n) {
      Tensor yv = sy.unpack(n);
      return tensor_list{yv * (g - sum(g * yv, {d}, true))};
    });
  return y;
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  if (autocast_enabled()) [[unlikely]] {
    detail::AutocastScope ac("log_softmax");
    return log_softmax(ac.cast(x), dim);
  }
  const int64_t d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "log_softmax");
  Tensor y = softmax_forward(x, d, true, "log_softmax");
  notify_op("log_softmax", {x}, y);
  if (needs_grad(x))  // dx = g - exp(y) * sum(g, dim)
    record("log_softmax", y, {&x}, [sy = SavedTensor(y, "log_softmax", true), d](const Tensor& g, Node& n) {
      Tensor yv = sy.unpack(n);
      return tensor_list{g - exp(yv) * sum(g, {d}, true)};
    });
  return y;
}

// logsumexp = m + log(sum(exp(x - m))) with m the (detached) max: never overflows.
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim) {
  if (autocast_enabled()) [[unlikely]] {
    detail::AutocastScope ac("logsumexp");
    return logsumexp(ac.cast(x), dims, keepdim);
  }
  GS_CHECK(x.is_floating_point(), "logsumexp", "expects a floating-point tensor, got ", x.str(),
           "; convert first: x.to(gs::kFloat32)");
  {
    // Over an empty dim: log(0) = -inf, as in PyTorch (sum keeps the graph and the shape).
    auto r = reduced_flags(x, dims, "logsumexp");
    for (int64_t d = 0; d < x.dim(); ++d)
      if (r[d] && x.shape()[d] == 0) return sum(x, dims, keepdim) - std::numeric_limits<double>::infinity();
  }
  // float16/bfloat16: exp and the sum in float32, one rounding at the end.
  if (is_reduced_float(x.dtype())) return logsumexp(x.to(kFloat32), dims, keepdim).to(x.dtype());
  Tensor m = amax(x.detach(), dims, true);
  m = where(isinf(m), zeros_like(m), m);  // all -inf rows: avoid inf - inf
  Tensor s = log(sum(exp(x - m), dims, true)) + m;
  if (!keepdim) {
    auto r = reduced_flags(x, dims, "logsumexp");
    s = s.reshape(result_shape(x, r, false));
  }
  return s;
}

}  // namespace gradsleuth
