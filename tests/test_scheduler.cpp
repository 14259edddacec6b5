// Tests for optim/scheduler: every schedule's learning-rate sequence against a
// hand-computed one, per-group scaling, ReduceLROnPlateau, EarlyStopping.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "core/ops.h"
#include "nn_test_util.h"
#include "optim/optim.h"

namespace optim = gs::optim;
using gs::Tensor;
using Vec = std::vector<double>;

namespace {

using nntest::error_of;
using nntest::has;

// An SGD over two parameters in two groups, lrs 0.1 and 0.01.
struct TwoGroups {
  Tensor a = gs::zeros({2}).requires_grad_(), b = gs::zeros({2}).requires_grad_();
  optim::SGD opt{std::vector<optim::ParamGroup>{optim::ParamGroup{{a}, 0.1}, optim::ParamGroup{{b}, 0.01}},
                 optim::SGDOptions(0.1)};
};

// lr of group 0 after each of `steps` step() calls, starting with the one set on construction.
Vec lr_sequence(optim::LRScheduler& s, int steps) {
  Vec out{s.get_last_lr()[0]};
  for (int t = 0; t < steps; ++t) {
    s.step();
    CHECK(s.get_last_lr()[0] == s.optimizer().param_groups()[0].lr);
    out.push_back(s.get_last_lr()[0]);
  }
  return out;
}

void check_seq(const Vec& got, const Vec& want) {
  REQUIRE(got.size() == want.size());
  for (size_t t = 0; t < got.size(); ++t) {
    CAPTURE(t);
    CHECK(got[t] == doctest::Approx(want[t]).epsilon(1e-12));
  }
}

}  // namespace

TEST_CASE("StepLR: lr halves every 3 steps, in every group") {
  TwoGroups m;
  optim::StepLR sched(m.opt, 3, 0.5);
  check_seq(lr_sequence(sched, 12),
            {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125, 0.0125, 0.0125, 0.00625});
  CHECK(sched.last_epoch() == 12);
  CHECK(sched.get_last_lr()[1] == doctest::Approx(0.000625));  // group 1: its own 0.01, same factor
  CHECK(m.opt.param_groups()[1].lr == doctest::Approx(0.000625));
  CHECK(has(error_of([&] { optim::StepLR(m.opt, 0); }), "step_size"));
}

TEST_CASE("CosineAnnealingLR: from base to eta_min over T_max steps, then back") {
  TwoGroups m;
  optim::CosineAnnealingLR sched(m.opt, 10, 0.001);
  Vec want;
  for (int t = 0; t <= 20; ++t) want.push_back(0.001 + (0.1 - 0.001) * (1 + std::cos(std::numbers::pi * t / 10)) / 2);
  const Vec got = lr_sequence(sched, 20);
  check_seq(got, want);
  CHECK(got[0] == doctest::Approx(0.1));
  CHECK(got[5] == doctest::Approx((0.1 + 0.001) / 2));
  CHECK(got[10] == doctest::Approx(0.001));
  CHECK(got[20] == doctest::Approx(0.1));
  CHECK(sched.get_last_lr()[1] == doctest::Approx(0.01));
}

TEST_CASE("LinearWarmup: start_factor * base up to base over warmup_steps") {
  TwoGroups m;
  optim::LinearWarmup sched(m.opt, 5, 0.2);
  CHECK(m.opt.param_groups()[0].lr == doctest::Approx(0.02));  // low from the first step on
  CHECK(m.opt.param_groups()[1].lr == doctest::Approx(0.002));
  // 0.1 * (0.2 + 0.8 * t / 5)
  check_seq(lr_sequence(sched, 8), {0.02, 0.036, 0.052, 0.068, 0.084, 0.1, 0.1, 0.1, 0.1});
  CHECK(sched.base_lrs() == Vec{0.1, 0.01});
  CHECK(has(error_of([&] { optim::LinearWarmup(m.opt, 3, 0.0); }), "start_factor"));
}

TEST_CASE("LinearWarmup then cosine, and then StepLR") {
  {
    TwoGroups m;
    optim::LinearWarmup sched(m.opt, 4, 0.5, std::make_unique<optim::CosineAnnealingLR>(m.opt, 8, 0.0));
    Vec want;
    for (int t = 0; t <= 16; ++t)
      want.push_back(t < 4 ? 0.1 * (0.5 + 0.5 * t / 4.0) : 0.1 * (1 + std::cos(std::numbers::pi * (t - 4) / 8)) / 2);
    const Vec got = lr_sequence(sched, 16);
    check_seq(got, want);
    CHECK(got[4] == doctest::Approx(0.1));
    CHECK(got[8] == doctest::Approx(0.05));
    CHECK(got[12] == doctest::Approx(0.0).epsilon(1e-12));
    CHECK(sched.after() != nullptr);
  }
  {
    TwoGroups m;
    optim::LinearWarmup sched(m.opt, 2, 0.5, std::make_unique<optim::StepLR>(m.opt, 2, 0.1));
    check_seq(lr_sequence(sched, 7), {0.05, 0.075, 0.1, 0.1, 0.01, 0.01, 0.001, 0.001});
  }
  TwoGroups m, other;
  CHECK(has(error_of([&] { optim::LinearWarmup(m.opt, 2, 0.5, std::make_unique<optim::StepLR>(other.opt, 2)); }),
            "different optimizer"));
}

TEST_CASE("ReduceLROnPlateau: patience, threshold, cooldown, min_lr") {
  TwoGroups m;
  using TM = optim::ReduceLROnPlateauOptions::ThresholdMode;
  optim::ReduceLROnPlateau sched(m.opt, optim::ReduceLROnPlateauOptions()
                                            .mode(optim::Mode::Min)
                                            .factor(0.5)
                                            .patience(2)
                                            .threshold(0.01)
                                            .threshold_mode(TM::Abs)
                                            .cooldown(1)
                                            .min_lr(0.02));
  // metric        lr   why
  const std::vector<std::pair<double, double>> steps = {
      {1.0, 0.1},     // best 1.0
      {0.9, 0.1},     // best 0.9
      {0.895, 0.1},   // bad 1: not 0.01 better
      {0.95, 0.1},    // bad 2
      {0.92, 0.05},   // bad 3 > patience: halve, cooldown 1
      {0.93, 0.05},   // in cooldown: bad reset
      {0.93, 0.05},   // bad 1
      {0.93, 0.05},   // bad 2
      {0.93, 0.025},  // bad 3: halve
      {0.5, 0.025},   // best 0.5 (cooldown ends)
      {0.6, 0.025},   // bad 1
      {0.6, 0.025},   // bad 2
      {0.6, 0.02},    // bad 3: max(0.0125, min_lr 0.02)
      {0.6, 0.02},    // cooldown
      {0.6, 0.02},    // bad 1
      {0.6, 0.02},    // bad 2
      {0.6, 0.02},    // bad 3 again: already at min_lr
  };
  for (size_t t = 0; t < steps.size(); ++t) {
    CAPTURE(t);
    sched.step(steps[t].first);
    CHECK(sched.get_last_lr()[0] == doctest::Approx(steps[t].second));
    CHECK(m.opt.param_groups()[0].lr == doctest::Approx(steps[t].second));
  }
  CHECK(sched.best() == 0.5);
  // Group 1 starts at 0.01, already below min_lr: min_lr never raises an lr, so it stays.
  CHECK(sched.get_last_lr()[1] == doctest::Approx(0.01));
  CHECK(sched.last_epoch() == 17);
}

TEST_CASE("ReduceLROnPlateau: max mode with a relative threshold; NaN is never better") {
  TwoGroups m;
  optim::ReduceLROnPlateau sched(m.opt,
                                 optim::ReduceLROnPlateauOptions().mode(optim::Mode::Max).patience(1).threshold(0.1));
  sched.step(0.5);   // best 0.5
  sched.step(0.54);  // not > 0.5 * 1.1: bad 1
  CHECK(sched.num_bad_epochs() == 1);
  sched.step(0.56);  // > 0.55: best
  CHECK(sched.best() == 0.56);
  sched.step(std::nan(""));  // bad 1
  sched.step(0.1);           // bad 2 > 1: lr * 0.1
  CHECK(sched.get_last_lr()[0] == doctest::Approx(0.01));
  CHECK(
      has(error_of([&] { optim::ReduceLROnPlateau(m.opt, optim::ReduceLROnPlateauOptions().factor(1.0)); }), "factor"));
}

TEST_CASE("EarlyStopping: stops after `patience` steps without a min_delta improvement") {
  optim::EarlyStopping stop(3, 0.01);
  const Vec metrics = {1.0, 0.95, 0.945, 0.96, 0.93, 0.93, 0.93, 0.93};
  const std::vector<bool> want = {false, false, false, false, false, false, false, true};
  for (size_t t = 0; t < metrics.size(); ++t) {
    CAPTURE(t);
    CHECK(stop.step(metrics[t]) == want[t]);
  }
  CHECK(stop.best() == 0.93);
  CHECK(stop.best_step() == 4);
  CHECK(stop.num_bad_steps() == 3);
  CHECK(stop.should_stop());
  stop.reset();
  CHECK_FALSE(stop.should_stop());
  CHECK(stop.best_step() == -1);

  optim::EarlyStopping acc(2, 0.0, optim::Mode::Max);
  CHECK_FALSE(acc.step(0.5));
  CHECK_FALSE(acc.step(0.6));
  CHECK_FALSE(acc.step(0.6));  // equal is not better: bad 1
  CHECK(acc.step(0.55));       // bad 2
  CHECK(acc.best() == 0.6);

  optim::EarlyStopping diverged(100);
  CHECK_FALSE(diverged.step(1.0));
  CHECK(diverged.step(std::nan("")));  // a NaN loss stops at once
  CHECK(has(error_of([] { optim::EarlyStopping(0); }), "patience"));
}

TEST_CASE("a Mode value outside its enum is refused at construction") {
  CHECK(has(error_of([] { optim::EarlyStopping(3, 0.0, static_cast<optim::Mode>(4)); }), "mode value 4"));
}

TEST_CASE("a factor that is not finite is refused, and an lr that overflows never reaches the weights") {
  TwoGroups g;
  const double inf = std::numeric_limits<double>::infinity();
  const std::string gamma = error_of([&] { optim::StepLR(g.opt, 1, inf); });
  CHECK(has(gamma, "gamma must be finite and > 0"));
  CHECK(has(gamma, "got inf"));
  CHECK(has(error_of([&] { optim::StepLR(g.opt, 1, std::nan("")); }), "gamma must be finite"));
  CHECK(has(error_of([&] { optim::CosineAnnealingLR(g.opt, 10, inf); }), "eta_min must be finite"));
  CHECK(has(error_of([&] { optim::ReduceLROnPlateau(g.opt, optim::ReduceLROnPlateauOptions().min_lr(inf)); }),
            "min_lr must be finite"));
  // A finite gamma whose powers overflow: the step that would set inf is refused, the lrs stay.
  optim::StepLR big(g.opt, 1, 1e200);
  big.step();  // 0.1 * 1e200
  const std::string e = error_of([&] { big.step(); });
  CHECK(has(e, "StepLR.step"));
  CHECK(has(e, "the learning rate inf"));
  CHECK(g.opt.param_groups()[0].lr == doctest::Approx(1e199));
  CHECK(std::isfinite(g.opt.param_groups()[1].lr));
  // The optimizer's own setter, and an lr written straight into a group, are checked too.
  CHECK(has(error_of([&] { g.opt.set_lr(-1.0); }), "would set the learning rate of group 0 to -1"));
  CHECK(has(error_of([&] { g.opt.set_group_lr(0, inf, "mine"); }), "mine"));
  g.opt.param_groups()[1].lr = inf;
  g.a.set_grad(gs::ones({2}));
  CHECK(has(error_of([&] { g.opt.step(); }), "group 1 has the learning rate inf"));
  CHECK(g.a.to_vector<float>()[0] == 0.0f);  // no update ran
}
