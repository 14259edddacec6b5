// workbench/matmul.cpp: C (M, N) = A (M, K) @ B (K, N), float32, row-major, on the CPU: eight
// versions from the textbook loop to the engine's kernel and the BLAS, each one step from the
// last. The steps follow van de Geijn's "How to optimize GEMM", Goto & van de Geijn's "Anatomy
// of High-Performance Matrix Multiplication" (2008) and the BLIS micro-kernel design.
// Key: M, N, K the sizes; i, j, k their indices; A(i, k) = A[i*K + k], B(k, j) = B[k*N + j].
// threads > 1: every version splits C's rows into `threads` contiguous blocks.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "core/cpu/fast/blas.h"
#include "core/cpu/fast/sgemm.h"
#include "core/cpu/fast/transpose.h"
#include "workbench/ladders.h"
#include "workbench/simd.h"

namespace gradsleuth::workbench::cpu {
namespace {

// v1: the definition. The inner loop walks B down a column: a new cache line for every k.
void v1_naive(const float* A, const float* B, float* C, int64_t i0, int64_t i1, int64_t N, int64_t K) {
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc += A[i * K + k] * B[k * N + j];
      C[i * N + j] = acc;
    }
}

// v2: the same products in i, k, j order: the inner loop reads B's row k and C's row i with
// unit stride, so every cache line is used whole and the compiler vectorises over j.
void v2_ikj(const float* A, const float* B, float* C, int64_t i0, int64_t i1, int64_t N, int64_t K) {
  for (int64_t i = i0; i < i1; ++i) {
    float* c = C + i * N;
    std::fill(c, c + N, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float a = A[i * K + k];
      const float* b = B + k * N;
      for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
    }
  }
}

// v3: v2 over blocks of kKc x kNc of B (32 KB: it stays in the L1 cache while every row of C
// uses it), instead of streaming all of B from L2 (or memory) for every row. It pays once B
// outgrows L2; while B fits there, v2 is already limited by its L1 loads and stores of C, which
// blocking does not reduce (v4 does).
constexpr int64_t kKc = 64, kNc = 128;
void v3_blocked(const float* A, const float* B, float* C, int64_t i0, int64_t i1, int64_t N, int64_t K) {
  for (int64_t i = i0; i < i1; ++i) std::fill(C + i * N, C + (i + 1) * N, 0.0f);
  for (int64_t j0 = 0; j0 < N; j0 += kNc) {
    const int64_t j1 = std::min(N, j0 + kNc);
    for (int64_t k0 = 0; k0 < K; k0 += kKc) {
      const int64_t k1 = std::min(K, k0 + kKc);
      const int64_t nb = j1 - j0;
      for (int64_t i = i0; i < i1; ++i) {
        float* c = C + i * N + j0;
        for (int64_t k = k0; k < k1; ++k) {
          const float a = A[i * K + k];
          const float* b = B + k * N + j0;
          for (int64_t j = 0; j < nb; ++j) c[j] += a * b[j];
        }
      }
    }
  }
}

// v4: v3 with a 4 x 32 tile of C held in local accumulators across the whole k-block: each
// loaded element of B serves 4 rows, and C is read and written once per block instead of
// once per k. Plain C++: the compiler maps the tile's rows onto vector registers.
constexpr int kTr = 4, kTc = 32;
void v4_register(const float* A, const float* B, float* C, int64_t i0, int64_t i1, int64_t N, int64_t K) {
  for (int64_t i = i0; i < i1; ++i) std::fill(C + i * N, C + (i + 1) * N, 0.0f);
  for (int64_t j0 = 0; j0 < N; j0 += kNc) {
    const int64_t j1 = std::min(N, j0 + kNc);
    for (int64_t k0 = 0; k0 < K; k0 += kKc) {
      const int64_t k1 = std::min(K, k0 + kKc);
      for (int64_t i = i0; i < i1; i += kTr) {
        const int64_t rows = std::min<int64_t>(kTr, i1 - i);
        for (int64_t j = j0; j < j1; j += kTc) {
          const int64_t cols = std::min<int64_t>(kTc, j1 - j);
          if (rows < kTr || cols < kTc) {  // an edge tile: the v3 loop
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t k = k0; k < k1; ++k) {
                const float a = A[(i + r) * K + k];
                for (int64_t c = 0; c < cols; ++c) C[(i + r) * N + j + c] += a * B[k * N + j + c];
              }
            continue;
          }
          float acc[kTr][kTc];
          for (int r = 0; r < kTr; ++r)
            for (int c = 0; c < kTc; ++c) acc[r][c] = C[(i + r) * N + j + c];
          for (int64_t k = k0; k < k1; ++k) {
            const float* b = B + k * N + j;
            for (int r = 0; r < kTr; ++r) {
              const float a = A[(i + r) * K + k];
              for (int c = 0; c < kTc; ++c) acc[r][c] += a * b[c];
            }
          }
          for (int r = 0; r < kTr; ++r)
            for (int c = 0; c < kTc; ++c) C[(i + r) * N + j + c] = acc[r][c];
        }
      }
    }
  }
}

#if GS_WB_SIMD
using namespace simd;
// The register tile of v5 and v6: kMr rows x 2 vectors of C (AVX-512: 12 x 32, 24 of the 32
// registers; AVX2: 6 x 16, 12 of 16), two loads of B and kMr broadcasts of A per k: the FMA
// units, not the loads, are the limit.
constexpr int kMr = kW == 16 ? 12 : 6;
constexpr int kNr = 2 * kW;

// C[0..R) x [0..kNr) (+)= A-panel x B-panel; a(r, k) = a[r * as + k * ak], b(k, c) = b[k * bs + c].
// ncols < kNr masks the columns; accumulate: start from C (else 0).
template <int R>
void micro(int64_t kc, const float* a, int64_t as, int64_t ak, const float* b, int64_t bs, float* c, int64_t cs,
           int ncols, bool accumulate) {
  V acc0[R], acc1[R];
  const Mask m0(std::min(ncols, kW)), m1(std::max(0, ncols - kW));
  for (int r = 0; r < R; ++r) {
    acc0[r] = accumulate ? load(c + r * cs, m0) : zero();
    acc1[r] = accumulate ? load(c + r * cs + kW, m1) : zero();
  }
  // Eight k's per loop trip: the loop's own counter and branch then take few of the issue slots
  // the FMAs share (on an Intel core with two 512-bit FMA units, 85% of its FMA peak from L1
  // with 8, 78% with 1).
#pragma GCC unroll 8
  for (int64_t k = 0; k < kc; ++k) {
    const V b0 = load(b + k * bs), b1 = load(b + k * bs + kW);
    for (int r = 0; r < R; ++r) {
      const V x = splat(a[r * as + k * ak]);
      acc0[r] = fma(x, b0, acc0[r]);
      acc1[r] = fma(x, b1, acc1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    store(c + r * cs, acc0[r], m0);
    store(c + r * cs + kW, acc1[r], m1);
  }
}
// micro<kMr>'s first use of a B panel: B's rows read where they lie (row stride bs), each one
// also stored into the panel (pack, kNr floats a row) for the row tiles after it, and B's rows
// 32 ahead asked for, since they come from L3 or memory. Full panels only (ncols = kNr).
void micro_packing(int64_t kc, const float* a, const float* b, int64_t bs, float* pack, float* c, int64_t cs,
                   bool accumulate) {
  V acc0[kMr], acc1[kMr];
  for (int r = 0; r < kMr; ++r) {
    acc0[r] = accumulate ? load(c + r * cs) : zero();
    acc1[r] = accumulate ? load(c + r * cs + kW) : zero();
  }
#pragma GCC unroll 8
  for (int64_t k = 0; k < kc; ++k) {
    __builtin_prefetch(b + (k + 32) * bs);
    __builtin_prefetch(b + (k + 32) * bs + kW);
    const V b0 = load(b + k * bs), b1 = load(b + k * bs + kW);
    store(pack + k * kNr, b0);
    store(pack + k * kNr + kW, b1);
    for (int r = 0; r < kMr; ++r) {
      const V x = splat(a[r + k * kMr]);
      acc0[r] = fma(x, b0, acc0[r]);
      acc1[r] = fma(x, b1, acc1[r]);
    }
  }
  for (int r = 0; r < kMr; ++r) {
    store(c + r * cs, acc0[r]);
    store(c + r * cs + kW, acc1[r]);
  }
}
template <int R = kMr>
void micro_rows(int rows, int64_t kc, const float* a, int64_t as, int64_t ak, const float* b, int64_t bs, float* c,
                int64_t cs, int ncols, bool accumulate) {
  if constexpr (R > 1) {
    if (rows < R) return micro_rows<R - 1>(rows, kc, a, as, ak, b, bs, c, cs, ncols, accumulate);
  }
  micro<R>(kc, a, as, ak, b, bs, c, cs, ncols, accumulate);
}

// v5: v4's idea written with explicit vector instructions: a kMr x 2-vector tile, broadcasts
// of A and FMAs, B read in place. Edge columns are masked, edge rows take a shorter tile.
constexpr int64_t kKc5 = 256;
void v5_simd(const float* A, const float* B, float* C, int64_t i0, int64_t i1, int64_t N, int64_t K) {
  if (K == 0) {
    for (int64_t i = i0; i < i1; ++i) std::fill(C + i * N, C + (i + 1) * N, 0.0f);
    return;
  }
  // The last partial panel of B's columns, padded with zeros to kNr (a masked load of B is
  // the other choice; a copy keeps the micro-kernel one loop).
  const int64_t jfull = N / kNr * kNr, tail = N - jfull;
  std::vector<float> btail(tail ? static_cast<size_t>(K * kNr) : 0, 0.0f);
  for (int64_t k = 0; k < K && tail; ++k) std::copy(B + k * N + jfull, B + k * N + N, btail.data() + k * kNr);
  for (int64_t k0 = 0; k0 < K; k0 += kKc5) {
    const int64_t kc = std::min(kKc5, K - k0);
    for (int64_t j = 0; j < N; j += kNr) {
      const bool last = j == jfull;
      const float* b = last ? btail.data() + k0 * kNr : B + k0 * N + j;
      const int64_t bs = last ? kNr : N;
      const int ncols = static_cast<int>(std::min<int64_t>(kNr, N - j));
      for (int64_t i = i0; i < i1; i += kMr)
        micro_rows(static_cast<int>(std::min<int64_t>(kMr, i1 - i)), kc, A + i * K + k0, K, 1, b, bs, C + i * N + j, N,
                   ncols, k0 > 0);
    }
  }
}

// v6: v5 plus packing (BLIS): a kc x nc block of B is copied once into kNr-wide panels, and each
// kMr-row micro-panel of A (kMr x kc) into k-major order just before it is used. The A micro-panel
// then stays in L1 while B's panels stream past it from L2: unit-stride reads, no TLB misses, at
// the cost of the copies. kc and nc come from this CPU's caches, as BLIS derives them analytically
// (Low et al., "Analytical Modeling Is Enough for High-Performance BLIS", 2016): the A micro-panel
// fills at most half of L1, the B block at most half of L2. The panels are 64-byte aligned, and
// the first row tile copies B's block as it multiplies it, so that copy overlaps the FMAs.
// 64-byte aligned floats, kept per thread and grown as needed (slot 0: B's panels, 1: A's
// micro-panel), as a BLAS keeps its packing buffers: a fresh megabyte per call cost its page faults
// in some runs and not in others. Aligned, a packed panel's rows start on cache lines, and each
// 64-byte load of B reads one line, not two (a std::vector's 16-byte alignment split every
// AVX-512 load).
float* packing_buffer(int slot, int64_t n) {
  struct Buffer {
    float* p = nullptr;
    int64_t n = 0;
    ~Buffer() { std::free(p); }
  };
  thread_local Buffer buffers[2];
  Buffer& b = buffers[slot];
  if (b.n < n) {
    std::free(b.p);
    b.p = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>((n * 4 + 63) / 64 * 64)));
    if (b.p == nullptr) throw std::bad_alloc();
    b.n = n;
  }
  return b.p;
}

void v6_packed(const float* A, const float* B, float* C, int64_t i0, int64_t i1, int64_t N, int64_t K) {
  if (K == 0) {
    for (int64_t i = i0; i < i1; ++i) std::fill(C + i * N, C + (i + 1) * N, 0.0f);
    return;
  }
  // This CPU's L1d and L2 (32 KiB and 1 MiB when the system does not say).
  const auto& cpu = gradsleuth::cpu::fast::cpu_isa();
  const int64_t l1 = cpu.l1d > 0 ? cpu.l1d : int64_t{32} << 10, l2 = cpu.l2 > 0 ? cpu.l2 : int64_t{1} << 20;
  // k-blocks of equal length up to kc_max (K = 600: 2 x 300, not 512 + 88).
  const int64_t kc_max = std::clamp<int64_t>(l1 / (2 * kMr * 4) / 16 * 16, 128, 512);
  const int64_t kblocks = (K + kc_max - 1) / kc_max, kcb = (K + kblocks - 1) / kblocks;
  const int64_t nc_max = std::max<int64_t>(kNr, l2 / (2 * kcb * 4) / kNr * kNr);
  const int64_t nc_cap = std::min(nc_max, (N + kNr - 1) / kNr * kNr);
  float* const bp = packing_buffer(0, kcb * nc_cap);
  float* const ap = packing_buffer(1, kcb * kMr);
  for (int64_t jc = 0; jc < N; jc += nc_max) {
    const int64_t nc = std::min(nc_max, N - jc);
    for (int64_t pc = 0; pc < K; pc += kcb) {
      const int64_t kc = std::min(kcb, K - pc);
      // B (kc, nc) -> panels of kNr columns: panel p, row k at bp[p * kc * kNr + k * kNr], zero-padded.
      // The first row tile packs the full panels as it multiplies them (micro_packing): the copy
      // then costs no pass of its own, whose reads of B from L3 or memory would wait on each miss.
      // Here only a last, narrower panel (or all of them, when the first tile is short).
      const bool first_packs = i1 - i0 >= kMr;
      const int64_t full = first_packs ? nc / kNr * kNr : 0;
      for (int64_t jr = full; jr < nc; jr += kNr) {
        float* dst = bp + jr * kc;
        const int64_t w = std::min<int64_t>(kNr, nc - jr);
        for (int64_t k = 0; k < kc; ++k) {
          const float* src = B + (pc + k) * N + jc + jr;
          std::copy(src, src + w, dst + k * kNr);
          std::fill(dst + k * kNr + w, dst + (k + 1) * kNr, 0.0f);
        }
      }
      for (int64_t i = i0; i < i1; i += kMr) {
        const int64_t h = std::min<int64_t>(kMr, i1 - i);
        // ap[k * kMr + r] = A(i + r, pc + k): the engine's 8 x 8 register transposes.
        gradsleuth::cpu::fast::transpose(A + i * K + pc, K, ap, kMr, h, kc);
        for (int64_t jr = 0; jr < nc; jr += kNr) {
          if (i == i0 && jr < full)
            micro_packing(kc, ap, B + pc * N + jc + jr, N, bp + jr * kc, C + i * N + jc + jr, N, pc > 0);
          else
            micro_rows(static_cast<int>(h), kc, ap, 1, kMr, bp + jr * kc, kNr, C + i * N + jc + jr, N,
                       static_cast<int>(std::min<int64_t>(kNr, nc - jr)), pc > 0);
        }
      }
    }
  }
}
#endif

using RowsFn = void (*)(const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t);
KernelFn rows_split(RowsFn f) {
  return [f](const float* const* in, float* out, const Shape& s, int threads) {
    parallel_for(threads, s.m, [&](int64_t i0, int64_t i1) { f(in[0], in[1], out, i0, i1, s.n, s.k); });
  };
}

}  // namespace

Ladder matmul_ladder() {
  Ladder l;
  l.spec.name = "matmul";
  l.spec.what = "C (M, N) = A (M, K) @ B (K, N), float32, row-major";
  l.spec.file = "workbench/matmul.cpp";
  l.spec.shape_help = "--size N: M = N = K = N";
  l.spec.compute_bound = true;
  l.spec.gpu_reference = "the FMA peak";
  l.spec.default_size = 512;
  const std::string simd_skip = simd::kHaveSimd ? "" : "this build has no AVX2 (-march=native or x86-64-v3 builds it)";
  l.rungs.push_back(
      {{1, "naive ijk", "the definition: a dot product per element; B is read down a column, one cache line per k"},
       rows_split(v1_naive),
       "",
       {}});
  l.rungs.push_back(
      {{2, "loop order ikj", "k outside j: B and C rows read with unit stride, whole cache lines, and vectorised"},
       rows_split(v2_ikj),
       "",
       {}});
  l.rungs.push_back({{3, "cache blocking",
                      "64 x 128 blocks of B (32 KB) reused from L1 by every row instead of all of B from L2 or memory"},
                     rows_split(v3_blocked),
                     "",
                     {}});
  l.rungs.push_back(
      {{4, "register tile",
        "a 4 x 32 tile of C in registers over a k-block: each B load serves 4 rows, C touched once per block"},
       rows_split(v4_register),
       "",
       {}});
#if GS_WB_SIMD
  l.rungs.push_back({{5, "SIMD micro-kernel",
                      std::string("explicit ") + simd::isa_name() + ": a " + std::to_string(kMr) +
                          " x 2-vector tile, broadcast A, 2 loads of B per " + std::to_string(2 * kMr) + " FMAs"},
                     rows_split(v5_simd),
                     "",
                     {}});
  l.rungs.push_back({{6, "packed (BLIS)",
                      "A and B blocks copied into the aligned panels the micro-kernel reads, blocked for this CPU's L1 "
                      "and L2 (B's by the first row tile as it multiplies): unit stride, no TLB misses"},
                     rows_split(v6_packed),
                     "",
                     {}});
#else
  l.rungs.push_back({{5, "SIMD micro-kernel", "explicit AVX2/AVX-512 register tile"}, {}, simd_skip, {}});
  l.rungs.push_back({{6, "packed (BLIS)", "A and B copied into micro-panels"}, {}, simd_skip, {}});
#endif
  // The engine's own kernels, through their headers.
  KernelFn engine = [](const float* const* in, float* out, const Shape& s, int threads) {
    parallel_for(threads, s.m, [&](int64_t i0, int64_t i1) {
      gradsleuth::cpu::fast::sgemm_direct(false, false, i1 - i0, s.n, s.k, in[0] + i0 * s.k, s.k, in[1], s.n, 0.0f,
                                          out + i0 * s.n, s.n);
    });
  };
  l.rungs.push_back({{7, "engine (packing-free)",
                      "core/cpu/fast/sgemm.h, the CPU backend's kernel: v5's tile over k-blocks sized to L1, no "
                      "packing (but on Intel cores from 2^26 multiply-adds: B's blocks, packed by the first row tile, "
                      "and A's tiles, blocked for L1 and L2), tuned edges"},
                     gradsleuth::cpu::fast::sgemm_direct_available() ? engine : KernelFn{},
                     gradsleuth::cpu::fast::sgemm_direct_available()
                         ? ""
                         : "core/cpu/fast/sgemm.h is not built in (it needs AVX2 + FMA)",
                     {}});
  KernelFn blas = [](const float* const* in, float* out, const Shape& s, int threads) {
    const bool direct = gradsleuth::cpu::fast::sgemm_direct_enabled();
    gradsleuth::cpu::fast::set_sgemm_direct(false);  // the BLAS itself, not the engine's routing
    parallel_for(threads, s.m, [&](int64_t i0, int64_t i1) {
      gradsleuth::cpu::fast::BlasSingleThread one;
      gradsleuth::cpu::fast::blas_gemm(false, false, i1 - i0, s.n, s.k, in[0] + i0 * s.k, s.k, in[1], s.n, 0.0f,
                                       out + i0 * s.n, s.n);
    });
    gradsleuth::cpu::fast::set_sgemm_direct(direct);
  };
  const std::string lib = gradsleuth::cpu::fast::gemm_library();
  const bool have_blas = lib != "Eigen";
  l.rungs.push_back(
      {{8, have_blas ? lib + " (reference)" : "BLAS (reference)",
        "the tuned BLAS the engine links (core/cpu/fast/blas.h), one thread per row block: the reference row"},
       have_blas ? blas : KernelFn{},
       have_blas
           ? ""
           : "this build has no BLAS (GRADSLEUTH_BLAS=OFF or OpenBLAS not found: apt-get install libopenblas-dev)",
       {}});
  return l;
}

}  // namespace gradsleuth::workbench::cpu
