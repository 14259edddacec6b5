// run_program(): a Program (debug/corpus/program.h) written out as the user's script: the data made
// and split, the pipeline, the model, the loss, the optimizer and its schedule, and the loop through
// debug::Session or debug::diagnose(); the outcome measured on the held-out test split.
#include "debug/corpus/program.h"

#include "debug/corpus/data.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>

#include "core/autocast.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/ops.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace gradsleuth::debug::corpus {
namespace {

using Rng = std::mt19937_64;
double uniform(Rng& g) { return std::uniform_real_distribution<double>(0.0, 1.0)(g); }

int64_t outputs_of(const DataSpec& d) {
  return d.task == Task::Multiclass || d.task == Task::Multilabel ? d.classes : 1;
}
// ---- the schedules the library does not ship (user code, as in the references) -------------------

// One-cycle (Smith and Topin): linear warm-up from lr/25 to lr over `up` steps, then cosine down to lr/1e4.
class OneCycle : public optim::LRScheduler {
 public:
  OneCycle(optim::Optimizer& o, int64_t total, double pct = 0.3) : LRScheduler(o), total_(total), up_(0) {
    up_ = std::max<int64_t>(1, static_cast<int64_t>(pct * static_cast<double>(total)));
    start();
  }
  double lr_at(int64_t t, double base) const override {
    if (t < up_) return base / 25.0 + (base - base / 25.0) * static_cast<double>(t) / static_cast<double>(up_);
    const double p =
        std::min(1.0, static_cast<double>(t - up_) / static_cast<double>(std::max<int64_t>(1, total_ - up_)));
    return base / 1e4 + (base - base / 1e4) * (1 + std::cos(M_PI * p)) / 2;
  }

 private:
  int64_t total_, up_;
};

// Linear decay to zero over `total` steps (torch's LinearLR to end_factor 0, or a polynomial of power 1).
class LinearDecay : public optim::LRScheduler {
 public:
  LinearDecay(optim::Optimizer& o, int64_t total) : LRScheduler(o), total_(total) { start(); }
  double lr_at(int64_t t, double base) const override {
    return base * std::max(0.0, 1.0 - static_cast<double>(t) / static_cast<double>(total_ + 1));
  }

 private:
  int64_t total_;
};

// lr = base * gamma^t (torch's ExponentialLR).
class Exponential : public optim::LRScheduler {
 public:
  Exponential(optim::Optimizer& o, double gamma) : LRScheduler(o), gamma_(gamma) { start(); }
  double lr_at(int64_t t, double base) const override { return base * std::pow(gamma_, static_cast<double>(t)); }

 private:
  double gamma_;
};

// ---- the model ------------------------------------------------------------------------------------

nn::ModulePtr activation(const std::string& a) {
  if (a == "relu") return std::make_shared<nn::ReLU>();
  if (a == "leaky_relu") return std::make_shared<nn::LeakyReLU>(0.01);
  if (a == "gelu") return std::make_shared<nn::GELU>();
  if (a == "tanh") return std::make_shared<nn::Tanh>();
  if (a == "sigmoid") return std::make_shared<nn::Sigmoid>();
  if (a == "identity") return std::make_shared<nn::Identity>();
  if (a == "softmax") return std::make_shared<nn::Softmax>(1);
  throw Error("corpus program", "unknown activation '" + a + "' (relu, leaky_relu, gelu, tanh, sigmoid, identity)");
}

void init_layer(nn::Module& m, const std::string& scheme, const std::string& act) {
  for (auto& [name, p] : m.named_parameters(false)) {
    if (name == "weight" && p.dim() >= 2) {
      if (scheme == "kaiming") {
        nn::init::kaiming_normal_(p, act == "leaky_relu" ? 0.01 : 0.0);
      } else if (scheme == "xavier") {
        const double gain = act == "tanh" ? 5.0 / 3.0 : act == "relu" ? std::sqrt(2.0) : 1.0;
        nn::init::xavier_uniform_(p, gain);
      } else if (scheme == "zeros") {
        nn::init::zeros_(p);
      } else if (scheme == "normal1") {
        nn::init::normal_(p, 0.0, 1.0);
      } else if (scheme == "tiny") {
        nn::init::normal_(p, 0.0, 1e-4);
      } else if (scheme == "constant") {
        nn::init::constant_(p, 0.05);
      } else if (scheme != "default") {
        throw Error("corpus program", "unknown initialisation '" + scheme + "'");
      }
    } else if (name == "bias" && scheme != "default") {
      nn::init::zeros_(p);
    }
  }
}

struct Built {
  std::shared_ptr<nn::Sequential> model;
  std::vector<nn::ModulePtr> body;  // the layers before the head (fine-tuning's frozen part)
  nn::ModulePtr head;
  std::vector<std::shared_ptr<nn::BatchNormBase>> body_bn;
  nn::ModulePtr first;  // the first hidden layer
};

Built build_model(const Program& p, int64_t outputs) {
  const ModelSpec& m = p.model;
  Built b;
  std::vector<nn::ModulePtr> layers;
  const bool remove_bias = m.fault_bias < 0;
  // BatchNorm's shift makes the bias of the layer before it redundant: that layer has none (as in
  // torchvision's models) unless a fault adds one.
  const bool hidden_bias = !remove_bias && (m.norm != "batch" || m.fault_bias > 0);
  auto linear = [&](int64_t in, int64_t out) { return std::make_shared<nn::Linear>(in, out, hidden_bias); };
  auto act_for = [&](size_t i) {
    return static_cast<int64_t>(i) == m.fault_layer && !m.fault_activation.empty() ? m.fault_activation : m.activation;
  };
  auto init_for = [&](size_t i) {
    return static_cast<int64_t>(i) == m.fault_layer && !m.fault_init.empty() ? m.fault_init : m.init;
  };
  if (m.arch == "cnn") {
    int64_t c_in = 1, hw = 12;
    for (size_t i = 0; i < m.hidden.size(); ++i) {
      auto conv = std::make_shared<nn::Conv2d>(nn::Conv2dOptions(c_in, m.hidden[i], 3).padding(1).bias(hidden_bias));
      init_layer(*conv, init_for(i), act_for(i));
      if (!b.first) b.first = conv;
      layers.push_back(conv);
      if (m.norm == "batch") {
        auto bn = std::make_shared<nn::BatchNorm2d>(m.hidden[i]);
        b.body_bn.push_back(bn);
        layers.push_back(bn);
      }
      layers.push_back(activation(act_for(i)));
      layers.push_back(std::make_shared<nn::MaxPool2d>(2));
      c_in = m.hidden[i];
      hw /= 2;
    }
    layers.push_back(std::make_shared<nn::Flatten>());
    auto fc = std::make_shared<nn::Linear>(c_in * hw * hw, m.fc, !remove_bias);
    init_layer(*fc, m.init, m.activation);
    layers.push_back(fc);
    layers.push_back(activation(m.activation));
  } else {
    int64_t in = is_image(p.data) ? 144 : p.data.features;
    if (is_image(p.data)) layers.push_back(std::make_shared<nn::Flatten>());
    for (size_t i = 0; i < m.hidden.size(); ++i) {
      const int64_t h = m.hidden[i];
      const bool residual = m.arch == "resmlp" && i > 0 && h == in;
      auto lin = linear(in, h);
      init_layer(*lin, init_for(i), act_for(i));
      if (!b.first) b.first = lin;
      std::vector<nn::ModulePtr> block{lin};
      if (m.norm == "batch") {
        auto bn = std::make_shared<nn::BatchNorm1d>(h);
        b.body_bn.push_back(bn);
        block.push_back(bn);
      } else if (m.norm == "layer") {
        block.push_back(std::make_shared<nn::LayerNorm>(std::vector<int64_t>{h}));
      }
      block.push_back(activation(act_for(i)));
      if (residual) {
        layers.push_back(std::make_shared<nn::Residual>(std::make_shared<nn::Sequential>(block)));
      } else {
        layers.insert(layers.end(), block.begin(), block.end());
      }
      if (m.dropout > 0 && i + 1 < m.hidden.size()) layers.push_back(std::make_shared<nn::Dropout>(m.dropout));
      in = h;
    }
  }
  if (m.dropout > 0) layers.push_back(std::make_shared<nn::Dropout>(m.dropout));
  b.body = layers;
  const int64_t last = m.arch == "cnn" ? m.fc : m.hidden.empty() ? p.data.features : m.hidden.back();
  auto head = std::make_shared<nn::Linear>(last, outputs, !remove_bias);
  init_layer(*head, m.init == "kaiming" ? "xavier" : m.init, "identity");
  if (!m.fault_init.empty() && m.fault_layer == static_cast<int64_t>(m.hidden.size()))
    init_layer(*head, m.fault_init, "identity");
  b.head = head;
  layers.push_back(head);
  if (p.loss.kind == "nll") layers.push_back(std::make_shared<nn::LogSoftmax>(1));
  if (!m.fault_add_activation.empty()) layers.push_back(activation(m.fault_add_activation));
  b.model = std::make_shared<nn::Sequential>(layers);
  return b;
}

std::vector<Tensor> params_of(const std::vector<nn::ModulePtr>& ms) {
  std::vector<Tensor> out;
  for (const auto& m : ms)
    for (const Tensor& t : m->parameters()) out.push_back(t);
  return out;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const OptimSpec& o, std::vector<optim::ParamGroup> groups) {
  if (o.kind == "sgd" || o.kind == "momentum" || o.kind == "nesterov") {
    optim::SGDOptions so(o.lr);
    so.momentum(o.kind == "sgd" ? 0.0 : 0.9).nesterov(o.kind == "nesterov").weight_decay(o.weight_decay);
    return std::make_unique<optim::SGD>(groups, so);
  }
  if (o.kind == "adam")
    return std::make_unique<optim::Adam>(groups, optim::AdamOptions(o.lr).weight_decay(o.weight_decay));
  if (o.kind == "adamw")
    return std::make_unique<optim::AdamW>(groups, optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
  if (o.kind == "rmsprop")
    return std::make_unique<optim::RMSprop>(groups, optim::RMSpropOptions(o.lr).weight_decay(o.weight_decay));
  throw Error("corpus program", "unknown optimizer '" + o.kind + "' (sgd, momentum, nesterov, adam, adamw, rmsprop)");
}

// The pretraining of a fine-tuning program: body + a temporary head on the classes folded in
// pairs, a few epochs with Adam; nothing is checked (it stands for weights downloaded).
void pretrain(Built& b, const Program& p, const Tensor& x, const Tensor& y, uint64_t seed) {
  const int64_t last = p.model.arch == "cnn" ? p.model.fc : p.model.hidden.back();
  const int64_t groups = std::max<int64_t>(p.model.pretrain_groups, 2);
  auto tmp_head = std::make_shared<nn::Linear>(last, groups);
  std::vector<nn::ModulePtr> layers = b.body;
  layers.push_back(tmp_head);
  nn::Sequential net(layers);
  optim::Adam opt(net.parameters(), optim::AdamOptions(2e-3));
  Tensor yc = y.contiguous();
  std::vector<int64_t> f(static_cast<size_t>(yc.size(0)));
  for (size_t i = 0; i < f.size(); ++i) f[i] = yc.data_ptr<int64_t>()[i] % groups;
  Tensor folded = tensor(f, {yc.size(0)});
  auto ds = std::make_shared<nn::TensorDataset>(x, folded);
  nn::DataLoader loader(ds, nn::DataLoaderOptions().batch_size(32).shuffle(true).seed(seed + 101));
  nn::CrossEntropyLoss ce;
  net.train();
  for (int e = 0; e < 3; ++e)
    for (const nn::Batch& bt : loader) {
      opt.zero_grad();
      ce(net(bt.x), bt.y).backward();
      opt.step();
    }
}

// (N) int64 class indices -> (N, C) float32 one-hot rows.
Tensor one_hot(const Tensor& y, int64_t C) {
  Tensor yc = y.contiguous();
  const int64_t n = yc.size(0);
  std::vector<float> v(static_cast<size_t>(n * C), 0.0f);
  const int64_t* p = yc.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i * C + p[i])] = 1.0f;
  return tensor(v, {n, C});
}

// MSE against one-hot rows of class-index labels, as a user writes it as a loss of their own
// (mse(out, one_hot(y))): the checks hand it the loader's labels, as they do any loss.
class OneHotMSELoss final : public nn::Loss {
 public:
  OneHotMSELoss(int64_t classes, nn::Reduction r) : Loss("OneHotMSELoss"), classes_(classes), options_(r) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    const Tensor t = target.dtype() == kInt64 && target.dim() == 1 ? one_hot(target, classes_) : target;
    return nn::functional::mse_loss(input, t, options_);
  }
  nn::Reduction reduction() const override { return options_.reduction_; }

 private:
  int64_t classes_;
  nn::MSELossOptions options_;
};

// Images (N, 1, H, W) mirrored left to right.
Tensor flip_width(const Tensor& x) {
  const int64_t w = x.size(3);
  std::vector<int64_t> idx(static_cast<size_t>(w));
  for (int64_t i = 0; i < w; ++i) idx[static_cast<size_t>(i)] = w - 1 - i;
  return x.index_select(3, tensor(idx, {w}));
}

double metric_of(const Program& p, nn::Module& model, const Tensor& x, const Tensor& y) {
  if (x.size(0) == 0) return std::nan("");
  NoGradGuard ng;
  const bool was = model.is_training();
  model.eval();
  Tensor out = model(x);
  model.train(was);
  const Task t = p.data.task;
  if (t == Task::Multiclass) return optim::accuracy(out, y);
  if (t == Task::Binary || t == Task::Multilabel) {
    const double threshold = p.loss.kind == "bce_probs" ? 0.5 : 0.0;
    Tensor pred = gt(out, threshold).to(kFloat32);
    return eq(pred, y).to(kFloat32).mean().item_double();
  }
  Tensor err = sub(out, y);
  const double sse = mul(err, err).sum().item_double();
  Tensor c = sub(y, y.mean());
  const double sst = mul(c, c).sum().item_double();
  return 1.0 - sse / std::max(sst, 1e-12);
}

}  // namespace

const char* task_name(Task t) {
  switch (t) {
    case Task::Multiclass: return "multiclass";
    case Task::Binary: return "binary";
    case Task::Multilabel: return "multilabel";
    case Task::Regression: return "regression";
  }
  return "?";
}

std::string metric_name(const Program& p) {
  switch (p.data.task) {
    case Task::Multiclass:
    case Task::Binary: return "test accuracy";
    case Task::Multilabel: return "test label accuracy";
    case Task::Regression: return "test R^2";
  }
  return "test metric";
}

Outcome run_program(const Program& p, uint64_t seed, const RunOptions& ro) {
  const auto t0 = std::chrono::steady_clock::now();
  const DataSpec& d = p.data;
  const LoopSpec& L = p.loop;
  auto say = [&](const std::string& s) {
    if (ro.progress) ro.progress(p.name + ": " + s);
  };

  // ---- the data, as loaded ----
  LoadedData data = load_data(d);
  Tensor x_train = data.x_train, y_train = data.y_train, x_val = data.x_val, y_val = data.y_val;
  Tensor x_test = data.x_test, y_test = data.y_test;
  const auto n_train = static_cast<double>(x_train.size(0));
  auto reference = std::make_shared<nn::TensorDataset>(x_train, y_train, "train (as loaded)");

  // ---- the pipeline ----
  nn::Normalizer norm;
  if (d.standardise) {
    norm.fit(x_train, "train");
    x_train = norm.transform(x_train);
    if (d.fault_preprocess == "own") {
      x_val = nn::Normalizer().fit(x_val, "validation").transform(x_val);
      x_test = nn::Normalizer().fit(x_test, "test").transform(x_test);
    } else if (d.fault_preprocess != "raw") {
      x_val = norm.transform(x_val);
      x_test = norm.transform(x_test);
    }
  } else {
    x_train = div(x_train, 255.0);
    if (d.fault_preprocess != "raw") {
      x_val = div(x_val, 255.0);
      x_test = div(x_test, 255.0);
    }
  }
  if (d.fault_preprocess == "scaled") {
    x_val = div(x_val, 255.0);
    x_test = div(x_test, 255.0);
  }
  if (d.fault_misalign > 0) {  // inputs reordered without their labels in a share of the rows
    Rng mg(d.seed * 17 + 3);
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < x_train.size(0); ++i)
      if (uniform(mg) < d.fault_misalign) rows.push_back(i);
    std::vector<int64_t> to = rows;
    if (to.size() > 1) std::rotate(to.begin(), to.begin() + 1, to.end());
    std::vector<int64_t> perm(x_train.size(0));
    std::iota(perm.begin(), perm.end(), 0);
    for (size_t k = 0; k < rows.size(); ++k) perm[rows[k]] = to[k];
    x_train = x_train.index_select(0, tensor(perm, {static_cast<int64_t>(perm.size())}));
  }
  if (d.fault_augment_eval && d.augment == "noise") {
    Generator ag(d.seed + 99);
    x_val = add(x_val, mul(randn(x_val.shape(), {}, &ag), 0.5));
    x_test = add(x_test, mul(randn(x_test.shape(), {}, &ag), 0.5));
  }

  manual_seed(seed);
  const int64_t batch = L.batch_size > 0 ? L.batch_size : x_train.size(0);
  auto train_ds = std::make_shared<nn::TensorDataset>(x_train, y_train, "train");
  auto val_ds = std::make_shared<nn::TensorDataset>(x_val, y_val, "validation");
  nn::DataLoader train_loader(train_ds,
                              nn::DataLoaderOptions().batch_size(batch).shuffle(d.shuffle).seed(seed * 1000 + 1));
  nn::DataLoader val_loader(val_ds, nn::DataLoaderOptions().batch_size(256));
  const int64_t outputs = outputs_of(d);

  // ---- the model ----
  Built b = build_model(p, outputs);
  nn::Module& model = *b.model;
  if (p.model.pretrained) {
    say("pretraining the body");
    pretrain(b, p, x_train, d.task == Task::Multiclass ? y_train : y_train.to(kInt64).select(1, 0), seed);
    if (p.model.freeze_body)
      for (Tensor t : params_of(b.body)) t.requires_grad_(false);
  }

  // ---- the loss ----
  std::string loss_kind = p.loss.kind;
  if (loss_kind.empty())
    loss_kind = d.task == Task::Multiclass ? "ce" : d.task == Task::Regression ? "mse" : "bce_logits";
  const nn::Reduction red = p.loss.reduction == "sum" ? nn::Reduction::Sum : nn::Reduction::Mean;
  std::shared_ptr<nn::Loss> loss;
  if (loss_kind == "ce") {
    nn::CrossEntropyLossOptions co(red);
    co.label_smoothing(p.loss.label_smoothing);
    if (p.loss.class_weights) {
      const std::vector<int64_t>& counts = data.class_counts;
      std::vector<float> w(d.classes);
      for (int64_t c = 0; c < d.classes; ++c)
        w[c] = static_cast<float>(
            n_train / (static_cast<double>(d.classes) * std::max<double>(static_cast<double>(counts[c]), 1.0)));
      co.weight(tensor(w, {d.classes}));
    }
    loss = std::make_shared<nn::CrossEntropyLoss>(co);
  } else if (loss_kind == "nll") {
    loss = std::make_shared<nn::NLLLoss>(nn::NLLLossOptions(red));
  } else if (loss_kind == "bce_logits") {
    nn::BCEWithLogitsLossOptions bo(red);
    if (p.loss.class_weights) {
      const double pos = data.positives, neg = n_train - pos;
      bo.pos_weight(tensor(std::vector<float>{static_cast<float>(neg / std::max(pos, 1.0))}, {1}));
    }
    loss = std::make_shared<nn::BCEWithLogitsLoss>(bo);
  } else if (loss_kind == "bce_probs") {
    loss = std::make_shared<nn::BCELoss>(nn::BCELossOptions(red));
  } else if (loss_kind == "mse") {
    loss = std::make_shared<nn::MSELoss>(nn::MSELossOptions(red));
  } else if (loss_kind == "mse_onehot") {
    loss = std::make_shared<OneHotMSELoss>(d.classes, red);
  } else {
    throw Error("corpus program '" + p.name + "'", "unknown loss '" + loss_kind + "'");
  }

  // ---- the precision ----
  const std::string& prec = L.precision;
  if (prec != "float32" && prec != "bf16-autocast" && prec != "fp16-autocast" && prec != "bf16-weights")
    throw Error("corpus program '" + p.name + "'", "unknown precision '" + prec + "'");
  if (prec == "bf16-weights" && L.api != "own-loop")
    throw Error("corpus program '" + p.name + "'", "bf16-weights converts each batch in the program's own loop");
  if (prec == "bf16-weights") model.to(kBFloat16);  // in place: the groups below hold the bfloat16 parameters
  std::optional<DType> autocast_to;
  if (prec == "bf16-autocast") autocast_to = kBFloat16;
  if (prec == "fp16-autocast") autocast_to = kFloat16;
  std::unique_ptr<optim::GradScaler> scaler;
  if (prec == "fp16-autocast") scaler = std::make_unique<optim::GradScaler>();

  // ---- the optimizer ----
  std::vector<optim::ParamGroup> groups;
  std::vector<Tensor> body_params = params_of(b.body), head_params = b.head->parameters();
  if (p.optim.fault_first_outside && b.first) {
    std::vector<Tensor> keep;
    const auto first = b.first->parameters();
    for (const Tensor& t : body_params)
      if (std::none_of(first.begin(), first.end(), [&](const Tensor& f) { return f.is_same(t); })) keep.push_back(t);
    body_params = keep;
  }
  std::vector<Tensor> trainable_body;
  for (const Tensor& t : body_params)
    if (t.requires_grad()) trainable_body.push_back(t);
  if (p.optim.head_lr_mult != 1.0) {
    if (!trainable_body.empty()) groups.emplace_back(trainable_body, p.optim.lr, optim::ParamGroup::kInherit, "body");
    if (!p.optim.fault_head_outside)
      groups.emplace_back(head_params, p.optim.lr * p.optim.head_lr_mult, optim::ParamGroup::kInherit, "head");
  } else {
    std::vector<Tensor> all = trainable_body;
    if (!p.optim.fault_head_outside) all.insert(all.end(), head_params.begin(), head_params.end());
    groups.emplace_back(all);
  }
  auto opt = make_optimizer(p.optim, groups);
  opt->set_master_weights(prec == "bf16-weights");

  // ---- the schedule ----
  const int64_t steps_per_epoch =
      std::max<int64_t>(1, (x_train.size(0) + batch - 1) / batch / std::max<int64_t>(1, L.accumulate));
  const ScheduleSpec& S = p.schedule;
  const bool step_per_batch = S.fault_stepped == "batch" ? true : S.fault_stepped == "epoch" ? false : S.per_batch;
  const int64_t units = S.per_batch ? L.epochs * steps_per_epoch : L.epochs;  // the schedule's designed length
  std::unique_ptr<optim::LRScheduler> sched;
  std::unique_ptr<optim::ReduceLROnPlateau> plateau;
  if (S.kind == "step") {
    sched = std::make_unique<optim::StepLR>(*opt, S.per_batch ? S.step_size * steps_per_epoch : S.step_size, S.gamma);
  } else if (S.kind == "cosine") {
    sched = std::make_unique<optim::CosineAnnealingLR>(*opt, units);
  } else if (S.kind == "warmup_cosine") {
    // A run shorter than the warm-up (a mutant with less data) ends in it, its cosine one step long.
    const int64_t warmup = std::min<int64_t>(S.warmup, std::max<int64_t>(units - 1, 1));
    sched = std::make_unique<optim::LinearWarmup>(
        *opt, warmup, 0.1, std::make_unique<optim::CosineAnnealingLR>(*opt, std::max<int64_t>(units - warmup, 1)));
  } else if (S.kind == "onecycle") {
    sched = std::make_unique<OneCycle>(*opt, units);
  } else if (S.kind == "linear") {
    sched = std::make_unique<LinearDecay>(*opt, units);
  } else if (S.kind == "exponential") {
    sched = std::make_unique<Exponential>(*opt, S.gamma);
  } else if (S.kind == "plateau") {
    plateau =
        std::make_unique<optim::ReduceLROnPlateau>(*opt, optim::ReduceLROnPlateauOptions().patience(1).factor(S.gamma));
  } else if (S.kind != "none") {
    throw Error("corpus program '" + p.name + "'", "unknown schedule '" + S.kind + "'");
  }

  Outcome out;
  debug::DiagnoseOptions dopts = ro.diagnose;
  dopts.num_classes = d.task == Task::Multiclass ? d.classes : -1;
  if (!dopts.progress && ro.progress) dopts.progress = [&](const std::string& s) { say(s); };
  debug::DiagnoseData dd;
  dd.train = &train_loader;
  dd.val = d.use_validation ? &val_loader : nullptr;
  dd.normalizer = d.standardise ? &norm : nullptr;
  dd.reference = reference.get();

  if (L.api == "diagnose") {
    dopts.epochs = L.epochs;
    dopts.trainer = dopts.trainer.clip_grad_norm(L.clip_norm).autocast(autocast_to).grad_scaler(scaler.get());
    if (ro.checks) {
      say("diagnose()");
      out.report = debug::diagnose(model, *loss, *opt, train_loader, dd.val, dd.normalizer, dopts);
    } else {
      optim::TrainerOptions to = dopts.trainer;
      to.epochs(L.epochs);
      optim::Trainer tr(model, *opt, to);
      tr.fit(train_loader, nullptr);
    }
    out.epochs = L.epochs;
    out.steps = out.report.steps;
    if (!out.report.history.step_losses.empty()) {
      const auto& sl = out.report.history.step_losses;
      const size_t k = std::min<size_t>(sl.size(), static_cast<size_t>(steps_per_epoch));
      out.train_loss = std::accumulate(sl.end() - k, sl.end(), 0.0) / static_cast<double>(k);
    }
  } else {
    std::unique_ptr<debug::Session> session;
    if (ro.checks) session = std::make_unique<debug::Session>(model, *loss, *opt, dd, dopts);
    if (session && scaler) session->watch(*scaler);
    optim::EarlyStopping stopper(std::max<int64_t>(L.patience, 1));
    Generator aug(seed * 7 + 1);
    std::gamma_distribution<double> mix_a(std::max(d.mixup, 1e-3), 1.0);
    Rng mix_rng(seed + 5);
    const std::vector<Tensor> clip_params = opt->param_groups().empty() ? std::vector<Tensor>() : [&] {
      std::vector<Tensor> ps;
      for (const auto& gr : opt->param_groups()) ps.insert(ps.end(), gr.params.begin(), gr.params.end());
      return ps;
    }();
    try {
      for (int64_t e = 0; e < L.epochs; ++e) {
        if (!(L.fault_eval_left_on && e > 0)) model.train();
        if (p.model.frozen_bn_eval)
          for (auto& bn : b.body_bn) bn->eval();
        double sum = 0;
        int64_t n = 0, micro = 0;
        if (!L.fault_no_zero_grad) opt->zero_grad();
        for (const nn::Batch& bt : train_loader) {
          Tensor x = bt.x, y = bt.y;
          if (d.augment == "noise") x = add(x, mul(randn(x.shape(), {}, &aug), 0.3));
          if (d.augment == "flip" && is_image(d) && uniform(mix_rng) < 0.5) x = flip_width(x);
          if (d.mixup > 0 && d.task == Task::Multiclass) {
            const double a = mix_a(mix_rng), bb = std::gamma_distribution<double>(d.mixup, 1.0)(mix_rng);
            const double lam = a / (a + bb);
            Tensor perm = randperm(x.size(0), &aug);
            x = add(mul(x, lam), mul(x.index_select(0, perm), 1 - lam));
            Tensor oh = one_hot(bt.y, d.classes);
            y = add(mul(oh, lam), mul(oh.index_select(0, perm), 1 - lam));
          }
          if (prec == "bf16-weights") x = x.to(kBFloat16);
          Tensor l;
          {
            std::optional<AutocastGuard> ac;
            if (autocast_to) ac.emplace(*autocast_to);
            l = (*loss)(model(x), y);
          }
          sum += l.item_double();
          ++n;
          Tensor lb = l;
          if (p.loss.scale != 1.0) lb = mul(lb, p.loss.scale);
          if (p.loss.prior > 0) {  // the prior's term, once over the training set
            Tensor prior;
            for (const auto& [name, w] : model.named_parameters())
              if (w.dim() >= 2)
                prior = prior.defined() ? add(prior, gradsleuth::sum(mul(w, w))) : gradsleuth::sum(mul(w, w));
            if (prior.defined()) lb = add(lb, mul(prior, 0.5 * p.loss.prior * p.loss.fault_prior_factor / n_train));
          }
          if (L.accumulate > 1 && !L.fault_accumulate_unscaled) lb = div(lb, static_cast<double>(L.accumulate));
          (scaler ? scaler->scale(lb) : lb).backward();
          if (++micro < L.accumulate) continue;
          micro = 0;
          if (scaler && L.clip_norm > 0) scaler->unscale_(*opt);  // the true gradients are clipped
          if (L.clip_norm > 0) optim::clip_grad_norm_(clip_params, L.clip_norm);
          if (scaler) {
            scaler->step(*opt);
            scaler->update();
          } else {
            opt->step();
          }
          if (session && L.accumulate > 1) session->step(l);
          if (!L.fault_no_zero_grad) opt->zero_grad();
          if (sched && step_per_batch) sched->step();
        }
        out.train_loss = sum / std::max<int64_t>(n, 1);
        out.epochs = e + 1;
        // the program's own validation, for early stopping and the plateau schedule
        double vloss = std::nan("");
        const bool own_val = d.use_validation && (L.patience > 0 || plateau);
        if (own_val) {
          NoGradGuard ng;
          if (!L.fault_train_mode_eval) model.eval();
          vloss = (*loss)(model(x_val), y_val).item_double();
          if (!L.fault_train_mode_eval && !L.fault_eval_left_on) model.train();
        }
        if (session) {
          if (own_val && L.fault_train_mode_eval)
            session->epoch(out.train_loss, vloss,
                           d.task == Task::Multiclass ? metric_of(p, model, x_val, y_val) : std::nan(""));
          else
            session->epoch();
        }
        if (sched && !step_per_batch) sched->step();
        if (plateau) plateau->step(d.use_validation ? vloss : out.train_loss);
        if (L.patience > 0 && stopper.step(d.use_validation ? vloss : out.train_loss)) break;
      }
    } catch (const std::exception& ex) {
      out.error = ex.what();
      if (session) session->error(ex);
    }
    if (session) out.report = session->finish();
    out.steps = out.report.steps;
  }
  out.metric = metric_of(p, model, x_test, y_test);
  out.val_metric = d.use_validation ? metric_of(p, model, x_val, y_val) : std::nan("");
  if (!std::isfinite(out.metric)) out.metric = d.task == Task::Regression ? -1.0 : 0.0;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace gradsleuth::debug::corpus
