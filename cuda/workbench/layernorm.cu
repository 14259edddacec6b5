// cuda/workbench/layernorm.cu: layer norm over the last dim, y = (x - mean) / sqrt(var + 1e-5) * w + b
// for x (rows, cols), w and b (cols), in three numbered versions.
//
// Napkin math (H100 SXM, NVIDIA H100 Tensor Core GPU datasheet: FP32 67 TFLOP/s, HBM3 3.35 TB/s).
// For 4096 rows x 4096 columns:
//   bytes  read x, write y (w and b are reused from cache): 8 R C = 134 MB -> 40 us at 3.35 TB/s
//   flops  ~ 8 R C (mean, centred square, normalise, scale, shift) = 134 MFLOP -> 2 us
//   intensity ~1 flop/byte: memory-bound like softmax; the versions differ in passes over x,
//   parallelism per row and how the statistics are combined.
#include <cmath>
#include <cstddef>
#include <stdexcept>

#include "cuda/workbench/device.h"

namespace gradsleuth::workbench::GS_WB_NS {
namespace {

constexpr float kEps = 1e-5f;

// ---- v1: naive. One thread per row: mean, then variance (two-pass), then write. -----------
// Only R threads, uncoalesced (neighbouring threads are C floats apart), three passes over x.
__global__ void layernorm_v1(const float* x, const float* w, const float* b, float* y, int R, int C) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  const float* xr = x + static_cast<size_t>(r) * C;
  float* yr = y + static_cast<size_t>(r) * C;
  float sum = 0.0f;
  for (int c = 0; c < C; ++c) sum += xr[c];
  const float mean = sum / C;
  float sq = 0.0f;
  for (int c = 0; c < C; ++c) sq += (xr[c] - mean) * (xr[c] - mean);
  const float rstd = 1.0f / sqrtf(sq / C + kEps);
  for (int c = 0; c < C; ++c) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
}

// ---- v2: one block (256 threads) per row, two-pass, reductions in shared memory. -----------
// Coalesced, R * 256 threads; the mean and the centred sum of squares are two shared-memory
// tree reductions (the two-pass variance is exact enough where E[x^2] - E[x]^2 cancels).
constexpr int kV2Threads = 256;
__device__ float block_sum(float v, float* s) {
  const int t = threadIdx.x;
  s[t] = v;
  __syncthreads();
  for (int stride = kV2Threads / 2; stride > 0; stride /= 2) {
    if (t < stride) s[t] += s[t + stride];
    __syncthreads();
  }
  const float out = s[0];
  __syncthreads();  // s[0] read by all before the next reduction overwrites s
  return out;
}
__global__ void layernorm_v2(const float* x, const float* w, const float* b, float* y, int R, int C) {
  __shared__ float s[kV2Threads];
  const float* xr = x + static_cast<size_t>(blockIdx.x) * C;
  float* yr = y + static_cast<size_t>(blockIdx.x) * C;
  float sum = 0.0f;
  for (int c = threadIdx.x; c < C; c += kV2Threads) sum += xr[c];
  const float mean = block_sum(sum, s) / C;
  float sq = 0.0f;
  for (int c = threadIdx.x; c < C; c += kV2Threads) sq += (xr[c] - mean) * (xr[c] - mean);
  const float rstd = 1.0f / sqrtf(block_sum(sq, s) / C + kEps);
  for (int c = threadIdx.x; c < C; c += kV2Threads) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
}

// ---- v3: one warp per row, Welford in one pass, warp shuffles. -----------------------------
// Each lane keeps (count, mean, M2) over its columns in one read of x (Welford's update is
// stable where the textbook E[x^2] - E[x]^2 is not); the lanes merge their triples with
// Chan's formula over __shfl_down_sync and lane 0's result is broadcast. One statistics pass
// instead of two, no shared memory, no barrier; 4 rows per block of 128.
constexpr int kV3Threads = 128;
__global__ void layernorm_v3(const float* x, const float* w, const float* b, float* y, int R, int C) {
  const int r = blockIdx.x * (kV3Threads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= R) return;  // whole warps leave
  const float* xr = x + static_cast<size_t>(r) * C;
  float* yr = y + static_cast<size_t>(r) * C;
  float n = 0.0f, mean = 0.0f, m2 = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float v = xr[c];
    n += 1.0f;
    const float d = v - mean;
    mean += d / n;
    m2 += d * (v - mean);
  }
  for (int off = 16; off > 0; off /= 2) {
    const float n2 = __shfl_down_sync(0xffffffffu, n, off);
    const float mean2 = __shfl_down_sync(0xffffffffu, mean, off);
    const float m22 = __shfl_down_sync(0xffffffffu, m2, off);
    const float nn = n + n2;
    if (n2 > 0.0f) {  // lanes past the end of the row (or past 31) bring nothing
      const float d = mean2 - mean;
      mean += d * (n2 / nn);
      m2 += m22 + d * d * (n * n2 / nn);
      n = nn;
    }
  }
  mean = __shfl_sync(0xffffffffu, mean, 0);
  m2 = __shfl_sync(0xffffffffu, m2, 0);
  const float rstd = 1.0f / sqrtf(m2 / C + kEps);
  for (int c = lane; c < C; c += 32) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
}

}  // namespace

cudaError_t launch_layernorm(int version, const float* const* in, float* out, const Shape& s, cudaStream_t stream) {
  const int R = static_cast<int>(s.m), C = static_cast<int>(s.n);
  switch (version) {
    case 1:
      return gs::cuda::launch(layernorm_v1, dim3(ceil_div(R, 128)), dim3(128), 0, stream, in[0], in[1], in[2], out, R,
                              C);
    case 2: return gs::cuda::launch(layernorm_v2, dim3(R), dim3(kV2Threads), 0, stream, in[0], in[1], in[2], out, R, C);
    case 3:
      return gs::cuda::launch(layernorm_v3, dim3(ceil_div(R, kV3Threads / 32)), dim3(kV3Threads), 0, stream, in[0],
                              in[1], in[2], out, R, C);
    default: throw std::invalid_argument("layernorm: no version " + std::to_string(version));
  }
}

}  // namespace gradsleuth::workbench::GS_WB_NS
