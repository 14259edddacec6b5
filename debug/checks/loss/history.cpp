// L1's home, the loss history over a whole run, with the run check (RunCheck) of L1 and L7: the history
// the monitor records, judged at the end (L7's own rules: checks/loss/fitting.cpp).
#include "debug/checks/loss/loss_checks.h"
#include "optim/trainer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/run_check.h"

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

// The loss-debugging cause table (docs/checks.md, L1), one line per symptom.
const char* kCauseNaN =
    "likely causes of a NaN loss: exploding gradients; log of zero or of a negative number; "
    "division by zero; learning rate too high";
const char* kCauseInf =
    "likely causes of an Inf loss: numerical overflow; extreme predictions (a probability of "
    "exactly 0 inside a log, exp of a large logit)";
const char* kCauseStuck =
    "likely causes of a loss stuck high: wrong loss function; learning rate too low; model too "
    "simple; data issue (labels shuffled apart from their inputs, unscaled inputs)";
const char* kCauseOscillating =
    "likely causes of a loss oscillating wildly: learning rate too high; batch size too "
    "small; data shuffling issue (batches sorted by class)";
const char* kCauseTrainValGap =
    "likely causes of train loss down, val loss up: overfitting; data leakage in "
    "train; train/val distribution mismatch";

}  // namespace

double validation_accuracy_drop(const std::vector<double>& a) {
  if (a.empty() || !std::isfinite(a.back())) return kNaN;
  double best = a.back();
  for (double x : a)
    if (std::isfinite(x)) best = std::max(best, x);
  return best - a.back();
}

bool validation_held(const std::vector<double>& val_loss, const std::vector<double>& val_accuracy,
                     const LossCheckOptions& o) {
  if (val_loss.size() < 3 ||
      !std::all_of(val_loss.begin(), val_loss.end(), [](double x) { return std::isfinite(x) && x > 0; }))
    return false;
  const double best = *std::min_element(val_loss.begin(), val_loss.end());
  if (val_loss.back() > (1.0 + o.val_rise) * best) return false;
  const double drop = validation_accuracy_drop(val_accuracy);
  return !std::isfinite(drop) || drop <= o.val_accuracy_drop;
}

// ---- L1 loss history ------------------------------------------------------------------

double loss_spread(const std::vector<double>& l, size_t from, size_t to) {
  to = std::min(to, l.size());
  if (to < from + 3) return std::numeric_limits<double>::quiet_NaN();
  double moved = 0, level = 0;
  for (size_t i = from; i < to; ++i) {
    level += std::fabs(l[i]);
    if (i > from) moved += std::fabs(l[i] - l[i - 1]);
  }
  const double n = static_cast<double>(to - from);
  return level > 0 ? (moved / (n - 1)) / (level / n) : std::numeric_limits<double>::quiet_NaN();
}

LossHistoryStats analyse_loss_history(const std::vector<double>& l, const LossCheckOptions& opts,
                                      const BatchReplay& replay) {
  LossHistoryStats s;
  const std::vector<double>& batch_starts = replay.starts;
  s.steps = static_cast<int64_t>(l.size());
  for (size_t i = 0; i < l.size(); ++i) {
    if (std::isnan(l[i]) && s.first_nan_step < 0) s.first_nan_step = static_cast<int64_t>(i) + 1;
    if (std::isinf(l[i]) && s.first_inf_step < 0) s.first_inf_step = static_cast<int64_t>(i) + 1;
  }
  size_t m = l.size();
  for (size_t i = 0; i < l.size(); ++i)
    if (!std::isfinite(l[i])) {
      m = i;
      break;
    }
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
      if (best > 0 && med[k] >= floor && med[k] - best > opts.diverge_gain * std::fabs(l[0]) &&
          med[k] / best > s.max_rise) {
        s.max_rise = med[k] / best;
        s.rise_step = static_cast<int64_t>(k + 1) * w;
      }
      best = std::min(best, med[k]);
    }
    // A loss at or below 0 from the start (a likelihood with its constant dropped: a count model's
    // NLL at -3.1) has no floor to measure a relative fall against: "stuck" is not judged.
    s.stuck = med[0] > 0 && s.relative_decrease < opts.min_relative_decrease;
    s.at_chance = std::isfinite(opts.chance_loss) && s.last_level >= (1.0 - opts.chance_margin) * opts.chance_loss;
    s.diverging = s.max_rise > opts.diverge_factor;
  }

  // Spikes: above spike_factor x the median of the previous w steps, and above the first loss (and
  // above the step's own batch at the initial weights, where that was measured).
  for (size_t t = 1; t < m; ++t) {
    const size_t from = t > static_cast<size_t>(w) ? t - static_cast<size_t>(w) : 0;
    const double ref = median_of(l, from, t);
    if (!(ref > 0) || l[t] <= opts.spike_factor * ref || l[t] <= l[0]) continue;
    if (t < batch_starts.size() && batch_starts[t] - l[0] >= opts.hard_batch_share * (l[t] - l[0])) {
      ++s.hard_batches;
      if (l[t] > s.worst_hard_loss) {
        s.worst_hard_loss = l[t];
        s.worst_hard_start = batch_starts[t];
        s.worst_hard_step = static_cast<int64_t>(t) + 1;
      }
      continue;
    }
    // Transient: after the loss had fallen below transient_level x its start, and the window after
    // it still below that (a rise that lasts is the divergence rule's).
    const size_t to = std::min(m, t + 1 + static_cast<size_t>(w));
    const bool judged_after = to - (t + 1) >= std::min<size_t>(3, static_cast<size_t>(w));
    // A jump in the last steps, with nothing after it to judge, is transient unless it lies
    // spike_factor x above the first loss.
    const bool came_back = judged_after ? median_of(l, t + 1, to) < opts.transient_level * std::fabs(l[0])
                                        : m == l.size() && l[t] <= opts.spike_factor * std::fabs(l[0]);
    if (ref < opts.transient_level * std::fabs(l[0]) && came_back) {
      ++s.transient_spikes;
      if (l[t] > s.worst_transient_loss) {
        s.worst_transient_loss = l[t];
        s.worst_transient_step = static_cast<int64_t>(t) + 1;
      }
      continue;
    }
    ++s.spikes;
    s.spike_steps.push_back(static_cast<int64_t>(t) + 1);
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
    const double r = median(d) / std::max(level, opts.swing_floor * std::fabs(l[0]));
    if (r > s.max_swing) {
      s.max_swing = r;
      s.swing_step = static_cast<int64_t>(a) + 1;
    }
  };
  if (med.empty()) swing(0, m);
  for (size_t i = 0; i + static_cast<size_t>(w) <= m; i += static_cast<size_t>(w)) swing(i, i + static_cast<size_t>(w));
  s.oscillating = s.max_swing > opts.max_relative_swing;
  if (s.oscillating) {
    const size_t from = static_cast<size_t>(s.swing_step - 1);
    s.swing_spread = loss_spread(l, from, med.empty() ? m : from + static_cast<size_t>(w));
    if (s.swing_spread <= opts.data_swing_factor * replay.spread) {
      s.oscillating = false;
      s.data_swing = true;
    }
  }
  return s;
}

std::vector<Finding> diagnose_loss_history(const std::vector<double>& train, const std::vector<double>& val,
                                           const LossCheckOptions& opts, const BatchReplay& replay) {
  std::vector<Finding> out;
  const LossHistoryStats s = analyse_loss_history(train, opts, replay);
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
  const std::string judged =
      s.finite_steps < s.steps ? " (judged on the " + num(s.finite_steps) + " finite steps before it)" : "";

  // Stuck high / at chance.
  if (s.trend_judged && (s.at_chance || s.stuck)) {
    const double best_later = *std::min_element(s.window_medians.begin() + 1, s.window_medians.end());
    Finding f = make("L1", Severity::Warning,
                     s.at_chance ? "the training loss is stuck at chance level: " + fmt_num(s.last_level) +
                                       " against " + fmt_num(opts.chance_loss) + " for guessing" + judged
                                 : "the training loss is stuck: it fell " + fmt_num(100.0 * s.relative_decrease) +
                                       "% in " + num(s.finite_steps) + " steps" + judged);
    f.kind = s.at_chance ? Kind::LossAtChance : Kind::LossStuck;
    f.evidence = {{"median of the first " + num(s.window) + " steps", s.window_medians[0], ""},
                  {"best later window median", best_later, ""},
                  {"relative decrease", s.relative_decrease, "< " + fmt_num(opts.min_relative_decrease) + " is stuck"},
                  {"last window median", s.last_level, ""}};
    if (std::isfinite(opts.chance_loss))
      f.evidence.push_back({"chance loss", opts.chance_loss,
                            ">= " + fmt_num(1.0 - opts.chance_margin) + " x chance at the end is chance level"});
    f.cause = std::string(kCauseStuck) +
              (s.at_chance ? ". At chance level the output does not depend on the input at all: a model whose "
                             "updates do nothing (lr far too low, frozen or detached layers), dead units, or "
                             "labels unrelated to the inputs"
                           : "");
    f.fix =
        "overfit one small batch first (M14): if even that fails, the model or the loss is wrong; check the "
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
    f.fix =
        "lower the learning rate 3-10x (or add a warm-up), clip gradients (clip_grad_norm 1.0), watch the "
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
                  {"worst spike / first loss", s.worst_spike_loss / s.first_loss, ""},
                  {"first loss", s.first_loss, ""}};
    f.cause = std::string(kCauseOscillating) +
              ". A loss worse than at initialisation means an update threw the weights far away: with Adam the "
              "first steps move every weight by ~lr, so lr 0.1 ruins the start";
    f.fix =
        "lower the learning rate (Adam: 1e-3 is the usual start; SGD: 0.01-0.1), or warm it up over the first "
        "few hundred steps; clip gradients; a larger batch and shuffled data (D8) also calm the loss";
    if (s.hard_batches > 0)
      f.evidence.push_back({"jumps whose batch was as hard at the initial weights (not counted)",
                            static_cast<double>(s.hard_batches), ""});
    out.push_back(f);
  }
  if (!s.spiking && s.hard_batches > 0) {
    Finding h = make("L1", Severity::Info,
                     "the training loss jumped above its first value " + num(s.hard_batches) + " time" +
                         (s.hard_batches == 1 ? "" : "s") +
                         ", on batches as hard at the initial weights, worst at step " + num(s.worst_hard_step) + ": " +
                         fmt_num(s.worst_hard_loss) + " (" + fmt_num(s.worst_hard_start) + " before any update)");
    h.kind = Kind::LossSpiking;
    h.step = s.worst_hard_step;
    h.evidence = {{"jumps above the first loss", static_cast<double>(s.hard_batches), ""},
                  {"worst jump loss", s.worst_hard_loss, ""},
                  {"the same batch's loss at the initial weights", s.worst_hard_start,
                   "its rise above the first loss >= " + fmt_num(opts.hard_batch_share) +
                       " x the jump's: the batch, not an update"},
                  {"first loss", s.first_loss, ""}};
    h.cause =
        "the first batch was easier than these (rare large targets, a batch without the rare event): the same "
        "batches had most of that loss before any update, so the jump is the data's, not the learning rate's";
    h.fix = "none needed";
    out.push_back(h);
  }
  if (!s.spiking && s.transient_spikes > 0) {
    Finding t = make("L1", Severity::Info,
                     "the training loss jumped above its starting value " + num(s.transient_spikes) + " time" +
                         (s.transient_spikes == 1 ? "" : "s") + " and came back each time, worst at step " +
                         num(s.worst_transient_step) + ": " + fmt_num(s.worst_transient_loss) +
                         " after starting at " + fmt_num(s.first_loss));
    t.kind = Kind::LossSpiking;
    t.step = s.worst_transient_step;
    t.evidence = {{"jumps the run came back from", static_cast<double>(s.transient_spikes), ""},
                  {"worst jump loss", s.worst_transient_loss, ""},
                  {"first loss", s.first_loss, ""}};
    t.cause =
        "one hard batch after the loss had fallen below " + fmt_num(opts.transient_level) +
        "x its start, with the next " + num(s.window) +
        " steps back at the level before it: small batches make such batches common. A learning rate too high "
        "makes the jumps stay (the smoothed loss rises: L1's divergence) or start before the loss has fallen";
    t.fix = "none needed; if they grow more frequent, lower the learning rate or raise the batch size";
    out.push_back(t);
  }

  // Wild oscillation.
  if (s.oscillating) {
    Finding f = make("L1", Severity::Warning,
                     "the training loss oscillates wildly: from step to step it moves by " + fmt_num(s.max_swing) +
                         "x its own level (window from step " + num(s.swing_step) + ")");
    f.kind = Kind::LossOscillating;
    f.step = s.swing_step;
    f.evidence = {{"median |loss[t] - loss[t-1]| / max(median loss, " + fmt_num(opts.swing_floor) + " x first loss) in a window",
                    s.max_swing,
                   "> " + fmt_num(opts.max_relative_swing) + " is wild"},
                  {"window (steps)", static_cast<double>(s.window), ""}};
    f.cause = kCauseOscillating;
    f.fix = "lower the learning rate; use a larger batch; shuffle the training data (D8); clip gradients";
    out.push_back(f);
  }

  if (s.data_swing) {
    Finding f = make("L1", Severity::Info,
                     "the training loss moves by " + fmt_num(s.max_swing) +
                         "x its own level from step to step (window from step " + num(s.swing_step) +
                         "), as much as its batches differ at the trained weights without an update: the "
                         "spread is the data's");
    f.kind = Kind::LossOscillating;
    f.step = s.swing_step;
    f.evidence = {{"median |loss[t] - loss[t-1]| / level in a window", s.max_swing,
                   "> " + fmt_num(opts.max_relative_swing) + " is wild, unless"},
                  {"mean |loss[t] - loss[t-1]| / mean loss in that window", s.swing_spread, ""},
                  {"the same between " + num(replay.spread_batches) + " training batches at the trained weights",
                   replay.spread, ">= 1/" + fmt_num(opts.data_swing_factor) + " of the window's: the data's"}};
    f.cause =
        "each batch holds a different share of hard examples (outlier targets, rare classes, noisy labels), so "
        "its loss differs from the last one's even when no update happens: the learning rate is not the cause";
    f.fix = "none needed; to watch progress, read the loss averaged over an epoch";
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
    // Above the best by val_rise of its size: a negative log-likelihood can end below 0, where
    // (1 + val_rise) x best would lie below the best itself.
    const double line = best + opts.val_rise * std::fabs(best);
    // The curve's epoch-to-epoch scatter (LossCheckOptions::val_rise_scatter).
    std::vector<double> second;
    for (int64_t i = std::max<int64_t>(1, b - 3); i + 1 < E - P; ++i)  // not the last P: the rise itself
      if (i < b - 1 || i > b + 1)  // not the turn of a U at the best
        second.push_back(std::fabs(v[i + 1] - 2.0 * v[i] + v[i - 1]));
    const double scatter = second.size() >= 4 ? median_of(second, 0, second.size()) / 1.65 : kNaN;
    const bool in_scatter = std::isfinite(scatter) && !(tail_min - best > opts.val_rise_scatter * scatter);
    if (tail_min > line && train_end < train_at_best && in_scatter) {
      Finding f = make("L1", Severity::Info,
                       "the validation loss ended above its best (" + fmt_num(best) + " at epoch " + num(b + 1) +
                           "; the last " + num(P) + " epochs all above " + fmt_num(line) +
                           "), but within its own scatter from epoch to epoch: a noisy curve, not a rise");
      f.kind = Kind::TrainDownValUp;
      f.evidence = {{"(lowest of the last " + num(P) + " validation losses - best) / |best|",
                     best != 0 ? (tail_min - best) / std::fabs(best) : kNaN, "> " + fmt_num(opts.val_rise)},
                    {"epoch-to-epoch scatter of the validation loss (median |second difference| / 1.65)", scatter, ""},
                    {"(lowest of the last " + num(P) + " - best) / scatter", (tail_min - best) / scatter,
                     "<= " + fmt_num(opts.val_rise_scatter) + ": within the scatter"}};
      f.cause =
          "the validation loss moves by this much from one epoch to the next at an unchanged level (a constant "
          "learning rate keeps the weights moving, or the validation set is small), so the best epoch is a low "
          "draw of that noise";
      f.fix =
          "none needed; to read the trend, average the validation loss over a few epochs, or let the "
          "learning rate decay at the end";
      out.push_back(f);
    } else if (tail_min > line && train_end < train_at_best) {
      Finding f = make("L1", Severity::Warning,
                       "the training loss keeps falling while the validation loss rises: best " + fmt_num(best) +
                           " at epoch " + num(b + 1) + ", the last " + num(P) + " epochs all above " + fmt_num(line));
      f.kind = Kind::TrainDownValUp;
      f.evidence = {{"best validation loss", best, ""},
                    {"epoch of the best", static_cast<double>(b + 1), ""},
                    {"(lowest of the last " + num(P) + " validation losses - best) / |best|",
                     best != 0 ? (tail_min - best) / std::fabs(best) : kNaN,
                     "> " + fmt_num(opts.val_rise) + " for all of them is rising"},
                    {"last validation loss", v.back(), ""},
                    {"training loss near the best epoch (median)", train_at_best, ""},
                    {"training loss at the end (median)", train_end, "lower: training still improves"},
                    {"(lowest of the last " + num(P) + " - best) / the curve's epoch-to-epoch scatter",
                     std::isfinite(scatter) ? (tail_min - best) / scatter : kNaN,
                     "> " + fmt_num(opts.val_rise_scatter) + " is beyond the scatter"}};
      f.cause = kCauseTrainValGap;
      f.fix =
          "keep the weights of the best epoch (early stopping); regularise (dropout, weight decay, data "
          "augmentation) or get more data; rule out leakage (D7) and a preprocessing mismatch between the "
          "splits (D10); L7 gives the fitting diagnosis";
      out.push_back(f);
    }
  }
  return out;
}

void revise_train_down_val_up_restored(Report& found, size_t best_epoch, double final_val_loss) {
  for (size_t i = 0; i < found.size(); ++i)
    if (found.findings()[i].fires() && found.findings()[i].is("L1", Kind::TrainDownValUp))
      found.replace(i, detail::as_best_epoch_restored(found.findings()[i], best_epoch, final_val_loss,
                                                      "the final model is the best epoch's, not the last"));
}

void revise_train_down_val_up(Report& found, double train_loss_eval, const LossCheckOptions&) {
  if (!std::isfinite(train_loss_eval)) return;
  for (size_t i = 0; i < found.findings().size(); ++i) {
    Finding f = found.findings()[i];
    if (!f.fires() || !f.is("L1", Kind::TrainDownValUp)) continue;
    const double at_best = f.value_of("training loss near the best epoch (median)");
    if (!(train_loss_eval >= at_best)) continue;
    f.severity = Severity::Info;
    f.title += "; at the trained weights the training loss (" + fmt_num(train_loss_eval) +
               ", eval mode) is no lower than near the best epoch: the training data is fitted no better";
    f.evidence.push_back({"training loss under the trained model (eval mode)", train_loss_eval,
                          ">= the training loss near the best epoch: info"});
    f.cause =
        "the last weights sit at a noisy point of their path (a constant learning rate that keeps the "
        "weights moving around the minimum): both splits' losses rose, which memorised training data does "
        "not do";
    f.fix = "none needed; keep the best epoch's weights, or let the learning rate decay at the end";
    found.replace(i, f);
  }
}

void revise_loss_stuck(Report& found, const std::function<ConstantComparison()>& compare,
                       const LossCheckOptions& opts) {
  ConstantComparison c;
  bool asked = false;
  for (size_t i = 0; i < found.findings().size(); ++i) {
    Finding f = found.findings()[i];
    if (!f.fires() || !f.is("L1", Kind::LossStuck)) continue;
    if (!asked) c = compare(), asked = true;
    const size_t n = c.model_rows.size();
    if (n < 8 || c.constant_rows.size() != n) return;
    std::vector<double> d(n);
    for (size_t k = 0; k < n; ++k) d[k] = c.constant_rows[k] - c.model_rows[k];
    const auto [mean, var] = detail::mean_and_variance(d);
    const double se = std::sqrt(var / static_cast<double>(n));
    if (!std::isfinite(mean) || !(se > 0) || !(mean > opts.stuck_beat_z * se)) return;
    const auto [model_mean, mv] = detail::mean_and_variance(c.model_rows);
    const auto [constant_mean, cv] = detail::mean_and_variance(c.constant_rows);
    f.severity = Severity::Info;
    f.title += ", but the trained model is below the best constant output's loss (" + fmt_num(model_mean) +
               " against " + fmt_num(constant_mean) + " on " + num(static_cast<int64_t>(n)) +
               " validation examples): most of the loss is a floor no model removes, not a model that does not learn";
    f.evidence.push_back({"trained model's mean loss per example (validation rows scored alone)", model_mean, ""});
    f.evidence.push_back(
        {"the best constant output's mean loss on them (one output row for every example)", constant_mean, ""});
    f.evidence.push_back(
        {"(constant - model) / its standard error", mean / se, "> " + fmt_num(opts.stuck_beat_z) + ": info"});
    f.cause =
        "the loss has a large floor of its own (the noise of heavy-tailed or zero-inflated targets, the "
        "entropy of soft targets), so what the model can take off is a small share of it; the model does "
        "better than any constant prediction";
    f.fix = "none needed; judge the run by a metric of the task, or by the loss minus its floor";
    found.replace(i, f);
  }
}

void revise_loss_stuck_by_baseline(Report& found, const Report& gate, const LossCheckOptions& opts) {
  double zeroed = std::nan("");
  for (const Finding& g : gate.findings())
    if (g.is("M15", Kind::None) && !g.fires() && g.title.rfind("the model uses its inputs", 0) == 0)
      zeroed = g.value_of("held-out loss, zeroed inputs (the lowest of the run)");
  if (!(zeroed > 0)) return;  // a loss whose floor is 0 or below: no share to judge by
  for (size_t i = 0; i < found.findings().size(); ++i) {
    Finding f = found.findings()[i];
    if (!f.fires() || !f.is("L1", Kind::LossStuck)) continue;
    const double last = f.value_of("last window median");
    if (!(last < (1 - opts.stuck_below_baseline) * zeroed)) continue;
    f.severity = Severity::Info;
    f.title += ", but below what the model reaches with its inputs zeroed (" + fmt_num(last) + " against " +
               fmt_num(zeroed) + ", M15's probe): the inputs take off what the loss can lose";
    f.evidence.push_back({"M15's lowest held-out loss with zeroed inputs", zeroed,
                          "last window below (1 - " + fmt_num(opts.stuck_below_baseline) + ") x this: info"});
    f.cause =
        "the loss has a large floor of its own (a survival model's partial likelihood, heavy-tailed targets): "
        "what the inputs can explain is a small share of it, and the model takes that share";
    f.fix = "none needed; judge the run by a metric of the task (a concordance index, a calibration)";
    found.replace(i, f);
  }
}

// ---- L1 and L7 over the run (the monitor's run check) -----------------------------------------
namespace {
// Of the rows of the logits (B, C) whose target (B) is a class in [0, C) (an ignore_index row is left
// out), how many have their largest value (the first, on ties) at the target class: read in place for
// float32 logits and int64 targets on the host.
optim::ClassHits correct_predictions(const Tensor& logits, const Tensor& target) {
  const int64_t B = logits.size(0), C = logits.size(1);
  if (logits.device().is_cpu() && target.device().is_cpu() && logits.dtype() == kFloat32 && logits.is_contiguous() &&
      target.is_contiguous() && C > 0) {
    const float* x = static_cast<const float*>(logits.raw_data());
    const int64_t* t = static_cast<const int64_t*>(target.raw_data());
    optim::ClassHits h;
    for (int64_t b = 0; b < B; ++b) {
      if (t[b] < 0 || t[b] >= C) continue;
      const float* row = x + b * C;
      int64_t best = 0;
      for (int64_t c = 1; c < C; ++c)
        if (row[c] > row[best] || (std::isnan(row[c]) && !std::isnan(row[best]))) best = c;  // NaN wins, as argmax's
      h.right += best == t[b] ? 1 : 0;
      ++h.counted;
    }
    return h;
  }
  return optim::class_hits(logits, target);
}

// L1 when nothing is wrong with the loss history: its statistics against their rules, as info.
Finding loss_history_summary(const std::vector<double>& losses, const LossCheckOptions& o) {
  const LossHistoryStats s = analyse_loss_history(losses, o);
  Finding f = make("L1", Severity::Info,
                   s.trend_judged ? "the training loss history looks healthy: it fell " +
                                        fmt_num(100.0 * s.relative_decrease) + "% in " + num(s.finite_steps) + " steps"
                                  : "the training loss history is too short to judge its trend (" +
                                        num(s.finite_steps) + " steps)");
  if (s.trend_judged)
    f.evidence = {{"relative decrease", s.relative_decrease, "< " + fmt_num(o.min_relative_decrease) + " is stuck"},
                  {"largest window median / best earlier window median", s.max_rise,
                   "> " + fmt_num(o.diverge_factor) + " is diverging"}};
  f.evidence.push_back({"median |loss[t] - loss[t-1]| / max(median loss, " + fmt_num(o.swing_floor) +
                            " x first loss) in a window",
                        s.max_swing, "> " + fmt_num(o.max_relative_swing) + " is wild"});
  f.evidence.push_back({"spikes", static_cast<double>(s.spikes), "any warns"});
  f.fix = "none needed";
  return f;
}

// The accuracy probe of a validation loss that rises (L1) or sits far above the training loss
// (L7): where the validation accuracy is known and did not fall from its best by more than
// val_accuracy_drop, the model got more confident on its mistakes, not worse at the task: info.
// L1's divergence where the validation split held to the end: info.
void confirm_divergence_by_validation(Finding& f, const std::vector<double>& val_loss,
                                      const std::vector<double>& val_accuracy, const LossCheckOptions& o) {
  if (!f.fires() || !f.is("L1", Kind::LossDiverging) || !validation_held(val_loss, val_accuracy, o)) return;
  const double best = *std::min_element(val_loss.begin(), val_loss.end());
  f.evidence.push_back({"last epoch's validation loss / the run's best", val_loss.back() / best,
                        "> " + fmt_num(1.0 + o.val_rise) + " (or the validation accuracy down) confirms"});
  f.severity = Severity::Info;
  f.title += " (the validation loss and accuracy held to the end: the training objective changes with the "
             "batch, as mixup's soft targets or augmentation make it, not the model diverging)";
  f.fix = "none needed; watch the validation curve, which the model's quality follows";
}

void confirm_by_accuracy(Finding& f, const std::vector<double>& val_accuracy, const LossCheckOptions& o) {
  if (!f.fires() || !(f.is("L1", Kind::TrainDownValUp) || fitting_says_overfit(f))) return;
  const double drop = validation_accuracy_drop(val_accuracy);
  if (!std::isfinite(drop)) return;
  f.evidence.push_back(
      {"validation accuracy: best - last epoch", drop, "> " + fmt_num(o.val_accuracy_drop) + " confirms"});
  if (drop > o.val_accuracy_drop) return;
  f.severity = Severity::Info;
  f.title += " (the validation accuracy held: not a model getting worse)";
  f.fix = "none needed; to keep the best epoch by loss as well, stop early on the validation loss";
}

// L1 on the step losses, L7 on the epochs' losses and on the training accuracy of each epoch (from
// the sampled steps' batches as the loss saw them) against the validation accuracy.
class LossHistoryRunCheck final : public RunCheck {
 public:
  explicit LossHistoryRunCheck(const LossCheckOptions& o) : o_(o) {}
  std::string ids() const override { return "L1, L7"; }
  uint32_t events() const override {
    return RunEvent::LossInput | RunEvent::Epoch | RunEvent::Finish | RunEvent::Series;
  }
  void loss_input(RunContext& c, nn::Loss& l, const Tensor& input, const Tensor& target) override {
    if (c.sampled() && l.type_name() == "MSELoss") add_targets(target);
    if (!c.sampled() || !(loss_type::cross_entropy(l) || loss_type::takes_class_indices(l, input, target))) return;
    if (input.dim() == 2 && target.dim() == 1 && target.dtype() == kInt64 && input.size(0) == target.size(0)) {
      if (c.steps != step_) commit();
      step_ = c.steps;
      // One output scored against two targets in a step (mixup's y_a and y_b): a mixed target, whose
      // accuracy no single label measures. The step is left out.
      if (input.impl_ptr().get() == step_input_) mixed_ = true;
      step_input_ = input.impl_ptr().get();
      const optim::ClassHits h = correct_predictions(input, target);
      step_correct_ += h.right;
      step_seen_ += h.counted;
    }
  }
  void epoch(RunContext&, const EpochRecord&) override {
    commit();
    accuracy_.push_back(seen_ > 0 ? static_cast<double>(correct_) / seen_ : kNaN);
    correct_ = seen_ = 0;
  }
  void finish(RunContext& c) override {
    const TrainingHistory& h = *c.history;
    std::vector<Finding> fs = diagnose_loss_history(h.step_losses, h.epoch_val_loss, o_, h.batch_replay);  // L1
    if (fs.empty()) fs.push_back(loss_history_summary(h.step_losses, o_));
    if (!h.epoch_train_loss.empty() && std::isfinite(h.epoch_val_loss.back())) {
      std::vector<Finding> fit = diagnose_fitting(h.epoch_train_loss, h.epoch_val_loss, o_, target_variance());  // L7
      if (!c.loss || !loss_type::library(*c.loss)) soften_underfitting_of_own_loss(fit);
      fs.insert(fs.end(), fit.begin(), fit.end());
    }
    for (Finding& f : fs) {
      confirm_by_accuracy(f, h.epoch_val_accuracy, o_);
      confirm_divergence_by_validation(f, h.epoch_val_loss, h.epoch_val_accuracy, o_);
    }
    c.add_all(fs);
    c.add_all(check_validation_accuracy(accuracy_, h.epoch_val_accuracy, o_));  // L7
    if (!h.epoch_val_accuracy.empty()) c.note_ran("L7");
    c.note_ran("L1");
  }
  void series(TrainingHistory& h) const override { h.epoch_train_accuracy = accuracy_; }

 private:
  // A mean squared error's targets on the sampled steps: per column (the last dim of (B, K) targets,
  // one column otherwise), so that their variance is the loss of predicting each column's mean.
  void add_targets(const Tensor& target) {
    if (!target.defined() || !target.is_floating_point() || target.numel() == 0) return;
    NoGradGuard ng;
    const int64_t k = target.dim() == 2 ? target.size(1) : 1;
    const std::vector<double> v =
        target.detach().to(kCPU).to(kFloat64).contiguous().reshape({-1, k}).to_vector<double>();
    if (target_sum_.empty())
      target_sum_.assign(static_cast<size_t>(k), 0.0), target_sq_.assign(static_cast<size_t>(k), 0.0);
    if (static_cast<int64_t>(target_sum_.size()) != k) return;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!std::isfinite(v[i])) continue;
      target_sum_[i % static_cast<size_t>(k)] += v[i];
      target_sq_[i % static_cast<size_t>(k)] += v[i] * v[i];
    }
    target_rows_ += static_cast<int64_t>(v.size()) / k;
  }
  // The mean over columns of the targets' variance (1 when no mean squared error was heard, or too few rows).
  double target_variance() const {
    if (target_rows_ < 32) return 1.0;
    double var = 0;
    const double n = static_cast<double>(target_rows_);
    for (size_t j = 0; j < target_sum_.size(); ++j) {
      const double m = target_sum_[j] / n;
      var += std::max(0.0, target_sq_[j] / n - m * m);
    }
    var /= static_cast<double>(target_sum_.size());
    return var > 0 && std::isfinite(var) ? var : 1.0;
  }
  // The step's counts join the epoch's when the next step (or the epoch's end) comes, unless mixed.
  void commit() {
    if (!mixed_) {
      correct_ += step_correct_;
      seen_ += step_seen_;
    }
    step_correct_ = step_seen_ = 0;
    mixed_ = false;
    step_input_ = nullptr;
  }
  LossCheckOptions o_;
  int64_t correct_ = 0, seen_ = 0;  // this epoch's sampled training batches
  int64_t step_ = -1, step_correct_ = 0, step_seen_ = 0;
  const void* step_input_ = nullptr;
  bool mixed_ = false;
  std::vector<double> accuracy_;
  std::vector<double> target_sum_, target_sq_;  // a mean squared error's targets, per column
  int64_t target_rows_ = 0;
};
}  // namespace

std::unique_ptr<RunCheck> make_loss_history_run_check(const MonitorOptions& o) {
  return std::make_unique<LossHistoryRunCheck>(o.loss);
}

bool loss_history_unstable(const Report& r) {
  return std::any_of(r.findings().begin(), r.findings().end(), [](const Finding& f) {
    return f.fires() && (f.is("L1", Kind::LossSpiking) || f.is("L1", Kind::LossDiverging) ||
                         f.is("L1", Kind::LossOscillating) || f.is("L1", Kind::LossNonFinite));
  });
}

// ---- L1 under an objective that changed during the run --------------------------------------------
void soften_divergence_of_changed_objective(Report& r, double before, double after) {
  for (size_t i = 0; i < r.size(); ++i) {
    const Finding& g = r.findings()[i];
    if (!g.fires() || !g.is("L1", Kind::LossDiverging)) continue;
    Finding f = detail::as_objective_change(g, before, after);
    f.title += " (the loss function itself changed during the run: its rise is the objective's)";
    r.replace(i, f);
  }
}

}  // namespace gradsleuth::debug
