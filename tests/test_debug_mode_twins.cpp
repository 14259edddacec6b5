// Randomness at evaluation, each twin as a user writes it: a block that calls functional dropout
// with training = true (PyTorch's F.dropout default) keeps dropping in eval mode, so every
// validation pass scores another thinned model; passing is_training() instead, it does not. And a
// hand-written batch normalisation whose eval branch divides by the running variance, not its square
// root: on the same training rows the trained model does far worse in eval mode (M2).
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

TEST_CASE("a model with BatchNorm left in eval mode by an accuracy helper: M2 leads, M17's stale statistics follow") {
  manual_seed(19);
  const Split d = dtest::split(3, 2.0);
  auto model =
      std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 32), std::make_shared<nn::BatchNorm1d>(32),
                                       std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 3));
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(2e-3));
  model->eval();  // the helper's model->eval(), never undone
  const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 4);
  expect_lead(r, "M2", "train-mode-eval");
}

namespace {
// A model that draws in forward() whatever the mode: a latent sampled as mu + exp(logvar / 2) * eps (a
// VAE's reparameterisation), or noise of a fixed scale added to a hidden layer (augmentation left on).
struct Sampler : nn::Module {
  std::shared_ptr<nn::Linear> enc, mu, logvar, head;
  bool noise;
  explicit Sampler(bool noise) : Module("Sampler"), noise(noise) {
    enc = register_module("enc", std::make_shared<nn::Linear>(6, 32));
    mu = register_module("mu", std::make_shared<nn::Linear>(32, 4));
    logvar = register_module("logvar", std::make_shared<nn::Linear>(32, 4));
    head = register_module("head", std::make_shared<nn::Linear>(4, 3));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = relu((*enc)(x));
    const Tensor m = (*mu)(h);
    const Tensor z = noise ? m + randn(m.shape()) * 0.3 : m + exp((*logvar)(h)*0.5) * randn(m.shape());
    return (*head)(z);
  }
};
}  // namespace

TEST_CASE("M2 on a model that draws at evaluation: a reparameterised sample is info, fixed-scale noise warns") {
  manual_seed(9);
  const Tensor x = randn({16, 6});
  for (const bool noise : {false, true}) {
    CAPTURE(noise);
    auto model = std::make_shared<Sampler>(noise);
    const std::vector<debug::Finding> fs = debug::check_repeat_calls(*model, x, -1);
    REQUIRE(fs.size() == 1);
    CHECK(fs[0].kind == debug::Kind::RandomAtEval);
    CHECK(fs[0].severity == (noise ? debug::Severity::Warning : debug::Severity::Info));
    CHECK(dtest::ev(fs[0], "draws of the forward scaled by a spread it computed per example") == (noise ? 0.0 : 1.0));
  }
  // Functional dropout on at evaluation: a dropout op, whatever else the forward draws.
  auto dropping = std::make_shared<DropoutBlock>(true);
  const std::vector<debug::Finding> fd = debug::check_repeat_calls(*dropping, randn({16, 6}), -1);
  REQUIRE(fd.size() == 1);
  CHECK(fd[0].severity == debug::Severity::Warning);
}

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

namespace {

// A batch normalisation written by hand: batch statistics in training (and running averages of them,
// momentum 0.1), the running ones at evaluation; `sqrt_forgotten`: its eval branch divides by the
// running variance where its square root was meant.
struct HandNorm : nn::Module {
  Tensor gamma, beta, mean, var;
  bool sqrt_forgotten;
  HandNorm(int64_t n, bool fault) : Module("HandNorm"), sqrt_forgotten(fault) {
    gamma = register_parameter("gamma", ones({n}));
    beta = register_parameter("beta", zeros({n}));
    mean = register_buffer("running_mean", zeros({n}));
    var = register_buffer("running_var", ones({n}));
  }
  Tensor forward(const Tensor& x) override {
    if (is_training()) {
      const Tensor m = x.mean({0}), v = x.var({0}, false);
      {
        NoGradGuard ng;
        mean.mul_(0.9).add_(0.1 * m.detach());
        var.mul_(0.9).add_(0.1 * v.detach());
      }
      return gamma * (x - m) / sqrt(v + 1e-5) + beta;
    }
    return gamma * (x - mean) / (sqrt_forgotten ? var + 1e-5 : sqrt(var + 1e-5)) + beta;
  }
};

// Raw tabular inputs (every feature with a std near 40) normalised by the model's first layer.
struct NormedMlp : nn::Module {
  std::shared_ptr<HandNorm> norm;
  std::shared_ptr<dtest::Mlp> mlp = register_module("mlp", std::make_shared<dtest::Mlp>(6, 3));
  explicit NormedMlp(bool fault) : Module("NormedMlp") {
    norm = register_module("norm", std::make_shared<HandNorm>(6, fault));
  }
  Tensor forward(const Tensor& x) override { return (*mlp)((*norm)(x)); }
};

debug::RunReport normed_run(bool fault) {
  manual_seed(111);
  const dtest::XY all = dtest::blobs(200, 3, 6, 111, 1.5);
  const Tensor scale = full({1, 6}, 30.0);  // raw features with a std near 40
  const Tensor x = all.x * scale;
  const Split d =
      dtest::loaders(x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), x.narrow(0, 480, 120), all.y.narrow(0, 480, 120));
  auto model = std::make_shared<NormedMlp>(fault);
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 8; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = ce((*model)(b.x), b.y);
      l.backward();
      opt.step();
    }
    s.epoch();
  }
  return s.finish();
}

}  // namespace

TEST_CASE("a hand-written normaliser whose eval branch forgets a square root: M2 sees the eval path differ") {
  const debug::RunReport bug = normed_run(true);
  const debug::Finding* m2 = first_of(bug, "M2", debug::Kind::EvalPathDiffers);
  REQUIRE_MESSAGE(m2 != nullptr, bug.str(true));
  CHECK(m2->fires());
  CHECK(dtest::ev(*m2, "eval-mode accuracy") < dtest::ev(*m2, "training-mode accuracy (randomness off)") - 0.2);
  expect_lead(bug, "M2", "eval-path");

  const debug::RunReport clean = normed_run(false);
  CHECK(first_of(clean, "M2", debug::Kind::EvalPathDiffers) == nullptr);
  for (const debug::Finding& f : clean.findings.findings())
    if (f.check != "D5") CHECK_MESSAGE(!f.fires(), f.str());  // raw inputs: D5 may say so; the model scales them
}

namespace {

// A hand-written dropout (p = 0.5) ported from recurrent code: `once` draws its mask (1, H) in the
// constructor and applies it to every batch, so one half of the units never trains and eval mode
// switches it on; as meant, a fresh mask (B, H) at every call.
struct HandDropout : nn::Module {
  bool once;
  Tensor mask;
  HandDropout(int64_t h, bool once) : Module("HandDropout"), once(once) {
    if (once) mask = gt(rand({1, h}), 0.5).to(kFloat32);
  }
  Tensor forward(const Tensor& x) override {
    if (!is_training()) return x;
    return x * (once ? mask : gt(rand(x.shape()), 0.5).to(kFloat32)) * 2.0;
  }
};

struct DroppedMlp : nn::Module {
  std::shared_ptr<nn::Linear> a, b, c;
  std::shared_ptr<HandDropout> da, db;
  explicit DroppedMlp(bool once) : Module("DroppedMlp") {
    a = register_module("a", std::make_shared<nn::Linear>(6, 64));
    da = register_module("da", std::make_shared<HandDropout>(64, once));
    b = register_module("b", std::make_shared<nn::Linear>(64, 64));
    db = register_module("db", std::make_shared<HandDropout>(64, once));
    c = register_module("c", std::make_shared<nn::Linear>(64, 3));
  }
  Tensor forward(const Tensor& x) override { return (*c)((*db)(relu((*b)((*da)(relu((*a)(x))))))); }
};

// The loop reports its own numbers (no validation loader for the session).
debug::RunReport dropped_run(bool once) {
  manual_seed(23);
  const Split d = dtest::split(5, 3.0);
  auto model = std::make_shared<DroppedMlp>(once);
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  debug::Session s(*model, ce, opt, {.train = d.train.get()});
  for (int e = 0; e < 8; ++e) {
    double sum = 0.0;
    int64_t n = 0;
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = ce((*model)(b.x), b.y);
      l.backward();
      opt.step();
      sum += l.item<double>();
      ++n;
    }
    const optim::EvalResult v = optim::evaluate(*model, *d.val);
    s.epoch(sum / static_cast<double>(n), v.loss, v.accuracy);
  }
  return s.finish();
}

}  // namespace

TEST_CASE("a hand-written dropout whose mask is drawn once, no validation loader: M2 sees the eval path differ") {
  const debug::RunReport bug = dropped_run(true);
  const debug::Finding* m2 = first_of(bug, "M2", debug::Kind::EvalPathDiffers);
  REQUIRE_MESSAGE(m2 != nullptr, bug.str(true));
  CHECK(m2->fires());
  CHECK(dtest::ev(*m2, "eval-mode loss on training rows") >
        2.0 * dtest::ev(*m2, "training-mode loss on them (randomness off)"));
  expect_lead(bug, "M2", "eval-path");

  const debug::RunReport clean = dropped_run(false);
  CHECK(first_of(clean, "M2", debug::Kind::EvalPathDiffers) == nullptr);
  expect_clean(clean);
}

namespace {

// Token sequences (length 12, ids < 12) labelled by which third of the vocabulary holds most of them;
// an Elman RNN over them. `carry`: each batch starts from the previous batch's final state (code
// written for one long stream), where the sequences are independent and shuffled.
struct CarriedRnn : nn::Module {
  std::shared_ptr<nn::Embedding> emb = register_module("emb", std::make_shared<nn::Embedding>(12, 8));
  std::shared_ptr<nn::Linear> wx = register_module("wx", std::make_shared<nn::Linear>(8, 24));
  std::shared_ptr<nn::Linear> wh = register_module("wh", std::make_shared<nn::Linear>(24, 24, false));
  std::shared_ptr<nn::Linear> head = register_module("head", std::make_shared<nn::Linear>(24, 3));
  bool carry;
  Tensor last;
  explicit CarriedRnn(bool carry) : Module("CarriedRnn"), carry(carry) {}
  Tensor forward(const Tensor& tokens) override {
    const int64_t B = tokens.size(0);
    const Tensor e = (*emb)(tokens);
    Tensor h = carry && last.defined() && last.size(0) == B ? last : zeros({B, 24});
    for (int64_t t = 0; t < tokens.size(1); ++t) h = tanh((*wx)(e.select(1, t)) + (*wh)(h));
    last = h.detach();
    return (*head)(h);
  }
};

Split token_split(bool shuffle) {
  Generator g(61);
  const Tensor x = randint(0, 12, {800, 12}, kInt64, &g);
  const Tensor low = sum(lt(x, 4).to(kInt64), {1}), high = sum(ge(x, 8).to(kInt64), {1});
  const Tensor counts = stack({low, 12 - low - high, high}, 1);
  const Tensor y = argmax(counts, 1);
  Split s;
  s.train =
      std::make_shared<nn::DataLoader>(std::make_shared<nn::TensorDataset>(x.narrow(0, 0, 640), y.narrow(0, 0, 640)),
                                       nn::DataLoaderOptions().batch_size(32).shuffle(shuffle).seed(5).drop_last(true));
  s.val = std::make_shared<nn::DataLoader>(
      std::make_shared<nn::TensorDataset>(x.narrow(0, 640, 160), y.narrow(0, 640, 160)),
      nn::DataLoaderOptions().batch_size(32).drop_last(true));
  return s;
}

debug::RunReport carried_run(bool carry, bool shuffle) {
  manual_seed(67);
  auto model = std::make_shared<CarriedRnn>(carry);
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  return dtest::train_own_loop(*model, ce, opt, token_split(shuffle), 6);
}

}  // namespace

TEST_CASE(
    "a recurrent state carried across shuffled batches: M2 leads with state-between-calls; a fresh state is clean") {
  const debug::RunReport bug = carried_run(true, true);
  const debug::Finding* m2 = first_of(bug, "M2", debug::Kind::StateBetweenCalls);
  REQUIRE_MESSAGE(m2 != nullptr, bug.str(true));
  CHECK(m2->fires());
  CHECK(dtest::ev(*m2, "training loader shuffles") == 1.0);
  expect_lead(bug, "M2", "state-between-calls");

  const debug::RunReport clean = carried_run(false, true);
  CHECK(first_of(clean, "M2", debug::Kind::StateBetweenCalls) == nullptr);
  expect_clean(clean);

  // The same carry over a loader that keeps its order (truncated backpropagation through time reads
  // one stream so): info.
  const debug::RunReport stream = carried_run(true, false);
  const debug::Finding* kept = first_of(stream, "M2", debug::Kind::StateBetweenCalls);
  REQUIRE_MESSAGE(kept != nullptr, stream.str(true));
  CHECK_FALSE(kept->fires());
}
