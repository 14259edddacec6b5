// Randomness at evaluation, each twin as a user writes it: a block that calls functional dropout
// with training = true (PyTorch's F.dropout default) keeps dropping in eval mode, so every
// validation pass scores another thinned model; passing is_training() instead, it does not. And a
// hand-written batch normalisation whose eval branch divides by the running variance, not its square
// root: on the same training rows the trained model does far worse in eval mode (M2).
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <gradsleuth.h>

#include "debug/checks/model/behaviour.h"
#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::expect_lead;
using dtest::first_of;
using dtest::Split;

namespace {

// Two hidden layers of 64 ReLU units with functional dropout 0.5 after each.
struct DropoutBlock : nn::Module {
  std::shared_ptr<nn::Linear> a, b, c;
  bool always;  // dropout(h, 0.5, true): on whatever the mode
  explicit DropoutBlock(bool always) : Module("DropoutBlock"), always(always) {
    a = register_module("a", std::make_shared<nn::Linear>(6, 64));
    b = register_module("b", std::make_shared<nn::Linear>(64, 64));
    c = register_module("c", std::make_shared<nn::Linear>(64, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = dropout(relu((*a)(x)), 0.5, always || is_training());
    h = dropout(relu((*b)(h)), 0.5, always || is_training());
    return (*c)(h);
  }
};

debug::RunReport train_block(bool always) {
  manual_seed(47);
  const Split d = dtest::split(3, 2.0);
  auto model = std::make_shared<DropoutBlock>(always);
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(2e-3));
  return dtest::train_own_loop(*model, ce, opt, d, 6);
}

}  // namespace

TEST_CASE("functional dropout with training = true: M2 leads with random-at-eval, M13 does not judge") {
  const debug::RunReport r = train_block(true);
  expect_lead(r, "M2", "train-mode-eval");
  const debug::Finding* random = first_of(r, "M2", debug::Kind::RandomAtEval);
  REQUIRE_MESSAGE(random != nullptr, r.str(true));
  CHECK(dtest::ev(*random, "largest change between the two outputs") > 0.0);
  const std::vector<std::string> fired = r.fired_checks();
  CHECK(std::find(fired.begin(), fired.end(), "M13") == fired.end());  // no "wrong backward" for a random forward
}

TEST_CASE("functional dropout passed is_training(): silent") { expect_clean(train_block(false)); }

TEST_CASE("a model with BatchNorm left in eval mode by an accuracy helper: M2 leads, M17's stale statistics follow") {
  manual_seed(19);
  const Split d = dtest::split(3, 2.0);
  auto model =
      std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 32), std::make_shared<nn::BatchNorm1d>(32),
                                       std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 3));
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(2e-3));
  model->eval();  // the helper's model->eval(), never undone
  const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 4);
  expect_lead(r, "M2", "train-mode-eval");
}

TEST_CASE("check_input_gradient: a deterministic eval-mode model is judged, a random one is M2's") {
  manual_seed(5);
  const Tensor x = randn({8, 6});
  auto random = std::make_shared<DropoutBlock>(true), plain = std::make_shared<DropoutBlock>(false);
  const std::vector<debug::Finding> fr = debug::check_input_gradient(*random, x);
  REQUIRE(fr.size() == 1);
  CHECK(fr[0].check == "M2");
  CHECK(fr[0].kind == debug::Kind::RandomAtEval);
  CHECK(debug::check_input_gradient(*plain, x).empty());
}

namespace {

// A batch normalisation written by hand: batch statistics in training (and running averages of them,
// momentum 0.1), the running ones at evaluation; `sqrt_forgotten`: its eval branch divides by the
// running variance where its square root was meant.
struct HandNorm : nn::Module {
  Tensor gamma, beta, mean, var;
  bool sqrt_forgotten;
  HandNorm(int64_t n, bool fault) : Module("HandNorm"), sqrt_forgotten(fault) {
    gamma = register_parameter("gamma", ones({n}));
    beta = register_parameter("beta", zeros({n}));
    mean = register_buffer("running_mean", zeros({n}));
    var = register_buffer("running_var", ones({n}));
  }
  Tensor forward(const Tensor& x) override {
    if (is_training()) {
      const Tensor m = x.mean({0}), v = x.var({0}, false);
      {
        NoGradGuard ng;
        mean.mul_(0.9).add_(0.1 * m.detach());
        var.mul_(0.9).add_(0.1 * v.detach());
      }
      return gamma * (x - m) / sqrt(v + 1e-5) + beta;
    }
    return gamma * (x - mean) / (sqrt_forgotten ? var + 1e-5 : sqrt(var + 1e-5)) + beta;
  }
};

// Raw tabular inputs (every feature with a std near 40) normalised by the model's first layer.
struct NormedMlp : nn::Module {
  std::shared_ptr<HandNorm> norm;
  std::shared_ptr<dtest::Mlp> mlp = register_module("mlp", std::make_shared<dtest::Mlp>(6, 3));
  explicit NormedMlp(bool fault) : Module("NormedMlp") {
    norm = register_module("norm", std::make_shared<HandNorm>(6, fault));
  }
  Tensor forward(const Tensor& x) override { return (*mlp)((*norm)(x)); }
};

debug::RunReport normed_run(bool fault) {
  manual_seed(111);
  const dtest::XY all = dtest::blobs(200, 3, 6, 111, 1.5);
  const Tensor scale = full({1, 6}, 30.0);  // raw features with a std near 40
  const Tensor x = all.x * scale;
  const Split d =
      dtest::loaders(x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), x.narrow(0, 480, 120), all.y.narrow(0, 480, 120));
  auto model = std::make_shared<NormedMlp>(fault);
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 8; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = ce((*model)(b.x), b.y);
      l.backward();
      opt.step();
    }
    s.epoch();
  }
  return s.finish();
}

}  // namespace

TEST_CASE("a hand-written normaliser whose eval branch forgets a square root: M2 sees the eval path differ") {
  const debug::RunReport bug = normed_run(true);
  const debug::Finding* m2 = first_of(bug, "M2", debug::Kind::EvalPathDiffers);
  REQUIRE_MESSAGE(m2 != nullptr, bug.str(true));
  CHECK(m2->fires());
  CHECK(dtest::ev(*m2, "eval-mode accuracy") < dtest::ev(*m2, "training-mode accuracy (randomness off)") - 0.2);
  expect_lead(bug, "M2", "eval-path");

  const debug::RunReport clean = normed_run(false);
  CHECK(first_of(clean, "M2", debug::Kind::EvalPathDiffers) == nullptr);
  for (const debug::Finding& f : clean.findings.findings())
    if (f.check != "D5") CHECK_MESSAGE(!f.fires(), f.str());  // raw inputs: D5 may say so; the model scales them
}
