// D3 label distribution: the class counts, and the trained model's per-class recall (see data_checks.h).
#include "debug/checks/data/data_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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

// ---- D3 label distribution -----------------------------------------------------------

std::vector<Finding> check_label_distribution(const Tensor& labels, int64_t num_classes, const DataCheckOptions& opts) {
  GS_CHECK(labels.defined(), "check_label_distribution", "needs a defined labels tensor");
  if (labels.is_floating_point()) {
    const std::vector<double> v = doubles(labels);
    if (!std::all_of(v.begin(), v.end(), is_whole)) return {};  // not class labels: D9 says so
  }
  const std::vector<int64_t> v = labels.to_vector<int64_t>();
  int64_t C = num_classes, outside = 0, n = 0;
  if (C <= 0) {
    C = 0;
    for (int64_t c : v)
      if (c >= 0) C = std::max(C, c + 1);
  }
  if (C <= 0) return {};
  std::vector<int64_t> counts(static_cast<size_t>(C), 0);
  for (int64_t c : v) {
    if (c == opts.ignore_index) continue;
    if (c < 0 || c >= C) {
      ++outside;
      continue;
    }
    ++counts[static_cast<size_t>(c)];
    ++n;
  }
  std::vector<int64_t> empty;
  int64_t lo = -1, hi = -1;  // the rarest non-empty and the most common class
  for (int64_t c = 0; c < C; ++c) {
    if (counts[c] == 0) {
      empty.push_back(c);
      continue;
    }
    if (lo < 0 || counts[c] < counts[lo]) lo = c;
    if (hi < 0 || counts[c] > counts[hi]) hi = c;
  }
  const double ratio = lo < 0 ? kNaN : static_cast<double>(counts[hi]) / static_cast<double>(counts[lo]);
  const bool imbalanced = lo >= 0 && ratio > opts.max_imbalance_ratio;

  Finding f = make("D3", Severity::Info, "");
  f.kind = Kind::ClassCounts;
  f.shape = labels.str();
  const bool all_listed = C <= 32;
  for (int64_t c = 0; c < C; ++c)
    if (all_listed || c == lo || c == hi) f.evidence.push_back({"class " + num(c), static_cast<double>(counts[c]), ""});
  f.evidence.push_back({"imbalance ratio (largest / smallest non-empty class)", ratio,
                        "> " + fmt_num(opts.max_imbalance_ratio) + " warns"});
  f.evidence.push_back({"classes with no example", static_cast<double>(empty.size()), "any warns"});
  if (outside > 0)
    f.evidence.push_back({"labels outside [0, " + num(C) + ")", static_cast<double>(outside), "D9 reports these"});
  if (empty.empty() && !imbalanced) {
    f.title = "class counts of " + num(n) + " labels over " + num(C) +
              " classes (largest / smallest = " + fmt_num(ratio) + ")";
    return {f};
  }
  f.severity = Severity::Warning;
  if (!empty.empty())
    f.title = num(static_cast<int64_t>(empty.size())) + " of " + num(C) + " classes have no example among " + num(n) +
              " labels (class " + list_ints(empty) + ")";
  else
    f.title = "classes are imbalanced: class " + num(hi) + " has " + num(counts[hi]) + " examples, class " + num(lo) +
              " only " + num(counts[lo]) + " (ratio " + fmt_num(ratio) + ")";
  f.cause =
      "the data is imbalanced (rare classes), or the labels come from a sorted dataset or a subset that "
      "misses classes (take(n) of sorted data, no shuffling); a model can score high accuracy by predicting "
      "the common classes only";
  if (outside > 0 && !empty.empty() && empty.front() == 0)
    f.cause += ". Here labels also fall outside [0, " + num(C) +
               ") while class 0 is empty: the labels may be "
               "1-indexed (see D9)";
  f.fix =
      "make sure the sample is representative (shuffle before taking a subset, split with "
      "nn::train_val_split); for real imbalance weight the loss by class, oversample the rare classes, and "
      "report per-class accuracy rather than accuracy alone";
  return {f};
}

std::vector<Finding> check_class_errors(const std::vector<int64_t>& examples, const std::vector<int64_t>& correct,
                                        const DataCheckOptions& opts, const std::vector<double>& first_recall) {
  GS_CHECK(examples.size() == correct.size(), "check_class_errors",
           "needs one count of right predictions per class, got ", correct.size(), " for ", examples.size(),
           " classes");
  const int64_t C = static_cast<int64_t>(examples.size());
  std::vector<double> recall(static_cast<size_t>(C), kNaN);
  std::vector<int64_t> judged;  // classes with enough examples
  for (int64_t c = 0; c < C; ++c) {
    if (examples[c] <= 0) continue;
    recall[c] = static_cast<double>(correct[c]) / static_cast<double>(examples[c]);
    if (examples[c] >= opts.min_class_examples) judged.push_back(c);
  }
  if (judged.size() < 2) return {};
  const double chance = 1.0 / static_cast<double>(C);
  double sum = 0.0;
  for (int64_t c : judged) sum += recall[c];
  std::vector<int64_t> failing;
  int64_t worst = judged.front(), best = judged.front();
  for (int64_t c : judged) {
    const double others = (sum - recall[c]) / static_cast<double>(judged.size() - 1);
    if (others > opts.min_recall_over_chance * chance && recall[c] < opts.min_recall_ratio * others)
      failing.push_back(c);
    if (recall[c] < recall[worst]) worst = c;
    if (recall[c] > recall[best]) best = c;
  }
  if (!failing.empty()) {
    worst = failing.front();
    for (int64_t c : failing)
      if (recall[c] < recall[worst]) worst = c;
  }
  // The worst class (the worst failing one when any fails) and the others' mean recall beside it.
  const double worst_others = (sum - recall[worst]) / static_cast<double>(judged.size() - 1);
  Finding f = make("D3", Severity::Info, "");
  f.kind = Kind::ClassRecallLow;
  const bool all_listed = C <= 32;
  for (int64_t c = 0; c < C; ++c)
    if (examples[c] > 0 && (all_listed || c == worst || c == best))
      f.evidence.push_back({"class " + num(c) + " recall (" + num(correct[c]) + " of " + num(examples[c]) + ")",
                            recall[c], examples[c] < opts.min_class_examples ? "too few examples to judge" : ""});
  f.evidence.push_back({"mean recall of the other classes (beside class " + num(worst) + ")", worst_others,
                        "above " + fmt_num(opts.min_recall_over_chance) + " x chance (" +
                            fmt_num(opts.min_recall_over_chance * chance) + ") to judge"});
  f.evidence.push_back({"class " + num(worst) + " recall / the others' mean", recall[worst] / worst_others,
                        "< " + fmt_num(opts.min_recall_ratio) + " warns"});
  if (failing.empty()) {
    f.title = "per-class recall on the validation data: lowest class " + num(worst) + " at " +
              fmt_num(100 * recall[worst]) + "%, highest class " + num(best) + " at " + fmt_num(100 * recall[best]) +
              "%";
    return {f};
  }
  // Still being learned: the class's recall rose over the run by class_recall_rise x (and by
  // class_recall_rise_min); it is the class the model confuses most, and learns last.
  const double start = static_cast<size_t>(worst) < first_recall.size() ? first_recall[worst] : kNaN;
  if (std::isfinite(start) && recall[worst] >= opts.class_recall_rise * start &&
      recall[worst] - start >= opts.class_recall_rise_min) {
    f.evidence.push_back({"class " + num(worst) + " recall after the first epoch", start,
                          "x " + fmt_num(opts.class_recall_rise) + " and + " + fmt_num(opts.class_recall_rise_min) +
                              " by the end: still being learned (info)"});
    f.title = "class " + num(worst) + " is still being learned: its recall on the validation data rose from " +
              fmt_num(100 * start) + "% after the first epoch to " + fmt_num(100 * recall[worst]) +
              "%, the other classes " + fmt_num(100 * worst_others) +
              "% on average (the class the model confuses most is learned last)";
    f.fix = "none needed for the run's correctness; train longer, and report per-class accuracy";
    return {f};
  }
  f.severity = Severity::Warning;
  f.title = "the trained model misses one class far more than the others: class " + num(worst) + " has a recall of " +
            fmt_num(100 * recall[worst]) + "% on the validation data, the other classes " +
            fmt_num(100 * worst_others) + "% on average" +
            (failing.size() > 1 ? " (classes far below the others' recall: " + list_ints(failing) + ")" : "");
  f.cause =
      "the model rarely predicts this class: it is rare in the training data (the loss gains little from it), "
      "its training labels are wrong or mapped to another class, or its examples look unlike the rest";
  f.fix =
      "compare the class counts of the training data (an imbalance shows in the class counts); weight the loss by "
      "class or oversample the rare classes; check the labels of this class; report per-class accuracy rather "
      "than accuracy alone";
  return {f};
}

}  // namespace gradsleuth::debug

namespace gradsleuth::debug {

void revise_unused_class_zero(Report& data) {
  for (size_t i = 0; i < data.size(); ++i) {
    const Finding& d = data.findings()[i];
    if (!d.fires() || !d.is("D3", Kind::ClassCounts)) continue;
    const double empty = d.value_of("classes with no example"), zero = d.value_of("class 0");
    if (!(empty >= 1.0)) continue;
    Finding f = d;
    f.severity = Severity::Info;
    f.title +=
        zero == 0.0 && empty == 1.0
            ? " (class 0 is one the targets do not use, such as a pad id: the model has an output for every label)"
            : " (a vocabulary the model's inputs share: ids that no target uses, as the pad id or tokens "
              "nothing precedes, are no missing class)";
    f.fix = "none needed: a class no target uses costs one output";
    data.replace(i, f);
  }
}

namespace {
// The counts a D3 class-counts finding lists, by class ("class 3" evidence; every class up to 32 classes).
std::map<int64_t, double> listed_counts(const Finding& d) {
  std::map<int64_t, double> counts;
  for (const Evidence& e : d.evidence)
    if (e.name.rfind("class ", 0) == 0 && e.name.find(' ', 6) == std::string::npos)
      counts[std::atoll(e.name.c_str() + 6)] = e.value;
  return counts;
}
}  // namespace

void revise_rare_class_recall(std::vector<Finding>& recall, const Report& data) {
  // The training counts, where the loss's class weights compensate them (weigh_class_counts made the finding info).
  std::map<int64_t, double> counts;
  for (const Finding& d : data.findings())
    if (d.is("D3", Kind::ClassCounts) && !d.fires() &&
        std::isfinite(d.value_of("imbalance ratio of count x the loss's class weight")))
      counts = listed_counts(d);
  if (counts.size() < 3) return;
  std::vector<double> sorted;
  for (const auto& [c, n] : counts) sorted.push_back(n);
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  for (Finding& f : recall) {
    if (!f.fires() || !f.is("D3", Kind::ClassRecallLow)) continue;
    long long worst = -1;
    for (const Evidence& e : f.evidence)
      if (e.name.find(" recall / the others' mean") != std::string::npos) worst = std::atoll(e.name.c_str() + 6);
    const auto it = counts.find(worst);
    // The class missed is the rarest in training, 10x below the median class, and the loss already lifts it.
    if (it == counts.end() || it->second != sorted.front() || !(10.0 * it->second <= median)) continue;
    f.severity = Severity::Info;
    f.title += "; it is the rarest class in training (" + num(static_cast<int64_t>(it->second)) +
               " examples, the median class " + num(static_cast<int64_t>(median)) +
               "), and the loss's class weights already lift it: too few examples, not a wrong weight";
    f.evidence.push_back({"its training examples / the median class's", it->second / median,
                          "<= 0.1 under compensating class weights: info"});
    f.fix = "more examples of this class (or augmentation of them); report per-class recall beside accuracy";
  }
}

void revise_class_imbalance(Report& data, const std::vector<Finding>& recall, const DataCheckOptions& o) {
  double even = kNaN;
  std::string worst;
  bool all_judged = true;  // a class with too few validation examples to judge leaves the imbalance open
  for (const Finding& f : recall) {
    if (!f.is("D3", Kind::ClassRecallLow) || f.fires()) continue;
    for (const Evidence& e : f.evidence) {
      if (e.name.find("recall / the others' mean") != std::string::npos) {
        even = e.value;
        worst = e.name.substr(0, e.name.find(" recall"));
      }
      if (e.rule.find("too few examples") != std::string::npos) all_judged = false;
    }
  }
  // Each class's validation recall and examples, from the (silent) recall finding.
  std::map<int64_t, std::pair<double, int64_t>> recall_of;
  for (const Finding& f : recall) {
    if (!f.is("D3", Kind::ClassRecallLow) || f.fires()) continue;
    for (const Evidence& e : f.evidence) {
      long long c = 0, hit = 0, rows = 0;
      if (std::sscanf(e.name.c_str(), "class %lld recall (%lld of %lld)", &c, &hit, &rows) == 3 && rows > 0)
        recall_of[c] = {e.value, rows};
    }
  }
  for (size_t i = 0; i < data.size(); ++i) {
    const Finding& d = data.findings()[i];
    if (!d.fires() || !d.is("D3", Kind::ClassCounts)) continue;
    if (d.value_of("classes with no example") > 0) continue;
    std::vector<std::pair<double, int64_t>> by_count;  // (training count, class)
    for (const auto& [c, n] : listed_counts(d)) by_count.emplace_back(n, c);
    // The rarest class recalled well below the others: the imbalance cost it, and the warning stays.
    if (!by_count.empty() && recall_of.size() >= 2) {
      const auto rarest = std::min_element(by_count.begin(), by_count.end());
      const auto it = recall_of.find(static_cast<int64_t>(rarest->second));
      double others = 0;
      for (const auto& [c, r] : recall_of)
        if (c != static_cast<int64_t>(rarest->second)) others += r.first / static_cast<double>(recall_of.size() - 1);
      if (it != recall_of.end() && it->second.second >= o.min_class_examples && others > 0) {
        const double se = std::sqrt(others * (1 - others) / static_cast<double>(it->second.second));
        const double ratio = it->second.first / others;
        if (ratio < o.imbalance_rarest_recall && others - it->second.first >= o.imbalance_rarest_z * se) {
          Finding f = d;
          f.evidence.push_back({"rarest class's recall / the others' mean (trained model, validation)", ratio,
                                "< " + fmt_num(o.imbalance_rarest_recall) + ", " + fmt_num(o.imbalance_rarest_z) +
                                    " standard errors below: the imbalance cost it (the warning stays)"});
          data.replace(i, f);
          continue;
        }
      }
    }
    Finding f = d;
    f.severity = Severity::Info;
    f.fix = "none needed: report per-class accuracy alongside accuracy";
    if (all_judged && even >= o.imbalance_recall_even) {
      f.title += " (the trained model recalls every class evenly: " + worst + ", the least recalled, at " +
                 fmt_num(even) + "x the others' mean)";
      f.evidence.push_back({"least recalled class's recall / the others' mean (trained model, validation)", even,
                            ">= " + fmt_num(o.imbalance_recall_even) + ": the imbalance did not cost it (info)"});
      data.replace(i, f);
      continue;
    }
    // Or the rarer half of the classes (by training count) recalled on average about as well as the
    // commoner half: the imbalance did not cost the rare classes, whatever one hard class does (Fashion-
    // MNIST's shirts sit far below the others in a balanced run too). Each rare class judged on enough
    // validation examples.
    std::sort(by_count.begin(), by_count.end());
    const size_t half = by_count.size() / 2;
    if (half < 2 || by_count.size() != recall_of.size()) continue;
    double rare = 0, common = 0;
    bool judged = true;
    for (size_t k = 0; k < by_count.size(); ++k) {
      const auto it = recall_of.find(static_cast<int64_t>(by_count[k].second));
      if (it == recall_of.end()) judged = false;
      if (!judged) break;
      if (k < half) {
        rare += it->second.first / static_cast<double>(half);
        judged = it->second.second >= o.min_class_examples;
      } else if (k >= by_count.size() - half) {
        common += it->second.first / static_cast<double>(half);
      }
    }
    if (!judged || !(common > 0) || !(rare >= o.imbalance_recall_even * common)) continue;
    f.title += " (the trained model recalls the rarer half of the classes about as well as the commoner half: " +
               fmt_num(100 * rare) + "% against " + fmt_num(100 * common) + "% on average)";
    f.evidence.push_back({"mean recall of the rarer half of the classes (trained model, validation)", rare, ""});
    f.evidence.push_back({"mean recall of the commoner half", common,
                          "rarer >= " + fmt_num(o.imbalance_recall_even) + " x this: the imbalance did not cost them"});
    data.replace(i, f);
  }
}

void weigh_class_counts(std::vector<Finding>& fs, const Tensor& class_weight, const DataCheckOptions& o) {
  if (!class_weight.defined()) return;
  const std::vector<double> wv = class_weight.detach().to(kCPU).to(kFloat64).contiguous().to_vector<double>();
  for (Finding& f : fs) {
    if (!f.is("D3", Kind::ClassCounts)) continue;
    double lo = std::numeric_limits<double>::infinity(), hi = 0.0;
    double count_lo = std::numeric_limits<double>::infinity(), count_hi = 0.0;
    bool empty = false;
    for (const Evidence& e : f.evidence) {
      if (e.name == "classes with no example" && e.value > 0) empty = true;
      if (e.name.rfind("class ", 0) != 0 || e.name.find(' ', 6) != std::string::npos) continue;
      const size_t c = static_cast<size_t>(std::atoll(e.name.c_str() + 6));
      if (c >= wv.size() || e.value <= 0) continue;
      lo = std::min(lo, e.value * wv[c]);
      hi = std::max(hi, e.value * wv[c]);
      count_lo = std::min(count_lo, e.value);
      count_hi = std::max(count_hi, e.value);
    }
    if (empty || !(hi > 0) || !(lo > 0) || !std::isfinite(lo) || !(count_lo > 0)) continue;
    const double ratio = hi / lo, counts = count_hi / count_lo;
    const double w_hi = *std::max_element(wv.begin(), wv.end()), w_lo = *std::min_element(wv.begin(), wv.end());
    // Weights that grow with the class counts: the loss sees a larger imbalance than the data has. Or
    // weights far from uniform (meant to rebalance) under which the classes weigh no closer than in the
    // data: computed from the counts in another order than the classes (sorted first, another split's).
    const bool grows = ratio > o.class_weight_amplifies * counts;
    const bool misaligned = ratio >= counts && w_lo > 0 && w_hi / w_lo >= o.class_weight_spread;
    if (ratio > o.max_imbalance_ratio && (grows || misaligned)) {
      f.severity = Severity::Warning;
      f.kind = Kind::ClassWeightsAmplify;
      f.title = grows ? "the loss's class weights grow with the class counts: with them the classes weigh " +
                            fmt_num(ratio) + "x apart in the loss, against " + fmt_num(counts) + "x in the data"
                      : "the loss's class weights do not follow the class counts: they differ " + fmt_num(w_hi / w_lo) +
                            "x between classes, yet with them the classes weigh " + fmt_num(ratio) +
                            "x apart in the loss, no closer than the " + fmt_num(counts) + "x of the data";
      f.evidence.push_back({"imbalance ratio of count x the loss's class weight", ratio,
                            "> " + fmt_num(o.max_imbalance_ratio) + " and > " + fmt_num(o.class_weight_amplifies) +
                                " x the counts' ratio warns"});
      f.cause = grows ? "class weights computed the wrong way round (count / N instead of N / (C x count)): meant to "
                        "lift the rare classes, they press them down further, and the model predicts the common classes"
                      : "class weights computed from the counts in another order than the classes (the counts sorted "
                        "first, or another split's class order): the large weights land on common classes, and the "
                        "rare ones stay as rare in the loss as in the data";
      if (!grows)
        f.evidence.push_back({"largest / smallest class weight", w_hi / w_lo,
                              ">= " + fmt_num(o.class_weight_spread) + ": meant to rebalance"});
      f.fix = "weigh class c by N / (C x count_c) (or 1 / count_c, normalised): each class then carries a similar mass";
      continue;
    }
    if (!f.fires()) continue;
    f.evidence.push_back({"imbalance ratio of count x the loss's class weight", ratio,
                          "<= " + fmt_num(o.max_imbalance_ratio) + ": the loss compensates"});
    if (ratio > o.max_imbalance_ratio) continue;
    f.severity = Severity::Info;
    f.title += ", compensated by the loss's class weights";
    f.fix = "none needed: each class carries a similar total weight in the loss";
  }
}

namespace data_detail {
std::set<int64_t> start_tokens(const nn::Dataset& data, int64_t rows) {
  const int64_t n = std::min<int64_t>(rows, data.size());
  if (n < 2) return {};
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
  const nn::Batch b = data.get_batch(idx);
  if (!b.x.defined() || !b.y.defined() || b.x.dim() != 2 || b.x.sizes() != b.y.sizes() || b.x.dtype() != kInt64 ||
      b.y.dtype() != kInt64 || b.x.size(1) < 2)
    return {};
  int64_t judged = 0;
  if (detail::next_step_share(b.x, b.y, judged) < detail::kNextStepShare || judged == 0) return {};
  const std::vector<int64_t> x = b.x.to(kCPU).contiguous().to_vector<int64_t>(),
                             y = b.y.to(kCPU).contiguous().to_vector<int64_t>();
  const int64_t T = b.x.size(1);
  std::set<int64_t> first, later, targets;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t t = 0; t < T; ++t) {
      (t == 0 ? first : later).insert(x[static_cast<size_t>(r * T + t)]);
      if (const int64_t yv = y[static_cast<size_t>(r * T + t)]; yv >= 0) targets.insert(yv);  // not padding
    }
  std::set<int64_t> out;
  for (int64_t v : first)
    if (!later.count(v) && !targets.count(v)) out.insert(v);
  return out;
}
}  // namespace data_detail

void revise_start_token_classes(std::vector<Finding>& fs, const nn::Dataset& data) {
  std::set<int64_t> start;
  bool read = false;
  for (Finding& f : fs) {
    if (!f.fires() || !f.is("D3", Kind::ClassCounts) || !(f.value_of("classes with no example") > 0)) continue;
    if (!read) start = data_detail::start_tokens(data), read = true;
    if (start.empty()) return;
    // Every empty class a start token, and no imbalance among the others: info.
    bool all_start = true;
    int64_t listed_empty = 0;  // every class is listed up to 32 classes
    for (const auto& [c, n] : listed_counts(f))
      if (n == 0.0) ++listed_empty, all_start = all_start && start.count(c) > 0;
    if (!all_start || static_cast<double>(listed_empty) != f.value_of("classes with no example") ||
        f.value_of("imbalance ratio (largest / smallest non-empty class)") > DataCheckOptions{}.max_imbalance_ratio)
      continue;
    f.severity = Severity::Info;
    f.title += ": a start token, which the inputs hold at their first step only and next-step targets never are";
    f.cause =
        "next-step prediction: the targets are the inputs one step on, so a token that only starts a sequence "
        "is never predicted";
    f.fix = "none needed";
  }
}

}  // namespace gradsleuth::debug
