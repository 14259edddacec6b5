// cuda/workbench/reduce.cu: the sum of n float32 values into one float, in three numbered
// versions (atomics only; a shared-memory tree per block; warp shuffles over a grid-stride loop).
//
// Napkin math (H100 SXM, NVIDIA H100 Tensor Core GPU datasheet: FP32 67 TFLOP/s, HBM3 3.35 TB/s).
// For n = 2^26 (64 Mi floats):
//   bytes  4 n = 268 MB read once        -> 80 us at 3.35 TB/s
//   flops  n = 67 MFLOP                  -> 1 us at 67 TFLOP/s
//   intensity 0.25 flop/byte: memory-bound; a good reduction streams at copy speed. What stands
//   in the way is not arithmetic but serialisation: atomics on one address, barriers, and the
//   number of partial results that must be combined.
#include <algorithm>
#include <cstddef>
#include <stdexcept>

#include "cuda/workbench/device.h"

namespace gradsleuth::workbench::GS_WB_NS {
namespace {

// ---- v1: one atomicAdd per element onto the single output. --------------------------------
// Correct, and the slowest possible: every one of the n additions is serialised in the L2
// slice that owns *out (an H100 does on the order of one same-address atomic per clock, ~2
// G/s: 2^26 elements take tens of ms against the 80 us of the memory bound).
__global__ void reduce_v1(const float* x, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(out, x[i]);
}

// ---- v2: a tree in shared memory per block, one atomic per block. --------------------------
// Each block of 256 threads sums its 512 elements (two per thread) in log2(256) = 8 steps
// with a __syncthreads each; n / 512 atomics remain instead of n.
constexpr int kV2Threads = 256;
__global__ void reduce_v2(const float* x, float* out, int n) {
  __shared__ float s[kV2Threads];
  const int t = threadIdx.x;
  const int i = blockIdx.x * (2 * kV2Threads) + t;
  float v = i < n ? x[i] : 0.0f;
  if (i + kV2Threads < n) v += x[i + kV2Threads];
  s[t] = v;
  __syncthreads();
  for (int stride = kV2Threads / 2; stride > 0; stride /= 2) {
    if (t < stride) s[t] += s[t + stride];
    __syncthreads();
  }
  if (t == 0) atomicAdd(out, s[0]);
}

// ---- v3: grid-stride loop, warp shuffles, one atomic per block. ---------------------------
// A fixed grid (at most 2 blocks per SM) walks the array: each thread sums many elements in a
// register first (no shared memory, no barrier in the loop), then a warp combines its 32
// sums with __shfl_down_sync (5 steps, no barrier), the 8 warp sums meet in shared memory
// behind ONE __syncthreads, and a block issues a single atomic: 264 atomics in all on an H100.
constexpr int kV3Threads = 256;
__global__ void reduce_v3(const float* x, float* out, int n) {
  __shared__ float warp_sums[kV3Threads / 32];
  float v = 0.0f;
  for (int i = blockIdx.x * kV3Threads + threadIdx.x; i < n; i += kV3Threads * gridDim.x) v += x[i];
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kV3Threads / 32 ? warp_sums[lane] : 0.0f;
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) atomicAdd(out, v);
  }
}

int sm_count() {
  static const int count = [] {
    int c = 0;
    if (cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || c <= 0) {
      cudaGetLastError();
      c = 132;  // an H100 SXM
    }
    return c;
  }();
  return count;
}

}  // namespace

cudaError_t launch_reduce(int version, const float* const* in, float* out, const Shape& s, cudaStream_t stream) {
  const int n = static_cast<int>(s.n);
  // The kernels add into *out: it starts at 0 (part of every version's time).
  if (const cudaError_t e = cudaMemsetAsync(out, 0, sizeof(float), stream)) return e;
  switch (version) {
    case 1: return gs::cuda::launch(reduce_v1, dim3(ceil_div(n, 256)), dim3(256), 0, stream, in[0], out, n);
    case 2:
      return gs::cuda::launch(reduce_v2, dim3(ceil_div(n, 2 * kV2Threads)), dim3(kV2Threads), 0, stream, in[0], out, n);
    case 3: {
      const unsigned blocks = std::min(ceil_div(n, kV3Threads), static_cast<unsigned>(2 * sm_count()));
      return gs::cuda::launch(reduce_v3, dim3(blocks), dim3(kV3Threads), 0, stream, in[0], out, n);
    }
    default: throw std::invalid_argument("reduce: no version " + std::to_string(version));
  }
}

}  // namespace gradsleuth::workbench::GS_WB_NS
