// Winograd F(2x2, 3x3) convolution (winograd.h). Each 2x2 output tile of an output
// plane comes from the 4x4 input patch around it (padding 1) as
//   Y = A^T [ sum_c (G g_c G^T) ⊙ (B^T d_c B) ] A
// with (Lavin & Gray 2015)
//   B^T = [1  0 -1  0]     G = [ 1    0    0 ]     A^T = [1  1  1  0]
//         [0  1  1  0]         [1/2  1/2  1/2]           [0  1 -1 -1]
//         [0 -1  1  0]         [1/2 -1/2  1/2]
//         [0  1  0 -1]         [ 0    0    1 ]
// The sum over channels of the 16 elementwise products is 16 GEMMs
//   M[xi] (O x T) = U[xi] (O x C) @ V[xi] (C x T),   xi = 0..15,
// over T tiles: 16 * 2*O*C*T multiply-adds for what im2col + GEMM does in
// 9 * 4 * 2*O*C*T, i.e. 2.25x fewer, with the transforms (adds only) on top.
//
// Blocking and layouts: tiles are taken a "tile row" (one sample's tW tiles at one ty)
// at a time, as many rows per block as keep V (16*C*T floats) and M (16*O*T floats) in
// L2 between the input transform, the GEMMs and the output transform.
//  - Input: a rolling strip of four zero-padded input rows with channels innermost
//    (8x8 register transposes from NCHW) makes a tile's 16 inputs 16 contiguous
//    C-vectors, so B^T d B runs on whole vectors however few tiles a row has (7 at
//    14x14: too few to vectorise along tiles). Groups of 8 transformed tiles are
//    transposed again into V[xi][c][t], because OpenBLAS's small-matrix kernel (no
//    packing) takes the row-major (O, C) @ (C, T) product but not a transposed V:
//    ~100 GFLOP/s against ~77 at these sizes on Zen 5.
//  - Output: M[xi][o][t]; A^T M A runs along the block's tiles for one o and writes
//    each tile row's two output rows contiguously (bias added), copied into NCHW.
// Measured (bench/bench_conv.cpp, one thread, Zen 5): the GEMMs are ~60% of the time.
// The weight gradient (F(3x3, 2x2), at the end of this file) shares the input tiles.
//
// Numerics. B^T, A^T and G have entries 0, +-1, +-1/2, so no transform amplifies
// rounding by more than a small constant: every step is an add or an exact halving.
// The usual forward error analysis of a linear algorithm gives, per output,
//   |y_computed - y| <= gamma_k * S,   gamma_k = k u / (1 - k u),  u = 2^-24,
// where k = C + 8 bounds the depth of the longest chain of roundings (2 in B^T d B, one
// in U, one product, C-1 in the channel sum in any order, 4 in A^T M A, 1 for the bias) and
//   S = |A^T| [ sum_c (|G| |g_c| |G^T|) ⊙ (|B^T| |d_c| |B|) ] |A|
// is the same computation on absolute values. Each output's S involves only the inputs
// of its own 3x3 window (A^T's row for an output picks the three rows of B^T that read
// it), but G mixes the taps ((g0 + g1 + g2) / 2, ...): S is a small multiple of the sum
// over the window of |x| times the largest |w|, not of the direct product's sum of
// |x||w| tap by tap, so a large input read through a small weight costs that output
// accuracy the direct product keeps (tests/test_core_conv_fused.cpp builds that case:
// the exact output is a cancellation of terms of size |x| max|w|). Measured at
// (4, 32, 14, 14) -> 64, error / (sum |x||w| over the output's window) in units of u:
// uniform [-1, 1) data, max 1.8 and mean 0.22 (im2col + SGEMM: 3.5 and 0.28);
// magnitudes 2^-20 .. 2^20 mixed at random, max 5400 and mean 5.0 (im2col: 13 and 1.1).
// Larger tiles (F(4x4,3x3), matrix entries up to 8 and 1/24) amplify this more: a scalar
// prototype measured max 20 u and mean 0.96 u on the uniform data above.
// tests/test_cpu_winograd.cpp checks the bound with S computed in float64. U is computed
// in double and rounded once, so the weight transform adds one rounding, not three.
//
// IEEE special values. The transforms mix a patch's inputs, so an Inf can meet its own
// negative (Inf - Inf = NaN) where the direct product gives Inf, and a huge finite
// input can overflow an intermediate where the direct sum would not. Every sample
// whose pre-bias output holds a non-finite value is therefore recomputed by a direct
// convolution that multiplies the padding zeros like im2col + GEMM does, so special
// values land exactly where the im2col path puts them and nothing is silently lost.
#include "core/cpu/fast/winograd.h"

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "core/cpu/fast/blas.h"
#include "core/cpu/fast/conv_cols.h"
#include "core/cpu/fast/transpose.h"

namespace gradsleuth::cpu::fast {

namespace {

// L2 share for V and M of one block: 1 MB L2 per core on Zen 5, 512 KB on Zen 3 (which
// also holds U, the strip and the output rows). On Zen 5 at the CNN's shapes 384-512 KB
// ran fastest, 256 KB and 768 KB or more 10-20% slower (bench/bench_conv.cpp).
constexpr int64_t kBlockBytes = 384 * 1024;

// The weight gradient's tiles per block (rounded down to whole tile rows): the K of its
// 16 (O x T) @ (T x C) GEMMs, and the length of each float32 partial sum before it is
// folded into the float64 total (the error analysis in the weight gradient's comment).
constexpr int64_t kWgradBlockTiles = 256;

// One padded input row with channels innermost: row[(q + 1) * C + c] = x[c][h][q] for the
// sample x (C, H, W), zeros at q = -1 and q >= W (Wp = 2 tW + 2 columns), all zeros when
// h is outside [0, H). Channels innermost make a tile's 16 inputs 16 contiguous C-vectors,
// so the input transform runs on whole vectors whatever H and W are (a 14x14 plane has
// only 7 tiles per row). The transpose goes by 8x8 blocks, the last block of each axis
// overlapping the one before when 8 does not divide C or W; below 8, element by element.
void padded_row(const float* x, float* row, int64_t C, int64_t H, int64_t W, int64_t Wp, int64_t h) {
  if (h < 0 || h >= H) {
    std::fill(row, row + Wp * C, 0.0f);
    return;
  }
  std::fill(row, row + C, 0.0f);
  std::fill(row + (W + 1) * C, row + Wp * C, 0.0f);
  const float* src = x + h * W;  // channel c's row at src + c * H * W
  float* dst = row + C;
  if (C >= 8 && W >= 8) {
    for (int64_t c0 = 0; c0 < C; c0 += 8) {
      const int64_t c = std::min(c0, C - 8);
      for (int64_t q0 = 0; q0 < W; q0 += 8) {
        const int64_t q = std::min(q0, W - 8);
        transpose8x8(src + c * H * W + q, H * W, dst + q * C + c, C);
      }
    }
    return;
  }
  for (int64_t c = 0; c < C; ++c)
    for (int64_t q = 0; q < W; ++q) dst[q * C + c] = src[c * H * W + q];
}

// The input transform's loop over channels: q<r><k>[c] = d[r][k] of channel c, v<xi>[c] =
// (B^T d B)[xi / 4][xi % 4]. One restrict pointer per stream: with the outputs as offsets
// of one pointer, GCC needs more run-time alias checks than it allows and keeps it scalar.
inline void input_tile_kernel(const float* __restrict q00, const float* __restrict q01, const float* __restrict q02,
                              const float* __restrict q03, const float* __restrict q10, const float* __restrict q11,
                              const float* __restrict q12, const float* __restrict q13, const float* __restrict q20,
                              const float* __restrict q21, const float* __restrict q22, const float* __restrict q23,
                              const float* __restrict q30, const float* __restrict q31, const float* __restrict q32,
                              const float* __restrict q33, float* __restrict v0, float* __restrict v1,
                              float* __restrict v2, float* __restrict v3, float* __restrict v4, float* __restrict v5,
                              float* __restrict v6, float* __restrict v7, float* __restrict v8, float* __restrict v9,
                              float* __restrict v10, float* __restrict v11, float* __restrict v12,
                              float* __restrict v13, float* __restrict v14, float* __restrict v15, int64_t C) {
  for (int64_t c = 0; c < C; ++c) {
    // B^T d: rows (d0 - d2, d1 + d2, d2 - d1, d1 - d3), column by column.
    const float a0 = q00[c] - q20[c], a1 = q01[c] - q21[c], a2 = q02[c] - q22[c], a3 = q03[c] - q23[c];
    const float b0 = q10[c] + q20[c], b1 = q11[c] + q21[c], b2 = q12[c] + q22[c], b3 = q13[c] + q23[c];
    const float e0 = q20[c] - q10[c], e1 = q21[c] - q11[c], e2 = q22[c] - q12[c], e3 = q23[c] - q13[c];
    const float f0 = q10[c] - q30[c], f1 = q11[c] - q31[c], f2 = q12[c] - q32[c], f3 = q13[c] - q33[c];
    // (B^T d) B: the same on each row's columns.
    v0[c] = a0 - a2;
    v1[c] = a1 + a2;
    v2[c] = a2 - a1;
    v3[c] = a1 - a3;
    v4[c] = b0 - b2;
    v5[c] = b1 + b2;
    v6[c] = b2 - b1;
    v7[c] = b1 - b3;
    v8[c] = e0 - e2;
    v9[c] = e1 + e2;
    v10[c] = e2 - e1;
    v11[c] = e1 - e3;
    v12[c] = f0 - f2;
    v13[c] = f1 + f2;
    v14[c] = f2 - f1;
    v15[c] = f1 - f3;
  }
}

// Input transform of one tile: d[r][k] of channel c = rows[r][k * C + c] (the tile's four
// padded rows from its left column, channels innermost) -> v[xi * vs + c] = (B^T d B)[xi / 4][xi % 4].
void input_tile(const float* const rows[4], int64_t col, float* v, int64_t vs, int64_t C) {
  const float* p = rows[0] + col;
  const float* p1 = rows[1] + col;
  const float* p2 = rows[2] + col;
  const float* p3 = rows[3] + col;
  input_tile_kernel(p, p + C, p + 2 * C, p + 3 * C, p1, p1 + C, p1 + 2 * C, p1 + 3 * C, p2, p2 + C, p2 + 2 * C,
                    p2 + 3 * C, p3, p3 + C, p3 + 2 * C, p3 + 3 * C, v, v + vs, v + 2 * vs, v + 3 * vs, v + 4 * vs,
                    v + 5 * vs, v + 6 * vs, v + 7 * vs, v + 8 * vs, v + 9 * vs, v + 10 * vs, v + 11 * vs, v + 12 * vs,
                    v + 13 * vs, v + 14 * vs, v + 15 * vs, C);
}

// Output transform of T tiles (consecutive tile rows) of one output channel, plus b:
// y0[2t + j] = (A^T M_t A)[0][j] + b and y1[2t + j] = (A^T M_t A)[1][j] + b from
// m[xi * ms + t], so each tile row's two output rows come out contiguous, ready for a
// plain copy into the output. Returns false when some pre-bias value is not finite:
// y * 0 is +-0 for a finite y and a NaN for Inf and NaN, so OR-ing its bits flags one
// (an integer OR, unlike a float sum, vectorises).
bool output_tiles(const float* __restrict m, int64_t ms, float b, float* __restrict y0, float* __restrict y1,
                  int64_t T) {
  uint32_t bad = 0;
  for (int64_t t = 0; t < T; ++t) {
    float s0[4], s1[4];
    for (int k = 0; k < 4; ++k) {  // A^T M: rows (m0 + m1 + m2, m1 - m2 - m3)
      const float m0 = m[k * ms + t], m1 = m[(4 + k) * ms + t], m2 = m[(8 + k) * ms + t], m3 = m[(12 + k) * ms + t];
      s0[k] = m0 + m1 + m2;
      s1[k] = m1 - m2 - m3;
    }
    const float y00 = s0[0] + s0[1] + s0[2], y01 = s0[1] - s0[2] - s0[3];
    const float y10 = s1[0] + s1[1] + s1[2], y11 = s1[1] - s1[2] - s1[3];
    bad |= std::bit_cast<uint32_t>(y00 * 0.0f) | std::bit_cast<uint32_t>(y01 * 0.0f) |
           std::bit_cast<uint32_t>(y10 * 0.0f) | std::bit_cast<uint32_t>(y11 * 0.0f);
    y0[2 * t] = y00 + b;
    y0[2 * t + 1] = y01 + b;
    y1[2 * t] = y10 + b;
    y1[2 * t + 1] = y11 + b;
  }
  return (bad & 0x7f800000u) == 0;
}

// U[xi][o][c] = (G g G^T)[xi / 4][xi % 4] for g = w[o][c], in double, rounded once.
void weight_transform(const float* w, float* U, int64_t O, int64_t C) {
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < C; ++c) {
      const float* g = w + (o * C + c) * 9;
      double Gg[4][3];  // G g: rows of g combined
      for (int j = 0; j < 3; ++j) {
        const double g0 = g[j], g1 = g[3 + j], g2 = g[6 + j];
        Gg[0][j] = g0;
        Gg[1][j] = 0.5 * (g0 + g1 + g2);
        Gg[2][j] = 0.5 * (g0 - g1 + g2);
        Gg[3][j] = g2;
      }
      for (int i = 0; i < 4; ++i) {
        const double a = Gg[i][0], b = Gg[i][1], d = Gg[i][2];
        const double u[4] = {a, 0.5 * (a + b + d), 0.5 * (a - b + d), d};
        for (int j = 0; j < 4; ++j) U[((4 * i + j) * O + o) * C + c] = static_cast<float>(u[j]);
      }
    }
}

// C (M, N), ldc = A (M, K), lda @ B (K, N), ldb, all row-major: through the BLAS, else Eigen.
void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
          int64_t ldc) {
  if (blas_gemm(false, false, M, N, K, A, lda, B, ldb, C, ldc)) return;
  using RowM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Str = Eigen::OuterStride<>;
  Eigen::Map<RowM, 0, Str> c(C, M, N, Str(ldc));
  c.noalias() = Eigen::Map<const RowM, 0, Str>(A, M, K, Str(lda)) * Eigen::Map<const RowM, 0, Str>(B, K, N, Str(ldb));
}

// Moves up to 8 transformed tiles, tmp[j][xi][c] (j < 8, rows of 16 C), into
// V[xi][c][t0 + j] (ld Tv): by 8x8 transposes over (tile, channel), element by element
// for a channel tail. Slots j >= count hold zeros and land in V's padding columns.
void flush_tiles(const float* tmp, int64_t C, float* V, int64_t Tv, int64_t t0) {
  const int64_t C8 = C / 8 * 8;
  for (int xi = 0; xi < 16; ++xi) {
    const float* src = tmp + xi * C;
    float* dst = V + xi * C * Tv + t0;
    for (int64_t c = 0; c < C8; c += 8) transpose8x8(src + c, 16 * C, dst + c * Tv, Tv);
    for (int64_t c = C8; c < C; ++c)
      for (int j = 0; j < 8; ++j) dst[c * Tv + j] = src[j * 16 * C + c];
  }
}

// One sample by the definition, multiplying the padding zeros as im2col + GEMM does
// (so 0 * Inf = NaN appears where that path has it). For samples whose Winograd result
// is not finite; speed does not matter here.
void direct_sample(const float* x, const float* w, const float* bias, float* out, int64_t C, int64_t H, int64_t W,
                   int64_t O) {
  for (int64_t o = 0; o < O; ++o) {
    float* y = out + o * H * W;
    std::fill(y, y + H * W, 0.0f);
    for (int64_t c = 0; c < C; ++c) {
      const float* xp = x + c * H * W;
      const float* g = w + (o * C + c) * 9;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t q = 0; q < W; ++q) {
          float s = 0.0f;
          for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j) {
              const int64_t hh = h + i - 1, qq = q + j - 1;
              const float v = (hh >= 0 && hh < H && qq >= 0 && qq < W) ? xp[hh * W + qq] : 0.0f;
              s += g[3 * i + j] * v;
            }
          y[h * W + q] += s;
        }
    }
    if (bias)
      for (int64_t i = 0; i < H * W; ++i) y[i] += bias[o];
  }
}

// --- Weight gradient ---

// A g A^T for dY's 2x2 tiles g = (g00, g01; g10, g11), on floats or on Vec8 (eight tiles):
// rows (g0, g0 + g1, g0 - g1, -g1) of g, then the same on the columns; out[xi] =
// (A g A^T)[xi / 4][xi % 4]. Every entry is a sum of at most four +-g, two roundings deep.
// By reference: a Vec8 passed by value would change the ABI without AVX (see transpose8x8).
template <class V>
inline __attribute__((always_inline)) void dy_tile_math(const V& g00, const V& g01, const V& g10, const V& g11,
                                                        V (&out)[16]) {
  const V a[4][2] = {{g00, g01}, {g00 + g10, g01 + g11}, {g00 - g10, g01 - g11}, {-g10, -g11}};
  for (int i = 0; i < 4; ++i) {
    out[4 * i] = a[i][0];
    out[4 * i + 1] = a[i][0] + a[i][1];
    out[4 * i + 2] = a[i][0] - a[i][1];
    out[4 * i + 3] = -a[i][1];
  }
}

// One dY plane (H, W) -> u[xi * us + k] = (A g_k A^T)[xi / 4][xi % 4] for its tiles k of tile
// rows [ty0, ty1), k = (ty - ty0) * tW + tx, zero-padded past H and W. The plane is read
// in order (one sample's planes one after another: a pattern the prefetcher follows;
// walking all O planes a tile row at a time ran at memory latency). The tiles' four
// corners are first gathered into e (4 rows of ld tiles), then transformed eight at a time.
void dy_plane_tiles(const float* plane, int64_t H, int64_t W, int64_t ty0, int64_t ty1, int64_t tW, float* e,
                    int64_t ld, float* u, int64_t us) {
  float* e0 = e;
  float* e1 = e + ld;
  float* e2 = e + 2 * ld;
  float* e3 = e + 3 * ld;
  int64_t k = 0;
  for (int64_t ty = ty0; ty < ty1; ++ty) {
    const float* p0 = plane + 2 * ty * W;
    const float* p1 = 2 * ty + 1 < H ? p0 + W : nullptr;
    const int64_t full = W / 2;  // tiles with both columns inside the plane
    for (int64_t tx = 0; tx < full; ++tx, ++k) {
      e0[k] = p0[2 * tx];
      e1[k] = p0[2 * tx + 1];
      e2[k] = p1 ? p1[2 * tx] : 0.0f;
      e3[k] = p1 ? p1[2 * tx + 1] : 0.0f;
    }
    if (full < tW) {  // odd W: the last tile's right column is padding
      e0[k] = p0[W - 1];
      e1[k] = 0.0f;
      e2[k] = p1 ? p1[W - 1] : 0.0f;
      e3[k] = 0.0f;
      ++k;
    }
  }
  int64_t t = 0;
  for (; t + 8 <= k; t += 8) {
    Vec8 g00, g01, g10, g11, out[16];
    std::memcpy(&g00, e0 + t, sizeof(Vec8));
    std::memcpy(&g01, e1 + t, sizeof(Vec8));
    std::memcpy(&g10, e2 + t, sizeof(Vec8));
    std::memcpy(&g11, e3 + t, sizeof(Vec8));
    dy_tile_math(g00, g01, g10, g11, out);
    for (int xi = 0; xi < 16; ++xi) std::memcpy(u + xi * us + t, &out[xi], sizeof(Vec8));
  }
  for (; t < k; ++t) {
    float out[16];
    dy_tile_math(e0[t], e1[t], e2[t], e3[t], out);
    for (int xi = 0; xi < 16; ++xi) u[xi * us + t] = out[xi];
  }
}

// C (M, N) row-major = A (M, K) row-major @ B^T, B (N, K) row-major, + C when accumulate:
// the GEMM path's dW product, for the weight gradient's non-finite fallback.
void gemm_bt(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, bool accumulate,
             float* C, int64_t ldc) {
  if (blas_gemm(false, true, M, N, K, A, lda, B, ldb, accumulate ? 1.0f : 0.0f, C, ldc)) return;
  using RowM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Str = Eigen::OuterStride<>;
  Eigen::Map<RowM, 0, Str> c(C, M, N, Str(ldc));
  Eigen::Map<const RowM, 0, Str> a(A, M, K, Str(lda)), b(B, N, K, Str(ldb));
  if (accumulate)
    c.noalias() += a * b.transpose();
  else
    c.noalias() = a * b.transpose();
}

// gw by the GEMM path itself (per-sample im2col, then dW += dY[n] @ cols^T), for a weight
// gradient whose Winograd result is not finite: the padding zeros are multiplied like the
// GEMM path does, so Inf/NaN land exactly where set_conv_algorithm(Gemm) puts them.
void weight_grad_gemm(const float* x, const float* dy, float* gw, int64_t N, int64_t C, int64_t H, int64_t W,
                      int64_t O) {
  Conv2dGeometry g{};
  g.N = N, g.C = C, g.H = H, g.W = W, g.kH = g.kW = 3, g.sH = g.sW = 1, g.pH = g.pW = 1, g.dH = g.dW = 1;
  g.outH = H, g.outW = W;
  const FlatTaps flat = flat_taps(g);
  const int64_t L = H * W, CK = 9 * C;
  std::unique_ptr<float[]> cols(new float[CK * L]);
  for (int64_t n = 0; n < N; ++n) {
    im2col_sample(x + n * C * L, cols.get(), L, g, flat, 0, C);
    gemm_bt(O, CK, L, dy + n * O * L, L, cols.get(), L, n > 0, gw, CK);
  }
}

}  // namespace

bool winograd_eligible(const Conv2dGeometry& g) {
  return g.kH == 3 && g.kW == 3 && g.sH == 1 && g.sW == 1 && g.dH == 1 && g.dW == 1 && g.pH == 1 && g.pW == 1 &&
         g.outH == g.H && g.outW == g.W && g.H >= 1 && g.W >= 1;
}

void flip_transpose_3x3(const float* w, float* wt, int64_t O, int64_t C) {
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < C; ++c)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) wt[((c * O + o) * 3 + i) * 3 + j] = w[((o * C + c) * 3 + 2 - i) * 3 + 2 - j];
}

void winograd_conv3x3(const float* x, const float* w, const float* bias, float* out, int64_t N, int64_t C, int64_t H,
                      int64_t W, int64_t O) {
  if (N <= 0 || O <= 0 || H <= 0 || W <= 0) return;
  if (C <= 0) {  // an empty sum: the bias alone
    for (int64_t i = 0; i < N * O; ++i) std::fill(out + i * H * W, out + (i + 1) * H * W, bias ? bias[i % O] : 0.0f);
    return;
  }
  const int64_t tH = (H + 1) / 2, tW = (W + 1) / 2, Wp = 2 * tW + 2;
  // Tile rows per block: V and M (16 * (C + O) floats per tile) within kBlockBytes, at least one row.
  const int64_t rows_per_block =
      std::max<int64_t>(1, kBlockBytes / (16 * static_cast<int64_t>(sizeof(float)) * (C + O) * tW));
  const int64_t total_rows = N * tH;
  const int64_t Tb = std::min(rows_per_block, total_rows) * tW;  // tiles per block (the ld of M)
  const int64_t Tv = (Tb + 7) / 8 * 8;                           // the ld of V: whole groups of 8 tiles

  std::unique_ptr<float[]> U(new float[16 * O * C]);
  std::unique_ptr<float[]> strip(new float[4 * Wp * C]);  // padded input rows 2ty-1 .. 2ty+2
  std::unique_ptr<float[]> tmp(new float[8 * 16 * C]);    // 8 transformed tiles, tmp[j][xi][c]
  std::unique_ptr<float[]> V(new float[16 * C * Tv]);     // V[xi][c][t]
  std::unique_ptr<float[]> M(new float[16 * O * Tb]);     // M[xi][o][t]
  std::unique_ptr<float[]> y(new float[4 * Tb]);          // one output channel's rows (two per tile row)
  std::vector<char> finite(N, 1);
  weight_transform(w, U.get(), O, C);
  // The strip's four row slots rotate: tile row ty + 1 reuses ty's last two rows.
  float* rows[4] = {strip.get(), strip.get() + Wp * C, strip.get() + 2 * Wp * C, strip.get() + 3 * Wp * C};

  for (int64_t r0 = 0; r0 < total_rows; r0 += rows_per_block) {
    const int64_t r1 = std::min(total_rows, r0 + rows_per_block);
    const int64_t T = (r1 - r0) * tW;
    // Input transform: a tile at a time along channels (the strip has them innermost), in
    // groups of 8 tiles transposed into V's (channel, tile) rows, which the GEMM wants:
    // OpenBLAS's small-matrix path takes (O, C) @ (C, T) row-major operands but not a
    // transposed V, and runs about 1.3x faster at these sizes.
    int64_t t = 0;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / tH, ty = r % tH;
      const float* xn = x + n * C * H * W;
      if (ty == 0) {
        for (int i = 0; i < 2; ++i) padded_row(xn, rows[i], C, H, W, Wp, i - 1);
      } else {
        std::swap(rows[0], rows[2]);
        std::swap(rows[1], rows[3]);
      }
      for (int i = 2; i < 4; ++i) padded_row(xn, rows[i], C, H, W, Wp, 2 * ty + i - 1);
      for (int64_t tx = 0; tx < tW; ++tx, ++t) {
        input_tile(rows, 2 * tx * C, tmp.get() + (t % 8) * 16 * C, C, C);
        if (t % 8 == 7) flush_tiles(tmp.get(), C, V.get(), Tv, t - 7);
      }
    }
    if (t % 8 != 0) {
      std::fill(tmp.get() + (t % 8) * 16 * C, tmp.get() + 8 * 16 * C, 0.0f);
      flush_tiles(tmp.get(), C, V.get(), Tv, t / 8 * 8);
    }
    for (int xi = 0; xi < 16; ++xi)
      gemm(O, T, C, U.get() + xi * O * C, C, V.get() + xi * C * Tv, Tv, M.get() + xi * O * Tb, Tb);
    for (int64_t o = 0; o < O; ++o) {
      float* y0 = y.get();
      float* y1 = y0 + 2 * Tb;
      const bool ok = output_tiles(M.get() + o * Tb, O * Tb, bias ? bias[o] : 0.0f, y0, y1, T);
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t n = r / tH, ty = r % tH;
        if (!ok) finite[n] = 0;  // marks every sample of the block; direct_sample sorts them out
        float* plane = out + (n * O + o) * H * W;
        const int64_t off = 2 * (r - r0) * tW;  // the tile row's outputs; W <= 2 tW of them per row
        std::memcpy(plane + 2 * ty * W, y0 + off, W * sizeof(float));
        if (2 * ty + 1 < H) std::memcpy(plane + (2 * ty + 1) * W, y1 + off, W * sizeof(float));
      }
    }
  }
  for (int64_t n = 0; n < N; ++n)
    if (!finite[n]) direct_sample(x + n * C * H * W, w, bias, out + n * O * H * W, C, H, W, O);
}

// The weight gradient, F(3x3, 2x2). gw[o][c] (3x3) = sum over dY's 2x2 tiles g (of plane
// (n, o)) of the 3x3 correlation of g with the 4x4 input patch d (of plane (n, c)) it
// reads: the forward's F(2x2, 3x3) with the roles of filter and output exchanged, so by
// the transposition principle (Lavin & Gray 2015)
//   gw[o][c] = G^T [ sum_t (A g_t A^T) ⊙ (B^T d_t B) ] G,
// with the forward's B^T (the same input tiles and transform), A (4x2) the transpose of
// its A^T and G^T (3x4) the transpose of its G:
//   A = [1  0]     G^T = [1  1/2  1/2  0]
//       [1  1]           [0  1/2 -1/2  0]
//       [1 -1]           [0  1/2  1/2  1]
//       [0 -1]
// The sum over tiles is 16 GEMMs M[xi] (O x C) = U[xi] (O x T) @ V[xi] (T x C), the tiles
// as K; 16 * 2*O*C*T multiply-adds for the GEMM path's 9 * 4 * 2*O*C*T.
//
// Blocking: Tb tiles (kWgradBlockTiles, whole tile rows, samples may straddle blocks) at
// a time: V[xi][t][c] straight from input_tile (channels innermost, no transposes), U[xi][o][t]
// plane by plane from dY, then the 16 GEMMs (OpenBLAS's small-matrix kernel at this K),
// their float32 result folded into a float64 total M. At the end G^T M G in float64,
// rounded once. Measured (bench_conv, one thread, Zen 5) at x (64, 32, 14, 14), O = 64:
// 3.3 ms against 7.2 for per-sample im2col + GEMM (fastest of 7); blocks of 128 and 512
// tiles were 5-20% slower. Gathering dY's tiles plane by plane matters: walking the O
// planes a tile row at a time (the order V is built in) ran at memory latency, 7 ms.
//
// Numerics: as for the forward, |computed - exact| <= gamma_k * S, with
//   S = |G^T| [ sum_t (|A| |g_t| |A^T|) ⊙ (|B^T| |d_t| |B|) ] |G|
// and k = Tb + 5 (2 roundings in A g A^T, 2 in B^T d B, 1 product, Tb - 1 in a block's
// float32 sum in any order, 1 rounding the float64 result), plus float64 terms of order
// (blocks + 16) 2^-53 S. The float64 fold keeps k at the block length (261 at most for
// the CNN, whatever the batch) instead of the whole batch's tile count (3141 at N = 64):
// the same order as the GEMM path's chain (one sample's H*W-term dot product, then N
// adds). S is a small multiple of sum |dy||x| taken over the whole 4x4 patches, so as in
// the forward, magnitudes next to a tap's window (read by the other taps) count for it.
// Measured at (4, 32, 14, 14) -> 64, uniform data: error <= 2.4 u sum |dy||x|.
// tests/test_cpu_winograd.cpp checks the bound with S in float64.
//
// IEEE special values: a non-finite input makes some transformed value non-finite, and
// through the GEMMs (0 * Inf = NaN) every gw[o][c] it touches; any non-finite gw sends the
// whole gradient to weight_grad_gemm, the GEMM path's own computation, so Inf/NaN land
// exactly where set_conv_algorithm(Gemm) puts them, and an overflow of the transforms'
// intermediates on finite data gives the finite result.
void winograd_conv3x3_weight_grad(const float* x, const float* dy, float* gw, int64_t N, int64_t C, int64_t H,
                                  int64_t W, int64_t O) {
  if (O <= 0 || C <= 0) return;
  if (N <= 0 || H <= 0 || W <= 0) {  // an empty sum
    std::fill(gw, gw + O * C * 9, 0.0f);
    return;
  }
  const int64_t tH = (H + 1) / 2, tW = (W + 1) / 2, Wp = 2 * tW + 2;
  const int64_t rows_per_block = std::max<int64_t>(1, kWgradBlockTiles / tW);
  const int64_t total_rows = N * tH;
  const int64_t Tb = std::min(rows_per_block, total_rows) * tW;  // tiles per block: U's ld

  std::unique_ptr<float[]> strip(new float[4 * Wp * C]);     // padded input rows 2ty-1 .. 2ty+2
  std::unique_ptr<float[]> V(new float[16 * Tb * C]);        // V[xi][t][c]
  std::unique_ptr<float[]> U(new float[16 * O * Tb]);        // U[xi][o][t]
  std::unique_ptr<float[]> Mb(new float[16 * O * C]);        // one block's M[xi][o][c]
  std::unique_ptr<double[]> Macc(new double[16 * O * C]());  // the sum of the blocks' M
  std::unique_ptr<float[]> e(new float[4 * Tb]);             // dY tiles' corners, dy_plane_tiles
  float* rows[4] = {strip.get(), strip.get() + Wp * C, strip.get() + 2 * Wp * C, strip.get() + 3 * Wp * C};

  for (int64_t r0 = 0; r0 < total_rows; r0 += rows_per_block) {
    const int64_t r1 = std::min(total_rows, r0 + rows_per_block);
    const int64_t T = (r1 - r0) * tW;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / tH, ty = r % tH, t0 = (r - r0) * tW;
      // The input patches, as in the forward: B^T d B straight into V's (tile, channel) rows.
      const float* xn = x + n * C * H * W;
      if (ty == 0) {
        for (int i = 0; i < 2; ++i) padded_row(xn, rows[i], C, H, W, Wp, 2 * ty + i - 1);
      } else {
        std::swap(rows[0], rows[2]);
        std::swap(rows[1], rows[3]);
      }
      for (int i = 2; i < 4; ++i) padded_row(xn, rows[i], C, H, W, Wp, 2 * ty + i - 1);
      for (int64_t tx = 0; tx < tW; ++tx) input_tile(rows, 2 * tx * C, V.get() + (t0 + tx) * C, Tb * C, C);
    }
    // dY's tiles, A g A^T into U's (o, tile) rows: plane by plane, each sample's share of the block.
    for (int64_t r = r0; r < r1;) {
      const int64_t n = r / tH, ty0 = r % tH, ty1 = std::min(tH, ty0 + (r1 - r));
      for (int64_t o = 0; o < O; ++o)
        dy_plane_tiles(dy + (n * O + o) * H * W, H, W, ty0, ty1, tW, e.get(), Tb, U.get() + o * Tb + (r - r0) * tW,
                       O * Tb);
      r += ty1 - ty0;
    }
    // M[xi] (O x C) = U[xi] (O x T) @ V[xi] (T x C): the tile sum is the GEMMs' K. Each
    // block's float32 sum is added into the float64 total, so no rounding chain runs
    // longer than one block (see the error analysis above winograd_conv3x3_weight_grad).
    for (int xi = 0; xi < 16; ++xi)
      gemm(O, C, T, U.get() + xi * O * Tb, Tb, V.get() + xi * Tb * C, C, Mb.get() + xi * O * C, C);
    for (int64_t i = 0; i < 16 * O * C; ++i) Macc[i] += Mb[i];
  }
  // gw = G^T M G in float64, rounded once; G^T = [1 1/2 1/2 0; 0 1/2 -1/2 0; 0 1/2 1/2 1].
  bool finite = true;
  for (int64_t oc = 0; oc < O * C; ++oc) {
    double m[4][4], s[3][4];
    for (int xi = 0; xi < 16; ++xi) m[xi / 4][xi % 4] = Macc[xi * O * C + oc];
    for (int k = 0; k < 4; ++k) {
      s[0][k] = m[0][k] + 0.5 * (m[1][k] + m[2][k]);
      s[1][k] = 0.5 * (m[1][k] - m[2][k]);
      s[2][k] = 0.5 * (m[1][k] + m[2][k]) + m[3][k];
    }
    float* out = gw + oc * 9;
    for (int i = 0; i < 3; ++i) {
      out[3 * i + 0] = static_cast<float>(s[i][0] + 0.5 * (s[i][1] + s[i][2]));
      out[3 * i + 1] = static_cast<float>(0.5 * (s[i][1] - s[i][2]));
      out[3 * i + 2] = static_cast<float>(0.5 * (s[i][1] + s[i][2]) + s[i][3]);
      for (int j = 0; j < 3; ++j) finite = finite && std::isfinite(out[3 * i + j]);
    }
  }
  if (!finite) weight_grad_gemm(x, dy, gw, N, C, H, W, O);
}

}  // namespace gradsleuth::cpu::fast
