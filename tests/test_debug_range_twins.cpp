// Reduced precision out of range (check M28) written as a user writes it, with a debug::Session
// watching: float16 autocast without loss scaling on a loss whose gradients are small, and
// bfloat16 parameters updated in their own dtype. Each buggy twin must lead with its cause,
// confirmed by M28; each clean twin (GradScaler; float32 master weights) must stay silent.
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

const debug::Finding* first_of(const debug::RunReport& r, debug::Kind k) { return dtest::first_of(r, "M28", k); }

// The float16 twin: a loss weighted by 1e-6, without (bug) or with a GradScaler (diagnosis_test_util.h).
debug::RunReport run_fp16(bool bug) { return dtest::run_fp16_weighted(bug); }

// SGD with a small learning rate. Bug: the parameters are bfloat16, so each update is rounded to
// bfloat16 in the weight (8 significant bits) and most of them are lost. Clean: float32
// parameters under bfloat16 autocast, or bfloat16 parameters with the optimizer's float32 master
// weights (`masters`).
constexpr double kLr = 0.05;
constexpr int kEpochs = 8;
debug::RunReport run_bf16(bool bug, bool masters = false) {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  nn::CrossEntropyLoss ce;
  auto model = std::make_shared<Mlp>();
  const bool bf16_params = bug || masters;
  if (bf16_params) model->to(kBFloat16);
  optim::SGD opt(model->parameters(), optim::SGDOptions(kLr));
  opt.set_master_weights(masters);
  debug::Session dbg(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < kEpochs; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l;
      if (bf16_params) {
        l = ce((*model)(b.x.to(kBFloat16)), b.y);
      } else {
        auto ac = autocast(kBFloat16);
        l = ce((*model)(b.x), b.y);
      }
      l.backward();
      opt.step();
    }
    dbg.epoch();
  }
  return dbg.finish();
}

}  // namespace

TEST_CASE("float16 autocast without loss scaling on small gradients: M28 leads with fp16-underflow") {
  const debug::RunReport r = run_fp16(true);
  const debug::Finding* f = first_of(r, debug::Kind::GradientUnderflow);
  REQUIRE_MESSAGE(f != nullptr, r.str(true));
  MESSAGE(f->title);
  CHECK(f->fires());
  CHECK(f->step >= 1);
  CHECK_FALSE(f->module.empty());
  expect_lead(r, "M28", "fp16-underflow");
}

TEST_CASE("the same with a GradScaler: gradients measured as scaled stay in range, silent") {
  const debug::RunReport r = run_fp16(false);
  expect_clean(r);
  CHECK(r.findings.ran("M28"));
  const debug::Finding* f = first_of(r, debug::Kind::RangeSummary);
  REQUIRE(f != nullptr);
  MESSAGE(f->title);
  CHECK_FALSE(f->fires());
}

TEST_CASE("bfloat16 parameters with a small learning rate: their updates round away, M28 leads") {
  const debug::RunReport r = run_bf16(true);
  const debug::Finding* f = first_of(r, debug::Kind::UpdatesVanish);
  REQUIRE_MESSAGE(f != nullptr, r.str(true));
  MESSAGE(f->title);
  CHECK(f->fires());
  CHECK_FALSE(f->parameter.empty());
  expect_lead(r, "M28", "bf16-updates");
}

TEST_CASE("float32 master weights under bfloat16 autocast: the clean twin stays silent") {
  const debug::RunReport r = run_bf16(false);
  expect_clean(r);
  CHECK(r.findings.ran("M28"));
}

TEST_CASE("bfloat16 parameters with the optimizer's float32 master weights: the updates add up there, silent") {
  const debug::RunReport r = run_bf16(false, true);
  expect_clean(r);
  CHECK(r.findings.ran("M28"));
  CHECK(first_of(r, debug::Kind::UpdatesVanish) == nullptr);
}

TEST_CASE("nothing 16-bit: M28 has nothing to say") {
  const debug::RunReport r = dtest::run_float32_mlp();
  CHECK_FALSE(r.findings.ran("M28"));
  for (const debug::Finding& f : r.findings.findings()) CHECK(f.check != "M28");
}

TEST_CASE("RangeCounts against float16's and bfloat16's range") {
  debug::RangeCounts c;
  c.add(1e-8f, kFloat16);    // below 2^-24: zero in float16
  c.add(1e-5f, kFloat16);    // subnormal (below 2^-14)
  c.add(1.0f, kFloat16);     // normal
  c.add(70000.f, kFloat16);  // above 65504
  CHECK(c.values == 4);
  CHECK(c.zero == 1);
  CHECK(c.subnormal == 1);
  CHECK(c.overflow == 1);
  CHECK(c.exponents[40] == 1);  // 1.0 is 2^0
  debug::RangeCounts b;
  b.add(1e-8f, kBFloat16);
  b.add(70000.f, kBFloat16);
  CHECK(b.zero == 0);
  CHECK(b.subnormal == 0);
  CHECK(b.overflow == 0);
}

TEST_CASE("RangeWatch on its own: attach(model) and attach(optimizer)") {
  auto run = [](DType dt, double lr) {
    manual_seed(4);
    auto lin = std::make_shared<nn::Linear>(8, 4);
    lin->to(dt);
    optim::SGD opt(lin->parameters(), optim::SGDOptions(lr));
    debug::RangeWatch w;
    w.attach(*lin);
    w.attach(opt);
    for (int s = 0; s < 3; ++s) {
      opt.zero_grad();
      Tensor y = (*lin)(randn({16, 8}).to(dt));
      (y * y).mean().backward();
      opt.step();
    }
    std::vector<debug::Finding> fs = w.findings();
    w.detach();
    return fs;
  };
  // bfloat16 weights, lr 1e-4: every update is far below half a bfloat16 spacing.
  const std::vector<debug::Finding> bf = run(kBFloat16, 1e-4);
  bool vanish = false;
  for (const debug::Finding& f : bf) vanish = vanish || f.is("M28", debug::Kind::UpdatesVanish);
  CHECK(vanish);
  // bfloat16 weights, lr 1: the updates land.
  for (const debug::Finding& f : run(kBFloat16, 1.0)) CHECK_FALSE(f.fires());
  // float32: nothing measured, no finding.
  CHECK(run(kFloat32, 1e-4).empty());
}
