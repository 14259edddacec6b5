// Lab 9: your first CUDA kernels (README.md in this folder). Declared once for
// your code (lab9.cpp and lab9_kernels.cu) and the reference solution
// (solution/); the grader (../grader/grade_lab9.cpp) calls them here.
//
// Tasks 9.1-9.4 are plain C++ and graded on every machine: the CPU answer key,
// the launch geometry and index math, validate_result, and the napkin math.
// Tasks 9.5-9.7 are the kernels (lab9_kernels.h, lab9_kernels.cu): graded only
// where a CUDA device is present, skipped elsewhere.
//
// Dimension letters: M = rows of A and C, K = the summed dim, N = columns of B and C.
// Every matrix is row-major and contiguous: A (M, K) has A[i * K + k].
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "tutorials/lab9_cuda/lab9_kernels.h"

namespace gradsleuth::lab9 {

// ---- Task 9.1: the answer key ------------------------------------------------------
// out[i] = alpha * x[i] + y[i], computed in double and rounded once to float.
//   x, y, out: (n)
void axpy_cpu(int64_t n, float alpha, const float* x, const float* y, float* out);

// C (M, N) = A (M, K) @ B (K, N): every C[i][j] = sum_k A[i][k] * B[k][j] summed
// in double and rounded once to float, so the key is more accurate than any
// float32 kernel it grades. K = 0 gives zeros.
void matmul_cpu(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K);

// How far a result may be from the key: |got - want| <= atol + rtol * |want|.
struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
};
// The tolerance for a result of `dtype` made of sums of k terms of size about 1:
//   atol = rtol = eps(dtype) * max(k, 1),   eps = 2^-23 for float32, 2^-52 for float64;
// {0, 0} for int64 and bool (integer arithmetic is exact). Throws gs::Error for k < 0.
Tolerance tolerance(DType dtype, int64_t k);

// ---- Task 9.2: launch geometry and index math ---------------------------------------
// ceil(n / d) in integers, for n >= 0 and d > 0 (gs::Error otherwise).
int64_t ceil_div(int64_t n, int64_t d);

// A 1-D launch over n elements: `grid` blocks of `block` threads, the fewest
// blocks that cover n (grid = 0 for n = 0). gs::Error unless 1 <= block <= 1024
// (the CUDA limit of threads per block) and n >= 0.
struct Launch1D {
  int64_t grid = 0;
  int64_t block = 0;
};
Launch1D launch_1d(int64_t n, int64_t block);

// The element a thread of a 1-D launch handles: blockIdx.x * blockDim.x + threadIdx.x.
int64_t global_index(int64_t block_idx, int64_t block_dim, int64_t thread_idx);

// The launch of a tiled matmul C (M, N): blocks of tile x tile threads, x along
// the columns (N) and y along the rows (M): grid_x = ceil(N / tile),
// grid_y = ceil(M / tile). gs::Error unless M, N >= 0 and tile * tile <= 1024, tile >= 1.
struct Launch2D {
  int64_t grid_x = 0, grid_y = 0;
  int64_t block_x = 0, block_y = 0;
};
Launch2D launch_matmul(int64_t M, int64_t N, int64_t tile);

// The number of tile phases over the summed dim: ceil(K / tile).
int64_t k_phases(int64_t K, int64_t tile);

// A position in a matrix: its row and column.
struct RowCol {
  int64_t row = 0;
  int64_t col = 0;
};
// The element of C that thread (ty, tx) of block (by, bx) computes:
//   row = by * tile + ty,   col = bx * tile + tx.
// It may lie outside C (M, N) in the blocks along the right and bottom edges.
RowCol tile_output(int64_t by, int64_t bx, int64_t ty, int64_t tx, int64_t tile);
// In phase p of the tiled matmul, thread (ty, tx) of block (by, bx) copies one
// element of A into As[ty][tx] and one of B into Bs[ty][tx]; which ones?
//   A: row = by * tile + ty (the thread's row of C),   col = p * tile + tx
//   B: row = p * tile + ty,   col = bx * tile + tx (the thread's column of C)
// Elements outside A (M, K) or B (K, N) are not read: the thread stores 0 instead.
RowCol tile_load_a(int64_t by, int64_t ty, int64_t tx, int64_t p, int64_t tile);
RowCol tile_load_b(int64_t bx, int64_t ty, int64_t tx, int64_t p, int64_t tile);

// ---- Task 9.3: validate_result ------------------------------------------------------
// Compares got (n) with want (n) element by element. Element i matches when both
// are finite and |got - want| <= atol + rtol * |want|, when both are NaN, or when
// both are the same infinity. (A NaN or an infinity never matches a finite value,
// however large the tolerance: inf <= atol + rtol * inf would say it does.)
struct Validation {
  bool ok = true;          // every element matched
  int64_t mismatches = 0;  // how many did not
  int64_t first_bad = -1;  // the index of the first that did not; -1 when none
  float first_got = 0.0f;  // got[first_bad] and want[first_bad] (0 when none)
  float first_want = 0.0f;
  // The largest |got - want| over the elements that are not a matching NaN or
  // infinity; inf when a NaN or an infinity stands where it does not belong.
  double max_abs_err = 0.0;
  // The largest |got - want| / |want| over the elements with a finite, nonzero want
  // (inf when got is NaN or infinite there).
  double max_rel_err = 0.0;
};
// n = 0 is ok; gs::Error for n < 0 or a null pointer with n > 0.
Validation validate_result(const float* got, const float* want, int64_t n, Tolerance tol);

// ---- Task 9.4: napkin math ------------------------------------------------------------
// What a kernel must do (flops) and what it moves to and from global memory (bytes).
struct Traffic {
  double flops = 0.0;
  double bytes = 0.0;
};
// axpy on float32: 2 flops per element (a multiply and an add), reads x and y, writes out.
Traffic axpy_traffic(int64_t n);
// C = A @ B in float32: 2 M N K flops (a multiply and an add per term). The bytes
// are the global loads and stores the kernel *issues* (caches ignored):
//   naive: each of the M N threads reads its row of A (K floats) and its column of
//          B (K floats) and writes its element of C;
//   tiled: each block reads its tile row of A and tile column of B once, one tile
//          per phase, skipping the elements outside A and B; each thread writes
//          its element of C (if it lies inside C).
Traffic matmul_naive_traffic(int64_t M, int64_t N, int64_t K);
Traffic matmul_tiled_traffic(int64_t M, int64_t N, int64_t K, int64_t tile);
// The roofline: the GFLOP/s a kernel can reach at most, the smaller of the
// compute peak and (flops / bytes) * bandwidth. flops > 0, bytes > 0.
double roofline_gflops(const Traffic& t, double peak_gflops, double peak_gb_per_s);
// Coalescing: the 32 threads of a warp each read one element; thread i reads
// the element at index i * stride (stride 0: all the same one) of an array
// that starts on a 128-byte boundary, element j in bytes [j * elem_bytes,
// (j + 1) * elem_bytes). Memory moves in 32-byte sectors: how many distinct
// sectors hold the bytes the warp reads? gs::Error unless stride >= 0, elem_bytes >= 1.
int64_t warp_sectors(int64_t stride, int64_t elem_bytes);

}  // namespace gradsleuth::lab9
