// The bug zoo (see zoo.h): the reference recipe, each bug switched on where it
// lives, every check attached, and the detection matrix.
#include "debug/zoo/zoo.h"

#include "debug/diagnosis/diagnosis.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/backend.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/data/data_checks.h"
#include "debug/evidence/catalogue.h"
#include "debug/run/diagnose.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace gradsleuth::debug::zoo {

using nn::Bug;

namespace {

using detail::pad;
using detail::pct;
using detail::str_list;

using detail::Clock;
using detail::join;
using detail::since;

// logits * factor: the temperature of a sharpened softmax (1 / T), as in
// distillation and contrastive losses. Bug B20's recipe uses T = 0.05.
class Scale : public nn::Module {
 public:
  explicit Scale(double factor) : Module("Scale"), factor_(factor) {}
  Tensor forward(const Tensor& x) override { return x * factor_; }
  std::string extra_repr() const override { return "factor=" + fmt_num(factor_); }

 private:
  double factor_;
};

// A user's own log-softmax head, written as a custom op: autocast is turned off inside (as for an
// op whose numerics it does not know), so the module picks its own precision.
class HandLogSoftmax : public nn::Module {
 public:
  explicit HandLogSoftmax(bool in_float16) : Module("HandLogSoftmax"), in_float16_(in_float16) {}
  Tensor forward(const Tensor& x) override {
    auto off = autocast(autocast_dtype(), false);
    // BUG B37 (in the recipe): the softmax runs on the float16 logits, where exp(x) is inf above
    // 11.1 and the row becomes inf / inf = NaN. Correct: x.to(kFloat32) first (what autocast's
    // policy does for softmax), or nn::LogSoftmax.
    const Tensor z = in_float16_ ? x : x.to(kFloat32);
    const Tensor e = exp(z);
    return log(e / sum(e, {1}, true));
  }
  std::string extra_repr() const override { return in_float16_ ? "in the input's dtype" : "in float32"; }

 private:
  bool in_float16_;
};

// Cross-entropy plus a sparsity penalty lambda * sum(sqrt(|w|)) over the given parameters.
class SparsityPenalisedLoss : public nn::CrossEntropyLoss {
 public:
  SparsityPenalisedLoss(std::vector<Tensor> params, double lambda) : params_(std::move(params)), lambda_(lambda) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    Tensor l = nn::CrossEntropyLoss::forward(input, target);
    // BUG B39 (in the recipe): sqrt(|w|) has an infinite slope at w = 0, and BatchNorm's shift
    // starts at 0: its gradient is inf/NaN at every step, the GradScaler skips every step and its
    // scale collapses. Correct: sqrt(w * w + eps), finite everywhere.
    for (const Tensor& p : params_) l = l + sum(sqrt(abs(p))) * lambda_;
    return l;
  }

 private:
  std::vector<Tensor> params_;
  double lambda_;
};

// One term of a weighted objective: cross-entropy x weight (the objective's other terms are left
// out of the recipe).
class WeightedTermLoss : public nn::Loss {
 public:
  explicit WeightedTermLoss(double weight) : Loss("WeightedTermLoss"), weight_(weight) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return nn::functional::cross_entropy(input, target) * weight_;
  }
  nn::Reduction reduction() const override { return nn::Reduction::Mean; }
  std::string extra_repr() const override { return "cross_entropy x " + fmt_num(weight_); }

 private:
  double weight_;
};

// BCELoss (which autocast refuses) run in an autocast-off region on probabilities cast to float32.
class BceOutsideAutocast : public nn::BCELoss {
 public:
  Tensor forward(const Tensor& p, const Tensor& y) override {
    auto off = autocast(autocast_dtype(), false);
    return nn::BCELoss::forward(p.to(kFloat32), y);
  }
};

bool footwear_bug(const nn::BugSet& b) { return b.has(Bug::B01) || b.has(Bug::B09) || b.has(Bug::B40); }

std::shared_ptr<nn::Residual> block(const std::shared_ptr<nn::Linear>& fc) {
  return std::make_shared<nn::Residual>(std::make_shared<nn::Sequential>(std::make_shared<nn::ReLU>(), fc));
}

// The reference MLP (x (B, 1, 28, 28) -> (B, K)):
//   0 Flatten, 1 Linear(784, 128), 2 ReLU, 3 BatchNorm1d(128),
//   4 Residual(ReLU, Linear(128, 128)), 5 Residual(ReLU, Linear(128, 128)),
//   6 ReLU, 7 Dropout(0.2), 8 Linear(128, K)
std::shared_ptr<nn::Sequential> make_mlp(const nn::BugSet& bugs, int64_t K, std::vector<std::string>& notes,
                                         int64_t H = 128) {
  if (bugs.has(Bug::B17)) {
    // B17's recipe: a deep stack of sigmoids (9 hidden layers of 64), no skip connections.
    notes.push_back("B17: the MLP becomes 9 sigmoid layers of 64 units without skip connections or normalisation");
    auto s = std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 64),
                                              std::make_shared<nn::Sigmoid>());
    for (int i = 0; i < 8; ++i)
      s->push_back(std::make_shared<nn::Linear>(64, 64)).push_back(std::make_shared<nn::Sigmoid>());
    s->push_back(std::make_shared<nn::Linear>(64, K));
    return s;
  }
  auto fc1 = std::make_shared<nn::Linear>(784, H);
  auto fc_a = std::make_shared<nn::Linear>(H, H);
  auto fc_b = std::make_shared<nn::Linear>(H, H);
  // BUG B11 (in the recipe): the second block reuses the first block's layer
  // where a new one was meant. Correct: fc_b, a separate Linear.
  if (bugs.has(Bug::B11)) {
    fc_b = fc_a;
    notes.push_back("B11: the second residual block is built with the first block's Linear instance");
  }
  auto head = std::make_shared<nn::Linear>(H, K);
  auto bn = std::make_shared<nn::BatchNorm1d>(H);
  auto b1 = block(fc_a);
  for (Bug b : {Bug::B13, Bug::B16, Bug::B18, Bug::B22})
    if (bugs.has(b)) fc1->inject_bug(b);
  if (bugs.has(Bug::B12)) head->inject_bug(Bug::B12);
  if (bugs.has(Bug::B23)) bn->inject_bug(Bug::B23);
  if (bugs.has(Bug::B02)) b1->inject_bug(Bug::B02);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), fc1, std::make_shared<nn::ReLU>(), bn, b1,
                                          block(fc_b), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.2),
                                          head);
}

// The CNN of `gradsleuth train` (x (B, 1, 28, 28) -> (B, K)); fc = layer 7, head = layer 10.
std::shared_ptr<nn::Sequential> make_cnn(const nn::BugSet& bugs, int64_t K, int64_t H = 128) {
  check_recipe(bugs.list(), "cnn");
  auto fc = std::make_shared<nn::Linear>(64 * 7 * 7, H);
  auto head = std::make_shared<nn::Linear>(H, K);
  for (Bug b : {Bug::B13, Bug::B16, Bug::B18, Bug::B22})
    if (bugs.has(b)) fc->inject_bug(b);
  if (bugs.has(Bug::B12)) head->inject_bug(Bug::B12);
  return std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 32, 3).padding(1)), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Conv2d>(nn::Conv2dOptions(32, 64, 3).padding(1)),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(), fc,
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.25), head);
}

}  // namespace

void check_recipe(const std::vector<Bug>& bugs, const std::string& model) {
  for (Bug b : bugs) {
    const nn::BugInfo& info = nn::bug_info(b);
    if (std::find(info.recipes.begin(), info.recipes.end(), model) != info.recipes.end()) continue;
    // The data-parallel bugs need N processes: the distributed zoo under mpirun reproduces them.
    GS_CHECK(std::find(info.recipes.begin(), info.recipes.end(), "dist") == info.recipes.end(), "zoo::check_recipe",
             "bug ", info.code, " (", info.title,
             ") is a data-parallel bug: it needs several ranks, run it as `mpirun -np 2 "
             "gradsleuth zoo --distributed --bug ",
             info.code, "`");
    std::string where;
    for (const std::string& r : info.recipes) where += (where.empty() ? "" : " or ") + r;
    GS_CHECK(false, "zoo::check_recipe", "bug ", info.code, " (", info.title, ") lives in ", info.lives_in,
             ", which the ", model, " recipe does not have: it is reproduced with --model ", where);
  }
}

nn::ModulePtr make_model(const nn::BugSet& bugs, const Options& o, int64_t width, int64_t num_outputs) {
  std::vector<std::string> notes;
  GS_CHECK(o.model == "mlp" || o.model == "cnn", "zoo", "unknown model '", o.model, "': use mlp or cnn");
  return o.model == "cnn" ? std::static_pointer_cast<nn::Module>(make_cnn(bugs, num_outputs, width))
                          : std::static_pointer_cast<nn::Module>(make_mlp(bugs, num_outputs, notes, width));
}

Options Options::quick() {
  Options o;
  o.train_examples = 6000;
  o.test_examples = 2000;
  o.steps = 150;
  o.overfit_steps = 120;
  return o;
}

Options Options::full() { return Options(); }

std::string precision_of(const nn::BugSet& bugs, const Options& o) {
  GS_CHECK(o.precision == "float32" || o.precision == "float16" || o.precision == "bfloat16", "zoo",
           "unknown precision '", o.precision, "': use float32, float16 or bfloat16");
  std::string p;
  for (Bug b : bugs.list()) {
    const char* need = b == Bug::B38                                                                       ? "bfloat16"
                       : b == Bug::B35 || b == Bug::B36 || b == Bug::B37 || b == Bug::B39 || b == Bug::B40 ? "float16"
                                                                                                           : nullptr;
    if (!need) continue;
    GS_CHECK(p.empty() || p == need, "zoo", "bugs ", bugs.str(), " train in different precisions (float16 and ",
             "bfloat16): run them one at a time");
    p = need;
  }
  return p.empty() ? o.precision : p;
}

Variant build(const nn::BugSet& bugs, const Options& o) {
  GS_CHECK(has_backend(o.device.type), "zoo", "Options::device is ", o.device.str(),
           " but no backend is registered for it: call gradsleuth::cuda::init() (cuda/cuda.h) first and check "
           "that it returns true, or train on kCPU");
  // A bug this recipe has no code path for would train the clean model under the bug's name.
  check_recipe(bugs.list(), o.model);
  Variant v;
  v.bugs = bugs;
  v.device = o.device;
  v.precision = precision_of(bugs, o);
  const bool fp16 = v.precision == "float16", bf16 = v.precision == "bfloat16";
  GS_CHECK(v.precision == "float32" || o.device.is_cpu(), "zoo", "the ", v.precision,
           " recipe trains on the CPU only (the CUDA backend refuses 16-bit ops): use --device cpu");
  v.id = bugs.empty() ? "clean" : bugs.str();
  v.task = footwear_bug(bugs) || o.footwear ? Task::Footwear : Task::Classes;

  // ---- data: Fashion-MNIST -> [0, 1] (or raw) -> standardised -> labels -----------
  // BUG B25 (in the pipeline): raw 0..255 pixels, never scaled nor standardised.
  const bool raw = bugs.has(Bug::B25);
  auto fm = nn::FashionMnistOptions().data_dir(o.data_dir).raw(raw);
  auto train_full = nn::load_fashion_mnist("train", fm), test_full = nn::load_fashion_mnist("test", fm);
  const int64_t ntr = std::min(o.train_examples, train_full->size()),
                nte = std::min(o.test_examples, test_full->size());
  Tensor xtr = train_full->x().narrow(0, 0, ntr), ytr = train_full->y().narrow(0, 0, ntr);
  Tensor xte = test_full->x().narrow(0, 0, nte), yte = test_full->y().narrow(0, 0, nte);
  if (raw) v.notes.push_back("B25: the pixels stay 0..255 (no scaling, no standardisation)");
  if (!raw) {
    v.normalizer = std::make_shared<nn::Normalizer>(nn::Normalizer::Mode::Global);
    v.normalizer->fit(xtr, "train");
    // BUG B06 (in the pipeline): the statistics are fitted on train + test.
    // Correct: fit on the training split only, then transform every split.
    if (bugs.has(Bug::B06)) {
      v.normalizer->partial_fit(xte, "test");
      v.notes.push_back("B06: the normaliser's statistics are fitted on the training and the test images");
    }
    xtr = v.normalizer->transform(xtr);
    xte = v.normalizer->transform(xte);
  }
  if (v.task == Task::Footwear) {
    // "Is it footwear?": sandal (5), sneaker (7), ankle boot (9).
    auto footwear = [](const Tensor& y) { return ((y == 5.0) || (y == 7.0) || (y == 9.0)).to(kFloat32); };
    ytr = footwear(ytr);
    yte = footwear(yte);
    // BUG B01 (in the pipeline): a regression target kept as (B) against the
    // model's (B, 1). Correct: targets (B, 1), like the prediction.
    if (!bugs.has(Bug::B01)) {
      ytr = ytr.unsqueeze(1);
      yte = yte.unsqueeze(1);
    } else {
      v.notes.push_back("B01: the footwear task as a regression (MSE) with targets (B) against predictions (B, 1)");
    }
    v.num_classes = 2;
  }
  // BUG B26 (in the pipeline): labels shifted to 1..10, and the model given 11
  // outputs to make the out-of-range error go away. Correct: labels 0..9, 10 outputs.
  if (bugs.has(Bug::B26)) {
    ytr = ytr + 1;  // an integer: + 1.0 would make the int64 labels float32 (as in PyTorch)
    yte = yte + 1;
    v.num_classes = 11;
    v.notes.push_back("B26: labels are 1..10 and the model has 11 outputs (class 0 is never used)");
  }
  // BUG B27 (in the pipeline): the images become float64 (NumPy's default) and
  // meet a float32 model. Correct: float32 data.
  if (bugs.has(Bug::B27)) {
    xtr = xtr.to(kFloat64);
    xte = xte.to(kFloat64);
    v.notes.push_back("B27: the images are float64, the model float32");
  }
  // The bfloat16 recipe: the images in the parameters' dtype (a float32 batch would promote the
  // forward back to float32).
  if (bf16) {
    xtr = xtr.to(kBFloat16);
    xte = xte.to(kBFloat16);
  }
  v.test_x = xte;
  v.train_data = std::make_shared<nn::TensorDataset>(xtr, ytr, "fashion-mnist/train");
  auto lo = nn::DataLoaderOptions().batch_size(o.batch_size).shuffle(true).seed(o.seed);
  for (Bug b : {Bug::B07, Bug::B19, Bug::B28})
    if (bugs.has(b)) lo = lo.bug(b);
  v.train = std::make_shared<nn::DataLoader>(v.train_data, lo);
  v.test = std::make_shared<nn::DataLoader>(std::make_shared<nn::TensorDataset>(xte, yte, "fashion-mnist/test"),
                                            nn::DataLoaderOptions().batch_size(500));

  // ---- model --------------------------------------------------------------------------
  manual_seed(o.seed);
  const int64_t K = v.task == Task::Footwear ? 1 : v.num_classes;
  GS_CHECK(o.model == "mlp" || o.model == "cnn", "zoo", "unknown model '", o.model, "': use mlp or cnn");
  std::shared_ptr<nn::Sequential> model = o.model == "cnn" ? make_cnn(bugs, K) : make_mlp(bugs, K, v.notes);
  // The head: raw logits for CrossEntropyLoss; the bugs below change it.
  bool nll = false;
  if (bugs.has(Bug::B08)) {
    // BUG B08 (in the recipe): a Softmax at the end, then CrossEntropyLoss
    // (which applies log_softmax itself). Correct: logits into the loss.
    model->push_back(std::make_shared<nn::Softmax>(1));
    v.notes.push_back("B08: the model ends with Softmax(1), and the loss is CrossEntropyLoss");
  }
  if (bugs.has(Bug::B10)) {
    // BUG B10 (in the recipe): a ReLU after the final Linear. Correct: none.
    model->push_back(std::make_shared<nn::ReLU>());
    v.notes.push_back("B10: a ReLU after the final Linear layer");
  }
  if (bugs.has(Bug::B14) || bugs.has(Bug::B20) || bugs.has(Bug::B21)) {
    // These bugs live in a LogSoftmax head (with NLLLoss).
    if (bugs.has(Bug::B20)) {
      model->push_back(std::make_shared<Scale>(20.0));
      v.notes.push_back("B20: a sharpened softmax (temperature 0.05, logits x 20) computed as log(softmax(x))");
    }
    auto head = std::make_shared<nn::LogSoftmax>(1);
    for (Bug b : {Bug::B14, Bug::B20, Bug::B21})
      if (bugs.has(b)) head->inject_bug(b);
    model->push_back(head);
    nll = true;
  }
  if (bugs.has(Bug::B37)) {
    model->push_back(std::make_shared<HandLogSoftmax>(true));
    v.notes.push_back("B37: the model ends with a hand-written log-softmax that runs on the float16 logits");
    nll = true;
  }
  // BUG B40 (in the recipe): probabilities out of the model (a Sigmoid run in float16 under
  // autocast) into BCELoss, with autocast turned off around the loss to get past its refusal.
  // Correct: the logits into BCEWithLogitsLoss, which autocast runs in float32.
  if (bugs.has(Bug::B40)) {
    model->push_back(std::make_shared<nn::Sigmoid>());
    v.notes.push_back("B40: a Sigmoid ends the model and BCELoss runs outside autocast on its float16 output");
  }
  if (bf16) model->to(kBFloat16);
  // On the device before the optimizer is made (its state follows the parameters); the data
  // pipeline stays on the host and the trainer moves each batch.
  model->to(o.device);
  v.model = model;

  // ---- loss ---------------------------------------------------------------------------
  if (v.task == Task::Footwear) {
    if (bugs.has(Bug::B01)) {
      v.loss = std::make_shared<nn::MSELoss>();
      v.loss->inject_bug(Bug::B01);
    } else if (bugs.has(Bug::B09)) {
      // BUG B09 (in the recipe): BCELoss on raw logits (with its range error
      // silenced). Correct: BCEWithLogitsLoss.
      v.loss = std::make_shared<nn::BCELoss>();
      v.loss->inject_bug(Bug::B09);
      v.notes.push_back("B09: BCELoss (which expects probabilities) on the model's raw logits");
    } else if (bugs.has(Bug::B40)) {
      v.loss = std::make_shared<BceOutsideAutocast>();
    } else {
      v.loss = std::make_shared<nn::BCEWithLogitsLoss>();
    }
  } else if (nll) {
    v.loss = std::make_shared<nn::NLLLoss>();
  } else if (bugs.has(Bug::B35)) {
    // B35's objective: its gradients are 1000 times smaller than the plain loss's, so many of them
    // are below float16's range unless the loss is scaled.
    v.loss = std::make_shared<WeightedTermLoss>(1e-3);
    v.notes.push_back("B35: the loss is cross-entropy weighted by 1e-3 (a term of a weighted objective)");
  } else if (bugs.has(Bug::B39)) {
    v.loss = std::make_shared<SparsityPenalisedLoss>(model->parameters(), 1e-6);
    v.notes.push_back("B39: the loss adds a sparsity penalty 1e-6 * sum(sqrt(|w|)) over every parameter");
  } else {
    v.loss = std::make_shared<nn::CrossEntropyLoss>();
  }
  if (bugs.has(Bug::B03)) v.loss->inject_bug(Bug::B03);

  // ---- optimizer and loop -------------------------------------------------------------
  // BUG B24 (in the recipe): Adam with lr 0.1, a hundred times the default.
  const double lr = bugs.has(Bug::B24) ? o.lr * 100.0 : o.lr;
  if (bugs.has(Bug::B24)) v.notes.push_back("B24: Adam with lr " + fmt_num(lr) + " instead of " + fmt_num(o.lr));
  v.optimizer = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions(lr));
  // BUG B38 (in the recipe): bfloat16 parameters stepped in their own dtype: an update below half
  // the weight's spacing rounds away. Correct: float32 master weights.
  if (bf16) v.optimizer->set_master_weights(!bugs.has(Bug::B38));
  if (bugs.has(Bug::B38))
    v.notes.push_back("B38: bfloat16 parameters, and the optimizer keeps no float32 master weights");
  // BUG B15 (in the recipe): meaning to freeze the first layer (as a pretrained
  // backbone), the head is frozen instead; the optimizer holds every parameter.
  if (bugs.has(Bug::B15)) {
    (*model)[model->size() - 1 - (nll ? 1 : 0) - (bugs.has(Bug::B08) || bugs.has(Bug::B10) ? 1 : 0) -
             (bugs.has(Bug::B20) ? 1 : 0)]
        ->requires_grad_(false);
    v.notes.push_back("B15: the output layer is frozen (the first layer was meant)");
  }
  const int64_t batches = std::max<int64_t>(v.train->num_batches(), 1);
  v.trainer.epochs((o.steps + batches - 1) / batches)
      .max_steps(o.steps)
      .progress(optim::Progress::Off)
      .device(o.device);
  for (Bug b : {Bug::B04, Bug::B05, Bug::B36})
    if (bugs.has(b)) v.trainer.bug(b);
  if (fp16) {
    // BUG B35 (in the recipe): float16 autocast with no loss scaler: gradients below 2^-24 become
    // 0. Correct: a GradScaler.
    if (!bugs.has(Bug::B35)) v.scaler = std::make_unique<optim::GradScaler>();
    v.trainer.autocast(kFloat16).grad_scaler(v.scaler.get()).clip_grad_norm(5.0);
    if (bugs.has(Bug::B35)) v.notes.push_back("B35: float16 autocast and no GradScaler");
    if (bugs.has(Bug::B36)) v.notes.push_back("B36: clip_grad_norm_ runs before scaler.unscale_");
  }
  return v;
}

namespace {

// Accuracy on the test loader, for each task's output.
double test_accuracy(Variant& v) {
  NoGradGuard ng;
  const bool was = v.model->is_training();
  v.model->eval();
  double hits = 0.0, n = 0.0;
  const bool probs = v.loss->type_name() == "BCELoss" || v.loss->type_name() == "MSELoss";
  std::optional<AutocastGuard> ac;  // evaluated in the precision it trained in
  if (v.trainer.autocast()) ac.emplace(*v.trainer.autocast());
  for (const nn::Batch& b : *v.test) {
    Tensor out = (*v.model)(b.x.to(v.device));
    const Tensor y = b.y.to(v.device);
    if (v.task == Task::Classes) {
      hits += sum(eq(argmax(out, 1), y).to(kFloat64)).item<double>();
    } else {
      Tensor pred = (out.reshape({-1}) > (probs ? 0.5 : 0.0)).to(kFloat32);
      hits += sum(eq(pred, y.reshape({-1})).to(kFloat64)).item<double>();
    }
    n += static_cast<double>(b.size());
  }
  v.model->train(was);
  return n > 0 ? hits / n : kNaN;
}

}  // namespace

RunResult run_variant(const nn::BugSet& bugs, const Options& o,
                      const std::function<void(const std::string&)>& progress) {
  Variant v = build(bugs, o);
  return run_variant(v, o, progress);
}

RunResult run_variant(Variant& v, const Options& o, const std::function<void(const std::string&)>& progress) {
  const auto t0 = Clock::now();
  const nn::BugSet& bugs = v.bugs;
  RunResult r;
  r.id = v.id;
  r.reference = v.task == Task::Footwear ? "clean-footwear" : "clean";
  if (bugs.empty()) r.id = r.reference;
  std::set<std::string> intended;
  for (Bug b : bugs.list())
    for (const auto& c : nn::bug_info(b).caught_by) intended.insert(c);
  r.intended.assign(intended.begin(), intended.end());
  r.title = bugs.empty() ? "clean reference" : "";
  for (Bug b : bugs.list()) r.title += (r.title.empty() ? "" : "; ") + nn::bug_info(b).title;
  Report& rep = r.report;
  auto say = [&](const std::string& s) {
    if (progress) progress(r.id + ": " + s);
  };

  // The data checks (D1-D10, D12-D16) on the loader the model will train from, the pre-training gate
  // (W2) on its first batch, training with the monitor (W3) attached and the end-of-run
  // diagnoses (with the first 1000 test examples for M18): debug::diagnose, the pipeline a
  // user's own model goes through. The footwear task trains without evaluation (its test
  // loader still serves D10, D13-D16 and M18).
  DiagnoseOptions d;
  d.num_classes = v.task == Task::Classes ? v.num_classes : 2;
  d.gate = o.gate;
  d.baseline = false;   // M15 runs in gradsleuth doctor only, on a fresh copy of the recipe
  d.dead_pass = false;  // as does M7's pass over the training data, after training
  d.gate_options.model.overfit_steps = o.overfit_steps;
  d.monitor.every = o.monitor_every;
  d.trainer = v.trainer;
  d.epochs = v.trainer.epochs();
  d.max_steps = v.trainer.max_steps();
  d.validate = v.task == Task::Classes;
  d.split_examples = 2000;
  d.sample_examples = 1000;
  d.val_split = "test";
  d.progress = say;
  RunReport run = diagnose(*v.model, *v.loss, *v.optimizer, *v.train, v.test.get(), v.normalizer.get(), d);
  rep = run.findings;
  r.stopped = run.stopped;
  r.steps = run.steps;
  r.history = run.history;
  const auto& sl = r.history.step_losses;
  if (!sl.empty()) {
    const size_t k = std::min<size_t>(20, sl.size());
    double s = 0.0;
    for (size_t i = sl.size() - k; i < sl.size(); ++i) s += sl[i];
    r.final_loss = s / static_cast<double>(k);
  }
  if (r.stopped.empty()) r.test_accuracy = test_accuracy(v);
  r.fired = rep.fired_checks();
  for (const auto& c : r.fired) r.caught = r.caught || intended.count(c) > 0;
  r.seconds = since(t0);
  return r;
}

namespace {
std::string num(double v) { return detail::decimals3(v); }
// Text wrapped at word ends to `width` columns, each line starting with `indent`.
std::string wrap(const std::string& text, size_t width, const std::string& indent) {
  std::istringstream in(text);
  std::string out, line = indent;
  for (std::string w; in >> w;) {
    if (line.size() > indent.size() && line.size() + 1 + w.size() > width) {
      out += line + "\n";
      line = indent;
    }
    line += (line.size() > indent.size() ? " " : "") + w;
  }
  return out + line + "\n";
}
}  // namespace

std::string graph_dot(const nn::BugSet& bugs, const Options& o, int64_t examples, DotOptions opts) {
  Variant v = build(bugs, o);
  const nn::Batch b = v.train->batch(0, 0);
  const int64_t n = std::min<int64_t>(b.x.size(0), examples);
  Tensor loss;
  SavedCapture saved;
  {
    GraphModuleTags tags(*v.model);
    loss = (*v.loss)((*v.model)(b.x.narrow(0, 0, n)), b.y.narrow(0, 0, n));
  }
  saved.stop();
  return to_dot(loss, opts.params(v.model->named_parameters()).saved(&saved));
}

std::vector<Bug> catalog_for(const std::string& model) {
  std::vector<Bug> out;
  for (const nn::BugInfo& b : nn::bug_catalog())
    if (std::find(b.recipes.begin(), b.recipes.end(), model) != b.recipes.end()) out.push_back(b.id);
  GS_CHECK(!out.empty(), "zoo", "no catalogued bug has a '", model, "' recipe (models: mlp, cnn)");
  return out;
}

Result run(const std::vector<Bug>& bugs, const Options& o, const std::function<void(const Progress&)>& progress) {
  check_recipe(bugs, o.model);  // before the clean reference trains, not after
  for (Bug b : bugs)  // likewise the 16-bit recipes, which train on the CPU only
    GS_CHECK(o.device.is_cpu() || precision_of(nn::BugSet{b}, o) == "float32", "zoo", "bug ", nn::bug_code(b),
             " trains in ", precision_of(nn::BugSet{b}, o),
             ", which runs on the CPU only (the CUDA backend refuses 16-bit ops): use --device cpu");
  GS_CHECK(o.device.is_cpu() || o.precision == "float32", "zoo", "the ", o.precision,
           " recipe trains on the CPU only (the CUDA backend refuses 16-bit ops): use --device cpu");
  const auto t0 = Clock::now();
  Result res;
  res.options = o;
  bool footwear = false;
  for (Bug b : bugs) footwear = footwear || footwear_bug(nn::BugSet{b});
  const size_t total = bugs.size() + 1 + (footwear ? 1 : 0);
  size_t done = 0;
  auto step = [&](const RunResult& r) {
    ++done;
    if (!progress) return;
    std::ostringstream os;
    const CauseAnalysis& a = r.report.diagnosis();
    os << r.id << ": "
       << (r.id.rfind("clean", 0) == 0 ? ""
           : r.caught                  ? "caught"
                                       : "MISSED")
       << (a.lead ? std::string(r.id.rfind("clean", 0) == 0 ? "" : ", ") + "lead " + a.lead->check : std::string())
       << (r.fired.empty() ? " (no check fired)" : " (fired: " + join(r.fired) + ")") << ", test accuracy "
       << pct(r.test_accuracy) << ", " << fmt_num(r.seconds) << " s";
    progress(Progress{done, total, &r, os.str()});
  };
  // The variants, in the matrix's order: the clean reference(s), then each bug.
  struct Task {
    nn::BugSet bugs;
    Options o;
    RunResult* out;
  };
  std::vector<Task> tasks = {{{}, o, &res.clean}};
  if (footwear) {
    Options fo = o;
    fo.footwear = true;
    tasks.push_back({{}, fo, &res.clean_footwear});
  }
  res.bugs.resize(bugs.size());
  for (size_t i = 0; i < bugs.size(); ++i) tasks.push_back({nn::BugSet{bugs[i]}, o, &res.bugs[i]});
  // Each variant builds its own data, model, optimizer and checks, seeds its own thread's generator
  // (build) and keeps its warnings and observers to its thread, so o.jobs of them train at once
  // with the results they have alone; the CUDA backend trains one at a time.
  const size_t jobs = std::min(tasks.size(), static_cast<size_t>(o.device.is_cpu() ? std::max(1, o.jobs) : 1));
  std::atomic<size_t> next{0};
  std::mutex done_mutex;  // step() and its progress callback: one variant at a time
  std::vector<std::exception_ptr> failed(tasks.size());
  auto work = [&] {
    for (size_t i = next++; i < tasks.size(); i = next++) {
      try {
        *tasks[i].out = run_variant(tasks[i].bugs, tasks[i].o);
      } catch (...) {
        failed[i] = std::current_exception();
        next = tasks.size();  // the others finish the variant they are on, and start no other
        continue;
      }
      std::lock_guard<std::mutex> lock(done_mutex);
      step(*tasks[i].out);
    }
  };
  if (jobs <= 1) {
    work();
  } else {
#ifdef _OPENMP
    const int threads = omp_get_max_threads();  // a new thread starts from OMP_NUM_THREADS, not this thread's setting
#endif
    std::vector<std::thread> pool;
    for (size_t j = 0; j < jobs; ++j)
      pool.emplace_back([&] {
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
        work();
      });
    for (std::thread& t : pool) t.join();
  }
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
  res.seconds = since(t0);
  return res;
}

std::string matrix(const Result& r) {
  std::ostringstream os;
  os << "Detection matrix: " << r.bugs.size() << " bug" << (r.bugs.size() == 1 ? "" : "s") << ", " << r.options.steps
     << " steps each on " << r.options.train_examples << " training images (test: " << r.options.test_examples
     << " images), model " << r.options.model << (r.options.device.is_cpu() ? "" : " on " + r.options.device.str())
     << "\n\n";
  os << pad("bug", 5) << pad("intended", 10) << pad("caught", 7) << pad("test acc (ref)", 21) << pad("loss", 8)
     << "fired\n";
  auto ref_of = [&](const RunResult& b) -> const RunResult& {
    return b.reference == "clean-footwear" ? r.clean_footwear : r.clean;
  };
  int caught = 0;
  for (const RunResult& b : r.bugs) {
    const RunResult& ref = ref_of(b);
    caught += b.caught ? 1 : 0;
    os << pad(b.id, 5) << pad(join(b.intended, ","), 10) << pad(b.caught ? "yes" : "NO", 7)
       << pad(pct(b.test_accuracy) + " (" + (&ref == &r.clean_footwear ? "fw " : "") + pct(ref.test_accuracy) + ")", 21)
       << pad(num(b.final_loss), 8) << (b.fired.empty() ? "-" : join(b.fired, " ")) << "\n";
    os << wrap(b.title + (b.stopped.empty() ? "" : " [stopped: " + b.stopped + "]"), 100, "     ");
    // The diagnosis's lead (debug::analyse_causes): the cause, what confirmed it, what it explains.
    const CauseAnalysis& a = b.report.diagnosis();
    if (a.lead) {
      const Lead& l = *a.lead;
      const Finding& f = b.report.findings()[l.index];
      const std::string where = f.location();
      const size_t k = l.explains.size();
      os << wrap(std::string(l.confirmed ? "lead: " : "lead (unconfirmed): ") + "[" + f.check + " " +
                     severity_name(f.severity) + "] " + f.title + (where.empty() ? "" : " (" + where + ")") +
                     (f.step >= 0    ? " at step " + std::to_string(f.step)
                      : f.end_of_run ? " at the end"
                                     : " before training") +
                     (k ? "; explains " + std::to_string(k) + " other finding" + (k == 1 ? "" : "s") : "") +
                     (a.roots.size() > 1 ? "; " + std::to_string(a.roots.size() - 1) + " unrelated finding" +
                                               (a.roots.size() == 2 ? "" : "s")
                                         : ""),
                 100, "     ");
    }
  }
  // The legend: every check id the matrix shows, with its name, wrapped at ~100 columns.
  std::set<std::string> shown;
  for (const RunResult* x : {&r.clean, &r.clean_footwear}) shown.insert(x->fired.begin(), x->fired.end());
  for (const RunResult& b : r.bugs) {
    shown.insert(b.intended.begin(), b.intended.end());
    shown.insert(b.fired.begin(), b.fired.end());
  }
  std::vector<std::string> ids(shown.begin(), shown.end());
  std::sort(ids.begin(), ids.end(), [](const std::string& x, const std::string& y) {
    return x[0] != y[0] ? x[0] < y[0] : std::atoi(x.c_str() + 1) < std::atoi(y.c_str() + 1);
  });
  os << "\ntest acc (ref): the bug's test accuracy, and in brackets the clean reference's it is compared with"
     << (r.clean_footwear.id.empty() ? ""
                                     : "\n  (fw: the clean footwear model; B01, B09 and B40 train the footwear task)")
     << "\n";
  os << "\nchecks (id name; every check with its rule: gradsleuth checks --list):\n";
  std::string line = " ";
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string item = " " + check_label(ids[i]) + (i + 1 < ids.size() ? ";" : "");
    if (line.size() + item.size() > 100 && line.size() > 1) {
      os << line << "\n";
      line = " ";
    }
    line += item;
  }
  if (line.size() > 1) os << line << "\n";
  auto labels = [](const std::vector<std::string>& v) {
    std::vector<std::string> l;
    for (const std::string& x : v) l.push_back(check_label(x));
    return join(l, ", ");
  };
  os << "\nclean reference: test accuracy " << pct(r.clean.test_accuracy) << ", final loss " << num(r.clean.final_loss)
     << ", checks fired: " << (r.clean.fired.empty() ? "none" : labels(r.clean.fired)) << "\n";
  if (!r.clean_footwear.id.empty())
    os << "clean footwear reference: test accuracy " << pct(r.clean_footwear.test_accuracy) << ", final loss "
       << num(r.clean_footwear.final_loss)
       << ", checks fired: " << (r.clean_footwear.fired.empty() ? "none" : labels(r.clean_footwear.fired)) << "\n";
  os << caught << "/" << r.bugs.size() << " bugs caught by their intended checks; " << num(r.seconds) << " s\n";
  return os.str();
}

namespace {
std::string run_json(const RunResult& b, bool bug) {
  std::ostringstream os;
  os << "{";
  if (bug)
    os << "\"id\":" << json_str(b.id) << ",\"title\":" << json_str(b.title) << ",\"intended\":" << str_list(b.intended)
       << ",";
  os << "\"fired\":" << str_list(b.fired);
  if (bug) os << ",\"caught\":" << (b.caught ? "true" : "false") << ",\"reference\":" << json_str(b.reference);
  os << ",\"test_accuracy\":" << json_num(b.test_accuracy) << ",\"final_loss\":" << json_num(b.final_loss)
     << ",\"seconds\":" << json_num(b.seconds) << ",\"steps\":" << b.steps << ",\"stopped\":" << json_str(b.stopped)
     << ",\"lead\":" << b.report.lead_json() << ",\"findings\":" << b.report.json() << "}";
  return os.str();
}
}  // namespace

std::string json(const Result& r) {
  std::ostringstream os;
  os << "{\"options\":{\"steps\":" << r.options.steps << ",\"train_examples\":" << r.options.train_examples
     << ",\"test_examples\":" << r.options.test_examples << ",\"model\":" << json_str(r.options.model)
     << ",\"device\":" << json_str(r.options.device.str()) << ",\"seed\":" << r.options.seed
     << "},\"clean\":" << run_json(r.clean, false);
  if (!r.clean_footwear.id.empty()) os << ",\"clean_footwear\":" << run_json(r.clean_footwear, false);
  os << ",\"bugs\":[";
  for (size_t i = 0; i < r.bugs.size(); ++i) os << (i ? "," : "") << run_json(r.bugs[i], true);
  int caught = 0;
  for (const auto& b : r.bugs) caught += b.caught ? 1 : 0;
  os << "],\"caught\":" << caught << ",\"seconds\":" << json_num(r.seconds) << "}";
  return os.str();
}

}  // namespace gradsleuth::debug::zoo
