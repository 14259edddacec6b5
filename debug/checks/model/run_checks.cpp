// Checks over a whole training run (see run_checks.h): M25 all-zero tensors, M26 tensor variance, and their run checks.
#include "debug/checks/model/run_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"

namespace gradsleuth::debug {

using detail::make;
using detail::num;

// ---- M25 ------------------------------------------------------------------------------------
void AllZeroTracker::see(Seen& s, const Tensor& t) const {
  if (step_ >= 0 && s.last_step == step_ && s.samples > 0) {
    // The same step again (a module called twice in a step): it was zero only if every call was.
    if (!s.last_zero || !t.defined() || t.numel() == 0) return;
    if (all_zero(t)) return;
    s.last_zero = false;
    if (s.collapsed_at >= 0) --s.zero_after;
    if (s.collapsed_at == step_) s.collapsed_at = -1, s.samples_after = 0;
    s.nonzero = true;
    return;
  }
  s.last_step = step_;
  ++s.samples;
  const bool zero = all_zero(t);  // NaN or Inf is not zero; stops at the first nonzero value
  if (s.nonzero && zero && s.collapsed_at < 0) s.collapsed_at = step_;
  if (s.collapsed_at >= 0) {
    ++s.samples_after;
    s.zero_after += zero ? 1 : 0;
  }
  s.nonzero = s.nonzero || !zero;
  s.last_zero = zero;
}

void AllZeroTracker::attach(nn::Module& model) {
  hooks_.clear();
  outputs_.clear();
  inputs_.clear();
  for (auto& [path, m] : leaf_modules(model)) {
    if (m->type_name() == "ReLU") continue;  // M7
    const size_t i = outputs_.size();
    outputs_.push_back({module_label(path, *m)});
    bool weighted = false;
    for (const auto& [name, p] : m->named_parameters()) weighted = weighted || (name == "weight" && p.dim() >= 2);
    const size_t k = weighted ? inputs_.size() : SIZE_MAX;
    if (weighted) inputs_.push_back({module_label(path, *m)});
    hooks_.post(
        m,
        [this, i, k](nn::Module&, const Tensor& in, const Tensor& out) {
          if (!active_ || !GradMode::is_enabled()) return;  // untimed while inactive
          detail::OwnTime own;
          see(outputs_[i], out);
          // Only an input made outside the graph (zeros(), a buffer, the data): a computed one that is
          // zero (a dead ReLU's output) is the computing layer's matter (M7, M25 on that output).
          if (k != SIZE_MAX && in.defined() && in.is_floating_point()) {
            if (in.grad_fn())
              inputs_[k].nonzero = true;
            else
              see(inputs_[k], in);
          }
        },
        false);
  }
}

void AllZeroTracker::record_parameters(const nn::Module& model, bool gradients) {
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad()) continue;
    auto find = [&name = name](std::vector<Seen>& v) -> Seen& {
      for (Seen& s : v)
        if (s.name == name) return s;
      v.push_back({name});
      return v.back();
    };
    if (p.dim() >= 2) see(find(values_), p);  // weights: a bias may rightly start (and stay) at zero
    const Tensor g = p.grad();
    if (gradients && g.defined()) see(find(grads_), g);
  }
}

std::vector<Finding> AllZeroTracker::findings(const std::vector<std::string>& skip) const {
  std::vector<Finding> out;
  const int64_t need = std::max<int64_t>(o_.all_zero_min_samples, 1);
  const std::string rule = "zero at every sampled step flags (from " + num(need) + " samples)";
  for (const Seen& s : outputs_) {
    if (s.nonzero || s.samples < need) continue;
    Finding f = make(
        "M25", Severity::Warning,
        "the output of " + s.name + " was entirely zero at every one of " + num(s.samples) + " sampled training steps");
    f.kind = Kind::ZeroValue;
    f.module = s.name;
    f.evidence = {{"sampled steps with an all-zero output", static_cast<double>(s.samples), rule}};
    f.cause =
        "everything after this layer sees zeros and learns nothing from its input: its weights (or the "
        "layers before it) are zero and stay zero, its input is zeroed, or a mask multiplies it away";
    f.fix =
        "look at the layer's weights and input (a zero initialisation, a mask that is all 0); initialise "
        "weights randomly (the layer's default, or init::kaiming_normal_)";
    out.push_back(std::move(f));
  }
  // A layer that reads zeros at every call: its weight gets no gradient and its output is its bias alone.
  for (const Seen& s : inputs_) {
    if (s.nonzero || s.samples < need) continue;
    Finding f = make("M25", Severity::Warning,
                     "the input of " + s.name + " was entirely zero at every call of " + num(s.samples) +
                         " sampled training steps: its weight gets no gradient, and its output is its bias alone");
    f.kind = Kind::ZeroValue;
    f.module = s.name;
    f.evidence = {
        {"sampled steps whose every call gave the layer an all-zero input", static_cast<double>(s.samples), rule}};
    f.cause =
        "the layer is fed a tensor that never holds a value: a recurrent state that is not carried from one time "
        "step to the next (the initial zero state passed at every step: cell(x_t, h0) for cell(x_t, h)), a "
        "buffer or a mask that zeroes its input, a branch given the wrong (zero) tensor";
    f.fix =
        "follow the layer's input back to where it is made: carry the state (h = cell(x_t, h)), and check the "
        "masks and buffers on the way";
    out.push_back(std::move(f));
  }
  for (const Seen& s : values_) {
    if (s.nonzero || s.samples < need) continue;
    Finding f =
        make("M25", Severity::Warning,
             "parameter " + s.name + " stayed entirely zero over the run (" + num(s.samples) + " sampled steps)");
    f.kind = Kind::ZeroValue;
    f.parameter = s.name;
    f.evidence = {{"sampled steps with an all-zero value", static_cast<double>(s.samples), rule}};
    f.cause =
        "the parameter was initialised to zero and no update ever moved it: with every weight of a layer at "
        "zero its units compute the same thing (zero), and in front of a ReLU they get no gradient at all";
    f.fix =
        "do not initialise weights to zero: keep the layer's default initialisation (or init::kaiming_normal_ "
        "/ init::xavier_uniform_); only biases may start at zero";
    out.push_back(std::move(f));
  }
  // A collapse mid-run: nonzero at a sampled step, entirely zero at a later one.
  const std::string collapse_rule = "nonzero at an earlier sampled step, then entirely zero at one flags";
  auto collapsed = [&](const Seen& s, const std::string& what, const std::string& unit) {
    Finding f = make("M25", Severity::Warning,
                     what + " became entirely zero at step " + num(s.collapsed_at) + " after being nonzero (zero at " +
                         num(s.zero_after) + " of the " + num(s.samples_after) + " sampled steps from then on)");
    f.kind = unit == "gradient" ? Kind::ZeroGradient : Kind::ZeroValue;
    f.step = s.collapsed_at;
    f.evidence = {{"first step with an all-zero " + unit, static_cast<double>(s.collapsed_at), collapse_rule},
                  {"sampled steps all-zero from then on", static_cast<double>(s.zero_after), ""},
                  {"sampled steps from then on", static_cast<double>(s.samples_after), ""}};
    return f;
  };
  for (const Seen& s : outputs_) {
    if (!s.nonzero || s.collapsed_at < 0) continue;
    Finding f = collapsed(s, "the output of " + s.name, "output");
    f.module = s.name;
    f.cause =
        "something set this layer's output to zero during training: its weights were zeroed (pruning with a "
        "threshold too high, a weight decay or a manual reset), its input went to zero, or a mask or gate "
        "switched it off; everything after it then learns nothing from its input";
    f.fix =
        "look at what your loop does to this layer around that step (pruning, masks, resets, a schedule that "
        "scales it); check its weights and its input at that step";
    out.push_back(std::move(f));
  }
  for (const Seen& s : values_) {
    if (!s.nonzero || s.collapsed_at < 0) continue;
    Finding f = collapsed(s, "parameter " + s.name, "value");
    f.parameter = s.name;
    f.cause =
        "the weights were nonzero and something set every one of them to zero: a pruning step whose "
        "threshold is above every weight, a reset or a mask applied to the wrong tensor, a weight decay far "
        "too strong";
    f.fix =
        "check what your loop writes to this parameter around that step (a pruning threshold, an in-place "
        "mul_ or zero_); prune a fraction of the weights, not those below an absolute threshold";
    out.push_back(std::move(f));
  }
  for (const Seen& s : grads_) {
    if (!s.nonzero || s.collapsed_at < 0) continue;
    if (std::find(skip.begin(), skip.end(), s.name) != skip.end()) continue;
    Finding f = collapsed(s, "the gradient of " + s.name, "gradient");
    f.parameter = s.name;
    f.cause =
        "the loss stopped depending on this parameter: the layers after it were zeroed, the units it feeds "
        "died, or the targets of that batch were masked";
    f.fix =
        "find what blocks the path from that step on: a layer zeroed mid-run (its own M25 finding), dead ReLUs "
        "(M7), masked targets (L5)";
    // Zero on a minority of the steps from then on (a path cut for good is zero at every one): the path
    // is open, and some batches give an exact zero (an L1 loss's gradient at a bias is the balance of its residuals'
    // signs, 0 where as many are above as below).
    if (2 * s.zero_after < s.samples_after) {
      f.severity = Severity::Info;
      f.title += ": nonzero at most of them, so the path is open";
      f.evidence[1].rule = "half of the steps from then on or more warns";
      f.cause =
          "some batches give this parameter an exact zero gradient (a bias under an L1 loss gets the balance of "
          "its residuals' signs: 0 where as many lie above the prediction as below), the others do not";
      f.fix = "none needed";
    }
    out.push_back(std::move(f));
  }
  for (const Seen& s : grads_) {
    if (s.nonzero || s.samples < need) continue;
    if (std::find(skip.begin(), skip.end(), s.name) != skip.end()) continue;
    Finding f = make("M25", Severity::Warning,
                     "the gradient of " + s.name + " was entirely zero at every one of " + num(s.samples) +
                         " sampled training steps");
    f.kind = Kind::ZeroGradient;
    f.parameter = s.name;
    f.evidence = {{"sampled steps with an all-zero gradient", static_cast<double>(s.samples), rule}};
    f.cause =
        "the loss does not depend on this parameter through any active path: the units it feeds are dead "
        "(ReLU) or zeroed, or every target is masked; it never learns";
    f.fix = "find what blocks the path: dead ReLUs (M7), an all-zero layer output (M25), masked targets (L5)";
    out.push_back(std::move(f));
  }
  return out;
}

// ---- M26 ------------------------------------------------------------------------------------
void VarianceTracker::attach(nn::Module& model) {
  hooks_.clear();
  layers_.clear();
  for (auto& [path, m] : leaf_modules(model)) {
    const size_t i = layers_.size();
    layers_.push_back({module_label(path, *m), {}});
    // The input's storage and version before the forward: an output on that storage with that
    // version is the input's own values, unchanged (Flatten, a reshape, an identity). Such a layer
    // adds no values of its own and is not judged (the layer that made them is); an in-place
    // layer writes and moves the version, and is judged.
    hooks_.pre(
        m,
        [this, i](nn::Module&, const Tensor& in) {
          if (!active_) return;
          layers_[i].in_storage = in.defined() ? in.storage().get() : nullptr;
          layers_[i].in_version = in.defined() ? in.version() : 0;
        },
        false);
    hooks_.post(
        m,
        [this, i](nn::Module&, const Tensor&, const Tensor& out) {
          if (!active_ || !GradMode::is_enabled() || !out.defined() || out.numel() < 2 || !out.is_floating_point())
            return;
          Layer& layer = layers_[i];
          if (layer.in_storage && out.storage().get() == layer.in_storage && out.version() == layer.in_version) return;
          detail::OwnTime own;  // untimed while inactive
          auto& v = layer.variance;
          if (!v.empty() && v.back().first == step_) return;  // once per step
          // One pass over the output (tensor_stats' summary), its variance from the population std;
          // NaN when the output holds a non-finite value (that is M12/W4's finding, not this one's).
          const TensorSummary st = summarize(out.detach());
          v.emplace_back(step_, st.all_finite() ? st.std * st.std : std::numeric_limits<double>::quiet_NaN());
        },
        false);
  }
}

std::vector<Finding> VarianceTracker::findings() const {
  std::vector<Finding> out;
  for (const Layer& l : layers_) {
    const auto& v = l.variance;
    // The absolute limits, when set: the first sampled step outside them.
    for (const auto& [st, var] : v) {
      const bool above = o_.variance_max > 0.0 && var > o_.variance_max;
      const bool below = o_.variance_min > 0.0 && var < o_.variance_min;
      if (!above && !below) continue;
      Finding f = make(
          "M26", Severity::Warning,
          "the variance of " + l.name + "'s output was " + fmt_num(var) + " at step " + num(st) + ", " +
              (above ? "above the limit " + fmt_num(o_.variance_max) : "below the limit " + fmt_num(o_.variance_min)) +
              " set for it");
      f.module = l.name;
      f.step = st;
      f.evidence = {{"variance of the output", var,
                     (o_.variance_max > 0.0 ? "> " + fmt_num(o_.variance_max) : std::string()) +
                         (o_.variance_max > 0.0 && o_.variance_min > 0.0 ? " or " : "") +
                         (o_.variance_min > 0.0 ? "< " + fmt_num(o_.variance_min) : std::string()) +
                         " flags (your limits)"}};
      f.cause = above ? "the layer's activations are larger than this model should produce: weights initialised too "
                        "large or growing (a learning rate too high), or inputs not normalised"
                      : "the layer's output is (nearly) constant: units dead or saturated, weights shrunk to ~0, or "
                        "an input that carries no signal";
      f.fix = above ? "check the initialisation (M9, M27) and the inputs' scale (D5); lower the learning rate"
                    : "look at the units before it (M7, M8) and the weight decay";
      out.push_back(std::move(f));
      break;
    }
    if (static_cast<int64_t>(v.size()) < std::max<int64_t>(o_.variance_min_records, 4)) continue;
    const double first = v.front().second;
    const double last = detail::median({v[v.size() - 1].second, v[v.size() - 2].second, v[v.size() - 3].second});
    if (!std::isfinite(first) || !std::isfinite(last) || !(first > 0.0)) continue;  // NaN is M12/W4's
    const double ratio = last / first;
    // Growth is measured from at least variance_floor: a classifier's logits start near 0 (variance
    // ~1e-3) and end confident (~1e2) without anything blowing up.
    const double growth = last / std::max(first, o_.variance_floor);
    const bool collapsed = ratio < o_.variance_collapse, blew_up = growth > o_.variance_growth;
    if (!collapsed && !blew_up) continue;
    Finding f = make("M26", Severity::Warning,
                     "the variance of " + l.name + "'s output " + (collapsed ? "collapsed" : "blew up") +
                         " over the run: " + fmt_num(first) + " at step " + num(v.front().first) + ", " +
                         fmt_num(last) + " by step " + num(v.back().first));
    f.kind = collapsed ? Kind::VarianceCollapsed : Kind::VarianceBlewUp;
    f.module = l.name;
    f.step = v.back().first;
    f.evidence = {{"variance at the first sampled step", first, ""},
                  {"variance at the last sampled steps (median of 3)", last, ""},
                  {"ratio last / first", ratio, "< " + fmt_num(o_.variance_collapse) + " flags"},
                  {"ratio last / max(first, " + fmt_num(o_.variance_floor) + ")", growth,
                   "> " + fmt_num(o_.variance_growth) + " flags"}};
    f.cause = collapsed ? "the layer's output became (nearly) constant: every input gives the same activation, so the "
                          "layers after it get no information; weights shrunk to ~0 (too much weight decay), units "
                          "that died or saturated, or a normalisation that divides by a growing scale"
                        : "the layer's activations grew by orders of magnitude: weights are growing (a learning rate "
                          "too high, no normalisation), and the next step overflows or saturates every unit after it";
    f.fix = collapsed ? "look at the layer's weights and the units before it (M7, M8); lower the weight decay or the "
                        "learning rate"
                      : "lower the learning rate, clip gradients, or add normalisation (BatchNorm/LayerNorm) before "
                        "this layer";
    out.push_back(std::move(f));
  }
  return out;
}

// ---- M25, M26 during training (the monitor's run checks) --------------------------------------
namespace {

class AllZeroRunCheck final : public TrackerRunCheck<AllZeroTracker> {
 public:
  using TrackerRunCheck::TrackerRunCheck;
  std::string ids() const override { return "M25"; }
  uint32_t events() const override { return kEvents | RunEvent::BeforeStep; }
  void before_step(RunContext& c, bool sampled) override {
    if (sampled) t_.record_parameters(c.model, !c.flat_step);
  }
  void finish(RunContext& c) override {
    c.add_all(t_.findings(c.zero_grad_by_construction));
    if (c.steps > 0) c.note_ran("M25");
  }
};

class VarianceRunCheck final : public TrackerRunCheck<VarianceTracker> {
 public:
  using TrackerRunCheck::TrackerRunCheck;
  std::string ids() const override { return "M26"; }
  uint32_t events() const override { return kEvents; }
  void finish(RunContext& c) override {
    c.add_all(t_.findings());
    if (c.steps > 0) c.note_ran("M26");
  }
};
}  // namespace

std::unique_ptr<RunCheck> make_all_zero_run_check(const MonitorOptions& o) {
  return std::make_unique<AllZeroRunCheck>(o.run);
}
std::unique_ptr<RunCheck> make_variance_run_check(const MonitorOptions& o) {
  return std::make_unique<VarianceRunCheck>(o.run);
}

}  // namespace gradsleuth::debug
