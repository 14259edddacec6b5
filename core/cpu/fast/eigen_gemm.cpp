// Eigen's own GEMM, the fallback of the CPU backend's products (blas.h's eigen_gemm): one
// file, so linalg.cpp and conv2d.cpp share its float/double instantiations.
#include <Eigen/Core>

#include "core/cpu/fast/blas.h"

namespace gradsleuth::cpu::fast {

template <class T>
void eigen_gemm(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
                int64_t ldb, bool accumulate, T* C, int64_t ldc) {
  using Dyn = Eigen::Stride<Eigen::Dynamic, 1>;
  using RowM = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ColM = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  Eigen::Map<RowM, 0, Dyn> Cm(C, M, N, Dyn(ldc, 1));
  auto with_b = [&](const auto& Am) {
    auto run = [&](const auto& Bm) {
      if (accumulate)
        Cm.noalias() += Am * Bm;
      else
        Cm.noalias() = Am * Bm;
    };
    if (b_col)
      run(Eigen::Map<const ColM, 0, Dyn>(B, K, N, Dyn(ldb, 1)));
    else
      run(Eigen::Map<const RowM, 0, Dyn>(B, K, N, Dyn(ldb, 1)));
  };
  if (a_col)
    with_b(Eigen::Map<const ColM, 0, Dyn>(A, M, K, Dyn(lda, 1)));
  else
    with_b(Eigen::Map<const RowM, 0, Dyn>(A, M, K, Dyn(lda, 1)));
}

template void eigen_gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
                                bool, float*, int64_t);
template void eigen_gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t, const double*,
                                 int64_t, bool, double*, int64_t);

}  // namespace gradsleuth::cpu::fast
