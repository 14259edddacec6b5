// Convolution (im2col + GEMM), pooling and dropout, NCHW.
//
// conv2d has two paths with one result:
//  - the composite (conv2d_composite below, the readable reference): differentiable
//    ops only, so autograd derives its backward:
//      cols = unfold(x)                          (N, CK, L)   CK = C*kH*kW, L = outH*outW
//      out  = W.view(O, CK) @ cols.view(CK, N*L)  (O, N*L) -> view (N, O, outH, outW)
//    unfold writes its columns batch-inside, (CK, N, L) in memory, so the whole batch is
//    ONE GEMM (and its backward two: dW = dOut (O, N*L) @ cols^T, dCols = W^T @ dOut)
//    instead of N small ones. unfold's backward is fold (col2im) and the GEMM's
//    backward is matmul's.
//  - the fused op (conv2d_fused, groups = 1): the backend's conv2d_forward/backward
//    kernels (CPU: core/cpu/fast/conv2d.cpp, one sample's columns at a time in cache,
//    bias added in the same pass), ONE autograd node "conv2d" with a hand-written
//    backward. Under create_graph that backward is the same formulas in
//    differentiable ops (conv2d_backward_composite), so second derivatives still work.
// A backend without a fused kernel (CUDA) returns false and gets the composite.
#include <atomic>

#include "core/generator.h"
#include "core/ops/op_utils.h"

namespace gradsleuth {

namespace {

// Reads a 1- or 2-entry list ({k} means {k, k}).
std::pair<int64_t, int64_t> pair_of(const Dims& d, const char* op, const char* what, std::pair<int64_t, int64_t> dflt) {
  if (d.empty()) return dflt;
  GS_CHECK(d.size() <= 2, op, what, " must have 1 or 2 entries, got ", shape_str(d));
  return d.size() == 1 ? std::make_pair(d[0], d[0]) : std::make_pair(d[0], d[1]);
}

Conv2dGeometry geometry(const Tensor& x, int64_t kH, int64_t kW, const Dims& stride, const Dims& padding,
                        const Dims& dilation, const char* op, bool stride_defaults_to_kernel) {
  GS_CHECK(x.dim() == 4, op, "expects a 4-D input (N, C, H, W), got ", x.str(),
           (x.dim() == 3 ? ". For a single image add the batch dim with unsqueeze(0)." : ""));
  Conv2dGeometry g{};
  g.N = x.size(0);
  g.C = x.size(1);
  g.H = x.size(2);
  g.W = x.size(3);
  g.kH = kH;
  g.kW = kW;
  auto [sH, sW] = pair_of(stride, op, "stride",
                          stride_defaults_to_kernel ? std::make_pair(kH, kW) : std::make_pair<int64_t, int64_t>(1, 1));
  auto [pH, pW] = pair_of(padding, op, "padding", {0, 0});
  auto [dH, dW] = pair_of(dilation, op, "dilation", {1, 1});
  g.sH = sH;
  g.sW = sW;
  g.pH = pH;
  g.pW = pW;
  g.dH = dH;
  g.dW = dW;
  GS_CHECK(kH > 0 && kW > 0 && sH > 0 && sW > 0 && dH > 0 && dW > 0 && pH >= 0 && pW >= 0, op,
           "kernel, stride and dilation must be positive and padding non-negative (kernel ", kH, "x", kW, ", stride ",
           sH, "x", sW, ", padding ", pH, "x", pW, ", dilation ", dH, "x", dW, ")");
  // Checked, and floor (not truncating) division: a kernel larger than the padded
  // input has a negative numerator, which C++ would truncate to an output of 1.
  const int64_t spanH = checked_add(checked_mul(dH, kH - 1, op), 1, op),
                spanW = checked_add(checked_mul(dW, kW - 1, op), 1, op);
  const int64_t inH = checked_add(g.H, checked_mul(2, pH, op), op), inW = checked_add(g.W, checked_mul(2, pW, op), op);
  g.outH = inH < spanH ? 0 : (inH - spanH) / sH + 1;
  g.outW = inW < spanW ? 0 : (inW - spanW) / sW + 1;
  GS_CHECK(g.outH > 0 && g.outW > 0, op, "the input ", x.str(), " is too small for a ", kH, "x", kW,
           " kernel with padding ", pH, "x", pW, " and dilation ", dH, "x", dW, ": the output would be ", g.outH, "x",
           g.outW, ". Add padding or use a smaller kernel.");
  return g;
}

Tensor fold(const Tensor& cols, const Conv2dGeometry& g);

// im2col as a differentiable op: (N, C, H, W) -> (N, C*kH*kW, outH*outW), laid out
// in memory as (C*kH*kW, N, outH*outW) (see the top of this file).
Tensor unfold(const Tensor& x, const Conv2dGeometry& g) {
  Tensor xc = detail::contiguous_raw(x);
  const int64_t CK = g.C * g.kH * g.kW, L = g.outH * g.outW;
  Tensor buf = empty({CK, g.N, L}, TensorOptions(x.dtype()).device(x.device()));
  Tensor cols = detail::transpose_raw(buf, 0, 1);  // (N, CK, L), strides (L, N*L, 1)
  backend_of(x).im2col(cols, xc, g);
  if (needs_grad(x)) record("unfold", cols, {&x}, [g](const Tensor& gr, Node&) { return tensor_list{fold(gr, g)}; });
  return cols;
}

// col2im: the adjoint of unfold (overlapping patches add up).
Tensor fold(const Tensor& cols, const Conv2dGeometry& g) {
  Tensor out = zeros({g.N, g.C, g.H, g.W}, TensorOptions(cols.dtype()).device(cols.device()));
  // The kernel takes any strides along N and CK, but unit stride along L.
  const bool unit_l = cols.stride(2) == 1 || cols.size(2) == 1;
  backend_of(cols).col2im(out, unit_l ? cols : detail::contiguous_raw(cols), g);
  if (needs_grad(cols))
    record("fold", out, {&cols}, [g](const Tensor& gr, Node&) { return tensor_list{unfold(gr, g)}; });
  return out;
}

// The composite path: differentiable ops only, so autograd derives the backward
// (and every higher derivative). It runs when the backend has no fused kernel for
// the case (CUDA, groups > 1, mixed dtypes) and is the reference the fused one is
// tested against.
Tensor conv2d_composite(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& g,
                        int64_t groups) {
  const int64_t O = weight.size(0), Cg = weight.size(1);
  Tensor cols = unfold(x, g);  // (N, C*kk, L)
  const int64_t kk = g.kH * g.kW, L = g.outH * g.outW;
  Tensor out;
  if (groups == 1) {
    // (O, CK) @ (CK, N*L) -> (O, N*L): cols is (CK, N, L) in memory, so these are views.
    Tensor cols2 = cols.permute({1, 0, 2}).reshape({Cg * kk, g.N * L});
    out = matmul(weight.reshape({O, Cg * kk}), cols2).view({O, g.N, L}).permute({1, 0, 2});  // (N, O, L) view
  } else {
    const int64_t Og = O / groups;
    tensor_list parts;
    for (int64_t gi = 0; gi < groups; ++gi)
      parts.push_back(
          matmul(weight.narrow(0, gi * Og, Og).reshape({Og, Cg * kk}), cols.narrow(1, gi * Cg * kk, Cg * kk)));
    out = cat(parts, 1);
  }
  out = out.reshape({g.N, O, g.outH, g.outW});
  // The bias add writes a fresh contiguous (N, O, outH, outW); without a bias, copy
  // once so that conv2d's output is contiguous like every other op's.
  return bias.defined() ? out + bias.view({1, O, 1, 1}) : out.contiguous();
}

// The fused node's first-order formulas written with differentiable ops (groups = 1):
//   dx = fold(W^T @ dOut),  dW = sum_n dOut[n] @ unfold(x)[n]^T,  db = dOut summed over (N, H, W).
// The backward runs them under create_graph, so that a second derivative through
// conv2d (a gradient penalty, a Hessian-vector product) keeps every term: dx
// depends on W and dOut, dW on x and dOut.
tensor_list conv2d_backward_composite(const Tensor& gr, const Tensor& x, const Tensor& w, const Conv2dGeometry& g,
                                      bool need_x, bool need_w, bool need_b) {
  const int64_t O = gr.size(1), CK = g.C * g.kH * g.kW, L = g.outH * g.outW;
  Tensor g3 = gr.reshape({g.N, O, L});
  Tensor gx = need_x ? fold(matmul(w.reshape({O, CK}).t(), g3), g) : Tensor();
  Tensor gw = need_w ? matmul(g3, unfold(x, g).transpose(1, 2)).sum({0}).reshape(w.shape()) : Tensor();
  Tensor gb = need_b ? gr.sum({0, 2, 3}) : Tensor();
  return tensor_list{gx, gw, gb};
}

std::atomic<bool> g_conv2d_fused{true};
std::atomic<ConvAlgorithm> g_conv_algorithm{ConvAlgorithm::Auto};

// The fused path (groups = 1): the backend computes the output in one op, bias
// included, and the backward with its own kernels (CPU: core/cpu/fast/conv2d.cpp).
// Returns an undefined tensor when the backend has no kernel for the case.
Tensor conv2d_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& g) {
  const int64_t O = weight.size(0);
  if (!backend_of(x).conv2d_fused_supported(g, O, x.dtype())) return Tensor();  // before allocating
  Tensor out = empty({g.N, O, g.outH, g.outW}, TensorOptions(x.dtype()).device(x.device()));
  if (!backend_of(x).conv2d_forward(out, detail::contiguous_raw(x), detail::contiguous_raw(weight),
                                    bias.defined() ? detail::contiguous_raw(bias) : Tensor(), g))
    return Tensor();
  // One op for the observers (the profiler, anomaly mode, half-precision emulation).
  if (bias.defined())
    notify_op("conv2d", {x, weight, bias}, out);
  else
    notify_op("conv2d", {x, weight}, out);
  const bool nx = needs_grad(x), nw = needs_grad(weight), nb = needs_grad(bias);
  if (!(nx || nw || nb)) return out;
  // x is needed for dW only and W for dx only: a frozen weight keeps no input alive.
  // Saved, not captured: an in-place change of x or W before backward is an error.
  record("conv2d", out, {&x, &weight, bias.defined() ? &bias : nullptr},
         [sx = SavedTensor(nw ? x : Tensor(), "conv2d"), sw = SavedTensor(nx ? weight : Tensor(), "conv2d"), g, nx, nw,
          nb, wshape = weight.shape(), O, dt = x.dtype()](const Tensor& gr, Node& n) {
           const Tensor xv = sx.defined() ? sx.unpack(n) : Tensor();
           const Tensor wv = sw.defined() ? sw.unpack(n) : Tensor();
           // create_graph: the backward must itself be differentiable.
           // Inside a 16-bit backward the saved tensors come widened to float32; the backend's kernel
           // takes the 16-bit gradient beside them (it widens it) and rounds its results once.
           const bool widened = detail::backward_widened() && is_reduced_float(dt);
           if (GradMode::is_enabled() || (gr.dtype() != dt && !widened))
             return conv2d_backward_composite(gr, xv, wv, g, nx, nw, nb);
           const TensorOptions opt = TensorOptions(gr.dtype()).device(gr.device());
           Tensor gx = nx ? empty({g.N, g.C, g.H, g.W}, opt) : Tensor();
           Tensor gw = nw ? empty(wshape, opt) : Tensor();
           Tensor gb = nb ? empty({O}, opt) : Tensor();
           if (!backend_of(gr).conv2d_backward(gx, gw, gb, detail::contiguous_raw(gr),
                                               nw ? detail::contiguous_raw(xv) : Tensor(),
                                               nx ? detail::contiguous_raw(wv) : Tensor(), g))
             return conv2d_backward_composite(gr, xv, wv, g, nx, nw, nb);
           return tensor_list{gx, gw, gb};
         });
  return out;
}

}  // namespace

void set_conv_algorithm(ConvAlgorithm algorithm) {
  GS_CHECK(algorithm == ConvAlgorithm::Auto || algorithm == ConvAlgorithm::Gemm, "set_conv_algorithm", "value ",
           static_cast<int>(algorithm), " is not a ConvAlgorithm; pass ConvAlgorithm::Auto or ConvAlgorithm::Gemm");
  g_conv_algorithm.store(algorithm, std::memory_order_relaxed);
}
ConvAlgorithm conv_algorithm() { return g_conv_algorithm.load(std::memory_order_relaxed); }

namespace detail {
void set_conv2d_fused(bool enabled) { g_conv2d_fused.store(enabled, std::memory_order_relaxed); }
bool conv2d_fused() { return g_conv2d_fused.load(std::memory_order_relaxed); }
}  // namespace detail

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Dims stride, Dims padding, Dims dilation,
              int64_t groups) {
  if (autocast_enabled()) [[unlikely]] {
    detail::AutocastScope ac("conv2d");
    return conv2d(ac.cast(x), ac.cast(weight), ac.cast(bias), stride, padding, dilation, groups);
  }
  detail::check_same_device("conv2d", x, weight);
  GS_CHECK(weight.dim() == 4, "conv2d", "weight must be 4-D (out_channels, in_channels/groups, kH, kW), got ",
           weight.str());
  GS_CHECK(groups > 0, "conv2d", "groups must be positive, got ", groups);
  GS_CHECK(x.is_floating_point(), "conv2d", "expects a floating-point input, got ", x.str());
  const int64_t O = weight.size(0), Cg = weight.size(1);
  Conv2dGeometry g = geometry(x, weight.size(2), weight.size(3), stride, padding, dilation, "conv2d", false);
  GS_CHECK(g.C == Cg * groups, "conv2d", "input ", x.str(), " has ", g.C, " channels but the weight ", weight.str(),
           " expects ", Cg * groups, " (in_channels/groups = ", Cg, ", groups = ", groups, ")");
  GS_CHECK(O % groups == 0, "conv2d", "out_channels ", O, " is not divisible by groups ", groups);
  if (bias.defined())
    GS_CHECK(bias.dim() == 1 && bias.size(0) == O, "conv2d", "bias must be 1-D of size ", O, ", got ", bias.str());
  // The fused kernel takes one dtype throughout (mixed dtypes promote in the composite path).
  const bool fusable = groups == 1 && detail::conv2d_fused() && weight.dtype() == x.dtype() &&
                       (!bias.defined() || (bias.dtype() == x.dtype() && bias.device() == x.device()));
  if (fusable) {
    Tensor out = conv2d_fused(x, weight, bias, g);
    if (out.defined()) return out;
  }
  // float16/bfloat16 without the fused kernel: the composite in float32, rounded once (its inner
  // gradients would otherwise be rounded between its ops and overflow near the max).
  if (is_reduced_float(x.dtype()) && weight.dtype() == x.dtype() && (!bias.defined() || bias.dtype() == x.dtype()))
    return conv2d_composite(x.to(kFloat32), weight.to(kFloat32), bias.defined() ? bias.to(kFloat32) : bias, g, groups)
        .to(x.dtype());
  return conv2d_composite(x, weight, bias, g, groups);
}

namespace {

// Pooling backwards are ops of their own, recorded when create_graph asks for a
// graph of the backward: without that, the backward's output would have no history
// and a second derivative through pooling would silently drop the pooling term.
//   max pool:  gi = scatter of g at the argmax positions; d(gi)/d(g) is the gather of
//              the incoming gradient at those positions. d(gi)/d(x) is 0: the argmax
//              is piecewise constant in x.
//   avg pool:  gi = A^T g for the linear map A = avg_pool2d; d(gi)/d(g) = A, the pool itself.
Tensor max_pool2d_backward(const Tensor& gr, const Tensor& argmax, const Conv2dGeometry& g) {
  // Uninitialised: the kernel writes every element (the zeros too; the 2x2 pool's kernel
  // writes each window directly instead of scattering into a zero-filled buffer).
  Tensor gi = empty({g.N, g.C, g.H, g.W}, TensorOptions(gr.dtype()).device(gr.device()));
  backend_of(gr).max_pool2d_backward(gi, detail::contiguous_raw(gr), argmax, g);
  if (needs_grad(gr))
    record("max_pool2d_backward", gi, {&gr}, [argmax, g](const Tensor& ggi, Node&) {
      const int64_t L = g.outH * g.outW;
      Tensor picked = gather(ggi.reshape({g.N, g.C, g.H * g.W}), 2, argmax.reshape({g.N, g.C, L}));
      return tensor_list{picked.reshape({g.N, g.C, g.outH, g.outW})};
    });
  return gi;
}

Tensor avg_pool2d_backward(const Tensor& gr, const Conv2dGeometry& g);

// The forward without the public checks; its backward is avg_pool2d_backward.
Tensor avg_pool2d_forward(const Tensor& x, const Conv2dGeometry& g) {
  Tensor out = empty({g.N, g.C, g.outH, g.outW}, TensorOptions(x.dtype()).device(x.device()));
  backend_of(x).avg_pool2d(out, detail::contiguous_raw(x), g);
  if (needs_grad(x))  // each window's gradient is shared equally by its kH*kW inputs
    record("avg_pool2d", out, {&x}, [g](const Tensor& gr, Node&) { return tensor_list{avg_pool2d_backward(gr, g)}; });
  return out;
}

Tensor avg_pool2d_backward(const Tensor& gr, const Conv2dGeometry& g) {
  Tensor gi = zeros({g.N, g.C, g.H, g.W}, TensorOptions(gr.dtype()).device(gr.device()));
  backend_of(gr).avg_pool2d_backward(gi, detail::contiguous_raw(gr), g);
  if (needs_grad(gr))
    record("avg_pool2d_backward", gi, {&gr},
           [g](const Tensor& ggi, Node&) { return tensor_list{avg_pool2d_forward(ggi, g)}; });
  return gi;
}

}  // namespace

Tensor max_pool2d(const Tensor& x, Dims kernel, Dims stride, Dims padding, Dims dilation) {
  auto [kH, kW] = pair_of(kernel, "max_pool2d", "kernel_size", {0, 0});
  Conv2dGeometry g = geometry(x, kH, kW, stride, padding, dilation, "max_pool2d", true);
  GS_CHECK(g.pH * 2 <= kH && g.pW * 2 <= kW, "max_pool2d", "padding ", g.pH, "x", g.pW,
           " must be at most half the kernel size ", kH, "x", kW);
  Tensor xc = detail::contiguous_raw(x);
  Tensor out = empty({g.N, g.C, g.outH, g.outW}, TensorOptions(x.dtype()).device(x.device()));
  Tensor argmax = empty({g.N, g.C, g.outH, g.outW}, TensorOptions(kInt64).device(x.device()));
  backend_of(x).max_pool2d(out, argmax, xc, g);
  notify_op("max_pool2d", {x}, out);
  if (needs_grad(x))  // the gradient goes to the element that won each window
    record("max_pool2d", out, {&x},
           [argmax, g](const Tensor& gr, Node&) { return tensor_list{max_pool2d_backward(gr, argmax, g)}; });
  return out;
}

Tensor avg_pool2d(const Tensor& x, Dims kernel, Dims stride, Dims padding) {
  auto [kH, kW] = pair_of(kernel, "avg_pool2d", "kernel_size", {0, 0});
  Conv2dGeometry g = geometry(x, kH, kW, stride, padding, {1, 1}, "avg_pool2d", true);
  GS_CHECK(g.pH * 2 <= kH && g.pW * 2 <= kW, "avg_pool2d", "padding ", g.pH, "x", g.pW,
           " must be at most half the kernel size ", kH, "x", kW);
  GS_CHECK(x.is_floating_point(), "avg_pool2d", "expects a floating-point input, got ", x.str());
  Tensor out = avg_pool2d_forward(x, g);
  notify_op("avg_pool2d", {x}, out);
  return out;
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  GS_CHECK(p >= 0.0 && p <= 1.0, "dropout", "probability must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return x * 0.0;
  Generator& G = gen ? *gen : default_generator();
  // keep ~ Bernoulli(1 - p), scaled so that E[output] = x. float16/bfloat16 draw in float32:
  // the same mask as a float32 x, compared with p unrounded.
  const DType udt = is_reduced_float(x.dtype()) ? kFloat32 : x.dtype();
  Tensor u = empty(x.shape(), TensorOptions(udt).device(x.device()));
  backend_of(x).uniform(u, 0.0, 1.0, G.seed(), G.reserve(static_cast<uint64_t>(x.numel()) * (udt == kFloat64 ? 2 : 1)));
  Tensor keep = (u >= p).to(x.dtype()) * (1.0 / (1.0 - p));
  return x * keep;
}

}  // namespace gradsleuth
