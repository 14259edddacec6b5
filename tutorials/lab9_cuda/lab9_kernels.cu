// Lab 9 starter code, the GPU half: the axpy kernel, the naive matmul and the
// shared-memory tiled matmul (README.md, Tasks 9.5-9.7). nvcc compiles this file
// as C++17 for a GPU; without one it is built as C++ against the CPU emulator
// (cuda/emu/), which runs every CUDA thread on the CPU. The launchers are declared in
// lab9_kernels.h. Until you write a launcher it returns kNotImplemented, and the grader
// says "not implemented yet". Grade with:   ./run.sh lab check 9
//
// Launch with gs::cuda::launch(kernel, grid, block, shared_bytes, stream, args...): the
// same as kernel<<<grid, block, shared_bytes, stream>>>(args...), and it also builds
// against the emulator (the <<<>>> syntax only exists under nvcc).
//
// Dimension letters: M = rows of A and C, K = the summed dim, N = columns of B and C.
#include "cuda/compat.h"  // CUDA under nvcc, the CPU emulator otherwise; gs::cuda::launch

#include <cstddef>
#include <cstdint>

#include "tutorials/lab9_cuda/lab9_kernels.h"

namespace gradsleuth::lab9 {

// The kernels (__global__: launched from the host, run on the device).
// TODO(lab 9, task 5): the index of this thread's element is
// blockIdx.x * blockDim.x + threadIdx.x (global_index, Task 9.2); compute it in
// int64_t (the unsigned 32-bit product wraps past 2^32). The last block has
// threads past the end: only i < n may write.   x, y, out: (n)
__global__ void axpy_kernel(int n, float alpha, const float* x, const float* y, float* out) {}

// TODO(lab 9, task 6): one thread per element of C: row = blockIdx.y * blockDim.y +
// threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x (threadIdx.x along the
// columns, so a warp reads neighbouring elements of B). Threads outside C
// (row >= M or col >= N) return. Sum A[row][k] * B[k][col] over k in a float and
// write C[row][col]. Index with size_t: row * K can pass 2^31 for large matrices.
//   A (M, K), B (K, N), C (M, N), row-major
__global__ void matmul_naive_kernel(const float* A, const float* B, float* C, int M, int N, int K) {}

// TODO(lab 9, task 7): __shared__ float As[kTile][kTile], Bs[kTile][kTile];
// row = blockIdx.y * kTile + threadIdx.y, col = blockIdx.x * kTile + threadIdx.x
// (tile_output). For each phase p < ceil(K / kTile) (k_phases):
//   As[ty][tx] = A[row][p * kTile + tx] and Bs[ty][tx] = B[p * kTile + ty][col]
//   (tile_load_a, tile_load_b), or 0 where that element lies outside A or B;
//   __syncthreads();  acc += As[ty][k] * Bs[k][tx] for k < kTile;  __syncthreads();
// Finally write acc if (row, col) lies inside C. Do not return early for threads
// outside C: they still load their element of the tiles, and every thread of the
// block must reach each __syncthreads().
__global__ void matmul_tiled_kernel(const float* A, const float* B, float* C, int M, int N, int K) {}

// TODO(lab 9, task 5): n <= 0: nothing to do, return cudaSuccess (a grid of 0
// blocks is an invalid launch). Otherwise grid = ceil(n / block) (launch_1d), launch
//   gs::cuda::launch(axpy_kernel, dim3(grid), dim3(block), 0, nullptr, n, alpha, x, y, out);
// and return cudaGetLastError(): a launch that fails (block > 1024) must say so, not
// do nothing in silence.
int axpy_gpu(int n, float alpha, const float* x, const float* y, float* out, int block) { return kNotImplemented; }

// TODO(lab 9, task 6): M <= 0 or N <= 0: return cudaSuccess. Otherwise
// dim3 block(kTile, kTile), dim3 grid(ceil(N / kTile), ceil(M / kTile)) (launch_matmul:
// x along the columns), launch matmul_naive_kernel
//   gs::cuda::launch(matmul_naive_kernel, grid, block, 0, nullptr, A, B, C, M, N, K);
// and return cudaGetLastError().
int matmul_naive_gpu(const float* A, const float* B, float* C, int M, int N, int K) { return kNotImplemented; }

// TODO(lab 9, task 7): the same launch as Task 9.6, with matmul_tiled_kernel.
int matmul_tiled_gpu(const float* A, const float* B, float* C, int M, int N, int K) { return kNotImplemented; }

// Given: the static shared memory of matmul_tiled_kernel, for the grader.
int matmul_tiled_shared_bytes() {
#if GS_CUDA_EMU
  return -2;  // the emulator cannot see a kernel's static __shared__ arrays: checked on a GPU only
#else
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, matmul_tiled_kernel) != cudaSuccess) {
    cudaGetLastError();  // clear it: the next launch must not report this error as its own
    return -1;
  }
  return static_cast<int>(attr.sharedSizeBytes);
#endif
}

}  // namespace gradsleuth::lab9
