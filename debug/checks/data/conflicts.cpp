// D12 duplicates and conflicting labels (see data_checks.h): inputs repeated byte for byte within
// one split, and two classes whose training rows are each other's nearest neighbours as often as
// their own while the held-out rows tell them apart.
#include "debug/checks/data/data_checks.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/data/data_util.h"

namespace gradsleuth::debug {

using namespace data_detail;

namespace {

// ---- D12: inputs repeated byte for byte -------------------------------------------------------

// One input that holds a single value everywhere (a row of padding ids, a blank image) and that
// kBlankShare of the rows or more share, with more than one label among them, in kMinBlankRows rows or
// more: a step of the pipeline emptied those rows (left-padded sequences cropped from the front, a
// vocabulary that sends every word to one id, a loader that returns zeros for files it cannot read).
// Healthy data repeats its blank input far less: a character model's empty context starts each word
// (1 row in 6-8), a game's empty board each game.
constexpr double kBlankShare = 0.3;
constexpr int64_t kMinBlankRows = 100;
// Inputs of whole numbers recur by nature where kRecurringShare of the copies or more sit in groups of three
// rows or more (a next-token model's six-token contexts: 9.3% of 60,000 rows repeat, 53% of the copies in
// groups of up to 15); rows appended twice, or again with another label, make pairs.
constexpr double kRecurringShare = 0.25;
// A continuous target's copies within its noise: their variance about each repeated input's mean at most
// kTargetNoiseShare of the targets' variance (ratings of a user, item and hour met again).
constexpr double kTargetNoiseShare = 0.5;

}  // namespace

namespace data_detail {
double oversampling_tilt(const SplitSample& s) {
  struct Input {
    int64_t count = 0;
    uint64_t label = 0;
  };
  std::unordered_map<uint64_t, Input> inputs;
  inputs.reserve(s.x.size());
  for (int64_t r = 0; r < s.read(); ++r) {
    Input& in = inputs[s.x[r]];
    if (in.count++ == 0) in.label = s.y[r].hash;
  }
  std::unordered_map<uint64_t, double> per_label;  // distinct inputs per label
  for (const auto& [h, in] : inputs) per_label[in.label] += 1.0;
  if (per_label.size() < 2) return kNaN;
  const double n = static_cast<double>(inputs.size());
  double copies = 0.0, copy_freq = 0.0, input_freq = 0.0;
  for (const auto& [h, in] : inputs) {
    const double p = per_label[in.label] / n;
    input_freq += p / n;
    copy_freq += static_cast<double>(in.count - 1) * p;
    copies += static_cast<double>(in.count - 1);
  }
  if (copies == 0.0 || !(input_freq > 0.0)) return kNaN;
  return copy_freq / copies / input_freq;
}
}  // namespace data_detail

namespace {

std::vector<Finding> duplicates(const SplitSample& s, const DataCheckOptions& opts) {
  struct Group {
    int64_t count = 0, first = -1, second = -1;
    std::vector<Label> labels;    // the distinct labels this input has
    std::vector<int64_t> copies;  // the rows with each of them
  };
  std::unordered_map<uint64_t, Group> groups;
  groups.reserve(s.x.size());
  for (int64_t r = 0; r < s.read(); ++r) {
    Group& g = groups[s.x[r]];
    if (++g.count == 1)
      g.first = r;
    else if (g.second < 0)
      g.second = r;
    const auto it =
        std::find_if(g.labels.begin(), g.labels.end(), [&](const Label& l) { return l.hash == s.y[r].hash; });
    if (it == g.labels.end()) {
      g.labels.push_back(s.y[r]);
      g.copies.push_back(1);
    } else {
      ++g.copies[static_cast<size_t>(it - g.labels.begin())];
    }
  }
  int64_t repeated = 0, conflicting = 0, conflict_inputs = 0, most = 0, majority = 0;
  const Group* dup_example = nullptr;
  const Group* conflict_example = nullptr;
  for (const auto& [h, g] : groups) {
    majority += *std::max_element(g.copies.begin(), g.copies.end());
    if (g.count < 2) continue;
    repeated += g.count - 1;
    most = std::max(most, g.count);
    if (!dup_example || g.first < dup_example->first) dup_example = &g;
    if (g.labels.size() < 2) continue;
    conflicting += g.count;
    ++conflict_inputs;
    if (!conflict_example || g.first < conflict_example->first) conflict_example = &g;
  }
  if (repeated == 0) return {};
  const double n = static_cast<double>(s.read());
  const double dup_frac = static_cast<double>(repeated) / n, conflict_frac = static_cast<double>(conflicting) / n;
  const bool too_many = dup_frac > opts.max_duplicate_fraction;
  const bool conflicts = conflict_frac > opts.max_conflict_fraction;
  // Whole-number inputs that repeat this often come from a small discrete set (token contexts, board
  // states, categories): there the same input recurs by nature, and with other outcomes where the
  // target is random given the input (the next token of a text). Info, with the accuracy the labels
  // allow (each input's most frequent label).
  const bool discrete = s.integral_inputs && dup_frac >= opts.discrete_duplicate_fraction;
  const double ceiling = static_cast<double>(majority) / n;
  auto labels_of = [](const Group& g) {
    std::string t;
    for (size_t k = 0; k < g.labels.size(); ++k) t += (k ? ", " : "") + fmt_num(g.labels[k].value);
    return t;
  };
  const Group& ex = conflict_example ? *conflict_example : *dup_example;
  const std::string example = "rows " + num(ex.first) + " and " + num(ex.second) + " hold the same input (" +
                              (ex.labels.size() > 1 ? "labels " : "label ") + labels_of(ex) + ")";
  // A few conflicts among inputs of whole numbers (token ids with a masked position, categorical rows):
  // the same input can carry several outcomes by the task's nature (a masked token its context does not
  // decide). Info up to ids_conflict_fraction; rows appended with other labels reach far more.
  const bool ids_conflict =
      s.integral_inputs && conflicts && !too_many && !discrete && conflict_frac <= opts.ids_conflict_fraction;
  // Rows joined from a smaller set of items (each row a user's and an article's features): the same pair
  // met again is a duplicate by chance, and where the label is an outcome of each meeting (a click, a
  // purchase) it may differ. Info where the inputs with conflicting labels are no more than labels drawn
  // independently of the input would give (each group of k copies conflicts with 1 - sum_c p_c^k; up to
  // 2 sds above that). Rows appended again with other labels conflict every time, far above it.
  double joined = 1.0, expected = 0.0, sd = 0.0;
  if (conflicts && !too_many && !discrete && !ids_conflict && s.tabular) {
    joined = s.repeats;
    if (joined > 1.0) {
      std::map<uint64_t, double> share;
      for (const Label& l : s.y) share[l.hash] += 1.0 / n;
      double var = 0.0;
      for (const auto& [h, g] : groups) {
        if (g.count < 2) continue;
        double same = 0.0;
        for (const auto& [lh, p] : share) same += std::pow(p, static_cast<double>(g.count));
        expected += 1.0 - same;
        var += (1.0 - same) * same;
      }
      sd = std::sqrt(var);
    }
  }
  const bool outcomes = joined > 1.0 && static_cast<double>(conflict_inputs) <= expected + 2.0 * sd;
  // Inputs of whole numbers that recur by nature (a next-token model's contexts, categorical rows): many
  // copies sit in groups of three rows or more, where rows appended twice, or appended again with another
  // label, make pairs. Info: the duplicates are the data's, and so are a class label's conflicts (a
  // continuous target's are judged by their spread, below).
  int64_t in_groups = 0;
  for (const auto& [h, g] : groups)
    if (g.count >= 3) in_groups += g.count - 1;
  const double grouped = static_cast<double>(in_groups) / static_cast<double>(repeated);
  const bool natural =
      s.integral_inputs && (too_many || conflicts) && !discrete && !ids_conflict && grouped >= kRecurringShare;
  const bool recurring = natural && (s.classes || !conflicts);
  // A continuous target (a regression): copies of one input with other targets are the target's noise where
  // their spread about each input's mean is a small part of the targets' whole variance; labels of another
  // source (a shuffled or rescaled target column appended) spread as widely as the targets themselves.
  double within = kNaN;
  if (conflicts && !s.classes && s.label_values == 1) {
    double sum = 0, sq = 0, inner = 0, rows_in = 0;
    for (const Label& l : s.y) sum += l.value, sq += l.value * l.value;
    const double var = sq / n - (sum / n) * (sum / n);
    for (const auto& [h, g] : groups) {
      if (g.count < 2) continue;
      double gs = 0, gq = 0;
      for (size_t k = 0; k < g.labels.size(); ++k) {
        const double c = static_cast<double>(g.copies[k]), v = g.labels[k].value;
        gs += c * v;
        gq += c * v * v;
      }
      const double cnt = static_cast<double>(g.count);
      inner += gq - gs * gs / cnt;
      rows_in += cnt;
    }
    if (var > 0 && rows_in > 0) within = inner / rows_in / var;
  }
  const bool target_noise = within <= kTargetNoiseShare;
  // Copies of the rarer labels' rows (oversampling_tilt): oversampling, info.
  const double tilt = too_many && !conflicts && !discrete ? oversampling_tilt(s) : kNaN;
  const bool oversampled = tilt < kOversampledShare;
  Finding f = make("D12",
                   ((conflicts && !target_noise && !(natural && s.classes)) || (too_many && !natural)) && !discrete &&
                           !ids_conflict && !outcomes && !oversampled
                       ? Severity::Warning
                       : Severity::Info,
                   "");
  if (recurring)
    f.title = "inputs of whole numbers that recur by nature: " + num(repeated) + " of " + num(s.read()) + " rows of " +
              s.name + " repeat an earlier row's input (" + pct(dup_frac) + "), " + pct(grouped) +
              " of the copies in groups of three or more" +
              (conflicts ? "; " + num(conflicting) +
                               " rows share their input with another label: the target is random given the input, "
                               "and the labels allow an accuracy of " +
                               pct(ceiling)
                         : std::string()) +
              s.partial();
  else if (target_noise && (!too_many || natural))
    f.title = num(conflicting) + " of " + num(s.read()) + " rows of " + s.name +
              " share their input with a row of another target, within the targets' noise (their spread about each "
              "input's mean is " +
              pct(within) + " of the targets' variance)" + s.partial();
  else if (outcomes)
    f.title = num(conflicting) + " of " + num(s.read()) + " rows of " + s.name +
              " share their input with a row of another label, as many as labels drawn apart from the input would "
              "give: rows joined from repeated items (" +
              fmt_num(joined) + " rows per item), where the label is an outcome of each meeting" + s.partial();
  else if (discrete)
    f.title = "inputs from a small discrete set: " + num(repeated) + " of " + num(s.read()) + " rows of " + s.name +
              " repeat an earlier row's input (" + pct(dup_frac) + ")" +
              (conflicts && s.classes ? ", " + num(conflicting) +
                                            " of them with other labels: the target is random given the "
                                            "input, and the labels allow an accuracy of " +
                                            pct(ceiling)
               : conflicts ? ", " + num(conflicting) + " of them with other targets: the target varies given the input"
                           : std::string()) +
              s.partial();
  else if (conflicts)
    f.title = num(conflicting) + " of " + num(s.read()) + " rows of " + s.name + " share their input with a row " +
              "of another label (" + num(conflict_inputs) + " inputs with conflicting labels)" + s.partial();
  else if (oversampled)
    f.title = num(repeated) + " of " + num(s.read()) + " rows of " + s.name + " repeat an earlier row's input (" +
              pct(dup_frac) + "), copies of the rarer labels' rows: oversampling" + s.partial();
  else
    f.title = num(repeated) + " of " + num(s.read()) + " rows of " + s.name + " repeat an earlier row's input (" +
              pct(dup_frac) + ")" + s.partial();
  // The most repeated input: one value everywhere (its row's spread is 0), a share past kBlankShare, and
  // several labels.
  const Group* top = nullptr;
  for (const auto& [h, g] : groups)
    if (!top || g.count > top->count || (g.count == top->count && g.first < top->first)) top = &g;
  const bool blank = top != nullptr && s.read() >= kMinBlankRows && top->labels.size() >= 2 &&
                     static_cast<double>(top->count) >= kBlankShare * n &&
                     static_cast<size_t>(top->first) < s.stds.size() && s.stds[top->first] == 0.0;
  f.shape = "x " + s.shape + " per example";
  f.evidence = {{"rows read", n, ""},
                {"repeated rows (copies after the first)", static_cast<double>(repeated), ""},
                {"duplicate fraction", dup_frac, "> " + fmt_num(opts.max_duplicate_fraction) + " warns"},
                {"rows whose input has another label elsewhere", static_cast<double>(conflicting), ""},
                {"conflicting-label fraction", conflict_frac, "> " + fmt_num(opts.max_conflict_fraction) + " warns"},
                {"most copies of one input", static_cast<double>(most), ""}};
  if (s.integral_inputs)
    f.evidence.push_back({"inputs of whole numbers (ids, categories, one-hot) repeating this often", dup_frac,
                          ">= " + fmt_num(opts.discrete_duplicate_fraction) + ": a discrete set (info)"});
  if (conflicts && s.classes)
    f.evidence.push_back({"accuracy the labels allow (each input's most frequent label)", ceiling, ""});
  if (s.integral_inputs && (too_many || conflicts) && !discrete && !ids_conflict) {
    f.evidence.push_back({"copies in groups of three rows or more", grouped,
                          ">= " + fmt_num(kRecurringShare) + ": inputs that recur by nature (info)"});
  }
  if (std::isfinite(within))
    f.evidence.push_back({"variance of the targets about each repeated input's mean / the targets' variance", within,
                          "<= " + fmt_num(kTargetNoiseShare) + ": the targets' noise (info)"});
  if (oversampled)
    f.evidence.push_back({"a copy's label's share among the distinct inputs / a distinct input's label's", tilt,
                          "< " + fmt_num(kOversampledShare) + ": copies of the rarer labels (info)"});
  if (blank) {
    f.evidence.push_back({"rows holding the most repeated input, one value in every position",
                          static_cast<double>(top->count) / n, ">= " + fmt_num(kBlankShare) + " warns"});
    f.evidence.push_back({"labels among those rows", static_cast<double>(top->labels.size()), ">= 2"});
    f.evidence.push_back({"the commonest label's share among them",
                          static_cast<double>(*std::max_element(top->copies.begin(), top->copies.end())) /
                              static_cast<double>(top->count),
                          ""});
  }
  if (joined > 1.0) {
    f.evidence.push_back(
        {"rows per distinct pair of adjacent column values (rows joined from repeated items)", joined, ">= 1.5"});
    f.evidence.push_back({"inputs with conflicting labels, were the labels drawn apart from the input", expected,
                          "observed <= this + 2 sd (" + fmt_num(sd) + "): outcomes, info"});
  }
  if (recurring)
    f.cause =
        "the inputs are whole numbers (token ids, categories) that recur by nature: the same context or category "
        "row comes back many times, and where the outcome is random given the input (the next token after a "
        "context) it carries several labels. Rows appended twice, or again with another label, make pairs "
        "instead. For example: " +
        example;
  else if (target_noise && (!too_many || natural))
    f.cause =
        "the target is a measurement with noise (a rating, a price): the same input met again gives another "
        "value, and the values stay close to that input's mean. For example: " +
        example;
  else if (outcomes)
    f.cause =
        "each row joins the features of items that recur across rows (a user and an article, a patient and a "
        "visit), so the same pair recurs by chance, and the label is what happened at each meeting: a click or "
        "no click. Conflicts at the rate such outcomes give are the data, not annotation errors. For example: " +
        example;
  else if (discrete)
    f.cause =
        "the inputs take few distinct values, so rows repeat by nature, and where the outcome is random given "
        "the input (the next token after a context, a transition's reward) the same input carries several "
        "labels. For example: " +
        example;
  else if (ids_conflict)
    f.cause =
        "inputs of whole numbers (token ids, categories) recur now and then, and the task need not decide the "
        "label from them (a masked token its context leaves open, a category row with several outcomes); "
        "where they are annotation errors, fix the labels. For example: " +
        example;
  else if (conflicts)
    f.cause =
        "the same input carries different labels: annotation errors, or rows appended twice with the "
        "labels of another source (a merge of two label files, oversampling that relabelled copies). The "
        "model is asked to predict two classes for one image, so no model can fit those rows; the loss "
        "cannot reach zero and accuracy is capped. For example: " +
        example;
  else if (oversampled)
    f.cause =
        "the rows of the rarer labels were copied to balance them (a random oversampler): the copies weigh "
        "those labels up in the loss, as meant. For example: " +
        example;
  else
    f.cause =
        "rows were appended more than once (a concatenation done twice, oversampling, a merge of "
        "overlapping sources): the copies weigh more in the loss than the rest, the epoch is longer than "
        "the data, and any copy that also lands in the validation split inflates its score. For "
        "example: " +
        example;
  f.fix = discrete || recurring || (target_noise && (!too_many || natural))
              ? std::string(
                    "nothing to do if the inputs are meant to be discrete (the accuracy cannot pass the "
                    "ceiling above)")
          : conflicts ? "look at the rows with conflicting labels (start with rows " + num(ex.first) + " and " +
                            num(ex.second) + "), keep one correct label per input and drop the others; then split"
                      : "drop the repeated rows before splitting (keep the first copy of each input); oversample on "
                        "purpose only inside the training loader (a weighted sampler), never by copying rows";
  if (outcomes)
    f.fix =
        "nothing to do: a model of such outcomes predicts their probability (score it by log-loss or AUC, not "
        "by accuracy); if the labels are meant to be deterministic, look at rows " +
        num(ex.first) + " and " + num(ex.second);
  else if (oversampled)
    f.fix =
        "none needed if oversampling was meant; copy only training rows, after the split (a copy in both "
        "splits inflates the validation score: D13)";
  else if (!f.fires() && !discrete)
    f.fix = "nothing to do at this rate (" + pct(dup_frac) + " of the rows, <= " + pct(opts.max_duplicate_fraction) +
            "); drop the copies if they matter to you";
  if (blank) {
    const double value = s.means[top->first];
    f.severity = Severity::Warning;
    f.kind = Kind::BlankInputs;
    f.title = num(top->count) + " of " + num(s.read()) + " rows of " + s.name + " (" +
              pct(static_cast<double>(top->count) / n) + ") are one and the same input, " + fmt_num(value) +
              " in every position: inputs with nothing left in them, under " + std::to_string(top->labels.size()) +
              " different labels" + s.partial();
    f.cause =
        "a step of the input pipeline emptied these rows: a crop or truncation that kept only the padding "
        "(left-padded sequences cut from the front), a vocabulary lookup that sends every word to one id "
        "(padding or unknown), a mask or a loader that returns zeros. The model sees one input for " +
        pct(static_cast<double>(top->count) / n) +
        " of the rows and can only learn their labels' frequencies there. For example: rows " + num(top->first) +
        " and " + num(top->second) + " (labels " + labels_of(*top) + ")";
    f.fix = "print rows " + num(top->first) + " and " + num(top->second) +
            " after each step of the input pipeline and find the one that empties them; for left-padded "
            "sequences keep the last positions (x.narrow(1, L - k, k)), or pad on the right";
  }
  return {f};
}

// ---- D12: near copies with the other label ----------------------------------------------------

// Up to kConflictRows rows of each split, distances over up to kConflictFeatures features (each
// divided by at least the features' median spread, so that an image's noisy border weighs no more than
// its content). A pair of classes is judged on the rows of either class whose nearest neighbour also
// holds one of the two (kMinPairRows of them in each split, or it is not judged).
constexpr int64_t kConflictRows = 1000;
constexpr int64_t kConflictFeatures = 256;
constexpr int64_t kMinPairRows = 40;
constexpr int64_t kMinClassRows = 20;  // and of each of the two classes
// The pair's agreement above chance (kappa: 0 when a row's neighbour holds either label at random, 1
// when always its own): at most kMaxScrambled on the training rows, at least kMinToldApart on the
// held-out rows and 3x the training value. A pair the inputs hardly separate (shirts and T-shirts)
// is equally hard in both splits; the sampling sd of kappa on 40-200 rows is 0.07-0.16.
constexpr double kMaxScrambled = 0.2;
constexpr double kMinToldApart = 0.6;
// The rows of every other class must keep at least this share of their held-out agreement in train:
// an augmentation that blurs every class lowers every pair, not one (Fashion-MNIST with pixel noise of
// sd 0.7 or 1.0 scrambles single pairs too, but keeps 0.26-0.46 of the rest; a flip that swaps two
// classes, or half of two classes' labels swapped, keeps 1.0).
constexpr double kMinRestKept = 0.75;

// Class labels of the first n rows: int64 indices (N) or (N, 1), or a binary task's 0/1 floats.
// Empty when y holds anything else.
std::vector<int64_t> class_labels(const Tensor& y, int64_t n) {
  if (!y.defined() || y.dim() < 1 || y.dim() > 2 || y.size(0) < n || y.numel() != y.size(0)) return {};
  const std::vector<double> t = doubles(y.narrow(0, 0, n).reshape({-1}));
  std::vector<int64_t> out;
  out.reserve(t.size());
  for (double v : t) {
    if (!is_whole(v) || v < 0 || (y.dtype() != kInt64 && v != 0.0 && v != 1.0)) return {};
    out.push_back(static_cast<int64_t>(v));
  }
  return out;
}

// How often a row's nearest neighbour holds the row's own label: counts[{own, neighbour's}].
struct NeighbourLabels {
  std::map<std::pair<int64_t, int64_t>, int64_t> counts;
  bool ok = false;
  int64_t at(int64_t a, int64_t b) const {
    const auto it = counts.find({a, b});
    return it == counts.end() ? 0 : it->second;
  }
  // The rows of class a or b whose neighbour holds a or b, and their agreement above chance.
  std::pair<int64_t, double> pair_kappa(int64_t a, int64_t b) const {
    const int64_t same = at(a, a) + at(b, b), na = at(a, a) + at(a, b), nb = at(b, b) + at(b, a);
    const int64_t m = na + nb;
    // Each class needs rows of its own: beside a rare class (a long-tailed split) the agreement is noise.
    if (m == 0 || std::min(na, nb) < kMinClassRows) return {m, kNaN};
    const double pa = static_cast<double>(na) / static_cast<double>(m), chance = pa * pa + (1 - pa) * (1 - pa);
    return {m, (static_cast<double>(same) / static_cast<double>(m) - chance) / (1.0 - chance)};
  }
  // The same over the rows of every class but a and b (any neighbour), chance from their shares.
  std::pair<int64_t, double> rest_kappa(int64_t a, int64_t b) const {
    std::map<int64_t, int64_t> per_class;
    int64_t m = 0, same = 0;
    for (const auto& [k, c] : counts) {
      if (k.first == a || k.first == b) continue;
      per_class[k.first] += c;
      m += c;
      if (k.first == k.second) same += c;
    }
    if (m == 0) return {0, kNaN};
    double chance = 0;
    for (const auto& [cls, c] : per_class) chance += std::pow(static_cast<double>(c) / static_cast<double>(m), 2);
    if (chance >= 1.0) return {m, kNaN};
    return {m, (static_cast<double>(same) / static_cast<double>(m) - chance) / (1.0 - chance)};
  }
};

NeighbourLabels neighbour_labels_of(const Tensor& x, const Tensor& y) {
  NeighbourLabels out;
  if (!x.defined() || !x.is_floating_point() || x.dim() < 2) return out;
  const int64_t n = std::min(x.size(0), kConflictRows);
  const std::vector<int64_t> labels = class_labels(y, n);
  if (labels.empty()) return out;
  NoGradGuard ng;
  const std::vector<double> v = doubles(x.narrow(0, 0, n).reshape({n, -1}));
  const std::vector<int64_t> near = nearest_rows(v, n, n, kConflictFeatures, /*floor_spread=*/true);
  if (near.empty()) return out;
  for (int64_t i = 0; i < n; ++i)
    ++out.counts[{labels[static_cast<size_t>(i)], labels[static_cast<size_t>(near[static_cast<size_t>(i)])]}];
  out.ok = true;
  return out;
}

}  // namespace

std::vector<Finding> check_duplicates(const nn::Dataset& data, const DataCheckOptions& opts) {
  return duplicates(*read_split_sample(data, opts), opts);
}

std::vector<Finding> check_duplicates(const SplitSample& data, const DataCheckOptions& opts) {
  return duplicates(data, opts);
}

std::vector<Finding> check_neighbour_conflicts(const Tensor& train_x, const Tensor& train_y, const Tensor& other_x,
                                               const Tensor& other_y, const std::string& split) {
  const NeighbourLabels t = neighbour_labels_of(train_x, train_y), o = neighbour_labels_of(other_x, other_y);
  if (!t.ok || !o.ok) return {};
  std::set<int64_t> classes;
  for (const auto& [k, c] : t.counts) classes.insert(k.first);
  struct Pair {
    int64_t a, b, mt, mo;
    double kt, ko, rt, ro;
  };
  std::vector<Pair> hits;
  for (auto ia = classes.begin(); ia != classes.end(); ++ia)
    for (auto ib = std::next(ia); ib != classes.end(); ++ib) {
      const auto [mt, kt] = t.pair_kappa(*ia, *ib);
      const auto [mo, ko] = o.pair_kappa(*ia, *ib);
      if (mt < kMinPairRows || mo < kMinPairRows || !std::isfinite(kt) || !std::isfinite(ko)) continue;
      if (!(kt <= kMaxScrambled && ko >= kMinToldApart && kt * 3 <= ko)) continue;
      const auto [nrt, rt] = t.rest_kappa(*ia, *ib);
      const auto [nro, ro] = o.rest_kappa(*ia, *ib);
      if (nrt < kMinPairRows || nro < kMinPairRows || !std::isfinite(rt) || !std::isfinite(ro)) continue;
      if (rt < kMinRestKept * ro) continue;
      hits.push_back({*ia, *ib, mt, mo, kt, ko, rt, ro});
    }
  if (hits.empty()) return {};
  std::sort(hits.begin(), hits.end(), [](const Pair& p, const Pair& q) { return p.ko - p.kt > q.ko - q.kt; });
  const Pair& p = hits.front();
  const std::string ab = num(p.a) + " and " + num(p.b);
  Finding f = make("D12", Severity::Warning,
                   "classes " + ab + " look alike in the training rows: a row's nearest neighbour holds the other " +
                       "label as often as its own (agreement " + fmt_num(p.kt) + " above chance), while the " + split +
                       " rows tell them apart (" + fmt_num(p.ko) + ")");
  f.shape = "train x " + shape_str(train_x.shape()) + ", " + split + " x " + shape_str(other_x.shape());
  f.evidence = {
      {"training rows of classes " + ab + " whose nearest neighbour is of either", static_cast<double>(p.mt), ""},
      {"their agreement above chance (kappa), train", p.kt, "<= " + fmt_num(kMaxScrambled) + " warns"},
      {split + " rows of classes " + ab + " whose nearest neighbour is of either", static_cast<double>(p.mo), ""},
      {"their agreement above chance, " + split, p.ko,
       ">= " + fmt_num(kMinToldApart) + " and 3x the training value warns"},
      {"the other classes' agreement, train", p.rt, ""},
      {"the other classes' agreement, " + split, p.ro,
       "train must keep " + fmt_num(kMinRestKept) + "x of it: one pair, not every class, lost its labels"}};
  std::string others;
  for (size_t k = 1; k < hits.size() && k < 4; ++k)
    others += (k > 1 ? ", " : "") + num(hits[k].a) + "/" + num(hits[k].b);
  if (!others.empty())
    f.evidence.push_back({"other pairs alike in train only: " + others, static_cast<double>(hits.size() - 1), ""});
  f.cause =
      "inputs that look alike carry both labels in the training rows as read (through the dataset's transforms), "
      "but not in the " +
      split +
      " rows: a training-only transform that turns one class into the other and keeps "
      "the label (a horizontal flip of a LEFT arrow is a RIGHT arrow, a 180-degree rotation turns a 6 into a 9), or "
      "the labels of classes " +
      ab +
      " swapped on part of the training rows. No model can tell the two apart from "
      "their inputs, so it learns to split its probability between them";
  f.fix = "look at a few training rows of classes " + ab +
          " as the loader yields them; make the transform change "
          "the label with the input (a flip swaps LEFT and RIGHT) or leave these classes out of it, and check the "
          "training labels of the two classes against their inputs. Labels made noisy on purpose (a noisy-label "
          "study) give this finding by design";
  return {f};
}

}  // namespace gradsleuth::debug
