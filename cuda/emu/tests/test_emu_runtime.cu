// cuda/emu/tests/test_emu_runtime.cu: the emulated runtime's checks: launch limits and error
// semantics, pointer and copy-direction checks, streams/events, divergent barriers, device info.
#include <doctest/doctest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/compat.h"
#include "cuda/emu/tests/util.h"

namespace {

__global__ void touch(float* p, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = 1.0f;
}

__global__ void early_return_then_barrier(float* p) {
  if (threadIdx.x >= 16) return;  // BUG on purpose: threads 16.. never reach the barrier
  __syncthreads();
  p[threadIdx.x] = 1.0f;
}

__global__ void two_barriers(float* p) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  p[threadIdx.x] = 2.0f;
}

__global__ void half_warp_shuffle(float* p) {
  float v = static_cast<float>(threadIdx.x);
  if (threadIdx.x < 16) v += __shfl_down_sync(0xffffffffu, v, 1);  // lanes 16..31 never join
  p[threadIdx.x] = v;
}

__global__ void throws_kernel(float* p) {
  if (threadIdx.x == 3) throw std::runtime_error("boom");
  p[threadIdx.x] = 0.0f;
}

}  // namespace

TEST_CASE("emu: launch limits return cudaErrorInvalidConfiguration and set the last error") {
  DevBuf<float> d(2048);
  cudaGetLastError();
  CHECK(gs::cuda::launch(touch, dim3(1), dim3(1025), 0, nullptr, d.p, 2048) == cudaErrorInvalidConfiguration);
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidConfiguration);
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidConfiguration);  // peek does not reset
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  CHECK(cudaGetLastError() == cudaSuccess);  // get does
  CHECK(gs::cuda::launch(touch, dim3(1), dim3(1, 1, 65), 0, nullptr, d.p, 2048) == cudaErrorInvalidConfiguration);
  CHECK(gs::cuda::launch(touch, dim3(1), dim3(0), 0, nullptr, d.p, 2048) == cudaErrorInvalidConfiguration);
  CHECK(gs::cuda::launch(touch, dim3(1, 65536), dim3(32), 0, nullptr, d.p, 2048) == cudaErrorInvalidConfiguration);
  CHECK(gs::cuda::launch(touch, dim3(0), dim3(32), 0, nullptr, d.p, 2048) == cudaErrorInvalidConfiguration);
  CHECK(gs::cuda::launch(touch, dim3(1), dim3(32), 49153, nullptr, d.p, 2048) == cudaErrorInvalidValue);
  cudaGetLastError();
  // Errors are not sticky: the next good launch works.
  CHECK(gs::cuda::launch(touch, dim3(2), dim3(1024), 0, nullptr, d.p, 2048) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(d.get()[2047] == 1.0f);
  // GS_CUDA_CHECK names the call and the error.
  try {
    GS_CUDA_CHECK(gs::cuda::launch(touch, dim3(1), dim3(2000), 0, nullptr, d.p, 2048));
    FAIL("no throw");
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("cudaErrorInvalidConfiguration") != std::string::npos);
    CHECK(msg.find("gs::cuda::launch(touch") != std::string::npos);
  }
  cudaGetLastError();
}

TEST_CASE("emu: a host pointer passed to a kernel is rejected (argument index named)") {
  std::vector<float> host(64);
  CHECK(gs::cuda::launch(touch, dim3(1), dim3(64), 0, nullptr, host.data(), 64) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  float* pinned = nullptr;
  REQUIRE(cudaMallocHost(&pinned, 64 * sizeof(float)) == cudaSuccess);
  CHECK(gs::cuda::launch(touch, dim3(1), dim3(64), 0, nullptr, pinned, 64) == cudaErrorInvalidValue);
  CHECK(cudaFreeHost(pinned) == cudaSuccess);
  cudaGetLastError();
  CHECK(gs::cuda::launch(touch, dim3(1), dim3(64), 0, nullptr, static_cast<float*>(nullptr), 0) == cudaSuccess);
  DevBuf<float> d(64);
  CHECK(gs_emu::is_device_pointer(d.p));
  CHECK(gs_emu::is_device_pointer(d.p + 63));
  CHECK_FALSE(gs_emu::is_device_pointer(d.p + 64));
  CHECK_FALSE(gs_emu::is_device_pointer(host.data()));
  CHECK(gs::cuda::launch(touch, dim3(1), dim3(32), 0, nullptr, d.p + 32, 32) == cudaSuccess);  // inside is fine
}

TEST_CASE("emu: cudaMemcpy direction and size checks") {
  std::vector<float> h(16, 1.0f), back(16, 0.0f);
  DevBuf<float> d(16);
  CHECK(cudaMemcpy(d.p, h.data(), 64, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(h.data(), d.p, 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);  // swapped dst/src
  CHECK(cudaMemcpy(back.data(), d.p, 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(d.p, h.data(), 64, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);  // wrong kind
  CHECK(cudaMemcpy(d.p, h.data(), 68, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);  // past the end
  CHECK(cudaMemcpy(d.p, h.data(), 64, static_cast<cudaMemcpyKind>(7)) == cudaErrorInvalidMemcpyDirection);
  CHECK(cudaGetLastError() == cudaErrorInvalidMemcpyDirection);
  CHECK(cudaMemcpy(back.data(), d.p, 64, cudaMemcpyDefault) == cudaSuccess);
  CHECK(back[15] == 1.0f);
  DevBuf<float> d2(16);
  CHECK(cudaMemcpy(d2.p, d.p, 64, cudaMemcpyDeviceToDevice) == cudaSuccess);
  CHECK(cudaMemset(h.data(), 0, 64) == cudaErrorInvalidValue);
  CHECK(cudaMemset(d.p, 0, 65) == cudaErrorInvalidValue);
  CHECK(cudaFree(h.data()) == cudaErrorInvalidValue);
  cudaGetLastError();
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 10) == cudaSuccess);
  CHECK(cudaFree(p) == cudaSuccess);
  CHECK(cudaFree(p) == cudaErrorInvalidValue);  // double free
  cudaGetLastError();
}

TEST_CASE("emu: streams and events") {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  cudaEvent_t a = nullptr, b = nullptr;
  REQUIRE(cudaEventCreate(&a) == cudaSuccess);
  REQUIRE(cudaEventCreate(&b) == cudaSuccess);
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, a, b) == cudaErrorInvalidResourceHandle);  // not recorded yet
  DevBuf<float> d(4096);
  std::vector<float> h(4096, 3.0f);
  CHECK(cudaEventRecord(a, s) == cudaSuccess);
  CHECK(cudaMemcpyAsync(d.p, h.data(), 4096 * sizeof(float), cudaMemcpyHostToDevice, s) == cudaSuccess);
  CHECK(gs::cuda::launch(touch, dim3(4), dim3(1024), 0, s, d.p, 4096) == cudaSuccess);
  CHECK(cudaMemsetAsync(d.p, 0, 16, s) == cudaSuccess);
  CHECK(cudaEventRecord(b, s) == cudaSuccess);
  CHECK(cudaEventSynchronize(b) == cudaSuccess);
  CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(cudaStreamQuery(s) == cudaSuccess);
  CHECK(cudaEventElapsedTime(&ms, a, b) == cudaSuccess);
  CHECK(ms >= 0.0f);
  const auto out = d.get();
  CHECK(out[0] == 0.0f);
  CHECK(out[4095] == 1.0f);
  CHECK(cudaEventDestroy(a) == cudaSuccess);
  CHECK(cudaEventDestroy(b) == cudaSuccess);
  CHECK(cudaStreamDestroy(s) == cudaSuccess);
  CHECK(cudaStreamDestroy(s) == cudaErrorInvalidResourceHandle);
  CHECK(gs::cuda::launch(touch, dim3(1), dim3(32), 0, s, d.p, 32) == cudaErrorInvalidResourceHandle);
  cudaGetLastError();
}

TEST_CASE("emu: divergent __syncthreads is a clear, sticky launch failure, not a hang") {
  float* d = nullptr;
  REQUIRE(cudaMalloc(&d, 64 * sizeof(float)) == cudaSuccess);
  CHECK(gs::cuda::launch(early_return_then_barrier, dim3(2), dim3(64), 0, nullptr, d) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
  std::vector<float> tmp(1);
  CHECK(cudaMemcpy(tmp.data(), d, 4, cudaMemcpyDeviceToHost) == cudaErrorLaunchFailure);  // sticky
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  reset_device();  // frees d, clears the sticky error
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("emu: other kernel faults: different barriers, a half-warp shuffle, an exception") {
  for (int which = 0; which < 3; ++which) {
    float* d = nullptr;
    REQUIRE(cudaMalloc(&d, 64 * sizeof(float)) == cudaSuccess);
    const cudaError_t launched =
        which == 0 ? gs::cuda::launch(two_barriers, dim3(1), dim3(64), 0, nullptr, d)
                   : (which == 1 ? gs::cuda::launch(half_warp_shuffle, dim3(1), dim3(32), 0, nullptr, d)
                                 : gs::cuda::launch(throws_kernel, dim3(1), dim3(32), 0, nullptr, d));
    CHECK(launched == cudaSuccess);
    CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
    reset_device();
  }
  // The fibers of an aborted launch are reusable.
  DevBuf<float> d(64);
  CHECK(gs::cuda::launch(touch, dim3(1), dim3(64), 0, nullptr, d.p, 64) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(d.get()[63] == 1.0f);
}

TEST_CASE("emu: device properties, device count, memory info, stats") {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count) == cudaSuccess);
  CHECK(count == 1);
  CHECK(cudaSetDevice(1) == cudaErrorInvalidDevice);
  CHECK(cudaSetDevice(0) == cudaSuccess);
  cudaGetLastError();
  cudaDeviceProp p;
  REQUIRE(cudaGetDeviceProperties(&p, 0) == cudaSuccess);
  CHECK(std::strcmp(p.name, "gradsleuth CPU emulator") == 0);
  CHECK(p.warpSize == 32);
  CHECK(p.maxThreadsPerBlock == 1024);
  CHECK(p.sharedMemPerBlock == 48 * 1024);
  CHECK(p.maxGridSize[1] == 65535);
  int v = 0;
  CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
  CHECK(v == p.multiProcessorCount);
  size_t free0 = 0, total = 0, free1 = 0;
  CHECK(cudaMemGetInfo(&free0, &total) == cudaSuccess);
  {
    DevBuf<char> d(1 << 20);
    CHECK(cudaMemGetInfo(&free1, &total) == cudaSuccess);
    CHECK(free0 - free1 == (1u << 20));
  }
  gs_emu::reset_stats();
  DevBuf<float> d(256);
  GS_CUDA_CHECK(gs::cuda::launch(touch, dim3(2), dim3(128), 0, nullptr, d.p, 256));
  const auto st = gs_emu::stats();
  CHECK(st.launches == 1);
  CHECK(st.blocks == 2);
  CHECK(st.threads == 256);
}
