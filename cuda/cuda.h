// cuda/cuda.h: the CUDA backend's public entry points: registering it (init), and the caching
// allocator's statistics and controls. Include this, not the .cu files' headers.
#pragma once
#include <cstdint>
#include <string>

#include "cuda/kernels.h"  // AllocatorStats, allocator_stats, empty_cache, set_memory_limit

namespace gradsleuth::cuda {

// Registers the CUDA backend for DeviceType::CUDA when a device exists (in the emulated build
// there always is one) and returns whether it did. Call it once before making cuda tensors:
// the backend lives in a static library, and a self-registering static object there would be
// dropped by the linker when nothing else references the library. Safe to call many times.
bool init();
// Why init() returned false ("cudaGetDeviceCount: cudaErrorNoDevice ..."), empty otherwise.
std::string unavailable_reason();
// True in the build against the CPU emulator (cuda/emu/).
bool is_emulated();
// One line for memory reports: "cuda:0 caching allocator: 1.5 MiB in use, 0.5 MiB cached, ...".
std::string memory_summary();

}  // namespace gradsleuth::cuda
