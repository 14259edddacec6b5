// cuda/workbench/softmax.cu: row softmax y[r][c] = exp(x[r][c] - max_r) / sum_c exp(x[r][c] - max_r)
// of a (rows, cols) float32 matrix, in three numbered versions.
//
// Napkin math (H100 SXM, NVIDIA H100 Tensor Core GPU datasheet: FP32 67 TFLOP/s, HBM3 3.35 TB/s).
// For 4096 rows x 4096 columns:
//   bytes  read x once, write y once: 8 R C = 134 MB   -> 40 us at 3.35 TB/s
//   flops  ~ 5 R C (max, subtract, exp, add, divide; the exp is a few more) = 84 MFLOP -> 1.3 us
//   intensity ~0.6 flop/byte, far left of the ridge (20): memory-bound. The goal is GB/s near
//   the copy bandwidth; the number of passes over x (each a full read if the row leaves L1/L2)
//   and the parallelism per row are what separate the versions.
#include <cmath>
#include <cstddef>
#include <stdexcept>

#include "cuda/workbench/device.h"

namespace gradsleuth::workbench::GS_WB_NS {
namespace {

// ---- v1: naive. One thread per row, three passes (max, sum of exp, write). ---------------
// Only R threads (4096: 3% of an H100's 270k resident threads), and neighbouring threads read
// addresses C floats apart: every load of a warp touches 32 different sectors.
__global__ void softmax_v1(const float* x, float* y, int R, int C) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  const float* xr = x + static_cast<size_t>(r) * C;
  float* yr = y + static_cast<size_t>(r) * C;
  float m = -INFINITY;
  for (int c = 0; c < C; ++c) m = fmaxf(m, xr[c]);
  float s = 0.0f;
  for (int c = 0; c < C; ++c) s += expf(xr[c] - m);
  for (int c = 0; c < C; ++c) yr[c] = expf(xr[c] - m) / s;
}

// ---- v2: one block (256 threads) per row, reductions in shared memory. -------------------
// Consecutive threads read consecutive columns (coalesced) and a row is spread over 256
// threads, so there are R * 256 threads in flight. The max and the sum are tree reductions
// in shared memory: log2(256) = 8 steps, each behind a __syncthreads.
constexpr int kV2Threads = 256;
__device__ float block_reduce(float v, float* s, bool is_max) {
  const int t = threadIdx.x;
  s[t] = v;
  __syncthreads();
  for (int stride = kV2Threads / 2; stride > 0; stride /= 2) {
    if (t < stride) s[t] = is_max ? fmaxf(s[t], s[t + stride]) : s[t] + s[t + stride];
    __syncthreads();
  }
  const float out = s[0];
  __syncthreads();  // everyone has read s[0] before the next reduction overwrites it
  return out;
}
__global__ void softmax_v2(const float* x, float* y, int R, int C) {
  __shared__ float s[kV2Threads];
  const int r = blockIdx.x;
  const float* xr = x + static_cast<size_t>(r) * C;
  float* yr = y + static_cast<size_t>(r) * C;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < C; c += kV2Threads) m = fmaxf(m, xr[c]);
  m = block_reduce(m, s, true);
  float sum = 0.0f;
  for (int c = threadIdx.x; c < C; c += kV2Threads) sum += expf(xr[c] - m);
  sum = block_reduce(sum, s, false);
  const float inv = 1.0f / sum;
  for (int c = threadIdx.x; c < C; c += kV2Threads) yr[c] = expf(xr[c] - m) * inv;
}

// ---- v3: one warp per row, online softmax, warp shuffles. ---------------------------------
// The running max and the running sum come from ONE pass (when the max grows from m to m',
// the sum so far is rescaled by exp(m - m')), so x is read twice instead of three times. The
// 32 lanes combine their (max, sum) pairs with __shfl_xor_sync: no shared memory, no
// __syncthreads. 4 warps (4 rows) per block of 128.
constexpr int kV3Threads = 128;
__global__ void softmax_v3(const float* x, float* y, int R, int C) {
  const int r = blockIdx.x * (kV3Threads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= R) return;  // the whole warp leaves together
  const float* xr = x + static_cast<size_t>(r) * C;
  float* yr = y + static_cast<size_t>(r) * C;
  float m = -INFINITY, s = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float v = xr[c];
    if (v > m) {
      s = s * expf(m - v) + 1.0f;  // expf(-inf) = 0 on the first element
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  for (int off = 16; off > 0; off /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
    const float mm = fmaxf(m, m2);
    // A lane with no elements has (-inf, 0): its term must be 0, not exp(-inf - -inf) = NaN.
    s = (m == -INFINITY ? 0.0f : s * expf(m - mm)) + (m2 == -INFINITY ? 0.0f : s2 * expf(m2 - mm));
    m = mm;
  }
  const float inv = 1.0f / s;
  for (int c = lane; c < C; c += 32) yr[c] = expf(xr[c] - m) * inv;
}

}  // namespace

cudaError_t launch_softmax(int version, const float* const* in, float* out, const Shape& s, cudaStream_t stream) {
  const int R = static_cast<int>(s.m), C = static_cast<int>(s.n);
  switch (version) {
    case 1: return gs::cuda::launch(softmax_v1, dim3(ceil_div(R, 128)), dim3(128), 0, stream, in[0], out, R, C);
    case 2: return gs::cuda::launch(softmax_v2, dim3(R), dim3(kV2Threads), 0, stream, in[0], out, R, C);
    case 3:
      return gs::cuda::launch(softmax_v3, dim3(ceil_div(R, kV3Threads / 32)), dim3(kV3Threads), 0, stream, in[0], out,
                              R, C);
    default: throw std::invalid_argument("softmax: no version " + std::to_string(version));
  }
}

}  // namespace gradsleuth::workbench::GS_WB_NS
