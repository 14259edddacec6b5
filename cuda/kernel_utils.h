// cuda/kernel_utils.h: what every .cu of the backend shares: launch geometry, the launch
// check that names the op, dtype dispatch, device-side atomics and math for all four dtypes.
#pragma once
#include "cuda/compat.h"

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "cuda/kernels.h"

namespace gradsleuth::cuda {

inline constexpr int kThreads = 256;        // threads per block of the elementwise kernels
inline constexpr int64_t kMaxBlocks = 256;  // grid cap: kernels loop (grid-stride) over the rest

// Blocks for n elements: ceil(n / threads), at most kMaxBlocks (grid-stride loops cover any n).
inline unsigned blocks_for(int64_t n, int threads = kThreads, int64_t cap = kMaxBlocks) {
  int64_t b = (n + threads - 1) / threads;
  if (b > cap) b = cap;
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

// Records `op` as the last launcher and throws a gradsleuth::Error naming it when the launch
// failed. Debug builds also check cudaGetLastError right away.
void after_launch(const char* op, cudaError_t err);
// Throws a gradsleuth::Error for a failed runtime call, naming the op that launched last.
void check_runtime(cudaError_t err, const char* what);

// gs::cuda::launch on the default stream, then after_launch(op).
template <class... KArgs, class... Args>
void launch_op(const char* op, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t shmem, Args&&... args) {
  after_launch(op, ::gradsleuth::cuda::launch(kernel, grid, block, shmem, cudaStream_t{}, std::forward<Args>(args)...));
}

// Calls f(T{}) with T the element type of dtype t (the four computing dtypes). float16 and
// bfloat16 have no kernels here: cuda/backend.cpp refuses them by op name before any kernel
// runs, and a dtype that still gets here is an internal error, never a silent no-op.
template <class F>
void dispatch(DType t, F&& f) {
  switch (t) {
    case DType::Bool: f(bool{}); return;
    case DType::Int64: f(int64_t{}); return;
    case DType::Float32: f(float{}); return;
    case DType::Float64: f(double{}); return;
    case DType::Float16:
    case DType::BFloat16: break;
  }
  GS_FAIL("cuda", "internal error: no CUDA kernel for dtype ", dtype_name(t),
          " (the backend refuses 16-bit floats before dispatch)");
}

template <class T>
inline constexpr bool is_float_v = std::is_same_v<T, float> || std::is_same_v<T, double>;

// *p += v for every dtype (bool: logical or; int64 through the unsigned 64-bit atomic).
template <class T>
__device__ inline void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, bool>) {
    // Every writer stores the same value: harmless on a GPU. On the emulator an atomic store, so
    // racecheck does not report the writers to each other.
#if GS_CUDA_EMU
    if (v) __atomic_store_n(p, true, __ATOMIC_RELAXED);
#else
    if (v) *p = true;
#endif
  } else if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else {
    atomicAdd(p, v);
  }
}

template <class T>
__device__ inline bool is_nan(T v) {
  if constexpr (is_float_v<T>)
    return v != v;
  else
    return false;
}

}  // namespace gradsleuth::cuda

namespace gradsleuth::cuda {

// The 1-D geometry of n contiguous elements.
inline Strided flat(int64_t n) {
  Strided s;
  s.ndim = 1;
  s.sizes[0] = n;
  s.strides[0] = 1;
  return s;
}
// When every operand is contiguous (same shape, as the Backend contract gives), a 1-D walk
// avoids the per-element div/mod of Strided::offset.
template <class... D>
inline bool all_contiguous(const D&... ts) {
  return (ts.g.contiguous() && ...);
}

// Grid-stride loop over [0, n): `for (GS_GRID_STRIDE(i, n))`.
#define GS_GRID_STRIDE(i, n)                                               \
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; \
  i < (n);                                                                 \
  i += static_cast<int64_t>(gridDim.x) * blockDim.x

}  // namespace gradsleuth::cuda
