// Checks over a whole training run (see run_checks.h): M25 all-zero tensors, W10 stalled steps.
#include "debug/checks/model/run_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/evidence/tensor_stats.h"
#include "debug/checks/check_util.h"

namespace gradsleuth::debug {

using detail::make;
using detail::num;

// ---- M27: gradient spread in the first steps ---------------------------------------------
void GradientSpreadTracker::record(const nn::Module& model, int64_t step) {
  if (!wants(step)) return;
  NoGradGuard ng;
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad() || p.dim() < 2 || p.numel() < o_.spread_min_values) continue;
    const Tensor g = p.grad();
    if (!g.defined() || !g.is_floating_point()) continue;
    // Rows are the layer's units (output channels), the rest of each row their inputs. A unit's
    // gradient row minus the mean row over the units: zero in every entry when the units are copies.
    const int64_t units = g.size(0), k = g.numel() / std::max<int64_t>(units, 1);
    if (units < 4) continue;
    auto it = std::find_if(seen_.begin(), seen_.end(), [&n = name](const Seen& s) { return s.name == n; });
    // Flagged only when below the limit at every step: one step above it rules the weight out
    // for good, and it is not measured again.
    if (it != seen_.end() && it->steps > 0 && !(it->max_relative < o_.spread_relative)) continue;
    // Read in place when the gradient is a contiguous float32/float64 CPU tensor (the usual
    // case); otherwise one float64 copy.
    const Tensor h = g.device().is_cpu() && g.is_contiguous() && (g.dtype() == kFloat32 || g.dtype() == kFloat64)
                         ? g.detach()
                         : g.detach().to(kCPU).to(kFloat64).contiguous();
    double sq = 0.0, spread = 0.0;
    bool finite = true;
    auto measure = [&](auto tag) {
      using T = decltype(tag);
      const T* v = static_cast<const T*>(h.raw_data());
      // The mean row over the units, and the sum of squares, one row at a time.
      std::vector<double> mean(static_cast<size_t>(k), 0.0);
      int bad = 0;
      for (int64_t i = 0; i < units; ++i) {
        const T* r = v + i * k;
        double rsq = 0.0;
#pragma omp simd reduction(+ : rsq) reduction(| : bad)
        for (int64_t j = 0; j < k; ++j) {
          const double x = static_cast<double>(r[j]);
          bad |= (x - x) != 0.0 ? 1 : 0;
          rsq += x * x;
          mean[static_cast<size_t>(j)] += x;
        }
        sq += rsq;
      }
      finite = bad == 0 && std::isfinite(sq);
      if (!finite || sq == 0.0) return;
      for (double& m : mean) m /= static_cast<double>(units);
      // The percentiles on at most 2048 of the deviations, at a stride coprime with the row
      // length (so every row and column is reached): the same answer for symmetric units (all
      // ~0), and a few microseconds instead of two selections over a large layer's every entry.
      int64_t stride = std::max<int64_t>(1, (h.numel() + 2047) / 2048);
      while (stride > 1 && std::gcd(stride, k) != 1) ++stride;
      std::vector<double> dev;
      dev.reserve(static_cast<size_t>(h.numel() / stride + 1));
      for (int64_t e = 0; e < h.numel(); e += stride)
        dev.push_back(static_cast<double>(v[e]) - mean[static_cast<size_t>(e % k)]);
      // Both percentiles from one buffer: the 5th, then the 95th among the values above it.
      const size_t n = dev.size(), lo = static_cast<size_t>(std::floor(0.05 * static_cast<double>(n - 1))),
                   hi = static_cast<size_t>(std::floor(0.95 * static_cast<double>(n - 1)));
      std::nth_element(dev.begin(), dev.begin() + static_cast<std::ptrdiff_t>(lo), dev.end());
      const double p5 = dev[lo];
      std::nth_element(dev.begin() + static_cast<std::ptrdiff_t>(lo), dev.begin() + static_cast<std::ptrdiff_t>(hi),
                       dev.end());
      spread = dev[hi] - p5;
    };
    if (h.dtype() == kFloat32) measure(float{});
    else measure(double{});
    if (!finite || sq == 0.0) continue;  // NaN/Inf is O1's, an all-zero gradient M25's
    const double rms = std::sqrt(sq / static_cast<double>(h.numel()));
    const double rel = spread / rms;
    if (it == seen_.end()) {
      seen_.push_back({name, shape_of(p)});
      it = seen_.end() - 1;
    }
    if (it->steps == 0 || rel > it->max_relative) {
      it->max_relative = rel;
      it->spread = spread;
      it->rms = rms;
      it->units = units;
    }
    ++it->steps;
  }
}

std::vector<Finding> GradientSpreadTracker::findings() const {
  std::vector<Finding> out;
  for (const Seen& s : seen_) {
    if (s.steps == 0 || !(s.max_relative < o_.spread_relative)) continue;
    Finding f = make("M27", Severity::Warning,
                     "the " + num(s.units) + " units of " + s.name + " get the same gradient at each of the first " +
                         num(s.steps) + " steps: its units are symmetric (5th-95th percentile spread across the "
                         "units " + fmt_num(s.spread) + " against a root mean square of " + fmt_num(s.rms) + ")");
    f.kind = Kind::SymmetricUnits;
    f.parameter = s.name;
    f.shape = s.shape;
    f.evidence = {{"largest spread across the units / rms of the gradient over the first steps", s.max_relative,
                   "< " + fmt_num(o_.spread_relative) + " at every step flags"},
                  {"5th-95th percentile spread across the units at that step", s.spread, ""},
                  {"root mean square of the gradient", s.rms, ""},
                  {"steps judged", static_cast<double>(s.steps), ""},
                  {"units (rows)", static_cast<double>(s.units), ""}};
    f.cause = "the weights were initialised symmetric (one constant, or one row copied): every unit of the layer "
              "computes the same function and gets the same gradient, and gradient descent keeps them identical, "
              "so the layer works as a single unit";
    f.fix = "initialise the weights randomly: the layer's default, init::kaiming_normal_ (ReLU) or "
            "init::xavier_uniform_ (tanh/sigmoid); only biases may start at one constant";
    out.push_back(std::move(f));
  }
  return out;
}

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
  for (auto& [path, m] : leaf_modules(model)) {
    if (m->type_name() == "ReLU") continue;  // M7
    const size_t i = outputs_.size();
    outputs_.push_back({module_label(path, *m)});
    hooks_.post(
        m,
        [this, i](nn::Module&, const Tensor&, const Tensor& out) {
          if (!active_ || !GradMode::is_enabled()) return;  // untimed while inactive
          detail::OwnTime own;
          see(outputs_[i], out);
        },
        false);
  }
}

void AllZeroTracker::record_parameters(const nn::Module& model) {
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
    if (g.defined()) see(find(grads_), g);
  }
}

std::vector<Finding> AllZeroTracker::findings(const std::vector<std::string>& skip) const {
  std::vector<Finding> out;
  const int64_t need = std::max<int64_t>(o_.all_zero_min_samples, 1);
  const std::string rule = "zero at every sampled step flags (from " + num(need) + " samples)";
  for (const Seen& s : outputs_) {
    if (s.nonzero || s.samples < need) continue;
    Finding f = make("M25", Severity::Warning,
                     "the output of " + s.name + " was entirely zero at every one of " + num(s.samples) +
                         " sampled training steps");
    f.kind = Kind::ZeroValue;
    f.module = s.name;
    f.evidence = {{"sampled steps with an all-zero output", static_cast<double>(s.samples), rule}};
    f.cause = "everything after this layer sees zeros and learns nothing from its input: its weights (or the "
              "layers before it) are zero and stay zero, its input is zeroed, or a mask multiplies it away";
    f.fix = "look at the layer's weights and input (a zero initialisation, a mask that is all 0); initialise "
            "weights randomly (the layer's default, or init::kaiming_normal_)";
    out.push_back(std::move(f));
  }
  for (const Seen& s : values_) {
    if (s.nonzero || s.samples < need) continue;
    Finding f = make("M25", Severity::Warning,
                     "parameter " + s.name + " stayed entirely zero over the run (" + num(s.samples) +
                         " sampled steps)");
    f.kind = Kind::ZeroValue;
    f.parameter = s.name;
    f.evidence = {{"sampled steps with an all-zero value", static_cast<double>(s.samples), rule}};
    f.cause = "the parameter was initialised to zero and no update ever moved it: with every weight of a layer at "
              "zero its units compute the same thing (zero), and in front of a ReLU they get no gradient at all";
    f.fix = "do not initialise weights to zero: keep the layer's default initialisation (or init::kaiming_normal_ "
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
    f.cause = "something set this layer's output to zero during training: its weights were zeroed (pruning with a "
              "threshold too high, a weight decay or a manual reset), its input went to zero, or a mask or gate "
              "switched it off; everything after it then learns nothing from its input";
    f.fix = "look at what your loop does to this layer around that step (pruning, masks, resets, a schedule that "
            "scales it); check its weights and its input at that step";
    out.push_back(std::move(f));
  }
  for (const Seen& s : values_) {
    if (!s.nonzero || s.collapsed_at < 0) continue;
    Finding f = collapsed(s, "parameter " + s.name, "value");
    f.parameter = s.name;
    f.cause = "the weights were nonzero and something set every one of them to zero: a pruning step whose "
              "threshold is above every weight, a reset or a mask applied to the wrong tensor, a weight decay far "
              "too strong";
    f.fix = "check what your loop writes to this parameter around that step (a pruning threshold, an in-place "
            "mul_ or zero_); prune a fraction of the weights, not those below an absolute threshold";
    out.push_back(std::move(f));
  }
  for (const Seen& s : grads_) {
    if (!s.nonzero || s.collapsed_at < 0) continue;
    if (std::find(skip.begin(), skip.end(), s.name) != skip.end()) continue;
    Finding f = collapsed(s, "the gradient of " + s.name, "gradient");
    f.parameter = s.name;
    f.cause = "the loss stopped depending on this parameter: the layers after it were zeroed, the units it feeds "
              "died, or the targets of that batch were masked";
    f.fix = "find what blocks the path from that step on: a layer zeroed mid-run (its own M25 finding), dead ReLUs "
            "(M7), masked targets (L5)";
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
    f.cause = "the loss does not depend on this parameter through any active path: the units it feeds are dead "
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
    hooks_.post(m, [this, i](nn::Module&, const Tensor&, const Tensor& out) {
      if (!active_ || !GradMode::is_enabled() || !out.defined() || out.numel() < 2 || !out.is_floating_point()) return;
      Layer& layer = layers_[i];
      if (layer.in_storage && out.storage().get() == layer.in_storage && out.version() == layer.in_version) return;
      detail::OwnTime own;  // untimed while inactive
      auto& v = layer.variance;
      if (!v.empty() && v.back().first == step_) return;  // once per step
      // One pass over the output (tensor_stats' summary), its variance from the population std;
      // NaN when the output holds a non-finite value (that is M12/W4's finding, not this one's).
      const TensorSummary st = summarize(out.detach());
      v.emplace_back(step_, st.all_finite() ? st.std * st.std : std::numeric_limits<double>::quiet_NaN());
    }, false);
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
      Finding f = make("M26", Severity::Warning,
                       "the variance of " + l.name + "'s output was " + fmt_num(var) + " at step " + num(st) + ", " +
                           (above ? "above the limit " + fmt_num(o_.variance_max) : "below the limit " + fmt_num(o_.variance_min)) +
                           " set for it");
      f.module = l.name;
      f.step = st;
      f.evidence = {{"variance of the output", var,
                     (o_.variance_max > 0.0 ? "> " + fmt_num(o_.variance_max) : std::string()) +
                         (o_.variance_max > 0.0 && o_.variance_min > 0.0 ? " or " : "") +
                         (o_.variance_min > 0.0 ? "< " + fmt_num(o_.variance_min) : std::string()) + " flags (your limits)"}};
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
    const bool collapsed = ratio < o_.variance_collapse, blew_up = ratio > o_.variance_growth;
    if (!collapsed && !blew_up) continue;
    Finding f = make("M26", Severity::Warning,
                     "the variance of " + l.name + "'s output " + (collapsed ? "collapsed" : "blew up") + " over the run: " +
                         fmt_num(first) + " at step " + num(v.front().first) + ", " + fmt_num(last) + " by step " +
                         num(v.back().first));
    f.kind = collapsed ? Kind::VarianceCollapsed : Kind::VarianceBlewUp;
    f.module = l.name;
    f.step = v.back().first;
    f.evidence = {{"variance at the first sampled step", first, ""},
                  {"variance at the last sampled steps (median of 3)", last, ""},
                  {"ratio last / first", ratio,
                   "< " + fmt_num(o_.variance_collapse) + " or > " + fmt_num(o_.variance_growth) + " flags"}};
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

// ---- W10 ------------------------------------------------------------------------------------
StepTimer::StepTimer(RunCheckOptions o) : o_(std::move(o)) {
  if (o_.watchdog_seconds > 0.0) watchdog_ = std::thread([this] { watch(); });
}

StepTimer::~StepTimer() { stop_watching(); }

void StepTimer::stop_watching() {
  {
    std::lock_guard<std::mutex> lk(m_);
    stop_ = true;
  }
  wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

// The watchdog: wakes a few times per watchdog_seconds (at least once a second) and reports, once
// per step, a step that has not returned for longer than that.
void StepTimer::watch() {
  using namespace std::chrono;
  const auto period = duration_cast<steady_clock::duration>(duration<double>(std::min(1.0, o_.watchdog_seconds / 4.0)));
  std::unique_lock<std::mutex> lk(m_);
  while (!stop_) {
    wake_.wait_for(lk, period);
    if (stop_ || !running_ || reported_) continue;
    const double waited = duration<double>(steady_clock::now() - last_).count();
    if (waited <= o_.watchdog_seconds) continue;
    reported_ = true;
    const int64_t step = steps_done_ + 1;
    hung_.emplace_back(step, waited);
    const std::string msg = "gradsleuth: W10 stalled training: no optimizer step for " + fmt_num(waited) +
                            " s (step " + num(step) + " has not returned; the limit is " +
                            fmt_num(o_.watchdog_seconds) + " s)";
    const auto say = o_.on_stall;
    lk.unlock();  // the callback may take its time, and must not hold up the training thread
    if (say) say(msg);
    else std::fprintf(stderr, "%s\n", msg.c_str());
    lk.lock();
  }
}

void StepTimer::restart() {
  std::lock_guard<std::mutex> lk(m_);
  running_ = true;
  reported_ = false;
  last_ = std::chrono::steady_clock::now();
  own_at_last_ = detail::own_seconds();
}

void StepTimer::step_done(int64_t step) {
  const double own = detail::own_seconds();  // the training thread's: step_done runs on it
  std::lock_guard<std::mutex> lk(m_);
  const auto now = std::chrono::steady_clock::now();
  if (running_)
    durations_.emplace_back(step, std::max(0.0, std::chrono::duration<double>(now - last_).count() - (own - own_at_last_)));
  running_ = true;
  reported_ = false;
  steps_done_ = step;
  last_ = now;
  own_at_last_ = own;
}

std::vector<std::pair<int64_t, double>> StepTimer::durations() const {
  std::lock_guard<std::mutex> lk(m_);
  return durations_;
}

std::vector<Finding> StepTimer::findings() const {
  std::lock_guard<std::mutex> lk(m_);
  std::vector<Finding> out;
  // A step the watchdog saw hanging that never returned (the run ended with it, or was stopped):
  // the durations below cannot tell it.
  for (const auto& [st, waited] : hung_) {
    const bool returned = std::any_of(durations_.begin(), durations_.end(), [&](const auto& d) { return d.first == st; });
    if (returned) continue;
    Finding f = make("W10", Severity::Warning,
                     "step " + num(st) + " had not returned after " + fmt_num(waited) +
                         " s: no optimizer step for longer than the watchdog's " + fmt_num(o_.watchdog_seconds) + " s");
    f.step = st;
    f.evidence = {{"seconds without an optimizer step", waited, "> " + fmt_num(o_.watchdog_seconds) + " warns"}};
    f.cause = "the loop is blocked: a data loader waiting on a file, a lock or a worker that died, a collective "
              "waiting for a rank that left, or an endless loop in the step";
    f.fix = "look at where the process waits (a debugger's backtrace of every thread); give reads and "
            "collectives a timeout";
    out.push_back(std::move(f));
  }
  if (durations_.empty()) return out;
  std::vector<double> secs;
  for (const auto& [st, s] : durations_) secs.push_back(s);
  const double med = detail::median(secs);
  // Too few steps for a median to mean much: only the absolute limit.
  const bool few = static_cast<int64_t>(durations_.size()) < std::max<int64_t>(o_.stall_min_steps, 1);
  const double limit = few ? o_.stall_max_seconds
                           : std::min(std::max(o_.stall_factor * med, o_.stall_min_seconds), o_.stall_max_seconds);
  int64_t slow = 0, worst_step = -1;
  double worst = 0.0;
  for (const auto& [st, s] : durations_) {
    if (!(s > limit)) continue;
    ++slow;
    if (s > worst) {
      worst = s;
      worst_step = st;
    }
  }
  if (slow == 0) return out;
  Finding f = make("W10", Severity::Warning,
                   "step " + num(worst_step) + " took " + fmt_num(worst) + " s, " + fmt_num(worst / med) +
                       " times the median step (" + fmt_num(med) + " s): training stalled" +
                       (slow > 1 ? " (" + num(slow) + " slow steps)" : ""));
  f.step = worst_step;
  f.evidence = {{"longest step (s)", worst,
                 "> max(" + fmt_num(o_.stall_factor) + " x median, " + fmt_num(o_.stall_min_seconds) + " s), or > " +
                     fmt_num(o_.stall_max_seconds) + " s, flags"},
                {"median step (s)", med, ""},
                {"slow steps", static_cast<double>(slow), ""},
                {"steps timed", static_cast<double>(durations_.size()), ""}};
  f.cause = "something blocked the training loop between two optimizer steps: a data loader waiting on disk or a "
            "network share, a lock or a collective waiting for another process, swapping, or work done inside the "
            "loop every few steps (checkpointing, logging large tensors)";
  f.fix = "time the parts of a slow step (debug::Profiler, W7): the loader, the forward/backward and the code "
          "around them; move occasional work (checkpoints, evaluation) out of the step or make it asynchronous";
  out.push_back(std::move(f));
  return out;
}

}  // namespace gradsleuth::debug
