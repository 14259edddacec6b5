// What a training loop does around the model, healthy and faulty, each written as a user writes it:
// stochastic depth (blocks skipped on some steps) against a block the forward never uses; a focal
// loss written as a function, judged at its own starting value; a Poisson likelihood whose loss goes
// below 0; a loss negated before backward and a mean divided by the batch size again, against a
// weighted sum of losses and gradient accumulation; a label appended to the inputs (target leakage)
// against a categorical feature, a separating measured feature and a noisy linear target; losses kept
// as tensors (every step's graph kept alive) against losses kept as numbers; clip_grad_norm_ after
// optimizer.step() against clipping before it; a validation sum not reset between epochs against the
// same loop reset, and reporting a root mean square in the target's own units; a plateau scheduler or an
// early stopper in Mode::Min stepped with the validation accuracy against Mode::Max, and against the loss;
// zero_grad() before every micro-batch of a declared gradient accumulation against once per cycle; Adam
// above its usual range on a calm run, info where a tenth of the rate ends no better and a warning where
// the whole run again at a tenth ends better on validation.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::lead_cause;
using dtest::Mlp;
using dtest::Split;
using dtest::XY;

namespace {

bool warned(const debug::RunReport& r, const std::string& check, debug::Kind k) {
  for (const debug::Finding& f : r.findings.findings())
    if (f.is(check.c_str(), k) && f.fires()) return true;
  return false;
}

// The user's loop: each batch's loss through `shape` (the identity by default) before backward,
// optimizer steps every `accumulate` batches.
template <class Loss>
debug::RunReport train(nn::Module& model, Loss& loss, optim::Optimizer& opt, const Split& d, int epochs,
                       const std::function<Tensor(const Tensor&, int64_t rows)>& shape = nullptr, int accumulate = 1) {
  debug::Session s(model, loss, opt, {.train = d.train.get(), .val = d.val.get()});
  try {
    for (int e = 0; e < epochs; ++e) {
      int k = 0;
      opt.zero_grad();
      for (const nn::Batch& b : *d.train) {
        Tensor l = loss(model(b.x), b.y);
        if (shape) l = shape(l, b.x.size(0));
        l.backward();
        if (++k % accumulate == 0) {
          opt.step();
          opt.zero_grad();
        }
      }
      s.epoch();
    }
  } catch (const std::exception& ex) {
    s.error(ex);
  }
  return s.finish();
}

// Residual blocks; in training each block runs with probability 0.8 (stochastic depth, Huang et al.),
// in evaluation every block runs, scaled by 0.8. `unused`: a fifth block registered and never run.
struct StochasticDepth : nn::Module {
  std::shared_ptr<nn::Linear> in = register_module("in", std::make_shared<nn::Linear>(6, 32));
  std::vector<std::shared_ptr<nn::Linear>> blocks;
  std::shared_ptr<nn::Linear> out;
  std::mt19937 draw{5};
  explicit StochasticDepth(bool unused) : Module("StochasticDepth") {
    for (int i = 0; i < 4; ++i)
      blocks.push_back(register_module("block" + std::to_string(i), std::make_shared<nn::Linear>(32, 32)));
    if (unused) register_module("block4", std::make_shared<nn::Linear>(32, 32));
    out = register_module("out", std::make_shared<nn::Linear>(32, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor z = relu((*in)(x));
    for (auto& b : blocks) {
      if (!is_training())
        z = z + relu((*b)(z)) * 0.8;
      else if (std::uniform_real_distribution<double>(0, 1)(draw) < 0.8)
        z = z + relu((*b)(z));
    }
    return (*out)(z);
  }
};

}  // namespace

TEST_CASE("stochastic depth: a block skipped on some steps is O1 info; a block the forward never runs warns") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  nn::CrossEntropyLoss ce;
  SUBCASE("stochastic depth") {
    auto model = std::make_shared<StochasticDepth>(false);
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = train(*model, ce, opt, d, 5);
    expect_clean(r);
    const debug::Finding* f = dtest::first_of(r, "O1", debug::Kind::GradientMissing);
    REQUIRE(f != nullptr);  // some block was skipped on some sampled step
    CHECK(f->severity == debug::Severity::Info);
    CHECK(dtest::ev(*f, "sampled steps without a gradient") < dtest::ev(*f, "sampled steps judged"));
  }
  SUBCASE("a block registered and never run") {
    auto model = std::make_shared<StochasticDepth>(true);
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = train(*model, ce, opt, d, 5);
    bool never = false;
    for (const debug::Finding& f : r.findings.findings())
      never = never || (f.is("O1", debug::Kind::GradientMissing) && f.fires() && f.parameter == "block4.weight");
    CHECK_MESSAGE(never, r.str());
  }
}

namespace {

// Stochastic depth as Huang et al. write it: each residual block kept with its survival probability,
// drawn from the global generator, and scaled by it in evaluation. The last block survives 35% of the time.
struct ResBlock : nn::Module {
  std::shared_ptr<nn::Linear> fc = register_module("fc", std::make_shared<nn::Linear>(32, 32));
  double survival;
  explicit ResBlock(double p) : Module("ResBlock"), survival(p) {}
  Tensor forward(const Tensor& x) override {
    if (!is_training()) return relu(x + (*fc)(x)*survival);
    return rand({1}).item<double>() < survival ? relu(x + (*fc)(x)) : x;
  }
};
struct ResNet : nn::Module {
  std::shared_ptr<nn::Linear> in = register_module("in", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<ResBlock> b0 = register_module("b0", std::make_shared<ResBlock>(0.9));
  std::shared_ptr<ResBlock> b1 = register_module("b1", std::make_shared<ResBlock>(0.35));
  std::shared_ptr<nn::Linear> out = register_module("out", std::make_shared<nn::Linear>(32, 3));
  ResNet() : Module("ResNet") {}
  Tensor forward(const Tensor& x) override { return (*out)((*b1)((*b0)(relu((*in)(x))))); }
};

}  // namespace

TEST_CASE("stochastic depth from the global generator: L6's probe and O6's update sizes see random skips, not faults") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  nn::CrossEntropyLoss ce;
  auto model = std::make_shared<ResNet>();
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  const debug::RunReport r = train(*model, ce, opt, d, 6);
  for (const debug::Finding& f : r.findings.findings()) {
    CHECK_MESSAGE(!(f.check == "L6" && f.fires()), f.title);
    CHECK_MESSAGE(!(f.check == "O6" && f.fires()), f.title);
  }
  // The paths that keep them quiet: L6 saw two gradients of one batch, O6 a block still on some steps.
  const debug::Finding* l6 = dtest::find(r.findings.findings(), "L6", debug::Severity::Info);
  REQUIRE_MESSAGE(l6 != nullptr, r.str(true));
  CHECK_MESSAGE(dtest::has(l6->title, "the same batch gives another gradient each time"), l6->title);
  const debug::Finding* o6 = dtest::first_of(r, "O6", debug::Kind::UpdatesTooSmall);
  REQUIRE_MESSAGE(o6 != nullptr, r.str(true));
  CHECK_MESSAGE(dtest::has(o6->title, "a layer the forward skips on some steps"), o6->title);
}

TEST_CASE("a focal loss written as a function starts at its own value for logits of zeros, not log C: L4 silent") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  // Lin et al.'s focal loss, gamma 2: (1 - p)^2 (-log p); at logits of 0, (2/3)^2 log 3 = 0.488.
  const debug::LossFunction focal = [](const Tensor& out, const Tensor& t) {
    const Tensor lp = log_softmax(out, 1).gather(1, t.unsqueeze(1));
    const Tensor q = 1.0 - exp(lp);
    return mean(-(q * q) * lp);
  };
  auto model = std::make_shared<Mlp>();
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  debug::Session s(*model, focal, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 4; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = focal((*model)(b.x), b.y);
      l.backward();
      opt.step();
      s.step(l);
    }
    s.epoch();
  }
  const debug::RunReport r = s.finish();
  expect_clean(r);
  const debug::Finding* l4 = dtest::first_of(r, "L4", debug::Kind::InitialLoss);
  REQUIRE(l4 != nullptr);
  CHECK(dtest::ev(*l4, "expected") == doctest::Approx(4.0 / 9.0 * std::log(3.0)).epsilon(1e-3));
}

TEST_CASE("L9's loss ratios judge losses whose floor is 0: a Poisson likelihood below 0 is not 'memorised'") {
  debug::EndFitMeasure m;
  m.train_examples = 480;
  m.val_examples = 120;
  // A Poisson loss without its log(y!) constant: validation above training, both below 0.
  m.train_loss = -0.59;
  m.val_loss = -0.45;
  for (const debug::Finding& f : debug::check_end_fit(m)) CHECK_MESSAGE(!f.fires(), f.title);
  // The same gap on a loss with floor 0 (3.3x) warns.
  m.train_loss = 0.06;
  m.val_loss = 0.2;
  bool gap = false;
  for (const debug::Finding& f : debug::check_end_fit(m))
    gap = gap || (f.fires() && f.kind == debug::Kind::GeneralisationGap);
  CHECK(gap);
  // A validation loss lower than the training loss, both below 0, is not "the training labels disagree".
  m.train_loss = -0.3;
  m.val_loss = -0.5;
  m.train_row_losses.assign(480, -0.3);
  m.val_row_losses.assign(120, -0.5);
  for (const debug::Finding& f : debug::check_end_fit(m)) CHECK_MESSAGE(!f.fires(), f.title);
}

TEST_CASE("L6 over the run: a negated loss and a mean divided by B again warn; weights and accumulation do not") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  nn::CrossEntropyLoss ce;
  SUBCASE("the loss negated before backward: L6 leads with loss-negated") {
    auto model = std::make_shared<Mlp>();
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.01));
    const debug::RunReport r = train(*model, ce, opt, d, 4, [](const Tensor& l, int64_t) { return -l; });
    CHECK_MESSAGE(warned(r, "L6", debug::Kind::LossNegated), r.str());
    CHECK(lead_cause(r) == "loss-negated");
  }
  SUBCASE("a mean divided by the batch size again under SGD: L6 leads with mean-divided-again") {
    auto model = std::make_shared<Mlp>();
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    const debug::RunReport r =
        train(*model, ce, opt, d, 6, [](const Tensor& l, int64_t rows) { return l / static_cast<double>(rows); });
    CHECK_MESSAGE(warned(r, "L6", debug::Kind::MeanDividedAgain), r.str());
    CHECK(lead_cause(r) == "mean-divided-again");
  }
  SUBCASE("the clean twins: a loss weighted 0.5, and 4 batches accumulated, each divided by 4") {
    {
      auto model = std::make_shared<Mlp>();
      optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
      const debug::RunReport r = train(*model, ce, opt, d, 6, [](const Tensor& l, int64_t) { return l * 0.5; });
      expect_clean(r);
      CHECK(r.findings.ran("L6"));
    }
    {
      auto model = std::make_shared<Mlp>();
      optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
      const debug::RunReport r = train(
          *model, ce, opt, d, 12, [](const Tensor& l, int64_t) { return l / 4.0; }, 4);
      expect_clean(r);
    }
  }
}

namespace {
// Three blobs in 6 dimensions, close enough that no feature separates them, and a seventh column.
Split with_column(const std::function<Tensor(const XY&)>& column) {
  const XY all = dtest::blobs(200, 3, 6, 3, 0.5);
  const Tensor x = cat({all.x, column(all)}, 1);
  return dtest::loaders(x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), x.narrow(0, 480, 120), all.y.narrow(0, 480, 120));
}
}  // namespace

TEST_CASE(
    "D7 target leakage: the label appended to the inputs warns; a categorical feature and continuous ones do not") {
  manual_seed(4);
  nn::CrossEntropyLoss ce;
  SUBCASE("the label as a seventh column: D7 leads with target-leakage") {
    const Split d = with_column([](const XY& a) { return a.y.unsqueeze(1).to(kFloat32) * 2.0 + 1.0; });
    auto model = std::make_shared<Mlp>(7, 3);
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = train(*model, ce, opt, d, 3);
    CHECK_MESSAGE(warned(r, "D7", debug::Kind::TargetLeakage), r.str());
    CHECK(lead_cause(r) == "target-leakage");
  }
  SUBCASE("the label with noise added (a code computed from the outcome): D7 leads with target-leakage") {
    const Split d = with_column([](const XY& a) {
      return a.y.unsqueeze(1).to(kFloat32) + 0.05 * randn({a.y.size(0), 1});
    });
    auto model = std::make_shared<Mlp>(7, 3);
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = train(*model, ce, opt, d, 3);
    CHECK_MESSAGE(warned(r, "D7", debug::Kind::TargetLeakage), r.str());
    CHECK(lead_cause(r) == "target-leakage");
  }
  SUBCASE("a score the classes threshold (class c for a score in [c, c + 1)): silent") {
    const Split d = with_column([](const XY& a) { return a.y.unsqueeze(1).to(kFloat32) + rand({a.y.size(0), 1}); });
    auto model = std::make_shared<Mlp>(7, 3);
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = train(*model, ce, opt, d, 3);
    CHECK_FALSE(warned(r, "D7", debug::Kind::TargetLeakage));
    CHECK(r.findings.ran("D7"));
  }
  SUBCASE("a categorical column of 5 groups, independent of the label: silent") {
    const Split d = with_column([](const XY& a) { return randint(0, 5, {a.y.size(0), 1}).to(kFloat32); });
    auto model = std::make_shared<Mlp>(7, 3);
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = train(*model, ce, opt, d, 3);
    CHECK_FALSE(warned(r, "D7", debug::Kind::TargetLeakage));
    CHECK(r.findings.ran("D7"));
  }
  SUBCASE("a measured feature that separates the classes with several values each (Iris's petal width): silent") {
    // Class c's rows take the values 3c, 3c + 1 and 3c + 2 (divided by 10): separable, and not a recoding.
    const Split d = with_column([](const XY& a) {
      return (a.y.unsqueeze(1) * 3 + randint(0, 3, {a.y.size(0), 1})).to(kFloat32) / 10.0;
    });
    auto model = std::make_shared<Mlp>(7, 3);
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = train(*model, ce, opt, d, 3);
    CHECK_FALSE(warned(r, "D7", debug::Kind::TargetLeakage));
    CHECK(r.findings.ran("D7"));
  }
  SUBCASE("an autoencoder, whose targets are its inputs: silent") {
    const XY all = dtest::blobs(100, 3, 6, 3, 1.0);
    const Split d = dtest::loaders(all.x.narrow(0, 0, 240), all.x.narrow(0, 0, 240), all.x.narrow(0, 240, 60),
                                   all.x.narrow(0, 240, 60));
    auto model = std::make_shared<Mlp>(6, 6);
    nn::MSELoss mse;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = train(*model, mse, opt, d, 2);
    CHECK_FALSE(warned(r, "D7", debug::Kind::TargetLeakage));
    CHECK(r.findings.ran("D7"));
  }
  SUBCASE("regression: the target copied into a column warns; a noisy linear target does not") {
    for (const bool leak : {true, false}) {
      CAPTURE(leak);
      manual_seed(4);
      const Tensor x = randn({300, 4});
      const Tensor y = (x.narrow(1, 0, 1) * 2.0 - x.narrow(1, 1, 1) + randn({300, 1}) * 0.1);
      const Tensor xin = leak ? cat({x, y * 3.0 - 1.0}, 1) : x;
      const Split d =
          dtest::loaders(xin.narrow(0, 0, 240), y.narrow(0, 0, 240), xin.narrow(0, 240, 60), y.narrow(0, 240, 60));
      auto model = std::make_shared<Mlp>(leak ? 5 : 4, 1);
      nn::MSELoss mse;
      optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
      const debug::RunReport r = train(*model, mse, opt, d, 3);
      CHECK_MESSAGE(warned(r, "D7", debug::Kind::TargetLeakage) == leak, r.str());
    }
  }
}

TEST_CASE("W8 over the run: losses kept as tensors keep every step's graph; kept as numbers, nothing grows") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  nn::CrossEntropyLoss ce;
  for (const bool tensors : {true, false}) {
    CAPTURE(tensors);
    auto model = std::make_shared<Mlp>();
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    std::vector<Tensor> kept;  // the faulty loop's history: each loss with its graph
    std::vector<double> logged;
    debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 3; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        Tensor l = ce((*model)(b.x), b.y);
        l.backward();
        opt.step();
        if (tensors)
          kept.push_back(l);
        else
          logged.push_back(l.item<double>());
      }
      s.epoch();
    }
    const debug::RunReport r = s.finish();
    CHECK(r.findings.ran("W8"));
    CHECK_MESSAGE(warned(r, "W8", debug::Kind::GraphsRetained) == tensors, r.str());
    if (tensors) CHECK(lead_cause(r) == "graphs-retained");
  }
}

TEST_CASE("check_graph_retention: a running total reset each epoch warns; a constant or noisy count does not") {
  std::vector<std::pair<int64_t, int64_t>> live;
  for (int64_t s = 1; s <= 45; ++s) live.emplace_back(s, 40 + 12 * ((s - 1) % 15));  // total += loss, 15-step epochs
  CHECK(debug::check_graph_retention(live).size() == 1);
  live.clear();
  for (int64_t s = 1; s <= 45; ++s) live.emplace_back(s, 40 + (s % 3));  // stochastic depth: the graph varies
  CHECK(debug::check_graph_retention(live).empty());
  live.clear();
  for (int64_t s = 1; s <= 6; ++s) live.emplace_back(s, 40 * s);  // too few steps to judge
  CHECK(debug::check_graph_retention(live).empty());
}

TEST_CASE("L4 on a resumed model: a low first loss from a model that already predicts the batch is info") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  nn::CrossEntropyLoss ce;
  auto model = std::make_shared<Mlp>();
  {  // the run before: trained, then saved and loaded (kept in memory here)
    optim::Adam first(model->parameters(), optim::AdamOptions(3e-3));
    for (int e = 0; e < 3; ++e)
      for (const nn::Batch& b : *d.train) {
        first.zero_grad();
        ce((*model)(b.x), b.y).backward();
        first.step();
      }
  }
  optim::Adam opt(model->parameters(), optim::AdamOptions(2e-5));  // fine-tuning on, at a small rate
  const debug::RunReport r = train(*model, ce, opt, d, 2);
  const debug::Finding* l4 = dtest::first_of(r, "L4", debug::Kind::InitialLoss);
  REQUIRE(l4 != nullptr);
  CHECK_MESSAGE(!l4->fires(), r.str());
  CHECK(l4->title.find("starts trained") != std::string::npos);
}

TEST_CASE("soften_trained_start: the same low loss stays a warning when the predictions are at chance") {
  const std::vector<debug::Finding> low = debug::check_initial_loss(0.11, 3, "cross_entropy");
  REQUIRE(low.size() == 1);
  REQUIRE(low[0].fires());
  const Tensor y = tensor(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}, {12});
  // Logits that pick the right class for 11 of 12 rows: a trained start.
  Tensor right = zeros({12, 3});
  for (int64_t i = 0; i < 12; ++i) right[i][i == 0 ? 1 : i % 3].fill_(5.0);
  std::vector<debug::Finding> trained = low;
  debug::soften_trained_start(trained, right, y);
  CHECK_FALSE(trained[0].fires());
  // Logits that always pick class 0: right on a third, chance.
  Tensor flat = zeros({12, 3});
  for (int64_t i = 0; i < 12; ++i) flat[i][0].fill_(5.0);
  std::vector<debug::Finding> untrained = low;
  debug::soften_trained_start(untrained, flat, y);
  CHECK(untrained[0].fires());
  // One logit per row against 0/1 targets, and probabilities.
  const Tensor t = tensor(std::vector<float>{0, 1, 0, 1, 0, 1, 0, 1, 0, 1}, {10, 1});
  const std::vector<debug::Finding> bce = debug::check_initial_loss(0.05, 2, "bce");
  std::vector<debug::Finding> logits = bce, probs = bce;
  debug::soften_trained_start(logits, t * 8.0 - 4.0, t);
  debug::soften_trained_start(probs, t * 0.8 + 0.1, t, true);
  CHECK_FALSE(logits[0].fires());
  CHECK_FALSE(probs[0].fires());
}

namespace {

// A tanh MLP under SGD (lr 0.5, momentum 0.9) tuned with clipping at 0.5; `after_step`: clip_grad_norm_ called after
// optimizer.step(), where it clips gradients the step already used.
debug::RunReport clip_run(bool after_step) {
  manual_seed(3);
  const Split d = dtest::split(5, 1.5);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 32), std::make_shared<nn::Tanh>(),
                                                std::make_shared<nn::Linear>(32, 3));
  nn::CrossEntropyLoss ce;
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.5).momentum(0.9));
  debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 5; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = ce((*model)(b.x), b.y);
      l.backward();
      if (!after_step) optim::clip_grad_norm_(model->parameters(), 0.5);
      opt.step();
      if (after_step) optim::clip_grad_norm_(model->parameters(), 0.5);
    }
    s.epoch();
  }
  return s.finish();
}

}  // namespace

TEST_CASE("clip_grad_norm_ after optimizer.step(): O5 leads with clip-misplaced; clipping before step is clean") {
  const debug::RunReport bug = clip_run(true);
  CHECK_MESSAGE(warned(bug, "O5", debug::Kind::TransformMisplaced), bug.str(true));
  CHECK(lead_cause(bug) == "clip-misplaced");
  const debug::RunReport clean = clip_run(false);
  CHECK_FALSE(warned(clean, "O5", debug::Kind::TransformMisplaced));
  expect_clean(clean);
}

// A regression in the target's own units (a strength in MPa around 36, sd about 17): the user's loop
// computes the validation mean squared error itself and hands it to Session::epoch.
enum class Report { KeptSum, Reset, ResetRoot };
debug::RunReport concrete_run(Report how) {
  manual_seed(6);
  Tensor w = randn({6, 1});
  w = w / sqrt(sum(w * w));
  auto make = [&](int64_t n) {
    const Tensor x = randn({n, 6});
    return std::make_pair(x, matmul(x, w) * 17.0 + 36.0 + randn({n, 1}) * 2.0);
  };
  const auto [xtr, ytr] = make(960);
  const auto [xva, yva] = make(160);
  const Split d = dtest::loaders(xtr, ytr, xva, yva);
  auto model = std::make_shared<dtest::Regressor>();
  nn::MSELoss mse;
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  debug::Session s(*model, mse, opt, {.train = d.train.get(), .val = d.val.get()});
  double val_sq = 0.0;
  int64_t val_n = 0;
  for (int e = 0; e < 60; ++e) {
    double total = 0.0;
    int64_t seen = 0;
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = mse((*model)(b.x), b.y);
      l.backward();
      opt.step();
      total += l.item<double>() * static_cast<double>(b.size());
      seen += b.size();
    }
    if (how != Report::KeptSum) val_sq = 0.0;  // the bug resets the count only
    val_n = 0;
    model->eval();
    {
      NoGradGuard ng;
      for (const nn::Batch& b : *d.val) {
        val_sq += sum(square((*model)(b.x) - b.y)).item<double>();
        val_n += b.size();
      }
    }
    model->train();
    const double val = val_sq / static_cast<double>(val_n);
    s.epoch(total / static_cast<double>(seen), how == Report::ResetRoot ? std::sqrt(val) : val);
  }
  return s.finish();
}

TEST_CASE(
    "a validation sum not reset between epochs: W3 leads with validation-misreported; reset (MSE or RMSE): clean") {
  const debug::RunReport bug = concrete_run(Report::KeptSum);
  const debug::Finding* f = dtest::first_of(bug, "W3", debug::Kind::ValidationMisreported);
  REQUIRE_MESSAGE(f != nullptr, bug.str(true));
  CHECK(f->severity == debug::Severity::Warning);
  CHECK(dtest::ev(*f, "reported validation loss, last epoch") >
        dtest::ev(*f, "reported validation loss, at its lowest epoch"));
  CHECK(dtest::ev(*f, "measured validation loss, last epoch") <
        dtest::ev(*f, "measured validation loss (up to 512 rows, eval mode), at that epoch"));
  CHECK(lead_cause(bug) == "validation-misreported");
  // The target's units (a variance near 290) set L7's scale: after 60 epochs, a fit to within the noise
  // (a mean square near 4) is no underfitting, reported as a mean square or as its root.
  for (const Report how : {Report::Reset, Report::ResetRoot}) {
    const debug::RunReport r = concrete_run(how);
    expect_clean(r);
    CHECK(dtest::first_of(r, "W3", debug::Kind::ValidationMisreported) == nullptr);
  }
}

namespace {

// A warm-up of 60 optimizer steps from a tenth of the rate into a cosine over the rest, stepped after every
// optimizer step, or (the bug) once per epoch: then the run never leaves the warm-up.
debug::RunReport warmup_run(bool per_epoch) {
  manual_seed(12);
  const Split d = dtest::split(12, 1.5);
  auto model = std::make_shared<dtest::Mlp>();
  nn::CrossEntropyLoss ce;
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  const int64_t epochs = 6, total = epochs * d.train->num_batches();
  optim::LinearWarmup sched(opt, 60, 0.1, std::make_unique<optim::CosineAnnealingLR>(opt, total - 60));
  debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int64_t e = 0; e < epochs; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = ce((*model)(b.x), b.y);
      l.backward();
      opt.step();
      if (!per_epoch) sched.step();
    }
    if (per_epoch) sched.step();
    s.epoch();
  }
  return s.finish();
}

}  // namespace

TEST_CASE("a warm-up counted in optimizer steps but stepped once per epoch: O6 says it never peaks; per step: clean") {
  const debug::RunReport bug = warmup_run(true);
  const debug::Finding* f = dtest::first_of(bug, "O6", debug::Kind::ScheduleUnreached);
  REQUIRE_MESSAGE(f != nullptr, bug.str(true));
  CHECK(dtest::ev(*f, "scheduler.step() calls") == 6.0);
  CHECK(dtest::ev(*f, "highest learning rate the run reached") < 0.5 * 0.05);
  CHECK(lead_cause(bug) == "lr-schedule");
  const debug::RunReport ok = warmup_run(false);
  CHECK(dtest::first_of(ok, "O6", debug::Kind::ScheduleUnreached) == nullptr);
  expect_clean(ok);
}

namespace {

// A small, noisy classification split that a wide MLP overfits: the training rows' loss falls far below
// the validation rows' within a few epochs. The loop hands the Session the mean loss of an evaluation
// pass each epoch: over the validation loader, or (the bug) over the training loader.
debug::RunReport evaluated_split_run(bool on_training, bool keep_best = false) {
  manual_seed(8);
  const Tensor w = randn({10, 3});
  auto make = [&](int64_t n) {
    const Tensor x = randn({n, 10});
    Tensor y = argmax(matmul(x, w), 1);
    const Tensor flip = lt(rand({n}), 0.25);  // a quarter of the labels drawn anew
    y = where(flip, randint(0, 3, {n}), y);
    return std::make_pair(x, y);
  };
  const auto [xtr, ytr] = make(160);
  const auto [xva, yva] = make(320);
  const Split d = dtest::loaders(xtr, ytr, xva, yva);
  auto model = std::make_shared<dtest::Mlp>(10, 3);
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  double best_loss = std::numeric_limits<double>::infinity();
  std::vector<Tensor> best;
  for (int e = 0; e < 16; ++e) {
    double total = 0.0;
    int64_t seen = 0;
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = ce((*model)(b.x), b.y);
      l.backward();
      opt.step();
      total += l.item<double>() * static_cast<double>(b.size());
      seen += b.size();
    }
    const optim::EvalResult ev = optim::evaluate(*model, on_training ? *d.train : *d.val);
    s.epoch(total / static_cast<double>(seen), ev.loss, ev.accuracy);
    if (keep_best && ev.loss < best_loss) {  // a snapshot of the best epoch's weights (copies)
      best_loss = ev.loss;
      best.clear();
      for (const Tensor& p : model->parameters()) best.push_back(p.detach().clone());
    }
  }
  if (keep_best) {  // the best epoch's weights restored before the final evaluation
    NoGradGuard ng;
    const std::vector<Tensor> ps = model->parameters();
    for (size_t i = 0; i < ps.size(); ++i) ps[i].detach().copy_(best[i]);
  }
  return s.finish();
}

}  // namespace

TEST_CASE("a loop that keeps its best epoch and loads it after training: the later epochs' rise and gap are info") {
  // The same overfitting run, its validation figures honest: kept to the last epoch, W3's rise, L1's
  // training-falls-validation-rises or L7's gap warn; with the best epoch's weights loaded after training
  // (copies kept at each new best), the final model is that epoch's and they are info.
  auto rise_or_gap = [](const debug::RunReport& r, debug::Severity at_least) {
    for (const debug::Finding& f : r.findings.findings())
      if (f.severity >= at_least && (f.is("W3", debug::Kind::ValidationRose) ||
                                     f.is("L1", debug::Kind::TrainDownValUp) || f.is("L7", debug::Kind::Overfitting)))
        return true;
    return false;
  };
  const debug::RunReport last = evaluated_split_run(false, false);
  CHECK_MESSAGE(rise_or_gap(last, debug::Severity::Warning), last.str(true));
  const debug::RunReport kept = evaluated_split_run(false, true);
  CHECK_MESSAGE(!rise_or_gap(kept, debug::Severity::Warning), kept.str(true));
  CHECK(rise_or_gap(kept, debug::Severity::Info));
  bool said = false;
  for (const debug::Finding& f : kept.findings.findings())
    said |= f.title.find("'s weights after training") != std::string::npos;
  CHECK(said);
}

TEST_CASE("a loop that reports its training loader's loss as the validation loss: W3 names it; the val loader: not") {
  const debug::RunReport bug = evaluated_split_run(true);
  const debug::Finding* f = dtest::first_of(bug, "W3", debug::Kind::ValidationMisreported);
  REQUIRE_MESSAGE(f != nullptr, bug.str(true));
  CHECK(f->title.find("training rows' loss") != std::string::npos);
  CHECK(dtest::ev(*f, "measured loss on validation rows, last epoch") >
        1.3 * dtest::ev(*f, "measured loss on training rows, last epoch"));
  CHECK(lead_cause(bug) == "validation-misreported");
  const debug::RunReport fixed = evaluated_split_run(false);
  CHECK_MESSAGE(dtest::first_of(fixed, "W3", debug::Kind::ValidationMisreported) == nullptr, fixed.str(true));
}

namespace {

// The user's loop steps a plateau scheduler (or an early stopper) once per epoch with the validation
// accuracy it computes itself, and hands the Session the same numbers.
enum class Watch { PlateauMin, PlateauMax, StopperMin, StopperMax, PlateauMinLoss };
debug::RunReport plateau_run(Watch how) {
  manual_seed(8);
  const Split d = dtest::split(3, 2.5);
  auto model = std::make_shared<Mlp>();
  nn::CrossEntropyLoss ce;
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.02).momentum(0.9));
  const bool plateau = how == Watch::PlateauMin || how == Watch::PlateauMax || how == Watch::PlateauMinLoss;
  const optim::Mode mode = how == Watch::PlateauMax || how == Watch::StopperMax ? optim::Mode::Max : optim::Mode::Min;
  optim::ReduceLROnPlateau sched(opt, optim::ReduceLROnPlateauOptions().mode(mode).patience(1).factor(0.3));
  optim::EarlyStopping stopper(3, 0.0, mode);
  debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 14; ++e) {
    double total = 0.0;
    int64_t seen = 0;
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = ce((*model)(b.x), b.y);
      l.backward();
      opt.step();
      total += l.item<double>() * static_cast<double>(b.size());
      seen += b.size();
    }
    model->eval();
    double val_loss = 0.0, correct = 0.0, rows = 0.0;
    {
      NoGradGuard ng;
      for (const nn::Batch& b : *d.val) {
        const Tensor out = (*model)(b.x);
        val_loss += ce(out, b.y).item<double>() * static_cast<double>(b.size());
        correct += sum(eq(argmax(out, 1), b.y).to(kFloat64)).item<double>();
        rows += static_cast<double>(b.size());
      }
    }
    model->train();
    const double acc = correct / rows;
    s.epoch(total / static_cast<double>(seen), val_loss / rows, acc);
    if (plateau) sched.step(how == Watch::PlateauMinLoss ? val_loss / rows : acc);
    if (!plateau && stopper.step(acc)) break;
  }
  return s.finish();
}

}  // namespace

TEST_CASE(
    "a plateau scheduler or early stopper in Mode::Min fed the accuracy: O6 leads; in Mode::Max, or on the loss: "
    "clean") {
  for (const Watch bug : {Watch::PlateauMin, Watch::StopperMin}) {
    const debug::RunReport r = plateau_run(bug);
    const debug::Finding* f = dtest::first_of(r, "O6", debug::Kind::MetricDirectionInverted);
    REQUIRE_MESSAGE(f != nullptr, r.str(true));
    CHECK(f->severity == debug::Severity::Warning);
    CHECK(dtest::ev(*f, "steps matched with the run's epochs") >= 4);
    CHECK(dtest::ev(*f, "mean |metric - the validation accuracy|") == doctest::Approx(0.0));
    CHECK(lead_cause(r) == "metric-direction");
  }
  for (const Watch ok : {Watch::PlateauMax, Watch::StopperMax, Watch::PlateauMinLoss}) {
    const debug::RunReport r = plateau_run(ok);
    CHECK_MESSAGE(dtest::first_of(r, "O6", debug::Kind::MetricDirectionInverted) == nullptr, r.str(true));
    expect_clean(r);
  }
}

namespace {

// Gradient accumulation over 4 micro-batches of 16, declared with set_accumulating(true), the loss
// divided by 4; `cleared`: zero_grad() before every backward instead of once per cycle.
debug::RunReport accumulation_run(bool cleared) {
  manual_seed(9);
  const Split d = dtest::split(3, 2.0);
  auto loader = std::make_shared<nn::DataLoader>(d.train->dataset_ptr(),
                                                 nn::DataLoaderOptions().batch_size(16).shuffle(true).seed(4));
  auto model = std::make_shared<Mlp>();
  nn::CrossEntropyLoss ce;
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  opt.set_accumulating(true);
  debug::Session s(*model, ce, opt, {.train = loader.get(), .val = d.val.get()});
  for (int e = 0; e < 8; ++e) {
    int k = 0;
    opt.zero_grad();
    for (const nn::Batch& b : *loader) {
      if (cleared) opt.zero_grad();
      Tensor l = ce((*model)(b.x), b.y) / 4.0;
      l.backward();
      if (++k % 4 == 0) {
        opt.step();
        opt.zero_grad();
      }
    }
    s.epoch();
  }
  return s.finish();
}

}  // namespace

TEST_CASE("zero_grad() before every micro-batch of a declared accumulation: O5 leads; once per cycle: clean") {
  const debug::RunReport bug = accumulation_run(true);
  const debug::Finding* f = dtest::first_of(bug, "O5", debug::Kind::AccumulationCleared);
  REQUIRE_MESSAGE(f != nullptr, bug.str(true));
  CHECK(f->severity == debug::Severity::Warning);
  // 30 micro-batches an epoch: 7 steps, each after three micro-batches whose gradient was cleared.
  CHECK(dtest::ev(*f, "zero_grad() calls that cleared an unused gradient") >= 2.0 * dtest::ev(*f, "optimizer steps"));
  CHECK(lead_cause(bug) == "accumulation-cleared");
  const debug::RunReport ok = accumulation_run(false);
  CHECK(dtest::first_of(ok, "O5", debug::Kind::AccumulationCleared) == nullptr);
  expect_clean(ok);
}

TEST_CASE("O8: Adam at 0.03, above the usual range, on a run that trains calmly is info after the lr / 10 probe") {
  // A rate picked by a range test (a tenth of the rate at the loss's minimum): the loss falls without a
  // spike, no unit dies, and a tenth of the rate trains no better. The warning O8 gives before training
  // foretells what did not come.
  manual_seed(3);
  const Split d = dtest::split(3, 1.5);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 32), std::make_shared<nn::Tanh>(),
                                                std::make_shared<nn::Linear>(32, 3));
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(0.03));
  const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 8);
  const debug::Finding* range = dtest::first_of(r, "O8", debug::Kind::LrAboveRange);
  REQUIRE_MESSAGE(range != nullptr, r.str(true));
  CHECK(range->severity == debug::Severity::Info);
  CHECK(range->title.find("trained calmly") != std::string::npos);
  expect_clean(r);
}

TEST_CASE("O8: Adam at 0.03 on a calm run stays a warning where the whole run again at a tenth of it ends better") {
  // Four overlapping blobs, an MLP with dropout: at 0.03 the loss falls without a spike and no unit dies,
  // and the first steps at a tenth of the rate fall no faster, but the weights never settle: the whole run
  // again at 0.003 ends with a validation loss 40% lower, and so does it against the run repeated at 0.03.
  manual_seed(1);
  const XY all = dtest::blobs(300, 4, 8, 1, 2.8);
  const Split d = dtest::loaders(all.x.narrow(0, 0, 800), all.y.narrow(0, 0, 800), all.x.narrow(0, 800, 400),
                                 all.y.narrow(0, 800, 400), 1);
  auto model = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Linear>(8, 64), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.3),
      std::make_shared<nn::Linear>(64, 64), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.3),
      std::make_shared<nn::Linear>(64, 4));
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(0.03));
  const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 10);
  const debug::Finding* range = dtest::first_of(r, "O8", debug::Kind::LrAboveRange);
  REQUIRE_MESSAGE(range != nullptr, r.str(true));
  CHECK_MESSAGE(range->severity == debug::Severity::Warning, r.str(true));
  CHECK(range->title.find("ends better on validation") != std::string::npos);
  const double run = dtest::ev(*range, "validation loss, the run"),
               tenth = dtest::ev(*range, "validation loss, the run repeated at lr / 10"),
               repeat = dtest::ev(*range, "validation loss, the run repeated at its rate");
  CHECK(tenth < 0.9 * run);
  CHECK(tenth < 0.9 * repeat);
  CHECK(dtest::ev(*range, "paired z of the examples' losses, lr / 10 under the run") >= 2.0);
  CHECK(lead_cause(r) == "lr-too-high");
}
