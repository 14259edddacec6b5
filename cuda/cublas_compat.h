// cuda/cublas_compat.h: cuBLAS in both builds: the real <cublas_v2.h> under nvcc (GS_CUDA_EMU=0),
// the column-major CPU reference in cuda/emu/ in the emulated build.
#pragma once
#include "cuda/compat.h"

#if GS_CUDA_EMU
#include "cuda/emu/cublas_v2.h"
#else
#include <cublas_v2.h>
#endif

#include <stdexcept>
#include <string>

namespace gradsleuth::cuda {
inline const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_(unknown)";
  }
}
// Throws std::runtime_error("file:line: call failed: CUBLAS_STATUS_X") unless s is CUBLAS_STATUS_SUCCESS.
inline void check_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + call +
                             " failed: " + cublas_status_name(s));
}
}  // namespace gradsleuth::cuda

#define GS_CUBLAS_CHECK(expr) ::gradsleuth::cuda::check_cublas((expr), #expr, __FILE__, __LINE__)
