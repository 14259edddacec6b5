// Tests for optim/clip: the total gradient norm (2, 1, p, inf), scaling by
// clip_grad_norm_, the non-finite error, and clip_grad_value_.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/ops.h"
#include "nn_test_util.h"
#include "optim/clip.h"

namespace optim = gs::optim;
using gs::Tensor;
using Vec = std::vector<double>;

namespace {

using nntest::error_of;
using nntest::has;

Tensor with_grad(const Vec& g, gs::DType dt = gs::kFloat64) {
  Tensor p = gs::zeros({static_cast<int64_t>(g.size())}, gs::TensorOptions(dt)).requires_grad_();
  p.set_grad(gs::tensor(g, p.shape(), gs::TensorOptions(dt)));
  return p;
}
Vec grad_of(const Tensor& p) { return p.grad().to_vector<double>(); }

}  // namespace

TEST_CASE("clip_grad_norm_: returns the total 2-norm and scales every gradient by max_norm / total") {
  // Gradients (3, 4) and (12): total = sqrt(9 + 16 + 144) = 13.
  Tensor a = with_grad({3.0, 4.0}), b = with_grad({12.0});
  const double total = optim::clip_grad_norm_({a, b}, 6.5);
  CHECK(total == doctest::Approx(13.0));
  const double coef = 6.5 / (13.0 + 1e-6);  // torch's 1e-6 guard
  CHECK(grad_of(a)[0] == doctest::Approx(3.0 * coef).epsilon(1e-12));
  CHECK(grad_of(a)[1] == doctest::Approx(4.0 * coef).epsilon(1e-12));
  CHECK(grad_of(b)[0] == doctest::Approx(12.0 * coef).epsilon(1e-12));
  CHECK(optim::grad_norm({a, b}) == doctest::Approx(6.5).epsilon(1e-6));

  // Already short enough: untouched (not even a version bump).
  Tensor c = with_grad({0.3, 0.4});
  const uint64_t v = c.grad().version();
  CHECK(optim::clip_grad_norm_({c}, 1.0) == doctest::Approx(0.5));
  CHECK(grad_of(c) == Vec{0.3, 0.4});
  CHECK(c.grad().version() == v);
}

TEST_CASE("clip_grad_norm_: inf, 1 and p norms") {
  Tensor a = with_grad({3.0, -4.0}), b = with_grad({-12.0});
  CHECK(optim::grad_norm({a, b}, optim::kInfNorm) == 12.0);
  CHECK(optim::grad_norm({a, b}, 1.0) == doctest::Approx(19.0));
  CHECK(optim::grad_norm({a, b}, 3.0) == doctest::Approx(std::cbrt(27.0 + 64.0 + 1728.0)));
  const double total = optim::clip_grad_norm_({a, b}, 6.0, optim::kInfNorm);
  CHECK(total == 12.0);
  const double coef = 6.0 / (12.0 + 1e-6);
  CHECK(grad_of(b)[0] == doctest::Approx(-12.0 * coef));
  CHECK(grad_of(a)[1] == doctest::Approx(-4.0 * coef));
  CHECK(has(error_of([&] { optim::clip_grad_norm_({a}, 1.0, 0.0); }), "norm_type"));
  CHECK(has(error_of([&] { optim::clip_grad_norm_({a}, -1.0); }), "max_norm"));
}

TEST_CASE("clip_grad_norm_: parameters without gradients are skipped; float32 and strided gradients") {
  Tensor none = gs::zeros({4}).requires_grad_();
  Tensor a = with_grad({3.0, 4.0}, gs::kFloat32);
  CHECK(optim::grad_norm({none}) == 0.0);
  CHECK(optim::clip_grad_norm_({none, a}, 100.0) == doctest::Approx(5.0));
  // A strided gradient takes the tensor-op path: same total.
  Tensor s = gs::zeros({2}, gs::kFloat64).requires_grad_();
  Tensor wide = gs::tensor({3.0, 99.0, 4.0, 99.0}, {2, 2}, gs::kFloat64);
  s.set_grad(wide.select(1, 0));
  REQUIRE_FALSE(s.grad().is_contiguous());
  CHECK(optim::grad_norm({s}) == doctest::Approx(5.0));
  CHECK(optim::grad_norm({s}, optim::kInfNorm) == 4.0);
  optim::clip_grad_norm_({s}, 1.0);
  CHECK(optim::grad_norm({s}) == doctest::Approx(1.0).epsilon(1e-6));
}

TEST_CASE("clip_grad_norm_: non-finite gradients") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  Tensor ok = with_grad({1.0}), bad = with_grad({1.0, nan}), huge = with_grad({inf});
  bad.set_name("fc1.weight");
  const std::string msg = error_of([&] { optim::clip_grad_norm_({ok, bad, huge}, 1.0, 2.0, true); });
  CHECK(has(msg, "clip_grad_norm_"));
  CHECK(has(msg, "parameter 1 'fc1.weight' float64[2]: its gradient holds NaN"));
  CHECK(has(msg, "parameter 2 float64[1]: its gradient holds Inf"));
  CHECK_FALSE(has(msg, "parameter 0"));
  CHECK(grad_of(ok) == Vec{1.0});  // raised before touching anything
  // Without the check: the total is NaN and the gradients turn NaN (as in PyTorch).
  CHECK(std::isnan(optim::clip_grad_norm_({ok, bad}, 1.0)));
  CHECK(std::isnan(grad_of(ok)[0]));
  // The inf norm sees NaN too.
  Tensor bad2 = with_grad({nan, 1.0});
  CHECK(std::isnan(optim::grad_norm({bad2}, optim::kInfNorm)));
  CHECK(has(error_of([&] { optim::clip_grad_norm_({bad2}, 1.0, optim::kInfNorm, true); }), "inf-norm"));
}

TEST_CASE("clip_grad_value_ clamps every element into [-v, v]") {
  Tensor a = with_grad({-3.0, 0.5, 2.0}), b = with_grad({10.0}, gs::kFloat32), none = gs::zeros({2}).requires_grad_();
  optim::clip_grad_value_({a, b, none}, 1.0);
  CHECK(grad_of(a) == Vec{-1.0, 0.5, 1.0});
  CHECK(grad_of(b) == Vec{1.0});
  CHECK_FALSE(none.grad().defined());
  CHECK(has(error_of([&] { optim::clip_grad_value_({a}, -1.0); }), "clip_value must be >= 0"));
}
