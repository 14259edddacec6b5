// core/elementwise_math.h: the scalar formula of every unary and binary kernel op of
// core/op_kinds.h, written once and called by both backends: the CPU loops
// (core/cpu/elementwise_unary.cpp, elementwise_binary.cpp) and the CUDA kernels
// (cuda/elementwise.cu). Plain C++ that nvcc also compiles: no core/tensor.h here.
//
// unary_formula<Op>(x) and binary_formula<Op>(a, b) hold the math, one `if constexpr` branch
// per op. An op of GS_UNARY_OPS / GS_BINARY_OPS without its branch stops every build at the
// static_assert below (the run-time switches here are generated from the lists, so each op
// is instantiated). A formula that returns bool is a predicate (isnan) or a comparison (eq,
// logical_and): the kernels write it to a bool tensor.
#pragma once
#include <math.h>

#include <cstdint>
#include <type_traits>

#include "core/host_device.h"
#include "core/op_kinds.h"

namespace gradsleuth::ew {

// The type transcendental functions are evaluated in: float for float, double otherwise.
template <class T>
using MathT = std::conditional_t<std::is_same_v<T, float>, float, double>;
template <class T>
GS_HOST_DEVICE constexpr MathT<T> to_math(T x) {
  return static_cast<MathT<T>>(x);
}
template <class T>
GS_HOST_DEVICE constexpr bool is_nan(T x) {
  if constexpr (std::is_floating_point_v<T>)
    return x != x;
  else
    return false;
}
template <class T>
GS_HOST_DEVICE constexpr bool is_inf(T x) {
  if constexpr (std::is_floating_point_v<T>)
    return x == static_cast<T>(INFINITY) || x == -static_cast<T>(INFINITY);
  else
    return false;
}
template <auto>
inline constexpr bool kNoFormula = false;

// Integer arithmetic wraps around (two's complement), as in PyTorch: int64 max + 1 is int64 min.
// Signed overflow is undefined in C++, so integers add, subtract and multiply in their unsigned
// type (at least unsigned int, so narrow types are not promoted back to int), where overflow is
// defined as wrapping. Floating and bool operands compute as written.
template <class T>
inline constexpr bool kWraps = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <class T>
using WrapU = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
template <class T>
GS_HOST_DEVICE constexpr T wrap_add(T a, T b) {
  if constexpr (kWraps<T>)
    return static_cast<T>(static_cast<WrapU<T>>(a) + static_cast<WrapU<T>>(b));
  else
    return static_cast<T>(a + b);
}
template <class T>
GS_HOST_DEVICE constexpr T wrap_sub(T a, T b) {
  if constexpr (kWraps<T>)
    return static_cast<T>(static_cast<WrapU<T>>(a) - static_cast<WrapU<T>>(b));
  else
    return static_cast<T>(a - b);
}
template <class T>
GS_HOST_DEVICE constexpr T wrap_mul(T a, T b) {
  if constexpr (kWraps<T>)
    return static_cast<T>(static_cast<WrapU<T>>(a) * static_cast<WrapU<T>>(b));
  else
    return static_cast<T>(a * b);
}
template <class T>
GS_HOST_DEVICE constexpr T wrap_neg(T x) {
  if constexpr (kWraps<T>)
    return wrap_sub(T(0), x);
  else
    return static_cast<T>(-x);
}
// a ** b for integers, by squaring, wrapping like wrap_mul. A negative exponent has no integer
// result: ops/ refuses it before any kernel runs; here it gives PyTorch's kernel values
// (1 ** b = 1, (-1) ** b = +-1, anything else 0) so the formula stays defined for every input.
template <class T>
GS_HOST_DEVICE constexpr T int_pow(T a, T b) {
  if (b < 0) return a == T(1) ? T(1) : a == T(-1) ? ((b & 1) ? T(-1) : T(1)) : T(0);
  T r = 1;
  while (b > 0) {
    if (b & 1) r = wrap_mul(r, a);
    b = static_cast<T>(b >> 1);
    if (b > 0) a = wrap_mul(a, a);
  }
  return r;
}

// The functions are called with :: (the C library's, overloaded for float by <math.h>):
// gradsleuth:: declares exp(const Tensor&) and so on, which would hide them.
template <UnaryOp Op, class T>
GS_HOST_DEVICE inline auto unary_formula(T x) {
  if constexpr (Op == UnaryOp::Neg)
    return wrap_neg(x);
  else if constexpr (Op == UnaryOp::Exp)
    return static_cast<T>(::exp(to_math(x)));
  else if constexpr (Op == UnaryOp::Log)
    return static_cast<T>(::log(to_math(x)));
  else if constexpr (Op == UnaryOp::Sqrt)
    return static_cast<T>(::sqrt(to_math(x)));
  else if constexpr (Op == UnaryOp::Abs) {
    // fabs clears the sign bit: abs(-0.0) is +0.0 (x < 0 ? -x : x would keep -0.0).
    if constexpr (std::is_floating_point_v<T>)
      return static_cast<T>(::fabs(to_math(x)));
    else
      return x < 0 ? wrap_neg(x) : x;  // abs(int64 min) wraps to itself
  } else if constexpr (Op == UnaryOp::Sign)
    return static_cast<T>((x > 0) - (x < 0));
  else if constexpr (Op == UnaryOp::Relu)
    return x <= T(0) ? T(0) : x;  // NaN propagates (as in PyTorch)
  else if constexpr (Op == UnaryOp::Sigmoid) {
    // Stable for large |x|: never exponentiates a positive number.
    using M = MathT<T>;
    const M m = to_math(x);
    if (m >= 0) return static_cast<T>(M(1) / (M(1) + ::exp(-m)));
    const M e = ::exp(m);
    return static_cast<T>(e / (M(1) + e));
  } else if constexpr (Op == UnaryOp::Tanh)
    return static_cast<T>(::tanh(to_math(x)));
  else if constexpr (Op == UnaryOp::Erf)
    return static_cast<T>(::erf(to_math(x)));
  else if constexpr (Op == UnaryOp::Reciprocal)
    return static_cast<T>(MathT<T>(1) / to_math(x));
  else if constexpr (Op == UnaryOp::Square)
    return wrap_mul(x, x);
  else if constexpr (Op == UnaryOp::Log1p)
    return static_cast<T>(::log1p(to_math(x)));
  else if constexpr (Op == UnaryOp::Expm1)
    return static_cast<T>(::expm1(to_math(x)));
  else if constexpr (Op == UnaryOp::Sin)
    return static_cast<T>(::sin(to_math(x)));
  else if constexpr (Op == UnaryOp::Cos)
    return static_cast<T>(::cos(to_math(x)));
  else if constexpr (Op == UnaryOp::Rsqrt)
    return static_cast<T>(MathT<T>(1) / ::sqrt(to_math(x)));
  else if constexpr (Op == UnaryOp::LogicalNot)
    return static_cast<T>(x == 0);
  else if constexpr (Op == UnaryOp::IsNan)
    return is_nan(x);
  else if constexpr (Op == UnaryOp::IsInf)
    return is_inf(x);
  else if constexpr (Op == UnaryOp::IsFinite)
    return !is_nan(x) && !is_inf(x);
  else
    static_assert(kNoFormula<Op>, "a GS_UNARY_OPS entry has no formula in unary_formula");
}

template <BinaryOp Op, class T>
GS_HOST_DEVICE inline auto binary_formula(T a, T b) {
  if constexpr (Op == BinaryOp::Add)
    return wrap_add(a, b);  // bool: or
  else if constexpr (Op == BinaryOp::Sub)
    return wrap_sub(a, b);  // bool: xor
  else if constexpr (Op == BinaryOp::Mul)
    return wrap_mul(a, b);  // bool: and
  else if constexpr (Op == BinaryOp::Div) {
    if constexpr (std::is_same_v<T, bool>)
      return a;  // ops/ divides bools as floats (true division)
    else if constexpr (std::is_integral_v<T>)
      return b == 0 ? T(0) : b == T(-1) ? wrap_neg(a) : static_cast<T>(a / b);  // ops/ sends no ints
    else
      return a / b;
  } else if constexpr (Op == BinaryOp::Pow) {
    if constexpr (std::is_same_v<T, bool>)
      return a;  // ops/ rejects pow of bools
    else if constexpr (std::is_integral_v<T>)
      return int_pow(a, b);
    else
      return static_cast<T>(::pow(to_math(a), to_math(b)));
  } else if constexpr (Op == BinaryOp::Maximum) {
    if (is_nan(a) || is_nan(b)) return static_cast<T>(a + b);  // NaN wins (floating only)
    return a > b ? a : b;                                      // bool: or
  } else if constexpr (Op == BinaryOp::Minimum) {
    if (is_nan(a) || is_nan(b)) return static_cast<T>(a + b);
    return a < b ? a : b;  // bool: and
  } else if constexpr (Op == BinaryOp::Eq)
    return a == b;
  else if constexpr (Op == BinaryOp::Ne)
    return a != b;
  else if constexpr (Op == BinaryOp::Lt)
    return a < b;
  else if constexpr (Op == BinaryOp::Le)
    return a <= b;
  else if constexpr (Op == BinaryOp::Gt)
    return a > b;
  else if constexpr (Op == BinaryOp::Ge)
    return a >= b;
  else if constexpr (Op == BinaryOp::LogicalAnd)
    return (a != T(0)) && (b != T(0));
  else if constexpr (Op == BinaryOp::LogicalOr)
    return (a != T(0)) || (b != T(0));
  else
    static_assert(kNoFormula<Op>, "a GS_BINARY_OPS entry has no formula in binary_formula");
}

// Whether the op's formula gives bool (decided on doubles: on bools every formula does).
template <UnaryOp Op>
inline constexpr bool kUnaryPredicate = std::is_same_v<decltype(unary_formula<Op>(1.0)), bool>;
template <BinaryOp Op>
inline constexpr bool kBinaryComparison = std::is_same_v<decltype(binary_formula<Op>(1.0, 1.0)), bool>;
// is_comparison (core/op_kinds.h) routes a binary op to the bool kernels by its position in the list.
#define GS_CHECK_COMPARISON(e, name)                                             \
  static_assert(kBinaryComparison<BinaryOp::e> == (BinaryOp::e >= BinaryOp::Eq), \
                "binary_formula gives bool exactly for the comparisons (Eq onwards in GS_BINARY_OPS)");
GS_BINARY_OPS(GS_CHECK_COMPARISON)
#undef GS_CHECK_COMPARISON

// The op applied to T. A bool stays a bool: abs, sign, relu and square of a bool are the
// bool itself, logical_not negates it, and ops/ computes the floating ops of bools in float32.
template <UnaryOp Op, class T>
GS_HOST_DEVICE inline auto unary_op(T x) {
  if constexpr (std::is_same_v<T, bool> && !kUnaryPredicate<Op> && Op != UnaryOp::LogicalNot)
    return x;
  else
    return unary_formula<Op>(x);
}
template <BinaryOp Op, class T>
GS_HOST_DEVICE inline auto binary_op(T a, T b) {
  return binary_formula<Op>(a, b);
}

// Calls f(std::integral_constant<UnaryOp, op>{}): the loop inside f is compiled once per op.
template <class F>
inline void with_unary_op(UnaryOp op, F&& f) {
  switch (op) {
#define GS_CASE(e, name) \
  case UnaryOp::e: f(std::integral_constant<UnaryOp, UnaryOp::e>{}); return;
    GS_UNARY_OPS(GS_CASE)
#undef GS_CASE
    case UnaryOp::kCount: return;
  }
}
template <class F>
inline void with_binary_op(BinaryOp op, F&& f) {
  switch (op) {
#define GS_CASE(e, name) \
  case BinaryOp::e: f(std::integral_constant<BinaryOp, BinaryOp::e>{}); return;
    GS_BINARY_OPS(GS_CASE)
#undef GS_CASE
    case BinaryOp::kCount: return;
  }
}

// The same with the op chosen per element (one CUDA kernel serves every op).
GS_HOST_DEVICE constexpr bool is_predicate(UnaryOp op) {
  switch (op) {
#define GS_CASE(e, name) \
  case UnaryOp::e: return kUnaryPredicate<UnaryOp::e>;
    GS_UNARY_OPS(GS_CASE)
#undef GS_CASE
    case UnaryOp::kCount: return false;
  }
  return false;
}
// x for the predicates, which go through unary_predicate.
template <class T>
GS_HOST_DEVICE inline T unary_value(UnaryOp op, T x) {
  switch (op) {
#define GS_CASE(e, name)                       \
  case UnaryOp::e:                             \
    if constexpr (kUnaryPredicate<UnaryOp::e>) \
      return x;                                \
    else                                       \
      return unary_op<UnaryOp::e>(x);
    GS_UNARY_OPS(GS_CASE)
#undef GS_CASE
    case UnaryOp::kCount: return x;
  }
  return x;
}
// false for the ops that are not predicates.
template <class T>
GS_HOST_DEVICE inline bool unary_predicate(UnaryOp op, T x) {
  switch (op) {
#define GS_CASE(e, name)                       \
  case UnaryOp::e:                             \
    if constexpr (kUnaryPredicate<UnaryOp::e>) \
      return unary_op<UnaryOp::e>(x);          \
    else                                       \
      return false;
    GS_UNARY_OPS(GS_CASE)
#undef GS_CASE
    case UnaryOp::kCount: return false;
  }
  return false;
}
// a for the comparisons, which go through compare_value.
template <class T>
GS_HOST_DEVICE inline T binary_value(BinaryOp op, T a, T b) {
  switch (op) {
#define GS_CASE(e, name)                          \
  case BinaryOp::e:                               \
    if constexpr (kBinaryComparison<BinaryOp::e>) \
      return a;                                   \
    else                                          \
      return binary_op<BinaryOp::e>(a, b);
    GS_BINARY_OPS(GS_CASE)
#undef GS_CASE
    case BinaryOp::kCount: return a;
  }
  return a;
}
// false for the ops that are not comparisons.
template <class T>
GS_HOST_DEVICE inline bool compare_value(BinaryOp op, T a, T b) {
  switch (op) {
#define GS_CASE(e, name)                          \
  case BinaryOp::e:                               \
    if constexpr (kBinaryComparison<BinaryOp::e>) \
      return binary_op<BinaryOp::e>(a, b);        \
    else                                          \
      return false;
    GS_BINARY_OPS(GS_CASE)
#undef GS_CASE
    case BinaryOp::kCount: return false;
  }
  return false;
}

}  // namespace gradsleuth::ew
