// Optimizer: the base of SGD, Adam, AdamW, RMSprop. Holds parameter groups
// (each with its own learning rate), zeroes gradients, and tells listeners
// (the debug module) about every step so checks run during normal use.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace gradsleuth::optim {

struct ParamGroup {
  std::vector<Tensor> params;
  double lr = 1e-3;
  double weight_decay = 0.0;
  std::string name;  // optional label ("backbone", "head")
};

class Optimizer {
 public:
  Optimizer(std::string name, std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;

  // One update of every parameter that has a gradient (under NoGradGuard).
  void step();
  // Clears every parameter's .grad (sets it undefined, as PyTorch's set_to_none).
  void zero_grad();

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  double lr() const { return groups_.empty() ? 0.0 : groups_[0].lr; }
  void set_lr(double lr);  // every group
  const std::string& name() const { return name_; }
  int64_t steps_taken() const { return steps_; }
  // True when step() runs without zero_grad() since the previous step (O5).
  bool zero_grad_skipped() const { return steps_ > 0 && !zeroed_since_step_; }
  // Gradient accumulation on purpose: the debug check for a forgotten
  // zero_grad stays quiet while this is on.
  void set_accumulating(bool on) { accumulating_ = on; }
  bool accumulating() const { return accumulating_; }

  // Listeners run before and after each step (the debug monitor attaches here).
  using StepHook = std::function<void(Optimizer&)>;
  size_t add_pre_step_hook(StepHook h);
  size_t add_post_step_hook(StepHook h);
  void remove_hook(size_t id);

  // Per-parameter state (momentum buffers, Adam moments), named "g.i.key" for
  // group g, parameter i; for checkpoints.
  virtual std::map<std::string, Tensor> state_dict() const { return {}; }
  virtual void load_state_dict(const std::map<std::string, Tensor>& state) { (void)state; }

 protected:
  // The update rule: called by step() under NoGradGuard.
  virtual void update() = 0;
  std::vector<ParamGroup> groups_;

 private:
  std::string name_;
  int64_t steps_ = 0;
  bool zeroed_since_step_ = true;
  bool accumulating_ = false;
  struct Hook { size_t id; bool pre; StepHook fn; };
  std::vector<Hook> hooks_;
  size_t next_id_ = 0;
};

}  // namespace gradsleuth::optim
