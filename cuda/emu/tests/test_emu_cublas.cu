// cuda/emu/tests/test_emu_cublas.cu: the emulator's cuBLAS subset against a naive loop, its argument
// checks, the extent check that flags a row-major/column-major mix-up, and the 16-bit Ex GEMMs.
#include <doctest/doctest.h>

#include <vector>

#include "cuda/cublas_compat.h"
#include "cuda/emu/tests/util.h"

namespace {

// Column-major reference: C = alpha op(A) op(B) + beta C.
template <class T>
void naive_gemm(bool ta, bool tb, int m, int n, int k, T alpha, const T* A, int lda, const T* B, int ldb, T beta, T* C,
                int ldc) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double acc = 0;
      for (int p = 0; p < k; ++p)
        acc += static_cast<double>(ta ? A[p + i * lda] : A[i + p * lda]) * (tb ? B[j + p * ldb] : B[p + j * ldb]);
      C[i + j * ldc] = static_cast<T>(alpha * acc + beta * C[i + j * ldc]);
    }
}

template <class T>
std::vector<T> ramp(size_t n, double scale) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(((i * 7919) % 23) * scale - 1.0);
  return v;
}

}  // namespace

TEST_CASE_TEMPLATE("emu cuBLAS: gemm for every op combination matches a naive loop", T, float, double) {
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  const int m = 5, n = 4, k = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int lda = (ta ? k : m) + 1, ldb = (tb ? n : k) + 2, ldc = m + 1;
      auto A = ramp<T>(static_cast<size_t>(lda) * (ta ? m : k), 0.25);
      auto B = ramp<T>(static_cast<size_t>(ldb) * (tb ? k : n), 0.5);
      auto C = ramp<T>(static_cast<size_t>(ldc) * n, 0.125);
      DevBuf<T> dA(A), dB(B), dC(C);
      const T alpha = 1.5, beta = -0.5;
      const auto opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
      cublasStatus_t st;
      if constexpr (std::is_same_v<T, float>)
        st = cublasSgemm(h, opa, opb, m, n, k, &alpha, dA.p, lda, dB.p, ldb, &beta, dC.p, ldc);
      else
        st = cublasDgemm(h, opa, opb, m, n, k, &alpha, dA.p, lda, dB.p, ldb, &beta, dC.p, ldc);
      REQUIRE(st == CUBLAS_STATUS_SUCCESS);
      naive_gemm<T>(ta, tb, m, n, k, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
      const auto got = dC.get();
      for (size_t i = 0; i < C.size(); ++i) CHECK(got[i] == doctest::Approx(C[i]).epsilon(1e-5));
    }
  CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("emu cuBLAS: strided batched gemm (float and double)") {
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  const int m = 3, n = 2, k = 4, batch = 3;
  const long long sA = m * k, sB = k * n, sC = m * n;
  auto A = ramp<double>(sA * batch, 0.3), B = ramp<double>(sB * batch, 0.2), C = ramp<double>(sC * batch, 0.1);
  DevBuf<double> dA(A), dB(B), dC(C);
  const double alpha = 2.0, beta = 1.0;
  REQUIRE(cublasDgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, dA.p, m, sA, dB.p, k, sB, &beta, dC.p,
                                    m, sC, batch) == CUBLAS_STATUS_SUCCESS);
  for (int b = 0; b < batch; ++b)
    naive_gemm<double>(false, false, m, n, k, alpha, A.data() + b * sA, m, B.data() + b * sB, k, beta,
                       C.data() + b * sC, m);
  auto got = dC.get();
  for (size_t i = 0; i < C.size(); ++i) CHECK(got[i] == doctest::Approx(C[i]));

  std::vector<float> Af(A.begin(), A.end()), Bf(B.begin(), B.end()), Cf(sC * batch, 0.0f);
  DevBuf<float> fA(Af), fB(Bf), fC(Cf);
  const float one = 1.0f, zero = 0.0f;
  // op(A) = A^T with A stored k x m (lda k).
  REQUIRE(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, fA.p, k, sA, fB.p, k, sB, &zero, fC.p,
                                    m, sC, batch) == CUBLAS_STATUS_SUCCESS);
  for (int b = 0; b < batch; ++b)
    naive_gemm<float>(true, false, m, n, k, 1.0f, Af.data() + b * sA, k, Bf.data() + b * sB, k, 0.0f,
                      Cf.data() + b * sC, m);
  const auto gotf = fC.get();
  for (size_t i = 0; i < Cf.size(); ++i) CHECK(gotf[i] == doctest::Approx(Cf[i]).epsilon(1e-5));
  // A batch stride reaching past the allocation is flagged.
  CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, fA.p, m, sA + 1, fB.p, k, sB, &zero, fC.p,
                                  m, sC, batch) == CUBLAS_STATUS_INVALID_VALUE);
  cublasDestroy(h);
}

TEST_CASE("emu cuBLAS: argument checks as documented (m/n/k, lda/ldb/ldc, null handle)") {
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  DevBuf<float> a(64), b(64), c(64);
  const float one = 1.0f, zero = 0.0f;
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 2, 2, &one, a.p, 2, b.p, 2, &zero, c.p, 2) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 2, &one, a.p, 3, b.p, 2, &zero, c.p, 4) ==
        CUBLAS_STATUS_INVALID_VALUE);  // lda < m
  CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 4, 2, 3, &one, a.p, 2, b.p, 3, &zero, c.p, 4) ==
        CUBLAS_STATUS_INVALID_VALUE);  // op T: lda < k
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 2, &one, a.p, 4, b.p, 1, &zero, c.p, 4) ==
        CUBLAS_STATUS_INVALID_VALUE);  // ldb < k
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 2, &one, a.p, 4, b.p, 2, &zero, c.p, 3) ==
        CUBLAS_STATUS_INVALID_VALUE);  // ldc < m
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, 0, 0, &one, a.p, 1, b.p, 1, &zero, c.p, 1) ==
        CUBLAS_STATUS_SUCCESS);  // empty is fine
  CHECK(cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, a.p, 1, b.p, 1, &zero, c.p, 1) ==
        CUBLAS_STATUS_NOT_INITIALIZED);
  std::vector<float> host(64);
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, host.data(), 2, b.p, 2, &zero, c.p, 2) ==
        CUBLAS_STATUS_INVALID_VALUE);  // host matrix
  cublasDestroy(h);
}

TEST_CASE("emu cuBLAS: the extent check flags a row-major / column-major mix-up") {
  // Row-major A (M x K) times row-major B (K x N) = row-major C (M x N), with M < K.
  const int M = 2, K = 6, N = 3;
  std::vector<float> A(M * K), B(K * N);
  for (int i = 0; i < M * K; ++i) A[i] = static_cast<float>(i + 1);
  for (int i = 0; i < K * N; ++i) B[i] = static_cast<float>(i % 4);
  DevBuf<float> dA(A), dB(B), dC(M * N);
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  const float one = 1.0f, zero = 0.0f;
  // The mix-up: row-major buffers passed as if column-major with ld = row length. lda = K >= m passes
  // cuBLAS's own checks, but column-major A (M x K, ld K) reaches element (K-1)*K + M-1 >= M*K.
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA.p, K, dB.p, N < K ? K : N, &zero, dC.p, M) ==
        CUBLAS_STATUS_INVALID_VALUE);
  // The right call: C^T = B^T A^T, i.e. swap the operands (column-major views of the row-major data).
  REQUIRE(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, dB.p, N, dA.p, K, &zero, dC.p, N) ==
          CUBLAS_STATUS_SUCCESS);
  const auto C = dC.get();
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float ref = 0;
      for (int p = 0; p < K; ++p) ref += A[i * K + p] * B[p * N + j];
      CHECK(C[i * N + j] == ref);
    }
  cublasDestroy(h);
}

// The Ex GEMMs with 16-bit operands: CUBLAS_COMPUTE_32F sums in float32 and rounds C once (the
// float64 sum of the 16-bit inputs, rounded to float32 and then to C's type, here); 16F compute
// rounds every multiply-add to float16 (a long sum drifts); a combination cuBLAS does not take
// (bf16 with 16F compute, A and B of different types) is CUBLAS_STATUS_NOT_SUPPORTED.
TEST_CASE("emu cuBLAS: GemmEx / GemmStridedBatchedEx with float16 and bfloat16, 32F and 16F compute") {
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  const int m = 3, n = 2, k = 400;  // C (m, n) = A (m, k) B (k, n), column-major, untransposed
  std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(k) * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.25f + 0.125f * static_cast<float>(i % 5);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.5f + 0.25f * static_cast<float>(i % 3);
  std::vector<double> want(static_cast<size_t>(m) * n, 0.0);  // exact: every value is a few bits
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i)
      for (int p = 0; p < k; ++p) want[i + j * m] += static_cast<double>(a[i + p * m]) * b[p + j * k];
  const float one = 1.0f, zero = 0.0f;
  {  // float16 in, float16 out, 32F compute
    std::vector<__half> ha, hb;
    for (float v : a) ha.push_back(__float2half_rn(v));
    for (float v : b) hb.push_back(__float2half_rn(v));
    DevBuf<__half> dA(ha), dB(hb), dC(static_cast<size_t>(m) * n);
    REQUIRE(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA.p, CUDA_R_16F, m, dB.p, CUDA_R_16F, k, &zero,
                         dC.p, CUDA_R_16F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    const auto got = dC.get();
    for (size_t i = 0; i < got.size(); ++i)
      CHECK(__half2float(got[i]) == __half2float(__float2half_rn(static_cast<float>(want[i]))));
    // 16F compute: the accumulator rounds to float16 after every term (spacing 0.125 to 0.25 here).
    const __half hone = __float2half_rn(1.0f), hzero = __float2half_rn(0.0f);
    REQUIRE(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &hone, dA.p, CUDA_R_16F, m, dB.p, CUDA_R_16F, k, &hzero,
                         dC.p, CUDA_R_16F, m, CUBLAS_COMPUTE_16F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    const auto drift = dC.get();
    bool differs = false;
    for (size_t i = 0; i < drift.size(); ++i) differs |= __half2float(drift[i]) != __half2float(got[i]);
    CHECK(differs);
  }
  {  // bfloat16 in, float32 out, strided batched (one batch)
    std::vector<__nv_bfloat16> ha, hb;
    for (float v : a) ha.push_back(__float2bfloat16_rn(v));
    for (float v : b) hb.push_back(__float2bfloat16_rn(v));
    DevBuf<__nv_bfloat16> dA(ha), dB(hb);
    DevBuf<float> dC(static_cast<size_t>(m) * n);
    REQUIRE(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA.p, CUDA_R_16BF, m, 0, dB.p,
                                       CUDA_R_16BF, k, 0, &zero, dC.p, CUDA_R_32F, m, 0, 1, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    const auto got = dC.get();
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == static_cast<float>(want[i]));
    CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA.p, CUDA_R_16BF, m, dB.p, CUDA_R_16BF, k, &zero,
                       dC.p, CUDA_R_32F, m, CUBLAS_COMPUTE_16F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA.p, CUDA_R_16BF, m, dB.p, CUDA_R_16F, k, &zero,
                       dC.p, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}
