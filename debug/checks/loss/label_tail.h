// L9's confident-disagreement rule: the trained model's probability for each example's own label, on
// the training split (evaluated like validation: eval mode, no gradients) and on the validation split.
// A model fit to clean labels gives few training examples a small probability for their label, no
// more than it gives validation examples: its confident mistakes are rarer on the data it trained on.
// A share of wrong training labels leaves a tail of training examples whose label the model, having
// learned the task from the others, confidently rejects; that tail stands out from validation's long
// before the accuracies part (docs/checks.md, L9). Its findings are made in end_fit.cpp, L9's home;
// the shares in label_tail.cpp.
#pragma once
#include <cstdint>
#include <limits>
#include <vector>

#include "debug/evidence/finding.h"

namespace gradsleuth::debug {

struct LabelTailOptions {
  // An example is in the tail when the model gives its label less than `confident_below` probability
  // (softmax over the classes; for a binary output the sigmoid, or the probability itself).
  double confident_below = 0.1;
  // The training split's tail share above the validation split's by more than `margin`, with a
  // pooled two-proportion z of at least `min_z`, warns ("train-labels-disagree").
  double margin = 0.02;
  double min_z = 2.0;
};

// Examples scored on each split, and those in the tail (-1: not measured).
struct LabelTailMeasure {
  int64_t train_scored = 0, val_scored = 0;
  int64_t train_tail = -1, val_tail = -1;
};

// Each split's tail share and the pooled two-proportion z of train over validation (signed); the
// shares are NaN where the tails were not measured.
struct TailShares {
  double train = std::numeric_limits<double>::quiet_NaN(), val = std::numeric_limits<double>::quiet_NaN(), z = 0;
};
TailShares tail_shares(const LabelTailMeasure& m);

// The tail shares of both splits and their z, as evidence (empty when not measured).
std::vector<Evidence> label_tail_evidence(const LabelTailMeasure& m, const LabelTailOptions& o = {});

// A warning (L9, train-labels-disagree) when the training split's tail exceeds validation's by the
// rule's margin and z; nothing otherwise.
std::vector<Finding> check_label_tail(const LabelTailMeasure& m, const LabelTailOptions& o = {});

// The rule beside L9's split rules (`findings`, check_end_fit's): where none of them warned, its warning
// takes the place of the info `fit-measured`; otherwise its numbers join that info.
void apply_label_tail(std::vector<Finding>& findings, const LabelTailMeasure& m, const LabelTailOptions& o = {});

}  // namespace gradsleuth::debug
