// A trained model scored on a split: its loss, its accuracy and which examples it gets right, the
// confusion of class labels, and the examples it gives under a probability for their label. Shared by
// the end-of-run passes of diagnose() (L9's pass over both splits, O8's outcome probe); internal to run/.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "debug/checks/model/behaviour.h"
#include "debug/checks/model/model_checks.h"
#include "nn/data.h"
#include "nn/loss.h"
#include "nn/module.h"

namespace gradsleuth::debug::run_detail {

// Scored examples (elements, for float targets) and those given under `below` probability for their
// label.
struct LabelTail {
  int64_t scored = 0, tail = 0;
};

struct SplitScore {
  double loss = std::nan(""), accuracy = std::nan("");
  std::vector<double> row_losses;  // each example's loss alone, when asked (RowLosses)
  int64_t examples = 0;
  std::vector<uint8_t> right;                   // per scored example (or element, for float targets): 1 when right
  std::vector<std::vector<int64_t>> confusion;  // class targets: rows per [label][prediction]
  bool class_labels = false;                    // integer targets (class ids, in whatever layout)
  // Several 0/1 targets per example (multi-label, or one-hot rows under a threshold): the share of examples
  // with every target right (exact-match or subset accuracy; NaN otherwise).
  double exact_match = std::nan("");
  LabelTail tail;
};

// The examples two scores of one split disagree on: `fixed`, right only in `after`; `broken`, right only in
// `before`. False (the counts left alone) where the scores do not hold the same examples' verdicts.
bool count_flips(const SplitScore& before, const SplitScore& after, int64_t& fixed, int64_t& broken);

// The output a binary prediction is read at: 0 for BCEWithLogitsLoss's logits, 0.5 for BCELoss's
// probabilities; NaN for any other loss (class scores are read by their argmax).
double accuracy_threshold(const nn::Loss* loss);

// Which examples get their loss alone (SplitScore::row_losses): none; those of a split without
// accuracies (regression targets); every one.
enum class RowLosses { kNone, kUnscored, kEvery };

// Loss and accuracy of up to max_batches batches of `loader`, in eval mode without gradients. Accuracy:
// argmax for (B, C) outputs with int64 (B) targets, or per position for (B, C, d1, ...) outputs with
// int64 (B, d1, ...) targets; a threshold (0 on logits, 0.5 on probabilities) for
// float targets of the output's shape. `rows`: which examples also get their loss alone.
// With `train_mode`, the batches run in training mode with the randomness that probe found off (the
// caller restores modes and buffers).
SplitScore score(nn::Module& model, const nn::DataLoader& loader, const LossFunction& loss, int64_t max_batches,
                 double threshold, RowLosses rows = RowLosses::kNone, double tail_below = 0.1,
                 const ModeProbe* train_mode = nullptr);

}  // namespace gradsleuth::debug::run_detail
