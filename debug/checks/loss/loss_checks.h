// The loss checks L1-L7 (docs/checks.md): read the loss history, the inputs a loss
// is fed, its first value, its targets and its reduction, and say what is wrong.
//
//   optim::FitResult r = trainer.fit(train_loader, &val_loader);
//   std::vector<double> val;  for (auto& e : r.epochs) val.push_back(e.val_loss);
//   debug::Report rep;
//   rep.add(debug::diagnose_loss_history(r.step_losses, val));   // L1: NaN, stuck, diverging, train down / val up
//   rep.add(debug::check_initial_loss(r.step_losses[0], 10));     // L4: ~log(10) at initialisation?
//   rep.add(debug::check_loss_reduction(*model, loss_fn, x, y));  // L6: sum where mean was meant?
//   std::cout << rep.str();
//
// Every check returns the findings it made (empty = nothing to say). Thresholds
// are the named fields of LossCheckOptions; the numbers next to them were
// measured on the reference MLP of the bug catalog (Flatten, Linear(784,128),
// ReLU, BatchNorm1d, 2 x Residual(ReLU, Linear(128,128)), ReLU, Dropout(0.2),
// Linear(128,10); CrossEntropyLoss, Adam lr 1e-3, batch 64, Fashion-MNIST
// standardised), "healthy" meaning that recipe, B24 the same with lr 0.1.
// Dimension letters: B = batch, C = classes, d1.. = extra dims.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "debug/evidence/finding.h"
#include "nn/loss.h"
#include "nn/module.h"

namespace gradsleuth::debug {

struct LossCheckOptions {
  // ---- L7 on accuracies: validation suspiciously better than training ----
  double val_accuracy_margin = 0.10;  // validation accuracy - training accuracy above this ...
  int64_t val_accuracy_epochs = 3;    // ... in each of the last this many epochs warns

  // ---- L1 loss history (per-step training losses; per-epoch validation losses) ----
  // The history is smoothed by the median of consecutive windows of
  // clamp(steps / 10, window_min, window_max) steps; trends (stuck, diverging)
  // need at least two windows. Medians, not means, so one bad batch moves nothing.
  int64_t window_min = 20;
  int64_t window_max = 100;
  // The trend verdicts (stuck, diverging) need at least this many finite steps:
  // over a few dozen steps minibatch noise can hide a real decrease (a slow
  // synthetic curve falling 15% in 40 steps read as 9% in one case of 20).
  int64_t min_trend_steps = 100;
  // Stuck: (first window - best later window) / first window below this. Healthy
  // runs from step 1: 0.40-0.45 (1000 steps, 5 seeds), 0.59-0.63 (300 steps on
  // 5000 images, 3 seeds); Adam lr 1e-7: 0.008-0.029.
  double min_relative_decrease = 0.1;
  // Stuck at chance: the expected loss of a model that guesses (log(C) for
  // cross-entropy; NaN = unknown). The last window at or above
  // (1 - chance_margin) * chance_loss means the model has learnt nothing.
  double chance_loss = std::numeric_limits<double>::quiet_NaN();
  double chance_margin = 0.1;
  // Diverging: a window's median above diverge_factor x the best window before
  // it. Healthy: 1.03-1.19 from step 1 (8 seeds), at most 1.47 over any
  // 30-4000-step stretch of 11 healthy runs (windows >= 20); SGD lr 0.2 on a
  // plain MLP (no BatchNorm): 2.6 before it died. Windows below min_level (see
  // below) are not judged: a binary task converged to 0.002 wobbles 3.5x.
  double diverge_factor = 2.0;
  // ... and that window gave back more than diverge_gain x the first loss (its median minus the
  // best before it): a loss converged to 0.03 that wobbles to 0.08 doubled but gave back 3% of a
  // first loss of 1.4 (the corpus' grad-accumulation); a diverging run climbs back most of the way.
  double diverge_gain = 0.1;
  // Spike: a step whose loss is above spike_factor x the median of the window
  // before it AND above the first loss of the history (worse than where training
  // started). B24 (Adam lr 0.1): 14.8-29.5 at step 2 after 2.4-2.6 at step 1, worst
  // spike 5.9-15.7x its rolling median, in all 8 seeds tried.
  // On the healthy corpus (56 programs x 3 seeds) one run in 168 has a step above its first loss:
  // a binary task (first loss 0.69) with one noisy batch at 0.85, 3.25x its rolling median; a
  // forgotten zero_grad: 11.4x; B24 5.9x at least. The factor sits at 4.5 between them.
  double spike_factor = 4.5;
  // A spike is transient (info, not a warning) when the run had already fallen below
  // transient_level x its first loss before it, and the median of the window after it is still
  // below that: one hard batch the next steps shrug off (a rise that lasts is the divergence rule's).
  // A jump in the last steps, with fewer than 3 after it, is transient below spike_factor x the
  // first loss. Batches of 4 on the corpus' programs (an eighth of their recipes' batch size) give
  // 3-139 such jumps per run, 1.0-4.8x the first loss (a converged spirals run: 0.002 before a batch
  // at 5.28, 0.01 over the 100 steps after); B24's jump at step 2 comes before any fall and stays a
  // spike.
  double transient_level = 0.5;
  // A jump above the first loss whose batch was replayed at the initial weights (debug::Session) is
  // the batch's, not a spike, when that batch's own rise above the first loss is at least
  // hard_batch_share of the jump's: the first batch was easier than this one. Rare large regression
  // targets: 6.148 after a first loss of 0.004, the batch at 6.139 before any update (share 0.999);
  // a fitted-Q loss whose first batch had no reward: 0.10 after 0.0015, the batch at 0.55. Adam at
  // lr 0.1 (B24) jumps on a batch no harder than the first (share near 0).
  double hard_batch_share = 0.5;
  // Oscillating: in some window, the median |loss[t] - loss[t-1]| above
  // max_relative_swing x the window's median loss. Minibatch noise of healthy
  // runs: 0.26-0.34 (batch 64, 8 seeds; 0.47 at most in any window of 11
  // runs); B24: 0.20-0.39 (its swings are no wilder); SGD lr 1 on a plain MLP:
  // 60-120.
  double max_relative_swing = 1.0;
  // The swing is measured against the larger of the window's median and swing_floor x the first
  // loss: near convergence a loss of 0.05 that moves by 0.1 from batch to batch is a few hard
  // examples per batch, small beside the distance training came, and mixup's loss moves with each
  // batch's mixing weight. Healthy corpus: 0.05-0.46 (docs/checks.md, L1).
  double swing_floor = 0.5;
  // A wild swing is the optimizer's only when its window's loss_spread exceeds data_swing_factor x
  // that of consecutive training batches at the trained weights without an update
  // (BatchReplay::spread). Huber regression with 5% of its targets 30 away: its loss sits on the
  // levels 0, 0.93, 1.86, 2.78 (the outliers a batch holds), a window spreads 1.23 and its batches
  // 0.74 at fixed weights.
  double data_swing_factor = 2.0;
  // Windows whose median is below min_level x the first loss are not judged for
  // divergence or oscillation: near 0 relative changes are large and harmless
  // (a BCE footwear-vs-rest run falls from 0.64 to ~0.002, then moves between
  // 0.002 and 0.006).
  double min_level = 0.05;
  // Train down / val up: every one of the last val_patience validation losses
  // is above (1 + val_rise) x the best one before them, while the smoothed
  // training loss kept falling. A single bad validation epoch does not count.
  int64_t val_patience = 3;
  double val_rise = 0.1;
  // ... and by more than val_rise_scatter x the validation curve's own epoch-to-epoch scatter, read
  // from three epochs before the best to the last val_patience (left out: the rise itself) as
  // median |v[i+1] - 2 v[i] + v[i-1]| / 1.65 (second
  // differences leave a steady rise out; for independent errors of spread s their median is 1.65 s),
  // leaving out the three centred on the best (a U's turn is curvature, not scatter).
  // The best of 40 noisy epochs lies about 2 s below their level and the lowest of the last three about
  // 0.9 s: a curve that only scatters ends 1-2 s above its best. A random-Fourier-feature fit under
  // Adam at a constant rate scattered by 8% of its level from epoch to epoch and ended 2.1 s (15%)
  // above its best while its training loss flattened out. Fewer than 4 second differences: not used.
  double val_rise_scatter = 3.0;
  // W3 (the monitor, live): the latest validation loss above (1 + val_rise_w3) x the best before
  // the last two epochs, after rising two epochs in a row.
  double val_rise_w3 = 0.1;
  // W3 where no validation accuracy can confirm a rise (a regression): the bar is
  // (1 + val_rise_w3_unconfirmed) x the best. On the healthy corpus (168 runs) the loss rose two
  // epochs in a row to 1.00-1.36x its best (median 1.06) while the accuracy held; 1.4 sits above
  // all of them. A regression run with batches 8x smaller, or clipped at every step under Adam,
  // wobbles to 1.14-1.25x at an unchanged test R^2.
  double val_rise_w3_unconfirmed = 0.4;
  // The accuracy probe behind W3, L1's train down / val up and L7's overfitting: where the
  // validation accuracy is known, a validation loss that rises warns only when the accuracy also
  // fell from its best by more than this (a loss that rises while the accuracy holds is confidence
  // growing on the examples the model gets wrong, not a model getting worse).
  double val_accuracy_drop = 0.05;

  // ---- L2 double softmax ----
  double prob_sum_tolerance = 1e-3;  // |row sum - 1| at most this counts as "sums to 1" (float32 softmax: ~1e-7)

  // ---- L5 padding the loss reads (check_padding_in_loss) ----
  // Padded positions must fill at least this share of the batch's positions to be judged; the pad
  // input and the pad target may each appear on at most padding_value_rare of the real positions
  // (a background class, or a zero row inside an image, is data, not padding).
  double padding_min_share = 0.05;
  double padding_value_rare = 0.01;
  // The loss's gradient per padded position over its gradient per real position at or above this
  // warns, measured with the output at the padded positions moved by about its own spread. A loss
  // that masks them (sum(loss * mask) / sum(mask), ignore_index) gives them exactly 0; a mean over
  // every position about 1 (a tagger with 40% of its positions padded: 0.9-1.1 at the first batch).
  double padding_gradient_ratio = 0.01;
  // ---- L5 padding the model reads (check_padding_read) ----
  // With T / 2 more pad ids after each row (before it, for left padding), the 90th percentile of the rows'
  // output change over the median row's distance from the batch's mean output at or above this warns
  // (untrained models: an RNN reading the state after the padding 8.3; a CNN max-pooled over the padding
  // 0.15, a mean over every position 0.98; a state gathered at each row's length, a masked mean: 0).
  double padding_read_ratio = 3.0;

  // ---- L4 initial loss ----
  // The expected first loss; NaN = from the kind: log(C) for cross_entropy/nll,
  // log(2) for bce (a prediction of 0.5 everywhere). Required for other kinds (mse).
  double expected_initial_loss = std::numeric_limits<double>::quiet_NaN();
  // loss / expected outside [low, high] warns. Healthy: 1.03-1.10 (2.36-2.54
  // against log(10) = 2.30 over 8 seeds); B03 (sum over a batch of 64): ~64.
  double initial_loss_low = 0.5;
  double initial_loss_high = 1.5;
  // A ratio in (initial_loss_high, initial_loss_confirm] warns only when a probe names its cause
  // (the final bias, L4's initial outputs); otherwise it is info. ReLU-family networks at their
  // default or Kaiming initialisation start with confident logits: 1.34-1.98 on the healthy
  // corpus (residual and deep ReLU MLPs); B16 (weights 10x too large) ~7, B03 (sum) ~64.
  double initial_loss_confirm = 3.0;
  // A loss below initial_loss_low x the expected one is a model that starts trained (resumed from a
  // checkpoint, fine-tuned whole) when its predictions already get more of the batch right than
  // chance + trained_start_share x (1 - chance): then L4 says so as info (soften_trained_start).
  double trained_start_share = 0.5;
  // L4 on the initial outputs (check_initial_outputs). Classes: the mean predicted distribution
  // p over the batch against the batch's class frequencies f; KL(f || p) above KL(f || uniform)
  // by more than initial_output_excess nats warns (the start is worse than guessing uniformly:
  // a biased final layer); KL(f || p) above initial_output_kl alone is info (imbalanced classes,
  // a neutral start: a final bias of log f would save the first steps). Regression: the mean
  // output of a target column more than initial_output_z target stds from the target mean warns.
  double initial_output_excess = 0.5;
  double initial_output_kl = 0.3;
  double initial_output_z = 3.0;
  // L2 for NLLLoss: a value above this is no log-probability.
  double log_prob_tolerance = 1e-3;

  // ---- L6 reduction ----
  // Gradient norm for the batch twice over / for the batch once: 1 with a mean,
  // 2 with a sum. Above this warns. Measured: 1.000 (mean) and 2.000 (sum, B03).
  double reduction_ratio = 1.5;

  // ---- L7 fitting diagnosis ----
  // gap = val - train, both averaged over the last fitting_window epochs (the
  // textbook rule reads one epoch; eval-mode validation loss of the reference MLP jumps
  // by up to 0.4 between epochs, so one epoch alone is too noisy a witness).
  // Healthy, 300 steps on 3000 images, evaluated every 100: gap 0.04-0.22 over
  // 12 seeds (one reads as overfitting: that model's eval-mode loss runs high,
  // ReLU before BatchNorm leaves near-dead channels with running variance ~1e-13).
  int64_t fitting_window = 3;
  double underfit_train_loss = 0.5;  // train above this ...
  int64_t min_epochs_underfit = 50;  // ... after more than this many epochs: underfitting
  // L3 over the run: BCELoss inputs that stayed within [0.5, 0.731] (sigmoid of a probability) in
  // this many sampled steps or more, on targets of both values, went through a sigmoid twice.
  int64_t squashed_min_steps = 5;
  // L6 at the end of the run: a batch's loss below this fraction of its rows' mean loss (each row
  // scored alone) is a reduction taken before the error (|mean(p - y)| for mean(|p - y|): about
  // 1 / sqrt(B) of it for batches of B rows). A loss that is the mean of its rows' losses gives 1.
  double rows_cancel_share = 0.5;
  // L1's "stuck" at the end of a Session's run: the trained model below the best constant output by
  // more than this many standard errors of the paired per-example differences is info.
  double stuck_beat_z = 3.0;
  // ... or the run's last window of training losses below the gate's M15 held-out loss with zeroed
  // inputs by this share (5%: M15's own margin): the inputs take off what the loss can lose.
  double stuck_below_baseline = 0.05;
  double overfit_gap = 0.2;          // gap above this: overfitting
  double overfit_relative_gap = 0.5;  // ... info at most this share of the train loss while validation still falls
  // ... unless the trained model's own losses on the stored rows of both splits (L9's pass, where
  // each example's loss is known: targets that are not class indices) put that gap within
  // overfit_z standard errors of their means: a regression with 5% outlier targets 30 away has
  // each loss's standard deviation near 6.4, and 200 validation rows a mean that moves by 0.45
  // with the outliers it holds.
  double overfit_z = 2.0;
  double normal_gap = 0.05;          // gap below this ...
  double normal_train_loss = 0.1;    // ... with train below this: normal convergence
};

// The best validation accuracy of the run minus the latest (NaN when the latest is unknown).
double validation_accuracy_drop(const std::vector<double>& val_accuracy);
// L7's overfitting verdict (kind overfitting), which L1's run check confirms by the accuracy as it does
// its own train-down-val-up.
bool fitting_says_overfit(const Finding& f);
// The model held on held-out data to the end of the run: 3 epochs of validation losses at least, the
// last within (1 + val_rise) x the best, and (where the validation accuracy is known) the last
// accuracy within val_accuracy_drop of the best. A training loss that rises while this holds is the
// objective changing with the batch (mixup's soft targets, augmentation), not the model diverging.
bool validation_held(const std::vector<double>& val_loss, const std::vector<double>& val_accuracy,
                     const LossCheckOptions& o);

// The statistics behind L1 (and O6's learning-rate diagnosis), on the finite
// part of a per-step loss history (the steps before the first NaN/Inf).
// Steps are counted from 1.
struct LossHistoryStats {
  int64_t steps = 0;            // values given
  int64_t finite_steps = 0;     // steps before the first non-finite loss
  int64_t first_nan_step = -1;  // -1: none
  int64_t first_inf_step = -1;
  double first_loss = std::numeric_limits<double>::quiet_NaN();
  int64_t window = 0;                                            // steps per smoothing window
  std::vector<double> window_medians;                            // one per complete window
  bool trend_judged = false;                                     // at least two windows and opts.min_trend_steps steps
  double relative_decrease = 0.0;                                // (first window - best later window) / first window
  double last_level = std::numeric_limits<double>::quiet_NaN();  // median of the last window
  double max_rise = 0.0;   // largest window median (>= min_level) / best window median before it
  int64_t rise_step = -1;  // last step of that window
  int64_t spikes = 0;      // steps above spike_factor x rolling median and above their starting value
  std::vector<int64_t> spike_steps;  // those steps (1-based)
  // Jumps set aside because their batch's loss at the initial weights (batch_starts) holds most of
  // the jump (hard_batch_share): the batch was hard from the start, no update made it so.
  int64_t hard_batches = 0;
  int64_t worst_hard_step = -1;                          // the one with the highest loss
  double worst_hard_loss = 0.0, worst_hard_start = 0.0;  // its loss, and its batch's at the initial weights
  int64_t worst_spike_step = -1;
  double worst_spike_loss = 0.0, worst_spike_ratio = 0.0;  // its loss, and loss / rolling median
  int64_t transient_spikes = 0;  // the same jumps, after the loss had fallen, that the run came back from
  int64_t worst_transient_step = -1;
  double worst_transient_loss = 0.0;
  double max_swing = 0.0;   // largest median |step-to-step change| / median level of a window
  int64_t swing_step = -1;  // first step of that window
  // A swing above max_relative_swing set aside because the batches spread as much at fixed weights:
  // that window's loss_spread at most data_swing_factor x BatchReplay::spread (the data's, not the
  // optimizer's).
  double swing_spread = std::numeric_limits<double>::quiet_NaN();  // loss_spread of the wildest window
  bool data_swing = false;
  // The verdicts, against the options' thresholds.
  bool stuck = false, at_chance = false, diverging = false, spiking = false, oscillating = false;
  bool too_high() const { return first_nan_step >= 0 || first_inf_step >= 0 || diverging || spiking || oscillating; }
};
// What replaying a run's training batches without an update measured (debug::Session, after the
// run): how hard the data itself is, apart from what the optimizer did.
struct BatchReplay {
  // The loss of a step's batch at the initial weights, for the steps whose loss jumped above the
  // first loss; NaN for the others, empty when none was replayed. A jump whose batch held most of it
  // before any update (hard_batch_share: rare large targets, a first batch without a reward) is the
  // batch's, not a spike; elsewhere the first loss is the starting value.
  std::vector<double> starts;
  // Consecutive training batches at the trained weights, in train mode and without an update:
  // their loss_spread; NaN when not measured. A run whose wildest window spreads no more than
  // data_swing_factor x this moves with what its batches hold (a few outlier targets each), not
  // with its updates.
  double spread = std::numeric_limits<double>::quiet_NaN();
  int64_t spread_batches = 0;  // the batches that spread was measured on
};
LossHistoryStats analyse_loss_history(const std::vector<double>& train_losses, const LossCheckOptions& opts = {},
                                      const BatchReplay& replay = {});
// How far consecutive losses move against their level: the mean |loss[t] - loss[t-1]| over the
// mean |loss|, for losses[from, to); NaN for fewer than 3. Means, not medians: a few outlier
// targets per batch put the losses on a handful of levels, where medians jump between them.
double loss_spread(const std::vector<double>& losses, size_t from = 0, size_t to = SIZE_MAX);

// L1: from per-step training losses (train_losses[i] is step i + 1) and,
// optionally, per-epoch validation losses (taken as evenly spaced over the
// steps, the last one at the end). Pass the history from the first step:
// "stuck" compares the start with the rest. Findings (each names the likely
// causes of the loss-debugging cause table in docs/checks.md, L1):
//   error    NaN loss (first step), Inf loss (first step);
//   warning  stuck high / stuck at chance, diverging (smoothed loss far above
//            its best), spikes above the starting loss, wild oscillation,
//            training loss falling while validation loss rises.
// Trends on the finite part before the first NaN/Inf. Empty for a healthy history.
std::vector<Finding> diagnose_loss_history(const std::vector<double>& train_losses,
                                           const std::vector<double>& val_losses = {},
                                           const LossCheckOptions& opts = {}, const BatchReplay& replay = {});

// L2: input (B, C) or (B, C, d1, ...) fed to cross-entropy. An error when every
// value is >= 0 and every row (over dim 1) sums to 1: probabilities, so
// cross-entropy applies a second softmax (bug B08). Raw logits are silent.
std::vector<Finding> check_cross_entropy_input(const Tensor& input, const LossCheckOptions& opts = {});

// L2 for NLLLoss: input (B, C) or (B, C, d1, ...) must hold log-probabilities, each <= 0 (a
// LogSoftmax's output). An error (kind nll-on-scores) when some value is above
// opts.log_prob_tolerance: raw scores, the LogSoftmax forgotten, and NLLLoss (-input[y]) falls
// without bound as the true class's score grows. Log-probabilities normalised over another dim (M6's
// case) or of a subset of the classes are <= 0 and silent.
std::vector<Finding> check_nll_input(const Tensor& input, const LossCheckOptions& opts = {});

// L3: input (any shape) fed to binary cross-entropy. An error when any value is
// outside [0, 1]: logits fed to BCELoss (bug B09); evidence min and max.
std::vector<Finding> check_bce_input(const Tensor& input);
// L3's target rule (kind bce-target-range): BCELoss and BCEWithLogitsLoss read their targets as
// probabilities; finite targets outside [0, 1] (labels 0/255, -1/+1, class indices 0..C-1) warn. The
// loss still computes, and with logits it falls without bound as the model pushes them out.
std::vector<Finding> check_bce_targets(const Tensor& target);

// L4: the loss of the untrained model on its first batch. kind: "cross_entropy",
// "nll" (expected log(num_classes)), "bce" (expected log 2), or anything with
// opts.expected_initial_loss set. A warning when loss / expected is outside
// [opts.initial_loss_low, opts.initial_loss_high], an error when the loss is not
// finite, an info finding with the ratio otherwise. expected_why: where an
// opts.expected_initial_loss came from, in words (the evidence's rule).
std::vector<Finding> check_initial_loss(double loss, int64_t num_classes, const std::string& kind = "cross_entropy",
                                        const LossCheckOptions& opts = {}, const std::string& expected_why = "");

// L4's confirmation: a high initial-loss warning whose ratio is at most
// opts.initial_loss_confirm stays a warning only when `cause_confirmed` (the final bias was found
// to skew the start); otherwise it becomes info (confident logits from the initialisation).
void confirm_initial_loss(std::vector<Finding>& findings, bool cause_confirmed, const LossCheckOptions& opts = {});

// L4 on a model that starts trained: a low initial-loss warning becomes info when the predictions
// (`output`: logits or log-probabilities (B, C) against class indices (B), or one logit or
// probability per row against 0/1 targets) get more of the batch right than chance +
// opts.trained_start_share x (1 - chance), chance being the most frequent class's share. A resumed
// or fine-tuned model starts low because it has learned; an untrained one does not.
void soften_trained_start(std::vector<Finding>& findings, const Tensor& output, const Tensor& target,
                          bool probabilities = false, const LossCheckOptions& opts = {});

// L4 at the end of a run, for a regression's output offset (an InitialOutputBiased warning among
// `found` with a target std): the offset costs the first steps, which learn the targets' mean. When
// L9 judged the run (`fit_judged`) and no finding of the run says it learned too slowly
// (`learned_slowly`: L9 undertrained or its rate probe, a loss stuck, O6 too low, ...), and the run's
// mean loss over its last tenth of steps fell below 1 / (1 + z^2) of its first (z: the offset in
// target stds; for a squared error, below what predicting the targets' mean costs), the run went
// past the offset: info.
void revise_output_init(Report& found, bool fit_judged, bool learned_slowly, const std::vector<double>& step_losses);

// L4's probe of a skewed start (an InitialOutputBiased warning among `start`, class or 0/1
// targets): the forward again with the model's final bias (the last bias with one value per
// output) at 0. When the skew stays, it comes from the features, not a bias: info.
void confirm_final_bias(nn::Module& model, const Tensor& x, const Tensor& y, const Tensor& out,
                        std::vector<Finding>& start, const LossCheckOptions& opts = {},
                        const std::string& loss_type = "");

// L4, the outputs (Karpathy's "initialise well": the final layer's bias against the labels):
// the untrained model's output (B, C) or (B, k) on its first batch against the batch's targets.
// Class indices (B) int64 with C >= 2: the mean softmax probability per class against the class
// frequencies (see LossCheckOptions::initial_output_excess); float targets of 0 and 1 shaped as
// the output: the mean predicted probability (the sigmoid of the output under BCEWithLogitsLoss, the
// output itself under BCELoss; under another loss the output itself when it lies in [0, 1], else its
// sigmoid) against the frequency of 1; other float targets shaped as the output: each column's mean
// output against the target mean, in target stds. Silent on other shapes. `loss_type`: the type name
// of the nn::Loss the outputs go to ("" for a loss function).
std::vector<Finding> check_initial_outputs(const Tensor& output, const Tensor& target,
                                           const LossCheckOptions& opts = {}, const std::string& loss_type = "");

// L5: class targets (B, ...) int64. A warning when every target equals
// ignore_index (a mean over no labels is 0 / 0 = NaN, bug B19); an error when
// the loss computed on them is given and is NaN. Silent while at least one
// label counts. (loss_value is optional rather than NaN by default, so that
// "not given" and "NaN" differ; pass a double as usual.)
std::vector<Finding> check_masked_targets(const Tensor& target, int64_t ignore_index = -100,
                                          std::optional<double> loss_value = std::nullopt);

// L5, the padding a loss reads: in a batch of sequences x (B, T, ...) with targets y (B, T, ...),
// padded positions are a run at the end (or the start) of rows holding one input value (a vector of
// zeros, a pad id) and one target, with lengths that differ between rows, both values rare among the
// real positions (opts.padding_min_share, padding_value_rare). The loss is called once on a detached
// copy of output (B, T, ...) or (B, C, T, ...), moved at the padded positions; a warning when a padded
// position gets at least opts.padding_gradient_ratio x a real position's gradient (a loss that masks
// them gives them exactly 0).
// Silent when the batch holds no padding.
std::vector<Finding> check_padding_in_loss(
    const Tensor& x, const Tensor& output, const Tensor& y,
    const std::function<Tensor(const Tensor& output, const Tensor& target)>& loss, const LossCheckOptions& opts = {});

// L5, padding the model reads: x (B, T) token ids whose rows end (or start) in runs of one rare id, of
// lengths that differ (opts.padding_min_share of the positions or more). The model runs in eval mode without
// gradients on x and on x with T / 2 more pad ids after each row (before it, for left padding); a warning
// (kind padding-read) where the 90th percentile of the rows' output change, over the median row's distance
// from the batch's mean output, is at least opts.padding_read_ratio: the output of a sequence depends on how
// much padding follows it (a recurrent classifier reading the state after the last step of the padded batch).
// Silent when the batch holds no padding, the model takes no longer rows, or its output's shape follows T.
std::vector<Finding> check_padding_read(nn::Module& model, const Tensor& x, const LossCheckOptions& opts = {});

// L5, targets outside the classes that the loss leaves out itself: class targets y (B, ...) int64
// beside the output (B, ..., C) or (B, C, ...), some outside [0, C) other than ignore_index (a pad
// tag of -1 a loss function masks). An info finding when the loss, called on a detached copy of the
// output, is finite and gives their outputs exactly zero gradient. Where the inputs x are token ids of
// the output's vocabulary (C >= 10, every id below C, at least C / 2 distinct ids) and every target lies
// within the outputs, an info finding says so (kind targets-within-outputs): ids no target uses (the pad
// id, tokens nothing precedes) are no missing class (D3) and no labels numbered from 1 (D9). Empty
// otherwise.
std::vector<Finding> check_targets_masked_by_loss(
    const Tensor& x, const Tensor& output, const Tensor& y,
    const std::function<Tensor(const Tensor& output, const Tensor& target)>& loss, int64_t ignore_index = -100);
// D9's out-of-range labels in `data` become info when the gate's L5 found the loss masks them, and its
// "looks 1-indexed" when L5 found every label within the output's classes (targets_within_outputs).
void revise_masked_labels(Report& data, const Report& gate);
bool targets_within_outputs(const Report& gate);
// L4's verdict among `r` that the model started trained (soften_trained_start: resumed, or fine-tuned
// from a model trained on the task).
bool started_trained(const Report& r);
// L1's verdicts among `r` that the loss was unstable: a spike, oscillation, divergence, or a non-finite loss.
bool loss_history_unstable(const Report& r);

// L6, the gradient-scale test: ||dL/dparams|| for the batch (x, y) and for the
// batch concatenated with itself along dim 0. A mean gives the same gradient
// (ratio 1), a sum twice it (ratio 2, bug B03): a warning above
// opts.reduction_ratio, an info finding with the ratio otherwise. Every layer that
// is random in train mode (nn::Dropout or a hand-written one, found by
// probe_mode_dependence) is put in eval mode for the test (its noise would differ
// between the two passes); BatchNorm-like layers stay in training mode (x twice
// has the same batch statistics).
// Afterwards every module's mode, every buffer (BatchNorm running statistics)
// and every parameter's .grad are as they were.
//   x (B, ...), y (B, ...); loss(output, target) must return a 0-dim tensor.
std::vector<Finding> check_loss_reduction(nn::Module& model,
                                          const std::function<Tensor(const Tensor& output, const Tensor& target)>& loss,
                                          const Tensor& x, const Tensor& y, const LossCheckOptions& opts = {});
// L6, statically: a warning when the loss module is declared with
// Reduction::Sum. It cannot see bug B03, which switches mean to sum inside the
// forward: the gradient-scale test above does.
std::vector<Finding> check_loss_reduction(const nn::Loss& loss);

// L6 judged again with what the training loop backpropagated (TrainingHistory::loss_divisors, measured
// on the sampled steps): when every step divided the loss module's value by the terms it summed (a
// summed loss divided by the batch size or by the tokens counted, perhaps also by k accumulated
// batches), `found`'s L6 warnings become info: the steps were a mean's.
void revise_loss_reduction(Report& found, const std::vector<double>& loss_divisors);
// L1's "diverging" turned into info where the loss function gave another value on one fixed output and
// target at the end of the run (`after`) than before it (`before`): the loop changed its objective.
void soften_divergence_of_changed_objective(Report& r, double before, double after);

// L7: the fitting rule on per-epoch losses (gap = val - train, last
// opts.fitting_window epochs averaged; epochs = the number given):
//   train > underfit_train_loss after > min_epochs_underfit epochs  -> warning: underfitting
//   gap > overfit_gap                                               -> warning: overfitting
//     (info where the validation loss fell at each of the last 3 epochs and gap <= overfit_relative_gap x train)
//   gap < normal_gap and train < normal_train_loss                  -> info: normal convergence
//   otherwise                                                       -> info: keep watching
// The loss thresholds are absolute (cross-entropy scale), times loss_unit: the loss of predicting the
// training targets' mean where the loss is a mean squared error (their variance, 1 for standardised
// targets), so that a regression in its own units (MPa, dollars) is judged as if standardised.
std::vector<Finding> diagnose_fitting(const std::vector<double>& train_epoch_losses,
                                      const std::vector<double>& val_epoch_losses, const LossCheckOptions& opts = {},
                                      double loss_unit = 1.0);
// L7's underfitting said by the absolute loss, under a loss of the user's own (a function, or an nn::Loss
// the library does not know: a density's likelihood, a loss with learned task weights): its scale and
// floor are its own, so no level of it says the model underfits. Such a finding becomes info.
void soften_underfitting_of_own_loss(std::vector<Finding>& found);

// L7 on accuracies: a validation accuracy above the training accuracy by more than
// opts.val_accuracy_margin in each of the last opts.val_accuracy_epochs epochs (the training
// accuracy measured in train mode, so dropout already lowers it a little) is suspiciously high:
// the validation rows may be training rows, the labels of the two splits may differ in quality,
// or the split is too small to judge. A warning; empty otherwise.
std::vector<Finding> check_validation_accuracy(const std::vector<double>& train_epoch_accuracy,
                                               const std::vector<double>& val_epoch_accuracy,
                                               const LossCheckOptions& opts = {});
// That warning judged again with the trained model in eval mode on the stored splits (L9's pass):
// where its training accuracy there is within opts.val_accuracy_margin of the validation accuracy
// or above it, the training steps' own randomness (augmentation in the loop, dropout) lowered the
// training accuracy, not the data: info.
void revise_validation_too_good(Report& found, double train_accuracy_eval, double val_accuracy,
                                const LossCheckOptions& opts = {});
// L7's overfitting judged again with each example's loss under the trained model on both stored
// splits (L9's pass, eval mode): where the epochs' gap is within opts.overfit_z standard errors of
// the two splits' mean losses, it is what the validation split's sample holds (a few outlier
// targets more or fewer), not memorised training data: info. Without row losses nothing changes.
// Each of some held-out examples' loss scored alone, under the trained model and under the best
// constant output (one output row trained for all of them).
struct ConstantComparison {
  std::vector<double> model_rows, constant_rows;
};
// L1's train-down-val-up where the trained model's training loss (eval mode, the end of the run) is
// no lower than the training loss near the best epoch: the training data is fitted no better at the
// end, so the validation loss's rise is the weights' noise, not memorisation: info.
void revise_train_down_val_up(Report& found, double train_loss_eval, const LossCheckOptions& opts);
// L1's "training falls while validation rises" and L7's overfitting (judged on the epochs' losses) where the
// loop loaded the best epoch's weights after training (`best_epoch` counted from 0, whose validation loss
// the final model scores): the epochs after it do not reach the final model, info.
void revise_train_down_val_up_restored(Report& found, size_t best_epoch, double final_val_loss);
void revise_overfitting_restored(Report& found, size_t best_epoch, double final_val_loss);
// L1's "stuck" judged again (compare() is asked only where it fires): where the trained model's mean
// loss is below the constant's by more than opts.stuck_beat_z standard errors of the paired
// differences, the loss has a floor of its own that no model removes (heavy-tailed or zero-inflated
// targets, soft targets' entropy), and the finding is info.
void revise_loss_stuck(Report& found, const std::function<ConstantComparison()>& compare,
                       const LossCheckOptions& opts = {});
// ... or where the gate's M15 (in `gate`) found the model using its inputs and the run's last window
// of training losses is below that probe's lowest held-out loss with zeroed inputs by
// opts.stuck_below_baseline: the model does better than any model of the inputs' absence can (a loss
// over the whole batch, as a survival model's partial likelihood, has no per-row constant to compare).
void revise_loss_stuck_by_baseline(Report& found, const Report& gate, const LossCheckOptions& opts = {});
// L6 on the trained model's losses on a split (`split`: "training", "validation"): `batch_loss` its
// mean loss in its batches, `row_losses` each example's loss scored alone. A batch loss below
// opts.rows_cancel_share x the rows' mean (both >= 0, 8 rows or more) warns (kind rows-cancel): the
// loss reduces before it measures the error, and errors of opposite signs cancel. Empty otherwise.
std::vector<Finding> check_rows_cancel(double batch_loss, const std::vector<double>& row_losses,
                                       const std::string& split, const LossCheckOptions& opts = {});
// The rows-cancel warnings in `found` tested on a batch (x, y): with the rows' outputs moved by +c and -c
// in turn (moves that sum to 0), a loss that grows by far more than it was reads each error's size (a
// weighted mean of squares, whatever columns the targets carry), and the warning becomes info; a loss
// that averages the errors first does not move.
void confirm_rows_cancel(std::vector<Finding>& found, nn::Module& model, const Tensor& x, const Tensor& y,
                         const std::function<Tensor(const Tensor& output, const Tensor& target)>& loss);
void revise_overfitting(Report& found, const std::vector<double>& train_row_losses,
                        const std::vector<double>& val_row_losses, const LossCheckOptions& opts = {});
// L7's overfitting judged again where the two splits were scored in batches of different sizes
// (train_batch and val_batch rows): train_loss and val_loss under the trained model, each split in
// its own batches, and val_loss_at_train_batch() (asked only where L7 says overfitting) the
// validation rows scored in whole batches of train_batch. A loss over the batch as a whole (a Cox
// partial likelihood's risk sets, a contrastive loss's negatives) grows with the batch's size: where
// the gap at the training batch's size is within opts.overfit_gap, info.
void revise_overfitting_by_batch_size(Report& found, double train_loss, double val_loss, int64_t train_batch,
                                      int64_t val_batch, const std::function<double()>& val_loss_at_train_batch,
                                      const LossCheckOptions& opts = {});

}  // namespace gradsleuth::debug
