// CPU backend, random: uniform and normal samples from the counter-based Philox
// stream of core/generator.h, whose philox_sample functions cuda/random.cu calls too.
#include "core/cpu/cpu_backend.h"
#include "core/generator.h"

namespace gradsleuth::cpu {

void CpuBackend::uniform(const Tensor& out, double lo, double hi, uint64_t seed, uint64_t offset) {
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.raw_data());
    const int64_t n = out.numel();
    parallel_for((n + 3) / 4, 4096, [&](int64_t b, int64_t e) {
      for (int64_t blk = b; blk < e; ++blk) philox_sample::uniform_block<T>(o, n, blk, lo, hi, seed, offset);
    });
  });
}

void CpuBackend::normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) {
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.raw_data());
    const int64_t n = out.numel();
    parallel_for((n + 1) / 2, 2048, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) philox_sample::normal_pair<T>(o, n, j, mean, std, seed, offset);
    });
  });
}

}  // namespace gradsleuth::cpu
