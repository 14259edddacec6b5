// L9 on weights loaded after the last step, each twin written as a user writes it: a "best"
// checkpoint kept by the validation accuracy with the comparator of a loss (best = +inf, keep when
// lower), which keeps the worst epoch and restores it before the checks end; the same loop keeping
// the highest accuracy; and an exponential moving average of the weights copied back at the end.
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
using dtest::Split;

namespace {

enum class AtEnd { KeepLowestAccuracy, KeepHighestAccuracy, AverageCopiedBack };

debug::RunReport train(AtEnd how) {
  manual_seed(4);
  // Three overlapping blobs in 6 dimensions, standardised with the training rows' statistics.
  const dtest::XY all = dtest::blobs(200, 3, 6, 3, 4.0);
  const Tensor xtr = all.x.narrow(0, 0, 480), mu = mean(xtr, {0}, true), sd = xtr.std({0}, true, true);
  const Split d = dtest::loaders((xtr - mu) / sd, all.y.narrow(0, 0, 480), (all.x.narrow(0, 480, 120) - mu) / sd,
                                 all.y.narrow(0, 480, 120));
  auto m = std::make_shared<Mlp>();
  nn::CrossEntropyLoss ce;
  optim::SGD opt(m->parameters(), optim::SGDOptions(0.003).momentum(0.9));
  debug::Session session(*m, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  const std::vector<Tensor> params = m->parameters();
  std::vector<Tensor> kept, average;
  {
    NoGradGuard g;
    for (const Tensor& p : params) average.push_back(p.detach().clone());
  }
  double best = how == AtEnd::KeepLowestAccuracy ? 1e9 : -1.0;  // the loss's comparator, copied
  for (int e = 0; e < 12; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = ce((*m)(b.x), b.y);
      l.backward();
      opt.step();
      NoGradGuard g;
      for (size_t i = 0; i < params.size(); ++i) average[i] = average[i] * 0.9 + params[i].detach() * 0.1;
    }
    session.epoch();
    const double acc = optim::evaluate(*m, *d.val).accuracy;
    if (how == AtEnd::KeepLowestAccuracy ? acc < best : acc > best) {
      best = acc;
      NoGradGuard g;
      kept.clear();
      for (const Tensor& p : params) kept.push_back(p.detach().clone());
    }
  }
  {
    NoGradGuard g;
    const std::vector<Tensor>& load = how == AtEnd::AverageCopiedBack ? average : kept;
    for (size_t i = 0; i < params.size(); ++i) params[i].detach().copy_(load[i]);
  }
  return session.finish();
}

}  // namespace

TEST_CASE("the worst checkpoint restored before finish() leads; the best one, or an average copied back, is clean") {
  const debug::RunReport bug = train(AtEnd::KeepLowestAccuracy);
  const debug::Finding* f = first_of(bug, "L9", debug::Kind::RestoredWorse);
  REQUIRE_MESSAGE(f != nullptr, bug.str(true));
  CHECK(dtest::ev(*f, "validation loss of the final model") > 1.1 * dtest::ev(*f, "best epoch's validation loss"));
  expect_lead(bug, "L9", "worse-checkpoint");

  const debug::RunReport best = train(AtEnd::KeepHighestAccuracy);
  CHECK(first_of(best, "L9", debug::Kind::RestoredWorse) == nullptr);
  expect_clean(best);

  const debug::RunReport averaged = train(AtEnd::AverageCopiedBack);
  CHECK(first_of(averaged, "L9", debug::Kind::RestoredWorse) == nullptr);
  expect_clean(averaged);
}
