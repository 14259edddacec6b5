// The optimisation checks O1-O4 and O6 (docs/checks.md): gradient health after a
// backward, gradient- and weight-norm histories, non-finite weights after a
// step, and the learning-rate diagnosis (loss history and update/weight ratios).
// (O5, a forgotten zero_grad, is raised by optim::Optimizer::step itself.)
//
//   debug::NormHistory norms;                       // O2, O3
//   debug::UpdateRatioTracker ratios;               // O6
//   ratios.attach(opt, *model, 10);                 // measures every 10th step
//   for (...) {
//     opt.zero_grad(); loss = loss_fn((*model)(x), y); loss.backward();
//     report.add(debug::check_gradient_health(*model));   // O1 (every N steps)
//     norms.record(step, *model);
//     opt.step();
//     report.add(debug::check_finite_weights(*model));    // O4
//   }
//   report.add(norms.findings());
//   report.add(debug::diagnose_learning_rate(losses));     // O6 from the loss history
//   report.add(ratios.findings());                          // O6 from the updates
//
// Thresholds are the named fields of OptimCheckOptions; the numbers next to
// them were measured on the reference MLP of the bug catalog (see
// loss_checks.h: Adam lr 1e-3 = healthy, lr 0.1 = B24, lr 1e-7 = far too low).
// Parameters are named by their path in the model ("1.weight", "4.inner.1.bias");
// "weights" are the parameters with dim >= 2 (biases and normalisation scales
// are recorded for plots but only judged where said).
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "debug/checks/loss/loss_checks.h"
#include "debug/evidence/finding.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"

namespace gradsleuth::debug {

struct OptimCheckOptions {
  // ---- O1 gradient health ----
  // Per parameter. Healthy reference MLP, 1000 steps: gradient norms 0.02-1.2
  // (median per parameter), largest single value 50 (its first Linear).
  double vanishing_grad_norm = 1e-7;  // a gradient norm below this is vanishing
  // Parameters whose ~0 gradient is explained by construction (redundant biases found by
  // find_redundant_biases, reported once as info): not vanishing, not warned about.
  std::vector<std::string> zero_grad_by_construction;
  // Parameters whose gradient the gate found zero only because a layer after them starts at zero (a
  // zero-initialised head or coupling): a vanishing gradient at the first step is that, and info.
  std::vector<std::string> zero_until_first_step;
  double exploding_grad_norm = 1e3;  // above this, exploding
  // ... unless it was so on under half of the sampled steps, none of the last exploding_quiet_steps, and the
  // step loss fell by half or more meanwhile: info (a large loss's large gradient at the start of a run; an
  // uncertainty-weighted multi-task loss on a target in raw units: 1,052 at the first step, under 692 from
  // the tenth).
  int64_t exploding_quiet_steps = 3;
  // During training, a vanishing gradient at a step whose loss is converged_loss_share of the run's
  // first loss or less is info: the model fits its batches (a converged run on separable data: loss
  // 1e-6, gradient norms 5e-8 to 9e-8); a vanishing path keeps the loss up.
  double converged_loss_share = 1e-4;
  // Across depth: ||grad|| of the first weight / of the last weight (registration
  // order). Healthy: 0.48-39 over every step of 4 runs (3.7 at the first step).
  double depth_ratio_vanishing = 1e-3;
  double depth_ratio_exploding = 70.0;

  // ---- O2 gradient-norm spikes ----
  // A record whose gradient norm is above spike_factor x the median of the
  // spike_window records before it is a spike (judged from record
  // spike_window + 1 on). One that stays up (the median of the spike_persist
  // records from it on is still above the factor) is a warning; a lone spike
  // that falls straight back is reported as info. The healthy reference MLP has
  // 2-12 lone 10-98x spikes per 1000-4000 steps in its first Linear (ReLU before
  // BatchNorm: a channel that barely varies in a batch gets its gradient divided
  // by a tiny std), never a sustained one; SGD lr 0.2-0.5 on a plain MLP:
  // sustained 15-425x spikes in every layer before it blew up.
  double spike_factor = 10.0;
  int64_t spike_window = 20;
  int64_t spike_persist = 5;
  // ... and only when it reaches this fraction of the gradient norm at the start
  // of training (the largest of the first 5 records): the clean
  // footwear reference, converged to a loss of 0.002, has 10x jumps of its
  // output bias's gradient from 5.6e-4 to 5.7e-3, two orders below its start.
  double spike_min_start_fraction = 0.5;
  // ... and a sustained one must also rise above spike_window_max x the largest record of the
  // window before it: a new level, not the window's own tail. Batches of 4 (the corpus' programs
  // at an eighth of their batch size) give gradient norms whose 90th percentile sits 4-48x their
  // median; 5 records in a row reach 10-26x the median by chance, yet their median stays below 1.7x
  // the largest of the 20 before. A jump to a new level (30x in the test, 15-425x for SGD lr 0.2-0.5)
  // clears both.
  double spike_window_max = 2.0;

  // ---- O3 weight-norm growth (weights only) ----
  // A weight whose norm grew more than weight_growth_factor x from its first
  // record, rising between at least weight_growth_min_increasing of consecutive
  // records, over at least min_records records. Healthy: 1.6x in 1000 steps,
  // 2.7x in 4000 (the first Linear: BatchNorm after it makes its scale free, and
  // Adam inflates it); Adam lr 1e-2: 9.3x in 1000 steps; B24 (lr 0.1): 31x by
  // step 100, 52x by step 1000.
  double weight_growth_factor = 10.0;
  // The growth is info at the end of a run whose loss fell without instability (no L1 spike,
  // oscillation or divergence) and whose last validation loss is within growth_val_at_best of its best
  // epoch's, below its first: weights that had to grow to the solution's scale (a linear readout over
  // small random features: 41x; a softmax head on separable topics under cross-entropy: 13x), not
  // oversized steps, which leave the loss unstable.
  double growth_val_at_best = 1.05;
  double weight_growth_min_increasing = 0.6;
  int64_t min_records = 10;
  // ... and weight decay too strong, judged at the end of the run (docs/checks.md, O3). Per parameter
  // group with decay, its pull against the loss gradient's in the step: coupled decay (SGD, Adam,
  // RMSprop add lambda * w to the gradient, so Adam's second moment divides both alike) as
  // lambda ||w|| / ||g||, g the loss gradient averaged over decay_grad_batches training batches;
  // decoupled decay (AdamW shrinks w by lr * lambda * w beside the normalised step) as
  // lambda ||w|| / ||m / (sqrt(v) + eps)||. The healthy corpus: 2.6e-4 to 0.025.
  // A group at or above decay_ratio_min is probed: training goes on from the trained weights for
  // decay_probe_steps steps (at most the run's own) twice, with the decay as set and without it.
  // Without it, a validation accuracy higher by decay_probe_accuracy_gain (z of the two proportions
  // >= decay_probe_min_z), or for a task without accuracy a validation loss below
  // (1 - decay_probe_gain) x the one with it (and by decay_probe_min_gain), warns.
  double decay_ratio_min = 0.1;
  // A penalty on the weights inside a loss function (lambda sum w^2 written by hand): in the gate, the
  // loss called on the model's output detached gives the weights a gradient only through what it reads
  // of them directly. Where that gradient is at least penalty_gradient_ratio x the rest of the loss's
  // (the data's) in every weight matrix, the penalty decides the steps: a warning (a coefficient of 0.05
  // on sum w^2 gave 1.7-4.4x in an MLP on Fashion-MNIST, 0.01 gave 0.3-0.7x, 5e-4 0.02-0.04x).
  double penalty_gradient_ratio = 1.0;
  // ... and a penalty the loop adds around the loss (the Session's loss without it), read on the first
  // step: the step's gradient G against the loss's own gradient g on the same batch (the forward again,
  // its random draws replayed), fitted per weight matrix as G = a g + lambda w (one a for all). Judged
  // only where the fit leaves at most loop_penalty_unexplained of |G|^2 (a forward that cannot be
  // replayed, or a loop whose step holds other terms, leaves more). A lambda whose term's share
  // |lambda w| / |a g| is at least loop_penalty_present in a weight matrix is a penalty; at or above
  // penalty_gradient_ratio in every one, too strong; of the wrong sign (lambda < 0: the loss rewards
  // larger weights) in every penalised one, a warning too.
  double loop_penalty_unexplained = 1e-4, loop_penalty_present = 1e-3;
  int64_t decay_grad_batches = 4;
  int64_t decay_probe_steps = 200;
  double decay_probe_accuracy_gain = 0.02, decay_probe_min_z = 2.0;
  double decay_probe_gain = 0.2, decay_probe_min_gain = 0.01;
  // A run whose weights shrank to decay_collapse x their initial norm or less while its loss kept
  // more than decay_stalled of its first value (last tenth of steps against the first) is run again
  // from its initial weights without the decay (as many steps, 300 at most): a loss below
  // decay_restart_better x the run's, and lower by decay_restart_min_gain, warns.
  double decay_collapse = 0.3, decay_stalled = 0.7;
  double decay_restart_better = 0.5, decay_restart_min_gain = 0.05;

  // ---- O6 learning rate ----
  // From the loss history: too high = NaN/Inf, divergence, spikes above the
  // start or wild oscillation (L1's statistics, with these options); too low =
  // a flat loss (relative decrease below loss.min_relative_decrease).
  LossCheckOptions loss;
  // Update/weight ratio ||w_after - w_before|| / ||w_before|| per weight: its
  // median over the measured steps outside [min, max] warns (the usual
  // healthy band [1e-5, 1e-1]). Healthy (Adam 1e-3): medians 2.8e-3-6.5e-3;
  // lr 1e-7: 1.1e-6-2.6e-6; B24 (lr 0.1): 4.6e-3-1.6e-2 — inside, because the weights grow
  // as fast as the steps (O3 and the loss history catch B24 instead).
  double min_update_ratio = 1e-5;
  double max_update_ratio = 1e-1;
  // A weight below min_update_ratio while the other weights of its group (two or more, the median of
  // their medians) move at healthy_group_ratio or more: its own gradient holds it back, not the rate
  // (kind layer-updates-too-small, a symptom like a vanishing gradient).
  double healthy_group_ratio = 1e-4;
  // A flat loss (too low, above) whose weight matrices move by at least moving_update_ratio of
  // their norm per step (the median over them of each one's median) is not a rate too low: the
  // steps move the weights, and the loss stays for another reason (labels the inputs do not
  // predict: M15). Inputs shuffled apart from their labels, Adam at 2e-3: medians near 1e-2.
  double moving_update_ratio = 1e-3;
  double min_weight_rms = 1e-6;    // ||w|| / sqrt(numel) below this: no ratio (a tensor still near 0)
  int64_t min_update_records = 3;  // measured steps needed before a weight is judged
  // The schedule (the learning rate at every step): one that runs below schedule_collapse x its
  // first value for more than 1 - schedule_collapse_by of the run's steps (falls there before
  // schedule_collapse_by of the run, and stays: a scheduler stepped per batch where it was written
  // per epoch, StepLR(step_size=30) meant 30 epochs; cosine annealing with warm restarts dips below it
  // only near each trough), or rises above schedule_growth x its first value, warns; so does a
  // learning rate of 0 from the start for schedule_collapse_by of the run or more (a warm-up from 0 is
  // judged from its first positive value). Judged from schedule_min_steps steps on. A learning rate of 0
  // for schedule_zero_steps steps or more from the start, then 0.9 x the schedule's peak or more at once,
  // warns: a linear warm-up from 0 spends one step there and ramps (an integer step / warmup_steps jumps).
  double schedule_collapse = 1e-2;
  int64_t schedule_zero_steps = 3;
  double schedule_collapse_by = 0.5;
  double schedule_growth = 10.0;
  int64_t schedule_min_steps = 10;
  // A schedule that falls schedule_rebound x or more from its start, then climbs without falling back to the
  // run's last step, schedule_rebound x or more above its trough over schedule_rebound_share of the steps or
  // more, warns: a warm-up ramp that continues past its end (min and max swapped in a warm-up/decay formula).
  // A cyclic schedule climbs for one half-cycle, a warm restart jumps, and a warm-up climbs from the start.
  double schedule_rebound = 3.0;
  double schedule_rebound_share = 0.6;
  // The loop's own writes to the weights between optimizer steps (WeightWriteTracker): written in
  // at least writes_min_steps gaps, with two or more writes measured, and taking back writes_undone
  // or more of the optimizer's movement of those weights (-<writes, moved> / |moved|^2) warns: the
  // steps do not accumulate. So do writes writes_replaced x the movement or larger that take back
  // writes_replaced_undone of it or more (weights replaced: a re-initialisation). Healthy, measured:
  // Lookahead takes back 1 - alpha by design (0.5 at alpha 0.5, 0.8 at alpha 0.2; |writes| the same
  // share of the movement), a max-norm constraint of 2 with dropout 0.23, an EMA copied back at each
  // epoch 0.47, weight noise and SAM's perturb-and-restore 0; faulty: a max-norm of 1e-3 0.99, a
  // Lookahead whose slow weights never move 0.96, a re-initialisation at each epoch 0.84 with writes
  // 2.6x the movement. Writes of writes_added x the movement or more that point along it (cosine
  // writes_along or more) are a second update outside the optimizer (a hand-written SGD step beside
  // step(): 0.18x at cosine 0.8): they warn too.
  int64_t writes_min_steps = 3;
  double writes_undone = 0.9;
  double writes_replaced = 1.5;
  double writes_replaced_undone = 0.5;
  double writes_added = 0.05;
  double writes_along = 0.5;
  // Weights that moved by more than unwatched_change (relative, over the whole model) from the
  // Session's start to its end, over unwatched_min_losses training losses or more, while the
  // optimizer given to the Session never stepped: another optimizer trains the model (one built
  // inside the loop, which restarts its state at every step) (judge_updates_without_steps).
  int64_t unwatched_min_losses = 2;
  double unwatched_change = 1e-6;
  // An adaptive optimizer's eps against its second-moment estimate after the run (Adam, AdamW,
  // RMSprop): each weight's step is lr * m / (sqrt(v) + eps), so where eps is far above sqrt(v) the
  // step shrinks by sqrt(v) / (sqrt(v) + eps) and Adam becomes SGD with momentum at lr / eps. The
  // median of that factor over the weights that had a gradient (at most eps_sample of them, evenly
  // spaced) below eps_shrink is reported; it warns where the run also learned too slowly (a loss
  // still falling at its end, a learning rate the run or its probe found too low), and is info
  // where it trained (eps = 1 chosen on purpose, the learning rate raised to match). Healthy: the
  // default eps = 1e-8 keeps the factor at 0.99-1.0 for gradients of 1e-6 and up; eps = 1 with
  // gradients of 1e-2 gives 0.01.
  double eps_shrink = 0.1;
  int64_t eps_sample = 1 << 20;

  // ---- O8 learning rate before training ----
  // The usual ranges of a starting learning rate: adaptive optimizers (Adam, AdamW, RMSprop)
  // [1e-5, 1e-2] (their default is 1e-3), SGD [1e-4, 1] (with or without momentum).
  double adaptive_lr_min = 1e-5;
  double adaptive_lr_max = 1e-2;
  double sgd_lr_min = 1e-4;
  double sgd_lr_max = 1.0;
  // ... except an adaptive optimizer whose eps is adaptive_eps_large or more: eps then sets the step (lr / eps
  // times the averaged gradient; RMSprop at eps 1 and lr 0.045 trained Inception), so its rate is info here
  // and the eps rule (eps_shrink) judges it after the run.
  double adaptive_eps_large = 0.1;
  // Adam's and AdamW's betas against the condition of Adam's convergence proof (Kingma & Ba 2015,
  // Theorem 4.1): beta1^2 / sqrt(beta2) < 1. PyTorch's (0.9, 0.999) gives 0.81, (0.9, 0.95) 0.83;
  // the pair typed the other way round, (0.999, 0.9), gives 1.05. At adam_betas_gamma_max or above: a warning.
  double adam_betas_gamma_max = 1.0;
  // SGD's learning rate and weight decay passed the wrong way round: a coupled (L2) weight decay of
  // sgd_swap_wd_min or more that is sgd_swap_ratio x the learning rate or more (SGD(params, 5e-4) with
  // weight_decay 0.05 for lr 0.05 and 5e-4; recipes pair lr 0.01-0.1 with decay 1e-4-5e-4).
  double sgd_swap_wd_min = 0.01;
  double sgd_swap_ratio = 10.0;
  // A run calm at a rate above the range (kCalmProbeMargin, below) keeps O8's warning where the whole run
  // again from its initial weights at a tenth of the rate ends better on validation than the run and than
  // the same repeat at the run's rate: higher accuracy with a McNemar z of outcome_min_z or more (the
  // examples only one of the two gets right), or a validation loss lower by outcome_loss_drop (relative)
  // with a paired z of outcome_min_z or more over the examples' losses and, for a classifier, an accuracy
  // no lower.
  double outcome_min_z = 2.0;
  double outcome_loss_drop = 0.1;
};

// Per-parameter series for plots: (parameter path, [(step, value), ...]).
using NormSeries = std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>>;

// O1, after a backward: per trainable parameter, no gradient (warning), NaN/Inf
// (error), norm below opts.vanishing_grad_norm or above opts.exploding_grad_norm
// (warnings); across depth, first weight's gradient norm / last weight's outside
// [depth_ratio_vanishing, depth_ratio_exploding] (warnings). When nothing is
// wrong, one info finding with the smallest and largest norms and the ratio.
std::vector<Finding> check_gradient_health(const nn::Module& model, const OptimCheckOptions& opts = {});

// O1's gate finding "got no gradient" judged again with the run (TrainingHistory's gradient counts):
// a parameter the loop's backward did reach is reached by a loss term the Session was not given
// (soften_reached_in_training in run_check.h): info. So is its "vanishing" verdict of a gradient that
// is zero at the gate and alive on most sampled steps of the run (soften_zero_at_gate: reached only
// through a random path the gate switches off).
struct TrainingHistory;
void revise_gradient_missing(Report& gate, const TrainingHistory& h, const OptimCheckOptions& o = {});

// O2 and O3: record() after backward and before step (the gradients of this
// step, the weights they were computed for), every step or every N steps.
class NormHistory {
 public:
  explicit NormHistory(OptimCheckOptions opts = {}) : o_(std::move(opts)) {}
  // Stores each trainable parameter's gradient norm (when it has a gradient)
  // and weight norm under `step`.
  // `weight_norm` (optional): a weight's norm the caller has just measured (NaN: not known, read it).
  void record(int64_t step, const nn::Module& model, const std::function<double(const Tensor&)>& weight_norm = {});
  // O2 gradient spikes (error: a non-finite norm; warning: sustained; info:
  // lone spikes) and O3 steadily growing weight norms (warning). Empty when healthy.
  std::vector<Finding> findings() const;
  NormSeries grad_series() const;
  NormSeries weight_series() const;
  int64_t records() const { return records_; }
  void clear() {
    params_.clear();
    records_ = 0;
  }

 private:
  struct Param {
    std::string name, shape;
    int64_t dim = 0, numel = 0;  // dim: the dimensions of size 2 or more (O3 judges weights: 2 or more)
    int64_t fan_out = 0;         // its first dimension (a weight's outputs)
    std::vector<std::pair<int64_t, double>> grad, weight;
  };
  Param& param(const std::string& name, const Tensor& p);
  OptimCheckOptions o_;
  std::vector<Param> params_;  // registration order
  int64_t records_ = 0;
};

// O4, after a step: an error per parameter holding NaN or Inf, with the counts.
// `known_finite` (optional): parameters a pass of the caller's own has just found finite are not
// read again (debug::Monitor passes UpdateRatioTracker::measured_finite).
std::vector<Finding> check_finite_weights(const nn::Module& model,
                                          const std::function<bool(const Tensor&)>& known_finite = {});

// O6 from per-step training losses: a warning "learning rate too high" (NaN/Inf,
// divergence, spikes above the starting loss, wild oscillation) or "too low"
// (the loss barely moves), with L1's statistics as evidence. Empty otherwise.
// `replay`: as for analyse_loss_history (a spike whose batch was as hard at the initial weights, or
// a swing as wide between batches at fixed weights, says nothing about the rate).
std::vector<Finding> diagnose_learning_rate(const std::vector<double>& train_losses, const OptimCheckOptions& opts = {},
                                            const BatchReplay& replay = {});

// O6 on a scheduler's stepping (schedule_reach.cpp measures it, learning_rate.cpp judges it): a live
// optim::LRScheduler of the run's optimizer stepped `stepped` times over `steps` optimizer steps, the
// first group's peak learning rate its own schedule gives over those optimizer steps (`peak`, first at
// step() count `peak_at`) against the highest it reached with the steps it was given (`reached`).
struct ScheduleReach {
  bool found = false;
  int64_t stepped = 0, steps = 0, peak_at = 0;
  double base = 0, reached = 0, peak = 0;
};
ScheduleReach measure_schedule_reach(const optim::Optimizer& optimizer, int64_t optimizer_steps);
// A warning where a scheduler stepped at most a quarter as often as the optimizer reached less than
// half of its own peak: its lengths count optimizer steps and it was stepped once per epoch (a
// warm-up that never ends), or it was never stepped.
std::optional<Finding> judge_schedule_reach(const ScheduleReach& r);

namespace detail {
// A schedule that falls and then climbs to the run's end (schedule_reach.cpp): from its lowest rate after
// `from` (`trough`, a 0-based step), how far it fell from the rate at `from` (`fall`, a ratio), how far it rose
// to the last step (`rise`), the share of the run's steps that climb, and whether it never falls on the way.
struct ScheduleRebound {
  int64_t trough = 0;
  double fall = 1.0, rise = 1.0, share = 0.0;
  bool steady = false;
};
ScheduleRebound schedule_rebound(const std::vector<double>& lrs, int64_t from);
// The measured ratios of the steps on which a weight moved at all (UpdateRatioTracker's verdict).
std::vector<double> moving_ratios(const std::vector<std::pair<int64_t, double>>& ratios);
// A weight exactly still on 20-80% of its `measured` steps, and moving by a healthy ratio (the band's
// lower end) on the others, at least 3 of them.
bool skipped_at_times(const std::vector<double>& moving, size_t measured, double min_ratio);
}  // namespace detail

// O6 from the schedule: the learning rate at each optimizer step (Monitor records it). A
// warning when it starts at 0, collapses early (below schedule_collapse x its start before
// schedule_collapse_by of the steps) or grows past schedule_growth x its start. Empty otherwise.
std::vector<Finding> diagnose_lr_schedule(const std::vector<double>& learning_rates,
                                          const OptimCheckOptions& opts = {});

// O6 from what each ReduceLROnPlateau and EarlyStopping of the run was stepped with (`records`,
// optim::metric_step_records() since the run began), against the run's epochs: a Mode::Min one fed
// the validation accuracy, or a Mode::Max one fed a loss, judges every improvement a bad epoch and
// cuts the rate (stops) after improvements. A warning where it acted, info where it has not yet.
// A Mode::Min one fed a rising number in [0, 1] (or [0, 100]) while the validation loss fell is the
// same fault where the run reported no accuracy. Empty otherwise.
std::vector<Finding> diagnose_metric_direction(const std::vector<optim::MetricStepRecord>& records,
                                               const TrainingHistory& history);
// What one record's metrics follow (checks/optim/metric_steps.cpp): step i against epoch i, a
// Mode::Min record against the validation accuracy (as a fraction or in %) and, where the run has
// no accuracy, against the trend of the validation loss; a Mode::Max record against the validation
// and training losses. `what` is empty where it follows none of them the wrong way round.
inline constexpr int64_t kMinMetricSteps = 4;      // steps matched with epochs before a record is judged
inline constexpr double kAccuracyGap = 0.02;       // mean |metric - accuracy| (accuracy's units) that follows it
inline constexpr double kLossGap = 0.05;           // mean |metric - loss| / the loss's mean that follows it
inline constexpr double kFollowCorrelation = 0.8;  // and the Pearson correlation of the two
inline constexpr double kMetricTrend = 0.8;        // |Spearman| with the epoch: a rising metric, a falling loss
struct MetricFed {
  std::string what;                                       // "the validation accuracy", ... ("" when none)
  double first = 0, last = 0;                             // that series at the first and the last epoch matched
  int64_t n = 0;                                          // epochs matched
  double gap = std::numeric_limits<double>::quiet_NaN();  // mean |metric - that series|
  double r = std::numeric_limits<double>::quiet_NaN();    // their Pearson (by_trend: the Spearman with the loss)
  bool by_trend = false;                                  // a rising number against a falling validation loss
};
MetricFed match_metric_steps(const optim::MetricStepRecord& record, const TrainingHistory& history);

// O8, before training: each parameter group's learning rate against the usual range of its
// optimizer (Adam/AdamW/RMSprop: [adaptive_lr_min, adaptive_lr_max]; SGD: [sgd_lr_min,
// sgd_lr_max]); a warning per group outside it. An optimizer of another kind is not judged.
std::vector<Finding> check_learning_rate_range(const optim::Optimizer& opt, const OptimCheckOptions& opts = {});
// O8's "below the usual range" before training becomes info where the run's learning rate
// (TrainingHistory::learning_rates) rose to 10x it or more (from 0): a warm-up the scheduler had not
// started when the gate read the rate.
void revise_lr_range(Report& gate, const std::vector<double>& learning_rates);
// O6's "updates too small" becomes info for a model that started trained (L4's started_trained) whose
// validation loss ended no higher than it began: fine-tuning at a small rate.
void revise_small_updates(Report& found, bool started_trained, const std::vector<double>& epoch_val_loss);

// O6 from the updates: attach() adds a pre- and a post-step hook to the
// optimizer; on every `every`-th step (steps 1, 1 + every, ...; or the steps a
// predicate picks) it measures,
// per trainable parameter, ||w_after - w_before|| / ||w_before|| (skipping
// tensors whose rms is below opts.min_weight_rms). findings(): a warning per
// weight whose median ratio is outside [min_update_ratio, max_update_ratio]
// (one that never changes is named as never updated). Detach before the
// optimizer is destroyed; the destructor detaches.
class UpdateRatioTracker {
 public:
  explicit UpdateRatioTracker(OptimCheckOptions opts = {}) : o_(std::move(opts)) {}
  ~UpdateRatioTracker() { detach(); }
  UpdateRatioTracker(const UpdateRatioTracker&) = delete;
  UpdateRatioTracker& operator=(const UpdateRatioTracker&) = delete;

  void attach(optim::Optimizer& opt, const nn::Module& model, int64_t every = 10);
  // The same on the steps `measure(step)` picks (1-based optimizer steps): debug::Monitor measures
  // on its own sampled steps, so that the other checks of those steps find the weights in cache.
  void attach(optim::Optimizer& opt, const nn::Module& model, std::function<bool(int64_t step)> measure);
  void detach();
  bool attached() const { return opt_ != nullptr; }
  std::vector<Finding> findings() const;
  NormSeries series() const;  // per parameter: (step, ratio)
  // The median over the weight matrices (2-d and up) measured min_update_records times of each
  // one's median ratio; NaN when none was.
  double median_weight_ratio() const;
  int64_t measurements() const { return measurements_; }
  // During a measured step (between its pre- and post-step hooks): the norm of `p`'s weight before
  // the update, read with the snapshot (NaN when `p` is not measured, not float32 on the CPU, or
  // holds a NaN or Inf).
  double measured_norm(const Tensor& p) const;
  // True when `p` was measured on the step just taken (until the next step ends) and every value
  // of its updated weight is finite: the measurement read it whole.
  bool measured_finite(const Tensor& p) const;

 private:
  struct Param {
    std::string name, shape;
    Tensor tensor;  // shares state with the model's parameter
    int64_t dim = 0, numel = 0;
    int group = -1;            // the optimizer's parameter group holding it (-1: none)
    Tensor before;             // snapshot of the step being measured
    double norm_before = 0.0;  // its norm, when the snapshot's pass measured it (NaN: not)
    std::vector<std::pair<int64_t, double>> ratios;
    std::vector<double> lrs;  // the group's lr at each measurement
  };
  void pre_step(optim::Optimizer& opt);
  void post_step(optim::Optimizer& opt);
  // A weight matrix (2-d and up) measured min_update_records times or more, and its median ratio.
  bool judged(const Param& q) const;
  static double median_ratio(const Param& q);
  OptimCheckOptions o_;
  optim::Optimizer* opt_ = nullptr;
  std::vector<size_t> hooks_;
  std::function<bool(int64_t)> measure_;  // which steps are measured
  int64_t measuring_step_ = -1;           // the step being measured (-1: none)
  int64_t measurements_ = 0;
  bool some_group_trains_ = false;  // a group had a positive lr at a measurement
  std::vector<Param> params_;
  std::vector<const TensorImpl*> finite_after_;  // the parameters the last measurement found finite
};

// O6 at the end of a run (its run check, lr_run_check.cpp, calls it): the loss history at the run's rates, the
// schedule, each scheduler's stepping, the plateau schedulers and early stoppers stepped since `metric_tick`
// (optim::metric_step_tick() when the run began), and the update ratios `ratios` measured; added to `c`.
class RunContext;
void judge_learning_rate_run(RunContext& c, const OptimCheckOptions& o, const UpdateRatioTracker& ratios,
                             uint64_t metric_tick);

// O3's weight-decay probe at the end of a run: what the runner measured (NaN where it could not).
struct DecayGroup {
  std::string name;  // the group's name, or its index
  double weight_decay = 0.0, lr = 0.0;
  bool decoupled = false;  // AdamW: the decay shrinks the weights beside the normalised step
  // The penalty the loop adds around the loss (TrainingHistory::loop_penalty), as a coupled decay:
  // weight_decay is its lambda, in the units of the loop's step (lambda w beside a x the loss gradient).
  bool loop_penalty = false;
  double decay_norm = std::numeric_limits<double>::quiet_NaN();  // lambda ||w|| over the group's parameters
  double step_norm = std::numeric_limits<double>::quiet_NaN();   // the loss gradient's term: ||g|| (coupled), ||m /
                                                                 // (sqrt(v) + eps)|| (decoupled)
  double weight_norm = std::numeric_limits<double>::quiet_NaN(),
         initial_weight_norm = std::numeric_limits<double>::quiet_NaN();
};
struct DecayMeasure {
  std::string optimizer;
  std::vector<DecayGroup> groups;
  // The run's training loss over its first and last tenth of steps.
  double run_first_loss = std::numeric_limits<double>::quiet_NaN();
  double run_window_loss = std::numeric_limits<double>::quiet_NaN();
  // Training on from the end, decay_probe_steps steps with the decay as set (kept) and without (free):
  // the validation loss and accuracy after them (NaN: not run, or no accuracy for this task).
  int64_t probe_steps = 0, val_examples = 0;
  double val_loss = std::numeric_limits<double>::quiet_NaN(), val_accuracy = std::numeric_limits<double>::quiet_NaN();
  double kept_val_loss = std::numeric_limits<double>::quiet_NaN();
  double free_val_loss = std::numeric_limits<double>::quiet_NaN();
  double kept_val_accuracy = std::numeric_limits<double>::quiet_NaN();
  double free_val_accuracy = std::numeric_limits<double>::quiet_NaN();
  // The run again from its initial weights without the decay: its loss over its last tenth of steps.
  int64_t restart_steps = 0;
  double restart_window_loss = std::numeric_limits<double>::quiet_NaN();
};
// A group's decay pull / its gradient term (NaN when either is unknown or the gradient is 0).
double decay_ratio(const DecayGroup& g);
// Whether any group's ratio reaches decay_ratio_min (the probe from the end is worth running).
bool decay_worth_probing(const DecayMeasure& m, const OptimCheckOptions& o = {});
// Whether the weights collapsed under the decay while the loss stalled (the restart is worth running).
bool decay_collapsed(const DecayMeasure& m, const OptimCheckOptions& o = {});
// The rule: a warning (kind weight-decay-too-strong) when training on without the decay does better on
// validation (a group's ratio at decay_ratio_min or more), or the run again without it learns where
// the run stalled (collapsed weights); otherwise one info finding with the ratios and what ran.
std::vector<Finding> check_weight_decay(const DecayMeasure& m, const OptimCheckOptions& o = {});
// O2's sustained jump of a gradient norm with the training loss falling after it (the median of the 100
// steps from the jump below 0.8x the 100 before, `step_losses` one per optimizer step): a network leaving
// a flat start (a physics-informed network's near-linear plateau), whose gradient grows as it starts to
// learn. Such a finding becomes info.
void soften_jumps_with_falling_loss(std::vector<Finding>& found, const std::vector<double>& step_losses);
// O3's weight-growth warnings among `found` become info where the run's loss settled (see
// growth_val_at_best, or the validation accuracy at its best within half a point, the validation loss
// below its start): loss_unstable is L1's verdict on the run (loss_history_unstable); epoch_val_loss and
// epoch_val_accuracy the run's validation losses and accuracies.
void revise_weight_growth(Report& found, bool loss_unstable, const std::vector<double>& epoch_val_loss,
                          const OptimCheckOptions& o = {}, const std::vector<double>& epoch_val_accuracy = {});
// O3 in the gate: a penalty on the weights inside the loss (see penalty_gradient_ratio). Called right
// after the gate's backward, with the weights' gradients of loss(out, y) in place (restored on return):
// the loss is called again on out detached. A warning (kind weight-decay-too-strong) when the penalty's
// gradient is at least penalty_gradient_ratio x the data's in every weight matrix (dim >= 2); info with
// the ratios when the loss reads the weights but less; nothing when it reads them only through out.
std::vector<Finding> check_loss_penalty(nn::Module& model, const Tensor& out, const Tensor& y,
                                        const std::function<Tensor(const Tensor&, const Tensor&)>& loss,
                                        const OptimCheckOptions& o = {});

// O3 during training: a penalty on the weights the loop adds around the loss (see loop_penalty_unexplained).
struct LoopPenaltyLayer {
  std::string name;
  double lambda = 0.0;  // the fitted coefficient: G = a g + lambda w
  double share = 0.0;   // |lambda w| / |a g|
};
struct LoopPenaltyMeasure {
  int64_t step = 0;
  double scale = std::numeric_limits<double>::quiet_NaN();        // a: the loop's multiple of the loss's gradient
  double unexplained = std::numeric_limits<double>::quiet_NaN();  // |G - a g - lambda w|^2 / |G|^2, all weights
  std::vector<LoopPenaltyLayer> layers;                           // the weight matrices (dim >= 2)
};
// The rule: a warning (kind weight-decay-too-strong) where the penalty's share is at least
// penalty_gradient_ratio in every weight matrix; a warning (kind penalty-wrong-sign) where every
// penalised matrix has lambda < 0; info with the coefficients for a penalty otherwise; nothing without one.
std::vector<Finding> judge_loop_penalty(const LoopPenaltyMeasure& m, const OptimCheckOptions& o = {});

// O6's lr / 10 probe (a Session reruns the first steps at a tenth of the learning rate): its
// verdict from the run's and the probe's losses (`failed`: why the probe could not run), and the O6
// findings of "a learning rate too high" in `r` demoted to info when `verdict` rules it out.
Finding judge_lr_probe(const std::vector<double>& run_losses, const std::vector<double>& probe_losses, double lr,
                       const std::string& failed, const OptimCheckOptions& o);
void rule_out_lr_too_high(Report& r, const Finding& verdict);
// O6's "the loss diverges" (a smoothed rise alone: no spike above the first loss, no swing) turned into
// info where the loss function gave another value on one fixed output and target at the end of the run
// (`after`) than before it (`before`): the loop changed its objective (a ramped consistency weight).
void soften_rise_of_changed_objective(Report& r, double before, double after);
// A rate the run needs: the probe inconclusive with the loss at a tenth of the rate falling less than a
// tenth as far, and nothing of the run (O6) saying the rate was too high.
bool rate_needed(const Report& r, const Finding& verdict);
// O8's "above the usual range" made info where the run needs its rate (rate_needed), with the probe's
// two decreases (O8's, in lr_range.cpp).
void soften_range_for_needed_rate(Report& r, const Finding& verdict);
// The lr / 10 probe's verdict (judge_lr_probe) is inconclusive: it neither confirms nor rules out the rate.
bool probe_inconclusive(const Finding& verdict);
// A tenth of the rate trained no better where its loss fell at most this many times as far as the run's.
constexpr double kCalmProbeMargin = 1.05;
// O8's "above the usual range" made info where the run was calm at its rate (debug/run/lr_probe.cpp's
// calm_at_rate: the probe inconclusive, a tenth of the rate no better, no spike, divergence, dead unit or
// non-finite value anywhere in the run).
void soften_range_for_calm_run(Report& r, const Finding& verdict);
// O8's outcome probe, for a run calm at a rate above the range: the whole run again from its initial
// weights, its schedule replayed, at a tenth of its rate and at the rate itself (a repeat leaves out what
// the loop adds around the loader, augmentation or accumulation, so the tenth must beat that repeat as well
// as the run), each scored on the validation split.
struct RateOutcome {
  int64_t steps = 0;     // of each repeat (the run's)
  int64_t examples = 0;  // validation examples scored
  double run_loss = std::numeric_limits<double>::quiet_NaN(), tenth_loss = std::numeric_limits<double>::quiet_NaN(),
         repeat_loss = std::numeric_limits<double>::quiet_NaN();
  double run_accuracy = std::numeric_limits<double>::quiet_NaN(),
         tenth_accuracy = std::numeric_limits<double>::quiet_NaN(),
         repeat_accuracy = std::numeric_limits<double>::quiet_NaN();
  // Against the run and against the repeat: the examples only the tenth gets right, and only the other; the
  // paired z of the examples' losses (other minus tenth; NaN where not measured).
  int64_t run_fixed = -1, run_broken = -1, repeat_fixed = -1, repeat_broken = -1;
  double run_loss_z = std::numeric_limits<double>::quiet_NaN(),
         repeat_loss_z = std::numeric_limits<double>::quiet_NaN();
};
// Whether the tenth of the rate beat `other` (the run, or the repeat at its rate) by the rule's margins:
// accuracy where measured, the loss otherwise.
bool tenth_rate_beats(double other_loss, double tenth_loss, double other_accuracy, double tenth_accuracy, int64_t fixed,
                      int64_t broken, double loss_z, const OptimCheckOptions& o);
// Both: the tenth beat the run and the repeat.
bool tenth_rate_ends_better(const RateOutcome& m, const OptimCheckOptions& o);
// O8's "above the usual range" kept a warning with the outcome in its title and evidence (the tenth ended
// better), or made info with it (calm, and the tenth ended no better).
void judge_range_by_outcome(Report& r, const Finding& verdict, const RateOutcome& m, const OptimCheckOptions& o);
// The same probe where ReLU units died during training (M7) and no finding suspects the learning
// rate: the run repeated at a tenth of it for as many steps as the units took to die (twice, at least
// OptimCheckOptions's lr probe's), then the layer's dead fraction over the training data. Units that
// stay alive (under `dead_threshold`) while the loss still falls at least half as far confirm the
// learning rate (a warning of kind lr-probe-confirms); units that die again rule it out (info).
struct DeadUnitsProbe {
  std::string module;  // "3 (ReLU)"
  double run_dead = std::numeric_limits<double>::quiet_NaN();
  double probe_dead = std::numeric_limits<double>::quiet_NaN();
  double dead_threshold = 0.7;
  double lr = std::numeric_limits<double>::quiet_NaN();  // the run's first group's, at its peak
  std::vector<double> run_losses, probe_losses;          // the same steps
  std::string failed;                                    // why the probe could not run
};
Finding judge_dead_units_lr_probe(const DeadUnitsProbe& p);

// O6 after the run: Adam's, AdamW's or RMSprop's eps against the second-moment estimate in its state
// (see OptimCheckOptions::eps_shrink). Nothing when the optimizer is another or eps is small against
// the gradients; a finding of kind eps-dominates otherwise, a warning when `learned_slowly` (the run's
// findings say the loss was still falling or the rate too low; Session computes it), else info.
std::vector<Finding> check_adaptive_epsilon(const optim::Optimizer& opt, const nn::Module& model, bool learned_slowly,
                                            const OptimCheckOptions& o = {});

}  // namespace gradsleuth::debug
