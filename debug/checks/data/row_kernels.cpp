// The data checks' two loops over every value of a sample (data_util.h): hashing each row's bytes and
// finding each row's nearest other row. The rest of debug/ is compiled at -O1 (it orchestrates); these
// loops are its only arithmetic over whole samples, so this file is compiled at -O3, on its own
// (debug/CMakeLists.txt): in a zoo variant the two took 28% of the run's time at -O1.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "debug/checks/data/data_util.h"

namespace gradsleuth::debug::data_detail {

namespace {
constexpr uint64_t kP1 = 11400714785074694791ull, kP2 = 14029467366897019727ull, kP3 = 1609587929392839161ull,
                   kP4 = 9650029242287828579ull, kP5 = 2870177450012600261ull;
inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t round64(uint64_t acc, uint64_t w) { return rotl(acc + w * kP2, 31) * kP1; }
inline uint64_t merge64(uint64_t h, uint64_t acc) { return (h ^ round64(0, acc)) * kP1 + kP4; }
inline uint64_t word(const unsigned char* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}
}  // namespace

// XXH64's construction (Collet, xxHash): four independent lanes over 32-byte stripes, so the
// multiplies of one stripe overlap, then the lanes merged, the tail folded in and the bits mixed.
// A byte-at-a-time FNV-1a is one dependent multiply per byte: 8x to 30x slower on a 3 KB image row.
uint64_t hash_bytes(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  const unsigned char* const end = p + n;
  uint64_t h;
  if (n >= 32) {
    uint64_t a = kP1 + kP2, b = kP2, c = 0, d = 0ull - kP1;
    for (; p + 32 <= end; p += 32) {
      a = round64(a, word(p));
      b = round64(b, word(p + 8));
      c = round64(c, word(p + 16));
      d = round64(d, word(p + 24));
    }
    h = rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18);
    h = merge64(merge64(merge64(merge64(h, a), b), c), d);
  } else {
    h = kP5;
  }
  h += static_cast<uint64_t>(n);
  for (; p + 8 <= end; p += 8) h = rotl(h ^ round64(0, word(p)), 27) * kP1 + kP4;
  if (p + 4 <= end) {
    uint32_t w;
    std::memcpy(&w, p, sizeof w);
    h = rotl(h ^ (static_cast<uint64_t>(w) * kP1), 23) * kP2 + kP3;
    p += 4;
  }
  for (; p < end; ++p) h = rotl(h ^ (static_cast<uint64_t>(*p) * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

std::vector<uint64_t> row_hashes_x(const Tensor& x) {
  NoGradGuard ng;
  const int64_t B = x.dim() == 0 ? 1 : x.size(0);
  std::vector<float> v = x.detach().to_vector<float>();
  const size_t F = B > 0 ? v.size() / static_cast<size_t>(B) : 0;
  std::vector<uint64_t> h(static_cast<size_t>(B));
  for (int64_t r = 0; r < B; ++r) h[r] = hash_bytes(v.data() + r * F, F * sizeof(float));
  return h;
}

std::vector<int64_t> nearest_rows(const std::vector<double>& v, int64_t rows, int64_t n, int64_t max_features,
                                  bool floor_spread) {
  if (rows <= 0 || n < 2 || n > rows) return {};
  const int64_t F = static_cast<int64_t>(v.size()) / rows;
  const int64_t k = std::min(F, max_features);
  // The kept features, each centred and divided by its spread: z[j * n + i], feature-major, so the
  // distance loop below runs over rows, a vector of them at once.
  std::vector<double> z;
  std::vector<double> sds;
  std::vector<double> c(static_cast<size_t>(n));
  for (int64_t j = 0; j < k; ++j) {
    const int64_t col = j * F / k;
    double mean = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double x = v[static_cast<size_t>(i * F + col)];
      c[static_cast<size_t>(i)] = std::isfinite(x) ? x : 0.0;
      mean += c[static_cast<size_t>(i)];
    }
    mean /= static_cast<double>(n);
    double var = 0;
    for (double& x : c) {
      x -= mean;
      var += x * x;
    }
    const double sd = std::sqrt(var / static_cast<double>(n));
    if (!(sd > 0)) continue;
    z.insert(z.end(), c.begin(), c.end());
    sds.push_back(sd);
  }
  if (sds.empty()) return {};
  // Each feature divided by its spread; with floor_spread, by at least the features' median spread, so
  // that near-constant features (an image's border, where only noise varies) weigh no more than the rest.
  double floor = 0;
  if (floor_spread) {
    std::vector<double> sorted = sds;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
    floor = sorted[sorted.size() / 2];
  }
  const size_t K = sds.size(), N = static_cast<size_t>(n);
  for (size_t j = 0; j < K; ++j) {
    const double s = std::max(sds[j], floor);
    for (size_t i = 0; i < N; ++i) z[j * N + i] /= s;
  }
  // The squared distances of a block of kI rows i to a block of kR rows r at once, in registers
  // (4 x 12 sums, 12 vectors of 4 doubles), each summed over the features in order, as a loop over
  // one pair at a time would. The rows r of a block are packed feature by feature (kR values a
  // feature, zero past the last row), so each block streams its features from one run of memory.
  constexpr size_t kI = 4, kV = 4, kRv = 3, kR = kV * kRv;
  typedef double Lanes __attribute__((vector_size(kV * sizeof(double))));
  const size_t blocks = (N + kR - 1) / kR;
  std::vector<double> packed(blocks * K * kR, 0.0);
  for (size_t b = 0; b < blocks; ++b)
    for (size_t j = 0; j < K; ++j)
      for (size_t l = 0; l < kR && b * kR + l < N; ++l) packed[(b * K + j) * kR + l] = z[j * N + b * kR + l];
  std::vector<double> rows_i(K * kI);
  std::vector<int64_t> near(N, -1);
  std::vector<double> best(N, std::numeric_limits<double>::infinity());
  for (size_t i0 = 0; i0 < N; i0 += kI) {
    const size_t m = std::min(kI, N - i0);
    for (size_t j = 0; j < K; ++j)
      for (size_t q = 0; q < kI; ++q) rows_i[j * kI + q] = q < m ? z[j * N + i0 + q] : 0.0;
    for (size_t b = 0; b < blocks; ++b) {
      Lanes acc[kI][kRv] = {};
      const double* pb = &packed[b * K * kR];
      const double* pa = rows_i.data();
      for (size_t j = 0; j < K; ++j, pb += kR, pa += kI) {
        Lanes c[kRv];
        std::memcpy(c, pb, sizeof c);
        for (size_t q = 0; q < kI; ++q) {
          const Lanes a = Lanes{} + pa[q];
          for (size_t v = 0; v < kRv; ++v) {
            const Lanes e = a - c[v];
            acc[q][v] += e * e;
          }
        }
      }
      for (size_t q = 0; q < m; ++q) {
        const size_t i = i0 + q;
        for (size_t v = 0; v < kRv; ++v)
          for (size_t l = 0; l < kV; ++l) {
            const size_t r = b * kR + v * kV + l;
            if (r >= N || r == i) continue;
            if (acc[q][v][l] < best[i]) {  // r in increasing order: the first on ties
              best[i] = acc[q][v][l];
              near[i] = static_cast<int64_t>(r);
            }
          }
      }
    }
  }
  return near;
}

}  // namespace gradsleuth::debug::data_detail
