// cuda/linalg.cu: batched matrix multiply. Floating operands that are row- or column-major in
// their last two dims go to cuBLAS (strided batched GEMM; float16/bfloat16 through
// cublasGemmStridedBatchedEx with float32 accumulation, CUBLAS_COMPUTE_32F, each output rounded
// once); everything else (int64, arbitrary strides) to a shared-memory tiled kernel.
#include "cuda/compat.h"
#include "cuda/cublas_compat.h"

#include "cuda/kernel_utils.h"

namespace gradsleuth::cuda {

namespace {

constexpr int kTile = 16;

cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t x = nullptr;
    const cublasStatus_t s = cublasCreate(&x);
    if (s != CUBLAS_STATUS_SUCCESS) GS_FAIL("matmul", "cublasCreate failed: ", cublas_status_name(s));
    return x;
  }();
  return h;
}

void check_gemm(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS) GS_FAIL("matmul", call, " failed: ", cublas_status_name(s));
}

// C[b] (N, M) = A[b] (N, K) @ B[b] (K, M). Grid (ceil(M/16), ceil(N/16), batches), block 16x16:
// each block computes one 16x16 tile of C, staging 16x16 tiles of A and B in shared memory.
// A and B may have any strides (sa*/sb*, elements); C is contiguous. S is the stored type, T the
// computed one (float32 for the 16-bit types: the tiles are widened, the sum rounded once).
template <class S>
__global__ void bmm_tiled_kernel(S* C, const S* A, const S* B, int64_t N, int64_t M, int64_t K, int64_t sa0,
                                 int64_t sa1, int64_t sa2, int64_t sb0, int64_t sb1, int64_t sb2) {
  using T = compute_t<S>;
  __shared__ T As[kTile][kTile];
  __shared__ T Bs[kTile][kTile];
  const int64_t b = blockIdx.z;
  const int64_t row = blockIdx.y * static_cast<int64_t>(kTile) + threadIdx.y;
  const int64_t col = blockIdx.x * static_cast<int64_t>(kTile) + threadIdx.x;
  T acc = T(0);
  for (int64_t k0 = 0; k0 < K; k0 += kTile) {
    const int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < N && ka < K) ? widen(A[b * sa0 + row * sa1 + ka * sa2]) : T(0);
    Bs[threadIdx.y][threadIdx.x] = (kb < K && col < M) ? widen(B[b * sb0 + kb * sb1 + col * sb2]) : T(0);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTile; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < N && col < M) C[(b * N + row) * M + col] = narrow<S>(acc);
}

template <class T>
void gemm_strided_batched(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const T* A, int lda,
                          long long sA, const T* B, int ldb, long long sB, T* C, int ldc, long long sC, int batch) {
  if constexpr (is_half_v<T>) {
    // 16-bit A, B and C; products summed in float32; alpha and beta are floats (the compute type's).
    const float one = 1, zero = 0;
    const cudaDataType t = std::is_same_v<T, __half> ? CUDA_R_16F : CUDA_R_16BF;
    check_gemm(cublasGemmStridedBatchedEx(handle(), ta, tb, m, n, k, &one, A, t, lda, sA, B, t, ldb, sB, &zero, C, t,
                                          ldc, sC, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx");
  } else if constexpr (std::is_same_v<T, float>) {
    const float one = 1, zero = 0;
    check_gemm(
        cublasSgemmStridedBatched(handle(), ta, tb, m, n, k, &one, A, lda, sA, B, ldb, sB, &zero, C, ldc, sC, batch),
        "cublasSgemmStridedBatched");
  } else {
    const double one = 1, zero = 0;
    check_gemm(
        cublasDgemmStridedBatched(handle(), ta, tb, m, n, k, &one, A, lda, sA, B, ldb, sB, &zero, C, ldc, sC, batch),
        "cublasDgemmStridedBatched");
  }
}

}  // namespace

void bmm(const DevTensor& out, const DevTensor& a, int layout_a, int64_t ld_a, const DevTensor& b, int layout_b,
         int64_t ld_b) {
  const int64_t B = out.g.sizes[0], N = out.g.sizes[1], M = out.g.sizes[2], K = a.g.sizes[2];
  if (B * N * M == 0) return;
  if (K == 0) {
    fill(out, 0.0);
    return;
  }
  dispatch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return;  // as on the CPU: ops/ never multiplies bool matrices
    } else {
      if constexpr (is_float_v<compute_t<T>>) {
        if (layout_a >= 0 && layout_b >= 0) {
          // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS computes C^T (M x N, ldc = M)
          // from B's memory as its first operand and A's as its second. A row-major operand's
          // memory already is its transpose in column-major, so it goes in untransposed.
          gemm_strided_batched<T>(layout_b == 0 ? CUBLAS_OP_N : CUBLAS_OP_T, layout_a == 0 ? CUBLAS_OP_N : CUBLAS_OP_T,
                                  static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                                  static_cast<const T*>(b.data), static_cast<int>(ld_b), b.g.strides[0],
                                  static_cast<const T*>(a.data), static_cast<int>(ld_a), a.g.strides[0],
                                  static_cast<T*>(out.data), static_cast<int>(M), N * M, static_cast<int>(B));
          after_launch("matmul", cudaSuccess);
          return;
        }
      }
      const dim3 grid(static_cast<unsigned>((M + kTile - 1) / kTile), static_cast<unsigned>((N + kTile - 1) / kTile),
                      static_cast<unsigned>(B));
      launch_op("matmul", bmm_tiled_kernel<T>, grid, dim3(kTile, kTile), 0, static_cast<T*>(out.data),
                static_cast<const T*>(a.data), static_cast<const T*>(b.data), N, M, K, a.g.strides[0], a.g.strides[1],
                a.g.strides[2], b.g.strides[0], b.g.strides[1], b.g.strides[2]);
    }
  });
}

}  // namespace gradsleuth::cuda
