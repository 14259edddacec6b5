// Lab 8 starter code: data bugs: misalignment, leakage, raw pixels, class imbalance, sorted batches.
// Replace each `throw` marked TODO with your code (README.md, Tasks 8.1-8.5),
// rebuild and grade:   ./run.sh lab check 8
#include "tutorials/lab8_data/lab8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>

#include "core/autograd.h"
#include "core/ops.h"

namespace gradsleuth::lab8 {

// TODO(lab 8, task 1): 1. hash every image of reference.all().x: make it a
// contiguous float32 tensor, then hash the bytes of each row (FNV-1a: h = 14695981039346656037;
// for each byte h = (h ^ byte) * 1099511628211), and map each hash to the labels
// it occurs with (an image may occur twice with different labels).
// 2. for i in [0, loader.num_batches()): b = loader.batch(loader.epoch(), i) (this
// does not start an epoch, unlike `for (auto& b : loader)`); hash each row of
// b.x: not in the map -> unknown; in the map but b.y[r] not among its labels ->
// misaligned. Count every row as checked.
AlignmentCounts count_misaligned(const nn::Dataset& reference, const nn::DataLoader& loader) {
  throw Error("lab 8", "not implemented: lab 8 task 1 (count_misaligned in tutorials/lab8_data/lab8.cpp)");
}

// TODO(lab 8, task 2): in float64 (x.to(kFloat64)): mean = x.mean({0}); std =
// sqrt(mean((x - mean)^2, {0})) (the population std, divided by N); return both
// as float32 (.to(kFloat32)).
Standardiser fit_standardiser(const Tensor& x) {
  throw Error("lab 8", "not implemented: lab 8 task 2 (fit_standardiser in tutorials/lab8_data/lab8.cpp)");
}

// TODO(lab 8, task 2): (x - mean) / max(std, eps): s.std.clamp(eps, std::nullopt)
// keeps a constant feature (std 0) from dividing by zero.
Tensor standardise(const Standardiser& s, const Tensor& x, double eps) {
  throw Error("lab 8", "not implemented: lab 8 task 2 (standardise in tutorials/lab8_data/lab8.cpp)");
}

// TODO(lab 8, task 2): fit on raw.train, and only there; transform all three.
Splits standardise_splits(const Splits& raw) {
  throw Error("lab 8", "not implemented: lab 8 task 2 (standardise_splits in tutorials/lab8_data/lab8.cpp)");
}

// TODO(lab 8, task 3): false unless x is floating point and holds a finite value;
// then true when every finite value v is whole (v == std::round(v)), the
// smallest is >= 0, the largest <= 255 and the largest > 1 (a {0, 1} mask is
// not raw pixels). x.to_vector<double>() gives the values.
bool looks_like_raw_pixels(const Tensor& x) {
  throw Error("lab 8", "not implemented: lab 8 task 3 (looks_like_raw_pixels in tutorials/lab8_data/lab8.cpp)");
}

// TODO(lab 8, task 3): x.to(kFloat32) / 255.0 when it looks raw, else x unchanged.
Tensor scale_pixels(const Tensor& x) {
  throw Error("lab 8", "not implemented: lab 8 task 3 (scale_pixels in tutorials/lab8_data/lab8.cpp)");
}

// TODO(lab 8, task 4): count y.to_vector<int64_t>() into C bins; a label outside
// [0, C), float labels or C <= 0 throw gs::Error (GS_CHECK).
std::vector<int64_t> class_counts(const Tensor& y, int64_t num_classes) {
  throw Error("lab 8", "not implemented: lab 8 task 4 (class_counts in tutorials/lab8_data/lab8.cpp)");
}

// TODO(lab 8, task 4): max / min; +inf (std::numeric_limits<double>::infinity())
// when the smallest count is 0; gs::Error for an empty list.
double imbalance_ratio(const std::vector<int64_t>& counts) {
  throw Error("lab 8", "not implemented: lab 8 task 4 (imbalance_ratio in tutorials/lab8_data/lab8.cpp)");
}

// TODO(lab 8, task 4): N = sum of the counts, C = the number of classes;
// w_c = N / (C * n_c), 0 when n_c = 0; tensor(values, {C}, kFloat32).
Tensor class_weights(const std::vector<int64_t>& counts) {
  throw Error("lab 8", "not implemented: lab 8 task 4 (class_weights in tutorials/lab8_data/lab8.cpp)");
}

// TODO(lab 8, task 4): for each class c: (examples with y == c and predicted == c)
// / (examples with y == c); std::nan("") when there is none.
std::vector<double> per_class_recall(const Tensor& predicted, const Tensor& y, int64_t num_classes) {
  throw Error("lab 8", "not implemented: lab 8 task 4 (per_class_recall in tutorials/lab8_data/lab8.cpp)");
}

// TODO(lab 8, task 5): for i in [0, loader.num_batches()), the labels of
// loader.batch(loader.epoch(), i); the share of batches whose labels are all equal.
double single_class_fraction(const nn::DataLoader& loader) {
  throw Error("lab 8", "not implemented: lab 8 task 5 (single_class_fraction in tutorials/lab8_data/lab8.cpp)");
}

// TODO(lab 8, task 5): count every class over all those batches (p_c = its share);
// for each batch of size B, sum_c p_c^B is the chance that B labels drawn at
// random all fall in one class; return the mean over the batches.
double expected_single_class_fraction(const nn::DataLoader& loader) {
  throw Error("lab 8",
              "not implemented: lab 8 task 5 (expected_single_class_fraction in tutorials/lab8_data/lab8.cpp)");
}

// TODO(lab 8, task 5): single_class_fraction > expected_single_class_fraction + margin.
bool batches_look_sorted(const nn::DataLoader& loader, double margin) {
  throw Error("lab 8", "not implemented: lab 8 task 5 (batches_look_sorted in tutorials/lab8_data/lab8.cpp)");
}

}  // namespace gradsleuth::lab8
