// Tuned batched matrix multiply (fast.h): through a tuned BLAS when one is built in
// (blas.h: OpenBLAS by default, or the packing-free SGEMM of sgemm.h for the products it
// wins), else through Eigen's GEMM (eigen_gemm.cpp) on the operands' own memory. Either way a
// row- or column-major view (a transposed weight, a batch slice) is used in place,
// without a copy. The reference is core/cpu/linalg.cpp's loop, which also takes the products
// a BLAS cannot: empty ones, and sizes past CBLAS's int.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/blas.h"
#include "core/cpu/fast/fast.h"
#include "core/cpu/fast/sgemm.h"
#include "core/matmul_layout.h"

namespace gradsleuth::cpu::fast {

namespace {

// GEMM on the operands' own memory (the BLAS, else eigen_gemm): a row-major or a
// column-major (transposed view) operand is used without a copy. False, touching nothing, for a
// product left to the reference loop.
template <class T>
bool bmm_typed(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t B = out.shape()[0], N = out.shape()[1], M = out.shape()[2], K = a.shape()[2];
  T* o = static_cast<T*>(out.raw_data());
  int64_t lda = 0, ldb = 0;
  const Tensor A = detail::matmul_layout(a, N, K, lda) < 0 ? a.contiguous() : a;
  const Tensor Bt = detail::matmul_layout(b, K, M, ldb) < 0 ? b.contiguous() : b;
  const int la = detail::matmul_layout(A, N, K, lda), lb = detail::matmul_layout(Bt, K, M, ldb);
#if !GS_EIGEN_GEMM
  // With a BLAS: every slice has the same sizes, so the BLAS takes all of them or none.
  if (N == 0 || M == 0 || K == 0 || !gemm_fits_cblas(N, M, K, lda, ldb, M)) return false;
#endif
  const T* pa = static_cast<const T*>(A.raw_data());
  const T* pb = static_cast<const T*>(Bt.raw_data());
  for (int64_t i = 0; i < B; ++i) {
    const T* ai = pa + i * A.strides()[0];
    const T* bi = pb + i * Bt.strides()[0];
    // The tuned kernel: OpenBLAS reaches 1.3-1.5x Eigen's SGEMM on AVX2 (docs/benchmarks.md).
    if (N > 0 && M > 0 && K > 0 && blas_gemm(la == 1, lb == 1, N, M, K, ai, lda, bi, ldb, o + i * N * M, M)) continue;
#if GS_EIGEN_GEMM
    eigen_gemm<T>(la == 1, lb == 1, N, M, K, ai, lda, bi, ldb, false, o + i * N * M, M);
#else
    throw std::logic_error("bmm: the BLAS declined a product whose sizes fit its int (" + std::to_string(N) + " x " +
                           std::to_string(K) + " @ " + std::to_string(K) + " x " + std::to_string(M) + ")");
#endif
  }
  return true;
}

Elem elem_of(DType t) { return t == kBFloat16 ? Elem::BFloat16 : t == kFloat16 ? Elem::Float16 : Elem::Float32; }

}  // namespace

bool bmm_mixed(const Tensor& out, const Tensor& a, const Tensor& b, DType round_through) {
  const auto fits = [](DType t) { return t == kFloat32 || is_reduced_float(t); };
  if (out.dtype() != kFloat32 || !fits(a.dtype()) || !fits(b.dtype())) return false;
  const int64_t B = out.shape()[0], N = out.shape()[1], M = out.shape()[2], K = a.shape()[2];
  if (B <= 0 || N <= 0 || M <= 0 || K <= 0) return false;
  int64_t lda = 0, ldb = 0;
  const int la = detail::matmul_layout(a, N, K, lda), lb = detail::matmul_layout(b, K, M, ldb);
  if (la < 0 || lb < 0 || !gemm_routes_direct(la == 1, lb == 1, N, M, K)) return false;
  const auto* pa = static_cast<const char*>(a.raw_data());
  const auto* pb = static_cast<const char*>(b.raw_data());
  float* o = static_cast<float*>(out.raw_data());
  for (int64_t i = 0; i < B; ++i)
    if (!sgemm_direct_mixed(la == 1, lb == 1, N, M, K, pa + i * a.strides()[0] * static_cast<int64_t>(a.element_size()),
                            elem_of(a.dtype()), lda, pb + i * b.strides()[0] * static_cast<int64_t>(b.element_size()),
                            elem_of(b.dtype()), ldb, o + i * N * M, M, elem_of(round_through)))
      return false;
  return true;
}

bool bmm(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.dtype() == kFloat32) return bmm_typed<float>(out, a, b);
  if (out.dtype() == kFloat64) return bmm_typed<double>(out, a, b);
  return false;  // integer products: the reference loop
}

}  // namespace gradsleuth::cpu::fast
