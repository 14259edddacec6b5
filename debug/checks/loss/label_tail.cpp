// L9's confident-disagreement rule (debug/checks/loss/label_tail.h).
#include "debug/checks/loss/label_tail.h"

#include <algorithm>
#include <cmath>

#include "core/format.h"

namespace gradsleuth::debug {
namespace {

struct TailShares {
  double train = std::nan(""), val = std::nan(""), z = 0;
};

// Each split's tail share and the pooled two-proportion z of train over validation (signed).
TailShares tail_shares(const LabelTailMeasure& m) {
  TailShares s;
  if (m.train_tail < 0 || m.val_tail < 0 || m.train_scored <= 0 || m.val_scored <= 0) return s;
  const double nt = static_cast<double>(m.train_scored), nv = static_cast<double>(m.val_scored);
  s.train = static_cast<double>(m.train_tail) / nt;
  s.val = static_cast<double>(m.val_tail) / nv;
  const double p = static_cast<double>(m.train_tail + m.val_tail) / (nt + nv);
  s.z = (s.train - s.val) / std::sqrt(std::max(p * (1 - p), 1e-12) * (1 / nt + 1 / nv));
  return s;
}

}  // namespace

std::vector<Evidence> label_tail_evidence(const LabelTailMeasure& m, const LabelTailOptions& o) {
  const TailShares s = tail_shares(m);
  if (!std::isfinite(s.train)) return {};
  const std::string below = str_printf("%g", o.confident_below);
  return {{"training examples given under " + below + " probability for their label", s.train, ""},
          {"validation examples given under " + below + " probability for their label", s.val, ""},
          {"training - validation share", s.train - s.val, "> " + str_printf("%g", o.margin) + " and"},
          {"z (two proportions, training over validation)", s.z, ">= " + str_printf("%g", o.min_z) + " warns"}};
}

std::vector<Finding> check_label_tail(const LabelTailMeasure& m, const LabelTailOptions& o) {
  const TailShares s = tail_shares(m);
  if (!std::isfinite(s.train) || !(s.train - s.val > o.margin) || !(s.z >= o.min_z)) return {};
  Finding f;
  f.check = "L9";
  f.kind = Kind::TrainLabelsDisagree;
  f.severity = Severity::Warning;
  f.end_of_run = true;
  f.title = str_printf(
      "the trained model gives %.1f%% of its own training examples under %g probability for their label, against "
      "%.1f%% of validation: those training labels disagree with what it learned from the rest",
      100 * s.train, o.confident_below, 100 * s.val);
  f.evidence = label_tail_evidence(m, o);
  f.evidence.push_back({"training examples scored", static_cast<double>(m.train_scored), ""});
  f.evidence.push_back({"validation examples scored", static_cast<double>(m.val_scored), ""});
  f.cause =
      "a share of the training labels is wrong (labels changed, shifted or noisy in the training split only), or "
      "the training inputs are corrupted: a model fit to clean labels is confidently wrong on no more of its "
      "training data than of data it never saw";
  f.fix =
      "look at the training examples the trained model gives the lowest probability for their label: relabel or "
      "drop them, and check that the training split is built like the validation one";
  return {f};
}

}  // namespace gradsleuth::debug
