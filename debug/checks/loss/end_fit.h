// L9, the trained model on both splits: the training split evaluated like the validation split (eval
// mode, no gradients) at the end of the run, and the last epochs' training loss. Three properties:
// training labels the model disagrees with (train worse than validation), a generalisation gap (train
// far better than validation), and a run that ended while its loss still fell or whose curve cannot
// tell (the probes' verdict: too few steps, or a learning rate too low).
#pragma once
#include <cstdint>
#include <limits>
#include <vector>

#include "debug/checks/loss/label_tail.h"
#include "debug/evidence/finding.h"

namespace gradsleuth::debug {

struct EndFitOptions {
  // Classification: validation accuracy above the training split's (both in eval mode) by more than
  // this warns: the training labels (or inputs) disagree with what the model learned.
  double labels_margin = 0.06;
  // Training accuracy above validation accuracy by more than this warns (a generalisation gap).
  double gap_margin = 0.2;
  // ... unless the validation predictions follow another numbering of the classes: each class's most
  // frequent prediction (at least remap_classes of them another class than itself, no two the same)
  // takes remap_share of the validation rows or more. The validation labels are then numbered in
  // another order than the training labels (a label map built twice), not a model that memorised.
  double remap_share = 0.6;
  int64_t remap_classes = 2;
  // Weights loaded after the last step (a checkpoint restored, averaged weights copied back): the
  // final model warns when its validation loss lies above restored_rise x the best epoch's, more than
  // that much above the last epoch's, and (classification) its validation accuracy below both by
  // more than restored_accuracy_drop. A best checkpoint restored scores its epoch's numbers; one kept
  // by the accuracy reads the best accuracy, one kept by the loss the best loss. A comparator the
  // wrong way round keeps the worst epoch (the first): 0.62 against 0.97 at the best epoch.
  double restored_rise = 0.1;
  double restored_accuracy_drop = 0.05;
  // ... and it warns (kind restored-last) when the final model's validation loss is the last epoch's
  // (within restored_same of it) while the best epoch's was lower by restored_rise and (classification)
  // the last epoch's accuracy below the best, not tied with it (a restore by the accuracy keeps the
  // last epoch where it is the best): a snapshot that shared storage with the weights (detach() without
  // clone()) restores the last epoch.
  double restored_same = 0.01;
  // The validation accuracy the loop reported for its last epoch (Session::epoch(train, val, accuracy))
  // against the trained model's own on the same split, read the most forgiving way: the least of its
  // accuracy, its balanced accuracy (mean recall per class) and its macro F1, so that a loop that reports
  // either of those on skewed classes is not judged against plain accuracy; for several 0/1 targets per
  // example (multi-label) the exact-match accuracy joins them (a loop that reports the share of images
  // with every label right: 59% against 94% of the labels). Reported below that by
  // reported_accuracy_gap or more, by reported_accuracy_z standard errors of an accuracy on the split
  // (sqrt(2 p (1 - p) / n)), warns: predictions and labels read in two passes of a shuffled loader (10%
  // reported against 84%), a test-time augmentation that flips the wrong axis (70% against 82%).
  double reported_accuracy_gap = 0.1;
  double reported_accuracy_z = 5.0;
  // Both accuracy rules also need the difference to stand out from the splits' sampling noise: a
  // two-proportion z statistic (pooled) of at least min_z.
  double min_z = 3.0;
  // Non-classification: a validation loss above gap_loss_ratio x the training loss (and above it by
  // gap_loss_min) warns.
  double gap_loss_ratio = 3.0, gap_loss_min = 0.1;
  // Still improving at the end: the last epoch's relative drop of the validation loss above
  // still_falling_val and above still_pace x the run's mean relative drop per epoch (the curve has
  // not flattened), the training loss falling too (still_falling), and, for classification, the
  // validation accuracy up by still_rising_accuracy.
  double still_falling = 0.02, still_falling_val = 0.05, still_pace = 0.5;
  // A curve that has not bent: the last window's validation drop at still_steady x the run's mean drop
  // per window or more (a straight line, not a flattening one), both losses above still_falling, counts
  // as still falling under still_falling_val too: a slow run is slow from its first epoch to its last.
  double still_steady = 0.8;
  double still_rising_accuracy = 0.005;
  // A run whose last steps kept more than barely_kept of its first steps' loss barely trained: any
  // drop above barely_falling (both losses, at the same pace) counts, and no accuracy gain is asked.
  double barely_kept = 0.7, barely_falling = 0.005;
  int64_t min_epochs = 2;
  // The probe (at probe_factor x the learning rate, from the initial weights, up to 300 steps): a
  // final loss below probe_better x the run's own final loss says the learning rate was too low.
  // (and below it by probe_min_gain in loss units). Without that confirmation the verdict
  // "undertrained" is info.
  double probe_factor = 10.0, probe_better = 0.5, probe_min_gain = 0.05;
  // ... and only when the run kept more than lr_low_kept of its first loss (mean of its first tenth of
  // steps): a run that learned most of the way at its own lr is slow, not misconfigured.
  double lr_low_kept = 0.5;
  // A run of fewer than few_steps steps (M14's base budget for fitting one batch) that the rate probe
  // helps is also run from its initial weights for probe_factor x its steps at its own rates (its
  // schedule stretched over them): a final loss below probe_better x the run's (and below it by
  // probe_min_gain) says the steps, not the rate, are too few ("undertrained", a warning).
  int64_t few_steps = 150;
  // Otherwise training goes on from the trained weights for as many steps again, with the run's own
  // learning-rate schedule replayed (a constant rate stays the final one): a validation loss that
  // falls by more than continue_gain of its value and by continue_min_gain in loss units, and, for
  // classification, more validation examples turned right than wrong with a McNemar z of at least
  // continue_min_z, says "undertrained" (a warning); without that confirmation it is info.
  double continue_gain = 0.2, continue_min_gain = 0.05, continue_min_z = 2.0;
  // Where the epoch curve still falls at the end, the share of the run's whole improvement still to come,
  // (validation loss at the end - after training on) / (the run's first loss - after training on), read on
  // the run's own loss range, stands in for the floor in loss units from continue_share on (a regression's
  // MSE sits far under 0.05). The same share measured from the loss at the run's first step stands in
  // for the McNemar count too from continue_share_alone on (an accuracy near its ceiling moves by a
  // handful of examples while the loss still falls by a third: 400 validation examples cannot show a
  // point of accuracy, and a curve still falling that steeply is a run stopped early; the healthy
  // corpus's still-falling runs leave 0.037 at most, so both shares sit 1.6x above them), where the
  // model still gets continue_min_z squared validation examples wrong or more. That one starts at the
  // first step, not the first tenth: a rate high enough to learn most of the way within the first
  // tenth of the steps (a loss scaled up under SGD) shrinks the run's own range and inflates the share
  // taken on it.
  double continue_share = 0.06, continue_share_alone = 0.06;
  // Without accuracies (a regression), the examples' own losses before and after training on: a paired
  // z (mean drop over its standard error) of continue_paired_z or more, with the loss after training on
  // below (1 - the gain) x the lowest validation loss of the run's epochs too, stands in for the loss
  // floor when the curve still fell at the end: the loss is the metric, and the drop is noise neither
  // over the examples (the z) nor over the iterates (a noisy curve's best epoch).
  // ... when at least continue_share_paired of the run's improvement was still to come (a run that
  // learned all but a sliver of its range is done, however clearly training on moves that sliver).
  double continue_paired_z = 3.0, continue_share_paired = 0.01;
  // ... over continue_min_steps at least when the run barely moved (it kept more than barely_kept of
  // its first loss): a run of a handful of steps (the whole training set in one batch) gets as many
  // steps as the gate gives a model to fit one batch (M14's base budget), not its own handful again.
  // A run that learned most of the way is judged on its own length.
  int64_t continue_min_steps = 150;
  // When the epoch curve cannot say whether the run had finished (fewer than min_epochs epochs, a
  // schedule that ended at less than annealed_lr of its peak rate, so the curve flattens because the
  // rate did, or fewer than few_steps optimizer steps in all in epochs of fewer than min_epoch_steps
  // steps, where each point of the curve is a step or two), training on decides alone, against the
  // stricter unread_gain.
  int64_t min_epoch_steps = 4;
  double annealed_lr = 0.1, unread_gain = 0.3;
  // The learning-curve probe, run when the split rule above stays quiet but the model does better on
  // its training split than on validation (training accuracy above validation's by more than
  // data_gap; without accuracies, a validation loss above data_gap_loss x the training loss): the
  // run repeated twice from its initial weights, its recorded schedule replayed over as many steps:
  // on all its training examples, and on a fixed data_share of them. When the validation accuracy
  // of the second falls below the first's by more than data_drop, with more validation examples
  // turned wrong than right by a McNemar z of at least data_min_z (without accuracies: a validation
  // loss above data_loss_rise x the first's, and by data_min_loss), the validation score still
  // climbs with the training set's size where the run stops: the gap is the data's
  // ("generalisation-gap", a warning). The repeat on all the examples runs only where the share's
  // repeat falls short of the run itself by the same margin. Runs of more than data_max_steps steps
  // are not repeated. A model short of data fits its training split well beyond validation: the
  // healthy corpus reaches a gap of 0.043 where its learning curve is steepest (batchnorm-mlp), the
  // runs with 80-90% of their examples removed 0.059-0.11, so the probe asks for a gap of data_gap.
  // Without accuracies, a regression near its noise floor keeps a validation loss 1.27x its
  // training loss on 800 rows (weighted MSE, R^2 0.987), while regressions starved of examples end
  // at 5.9x and above (where the memorised rule, 3x, speaks first): the probe asks for data_gap_loss.
  double data_gap = 0.05, data_gap_loss = 1.5;
  double data_share = 0.25;
  double data_drop = 0.065, data_min_z = 3.0;
  double data_loss_rise = 1.3, data_min_loss = 0.08;
  int64_t data_max_steps = 3000;
  // Without accuracies (a regression): a validation loss below (1 - labels_loss_margin) x the
  // training split's, both in eval mode, lower by min_z standard errors of the difference or more
  // (Welch's z, each split's from its examples' losses), warns as the accuracy rule does: the
  // training examples (their inputs or targets) disagree with what the model learned.
  double labels_loss_margin = 0.15;
  // The confident-disagreement rule (debug/checks/loss/label_tail.h), judged when the rules above
  // leave the splits quiet.
  LabelTailOptions labels_tail;
};

// What the end-of-run pass measured (NaN where it could not).
struct EndFitMeasure {
  double train_loss = std::numeric_limits<double>::quiet_NaN(), val_loss = std::numeric_limits<double>::quiet_NaN();
  double train_accuracy = std::numeric_limits<double>::quiet_NaN();
  double val_accuracy = std::numeric_limits<double>::quiet_NaN();
  // Several 0/1 targets per example (multi-label): the validation examples with every target right (the
  // accuracy above counts each target alone).
  double val_exact_match = std::numeric_limits<double>::quiet_NaN();
  int64_t train_examples = 0, val_examples = 0;
  // Most of the model's weights were written by nn::load before the run: a pretrained model fine-tuned,
  // on few examples by design (the learning-curve rule does not call them lost).
  bool pretrained = false;
  // The targets are class ids (int64), whether or not an accuracy was measured (a (B, K, C) output of
  // several heads has none): the learning-curve rule on losses alone is for regressions.
  bool class_labels = false;
  // Classification: the validation rows per (label, prediction) of the trained model, [label][prediction].
  std::vector<std::vector<int64_t>> val_confusion;
  // Validation rows whose class the training pass never met, and the accuracy on the other rows (NaN: none).
  int64_t val_unseen_rows = 0;
  double val_seen_accuracy = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> epoch_train_loss, epoch_val_loss, epoch_val_accuracy;  // per epoch, as training saw them
  // The loop wrote the weights after its last optimizer step (TrainingHistory::weights_loaded_after_run).
  bool loaded_after_run = false;
  // ... and left the weights as the last step made them (TrainingHistory::weights_loaded_unchanged).
  bool loaded_unchanged = false;
  // The probe: the run's mean loss over its last steps and the probe's over its own (NaN: not run).
  double run_window_loss = std::numeric_limits<double>::quiet_NaN();
  double probe_window_loss = std::numeric_limits<double>::quiet_NaN();
  // The run's own mean loss over the same steps as the probe's last tenth (the probe is capped at 300
  // steps; a longer run is compared at the probe's length, not at its own end; NaN: the run's last
  // tenth, run_window_loss, is the same steps).
  double run_probe_window_loss = std::numeric_limits<double>::quiet_NaN();
  // The probe's steps again at the run's own first rates (its last tenth; NaN: not run): the probe and
  // this repeat both leave out what the loop adds around the loader (mixup, augmentation, soft targets),
  // which the run's own losses include.
  double repeat_window_loss = std::numeric_limits<double>::quiet_NaN();
  double run_first_loss = std::numeric_limits<double>::quiet_NaN();      // the run's first tenth of steps
  double run_initial_loss = std::numeric_limits<double>::quiet_NaN();    // its first step (the initial weights)
  double continued_val_loss = std::numeric_limits<double>::quiet_NaN();  // after training on from the end
  // The steps probe's final loss (mean of its last tenth; NaN: not run).
  double steps_probe_window_loss = std::numeric_limits<double>::quiet_NaN();
  // Validation examples (classification) training on turned from wrong to right, and from right to
  // wrong (-1: not counted).
  int64_t continued_fixed = -1, continued_broken = -1;
  // Each validation example's loss alone after training on, in the order of val_row_losses (empty:
  // not measured, as for a classifier).
  std::vector<double> continued_val_row_losses;
  // The first parameter group's learning rate at the last step and its largest over the run (NaN:
  // not recorded).
  double final_lr = std::numeric_limits<double>::quiet_NaN(), peak_lr = std::numeric_limits<double>::quiet_NaN();
  // Gradient clipping was active at nearly every step (O9): it, not the rate, caps the steps.
  bool clipping_caps_steps = false;
  int64_t probe_steps = 0;
  // The run's optimizer steps (0: not recorded).
  int64_t run_steps = 0;
  // The learning-curve probe: the validation split after the run repeated from its initial weights
  // on all its training examples (all_), and on data_share of them (fewer_; NaN: not run), and the
  // validation examples (classification) the first repeat gets right and the second wrong, and the
  // other way (-1: not counted).
  double all_val_loss = std::numeric_limits<double>::quiet_NaN();
  double all_val_accuracy = std::numeric_limits<double>::quiet_NaN();
  double fewer_val_loss = std::numeric_limits<double>::quiet_NaN();
  double fewer_val_accuracy = std::numeric_limits<double>::quiet_NaN();
  int64_t fewer_broken = -1, fewer_fixed = -1;
  double fewer_share = std::numeric_limits<double>::quiet_NaN();
  // Each scored example's loss alone, in eval mode (empty: not measured, as for a classifier).
  std::vector<double> train_row_losses, val_row_losses;
};

// The rule. `still_falling` (out) says whether the probe is worth running (call again with its result);
// `unread` (out) whether the epoch curve cannot tell, so that training on is worth running alone.
std::vector<Finding> check_end_fit(const EndFitMeasure& m, const EndFitOptions& o = {}, bool* still_falling = nullptr,
                                   bool* unread = nullptr);

// The rule on losses alone for a model without accuracies: the training split's loss above
// validation's (EndFitOptions::labels_loss_margin); `loss_split_z` is Welch's z of the training
// examples' mean loss against the validation examples' (positive: training's is the larger; NaN where
// either split's were not measured). The findings (kind train-labels-disagree) are empty when the
// rule does not fire; the evidence adds the loss ratio and the z.
double loss_split_z(const EndFitMeasure& m);
std::vector<Finding> check_loss_split(const EndFitMeasure& m, const EndFitOptions& o = {});
void add_loss_split_evidence(Finding& f, const EndFitMeasure& m, const EndFitOptions& o = {});

// Whether the rule's findings blame a learning rate too low (the 10x probe confirmed it).
bool end_fit_blames_rate(const std::vector<Finding>& findings);

// Whether the learning-curve probe is worth running on what the pass measured: the split rule is
// quiet and the model does better on its training split than on validation (EndFitOptions::data_gap).
bool end_fit_wants_data_probe(const EndFitMeasure& m, const std::vector<Finding>& findings,
                              const EndFitOptions& o = {});

}  // namespace gradsleuth::debug
