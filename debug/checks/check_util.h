// Small helpers shared by the checks' implementations (internal to debug/):
// starting a finding, integers in titles, medians, quantiles, means and variances of samples.
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

// The median of v (the mean of the two middle values for an even count); NaN when empty.
// The finite values of v, in order (a history's epochs without a NaN).
inline std::vector<double> finite_only(const std::vector<double>& v) {
  std::vector<double> out;
  for (double x : v)
    if (std::isfinite(x)) out.push_back(x);
  return out;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  const size_t k = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  if (v.size() % 2 == 1) return v[k];
  const double hi = v[k];
  return 0.5 * (hi + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k)));
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
