// The packing-free float32 GEMM (see sgemm.h for what it is for and its contract).
//
// The loop nest, for C (M, N) += A (M, K) @ B (K, N) with B row-major:
//   for each block of kKBlock k's           (B's panel for one tile column: 32 KB with AVX-512)
//     for each panel of 2 vectors of columns (2 x 16 floats with AVX-512, 2 x 8 with AVX2)
//       for each tile of kRows rows         (12 with AVX-512, 6 with AVX2)
//         the micro-kernel: for k in the block, two vector loads of B's row k, and for
//         each of the tile's rows one broadcast of A(i, k) and two FMAs.
// The registers hold the whole tile: 24 of AVX-512's 32, or 12 of AVX2's 16, with 2 for
// B's row and 1 for the broadcast. The FMA units are the limit, not the loads: 14 loads
// per 24 FMAs (AVX-512). On Zen 5 it runs at 100-112 GFLOP/s with the operands in cache,
// against an FMA peak of 111 (bench_gemm's sgemm_direct cases).
//
// Nothing is packed when B is row-major (but a last column panel narrower than the tile, copied
// zero-padded so the loads need no mask). A BLAS copies the operands into panels first
// and zeroes C when beta = 0: in an MLP's training step (784-256-10, batch 64) OpenBLAS's
// packing and zeroing were 8% of the step. The cost of not packing is strided reads of A
// (one element per row per k), which the L1 cache absorbs as long as the tile's kRows
// rows of a k-block stay there.
//
// Rounding: each element's accumulator starts at beta * C (0 when beta = 0) and takes one
// FMA per k, in k order, in every path (the k-blocks resume from the partial C), so the
// result does not depend on the vector width, the blocking or the tile a row lands in.
#include "core/cpu/fast/sgemm.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "core/cpu/fast/transpose.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define GS_SGEMM_DIRECT 1
#include <immintrin.h>
#else
#define GS_SGEMM_DIRECT 0
#endif

namespace gradsleuth::cpu::fast {

#if GS_SGEMM_DIRECT
namespace {

#if defined(__AVX512F__)
using Vec = __m512;
constexpr int kW = 16;     // floats per vector
constexpr int kRows = 12;  // rows per register tile
struct Mask {              // the first n lanes
  __mmask16 m;
  explicit Mask(int n) : m(static_cast<__mmask16>((1u << n) - 1u)) {}
};
inline Vec load(const float* p) { return _mm512_loadu_ps(p); }
inline Vec load(const float* p, Mask k) { return _mm512_maskz_loadu_ps(k.m, p); }
inline void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline void store(float* p, Vec v, Mask k) { _mm512_mask_storeu_ps(p, k.m, v); }
inline Vec splat(float s) { return _mm512_set1_ps(s); }
inline Vec zero() { return _mm512_setzero_ps(); }
inline Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
#else
using Vec = __m256;
constexpr int kW = 8;
constexpr int kRows = 6;
struct Mask {
  __m256i m;
  explicit Mask(int n) : m(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))) {}
};
inline Vec load(const float* p) { return _mm256_loadu_ps(p); }
inline Vec load(const float* p, Mask k) { return _mm256_maskload_ps(p, k.m); }
inline void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline void store(float* p, Vec v, Mask k) { _mm256_maskstore_ps(p, k.m, v); }
inline Vec splat(float s) { return _mm256_set1_ps(s); }
inline Vec zero() { return _mm256_setzero_ps(); }
inline Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
#endif

// k's per block: B's panel for one column tile (kKBlock x 2 vectors) stays in L1 while
// every row tile of A passes over it (32 KB with AVX-512, 16 KB with AVX2).
constexpr int64_t kKBlock = 256;

// A(i, k) = A[i * sai + k * sak]: either layout of A, read one element at a time.
struct StridedA {
  const float* p;
  int64_t si, sk;
};

// One column panel of the product: n <= 2 kW columns of B (row stride ldb) and of C
// (row stride ldc), C's starting value scaled by beta, and `ahead`, the offset of the
// next panel in B's rows (0 on the last panel), prefetched while this one runs.
struct Panel {
  const float* B;
  int64_t ldb;
  float* C;
  int64_t ldc;
  float beta;
  int64_t n, ahead;
};

// The register tile: C[r][v * kW + lane] for r < R and NV vectors of columns, the last
// one holding `last` lanes (a full vector when last == kW).
//   acc = beta * C (0 when beta == 0, C unread), then acc += A(r, k) * B(k, :) for k < K.
template <int R, int NV, bool Partial, bool UnitRows>
void tile(int64_t K, StridedA a, const Panel& p, Mask last) {
  float* const C = p.C;
  const int64_t ldc = p.ldc;
  // C's lines are written (or read) only after the K loop: ask for them now, for
  // writing, so the misses overlap the FMAs (a cold 256 x 784 weight gradient took
  // 1.3x the BLAS's time without this).
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) __builtin_prefetch(C + r * ldc + v * kW, 1, 3);
  Vec acc[R][NV];
  const auto load_col = [&](const float* q, int v) { return (Partial && v == NV - 1) ? load(q, last) : load(q); };
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      if (p.beta == 0.0f)
        acc[r][v] = zero();
      else if (p.beta == 1.0f)
        acc[r][v] = load_col(C + r * ldc + v * kW, v);
      else
        acc[r][v] = mul(splat(p.beta), load_col(C + r * ldc + v * kW, v));
    }
  // Row r of A is read at base[r / 4] + (r % 4) * si: three offsets and one base per
  // four rows, so a strided A keeps its addresses in registers (with one offset per row,
  // GCC ran out of general registers and spilled them, 8% slower).
  constexpr int kBases = (R + 3) / 4;
  const float* base[kBases];
  for (int q = 0; q < kBases; ++q) base[q] = a.p + 4 * q * (UnitRows ? 1 : a.si);
  const int64_t si = UnitRows ? 1 : a.si;
  const float* bk = p.B;
  for (int64_t k = 0; k < K; ++k, bk += p.ldb) {
    Vec b[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) b[v] = load(bk + v * kW);  // a partial panel's B is padded (gemm_rows)
    __builtin_prefetch(bk + p.ahead, 0, 3);  // the next column panel's row k
    __builtin_prefetch(bk + p.ahead + kW, 0, 3);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const Vec s = splat(base[r / 4][(r % 4) * si]);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = fma(s, b[v], acc[r][v]);
    }
    for (int q = 0; q < kBases; ++q) base[q] += a.sk;
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      if (Partial && v == NV - 1)
        store(C + r * ldc + v * kW, acc[r][v], last);
      else
        store(C + r * ldc + v * kW, acc[r][v]);
    }
}

// A tile of R rows over one panel: the variant for its width and A's layout.
template <int R, bool UnitRows>
void tile_panel(int64_t K, StridedA a, const Panel& p) {
  const int n = static_cast<int>(p.n);
  if (n == 2 * kW)
    tile<R, 2, false, UnitRows>(K, a, p, Mask(kW));
  else if (n > kW)
    tile<R, 2, true, UnitRows>(K, a, p, Mask(n - kW));
  else if (n == kW)
    tile<R, 1, false, UnitRows>(K, a, p, Mask(kW));
  else
    tile<R, 1, true, UnitRows>(K, a, p, Mask(n));
}

// A tile of exactly m <= R rows (R, R - 1, ... are compiled).
template <int R>
void tile_rows(int64_t m, int64_t K, StridedA a, const Panel& p) {
  if constexpr (R > 0) {
    if (m != R) return tile_rows<R - 1>(m, K, a, p);
    if (a.si == 1)
      tile_panel<R, true>(K, a, p);
    else
      tile_panel<R, false>(K, a, p);
  }
}

// C (M, N) = A (M, K) @ B (K, N) + beta * C with B row-major (row stride ldb), K >= 1.
void gemm_rows(int64_t M, int64_t N, int64_t K, StridedA A, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  // Whole tiles, then the rest. A rest under 2/3 of a tile (4 rows of 256 = 21 x 12 + 4)
  // is merged with the last whole tile and split in two (8 + 8): a 4-row tile has too
  // few independent accumulators to hide the FMA latency, and ran at half speed.
  int64_t whole = M / kRows, rest = M % kRows, last = 0;
  if (whole > 0 && rest > 0 && 3 * rest < 2 * kRows) {
    --whole;
    rest += kRows;
    last = rest / 2;
    rest -= last;
  }
  // Blocks of equal length (784 = 4 x 196, not 3 x 256 + 16): a short last block would
  // pay a whole pass of tile loads and stores for a few k's.
  const int64_t blocks = (K + kKBlock - 1) / kKBlock, step = (K + blocks - 1) / blocks;
  // The last panel, when it ends in a partial vector, is copied into 2 vectors' width, zero-padded,
  // so that the micro-kernel loads B's rows without a mask: masked loads in the k loop made
  // such a panel 2-2.5x slower on Zen 5 (64 x 63 x 32, the Winograd tiles' product: 2.8 against
  // 1.6 us for 64 x 64 x 32). The padded lanes' sums are never stored.
  thread_local std::vector<float> padded;
  for (int64_t k0 = 0; k0 < K; k0 += step) {
    const int64_t kb = std::min(step, K - k0);
    for (int64_t j = 0; j < N; j += 2 * kW) {
      const int64_t n = std::min<int64_t>(2 * kW, N - j);
      const float* Bp = B + k0 * ldb + j;
      int64_t ldp = ldb;
      if (n % kW != 0) {  // a partial vector: the last panel, fewer than 2 vectors wide
        if (padded.size() < static_cast<size_t>(kb * 2 * kW)) padded.resize(static_cast<size_t>(kb * 2 * kW));
        for (int64_t k = 0; k < kb; ++k) {
          float* row = padded.data() + k * 2 * kW;
          std::copy(Bp + k * ldb, Bp + k * ldb + n, row);
          std::fill(row + n, row + 2 * kW, 0.0f);
        }
        Bp = padded.data();
        ldp = 2 * kW;
      }
      // Later k-blocks resume from the partial C (beta 1).
      const Panel p{Bp, ldp, C + j, ldc, k0 == 0 ? beta : 1.0f, n, j + n < N ? n : 0};
      const auto rows = [&](int64_t i, int64_t m) {
        const Panel pi{p.B, p.ldb, p.C + i * ldc, p.ldc, p.beta, p.n, p.ahead};
        tile_rows<kRows>(m, kb, {A.p + i * A.si + k0 * A.sk, A.si, A.sk}, pi);
      };
      int64_t i = 0;
      for (; i < whole * kRows; i += kRows) rows(i, kRows);
      if (rest > 0) rows(i, rest);
      if (last > 0) rows(i + rest, last);
    }
  }
}

// Scratch for a transposed operand or C^T. Up to kKeptScratch floats it is kept per
// thread (a training step multiplies the same shapes every time, so after the first
// step nothing is allocated); a larger one lives for one call, so a single large
// product does not leave megabytes behind in every thread that ran one.
constexpr size_t kKeptScratch = size_t{1} << 18;  // 1 MB
class Scratch {
 public:
  Scratch(int which, int64_t n) {
    thread_local std::vector<float> kept[2];
    const auto size = static_cast<size_t>(n);
    std::vector<float>& v = size <= kKeptScratch ? kept[which] : own_;
    if (v.size() < size) v.resize(size);
    data_ = v.data();
  }
  float* data() const { return data_; }

 private:
  std::vector<float> own_;
  float* data_ = nullptr;
};

}  // namespace

bool sgemm_direct_available() { return true; }

bool sgemm_direct(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                  int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return true;
  if (K <= 0) {  // C = beta * C, with C unread when beta = 0
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return true;
  }
  const StridedA a_rows = a_col ? StridedA{A, 1, lda} : StridedA{A, lda, 1};
  if (!b_col) {
    gemm_rows(M, N, K, a_rows, B, ldb, beta, C, ldc);
    return true;
  }
  // B column-major. Either make it row-major (a K x N copy), or compute C^T = B^T A^T,
  // whose B operand is A^T (row-major when A is column-major, else a K x M copy) and
  // whose result is transposed into C (an M x N copy, two when C must be read first).
  const int64_t copy_b = K * N, copy_a = (a_col ? 0 : K * M) + (beta == 0.0f ? 1 : 2) * M * N;
  if (copy_b <= copy_a) {
    const Scratch Bt(0, K * N);
    transpose(B, ldb, Bt.data(), N, N, K);  // B(k, n) = B[n * ldb + k]  ->  Bt[k * N + n]
    gemm_rows(M, N, K, a_rows, Bt.data(), N, beta, C, ldc);
    return true;
  }
  const Scratch At(0, a_col ? 0 : K * M);
  if (!a_col) transpose(A, lda, At.data(), M, M, K);  // A(i, k) = A[i * lda + k]  ->  At[k * M + i]
  const Scratch Ct(1, N * M);
  if (beta != 0.0f) transpose(C, ldc, Ct.data(), M, M, N);
  gemm_rows(N, M, K, StridedA{B, ldb, 1}, a_col ? A : At.data(), a_col ? lda : M, beta, Ct.data(), M);
  transpose(Ct.data(), M, C, ldc, N, M);
  return true;
}

#else

bool sgemm_direct_available() { return false; }
bool sgemm_direct(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float, float*,
                  int64_t) {
  return false;
}

#endif

namespace {
std::atomic<bool> g_direct_enabled{true};
}  // namespace

void set_sgemm_direct(bool on) { g_direct_enabled.store(on, std::memory_order_relaxed); }
bool sgemm_direct_enabled() { return g_direct_enabled.load(std::memory_order_relaxed); }

bool sgemm_direct_pays(bool, bool, int64_t M, int64_t N, int64_t K) {
#if GS_SGEMM_DIRECT && defined(__AVX512F__)
  // Every side at least 32: a narrower product wastes most of a 12 x 32 register tile
  // (an MLP's 10-class layer: 64 x 10 x 256 took 3.9x OpenBLAS's time).
  // At least 2^20 multiply-adds: below that, OpenBLAS's small-matrix kernels win
  // (64^3: 1.1x our time; Winograd's 64 x 63 x 32 products: 1.9x). At most 512^3: with
  // no blocking of M and N, a larger product streams B from L3 (1024^3: 1.25x).
  if (M < 32 || N < 32 || K < 32) return false;
  // With two sides >= 32 the third is <= 2^27 / 2^10 if the product qualifies: checking
  // that first keeps M * N * K from overflowing.
  if (M > (int64_t{1} << 17) || N > (int64_t{1} << 17) || K > (int64_t{1} << 17)) return false;
  const int64_t macs = M * N * K;
  return macs >= (int64_t{1} << 20) && macs <= (int64_t{1} << 27);
#else
  // AVX2 code: on Zen 5, built with -march=x86-64-v3, the kernel took 1.05-1.4x the time
  // of OpenBLAS's AVX2 kernel at these shapes, and it has not been measured on an
  // AVX2-only CPU, so the BLAS keeps every product.
  (void)M;
  (void)N;
  (void)K;
  return false;
#endif
}

}  // namespace gradsleuth::cpu::fast
