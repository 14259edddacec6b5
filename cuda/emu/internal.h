// cuda/emu/internal.h: declarations shared by the emulator's own sources (not for kernels).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/emu/emu.h"

namespace gs_emu::internal {
// fiber.cpp: runs every block of a grid; false (with *error set) on a kernel fault.
bool run_grid(dim3 grid, dim3 block, void (*body)(void*), void* closure, std::string* error);
extern Stats g_stats;
extern uintptr_t g_stack_lo, g_stack_hi;  // the running fiber's stack (a thread's private memory)
// runtime.cpp
std::string kernel_name(const void* kernel);
// The name of the static object (a __shared__ array, say) holding p, and its start; "" when none.
std::string data_symbol(const void* p, uintptr_t* base);
// Bytes of red zone on each side of a device allocation when the checks are compiled in (0 in the
// AddressSanitizer build, which wants exact-size blocks).
#if GS_EMU_CHECKS
inline constexpr size_t kRedZone = 256;
#else
inline constexpr size_t kRedZone = 0;
#endif
struct AllocInfo {
  const void* base;
  size_t size, accessible, red_before, red_after;
};
std::vector<AllocInfo> snapshot_allocations();  // the live device allocations

// check.cpp: memcheck and racecheck (see there).
bool checks_compiled();
void check_launch_begin(const void* kernel, const detail::PointerArg* args, int n, void* dyn_smem, size_t dyn_bytes);
void check_block_begin(uint64_t linear_block);
void check_block_barrier();
void check_warp_sync(unsigned warp);
// "" when the launch was clean; else the findings, and *err the sticky error to leave.
std::string check_launch_end(cudaError_t* err);
}  // namespace gs_emu::internal
