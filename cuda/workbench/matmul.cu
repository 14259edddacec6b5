// cuda/workbench/matmul.cu: SGEMM C (M, N) = A (M, K) @ B (K, N), row-major float32, in six
// numbered versions from naive to warp-tiled, plus cuBLAS as version 7 (the reference row), and a
// tensor-core version 8 (bf16 in, float32 accumulate; GPU only).
//
// Napkin math (H100 SXM, NVIDIA H100 Tensor Core GPU datasheet: FP32 67 TFLOP/s without tensor
// cores, HBM3 3.35 TB/s; ridge 67,000 / 3,350 = 20 flop/byte). For M = N = K = 4096:
//   flops  2 M N K = 137.4 GFLOP                    -> 2.05 ms at 67 TFLOP/s
//   bytes  4 (M K + K N + M N) = 201 MB at least    -> 0.06 ms at 3.35 TB/s
//   intensity 683 flop/byte, far right of the ridge: compute-bound if the kernel reuses data.
// What each version *issues* to global memory (caches ignored) decides whether it gets there:
//   v1, v2  2 M N K loads             = 550 GB  (0.25 flop/byte: 164 ms if all went to DRAM)
//   v3      2 M N K / 32 (32 x 32 tile) = 17 GB (8 flop/byte)
//   v4-v6   2 M N K / 64 (64 x 64 tile) = 8.6 GB (16 flop/byte), and fewer shared-memory loads
//           per FMA: v3 2, v4 and v5 0.5 (4 x 4 outputs per thread), v6 0.375 (8 x 4).
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "cuda/cublas_compat.h"
#include "cuda/workbench/device.h"
#if !GS_CUDA_EMU
#include <mma.h>
#endif

namespace gradsleuth::workbench::GS_WB_NS {
namespace {

// ---- v1: naive. One thread per element of C, threadIdx.x along the ROWS of C. -------------
// A warp holds 32 consecutive rows and one column: each load of A[row][k] touches 32 rows
// (32 sectors, 1/8 of each used) and each store of C too. The baseline every other version
// is measured against.
__global__ void matmul_v1(const float* A, const float* B, float* C, int M, int N, int K) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  const int col = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += A[static_cast<size_t>(row) * K + k] * B[static_cast<size_t>(k) * N + col];
  C[static_cast<size_t>(row) * N + col] = acc;
}

// ---- v2: coalesced. The same work with threadIdx.x along the COLUMNS of C. ------------------
// A warp now reads one A[row][k] (a broadcast) and 32 neighbouring B[k][col] (128 bytes, 4
// sectors, all used), and writes 128 contiguous bytes of C: 8x fewer sectors per load of B.
__global__ void matmul_v2(const float* A, const float* B, float* C, int M, int N, int K) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += A[static_cast<size_t>(row) * K + k] * B[static_cast<size_t>(k) * N + col];
  C[static_cast<size_t>(row) * N + col] = acc;
}

// ---- v3: shared-memory tiles. A 32 x 32 block computes a 32 x 32 tile of C. ---------------
// In each phase its threads copy one 32 x 32 tile of A and of B into shared memory (one
// element each, 0 outside the matrices) and each thread sums 32 terms from there. Every
// element loaded from global memory is used 32 times: 32x less global traffic than v2. The
// cost: 2 barriers per phase, 8 KB of shared memory, and 2 shared loads per FMA.
constexpr int kT3 = 32;
__global__ void matmul_v3(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[kT3][kT3];
  __shared__ float Bs[kT3][kT3];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kT3 + ty, col = blockIdx.x * kT3 + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += kT3) {
    // Threads outside C still load: their neighbours need these elements.
    As[ty][tx] = (row < M && k0 + tx < K) ? A[static_cast<size_t>(row) * K + k0 + tx] : 0.0f;
    Bs[ty][tx] = (k0 + ty < K && col < N) ? B[static_cast<size_t>(k0 + ty) * N + col] : 0.0f;
    __syncthreads();
    for (int k = 0; k < kT3; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  if (row < M && col < N) C[static_cast<size_t>(row) * N + col] = acc;
}

// Block tile shared by v4 and v5: 64 x 64 outputs, K in steps of 8, 256 threads of 4 x 4 outputs.
constexpr int kBM = 64, kBN = 64, kBK = 8, kTM = 4, kTN = 4;
constexpr int kThreads45 = (kBM / kTM) * (kBN / kTN);  // 256

// ---- v4: 2-D register tiling (blocktiling). Each thread computes a 4 x 4 tile of C. ---------
// Per k it loads 4 values of A and 4 of B from shared memory into registers and does 16 FMAs
// with them: 0.5 shared loads per FMA instead of v3's 2, so shared-memory bandwidth stops
// being the limit. The 64 x 64 block tile also halves global traffic again (each element of A
// and B is used 64 times). As is stored transposed (As[k][m]) so a thread's 4 values of A are
// contiguous.
__global__ void matmul_v4(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[kBK][kBM];
  __shared__ float Bs[kBK][kBN];
  const int t = threadIdx.x;
  const int tr = t / (kBN / kTN), tc = t % (kBN / kTN);
  const int row0 = blockIdx.y * kBM, col0 = blockIdx.x * kBN;
  float acc[kTM][kTN] = {};
  float a[kTM], b[kTN];
  for (int k0 = 0; k0 < K; k0 += kBK) {
    for (int i = t; i < kBM * kBK; i += kThreads45) {  // A tile: 8 consecutive k per row: coalesced
      const int r = i / kBK, c = i % kBK;
      const int gr = row0 + r, gc = k0 + c;
      As[c][r] = (gr < M && gc < K) ? A[static_cast<size_t>(gr) * K + gc] : 0.0f;
    }
    for (int i = t; i < kBK * kBN; i += kThreads45) {
      const int r = i / kBN, c = i % kBN;
      const int gr = k0 + r, gc = col0 + c;
      Bs[r][c] = (gr < K && gc < N) ? B[static_cast<size_t>(gr) * N + gc] : 0.0f;
    }
    __syncthreads();
    for (int kk = 0; kk < kBK; ++kk) {
      for (int i = 0; i < kTM; ++i) a[i] = As[kk][tr * kTM + i];
      for (int j = 0; j < kTN; ++j) b[j] = Bs[kk][tc * kTN + j];
      for (int i = 0; i < kTM; ++i)
        for (int j = 0; j < kTN; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < kTM; ++i) {
    const int r = row0 + tr * kTM + i;
    if (r >= M) break;
    for (int j = 0; j < kTN; ++j) {
      const int c = col0 + tc * kTN + j;
      if (c < N) C[static_cast<size_t>(r) * N + c] = acc[i][j];
    }
  }
}

// Four consecutive floats of one row starting at column c (< limit): one 16-byte load when
// `vec` (the row start is 16-byte aligned) and all four lie inside, else four guarded loads.
__device__ __forceinline__ f4 load4(const float* row, int c, int limit, bool vec) {
  if (vec && c + 3 < limit) return *reinterpret_cast<const f4*>(row + c);
  f4 v;
  v.x = c < limit ? row[c] : 0.0f;
  v.y = c + 1 < limit ? row[c + 1] : 0.0f;
  v.z = c + 2 < limit ? row[c + 2] : 0.0f;
  v.w = c + 3 < limit ? row[c + 3] : 0.0f;
  return v;
}
__device__ __forceinline__ void store4(float* row, int c, int limit, bool vec, const float* v) {
  if (vec && c + 3 < limit) {
    f4 o;
    o.x = v[0], o.y = v[1], o.z = v[2], o.w = v[3];
    *reinterpret_cast<f4*>(row + c) = o;
    return;
  }
  for (int j = 0; j < 4; ++j)
    if (c + j < limit) row[c + j] = v[j];
}

// ---- v5: vectorised loads. v4 with 16-byte (float4) global and shared-memory accesses. -----
// The 64 x 8 tile of A and the 8 x 64 tile of B are 128 float4 each: threads 0-127 load A,
// 128-255 load B, one instruction each instead of two scalar loads per tile; the registers
// come from shared memory as one float4 of A and one of B per k; C is stored as float4. Same
// traffic as v4, 4x fewer load/store instructions (the LSU issue rate was the next limit).
// Rows whose length is not a multiple of 4 are not 16-byte aligned: then scalar loads.
__global__ void matmul_v5(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ __align__(16) float As[kBK][kBM];
  __shared__ __align__(16) float Bs[kBK][kBN];
  const int t = threadIdx.x;
  const int tr = t / (kBN / kTN), tc = t % (kBN / kTN);
  const int row0 = blockIdx.y * kBM, col0 = blockIdx.x * kBN;
  const bool vec_a = K % 4 == 0, vec_b = N % 4 == 0;
  float acc[kTM][kTN] = {};
  for (int k0 = 0; k0 < K; k0 += kBK) {
    if (t < 128) {  // A: row t / 2, columns k0 + 4 (t % 2) .. +4; stored transposed
      const int r = t / 2, c = (t % 2) * 4, gr = row0 + r;
      f4 v;
      if (gr < M) {
        v = load4(A + static_cast<size_t>(gr) * K, k0 + c, K, vec_a);
      } else {
        v.x = v.y = v.z = v.w = 0.0f;
      }
      As[c + 0][r] = v.x, As[c + 1][r] = v.y, As[c + 2][r] = v.z, As[c + 3][r] = v.w;
    } else {  // B: row (t - 128) / 16, columns 4 ((t - 128) % 16) .. +4
      const int u = t - 128, r = u / 16, c = (u % 16) * 4, gr = k0 + r;
      f4 v;
      if (gr < K) {
        v = load4(B + static_cast<size_t>(gr) * N, col0 + c, N, vec_b);
      } else {
        v.x = v.y = v.z = v.w = 0.0f;
      }
      *reinterpret_cast<f4*>(&Bs[r][c]) = v;
    }
    __syncthreads();
    for (int kk = 0; kk < kBK; ++kk) {
      const f4 a = *reinterpret_cast<const f4*>(&As[kk][tr * kTM]);
      const f4 b = *reinterpret_cast<const f4*>(&Bs[kk][tc * kTN]);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
      for (int i = 0; i < kTM; ++i)
        for (int j = 0; j < kTN; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < kTM; ++i) {
    const int r = row0 + tr * kTM + i;
    if (r < M) store4(C + static_cast<size_t>(r) * N, col0 + tc * kTN, N, vec_b, acc[i]);
  }
}

// ---- v6: warp tiling. The block tile is split into one 32 x 32 tile per warp. -----------------
// 128 threads (4 warps in 2 x 2) per 64 x 64 block tile; in a warp, lane (lr = lane / 8,
// lc = lane % 8) computes 8 rows x 4 columns. Each thread now does 32 FMAs per 12 shared
// loads (0.375 per FMA), and a warp's shared reads of B are 8 distinct float4 (128 contiguous
// bytes, no bank conflict) broadcast to its 4 lane rows; the tile of a warp is what one SM
// sub-partition works on, which is the level at which the tensor-core version would slot in.
constexpr int kWThreads = 128, kWTM = 8, kWTN = 4;
__global__ void matmul_v6(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ __align__(16) float As[kBK][kBM];
  __shared__ __align__(16) float Bs[kBK][kBN];
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int wr = warp / 2, wc = warp % 2;  // the warp's 32 x 32 tile in the 64 x 64 block tile
  const int lr = lane / 8, lc = lane % 8;
  const int r_in = wr * 32 + lr * kWTM, c_in = wc * 32 + lc * kWTN;  // this thread's tile in the block tile
  const int row0 = blockIdx.y * kBM, col0 = blockIdx.x * kBN;
  const bool vec_a = K % 4 == 0, vec_b = N % 4 == 0;
  float acc[kWTM][kWTN] = {};
  for (int k0 = 0; k0 < K; k0 += kBK) {
    {  // A: 64 rows x 8 = 128 float4, one per thread (stored transposed)
      const int r = t / 2, c = (t % 2) * 4, gr = row0 + r;
      f4 v;
      if (gr < M) {
        v = load4(A + static_cast<size_t>(gr) * K, k0 + c, K, vec_a);
      } else {
        v.x = v.y = v.z = v.w = 0.0f;
      }
      As[c + 0][r] = v.x, As[c + 1][r] = v.y, As[c + 2][r] = v.z, As[c + 3][r] = v.w;
    }
    {  // B: 8 rows x 64 = 128 float4, one per thread
      const int r = t / 16, c = (t % 16) * 4, gr = k0 + r;
      f4 v;
      if (gr < K) {
        v = load4(B + static_cast<size_t>(gr) * N, col0 + c, N, vec_b);
      } else {
        v.x = v.y = v.z = v.w = 0.0f;
      }
      *reinterpret_cast<f4*>(&Bs[r][c]) = v;
    }
    __syncthreads();
    for (int kk = 0; kk < kBK; ++kk) {
      const f4 a0 = *reinterpret_cast<const f4*>(&As[kk][r_in]);
      const f4 a1 = *reinterpret_cast<const f4*>(&As[kk][r_in + 4]);
      const f4 b = *reinterpret_cast<const f4*>(&Bs[kk][c_in]);
      const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w}, bv[4] = {b.x, b.y, b.z, b.w};
      for (int i = 0; i < kWTM; ++i)
        for (int j = 0; j < kWTN; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < kWTM; ++i) {
    const int r = row0 + r_in + i;
    if (r < M) store4(C + static_cast<size_t>(r) * N, col0 + c_in, N, vec_b, acc[i]);
  }
}

// ---- v8: tensor cores. WMMA 16 x 16 x 16 bf16 fragments with float32 accumulators. ----------
// The v6 layout on tensor cores: 128 threads (4 warps in 2 x 2) per 64 x 64 block tile, each warp
// a 32 x 32 tile of 2 x 2 accumulator fragments, K in steps of 16. Each phase stages a 64 x 16 tile
// of A and a 16 x 64 tile of B in shared memory, rounded to bf16 on the way (the products of two
// bf16 values are exact in float32, so only the inputs' rounding and the float32 sums differ from
// SGEMM); each warp loads 2 A and 2 B fragments and issues 4 mma_sync. The accumulators go through
// shared memory to C, so edge tiles need no special case. Napkin: per phase 2 x 64 x 64 x 16 flops
// for 2 x 64 x 16 loads (v4-v6's 16 flop/byte of global traffic); the H100's bf16 dense peak is
// about 15x its FP32 rate, so this simple version is limited by its staging loads, not the MMAs.
// Needs sm_80 (bf16 WMMA). The emulator has no tensor cores: launch_matmul refuses version 8 there.
constexpr int kT8 = 64, kK8 = 16, kThreads8 = 128;
constexpr int kLdA8 = kK8 + 8, kLdB8 = kT8 + 8, kLdC8 = kT8 + 4;  // padded leading dims (multiples of 8 / 4)
#if !GS_CUDA_EMU
__global__ void matmul_v8(const float* A, const float* B, float* C, int M, int N, int K) {
  using namespace nvcuda;
  __shared__ __align__(32) __nv_bfloat16 As[kT8][kLdA8];
  __shared__ __align__(32) __nv_bfloat16 Bs[kK8][kLdB8];
  __shared__ __align__(32) float Cs[kT8][kLdC8];
  const int t = threadIdx.x, warp = t / 32;
  const int wr = warp / 2, wc = warp % 2;
  const int row0 = blockIdx.y * kT8, col0 = blockIdx.x * kT8;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  for (int k0 = 0; k0 < K; k0 += kK8) {
    for (int i = t; i < kT8 * kK8; i += kThreads8) {  // A: 16 consecutive k per row
      const int r = i / kK8, c = i % kK8, gr = row0 + r, gc = k0 + c;
      As[r][c] = __float2bfloat16_rn(gr < M && gc < K ? A[static_cast<size_t>(gr) * K + gc] : 0.0f);
    }
    for (int i = t; i < kK8 * kT8; i += kThreads8) {  // B: 64 consecutive columns per row
      const int r = i / kT8, c = i % kT8, gr = k0 + r, gc = col0 + c;
      Bs[r][c] = __float2bfloat16_rn(gr < K && gc < N ? B[static_cast<size_t>(gr) * N + gc] : 0.0f);
    }
    __syncthreads();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[2];
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b[2];
    for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &As[wr * 32 + i * 16][0], kLdA8);
    for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &Bs[0][wc * 32 + j * 16], kLdB8);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(&Cs[wr * 32 + i * 16][wc * 32 + j * 16], acc[i][j], kLdC8, wmma::mem_row_major);
  __syncthreads();
  for (int i = t; i < kT8 * kT8; i += kThreads8) {
    const int r = i / kT8, c = i % kT8;
    if (row0 + r < M && col0 + c < N) C[static_cast<size_t>(row0 + r) * N + col0 + c] = Cs[r][c];
  }
}
#endif

cublasHandle_t g_cublas = nullptr;

}  // namespace

void release_cublas() {
  if (g_cublas) cublasDestroy(g_cublas);
  g_cublas = nullptr;
}

cudaError_t launch_matmul(int version, const float* const* in, float* out, const Shape& s, cudaStream_t stream) {
  const float* A = in[0];
  const float* B = in[1];
  const int M = static_cast<int>(s.m), N = static_cast<int>(s.n), K = static_cast<int>(s.k);
  switch (version) {
    case 1:
      return gs::cuda::launch(matmul_v1, dim3(ceil_div(M, 32), ceil_div(N, 8)), dim3(32, 8), 0, stream, A, B, out, M, N,
                              K);
    case 2:
      return gs::cuda::launch(matmul_v2, dim3(ceil_div(N, 32), ceil_div(M, 8)), dim3(32, 8), 0, stream, A, B, out, M, N,
                              K);
    case 3:
      return gs::cuda::launch(matmul_v3, dim3(ceil_div(N, kT3), ceil_div(M, kT3)), dim3(kT3, kT3), 0, stream, A, B, out,
                              M, N, K);
    case 4:
      return gs::cuda::launch(matmul_v4, dim3(ceil_div(N, kBN), ceil_div(M, kBM)), dim3(kThreads45), 0, stream, A, B,
                              out, M, N, K);
    case 5:
      return gs::cuda::launch(matmul_v5, dim3(ceil_div(N, kBN), ceil_div(M, kBM)), dim3(kThreads45), 0, stream, A, B,
                              out, M, N, K);
    case 6:
      return gs::cuda::launch(matmul_v6, dim3(ceil_div(N, kBN), ceil_div(M, kBM)), dim3(kWThreads), 0, stream, A, B,
                              out, M, N, K);
    case 7: {
      // cuBLAS is column-major: row-major C (M, N) is column-major C^T (N, M) = B^T A^T.
      if (!g_cublas) GS_CUBLAS_CHECK(cublasCreate(&g_cublas));
      GS_CUBLAS_CHECK(cublasSetStream(g_cublas, stream));
      const float one = 1.0f, zero = 0.0f;
      GS_CUBLAS_CHECK(cublasSgemm(g_cublas, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, N, A, K, &zero, out, N));
      return cudaGetLastError();
    }
    case 8:
#if GS_CUDA_EMU
      throw std::invalid_argument(
          "matmul v8 (tensor cores) runs on a GPU only: the CPU emulator has no tensor cores (WMMA)");
#else
      return gs::cuda::launch(matmul_v8, dim3(ceil_div(N, kT8), ceil_div(M, kT8)), dim3(kThreads8), 0, stream, A, B,
                              out, M, N, K);
#endif
    default: throw std::invalid_argument("matmul: no version " + std::to_string(version));
  }
}

}  // namespace gradsleuth::workbench::GS_WB_NS
