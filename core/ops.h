// Every op of the engine as a free function (the Tensor methods forward here).
// Each is differentiable where that is meaningful; its forward, what it saves
// and its backward sit side by side in ops/*.cpp. All are listed by name in the
// op registry (op_registry.h).
//
// Dimension letters: B = batch, N = rows, K = inner, M = columns,
// C = channels, H/W = height/width, D = features.
#pragma once
#include <optional>

#include "core/tensor.h"

namespace gradsleuth {

// ---- type promotion (docs/dtypes.md) ----------------------------------------
// The dtype an op on these operands computes in (torch.result_type): tensors with dims
// outrank 0-dim tensors, which outrank C++ numbers, except where a lower tier brings a
// higher category (bool < integral < floating). Every op below decides its dtype here.
inline PromotionOperand promotion_operand(const Tensor& t) {
  if (t.impl().wrapped_number) return {t.dtype(), PromotionTier::Number};
  return {t.dtype(), t.dim() > 0 ? PromotionTier::Dimensioned : PromotionTier::ZeroDim};
}
inline PromotionOperand promotion_operand(const Scalar& s) { return {s.dtype(), PromotionTier::Number}; }
inline DType result_type(const Tensor& a, const Tensor& b) {
  return result_type({promotion_operand(a), promotion_operand(b)});
}
inline DType result_type(const Tensor& a, const Scalar& b) {
  return result_type({promotion_operand(a), promotion_operand(b)});
}
inline DType result_type(const Scalar& a, const Tensor& b) {
  return result_type({promotion_operand(a), promotion_operand(b)});
}
inline DType result_type(const Scalar& a, const Scalar& b) {
  return result_type({promotion_operand(a), promotion_operand(b)});
}

// ---- elementwise, with NumPy broadcasting (ops/elementwise.cpp) -------------
// The binary ops take a tensor or a C++ number (Scalar) on the right; a number computes
// in result_type's dtype: int64 * 2 -> int64, int64 * 2.0 -> float32.
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);  // a + alpha * b
Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);  // a - alpha * b
Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Scalar& b);
Tensor div(const Tensor& a, const Tensor& b);  // true division: integers give float32
Tensor div(const Tensor& a, const Scalar& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Scalar& exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Scalar& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Scalar& b);
// The floating ops (exp, log, sqrt, rsqrt, reciprocal, erf, log1p, sin, cos, sigmoid, tanh, gelu,
// softplus) of an int64 or bool tensor compute in float32, as in PyTorch.
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);  // 1 / sqrt(x)
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);  // not differentiable (zero gradient)
Tensor square(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);  // exp(x) - 1, accurate for small |x|
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
// Computes in result_type(x, lo, hi): clamp(int64 x, 0.5) is float32.
Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi);
Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor gelu(const Tensor& x);  // exact: x * Phi(x)
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
// Comparisons give bool tensors and are not differentiable; they compare in result_type.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Scalar& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Scalar& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Scalar& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Scalar& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Scalar& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Scalar& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);  // cond ? a : b, broadcast, result_type(a, b)
// Keeps x's dtype; the value must fit it (check_scalar_fits: 2.5 into int64 is an error).
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);
// Casts (differentiable between floating types).
Tensor to_dtype(const Tensor& x, DType t);
// Reduces a broadcast gradient back to `shape` by summing the expanded dims.
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- reductions (ops/reduce.cpp) -------------------------------------------
// `dims` empty means all dims.
Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);  // floating x only (PyTorch)
Tensor amax(const Tensor& x, const Dims& dims = {}, bool keepdim = false);  // ties share the gradient
Tensor amin(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);  // values along dim
Tensor min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor var(const Tensor& x, const Dims& dims = {}, bool unbiased = true, bool keepdim = false);
Tensor std(const Tensor& x, const Dims& dims = {}, bool unbiased = true, bool keepdim = false);
// Numerically stable: softmax(x) = exp(x - max) / sum exp(x - max).
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim = false);

// ---- linear algebra (ops/linalg.cpp) ---------------------------------------
// 1-D/2-D/batched with broadcasting batch dims, like torch.matmul:
//   (N, K) @ (K, M) -> (N, M);   (B, N, K) @ (K, M) -> (B, N, M);   (K) @ (K) -> ()
Tensor matmul(const Tensor& a, const Tensor& b);
// y = x @ w^T + b for x (B, in), w (out, in), b (out)
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());

// ---- indexing and joining (ops/index.cpp) ----------------------------------
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// weight (V, D), indices int64 of any shape (...) -> (..., D)
Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor cat(const tensor_list& ts, int64_t dim = 0);
Tensor stack(const tensor_list& ts, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split_with_sizes(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);

// ---- convolution, pooling, dropout (ops/conv.cpp) ---------------------------
// x (N, C, H, W), weight (O, C/groups, kH, kW), bias (O) -> (N, O, outH, outW)
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Dims stride = {1, 1},
              Dims padding = {0, 0}, Dims dilation = {1, 1}, int64_t groups = 1);
namespace detail {
// Whether conv2d may use the backend's fused kernel (on by default; process-wide).
// Off, every conv2d runs the composite unfold + matmul path, the reference the
// tests compare the fused kernel with.
void set_conv2d_fused(bool enabled);
bool conv2d_fused();
}  // namespace detail
// How the CPU computes a float32 convolution with a 3x3 kernel, stride 1, dilation 1 and
// padding 1 that has at least 8 input channels (its forward), 8 output channels (its
// input gradient) or both (its weight gradient); every other convolution, and all of
// float64, is im2col + GEMM.
//   Auto  Winograd (core/cpu/fast/winograd.h): F(2x2, 3x3) for the forward and the input
//         gradient, F(3x3, 2x2) summed over the batch for the weight gradient; 2.25x fewer
//         multiply-adds, about 2x faster for a small CNN's inner layers. Its transforms mix
//         the nine taps, so each output's float32 error follows its window's |x| times the
//         largest |w| rather than the sum of |x||w| tap by tap: as small as GEMM's on
//         ordinary activations, up to hundreds of times larger when a large input is read
//         through a small weight.
//   Gemm  im2col + GEMM everywhere (the bound of a plain dot product per output).
// Process-wide; the default is Auto.
enum class ConvAlgorithm { Auto, Gemm };
void set_conv_algorithm(ConvAlgorithm algorithm);
ConvAlgorithm conv_algorithm();
Tensor max_pool2d(const Tensor& x, Dims kernel, Dims stride = {}, Dims padding = {0, 0}, Dims dilation = {1, 1});
Tensor avg_pool2d(const Tensor& x, Dims kernel, Dims stride = {}, Dims padding = {0, 0});
// Zeroes each element with probability p and scales the rest by 1/(1-p) (training only).
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

}  // namespace gradsleuth
