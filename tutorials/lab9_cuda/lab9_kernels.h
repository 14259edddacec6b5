// Lab 9: the launchers of your CUDA kernels (Tasks 9.5-9.7, written in
// lab9_kernels.cu). nvcc compiles that file as C++17, so this header is plain
// C++17: ints, floats and pointers, no gradsleuth headers, no Eigen. The grader
// (C++20) calls these functions with device pointers it allocated.
//
// Dimension letters: M = rows of A and C, K = the summed dim, N = columns of B and C.
// Every matrix is row-major and contiguous: A (M, K) has A[i * K + k].
#pragma once

namespace gradsleuth::lab9 {

// The tile edge of Task 9.7 (and the block edge of Task 9.6): blocks of
// kTile x kTile threads, each block computing one kTile x kTile tile of C.
constexpr int kTile = 16;

// What a launcher returns:
//   0                  the kernel was launched (cudaGetLastError() after the launch was cudaSuccess);
//   > 0                a cudaError_t: the launch itself failed (a bad block size, no kernel image, ...);
//   kNotImplemented    a starter stub (the grader then says "not implemented yet").
// A launch is asynchronous: a kernel that faults while it runs (reads outside its
// buffers) shows up at the grader's next cudaDeviceSynchronize, not here.
constexpr int kNotImplemented = -1;

// Task 9.5: out[i] = alpha * x[i] + y[i] for 0 <= i < n, one thread per element,
// `block` threads per block.                x, y, out: (n) device pointers.
int axpy_gpu(int n, float alpha, const float* x, const float* y, float* out, int block);

// Task 9.6: C (M, N) = A (M, K) @ B (K, N), one thread per element of C, blocks
// of kTile x kTile threads with threadIdx.x along the columns of C.
int matmul_naive_gpu(const float* A, const float* B, float* C, int M, int N, int K);

// Task 9.7: the same product; each block stages kTile x kTile tiles of A and B
// in shared memory and each thread sums its element from them.
int matmul_tiled_gpu(const float* A, const float* B, float* C, int M, int N, int K);

// Given (in lab9_kernels.cu): the static shared memory of your tiled kernel in
// bytes (cudaFuncGetAttributes); -1 when the query fails. The grader checks it
// holds the two float tiles, 2 * kTile * kTile * 4 bytes.
int matmul_tiled_shared_bytes();

}  // namespace gradsleuth::lab9
