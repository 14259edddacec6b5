// D10 the same preprocessing for every split (see data_checks.h).
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
#include "debug/checks/data/data_util.h"

namespace gradsleuth::debug {

using namespace data_detail;

// ---- D10 same preprocessing for every split ---------------------------------------------------

namespace data_detail {
RobustQuantiles robust_quantiles(const std::vector<double>& v) {
  std::vector<double> f;
  f.reserve(v.size());
  for (double x : v)
    if (std::isfinite(x)) f.push_back(x);
  if (f.empty()) return {};
  const auto at = [&](double q) {
    return static_cast<std::ptrdiff_t>(std::floor(q * static_cast<double>(f.size() - 1)));
  };
  const std::ptrdiff_t k05 = at(0.05), k50 = at(0.5), k95 = at(0.95);
  // The median's selection splits the copy; the outer two select within their side only.
  std::nth_element(f.begin(), f.begin() + k50, f.end());
  if (k05 < k50) std::nth_element(f.begin(), f.begin() + k05, f.begin() + k50);
  if (k95 > k50) std::nth_element(f.begin() + k50 + 1, f.begin() + k95, f.end());
  return {f[static_cast<size_t>(k05)], f[static_cast<size_t>(k50)], f[static_cast<size_t>(k95)]};
}
}  // namespace data_detail

namespace {
// The mean |Spearman correlation| over the pairs of up to max_features features (evenly spaced)
// of the first max_rows rows of x (N, D...), NaN when there are fewer than 2 features or 20 rows.
// A monotone per-feature transform (a shift, a scale, a standardisation, a log) leaves it
// unchanged; noise added to the values, or another source, does not.
double rank_structure(const std::vector<double>& v, int64_t rows, int64_t max_rows, int64_t max_features) {
  const int64_t n = std::min(rows, max_rows);
  if (rows <= 0 || n < 20) return std::numeric_limits<double>::quiet_NaN();
  const int64_t F = static_cast<int64_t>(v.size()) / rows;
  if (F < 2) return std::numeric_limits<double>::quiet_NaN();
  const int64_t k = std::min(F, max_features);
  std::vector<std::vector<double>> ranked(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) {
    const int64_t col = j * F / k;
    std::vector<double> c(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const double x = v[static_cast<size_t>(i * F + col)];
      c[static_cast<size_t>(i)] = std::isfinite(x) ? x : 0.0;
    }
    ranked[static_cast<size_t>(j)] = detail::ranks(c);
  }
  double total = 0.0;
  int64_t pairs = 0;
  for (int64_t a = 0; a < k; ++a)
    for (int64_t b = a + 1; b < k; ++b) {
      const double rho = detail::pearson(ranked[static_cast<size_t>(a)], ranked[static_cast<size_t>(b)]);
      if (std::isnan(rho)) continue;  // a constant feature
      total += std::fabs(rho);
      ++pairs;
    }
  return pairs > 0 ? total / static_cast<double>(pairs) : std::numeric_limits<double>::quiet_NaN();
}

// What an example's nearest neighbour says about its label (neighbour_labels below), on the first
// kNeighbourRows rows of each split: one split below kMaxNeighbourLabelsRatio x the other's, the
// larger at least kMinNeighbourLabels, is no preprocessing (info). A shift or a scale of a feature
// leaves it as it is, up to the sampling noise of a few hundred rows (a binomial sd of 0.02-0.04 on
// an agreement of 0.6-0.9); noise of 2 feature stds written into the training inputs of blobs or
// spirals (the corpus' TAN at 2, where the features have no rank structure) halves it or worse.
constexpr int64_t kNeighbourRows = 600;
constexpr double kMinNeighbourLabels = 0.2;
constexpr double kMaxNeighbourLabelsRatio = 0.7;

// How much each example's nearest neighbour tells about its label, over the first n rows of x (N, D...)
// and y: for class labels (int64, one per row) the share of rows whose nearest other row has the same
// label, above chance (sum of the classes' squared shares) and scaled to 1 for every neighbour right;
// for one float target per row, the correlation between a row's target and its neighbour's. Distances
// over up to max_features features (evenly spaced), each standardised by its own mean and std on
// these rows: a per-feature shift or scale leaves the value as it is; noise added to the inputs pulls
// it towards 0. NaN when there are fewer than 20 rows or no usable feature or label.
double neighbour_labels(const std::vector<double>& v, int64_t rows, const Tensor& y, int64_t n, int64_t max_features) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (!y.defined() || rows <= 0 || n < 20 || y.dim() < 1 || y.size(0) < n || y.numel() != y.size(0)) return nan;
  const bool classes = y.dtype() == kInt64;
  const std::vector<double> t = doubles(y.narrow(0, 0, n).reshape({-1}));
  const std::vector<int64_t> near = nearest_rows(v, rows, n, max_features, /*floor_spread=*/false);
  if (near.empty()) return nan;
  std::vector<double> own, theirs;
  for (int64_t i = 0; i < n; ++i) {
    own.push_back(t[static_cast<size_t>(i)]);
    theirs.push_back(t[static_cast<size_t>(near[static_cast<size_t>(i)])]);
  }
  if (classes) {
    std::map<double, double> share;
    double same = 0;
    for (size_t i = 0; i < own.size(); ++i) {
      share[own[i]] += 1.0 / static_cast<double>(own.size());
      same += own[i] == theirs[i];
    }
    double chance = 0;
    for (const auto& [c, q] : share) chance += q * q;
    if (chance >= 1.0) return nan;
    return (same / static_cast<double>(own.size()) - chance) / (1.0 - chance);
  }
  return detail::pearson(own, theirs);
}
}  // namespace

std::vector<Finding> check_split_consistency(const Tensor& train_x, const Tensor& other_x, const std::string& split,
                                             const DataCheckOptions& opts) {
  return check_split_consistency(train_x, Tensor(), other_x, Tensor(), split, opts);
}

std::vector<Finding> check_split_consistency(const Tensor& train_x, const Tensor& train_y, const Tensor& other_x,
                                             const Tensor& other_y, const std::string& split,
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
  const RobustQuantiles qa = robust_quantiles(va), qb = robust_quantiles(vb);
  const double scale = std::max(qa.spread(), 1e-12);
  const double shift = std::fabs(qb.q50 - qa.q50) / scale;
  const double ratio = std::max(qb.spread(), 1e-12) / scale;
  const bool mean_off = shift > opts.max_mean_shift;
  const bool std_off = ratio > opts.max_std_ratio || ratio < 1.0 / opts.max_std_ratio;
  if (!mean_off && !std_off) return {};
  // A preprocessing step maps each feature monotonically and keeps the features' rank
  // correlations; when they differ too, the values themselves differ (noise, another source): D14.
  const double ra = rank_structure(va, train_x.dim() > 0 ? train_x.size(0) : 0, opts.rank_rows, opts.rank_features);
  const double rb = rank_structure(vb, other_x.dim() > 0 ? other_x.size(0) : 0, opts.rank_rows, opts.rank_features);
  const bool ranks_differ = std::isfinite(ra) && std::isfinite(rb) && std::max(ra, rb) >= opts.min_rank_structure &&
                            std::min(ra, rb) < opts.max_rank_structure_ratio * std::max(ra, rb);
  // ... and it keeps what an example's nearest neighbour says about its label (each feature
  // standardised on its own split, the same number of rows from each): noise written into one
  // split's inputs loses it there, on features with no rank structure too (blobs, spirals).
  const int64_t rows_a = train_x.dim() > 0 ? train_x.size(0) : 0, rows_b = other_x.dim() > 0 ? other_x.size(0) : 0;
  const int64_t n = std::min({rows_a, rows_b, kNeighbourRows});
  const double na = neighbour_labels(va, rows_a, train_y, n, opts.rank_features);
  const double nb = neighbour_labels(vb, rows_b, other_y, n, opts.rank_features);
  const bool neighbours_differ = std::isfinite(na) && std::isfinite(nb) &&
                                 std::max(na, nb) >= kMinNeighbourLabels &&
                                 std::min(na, nb) < kMaxNeighbourLabelsRatio * std::max(na, nb);
  const bool structure_differs = ranks_differ || neighbours_differ;
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
  if (std::isfinite(ra) && std::isfinite(rb)) {
    f.evidence.push_back({"mean |rank correlation| between features, train", ra, ""});
    f.evidence.push_back({"the same, " + split, rb,
                          "a preprocessing step keeps it; below " + fmt_num(opts.max_rank_structure_ratio) +
                              "x the other's (either at " + fmt_num(opts.min_rank_structure) +
                              " or more) is no preprocessing: info"});
  }
  if (std::isfinite(na) && std::isfinite(nb)) {
    f.evidence.push_back({"labels told by the nearest neighbour (above chance), train", na, ""});
    f.evidence.push_back({"labels told by the nearest neighbour (above chance), " + split, nb,
                          "a preprocessing step keeps it; below " + fmt_num(kMaxNeighbourLabelsRatio) +
                              "x the other's (either at " + fmt_num(kMinNeighbourLabels) +
                              " or more) is no preprocessing: info"});
  }
  if (structure_differs) {
    f.severity = Severity::Info;
    f.title = "the " + split + " inputs differ from train in more than their preprocessing: " +
              (ranks_differ ? "the features' rank correlations differ too (" + fmt_num(rb) + " vs " + fmt_num(ra) + ")"
                            : "an example's nearest neighbour tells its label " + fmt_num(nb) + " vs " +
                                  fmt_num(na) + " (above chance)");
    f.cause = "a per-feature transform (scaling, shift, standardisation, a log) keeps the rank correlations between "
              "features and what an example's neighbours say about its label; these changed, so the values "
              "themselves differ: noise written into one split's inputs, or another source (D14 compares the "
              "distributions)";
    f.fix = "compare a few raw inputs of both splits; see D14 (feature drift) and L9 (the model on both splits)";
    return {f};
  }
  f.cause = "the splits went through different preprocessing: train was scaled/standardised and " + split +
            " was not (or was scaled twice, or with its own statistics), or the " + split +
            " data comes from a different source; the model sees inputs unlike anything it trained on";
  f.fix =
      "apply one pipeline to every split: fit the transform on train (norm.fit(train_x, \"train\")) and call "
      "norm.transform(...) on train, val and test alike";
  return {f};
}

// ---- D10: a split read twice ----------------------------------------------------------------
std::vector<Finding> check_split_repeatable(const Tensor& first_read, const Tensor& again, const std::string& split) {
  if (!first_read.defined() || !again.defined() || first_read.shape() != again.shape() || first_read.numel() == 0 ||
      !first_read.is_floating_point())
    return {};
  const std::vector<double> a = doubles(first_read), b = doubles(again);
  int64_t differ = 0;
  double largest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]));
    if (same) continue;
    ++differ;
    if (std::isfinite(a[i]) && std::isfinite(b[i])) largest = std::max(largest, std::fabs(a[i] - b[i]));
  }
  if (differ == 0) return {};
  const int64_t rows = first_read.dim() > 0 ? first_read.size(0) : 1;
  Finding f = make("D10", Severity::Warning,
                   "the " + split + " split's inputs change from one read to the next (" + num(rows) +
                       " rows read twice, " + str_printf("%.3g", 100.0 * static_cast<double>(differ) / a.size()) +
                       "% of their values differ): a random transform runs on " + split);
  f.evidence = {{"rows read twice", static_cast<double>(rows), ""},
                {"values that differ between the two reads", static_cast<double>(differ), "any warns"},
                {"values read", static_cast<double>(a.size()), ""},
                {"largest difference", largest, ""}};
  f.cause = "the " + split +
            " split goes through a random transform (the training pipeline's augmentation: flips, crops, noise), "
            "or draws new data at every read: its scores move between passes with the same weights, and they "
            "measure the model on inputs it will not meet";
  f.fix = "build the " + split +
          " dataset without the random transforms (keep only the deterministic ones: resizing, normalisation), and "
          "keep it fixed from epoch to epoch";
  return {f};
}

}  // namespace gradsleuth::debug
