// workbench/ladders.h: internal to the CPU workbench: one function per kernel family that
// builds its ladder (workbench/<family>.cpp), and the helpers they share.
#pragma once
#include <vector>

#include "workbench/cpu_ladder.h"

namespace gradsleuth::workbench::cpu {

Ladder matmul_ladder();
Ladder softmax_ladder();
Ladder reduce_ladder();
Ladder layernorm_ladder();
Ladder gelu_ladder();
Ladder conv2d_ladder();

// conv2d's problem (the other kernels' come from workbench/workbench.cpp).
Problem conv2d_problem(const Shape& s);
// The a priori bound of Winograd F(2x2, 3x3) for each output of conv2d_problem(s) (see conv2d.cpp).
std::vector<float> conv2d_winograd_bounds(const Problem& p, const Shape& s);
// gelu v2 on one value, for the tests (x itself when the build has no SIMD).
float gelu_simd_one(float x);

// Why a SIMD rung is not in this build.
inline const char* kNoSimd = "this build has no AVX2 (-march=native or x86-64-v3 builds it)";

}  // namespace gradsleuth::workbench::cpu
