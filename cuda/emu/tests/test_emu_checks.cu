// cuda/emu/tests/test_emu_checks.cu: the emulator's memcheck and racecheck (cuda/emu/check.cpp):
// each classic kernel bug fails its launch with a report that names the kernel, the thread, the
// block and the element; the correct twin of each runs clean.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cuda/compat.h"
#include "cuda/emu/tests/util.h"

namespace {

__global__ void fill_guard_le(float* y, int n) {  // the bug: i <= n
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) y[i] = 1.0f;
}
__global__ void fill_guard_lt(float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 1.0f;
}
__global__ void shift_left(const float* x, float* y, int n) {  // the bug: reads x[-1] for i == 0
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i - 1];
}
__global__ void dyn_shared_overrun(float* y, int n) {
  GS_DYNAMIC_SHARED(float, s);
  const int t = threadIdx.x;
  s[t + 1] = static_cast<float>(t);  // the bug: the last thread writes s[n]
  __syncthreads();
  if (t < n) y[t] = s[t];
}
__global__ void sum_plain(const float* x, float* out, int n) {  // the bug: += instead of atomicAdd
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[0] += x[i];
}
__global__ void sum_atomic(const float* x, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(out, x[i]);
}
__global__ void block_total_plain(const float* x, float* out) {  // one thread per block, all write out[0]
  if (threadIdx.x == 0) out[0] = x[blockIdx.x];
}
// A warp reduction through shared memory ordered by __syncwarp: clean.
__global__ void warp_sum_syncwarp(const float* x, float* out) {
  __shared__ float s[32];
  const int t = threadIdx.x;
  s[t] = x[t];
  __syncwarp();
  for (int k = 16; k > 0; k /= 2) {
    const float v = t < k ? s[t + k] : 0.0f;
    __syncwarp();
    if (t < k) s[t] += v;
    __syncwarp();
  }
  if (t == 0) out[0] = s[0];
}

// Runs the launch, expects the sticky error, returns the report and resets the device.
template <class F>
std::string expect_fault(F&& launch, cudaError_t want) {
  launch();
  const cudaError_t e = cudaDeviceSynchronize();
  CHECK(e == want);
  const std::string report = gs_emu::last_check_report();
  reset_device();
  return report;
}
// The AddressSanitizer and ThreadSanitizer builds check with those sanitizers instead.
bool checks_here() {
  if (!gs_emu::checks_available()) MESSAGE("memcheck/racecheck are not compiled in this build (a sanitizer build)");
  return gs_emu::checks_available();
}
bool has(const std::string& s, const char* what) {
  if (s.find(what) != std::string::npos) return true;
  MESSAGE("not in the report: '", what, "'\n", s);
  return false;
}

}  // namespace

TEST_CASE(
    "emu memcheck: one element past the end (i <= n) is an illegal address naming kernel, thread, block, element") {
  if (!checks_here()) return;
  gs_emu::set_checks(gs_emu::kMemcheck | gs_emu::kRacecheck);
  {
    DevBuf<float> y(100);
    GS_CUDA_CHECK(gs::cuda::launch(fill_guard_lt, dim3(2), dim3(64), 0, nullptr, y.p, 100));
    GS_CUDA_CHECK(cudaDeviceSynchronize());  // the correct guard is clean
  }
  float* y = nullptr;
  GS_CUDA_CHECK(cudaMalloc(&y, 100 * sizeof(float)));
  const std::string r = expect_fault([&] { gs::cuda::launch(fill_guard_le, dim3(2), dim3(64), 0, nullptr, y, 100); },
                                     cudaErrorIllegalAddress);
  CHECK(has(r, "fill_guard_le"));
  CHECK(has(r, "memcheck: thread 36 of block 1 wrote 4 bytes at kernel argument 0[100]"));
  CHECK(has(r, "just past the end of the device allocation of 400 bytes"));
  CHECK(has(r, "i < n, not i <= n"));
}

TEST_CASE("emu memcheck: one element before the start, and dynamic shared memory past its end") {
  if (!checks_here()) return;
  gs_emu::set_checks(gs_emu::kMemcheck | gs_emu::kRacecheck);
  float *x = nullptr, *y = nullptr;
  GS_CUDA_CHECK(cudaMalloc(&x, 64 * sizeof(float)));
  GS_CUDA_CHECK(cudaMalloc(&y, 64 * sizeof(float)));
  std::string r = expect_fault([&] { gs::cuda::launch(shift_left, dim3(1), dim3(64), 0, nullptr, x, y, 64); },
                               cudaErrorIllegalAddress);
  CHECK(has(r, "thread 0 of block 0 read 4 bytes at kernel argument 0[-1]"));
  CHECK(has(r, "4 bytes before the start of the device allocation of 256 bytes"));

  GS_CUDA_CHECK(cudaMalloc(&y, 32 * sizeof(float)));
  r = expect_fault([&] { gs::cuda::launch(dyn_shared_overrun, dim3(1), dim3(32), 32 * sizeof(float), nullptr, y, 32); },
                   cudaErrorIllegalAddress);
  CHECK(has(r, "thread 31 of block 0 wrote 4 bytes at dynamic shared memory[32]"));
  CHECK(has(r, "past the end of the dynamic shared memory of 128 bytes"));
}

TEST_CASE("emu memcheck: a caching allocator's rounding does not hide an overrun; a freed block is a use after free") {
  if (!checks_here()) return;
  gs_emu::set_checks(gs_emu::kMemcheck);
  float* y = nullptr;
  GS_CUDA_CHECK(cudaMalloc(&y, 512));                   // the allocator's rounded block
  gs_emu::set_accessible_size(y, 100 * sizeof(float));  // the tensor owns 100 floats of it
  std::string r = expect_fault([&] { gs::cuda::launch(fill_guard_le, dim3(1), dim3(128), 0, nullptr, y, 100); },
                               cudaErrorIllegalAddress);
  CHECK(has(r, "kernel argument 0[100]"));
  CHECK(has(r, "the caching allocator's block is larger"));

  GS_CUDA_CHECK(cudaMalloc(&y, 512));
  gs_emu::set_accessible_size(y, 0);  // back in the cache
  r = expect_fault([&] { gs::cuda::launch(fill_guard_lt, dim3(1), dim3(32), 0, nullptr, y, 32); },
                   cudaErrorIllegalAddress);
  CHECK(has(r, "use after free"));
  gs_emu::set_checks(gs_emu::kMemcheck | gs_emu::kRacecheck);
}

TEST_CASE("emu racecheck: += instead of atomicAdd, within a block and across blocks; the atomic twin is clean") {
  if (!checks_here()) return;
  gs_emu::set_checks(gs_emu::kMemcheck | gs_emu::kRacecheck);
  std::vector<float> hx(256, 1.0f);
  {
    DevBuf<float> x(hx), out(std::vector<float>{0.0f});
    GS_CUDA_CHECK(gs::cuda::launch(sum_atomic, dim3(4), dim3(64), 0, nullptr, x.p, out.p, 256));
    GS_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(out.get()[0] == 256.0f);
  }
  float *x = nullptr, *out = nullptr;
  GS_CUDA_CHECK(cudaMalloc(&x, 256 * sizeof(float)));
  GS_CUDA_CHECK(cudaMalloc(&out, sizeof(float)));
  std::string r = expect_fault([&] { gs::cuda::launch(sum_plain, dim3(4), dim3(64), 0, nullptr, x, out, 256); },
                               cudaErrorLaunchFailure);
  CHECK(has(r, "sum_plain"));
  CHECK(has(r, "kernel argument 1[0]"));
  CHECK(has(r, "with no barrier between them"));

  // One writer per block: only the cross-block rule sees it.
  GS_CUDA_CHECK(cudaMalloc(&x, 4 * sizeof(float)));
  GS_CUDA_CHECK(cudaMalloc(&out, sizeof(float)));
  r = expect_fault([&] { gs::cuda::launch(block_total_plain, dim3(4), dim3(32), 0, nullptr, x, out); },
                   cudaErrorLaunchFailure);
  CHECK(has(r, "both wrote kernel argument 1[0] without an atomic"));
  CHECK(has(r, "thread 0 of block "));
  CHECK(has(r, "blocks run in any order"));
}

TEST_CASE("emu racecheck: __syncwarp orders a warp's shared-memory exchange; checks off means no report") {
  if (!checks_here()) return;
  gs_emu::set_checks(gs_emu::kMemcheck | gs_emu::kRacecheck);
  std::vector<float> hx(32);
  for (int i = 0; i < 32; ++i) hx[static_cast<size_t>(i)] = static_cast<float>(i);
  {
    DevBuf<float> x(hx), out(1);
    GS_CUDA_CHECK(gs::cuda::launch(warp_sum_syncwarp, dim3(1), dim3(32), 0, nullptr, x.p, out.p));
    GS_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(out.get()[0] == 496.0f);
  }
  gs_emu::set_checks(0);
  {
    DevBuf<float> y(100);
    GS_CUDA_CHECK(gs::cuda::launch(fill_guard_le, dim3(2), dim3(64), 0, nullptr, y.p, 100));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);  // the red zone absorbed the write; nobody looked
  }
  gs_emu::set_checks(gs_emu::kMemcheck | gs_emu::kRacecheck);
  CHECK(gs_emu::checks() == (gs_emu::kMemcheck | gs_emu::kRacecheck));
}
