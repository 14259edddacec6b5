// The switch between the CPU backend's tuned kernels and its reference loops, under one name:
// GRADSLEUTH_FAST_KERNELS (the CMake option, the build's compile definition and the environment
// variable all spell it so).
#pragma once

namespace gradsleuth {

// The CPU backend's tuned kernels (core/cpu/fast/: a BLAS and a packing-free SGEMM,
// Winograd and the fused per-sample conv2d, vectorised exp/log/tanh/sigmoid and softmax,
// branch-free pooling, fused optimizer steps, the vectorised elementwise and reduction rows)
// or its reference loops (core/cpu/*.cpp: one short loop per op, the code to read or step
// through). Results agree within the bounds core/cpu/fast/fast.h gives for each pair.
// Process-wide. It starts as the build's GRADSLEUTH_FAST_KERNELS (ON unless configured OFF:
// cpu_fast_kernels_default()), or as the environment variable GRADSLEUTH_FAST_KERNELS says
// (0/off, 1/on).
void set_cpu_fast_kernels(bool on);
bool cpu_fast_kernels();
bool cpu_fast_kernels_default();

}  // namespace gradsleuth
