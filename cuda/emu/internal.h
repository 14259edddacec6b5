// cuda/emu/internal.h: declarations shared by the emulator's own sources (not for kernels).
#pragma once
#include <string>

#include "cuda/emu/emu.h"

namespace gs_emu::internal {
// fiber.cpp: runs every block of a grid; false (with *error set) on a kernel fault.
bool run_grid(dim3 grid, dim3 block, void (*body)(void*), void* closure, std::string* error);
extern Stats g_stats;
// runtime.cpp
std::string kernel_name(const void* kernel);
}  // namespace gs_emu::internal
