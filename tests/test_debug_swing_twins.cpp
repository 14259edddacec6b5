// L1's and O6's wild swings, and L7's overfitting, against what the data itself holds, each twin
// written as a user writes it: a robust (Huber) regression whose targets are 30 away for 5% of the
// rows in both splits, so each batch's loss sits on the level of the outliers it holds and the
// validation split's mean moves with its own few; against a classifier at SGD's lr 0.5, whose loss
// swings because its updates throw the weights from side to side.
#include <doctest/doctest.h>

#include <memory>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::first_of;
using dtest::Mlp;
using dtest::Regressor;
using dtest::Split;

namespace {

// A linear target of 8 standard normal features, noise 0.1, and 5% of rows (both splits) moved 30
// up or down.
Split outlier_targets() {
  Generator g(12);
  const Tensor x = randn({1000, 8}, {}, &g), w = randn({8, 1}, {}, &g);
  const Tensor clean = matmul(x, w) + 0.1 * randn({1000, 1}, {}, &g);
  const Tensor outlier = lt(rand({1000, 1}, {}, &g), 0.05).to(kFloat32);
  const Tensor y = clean + outlier * 30.0 * sign(randn({1000, 1}, {}, &g));
  return dtest::loaders(x.narrow(0, 0, 800), y.narrow(0, 0, 800), x.narrow(0, 800, 200), y.narrow(0, 800, 200));
}

Tensor huber(const Tensor& pred, const Tensor& target) {
  const Tensor a = abs(pred - target);
  return where(lt(a, 1.0), 0.5 * a * a, a - 0.5).mean();
}

debug::RunReport train_huber(const debug::DiagnoseOptions& o = {}) {
  manual_seed(4);
  const Split d = outlier_targets();
  auto model = std::make_shared<Regressor>(8, 32);
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  return dtest::train_own_loop(*model, huber, opt, d, 10, o);
}

}  // namespace

TEST_CASE("Huber regression with outlier targets: the swing and the overfitting gap are the data's, info") {
  const debug::RunReport r = train_huber();
  expect_clean(r);
  const debug::Finding* swing = first_of(r, "L1", debug::Kind::LossOscillating);
  REQUIRE_MESSAGE(swing != nullptr, r.str(true));
  CHECK(swing->severity == debug::Severity::Info);
  // The premise: the run swings past the wild line, and the batches spread at least half as much
  // at the trained weights.
  CHECK(dtest::ev(*swing, "median |loss[t] - loss[t-1]| / level in a window") > 1.0);
  CHECK(dtest::ev(*swing, "mean |loss[t] - loss[t-1]| / mean loss in that window") <=
        2.0 * dtest::ev(*swing, "the same between 25 training batches at the trained weights"));
  const debug::Finding* gap = first_of(r, "L7", debug::Kind::Overfitting);
  REQUIRE_MESSAGE(gap != nullptr, r.str(true));
  CHECK(gap->severity == debug::Severity::Info);
  CHECK(dtest::ev(*gap, "gap = val - train") > 0.2);  // past L7's absolute line

  // Without the replay the same run swings wildly for L1 and O6: the run alone cannot tell.
  debug::DiagnoseOptions off;
  off.swing_batches = 0;
  const debug::RunReport unreplayed = train_huber(off);
  const debug::Finding* wild = first_of(unreplayed, "L1", debug::Kind::LossOscillating);
  REQUIRE(wild != nullptr);
  CHECK(wild->severity == debug::Severity::Warning);
  CHECK(first_of(unreplayed, "O6", debug::Kind::LrTooHigh) != nullptr);
}

TEST_CASE("SGD at lr 0.5: the loss swings with the updates, and the swing stays a warning") {
  manual_seed(3);
  const Split d = dtest::split(3, 2.0);
  auto model = std::make_shared<Mlp>();
  nn::CrossEntropyLoss ce;
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.5).momentum(0.9));
  const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 8);
  const debug::Finding* wild = first_of(r, "L1", debug::Kind::LossOscillating);
  REQUIRE_MESSAGE(wild != nullptr, r.str(true));
  CHECK(wild->severity == debug::Severity::Warning);
  const debug::Finding* o6 = first_of(r, "O6", debug::Kind::LrTooHigh);
  REQUIRE(o6 != nullptr);
  CHECK(o6->fires());
}
