// Lab 9's GPU harness, given (not part of the tasks): what the grader needs from
// the CUDA runtime and cuBLAS. gpu.cu is compiled by nvcc for a GPU or as C++ against the
// CPU emulator (tutorials/CMakeLists.txt decides); this header is plain C++17 so the C++20
// grader can include it. Every function
// returns 0 on success or the CUDA error code (a cublasStatus_t for cublas_sgemm).
#pragma once
#include <cstdint>

namespace gradsleuth::lab9::gpu {

struct DeviceInfo {
  int status = 0;                  // what cudaGetDeviceCount returned (0 = cudaSuccess)
  int count = 0;                   // devices found (0 when status != 0)
  char error[256] = {};            // "cudaErrorInsufficientDriver (35): CUDA driver version is insufficient ..."
  char name[256] = {};             // device 0
  int cc_major = 0, cc_minor = 0;  // compute capability of device 0 (9.0: H100, H200)
  int sm_count = 0;
  double peak_gb_per_s = 0.0;  // 2 (DDR) * memory clock * bus width / 8, from the device attributes
};
// Asks the runtime once and remembers the answer.
const DeviceInfo& device_info();

// "cudaErrorIllegalAddress (700): an illegal memory access was encountered".
const char* error_text(int err);
const char* cublas_status_text(int status);

int alloc(float** p, int64_t n);                        // n floats of device memory
void release(float* p);                                 // cudaFree; errors ignored and cleared
int upload(float* dst, const float* src, int64_t n);    // host -> device
int download(float* dst, const float* src, int64_t n);  // device -> host
int fill_bytes(float* p, int64_t n, int byte);          // cudaMemset of n floats' bytes
int synchronize();                                      // cudaDeviceSynchronize
int clear_error();                                      // cudaGetLastError: returns and clears it
// After an error that poisons the context (an illegal address in a kernel):
// drops the cuBLAS handle and calls cudaDeviceReset, so later cases can run.
int reset();

// Calls launch(ctx) `warmup` times, then `reps` times between two CUDA events;
// *ms is the mean time of one call. Stops at the first nonzero return of
// `launch` (returned as is) or CUDA error.
int time_ms(int (*launch)(void* ctx), void* ctx, int warmup, int reps, float* ms);

// cuBLAS SGEMM for row-major C (M, N) = A (M, K) @ B (K, N) in float32 (the default
// math mode: no TF32). The handle is created on first use.
int cublas_sgemm(const float* A, const float* B, float* C, int M, int N, int K);

}  // namespace gradsleuth::lab9::gpu
