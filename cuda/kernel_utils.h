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

// Calls f(T{}) with T the element type of dtype t: bool, int64_t, float, double, and the storage
// types __half (float16) and __nv_bfloat16 (bfloat16), which kernels widen to float32 on load
// (widen) and round once on store (narrow).
template <class F>
void dispatch(DType t, F&& f) {
  switch (t) {
    case DType::Bool: f(bool{}); return;
    case DType::Int64: f(int64_t{}); return;
    case DType::Float32: f(float{}); return;
    case DType::Float64: f(double{}); return;
    case DType::Float16: f(__half{}); return;
    case DType::BFloat16: f(__nv_bfloat16{}); return;
  }
  GS_FAIL("cuda", "internal error: unknown dtype code ", static_cast<int>(t));
}

// The 16-bit storage types: loaded into float32, computed there, rounded once on store.
template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
// The type a kernel computes an element of T in: float for the 16-bit types, T itself otherwise.
template <class T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

// A stored element as the value computed with (exact: float32 holds every 16-bit value).
template <class T>
__host__ __device__ inline compute_t<T> widen(T v) {
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(v);
  else
    return v;
}
// A computed value as stored: the one rounding of a 16-bit result (to nearest, ties to even).
template <class T>
__host__ __device__ inline T narrow(compute_t<T> v) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(v);
  else
    return v;
}
// Any element type to any other, as the CPU converts (core/cpu/reduced_float.cpp): into a 16-bit
// type through float32 (float64 and int64 round twice, as in PyTorch), out of one from its float32
// value.
template <class TO, class TI>
__host__ __device__ inline TO convert(TI v) {
  if constexpr (std::is_same_v<TO, TI>)
    return v;
  else if constexpr (is_half_v<TO> && std::is_same_v<TI, bool>)
    return narrow<TO>(v ? 1.0f : 0.0f);
  else if constexpr (is_half_v<TO>)
    return narrow<TO>(static_cast<float>(widen(v)));
  else if constexpr (is_half_v<TI>)
    return static_cast<TO>(widen(v));
  else
    return static_cast<TO>(v);
}

// A kernel that adds into `out` from several threads (atomics) or over several launches: for a
// 16-bit out, f accumulates into a contiguous float32 copy of it (allocated here, holding out's
// values when `keep`, else uninitialised) that is rounded into out once, after f; any other out
// is passed as it is. So a 16-bit sum rounds once, as on the CPU.
class Float32Scratch {
 public:
  Float32Scratch(const DevTensor& like, bool keep);
  ~Float32Scratch();
  Float32Scratch(const Float32Scratch&) = delete;
  Float32Scratch& operator=(const Float32Scratch&) = delete;
  const DevTensor& tensor() const { return t_; }

 private:
  DevTensor t_;
  size_t bytes_ = 0;
};
template <class F>
void accumulate_in_float32(const DevTensor& out, bool keep, F&& f) {
  if (!is_reduced_float(out.dtype)) {
    f(out);
    return;
  }
  Float32Scratch s(out, keep);
  f(s.tensor());
  copy(out, s.tensor());
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
