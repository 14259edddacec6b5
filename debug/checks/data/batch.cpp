// D1 batch sanity report and D2 non-finite inputs (see data_checks.h).
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

// ---- D1 batch sanity report ------------------------------------------------------

std::vector<Finding> check_batch(const Tensor& x, const Tensor& y) {
  GS_CHECK(x.defined() && y.defined(), "check_batch", "needs a defined input x and target y");
  Finding f = make("D1", Severity::Info, "batch: x " + on_device(x) + ", y " + on_device(y));
  f.shape = "x " + shape_str(x.shape()) + ", y " + shape_str(y.shape());
  const Summary sx = summarize(doubles(x));
  f.evidence = {{"x min", sx.min, ""}, {"x max", sx.max, ""}, {"x mean", sx.mean, ""}, {"x std", sx.std, ""}};
  if (sx.nan + sx.inf > 0)
    f.evidence.push_back({"x non-finite values", static_cast<double>(sx.nan + sx.inf), "D2: any is an error"});
  if (is_integral(y.dtype(), true)) {
    std::vector<int64_t> v = y.to_vector<int64_t>();
    std::set<int64_t> distinct(v.begin(), v.end());
    f.evidence.push_back({"y min", v.empty() ? kNaN : static_cast<double>(*distinct.begin()), ""});
    f.evidence.push_back({"y max", v.empty() ? kNaN : static_cast<double>(*distinct.rbegin()), ""});
    f.evidence.push_back({"y distinct values", static_cast<double>(distinct.size()), ""});
  } else {
    const Summary sy = summarize(doubles(y));
    f.evidence.push_back({"y min", sy.min, ""});
    f.evidence.push_back({"y max", sy.max, ""});
    f.evidence.push_back({"y mean", sy.mean, ""});
    f.evidence.push_back({"y std", sy.std, ""});
  }
  f.fix =
      "compare with what the model expects: x scaled to [0, 1] or mean ~0 / std ~1 (D5), class labels int64 "
      "in [0, C) (D9), regression targets the shape of the prediction (D6)";
  std::vector<Finding> out{f};
  if (x.dim() >= 1 && y.dim() >= 1 && x.size(0) != y.size(0)) {
    Finding g = make("D1", Severity::Error,
                     "x has " + num(x.size(0)) + " rows but y has " + num(y.size(0)) + ": inputs and targets disagree");
    g.shape = f.shape;
    g.evidence = {{"x rows", static_cast<double>(x.size(0)), "must equal y rows"},
                  {"y rows", static_cast<double>(y.size(0)), ""}};
    g.cause = "x and y were built or sliced separately (a different subset, a dropped row, a batch dim lost)";
    g.fix = "build both from the same row indices (nn::TensorDataset checks this) and check their dim 0";
    out.push_back(g);
  }
  return out;
}

// ---- D2 non-finite inputs ----------------------------------------------------------

std::vector<Finding> check_finite_inputs(const Tensor& x, const Tensor& y) {
  GS_CHECK(x.defined() && y.defined(), "check_finite_inputs", "needs a defined input x and target y");
  std::vector<Finding> out;
  auto one = [&](const Tensor& t, const std::string& which) {
    if (!t.is_floating_point()) return;  // integers and bools are always finite
    const std::vector<double> v = doubles(t);
    int64_t nan = 0, inf = 0, first = -1;
    std::set<int64_t> rows;
    const int64_t B = t.dim() == 0 ? 1 : t.size(0);
    const int64_t F = B > 0 ? static_cast<int64_t>(v.size()) / B : 1;
    for (size_t i = 0; i < v.size(); ++i) {
      if (std::isfinite(v[i])) continue;
      (std::isnan(v[i]) ? nan : inf) += 1;
      rows.insert(static_cast<int64_t>(i) / std::max<int64_t>(F, 1));
      if (first < 0) first = static_cast<int64_t>(i) / std::max<int64_t>(F, 1);
    }
    if (nan + inf == 0) return;
    Finding f = make("D2", Severity::Error,
                     which + " holds " + num(nan) + " NaN and " + num(inf) + " Inf values (in " +
                         num(static_cast<int64_t>(rows.size())) + " of " + num(B) + " rows)");
    f.nonfinite = true;
    f.shape = t.str();
    f.evidence = {{"NaN values", static_cast<double>(nan), "any is an error"},
                  {"Inf values", static_cast<double>(inf), "any is an error"},
                  {"rows affected", static_cast<double>(rows.size()), ""},
                  {"first bad row", static_cast<double>(first), ""}};
    f.cause =
        "missing values in the source (empty cells read as NaN), a division by zero or log(0) in "
        "preprocessing (standardising a constant feature with std 0), or an overflow; one NaN input turns "
        "the loss, then every gradient and weight, into NaN";
    f.fix = "look at the bad rows (first: row " + num(first) +
            "), then drop, impute or fix them at the source; guard divisions in preprocessing with an eps; call "
            "debug::require_finite_inputs(x, y) in the data pipeline so it fails where the values appear";
    out.push_back(f);
  };
  one(x, "inputs x");
  one(y, "targets y");
  return out;
}

void require_finite_inputs(const Tensor& x, const Tensor& y) {
  const std::vector<Finding> fs = check_finite_inputs(x, y);
  if (fs.empty()) return;
  std::string msg = "the batch holds non-finite values; stopping before they reach the model";
  for (const Finding& f : fs) msg += "\n" + f.str();
  throw Error("require_finite_inputs", msg);
}

}  // namespace gradsleuth::debug
