// Adam and AdamW: adaptive moment estimation with bias correction, L2
// (Adam) or decoupled (AdamW) weight decay and AMSGrad; the same update, in
// the same order, as torch.optim.Adam / torch.optim.AdamW.
#pragma once
#include <utility>

#include "optim/optimizer.h"

namespace gradsleuth::optim {

using Betas = std::pair<double, double>;  // (beta1, beta2)

// Adam(model->parameters(), AdamOptions(1e-3).betas({0.9, 0.999}).eps(1e-8).weight_decay(0).amsgrad(false))
struct AdamOptions {
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  GS_OPTIM_ARG(double, lr);
  GS_OPTIM_ARG(Betas, betas) = {0.9, 0.999};
  GS_OPTIM_ARG(double, eps) = 1e-8;
  GS_OPTIM_ARG(double, weight_decay) = 0.0;
  GS_OPTIM_ARG(bool, amsgrad) = false;
};

// AdamW(model->parameters(), AdamWOptions(1e-3).weight_decay(1e-2)); PyTorch's defaults (weight_decay 1e-2).
struct AdamWOptions {
  explicit AdamWOptions(double lr = 1e-3) : lr_(lr) {}
  GS_OPTIM_ARG(double, lr);
  GS_OPTIM_ARG(Betas, betas) = {0.9, 0.999};
  GS_OPTIM_ARG(double, eps) = 1e-8;
  GS_OPTIM_ARG(double, weight_decay) = 1e-2;
  GS_OPTIM_ARG(bool, amsgrad) = false;
};

// For each parameter p with gradient g; t counts p's own steps (from 1):
//   Adam:  g = g + weight_decay * p            (L2 decay: part of the gradient, so it is rescaled below)
//   AdamW: p = p * (1 - lr * weight_decay)     (decoupled decay: shrinks p directly)
//   m = beta1 * m + (1 - beta1) * g            first moment          ("exp_avg")
//   v = beta2 * v + (1 - beta2) * g * g        second moment         ("exp_avg_sq")
//   amsgrad: v_max = max(v_max, v), used in place of v below         ("max_exp_avg_sq")
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps  bias-corrected
//   p = p - (lr / (1 - beta1^t)) * (m / denom)
// m, v, v_max start at zero. State per parameter: "step", "exp_avg", "exp_avg_sq"
// (+ "max_exp_avg_sq" with amsgrad).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = AdamOptions());
  // Groups: lr and weight_decay per group (kInherit takes the options'); the
  // other options apply to every group.
  Adam(std::vector<ParamGroup> groups, AdamOptions options = AdamOptions());

  const AdamOptions& options() const { return options_; }
  bool decoupled_weight_decay() const { return decoupled_; }
  std::map<std::string, Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, Tensor>& state) override;

 protected:
  Adam(const char* name, std::vector<ParamGroup> groups, AdamOptions options, bool decoupled);
  void update() override;

 private:
  struct State {
    int64_t step = 0;
    Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;  // same shape as p; undefined before p's first step
  };
  AdamOptions options_;
  bool decoupled_;
  const char* step_op_;  // "Adam.step" / "AdamW.step": names the version bump
  PerParamState<State> state_;
};

// Adam with decoupled weight decay (Loshchilov & Hutter): see Adam above.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = AdamWOptions());
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = AdamWOptions());
};

}  // namespace gradsleuth::optim
