// Objectives that do not score what their author meant, and healthy ones a check misread, each
// written as a user writes it and set against its twin:
//   - a focal loss whose factor is pt^gamma (the easy rows weigh most) against (1 - pt)^gamma: M14
//     sees the loss fall to ~0 on one batch while the predictions stay wrong (loss-blind-to-labels);
//   - a backbone that ends in a sigmoid under a head that applies another before BCELoss, against one
//     sigmoid: L3 sees every input within [0.5, 0.731] over the run (double-sigmoid);
//   - a per-position cross-entropy on (B, C, T) scores: L4 expects log C, the classes on dim 1;
//   - a density model whose loss never reads its targets: M15 (inputs against zeroed inputs) does not
//     apply, while a supervised loss on the same data is still judged.
//   - an L1 loss written |mean(p - y)|: L6 sees the batch's loss far below its rows' (rows-cancel); the
//     twin's exact zero gradients at the output bias are no vanishing gradient (O1, M25);
//   - a density trained beside a dummy target: the labels' checks (D3, D9, D15) stand down;
//   - a Tweedie regression on claims, half of them zero: its loss falls little (L1 "stuck") because
//     most of it is noise, and the model beats the best constant output on held-out rows; with the
//     targets shuffled apart from their inputs it does not.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::expect_lead;
using dtest::first_of;
using dtest::Split;

namespace {

// Trains `model` with a loss function through a Session: Adam at 3e-3, `epochs` epochs.
debug::RunReport train_with(nn::Module& model, const debug::LossFunction& loss, const Split& d, int epochs) {
  optim::Adam opt(model.parameters(), optim::AdamOptions(3e-3));
  debug::Session s(model, loss, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < epochs; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = loss(model(b.x), b.y);
      l.backward();
      opt.step();
      s.step(l);
    }
    s.epoch();
  }
  return s.finish();
}

// Lin et al.'s focal loss (gamma 2) written by hand; `inverted`: the factor pt^2 for (1 - pt)^2.
debug::LossFunction focal(bool inverted) {
  return [inverted](const Tensor& out, const Tensor& t) {
    const Tensor logpt = gather(log_softmax(out, 1), 1, t.unsqueeze(1)).squeeze(1), pt = exp(logpt);
    const Tensor w = inverted ? square(pt) : square(1.0 - pt);
    return -(w * logpt).mean();
  };
}

}  // namespace

TEST_CASE("a focal loss with its factor inverted: M14 leads, the loss falls to ~0 on wrong predictions") {
  manual_seed(113);
  const Split d = dtest::split(3, 1.5);
  auto bug_model = std::make_shared<dtest::Mlp>();
  const debug::RunReport bug = train_with(*bug_model, focal(true), d, 8);
  const debug::Finding* m14 = first_of(bug, "M14", debug::Kind::LossBlindToLabels);
  REQUIRE_MESSAGE(m14 != nullptr, bug.str(true));
  CHECK(m14->fires());
  CHECK(dtest::ev(*m14, "final loss") < 0.05);
  CHECK(dtest::ev(*m14, "final accuracy") <= 0.9);
  expect_lead(bug, "M14", "loss-blind-to-labels");

  manual_seed(113);
  auto model = std::make_shared<dtest::Mlp>();
  const debug::RunReport clean = train_with(*model, focal(false), d, 8);
  CHECK(first_of(clean, "M14", debug::Kind::LossBlindToLabels) == nullptr);
  expect_clean(clean);
}

TEST_CASE(
    "M14's loss-blind rule: an embedding far wider than the labels, scored on columns of its own, is no class "
    "scores; the same loss on a class-wide output reads the wrong entries") {
  // A metric loss's embedding (64 wide, 3 classes) scored against the columns the loss assigns to each
  // class (a proxy per class), and a 10-class output whose loss reads the next class's column.
  for (const int64_t width : {64, 10}) {
    CAPTURE(width);
    manual_seed(7);
    const Split d = dtest::split(3, 1.5);
    auto model = std::make_shared<dtest::Mlp>(6, width);
    const debug::LossFunction own_columns = [width](const Tensor& out, const Tensor& t) {
      return nn::functional::cross_entropy(out, width == 64 ? (t * 7 + 3) : (t + 1));
    };
    const debug::RunReport r = train_with(*model, own_columns, d, 3);
    CHECK_MESSAGE((first_of(r, "M14", debug::Kind::LossBlindToLabels) != nullptr) == (width == 10), r.str(true));
  }
}

namespace {

// A label-smoothed cross-entropy (0.1) written by hand; `batch_axis`: the true class's log-probability
// gathered along dim 0, so each row reads the class-0 score of the row at its label's position.
debug::LossFunction smoothed(bool batch_axis) {
  return [batch_axis](const Tensor& out, const Tensor& t) {
    const Tensor logp = log_softmax(out, 1);
    const Tensor picked = gather(logp, batch_axis ? 0 : 1, t.unsqueeze(1));
    return -(0.9 * picked.mean() + 0.1 * logp.mean());
  };
}

debug::RunReport smoothed_run(bool batch_axis) {
  manual_seed(131);
  const dtest::XY all = dtest::blobs(60, 10, 6, 17, 1.0);
  const Split d = dtest::loaders(all.x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), all.x.narrow(0, 480, 120),
                                 all.y.narrow(0, 480, 120));
  auto model = std::make_shared<dtest::Mlp>(6, 10);
  return train_with(*model, smoothed(batch_axis), d, 8);
}

}  // namespace

TEST_CASE("a smoothed cross-entropy that gathers along the batch axis: M14 sees the labels' cross-entropy rise") {
  const debug::RunReport bug = smoothed_run(true);
  const debug::Finding* m14 = first_of(bug, "M14", debug::Kind::LossBlindToLabels);
  REQUIRE_MESSAGE(m14 != nullptr, bug.str(true));
  CHECK(m14->fires());
  CHECK(dtest::ev(*m14, "cross-entropy with the labels after") >
        dtest::ev(*m14, "cross-entropy with the labels before"));
  CHECK(dtest::ev(*m14, "final loss") <= 0.5 * dtest::ev(*m14, "initial loss"));
  expect_lead(bug, "M14", "loss-blind-to-labels");

  const debug::RunReport clean = smoothed_run(false);
  CHECK(first_of(clean, "M14", debug::Kind::LossBlindToLabels) == nullptr);
  expect_clean(clean);
}

namespace {

// A binary classifier: an MLP, a sigmoid, and (`twice`) a backbone that returns probabilities already
// under a wrapper that applies its own sigmoid again.
struct Binary : nn::Module {
  std::shared_ptr<dtest::Mlp> net = register_module("net", std::make_shared<dtest::Mlp>(6, 1));
  bool twice;
  explicit Binary(bool sigmoid_twice) : Module("Binary"), twice(sigmoid_twice) {}
  Tensor forward(const Tensor& x) override {
    const Tensor p = sigmoid((*net)(x));
    return twice ? sigmoid(p) : p;
  }
};

debug::RunReport binary_run(bool twice) {
  manual_seed(109);
  const dtest::XY all = dtest::blobs(250, 2, 6, 9, 2.0);
  const Tensor y = all.y.to(kFloat32).unsqueeze(1);
  const Split d =
      dtest::loaders(all.x.narrow(0, 0, 400), y.narrow(0, 0, 400), all.x.narrow(0, 400, 100), y.narrow(0, 400, 100));
  auto model = std::make_shared<Binary>(twice);
  nn::BCELoss bce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  debug::Session s(*model, bce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 8; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = bce((*model)(b.x), b.y);
      l.backward();
      opt.step();
    }
    s.epoch();
  }
  return s.finish();
}

}  // namespace

TEST_CASE("a sigmoid applied twice before BCELoss: L3 sees inputs that never leave [0.5, 0.731]; once is clean") {
  const debug::RunReport bug = binary_run(true);
  const debug::Finding* l3 = first_of(bug, "L3", debug::Kind::BceSquashedTwice);
  REQUIRE_MESSAGE(l3 != nullptr, bug.str(true));
  CHECK(l3->severity == debug::Severity::Error);
  CHECK(dtest::ev(*l3, "least input over the sampled steps") >= 0.5);
  expect_lead(bug, "L3", "double-sigmoid");

  const debug::RunReport clean = binary_run(false);
  CHECK(first_of(clean, "L3", debug::Kind::BceSquashedTwice) == nullptr);
  expect_clean(clean);
}

namespace {

// One score per class and position: (B, T) inputs to (B, 2, T) scores, the label of each position
// whether its value is above the sequence's mean.
struct PerPosition : nn::Module {
  int64_t T;
  std::shared_ptr<nn::Linear> a, b;
  explicit PerPosition(int64_t t) : Module("PerPosition"), T(t) {
    a = register_module("a", std::make_shared<nn::Linear>(T, 64));
    b = register_module("b", std::make_shared<nn::Linear>(64, 2 * T));
  }
  Tensor forward(const Tensor& x) override { return (*b)(relu((*a)(x))).reshape({x.size(0), 2, T}); }
};

}  // namespace

TEST_CASE("L4 on a cross-entropy over (B, C, T) scores expects log C (the classes on dim 1), not log T") {
  manual_seed(31);
  Generator g(31);
  const int64_t T = 12;
  const Tensor x = randn({600, T}, {}, &g);
  const Tensor y = gt(x, x.mean({1}, true)).to(kInt64);
  const Split d =
      dtest::loaders(x.narrow(0, 0, 480), y.narrow(0, 0, 480), x.narrow(0, 480, 120), y.narrow(0, 480, 120));
  auto model = std::make_shared<PerPosition>(T);
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 6; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = ce((*model)(b.x), b.y);
      l.backward();
      opt.step();
    }
    s.epoch();
  }
  const debug::RunReport r = s.finish();
  for (const debug::Finding& f : r.findings.findings())
    if (f.check == "L4") CHECK_MESSAGE(!f.fires(), f.str());
  CHECK(r.findings.ran("L4"));
}

namespace {

// A diagonal Gaussian density of the inputs (a mean and a log scale per feature): the output holds
// the standardised inputs and the log-determinant, and the loss is the negative log-likelihood of the
// inputs. The target beside them is a dummy the loss never reads.
struct Density : nn::Module {
  Tensor mu = register_parameter("mu", zeros({6}));
  Tensor log_s = register_parameter("log_s", zeros({6}));
  Density() : Module("Density") {}
  Tensor forward(const Tensor& x) override {
    const Tensor z = (x - mu) * exp(-log_s);
    return cat({z, (-log_s.sum()).reshape({1, 1}).expand({x.size(0), 1})}, 1);
  }
};

Tensor density_nll(const Tensor& out, const Tensor&) {
  const Tensor z = out.narrow(1, 0, 6), logdet = out.narrow(1, 6, 1);
  return (0.5 * square(z).sum({1}, true) - logdet).mean() + 3.0 * std::log(2 * M_PI);
}

}  // namespace

TEST_CASE("M15 on a density model whose loss does not read its targets: the test does not apply") {
  manual_seed(8);
  Generator g(8);
  const Tensor x = 2.0 + 0.5 * randn({96, 6}, {}, &g), dummy = zeros({96, 1});
  const std::vector<std::pair<Tensor, Tensor>> train = {{x.narrow(0, 0, 32), dummy.narrow(0, 0, 32)},
                                                        {x.narrow(0, 32, 32), dummy.narrow(0, 32, 32)}};
  const std::pair<Tensor, Tensor> held_out = {x.narrow(0, 64, 32), dummy.narrow(0, 64, 32)};
  auto model = std::make_shared<Density>();
  const std::vector<debug::Finding> f = debug::input_independent_baseline(*model, train, held_out, density_nll);
  REQUIRE(f.size() == 1);
  CHECK_MESSAGE(!f[0].fires(), f[0].str());
  CHECK(f[0].title.find("does not read its targets") != std::string::npos);

  // A supervised loss on labels the inputs do not predict is still judged: it warns.
  const Tensor labels = randn({96, 1}, {}, &g);
  auto regressor = std::make_shared<dtest::Mlp>(6, 1);
  const std::vector<std::pair<Tensor, Tensor>> noisy = {{x.narrow(0, 0, 32), labels.narrow(0, 0, 32)},
                                                        {x.narrow(0, 32, 32), labels.narrow(0, 32, 32)}};
  const debug::LossFunction mse = [](const Tensor& o, const Tensor& t) { return square(o - t).mean(); };
  const std::vector<debug::Finding> s =
      debug::input_independent_baseline(*regressor, noisy, {x.narrow(0, 64, 32), labels.narrow(0, 64, 32)}, mse);
  REQUIRE(s.size() == 1);
  CHECK_MESSAGE(s[0].fires(), s[0].str());
}

namespace {

// A regression trained with a hand-written L1 loss; `reduced_first`: |mean(p - y)| where mean(|p - y|)
// was meant.
debug::RunReport l1_run(bool reduced_first) {
  manual_seed(112);
  Generator g(112);
  const Tensor x = randn({600, 6}, {}, &g);
  const Tensor y = x.narrow(1, 0, 1) - 0.5 * x.narrow(1, 1, 1) * x.narrow(1, 2, 1) + 0.2 * randn({600, 1}, {}, &g);
  const Split d =
      dtest::loaders(x.narrow(0, 0, 480), y.narrow(0, 0, 480), x.narrow(0, 480, 120), y.narrow(0, 480, 120));
  auto model = std::make_shared<dtest::Regressor>(6, 32);
  const debug::LossFunction l1 = [reduced_first](const Tensor& p, const Tensor& t) {
    return reduced_first ? abs((p - t).mean()) : abs(p - t).mean();
  };
  return train_with(*model, l1, d, 15);
}

}  // namespace

TEST_CASE("an L1 loss written |mean(p - y)|: L6 sees the batch's loss far below its rows'; mean(|p - y|) is clean") {
  const debug::RunReport bug = l1_run(true);
  const debug::Finding* l6 = first_of(bug, "L6", debug::Kind::RowsCancel);
  REQUIRE_MESSAGE(l6 != nullptr, bug.str(true));
  CHECK(l6->fires());
  CHECK(dtest::ev(*l6, "the trained model's training loss, in its batches") <
        0.5 * dtest::ev(*l6, "mean of each training example's loss alone"));
  expect_lead(bug, "L6", "rows-cancel");

  // The twin: an L1 loss's gradient at the output bias is the balance of the residuals' signs, exactly 0
  // on some batches; neither O1 nor M25 calls that vanishing.
  const debug::RunReport clean = l1_run(false);
  CHECK(first_of(clean, "L6", debug::Kind::RowsCancel) == nullptr);
  expect_clean(clean);
}

TEST_CASE("a density model trained through a Session beside a dummy target: the labels' checks stand down") {
  manual_seed(8);
  Generator g(8);
  const Tensor x = 2.0 + 0.5 * randn({600, 6}, {}, &g), dummy = zeros({600, 1});
  const Split d =
      dtest::loaders(x.narrow(0, 0, 480), dummy.narrow(0, 0, 480), x.narrow(0, 480, 120), dummy.narrow(0, 480, 120));
  auto model = std::make_shared<Density>();
  const debug::RunReport r = train_with(*model, density_nll, d, 6);
  const debug::Finding* m15 = first_of(r, "M15", debug::Kind::TargetsUnread);
  REQUIRE_MESSAGE(m15 != nullptr, r.str(true));
  for (const debug::Finding& f : r.findings.findings())
    if (f.check == "D3" || f.check == "D9" || f.check == "D15") CHECK_MESSAGE(!f.fires(), f.str());
}

namespace {

// Tweedie's negative log-likelihood (power 1.5, log link) up to the terms without the mean.
Tensor tweedie_nll(const Tensor& eta, const Tensor& y) {
  return (2.0 * y * exp(-0.5 * eta) + 2.0 * exp(0.5 * eta)).mean();
}

// Insurance-like claims: a compound Poisson-Gamma total per row (half of them exact zeros), its mean
// exp(0.3 + 0.4 x0 - 0.3 x1); `shuffled`: the targets permuted apart from their inputs.
debug::RunReport claims_run(bool shuffled) {
  manual_seed(301);
  Generator g(31);
  std::mt19937 rng(31);
  const int64_t n = 5000;
  const Tensor x = randn({n, 8}, {}, &g);
  const std::vector<float> mu = exp(0.3 + 0.4 * x.narrow(1, 0, 1) - 0.3 * x.narrow(1, 1, 1)).to_vector<float>();
  std::vector<float> ys(static_cast<size_t>(n));
  for (size_t i = 0; i < ys.size(); ++i) {
    const int claims = std::poisson_distribution<int>(mu[i] / 2.0)(rng);
    double total = 0.0;
    for (int k = 0; k < claims; ++k) total += std::exponential_distribution<double>(0.5)(rng);
    ys[i] = static_cast<float>(total);
  }
  if (shuffled) std::shuffle(ys.begin(), ys.end(), rng);
  const Tensor y = tensor(ys, {n, 1});
  const Split d =
      dtest::loaders(x.narrow(0, 0, 4000), y.narrow(0, 0, 4000), x.narrow(0, 4000, 1000), y.narrow(0, 4000, 1000));
  auto model = std::make_shared<dtest::Regressor>(8, 32);
  {
    NoGradGuard ng;  // the output starts at the mean claim
    model->net->named_parameters().back().second.fill_(std::log(y.narrow(0, 0, 4000).mean().item<double>()));
  }
  return train_with(*model, tweedie_nll, d, 8);
}

}  // namespace

TEST_CASE("L1 'stuck' on a Tweedie loss whose floor is the claims' noise: the model beats the best constant, info") {
  const debug::RunReport healthy = claims_run(false);
  const debug::Finding* stuck = first_of(healthy, "L1", debug::Kind::LossStuck);
  REQUIRE_MESSAGE(stuck != nullptr, healthy.str(true));  // the loss fell less than 10%
  CHECK_MESSAGE(!stuck->fires(), stuck->str());
  CHECK(dtest::ev(*stuck, "(constant - model) / its standard error") > 3.0);

  // Targets shuffled apart from their inputs: no better than the constant on held-out rows, still stuck.
  const debug::RunReport shuffled = claims_run(true);
  const debug::Finding* still = first_of(shuffled, "L1", debug::Kind::LossStuck);
  REQUIRE_MESSAGE(still != nullptr, shuffled.str(true));
  CHECK(still->fires());
}

TEST_CASE("D3's per-class recall reads class scores only: an embedding far wider than the labels is none") {
  // A loss that gives label 0 the column 5 (a proxy of its own) and labels 1 and 2 their own columns: the
  // argmax of a 32-wide embedding is no prediction, while a 6-wide output scored that way misses class 0.
  for (const int64_t width : {32, 6}) {
    CAPTURE(width);
    manual_seed(9);
    const Split d = dtest::split(3, 1.5);
    auto model = std::make_shared<dtest::Mlp>(6, width);
    const debug::LossFunction proxies = [](const Tensor& out, const Tensor& t) {
      return nn::functional::cross_entropy(out, where(eq(t, 0), full_like(t, 5), t));
    };
    const debug::RunReport r = train_with(*model, proxies, d, 4);
    CHECK_MESSAGE((first_of(r, "D3", debug::Kind::ClassRecallLow) != nullptr) == (width == 6), r.str(true));
  }
}
