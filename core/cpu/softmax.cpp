// CPU backend, softmax family: row-wise softmax / log_softmax over the last dim.
// For each row x of C values:
//   m = max(x)                        (subtracting it keeps every exp <= 1: no overflow)
//   e_c = exp(x_c - m),  s = sum(e)   (summed by accurate_sum.h, the same at every SIMD width)
//   softmax = e / s,  log_softmax = (x - m) - log(s)
// A row holding NaN or +inf (exp(inf - inf) is NaN), or only -inf, comes out all NaN.
// With tuned kernels on, fast/softmax.cpp runs instead.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/cpu/accurate_sum.h"
#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/fast.h"

namespace gradsleuth::cpu {

void CpuBackend::softmax_lastdim(const Tensor& out, const Tensor& in, bool log) {
  if (cpu_fast_kernels() && fast::softmax_lastdim(out, in, log)) return;
  const int64_t C = in.shape().back(), R = in.numel() / std::max<int64_t>(C, 1);
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      const T* x = static_cast<const T*>(in.raw_data());
      T* y = static_cast<T*>(out.raw_data());
      parallel_for(R, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(C, 1)), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const T* xr = x + r * C;
          T* yr = y + r * C;
          T m = -std::numeric_limits<T>::infinity();
          bool nan = false;
          for (int64_t c = 0; c < C; ++c) {
            nan |= std::isnan(xr[c]);
            m = std::max(m, xr[c]);
          }
          if (nan || m == -std::numeric_limits<T>::infinity()) {
            std::fill_n(yr, C, std::numeric_limits<T>::quiet_NaN());
            continue;
          }
          for (int64_t c = 0; c < C; ++c) yr[c] = std::exp(xr[c] - m);
          const T s = static_cast<T>(accurate_sum(yr, C));
          if (log)
            for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) - std::log(s);
          else
            for (int64_t c = 0; c < C; ++c) yr[c] /= s;
        }
      });
    }
  });
}

}  // namespace gradsleuth::cpu
