// D7 data leakage: what a Normalizer was fitted on, and a feature that copies the label (see
// data_checks.h).
#include "debug/checks/data/data_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <unordered_map>

#include "core/autograd.h"
#include "core/format.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/data/data_util.h"
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

using namespace data_detail;

// ---- D7 data leakage ------------------------------------------------------------------------

std::vector<Finding> check_leakage(const nn::Normalizer& norm, int64_t train_size, int64_t values_per_example,
                                   int64_t held_out_size, const std::vector<int64_t>& source_sizes) {
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
    f.kind = Kind::NormalizerLeak;
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
    // How many more rows: exactly the labelled splits together, or a dataset the training split was
    // cut from, is the data before splitting; up to 2x the labelled rows, that data with a test split
    // the check does not see; far beyond, a corpus of its own (the images a backbone was pretrained on).
    const int64_t labelled = train_size + std::max<int64_t>(held_out_size, 0);
    const bool source = std::find(source_sizes.begin(), source_sizes.end(), rows) != source_sizes.end();
    const bool exact = (held_out_size > 0 && rows == labelled) || source;
    const bool near = rows <= 2 * labelled;
    const Severity sev = !other.empty() || exact ? Severity::Error : near ? Severity::Warning : Severity::Info;
    Finding f = make("D7", sev,
                     "normalisation statistics were fitted on " + num(rows) + " rows but the training split has " +
                         num(train_size) +
                         (sev == Severity::Info
                              ? " (a corpus " + fmt_num(static_cast<double>(rows) / static_cast<double>(labelled)) +
                                    "x the labelled rows: fine where it holds no validation or test rows)"
                              : ""));
    f.kind = Kind::NormalizerLeak;
    f.evidence = {{"rows fitted", static_cast<double>(rows),
                   "> training rows: an error where it is the splits together or the dataset they were cut from, "
                   "a warning up to 2x the labelled rows, info beyond"},
                  {"training rows", static_cast<double>(train_size), ""}};
    if (held_out_size > 0) f.evidence.push_back({"validation rows", static_cast<double>(held_out_size), ""});
    if (source)
      f.evidence.push_back({"rows of a dataset the training split was cut from", static_cast<double>(rows), ""});
    if (sev == Severity::Info) {
      f.cause = "";
      f.fix = "none needed if the corpus is separate from the validation and test data; otherwise " + fix;
    } else {
      f.cause =
          "the statistics include rows from outside the training split (fitted on the full dataset and "
          "labelled \"train\", or partial_fit called on more data than train)";
      f.fix = fix;
    }
    out.push_back(f);
  }
  return out;
}

std::vector<Finding> check_leakage(const nn::Normalizer& norm, const nn::Dataset& train, const nn::Dataset* val) {
  const int64_t per = train.size() > 0 ? train.get(0).x.numel() : -1;
  // The datasets the split was cut from (train_val_split, take: Subsets of Subsets).
  std::vector<int64_t> sources;
  const nn::Dataset* d = &train;
  while (const auto* s = dynamic_cast<const nn::Subset*>(d)) {
    if (!s->base()) break;
    d = s->base().get();
    sources.push_back(d->size());
  }
  return check_leakage(norm, train.size(), per, val ? val->size() : 0, sources);
}

// ---- D7 target leakage --------------------------------------------------------------------------

std::vector<Finding> check_target_leakage(const SplitSample& train, const DataCheckOptions& opts) {
  const int64_t n = train.read(), F = train.features;
  // Integer inputs are ids for an embedding (tokens, categories): one of them deciding the class is a
  // task of its own (a keyword), not a leak.
  if (!train.tabular || !train.float_inputs || F < 1 || n < opts.leak_min_rows ||
      static_cast<int64_t>(train.columns.size()) != n * F)
    return {};
  auto column = [&](int64_t j) {
    std::vector<double> c(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) c[i] = train.columns[i * F + j];
    return c;
  };
  std::vector<double> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[i] = train.y[i].value;
  std::set<double> classes(y.begin(), y.end());
  if (classes.size() < 2 || std::any_of(y.begin(), y.end(), [](double v) { return !std::isfinite(v); })) return {};
  // One target per row (regression): the feature is the target up to a scale and a shift, exactly (a
  // model with other inputs: with one feature, that feature is the task). Targets of several values are
  // left out: an autoencoder's targets are its inputs.
  if (!train.classes && (F < 2 || train.label_values != 1)) return {};
  const auto [my, vy] = detail::mean_and_variance(y);
  for (int64_t j = 0; j < F; ++j) {
    const std::vector<double> c = column(j);
    if (std::any_of(c.begin(), c.end(), [](double v) { return !std::isfinite(v); })) continue;
    Finding f;
    if (train.classes) {
      // Class indices: the feature takes one value per class (a recoding of the label), each repeated
      // (on opts.leak_rows_per_value rows on average). A feature with more values than classes that
      // still separates them (Iris's petal width, setosa against versicolor) is a feature, not a copy.
      std::map<double, double> class_of;
      bool pure = true;
      for (int64_t i = 0; i < n && pure; ++i) {
        auto [it, fresh] = class_of.try_emplace(c[i], y[i]);
        pure = fresh || it->second == y[i];
      }
      const auto values = static_cast<int64_t>(class_of.size());
      if (pure && values == static_cast<int64_t>(classes.size()) && values * opts.leak_rows_per_value <= n) {
        f = make("D7", Severity::Warning,
                 "input feature " + num(j) + " is the label recoded: each of its " + num(values) +
                     " values belongs to one class, and each class has one value");
        f.evidence = {{"feature", static_cast<double>(j), ""},
                      {"distinct values of the feature", static_cast<double>(values),
                       "one per class, each on one class only, warns"},
                      {"classes", static_cast<double>(classes.size()), ""},
                      {"training rows read", static_cast<double>(n), ""}};
      } else {
        // The label with noise added (class id + 0.05 noise): each class's values in an interval of
        // their own, the intervals apart by several within-class standard deviations.
        struct Range {
          double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
          double sum = 0, sq = 0;
          int64_t rows = 0;
        };
        std::map<double, Range> by_class;
        for (int64_t i = 0; i < n; ++i) {
          Range& r = by_class[y[i]];
          r.lo = std::min(r.lo, c[i]);
          r.hi = std::max(r.hi, c[i]);
          r.sum += c[i];
          r.sq += c[i] * c[i];
          ++r.rows;
        }
        std::vector<Range> ranges;
        double spread = 0;
        bool enough = true;
        for (auto& [cls, r] : by_class) {
          enough = enough && r.rows >= opts.leak_rows_per_value;
          const double mean = r.sum / static_cast<double>(r.rows);
          spread = std::max(spread, std::sqrt(std::max(0.0, r.sq / static_cast<double>(r.rows) - mean * mean)));
          ranges.push_back(r);
        }
        if (!enough) continue;
        std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.lo < b.lo; });
        double gap = std::numeric_limits<double>::infinity();
        for (size_t k = 1; k < ranges.size(); ++k) gap = std::min(gap, ranges[k].lo - ranges[k - 1].hi);
        if (!(gap > 0 && spread > 0 && gap >= opts.leak_gap_spread * spread)) continue;
        f = make("D7", Severity::Warning,
                 "input feature " + num(j) + " separates the " + num(static_cast<int64_t>(ranges.size())) +
                     " classes by itself: each class's values lie in an interval of their own, apart from the next "
                     "by " +
                     str_printf("%.3g", gap / spread) + "x their spread (the label with noise added)");
        f.evidence = {{"feature", static_cast<double>(j), ""},
                      {"smallest gap between classes' intervals", gap, ""},
                      {"largest within-class standard deviation", spread, ""},
                      {"gap / spread", gap / spread, ">= " + str_printf("%g", opts.leak_gap_spread) + " warns"},
                      {"classes", static_cast<double>(ranges.size()), ""},
                      {"training rows read", static_cast<double>(n), ""}};
      }
    } else {
      const auto [mc, vc] = detail::mean_and_variance(c);
      if (!(vc > 0 && vy > 0)) continue;
      double cov = 0;
      for (int64_t i = 0; i < n; ++i) cov += (c[i] - mc) * (y[i] - my);
      cov /= static_cast<double>(n - 1);  // as the variances: unbiased
      const double a = cov / vc, shift = my - a * mc;
      double worst = 0;
      for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(y[i] - (a * c[i] + shift)));
      if (worst > opts.leak_residual * std::sqrt(vy)) continue;
      f = make("D7", Severity::Warning,
               "input feature " + num(j) + " is the target itself, up to a scale and a shift (target = " +
                   str_printf("%.4g", a) + " x feature + " + str_printf("%.4g", shift) + ")");
      f.evidence = {{"feature", static_cast<double>(j), ""},
                    {"largest |target - (a x feature + b)| / target std", worst / std::sqrt(vy),
                     "<= " + str_printf("%g", opts.leak_residual) + " warns"},
                    {"training rows read", static_cast<double>(n), ""}};
    }
    f.kind = Kind::TargetLeakage;
    f.cause =
        "the feature was computed from the label (target leakage: a column derived from the outcome, an ID or "
        "date that encodes it, the label appended to the inputs): training and validation scores look perfect and "
        "mean nothing, because the feature will not exist, or will not hold the label, on new data";
    f.fix =
        "drop the feature, or rebuild it only from what is known before the label is (and check every "
        "preprocessing step that touches both); if the task really is this simple, a model is not needed";
    return {f};
  }
  return {};
}

// ---- D7 over the run: class targets that are the model's input ---------------------------------
namespace {
// On the sampled steps, class targets shaped as the model's integer input (token ids, (B, T)) compared
// position by position with it (targets equal to ignore_index left out): a next-token target that was
// not shifted is the input itself at every position, where a language model's is the input one step
// later (target[t] = input[t + 1]).
class TargetCopyRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "D7"; }
  uint32_t events() const override { return RunEvent::LossInput | RunEvent::Finish; }
  void loss_input(RunContext& c, nn::Loss& l, const Tensor& input, const Tensor& target) override {
    if (!c.sampled() || !c.x.defined() || !target.defined() || c.x.dtype() != kInt64 || target.dtype() != kInt64 ||
        c.x.shape() != target.shape() || target.dim() < 2 || target.numel() == 0 || input.dim() < 2)
      return;
    NoGradGuard ng;
    const std::vector<int64_t> x = c.x.detach().to(kCPU).contiguous().to_vector<int64_t>();
    const std::vector<int64_t> t = target.detach().to(kCPU).contiguous().to_vector<int64_t>();
    const bool masks = loss_type::cross_entropy(l) || loss_type::nll(l);
    const int64_t ignored = masks ? loss_type::ignore_index(l) : std::numeric_limits<int64_t>::min();
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i] == ignored) continue;
      ++counted_;
      equal_ += t[i] == x[i] ? 1 : 0;
      tokens_.insert(t[i]);
    }
    ++steps_;
    c.note_ran("D7");
  }
  void finish(RunContext& c) override {
    if (steps_ < 3 || counted_ == 0 || equal_ != counted_ || tokens_.size() < 2) return;
    Finding f = make("D7", Severity::Warning,
                     "every class target equals the model's input at its position (" + num(counted_) +
                         " positions over " + num(steps_) + " sampled steps): the targets are the inputs");
    f.kind = Kind::TargetLeakage;
    f.evidence = {
        {"target positions equal to the input at the same position", static_cast<double>(equal_), "all of them warns"},
        {"target positions compared (ignore_index left out)", static_cast<double>(counted_), ""},
        {"distinct target values", static_cast<double>(tokens_.size()), ">= 2"}};
    f.cause =
        "the targets were cut from the sequence at the same positions as the inputs: a next-token target "
        "not shifted (targets = x[:, :T] where x[:, 1:T + 1] was meant), so the model learns to copy the "
        "token it is given and predicts nothing";
    f.fix = "shift the targets one step: inputs = tokens[:, :-1], targets = tokens[:, 1:]";
    c.add(f);
  }

 private:
  int64_t steps_ = 0, counted_ = 0, equal_ = 0;
  std::set<int64_t> tokens_;
};
}  // namespace

std::unique_ptr<RunCheck> make_target_copy_run_check(const MonitorOptions&) {
  return std::make_unique<TargetCopyRunCheck>();
}

}  // namespace gradsleuth::debug
