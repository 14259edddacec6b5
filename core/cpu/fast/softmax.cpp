// Tuned softmax (fast.h): row-wise softmax / log_softmax over the last dim with Eigen's
// vectorised max, exp and scaling; the denominator summed by accurate_sum.h, as in the
// reference (core/cpu/softmax.cpp).
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/cpu/accurate_sum.h"
#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/eigen_maps.h"
#include "core/cpu/fast/fast.h"

namespace gradsleuth::cpu::fast {

bool softmax_lastdim(const Tensor& out, const Tensor& in, bool log) {
  if (!is_floating(in.dtype())) return false;
  const int64_t C = in.shape().back(), R = in.numel() / std::max<int64_t>(C, 1);
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      const T* x = static_cast<const T*>(in.raw_data());
      T* y = static_cast<T*>(out.raw_data());
      const T exp_lo = std::log(std::numeric_limits<T>::min());
      parallel_for(R, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(C, 1)), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          ECArr<T> xr(x + r * C, C);
          EArr<T> yr(y + r * C, C);
          const T m = xr.maxCoeff();
          if (!std::isfinite(m)) {  // all -inf, or a NaN/inf in the row: the slow exact path
            for (int64_t c = 0; c < C; ++c) y[r * C + c] = std::numeric_limits<T>::quiet_NaN();
            if (m == -std::numeric_limits<T>::infinity() || std::isnan(m)) continue;
          }
          yr = (xr - m).exp();
          // Eigen's packet exp gives 2.9e-39 (float) for exp(-inf) and is inexact below
          // exp's normal range: a masked (-inf) logit must get probability 0 exactly.
          for (int64_t c = 0; c < C; ++c)
            if (!(x[r * C + c] - m >= exp_lo)) y[r * C + c] = std::exp(x[r * C + c] - m);
          const T s = static_cast<T>(accurate_sum(y + r * C, C));  // the same at every SIMD width
          if (log)
            yr = (xr - m) - std::log(s);
          else
            yr /= s;
        }
      });
    }
  });
  return true;
}

}  // namespace gradsleuth::cpu::fast
