// O6's eps rule, healthy and faulty, each written as a user writes it: Adam with eps = 1 (a typo for
// 1e-8) against the same run at the default eps; RMSprop with eps = 1 and lr 0.045 (Inception's recipe,
// eps this large on purpose) against RMSprop with eps = 1 at its default rate; and the rule's
// measurement on an optimizer state whose second moment is known.
#include <doctest/doctest.h>

#include <cmath>
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

debug::RunReport train(optim::Optimizer& opt, Mlp& model, int epochs = 5) {
  const Split d = dtest::split(3, 2.0);
  nn::CrossEntropyLoss ce;
  return dtest::train_own_loop(model, ce, opt, d, epochs);
}

}  // namespace

TEST_CASE("Adam with eps = 1 warns and leads with the eps; the same run at the default eps is clean") {
  manual_seed(4);
  auto bug_model = std::make_shared<Mlp>();
  optim::Adam bug_opt(bug_model->parameters(), optim::AdamOptions(3e-3).eps(1.0));
  const debug::RunReport bug = train(bug_opt, *bug_model);
  const debug::Finding* f = first_of(bug, "O6", debug::Kind::EpsDominates);
  REQUIRE_MESSAGE(f != nullptr, bug.str());
  CHECK(f->severity == debug::Severity::Warning);
  CHECK(dtest::ev(*f, "median step factor sqrt(v) / (sqrt(v) + eps)") < 0.1);
  expect_lead(bug, "O6", "eps-dominates", {"L9"});

  manual_seed(4);
  auto clean_model = std::make_shared<Mlp>();
  optim::Adam clean_opt(clean_model->parameters(), optim::AdamOptions(3e-3));
  const debug::RunReport clean = train(clean_opt, *clean_model);
  CHECK(first_of(clean, "O6", debug::Kind::EpsDominates) == nullptr);
  expect_clean(clean);
}

TEST_CASE("RMSprop with eps = 1 at Inception's lr 0.045 trains and is clean; at its default rate it warns") {
  // Szegedy et al. (Inception-v3) trained with RMSprop, decay 0.9, eps 1.0, lr 0.045: the rate is far
  // above the usual range for RMSprop, and right for this eps. O8 says so as info.
  manual_seed(4);
  auto model = std::make_shared<Mlp>();
  optim::RMSprop opt(model->parameters(), optim::RMSpropOptions(0.045).alpha(0.9).eps(1.0).momentum(0.9));
  const debug::RunReport r = train(opt, *model);
  expect_clean(r);
  const debug::Finding* eps = first_of(r, "O6", debug::Kind::EpsDominates);
  REQUIRE(eps != nullptr);
  CHECK(eps->severity == debug::Severity::Info);
  const debug::Finding* range = first_of(r, "O8", debug::Kind::LrAboveRange);
  REQUIRE(range != nullptr);
  CHECK(range->severity == debug::Severity::Info);

  manual_seed(4);
  auto slow_model = std::make_shared<Mlp>();
  optim::RMSprop slow_opt(slow_model->parameters(), optim::RMSpropOptions(1e-3).eps(1.0));
  expect_lead(train(slow_opt, *slow_model), "O6", "eps-dominates", {"L9"});
}

TEST_CASE("the eps rule measures the bias-corrected second moment of the optimizer's state") {
  // One Adam step with every gradient 0.01: v = (1 - beta2) g^2, bias-corrected to g^2, so
  // sqrt(v) = 0.01 and the step factor is 0.01 / (0.01 + eps).
  auto model = std::make_shared<nn::Linear>(4, 3);
  for (double eps : {1.0, 1e-3, 1e-8}) {
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-3).eps(eps));
    opt.zero_grad();
    for (Tensor p : model->parameters()) p.set_grad(full(p.shape(), 0.01));
    opt.step();
    const auto found = debug::check_adaptive_epsilon(opt, *model, true);
    const double factor = 0.01 / (0.01 + eps);
    if (factor >= 0.1) {
      CHECK(found.empty());
      continue;
    }
    REQUIRE(found.size() == 1);
    CHECK(found[0].kind == debug::Kind::EpsDominates);
    CHECK(found[0].severity == debug::Severity::Warning);
    CHECK(dtest::ev(found[0], "median sqrt(v) of the weights with a gradient (bias-corrected)") ==
          doctest::Approx(0.01).epsilon(1e-5));
    CHECK(dtest::ev(found[0], "median step factor sqrt(v) / (sqrt(v) + eps)") == doctest::Approx(factor).epsilon(1e-5));
    CHECK(debug::check_adaptive_epsilon(opt, *model, false)[0].severity == debug::Severity::Info);
  }
  // SGD keeps no second moment: nothing to judge.
  optim::SGD sgd(model->parameters(), optim::SGDOptions(0.1));
  CHECK(debug::check_adaptive_epsilon(sgd, *model, true).empty());
}
