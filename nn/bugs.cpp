// The silent-bug catalog's table (see bugs.h and docs/catalog.md).
#include "nn/bugs.h"

#include <cctype>
#include <cstdlib>

#include "core/error.h"

namespace gradsleuth::nn {

const std::vector<BugInfo>& bug_catalog() {
  static const std::vector<BugInfo> table = {
      {Bug::B01, "B01", "regression target (B,) against prediction (B,1) broadcasts to (B,B)", "nn::MSELoss",
       {"M19", "D6"}},
      {Bug::B02, "B02", "in-place op on a tensor saved for backward", "nn::Residual", {"M20"}},
      {Bug::B03, "B03", "loss reduced with sum instead of mean", "nn::Loss (any)", {"L6"}},
      {Bug::B04, "B04", "optimizer gradients never zeroed", "optim::Trainer", {"O5"}},
      {Bug::B05, "B05", "validation run in training mode (dropout on)", "optim::Trainer", {"M2"}},
      {Bug::B06, "B06", "normalisation statistics fitted on train + test", "data pipeline", {"D7"}},
      {Bug::B07, "B07", "inputs shuffled without their labels", "nn::DataLoader", {"D4"}},
      {Bug::B08, "B08", "softmax before cross-entropy", "model (recipe)", {"L2"}},
      {Bug::B09, "B09", "BCE fed raw logits", "nn::BCELoss", {"L3"}},
      {Bug::B10, "B10", "ReLU after the final layer", "model (recipe)", {"M3"}},
      {Bug::B11, "B11", "one layer instance reused where two were meant", "model (recipe)", {"M4"}},
      {Bug::B12, "B12", "detach inside the model", "nn::Linear", {"M5"}},
      {Bug::B13, "B13", "reshape where a transpose was meant (batch mixing)", "nn::Linear", {"M6"}},
      {Bug::B14, "B14", "softmax / mean over the wrong dimension", "nn::LogSoftmax", {"M6", "M19"}},
      {Bug::B15, "B15", "wrong parameters frozen", "model (recipe)", {"M10", "M5"}},
      {Bug::B16, "B16", "weights initialised far too large", "nn::Linear", {"M9", "O1"}},
      {Bug::B17, "B17", "deep sigmoid stack, vanishing gradients", "model (recipe)", {"O1", "M8"}},
      {Bug::B18, "B18", "dying ReLUs (large negative bias)", "nn::Linear", {"M7"}},
      {Bug::B19, "B19", "every label masked (ignore_index)", "nn::DataLoader", {"L5"}},
      {Bug::B20, "B20", "log(softmax(x)) instead of log-sum-exp", "nn::LogSoftmax", {"M12", "W4"}},
      {Bug::B21, "B21", "half-precision softmax overflow", "nn::LogSoftmax", {"M18"}},
      {Bug::B22, "B22", "a layer with a wrong backward", "nn::Linear", {"M13"}},
      {Bug::B23, "B23", "BatchNorm without running statistics", "nn::BatchNorm1d/2d", {"M17"}},
      {Bug::B24, "B24", "learning rate far too high", "recipe (optimizer)", {"L1", "O6"}},
      {Bug::B25, "B25", "raw 0..255 inputs", "data pipeline", {"D5"}},
      {Bug::B26, "B26", "labels 1-indexed / out of range", "data pipeline", {"D9"}},
      {Bug::B27, "B27", "float64 inputs into a float32 model", "data pipeline", {"M11"}},
      {Bug::B28, "B28", "no shuffling, batches sorted by class", "nn::DataLoader", {"D8"}},
  };
  return table;
}

const BugInfo& bug_info(Bug b) { return bug_catalog().at(static_cast<size_t>(b) - 1); }

std::string bug_code(Bug b) { return bug_info(b).code; }

Bug parse_bug(std::string_view name) {
  std::string_view digits = name;
  if (!digits.empty() && (digits[0] == 'B' || digits[0] == 'b')) digits.remove_prefix(1);
  bool ok = !digits.empty() && digits.size() <= 2;
  for (char c : digits) ok = ok && std::isdigit(static_cast<unsigned char>(c));
  const int n = ok ? std::atoi(std::string(digits).c_str()) : 0;
  GS_CHECK(n >= 1 && n <= kNumBugs, "parse_bug", "unknown bug '", std::string(name),
           "': the catalog has B01 ... B28 (gradsleuth zoo --list, docs/catalog.md)");
  return static_cast<Bug>(n);
}

std::vector<Bug> BugSet::list() const {
  std::vector<Bug> out;
  for (int i = 1; i <= kNumBugs; ++i)
    if (has(static_cast<Bug>(i))) out.push_back(static_cast<Bug>(i));
  return out;
}

std::string BugSet::str() const {
  std::string s;
  for (Bug b : list()) s += (s.empty() ? "" : ", ") + bug_code(b);
  return s.empty() ? "none" : s;
}

}  // namespace gradsleuth::nn
