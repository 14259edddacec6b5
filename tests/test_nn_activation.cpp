// Tests for nn/activation.h: each activation against std:: math on every element,
// gradients by central differences, and the softmax dim errors.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "nn/activation.h"
#include "nn_test_util.h"

namespace nn = gs::nn;
using gs::Tensor;
using nntest::vals;
using nntest::Vec;
using Params = std::vector<std::pair<std::string, Tensor>>;

TEST_CASE("elementwise activations: values and gradients") {
  Tensor x = gs::tensor({-3.0, -1.0, -0.25, 0.3, 1.0, 2.5, 6.0, -6.0});
  Vec X = vals(x);
  auto expect = [&](nn::Module& m, const std::function<double(double)>& f) {
    Vec want;
    for (double v : X) want.push_back(f(v));
    nntest::check_close(m(x), want, 1e-6, 1e-5);
    Tensor xd = (gs::randn({3, 4}, gs::kFloat64) * 2.0).requires_grad_();
    GS_CHECK_GRADS([&] { return m(xd); }, (Params{{"x", xd}}));
  };
  nn::ReLU relu;
  expect(relu, [](double v) { return v > 0 ? v : 0.0; });
  nn::LeakyReLU leaky(0.2);
  CHECK(leaky.extra_repr() == "negative_slope=0.2");
  expect(leaky, [](double v) { return v > 0 ? v : 0.2 * v; });
  nn::Sigmoid sig;
  expect(sig, [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
  nn::Tanh th;
  expect(th, [](double v) { return std::tanh(v); });
  nn::GELU gelu;
  CHECK(gelu.extra_repr() == "approximate='none'");
  expect(gelu, [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); });
  nn::GELU gelu_tanh("tanh");
  expect(gelu_tanh,
         [](double v) { return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))); });
  nntest::check_error([] { nn::GELU("fast"); }, {"GELU", "'none' or 'tanh'"});
  nntest::check_error([&] { relu(gs::tensor(std::vector<int64_t>{1, 2}, {2})); }, {"ReLU", "floating-point"});
}

TEST_CASE("Softmax and LogSoftmax along a dim") {
  Tensor x = gs::tensor({1.0, 2.0, 3.0, -1.0, 0.0, 1000.0}, {2, 3});
  nn::Softmax sm(1);
  nn::LogSoftmax lsm(1);
  CHECK(sm.extra_repr() == "dim=1");
  Vec X = vals(x), want_sm, want_lsm;
  for (int r = 0; r < 2; ++r) {
    double m = std::max({X[3 * r], X[3 * r + 1], X[3 * r + 2]}), s = 0;
    for (int c = 0; c < 3; ++c) s += std::exp(X[3 * r + c] - m);
    for (int c = 0; c < 3; ++c) {
      want_sm.push_back(std::exp(X[3 * r + c] - m) / s);
      want_lsm.push_back(X[3 * r + c] - m - std::log(s));
    }
  }
  nntest::check_close(sm(x), want_sm, 1e-6);
  nntest::check_close(lsm(x), want_lsm, 1e-4);  // -1001 in float32
  // dim 0: columns sum to 1.
  nntest::check_close(nn::Softmax(0)(x).sum({0}), {1.0, 1.0, 1.0}, 1e-6);

  Tensor xd = gs::randn({3, 4}, gs::kFloat64).requires_grad_();
  GS_CHECK_GRADS([&] { return sm(xd); }, (Params{{"x", xd}}));
  GS_CHECK_GRADS([&] { return nn::LogSoftmax(0)(xd); }, (Params{{"x", xd}}));
  nntest::check_error([&] { sm(gs::zeros({4})); }, {"Softmax(dim=1)", "out of range", "dim=1"});
}

TEST_CASE("relu backward in one pass equals where(x <= 0, 0, g): NaN, inf, -0, exact zeros, strided gradients") {
  const double inf = INFINITY, nan = NAN;
  // x: NaN passes the gradient, 0 and -0 block it (x <= 0), tiny values of either sign.
  const Vec xv = {nan, -1, 2, 0, -0.0, inf, -inf, 1e-30, -1e-30, 3, nan, 0};
  // g: infinite and NaN gradients where x <= 0 must give 0 (a select, not g * mask), -0 passes as -0.
  const Vec gv = {1, inf, -inf, nan, 5, -0.0, 2, -3, inf, nan, -inf, -0.0};
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    CAPTURE(dt);
    Tensor x = gs::tensor(xv, {3, 4}, dt).requires_grad_();
    Tensor y = gs::relu(x);
    Tensor zero = gs::zeros({}, dt);
    // Contiguous, transposed (a (4, 3) tensor seen as (3, 4)) and broadcast (stride 0) gradients.
    const Tensor grads[] = {gs::tensor(gv, {3, 4}, dt), gs::tensor(gv, {4, 3}, dt).t(),
                            gs::tensor(Vec{inf, -0.0, nan, 7}, {1, 4}, dt).expand({3, 4})};
    for (const Tensor& g : grads) {
      CAPTURE(g.is_contiguous());
      Tensor got = gs::autograd::grad({y}, {x}, {g}, /*retain_graph=*/true)[0];
      Tensor want = gs::where(x.detach() <= 0.0, zero, g);  // the formulation the kernel replaced
      REQUIRE(got.dtype() == dt);
      const Vec G = vals(got), Wt = vals(want), gg = vals(g.contiguous());
      for (size_t i = 0; i < G.size(); ++i) {
        CAPTURE(i);
        CHECK(nntest::same_bits(G[i], Wt[i]));
        // And the rule itself: NaN and positive x pass g (bit for bit), the rest give +0.
        if (std::isnan(xv[i]) || xv[i] > 0)
          CHECK(nntest::same_bits(G[i], gg[i]));
        else
          CHECK(nntest::same_bits(G[i], 0.0));
      }
    }
  }
}

TEST_CASE("relu backward: float64 gradients by differences, and double backward through the gradient") {
  Tensor x = gs::tensor({-1.5, 0.7, 2.0, -0.3, 1.1, -2.2}, {2, 3}, gs::kFloat64).requires_grad_();
  GS_CHECK_GRADS([&] { return gs::relu(x); }, (Params{{"x", x}}));
  // Under create_graph the backward is recorded (the fused kernel would leave the gradient
  // without a graph): d(sum(gx^2))/dg = 2 g (x > 0).
  Tensor g = gs::tensor({0.5, -1.0, 2.0, 3.0, -0.25, 4.0}, {2, 3}, gs::kFloat64).requires_grad_();
  Tensor gx = gs::autograd::grad({gs::relu(x)}, {x}, {g}, std::nullopt, /*create_graph=*/true)[0];
  CHECK(gx.requires_grad());
  Tensor gg = gs::autograd::grad({(gx * gx).sum()}, {g})[0];  // 2 * g * mask
  CHECK(vals(gg) == Vec{0, -2.0, 4.0, 0, -0.5, 0});
}
