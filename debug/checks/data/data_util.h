// Helpers shared by the data checks' files (internal to checks/data/): reading tensors as doubles, row hashes,
// label rows, broadcasting shapes, and the batch-diversity judgement D8 and the loader checks share.
#pragma once
#include "debug/checks/data/data_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"

namespace gradsleuth::debug::data_detail {

using detail::kNaN;
using detail::make;
using detail::median;
using detail::num;
using detail::pct;
using detail::quantile;

constexpr double kInf = std::numeric_limits<double>::infinity();

inline std::vector<double> doubles(const Tensor& t) {
  NoGradGuard ng;
  return t.detach().to_vector<double>();
}

inline std::string on_device(const Tensor& t) { return t.str() + " on " + t.device().str(); }

// Min/max/mean/std (population) of the finite values, and how many are not finite.
struct Summary {
  int64_t n = 0, nan = 0, inf = 0;
  double min = kNaN, max = kNaN, mean = kNaN, std = kNaN;
  int64_t finite() const { return n - nan - inf; }
};

inline Summary summarize(const std::vector<double>& v) {
  Summary s;
  s.n = static_cast<int64_t>(v.size());
  double sum = 0.0, lo = kInf, hi = -kInf;
  for (double a : v) {
    if (std::isnan(a)) {
      ++s.nan;
      continue;
    }
    if (std::isinf(a)) {
      ++s.inf;
      continue;
    }
    sum += a;
    lo = std::min(lo, a);
    hi = std::max(hi, a);
  }
  const int64_t k = s.finite();
  if (k == 0) return s;
  s.min = lo;
  s.max = hi;
  s.mean = sum / static_cast<double>(k);
  double m2 = 0.0;
  for (double a : v)
    if (std::isfinite(a)) m2 += (a - s.mean) * (a - s.mean);
  s.std = std::sqrt(m2 / static_cast<double>(k));
  return s;
}

inline bool is_whole(double v) { return std::isfinite(v) && v == std::floor(v); }

// A well-mixed 64-bit hash of a byte string (XXH64's construction; row_kernels.cpp).
uint64_t hash_bytes(const void* data, size_t n);

// One hash per row of x (B, D...): its values as contiguous float32, so a
// float32 and a float64 pipeline holding the same image agree (row_kernels.cpp).
std::vector<uint64_t> row_hashes_x(const Tensor& x);

// A label: the hash of its row (as float64, so int64 3 and float 3.0 agree) and
// its first value, for messages.
struct Label {
  uint64_t hash;
  double value;
};

inline std::vector<Label> row_labels(const Tensor& y) {
  const int64_t B = y.dim() == 0 ? 1 : y.size(0);
  std::vector<double> v = doubles(y);
  const size_t F = B > 0 ? v.size() / static_cast<size_t>(B) : 0;
  std::vector<Label> out(static_cast<size_t>(B));
  for (int64_t r = 0; r < B; ++r) out[r] = {hash_bytes(v.data() + r * F, F * sizeof(double)), F > 0 ? v[r * F] : kNaN};
  return out;
}

// The row numbers lo..hi-1: one chunk of a dataset read chunk by chunk.
inline std::vector<int64_t> rows(int64_t lo, int64_t hi) {
  std::vector<int64_t> idx;
  for (int64_t i = lo; i < hi; ++i) idx.push_back(i);
  return idx;
}

inline std::string list_ints(const std::vector<int64_t>& v, size_t max_items = 8) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < max_items; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > max_items) s += ", ... (" + std::to_string(v.size()) + " in all)";
  return s;
}

// NumPy broadcasting that reports failure instead of throwing.
inline bool try_broadcast(const Shape& a, const Shape& b, Shape& out) {
  const size_t n = std::max(a.size(), b.size());
  out = Shape(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) return false;
    out[n - 1 - i] = da == 1 ? db : da;
  }
  return true;
}

// D8 on batches already loaded.
inline std::vector<Finding> diversity(const std::vector<nn::Batch>& batches, const nn::DataLoader& loader,
                                      const DataCheckOptions& opts) {
  std::vector<std::vector<int64_t>> labels;
  std::unordered_map<int64_t, int64_t> freq;
  int64_t total = 0, batch_size = 0;
  std::string shape;
  for (const nn::Batch& b : batches) {
    if (!b.y.defined() || !is_integral(b.y.dtype()) || b.y.dim() != 1) return {};  // not class labels
    if (b.size() < opts.min_batch_for_diversity) continue;
    labels.push_back(b.y.to_vector<int64_t>());
    for (int64_t c : labels.back()) ++freq[c];
    total += b.size();
    batch_size = std::max(batch_size, b.size());
    if (shape.empty()) shape = "x " + shape_str(b.x.shape()) + ", y " + shape_str(b.y.shape());
  }
  if (labels.empty()) return {};
  // Under shuffling a batch of B labels is single-class with probability sum_c p_c^B.
  int64_t single = 0;
  double expected = 0.0;
  for (const auto& l : labels) {
    if (std::all_of(l.begin(), l.end(), [&](int64_t c) { return c == l[0]; })) ++single;
    for (const auto& [c, n] : freq)
      expected += std::pow(static_cast<double>(n) / static_cast<double>(total), static_cast<double>(l.size()));
  }
  const double judged = static_cast<double>(labels.size());
  expected /= judged;
  const double fraction = static_cast<double>(single) / judged;
  if (single == 0 || fraction <= expected + opts.single_class_margin) return {};

  const bool shuffles = loader.options().shuffle_;
  Finding f = make("D8", Severity::Warning,
                   num(single) + " of " + num(static_cast<int64_t>(labels.size())) + " sampled batches of " +
                       loader.dataset().name() + " hold a single class" +
                       (shuffles ? "" : ": the data is sorted and the loader does not shuffle"));
  f.shape = shape;
  f.evidence = {{"batches judged (size >= " + num(opts.min_batch_for_diversity) + ")", judged, ""},
                {"single-class batches", static_cast<double>(single), ""},
                {"single-class fraction", fraction,
                 "> expected + " + fmt_num(opts.single_class_margin) + " = " +
                     fmt_num(expected + opts.single_class_margin) + " warns"},
                {"expected under shuffling (sum_c p_c^B)", expected, ""},
                {"classes in the sample", static_cast<double>(freq.size()), ""},
                {"batch size", static_cast<double>(batch_size), ""},
                {"loader shuffles (1 = yes)", shuffles ? 1.0 : 0.0, ""}};
  f.cause = shuffles
                ? "the loader is set to shuffle, yet its batches hold one class: the order it visits the rows in is "
                  "not a shuffle (a custom order or sampler, a shuffle flag that is ignored, or a dataset whose "
                  "get_batch returns rows grouped by class); each step then sees one class, the gradient chases "
                  "it and the model forgets the others"
                : "the dataset is sorted by class and shuffling is off: each step sees one class, the "
                  "gradient chases that class and the model forgets the others; the loss swings from batch to "
                  "batch and accuracy stays low";
  f.fix =
      "shuffle the training data: nn::DataLoaderOptions().shuffle(true), or shuffle the rows once before "
      "building the dataset (keep shuffle off only for evaluation)";
  return {f};
}

}  // namespace gradsleuth::debug::data_detail

namespace gradsleuth::debug {

// What D7 (target leakage) and D12-D16 read of a split: its first opts.integrity_examples rows, chunk by
// chunk, as a hash per input (row_hashes_x, byte for byte like D4), the label, and the input's mean
// and std per example.
struct SplitSample {
  std::string name;
  int64_t size = 0;  // rows in the dataset
  std::vector<uint64_t> x;
  std::vector<data_detail::Label> y;
  std::vector<double> means, stds;  // per example
  // Tabular inputs (rank-1 examples of at most max_drift_columns values): each row's values,
  // row-major (empty otherwise).
  std::vector<float> columns;
  bool tabular = true;
  bool classes = true;       // every label is one whole number: class indices
  bool float_inputs = true;  // the inputs are floating point (not ids or categories for an embedding)
  // Every input value is a whole number: token ids, categories, one-hot or count features, board
  // states. Such inputs come from a discrete set, where the same input may recur with another outcome.
  bool integral_inputs = true;
  // Every input is int64: indices into a table (token ids, categories for an embedding), whose numeric
  // values carry no distance.
  bool index_inputs = true;
  int64_t label_values = 1;  // values per label row (1: a class or one target)
  std::string shape;         // one example's input shape
  int64_t features = -1;     // its number of values (-1 before the first row)
  // Tabular rows: how many rows share each value of the continuous columns (the median, over adjacent
  // pairs of columns holding fractional values, of rows per distinct pair; 1 below 1.5). Rows joined from
  // a smaller set of items (a pairs dataset, a user's and an article's features per impression) repeat
  // them. D12, D13 and D14 read it.
  double repeats = 1.0;
  int64_t read() const { return static_cast<int64_t>(x.size()); }
  // " (the first N rows read)" when the sample is not the whole split.
  std::string partial() const { return read() < size ? " (the first " + detail::num(read()) + " rows read)" : ""; }
};
// A split's sample: its first opts.integrity_examples rows read through the dataset (split_sample.cpp).
SplitSample read_split(const nn::Dataset& d, const DataCheckOptions& opts);

}  // namespace gradsleuth::debug

namespace gradsleuth::debug::data_detail {

// The two-sample Kolmogorov-Smirnov statistic: the largest distance between the empirical CDFs of a
// and b (non-finite values left out; D2 reports them). NaN when either is empty.
double ks_statistic(std::vector<double> a, std::vector<double> b);
// Next-step prediction over token ids (targets the inputs one step on: y[:, t] == x[:, t + 1] on 90% of the
// target positions of the first `rows` rows of `data`, both int64 (B, T)): the ids that occur in the inputs at
// the first position only and never as a target, such as a start token. Empty otherwise (labels.cpp).
std::set<int64_t> start_tokens(const nn::Dataset& data, int64_t rows = 256);
// The standard-normal z of a chi-square statistic x with k degrees of freedom (Wilson-Hilferty).
double chi_square_z(double x, double k);
// For each of the first n rows of v (rows x F values, row-major), the index of its nearest other row
// among them (squared Euclidean distance, the first on ties), over up to max_features features evenly
// spaced, each centred and divided by its spread over these rows (with floor_spread, by at least the
// features' median spread); features constant over the rows are left out. Empty when no feature varies
// (debug/checks/data/row_kernels.cpp).
std::vector<int64_t> nearest_rows(const std::vector<double>& v, int64_t rows, int64_t n, int64_t max_features,
                                  bool floor_spread);
// Copies of the rarer labels' rows (conflicts.cpp): the mean share, among a split's distinct inputs, of a
// copy's label (each copy after an input's first row, its first row's label) over that of a distinct
// input's label. 1 for rows copied alike (appended twice); under kOversampledShare where the copies are
// the rarer labels' rows (a random oversampler's); NaN without copies or with one label.
constexpr double kOversampledShare = 0.7;
double oversampling_tilt(const SplitSample& s);
// Each column's mean and sample variance (divided by n - 1) over the n rows of row-major c (D columns)
// (column_shares.cpp).
std::vector<double> column_means(const std::vector<float>& c, size_t n, size_t D);
std::vector<double> column_variances(const std::vector<float>& c, size_t n, size_t D, const std::vector<double>& m);
// The 0/1 columns' shares (means) in both splits: `moved`, their largest difference column by column;
// `sorted`, the largest after sorting each split's shares. The same categories coded in another order in
// one split (an encoder fitted on each split apart) move the shares between columns and keep them
// (debug/checks/data/column_shares.cpp).
struct BinaryShares {
  size_t columns = 0;
  double moved = 0.0, sorted = 0.0;
};
BinaryShares binary_shares(const SplitSample& a, const SplitSample& b);
// Tabular rows of class labels: the training split `a` weighted, row by row, by its class's share in
// `b` over its share in `a`, against `b` column by column: the largest mean shift (in pooled standard
// deviations) and the variance ratio farthest from 1 left, and `moved`, the classes' total-variation
// distance; `effective_rows`, the weighted rows' effective number (Kish's). A drift that the class
// shares explain (a balanced validation split beside a long-tailed training split) is gone once the
// rows are weighted. NaN shift: not measured (no class labels, a class of `b` missing from `a`)
// (debug/checks/data/column_shares.cpp).
struct ReweightedDrift {
  double shift = std::numeric_limits<double>::quiet_NaN(), ratio = 1.0, moved = 0.0, effective_rows = 0.0;
};
ReweightedDrift class_reweighted_drift(const SplitSample& a, const SplitSample& b);
// D15 on two splits' samples (debug/checks/data/label_drift.cpp): class labels, or one target per row.
std::vector<Finding> label_drift(const SplitSample& train, const SplitSample& other, const std::string& split,
                                 const DataCheckOptions& opts);

// D9 on float targets of one-hot rows (debug/checks/data/label_encoding.cpp): rows of 0s and 1s, most
// with one 1, some with none (an encoding with fewer columns than classes). Empty when nothing to say.
std::vector<Finding> empty_one_hot_rows(const Tensor& y);
// D9 on 0/1 float targets (N, K): columns that are 1 on every row (an ordinal encoding built with >= for
// >), where another column varies; at least 100 rows (debug/checks/data/label_encoding.cpp).
std::vector<Finding> constant_target_columns(const Tensor& y);
// Robust location and spread of the finite values of v: the 5%, 50% and 95% quantiles (the element at
// floor(q (n - 1)) in order), and spread() = the 5%-95% width in units of a normal's std (3.29 of them).
// A few extreme values (a near-constant pixel standardised to z-scores in the thousands) move a mean and
// a std a lot and these hardly at all (split_consistency.cpp; all 0 without a finite value).
struct RobustQuantiles {
  double q05 = 0, q50 = 0, q95 = 0;
  double spread() const { return (q95 - q05) / 3.29; }
};
RobustQuantiles robust_quantiles(const std::vector<double>& v);

}  // namespace gradsleuth::debug::data_detail
