// Findings that must not outrank a run's real fault, or stand alone on a healthy one, and the
// faults they used to hide. Each twin as a user writes it:
//   - an optimizer rebuilt at every step inside the loop (momentum restarts each time) against one
//     built before the loop: O6 sees weights that move while the Session's optimizer never steps;
//   - NLLLoss on raw scores (the LogSoftmax forgotten) against LogSoftmax + NLLLoss: L2;
//   - a float32 regression onto prices in dollars: M18's float16 overflow is info, not the lead;
//   - a backbone kept out of the optimizer, then added with add_param_group: M10 is info;
//   - a regression onto targets with mean 5, trained to the end: L4's offset is info;
//   - a negative log-likelihood whose validation curve ends at a new best: no L1 "validation rises".
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gradsleuth.h>

#include "debug/checks/optim/weight_writes.h"
#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::expect_lead;
using dtest::first_of;
using dtest::Split;

namespace {

debug::RunReport momentum_run(bool rebuilt_each_step) {
  manual_seed(69);
  const Split d = dtest::split(3, 1.5);
  auto model = std::make_shared<dtest::Mlp>();
  nn::CrossEntropyLoss ce;
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.005).momentum(0.9));
  debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 8; ++e) {
    for (const nn::Batch& b : *d.train) {
      // The bug: a new optimizer per step, so its momentum buffer starts at zero every time.
      std::unique_ptr<optim::SGD> fresh;
      if (rebuilt_each_step)
        fresh = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions(0.005).momentum(0.9));
      optim::Optimizer& o = rebuilt_each_step ? static_cast<optim::Optimizer&>(*fresh) : opt;
      o.zero_grad();
      ce((*model)(b.x), b.y).backward();
      o.step();
    }
    s.epoch();
  }
  return s.finish();
}

}  // namespace

TEST_CASE("an optimizer rebuilt at every step inside the loop: O6 leads with unwatched-optimizer") {
  const debug::RunReport bug = momentum_run(true);
  expect_lead(bug, "O6", "unwatched-optimizer");
  const debug::Finding* f = first_of(bug, "O6", debug::Kind::UpdatedOutsideOptimizer);
  REQUIRE_MESSAGE(f != nullptr, bug.str(true));
  CHECK(dtest::ev(*f, "optimizer steps of the Session's optimizer") == 0.0);
  CHECK(dtest::ev(*f, "|weights at the end - at the start| / |at the start|") > 0.01);
  expect_clean(momentum_run(false));
}

TEST_CASE("the updates-without-steps rule: no step and moving weights warn; a step, or still weights, do not") {
  const debug::OptimCheckOptions o;
  CHECK(debug::judge_updates_without_steps(0, 100, 0.2, o).size() == 1);
  CHECK(debug::judge_updates_without_steps(5, 100, 0.2, o).empty());  // the Session's optimizer stepped
  CHECK(debug::judge_updates_without_steps(0, 100, 0.0, o).empty());  // nothing moved (an evaluation loop)
  CHECK(debug::judge_updates_without_steps(0, 1, 0.2, o).empty());    // one loss: too little to tell
}

namespace {

// A classifier whose forward ends with its last Linear; `log_softmax` adds the LogSoftmax NLLLoss needs.
struct ScoreNet : nn::Module {
  std::shared_ptr<dtest::Mlp> body = register_module("body", std::make_shared<dtest::Mlp>());
  bool log_softmax_;
  explicit ScoreNet(bool log_softmax) : Module("ScoreNet"), log_softmax_(log_softmax) {}
  Tensor forward(const Tensor& x) override {
    const Tensor z = (*body)(x);
    return log_softmax_ ? z.log_softmax(1) : z;
  }
};

}  // namespace

TEST_CASE("NLLLoss on raw scores: L2 leads with nll-on-scores; with the LogSoftmax it is clean") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  nn::NLLLoss nll;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<ScoreNet>(!bug);
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = dtest::train_own_loop(*model, nll, opt, d, 6);
    if (bug) {
      expect_lead(r, "L2", "nll-on-scores");
    } else {
      expect_clean(r);
      CHECK(r.findings.ran("L2"));
    }
  }
}

TEST_CASE("check_nll_input: log-probabilities, and a subset of the classes' log-probabilities, are silent") {
  const Tensor scores = tensor(std::vector<float>{2.0f, -1.0f, 0.5f, 0.1f, 0.2f, 0.3f}, {2, 3});
  CHECK(debug::check_nll_input(scores).size() == 1);
  CHECK(debug::check_nll_input(scores.log_softmax(1)).empty());
  CHECK(debug::check_nll_input(scores.log_softmax(1) - 0.5).empty());  // rows summing to less than 1
  CHECK(debug::check_nll_input(scores.log_softmax(0)).empty());        // over the batch: M6's, not L2's
  const std::vector<debug::Finding> f = debug::check_nll_input(scores);
  REQUIRE(f.size() == 1);
  CHECK(f[0].kind == debug::Kind::NllOnScores);
  CHECK(dtest::ev(f[0], "largest value") == doctest::Approx(2.0));
}

namespace {

// Four classes and a price: one loss function over a (B, 5) output (cross-entropy + MSE).
struct MultiTask : nn::Module {
  std::shared_ptr<nn::Linear> a, b, cls, reg;
  MultiTask() : Module("MultiTask") {
    a = register_module("a", std::make_shared<nn::Linear>(10, 32));
    b = register_module("b", std::make_shared<nn::Linear>(32, 32));
    cls = register_module("cls", std::make_shared<nn::Linear>(32, 4));
    reg = register_module("reg", std::make_shared<nn::Linear>(32, 1));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = relu((*b)(relu((*a)(x))));
    return cat({(*cls)(h), (*reg)(h)}, 1);
  }
};

}  // namespace

TEST_CASE("a float32 run onto prices in dollars: M18's float16 overflow is info and leads nothing") {
  manual_seed(66);
  const dtest::XY a = dtest::blobs(250, 4, 10, 36, 1.5);
  Generator g(36);
  const Tensor w = randn({10, 1}, {}, &g);
  const Tensor price = 300000.0 + 80000.0 * tanh(matmul(a.x, w) / 3.0) + 5000.0 * randn({1000, 1}, {}, &g);
  const Tensor x = (a.x - a.x.narrow(0, 0, 800).mean({0}, true)) / a.x.narrow(0, 0, 800).std({0}, true, true);
  const Tensor y = cat({a.y.to(kFloat32).unsqueeze(1), price}, 1);
  const Split d =
      dtest::loaders(x.narrow(0, 0, 800), y.narrow(0, 0, 800), x.narrow(0, 800, 200), y.narrow(0, 800, 200));
  debug::LossFunction lf = [](const Tensor& out, const Tensor& t) {
    return nn::functional::cross_entropy(out.narrow(1, 0, 4), t.narrow(1, 0, 1).squeeze(1).to(kInt64)) +
           nn::functional::mse_loss(out.narrow(1, 4, 1), t.narrow(1, 1, 1));
  };
  auto model = std::make_shared<MultiTask>();
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  const debug::RunReport r = dtest::train_own_loop(*model, lf, opt, d, 30);
  bool overflow_seen = false;
  for (const debug::Finding& f : r.findings.findings())
    if (f.check == "M18" && f.title.find("overflows") != std::string::npos) {
      overflow_seen = true;
      CHECK_MESSAGE(!f.fires(), f.str());
      CHECK(f.title.find("trains in float32") != std::string::npos);
    }
  CHECK_MESSAGE(overflow_seen, r.str(true));
  CHECK(r.findings.lead_json().find("\"M18\"") == std::string::npos);
}

TEST_CASE("raw features in their units into a BatchNorm that standardises them: M13 and M18 stay quiet") {
  // Ages, incomes, prices: columns up to 8e4, a BatchNorm1d first as the model's own scaler. In the gate
  // (eval mode, initial running statistics) the next layers see activations of 1e4; f's terms are then
  // large enough that a fixed finite-difference step's rounding alone failed a correct BatchNorm (M13),
  // and the input itself does not fit float16 (M18): neither is a fault of this float32 run.
  manual_seed(19);
  const dtest::XY a = dtest::blobs(400, 3, 10, 19, 1.0);
  const Tensor scales = tensor({1.0, 5.0, 30.0, 200.0, 1000.0, 0.01, 2.0, 50.0, 8000.0, 0.5}).view({1, 10});
  const Tensor offsets = tensor({0.0, 40.0, 100.0, 1500.0, 30000.0, 0.0, 3.0, 300.0, 52000.0, 1.0}).view({1, 10});
  const Tensor x = (a.x * scales + offsets).to(kFloat32);
  const Split d =
      dtest::loaders(x.narrow(0, 0, 1000), a.y.narrow(0, 0, 1000), x.narrow(0, 1000, 200), a.y.narrow(0, 1000, 200));
  auto model = std::make_shared<nn::Sequential>(
      std::make_shared<nn::BatchNorm1d>(10), std::make_shared<nn::Linear>(10, 64),
      std::make_shared<nn::BatchNorm1d>(64), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(64, 3));
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-3));
  nn::CrossEntropyLoss ce;
  const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 4);
  for (const debug::Finding& f : r.findings.findings()) CHECK_MESSAGE(f.check != "M13", f.str());
  bool overflow_seen = false;
  for (const debug::Finding& f : r.findings.findings())
    if (f.check == "M18" && f.title.find("overflows") != std::string::npos) {
      overflow_seen = true;
      CHECK_MESSAGE(!f.fires(), f.str());
      CHECK(dtest::ev(f, "largest |input|") > 65504.0);
      CHECK(f.cause.find("input") != std::string::npos);
    }
  CHECK_MESSAGE(overflow_seen, r.str(true));
  expect_clean(r);

  // The twin: the gate's activations (a fresh BatchNorm in eval mode, its running statistics 0 and
  // 1, passes the raw columns on) into a Linear whose backward is wrong are still caught.
  Tensor h;
  {
    NoGradGuard ng;
    nn::BatchNorm1d bn(10);
    nn::Linear fc(10, 64);
    bn.eval();
    h = fc(bn(x.narrow(0, 0, 4)));
  }
  REQUIRE(h.abs().max().item<double>() > 1000.0);
  auto bad = std::make_shared<nn::Linear>(64, 8);
  bad->inject_bug(nn::Bug::B22);
  const std::vector<debug::Finding> fb = debug::gradcheck_module(*bad, h, "bad");
  REQUIRE(!fb.empty());
  CHECK(fb[0].check == "M13");
  CHECK(fb[0].severity == debug::Severity::Error);
}

TEST_CASE("an L2 penalty written into the loss function: far too strong leads with O3; the usual one stays silent") {
  // 0.5 x sum w^2 on this MLP: the penalty's gradient 1.4-7.6x the data's in every weight matrix at the start;
  // 5e-4: under a hundredth.
  for (const double l2 : {0.5, 5e-4}) {
    CAPTURE(l2);
    manual_seed(6);
    const Split d = dtest::split(3, 2.0);
    auto model = std::make_shared<dtest::Mlp>();
    debug::LossFunction objective = [&](const Tensor& out, const Tensor& y) {
      Tensor penalty = zeros({});
      for (auto& [name, p] : model->named_parameters())
        if (p.dim() >= 2) penalty = penalty + sum(square(p));
      return nn::functional::cross_entropy(out, y) + penalty * l2;
    };
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = dtest::train_own_loop(*model, objective, opt, d, 6);
    if (l2 > 0.1) {
      expect_lead(r, "O3", "weight-decay");
      const debug::Finding* o3 = first_of(r, "O3", debug::Kind::WeightDecayTooStrong);
      REQUIRE(o3 != nullptr);
      CHECK(dtest::ev(*o3, "smallest |penalty gradient| / |data gradient|") >= 1.0);
    } else {
      expect_clean(r);
    }
  }
}

namespace {
// Each row's features with a little random noise and a random sign flip when `augment` (a training
// transform); read as stored otherwise.
class Jittered : public nn::Dataset {
 public:
  Jittered(nn::DatasetPtr base, bool augment) : base_(std::move(base)), augment_(augment) {}
  int64_t size() const override { return base_->size(); }
  nn::Example get(int64_t i) const override {
    nn::Batch b = get_batch({i});
    return {b.x.select(0, 0), b.y.select(0, 0)};
  }
  nn::Batch get_batch(const std::vector<int64_t>& idx) const override {
    nn::Batch b = base_->get_batch(idx);
    if (augment_) b.x = b.x + 0.05 * randn(b.x.shape());
    return b;
  }

 private:
  nn::DatasetPtr base_;
  bool augment_;
};
}  // namespace

TEST_CASE("validation read through the training transform: D10 leads with split-preprocessing; without it, clean") {
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    manual_seed(12);
    const dtest::XY all = dtest::blobs(200, 3, 6, 3, 2.0);
    auto base_train = std::make_shared<nn::TensorDataset>(all.x.narrow(0, 0, 480), all.y.narrow(0, 0, 480));
    auto base_val = std::make_shared<nn::TensorDataset>(all.x.narrow(0, 480, 120), all.y.narrow(0, 480, 120));
    Split d;
    d.train = std::make_shared<nn::DataLoader>(std::make_shared<Jittered>(base_train, true),
                                               nn::DataLoaderOptions().batch_size(32).shuffle(true).seed(3));
    d.val = std::make_shared<nn::DataLoader>(std::make_shared<Jittered>(base_val, bug),
                                             nn::DataLoaderOptions().batch_size(120));
    auto model = std::make_shared<dtest::Mlp>();
    nn::CrossEntropyLoss ce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 4);
    if (bug)
      expect_lead(r, "D10", "split-preprocessing");
    else
      expect_clean(r);
  }
}

TEST_CASE("a backbone added to the optimizer during the run (add_param_group): M10 says so as info") {
  manual_seed(5);
  const Split d = dtest::split(3, 2.0);
  auto model = std::make_shared<dtest::Mlp>();
  // The head first; the rest joins the optimizer after two epochs (staged unfreezing).
  std::vector<Tensor> head, body;
  for (auto& [name, p] : model->named_parameters()) (name.rfind("fc3", 0) == 0 ? head : body).push_back(p);
  REQUIRE(!head.empty());
  REQUIRE(!body.empty());
  optim::Adam opt(head, optim::AdamOptions(3e-3));
  nn::CrossEntropyLoss ce;
  debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 6; ++e) {
    if (e == 2) opt.add_param_group(optim::ParamGroup{body, 3e-3});
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      ce((*model)(b.x), b.y).backward();
      if (e < 2)
        for (Tensor& p : body) p.set_grad(Tensor());  // no stale gradient while it waits
      opt.step();
    }
    s.epoch();
  }
  const debug::RunReport r = s.finish();
  const debug::Finding* m10 = first_of(r, "M10", debug::Kind::MissingFromOptimizer);
  REQUIRE_MESSAGE(m10 != nullptr, r.str(true));
  CHECK_MESSAGE(!m10->fires(), m10->str());
  CHECK(dtest::ev(*m10, "trainable parameters outside the optimizer at the end of the run") == 0.0);
  expect_clean(r);
}

TEST_CASE("a trainable layer that never joins the optimizer: M10 still warns at the end") {
  manual_seed(5);
  const Split d = dtest::split(3, 2.0);
  auto model = std::make_shared<dtest::Mlp>();
  std::vector<Tensor> head;
  for (auto& [name, p] : model->named_parameters())
    if (name.rfind("fc3", 0) == 0) head.push_back(p);
  optim::Adam opt(head, optim::AdamOptions(3e-3));
  nn::CrossEntropyLoss ce;
  const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 3);
  const debug::Finding* m10 = first_of(r, "M10", debug::Kind::MissingFromOptimizer);
  REQUIRE_MESSAGE(m10 != nullptr, r.str(true));
  CHECK(m10->fires());
}

TEST_CASE("a regression onto targets with mean 5, trained to the end: L4's offset is info") {
  manual_seed(57);
  Generator g(18);
  const Tensor x = randn({1000, 6}, {}, &g), w = randn({6, 1}, {}, &g);
  const Tensor y = sigmoid(matmul(x, w) / 2.0) * 10.0 + 0.1 * randn({1000, 1}, {}, &g);
  const Split d =
      dtest::loaders(x.narrow(0, 0, 800), y.narrow(0, 0, 800), x.narrow(0, 800, 200), y.narrow(0, 800, 200));
  auto model = std::make_shared<dtest::Regressor>(6, 32);
  nn::MSELoss mse;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  const debug::RunReport r = dtest::train_own_loop(*model, mse, opt, d, 15);
  const debug::Finding* l4 = first_of(r, "L4", debug::Kind::InitialOutputBiased);
  REQUIRE_MESSAGE(l4 != nullptr, r.str(true));
  CHECK_MESSAGE(!l4->fires(), l4->str());
  CHECK(dtest::ev(*l4, "mean loss over the last tenth of steps") < dtest::ev(*l4, "first loss / (1 + z^2)"));
  expect_clean(r);
}

TEST_CASE("L1's validation-rises rule on a negative log-likelihood: a last epoch at a new best is no rise") {
  std::vector<double> train, val;
  for (int i = 0; i < 300; ++i) train.push_back(-0.5 - 0.5 * i / 300.0);
  // Best -0.988 at epoch 25 of 30; the last three: -0.95, -0.89, -1.015 (a new best).
  for (int e = 0; e < 30; ++e) val.push_back(-0.4 - 0.0235 * std::min(e, 24));
  val[27] = -0.95;
  val[28] = -0.89;
  val[29] = -1.015;
  auto rises = [](const std::vector<debug::Finding>& fs) {
    for (const debug::Finding& f : fs)
      if (f.fires() && f.is("L1", debug::Kind::TrainDownValUp)) return true;
    return false;
  };
  CHECK_FALSE(rises(debug::diagnose_loss_history(train, val)));
  // Last three epochs all above best + 10% of |best| (-0.868): rising.
  val[27] = -0.82;
  val[28] = -0.85;
  val[29] = -0.80;
  CHECK(rises(debug::diagnose_loss_history(train, val)));
}

namespace {

// A classifier and an autoencoder over one encoder: its 3-unit code (a linear layer) feeds a linear
// head and the decoder. `wide` keeps the code as wide as its input.
struct CodeNet : nn::Module {
  std::shared_ptr<nn::Linear> e1, e2, head, d1, d2;
  explicit CodeNet(bool wide) : Module("CodeNet") {
    const int64_t code = wide ? 16 : 3;
    e1 = register_module("e1", std::make_shared<nn::Linear>(6, 16));
    e2 = register_module("e2", std::make_shared<nn::Linear>(16, code));
    head = register_module("head", std::make_shared<nn::Linear>(code, 3));
    d1 = register_module("d1", std::make_shared<nn::Linear>(code, 16));
    d2 = register_module("d2", std::make_shared<nn::Linear>(16, 6));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor c = (*e2)(relu((*e1)(x)));
    return cat({(*head)(c), (*d2)(relu((*d1)(c)))}, 1);
  }
};

}  // namespace

TEST_CASE("M23: an encoder's code read by a linear head and by the decoder is one path of two, not a collapse") {
  manual_seed(3);
  const Tensor x = randn({16, 6});
  auto narrow = std::make_shared<CodeNet>(false), wide = std::make_shared<CodeNet>(true);
  CHECK(debug::check_missing_nonlinearity(*narrow, x).empty());
  // As wide as its input, the code still reaches the output through the decoder's ReLU as well: e2 is
  // more than a factor of the head's map.
  CHECK(debug::check_missing_nonlinearity(*wide, x).empty());
}

namespace {

// A linear stem whose output is a residual stream: each block adds scale x (l2 relu l1)(h) to it, the
// scales initialised to 0 (SkipInit); `stream` false drops the stream (the head reads the last block).
struct StemNet : nn::Module {
  std::shared_ptr<nn::Linear> stem, l1, l2, head;
  Tensor scale;
  bool stream;
  explicit StemNet(bool with_stream) : Module("StemNet"), stream(with_stream) {
    stem = register_module("stem", std::make_shared<nn::Linear>(6, 32));
    l1 = register_module("l1", std::make_shared<nn::Linear>(32, 32));
    l2 = register_module("l2", std::make_shared<nn::Linear>(32, 32));
    head = register_module("head", std::make_shared<nn::Linear>(32, 3));
    scale = register_parameter("scale", zeros({1}));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = (*stem)(x);
    const Tensor branch = (*l2)(relu((*l1)(h)));
    return (*head)(stream ? h + branch * scale : branch);
  }
};

}  // namespace

TEST_CASE("M23: a linear stem feeding a residual stream is silent; the same stem straight into a Linear warns") {
  manual_seed(4);
  const Tensor x = randn({16, 6});
  CHECK(debug::check_missing_nonlinearity(*std::make_shared<StemNet>(true), x).empty());
  // Without the stream, stem -> l1 collapses (and so does l2 -> head).
  const std::vector<debug::Finding> f = debug::check_missing_nonlinearity(*std::make_shared<StemNet>(false), x);
  CHECK(
      std::any_of(f.begin(), f.end(), [](const debug::Finding& g) { return g.fires() && g.module == "l1 (Linear)"; }));
}

namespace {

// A classifier whose 8-unit feature layer is linear, read by the head with no activation between; with
// `center` the loop adds a center loss on those features (Wen et al.), with the class centres a buffer.
struct CenterNet : nn::Module {
  std::shared_ptr<nn::Linear> fc1, feat, head;
  Tensor features;
  CenterNet() : Module("CenterNet") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 32));
    feat = register_module("feat", std::make_shared<nn::Linear>(32, 8));
    head = register_module("head", std::make_shared<nn::Linear>(8, 3));
  }
  Tensor forward(const Tensor& x) override {
    features = (*feat)(relu((*fc1)(x)));
    return (*head)(features);
  }
};

debug::RunReport center_loss_run(bool center) {
  manual_seed(12);
  const Split d = dtest::split(5, 1.5);
  auto model = std::make_shared<CenterNet>();
  const Tensor centres = randn({3, 8});
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 6; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = ce((*model)(b.x), b.y);
      if (center) l = l + mean(sum(pow(model->features - index_select(centres, 0, b.y), 2.0), {1})) * 0.05;
      l.backward();
      opt.step();
    }
    s.epoch();
  }
  return s.finish();
}

}  // namespace

TEST_CASE("M23: a linear feature layer the loss also reads (a center loss) is info; without the center loss it warns") {
  const debug::RunReport with = center_loss_run(true);
  const debug::Finding* f = first_of(with, "M23", debug::Kind::LinearCollapse);
  REQUIRE_MESSAGE(f != nullptr, with.str(true));
  CHECK(f->severity == debug::Severity::Info);
  CHECK(f->module == "head (Linear)");
  CHECK(dtest::ev(*f, "input of the second layer also read by the loss in training") == 1.0);
  expect_clean(with);
  const debug::RunReport without = center_loss_run(false);
  const debug::Finding* g = first_of(without, "M23", debug::Kind::LinearCollapse);
  REQUIRE_MESSAGE(g != nullptr, without.str(true));
  CHECK(g->fires());
  CHECK(g->module == "head (Linear)");
}

namespace {

// A token table and a positional table summed, then a linear head over the mean: `how` says what the
// positional table is looked up with (0: the positions, 1: the token ids, as a copy of the line above),
// or (2) the two tables read the same ids but are concatenated (two features of one id, not one table).
struct TokPos : nn::Module {
  std::shared_ptr<nn::Embedding> tok, pos;
  std::shared_ptr<nn::Linear> head;
  int how;
  explicit TokPos(int h) : Module("TokPos"), how(h) {
    tok = register_module("tok", std::make_shared<nn::Embedding>(20, 8));
    pos = register_module("pos", std::make_shared<nn::Embedding>(32, 8));
    head = register_module("head", std::make_shared<nn::Linear>(how == 2 ? 16 : 8, 3));
  }
  Tensor forward(const Tensor& ids) override {
    const int64_t T = ids.size(1);
    const Tensor positions = arange(T, kInt64).reshape({1, T}).expand({ids.size(0), T}).contiguous();
    const Tensor t = (*tok)(ids);
    const Tensor h = how == 0 ? t + (*pos)(positions) : how == 1 ? t * 2.0 + (*pos)(ids) : cat({t, (*pos)(ids)}, 2);
    return (*head)(relu(mean(h, {1})));
  }
};

}  // namespace

TEST_CASE(
    "M23: a positional table looked up with the token ids acts as one table with the token table; positions, silent") {
  manual_seed(6);
  const Tensor ids = randint(0, 20, {8, 12});
  const std::vector<debug::Finding> bug = debug::check_embeddings_one_table(*std::make_shared<TokPos>(1), ids);
  REQUIRE(bug.size() == 1);
  CHECK(bug[0].fires());
  CHECK(bug[0].kind == debug::Kind::EmbeddingsOneTable);
  CHECK(bug[0].fix.find("arange(T)") != std::string::npos);
  CHECK(debug::check_embeddings_one_table(*std::make_shared<TokPos>(0), ids).empty());
  // Concatenated, the two lookups of one id feed different features: not one table.
  CHECK(debug::check_embeddings_one_table(*std::make_shared<TokPos>(2), ids).empty());
  // Through the gate, the finding is the diagnosis's lead with its own cause.
  auto model = std::make_shared<TokPos>(1);
  const Tensor y = randint(0, 3, {8});
  nn::CrossEntropyLoss ce;
  debug::LossFunction loss = [&ce](const Tensor& o, const Tensor& t) { return ce(o, t); };
  debug::GateOptions g;
  g.overfit = false;
  g.gradcheck = false;
  const debug::Report r = debug::pretrain_gate(*model, ids, y, loss, nullptr, g);
  const debug::CauseAnalysis a = debug::analyse_causes(r);
  REQUIRE_MESSAGE(a.lead.has_value(), r.str(true));
  CHECK(a.lead->cause == "embeddings-one-table");
  CHECK(a.lead->check == "M23");
}

namespace {

// y = exp(x . w / 2 + 3 + noise): a skewed target, trained on log1p(y). `raw_val`: the validation
// loader keeps raw y (the transform on the training path only, the prediction never mapped back).
Split skewed(bool raw_val) {
  Generator g(71);
  const Tensor x = randn({1000, 6}, {}, &g);
  const Tensor w = tensor(std::vector<float>{0.8f, -0.6f, 0.4f, 0.5f, -0.3f, 0.2f}, {6, 1});
  const Tensor y = exp(matmul(x, w) / 2.0 + 3.0 + 0.1 * randn({1000, 1}, {}, &g));
  const Tensor ylog = log1p(y);
  return dtest::loaders(x.narrow(0, 0, 800), ylog.narrow(0, 0, 800), x.narrow(0, 800, 200),
                        (raw_val ? y : ylog).narrow(0, 800, 200));
}

}  // namespace

TEST_CASE("a regression target log-transformed for training only: D15 leads with label-drift (target-drift)") {
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    manual_seed(71);
    const Split d = skewed(bug);
    auto model = std::make_shared<dtest::Regressor>(6, 32);
    nn::MSELoss mse;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = dtest::train_own_loop(*model, mse, opt, d, 10);
    if (bug) {
      expect_lead(r, "D15", "label-drift");
      const debug::Finding* f = first_of(r, "D15", debug::Kind::TargetDrift);
      REQUIRE_MESSAGE(f != nullptr, r.str(true));
      CHECK(dtest::ev(*f, "KS statistic of the targets, train against validation") > 0.9);
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("D15's target rule: two random halves of one regression target are silent") {
  Generator g(72);
  const Tensor x = randn({600, 4}, {}, &g), y = randn({600, 1}, {}, &g) * 3.0 + 10.0;
  auto a = std::make_shared<nn::TensorDataset>(x.narrow(0, 0, 300), y.narrow(0, 0, 300));
  auto b = std::make_shared<nn::TensorDataset>(x.narrow(0, 300, 300), y.narrow(0, 300, 300));
  CHECK(debug::check_label_drift(*a, *b).empty());
  // The second half scaled to other units: warns.
  auto c = std::make_shared<nn::TensorDataset>(x.narrow(0, 300, 300), y.narrow(0, 300, 300) * 100.0);
  const std::vector<debug::Finding> f = debug::check_label_drift(*a, *c);
  REQUIRE(f.size() == 1);
  CHECK(f[0].kind == debug::Kind::TargetDrift);
}

namespace {

// A per-pixel classifier of 12x12 masks: two small 3x3 convolutions (153 weights).
struct PixelNet : nn::Module {
  std::shared_ptr<nn::Conv2d> c1, c2;
  PixelNet() : Module("PixelNet") {
    c1 = register_module("c1", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 8, 3).padding(1)));
    c2 = register_module("c2", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(8, 1, 3).padding(1)));
  }
  Tensor forward(const Tensor& x) override { return (*c2)(relu((*c1)(x))); }
};

}  // namespace

TEST_CASE("M14 on a batch with more per-pixel targets than the model has weights: info, with both counts") {
  manual_seed(26);
  Generator g(26);
  const Tensor x = randn({32, 1, 12, 12}, {}, &g);
  // The mask: a pixel brighter than 0.5, blurred by noise the model cannot see.
  const Tensor y = ((x + 0.2 * randn({32, 1, 12, 12}, {}, &g)) > 0.5).to(kFloat32);
  auto model = std::make_shared<PixelNet>();
  nn::BCEWithLogitsLoss bce;
  const debug::LossFunction lf = [&bce](const Tensor& o, const Tensor& t) { return bce(o, t); };
  const std::vector<debug::Finding> f = debug::overfit_one_batch(*model, x, y, lf);
  REQUIRE(f.size() == 1);
  CHECK_MESSAGE(!f[0].fires(), f[0].str());
  CHECK(dtest::ev(f[0], "target values in the batch") == 4608.0);
  CHECK(dtest::ev(f[0], "trainable parameter values") == 153.0);
  // The same model on one mask (144 targets, fewer than its weights) is judged as ever.
  const std::vector<debug::Finding> few = debug::overfit_one_batch(*model, x.narrow(0, 0, 1), y.narrow(0, 0, 1), lf);
  REQUIRE(few.size() == 1);
  CHECK(std::isnan(dtest::evidence(few[0], "target values in the batch")));
}

TEST_CASE("M14 with a density loss that never reads the labels the data carries: no 'loss blind to labels'") {
  // A likelihood of the inputs themselves, beside 0/1 labels the data set keeps (a make_moons-style id): the
  // loss falls below zero, as a density's may, and the labels are no targets of it.
  manual_seed(27);
  const Tensor x = randn({32, 2});
  const Tensor y = randint(0, 2, {32});
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(2, 32), std::make_shared<nn::Tanh>(),
                                                std::make_shared<nn::Linear>(32, 3));
  // The outputs are a flow's (z1, z2, log|det|) of each point: -log N(z) - log|det| up to a constant, the
  // log-determinant bounded as a scale times tanh is in Real NVP.
  const debug::LossFunction density = [](const Tensor& o, const Tensor&) {
    return mean(0.5 * sum(square(o.narrow(1, 0, 2)), {1}, true) - 2.0 * tanh(o.narrow(1, 2, 1)));
  };
  const std::vector<debug::Finding> f = debug::overfit_one_batch(*model, x, y, density);
  REQUIRE(f.size() == 1);
  CHECK_MESSAGE(!f[0].is("M14", debug::Kind::LossBlindToLabels), f[0].str());
  CHECK_MESSAGE(!f[0].fires(), f[0].str());
}

namespace {

// Attention pooling over sets of up to 8 elements (padded slots masked with -1e9): the scorer
// Linear(32, 1)'s bias adds one constant to every score, which the softmax over the set ignores.
struct SetPool : nn::Module {
  std::shared_ptr<nn::Linear> e, sc, val, out;
  SetPool() : Module("SetPool") {
    e = register_module("e", std::make_shared<nn::Linear>(3, 32));
    sc = register_module("sc", std::make_shared<nn::Linear>(32, 1));
    val = register_module("val", std::make_shared<nn::Linear>(32, 32));
    out = register_module("out", std::make_shared<nn::Linear>(32, 2));
  }
  Tensor forward(const Tensor& x) override {  // x (B, K, 4): two features, a bit, valid
    const int64_t B = x.size(0), K = x.size(1);
    const Tensor h = relu((*e)(x.narrow(2, 0, 3).reshape({B * K, 3})));
    const Tensor s = (*sc)(h).reshape({B, K, 1}).masked_fill(x.narrow(2, 3, 1) == 0.0, -1e9);
    return (*out)(relu(sum(softmax(s, 1) * (*val)(h).reshape({B, K, 32}), {1})));
  }
};

}  // namespace

TEST_CASE("the scorer bias of a masked attention pooling: a redundant bias (info), not a vanishing gradient") {
  manual_seed(18);
  std::mt19937 rng(18);
  std::uniform_int_distribution<int> len(2, 8);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t N = 800, K = 8;
  std::vector<float> xs(static_cast<size_t>(N * K * 4), 0.0f);
  std::vector<int64_t> ys(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    const int l = len(rng);
    float best = -2.0f;
    for (int k = 0; k < l; ++k) {
      float* e = &xs[static_cast<size_t>((n * K + k) * 4)];
      e[0] = u(rng), e[1] = u(rng), e[2] = u(rng) > 0 ? 1.0f : 0.0f, e[3] = 1.0f;
      if (e[0] > best) best = e[0], ys[static_cast<size_t>(n)] = static_cast<int64_t>(e[2]);
    }
  }
  const Tensor X = tensor(xs, {N, K, 4}), Y = tensor(ys, {N});
  const Split d =
      dtest::loaders(X.narrow(0, 0, 640), Y.narrow(0, 0, 640), X.narrow(0, 640, 160), Y.narrow(0, 640, 160));
  auto model = std::make_shared<SetPool>();
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 4);
  bool redundant = false;
  for (const debug::Finding& f : r.findings.findings())
    redundant = redundant || (f.check == "O1" && f.parameter == "sc.bias" && !f.fires() &&
                              f.title.find("redundant bias") != std::string::npos);
  CHECK_MESSAGE(redundant, r.str(true));
  for (const debug::Finding& f : r.findings.findings())
    CHECK_MESSAGE(!(f.check == "O1" && f.parameter == "sc.bias" && f.fires()), f.str());
}

namespace {

// e1 -> ReLU -> e2 (a `code`-unit layer) -> head (4 outputs), and nothing else in the forward.
struct CodeHead : nn::Module {
  std::shared_ptr<nn::Linear> e1, e2, head;
  explicit CodeHead(int64_t code) : Module("CodeHead") {
    e1 = register_module("e1", std::make_shared<nn::Linear>(6, 64));
    e2 = register_module("e2", std::make_shared<nn::Linear>(64, code));
    head = register_module("head", std::make_shared<nn::Linear>(code, 4));
  }
  Tensor forward(const Tensor& x) override { return (*head)((*e2)(relu((*e1)(x)))); }
};

}  // namespace

TEST_CASE("M23: a code narrower than the head's output is a bottleneck; a hidden layer without its ReLU is not") {
  manual_seed(3);
  const Tensor x = randn({16, 6});
  auto code = std::make_shared<CodeHead>(3);     // 64 -> 3 -> 4: a 3-D embedding under a 4-class head
  auto hidden = std::make_shared<CodeHead>(32);  // 64 -> 32 -> 4: the activation forgotten
  CHECK(debug::check_missing_nonlinearity(*code, x).empty());
  const std::vector<debug::Finding> f = debug::check_missing_nonlinearity(*hidden, x);
  REQUIRE(f.size() == 1);
  CHECK(f[0].fires());
}

namespace {

struct DropNet : nn::Module {
  std::shared_ptr<nn::Linear> a, b;
  std::shared_ptr<nn::Dropout> drop;
  DropNet() : Module("DropNet") {
    a = register_module("a", std::make_shared<nn::Linear>(6, 64));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.2));
    b = register_module("b", std::make_shared<nn::Linear>(64, 3));
  }
  Tensor forward(const Tensor& x) override { return (*b)((*drop)(relu((*a)(x)))); }
};

// Each epoch, the validation batch scored with dropout on: `passes` forwards of it under no_grad
// in training mode (20: Monte Carlo dropout's predictive mean; 1: an evaluation without eval()).
debug::RunReport dropout_eval(int passes) {
  manual_seed(24);
  const Split d = dtest::split(3, 2.0);
  auto model = std::make_shared<DropNet>();
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  const nn::Batch v = d.val->batch(0, 0);
  for (int e = 0; e < 4; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      ce((*model)(b.x), b.y).backward();
      opt.step();
    }
    {
      NoGradGuard ng;
      Tensor mean = zeros({v.x.size(0), 3});
      for (int k = 0; k < passes; ++k) mean = mean + softmax((*model)(v.x), 1) / static_cast<double>(passes);
    }
    s.epoch();
  }
  return s.finish();
}

bool m2_fires(const debug::RunReport& r) {
  for (const debug::Finding& f : r.findings.findings())
    if (f.check == "M2" && f.fires()) return true;
  return false;
}

}  // namespace

TEST_CASE("Monte Carlo dropout (20 passes of one input under no_grad) is info; one pass in training mode warns") {
  const debug::RunReport mc = dropout_eval(20);
  CHECK_MESSAGE(!m2_fires(mc), mc.str(true));
  bool said = false;
  for (const debug::Finding& f : mc.findings.findings())
    said = said || (f.check == "M2" && f.title.find("Monte Carlo dropout") != std::string::npos);
  CHECK_MESSAGE(said, mc.str(true));
  const debug::RunReport once = dropout_eval(1);
  CHECK_MESSAGE(m2_fires(once), once.str(true));
  const debug::RunReport twice = dropout_eval(2);  // a batch's loss, then its accuracy: still an evaluation bug
  CHECK_MESSAGE(m2_fires(twice), twice.str(true));
}

TEST_CASE("D14 on a pairs dataset (each row two items' features, each item in several rows) counts distinct items") {
  Generator g(14);
  const Tensor items = randn({250, 10}, {}, &g);  // 200 training items, 50 validation items
  auto pairs = [&](int64_t lo, int64_t n, int64_t rows, double shift) {
    const Tensor a = randint(lo, lo + n, {rows}, kInt64, &g), b = randint(lo, lo + n, {rows}, kInt64, &g);
    return cat({items.index_select(0, a), items.index_select(0, b)}, 1) + shift;
  };
  const Tensor xtr = pairs(0, 200, 1000, 0.0), xva = pairs(200, 50, 250, 0.0);
  auto train = std::make_shared<nn::TensorDataset>(xtr, zeros({1000}));
  auto val = std::make_shared<nn::TensorDataset>(xva, zeros({250}));
  const std::vector<debug::Finding> same = debug::check_feature_drift(*train, *val);
  CHECK_MESSAGE(same.empty(), dtest::all_text(same));
  // Validation items shifted by half a standard deviation: warns all the same.
  auto shifted = std::make_shared<nn::TensorDataset>(pairs(200, 50, 250, 0.5), zeros({250}));
  const std::vector<debug::Finding> moved = debug::check_feature_drift(*train, *shifted);
  double repeats = std::nan("");
  for (const debug::Finding& f : moved)
    if (std::isfinite(dtest::evidence(f, "rows per distinct value in train (repeated items count once)")))
      repeats = dtest::evidence(f, "rows per distinct value in train (repeated items count once)");
  CHECK_MESSAGE(repeats > 3.0, dtest::all_text(moved));
}

namespace {

// A Gaussian NLL with a fixed sd of 0.05 on sin(x) from 40 rows: the validation loss ends near -1.4.
// `noisy`: from epoch 27 on, noise growing each epoch is written into the weights, so the validation
// loss climbs past 0 over the last epochs (a rise W3 must see although the best is below 0).
debug::RunReport negative_nll_run(bool noisy) {
  manual_seed(9);
  Generator g(9);
  const Tensor x = rand({240, 1}, {}, &g) * 6.0 - 3.0;
  const Tensor y = sin(x) + 0.05 * randn({240, 1}, {}, &g);
  const Split d = dtest::loaders(x.narrow(0, 0, 40), y.narrow(0, 0, 40), x.narrow(0, 40, 200), y.narrow(0, 40, 200));
  auto model = std::make_shared<dtest::Regressor>(1, 128);
  const debug::LossFunction nll = [](const Tensor& o, const Tensor& t) {
    return (0.5 * square((o - t) / 0.05)).mean() + std::log(0.05) + 0.5 * std::log(2 * M_PI);
  };
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  debug::Session s(*model, nll, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 30; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = nll((*model)(b.x), b.y);
      l.backward();
      opt.step();
      s.step(l);
      if (noisy && e >= 26) {
        NoGradGuard ng;
        for (Tensor& p : model->parameters()) p.add_(randn(p.shape(), {}, &g) * (0.01 * (e - 25)));
      }
    }
    s.epoch();
  }
  return s.finish();
}

}  // namespace

TEST_CASE("W3 on a negative log-likelihood: a validation loss that climbs from -1.4 past 0 is a rise") {
  const debug::RunReport bug = negative_nll_run(true);
  REQUIRE(!bug.history.epoch_val_loss.empty());
  CHECK(*std::min_element(bug.history.epoch_val_loss.begin(), bug.history.epoch_val_loss.end()) < 0.0);
  const debug::Finding* rose = first_of(bug, "W3", debug::Kind::ValidationRose);
  REQUIRE_MESSAGE(rose != nullptr, bug.str(true));
  CHECK(rose->fires());
  const debug::RunReport clean = negative_nll_run(false);
  const debug::Finding* quiet = first_of(clean, "W3", debug::Kind::ValidationRose);
  CHECK_MESSAGE((quiet == nullptr || !quiet->fires()), clean.str(true));
}

namespace {

// Cox's negative partial log-likelihood (Breslow, no ties) over each batch's risk sets: risk (B, 1)
// against y (B, 2) = (time, event). Each event's term is taken against every row of the batch still
// at risk, so the loss grows with the number of rows scored together.
Tensor cox_nll(const Tensor& risk, const Tensor& y) {
  const Tensor t = y.narrow(1, 0, 1), event = y.narrow(1, 1, 1);
  const Tensor at_risk = (t.t() >= t).to(kFloat32);  // [i][j]: t_j >= t_i
  const Tensor r = risk.reshape({-1, 1});
  const Tensor lse = logsumexp(r.t() + log(at_risk + 1e-30), {1}, true);
  return -(event * (r - lse)).sum() / (event.sum() + 1e-8);
}

// Survival times from a proportional-hazards model with right censoring; training in batches of 32,
// validation on 400 rows in one batch.
debug::RunReport cox_run(int64_t n_train, int epochs, int64_t hidden) {
  manual_seed(25);
  Generator g(25);
  std::mt19937 rng(25);
  const int64_t n = n_train + 400;
  const Tensor x = randn({n, 8}, {}, &g);
  const Tensor eta = 0.8 * x.narrow(1, 0, 1) - 0.6 * x.narrow(1, 1, 1) + 0.5 * tanh(2.0 * x.narrow(1, 2, 1));
  const std::vector<float> e = eta.reshape({-1}).to_vector<float>();
  std::vector<float> ys(static_cast<size_t>(2 * n));
  std::exponential_distribution<double> event_time(1.0), censor_time(0.3);
  for (size_t i = 0; i < e.size(); ++i) {
    const double tt = event_time(rng) * std::exp(-e[i]), c = censor_time(rng);
    ys[2 * i] = static_cast<float>(std::min(tt, c));
    ys[2 * i + 1] = tt <= c ? 1.0f : 0.0f;
  }
  const Tensor y = tensor(ys, {n, 2});
  const Split d = dtest::loaders(x.narrow(0, 0, n_train), y.narrow(0, 0, n_train), x.narrow(0, n_train, 400),
                                 y.narrow(0, n_train, 400));
  auto model = std::make_shared<dtest::Regressor>(8, hidden);
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-3));
  const debug::LossFunction loss = cox_nll;
  debug::Session s(*model, loss, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int ep = 0; ep < epochs; ++ep) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = cox_nll((*model)(b.x), b.y);
      l.backward();
      opt.step();
      s.step(l);
    }
    s.epoch();
  }
  return s.finish();
}

}  // namespace

TEST_CASE("L7 on a Cox partial likelihood validated in one batch of 400: the batch's size is the gap, not memorising") {
  const debug::RunReport healthy = cox_run(1600, 12, 64);
  const debug::Finding* l7 = first_of(healthy, "L7", debug::Kind::Overfitting);
  REQUIRE_MESSAGE(l7 != nullptr, healthy.str(true));  // the epochs' gap alone says overfitting
  CHECK_MESSAGE(!l7->fires(), l7->str());
  const double rebatched = dtest::evidence(*l7, "validation loss in batches of 32");
  const double own = dtest::evidence(*l7, "validation loss in its batches of 400");
  REQUIRE(std::isfinite(rebatched));
  CHECK(own - rebatched > 1.0);  // log(400 / 32) = 2.5 at chance
  expect_clean(healthy);

  // 64 training rows memorised by a wide model: at the training batch's size too, validation is far
  // above training.
  const debug::RunReport memorised = cox_run(64, 150, 256);
  const debug::Finding* over = first_of(memorised, "L7", debug::Kind::Overfitting);
  REQUIRE_MESSAGE(over != nullptr, memorised.str(true));
  CHECK_MESSAGE(over->fires(), over->str());
}

namespace {

// fc1 -> ReLU -> fc2 -> ReLU -> fc3, trained by SGD at learning rate `lr`. With `shrink` the gradient on
// its way back into fc1 is scaled by 1e-5 (a gradient-scaling layer's coefficient far too small), so fc1's
// updates are far smaller than fc2's and fc3's at the same rate.
struct Shrunk : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
  bool shrink;
  explicit Shrunk(bool s) : Module("Shrunk"), shrink(s) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 32));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 32));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(32, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*fc1)(x);
    if (shrink && h.requires_grad()) h.register_hook([](const Tensor& g) { return g * 1e-5; });
    return (*fc3)(relu((*fc2)(relu(h))));
  }
};

debug::RunReport shrunk_run(bool shrink, double lr) {
  manual_seed(31);
  const Split d = dtest::split(7, 1.5);
  auto model = std::make_shared<Shrunk>(shrink);
  nn::CrossEntropyLoss ce;
  optim::SGD opt(model->parameters(), optim::SGDOptions(lr).momentum(0.9));
  return dtest::train_own_loop(*model, ce, opt, d, 8);
}

}  // namespace

TEST_CASE("O6: one layer's updates too small beside its group's is its gradient's doing, not the rate's") {
  const debug::RunReport bug = shrunk_run(true, 0.05);
  const debug::Finding* f = first_of(bug, "O6", debug::Kind::LayerUpdatesTooSmall);
  REQUIRE_MESSAGE(f != nullptr, bug.str(true));
  CHECK(f->parameter == "fc1.weight");
  CHECK(dtest::ev(*f, "median ratio of the other weights of its group") >= 1e-4);
  CHECK(first_of(bug, "O6", debug::Kind::UpdatesTooSmall) == nullptr);  // the rate is not blamed
  CHECK(dtest::lead_cause(bug) != "lr-too-low");
  CHECK(first_of(shrunk_run(false, 0.05), "O6", debug::Kind::LayerUpdatesTooSmall) == nullptr);
  // Every weight slow (a rate far too low): the rate's finding, not the layer's.
  const debug::RunReport slow = shrunk_run(false, 1e-7);
  CHECK_MESSAGE(first_of(slow, "O6", debug::Kind::UpdatesTooSmall) != nullptr, slow.str(true));
  CHECK(first_of(slow, "O6", debug::Kind::LayerUpdatesTooSmall) == nullptr);
}
