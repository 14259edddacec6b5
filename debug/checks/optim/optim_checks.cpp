// The optimisation checks O1-O4 and O6 (see optim_checks.h): gradient health,
// norm histories, non-finite weights, learning rate and update/weight ratios.
#include "debug/checks/optim/optim_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/evidence/tensor_stats.h"

namespace gradsleuth::debug {

namespace {

using detail::kNaN;
using detail::make;
using detail::median;
using detail::num;





// The L2 norm; NaN when any value is NaN, Inf when any is Inf.
double norm_of(const Tensor& t) {
  const TensorSummary s = summarize_norm(t);
  if (s.nan > 0) return kNaN;
  if (s.inf > 0) return std::numeric_limits<double>::infinity();
  return s.norm;
}

// Module path -> "path (Type)", for every module under the model.
void walk(const nn::Module& m, const std::string& path, std::map<std::string, std::string>& out) {
  out[path] = (path.empty() ? std::string("(model)") : path) + " (" + m.type_name() + ")";
  for (const auto& [name, c] : m.named_children()) walk(*c, path.empty() ? name : path + "." + name, out);
}
std::map<std::string, std::string> module_labels(const nn::Module& model) {
  std::map<std::string, std::string> out;
  walk(model, "", out);
  return out;
}
// The label of the module owning parameter `path` ("4.inner.1.weight" -> "4.inner.1 (Linear)").
std::string owner(const std::map<std::string, std::string>& labels, const std::string& path) {
  const auto dot = path.rfind('.');
  const auto it = labels.find(dot == std::string::npos ? "" : path.substr(0, dot));
  return it == labels.end() ? "" : it->second;
}

Finding at(Finding f, const std::map<std::string, std::string>& labels, const std::string& name, const Tensor& p) {
  f.module = owner(labels, name);
  f.parameter = name;
  f.shape = shape_of(p);
  return f;
}

const char* kCauseVanishing = "likely causes of vanishing gradients: sigmoid/tanh saturation; too many layers "
                              "without skip connections; poor weight initialisation; very small learning rate";
const char* kFixVanishing = "use ReLU/GELU activations, skip connections, He/Xavier initialisation, batch/layer "
                            "normalisation, or fewer layers";
const char* kCauseExploding = "likely causes of exploding gradients: learning rate too high; poor initialisation "
                              "(weights too large); deep nets without normalisation or clipping; numerical "
                              "instability in the loss";
const char* kFixExploding = "clip gradients (clip_grad_norm 1.0), lower the learning rate, use a proper "
                            "initialisation (M9) and normalisation layers";

}  // namespace

// ---- O1 gradient health ---------------------------------------------------------------

std::vector<Finding> check_gradient_health(const nn::Module& model, const OptimCheckOptions& opts) {
  // The modules' labels, built the first time a finding needs one (a healthy step needs none).
  std::map<std::string, std::string> labels_built;
  auto labels_of = [&]() -> const std::map<std::string, std::string>& {
    if (labels_built.empty()) labels_built = module_labels(model);
    return labels_built;
  };
  auto has_batchnorm = [&] {
    const auto& labels = labels_of();
    return std::any_of(labels.begin(), labels.end(),
                       [](const auto& kv) { return kv.second.find("(BatchNorm") != std::string::npos; });
  };
  std::vector<Finding> out;
  struct Judged {
    std::string name;
    double norm;
    bool weight;
  };
  std::vector<Judged> judged;
  std::vector<std::pair<std::string, Tensor>> missing;
  int64_t trainable = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad()) continue;
    ++trainable;
    const Tensor g = p.grad();
    if (!g.defined()) {
      missing.emplace_back(name, p);
      continue;
    }
    const TensorSummary s = summarize_norm(g);  // the norm and the NaN/Inf counts
    if (!s.all_finite()) {
      Finding f = at(make("O1", Severity::Error,
                          "the gradient of " + name + " holds NaN/Inf values"),
                     labels_of(), name, p);
      f.kind = Kind::GradientNonFinite;
      f.nonfinite = true;
      f.evidence = {{"NaN values", static_cast<double>(s.nan), "any is an error"},
                    {"Inf values", static_cast<double>(s.inf), "any is an error"},
                    {"values", static_cast<double>(s.numel), ""}};
      f.cause = std::string("a non-finite loss or an overflow in the backward: ") + kCauseExploding +
                "; log or division of 0 in the loss";
      f.fix = "turn on anomaly mode (W4) to name the op whose backward made it; clip gradients and lower the "
              "learning rate";
      out.push_back(f);
      continue;
    }
    judged.push_back({name, s.norm, p.dim() >= 2});
    const bool by_construction = std::find(opts.zero_grad_by_construction.begin(),
                                           opts.zero_grad_by_construction.end(),
                                           name) != opts.zero_grad_by_construction.end();
    if (s.norm < opts.vanishing_grad_norm && by_construction) continue;  // a redundant bias: said once, as info
    if (s.norm < opts.vanishing_grad_norm) {
      Finding f = at(make("O1", Severity::Warning,
                          "the gradient of " + name + " is vanishing"),
                     labels_of(), name, p);
      f.kind = Kind::GradientVanishing;
      f.evidence = {{"gradient norm", s.norm, "< " + fmt_num(opts.vanishing_grad_norm) + " is vanishing"}};
      f.cause = kCauseVanishing;
      if (s.norm == 0.0)
        f.cause = "an exact zero: the parameter is in the graph but nothing flows back (dead ReLUs after it, M7; a "
                  "multiplication by 0; a saturated activation); " + f.cause;
      if (p.dim() == 1 && name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0 && has_batchnorm())
        f.cause += ". The model has a BatchNorm: a bias right before one always gets ~0 (the normalisation "
                   "subtracts the batch mean, so the bias has no effect); then build that layer without bias, "
                   "nothing is wrong with training";
      f.fix = kFixVanishing;
      out.push_back(f);
    } else if (s.norm > opts.exploding_grad_norm) {
      Finding f = at(make("O1", Severity::Warning,
                          "the gradient of " + name + " is exploding"),
                     labels_of(), name, p);
      f.kind = Kind::GradientExploding;
      f.evidence = {{"gradient norm", s.norm, "> " + fmt_num(opts.exploding_grad_norm) + " is exploding"}};
      f.cause = kCauseExploding;
      f.fix = kFixExploding;
      out.push_back(f);
    }
  }

  // No gradient at all: one finding, not one per parameter.
  if (!missing.empty() && static_cast<int64_t>(missing.size()) == trainable) {
    Finding f = make("O1", Severity::Warning,
                     "no trainable parameter has a gradient");
    f.kind = Kind::NoGradientAtStep;
    f.evidence = {{"parameters without a gradient", static_cast<double>(trainable), "any warns"}};
    f.cause = "backward() has not run since the gradients were cleared (zero_grad sets them to none), or the loss "
              "was computed under no_grad / from detached outputs";
    f.fix = "call check_gradient_health after loss.backward() and before optimizer.zero_grad(); check that the "
            "loss requires grad";
    out.push_back(f);
  } else {
    for (const auto& [name, p] : missing) {
      Finding f = at(make("O1", Severity::Warning, "the trainable parameter " + name + " got no gradient"), labels_of(),
                     name, p);
      f.kind = Kind::GradientMissing;
      f.evidence = {{"gradient defined (1 = yes)", 0.0, "0 after a backward warns"}};
      f.cause = "no gradient reaches it: a detach() (or .data) between it and the loss, a layer the "
                "forward never uses, or it should have been frozen (requires_grad false)";
      f.fix = "find where the graph is cut (M5 gradient flow names the first module without gradient); freeze "
              "it on purpose with requires_grad_(false), or remove the unused layer";
      out.push_back(f);
    }
  }

  // Across depth: first weight / last weight.
  std::vector<const Judged*> weights;
  for (const Judged& j : judged)
    if (j.weight) weights.push_back(&j);
  double ratio = kNaN;
  if (weights.size() >= 2) {
    const Judged& first = *weights.front();
    const Judged& last = *weights.back();
    ratio = last.norm > 0 ? first.norm / last.norm : (first.norm > 0 ? std::numeric_limits<double>::infinity() : kNaN);
    const bool vanish = ratio < opts.depth_ratio_vanishing, explode = ratio > opts.depth_ratio_exploding;
    if (vanish || explode) {
      Finding f = make("O1", Severity::Warning,
                       std::string("gradients ") + (vanish ? "vanish" : "explode") + " towards the input: ||grad " +
                           first.name + "|| / ||grad " + last.name + "|| is " + (vanish ? "tiny" : "large"));
      f.kind = vanish ? Kind::VanishTowardsInput : Kind::ExplodeTowardsInput;
      f.module = owner(labels_of(), first.name) + " .. " + owner(labels_of(), last.name);
      f.parameter = first.name;
      f.evidence = {{"first weight's gradient norm (" + first.name + ")", first.norm, ""},
                    {"last weight's gradient norm (" + last.name + ")", last.norm, ""},
                    {"first / last", ratio,
                     vanish ? "< " + fmt_num(opts.depth_ratio_vanishing) + " is vanishing"
                            : "> " + fmt_num(opts.depth_ratio_exploding) + " is exploding"},
                    {"weights between them", static_cast<double>(weights.size()), ""}};
      f.cause = vanish ? kCauseVanishing : kCauseExploding;
      f.fix = vanish ? kFixVanishing : kFixExploding;
      out.push_back(f);
    }
  }

  if (out.empty() && !judged.empty()) {
    auto [lo, hi] = std::minmax_element(judged.begin(), judged.end(),
                                        [](const Judged& a, const Judged& b) { return a.norm < b.norm; });
    Finding f = make("O1", Severity::Info, "gradients look healthy (no NaN/Inf, none vanishing or exploding)");
    f.evidence = {{"parameters with a gradient", static_cast<double>(judged.size()), ""},
                  {"smallest gradient norm (" + lo->name + ")", lo->norm,
                   ">= " + fmt_num(opts.vanishing_grad_norm)},
                  {"largest gradient norm (" + hi->name + ")", hi->norm, "<= " + fmt_num(opts.exploding_grad_norm)}};
    if (std::isfinite(ratio))
      f.evidence.push_back({"first / last weight gradient norm", ratio,
                            "inside [" + fmt_num(opts.depth_ratio_vanishing) + ", " +
                                fmt_num(opts.depth_ratio_exploding) + "]"});
    f.fix = "none needed";
    out.push_back(f);
  }
  return out;
}

// ---- O2 / O3 norm history ---------------------------------------------------------------

NormHistory::Param& NormHistory::param(const std::string& name, const Tensor& p) {
  for (Param& q : params_)
    if (q.name == name) return q;
  params_.push_back({name, shape_of(p), p.dim(), p.numel(), {}, {}});
  return params_.back();
}

void NormHistory::record(int64_t step, const nn::Module& model, const std::function<double(const Tensor&)>& weight_norm) {
  NoGradGuard ng;
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad()) continue;
    Param& q = param(name, p);
    const Tensor g = p.grad();
    if (g.defined()) q.grad.emplace_back(step, norm_of(g));
    const double known = weight_norm ? weight_norm(p) : kNaN;
    q.weight.emplace_back(step, std::isnan(known) ? norm_of(p) : known);
  }
  ++records_;
}

std::vector<Finding> NormHistory::findings() const {
  std::vector<Finding> out;
  const int64_t W = std::max<int64_t>(o_.spike_window, 1), P = std::max<int64_t>(o_.spike_persist, 1);
  for (const Param& q : params_) {
    // ---- O2: spikes in the gradient norm ----
    const auto& g = q.grad;
    const int64_t n = static_cast<int64_t>(g.size());
    int64_t lone = 0, sustained = 0, nonfinite_step = -1;
    double lone_worst = 0.0, sus_ratio = 0.0, sus_level = 0.0, sus_ref = 0.0;
    int64_t lone_step = -1, sus_step = -1;
    // The gradient scale at the start of training: a spike that stays far below
    // it (a converged model's tiny gradients rising on a few hard examples) is
    // not instability.
    double start_level = kNaN;
    for (int64_t j = 0; j < std::min<int64_t>(n, 5); ++j)
      if (std::isfinite(g[j].second) && !(g[j].second <= start_level)) start_level = g[j].second;
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(g[i].second)) {
        if (nonfinite_step < 0) nonfinite_step = g[i].first;
        continue;
      }
      if (i < W) continue;
      std::vector<double> prev;
      for (int64_t j = i - W; j < i; ++j)
        if (std::isfinite(g[j].second)) prev.push_back(g[j].second);
      const double ref = median(prev);
      if (!(ref > 0) || g[i].second <= o_.spike_factor * ref) continue;
      if (std::isfinite(start_level) && g[i].second < o_.spike_min_start_fraction * start_level) continue;
      const double ratio = g[i].second / ref;
      double after = kNaN;
      if (i + P <= n) {
        std::vector<double> next;
        for (int64_t j = i; j < i + P; ++j) next.push_back(g[j].second);
        after = median(next);  // a NaN inside counts as high: std::nth_element with NaN is unordered, so guard
        for (double v : next)
          if (std::isnan(v)) after = std::numeric_limits<double>::infinity();
      }
      if (after > o_.spike_factor * ref) {
        if (sustained == 0) {
          sus_step = g[i].first;
          sus_ratio = after / ref;
          sus_level = after;
          sus_ref = ref;
        }
        ++sustained;
      } else {
        ++lone;
        if (ratio > lone_worst) {
          lone_worst = ratio;
          lone_step = g[i].first;
        }
      }
    }
    if (nonfinite_step >= 0) {
      Finding f = make("O2", Severity::Error,
                       "the gradient norm of " + q.name + " became non-finite at step " + num(nonfinite_step));
      f.kind = Kind::NormNonFinite;
      f.nonfinite = true;
      f.parameter = q.name;
      f.shape = q.shape;
      f.step = nonfinite_step;
      f.evidence = {{"first non-finite step", static_cast<double>(nonfinite_step), "any is an error"},
                    {"records", static_cast<double>(n), ""}};
      f.cause = kCauseExploding;
      f.fix = "look at the steps before it in grad_series(): a growing norm means an lr too high (O6); anomaly "
              "mode (W4) names the op that produced the first NaN/Inf";
      out.push_back(f);
    }
    if (sustained > 0) {
      Finding f = make("O2", Severity::Warning,
                       "the gradient norm of " + q.name + " jumped " + fmt_num(sus_ratio) + "x at step " +
                           num(sus_step) + " and stayed up: unstable training");
      f.kind = Kind::NormJump;
      f.parameter = q.name;
      f.shape = q.shape;
      f.step = sus_step;
      f.evidence = {{"median of the " + num(P) + " records from the spike / median of the " + num(W) + " before",
                     sus_ratio, "> " + fmt_num(o_.spike_factor) + " is a sustained spike"},
                    {"gradient norm before (median)", sus_ref, ""},
                    {"gradient norm after (median)", sus_level, ""},
                    {"records in sustained spikes", static_cast<double>(sustained), ""},
                    {"lone spikes", static_cast<double>(lone), ""}};
      f.cause = std::string("gradient-norm spikes announce unstable training before it diverges; ") +
                kCauseExploding;
      f.fix = std::string(kFixExploding) + "; weight decay also bounds the weights";
      out.push_back(f);
    } else if (lone > 0) {
      Finding f = make("O2", Severity::Info,
                       num(lone) + " lone gradient spike" + (lone == 1 ? "" : "s") + " in " + q.name +
                           " (worst " + fmt_num(lone_worst) + "x at step " + num(lone_step) +
                           "), each back to normal at once");
      f.parameter = q.name;
      f.shape = q.shape;
      f.step = lone_step;
      f.evidence = {{"lone spikes", static_cast<double>(lone), ""},
                    {"worst spike / median of the " + num(W) + " records before", lone_worst,
                     "> " + fmt_num(o_.spike_factor) + " is a spike; it warns only when it lasts"}};
      f.cause = "single batches with an unusual gradient. Typical right before a BatchNorm: a channel that barely "
                "varies within a batch has its gradient divided by its tiny std (the healthy reference MLP shows "
                "several per 1000 steps in its first Linear)";
      f.fix = "none needed while they stay isolated; clip gradients if they grow more frequent";
      out.push_back(f);
    }

    // ---- O3: steadily growing weight norm (weights only) ----
    if (q.dim < 2) continue;
    const auto& w = q.weight;
    const double floor = o_.min_weight_rms * std::sqrt(static_cast<double>(std::max<int64_t>(q.numel, 1)));
    size_t i0 = 0;
    while (i0 < w.size() && !(std::isfinite(w[i0].second) && w[i0].second >= floor)) ++i0;
    if (i0 >= w.size() || static_cast<int64_t>(w.size() - i0) < std::max<int64_t>(o_.min_records, 2)) continue;
    bool finite = true;
    int64_t up = 0;
    for (size_t i = i0 + 1; i < w.size(); ++i) {
      finite = finite && std::isfinite(w[i].second);
      up += w[i].second > w[i - 1].second;
    }
    if (!finite) continue;  // O4 reports non-finite weights
    const double growth = w.back().second / w[i0].second;
    const double inc = static_cast<double>(up) / static_cast<double>(w.size() - i0 - 1);
    if (growth > o_.weight_growth_factor && inc >= o_.weight_growth_min_increasing) {
      Finding f = make("O3", Severity::Warning,
                       "the weight norm of " + q.name + " grew " + fmt_num(growth) + "x (" + fmt_num(w[i0].second) +
                           " -> " + fmt_num(w.back().second) + ") between steps " + num(w[i0].first) + " and " +
                           num(w.back().first));
      f.parameter = q.name;
      f.shape = q.shape;
      f.step = w.back().first;
      f.evidence = {{"last / first weight norm", growth, "> " + fmt_num(o_.weight_growth_factor) + " warns"},
                    {"fraction of records where it grew", inc,
                     ">= " + fmt_num(o_.weight_growth_min_increasing) + " is steady"},
                    {"first weight norm", w[i0].second, ""},
                    {"last weight norm", w.back().second, ""},
                    {"records", static_cast<double>(w.size() - i0), ""}};
      f.cause = "a weight norm that keeps increasing is an early sign of divergent training: steps too "
                "large for the weights (learning rate too high). Before a normalisation layer the scale "
                "of a weight is free, so oversized steps inflate it instead of blowing up the loss";
      f.fix = "lower the learning rate; add or increase weight decay (it constrains the weights' "
              "magnitude); clip gradients";
      out.push_back(f);
    }
  }
  return out;
}

NormSeries NormHistory::grad_series() const {
  NormSeries s;
  for (const Param& q : params_) s.emplace_back(q.name, q.grad);
  return s;
}

NormSeries NormHistory::weight_series() const {
  NormSeries s;
  for (const Param& q : params_) s.emplace_back(q.name, q.weight);
  return s;
}

// ---- O4 non-finite weights ----------------------------------------------------------------

double UpdateRatioTracker::measured_norm(const Tensor& p) const {
  if (measuring_step_ < 0 || !p.defined()) return kNaN;
  for (const Param& q : params_)
    if (q.tensor.is_same(p)) return q.norm_before;
  return kNaN;
}

bool UpdateRatioTracker::measured_finite(const Tensor& p) const {
  return p.defined() && std::find(finite_after_.begin(), finite_after_.end(), p.impl_ptr().get()) != finite_after_.end();
}

std::vector<Finding> check_finite_weights(const nn::Module& model, const std::function<bool(const Tensor&)>& known_finite) {
  std::vector<Finding> out;
  std::map<std::string, std::string> labels;
  for (const auto& [name, p] : model.named_parameters()) {
    if ((known_finite && known_finite(p)) || all_finite(p)) continue;
    if (labels.empty()) labels = module_labels(model);
    const TensorSummary s = summarize(p);
    Finding f = at(make("O4", Severity::Error,
                        "the parameter " + name + " holds NaN/Inf values"),
                   labels, name, p);
    f.nonfinite = true;
    f.evidence = {{"NaN values", static_cast<double>(s.nan), "any is an error"},
                  {"Inf values", static_cast<double>(s.inf), "any is an error"},
                  {"values", static_cast<double>(s.numel), ""},
                  {"non-finite fraction", static_cast<double>(s.nan + s.inf) / static_cast<double>(s.numel), ""}};
    f.cause = "an update with a non-finite gradient or a step so large that it overflowed (exploding "
              "gradients, learning rate too high); once a weight is NaN every output and gradient after it is too";
    f.fix = "stop and go back to the last finite checkpoint; find the first non-finite loss or gradient (L1, O1, "
            "anomaly mode W4); lower the learning rate and clip gradients";
    out.push_back(f);
  }
  return out;
}

// ---- O6 learning rate -----------------------------------------------------------------------

std::vector<Finding> diagnose_learning_rate(const std::vector<double>& train_losses, const OptimCheckOptions& opts) {
  const LossHistoryStats s = analyse_loss_history(train_losses, opts.loss);
  const auto& lo = opts.loss;
  // A loss that is NaN/Inf from the very first step was broken before any
  // update: the learning rate cannot be the cause (L1 says what else can).
  if (!train_losses.empty() && !std::isfinite(train_losses.front())) return {};
  if (s.too_high()) {
    std::vector<std::string> why;
    if (s.first_nan_step >= 0) why.push_back("is NaN from step " + num(s.first_nan_step));
    if (s.first_inf_step >= 0) why.push_back("is Inf from step " + num(s.first_inf_step));
    if (s.spiking)
      why.push_back("jumps above its starting value (" + num(s.spikes) + (s.spikes == 1 ? " spike)" : " spikes)"));
    if (s.diverging) why.push_back("diverges");
    if (s.oscillating) why.push_back("oscillates wildly");
    std::string list;
    for (size_t i = 0; i < why.size(); ++i) list += (i ? ", " : "") + why[i];
    Finding f = make("O6", Severity::Warning, "the learning rate looks too high: the loss " + list);
    f.kind = Kind::LrTooHigh;
    f.step = s.spiking ? s.worst_spike_step : s.first_nan_step >= 0 ? s.first_nan_step : s.rise_step;
    f.evidence = {{"first loss", s.first_loss, ""},
                  {"spikes above the first loss", static_cast<double>(s.spikes), "any warns"}};
    if (s.spiking)
      f.evidence.push_back({"worst spike loss (step " + num(s.worst_spike_step) + ")", s.worst_spike_loss, ""});
    if (s.trend_judged)
      f.evidence.push_back({"smoothed rise above the best", s.max_rise, "> " + fmt_num(lo.diverge_factor) + " warns"});
    f.evidence.push_back({"step-to-step swing / level", s.max_swing, "> " + fmt_num(lo.max_relative_swing) + " warns"});
    if (s.first_nan_step >= 0)
      f.evidence.push_back({"first NaN step", static_cast<double>(s.first_nan_step), "any warns"});
    f.cause = "a learning rate too high makes the loss oscillate, jump or diverge (NaN). With Adam every "
              "weight moves by about lr per step whatever its gradient: lr 0.1 throws a fresh network far off at "
              "step 1";
    f.fix = "lower the learning rate 3-10x (Adam: start at 1e-3); add a warm-up; clip gradients; then check that "
            "the update/weight ratios sit near 1e-3 (UpdateRatioTracker)";
    return {f};
  }
  if (s.trend_judged && s.stuck) {
    Finding f = make("O6", Severity::Warning,
                     "the learning rate may be too low: the loss fell only " + fmt_num(100.0 * s.relative_decrease) +
                         "% in " + num(s.finite_steps) + " steps");
    f.kind = Kind::LrTooLow;
    f.evidence = {{"relative decrease (first window vs best later)", s.relative_decrease,
                   "< " + fmt_num(lo.min_relative_decrease) + " is flat"},
                  {"median of the first " + num(s.window) + " steps", s.window_medians[0], ""},
                  {"last window median", s.last_level, ""}};
    f.cause = "a learning rate too low leaves the loss flat (it would take forever to move). A flat loss "
              "has other causes too: frozen or detached layers (M5, M10), dead units (M7), vanishing gradients (O1)";
    f.fix = "raise the learning rate 10x and compare (an lr range test); check the update/weight ratios "
            "(UpdateRatioTracker: ~1e-3 is healthy, below 1e-5 nothing moves)";
    return {f};
  }
  return {};
}
std::vector<Finding> diagnose_lr_schedule(const std::vector<double>& lrs, const OptimCheckOptions& opts) {
  std::vector<Finding> out;
  const int64_t n = static_cast<int64_t>(lrs.size());
  if (n < opts.schedule_min_steps) return out;
  const double start = lrs.front();
  auto finding = [&](const std::string& title) {
    Finding f = make("O6", Severity::Warning, title);
    f.evidence = {{"learning rate at step 1", start, ""}, {"learning rate at the last step", lrs.back(), ""},
                  {"steps", static_cast<double>(n), ""}};
    return f;
  };
  if (!(start > 0.0)) {
    Finding f = finding("the learning-rate schedule starts at " + fmt_num(start) + ": no step changes the weights");
    f.kind = Kind::ScheduleStartsAtZero;
    f.cause = "a learning rate of 0 (a warm-up that starts at 0 and was never stepped, an lr read from an empty "
              "setting)";
    f.fix = "set the optimizer's lr to a positive value and check the scheduler's first value";
    out.push_back(std::move(f));
    return out;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!(lrs[i] < opts.schedule_collapse * start)) continue;
    if (static_cast<double>(i) >= opts.schedule_collapse_by * static_cast<double>(n)) break;
    Finding f = finding("the learning-rate schedule cuts it " + fmt_num(start / std::max(lrs[i], 1e-300)) +
                        "x by step " + std::to_string(i + 1) + " of " + std::to_string(n) +
                        ": the rest of the run barely trains");
    f.kind = Kind::ScheduleCollapses;
    f.evidence.push_back({"first step below the limit", static_cast<double>(i + 1),
                          "< " + fmt_num(opts.schedule_collapse_by) + " of the run warns"});
    f.evidence.push_back({"learning rate there / at step 1", lrs[i] / start, "< " + fmt_num(opts.schedule_collapse) + " warns"});
    f.cause = "a scheduler stepped every batch where its settings count epochs (StepLR's step size, "
              "CosineAnnealingLR's T_max), or a decay too strong for the run's length";
    f.fix = "call scheduler.step() once per epoch (or give its step size in optimizer steps), and check the "
            "learning rate the run ends with";
    out.push_back(std::move(f));
    return out;
  }
  const auto peak = std::max_element(lrs.begin(), lrs.end());
  if (*peak > opts.schedule_growth * start) {
    Finding f = finding("the learning-rate schedule raises it " + fmt_num(*peak / start) + "x, to " + fmt_num(*peak) +
                        " at step " + std::to_string(peak - lrs.begin() + 1));
    f.kind = Kind::ScheduleGrows;
    f.evidence.push_back({"peak / step 1", *peak / start, "> " + fmt_num(opts.schedule_growth) + " warns"});
    f.cause = "a warm-up aimed at the wrong target, a cyclic schedule whose peak is far above the base, or a "
              "scheduler applied twice";
    f.fix = "check the scheduler's target and peak learning rate against the optimizer's";
    out.push_back(std::move(f));
  }
  return out;
}


// ---- O6 update/weight ratios -----------------------------------------------------------------

void UpdateRatioTracker::attach(optim::Optimizer& opt, const nn::Module& model, int64_t every) {
  every = std::max<int64_t>(every, 1);
  attach(opt, model, [every](int64_t step) { return (step - 1) % every == 0; });
}

void UpdateRatioTracker::attach(optim::Optimizer& opt, const nn::Module& model,
                                std::function<bool(int64_t step)> measure) {
  detach();
  params_.clear();
  measurements_ = 0;
  measure_ = std::move(measure);
  const auto& groups = opt.param_groups();
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad()) continue;
    Param q;
    q.name = name;
    q.shape = shape_of(p);
    q.tensor = p;
    q.dim = p.dim();
    q.numel = p.numel();
    for (size_t g = 0; g < groups.size() && q.group < 0; ++g)
      for (const Tensor& t : groups[g].params)
        if (t.is_same(p)) {
          q.group = static_cast<int>(g);
          break;
        }
    params_.push_back(std::move(q));
  }
  opt_ = &opt;
  hooks_ = {opt.add_pre_step_hook([this](optim::Optimizer& o) { pre_step(o); }),
            opt.add_post_step_hook([this](optim::Optimizer& o) { post_step(o); })};
}

void UpdateRatioTracker::detach() {
  if (opt_ == nullptr) return;
  for (size_t id : hooks_) opt_->remove_hook(id);
  hooks_.clear();
  opt_ = nullptr;
  measuring_step_ = -1;
  for (Param& q : params_) q.before = Tensor();
}

void UpdateRatioTracker::pre_step(optim::Optimizer& opt) {
  const int64_t step = opt.steps_taken() + 1;
  if (!measure_ || !measure_(step)) return;
  NoGradGuard ng;
  for (Param& q : params_) {
    const Tensor& t = q.tensor;
    // The snapshot's buffer is kept from one measured step to the next (a fresh one each time
    // costs an allocation and, for large weights, page faults).
    if (!q.before.defined() || q.before.shape() != t.shape() || q.before.dtype() != t.dtype() ||
        q.before.device() != t.device())
      q.before = empty(t.shape(), TensorOptions(t.dtype()).device(t.device()));
    q.norm_before = kNaN;
    const bool host = t.device().is_cpu() && t.is_contiguous();  // q.before is contiguous: made by empty()
    if (host && t.dtype() == kFloat32) {
      // The copy and the weight's norm in one pass (NormHistory's weight norm: norm_before);
      // x * 0 is 0 for a finite x and NaN for NaN and Inf.
      const float* src = static_cast<const float*>(t.raw_data());
      float* dst = static_cast<float*>(q.before.raw_data());
      double sq = 0.0;
      float nonfinite = 0.0f;
#pragma omp simd reduction(+ : sq, nonfinite)
      for (int64_t i = 0; i < t.numel(); ++i) {
        const float v = src[i];
        dst[i] = v;
        sq += static_cast<double>(v) * static_cast<double>(v);
        nonfinite += v * 0.0f;
      }
      if (nonfinite == 0.0f && std::isfinite(sq)) q.norm_before = std::sqrt(sq);
    } else if (host) {
      std::memcpy(q.before.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()) * dtype_size(t.dtype()));
    } else {
      q.before.copy_(t.detach());
    }
  }
  measuring_step_ = step;
}

void UpdateRatioTracker::post_step(optim::Optimizer& opt) {
  finite_after_.clear();
  if (measuring_step_ < 0) return;
  NoGradGuard ng;
  for (Param& q : params_) {
    double wb = 0.0, d = 0.0;
    const Tensor after = q.tensor.detach().contiguous();
    if (!after.device().is_cpu() && after.numel() == q.before.numel()) {
      // On a device: the two sums there, in float64; two scalars come back.
      const Tensor a = after.to(kFloat64), b = q.before.to(kFloat64), diff = a - b;
      const std::vector<double> v = stack({sum(b * b), sum(diff * diff)}).to_vector<double>();
      wb = v[0];
      d = v[1];
    } else if (after.dtype() == kFloat32 && q.before.dtype() == kFloat32 && after.numel() == q.before.numel()) {
      // The common case (float32 on the host), vectorised. The read of the updated weight also
      // tells whether it is finite, which spares O4 a read of it (measured_finite).
      const float* a = static_cast<const float*>(after.raw_data());
      const float* b = static_cast<const float*>(q.before.raw_data());
      const int64_t n = after.numel();
      // ||w_before|| came with the copy (when the weight was finite; else it is read again). Each
      // difference is taken in float32 (exact when the two values are within a factor of 2 of
      // each other, as one step's are: Sterbenz) and squared in float64.
      if (std::isfinite(q.norm_before)) wb = q.norm_before * q.norm_before;
      else sum_of_squares(b, n, wb);
      if (sum_of_squared_differences(a, b, n, d)) finite_after_.push_back(q.tensor.impl_ptr().get());
    } else {
      const std::vector<double> b = q.before.to_vector<double>(), a = after.to_vector<double>();
      for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        wb += b[i] * b[i];
        d += (a[i] - b[i]) * (a[i] - b[i]);
      }
    }
    wb = std::sqrt(wb);
    if (!std::isfinite(wb) || wb < o_.min_weight_rms * std::sqrt(static_cast<double>(std::max<int64_t>(q.numel, 1))))
      continue;
    q.ratios.emplace_back(measuring_step_, std::sqrt(d) / wb);
    q.lrs.push_back(q.group >= 0 ? opt.param_groups()[static_cast<size_t>(q.group)].lr : kNaN);
  }
  ++measurements_;
  measuring_step_ = -1;
}

std::vector<Finding> UpdateRatioTracker::findings() const {
  std::vector<Finding> out;
  for (const Param& q : params_) {
    if (q.dim < 2 || static_cast<int64_t>(q.ratios.size()) < std::max<int64_t>(o_.min_update_records, 1)) continue;
    std::vector<double> r;
    for (const auto& [step, v] : q.ratios) r.push_back(v);
    const double med = median(r);
    const double hi = *std::max_element(r.begin(), r.end());
    const bool never = hi == 0.0;
    const bool small = med < o_.min_update_ratio, large = med > o_.max_update_ratio;
    if (!(small || large) || std::isnan(med)) continue;
    const double lr = q.lrs.empty() ? kNaN : q.lrs.back();
    Finding f = make("O6", Severity::Warning,
                     never   ? q.name + " never changed in " + num(static_cast<int64_t>(r.size())) + " measured steps"
                     : small ? "updates of " + q.name + " are too small: median ||dw|| / ||w|| = " + fmt_num(med)
                             : "updates of " + q.name + " are too large: median ||dw|| / ||w|| = " + fmt_num(med));
    f.kind = never ? Kind::NeverUpdated : small ? Kind::UpdatesTooSmall : Kind::UpdatesTooLarge;
    f.parameter = q.name;
    f.shape = q.shape;
    f.evidence = {{"median update/weight ratio", med,
                   "outside [" + fmt_num(o_.min_update_ratio) + ", " + fmt_num(o_.max_update_ratio) + "] warns"},
                  {"largest ratio", hi, ""},
                  {"measured steps", static_cast<double>(r.size()), ""}};
    if (std::isfinite(lr)) f.evidence.push_back({"learning rate (its group, last measured)", lr, ""});
    if (never) {
      f.cause = q.group < 0 ? "the parameter is trainable but not in the optimizer's parameter groups (M10)"
                            : "the optimizer holds it but its gradient is always missing or zero (M5), or its "
                              "group's learning rate is 0";
      f.fix = "pass model.parameters() to the optimizer after the model is complete; check gradient flow (M5)";
    } else if (small) {
      f.cause = "a learning rate too low; each step changes the weights by less than 1e-5 of their size, "
                "so training barely moves (a healthy step is ~1e-3)";
      f.fix = "raise the learning rate (10x at a time) until the ratio is ~1e-3";
    } else {
      f.cause = "a learning rate too high; each step changes the weights by more than a tenth of their "
                "size, so they jump around instead of descending (a healthy step is ~1e-3)";
      f.fix = "lower the learning rate until the ratio is ~1e-3; add a warm-up";
    }
    out.push_back(f);
  }
  return out;
}

NormSeries UpdateRatioTracker::series() const {
  NormSeries s;
  for (const Param& q : params_) s.emplace_back(q.name, q.ratios);
  return s;
}

// ---- O8 -------------------------------------------------------------------------------------
std::vector<Finding> check_learning_rate_range(const optim::Optimizer& opt, const OptimCheckOptions& o) {
  const std::string& kind = opt.name();
  double lo = 0.0, hi = 0.0;
  if (kind == "Adam" || kind == "AdamW" || kind == "RMSprop") {
    lo = o.adaptive_lr_min;
    hi = o.adaptive_lr_max;
  } else if (kind == "SGD") {
    lo = o.sgd_lr_min;
    hi = o.sgd_lr_max;
  } else {
    return {};
  }
  std::vector<Finding> out;
  const auto& groups = opt.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    const double lr = groups[i].lr;
    if (lr >= lo && lr <= hi) continue;
    const bool high = lr > hi;
    const std::string group = groups.size() == 1 ? std::string()
                                                 : " (parameter group " +
                                                       (groups[i].name.empty() ? num(static_cast<int64_t>(i))
                                                                               : groups[i].name) + ")";
    Finding f = make("O8", Severity::Warning,
                     "the " + kind + " learning rate " + fmt_num(lr) + group + " is " +
                         (high ? "above" : "below") + " the usual range [" + fmt_num(lo) + ", " + fmt_num(hi) +
                         "] before training starts");
    f.kind = high ? Kind::LrAboveRange : Kind::LrBelowRange;
    f.evidence = {{"learning rate", lr, "outside [" + fmt_num(lo) + ", " + fmt_num(hi) + "] flags"}};
    f.cause = high ? "a learning rate this high makes the first updates overshoot: the loss jumps, oscillates or "
                     "turns NaN, and ReLU units can die in the first steps"
                   : "a learning rate this low moves the weights so little that the loss barely falls within a "
                     "normal budget of steps";
    f.fix = kind == "SGD" ? "start SGD between 1e-3 and 0.1 (0.01-0.1 with momentum 0.9), then tune by factors of 3"
                          : "start " + kind + " at its default 1e-3 (3e-4 is a common choice), then tune by factors "
                            "of 3";
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace gradsleuth::debug
