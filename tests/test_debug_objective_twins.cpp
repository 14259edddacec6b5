// The objective the loop trains, against the loss the Session was given: the checks before training
// (the gate) train and judge loss(model(x), y), and the run tells whether the loop does the same.
// A multi-task model whose second head learns from an auxiliary loss, against the same head with
// the auxiliary loss forgotten; a contrastive (InfoNCE) loss on the product of two forwards, against
// the same bounded encoder trained by cross-entropy on its output; a Barlow Twins loss module that takes
// two views' projections and rejects labels, against the same loss handed a label by mistake; a loop
// over the validation loader
// (D13 over the run), against a final fit on train + validation; the stored training inputs normalised
// again at each epoch (D14 after training), against normalised once and a dataset that augments.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::Split;

namespace {

// A shared trunk, a classification head (the model's output) and a regression head whose output
// the forward keeps in `aux`.
struct TwoHeads : nn::Module {
  std::shared_ptr<nn::Linear> trunk = register_module("trunk", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::Linear> cls = register_module("cls", std::make_shared<nn::Linear>(32, 3));
  std::shared_ptr<nn::Linear> reg = register_module("reg", std::make_shared<nn::Linear>(32, 1));
  Tensor aux;
  TwoHeads() : Module("TwoHeads") {}
  Tensor forward(const Tensor& x) override {
    const Tensor h = relu((*trunk)(x));
    aux = (*reg)(h);
    return (*cls)(h);
  }
};

// Unit-length 16-dimensional embeddings.
struct Encoder : nn::Module {
  std::shared_ptr<nn::Linear> a = register_module("a", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::Linear> b = register_module("b", std::make_shared<nn::Linear>(32, 16));
  Encoder() : Module("Encoder") {}
  Tensor forward(const Tensor& x) override {
    const Tensor z = (*b)(relu((*a)(x)));
    return z / sqrt(sum(z * z, {1}, true) + 1e-8);
  }
};

bool warned_on(const debug::RunReport& r, const char* check, debug::Kind k, const std::string& parameter) {
  for (const debug::Finding& f : r.findings.findings())
    if (f.is(check, k) && f.fires() && f.parameter == parameter) return true;
  return false;
}

debug::RunReport train_two_heads(bool with_aux) {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  auto model = std::make_shared<TwoHeads>();
  nn::CrossEntropyLoss ce;
  nn::MSELoss mse;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 5; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor loss = ce((*model)(b.x), b.y);
      // The auxiliary target: the sum of the first two features.
      if (with_aux) loss = loss + mse(model->aux, sum(b.x.narrow(1, 0, 2), {1}, true)) * 0.5;
      loss.backward();
      opt.step();
    }
    s.epoch();
  }
  return s.finish();
}

}  // namespace

TEST_CASE("a second head trained by an auxiliary loss is reached in training: the gate's 'no gradient' is info") {
  SUBCASE("the auxiliary loss added before backward") {
    const debug::RunReport r = train_two_heads(true);
    expect_clean(r);
    // The gate still says what it saw, as info with the run's count.
    const debug::Finding* m5 = dtest::first_of(r, "M5", debug::Kind::ParameterUnreached);
    REQUIRE(m5 != nullptr);
    CHECK(m5->severity == debug::Severity::Info);
    CHECK(dtest::ev(*m5, "sampled training steps on which it had a gradient") > 0);
  }
  SUBCASE("the auxiliary loss forgotten: the head never learns") {
    const debug::RunReport r = train_two_heads(false);
    CHECK_MESSAGE(warned_on(r, "M5", debug::Kind::ParameterUnreached, "reg.weight"), r.str());
    CHECK_MESSAGE(warned_on(r, "O1", debug::Kind::GradientMissing, "reg.weight"), r.str());
    CHECK(r.history.gradient_judged_steps > 0);
  }
}

TEST_CASE("a contrastive loss on two forwards is not loss(model(x), y): the gate's overfit test is info") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  auto model = std::make_shared<Encoder>();
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  SUBCASE("InfoNCE: two noisy views, logits z1 z2^T / 0.1, the labels 0..B-1") {
    debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 5; ++e) {
      for (const nn::Batch& b : *d.train) {
        const Tensor v1 = b.x + randn(b.x.sizes()) * 0.1, v2 = b.x + randn(b.x.sizes()) * 0.1;
        const Tensor logits = matmul((*model)(v1), (*model)(v2).transpose(0, 1)) / 0.1;
        opt.zero_grad();
        ce(logits, arange(static_cast<double>(b.x.size(0)), TensorOptions().dtype(kInt64))).backward();
        opt.step();
      }
      s.epoch();
    }
    const debug::RunReport r = s.finish();
    expect_clean(r);
    CHECK(r.history.loss_calls > 0);
    CHECK(r.history.loss_calls_on_output == 0);
    bool judged_elsewhere = false;  // M14's finding, kept as info with the premise's evidence
    for (const debug::Finding& f : r.findings.findings())
      judged_elsewhere = judged_elsewhere || (f.check == "M14" && f.severity == debug::Severity::Info &&
                                              !std::isnan(dtest::evidence(f, "training calls of the loss")));
    CHECK_MESSAGE(judged_elsewhere, r.str());
  }
  SUBCASE("the same unit-length encoder trained by cross-entropy on its output cannot fit a batch: M14 warns") {
    const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 3);
    CHECK(r.history.loss_calls_on_output == r.history.loss_calls);
    CHECK_MESSAGE(dtest::find(r.findings.findings(), "M14") != nullptr, r.str());
  }
}

namespace {

// Barlow Twins (Zbontar et al., 2021): the cross-correlation of two views' standardised projections
// pulled to the identity. It takes two (N, D) projections and rejects anything else.
struct BarlowTwinsLoss : nn::Loss {
  BarlowTwinsLoss() : Loss("BarlowTwinsLoss") {}
  Tensor forward(const Tensor& a, const Tensor& b) override {
    if (a.shape() != b.shape() || a.dim() != 2)
      throw std::invalid_argument("BarlowTwinsLoss: expects two (N, D) projections, got " + a.str() + " and " +
                                  b.str());
    auto standardise = [](const Tensor& z) { return (z - z.mean({0}, true)) / sqrt(z.var({0}, false, true) + 1e-5); };
    const Tensor c = matmul(standardise(a).t(), standardise(b)) / static_cast<double>(a.size(0));
    const Tensor i = eye(c.size(0));
    return square(1.0 - c * i).mul(i).sum() + square(c * (1.0 - i)).sum() * 5e-3;
  }
  nn::Reduction reduction() const override { return nn::Reduction::Mean; }  // C is divided by N
};

// Two noisy views of each batch through the encoder; `labels`: the loop hands the loss the batch's
// labels as its second argument (a slip the loss rejects in the loop too).
debug::RunReport barlow_run(bool labels) {
  manual_seed(5);
  const Split d = dtest::split(3, 2.0);
  auto model = std::make_shared<Encoder>();
  BarlowTwinsLoss bt;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  debug::Session s(*model, bt, opt, {.train = d.train.get(), .val = d.val.get()});
  try {
    for (int e = 0; e < 4; ++e) {
      for (const nn::Batch& b : *d.train) {
        const Tensor v1 = b.x + randn(b.x.sizes()) * 0.1, v2 = b.x + randn(b.x.sizes()) * 0.1;
        opt.zero_grad();
        bt((*model)(v1), labels ? b.y : (*model)(v2)).backward();
        opt.step();
      }
      s.epoch();
    }
  } catch (const std::exception& ex) {
    s.error(ex);
  }
  return s.finish();
}

}  // namespace

TEST_CASE("a loss on two views that rejects the labels: W2's errors are info where the loop trains; an error if not") {
  const debug::RunReport r = barlow_run(false);
  int revised = 0;
  for (const debug::Finding& f : r.findings.findings()) {
    CHECK_MESSAGE(!(f.check == "W2" && f.severity == debug::Severity::Error), f.title);
    revised += f.check == "W2" && dtest::has(f.title, "the training loop gives it float32[32, 16] targets");
  }
  CHECK_MESSAGE(revised >= 1, r.str(true));
  const debug::RunReport bad = barlow_run(true);
  bool error = false;
  for (const debug::Finding& f : bad.findings.findings())
    error = error || (f.check == "W2" && f.severity == debug::Severity::Error);
  CHECK_MESSAGE(error, bad.str(true));
}

TEST_CASE("D13 over the run: a loop over the validation loader warns; a final fit on train + validation does not") {
  manual_seed(4);
  const dtest::XY all = dtest::blobs(200, 3, 6, 3, 2.0);
  const Tensor xtr = all.x.narrow(0, 0, 480), ytr = all.y.narrow(0, 0, 480);
  const Tensor xva = all.x.narrow(0, 480, 120), yva = all.y.narrow(0, 480, 120);
  const Split d = dtest::loaders(xtr, ytr, xva, yva);
  auto model = std::make_shared<dtest::Mlp>();
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  auto run_on = [&](nn::DataLoader& loop_loader) {
    debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 5; ++e) {
      for (const nn::Batch& b : loop_loader) {
        opt.zero_grad();
        ce((*model)(b.x), b.y).backward();
        opt.step();
      }
      s.epoch();
    }
    return s.finish();
  };
  SUBCASE("the validation loader in the training loop") {
    nn::DataLoader wrong(d.val->dataset_ptr(), nn::DataLoaderOptions().batch_size(32).shuffle(true).seed(3));
    const debug::RunReport r = run_on(wrong);
    const debug::Finding* f = dtest::find(r.findings.findings(), "D13");
    REQUIRE_MESSAGE(f != nullptr, r.str());
    CHECK(dtest::ev(*f, "of them validation rows") == dtest::ev(*f, "rows of the sampled steps' input batches"));
    CHECK(dtest::ev(*f, "of them training rows") == 0);
    CHECK(dtest::lead_of(r).get("check")->str == "D13");
  }
  SUBCASE("train + validation together, after model selection") {
    nn::DataLoader both(std::make_shared<nn::TensorDataset>(gs::cat({xtr, xva}, 0), gs::cat({ytr, yva}, 0)),
                        nn::DataLoaderOptions().batch_size(32).shuffle(true).seed(3));
    const debug::RunReport r = run_on(both);
    CHECK(r.findings.ran("D13"));
    CHECK_MESSAGE(dtest::find(r.findings.findings(), "D13") == nullptr, r.str());
  }
}

namespace {
// Gaussian input noise drawn on every read: a dataset that augments on the fly.
struct NoisyDataset : nn::Dataset {
  std::shared_ptr<nn::TensorDataset> base;
  explicit NoisyDataset(std::shared_ptr<nn::TensorDataset> b) : base(std::move(b)) {}
  int64_t size() const override { return base->size(); }
  nn::Example get(int64_t i) const override {
    nn::Example e = base->get(i);
    e.x = e.x + randn(e.x.sizes()) * 0.05;
    return e;
  }
};
}  // namespace

TEST_CASE("D14 after training: the stored training inputs normalised again each epoch warn and lead") {
  manual_seed(4);
  const dtest::XY all = dtest::blobs(200, 3, 6, 3, 2.0);
  const Tensor raw = all.x * 3.0 + 5.0;  // features around 5 with std 3
  Tensor xtr = raw.narrow(0, 0, 480).clone();
  const Tensor mu = mean(xtr, {0}), sd = sqrt(mean((xtr - mu) * (xtr - mu), {0}));
  const Tensor xva = (raw.narrow(0, 480, 120) - mu) / sd;
  auto standardise = [&] {
    NoGradGuard ng;
    xtr.sub_(mu);
    xtr.div_(sd);
  };
  standardise();  // once, before training: healthy
  auto train_set = std::make_shared<nn::TensorDataset>(xtr, all.y.narrow(0, 0, 480));
  auto run_with = [&](const nn::DatasetPtr& ds, bool again_each_epoch) {
    const Split d{std::make_shared<nn::DataLoader>(ds, nn::DataLoaderOptions().batch_size(32).shuffle(true).seed(3)),
                  std::make_shared<nn::DataLoader>(std::make_shared<nn::TensorDataset>(xva, all.y.narrow(0, 480, 120)),
                                                   nn::DataLoaderOptions().batch_size(120))};
    auto model = std::make_shared<dtest::Mlp>();
    nn::CrossEntropyLoss ce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 5; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        ce((*model)(b.x), b.y).backward();
        opt.step();
      }
      if (again_each_epoch) standardise();  // the bug: the stored tensor again, with the raw data's statistics
      s.epoch();
    }
    return s.finish();
  };
  SUBCASE("normalised again at each epoch's end: the training rows drift away from validation") {
    const debug::RunReport r = run_with(train_set, true);
    const debug::Finding* f = dtest::find(r.findings.findings(), "D14");
    REQUIRE_MESSAGE(f != nullptr, r.str());
    CHECK(dtest::ev(*f, "share changed") == 1.0);
    CHECK(dtest::lead_of(r).get("check")->str == "D14");
  }
  SUBCASE("normalised once before training") { expect_clean(run_with(train_set, false)); }
  SUBCASE("a dataset that adds noise on every read is not judged") {
    const debug::RunReport r = run_with(std::make_shared<NoisyDataset>(train_set), false);
    CHECK_MESSAGE(dtest::find(r.findings.findings(), "D14") == nullptr, r.str());
  }
}

namespace {

// A consistency term whose weight the loop ramps up from 0 (temporal ensembling, Laine and Aila): the
// outputs pulled towards a fixed random target, the total loss rising as the weight grows.
debug::RunReport ramped_run(double ramp_to) {
  manual_seed(83);
  const Split d = dtest::split(9, 2.0);
  auto model = std::make_shared<dtest::Mlp>();
  const Tensor target = randn({1, 3}) * 3.0;
  double w = 0.0;
  nn::CrossEntropyLoss ce;
  const debug::LossFunction loss = [&](const Tensor& out, const Tensor& y) {
    return ce(out, y) + w * mean(square(softmax(out, 1) - softmax(target, 1)));
  };
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  debug::Session s(*model, loss, opt, {.train = d.train.get(), .val = d.val.get()});
  const int epochs = 10;
  const int64_t per = d.train->num_batches();
  int64_t step = 0;
  for (int e = 0; e < epochs; ++e) {
    for (const nn::Batch& b : *d.train) {
      const double t = static_cast<double>(step++) / static_cast<double>(epochs * per);
      w = ramp_to * std::exp(-5.0 * (1.0 - t) * (1.0 - t));
      opt.zero_grad();
      Tensor l = loss((*model)(b.x), b.y);
      l.backward();
      opt.step();
      s.step(l);
    }
    s.epoch();
  }
  return s.finish();
}

}  // namespace

TEST_CASE("a consistency weight ramped up makes the losses rise: the objective changed, so W3, L1 and O6 are info") {
  const debug::RunReport r = ramped_run(60.0);
  const debug::Finding* rose = dtest::first_of(r, "W3", debug::Kind::ValidationRose);
  REQUIRE_MESSAGE(rose != nullptr, r.str(true));
  CHECK_FALSE(rose->fires());
  CHECK(dtest::ev(*rose, "the same output and target at the end") >
        dtest::ev(*rose, "loss of one fixed output and target before the run"));
  expect_clean(r);
}
