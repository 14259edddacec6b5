// cuda/emu/emu.h: the CPU CUDA emulator's own API: scheduler mode, the device-allocation
// registry, statistics, and the launch entry point used by gs::cuda::launch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda/emu/cuda_runtime_api.h"

#if defined(GS_EMU_TSAN) || defined(__SANITIZE_THREAD__)
#define GS_EMU_NO_TSAN __attribute__((no_sanitize("thread")))
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GS_EMU_NO_TSAN __attribute__((no_sanitize("thread")))
#endif
#endif
#ifndef GS_EMU_NO_TSAN
#define GS_EMU_NO_TSAN
#endif

namespace gs_emu {

// Order in which a block's threads run between two barriers. Random (the default, seed 1)
// exposes missing __syncthreads; set with GS_EMU_SCHEDULE=inorder | random | random:SEED
// or set_schedule(). The random sequence restarts from the seed at each set_schedule.
enum class Schedule { InOrder, Random };
void set_schedule(Schedule mode, uint64_t seed = 1);
Schedule schedule();
uint64_t schedule_seed();

// True when p lies inside a live cudaMalloc/cudaMallocManaged allocation.
bool is_device_pointer(const void* p);

// The allocation (device or cudaMallocHost) containing p; false when none does.
struct Allocation {
  const void* base = nullptr;
  size_t size = 0;
  bool device = false;
};
bool find_allocation(const void* p, Allocation* out);

// memcheck and racecheck (cuda/emu/check.cpp; docs/cuda.md, "Memcheck and racecheck"): every
// global load, store and atomic of the emulated kernels is checked against the device
// allocations (one element before or past the end is reported) and against the other threads'
// accesses since the last barrier. On by default; GS_EMU_CHECKS=memcheck|racecheck|none (comma-
// separated) or set_checks() choose. A finding fails the launch like a GPU fault: the report goes
// to stderr and to last_check_report(), and the next synchronising call returns the sticky error.
// Not compiled in the AddressSanitizer and ThreadSanitizer builds (those sanitizers check instead):
// checks_available() says.
enum CheckMask : unsigned { kMemcheck = 1, kRacecheck = 2 };
unsigned checks();
void set_checks(unsigned mask);
bool checks_available();
// The findings of the last launch that had any (kernel name first), "" when none since the start.
std::string last_check_report();
// A kernel may touch only the first `bytes` bytes of the device allocation starting at `base`;
// the rest reads as past the end. A caching allocator calls it when it hands out a larger block
// (and with 0 when the block goes back to its cache: a kernel touching it is a use after free).
void set_accessible_size(const void* base, size_t bytes);

// Counters since the last reset_stats().
struct Stats {
  uint64_t launches = 0;         // successful kernel launches
  uint64_t failed_launches = 0;  // launches rejected before running
  uint64_t blocks = 0;
  uint64_t threads = 0;
  uint64_t fiber_switches = 0;
  uint64_t block_barriers = 0;  // __syncthreads completed (per block)
  uint64_t warp_ops = 0;        // warp-synchronous operations completed (per lane group)
  size_t device_bytes_in_use = 0;
};
Stats stats();
void reset_stats();

// Names a kernel in diagnostics (otherwise found with dladdr, or printed as an address).
void set_kernel_name(const void* kernel, const char* name);
template <class K>
void set_kernel_name(K* kernel, const char* name) {
  set_kernel_name(reinterpret_cast<const void*>(kernel), name);
}

// Dynamic shared memory of the running launch (GS_DYNAMIC_SHARED).
void* dynamic_shared_memory();

namespace detail {

// Per-thread (fiber) state read by threadIdx, blockIdx, ...
struct ThreadState {
  uint3 thread_idx;
  unsigned linear;  // x + y*bx + z*bx*by
  unsigned lane;
  unsigned warp;
};
extern ThreadState* g_current;
extern uint3 g_block_idx;
extern dim3 g_block_dim;
extern dim3 g_grid_dim;

GS_EMU_NO_TSAN inline const uint3& thread_idx() { return g_current->thread_idx; }
GS_EMU_NO_TSAN inline const uint3& block_idx() { return g_block_idx; }
GS_EMU_NO_TSAN inline const dim3& block_dim() { return g_block_dim; }
GS_EMU_NO_TSAN inline const dim3& grid_dim() { return g_grid_dim; }
GS_EMU_NO_TSAN inline unsigned lane_id() { return g_current->lane; }

// Block barrier; pred is combined over the block: returns the count of nonzero preds.
int block_barrier(int pred, const std::source_location& loc);
// Warp-synchronous exchange among the lanes in mask: deposits value, waits for the lanes,
// returns the value deposited by src_lane (own value when src_lane < 0 or not present);
// *ballot gets the lanes of the group whose value was nonzero.
uint64_t warp_exchange(unsigned mask, uint64_t value, int src_lane, unsigned* ballot, const char* op,
                       const std::source_location& loc);
// Lanes of the calling thread's warp that exist in the block (all 32 unless the block size
// is not a multiple of 32).
unsigned warp_present_mask();
[[noreturn]] void trap(const std::source_location& loc);

struct PointerArg {
  int index;
  const void* ptr;
};
cudaError_t launch(const void* kernel, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
                   const PointerArg* ptr_args, int n_ptr_args, void (*body)(void*), void* closure);

template <class F>
void invoke_body(void* f) {
  (*static_cast<F*>(f))();
}
template <class T>
void collect_pointer(const T& v, int index, PointerArg* out, int& n) {
  if constexpr (std::is_pointer_v<T> && !std::is_function_v<std::remove_pointer_t<T>>)
    out[n++] = PointerArg{index, static_cast<const void*>(v)};
}

}  // namespace detail

// Runs kernel(args...) for every thread of the grid; args is a tuple of the kernel's parameter
// types. Returns the launch error; kernel faults (divergent barriers, deadlocks, exceptions)
// become a sticky cudaErrorLaunchFailure returned by the next synchronising call.
template <class... P, class Tuple>
cudaError_t launch_tuple(void (*kernel)(P...), dim3 grid, dim3 block, size_t shmem, cudaStream_t stream, Tuple& args) {
  detail::PointerArg ptrs[sizeof...(P) + 1];
  int n = 0;
  [&]<size_t... I>(std::index_sequence<I...>) {
    (detail::collect_pointer(std::get<I>(args), static_cast<int>(I), ptrs, n), ...);
  }
  (std::make_index_sequence<sizeof...(P)>{});
  auto body = [&] { std::apply(kernel, args); };
  return detail::launch(reinterpret_cast<const void*>(kernel), grid, block, shmem, stream, ptrs, n,
                        &detail::invoke_body<decltype(body)>, &body);
}

}  // namespace gs_emu
