// The data checks D1-D10 and D12-D16 (see data_checks.h): batch summaries, non-finite
// inputs, labels, alignment, normalisation, leakage, shuffling, split consistency,
// duplicates, and train against validation (samples mix, drift, new labels, sizes).
#include "debug/data_checks.h"

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
#include "debug/check_util.h"

namespace gradsleuth::debug {

namespace {

using detail::kNaN;
using detail::make;
using detail::median;
using detail::num;
using detail::pct;
using detail::quantile;

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> doubles(const Tensor& t) {
  NoGradGuard ng;
  return t.detach().to_vector<double>();
}

std::string on_device(const Tensor& t) { return t.str() + " on " + t.device().str(); }



// Min/max/mean/std (population) of the finite values, and how many are not finite.
struct Summary {
  int64_t n = 0, nan = 0, inf = 0;
  double min = kNaN, max = kNaN, mean = kNaN, std = kNaN;
  int64_t finite() const { return n - nan - inf; }
};

Summary summarize(const std::vector<double>& v) {
  Summary s;
  s.n = static_cast<int64_t>(v.size());
  double sum = 0.0, lo = kInf, hi = -kInf;
  for (double a : v) {
    if (std::isnan(a)) { ++s.nan; continue; }
    if (std::isinf(a)) { ++s.inf; continue; }
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

bool is_whole(double v) { return std::isfinite(v) && v == std::floor(v); }


// FNV-1a, 64 bit: a fast, well-mixed hash of a byte string.
uint64_t fnv1a(const void* data, size_t n) {
  uint64_t h = 14695981039346656037ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

// One hash per row of x (B, D...): its values as contiguous float32, so a
// float32 and a float64 pipeline holding the same image agree.
std::vector<uint64_t> row_hashes_x(const Tensor& x) {
  NoGradGuard ng;
  const int64_t B = x.dim() == 0 ? 1 : x.size(0);
  std::vector<float> v = x.detach().to_vector<float>();
  const size_t F = B > 0 ? v.size() / static_cast<size_t>(B) : 0;
  std::vector<uint64_t> h(static_cast<size_t>(B));
  for (int64_t r = 0; r < B; ++r) h[r] = fnv1a(v.data() + r * F, F * sizeof(float));
  return h;
}

// A label: the hash of its row (as float64, so int64 3 and float 3.0 agree) and
// its first value, for messages.
struct Label {
  uint64_t hash;
  double value;
};

std::vector<Label> row_labels(const Tensor& y) {
  const int64_t B = y.dim() == 0 ? 1 : y.size(0);
  std::vector<double> v = doubles(y);
  const size_t F = B > 0 ? v.size() / static_cast<size_t>(B) : 0;
  std::vector<Label> out(static_cast<size_t>(B));
  for (int64_t r = 0; r < B; ++r)
    out[r] = {fnv1a(v.data() + r * F, F * sizeof(double)), F > 0 ? v[r * F] : kNaN};
  return out;
}

// The row numbers lo..hi-1: one chunk of a dataset read chunk by chunk.
std::vector<int64_t> rows(int64_t lo, int64_t hi) {
  std::vector<int64_t> idx;
  for (int64_t i = lo; i < hi; ++i) idx.push_back(i);
  return idx;
}

std::string list_ints(const std::vector<int64_t>& v, size_t max_items = 8) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < max_items; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > max_items) s += ", ... (" + std::to_string(v.size()) + " in all)";
  return s;
}

// NumPy broadcasting that reports failure instead of throwing.
bool try_broadcast(const Shape& a, const Shape& b, Shape& out) {
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
std::vector<Finding> diversity(const std::vector<nn::Batch>& batches, const nn::DataLoader& loader,
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
                   num(single) + " of " + num(static_cast<int64_t>(labels.size())) +
                       " sampled batches of " + loader.dataset().name() + " hold a single class" +
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
  f.fix = "shuffle the training data: nn::DataLoaderOptions().shuffle(true), or shuffle the rows once before "
          "building the dataset (keep shuffle off only for evaluation)";
  return {f};
}

}  // namespace

// ---- D1 batch sanity report ------------------------------------------------------

std::vector<Finding> check_batch(const Tensor& x, const Tensor& y) {
  GS_CHECK(x.defined() && y.defined(), "check_batch", "needs a defined input x and target y");
  Finding f = make("D1", Severity::Info, "batch: x " + on_device(x) + ", y " + on_device(y));
  f.shape = "x " + shape_str(x.shape()) + ", y " + shape_str(y.shape());
  const Summary sx = summarize(doubles(x));
  f.evidence = {{"x min", sx.min, ""}, {"x max", sx.max, ""}, {"x mean", sx.mean, ""}, {"x std", sx.std, ""}};
  if (sx.nan + sx.inf > 0)
    f.evidence.push_back({"x non-finite values", static_cast<double>(sx.nan + sx.inf), "D2: any is an error"});
  if (is_integral(y.dtype(), true)) {
    std::vector<int64_t> v = y.to_vector<int64_t>();
    std::set<int64_t> distinct(v.begin(), v.end());
    f.evidence.push_back({"y min", v.empty() ? kNaN : static_cast<double>(*distinct.begin()), ""});
    f.evidence.push_back({"y max", v.empty() ? kNaN : static_cast<double>(*distinct.rbegin()), ""});
    f.evidence.push_back({"y distinct values", static_cast<double>(distinct.size()), ""});
  } else {
    const Summary sy = summarize(doubles(y));
    f.evidence.push_back({"y min", sy.min, ""});
    f.evidence.push_back({"y max", sy.max, ""});
    f.evidence.push_back({"y mean", sy.mean, ""});
    f.evidence.push_back({"y std", sy.std, ""});
  }
  f.fix = "compare with what the model expects: x scaled to [0, 1] or mean ~0 / std ~1 (D5), class labels int64 "
          "in [0, C) (D9), regression targets the shape of the prediction (D6)";
  std::vector<Finding> out{f};
  if (x.dim() >= 1 && y.dim() >= 1 && x.size(0) != y.size(0)) {
    Finding g = make("D1", Severity::Error,
                     "x has " + num(x.size(0)) + " rows but y has " + num(y.size(0)) + ": inputs and targets disagree");
    g.shape = f.shape;
    g.evidence = {{"x rows", static_cast<double>(x.size(0)), "must equal y rows"},
                  {"y rows", static_cast<double>(y.size(0)), ""}};
    g.cause = "x and y were built or sliced separately (a different subset, a dropped row, a batch dim lost)";
    g.fix = "build both from the same row indices (nn::TensorDataset checks this) and check their dim 0";
    out.push_back(g);
  }
  return out;
}

// ---- D2 non-finite inputs ----------------------------------------------------------

std::vector<Finding> check_finite_inputs(const Tensor& x, const Tensor& y) {
  GS_CHECK(x.defined() && y.defined(), "check_finite_inputs", "needs a defined input x and target y");
  std::vector<Finding> out;
  auto one = [&](const Tensor& t, const std::string& which) {
    if (!t.is_floating_point()) return;  // integers and bools are always finite
    const std::vector<double> v = doubles(t);
    int64_t nan = 0, inf = 0, first = -1;
    std::set<int64_t> rows;
    const int64_t B = t.dim() == 0 ? 1 : t.size(0);
    const int64_t F = B > 0 ? static_cast<int64_t>(v.size()) / B : 1;
    for (size_t i = 0; i < v.size(); ++i) {
      if (std::isfinite(v[i])) continue;
      (std::isnan(v[i]) ? nan : inf) += 1;
      rows.insert(static_cast<int64_t>(i) / std::max<int64_t>(F, 1));
      if (first < 0) first = static_cast<int64_t>(i) / std::max<int64_t>(F, 1);
    }
    if (nan + inf == 0) return;
    Finding f = make("D2", Severity::Error,
                     which + " holds " + num(nan) + " NaN and " + num(inf) + " Inf values (in " +
                         num(static_cast<int64_t>(rows.size())) + " of " + num(B) + " rows)");
    f.shape = t.str();
    f.evidence = {{"NaN values", static_cast<double>(nan), "any is an error"},
                  {"Inf values", static_cast<double>(inf), "any is an error"},
                  {"rows affected", static_cast<double>(rows.size()), ""},
                  {"first bad row", static_cast<double>(first), ""}};
    f.cause = "missing values in the source (empty cells read as NaN), a division by zero or log(0) in "
              "preprocessing (standardising a constant feature with std 0), or an overflow; one NaN input turns "
              "the loss, then every gradient and weight, into NaN";
    f.fix = "look at the bad rows (first: row " + num(first) +
            "), then drop, impute or fix them at the source; guard divisions in preprocessing with an eps; call "
            "debug::require_finite_inputs(x, y) in the data pipeline so it fails where the values appear";
    out.push_back(f);
  };
  one(x, "inputs x");
  one(y, "targets y");
  return out;
}

void require_finite_inputs(const Tensor& x, const Tensor& y) {
  const std::vector<Finding> fs = check_finite_inputs(x, y);
  if (fs.empty()) return;
  std::string msg = "the batch holds non-finite values; stopping before they reach the model";
  for (const Finding& f : fs) msg += "\n" + f.str();
  throw Error("require_finite_inputs", msg);
}

// ---- D3 label distribution -----------------------------------------------------------

std::vector<Finding> check_label_distribution(const Tensor& labels, int64_t num_classes,
                                              const DataCheckOptions& opts) {
  GS_CHECK(labels.defined(), "check_label_distribution", "needs a defined labels tensor");
  if (labels.is_floating_point()) {
    const std::vector<double> v = doubles(labels);
    if (!std::all_of(v.begin(), v.end(), is_whole)) return {};  // not class labels: D9 says so
  }
  const std::vector<int64_t> v = labels.to_vector<int64_t>();
  int64_t C = num_classes, outside = 0, n = 0;
  if (C <= 0) {
    C = 0;
    for (int64_t c : v)
      if (c >= 0) C = std::max(C, c + 1);
  }
  if (C <= 0) return {};
  std::vector<int64_t> counts(static_cast<size_t>(C), 0);
  for (int64_t c : v) {
    if (c == opts.ignore_index) continue;
    if (c < 0 || c >= C) { ++outside; continue; }
    ++counts[static_cast<size_t>(c)];
    ++n;
  }
  std::vector<int64_t> empty;
  int64_t lo = -1, hi = -1;  // the rarest non-empty and the most common class
  for (int64_t c = 0; c < C; ++c) {
    if (counts[c] == 0) { empty.push_back(c); continue; }
    if (lo < 0 || counts[c] < counts[lo]) lo = c;
    if (hi < 0 || counts[c] > counts[hi]) hi = c;
  }
  const double ratio = lo < 0 ? kNaN : static_cast<double>(counts[hi]) / static_cast<double>(counts[lo]);
  const bool imbalanced = lo >= 0 && ratio > opts.max_imbalance_ratio;

  Finding f = make("D3", Severity::Info, "");
  f.kind = Kind::ClassCounts;
  f.shape = labels.str();
  const bool all_listed = C <= 32;
  for (int64_t c = 0; c < C; ++c)
    if (all_listed || c == lo || c == hi) f.evidence.push_back({"class " + num(c), static_cast<double>(counts[c]), ""});
  f.evidence.push_back({"imbalance ratio (largest / smallest non-empty class)", ratio,
                        "> " + fmt_num(opts.max_imbalance_ratio) + " warns"});
  f.evidence.push_back({"classes with no example", static_cast<double>(empty.size()), "any warns"});
  if (outside > 0)
    f.evidence.push_back({"labels outside [0, " + num(C) + ")", static_cast<double>(outside), "D9 reports these"});
  if (empty.empty() && !imbalanced) {
    f.title = "class counts of " + num(n) + " labels over " + num(C) + " classes (largest / smallest = " +
              fmt_num(ratio) + ")";
    return {f};
  }
  f.severity = Severity::Warning;
  if (!empty.empty())
    f.title = num(static_cast<int64_t>(empty.size())) + " of " + num(C) + " classes have no example among " +
              num(n) + " labels (class " + list_ints(empty) + ")";
  else
    f.title = "classes are imbalanced: class " + num(hi) + " has " + num(counts[hi]) + " examples, class " + num(lo) +
              " only " + num(counts[lo]) + " (ratio " + fmt_num(ratio) + ")";
  f.cause = "the data is imbalanced (rare classes), or the labels come from a sorted dataset or a subset that "
            "misses classes (take(n) of sorted data, no shuffling); a model can score high accuracy by predicting "
            "the common classes only";
  if (outside > 0 && !empty.empty() && empty.front() == 0)
    f.cause += ". Here labels also fall outside [0, " + num(C) + ") while class 0 is empty: the labels may be "
               "1-indexed (see D9)";
  f.fix = "make sure the sample is representative (shuffle before taking a subset, split with "
          "nn::train_val_split); for real imbalance weight the loss by class, oversample the rare classes, and "
          "report per-class accuracy rather than accuracy alone";
  return {f};
}

std::vector<Finding> check_class_errors(const std::vector<int64_t>& examples, const std::vector<int64_t>& correct,
                                        const DataCheckOptions& opts) {
  GS_CHECK(examples.size() == correct.size(), "check_class_errors", "needs one count of right predictions per class, got ",
           correct.size(), " for ", examples.size(), " classes");
  const int64_t C = static_cast<int64_t>(examples.size());
  std::vector<double> recall(static_cast<size_t>(C), kNaN);
  std::vector<int64_t> judged;  // classes with enough examples
  for (int64_t c = 0; c < C; ++c) {
    if (examples[c] <= 0) continue;
    recall[c] = static_cast<double>(correct[c]) / static_cast<double>(examples[c]);
    if (examples[c] >= opts.min_class_examples) judged.push_back(c);
  }
  if (judged.size() < 2) return {};
  const double chance = 1.0 / static_cast<double>(C);
  double sum = 0.0;
  for (int64_t c : judged) sum += recall[c];
  std::vector<int64_t> failing;
  int64_t worst = judged.front(), best = judged.front();
  for (int64_t c : judged) {
    const double others = (sum - recall[c]) / static_cast<double>(judged.size() - 1);
    if (others > opts.min_recall_over_chance * chance && recall[c] < opts.min_recall_ratio * others) failing.push_back(c);
    if (recall[c] < recall[worst]) worst = c;
    if (recall[c] > recall[best]) best = c;
  }
  if (!failing.empty()) {
    worst = failing.front();
    for (int64_t c : failing)
      if (recall[c] < recall[worst]) worst = c;
  }
  // The worst class (the worst failing one when any fails) and the others' mean recall beside it.
  const double worst_others = (sum - recall[worst]) / static_cast<double>(judged.size() - 1);
  Finding f = make("D3", Severity::Info, "");
  f.kind = Kind::ClassRecallLow;
  const bool all_listed = C <= 32;
  for (int64_t c = 0; c < C; ++c)
    if (examples[c] > 0 && (all_listed || c == worst || c == best))
      f.evidence.push_back({"class " + num(c) + " recall (" + num(correct[c]) + " of " + num(examples[c]) + ")",
                            recall[c], examples[c] < opts.min_class_examples ? "too few examples to judge" : ""});
  f.evidence.push_back({"mean recall of the other classes (beside class " + num(worst) + ")", worst_others,
                        "above " + fmt_num(opts.min_recall_over_chance) + " x chance (" +
                            fmt_num(opts.min_recall_over_chance * chance) + ") to judge"});
  f.evidence.push_back({"class " + num(worst) + " recall / the others' mean", recall[worst] / worst_others,
                        "< " + fmt_num(opts.min_recall_ratio) + " warns"});
  if (failing.empty()) {
    f.title = "per-class recall on the validation data: lowest class " + num(worst) + " at " +
              fmt_num(100 * recall[worst]) + "%, highest class " + num(best) + " at " + fmt_num(100 * recall[best]) + "%";
    return {f};
  }
  f.severity = Severity::Warning;
  f.title = "the trained model misses one class far more than the others: class " + num(worst) + " has a recall of " +
            fmt_num(100 * recall[worst]) + "% on the validation data, the other classes " +
            fmt_num(100 * worst_others) + "% on average" +
            (failing.size() > 1 ? " (classes far below the others' recall: " + list_ints(failing) + ")" : "");
  f.cause = "the model rarely predicts this class: it is rare in the training data (the loss gains little from it), "
            "its training labels are wrong or mapped to another class, or its examples look unlike the rest";
  f.fix = "compare the class counts of the training data (an imbalance shows in the class counts); weight the loss by "
          "class or oversample the rare classes; check the labels of this class; report per-class accuracy rather "
          "than accuracy alone";
  return {f};
}

// ---- D4 input/label alignment ----------------------------------------------------------

namespace {
// Per-feature mean and std of a whole dataset's inputs (float64, read in chunks). The same
// examples in another order give the same statistics.
std::pair<Tensor, Tensor> feature_stats(const nn::Dataset& d, int64_t chunk) {
  Tensor s, sq;
  const int64_t n = d.size();
  for (int64_t lo = 0; lo < n; lo += chunk) {
    const Tensor x = d.get_batch(rows(lo, std::min(n, lo + chunk))).x;
    const Tensor xb = x.reshape({x.size(0), -1}).to(kFloat64);
    const Tensor a = sum(xb, {0}), b = sum(xb * xb, {0});
    s = s.defined() ? s + a : a;
    sq = sq.defined() ? sq + b : b;
  }
  const Tensor mean = s / static_cast<double>(n);
  return {mean, sqrt(clamp(sq / static_cast<double>(n) - mean * mean, 0.0, std::nullopt))};
}

// D4 through a per-feature affine transform: the loader may read the reference after a
// normalisation the reference did not go through ((x - mean) / std, x / 255). Both sides are
// standardised per feature with their own whole-dataset statistics, which undoes any such
// transform with a positive scale, and each loader row is looked up by nearest neighbour
// among the reference's rows. A row matches when the RMS distance of the standardised
// values is below 1e-2 (the same example: ~1e-6; two different images: ~1).
struct AffineMatch {
  int64_t tried = 0, matched = 0, mismatched = 0;
  std::string example;
};
AffineMatch match_after_affine(const nn::Dataset& reference, const nn::Dataset& loaded, const Tensor& rows_x,
                               const std::vector<Label>& rows_y, const std::vector<std::string>& where, int64_t chunk) {
  AffineMatch m;
  NoGradGuard ng;
  const int64_t K = rows_x.size(0);
  if (K == 0 || reference.size() == 0 || loaded.size() == 0) return m;
  const Tensor probe = reference.get_batch({0}).x;
  if (probe.numel() != rows_x.numel() / K || !probe.is_floating_point() || !rows_x.is_floating_point()) return m;
  const auto [mr, sr] = feature_stats(reference, chunk);
  const auto [ml, sl] = feature_stats(loaded, chunk);
  // Features constant on either side carry nothing to compare.
  const Tensor use = (gt(sr, 1e-12) * gt(sl, 1e-12)).to(kFloat64);
  const double F = sum(use).item<double>();
  if (F < 1) return m;
  auto standardise = [&](const Tensor& x, const Tensor& mu, const Tensor& sd) {
    return (x.reshape({x.size(0), -1}).to(kFloat64) - mu) / maximum(sd, 1e-12) * use;
  };
  const Tensor zl = standardise(rows_x, ml, sl);
  const Tensor nl = sum(zl * zl, {1}, true);  // (K, 1)
  // Per loader row, the labels of every reference row within the distance (duplicates of an
  // image may carry several labels, as in the byte-for-byte comparison).
  const double within = 1e-4 * F;  // RMS distance < 1e-2
  std::vector<std::vector<Label>> found(static_cast<size_t>(K));
  const int64_t n = reference.size();
  for (int64_t lo = 0; lo < n; lo += chunk) {
    const nn::Batch b = reference.get_batch(rows(lo, std::min(n, lo + chunk)));
    const Tensor zr = standardise(b.x, mr, sr);
    const Tensor d2 = nl + sum(zr * zr, {1}).reshape({1, -1}) - 2.0 * matmul(zl, zr.transpose(0, 1));
    const std::vector<double> dv = d2.contiguous().to_vector<double>();
    const std::vector<Label> yl = row_labels(b.y);
    const size_t cols = yl.size();
    for (size_t r = 0; r < static_cast<size_t>(K); ++r)
      for (size_t c = 0; c < cols; ++c)
        if (dv[r * cols + c] < within) found[r].push_back(yl[c]);
  }
  for (size_t r = 0; r < static_cast<size_t>(K); ++r) {
    ++m.tried;
    if (found[r].empty()) continue;
    ++m.matched;
    const std::vector<Label>& ls = found[r];
    if (std::any_of(ls.begin(), ls.end(), [&](const Label& l) { return l.hash == rows_y[r].hash; })) continue;
    if (++m.mismatched == 1)
      m.example = where[r] + " has label " + fmt_num(rows_y[r].value) +
                  ", but the reference has that image (after the transform) with label " + fmt_num(ls.front().value);
  }
  return m;
}
}  // namespace

std::vector<Finding> check_alignment(const nn::Dataset& reference, const nn::DataLoader& loader,
                                     const DataCheckOptions& opts) {
  // x hash -> the labels that image has in the reference (several for duplicates).
  std::unordered_map<uint64_t, std::vector<Label>> known;
  const int64_t n = reference.size(), chunk = std::max<int64_t>(1, opts.alignment_chunk);
  known.reserve(static_cast<size_t>(n));
  for (int64_t lo = 0; lo < n; lo += chunk) {
    const nn::Batch b = reference.get_batch(rows(lo, std::min(n, lo + chunk)));
    const std::vector<uint64_t> xh = row_hashes_x(b.x);
    const std::vector<Label> yl = row_labels(b.y);
    for (size_t r = 0; r < xh.size(); ++r) {
      std::vector<Label>& ls = known[xh[r]];
      if (std::none_of(ls.begin(), ls.end(), [&](const Label& l) { return l.hash == yl[r].hash; }))
        ls.push_back(yl[r]);
    }
  }

  const int64_t epoch = loader.epoch(), nb = std::min(opts.alignment_batches, loader.num_batches());
  int64_t checked = 0, unknown = 0, mismatched = 0;
  std::string example, shape;
  // Up to 128 rows not found by hash, for the look-up through an affine transform.
  std::vector<Tensor> unknown_x;
  std::vector<Label> unknown_y;
  std::vector<std::string> unknown_where;
  for (int64_t i = 0; i < nb; ++i) {
    const nn::Batch b = loader.batch(epoch, i);
    if (shape.empty()) shape = "x " + shape_str(b.x.shape()) + ", y " + shape_str(b.y.shape());
    const std::vector<uint64_t> xh = row_hashes_x(b.x);
    const std::vector<Label> yl = row_labels(b.y);
    for (size_t r = 0; r < xh.size(); ++r) {
      // A masked label (ignore_index) carries no class to compare: not counted (L5 judges masking).
      if (r < yl.size() && yl[r].value == static_cast<double>(opts.ignore_index)) continue;
      ++checked;
      auto it = known.find(xh[r]);
      if (it == known.end()) {
        ++unknown;
        if (unknown_x.size() < 128 && b.x.is_floating_point()) {
          unknown_x.push_back(b.x.narrow(0, static_cast<int64_t>(r), 1));
          unknown_y.push_back(yl[r]);
          unknown_where.push_back("batch " + num(i) + ", row " + num(static_cast<int64_t>(r)) + " (dataset row " +
                                  num(b.indices[r]) + ")");
        }
        continue;
      }
      const std::vector<Label>& ls = it->second;
      if (std::any_of(ls.begin(), ls.end(), [&](const Label& l) { return l.hash == yl[r].hash; })) continue;
      if (++mismatched == 1) {
        std::string have;
        for (size_t k = 0; k < ls.size(); ++k) have += (k ? " or " : "") + fmt_num(ls[k].value);
        example = "batch " + num(i) + ", row " + num(static_cast<int64_t>(r)) + " (dataset row " +
                  num(b.indices[r]) + ") has label " + fmt_num(yl[r].value) +
                  ", but the reference has that image with label " + have;
      }
    }
  }
  std::vector<Finding> out;
  if (checked == 0) return out;
  const int64_t matched_x = checked - unknown;
  const double mis_frac = matched_x > 0 ? static_cast<double>(mismatched) / static_cast<double>(matched_x) : 0.0;
  const double unk_frac = static_cast<double>(unknown) / static_cast<double>(checked);
  if (mis_frac > opts.max_misaligned_fraction) {
    Finding f = make("D4", Severity::Error,
                     num(mismatched) + " of " + num(matched_x) + " examples from " + loader.dataset().name() +
                         " carry a label their image never has in " + reference.name() +
                         ": inputs and labels are misaligned");
    f.shape = shape;
    f.evidence = {{"examples checked", static_cast<double>(checked), ""},
                  {"mismatched (x, y) pairs", static_cast<double>(mismatched), ""},
                  {"mismatched fraction", mis_frac, "> " + fmt_num(opts.max_misaligned_fraction) + " is an error"},
                  {"inputs not in the reference", static_cast<double>(unknown), ""}};
    f.cause = "the inputs were shuffled, sorted or filtered without their labels (x[perm] with y "
              "unpermuted, or two separately shuffled lists); the model is trained on random labels, so the loss "
              "stays near log(C) while nothing errors. For example: " + example;
    f.fix = "permute x and y with the same indices (x.index_select(0, p) and y.index_select(0, p)), or keep them "
            "in one nn::TensorDataset and let the DataLoader shuffle";
    out.push_back(f);
  }
  if (unk_frac > opts.max_unknown_fraction && !unknown_x.empty()) {
    // A reference that went through different preprocessing: is the loader's data the
    // reference after a per-feature affine transform? Then compare the pairs through it.
    const AffineMatch am = match_after_affine(reference, loader.dataset(), cat(unknown_x, 0), unknown_y,
                                              unknown_where, chunk);
    if (am.tried > 0 && static_cast<double>(am.matched) >= 0.9 * static_cast<double>(am.tried)) {
      const double frac = static_cast<double>(am.mismatched) / static_cast<double>(am.matched);
      const bool bad = frac > opts.max_misaligned_fraction;
      Finding f = make("D4", bad ? Severity::Error : Severity::Info,
                       bad ? num(am.mismatched) + " of " + num(am.matched) + " examples from " +
                                 loader.dataset().name() + " carry a label their image never has in " +
                                 reference.name() + " (compared through a per-feature affine transform): inputs and "
                                 "labels are misaligned"
                           : "the loader's inputs are " + reference.name() + "'s after a per-feature affine "
                             "transform (a normalisation the reference did not go through): " + num(am.matched) +
                             " of " + num(am.tried) + " pairs compared through it, every label matches");
      f.shape = shape;
      f.evidence = {{"examples checked", static_cast<double>(checked), ""},
                    {"inputs not in the reference byte for byte", static_cast<double>(unknown), ""},
                    {"looked up after standardising each feature", static_cast<double>(am.tried), ""},
                    {"found (RMS distance < 0.01)", static_cast<double>(am.matched), ">= 90% means the same data"},
                    {"mismatched (x, y) pairs", static_cast<double>(am.mismatched),
                     "> " + fmt_num(opts.max_misaligned_fraction) + " of those found is an error"}};
      f.cause = bad ? "the inputs were shuffled, sorted or filtered without their labels; the reference "
                      "went through different preprocessing, which the check undid. For example: " + am.example
                    : "the reference was not transformed the way the loader's data is (raw against normalised): the "
                      "check standardised both per feature and found each loader example in the reference with its "
                      "label; nothing is wrong with the loader";
      f.fix = bad ? "permute x and y with the same indices, or keep them in one nn::TensorDataset and let the "
                    "DataLoader shuffle"
                  : "none needed; to compare byte for byte, pass the reference through the same transform "
                    "(norm.transform(raw) when the loader reads norm.transform(raw))";
      out.push_back(f);
      return out;
    }
  }
  if (unk_frac > opts.max_unknown_fraction) {
    Finding f = make("D4", Severity::Warning,
                     num(unknown) + " of " + num(checked) + " inputs from " + loader.dataset().name() +
                         " do not occur in " + reference.name() + ": their alignment cannot be checked");
    f.shape = shape;
    f.evidence = {{"examples checked", static_cast<double>(checked), ""},
                  {"inputs not in the reference", static_cast<double>(unknown), ""},
                  {"unknown fraction", unk_frac, "> " + fmt_num(opts.max_unknown_fraction) + " warns"}};
    f.cause = "the loader transforms the inputs (augmentation, a non-affine transform) so they no longer equal the "
              "reference's bytes, even after undoing a per-feature affine transform (a normalisation), or the "
              "reference is a different dataset";
    f.fix = "pass as reference the same data the loader reads, before shuffling, with the same transform (e.g. "
            "norm.transform(raw) when the loader reads norm.transform(raw)), or check a loader without augmentation";
    out.push_back(f);
  }
  return out;
}

// ---- D5 normalisation -----------------------------------------------------------------

namespace {
// The histogram bin of a row's largest |value| (>= 0): the float's exponent and the top 3 bits of
// its mantissa, so 8 bins per power of 2 over every float, read from the bits.
int row_bin(float v) {
  uint32_t b = 0;
  std::memcpy(&b, &v, sizeof b);
  return static_cast<int>((b >> 20) & 0x7FF);
}
double bin_value(int bin) {  // the middle of the bin
  const uint32_t b = (static_cast<uint32_t>(bin) << 20) | 0x80000u;
  float v = 0.0f;
  std::memcpy(&v, &b, sizeof v);
  return v;
}
}  // namespace

void RowRangeTracker::add_row(float max_abs, int64_t step, int64_t row) {
  ++hist_[static_cast<size_t>(row_bin(max_abs))];
  ++rows_;
  auto smaller = [](const Row& x, const Row& y) { return x.max_abs > y.max_abs; };  // a min-heap
  if (static_cast<int>(top_.size()) < kTop) {
    top_.push_back({max_abs, step, row});
    std::push_heap(top_.begin(), top_.end(), smaller);
  } else if (max_abs > top_.front().max_abs) {
    std::pop_heap(top_.begin(), top_.end(), smaller);
    top_.back() = {max_abs, step, row};
    std::push_heap(top_.begin(), top_.end(), smaller);
  }
}

void RowRangeTracker::record(const Tensor& x, int64_t step) {
  if (!x.defined() || x.dim() < 1 || x.numel() == 0 || x.dtype() != kFloat32 || !x.device().is_cpu() ||
      !x.is_contiguous() || !found_.empty())
    return;
  const int64_t n = x.size(0), k = x.numel() / n;
  const float* p = x.data_ptr<float>();
  for (int64_t r = 0; r < n; ++r) {
    // 32 running maxima (four independent vector registers of 8, so the max's latency does not
    // serialise the loop); NaN compares false and is skipped (D2's).
    float m[32] = {};
    const float* row = p + r * k;
    int64_t j = 0;
    for (; j + 32 <= k; j += 32)
      for (int l = 0; l < 32; ++l) {
        const float a = std::fabs(row[j + l]);
        m[l] = a > m[l] ? a : m[l];
      }
    for (; j < k; ++j) {
      const float a = std::fabs(row[j]);
      m[0] = a > m[0] ? a : m[0];
    }
    float top = m[0];
    for (int l = 1; l < 32; ++l) top = m[l] > top ? m[l] : top;
    add_row(top, step, r);
  }
  rows_total_ += n;
}

void RowRangeTracker::end_epoch() {
  const int64_t epoch = epoch_++, rows = rows_;
  std::vector<Row> top;
  top.swap(top_);
  std::vector<int64_t> hist(kBins, 0);
  hist.swap(hist_);
  rows_ = 0;
  if (!found_.empty() || rows < o_.row_range_min_rows) return;
  // The median row's largest |value|, to the histogram's resolution (a bin is 9% wide).
  int64_t seen = 0;
  int mid = 0;
  for (; mid < kBins; ++mid)
    if ((seen += hist[static_cast<size_t>(mid)]) * 2 >= rows) break;
  const double med = mid == 0 ? 0.0 : bin_value(mid);
  const double limit = std::max(o_.row_range_ratio * med, o_.raw_max);
  // The rows out of range: counted exactly among the kTop largest; beyond them, at least kTop.
  int64_t out = 0;
  const Row* worst = nullptr;
  for (const Row& r : top)
    if (r.max_abs > limit) {
      ++out;
      if (!worst || r.max_abs > worst->max_abs) worst = &r;
    }
  if (!worst) return;
  const bool more = out == kTop;  // every kept row is out of range: there may be more
  Finding f = make("D5", Severity::Warning,
                   (more ? "at least " : "") + num(out) + " of the " + num(rows) + " training rows of epoch " +
                       num(epoch) + " are out of range: values up to " + fmt_num(worst->max_abs) + ", " +
                       fmt_num(worst->max_abs / std::max(med, 1e-30)) + "x the typical row's largest |value| (" +
                       fmt_num(med) + "): those rows were not scaled like the rest");
  f.step = worst->step;
  f.evidence = {{"rows out of range", static_cast<double>(out),
                 "largest |value| > max(" + fmt_num(o_.row_range_ratio) + " x the median row's, " + fmt_num(o_.raw_max) +
                     ") warns" + (more ? "; counted among the " + num(kTop) + " largest rows" : "")},
                {"training rows seen in the epoch", static_cast<double>(rows), "every row the loop trained on"},
                {"largest |value| of a row", worst->max_abs, ""},
                {"median row's largest |value|", med, "to 9%: a histogram of 8 bins per power of 2"},
                {"step of that row", static_cast<double>(worst->step), ""},
                {"its row in the batch", static_cast<double>(worst->row), ""}};
  f.cause = "a few examples skipped the scaling the others had (a second data source, a code path that returns "
            "before normalising, a corrupted file): sampled batches rarely show them, but each time one is drawn "
            "its inputs are orders of magnitude larger, so its loss and gradients spike and the weights jump";
  f.fix = "find the rows (print the batch at that step, or scan the dataset for rows with |x| above the limit) and "
          "apply the same preprocessing to every example; drop rows you cannot repair";
  found_.push_back(std::move(f));
}

std::vector<Finding> RowRangeTracker::findings() {
  if (rows_ > 0) end_epoch();
  return found_;
}

std::vector<Finding> check_normalisation(const Tensor& x, const DataCheckOptions& opts) {
  GS_CHECK(x.defined(), "check_normalisation", "needs a defined input sample x (N, D...)");
  if (x.numel() == 0 || !x.is_floating_point()) return {};  // integral inputs are ids (embeddings), not features
  const int64_t N = x.dim() == 0 ? 1 : x.size(0);
  const int64_t F = x.numel() / N;
  const std::vector<double> v = doubles(x);
  const Summary s = summarize(v);
  if (s.finite() == 0) return {};  // nothing finite to judge: D2's job
  std::vector<Finding> out;

  // Rule 1: magnitude. |x| at a high quantile, so a few outliers do not count.
  std::vector<double> mag;
  mag.reserve(v.size());
  bool whole = true;
  for (double a : v)
    if (std::isfinite(a)) {
      mag.push_back(std::fabs(a));
      whole = whole && std::fabs(a - std::round(a)) < 1e-3;  // 0..255 after float arithmetic
    }
  const double q = quantile(mag, opts.raw_quantile);
  if (q > opts.raw_max) {
    const bool pixels = s.min >= 0.0 && s.max <= 255.0 && whole;
    Finding f = make("D5", Severity::Warning,
                     pixels ? "inputs look like raw 0..255 pixel values: they are not scaled"
                            : "inputs are not normalised: |x| reaches " + fmt_num(q) + " (at the " +
                                  fmt_num(100.0 * opts.raw_quantile) + "th percentile)");
    f.shape = x.str();
    f.evidence = {{"|x| at the " + fmt_num(100.0 * opts.raw_quantile) + "th percentile", q,
                   "> " + fmt_num(opts.raw_max) + " warns"},
                  {"min", s.min, ""},
                  {"max", s.max, ""},
                  {"mean", s.mean, ""},
                  {"std", s.std, ""}};
    f.cause = pixels ? "the images were never divided by 255 nor standardised; inputs in the hundreds make "
                       "the first layer's outputs and gradients ~100x too large: saturated units and a learning "
                       "rate that is suddenly far too high"
                     : "the features were not scaled; large inputs make the first layer's outputs and gradients "
                       "large, so training is unstable or needs a tiny learning rate";
    f.fix = pixels ? "scale to [0, 1] (x / 255; nn::load_fashion_mnist does unless raw(true)), or standardise with "
                     "nn::Normalizer fitted on the training split"
                   : "standardise: nn::Normalizer norm; norm.fit(train_x, \"train\"); x = norm.transform(x)";
    out.push_back(f);
  }

  // Rule 2: feature scales. Per-feature std over the N examples.
  if (N >= 2 && F >= 2) {
    std::vector<double> mean(static_cast<size_t>(F), 0.0), m2(static_cast<size_t>(F), 0.0);
    std::vector<int64_t> cnt(static_cast<size_t>(F), 0);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t d = 0; d < F; ++d) {
        const double a = v[r * F + d];
        if (!std::isfinite(a)) continue;
        const double delta = a - mean[d];
        mean[d] += delta / static_cast<double>(++cnt[d]);
        m2[d] += delta * (a - mean[d]);
      }
    std::vector<double> sd(static_cast<size_t>(F), 0.0);
    int64_t top = 0;
    for (int64_t d = 0; d < F; ++d) {
      sd[d] = cnt[d] > 0 ? std::sqrt(m2[d] / static_cast<double>(cnt[d])) : 0.0;
      if (sd[d] > sd[top]) top = d;
    }
    std::vector<int64_t> live;  // non-constant features, by increasing std
    for (int64_t d = 0; d < F; ++d)
      if (sd[d] > 0.0 && sd[d] > opts.constant_rel_std * sd[top]) live.push_back(d);
    std::sort(live.begin(), live.end(), [&](int64_t a, int64_t b) { return sd[a] < sd[b]; });
    if (live.size() >= 2) {
      const double qi = std::clamp(opts.scale_low_quantile, 0.0, 1.0);
      const int64_t low = live[static_cast<size_t>(std::floor(qi * static_cast<double>(live.size() - 1)))];
      const double ratio = sd[top] / sd[low];
      if (ratio > opts.max_scale_ratio) {
        Finding f = make("D5", Severity::Warning,
                         "feature scales differ by orders of magnitude: feature " + num(top) + " has std " +
                             fmt_num(sd[top]) + ", feature " + num(low) + " " + fmt_num(sd[low]) + " (ratio " +
                             fmt_num(ratio) + ")");
        f.shape = x.str();
        f.evidence = {{"largest feature std (feature " + num(top) + ")", sd[top], ""},
                      {"feature std at the " + fmt_num(100.0 * qi) + "th percentile (feature " + num(low) + ")",
                       sd[low], ""},
                      {"scale ratio", ratio, "> " + fmt_num(opts.max_scale_ratio) + " warns"},
                      {"non-constant features compared", static_cast<double>(live.size()), ""},
                      {"constant features (ignored)", static_cast<double>(F - static_cast<int64_t>(live.size())), ""}};
        f.cause = "features in different units (an income ~1e4 next to an age ~10) that were not standardised per "
                  "feature; the large ones dominate the first layer's outputs and gradients, the small ones are "
                  "practically ignored, and no single learning rate suits both";
        f.fix = "standardise each feature on the training split: nn::Normalizer norm(nn::Normalizer::Mode::"
                "PerFeature); norm.fit(train_x, \"train\"); then transform every split (log-transform heavy-tailed "
                "features first)";
        out.push_back(f);
      }
    }
  }
  return out;
}

// ---- D6 label shape vs loss -------------------------------------------------------------

std::vector<Finding> check_label_shape(const Tensor& prediction, const Tensor& target) {
  GS_CHECK(prediction.defined() && target.defined(), "check_label_shape", "needs a defined prediction and target");
  const Shape& p = prediction.shape();
  const Shape& t = target.shape();
  if (p == t) return {};
  // Classification: logits (B, C, ...) against class indices (B, ...), C >= 2.
  if (prediction.is_floating_point() && is_integral(target.dtype()) && p.size() == t.size() + 1 && p.size() >= 2 &&
      p[0] == t[0] && p[1] >= 2 && std::equal(p.begin() + 2, p.end(), t.begin() + 1))
    return {};
  Finding f = make("D6", Severity::Warning, "");
  f.shape = "prediction " + shape_str(p) + ", target " + shape_str(t);
  Shape b;
  if (!try_broadcast(p, t, b)) {
    f.severity = Severity::Error;
    f.title = "prediction " + shape_str(p) + " and target " + shape_str(t) + " cannot be broadcast: the loss will fail";
    f.evidence = {{"prediction elements", static_cast<double>(numel_of(p)), ""},
                  {"target elements", static_cast<double>(numel_of(t)), "must match the prediction's"}};
    f.cause = "the target has a different layout from the model's output (a flattened image, a missing or extra "
              "dim, one-hot vs class indices, the wrong number of outputs)";
    f.fix = "reshape the target or change the model's last layer so both have the same shape";
    return {f};
  }
  const int64_t pn = numel_of(p), tn = numel_of(t), bn = numel_of(b);
  f.evidence = {{"prediction elements", static_cast<double>(pn), ""},
                {"target elements", static_cast<double>(tn), ""},
                {"elements after broadcasting", static_cast<double>(bn), "more than either input warns"}};
  if (bn <= std::max(pn, tn)) {
    f.severity = Severity::Info;
    f.title = "prediction " + shape_str(p) + " and target " + shape_str(t) + " differ; the smaller is broadcast to " +
              shape_str(b);
    f.fix = "fine if one target really serves every row; otherwise make the shapes equal";
    return {f};
  }
  f.title = "prediction " + shape_str(p) + " and target " + shape_str(t) + " broadcast to " + shape_str(b) +
            ": the loss would compare every prediction with every target";
  f.cause = "a (B, 1) output against (B) targets, or the reverse: the loss silently averages over the "
            "enlarged " + shape_str(b) + " grid, every prediction is pulled toward every target, and the model "
            "learns to predict the mean; the loss still goes down a little and nothing errors";
  f.fix = (p.size() > t.size() ? std::string("prediction.squeeze(-1)") : std::string("target.squeeze(-1)")) +
          " (or view both as (B, 1)) so prediction and target have the same shape before the loss";
  return {f};
}

// ---- D7 data leakage ------------------------------------------------------------------------

std::vector<Finding> check_leakage(const nn::Normalizer& norm, int64_t train_size, int64_t values_per_example) {
  std::vector<Finding> out;
  if (!norm.fitted()) return out;
  std::vector<std::string> other;
  std::string all;
  for (const std::string& s : norm.fitted_on()) {
    all += (all.empty() ? "" : ", ") + s;
    if (s.rfind("train", 0) != 0) other.push_back(s);
  }
  const bool global = norm.mode() == nn::Normalizer::Mode::Global;
  const int64_t rows = !global ? norm.count() : values_per_example > 0 ? norm.count() / values_per_example : -1;
  const std::string fix = "fit the statistics on the training split only (norm.fit(train_x, \"train\")), then "
                          "transform train, val and test with them; split the data before any fitting";
  if (!other.empty()) {
    std::string names;
    for (size_t i = 0; i < other.size(); ++i) names += (i ? ", " : "") + other[i];
    Finding f = make("D7", Severity::Error,
                     "normalisation statistics were fitted on " + names + " data (fitted_on = " + all + ")");
    f.evidence = {{"splits fitted on", static_cast<double>(norm.fitted_on().size()), "only \"train\" is allowed"},
                  {global ? "values fitted" : "rows fitted", static_cast<double>(norm.count()), ""}};
    if (train_size >= 0) f.evidence.push_back({"training rows", static_cast<double>(train_size), ""});
    f.cause = "the scaler was fitted on train + " + names + " (or on the whole dataset before splitting): "
              "statistics of the evaluation data leak into training, so validation/test scores are optimistic "
              "and will not hold on new data";
    f.fix = fix;
    out.push_back(f);
  }
  if (train_size >= 0 && rows > train_size) {
    Finding f = make("D7", Severity::Error,
                     "normalisation statistics were fitted on " + num(rows) + " rows but the training split has " +
                         num(train_size));
    f.evidence = {{"rows fitted", static_cast<double>(rows), "> training rows is an error"},
                  {"training rows", static_cast<double>(train_size), ""}};
    f.cause = "the statistics include rows from outside the training split (fitted on the full dataset and "
              "labelled \"train\", or partial_fit called on more data than train)";
    f.fix = fix;
    out.push_back(f);
  }
  return out;
}

std::vector<Finding> check_leakage(const nn::Normalizer& norm, const nn::Dataset& train) {
  const int64_t per = train.size() > 0 ? train.get(0).x.numel() : -1;
  return check_leakage(norm, train.size(), per);
}

// ---- D8 shuffling / batch diversity ---------------------------------------------------------

std::vector<int64_t> spread_batches(const nn::DataLoader& loader, int64_t n) {
  const int64_t nb = loader.num_batches();
  n = std::min(n, nb);
  std::vector<int64_t> out;
  if (n <= 0) return out;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = n == 1 ? 0 : static_cast<int64_t>(std::llround(static_cast<double>(k) * (nb - 1) / (n - 1)));
    if (out.empty() || out.back() != i) out.push_back(i);
  }
  return out;
}

std::vector<Finding> check_batch_diversity(const nn::DataLoader& loader, const DataCheckOptions& opts) {
  std::vector<nn::Batch> batches;
  for (int64_t i : spread_batches(loader, opts.diversity_batches)) batches.push_back(loader.batch(loader.epoch(), i));
  return diversity(batches, loader, opts);
}

// ---- D9 label encoding -------------------------------------------------------------------------

std::vector<Finding> check_label_encoding(const Tensor& y, int64_t num_classes, const DataCheckOptions& opts) {
  GS_CHECK(y.defined(), "check_label_encoding", "needs a defined label tensor");
  std::vector<Finding> out;
  const int64_t C = num_classes;
  const std::string range = C > 0 ? "[0, " + num(C) + ")" : "[0, C)";
  if (y.is_floating_point()) {
    const std::vector<double> v = doubles(y);
    const bool whole = std::all_of(v.begin(), v.end(), is_whole);
    bool one_hot = whole && y.dim() == 2 && y.size(1) >= 2 && y.size(0) > 0;
    if (one_hot)
      for (int64_t r = 0; r < y.size(0) && one_hot; ++r) {
        double sum = 0.0;
        for (int64_t c = 0; c < y.size(1); ++c) {
          const double a = v[r * y.size(1) + c];
          one_hot = one_hot && (a == 0.0 || a == 1.0);
          sum += a;
        }
        one_hot = one_hot && sum == 1.0;
      }
    // 0/1 float targets of a binary task (BCE, BCEWithLogits) are not class indices: nothing to say.
    const bool binary = C <= 2 && !one_hot && std::all_of(v.begin(), v.end(), [](double a) { return a == 0.0 || a == 1.0; });
    if (binary) return out;
    Finding f = make("D9", Severity::Error, "");
    f.shape = y.str();
    if (one_hot) {
      f.title = "labels are one-hot rows " + shape_str(y.shape()) + ", not class indices";
      f.cause = "the labels were one-hot encoded; cross_entropy would read them as class probabilities (the same "
                "loss), but accuracy, nll_loss and the label checks need int64 class indices (B)";
      f.fix = "pass y.argmax(1) (int64 class indices in " + range + ")";
    } else if (whole) {
      f.title = "class labels are " + std::string(dtype_name(y.dtype())) + ", not int64";
      f.cause = "the labels were read or built as floats (a CSV column, a torch-style tensor of floats); "
                "cross_entropy indexes the logits with them and needs int64";
      // A column of labels (B, 1) also needs its extra dim squeezed: the class-index losses take (B).
      f.fix = y.dim() == 2 && y.size(1) == 1 ? "squeeze the extra dim and convert: y.squeeze(1).to(gs::kInt64) (shape " +
                                                   shape_str(y.shape()) + " -> [" + num(y.size(0)) + "])"
                                             : "convert: y.to(gs::kInt64)";
    } else {
      f.title = "labels are not whole numbers: these are not class indices";
      f.cause = "regression targets, probabilities or normalised labels were passed where class indices belong "
                "(or the labels went through the input normaliser)";
      f.fix = "use int64 class indices in " + range + " for classification, or a regression loss (MSE) for "
              "continuous targets";
    }
    const Summary s = summarize(v);
    f.evidence = {{"min label", s.min, ""}, {"max label", s.max, ""},
                  {"whole numbers (1 = yes)", whole ? 1.0 : 0.0, "labels must be int64"}};
    out.push_back(f);
    if (!whole || one_hot) return out;
  }

  const std::vector<int64_t> v = y.to_vector<int64_t>();
  int64_t masked = 0, n = 0, mn = std::numeric_limits<int64_t>::max(), mx = std::numeric_limits<int64_t>::min();
  int64_t neg = 0, over = 0;
  std::set<int64_t> present;
  for (int64_t c : v) {
    if (c == opts.ignore_index) { ++masked; continue; }
    ++n;
    mn = std::min(mn, c);
    mx = std::max(mx, c);
    if (c < 0) ++neg;
    else if (C > 0 && c >= C) ++over;
    if (c >= 0 && (C <= 0 || c <= C)) present.insert(c);  // the 1-indexed rule looks at 0..C only
  }
  if (n == 0) return out;  // every label masked: L5's business
  // Looks 1-indexed: no 0, and every class 1..K-1 (and K when C is unknown) occurs, often enough.
  const int64_t K = C > 0 ? C : mx;
  bool one_indexed = !present.count(0) && mn >= 1 && K >= 2 && n >= opts.one_indexed_min_per_class * K;
  for (int64_t c = 1; one_indexed && c <= (C > 0 ? K - 1 : K); ++c) one_indexed = present.count(c) > 0;

  auto common = [&](Finding& f) {
    f.shape = y.str();
    f.evidence = {{"min label", static_cast<double>(mn), ""}, {"max label", static_cast<double>(mx), ""}};
    if (C > 0) f.evidence.push_back({"classes C", static_cast<double>(C), ""});
    f.evidence.push_back({"labels checked", static_cast<double>(n), ""});
    if (masked > 0) f.evidence.push_back({"masked labels (== ignore_index)", static_cast<double>(masked), "not counted"});
  };
  if (neg + over > 0) {
    Finding f = make("D9", Severity::Error, "");
    common(f);
    f.evidence.push_back({"labels outside " + range, static_cast<double>(neg + over), "any is an error"});
    if (one_indexed && neg == 0) {
      f.title = "labels run 1.." + num(mx) + ": they look 1-indexed, and " + num(over) + " labels fall outside " + range;
      f.cause = "the labels are numbered from 1: label " + num(C) + " has no output, and output 0 is never "
                "a target";
      f.fix = "subtract 1: y = y - 1, so labels run 0.." + num(C - 1);
    } else {
      f.title = num(neg + over) + " labels fall outside " + range + " (min " + num(mn) + ", max " + num(mx) + ")";
      f.cause = neg > 0 ? "negative labels: a marker for unknown/missing (-1) or a broken label column; cross_entropy "
                          "indexes the logits with the label, so this is out of range"
                        : "more classes in the data than outputs in the model (num_classes too small), or labels "
                          "numbered from 1; an out-of-range label is an error on the CPU and garbage or "
                          "a device assert on a GPU";
      f.fix = neg > 0 ? "drop those rows, or set them to ignore_index (" + num(opts.ignore_index) +
                            ") so the loss skips them"
                      : "make the last layer as wide as the number of classes (max label + 1 = " + num(mx + 1) +
                            ") or remap the labels to 0.." + num(C - 1);
    }
    out.push_back(f);
  } else if (one_indexed) {
    Finding f = make("D9", Severity::Warning,
                     "labels look 1-indexed: 0 never occurs among " + num(n) + " labels while 1.." +
                         num(C > 0 ? K - 1 : K) + " all do");
    common(f);
    f.evidence.push_back({"labels equal to 0", 0.0, "none among >= " + num(opts.one_indexed_min_per_class) +
                                                         " labels per class warns"});
    f.cause = "labels numbered from 1: output 0 is never a target, so the model wastes a class, and a "
              "label equal to the class count would be out of range";
    f.fix = "y = y - 1 so labels run 0..C-1 (if class 0 is really absent from this sample, ignore this)";
    out.push_back(f);
  }
  return out;
}

// ---- D10 same preprocessing for every split ---------------------------------------------------

std::vector<Finding> check_split_consistency(const Tensor& train_x, const Tensor& other_x, const std::string& split,
                                             const DataCheckOptions& opts) {
  GS_CHECK(train_x.defined() && other_x.defined(), "check_split_consistency", "needs defined train and ", split,
           " inputs");
  const std::vector<double> va = doubles(train_x), vb = doubles(other_x);
  const Summary a = summarize(va), b = summarize(vb);
  if (a.finite() == 0 || b.finite() == 0) return {};
  // Robust location and spread: the median, and the width between the 5% and
  // 95% quantiles in units of a normal's std (3.29 of them). A few extreme values
  // (per-feature standardisation of a near-constant pixel gives z-scores in the
  // thousands) move the mean and std a lot and these hardly at all.
  auto finite_only = [](const std::vector<double>& v) {
    std::vector<double> o;
    o.reserve(v.size());
    for (double x : v)
      if (std::isfinite(x)) o.push_back(x);
    return o;
  };
  const std::vector<double> fa = finite_only(va), fb = finite_only(vb);
  auto spread = [](const std::vector<double>& v) { return (quantile(v, 0.95) - quantile(v, 0.05)) / 3.29; };
  const double scale = std::max(spread(fa), 1e-12);
  const double shift = std::fabs(quantile(fb, 0.5) - quantile(fa, 0.5)) / scale;
  const double ratio = std::max(spread(fb), 1e-12) / scale;
  const bool mean_off = shift > opts.max_mean_shift;
  const bool std_off = ratio > opts.max_std_ratio || ratio < 1.0 / opts.max_std_ratio;
  if (!mean_off && !std_off) return {};
  Finding f = make("D10", Severity::Warning,
                   "the " + split + " inputs do not look like train after preprocessing: mean " + fmt_num(b.mean) +
                       " vs " + fmt_num(a.mean) + ", std " + fmt_num(b.std) + " vs " + fmt_num(a.std));
  f.shape = "train " + shape_str(train_x.shape()) + ", " + split + " " + shape_str(other_x.shape());
  f.evidence = {{"train mean", a.mean, ""},
                {split + " mean", b.mean, ""},
                {"train std", a.std, ""},
                {split + " std", b.std, ""},
                {"mean shift (in train stds)", shift,
                 "the medians' distance in robust train stds; > " + fmt_num(opts.max_mean_shift) + " warns"},
                {"std ratio (" + split + " / train)", ratio,
                 "of the 5%-95% quantile widths; outside [" + fmt_num(1.0 / opts.max_std_ratio) + ", " +
                     fmt_num(opts.max_std_ratio) + "] warns"}};
  f.cause = "the splits went through different preprocessing: train was scaled/standardised and " + split +
            " was not (or was scaled twice, or with its own statistics), or the " + split +
            " data comes from a different source; the model sees inputs unlike anything it trained on";
  f.fix = "apply one pipeline to every split: fit the transform on train (norm.fit(train_x, \"train\")) and call "
          "norm.transform(...) on train, val and test alike";
  return {f};
}

// ---- D12-D16 split integrity -------------------------------------------------------------------

namespace {

// What D12-D16 read of a split: its first opts.integrity_examples rows, chunk by chunk, as a
// hash per input (row_hashes_x, byte for byte like D4), the label, and the input's mean and
// std per example.
struct SplitSample {
  std::string name;
  int64_t size = 0;  // rows in the dataset
  std::vector<uint64_t> x;
  std::vector<Label> y;
  std::vector<double> means, stds;  // per example
  bool classes = true;  // every label is one whole number: class indices
  std::string shape;    // one example's input shape
  int64_t features = -1;  // its number of values (-1 before the first row)
  int64_t read() const { return static_cast<int64_t>(x.size()); }
  // " (the first N rows read)" when the sample is not the whole split.
  std::string partial() const { return read() < size ? " (the first " + num(read()) + " rows read)" : ""; }
};

SplitSample read_split(const nn::Dataset& d, const DataCheckOptions& opts) {
  SplitSample s;
  s.name = d.name();
  s.size = d.size();
  const int64_t n = std::min(s.size, std::max<int64_t>(0, opts.integrity_examples));
  const int64_t chunk = std::max<int64_t>(1, opts.alignment_chunk);
  NoGradGuard ng;
  for (int64_t lo = 0; lo < n; lo += chunk) {
    const nn::Batch b = d.get_batch(rows(lo, std::min(n, lo + chunk)));
    const int64_t B = b.size();
    if (B == 0) continue;
    if (s.features < 0) {
      s.shape = shape_str(b.x[0].shape());
      s.features = b.x[0].numel();
    }
    const std::vector<uint64_t> xh = row_hashes_x(b.x);
    const std::vector<Label> yl = row_labels(b.y);
    s.x.insert(s.x.end(), xh.begin(), xh.end());
    s.y.insert(s.y.end(), yl.begin(), yl.end());
    s.classes = s.classes && b.y.dim() == 1 &&
                std::all_of(yl.begin(), yl.end(), [](const Label& l) { return is_whole(l.value); });
    const Tensor xb = b.x.reshape({B, -1}).to(kFloat64);
    const std::vector<double> m = xb.mean({1}).to_vector<double>();
    const std::vector<double> sd = xb.std({1}, /*unbiased=*/false).to_vector<double>();
    s.means.insert(s.means.end(), m.begin(), m.end());
    s.stds.insert(s.stds.end(), sd.begin(), sd.end());
  }
  return s;
}

// Both splits' examples must hold as many values for their inputs to be compared (the
// shapes may differ: [1, 28, 28] and [784] hold the same image).
void require_comparable(const SplitSample& a, const SplitSample& b, const char* check, const std::string& split) {
  GS_CHECK(a.features < 0 || b.features < 0 || a.features == b.features, check, "the training examples have shape ",
           a.shape, " (", a.features, " values) but the ", split, " examples ", b.shape, " (", b.features,
           " values): the splits cannot be compared; give both the same preprocessing (the same resizing, "
           "cropping and transforms) before comparing them");
}

// The two-sample Kolmogorov-Smirnov statistic: the largest distance between the empirical
// CDFs of a and b (non-finite values left out; D2 reports them). NaN when either is empty.
double ks_statistic(std::vector<double> a, std::vector<double> b) {
  auto finite = [](std::vector<double>& v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
    std::sort(v.begin(), v.end());
  };
  finite(a);
  finite(b);
  if (a.empty() || b.empty()) return kNaN;
  const double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size());
  size_t i = 0, j = 0;
  double d = 0.0;
  while (i < a.size() && j < b.size()) {
    const double v = std::min(a[i], b[j]);
    while (i < a.size() && a[i] <= v) ++i;
    while (j < b.size() && b[j] <= v) ++j;
    d = std::max(d, std::fabs(static_cast<double>(i) / na - static_cast<double>(j) / nb));
  }
  return d;
}

std::vector<Finding> duplicates(const SplitSample& s, const DataCheckOptions& opts) {
  struct Group {
    int64_t count = 0, first = -1, second = -1;
    std::vector<Label> labels;  // the distinct labels this input has
  };
  std::unordered_map<uint64_t, Group> groups;
  groups.reserve(s.x.size());
  for (int64_t r = 0; r < s.read(); ++r) {
    Group& g = groups[s.x[r]];
    if (++g.count == 1) g.first = r;
    else if (g.second < 0) g.second = r;
    if (std::none_of(g.labels.begin(), g.labels.end(), [&](const Label& l) { return l.hash == s.y[r].hash; }))
      g.labels.push_back(s.y[r]);
  }
  int64_t repeated = 0, conflicting = 0, conflict_inputs = 0, most = 0;
  const Group* dup_example = nullptr;
  const Group* conflict_example = nullptr;
  for (const auto& [h, g] : groups) {
    if (g.count < 2) continue;
    repeated += g.count - 1;
    most = std::max(most, g.count);
    if (!dup_example || g.first < dup_example->first) dup_example = &g;
    if (g.labels.size() < 2) continue;
    conflicting += g.count;
    ++conflict_inputs;
    if (!conflict_example || g.first < conflict_example->first) conflict_example = &g;
  }
  if (repeated == 0) return {};
  const double n = static_cast<double>(s.read());
  const double dup_frac = static_cast<double>(repeated) / n, conflict_frac = static_cast<double>(conflicting) / n;
  const bool too_many = dup_frac > opts.max_duplicate_fraction;
  const bool conflicts = conflict_frac > opts.max_conflict_fraction;
  auto labels_of = [](const Group& g) {
    std::string t;
    for (size_t k = 0; k < g.labels.size(); ++k) t += (k ? ", " : "") + fmt_num(g.labels[k].value);
    return t;
  };
  const Group& ex = conflict_example ? *conflict_example : *dup_example;
  const std::string example = "rows " + num(ex.first) + " and " + num(ex.second) + " hold the same input (" +
                              (ex.labels.size() > 1 ? "labels " : "label ") + labels_of(ex) + ")";
  Finding f = make("D12", conflicts || too_many ? Severity::Warning : Severity::Info, "");
  if (conflicts)
    f.title = num(conflicting) + " of " + num(s.read()) + " rows of " + s.name + " share their input with a row " +
              "of another label (" + num(conflict_inputs) + " inputs with conflicting labels)" + s.partial();
  else
    f.title = num(repeated) + " of " + num(s.read()) + " rows of " + s.name + " repeat an earlier row's input (" +
              pct(dup_frac) + ")" + s.partial();
  f.shape = "x " + s.shape + " per example";
  f.evidence = {{"rows read", n, ""},
                {"repeated rows (copies after the first)", static_cast<double>(repeated), ""},
                {"duplicate fraction", dup_frac, "> " + fmt_num(opts.max_duplicate_fraction) + " warns"},
                {"rows whose input has another label elsewhere", static_cast<double>(conflicting), ""},
                {"conflicting-label fraction", conflict_frac, "> " + fmt_num(opts.max_conflict_fraction) + " warns"},
                {"most copies of one input", static_cast<double>(most), ""}};
  if (conflicts)
    f.cause = "the same input carries different labels: annotation errors, or rows appended twice with the "
              "labels of another source (a merge of two label files, oversampling that relabelled copies). The "
              "model is asked to predict two classes for one image, so no model can fit those rows; the loss "
              "cannot reach zero and accuracy is capped. For example: " + example;
  else
    f.cause = "rows were appended more than once (a concatenation done twice, oversampling, a merge of "
              "overlapping sources): the copies weigh more in the loss than the rest, the epoch is longer than "
              "the data, and any copy that also lands in the validation split inflates its score. For "
              "example: " + example;
  f.fix = conflicts ? "look at the rows with conflicting labels (start with rows " + num(ex.first) + " and " +
                          num(ex.second) + "), keep one correct label per input and drop the others; then split"
                    : "drop the repeated rows before splitting (keep the first copy of each input); oversample on "
                      "purpose only inside the training loader (a weighted sampler), never by copying rows";
  if (!f.fires())
    f.fix = "nothing to do at this rate (" + pct(dup_frac) + " of the rows, <= " + pct(opts.max_duplicate_fraction) +
            "); drop the copies if they matter to you";
  return {f};
}

std::vector<Finding> samples_mix(const SplitSample& train, const SplitSample& other, const std::string& split,
                                 const DataCheckOptions& opts) {
  require_comparable(train, other, "check_train_test_mix", split);
  std::unordered_map<uint64_t, int64_t> first;  // input hash -> its first training row
  first.reserve(train.x.size());
  for (int64_t r = 0; r < train.read(); ++r) first.emplace(train.x[r], r);
  int64_t mixed = 0, relabelled = 0, ex_val = -1, ex_train = -1;
  for (int64_t r = 0; r < other.read(); ++r) {
    auto it = first.find(other.x[r]);
    if (it == first.end()) continue;
    ++mixed;
    if (train.y[it->second].hash != other.y[r].hash) ++relabelled;
    if (ex_val < 0) {
      ex_val = r;
      ex_train = it->second;
    }
  }
  if (mixed == 0 || other.read() == 0) return {};
  const double frac = static_cast<double>(mixed) / static_cast<double>(other.read());
  const bool fires = frac > opts.max_mix_fraction;
  Finding f = make("D13", fires ? Severity::Warning : Severity::Info,
                   num(mixed) + " of " + num(other.read()) + " " + split + " rows (" + pct(frac) +
                       ") are also training rows: the same input is in both splits" + other.partial());
  f.shape = "x " + other.shape + " per example";
  f.evidence = {{split + " rows read", static_cast<double>(other.read()), ""},
                {"training rows read", static_cast<double>(train.read()), ""},
                {split + " rows also in train", static_cast<double>(mixed), ""},
                {"mixed fraction", frac, "> " + fmt_num(opts.max_mix_fraction) + " warns"},
                {"of them with another label than in train", static_cast<double>(relabelled), ""}};
  f.cause = "the " + split + " split was not held out: it was drawn from data that includes the training rows "
            "(split after duplicating or augmenting, two random samples drawn with replacement, a test set "
            "built from the training file, or the source holds the same image twice). The model has seen those "
            "inputs with their labels, so its " + split + " score measures memory, not generalisation. For "
            "example: " + split + " row " + num(ex_val) + " is training row " + num(ex_train);
  f.fix = fires ? "split once into disjoint sets (nn::train_val_split, or the dataset's own train/test files) after "
                  "removing duplicate inputs (D12), and drop from " + split + " every row whose input is in train"
                : "nothing to do at this rate (<= " + pct(opts.max_mix_fraction) + " of the " + split +
                      " rows); drop those rows from " + split + " for an exact held-out score";
  return {f};
}

std::vector<Finding> feature_drift(const SplitSample& train, const SplitSample& other, const std::string& split,
                                   const DataCheckOptions& opts) {
  require_comparable(train, other, "check_feature_drift", split);
  if (train.read() < opts.min_drift_examples || other.read() < opts.min_drift_examples) return {};
  const double ks_mean = ks_statistic(train.means, other.means), ks_std = ks_statistic(train.stds, other.stds);
  const bool mean_off = ks_mean > opts.max_drift_ks, std_off = ks_std > opts.max_drift_ks;
  if (!mean_off && !std_off) return {};
  const double mt = median(train.means), mo = median(other.means), st = median(train.stds), so = median(other.stds);
  Finding f = make("D14", Severity::Warning,
                   "the " + split + " inputs drifted from train: per-example " +
                       (mean_off ? "mean (brightness) median " + fmt_num(mo) + " vs " + fmt_num(mt) + ", KS " +
                                       fmt_num(ks_mean)
                                 : "std (contrast) median " + fmt_num(so) + " vs " + fmt_num(st) + ", KS " +
                                       fmt_num(ks_std)));
  f.shape = "x " + train.shape + " per example";
  const std::string rule = "> " + fmt_num(opts.max_drift_ks) + " warns";
  f.evidence = {{"KS statistic, per-example mean", ks_mean, rule},
                {"KS statistic, per-example std", ks_std, rule},
                {"train median of the per-example mean", mt, ""},
                {split + " median of the per-example mean", mo, ""},
                {"train median of the per-example std", st, ""},
                {split + " median of the per-example std", so, ""},
                {"training rows compared", static_cast<double>(train.read()), ""},
                {split + " rows compared", static_cast<double>(other.read()), ""}};
  f.cause = "the " + split + " images come from a different distribution than the training images: another "
            "source or camera, a brightness or contrast change, an augmentation applied to one split only, or "
            "a split made along a sorted order (by time, by source) instead of at random. The model is scored "
            "on inputs unlike those it trained on. When D10 fires too, the splits went through different "
            "preprocessing: fix that first";
  f.fix = "split the data at random (nn::train_val_split) and apply the same transforms to every split; if the " +
          split + " data is meant to differ (the deployment domain), expect the score to drop and add such "
          "images to training (or augment brightness and contrast)";
  return {f};
}

std::vector<Finding> label_drift(const SplitSample& train, const SplitSample& other, const std::string& split,
                                 const DataCheckOptions& opts) {
  if (!train.classes || !other.classes || train.read() == 0 || other.read() == 0) return {};
  auto count = [&](const SplitSample& s) {
    std::map<int64_t, int64_t> c;
    for (const Label& l : s.y)
      if (l.value != static_cast<double>(opts.ignore_index)) ++c[static_cast<int64_t>(l.value)];
    return c;
  };
  const std::map<int64_t, int64_t> ct = count(train), co = count(other);
  std::vector<int64_t> fresh;
  int64_t fresh_rows = 0, shared_rows = 0, nt = 0;
  for (const auto& [c, k] : co) {
    if (ct.count(c)) shared_rows += k;
    else { fresh.push_back(c); fresh_rows += k; }
  }
  for (const auto& [c, k] : ct) nt += k;
  std::vector<Finding> out;
  if (!fresh.empty()) {
    Finding f = make("D15", Severity::Warning,
                     num(static_cast<int64_t>(fresh.size())) +
                         (fresh.size() == 1 ? " class of " + split + " never occurs" : " classes of " + split + " never occur") +
                         " in train: class " +
                         list_ints(fresh) + " (" + num(fresh_rows) + " of " + num(other.read()) + " " + split +
                         " rows)" + train.partial());
    f.evidence = {{"new classes", static_cast<double>(fresh.size()), "any warns"},
                  {split + " rows with a new class", static_cast<double>(fresh_rows), ""},
                  {"classes in train", static_cast<double>(ct.size()), ""},
                  {"classes in " + split, static_cast<double>(co.size()), ""}};
    f.cause = "the splits do not share their classes: the training split was cut from data sorted by class (the "
              "first N rows hold only some classes), a class was filtered out of train, or the " + split +
              " labels use another numbering (1-indexed, another label map). The model never saw these classes, "
              "so every " + split + " example of them is misclassified";
    f.fix = "split at random after shuffling (nn::train_val_split) so every class is in both splits, and use one "
            "label map for all splits; if a class is really new, add training examples of it";
    out.push_back(f);
  }
  if (train.read() < opts.min_drift_examples || other.read() < opts.min_drift_examples || nt == 0 || shared_rows == 0)
    return out;
  // PSI over the classes train has (the new ones are reported above); a share of 0 counts as 1e-4.
  double psi = 0.0, tvd = 0.0, worst = -1.0, worst_t = 0.0, worst_o = 0.0;
  int64_t worst_c = -1;
  for (const auto& [c, k] : ct) {
    const double pt = static_cast<double>(k) / static_cast<double>(nt);
    const double po = static_cast<double>(co.count(c) ? co.at(c) : 0) / static_cast<double>(shared_rows);
    const double a = std::max(pt, 1e-4), b = std::max(po, 1e-4);
    psi += (b - a) * std::log(b / a);
    tvd += 0.5 * std::fabs(po - pt);
    if (std::fabs(po - pt) > worst) {
      worst = std::fabs(po - pt);
      worst_c = c;
      worst_t = pt;
      worst_o = po;
    }
  }
  if (psi <= opts.max_label_psi) return out;
  Finding f = make("D15", Severity::Warning,
                   "the class frequencies of " + split + " differ from train: PSI " + fmt_num(psi) + " (class " +
                       num(worst_c) + ": " + pct(worst_o) + " of " + split + " vs " + pct(worst_t) + " of train)");
  f.evidence = {{"population-stability index", psi, "> " + fmt_num(opts.max_label_psi) + " warns"},
                {"total-variation distance", tvd, ""},
                {"class " + num(worst_c) + " share in train", worst_t, ""},
                {"class " + num(worst_c) + " share in " + split, worst_o, ""},
                {"training labels counted", static_cast<double>(nt), ""},
                {split + " labels counted", static_cast<double>(shared_rows), ""}};
  f.cause = "the splits were not drawn from the same population: a split along a sorted order (by class, by "
            "time), a " + split + " set filtered or resampled differently, or class balancing applied to one "
            "split only. Accuracy on " + split + " then weighs the classes differently from training, and a "
            "model biased toward the training frequencies looks better or worse than it is";
  f.fix = "split at random, stratified by class (shuffle, then nn::train_val_split), and balance (reweight or "
          "resample) only the training loader; report per-class accuracy when the frequencies must differ";
  out.push_back(f);
  return out;
}

std::vector<Finding> split_sizes(int64_t train_rows, int64_t other_rows, const std::string& split,
                                 const DataCheckOptions& opts) {
  const double ratio = train_rows > 0 ? static_cast<double>(other_rows) / static_cast<double>(train_rows) : kNaN;
  const bool tiny = other_rows < opts.min_val_examples;
  const bool small = train_rows > 0 && ratio < opts.min_val_ratio;
  if (!tiny && !small) return {};
  // The standard error of an accuracy near 0.9 on this many examples: how much the score moves by chance.
  const double se = other_rows > 0 ? std::sqrt(0.9 * 0.1 / static_cast<double>(other_rows)) : kNaN;
  Finding f = make("D16", Severity::Warning,
                   other_rows == 0 ? "the " + split + " split is empty"
                                   : "the " + split + " split has only " + num(other_rows) + " examples against " +
                                         num(train_rows) + " in train (ratio " + fmt_num(ratio) + ")");
  f.evidence = {{"training rows", static_cast<double>(train_rows), ""},
                {split + " rows", static_cast<double>(other_rows), "< " + num(opts.min_val_examples) + " warns"},
                {split + " / train ratio", ratio, "< " + fmt_num(opts.min_val_ratio) + " warns"},
                {"std error of an accuracy of 0.9 on it", se, ""}};
  f.cause = "too few examples were held out (a val_fraction meant as a percentage, take(n) on the wrong split, "
            "a filter that removed most of it): the " + split + " score moves by several points from one "
            "example to the next, so it cannot rank epochs, learning rates or models, and early stopping on it "
            "stops at random";
  f.fix = "hold out at least " + num(opts.min_val_examples) + " examples and " + pct(opts.min_val_ratio) +
          " of the training size (10-20% is common: nn::train_val_split(data, 0.1)), or evaluate on the dataset's "
          "own test split";
  return {f};
}

}  // namespace

std::vector<Finding> check_duplicates(const nn::Dataset& data, const DataCheckOptions& opts) {
  return duplicates(read_split(data, opts), opts);
}

std::vector<Finding> check_train_test_mix(const nn::Dataset& train, const nn::Dataset& other, const std::string& split,
                                          const DataCheckOptions& opts) {
  return samples_mix(read_split(train, opts), read_split(other, opts), split, opts);
}

std::vector<Finding> check_feature_drift(const nn::Dataset& train, const nn::Dataset& other, const std::string& split,
                                         const DataCheckOptions& opts) {
  return feature_drift(read_split(train, opts), read_split(other, opts), split, opts);
}

std::vector<Finding> check_label_drift(const nn::Dataset& train, const nn::Dataset& other, const std::string& split,
                                       const DataCheckOptions& opts) {
  return label_drift(read_split(train, opts), read_split(other, opts), split, opts);
}

std::vector<Finding> check_split_sizes(const nn::Dataset& train, const nn::Dataset& other, const std::string& split,
                                       const DataCheckOptions& opts) {
  return split_sizes(train.size(), other.size(), split, opts);
}

std::vector<Finding> check_splits(const nn::Dataset& train, const nn::Dataset& other, const std::string& split,
                                  const DataCheckOptions& opts) {
  std::vector<Finding> out = split_sizes(train.size(), other.size(), split, opts);
  const SplitSample a = read_split(train, opts), b = read_split(other, opts);
  auto add = [&](std::vector<Finding> fs) { out.insert(out.end(), fs.begin(), fs.end()); };
  add(samples_mix(a, b, split, opts));
  add(feature_drift(a, b, split, opts));
  add(label_drift(a, b, split, opts));
  return out;
}

// ---- all loader checks at once ---------------------------------------------------------------

std::vector<Finding> check_loader(const nn::DataLoader& loader, int64_t num_classes, const DataCheckOptions& opts) {
  std::vector<nn::Batch> batches;
  for (int64_t i : spread_batches(loader, opts.diversity_batches)) batches.push_back(loader.batch(loader.epoch(), i));
  if (batches.empty()) return {};  // drop_last with fewer rows than one batch
  tensor_list xs, ys;
  for (const nn::Batch& b : batches) {
    xs.push_back(b.x);
    ys.push_back(b.y);
  }
  Tensor X, Y;
  {
    NoGradGuard ng;
    X = cat(xs);
    Y = cat(ys);
  }
  std::vector<Finding> out = check_batch(batches[0].x, batches[0].y);
  auto add = [&](std::vector<Finding> fs) { out.insert(out.end(), fs.begin(), fs.end()); };
  add(check_finite_inputs(X, Y));
  const bool classes = is_integral(Y.dtype()) || num_classes > 0;
  if (classes) add(check_label_distribution(Y, num_classes, opts));
  add(check_normalisation(X, opts));
  add(diversity(batches, loader, opts));
  if (classes) add(check_label_encoding(Y, num_classes, opts));
  return out;
}

}  // namespace gradsleuth::debug
