// Tuned elementwise binary ops (fast.h): the rows of binary ops, comparisons, where and
// relu's backward that are contiguous (or contiguous against a broadcast scalar), as loops
// the compiler vectorises. The reference is core/cpu/elementwise_binary.cpp's and
// elementwise.cpp's loops over core/elementwise_math.h's formulas.
#include <array>
#include <cstdint>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/fast.h"
#include "core/elementwise_math.h"

namespace gradsleuth::cpu::fast {

namespace {

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

bool binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  // As CpuBackend::binary: a comparison, or a bool out of non-bool inputs, writes bools.
  const bool to_bool = is_comparison(op) || (out.dtype() == DType::Bool && a.dtype() != DType::Bool);
  int64_t st[3];
  inner_strides<3>(out, {&out, &a, &b}, st);
  const int64_t e = static_cast<int64_t>(a.element_size());
  const bool rows_ok =
      st[0] == (to_bool ? 1 : e) && ((st[1] == e && (st[2] == e || st[2] == 0)) || (st[1] == 0 && st[2] == e));
  if (!rows_ok) return false;
  if (to_bool && !is_comparison(op)) {
    // A non-comparison with a bool out gives false (as the reference): one loop for every op.
    for_each_row<3>(out.shape(), {&out, &a, &b}, [&](char** p, int64_t n, const int64_t*) {
      bool* o = reinterpret_cast<bool*>(p[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = false;
    });
    return true;
  }
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ew::with_binary_op(op, [&](auto op_c) {
      using OpC = decltype(op_c);  // the op as a type: the row lambdas below capture nothing
      for_each_row<3>(out.shape(), {&out, &a, &b}, [&](char** p, int64_t n, const int64_t* s) {
        const T* x = reinterpret_cast<const T*>(p[1]);
        const T* y = reinterpret_cast<const T*>(p[2]);
        if constexpr (ew::kBinaryComparison<OpC::value>)  // to_bool
          binary_row(reinterpret_cast<bool*>(p[0]), x, y, n, s[1], s[2],
                     [](T u, T v) { return ew::binary_op<OpC::value>(u, v); });
        else
          binary_row(reinterpret_cast<T*>(p[0]), x, y, n, s[1], s[2],
                     [](T u, T v) { return ew::binary_op<OpC::value>(u, v); });
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
