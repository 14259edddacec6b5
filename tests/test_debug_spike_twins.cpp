// L1's and O6's spikes against their own batches, each twin written as a user writes it: a
// regression whose targets are rarely large (5% of rows at 10, the rest near 0), whose first batch
// happens to hold none of them, so later batches lie far above the first loss without any update
// having made them worse; against a classifier at Adam's lr 0.3, whose loss jumps far above its
// start in the first steps because the updates threw the weights off.
#include <doctest/doctest.h>

#include <memory>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::expect_lead;
using dtest::first_of;
using dtest::Mlp;
using dtest::Regressor;
using dtest::Split;

namespace {

// Six standard normal features; the target is 10 where the first feature is above 1.645 (5% of
// rows), else 0, plus noise of std 0.05.
Split rare_large_targets() {
  manual_seed(12);
  const Tensor x = randn({1000, 6});
  const Tensor y =
      where(gt(x.narrow(1, 0, 1), 1.645), full({1000, 1}, 10.0), zeros({1000, 1})) + randn({1000, 1}) * 0.05;
  return dtest::loaders(x.narrow(0, 0, 800), y.narrow(0, 0, 800), x.narrow(0, 800, 200), y.narrow(0, 800, 200));
}

}  // namespace

TEST_CASE("rare large regression targets: jumps above the first loss on batches as hard at the start are info") {
  const Split d = rare_large_targets();
  auto model = std::make_shared<Regressor>();
  nn::MSELoss mse;
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-3));
  const debug::RunReport r = dtest::train_own_loop(*model, mse, opt, d, 15);
  expect_clean(r);
  const debug::Finding* hard = first_of(r, "L1", debug::Kind::LossSpiking);
  REQUIRE_MESSAGE(hard != nullptr, r.str(true));
  CHECK(hard->severity == debug::Severity::Info);
  // The premise: the jump is far above the first loss, and the batch was as hard before any update.
  CHECK(dtest::ev(*hard, "worst jump loss") > 10 * dtest::ev(*hard, "first loss"));
  const double first = dtest::ev(*hard, "first loss");
  CHECK(dtest::ev(*hard, "the same batch's loss at the initial weights") - first >=
        0.5 * (dtest::ev(*hard, "worst jump loss") - first));

  // Without the replay the same run warns: the first loss is the only starting value there is.
  manual_seed(12);
  const Split d2 = rare_large_targets();
  auto model2 = std::make_shared<Regressor>();
  optim::Adam opt2(model2->parameters(), optim::AdamOptions(1e-3));
  debug::DiagnoseOptions off;
  off.spike_replays = 0;
  const debug::RunReport unreplayed = dtest::train_own_loop(*model2, mse, opt2, d2, 15, off);
  const debug::Finding* spike = first_of(unreplayed, "L1", debug::Kind::LossSpiking);
  REQUIRE(spike != nullptr);
  CHECK(spike->severity == debug::Severity::Warning);
}

TEST_CASE("Adam at lr 0.3: the loss jumps above its batch's start, the spike stays under the rate") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  auto model = std::make_shared<Mlp>();
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(0.3));
  const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 5);
  const debug::Finding* spike = first_of(r, "L1", debug::Kind::LossSpiking);
  REQUIRE_MESSAGE(spike != nullptr, r.str(true));
  INFO(spike->str());
  CHECK(spike->severity == debug::Severity::Warning);
  expect_lead(r, "O8", "lr-too-high", {"L1", "O6"});

  manual_seed(4);
  auto clean_model = std::make_shared<Mlp>();
  optim::Adam clean_opt(clean_model->parameters(), optim::AdamOptions(1e-3));
  expect_clean(dtest::train_own_loop(*clean_model, ce, clean_opt, d, 5));
}
