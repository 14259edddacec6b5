// Tests for nn/linear.h: Linear against a plain loop, its gradients against
// central differences in float64, Flatten/Identity, and the shape errors.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include "nn/linear.h"
#include "nn_test_util.h"

namespace nn = gs::nn;
using gs::Tensor;
using nntest::vals;
using nntest::Vec;

TEST_CASE("Linear: parameters, default init bounds, repr") {
  auto fc = std::make_shared<nn::Linear>(784, 256);
  CHECK(fc->weight.shape() == gs::Shape{256, 784});
  CHECK(fc->bias.shape() == gs::Shape{256});
  auto named = fc->named_parameters();
  REQUIRE(named.size() == 2);
  CHECK(named[0].first == "weight");
  CHECK(named[1].first == "bias");
  CHECK(fc->weight.requires_grad());
  CHECK(fc->extra_repr() == "in_features=784, out_features=256, bias=true");
  CHECK(fc->repr() == "Linear(in_features=784, out_features=256, bias=true)");
  // kaiming_uniform_(a=sqrt(5)) and the bias: U(-1/sqrt(784), 1/sqrt(784)).
  const double bound = 1.0 / std::sqrt(784.0);
  for (const Tensor& t : {fc->weight, fc->bias}) {
    CHECK(gs::amax(t).item<double>() <= bound);
    CHECK(gs::amin(t).item<double>() >= -bound);
  }
  // A uniform U(-b, b) has std b / sqrt(3).
  CHECK(fc->weight.std().item<double>() == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.02));

  auto nb = std::make_shared<nn::Linear>(3, 2, false);
  CHECK_FALSE(nb->bias.defined());
  CHECK(nb->named_parameters().size() == 1);
  CHECK(nb->extra_repr() == "in_features=3, out_features=2, bias=false");
}

TEST_CASE("Linear: forward matches a plain loop, for (B, D) and (B, T, D)") {
  auto fc = std::make_shared<nn::Linear>(3, 2);
  Tensor x = gs::randn({4, 3});
  Tensor y = (*fc)(x);
  REQUIRE(y.shape() == gs::Shape{4, 2});
  Vec W = vals(fc->weight), b = vals(fc->bias), X = vals(x), want(8);
  for (int i = 0; i < 4; ++i)
    for (int o = 0; o < 2; ++o) {
      double s = b[o];
      for (int k = 0; k < 3; ++k) s += X[i * 3 + k] * W[o * 3 + k];
      want[i * 2 + o] = s;
    }
  nntest::check_close(y, want);

  Tensor x3 = gs::randn({2, 5, 3});
  Tensor y3 = (*fc)(x3);
  CHECK(y3.shape() == gs::Shape{2, 5, 2});
  nntest::check_close(y3.reshape({10, 2}), vals((*fc)(x3.reshape({10, 3}))));
}

TEST_CASE("Linear: gradients w.r.t. weight, bias and input (float64)") {
  auto fc = std::make_shared<nn::Linear>(4, 3);
  fc->to(gs::kFloat64);
  Tensor x = gs::randn({5, 4}, gs::kFloat64).requires_grad_();
  GS_CHECK_GRADS([&] { return (*fc)(x); },
                 (std::vector<std::pair<std::string, Tensor>>{{"weight", fc->weight}, {"bias", fc->bias}, {"x", x}}));
}

TEST_CASE("Linear: shape errors explain the fix") {
  auto fc = std::make_shared<nn::Linear>(784, 256);
  nntest::check_error(
      [&] {
        (*fc)(gs::zeros({64, 28, 28}));
      },
      {"Linear(in_features=784", "[64, 28, 28]", "784", "nn::Flatten"});
  nntest::check_error([&] { (*fc)(gs::zeros({64, 100})); }, {"Linear", "[64, 100]", "in_features=100"});
  nntest::check_error([&] { (*fc)(gs::zeros({64, 784}, gs::kInt64)); }, {"Linear", "floating-point", "int64"});
  nntest::check_error([&] { (*fc)(Tensor()); }, {"Linear", "undefined"});
}

TEST_CASE("Flatten and Identity") {
  nn::Flatten flat;
  Tensor x = gs::arange(24).reshape({2, 3, 4}).to(gs::kFloat32);
  Tensor y = flat(x);
  CHECK(y.shape() == gs::Shape{2, 12});
  CHECK(vals(y) == vals(x));
  CHECK(nn::Flatten(0)(x).shape() == gs::Shape{24});
  CHECK(nn::Flatten(1, 1)(x).shape() == gs::Shape{2, 3, 4});
  CHECK(flat.extra_repr() == "start_dim=1, end_dim=-1");
  nntest::check_error([&] { flat(gs::zeros({5})); }, {"Flatten", "[5]", "batch"});

  // Flatten's backward puts the gradient back in the original shape.
  Tensor xg = gs::randn({2, 3, 2}, gs::kFloat64).requires_grad_();
  GS_CHECK_GRADS([&] { return flat(xg); }, (std::vector<std::pair<std::string, Tensor>>{{"x", xg}}));

  nn::Identity id;
  CHECK(id(x).is_same(x));
}

TEST_CASE("Linear(2^31, 2^31): a weight past the address space is an error naming Linear") {
  try {
    nn::Linear big(int64_t{1} << 31, int64_t{1} << 31);
    FAIL("no error");
  } catch (const gs::Error& e) {
    CHECK(std::string(e.what()).find("Linear: shape [2147483648, 2147483648]") != std::string::npos);
  }
}
