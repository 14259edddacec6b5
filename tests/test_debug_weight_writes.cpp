// O6 on what the loop writes into the weights between optimizer steps, healthy and faulty, each
// written as a user writes it: a max-norm constraint at a usual limit against one far below the
// weights' norms; Lookahead against a Lookahead whose slow weights never move; SAM's perturbation
// and restore; a re-initialisation at each epoch; a hand-written SGD step beside step(). And the
// tracker's measurement on writes whose share is known.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gradsleuth.h>

#include "debug/checks/optim/weight_writes.h"
#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::lead_cause;
using dtest::Mlp;
using dtest::Split;

namespace {

// The user's loop: zero_grad, forward, backward, `between` (after backward, before step: SAM, a
// hand-written update), step, `after` (a constraint, Lookahead), and `at_epoch_end`.
debug::RunReport train(nn::Module& model, optim::Optimizer& opt, const Split& d, int epochs,
                       const std::function<void()>& after, const std::function<void()>& between = nullptr,
                       const std::function<void()>& at_epoch_end = nullptr) {
  nn::CrossEntropyLoss ce;
  debug::Session s(model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < epochs; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      ce(model(b.x), b.y).backward();
      if (between) between();
      opt.step();
      if (after) after();
    }
    if (at_epoch_end) at_epoch_end();
    s.epoch();
  }
  return s.finish();
}

// Each weight matrix's rows rescaled to a norm of at most `limit` (Srivastava et al.'s max-norm).
void max_norm(Mlp& m, double limit) {
  NoGradGuard ng;
  for (const auto& l : {m.fc1, m.fc2, m.fc3}) {
    Tensor w = l->weight;
    w.mul_(minimum(limit / (sqrt(sum(w * w, {1}, true)) + 1e-12), 1.0));
  }
}

// Lookahead (Zhang et al.): every k steps the slow weights move alpha of the way to the fast ones,
// and the fast ones restart from them. `frozen_slow`: the slow weights are never updated.
struct Lookahead {
  std::vector<Tensor> params, slow;
  double alpha;
  bool frozen_slow;
  int t = 0;
  Lookahead(std::vector<Tensor> ps, double a, bool frozen) : params(std::move(ps)), alpha(a), frozen_slow(frozen) {
    for (const Tensor& p : params) slow.push_back(p.detach().clone());
  }
  void operator()() {
    if (++t % 5 != 0) return;
    NoGradGuard ng;
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor target = slow[i] + (params[i].detach() - slow[i]) * alpha;
      if (!frozen_slow) slow[i] = target;
      params[i].copy_(target);
    }
  }
};

bool warned(const debug::RunReport& r, debug::Kind k) {
  for (const debug::Finding& f : r.findings.findings())
    if (f.is("O6", k) && f.fires()) return true;
  return false;
}

}  // namespace

TEST_CASE("a max-norm constraint: at 2 it works with the optimizer; at 1e-3 it takes back every step") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  const auto owner = std::make_shared<Mlp>();
  Mlp& model = *owner;
  optim::SGD opt(model.parameters(), optim::SGDOptions(0.05).momentum(0.9));
  SUBCASE("limit 2") {
    const debug::RunReport r = train(model, opt, d, 5, [&] { max_norm(model, 2.0); });
    expect_clean(r);
  }
  SUBCASE("limit 1e-3") {
    const debug::RunReport r = train(model, opt, d, 5, [&] { max_norm(model, 1e-3); });
    CHECK_MESSAGE(warned(r, debug::Kind::WeightsRewritten), r.str());
    CHECK(lead_cause(r) == "weights-rewritten");
  }
}

TEST_CASE("Lookahead takes back 1 - alpha of each period by design; with slow weights that never move, all of it") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  const auto owner = std::make_shared<Mlp>();
  Mlp& model = *owner;
  optim::Adam opt(model.parameters(), optim::AdamOptions(3e-3));
  SUBCASE("alpha 0.5") {
    Lookahead la(model.parameters(), 0.5, false);
    const debug::RunReport r = train(model, opt, d, 6, [&] { la(); });
    expect_clean(r);
    const debug::Finding* f = nullptr;
    for (const debug::Finding& g : r.findings.findings())
      if (g.check == "O6" && !std::isnan(dtest::evidence(g, "share of the optimizer's movement the writes took back")))
        f = &g;
    REQUIRE(f != nullptr);  // said as info, with the share
    CHECK(dtest::evidence(*f, "share of the optimizer's movement the writes took back") ==
          doctest::Approx(0.5).epsilon(0.02));
  }
  SUBCASE("slow weights never updated") {
    Lookahead la(model.parameters(), 0.5, true);
    const debug::RunReport r = train(model, opt, d, 6, [&] { la(); });
    CHECK_MESSAGE(warned(r, debug::Kind::WeightsRewritten), r.str());
    CHECK(lead_cause(r) == "weights-rewritten");
  }
}

TEST_CASE("SAM perturbs and restores the weights inside a step: silent; a re-initialisation each epoch warns") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  const auto owner = std::make_shared<Mlp>();
  Mlp& model = *owner;
  SUBCASE("SAM (rho 0.05): w + e, a second forward and backward, w - e, step") {
    optim::SGD opt(model.parameters(), optim::SGDOptions(0.05).momentum(0.9));
    nn::CrossEntropyLoss ce;
    const Split& dd = d;
    debug::Session s(model, ce, opt, {.train = dd.train.get(), .val = dd.val.get()});
    const std::vector<Tensor> ps = model.parameters();
    for (int e = 0; e < 5; ++e) {
      for (const nn::Batch& b : *dd.train) {
        opt.zero_grad();
        ce(model(b.x), b.y).backward();
        std::vector<Tensor> eps;
        {
          NoGradGuard ng;
          double sq = 0.0;
          for (const Tensor& p : ps) sq += sum(p.grad() * p.grad()).item<double>();
          for (const Tensor& p : ps) {
            eps.push_back(p.grad() * (0.05 / (std::sqrt(sq) + 1e-12)));
            Tensor(p).add_(eps.back());
          }
        }
        opt.zero_grad();
        ce(model(b.x), b.y).backward();
        {
          NoGradGuard ng;
          for (size_t i = 0; i < ps.size(); ++i) Tensor(ps[i]).sub_(eps[i]);
        }
        opt.step();
      }
      s.epoch();
    }
    expect_clean(s.finish());
  }
  SUBCASE("reset_parameters() at each epoch's end") {
    optim::Adam opt(model.parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = train(model, opt, d, 6, nullptr, nullptr, [&] {
      NoGradGuard ng;
      for (const auto& l : {model.fc1, model.fc2, model.fc3}) l->reset_parameters();
    });
    CHECK_MESSAGE(warned(r, debug::Kind::WeightsRewritten), r.str());
    CHECK(lead_cause(r) == "weights-rewritten");
  }
}

TEST_CASE("a hand-written SGD step beside optimizer.step() is a second update") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  const auto owner = std::make_shared<Mlp>();
  Mlp& model = *owner;
  optim::SGD opt(model.parameters(), optim::SGDOptions(0.3).momentum(0.9));
  const debug::RunReport r = train(model, opt, d, 5, nullptr, [&] {
    NoGradGuard ng;
    for (Tensor p : model.parameters()) p.sub_(p.grad() * 0.3);
  });
  CHECK_MESSAGE(warned(r, debug::Kind::WeightsUpdatedTwice), r.str());
  CHECK(lead_cause(r) == "weights-updated-twice");
}

TEST_CASE("WeightWriteTracker: the share of the optimizer's movement a write takes back, measured exactly") {
  // One weight, plain SGD at lr 1 on a loss whose gradient is a constant g: each step moves it by -g.
  Tensor w = zeros({4}).requires_grad_(true);
  optim::SGD opt({w}, optim::SGDOptions(1.0));
  const Tensor g = tensor(std::vector<float>{1, 2, 3, 4}, {4});
  auto step = [&] {
    opt.zero_grad();
    sum(w * g).backward();
    opt.step();
  };
  struct One : nn::Module {
    explicit One(const Tensor& t) : Module("One") { register_parameter("w", t); }
  } model(w);
  debug::WeightWriteTracker t;
  t.attach(opt, model);
  for (int i = 0; i < 8; ++i) {
    step();
    NoGradGuard ng;
    w.mul_(0.75);  // keeps 3/4 of every weight: of what the optimizer moved it since the start, 1/4 back
  }
  step();
  t.finish();
  const debug::WeightWriteTracker::Summary s = t.summary();
  CHECK(s.steps == 9);
  CHECK(s.written_steps == 8);
  CHECK(s.followed == 1);
  CHECK(s.measured_writes == 7);             // the first write starts the following
  CHECK(s.cosine == doctest::Approx(-1.0));  // against the movement
  // Along g: from the first write on (w = -0.75 g), seven steps of -g each followed by w *= 0.75,
  // then one more step; the writes sum to 5.6815 g against 9 g of movement... worked in closed form:
  // writes W = sum of -0.25 (w after each step), movement M = (w_end - start) - W: -W / M = 0.63129.
  CHECK(s.undone == doctest::Approx(0.631292).epsilon(1e-4));
  CHECK(s.write_ratio == doctest::Approx(0.631292).epsilon(1e-4));
  // Past the budget of followed values, a write is counted and not measured.
  debug::WeightWriteTracker capped;
  capped.attach(opt, model, 2);  // the weight holds 4 values
  for (int i = 0; i < 3; ++i) {
    step();
    NoGradGuard ng;
    w.mul_(0.75);
  }
  step();
  capped.finish();
  CHECK(capped.summary().written_steps == 3);
  CHECK(capped.summary().followed == 0);
  CHECK(std::isnan(capped.summary().undone));
  capped.detach();
  // Without writes, nothing is followed and the summary has no share.
  debug::WeightWriteTracker quiet;
  quiet.attach(opt, model);
  step();
  step();
  quiet.finish();
  CHECK(quiet.summary().written_steps == 0);
  CHECK(std::isnan(quiet.summary().undone));
}

TEST_CASE(
    "WeightWriteTracker: a write after the last step that keeps the last step's values, against one that moves them") {
  Tensor w = zeros({300}).requires_grad_(true);
  optim::SGD opt({w}, optim::SGDOptions(0.1));
  const Tensor g = arange(300, kFloat32) * 0.01 + 1.0;
  auto step = [&] {
    opt.zero_grad();
    sum(w * g).backward();
    opt.step();
  };
  struct One : nn::Module {
    explicit One(const Tensor& t) : Module("One") { register_parameter("w", t); }
  } model(w);
  // A snapshot that shares the weight's storage (detach(), not clone()) copied back: the same values.
  {
    debug::WeightWriteTracker t;
    t.attach(opt, model);
    const Tensor aliased = w.detach();
    for (int i = 0; i < 3; ++i) step();
    NoGradGuard ng;
    w.copy_(aliased);
    t.finish();
    CHECK(t.summary().after_last_step);
    CHECK(t.summary().after_last_step_same);
  }
  // An average of the weights copied in at the end (an EMA lags the weights by a little): the values change.
  {
    debug::WeightWriteTracker t;
    t.attach(opt, model);
    for (int i = 0; i < 3; ++i) step();
    NoGradGuard ng;
    Tensor avg = w.detach().clone();
    avg.add_(1e-3);
    w.copy_(avg);
    t.finish();
    CHECK(t.summary().after_last_step);
    CHECK_FALSE(t.summary().after_last_step_same);
  }
  // No write after the last step: neither.
  {
    debug::WeightWriteTracker t;
    t.attach(opt, model);
    for (int i = 0; i < 3; ++i) step();
    t.finish();
    CHECK_FALSE(t.summary().after_last_step);
    CHECK_FALSE(t.summary().after_last_step_same);
  }
}
