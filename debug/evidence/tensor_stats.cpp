// Tensor summaries for findings (see tensor_stats.h): a pass over the values on the CPU; tensor
// ops on the tensor's own device otherwise (only the scalars come back).
#include "debug/evidence/tensor_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/evidence/finding.h"

namespace gradsleuth::debug {

namespace {
template <class T>
void scan(const T* p, int64_t n, TensorSummary& s, double& sum, double& sumsq) {
  double mn = std::numeric_limits<double>::infinity(), mx = -mn;
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(p[i]);
    if (std::isnan(v)) {
      ++s.nan;
      continue;
    }
    if (std::isinf(v)) {
      ++s.inf;
      continue;
    }
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

namespace {
// One branch-free pass (four interleaved accumulators, so the additions
// pipeline); false when a value is not finite: the caller then counts NaN/Inf
// with the careful loop above.
template <class T>
bool scan_fast(const T* p, int64_t n, TensorSummary& s) {
  // 32 independent lanes of each running value (the vector units then overlap the additions
  // instead of waiting on one accumulator), float64 sums; the zero counts are int32 per lane,
  // emptied every 2^24 elements. The order of the additions differs from a sequential loop.
  constexpr int L = 32;
  double ls[L] = {}, lq[L] = {};
  T lmin[L], lmax[L];
  int32_t lz[L] = {};
  for (int l = 0; l < L; ++l) lmin[l] = lmax[l] = p[0];
  int64_t zeros = 0, i = 0;
  while (i + L <= n) {
    const int64_t last = std::min(n - L, i + (int64_t{1} << 24));
    for (; i <= last; i += L) {
#pragma omp simd
      for (int l = 0; l < L; ++l) {
        const T v = p[i + l];
        const double d = static_cast<double>(v);
        ls[l] += d;
        lq[l] += d * d;
        lmin[l] = v < lmin[l] ? v : lmin[l];
        lmax[l] = v > lmax[l] ? v : lmax[l];
        lz[l] += v == T(0) ? 1 : 0;
      }
    }
    for (int l = 0; l < L; ++l) zeros += std::exchange(lz[l], 0);
  }
  double sum = 0.0, sq = 0.0;
  T mn = lmin[0], mx = lmax[0];
  for (; i < n; ++i) {
    const T v = p[i];
    sum += static_cast<double>(v);
    sq += static_cast<double>(v) * static_cast<double>(v);
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
    zeros += v == T(0) ? 1 : 0;
  }
  for (int l = 0; l < L; ++l) {
    sum += ls[l];
    sq += lq[l];
    mn = lmin[l] < mn ? lmin[l] : mn;
    mx = lmax[l] > mx ? lmax[l] : mx;
  }
  if (!std::isfinite(sum) || !std::isfinite(sq)) return false;  // NaN/Inf: the careful loop counts them
  const double dn = static_cast<double>(n);
  s.finite = n;
  s.min = static_cast<double>(mn);
  s.max = static_cast<double>(mx);
  s.mean = sum / dn;
  s.std = std::sqrt(std::max(0.0, sq / dn - s.mean * s.mean));
  s.norm = std::sqrt(sq);
  s.zero_fraction = static_cast<double>(zeros) / dn;
  return true;
}

// v - v is 0 for a finite v and NaN for NaN or Inf (and NaN != 0): an integer
// OR over the comparison, which vectorises.
template <class T>
bool finite_fast(const T* p, int64_t n) {
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (int64_t i = 0; i < n; ++i) bad |= (p[i] - p[i]) != T(0) ? 1 : 0;
  return bad == 0;
}
}  // namespace

namespace {
// The summary of a tensor on a device, computed there by tensor ops in float64: only seven
// scalars come back to the host, never the tensor.
TensorSummary summarize_on_device(const Tensor& t) {
  TensorSummary s;
  s.numel = t.numel();
  if (s.numel == 0) return s;
  const Tensor x = t.detach().to(kFloat64);
  const TensorOptions o = TensorOptions(kFloat64).device(x.device());
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor fin = isfinite(x), zero = scalar_tensor(0.0, o);
  const Tensor x0 = where(fin, x, zero);
  const std::vector<double> v =
      stack({sum(isnan(x).to(kFloat64)), sum(isinf(x).to(kFloat64)), sum(eq(x, zero).to(kFloat64)), sum(x0),
             sum(x0 * x0), amin(where(fin, x, scalar_tensor(inf, o))), amax(where(fin, x, scalar_tensor(-inf, o)))})
          .to_vector<double>();
  s.nan = static_cast<int64_t>(v[0]);
  s.inf = static_cast<int64_t>(v[1]);
  s.finite = s.numel - s.nan - s.inf;
  s.zero_fraction = v[2] / static_cast<double>(s.numel);
  if (s.finite == 0) return s;
  const double n = static_cast<double>(s.finite);
  s.min = v[5];
  s.max = v[6];
  s.mean = v[3] / n;
  s.std = std::sqrt(std::max(0.0, v[4] / n - s.mean * s.mean));
  s.norm = std::sqrt(v[4]);
  return s;
}
}  // namespace

namespace {
thread_local SummaryCache* active_cache = nullptr;
}  // namespace

TensorSummary summarize_uncached(const Tensor& t);  // one pass over a CPU tensor

SummaryCache::SummaryCache() : outer_(active_cache) { active_cache = this; }
SummaryCache::~SummaryCache() { active_cache = outer_; }

SummaryCache::Entry* SummaryCache::find(const Tensor& t) {
  for (Entry& e : entries_)
    if (e.data == t.raw_data() && e.numel == t.numel() && e.dtype == t.dtype() && e.version == t.version()) return &e;
  return nullptr;
}

TensorSummary summarize(const Tensor& t) {
  TensorSummary s;
  if (!t.defined()) return s;
  NoGradGuard ng;
  if (!t.device().is_cpu()) return summarize_on_device(t);
  SummaryCache* cache = t.is_contiguous() ? active_cache : nullptr;
  if (cache) {
    if (SummaryCache::Entry* e = cache->find(t)) {
      if (!e->full) {  // only the norm so far: read it whole now, once
        e->summary = summarize_uncached(t);
        e->full = true;
        return e->summary;
      }
      ++cache->hits_;
      return e->summary;
    }
    s = summarize_uncached(t);
    cache->entries_.push_back({t.raw_data(), t.numel(), t.dtype(), t.version(), s, true});
    return s;
  }
  return summarize_uncached(t);
}

namespace {
// The sum of squares of a (Diff: of a - b, each difference taken in T) in float64 over 32
// independent lanes (the additions overlap instead of waiting on one accumulator); false when a
// value of a is NaN or Inf (x * 0 is then NaN).
// (Per-lane arrays only: a reduction clause beside them stops GCC from vectorising the loop.)
template <bool Diff, class T>
bool squares_in_lanes(const T* a, const T* b, int64_t n, double& squares) {
  constexpr int L = 32;
  double lq[L] = {};
  T lf[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L) {
#pragma omp simd
    for (int l = 0; l < L; ++l) {
      const T v = Diff ? a[i + l] - b[i + l] : a[i + l];
      lq[l] += static_cast<double>(v) * static_cast<double>(v);
      lf[l] += a[i + l] * T(0);
    }
  }
  double sq = 0.0;
  T nonfinite = 0;
  for (; i < n; ++i) {
    const T v = Diff ? a[i] - b[i] : a[i];
    sq += static_cast<double>(v) * static_cast<double>(v);
    nonfinite += a[i] * T(0);
  }
  for (int l = 0; l < L; ++l) {
    sq += lq[l];
    nonfinite += lf[l];
  }
  squares = sq;
  return nonfinite == T(0) && std::isfinite(sq);
}
}  // namespace

bool sum_of_squares(const float* a, int64_t n, double& squares) { return squares_in_lanes<false>(a, a, n, squares); }
bool sum_of_squares(const double* a, int64_t n, double& squares) { return squares_in_lanes<false>(a, a, n, squares); }
bool sum_of_squared_differences(const float* a, const float* b, int64_t n, double& squares) {
  return squares_in_lanes<true>(a, b, n, squares);
}

TensorSummary summarize_norm(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || !t.is_contiguous() || t.numel() == 0 ||
      (t.dtype() != kFloat32 && t.dtype() != kFloat64))
    return summarize(t);
  SummaryCache* cache = active_cache;
  if (const SummaryCache::Entry* e = cache ? cache->find(t) : nullptr) {
    ++cache->hits_;
    return e->summary;
  }
  double sq = 0.0;
  const bool finite = t.dtype() == kFloat32 ? sum_of_squares(static_cast<const float*>(t.raw_data()), t.numel(), sq)
                                            : sum_of_squares(static_cast<const double*>(t.raw_data()), t.numel(), sq);
  if (!finite) return summarize(t);  // counts the NaN/Inf (and caches the full summary)
  TensorSummary s;
  s.numel = s.finite = t.numel();
  s.norm = std::sqrt(sq);
  if (cache) cache->entries_.push_back({t.raw_data(), t.numel(), t.dtype(), t.version(), s, false});
  return s;
}

TensorSummary summarize_uncached(const Tensor& t) {
  TensorSummary s;
  NoGradGuard ng;
  Tensor c = t.detach().contiguous();
  if (is_reduced_float(c.dtype())) c = c.to(kFloat32);  // exact: float32 holds every 16-bit value
  s.numel = c.numel();
  if (c.numel() > 0 && c.dtype() == kFloat32 && scan_fast(static_cast<const float*>(c.raw_data()), s.numel, s))
    return s;
  if (c.numel() > 0 && c.dtype() == kFloat64 && scan_fast(static_cast<const double*>(c.raw_data()), s.numel, s))
    return s;
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
  if (t.is_contiguous() && t.device().is_cpu()) {
    if (t.dtype() == kFloat32) return finite_fast(static_cast<const float*>(t.raw_data()), t.numel());
    if (t.dtype() == kFloat64) return finite_fast(static_cast<const double*>(t.raw_data()), t.numel());
  }
  // A sum is NaN or Inf as soon as one term is (and overflow to Inf counts as a problem too).
  const double v = sum(t.detach().to(kFloat64)).item<double>();
  if (std::isfinite(v)) return true;
  return summarize(t).all_finite();
}

bool all_zero(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return false;
  if (t.device().is_cpu() && t.is_contiguous() && (t.dtype() == kFloat32 || t.dtype() == kFloat64)) {
    // Chunks of 256, each vectorised; the first chunk with a nonzero value ends it (on a healthy
    // tensor, the first). NaN != 0 and Inf != 0: neither is zero.
    auto zero = [&](auto* p) {
      const int64_t n = t.numel();
      for (int64_t b = 0; b < n; b += 256) {
        const int64_t e = std::min(n, b + 256);
        int nonzero = 0;
#pragma omp simd reduction(| : nonzero)
        for (int64_t i = b; i < e; ++i) nonzero |= p[i] != 0 ? 1 : 0;
        if (nonzero) return false;
      }
      return true;
    };
    if (t.dtype() == kFloat32) return zero(static_cast<const float*>(t.raw_data()));
    return zero(static_cast<const double*>(t.raw_data()));
  }
  const TensorSummary st = summarize(t);
  return st.all_finite() && st.zero_fraction == 1.0;
}

bool sampled_finite(const Tensor& t) {
  // The sample reads float32 or float64 in place; any other dtype (float16, bfloat16) is read whole.
  if (!t.defined() || (t.dtype() != kFloat32 && t.dtype() != kFloat64) || t.numel() <= 4096 || t.dim() < 2 ||
      !t.is_contiguous() || !t.device().is_cpu())
    return all_finite(t);
  // (rows, k): dimension 0 against the rest. The first row whole, then the first element of
  // every row.
  const int64_t rows = t.size(0), k = t.numel() / rows;
  auto check = [&](auto* p) {
    int bad = 0;
#pragma omp simd reduction(| : bad)
    for (int64_t j = 0; j < k; ++j) bad |= (p[j] - p[j]) != 0 ? 1 : 0;
#pragma omp simd reduction(| : bad)
    for (int64_t r = 1; r < rows; ++r) bad |= (p[r * k] - p[r * k]) != 0 ? 1 : 0;
    return bad == 0;
  };
  if (t.dtype() == kFloat32) return check(static_cast<const float*>(t.raw_data()));
  return check(static_cast<const double*>(t.raw_data()));
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

MaskPattern mask_pattern(const Tensor& drawn, const Tensor& reference) {
  MaskPattern m;
  if (!drawn.defined() || !reference.defined() || drawn.shape() != reference.shape() || drawn.numel() == 0) return m;
  NoGradGuard ng;
  const std::vector<double> d = drawn.to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> r = reference.to(kFloat64).contiguous().to_vector<double>();
  const size_t n = d.size();
  std::vector<char> zeroed(n, 0);
  double ratio_sum = 0.0, ratio_sq = 0.0;
  int64_t kept = 0, dropped = 0;
  for (size_t k = 0; k < n; ++k) {
    if (r[k] == 0.0) continue;
    if (d[k] == 0.0) {
      zeroed[k] = 1;
      ++dropped;
    } else {
      const double q = d[k] / r[k];
      ratio_sum += q;
      ratio_sq += q * q;
      ++kept;
    }
  }
  if (kept == 0 || dropped == 0) return m;
  const double mean = ratio_sum / static_cast<double>(kept);
  const double var = std::max(0.0, ratio_sq / static_cast<double>(kept) - mean * mean);
  m.mask = mean > 0.0 && std::sqrt(var) <= 1e-3 * mean;
  m.multiple = mean;
  m.zeroed = static_cast<double>(dropped) / static_cast<double>(dropped + kept);
  if (!m.mask || drawn.dim() < 3) return m;
  // Along the last dim: how often a zeroed entry's right neighbour is zeroed too (about the drop rate for
  // scattered entries, near 1 for patches and whole planes); and whether planes are zeroed only in part.
  const int64_t W = drawn.size(-1), H = drawn.size(-2), plane = W * H;
  int64_t pairs = 0, both = 0, partial = 0, touched = 0;
  for (size_t base = 0; base + static_cast<size_t>(plane) <= n; base += static_cast<size_t>(plane)) {
    int64_t z = 0;
    for (int64_t k = 0; k < plane; ++k) {
      const size_t at = base + static_cast<size_t>(k);
      z += zeroed[at];
      if (zeroed[at] && k % W + 1 < W) {
        ++pairs;
        both += zeroed[at + 1];
      }
    }
    touched += z > 0 ? 1 : 0;
    partial += z > 0 && z < plane * 9 / 10 ? 1 : 0;
  }
  m.occlusion = pairs > 0 && touched > 0 &&
                static_cast<double>(both) >= std::max(0.75, m.zeroed + 0.3) * static_cast<double>(pairs) &&
                2 * partial >= touched;
  return m;
}

}  // namespace gradsleuth::debug
