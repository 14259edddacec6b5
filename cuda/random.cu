// cuda/random.cu: uniform and normal samples from the counter-based Philox stream of
// core/generator.h, element for element the CPU's (core/cpu/random.cpp): one thread per
// Philox block, the same words to the same elements, so a seed gives the same tensor on both.
#include "cuda/compat.h"

#include <math.h>

#include "core/generator.h"
#include "cuda/kernel_utils.h"

namespace gradsleuth::cuda {

namespace {

// Elements 4*blk .. 4*blk+3 of out (contiguous, n elements), blk over (n + 3) / 4, grid-stride.
// float: element i is word i % 4 of block offset + i / 4; double: words 2j, 2j+1 of blocks
// offset + 2*blk and offset + 2*blk + 1. Doubles are computed exactly as on the CPU (the
// library is built with --fmad=false, so a + b*c is not fused).
template <class T>
__global__ void uniform_kernel(T* o, int64_t n, double lo, double hi, uint64_t seed, uint64_t offset) {
  const int64_t blocks = (n + 3) / 4;
  for (GS_GRID_STRIDE(blk, blocks)) {
    uint32_t r[4], r2[4];
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
        else if constexpr (std::is_integral_v<T>) o[blk * 4 + j] = static_cast<T>(floor(lo + (hi - lo) * u));
        else o[blk * 4 + j] = static_cast<T>(lo + (hi - lo) * u);
      }
    }
  }
}

// Box-Muller: elements (2j, 2j+1) from Philox block offset + j. One thread per pair, grid-stride.
template <class T>
__global__ void normal_kernel(T* o, int64_t n, double mean, double stdv, uint64_t seed, uint64_t offset) {
  const int64_t pairs = (n + 1) / 2;
  for (GS_GRID_STRIDE(j, pairs)) {
    uint32_t r[4];
    Philox4x32::round4(seed, offset + j, r);
    const double u1 = 1.0 - Philox4x32::uniform_double(r[0], r[1]);  // (0, 1]
    const double u2 = Philox4x32::uniform_double(r[2], r[3]);
    const double rad = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
    o[2 * j] = static_cast<T>(mean + stdv * rad * cos(th));
    if (2 * j + 1 < n) o[2 * j + 1] = static_cast<T>(mean + stdv * rad * sin(th));
  }
}

}  // namespace

void uniform(const DevTensor& out, double lo, double hi, uint64_t seed, uint64_t offset) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch_op("uniform", uniform_kernel<T>, blocks_for((n + 3) / 4), kThreads, 0, static_cast<T*>(out.data), n, lo, hi,
              seed, offset);
  });
}

void normal(const DevTensor& out, double mean, double std, uint64_t seed, uint64_t offset) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch_op("normal", normal_kernel<T>, blocks_for((n + 1) / 2), kThreads, 0, static_cast<T*>(out.data), n, mean, std,
              seed, offset);
  });
}

}  // namespace gradsleuth::cuda
