// CPU backend, elementwise: unary and binary ops, comparisons, where, clamp and
// arange. The scalar formula of each op is core/elementwise_math.h's (the CUDA kernels
// call the same); each op gets its own loop, so the formula inlines and vectorises.
// With tuned kernels on, contiguous exp/log/tanh/sigmoid/... go to fast/elementwise.cpp
// (Eigen's vectorised packet math) instead.
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/fast.h"
#include "core/elementwise_math.h"

namespace gradsleuth::cpu {

namespace {

// ---- binary -----------------------------------------------------------------
// The hot cases spelled out so the compiler vectorises them.
template <class T, class F>
void binary_row(T* o, const T* a, const T* b, int64_t n, int64_t so, int64_t sa, int64_t sb, F f) {
  const int64_t e = sizeof(T);
  if (so == e && sa == e && sb == e) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
  } else if (so == e && sa == e && sb == 0) {
    const T bv = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv);
  } else if (so == e && sa == 0 && sb == e) {
    const T av = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = f(av, b[i]);
  } else {
    char* po = reinterpret_cast<char*>(o);
    const char* pa = reinterpret_cast<const char*>(a);
    const char* pb = reinterpret_cast<const char*>(b);
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<T*>(po + i * so) =
          f(*reinterpret_cast<const T*>(pa + i * sa), *reinterpret_cast<const T*>(pb + i * sb));
  }
}

template <class T>
void binary_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  ew::with_binary_op(op, [&](auto op_c) {
    constexpr BinaryOp Op = decltype(op_c)::value;
    if constexpr (!ew::kBinaryComparison<Op>) {  // the comparisons go through compare_kernel
      for_each_row<3>(out.shape(), {&out, &a, &b}, [&](char** p, int64_t n, const int64_t* st) {
        binary_row<T>(reinterpret_cast<T*>(p[0]), reinterpret_cast<const T*>(p[1]), reinterpret_cast<const T*>(p[2]),
                      n, st[0], st[1], st[2], [](T x, T y) { return ew::binary_op<Op>(x, y); });
      });
    }
  });
}

// out (bool) = f(a, b). Contiguous rows, and rows against a broadcast scalar (relu's
// backward compares with 0), are spelled out so they vectorise: the op is chosen
// once per call, not per element.
template <class T, class F>
void compare_rows(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  for_each_row<3>(out.shape(), {&out, &a, &b}, [&](char** p, int64_t n, const int64_t* st) {
    bool* o = reinterpret_cast<bool*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    const T* y = reinterpret_cast<const T*>(p[2]);
    constexpr int64_t e = sizeof(T);
    if (st[0] == 1 && st[1] == e && st[2] == e) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    } else if (st[0] == 1 && st[1] == e && st[2] == 0) {
      const T yv = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
    } else {
      for (int64_t i = 0; i < n; ++i) *at<bool>(p[0], i, st[0]) = f(*at<T>(p[1], i, st[1]), *at<T>(p[2], i, st[2]));
    }
  });
}

// A comparison, or (a bool out of non-bool inputs) any other op, which gives false.
template <class T>
void compare_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  ew::with_binary_op(op, [&](auto op_c) {
    constexpr BinaryOp Op = decltype(op_c)::value;
    compare_rows<T>(out, a, b, [](T x, T y) {
      if constexpr (ew::kBinaryComparison<Op>) return ew::binary_op<Op>(x, y);
      else return false;
    });
  });
}

}  // namespace

void CpuBackend::arange(const Tensor& out, double start, double step) {
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.raw_data());
    for (int64_t i = 0; i < out.numel(); ++i) o[i] = static_cast<T>(start + static_cast<double>(i) * step);
  });
}

void CpuBackend::unary(UnaryOp op, const Tensor& out, const Tensor& in) {
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ew::with_unary_op(op, [&](auto op_c) {
      constexpr UnaryOp Op = decltype(op_c)::value;
      using R = decltype(ew::unary_op<Op>(T{}));  // T, or bool for a predicate
      for_each_row<2>(out.shape(), {&out, &in}, [&](char** p, int64_t n, const int64_t* st) {
        if (st[0] == sizeof(R) && st[1] == sizeof(T)) {
          R* o = reinterpret_cast<R*>(p[0]);
          const T* x = reinterpret_cast<const T*>(p[1]);
          if constexpr (std::is_same_v<R, T> && std::is_floating_point_v<T>)
            if (cpu_fast_kernels() && fast::unary_contiguous(Op, o, x, n)) return;
          for (int64_t k = 0; k < n; ++k) o[k] = ew::unary_op<Op>(x[k]);
          return;
        }
        for (int64_t k = 0; k < n; ++k) *at<R>(p[0], k, st[0]) = ew::unary_op<Op>(*at<T>(p[1], k, st[1]));
      });
    });
  });
}

void CpuBackend::binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (is_comparison(op) || (out.dtype() == DType::Bool && a.dtype() != DType::Bool))
      compare_kernel<T>(op, out, a, b);
    else
      binary_kernel<T>(op, out, a, b);
  });
}

namespace {
// One row of where() with contiguous out and cond, each branch contiguous (A_ / B_
// true) or a broadcast scalar: a select GCC vectorises. relu's backward is
// where(x <= 0, 0, g) over a CNN's activations; through the strided loop it cost a
// tenth of a CNN step.
template <class T, bool A_, bool B_>
void where_row(T* o, const uint8_t* c, const T* a, const T* b, int64_t n) {  // out may be b (masked_fill_)
  const T av = A_ ? T() : *a, bv = B_ ? T() : *b;  // a broadcast side has its one element
  // Both sides loaded unconditionally and the condition read as bytes: GCC 12 neither
  // if-converts a conditional load nor finds a vector type for a bool load.
  for (int64_t i = 0; i < n; ++i) {
    const T x = A_ ? a[i] : av, y = B_ ? b[i] : bv;
    o[i] = c[i] != 0 ? x : y;
  }
}
}  // namespace

void CpuBackend::where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for_each_row<4>(out.shape(), {&out, &cond, &a, &b}, [&](char** p, int64_t n, const int64_t* st) {
      constexpr int64_t e = sizeof(T);
      if (st[0] == e && st[1] == 1 && (st[2] == e || st[2] == 0) && (st[3] == e || st[3] == 0)) {
        T* o = reinterpret_cast<T*>(p[0]);
        const uint8_t* c = reinterpret_cast<const uint8_t*>(p[1]);  // a bool is one byte, 0 or 1
        const T* x = reinterpret_cast<const T*>(p[2]);
        const T* y = reinterpret_cast<const T*>(p[3]);
        if (st[2] == e && st[3] == e) where_row<T, true, true>(o, c, x, y, n);
        else if (st[2] == e) where_row<T, true, false>(o, c, x, y, n);
        else if (st[3] == e) where_row<T, false, true>(o, c, x, y, n);
        else where_row<T, false, false>(o, c, x, y, n);
        return;
      }
      for (int64_t k = 0; k < n; ++k)
        *at<T>(p[0], k, st[0]) = *at<bool>(p[1], k, st[1]) ? *at<T>(p[2], k, st[2]) : *at<T>(p[3], k, st[3]);
    });
  });
}

namespace {
// One contiguous row of relu's backward. Both x and g are loaded unconditionally (as in
// where_row: GCC 12 does not if-convert a conditional load), so the loop is a compare and
// a masked move; a select, not g * (x > 0), so that an infinite g at x <= 0 gives 0.
template <class T>
void threshold_backward_row(T* o, const T* g, const T* x, int64_t n, T th) {
  for (int64_t i = 0; i < n; ++i) {
    const T gv = g[i], xv = x[i];
    o[i] = xv <= th ? T(0) : gv;
  }
}
}  // namespace

// relu's backward in one pass: where(x <= 0, 0, g) read x, wrote a bool mask, then read
// the mask and g (a tenth of a CNN step's time went to the two passes).
void CpuBackend::threshold_backward(const Tensor& out, const Tensor& grad, const Tensor& x, double threshold) {
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T th = static_cast<T>(threshold);  // as the compare with a wrapped scalar: in x's dtype
    for_each_row<3>(out.shape(), {&out, &grad, &x}, [&](char** p, int64_t n, const int64_t* st) {
      constexpr int64_t e = sizeof(T);
      if (st[0] == e && st[1] == e && st[2] == e) {
        threshold_backward_row<T>(reinterpret_cast<T*>(p[0]), reinterpret_cast<const T*>(p[1]),
                                  reinterpret_cast<const T*>(p[2]), n, th);
        return;
      }
      for (int64_t k = 0; k < n; ++k) *at<T>(p[0], k, st[0]) = *at<T>(p[2], k, st[2]) <= th ? T(0) : *at<T>(p[1], k, st[1]);
    });
  });
}

void CpuBackend::clamp(const Tensor& out, const Tensor& in, double lo, double hi) {
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      const double l = lo, h = hi;
      for_each_row<2>(out.shape(), {&out, &in}, [&](char** p, int64_t n, const int64_t* st) {
        for (int64_t k = 0; k < n; ++k) {
          T x = *at<T>(p[1], k, st[1]);
          double v = static_cast<double>(x);
          // NaN passes through unchanged (comparisons with NaN are false).
          *at<T>(p[0], k, st[0]) = v < l ? static_cast<T>(l) : (v > h ? static_cast<T>(h) : x);
        }
      });
    }
  });
}

}  // namespace gradsleuth::cpu
