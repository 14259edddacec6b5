// cuda/emu/cuda_runtime.h: the CPU CUDA emulator's stand-in for <cuda_runtime.h>: host API
// (cuda_runtime_api.h) plus the device-side language subset kernels use, as plain C++.
#pragma once
#include <math.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>

#include "cuda/emu/cuda_runtime_api.h"
#include "cuda/emu/emu.h"

// ---- qualifiers ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __constant__
#define __align__(n) __attribute__((aligned(n)))
// __restrict__ is a GCC/Clang keyword already. __noinline__ is deliberately not defined.

// ---- built-in variables (per fiber) ----
#define threadIdx (::gs_emu::detail::thread_idx())
#define blockIdx (::gs_emu::detail::block_idx())
#define blockDim (::gs_emu::detail::block_dim())
#define gridDim (::gs_emu::detail::grid_dim())
inline constexpr int warpSize = 32;

// ---- barriers ----
inline void __syncthreads(const std::source_location& loc = std::source_location::current()) {
  ::gs_emu::detail::block_barrier(0, loc);
}
inline int __syncthreads_count(int pred, const std::source_location& loc = std::source_location::current()) {
  return ::gs_emu::detail::block_barrier(pred != 0, loc);
}
inline int __syncthreads_and(int pred, const std::source_location& loc = std::source_location::current()) {
  return ::gs_emu::detail::block_barrier(pred != 0, loc) == static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
}
inline int __syncthreads_or(int pred, const std::source_location& loc = std::source_location::current()) {
  return ::gs_emu::detail::block_barrier(pred != 0, loc) != 0;
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const std::source_location& loc = std::source_location::current()) {
  ::gs_emu::detail::warp_exchange(mask, 0, -1, nullptr, "__syncwarp", loc);
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
[[noreturn]] inline void __trap(const std::source_location& loc = std::source_location::current()) {
  ::gs_emu::detail::trap(loc);
}

// ---- warp shuffles, votes ----
namespace gs_emu::detail {
template <class T>
inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp shuffle: type must be at most 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
inline T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}
}  // namespace gs_emu::detail

template <class T>
inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32,
                     const std::source_location& loc = std::source_location::current()) {
  const int lane = static_cast<int>(::gs_emu::detail::lane_id());
  const int src = (lane / width) * width + (src_lane % width + width) % width;
  return ::gs_emu::detail::from_bits<T>(
      ::gs_emu::detail::warp_exchange(mask, ::gs_emu::detail::to_bits(var), src, nullptr, "__shfl_sync", loc));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32,
                        const std::source_location& loc = std::source_location::current()) {
  const int lane = static_cast<int>(::gs_emu::detail::lane_id());
  const int src = (lane % width) >= static_cast<int>(delta) ? lane - static_cast<int>(delta) : -1;
  return ::gs_emu::detail::from_bits<T>(
      ::gs_emu::detail::warp_exchange(mask, ::gs_emu::detail::to_bits(var), src, nullptr, "__shfl_up_sync", loc));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32,
                          const std::source_location& loc = std::source_location::current()) {
  const int lane = static_cast<int>(::gs_emu::detail::lane_id());
  const int src = (lane % width) + static_cast<int>(delta) < width ? lane + static_cast<int>(delta) : -1;
  return ::gs_emu::detail::from_bits<T>(
      ::gs_emu::detail::warp_exchange(mask, ::gs_emu::detail::to_bits(var), src, nullptr, "__shfl_down_sync", loc));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32,
                         const std::source_location& loc = std::source_location::current()) {
  const int lane = static_cast<int>(::gs_emu::detail::lane_id());
  int src = lane ^ lane_mask;
  if (src >= (lane / width + 1) * width || src > 31) src = -1;
  return ::gs_emu::detail::from_bits<T>(
      ::gs_emu::detail::warp_exchange(mask, ::gs_emu::detail::to_bits(var), src, nullptr, "__shfl_xor_sync", loc));
}
inline unsigned __ballot_sync(unsigned mask, int pred,
                              const std::source_location& loc = std::source_location::current()) {
  unsigned ballot = 0;
  ::gs_emu::detail::warp_exchange(mask, pred != 0, -1, &ballot, "__ballot_sync", loc);
  return ballot;
}
inline int __all_sync(unsigned mask, int pred, const std::source_location& loc = std::source_location::current()) {
  unsigned ballot = 0;
  ::gs_emu::detail::warp_exchange(mask, pred != 0, -1, &ballot, "__all_sync", loc);
  return (ballot & mask) == (mask & ::gs_emu::detail::warp_present_mask());
}
inline int __any_sync(unsigned mask, int pred, const std::source_location& loc = std::source_location::current()) {
  unsigned ballot = 0;
  ::gs_emu::detail::warp_exchange(mask, pred != 0, -1, &ballot, "__any_sync", loc);
  return ballot != 0;
}
inline unsigned __activemask() { return ::gs_emu::detail::warp_present_mask(); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }

// ---- atomics (relaxed, like CUDA's; __atomic builtins so ThreadSanitizer treats them as atomics) ----
namespace gs_emu::detail {
template <class T>
inline T atomic_fetch_add_int(T* p, T v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
template <class T, class U, class F>
inline T atomic_cas_loop(T* p, F f) {
  U old_bits;
  __atomic_load(reinterpret_cast<U*>(p), &old_bits, __ATOMIC_RELAXED);
  for (;;) {
    T old_val;
    std::memcpy(&old_val, &old_bits, sizeof(T));
    T new_val = f(old_val);
    U new_bits;
    std::memcpy(&new_bits, &new_val, sizeof(T));
    if (__atomic_compare_exchange(reinterpret_cast<U*>(p), &old_bits, &new_bits, false, __ATOMIC_RELAXED,
                                  __ATOMIC_RELAXED))
      return old_val;
  }
}
}  // namespace gs_emu::detail

inline int atomicAdd(int* p, int v) { return ::gs_emu::detail::atomic_fetch_add_int(p, v); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return ::gs_emu::detail::atomic_fetch_add_int(p, v); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return ::gs_emu::detail::atomic_fetch_add_int(p, v);
}
inline float atomicAdd(float* p, float v) {
  return ::gs_emu::detail::atomic_cas_loop<float, uint32_t>(p, [v](float o) { return o + v; });
}
inline double atomicAdd(double* p, double v) {
  return ::gs_emu::detail::atomic_cas_loop<double, uint64_t>(p, [v](double o) { return o + v; });
}
inline int atomicSub(int* p, int v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicSub(unsigned* p, unsigned v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
inline int atomicMax(int* p, int v) {
  return ::gs_emu::detail::atomic_cas_loop<int, int>(p, [v](int o) { return o > v ? o : v; });
}
inline unsigned atomicMax(unsigned* p, unsigned v) {
  return ::gs_emu::detail::atomic_cas_loop<unsigned, unsigned>(p, [v](unsigned o) { return o > v ? o : v; });
}
inline unsigned long long atomicMax(unsigned long long* p, unsigned long long v) {
  return ::gs_emu::detail::atomic_cas_loop<unsigned long long, unsigned long long>(
      p, [v](unsigned long long o) { return o > v ? o : v; });
}
inline int atomicMin(int* p, int v) {
  return ::gs_emu::detail::atomic_cas_loop<int, int>(p, [v](int o) { return o < v ? o : v; });
}
inline unsigned atomicMin(unsigned* p, unsigned v) {
  return ::gs_emu::detail::atomic_cas_loop<unsigned, unsigned>(p, [v](unsigned o) { return o < v ? o : v; });
}
inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
  return ::gs_emu::detail::atomic_cas_loop<unsigned long long, unsigned long long>(
      p, [v](unsigned long long o) { return o < v ? o : v; });
}
template <class T>
inline T gs_emu_atomic_cas(T* p, T compare, T val) {
  __atomic_compare_exchange(p, &compare, &val, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;  // the old value in both cases
}
inline int atomicCAS(int* p, int compare, int val) { return gs_emu_atomic_cas(p, compare, val); }
inline unsigned atomicCAS(unsigned* p, unsigned compare, unsigned val) { return gs_emu_atomic_cas(p, compare, val); }
inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long compare, unsigned long long val) {
  return gs_emu_atomic_cas(p, compare, val);
}
inline int atomicExch(int* p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicExch(unsigned* p, unsigned v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
inline unsigned long long atomicExch(unsigned long long* p, unsigned long long v) {
  return __atomic_exchange_n(p, v, __ATOMIC_RELAXED);
}
inline float atomicExch(float* p, float v) {
  return ::gs_emu::detail::atomic_cas_loop<float, uint32_t>(p, [v](float) { return v; });
}

// ---- loads, bit casts, intrinsics ----
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
inline int __float_as_int(float x) { return ::gs_emu::detail::from_bits<int>(::gs_emu::detail::to_bits(x)); }
inline unsigned __float_as_uint(float x) { return ::gs_emu::detail::from_bits<unsigned>(::gs_emu::detail::to_bits(x)); }
inline float __int_as_float(int x) { return ::gs_emu::detail::from_bits<float>(::gs_emu::detail::to_bits(x)); }
inline float __uint_as_float(unsigned x) { return ::gs_emu::detail::from_bits<float>(::gs_emu::detail::to_bits(x)); }
inline long long __double_as_longlong(double x) {
  return ::gs_emu::detail::from_bits<long long>(::gs_emu::detail::to_bits(x));
}
inline double __longlong_as_double(long long x) {
  return ::gs_emu::detail::from_bits<double>(::gs_emu::detail::to_bits(x));
}
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }

// CUDA's global min/max overloads.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
using std::isfinite;
using std::isinf;
using std::isnan;
