// The loss checks L1-L7 (see loss_checks.h): the loss history, double softmax,
// BCE on logits, the initial loss, masked targets, the reduction, fitting.
#include "debug/checks/loss/loss_checks.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/model/behaviour.h"
#include "debug/checks/check_util.h"
#include "debug/evidence/tensor_stats.h"

namespace gradsleuth::debug {

namespace {

using detail::kNaN;
using detail::make;
using detail::median;
using detail::num;





double median_of(const std::vector<double>& v, size_t begin, size_t end) {
  return median(std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(begin),
                                    v.begin() + static_cast<std::ptrdiff_t>(end)));
}

std::vector<double> doubles(const Tensor& t) {
  NoGradGuard ng;
  return t.detach().contiguous().to_vector<double>();
}

// The loss-debugging cause table (docs/checks.md, L1), one line per symptom.
const char* kCauseNaN = "likely causes of a NaN loss: exploding gradients; log of zero or of a negative number; "
                        "division by zero; learning rate too high";
const char* kCauseInf = "likely causes of an Inf loss: numerical overflow; extreme predictions (a probability of "
                        "exactly 0 inside a log, exp of a large logit)";
const char* kCauseStuck = "likely causes of a loss stuck high: wrong loss function; learning rate too low; model too "
                          "simple; data issue (labels shuffled apart from their inputs, unscaled inputs)";
const char* kCauseOscillating = "likely causes of a loss oscillating wildly: learning rate too high; batch size too "
                                "small; data shuffling issue (batches sorted by class)";
const char* kCauseTrainValGap = "likely causes of train loss down, val loss up: overfitting; data leakage in "
                                "train; train/val distribution mismatch";

}  // namespace

// ---- L1 loss history ------------------------------------------------------------------

LossHistoryStats analyse_loss_history(const std::vector<double>& l, const LossCheckOptions& opts) {
  LossHistoryStats s;
  s.steps = static_cast<int64_t>(l.size());
  for (size_t i = 0; i < l.size(); ++i) {
    if (std::isnan(l[i]) && s.first_nan_step < 0) s.first_nan_step = static_cast<int64_t>(i) + 1;
    if (std::isinf(l[i]) && s.first_inf_step < 0) s.first_inf_step = static_cast<int64_t>(i) + 1;
  }
  size_t m = l.size();
  for (size_t i = 0; i < l.size(); ++i)
    if (!std::isfinite(l[i])) { m = i; break; }
  s.finite_steps = static_cast<int64_t>(m);
  if (m == 0) return s;
  s.first_loss = l[0];

  // Smoothing windows: medians of consecutive blocks of w steps.
  const int64_t w = std::clamp<int64_t>(static_cast<int64_t>(m) / 10, std::max<int64_t>(opts.window_min, 2),
                                        std::max(opts.window_max, opts.window_min));
  s.window = w;
  for (size_t i = 0; i + static_cast<size_t>(w) <= m; i += static_cast<size_t>(w))
    s.window_medians.push_back(median_of(l, i, i + static_cast<size_t>(w)));
  const auto& med = s.window_medians;
  s.trend_judged = med.size() >= 2 && static_cast<int64_t>(m) >= opts.min_trend_steps;
  if (s.trend_judged) {
    const double best_later = *std::min_element(med.begin() + 1, med.end());
    s.relative_decrease = med[0] > 0 ? (med[0] - best_later) / med[0] : 0.0;
    s.last_level = med.back();
    double best = med[0];
    const double floor = opts.min_level * std::fabs(l[0]);
    for (size_t k = 1; k < med.size(); ++k) {
      if (best > 0 && med[k] >= floor && med[k] / best > s.max_rise) {
        s.max_rise = med[k] / best;
        s.rise_step = static_cast<int64_t>(k + 1) * w;
      }
      best = std::min(best, med[k]);
    }
    s.stuck = s.relative_decrease < opts.min_relative_decrease;
    s.at_chance = std::isfinite(opts.chance_loss) && s.last_level >= (1.0 - opts.chance_margin) * opts.chance_loss;
    s.diverging = s.max_rise > opts.diverge_factor;
  }

  // Spikes: above spike_factor x the median of the previous w steps, and above the first loss.
  for (size_t t = 1; t < m; ++t) {
    const size_t from = t > static_cast<size_t>(w) ? t - static_cast<size_t>(w) : 0;
    const double ref = median_of(l, from, t);
    if (!(ref > 0) || l[t] <= opts.spike_factor * ref || l[t] <= l[0]) continue;
    ++s.spikes;
    if (l[t] / ref > s.worst_spike_ratio) {
      s.worst_spike_ratio = l[t] / ref;
      s.worst_spike_loss = l[t];
      s.worst_spike_step = static_cast<int64_t>(t) + 1;
    }
  }
  s.spiking = s.spikes > 0;

  // Swings: median |step-to-step change| relative to the level, per window (the
  // whole finite history when it is shorter than one window).
  auto swing = [&](size_t a, size_t b) {
    if (b - a < 3) return;
    const double level = median_of(l, a, b);
    if (!(level > 0) || level < opts.min_level * std::fabs(l[0])) return;
    std::vector<double> d;
    for (size_t i = a + 1; i < b; ++i) d.push_back(std::fabs(l[i] - l[i - 1]));
    const double r = median(d) / level;
    if (r > s.max_swing) {
      s.max_swing = r;
      s.swing_step = static_cast<int64_t>(a) + 1;
    }
  };
  if (med.empty()) swing(0, m);
  for (size_t i = 0; i + static_cast<size_t>(w) <= m; i += static_cast<size_t>(w)) swing(i, i + static_cast<size_t>(w));
  s.oscillating = s.max_swing > opts.max_relative_swing;
  return s;
}

std::vector<Finding> diagnose_loss_history(const std::vector<double>& train, const std::vector<double>& val,
                                           const LossCheckOptions& opts) {
  std::vector<Finding> out;
  const LossHistoryStats s = analyse_loss_history(train, opts);
  const std::string n_steps = num(s.steps);

  // Non-finite losses.
  auto non_finite = [&](bool nan, int64_t step) {
    if (step < 0) return;
    int64_t count = 0;
    for (double v : train) count += nan ? std::isnan(v) : std::isinf(v);
    Finding f = make("L1", Severity::Error,
                     std::string("the training loss is ") + (nan ? "NaN" : "Inf") + " from step " + num(step) +
                         " (of " + n_steps + ")");
    f.kind = Kind::LossNonFinite;
    f.nonfinite = true;
    f.step = step;
    f.evidence = {{std::string("first ") + (nan ? "NaN" : "Inf") + " step", static_cast<double>(step),
                   "any non-finite loss is an error"},
                  {nan ? "NaN steps" : "Inf steps", static_cast<double>(count), ""}};
    if (step >= 2) f.evidence.push_back({"last loss before it", train[static_cast<size_t>(step) - 2], ""});
    if (s.finite_steps > 0) f.evidence.push_back({"first loss", s.first_loss, ""});
    f.cause = nan ? kCauseNaN : kCauseInf;
    f.fix = nan ? "turn on anomaly mode (W4) to name the op and module that made the first NaN; lower the learning "
                  "rate or clip gradients (TrainerOptions().clip_grad_norm(1.0)); take logs of logits through "
                  "log_softmax / cross_entropy, never log(softmax(x)); guard divisions with an epsilon"
                : "turn on anomaly mode (W4) to find the overflowing op; feed logits to the stable losses "
                  "(cross_entropy, BCEWithLogitsLoss) instead of probabilities; lower the learning rate";
    out.push_back(f);
  };
  non_finite(true, s.first_nan_step);
  non_finite(false, s.first_inf_step);
  const std::string judged = s.finite_steps < s.steps ? " (judged on the " + num(s.finite_steps) +
                                                            " finite steps before it)"
                                                      : "";

  // Stuck high / at chance.
  if (s.trend_judged && (s.at_chance || s.stuck)) {
    const double best_later = *std::min_element(s.window_medians.begin() + 1, s.window_medians.end());
    Finding f = make("L1", Severity::Warning,
                     s.at_chance ? "the training loss is stuck at chance level: " + fmt_num(s.last_level) +
                                       " against " + fmt_num(opts.chance_loss) + " for guessing" + judged
                                 : "the training loss is stuck: it fell " +
                                       fmt_num(100.0 * s.relative_decrease) + "% in " + num(s.finite_steps) +
                                       " steps" + judged);
    f.kind = s.at_chance ? Kind::LossAtChance : Kind::LossStuck;
    f.evidence = {{"median of the first " + num(s.window) + " steps", s.window_medians[0], ""},
                  {"best later window median", best_later, ""},
                  {"relative decrease", s.relative_decrease,
                   "< " + fmt_num(opts.min_relative_decrease) + " is stuck"},
                  {"last window median", s.last_level, ""}};
    if (std::isfinite(opts.chance_loss))
      f.evidence.push_back({"chance loss", opts.chance_loss,
                            ">= " + fmt_num(1.0 - opts.chance_margin) + " x chance at the end is chance level"});
    f.cause = std::string(kCauseStuck) +
              (s.at_chance ? ". At chance level the output does not depend on the input at all: a model whose "
                             "updates do nothing (lr far too low, frozen or detached layers), dead units, or "
                             "labels unrelated to the inputs"
                           : "");
    f.fix = "overfit one small batch first (M14): if even that fails, the model or the loss is wrong; check the "
            "learning rate (O6: update/weight ratios near 1e-3), that gradients reach every layer (O1, M5), that "
            "labels match inputs (D4) and that inputs are scaled (D5)";
    out.push_back(f);
  }

  // Diverging.
  if (s.diverging) {
    Finding f = make("L1", Severity::Warning,
                     "the training loss is diverging: its smoothed value rose to " + fmt_num(s.max_rise) +
                         "x its best by step " + num(s.rise_step) + judged);
    f.kind = Kind::LossDiverging;
    f.step = s.rise_step;
    f.evidence = {{"largest window median / best earlier window median", s.max_rise,
                   "> " + fmt_num(opts.diverge_factor) + " is diverging"},
                  {"window (steps)", static_cast<double>(s.window), ""},
                  {"last window median", s.last_level, ""}};
    f.cause = std::string(kCauseOscillating) +
              "; a rising loss is also the exploding-gradient table's symptom (lr too high, poor initialisation, "
              "numerical instability in the loss)";
    f.fix = "lower the learning rate 3-10x (or add a warm-up), clip gradients (clip_grad_norm 1.0), watch the "
            "gradient and weight norms (O2, O3)";
    out.push_back(f);
  }

  // Spikes above the starting loss.
  if (s.spiking) {
    Finding f = make("L1", Severity::Warning,
                     "the training loss spiked above its starting value " + num(s.spikes) + " time" +
                         (s.spikes == 1 ? "" : "s") + ", worst at step " + num(s.worst_spike_step) + ": " +
                         fmt_num(s.worst_spike_loss) + " after starting at " + fmt_num(s.first_loss));
    f.kind = Kind::LossSpiking;
    f.step = s.worst_spike_step;
    f.evidence = {{"spikes", static_cast<double>(s.spikes), ""},
                  {"worst spike / median of the " + num(s.window) + " steps before", s.worst_spike_ratio,
                   "> " + fmt_num(opts.spike_factor) + " and above the first loss is a spike"},
                  {"worst spike loss", s.worst_spike_loss, ""},
                  {"first loss", s.first_loss, ""}};
    f.cause = std::string(kCauseOscillating) +
              ". A loss worse than at initialisation means an update threw the weights far away: with Adam the "
              "first steps move every weight by ~lr, so lr 0.1 ruins the start";
    f.fix = "lower the learning rate (Adam: 1e-3 is the usual start; SGD: 0.01-0.1), or warm it up over the first "
            "few hundred steps; clip gradients; a larger batch and shuffled data (D8) also calm the loss";
    out.push_back(f);
  }

  // Wild oscillation.
  if (s.oscillating) {
    Finding f = make("L1", Severity::Warning,
                     "the training loss oscillates wildly: from step to step it moves by " + fmt_num(s.max_swing) +
                         "x its own level (window from step " + num(s.swing_step) + ")");
    f.kind = Kind::LossOscillating;
    f.step = s.swing_step;
    f.evidence = {{"median |loss[t] - loss[t-1]| / median loss in a window", s.max_swing,
                   "> " + fmt_num(opts.max_relative_swing) + " is wild"},
                  {"window (steps)", static_cast<double>(s.window), ""}};
    f.cause = kCauseOscillating;
    f.fix = "lower the learning rate; use a larger batch; shuffle the training data (D8); clip gradients";
    out.push_back(f);
  }

  // Train down, val up.
  std::vector<double> v;
  for (double x : val)
    if (std::isfinite(x)) v.push_back(x);
  const int64_t E = static_cast<int64_t>(v.size()), P = std::max<int64_t>(opts.val_patience, 1);
  if (E >= P + 1 && s.finite_steps > 0) {
    const auto best_it = std::min_element(v.begin(), v.end() - P);
    const double best = *best_it;
    const int64_t b = best_it - v.begin();  // epoch index of the best validation loss
    const double tail_min = *std::min_element(v.end() - P, v.end());
    // The training loss around the best epoch and at the end (medians of one window).
    const int64_t m = s.finite_steps, w = std::max<int64_t>(1, std::min<int64_t>(s.window, m));
    const int64_t at_best = std::clamp<int64_t>((b + 1) * static_cast<int64_t>(train.size()) / E, w, m);
    const double train_at_best = median_of(train, static_cast<size_t>(at_best - w), static_cast<size_t>(at_best));
    const double train_end = median_of(train, static_cast<size_t>(m - w), static_cast<size_t>(m));
    if (tail_min > (1.0 + opts.val_rise) * best && train_end < train_at_best) {
      Finding f = make("L1", Severity::Warning,
                       "the training loss keeps falling while the validation loss rises: best " + fmt_num(best) +
                           " at epoch " + num(b + 1) + ", the last " + num(P) + " epochs all above " +
                           fmt_num((1.0 + opts.val_rise) * best));
      f.kind = Kind::TrainDownValUp;
      f.evidence = {{"best validation loss", best, ""},
                    {"epoch of the best", static_cast<double>(b + 1), ""},
                    {"lowest of the last " + num(P) + " validation losses / best", tail_min / best,
                     "> " + fmt_num(1.0 + opts.val_rise) + " for all of them is rising"},
                    {"last validation loss", v.back(), ""},
                    {"training loss near the best epoch (median)", train_at_best, ""},
                    {"training loss at the end (median)", train_end, "lower: training still improves"}};
      f.cause = kCauseTrainValGap;
      f.fix = "keep the weights of the best epoch (early stopping); regularise (dropout, weight decay, data "
              "augmentation) or get more data; rule out leakage (D7) and a preprocessing mismatch between the "
              "splits (D10); L7 gives the fitting diagnosis";
      out.push_back(f);
    }
  }
  return out;
}

// ---- L2 double softmax ---------------------------------------------------------------

std::vector<Finding> check_cross_entropy_input(const Tensor& input, const LossCheckOptions& opts) {
  GS_CHECK(input.defined(), "check_cross_entropy_input", "needs a defined input (B, C) of logits");
  if (!input.is_floating_point() || input.numel() == 0 || input.dim() == 0) return {};
  // Rows over dim 1 (dim 0 for a single example (C)): index (b * C + c) * R + r.
  const int64_t B = input.dim() == 1 ? 1 : input.size(0);
  const int64_t C = input.dim() == 1 ? input.size(0) : input.size(1);
  if (C < 2) return {};
  const int64_t R = input.numel() / (B * C);
  const std::vector<double> v = doubles(input);
  double lo = std::numeric_limits<double>::infinity(), worst = 0.0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < R; ++r) {
      double sum = 0.0;
      for (int64_t c = 0; c < C; ++c) {
        const double x = v[static_cast<size_t>((b * C + c) * R + r)];
        lo = std::min(lo, x);
        sum += x;
      }
      worst = std::max(worst, std::fabs(sum - 1.0));
      if (std::isnan(sum)) worst = kNaN;
    }
  if (!(lo >= 0.0) || !(worst <= opts.prob_sum_tolerance)) return {};
  Finding f = make("L2", Severity::Error,
                   "cross-entropy is fed probabilities: every row of the " + shape_of(input) +
                       " input is >= 0 and sums to 1, so a second softmax runs inside the loss");
  f.shape = shape_of(input);
  f.evidence = {{"smallest value", lo, ">= 0 (probabilities)"},
                {"largest |row sum - 1|", worst, "<= " + fmt_num(opts.prob_sum_tolerance) + ": rows sum to 1"},
                {"rows", static_cast<double>(B * R), ""},
                {"classes", static_cast<double>(C), ""}};
  f.cause = "a softmax before cross-entropy: cross_entropy(x) computes log_softmax(x) itself, so the model "
            "is trained through softmax(softmax(logits)); the inputs lie in [0, 1], so even a perfect prediction "
            "(1 for the true class, 0 elsewhere) leaves a loss of log(1 + (C - 1) / e) (1.46 for 10 classes), and "
            "the gradients shrink: training crawls";
  f.fix = "remove the final Softmax and give cross_entropy the raw logits; keep softmax only for reporting "
          "probabilities (or use LogSoftmax + NLLLoss)";
  return {f};
}

// ---- L3 BCE on logits -------------------------------------------------------------------

std::vector<Finding> check_bce_input(const Tensor& input) {
  GS_CHECK(input.defined(), "check_bce_input", "needs a defined input of probabilities");
  if (!input.is_floating_point() || input.numel() == 0) return {};
  const std::vector<double> v = doubles(input);
  int64_t outside = 0, finite = 0;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double x : v) {
    if (!std::isfinite(x)) continue;
    ++finite;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    outside += x < 0.0 || x > 1.0;
  }
  if (outside == 0) return {};
  Finding f = make("L3", Severity::Error,
                   "binary cross-entropy is fed values outside [0, 1] (" + fmt_num(lo) + " .. " + fmt_num(hi) +
                       "): logits, not probabilities");
  f.shape = shape_of(input);
  f.evidence = {{"min", lo, ">= 0 for probabilities"},
                {"max", hi, "<= 1 for probabilities"},
                {"fraction outside [0, 1]", static_cast<double>(outside) / static_cast<double>(finite),
                 "any is an error"}};
  f.cause = "the model's raw scores go to BCELoss, which expects sigmoid outputs; with the values "
            "clamped into [0, 1] the loss runs silently but half of the logits give no gradient";
  f.fix = "give the logits to BCEWithLogitsLoss (sigmoid and log in one stable step), or apply sigmoid before BCELoss";
  return {f};
}

// ---- L4 initial loss --------------------------------------------------------------------

// ---- L4: the initial outputs against the targets ----------------------------------------
namespace {

// The batch's class frequencies f and mean predicted probabilities p (float64), judged by KL.
std::vector<Finding> judge_class_start(const std::vector<double>& f, const std::vector<double>& p,
                                       const std::string& what, const LossCheckOptions& opts) {
  const size_t C = f.size();
  double kl = 0.0, kl_uniform = 0.0;
  for (size_t c = 0; c < C; ++c)
    if (f[c] > 0) {
      kl += f[c] * std::log(f[c] / std::max(p[c], 1e-300));
      kl_uniform += f[c] * std::log(f[c] * static_cast<double>(C));
    }
  const double excess = kl - kl_uniform;
  size_t top = 0, rare = 0;
  for (size_t c = 1; c < C; ++c) {
    if (p[c] / std::max(f[c], 1e-12) > p[top] / std::max(f[top], 1e-12)) top = c;
    if (f[c] > 0 && (f[rare] == 0 || f[c] < f[rare])) rare = c;
  }
  std::string bias = "[";
  for (size_t c = 0; c < C && c < 10; ++c) bias += (c ? ", " : "") + fmt_num(std::log(std::max(f[c], 1e-12)));
  bias += C > 10 ? ", ...]" : "]";
  if (excess > opts.initial_output_excess) {
    Finding g = make("L4", Severity::Warning,
                     "the untrained model's mean prediction is far from the targets: it gives " + what + " " + num(top) +
                         " a probability of " + fmt_num(p[top]) + " on average, where the batch has " +
                         fmt_num(f[top]) + " of them (KL " + fmt_num(kl) + " nats, " + fmt_num(excess) +
                         " more than uniform guessing)");
    g.kind = Kind::InitialOutputBiased;
    g.evidence = {{"KL(class frequencies || mean prediction)", kl, ""},
                  {"KL against uniform predictions", kl_uniform, ""},
                  {"excess over uniform", excess, "> " + fmt_num(opts.initial_output_excess) + " nats warns"},
                  {"mean predicted probability of " + what + " " + num(top), p[top], ""},
                  {"its frequency in the batch", f[top], ""}};
    g.cause = "the final layer starts biased towards some outputs (a bias set by hand, copied from another "
              "dataset's priors, or a log taken twice), so training first spends its steps undoing it, and the "
              "first loss is far above log(C)";
    g.fix = "initialise the final bias to 0 (uniform start), or to the log of the class frequencies, " + bias +
            " here (Karpathy: \"initialise well\")";
    return {g};
  }
  if (kl > opts.initial_output_kl) {
    Finding g = make("L4", Severity::Info,
                     "the classes are imbalanced and the model starts from uniform predictions: a final bias of log "
                     "frequency would start at the label distribution (KL " + fmt_num(kl) + " nats)");
    g.evidence = {{"KL(class frequencies || mean prediction)", kl, "> " + fmt_num(opts.initial_output_kl) + " is said"},
                  {"frequency of the rarest " + what + " (" + num(rare) + ")", f[rare], ""}};
    g.fix = "initialise the final layer's bias to log(class frequency), " + bias +
            ", so the first steps do not go to learning the imbalance (the hockey-stick loss)";
    return {g};
  }
  return {};
}

}  // namespace

std::vector<Finding> check_initial_outputs(const Tensor& output, const Tensor& target, const LossCheckOptions& opts) {
  if (!output.defined() || !target.defined() || !output.is_floating_point() || output.dim() < 1 ||
      output.size(0) < 2)
    return {};
  NoGradGuard ng;
  const Tensor out = output.detach().to(kCPU).to(kFloat64).contiguous();
  const int64_t N = out.size(0);
  // Class indices against (N, C) scores.
  if (target.dtype() == kInt64 && target.dim() == 1 && target.size(0) == N && out.dim() == 2 && out.size(1) >= 2) {
    const int64_t C = out.size(1);
    const Tensor t = target.to(kCPU).contiguous();
    const int64_t* y = t.data_ptr<int64_t>();
    for (int64_t i = 0; i < N; ++i)
      if (y[i] < 0 || y[i] >= C) return {};  // ignore_index or labels out of range: D9 and L5 say so
    const Tensor prob = softmax(out, 1).contiguous();
    const double* pr = prob.data_ptr<double>();
    std::vector<double> f(static_cast<size_t>(C), 0.0), p(static_cast<size_t>(C), 0.0);
    for (int64_t i = 0; i < N; ++i) {
      f[static_cast<size_t>(y[i])] += 1.0 / static_cast<double>(N);
      for (int64_t c = 0; c < C; ++c) p[static_cast<size_t>(c)] += pr[i * C + c] / static_cast<double>(N);
    }
    return judge_class_start(f, p, "class", opts);
  }
  if (!target.is_floating_point() || target.numel() != out.numel()) return {};
  const Tensor tt = target.detach().to(kCPU).to(kFloat64).contiguous();
  const double* y = tt.data_ptr<double>();
  const double* o = out.data_ptr<double>();
  const int64_t n = out.numel(), k = n / N;
  bool binary = true, finite = true, probs = true;
  for (int64_t i = 0; i < n; ++i) {
    binary = binary && (y[i] == 0.0 || y[i] == 1.0);
    finite = finite && std::isfinite(y[i]) && std::isfinite(o[i]);
    probs = probs && o[i] >= 0.0 && o[i] <= 1.0;
  }
  if (!finite) return {};  // D2, M12
  if (binary) {
    // Targets of 0 and 1: the mean predicted probability of a 1 against the frequency of 1s.
    double f1 = 0.0, p1 = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      f1 += y[i] / static_cast<double>(n);
      p1 += (probs ? o[i] : 1.0 / (1.0 + std::exp(-o[i]))) / static_cast<double>(n);
    }
    return judge_class_start({1.0 - f1, f1}, {1.0 - p1, p1}, "target value", opts);
  }
  // Regression: per column, the mean output against the target's mean, in target stds.
  double worst_z = 0.0, mo = 0.0, my = 0.0, sy = 0.0;
  int64_t worst = -1;
  for (int64_t j = 0; j < k; ++j) {
    double so = 0.0, s1 = 0.0, s2 = 0.0;
    for (int64_t i = 0; i < N; ++i) {
      so += o[i * k + j];
      s1 += y[i * k + j];
    }
    so /= static_cast<double>(N);
    s1 /= static_cast<double>(N);
    for (int64_t i = 0; i < N; ++i) s2 += (y[i * k + j] - s1) * (y[i * k + j] - s1);
    const double sd = std::sqrt(s2 / static_cast<double>(N));
    if (!(sd > 1e-12 * std::max(1.0, std::fabs(s1)))) continue;  // a constant target: no scale to judge by
    const double z = std::fabs(so - s1) / sd;
    if (z > worst_z) worst_z = z, worst = j, mo = so, my = s1, sy = sd;
  }
  if (worst < 0 || !(worst_z > opts.initial_output_z)) return {};
  Finding g = make("L4", Severity::Warning,
                   "the untrained model's mean output " + fmt_num(mo) + " is " + fmt_num(worst_z) +
                       " target stds from the targets' mean " + fmt_num(my) +
                       (k > 1 ? " (output column " + num(worst) + ")" : std::string()));
  g.kind = Kind::InitialOutputBiased;
  g.evidence = {{"mean output", mo, ""},
                {"mean target", my, ""},
                {"target std", sy, ""},
                {"|mean output - mean target| / target std", worst_z, "> " + fmt_num(opts.initial_output_z) + " warns"}};
  g.cause = "the targets are far from 0 and the final layer starts near 0 (its bias at 0): the first steps go to "
            "learning the targets' mean, with a loss and gradients dominated by that offset";
  g.fix = "initialise the final layer's bias to the targets' mean (" + fmt_num(my) +
          ") (Karpathy: \"initialise well\"), or standardise the targets (subtract the mean, divide by the std) "
          "and undo it on the predictions";
  return {g};
}

std::vector<Finding> check_initial_loss(double loss, int64_t num_classes, const std::string& kind_in,
                                        const LossCheckOptions& opts) {
  std::string kind = kind_in;
  std::transform(kind.begin(), kind.end(), kind.begin(), [](unsigned char c) { return std::tolower(c); });
  double expected = opts.expected_initial_loss;
  std::string why = "opts.expected_initial_loss";
  if (!std::isfinite(expected)) {
    if (kind == "cross_entropy" || kind == "crossentropy" || kind == "ce" || kind == "nll") {
      GS_CHECK(num_classes >= 2, "check_initial_loss", "kind '", kind_in, "' needs num_classes >= 2, got ",
               num_classes);
      expected = std::log(static_cast<double>(num_classes));
      why = "log(C) = log(" + num(num_classes) + "): uniform predictions over C classes";
    } else if (kind == "bce" || kind == "binary_cross_entropy" || kind == "bce_with_logits") {
      expected = std::log(2.0);
      why = "log(2): a prediction of 0.5 for every target";
    } else {
      GS_FAIL("check_initial_loss", "no default expectation for kind '", kind_in,
              "': use cross_entropy, nll or bce, or set LossCheckOptions::expected_initial_loss (for MSE with "
              "predictions near 0 at initialisation: mean(target^2))");
    }
  }
  if (!std::isfinite(loss)) {
    Finding f = make("L4", Severity::Error, "the initial " + kind_in + " loss is " + fmt_num(loss));
    f.kind = Kind::InitialLoss;
    f.nonfinite = true;
    f.evidence = {{"initial loss", loss, "must be finite"}, {"expected", expected, why}};
    f.cause = "the untrained model already produces non-finite outputs or the loss takes a log of 0: weights far "
              "too large, unscaled inputs (D5), log(softmax(x))";
    f.fix = "turn on anomaly mode (W4) to find the op; check the inputs (D2, D5) and the initialisation (M9)";
    return {f};
  }
  const double ratio = loss / expected;
  const bool high = ratio > opts.initial_loss_high, low = ratio < opts.initial_loss_low;
  Finding f = make("L4", high || low ? Severity::Warning : Severity::Info,
                   high  ? "the initial loss " + fmt_num(loss) + " is " + fmt_num(ratio) + "x the expected " +
                              fmt_num(expected)
                   : low ? "the initial loss " + fmt_num(loss) + " is only " + fmt_num(ratio) + "x the expected " +
                               fmt_num(expected)
                         : "the initial loss " + fmt_num(loss) + " is close to the expected " + fmt_num(expected));
  f.kind = Kind::InitialLoss;
  f.evidence = {{"initial loss", loss, ""},
                {"expected", expected, why},
                {"loss / expected", ratio,
                 "outside [" + fmt_num(opts.initial_loss_low) + ", " + fmt_num(opts.initial_loss_high) + "] warns"}};
  if (high) {
    f.cause = "the untrained model is confidently wrong: logits far from 0 (weights initialised too large; a "
              "large final-layer scale or bias; unscaled inputs, D5) — or the loss is summed over the batch instead "
              "of averaged (the ratio is then about the batch size)";
    f.fix = "initialise the last layer small (default or 1/sqrt(fan_in) init, bias 0), scale the inputs, use "
            "reduction mean (L6); then the first loss is ~" + fmt_num(expected);
  } else if (low) {
    f.cause = "the untrained model already does much better than guessing: the label leaks into the inputs, the "
              "model was not freshly initialised, num_classes is wrong, or the loss is divided by more than the "
              "batch";
    f.fix = "check what the inputs contain (D4, D7), that the model is new, and the number of classes";
  } else {
    f.fix = "none needed: an untrained model that guesses gives about this loss";
  }
  return {f};
}

// ---- L5 masked targets ---------------------------------------------------------------------

std::vector<Finding> check_masked_targets(const Tensor& target, int64_t ignore_index,
                                          std::optional<double> loss_value) {
  GS_CHECK(target.defined(), "check_masked_targets", "needs a defined target tensor");
  if (target.numel() == 0 || !is_integral(target.dtype())) return {};
  const std::vector<int64_t> y = target.detach().contiguous().to_vector<int64_t>();
  const int64_t masked = std::count(y.begin(), y.end(), ignore_index);
  if (masked < static_cast<int64_t>(y.size())) return {};
  const bool nan = loss_value.has_value() && std::isnan(*loss_value);
  Finding f = make("L5", nan ? Severity::Error : Severity::Warning,
                   "every one of the " + num(masked) + " targets equals ignore_index " + num(ignore_index) +
                       (nan ? ": the loss is NaN (0 / 0)" : ": a mean over no labels is 0 / 0 = NaN"));
  f.nonfinite = true;  // a mean over no labels is 0 / 0: the loss is NaN
  f.shape = shape_of(target);
  f.evidence = {{"masked targets", static_cast<double>(masked), "all of them warns"},
                {"targets", static_cast<double>(y.size()), ""},
                {"ignore_index", static_cast<double>(ignore_index), ""}};
  if (loss_value.has_value()) f.evidence.push_back({"loss", *loss_value, "NaN is an error"});
  f.cause = "the whole batch is masked (a collate or padding step sets every label to ignore_index, a label "
            "mapping that misses every class): mean reduction divides a sum over zero labels by zero labels, as "
            "PyTorch does, and one NaN loss turns every weight into NaN at the next step";
  f.fix = "find the step that masks the labels (check a batch with D1/D9); skip batches with no valid label, or "
          "divide the summed loss by max(count, 1)";
  return {f};
}

// ---- L6 reduction ---------------------------------------------------------------------------

namespace {
// Every module under m (pre-order), without shared_from_this (works for a model on the stack).
void walk(nn::Module& m, std::vector<nn::Module*>& out) {
  out.push_back(&m);
  for (auto& [name, c] : m.named_children()) walk(*c, out);
}

double grad_norm(const std::vector<Tensor>& params) {
  double sq = 0.0;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const double n = summarize(g).norm;
    sq += n * n;
  }
  return std::sqrt(sq);
}
}  // namespace

std::vector<Finding> check_loss_reduction(nn::Module& model,
                                          const std::function<Tensor(const Tensor&, const Tensor&)>& loss,
                                          const Tensor& x, const Tensor& y, const LossCheckOptions& opts) {
  GS_CHECK(x.defined() && y.defined() && x.dim() >= 1 && y.dim() >= 1, "check_loss_reduction",
           "needs a batch x (B, ...) and targets y (B, ...)");
  std::vector<nn::Module*> modules;
  walk(model, modules);
  std::vector<bool> modes;
  for (nn::Module* m : modules) modes.push_back(m->is_training());
  std::vector<Tensor> params;
  for (const Tensor& p : model.parameters())
    if (p.requires_grad()) params.push_back(p);
  std::vector<Tensor> saved_grads;
  for (Tensor& p : params) {
    saved_grads.push_back(p.grad());
    p.set_grad(Tensor());
  }
  std::vector<std::pair<std::string, Tensor>> saved_buffers;
  {
    NoGradGuard ng;
    for (auto& [name, b] : model.named_buffers()) saved_buffers.emplace_back(name, b.detach().clone());
  }
  auto restore = [&] {
    for (size_t i = 0; i < modules.size(); ++i) modules[i]->train(modes[i]);  // pre-order: children last
    for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(saved_grads[i]);
    for (auto& [name, b] : saved_buffers) model.set_tensor(name, b);
  };

  // The layers that are random in train mode, whatever their type (the probe
  // restores everything it touches): each draw would change the gradient norm.
  const ModeProbe probe = probe_mode_dependence(model, x);
  double g1 = 0.0, g2 = 0.0;
  try {
    for (const nn::ModulePtr& m : probe.stochastic_modules()) set_own_mode(*m, false);
    auto norm_for = [&](const Tensor& xb, const Tensor& yb) {
      for (Tensor& p : params) p.set_grad(Tensor());
      Tensor l = loss(model(xb), yb);
      GS_CHECK(l.numel() == 1, "check_loss_reduction",
               "the loss must be one number (reduction mean or sum), got shape ", shape_of(l));
      l.backward();
      return grad_norm(params);
    };
    g1 = norm_for(x, y);
    g2 = norm_for(cat({x, x}, 0), cat({y, y}, 0));
  } catch (...) {
    restore();
    throw;
  }
  restore();

  const double ratio = g1 > 0 ? g2 / g1 : kNaN;
  if (!std::isfinite(ratio)) {
    Finding f = make("L6", Severity::Info,
                     "the reduction could not be judged: the gradient norm for the batch is " + fmt_num(g1));
    f.evidence = {{"gradient norm, batch", g1, "must be finite and > 0"}, {"gradient norm, batch twice", g2, ""}};
    f.fix = "run the test on a batch whose loss has a gradient (O1 checks the gradients themselves)";
    return {f};
  }
  const bool sum = ratio > opts.reduction_ratio;
  Finding f = make("L6", sum ? Severity::Warning : Severity::Info,
                   sum ? "the loss is summed over the batch, not averaged: the gradient grows " + fmt_num(ratio) +
                             "x when the batch is doubled"
                       : "the loss is averaged over the batch: doubling the batch leaves the gradient at " +
                             fmt_num(ratio) + "x");
  f.shape = "x " + shape_of(x) + ", y " + shape_of(y);
  f.evidence = {{"gradient norm, batch (B = " + num(x.size(0)) + ")", g1, ""},
                {"gradient norm, the batch twice (2B)", g2, ""},
                {"ratio", ratio, "1 for mean, 2 for sum; > " + fmt_num(opts.reduction_ratio) + " warns"}};
  if (sum) {
    f.cause = "the loss uses reduction sum where mean was meant: the gradient, and so the step size, "
              "grows with the batch size; a learning rate tuned for one batch size diverges at a larger one";
    f.fix = "use Reduction::Mean (the default), or divide the summed loss by the batch size; if the sum is "
            "intended, scale the learning rate by 1 / B";
  } else {
    f.fix = "none needed";
  }
  return {f};
}

std::vector<Finding> check_loss_reduction(const nn::Loss& loss) {
  if (loss.reduction() != nn::Reduction::Sum) return {};
  Finding f = make("L6", Severity::Warning,
                   loss.type_name() + " is declared with reduction=sum: the gradient scale grows with the batch size");
  f.module = loss.type_name();
  f.evidence = {{"reduction is sum (1 = yes)", 1.0, "sum warns; mean is the convention"}};
  f.cause = "Reduction::Sum adds the per-example losses: doubling the batch doubles the gradient, so the learning "
            "rate silently depends on the batch size (loss.mean() vs loss.sum() changes the gradient "
            "scale)";
  f.fix = "use Reduction::Mean, or keep Sum on purpose and scale the learning rate by 1 / B";
  return {f};
}

// ---- L7 fitting diagnosis --------------------------------------------------------------------

std::vector<Finding> check_validation_accuracy(const std::vector<double>& tr, const std::vector<double>& va,
                                               const LossCheckOptions& opts) {
  std::vector<Finding> out;
  const int64_t k = opts.val_accuracy_epochs;
  const int64_t n = static_cast<int64_t>(std::min(tr.size(), va.size()));
  if (k < 1 || n < k) return out;
  double smallest = std::numeric_limits<double>::infinity();
  for (int64_t e = n - k; e < n; ++e) {
    const double gap = va[e] - tr[e];
    if (!std::isfinite(gap) || gap <= opts.val_accuracy_margin) return out;
    smallest = std::min(smallest, gap);
  }
  Finding f = make("L7", Severity::Warning,
                   "the validation accuracy is above the training accuracy by " + fmt_num(100 * smallest) +
                       " points or more in each of the last " + num(k) + " epochs: suspiciously high");
  f.kind = Kind::ValidationTooGood;
  f.evidence = {{"training accuracy (last epoch, train mode)", tr[n - 1], ""},
                {"validation accuracy (last epoch)", va[n - 1], ""},
                {"smallest gap over the last epochs", smallest, "> " + fmt_num(opts.val_accuracy_margin) + " warns"}};
  f.cause = "the validation rows are (partly) training rows, the training labels are noisier than the "
            "validation labels or come from another source, or the validation split is too small to judge; "
            "dropout alone lowers the training accuracy only a little";
  f.fix = "check the splits for shared rows (D13) and their labels' quality and distribution (D12, D15), and "
          "validate on more rows (D16)";
  out.push_back(std::move(f));
  return out;
}

std::vector<Finding> diagnose_fitting(const std::vector<double>& train, const std::vector<double>& val,
                                      const LossCheckOptions& opts) {
  const int64_t E = static_cast<int64_t>(std::min(train.size(), val.size()));
  if (E == 0) return {};
  const int64_t k = std::clamp<int64_t>(opts.fitting_window, 1, E);
  double tr = 0.0, va = 0.0;
  for (int64_t e = E - k; e < E; ++e) {
    tr += train[static_cast<size_t>(e)];
    va += val[static_cast<size_t>(e)];
  }
  tr /= static_cast<double>(k);
  va /= static_cast<double>(k);
  if (!std::isfinite(tr) || !std::isfinite(va)) return {};  // L1 reports non-finite losses
  const double gap = va - tr;
  const std::string over = k == 1 ? "epoch " + num(E) : "epochs " + num(E - k + 1) + "-" + num(E);
  std::vector<Evidence> ev = {{"epochs", static_cast<double>(E), ""},
                              {"train loss (mean of " + over + ")", tr, ""},
                              {"val loss (mean of " + over + ")", va, ""},
                              {"gap = val - train", gap, ""}};
  Finding f;
  if (tr > opts.underfit_train_loss && E > opts.min_epochs_underfit) {
    f = make("L7", Severity::Warning,
             "underfitting: the training loss is still " + fmt_num(tr) + " after " + num(E) + " epochs");
    f.kind = Kind::Underfitting;
    ev[1].rule = "> " + fmt_num(opts.underfit_train_loss) + " after > " + num(opts.min_epochs_underfit) +
                 " epochs is underfitting";
    f.cause = "the model cannot fit even the training data: too little capacity, too little training, a "
              "learning rate too low or too high, or a bug that caps what it can learn (L1, O6, M16)";
    f.fix = "increase the model's capacity or training time; first check that it can overfit one batch "
            "(M14) and that a larger model gets lower (M16)";
  } else if (gap > opts.overfit_gap) {
    f = make("L7", Severity::Warning,
             "overfitting: the validation loss is " + fmt_num(gap) + " above the training loss");
    f.kind = Kind::Overfitting;
    ev[3].rule = "> " + fmt_num(opts.overfit_gap) + " is overfitting";
    f.cause = "the model memorises the training data; also rule out a validation set from another "
              "distribution or preprocessing (D10) and validation run in training mode (M2)";
    f.fix = "add regularisation (dropout, weight decay, augmentation) or more data; keep the best epoch "
            "(early stopping)";
  } else if (gap < opts.normal_gap && tr < opts.normal_train_loss) {
    f = make("L7", Severity::Info, "normal convergence: low training loss and validation close to it");
    f.kind = Kind::FittingNormal;
    ev[3].rule = "< " + fmt_num(opts.normal_gap) + " with train < " + fmt_num(opts.normal_train_loss) + " is normal";
    f.fix = "none needed";
  } else {
    f = make("L7", Severity::Info,
             "no verdict yet: keep watching (gap " + fmt_num(gap) + ", train " + fmt_num(tr) + ")");
    ev[3].rule = "overfitting above " + fmt_num(opts.overfit_gap) + "; normal below " + fmt_num(opts.normal_gap) +
                 " with train < " + fmt_num(opts.normal_train_loss);
    f.fix = "train on and diagnose again after more epochs";
  }
  f.evidence = ev;
  return {f};
}

}  // namespace gradsleuth::debug
