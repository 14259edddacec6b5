// Tuned elementwise (fast.h): contiguous unary ops through Eigen's vectorised packet
// math, and the rows of binary ops, comparisons, where and relu's backward that are
// contiguous (or contiguous against a broadcast scalar) as loops the compiler vectorises.
// The reference is core/cpu/elementwise.cpp's loops over core/elementwise_math.h's
// formulas; every input where a packet function is not exact is recomputed with that
// formula.
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/cpu/cpu_backend.h"
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

// The inner-row strides (bytes) for_each_row will hand out: the same for every row.
template <int N>
void inner_strides(const Tensor& out, const std::array<const Tensor*, N>& ts, int64_t st[N]) {
  const StridedIter<N> it(out.shape(), ts);
  for (int k = 0; k < N; ++k) st[k] = it.strides[k][it.ndim - 1];
}

// o = f(a, b) over a row: both contiguous, or one of them a broadcast scalar (stride 0).
template <class R, class T, class F>
void binary_row(R* o, const T* a, const T* b, int64_t n, int64_t sa, int64_t sb, F f) {
  if (sa != 0 && sb != 0) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
  } else if (sb == 0) {
    const T bv = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv);
  } else {
    const T av = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = f(av, b[i]);
  }
}

// One row of where() (A_ / B_: that side contiguous, else a broadcast scalar). Both sides are
// loaded unconditionally and the condition read as bytes: GCC 12 neither if-converts a
// conditional load nor finds a vector type for a bool load. out may be b (masked_fill_).
template <class T, bool A_, bool B_>
void where_row(T* o, const uint8_t* c, const T* a, const T* b, int64_t n) {
  const T av = A_ ? T() : *a, bv = B_ ? T() : *b;  // a broadcast side has its one element
  for (int64_t i = 0; i < n; ++i) {
    const T x = A_ ? a[i] : av, y = B_ ? b[i] : bv;
    o[i] = c[i] != 0 ? x : y;
  }
}

}  // namespace

bool unary_contiguous(UnaryOp op, float* o, const float* a, int64_t n) { return unary_eigen<float>(op, o, a, n); }
bool unary_contiguous(UnaryOp op, double* o, const double* a, int64_t n) { return unary_eigen<double>(op, o, a, n); }

bool binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  // As CpuBackend::binary: a comparison, or a bool out of non-bool inputs, writes bools.
  const bool to_bool = is_comparison(op) || (out.dtype() == DType::Bool && a.dtype() != DType::Bool);
  int64_t st[3];
  inner_strides<3>(out, {&out, &a, &b}, st);
  const int64_t e = static_cast<int64_t>(a.element_size());
  const bool rows_ok =
      st[0] == (to_bool ? 1 : e) && ((st[1] == e && (st[2] == e || st[2] == 0)) || (st[1] == 0 && st[2] == e));
  if (!rows_ok) return false;
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ew::with_binary_op(op, [&](auto op_c) {
      using OpC = decltype(op_c);  // the op as a type: the row lambdas below capture nothing
      for_each_row<3>(out.shape(), {&out, &a, &b}, [&](char** p, int64_t n, const int64_t* s) {
        const T* x = reinterpret_cast<const T*>(p[1]);
        const T* y = reinterpret_cast<const T*>(p[2]);
        if (to_bool) {
          binary_row(reinterpret_cast<bool*>(p[0]), x, y, n, s[1], s[2], [](T u, T v) {
            bool r = false;  // a non-comparison with a bool out gives false (as the reference)
            if constexpr (ew::kBinaryComparison<OpC::value>) r = ew::binary_op<OpC::value>(u, v);
            return r;
          });
        } else if constexpr (!ew::kBinaryComparison<OpC::value>) {
          binary_row(reinterpret_cast<T*>(p[0]), x, y, n, s[1], s[2],
                     [](T u, T v) { return ew::binary_op<OpC::value>(u, v); });
        }
      });
    });
  });
  return true;
}

bool where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  int64_t st[4];
  inner_strides<4>(out, {&out, &cond, &a, &b}, st);
  const int64_t e = static_cast<int64_t>(out.element_size());
  if (!(st[0] == e && st[1] == 1 && (st[2] == e || st[2] == 0) && (st[3] == e || st[3] == 0))) return false;
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for_each_row<4>(out.shape(), {&out, &cond, &a, &b}, [&](char** p, int64_t n, const int64_t* s) {
      T* o = reinterpret_cast<T*>(p[0]);
      const uint8_t* c = reinterpret_cast<const uint8_t*>(p[1]);  // a bool is one byte, 0 or 1
      const T* x = reinterpret_cast<const T*>(p[2]);
      const T* y = reinterpret_cast<const T*>(p[3]);
      if (s[2] != 0 && s[3] != 0)
        where_row<T, true, true>(o, c, x, y, n);
      else if (s[2] != 0)
        where_row<T, true, false>(o, c, x, y, n);
      else if (s[3] != 0)
        where_row<T, false, true>(o, c, x, y, n);
      else
        where_row<T, false, false>(o, c, x, y, n);
    });
  });
  return true;
}

bool threshold_backward(const Tensor& out, const Tensor& grad, const Tensor& x, double threshold) {
  int64_t st[3];
  inner_strides<3>(out, {&out, &grad, &x}, st);
  const int64_t e = static_cast<int64_t>(out.element_size());
  if (!(st[0] == e && st[1] == e && st[2] == e)) return false;
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T th = static_cast<T>(threshold);  // as the reference: in x's dtype
    for_each_row<3>(out.shape(), {&out, &grad, &x}, [&](char** p, int64_t n, const int64_t*) {
      T* o = reinterpret_cast<T*>(p[0]);
      const T* g = reinterpret_cast<const T*>(p[1]);
      const T* xv = reinterpret_cast<const T*>(p[2]);
      // x and g both loaded unconditionally (as in where_row): a compare and a masked move.
      for (int64_t i = 0; i < n; ++i) {
        const T gi = g[i], xi = xv[i];
        o[i] = xi <= th ? T(0) : gi;
      }
    });
  });
  return true;
}

}  // namespace gradsleuth::cpu::fast
