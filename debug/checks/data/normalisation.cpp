// D5 normalisation: per-feature statistics of a batch, and the RowRangeTracker over every training row (see
// data_checks.h).
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
#include "debug/checks/hooks.h"
#include "debug/checks/model/behaviour.h"
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

using namespace data_detail;

// ---- D5 normalisation -----------------------------------------------------------------

namespace {
// Each column's mean and sum of squared deviations over the finite values of rows (N, F) stored row-major
// (Welford's update), and how many values it holds.
struct ColumnStats {
  std::vector<double> mean, m2;
  std::vector<int64_t> count;
  ColumnStats(const std::vector<double>& v, int64_t N, int64_t F)
      : mean(static_cast<size_t>(F), 0.0), m2(static_cast<size_t>(F), 0.0), count(static_cast<size_t>(F), 0) {
    for (int64_t r = 0; r < N; ++r)
      for (int64_t d = 0; d < F; ++d) {
        const double a = v[r * F + d];
        if (!std::isfinite(a)) continue;
        const double delta = a - mean[d];
        mean[d] += delta / static_cast<double>(++count[d]);
        m2[d] += delta * (a - mean[d]);
      }
  }
  // The population (`ddof` 0) or sample (1) variance of column d; NaN with too few values.
  double var(int64_t d, int ddof) const {
    return count[d] > ddof ? m2[d] / static_cast<double>(count[d] - ddof) : std::nan("");
  }
};

// The histogram bin of a row's largest |value| (>= 0): the float's exponent and the top 3 bits of
// its mantissa, so 8 bins per power of 2 over every float, read from the bits.
int row_bin(float v) {
  uint32_t b = 0;
  std::memcpy(&b, &v, sizeof b);
  return static_cast<int>((b >> 20) & 0x7FF);
}
double bin_value(int bin) {  // the middle of the bin
  const uint32_t b = (static_cast<uint32_t>(bin) << 20) | 0x80000u;
  float v = 0.0f;
  std::memcpy(&v, &b, sizeof v);
  return v;
}
}  // namespace

void RowRangeTracker::add_row(float max_abs, float rms, int64_t step, int64_t row) {
  ++hist_[static_cast<size_t>(row_bin(max_abs))];
  ++rms_hist_[static_cast<size_t>(row_bin(rms))];
  ++rows_;
  auto smaller = [](const Row& x, const Row& y) { return x.max_abs > y.max_abs; };  // a min-heap
  if (static_cast<int>(top_.size()) < kTop) {
    top_.push_back({max_abs, rms, step, row});
    std::push_heap(top_.begin(), top_.end(), smaller);
  } else if (max_abs > top_.front().max_abs) {
    std::pop_heap(top_.begin(), top_.end(), smaller);
    top_.back() = {max_abs, rms, step, row};
    std::push_heap(top_.begin(), top_.end(), smaller);
  }
}

void RowRangeTracker::record(const Tensor& x, int64_t step) {
  if (!x.defined() || x.dim() < 1 || x.numel() == 0 || x.dtype() != kFloat32 || !x.device().is_cpu() ||
      !x.is_contiguous() || !found_.empty())
    return;
  const int64_t n = x.size(0), k = x.numel() / n;
  const float* p = x.data_ptr<float>();
  for (int64_t r = 0; r < n; ++r) {
    // 32 running maxima (four independent vector registers of 8, so the max's latency does not
    // serialise the loop); NaN compares false and is skipped (D2's).
    float m[32] = {}, q[32] = {};
    const float* row = p + r * k;
    int64_t j = 0;
    for (; j + 32 <= k; j += 32)
      for (int l = 0; l < 32; ++l) {
        const float v = row[j + l], a = std::fabs(v);
        m[l] = a > m[l] ? a : m[l];
        q[l] += v * v;
      }
    for (; j < k; ++j) {
      const float a = std::fabs(row[j]);
      m[0] = a > m[0] ? a : m[0];
      q[0] += a * a;
    }
    float top = m[0];
    double squares = 0.0;
    for (int l = 0; l < 32; ++l) {
      top = m[l] > top ? m[l] : top;
      squares += q[l];
    }
    const double rms = std::sqrt(squares / static_cast<double>(std::max<int64_t>(k, 1)));
    add_row(top, std::isfinite(rms) ? static_cast<float>(rms) : 0.0f, step, r);
  }
  rows_total_ += n;
}

void RowRangeTracker::end_epoch() {
  const int64_t epoch = epoch_++, rows = rows_;
  std::vector<Row> top;
  top.swap(top_);
  std::vector<int64_t> hist(kBins, 0), rms_hist(kBins, 0);
  hist.swap(hist_);
  rms_hist.swap(rms_hist_);
  rows_ = 0;
  if (!found_.empty() || rows < o_.row_range_min_rows) return;
  // The median row's largest |value| and root mean square, to the histograms' resolution (a bin is 9%
  // wide).
  auto median_of = [&](const std::vector<int64_t>& h) {
    int64_t seen = 0;
    int mid = 0;
    for (; mid < kBins; ++mid)
      if ((seen += h[static_cast<size_t>(mid)]) * 2 >= rows) break;
    return mid == 0 ? 0.0 : bin_value(mid);
  };
  const double med = median_of(hist), med_rms = median_of(rms_hist);
  const double limit = std::max(o_.row_range_ratio * med, o_.raw_max);
  const double rms_limit = o_.row_range_rms_ratio * med_rms;
  // The rows out of range: counted exactly among the kTop largest; beyond them, at least kTop.
  int64_t out = 0;
  const Row* worst = nullptr;
  for (const Row& r : top)
    if (r.max_abs > limit && r.rms > rms_limit) {
      ++out;
      if (!worst || r.max_abs > worst->max_abs) worst = &r;
    }
  if (!worst) return;
  const bool more = out == kTop;  // every kept row is out of range: there may be more
  Finding f = make("D5", Severity::Warning,
                   (more ? "at least " : "") + num(out) + " of the " + num(rows) + " training rows of epoch " +
                       num(epoch) + " are out of range: values up to " + fmt_num(worst->max_abs) + ", " +
                       fmt_num(worst->max_abs / std::max(med, 1e-30)) + "x the typical row's largest |value| (" +
                       fmt_num(med) + "): those rows were not scaled like the rest");
  f.step = worst->step;
  f.evidence = {
      {"rows out of range", static_cast<double>(out),
       "largest |value| > max(" + fmt_num(o_.row_range_ratio) + " x the median row's, " + fmt_num(o_.raw_max) +
           ") warns" + (more ? "; counted among the " + num(kTop) + " largest rows" : "")},
      {"training rows seen in the epoch", static_cast<double>(rows), "every row the loop trained on"},
      {"largest |value| of a row", worst->max_abs, ""},
      {"median row's largest |value|", med, "to 9%: a histogram of 8 bins per power of 2"},
      {"step of that row", static_cast<double>(worst->step), ""},
      {"its row in the batch", static_cast<double>(worst->row), ""},
      {"that row's root mean square", worst->rms,
       "> " + fmt_num(o_.row_range_rms_ratio) + " x the median row's: large throughout, not one extreme entry"},
      {"median row's root mean square", med_rms, ""}};
  f.cause =
      "a few examples skipped the scaling the others had (a second data source, a code path that returns "
      "before normalising, a corrupted file): sampled batches rarely show them, but each time one is drawn "
      "its inputs are orders of magnitude larger, so its loss and gradients spike and the weights jump";
  f.fix =
      "find the rows (print the batch at that step, or scan the dataset for rows with |x| above the limit) and "
      "apply the same preprocessing to every example; drop rows you cannot repair";
  found_.push_back(std::move(f));
}

std::vector<Finding> RowRangeTracker::findings() {
  if (rows_ > 0) end_epoch();
  return found_;
}

std::vector<Finding> check_normalisation(const Tensor& x, const DataCheckOptions& opts) {
  GS_CHECK(x.defined(), "check_normalisation", "needs a defined input sample x (N, D...)");
  if (x.numel() == 0 || !x.is_floating_point()) return {};  // integral inputs are ids (embeddings), not features
  const int64_t N = x.dim() == 0 ? 1 : x.size(0);
  const int64_t F = x.numel() / N;
  const std::vector<double> v = doubles(x);
  const Summary s = summarize(v);
  if (s.finite() == 0) return {};  // nothing finite to judge: D2's job
  std::vector<Finding> out;

  // Rule 1: magnitude. |x| at a high quantile, so a few outliers do not count.
  std::vector<double> mag;
  mag.reserve(v.size());
  bool whole = true;
  for (double a : v)
    if (std::isfinite(a)) {
      mag.push_back(std::fabs(a));
      whole = whole && std::fabs(a - std::round(a)) < 1e-3;  // 0..255 after float arithmetic
    }
  const double q = quantile(mag, opts.raw_quantile);
  if (q > opts.raw_max) {
    const bool pixels = s.min >= 0.0 && s.max <= 255.0 && whole;
    Finding f = make("D5", Severity::Warning,
                     pixels ? "inputs look like raw 0..255 pixel values: they are not scaled"
                            : "inputs are not normalised: |x| reaches " + fmt_num(q) + " (at the " +
                                  fmt_num(100.0 * opts.raw_quantile) + "th percentile)");
    f.shape = x.str();
    f.evidence = {{"|x| at the " + fmt_num(100.0 * opts.raw_quantile) + "th percentile", q,
                   "> " + fmt_num(opts.raw_max) + " warns"},
                  {"min", s.min, ""},
                  {"max", s.max, ""},
                  {"mean", s.mean, ""},
                  {"std", s.std, ""}};
    f.cause = pixels ? "the images were never divided by 255 nor standardised; inputs in the hundreds make "
                       "the first layer's outputs and gradients ~100x too large: saturated units and a learning "
                       "rate that is suddenly far too high"
                     : "the features were not scaled; large inputs make the first layer's outputs and gradients "
                       "large, so training is unstable or needs a tiny learning rate";
    f.fix = pixels ? "scale to [0, 1] (x / 255; nn::load_fashion_mnist does unless raw(true)), or standardise with "
                     "nn::Normalizer fitted on the training split"
                   : "standardise: nn::Normalizer norm; norm.fit(train_x, \"train\"); x = norm.transform(x)";
    out.push_back(f);
  }

  // Rule 2: feature scales. Per-feature std over the N examples.
  const ColumnStats cols(v, N, F);
  if (N >= 2 && F >= 2) {
    std::vector<double> sd(static_cast<size_t>(F), 0.0);
    int64_t top = 0;
    for (int64_t d = 0; d < F; ++d) {
      sd[d] = cols.count[d] > 0 ? std::sqrt(cols.var(d, 0)) : 0.0;
      if (sd[d] > sd[top]) top = d;
    }
    std::vector<int64_t> live;  // non-constant features, by increasing std
    for (int64_t d = 0; d < F; ++d)
      if (sd[d] > 0.0 && sd[d] > opts.constant_rel_std * sd[top]) live.push_back(d);
    std::sort(live.begin(), live.end(), [&](int64_t a, int64_t b) { return sd[a] < sd[b]; });
    if (live.size() >= 2) {
      const double qi = std::clamp(opts.scale_low_quantile, 0.0, 1.0);
      const int64_t low = live[static_cast<size_t>(std::floor(qi * static_cast<double>(live.size() - 1)))];
      const double ratio = sd[top] / sd[low];
      if (ratio > opts.max_scale_ratio) {
        Finding f =
            make("D5", Severity::Warning,
                 "feature scales differ by orders of magnitude: feature " + num(top) + " has std " + fmt_num(sd[top]) +
                     ", feature " + num(low) + " " + fmt_num(sd[low]) + " (ratio " + fmt_num(ratio) + ")");
        f.shape = x.str();
        f.evidence = {
            {"largest feature std (feature " + num(top) + ")", sd[top], ""},
            {"feature std at the " + fmt_num(100.0 * qi) + "th percentile (feature " + num(low) + ")", sd[low], ""},
            {"scale ratio", ratio, "> " + fmt_num(opts.max_scale_ratio) + " warns"},
            {"non-constant features compared", static_cast<double>(live.size()), ""},
            {"constant features (ignored)", static_cast<double>(F - static_cast<int64_t>(live.size())), ""}};
        f.cause =
            "features in different units (an income ~1e4 next to an age ~10) that were not standardised per "
            "feature; the large ones dominate the first layer's outputs and gradients, the small ones are "
            "practically ignored, and no single learning rate suits both";
        f.fix =
            "standardise each feature on the training split: nn::Normalizer norm(nn::Normalizer::Mode::"
            "PerFeature); norm.fit(train_x, \"train\"); then transform every split (log-transform heavy-tailed "
            "features first)";
        out.push_back(f);
      }
    }
  }

  // Rule 3: a missing-value code scaled as data. A column (tabular inputs, at most max_drift_columns)
  // where one exact value holds 5% of the rows or more and lies more than 20 standard deviations of
  // the other rows away from their mean, the others continuous (10 distinct values or more): a
  // sentinel (-999 for "unknown") that entered the scaler's statistics, which then squashed the real
  // values into a sliver. Zero-inflated or capped features sit within a few standard deviations.
  if (N >= 20 && F >= 1 && F <= opts.max_drift_columns && x.dim() == 2) {
    for (int64_t d = 0; d < F; ++d) {
      std::map<double, int64_t> counts;
      for (int64_t r = 0; r < N; ++r)
        if (std::isfinite(v[r * F + d])) ++counts[v[r * F + d]];
      if (counts.size() < 11) continue;
      const auto mode = std::max_element(counts.begin(), counts.end(),
                                         [](const auto& a, const auto& b) { return a.second < b.second; });
      const double share = static_cast<double>(mode->second) / static_cast<double>(N);
      if (share < 0.05) continue;
      std::vector<double> rest;
      for (int64_t r = 0; r < N; ++r)
        if (std::isfinite(v[r * F + d]) && v[r * F + d] != mode->first) rest.push_back(v[r * F + d]);
      const auto [mr, vr] = detail::mean_and_variance(rest);
      const double z = vr > 0 ? std::fabs(mode->first - mr) / std::sqrt(vr) : 0.0;
      if (!(z > 20.0)) continue;
      Finding f = make("D5", Severity::Warning,
                       "feature " + num(d) + " holds one value (" + fmt_num(mode->first) + ") in " +
                           fmt_num(100.0 * share) + "% of the rows, " + fmt_num(z) +
                           " standard deviations of its other rows away: a missing-value code scaled as data");
      f.shape = x.str();
      f.evidence = {{"share of the rows at that value", share, ">= 0.05 and"},
                    {"its distance from the other rows' mean, in their standard deviations", z, "> 20 warns"},
                    {"the other rows' standard deviation", std::sqrt(vr), ""},
                    {"distinct values of the feature", static_cast<double>(counts.size()), ""}};
      f.cause =
          "a code for a missing value (-999, -1, 9999) stayed in the column and went into the scaler's mean "
          "and standard deviation: the real values are squashed into a sliver the first layer can hardly "
          "tell apart, and the code itself reads as an extreme measurement";
      f.fix =
          "replace the code before fitting the scaler (impute the training median, and add a 0/1 column "
          "saying the value was missing); fit the statistics on the real values only";
      out.push_back(f);
      break;  // the first such column
    }
  }

  // Rule 4: rows standardised over their own features. Tabular rows (at most max_drift_columns values) that each
  // have mean 0 and one std to a part in a thousand, while most of the columns' variance lies between their
  // means: the mean and std were taken over each row's features (dim 1) where each feature's over the training
  // rows (dim 0) was meant. A series z-normalised per example (a time series, a spectrum) keeps its columns alike.
  if (N >= 20 && F >= 3 && F <= opts.max_drift_columns && x.dim() == 2) {
    int64_t standardised = 0;
    std::vector<double> row_sd;
    for (int64_t r = 0; r < N; ++r) {
      const auto [m, var] = detail::mean_and_variance(std::vector<double>(v.begin() + r * F, v.begin() + (r + 1) * F));
      row_sd.push_back(std::sqrt(var));
      standardised += std::fabs(m) <= 1e-3 && row_sd.back() >= 0.9 && row_sd.back() <= 1.1;
    }
    const auto [sd_mean, sd_var] = detail::mean_and_variance(row_sd);
    // Each column's mean and sample variance; a column with a value that is not finite gives no share.
    std::vector<double> col_var(static_cast<size_t>(F));
    for (int64_t d = 0; d < F; ++d) col_var[d] = cols.count[d] == N ? cols.var(d, 1) : std::nan("");
    const std::vector<double>& col_mean = cols.mean;
    const double between = detail::mean_and_variance(col_mean).second,
                 within = detail::mean_and_variance(col_var).first, share = between / (between + within);
    if (standardised >= N - N / 20 && std::sqrt(sd_var) <= 1e-3 * sd_mean && share >= 0.5) {
      Finding f = make("D5", Severity::Warning,
                       "every row of the inputs is standardised over its own " + num(F) +
                           " features (mean 0, std 1 per row), and " + fmt_num(100.0 * share) +
                           "% of the columns' variance lies between their means: a z-score over each row's "
                           "features where one per feature over the rows was meant");
      f.shape = x.str();
      f.evidence = {{"rows with mean 0 and std 1 over their features", static_cast<double>(standardised),
                     ">= 95% of the " + num(N) + " and"},
                    {"spread of the rows' std / its mean", std::sqrt(sd_var) / sd_mean, "<= 0.001 and"},
                    {"share of the columns' variance between their means", share, ">= 0.5 warns"}};
      f.cause =
          "the scaler took its mean and std along the wrong axis (x.mean({1}), numpy's axis=1): each row is "
          "divided by a spread its largest features set, so the features in small units are squashed into "
          "nearly constant columns and their information is lost";
      f.fix =
          "standardise each feature over the training rows: mean and std over dim 0 (nn::Normalizer in "
          "PerFeature mode, fitted on the training split), then apply the same statistics to every split";
      out.push_back(f);
    }
  }
  return out;
}

std::vector<Finding> check_target_scales(const Tensor& y, const DataCheckOptions& opts) {
  if (!y.defined() || !y.is_floating_point() || y.dim() != 2 || y.size(0) < 20 || y.size(1) < 2) return {};
  const int64_t N = y.size(0), K = y.size(1);
  const std::vector<double> v = doubles(y);
  const ColumnStats cols(v, N, K);
  std::vector<double> sd(static_cast<size_t>(K));
  std::vector<size_t> distinct(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) {
    std::vector<double> col;
    for (int64_t r = 0; r < N; ++r)
      if (std::isfinite(v[r * K + k])) col.push_back(v[r * K + k]);
    sd[k] = std::sqrt(cols.var(k, 1));
    std::sort(col.begin(), col.end());
    distinct[k] = static_cast<size_t>(std::unique(col.begin(), col.end()) - col.begin());
  }
  int64_t big = -1, small = -1;
  for (int64_t k = 0; k < K; ++k) {
    if (distinct[k] >= 10 && sd[k] >= 10.0 && (big < 0 || sd[k] > sd[big])) big = k;
    if (sd[k] > 0.0 && (small < 0 || sd[k] < sd[small])) small = k;
  }
  if (big < 0 || small < 0 || big == small || !(sd[big] >= opts.max_scale_ratio * sd[small])) return {};
  Finding f = make("D5", Severity::Warning,
                   "target columns on scales orders of magnitude apart: column " + num(big) + " has std " +
                       fmt_num(sd[big]) + ", column " + num(small) + " " + fmt_num(sd[small]) + " (ratio " +
                       fmt_num(sd[big] / sd[small]) + "): under one loss the first one's error swamps the other's");
  f.kind = Kind::TargetScales;
  f.shape = y.str();
  f.evidence = {{"std of target column " + num(big), sd[big], ">= 10, continuous"},
                {"std of target column " + num(small), sd[small], ""},
                {"ratio", sd[big] / sd[small], ">= " + fmt_num(opts.max_scale_ratio) + " warns"}};
  f.cause =
      "a regression target left in raw units (seconds, prices) beside targets near unit scale (a 0/1 label, a "
      "standardised value): its squared error is thousands of times the others' terms, so the shared layers "
      "are trained for it alone and its output layer must grow to its scale (large gradients, a slow start)";
  f.fix =
      "standardise each regression target with the training split's mean and std for the loss (and map the "
      "predictions back for the metric), or weight each term of the loss by the inverse of its scale";
  return {f};
}

void revise_normalisation(Report& found, nn::Module& model, const Tensor& x, const DataCheckOptions& opts) {
  // check_normalisation's two rules (the row tracker's "rows out of range" is another matter).
  const auto per_feature = [](const Finding& f) { return f.title.rfind("feature scales", 0) == 0; };
  const auto of_scale = [&](const Finding& f) {
    return f.check == "D5" && f.fires() && (f.title.rfind("inputs ", 0) == 0 || per_feature(f));
  };
  if (!x.defined() || x.dim() < 2 || std::none_of(found.findings().begin(), found.findings().end(), of_scale)) return;
  Tensor seen;
  bool indices = false;  // a layer with weights got integer input: ids cast from the float inputs
  {
    ModeSnapshot modes(model);
    QuietProbe quiet(model);  // no warnings; buffers (BatchNorm statistics) put back
    set_mode_without_randomness(model, true, probe_mode_dependence(model, x));
    HookSet hooks;
    for (auto& [path, m] : model.named_modules()) {
      const auto params = m->named_parameters(/*recurse=*/false);
      if (std::none_of(params.begin(), params.end(), [](const auto& p) { return p.second.dim() >= 2; })) continue;
      // The first such layer that reads numbers; an embedding reads indices (codes stored among the
      // float features and cast in forward), which no scale concerns.
      hooks.pre(m, [&seen, &indices](nn::Module&, const Tensor& in) {
        if (!in.defined()) return;
        if (!in.is_floating_point())
          indices = true;
        else if (!seen.defined())
          seen = in.detach().clone();
      });
    }
    NoGradGuard ng;
    try {
      model(x);
    } catch (const std::exception&) {
      return;  // the gate reports a forward that fails
    }
  }
  if (!seen.defined() && indices) {
    // No layer reads the inputs as numbers: every one is cast to an index first.
    for (size_t i = 0; i < found.size(); ++i) {
      if (!of_scale(found.findings()[i])) continue;
      Finding g = found.findings()[i];
      g.severity = Severity::Info;
      g.title += ", but the model casts them to indices for its embeddings: no layer reads them as numbers";
      g.cause = "the inputs are ids or category codes stored as floats, which the forward casts to integers";
      g.fix = "none needed";
      found.replace(i, g);
    }
    return;
  }
  if (!seen.defined() || !seen.is_floating_point() || seen.numel() == 0 || seen.dim() < 2) return;
  // The first layer's input, as the batch (rows first), judged by the same rules.
  const std::vector<Finding> inside = check_normalisation(seen.reshape({seen.size(0), -1}).cpu(), opts);
  for (size_t i = 0; i < found.size(); ++i) {
    const Finding& f = found.findings()[i];
    if (!of_scale(f) || std::any_of(inside.begin(), inside.end(),
                                    [&](const Finding& g) { return g.fires() && per_feature(g) == per_feature(f); }))
      continue;
    Finding g = f;
    g.severity = Severity::Info;
    g.title +=
        ", but the model scales them before its first layer (a division, a BatchNorm in front): that layer's "
        "input passes";
    g.cause = "the loader gives raw values and the model's forward scales them itself";
    g.fix = "none needed";
    found.replace(i, g);
  }
}

// ---- D5 during training: every training row (the monitor's run check) --------------------------
namespace {
class RowRangeRunCheck final : public RunCheck {
 public:
  explicit RowRangeRunCheck(const DataCheckOptions& o) : rows_(o) {}
  std::string ids() const override { return "D5"; }
  uint32_t events() const override { return RunEvent::Forward | RunEvent::Epoch | RunEvent::Finish; }
  void forward(RunContext& c, const Tensor& x) override {
    // Every training forward's batch (several per step when the loop accumulates gradients).
    if (GradMode::is_enabled() && x.defined()) rows_.record(x, c.steps + 1);
  }
  void epoch(RunContext&, const EpochRecord&) override { rows_.end_epoch(); }
  void finish(RunContext& c) override {
    c.add_all(rows_.findings());
    if (rows_.rows_seen() > 0) c.note_ran("D5");
  }

 private:
  RowRangeTracker rows_;
};
}  // namespace

std::unique_ptr<RunCheck> make_row_range_run_check(const MonitorOptions& o) {
  return std::make_unique<RowRangeRunCheck>(o.data);
}

// ---- D5 during training: features the pipeline flattened, against the fitted Normalizer ---------
namespace {
class FlatFeatureRunCheck final : public RunCheck {
 public:
  explicit FlatFeatureRunCheck(const MonitorOptions& o) : norm_(o.normalizer), o_(o.data) {}
  std::string ids() const override { return "D5"; }
  uint32_t events() const override {
    return norm_ && norm_->fitted() && norm_->mode() == nn::Normalizer::Mode::PerFeature
               ? RunEvent::Forward | RunEvent::Finish
               : 0u;
  }
  void forward(RunContext&, const Tensor& x) override {
    if (!GradMode::is_enabled() || !x.defined() || x.dim() != 2 || !x.is_floating_point() || x.size(0) == 0) return;
    const int64_t F = x.size(1);
    if (lo_.empty()) {
      if (norm_->mean().numel() != F) return;
      lo_.assign(static_cast<size_t>(F), std::numeric_limits<double>::infinity());
      hi_.assign(static_cast<size_t>(F), -std::numeric_limits<double>::infinity());
    }
    if (static_cast<int64_t>(lo_.size()) != F) return;
    NoGradGuard ng;
    const std::vector<double> a = amin(x.detach(), {0}).to(kFloat64).cpu().to_vector<double>();
    const std::vector<double> b = amax(x.detach(), {0}).to(kFloat64).cpu().to_vector<double>();
    for (size_t k = 0; k < lo_.size(); ++k) lo_[k] = std::min(lo_[k], a[k]), hi_[k] = std::max(hi_[k], b[k]);
    rows_ += x.size(0);
  }
  void finish(RunContext& c) override {
    if (rows_ < o_.flat_min_rows || lo_.empty()) return;
    c.note_ran("D5");
    const std::vector<double> sd = norm_->std().to(kFloat64).cpu().contiguous().reshape({-1}).to_vector<double>();
    std::vector<std::string> flat;
    double far = 0;
    for (size_t k = 0; k < lo_.size() && k < sd.size(); ++k)
      if (lo_[k] == hi_[k] && sd[k] > 1e-8 && std::fabs(lo_[k]) >= o_.flat_far) {
        flat.push_back(num(static_cast<int64_t>(k)));
        far = std::max(far, std::fabs(lo_[k]));
      }
    if (flat.empty()) return;
    std::string list;
    for (size_t i = 0; i < flat.size() && i < 8; ++i) list += (i ? ", " : "") + flat[i];
    Finding f = make("D5", Severity::Warning,
                     num(static_cast<int64_t>(flat.size())) + " feature(s) (" + list +
                         ") hold one value in every training input, up to " + fmt_num(far) +
                         " standard deviations from the mean the Normalizer fitted, which saw them vary: the "
                         "pipeline flattened them");
    f.evidence = {{"training rows seen", static_cast<double>(rows_), ">= " + num(o_.flat_min_rows)},
                  {"features constant in every one of them", static_cast<double>(flat.size()),
                   "with a fitted std > 0 and the value >= " + fmt_num(o_.flat_far) + " of them from the mean warns"},
                  {"largest |value| in the Normalizer's units", far, ""}};
    f.cause =
        "a clip or a fill applied to the raw values before the normalisation (a +-3 outlier clip meant for "
        "standardised values, a fill with a sentinel): every raw value beyond the clip becomes one value, and "
        "the feature carries nothing";
    f.fix =
        "normalise first, then clip in standard deviations (clamp(norm.transform(x), -3, 3)); check a few "
        "transformed rows for columns that never change";
    c.add(f);
  }

 private:
  const nn::Normalizer* norm_;
  DataCheckOptions o_;
  std::vector<double> lo_, hi_;
  int64_t rows_ = 0;
};
}  // namespace

std::unique_ptr<RunCheck> make_flat_feature_run_check(const MonitorOptions& o) {
  return std::make_unique<FlatFeatureRunCheck>(o);
}

}  // namespace gradsleuth::debug
