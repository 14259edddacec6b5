// The loss scaler's bugs (check O10) written as a user writes them, with a debug::Session watching
// the optim::GradScaler: gradients clipped before scaler.unscale_, and a scale that collapses
// because every step's gradient is inf/NaN. Each buggy twin must lead with its cause, confirmed by
// O10; each clean twin (the same loop with the bug removed) must stay silent.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"
#include "json_mini.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::expect_lead;
using dtest::Mlp;
using dtest::Split;

namespace {

const debug::Finding* first_of(const debug::RunReport& r, debug::Kind k) { return dtest::first_of(r, "O10", k); }

// SGD on the blobs with a GradScaler; clip_grad_norm_(max_norm 1) every step, before
// scaler.unscale_ (bug) or after it (clean).
debug::RunReport run_clip(bool bug) {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  nn::CrossEntropyLoss ce;
  auto model = std::make_shared<Mlp>();
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05));
  optim::GradScaler scaler;
  debug::Session dbg(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  dbg.watch(scaler);
  for (int e = 0; e < 4; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = ce((*model)(b.x), b.y);
      scaler.scale(l).backward();
      if (!bug) scaler.unscale_(opt);  // the bug: clipping first, on gradients x 65536
      optim::clip_grad_norm_(model->parameters(), 1.0);
      scaler.step(opt);
      scaler.update();
    }
    dbg.epoch();
  }
  return dbg.finish();
}

// A sparsity penalty on fc1's bias, which the user initialised to zero: sqrt(|b|) has an infinite
// slope at 0 (the bug), so every gradient of fc1.bias is NaN; the scaler skips every step and
// halves its scale each time, and nothing trains. Clean: the smooth sqrt(b^2 + eps).
debug::RunReport run_collapse(bool bug) {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  nn::CrossEntropyLoss ce;
  auto model = std::make_shared<Mlp>();
  {
    NoGradGuard ng;
    model->fc1->bias.zero_();
  }
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05));
  optim::GradScaler scaler;
  debug::Session dbg(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  dbg.watch(scaler);
  for (int e = 0; e < 4; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      const Tensor& bias = model->fc1->bias;
      Tensor penalty = bug ? bias.abs().sqrt().sum() : (bias * bias + 1e-8).sqrt().sum();
      Tensor l = ce((*model)(b.x), b.y) + penalty * 1e-4;
      scaler.scale(l).backward();
      scaler.step(opt);
      scaler.update();
    }
    dbg.epoch();
  }
  return dbg.finish();
}

}  // namespace

TEST_CASE("clip_grad_norm_ before scaler.unscale_: O10 leads with scaled-clipping") {
  const debug::RunReport r = run_clip(true);
  const debug::Finding* f = first_of(r, debug::Kind::ClippedScaledGradients);
  REQUIRE_MESSAGE(f != nullptr, r.str(true));
  CHECK(f->module == "clip_grad_norm_");
  CHECK(f->fires());
  expect_lead(r, "O10", "scaled-clipping");
}

TEST_CASE("clip_grad_norm_ after scaler.unscale_: the clean twin stays silent, O10 ran") {
  const debug::RunReport r = run_clip(false);
  expect_clean(r);
  CHECK(r.findings.ran("O10"));
  const debug::Finding* f = first_of(r, debug::Kind::ScalerSummary);
  REQUIRE(f != nullptr);
  CHECK_FALSE(f->fires());
}

TEST_CASE("sqrt(|b|) on a bias initialised to zero: every step skipped, the scale collapses; O10 leads") {
  const debug::RunReport r = run_collapse(true);
  const debug::Finding* f = first_of(r, debug::Kind::ScaleCollapsed);
  REQUIRE_MESSAGE(f != nullptr, r.str(true));
  CHECK(f->parameter == "fc1.bias");
  expect_lead(r, "O10", "scaler-skips");
}

TEST_CASE("the smooth sqrt(b^2 + eps): the clean twin stays silent") {
  const debug::RunReport r = run_collapse(false);
  expect_clean(r);
  CHECK(r.findings.ran("O10"));
}
