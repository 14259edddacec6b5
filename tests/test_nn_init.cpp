// Tests for nn/init.h: gains, fans of Linear and Conv weights, and the statistics
// of every initialiser on large tensors (std within a few percent of the formula).
#include <doctest/doctest.h>

#include <cmath>

#include "core/generator.h"
#include "nn/conv.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn_test_util.h"

namespace nn = gs::nn;
namespace init = gs::nn::init;
using gs::Tensor;
using NL = init::Nonlinearity;

namespace {
double stdv(const Tensor& t) { return t.std().item<double>(); }
double meanv(const Tensor& t) { return t.mean().item<double>(); }
double absmax(const Tensor& t) { return gs::amax(gs::abs(t)).item<double>(); }
}  // namespace

TEST_CASE("calculate_gain") {
  CHECK(init::calculate_gain(NL::Linear) == 1.0);
  CHECK(init::calculate_gain(NL::Conv2d) == 1.0);
  CHECK(init::calculate_gain(NL::Sigmoid) == 1.0);
  CHECK(init::calculate_gain(NL::Tanh) == doctest::Approx(5.0 / 3.0));
  CHECK(init::calculate_gain(NL::ReLU) == doctest::Approx(std::sqrt(2.0)));
  CHECK(init::calculate_gain(NL::LeakyReLU) == doctest::Approx(std::sqrt(2.0 / (1 + 0.0001))));
  CHECK(init::calculate_gain(NL::LeakyReLU, 0.2) == doctest::Approx(std::sqrt(2.0 / 1.04)));
  CHECK(init::calculate_gain(NL::LeakyReLU, std::sqrt(5.0)) == doctest::Approx(std::sqrt(1.0 / 3.0)));
  CHECK(std::string(init::nonlinearity_name(NL::LeakyReLU)) == "leaky_relu");
}

TEST_CASE("fan_in / fan_out of Linear and Conv weights") {
  nn::Linear fc(784, 256);
  CHECK(init::calculate_fan_in_and_fan_out(fc.weight) == std::pair<int64_t, int64_t>{784, 256});
  nn::Conv2d conv(nn::Conv2dOptions(16, 32, {3, 5}).groups(4));  // weight (32, 4, 3, 5)
  CHECK(init::calculate_fan_in_and_fan_out(conv.weight) == std::pair<int64_t, int64_t>{4 * 15, 32 * 15});
  nntest::check_error([&] { init::calculate_fan_in_and_fan_out(fc.bias); }, {"fan", "[256]", "Biases have no fan"});
  nntest::check_error([&] { init::kaiming_normal_(fc.bias); }, {"Biases have no fan"});
}

TEST_CASE("kaiming: std = gain / sqrt(fan)") {
  gs::manual_seed(1);
  Tensor w = gs::empty({1000, 400});  // fan_in 400, fan_out 1000
  SUBCASE("normal, fan_in, relu") {
    init::kaiming_normal_(w, 0.0, init::FanMode::FanIn, NL::ReLU);
    CHECK(stdv(w) == doctest::Approx(std::sqrt(2.0) / std::sqrt(400.0)).epsilon(0.01));
    CHECK(std::fabs(meanv(w)) < 1e-3);
  }
  SUBCASE("normal, fan_out, relu") {
    init::kaiming_normal_(w, 0.0, init::FanMode::FanOut, NL::ReLU);
    CHECK(stdv(w) == doctest::Approx(std::sqrt(2.0) / std::sqrt(1000.0)).epsilon(0.01));
  }
  SUBCASE("uniform, fan_in, leaky_relu a = 0.2: bound sqrt(3) * std") {
    init::kaiming_uniform_(w, 0.2);
    const double std = std::sqrt(2.0 / 1.04) / std::sqrt(400.0);
    CHECK(stdv(w) == doctest::Approx(std).epsilon(0.01));
    CHECK(absmax(w) <= std::sqrt(3.0) * std);
    CHECK(absmax(w) > 0.99 * std::sqrt(3.0) * std);
  }
  SUBCASE("a conv weight: fan_in = C * kH * kW") {
    Tensor cw = gs::empty({256, 16, 5, 5});
    init::kaiming_normal_(cw, 0.0, init::FanMode::FanIn, NL::ReLU);
    CHECK(stdv(cw) == doctest::Approx(std::sqrt(2.0 / 400.0)).epsilon(0.01));
    init::kaiming_normal_(cw, 0.0, init::FanMode::FanIn, NL::Tanh);
    CHECK(stdv(cw) == doctest::Approx(5.0 / 3.0 / 20.0).epsilon(0.01));
  }
}

TEST_CASE("xavier: std = gain * sqrt(2 / (fan_in + fan_out))") {
  Tensor w = gs::empty({600, 400});
  const double std = std::sqrt(2.0 / 1000.0);
  init::xavier_uniform_(w);
  CHECK(stdv(w) == doctest::Approx(std).epsilon(0.01));
  CHECK(absmax(w) <= std::sqrt(3.0) * std);
  init::xavier_normal_(w, 5.0 / 3.0);
  CHECK(stdv(w) == doctest::Approx(5.0 / 3.0 * std).epsilon(0.01));
}

TEST_CASE("normal_, uniform_, constant_, zeros_, ones_; in place on a parameter") {
  nn::Linear fc(500, 400);
  Tensor handle = fc.weight;
  init::normal_(fc.weight, 2.0, 0.5);
  CHECK(meanv(fc.weight) == doctest::Approx(2.0).epsilon(0.005));
  CHECK(stdv(fc.weight) == doctest::Approx(0.5).epsilon(0.01));
  init::uniform_(fc.weight, -3.0, 1.0);
  CHECK(meanv(fc.weight) == doctest::Approx(-1.0).epsilon(0.01));
  CHECK(stdv(fc.weight) == doctest::Approx(4.0 / std::sqrt(12.0)).epsilon(0.01));
  CHECK(gs::amin(fc.weight).item<double>() >= -3.0);
  CHECK(gs::amax(fc.weight).item<double>() < 1.0);
  init::constant_(fc.bias, 0.25);
  CHECK(nntest::vals(fc.bias) == nntest::Vec(400, 0.25));
  init::zeros_(fc.bias);
  CHECK(gs::amax(gs::abs(fc.bias)).item<double>() == 0.0);
  init::ones_(fc.bias);
  CHECK(gs::amin(fc.bias).item<double>() == 1.0);
  // Still the same leaf parameter: no history, requires grad, shared with every handle.
  CHECK(handle.is_same(fc.weight));
  CHECK(fc.weight.is_leaf());
  CHECK(fc.weight.requires_grad());
  CHECK(fc.named_parameters()[0].second.is_same(fc.weight));
  nntest::check_error([] { init::zeros_(gs::zeros({3}, gs::kInt64)); }, {"init::constant_", "floating-point"});
  nntest::check_error([] { init::uniform_(gs::zeros({3}), 1.0, -1.0); }, {"init::uniform_", "lower bound"});
}

TEST_CASE("the same seed gives the same initial weights") {
  gs::manual_seed(42);
  nn::Linear a(10, 5);
  gs::manual_seed(42);
  nn::Linear b(10, 5);
  CHECK(gs::equal(a.weight, b.weight));
  CHECK(gs::equal(a.bias, b.bias));
}

TEST_CASE("a Nonlinearity or FanMode value outside its enum is refused") {
  CHECK(nntest::has(nntest::error_of([] { init::calculate_gain(static_cast<NL>(42)); }), "nonlinearity value 42"));
  Tensor w = gs::zeros({3, 4});
  CHECK(nntest::has(nntest::error_of([&] { init::kaiming_normal_(w, 0.0, static_cast<init::FanMode>(3)); }),
                    "mode value 3"));
}
