// cuda/random.cu: uniform and normal samples from the counter-based Philox stream of
// core/generator.h, element for element the CPU's (core/cpu/random.cpp): both call its
// philox_sample functions, so a seed gives the same tensor on both. float16/bfloat16 draw the
// float32 stream into a float32 buffer and round it (rand's values that round up to hi are moved
// to the 16-bit value just below it), as the CPU does.
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

// The 16-bit value one step from v towards -inf (sign and magnitude: bits - 1 above zero, + 1 below).
template <class T>
__device__ T step_down(T v, bool positive) {
  if constexpr (std::is_same_v<T, __half>) {
    const unsigned short b = __half_as_ushort(v);
    return __ushort_as_half(static_cast<unsigned short>(positive ? b - 1 : b + 1));
  } else {
    const unsigned short b = __bfloat16_as_ushort(v);
    return __ushort_as_bfloat16(static_cast<unsigned short>(positive ? b - 1 : b + 1));
  }
}

// o[i] = f[i] rounded once; with `below_hi`, a value that rounded up to hi or past it is moved one
// step down, so rand's range stays [lo, hi). 1-D grid-stride.
template <class T>
__global__ void round_samples_kernel(T* o, const float* f, int64_t n, bool below_hi, double hi) {
  for (GS_GRID_STRIDE(i, n)) {
    T v = narrow<T>(f[i]);
    if (below_hi && static_cast<double>(widen(v)) >= hi) v = step_down(v, hi > 0);
    o[i] = v;
  }
}

// For 16-bit out: draw(float32 buffer) then round into out; otherwise draw(out).
template <class F>
void draw_rounded(const char* op, const DevTensor& out, bool below_hi, double hi, F&& draw) {
  if (!is_reduced_float(out.dtype)) return draw(out);
  Float32Scratch s(out, false);
  draw(s.tensor());
  const int64_t n = out.numel();
  dispatch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_half_v<T>)
      launch_op(op, round_samples_kernel<T>, blocks_for(n), kThreads, 0, static_cast<T*>(out.data),
                static_cast<const float*>(s.tensor().data), n, below_hi, hi);
  });
}

}  // namespace

void uniform(const DevTensor& out_, double lo, double hi, uint64_t seed, uint64_t offset) {
  const int64_t n = out_.numel();
  if (n == 0) return;
  draw_rounded("uniform", out_, true, hi, [&](const DevTensor& out) {
    dispatch(out.dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!is_half_v<T>)
        launch_op("uniform", uniform_kernel<T>, blocks_for((n + 3) / 4), kThreads, 0, static_cast<T*>(out.data), n, lo,
                  hi, seed, offset);
    });
  });
}

void normal(const DevTensor& out_, double mean, double std, uint64_t seed, uint64_t offset) {
  const int64_t n = out_.numel();
  if (n == 0) return;
  draw_rounded("normal", out_, false, 0.0, [&](const DevTensor& out) {
    dispatch(out.dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!is_half_v<T>)
        launch_op("normal", normal_kernel<T>, blocks_for((n + 1) / 2), kThreads, 0, static_cast<T*>(out.data), n, mean,
                  std, seed, offset);
    });
  });
}

}  // namespace gradsleuth::cuda
