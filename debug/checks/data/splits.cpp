// D13, D14, D16 split integrity: rows shared between splits, feature drift, split sizes, judged on the
// sample of a split's rows (split_sample.cpp) that D12 (conflicts.cpp) and D15 (label_drift.cpp) read too
// (see data_checks.h).
#include "debug/checks/data/data_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <unordered_map>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/data/data_util.h"
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

using namespace data_detail;

// ---- D13-D16 split integrity -------------------------------------------------------------------

namespace {

// Both splits' examples must hold as many values for their inputs to be compared (the
// shapes may differ: [1, 28, 28] and [784] hold the same image).
void require_comparable(const SplitSample& a, const SplitSample& b, const char* check, const std::string& split) {
  GS_CHECK(a.features < 0 || b.features < 0 || a.features == b.features, check, "the training examples have shape ",
           a.shape, " (", a.features, " values) but the ", split, " examples ", b.shape, " (", b.features,
           " values): the splits cannot be compared; give both the same preprocessing (the same resizing, "
           "cropping and transforms) before comparing them");
}

std::vector<Finding> samples_mix(const SplitSample& train, const SplitSample& other, const std::string& split,
                                 const DataCheckOptions& opts) {
  require_comparable(train, other, "check_train_test_mix", split);
  std::unordered_map<uint64_t, int64_t> first;  // input hash -> its first training row
  first.reserve(train.x.size());
  int64_t train_repeats = 0;  // training rows repeating an earlier training row's input
  for (int64_t r = 0; r < train.read(); ++r) train_repeats += first.emplace(train.x[r], r).second ? 0 : 1;
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
  // Whole-number inputs that repeat within the training split as often as D12's discrete rule asks: a
  // small discrete set, where a held-out row meets a training row's input by nature.
  const double train_dup =
      train.read() > 0 ? static_cast<double>(train_repeats) / static_cast<double>(train.read()) : 0;
  const bool discrete = train.integral_inputs && other.integral_inputs && train_dup >= opts.discrete_duplicate_fraction;
  // Whole-number inputs from a finite set also collide by chance where they repeat less: a held-out row
  // meets some training row about twice as often as a training row meets an earlier one (n / K against
  // n / 2K on average, for K equally likely inputs). An overlap within 3 standard errors of that is the
  // draw, not a split that leaked.
  // So do rows joined from a smaller set of items (a user's and an article's features per impression):
  // the same pair recurs, within train and across the splits alike.
  const double expected = 2.0 * train_dup * static_cast<double>(other.read());
  // Rows copied to oversample the rarer labels are not items met again by chance: copies of one row on
  // both sides of the split leak it.
  const bool joined =
      !train.integral_inputs && train.tabular && train.repeats > 1.0 && !(oversampling_tilt(train) < kOversampledShare);
  const bool by_chance = ((train.integral_inputs && other.integral_inputs) || joined) && train_repeats > 0 &&
                         static_cast<double>(mixed) <= expected + 3.0 * std::sqrt(expected);
  const bool fires = frac > opts.max_mix_fraction && !discrete && !by_chance;
  Finding f = make("D13", fires ? Severity::Warning : Severity::Info,
                   num(mixed) + " of " + num(other.read()) + " " + split + " rows (" + pct(frac) +
                       ") are also training rows: the same input is in both splits" +
                       (discrete ? " (inputs from a small discrete set: " + pct(train_dup) +
                                       " of the training rows repeat one another's too)"
                        : by_chance ? std::string(joined ? " (as often as rows joined from repeated items"
                                                         : " (as often as whole-number inputs") +
                                          " that repeat within train at " + pct(train_dup) + " meet by chance)"
                                    : std::string()) +
                       other.partial());
  f.shape = "x " + other.shape + " per example";
  f.evidence = {{split + " rows read", static_cast<double>(other.read()), ""},
                {"training rows read", static_cast<double>(train.read()), ""},
                {split + " rows also in train", static_cast<double>(mixed), ""},
                {"mixed fraction", frac, "> " + fmt_num(opts.max_mix_fraction) + " warns"},
                {"of them with another label than in train", static_cast<double>(relabelled), ""}};
  if (train.integral_inputs || joined) {
    f.evidence.push_back({std::string("training rows repeating an earlier training row (") +
                              (joined ? "rows joined from repeated items)" : "whole-number inputs)"),
                          train_dup, ">= " + fmt_num(opts.discrete_duplicate_fraction) + ": a discrete set (info)"});
    f.evidence.push_back({split + " rows expected in train by chance (2 x that rate)", expected,
                          "mixed rows within 3 standard errors of it: info"});
  }
  f.cause = "the " + split +
            " split was not held out: it was drawn from data that includes the training rows "
            "(split after duplicating or augmenting, two random samples drawn with replacement, a test set "
            "built from the training file, or the source holds the same image twice). The model has seen those "
            "inputs with their labels, so its " +
            split +
            " score measures memory, not generalisation. For "
            "example: " +
            split + " row " + num(ex_val) + " is training row " + num(ex_train);
  f.fix = fires ? "split once into disjoint sets (nn::train_val_split, or the dataset's own train/test files) after "
                  "removing duplicate inputs (D12), and drop from " +
                      split + " every row whose input is in train"
                : "nothing to do at this rate (<= " + pct(opts.max_mix_fraction) + " of the " + split +
                      " rows); drop those rows from " + split + " for an exact held-out score";
  return {f};
}

// Column by column, for tabular inputs: the whitened columns' mean and variance differences as one
// chi-square, and the original columns' largest shift and variance ratio.
struct ColumnDrift {
  double chi = kNaN, z = kNaN;
  double repeats_a = 1.0, repeats_b = 1.0;  // each split's rows per distinct value (repetition_factor)
  int64_t dof = 0, columns = 0;
  int64_t shift_column = -1, ratio_column = -1;
  double shift = 0.0, ratio = 1.0;  // the largest |standardised mean shift| (signed), the most extreme ratio
};

namespace {
// Windows cut from one series at a stride of 1, each sharing all but one value with the next: the
// width of the window (its first `width` columns; up to 4 more columns may follow it, an hour's sine and
// cosine) whose values after the first begin another row's in half the rows or more; 0 when there is none.
int64_t sliding_window_width(const SplitSample& s) {
  const int64_t n = s.read(), F = s.features;
  if (!s.tabular || F < 3 || n < 2 || static_cast<int64_t>(s.columns.size()) != n * F) return 0;
  for (int64_t width = F; width >= std::max<int64_t>(3, F - 4); --width) {
    const auto hash = [&](int64_t r, int64_t from) {
      uint64_t h = 1469598103934665603ull;
      for (int64_t j = 0; j < width - 1; ++j) {
        uint32_t bits;
        std::memcpy(&bits, &s.columns[static_cast<size_t>(r * F + from + j)], sizeof bits);
        h = (h ^ bits) * 1099511628211ull;
      }
      return h;
    };
    std::unordered_map<uint64_t, int64_t> heads;
    for (int64_t r = 0; r < n; ++r) ++heads[hash(r, 0)];
    int64_t followed = 0;
    for (int64_t r = 0; r < n; ++r) followed += heads.count(hash(r, 1)) ? 1 : 0;
    if (2 * followed >= n) return width;
  }
  return 0;
}
}  // namespace

ColumnDrift column_drift(const SplitSample& a, const SplitSample& b) {
  ColumnDrift r;
  const int64_t d = a.features;
  if (!a.tabular || !b.tabular || d <= 0 || a.columns.empty() || b.columns.empty()) return r;
  const size_t D = static_cast<size_t>(d);
  const size_t na = a.columns.size() / D, nb = b.columns.size() / D;
  if (na < 2 || nb < 2) return r;
  auto finite = [](const std::vector<float>& c) {
    return std::all_of(c.begin(), c.end(), [](float v) { return std::isfinite(v); });
  };
  if (!finite(a.columns) || !finite(b.columns)) return r;  // D2 reports non-finite values
  const std::vector<double> ma = column_means(a.columns, na, D), mb = column_means(b.columns, nb, D);
  // The pooled within-split covariance.
  std::vector<double> C(D * D, 0.0);
  auto accumulate_cov = [&](const std::vector<float>& c, size_t n, const std::vector<double>& m) {
    std::vector<double> x(D);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < D; ++j) x[j] = c[i * D + j] - m[j];
      for (size_t j = 0; j < D; ++j)
        for (size_t k = 0; k <= j; ++k) C[j * D + k] += x[j] * x[k];
    }
  };
  accumulate_cov(a.columns, na, ma);
  accumulate_cov(b.columns, nb, mb);
  for (size_t j = 0; j < D; ++j)
    for (size_t k = 0; k <= j; ++k) C[k * D + j] = C[j * D + k] /= static_cast<double>(na + nb - 2);
  // The original columns' effects: each split's variance, the pooled standard deviation.
  const std::vector<double> va = column_variances(a.columns, na, D, ma), vb = column_variances(b.columns, nb, D, mb);
  for (size_t j = 0; j < D; ++j) {
    if (!(C[j * D + j] > 0) || !(va[j] > 0) || !(vb[j] > 0)) continue;  // a constant column
    const double shift = (ma[j] - mb[j]) / std::sqrt(C[j * D + j]);
    if (std::abs(shift) > std::abs(r.shift)) {
      r.shift = shift;
      r.shift_column = static_cast<int64_t>(j);
    }
    const double ratio = va[j] / vb[j];
    if (std::abs(std::log(ratio)) > std::abs(std::log(r.ratio))) {
      r.ratio = ratio;
      r.ratio_column = static_cast<int64_t>(j);
    }
  }
  // Cholesky of the pooled covariance, a direction that depends on the ones before it (a constant or
  // duplicated column) left out.
  std::vector<double> L(D * D, 0.0);
  std::vector<uint8_t> keep(D, 0);
  for (size_t j = 0; j < D; ++j) {
    double s = C[j * D + j];
    for (size_t k = 0; k < j; ++k) s -= L[j * D + k] * L[j * D + k];
    if (!(C[j * D + j] > 0) || !(s > 1e-9 * C[j * D + j])) continue;
    keep[j] = 1;
    L[j * D + j] = std::sqrt(s);
    for (size_t i = j + 1; i < D; ++i) {
      double t = C[i * D + j];
      for (size_t k = 0; k < j; ++k) t -= L[i * D + k] * L[j * D + k];
      L[i * D + j] = t / L[j * D + j];
    }
  }
  // Each split's whitened rows: the mean, variance and fourth central moment of each component.
  struct Moments {
    std::vector<double> mean, var, m4;
  };
  auto whitened_moments = [&](const std::vector<float>& c, size_t n) {
    std::vector<double> w(n * D, 0.0), x(D);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < D; ++j) x[j] = c[i * D + j] - ma[j];  // centred on one point for both splits
      for (size_t j = 0; j < D; ++j) {
        if (!keep[j]) continue;
        double t = x[j];
        for (size_t k = 0; k < j; ++k)
          if (keep[k]) t -= L[j * D + k] * w[i * D + k];
        w[i * D + j] = t / L[j * D + j];
      }
    }
    Moments mo{std::vector<double>(D, 0.0), std::vector<double>(D, 0.0), std::vector<double>(D, 0.0)};
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < D; ++j) mo.mean[j] += w[i * D + j];
    for (double& v : mo.mean) v /= static_cast<double>(n);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < D; ++j) {
        const double e = w[i * D + j] - mo.mean[j];
        mo.var[j] += e * e;
        mo.m4[j] += e * e * e * e;
      }
    for (size_t j = 0; j < D; ++j) {
      mo.var[j] /= static_cast<double>(n);
      mo.m4[j] /= static_cast<double>(n);
    }
    return mo;
  };
  const Moments wa = whitened_moments(a.columns, na), wb = whitened_moments(b.columns, nb);
  // Repeated rows carry the information of their distinct values only: the standard errors count those.
  r.repeats_a = a.repeats;
  r.repeats_b = b.repeats;
  // Sliding windows of one series: about rows / width independent draws in each split.
  if (const int64_t w = std::min(sliding_window_width(a), sliding_window_width(b)); w > 0) {
    r.repeats_a = std::max(r.repeats_a, static_cast<double>(w));
    r.repeats_b = std::max(r.repeats_b, static_cast<double>(w));
  }
  const double fa = static_cast<double>(na) / r.repeats_a, fb = static_cast<double>(nb) / r.repeats_b;
  double chi = 0.0;
  for (size_t j = 0; j < D; ++j) {
    if (!keep[j]) continue;
    const double se_mean = std::sqrt(wa.var[j] / fa + wb.var[j] / fb);
    const double se_var = std::sqrt(std::max(0.0, wa.m4[j] - wa.var[j] * wa.var[j]) / fa +
                                    std::max(0.0, wb.m4[j] - wb.var[j] * wb.var[j]) / fb);
    if (!(se_mean > 0) || !(se_var > 0)) continue;
    const double zm = (wa.mean[j] - wb.mean[j]) / se_mean, zv = (wa.var[j] - wb.var[j]) / se_var;
    chi += zm * zm + zv * zv;
    r.dof += 2;
    ++r.columns;
  }
  if (r.dof > 0) {
    r.chi = chi;
    r.z = chi_square_z(chi, static_cast<double>(r.dof));
  }
  return r;
}

std::vector<Finding> column_drift_finding(const SplitSample& train, const SplitSample& other, const std::string& split,
                                          const DataCheckOptions& opts) {
  const ColumnDrift c = column_drift(train, other);
  if (!std::isfinite(c.z)) return {};
  const double log_limit = std::log(opts.min_column_ratio);
  const bool shifted = std::abs(c.shift) >= opts.min_column_shift;
  const bool spread = std::abs(std::log(c.ratio)) >= log_limit;
  if (!(c.z >= opts.min_column_drift_z) || !(shifted || spread)) return {};
  // The title names the column that moved most, relative to its own limit.
  const bool by_ratio = spread && (!shifted || std::abs(std::log(c.ratio)) / log_limit >=
                                                    std::abs(c.shift) / opts.min_column_shift);
  Finding f = make(
      "D14", Severity::Warning,
      "the " + split + " inputs drifted from train, column by column: " +
          (by_ratio ? "column " + num(c.ratio_column) + "'s variance in train is " + fmt_num(c.ratio) + "x its " +
                          split + " variance"
                    : "column " + num(c.shift_column) + "'s mean in train is " + fmt_num(c.shift) +
                          " standard deviations from its " + split + " mean") +
          " (" + num(c.columns) + " whitened columns, chi-square z " + str_printf("%.1f", c.z) + ")");
  f.kind = Kind::ColumnDrift;
  f.shape = "x " + train.shape + " per example";
  const std::string ratio_rule =
      "outside [" + fmt_num(1.0 / opts.min_column_ratio) + ", " + fmt_num(opts.min_column_ratio) + "], or";
  f.evidence = {
      {"columns compared (whitened by the pooled covariance)", static_cast<double>(c.columns), ""},
      {"chi-square of their mean and variance differences", c.chi, ""},
      {"rows per distinct value in train (repeated items count once)", c.repeats_a, ""},
      {"rows per distinct value in " + split, c.repeats_b, ""},
      {"degrees of freedom", static_cast<double>(c.dof), ""},
      {"its z", c.z, ">= " + fmt_num(opts.min_column_drift_z) + " and"},
      {"largest variance ratio, train / " + split + " (column " + num(c.ratio_column) + ")", c.ratio, ratio_rule},
      {"largest mean shift in pooled standard deviations (column " + num(c.shift_column) + ")", c.shift,
       "|shift| >= " + fmt_num(opts.min_column_shift) + " warns"},
      {"training rows compared", static_cast<double>(train.read()), ""},
      {split + " rows compared", static_cast<double>(other.read()), ""}};
  f.cause = "the training inputs' columns follow another distribution than the " + split +
            " inputs': noise written into the stored rows of one split (every variance larger), a column "
            "scaled, shifted or filled differently in one split only, or a split made along a sorted order "
            "(by time, by source) instead of at random. The model is scored on inputs unlike those it trained on";
  f.fix = "build both splits with the same code and statistics (nn::train_val_split, one fitted normaliser); add "
          "noise as augmentation, drawn afresh per batch inside the training loop, never into the stored rows";
  // The 0/1 columns moved between columns, their shares kept: categories coded in another order.
  if (const BinaryShares b = binary_shares(train, other); b.columns >= 3 && b.moved >= 0.15 && b.sorted <= 0.05) {
    f.title +=
        ": its 0/1 columns hold the same shares as train's in another order (a category encoder fitted on "
        "each split apart?)";
    f.evidence.push_back({"0/1 columns in both splits", static_cast<double>(b.columns), ">= 3 and"});
    f.evidence.push_back({"their largest share difference, column by column", b.moved, ">= 0.15 and"});
    f.evidence.push_back({"the same after sorting each split's shares", b.sorted, "<= 0.05: coded in another order"});
    f.cause =
        "a category encoder (codes, one-hot columns) fitted on each split apart: it numbers the categories in "
        "the order it meets them, so the same category gets another column in each split";
    f.fix =
        "fit the encoder once, on the training split, and encode every split with it (unknown categories to "
        "one reserved code)";
  }
  // A drift the classes' shares explain (a balanced validation split beside a long-tailed training split):
  // with the training rows weighted to the split's class shares, no column moves past the limits, or past
  // 3 sampling errors of the weighted rows (few effective rows where a rare class weighs much) (info).
  const ReweightedDrift rw = class_reweighted_drift(train, other);
  const double nb = static_cast<double>(other.read()), ne = std::max(rw.effective_rows, 1.0);
  const double shift_tol = std::max(opts.min_column_shift, 3.0 * std::sqrt(1.0 / ne + 1.0 / nb));
  const double ratio_tol = std::max(log_limit, 3.0 * std::sqrt(2.0 / ne + 2.0 / nb));
  if (std::isfinite(rw.shift) && rw.moved >= 0.05 && std::abs(rw.shift) < shift_tol &&
      std::abs(std::log(rw.ratio)) < ratio_tol) {
    f.severity = Severity::Info;
    f.title += ": the classes' shares differ between the splits, and the training rows weighted to the " + split +
               " split's class shares match it (a prior shift, which D15 reports)";
    f.evidence.push_back({"classes' total-variation distance between the splits", rw.moved, ">= 0.05 and"});
    f.evidence.push_back({"effective training rows, weighted", rw.effective_rows, ""});
    f.evidence.push_back({"largest mean shift, training rows weighted to the " + split + " split's class shares",
                          rw.shift, "|shift| < " + fmt_num(shift_tol) + " and"});
    f.evidence.push_back({"variance ratio farthest from 1, weighted likewise", rw.ratio,
                          "within [" + fmt_num(std::exp(-ratio_tol)) + ", " + fmt_num(std::exp(ratio_tol)) +
                              "]: the class shares explain the drift (info)"});
  }
  return {f};
}

// D14's column drift again where the training rows are drawn afresh at each read (noise added in the
// dataset's get, as augmentation): the first kAugmentRows training rows read again differ, and half
// their mean squared difference per column is the variance the noise adds. Where every column's
// training variance less that noise is within min_column_ratio of the split's (or within 3 sampling
// errors of a variance ratio) and the means did not move, the drift is the augmentation's (info); where the noise
// reaches kSwampRatio x a column's own variance in the split, the augmentation swamps the column, and the title says
// so.
constexpr int64_t kAugmentRows = 2000;
constexpr double kSwampRatio = 1.0;

}  // namespace

void revise_column_drift_by_augmentation(std::vector<Finding>& found, const nn::Dataset& train_data,
                                         const SplitSample& train, const SplitSample& other, const std::string& split,
                                         const DataCheckOptions& opts) {
  auto it = std::find_if(found.begin(), found.end(),
                         [](const Finding& f) { return f.fires() && f.is("D14", Kind::ColumnDrift); });
  if (it == found.end() || !train.tabular || !other.tabular || train.features <= 0) return;
  const size_t D = static_cast<size_t>(train.features);
  const int64_t n = std::min<int64_t>(train.read(), kAugmentRows);
  if (n < 20 || other.read() < 20 || train.columns.size() < static_cast<size_t>(n) * D) return;
  NoGradGuard ng;
  const nn::Batch again = train_data.get_batch(rows(0, n));
  const std::vector<double> x2 = doubles(again.x.reshape({n, -1}));
  if (x2.size() != static_cast<size_t>(n) * D) return;
  std::vector<double> noise(D, 0.0);
  for (size_t i = 0; i < static_cast<size_t>(n); ++i)
    for (size_t j = 0; j < D; ++j) {
      const double d = static_cast<double>(train.columns[i * D + j]) - x2[i * D + j];
      if (std::isfinite(d)) noise[j] += d * d / (2.0 * static_cast<double>(n));
    }
  if (std::all_of(noise.begin(), noise.end(), [](double v) { return v == 0; })) return;  // the same rows again
  auto variances = [&](const SplitSample& s) {
    const size_t m = s.columns.size() / D;
    return column_variances(s.columns, m, D, column_means(s.columns, m, D));
  };
  const std::vector<double> vt = variances(train), vo = variances(other);
  double worst_ratio = 1.0, swamp = 0.0;
  size_t swamp_column = 0;
  for (size_t j = 0; j < D; ++j) {
    if (!(vo[j] > 0)) continue;
    const double r = std::max(vt[j] - noise[j], 1e-12) / vo[j];
    if (std::abs(std::log(r)) > std::abs(std::log(worst_ratio))) worst_ratio = r;
    if (noise[j] / vo[j] > swamp) swamp = noise[j] / vo[j], swamp_column = j;
  }
  Finding f = *it;
  f.evidence.push_back(
      {"training rows read again (a dataset that draws them afresh: augmentation)", static_cast<double>(n), ""});
  f.evidence.push_back({"largest noise variance of a read / the column's " + split + " variance (column " +
                            num(static_cast<int64_t>(swamp_column)) + ")",
                        swamp, ">= " + fmt_num(kSwampRatio) + ": the augmentation swamps the column"});
  f.evidence.push_back({"most extreme variance ratio, train less the noise / " + split, worst_ratio,
                        "within [" + fmt_num(1.0 / opts.min_column_ratio) + ", " + fmt_num(opts.min_column_ratio) +
                            "] or 3 sampling errors of 1, with no mean shift: the augmentation's drift (info)"});
  if (swamp >= kSwampRatio) {
    f.kind = Kind::AugmentationSwamps;
    f.title = "the training rows' augmentation adds noise with " + fmt_num(swamp) + "x column " +
              num(static_cast<int64_t>(swamp_column)) + "'s " + split + " variance: it swamps that column (the " +
              split + " inputs drifted from train, column by column)";
    f.cause =
        "the training dataset draws noise afresh at each read (an augmentation), on a scale far above some "
        "columns' own spread: noise meant for standardised columns added to raw ones (before the "
        "normaliser), or one noise level for columns of very different units. The model cannot read those "
        "columns in training, and meets them clean in " +
        split;
    f.fix =
        "add the noise after standardising (normalise first, then augment), or scale it per column by that "
        "column's standard deviation";
  } else {
    double shift = 0.0;
    for (const Evidence& e : f.evidence)
      if (e.name.rfind("largest mean shift", 0) == 0) shift = e.value;
    // A ratio of two sample variances moves by sqrt(2 / n_train + 2 / n_split) in log units by chance:
    // the corrected ratio must pass both min_column_ratio and 3 of those to keep the warning.
    const double se = std::sqrt(2.0 / static_cast<double>(train.read()) + 2.0 / static_cast<double>(other.read()));
    const double off = std::abs(std::log(worst_ratio));
    if ((off >= std::log(opts.min_column_ratio) && off >= 3 * se) || std::abs(shift) >= opts.min_column_shift) return;
    f.severity = Severity::Info;
    f.title +=
        " (the training rows draw noise afresh at each read, an augmentation: less its variance, every "
        "column matches)";
    f.fix = "none needed: noise drawn per read is augmentation, which the " + split + " split rightly leaves out";
  }
  *it = std::move(f);
}

void revise_example_drift_by_augmentation(std::vector<Finding>& found, const nn::Dataset& train_data,
                                          const SplitSample& train, const std::string& split) {
  auto it = std::find_if(found.begin(), found.end(), [](const Finding& f) {
    return f.fires() && f.is("D14", Kind::None) && !std::isnan(f.value_of("KS statistic, per-example mean"));
  });
  const int64_t n = std::min<int64_t>(train.read(), kAugmentRows);
  if (it == found.end() || n < 20 || train.means.size() < static_cast<size_t>(n)) return;
  NoGradGuard ng;
  const nn::Batch again = train_data.get_batch(rows(0, n));
  const std::vector<double> m2 = doubles(mean(again.x.to(kFloat64).reshape({n, -1}), {1}));
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i)
    differ += std::fabs(m2[static_cast<size_t>(i)] - train.means[static_cast<size_t>(i)]) >
                      1e-6 * (1.0 + std::fabs(train.means[static_cast<size_t>(i)]))
                  ? 1
                  : 0;
  if (differ < n / 10) return;  // the same rows again: no augmentation to blame
  Finding f = *it;
  f.kind = Kind::AugmentationSwamps;
  f.title += ": the training rows change at each read (" + num(differ) + " of " + num(n) +
             " per-example means differ between two reads), so an augmentation makes the training inputs unlike "
             "the " +
             split + " inputs";
  f.evidence.push_back({"training rows whose per-example mean differs between two reads", static_cast<double>(differ),
                        ">= a tenth of " + num(n) + ": a random transform in the training dataset"});
  f.cause =
      "a training-only transform (augmentation) that changes the inputs far more than meant: values in another "
      "unit than the inputs (a brightness jitter in 0-255 on inputs in [0, 1]), a mask that keeps the patch it "
      "should erase (Cutout inverted), noise added before the normaliser; the model trains on inputs unlike "
      "those it is scored on";
  f.fix = "look at a few training inputs as the loader yields them beside " + split +
          " inputs; match the augmentation's scale to the inputs' (and its mask or probability to what was meant)";
  *it = std::move(f);
}

namespace {

std::vector<Finding> feature_drift(const SplitSample& train, const SplitSample& other, const std::string& split,
                                   const DataCheckOptions& opts) {
  require_comparable(train, other, "check_feature_drift", split);
  if (train.read() < opts.min_drift_examples || other.read() < opts.min_drift_examples) return {};
  // Token ids or category codes (int64): their means and spreads measure nothing (padding, a vocabulary's order).
  if (train.index_inputs && other.index_inputs) return {};
  {
    std::vector<Finding> by_column = column_drift_finding(train, other, split, opts);
    if (!by_column.empty()) return by_column;
  }
  const double ks_mean = ks_statistic(train.means, other.means), ks_std = ks_statistic(train.stds, other.stds);
  // Sliding windows of one series (both splits, most rows followed by their one-step shift) are far
  // fewer independent draws than rows: about rows / width each. The KS bar is then also the 0.1%
  // critical value for those sizes, 1.95 sqrt((a + b) / ab).
  double bar = opts.max_drift_ks;
  const int64_t width = std::min(sliding_window_width(train), sliding_window_width(other));
  const bool windows = width > 0;
  if (windows) {
    const double a = std::max(1.0, static_cast<double>(train.read()) / static_cast<double>(width));
    const double b = std::max(1.0, static_cast<double>(other.read()) / static_cast<double>(width));
    bar = std::max(bar, 1.95 * std::sqrt((a + b) / (a * b)));
  }
  const bool mean_off = ks_mean > bar, std_off = ks_std > bar;
  if (!mean_off && !std_off) return {};
  const double mt = median(train.means), mo = median(other.means), st = median(train.stds), so = median(other.stds);
  Finding f =
      make("D14", Severity::Warning,
           "the " + split + " inputs drifted from train: per-example " +
               (mean_off ? "mean (brightness) median " + fmt_num(mo) + " vs " + fmt_num(mt) + ", KS " + fmt_num(ks_mean)
                         : "std (contrast) median " + fmt_num(so) + " vs " + fmt_num(st) + ", KS " + fmt_num(ks_std)));
  f.shape = "x " + train.shape + " per example";
  const std::string rule =
      "> " + fmt_num(bar) + " warns" + (windows ? " (sliding windows: rows / width independent draws per split)" : "");
  f.evidence = {{"KS statistic, per-example mean", ks_mean, rule},
                {"KS statistic, per-example std", ks_std, rule},
                {"train median of the per-example mean", mt, ""},
                {split + " median of the per-example mean", mo, ""},
                {"train median of the per-example std", st, ""},
                {split + " median of the per-example std", so, ""},
                {"training rows compared", static_cast<double>(train.read()), ""},
                {split + " rows compared", static_cast<double>(other.read()), ""}};
  f.cause = "the " + split +
            " images come from a different distribution than the training images: another "
            "source or camera, a brightness or contrast change, an augmentation applied to one split only, or "
            "a split made along a sorted order (by time, by source) instead of at random. The model is scored "
            "on inputs unlike those it trained on. When D10 fires too, the splits went through different "
            "preprocessing: fix that first";
  f.fix = "split the data at random (nn::train_val_split) and apply the same transforms to every split; if the " +
          split +
          " data is meant to differ (the deployment domain), expect the score to drop and add such "
          "images to training (or augment brightness and contrast)";
  return {f};
}

std::vector<Finding> split_sizes(int64_t train_rows, int64_t other_rows, const std::string& split,
                                 const DataCheckOptions& opts) {
  const double ratio = train_rows > 0 ? static_cast<double>(other_rows) / static_cast<double>(train_rows) : kNaN;
  const bool tiny = other_rows < opts.min_val_examples;
  const bool small = train_rows > 0 && ratio < opts.min_val_ratio;
  if (!tiny && !small) return {};
  // The standard error of an accuracy near 0.9 on this many examples: how much the score moves by chance.
  const double se = other_rows > 0 ? std::sqrt(0.9 * 0.1 / static_cast<double>(other_rows)) : kNaN;
  const double share =
      static_cast<double>(other_rows) / static_cast<double>(std::max<int64_t>(1, train_rows + other_rows));
  // Only small because the whole dataset is: nothing more could be held out.
  const bool small_dataset = !small && other_rows > 0 && share >= opts.small_dataset_val_share;
  Finding f = make("D16", small_dataset ? Severity::Info : Severity::Warning,
                   other_rows == 0 ? "the " + split + " split is empty"
                                   : "the " + split + " split has only " + num(other_rows) + " examples against " +
                                         num(train_rows) + " in train (ratio " + fmt_num(ratio) + ")");
  f.evidence = {{"training rows", static_cast<double>(train_rows), ""},
                {split + " rows", static_cast<double>(other_rows), "< " + num(opts.min_val_examples) + " warns"},
                {split + " / train ratio", ratio, "< " + fmt_num(opts.min_val_ratio) + " warns"},
                {"std error of an accuracy of 0.9 on it", se, ""},
                {split + " share of all rows", share,
                 ">= " + fmt_num(opts.small_dataset_val_share) + " with fewer than " + num(opts.min_val_examples) +
                     " rows: info (a small dataset)"}};
  if (small_dataset) {
    f.cause = "the dataset is small: " + pct(share) + " of its rows were held out, a usual share, and still the " +
              split + " score moves by about " + fmt_num(100.0 * se) +
              " points from chance alone, so differences between epochs or runs smaller than that mean nothing";
    f.fix =
        "judge changes by more than the score's noise, average over several seeds, or use k-fold "
        "cross-validation (each example held out once)";
    return {f};
  }
  f.cause =
      "too few examples were held out (a val_fraction meant as a percentage, take(n) on the wrong split, "
      "a filter that removed most of it): the " +
      split +
      " score moves by several points from one "
      "example to the next, so it cannot rank epochs, learning rates or models, and early stopping on it "
      "stops at random";
  f.fix = "hold out at least " + num(opts.min_val_examples) + " examples and " + pct(opts.min_val_ratio) +
          " of the training size (10-20% is common: nn::train_val_split(data, 0.1)), or evaluate on the dataset's "
          "own test split";
  return {f};
}

}  // namespace

std::shared_ptr<const SplitSample> read_split_sample(const nn::Dataset& data, const DataCheckOptions& opts) {
  return std::make_shared<const SplitSample>(read_split(data, opts));
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
  std::vector<Finding> out = split_sizes(train.size(), other.size(), split, opts);
  std::vector<Finding> shares = check_split_shares(train, other, split, opts);
  out.insert(out.end(), shares.begin(), shares.end());
  return out;
}

// Two subsets of one dataset (nn::train_val_split's halves) where the held-out one is the larger by far:
// the split's fraction was given for the other side (train_val_split(d, 0.9) for 90% training). Such a
// split covers its base; two subsets covering under kSwappedCoverage of it are two draws from it.
constexpr double kSwappedCoverage = 0.9;
std::vector<Finding> check_split_shares(const nn::Dataset& train, const nn::Dataset& other, const std::string& split,
                                        const DataCheckOptions& opts) {
  const auto* a = dynamic_cast<const nn::Subset*>(&train);
  const auto* b = dynamic_cast<const nn::Subset*>(&other);
  if (!a || !b || !a->base() || a->base() != b->base() || a->size() == 0) return {};
  const double ratio = static_cast<double>(b->size()) / static_cast<double>(a->size());
  if (!(ratio >= opts.max_val_ratio)) return {};
  const double share = static_cast<double>(b->size()) / static_cast<double>(a->size() + b->size());
  // Two small draws from a large base (a few labelled rows of a semi-supervised run, the rest left
  // unlabelled) are no two-way split whose fraction was swapped: that one covers its base.
  const double covered =
      static_cast<double>(a->size() + b->size()) / static_cast<double>(std::max<int64_t>(a->base()->size(), 1));
  Finding f =
      make("D16", covered >= kSwappedCoverage ? Severity::Warning : Severity::Info,
           "the " + split + " split holds " + pct(share) + " of the rows split from " + a->base()->name() + " (" +
               num(b->size()) + " against " + num(a->size()) + " for training): the shares look swapped");
  f.evidence = {
      {"training rows", static_cast<double>(a->size()), ""},
      {split + " rows", static_cast<double>(b->size()), ""},
      {split + " / train ratio", ratio, ">= " + fmt_num(opts.max_val_ratio) + " warns (one dataset split in two)"},
      {"share of the base dataset the two cover", covered,
       ">= " + fmt_num(kSwappedCoverage) + " (a split of all of it) warns; less: two draws from it (info)"}};
  if (covered < kSwappedCoverage) {
    f.title += ", but the two hold only " + pct(covered) + " of " + a->base()->name() +
               ": two draws from a larger set (the rest unlabelled, or held back), not a swapped split";
    f.fix = "none needed, if the small training split is meant (a semi-supervised run)";
    return {f};
  }
  f.cause =
      "the split's fraction was given for the other side (nn::train_val_split(data, 0.9) where 90% was meant for "
      "training), or the two halves were swapped when the loaders were built: the model trains on " +
      pct(1 - share) + " of the labelled rows";
  f.fix =
      "pass the held-out share to nn::train_val_split (0.1 to 0.2 is common) and build the training loader from "
      "its first half";
  return {f};
}

std::vector<Finding> check_splits(const nn::Dataset& train, const nn::Dataset& other, const std::string& split,
                                  const DataCheckOptions& opts) {
  return check_splits(read_split(train, opts), read_split(other, opts), split, opts);
}

std::vector<Finding> check_splits(const SplitSample& a, const SplitSample& b, const std::string& split,
                                  const DataCheckOptions& opts) {
  std::vector<Finding> out = split_sizes(a.size, b.size, split, opts);
  auto add = [&](std::vector<Finding> fs) { out.insert(out.end(), fs.begin(), fs.end()); };
  add(samples_mix(a, b, split, opts));
  add(feature_drift(a, b, split, opts));
  add(label_drift(a, b, split, opts));
  return out;
}

std::vector<Finding> check_training_rows_changed(const nn::Dataset& train, const SplitSample& before,
                                                 const DataCheckOptions& opts) {
  const std::shared_ptr<const SplitSample> read = read_split_sample(train, opts);
  const SplitSample& after = *read;
  if (after.x == before.x || read_split_sample(train, opts)->x != after.x) return {};
  const size_t n = std::min(before.x.size(), after.x.size());
  if (n == 0) return {};
  int64_t changed = 0;
  for (size_t i = 0; i < n; ++i) changed += before.x[i] != after.x[i] ? 1 : 0;
  const double share = static_cast<double>(changed) / static_cast<double>(n);
  if (changed == 0 || share < opts.max_changed_rows) return {};
  auto mean_of = [n](const std::vector<double>& v) {
    double s = 0.0;
    for (size_t i = 0; i < n && i < v.size(); ++i) s += v[i];
    return s / static_cast<double>(std::max<size_t>(1, std::min(n, v.size())));
  };
  Finding f = make("D14", Severity::Warning,
                   "the training inputs changed during training: " + num(changed) + " of " +
                       num(static_cast<int64_t>(n)) + " training rows hold other values after it than before it");
  f.end_of_run = true;
  f.evidence = {{"training rows compared (the same rows, read before and after training)", static_cast<double>(n), ""},
                {"rows whose input changed", static_cast<double>(changed), ""},
                {"share changed", share, ">= " + fmt_num(opts.max_changed_rows) + " warns"},
                {"mean of the inputs before training", mean_of(before.means), ""},
                {"mean of the inputs after training", mean_of(after.means), ""},
                {"mean per-example std before training", mean_of(before.stds), ""},
                {"mean per-example std after training", mean_of(after.stds), ""}};
  f.cause =
      "the loop writes into the stored training data: a normalisation applied again at each epoch (x -= mean; "
      "x /= std on the dataset's own tensor), or a transform written back. Each epoch then trains on other "
      "inputs than the last, and than the validation split holds";
  f.fix =
      "transform the data once before training, or transform each batch into a new tensor (x = (b.x - mean) / "
      "std) instead of the dataset's storage in place";
  return {f};
}

// ---- D13 over the run: the rows the loop trains on ---------------------------------------------
namespace {
// On the sampled steps, each row of the model's training input is hashed (row_hashes_x, as D13 hashes
// the splits). At the end, when most of them are rows of the validation split and fewer are rows of
// the training split, the loop trains on the validation data: a loop over the wrong loader. A final
// fit on train + validation has most of its rows from the training split, and is not judged.
class HeldOutRunCheck final : public RunCheck {
 public:
  explicit HeldOutRunCheck(const MonitorOptions& o) : train_(o.train_dataset), val_(o.val_dataset), opts_(o.data) {}
  std::string ids() const override { return "D13"; }
  uint32_t events() const override { return train_ && val_ ? RunEvent::BeforeStep | RunEvent::Finish : 0u; }
  void before_step(RunContext& c, bool sampled) override {
    if (!sampled || !c.x.defined() || c.x.dim() < 1 || !c.x.is_floating_point()) return;
    if (static_cast<int64_t>(rows_.size()) >= opts_.loop_alignment_max_rows) return;  // enough to judge
    NoGradGuard ng;
    const std::vector<uint64_t> h = row_hashes_x(c.x.detach().cpu());
    rows_.insert(rows_.end(), h.begin(), h.end());
  }
  void finish(RunContext& c) override {
    if (static_cast<int64_t>(rows_.size()) < opts_.loop_alignment_min_rows) return;
    c.note_ran("D13");
    const int64_t in_val = count_in(*val_);
    if (2 * in_val < static_cast<int64_t>(rows_.size())) return;
    const int64_t in_train = count_in(*train_);
    if (in_train >= in_val) return;
    Finding f =
        make("D13", Severity::Warning,
             "the training loop trains on the validation split: " + num(in_val) + " of " +
                 num(static_cast<int64_t>(rows_.size())) + " rows of the sampled steps' batches are validation rows, " +
                 num(in_train) + " training rows");
    f.step = c.steps;
    f.evidence = {{"rows of the sampled steps' input batches", static_cast<double>(rows_.size()), ""},
                  {"of them validation rows", static_cast<double>(in_val), ">= half, and"},
                  {"of them training rows", static_cast<double>(in_train), "fewer warns"}};
    f.cause =
        "the loop iterates the validation loader (or a dataset built from it) where the training loader was "
        "meant: the model learns the validation rows, and every validation metric measures the data it "
        "trained on";
    f.fix =
        "train on the training loader (for (const nn::Batch& b : train_loader)); keep the validation loader "
        "for evaluation under NoGradGuard";
    c.add(f);
  }

 private:
  int64_t count_in(const nn::Dataset& d) const {
    const std::shared_ptr<const SplitSample> s = read_split_sample(d, opts_);
    const std::set<uint64_t> have(s->x.begin(), s->x.end());
    int64_t n = 0;
    for (uint64_t h : rows_) n += have.count(h) ? 1 : 0;
    return n;
  }
  const nn::Dataset* train_;
  const nn::Dataset* val_;
  DataCheckOptions opts_;
  std::vector<uint64_t> rows_;
};
}  // namespace

std::unique_ptr<RunCheck> make_held_out_run_check(const MonitorOptions& o) {
  return std::make_unique<HeldOutRunCheck>(o);
}

}  // namespace gradsleuth::debug
