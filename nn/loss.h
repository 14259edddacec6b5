// Loss functions: modules (nn::CrossEntropyLoss, ...) and their functional forms
// (nn::functional::cross_entropy, ...), with checks on the target that explain
// the usual mix-ups (one-hot targets, (B, 1) labels, probabilities vs logits).
//
// Dimension letters: B = batch, C = classes, d1.. = extra dims (e.g. pixels).
//
// Reductions: None keeps one loss per element/example; Sum adds them (the
// gradient scale then grows with the batch: bug B03); Mean divides by their count
// (for NLL/CrossEntropy: by the number of non-ignored targets, or the sum of
// their class weights).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nn/module.h"

namespace gradsleuth::nn {

enum class Reduction { None, Mean, Sum };
const char* reduction_name(Reduction r);  // "none", "mean", "sum"

// ---- options (an options struct converts from a Reduction) --------------------------
struct MSELossOptions {
  MSELossOptions() = default;
  MSELossOptions(Reduction r) : reduction_(r) {}  // NOLINT: implicit on purpose
  MSELossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  // Off (the default): prediction and target must have the same shape, and
  // (B, 1) vs (B) is an error. On: they broadcast like in PyTorch, which only
  // warns — (B, 1) - (B) silently becomes (B, B) (bug B01).
  MSELossOptions& allow_broadcast(bool a) {
    allow_broadcast_ = a;
    return *this;
  }
  Reduction reduction_ = Reduction::Mean;
  bool allow_broadcast_ = false;
};

struct NLLLossOptions {
  NLLLossOptions() = default;
  NLLLossOptions(Reduction r) : reduction_(r) {}  // NOLINT
  NLLLossOptions& weight(Tensor w) {
    weight_ = std::move(w);
    return *this;
  }
  NLLLossOptions& ignore_index(int64_t i) {
    ignore_index_ = i;
    return *this;
  }
  NLLLossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  Tensor weight_;                // (C) per-class weight, optional
  int64_t ignore_index_ = -100;  // targets with this value add nothing and are not counted
  Reduction reduction_ = Reduction::Mean;
};

struct CrossEntropyLossOptions {
  CrossEntropyLossOptions() = default;
  CrossEntropyLossOptions(Reduction r) : reduction_(r) {}  // NOLINT
  CrossEntropyLossOptions& weight(Tensor w) {
    weight_ = std::move(w);
    return *this;
  }
  CrossEntropyLossOptions& ignore_index(int64_t i) {
    ignore_index_ = i;
    return *this;
  }
  CrossEntropyLossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  // eps in [0, 1]: the target becomes (1 - eps) on the true class + eps / C on every class.
  CrossEntropyLossOptions& label_smoothing(double eps) {
    label_smoothing_ = eps;
    return *this;
  }
  Tensor weight_;
  int64_t ignore_index_ = -100;
  Reduction reduction_ = Reduction::Mean;
  double label_smoothing_ = 0.0;
};

struct BCELossOptions {
  BCELossOptions() = default;
  BCELossOptions(Reduction r) : reduction_(r) {}  // NOLINT
  BCELossOptions& weight(Tensor w) {
    weight_ = std::move(w);
    return *this;
  }
  BCELossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  Tensor weight_;  // broadcasts to the input's shape, optional
  Reduction reduction_ = Reduction::Mean;
};

struct BCEWithLogitsLossOptions {
  BCEWithLogitsLossOptions() = default;
  BCEWithLogitsLossOptions(Reduction r) : reduction_(r) {}  // NOLINT
  BCEWithLogitsLossOptions& weight(Tensor w) {
    weight_ = std::move(w);
    return *this;
  }
  // Weight of the positive term, per class (broadcast along the last dim):
  // pos_weight = negatives / positives balances a rare positive class.
  BCEWithLogitsLossOptions& pos_weight(Tensor w) {
    pos_weight_ = std::move(w);
    return *this;
  }
  BCEWithLogitsLossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  Tensor weight_, pos_weight_;
  Reduction reduction_ = Reduction::Mean;
};

// ---- functional forms ------------------------------------------------------------------
namespace functional {

// (input - target)^2.   input and target: the same shape (see allow_broadcast).
Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossOptions& options = {});

// -log_probs[b, target[b]] (times weight[target[b]]).
//   log_probs (B, C) or (B, C, d1, ...) or (C);  target int64 (B) or (B, d1, ...) or ().
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NLLLossOptions& options = {});

// nll_loss(log_softmax(input, 1), target), computed stably from raw logits:
//   loss_b = logsumexp(input[b]) - input[b, target[b]]      (no exp overflow for any logit)
// With label smoothing eps:  (1 - eps) * nll + eps / C * sum_c(-log_probs[b, c]).
// Every target equal to ignore_index with Mean reduction gives 0/0 = NaN, as in PyTorch
// (the debug module's L5 check warns about it).
//   input (B, C) or (B, C, d1, ...) or (C);  target int64 (B) or (B, d1, ...) or ().
// Or class probabilities (soft labels, mixup): a floating target of the input's shape,
// each position's row over dim 1 a distribution (checked: non-negative, sums to 1):
//   loss_b = -sum_c weight_c t_bc log_softmax(input)_bc, smoothing mixes t with uniform,
// Mean divides by the number of positions (B * d1 * ...), as in PyTorch.
Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyLossOptions& options = {});

// -(y log(p) + (1 - y) log(1 - p)) with each log clamped to >= -100 (PyTorch's rule:
// a probability of exactly 0 or 1 gives a loss of 100, not inf).
//   input: probabilities in [0, 1] (anything else is an error: logits belong in
//   binary_cross_entropy_with_logits); target: the same shape, values in [0, 1].
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BCELossOptions& options = {});

// BCE on logits x, stably:   (1 - y) x + lw * softplus(-x),   lw = 1 + (pos_weight - 1) y
// (= max(x, 0) - x y + log1p(exp(-|x|)) without pos_weight). Never overflows.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BCEWithLogitsLossOptions& options = {});

// Applies a reduction to per-element losses.
Tensor reduce_loss(const Tensor& loss, Reduction reduction);

}  // namespace functional

// ---- modules -------------------------------------------------------------------------------
// The base of every loss: loss(input, target) runs forward(input, target) between
// the module's forward hooks (they see `input`) and then the loss hooks, which see
// both tensors — the debug module checks targets through them.
class Loss : public Module {
 public:
  using Module::forward;
  using Module::operator();
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
  Tensor operator()(const Tensor& input, const Tensor& target);

  using LossHook = std::function<void(Loss& self, const Tensor& input, const Tensor& target, const Tensor& loss)>;
  size_t register_loss_hook(LossHook h);
  // Pre-hooks run before the loss is computed (a check can explain a problem
  // before the loss broadcasts or raises).
  using LossPreHook = std::function<void(Loss& self, const Tensor& input, const Tensor& target)>;
  size_t register_loss_pre_hook(LossPreHook h);
  void remove_loss_hook(size_t handle);  // a handle from either register call
  virtual Reduction reduction() const = 0;
  std::vector<Bug> injectable_bugs() const override;  // B03 (sum instead of mean)

 protected:
  explicit Loss(std::string type_name) : Module(std::move(type_name)) {}

 private:
  std::vector<std::pair<size_t, LossHook>> loss_hooks_;
  std::vector<std::pair<size_t, LossPreHook>> loss_pre_hooks_;
  size_t next_loss_hook_ = 0;
};

class MSELoss : public Loss {
 public:
  MSELoss(MSELossOptions options = {}) : Loss("MSELoss"), options_(options) {}  // NOLINT
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string extra_repr() const override;  // "reduction=mean"
  Reduction reduction() const override { return options_.reduction_; }
  const MSELossOptions& options() const { return options_; }
  std::vector<Bug> injectable_bugs() const override;  // B01, B03

 private:
  MSELossOptions options_;
};

class NLLLoss : public Loss {
 public:
  NLLLoss(NLLLossOptions options = {}) : Loss("NLLLoss"), options_(std::move(options)) {}  // NOLINT
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string extra_repr() const override;  // "ignore_index=-100, reduction=mean"
  Reduction reduction() const override { return options_.reduction_; }
  const NLLLossOptions& options() const { return options_; }

 private:
  NLLLossOptions options_;
};

// Takes raw logits (no softmax before it: bug B08).
class CrossEntropyLoss : public Loss {
 public:
  CrossEntropyLoss(CrossEntropyLossOptions options = {})
      : Loss("CrossEntropyLoss"), options_(std::move(options)) {}  // NOLINT
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string extra_repr() const override;  // "ignore_index=-100, reduction=mean, label_smoothing=0"
  Reduction reduction() const override { return options_.reduction_; }
  const CrossEntropyLossOptions& options() const { return options_; }

 private:
  CrossEntropyLossOptions options_;
};

// Takes probabilities (sigmoid outputs); prefer BCEWithLogitsLoss on raw logits.
class BCELoss : public Loss {
 public:
  BCELoss(BCELossOptions options = {}) : Loss("BCELoss"), options_(std::move(options)) {}  // NOLINT
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string extra_repr() const override;
  Reduction reduction() const override { return options_.reduction_; }
  const BCELossOptions& options() const { return options_; }
  std::vector<Bug> injectable_bugs() const override;  // B03, B09

 private:
  BCELossOptions options_;
};

class BCEWithLogitsLoss : public Loss {
 public:
  BCEWithLogitsLoss(BCEWithLogitsLossOptions options = {})
      : Loss("BCEWithLogitsLoss"), options_(std::move(options)) {}  // NOLINT
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string extra_repr() const override;
  Reduction reduction() const override { return options_.reduction_; }
  const BCEWithLogitsLossOptions& options() const { return options_; }

 private:
  BCEWithLogitsLossOptions options_;
};

}  // namespace gradsleuth::nn
