// Tests for nn/dropout.h: the zeroed fraction, the 1/(1-p) scaling, the gradient
// through the same mask, and the identity in eval mode.
#include <doctest/doctest.h>

#include <cmath>

#include "nn/dropout.h"
#include "nn_test_util.h"

namespace nn = gs::nn;
using gs::Tensor;
using nntest::vals;

TEST_CASE("Dropout: training mode zeroes about p and scales the rest by 1/(1-p)") {
  nn::Dropout drop(0.3);
  CHECK(drop.extra_repr() == "p=0.3");
  CHECK(drop.is_training());
  Tensor x = gs::ones({200, 100}).requires_grad_();
  Tensor y = drop(x);
  auto v = vals(y);
  int zeros = 0, wrong_scale = 0;
  for (double e : v) {
    if (e == 0.0)
      ++zeros;
    else if (std::fabs(e - 1.0 / 0.7) > 1e-6)
      ++wrong_scale;
  }
  CHECK(wrong_scale == 0);
  CHECK(zeros / 20000.0 == doctest::Approx(0.3).epsilon(0.05));  // 6000 +- ~65 expected
  CHECK(gs::mean(y).item<double>() == doctest::Approx(1.0).epsilon(0.03));
  // The gradient uses the same mask: d(sum y)/dx = y / x.
  y.sum().backward();
  CHECK(vals(x.grad()) == v);
}

TEST_CASE("Dropout: eval mode and p = 0 are the identity; p = 1 zeroes everything") {
  nn::Dropout drop(0.5);
  drop.eval();
  Tensor x = gs::randn({10, 10});
  CHECK(drop(x).is_same(x));
  drop.train();
  CHECK_FALSE(gs::equal(drop(x), x));
  CHECK(nn::Dropout(0.0)(x).is_same(x));
  CHECK(gs::amax(gs::abs(nn::Dropout(1.0)(x))).item<double>() == 0.0);
  nntest::check_error([] { nn::Dropout(50); }, {"Dropout", "[0, 1]", "percentage"});
}
