// An optimizer's and a model's set-up before the first step, each healthy form beside its faulty twin:
// Adam's betas (PyTorch's pair against the pair typed the other way round), a no-weight-decay group of
// biases (its 0 written as the weight decay against the same 0 landing in the learning-rate slot), and
// Fixup's chain of zero layers (a zero head after a residual branch whose last layer is zero, which
// opens one layer per step, against a branch whose first layer is zero too, which never opens).
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::any_finding;
using dtest::expect_clean;
using dtest::Mlp;
using dtest::Split;
using dtest::train_own_loop;

namespace {

const debug::Finding* firing(const debug::RunReport& r, const std::string& check, debug::Kind kind) {
  for (const debug::Finding& f : r.findings.findings())
    if (f.check == check && f.fires() && f.kind == kind) return &f;
  return nullptr;
}

std::string lead_cause(const debug::RunReport& r) {
  const json_mini::Value lead = dtest::lead_of(r);
  const json_mini::Value* c = lead.kind == json_mini::Value::Object ? lead.get("cause") : nullptr;
  return c ? c->str : "";
}

// x -> relu(fc_in) -> h + fc2(relu(fc1(h))) -> head: a residual block as Fixup initialises it.
struct FixupNet : nn::Module {
  std::shared_ptr<nn::Linear> fc_in = register_module("fc_in", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(32, 32));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 32));
  std::shared_ptr<nn::Linear> head = register_module("head", std::make_shared<nn::Linear>(32, 3));
  FixupNet() : Module("FixupNet") {}
  Tensor forward(const Tensor& x) override {
    const Tensor h = relu((*fc_in)(x));
    return (*head)(h + (*fc2)(relu((*fc1)(h))));
  }
};

}  // namespace

TEST_CASE("O8 on SGD: a learning rate and weight decay swapped warn; recipes' pairs and AdamW's decay are silent") {
  auto model = std::make_shared<Mlp>();
  // lr 0.1 / wd 5e-4 (ResNet), 0.01 / 1e-4, 0.05 / 5e-3, and a small rate without decay.
  for (const auto& [lr, wd] :
       std::vector<std::pair<double, double>>{{0.1, 5e-4}, {0.01, 1e-4}, {0.05, 5e-3}, {1e-3, 0.0}}) {
    CAPTURE(lr);
    optim::SGD opt(model->parameters(), optim::SGDOptions(lr).momentum(0.9).weight_decay(wd));
    CHECK(debug::check_learning_rate_range(opt).empty());
  }
  // AdamW's decoupled decay is meant to be far above its rate: 1e-3 with 0.05.
  optim::AdamW adamw(model->parameters(), optim::AdamWOptions(1e-3).weight_decay(0.05));
  CHECK(debug::check_learning_rate_range(adamw).empty());
  // The pair 0.05 / 5e-4 passed the other way round.
  optim::SGD swapped(model->parameters(), optim::SGDOptions(5e-4).momentum(0.9).weight_decay(0.05));
  const std::vector<debug::Finding> f = debug::check_learning_rate_range(swapped);
  REQUIRE(f.size() == 1);
  CHECK(f[0].fires());
  CHECK(f[0].kind == debug::Kind::SgdLrDecaySwapped);
  CHECK(f[0].fix.rfind("SGDOptions(0.05).weight_decay(0.0005)", 0) == 0);
}

TEST_CASE("O8 on Adam's betas: the pair typed the other way round leads; PyTorch's pairs stay silent") {
  auto model = std::make_shared<Mlp>();
  // Kingma & Ba's condition beta1^2 / sqrt(beta2) < 1: (0.9, 0.999) 0.81, (0.9, 0.95) 0.83, (0, 0.99) 0.
  for (const optim::Betas b : {optim::Betas{0.9, 0.999}, optim::Betas{0.9, 0.95}, optim::Betas{0.0, 0.99}}) {
    CAPTURE(b.first);
    CAPTURE(b.second);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-3).betas(b));
    CHECK(debug::check_learning_rate_range(opt).empty());
  }
  // (0.999, 0.9): 1.05, and swapped they pass; (0.99, 0.98): 0.99 / 0.99 = 0.9901, just inside.
  optim::AdamW swapped(model->parameters(), optim::AdamWOptions(1e-3).betas({0.999, 0.9}));
  const std::vector<debug::Finding> f = debug::check_learning_rate_range(swapped);
  REQUIRE(f.size() == 1);
  CHECK(f[0].fires());
  CHECK(f[0].kind == debug::Kind::AdamBetasUnstable);
  CHECK(f[0].title.find("look swapped") != std::string::npos);
  CHECK(f[0].fix == "betas({0.9, 0.999})");
  optim::Adam close(model->parameters(), optim::AdamOptions(1e-3).betas({0.99, 0.98}));
  CHECK(debug::check_learning_rate_range(close).empty());
  // The condition fails only where beta1 > beta2, and the pair swapped always meets it: (0.99, 0.5)
  // gives 1.39, (0.5, 0.99) 0.25.
  optim::Adam slow(model->parameters(), optim::AdamOptions(1e-3).betas({0.99, 0.5}));
  const std::vector<debug::Finding> g = debug::check_learning_rate_range(slow);
  REQUIRE(g.size() == 1);
  CHECK(g[0].fix == "betas({0.5, 0.99})");

  // In a run: the swapped pair leads the diagnosis; the default pair is clean.
  nn::CrossEntropyLoss ce;
  for (const bool bug : {false, true}) {
    CAPTURE(bug);
    manual_seed(4);
    const Split d = dtest::split(3, 2.0);
    auto m = std::make_shared<Mlp>();
    optim::Adam opt(m->parameters(),
                    optim::AdamOptions(3e-3).betas(bug ? optim::Betas{0.999, 0.9} : optim::Betas{0.9, 0.999}));
    const debug::RunReport r = train_own_loop(*m, ce, opt, d, 2);
    if (bug) {
      CHECK_MESSAGE(firing(r, "O8", debug::Kind::AdamBetasUnstable) != nullptr, r.str());
      CHECK_MESSAGE(lead_cause(r) == "adam-betas", r.str());
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("O8 on a group of biases at rate 0: the weight decay's 0 in the learning-rate slot, not a frozen layer") {
  nn::CrossEntropyLoss ce;
  // 0: the recipe written right (the optimizer's rate, no weight decay); 1: the 0 as the learning rate;
  // 2: a whole layer frozen by its rate (weight and bias), beside the others.
  for (const int form : {0, 1, 2}) {
    CAPTURE(form);
    manual_seed(4);
    const Split d = dtest::split(3, 2.0);
    auto m = std::make_shared<Mlp>();
    std::vector<Tensor> decay, no_decay;
    for (auto& [name, p] : m->named_parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    std::vector<optim::ParamGroup> groups;
    if (form == 2) {
      groups = {optim::ParamGroup({m->fc1->weight, m->fc1->bias}, 0.0),
                optim::ParamGroup({m->fc2->weight, m->fc2->bias, m->fc3->weight, m->fc3->bias})};
    } else {
      groups = {optim::ParamGroup(decay), form == 0 ? optim::ParamGroup(no_decay, optim::ParamGroup::kInherit, 0.0)
                                                    : optim::ParamGroup(no_decay, 0.0)};
    }
    optim::AdamW opt(groups, optim::AdamWOptions(3e-3));
    const debug::RunReport r = train_own_loop(*m, ce, opt, d, 2);
    if (form == 1) {
      const debug::Finding* f = firing(r, "O8", debug::Kind::BiasGroupFrozen);
      REQUIRE_MESSAGE(f != nullptr, r.str());
      CHECK(f->title.find("3 vectors") != std::string::npos);  // the three biases
      CHECK(f->fix.find("ParamGroup::kInherit, 0.0") != std::string::npos);
      CHECK_MESSAGE(lead_cause(r) == "frozen-bias-group", r.str());
    } else {
      expect_clean(r);
      if (form == 2) {  // said, as info
        const bool said = any_finding(r, [](const debug::Finding& f) {
          return f.check == "O8" && !f.fires() && f.kind == debug::Kind::LrBelowRange;
        });
        CHECK_MESSAGE(said, r.findings.str(true));
      }
    }
  }
}

TEST_CASE(
    "a chain of zero layers (Fixup) opens one layer per step: info; a branch zero at its first layer too is dead") {
  nn::CrossEntropyLoss ce;
  for (const bool bug : {false, true}) {
    CAPTURE(bug);
    manual_seed(4);
    const Split d = dtest::split(3, 2.0);
    auto m = std::make_shared<FixupNet>();
    {
      NoGradGuard ng;
      m->fc2->weight.zero_();  // the branch's last layer and the head: Fixup
      m->fc2->bias.zero_();
      m->head->weight.zero_();
      m->head->bias.zero_();
      if (bug) {  // the branch's first layer too: relu(0) passes nothing, so fc2 never gets a gradient
        m->fc1->weight.zero_();
        m->fc1->bias.zero_();
      }
    }
    optim::SGD opt(m->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    const debug::RunReport r = train_own_loop(*m, ce, opt, d, 3);
    if (!bug) {
      expect_clean(r);
      // fc1 waits two steps (head, then fc2): named among the parameters held back.
      const bool held = any_finding(r, [](const debug::Finding& f) {
        return f.check == "O1" && !f.fires() && f.title.find("initialised to zero") != std::string::npos &&
               f.title.find("fc1.weight") != std::string::npos;
      });
      CHECK_MESSAGE(held, r.findings.str(true));
      // No BatchNorm layer: M17's causes are ruled out, so no diagnosis offers them as candidates.
      CHECK(r.findings.ran("M17"));
    } else {
      const bool dead = any_finding(r, [](const debug::Finding& f) {
        return f.fires() && (f.parameter.rfind("fc1.", 0) == 0 || f.parameter.rfind("fc2.", 0) == 0 ||
                             f.module.rfind("fc1", 0) == 0 || f.module.rfind("fc2", 0) == 0);
      });
      CHECK_MESSAGE(dead, r.str());
    }
  }
}

TEST_CASE(
    "M3 under a loss of the user's own: a ReLU embedding far wider than the labels is no logits; 5 ReLU'd scores are") {
  manual_seed(3);
  // A prototypical network's 64-wide ReLU embedding under 5-way labels, and a head of 5 scores after a ReLU.
  auto model = std::make_shared<Mlp>();
  const Tensor y = randint(0, 5, {32});
  const Tensor embedding = relu(randn({32, 64}));
  const Tensor scores = relu(randn({32, 5}));
  CHECK_FALSE(dtest::fires(debug::check_final_activation(*model, embedding, {}, "ProtoLoss", y)));
  CHECK(dtest::fires(debug::check_final_activation(*model, scores, {}, "FocalLoss", y)));
  // Under cross-entropy, the columns are class scores however many there are.
  CHECK(dtest::fires(debug::check_final_activation(*model, embedding, {}, "CrossEntropyLoss", y)));
}
