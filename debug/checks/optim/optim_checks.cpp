// The optimisation checks O1-O4 and O6 (see optim_checks.h): gradient health,
// norm histories, non-finite weights, learning rate and update/weight ratios.
#include "debug/checks/optim/optim_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/hooks.h"
#include "debug/checks/model/model_checks.h"
#include "debug/checks/run_check.h"
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

Finding at(Finding f, const std::map<std::string, std::string>& labels, const std::string& name, const Tensor& p) {
  f.module = owner_label(labels, name);
  f.parameter = name;
  f.shape = shape_of(p);
  return f;
}

const char* kCauseVanishing =
    "likely causes of vanishing gradients: sigmoid/tanh saturation; too many layers "
    "without skip connections; poor weight initialisation; very small learning rate";
const char* kFixVanishing =
    "use ReLU/GELU activations, skip connections, He/Xavier initialisation, batch/layer "
    "normalisation, or fewer layers";
const char* kCauseExploding =
    "likely causes of exploding gradients: learning rate too high; poor initialisation "
    "(weights too large); deep nets without normalisation or clipping; numerical "
    "instability in the loss";
const char* kFixExploding =
    "clip gradients (clip_grad_norm 1.0), lower the learning rate, use a proper "
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
      Finding f =
          at(make("O1", Severity::Error, "the gradient of " + name + " holds NaN/Inf values"), labels_of(), name, p);
      f.kind = Kind::GradientNonFinite;
      f.nonfinite = true;
      f.evidence = {{"NaN values", static_cast<double>(s.nan), "any is an error"},
                    {"Inf values", static_cast<double>(s.inf), "any is an error"},
                    {"values", static_cast<double>(s.numel), ""}};
      f.cause = std::string("a non-finite loss or an overflow in the backward: ") + kCauseExploding +
                "; log or division of 0 in the loss";
      f.fix =
          "turn on anomaly mode (W4) to name the op whose backward made it; clip gradients and lower the "
          "learning rate";
      out.push_back(f);
      continue;
    }
    judged.push_back({name, s.norm, p.dim() >= 2});
    const bool by_construction = std::find(opts.zero_grad_by_construction.begin(), opts.zero_grad_by_construction.end(),
                                           name) != opts.zero_grad_by_construction.end();
    if (s.norm < opts.vanishing_grad_norm && by_construction) continue;  // a redundant bias: said once, as info
    if (s.norm < opts.vanishing_grad_norm) {
      Finding f = at(make("O1", Severity::Warning, "the gradient of " + name + " is vanishing"), labels_of(), name, p);
      f.kind = Kind::GradientVanishing;
      f.evidence = {{"gradient norm", s.norm, "< " + fmt_num(opts.vanishing_grad_norm) + " is vanishing"}};
      f.cause = kCauseVanishing;
      if (s.norm == 0.0)
        f.cause =
            "an exact zero: the parameter is in the graph but nothing flows back (dead ReLUs after it, M7; a "
            "multiplication by 0; a saturated activation); " +
            f.cause;
      if (p.dim() == 1 && name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0 && has_batchnorm())
        f.cause +=
            ". The model has a BatchNorm: a bias right before one always gets ~0 (the normalisation "
            "subtracts the batch mean, so the bias has no effect); then build that layer without bias, "
            "nothing is wrong with training";
      f.fix = kFixVanishing;
      out.push_back(f);
    } else if (s.norm > opts.exploding_grad_norm) {
      Finding f = at(make("O1", Severity::Warning, "the gradient of " + name + " is exploding"), labels_of(), name, p);
      f.kind = Kind::GradientExploding;
      f.evidence = {{"gradient norm", s.norm, "> " + fmt_num(opts.exploding_grad_norm) + " is exploding"}};
      f.cause = kCauseExploding;
      f.fix = kFixExploding;
      out.push_back(f);
    }
  }

  // No gradient at all: one finding, not one per parameter.
  if (!missing.empty() && static_cast<int64_t>(missing.size()) == trainable) {
    Finding f = make("O1", Severity::Warning, "no trainable parameter has a gradient");
    f.kind = Kind::NoGradientAtStep;
    f.evidence = {{"parameters without a gradient", static_cast<double>(trainable), "any warns"}};
    f.cause =
        "backward() has not run since the gradients were cleared (zero_grad sets them to none), or the loss "
        "was computed under no_grad / from detached outputs";
    f.fix =
        "call check_gradient_health after loss.backward() and before optimizer.zero_grad(); check that the "
        "loss requires grad";
    out.push_back(f);
  } else {
    for (const auto& [name, p] : missing) {
      Finding f = at(make("O1", Severity::Warning, "the trainable parameter " + name + " got no gradient"), labels_of(),
                     name, p);
      f.kind = Kind::GradientMissing;
      f.evidence = {{"gradient defined (1 = yes)", 0.0, "0 after a backward warns"}};
      f.cause =
          "no gradient reaches it: a detach() (or .data) between it and the loss, a layer the "
          "forward never uses, or it should have been frozen (requires_grad false)";
      f.fix =
          "find where the graph is cut (M5 gradient flow names the first module without gradient); freeze "
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
    const bool vanish = ratio<opts.depth_ratio_vanishing, explode = ratio> opts.depth_ratio_exploding;
    if (vanish || explode) {
      Finding f = make("O1", Severity::Warning,
                       std::string("gradients ") + (vanish ? "vanish" : "explode") + " towards the input: ||grad " +
                           first.name + "|| / ||grad " + last.name + "|| is " + (vanish ? "tiny" : "large"));
      f.kind = vanish ? Kind::VanishTowardsInput : Kind::ExplodeTowardsInput;
      f.module = owner_label(labels_of(), first.name) + " .. " + owner_label(labels_of(), last.name);
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
                  {"smallest gradient norm (" + lo->name + ")", lo->norm, ">= " + fmt_num(opts.vanishing_grad_norm)},
                  {"largest gradient norm (" + hi->name + ")", hi->norm, "<= " + fmt_num(opts.exploding_grad_norm)}};
    if (std::isfinite(ratio))
      f.evidence.push_back(
          {"first / last weight gradient norm", ratio,
           "inside [" + fmt_num(opts.depth_ratio_vanishing) + ", " + fmt_num(opts.depth_ratio_exploding) + "]"});
    f.fix = "none needed";
    out.push_back(f);
  }
  return out;
}

// ---- O2 / O3 norm history ---------------------------------------------------------------

NormHistory::Param& NormHistory::param(const std::string& name, const Tensor& p) {
  for (Param& q : params_)
    if (q.name == name) return q;
  // Its dimensions of size 2 or more: a per-channel bias or scale stored as (1, C, 1, 1), as hand-written
  // normalisation layers keep them, is a vector like a 1-D bias.
  const Shape& sh = p.shape();
  const int64_t dims = std::count_if(sh.begin(), sh.end(), [](int64_t n) { return n > 1; });
  params_.push_back({name, shape_of(p), dims, p.numel(), {}, {}});
  return params_.back();
}

void NormHistory::record(int64_t step, const nn::Module& model,
                         const std::function<double(const Tensor&)>& weight_norm) {
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

namespace {
// One parameter's gradient-norm record, scanned for O2's spikes.
struct SpikeScan {
  int64_t lone = 0, nonfinite_step = -1, lone_step = -1;
  double lone_worst = 0.0;
  struct Jump {
    int64_t step;
    double ratio, level, ref;
  };
  std::vector<Jump> sustained;  // every record from which the norm stayed up, in order
};

SpikeScan scan_spikes(const std::vector<std::pair<int64_t, double>>& g, const OptimCheckOptions& o) {
  SpikeScan r;
  const int64_t W = std::max<int64_t>(o.spike_window, 1), P = std::max<int64_t>(o.spike_persist, 1);
  const int64_t n = static_cast<int64_t>(g.size());
  // The gradient scale at the start of training: a spike that stays far below
  // it (a converged model's tiny gradients rising on a few hard examples) is
  // not instability.
  double start_level = kNaN;
  for (int64_t j = 0; j < std::min<int64_t>(n, 5); ++j)
    if (std::isfinite(g[j].second) && !(g[j].second <= start_level)) start_level = g[j].second;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(g[i].second)) {
      if (r.nonfinite_step < 0) r.nonfinite_step = g[i].first;
      continue;
    }
    if (i < W) continue;
    std::vector<double> prev;
    for (int64_t j = i - W; j < i; ++j)
      if (std::isfinite(g[j].second)) prev.push_back(g[j].second);
    const double ref = median(prev);
    if (!(ref > 0) || g[i].second <= o.spike_factor * ref) continue;
    if (std::isfinite(start_level) && g[i].second < o.spike_min_start_fraction * start_level) continue;
    const double ratio = g[i].second / ref;
    double after = kNaN;
    if (i + P <= n) {
      std::vector<double> next;
      for (int64_t j = i; j < i + P; ++j) next.push_back(g[j].second);
      after = median(next);  // a NaN inside counts as high: std::nth_element with NaN is unordered, so guard
      for (double v : next)
        if (std::isnan(v)) after = std::numeric_limits<double>::infinity();
    }
    const double window_max = *std::max_element(prev.begin(), prev.end());
    const bool near_start = !std::isfinite(start_level) || after >= o.spike_min_start_fraction * start_level;
    if (after > o.spike_factor * ref && after > o.spike_window_max * window_max && near_start) {
      r.sustained.push_back({g[i].first, after / ref, after, ref});
    } else {
      ++r.lone;
      if (ratio > r.lone_worst) {
        r.lone_worst = ratio;
        r.lone_step = g[i].first;
      }
    }
  }
  return r;
}
}  // namespace

std::vector<Finding> NormHistory::findings() const {
  std::vector<Finding> out;
  const int64_t W = std::max<int64_t>(o_.spike_window, 1), P = std::max<int64_t>(o_.spike_persist, 1);
  // O2 first pass: every parameter's spikes, so that a jump can be set beside the others'.
  std::vector<SpikeScan> scans;
  int64_t judged = 0;  // parameters with enough records to judge a sustained jump
  for (const Param& q : params_) {
    scans.push_back(scan_spikes(q.grad, o_));
    judged += static_cast<int64_t>(q.grad.size()) >= W + P;
  }
  const int64_t needed = std::max<int64_t>(1, (judged + 1) / 2);
  // The parameters whose norm also stayed up within spike_persist records of `step`.
  auto jumping_with = [&](int64_t step) {
    int64_t k = 0;
    for (size_t j = 0; j < params_.size(); ++j) {
      const auto& g = params_[j].grad;
      if (g.size() < 2) continue;
      const double spacing =
          static_cast<double>(g.back().first - g.front().first) / static_cast<double>(g.size() - 1);
      for (const auto& e : scans[j].sustained)
        if (std::fabs(static_cast<double>(e.step - step)) <= static_cast<double>(P) * spacing) {
          ++k;
          break;
        }
    }
    return k;
  };
  for (size_t qi = 0; qi < params_.size(); ++qi) {
    const Param& q = params_[qi];
    const SpikeScan& sc = scans[qi];
    // ---- O2: spikes in the gradient norm ----
    const int64_t n = static_cast<int64_t>(q.grad.size());
    const int64_t lone = sc.lone, nonfinite_step = sc.nonfinite_step, lone_step = sc.lone_step;
    const double lone_worst = sc.lone_worst;
    // A sustained jump warns when at least half the parameters jumped with it (an update that
    // threw the network off moves every layer's gradient); alone, it is one layer meeting new inputs.
    int64_t sustained = 0, sus_step = -1, with = 0, alone = 0, alone_with = 0;
    double sus_ratio = 0.0, sus_level = 0.0, sus_ref = 0.0;
    for (const auto& e : sc.sustained) {
      const int64_t k = jumping_with(e.step);
      if (k < needed) {
        if (alone++ == 0) alone_with = k;
        continue;
      }
      if (sustained == 0) {
        sus_step = e.step;
        sus_ratio = e.ratio;
        sus_level = e.level;
        sus_ref = e.ref;
        with = k;
      }
      ++sustained;
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
      f.fix =
          "look at the steps before it in grad_series(): a growing norm means an lr too high (O6); anomaly "
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
                     sus_ratio, "> " + fmt_num(o_.spike_factor) + " (and > " + fmt_num(o_.spike_window_max) +
                         "x the largest before) is a sustained spike"},
                    {"gradient norm before (median)", sus_ref, ""},
                    {"gradient norm after (median)", sus_level, ""},
                    {"parameters whose norm stayed up with it", static_cast<double>(with),
                     ">= " + num(needed) + " of " + num(judged) + " warns"},
                    {"records in sustained spikes", static_cast<double>(sustained), ""},
                    {"lone spikes", static_cast<double>(lone), ""}};
      f.cause = std::string("gradient-norm spikes announce unstable training before it diverges; ") + kCauseExploding;
      f.fix = std::string(kFixExploding) + "; weight decay also bounds the weights";
      out.push_back(f);
    } else if (alone > 0) {
      const SpikeScan::Jump& e = sc.sustained.front();
      Finding f = make("O2", Severity::Info,
                       "the gradient norm of " + q.name + " jumped " + fmt_num(e.ratio) + "x at step " + num(e.step) +
                           " and stayed up, alone: the other parameters' norms did not move with it");
      f.parameter = q.name;
      f.shape = q.shape;
      f.step = e.step;
      f.evidence = {{"median of the " + num(P) + " records from the spike / median of the " + num(W) + " before",
                     e.ratio, ""},
                    {"parameters whose norm stayed up with it", static_cast<double>(alone_with),
                     ">= " + num(needed) + " of " + num(judged) + " warns"},
                    {"such jumps", static_cast<double>(alone), ""}};
      f.cause =
          "one layer's gradient on a run of unusual batches (small batches make them common); an update that "
          "throws the network off moves every layer's gradient at once";
      f.fix = "none needed while the other layers stay calm; clip gradients if the jumps grow more frequent";
      out.push_back(f);
    } else if (lone > 0) {
      Finding f = make("O2", Severity::Info,
                       num(lone) + " lone gradient spike" + (lone == 1 ? "" : "s") + " in " + q.name + " (worst " +
                           fmt_num(lone_worst) + "x at step " + num(lone_step) + "), each back to normal at once");
      f.parameter = q.name;
      f.shape = q.shape;
      f.step = lone_step;
      f.evidence = {{"lone spikes", static_cast<double>(lone), ""},
                    {"worst spike / median of the " + num(W) + " records before", lone_worst,
                     "> " + fmt_num(o_.spike_factor) + " is a spike; it warns only when it lasts"}};
      f.cause =
          "single batches with an unusual gradient. Typical right before a BatchNorm: a channel that barely "
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
      Finding f =
          make("O3", Severity::Warning,
               "the weight norm of " + q.name + " grew " + fmt_num(growth) + "x (" + fmt_num(w[i0].second) + " -> " +
                   fmt_num(w.back().second) + ") between steps " + num(w[i0].first) + " and " + num(w.back().first));
      f.parameter = q.name;
      f.shape = q.shape;
      f.step = w.back().first;
      f.evidence = {
          {"last / first weight norm", growth, "> " + fmt_num(o_.weight_growth_factor) + " warns"},
          {"fraction of records where it grew", inc, ">= " + fmt_num(o_.weight_growth_min_increasing) + " is steady"},
          {"first weight norm", w[i0].second, ""},
          {"last weight norm", w.back().second, ""},
          {"records", static_cast<double>(w.size() - i0), ""}};
      f.cause =
          "a weight norm that keeps increasing is an early sign of divergent training: steps too "
          "large for the weights (learning rate too high). Before a normalisation layer the scale "
          "of a weight is free, so oversized steps inflate it instead of blowing up the loss";
      f.fix =
          "lower the learning rate; add or increase weight decay (it constrains the weights' "
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

// ---- O3: weight decay too strong (the end-of-run probe) -----------------------------------------
double decay_ratio(const DecayGroup& g) {
  if (!std::isfinite(g.decay_norm) || !std::isfinite(g.step_norm) || g.step_norm <= 0) return kNaN;
  return g.decay_norm / g.step_norm;
}

bool decay_worth_probing(const DecayMeasure& m, const OptimCheckOptions& o) {
  return std::any_of(m.groups.begin(), m.groups.end(), [&](const DecayGroup& g) {
    const double r = decay_ratio(g);
    return g.weight_decay > 0 && std::isfinite(r) && r >= o.decay_ratio_min;
  });
}

bool decay_collapsed(const DecayMeasure& m, const OptimCheckOptions& o) {
  const bool shrank = std::any_of(m.groups.begin(), m.groups.end(), [&](const DecayGroup& g) {
    return g.weight_decay > 0 && std::isfinite(g.weight_norm) && std::isfinite(g.initial_weight_norm) &&
           g.initial_weight_norm > 0 && g.weight_norm <= o.decay_collapse * g.initial_weight_norm;
  });
  return shrank && std::isfinite(m.run_first_loss) && std::isfinite(m.run_window_loss) &&
         m.run_window_loss > o.decay_stalled * m.run_first_loss;
}

std::vector<Finding> check_weight_decay(const DecayMeasure& m, const OptimCheckOptions& o) {
  const DecayGroup* top = nullptr;  // the group whose decay pulls hardest against its gradient
  for (const DecayGroup& g : m.groups)
    if (g.weight_decay > 0 && (!top || decay_ratio(g) > decay_ratio(*top) ||
                               (!std::isfinite(decay_ratio(*top)) && std::isfinite(decay_ratio(g)))))
      top = &g;
  if (!top) return {};
  const double ratio = decay_ratio(*top);
  // Training on from the end: without the decay, validation does better.
  const bool acc = std::isfinite(m.kept_val_accuracy) && std::isfinite(m.free_val_accuracy) && m.val_examples > 0;
  double z = 0;
  if (acc) {
    const double n = static_cast<double>(m.val_examples), p = 0.5 * (m.kept_val_accuracy + m.free_val_accuracy);
    z = (m.free_val_accuracy - m.kept_val_accuracy) / std::sqrt(std::max(p * (1 - p), 1e-12) * 2 / n);
  }
  const bool probed = std::isfinite(m.kept_val_loss) && std::isfinite(m.free_val_loss);
  const bool on_better =
      probed && decay_worth_probing(m, o) &&
      (acc ? m.free_val_accuracy - m.kept_val_accuracy > o.decay_probe_accuracy_gain && z >= o.decay_probe_min_z
           : m.free_val_loss < (1 - o.decay_probe_gain) * m.kept_val_loss &&
                 m.kept_val_loss - m.free_val_loss > o.decay_probe_min_gain);
  // The run again without the decay: it learns where the run stalled.
  const bool restarted = std::isfinite(m.restart_window_loss);
  const bool restart_learns = restarted && decay_collapsed(m, o) &&
                              m.restart_window_loss < o.decay_restart_better * m.run_window_loss &&
                              m.run_window_loss - m.restart_window_loss > o.decay_restart_min_gain;
  const bool strong = on_better || restart_learns;
  const std::string group = m.groups.size() == 1 ? std::string() : " (parameter group " + top->name + ")";
  const std::string what = "the " + std::string(top->decoupled ? "decoupled" : "coupled") + " weight decay " +
                           fmt_num(top->weight_decay) + group;
  const std::string pull = std::isfinite(ratio)
                               ? " pulls the weights " + fmt_num(ratio) + "x as hard as the loss gradient"
                               : " pulls the weights";
  std::string title;
  if (restart_learns)
    title = what + " shrank the weights to " + fmt_num(top->weight_norm / top->initial_weight_norm) +
            "x their initial norm while the loss stalled; without it the same run reaches a loss of " +
            fmt_num(m.restart_window_loss) + " (against " + fmt_num(m.run_window_loss) +
            "): the weight decay is too strong";
  else if (on_better)
    title = what + pull + ", and " + num(m.probe_steps) + " steps on without it " +
            (acc ? "raise the validation accuracy from " + fmt_num(m.kept_val_accuracy) + " to " +
                       fmt_num(m.free_val_accuracy)
                 : "lower the validation loss from " + fmt_num(m.kept_val_loss) + " to " + fmt_num(m.free_val_loss)) +
            ": the weight decay is too strong";
  else
    title = what + pull;
  Finding f = make("O3", strong ? Severity::Warning : Severity::Info, title);
  if (strong) f.kind = Kind::WeightDecayTooStrong;
  f.end_of_run = true;
  for (const DecayGroup& g : m.groups) {
    if (g.weight_decay <= 0) continue;
    const std::string at = m.groups.size() == 1 ? std::string() : " (" + g.name + ")";
    f.evidence.push_back({"weight decay" + at, g.weight_decay, ""});
    f.evidence.push_back(
        {(g.decoupled ? "lambda ||w|| / ||m / (sqrt(v) + eps)||" : "lambda ||w|| / ||loss gradient||") + at,
         decay_ratio(g), ">= " + fmt_num(o.decay_ratio_min) + " is probed"});
    f.evidence.push_back({"weight norm at the end / at the start" + at, g.weight_norm / g.initial_weight_norm,
                          "<= " + fmt_num(o.decay_collapse) + " with a stalled loss is probed"});
  }
  if (probed) {
    f.evidence.push_back({"probe steps (on from the end)", static_cast<double>(m.probe_steps), ""});
    if (acc) {
      f.evidence.push_back({"validation accuracy after them, with the decay", m.kept_val_accuracy, ""});
      f.evidence.push_back({"validation accuracy after them, without it", m.free_val_accuracy,
                            "> with it + " + fmt_num(o.decay_probe_accuracy_gain) + " and"});
      f.evidence.push_back({"z (two proportions)", z, ">= " + fmt_num(o.decay_probe_min_z) + " warns"});
    }
    f.evidence.push_back({"validation loss after them, with the decay", m.kept_val_loss, ""});
    f.evidence.push_back({"validation loss after them, without it", m.free_val_loss,
                          acc ? "" : "< " + fmt_num(1 - o.decay_probe_gain) + " x with it warns"});
  }
  if (std::isfinite(m.run_first_loss) && std::isfinite(m.run_window_loss)) {
    f.evidence.push_back({"run's loss over its first steps", m.run_first_loss, ""});
    f.evidence.push_back({"run's loss over its last steps", m.run_window_loss,
                          "> " + fmt_num(o.decay_stalled) + " x its first loss is stalled"});
  }
  if (restarted) {
    f.evidence.push_back({"steps of the run again without the decay", static_cast<double>(m.restart_steps), ""});
    f.evidence.push_back({"its loss over its last steps", m.restart_window_loss,
                          "< " + fmt_num(o.decay_restart_better) + " x the run's warns"});
  }
  if (strong) {
    f.cause =
        "a weight decay too strong for this optimizer and run: where the decay's pull matches the loss gradient's, "
        "the weights settle small and the model underfits, or they shrink until the layers' outputs are constant. "
        "Coupled decay (weight_decay in SGD, Adam, RMSprop) is added to the gradient; under Adam it is divided by "
        "the gradient's running RMS, so a value meant for AdamW's decoupled decay is far stronger there";
    f.fix =
        "lower the weight decay 10x or more (SGD: 1e-4 to 5e-4 is usual); with Adam use AdamW's decoupled decay "
        "(0.01-0.1)";
  }
  return {f};
}

// ---- O1, O2/O3, O4 and O5's wording during training (the monitor's run checks) -----------------
namespace {
// O2/O3: each sampled step's gradient and weight norms (the weights' as O6 measured them).
class NormHistoryRunCheck final : public RunCheck {
 public:
  explicit NormHistoryRunCheck(const OptimCheckOptions& o) : norms_(o) {}
  std::string ids() const override { return "O2, O3"; }
  uint32_t events() const override { return RunEvent::BeforeStep | RunEvent::Finish | RunEvent::Series; }
  void before_step(RunContext& c, bool sampled) override {
    if (sampled) norms_.record(c.steps + 1, c.model, c.measured_norm);
  }
  void finish(RunContext& c) override {
    c.add_all(norms_.findings());
    c.note_ran("O2, O3");
  }
  void series(TrainingHistory& h) const override { h.grad_norms = norms_.grad_series(); }

 private:
  NormHistory norms_;
};

// O1 on the sampled steps (M5's gradient flow runs in the gate). Once, the first time a 1-D
// parameter's gradient vanishes: is it a redundant bias (zero by construction, BatchNorm after
// it)? Then it is said once as info, O1 stays silent about it, and M25 skips it
// (RunContext::zero_grad_by_construction). A parameter without a gradient is judged at the end
// of the run: without one on every sampled step it is cut off (a warning); without one on some
// steps only, a branch that some steps skip (stochastic depth, a head used on some batches): info.
class GradientHealthRunCheck final : public RunCheck {
 public:
  explicit GradientHealthRunCheck(const OptimCheckOptions& o) : o_(o) {}
  std::string ids() const override { return "O1"; }
  uint32_t events() const override { return RunEvent::BeforeStep | RunEvent::Finish | RunEvent::Series; }
  void series(TrainingHistory& h) const override {
    h.gradient_judged_steps = judged_steps_;
    h.gradient_missing.clear();
    for (const auto& [name, held] : missing_) h.gradient_missing.emplace_back(name, held.second);
  }
  void finish(RunContext& c) override {
    for (const auto& [name, held] : missing_) {
      Finding f = held.first;
      f.evidence = {{"sampled steps without a gradient", static_cast<double>(held.second), "every one of them warns"},
                    {"sampled steps judged", static_cast<double>(judged_steps_), ""}};
      if (held.second < judged_steps_) {
        f.severity = Severity::Info;
        f.title = "the trainable parameter " + name + " got no gradient on " + std::to_string(held.second) + " of " +
                  std::to_string(judged_steps_) + " sampled steps";
        f.cause =
            "its layer is skipped on some steps only: conditional computation (stochastic depth, a branch or head "
            "some batches do not use); on the other steps it learns";
        f.fix = "nothing, if the forward skips it on purpose";
      }
      c.add(std::move(f));
    }
  }
  void before_step(RunContext& c, bool sampled) override {
    if (!sampled || c.flat_step) return;  // nothing to learn from this batch (RunContext::flat_step)
    o_.zero_grad_by_construction = c.zero_grad_by_construction;
    std::vector<Finding> health = check_gradient_health(c.model, o_);
    if (std::none_of(health.begin(), health.end(), [](const Finding& f) { return f.is("O1", Kind::NoGradientAtStep); }))
      ++judged_steps_;
    for (size_t i = 0; i < health.size();) {
      if (!health[i].is("O1", Kind::GradientMissing)) {
        ++i;
        continue;
      }
      auto [it, fresh] = missing_.try_emplace(health[i].parameter, health[i], 0);
      ++it->second.second;
      health.erase(health.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (!redundant_checked_ && c.loss && c.x.defined() && c.y.defined() &&
        std::any_of(health.begin(), health.end(), [&](const Finding& f) {
          return f.is("O1", Kind::GradientVanishing) && f.severity == Severity::Warning && !f.parameter.empty();
        })) {
      redundant_checked_ = true;
      const LossFunction lf = [&loss = *c.loss](const Tensor& out, const Tensor& t) { return loss(out, t); };
      std::vector<Finding> red;
      c.pause(true);  // the probe's forwards are not training statistics
      try {
        red = find_redundant_biases(c.model, c.x, c.y, lf, o_.vanishing_grad_norm);
      } catch (const std::exception&) {
        red.clear();  // the probe could not run: the warnings stay as they are
      }
      c.pause(false);
      for (Finding& f : red) {
        c.zero_grad_by_construction.push_back(f.parameter);
        c.add(std::move(f));
      }
      o_.zero_grad_by_construction = c.zero_grad_by_construction;
      if (!red.empty()) health = check_gradient_health(c.model, o_);
    }
    // Zero gradients behind a parameter initialised to zero on purpose (a zero head): the first step's only.
    if (c.loss && c.x.defined() && c.y.defined() && std::any_of(health.begin(), health.end(), [](const Finding& f) {
          return f.is("O1", Kind::GradientVanishing) && f.severity == Severity::Warning && !f.parameter.empty();
        })) {
      c.pause(true);
      const ZeroInitProbe zero_init = probe_zero_initialised(c.model, c.x, c.y, *c.loss, o_.vanishing_grad_norm);
      c.pause(false);
      soften_zero_init_findings(health, zero_init);
      for (const Finding& f : zero_init.redundant) c.zero_grad_by_construction.push_back(f.parameter), c.add(f);
      if (!zero_init.held_back.empty()) c.add(zero_init.finding());
    }
    // A model that fits its batches: the loss itself at converged_loss_share of the run's first or
    // below, and gradients small with it (cross-entropy's gradient scales with its loss).
    // The steps before it too (up to 20): a loss that touches 0 on some batches between large ones
    // saturates, it has not converged.
    const std::vector<double>* sl = c.history ? &c.history->step_losses : nullptr;
    const double first = sl && !sl->empty() ? sl->front() : kNaN;
    double recent = c.loss_value;
    if (sl && !sl->empty())
      recent =
          std::max(recent, *std::max_element(sl->end() - std::min<std::ptrdiff_t>(20, std::ssize(*sl)), sl->end()));
    const bool converged = c.loss_seen && std::isfinite(first) && first > 0 && c.loss_value >= 0 &&
                           recent <= o_.converged_loss_share * first;
    c.note_ran("O1");
    for (Finding& f : health) {
      if (converged && f.severity == Severity::Warning && f.kind == Kind::GradientVanishing) {
        f.severity = Severity::Info;
        f.title += " (the loss is " + fmt_num(c.loss_value) + ", " + fmt_num(c.loss_value / first) +
                   " of its first: the model fits its batches, and the gradient falls with the loss)";
        f.evidence.push_back({"the step's loss / the run's first", c.loss_value / first,
                              "<= " + fmt_num(o_.converged_loss_share) + ": converged (info)"});
        f.fix = "none needed: stop earlier if the run goes on without gain";
      }
      if (f.severity == Severity::Error && f.kind == Kind::GradientNonFinite) c.flag_nonfinite();
      c.add(std::move(f));
    }
  }

 private:
  OptimCheckOptions o_;
  bool redundant_checked_ = false;
  int64_t judged_steps_ = 0;                                    // sampled steps on which some parameter had a gradient
  std::map<std::string, std::pair<Finding, int64_t>> missing_;  // the first finding, the steps without
};

// O5 is raised by the optimizer itself (a core warning): its findings say what the loop did. A
// gradient transform (clipping) that ran with no gradient present is O5's other loop-order mistake.
class AccumulationRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "O5"; }
  uint32_t events() const override { return RunEvent::Warning; }
  void warning(RunContext&, const gradsleuth::Warning& w, Finding& f) override {
    if (w.check != "O5") return;
    const bool transform = w.where.rfind("clip_grad", 0) == 0;
    f.title = transform ? w.where +
                              " ran with no gradient present (before backward() or right after zero_grad()): "
                              "it changed nothing"
                        : "gradients accumulated across steps: zero_grad() was not called (" + w.where + ")";
    f.fix = transform ? "call it between loss.backward() and optimizer.step()"
                      : "call optimizer.zero_grad() before every backward()";
  }
};
}  // namespace

void revise_gradient_missing(Report& gate, const TrainingHistory& h) {
  soften_reached_in_training(gate, h, "O1", Kind::GradientMissing);
}

std::unique_ptr<RunCheck> make_norm_history_run_check(const MonitorOptions& o) {
  return std::make_unique<NormHistoryRunCheck>(o.optim);
}
std::unique_ptr<RunCheck> make_gradient_health_run_check(const MonitorOptions& o) {
  return std::make_unique<GradientHealthRunCheck>(o.optim);
}
std::unique_ptr<RunCheck> make_accumulation_run_check(const MonitorOptions&) {
  return std::make_unique<AccumulationRunCheck>();
}

}  // namespace gradsleuth::debug
