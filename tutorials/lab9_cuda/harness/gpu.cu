// Lab 9's GPU harness (see gpu.h): device query, buffers, timing and cuBLAS for
// the grader. Given code, shared by the starter and the solution; built by nvcc (C++17) for a
// GPU, or as C++ against the CPU emulator (cuda/emu/), whose cuBLAS is a reference GEMM.
#include "tutorials/lab9_cuda/harness/gpu.h"

#include "cuda/compat.h"
#include "cuda/cublas_compat.h"

#include <cstdio>

namespace gradsleuth::lab9::gpu {

namespace {

cublasHandle_t g_cublas = nullptr;

DeviceInfo query() {
  DeviceInfo info;
  int count = 0;  // cudaGetDeviceCount leaves it unwritten when it fails (no driver: error 35)
  const cudaError_t err = cudaGetDeviceCount(&count);
  info.status = static_cast<int>(err);
  info.count = err == cudaSuccess ? count : 0;
  if (err != cudaSuccess) {
    std::snprintf(info.error, sizeof info.error, "%.250s", error_text(err));  // long texts are cut
    cudaGetLastError();                                                       // clear it
    return info;
  }
  if (count == 0) return info;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    std::snprintf(info.name, sizeof info.name, "%s", prop.name);
    info.cc_major = prop.major;
    info.cc_minor = prop.minor;
    info.sm_count = prop.multiProcessorCount;
  }
#if !GS_CUDA_EMU  // the emulator has no memory clock: its peak stays 0 (it is never timed)
  // The memory clock and bus width are device attributes (CUDA 13 dropped them from cudaDeviceProp).
  int clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0) == cudaSuccess)
    info.peak_gb_per_s = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
#endif
  cudaGetLastError();
  return info;
}

}  // namespace

const DeviceInfo& device_info() {
  static const DeviceInfo info = query();
  return info;
}

const char* error_text(int err) {
  static thread_local char buf[320];
  const cudaError_t e = static_cast<cudaError_t>(err);
  std::snprintf(buf, sizeof buf, "%s (%d): %s", cudaGetErrorName(e), err, cudaGetErrorString(e));
  return buf;
}

const char* cublas_status_text(int status) {
  static thread_local char buf[320];
  const cublasStatus_t s = static_cast<cublasStatus_t>(status);
  std::snprintf(buf, sizeof buf, "%s (%d): %s", cublasGetStatusName(s), status, cublasGetStatusString(s));
  return buf;
}

int alloc(float** p, int64_t n) {
  *p = nullptr;
  return cudaMalloc(reinterpret_cast<void**>(p), static_cast<size_t>(n > 0 ? n : 1) * sizeof(float));
}

void release(float* p) {
  if (p && cudaFree(p) != cudaSuccess) cudaGetLastError();
}

int upload(float* dst, const float* src, int64_t n) {
  return cudaMemcpy(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyHostToDevice);
}

int download(float* dst, const float* src, int64_t n) {
  return cudaMemcpy(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToHost);
}

int fill_bytes(float* p, int64_t n, int byte) { return cudaMemset(p, byte, static_cast<size_t>(n) * sizeof(float)); }

int synchronize() { return cudaDeviceSynchronize(); }

int clear_error() { return cudaGetLastError(); }

int reset() {
  if (g_cublas) cublasDestroy(g_cublas);
  g_cublas = nullptr;
  const int err = cudaDeviceReset();
  cudaGetLastError();
  return err;
}

int time_ms(int (*launch)(void* ctx), void* ctx, int warmup, int reps, float* ms) {
  *ms = 0.0f;
  for (int i = 0; i < warmup; ++i)
    if (const int err = launch(ctx)) return err;
  if (const int err = cudaDeviceSynchronize()) return err;
  cudaEvent_t start = nullptr, stop = nullptr;
  int err = cudaEventCreate(&start);
  if (!err) err = cudaEventCreate(&stop);
  if (!err) err = cudaEventRecord(start);
  for (int i = 0; i < reps && !err; ++i) err = launch(ctx);
  if (!err) err = cudaEventRecord(stop);
  if (!err) err = cudaEventSynchronize(stop);
  float total = 0.0f;
  if (!err) err = cudaEventElapsedTime(&total, start, stop);
  if (!err && reps > 0) *ms = total / reps;
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  return err;
}

int cublas_sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
  if (!g_cublas) {
    const cublasStatus_t s = cublasCreate(&g_cublas);
    if (s != CUBLAS_STATUS_SUCCESS) {
      g_cublas = nullptr;
      return static_cast<int>(s);
    }
  }
  // cuBLAS is column-major. A row-major X (r, c) is the column-major X^T (c, r), so
  // ask for C^T (N, M) = B^T (N, K) @ A^T (K, M): no transposes, leading dims N, K, N.
  const float one = 1.0f, zero = 0.0f;
  return static_cast<int>(cublasSgemm(g_cublas, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, N, A, K, &zero, C, N));
}

}  // namespace gradsleuth::lab9::gpu
