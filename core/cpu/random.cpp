// CPU backend, random: uniform and normal samples from the counter-based Philox
// stream of core/generator.h (cuda/random.cu reproduces the same bits).
#include <cmath>
#include <type_traits>

#include "core/cpu/cpu_backend.h"
#include "core/generator.h"

namespace gradsleuth::cpu {

void CpuBackend::uniform(const Tensor& out, double lo, double hi, uint64_t seed, uint64_t offset) {
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.raw_data());
    const int64_t n = out.numel();
    // float: element i is word i; double: element i uses words 2i and 2i+1.
    parallel_for((n + 3) / 4, 4096, [&](int64_t b, int64_t e) {
      uint32_t r[4], r2[4];
      for (int64_t blk = b; blk < e; ++blk) {
        if constexpr (std::is_same_v<T, double>) {
          Philox4x32::round4(seed, offset + 2 * blk, r);
          Philox4x32::round4(seed, offset + 2 * blk + 1, r2);
          const uint32_t w[8] = {r[0], r[1], r[2], r[3], r2[0], r2[1], r2[2], r2[3]};
          for (int j = 0; j < 4 && blk * 4 + j < n; ++j)
            o[blk * 4 + j] = lo + (hi - lo) * Philox4x32::uniform_double(w[2 * j], w[2 * j + 1]);
        } else {
          Philox4x32::round4(seed, offset + blk, r);
          for (int j = 0; j < 4 && blk * 4 + j < n; ++j) {
            const double u = Philox4x32::uniform_float(r[j]);
            if constexpr (std::is_same_v<T, bool>) o[blk * 4 + j] = u < 0.5;
            else if constexpr (std::is_integral_v<T>) o[blk * 4 + j] = static_cast<T>(std::floor(lo + (hi - lo) * u));
            else o[blk * 4 + j] = static_cast<T>(lo + (hi - lo) * u);
          }
        }
      }
    });
  });
}

void CpuBackend::normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) {
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.raw_data());
    const int64_t n = out.numel();
    // Box–Muller: elements (2j, 2j+1) come from block offset + j.
    parallel_for((n + 1) / 2, 2048, [&](int64_t b, int64_t e) {
      uint32_t r[4];
      for (int64_t j = b; j < e; ++j) {
        Philox4x32::round4(seed, offset + j, r);
        const double u1 = 1.0 - Philox4x32::uniform_double(r[0], r[1]);  // (0, 1]
        const double u2 = Philox4x32::uniform_double(r[2], r[3]);
        const double rad = std::sqrt(-2.0 * std::log(u1)), th = 2.0 * M_PI * u2;
        o[2 * j] = static_cast<T>(mean + std * rad * std::cos(th));
        if (2 * j + 1 < n) o[2 * j + 1] = static_cast<T>(mean + std * rad * std::sin(th));
      }
    });
  });
}

}  // namespace gradsleuth::cpu
