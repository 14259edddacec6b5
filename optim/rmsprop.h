// RMSprop: divides the gradient by a running root-mean-square of past
// gradients (Hinton's lecture 6e), optionally centered and with momentum; the
// same update, in the same order, as torch.optim.RMSprop.
#pragma once
#include "optim/optimizer.h"

namespace gradsleuth::optim {

// RMSprop(model->parameters(), RMSpropOptions(1e-2).alpha(0.99).eps(1e-8).momentum(0).centered(false))
struct RMSpropOptions {
  explicit RMSpropOptions(double lr = 1e-2) : lr_(lr) {}
  GS_OPTIM_ARG(double, lr);
  GS_OPTIM_ARG(double, alpha) = 0.99;
  GS_OPTIM_ARG(double, eps) = 1e-8;
  GS_OPTIM_ARG(double, weight_decay) = 0.0;
  GS_OPTIM_ARG(double, momentum) = 0.0;
  GS_OPTIM_ARG(bool, centered) = false;
};

// For each parameter p with gradient g:
//   g   = g + weight_decay * p                       (L2 decay added to the gradient)
//   s   = alpha * s + (1 - alpha) * g * g            ("square_avg")
//   centered: a = alpha * a + (1 - alpha) * g        ("grad_avg")
//             avg = sqrt(s - a * a) + eps            (an estimate of the gradient's std)
//   else:     avg = sqrt(s) + eps
//   momentum > 0: buf = momentum * buf + g / avg;  p = p - lr * buf    ("momentum_buffer")
//   else:                                          p = p - lr * g / avg
// s, a, buf start at zero. State per parameter: "step", "square_avg"
// (+ "grad_avg" when centered, "momentum_buffer" when momentum > 0).
class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<Tensor> params, RMSpropOptions options = RMSpropOptions());
  // Groups: lr and weight_decay per group (kInherit takes the options'); the
  // other options apply to every group.
  RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options = RMSpropOptions());

  const RMSpropOptions& options() const { return options_; }
  std::map<std::string, Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, Tensor>& state) override;

 protected:
  void update() override;

 private:
  struct State {
    int64_t step = 0;
    Tensor square_avg, grad_avg, momentum_buffer;  // same shape as p; undefined until used
  };
  RMSpropOptions options_;
  PerParamState<State> state_;
};

}  // namespace gradsleuth::optim
