// Column statistics D14 (splits.cpp, its home) reads: each column's mean and variance, the 0/1 columns'
// shares, and the drift left once the training rows are weighted to the other split's class shares.
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "debug/checks/data/data_util.h"

namespace gradsleuth::debug::data_detail {

std::vector<double> column_means(const std::vector<float>& c, size_t n, size_t D) {
  std::vector<double> m(D, 0.0);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < D; ++j) m[j] += c[i * D + j];
  for (double& v : m) v /= static_cast<double>(n);
  return m;
}
std::vector<double> column_variances(const std::vector<float>& c, size_t n, size_t D, const std::vector<double>& m) {
  std::vector<double> v(D, 0.0);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < D; ++j) v[j] += (c[i * D + j] - m[j]) * (c[i * D + j] - m[j]);
  for (double& x : v) x /= static_cast<double>(n - 1);
  return v;
}

BinaryShares binary_shares(const SplitSample& a, const SplitSample& b) {
  BinaryShares s;
  const size_t ra = static_cast<size_t>(a.read()), rb = static_cast<size_t>(b.read());
  if (ra == 0 || rb == 0 || a.columns.empty() || a.columns.size() % ra != 0) return s;
  const size_t D = a.columns.size() / ra;
  if (b.columns.size() != D * rb) return s;
  std::vector<double> pa, pb;
  const auto share = [D](const std::vector<float>& c, size_t rows, size_t j) {
    double sum = 0.0;
    for (size_t i = 0; i < rows; ++i) {
      const float v = c[i * D + j];
      if (v != 0.0f && v != 1.0f) return -1.0;
      sum += v;
    }
    return sum / static_cast<double>(rows);
  };
  for (size_t j = 0; j < D; ++j) {
    const double sa = share(a.columns, ra, j), sb = sa < 0 ? -1.0 : share(b.columns, rb, j);
    if (sa >= 0 && sb >= 0) pa.push_back(sa), pb.push_back(sb);
  }
  s.columns = pa.size();
  for (size_t k = 0; k < pa.size(); ++k) s.moved = std::max(s.moved, std::fabs(pa[k] - pb[k]));
  std::sort(pa.begin(), pa.end());
  std::sort(pb.begin(), pb.end());
  for (size_t k = 0; k < pa.size(); ++k) s.sorted = std::max(s.sorted, std::fabs(pa[k] - pb[k]));
  return s;
}

ReweightedDrift class_reweighted_drift(const SplitSample& a, const SplitSample& b) {
  ReweightedDrift r;
  const size_t ra = static_cast<size_t>(a.read()), rb = static_cast<size_t>(b.read());
  if (!a.classes || !b.classes || ra < 20 || rb < 20 || a.y.size() != ra || b.y.size() != rb || a.columns.empty() ||
      a.columns.size() % ra != 0)
    return r;
  const size_t D = a.columns.size() / ra;
  if (b.columns.size() != D * rb) return r;
  std::map<double, double> sa, sb;
  for (const Label& l : a.y) sa[l.value] += 1.0 / static_cast<double>(ra);
  for (const Label& l : b.y) sb[l.value] += 1.0 / static_cast<double>(rb);
  for (const auto& [c, share] : sb)
    if (!sa.count(c)) return r;  // a class the training rows do not hold: no weights make up for it
  for (const auto& [c, share] : sa) r.moved += 0.5 * std::fabs(share - (sb.count(c) ? sb[c] : 0.0));
  std::vector<double> w(ra);
  double wsum = 0.0;
  for (size_t i = 0; i < ra; ++i) {
    const double c = a.y[i].value;
    w[i] = sb.count(c) ? sb[c] / sa[c] : 0.0;
    wsum += w[i];
  }
  if (!(wsum > 0)) return r;
  double w2 = 0.0;
  for (double x : w) w2 += x * x;
  r.effective_rows = wsum * wsum / w2;  // Kish's effective sample size of the weighted rows
  r.shift = 0.0;
  r.ratio = 1.0;
  const std::vector<double> means_b = column_means(b.columns, rb, D),
                            vars_b = column_variances(b.columns, rb, D, means_b);
  for (size_t j = 0; j < D; ++j) {
    double ma = 0.0;
    for (size_t i = 0; i < ra; ++i) ma += w[i] * a.columns[i * D + j];
    ma /= wsum;
    double va = 0.0;
    for (size_t i = 0; i < ra; ++i) va += w[i] * (a.columns[i * D + j] - ma) * (a.columns[i * D + j] - ma);
    va /= wsum;
    const double mb = means_b[j], vb = vars_b[j];
    if (!(va > 0 && vb > 0)) continue;
    const double shift = (ma - mb) / std::sqrt(0.5 * (va + vb));
    if (std::fabs(shift) > std::fabs(r.shift)) r.shift = shift;
    if (std::fabs(std::log(va / vb)) > std::fabs(std::log(r.ratio))) r.ratio = va / vb;
  }
  return r;
}

}  // namespace gradsleuth::debug::data_detail
