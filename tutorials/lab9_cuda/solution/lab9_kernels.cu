// Lab 9 reference solution, the GPU half (built only with -DGRADSLEUTH_LAB_SOLUTIONS=ON): the
// axpy kernel, the naive matmul and the shared-memory tiled matmul, numbered as in the README.
// nvcc compiles this file as C++17 for a GPU, or it is built as C++ against the CPU emulator.
//
// Dimension letters: M = rows of A and C, K = the summed dim, N = columns of B and C.
#include "cuda/compat.h"  // CUDA under nvcc, the CPU emulator otherwise; gs::cuda::launch

#include <cstddef>
#include <cstdint>

#include "tutorials/lab9_cuda/lab9_kernels.h"

namespace gradsleuth::lab9 {

// The kernels (__global__: launched from the host, run on the device).
// ---- Task 9.5: axpy, one thread per element ----------------------------------------------
// x, y, out: (n). Consecutive threads touch consecutive floats: each warp reads
// 128 contiguous bytes of x and of y and writes 128 of out (coalesced).
__global__ void axpy_kernel(int n, float alpha, const float* x, const float* y, float* out) {
  // 64-bit: blockIdx.x * blockDim.x is an unsigned 32-bit product and wraps past 2^32.
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // global_index
  if (i < n) out[i] = alpha * x[i] + y[i];  // the last block's extra threads do nothing
}

// ---- Task 9.6: matmul, version 1 (naive): one thread per element of C ---------------------
// A (M, K), B (K, N), C (M, N). threadIdx.x runs along the columns: a warp reads
// one A[row][k] (the same address for all, one broadcast) and 32 neighbouring
// B[k][col] (coalesced), and writes 32 neighbouring C[row][col].
__global__ void matmul_naive_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += A[static_cast<size_t>(row) * K + k] * B[static_cast<size_t>(k) * N + col];
  C[static_cast<size_t>(row) * N + col] = acc;
}

// ---- Task 9.7: matmul, version 2 (tiled): kTile x kTile tiles staged in shared memory -----
// Each block computes the tile of C at (blockIdx.y, blockIdx.x). In phase p its
// threads copy the tile A[by*T .. by*T+T)[p*T .. p*T+T) and the tile
// B[p*T .. p*T+T)[bx*T .. bx*T+T) into shared memory, one element each, then every
// thread sums T terms of its element from them. Each element of A and B that a
// block loads from global memory is read T times from shared memory: T times less
// global traffic than version 1.
__global__ void matmul_tiled_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[kTile][kTile];  // (T, T): rows of A, columns p*T .. p*T+T
  __shared__ float Bs[kTile][kTile];  // (T, T): rows p*T .. p*T+T of B, this block's columns
  const int ty = threadIdx.y, tx = threadIdx.x;
  const int row = blockIdx.y * kTile + ty;  // tile_output
  const int col = blockIdx.x * kTile + tx;
  float acc = 0.0f;
  const int phases = (K + kTile - 1) / kTile;  // k_phases
  for (int p = 0; p < phases; ++p) {
    const int a_col = p * kTile + tx;  // tile_load_a: (row, p*T + tx)
    const int b_row = p * kTile + ty;  // tile_load_b: (p*T + ty, col)
    // Outside A or B: store 0, which adds nothing to the sum. Every thread loads,
    // even one whose own element of C is outside C: its neighbours need the value.
    As[ty][tx] = (row < M && a_col < K) ? A[static_cast<size_t>(row) * K + a_col] : 0.0f;
    Bs[ty][tx] = (b_row < K && col < N) ? B[static_cast<size_t>(b_row) * N + col] : 0.0f;
    __syncthreads();  // the tiles are complete before anyone reads them
    for (int k = 0; k < kTile; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();  // everyone is done reading before the next phase overwrites them
  }
  if (row < M && col < N) C[static_cast<size_t>(row) * N + col] = acc;
}

int axpy_gpu(int n, float alpha, const float* x, const float* y, float* out, int block) {
  if (n <= 0) return cudaSuccess;  // a grid of 0 blocks is an invalid launch: do nothing instead
  if (block <= 0) return cudaErrorInvalidValue;
  const int64_t grid = (static_cast<int64_t>(n) + block - 1) / block;  // launch_1d
  // gs::cuda::launch(kernel, grid, block, shared bytes, stream, args...) is kernel<<<grid, block>>>(args...)
  // that also builds against the CPU emulator.
  gs::cuda::launch(axpy_kernel, dim3(static_cast<unsigned>(grid)), dim3(block), 0, nullptr, n, alpha, x, y, out);
  return cudaGetLastError();  // a block of more than 1024 threads fails here
}

int matmul_naive_gpu(const float* A, const float* B, float* C, int M, int N, int K) {
  if (M <= 0 || N <= 0) return cudaSuccess;  // an empty C: nothing to launch
  const dim3 block(kTile, kTile);
  const dim3 grid((N + kTile - 1) / kTile, (M + kTile - 1) / kTile);  // launch_matmul: x along N, y along M
  gs::cuda::launch(matmul_naive_kernel, grid, block, 0, nullptr, A, B, C, M, N, K);
  return cudaGetLastError();
}

int matmul_tiled_gpu(const float* A, const float* B, float* C, int M, int N, int K) {
  if (M <= 0 || N <= 0) return cudaSuccess;
  const dim3 block(kTile, kTile);
  const dim3 grid((N + kTile - 1) / kTile, (M + kTile - 1) / kTile);
  gs::cuda::launch(matmul_tiled_kernel, grid, block, 0, nullptr, A, B, C, M, N, K);
  return cudaGetLastError();
}

// Given (the same as in the starter).
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
