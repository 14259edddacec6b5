// Helpers shared by diagnose()'s files (internal to run/): whether the run learned too slowly, the first
// rows of a dataset, a model's device, the mean of a window of a loss history, a report's finding counts.
#pragma once
#include "debug/run/diagnose.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "core/autograd.h"
#include "debug/checks/check_util.h"
#include "debug/diagnosis/diagnosis.h"
#include "debug/evidence/catalogue.h"
#include "debug/report/html_report.h"

namespace gradsleuth::debug::run_detail {

// The checks' NaN (checks/check_util.h): one entity, so that a unity batch that also sees
// detail::kNaN through another file's using-declaration finds no ambiguity.
using detail::kNaN;

// Whether a finding of the run says it learned too slowly (the diagnosis's reports_slow_learning).
inline bool learned_slowly(const Report& r) {
  return std::any_of(r.findings().begin(), r.findings().end(),
                     [](const Finding& f) { return f.fires() && reports_slow_learning(f); });
}

// The first n rows of a dataset (n <= 0 or beyond its size: all of them).
inline nn::Batch first_rows(const nn::Dataset& d, int64_t n) {
  const int64_t k = n <= 0 ? d.size() : std::min(n, d.size());
  std::vector<int64_t> idx(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) idx[static_cast<size_t>(i)] = i;
  return d.get_batch(idx);
}

// n rows spread evenly over the dataset (all of them when it has n or fewer): a split stored in an order
// (pixels in raster order, rows sorted by time or class) is sampled whole, not by its first part.
// `first` (when >= 0) keeps the first `first` of those rows: the same rows read again.
inline nn::Batch spread_rows(const nn::Dataset& d, int64_t n, int64_t first = -1) {
  const int64_t size = d.size(), k = n <= 0 ? size : std::min(n, size);
  std::vector<int64_t> idx(static_cast<size_t>(first >= 0 ? std::min(first, k) : k));
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i) * size / k;
  return d.get_batch(idx);
}

// Where the model lives: its first parameter's device (the host for a parameter-free model).
inline Device model_device(nn::Module& model) {
  for (const Tensor& p : model.parameters()) return p.device();
  return kCPU;
}

// The mean of x[lo, hi) (NaN when the window is empty).
inline double window_mean(const std::vector<double>& x, size_t lo, size_t hi) {
  if (hi <= lo || hi > x.size()) return kNaN;
  double sum = 0.0;
  for (size_t i = lo; i < hi; ++i) sum += x[i];
  return sum / static_cast<double>(hi - lo);
}

// The length of a run's tenth: its first or last tenth of steps, at least one.
inline size_t tenth_of(size_t n) { return std::max<size_t>(1, n / 10); }

// The mean of x's last tenth: a run's (or a probe's) loss at its end (NaN when empty).
inline double tail_mean(const std::vector<double>& x) { return window_mean(x, x.size() - tenth_of(x.size()), x.size()); }

// The whole report and each phase's: a revision applies to both.
inline std::vector<Report*> phase_reports(RunReport& r) {
  std::vector<Report*> out{&r.findings};
  for (PhaseReport& p : r.phases) out.push_back(&p.findings);
  return out;
}

// Runs one check of a phase; an exception becomes a finding (phase_failure) in `r`.
inline void guarded(Report& r, const std::string& who, const std::string& phase, const std::string& lost,
                    const std::function<void()>& run) {
  try {
    run();
  } catch (const std::exception& e) {
    r.add(phase_failure(e, who, phase, lost));
  }
}

inline std::string findings_count(const Report& r) {
  int64_t errors = 0, warnings = 0, info = 0;
  for (const Finding& f : r.findings())
    (f.severity == Severity::Error ? errors : f.severity == Severity::Warning ? warnings : info) += 1;
  std::ostringstream os;
  os << errors << " error" << (errors == 1 ? "" : "s") << ", " << warnings << " warning" << (warnings == 1 ? "" : "s")
     << ", " << info << " info";
  return os.str();
}

}  // namespace gradsleuth::debug::run_detail
