// workbench/conv2d.cpp: a 3x3 convolution, stride 1, padding 1 (a small CNN's inner layer),
// float32, on the CPU: three versions, the last two the engine's own kernels.
// Key: B batch, C channels in, O channels out (C = O here), H = W the image side;
// x (B, C, H, W), w (O, C, 3, 3), y (B, O, H, W), all contiguous; no bias.
// Shape: m = C = O, n = H = W, k = B. threads > 1 split the batch.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu/fast/blas.h"
#include "core/cpu/fast/conv_cols.h"
#include "core/cpu/fast/winograd.h"
#include "core/op_kinds.h"
#include "workbench/ladders.h"

namespace gradsleuth::workbench::cpu {
namespace {
constexpr double kU = 5.9604644775390625e-08;  // 2^-24

// v1: the definition: for each output, the 9 C taps inside the image, one at a time.
void v1_direct(const float* x, const float* w, float* y, int64_t b0, int64_t b1, int64_t C, int64_t S) {
  const int64_t O = C;
  for (int64_t b = b0; b < b1; ++b)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t h = 0; h < S; ++h)
        for (int64_t q = 0; q < S; ++q) {
          float acc = 0.0f;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t i = 0; i < 3; ++i)
              for (int64_t j = 0; j < 3; ++j) {
                const int64_t hh = h + i - 1, qq = q + j - 1;
                if (hh >= 0 && hh < S && qq >= 0 && qq < S)
                  acc += w[((o * C + c) * 3 + i) * 3 + j] * x[((b * C + c) * S + hh) * S + qq];
              }
          y[((b * O + o) * S + h) * S + q] = acc;
        }
}

Conv2dGeometry geometry(int64_t C, int64_t S) { return {1, C, S, S, 3, 3, 1, 1, 1, 1, 1, 1, S, S}; }

// v2: im2col + GEMM: the engine's im2col (core/cpu/fast/conv_cols.h) lays each sample's 9C taps
// out as a (9C, H*W) matrix, and one GEMM (core/cpu/fast/blas.h: the engine's kernel or the BLAS)
// computes y (O, H*W) = w (O, 9C) @ cols: the convolution becomes the fast matmul, for a 9x copy.
void v2_im2col(const float* x, const float* w, float* y, int64_t b0, int64_t b1, int64_t C, int64_t S) {
  const Conv2dGeometry g = geometry(C, S);
  const gradsleuth::cpu::fast::FlatTaps flat = gradsleuth::cpu::fast::flat_taps(g);
  const int64_t L = S * S;
  std::vector<float> cols(static_cast<size_t>(9 * C * L));
  gradsleuth::cpu::fast::BlasSingleThread one;
  for (int64_t b = b0; b < b1; ++b) {
    gradsleuth::cpu::fast::im2col_sample(x + b * C * L, cols.data(), L, g, flat, 0, C);
    if (!gradsleuth::cpu::fast::blas_gemm(false, false, C, L, 9 * C, w, 9 * C, cols.data(), L, y + b * C * L, L)) {
      // No BLAS built in: the same product, in the ikj order of matmul v2.
      float* yb = y + b * C * L;
      std::fill(yb, yb + C * L, 0.0f);
      for (int64_t o = 0; o < C; ++o)
        for (int64_t k = 0; k < 9 * C; ++k) {
          const float a = w[o * 9 * C + k];
          for (int64_t j = 0; j < L; ++j) yb[o * L + j] += a * cols[static_cast<size_t>(k * L + j)];
        }
    }
  }
}

// v3: Winograd F(2x2, 3x3), the engine's (core/cpu/fast/winograd.h): each 4x4 input tile and 3x3
// filter are transformed so that a 2x2 output tile takes 16 multiplies instead of 36 (2.25x
// fewer), done as 16 GEMMs over the channels.
void v3_winograd(const float* x, const float* w, float* y, int64_t b0, int64_t b1, int64_t C, int64_t S) {
  gradsleuth::cpu::fast::BlasSingleThread one;
  gradsleuth::cpu::fast::winograd_conv3x3(x + b0 * C * S * S, w, nullptr, y + b0 * C * S * S, b1 - b0, C, S, S, C);
}

using Fn = void (*)(const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t);
KernelFn batch_split(Fn f) {
  return [f](const float* const* in, float* out, const Shape& s, int threads) {
    parallel_for(threads, s.k, [&](int64_t b0, int64_t b1) { f(in[0], in[1], out, b0, b1, s.m, s.n); });
  };
}

// Deterministic inputs in [-1, 1).
std::vector<float> uniform_inputs(int which, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t state = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(which + 1);
  for (float& e : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    e = static_cast<float>(static_cast<double>(state >> 40) / 16777216.0 * 2.0 - 1.0);
  }
  return v;
}

}  // namespace

Problem conv2d_problem(const Shape& s) {
  const int64_t C = s.m, S = s.n, B = s.k, L = S * S;
  Problem p;
  p.inputs = {uniform_inputs(0, B * C * L), uniform_inputs(1, C * C * 9)};
  const std::vector<float>&x = p.inputs[0], &w = p.inputs[1];
  p.want.assign(static_cast<size_t>(B * C * L), 0.0f);
  p.atol_each.assign(p.want.size(), 0.0f);
  // The bound of a 9C-term dot product in any order (as matmul's): gamma_9C sum |w x| + u |y|.
  const double Ku = 9.0 * static_cast<double>(C) * kU, gamma = Ku / (1.0 - Ku);
  double widest = 0.0;
  std::vector<double> acc(static_cast<size_t>(L)), mag(static_cast<size_t>(L));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t o = 0; o < C; ++o) {
      std::fill(acc.begin(), acc.end(), 0.0);
      std::fill(mag.begin(), mag.end(), 0.0);
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < 3; ++i)
          for (int64_t j = 0; j < 3; ++j) {
            const double wv = w[static_cast<size_t>(((o * C + c) * 3 + i) * 3 + j)];
            const float* xp = &x[static_cast<size_t>((b * C + c) * L)];
            for (int64_t h = std::max<int64_t>(0, 1 - i); h < std::min(S, S + 1 - i); ++h)
              for (int64_t q = std::max<int64_t>(0, 1 - j); q < std::min(S, S + 1 - j); ++q) {
                const double t = wv * xp[(h + i - 1) * S + q + j - 1];
                acc[static_cast<size_t>(h * S + q)] += t;
                mag[static_cast<size_t>(h * S + q)] += std::fabs(t);
              }
          }
      for (int64_t e = 0; e < L; ++e) {
        const size_t at = static_cast<size_t>((b * C + o) * L + e);
        p.want[at] = static_cast<float>(acc[static_cast<size_t>(e)]);
        const double bound = gamma * mag[static_cast<size_t>(e)] + kU * std::fabs(acc[static_cast<size_t>(e)]);
        p.atol_each[at] = static_cast<float>(bound * (1.0 + 1e-6));
        widest = std::max(widest, bound);
      }
    }
  p.atol = widest;
  p.tolerance_note =
      "per element, |err| <= gamma_9C sum |w x| + u |y| (gamma_k = k u / (1 - k u)): the a priori "
      "bound of a 9C-term dot product in any order; atol shows the widest";
  return p;
}

// Winograd's transforms mix a tile's inputs and a filter's taps, so its bound is not the direct
// product's (core/cpu/fast/winograd.cpp, "Numerics"): |err| <= gamma_(C+8) S with
// S = |A^T| [sum_c (|G| |g_c| |G^T|) . (|B^T| |d_c| |B|)] |A|. |G|'s rows sum to at most 1.5,
// |B^T|'s and |B|'s hold two ones, |A^T|'s row three: S <= 9 * sum_c 2.25 max|g_c| * 4 max|d_c|,
// d_c the 4x4 input tile (zero padding included) of the output's 2x2 tile.
std::vector<float> conv2d_winograd_bounds(const Problem& p, const Shape& s) {
  const int64_t C = s.m, S = s.n, B = s.k, L = S * S;
  const std::vector<float>&x = p.inputs[0], &w = p.inputs[1];
  const double Ku = static_cast<double>(C + 8) * kU, gamma = Ku / (1.0 - Ku);
  std::vector<double> wmax(static_cast<size_t>(C * C), 0.0);  // max |w[o, c, :, :]|
  for (int64_t oc = 0; oc < C * C; ++oc)
    for (int64_t t = 0; t < 9; ++t)
      wmax[static_cast<size_t>(oc)] =
          std::max<double>(wmax[static_cast<size_t>(oc)], std::fabs(w[static_cast<size_t>(oc * 9 + t)]));
  std::vector<float> out(p.want.size());
  std::vector<double> tmax(static_cast<size_t>(C));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t th = 0; th < S; th += 2)
      for (int64_t tq = 0; tq < S; tq += 2) {
        for (int64_t c = 0; c < C; ++c) {  // max |x| over the 4x4 tile from (th - 1, tq - 1)
          double m = 0.0;
          for (int64_t h = std::max<int64_t>(0, th - 1); h < std::min(S, th + 3); ++h)
            for (int64_t q = std::max<int64_t>(0, tq - 1); q < std::min(S, tq + 3); ++q)
              m = std::max<double>(m, std::fabs(x[static_cast<size_t>((b * C + c) * L + h * S + q)]));
          tmax[static_cast<size_t>(c)] = m;
        }
        for (int64_t o = 0; o < C; ++o) {
          double sum = 0.0;
          for (int64_t c = 0; c < C; ++c) sum += wmax[static_cast<size_t>(o * C + c)] * tmax[static_cast<size_t>(c)];
          const double bound = gamma * 81.0 * sum;
          for (int64_t h = th; h < std::min(S, th + 2); ++h)
            for (int64_t q = tq; q < std::min(S, tq + 2); ++q) {
              const size_t at = static_cast<size_t>((b * C + o) * L + h * S + q);
              out[at] = static_cast<float>((bound + kU * std::fabs(p.want[at])) * (1.0 + 1e-6));
            }
        }
      }
  return out;
}

Ladder conv2d_ladder() {
  Ladder l;
  l.spec.name = "conv2d";
  l.spec.what = "3x3 convolution, stride 1, padding 1, of x (B, C, S, S) by w (C, C, 3, 3), float32";
  l.spec.file = "workbench/conv2d.cpp";
  l.spec.shape_help = "--size S: S x S images; --rows C: channels in and out (default 64); batch 4";
  l.spec.compute_bound = true;
  l.spec.gpu_reference = "the FMA peak";
  l.spec.default_size = 32;
  l.spec.default_rows = 64;
  l.rungs.push_back({{1, "direct", "the definition: 9C taps per output, a bounds test per tap, one element at a time"},
                     batch_split(v1_direct),
                     "",
                     {}});
  l.rungs.push_back({{2, "im2col + GEMM",
                      "the engine's im2col (core/cpu/fast/conv_cols.h) then one GEMM per sample "
                      "(core/cpu/fast/blas.h): the convolution runs at matmul speed"},
                     batch_split(v2_im2col),
                     "",
                     {}});
  l.rungs.push_back({{3, "Winograd F(2x2,3x3)",
                      "the engine's (core/cpu/fast/winograd.h): 16 multiplies per 2x2 outputs instead of 36, as 16 "
                      "GEMMs over channels"},
                     batch_split(v3_winograd),
                     "",
                     {}});
  return l;
}

}  // namespace gradsleuth::workbench::cpu
