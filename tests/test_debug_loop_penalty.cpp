// O3 on a penalty the training loop adds around the loss (loss = data + lambda * sum w^2 written in the
// loop, where the Session's loss is the data term alone): the first step's gradient fitted as a x the
// loss's gradient + lambda w. A MAP regression whose Gaussian prior is counted once per minibatch (not
// divided by N) leads with O3's penalty too strong; the same prior divided by N stays silent; an L2 term
// subtracted instead of added warns penalty-wrong-sign; a loop without a penalty, or whose step holds
// another term, is not judged.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>

#include <gradsleuth.h>

#include "debug/checks/optim/optim_checks.h"
#include "debug/corpus/corpus.h"
#include "debug/corpus/operators.h"

using namespace gradsleuth;
namespace dbg = gradsleuth::debug;

namespace {

struct Mlp : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(10, 48));
  std::shared_ptr<nn::ReLU> act1 = register_module("act1", std::make_shared<nn::ReLU>());
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(48, 48));
  std::shared_ptr<nn::ReLU> act2 = register_module("act2", std::make_shared<nn::ReLU>());
  std::shared_ptr<nn::Linear> out = register_module("out", std::make_shared<nn::Linear>(48, 1));
  explicit Mlp(double p) : Module("Mlp") {
    if (p > 0) drop = register_module("drop", std::make_shared<nn::Dropout>(p));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*act1)((*fc1)(x));
    if (drop) h = (*drop)(h);
    return (*out)((*act2)((*fc2)(h)));
  }
};

// Friedman's #1 regression (Friedman, "Multivariate Adaptive Regression Splines", 1991), standardised.
void friedman1(int64_t n, Tensor& x, Tensor& y) {
  const Tensor u = rand({n, 10});
  const double pi = 3.14159265358979323846;
  y = (sin(u.select(1, 0) * u.select(1, 1) * pi) * 10.0 + square(u.select(1, 2) - 0.5) * 20.0 + u.select(1, 3) * 10.0 +
       u.select(1, 4) * 5.0 + randn({n}))
          .unsqueeze(1);
  x = (u - 0.5) * 3.4641;  // unit variance
  y = (y - 14.4) / 4.9;
}

enum class Penalty { None, PerExample, PerBatch, Subtracted, PlusNoise };

dbg::RunReport train(Penalty penalty, double dropout = 0.0, int epochs = 20) {
  manual_seed(3);
  const int64_t n_train = 1500;
  Tensor xtr, ytr, xva, yva;
  friedman1(n_train, xtr, ytr);
  friedman1(500, xva, yva);
  nn::DataLoader train(std::make_shared<nn::TensorDataset>(xtr, ytr, "friedman1/train"),
                       nn::DataLoaderOptions().batch_size(50).shuffle(true).seed(5));
  nn::DataLoader val(std::make_shared<nn::TensorDataset>(xva, yva, "friedman1/val"),
                     nn::DataLoaderOptions().batch_size(500));
  auto model = std::make_shared<Mlp>(dropout);
  nn::MSELoss mse;
  optim::Adam opt(model->parameters(), optim::AdamOptions(2e-3));
  dbg::DiagnoseOptions o;
  o.title = "MAP regression";
  dbg::Session s(*model, mse, opt, {.train = &train, .val = &val}, o);
  for (int e = 0; e < epochs; ++e) {
    model->train();
    for (const nn::Batch& b : train) {
      opt.zero_grad();
      Tensor l = mse((*model)(b.x), b.y) * 5.0;  // a Gaussian likelihood's 1 / (2 sigma^2)
      Tensor prior = zeros({});
      for (const auto& [name, p] : model->named_parameters())
        if (name.find("weight") != std::string::npos) prior = prior + sum(square(p)) * 0.5;
      if (penalty == Penalty::PerExample) l = l + prior / static_cast<double>(n_train);
      if (penalty == Penalty::PerBatch) l = l + prior;  // the prior counted once per minibatch
      if (penalty == Penalty::Subtracted) l = l - prior * 0.01;
      if (penalty == Penalty::PlusNoise) l = l + prior * 0.01 + sum((*model)(b.x + randn(b.x.shape()) * 0.1)) * 0.1;
      l.backward();
      opt.step();
    }
    s.epoch();
  }
  return s.finish();
}

const dbg::Finding* lead(const dbg::RunReport& r) {
  const auto& a = r.findings.diagnosis();
  return a.lead ? &r.findings.findings()[a.lead->index] : nullptr;
}

// The O3 finding on the loop's penalty, if any (warning or info).
const dbg::Finding* loop_penalty(const dbg::RunReport& r) {
  for (const dbg::Finding& f : r.findings.findings())
    if (f.check == "O3" &&
        (f.title.find("loop adds") != std::string::npos || f.title.find("loop's loss subtracts") != std::string::npos))
      return &f;
  return nullptr;
}

bool warns(const dbg::RunReport& r, const char* check) {
  for (const dbg::Finding& f : r.findings.findings())
    if (f.check == check && f.fires()) return true;
  return false;
}

}  // namespace

TEST_CASE("O3's loop penalty on measured numbers: the fit must explain the step, then the share and the sign") {
  dbg::LoopPenaltyMeasure m;
  m.step = 1;
  m.scale = 5.0;
  m.unexplained = 1e-14;
  m.layers = {{"fc1.weight", 1.0, 2.0}, {"fc2.weight", 1.0, 1.5}, {"out.weight", 1.0, 1.1}};
  std::vector<dbg::Finding> fs = dbg::judge_loop_penalty(m);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].is("O3", dbg::Kind::WeightDecayTooStrong));
  CHECK(fs[0].fires());
  // One matrix where the data decides: a penalty, not too strong at the first step (info).
  m.layers[2].share = 0.3;
  fs = dbg::judge_loop_penalty(m);
  REQUIRE(fs.size() == 1);
  CHECK_FALSE(fs[0].fires());
  // Every penalised matrix with a minus sign: the loss rewards larger weights.
  for (auto& l : m.layers) l.lambda = -0.01, l.share = 0.002;
  m.layers[2].share = 1e-5;  // under the line: not counted as penalised
  fs = dbg::judge_loop_penalty(m);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].is("O3", dbg::Kind::PenaltyWrongSign));
  CHECK(fs[0].fires());
  // A step the fit does not explain (dropout not replayed, another term in the loop): not judged.
  m.unexplained = 0.2;
  CHECK(dbg::judge_loop_penalty(m).empty());
  // No penalty: nothing.
  m.unexplained = 1e-14;
  for (auto& l : m.layers) l.lambda = 1e-9, l.share = 1e-8;
  CHECK(dbg::judge_loop_penalty(m).empty());
}

TEST_CASE("a Gaussian prior counted once per minibatch leads with O3 (the penalty too strong); divided by N, silent") {
  const dbg::RunReport bad = train(Penalty::PerBatch);
  const dbg::Finding* l = lead(bad);
  REQUIRE(l != nullptr);
  CHECK(l->is("O3", dbg::Kind::WeightDecayTooStrong));
  CHECK(l->title.find("the penalty the loop adds") != std::string::npos);
  const dbg::Finding* seen = loop_penalty(bad);
  REQUIRE(seen != nullptr);
  CHECK(seen->title.find("lambda = 1 ") != std::string::npos);  // sum w^2 / 2, as written

  const dbg::RunReport ok = train(Penalty::PerExample);
  CHECK_FALSE(warns(ok, "O3"));
  CHECK(lead(ok) == nullptr);
  const dbg::Finding* info = loop_penalty(ok);
  REQUIRE(info != nullptr);  // 1 / 1500 on the matrices whose data gradient it reaches 1e-3 of
  CHECK_FALSE(info->fires());
}

TEST_CASE("an L2 penalty subtracted in the loop warns penalty-wrong-sign; with dropout the step is still fitted") {
  const dbg::RunReport bad = train(Penalty::Subtracted, 0.0, 3);
  bool wrong_sign = false;
  for (const dbg::Finding& f : bad.findings.findings())
    wrong_sign = wrong_sign || (f.is("O3", dbg::Kind::PenaltyWrongSign) && f.fires());
  CHECK(wrong_sign);
  // The first step's forward is replayed with its dropout masks: the per-batch prior is found through it.
  const dbg::RunReport dropped = train(Penalty::PerBatch, 0.2, 3);
  const dbg::Finding* seen = loop_penalty(dropped);
  REQUIRE(seen != nullptr);
  CHECK(seen->title.find("lambda = 1 ") != std::string::npos);
}

TEST_CASE("a loop without a penalty, or whose step holds a term on another forward, is not judged") {
  CHECK(loop_penalty(train(Penalty::None, 0.0, 2)) == nullptr);
  CHECK(loop_penalty(train(Penalty::PlusNoise, 0.0, 2)) == nullptr);
}

TEST_CASE("the corpus's MAP program: silent healthy; its prior not divided by N leads with O3, subtracted warns") {
  namespace corpus = gradsleuth::debug::corpus;
  const corpus::Program& p = corpus::program("map-prior");
  const corpus::Outcome ok = corpus::run_program(p, 1);
  REQUIRE(ok.error.empty());
  CHECK(lead(ok.report) == nullptr);
  const dbg::Finding* info = loop_penalty(ok.report);
  REQUIRE(info != nullptr);  // the prior is found, and judged harmless
  CHECK_FALSE(info->fires());

  const corpus::Outcome per_batch = corpus::run_program(corpus::fault_operator("RPN").mutate(p, 1, 1).program, 1);
  REQUIRE(per_batch.error.empty());
  const dbg::Finding* l = lead(per_batch.report);
  REQUIRE(l != nullptr);
  CHECK(l->is("O3", dbg::Kind::WeightDecayTooStrong));

  const corpus::Outcome minus = corpus::run_program(corpus::fault_operator("RPS").mutate(p, 1, 1).program, 1);
  REQUIRE(minus.error.empty());
  const dbg::Finding* m = lead(minus.report);
  REQUIRE(m != nullptr);
  CHECK(m->is("O3", dbg::Kind::PenaltyWrongSign));
}
