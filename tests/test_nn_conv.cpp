// Tests for nn/conv.h: Conv2d (stride, padding, dilation, groups, bias),
// MaxPool2d and AvgPool2d against plain loops; gradients by central differences.
// Dimension letters: N = batch, C = in channels, O = out channels, H/W = size.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <memory>

#include "nn/conv.h"
#include "nn_test_util.h"

namespace nn = gs::nn;
using gs::Tensor;
using nntest::vals;
using nntest::Vec;
using Params = std::vector<std::pair<std::string, Tensor>>;

namespace {

// Direct convolution: out[n, o, i, j] = b[o] + sum_{c in group, ki, kj} w[o, c, ki, kj] * x[n, g*Cg + c, ...]
Vec conv_ref(const Tensor& x, const Tensor& w, const Tensor& b, int s, int p, int d, int groups, int64_t& oH,
             int64_t& oW) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), kH = w.size(2), kW = w.size(3);
  oH = (H + 2 * p - d * (kH - 1) - 1) / s + 1;
  oW = (W + 2 * p - d * (kW - 1) - 1) / s + 1;
  const int64_t Og = O / groups;
  Vec X = vals(x), Wv = vals(w), B = b.defined() ? vals(b) : Vec(O, 0.0), out(N * O * oH * oW);
  (void)C;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < oH; ++i)
        for (int64_t j = 0; j < oW; ++j) {
          double acc = B[o];
          const int64_t g = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t ki = 0; ki < kH; ++ki)
              for (int64_t kj = 0; kj < kW; ++kj) {
                const int64_t h = i * s - p + ki * d, ww = j * s - p + kj * d;
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                acc += Wv[((o * Cg + c) * kH + ki) * kW + kj] * X[((n * x.size(1) + g * Cg + c) * H + h) * W + ww];
              }
          out[((n * O + o) * oH + i) * oW + j] = acc;
        }
  return out;
}

}  // namespace

TEST_CASE("Conv2d: options, parameters, repr") {
  auto conv = std::make_shared<nn::Conv2d>(nn::Conv2dOptions(4, 6, 3).stride(2).padding(1).groups(2));
  CHECK(conv->weight.shape() == gs::Shape{6, 2, 3, 3});
  CHECK(conv->bias.shape() == gs::Shape{6});
  CHECK(conv->extra_repr() == "4, 6, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), groups=2");
  // Default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = C/groups * kH * kW = 18.
  const double bound = 1.0 / std::sqrt(18.0);
  CHECK(gs::amax(gs::abs(conv->weight)).item<double>() <= bound);
  CHECK(gs::amax(gs::abs(conv->bias)).item<double>() <= bound);

  auto c2 = std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 2, {3, 5}).dilation({2, 1}).bias(false));
  CHECK(c2->weight.shape() == gs::Shape{2, 1, 3, 5});
  CHECK_FALSE(c2->bias.defined());
  CHECK(c2->extra_repr() == "1, 2, kernel_size=(3, 5), stride=(1, 1), dilation=(2, 1), bias=false");
  CHECK(std::make_shared<nn::Conv2d>(1, 32, 3)->repr() == "Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1))");

  nntest::check_error([] { nn::Conv2d(nn::Conv2dOptions(3, 4, 3).groups(2)); }, {"Conv2d", "groups=2", "divide"});
}

TEST_CASE("Conv2d: forward matches direct convolution") {
  struct Case {
    int C, O, k, s, p, d, g;
    bool bias;
  };
  for (Case cs : {Case{1, 2, 3, 1, 0, 1, 1, true}, Case{2, 3, 3, 2, 1, 1, 1, true}, Case{2, 2, 2, 1, 2, 2, 1, false},
                  Case{4, 6, 3, 1, 1, 1, 2, true}, Case{3, 3, 3, 2, 1, 2, 3, true}}) {
    CAPTURE(cs.C);
    CAPTURE(cs.O);
    CAPTURE(cs.k);
    CAPTURE(cs.s);
    CAPTURE(cs.p);
    CAPTURE(cs.d);
    CAPTURE(cs.g);
    nn::Conv2d conv(
        nn::Conv2dOptions(cs.C, cs.O, cs.k).stride(cs.s).padding(cs.p).dilation(cs.d).groups(cs.g).bias(cs.bias));
    Tensor x = gs::randn({2, cs.C, 7, 6});
    Tensor y = conv(x);
    int64_t oH, oW;
    Vec want = conv_ref(x, conv.weight, conv.bias, cs.s, cs.p, cs.d, cs.g, oH, oW);
    REQUIRE(y.shape() == gs::Shape{2, cs.O, oH, oW});
    nntest::check_close(y, want, 1e-4, 1e-4);
  }
}

TEST_CASE("conv2d: stride 1 with the output as wide as the input (one flat loop per kernel tap)") {
  // im2col and col2im walk each kernel tap as one flat range when the stride is 1 and
  // outW == W, masking the pixels whose column falls outside the input row. Cases:
  // the CNN's 3x3/padding 1, wider and dilated kernels, a kernel narrower than tall,
  // rows that shrink while the width stays, taps with no valid row or column at all
  // (1-pixel-high and 2-pixel-wide images), odd sizes and a non-contiguous input;
  // forward against the direct sum in float64, gradients by central differences.
  struct Case {
    int64_t H, W, kH, kW, pH, pW, dH, dW;
  };
  for (Case cs : {Case{6, 7, 3, 3, 1, 1, 1, 1}, Case{5, 9, 5, 5, 2, 2, 1, 1}, Case{7, 6, 3, 3, 2, 2, 2, 2},
                  Case{4, 5, 1, 1, 0, 0, 1, 1}, Case{6, 7, 3, 5, 0, 2, 1, 1}, Case{5, 5, 2, 3, 0, 1, 1, 1},
                  Case{5, 1, 3, 1, 1, 0, 1, 1}, Case{1, 5, 3, 3, 1, 1, 1, 1}, Case{3, 2, 3, 3, 3, 3, 3, 3}}) {
    CAPTURE(cs.H);
    CAPTURE(cs.W);
    CAPTURE(cs.kH);
    CAPTURE(cs.kW);
    CAPTURE(cs.pH);
    CAPTURE(cs.pW);
    CAPTURE(cs.dH);
    CAPTURE(cs.dW);
    const int64_t N = 2, C = 3, O = 2;
    // A (N, C, W, H) tensor transposed: the conv reads a non-contiguous view.
    Tensor x = gs::randn({N, C, cs.W, cs.H}, gs::kFloat64).transpose(2, 3);
    Tensor w = gs::randn({O, C, cs.kH, cs.kW}, gs::kFloat64), b = gs::randn({O}, gs::kFloat64);
    Tensor y = gs::conv2d(x, w, b, {1, 1}, {cs.pH, cs.pW}, {cs.dH, cs.dW});
    const int64_t oH = cs.H + 2 * cs.pH - cs.dH * (cs.kH - 1), oW = cs.W + 2 * cs.pW - cs.dW * (cs.kW - 1);
    REQUIRE(oW == cs.W);
    REQUIRE(y.shape() == gs::Shape{N, O, oH, oW});
    Vec X = vals(x.contiguous()), Wv = vals(w), B = vals(b), want(N * O * oH * oW);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t i = 0; i < oH; ++i)
          for (int64_t j = 0; j < oW; ++j) {
            double acc = B[o];
            for (int64_t c = 0; c < C; ++c)
              for (int64_t ki = 0; ki < cs.kH; ++ki)
                for (int64_t kj = 0; kj < cs.kW; ++kj) {
                  const int64_t h = i - cs.pH + ki * cs.dH, ww = j - cs.pW + kj * cs.dW;
                  if (h < 0 || h >= cs.H || ww < 0 || ww >= cs.W) continue;
                  acc += Wv[((o * C + c) * cs.kH + ki) * cs.kW + kj] * X[((n * C + c) * cs.H + h) * cs.W + ww];
                }
            want[((n * O + o) * oH + i) * oW + j] = acc;
          }
    nntest::check_close(y, want, 1e-12, 1e-12);
    // Float32 takes the same paths: same values to float precision.
    nntest::check_close(
        gs::conv2d(x.to(gs::kFloat32), w.to(gs::kFloat32), b.to(gs::kFloat32), {1, 1}, {cs.pH, cs.pW}, {cs.dH, cs.dW}),
        want, 1e-4, 1e-4);
    Tensor xl = x.contiguous().detach().requires_grad_(),
           wl = w.detach().requires_grad_();  // the check perturbs raw data
    GS_CHECK_GRADS(
        [&] {
          return gs::conv2d(xl, wl, Tensor(), {1, 1}, {cs.pH, cs.pW}, {cs.dH, cs.dW});
        },
        (Params{{"x", xl}, {"weight", wl}}));
  }
}

TEST_CASE("Conv2d: gradients (float64), with groups, stride, padding, dilation") {
  nn::Conv2d conv(nn::Conv2dOptions(4, 2, 3).stride(2).padding(1).dilation({1, 2}).groups(2));
  conv.to(gs::kFloat64);
  Tensor x = gs::randn({2, 4, 5, 6}, gs::kFloat64).requires_grad_();
  GS_CHECK_GRADS([&] { return conv(x); }, (Params{{"weight", conv.weight}, {"bias", conv.bias}, {"x", x}}));
}

TEST_CASE("Conv2d: shape errors explain the fix") {
  nn::Conv2d conv(3, 8, 3);
  nntest::check_error([&] { conv(gs::zeros({3, 32, 32})); }, {"Conv2d(3, 8", "[3, 32, 32]", "unsqueeze(0)"});
  nntest::check_error([&] { conv(gs::zeros({4, 32, 32, 3})); }, {"Conv2d", "channels-last", "permute({0, 3, 1, 2})"});
  nntest::check_error([&] { conv(gs::zeros({4, 1, 32, 32})); }, {"Conv2d", "3 input channels", "in_channels=1"});
  nntest::check_error([&] { conv(gs::zeros({4, 784})); }, {"Conv2d", "[4, 784]", "view"});
  nntest::check_error([&] { conv(gs::zeros({1, 3, 2, 2})); }, {"Conv2d", "too small", "padding"});
}

TEST_CASE("MaxPool2d and AvgPool2d: forward against loops, gradients") {
  Tensor x = gs::randn({2, 3, 6, 5});
  Vec X = vals(x);
  SUBCASE("max pool 2x2 (stride defaults to the kernel)") {
    auto pool = std::make_shared<nn::MaxPool2d>(2);
    CHECK(pool->extra_repr() == "kernel_size=(2, 2), stride=(2, 2), padding=(0, 0)");
    Tensor y = (*pool)(x);
    REQUIRE(y.shape() == gs::Shape{2, 3, 3, 2});
    Vec want;
    for (int nc = 0; nc < 6; ++nc)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 2; ++j) {
          double m = -INFINITY;
          for (int a = 0; a < 2; ++a)
            for (int b = 0; b < 2; ++b) m = std::max(m, X[nc * 30 + (2 * i + a) * 5 + 2 * j + b]);
          want.push_back(m);
        }
    nntest::check_close(y, want);
  }
  SUBCASE("max pool 3x3 stride 2 padding 1 (padding never wins)") {
    nn::MaxPool2d pool(nn::MaxPool2dOptions(3).stride(2).padding(1));
    Tensor y = pool(x);
    REQUIRE(y.shape() == gs::Shape{2, 3, 3, 3});
    Vec want;
    for (int nc = 0; nc < 6; ++nc)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) {
          double m = -INFINITY;
          for (int a = 0; a < 3; ++a)
            for (int b = 0; b < 3; ++b) {
              const int h = 2 * i - 1 + a, w = 2 * j - 1 + b;
              if (h >= 0 && h < 6 && w >= 0 && w < 5) m = std::max(m, X[nc * 30 + h * 5 + w]);
            }
          want.push_back(m);
        }
    nntest::check_close(y, want);
  }
  SUBCASE("avg pool 2x3 stride 1, padding counted as zeros") {
    nn::AvgPool2d pool(nn::AvgPool2dOptions({2, 3}).stride(1).padding({1, 1}));
    Tensor y = pool(x);
    REQUIRE(y.shape() == gs::Shape{2, 3, 7, 5});
    Vec want;
    for (int nc = 0; nc < 6; ++nc)
      for (int i = 0; i < 7; ++i)
        for (int j = 0; j < 5; ++j) {
          double s = 0;
          for (int a = 0; a < 2; ++a)
            for (int b = 0; b < 3; ++b) {
              const int h = i - 1 + a, w = j - 1 + b;
              if (h >= 0 && h < 6 && w >= 0 && w < 5) s += X[nc * 30 + h * 5 + w];
            }
          want.push_back(s / 6.0);
        }
    nntest::check_close(y, want);
  }
  SUBCASE("gradients") {
    Tensor xd = gs::randn({2, 2, 5, 5}, gs::kFloat64).requires_grad_();
    nn::MaxPool2d mp(nn::MaxPool2dOptions(2).stride(1));
    GS_CHECK_GRADS([&] { return mp(xd); }, (Params{{"x", xd}}));
    nn::AvgPool2d ap(nn::AvgPool2dOptions(3).stride(2).padding(1));
    GS_CHECK_GRADS([&] { return ap(xd); }, (Params{{"x", xd}}));
  }
  SUBCASE("errors") {
    nn::MaxPool2d pool(2);
    nntest::check_error([&] { pool(gs::zeros({3, 4, 4})); }, {"MaxPool2d", "unsqueeze(0)"});
    nntest::check_error([&] { pool(gs::zeros({1, 1, 1, 4})); }, {"MaxPool2d", "too small"});
    nntest::check_error([] { nn::MaxPool2d(nn::MaxPool2dOptions(2).padding(2)); }, {"MaxPool2d", "half the kernel"});
  }
}

TEST_CASE("max_pool2d 2x2: every output width (overrunning and exact rows) against a loop") {
  // The 2x2/stride-2 kernel computes rows of 5..8 and 9..16 outputs as one vector of 8 or 16
  // that overruns into the next row (the chunk's last row exactly) and runs exact rows
  // otherwise; odd input sizes drop their last row/column. Planes of one output row
  // (H = 2, 3) overrun into the next plane's output. Values
  // from a small set make ties common, a few NaNs sit in random places; the output and
  // the gradient's position (sum().backward() sends 1 to each window's winner) are
  // checked against a loop that applies the rule: first NaN, else first maximum.
  for (int64_t W : {14, 15, 16, 17, 28, 29, 32, 33, 6, 3}) {
    for (int64_t H : {W % 2 ? int64_t{5} : int64_t{4}, int64_t{2}, int64_t{3}}) {
      for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
        CAPTURE(W);
        CAPTURE(H);
        CAPTURE(dt);
        const int64_t N = 2, C = 3, oH = H / 2, oW = W / 2;
        Vec xv(N * C * H * W);
        for (size_t i = 0; i < xv.size(); ++i) xv[i] = double((i * 2654435761u >> 7) % 4);
        xv[5] = NAN;
        xv[xv.size() / 2] = NAN;
        xv[xv.size() - 3] = NAN;
        Tensor x = gs::tensor(xv, {N, C, H, W}, dt).requires_grad_();
        Tensor y = gs::max_pool2d(x, {2, 2});
        REQUIRE(y.shape() == gs::Shape{N, C, oH, oW});
        y.sum().backward();
        Vec Y = vals(y), G = vals(x.grad()), wantG(xv.size(), 0.0);
        for (int64_t nc = 0; nc < N * C; ++nc)
          for (int64_t i = 0; i < oH; ++i)
            for (int64_t j = 0; j < oW; ++j) {
              int64_t best = -1;
              for (int64_t a = 0; a < 2; ++a)
                for (int64_t c = 0; c < 2; ++c) {
                  const int64_t k = (nc * H + 2 * i + a) * W + 2 * j + c;
                  if (best < 0)
                    best = k;
                  else if (!std::isnan(xv[best]) && (std::isnan(xv[k]) || xv[k] > xv[best]))
                    best = k;
                }
              const double got = Y[(nc * oH + i) * oW + j];
              CAPTURE(nc);
              CAPTURE(i);
              CAPTURE(j);
              if (std::isnan(xv[best]))
                CHECK(std::isnan(got));
              else
                CHECK(got == xv[best]);
              wantG[best] += 1.0;
            }
        CHECK(G == wantG);
      }
    }
  }
}

TEST_CASE("max_pool2d: ties go to the first element, the first NaN wins, on every kernel path") {
  // Three windows per case: a tie (first index wins the gradient), a NaN in the
  // middle (NaN out, gradient to the NaN), and a plain maximum in the last slot.
  // The 2x2/stride-2 window, the general no-padding path (3x3 stride 3) and the
  // padded path (2x2 stride 2, padding 1) are written by separate code.
  struct Case {
    int k, s, p;
  };
  for (Case cs : {Case{2, 2, 0}, Case{3, 3, 0}, Case{2, 2, 1}}) {
    for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
      CAPTURE(cs.k);
      CAPTURE(cs.p);
      CAPTURE(dt);
      const int H = cs.k, W = 3 * cs.k;  // one row of three windows (no padding)
      // Window 0: all equal (1.0); window 1: a NaN at its second element; window 2: max at its last.
      std::vector<double> xv(H * W);
      for (int h = 0; h < H; ++h)
        for (int w = 0; w < W; ++w) {
          double v = 1.0;
          if (w >= cs.k && w < 2 * cs.k) v = (h == 0 && w == cs.k + 1) ? NAN : 5.0 + w;
          if (w >= 2 * cs.k) v = (h == H - 1 && w == W - 1) ? 9.0 : 2.0;
          xv[h * W + w] = v;
        }
      Tensor x = gs::tensor(xv, {1, 1, H, W}, dt).requires_grad_();
      Tensor y = gs::max_pool2d(x, {cs.k, cs.k}, {cs.s, cs.s}, {cs.p, cs.p});
      Vec Y = vals(y);
      y.sum().backward();
      Vec G = vals(x.grad());
      if (cs.p == 0) {
        REQUIRE(Y.size() == 3);
        CHECK(Y[0] == 1.0);
        CHECK(std::isnan(Y[1]));
        CHECK(Y[2] == 9.0);
        CHECK(G[0] == 1.0);  // the tie: first element only
        for (int i = 1; i < cs.k; ++i) CHECK(G[i] == 0.0);
        CHECK(G[cs.k + 1] == 1.0);             // the NaN takes window 1's gradient
        CHECK(G[(H - 1) * W + W - 1] == 1.0);  // window 2's maximum
      } else {
        // Padded: every output is still a real element, never the padding.
        for (double v : Y) CHECK((std::isnan(v) || v >= 1.0));
        double total = 0;
        for (double g : G) total += g;
        CHECK(total == double(Y.size()));  // one winner per window
      }
    }
  }
}

TEST_CASE("max_pool2d backward writes every element of its uninitialised buffer, on every kernel path") {
  // The backward allocates its gradient without zeroing it: the kernel writes each element,
  // 0 plus the gradients of the windows it won. A freed buffer of NaN of the same size just
  // before (the allocator hands it back) shows any element a kernel leaves unwritten. The
  // gradient holds -0 (written as 0 + -0 = +0, as a scatter into zeros does), NaN and inf,
  // checked bit for bit against a loop. Ties and NaNs in x as in the tests above; odd sizes
  // leave rows and columns that no 2x2 window covers.
  struct Case {
    int64_t k, s, p;
  };
  for (Case cs : {Case{2, 2, 0}, Case{3, 2, 0}, Case{2, 1, 0}, Case{3, 2, 1}, Case{3, 3, 0}}) {
    for (int64_t W : {14, 15, 7, 28, 29, 9}) {
      for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
        CAPTURE(cs.k);
        CAPTURE(cs.s);
        CAPTURE(cs.p);
        CAPTURE(W);
        CAPTURE(dt);
        const int64_t N = 2, C = 3, H = W % 2 ? 7 : 6;
        Vec xv(N * C * H * W);
        for (size_t i = 0; i < xv.size(); ++i) xv[i] = double((i * 2654435761u >> 7) % 4);
        xv[5] = NAN;
        xv[xv.size() / 2] = NAN;
        xv[xv.size() - 3] = NAN;
        Tensor x = gs::tensor(xv, {N, C, H, W}, dt).requires_grad_();
        Tensor y = gs::max_pool2d(x, {cs.k, cs.k}, {cs.s, cs.s}, {cs.p, cs.p});
        const int64_t oH = y.size(2), oW = y.size(3);
        Vec gv(static_cast<size_t>(y.numel()));
        for (size_t i = 0; i < gv.size(); ++i) gv[i] = double((i * 40503u >> 3) % 7) - 3.0;
        gv[1] = -0.0;
        gv[2] = NAN;
        gv[gv.size() - 1] = INFINITY;
        gv[gv.size() / 3] = -0.0;
        Tensor g = gs::tensor(gv, y.shape(), dt);
        { Tensor junk = gs::full({N, C, H, W}, NAN, dt); }
        Tensor gx = gs::autograd::grad({y}, {x}, {g})[0];
        // The loop: each window's winner (first NaN, else first maximum, padding skipped) gets
        // 0 + the sum of the gradients of the windows it won.
        Vec want(xv.size(), 0.0);
        for (int64_t nc = 0; nc < N * C; ++nc)
          for (int64_t i = 0; i < oH; ++i)
            for (int64_t j = 0; j < oW; ++j) {
              int64_t best = -1;
              for (int64_t a = 0; a < cs.k; ++a)
                for (int64_t c = 0; c < cs.k; ++c) {
                  const int64_t h = i * cs.s - cs.p + a, w = j * cs.s - cs.p + c;
                  if (h < 0 || h >= H || w < 0 || w >= W) continue;
                  const int64_t e = (nc * H + h) * W + w;
                  if (best < 0)
                    best = e;
                  else if (!std::isnan(xv[best]) && (std::isnan(xv[e]) || xv[e] > xv[best]))
                    best = e;
                }
              want[best] += gv[(nc * oH + i) * oW + j];
            }
        const Vec G = vals(gx);
        int64_t bad = 0;
        for (size_t i = 0; i < G.size(); ++i) bad += !nntest::same_bits(G[i], want[i]);
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("max_pool2d 2x2 backward: float64 gradients by differences with odd sizes, and its double backward") {
  Tensor x = gs::randn({2, 3, 7, 9}, gs::kFloat64).requires_grad_();  // distinct values: no ties
  GS_CHECK_GRADS([&] { return gs::max_pool2d(x, {2, 2}); }, (Params{{"x", x}}));
  // The second derivative's pooling term goes through the gather at the argmax (unchanged):
  // d(sum(gx^2))/dg = 2 g gathered back at each window's winner, i.e. 2 g.
  Tensor y = gs::max_pool2d(x, {2, 2});
  Tensor g = gs::randn(y.shape(), gs::kFloat64).requires_grad_();
  Tensor gx = gs::autograd::grad({y}, {x}, {g}, std::nullopt, /*create_graph=*/true)[0];
  Tensor gg = gs::autograd::grad({(gx * gx).sum()}, {g})[0];
  nntest::check_close(gg, vals(g * 2.0), 1e-12, 1e-12);
}
