// Lab 11 reference solution: the loop order, cache blocking and an AVX2 register-blocked
// micro-kernel (README.md, Tasks 11.1-11.3).
#include "tutorials/lab11_fast/lab11.h"

#include <algorithm>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LAB11_AVX2 1
#else
#define LAB11_AVX2 0
#endif

namespace gradsleuth::lab11 {

// Task 11.1: i, k, j. The inner loop streams row k of B and row i of C with unit stride.
void matmul_ikj(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
  for (int64_t i = 0; i < M; ++i) {
    float* c = C + i * N;
    std::fill(c, c + N, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float a = A[i * K + k];
      const float* b = B + k * N;
      for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
    }
  }
}

namespace {
// C[i0..i1) x [j0..j1) += A[i0..i1) x [k0..k1) @ B[k0..k1) x [j0..j1): the ikj loop on one block.
void ikj_block(const float* __restrict A, const float* __restrict B, float* __restrict C, int64_t N, int64_t K,
               int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t k0, int64_t k1) {
  for (int64_t i = i0; i < i1; ++i) {
    float* __restrict c = C + i * N + j0;
    for (int64_t k = k0; k < k1; ++k) {
      const float a = A[i * K + k];
      const float* __restrict b = B + k * N + j0;
      for (int64_t j = 0; j < j1 - j0; ++j) c[j] += a * b[j];
    }
  }
}
}  // namespace

// Task 11.2: blocks of kKc x kNc of B (128 x 256 floats = 128 KB: in L2 on any current x86
// core) shared by every row of C; a row segment of C (256 floats = 1 KB) stays in L1 over
// the kKc updates it gets from one block.
constexpr int64_t kKc = 128, kNc = 256;
void matmul_blocked(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
  std::fill(C, C + M * N, 0.0f);
  for (int64_t j0 = 0; j0 < N; j0 += kNc)
    for (int64_t k0 = 0; k0 < K; k0 += kKc)
      ikj_block(A, B, C, N, K, 0, M, j0, std::min(N, j0 + kNc), k0, std::min(K, k0 + kKc));
}

// Task 11.3: a kMr x kNr = 6 x 16 tile of C in 12 of the 16 AVX2 registers, over k-blocks of
// kKc3. Per k: 2 loads of B, 6 broadcasts of A, 12 FMAs: the FMA units are the limit, not the
// loads and stores of C that bound the ikj loop. The edges (M % 6 rows, N % 16 columns) are
// padded with zeros to whole tiles.
#if LAB11_AVX2
namespace {
constexpr int kMr = 6, kNr = 16;
constexpr int64_t kKc3 = 256;

// C[0..6) x [0..16) += A[0..6) x [0..kc) @ B[0..kc) x [0..16); lda, ldb, ldc: the row strides.
// acc0[r], acc1[r]: columns 0-7 and 8-15 of row r of the tile. Inlined into the loop over the
// tiles: as a separate function, GCC 12 kept the 12 accumulators in a stack array, stored on
// every k (half the speed; `objdump -d` shows `vmovaps %ymm.., (%rsp)` inside the k loop).
[[gnu::always_inline]] inline void micro_6x16(int64_t kc, const float* A, int64_t lda, const float* B, int64_t ldb,
                                              float* C, int64_t ldc) {
  __m256 acc0[kMr], acc1[kMr];
  for (int r = 0; r < kMr; ++r) {
    acc0[r] = _mm256_loadu_ps(C + r * ldc);
    acc1[r] = _mm256_loadu_ps(C + r * ldc + 8);
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(B + k * ldb), b1 = _mm256_loadu_ps(B + k * ldb + 8);
    for (int r = 0; r < kMr; ++r) {
      const __m256 a = _mm256_broadcast_ss(A + r * lda + k);
      acc0[r] = _mm256_fmadd_ps(a, b0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(a, b1, acc1[r]);
    }
  }
  for (int r = 0; r < kMr; ++r) {
    _mm256_storeu_ps(C + r * ldc, acc0[r]);
    _mm256_storeu_ps(C + r * ldc + 8, acc1[r]);
  }
}
}  // namespace
#endif

void matmul_simd(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
#if LAB11_AVX2
  std::fill(C, C + M * N, 0.0f);
  const int64_t M6 = M / kMr * kMr, N16 = N / kNr * kNr;  // the rows and columns of whole tiles
  // The edges, padded with zeros to a whole tile: the last M % 6 rows of A (6 x kc, row r at
  // atail[r * kKc3]) and the last N % 16 columns of B (kc x 16); a tile of C that is not whole
  // is computed in `t` and its valid part copied back. The micro-kernel then never reads or
  // writes outside the matrices, and every tile takes the same vector path.
  std::vector<float> atail(M6 < M ? kMr * kKc3 : 0), btail(N16 < N ? kKc3 * kNr : 0);
  for (int64_t k0 = 0; k0 < K; k0 += kKc3) {
    const int64_t kc = std::min(kKc3, K - k0);
    for (int r = 0; r < kMr && M6 < M; ++r)
      for (int64_t k = 0; k < kc; ++k) atail[r * kKc3 + k] = M6 + r < M ? A[(M6 + r) * K + k0 + k] : 0.0f;
    for (int64_t k = 0; k < kc && N16 < N; ++k)
      for (int64_t j = 0; j < kNr; ++j) btail[k * kNr + j] = N16 + j < N ? B[(k0 + k) * N + N16 + j] : 0.0f;
    // j outside i: the kc x 16 panel of B (16 KB at most) stays in L1 while every row block uses it.
    for (int64_t j = 0; j < N; j += kNr) {
      const int64_t cols = std::min<int64_t>(kNr, N - j);
      const float* b = cols == kNr ? B + k0 * N + j : btail.data();
      const int64_t ldb = cols == kNr ? N : kNr;
      for (int64_t i = 0; i < M; i += kMr) {
        const int64_t rows = std::min<int64_t>(kMr, M - i);
        const float* a = rows == kMr ? A + i * K + k0 : atail.data();
        const int64_t lda = rows == kMr ? K : kKc3;
        if (rows == kMr && cols == kNr) {
          micro_6x16(kc, a, lda, b, ldb, C + i * N + j, N);
          continue;
        }
        float t[kMr * kNr] = {};
        for (int64_t r = 0; r < rows; ++r) std::copy(C + (i + r) * N + j, C + (i + r) * N + j + cols, t + r * kNr);
        micro_6x16(kc, a, lda, b, ldb, t, kNr);
        for (int64_t r = 0; r < rows; ++r) std::copy(t + r * kNr, t + r * kNr + cols, C + (i + r) * N + j);
      }
    }
  }
#else
  matmul_blocked(A, B, C, M, N, K);
#endif
}

}  // namespace gradsleuth::lab11
