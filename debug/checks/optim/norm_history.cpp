// O2 gradient-norm history and O3 weight-norm history (see optim_checks.h): the norms of the sampled
// steps, their spikes and trends, and O3's end-of-run probe of a weight decay too strong.
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
#include "debug/checks/optim/gradient_text.h"
#include "debug/checks/optim/optim_checks.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"

namespace gradsleuth::debug {

namespace {

using detail::kNaN;
using detail::make;
using detail::median;
using detail::num;
using namespace optim_detail;

// The L2 norm; NaN when any value is NaN, Inf when any is Inf.
double norm_of(const Tensor& t) {
  const TensorSummary s = summarize_norm(t);
  if (s.nan > 0) return kNaN;
  if (s.inf > 0) return std::numeric_limits<double>::infinity();
  return s.norm;
}

}  // namespace

// ---- O2 / O3 norm history ---------------------------------------------------------------

NormHistory::Param& NormHistory::param(const std::string& name, const Tensor& p) {
  for (Param& q : params_)
    if (q.name == name) return q;
  // Its dimensions of size 2 or more: a per-channel bias or scale stored as (1, C, 1, 1), as hand-written
  // normalisation layers keep them, is a vector like a 1-D bias.
  const Shape& sh = p.shape();
  const int64_t dims = std::count_if(sh.begin(), sh.end(), [](int64_t n) { return n > 1; });
  params_.push_back({name, shape_of(p), dims, p.numel(), p.dim() >= 1 ? p.size(0) : 1, {}, {}});
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
      const double spacing = static_cast<double>(g.back().first - g.front().first) / static_cast<double>(g.size() - 1);
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
      f.evidence = {
          {"median of the " + num(P) + " records from the spike / median of the " + num(W) + " before", sus_ratio,
           "> " + fmt_num(o_.spike_factor) + " (and > " + fmt_num(o_.spike_window_max) +
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
      f.evidence = {
          {"median of the " + num(P) + " records from the spike / median of the " + num(W) + " before", e.ratio, ""},
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
    // A weight below the floor at its first record started at zero (initialised so on purpose: a residual
    // branch's last layer, Fixup's): it grows out of nothing, so its growth counts from the norm a default
    // initialisation gives such a weight (uniform within 1 / sqrt(fan_in): sqrt(fan_out / 3)), not from its
    // first small record.
    double base = w[i0].second;
    if (i0 > 0) base = std::max(base, std::sqrt(static_cast<double>(std::max<int64_t>(q.fan_out, 1)) / 3.0));
    const double growth = w.back().second / base;
    const double inc = static_cast<double>(up) / static_cast<double>(w.size() - i0 - 1);
    if (growth > o_.weight_growth_factor && inc >= o_.weight_growth_min_increasing) {
      Finding f =
          make("O3", Severity::Warning,
               "the weight norm of " + q.name + " grew " + fmt_num(growth) + "x (" + fmt_num(base) + " -> " +
                   fmt_num(w.back().second) + ") between steps " + num(w[i0].first) + " and " + num(w.back().first));
      f.parameter = q.name;
      f.shape = q.shape;
      f.step = w.back().first;
      f.evidence = {
          {"last / first weight norm", growth, "> " + fmt_num(o_.weight_growth_factor) + " warns"},
          {"fraction of records where it grew", inc, ">= " + fmt_num(o_.weight_growth_min_increasing) + " is steady"},
          {"first weight norm", w[i0].second,
           i0 > 0 ? "after a zero start: growth counts from a default initialisation's norm" : ""},
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

void revise_weight_growth(Report& found, bool loss_unstable, const std::vector<double>& epoch_val_loss,
                          const OptimCheckOptions& o, const std::vector<double>& epoch_val_accuracy) {
  const std::vector<double> val = detail::finite_only(epoch_val_loss);
  if (val.size() < 2) return;
  const double best = *std::min_element(val.begin(), val.end());
  // Or the validation accuracy ended at its best (within half a point) while the loss ended below its
  // start: a model growing more confident as it gets more right.
  const std::vector<double> acc = detail::finite_only(epoch_val_accuracy);
  const bool acc_at_best =
      acc.size() >= 2 && acc.back() >= *std::max_element(acc.begin(), acc.end()) - 0.005 && acc.back() > acc.front();
  if (!((val.back() <= o.growth_val_at_best * best || acc_at_best) && val.back() < val.front())) return;
  if (loss_unstable) return;
  for (size_t i = 0; i < found.size(); ++i) {
    const Finding& g = found.findings()[i];
    if (!g.fires() || !g.is("O3", Kind::None) || g.severity != Severity::Warning) continue;
    if (std::isnan(g.value_of("last / first weight norm"))) continue;
    Finding f = g;
    f.severity = Severity::Info;
    f.title +=
        ", while the loss fell without a spike and the validation " +
        (val.back() <= o.growth_val_at_best * best ? "loss ended at its best (" + fmt_num(val.back()) + ")"
                                                   : "accuracy ended at its best (" + fmt_num(acc.back()) + ")") +
        ": weights that grew to the solution's scale";
    f.evidence.push_back({"last validation loss / the run's best", val.back() / best,
                          "<= " + fmt_num(o.growth_val_at_best) + " with a stable loss: info"});
    if (!acc.empty())
      f.evidence.push_back({"last validation accuracy - the run's best",
                            acc.back() - *std::max_element(acc.begin(), acc.end()),
                            ">= -0.005 with a stable loss, the loss below its start: info"});
    f.cause =
        "a weight whose solution lies far from its initial scale (a readout over small features, a softmax head "
        "on a separable task under cross-entropy) grows for as long as it trains; steps too large leave the "
        "loss unstable, and this loss was not";
    f.fix = "none needed; weight decay bounds the weights if their size matters (calibration, export)";
    found.replace(i, f);
  }
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
  const std::string what =
      top->loop_penalty
          ? "the penalty the loop adds on the weights (lambda = " + fmt_num(top->weight_decay) + " on sum w^2 / 2)"
          : "the " + std::string(top->decoupled ? "decoupled" : "coupled") + " weight decay " +
                fmt_num(top->weight_decay) + group;
  const std::string verdict = top->loop_penalty ? ": the penalty is too strong" : ": the weight decay is too strong";
  const std::string pull = std::isfinite(ratio)
                               ? " pulls the weights " + fmt_num(ratio) + "x as hard as the loss gradient"
                               : " pulls the weights";
  std::string title;
  if (restart_learns)
    title = what + " shrank the weights to " + fmt_num(top->weight_norm / top->initial_weight_norm) +
            "x their initial norm while the loss stalled; without it the same run reaches a loss of " +
            fmt_num(m.restart_window_loss) + " (against " + fmt_num(m.run_window_loss) + ")" + verdict;
  else if (on_better)
    title = what + pull + ", and " + num(m.probe_steps) + " steps on without it " +
            (acc ? "raise the validation accuracy from " + fmt_num(m.kept_val_accuracy) + " to " +
                       fmt_num(m.free_val_accuracy)
                 : "lower the validation loss from " + fmt_num(m.kept_val_loss) + " to " + fmt_num(m.free_val_loss)) +
            verdict;
  else
    title = what + pull;
  Finding f = make("O3", strong ? Severity::Warning : Severity::Info, title);
  if (strong) f.kind = Kind::WeightDecayTooStrong;
  f.end_of_run = true;
  for (const DecayGroup& g : m.groups) {
    if (g.weight_decay <= 0) continue;
    const std::string at = m.groups.size() == 1 ? std::string() : " (" + g.name + ")";
    f.evidence.push_back({(g.loop_penalty ? "lambda of the loop's penalty" : "weight decay") + at, g.weight_decay, ""});
    f.evidence.push_back(
        {(g.decoupled ? "lambda ||w|| / ||m / (sqrt(v) + eps)||" : "lambda ||w|| / ||loss gradient||") + at,
         decay_ratio(g), ">= " + fmt_num(o.decay_ratio_min) + " is probed"});
    f.evidence.push_back({"weight norm at the end / at the start" + at, g.weight_norm / g.initial_weight_norm,
                          "<= " + fmt_num(o.decay_collapse) + " with a stalled loss is probed"});
  }
  const std::string thing = top->loop_penalty ? "penalty" : "decay";
  if (probed) {
    f.evidence.push_back({"probe steps (on from the end)", static_cast<double>(m.probe_steps), ""});
    if (acc) {
      f.evidence.push_back({"validation accuracy after them, with the " + thing, m.kept_val_accuracy, ""});
      f.evidence.push_back({"validation accuracy after them, without it", m.free_val_accuracy,
                            "> with it + " + fmt_num(o.decay_probe_accuracy_gain) + " and"});
      f.evidence.push_back({"z (two proportions)", z, ">= " + fmt_num(o.decay_probe_min_z) + " warns"});
    }
    f.evidence.push_back({"validation loss after them, with the " + thing, m.kept_val_loss, ""});
    f.evidence.push_back({"validation loss after them, without it", m.free_val_loss,
                          acc ? "" : "< " + fmt_num(1 - o.decay_probe_gain) + " x with it warns"});
  }
  if (std::isfinite(m.run_first_loss) && std::isfinite(m.run_window_loss)) {
    f.evidence.push_back({"run's loss over its first steps", m.run_first_loss, ""});
    f.evidence.push_back({"run's loss over its last steps", m.run_window_loss,
                          "> " + fmt_num(o.decay_stalled) + " x its first loss is stalled"});
  }
  if (restarted) {
    f.evidence.push_back({"steps of the run again without the " + thing, static_cast<double>(m.restart_steps), ""});
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
    if (top->loop_penalty) {
      f.cause =
          "a penalty on the weights added in the training loop (an L2 term, or a Gaussian prior's sum w^2 / "
          "2 sigma^2) with a coefficient far too large for the loss's scale: the weights settle where its pull "
          "matches the loss gradient's, too small for the model to fit. A prior counted once per minibatch where "
          "it belongs once to the whole training set (not divided by N) is N times too strong";
      f.fix =
          "divide a prior's penalty by the number of training examples (a minibatch mean estimates the data term "
          "per example), or lower the coefficient 10x or more; the optimizer's weight_decay does the same job";
    }
  }
  return {f};
}

// ---- O2/O3 during training (the monitor's run check) -------------------------------------------
void soften_jumps_with_falling_loss(std::vector<Finding>& found, const std::vector<double>& losses) {
  const auto window_median = [&losses](int64_t from, int64_t to) {
    std::vector<double> w;
    for (int64_t i = std::max<int64_t>(from, 0); i < std::min<int64_t>(to, static_cast<int64_t>(losses.size())); ++i)
      if (std::isfinite(losses[static_cast<size_t>(i)])) w.push_back(losses[static_cast<size_t>(i)]);
    return w.size() >= 5 ? median(w) : kNaN;
  };
  for (Finding& f : found) {
    if (!f.fires() || !f.is("O2", Kind::NormJump) || f.step < 1) continue;
    const int64_t at = f.step - 1;  // the jump's step, as an index into the step losses
    const double before = window_median(at - 100, at), after = window_median(at, at + 100);
    if (!(after < 0.8 * before)) continue;
    f.severity = Severity::Info;
    const std::string unstable = ": unstable training";
    if (f.title.size() > unstable.size() &&
        f.title.compare(f.title.size() - unstable.size(), unstable.size(), unstable) == 0)
      f.title.erase(f.title.size() - unstable.size());
    f.title += ", while the training loss fell from " + fmt_num(before) + " to " + fmt_num(after) +
               " (medians of the 100 steps before and after): a network leaving a flat start, not instability";
    f.evidence.push_back({"training loss after the jump / before (medians of 100 steps)", after / before,
                          "< 0.8: learning, not instability (info)"});
  }
}

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
    std::vector<Finding> found = norms_.findings();
    if (c.history) soften_jumps_with_falling_loss(found, c.history->step_losses);
    c.add_all(found);
    c.note_ran("O2, O3");
  }
  void series(TrainingHistory& h) const override { h.grad_norms = norms_.grad_series(); }

 private:
  NormHistory norms_;
};

}  // namespace

std::unique_ptr<RunCheck> make_norm_history_run_check(const MonitorOptions& o) {
  return std::make_unique<NormHistoryRunCheck>(o.optim);
}

// ---- O3 in the gate: a penalty on the weights inside the loss -----------------------------------
std::vector<Finding> check_loss_penalty(nn::Module& model, const Tensor& out, const Tensor& y,
                                        const std::function<Tensor(const Tensor&, const Tensor&)>& loss,
                                        const OptimCheckOptions& o) {
  if (!out.defined() || !loss) return {};
  // The gate's gradients (of the whole loss) for the weight matrices; every gradient is put back.
  const detail::GradSnapshot restore(model);
  std::vector<std::pair<std::string, Tensor>> weights;
  std::vector<Tensor> total;
  for (auto& [name, p] : model.named_parameters())
    if (p.requires_grad() && p.dim() >= 2 && p.grad().defined()) {
      weights.emplace_back(name, p);
      total.push_back(p.grad().detach().to(kFloat64));
    }
  if (weights.empty()) return {};
  for (Tensor& p : model.parameters()) p.set_grad(Tensor());
  Tensor l;
  try {
    l = loss(out.detach(), y);
  } catch (const std::exception&) {
    return {};
  }
  if (!l.defined() || !l.requires_grad() || l.numel() != 1) return {};  // the weights only through the output
  try {
    l.backward();
  } catch (const std::exception&) {
    // A term the model's forward stored (a mixture of experts' load-balancing loss), whose graph the
    // gate's own backward already freed: not judged.
    return {};
  }
  double lowest = std::numeric_limits<double>::infinity(), highest = 0;
  std::string lowest_name;
  int64_t judged = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const Tensor g = weights[i].second.grad();
    const Tensor pen = g.defined() ? g.detach().to(kFloat64) : zeros_like(total[i]);
    const double np = std::sqrt(sum(pen * pen).item<double>());
    const Tensor data = total[i] - pen;
    const double nd = std::sqrt(sum(data * data).item<double>());
    if (!std::isfinite(np) || !std::isfinite(nd)) return {};
    const double ratio = nd > 0 ? np / nd : (np > 0 ? std::numeric_limits<double>::infinity() : 0.0);
    ++judged;
    if (ratio < lowest) lowest = ratio, lowest_name = weights[i].first;
    highest = std::max(highest, ratio);
  }
  if (judged == 0 || highest == 0) return {};
  const bool dominates = lowest >= o.penalty_gradient_ratio;
  Finding f = make("O3", dominates ? Severity::Warning : Severity::Info,
                   dominates ? "the loss's penalty on the weights pulls every weight matrix harder than the data: its "
                               "gradient is " +
                                   fmt_num(lowest) + "-" + fmt_num(highest) + "x the rest of the loss's in all " +
                                   num(judged) + " of them, so it decides the steps: the penalty is too strong"
                             : "the loss reads the weights directly (a penalty on them): its gradient is " +
                                   fmt_num(lowest) + "-" + fmt_num(highest) + "x the rest of the loss's");
  if (dominates) f.kind = Kind::WeightDecayTooStrong;
  f.parameter = lowest_name;
  f.evidence = {{"weight matrices judged", static_cast<double>(judged), ""},
                {"smallest |penalty gradient| / |data gradient|", lowest,
                 ">= " + fmt_num(o.penalty_gradient_ratio) + " in every weight matrix warns"},
                {"largest |penalty gradient| / |data gradient|", highest, ""}};
  f.cause =
      "a penalty on the weights written into the loss (lambda x sum of squares) with a coefficient far too "
      "large for the loss's scale: every step pulls the weights toward 0 harder than the data moves them, "
      "so the model cannot fit (the coefficient too large by 10-100x, or summed where a mean was meant)";
  f.fix =
      "lower the coefficient until its gradient is a small share of the data's (1e-4 to 1e-3 for a sum of "
      "squares under a mean loss), or drop it and set the optimizer's weight_decay (AdamW's is decoupled)";
  if (!dominates) f.fix = "none needed; the penalty's share of the gradient is shown for reference";
  return {f};
}

// ---- O3 during training: a penalty on the weights the loop adds around the loss --------------------
// (gathered by loop_penalty.cpp on the first step)
std::vector<Finding> judge_loop_penalty(const LoopPenaltyMeasure& m, const OptimCheckOptions& o) {
  if (!(m.unexplained <= o.loop_penalty_unexplained) || !(m.scale > 0) || m.layers.empty()) return {};
  int64_t penalised = 0, negative = 0, strong = 0;
  double lowest = std::numeric_limits<double>::infinity(), highest = 0, lambda = 0;
  std::string lowest_name;
  for (const LoopPenaltyLayer& l : m.layers) {
    if (l.share < o.loop_penalty_present) continue;
    ++penalised;
    negative += l.lambda < 0 ? 1 : 0;
    strong += l.share >= o.penalty_gradient_ratio ? 1 : 0;
    if (l.share < lowest) lowest = l.share, lowest_name = l.name;
    highest = std::max(highest, l.share);
    lambda = l.lambda;
  }
  if (penalised == 0) return {};
  const int64_t judged = static_cast<int64_t>(m.layers.size());
  const bool wrong_sign = negative == penalised;
  const bool too_strong = !wrong_sign && strong == judged;
  const std::string coefficient = "lambda = " + fmt_num(wrong_sign ? -lambda : lambda) + " on sum w^2 / 2";
  Finding f = make("O3", wrong_sign || too_strong ? Severity::Warning : Severity::Info,
                   wrong_sign ? "the loop's loss subtracts a penalty on the weights (" + coefficient +
                                    " with a minus sign, in " + num(penalised) + " of " + num(judged) +
                                    " weight matrices): every step pushes the weights away from 0"
                   : too_strong ? "the loop adds a penalty on the weights whose gradient is " + fmt_num(lowest) + "-" +
                                      fmt_num(highest) + "x the loss's in all " + num(judged) + " weight matrices (" +
                                      coefficient + "), so it decides the steps: the penalty is too strong"
                                : "the loop adds a penalty on the weights to the loss: its gradient is " +
                                      fmt_num(lowest) + "-" + fmt_num(highest) + "x the loss's (" + coefficient + ")");
  if (wrong_sign) f.kind = Kind::PenaltyWrongSign;
  if (too_strong) f.kind = Kind::WeightDecayTooStrong;
  f.step = m.step;
  f.parameter = lowest_name;
  f.evidence = {
      {"weight matrices with the penalty", static_cast<double>(penalised), "of " + num(judged)},
      {"smallest |penalty gradient| / |loss gradient|", lowest,
       ">= " + fmt_num(o.penalty_gradient_ratio) + " in every weight matrix warns"},
      {"largest |penalty gradient| / |loss gradient|", highest, ""},
      {"matrices whose penalty has a minus sign", static_cast<double>(negative), "all of the penalised warns"},
      {"the step's gradient / the loss's (a)", m.scale, ""},
      {"share of the step's gradient the fit leaves unexplained", m.unexplained,
       "<= " + fmt_num(o.loop_penalty_unexplained) + " to judge"}};
  f.cause = wrong_sign
                ? "a penalty on the weights (an L2 term, a prior) subtracted from the loss where it should be added: "
                  "the loss then rewards larger weights, which grow until the data term cannot hold them"
                : "a penalty on the weights added in the training loop (an L2 term, or a Gaussian prior's sum w^2 / "
                  "2 sigma^2) with a coefficient far too large for the loss's scale: a prior counted once per "
                  "minibatch where it belongs once to the whole training set (not divided by N), or a sum of "
                  "squares where a mean was meant";
  f.fix = wrong_sign   ? "add the penalty (loss = data + lambda * sum w^2), or set the optimizer's weight_decay"
          : too_strong ? "divide the penalty by the number of training examples when it is a prior (a minibatch mean "
                         "estimates the data term per example), or lower its coefficient until its gradient is a small "
                         "share of the loss's; the optimizer's weight_decay does the same job"
                       : "none needed; the penalty's share of the gradient is shown for reference";
  return {f};
}

}  // namespace gradsleuth::debug
