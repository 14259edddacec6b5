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
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cpu/fast/blas.h"
#include "core/cpu/fast/transpose.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define GS_SGEMM_DIRECT 1
#include <immintrin.h>

#include "core/cpu/bf16_round.h"
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

// A 16-bit float as stored (sgemm.h's Elem): the kernel widens it as it reads it.
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};
inline float to_f32(float x) { return x; }
inline float to_f32(Bf16 x) {  // exact: a bfloat16 is a float32's upper 16 bits
  const uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline float to_f32(F16 x) {  // exact
#ifdef __F16C__
  return _cvtsh_ss(x.bits);
#else
  const uint32_t sign = static_cast<uint32_t>(x.bits & 0x8000u) << 16, e = (x.bits >> 10) & 0x1Fu, m = x.bits & 0x3FFu;
  float f;
  if (e == 0x1F) {  // inf or NaN: the payload kept, quietened (as F16C)
    const uint32_t u = sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0u);
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  f = e == 0 ? static_cast<float>(m) * 0x1p-24f : std::ldexp(static_cast<float>(m | 0x400u), static_cast<int>(e) - 25);
  return sign ? -f : f;
#endif
}

// A value of A in every lane of a vector. A bfloat16 with AVX-512 is broadcast from memory as
// 16 bits and shifted into the upper half of each lane: two vector instructions, where widening
// it in a general register first (load, shift, move to a vector, broadcast) took 8% longer in an
// MLP's forward product (64 x 256 x 784).
inline Vec splat_elem(const float* p) { return splat(*p); }
inline Vec splat_elem(const F16* p) { return splat(to_f32(*p)); }
inline Vec splat_elem(const Bf16* p) {
#if defined(__AVX512F__)
  short w;
  std::memcpy(&w, p, sizeof w);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_set1_epi16(w), 16));
#else
  return splat(to_f32(*p));
#endif
}

// A(i, k) = A[i * sai + k * sak]: either layout of A, read one element at a time; T is float,
// Bf16 or F16.
template <class T = float>
struct StridedA {
  const T* p;
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
  Elem round;  // Float32: C stored as summed; BFloat16/Float16: each value rounded through that format
  float* pack = nullptr;  // tile<..., Pack>: B's rows are also stored here, 2 vectors per k (the packed walk)
};

// Each lane rounded to the nearest bfloat16 or float16 and kept as a float32: the bits of
// narrowing and widening back (bfloat16 by core/cpu/bf16_round.h's formula, float16 by the CPU's
// conversion: round to nearest even, overflow to inf, subnormals kept), as
// core/cpu/reduced_float.cpp's round_through_row.
inline Vec round_through(Vec v, Elem e) {
#if defined(__AVX512F__)
  if (e == Elem::Float16) return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return _mm512_castsi512_ps(bf16_round_bits(_mm512_castps_si512(v)));
#else
  if (e == Elem::Float16) return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return _mm256_castsi256_ps(bf16_round_bits(_mm256_castps_si256(v)));
#endif
}

// The register tile: C[r][v * kW + lane] for r < R and NV vectors of columns, the last
// one holding `last` lanes (a full vector when last == kW).
//   acc = beta * C (0 when beta == 0, C unread), then acc += A(r, k) * B(k, :) for k < K.
// Where the tile reads B from (the packed walk's full tiles take the last two):
//   InPlace  B's rows where they are; the next panel's row k is prefetched as row k is read.
//   Panel    a packed panel, nothing to prefetch: it streams from L2 in order.
//   Packing  B's rows where they are, each one also stored into p.pack (k-major, 2 vectors a
//            row) for the tiles after it; B's rows kPackAhead ahead are prefetched.
// The packed walk's two unroll their k loop by 4: on an Intel core with two 512-bit FMA units
// its full tiles then ran 4% faster (at 512^3); the in-place variants, compiled for every tile
// height, width and type of A, are kept compact.
enum class BSource : uint8_t { InPlace, Panel, Packing };
constexpr int64_t kPackAhead = 32;
template <int R, int NV, bool Partial, bool UnitRows, class TA, BSource Src = BSource::InPlace>
void tile(int64_t K, StridedA<TA> a, const Panel& p, Mask last) {
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
  const TA* base[kBases];
  for (int q = 0; q < kBases; ++q) base[q] = a.p + 4 * q * (UnitRows ? 1 : a.si);
  const int64_t si = UnitRows ? 1 : a.si;
  const auto step = [&](int64_t k, const float* bk) __attribute__((always_inline)) {
    Vec b[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) b[v] = load(bk + v * kW);  // a partial panel's B is padded (gemm_rows)
    if constexpr (Src == BSource::Packing) {
      for (int v = 0; v < NV; ++v) store(p.pack + k * NV * kW + v * kW, b[v]);
      __builtin_prefetch(bk + kPackAhead * p.ldb, 0, 3);
      __builtin_prefetch(bk + kPackAhead * p.ldb + kW, 0, 3);
    } else if constexpr (Src == BSource::InPlace) {
      __builtin_prefetch(bk + p.ahead, 0, 3);  // the next column panel's row k
      __builtin_prefetch(bk + p.ahead + kW, 0, 3);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const Vec s = splat_elem(base[r / 4] + (r % 4) * si);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = fma(s, b[v], acc[r][v]);
    }
    for (int q = 0; q < kBases; ++q) base[q] += a.sk;
  };
  const float* bk = p.B;
  if constexpr (Src == BSource::InPlace) {
    for (int64_t k = 0; k < K; ++k, bk += p.ldb) step(k, bk);
  } else {
#pragma GCC unroll 4
    for (int64_t k = 0; k < K; ++k, bk += p.ldb) step(k, bk);
  }
  if (p.round != Elem::Float32) [[unlikely]]
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < NV; ++v) acc[r][v] = round_through(acc[r][v], p.round);
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      if (Partial && v == NV - 1)
        store(C + r * ldc + v * kW, acc[r][v], last);
      else
        store(C + r * ldc + v * kW, acc[r][v]);
    }
}

// A tile of R rows over one panel: the variant for its width and A's layout.
template <int R, bool UnitRows, class TA>
void tile_panel(int64_t K, StridedA<TA> a, const Panel& p) {
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
template <int R, class TA>
void tile_rows(int64_t m, int64_t K, StridedA<TA> a, const Panel& p) {
  if constexpr (R > 0) {
    if (m != R) return tile_rows<R - 1>(m, K, a, p);
    if (a.si == 1)
      tile_panel<R, true>(K, a, p);
    else
      tile_panel<R, false>(K, a, p);
  }
}

// Scratch for a transposed operand, C^T or the packed walk's panels of B (slots 0-2 for the
// callers' copies, 3 for the packed walk's, so a copy passed down as B is never overwritten). Up to kKeptScratch floats
// it is kept per thread (a training step multiplies the same shapes every time, so after the first step nothing is
// allocated); a larger one lives for one call, so a single large product does not leave megabytes behind in every
// thread that ran one.
constexpr size_t kKeptScratch = size_t{1} << 18;  // 1 MB
class Scratch {
 public:
  Scratch(int which, int64_t n) {
    thread_local std::vector<float> kept[4];
    const auto size = static_cast<size_t>(n);
    std::vector<float>& v = size <= kKeptScratch ? kept[which] : own_;
    if (v.size() < size + 16) v.resize(size + 16);
    // 64-byte aligned: a packed row of 2 vectors is then 2 cache lines, and no AVX-512 load of it
    // reads two.
    const auto at = reinterpret_cast<uintptr_t>(v.data());
    data_ = v.data() + ((64 - at % 64) % 64) / sizeof(float);
  }
  float* data() const { return data_; }

 private:
  std::vector<float> own_;
  float* data_ = nullptr;
};

// Which walk gemm_rows takes (sgemm.h's SgemmWalk): Auto's choice is made per product. The start
// value comes from GRADSLEUTH_SGEMM_WALK=auto|inplace|packed.
SgemmWalk walk_from_env() {
  const char* e = std::getenv("GRADSLEUTH_SGEMM_WALK");
  const std::string v = e ? e : "";
  if (v.empty() || v == "auto") return SgemmWalk::Auto;
  if (v == "inplace") return SgemmWalk::InPlace;
  if (v == "packed") return SgemmWalk::Packed;
  std::fprintf(stderr, "gradsleuth: GRADSLEUTH_SGEMM_WALK=%s is not auto, inplace or packed: using auto\n", e);
  return SgemmWalk::Auto;
}
std::atomic<SgemmWalk> g_walk{walk_from_env()};

// Rows of B into a panel 2 vectors wide: rows k < kb of n <= 2 kW floats (row stride ldb) to dst,
// each zero-padded to 2 kW.
void copy_panel(const float* B, int64_t ldb, int64_t n, int64_t kb, float* dst) {
  for (int64_t k = 0; k < kb; ++k) {
    float* row = dst + k * 2 * kW;
    std::copy(B + k * ldb, B + k * ldb + n, row);
    std::fill(row + n, row + 2 * kW, 0.0f);
  }
}

// The packed walk's blocks, from this CPU's caches (CpuIsa's sizes; 48 KB and 2 MB when the system
// does not say): k-blocks of up to half of L1 in one row tile of A (12 rows x 512 k's = 24 KB in a
// 48 KB L1), and column blocks of B whose packed k-block fills up to half of L2, as BLIS derives
// its kc and nc (Low et al., "Analytical Modeling Is Enough for High-Performance BLIS", 2016).
struct PackedCaches {
  int64_t l1 = int64_t{48} << 10, l2 = int64_t{2} << 20;
};
std::atomic<int64_t> g_packed_l1{0}, g_packed_l2{0};  // set_sgemm_packed_caches; 0: the CPU's
PackedCaches packed_caches() {
  const int64_t l1 = g_packed_l1.load(std::memory_order_relaxed), l2 = g_packed_l2.load(std::memory_order_relaxed);
  if (l1 > 0 && l2 > 0) return PackedCaches{l1, l2};
  const CpuIsa& cpu = cpu_isa();
  PackedCaches c;
  if (cpu.l1d > 0) c.l1 = cpu.l1d;
  if (cpu.l2 > 0) c.l2 = cpu.l2;
  return c;
}

// M rows as row tiles: `whole` tiles of kRows, then a tile of `rest` rows and one of `last`. A rest
// under 2/3 of a tile (4 rows of 256 = 21 x 12 + 4) is merged with the last whole tile and split in
// two (8 + 8): a 4-row tile has too few independent accumulators to hide the FMA latency, and ran at
// half speed.
struct RowTiles {
  int64_t whole, rest, last;
  // f(first row, rows) for each tile, in order.
  template <class F>
  void each(F&& f) const {
    int64_t i = 0;
    for (; i < whole * kRows; i += kRows) f(i, int64_t{kRows});
    if (rest > 0) f(i, rest);
    if (last > 0) f(i + rest, last);
  }
};
RowTiles row_tiles(int64_t M) {
  RowTiles t{M / kRows, M % kRows, 0};
  if (t.whole > 0 && t.rest > 0 && 3 * t.rest < 2 * kRows) {
    --t.whole;
    t.rest += kRows;
    t.last = t.rest / 2;
    t.rest -= t.last;
  }
  return t;
}

// The packed walk, for a float32 A: for each block of B's columns and each k-block, B's rows are
// copied into contiguous panels of 2 vectors (zero-padded, 64-byte aligned), and for each row tile
// A's rows into a k-major tile (A(r, k) at tile[k * kRows + r]); the tile then stays in L1 while
// B's panels stream past it from L2. The first row tile packs B as it goes: it reads B's rows where
// they lie, as the in-place walk does, and stores each row it loads into the panel, so the copy
// costs no pass of its own (a separate pass read B from L3 at the speed of its misses, 4% of 512^3).
// The same micro-kernel and the same chains in k order as the in-place walk (the same bits), with
// unit-stride reads: on an Intel core with two 512-bit FMA units, where the in-place walk's strided
// rows of A and B conflict in L1 (rows 2 KB apart share a few sets), this walk is faster alone from
// about 128 rows and 128 columns (docs/benchmarks.md).
void gemm_rows_packed(int64_t M, int64_t N, int64_t K, StridedA<float> A, const float* B, int64_t ldb, float beta,
                      float* C, int64_t ldc, Elem round, RowTiles tiles) {
  constexpr int64_t kPanel = 2 * kW;
  const PackedCaches caches = packed_caches();
  const int64_t kc_max = std::clamp<int64_t>(caches.l1 / (2 * kRows * 4) / 16 * 16, 128, 512);
  const int64_t kblocks = (K + kc_max - 1) / kc_max, step = (K + kblocks - 1) / kblocks;
  const int64_t nc_max = std::max<int64_t>(1, caches.l2 / (2 * step * 4) / kPanel) * kPanel;
  const int64_t nc_cap = std::min(nc_max, (N + kPanel - 1) / kPanel * kPanel);
  const Scratch packed(3, step * nc_cap);
  thread_local std::vector<float> atile;
  if (atile.size() < static_cast<size_t>(step * kRows)) atile.resize(static_cast<size_t>(step * kRows));
  for (int64_t jc = 0; jc < N; jc += nc_max) {
    const int64_t nc = std::min(nc_max, N - jc), full = nc / kPanel, panels = (nc + kPanel - 1) / kPanel;
    for (int64_t k0 = 0; k0 < K; k0 += step) {
      const int64_t kb = std::min(step, K - k0);
      // The panels the first row tile does not pack: a last one narrower than 2 vectors (copied
      // zero-padded), or all of them when M has no whole tile.
      for (int64_t q = tiles.whole > 0 ? full : 0; q < panels; ++q) {
        const int64_t j = jc + q * kPanel;
        copy_panel(B + k0 * ldb + j, ldb, std::min(kPanel, N - j), kb, packed.data() + q * kb * kPanel);
      }
      const auto rows = [&](int64_t i, int64_t m) {
        float* t = atile.data();
        const float* src = A.p + i * A.si + k0 * A.sk;
        if (A.si == 1) {  // column-major A: m consecutive values per k
          for (int64_t k = 0; k < kb; ++k) std::copy(src + k * A.sk, src + k * A.sk + m, t + k * kRows);
        } else {  // row-major A: transposed by 8 x 8 blocks in registers
          transpose(src, A.si, t, kRows, m, kb);
        }
        const StridedA<float> tile_a{t, 1, kRows};
        for (int64_t q = 0; q < panels; ++q) {
          const int64_t j = jc + q * kPanel;
          float* const panel = packed.data() + q * kb * kPanel;
          // Later k-blocks resume from the partial C (beta 1); only the last one rounds.
          Panel p{panel,
                  kPanel,
                  C + i * ldc + j,
                  ldc,
                  k0 == 0 ? beta : 1.0f,
                  std::min(kPanel, N - j),
                  q + 1 < panels ? kb * kPanel : 0,
                  k0 + kb == K ? round : Elem::Float32};
          if (i == 0 && q < full && m == kRows) {  // the first row tile packs B's full panels
            p.pack = panel;
            p.B = B + k0 * ldb + j;
            p.ldb = ldb;
            tile<kRows, 2, false, true, float, BSource::Packing>(kb, tile_a, p, Mask(kW));
          } else if (q < full && m == kRows) {
            tile<kRows, 2, false, true, float, BSource::Panel>(kb, tile_a, p, Mask(kW));
          } else {
            tile_rows<kRows>(m, kb, tile_a, p);
          }
        }
      };
      tiles.each(rows);
    }
  }
}

// C (M, N) = A (M, K) @ B (K, N) + beta * C with B row-major (row stride ldb), K >= 1.
template <class TA>
void gemm_rows(int64_t M, int64_t N, int64_t K, StridedA<TA> A, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc, Elem round = Elem::Float32) {
  const RowTiles tiles = row_tiles(M);
  // Blocks of equal length (784 = 4 x 196, not 3 x 256 + 16): a short last block would
  // pay a whole pass of tile loads and stores for a few k's.
  const int64_t blocks = (K + kKBlock - 1) / kKBlock, step = (K + blocks - 1) / blocks;
  if constexpr (std::is_same_v<TA, float>)
    if (sgemm_walk_for(M, N, K) == SgemmWalk::Packed)
      return gemm_rows_packed(M, N, K, A, B, ldb, beta, C, ldc, round, tiles);
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
        copy_panel(Bp, ldb, n, kb, padded.data());
        Bp = padded.data();
        ldp = 2 * kW;
      }
      // Later k-blocks resume from the partial C (beta 1).
      // Only the last k-block stores final values, so only it rounds them.
      const Panel p{Bp, ldp, C + j, ldc, k0 == 0 ? beta : 1.0f, n, j + n < N ? n : 0,
                    k0 + kb == K ? round : Elem::Float32};
      const auto rows = [&](int64_t i, int64_t m) {
        const Panel pi{p.B, p.ldb, p.C + i * ldc, p.ldc, p.beta, p.n, p.ahead, p.round};
        tile_rows<kRows>(m, kb, StridedA<TA>{A.p + i * A.si + k0 * A.sk, A.si, A.sk}, pi);
      };
      tiles.each(rows);
    }
  }
}

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
  const StridedA<> a_rows = a_col ? StridedA<>{A, 1, lda} : StridedA<>{A, lda, 1};
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
  gemm_rows(N, M, K, StridedA<>{B, ldb, 1}, a_col ? A : At.data(), a_col ? lda : M, beta, Ct.data(), M);
  transpose(Ct.data(), M, C, ldc, N, M);
  return true;
}

namespace {

// dst[i * ld + j] = src[i * ls + j] as float32, for i < rows, j < cols.
template <class T>
void widen_rows(const T* src, int64_t ls, float* dst, int64_t ld, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* s = src + i * ls;
    float* d = dst + i * ld;
    int64_t j = 0;
    if constexpr (std::is_same_v<T, Bf16>) {
#if defined(__AVX512F__)
      for (; j + 16 <= cols; j += 16) {
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + j)));
        _mm512_storeu_ps(d + j, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
      }
#endif
      for (; j + 8 <= cols; j += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + j)));
        _mm256_storeu_ps(d + j, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
      }
    } else if constexpr (std::is_same_v<T, F16>) {
#if defined(__F16C__)
#if defined(__AVX512F__)
      for (; j + 16 <= cols; j += 16)
        _mm512_storeu_ps(d + j, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + j))));
#endif
      for (; j + 8 <= cols; j += 8)
        _mm256_storeu_ps(d + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + j))));
#endif
    }
    for (; j < cols; ++j) d[j] = to_f32(s[j]);
  }
}

// dst[j * ld + i] = src[i * ls + j] as float32, for i < rows, j < cols: 8 x 8 blocks widened
// by rows, then transposed in registers.
template <class T>
void transpose_widen(const T* src, int64_t ls, float* dst, int64_t ld, int64_t rows, int64_t cols) {
  const int64_t r8 = rows - rows % 8, c8 = cols - cols % 8;
  alignas(32) float buf[64];
  for (int64_t i = 0; i < r8; i += 8)
    for (int64_t j = 0; j < c8; j += 8) {
      widen_rows(src + i * ls + j, ls, buf, 8, 8, 8);
      transpose8x8(buf, 8, dst + j * ld + i, ld);
    }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = (i < r8 ? c8 : 0); j < cols; ++j) dst[j * ld + i] = to_f32(src[i * ls + j]);
}

// The broadcast operand of a product N columns wide is read once per column panel (2 vectors):
// widened in the micro-kernel up to this many panels (each read converts one value), into
// scratch beyond (one conversion per value). A float16 value takes three vector instructions
// to widen and broadcast (against a shift for a bfloat16 one): on Zen 5 the 64 x 256 x 784
// product took 1.3x its float32 time that way, so float16 is always widened into scratch. On an
// Intel core a 512-bit broadcast of 16 bits and the shift run on the two ports that also take the
// FMAs (two more vector instructions per 2 FMAs), so bfloat16 is widened into scratch there too:
// the MLP's bfloat16 training step at batch 64 (whose forward product is 256 x 64 x 784 in the
// C^T form, 2 panels) took 0.91x its time on an Intel Xeon (family 6, model 207).
template <class TA>
int64_t convert_in_kernel_panels() {
  if constexpr (std::is_same_v<TA, Bf16>) {
    static const bool intel = cpu_isa().intel;
    return intel ? 0 : 2;
  }
  return 0;
}

// C (M, N) = A (M, K; a StridedA) @ B (K, N; row-major, float32), beta = 0: a 16-bit A is
// widened in the micro-kernel when N is narrow, else first into scratch (kept slot 2).
template <class TA>
void gemm_rows_16(int64_t M, int64_t N, int64_t K, StridedA<TA> A, const float* B, int64_t ldb, float* C, int64_t ldc,
                  Elem round) {
  if (std::is_same_v<TA, float> || N <= convert_in_kernel_panels<TA>() * 2 * kW)
    return gemm_rows(M, N, K, A, B, ldb, 0.0f, C, ldc, round);
  // Widened row-major either way: the micro-kernel reads a row-major A faster (sgemm_direct's
  // 256 x 784 x 64 on Zen 4: 252 us row-major, 259 column-major), and the transposing copy costs
  // about what a straight one does.
  const Scratch Aw(2, M * K);
  if (A.sk == 1)
    widen_rows(A.p, A.si, Aw.data(), K, M, K);
  else
    transpose_widen(A.p, A.sk, Aw.data(), K, K, M);  // A(i, k) at p[k * sk + i]  ->  Aw[i * K + k]
  const StridedA<> a{Aw.data(), K, 1};
  gemm_rows(M, N, K, a, B, ldb, 0.0f, C, ldc, round);
}

#if defined(__AVX512BF16__)
// bfloat16 products on the CPU's dot-product instruction (AVX-512 BF16's vdpbf16ps), where both
// operands are bfloat16 with k contiguous in each (A row-major, B column-major: a Linear's forward,
// x @ W^T). One instruction multiplies pairs of k's: lane j of the accumulator takes
// src1.bf16[2j+1] * src2.bf16[2j+1] first and src1.bf16[2j] * src2.bf16[2j] second, each step
// rounded to nearest even (Intel's definition of the instruction; checked on the CPU once, below).
// A product of two bfloat16 values is exact in float32, so each step is the FMA of the float32
// kernel. Both operands are copied with k in the upper half of each pair (A row by row, B packed in
// panels; gemm_dot), so each lane's chain runs in k order: the
// same bits as the FMA chains of gemm_rows on widened copies, at half the instructions.
// The instruction treats subnormal inputs and results as zero. It is taken only where that cannot
// change a value: every nonzero operand normal with exponents that keep every partial sum a
// multiple of 2^-126 or coarser (so a nonzero one is normal), no infinity or NaN, and magnitudes
// whose sums cannot overflow. Other products (a few tiny, huge or non-finite values) take the
// FMA path.

// The biased exponent fields of the nonzero values of a bfloat16 matrix: lo the smallest (0 for a
// subnormal), hi the largest (255 for an infinity or NaN).
struct ExpRange {
  int lo = 255, hi = 0;
};
// Accumulates an ExpRange over vectors of 32 bfloat16 values (zero lanes are left out).
class ExpScan {
 public:
  void add(__m512i v) {
    const __m512i mag = _mm512_and_si512(v, _mm512_set1_epi16(0x7FFF)), field = _mm512_srli_epi16(mag, 7);
    lo_ = _mm512_mask_min_epu16(lo_, _mm512_test_epi16_mask(mag, mag), lo_, field);
    hi_ = _mm512_max_epu16(hi_, field);
  }
  ExpRange range() const {
    alignas(64) uint16_t l[32], h[32];
    _mm512_store_si512(l, lo_);
    _mm512_store_si512(h, hi_);
    ExpRange r;
    for (int j = 0; j < 32; ++j) r.lo = std::min<int>(r.lo, l[j]), r.hi = std::max<int>(r.hi, h[j]);
    return r;
  }

 private:
  __m512i lo_ = _mm512_set1_epi16(255), hi_ = _mm512_setzero_si512();
};

ExpRange exponent_range(const Bf16* p, int64_t ld, int64_t rows, int64_t cols) {
  ExpScan scan;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; j += 32) {
      const int64_t n = std::min<int64_t>(32, cols - j);
      const __mmask32 in = n == 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << n) - 1);
      scan.add(_mm512_maskz_loadu_epi16(in, p + i * ld + j));
    }
  return scan.range();
}

// Whether vdpbf16ps on the operands' exponent ranges gives the FMA chains' bits (see above): no
// subnormal operand (the instruction reads it as 0, whatever it multiplies); the finest granularity of a product,
// 2^(lo_a + lo_b - 254 - 14), at least 2^-126; every value finite; K products of the largest magnitudes, 2^(hi_a + hi_b
// - 252) each, summing to at most 2^127.
bool dot_exact_for(ExpRange a, ExpRange b, int64_t K) {
  if (a.lo == 0 || b.lo == 0 || a.hi >= 255 || b.hi >= 255) return false;  // a subnormal, an infinity or NaN
  if (a.lo + b.lo < 142) return false;
  int log2k = 0;
  while ((int64_t{1} << log2k) < K) ++log2k;
  return a.hi + b.hi + log2k <= 379;
}

// The instruction's order and rounding on this CPU, checked once against the FMA chain on
// operands drawn across the exponents the product takes (a CPU that differed would keep the FMA path).
bool dot_matches_fma() {
  uint32_t s = 12345;
  const auto next = [&s] { return s = s * 1664525u + 1013904223u; };
  for (int t = 0; t < 256; ++t) {
    alignas(64) uint16_t a[32], b[32];
    alignas(64) float c[16], got[16];
    for (int i = 0; i < 32; ++i) {
      a[i] =
          static_cast<uint16_t>((next() >> 31 ? 0x8000u : 0u) | ((100 + (next() >> 8) % 50) << 7) | (next() & 0x7Fu));
      b[i] =
          static_cast<uint16_t>((next() >> 31 ? 0x8000u : 0u) | ((100 + (next() >> 8) % 50) << 7) | (next() & 0x7Fu));
    }
    for (float& x : c) {
      const uint32_t u = (next() >> 31 ? 0x80000000u : 0u) | ((90 + (next() >> 8) % 60) << 23) | (next() & 0x7FFFFFu);
      std::memcpy(&x, &u, sizeof x);
    }
    const __m512 r = _mm512_dpbf16_ps(_mm512_load_ps(c), reinterpret_cast<__m512bh>(_mm512_load_si512(a)),
                                      reinterpret_cast<__m512bh>(_mm512_load_si512(b)));
    _mm512_store_ps(got, r);
    for (int j = 0; j < 16; ++j) {
      const float want = std::fma(to_f32(Bf16{a[2 * j]}), to_f32(Bf16{b[2 * j]}),
                                  std::fma(to_f32(Bf16{a[2 * j + 1]}), to_f32(Bf16{b[2 * j + 1]}), c[j]));
      if (std::memcmp(&want, &got[j], sizeof want) != 0) return false;
    }
  }
  return true;
}

// dot_matches_fma, run once.
bool dot_order_ok() {
  static const bool ok = dot_matches_fma();
  return ok;
}

std::atomic<bool> g_bf16_dot{true};
std::atomic<uint64_t> g_bf16_dot_products{0};

// A bfloat16 pair with k in the upper half: the word of (x(2p), x(2p + 1)) as stored, rotated.
inline uint32_t swapped_pair(const Bf16* x) {
  uint32_t w;
  std::memcpy(&w, x, sizeof w);
  return w << 16 | w >> 16;
}

// P (m rows, k contiguous, row stride lp) for the dot tiles' broadcasts: row r's pairs with k in the
// upper half, then, where K is odd, P(r, K - 1) << 16 (its float32 value, for the last k's FMA);
// `rows` words a row. Returns P's exponent range, read in the same pass.
ExpRange prepare_dot_rows(const Bf16* P, int64_t lp, int64_t m, int64_t K, uint32_t* dst) {
  const int64_t rows = K / 2 + (K % 2), whole = K / 32;  // whole: chunks of 16 whole pairs
  ExpScan scan;
  const auto chunk = [&scan](__m512i v) {
    scan.add(v);
    return _mm512_rol_epi32(v, 16);
  };
  for (int64_t r = 0; r < m; ++r) {
    const Bf16* src = P + r * lp;
    uint32_t* out = dst + r * rows;
    for (int64_t c = 0; c < whole; ++c) _mm512_storeu_si512(out + 16 * c, chunk(_mm512_loadu_si512(src + 32 * c)));
    if (const int64_t nh = K - 32 * whole; nh > 0) {
      // A lone last value (odd K) is in the low half of its word: the rotation puts it in the upper one.
      const __m512i v = _mm512_maskz_loadu_epi16(static_cast<__mmask32>((uint64_t{1} << nh) - 1), src + 32 * whole);
      _mm512_mask_storeu_epi32(out + 16 * whole, static_cast<__mmask16>((1u << ((nh + 1) / 2)) - 1u), chunk(v));
    }
  }
  return scan.range();
}

// Q (n rows, k contiguous, row stride lq) packed for the dot tiles: per panel of 32 rows of Q (the
// product's columns, zero-padded), for each pair p of k's, 32 words of Q(n, 2p..2p+1) with k in the
// upper half, then, where K is odd, one row of Q(n, K - 1) << 16: its float32 values, for the last
// k's FMA. Blocks of 8 rows x 8 pairs are transposed in registers (an even row stride; else word by word).
void pack_dot(const Bf16* Q, int64_t lq, int64_t n, int64_t K, uint32_t* dst) {
  const int64_t pairs = K / 2, rows = pairs + (K % 2);
  for (int64_t j0 = 0; j0 < n; j0 += 32) {
    uint32_t* panel = dst + (j0 / 32) * rows * 32;
    const int64_t w = std::min<int64_t>(32, n - j0), w8 = lq % 2 == 0 ? w - w % 8 : 0, p8 = pairs - pairs % 8;
    for (int64_t j = 0; j < w8; j += 8)
      for (int64_t p = 0; p < p8; p += 8)
        transpose8x8(reinterpret_cast<const float*>(Q + (j0 + j) * lq + 2 * p), lq / 2,
                     reinterpret_cast<float*>(panel + p * 32 + j), 32);
    for (int64_t p = 0; p < rows; ++p) {
      uint32_t* out = panel + p * 32;
      for (int64_t j = (p < p8 ? w8 : 0); j < w; ++j) {
        const Bf16* q = Q + (j0 + j) * lq + 2 * p;
        out[j] = p < pairs ? swapped_pair(q) : static_cast<uint32_t>(q->bits) << 16;
      }
      if (p < p8)  // the transposed blocks: rotate their words
        for (int64_t j = 0; j < w8; j += 16) {
          const __mmask16 k = static_cast<__mmask16>((1u << std::min<int64_t>(16, w8 - j)) - 1u);
          _mm512_mask_storeu_epi32(out + j, k, _mm512_rol_epi32(_mm512_maskz_loadu_epi32(k, out + j), 16));
        }
      std::fill(out + w, out + 32, 0u);
    }
  }
}

// One row tile of the dot product: C(r, :) for r < R over one panel of 2 vectors (Q's packed panel is
// zero-padded to that width; only the first n columns are stored), pairs [p0, p0 + np) of k's,
// resuming from C when `resume`, with the last k's FMA (`tail`) and the rounding of the final values
// (`round`) on the last k-block. P holds the rows as prepare_dot_rows leaves them (lp words a row).
// One variant per tile height: a narrower last panel computes its padded lanes rather than
// compiling four widths of each (the padded lanes cost only on that panel).
template <int R>
void dot_tile(int64_t p0, int64_t np, bool tail, const uint32_t* P, int64_t lp, const uint32_t* panel, float* C,
              int64_t ldc, bool resume, Elem round, int64_t n) {
  const Mask m0(static_cast<int>(std::min<int64_t>(n, kW))), m1(static_cast<int>(std::max<int64_t>(n - kW, 0)));
  const bool full = n == 2 * kW;
  Vec acc[R][2];
  for (int r = 0; r < R; ++r) {
    if (!resume)
      acc[r][0] = acc[r][1] = zero();
    else if (full)
      acc[r][0] = load(C + r * ldc), acc[r][1] = load(C + r * ldc + kW);
    else
      acc[r][0] = load(C + r * ldc, m0), acc[r][1] = load(C + r * ldc + kW, m1);
  }
  constexpr int kBases = (R + 3) / 4;
  const uint32_t* base[kBases];
  for (int q = 0; q < kBases; ++q) base[q] = P + 4 * q * lp + p0;
  const uint32_t* bp = panel + p0 * 32;
  for (int64_t p = 0; p < np; ++p, bp += 32) {
    const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_load_si512(bp)),
                   b1 = reinterpret_cast<__m512bh>(_mm512_load_si512(bp + kW));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512bh s = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(base[r / 4][(r % 4) * lp])));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], s, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], s, b1);
    }
    for (int q = 0; q < kBases; ++q) ++base[q];
  }
  if (tail) {  // the last k of an odd K: bp's row and P's last word are float32 values
    const Vec b0 = _mm512_load_ps(reinterpret_cast<const float*>(bp)),
              b1 = _mm512_load_ps(reinterpret_cast<const float*>(bp) + kW);
    for (int r = 0; r < R; ++r) {
      float a;
      std::memcpy(&a, base[r / 4] + (r % 4) * lp, sizeof a);
      acc[r][0] = fma(splat(a), b0, acc[r][0]);
      acc[r][1] = fma(splat(a), b1, acc[r][1]);
    }
  }
  if (round != Elem::Float32) [[unlikely]]
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < 2; ++v) acc[r][v] = round_through(acc[r][v], round);
  for (int r = 0; r < R; ++r) {
    if (full) {
      store(C + r * ldc, acc[r][0]);
      store(C + r * ldc + kW, acc[r][1]);
    } else {
      store(C + r * ldc, acc[r][0], m0);
      if (n > kW) store(C + r * ldc + kW, acc[r][1], m1);
    }
  }
}

template <int R>
void dot_rows(int64_t m, int64_t n, int64_t p0, int64_t np, bool tail, const uint32_t* P, int64_t lp,
              const uint32_t* panel, float* C, int64_t ldc, bool resume, Elem round) {
  if constexpr (R > 0) {
    if (m != R) return dot_rows<R - 1>(m, n, p0, np, tail, P, lp, panel, C, ldc, resume, round);
    dot_tile<R>(p0, np, tail, P, lp, panel, C, ldc, resume, round, n);
  }
}

// Out (m x n, row stride ldo) = P (m x K) Q (n x K)^T, k contiguous in both, on the dot tiles where
// the instruction gives the FMA path's bits (dot_exact_for; false, touching nothing, otherwise): the
// loop nest of gemm_rows (k-blocks of 256, column panels of 2 vectors, row tiles of 12, the last
// tiles split evenly). Both operands are copied with their pairs' halves swapped (P row by row, Q
// packed in panels); the copies cost a pass over each, where rotating P's pairs in the tiles took
// one instruction per broadcast on the vector ports the dot products need (the tiles ran at 57% of
// the instruction's peak that way on Zen 5, against ~85% with the copy).
bool gemm_dot(int64_t m, int64_t n, int64_t K, const Bf16* P, int64_t lp, const Bf16* Q, int64_t lq, float* out,
              int64_t ldo, Elem round) {
  const int64_t pairs = K / 2, rows = pairs + (K % 2), panels = (n + 2 * kW - 1) / (2 * kW);
  const Scratch prows(3, m * rows);
  uint32_t* const pw = reinterpret_cast<uint32_t*>(prows.data());
  const ExpRange pe = prepare_dot_rows(P, lp, m, K, pw);
  if (!dot_exact_for(pe, exponent_range(Q, lq, n, K), K)) return false;
  const Scratch pack(2, panels * rows * 32);
  uint32_t* const packed = reinterpret_cast<uint32_t*>(pack.data());
  pack_dot(Q, lq, n, K, packed);
  const RowTiles tiles = row_tiles(m);
  const int64_t blocks = (pairs + kKBlock / 2 - 1) / (kKBlock / 2), step = (pairs + blocks - 1) / blocks;
  for (int64_t p0 = 0; p0 < pairs; p0 += step) {
    const int64_t np = std::min(step, pairs - p0);
    const bool final_block = p0 + np == pairs, tail = final_block && K % 2 != 0;
    for (int64_t j = 0; j < n; j += 2 * kW) {
      const uint32_t* panel = packed + (j / (2 * kW)) * rows * 32;
      const int64_t w = std::min<int64_t>(2 * kW, n - j);
      const auto tile_rows_at = [&](int64_t i, int64_t mr) {
        dot_rows<kRows>(mr, w, p0, np, tail, pw + i * rows, rows, panel, out + i * ldo + j, ldo, p0 > 0,
                        final_block ? round : Elem::Float32);
      };
      tiles.each(tile_rows_at);
    }
  }
  return true;
}

// C (M x N) = A (M x K, row-major) @ B (K x N, column-major), both bfloat16, on the dot tiles where
// the instruction gives the FMA path's bits (dot_exact_for); false, touching nothing, otherwise.
// The operand with more rows is read where it is, the other packed; when that is B, the tiles
// compute C^T into scratch, transposed into C.
bool gemm_bf16_dot(int64_t M, int64_t N, int64_t K, const Bf16* A, int64_t lda, const Bf16* B, int64_t ldb, float* C,
                   int64_t ldc, Elem round) {
  if (!dot_order_ok() || !g_bf16_dot.load(std::memory_order_relaxed) || K < 2) return false;
  if (M >= N) {
    if (!gemm_dot(M, N, K, A, lda, B, ldb, C, ldc, round)) return false;
  } else {
    const Scratch Ct(1, N * M);
    if (!gemm_dot(N, M, K, B, ldb, A, lda, Ct.data(), M, round)) return false;
    transpose(Ct.data(), M, C, ldc, N, M);
  }
  g_bf16_dot_products.fetch_add(1, std::memory_order_relaxed);
  return true;
}
#endif

// sgemm_direct with beta = 0 on operands of any of the three formats. The broadcast operand (A,
// or B in the C^T = B^T A^T form) is widened in the micro-kernel as it is read (gemm_rows_16);
// the row-major one is widened into scratch, in the copy that transposes it when one is needed
// anyway. The same products as sgemm_direct on widened copies: each C element is one FMA chain
// in k order.
template <class TA, class TB>
void mixed(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const TA* A, int64_t lda, const TB* B, int64_t ldb,
           float* C, int64_t ldc, Elem round) {
  constexpr bool a32 = std::is_same_v<TA, float>, b32 = std::is_same_v<TB, float>;
#if defined(__AVX512BF16__)
  if constexpr (std::is_same_v<TA, Bf16> && std::is_same_v<TB, Bf16>)
    if (!a_col && b_col && gemm_bf16_dot(M, N, K, A, lda, B, ldb, C, ldc, round)) return;
#endif
  const StridedA<TA> a_rows = a_col ? StridedA<TA>{A, 1, lda} : StridedA<TA>{A, lda, 1};
  if (!b_col) {
    if constexpr (b32) {
      gemm_rows_16(M, N, K, a_rows, B, ldb, C, ldc, round);
    } else {
      const Scratch Bw(0, K * N);
      widen_rows(B, ldb, Bw.data(), N, K, N);
      gemm_rows_16(M, N, K, a_rows, Bw.data(), N, C, ldc, round);
    }
    return;
  }
  // B column-major: as sgemm_direct, a row-major copy of B, or C^T = B^T A^T.
  const int64_t copy_b = K * N, copy_a = (a_col ? 0 : K * M) + M * N;
  if (copy_b <= copy_a) {
    const Scratch Bt(0, K * N);
    transpose_widen(B, ldb, Bt.data(), N, N, K);
    gemm_rows_16(M, N, K, a_rows, Bt.data(), N, C, ldc, round);
    return;
  }
  const Scratch At(0, a_col && a32 ? 0 : K * M);
  const float* at = At.data();
  if (!a_col) {
    transpose_widen(A, lda, At.data(), M, M, K);  // A(i, k) = A[i * lda + k]  ->  At[k * M + i]
  } else if constexpr (a32) {
    at = reinterpret_cast<const float*>(A);
  } else {
    widen_rows(A, lda, At.data(), M, K, M);
  }
  const Scratch Ct(1, N * M);
  gemm_rows_16(N, M, K, StridedA<TB>{B, ldb, 1}, at, (a_col && a32) ? lda : M, Ct.data(), M, round);
  transpose(Ct.data(), M, C, ldc, N, M);
}

template <class F>
void with_elem(Elem e, F&& f) {
  if (e == Elem::BFloat16)
    f(Bf16{});
  else if (e == Elem::Float16)
    f(F16{});
  else
    f(float{});
}

}  // namespace

bool sgemm_direct_mixed(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const void* A, Elem ea, int64_t lda,
                        const void* B, Elem eb, int64_t ldb, float* C, int64_t ldc, Elem round) {
  if (M <= 0 || N <= 0 || K <= 0) return false;
  with_elem(ea, [&](auto ta) {
    with_elem(eb, [&](auto tb) {
      using TA = decltype(ta);
      using TB = decltype(tb);
      mixed<TA, TB>(a_col, b_col, M, N, K, static_cast<const TA*>(A), lda, static_cast<const TB*>(B), ldb, C, ldc, round);
    });
  });
  return true;
}

#else

bool sgemm_direct_available() { return false; }
bool sgemm_direct_mixed(bool, bool, int64_t, int64_t, int64_t, const void*, Elem, int64_t, const void*, Elem, int64_t,
                        float*, int64_t, Elem) {
  return false;
}
bool sgemm_direct(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float, float*,
                  int64_t) {
  return false;
}

#endif

namespace {
std::atomic<bool> g_direct_enabled{true};
}  // namespace

#if GS_SGEMM_DIRECT && defined(__AVX512BF16__)
void set_sgemm_bf16_dot(bool on) { g_bf16_dot.store(on, std::memory_order_relaxed); }
bool sgemm_bf16_dot_available() { return dot_order_ok(); }
uint64_t sgemm_bf16_dot_products() { return g_bf16_dot_products.load(std::memory_order_relaxed); }
#else
void set_sgemm_bf16_dot(bool) {}
bool sgemm_bf16_dot_available() { return false; }
uint64_t sgemm_bf16_dot_products() { return 0; }
#endif

void set_sgemm_direct(bool on) { g_direct_enabled.store(on, std::memory_order_relaxed); }

#if GS_SGEMM_DIRECT
void set_sgemm_walk(SgemmWalk w) { g_walk.store(w, std::memory_order_relaxed); }
void set_sgemm_packed_caches(int64_t l1_bytes, int64_t l2_bytes) {
  g_packed_l1.store(l1_bytes, std::memory_order_relaxed);
  g_packed_l2.store(l2_bytes, std::memory_order_relaxed);
}

SgemmWalk sgemm_walk_for(int64_t M, int64_t N, int64_t K) {
  const SgemmWalk w = g_walk.load(std::memory_order_relaxed);
  if (w != SgemmWalk::Auto) return w;
#if defined(__AVX512F__)
  // Measured on an Intel Xeon with AVX-512 and AMX (two 512-bit FMA units, 48 KB L1d, 2 MB L2),
  // one thread: alone, a product with 128 rows and 128 columns or more ran 4-15% faster packed
  // (512^3: 12%); with fewer rows the copy of B's k-block, with fewer columns (2 panels) the copies
  // of A's tiles, did not pay (10-15% slower). But inside the MLP's training steps, whose products
  // are under 2^26 multiply-adds, the packed walk made the steps 3-7% slower (their operands come
  // cold from the ops before), so it is taken from 2^26 only. AMD Zen keeps the in-place walk,
  // which runs at 91% of Zen 5's FMA peak (docs/benchmarks.md).
  static const bool intel = cpu_isa().intel;
  const bool large =
      M >= 128 && N >= 128 && static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) >= 0x1p26;
  return intel && large ? SgemmWalk::Packed : SgemmWalk::InPlace;
#else
  (void)M;
  (void)N;
  (void)K;
  return SgemmWalk::InPlace;
#endif
}
#else
void set_sgemm_walk(SgemmWalk) {}
SgemmWalk sgemm_walk_for(int64_t, int64_t, int64_t) { return SgemmWalk::InPlace; }
void set_sgemm_packed_caches(int64_t, int64_t) {}
#endif
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
  // On Intel cores with two 512-bit FMA units, OpenBLAS's SkylakeX kernels win from 2^25
  // (measured on an Intel Xeon with AVX-512 and AMX: the MLP's batch-256 products, 256 x 256 x 784,
  // 10-12% faster on the BLAS, and its training step 10%; the CNN's 2^24.6 and the batch-64 MLP's
  // 2^23.6 products 4-23% faster on this kernel; docs/benchmarks.md).
  static const bool intel = cpu_isa().intel;
  const int64_t top = intel ? (int64_t{1} << 25) : (int64_t{1} << 27);
  return macs >= (int64_t{1} << 20) && macs <= top;
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
