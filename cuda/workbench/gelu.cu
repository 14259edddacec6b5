// cuda/workbench/gelu.cu: the elementwise op of the workbench, GELU (tanh approximation)
// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) on n float32 values, in three numbered versions.
//
// Napkin math (H100 SXM, NVIDIA H100 Tensor Core GPU datasheet: FP32 67 TFLOP/s, HBM3 3.35 TB/s).
// For n = 2^26:
//   bytes  read x, write y: 8 n = 537 MB   -> 160 us at 3.35 TB/s
//   flops  ~ 10 n with tanh counted as a few = 0.67 GFLOP -> 10 us at 67 TFLOP/s
//   intensity ~1.25 flop/byte: memory-bound. The whole game is bytes in flight per SM: enough
//   independent loads outstanding to cover DRAM latency, and as few instructions per byte as
//   possible. A good elementwise kernel reaches 80-90% of a device-to-device copy.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>

#include "cuda/workbench/device.h"

namespace gradsleuth::workbench::GS_WB_NS {
namespace {

__device__ __forceinline__ float gelu(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

// ---- v1: one thread per element. ------------------------------------------------------------
// Coalesced and simple; one block of 256 per 256 elements: n / 256 blocks (262k for 2^26),
// each doing very little before it retires, and one 4-byte load in flight per thread.
__global__ void gelu_v1(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = gelu(x[i]);
}

// ---- v2: grid-stride loop over a grid sized to the machine. --------------------------------
// 8 blocks of 256 per SM (a full H100 SM: 2048 threads) loop over the array: no block launch
// and retire overhead per 256 elements, and the same kernel works for any n. On its own this
// is about as fast as v1; it is the form v3 builds on.
__global__ void gelu_v2(const float* x, float* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = gelu(x[i]);
}

// ---- v3: float4 loads and stores over the grid-stride loop. --------------------------------
// Each iteration moves 16 bytes per thread in one instruction: 4x fewer load/store
// instructions and 4x more bytes in flight per thread. The n % 4 tail is done by the first
// threads of the grid, one element each.
__global__ void gelu_v3(const float* x, float* y, int n) {
  const int n4 = n / 4;
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  const f4* x4 = reinterpret_cast<const f4*>(x);
  f4* y4 = reinterpret_cast<f4*>(y);
  for (int i = tid; i < n4; i += blockDim.x * gridDim.x) {
    f4 v = x4[i];
    v.x = gelu(v.x), v.y = gelu(v.y), v.z = gelu(v.z), v.w = gelu(v.w);
    y4[i] = v;
  }
  const int tail = 4 * n4 + tid;
  if (tail < n) y[tail] = gelu(x[tail]);
}

unsigned grid_for(int n, int per_thread) {
  static const int sms = [] {
    int c = 0;
    if (cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || c <= 0) {
      cudaGetLastError();
      c = 132;
    }
    return c;
  }();
  return std::max(1u, std::min(ceil_div(n, 256 * per_thread), static_cast<unsigned>(8 * sms)));
}

}  // namespace

cudaError_t launch_gelu(int version, const float* const* in, float* out, const Shape& s, cudaStream_t stream) {
  const int n = static_cast<int>(s.n);
  switch (version) {
    case 1: return gs::cuda::launch(gelu_v1, dim3(ceil_div(n, 256)), dim3(256), 0, stream, in[0], out, n);
    case 2: return gs::cuda::launch(gelu_v2, dim3(grid_for(n, 1)), dim3(256), 0, stream, in[0], out, n);
    case 3: return gs::cuda::launch(gelu_v3, dim3(grid_for(n, 4)), dim3(256), 0, stream, in[0], out, n);
    default: throw std::invalid_argument("gelu: no version " + std::to_string(version));
  }
}

}  // namespace gradsleuth::workbench::GS_WB_NS
