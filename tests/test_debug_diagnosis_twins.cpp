// The diagnosis (debug/diagnosis/diagnosis.h) on more bugs written as a user writes them: for each fault
// cause whose check runs inside debug::Session / debug::diagnose() on one process, a buggy twin
// whose lead (as lead_json() gives it to the user) must be that cause, confirmed by its own
// check, with the symptoms the bug sets off hanging under it, and a clean twin (the same code
// with the bug removed) that must stay silent.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <gradsleuth.h>

#include "debug/corpus/corpus.h"
#include "debug/corpus/operators.h"
#include "debug_test_util.h"
#include "diagnosis_test_util.h"
#include "json_mini.h"

using namespace gradsleuth;
using dtest::blobs;
using dtest::expect_clean;
using dtest::expect_lead;
using dtest::explained_checks;
using dtest::lead_of;
using dtest::loaders;
using dtest::Mlp;
using dtest::Split;
using dtest::strings;
using dtest::train_own_loop;

namespace {

// ---- the helpers of test_debug_diagnosis.cpp ---------------------------------------------

// The first 480 rows for training, the next 120 for validation.
Split split_rows(const Tensor& x, const Tensor& y) {
  return loaders(x.narrow(0, 0, 480), y.narrow(0, 0, 480), x.narrow(0, 480, 120), y.narrow(0, 480, 120));
}

// Gaussian blobs in 6 dimensions that overlap a little, so that a healthy model does not drive
// its loss to 0 in two epochs.
constexpr double kSpread = 2.0;
dtest::XY data(int64_t n_per_class, int64_t classes = 3) { return blobs(n_per_class, classes, 6, 3, kSpread); }

// Three blobs that overlap a little: 480 training rows, 120 validation rows.
Split split(uint64_t seed = 3) { return dtest::split(seed, kSpread); }

debug::DiagnoseOptions classes(int64_t c) {
  debug::DiagnoseOptions o;
  o.num_classes = c;
  return o;
}

}  // namespace

// ---- the graph and the parameters ---------------------------------------------------------

// The features of the first layer detached "to save memory": fc1 never gets a gradient.
struct DetachNet : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::ReLU> act1 = register_module("act1", std::make_shared<nn::ReLU>());
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 32));
  std::shared_ptr<nn::ReLU> act2 = register_module("act2", std::make_shared<nn::ReLU>());
  std::shared_ptr<nn::Linear> fc3 = register_module("fc3", std::make_shared<nn::Linear>(32, 3));
  bool detach;
  explicit DetachNet(bool d) : Module("DetachNet"), detach(d) {}
  Tensor forward(const Tensor& x) override {
    Tensor h = (*act1)((*fc1)(x));
    if (detach) h = h.detach();  // the bug
    return (*fc3)((*act2)((*fc2)(h)));
  }
};

TEST_CASE("a .detach() inside the user's forward: M5 leads with cut-graph") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<DetachNet>(bug);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "M5", "cut-graph", {"O1"});  // fc1 gets no gradient
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("requires_grad turned off on the head instead of the first layer, the optimizer holding it: M10 leads") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<Mlp>();
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    if (bug) {
      // meant to fine-tune the head: froze it instead, and the optimizer still holds it
      model->fc3->weight.requires_grad_(false);
      model->fc3->bias.requires_grad_(false);
    }
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "M10", "frozen");
    } else {
      expect_clean(r);
    }
  }
}

// One hidden Linear instance registered twice and applied twice (meant: two layers).
struct SharedNet : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::Linear> fc2, fc3;
  std::shared_ptr<nn::Linear> head = register_module("head", std::make_shared<nn::Linear>(32, 3));
  explicit SharedNet(bool shared) : Module("SharedNet") {
    auto hidden = std::make_shared<nn::Linear>(32, 32);
    fc2 = register_module("fc2", hidden);
    fc3 = register_module("fc3", shared ? hidden : std::make_shared<nn::Linear>(32, 32));  // the bug: `hidden` again
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*fc1)(x).relu();
    h = (*fc2)(h).relu();
    h = (*fc3)(h).relu();
    return (*head)(h);
  }
};

TEST_CASE("one Linear instance used for two layers: M4 leads with shared-weights") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<SharedNet>(bug);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "M4", "shared-weights");
    } else {
      expect_clean(r);
    }
  }
}

// A wide hidden layer whose weights the user drew with std 1 (torch.randn style).
struct WideNet : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 256));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(256, 256));
  std::shared_ptr<nn::Linear> fc3 = register_module("fc3", std::make_shared<nn::Linear>(256, 3));
  explicit WideNet(bool randn_init) : Module("WideNet") {
    if (randn_init) nn::init::normal_(fc2->weight, 0.0, 1.0);  // the bug: no 1/sqrt(fan_in)
  }
  Tensor forward(const Tensor& x) override { return (*fc3)((*fc2)((*fc1)(x).relu()).relu()); }
};

TEST_CASE("a wide Linear initialised with std 1: M9 leads with bad-init") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<WideNet>(bug);
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.05));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "M9", "bad-init", {"L4", "O1", "L1"});
    } else {
      expect_clean(r);
    }
  }
}

// ---- the output and the loss --------------------------------------------------------------

// The classifier ends in a ReLU after its last Linear.
struct ReluHeadNet : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::ReLU> act1 = register_module("act1", std::make_shared<nn::ReLU>());
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 3));
  std::shared_ptr<nn::ReLU> out_act;
  explicit ReluHeadNet(bool relu_out) : Module("ReluHeadNet") {
    if (relu_out) out_act = register_module("out_act", std::make_shared<nn::ReLU>());  // the bug
  }
  Tensor forward(const Tensor& x) override {
    Tensor logits = (*fc2)((*act1)((*fc1)(x)));
    return out_act ? (*out_act)(logits) : logits;  // the bug: a ReLU on the logits
  }
};

TEST_CASE("a ReLU after the last Linear: M3 leads with final-activation") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<ReluHeadNet>(bug);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "M3", "final-activation", {"M14"});
    } else {
      expect_clean(r);
    }
  }
}

// One ReLU module, registered after the output layer and called between the others (the registration
// order puts it last; the forward does not): out(act(fc2(act(fc1(x))))). The twin also calls it on the
// output: out then passes a ReLU.
struct SharedReluNet : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 32));
  std::shared_ptr<nn::Linear> out = register_module("out", std::make_shared<nn::Linear>(32, 3));
  std::shared_ptr<nn::ReLU> act = register_module("act", std::make_shared<nn::ReLU>());
  bool relu_last;
  explicit SharedReluNet(bool r) : Module("SharedReluNet"), relu_last(r) {}
  Tensor forward(const Tensor& x) override {
    const Tensor z = (*out)((*act)((*fc2)((*act)((*fc1)(x)))));
    return relu_last ? (*act)(z) : z;
  }
};

TEST_CASE("M3 judges the last layer the forward calls: a shared ReLU registered after the output is not it") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<SharedReluNet>(bug);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "M3", "final-activation");
    } else {
      expect_clean(r);
    }
  }
  // And the gate, given the batch.
  auto healthy = std::make_shared<SharedReluNet>(false), relu_head = std::make_shared<SharedReluNet>(true);
  const nn::Batch b = *d.train->begin();
  const auto fires = [](const std::vector<debug::Finding>& fs) {
    return std::any_of(fs.begin(), fs.end(), [](const debug::Finding& f) { return f.fires(); });
  };
  CHECK_FALSE(fires(debug::check_final_activation(*healthy, Tensor(), {}, "CrossEntropyLoss", b.y, b.x)));
  CHECK(fires(debug::check_final_activation(*relu_head, Tensor(), {}, "CrossEntropyLoss", b.y, b.x)));
  // Without a batch the registration order is all there is.
  CHECK(fires(debug::check_final_activation(*healthy, Tensor(), {}, "CrossEntropyLoss", b.y)));
}

// The forward returns probabilities, and the loss is nn::CrossEntropyLoss (a second softmax).
struct SoftmaxNet : nn::Module {
  std::shared_ptr<Mlp> body = register_module("body", std::make_shared<Mlp>());
  bool softmax;
  explicit SoftmaxNet(bool s) : Module("SoftmaxNet"), softmax(s) {}
  Tensor forward(const Tensor& x) override {
    Tensor logits = (*body)(x);
    return softmax ? logits.softmax(1) : logits;  // the bug
  }
};

TEST_CASE("softmax in forward, then nn::CrossEntropyLoss: L2 leads with double-softmax") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<SoftmaxNet>(bug);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "L2", "double-softmax", {"M14"});
    } else {
      expect_clean(r);
    }
  }
}

// A binary classifier: one output per row; the clean one squashes it with a sigmoid.
struct BinaryNet : nn::Module {
  std::shared_ptr<Mlp> body = register_module("body", std::make_shared<Mlp>(6, 1));
  bool sigmoid;
  explicit BinaryNet(bool s) : Module("BinaryNet"), sigmoid(s) {}
  Tensor forward(const Tensor& x) override {
    Tensor logit = (*body)(x);
    return sigmoid ? logit.sigmoid() : logit;
  }
};

namespace {
debug::RunReport run_bce(bool bug) {
  manual_seed(4);
  const dtest::XY all = blobs(300, 2, 6, 3, 2 * kSpread);                         // two classes that overlap
  const Tensor x = (all.x - all.x.mean({0}, true)) / all.x.std({0}, true, true);  // standardised
  const Tensor y = all.y.to(kFloat32).unsqueeze(1);                               // (B, 1) in {0, 1}
  const Split d = split_rows(x, y);
  nn::BCELoss bce;
  auto model = std::make_shared<BinaryNet>(!bug);  // the bug: the sigmoid was left out
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  return train_own_loop(*model, bce, opt, d, 3, classes(2));
}
}  // namespace

// BCELoss raises on the logits, so the pre-training gate's loss phase fails (W2); L3 names the
// cause of that very error, and the gate's error hangs under it.
TEST_CASE("nn::BCELoss fed raw logits: L3 leads with bce-logits, the gate's failed loss under it") {
  const debug::RunReport r = run_bce(true);
  expect_lead(r, "L3", "bce-logits", {"W2"});
}

TEST_CASE("nn::BCELoss fed the sigmoid's probabilities: the clean twin stays silent") { expect_clean(run_bce(false)); }

// A regression: the model predicts (B, 1).
TEST_CASE("an MSE regression with output (B, 1) and target (B,): D6 leads with label-shape, M19 under it") {
  manual_seed(4);
  const dtest::XY all = data(200, 3);
  Tensor w = randn({6, 1});
  const Tensor target = all.x.matmul(w) * 0.5;  // (N, 1)
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    // the bug: the targets were squeezed to (N,) while the model predicts (N, 1)
    const Tensor y = bug ? target.squeeze(1) : target;
    const Split d = split_rows(all.x, y);
    auto model = std::make_shared<Mlp>(6, 1);
    nn::MSELoss mse(nn::MSELossOptions().allow_broadcast(true));  // ported from PyTorch, which broadcasts
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, mse, opt, d, 6);  // to convergence (L9)
    if (bug) {
      expect_lead(r, "D6", "label-shape", {"M19", "M14"});
    } else {
      expect_clean(r);
    }
  }
}

// The log-probabilities written by hand as log(softmax(x)) in their own module; the head's
// weights drawn large (the user's init) push the logits far enough apart that softmax underflows
// to 0 in float32 and the log gives -Inf.
struct LogOfSoftmax : nn::Module {
  bool stable;
  explicit LogOfSoftmax(bool s) : Module("LogOfSoftmax"), stable(s) {}
  Tensor forward(const Tensor& x) override { return stable ? x.log_softmax(1) : x.softmax(1).log(); }
};
struct LogProbNet : nn::Module {
  std::shared_ptr<Mlp> body = register_module("body", std::make_shared<Mlp>());
  std::shared_ptr<LogOfSoftmax> logp;
  LogProbNet(bool stable, bool large_head) : Module("LogProbNet") {
    logp = register_module("logp", std::make_shared<LogOfSoftmax>(stable));
    if (large_head) nn::init::normal_(body->fc3->weight, 0.0, 30.0);
  }
  Tensor forward(const Tensor& x) override { return (*logp)((*body)(x)); }
};

// The gate's M12 and the monitor's W4 see the same module at different times: one fault, one root.
TEST_CASE("a hand-written log(softmax(x)) that underflows: W4 names the op, M12 the module; nonfinite-op leads") {
  manual_seed(4);
  const Split d = split();
  nn::NLLLoss nll;
  // the bug: log(softmax(x)), with large head weights
  auto model = std::make_shared<LogProbNet>(false, true);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.01));
  const debug::RunReport r = train_own_loop(*model, nll, opt, d, 1);
  // The gate's M12 saw the module first and leads; anomaly mode (W4) then named the op ('log') in
  // the same module: both confirm one fault.
  expect_lead(r, "M12", "nonfinite-op", {"L1", "O1", "O4"});
  const std::vector<std::string> by = strings(lead_of(r).get("confirmed_by"));
  CHECK_MESSAGE(std::find(by.begin(), by.end(), "W4") != by.end(), r.str());
  const debug::Finding* m12 = dtest::find(r.findings.findings(), "M12");
  REQUIRE(m12 != nullptr);
  CHECK(m12->module.find("logp (LogOfSoftmax)") == 0);
}

TEST_CASE("log_softmax instead of log(softmax(x)), the layer's own initialisation: the clean twin stays silent") {
  manual_seed(4);
  const Split d = split();
  nn::NLLLoss nll;
  auto model = std::make_shared<LogProbNet>(true, false);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1));
  expect_clean(train_own_loop(*model, nll, opt, d, 2));
}

// Centres the hidden features: meant over the features of each row (dim 1), written over the
// batch (dim 0), so every output row depends on every input row.
struct CentredNet : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 3));
  int64_t dim;
  explicit CentredNet(int64_t d) : Module("CentredNet"), dim(d) {}
  Tensor forward(const Tensor& x) override {
    Tensor h = (*fc1)(x);
    h = h - h.mean({dim}, true);
    return (*fc2)(h.relu());
  }
};

TEST_CASE("a mean over dim 0 in the user's forward: M6 leads with batch-mixing") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<CentredNet>(bug ? 0 : 1);  // the bug: dim 0
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "M6", "batch-mixing");
    } else {
      expect_clean(r);
    }
  }
}

// A first layer written by hand as W x with the examples as columns: x (B, 6) is turned into
// (6, B) with a reshape where a transpose was meant, so each column mixes several examples.
struct ColumnNet : nn::Module {
  Tensor weight, bias;
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 3));
  bool reshape_bug;
  explicit ColumnNet(bool bug) : Module("ColumnNet"), reshape_bug(bug) {
    weight = register_parameter("weight", zeros({32, 6}));
    bias = register_parameter("bias", zeros({32}));
    nn::init::default_linear_init_(weight, bias);
  }
  Tensor forward(const Tensor& x) override {
    const Tensor cols = reshape_bug ? x.reshape({x.size(1), x.size(0)}) : x.t();  // the bug: reshape
    const Tensor h = weight.matmul(cols).t() + bias;                              // (B, 32)
    return (*fc2)(h.relu());
  }
};

TEST_CASE("a reshape where a transpose was meant in the user's forward: M6 leads with batch-mixing") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<ColumnNet>(bug);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "M6", "batch-mixing");
    } else {
      expect_clean(r);
    }
  }
}

// A sigmoid layer whose output the user rescales to [-1, 1] in place: sigmoid saved it for backward.
struct InplaceNet : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 3));
  bool inplace;
  explicit InplaceNet(bool i) : Module("InplaceNet"), inplace(i) {}
  Tensor forward(const Tensor& x) override {
    Tensor s = (*fc1)(x).sigmoid();
    if (inplace) {
      s.mul_(2.0).sub_(1.0);  // the bug: in place on sigmoid's saved output
    } else {
      s = s * 2.0 - 1.0;
    }
    return (*fc2)(s);
  }
};

TEST_CASE("an in-place op on a tensor saved for backward: M20 leads with inplace") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<InplaceNet>(bug);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    debug::Session dbg(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    try {
      for (int e = 0; e < 2; ++e) {
        for (const nn::Batch& b : *d.train) {
          opt.zero_grad();
          Tensor l = ce((*model)(b.x), b.y);
          l.backward();
          opt.step();
        }
        dbg.epoch();
      }
    } catch (const std::exception& ex) {
      dbg.error(ex);
    }
    const debug::RunReport r = dbg.finish();
    if (bug) {
      expect_lead(r, "M20", "inplace");
    } else {
      expect_clean(r);
    }
  }
}

// ---- BatchNorm and the loop ---------------------------------------------------------------

// A BatchNorm1d built without running statistics, then evaluated in eval mode.
struct BnNet : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::BatchNorm1d> bn;
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 3));
  explicit BnNet(bool track) : Module("BnNet") {
    bn = register_module("bn", std::make_shared<nn::BatchNorm1d>(nn::BatchNormOptions(32).track_running_stats(track)));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)((*bn)((*fc1)(x)).relu()); }
};

TEST_CASE("nn::BatchNorm1d with track_running_stats off, evaluated in eval mode: M17 leads with batchnorm-stats") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<BnNet>(!bug);  // the bug: track_running_stats(false)
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    debug::Session dbg(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 2; ++e) {
      model->train();
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        Tensor l = ce((*model)(b.x), b.y);
        l.backward();
        opt.step();
      }
      model->eval();
      dbg.epoch();  // evaluates on val in eval mode
    }
    const debug::RunReport r = dbg.finish();
    if (bug) {
      expect_lead(r, "M17", "batchnorm-stats", {"M6"});
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("no zero_grad in the loop: O5 leads with zero-grad") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<Mlp>();
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.05));
    debug::Session dbg(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 4; ++e) {  // to convergence (L9)
      for (const nn::Batch& b : *d.train) {
        if (!bug) opt.zero_grad();  // the bug: never called
        Tensor l = ce((*model)(b.x), b.y);
        l.backward();
        opt.step();
      }
      dbg.epoch();
    }
    const debug::RunReport r = dbg.finish();
    if (bug) {
      expect_lead(r, "O5", "zero-grad", {"L1"});
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("float64 inputs into a float32 model: M11 leads with dtype-device") {
  manual_seed(4);
  const dtest::XY all = data(200, 3);
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    const Tensor x = bug ? all.x.to(kFloat64) : all.x;  // the bug: the features were loaded as double
    const Split d = split_rows(x, all.y);
    auto model = std::make_shared<Mlp>();
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "M11", "dtype-device");
    } else {
      expect_clean(r);
    }
  }
}

// ---- the data -----------------------------------------------------------------------------

// The rows whose label passes `keep`, as a user would select them.
Tensor rows_where(const Tensor& y, bool (*keep)(int64_t)) {
  std::vector<int64_t> idx;
  const Tensor yc = y.contiguous();
  const int64_t* p = yc.data_ptr<int64_t>();
  for (int64_t i = 0; i < yc.numel(); ++i)
    if (keep(p[i])) idx.push_back(i);
  return tensor(idx, {static_cast<int64_t>(idx.size())});
}
// Each label replaced by the next class (mod C).
Tensor next_class(const Tensor& y, int64_t C) {
  std::vector<int64_t> v;
  const Tensor yc = y.contiguous();
  const int64_t* p = yc.data_ptr<int64_t>();
  for (int64_t i = 0; i < yc.numel(); ++i) v.push_back((p[i] + 1) % C);
  return tensor(v, {yc.numel()});
}
// Each label plus one.
Tensor plus_one(const Tensor& y) {
  std::vector<int64_t> v;
  const Tensor yc = y.contiguous();
  const int64_t* p = yc.data_ptr<int64_t>();
  for (int64_t i = 0; i < yc.numel(); ++i) v.push_back(p[i] + 1);
  return tensor(v, {yc.numel()});
}

TEST_CASE("inputs permuted without their labels: D4 leads with misaligned-labels") {
  manual_seed(4);
  const dtest::XY all = data(200, 3);
  const Tensor xtr = all.x.narrow(0, 0, 480), ytr = all.y.narrow(0, 0, 480);
  const nn::TensorDataset as_loaded(xtr, ytr, "train");
  Generator g(11);
  const Tensor p = randperm(480, &g);
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    // the bug: x reordered, y left as it was
    const Tensor y = bug ? ytr : ytr.index_select(0, p);
    nn::DataLoader train(std::make_shared<nn::TensorDataset>(xtr.index_select(0, p), y, "train"),
                         nn::DataLoaderOptions().batch_size(32).shuffle(true).seed(3));
    nn::DataLoader val(std::make_shared<nn::TensorDataset>(all.x.narrow(0, 480, 120), all.y.narrow(0, 480, 120)),
                       nn::DataLoaderOptions().batch_size(120));
    auto model = std::make_shared<Mlp>();
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    debug::Session dbg(*model, ce, opt, {.train = &train, .val = &val, .reference = &as_loaded});
    for (int e = 0; e < 2; ++e) {
      for (const nn::Batch& b : train) {
        opt.zero_grad();
        Tensor l = ce((*model)(b.x), b.y);
        l.backward();
        opt.step();
      }
      dbg.epoch();
    }
    const debug::RunReport r = dbg.finish();
    if (bug) {
      expect_lead(r, "D4", "misaligned-labels");
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("labels numbered 1..C: D9 leads with label-encoding") {
  manual_seed(4);
  const dtest::XY all = data(200, 3);
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    // the bug: the class ids read from a file that numbers them from 1, and a model widened to 4
    // outputs "so that label 3 fits"
    const Tensor y = bug ? plus_one(all.y) : all.y;
    const int64_t outputs = bug ? 4 : 3;
    const Split d = split_rows(all.x, y);
    auto model = std::make_shared<Mlp>(6, outputs);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "D9", "label-encoding", {"D3"});  // class 0 never occurs
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("inputs left in 0..255: D5 leads with unscaled-inputs") {
  manual_seed(4);
  const dtest::XY all = data(200, 3);
  // The features as stored: intensities in 0..255.
  const Tensor pixels = ((all.x + 4.0) * 25.0).clamp(0.0, 255.0);
  const Tensor tr = pixels.narrow(0, 0, 480);
  const Tensor mean = tr.mean({0}, true), sd = tr.std({0}, true, true);
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    const Tensor x = bug ? pixels : (pixels - mean) / sd;  // the bug: never standardised
    const Split d = split_rows(x, all.y);
    auto model = std::make_shared<Mlp>();
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.3));  // a rate that trains the clean twin in 2 epochs (L9)
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "D5", "unscaled-inputs", {"L1", "O1"});
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("a class filtered out of the data: D3 leads with class-imbalance") {
  manual_seed(4);
  const dtest::XY all = data(300, 3);
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    // the bug: a filter meant to drop bad rows drops every row of class 2
    const Tensor keep =
        bug ? rows_where(all.y, [](int64_t c) { return c != 2; }) : rows_where(all.y, [](int64_t) { return true; });
    const Tensor x = all.x.index_select(0, keep), y = all.y.index_select(0, keep);
    const int64_t n = x.size(0), ntr = n * 4 / 5;
    const Split d =
        loaders(x.narrow(0, 0, ntr), y.narrow(0, 0, ntr), x.narrow(0, ntr, n - ntr), y.narrow(0, ntr, n - ntr));
    auto model = std::make_shared<Mlp>();
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2, classes(3));
    if (bug) {
      expect_lead(r, "D3", "class-imbalance");
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("rows appended again with flipped labels: D12 leads with conflicting-labels") {
  manual_seed(4);
  const dtest::XY all = data(200, 3);
  const Tensor xtr = all.x.narrow(0, 0, 480), ytr = all.y.narrow(0, 0, 480);
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    // the bug: a second label file merged in, its first 60 rows labelled with the next class
    const Tensor x = bug ? cat({xtr, xtr.narrow(0, 0, 60)}) : xtr;
    const Tensor y = bug ? cat({ytr, next_class(ytr.narrow(0, 0, 60), 3)}) : ytr;
    const Split d = loaders(x, y, all.x.narrow(0, 480, 120), all.y.narrow(0, 480, 120));
    auto model = std::make_shared<Mlp>();
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "D12", "conflicting-labels");
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("validation rows copied from train: D13 leads with split-mix") {
  manual_seed(4);
  const dtest::XY all = data(200, 3);
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    // the bug: the validation split taken from the start of the data instead of the held-out end
    const int64_t val_from = bug ? 0 : 480;
    const Split d = loaders(all.x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), all.x.narrow(0, val_from, 120),
                            all.y.narrow(0, val_from, 120));
    auto model = std::make_shared<Mlp>();
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "D13", "split-mix");
    } else {
      expect_clean(r);
    }
  }
}

namespace {
debug::RunReport run_nan_inputs(bool bug) {
  manual_seed(4);
  const dtest::XY all = data(200, 3);
  nn::CrossEntropyLoss ce;
  Tensor x = all.x.clone();
  if (bug) {  // the bug: empty cells of the file parsed as NaN and never filled
    float* p = x.data_ptr<float>();
    for (int64_t row = 0; row < 480; row += 40) p[row * 6 + 2] = std::nanf("");
  }
  const Split d = split_rows(x, all.y);
  auto model = std::make_shared<Mlp>();
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  return train_own_loop(*model, ce, opt, d, 2);
}
}  // namespace

// Anomaly mode's NaN gradient out of log_softmax's backward (W4), found during training, hangs under
// the inputs' NaN (D2), found before it.
TEST_CASE("missing values read as NaN in a few input rows: D2 leads with nonfinite-input") {
  const debug::RunReport r = run_nan_inputs(true);
  expect_lead(r, "D2", "nonfinite-input", {"O1", "O4"});
}

TEST_CASE("inputs without NaN: the clean twin stays silent") { expect_clean(run_nan_inputs(false)); }

TEST_CASE("an nn::Normalizer fitted on train and validation: D7 leads with leakage") {
  manual_seed(4);
  const dtest::XY all = data(200, 3);
  const Tensor xtr = all.x.narrow(0, 0, 480), xva = all.x.narrow(0, 480, 120);
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    nn::Normalizer norm;
    norm.fit(xtr, "train");
    if (bug) norm.partial_fit(xva, "validation");  // the bug: the statistics see the validation rows
    const Split d = split_rows(norm.transform(all.x), all.y);
    auto model = std::make_shared<Mlp>();
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    debug::Session dbg(*model, ce, opt, {.train = d.train.get(), .val = d.val.get(), .normalizer = &norm});
    for (int e = 0; e < 2; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        Tensor l = ce((*model)(b.x), b.y);
        l.backward();
        opt.step();
      }
      dbg.epoch();
    }
    const debug::RunReport r = dbg.finish();
    if (bug) {
      expect_lead(r, "D7", "leakage");
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("train standardised, validation left raw: D10 leads with split-preprocessing") {
  manual_seed(4);
  const dtest::XY all = data(200, 3);
  const Tensor raw = all.x * 3.0 + 5.0;  // the features as stored
  const Tensor mean = raw.narrow(0, 0, 480).mean({0}, true), sd = raw.narrow(0, 0, 480).std({0}, true, true);
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    const Tensor xtr = (raw.narrow(0, 0, 480) - mean) / sd;
    // the bug: the validation rows never went through the standardisation
    const Tensor xva = bug ? raw.narrow(0, 480, 120) : (raw.narrow(0, 480, 120) - mean) / sd;
    const Split d = loaders(xtr, all.y.narrow(0, 0, 480), xva, all.y.narrow(0, 480, 120));
    auto model = std::make_shared<Mlp>();
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "D10", "split-preprocessing");
    } else {
      expect_clean(r);
    }
  }
}

namespace {
debug::RunReport run_one_class_val(bool bug) {
  manual_seed(4);
  const dtest::XY all = data(300, 3);
  const Tensor xva = all.x.narrow(0, 480, 420), yva = all.y.narrow(0, 480, 420);
  nn::CrossEntropyLoss ce;
  // the bug: the validation rows taken from a file sorted by class, only class 0's
  const Tensor keep =
      bug ? rows_where(yva, [](int64_t c) { return c == 0; }) : rows_where(yva, [](int64_t) { return true; });
  const Split d =
      loaders(all.x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), xva.index_select(0, keep), yva.index_select(0, keep));
  auto model = std::make_shared<Mlp>();
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  return train_own_loop(*model, ce, opt, d, 2);
}
}  // namespace

// The one-class validation rows also have another per-example spread than train, so feature
// drift (D14) fires too; it hangs under the label drift (D15) that produces it.
TEST_CASE("a validation split of one class only: D15 leads with label-drift, the feature drift under it") {
  const debug::RunReport r = run_one_class_val(true);
  expect_lead(r, "D15", "label-drift");
}

TEST_CASE("a validation split of every class: the clean twin stays silent") { expect_clean(run_one_class_val(false)); }

TEST_CASE("validation inputs from another distribution: D14 leads with feature-drift") {
  manual_seed(4);
  const dtest::XY all = data(200, 3);
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    // the bug: the validation rows come from another sensor, with 1.8x the contrast around each
    // example's mean
    const Tensor raw = all.x.narrow(0, 480, 120), row_mean = raw.mean({1}, true);
    const Tensor xva = bug ? (raw - row_mean) * 1.8 + row_mean : raw;
    const Split d = loaders(all.x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), xva, all.y.narrow(0, 480, 120));
    auto model = std::make_shared<Mlp>();
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "D14", "feature-drift");
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("a validation split of 6 rows: D16 leads with tiny-validation") {
  manual_seed(4);
  const dtest::XY all = data(200, 3);
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    const int64_t nval = bug ? 6 : 120;  // the bug: a validation fraction of 0.01 instead of 0.2
    const Split d = loaders(all.x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), all.x.narrow(0, 480, nval),
                            all.y.narrow(0, 480, nval));
    auto model = std::make_shared<Mlp>();
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "D16", "tiny-validation");
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("SGD at lr 1e-5: O8 (its range) leads with lr-too-low, O6's flat loss confirms it") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<Mlp>();
    optim::SGD opt(model->parameters(), optim::SGDOptions(bug ? 1e-5 : 0.1));  // the bug: 1e-5
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 3);
    if (bug) {
      expect_lead(r, "O8", "lr-too-low");
      const std::vector<std::string> by = strings(lead_of(r).get("confirmed_by"));
      CHECK(std::find(by.begin(), by.end(), "O6") != by.end());
    } else {
      expect_clean(r);
    }
  }
}

// The first layer declared for 5 features while the data has 6.
TEST_CASE("a model that raises on the data's shape: W2 leads with gate-error") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<Mlp>(bug ? 5 : 6, 3);  // the bug: 5 input features
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    debug::Session dbg(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    try {
      for (int e = 0; e < 2; ++e) {
        for (const nn::Batch& b : *d.train) {
          opt.zero_grad();
          Tensor l = ce((*model)(b.x), b.y);
          l.backward();
          opt.step();
        }
        dbg.epoch();
      }
    } catch (const std::exception& ex) {
      dbg.error(ex);
    }
    const debug::RunReport r = dbg.finish();
    if (bug) {
      expect_lead(r, "W2", "gate-error", {"W3"});  // training stopped
    } else {
      expect_clean(r);
    }
  }
}

// A Linear written by hand with its own backward; the weight's gradient is (x^T g) reshaped to
// (M, D) where a transpose (g^T x) was meant.
struct HandLinear : nn::Module {
  Tensor weight, bias;
  bool reshape_bug;
  HandLinear(int64_t in, int64_t out, bool bug) : Module("HandLinear"), reshape_bug(bug) {
    weight = register_parameter("weight", zeros({out, in}));
    bias = register_parameter("bias", zeros({out}));
    nn::init::default_linear_init_(weight, bias);  // nn::Linear's own initialisation
  }
  Tensor forward(const Tensor& x) override {
    Tensor y;
    {
      NoGradGuard ng;
      y = x.matmul(weight.t()) + bias;
    }
    if (needs_grad({&x, &weight, &bias})) {
      record("hand_linear", y, {&x, &weight, &bias},
             [sx = SavedTensor(x, "hand_linear"), sw = SavedTensor(weight, "hand_linear"), bug = reshape_bug](
                 const Tensor& g, Node& n) {
               const Tensor xv = sx.unpack(n), wv = sw.unpack(n);
               const Tensor gw = bug ? xv.t().matmul(g).reshape({wv.size(0), wv.size(1)})  // the bug
                                     : g.t().matmul(xv);
               return tensor_list{g.matmul(wv), gw, g.sum({0})};
             });
    }
    return y;
  }
};
struct HandNet : nn::Module {
  std::shared_ptr<HandLinear> fc1;
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 3));
  explicit HandNet(bool bug) : Module("HandNet") {
    fc1 = register_module("fc1", std::make_shared<HandLinear>(6, 32, bug));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)((*fc1)(x).relu()); }
};

TEST_CASE("a hand-written backward with a reshape for a transpose: M13 leads with wrong-backward") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<HandNet>(bug);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (bug) {
      expect_lead(r, "M13", "wrong-backward");
    } else {
      expect_clean(r);
    }
  }
}

// Log-probabilities written with the textbook formula log(exp(x) / sum(exp(x))): fine in
// float32, but once training has grown the logits past ~11, exp overflows in half precision.
struct SharpNet : nn::Module {
  std::shared_ptr<Mlp> body = register_module("body", std::make_shared<Mlp>());
  bool textbook;
  explicit SharpNet(bool t) : Module("SharpNet"), textbook(t) {}
  Tensor forward(const Tensor& x) override {
    const Tensor z = (*body)(x);
    if (!textbook) return z.log_softmax(1);
    const Tensor e = z.exp();  // the bug: no max subtracted
    return (e / e.sum({1}, true)).log();
  }
};

TEST_CASE("log(exp(x) / sum(exp(x))) by hand: M18 leads with half-overflow") {
  manual_seed(4);
  const Split d = split();
  nn::NLLLoss nll;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<SharpNet>(bug);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, nll, opt, d, 4);
    if (bug) {
      expect_lead(r, "M18", "half-overflow");
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("rows sorted by class and a loader that does not shuffle: D8 leads with unshuffled") {
  manual_seed(4);
  const dtest::XY all = data(200, 3);
  const Tensor xtr = all.x.narrow(0, 0, 480), ytr = all.y.narrow(0, 0, 480);
  // The rows as a file sorted by class holds them.
  const Tensor by_class =
      cat({rows_where(ytr, [](int64_t c) { return c == 0; }), rows_where(ytr, [](int64_t c) { return c == 1; }),
           rows_where(ytr, [](int64_t c) { return c == 2; })});
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto sorted = std::make_shared<nn::TensorDataset>(xtr.index_select(0, by_class), ytr.index_select(0, by_class));
    nn::DataLoader train(sorted,
                         nn::DataLoaderOptions().batch_size(32).shuffle(!bug).seed(3));  // the bug: shuffle(false)
    nn::DataLoader val(std::make_shared<nn::TensorDataset>(all.x.narrow(0, 480, 120), all.y.narrow(0, 480, 120)),
                       nn::DataLoaderOptions().batch_size(120));
    auto model = std::make_shared<Mlp>();
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    debug::Session dbg(*model, ce, opt, {.train = &train, .val = &val});
    for (int e = 0; e < 2; ++e) {
      for (const nn::Batch& b : train) {
        opt.zero_grad();
        Tensor l = ce((*model)(b.x), b.y);
        l.backward();
        opt.step();
      }
      dbg.epoch();
    }
    const debug::RunReport r = dbg.finish();
    if (bug) {
      expect_lead(r, "D8", "unshuffled");
    } else {
      expect_clean(r);
    }
  }
}

// ---- rules judged against the corpus's healthy programs (docs/corpus.md) -------------------

// MSE against one-hot rows of the class labels, written as a loss of the user's own.
struct OneHotMse : nn::Loss {
  int64_t classes;
  explicit OneHotMse(int64_t c) : Loss("OneHotMse"), classes(c) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    const Tensor t = target.contiguous();
    std::vector<float> rows(static_cast<size_t>(t.numel() * classes), 0.0f);
    for (int64_t i = 0; i < t.numel(); ++i) rows[static_cast<size_t>(i * classes + t.data_ptr<int64_t>()[i])] = 1.0f;
    return nn::functional::mse_loss(input, tensor(rows, {t.numel(), classes}));
  }
  nn::Reduction reduction() const override { return nn::Reduction::Mean; }
};

TEST_CASE("a loss of the user's own on class indices: L4 expects its value for an output of zeros, not log C") {
  manual_seed(4);
  const Split d = split();
  OneHotMse mse(3);
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<Mlp>();
    if (bug) {  // the bug: the last layer initialised 30x too large, a confidently wrong start
      NoGradGuard ng;
      model->fc3->weight.mul_(30.0);
    }
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, mse, opt, d, 3, classes(3));
    INFO(r.str());
    std::vector<debug::Finding> l4;
    for (const debug::Finding& f : r.findings.findings())
      if (f.check == "L4" && f.kind == debug::Kind::InitialLoss) l4.push_back(f);
    REQUIRE(l4.size() == 1);
    // MSE on one-hot rows of 3 classes for an output of zeros: 1/3, whatever the labels.
    CHECK(l4[0].evidence[1].value == doctest::Approx(1.0 / 3.0).epsilon(1e-4));
    if (bug) {
      CHECK(l4[0].severity == debug::Severity::Warning);
    } else {
      expect_clean(r);
    }
  }
}

// SGD: clipping at every step sets every update's length; Adam divides each coordinate by its
// running RMS, so the same clipping leaves the step's length alone.
TEST_CASE("gradients clipped at every step under SGD: O9 warns; the same clipping under Adam stays silent") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    auto model = std::make_shared<Mlp>();
    std::unique_ptr<optim::Optimizer> opt;
    if (bug)
      opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    else
      opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions(1e-2));
    debug::Session dbg(*model, ce, *opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 4; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt->zero_grad();
        Tensor l = ce((*model)(b.x), b.y);
        l.backward();
        optim::clip_grad_norm_(model->parameters(), 1e-3);  // the same threshold in both twins
        opt->step();
      }
      dbg.epoch();
    }
    const debug::RunReport r = dbg.finish();
    if (bug) {
      INFO(r.str());
      CHECK(r.fired("O9"));
    } else {
      expect_clean(r);
    }
  }
}

// A binary task's float targets (N, 1) of 0. and 1.: D3 counts its two classes, D15 compares their
// frequencies between the splits.
TEST_CASE("a binary task whose training positives were filtered to 1 in 20: D3 and D15 see the float labels") {
  manual_seed(4);
  const dtest::XY all = data(300, 2);
  nn::BCEWithLogitsLoss bce;
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    const Tensor xtr = all.x.narrow(0, 0, 480), ytr = all.y.narrow(0, 0, 480);
    // the bug: a filter meant for bad rows keeps one training positive in 20
    std::vector<int64_t> keep;
    const std::vector<int64_t> labels = ytr.to_vector<int64_t>();
    int64_t positives = 0;
    for (int64_t i = 0; i < static_cast<int64_t>(labels.size()); ++i)
      if (!bug || labels[i] == 0 || positives++ % 20 == 0) keep.push_back(i);
    const Tensor idx = tensor(keep, {static_cast<int64_t>(keep.size())});
    auto as_target = [](const Tensor& y) { return y.to(kFloat32).reshape({-1, 1}); };
    const Split d = loaders(xtr.index_select(0, idx), as_target(ytr.index_select(0, idx)), all.x.narrow(0, 480, 120),
                            as_target(all.y.narrow(0, 480, 120)));
    auto model = std::make_shared<Mlp>(6, 1);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, bce, opt, d, 3);
    INFO(r.str());
    const debug::Finding* counts = nullptr;
    for (const debug::Finding& f : r.findings.findings())
      if (f.is("D3", debug::Kind::ClassCounts)) counts = &f;
    REQUIRE(counts != nullptr);  // the float labels are counted as two classes
    if (bug) {
      CHECK(counts->severity == debug::Severity::Warning);
      CHECK(counts->title.find("class 1 only") != std::string::npos);
      CHECK(r.fired("D15"));
      const std::string lead = lead_of(r).get("check")->str;
      CHECK_MESSAGE((lead == "D3" || lead == "D15"), "lead " << lead);
    } else {
      CHECK(counts->title.find("over 2 classes") != std::string::npos);
      expect_clean(r);
    }
  }
}

// The whole training set in one batch (the fault operator HDB on the corpus's binary classifier):
// 8 optimizer steps in 8 epochs. Training on from the end for 150 steps (M14's base budget for one
// batch) shows how far the run was from done; its own 8 steps again do not.
TEST_CASE("the whole training set in one batch: L9 leads with undertrained; the corpus program stays silent") {
  namespace corpus = debug::corpus;
  const corpus::Program& clean = corpus::program("binary");
  const corpus::Mutant bug = corpus::fault_operator("HDB").mutate(clean, 1, 1);
  const corpus::Outcome buggy = corpus::run_program(bug.program, 1);
  INFO(buggy.report.str());
  const json_mini::Value lead = lead_of(buggy.report);
  REQUIRE(lead.kind == json_mini::Value::Object);
  CHECK(lead.get("check")->str == "L9");
  CHECK(lead.get("cause")->str == "undertrained");
  corpus::RunOptions eight;
  eight.diagnose.fit.continue_min_steps = 0;
  const corpus::Outcome short_probe = corpus::run_program(bug.program, 1, eight);
  CHECK_MESSAGE(!short_probe.report.fired("L9"), short_probe.report.str());
  expect_clean(corpus::run_program(clean, 1).report);
}

// One epoch where the program meant eight (the fault operator HNE at 1/8): no epoch curve to read, so
// L9 trains on from the end alone; the validation loss falls by half and more examples turn right.
TEST_CASE("one epoch of eight: L9 trains on without a curve and leads with undertrained") {
  namespace corpus = debug::corpus;
  const corpus::Program& clean = corpus::program("binary");
  const corpus::Outcome buggy = corpus::run_program(corpus::fault_operator("HNE").mutate(clean, 0.125, 1).program, 1);
  INFO(buggy.report.str());
  const json_mini::Value lead = lead_of(buggy.report);
  REQUIRE(lead.kind == json_mini::Value::Object);
  CHECK(lead.get("check")->str == "L9");
  CHECK(lead.get("cause")->str == "undertrained");
  // Without the accuracy's confirmation (a McNemar z no run can reach) the verdict is not a warning.
  corpus::RunOptions strict;
  strict.diagnose.fit.continue_min_z = 1e9;
  const corpus::Outcome unconfirmed =
      corpus::run_program(corpus::fault_operator("HNE").mutate(clean, 0.125, 1).program, 1, strict);
  CHECK_MESSAGE(!unconfirmed.report.fired("L9"), unconfirmed.report.str());
}

// Runs cut short, their accuracy near its ceiling. Two epochs where the program meant eight (the fault
// operator HNE at a quarter on the corpus's imbalanced-weighted): the curve still falls, and training on
// lowers the validation loss by 46% while its accuracy turns about as many examples right as wrong; a
// fifth of the run's improvement was still to come. 80% of the training examples removed (TRD on the
// corpus's dropout): 8 steps an epoch, 64 in all, the validation loss still falling by a third at the
// end and lowered by a third again by training on, 4 examples turned right and 3 wrong; 7.5% of the
// improvement from the first step's loss was still to come. The healthy corpus's still-falling runs
// leave 4% at most: the share confirms "undertrained"; without it the verdict stays info. The healthy
// programs stay silent.
TEST_CASE("runs cut short: L9 confirms undertrained by the share of the improvement left") {
  namespace corpus = debug::corpus;
  struct Cut {
    const char* recipe;
    const char* op;
    double strength;
  };
  for (const Cut& c : {Cut{"imbalanced-weighted", "HNE", 0.25}, Cut{"dropout", "TRD", 0.8}}) {
    CAPTURE(c.op);
    const corpus::Program& clean = corpus::program(c.recipe);
    const corpus::Program cut = corpus::fault_operator(c.op).mutate(clean, c.strength, 1).program;
    const corpus::Outcome buggy = corpus::run_program(cut, 1);
    INFO(buggy.report.str());
    const json_mini::Value lead = lead_of(buggy.report);
    REQUIRE(lead.kind == json_mini::Value::Object);
    CHECK(lead.get("check")->str == "L9");
    CHECK(lead.get("cause")->str == "undertrained");
    corpus::RunOptions no_share;
    no_share.diagnose.fit.continue_share = no_share.diagnose.fit.continue_share_alone = 1.0;
    const corpus::Outcome unconfirmed = corpus::run_program(cut, 1, no_share);
    CHECK_MESSAGE(!unconfirmed.report.fired("L9"), unconfirmed.report.str());
    expect_clean(corpus::run_program(clean, 1).report);
  }
}

// A schedule annealed to 0.6% of its peak rate flattens the curve whatever the model learned: the
// whole training set in one batch on the corpus's spirals (20 steps of a cosine) ends "flat". Training
// on with the schedule replayed (not at the final rate, which changes nothing) shows how far it was.
TEST_CASE("an annealed schedule: L9 replays it to train on and leads with undertrained") {
  namespace corpus = debug::corpus;
  const corpus::Program& clean = corpus::program("spirals");
  const corpus::Outcome buggy = corpus::run_program(corpus::fault_operator("HDB").mutate(clean, 1, 1).program, 1);
  INFO(buggy.report.str());
  const json_mini::Value lead = lead_of(buggy.report);
  REQUIRE(lead.kind == json_mini::Value::Object);
  CHECK(lead.get("check")->str == "L9");
  CHECK(lead.get("cause")->str == "undertrained");
  expect_clean(corpus::run_program(clean, 1).report);
}

// 90% of the training examples removed (the fault operator TRD on the corpus's batch-norm MLP): the
// model fits its 120 examples, validation trails by 11 points, under L9's gap of 20. The run repeated
// on a quarter of its examples loses 10 points of validation accuracy where the healthy corpus loses
// 6 at most: the score still climbs with the data, and L9 leads with the data's gap. The healthy
// program (a gap of 5 points, a quarter of its data costing 1) stays silent.
TEST_CASE("too little training data: L9's learning-curve probe leads; the corpus program stays silent") {
  namespace corpus = debug::corpus;
  const corpus::Program& clean = corpus::program("batchnorm-mlp");
  const corpus::Program few = corpus::fault_operator("TRD").mutate(clean, 0.9, 1).program;
  const corpus::Outcome buggy = corpus::run_program(few, 1);
  INFO(buggy.report.str());
  const json_mini::Value lead = lead_of(buggy.report);
  REQUIRE(lead.kind == json_mini::Value::Object);
  CHECK(lead.get("check")->str == "L9");
  CHECK(lead.get("cause")->str == "memorised");
  // Without the probe (a run too long to repeat) nothing warns.
  corpus::RunOptions no_probe;
  no_probe.diagnose.fit.data_max_steps = 0;
  const corpus::Outcome unprobed = corpus::run_program(few, 1, no_probe);
  CHECK_MESSAGE(!unprobed.report.fired("L9"), unprobed.report.str());
  expect_clean(corpus::run_program(clean, 1).report);
}

// A run of 32 steps (90% of the training examples removed) that 10x the rate helps: 10x the steps at
// its own rate help as much, so the steps, not the rate, are short. A run of 300 steps at a tenth of
// its rate keeps the verdict "learning rate too low" (the steps probe does not run on it).
TEST_CASE("a short run: L9's steps probe tells too few steps from a rate too low") {
  namespace corpus = debug::corpus;
  const corpus::Program& clean = corpus::program("binary");
  const corpus::Outcome few = corpus::run_program(corpus::fault_operator("TRD").mutate(clean, 0.9, 1).program, 1);
  INFO(few.report.str());
  const json_mini::Value lead = lead_of(few.report);
  REQUIRE(lead.kind == json_mini::Value::Object);
  CHECK(lead.get("check")->str == "L9");
  CHECK(lead.get("cause")->str == "undertrained");
  const corpus::Outcome slow = corpus::run_program(corpus::fault_operator("HLR").mutate(clean, 0.1, 1).program, 1);
  INFO(slow.report.str());
  const json_mini::Value slow_lead = lead_of(slow.report);
  REQUIRE(slow_lead.kind == json_mini::Value::Object);
  CHECK(slow_lead.get("check")->str == "L9");
  CHECK(slow_lead.get("cause")->str == "lr-too-low");
  // Without the steps probe the short run's verdict is the rate.
  corpus::RunOptions no_steps_probe;
  no_steps_probe.diagnose.fit.few_steps = 0;
  const corpus::Outcome rate =
      corpus::run_program(corpus::fault_operator("TRD").mutate(clean, 0.9, 1).program, 1, no_steps_probe);
  const json_mini::Value rate_lead = lead_of(rate.report);
  REQUIRE(rate_lead.kind == json_mini::Value::Object);
  CHECK(rate_lead.get("cause")->str == "lr-too-low");
}
