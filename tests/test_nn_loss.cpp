// Tests for nn/loss.h: every loss against hand values or a plain loop (reductions,
// ignore_index, label smoothing, class weights, pos_weight), stability at logits
// of +-1000, BCE vs BCEWithLogits, gradients in float64, and the target errors.
// Dimension letters: B = batch, C = classes.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "nn/loss.h"
#include "nn_test_util.h"

namespace nn = gs::nn;
namespace F = gs::nn::functional;
using gs::Tensor;
using nntest::vals;
using nntest::Vec;
using Params = std::vector<std::pair<std::string, Tensor>>;
using IVec = std::vector<int64_t>;

namespace {

Tensor labels(const IVec& v) { return gs::tensor(v, {static_cast<int64_t>(v.size())}); }

bool all_finite(const Tensor& t) {
  for (double v : vals(t))
    if (!std::isfinite(v)) return false;
  return true;
}

// Reference cross-entropy for logits (B, C) as plain loops (PyTorch's definition).
double ce_ref(const Vec& x, const IVec& t, int64_t C, int64_t ignore, double eps, const Vec& w, nn::Reduction red,
              Vec* per = nullptr) {
  const int64_t B = static_cast<int64_t>(t.size());
  double num = 0, smooth = 0, den = 0;
  for (int64_t b = 0; b < B; ++b) {
    if (t[b] == ignore) {
      if (per) per->push_back(0.0);
      continue;
    }
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, x[b * C + c]);
    for (int64_t c = 0; c < C; ++c) s += std::exp(x[b * C + c] - m);
    const double lse = m + std::log(s);
    const double wt = w.empty() ? 1.0 : w[t[b]];
    double sm = 0;
    for (int64_t c = 0; c < C; ++c) sm += (w.empty() ? 1.0 : w[c]) * (lse - x[b * C + c]);
    const double nll = wt * (lse - x[b * C + t[b]]);
    if (per) per->push_back((1 - eps) * nll + eps / C * sm);
    num += nll;
    smooth += sm;
    den += wt;
  }
  if (red == nn::Reduction::Sum) return (1 - eps) * num + eps / C * smooth;
  return (1 - eps) * num / den + eps / C * smooth / den;
}

}  // namespace

TEST_CASE("MSELoss: values, reductions, and no silent broadcasting") {
  Tensor p = gs::tensor({1.0, 2.0, 3.0}), y = gs::tensor({1.5, 2.0, 1.0});
  CHECK(nn::MSELoss()(p, y).item<double>() == doctest::Approx(4.25 / 3));
  CHECK(nn::MSELoss(nn::Reduction::Sum)(p, y).item<double>() == doctest::Approx(4.25));
  nntest::check_close(nn::MSELoss(nn::Reduction::None)(p, y), {0.25, 0.0, 4.0});
  CHECK(nn::MSELoss().repr() == "MSELoss(reduction=mean)");

  // Prediction (B, 1) against target (B): an error by default ...
  Tensor pred = gs::randn({4, 1}), target = gs::randn({4});
  nntest::check_error([&] { nn::MSELoss()(pred, target); },
                      {"MSELoss", "[4, 1]", "[4]", "broadcast to [4, 4]", "target.unsqueeze(1)", "allow_broadcast"});
  nntest::check_error([&] { F::mse_loss(target, pred); }, {"MSELoss", "target.squeeze(1)"});
  nntest::check_error([&] { F::mse_loss(p, labels({1, 2, 3})); }, {"MSELoss", "floating-point target", "int64"});
  // ... and PyTorch's silent (B, B) broadcast only when asked for.
  nn::MSELoss loose(nn::MSELossOptions().allow_broadcast(true));
  CHECK(loose.extra_repr() == "reduction=mean, allow_broadcast=true");
  Vec P = vals(pred), T = vals(target);
  double s = 0;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) s += std::pow(P[i] - T[j], 2);
  CHECK(loose(pred, target).item<double>() == doctest::Approx(s / 16).epsilon(1e-5));

  Tensor pd = gs::randn({3, 2}, gs::kFloat64).requires_grad_(), yd = gs::randn({3, 2}, gs::kFloat64).requires_grad_();
  GS_CHECK_GRADS([&] { return F::mse_loss(pd, yd); }, (Params{{"input", pd}, {"target", yd}}));
}

TEST_CASE("CrossEntropyLoss: hand value, reductions, against a loop") {
  // log(e^1 + e^2 + e^3) - 1 = 2.4076059644
  CHECK(nn::CrossEntropyLoss()(gs::tensor({1.0, 2.0, 3.0}, {1, 3}), labels({0})).item<double>() ==
        doctest::Approx(2.4076059644));
  CHECK(F::cross_entropy(gs::tensor({1.0, 2.0, 3.0}), gs::tensor(std::vector<int64_t>{2}, {})).item<double>() ==
        doctest::Approx(0.4076059644));  // unbatched (C) with a 0-dim target

  Tensor x = gs::randn({6, 4}, gs::kFloat64) * 3.0;
  IVec t{0, 3, 1, 1, 2, 3};
  Vec X = vals(x);
  nn::CrossEntropyLoss ce;
  CHECK(ce.repr() == "CrossEntropyLoss(ignore_index=-100, reduction=mean, label_smoothing=0)");
  CHECK(ce(x, labels(t)).item<double>() == doctest::Approx(ce_ref(X, t, 4, -100, 0, {}, nn::Reduction::Mean)));
  CHECK(nn::CrossEntropyLoss(nn::Reduction::Sum)(x, labels(t)).item<double>() ==
        doctest::Approx(ce_ref(X, t, 4, -100, 0, {}, nn::Reduction::Sum)));
  Vec per;
  ce_ref(X, t, 4, -100, 0, {}, nn::Reduction::None, &per);
  nntest::check_close(nn::CrossEntropyLoss(nn::Reduction::None)(x, labels(t)), per, 1e-10);
}

TEST_CASE("CrossEntropyLoss: ignore_index, label smoothing, class weights") {
  Tensor x = gs::randn({5, 3}, gs::kFloat64) * 2.0;
  Vec X = vals(x);
  IVec t{2, -100, 0, 1, -100};
  SUBCASE("ignore_index: mean over the counted targets only") {
    const double want = ce_ref(X, t, 3, -100, 0, {}, nn::Reduction::Mean);
    CHECK(F::cross_entropy(x, labels(t)).item<double>() == doctest::Approx(want));
    Vec per;
    ce_ref(X, t, 3, -100, 0, {}, nn::Reduction::None, &per);
    nntest::check_close(F::cross_entropy(x, labels(t), nn::Reduction::None), per, 1e-10);
    CHECK(per[1] == 0.0);
    // A custom ignore_index (here class 0).
    IVec t0{2, 0, 0, 1, 1};
    CHECK(F::cross_entropy(x, labels(t0), nn::CrossEntropyLossOptions().ignore_index(0)).item<double>() ==
          doctest::Approx(ce_ref(X, t0, 3, 0, 0, {}, nn::Reduction::Mean)));
  }
  SUBCASE("label smoothing") {
    auto opts = nn::CrossEntropyLossOptions().label_smoothing(0.1);
    CHECK(F::cross_entropy(x, labels(t), opts).item<double>() ==
          doctest::Approx(ce_ref(X, t, 3, -100, 0.1, {}, nn::Reduction::Mean)));
    CHECK(F::cross_entropy(x, labels(t), opts.reduction(nn::Reduction::Sum)).item<double>() ==
          doctest::Approx(ce_ref(X, t, 3, -100, 0.1, {}, nn::Reduction::Sum)));
    Vec per;
    ce_ref(X, t, 3, -100, 0.1, {}, nn::Reduction::None, &per);
    nntest::check_close(F::cross_entropy(x, labels(t), opts.reduction(nn::Reduction::None)), per, 1e-10);
    // A hand value: logits (0, 0), target 0, eps 0.2: log 2 for every class.
    CHECK(F::cross_entropy(gs::zeros({1, 2}), labels({0}), nn::CrossEntropyLossOptions().label_smoothing(0.2))
              .item<double>() == doctest::Approx(std::log(2.0)));
  }
  SUBCASE("class weights, with and without smoothing") {
    const Vec w{0.5, 2.0, 1.0};
    auto opts = nn::CrossEntropyLossOptions().weight(gs::tensor(w, {3}));
    CHECK(F::cross_entropy(x, labels(t), opts).item<double>() ==
          doctest::Approx(ce_ref(X, t, 3, -100, 0, w, nn::Reduction::Mean)));
    CHECK(F::cross_entropy(x, labels(t), opts.label_smoothing(0.3)).item<double>() ==
          doctest::Approx(ce_ref(X, t, 3, -100, 0.3, w, nn::Reduction::Mean)));
  }
  SUBCASE("gradients (float64) with all options on") {
    Tensor xd = gs::randn({5, 3}, gs::kFloat64).requires_grad_();
    auto opts = nn::CrossEntropyLossOptions().label_smoothing(0.1).weight(gs::tensor({0.5, 2.0, 1.0}, gs::kFloat64));
    GS_CHECK_GRADS([&] { return F::cross_entropy(xd, labels(t), opts); }, (Params{{"input", xd}}));
    GS_CHECK_GRADS([&] { return F::cross_entropy(xd, labels(t), nn::Reduction::None); }, (Params{{"input", xd}}));
  }
}

TEST_CASE("CrossEntropyLoss: every target ignored gives NaN for mean (documented), 0 for sum") {
  Tensor x = gs::randn({3, 4}).requires_grad_();
  Tensor t = labels({-100, -100, -100});
  CHECK(std::isnan(F::cross_entropy(x, t).item<double>()));
  CHECK(F::cross_entropy(x, t, nn::Reduction::Sum).item<double>() == 0.0);
  CHECK(vals(F::cross_entropy(x, t, nn::Reduction::None)) == Vec{0, 0, 0});
  F::cross_entropy(x, t, nn::Reduction::Sum).backward();
  CHECK(vals(x.grad()) == Vec(12, 0.0));
}

TEST_CASE("CrossEntropyLoss: stable for logits of +-1000") {
  Tensor x = gs::tensor({1000.0, -1000.0, 0.0, -1000.0, 1000.0, 0.0}, {2, 3}).requires_grad_();
  Tensor loss = F::cross_entropy(x, labels({0, 0}), nn::Reduction::None);
  nntest::check_close(loss, {0.0, 2000.0}, 1e-3);
  loss.sum().backward();
  CHECK(all_finite(x.grad()));
  nntest::check_close(x.grad(), {0, 0, 0, -1, 1, 0}, 1e-6);
  CHECK(all_finite(F::cross_entropy(x * 1.0, labels({1, 2}), nn::CrossEntropyLossOptions().label_smoothing(0.1))));
}

TEST_CASE("CrossEntropyLoss: (B, C, d1) inputs") {
  Tensor x = gs::randn({2, 3, 4}, gs::kFloat64);
  Tensor t = gs::tensor(IVec{0, 1, 2, 1, 2, 2, -100, 0}, {2, 4});
  // Move the class dim last and compare with the (B*d1, C) form.
  Tensor flat = x.permute({0, 2, 1}).reshape({8, 3});
  CHECK(F::cross_entropy(x, t).item<double>() ==
        doctest::Approx(F::cross_entropy(flat, t.reshape({8})).item<double>()));
  CHECK(F::cross_entropy(x, t, nn::Reduction::None).shape() == gs::Shape{2, 4});
}

TEST_CASE("CrossEntropyLoss: target errors explain the fix") {
  Tensor x = gs::randn({4, 10});
  // A float target of the input's shape is read as class probabilities; all-zero rows are not.
  nntest::check_error(
      [&] {
        F::cross_entropy(x, gs::zeros({4, 10}));
      },
      {"CrossEntropyLoss", "probabilities", "one-hot", "argmax(1)", "[4]"});
  nntest::check_error([&] { F::cross_entropy(x, gs::zeros({4})); }, {"CrossEntropyLoss", "int64", "to(gs::kInt64)"});
  // Multi-hot rows (two labels on one example) are a multi-label task: the fix is another loss, not a
  // normalisation.
  std::vector<float> mv(40, 0.0f), ov(40, 0.0f);
  for (int64_t r = 0; r < 4; ++r) mv[r * 10 + r] = mv[r * 10 + r + 3] = 1.0f;
  for (int64_t r = 1; r < 4; ++r) ov[r * 10 + r] = 1.0f;
  const Tensor multi = gs::tensor(mv, {4, 10}), one_hot = gs::tensor(ov, {4, 10});
  nntest::check_error([&] { F::cross_entropy(x, multi); },
                      {"CrossEntropyLoss", "multi-label", "BCEWithLogitsLoss", "several 1s"});
  // One-hot rows with one row empty stay the normalisation's error.
  nntest::check_error([&] { F::cross_entropy(x, one_hot); }, {"CrossEntropyLoss", "probabilities", "argmax(1)"});
  nntest::check_error(
      [&] {
        F::cross_entropy(x, gs::zeros({4, 1}, gs::kInt64));
      },
      {"CrossEntropyLoss", "[4, 1]", "squeeze(1)"});
  nntest::check_error(
      [&] {
        F::cross_entropy(x, labels({1, 10, 3, 4}));
      },
      {"CrossEntropyLoss", "class 10", "1-indexed"});
  nntest::check_error([&] { F::cross_entropy(x, labels({0, 12, 3, 4})); }, {"CrossEntropyLoss", "class 12", "0..9"});
  nntest::check_error([&] { F::cross_entropy(x, labels({0, 1})); }, {"CrossEntropyLoss", "4 examples", "has 2"});
  nntest::check_error(
      [&] {
        F::cross_entropy(gs::randn({4}), labels({0, 1, 0, 1}));
      },
      {"CrossEntropyLoss", "BCEWithLogitsLoss"});
  nntest::check_error(
      [&] {
        F::cross_entropy(x, labels({0, 1, 2, 3}), nn::CrossEntropyLossOptions().weight(gs::ones({3})));
      },
      {"CrossEntropyLoss", "one value per class (10)"});
}

TEST_CASE("NLLLoss: equals cross-entropy on log-probabilities; weights; ignore_index") {
  Tensor x = gs::randn({5, 4}, gs::kFloat64);
  Tensor logp = gs::log_softmax(x, 1);
  Tensor t = labels({3, 0, -100, 2, 2});
  nn::NLLLoss nll;
  CHECK(nll.extra_repr() == "ignore_index=-100, reduction=mean");
  CHECK(nll(logp, t).item<double>() == doctest::Approx(F::cross_entropy(x, t).item<double>()));
  // Hand value: -(w3 lp[0,3] + w0 lp[1,0] + w2 lp[3,2] + w2 lp[4,2]) / (w3 + w0 + 2 w2)
  Vec w{1.0, 2.0, 3.0, 4.0}, L = vals(logp);
  const double want = -(4 * L[3] + 1 * L[4] + 3 * L[14] + 3 * L[18]) / (4 + 1 + 3 + 3);
  CHECK(F::nll_loss(logp, t, nn::NLLLossOptions().weight(gs::tensor(w, {4}, gs::kFloat64))).item<double>() ==
        doctest::Approx(want));
  Tensor lpd = logp.detach().clone().requires_grad_();
  GS_CHECK_GRADS([&] { return F::nll_loss(lpd, t, nn::Reduction::Sum); }, (Params{{"log_probs", lpd}}));
}

TEST_CASE("BCELoss: hand values, the -100 log clamp, finite gradients at 0 and 1") {
  Tensor p = gs::tensor({0.1, 0.9, 0.5, 0.0, 1.0, 0.0}).requires_grad_();
  Tensor y = gs::tensor({0.0, 1.0, 1.0, 0.0, 1.0, 1.0});
  Tensor l = F::binary_cross_entropy(p, y, nn::Reduction::None);
  nntest::check_close(l, {-std::log(0.9), -std::log(0.9), std::log(2.0), 0.0, 0.0, 100.0}, 1e-5);
  CHECK(nn::BCELoss()(p, y).item<double>() == doctest::Approx(vals(l.sum())[0] / 6).epsilon(1e-6));
  l.sum().backward();
  CHECK(all_finite(p.grad()));
  Vec g = vals(p.grad());
  CHECK(g[0] == doctest::Approx(0.1 / (0.1 * 0.9)));  // (p - y) / (p (1 - p))
  CHECK(g[3] == 0.0);
  CHECK(g[5] == doctest::Approx(-1e12));  // PyTorch's 1e-12 floor

  // Weighted, and gradients in the interior w.r.t. input and target.
  Tensor pd = gs::rand({3, 2}, gs::kFloat64) * 0.8 + 0.1;
  pd.requires_grad_();
  Tensor yd = gs::rand({3, 2}, gs::kFloat64).requires_grad_();
  Tensor wd = gs::rand({2}, gs::kFloat64) + 0.5;
  GS_CHECK_GRADS([&] { return F::binary_cross_entropy(pd, yd, nn::BCELossOptions().weight(wd)); },
                 (Params{{"input", pd}, {"target", yd}}));

  nntest::check_error(
      [&] {
        nn::BCELoss()(gs::tensor({-2.0, 3.0}), gs::tensor({0.0, 1.0}));
      },
      {"BCELoss", "[0, 1]", "logits", "BCEWithLogitsLoss"});
  nntest::check_error(
      [&] {
        nn::BCELoss()(gs::rand({4, 1}), gs::rand({4}));
      },
      {"BCELoss", "same shape", "squeeze(-1)"});
}

TEST_CASE("BCEWithLogitsLoss: agrees with BCE on sigmoid, stable at +-1000, pos_weight") {
  Tensor x = (gs::randn({4, 3}, gs::kFloat64) * 3.0).requires_grad_();
  Tensor y = gs::rand({4, 3}, gs::kFloat64);
  Tensor a = F::binary_cross_entropy_with_logits(x, y);
  Tensor b = F::binary_cross_entropy(gs::sigmoid(x), y);
  CHECK(a.item<double>() == doctest::Approx(b.item<double>()).epsilon(1e-9));
  Tensor ga = gs::autograd::grad({a}, {x})[0], gb = gs::autograd::grad({b}, {x})[0];
  nntest::check_close(ga, vals(gb), 1e-9, 1e-7);
  GS_CHECK_GRADS([&] { return F::binary_cross_entropy_with_logits(x, y, nn::Reduction::None); },
                 (Params{{"input", x}}));

  // Extreme logits: exact values, finite gradients.
  Tensor xe = gs::tensor({1000.0, -1000.0, 1000.0, -1000.0}).requires_grad_();
  Tensor ye = gs::tensor({0.0, 1.0, 1.0, 0.0});
  Tensor le = F::binary_cross_entropy_with_logits(xe, ye, nn::Reduction::None);
  nntest::check_close(le, {1000.0, 1000.0, 0.0, 0.0}, 1e-3);
  le.sum().backward();
  nntest::check_close(xe.grad(), {1.0, -1.0, 0.0, 0.0}, 1e-6);

  // At x = 0 exactly the gradient is sigmoid(0) - y = 0.5 - y.
  Tensor x0 = gs::zeros({2}).requires_grad_();
  F::binary_cross_entropy_with_logits(x0, gs::tensor({0.0, 1.0}), nn::Reduction::Sum).backward();
  nntest::check_close(x0.grad(), {0.5, -0.5}, 1e-7);

  // pos_weight: -(pw y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))), per class (last dim).
  Tensor pw = gs::tensor({2.0, 0.5, 1.0}, gs::kFloat64);
  Tensor lp = F::binary_cross_entropy_with_logits(
      x, y, nn::BCEWithLogitsLossOptions().pos_weight(pw).reduction(nn::Reduction::None));
  Vec X = vals(x), Y = vals(y), P = vals(pw), want;
  for (int i = 0; i < 12; ++i) {
    const double s = 1.0 / (1.0 + std::exp(-X[i]));
    want.push_back(-(P[i % 3] * Y[i] * std::log(s) + (1 - Y[i]) * std::log(1 - s)));
  }
  nntest::check_close(lp, want, 1e-9, 1e-9);
  Tensor wd = gs::rand({4, 1}, gs::kFloat64);
  GS_CHECK_GRADS(
      [&] {
        return F::binary_cross_entropy_with_logits(x, y, nn::BCEWithLogitsLossOptions().pos_weight(pw).weight(wd));
      },
      (Params{{"input", x}}));
  nntest::check_error(
      [&] {
        nn::BCEWithLogitsLoss()(gs::randn({4, 1}), gs::rand({4}));
      },
      {"BCEWithLogitsLoss", "[4, 1]", "[4]", "squeeze(-1)"});
  nntest::check_error(
      [&] {
        nn::BCEWithLogitsLoss()(gs::randn({4}), labels({0, 1, 1, 0}));
      },
      {"BCEWithLogitsLoss", "floating-point target"});
}

TEST_CASE("Loss modules: forward hooks see the input, loss hooks see input and target") {
  nn::CrossEntropyLoss ce;
  Tensor x = gs::randn({3, 5}), t = labels({1, 2, 3});
  int fwd = 0, lh = 0;
  ce.register_forward_hook([&](nn::Module& m, const Tensor& in, const Tensor& out) {
    ++fwd;
    CHECK(m.type_name() == "CrossEntropyLoss");
    CHECK(in.is_same(x));
    CHECK(out.dim() == 0);
  });
  size_t h = ce.register_loss_hook([&](nn::Loss& l, const Tensor& in, const Tensor& target, const Tensor& loss) {
    ++lh;
    CHECK(l.reduction() == nn::Reduction::Mean);
    CHECK(in.is_same(x));
    CHECK(target.is_same(t));
    CHECK(std::isfinite(loss.item<double>()));
  });
  ce(x, t);
  ce.remove_loss_hook(h);
  ce(x, t);
  CHECK(fwd == 2);
  CHECK(lh == 1);
  nntest::check_error([&] { ce(x); }, {"CrossEntropyLoss", "loss(input, target)"});
}

TEST_CASE("a Reduction value outside its enum is refused, naming the loss") {
  const auto bad = static_cast<nn::Reduction>(9);
  Tensor p = gs::tensor({1.0, 2.0}), y = gs::tensor({0.0, 0.0});
  nn::MSELoss mse(bad);
  std::string m = nntest::error_of([&] { mse(p, y); });
  CHECK(nntest::has(m, "reduction value 9"));
  CHECK(nntest::has(m, "Reduction::Mean"));
  Tensor logits = gs::zeros({2, 3}), t = gs::tensor(std::vector<int64_t>{0, 2}, {2});
  nn::CrossEntropyLoss ce(bad);
  CHECK(nntest::has(nntest::error_of([&] { ce(logits, t); }), "cross_entropy"));
}
