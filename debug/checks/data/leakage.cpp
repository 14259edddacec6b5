// D7 data leakage: what a Normalizer was fitted on (see data_checks.h).
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

// ---- D7 data leakage ------------------------------------------------------------------------

std::vector<Finding> check_leakage(const nn::Normalizer& norm, int64_t train_size, int64_t values_per_example) {
  std::vector<Finding> out;
  if (!norm.fitted()) return out;
  std::vector<std::string> other;
  std::string all;
  for (const std::string& s : norm.fitted_on()) {
    all += (all.empty() ? "" : ", ") + s;
    if (s.rfind("train", 0) != 0) other.push_back(s);
  }
  const bool global = norm.mode() == nn::Normalizer::Mode::Global;
  const int64_t rows = !global ? norm.count() : values_per_example > 0 ? norm.count() / values_per_example : -1;
  const std::string fix =
      "fit the statistics on the training split only (norm.fit(train_x, \"train\")), then "
      "transform train, val and test with them; split the data before any fitting";
  if (!other.empty()) {
    std::string names;
    for (size_t i = 0; i < other.size(); ++i) names += (i ? ", " : "") + other[i];
    Finding f = make("D7", Severity::Error,
                     "normalisation statistics were fitted on " + names + " data (fitted_on = " + all + ")");
    f.evidence = {{"splits fitted on", static_cast<double>(norm.fitted_on().size()), "only \"train\" is allowed"},
                  {global ? "values fitted" : "rows fitted", static_cast<double>(norm.count()), ""}};
    if (train_size >= 0) f.evidence.push_back({"training rows", static_cast<double>(train_size), ""});
    f.cause = "the scaler was fitted on train + " + names +
              " (or on the whole dataset before splitting): "
              "statistics of the evaluation data leak into training, so validation/test scores are optimistic "
              "and will not hold on new data";
    f.fix = fix;
    out.push_back(f);
  }
  if (train_size >= 0 && rows > train_size) {
    Finding f = make(
        "D7", Severity::Error,
        "normalisation statistics were fitted on " + num(rows) + " rows but the training split has " + num(train_size));
    f.evidence = {{"rows fitted", static_cast<double>(rows), "> training rows is an error"},
                  {"training rows", static_cast<double>(train_size), ""}};
    f.cause =
        "the statistics include rows from outside the training split (fitted on the full dataset and "
        "labelled \"train\", or partial_fit called on more data than train)";
    f.fix = fix;
    out.push_back(f);
  }
  return out;
}

std::vector<Finding> check_leakage(const nn::Normalizer& norm, const nn::Dataset& train) {
  const int64_t per = train.size() > 0 ? train.get(0).x.numel() : -1;
  return check_leakage(norm, train.size(), per);
}

}  // namespace gradsleuth::debug
