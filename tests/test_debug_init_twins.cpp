// Buggy and clean twins, written as a user writes them, for the checks that judge a run's start
// and its data as a whole: M27's gradient spread in the first steps (a layer initialised
// symmetric), D5 on every training row (a few rows left unnormalised), L4's initial outputs
// against the targets (a final layer that starts far from the labels), and W1 on the weights of
// every step (a run that departs from its twin in the weights before the loss shows it).
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gradsleuth.h>

#include "debug/checks/model/run_checks.h"
#include "debug_test_util.h"
#include "diagnosis_test_util.h"
#include "json_mini.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::expect_lead;
using dtest::Split;
using dtest::train_own_loop;

namespace {

// A dense layer of the user's own: a weight and a bias registered by hand (M9 judges nn::Linear
// and nn::Conv2d only, so the gradient spread is what sees this layer's initialisation).
struct Dense : nn::Module {
  Tensor weight, bias;
  // std: He's sqrt(2 / in) for a layer before a ReLU; the head 1 / sqrt(3 in) (the spread of nn::Linear's default).
  Dense(int64_t in, int64_t out, bool constant, double std) : Module("Dense") {
    // The bug: every weight one value ("small and positive, so the ReLUs start alive").
    weight = register_parameter("weight", constant ? full({out, in}, 0.1) : randn({out, in}) * std);
    bias = register_parameter("bias", zeros({out}));
  }
  Tensor forward(const Tensor& x) override { return linear(x, weight, bias); }
};

struct DenseNet : nn::Module {
  std::shared_ptr<Dense> fc1, fc2, fc3;
  explicit DenseNet(bool constant) : Module("DenseNet") {
    fc1 = register_module("fc1", std::make_shared<Dense>(6, 32, constant, std::sqrt(2.0 / 6)));
    fc2 = register_module("fc2", std::make_shared<Dense>(32, 32, constant, std::sqrt(2.0 / 32)));
    fc3 = register_module("fc3", std::make_shared<Dense>(32, 3, false, 1.0 / std::sqrt(3.0 * 32)));
  }
  Tensor forward(const Tensor& x) override { return (*fc3)((*fc2)((*fc1)(x).relu()).relu()); }
};

}  // namespace

TEST_CASE("a hand-written layer initialised to one constant: M27's gradient spread leads with symmetric-init") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<DenseNet>(bug);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "M27", "symmetric-init");
      // fc1: its units get one gradient (fc2, constant too, sends each the same); named, with its spread.
      bool named = false;
      for (const debug::Finding& f : r.findings.findings())
        if (f.check == "M27" && f.fires() && f.parameter == "fc1.weight") {
          named = true;
          CHECK(f.evidence.front().value < 1e-3);
        }
      CHECK_MESSAGE(named, r.str());
    } else {
      expect_clean(r);
      CHECK(r.findings.ran("M27"));
    }
  }
}

TEST_CASE("nn::Linear layers initialised to one constant: M27 leads, not M9's scale nor M3's clipped logits") {
  // init::constant_ where init::normal_ was meant, on every layer, head included, and the biases at 0: the
  // units of a layer stay identical, rows whose hidden units all died give logits of exactly 0, and a
  // weight's std is 0 while its scale is 0.02.
  manual_seed(5);
  const Split d = dtest::split(5, 2.0);
  nn::CrossEntropyLoss ce;
  auto model = std::make_shared<dtest::Mlp>();
  {
    NoGradGuard ng;
    for (const auto& fc : {model->fc1, model->fc2, model->fc3}) {
      nn::init::constant_(fc->weight, 0.02);
      nn::init::zeros_(fc->bias);
    }
  }
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-3));
  const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
  expect_lead(r, "M27", "symmetric-init");
  for (const debug::Finding& f : r.findings.findings()) {
    CAPTURE(f.str());
    CHECK_FALSE((f.check == "M9" && f.fires()));
    CHECK_FALSE((f.check == "M3" && f.fires()));
  }
}

TEST_CASE("constant_ on a weight where its bias was meant: M27 names the constant weight; the bias: clean") {
  // init::constant_(fc1->weight, 0.01) in place of the bias: the biases keep their random draw, so the units
  // differ by their biases alone and the gradient's spread across them is no longer near 0; the weight's one
  // value at the first step says it. The twin sets the bias, as meant.
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    manual_seed(8);
    const Split d = dtest::split(8, 2.0);
    nn::CrossEntropyLoss ce;
    auto model = std::make_shared<dtest::Mlp>();
    {
      NoGradGuard ng;
      nn::init::constant_(bug ? model->fc1->weight : model->fc1->bias, 0.01);
    }
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 3);
    if (bug) {
      expect_lead(r, "M27", "symmetric-init");
      const debug::Finding* f = dtest::first_of(r, "M27", debug::Kind::SymmetricUnits);
      REQUIRE(f != nullptr);
      CHECK(f->parameter == "fc1.weight");
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("M27: embedding biases initialised to zero get sparse gradients (the rows a batch looked up), not one") {
  // A matrix factorisation's user and item biases start at 0, as is usual; each batch reaches only the rows it
  // looks up, so most rows' gradients are exactly 0. Only the rows that got a gradient are compared.
  struct Factorisation : nn::Module {
    std::shared_ptr<nn::Embedding> user = register_module("user", std::make_shared<nn::Embedding>(2000, 4)),
                                   user_bias = register_module("user_bias", std::make_shared<nn::Embedding>(2000, 1));
    Factorisation() : Module("Factorisation") { nn::init::zeros_(user_bias->weight); }
    Tensor forward(const Tensor& u) override { return (*user)(u).sum({1}, true) + (*user_bias)(u); }
  };
  manual_seed(3);
  auto model = std::make_shared<Factorisation>();
  const Tensor ids = randint(0, 2000, {64}), target = randn({64, 1});
  debug::GradientSpreadTracker spread;
  for (int64_t step = 1; step <= 10; ++step) {
    model->zero_grad();
    nn::functional::mse_loss((*model)(ids), target).backward();
    spread.record(*model, step);
  }
  for (const debug::Finding& f : spread.findings()) CHECK_MESSAGE(!f.fires(), f.str());
  // A dense layer of one constant, whose every unit gets the same gradient: flagged.
  struct Dense : nn::Module {
    std::shared_ptr<nn::Linear> fc = register_module("fc", std::make_shared<nn::Linear>(8, 16));
    Dense() : Module("Dense") {
      nn::init::constant_(fc->weight, 0.1);
      nn::init::zeros_(fc->bias);
    }
    Tensor forward(const Tensor& x) override { return (*fc)(x); }
  };
  auto dense = std::make_shared<Dense>();
  debug::GradientSpreadTracker same;
  const Tensor x = randn({32, 8});
  for (int64_t step = 1; step <= 10; ++step) {
    dense->zero_grad();
    nn::functional::mse_loss((*dense)(x), randn({32, 16}).mean({1}, true).expand({32, 16})).backward();
    same.record(*dense, step);
  }
  bool flagged = false;
  for (const debug::Finding& f : same.findings()) flagged = flagged || (f.fires() && f.parameter == "fc.weight");
  CHECK(flagged);
}

// ---- D5 on every training row ------------------------------------------------------------

namespace {

struct Mlp : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 3));
  Mlp() : Module("Mlp") {}
  Tensor forward(const Tensor& x) override { return (*fc2)((*fc1)(x).relu()); }
};

}  // namespace

TEST_CASE("two rows of 3200 that skipped the scaling: D5 on every row finds them where sampled batches do not") {
  manual_seed(4);
  // 3200 training rows from one pipeline; the user merged in rows of a second source, and two of
  // them came from a code path that returned before scaling (x 255).
  const dtest::XY all = dtest::blobs(1100, 3, 6, 3, 2.0);
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    Tensor x = all.x.clone();
    if (bug)
      for (const int64_t row : {1234, 2718}) {
        NoGradGuard ng;
        x.narrow(0, row, 1).mul_(255.0);
      }
    const Split d = dtest::loaders(x.narrow(0, 0, 3200), all.y.narrow(0, 0, 3200), x.narrow(0, 3200, 100),
                                   all.y.narrow(0, 3200, 100));
    auto model = std::make_shared<Mlp>();
    nn::CrossEntropyLoss ce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 1);
    if (bug) {
      // The data checks sample 20 of the 100 batches: neither row is in them.
      CHECK_MESSAGE(!r.phases.front().findings.fired("D5"), r.str());
      expect_lead(r, "D5", "unscaled-inputs");
      bool rows = false;
      for (const debug::Finding& f : r.findings.findings())
        if (f.check == "D5" && f.fires() &&
            f.title.find("training rows of epoch 1 are out of range") != std::string::npos) {
          rows = true;
          CHECK(f.evidence.front().value == 2);  // both rows, and only them
          CHECK(f.evidence[1].value == 3200);    // every row was judged
        }
      CHECK_MESSAGE(rows, r.str());
    } else {
      expect_clean(r);
      CHECK(r.findings.ran("D5"));
    }
  }
}

// ---- L4: the final layer's start against the targets --------------------------------------

TEST_CASE("a final bias copied from another dataset's class priors: L4's initial outputs lead with output-init") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);  // three balanced classes
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<Mlp>();
    if (bug) {
      // "start from the priors": the log frequencies of the dataset the code came from (90/5/5)
      NoGradGuard ng;
      model->fc2->bias.copy_(tensor(std::vector<float>{std::log(0.9f), std::log(0.05f), std::log(0.05f)}, {3}));
    }
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 6);  // to convergence (L9)
    if (bug) {
      expect_lead(r, "L4", "output-init", {"L4"});  // the initial loss (2x log 3) hangs under it
    } else {
      expect_clean(r);
    }
  }
}

namespace {

// y = x . w + 50 + noise: a regression whose targets sit far from 0.
Split regression(uint64_t seed) {
  Generator g(seed);
  const Tensor x = randn({600, 6}, {}, &g);
  const Tensor w = tensor(std::vector<float>{1.0f, -2.0f, 0.5f, 1.5f, -1.0f, 0.8f}, {6, 1});
  const Tensor y = matmul(x, w) + 50.0 + randn({600, 1}, {}, &g) * 0.1;
  return dtest::loaders(x.narrow(0, 0, 480), y.narrow(0, 0, 480), x.narrow(0, 480, 120), y.narrow(0, 480, 120), seed);
}

struct Regressor : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 1));
  Regressor() : Module("Regressor") {}
  Tensor forward(const Tensor& x) override { return (*fc2)((*fc1)(x).relu()); }
};

}  // namespace

TEST_CASE("a regression onto targets near 50 with the final bias at 0: L4's initial outputs lead with output-init") {
  manual_seed(4);
  const Split d = regression(5);
  nn::MSELoss mse;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<Regressor>();
    if (!bug) {
      // Karpathy's fix: the final bias starts at the targets' mean.
      NoGradGuard ng;
      double mean = 0.0;
      int64_t n = 0;
      for (const nn::Batch& b : *d.train) {
        mean += sum(b.y.to(kFloat64)).item<double>();
        n += b.y.numel();
      }
      model->fc2->bias.fill_(mean / static_cast<double>(n));
    }
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, mse, opt, d, 6);  // to convergence (L9)
    if (bug) {
      expect_lead(r, "L4", "output-init");
    } else {
      expect_clean(r);
      CHECK(r.findings.ran("L4"));
    }
  }
}

// ---- W1 step by step -----------------------------------------------------------------------

TEST_CASE(
    "gradient noise from std::random_device after a warm-up: W1 names the step and parameter where the runs part, a "
    "step before the losses") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  nn::CrossEntropyLoss ce;
  // The user's short run for W1: a new model, optimizer and noise source from the seed; 6 steps,
  // with gradient noise (a regulariser) from step 3 on; it records every step's fingerprints.
  auto rerun = [&](bool unseeded) {
    return [&d, &ce, unseeded](uint64_t seed) {
      manual_seed(seed);
      auto m = std::make_shared<Mlp>();
      optim::SGD opt(m->parameters(), optim::SGDOptions(0.05));
      debug::StepRecorder rec(*m, opt);
      std::random_device rd;
      std::mt19937 noise_source(unseeded ? rd() : static_cast<uint32_t>(seed));  // the bug: rd()
      std::normal_distribution<float> noise(0.0f, 1e-3f);
      debug::ReproRun run;
      for (int64_t i = 0; i < 6; ++i) {
        const nn::Batch b = d.train->batch(0, i);
        opt.zero_grad();
        Tensor l = ce((*m)(b.x), b.y);
        l.backward();
        if (i >= 2) {
          NoGradGuard ng;
          for (Tensor& p : m->parameters()) {
            std::vector<float> e(static_cast<size_t>(p.numel()));
            for (float& v : e) v = noise(noise_source);
            p.grad().add_(tensor(e, p.shape()));
          }
        }
        opt.step();
        run.losses.push_back(l.item<double>());
      }
      run.model = m;
      run.steps = rec.fingerprints();
      return run;
    };
  };
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    debug::DiagnoseOptions o;
    o.rerun_model = rerun(bug);
    auto model = std::make_shared<Mlp>();
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.05));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2, o);
    REQUIRE(r.findings.ran("W1"));
    if (bug) {
      expect_lead(r, "W1", "nondeterminism");
      const debug::Finding* f = nullptr;
      for (const debug::Finding& g : r.findings.findings())
        if (g.check == "W1" && g.fires()) f = &g;
      REQUIRE(f != nullptr);
      INFO(f->str());
      // The gradient of the first parameter parts at step 3; the losses only at step 4.
      CHECK(f->title.find("part at step 3: the gradient of fc1.weight differs, 1 step before the losses (step 4)") !=
            std::string::npos);
      CHECK(f->parameter == "fc1.weight");
    } else {
      expect_clean(r);
      bool said = false;
      for (const debug::Finding& g : r.findings.findings())
        said = said || (g.check == "W1" &&
                        g.title.find("identical weights and gradients at every one of 6 steps") != std::string::npos);
      CHECK_MESSAGE(said, r.str());
    }
  }
}

TEST_CASE("W1 step by step names the moment: weights written between steps, and a forward that alone differs") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  nn::CrossEntropyLoss ce;
  // kind 0: after step 2's update the loop nudges fc2.weight by a draw that differs from run to run
  // (one value added to every weight of the head: every logit moves by the same amount, which
  // the softmax ignores, so the losses agree, to rounding, while the weights do not);
  // kind 1: an unseeded input augmentation (the forward alone differs; weights and gradients of
  // step 1 are what the forward made of them, so the gradient parts at the same step as the loss).
  auto run_of = [&](int kind) {
    return [&d, &ce, kind](uint64_t seed) {
      manual_seed(seed);
      auto m = std::make_shared<Mlp>();
      optim::SGD opt(m->parameters(), optim::SGDOptions(0.05));
      debug::StepRecorder rec(*m, opt);
      // Each run draws another shift, as an unseeded source would; a counter keeps the test's own
      // outcome the same from one test run to the next.
      static uint32_t draws = 0;
      std::mt19937 src(++draws);
      std::uniform_real_distribution<float> u(-1e-3f, 1e-3f);
      debug::ReproRun run;
      for (int64_t i = 0; i < 4; ++i) {
        const nn::Batch b = d.train->batch(0, i);
        Tensor x = b.x;
        if (kind == 1 && i == 1) x = x + static_cast<double>(u(src));
        opt.zero_grad();
        Tensor l = ce((*m)(x), b.y);
        l.backward();
        opt.step();
        if (kind == 0 && i == 1) {
          NoGradGuard ng;
          m->fc2->weight.add_(static_cast<double>(u(src)));
        }
        run.losses.push_back(l.item<double>());
      }
      run.model = m;
      run.steps = rec.fingerprints();
      return run;
    };
  };
  SUBCASE("weights written between steps that the loss cannot see") {
    const std::vector<debug::Finding> f = debug::check_reproducible(run_of(0), 1);
    REQUIRE(f.size() == 1);
    INFO(f[0].str());
    CHECK(f[0].severity == debug::Severity::Error);
    // The losses agree bit for bit for most draws; a shift can round differently in the last bit,
    // and then they part at this same step or, through the next step's gradients, a later one
    // (the softmax ignores the shift only up to rounding, which depends on the CPU's kernels):
    // the weights are named first either way.
    CHECK(f[0].title.find("part at step 3: the weight before the step's forward of fc2.weight differs") !=
          std::string::npos);
    CHECK((f[0].title.find("though the losses agree at every step") != std::string::npos ||
           f[0].title.find("at the step the losses part") != std::string::npos ||
           f[0].title.find("before the losses (step ") != std::string::npos));
    CHECK(f[0].cause.find("outside the optimizer") != std::string::npos);
  }
  SUBCASE("an unseeded augmentation: the step's gradient parts with its loss") {
    const std::vector<debug::Finding> f = debug::check_reproducible(run_of(1), 1);
    REQUIRE(f.size() == 1);
    INFO(f[0].str());
    CHECK(f[0].title.find("part at step 2: the gradient of fc1.weight differs, at the step the losses part") !=
          std::string::npos);
  }
}

TEST_CASE(
    "D5's row tracker: silent on standardised and [0, 1] data of many rows, exact on a few rows, bounded on many") {
  Generator g(7);
  SUBCASE("standardised Gaussian rows and [0, 1] pixels: silent") {
    for (const bool pixels : {false, true}) {
      debug::RowRangeTracker t;
      for (int64_t step = 1; step <= 200; ++step) {
        const Tensor x = pixels ? rand({64, 784}, {}, &g) : randn({64, 784}, {}, &g);
        t.record(x, step);
        if (step % 50 == 0) t.end_epoch();
      }
      CHECK(t.findings().empty());
      CHECK(t.rows_seen() == 200 * 64);
    }
  }
  SUBCASE("three rows of 12800 raw: named with the step of the largest") {
    debug::RowRangeTracker t;
    for (int64_t step = 1; step <= 200; ++step) {
      Tensor x = rand({64, 784}, {}, &g);
      if (step == 17 || step == 90 || step == 91) {
        NoGradGuard ng;
        x.narrow(0, 5, 1).mul_(step == 90 ? 300.0 : 255.0);
      }
      t.record(x, step);
    }
    const std::vector<debug::Finding> f = t.findings();
    REQUIRE(f.size() == 1);
    INFO(f[0].str());
    CHECK(f[0].evidence[0].value == 3);
    CHECK(f[0].step == 90);
    CHECK(f[0].evidence[5].value == 5);
  }
  SUBCASE("a fifth of the rows raw: at least 64 (memory stays bounded)") {
    debug::RowRangeTracker t;
    for (int64_t step = 1; step <= 50; ++step) {
      Tensor x = rand({64, 784}, {}, &g);
      NoGradGuard ng;
      x.narrow(0, 0, 13).mul_(255.0);
      t.record(x, step);
    }
    const std::vector<debug::Finding> f = t.findings();
    REQUIRE(f.size() == 1);
    CHECK(f[0].title.rfind("at least 64 of the 3200 training rows", 0) == 0);
  }
}
