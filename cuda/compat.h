// cuda/compat.h: the portability header every .cu includes first.
// Real CUDA under nvcc; the CPU emulator in cuda/emu/ when the same source is compiled as C++.
#pragma once

// GS_CUDA_EMU: 1 in the emulated build, 0 under nvcc. Host-only .cpp files of the real
// (nvcc) build that include this header must be compiled with -DGS_CUDA_EMU=0.
#ifndef GS_CUDA_EMU
#if defined(__CUDACC__)
#define GS_CUDA_EMU 0
#else
#define GS_CUDA_EMU 1
#endif
#endif

#if GS_CUDA_EMU && defined(__CUDACC__)
#error "cuda/compat.h: GS_CUDA_EMU=1 under nvcc; the emulator is for the plain C++ build only"
#endif

#if GS_CUDA_EMU
#include "cuda/emu/cuda_bf16.h"
#include "cuda/emu/cuda_fp16.h"
#include "cuda/emu/cuda_runtime.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#include <cstddef>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

// Dynamic shared memory: `GS_DYNAMIC_SHARED(float, buf);` declares `float* buf` pointing at the
// launch's dynamic shared memory (the shmem_bytes argument of gs::cuda::launch). Use it once per
// kernel and carve further arrays out of it with offsets.
#if GS_CUDA_EMU
#define GS_DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(::gs_emu::dynamic_shared_memory())
#else
#define GS_DYNAMIC_SHARED(T, name)                                          \
  extern __shared__ __align__(16) unsigned char gs_dynamic_shared_bytes_[]; \
  T* name = reinterpret_cast<T*>(gs_dynamic_shared_bytes_)
#endif

namespace gradsleuth::cuda {

// Launches kernel<<<grid, block, shmem, stream>>>(args...) in both builds. Each argument is
// converted to the kernel's parameter type first (as <<<>>> would). Returns the launch error
// (cudaSuccess, cudaErrorInvalidConfiguration, ...) and sets cudaGetLastError like <<<>>>.
template <class... KArgs, class... Args>
cudaError_t launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t shmem, cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(KArgs) == sizeof...(Args), "gradsleuth::cuda::launch: wrong number of kernel arguments");
  std::tuple<std::remove_cv_t<KArgs>...> converted(static_cast<std::remove_cv_t<KArgs>>(std::forward<Args>(args))...);
#if GS_CUDA_EMU
  return ::gs_emu::launch_tuple(kernel, grid, block, shmem, stream, converted);
#else
  return std::apply(
      [&](auto&... a) {
        void* argv[sizeof...(KArgs) + 1] = {static_cast<void*>(&a)..., nullptr};
        return cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, argv, shmem, stream);
      },
      converted);
#endif
}

namespace detail {
inline std::string cuda_error_message(cudaError_t err, const char* call, const char* file, int line) {
  return std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + cudaGetErrorName(err) + " (" +
         cudaGetErrorString(err) + ")";
}
}  // namespace detail

// Throws std::runtime_error("file:line: call failed: cudaErrorX (description)") unless err is cudaSuccess.
inline void check(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess) throw std::runtime_error(detail::cuda_error_message(err, call, file, line));
}

}  // namespace gradsleuth::cuda

// The project's short name (as in core/tensor.h): gs::cuda::launch is gradsleuth::cuda::launch.
namespace gs = gradsleuth;

// GS_CUDA_CHECK(cudaMalloc(&p, n)); throws std::runtime_error naming the call, file:line and the error.
#define GS_CUDA_CHECK(expr) ::gradsleuth::cuda::check((expr), #expr, __FILE__, __LINE__)
