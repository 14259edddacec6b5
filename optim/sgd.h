// SGD: stochastic gradient descent with momentum, dampening, Nesterov momentum
// and L2 weight decay; the same update, in the same order, as torch.optim.SGD.
#pragma once
#include "optim/optimizer.h"

namespace gradsleuth::optim {

// SGD(model->parameters(), SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(1e-4))
struct SGDOptions {
  explicit SGDOptions(double lr) : lr_(lr) {}
  GS_OPTIM_ARG(double, lr);
  GS_OPTIM_ARG(double, momentum) = 0.0;
  GS_OPTIM_ARG(double, dampening) = 0.0;
  GS_OPTIM_ARG(double, weight_decay) = 0.0;
  GS_OPTIM_ARG(bool, nesterov) = false;
};

// For each parameter p with gradient g (lr, weight_decay from p's group):
//   d = g + weight_decay * p                          (L2 decay added to the gradient)
//   if momentum != 0:
//     buf = d                                         on p's first step (no dampening)
//     buf = momentum * buf + (1 - dampening) * d      afterwards
//     d   = nesterov ? d + momentum * buf : buf
//   p = p - lr * d
// State per parameter: "momentum_buffer" (only when momentum != 0).
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  // Groups: lr and weight_decay per group (kInherit takes the options'); the
  // other options apply to every group.
  SGD(std::vector<ParamGroup> groups, SGDOptions options);

  const SGDOptions& options() const { return options_; }
  std::map<std::string, Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, Tensor>& state) override;

 protected:
  void update() override;

 private:
  struct State {
    Tensor momentum_buffer;  // same shape as p; undefined until p's first step
  };
  SGDOptions options_;
  PerParamState<State> state_;
};

}  // namespace gradsleuth::optim
