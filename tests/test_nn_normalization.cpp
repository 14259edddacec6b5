// Tests for nn/normalization.h: BatchNorm1d/2d in training and eval mode against
// hand-computed statistics (biased variance to normalise, unbiased for the running
// variance, momentum 0.1), track_running_stats=false, the cumulative average, and
// LayerNorm; gradients by central differences.
// Dimension letters: B = batch, C = channels, L = length, H/W = size.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include "nn/normalization.h"
#include "nn_test_util.h"

namespace nn = gs::nn;
using gs::Tensor;
using nntest::vals;
using nntest::Vec;
using Params = std::vector<std::pair<std::string, Tensor>>;

namespace {

// Per-channel statistics of x (B, C, rest...) as plain loops: {mean, biased var, n}.
struct Stats {
  Vec mean, var;
  int64_t n;
};
Stats channel_stats(const Tensor& x) {
  const int64_t B = x.size(0), C = x.size(1), R = x.numel() / (B * C);
  Vec X = vals(x), m(C, 0.0), v(C, 0.0);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t r = 0; r < R; ++r) m[c] += X[(b * C + c) * R + r];
    m[c] /= static_cast<double>(B * R);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t r = 0; r < R; ++r) v[c] += std::pow(X[(b * C + c) * R + r] - m[c], 2);
    v[c] /= static_cast<double>(B * R);
  }
  return {m, v, B * R};
}

// (x - mean_c) / sqrt(var_c + eps) * w_c + b_c for x (B, C, rest...).
Vec normalise(const Tensor& x, const Vec& mean, const Vec& var, const Vec& w, const Vec& b, double eps) {
  const int64_t B = x.size(0), C = x.size(1), R = x.numel() / (B * C);
  Vec X = vals(x), out(X.size());
  for (int64_t i = 0; i < B; ++i)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t r = 0; r < R; ++r) {
        const int64_t k = (i * C + c) * R + r;
        out[k] = (X[k] - mean[c]) / std::sqrt(var[c] + eps) * w[c] + b[c];
      }
  return out;
}

void set_affine(nn::BatchNormBase& bn, const Vec& w, const Vec& b) {
  const int64_t C = static_cast<int64_t>(w.size());
  bn.set_tensor("weight", gs::tensor(w, {C}).to(bn.weight.dtype()));
  bn.set_tensor("bias", gs::tensor(b, {C}).to(bn.bias.dtype()));
}

}  // namespace

TEST_CASE("BatchNorm: parameters, buffers, defaults, repr") {
  nn::BatchNorm1d bn(3);
  CHECK(bn.extra_repr() == "3, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true");
  auto params = bn.named_parameters();
  REQUIRE(params.size() == 2);
  CHECK(params[0].first == "weight");
  CHECK(params[1].first == "bias");
  auto bufs = bn.named_buffers();
  REQUIRE(bufs.size() == 3);
  CHECK(bufs[0].first == "running_mean");
  CHECK(bufs[1].first == "running_var");
  CHECK(bufs[2].first == "num_batches_tracked");
  CHECK(vals(bn.weight) == Vec{1, 1, 1});
  CHECK(vals(bn.bias) == Vec{0, 0, 0});
  CHECK(vals(bn.running_mean) == Vec{0, 0, 0});
  CHECK(vals(bn.running_var) == Vec{1, 1, 1});
  CHECK(bn.num_batches_tracked.dtype() == gs::kInt64);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 0);

  nn::BatchNorm2d plain(nn::BatchNormOptions(4).affine(false).track_running_stats(false));
  CHECK(plain.named_parameters().empty());
  CHECK(plain.named_buffers().empty());
  CHECK(plain.extra_repr() == "4, eps=1e-05, momentum=0.1, affine=false, track_running_stats=false");
}

TEST_CASE("BatchNorm1d (B, C): training uses batch statistics and updates running ones") {
  nn::BatchNorm1d bn(3);
  const Vec w{1.5, -0.5, 2.0}, b{0.1, 0.2, -0.3};
  set_affine(bn, w, b);
  Vec rm{0, 0, 0}, rv{1, 1, 1};
  for (int step = 0; step < 3; ++step) {
    Tensor x = gs::randn({8, 3}) * 2.0 + 1.0;
    Tensor y = bn(x);
    Stats s = channel_stats(x);
    nntest::check_close(y, normalise(x, s.mean, s.var, w, b, 1e-5), 1e-5, 1e-4);
    for (int c = 0; c < 3; ++c) {
      rm[c] = 0.9 * rm[c] + 0.1 * s.mean[c];
      rv[c] = 0.9 * rv[c] + 0.1 * s.var[c] * s.n / (s.n - 1);  // unbiased
    }
  }
  nntest::check_close(bn.running_mean, rm, 1e-5, 1e-4);
  nntest::check_close(bn.running_var, rv, 1e-5, 1e-4);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 3);

  // Eval: the running statistics, whatever the batch; no update.
  bn.eval();
  Tensor x = gs::randn({5, 3});
  nntest::check_close(bn(x), normalise(x, rm, rv, w, b, 1e-5), 1e-5, 1e-4);
  nntest::check_close(bn(x.narrow(0, 0, 1)), normalise(x.narrow(0, 0, 1), rm, rv, w, b, 1e-5), 1e-5, 1e-4);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 3);
  nntest::check_close(bn.running_mean, rm, 1e-5, 1e-4);
}

TEST_CASE("BatchNorm1d (B, C, L) and BatchNorm2d (B, C, H, W): statistics over every dim but C") {
  SUBCASE("1d with length") {
    nn::BatchNorm1d bn(nn::BatchNormOptions(2).momentum(0.5));
    Tensor x = gs::randn({4, 2, 5});
    Tensor y = bn(x);
    Stats s = channel_stats(x);
    nntest::check_close(y, normalise(x, s.mean, s.var, {1, 1}, {0, 0}, 1e-5), 1e-5, 1e-4);
    Vec rv;
    for (int c = 0; c < 2; ++c) rv.push_back(0.5 + 0.5 * s.var[c] * 20.0 / 19.0);
    nntest::check_close(bn.running_var, rv, 1e-5, 1e-4);
  }
  SUBCASE("2d") {
    nn::BatchNorm2d bn(3);
    const Vec w{0.5, 1.0, 2.0}, b{1.0, 0.0, -1.0};
    set_affine(bn, w, b);
    Tensor x = gs::randn({2, 3, 4, 5}) * 3.0 - 2.0;
    Stats s = channel_stats(x);
    nntest::check_close(bn(x), normalise(x, s.mean, s.var, w, b, 1e-5), 1e-5, 1e-4);
    Vec rm;
    for (int c = 0; c < 3; ++c) rm.push_back(0.1 * s.mean[c]);
    nntest::check_close(bn.running_mean, rm, 1e-5, 1e-4);
    bn.eval();
    Vec rv;
    for (int c = 0; c < 3; ++c) rv.push_back(0.9 + 0.1 * s.var[c] * 40.0 / 39.0);
    nntest::check_close(bn(x), normalise(x, rm, rv, w, b, 1e-5), 1e-5, 1e-4);
  }
}

TEST_CASE("BatchNorm: momentum = nullopt keeps the cumulative average") {
  nn::BatchNorm1d bn(nn::BatchNormOptions(2).momentum(std::nullopt));
  CHECK(bn.extra_repr().find("momentum=none") != std::string::npos);
  Vec sum_mean{0, 0};
  for (int i = 0; i < 4; ++i) {
    Tensor x = gs::randn({6, 2}) + static_cast<double>(i);
    bn(x);
    Stats s = channel_stats(x);
    for (int c = 0; c < 2; ++c) sum_mean[c] += s.mean[c];
  }
  nntest::check_close(bn.running_mean, {sum_mean[0] / 4, sum_mean[1] / 4}, 1e-5, 1e-4);
}

TEST_CASE("BatchNorm: track_running_stats = false uses batch statistics in eval mode too") {
  nn::BatchNorm2d bn(nn::BatchNormOptions(2).track_running_stats(false));
  Tensor x = gs::randn({3, 2, 2, 2});
  Tensor train_out = bn(x);
  bn.eval();
  Tensor eval_out = bn(x);
  nntest::check_close(eval_out, vals(train_out), 1e-6);
  Stats s = channel_stats(x);
  nntest::check_close(eval_out, normalise(x, s.mean, s.var, {1, 1}, {0, 0}, 1e-5), 1e-5, 1e-4);
  CHECK_FALSE(bn.running_mean.defined());
}

TEST_CASE("BatchNorm: gradients through the batch statistics (float64)") {
  nn::BatchNorm2d bn(2);
  bn.to(gs::kFloat64);
  set_affine(bn, {1.3, 0.7}, {0.2, -0.1});
  CHECK(bn.running_mean.dtype() == gs::kFloat64);
  CHECK(bn.num_batches_tracked.dtype() == gs::kInt64);
  Tensor x = gs::randn({3, 2, 2, 3}, gs::kFloat64).requires_grad_();
  GS_CHECK_GRADS([&] { return bn(x); }, (Params{{"weight", bn.weight}, {"bias", bn.bias}, {"x", x}}));
  bn.eval();
  GS_CHECK_GRADS([&] { return bn(x); }, (Params{{"weight", bn.weight}, {"bias", bn.bias}, {"x", x}}));

  nn::BatchNorm1d bn1(3);
  bn1.to(gs::kFloat64);
  Tensor x1 = gs::randn({4, 3}, gs::kFloat64).requires_grad_();
  GS_CHECK_GRADS([&] { return bn1(x1); }, (Params{{"weight", bn1.weight}, {"x", x1}}));
}

TEST_CASE("BatchNorm: shape errors") {
  nn::BatchNorm1d bn1(16);
  nntest::check_error([&] { bn1(gs::zeros({1, 16})); }, {"BatchNorm1d", "more than 1 value per channel", "eval()"});
  nntest::check_error([&] { bn1(gs::zeros({4, 8})); }, {"BatchNorm1d(16)", "[4, 8]", "num_features=8"});
  nntest::check_error([&] { bn1(gs::zeros({4, 10, 16})); }, {"BatchNorm1d(16)", "(B, L, C)", "transpose(1, 2)"});
  nntest::check_error([&] { bn1(gs::zeros({4, 16, 3, 3})); }, {"BatchNorm1d", "BatchNorm2d"});
  nn::BatchNorm2d bn2(3);
  nntest::check_error([&] { bn2(gs::zeros({3, 8, 8})); }, {"BatchNorm2d(3)", "unsqueeze(0)"});
  nntest::check_error([&] { bn2(gs::zeros({2, 8, 8, 3})); }, {"BatchNorm2d(3)", "channels-last"});
  nntest::check_error([] { nn::BatchNorm1d(nn::BatchNormOptions(4).momentum(0.99 * 2)); }, {"momentum", "[0, 1]"});
}

TEST_CASE("LayerNorm: per-example statistics over the last dims") {
  nn::LayerNorm ln(4);
  CHECK(ln.extra_repr() == "[4], eps=1e-05, elementwise_affine=true");
  CHECK(vals(ln.weight) == Vec{1, 1, 1, 1});
  ln.set_tensor("weight", gs::tensor({1.0, 2.0, 0.5, -1.0}));
  ln.set_tensor("bias", gs::tensor({0.0, 0.1, 0.2, 0.3}));
  Tensor x = gs::randn({2, 3, 4});
  Vec X = vals(x), out;
  const Vec w{1.0, 2.0, 0.5, -1.0}, b{0.0, 0.1, 0.2, 0.3};
  for (int r = 0; r < 6; ++r) {
    double m = 0, v = 0;
    for (int k = 0; k < 4; ++k) m += X[r * 4 + k] / 4;
    for (int k = 0; k < 4; ++k) v += std::pow(X[r * 4 + k] - m, 2) / 4;
    for (int k = 0; k < 4; ++k) out.push_back((X[r * 4 + k] - m) / std::sqrt(v + 1e-5) * w[k] + b[k]);
  }
  nntest::check_close(ln(x), out, 1e-5, 1e-4);
  ln.eval();  // same in eval mode
  nntest::check_close(ln(x), out, 1e-5, 1e-4);

  nn::LayerNorm ln2(gs::Shape{3, 4}, 1e-5, false);
  CHECK(ln2.named_parameters().empty());
  Tensor y2 = ln2(x);
  nntest::check_close(y2.mean({1, 2}), {0.0, 0.0}, 1e-5);

  nn::LayerNorm lnd(gs::Shape{2, 3});
  lnd.to(gs::kFloat64);
  lnd.set_tensor("weight", gs::randn({2, 3}, gs::kFloat64));
  lnd.set_tensor("bias", gs::randn({2, 3}, gs::kFloat64));
  Tensor xd = gs::randn({4, 2, 3}, gs::kFloat64).requires_grad_();
  GS_CHECK_GRADS([&] { return lnd(xd); }, (Params{{"weight", lnd.weight}, {"bias", lnd.bias}, {"x", xd}}));

  nntest::check_error([&] { ln(gs::zeros({2, 4, 5})); }, {"LayerNorm([4]", "[2, 4, 5]", "transpose"});
  nntest::check_error([&] { ln(gs::zeros({2, 5})); }, {"LayerNorm", "last 1 dim(s)", "[2, 5]"});
}
