// Lab 9 reference solution, the CPU half (built only with -DGRADSLEUTH_LAB_SOLUTIONS=ON):
// the answer key, the launch geometry, validate_result and the napkin math.
// The kernels are in lab9_kernels.cu next to this file. See ../README.md.
#include "tutorials/lab9_cuda/lab9.h"

#include <cmath>
#include <set>

#include "core/error.h"

namespace gradsleuth::lab9 {

// ---- Task 9.1 ------------------------------------------------------------------------
void axpy_cpu(int64_t n, float alpha, const float* x, const float* y, float* out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<float>(static_cast<double>(alpha) * x[i] + static_cast<double>(y[i]));
}

void matmul_cpu(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;  // the whole sum in double, one rounding at the end
      for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(A[i * K + k]) * B[k * N + j];
      C[i * N + j] = static_cast<float>(acc);
    }
}

Tolerance tolerance(DType dtype, int64_t k) {
  GS_CHECK(k >= 0, "lab9::tolerance", "k is the number of summed terms, it cannot be negative (got ", k, ")");
  double eps = 0.0;  // integer types: exact
  if (dtype == DType::Float32) eps = std::ldexp(1.0, -23);
  if (dtype == DType::Float64) eps = std::ldexp(1.0, -52);
  const double t = eps * static_cast<double>(k > 1 ? k : 1);
  return {t, t};
}

// ---- Task 9.2 ------------------------------------------------------------------------
int64_t ceil_div(int64_t n, int64_t d) {
  GS_CHECK(n >= 0 && d > 0, "lab9::ceil_div", "needs n >= 0 and d > 0, got n = ", n, ", d = ", d);
  return (n + d - 1) / d;
}

Launch1D launch_1d(int64_t n, int64_t block) {
  GS_CHECK(block >= 1 && block <= 1024, "lab9::launch_1d", "a block holds 1 to 1024 threads, got ", block);
  GS_CHECK(n >= 0, "lab9::launch_1d", "n must be >= 0, got ", n);
  return {ceil_div(n, block), block};
}

int64_t global_index(int64_t block_idx, int64_t block_dim, int64_t thread_idx) {
  return block_idx * block_dim + thread_idx;
}

Launch2D launch_matmul(int64_t M, int64_t N, int64_t tile) {
  GS_CHECK(tile >= 1 && tile * tile <= 1024, "lab9::launch_matmul",
           "a tile x tile block must hold 1 to 1024 threads, got tile ", tile);
  GS_CHECK(M >= 0 && N >= 0, "lab9::launch_matmul", "M and N must be >= 0, got ", M, " and ", N);
  return {ceil_div(N, tile), ceil_div(M, tile), tile, tile};
}

int64_t k_phases(int64_t K, int64_t tile) { return ceil_div(K, tile); }

RowCol tile_output(int64_t by, int64_t bx, int64_t ty, int64_t tx, int64_t tile) {
  return {by * tile + ty, bx * tile + tx};
}

RowCol tile_load_a(int64_t by, int64_t ty, int64_t tx, int64_t p, int64_t tile) {
  return {by * tile + ty, p * tile + tx};
}

RowCol tile_load_b(int64_t bx, int64_t ty, int64_t tx, int64_t p, int64_t tile) {
  return {p * tile + ty, bx * tile + tx};
}

// ---- Task 9.3 ------------------------------------------------------------------------
Validation validate_result(const float* got, const float* want, int64_t n, Tolerance tol) {
  GS_CHECK(n >= 0, "lab9::validate_result", "n must be >= 0, got ", n);
  GS_CHECK(n == 0 || (got && want), "lab9::validate_result", "got a null pointer for ", n, " elements");
  Validation v;
  for (int64_t i = 0; i < n; ++i) {
    const double g = got[i], w = want[i];
    bool match = false;
    double err = INFINITY;  // a NaN or an infinity where it does not belong
    if (std::isfinite(g) && std::isfinite(w)) {
      err = std::fabs(g - w);
      match = err <= tol.atol + tol.rtol * std::fabs(w);
    } else if ((std::isnan(g) && std::isnan(w)) || (std::isinf(w) && g == w)) {
      continue;  // the same NaN or infinity: a match, and no error to measure
    }
    if (err > v.max_abs_err) v.max_abs_err = err;
    if (std::isfinite(w) && w != 0.0 && err / std::fabs(w) > v.max_rel_err) v.max_rel_err = err / std::fabs(w);
    if (match) continue;
    if (v.mismatches++ == 0) {
      v.first_bad = i;
      v.first_got = got[i];
      v.first_want = want[i];
    }
  }
  v.ok = v.mismatches == 0;
  return v;
}

// ---- Task 9.4 ------------------------------------------------------------------------
Traffic axpy_traffic(int64_t n) { return {2.0 * n, 12.0 * n}; }

Traffic matmul_naive_traffic(int64_t M, int64_t N, int64_t K) {
  const double m = M, n = N, k = K;
  return {2.0 * m * n * k, 4.0 * (m * n * k + m * n * k + m * n)};  // A row + B column per thread, C once
}

Traffic matmul_tiled_traffic(int64_t M, int64_t N, int64_t K, int64_t tile) {
  const double m = M, n = N, k = K;
  // Every block column (ceil(N / tile) of them) reads all of A once; every block
  // row (ceil(M / tile)) reads all of B once; C is written once.
  const double a = m * k * static_cast<double>(ceil_div(N, tile));
  const double b = k * n * static_cast<double>(ceil_div(M, tile));
  return {2.0 * m * n * k, 4.0 * (a + b + m * n)};
}

double roofline_gflops(const Traffic& t, double peak_gflops, double peak_gb_per_s) {
  GS_CHECK(t.flops > 0 && t.bytes > 0, "lab9::roofline_gflops", "needs flops > 0 and bytes > 0");
  const double memory_bound = t.flops / t.bytes * peak_gb_per_s;  // (flop / byte) * (GB / s) = GFLOP / s
  return memory_bound < peak_gflops ? memory_bound : peak_gflops;
}

int64_t warp_sectors(int64_t stride, int64_t elem_bytes) {
  GS_CHECK(stride >= 0 && elem_bytes >= 1, "lab9::warp_sectors", "needs stride >= 0 and elem_bytes >= 1, got ", stride,
           " and ", elem_bytes);
  std::set<int64_t> sectors;
  for (int64_t i = 0; i < 32; ++i) {
    const int64_t first = i * stride * elem_bytes, last = first + elem_bytes - 1;
    for (int64_t s = first / 32; s <= last / 32; ++s) sectors.insert(s);
  }
  return static_cast<int64_t>(sectors.size());
}

}  // namespace gradsleuth::lab9
