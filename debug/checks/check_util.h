// Small helpers shared by the checks' implementations (internal to debug/):
// starting a finding, integers in titles, medians, quantiles, ranks, correlations, means and variances of
// samples.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/format.h"
#include "debug/evidence/finding.h"
#include "nn/module.h"

namespace gradsleuth::debug::detail {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Next-step prediction, for M6 across time and D3/D9's start tokens: the share of (B, T) targets y that copy
// the next input, y[:, t] == x[:, t + 1], over the positions t < T - 1 whose target is a value or a class
// (finite, and >= 0 for class indices: ignore_index and padding left out). `judged` gets their count and
// `per_row`, when given, each row's. A batch at kNextStepShare or above is next-step prediction.
inline constexpr double kNextStepShare = 0.9;
inline double next_step_share(const Tensor& x, const Tensor& y, int64_t& judged,
                              std::vector<int64_t>* per_row = nullptr) {
  const std::vector<double> xv = x.detach().to(kCPU).to(kFloat64).contiguous().to_vector<double>(),
                            yv = y.detach().to(kCPU).to(kFloat64).contiguous().to_vector<double>();
  const int64_t B = x.size(0), T = x.size(1);
  const bool classes = !y.is_floating_point();
  int64_t same = 0;
  judged = 0;
  if (per_row) per_row->assign(static_cast<size_t>(B), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t + 1 < T; ++t) {
      const double target = yv[static_cast<size_t>(b * T + t)];
      if (!std::isfinite(target) || (classes && target < 0)) continue;
      ++judged;
      if (per_row) ++(*per_row)[static_cast<size_t>(b)];
      same += target == xv[static_cast<size_t>(b * T + t + 1)] ? 1 : 0;
    }
  return judged > 0 ? static_cast<double>(same) / static_cast<double>(judged) : 0.0;
}

// A finding with its id, severity and title; the caller fills in the rest.
inline Finding make(const char* check, Severity s, std::string title) {
  Finding f;
  f.check = check;
  f.severity = s;
  f.title = std::move(title);
  return f;
}

inline std::string num(int64_t v) { return std::to_string(v); }

// A rise judged under a loss function that changed during the run (L1, O6, W3): the finding becomes
// info, with the loss's value on one fixed output and target before the run and at its end.
inline Finding as_objective_change(Finding f, double before, double after) {
  f.severity = Severity::Info;
  f.evidence.push_back({"loss of one fixed output and target before the run", before, ""});
  f.evidence.push_back({"the same output and target at the end", after, "another value: the objective changed"});
  f.cause =
      "the loop changes what its loss computes (a consistency or KL weight ramped up, targets the loop "
      "updates): the loss rises with the objective, which a lower learning rate would not stop";
  f.fix = "none needed; to watch the optimisation, log the loss at a fixed weight beside it";
  return f;
}

// A rise or gap of the epochs after the best (W3, L1, L7) where the loop loaded the best epoch's weights
// after training (`best_epoch` counted from 0; the final model scores its validation loss): info, as
// `what` says of the final model.
inline Finding as_best_epoch_restored(Finding f, size_t best_epoch, double final_val_loss, const std::string& what) {
  f.severity = Severity::Info;
  f.title += "; the loop loaded epoch " + std::to_string(best_epoch + 1) +
             "'s weights after training (validation loss " + fmt_num(final_val_loss) + "): " + what;
  f.evidence.push_back({"final model's validation loss (weights loaded after the last step)", final_val_loss,
                        "within 5% of the best epoch's: the best epoch kept, info"});
  f.fix = "none needed; the loop keeps its best epoch (stopping earlier saves the epochs after it)";
  return f;
}

// The median of v (the mean of the two middle values for an even count); NaN when empty.
// The finite values of v, in order (a history's epochs without a NaN).
inline std::vector<double> finite_only(const std::vector<double>& v) {
  std::vector<double> out;
  for (double x : v)
    if (std::isfinite(x)) out.push_back(x);
  return out;
}

// Whether a validation loss history of 5 epochs or more ends at its best: its last epoch within 1% of its
// lowest (or within `slack` of it: what the validation split can resolve), and the mean of its last `window`
// epochs within 2% (or `slack`). A memorised training split whose validation still ends there has cost
// validation nothing yet (L7's overfitting, L9's loss gap).
inline bool ends_at_best(const std::vector<double>& val_loss, size_t window = 1, double slack = 0.0) {
  const std::vector<double> v = finite_only(val_loss);
  if (v.size() < 5 || window < 1 || window > v.size()) return false;
  const double low = *std::min_element(v.begin(), v.end());
  double last = 0.0;
  for (size_t i = v.size() - window; i < v.size(); ++i) last += v[i] / static_cast<double>(window);
  return v.back() <= std::max(1.01 * low, low + slack) && last <= std::max(1.02 * low, low + slack);
}

// How far a loss history fell from its first value to its best, relative to the first (NaN: fewer than 2).
inline double relative_fall(const std::vector<double>& ls) {
  if (ls.size() < 2 || !std::isfinite(ls.front())) return std::numeric_limits<double>::quiet_NaN();
  double best = ls.front();
  for (double v : ls)
    if (std::isfinite(v)) best = std::min(best, v);
  return (ls.front() - best) / std::fabs(ls.front());
}

inline double median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  const size_t k = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  if (v.size() % 2 == 1) return v[k];
  const double hi = v[k];
  return 0.5 * (hi + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k)));
}

// Ranks of v from 0, ties given their mean rank.
inline std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  for (size_t i = 0; i < v.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t e = i + 1;
    while (e < order.size() && v[order[e]] == v[order[i]]) ++e;
    for (size_t t = i; t < e; ++t) r[order[t]] = 0.5 * static_cast<double>(i + e - 1);
    i = e;
  }
  return r;
}

// The Pearson correlation of two samples of equal length; NaN where either is constant.
inline double pearson(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n = std::min(a.size(), b.size());
  if (n < 2) return kNaN;
  double ma = 0, mb = 0;
  for (size_t i = 0; i < n; ++i) ma += a[i], mb += b[i];
  ma /= static_cast<double>(n), mb /= static_cast<double>(n);
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < n; ++i) {
    ab += (a[i] - ma) * (b[i] - mb);
    aa += (a[i] - ma) * (a[i] - ma);
    bb += (b[i] - mb) * (b[i] - mb);
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : kNaN;
}

// Spearman's rank correlation (the Pearson correlation of the ranks); NaN where either is constant.
inline double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  return pearson(ranks(a), ranks(b));
}

// The value at quantile q of v (nearest rank, lower side): v[floor(q (n-1))] after sorting; NaN when empty.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return kNaN;
  q = std::clamp(q, 0.0, 1.0);
  const size_t k = static_cast<size_t>(std::floor(q * static_cast<double>(v.size() - 1)));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

// The mean and the sample variance (divided by n - 1) of v; NaN for both under two values.
inline std::pair<double, double> mean_and_variance(const std::vector<double>& v) {
  if (v.size() < 2) return {kNaN, kNaN};
  const double n = static_cast<double>(v.size());
  double mean = 0;
  for (double x : v) mean += x;
  mean /= n;
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return {mean, ss / (n - 1)};
}

// McNemar's z of two models on the same examples: (fixed - broken) / sqrt(fixed + broken), where `fixed`
// examples only the second gets right and `broken` only the first; 0 when no example changed.
inline double mcnemar_z(int64_t fixed, int64_t broken) {
  const double n = static_cast<double>(fixed + broken);
  return n > 0 ? static_cast<double>(fixed - broken) / std::sqrt(n) : 0.0;
}

// The paired z of a[i] - b[i] (its mean over its standard error); NaN where the series differ in length,
// hold under two values, or do not vary.
inline double paired_z(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() < 2 || a.size() != b.size()) return kNaN;
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  const auto [mean, var] = mean_and_variance(d);
  const double se = std::sqrt(var / static_cast<double>(d.size()));
  return se > 0 ? mean / se : kNaN;
}

// How closely series `a` follows `b` x scale, element i against element i, over the pairs where
// both are finite: their count, the mean absolute gap, the Pearson correlation, and whether every
// gap is within 1e-6 of the larger magnitude (at least 1).
struct SeriesFollow {
  int64_t n = 0;
  double gap = kNaN, r = kNaN;
  bool exact = false;
};
inline SeriesFollow follow_series(const std::vector<double>& a, const std::vector<double>& b, double scale = 1.0) {
  std::vector<double> x, y;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (std::isfinite(a[i]) && std::isfinite(b[i])) {
      x.push_back(a[i]);
      y.push_back(scale * b[i]);
    }
  SeriesFollow f;
  f.n = static_cast<int64_t>(x.size());
  if (f.n == 0) return f;
  double gap = 0.0, worst = 0.0, size = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    gap += std::abs(x[i] - y[i]);
    worst = std::max(worst, std::abs(x[i] - y[i]));
    size = std::max(size, std::abs(y[i]));
  }
  f.gap = gap / static_cast<double>(f.n);
  f.exact = worst <= 1e-6 * std::max(1.0, size);
  f.r = pearson(x, y);
  return f;
}

// The zoos' tables and JSON (debug/zoo/zoo.cpp, debug/zoo/dist_zoo.cpp):
// a fraction as "83.2%" ("-" when not finite),
inline std::string pct(double v) { return std::isfinite(v) ? str_printf("%.1f%%", 100.0 * v) : "-"; }
// a number with three decimals ("-" for NaN, "inf" / "-inf"),
inline std::string decimals3(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "-" : (v > 0 ? "inf" : "-inf");
  return str_printf("%.3f", v);
}
// a column padded to `w` characters (and at least one space after it),
inline std::string pad(const std::string& s, size_t w) {
  return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' ');
}
// ["a","b"] as JSON,
inline std::string str_list(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + json_str(v[i]);
  return s + "]";
}
// "a, b" (the items joined by `sep`),
inline std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}
// and the seconds since t0 on the steady clock.
using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The .grad of every parameter, to put back after a probe.
class GradSnapshot {
 public:
  explicit GradSnapshot(nn::Module& model) {
    for (Tensor& p : model.parameters()) saved_.emplace_back(p, p.grad());
  }
  ~GradSnapshot() {
    for (auto& [p, g] : saved_) p.set_grad(g);
  }
  GradSnapshot(const GradSnapshot&) = delete;
  GradSnapshot& operator=(const GradSnapshot&) = delete;

 private:
  std::vector<std::pair<Tensor, Tensor>> saved_;
};

}  // namespace gradsleuth::debug::detail
