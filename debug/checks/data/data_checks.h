// The data checks D1-D10 and D12-D16 (docs/checks.md; D11 is in dist_checks.h): look at
// batches, labels, loaders, normalisers and splits before training, and say what is wrong
// with the data and how to fix it.
//
//   nn::DataLoader loader(train, nn::DataLoaderOptions().batch_size(64).shuffle(true));
//   debug::Report r;
//   r.add(debug::check_loader(loader, 10));                  // D1 D2 D3 D5 D8 D9 on sampled batches
//   r.add(debug::check_alignment(*raw_train, loader));      // D4: does every (x, y) exist in the data?
//   r.add(debug::check_leakage(norm, train->size()));       // D7: normaliser fitted on train only?
//   r.add(debug::check_duplicates(*train));                  // D12: repeated inputs, conflicting labels
//   r.add(debug::check_splits(*train, *val, "validation"));  // D13-D16: train vs validation
//   std::cout << r.str();
//
// Every check returns the findings it made (empty = nothing to say). Thresholds
// are the named fields of DataCheckOptions. Dimension letters: N = examples,
// B = examples in a batch, C = classes, D... = one example's features, F = prod(D...).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "debug/evidence/finding.h"
#include "nn/data.h"
#include "nn/module.h"

namespace gradsleuth::debug {

struct DataCheckOptions {
  // ---- D3 label distribution ----
  double max_imbalance_ratio = 10.0;  // largest / smallest class count above this warns (so does an empty class)
  // A loss's class weights amplify the imbalance when the classes' masses (count x weight) lie further
  // apart than this x the counts (and than max_imbalance_ratio): weights of count / N on counts 20x
  // apart give 400x; uniform weights give 1x the counts, N / (C x count) weights 1.
  double class_weight_amplifies = 1.5;
  // ... or weights at least this far from uniform (largest / smallest: meant to rebalance) under which the
  // masses lie beyond max_imbalance_ratio and no closer than the counts: weights that do not follow the
  // classes (computed from the counts in another order).
  double class_weight_spread = 2.0;
  // The per-class errors of the trained model on the validation data: a class with at least
  // min_class_examples examples whose recall is below min_recall_ratio x the mean recall of the
  // other classes warns, when that mean is above chance (1 / C) by min_recall_over_chance x.
  // A fifth, not a half: a hard class of a clean run (Fashion-MNIST's pullovers after 40 steps)
  // sits near a third of the others' recall.
  double min_recall_ratio = 0.2;
  double min_recall_over_chance = 1.5;
  // The imbalance warning of the class counts becomes info at the end of a run whose trained model
  // recalls every class at least imbalance_recall_even x the others' mean on the validation data:
  // the imbalance did not cost the rare classes (a tagger's frequent "O" tag, a segmentation's
  // background at 15-20x the other classes, every class recalled at 0.97-1.0).
  double imbalance_recall_even = 0.75;
  int64_t min_class_examples = 10;
  // ... but never where the rarest class (by training count) is recalled below imbalance_rarest_recall x
  // the others' mean and imbalance_rarest_z standard errors of that mean below it: the imbalance cost
  // that class (16 of 612 training rows: 74% against 93%), whatever a hard common class does.
  double imbalance_rarest_recall = 0.85, imbalance_rarest_z = 3.0;
  // ... unless that class is still being learned: its recall at the end at least class_recall_rise x
  // its recall after the first epoch and higher by class_recall_rise_min or more (a class the model
  // confuses with similar ones, Fashion-MNIST's shirts, is learned last): info. A class the model
  // cannot learn stays near where it started.
  double class_recall_rise = 2.0, class_recall_rise_min = 0.1;
  // ---- D4 alignment ----
  int64_t alignment_batches = 20;         // loader batches compared with the reference
  double max_misaligned_fraction = 0.01;  // mismatched (x, y) pairs above this fraction are an error
  // D4 over the run (the Session's monitor): the training rows found in the dataset (at least this many,
  // and half of those seen) whose loss labels follow one relabelling of the dataset's classes less often
  // than loop_alignment_agreement warn; datasets over loop_alignment_max_rows are not hashed.
  int64_t loop_alignment_min_rows = 64;
  double loop_alignment_agreement = 0.75;
  // ... and where the loss's targets are its input's top-scored class in loop_self_label_share of the
  // sampled rows while at most loop_self_label_data_share of the rows found get the dataset's label
  // (classes merged, or no one relabelling kept): the model's own predictions as targets.
  double loop_self_label_share = 0.99, loop_self_label_data_share = 0.5;
  int64_t loop_alignment_max_rows = 1000000;
  double max_unknown_fraction = 0.5;      // inputs not found in the reference above this fraction warn
  int64_t alignment_chunk = 4096;         // rows read per get_batch by D4 and D12-D16 (never the whole dataset)
  // ---- D5 normalisation ----
  // Over the run, with the Session's fitted Normalizer: a feature constant in every training input (at
  // least flat_min_rows rows) that the Normalizer saw vary, whose one value lies flat_far or more of
  // its fitted standard deviations from its fitted mean (in the Normalizer's units), warns: the
  // pipeline flattened it (a clip or a fill on raw values before the normalisation). An indicator that
  // happens to hold one level in 200 rows has that level at its common side, within 0.15 std of its
  // mean (a level 1 std away is held by half the rows); a clip at +-3 on raw values lands 1.8-11 away.
  int64_t flat_min_rows = 200;
  double flat_far = 1.0;
  // |x| at raw_quantile above raw_max means "not scaled". Scaled data stays below
  // it: [0, 1] pixels reach 1, standardised Fashion-MNIST ~2; raw pixels reach 255.
  // A quantile, not the max, so the rare large z-scores of per-feature
  // standardisation (a pixel that is almost always 0) do not count.
  double raw_max = 10.0;
  double raw_quantile = 0.999;
  // Per-feature std: the largest over the std at scale_low_quantile of the
  // non-constant features; above max_scale_ratio, features live on scales that
  // differ by orders of magnitude. The low quantile (not the min) keeps
  // near-constant border pixels from raising false alarms.
  double max_scale_ratio = 100.0;
  double scale_low_quantile = 0.1;
  double constant_rel_std = 1e-6;  // a feature with std <= this * the largest std counts as constant (ignored)
  // On every training row (RowRangeTracker, in the monitor): a row whose largest |value| is above
  // row_range_ratio x the median row's largest |value| of its epoch, and above raw_max, is out of
  // range; judged from row_range_min_rows rows of an epoch on.
  double row_range_ratio = 20.0;
  int64_t row_range_min_rows = 64;
  // ... and whose root mean square is above row_range_rms_ratio x the median row's: a row that skipped
  // the scaling is large throughout (raw pixels: 100x and more), while data standardised per feature has
  // rows with one extreme entry in a near-constant feature (Fashion-MNIST per pixel: a rim pixel at 83,
  // 25x the median row's largest value, its row's RMS 3x the median's).
  double row_range_rms_ratio = 10.0;
  // ---- D8 batch diversity ----
  int64_t diversity_batches = 20;       // batches sampled, evenly spread over the epoch
  int64_t min_batch_for_diversity = 8;  // smaller batches may hold one class by chance: not judged
  // Single-class batches are flagged when their fraction exceeds what shuffling
  // would give (sum over classes of p_c^B) by more than this.
  double single_class_margin = 0.1;
  // ---- D9 label encoding (also D3) ----
  int64_t ignore_index = -100;            // the loss's masked-label value: not a class, not out of range
  int64_t one_indexed_min_per_class = 5;  // "looks 1-indexed" needs at least this many labels per class
  // ---- D10 split consistency ----
  double max_mean_shift = 0.5;  // |mean_other - mean_train| above this many train stds warns
  double max_std_ratio = 2.0;   // std_other / std_train outside [1/r, r] warns
  // ... and over a run, the inputs as the loop hands them to the model (loop_inputs.cpp): the training
  // forwards' against the evaluation forwards', looser than the splits' bars since an augmentation
  // changes them by design (noise of 1-2 input stds widens them 1.4-2.2x; a noise std of 15 on pixels
  // in [0, 1] applied to half the batches, 40x).
  double loop_input_spread_ratio = 4.0;  // spread_train / spread_eval outside [1/r, r] warns
  double loop_input_shift = 1.0;         // |median_train - median_eval| above this many eval spreads warns
  // ... and the mean |Pearson correlation| between the rank_features features that vary most on the
  // evaluation rows, over as many distinct rows of each (up to 600), under this x the evaluation rows'
  // (theirs at max(min_rank_structure, 4 / sqrt(rows)) or more) warns.
  double loop_rank_structure_ratio = 0.5;
  // ... unless the features' rank structure differs too (no preprocessing keeps it then: info):
  // the mean |Spearman rho| over pairs of up to rank_features features (first rank_rows rows) of
  // one split below max_rank_structure_ratio x the other's, the larger at least
  // min_rank_structure. Noise of 1-2 feature stds written into train (the corpus' TAN) divides it
  // by 2-5; a standardisation, a scale or a log leaves it as it is.
  double min_rank_structure = 0.1;
  double max_rank_structure_ratio = 0.7;
  int64_t rank_rows = 2000;
  int64_t rank_features = 32;
  // ---- D12-D16 split integrity ----
  int64_t integrity_examples = 60000;  // D12-D16 read the first N rows of each split (all of Fashion-MNIST)
  // ---- D12 duplicates and conflicting labels ----
  double max_duplicate_fraction = 0.05;  // rows repeating an earlier row's input, above this fraction warns
  double max_conflict_fraction = 0.001;  // rows whose input also occurs with another label, above this warns
  // ... unless the inputs are whole numbers (token ids, categories, one-hot states) repeating on this share
  // of the rows or more: a small discrete set, where repeats (and, for a target random given the input,
  // other labels) are the data's nature. Both D12 and D13 are info then. A next-token model over 20
  // tokens with a context of 3: 28% of 5,000 rows repeat, 46% of the validation rows are training rows.
  double discrete_duplicate_fraction = 0.2;
  // Inputs of whole numbers whose conflicting rows stay at or below this fraction are info: a masked-token
  // model's inputs collide now and then with other answers (0.4% of 4,000 rows); 50 token rows appended
  // again with the next label are 9.5% of theirs.
  double ids_conflict_fraction = 0.01;
  // ---- D13 train-test samples mix ----
  double max_mix_fraction = 0.01;  // validation rows whose input is also a training row, above this warns
  // ---- D14 feature drift ----
  // Two-sample Kolmogorov-Smirnov statistic between the splits' per-example mean
  // (brightness) and per-example std (contrast): above max_drift_ks warns.
  double max_drift_ks = 0.2;
  // D14 over the run: the share of the training rows read before training whose input differs when
  // the split is read again after it (and twice alike: no on-the-fly augmentation): at or above this
  // warns (a normalisation applied to the stored data again at each epoch).
  double max_changed_rows = 0.1;
  // Tabular inputs (one vector of at most max_drift_columns values per example): each column's mean
  // and variance, train against the split, after both are whitened by their pooled within-split
  // covariance (so correlated columns count once). The sum of the squared z statistics (a mean's
  // difference over its standard error; a variance's over the standard error the columns' fourth
  // moments give it) is a chi-square with two degrees of freedom per column; its z of
  // min_column_drift_z or more warns, when some column also moved by a material amount: a mean
  // shifted by min_column_shift pooled standard deviations, or a variance min_column_ratio times the
  // other split's (either way).
  int64_t max_drift_columns = 64;
  // D7's target leakage (check_target_leakage): rows needed, rows per distinct value of a feature
  // that determines the class, and the residual of a feature that is the target up to scale and shift.
  int64_t leak_min_rows = 20;
  int64_t leak_rows_per_value = 4;
  double leak_residual = 1e-4;
  // ... and a feature whose values fall, class by class, in intervals of their own (no overlap), each
  // apart from the next by leak_gap_spread times the largest within-class standard deviation or more:
  // the label with a little noise added. A label that thresholds a feature (y = x0 > 0) has classes
  // that touch, and a feature that separates classes with a margin smaller than its spread is a feature.
  double leak_gap_spread = 2.0;
  double min_column_drift_z = 5.0, min_column_shift = 0.1, min_column_ratio = 1.15;
  int64_t min_drift_examples = 100;  // D14 and D15 judge only when both splits have this many rows (else D16 speaks)
  // ---- D15 label drift and new labels ----
  double max_label_psi = 0.2;  // population-stability index of the class frequencies, above this warns
  // ... and so does a smaller shift that stands out from the counts' sampling noise: a PSI above
  // min_label_psi whose chi-square z (n_eff x PSI, classes - 1 degrees of freedom) is min_label_psi_z.
  double min_label_psi = 0.05, min_label_psi_z = 3.0;
  // D15 on one float target per row (a regression): the Kolmogorov-Smirnov distance between the two
  // splits' targets above this warns. Two random splits of 100 rows each pass 0.28 once in 1,000
  // draws (fewer for more rows); a target log-transformed for training and raw for validation is near 1.
  double max_target_ks = 0.5;
  // D15: new classes that all lie past train's 1st or 99th percentile, on under count_tail_share of the
  // split's rows, beside count_target_classes classes or more in train, are a count's tail (info).
  int64_t count_target_classes = 10;
  double count_tail_share = 0.01;
  // ---- D16 dataset size comparison ----
  int64_t min_val_examples = 100;  // a validation split smaller than this warns
  double min_val_ratio = 0.01;     // validation / train rows below this warns
  // A split under min_val_examples that holds at least this share of all the rows (train + split) is a
  // small dataset split well (80/20 of 120 rows), not too little held out: said as info.
  double small_dataset_val_share = 0.1;
  // Two subsets of one dataset (a train/validation split) whose held-out side has this many times the
  // training rows or more: the split's fraction given for the other side (90% held out).
  double max_val_ratio = 4.0;
};

// D1: one info finding describing a batch: shape, dtype, device of x and y;
// min/max/mean/std of x; labels' min/max and distinct values (mean/std if float).
// x (B, D...), y (B) int64 or (B, ...) float.
std::vector<Finding> check_batch(const Tensor& x, const Tensor& y);

// D2: an error per tensor (x, and y when floating) holding NaN or Inf, with the counts.
std::vector<Finding> check_finite_inputs(const Tensor& x, const Tensor& y);
// D2, failing loudly: throws gs::Error with the finding's text when x or y is not finite.
void require_finite_inputs(const Tensor& x, const Tensor& y);

// D3: class counts and the imbalance ratio (largest / smallest count). A warning
// when the ratio exceeds opts.max_imbalance_ratio or a class has no example,
// an info finding with the counts otherwise. labels (N) integral; num_classes <= 0:
// inferred as max + 1.
std::vector<Finding> check_label_distribution(const Tensor& labels, int64_t num_classes,
                                              const DataCheckOptions& opts = {});

// D3's probe of an imbalance: a loss with per-class weights gives each class a mass count x
// weight; when those masses are within opts.max_imbalance_ratio the loss compensates on purpose,
// and check_label_distribution's imbalance warning among `findings` becomes info. When they lie
// further apart than max_imbalance_ratio and than opts.class_weight_amplifies x the counts themselves,
// the weights grow with the counts (count / N for N / count): a warning of kind class-weights-amplify; so
// are weights at least opts.class_weight_spread from uniform under which the masses lie no closer than the
// counts (weights computed from the counts in another order).
void weigh_class_counts(std::vector<Finding>& findings, const Tensor& class_weight, const DataCheckOptions& opts = {});

// D3 on the model's predictions: per class (index = label) the validation examples and how
// many of them the model predicts right. A warning names the classes whose recall is below
// opts.min_recall_ratio x the mean recall of the other classes (each class with at least
// opts.min_class_examples examples; the others' mean above opts.min_recall_over_chance / C);
// an info finding with the recalls otherwise; nothing with fewer than two classes to compare.
// first_recall (per class, after the first epoch; empty: unknown) tells a class still being learned.
std::vector<Finding> check_class_errors(const std::vector<int64_t>& examples, const std::vector<int64_t>& correct,
                                        const DataCheckOptions& opts = {},
                                        const std::vector<double>& first_recall = {});

// D3's imbalance warning among `data` (class counts, no empty class) becomes info when `recall`, the
// findings of check_class_errors on the trained model, shows every class recalled at least
// opts.imbalance_recall_even x the others' mean, each class with enough validation examples to judge;
// or the rarer half of the classes (by their training counts) recalled on average at least
// opts.imbalance_recall_even x the commoner half, each rare class with opts.min_class_examples.
void revise_class_imbalance(Report& data, const std::vector<Finding>& recall, const DataCheckOptions& opts = {});
// D3's empty classes become info: for a model over token ids that scores their whole vocabulary (L5's
// targets_within_outputs), ids no target uses (the pad id, tokens nothing precedes) are no missing class.
void revise_unused_class_zero(Report& data);

// D4: is every (x, y) the loader yields a pair that exists in `reference`? The
// reference (the data as loaded, before any pipeline) is hashed chunk by chunk,
// x -> the set of labels it has (duplicated images may have several). Then the
// first opts.alignment_batches batches of the loader's current epoch are looked
// up. An error when more than opts.max_misaligned_fraction of the examples carry
// a label their image never has (bug B07: inputs shuffled without their labels);
// a warning when most inputs are not in the reference at all (a transform in the
// loader, or the wrong reference).
std::vector<Finding> check_alignment(const nn::Dataset& reference, const nn::DataLoader& loader,
                                     const DataCheckOptions& opts = {});

// D5: x (N, D...) a sample of inputs. Warns on unscaled inputs (raw 0..255 pixels:
// bug B25) and on features whose scales differ by orders of magnitude. Integral
// inputs (token ids for an embedding) are not judged.
std::vector<Finding> check_normalisation(const Tensor& x, const DataCheckOptions& opts = {});
// D5 on float targets y (N, K), K >= 2 (a multi-output regression, a multi-task target): a warning (kind
// target-scales) where a continuous column in raw units (std >= 10, 10 distinct values or more) has
// max_scale_ratio x or more the std of another column: under one loss its error swamps the others'.
std::vector<Finding> check_target_scales(const Tensor& y, const DataCheckOptions& opts = {});

// D5 judged again on what the model's first layer with a weight matrix (a Linear, a Conv) receives
// from the batch x, in training mode with the randomness off (modes, buffers and warnings put back):
// a model that scales its inputs itself (x / 255 in its forward, a BatchNorm in front) makes raw
// loader values fine, and `found`'s D5 warnings about the batch's scale become info. Nothing changes
// when that input still warns, or when no such layer runs.
void revise_normalisation(Report& found, nn::Module& model, const Tensor& x, const DataCheckOptions& opts = {});

// D6: before the loss: do prediction and target have shapes that broadcasting
// would silently enlarge? prediction (B, 1) vs target (B) -> (B, B) (bug B01), or
// the reverse. Silent for equal shapes and for classification: prediction (B, C, ...)
// floating with an integral target (B, ...).
std::vector<Finding> check_label_shape(const Tensor& prediction, const Tensor& target);

// D7: an error when the normaliser was fitted on anything but "train" (bug B06),
// or on more rows than the training split has (train_size >= 0). For a Global
// normaliser, count() is in values: pass values_per_example (F) to compare rows.
// held_out_size (the validation split's rows, when known) and source_sizes (the sizes of
// the datasets the training split was cut from) grade the second: an error where the rows
// fitted are the training and validation splits together or a dataset the split was cut
// from; a warning up to 2x the labelled rows (train + validation: the whole labelled data
// with a test split); info beyond (a corpus far larger than the labelled data, as
// pretraining images are: fine where it holds no validation or test rows).
std::vector<Finding> check_leakage(const nn::Normalizer& norm, int64_t train_size = -1, int64_t values_per_example = -1,
                                   int64_t held_out_size = 0, const std::vector<int64_t>& source_sizes = {});
// D7 against the training split itself (its size, example shape and the datasets it was cut
// from), and the validation split where given.
std::vector<Finding> check_leakage(const nn::Normalizer& norm, const nn::Dataset& train,
                                   const nn::Dataset* val = nullptr);

// D8: over opts.diversity_batches batches of the loader's current epoch (evenly
// spread over it, via loader.batch), with int64 class labels: warns when more
// batches hold a single class than shuffling would give (bug B28: sorted data,
// shuffle off). Silent for float targets.
std::vector<Finding> check_batch_diversity(const nn::DataLoader& loader, const DataCheckOptions& opts = {});

// D9: class labels y (N, ...) must be integral, 0-indexed and inside [0, C).
// Errors: float labels (say how to convert; one-hot rows are recognised), labels
// outside [0, C) (values equal to opts.ignore_index are masked, not wrong).
// Warning: 0 never occurs while 1..C do (1-indexed labels, bug B26). num_classes <= 0:
// unknown, so only the negative and 1-indexed rules apply.
std::vector<Finding> check_label_encoding(const Tensor& y, int64_t num_classes, const DataCheckOptions& opts = {});
// D9's "not whole numbers" made info where the loss is the user's own (`loss_name`: its type name, ""
// for a loss function) and each target row holds several values: a target packed for that loss.
void revise_encoding_for_own_loss(std::vector<Finding>& fs, const std::string& loss_name);

// D10: after preprocessing, does `split` ("val", "test") look like train? Warns when
// the medians differ by more than opts.max_mean_shift robust train stds (the
// 5%-95% quantile width / 3.29) or those widths by more than a factor
// opts.max_std_ratio (e.g. train standardised, test left raw). Robust statistics:
// a few extreme values (per-feature standardisation of a near-constant pixel)
// do not count.
// train_x (N, D...), other_x (M, D...).
std::vector<Finding> check_split_consistency(const Tensor& train_x, const Tensor& other_x,
                                             const std::string& split = "test", const DataCheckOptions& opts = {});
// The same, given each split's labels too (one class index or one float target per row; an
// undefined tensor leaves them out): a per-feature preprocessing step keeps what an example's
// nearest neighbour says about its label, so a split where it says far less than in the other
// carries noise or comes from another source, and the finding is info (D14 and L9 say more).
// Distances over up to opts.rank_features features, each standardised on its own split, on the
// first 600 rows of each.
std::vector<Finding> check_split_consistency(const Tensor& train_x, const Tensor& train_y, const Tensor& other_x,
                                             const Tensor& other_y, const std::string& split,
                                             const DataCheckOptions& opts = {});

// D10 on one split read twice: the same rows (first_read and again, the same indices) must give the
// same inputs. A validation split whose inputs change from one read to the next runs a random
// transform (the training pipeline's augmentation) or draws new data at each read: its scores then
// move between passes with the same weights, and an augmentation lowers them. A warning when any
// value differs; nothing when the shapes differ.
std::vector<Finding> check_split_repeatable(const Tensor& first_read, const Tensor& again,
                                            const std::string& split = "validation");

// D12: within one split (the first opts.integrity_examples rows of `data`), inputs that
// occur more than once, hashed byte for byte as D4 does. A warning when the repeated rows
// (every copy after the first) exceed opts.max_duplicate_fraction, or when the rows whose
// input also occurs with a different label exceed opts.max_conflict_fraction; an info
// finding with the counts when there are a few; nothing when every input is unique.
std::vector<Finding> check_duplicates(const nn::Dataset& data, const DataCheckOptions& opts = {});
// D12 on near copies: rows of the training split and of `split` (x (N, D...) floating point, y class
// indices or a binary task's 0/1 targets; up to 1,000 rows of each). A warning names a pair of classes
// whose training rows have the other class's rows as nearest neighbours as often as their own while the
// split's rows tell the two apart, where every other class keeps most of its agreement: a training-only
// transform that turns one class into the other (a flip of a LEFT arrow) and keeps the label. Nothing
// for other labels or inputs, or fewer than 40 rows of the pair in either split.
std::vector<Finding> check_neighbour_conflicts(const Tensor& train_x, const Tensor& train_y, const Tensor& other_x,
                                               const Tensor& other_y, const std::string& split = "validation");

// D13: validation (`split`) rows whose input is byte for byte a training row. Warns above
// opts.max_mix_fraction of the validation rows read; an info finding for fewer.
std::vector<Finding> check_train_test_mix(const nn::Dataset& train, const nn::Dataset& other,
                                          const std::string& split = "validation", const DataCheckOptions& opts = {});

// D14: feature drift. The two-sample Kolmogorov-Smirnov statistic (the largest distance
// between the two empirical CDFs) of the per-example mean and of the per-example std of
// the inputs, train against `split`. Warns when either exceeds opts.max_drift_ks; judged
// only when both splits have opts.min_drift_examples rows. Tabular inputs (a vector of at most
// opts.max_drift_columns values per example) are also compared column by column: the whitened
// columns' means and variances (opts.min_column_drift_z, min_column_shift, min_column_ratio).
std::vector<Finding> check_feature_drift(const nn::Dataset& train, const nn::Dataset& other,
                                         const std::string& split = "validation", const DataCheckOptions& opts = {});

// D15: label drift and new labels, for class labels (one integral value per row). Warns
// on classes of `split` that never occur in train (new labels), and when the
// population-stability index sum_c (p_split - p_train) ln(p_split / p_train) over the
// classes train has exceeds opts.max_label_psi. Judged when both splits have
// opts.min_drift_examples rows. One float target per row (a regression): the two splits' targets
// against each other (Kolmogorov-Smirnov above opts.max_target_ks warns, kind target-drift).
std::vector<Finding> check_label_drift(const nn::Dataset& train, const nn::Dataset& other,
                                       const std::string& split = "validation", const DataCheckOptions& opts = {});
// D15's balanced evaluation of an imbalanced training split, where D3 found the imbalance compensated
// (the loss's class weights even it out, or the trained model recalls the rarer classes about as well
// as the commoner): a long tail trained on purpose, info.
void revise_balanced_evaluation(Report& data);

// D16: dataset size comparison. Warns when `split` has fewer than opts.min_val_examples
// rows, or fewer than opts.min_val_ratio x the training rows (an empty split included).
std::vector<Finding> check_split_sizes(const nn::Dataset& train, const nn::Dataset& other,
                                       const std::string& split = "validation", const DataCheckOptions& opts = {});

// D16 on how one dataset was split: the held-out subset opts.max_val_ratio times the training subset
// or more (both nn::Subset of one base) warns: the shares look swapped. check_split_sizes includes it.
std::vector<Finding> check_split_shares(const nn::Dataset& train, const nn::Dataset& other,
                                        const std::string& split = "validation", const DataCheckOptions& opts = {});

// D13, D14, D15 and D16 with each split read once.
std::vector<Finding> check_splits(const nn::Dataset& train, const nn::Dataset& other,
                                  const std::string& split = "validation", const DataCheckOptions& opts = {});

// What D12-D16 read of a split (its first opts.integrity_examples rows: a hash, the label, the
// mean and std of each), read once for D12 and D13-D16 both (debug::diagnose does):
//   auto train_rows = read_split_sample(train, opts);
//   check_duplicates(*train_rows, opts); check_splits(*train_rows, *read_split_sample(val, opts), "validation", opts);
// The findings are those of the functions above on the datasets.
struct SplitSample;

// D14 over the run: the training split `train` read again after training (and, where it differs from
// `before`, the rows read before training, read once more: a dataset that augments on the fly reads
// differently each time, and is not judged): inputs changed in place (a normalisation applied again
// at each epoch, a transform written back into the stored tensor) on opts.max_changed_rows of the
// rows or more warn.
std::vector<Finding> check_training_rows_changed(const nn::Dataset& train, const SplitSample& before,
                                                 const DataCheckOptions& opts = {});
std::shared_ptr<const SplitSample> read_split_sample(const nn::Dataset& data, const DataCheckOptions& opts = {});
// D3's empty classes (labels.cpp) and D9's "looks 1-indexed" (label_encoding.cpp) where `data` is next-step
// prediction over token ids and the missing class is a start token (data_detail::start_tokens): info.
void revise_start_token_classes(std::vector<Finding>& fs, const nn::Dataset& data);
// D3's per-class recall (labels.cpp) where the class missed is the rarest in training, at most a tenth of the
// median class, and the data phase found the loss's class weights compensating the counts: info (the data is
// too thin for that class; the loop did what it should).
void revise_rare_class_recall(std::vector<Finding>& recall, const Report& data);
void revise_start_token_labels(std::vector<Finding>& fs, const nn::Dataset& data);
// D14's column drift (in `found`, from check_splits) judged again where the training dataset draws its
// rows afresh at each read (noise added as augmentation): its first 2,000 rows are read again, and
// half the mean squared difference per column is the noise's variance. Less that noise, columns whose
// variances match the split's, with no mean shift, make the finding info; a noise of a column's own
// variance in the split or more keeps the warning and says the augmentation swamps that column.
void revise_column_drift_by_augmentation(std::vector<Finding>& found, const nn::Dataset& train_data,
                                         const SplitSample& train, const SplitSample& other,
                                         const std::string& split = "validation", const DataCheckOptions& opts = {});
// D14's per-example drift (an image's brightness or contrast, in `found`) where the training dataset
// changes its rows at each read: its first 2,000 rows read again, a tenth or more of them with another
// per-example mean, make it an augmentation's drift (kind augmentation-swamps): the training inputs
// unlike the split's, whatever the split holds.
void revise_example_drift_by_augmentation(std::vector<Finding>& found, const nn::Dataset& train_data,
                                          const SplitSample& train, const std::string& split = "validation");
std::vector<Finding> check_duplicates(const SplitSample& data, const DataCheckOptions& opts = {});
std::vector<Finding> check_splits(const SplitSample& train, const SplitSample& other,
                                  const std::string& split = "validation", const DataCheckOptions& opts = {});

// D7, target leakage, on the training split's tabular floating-point rows (at most max_drift_columns
// values each; integer inputs are ids for an embedding, left out): a feature that is the label
// recoded. Class indices: a feature with one value per class, each value on one class only (and on
// leak_rows_per_value rows or more on average), or whose classes lie in separate intervals, apart by
// leak_gap_spread within-class standard deviations or more (each class on leak_rows_per_value rows or
// more). One target per row (regression, two features
// or more): a feature equal to the target up to a scale and a shift (the largest residual at most
// leak_residual x the target's std). One warning, the first such feature; nothing below leak_min_rows rows.
std::vector<Finding> check_target_leakage(const SplitSample& train, const DataCheckOptions& opts = {});

// D5 on every training row, each epoch (UMLAUT's "input not normalised" takes the min and max of
// the training inputs each epoch): the monitor hands it every training batch it sees (a forward
// with gradients on), and it keeps each row's largest |value| (a float per row, one pass over the
// batch, host float32 batches only) in a fixed amount of memory: a histogram of the row maxima
// (8 bins per power of 2, for the median) and the kTop largest rows. At the end of an epoch (end_epoch(), and
// findings() for the last one) a row whose largest |value| is above row_range_ratio x the epoch's median row's and
// above raw_max, with a root mean square above row_range_rms_ratio x the median row's, is out of range: one
// warning, the first epoch that has such rows. Data scaled as a
// whole is silent (every row alike); data never scaled at all is the batch rule's (the median row
// is then large too): this finds the few rows that skipped the scaling.
class RowRangeTracker {
 public:
  explicit RowRangeTracker(DataCheckOptions o = {}) : o_(o) {}
  void record(const Tensor& x, int64_t step);  // x (N, D...): one training batch
  void end_epoch();
  std::vector<Finding> findings();  // judges the epoch in progress too
  int64_t rows_seen() const { return rows_total_; }

 private:
  struct Row {
    float max_abs, rms;
    int64_t step, row;
  };
  static constexpr int kBins = 2048, kTop = 64;
  void add_row(float max_abs, float rms, int64_t step, int64_t row);
  DataCheckOptions o_;
  std::vector<int64_t> hist_ = std::vector<int64_t>(kBins, 0);      // this epoch's row maxima, by log2 x 8
  std::vector<int64_t> rms_hist_ = std::vector<int64_t>(kBins, 0);  // and its rows' root mean squares
  std::vector<Row> top_;                                        // its kTop largest rows (a min-heap)
  int64_t epoch_ = 1, rows_ = 0, rows_total_ = 0;
  std::vector<Finding> found_;
};

// D8 over a run: a fingerprint of a training batch (a 64-bit hash of its shape and 64 values spread
// over it), and the judgement of a run's fingerprints, one per step: 90% or more of the steps fed
// the same batch as the step before, though the training loader has `loader_batches` >= 2 batches
// (judged from 10 steps on).
uint64_t batch_fingerprint(const Tensor& x);
std::vector<Finding> check_repeated_batches(const std::vector<uint64_t>& step_inputs, int64_t loader_batches);

// D1, D2, D3, D5, D8 and D9 on opts.diversity_batches batches of the loader's
// current epoch (evenly spread; D1 describes the first of them). num_classes <= 0
// for regression targets or when unknown (D3 then infers it, D9 checks less).
std::vector<Finding> check_loader(const nn::DataLoader& loader, int64_t num_classes, const DataCheckOptions& opts = {});

// The batch numbers the loader checks look at: min(n, num_batches) of them,
// evenly spread over [0, num_batches), first and last included.
std::vector<int64_t> spread_batches(const nn::DataLoader& loader, int64_t n);

}  // namespace gradsleuth::debug
