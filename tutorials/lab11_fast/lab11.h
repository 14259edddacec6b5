// Lab 11: make it fast (README.md in this folder). Three rungs of the float32 matmul ladder,
// declared once for your code (lab11.cpp) and the reference solution (solution/lab11.cpp); the
// grader (../grader/grade_lab11.cpp) checks each against a float64 reference, then times it
// against the CPU workbench's rungs (workbench/matmul.cpp) in the same run on this machine.
//
// Dimension letters: M = rows of A and C, K = the summed dim, N = columns of B and C.
// Every matrix is row-major and contiguous: A (M, K) has A(i, k) = A[i * K + k],
// B (K, N) has B(k, j) = B[k * N + j], C (M, N) has C(i, j) = C[i * N + j].
//
// Each function computes C = A @ B in float32 for any M, N, K >= 0 (K = 0: C is all zeros).
// C is overwritten, never accumulated into (it may hold anything before the call, NaN
// included), and written only inside its M * N elements; A, B and C do not overlap.
#pragma once
#include <cstdint>

namespace gradsleuth::lab11 {

// ---- Task 11.1: the loop order ----------------------------------------------------------
// The naive loop (i, j, k) with the two inner loops swapped: i, k, j. The inner loop then
// reads a row of B and updates a row of C, both with unit stride.
void matmul_ikj(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K);

// ---- Task 11.2: cache blocking ---------------------------------------------------------
// matmul_ikj over blocks of B (kc rows x nc columns, your choice of sizes): each block is
// used by every row of C while it is still in the cache, instead of streaming all of B from
// further away for every row.
void matmul_blocked(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K);

// ---- Task 11.3: a SIMD register-blocked micro-kernel -----------------------------------
// A tile of C (for example 6 rows x 16 columns: 12 AVX2 registers) kept in vector registers
// over a block of k: per k, two vector loads of B, one broadcast of A per row and two FMAs
// per row. The rows and columns that do not fill a whole tile take a simpler path.
// Without AVX2 and FMA in the build (__AVX2__, __FMA__), any correct matmul will do: the
// grader then checks this task for correctness only.
void matmul_simd(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K);

}  // namespace gradsleuth::lab11
