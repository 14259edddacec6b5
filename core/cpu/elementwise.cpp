// CPU backend, elementwise: unary and binary ops, comparisons, where, clamp and
// arange. The scalar formula of each op is core/elementwise_math.h's (the CUDA kernels
// call the same); each op gets its own loop, so the formula inlines. With tuned kernels
// on, contiguous exp/log/tanh/sigmoid/..., the contiguous and broadcast-scalar rows of
// binary ops and comparisons, where and relu's backward go to fast/elementwise.cpp.
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/fast.h"
#include "core/elementwise_math.h"

namespace gradsleuth::cpu {

namespace {

template <class T>
void binary_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  ew::with_binary_op(op, [&](auto op_c) {
    constexpr BinaryOp Op = decltype(op_c)::value;
    if constexpr (!ew::kBinaryComparison<Op>) {  // the comparisons go through compare_kernel
      for_each_row<3>(out.shape(), {&out, &a, &b}, [&](char** p, int64_t n, const int64_t* st) {
        for (int64_t i = 0; i < n; ++i)
          *at<T>(p[0], i, st[0]) = ew::binary_op<Op>(*at<T>(p[1], i, st[1]), *at<T>(p[2], i, st[2]));
      });
    }
  });
}

// out (bool) = a op b for a comparison; any other op (a bool out of non-bool inputs) gives false.
template <class T>
void compare_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  ew::with_binary_op(op, [&](auto op_c) {
    constexpr BinaryOp Op = decltype(op_c)::value;
    for_each_row<3>(out.shape(), {&out, &a, &b}, [&](char** p, int64_t n, const int64_t* st) {
      for (int64_t i = 0; i < n; ++i) {
        bool& o = *at<bool>(p[0], i, st[0]);
        if constexpr (ew::kBinaryComparison<Op>)
          o = ew::binary_op<Op>(*at<T>(p[1], i, st[1]), *at<T>(p[2], i, st[2]));
        else
          o = false;
      }
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
  if (cpu_fast_kernels() && fast::binary(op, out, a, b)) return;
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (is_comparison(op) || (out.dtype() == DType::Bool && a.dtype() != DType::Bool))
      compare_kernel<T>(op, out, a, b);
    else
      binary_kernel<T>(op, out, a, b);
  });
}

void CpuBackend::where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  if (cpu_fast_kernels() && fast::where(out, cond, a, b)) return;
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for_each_row<4>(out.shape(), {&out, &cond, &a, &b}, [&](char** p, int64_t n, const int64_t* st) {
      for (int64_t k = 0; k < n; ++k)
        *at<T>(p[0], k, st[0]) = *at<bool>(p[1], k, st[1]) ? *at<T>(p[2], k, st[2]) : *at<T>(p[3], k, st[3]);
    });
  });
}

// relu's backward in one pass: x <= threshold ? 0 : g (a select, so an infinite g at x <= 0 gives 0).
void CpuBackend::threshold_backward(const Tensor& out, const Tensor& grad, const Tensor& x, double threshold) {
  if (cpu_fast_kernels() && fast::threshold_backward(out, grad, x, threshold)) return;
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T th = static_cast<T>(threshold);  // as the compare with a wrapped scalar: in x's dtype
    for_each_row<3>(out.shape(), {&out, &grad, &x}, [&](char** p, int64_t n, const int64_t* st) {
      for (int64_t k = 0; k < n; ++k)
        *at<T>(p[0], k, st[0]) = *at<T>(p[2], k, st[2]) <= th ? T(0) : *at<T>(p[1], k, st[1]);
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
