// cuda/emu/tests/race_kernel.cu: a shared-memory block sum; with GS_EMU_RACE_DEMO=1 its first
// __syncthreads is missing (a data race the emulator's random schedule and TSan must catch).
#include <vector>

#include "cuda/compat.h"

#if GS_EMU_RACE_DEMO
#define GS_RACE_NS racy
#else
#define GS_RACE_NS fixed
#endif

namespace gs_emu_test::GS_RACE_NS {

constexpr int kThreads = 128;

__global__ void block_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
  __shared__ float tile[kThreads];
  const int t = threadIdx.x;
  const int i = blockIdx.x * kThreads + t;
  tile[t] = i < n ? x[i] : 0.0f;
#if !GS_EMU_RACE_DEMO
  __syncthreads();
#endif
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (t < s) tile[t] += tile[t + s];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = tile[0];
}

std::vector<float> block_sums(const std::vector<float>& x) {
  const int n = static_cast<int>(x.size());
  const int blocks = (n + kThreads - 1) / kThreads;
  float *dx = nullptr, *dout = nullptr;
  GS_CUDA_CHECK(cudaMalloc(&dx, x.size() * sizeof(float)));
  GS_CUDA_CHECK(cudaMalloc(&dout, blocks * sizeof(float)));
  GS_CUDA_CHECK(cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  GS_CUDA_CHECK(gs::cuda::launch(block_sum, dim3(blocks), dim3(kThreads), 0, nullptr, dx, dout, n));
  GS_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out(blocks);
  GS_CUDA_CHECK(cudaMemcpy(out.data(), dout, blocks * sizeof(float), cudaMemcpyDeviceToHost));
  GS_CUDA_CHECK(cudaFree(dx));
  GS_CUDA_CHECK(cudaFree(dout));
  return out;
}

}  // namespace gs_emu_test::GS_RACE_NS
