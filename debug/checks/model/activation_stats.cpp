// Dead-ReLU (M7) and saturation (M8) statistics (see activation_stats.h).
#include "debug/checks/model/activation_stats.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"

namespace gradsleuth::debug {

namespace {
// Per unit (dimension 1; a 1-D output is one unit): is it active (> 0) for some input of this
// batch? y is (B, D) or (B, C, ...). Empty when a value is NaN or Inf: a NaN is not "<= 0", so
// such a batch says nothing about dead units.
std::vector<bool> alive_units(const Tensor& y) {
  NoGradGuard ng;
  if (y.device().is_cpu() && y.is_contiguous() && (y.dtype() == kFloat32 || y.dtype() == kFloat64)) {
    // One pass over the values in place: the usual case.
    const int64_t batch = y.dim() >= 2 ? y.size(0) : 1, units = y.dim() >= 2 ? y.size(1) : 1;
    const int64_t inner = units > 0 && batch > 0 ? y.numel() / (batch * units) : 0;
    std::vector<char> on(static_cast<size_t>(units), 0);
    int bad = 0;
    auto scan = [&](auto* p) {
      char* o = on.data();
      if (inner == 1) {  // (B, D): a row at a time, vectorised over the units
        for (int64_t b = 0; b < batch; ++b) {
          const auto* q = p + b * units;
#pragma omp simd reduction(| : bad)
          for (int64_t u = 0; u < units; ++u) {
            o[u] |= q[u] > 0 ? 1 : 0;
            bad |= (q[u] - q[u]) != 0 ? 1 : 0;
          }
        }
        return;
      }
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t u = 0; u < units; ++u) {
          const auto* q = p + (b * units + u) * inner;
          int pos = 0;
#pragma omp simd reduction(| : pos, bad)
          for (int64_t k = 0; k < inner; ++k) {
            pos |= q[k] > 0 ? 1 : 0;
            bad |= (q[k] - q[k]) != 0 ? 1 : 0;
          }
          o[u] |= static_cast<char>(pos);
        }
    };
    if (y.dtype() == kFloat32)
      scan(static_cast<const float*>(y.raw_data()));
    else
      scan(static_cast<const double*>(y.raw_data()));
    if (bad) return {};
    return std::vector<bool>(on.begin(), on.end());
  }
  if (!all_finite(y)) return {};
  Tensor pos = (y.detach() > 0.0).to(kFloat32);
  Dims over{0};
  for (int64_t d = 2; d < y.dim(); ++d) over.push_back(d);
  const std::vector<float> s = y.dim() >= 2 ? sum(pos, over).to_vector<float>() : sum(pos).to_vector<float>();
  std::vector<bool> out(s.size());
  for (size_t i = 0; i < s.size(); ++i) out[i] = s[i] > 0.0f;
  return out;
}

double dead_fraction(const std::vector<bool>& alive) {
  if (alive.empty()) return 0.0;
  size_t dead = 0;
  for (bool a : alive) dead += a ? 0 : 1;
  return static_cast<double>(dead) / static_cast<double>(alive.size());
}
}  // namespace

// ---- M7 ------------------------------------------------------------------------------------
void DeadReluTracker::attach(nn::Module& model) {
  detach();
  layers_.clear();
  alive_in_pass_.clear();
  for (auto& [path, m] : model.named_modules()) {
    if (m->type_name() != "ReLU") continue;
    const size_t idx = layers_.size();
    DeadLayerStats s;
    s.module = module_label(path, *m);
    layers_.push_back(s);
    alive_in_pass_.emplace_back();
    hooks_.post(
        m,
        [this, idx](nn::Module&, const Tensor&, const Tensor& y) {
          if (!active_) return;  // untimed while inactive (every step but the sampled ones)
          detail::OwnTime own;
          if (y.defined() && y.dim() >= 1 && y.is_floating_point() && y.numel() > 0) record(idx, y);
        },
        false);
  }
}

void DeadReluTracker::record(size_t layer, const Tensor& y) {
  const std::vector<bool> alive = alive_units(y);
  if (alive.empty()) return;  // a non-finite value (or no units)
  DeadLayerStats& s = layers_[layer];
  s.units = static_cast<int64_t>(alive.size());
  const double dead = dead_fraction(alive);
  if (track_init_ && std::isnan(s.init_dead)) s.init_dead = dead;
  s.batch_dead = dead;
  s.history.emplace_back(step_, dead);
  if (dead >= o_.dead_fraction && s.first_flagged_step < 0) s.first_flagged_step = step_;
  if (in_pass_) {
    ++s.pass_batches_seen;
    auto& acc = alive_in_pass_[layer];
    if (acc.size() != alive.size()) acc.assign(alive.size(), false);
    for (size_t i = 0; i < alive.size(); ++i) acc[i] = acc[i] || alive[i];
  }
}

void DeadReluTracker::begin_pass() {
  in_pass_ = true;
  for (auto& a : alive_in_pass_) a.clear();
  for (auto& l : layers_) l.pass_batches_seen = 0;
}

void DeadReluTracker::end_pass() {
  if (!in_pass_) return;
  in_pass_ = false;
  for (size_t i = 0; i < layers_.size(); ++i)
    if (!alive_in_pass_[i].empty()) {
      layers_[i].pass_dead = dead_fraction(alive_in_pass_[i]);
      layers_[i].pass_batches = layers_[i].pass_batches_seen;
    }
}

std::vector<Finding> DeadReluTracker::findings() const {
  std::vector<Finding> out;
  for (const DeadLayerStats& s : layers_) {
    const bool have_pass = !std::isnan(s.pass_dead);
    const double dead = have_pass ? s.pass_dead : s.batch_dead;
    if (std::isnan(dead) || dead < o_.dead_fraction) continue;
    const bool at_init = !std::isnan(s.init_dead) && s.init_dead >= o_.dead_fraction;
    const bool known_when = !std::isnan(s.init_dead);
    Finding f;
    f.check = "M7";
    f.severity = Severity::Warning;
    f.title = fmt_num(100 * dead) + "% of the units of " + s.module + " are dead " +
              (have_pass ? "over a pass through the data" : "over the last batch") +
              (!known_when ? ""
               : at_init   ? " (dead since initialisation)"
                           : " (they died during training)");
    f.kind = known_when && !at_init ? Kind::DiedInTraining : Kind::DeadUnits;
    f.module = s.module;
    f.evidence = {{have_pass ? "dead fraction over the pass" : "dead fraction over the batch", dead,
                   ">= " + fmt_num(o_.dead_fraction) + " flags a layer"},
                  {"units", static_cast<double>(s.units), ""}};
    if (known_when) f.evidence.push_back({"dead fraction at initialisation (first batch)", s.init_dead, ""});
    if (have_pass) f.evidence.push_back({"batches in the pass", static_cast<double>(s.pass_batches), ""});
    if (!at_init && s.first_flagged_step >= 0)
      f.evidence.push_back({"first step at the threshold", static_cast<double>(s.first_flagged_step), ""});
    // When the units died decides the cause; a pass that did not see the initialisation cannot
    // tell, and says both (a monitor attached from the first step tells them apart).
    const std::string init_cause =
        "the units' pre-activations start below zero for every input: a large negative "
        "bias or badly scaled weights/inputs at initialisation, so they never pass a gradient";
    const std::string train_cause =
        "a large update (learning rate too high, a gradient spike) pushed the weights so "
        "that the pre-activations are negative for every input; a dead ReLU gets no "
        "gradient and never recovers";
    const std::string init_fix =
        "initialise biases at (or near) zero and weights with init::kaiming_normal_; "
        "normalise the inputs";
    const std::string train_fix =
        "lower the learning rate (or warm it up), clip gradients, or use LeakyReLU/GELU "
        "which keep a gradient for negative inputs";
    f.cause = !known_when ? "this pass did not see the initialisation, so either: " + init_cause + "; or " + train_cause
              : at_init   ? init_cause
                          : train_cause;
    f.fix = !known_when ? init_fix + "; or " + train_fix : at_init ? init_fix : train_fix;
    out.push_back(std::move(f));
  }
  return out;
}

namespace {
void run_dead_relu_pass(DeadReluTracker& t, nn::Module& model, const nn::DataLoader& loader, int64_t max_batches) {
  t.attach(model);
  t.set_track_initialisation(false);
  const bool was = model.is_training();
  model.eval();
  t.begin_pass();
  {
    NoGradGuard ng;
    const int64_t n = max_batches < 0 ? loader.num_batches() : std::min(max_batches, loader.num_batches());
    for (int64_t i = 0; i < n; ++i) model(loader.batch(loader.epoch(), i).x);
  }
  t.end_pass();
  t.detach();
  model.train(was);
}
}  // namespace

std::vector<Finding> dead_relu_pass(nn::Module& model, const nn::DataLoader& loader, int64_t max_batches,
                                    ActivationOptions o, const std::map<std::string, double>& at_init) {
  DeadReluTracker t(o);
  run_dead_relu_pass(t, model, loader, max_batches);
  for (const auto& [module, dead] : at_init) t.set_initial_dead(module, dead);
  return t.findings();
}

bool died_in_training(const Finding& f) { return f.fires() && f.is("M7", Kind::DiedInTraining); }

std::vector<DeadLayerStats> dead_relu_stats(nn::Module& model, const nn::DataLoader& loader, int64_t max_batches,
                                            ActivationOptions o) {
  DeadReluTracker t(o);
  run_dead_relu_pass(t, model, loader, max_batches);
  return t.layers();
}

// ---- M8 ------------------------------------------------------------------------------------
void SaturationTracker::attach(nn::Module& model) {
  detach();
  layers_.clear();
  for (auto& [path, m] : model.named_modules()) {
    const std::string& type = m->type_name();
    if (type != "Sigmoid" && type != "Tanh") continue;
    const size_t idx = layers_.size();
    SaturationLayerStats s;
    s.module = module_label(path, *m);
    s.type = type;
    layers_.push_back(s);
    hooks_.pre(
        m,
        [this, idx, type](nn::Module&, const Tensor& x) {
          if (!active_ || !x.defined() || !x.is_floating_point() || x.numel() == 0) return;
          detail::OwnTime own;
          NoGradGuard ng;
          const double frac = sum((abs(x.detach()) > o_.saturation_threshold).to(kFloat64)).item<double>() /
                              static_cast<double>(x.numel());
          // The derivative at these inputs: s (1 - s) for the sigmoid (at most 0.25), 1 - t^2 for tanh.
          const Tensor xd = x.detach().to(kFloat64);
          const Tensor d = type == "Sigmoid" ? sigmoid(xd) * (1.0 - sigmoid(xd)) : 1.0 - tanh(xd) * tanh(xd);
          const double deriv = mean(d).item<double>();
          SaturationLayerStats& st = layers_[idx];
          st.last = frac;
          if (st.batches == 0) st.order = next_order_++;
          st.mean_derivative =
              (st.mean_derivative * static_cast<double>(st.batches) + deriv) / static_cast<double>(st.batches + 1);
          st.mean = (st.mean * static_cast<double>(st.batches) + frac) / static_cast<double>(st.batches + 1);
          ++st.batches;
          st.history.emplace_back(step_, frac);
        },
        false);
  }
}

std::vector<Finding> SaturationTracker::findings() const {
  std::vector<Finding> out;
  for (const SaturationLayerStats& s : layers_) {
    if (s.batches == 0 || s.mean <= o_.saturated_fraction) continue;
    Finding f;
    f.check = "M8";
    f.severity = Severity::Warning;
    f.title = fmt_num(100 * s.mean) + "% of the pre-activations of " + s.module + " are beyond +-" +
              fmt_num(o_.saturation_threshold) + ": the " + s.type + " is saturated";
    f.module = s.module;
    f.evidence = {{"saturated fraction (mean over batches)", s.mean, "> " + fmt_num(o_.saturated_fraction) + " flags"},
                  {"saturated fraction (last batch)", s.last, ""},
                  {"batches", static_cast<double>(s.batches), ""}};
    f.cause = "inputs to the " + s.type +
              " are too large (weights initialised too large, unnormalised inputs): "
              "its gradient there is ~0, so the layers below stop learning (vanishing gradients)";
    f.fix =
        "use Xavier initialisation for sigmoid/tanh layers, normalise inputs, add normalisation layers, or "
        "use ReLU/GELU";
    out.push_back(std::move(f));
  }
  // The stack as a whole: backward multiplies the gradient by each layer's derivative, so N
  // sigmoid layers (derivative <= 0.25 each) shrink it by at least 4^N even when none saturates.
  std::vector<const SaturationLayerStats*> seen;
  for (const SaturationLayerStats& s : layers_)
    if (s.batches > 0) seen.push_back(&s);
  std::sort(seen.begin(), seen.end(), [](const auto* a, const auto* b) { return a->order < b->order; });
  double product = 1.0;
  for (const SaturationLayerStats* s : seen) product *= s->mean_derivative;
  if (seen.size() >= 2 && product < o_.attenuation) {
    Finding f;
    f.check = "M8";
    f.severity = Severity::Warning;
    const bool one_type =
        std::all_of(seen.begin(), seen.end(), [&](const auto* s) { return s->type == seen.front()->type; });
    f.title = "the gradient shrinks " + fmt_num(1.0 / product) + "x through " + std::to_string(seen.size()) +
              " stacked " + (one_type ? seen.front()->type : std::string("sigmoid/tanh")) +
              " layers: their mean derivatives multiply to " + fmt_num(product);
    f.module = seen.front()->module + " .. " + seen.back()->module;
    f.evidence = {{"product of the mean derivatives", product, "< " + fmt_num(o_.attenuation) + " flags the stack"},
                  {"sigmoid/tanh layers", static_cast<double>(seen.size()), ""},
                  {"mean derivative, first layer", seen.front()->mean_derivative, ""},
                  {"mean derivative, last layer", seen.back()->mean_derivative, ""}};
    f.cause =
        "each sigmoid multiplies the backward gradient by its derivative, at most 0.25 (tanh: at most 1, "
        "less away from 0); stacked this deep, the layers near the input get a gradient " +
        fmt_num(1.0 / product) + "x smaller than the output's (vanishing gradients by depth)";
    f.fix =
        "use ReLU/GELU in the hidden layers, fewer sigmoid layers, residual connections or normalisation "
        "layers between them";
    out.push_back(std::move(f));
  }
  return out;
}

// ---- M7, M8 during training (the monitor's run checks) ----------------------------------------
namespace {

// M7: dead units per epoch (an epoch is a pass through the data).
class DeadReluRunCheck final : public TrackerRunCheck<DeadReluTracker> {
 public:
  using TrackerRunCheck::TrackerRunCheck;
  std::string ids() const override { return "M7"; }
  uint32_t events() const override { return kEvents | RunEvent::Trainer | RunEvent::Epoch | RunEvent::Series; }
  void trainer(RunContext&) override { t_.begin_pass(); }
  void epoch(RunContext&, const EpochRecord&) override {
    t_.end_pass();
    t_.begin_pass();
  }
  void finish(RunContext& c) override {
    t_.end_pass();
    c.add_all(t_.findings());
    if (!t_.layers().empty()) c.note_ran("M7");
  }
  void series(TrainingHistory& h) const override {
    h.dead_fraction.clear();
    for (const auto& l : t_.layers()) h.dead_fraction.emplace_back(l.module, l.history);
  }
};

// M8: saturated sigmoid/tanh units.
class SaturationRunCheck final : public TrackerRunCheck<SaturationTracker> {
 public:
  using TrackerRunCheck::TrackerRunCheck;
  std::string ids() const override { return "M8"; }
  uint32_t events() const override { return kEvents; }
  void finish(RunContext& c) override {
    c.add_all(t_.findings());
    if (!t_.layers().empty()) c.note_ran("M8");
  }
};
}  // namespace

std::unique_ptr<RunCheck> make_dead_relu_run_check(const MonitorOptions& o) {
  return std::make_unique<DeadReluRunCheck>(o.activations);
}
std::unique_ptr<RunCheck> make_saturation_run_check(const MonitorOptions& o) {
  return std::make_unique<SaturationRunCheck>(o.activations);
}

}  // namespace gradsleuth::debug
