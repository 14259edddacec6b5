// Lab 8: data bugs: misalignment, leakage, normalisation, class imbalance and
// sorted batches (README.md in this folder). Declared once for your code
// (lab8.cpp) and the reference solution (solution/lab8.cpp); the grader
// (../grader/grade_lab8.cpp) calls them here and compares with the debug
// module's data checks (debug/checks/data/data_checks.h: D3, D4, D5, D8, D10).
//
// Dimension letters: N = examples in a dataset or split, B = examples in a
// batch, C = classes, D... = one example's features.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "nn/data.h"

namespace gradsleuth::lab8 {

// Task 8.1: does every (x, y) the loader yields exist in `reference` (the data
// as loaded, before any pipeline)? Hash each reference image x to the set of
// labels it has (a duplicated image may have several), then look up every
// example of every batch of the loader's next epoch, loader.batch(loader.epoch(), i),
// without starting that epoch (loader.epoch() is unchanged afterwards).
struct AlignmentCounts {
  int64_t checked = 0;     // examples looked up
  int64_t unknown = 0;     // whose image does not occur in the reference
  int64_t misaligned = 0;  // whose image occurs, but never with this label
};
AlignmentCounts count_misaligned(const nn::Dataset& reference, const nn::DataLoader& loader);

// Task 8.2: per-feature standardisation, fitted on the training split only.
struct Standardiser {
  Tensor mean;  // (D...) float32: the mean over the N examples
  Tensor std;   // (D...) float32: the population standard deviation (divide by N)
};
// Statistics over dim 0 of x (N, D...), N >= 1.
Standardiser fit_standardiser(const Tensor& x);
// (x - mean) / max(std, eps), float32, for x (M, D...).
Tensor standardise(const Standardiser& s, const Tensor& x, double eps = 1e-6);
// x (N_split, D...) of each split, before and after standardisation.
struct Splits {
  Tensor train, val, test;
};
// Fits on raw.train only and transforms all three splits with those statistics.
Splits standardise_splits(const Splits& raw);

// Task 8.3: true when x holds raw 0..255 pixel values: floating point, and its
// finite values are whole numbers in [0, 255] with a maximum above 1.
bool looks_like_raw_pixels(const Tensor& x);
// x / 255 (float32) when x looks like raw pixels, x itself otherwise.
Tensor scale_pixels(const Tensor& x);

// Task 8.4: class imbalance. y (N) integral labels in [0, C).
// The number of examples of each class 0..C-1; gs::Error for a label outside [0, C).
std::vector<int64_t> class_counts(const Tensor& y, int64_t num_classes);
// The largest count over the smallest (inf when a class has no example).
double imbalance_ratio(const std::vector<int64_t>& counts);
// Inverse-frequency weights w_c = N / (C * n_c) (0 for an empty class), float32 (C):
// every class then carries the same total weight in the loss.
Tensor class_weights(const std::vector<int64_t>& counts);
// Recall of each class: of the examples whose label is c, the fraction predicted
// as c (NaN for a class without examples). predicted (N), y (N) integral.
std::vector<double> per_class_recall(const Tensor& predicted, const Tensor& y, int64_t num_classes);

// Task 8.5: batches sorted by class. Over every batch of the loader's next epoch
// (loader.batch(loader.epoch(), i), without starting it; int64 labels (B)):
// the fraction of batches that hold a single class,
double single_class_fraction(const nn::DataLoader& loader);
// the fraction shuffling would give: the mean over the batches of sum_c p_c^B_i,
// with p_c each class's share of all labels in those batches and B_i the batch's size,
double expected_single_class_fraction(const nn::DataLoader& loader);
// and the verdict: single_class_fraction > expected + margin.
bool batches_look_sorted(const nn::DataLoader& loader, double margin = 0.1);

}  // namespace gradsleuth::lab8
