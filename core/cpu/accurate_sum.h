// Floating-point sums whose result and error bound do not depend on the machine's
// SIMD width: every float32 reduction of the CPU backend (sum, mean, var/std, norms,
// softmax denominators, the loss reductions) ends in accurate_sum().
//
// Why: a vectorised `sum()` (Eigen's, or the compiler's) splits a row into as many
// running sums as the vector register has lanes, so the same program rounds
// differently with AVX2 (8 floats) and AVX-512 (16 floats), and each lane of a
// float accumulator loses ~n/lanes * 2^-24 of relative accuracy on long rows
// (2^20 copies of 0.1f: 2.5e-5 off with AVX2).
//
// How: kSumLanes = 32 float64 accumulators in a fixed order (lane j takes elements
// j, j + 32, j + 64, ... of a block; 32 independent chains keep the adders busy at
// any vector width), blocks of kSumBlock = 1024 elements, block sums combined
// pairwise. The source fixes the order of every addition and the
// compiler may not reassociate (no -ffast-math), so a vector unit of any width
// computes the same bits: results are identical on every x86-64 level.
//
// Bound (u = 2^-53, float64's unit roundoff), for n values x_i:
//   |accurate_sum(x) - sum(x)| <= (kSumBlock/kSumLanes + 5 + ceil(log2(n/kSumBlock))) * u * sum|x_i|
//                               =  (37 + ceil(log2(n/1024))) * u * sum|x_i|
// i.e. below 1e-14 * sum|x_i| for any n under 2^40, plus, for a float32 result, one
// final rounding to float (2^-24 relative). Strided rows (accurate_sum_strided) add
// their blocks one after another: (37 + n/1024) * u * sum|x_i|, 1.3e-13 at n = 2^20.
// docs/autograd.md states the same bounds.
#pragma once
#include <cstdint>

namespace gradsleuth::cpu {

inline constexpr int64_t kSumLanes = 32;
inline constexpr int64_t kSumBlock = 1024;

namespace detail_sum {
// The lanes combined as a fixed binary tree (lane j with lane j + half, halving).
inline double combine_lanes(double* acc) {
  for (int64_t half = kSumLanes / 2; half >= 1; half /= 2)
    for (int64_t j = 0; j < half; ++j) acc[j] += acc[j + half];
  return acc[0];
}

// One block of at most kSumBlock contiguous values, kSumLanes float64 lanes in fixed order.
template <class T>
double block_sum(const T* x, int64_t n) {
  if (n < kSumLanes) {  // short rows (a softmax over 10 classes): one running sum
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]);
    return s;
  }
  double acc[kSumLanes] = {};
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes)
    for (int64_t j = 0; j < kSumLanes; ++j) acc[j] += static_cast<double>(x[i + j]);  // vectorised over j
  // The tail goes into lanes 0..r-1, still in element order.
  for (int64_t j = 0; i + j < n; ++j) acc[j] += static_cast<double>(x[i + j]);
  return combine_lanes(acc);
}
}  // namespace detail_sum

// Sum of n contiguous values of type T (float or double), in float64.
template <class T>
double accurate_sum(const T* x, int64_t n) {
  if (n <= kSumBlock) return detail_sum::block_sum(x, n);
  // Pairwise over blocks: split at a block boundary near the middle.
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  const int64_t half = (blocks / 2) * kSumBlock;
  return accurate_sum(x, half) + accurate_sum(x + half, n - half);
}

// The same for n values `stride_bytes` apart (strided rows): one float64 running sum
// per lane, in element order, so it too is the same on every machine.
template <class T>
double accurate_sum_strided(const char* p, int64_t n, int64_t stride_bytes) {
  double acc[kSumLanes];
  double total = 0;
  int64_t i = 0;
  while (i < n) {
    const int64_t e = i + kSumBlock < n ? i + kSumBlock : n;
    for (int64_t j = 0; j < kSumLanes; ++j) acc[j] = 0;
    for (int64_t k = i; k < e; ++k)
      acc[(k - i) % kSumLanes] += static_cast<double>(*reinterpret_cast<const T*>(p + k * stride_bytes));
    total += detail_sum::combine_lanes(acc);
    i = e;
  }
  return total;
}

}  // namespace gradsleuth::cpu
