// The learning-rate probes of a Session (see diagnose.h): the run again from its initial weights at a
// tenth of its learning rate, its schedule replayed, to confirm or rule out "the learning rate is too
// high" (O6, O8) and "ReLU units died of the rate" (M7); the verdicts are O6's
// (checks/optim/learning_rate.cpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "debug/checks/loss/loss_checks.h"
#include "debug/checks/optim/optim_checks.h"
#include "debug/diagnosis/diagnosis.h"
#include "debug/run/diagnose.h"
#include "debug/run/diagnose_util.h"
#include "debug/run/monitor.h"
#include "debug/run/split_score.h"

namespace gradsleuth::debug {

using namespace run_detail;

namespace {
// A run calm at its rate: the probe inconclusive with a tenth of the rate training no better (its loss
// fell at most kCalmProbeMargin x as far), and nothing in the whole report of what a rate too high brings
// about: a spike, divergence, oscillation or jump of the loss, exploding gradients, ReLU units that died
// in training, a non-finite value, or any finding but O8's own range that suspects the rate.
bool calm_at_rate(const Report& r, const Finding& verdict, const Cause& too_high) {
  if (!probe_inconclusive(verdict)) return false;
  const double probe_fell = verdict.value_of("relative decrease at lr / 10"),
               run_fell = verdict.value_of("relative decrease at the run's lr");
  if (!(run_fell > 0.0) || !(probe_fell <= kCalmProbeMargin * run_fell)) return false;
  std::vector<const Symptom*> symptoms;
  for (const Symptom& s : diagnosis_symptoms())
    if (s.id == "unstable-loss" || s.id == "dead-in-training" || s.id == "exploding-gradients") symptoms.push_back(&s);
  return std::none_of(r.findings().begin(), r.findings().end(), [&](const Finding& g) {
    if (!g.fires()) return false;
    if (g.nonfinite || (g.check != "O8" && too_high.confirms(g))) return true;
    return std::any_of(symptoms.begin(), symptoms.end(), [&](const Symptom* s) { return s->shows(g); });
  });
}
}  // namespace

// L1's, O6's and W3's rises against the objective: the loss on the gate's output and targets again.
void Session::check_objective_drift(RunReport& r) {
  if (!std::isfinite(objective_before_) || !objective_out_.defined()) return;
  double after = kNaN;
  try {
    NoGradGuard ng;
    after = loss_(objective_out_, objective_y_).item<double>();
  } catch (const std::exception&) {
    return;
  }
  if (!std::isfinite(after) ||
      std::fabs(after - objective_before_) <= 1e-6 * std::max(std::fabs(objective_before_), 1e-12))
    return;
  for (Report* rep : phase_reports(r)) {
    soften_rise_of_changed_objective(*rep, objective_before_, after);
    soften_divergence_of_changed_objective(*rep, objective_before_, after);
    soften_validation_rose_of_changed_objective(*rep, objective_before_, after);
  }
}

std::vector<double> Session::replayed_rates(const RunReport& r, double scale, std::vector<double>& schedule) const {
  schedule = r.history.learning_rates;
  const bool replay = !schedule.empty() && !initial_lrs_.empty() && initial_lrs_[lr_group_] > 0;
  if (!replay) schedule.clear();
  std::vector<double> lrs;
  for (double lr : initial_lrs_) lrs.push_back((replay ? lr / initial_lrs_[lr_group_] : lr) * scale);
  return lrs;
}

// The first group's highest rate over the run (its initial one without a record).
double Session::peak_lr(const RunReport& r) const {
  const std::vector<double>& lrs = r.history.learning_rates;
  if (!lrs.empty()) return *std::max_element(lrs.begin(), lrs.end());
  return initial_lrs_.empty() ? kNaN : initial_lrs_[lr_group_];
}

// The learning-rate probe (DiagnoseOptions::lr_probe_steps): the same run at a tenth of the
// learning rate, from the initial weights, to confirm or rule out "the learning rate is too high".
void Session::lr_probe(RunReport& r) {
  // The diagnosis's own test of "a learning rate too high" (O6 from the run, O8 from its value).
  const Cause& too_high = *find_cause("lr-too-high");
  const bool suspected = std::any_of(r.findings.findings().begin(), r.findings.findings().end(),
                                     [&](const Finding& f) { return too_high.confirms(f); });
  if (!have_initial_ || !stopped_.empty() || r.steps < 2) return;
  if (!suspected) {
    dead_units_lr_probe(r);
    return;
  }
  const std::vector<Tensor> params = model_.parameters(), buffers = model_.buffers();
  if (params.size() != initial_params_.size() || buffers.size() != initial_buffers_.size()) return;
  say("learning-rate probe");
  // The steps compared reach past the step the run misbehaved at (a divergence late in the run), up to
  // lr_probe_max_steps.
  int64_t at = 0;
  for (const Finding& f : r.findings.findings())
    if (too_high.confirms(f) && f.step > at) at = f.step;
  const int64_t steps =
      std::min<int64_t>(r.steps, std::max(o_.lr_probe_steps, std::min(o_.lr_probe_max_steps, at + at / 10 + 1)));
  std::vector<double> schedule;
  const std::vector<double> tenth = replayed_rates(r, 0.1, schedule);
  std::string failed;
  const std::vector<double> losses = rerun_from_start(tenth, steps, failed, true, nullptr, schedule);

  // The verdict and what it rules out are O6's (checks/optim/learning_rate.cpp).
  const std::vector<double> first(
      r.history.step_losses.begin(),
      r.history.step_losses.begin() + std::min<size_t>(r.history.step_losses.size(), steps));
  const Finding f = judge_lr_probe(first, losses, peak_lr(r), failed, o_.monitor.optim);
  const bool needed = rate_needed(r.findings, f);
  for (Report* rep : phase_reports(r)) {
    if (needed) soften_range_for_needed_rate(*rep, f);
    rule_out_lr_too_high(*rep, f);
  }
  // Judged on the whole report (a high rate's symptoms may be in any phase), then revised in each.
  // A calm run: O8's warning stays where the whole run again at a tenth of the rate ends better on
  // validation, and is info otherwise (or where that cannot be measured).
  if (!needed && calm_at_rate(r.findings, f, too_high)) {
    RateOutcome m;
    const bool measured = rate_outcome(r, m);
    for (Report* rep : phase_reports(r)) {
      if (measured)
        judge_range_by_outcome(*rep, f, m, o_.monitor.optim);
      else
        soften_range_for_calm_run(*rep, f);
    }
  }
  if (failed.empty())
    r.add_at_end(f);
  else
    r.findings.add(f);  // a probe that failed is told in the whole report only
}

// O8's outcome probe (RateOutcome, checks/optim/optim_checks.h): the whole run again from its initial
// weights, its schedule replayed, at a tenth of the rate, then, where that repeat beats the run on
// validation, at the rate itself; false where it cannot run (no validation loader, a run longer than
// DiagnoseOptions::fit's data_max_steps, a sampler, a repeat that failed).
bool Session::rate_outcome(const RunReport& r, RateOutcome& m) {
  const int64_t steps = static_cast<int64_t>(r.history.step_losses.size());
  if (!data_.train || !data_.val || !have_initial_ || data_.train->options().sampler_ || steps < 2 ||
      steps > o_.fit.data_max_steps)
    return false;
  const double threshold = accuracy_threshold(loss_module_);
  const OptimCheckOptions& oo = o_.monitor.optim;
  auto scored = [&] { return score(model_, *data_.val, loss_, o_.dead_pass_batches, threshold, RowLosses::kEvery); };
  const SplitScore run = scored();
  SplitScore tenth, repeat;
  std::string failed;
  std::vector<double> schedule;
  say("outcome probe (the whole run at lr / 10)");
  const std::vector<double> lrs = replayed_rates(r, 0.1, schedule);
  rerun_from_start(
      lrs, steps, failed, true, [&] { tenth = scored(); }, schedule);
  if (!failed.empty() || tenth.examples != run.examples) return false;
  m.steps = steps;
  m.examples = run.examples;
  // The tenth against another model's score: the accuracies with the examples either gets right alone, and
  // the paired z of the examples' losses.
  auto compare = [&](const SplitScore& other, double& loss, double& accuracy, int64_t& fixed, int64_t& broken,
                     double& loss_z) {
    loss = other.loss;
    accuracy = other.accuracy;
    count_flips(other, tenth, fixed, broken);
    loss_z = detail::paired_z(other.row_losses, tenth.row_losses);
  };
  m.tenth_loss = tenth.loss;
  m.tenth_accuracy = tenth.accuracy;
  compare(run, m.run_loss, m.run_accuracy, m.run_fixed, m.run_broken, m.run_loss_z);
  if (!tenth_rate_beats(m.run_loss, m.tenth_loss, m.run_accuracy, m.tenth_accuracy, m.run_fixed, m.run_broken,
                        m.run_loss_z, oo))
    return true;
  say("outcome probe (the whole run at its rate)");
  const std::vector<double> own = replayed_rates(r, 1.0, schedule);
  rerun_from_start(
      own, steps, failed, true, [&] { repeat = scored(); }, schedule);
  if (!failed.empty() || repeat.examples != run.examples) return false;
  compare(repeat, m.repeat_loss, m.repeat_accuracy, m.repeat_fixed, m.repeat_broken, m.repeat_loss_z);
  return true;
}

// ReLU units that died during training (M7) with no finding that suspects the learning rate: the
// run again from its initial weights at a tenth of it, its schedule replayed, for twice the steps the
// units took to die (the lr probe's steps at least), then the layer's dead fraction over the training
// data (O6's verdict: checks/optim/learning_rate.cpp).
void Session::dead_units_lr_probe(RunReport& r) {
  const auto& fs = r.findings.findings();
  const auto died = std::find_if(fs.begin(), fs.end(), [](const Finding& f) { return died_in_training(f); });
  if (died == fs.end() || !data_.train || initial_lrs_.empty() || model_device(model_) != kCPU) return;
  DeadUnitsProbe p;
  p.module = died->module;
  p.run_dead = died->value_of("dead fraction over the pass");
  if (!std::isfinite(p.run_dead)) p.run_dead = died->value_of("dead fraction over the batch");
  p.dead_threshold = o_.monitor.activations.dead_fraction;
  p.lr = peak_lr(r);
  const double first_dead = died->value_of("first step at the threshold");
  const int64_t died_at = first_dead >= 0 ? static_cast<int64_t>(first_dead) : r.steps;
  const int64_t steps = std::min<int64_t>({r.steps, static_cast<int64_t>(r.history.step_losses.size()),
                                           std::max<int64_t>(o_.lr_probe_steps, 2 * died_at + 1)});
  if (steps < 2) return;
  say("learning-rate probe (dead units)");
  std::vector<double> schedule;
  const std::vector<double> lrs = replayed_rates(r, 0.1, schedule);
  p.probe_losses = rerun_from_start(
      lrs, steps, p.failed, true,
      [&] {
        for (const DeadLayerStats& l :
             dead_relu_stats(model_, *data_.train, o_.dead_pass_batches, o_.monitor.activations))
          if (l.module == p.module) p.probe_dead = l.pass_dead;
      },
      schedule);
  p.run_losses.assign(r.history.step_losses.begin(), r.history.step_losses.begin() + steps);
  const Finding f = judge_dead_units_lr_probe(p);
  r.add_at_end(f);
}

}  // namespace gradsleuth::debug
