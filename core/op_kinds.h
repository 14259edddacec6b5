// The kinds of kernels a backend implements (unary/binary/reduce op codes, conv
// geometry), with no dependency on Tensor, so device code (cuda/*.cu) can use them.
//
// Each op-code list is one X-macro: X(Enumerator, name), where `name` is the op's name and, for
// the unary and binary lists, also its public function in core/ops.h (`name(x)`, `name(a, b)`).
// The enum, its name table (core/backend.cpp, #name) and the op registry's rows for the unary
// and binary ops (core/op_registry.cpp, which calls gradsleuth::name) are generated from it, so a
// new kernel op is one line here, its CPU and CUDA kernels, its public function with its backward,
// and one line of sampling traits in op_registry.cpp (the build fails without it); the registry
// row, the gradient check and the CUDA comparison follow. tests/test_op_list.cpp checks the
// names, that every enumerator has a registry row and that every op of core/ops.h is registered.
#pragma once
#include <cstdint>

namespace gradsleuth {

// The op lists, several to a line:
// clang-format off
#define GS_UNARY_OPS(X)                                                                            \
  X(Neg, neg) X(Exp, exp) X(Log, log) X(Sqrt, sqrt) X(Abs, abs) X(Sign, sign)                      \
  X(Relu, relu) X(Sigmoid, sigmoid) X(Tanh, tanh) X(Erf, erf) X(Reciprocal, reciprocal)            \
  X(Square, square) X(Log1p, log1p) X(Expm1, expm1) X(Sin, sin) X(Cos, cos) X(Rsqrt, rsqrt)        \
  X(LogicalNot, logical_not) X(IsNan, isnan) X(IsInf, isinf) X(IsFinite, isfinite)
// The comparisons and logical ops (Eq onwards) produce bool: keep them last (is_comparison).
#define GS_BINARY_OPS(X)                                                                           \
  X(Add, add) X(Sub, sub) X(Mul, mul) X(Div, div) X(Pow, pow) X(Maximum, maximum)                  \
  X(Minimum, minimum) X(Eq, eq) X(Ne, ne) X(Lt, lt) X(Le, le) X(Gt, gt) X(Ge, ge)                  \
  X(LogicalAnd, logical_and) X(LogicalOr, logical_or)
#define GS_REDUCE_OPS(X) X(Sum, sum) X(Max, max) X(Min, min)
// clang-format on

#define GS_OP_ENUMERATOR(e, name) e,
enum class UnaryOp : uint8_t { GS_UNARY_OPS(GS_OP_ENUMERATOR) kCount };
enum class BinaryOp : uint8_t { GS_BINARY_OPS(GS_OP_ENUMERATOR) kCount };
enum class ReduceOp : uint8_t { GS_REDUCE_OPS(GS_OP_ENUMERATOR) kCount };
#undef GS_OP_ENUMERATOR
const char* unary_op_name(UnaryOp op);
const char* binary_op_name(BinaryOp op);
const char* reduce_op_name(ReduceOp op);
inline bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }

// Convolution geometry, NCHW. Output size: (H + 2*pad - dil*(k-1) - 1) / stride + 1.
struct Conv2dGeometry {
  int64_t N, C, H, W;  // input
  int64_t kH, kW;      // kernel
  int64_t sH, sW, pH, pW, dH, dW;
  int64_t outH, outW;
};

}  // namespace gradsleuth
