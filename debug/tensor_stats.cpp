// Tensor summaries for findings (see tensor_stats.h).
#include "debug/tensor_stats.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/finding.h"

namespace gradsleuth::debug {

namespace {
template <class T>
void scan(const T* p, int64_t n, TensorSummary& s, double& sum, double& sumsq) {
  double mn = std::numeric_limits<double>::infinity(), mx = -mn;
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(p[i]);
    if (std::isnan(v)) { ++s.nan; continue; }
    if (std::isinf(v)) { ++s.inf; continue; }
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
    sum += v;
    sumsq += v * v;
    if (v == 0.0) s.zero_fraction += 1.0;
  }
  s.min = mn;
  s.max = mx;
}
}  // namespace

TensorSummary summarize(const Tensor& t) {
  TensorSummary s;
  if (!t.defined()) return s;
  NoGradGuard ng;
  Tensor c = t.detach().contiguous();
  if (c.device().is_cuda()) c = c.cpu();
  s.numel = c.numel();
  double sum = 0.0, sumsq = 0.0;
  dispatch_dtype(c.dtype(), [&](auto tag) {
    using T = decltype(tag);
    scan(static_cast<const T*>(c.raw_data()), s.numel, s, sum, sumsq);
  });
  s.finite = s.numel - s.nan - s.inf;
  if (s.finite == 0) {
    s.min = s.max = 0.0;
    return s;
  }
  const double n = static_cast<double>(s.finite);
  s.mean = sum / n;
  s.std = std::sqrt(std::max(0.0, sumsq / n - s.mean * s.mean));
  s.norm = std::sqrt(sumsq);
  s.zero_fraction /= static_cast<double>(s.numel);
  return s;
}

bool all_finite(const Tensor& t) {
  if (!t.defined() || !t.is_floating_point() || t.numel() == 0) return true;
  NoGradGuard ng;
  // A sum is NaN or Inf as soon as one term is (and overflow to Inf counts as a problem too).
  const double v = sum(t.detach().to(kFloat64)).item<double>();
  if (std::isfinite(v)) return true;
  return summarize(t).all_finite();
}

std::string shape_of(const Tensor& t) { return t.defined() ? shape_str(t.shape()) : "undefined"; }

std::string TensorSummary::str(const Tensor& t) const {
  std::ostringstream os;
  os << (t.defined() ? t.str() : "undefined") << ": ";
  if (nan || inf) os << nan << " NaN, " << inf << " Inf of " << numel << "; ";
  if (finite == 0) {
    os << "no finite value";
    return os.str();
  }
  os << "finite values in [" << fmt_num(min) << ", " << fmt_num(max) << "], mean " << fmt_num(mean) << ", std "
     << fmt_num(std);
  return os.str();
}

}  // namespace gradsleuth::debug
