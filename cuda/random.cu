// cuda/random.cu: uniform and normal samples from the counter-based Philox stream of
// core/generator.h, element for element the CPU's (core/cpu/random.cpp): both call its
// philox_sample functions, so a seed gives the same tensor on both.
#include "cuda/compat.h"

#include <math.h>

#include "core/generator.h"
#include "cuda/kernel_utils.h"

namespace gradsleuth::cuda {

namespace {

// One thread per Philox block (uniform) or pair (normal), grid-stride: the elements and bits
// of core/generator.h's philox_sample, as on the CPU. Doubles round as on the CPU (the library
// is built with --fmad=false, so a + b*c is not fused).
template <class T>
__global__ void uniform_kernel(T* o, int64_t n, double lo, double hi, uint64_t seed, uint64_t offset) {
  const int64_t blocks = (n + 3) / 4;
  for (GS_GRID_STRIDE(blk, blocks)) philox_sample::uniform_block<T>(o, n, blk, lo, hi, seed, offset);
}

template <class T>
__global__ void normal_kernel(T* o, int64_t n, double mean, double stdv, uint64_t seed, uint64_t offset) {
  const int64_t pairs = (n + 1) / 2;
  for (GS_GRID_STRIDE(j, pairs)) philox_sample::normal_pair<T>(o, n, j, mean, stdv, seed, offset);
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
