// O6, the learning-rate diagnosis: the loss history at the run's learning rate, the schedule,
// the update/weight ratios around the sampled updates, the lr / 10 probe's verdict, and its run check.
#include "debug/checks/optim/optim_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/optim/weight_writes.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"
#include "optim/adam.h"
#include "optim/rmsprop.h"

namespace gradsleuth::debug {

using detail::kNaN;
using detail::make;
using detail::median;
using detail::num;

// ---- O6 learning rate -----------------------------------------------------------------------

std::vector<Finding> diagnose_learning_rate(const std::vector<double>& train_losses, const OptimCheckOptions& opts,
                                            const BatchReplay& replay) {
  const LossHistoryStats s = analyse_loss_history(train_losses, opts.loss, replay);
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
    f.cause =
        "a learning rate too high makes the loss oscillate, jump or diverge (NaN). With Adam every "
        "weight moves by about lr per step whatever its gradient: lr 0.1 throws a fresh network far off at "
        "step 1";
    f.fix =
        "lower the learning rate 3-10x (Adam: start at 1e-3); add a warm-up; clip gradients; then check that "
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
    f.cause =
        "a learning rate too low leaves the loss flat (it would take forever to move). A flat loss "
        "has other causes too: frozen or detached layers (M5, M10), dead units (M7), vanishing gradients (O1)";
    f.fix =
        "raise the learning rate 10x and compare (an lr range test); check the update/weight ratios "
        "(UpdateRatioTracker: ~1e-3 is healthy, below 1e-5 nothing moves)";
    return {f};
  }
  return {};
}
std::vector<Finding> diagnose_lr_schedule(const std::vector<double>& lrs, const OptimCheckOptions& opts) {
  std::vector<Finding> out;
  const int64_t n = static_cast<int64_t>(lrs.size());
  if (n < opts.schedule_min_steps) return out;
  // A warm-up from 0 (Hugging Face's linear schedule: lr 0 at the first step) is judged from its
  // first positive value; a learning rate at 0 (or not a number) for half the run or more is the fault.
  const int64_t at_zero = std::find_if(lrs.begin(), lrs.end(), [](double v) { return v > 0.0; }) - lrs.begin();
  const double start = at_zero < n ? lrs[static_cast<size_t>(at_zero)] : lrs.front();
  auto finding = [&](const std::string& title) {
    Finding f = make("O6", Severity::Warning, title);
    f.evidence = {{"learning rate at step 1", lrs.front(), ""},
                  {"learning rate at the last step", lrs.back(), ""},
                  {"steps", static_cast<double>(n), ""}};
    if (at_zero > 0) f.evidence.push_back({"first step with a positive learning rate", at_zero + 1.0, ""});
    return f;
  };
  if (static_cast<double>(at_zero) >= opts.schedule_collapse_by * static_cast<double>(n)) {
    Finding f = finding("the learning-rate schedule starts at " + fmt_num(lrs.front()) +
                        (at_zero == n ? ": no step changes the weights"
                                      : " and stays there for " + std::to_string(at_zero) + " of " + std::to_string(n) +
                                            " steps: they change no weight"));
    f.kind = Kind::ScheduleStartsAtZero;
    f.evidence.push_back({"steps at 0 from the start", static_cast<double>(at_zero),
                          ">= " + fmt_num(opts.schedule_collapse_by) + " of the run warns"});
    f.cause =
        "a learning rate of 0 (a warm-up that starts at 0 and was never stepped, an lr read from an empty "
        "setting)";
    f.fix = "set the optimizer's lr to a positive value and check the scheduler's first value";
    out.push_back(std::move(f));
    return out;
  }
  // Several steps at exactly 0, then the schedule's peak at once: a warm-up that jumps instead of ramping.
  if (at_zero >= opts.schedule_zero_steps && at_zero < n &&
      lrs[static_cast<size_t>(at_zero)] >= 0.9 * *std::max_element(lrs.begin(), lrs.end())) {
    Finding f = finding("the learning rate is 0 for the first " + std::to_string(at_zero) + " steps, then " +
                        fmt_num(start) + " (the schedule's peak) at once: a warm-up that jumps instead of ramping");
    f.kind = Kind::ScheduleStartsAtZero;
    f.evidence.push_back({"steps at 0 from the start", static_cast<double>(at_zero),
                          ">= " + std::to_string(opts.schedule_zero_steps) + ", then 0.9 x the peak or more, warns"});
    f.cause = "a warm-up factor computed in integers (step / warmup_steps is 0 until the warm-up ends, then 1)";
    f.fix = "compute the factor in floating point (double(step) / warmup_steps); print the first steps' rates";
    out.push_back(std::move(f));
  }
  // The steps spent below the limit: a schedule that restarts (cosine with warm restarts) dips below
  // it near each trough and climbs back; one that collapsed stays there.
  int64_t below = 0;
  for (int64_t i = at_zero; i < n; ++i) below += lrs[i] < opts.schedule_collapse * start ? 1 : 0;
  for (int64_t i = at_zero; i < n; ++i) {
    if (!(lrs[i] < opts.schedule_collapse * start)) continue;
    if (static_cast<double>(below) <= (1.0 - opts.schedule_collapse_by) * static_cast<double>(n)) break;
    Finding f =
        finding("the learning-rate schedule cuts it " + fmt_num(start / std::max(lrs[i], 1e-300)) + "x by step " +
                std::to_string(i + 1) + " of " + std::to_string(n) + ": " + std::to_string(below) +
                " steps run below " + fmt_num(opts.schedule_collapse) + " of the starting rate and barely train");
    f.kind = Kind::ScheduleCollapses;
    f.evidence.push_back({"first step below the limit", static_cast<double>(i + 1), ""});
    f.evidence.push_back({"steps below the limit", static_cast<double>(below),
                          "> " + fmt_num(1.0 - opts.schedule_collapse_by) + " of the run warns"});
    f.evidence.push_back(
        {"learning rate there / at step 1", lrs[i] / start, "< " + fmt_num(opts.schedule_collapse) + " warns"});
    f.cause =
        "a scheduler stepped every batch where its settings count epochs (StepLR's step size, "
        "CosineAnnealingLR's T_max), or a decay too strong for the run's length";
    f.fix =
        "call scheduler.step() once per epoch (or give its step size in optimizer steps), and check the "
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
    f.cause =
        "a warm-up aimed at the wrong target, a cyclic schedule whose peak is far above the base, an annealing "
        "schedule whose floor lies above the base rate (CosineAnnealingLR's eta_min given as a fraction), or a "
        "scheduler applied twice";
    f.fix = "check the scheduler's target and peak learning rate against the optimizer's";
    out.push_back(std::move(f));
    return out;
  }
  const detail::ScheduleRebound v = detail::schedule_rebound(lrs, at_zero);
  if (v.steady && v.fall >= opts.schedule_rebound && v.rise >= opts.schedule_rebound &&
      v.share >= opts.schedule_rebound_share) {
    Finding f = finding("the learning-rate schedule falls " + fmt_num(v.fall) + "x to step " +
                        std::to_string(v.trough + 1) + ", then climbs " + fmt_num(v.rise) + "x to the last step (" +
                        fmt_num(100.0 * v.share) + "% of the run) without coming down");
    f.kind = Kind::ScheduleRebounds;
    f.evidence.push_back({"start / trough", v.fall, ">= " + fmt_num(opts.schedule_rebound)});
    f.evidence.push_back({"last step / trough", v.rise, ">= " + fmt_num(opts.schedule_rebound) + " warns"});
    f.evidence.push_back({"share of the steps climbing to the end", v.share,
                          ">= " + fmt_num(opts.schedule_rebound_share) + " warns (a cycle climbs for one half)"});
    f.cause =
        "a warm-up/decay formula whose two branches are taken the wrong way round (max for min): the decay "
        "runs first, and the warm-up ramp climbs from its end for the rest of the run";
    f.fix =
        "print the rate at the first, the peak and the last steps; a warm-up then decay takes the minimum of "
        "the two branches";
    out.push_back(std::move(f));
  }
  return out;
}

std::optional<Finding> judge_schedule_reach(const ScheduleReach& r) {
  if (!r.found || !(r.peak > 0) || !(r.reached < 0.5 * r.peak) || r.stepped * 4 > r.steps) return std::nullopt;
  Finding f =
      make("O6", Severity::Warning,
           "the learning-rate scheduler was stepped " + std::to_string(r.stepped) + " times in " +
               std::to_string(r.steps) + " optimizer steps and reached a learning rate of " + fmt_num(r.reached) +
               ": its schedule peaks at " + fmt_num(r.peak) + " after " + std::to_string(r.peak_at) + " steps");
  f.kind = Kind::ScheduleUnreached;
  f.evidence = {{"scheduler.step() calls", static_cast<double>(r.stepped), "<= a quarter of the optimizer's steps"},
                {"optimizer steps", static_cast<double>(r.steps), ""},
                {"base learning rate (first group)", r.base, ""},
                {"highest learning rate the run reached", r.reached, "< half the peak warns"},
                {"the schedule's peak within the run's optimizer steps", r.peak, ""}};
  f.cause =
      "the schedule's lengths (a warm-up's steps, T_max) count optimizer steps, but scheduler.step() runs "
      "once per epoch (or never): the run never leaves the warm-up and trains at a fraction of its rate";
  f.fix = "call scheduler.step() after every optimizer.step(), or give the schedule's lengths in epochs";
  return f;
}

// ---- O6 a plateau scheduler or early stopper judging its metric the wrong way round --------------
// (metric_steps.cpp finds what each one was fed)

std::vector<Finding> diagnose_metric_direction(const std::vector<optim::MetricStepRecord>& records,
                                               const TrainingHistory& h) {
  std::vector<Finding> out;
  for (const optim::MetricStepRecord& rec : records) {
    const MetricFed fed = match_metric_steps(rec, h);
    if (fed.what.empty()) continue;
    const bool minimises = rec.mode == optim::Mode::Min, acted = !rec.acted.empty();
    const std::string act = rec.owner == "ReduceLROnPlateau" ? "cut the learning rate" : "stopped training";
    std::string title = rec.owner + " in " + (minimises ? "Mode::Min" : "Mode::Max") + " is stepped with " + fed.what +
                        ", which " + (minimises ? "rises" : "falls") + " as the model improves (" + fmt_num(fed.first) +
                        " -> " + fmt_num(fed.last) + "): it counts each improvement as a bad epoch";
    title += acted ? " and " + act + " after step " + std::to_string(rec.acted.front() + 1) +
                         (rec.acted.size() > 1 ? " (" + std::to_string(rec.acted.size()) + " times)" : "")
                   : "; it has not acted yet, and would in a longer run";
    Finding f = make("O6", acted ? Severity::Warning : Severity::Info, title);
    f.kind = Kind::MetricDirectionInverted;
    f.evidence = {
        {"steps matched with the run's epochs", static_cast<double>(fed.n), ">= " + std::to_string(kMinMetricSteps)}};
    if (fed.by_trend)
      f.evidence.push_back({"Spearman correlation with the validation loss", fed.r,
                            "the metric rose (>= " + fmt_num(kMetricTrend) + " with the epoch) as the loss fell"});
    else
      f.evidence.insert(f.evidence.end(),
                        {{"mean |metric - " + fed.what + "|", fed.gap,
                          minimises ? "<= " + fmt_num(kAccuracyGap) + " (x 100 in %) follows it"
                                    : "<= " + fmt_num(kLossGap) + " x the loss follows it"},
                         {"Pearson correlation with it", fed.r, ">= " + fmt_num(kFollowCorrelation)}});
    f.evidence.push_back({"times it " + act, static_cast<double>(rec.acted.size()), "> 0 warns"});
    f.cause = rec.owner + " is told a " + (minimises ? "smaller" : "larger") +
              " metric is better and is fed one that " + (minimises ? "grows" : "shrinks") +
              " as training succeeds: it " + act + " because the model improved";
    const std::string mode = minimises ? "Mode::Max" : "Mode::Min";
    f.fix = (rec.owner == "ReduceLROnPlateau" ? "construct it with ReduceLROnPlateauOptions().mode(" + mode + ")"
                                              : "construct EarlyStopping(patience, min_delta, " + mode + ")") +
            (minimises ? " for an accuracy or a score, or step it with the validation loss" : " for a loss");
    out.push_back(std::move(f));
  }
  return out;
}

// ---- O6 update/weight ratios: the verdict (update_ratio.cpp measures them) -------------------

using detail::moving_ratios;
using detail::skipped_at_times;

std::vector<Finding> UpdateRatioTracker::findings() const {
  std::vector<Finding> out;
  // Each judged weight's median ratio, for the comparison with the others of its group.
  std::vector<double> medians(params_.size(), kNaN);
  for (size_t i = 0; i < params_.size(); ++i)
    if (judged(params_[i])) medians[i] = median_ratio(params_[i]);
  for (size_t qi = 0; qi < params_.size(); ++qi) {
    const Param& q = params_[qi];
    if (!judged(q)) continue;
    const double med = medians[qi];
    double hi = q.ratios.front().second;
    for (const auto& [step, v] : q.ratios) hi = std::max(hi, v);
    const bool never = hi == 0.0;
    const bool small = med<o_.min_update_ratio, large = med> o_.max_update_ratio;
    if (!(small || large) || std::isnan(med)) continue;
    const double lr = q.lrs.empty() ? kNaN : q.lrs.back();
    // Its group's rate was 0 at every measurement while another group trained: frozen by its rate (O8 says so).
    const bool held = never && some_group_trains_ && !q.lrs.empty() &&
                      std::all_of(q.lrs.begin(), q.lrs.end(), [](double v) { return v == 0.0; });
    Finding f =
        make("O6", held ? Severity::Info : Severity::Warning,
             held    ? q.name + " never changed: its group's learning rate is 0 while the others train"
             : never ? q.name + " never changed in " + num(static_cast<int64_t>(q.ratios.size())) + " measured steps"
             : small ? "updates of " + q.name + " are too small: median ||dw|| / ||w|| = " + fmt_num(med)
                     : "updates of " + q.name + " are too large: median ||dw|| / ||w|| = " + fmt_num(med));
    f.kind = never ? Kind::NeverUpdated : small ? Kind::UpdatesTooSmall : Kind::UpdatesTooLarge;
    f.parameter = q.name;
    f.shape = q.shape;
    f.evidence = {{"median update/weight ratio", med,
                   "outside [" + fmt_num(o_.min_update_ratio) + ", " + fmt_num(o_.max_update_ratio) + "] warns"},
                  {"largest ratio", hi, ""},
                  {"measured steps", static_cast<double>(q.ratios.size()), ""}};
    if (std::isfinite(lr)) f.evidence.push_back({"learning rate (its group, last measured)", lr, ""});
    if (never) {
      f.cause = q.group < 0 ? "the parameter is trainable but not in the optimizer's parameter groups (M10)"
                            : "the optimizer holds it but its gradient is always missing or zero (M5), or its "
                              "group's learning rate is 0";
      f.fix = "pass model.parameters() to the optimizer after the model is complete; check gradient flow (M5)";
    } else if (const std::vector<double> moving = moving_ratios(q.ratios);
               small && skipped_at_times(moving, q.ratios.size(), o_.min_update_ratio)) {
      // Exactly still on some measured steps and moving well on the others: a layer the forward skips on
      // some steps (stochastic depth), whose median is a count of skips, not a size of updates.
      f.severity = Severity::Info;
      f.title += ", but it moved on " + num(static_cast<int64_t>(moving.size())) + " of " +
                 num(static_cast<int64_t>(q.ratios.size())) + " measured steps, by a median of " +
                 fmt_num(median(moving)) + " there: a layer the forward skips on some steps";
      f.evidence.push_back({"measured steps it moved on", static_cast<double>(moving.size()),
                            ">= 20% and <= 80% of them, each other step exactly still"});
      f.evidence.push_back({"median ratio on the steps it moved", median(moving),
                            ">= " + fmt_num(o_.min_update_ratio) + ": its updates are not too small (info)"});
      f.cause =
          "the layer got no gradient on the steps it was skipped (stochastic depth drops a block at random, a "
          "branch taken on some batches only), and the optimizer leaves a weight without a gradient as it is";
      f.fix = "none needed";
    } else if (small) {
      // The other weights of its group, at the same learning rate, move at a healthy ratio: the rate is not
      // what holds this one back; its gradient is (for Adam, a gradient below eps moves a weight by less
      // than lr).
      std::vector<double> others;
      for (size_t j = 0; j < params_.size(); ++j)
        if (j != qi && params_[j].group == q.group && std::isfinite(medians[j])) others.push_back(medians[j]);
      const double others_median = others.size() >= 2 ? median(others) : kNaN;
      if (others_median >= o_.healthy_group_ratio) {
        f.kind = Kind::LayerUpdatesTooSmall;
        f.title += ", while the other weights of its group move at " + fmt_num(others_median);
        f.evidence.push_back({"median ratio of the other weights of its group", others_median,
                              ">= " + fmt_num(o_.healthy_group_ratio) + ": the rate is not the cause"});
        f.cause =
            "this weight's gradient is far smaller than the others' at the same learning rate: a saturated "
            "softmax, sigmoid or tanh in front of it, a scale factor that shrinks its gradient (attention scores "
            "multiplied by sqrt(d) where they are divided), or units that seldom fire";
        f.fix =
            "find what shrinks this layer's gradient (print its gradient norm beside the others'); raising the "
            "learning rate would move the healthy weights too far";
      } else {
        f.cause =
            "a learning rate too low; each step changes the weights by less than 1e-5 of their size, "
            "so training barely moves (a healthy step is ~1e-3)";
        f.fix = "raise the learning rate (10x at a time) until the ratio is ~1e-3";
      }
    } else {
      f.cause =
          "a learning rate too high; each step changes the weights by more than a tenth of their "
          "size, so they jump around instead of descending (a healthy step is ~1e-3)";
      f.fix = "lower the learning rate until the ratio is ~1e-3; add a warm-up";
    }
    out.push_back(f);
  }
  return out;
}

// ---- O6's lr / 10 probe: its verdict ------------------------------------------------------------
using detail::relative_fall;

// The run's first losses against the same run's at a tenth of the learning rate (from the same
// initial weights), judged by the rules of diagnose_learning_rate: calm at lr / 10 (no finding of
// a learning rate too high, every loss finite) and falling at least half as far confirms it, where the
// run's own losses over the same steps misbehaved; calm but falling less, or a run calm over those
// steps too, is inconclusive; misbehaving the same way rules it out.
Finding judge_lr_probe(const std::vector<double>& run_losses, const std::vector<double>& probe_losses, double lr,
                       const std::string& failed, const OptimCheckOptions& o) {
  Finding f;
  f.check = "O6";
  f.step = -1;
  f.end_of_run = true;
  if (!failed.empty()) {
    f.severity = Severity::Info;
    f.title = "probe (lr / 10) could not run: " + failed;
    return f;
  }
  auto unstable = [&](const std::vector<double>& ls) {
    const std::vector<Finding> fs = diagnose_learning_rate(ls, o);
    return std::any_of(fs.begin(), fs.end(), [](const Finding& g) {
      return g.fires() && g.check == "O6" && (g.kind == Kind::LrTooHigh || g.kind == Kind::UpdatesTooLarge);
    });
  };
  const bool calm = !unstable(probe_losses) &&
                    std::all_of(probe_losses.begin(), probe_losses.end(), [](double v) { return std::isfinite(v); });
  const double probe_fell = relative_fall(probe_losses), run_fell = relative_fall(run_losses);
  f.evidence = {{"steps compared", static_cast<double>(probe_losses.size()), ""},
                {"relative decrease at lr / 10", probe_fell, ""},
                {"relative decrease at the run's lr", run_fell, ""},
                {"learning rate of the run", lr, ""}};
  if (calm && !unstable(run_losses)) {
    // The run's own steps in the window were calm too: what misbehaved came after them.
    f.severity = Severity::Info;
    f.kind = Kind::LrProbeInconclusive;
    f.title = "probe (lr / 10): inconclusive: the run's own first " + std::to_string(run_losses.size()) +
              " steps, the ones compared, were calm at its learning rate as well";
    f.cause = "neither confirms nor rules out the learning rate";
  } else if (calm && !(probe_fell >= 0.5 * run_fell)) {
    f.severity = Severity::Info;
    f.kind = Kind::LrProbeInconclusive;
    f.title = "probe (lr / 10): inconclusive: at a tenth of the learning rate the loss is calm but falls less (" +
              fmt_num(100 * probe_fell) + "% against " + fmt_num(100 * run_fell) + "%)";
    f.cause = "neither confirms nor rules out the learning rate";
  } else if (calm) {
    f.severity = Severity::Warning;
    f.kind = Kind::LrProbeConfirms;
    f.title =
        "probe (lr / 10): the same run at a tenth of the learning rate trains without spikes or divergence; "
        "the learning rate is too high";
    f.cause =
        "the run misbehaved at its learning rate and not at a tenth of it, everything else equal, and the loss "
        "fell at least half as far";
    f.fix = "lower the learning rate (try lr / 10), or warm it up; then run the checks again";
  } else {
    f.severity = Severity::Info;
    f.kind = Kind::LrProbeRulesOut;
    f.title =
        "probe (lr / 10): the same run at a tenth of the learning rate misbehaves the same way; the learning "
        "rate is not the cause";
    f.cause = "the loss spikes or diverges at lr / 10 too: look for a fault in the data or the model";
  }
  return f;
}

Finding judge_dead_units_lr_probe(const DeadUnitsProbe& p) {
  Finding f;
  f.check = "O6";
  f.step = -1;
  f.end_of_run = true;
  f.module = p.module;
  if (!p.failed.empty() || !std::isfinite(p.probe_dead)) {
    f.severity = Severity::Info;
    f.title = "probe (lr / 10) of the dead units of " + p.module + " could not run: " +
              (p.failed.empty() ? "the layer saw no input" : p.failed);
    return f;
  }
  const double probe_fell = relative_fall(p.probe_losses), run_fell = relative_fall(p.run_losses);
  f.evidence = {{"dead fraction at the run's learning rate", p.run_dead, ""},
                {"dead fraction at lr / 10", p.probe_dead, "< " + fmt_num(p.dead_threshold) + " confirms"},
                {"steps repeated", static_cast<double>(p.probe_losses.size()), ""},
                {"relative decrease at lr / 10", probe_fell, ">= half the run's"},
                {"relative decrease at the run's lr", run_fell, ""},
                {"peak learning rate of the run", p.lr, ""}};
  const std::string share = fmt_num(100 * p.probe_dead) + "% against " + fmt_num(100 * p.run_dead) + "%";
  if (p.probe_dead >= p.dead_threshold) {
    f.severity = Severity::Info;
    f.kind = Kind::LrProbeRulesOut;
    f.title = "probe (lr / 10): the units of " + p.module + " die at a tenth of the learning rate too (" + share +
              "); the learning rate is not what kills them";
    f.cause = "look at the inputs' scale, the initialisation and gradient spikes";
  } else if (!(probe_fell >= 0.5 * run_fell)) {
    f.severity = Severity::Info;
    f.kind = Kind::LrProbeInconclusive;
    f.title = "probe (lr / 10): inconclusive: the units of " + p.module + " stay alive at a tenth of the learning rate (" +
              share + "), but the loss falls less there (" + fmt_num(100 * probe_fell) + "% against " +
              fmt_num(100 * run_fell) + "%)";
    f.cause = "neither confirms nor rules out the learning rate: units that barely moved cannot die";
  } else {
    f.severity = Severity::Warning;
    f.kind = Kind::LrProbeConfirms;
    f.title = "probe (lr / 10): the same run at a tenth of the learning rate keeps the units of " + p.module +
              " alive (" + share + " dead) and trains as well; the learning rate is too high";
    f.cause =
        "large updates pushed the units' pre-activations below zero for every input; at a tenth of the rate, "
        "everything else equal, they survive";
    f.fix = "lower the learning rate (try lr / 10), or warm it up; then run the checks again";
  }
  return f;
}

bool probe_inconclusive(const Finding& verdict) { return verdict.is("O6", Kind::LrProbeInconclusive); }

bool rate_needed(const Report& rep, const Finding& verdict) {
  const double probe_fell = verdict.value_of("relative decrease at lr / 10"),
               run_fell = verdict.value_of("relative decrease at the run's lr");
  return verdict.is("O6", Kind::LrProbeInconclusive) && run_fell > 0.0 && probe_fell < 0.1 * run_fell &&
         std::none_of(rep.findings().begin(), rep.findings().end(), [](const Finding& g) {
           return g.fires() && (g.is("O6", Kind::LrTooHigh) || g.is("O6", Kind::UpdatesTooLarge));
         });
}

void rule_out_lr_too_high(Report& rep, const Finding& verdict) {
  // The O6 findings the probe disproves no longer say "learning rate too high".
  if (!verdict.is("O6", Kind::LrProbeRulesOut)) return;
  Report kept;
  for (Finding g : rep.findings()) {
    if (g.fires() && g.is("O6", Kind::LrTooHigh)) {
      g.severity = Severity::Info;
      g.kind = Kind::LrRuledOut;
      g.title = "(ruled out by the lr / 10 probe) " + g.title;
    }
    kept.add(g);
  }
  for (const std::string& c : rep.ran_checks()) kept.note_ran(c);
  rep = kept;
}

// ---- O6 the loop's writes to the weights ------------------------------------------------------

std::vector<Finding> judge_weight_writes(const WeightWriteTracker::Summary& s, const OptimCheckOptions& o) {
  if (s.written_steps == 0) return {};
  Finding f = make("O6", Severity::Info,
                   "the training loop wrote the weights between optimizer steps in " + num(s.written_steps) + " of " +
                       num(s.steps) + " steps");
  f.parameter = s.most_written;
  f.evidence = {{"gaps between steps with a write", static_cast<double>(s.written_steps), ""},
                {"optimizer steps", static_cast<double>(s.steps), ""},
                {"writes measured", static_cast<double>(s.measured_writes), "2 or more are judged"}};
  const bool judged = s.written_steps >= o.writes_min_steps && s.measured_writes >= 2 && std::isfinite(s.undone);
  if (std::isfinite(s.undone)) {
    f.evidence.push_back({"share of the optimizer's movement the writes took back", s.undone,
                          ">= " + fmt_num(o.writes_undone) + " warns; >= " + fmt_num(o.writes_replaced_undone) +
                              " with writes " + fmt_num(o.writes_replaced) + "x the movement"});
    if (std::isfinite(s.cosine))
      f.evidence.push_back({"cosine of the writes and the optimizer's movement", s.cosine,
                            ">= " + fmt_num(o.writes_along) + " (along it) with the next"});
    f.evidence.push_back({"|writes| / |the optimizer's movement|", s.write_ratio,
                          ">= " + fmt_num(o.writes_added) + " with that cosine warns: a second update"});
  }
  f.cause =
      "code of the loop writes the weights outside the optimizer (a max-norm constraint, Lookahead, an average "
      "copied back, weight noise); by what they take back, the writes work with the optimizer";
  f.fix = "none needed if the writes are meant";
  const bool replaced = s.write_ratio >= o.writes_replaced && s.undone >= o.writes_replaced_undone;
  auto warn = [&f](Kind k, std::string title, std::string cause, std::string fix) {
    f.severity = Severity::Warning;
    f.kind = k;
    f.title = std::move(title);
    f.cause = std::move(cause);
    f.fix = std::move(fix);
  };
  const std::string when = " between optimizer steps (" + num(s.written_steps) + " of " + num(s.steps) + " steps)";
  if (judged && (s.undone >= o.writes_undone || replaced))
    warn(Kind::WeightsRewritten,
         "the training loop rewrites the weights" + when + " and takes back " + detail::pct(s.undone) +
             " of what the optimizer moved them: its steps do not accumulate",
         "code between the steps writes the weights: a constraint whose limit sits far below the weights' norms, a "
         "reset to earlier weights (Lookahead whose slow weights never move, a re-initialisation inside the loop), "
         "or a copy from another model",
         "find the write (p.copy_, p.mul_, reset_parameters between steps): a max-norm limit near the weights' "
         "norms, slow weights updated at each Lookahead sync, initialisation once before the loop");
  else if (judged && s.cosine >= o.writes_along && s.write_ratio >= o.writes_added)
    warn(Kind::WeightsUpdatedTwice,
         "the training loop moves the weights" + when + " in the optimizer's own direction, by " +
             fmt_num(s.write_ratio) + "x its movement: a second update outside it",
         "a hand-written update (p -= lr * p.grad) beside optimizer.step(), or a second optimizer over the same "
         "parameters: the effective learning rate is higher than the one set",
         "update each parameter once per step: remove the hand-written update, or the parameter from one "
         "optimizer");
  return {f};
}

// ---- O6 weights that changed while the optimizer never stepped ----------------------------------

std::vector<Finding> judge_updates_without_steps(int64_t optimizer_steps, int64_t training_losses,
                                                 double relative_change, const OptimCheckOptions& o) {
  if (optimizer_steps > 0 || training_losses < o.unwatched_min_losses || !(relative_change > o.unwatched_change))
    return {};
  Finding f = make("O6", Severity::Warning,
                   "the weights moved by " + detail::pct(relative_change) + " over " + num(training_losses) +
                       " training losses, but the optimizer given to the Session never stepped: another one "
                       "updates the model");
  f.kind = Kind::UpdatedOutsideOptimizer;
  f.evidence = {
      {"optimizer steps of the Session's optimizer", static_cast<double>(optimizer_steps), "0 and"},
      {"training losses seen", static_cast<double>(training_losses), ">= " + num(o.unwatched_min_losses) + " and"},
      {"|weights at the end - at the start| / |at the start|", relative_change,
       "> " + fmt_num(o.unwatched_change) + " warns"}};
  f.cause =
      "an optimizer other than the one the Session watches: one built inside the loop (a new one each step "
      "starts its momentum and Adam's moments from zero at every step, so SGD with momentum runs as plain "
      "SGD and Adam's steps are lr x sign(gradient)), or a second model's optimizer over these parameters";
  f.fix = "build the optimizer once, before the loop, and pass that one to the Session";
  return {f};
}

// ---- O6 the adaptive optimizer's eps after the run --------------------------------------------

std::vector<Finding> check_adaptive_epsilon(const optim::Optimizer& opt, const nn::Module& model, bool learned_slowly,
                                            const OptimCheckOptions& o) {
  // The second moment's key in the state, its bias correction's beta (0: none) and eps.
  std::string key;
  double beta2 = 0, eps = 0;
  bool centered = false;
  if (const auto* adam = dynamic_cast<const optim::Adam*>(&opt)) {
    key = adam->options().amsgrad() ? "max_exp_avg_sq" : "exp_avg_sq";
    beta2 = adam->options().betas().second;
    eps = adam->options().eps();
  } else if (const auto* rms = dynamic_cast<const optim::RMSprop*>(&opt)) {
    key = "square_avg";
    eps = rms->options().eps();
    centered = rms->options().centered();
  } else {
    return {};
  }
  if (!(eps > 0)) return {};
  std::map<const TensorImpl*, std::string> names;
  for (const auto& [name, p] : model.named_parameters()) names.emplace(p.impl_ptr().get(), name);
  const auto state = opt.state_dict();
  const auto& groups = opt.param_groups();
  // State entries are "g.i.key"; the step count of each parameter for the bias correction.
  auto entry = [&](size_t g, size_t i, const std::string& k) {
    const auto it = state.find(std::to_string(g) + "." + std::to_string(i) + "." + k);
    return it == state.end() ? Tensor() : it->second;
  };
  int64_t total = 0;
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i = 0; i < groups[g].params.size(); ++i)
      if (const Tensor v = entry(g, i, key); v.defined()) total += v.numel();
  if (total == 0) return {};
  const int64_t stride = std::max<int64_t>(1, (total + o.eps_sample - 1) / std::max<int64_t>(1, o.eps_sample));
  std::vector<double> shrink, root;
  std::string worst;
  double worst_shrink = 2, lr = kNaN;
  int64_t seen = 0;
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      const Tensor v = entry(g, i, key);
      if (!v.defined()) continue;
      double correction = 1;
      if (beta2 > 0) {
        const Tensor step = entry(g, i, "step");
        const double t = step.defined() ? static_cast<double>(step.to(kInt64).item<int64_t>()) : 1.0;
        correction = 1 - std::pow(beta2, t);
      }
      std::vector<double> vs = v.to(kCPU).to(kFloat64).contiguous().reshape({-1}).to_vector<double>();
      if (centered) {
        const Tensor a = entry(g, i, "grad_avg");
        if (a.defined()) {
          const std::vector<double> as = a.to(kCPU).to(kFloat64).contiguous().reshape({-1}).to_vector<double>();
          for (size_t k = 0; k < vs.size() && k < as.size(); ++k) vs[k] = std::max(0.0, vs[k] - as[k] * as[k]);
        }
      }
      const size_t from = shrink.size();  // this parameter's factors start here
      for (size_t k = 0; k < vs.size(); ++k, ++seen) {
        if (seen % stride != 0 || !(vs[k] > 0) || !std::isfinite(vs[k])) continue;
        const double r = std::sqrt(vs[k] / correction);
        root.push_back(r);
        shrink.push_back(r / (r + eps));
      }
      if (shrink.size() == from) continue;
      if (!std::isfinite(lr)) lr = groups[g].lr;
      const double m = median(std::vector<double>(shrink.begin() + static_cast<std::ptrdiff_t>(from), shrink.end()));
      if (m < worst_shrink) {
        worst_shrink = m;
        const auto it = names.find(groups[g].params[i].impl_ptr().get());
        worst = it != names.end()
                    ? it->second
                    : "group " + num(static_cast<int64_t>(g)) + " parameter " + num(static_cast<int64_t>(i));
      }
    }
  if (shrink.empty()) return {};
  const double factor = median(shrink), rms = median(root);
  if (!(factor < o.eps_shrink)) return {};
  Finding f = make("O6", learned_slowly ? Severity::Warning : Severity::Info,
                   opt.name() + "'s eps " + fmt_num(eps) + " is " + fmt_num(eps / rms) +
                       "x the typical sqrt of its second moment (" + fmt_num(rms) +
                       "): eps, not the gradients' "
                       "scale, sets the step, " +
                       fmt_num(factor) + "x the step " + opt.name() + " would take" +
                       (learned_slowly ? ", and the run learned too slowly" : " (the run learned: info)"));
  f.kind = Kind::EpsDominates;
  f.parameter = worst;
  f.evidence = {{"eps", eps, ""},
                {"median sqrt(v) of the weights with a gradient (bias-corrected)", rms, ""},
                {"median step factor sqrt(v) / (sqrt(v) + eps)", factor, "< " + fmt_num(o.eps_shrink)},
                {"the effective learning rate lr / eps (SGD with momentum)", lr / eps, ""},
                {"the run learned too slowly (the loss still falling at its end, or the rate too low)",
                 learned_slowly ? 1.0 : 0.0, "1: warns; 0: info"}};
  f.cause = "an eps far above the gradients' scale: " + opt.name() +
            " divides each step by sqrt(v) + eps, so eps sets the step and the per-weight scaling is lost; "
            "the effective learning rate is lr / eps (a typo for 1e-8, or a value meant for another "
            "loss scale)";
  f.fix =
      "set eps back to its default 1e-8 (or well below the gradients' scale); or, if eps this large is "
      "meant, raise the learning rate to match";
  return {f};
}

// ---- O6 at the end of a run (lr_run_check.cpp gathers what it reads) --------------------------------
void judge_learning_rate_run(RunContext& c, const OptimCheckOptions& o, const UpdateRatioTracker& ratios,
                             uint64_t metric_tick) {
  if (std::optional<Finding> f = judge_schedule_reach(measure_schedule_reach(c.optimizer, c.steps))) c.add_all({*f});
  const TrainingHistory& h = *c.history;
  std::vector<Finding> by_loss = diagnose_learning_rate(h.step_losses, o, h.batch_replay);  // the loss history
  // A loss that only diverged (no spike, NaN or wild swing) while the validation split held to the end
  // is not a rate too high for the model: the training objective changes with the batch (mixup).
  const LossHistoryStats st = analyse_loss_history(h.step_losses, o.loss, h.batch_replay);
  const bool only_diverged =
      st.diverging && !st.spiking && !st.oscillating && st.first_nan_step < 0 && st.first_inf_step < 0;
  if (only_diverged && validation_held(c.history->epoch_val_loss, c.history->epoch_val_accuracy, o.loss))
    for (Finding& f : by_loss)
      if (f.fires() && f.kind == Kind::LrTooHigh) {
        f.severity = Severity::Info;
        f.title +=
            ", but the validation loss and accuracy held to the end: the training objective changes "
            "with the batch (mixup, augmentation), not a rate too high";
        f.fix = "none needed";
      }
  // A flat loss whose weights move by a healthy share per step: the rate moves them.
  const double moving = ratios.median_weight_ratio();
  if (moving >= o.moving_update_ratio)
    for (Finding& f : by_loss)
      if (f.fires() && f.kind == Kind::LrTooLow) {
        f.severity = Severity::Info;
        f.title += ", but the weights move by " + fmt_num(moving) +
                   " of their norm per step (median): the steps are not too small";
        f.evidence.push_back({"median update/weight ratio of the weight matrices", moving,
                              ">= " + fmt_num(o.moving_update_ratio) + ": the rate moves them (info)"});
        f.cause =
            "the weights move at a healthy rate and the loss still stays: the labels may not follow the inputs "
            "(M15: shuffled apart, the input dropped), or the model or the loss cannot express the task";
        f.fix = "see M15 and D4 for the inputs and labels; overfit one batch (M14)";
      }
  c.add_all(by_loss);
  std::vector<Finding> schedule = diagnose_lr_schedule(c.history->learning_rates, o);  // the schedule
  const bool misbehaved = std::any_of(by_loss.begin(), by_loss.end(),
                                      [](const Finding& f) { return f.fires() && f.kind == Kind::LrTooHigh; });
  // A warm-up reaches its peak early and a cyclic schedule comes back down from it; a rate that climbs
  // to the run's last steps and stays there is neither (CosineAnnealingLR's eta_min above the base rate).
  const std::vector<double>& lrs = c.history->learning_rates;
  const auto peak = std::max_element(lrs.begin(), lrs.end());
  const bool shaped =
      !lrs.empty() && (peak - lrs.begin() <= static_cast<std::ptrdiff_t>(lrs.size() / 2) || lrs.back() <= 0.5 * *peak);
  for (Finding& f : schedule)
    if (f.is("O6", Kind::ScheduleGrows) && !misbehaved && shaped) {
      // A warm-up or a one-cycle schedule raises the lr on purpose: it is a mistake only when
      // the loss misbehaves at the raised rate.
      f.severity = Severity::Info;
      f.title +=
          ", and the loss stayed calm (no spike, divergence or wild swings): a warm-up or cyclic "
          "schedule as designed";
      f.fix = "none needed";
    }
  c.add_all(schedule);
  std::vector<optim::MetricStepRecord> records;  // the plateau schedulers and early stoppers of this run
  for (optim::MetricStepRecord& r : optim::metric_step_records())
    if (r.first_tick >= metric_tick) records.push_back(std::move(r));
  c.add_all(diagnose_metric_direction(records, *c.history));
  c.add_all(ratios.findings());  // the update ratios
  c.note_ran("O6");
}

void revise_small_updates(Report& found, bool started_trained, const std::vector<double>& epoch_val_loss) {
  const std::vector<double> val = detail::finite_only(epoch_val_loss);
  if (!started_trained || val.size() < 2 || !(val.back() <= val.front())) return;
  for (size_t i = 0; i < found.size(); ++i) {
    const Finding& g = found.findings()[i];
    if (!g.fires() || !g.is("O6", Kind::UpdatesTooSmall)) continue;
    Finding f = g;
    f.severity = Severity::Info;
    f.title += " (a trained model tuned at a small rate: its validation loss went from " + fmt_num(val.front()) +
               " to " + fmt_num(val.back()) + ")";
    f.evidence.push_back({"validation loss, last epoch / first", val.back() / val.front(),
                          "<= 1 after a trained start: fine-tuning (info)"});
    f.cause =
        "the model started trained (L4) and the run refines it: small steps are the point of fine-tuning, and "
        "the validation loss did not get worse";
    f.fix = "none needed";
    found.replace(i, f);
  }
}

// ---- O6 under an objective that changed during the run --------------------------------------------
void soften_rise_of_changed_objective(Report& r, double before, double after) {
  for (size_t i = 0; i < r.size(); ++i) {
    const Finding& g = r.findings()[i];
    // The divergence alone: no spike above the first loss, no step-to-step swing.
    if (!g.fires() || !g.is("O6", Kind::LrTooHigh) || !(g.value_of("smoothed rise above the best") > 0) ||
        g.value_of("spikes above the first loss") > 0 || !(g.value_of("step-to-step swing / level") <= 1.0))
      continue;
    Finding f = detail::as_objective_change(g, before, after);
    f.title += " (the loss function itself changed during the run: its rise is the objective's)";
    r.replace(i, f);
  }
}

}  // namespace gradsleuth::debug
