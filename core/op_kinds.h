// The kinds of kernels a backend implements (unary/binary/reduce op codes, conv
// geometry), with no dependency on Tensor, so device code (cuda/*.cu) can use them.
#pragma once
#include <cstdint>

namespace gradsleuth {

enum class UnaryOp : uint8_t {
  Neg, Exp, Log, Sqrt, Abs, Sign, Relu, Sigmoid, Tanh, Erf, Reciprocal, Square,
  Log1p, Expm1, Sin, Cos, LogicalNot, IsNan, IsInf, IsFinite,
  kCount
};
enum class BinaryOp : uint8_t {
  Add, Sub, Mul, Div, Pow, Maximum, Minimum,
  Eq, Ne, Lt, Le, Gt, Ge, LogicalAnd, LogicalOr,  // these produce bool
  kCount
};
enum class ReduceOp : uint8_t { Sum, Max, Min, kCount };
const char* unary_op_name(UnaryOp op);
const char* binary_op_name(BinaryOp op);
inline bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }

// Convolution geometry, NCHW. Output size: (H + 2*pad - dil*(k-1) - 1) / stride + 1.
struct Conv2dGeometry {
  int64_t N, C, H, W;        // input
  int64_t kH, kW;            // kernel
  int64_t sH, sW, pH, pW, dH, dW;
  int64_t outH, outW;
};

}  // namespace gradsleuth
