// D15 label drift: the classes of two splits (new classes, shifted frequencies), and one regression
// target per row (its distribution) (see data_checks.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "debug/checks/check_util.h"
#include "debug/checks/data/data_checks.h"
#include "debug/checks/data/data_util.h"

namespace gradsleuth::debug::data_detail {

// The two-sample Kolmogorov-Smirnov statistic: the largest distance between the empirical
// CDFs of a and b (non-finite values left out; D2 reports them). NaN when either is empty.
double ks_statistic(std::vector<double> a, std::vector<double> b) {
  auto finite = [](std::vector<double>& v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
    std::sort(v.begin(), v.end());
  };
  finite(a);
  finite(b);
  if (a.empty() || b.empty()) return kNaN;
  const double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size());
  size_t i = 0, j = 0;
  double d = 0.0;
  while (i < a.size() && j < b.size()) {
    const double v = std::min(a[i], b[j]);
    while (i < a.size() && a[i] <= v) ++i;
    while (j < b.size() && b[j] <= v) ++j;
    d = std::max(d, std::fabs(static_cast<double>(i) / na - static_cast<double>(j) / nb));
  }
  return d;
}

// The standard-normal z of a chi-square statistic x with k degrees of freedom (the Wilson-Hilferty
// cube-root approximation, within 0.05 of the exact quantile's z from k = 1 on at the tail's z of 3-6).
double chi_square_z(double x, double k) {
  if (!(k > 0) || !(x >= 0)) return 0.0;
  const double v = 2.0 / (9.0 * k);
  return (std::cbrt(x / k) - (1.0 - v)) / std::sqrt(v);
}

namespace {

// One float target per row in both splits: the two samples' Kolmogorov-Smirnov distance. A target
// transformed on one split's path only (log1p for training, raw values for validation), another
// column read as the target, or targets in other units leave the two distributions apart.
std::vector<Finding> target_drift(const SplitSample& train, const SplitSample& other, const std::string& split,
                                  const DataCheckOptions& opts) {
  if (train.classes != other.classes || train.label_values != 1 || other.label_values != 1 ||
      train.read() < opts.min_drift_examples || other.read() < opts.min_drift_examples)
    return {};
  std::vector<double> a, b;
  for (const Label& l : train.y) a.push_back(l.value);
  for (const Label& l : other.y) b.push_back(l.value);
  const double ks = ks_statistic(a, b);
  if (!(ks > opts.max_target_ks)) return {};
  auto middle = [](std::vector<double> v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
    if (v.empty()) return kNaN;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  const double ma = middle(a), mb = middle(b);
  Finding f = make("D15", Severity::Warning,
                   "the " + split + " targets are distributed unlike the training targets: median " + fmt_num(mb) +
                       " against " + fmt_num(ma) + " (KS " + fmt_num(ks) + ")" + train.partial());
  f.kind = Kind::TargetDrift;
  f.evidence = {
      {"KS statistic of the targets, train against " + split, ks, "> " + fmt_num(opts.max_target_ks) + " warns"},
      {"median training target", ma, ""},
      {"median " + split + " target", mb, ""},
      {"training targets", static_cast<double>(a.size()), ""},
      {split + " targets", static_cast<double>(b.size()), ""}};
  f.cause =
      "the two splits' targets went through different code: a transform applied on one path only (log1p, "
      "standardisation or scaling for training, raw values for " +
      split +
      ", or the prediction never mapped back), another column read as the target, other units; or a split "
      "made along a sorted order (by time, by value) instead of at random";
  f.fix =
      "build every split's targets with the same function (fit any scaling on train, apply it to all), and "
      "invert the transform on the predictions before scoring; split at random when the targets must share "
      "a distribution";
  return {f};
}

}  // namespace

std::vector<Finding> label_drift(const SplitSample& train, const SplitSample& other, const std::string& split,
                                 const DataCheckOptions& opts) {
  if (train.read() == 0 || other.read() == 0) return {};
  if (!train.classes || !other.classes) return target_drift(train, other, split, opts);
  auto count = [&](const SplitSample& s) {
    std::map<int64_t, int64_t> c;
    for (const Label& l : s.y)
      if (l.value != static_cast<double>(opts.ignore_index)) ++c[static_cast<int64_t>(l.value)];
    return c;
  };
  const std::map<int64_t, int64_t> ct = count(train), co = count(other);
  std::vector<int64_t> fresh;
  int64_t fresh_rows = 0, shared_rows = 0, nt = 0;
  for (const auto& [c, k] : co) {
    if (ct.count(c))
      shared_rows += k;
    else {
      fresh.push_back(c);
      fresh_rows += k;
    }
  }
  for (const auto& [c, k] : ct) nt += k;
  std::vector<Finding> out;
  if (!fresh.empty()) {
    // Values in the outer 1% of train's on each side (past its 1st or 99th percentile), on a few rows,
    // beside many classes: the tail of a count or an ordinal target (a Poisson model's rare high counts,
    // which leave gaps among train's own largest values), not classes the splits fail to share.
    int64_t low = ct.begin()->first, high = ct.rbegin()->first, seen = 0;
    bool low_set = false;
    for (const auto& [c, k] : ct) {
      seen += k;
      if (!low_set && static_cast<double>(seen) >= 0.01 * static_cast<double>(nt)) low = c, low_set = true;
      if (static_cast<double>(seen) <= 0.99 * static_cast<double>(nt)) high = c;
    }
    const bool tail = static_cast<int64_t>(ct.size()) >= opts.count_target_classes &&
                      std::all_of(fresh.begin(), fresh.end(), [&](int64_t c) { return c > high || c < low; }) &&
                      static_cast<double>(fresh_rows) < opts.count_tail_share * static_cast<double>(other.read());
    Finding f = make(
        "D15", tail ? Severity::Info : Severity::Warning,
        num(static_cast<int64_t>(fresh.size())) +
            (fresh.size() == 1 ? " class of " + split + " never occurs" : " classes of " + split + " never occur") +
            " in train: class " + list_ints(fresh) + " (" + num(fresh_rows) + " of " + num(other.read()) + " " + split +
            " rows)" + train.partial());
    f.evidence = {
        {"new classes", static_cast<double>(fresh.size()),
         "any warns, but values past train's 1st or 99th percentile on under " + fmt_num(100 * opts.count_tail_share) +
             "% of the rows beside " + num(opts.count_target_classes) + "+ classes (a count's tail)"},
        {split + " rows with a new class", static_cast<double>(fresh_rows), ""},
        {"classes in train", static_cast<double>(ct.size()), ""},
        {"classes in " + split, static_cast<double>(co.size()), ""}};
    f.cause =
        "the splits do not share their classes: the training split was cut from data sorted by class (the "
        "first N rows hold only some classes), a class was filtered out of train, or the " +
        split +
        " labels use another numbering (1-indexed, another label map). The model never saw these classes, "
        "so every " +
        split + " example of them is misclassified";
    f.fix =
        "split at random after shuffling (nn::train_val_split) so every class is in both splits, and use one "
        "label map for all splits; if a class is really new, add training examples of it";
    out.push_back(f);
  }
  if (train.read() < opts.min_drift_examples || other.read() < opts.min_drift_examples || nt == 0 || shared_rows == 0)
    return out;
  // PSI over the classes train has (the new ones are reported above); a share of 0 counts as 1e-4.
  double psi = 0.0, tvd = 0.0, worst = -1.0, worst_t = 0.0, worst_o = 0.0;
  int64_t worst_c = -1;
  for (const auto& [c, k] : ct) {
    const double pt = static_cast<double>(k) / static_cast<double>(nt);
    const double po = static_cast<double>(co.count(c) ? co.at(c) : 0) / static_cast<double>(shared_rows);
    const double a = std::max(pt, 1e-4), b = std::max(po, 1e-4);
    psi += (b - a) * std::log(b / a);
    tvd += 0.5 * std::fabs(po - pt);
    if (std::fabs(po - pt) > worst) {
      worst = std::fabs(po - pt);
      worst_c = c;
      worst_t = pt;
      worst_o = po;
    }
  }
  // The PSI is Jeffreys' divergence of the two frequency vectors: n_eff x PSI (n_eff = nt no / (nt + no))
  // follows a chi-square of (classes - 1) degrees of freedom when both splits are drawn from one
  // population, so the shift's z (Wilson-Hilferty) says how far it stands out from the counts' noise.
  const double n_eff =
      static_cast<double>(nt) * static_cast<double>(shared_rows) / static_cast<double>(nt + shared_rows);
  const double z = chi_square_z(n_eff * psi, static_cast<double>(ct.size() - 1));
  const bool shifted = psi > opts.max_label_psi || (psi > opts.min_label_psi && z >= opts.min_label_psi_z);
  if (!shifted) return out;
  // Every training class equally often in the other split (within 5%), beside a training split whose
  // classes differ 2x or more: either a training split thinned unevenly (a filter, a lost share of some
  // classes) or a balanced evaluation of a long-tailed training set, as long-tail benchmarks are built.
  // The counts cannot tell the two apart: it warns, and says both.
  int64_t o_min = std::numeric_limits<int64_t>::max(), o_max = 0, t_min = std::numeric_limits<int64_t>::max(),
          t_max = 0;
  for (const auto& [c, k] : ct) {
    const int64_t o = co.count(c) ? co.at(c) : 0;
    o_min = std::min(o_min, o), o_max = std::max(o_max, o);
    t_min = std::min(t_min, k), t_max = std::max(t_max, k);
  }
  const bool balanced_eval = ct.size() >= 2 && o_min > 0 &&
                             static_cast<double>(o_max - o_min) <= std::max(1.0, 0.05 * static_cast<double>(o_max)) &&
                             t_max >= 2 * t_min;
  Finding f = make("D15", Severity::Warning,
                   "the class frequencies of " + split + " differ from train: PSI " + fmt_num(psi) + " (class " +
                       num(worst_c) + ": " + pct(worst_o) + " of " + split + " vs " + pct(worst_t) + " of train)" +
                       (balanced_eval ? ": " + split +
                                            " holds every class equally often, a balanced evaluation of "
                                            "an imbalanced training split"
                                      : std::string()));
  f.evidence = {{"population-stability index", psi,
                 "> " + fmt_num(opts.max_label_psi) + " warns; > " + fmt_num(opts.min_label_psi) + " and"},
                {"z of the shift against the counts' noise (chi-square, Wilson-Hilferty)", z,
                 ">= " + fmt_num(opts.min_label_psi_z) + " warns"},
                {"total-variation distance", tvd, ""},
                {"class " + num(worst_c) + " share in train", worst_t, ""},
                {"class " + num(worst_c) + " share in " + split, worst_o, ""},
                {"training labels counted", static_cast<double>(nt), ""},
                {split + " labels counted", static_cast<double>(shared_rows), ""}};
  f.cause =
      "the splits were not drawn from the same population: a split along a sorted order (by class, by "
      "time), a " +
      split +
      " set filtered or resampled differently, or class balancing applied to one "
      "split only. Accuracy on " +
      split +
      " then weighs the classes differently from training, and a "
      "model biased toward the training frequencies looks better or worse than it is";
  f.fix =
      "split at random, stratified by class (shuffle, then nn::train_val_split), and balance (reweight or "
      "resample) only the training loader; report per-class accuracy when the frequencies must differ";
  if (balanced_eval) {
    f.evidence.push_back({"largest / smallest class count in " + split,
                          static_cast<double>(o_max) / static_cast<double>(o_min), "within 5%: balanced"});
    f.evidence.push_back({"largest / smallest class count in train",
                          static_cast<double>(t_max) / static_cast<double>(t_min), "2 or more: imbalanced"});
    f.cause = "the " + split +
              " split holds every class equally often while the training classes differ in frequency: training "
              "examples of some classes lost on the way (a filter, a split that drops part of the data), or, by "
              "design, a long-tail benchmark that trains on the natural frequencies and scores every class alike";
    f.fix =
        "count each class before and after every filtering step of the training data; if the long tail is "
        "meant, nothing is wrong, and D3 says whether the rare classes are learnt";
  }
  out.push_back(f);
  return out;
}

}  // namespace gradsleuth::debug::data_detail

namespace gradsleuth::debug {

void revise_balanced_evaluation(Report& data) {
  bool compensated = false;  // D3's imbalance, judged compensated (its evidence says by what)
  double drawn = detail::kNaN;  // D3's imbalance ratio of the labels the training loader yields
  for (const Finding& f : data.findings())
    if (f.check == "D3")
      for (const Evidence& e : f.evidence) {
        if (e.name == "imbalance ratio (largest / smallest non-empty class)") drawn = e.value;
        if (f.fires()) continue;
        compensated = compensated ||
                      (e.name == "imbalance ratio of count x the loss's class weight" &&
                       e.rule.find("the loss compensates") != std::string::npos) ||
                      e.name.find("(trained model, validation)") != std::string::npos;
      }
  for (size_t i = 0; i < data.size(); ++i) {
    const Finding& g = data.findings()[i];
    const bool balanced = std::any_of(g.evidence.begin(), g.evidence.end(), [](const Evidence& e) {
      return e.name.rfind("largest / smallest class count in ", 0) == 0;
    });
    if (!g.fires() || g.check != "D15" || !balanced) continue;
    // A sampler that draws the classes more evenly than the split holds them (square-root or class-
    // balanced sampling): the loader's labels at half the split's imbalance or less.
    const double held = g.value_of("largest / smallest class count in train");
    const bool resampled = std::isfinite(drawn) && std::isfinite(held) && drawn <= 0.5 * held;
    if (!compensated && !resampled) continue;
    Finding f = g;
    f.severity = Severity::Info;
    f.title += resampled && !compensated
                   ? " (the training loader draws the classes " + fmt_num(drawn) + "x apart against the split's " +
                         fmt_num(held) + "x: a long tail rebalanced on purpose)"
                   : " (D3 finds the training imbalance compensated: a long tail trained on purpose)";
    f.fix = "none needed: report per-class accuracy alongside accuracy";
    data.replace(i, f);
  }
}

}  // namespace gradsleuth::debug
