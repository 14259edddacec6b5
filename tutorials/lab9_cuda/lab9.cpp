// Lab 9 starter code, the CPU half: the answer key, the launch geometry,
// validate_result and the napkin math (README.md, Tasks 9.1-9.4). The kernels
// (Tasks 9.5-9.7) are in lab9_kernels.cu. Replace each `throw` marked TODO with
// your code, rebuild and grade:   ./run.sh lab check 9
#include "tutorials/lab9_cuda/lab9.h"

#include <cmath>
#include <set>

#include "core/error.h"

namespace gradsleuth::lab9 {

// TODO(lab 9, task 1): out[i] = alpha * x[i] + y[i] for i < n. Compute in double
// (static_cast<double>(alpha) * x[i] + y[i]) and round once when you store the float.
void axpy_cpu(int64_t n, float alpha, const float* x, const float* y, float* out) {
  throw Error("lab 9", "not implemented: lab 9 task 1 (axpy_cpu in tutorials/lab9_cuda/lab9.cpp)");
}

// TODO(lab 9, task 1): three loops: i over the M rows, j over the N columns, and
// inside, a double accumulator over k: acc += double(A[i * K + k]) * B[k * N + j].
// Store C[i * N + j] = float(acc). Slow and simple on purpose: it is the answer key.
void matmul_cpu(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
  throw Error("lab 9", "not implemented: lab 9 task 1 (matmul_cpu in tutorials/lab9_cuda/lab9.cpp)");
}

// TODO(lab 9, task 1): eps = std::ldexp(1.0, -23) for DType::Float32, std::ldexp(1.0, -52)
// for DType::Float64, 0 for the integer types; atol = rtol = eps * max(k, 1).
// Throw gs::Error (GS_CHECK(k >= 0, "lab9::tolerance", ...)) for k < 0.
Tolerance tolerance(DType dtype, int64_t k) {
  throw Error("lab 9", "not implemented: lab 9 task 1 (tolerance in tutorials/lab9_cuda/lab9.cpp)");
}

// TODO(lab 9, task 2): (n + d - 1) / d, after checking n >= 0 and d > 0 with GS_CHECK.
int64_t ceil_div(int64_t n, int64_t d) {
  throw Error("lab 9", "not implemented: lab 9 task 2 (ceil_div in tutorials/lab9_cuda/lab9.cpp)");
}

// TODO(lab 9, task 2): check 1 <= block <= 1024 and n >= 0, then {ceil_div(n, block), block}.
Launch1D launch_1d(int64_t n, int64_t block) {
  throw Error("lab 9", "not implemented: lab 9 task 2 (launch_1d in tutorials/lab9_cuda/lab9.cpp)");
}

// TODO(lab 9, task 2): blockIdx.x * blockDim.x + threadIdx.x.
int64_t global_index(int64_t block_idx, int64_t block_dim, int64_t thread_idx) {
  throw Error("lab 9", "not implemented: lab 9 task 2 (global_index in tutorials/lab9_cuda/lab9.cpp)");
}

// TODO(lab 9, task 2): check 1 <= tile and tile * tile <= 1024, M >= 0, N >= 0; then
// x covers the columns: grid_x = ceil_div(N, tile); y the rows: grid_y = ceil_div(M, tile).
Launch2D launch_matmul(int64_t M, int64_t N, int64_t tile) {
  throw Error("lab 9", "not implemented: lab 9 task 2 (launch_matmul in tutorials/lab9_cuda/lab9.cpp)");
}

// TODO(lab 9, task 2): how many tile-wide slices cover K?
int64_t k_phases(int64_t K, int64_t tile) {
  throw Error("lab 9", "not implemented: lab 9 task 2 (k_phases in tutorials/lab9_cuda/lab9.cpp)");
}

// TODO(lab 9, task 2): the formulas in lab9.h. Draw a 2 x 2 grid of 2 x 2 tiles
// and check a few threads by hand first.
RowCol tile_output(int64_t by, int64_t bx, int64_t ty, int64_t tx, int64_t tile) {
  throw Error("lab 9", "not implemented: lab 9 task 2 (tile_output in tutorials/lab9_cuda/lab9.cpp)");
}

RowCol tile_load_a(int64_t by, int64_t ty, int64_t tx, int64_t p, int64_t tile) {
  throw Error("lab 9", "not implemented: lab 9 task 2 (tile_load_a in tutorials/lab9_cuda/lab9.cpp)");
}

RowCol tile_load_b(int64_t bx, int64_t ty, int64_t tx, int64_t p, int64_t tile) {
  throw Error("lab 9", "not implemented: lab 9 task 2 (tile_load_b in tutorials/lab9_cuda/lab9.cpp)");
}

// TODO(lab 9, task 3): one pass over the n elements. For each: if both are
// finite, err = |got - want| and it matches when err <= atol + rtol * |want|;
// if both are NaN or both the same infinity, it matches and has no error (skip
// it); anything else (a NaN or an infinity against something else) is a
// mismatch with err = INFINITY. Keep max_abs_err (the largest err) and
// max_rel_err (err / |want| where want is finite and not 0), count the
// mismatches and remember the first one. Check n >= 0 and the pointers first.
Validation validate_result(const float* got, const float* want, int64_t n, Tolerance tol) {
  throw Error("lab 9", "not implemented: lab 9 task 3 (validate_result in tutorials/lab9_cuda/lab9.cpp)");
}

// TODO(lab 9, task 4): flops: 2 per element; bytes: 4 each for x, y and out.
Traffic axpy_traffic(int64_t n) {
  throw Error("lab 9", "not implemented: lab 9 task 4 (axpy_traffic in tutorials/lab9_cuda/lab9.cpp)");
}

// TODO(lab 9, task 4): 2 M N K flops; each of the M N threads loads K floats of A
// and K of B and stores one float of C (4 bytes a float). Compute in double:
// 2048^3 does not fit in an int.
Traffic matmul_naive_traffic(int64_t M, int64_t N, int64_t K) {
  throw Error("lab 9", "not implemented: lab 9 task 4 (matmul_naive_traffic in tutorials/lab9_cuda/lab9.cpp)");
}

// TODO(lab 9, task 4): count the loads of A: the blocks of one block column
// (fixed bx) together read every element of A exactly once, and there are
// ceil(N / tile) block columns. B likewise with the ceil(M / tile) block rows.
// Then the stores of C. README.md, "Shared-memory tiling", works it through.
Traffic matmul_tiled_traffic(int64_t M, int64_t N, int64_t K, int64_t tile) {
  throw Error("lab 9", "not implemented: lab 9 task 4 (matmul_tiled_traffic in tutorials/lab9_cuda/lab9.cpp)");
}

// TODO(lab 9, task 4): min(peak_gflops, flops / bytes * peak_gb_per_s); GS_CHECK
// that flops and bytes are > 0.
double roofline_gflops(const Traffic& t, double peak_gflops, double peak_gb_per_s) {
  throw Error("lab 9", "not implemented: lab 9 task 4 (roofline_gflops in tutorials/lab9_cuda/lab9.cpp)");
}

// TODO(lab 9, task 4): for each of the 32 threads, its bytes run from
// first = i * stride * elem_bytes to first + elem_bytes - 1; put every sector
// (byte / 32) they touch into a std::set and return its size.
int64_t warp_sectors(int64_t stride, int64_t elem_bytes) {
  throw Error("lab 9", "not implemented: lab 9 task 4 (warp_sectors in tutorials/lab9_cuda/lab9.cpp)");
}

}  // namespace gradsleuth::lab9

// The kernels of Tasks 9.5-9.7 go in lab9_kernels.cu, next to this file: look there for
// TODO(lab 9, task 5), TODO(lab 9, task 6) and TODO(lab 9, task 7).
