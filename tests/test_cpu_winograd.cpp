// Tests for core/cpu/fast/winograd.h: Winograd F(2x2, 3x3) against a direct float64
// convolution written here, within an a-priori float32 error bound (below); against
// gs::conv2d in float32; and the input-gradient identity through flip_transpose_3x3
// against autograd's gradient of conv2d. Sizes cover odd H/W (a partial last tile),
// C = 1, O = 1, N = 1..5, with and without bias, random and adversarial data, and the
// IEEE special values (Inf/NaN must land where the im2col + GEMM path puts them).
//
// The bound: any algorithm that computes a linear form with additions and products of
// depth k has |computed - exact| <= gamma_k * S, gamma_k = k u / (1 - k u), u = 2^-24,
// where S is the same algorithm run on absolute values (Higham, "Accuracy and Stability
// of Numerical Algorithms", ch. 3). Here S = |A^T| [sum_c (|G||g||G^T|) ⊙ (|B^T||d||B|)] |A|
// and k = C + 8 (2 in the input transform, 1 rounding U, 1 product, C - 1 in the channel
// sum whatever its order, 4 in the output transform, 1 for the bias), plus u |y| for the
// bias add. It does not depend on y, so cancellation (y ~ 0 from large terms) is covered.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/autograd.h"
#include "core/cpu/fast/winograd.h"
#include "core/fast_kernels.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace {

// These tests are about the tuned kernels: on, even in a build whose default is the
// reference loops (GRADSLEUTH_FAST_KERNELS=OFF).
const bool kTunedKernelsOn = (gradsleuth::set_cpu_fast_kernels(true), true);

using gradsleuth::cpu::fast::flip_transpose_3x3;
using gradsleuth::cpu::fast::winograd_conv3x3;
using gradsleuth::cpu::fast::winograd_eligible;
using gs::Tensor;

constexpr double kU = 1.0 / (1 << 24);  // float32 unit roundoff

double gamma_k(double k) { return k * kU / (1.0 - k * kU); }

struct Problem {
  int64_t N, C, H, W, O;
  std::vector<float> x, w, b;  // b empty: no bias
};

// Uniform in [-1, 1), or (adversarial) random sign times 2^e with e uniform in
// [-40, 40]: a 10^24 dynamic range inside one patch, products far apart in size.
std::vector<float> values(size_t n, std::mt19937& gen, bool adversarial) {
  std::uniform_real_distribution<double> d(-1.0, 1.0), e(-40.0, 40.0);
  std::vector<float> v(n);
  for (float& f : v)
    f = adversarial ? static_cast<float>(std::copysign(std::exp2(e(gen)), d(gen))) : static_cast<float>(d(gen));
  return v;
}

Problem make(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, bool bias, bool adversarial, unsigned seed) {
  std::mt19937 gen(seed);
  Problem p{N, C, H, W, O, values(N * C * H * W, gen, adversarial), values(O * C * 9, gen, adversarial), {}};
  if (bias) p.b = values(O, gen, adversarial);
  return p;
}

std::vector<float> run_winograd(const Problem& p) {
  std::vector<float> out(p.N * p.O * p.H * p.W, -12345.0f);  // poison: every element must be written
  winograd_conv3x3(p.x.data(), p.w.data(), p.b.empty() ? nullptr : p.b.data(), out.data(), p.N, p.C, p.H, p.W, p.O);
  return out;
}

// x at (n, c, h, q), zero outside the plane (the padding).
double at(const Problem& p, int64_t n, int64_t c, int64_t h, int64_t q) {
  if (h < 0 || h >= p.H || q < 0 || q >= p.W) return 0.0;
  return p.x[((n * p.C + c) * p.H + h) * p.W + q];
}

// The direct convolution in float64: ref (with bias), and S_direct = |b| + sum |x||w|
// over each output's 3x3 window (the direct product's error scale).
void direct(const Problem& p, std::vector<double>& ref, std::vector<double>& sdir) {
  ref.assign(p.N * p.O * p.H * p.W, 0.0);
  sdir.assign(ref.size(), 0.0);
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t o = 0; o < p.O; ++o)
      for (int64_t h = 0; h < p.H; ++h)
        for (int64_t q = 0; q < p.W; ++q) {
          double acc = p.b.empty() ? 0.0 : p.b[o], mag = std::abs(acc);
          for (int64_t c = 0; c < p.C; ++c)
            for (int i = 0; i < 3; ++i)
              for (int j = 0; j < 3; ++j) {
                const double t = p.w[((o * p.C + c) * 3 + i) * 3 + j] * at(p, n, c, h + i - 1, q + j - 1);
                acc += t;
                mag += std::abs(t);
              }
          const int64_t idx = ((n * p.O + o) * p.H + h) * p.W + q;
          ref[idx] = acc;
          sdir[idx] = mag;
        }
}

// S of the header comment for every output (bias excluded), in float64 with absolute
// values of the transform matrices written out here.
std::vector<double> winograd_abs_scale(const Problem& p) {
  const double Bt[4][4] = {{1, 0, 1, 0}, {0, 1, 1, 0}, {0, 1, 1, 0}, {0, 1, 0, 1}};  // |B^T|
  const double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, 0.5, 0.5}, {0, 0, 1}};   // |G|
  const double At[2][4] = {{1, 1, 1, 0}, {0, 1, 1, 1}};                              // |A^T|
  std::vector<double> S(p.N * p.O * p.H * p.W, 0.0);
  const int64_t tH = (p.H + 1) / 2, tW = (p.W + 1) / 2;
  std::vector<double> Ua(p.O * p.C * 16);  // |G||g||G^T|
  for (int64_t o = 0; o < p.O; ++o)
    for (int64_t c = 0; c < p.C; ++c)
      for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 4; ++b) {
          double s = 0;
          for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j) s += G[a][i] * std::abs(p.w[((o * p.C + c) * 3 + i) * 3 + j]) * G[b][j];
          Ua[(o * p.C + c) * 16 + a * 4 + b] = s;
        }
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t ty = 0; ty < tH; ++ty)
      for (int64_t tx = 0; tx < tW; ++tx) {
        std::vector<double> Va(p.C * 16);  // |B^T||d||B| per channel
        for (int64_t c = 0; c < p.C; ++c)
          for (int a = 0; a < 4; ++a)
            for (int b = 0; b < 4; ++b) {
              double s = 0;
              for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j)
                  s += Bt[a][i] * std::abs(at(p, n, c, 2 * ty - 1 + i, 2 * tx - 1 + j)) * Bt[b][j];
              Va[c * 16 + a * 4 + b] = s;
            }
        for (int64_t o = 0; o < p.O; ++o) {
          double Ma[16] = {};
          for (int64_t c = 0; c < p.C; ++c)
            for (int e = 0; e < 16; ++e) Ma[e] += Ua[(o * p.C + c) * 16 + e] * Va[c * 16 + e];
          for (int yi = 0; yi < 2; ++yi)
            for (int yj = 0; yj < 2; ++yj) {
              const int64_t h = 2 * ty + yi, q = 2 * tx + yj;
              if (h >= p.H || q >= p.W) continue;
              double s = 0;
              for (int a = 0; a < 4; ++a)
                for (int b = 0; b < 4; ++b) s += At[yi][a] * Ma[a * 4 + b] * At[yj][b];
              S[((n * p.O + o) * p.H + h) * p.W + q] = s;
            }
        }
      }
  return S;
}

// Checks the Winograd result against the float64 reference within the bound; returns
// the largest error / bound seen (for the messages).
double check_against_reference(const Problem& p) {
  const std::vector<float> out = run_winograd(p);
  std::vector<double> ref, sdir;
  direct(p, ref, sdir);
  const std::vector<double> S = winograd_abs_scale(p);
  const double g = gamma_k(static_cast<double>(p.C + 8));
  double worst = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double tol = g * S[i] + kU * std::abs(ref[i]);
    const double err = std::abs(out[i] - ref[i]);
    if (!(err <= tol)) {
      if (bad++ < 3)
        FAIL_CHECK("N=" << p.N << " C=" << p.C << " H=" << p.H << " W=" << p.W << " O=" << p.O
                        << " bias=" << !p.b.empty() << " element " << i << ": " << out[i] << " vs " << ref[i]
                        << " (error " << err << " > bound " << tol << ")");
    }
    if (tol > 0) worst = std::max(worst, err / tol);
  }
  CHECK(bad == 0);
  return worst;
}

Tensor as_tensor(const std::vector<float>& v, const gs::Shape& shape) { return gs::tensor(v, shape); }

}  // namespace

TEST_CASE("winograd_eligible: 3x3, stride 1, dilation 1, padding 1 (same size) only") {
  gradsleuth::Conv2dGeometry g{2, 3, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 14, 14};
  CHECK(winograd_eligible(g));
  auto with = [&](auto f) {
    auto h = g;
    f(h);
    return winograd_eligible(h);
  };
  CHECK_FALSE(with([](auto& h) {
    h.kH = h.kW = 5;
    h.pH = h.pW = 2;
  }));
  CHECK_FALSE(with([](auto& h) {
    h.sH = 2;
    h.outH = 7;
  }));
  CHECK_FALSE(with([](auto& h) {
    h.sW = 2;
    h.outW = 7;
  }));
  CHECK_FALSE(with([](auto& h) {
    h.dH = 2;
    h.pH = 2;
  }));
  CHECK_FALSE(with([](auto& h) {
    h.pH = h.pW = 0;
    h.outH = h.outW = 12;
  }));
  CHECK_FALSE(with([](auto& h) {
    h.pW = 2;
    h.outW = 16;
  }));
  CHECK_FALSE(with([](auto& h) {
    h.kH = 1;
    h.pH = 0;
  }));
}

TEST_CASE("winograd_conv3x3 vs a float64 direct convolution: random data, all the small sizes, within the bound") {
  const int64_t sizes[] = {1, 2, 3, 5, 7, 14, 15, 28};
  unsigned seed = 1;
  double worst = 0;
  for (int64_t H : sizes)
    for (int64_t W : sizes) {
      if (H == 28 && W == 28) continue;  // covered below with more channels
      for (bool bias : {false, true}) {
        const int64_t N = 1 + (H + W + bias) % 5;  // N = 1..5 across the grid
        worst = std::max(worst, check_against_reference(make(N, 3, H, W, 2, bias, false, seed++)));
      }
    }
  // C = 1, O = 1, and the CNN's channel counts at a small batch.
  worst = std::max(worst, check_against_reference(make(2, 1, 7, 9, 4, true, false, seed++)));
  worst = std::max(worst, check_against_reference(make(3, 5, 9, 7, 1, true, false, seed++)));
  worst = std::max(worst, check_against_reference(make(1, 1, 5, 5, 1, false, false, seed++)));
  worst = std::max(worst, check_against_reference(make(2, 32, 14, 14, 64, true, false, seed++)));
  worst = std::max(worst, check_against_reference(make(2, 64, 14, 14, 32, false, false, seed++)));
  worst = std::max(worst, check_against_reference(make(2, 1, 28, 28, 32, true, false, seed++)));
  // Channel counts around the 8x8 transposes (exact, with a tail, below 8) and widths
  // around 8 (the overlapping last block); a last group of fewer than 8 tiles.
  worst = std::max(worst, check_against_reference(make(1, 8, 8, 8, 8, false, false, seed++)));
  worst = std::max(worst, check_against_reference(make(2, 11, 9, 10, 3, true, false, seed++)));
  worst = std::max(worst, check_against_reference(make(2, 13, 7, 17, 5, true, false, seed++)));
  worst = std::max(worst, check_against_reference(make(1, 16, 3, 30, 9, false, false, seed++)));
  // Many blocks of tile rows (the L2 budget holds a few rows at these channel counts),
  // samples split across blocks, a short last block.
  worst = std::max(worst, check_against_reference(make(3, 40, 27, 29, 48, true, false, seed++)));
  MESSAGE("random data: largest error / bound = " << worst);
}

TEST_CASE("winograd_conv3x3 vs a float64 direct convolution: adversarial data (24 decades, cancellation)") {
  double worst = 0;
  unsigned seed = 100;
  for (int64_t H : {1, 2, 3, 5, 7, 14, 15})
    for (bool bias : {false, true}) {
      const int64_t W = H == 15 ? 14 : H + 1;
      worst = std::max(worst, check_against_reference(make(1 + H % 5, 4, H, W, 3, bias, true, seed++)));
    }
  // Cancellation: every weight plane sums to 0 and the input is a large constant plus
  // small noise, so interior outputs are tiny next to the terms (the bound is relative
  // to the terms, not to y).
  Problem p = make(2, 8, 15, 13, 4, true, false, seed++);
  for (int64_t oc = 0; oc < p.O * p.C; ++oc) {
    double mean = 0;
    for (int k = 0; k < 9; ++k) mean += p.w[oc * 9 + k] / 9.0;
    for (int k = 0; k < 9; ++k) p.w[oc * 9 + k] = static_cast<float>(p.w[oc * 9 + k] - mean);
  }
  for (float& v : p.x) v = 1.0e6f + v;
  worst = std::max(worst, check_against_reference(p));
  MESSAGE("adversarial data: largest error / bound = " << worst);
}

TEST_CASE("winograd_conv3x3 vs gs::conv2d in float32 (stride 1, padding 1)") {
  unsigned seed = 200;
  for (auto [N, C, H, W, O] : {std::array<int64_t, 5>{3, 4, 7, 6, 5},
                               {1, 1, 1, 1, 1},
                               {2, 32, 14, 14, 64},
                               {5, 3, 15, 5, 2},
                               {4, 1, 28, 28, 8}})
    for (bool bias : {false, true}) {
      const Problem p = make(N, C, H, W, O, bias, false, seed++);
      const std::vector<float> out = run_winograd(p);
      Tensor y = gs::conv2d(as_tensor(p.x, {N, C, H, W}), as_tensor(p.w, {O, C, 3, 3}),
                            bias ? as_tensor(p.b, {O}) : Tensor(), {1, 1}, {1, 1});
      REQUIRE(y.sizes() == gs::Shape{N, O, H, W});
      const float* yp = static_cast<const float*>(y.contiguous().raw_data());
      std::vector<double> ref, sdir;
      direct(p, ref, sdir);
      const std::vector<double> S = winograd_abs_scale(p);
      int64_t bad = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        // Both are within their own bound of the exact value (conv2d: a dot product of 9C + 1 terms).
        const double tol = gamma_k(C + 8.0) * S[i] + gamma_k(9.0 * C + 2) * sdir[i] + 2 * kU * std::abs(ref[i]);
        if (!(std::abs(static_cast<double>(out[i]) - yp[i]) <= tol) && bad++ < 3)
          FAIL_CHECK("N=" << N << " C=" << C << " H=" << H << " W=" << W << " O=" << O << " element " << i << ": "
                          << out[i] << " vs conv2d " << yp[i]);
      }
      CHECK(bad == 0);
    }
}

TEST_CASE("flip_transpose_3x3: the input gradient of conv2d is a Winograd conv of dY with the flipped weight") {
  unsigned seed = 300;
  for (auto [N, C, H, W, O] :
       {std::array<int64_t, 5>{2, 3, 7, 5, 4}, {1, 1, 1, 1, 1}, {3, 5, 14, 15, 2}, {2, 32, 14, 14, 64}})
    for (bool bias : {false, true}) {
      const Problem p = make(N, C, H, W, O, bias, false, seed++);
      std::mt19937 gen(seed++);
      const std::vector<float> dy = values(N * O * H * W, gen, false);
      // wt (C, O, 3, 3) by the definition, checked element by element.
      std::vector<float> wt(C * O * 9);
      flip_transpose_3x3(p.w.data(), wt.data(), O, C);
      for (int64_t o = 0; o < O; ++o)
        for (int64_t c = 0; c < C; ++c)
          for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j)
              REQUIRE(wt[((c * O + o) * 3 + i) * 3 + j] == p.w[((o * C + c) * 3 + 2 - i) * 3 + 2 - j]);
      // dX by Winograd: a conv of dY (N, O, H, W) with wt, O input channels and C outputs.
      const Problem g{N, O, H, W, C, dy, wt, {}};
      const std::vector<float> dx = run_winograd(g);
      check_against_reference(g);  // dX within the Winograd bound of the exact conv of dY with wt
      // ... and autograd's dX of conv2d (float32, through col2im) agrees within both bounds.
      Tensor x = as_tensor(p.x, {N, C, H, W}).requires_grad_(true);
      Tensor y = gs::conv2d(x, as_tensor(p.w, {O, C, 3, 3}), bias ? as_tensor(p.b, {O}) : Tensor(), {1, 1}, {1, 1});
      y.backward(as_tensor(dy, {N, O, H, W}));
      Tensor gx = x.grad().contiguous();
      REQUIRE(gx.sizes() == gs::Shape{N, C, H, W});
      const float* gp = static_cast<const float*>(gx.raw_data());
      std::vector<double> ref, sdir;
      direct(g, ref, sdir);
      const std::vector<double> S = winograd_abs_scale(g);
      int64_t bad = 0;
      for (size_t i = 0; i < dx.size(); ++i) {
        const double tol = gamma_k(O + 8.0) * S[i] + gamma_k(9.0 * O + 2) * sdir[i] + 2 * kU * std::abs(ref[i]);
        if (!(std::abs(static_cast<double>(dx[i]) - gp[i]) <= tol) && bad++ < 3)
          FAIL_CHECK("N=" << N << " C=" << C << " H=" << H << " W=" << W << " O=" << O << " element " << i << ": "
                          << dx[i] << " vs autograd " << gp[i]);
      }
      CHECK(bad == 0);
    }
}

TEST_CASE("winograd_conv3x3: Inf/NaN and intermediate overflow land as in the direct convolution") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // An Inf in x: with the transforms, Inf - Inf inside a tile would make NaNs at outputs
  // whose direct value is +-Inf (or finite: outputs whose window misses the Inf but share
  // its tile). The affected sample is recomputed directly; the others stay Winograd.
  Problem p = make(3, 2, 6, 6, 2, true, false, 400);
  for (float& v : p.w) v = std::abs(v) + 0.25f;  // positive weights: the direct result is +Inf, never NaN
  p.x[(1 * 2 + 0) * 36 + 2 * 6 + 3] = inf;       // sample 1, channel 0, (2, 3)
  std::vector<double> ref, sdir;
  direct(p, ref, sdir);
  const std::vector<float> out = run_winograd(p);
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isinf(ref[i]))
      CHECK(out[i] == inf);
    else
      CHECK(std::abs(out[i] - ref[i]) <= 1e-4 * (1 + sdir[i]));  // finite: including sample 1's
  }
  // A NaN in x: NaN exactly in the outputs whose window holds it.
  p = make(2, 1, 5, 5, 1, false, false, 401);
  p.x[25 + 0] = nan;  // sample 1, (0, 0): the window of outputs (0..1, 0..1)
  const std::vector<float> out2 = run_winograd(p);
  for (int64_t h = 0; h < 5; ++h)
    for (int64_t q = 0; q < 5; ++q) {
      CHECK(std::isnan(out2[25 + h * 5 + q]) == (h <= 1 && q <= 1));
      CHECK(std::isfinite(out2[h * 5 + q]));
    }
  // Finite inputs near the float range: the transforms' intermediates (|V| up to 4 max|x|)
  // overflow where the direct sums do not; the result must still be the finite one.
  p = make(1, 1, 4, 4, 1, false, false, 402);
  for (float& v : p.x) v = 1.0e38f;
  for (float& v : p.w) v = 0.0f;
  p.w[4] = 1.0f;  // the identity kernel: y = x
  const std::vector<float> out3 = run_winograd(p);
  for (size_t i = 0; i < out3.size(); ++i) CHECK(out3[i] == 1.0e38f);
  // A NaN weight: every output of its channel is NaN (the centre tap always, and im2col
  // multiplies the padding zeros by the corner taps too), the other channel is finite.
  p = make(2, 2, 4, 5, 2, false, false, 404);
  p.w[(1 * 2 + 0) * 9 + 0] = nan;  // w[1][0][0][0]
  const std::vector<float> out5 = run_winograd(p);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t i = 0; i < 20; ++i) {
      CHECK(std::isfinite(out5[(n * 2 + 0) * 20 + i]));
      CHECK(std::isnan(out5[(n * 2 + 1) * 20 + i]));
    }
  // A bias of NaN/Inf is added after the check: it does not send samples to the slow path
  // and lands in every output of its channel.
  p = make(2, 2, 3, 3, 2, true, false, 403);
  p.b[1] = inf;
  const std::vector<float> out4 = run_winograd(p);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t i = 0; i < 9; ++i) {
      CHECK(std::isfinite(out4[(n * 2 + 0) * 9 + i]));
      CHECK(out4[(n * 2 + 1) * 9 + i] == inf);
    }
}

TEST_CASE("winograd_conv3x3: empty sizes write nothing; C = 0 gives the bias") {
  std::vector<float> out(4, 7.0f);
  const float w = 1.0f, b[2] = {3.0f, -1.0f};
  winograd_conv3x3(nullptr, &w, b, out.data(), 0, 1, 2, 2, 1);
  CHECK(out == std::vector<float>(4, 7.0f));
  winograd_conv3x3(nullptr, nullptr, b, out.data(), 1, 0, 1, 2, 2);
  CHECK(out == std::vector<float>{3.0f, 3.0f, -1.0f, -1.0f});
}

// ---------------------------------------------------------------------------------------
// The weight gradient, winograd_conv3x3_weight_grad: Winograd F(3x3, 2x2) summed over all
// tiles of all samples. Reference: the definition in float64. Bound (the same argument as
// above): gw = G'^T [sum_t (A' g_t A'^T) ⊙ (B^T d_t B)] G' with g_t a 2x2 tile of dY,
// d_t its 4x4 input patch, A' (4x2) and G'^T (3x4) written out below, so
//   |computed - exact| <= gamma_k * S + (float64 terms),
//   S = |G'^T| [sum_t (|A'||g_t||A'^T|) ⊙ (|B^T||d_t||B|)] |G'|,
// with k = Tb + 5: 2 roundings in A' g A'^T, 2 in B^T d B, 1 product, Tb - 1 in the float32
// tile sum, 1 rounding the float64 total to float. The implementation (winograd.h) sums at
// most Tb = max(256, ceil(W / 2)) tiles in float32 before folding into float64, so
// k <= min(T, 256) + 5 at these widths whatever N is: the same order as the GEMM path's
// chain (a per-sample dot product of H*W terms, then N adds). The float64 fold and output
// transform add (blocks + 16) * 2^-53 * S at most.

namespace {

using gradsleuth::cpu::fast::winograd_conv3x3_weight_grad;

struct WProblem {
  int64_t N, C, H, W, O;
  std::vector<float> x, dy;
};

WProblem wmake(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, bool adversarial, unsigned seed) {
  std::mt19937 gen(seed);
  return {N, C, H, W, O, values(N * C * H * W, gen, adversarial), values(N * O * H * W, gen, adversarial)};
}

std::vector<float> run_wgrad(const WProblem& p) {
  std::vector<float> gw(p.O * p.C * 9, -12345.0f);  // poison: every element must be written
  winograd_conv3x3_weight_grad(p.x.data(), p.dy.data(), gw.data(), p.N, p.C, p.H, p.W, p.O);
  return gw;
}

double xat(const WProblem& p, int64_t n, int64_t c, int64_t h, int64_t q) {
  if (h < 0 || h >= p.H || q < 0 || q >= p.W) return 0.0;
  return p.x[((n * p.C + c) * p.H + h) * p.W + q];
}
double dyat(const WProblem& p, int64_t n, int64_t o, int64_t h, int64_t q) {
  if (h >= p.H || q >= p.W) return 0.0;  // past the plane: a partial last tile
  return p.dy[((n * p.O + o) * p.H + h) * p.W + q];
}

// The definition in float64, every product including the padding zeros (so 0 * Inf =
// NaN where the GEMM path's im2col columns have it): ref, and sdir = sum |dy||x| (the
// GEMM path's error scale).
void wdirect(const WProblem& p, std::vector<double>& ref, std::vector<double>& sdir) {
  ref.assign(p.O * p.C * 9, 0.0);
  sdir.assign(ref.size(), 0.0);
  for (int64_t o = 0; o < p.O; ++o)
    for (int64_t c = 0; c < p.C; ++c)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) {
          double acc = 0, mag = 0;
          for (int64_t n = 0; n < p.N; ++n)
            for (int64_t h = 0; h < p.H; ++h)
              for (int64_t q = 0; q < p.W; ++q) {
                const double t = dyat(p, n, o, h, q) * xat(p, n, c, h + i - 1, q + j - 1);
                acc += t;
                mag += std::abs(t);
              }
          ref[((o * p.C + c) * 3 + i) * 3 + j] = acc;
          sdir[((o * p.C + c) * 3 + i) * 3 + j] = mag;
        }
}

// S of the comment above for every gw element, in float64.
std::vector<double> wgrad_abs_scale(const WProblem& p) {
  const double Bt[4][4] = {{1, 0, 1, 0}, {0, 1, 1, 0}, {0, 1, 1, 0}, {0, 1, 0, 1}};  // |B^T|
  const double A[4][2] = {{1, 0}, {1, 1}, {1, 1}, {0, 1}};                           // |A'|
  const double Gt[3][4] = {{1, 0.5, 0.5, 0}, {0, 0.5, 0.5, 0}, {0, 0.5, 0.5, 1}};    // |G'^T|
  const int64_t tH = (p.H + 1) / 2, tW = (p.W + 1) / 2;
  std::vector<double> M(p.O * p.C * 16, 0.0), Ua(p.O * 16), Va(p.C * 16);
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t ty = 0; ty < tH; ++ty)
      for (int64_t tx = 0; tx < tW; ++tx) {
        for (int64_t o = 0; o < p.O; ++o)
          for (int a = 0; a < 4; ++a)
            for (int b = 0; b < 4; ++b) {
              double s = 0;
              for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j) s += A[a][i] * std::abs(dyat(p, n, o, 2 * ty + i, 2 * tx + j)) * A[b][j];
              Ua[o * 16 + a * 4 + b] = s;
            }
        for (int64_t c = 0; c < p.C; ++c)
          for (int a = 0; a < 4; ++a)
            for (int b = 0; b < 4; ++b) {
              double s = 0;
              for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j)
                  s += Bt[a][i] * std::abs(xat(p, n, c, 2 * ty - 1 + i, 2 * tx - 1 + j)) * Bt[b][j];
              Va[c * 16 + a * 4 + b] = s;
            }
        for (int64_t o = 0; o < p.O; ++o)
          for (int64_t c = 0; c < p.C; ++c)
            for (int e = 0; e < 16; ++e) M[(o * p.C + c) * 16 + e] += Ua[o * 16 + e] * Va[c * 16 + e];
      }
  std::vector<double> S(p.O * p.C * 9, 0.0);
  for (int64_t oc = 0; oc < p.O * p.C; ++oc)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        double s = 0;
        for (int a = 0; a < 4; ++a)
          for (int b = 0; b < 4; ++b) s += Gt[i][a] * M[oc * 16 + a * 4 + b] * Gt[j][b];
        S[oc * 9 + i * 3 + j] = s;
      }
  return S;
}

// The tolerance of the comment above for one element.
double wgrad_tol(const WProblem& p, double S) {
  const double T = static_cast<double>(p.N * ((p.H + 1) / 2) * ((p.W + 1) / 2));
  const double Tb = std::min(T, std::max(256.0, static_cast<double>((p.W + 1) / 2)));
  return gamma_k(Tb + 5) * S + (T + 16) * std::exp2(-53) * S;
}

// Checks against the float64 definition within the bound; returns the largest error /
// bound, and (through err_gemm_scale) the largest error / (u * sum |dy||x|), the error
// in the units of the GEMM path's scale.
double check_wgrad(const WProblem& p, double* err_gemm_scale = nullptr) {
  const std::vector<float> gw = run_wgrad(p);
  std::vector<double> ref, sdir;
  wdirect(p, ref, sdir);
  const std::vector<double> S = wgrad_abs_scale(p);
  double worst = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < gw.size(); ++i) {
    const double tol = wgrad_tol(p, S[i]);
    const double err = std::abs(gw[i] - ref[i]);
    if (!(err <= tol) && bad++ < 3)
      FAIL_CHECK("N=" << p.N << " C=" << p.C << " H=" << p.H << " W=" << p.W << " O=" << p.O << " element " << i << ": "
                      << gw[i] << " vs " << ref[i] << " (error " << err << " > bound " << tol << ")");
    if (tol > 0) worst = std::max(worst, err / tol);
    if (err_gemm_scale && sdir[i] > 0) *err_gemm_scale = std::max(*err_gemm_scale, err / (kU * sdir[i]));
  }
  CHECK(bad == 0);
  return worst;
}

}  // namespace

TEST_CASE("winograd_conv3x3_weight_grad vs a float64 direct weight gradient: random data, small sizes") {
  const int64_t sizes[] = {1, 2, 3, 5, 7, 14, 15};
  unsigned seed = 500;
  double worst = 0;
  for (int64_t H : sizes)
    for (int64_t W : sizes) worst = std::max(worst, check_wgrad(wmake(1 + (H + W) % 5, 3, H, W, 2, false, seed++)));
  // C, O in {1, 8, 33} (the 8x8 transposes exact, with a tail, and below 8).
  for (int64_t C : {1, 8, 33})
    for (int64_t O : {1, 8, 33})
      for (auto [H, W] : {std::array<int64_t, 2>{7, 5}, {14, 15}})
        worst = std::max(worst, check_wgrad(wmake(1 + (C + O + H) % 5, C, H, W, O, false, seed++)));
  // Several blocks of tiles (256 tiles a block: N * 8 * 8 = 320 here) and the CNN's
  // second layer at a small batch.
  worst = std::max(worst, check_wgrad(wmake(5, 9, 15, 15, 4, false, seed++)));
  double gemm_units = 0;
  worst = std::max(worst, check_wgrad(wmake(4, 32, 14, 14, 64, false, seed++), &gemm_units));
  MESSAGE("random data: largest error / bound = "
          << worst << "; at (4, 32, 14, 14) -> 64, largest error / (u sum|dy||x|) = " << gemm_units);
}

TEST_CASE("winograd_conv3x3_weight_grad vs float64: wide dynamic range, cancellation, many blocks") {
  double worst = 0;
  unsigned seed = 600;
  for (int64_t H : {1, 2, 3, 5, 7, 14, 15})
    worst = std::max(worst, check_wgrad(wmake(1 + H % 5, 4, H, H == 15 ? 14 : H + 1, 3, true, seed++)));
  worst = std::max(worst, check_wgrad(wmake(3, 8, 14, 14, 8, true, seed++)));
  // Cancellation: x a large constant plus small noise, dY of zero mean per plane, so each
  // gw is tiny next to its terms (the bound is relative to the terms, not to gw).
  WProblem p = wmake(3, 8, 15, 13, 5, false, seed++);
  for (float& v : p.x) v = 1.0e6f + v;
  for (int64_t i = 0; i < p.N * p.O; ++i) {
    double mean = 0;
    for (int64_t k = 0; k < p.H * p.W; ++k) mean += p.dy[i * p.H * p.W + k];
    mean /= static_cast<double>(p.H * p.W);
    for (int64_t k = 0; k < p.H * p.W; ++k)
      p.dy[i * p.H * p.W + k] = static_cast<float>(p.dy[i * p.H * p.W + k] - mean);
  }
  worst = std::max(worst, check_wgrad(p));
  // A long sum: 64 samples, 3136 tiles in 13 blocks: the bound keeps k = 261, not 3141.
  worst = std::max(worst, check_wgrad(wmake(64, 8, 14, 14, 8, false, seed++)));
  MESSAGE("adversarial data: largest error / bound = " << worst);
}

TEST_CASE("winograd_conv3x3_weight_grad: Inf/NaN land as in the GEMM path; intermediate overflow is recomputed") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // The pattern of the float64 definition with the padding zeros multiplied (0 * Inf = NaN),
  // which is what im2col + GEMM computes: same NaNs, same signed Infs, finite values close.
  auto check_pattern = [](const WProblem& p) {
    const std::vector<float> gw = run_wgrad(p);
    std::vector<double> ref, sdir;
    wdirect(p, ref, sdir);
    int64_t nonfinite = 0;
    for (size_t i = 0; i < gw.size(); ++i) {
      INFO("element " << i << ": " << gw[i] << " vs " << ref[i]);
      if (std::isnan(ref[i]))
        CHECK(std::isnan(gw[i]));
      else if (std::isinf(ref[i]))
        CHECK(gw[i] == static_cast<float>(ref[i]));
      else
        CHECK(std::abs(gw[i] - ref[i]) <= gamma_k(static_cast<double>(p.N * p.H * p.W + 2)) * sdir[i]);
      nonfinite += !std::isfinite(ref[i]);
    }
    return nonfinite;
  };
  // An Inf in x (positive dY: the direct sums are +Inf where a product meets it; the corner
  // taps reading past the edge multiply padding zeros, never the Inf).
  WProblem p = wmake(3, 3, 6, 5, 2, false, 700);
  for (float& v : p.dy) v = std::abs(v) + 0.25f;
  p.x[(1 * 3 + 2) * 30 + 2 * 5 + 3] = inf;  // sample 1, channel 2, (2, 3)
  CHECK(check_pattern(p) == 2 * 9);         // gw[:, 2] all +Inf
  // An Inf in x at the corner: taps whose window misses it for every dY position stay finite.
  p = wmake(2, 2, 5, 5, 2, false, 701);
  for (float& v : p.dy) v = std::abs(v) + 0.25f;
  p.x[0] = -inf;  // sample 0, channel 0, (0, 0): only taps (i, j) with i, j <= 1 read it
  CHECK(check_pattern(p) == 2 * 4);
  // A NaN in dY: NaN in every gw of its output channel (its products with x and with the
  // padding zeros), the other channel finite.
  p = wmake(2, 3, 4, 7, 2, false, 702);
  p.dy[(1 * 2 + 1) * 28 + 5] = nan;  // sample 1, channel 1
  CHECK(check_pattern(p) == 3 * 9);
  // An Inf in dY at an edge: 0 * Inf = NaN for the taps reading the padding there.
  p = wmake(1, 2, 3, 3, 1, false, 703);
  p.dy[0] = inf;
  CHECK(check_pattern(p) == 2 * 9);
  // Finite data near the float range: V (up to 4 max|x|) overflows where the direct sums
  // do not; the result must be the finite one.
  p = wmake(1, 1, 4, 4, 1, false, 704);
  for (float& v : p.x) v = 1.0e38f;
  for (float& v : p.dy) v = 0.0f;
  p.dy[5] = 1.0f;  // (1, 1): every tap reads an interior x
  const std::vector<float> gw = run_wgrad(p);
  for (float v : gw) CHECK(v == 1.0e38f);
}

TEST_CASE("winograd_conv3x3_weight_grad: empty sizes give zeros, or write nothing") {
  std::vector<float> gw(9 * 2, 7.0f);
  winograd_conv3x3_weight_grad(nullptr, nullptr, gw.data(), 0, 1, 3, 3, 2);
  CHECK(gw == std::vector<float>(18, 0.0f));
  gw.assign(18, 7.0f);
  winograd_conv3x3_weight_grad(nullptr, nullptr, gw.data(), 2, 0, 3, 3, 2);
  CHECK(gw == std::vector<float>(18, 7.0f));
}

TEST_CASE("conv2d's weight gradient: Auto (Winograd) and Gemm agree within their bounds at the CNN's second layer") {
  // The fused conv2d picks the algorithm (on the CPU, at any thread count).
  const int64_t N = 6, C = 32, H = 14, W = 14, O = 64;
  const WProblem p = wmake(N, C, H, W, O, false, 800);
  auto grad_w = [&](gs::ConvAlgorithm algo) {
    gs::set_conv_algorithm(algo);
    gs::Generator gen(3);
    Tensor w = gs::randn({O, C, 3, 3}, gs::kFloat32, &gen).requires_grad_(true);
    Tensor y = gs::conv2d(as_tensor(p.x, {N, C, H, W}), w, Tensor(), {1, 1}, {1, 1});
    y.backward(as_tensor(p.dy, {N, O, H, W}));
    gs::set_conv_algorithm(gs::ConvAlgorithm::Auto);
    Tensor g = w.grad().contiguous();
    const float* gp = static_cast<const float*>(g.raw_data());
    return std::vector<float>(gp, gp + O * C * 9);
  };
  const std::vector<float> auto_gw = grad_w(gs::ConvAlgorithm::Auto), gemm_gw = grad_w(gs::ConvAlgorithm::Gemm);
  std::vector<double> ref, sdir;
  wdirect(p, ref, sdir);
  const std::vector<double> S = wgrad_abs_scale(p);
  int64_t bad = 0, differ = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    // Winograd's bound, and the GEMM path's: per sample a dot product of H*W terms, N adds.
    const double tol = wgrad_tol(p, S[i]) + gamma_k(static_cast<double>(H * W + N)) * sdir[i];
    differ += auto_gw[i] != gemm_gw[i];
    if (!(std::abs(static_cast<double>(auto_gw[i]) - gemm_gw[i]) <= tol) && bad++ < 3)
      FAIL_CHECK("element " << i << ": Auto " << auto_gw[i] << " vs Gemm " << gemm_gw[i] << " (bound " << tol << ")");
    if (!(std::abs(gemm_gw[i] - ref[i]) <= gamma_k(static_cast<double>(H * W + N)) * sdir[i]) && bad++ < 3)
      FAIL_CHECK("element " << i << ": Gemm " << gemm_gw[i] << " vs float64 " << ref[i]);
  }
  CHECK(bad == 0);
  CHECK(differ > 0);  // the two paths really are different algorithms
}
