// CPU backend, elementwise: where, relu's backward, clamp and arange (the unary ops are in
// elementwise_unary.cpp, the binary ops and comparisons in elementwise_binary.cpp: three files
// that compile in parallel). The scalar formulas are core/elementwise_math.h's (the CUDA
// kernels call the same). With tuned kernels on, contiguous rows of where and relu's backward
// go to fast/elementwise_binary.cpp.
#include <type_traits>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/fast.h"

namespace gradsleuth::cpu {

void CpuBackend::arange(const Tensor& out, double start, double step) {
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.raw_data());
    for (int64_t i = 0; i < out.numel(); ++i) o[i] = static_cast<T>(start + static_cast<double>(i) * step);
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
