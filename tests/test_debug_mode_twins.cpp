// Randomness at evaluation, each twin as a user writes it: a block that calls functional dropout
// with training = true (PyTorch's F.dropout default) keeps dropping in eval mode, so every
// validation pass scores another thinned model; passing is_training() instead, it does not.
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
