// CPU backend, linear algebra: the reference batched matrix multiply.
//
//   out[n] (N, M) = a[n] (N, K) @ b[n] (K, M)
//
// One output row at a time, in i-k-j order: for each k, out row i += a[n][i][k] * row k
// of b[n]. The inner loop walks a row of b and a row of out, both contiguous, so the
// compiler vectorises it. Each out[i][j] is still the sum over k in the order 0, 1, ...,
// K - 1: the textbook dot product, with the error bound K * u * sum_k |a_ik| |b_kj|
// (u = 2^-24 for float32, 2^-53 for float64). int64 products wrap, as every int64 op does.
// With tuned kernels on, a float product goes to fast/linalg.cpp (a BLAS) instead.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/fast.h"

namespace gradsleuth::cpu {

namespace {

// acc + x * y; for int64 through uint64, so that overflow wraps instead of being undefined.
template <class T>
T mul_add(T acc, T x, T y) {
  if constexpr (std::is_same_v<T, int64_t>)
    return static_cast<int64_t>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(x) * static_cast<uint64_t>(y));
  else
    return acc + x * y;
}

template <class T>
void bmm_reference(const Tensor& out, const Tensor& a, const Tensor& b_in) {
  const int64_t N = out.size(1), M = out.size(2), K = a.size(2);
  // Rows of b must be contiguous for the inner loop (a transposed weight has columns
  // contiguous instead): such a b is copied once.
  const Tensor b = (M <= 1 || b_in.strides()[2] == 1) ? b_in : b_in.contiguous();
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  T* po = static_cast<T*>(out.raw_data());  // contiguous
  const int64_t a0 = a.strides()[0], a1 = a.strides()[1], a2 = a.strides()[2];
  const int64_t b0 = b.strides()[0], b1 = b.strides()[1];
  const int64_t rows = out.size(0) * N;
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, K * M)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t n = r / N, i = r % N;
      T* o = po + r * M;
      std::fill_n(o, M, T(0));
      for (int64_t k = 0; k < K; ++k) {
        const T aik = pa[n * a0 + i * a1 + k * a2];
        const T* brow = pb + n * b0 + k * b1;
        for (int64_t j = 0; j < M; ++j) o[j] = mul_add(o[j], aik, brow[j]);
      }
    }
  });
}

}  // namespace

void CpuBackend::bmm(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (cpu_fast_kernels() && fast::bmm(out, a, b)) return;
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) bmm_reference<T>(out, a, b);
  });
}

}  // namespace gradsleuth::cpu
