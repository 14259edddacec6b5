// D10 during training, the monitor's run check on the inputs as the loop hands them to the model: the
// training forwards' against the evaluation forwards' (the loop's own validation, in eval mode or without
// gradients). A loop that transforms its training batches far more than its evaluation batches (a noise
// augmentation in the wrong units, a normalisation applied to one side only) trains the model on inputs
// unlike those it is scored on. split_consistency.cpp, D10's home, compares the loaders' splits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/data/data_checks.h"
#include "debug/checks/data/data_util.h"
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

namespace {

// The values of x as float64 on the CPU, one row per example (B, values per example); undefined where x is
// no batch of floating-point examples. Converted once per forward for both samples below.
Tensor rows_of(const Tensor& x) {
  if (!x.defined() || x.numel() == 0 || !is_floating(x.dtype())) return {};
  NoGradGuard ng;
  const int64_t b = x.dim() >= 1 ? x.size(0) : 1;
  return x.detach().reshape({b, x.numel() / b}).to(kCPU).to(kFloat64).contiguous();
}

// Up to `per_call` values of the rows, at positions spread by a multiplicative hash (not an even stride: a
// stride that shares a factor with an interleaved layout, values and markers at alternate positions,
// would read one of them only), appended to `out` while it holds fewer than `cap`.
void sample_into(const Tensor& rows, size_t per_call, size_t cap, std::vector<double>& out) {
  if (out.size() >= cap || !rows.defined()) return;
  const auto n = static_cast<uint64_t>(rows.numel());
  const double* p = rows.data_ptr<double>();
  const uint64_t take = std::min<uint64_t>(n, per_call);
  for (uint64_t k = 0; k < take && out.size() < cap; ++k) {
    const uint64_t i = n == take ? k : ((k + 1) * 0x9E3779B97F4A7C15ull) % n;
    if (std::isfinite(p[i])) out.push_back(p[i]);
  }
}

// Up to `per_call` whole rows (evenly spaced, from an offset that moves with each call so that an
// evaluation of the same batch every epoch gives other rows) appended to the sample, a row seen before
// (by a hash of its values) skipped, while they hold `width` values (2 at least) and number fewer than `cap`.
struct RowSample {
  std::vector<double> values;
  int64_t n = 0, calls = 0;
  std::set<uint64_t> seen;
};
void rows_into(const Tensor& rows, int64_t width, int64_t per_call, int64_t cap, RowSample& s) {
  if (s.n >= cap || !rows.defined() || rows.size(1) != width || width < 2) return;
  const double* p = rows.data_ptr<double>();
  const int64_t b = rows.size(0), w = width, take = std::min(b, per_call), stride = std::max<int64_t>(1, b / take);
  for (int64_t i = s.calls++ % stride; i < b && s.n < cap; i += stride) {
    uint64_t h = 1469598103934665603ull;
    for (int64_t j = 0; j < w; ++j) {
      uint64_t bits;
      std::memcpy(&bits, p + i * w + j, sizeof bits);
      h = (h ^ bits) * 1099511628211ull;
    }
    if (!s.seen.insert(h).second) continue;
    s.values.insert(s.values.end(), p + i * w, p + (i + 1) * w);
    ++s.n;
  }
}

// The features of `v` (rows x width) with the largest variance, up to k of them, widest first.
std::vector<int64_t> widest_features(const std::vector<double>& v, int64_t rows, int64_t width, int64_t k) {
  std::vector<std::pair<double, int64_t>> var;
  for (int64_t j = 0; j < width; ++j) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const double x = v[static_cast<size_t>(i * width + j)];
      s += x;
      s2 += x * x;
    }
    const double m = s / static_cast<double>(rows);
    var.emplace_back(s2 / static_cast<double>(rows) - m * m, j);
  }
  std::sort(var.begin(), var.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  std::vector<int64_t> out;
  for (size_t i = 0; i < var.size() && static_cast<int64_t>(out.size()) < k; ++i)
    if (var[i].first > 0) out.push_back(var[i].second);
  return out;
}

// The mean |Pearson correlation| over the pairs of `features` of the rows x width values v (NaN below 20
// rows or 2 features). Noise small beside the features' spread barely moves it; noise as large as it, or
// values replaced by noise (clamped into the inputs' range: salt and pepper), takes it toward 0.
double value_structure(const std::vector<double>& v, int64_t rows, int64_t width,
                       const std::vector<int64_t>& features) {
  if (rows < 20 || features.size() < 2) return std::numeric_limits<double>::quiet_NaN();
  std::vector<std::vector<double>> cols;
  for (int64_t j : features) {
    std::vector<double> c(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) c[static_cast<size_t>(i)] = v[static_cast<size_t>(i * width + j)];
    cols.push_back(std::move(c));
  }
  double total = 0;
  int64_t pairs = 0;
  for (size_t a = 0; a < cols.size(); ++a)
    for (size_t b = a + 1; b < cols.size(); ++b) {
      const double r = detail::pearson(cols[a], cols[b]);
      if (!std::isfinite(r)) continue;
      total += std::fabs(r);
      ++pairs;
    }
  return pairs > 0 ? total / static_cast<double>(pairs) : std::numeric_limits<double>::quiet_NaN();
}

class LoopInputsRunCheck final : public RunCheck {
 public:
  explicit LoopInputsRunCheck(const DataCheckOptions& o) : o_(o) {}
  std::string ids() const override { return "D10"; }
  uint32_t events() const override { return RunEvent::Forward | RunEvent::AfterStep | RunEvent::Finish; }
  // A step with two training forwards or more (two views of each example for a contrastive loss, R-Drop's
  // pair, a consistency loss) trains on its views by design: the run is not judged.
  void after_step(RunContext&, bool) override {
    views_ = std::max(views_, forwards_);
    forwards_ = 0;
  }
  void forward(RunContext& c, const Tensor& x) override {
    if (c.own_pass || c.replaying) return;
    const bool training = GradMode::is_enabled() && c.model.is_training();
    if (training) ++forwards_;
    // Evaluation inputs shaped as the training ones (each example as many values): the model called on
    // something else in eval mode (a latent, another task's input) is no evaluation of what it trains on.
    // The training forwards set the width from the first one with 2 dims or more.
    if (training && width_ == 0 && x.defined() && x.dim() >= 2 && x.size(0) > 0 && is_floating(x.dtype()))
      width_ = x.numel() / x.size(0);
    const bool alike = x.defined() && x.dim() >= 1 && x.size(0) > 0 && width_ > 0 && x.numel() / x.size(0) == width_;
    const bool evaluation = !training && c.steps > 0 && alike;
    if (!training && !evaluation) return;
    std::vector<double>& values = training ? train_ : eval_;
    RowSample& rows = training ? train_rows_ : eval_rows_;
    if (values.size() >= kCap && rows.n >= kRows) return;  // both samples full: nothing to convert
    const Tensor r = rows_of(x);
    sample_into(r, kPerCall, kCap, values);
    if (x.dim() >= 2) rows_into(r, width_, kRowsPerCall, kRows, rows);
  }
  void finish(RunContext& c) override {
    if (train_.size() < kMin || eval_.size() < kMin || views_ > 1) return;
    const data_detail::RobustQuantiles t = data_detail::robust_quantiles(train_),
                                       e = data_detail::robust_quantiles(eval_);
    if (!(e.spread() > 0) || !(t.spread() > 0)) return;
    const double ratio = t.spread() / e.spread(), shift = std::fabs(t.q50 - e.q50) / e.spread();
    const bool wide = ratio > o_.loop_input_spread_ratio || ratio < 1.0 / o_.loop_input_spread_ratio;
    // The correlations between features: noise in the training batches, even clamped back into the inputs'
    // range (salt and pepper), loses them where the evaluation batches keep them. Over the features that
    // vary most on the evaluation rows: a near-constant one (an image's border) is all noise once any is
    // added. As many rows of each (a mean |correlation| over n rows is biased up by about 1 / sqrt(n)), and the
    // evaluation's well above that bias: independent features (a tabular task) have no structure to lose.
    const int64_t n = std::min(train_rows_.n, eval_rows_.n);
    const std::vector<int64_t> feats =
        n >= 20 ? widest_features(eval_rows_.values, n, width_, o_.rank_features) : std::vector<int64_t>{};
    const double rt = value_structure(train_rows_.values, n, width_, feats);
    const double re = value_structure(eval_rows_.values, n, width_, feats);
    const double floor = std::max(o_.min_rank_structure, 4.0 / std::sqrt(static_cast<double>(std::max<int64_t>(n, 1))));
    const bool structure =
        std::isfinite(rt) && std::isfinite(re) && re >= floor && rt < o_.loop_rank_structure_ratio * re;
    if (!wide && !(shift > o_.loop_input_shift) && !structure) return;
    Finding f = detail::make(
        "D10", Severity::Warning,
        "the inputs the loop trains the model on are not like those it evaluates it on: " +
            (wide || shift > o_.loop_input_shift ? "their spread is " + fmt_num(ratio) + "x, their median " +
                                                       fmt_num(shift) + " evaluation spreads away"
                                                 : "the features' correlations are " + fmt_num(rt) + " against " +
                                                       fmt_num(re) + " (noise in the training batches)") +
            " (the loop transforms its training batches far more than its evaluation ones)");
    f.evidence = {{"training inputs' spread (5%-95% width / 3.29)", t.spread(), ""},
                  {"evaluation inputs' spread", e.spread(), ""},
                  {"spread ratio (training / evaluation)", ratio,
                   "outside [" + fmt_num(1.0 / o_.loop_input_spread_ratio) + ", " +
                       fmt_num(o_.loop_input_spread_ratio) + "] warns"},
                  {"training inputs' median", t.q50, ""},
                  {"evaluation inputs' median", e.q50, ""},
                  {"median shift (in evaluation spreads)", shift, "> " + fmt_num(o_.loop_input_shift) + " warns"},
                  {"values sampled (training, evaluation)", static_cast<double>(train_.size()),
                   std::to_string(eval_.size()) + " evaluation values"},
                  {"mean |correlation| between the widest features, training inputs", rt, ""},
                  {"the same, evaluation inputs", re,
                   "training below " + fmt_num(o_.loop_rank_structure_ratio) + "x evaluation's (at " + fmt_num(floor) +
                       " or more: 4 / sqrt(rows), 0.1 at least) warns"},
                  {"rows compared from each", static_cast<double>(n), ""}};
    f.cause =
        "the loop changes its training batches between the loader and the model in a way its evaluation does not: "
        "an augmentation far too strong (noise given in 0-255 units on inputs scaled to [0, 1], a scale or shift "
        "meant for other data), or a preprocessing step (a normalisation, a scaling) applied to the training "
        "batches only. The model learns inputs unlike those it is scored on";
    f.fix =
        "apply the same preprocessing to training and evaluation batches, and size an augmentation in the units of "
        "the inputs it is added to (a noise std well under the inputs' own)";
    c.add(std::move(f));
    c.note_ran("D10");
  }

 private:
  static constexpr size_t kPerCall = 512, kCap = 40000, kMin = 2000;
  static constexpr int64_t kRowsPerCall = 16, kRows = 600;
  DataCheckOptions o_;
  std::vector<double> train_, eval_;
  RowSample train_rows_, eval_rows_;
  int64_t width_ = 0;
  int64_t forwards_ = 0, views_ = 0;  // training forwards in this step, and the most in any step
};

}  // namespace

std::unique_ptr<RunCheck> make_loop_inputs_run_check(const MonitorOptions& o) {
  return std::make_unique<LoopInputsRunCheck>(o.data);
}

}  // namespace gradsleuth::debug
