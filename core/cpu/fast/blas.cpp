// CBLAS sgemm/dgemm for the CPU backend (see blas.h). GS_CBLAS is 1 (OpenBLAS) or
// 2 (BLIS) when core/CMakeLists.txt found the library, else 0.
#include "core/cpu/fast/blas.h"

#include <climits>

#include "core/cpu/fast/sgemm.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#ifndef GS_CBLAS
#define GS_CBLAS 0
#endif

#if GS_CBLAS
// The CBLAS interface (its enums are C ints): the part we call.
extern "C" {
void cblas_sgemm(int layout, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc);
void cblas_dgemm(int layout, int trans_a, int trans_b, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc);
#if GS_CBLAS == 1
void openblas_set_num_threads(int n);
#else
void bli_thread_set_num_threads(long n);
#endif
}
#endif

namespace gradsleuth::cpu::fast {

const char* gemm_library() {
#if GS_CBLAS == 1
  return "OpenBLAS";
#elif GS_CBLAS == 2
  return "BLIS";
#else
  return "Eigen";
#endif
}

namespace {
thread_local int g_single_thread_scopes = 0;  // live BlasSingleThread objects on this thread
}  // namespace
BlasSingleThread::BlasSingleThread() { ++g_single_thread_scopes; }
BlasSingleThread::~BlasSingleThread() { --g_single_thread_scopes; }

#if GS_CBLAS
namespace {
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;  // CBLAS enum values

// The threads a product gets: OpenMP's setting (one thread by default in gradsleuth's
// tools), re-read on every call so omp_set_num_threads works; one inside a
// BlasSingleThread scope.
int gemm_threads() {
#ifdef _OPENMP
  return g_single_thread_scopes > 0 ? 1 : omp_get_max_threads();
#else
  return 1;
#endif
}

// The BLAS keeps its own thread pool: give it gemm_threads().
void sync_threads() {
  const int want = gemm_threads();
  static thread_local int have = -1;
  if (want == have) return;
#if GS_CBLAS == 1
  openblas_set_num_threads(want);
#else
  bli_thread_set_num_threads(want);
#endif
  have = want;
}

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

// The packing-free kernel (sgemm.h) takes a float32 product when it runs on one thread
// and the measured rule says it beats the BLAS there.
bool use_direct(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K) {
  return gemm_threads() == 1 && sgemm_direct_enabled() && sgemm_direct_pays(a_col, b_col, M, N, K);
}

template <class T, class Gemm>
bool gemm(Gemm f, bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  // CBLAS takes int sizes; a larger problem stays on Eigen (which takes any size).
  if (!fits_int(M) || !fits_int(N) || !fits_int(K) || !fits_int(lda) || !fits_int(ldb) || !fits_int(ldc)) return false;
  // Leading dimensions must be >= 1 even for empty or single-row operands.
  const auto ld = [](int64_t v) { return static_cast<int>(v < 1 ? 1 : v); };
  sync_threads();
  // A column-major (M, K) operand is a row-major (K, M) one, transposed.
  f(kRowMajor, a_col ? kTrans : kNoTrans, b_col ? kTrans : kNoTrans, static_cast<int>(M), static_cast<int>(N),
    static_cast<int>(K), T(1), A, ld(lda), B, ld(ldb), beta, C, ld(ldc));
  return true;
}
}  // namespace

bool blas_gemm(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
               int64_t ldb, float beta, float* C, int64_t ldc) {
  if (use_direct(a_col, b_col, M, N, K) && sgemm_direct(a_col, b_col, M, N, K, A, lda, B, ldb, beta, C, ldc))
    return true;
  return gemm<float>(cblas_sgemm, a_col, b_col, M, N, K, A, lda, B, ldb, beta, C, ldc);
}
bool blas_gemm(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
               int64_t ldb, double beta, double* C, int64_t ldc) {
  return gemm<double>(cblas_dgemm, a_col, b_col, M, N, K, A, lda, B, ldb, beta, C, ldc);
}
#else
bool blas_gemm(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float, float*,
               int64_t) {
  return false;
}
bool blas_gemm(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t, const double*, int64_t, double, double*,
               int64_t) {
  return false;
}
#endif

}  // namespace gradsleuth::cpu::fast
