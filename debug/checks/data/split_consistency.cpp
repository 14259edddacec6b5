// D10 the same preprocessing for every split (see data_checks.h).
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

namespace gradsleuth::debug {

using namespace data_detail;

// ---- D10 same preprocessing for every split ---------------------------------------------------

std::vector<Finding> check_split_consistency(const Tensor& train_x, const Tensor& other_x, const std::string& split,
                                             const DataCheckOptions& opts) {
  GS_CHECK(train_x.defined() && other_x.defined(), "check_split_consistency", "needs defined train and ", split,
           " inputs");
  const std::vector<double> va = doubles(train_x), vb = doubles(other_x);
  const Summary a = summarize(va), b = summarize(vb);
  if (a.finite() == 0 || b.finite() == 0) return {};
  // Robust location and spread: the median, and the width between the 5% and
  // 95% quantiles in units of a normal's std (3.29 of them). A few extreme values
  // (per-feature standardisation of a near-constant pixel gives z-scores in the
  // thousands) move the mean and std a lot and these hardly at all.
  auto finite_only = [](const std::vector<double>& v) {
    std::vector<double> o;
    o.reserve(v.size());
    for (double x : v)
      if (std::isfinite(x)) o.push_back(x);
    return o;
  };
  const std::vector<double> fa = finite_only(va), fb = finite_only(vb);
  auto spread = [](const std::vector<double>& v) { return (quantile(v, 0.95) - quantile(v, 0.05)) / 3.29; };
  const double scale = std::max(spread(fa), 1e-12);
  const double shift = std::fabs(quantile(fb, 0.5) - quantile(fa, 0.5)) / scale;
  const double ratio = std::max(spread(fb), 1e-12) / scale;
  const bool mean_off = shift > opts.max_mean_shift;
  const bool std_off = ratio > opts.max_std_ratio || ratio < 1.0 / opts.max_std_ratio;
  if (!mean_off && !std_off) return {};
  Finding f = make("D10", Severity::Warning,
                   "the " + split + " inputs do not look like train after preprocessing: mean " + fmt_num(b.mean) +
                       " vs " + fmt_num(a.mean) + ", std " + fmt_num(b.std) + " vs " + fmt_num(a.std));
  f.shape = "train " + shape_str(train_x.shape()) + ", " + split + " " + shape_str(other_x.shape());
  f.evidence = {{"train mean", a.mean, ""},
                {split + " mean", b.mean, ""},
                {"train std", a.std, ""},
                {split + " std", b.std, ""},
                {"mean shift (in train stds)", shift,
                 "the medians' distance in robust train stds; > " + fmt_num(opts.max_mean_shift) + " warns"},
                {"std ratio (" + split + " / train)", ratio,
                 "of the 5%-95% quantile widths; outside [" + fmt_num(1.0 / opts.max_std_ratio) + ", " +
                     fmt_num(opts.max_std_ratio) + "] warns"}};
  f.cause = "the splits went through different preprocessing: train was scaled/standardised and " + split +
            " was not (or was scaled twice, or with its own statistics), or the " + split +
            " data comes from a different source; the model sees inputs unlike anything it trained on";
  f.fix =
      "apply one pipeline to every split: fit the transform on train (norm.fit(train_x, \"train\")) and call "
      "norm.transform(...) on train, val and test alike";
  return {f};
}

}  // namespace gradsleuth::debug
