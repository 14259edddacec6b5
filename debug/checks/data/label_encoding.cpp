// D9 label encoding: dtypes, one-hot, ranges, labels numbered from 1 (see data_checks.h).
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
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

using namespace data_detail;

// ---- D9 label encoding -------------------------------------------------------------------------

std::vector<Finding> data_detail::empty_one_hot_rows(const Tensor& y) {
  if (!y.defined() || !y.is_floating_point() || y.dim() != 2 || y.size(1) < 2 || y.size(0) < 2) return {};
  const std::vector<double> v = doubles(y);
  const int64_t n = y.size(0), C = y.size(1);
  int64_t one = 0, none = 0;
  for (int64_t r = 0; r < n; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double a = v[static_cast<size_t>(r * C + c)];
      if (a != 0.0 && a != 1.0) return {};  // soft targets (label smoothing, mixup): not one-hot rows
      sum += a;
    }
    one += sum == 1.0 ? 1 : 0;
    none += sum == 0.0 ? 1 : 0;
  }
  // Multi-label targets (several 1s in a row) may be empty by design: only a one-hot encoding is judged.
  if (none == 0 || one + none != n || 2 * one < n) return {};
  Finding f = make("D9", Severity::Warning,
                   num(none) + " of " + num(n) + " one-hot target rows " + shape_str(y.shape()) +
                       " are all zero: they encode no class");
  f.shape = y.str();
  f.evidence = {{"target rows with no 1", static_cast<double>(none), "any warns, where the others have one 1"},
                {"target rows with one 1", static_cast<double>(one), ""},
                {"columns", static_cast<double>(C), ""}};
  f.cause =
      "the one-hot encoding has fewer columns than there are classes (num_classes taken as the largest "
      "label, not the largest label + 1, or a class missing from the vocabulary): the rows of the classes "
      "left out give a soft-target loss nothing to learn, and the model cannot predict them";
  f.fix = "encode with num_classes = the number of classes (max label + 1), and size the output layer to match";
  return {f};
}

// A column of 0/1 targets (multi-label, or one threshold of a cumulative ordinal encoding) that is 1 on
// every row read: its output has nothing to learn but a constant, and an ordinal encoding built with
// >= where > was meant (stage >= k: column 0 always 1) shifts every target by one level. At least
// kMinConstantRows rows of two columns or more; a column that is 0 everywhere is a rare label the
// sample may lack, and is left alone.
constexpr int64_t kMinConstantRows = 100;

std::vector<Finding> data_detail::constant_target_columns(const Tensor& y) {
  if (!y.defined() || !y.is_floating_point() || y.dim() != 2 || y.size(1) < 2 || y.size(0) < kMinConstantRows)
    return {};
  const std::vector<double> v = doubles(y);
  const int64_t n = y.size(0), K = y.size(1);
  std::vector<int64_t> ones(static_cast<size_t>(K), 0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < K; ++c) {
      const double a = v[static_cast<size_t>(r * K + c)];
      if (a != 0.0 && a != 1.0) return {};  // soft targets or values: not 0/1 labels
      ones[static_cast<size_t>(c)] += a == 1.0;
    }
  std::vector<int64_t> always;
  int64_t varying = 0;
  for (int64_t c = 0; c < K; ++c) {
    if (ones[static_cast<size_t>(c)] == n) always.push_back(c);
    varying += ones[static_cast<size_t>(c)] > 0 && ones[static_cast<size_t>(c)] < n;
  }
  // One-hot rows have no column of 1s; every column 1 is one class (empty_one_hot_rows and D3 see it).
  if (always.empty() || varying == 0) return {};
  Finding f = make(
      "D9", Severity::Warning,
      "target column" + std::string(always.size() > 1 ? "s " : " ") + list_ints(always) + " of " +
          shape_str(y.shape()) + " 0/1 targets " + (always.size() > 1 ? "are" : "is") + " 1 on every one of " + num(n) +
          " training rows: " + (always.size() > 1 ? "their outputs" : "its output") + " can only learn a constant");
  f.kind = Kind::TargetColumnConstant;
  f.shape = y.str();
  f.evidence = {{"rows read", static_cast<double>(n), ">= " + num(kMinConstantRows)},
                {"columns that are 1 on every row", static_cast<double>(always.size()), "any warns"},
                {"columns with both 0s and 1s", static_cast<double>(varying), ">= 1"},
                {"columns", static_cast<double>(K), ""}};
  f.cause =
      "the encoding that builds the 0/1 targets sets a column for every row: a cumulative ordinal encoding built with "
      ">= where > was meant (stage >= 0 is always true, and every target moves up one level, so a decoder that "
      "counts the 1s is off by one), a threshold below every value, or a label added to every row. Its output "
      "learns a constant, and whatever reads the outputs back reads them shifted";
  f.fix =
      "print a few target rows beside their labels: a cumulative encoding of K levels has K - 1 columns, "
      "column k meaning 'level > k' (gt, not ge), so the lowest level is a row of 0s";
  return {f};
}

std::vector<Finding> check_label_encoding(const Tensor& y, int64_t num_classes, const DataCheckOptions& opts) {
  GS_CHECK(y.defined(), "check_label_encoding", "needs a defined label tensor");
  std::vector<Finding> out;
  const int64_t C = num_classes;
  const std::string range = C > 0 ? "[0, " + num(C) + ")" : "[0, C)";
  if (y.is_floating_point()) {
    const std::vector<double> v = doubles(y);
    const bool whole = std::all_of(v.begin(), v.end(), is_whole);
    bool one_hot = whole && y.dim() == 2 && y.size(1) >= 2 && y.size(0) > 0;
    if (one_hot)
      for (int64_t r = 0; r < y.size(0) && one_hot; ++r) {
        double sum = 0.0;
        for (int64_t c = 0; c < y.size(1); ++c) {
          const double a = v[r * y.size(1) + c];
          one_hot = one_hot && (a == 0.0 || a == 1.0);
          sum += a;
        }
        one_hot = one_hot && sum == 1.0;
      }
    // 0/1 float targets of a binary task (BCE, BCEWithLogits) are not class indices: nothing to say.
    const bool binary =
        C <= 2 && !one_hot && std::all_of(v.begin(), v.end(), [](double a) { return a == 0.0 || a == 1.0; });
    if (binary) return out;
    // Rows of class probabilities (soft labels: a teacher's, smoothed or mixed ones), as wide as the classes
    // where they are known: cross-entropy takes them as they are. Nothing to say.
    bool soft = !whole && y.dim() == 2 && y.size(0) > 0 && y.size(1) >= 2 && (C <= 0 || y.size(1) == C);
    for (int64_t r = 0; r < (soft ? y.size(0) : 0); ++r) {
      double sum = 0.0;
      for (int64_t c = 0; c < y.size(1); ++c) {
        const double a = v[static_cast<size_t>(r * y.size(1) + c)];
        soft = soft && a >= 0.0 && a <= 1.0;
        sum += a;
      }
      soft = soft && std::fabs(sum - 1.0) <= 1e-4;
      if (!soft) break;
    }
    if (soft) return out;
    Finding f = make("D9", Severity::Error, "");
    f.shape = y.str();
    if (one_hot) {
      f.title = "labels are one-hot rows " + shape_str(y.shape()) + ", not class indices";
      f.cause =
          "the labels were one-hot encoded; cross_entropy would read them as class probabilities (the same "
          "loss), but accuracy, nll_loss and the label checks need int64 class indices (B)";
      f.fix = "pass y.argmax(1) (int64 class indices in " + range + ")";
    } else if (whole) {
      f.title = "class labels are " + std::string(dtype_name(y.dtype())) + ", not int64";
      f.cause =
          "the labels were read or built as floats (a CSV column, a torch-style tensor of floats); "
          "cross_entropy indexes the logits with them and needs int64";
      // A column of labels (B, 1) also needs its extra dim squeezed: the class-index losses take (B).
      f.fix = y.dim() == 2 && y.size(1) == 1
                  ? "squeeze the extra dim and convert: y.squeeze(1).to(gs::kInt64) (shape " + shape_str(y.shape()) +
                        " -> [" + num(y.size(0)) + "])"
                  : "convert: y.to(gs::kInt64)";
    } else {
      f.kind = Kind::LabelsNotWhole;
      f.title = "labels are not whole numbers: these are not class indices";
      f.cause =
          "regression targets, probabilities or normalised labels were passed where class indices belong "
          "(or the labels went through the input normaliser)";
      f.fix = "use int64 class indices in " + range +
              " for classification, or a regression loss (MSE) for "
              "continuous targets";
    }
    const Summary s = summarize(v);
    f.evidence = {{"min label", s.min, ""},
                  {"max label", s.max, ""},
                  {"whole numbers (1 = yes)", whole ? 1.0 : 0.0, "labels must be int64"},
                  {"values per label row",
                   static_cast<double>(y.dim() >= 2 ? y.numel() / std::max<int64_t>(1, y.size(0)) : 1), ""}};
    out.push_back(f);
    if (!whole || one_hot) return out;
  }

  const std::vector<int64_t> v = y.to_vector<int64_t>();
  int64_t masked = 0, n = 0, mn = std::numeric_limits<int64_t>::max(), mx = std::numeric_limits<int64_t>::min();
  int64_t neg = 0, over = 0;
  std::set<int64_t> present;
  for (int64_t c : v) {
    if (c == opts.ignore_index) {
      ++masked;
      continue;
    }
    ++n;
    mn = std::min(mn, c);
    mx = std::max(mx, c);
    if (c < 0)
      ++neg;
    else if (C > 0 && c >= C)
      ++over;
    if (c >= 0 && (C <= 0 || c <= C)) present.insert(c);  // the 1-indexed rule looks at 0..C only
  }
  if (n == 0) return out;  // every label masked: L5's business
  // Looks 1-indexed: no 0, and every class 1..K-1 (and K when C is unknown) occurs, often enough.
  const int64_t K = C > 0 ? C : mx;
  bool one_indexed = !present.count(0) && mn >= 1 && K >= 2 && n >= opts.one_indexed_min_per_class * K;
  for (int64_t c = 1; one_indexed && c <= (C > 0 ? K - 1 : K); ++c) one_indexed = present.count(c) > 0;

  auto common = [&](Finding& f) {
    f.shape = y.str();
    f.evidence = {{"min label", static_cast<double>(mn), ""}, {"max label", static_cast<double>(mx), ""}};
    if (C > 0) f.evidence.push_back({"classes C", static_cast<double>(C), ""});
    f.evidence.push_back({"labels checked", static_cast<double>(n), ""});
    if (masked > 0)
      f.evidence.push_back({"masked labels (== ignore_index)", static_cast<double>(masked), "not counted"});
  };
  if (neg + over > 0) {
    Finding f = make("D9", Severity::Error, "");
    common(f);
    f.evidence.push_back({"labels outside " + range, static_cast<double>(neg + over), "any is an error"});
    if (one_indexed && neg == 0) {
      f.title =
          "labels run 1.." + num(mx) + ": they look 1-indexed, and " + num(over) + " labels fall outside " + range;
      f.cause = "the labels are numbered from 1: label " + num(C) +
                " has no output, and output 0 is never "
                "a target";
      f.fix = "subtract 1: y = y - 1, so labels run 0.." + num(C - 1);
    } else {
      f.title = num(neg + over) + " labels fall outside " + range + " (min " + num(mn) + ", max " + num(mx) + ")";
      f.cause = neg > 0 ? "negative labels: a marker for unknown/missing (-1) or a broken label column; cross_entropy "
                          "indexes the logits with the label, so this is out of range"
                        : "more classes in the data than outputs in the model (num_classes too small), or labels "
                          "numbered from 1; an out-of-range label is an error on the CPU and garbage or "
                          "a device assert on a GPU";
      f.fix = neg > 0 ? "drop those rows, or set them to ignore_index (" + num(opts.ignore_index) +
                            ") so the loss skips them"
                      : "make the last layer as wide as the number of classes (max label + 1 = " + num(mx + 1) +
                            ") or remap the labels to 0.." + num(C - 1);
    }
    out.push_back(f);
  } else if (one_indexed) {
    Finding f = make("D9", Severity::Warning,
                     "labels look 1-indexed: 0 never occurs among " + num(n) + " labels while 1.." +
                         num(C > 0 ? K - 1 : K) + " all do");
    common(f);
    f.evidence.push_back(
        {"labels equal to 0", 0.0, "none among >= " + num(opts.one_indexed_min_per_class) + " labels per class warns"});
    f.cause =
        "labels numbered from 1: output 0 is never a target, so the model wastes a class, and a "
        "label equal to the class count would be out of range";
    f.fix = "y = y - 1 so labels run 0..C-1 (if class 0 is really absent from this sample, ignore this)";
    out.push_back(f);
  }
  return out;
}

// D9's "not whole numbers" where the loss is the user's own (`loss_name`: its type name, "" for a loss
// function) and each target row holds several values: a target packed for that loss (a teacher's logits
// beside the label, a label with a weight or a mask) need not be class indices, and only the loss knows
// how it reads them. Info. A library loss (cross-entropy, NLL) reads class indices, and a single float
// per row is a label column however the loss reads it: those stay errors.
void revise_encoding_for_own_loss(std::vector<Finding>& fs, const std::string& loss_name) {
  if (loss_type::library(loss_name)) return;
  for (Finding& f : fs) {
    if (!f.is("D9", Kind::LabelsNotWhole) || !f.fires() || !(f.value_of("values per label row") > 1.0)) continue;
    f.severity = Severity::Info;
    f.title = "the targets hold " + fmt_num(f.value_of("values per label row")) +
              " values per row, not whole numbers, read by your own loss" +
              (loss_name.empty() ? std::string() : " (" + loss_name + ")") + ": not judged as class indices";
    f.cause =
        "a target packed for a loss of your own (a teacher's logits beside the label, a label with a weight) "
        "is read by that loss, which alone knows where its class indices are";
    f.fix = "none needed if the loss takes its class indices from the right column (as int64)";
  }
}

void revise_start_token_labels(std::vector<Finding>& fs, const nn::Dataset& data) {
  for (Finding& f : fs) {
    if (!f.fires() || f.check != "D9" || f.title.rfind("labels look 1-indexed", 0) != 0) continue;
    if (!data_detail::start_tokens(data).count(0)) return;
    f.severity = Severity::Info;
    f.title += "; 0 is a start token, which the inputs hold at their first step only";
    f.cause =
        "next-step prediction: the targets are the inputs one step on, so the token that starts every "
        "sequence is never a target";
    f.fix = "none needed";
  }
}

}  // namespace gradsleuth::debug
