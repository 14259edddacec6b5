// Tuned elementwise unary ops (fast.h): contiguous rows through Eigen's vectorised packet
// math (binary ops, comparisons, where and relu's backward: elementwise_binary.cpp). The
// reference is core/cpu/elementwise_unary.cpp's loops over core/elementwise_math.h's
// formulas; every input where a packet function is not exact is recomputed with that
// formula.
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/eigen_maps.h"
#include "core/cpu/fast/fast.h"
#include "core/elementwise_math.h"

namespace gradsleuth::cpu::fast {

namespace {

// Recomputes with the scalar function every element whose input lies outside
// [lo, hi] (NaN included). Such inputs are rare: a branch-free pass (which the
// compiler vectorises) finds whether there are any before the scalar one runs.
template <class T>
void redo_outside(UnaryOp op, T* o, const T* a, int64_t n, T lo, T hi) {
  bool any = false;
  for (int64_t i = 0; i < n; ++i) any |= !(a[i] >= lo && a[i] <= hi);
  if (!any) return;
  for (int64_t i = 0; i < n; ++i)
    if (!(a[i] >= lo && a[i] <= hi)) o[i] = ew::unary_value<T>(op, a[i]);
}

// Vectorised contiguous versions of the transcendental functions (Eigen's
// packet math); returns false when there is none for this op/type.
template <class T>
bool unary_eigen(UnaryOp op, T* o, const T* a, int64_t n) {
  if constexpr (std::is_floating_point_v<T>) {
    EArr<T> y(o, n);
    ECArr<T> x(a, n);
    // Where exp(x) is a normal finite number, with a margin of 1 at the top. Eigen's
    // packet exp clamps its argument to about that range, so beyond it exp(-inf) came
    // out as 2.9e-39 (float) or 5.6e-309 (double) instead of 0, exp(-1000) likewise
    // (log(exp(-1000)) = -87.3 instead of -inf), results in the denormal range were
    // wrong, and float exp(88.5) = 2.7e38 overflowed to inf: those inputs are redone
    // with std::exp, which underflows to 0 and overflows to inf exactly where it must.
    const T exp_lo = std::log(std::numeric_limits<T>::min()), exp_hi = std::log(std::numeric_limits<T>::max()) - T(1);
    switch (op) {
      case UnaryOp::Exp:
        if (o == a) return false;  // the fix-up re-reads the input
        y = x.exp();
        redo_outside<T>(op, o, a, n, exp_lo, exp_hi);
        return true;
      case UnaryOp::Log:
        // Eigen's packet log flushes denormal inputs to the smallest normal number
        // (log(1e-40f) = -87.3 instead of -92.1): redone, with 0, negatives and NaN.
        if (o == a) return false;
        y = x.log();
        redo_outside<T>(op, o, a, n, std::numeric_limits<T>::min(), std::numeric_limits<T>::infinity());
        return true;
      case UnaryOp::Sqrt: y = x.sqrt(); return true;
      case UnaryOp::Tanh: y = x.tanh(); return true;
      case UnaryOp::Sigmoid: {
        // e = exp(-|x|) never overflows: 1/(1+e) for x >= 0, e/(1+e) for x < 0.
        // (Not 1 - 1/(1+e): that rounds sigmoid(-40) to 0 instead of 4e-18.)
        // exp(-|x|) leaves Eigen's exact range for |x| > -exp_lo: redone as above.
        if (o == a) return false;
        y = (-x.abs()).exp();
        y = (x >= T(0)).select(T(1), y) / (T(1) + y);
        redo_outside<T>(op, o, a, n, exp_lo, -exp_lo);
        return true;
      }
      case UnaryOp::Relu: y = (x <= T(0)).select(T(0), x); return true;  // NaN propagates, like the formula
      case UnaryOp::Square: y = x.square(); return true;
      case UnaryOp::Abs: y = x.abs(); return true;
      case UnaryOp::Reciprocal: y = x.inverse(); return true;
      default: return false;
    }
  }
  return false;
}

}  // namespace

bool unary_contiguous(UnaryOp op, float* o, const float* a, int64_t n) { return unary_eigen<float>(op, o, a, n); }
bool unary_contiguous(UnaryOp op, double* o, const double* a, int64_t n) { return unary_eigen<double>(op, o, a, n); }

}  // namespace gradsleuth::cpu::fast
