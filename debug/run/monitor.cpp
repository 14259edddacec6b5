// The training monitor (W3): it attaches to a model, its optimizer and loss, and runs the per-step checks. See monitor.h.
#include "debug/run/monitor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/model/behaviour.h"
#include "debug/checks/data/data_checks.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/normalization.h"

namespace gradsleuth::debug {

namespace {
// A batch's fingerprint, cheap enough for every step: a 64-bit FNV-1a hash, over 32-bit words, of
// its shape and 64 of its values, spread evenly over the whole batch (so two batches of images that
// start with the same blank rows still differ), read in place for a contiguous float32 tensor on
// the host. Other tensors: the shape and the sums of the first and the last example. Eight bytes a
// step, however long the run.
uint64_t fingerprint(const Tensor& x) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* p, size_t n) {  // n: a multiple of 4 bytes
    for (size_t i = 0; i < n; i += 4) {
      uint32_t w = 0;
      std::memcpy(&w, static_cast<const unsigned char*>(p) + i, 4);
      h = (h ^ w) * 1099511628211ull;
    }
  };
  for (int64_t d : x.shape()) mix(&d, sizeof d);
  const int64_t n = x.numel();
  if (n == 0) return h;
  if (x.device().is_cpu() && x.dtype() == kFloat32 && x.is_contiguous()) {
    const float* p = x.data_ptr<float>();
    const int64_t k = std::min<int64_t>(n, 64);
    for (int64_t i = 0; i < k; ++i) mix(&p[i * (n - 1) / std::max<int64_t>(k - 1, 1)], sizeof(float));
    return h;
  }
  if (x.dim() >= 1 && x.size(0) >= 1 && x.is_floating_point()) {
    NoGradGuard ng;
    const double first = sum(x.narrow(0, 0, 1).to(kFloat64)).item<double>();
    const double last = sum(x.narrow(0, x.size(0) - 1, 1).to(kFloat64)).item<double>();
    mix(&first, sizeof first);
    mix(&last, sizeof last);
  }
  return h;
}
}  // namespace

namespace {

bool is_cross_entropy(const nn::Loss& l) { return l.type_name() == "CrossEntropyLoss"; }
bool is_nll(const nn::Loss& l) { return l.type_name() == "NLLLoss"; }
bool is_elementwise(const nn::Loss& l) {
  return l.type_name() == "MSELoss" || l.type_name() == "BCELoss" || l.type_name() == "BCEWithLogitsLoss";
}

// How many rows of the logits (B, C) have their largest value (the first, on ties) at the target
// class (B): read in place for float32 logits and int64 targets on the host.
int64_t correct_predictions(const Tensor& logits, const Tensor& target) {
  const int64_t B = logits.size(0), C = logits.size(1);
  if (logits.device().is_cpu() && target.device().is_cpu() && logits.dtype() == kFloat32 && logits.is_contiguous() &&
      target.is_contiguous() && C > 0) {
    const float* x = static_cast<const float*>(logits.raw_data());
    const int64_t* t = static_cast<const int64_t*>(target.raw_data());
    int64_t hits = 0;
    for (int64_t b = 0; b < B; ++b) {
      const float* row = x + b * C;
      int64_t best = 0;
      for (int64_t c = 1; c < C; ++c)
        if (row[c] > row[best] || (std::isnan(row[c]) && !std::isnan(row[best]))) best = c;  // NaN wins, as argmax's
      hits += best == t[b] ? 1 : 0;
    }
    return hits;
  }
  NoGradGuard ng;
  const Tensor hit = eq(argmax(logits.detach(), 1), target.to(logits.device()));
  return sum(hit.to(kInt64)).item<int64_t>();
}

// A loss of the user's own (an nn::Loss subclass the library does not know) that
// gets logits (B, C) and class indices (B): whatever its formula, the prediction
// must be scores over classes, not probabilities (L2) and not a ReLU's output
// (M3). Checks that depend on the formula (L4's log C, L5's ignore_index) are
// left to losses whose semantics are declared by their type.
bool takes_class_indices(const nn::Loss& l, const Tensor& input, const Tensor& target) {
  const std::string& t = l.type_name();
  if (t == "CrossEntropyLoss" || t == "NLLLoss" || t == "MSELoss" || t == "BCELoss" || t == "BCEWithLogitsLoss")
    return false;
  return input.defined() && target.defined() && input.is_floating_point() && target.dtype() == kInt64 &&
         input.dim() == 2 && target.dim() == 1 && input.size(0) == target.size(0) && input.size(1) >= 2;
}

int64_t ignore_index_of(const nn::Loss& l) {
  if (auto* ce = dynamic_cast<const nn::CrossEntropyLoss*>(&l)) return ce->options().ignore_index_;
  if (auto* nl = dynamic_cast<const nn::NLLLoss*>(&l)) return nl->options().ignore_index_;
  return -100;
}

}  // namespace

// ---- W3 ---------------------------------------------------------------------------------
Monitor::Monitor(nn::Module& model, optim::Optimizer& optimizer, nn::Loss* loss, MonitorOptions o)
    : model_(model), opt_(optimizer), loss_(loss), o_(o), broadcast_(o.broadcast), dead_(o.activations),
      saturation_(o.activations), norms_(o.optim), ratios_(o.optim), zero_(o.run), variance_(o.run), spread_(o.run), rows_(o.data), timer_(o.run) {
  // O5 and M2 are raised by the optimizer and the layers themselves (core
  // warnings): here they become findings.
  warnings_ = std::make_unique<WarningHandlerGuard>([this](const Warning& w) {
    Finding f;
    f.check = w.check.empty() ? "W3" : w.check;
    f.severity = Severity::Warning;
    f.module = w.where;
    f.step = step_now();
    const auto colon = w.message.find(": ");
    f.title = w.where + (colon == std::string::npos ? ": " + w.message : " " + w.message.substr(0, colon));
    // A gradient transform (clipping) that ran with no gradient present is O5's
    // other loop-order mistake; the optimizer's own O5 warning is accumulation.
    const bool transform = w.check == "O5" && w.where.rfind("clip_grad", 0) == 0;
    if (w.check == "O5")
      f.title = transform ? w.where + " ran with no gradient present (before backward() or right after zero_grad()): "
                                      "it changed nothing"
                          : "gradients accumulated across steps: zero_grad() was not called (" + w.where + ")";
    if (w.check == "M2") {
      f.title = w.where + " ran in training mode during an evaluation (no_grad)";
      m2_warned_.push_back(w.where);
    }
    f.cause = w.message;
    f.fix = transform         ? "call it between loss.backward() and optimizer.step()"
            : w.check == "O5" ? "call optimizer.zero_grad() before every backward()"
            : w.check == "M2" ? "call model.eval() before evaluating and model.train() afterwards"
                              : "";
    add(std::move(f));
  });
  broadcast_.attach(model_);
  broadcast_on_ = broadcast_.enable();
  dead_.attach(model_);
  saturation_.attach(model_);
  dead_.set_active(true);  // the first step (initialisation) is always recorded
  saturation_.set_active(true);
  dead_.set_step(1);
  saturation_.set_step(1);
  // O6 on the sampled steps (1, every, 2 every, ...), the same steps as the other parameter checks:
  // its reads of the weights right before and after the update bring them into cache for those.
  ratios_.attach(opt_, model_, [every = std::max<int64_t>(o_.every, 1)](int64_t step) {
    return step == 1 || step % every == 0;
  });
  zero_.attach(model_);
  zero_.set_active(true);
  zero_.set_step(1);
  variance_.attach(model_);
  variance_.set_active(true);
  variance_.set_step(1);

  // The batch of each step (for a W4 re-run) and the input's dtype (M11).
  auto root = model_.named_modules().front().second;  // (a clear error when the model is not in a shared_ptr)
  // M2 by behaviour: which modules run in training mode in each forward, and
  // whether a backward follows it (a tensor hook on the output).
  {
    std::set<const nn::Module*> seen;
    for (auto& [path, m] : model_.named_modules())
      if (seen.insert(m.get()).second) modules_.emplace_back(m, module_label(path, *m));
    pass_train_.assign(modules_.size(), 0);
    pass_buffers_.assign(modules_.size(), 0);
    pass_eval_.assign(modules_.size(), 0);
    buffers_moved_.assign(modules_.size(), 0);
    m17_named_.assign(modules_.size(), 0);
    buffer_versions_.assign(modules_.size(), 0);
  }
  std::weak_ptr<bool> alive = alive_;
  hooks_.post(root, [this, alive](nn::Module&, const Tensor&, const Tensor& y) {
    // (Only on a graph output: a hook on a leaf would stay for good and pile up.)
    if (probing_ || !y.defined() || !y.grad_fn()) return;
    Tensor out = y;
    out.register_hook([this, alive](const Tensor&) {
      if (alive.lock()) pass_backward_ = true;
      return Tensor();
    });
  });
  // Running statistics (any module's buffers) that move during a forward.
  for (size_t i = 0; i < modules_.size(); ++i) {
    if (modules_[i].first->buffers(false).empty()) continue;
    auto buffer_version = [](const nn::Module& m) {
      uint64_t v = 0;
      for (const Tensor& b : m.buffers(false)) v += b.version();
      return v;
    };
    // A few integer reads: not timed.
    hooks_.pre(
        modules_[i].first,
        [this, i, buffer_version](nn::Module& self, const Tensor&) {
          if (!probing_) buffer_versions_[i] = buffer_version(self);
        },
        false);
    hooks_.post(
        modules_[i].first,
        [this, i, buffer_version](nn::Module& self, const Tensor&, const Tensor&) {
          if (!probing_ && buffer_version(self) != buffer_versions_[i]) pass_buffers_[i] = buffers_moved_[i] = 1;
        },
        false);
  }
  hooks_.pre(root, [this](nn::Module&, const Tensor& x) {
    if (probing_) return;  // the monitor's own probe of the model
    if (pass_forwards_++ == 0) {
      pass_x_ = x;
      pass_grad_mode_ = GradMode::is_enabled();
    }
    for (size_t i = 0; i < modules_.size(); ++i) {
      const bool on = modules_[i].first->is_training();
      pass_train_[i] |= on ? 1 : 0;
      pass_eval_[i] |= on ? 0 : 1;
    }
    if (GradMode::is_enabled()) {
      last_x_ = x;
      // D5 on every training row: every training forward's batch (several per step when the loop
      // accumulates gradients). It reads the batch in order, so the fingerprint's scattered reads
      // after it hit the cache.
      if (x.defined()) rows_.record(x, steps_ + 1);
      if (!in_step_ && x.defined()) history_.step_inputs.push_back(fingerprint(x));
      in_step_ = true;  // a training forward: step steps_ + 1 has begun
    }
    if (!input_checked_ && x.defined()) {
      input_checked_ = true;
      add(check_devices_dtypes(model_, x));
      report_.note_ran("M11");
    }
  });
  // M17: BatchNorm used at eval with no (or never updated) running statistics.
  for (auto& [path, m] : model_.named_modules()) {
    if (!dynamic_cast<nn::BatchNormBase*>(m.get())) continue;
    const std::string label = module_label(path, *m);
    hooks_.pre(m, [this, label](nn::Module& self, const Tensor&) {
      if (self.is_training() || probing_) return;
      auto& bn = static_cast<nn::BatchNormBase&>(self);
      const bool none = !bn.track_running_stats();
      if (!none && bn.num_batches_tracked.item<int64_t>() > 0) return;
      if (!none && steps_ == 0) return;  // evaluating before training: the statistics are legitimately fresh
      Finding f;
      f.check = "M17";
      f.severity = Severity::Warning;
      f.module = label;
      f.step = step_now();
      f.title = none ? label + " is evaluated without running statistics: it uses each batch's own statistics"
                     : label + " is evaluated with running statistics that were never updated (num_batches_tracked "
                               "= 0 after " + std::to_string(steps_) + " training steps)";
      f.evidence = {{"num_batches_tracked", none ? 0.0 : 0.0, "0 at eval flags"},
                    {"training steps so far", static_cast<double>(steps_), ""}};
      f.cause = none ? "track_running_stats=false: predictions depend on the batch they are evaluated with"
                     : "the running statistics are never updated in training (the layer normalises with batch "
                       "statistics only), so eval uses mean 0 / var 1 instead of the data's";
      f.fix = "keep track_running_stats=true, and train in train mode so the running statistics follow the data";
      add(std::move(f));
    });
  }
  if (loss_) {
    hooks_.loss_pre(*loss_, [this](nn::Loss& l, const Tensor& in, const Tensor& t) { on_loss_input(l, in, t); });
    hooks_.loss_post(*loss_, [this](nn::Loss& l, const Tensor&, const Tensor& t, const Tensor& v) {
      on_loss_value(l, t, v);
    });
  }
  const size_t pre = opt_.add_pre_step_hook([this](optim::Optimizer& op) {
    detail::OwnTime own;  // the checks' time, not the step's (W10)
    on_pre_step(op);
  });
  const size_t post = opt_.add_post_step_hook([this](optim::Optimizer& op) {
    detail::OwnTime own;
    on_post_step(op);
  });
  opt_hooks_ = {pre, post};
}

Monitor::~Monitor() { detach(); }

void Monitor::detach() {
  if (!attached_) return;
  attached_ = false;
  timer_.stop_watching();  // no more steps to watch (W10's watchdog)
  hooks_.clear();
  for (size_t id : opt_hooks_) opt_.remove_hook(id);
  opt_hooks_.clear();
  broadcast_on_.reset();
  broadcast_.detach();
  dead_.detach();
  saturation_.detach();
  ratios_.detach();
  zero_.detach();
  variance_.detach();
  warnings_.reset();
}

void Monitor::add(Finding f) {
  if (f.step < 0 && !finished_ && step_now() > 0) f.step = step_now();
  if (f.step < 0 && finished_) f.end_of_run = true;  // after the last step (Report::groups orders by it)
  report_.add(std::move(f));
}
void Monitor::add(const std::vector<Finding>& fs) {
  for (const Finding& f : fs) add(f);
}

// A step is sampled when it is the first one or its number is a multiple of `every`.
bool Monitor::sampled_step() const { return steps_ == 0 || (steps_ + 1) % std::max<int64_t>(o_.every, 1) == 0; }

void Monitor::attach(optim::Trainer& trainer) {
  // The trainer may be destroyed before or after the monitor: its callbacks
  // hold only a weak token, and the monitor never calls back into the trainer.
  std::weak_ptr<bool> alive = alive_;
  trainer.on_step([this, alive](const optim::StepInfo& s) {
    if (alive.lock() && attached_) record_step(s.loss);
  });
  trainer.on_epoch([this, alive](const optim::EpochInfo& e) {
    if (alive.lock() && attached_) record_epoch(e.train_loss, e.val_loss, e.val_accuracy);
  });
  dead_.begin_pass();
}

void Monitor::record_step(double loss) {
  history_.step_losses.push_back(loss);
  if (!std::isfinite(loss) && !localised_) {
    Finding f;
    f.check = "W3";
    f.severity = Severity::Error;
    f.title = "the training loss is " + fmt_num(loss) + " at step " + std::to_string(steps_);
    f.step = steps_;
    f.evidence = {{"loss", loss, "must be finite"}};
    f.cause = "a NaN/Inf in the forward or the loss (see W4/M12 for where), or weights that diverged";
    f.fix = "lower the learning rate, use numerically stable ops (log_softmax, cross_entropy on logits)";
    add(std::move(f));
  }
}

void Monitor::reset_pass() {
  pass_forwards_ = 0;
  pass_backward_ = false;
  pass_grad_mode_ = false;
  pass_x_ = Tensor();
  std::fill(pass_train_.begin(), pass_train_.end(), 0);
  std::fill(pass_buffers_.begin(), pass_buffers_.end(), 0);
  std::fill(pass_eval_.begin(), pass_eval_.end(), 0);
}


void Monitor::ensure_probe() {
  if (probe_) return;
  probing_ = true;
  broadcast_on_.reset();  // the probe's ops are not the user's
  dead_.set_active(false);
  saturation_.set_active(false);
  try {
    probe_ = probe_mode_dependence(model_, pass_x_);
  } catch (const std::exception&) {
    probe_ = ModeProbe{};
  }
  probing_ = false;
  broadcast_on_ = broadcast_.enable();
  dead_.set_active(sampled_step());
  saturation_.set_active(sampled_step());
}

void Monitor::check_training_mode() {
  // A training step (a backward reached the output) whose forward ran layers that compute
  // differently by mode (dropout, BatchNorm, the user's own) in eval mode: model.eval() was
  // left on, so dropout never drops and BatchNorm normalises with running statistics.
  if (eval_in_training_warned_ || pass_forwards_ == 0 || !pass_backward_ || !pass_x_.defined()) return;
  bool any_eval = false;
  for (char e : pass_eval_) any_eval = any_eval || e;
  if (!any_eval) return;
  ensure_probe();
  std::vector<std::string> labels;
  for (size_t i = 0; i < modules_.size(); ++i) {
    if (!pass_eval_[i] || pass_train_[i]) continue;
    const ModuleBehaviour* b = probe_->find(modules_[i].first.get());
    if (b && b->mode_dependent) labels.push_back(modules_[i].second);
  }
  if (labels.empty()) return;
  eval_in_training_warned_ = true;
  std::string list;
  for (size_t i = 0; i < labels.size() && i < 4; ++i) list += (i ? ", " : "") + labels[i];
  if (labels.size() > 4) list += ", ...";
  Finding f;
  f.check = "M2";
  f.severity = Severity::Warning;
  f.module = labels.front();
  f.title = "training step " + std::to_string(steps_ + 1) + " ran " + list +
            " in eval mode: the model is trained in evaluation mode";
  f.evidence = {{"mode-dependent layers in eval mode during a training step", static_cast<double>(labels.size()),
                 "any warns"}};
  f.cause = "model.eval() was called (for an evaluation, or by mistake) and model.train() never followed, so dropout "
            "does not drop and BatchNorm normalises with its running statistics instead of the batch's while "
            "training";
  f.fix = "call model.train() before the training loop (and after every evaluation)";
  add(std::move(f));
}

void Monitor::check_eval_pass() {
  // Forwards that no backward and no optimizer step followed before the epoch
  // was recorded: an evaluation, under no_grad or not. Modules that ran in
  // training mode in it matter when their output depends on the mode, which
  // the probe measures (a hand-written dropout or BatchNorm as well as nn's).
  const bool eval_pass = pass_forwards_ > 0 && !pass_backward_ && pass_x_.defined();
  bool any_train = false;
  for (char t : pass_train_) any_train = any_train || t;
  // M17 for a BatchNorm-like layer of the user's own (nn::BatchNorm has its own
  // hook): evaluated in eval mode after training, with buffers that never moved.
  bool stale = false;
  for (size_t i = 0; i < modules_.size(); ++i)
    stale = stale || (pass_eval_[i] && !buffers_moved_[i] && !m17_named_[i] &&
                      !dynamic_cast<const nn::BatchNormBase*>(modules_[i].first.get()) &&
                      !modules_[i].first->buffers(false).empty());
  if (!eval_pass || (!any_train && !(stale && steps_ > 0))) return;
  ensure_probe();
  for (size_t i = 0; i < modules_.size() && stale && steps_ > 0; ++i) {
    const nn::Module& m = *modules_[i].first;
    if (!pass_eval_[i] || buffers_moved_[i] || m17_named_[i] || dynamic_cast<const nn::BatchNormBase*>(&m) ||
        m.buffers(false).empty())
      continue;
    const ModuleBehaviour* b = probe_->find(&m);
    if (!b || !b->mode_dependent || b->stochastic) continue;
    m17_named_[i] = 1;
    std::string names;
    for (auto& [n, t] : m.named_buffers(false)) names += (names.empty() ? "" : ", ") + n;
    Finding f;
    f.check = "M17";
    f.severity = Severity::Warning;
    f.module = modules_[i].second;
    f.title = modules_[i].second + " is evaluated with buffers (" + names + ") that never changed in " +
              std::to_string(steps_) + " training steps";
    f.evidence = {{"training steps so far", static_cast<double>(steps_), ""},
                  {"buffer updates seen", 0.0, "0 at eval flags"}};
    f.cause = "the layer computes differently in eval mode (BatchNorm-like) from statistics it keeps in buffers, "
              "but its training forward never updates them, so eval uses their initial values instead of the "
              "data's";
    f.fix = "update the running statistics in the training-mode forward (under no_grad), as nn::BatchNorm does";
    add(std::move(f));
  }
  for (size_t i = 0; i < modules_.size(); ++i) {
    if (!pass_train_[i]) continue;
    const nn::Module& m = *modules_[i].first;
    const ModuleBehaviour* b = probe_->find(&m);
    if (!b || !b->mode_dependent) continue;
    const bool stats = pass_buffers_[i] != 0;
    bool warned = false;  // the layer's own M2 warning already said it (nn::Dropout, nn::BatchNorm)
    for (const std::string& w : m2_warned_) warned = warned || w.rfind(m.type_name() + "(", 0) == 0;
    if (warned && !stats) continue;
    const std::string& label = modules_[i].second;
    std::string names;
    for (auto& [n, t] : m.named_buffers(false)) names += (names.empty() ? "" : ", ") + n;
    Finding f;
    f.check = "M2";
    f.severity = Severity::Warning;
    f.module = label;
    f.title = stats ? label + " ran in training mode during an evaluation pass, and the evaluation data updated its "
                              "running statistics (" + names + ")"
                    : label + " ran in training mode during an evaluation pass" +
                          (pass_grad_mode_ ? "" : " (under no_grad)");
    f.evidence = {{"forwards in the pass", static_cast<double>(pass_forwards_),
                   "no backward and no optimizer step followed them before the epoch was recorded"},
                  {"random in training mode", b->stochastic ? 1.0 : 0.0, ""},
                  {"buffers changed by the pass", stats ? 1.0 : 0.0, ""}};
    f.cause = std::string(b->stochastic ? "the layer is random in training mode (dropout-like): the evaluation is "
                                          "noisy and pessimistic"
                                        : "the layer computes differently in training mode (BatchNorm-like: the "
                                          "batch's statistics instead of the running ones)") +
              (stats ? "; and its buffers " + names + " moved towards the evaluation data, so validation data "
                       "leaked into the model's running statistics and every later evaluation uses them"
                     : "");
    f.fix = "call model.eval() before the evaluation loop and model.train() after it (no_grad alone does not "
            "change the mode)";
    add(std::move(f));
  }
}

void Monitor::record_epoch(double train_loss, double val_loss, double val_accuracy) {
  timer_.restart();  // the epoch's evaluation is not a step (W10)
  check_eval_pass();
  reset_pass();
  history_.epoch_train_loss.push_back(train_loss);
  history_.epoch_val_loss.push_back(val_loss);
  history_.epoch_val_accuracy.push_back(val_accuracy);
  history_.epoch_train_accuracy.push_back(acc_seen_ > 0 ? static_cast<double>(acc_correct_) / acc_seen_
                                                         : std::numeric_limits<double>::quiet_NaN());
  acc_correct_ = acc_seen_ = 0;
  // W3: validation no longer improving.
  const auto& v = history_.epoch_val_loss;
  if (v.size() >= 3 && std::isfinite(v.back())) {
    const double best = *std::min_element(v.begin(), v.end() - 2);
    if (v[v.size() - 2] > best && v.back() > v[v.size() - 2]) {
      Finding f;
      f.check = "W3";
      f.severity = Severity::Warning;
      f.kind = Kind::ValidationRose;
      f.title = "the validation loss rose two epochs in a row: consider early stopping";
      f.evidence = {{"best validation loss", best, ""}, {"latest validation loss", v.back(), "> best twice"}};
      f.cause = "overfitting, or a learning rate too high for this stage of training";
      f.fix = "optim::EarlyStopping with patience, keep the best checkpoint, or lower the learning rate";
      add(std::move(f));
    }
  }
  rows_.end_epoch();
  dead_.end_pass();
  dead_.begin_pass();
}

void Monitor::on_loss_input(nn::Loss& l, const Tensor& input, const Tensor& target) {
  if (!GradMode::is_enabled()) return;  // an evaluation, not a training step
  last_y_ = target;
  const bool sample = sampled_step();
  if (!structure_checked_) {
    structure_checked_ = true;
    add(check_final_activation(model_, Tensor()));  // M3 by structure
    report_.note_ran("M3");
  }
  if (is_elementwise(l)) {
    if (auto f = loss_shape_finding(l.type_name(), input, target)) add(*f);  // M19
    if (!input.defined() || !target.defined() || input.shape() != target.shape()) add(check_label_shape(input, target));
  }
  if (!sample) return;
  if (is_cross_entropy(l) || takes_class_indices(l, input, target)) {
    // The training accuracy of the epoch, from its sampled batches (for L7's comparison with
    // the validation accuracy).
    if (input.dim() == 2 && target.dim() == 1 && target.dtype() == kInt64 && input.size(0) == target.size(0)) {
      acc_correct_ += correct_predictions(input, target);
      acc_seen_ += target.size(0);
    }
    add(check_cross_entropy_input(input));      // L2
    report_.note_ran("L2");
    // M3 by values (its structural part ran once, above): only a batch without a negative logit
    // can show it.
    const TensorSummary logits = summarize(input);
    if (logits.finite > 0 && logits.min >= 0.0) add(check_final_activation(model_, input));
  }
  if (l.type_name() == "BCELoss") {
    add(check_bce_input(input));  // L3
    report_.note_ran("L3");
  }
  if (!first_loss_checked_) {
    first_loss_checked_ = true;
    // L4 needs the value: computed here on a detached copy, once.
    NoGradGuard ng;
    const int64_t C = o_.num_classes > 0 ? o_.num_classes : (input.dim() >= 2 ? input.size(-1) : 2);
    const Tensor v = l.forward(input.detach(), target);
    if ((is_cross_entropy(l) || is_nll(l)) && v.numel() == 1)
      add(check_initial_loss(v.item<double>(), C, "cross_entropy", o_.loss));
    else if (l.type_name().rfind("BCE", 0) == 0 && v.numel() == 1)
      add(check_initial_loss(v.item<double>(), 2, "bce", o_.loss));
  }
}

void Monitor::localise(const std::string& why) {
  if (localised_ || !o_.localise_nonfinite || !last_x_.defined()) return;
  localised_ = true;
  // The weights are still those that produced the problem: run the batch again
  // with every op checked, without touching the gradients.
  std::vector<std::pair<Tensor, Tensor>> grads;
  for (Tensor& p : model_.parameters()) grads.emplace_back(p, p.grad());
  add(find_nonfinite_source(model_, last_x_));  // M12
  QuietProbe probe(model_);
  AnomalyMode anomaly;
  anomaly.attach(model_);
  try {
    auto on = anomaly.enable();
    Tensor out = model_(last_x_);
    if (loss_ && last_y_.defined()) {
      Tensor l = (*loss_)(out, last_y_);
      if (l.requires_grad()) l.backward();
    }
  } catch (const std::exception&) {
  }
  for (Finding f : anomaly.findings()) {
    f.cause = why + ". " + f.cause;
    add(std::move(f));
  }
  for (auto& [p, g] : grads) p.set_grad(g);
}

void Monitor::on_loss_value(nn::Loss& l, const Tensor& target, const Tensor& loss) {
  if (!GradMode::is_enabled() || loss.numel() != 1) return;
  last_loss_ = loss.item<double>();  // one value: cheap enough for every step
  loss_seen_this_step_ = true;
  // L5, with the loss it produced (a NaN loss from all-masked targets is an error).
  if ((sampled_step() || !std::isfinite(last_loss_)) && (is_cross_entropy(l) || is_nll(l)) &&
      target.dtype() == kInt64) {
    add(check_masked_targets(target, ignore_index_of(l), last_loss_));
    report_.note_ran("L5");
  }
}

void Monitor::on_pre_step(optim::Optimizer& opt) {
  const bool sample = sampled_step();
  if (spread_.wants(steps_ + 1)) spread_.record(model_, steps_ + 1);  // M27, the first steps only
  // A non-finite loss (every step) or gradient (sampled steps): find where it
  // came from now, while the weights are still the ones that produced it.
  bool bad = loss_seen_this_step_ && !std::isfinite(last_loss_);
  if (sample) {
    SummaryCache once;  // O2/O3's norms and O1 read the same gradients: one pass over each
    norms_.record(steps_ + 1, model_, [this](const Tensor& p) { return ratios_.measured_norm(p); });  // O2/O3
    zero_.record_parameters(model_);    // M25
    std::vector<Finding> health = check_gradient_health(model_, o_.optim);  // O1 (M5's gradient flow runs in the gate)
    // Once, the first time a 1-D parameter's gradient vanishes: is it a redundant bias (zero
    // by construction, BatchNorm after it)? Then it is said once as info, and O1 stays silent.
    if (!redundant_checked_ && loss_ && last_x_.defined() && last_y_.defined() &&
        std::any_of(health.begin(), health.end(), [&](const Finding& f) {
          return f.is("O1", Kind::GradientVanishing) && f.severity == Severity::Warning && !f.parameter.empty();
        })) {
      redundant_checked_ = true;
      dead_.set_active(false);  // the probe's forwards are not training statistics
      saturation_.set_active(false);
      zero_.set_active(false);
      variance_.set_active(false);
      const LossFunction lf = [this](const Tensor& out, const Tensor& t) { return (*loss_)(out, t); };
      std::vector<Finding> red;
      try {
        red = find_redundant_biases(model_, last_x_, last_y_, lf, o_.optim.vanishing_grad_norm);
      } catch (const std::exception&) {
        red.clear();  // the probe could not run: the warnings stay as they are
      }
      dead_.set_active(sample);
      saturation_.set_active(sample);
      zero_.set_active(sample);
      variance_.set_active(sample);
      for (Finding& f : red) {
        o_.optim.zero_grad_by_construction.push_back(f.parameter);
        add(std::move(f));
      }
      if (!red.empty()) health = check_gradient_health(model_, o_.optim);
    }
    report_.note_ran("O1");
    for (Finding& f : health) {
      bad = bad || (f.severity == Severity::Error && f.kind == Kind::GradientNonFinite);
      add(std::move(f));
    }
  }
  // Every step, cheaply (a strided sample of each large gradient): a backward
  // that made NaN/Inf from a finite loss (log at 0, sqrt at 0) must be caught on
  // its own step, before the update spreads it into the weights. Sampled steps
  // read every element (O1 above).
  // The optimizer's parameters (what this step will update), read by reference: no list of the
  // model's parameters is built on every step.
  if (!bad && !localised_ && !sample)
    for (const optim::ParamGroup& group : opt.param_groups()) {
      for (const Tensor& p : group.params) {
        const Tensor g = p.defined() ? p.grad() : Tensor();
        if (g.defined() && !sampled_finite(g)) {
          bad = true;
          break;
        }
      }
      if (bad) break;
    }
  if (bad)
    localise((loss_seen_this_step_ && !std::isfinite(last_loss_) ? "the loss turned non-finite"
                                                                   : "gradients turned non-finite") +
             std::string(" at step ") + std::to_string(steps_ + 1));
  loss_seen_this_step_ = false;
}

void Monitor::on_post_step(optim::Optimizer& op) {
  check_training_mode();
  history_.learning_rates.push_back(op.lr());
  reset_pass();  // the forwards so far were training forwards
  ++steps_;
  in_step_ = false;
  timer_.step_done(steps_);  // W10
  // O4 after each sampled step's update (the step just taken was sampled when it was the first
  // or its number is a multiple of `every`), right after O6 read the updated weights.
  if (steps_ == 1 || steps_ % std::max<int64_t>(o_.every, 1) == 0) {
    add(check_finite_weights(model_, [this](const Tensor& p) { return ratios_.measured_finite(p); }));  // O4
    report_.note_ran("O4");
  }
  const bool next = sampled_step();
  dead_.set_step(steps_ + 1);
  saturation_.set_step(steps_ + 1);
  dead_.set_active(next);
  saturation_.set_active(next);
  zero_.set_active(next);
  variance_.set_active(next);
  variance_.set_step(steps_ + 1);
  zero_.set_step(steps_ + 1);
}

void Monitor::finish(const Tensor& sample_x, const Tensor& sample_y) {
  if (finished_) return;
  finished_ = true;
  dead_.end_pass();
  add(diagnose_loss_history(history_.step_losses, history_.epoch_val_loss, o_.loss));  // L1
  std::vector<double> tr, va;
  for (size_t i = 0; i < history_.epoch_train_loss.size(); ++i) {
    tr.push_back(history_.epoch_train_loss[i]);
    va.push_back(history_.epoch_val_loss[i]);
  }
  if (!tr.empty() && std::isfinite(va.back())) add(diagnose_fitting(tr, va, o_.loss));  // L7
  add(check_validation_accuracy(history_.epoch_train_accuracy, history_.epoch_val_accuracy, o_.loss));  // L7
  if (!history_.epoch_val_accuracy.empty()) report_.note_ran("L7");
  add(norms_.findings());                                                            // O2, O3
  add(diagnose_learning_rate(history_.step_losses, o_.optim));                       // O6 (loss history)
  add(diagnose_lr_schedule(history_.learning_rates, o_.optim));                      // O6 (the schedule)
  add(ratios_.findings());                                                           // O6 (update ratios)
  add(dead_.findings());                                                             // M7
  add(saturation_.findings());                                                       // M8
  add(broadcast_.findings());                                                        // M19
  add(zero_.findings(o_.optim.zero_grad_by_construction));                           // M25
  add(variance_.findings());                                                         // M26
  add(spread_.findings());                                                           // M27 (gradient spread)
  add(rows_.findings());                                                             // D5 (every training row)
  if (rows_.rows_seen() > 0) report_.note_ran("D5");
  add(timer_.findings());                                                            // W10
  report_.note_ran("L1, O2, O3, O6, M19, W10");
  if (steps_ > 0) report_.note_ran("M25, M26, M27");
  if (!dead_.layers().empty()) report_.note_ran("M7");
  if (!saturation_.layers().empty()) report_.note_ran("M8");
  // History for plots, before the trackers go.
  history_.grad_norms = norms_.grad_series();
  history_.update_ratio = ratios_.series();
  for (const auto& l : dead_.layers()) history_.dead_fraction.emplace_back(l.module, l.history);
  detach();
  if (sample_x.defined()) {
    if (sample_x.dtype() == kFloat32) {
      LossOf lf;
      // M18 runs on the host (a model on a device is compared on a CPU copy): the targets follow the output.
      if (loss_ && sample_y.defined())
        lf = [this, &sample_y](const Tensor& out) { return (*loss_)(out, sample_y.to(out.device())); };
      const bool was = model_.is_training();
      model_.eval();
      try {
        add(check_half_precision(model_, sample_x, lf));  // M18
      } catch (const std::exception& e) {
        Finding f;
        f.check = "M18";
        f.severity = Severity::Info;
        f.title = std::string("not run: ") + e.what();
        add(std::move(f));
      }
      model_.train(was);
    }
  }
}

TrainingHistory Monitor::history() const { return history_; }

}  // namespace gradsleuth::debug
