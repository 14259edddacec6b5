// What D7 (target leakage) and D12-D16 read of a split (SplitSample): its first rows, chunk by chunk,
// as a hash per input, the label, the input's mean and std per example, and tabular rows' values (see
// data_util.h). The checks that judge these live in splits.cpp, conflicts.cpp and label_drift.cpp.
#include <algorithm>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/data/data_checks.h"
#include "debug/checks/data/data_util.h"

namespace gradsleuth::debug {

using namespace data_detail;

namespace {

// How many rows share each value of a split's continuous columns, as the median over adjacent
// pairs of columns that hold a fractional value of rows per distinct pair of values (1 below 1.5).
// Rows built from a smaller set of items repeat them: a pairs dataset (a siamese or ranking task,
// each row two items' features) puts each item in several rows, and those rows are no independent
// draws. A pair of columns, not one, so that features rounded to a few levels do not count as
// repeats.
double repetition_factor(const std::vector<float>& c, size_t n, size_t D) {
  std::vector<double> per_pair;
  for (size_t j = 0; j + 1 < D; ++j) {
    bool fractional = false;
    for (size_t i = 0; i < n && !fractional; ++i)
      fractional = c[i * D + j] != std::floor(c[i * D + j]) && c[i * D + j + 1] != std::floor(c[i * D + j + 1]);
    if (!fractional) continue;
    std::set<std::pair<float, float>> distinct;
    for (size_t i = 0; i < n; ++i) distinct.emplace(c[i * D + j], c[i * D + j + 1]);
    per_pair.push_back(static_cast<double>(n) / static_cast<double>(distinct.size()));
  }
  if (per_pair.empty()) return 1.0;
  std::nth_element(per_pair.begin(), per_pair.begin() + static_cast<std::ptrdiff_t>(per_pair.size() / 2),
                   per_pair.end());
  const double r = per_pair[per_pair.size() / 2];
  return r >= 1.5 ? r : 1.0;
}

}  // namespace

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
    // Class indices (N), or a binary task's float targets (N, 1) of 0 and 1.
    s.classes =
        s.classes &&
        ((b.y.dim() == 1 && std::all_of(yl.begin(), yl.end(), [](const Label& l) { return is_whole(l.value); })) ||
         (b.y.dim() == 2 && b.y.size(1) == 1 &&
          std::all_of(yl.begin(), yl.end(), [](const Label& l) { return l.value == 0.0 || l.value == 1.0; })));
    s.float_inputs = s.float_inputs && b.x.is_floating_point();
    s.index_inputs = s.index_inputs && b.x.dtype() == kInt64;
    s.label_values = std::max(s.label_values, b.y.dim() <= 1 ? int64_t{1} : b.y.numel() / B);
    const Tensor xb = b.x.reshape({B, -1}).to(kFloat64).contiguous();
    if (s.integral_inputs && b.x.is_floating_point()) {
      const double* v = xb.data_ptr<double>();
      for (int64_t k = 0, e = xb.numel(); k < e && s.integral_inputs; ++k) s.integral_inputs = v[k] == std::trunc(v[k]);
    }
    s.tabular = s.tabular && b.x.dim() == 2 && s.features <= opts.max_drift_columns;
    if (s.tabular) {
      const std::vector<double> v = xb.contiguous().to_vector<double>();
      s.columns.insert(s.columns.end(), v.begin(), v.end());
    } else {
      s.columns.clear();
    }
    const std::vector<double> m = xb.mean({1}).to_vector<double>();
    const std::vector<double> sd = xb.std({1}, /*unbiased=*/false).to_vector<double>();
    s.means.insert(s.means.end(), m.begin(), m.end());
    s.stds.insert(s.stds.end(), sd.begin(), sd.end());
  }
  if (s.tabular && s.features > 0 && !s.columns.empty())
    s.repeats = repetition_factor(s.columns, s.columns.size() / static_cast<size_t>(s.features),
                                  static_cast<size_t>(s.features));
  return s;
}

}  // namespace gradsleuth::debug
