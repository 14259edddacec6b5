// The CPU backend's GEMM through a tuned BLAS (OpenBLAS, or BLIS) when the build
// found one (GRADSLEUTH_BLAS, see the top-level CMakeLists.txt); Eigen's own product
// in linalg.cpp is the fallback and the readable reference. Only the CBLAS `?gemm`
// entry points are used, declared here, so no vendor header is needed.
#pragma once
#include <cstdint>

namespace gradsleuth::cpu::fast {

// "OpenBLAS", "BLIS", or "Eigen" when no BLAS was built in.
const char* gemm_library();

// While one is alive, blas_gemm calls made by this thread run the BLAS on one thread,
// whatever OpenMP's setting. The fused conv2d's per-sample products are too small to
// split: threaded, its second conv's forward + backward took 4-5x the wall time.
class BlasSingleThread {
 public:
  BlasSingleThread();
  ~BlasSingleThread();
  BlasSingleThread(const BlasSingleThread&) = delete;
  BlasSingleThread& operator=(const BlasSingleThread&) = delete;
};

// C (M, N) row-major with leading dimension ldc  =  A (M, K) @ B (K, N), where A is
// stored row-major (a_col = false: element (i, k) at A[i*lda + k]) or column-major
// (a_col = true: at A[k*lda + i]), and likewise B. Returns false, touching nothing,
// when no BLAS is built in. Runs on the library's thread count (OpenMP's setting).
// On one thread, a float32 product in the range sgemm_direct_pays() names goes to the
// packing-free kernel of sgemm.h instead of the BLAS.
// The general form: C = A @ B + beta * C (beta = 1 accumulates into C: the fused conv2d
// adds per-sample products into one weight gradient, and a prefilled bias into out).
bool blas_gemm(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
               int64_t ldb, float beta, float* C, int64_t ldc);
bool blas_gemm(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
               int64_t ldb, double beta, double* C, int64_t ldc);
// beta = 0: C is overwritten, never read.
inline bool blas_gemm(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                      const float* B, int64_t ldb, float* C, int64_t ldc) {
  return blas_gemm(a_col, b_col, M, N, K, A, lda, B, ldb, 0.0f, C, ldc);
}
inline bool blas_gemm(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda,
                      const double* B, int64_t ldb, double* C, int64_t ldc) {
  return blas_gemm(a_col, b_col, M, N, K, A, lda, B, ldb, 0.0, C, ldc);
}

}  // namespace gradsleuth::cpu::fast
