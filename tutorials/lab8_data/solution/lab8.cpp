// Lab 8 reference solution (built only with -DGRADSLEUTH_LAB_SOLUTIONS=ON).
// Data bugs: misalignment, leakage, raw pixels, class imbalance, sorted batches; see ../README.md.
#include "tutorials/lab8_data/lab8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>

#include "core/autograd.h"
#include "core/ops.h"

namespace gradsleuth::lab8 {

namespace {

// FNV-1a over the bytes of each row of x (N, D...) as float32: equal images, equal hashes.
std::vector<uint64_t> row_hashes(const Tensor& x) {
  const Tensor c = x.detach().to(kFloat32).contiguous();
  const int64_t n = c.dim() == 0 ? 0 : c.size(0);
  const int64_t bytes = n == 0 ? 0 : c.numel() / n * static_cast<int64_t>(sizeof(float));
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  std::vector<uint64_t> out(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    uint64_t h = 1469598103934665603ull;
    for (int64_t k = 0; k < bytes; ++k) h = (h ^ p[r * bytes + k]) * 1099511628211ull;
    out[r] = h;
  }
  return out;
}

}  // namespace

// Task 8.1
AlignmentCounts count_misaligned(const nn::Dataset& reference, const nn::DataLoader& loader) {
  std::unordered_map<uint64_t, std::vector<int64_t>> labels_of;  // image hash -> its labels
  const nn::Batch all = reference.all();
  const std::vector<uint64_t> hs = row_hashes(all.x);
  const std::vector<int64_t> ys = all.y.to_vector<int64_t>();
  for (size_t i = 0; i < hs.size(); ++i) {
    std::vector<int64_t>& ls = labels_of[hs[i]];
    if (std::find(ls.begin(), ls.end(), ys[i]) == ls.end()) ls.push_back(ys[i]);
  }
  AlignmentCounts c;
  for (int64_t i = 0; i < loader.num_batches(); ++i) {
    const nn::Batch b = loader.batch(loader.epoch(), i);  // does not start the epoch
    const std::vector<uint64_t> bh = row_hashes(b.x);
    const std::vector<int64_t> by = b.y.to_vector<int64_t>();
    for (size_t r = 0; r < bh.size(); ++r) {
      ++c.checked;
      const auto it = labels_of.find(bh[r]);
      if (it == labels_of.end())
        ++c.unknown;
      else if (std::find(it->second.begin(), it->second.end(), by[r]) == it->second.end())
        ++c.misaligned;
    }
  }
  return c;
}

// Task 8.2: statistics in float64, then float32.
Standardiser fit_standardiser(const Tensor& x) {
  GS_CHECK(x.defined() && x.dim() >= 1 && x.size(0) > 0, "lab8::fit_standardiser",
           "needs data (N, D...) with N >= 1, got ", x.defined() ? x.str() : "an undefined tensor");
  NoGradGuard no_grad;
  const Tensor x64 = x.detach().to(kFloat64);
  const Tensor mean = x64.mean({0});                          // (D...)
  const Tensor std = (x64 - mean).square().mean({0}).sqrt();  // population: divide by N
  return {mean.to(kFloat32), std.to(kFloat32)};
}

Tensor standardise(const Standardiser& s, const Tensor& x, double eps) {
  NoGradGuard no_grad;
  return (x.detach().to(kFloat32) - s.mean) / s.std.clamp(eps, std::nullopt);
}

Splits standardise_splits(const Splits& raw) {
  const Standardiser s = fit_standardiser(raw.train);  // the training split only
  return {standardise(s, raw.train), standardise(s, raw.val), standardise(s, raw.test)};
}

// Task 8.3
bool looks_like_raw_pixels(const Tensor& x) {
  if (!x.defined() || x.numel() == 0 || !x.is_floating_point()) return false;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  bool whole = true;
  for (double v : x.to_vector<double>()) {
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    whole = whole && v == std::round(v);
  }
  return hi >= lo && whole && lo >= 0.0 && hi <= 255.0 && hi > 1.0;
}

Tensor scale_pixels(const Tensor& x) { return looks_like_raw_pixels(x) ? x.to(kFloat32) / 255.0 : x; }

// Task 8.4
std::vector<int64_t> class_counts(const Tensor& y, int64_t num_classes) {
  GS_CHECK(y.defined() && !y.is_floating_point() && num_classes > 0, "lab8::class_counts",
           "needs integral labels and num_classes > 0, got ", y.defined() ? y.str() : "an undefined tensor");
  std::vector<int64_t> counts(static_cast<size_t>(num_classes), 0);
  for (int64_t c : y.to_vector<int64_t>()) {
    GS_CHECK(c >= 0 && c < num_classes, "lab8::class_counts", "label ", c, " is outside [0, ", num_classes, ")");
    ++counts[static_cast<size_t>(c)];
  }
  return counts;
}

double imbalance_ratio(const std::vector<int64_t>& counts) {
  GS_CHECK(!counts.empty(), "lab8::imbalance_ratio", "needs at least one class");
  const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
  return *lo == 0 ? std::numeric_limits<double>::infinity() : static_cast<double>(*hi) / static_cast<double>(*lo);
}

Tensor class_weights(const std::vector<int64_t>& counts) {
  double n = 0.0;
  for (int64_t c : counts) n += static_cast<double>(c);
  const double k = static_cast<double>(counts.size());
  std::vector<double> w;
  for (int64_t c : counts) w.push_back(c == 0 ? 0.0 : n / (k * static_cast<double>(c)));
  return tensor(w, {static_cast<int64_t>(w.size())}, kFloat32);
}

std::vector<double> per_class_recall(const Tensor& predicted, const Tensor& y, int64_t num_classes) {
  GS_CHECK(predicted.numel() == y.numel(), "lab8::per_class_recall", "predicted ", predicted.str(), " and labels ",
           y.str(), " differ in size");
  const std::vector<int64_t> p = predicted.to_vector<int64_t>(), t = y.to_vector<int64_t>();
  std::vector<double> hit(static_cast<size_t>(num_classes), 0.0), total(static_cast<size_t>(num_classes), 0.0);
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] < 0 || t[i] >= num_classes) continue;
    total[t[i]] += 1.0;
    hit[t[i]] += p[i] == t[i] ? 1.0 : 0.0;
  }
  std::vector<double> r;
  for (int64_t c = 0; c < num_classes; ++c) r.push_back(total[c] > 0 ? hit[c] / total[c] : std::nan(""));
  return r;
}

// Task 8.5
namespace {
std::vector<std::vector<int64_t>> epoch_labels(const nn::DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t i = 0; i < loader.num_batches(); ++i) {
    const nn::Batch b = loader.batch(loader.epoch(), i);
    GS_CHECK(b.y.dim() == 1 && !b.y.is_floating_point(), "lab8", "expects class labels (B), got ", b.y.str());
    out.push_back(b.y.to_vector<int64_t>());
  }
  return out;
}
}  // namespace

double single_class_fraction(const nn::DataLoader& loader) {
  const auto batches = epoch_labels(loader);
  if (batches.empty()) return 0.0;
  int64_t single = 0;
  for (const auto& l : batches)
    single += !l.empty() && std::all_of(l.begin(), l.end(), [&](int64_t c) { return c == l[0]; }) ? 1 : 0;
  return static_cast<double>(single) / static_cast<double>(batches.size());
}

double expected_single_class_fraction(const nn::DataLoader& loader) {
  const auto batches = epoch_labels(loader);
  std::unordered_map<int64_t, double> freq;
  double total = 0.0;
  for (const auto& l : batches)
    for (int64_t c : l) freq[c] += 1.0, total += 1.0;
  if (batches.empty() || total == 0.0) return 0.0;
  double expected = 0.0;
  for (const auto& l : batches)
    for (const auto& [c, n] : freq) expected += std::pow(n / total, static_cast<double>(l.size()));
  return expected / static_cast<double>(batches.size());
}

bool batches_look_sorted(const nn::DataLoader& loader, double margin) {
  return single_class_fraction(loader) > expected_single_class_fraction(loader) + margin;
}

}  // namespace gradsleuth::lab8
