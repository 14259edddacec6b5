// Optimizer: the base of SGD, Adam, AdamW, RMSprop. Holds parameter groups
// (each with its own learning rate), zeroes gradients, and tells listeners
// (the debug module) about every step so checks run during normal use.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/autocast.h"
#include "core/error.h"
#include "core/optim_step.h"
#include "core/tensor.h"

namespace gradsleuth::optim {

// Declares one chainable option, PyTorch-C++ style (torch's TORCH_ARG):
//   SGDOptions(0.1).momentum(0.9)   sets it and returns the options;
//   opts.momentum()                 reads it.
#define GS_OPTIM_ARG(T, name)               \
 public:                                    \
  auto& name(const T& new_value) {          \
    this->name##_ = new_value;              \
    return *this;                           \
  }                                         \
  const T& name() const { return name##_; } \
                                            \
 private:                                   \
  T name##_

// A set of parameters that share a learning rate (and weight decay).
// lr / weight_decay left at kInherit take the optimizer's options:
//   SGD({{backbone, 1e-3}, {head}}, SGDOptions(0.1))   -> head gets lr 0.1.
// Every other hyper-parameter (momentum, betas, eps, ...) is shared by all groups.
struct ParamGroup {
  static constexpr double kInherit = std::numeric_limits<double>::quiet_NaN();
  ParamGroup() = default;
  ParamGroup(std::vector<Tensor> params, double lr = kInherit, double weight_decay = kInherit, std::string name = "")
      : params(std::move(params)), lr(lr), weight_decay(weight_decay), name(std::move(name)) {}

  std::vector<Tensor> params;
  double lr = kInherit;            // after construction always a number (schedulers change it)
  double weight_decay = kInherit;  // after construction always a number
  std::string name;                // optional label ("backbone", "head")
};

template <class S>
class PerParamState;

class Optimizer {
 public:
  // Groups whose lr / weight_decay are kInherit get 1e-3 / 0.
  Optimizer(std::string name, std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;

  // One update of every parameter that has a gradient (under NoGradGuard).
  void step();
  // Clears every parameter's .grad (sets it undefined, as PyTorch's set_to_none).
  void zero_grad();

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Adds a group (e.g. layers unfrozen while fine-tuning); kInherit values take
  // the optimizer's defaults. Its parameters start with empty state.
  void add_param_group(ParamGroup group);
  double lr() const { return groups_.empty() ? 0.0 : groups_[0].lr; }
  void set_lr(double lr);  // every group
  // The one checked way to change a group's lr (set_lr and every scheduler use it): refuses a value
  // that is not finite or is negative, naming `who` (the scheduler), the group and the value.
  void set_group_lr(size_t group, double lr, const std::string& who);
  const std::string& name() const { return name_; }
  int64_t steps_taken() const { return steps_; }
  // True when step() runs without zero_grad() since the previous step (O5).
  bool zero_grad_skipped() const { return steps_ > 0 && !zeroed_since_step_; }
  // O5, detected during normal use: step() found gradients accumulated across
  // steps (the buffer of a previous step grew) without set_accumulating(true).
  // step() then also sends a warning (core/warning.h) that the debug monitor
  // turns into a finding.
  bool accumulation_detected() const { return accumulation_detected_; }
  // Gradient accumulation on purpose: the debug check for a forgotten
  // zero_grad stays quiet while this is on.
  void set_accumulating(bool on) { accumulating_ = on; }
  bool accumulating() const { return accumulating_; }
  // While accumulating: the zero_grad() calls that cleared gradients no step() had used (a
  // backward since the previous zero_grad() and no step between), so that backward's gradient
  // never reached an update. Once per accumulation cycle's leftover is harmless; once per
  // micro-batch means each step sees only the last micro-batch (O5 reads it).
  int64_t gradients_discarded() const { return discarded_; }
  // Fused kernels: contiguous CPU float32/float64 parameters are updated by one
  // loop over their elements instead of several tensor ops. Off = tensor ops
  // everywhere (the reference path the fused loops are tested against).
  void set_fused(bool on) { fused_ = on; }
  bool fused() const { return fused_; }
  // float32 master weights for float16/bfloat16 parameters (Micikevicius et al., "Mixed Precision
  // Training", 2018): each update runs on a float32 copy kept across steps and is rounded into the
  // 16-bit parameter after it, so updates smaller than half the parameter's last bit add up instead of
  // vanishing, and the state (momenta, moments) is float32. Off by default, as in PyTorch, whose
  // optimizers step a 16-bit parameter in its own dtype. Set before the first step. A parameter
  // changed from outside (a checkpoint loaded into it) restarts its copy from the new value; the
  // copies are not saved in state_dict().
  void set_master_weights(bool on);
  bool master_weights() const { return master_weights_; }
  // The float32 copy of parameter `index` of group `group`; undefined before its first step or when off.
  Tensor master_weight(size_t group, size_t index) const;

  // Listeners run before and after each step (the debug monitor attaches here).
  using StepHook = std::function<void(Optimizer&)>;
  size_t add_pre_step_hook(StepHook h);
  size_t add_post_step_hook(StepHook h);
  void remove_hook(size_t id);

  // Per-parameter state (momentum buffers, Adam moments), named "g.i.key" for
  // group g, parameter i; for checkpoints. state_dict() returns copies, so
  // later steps do not change a dict already taken.
  virtual std::map<std::string, Tensor> state_dict() const { return {}; }
  virtual void load_state_dict(const std::map<std::string, Tensor>& state) { (void)state; }

 protected:
  // Derived optimizers pass their options' lr / weight_decay as the defaults
  // for groups (and for add_param_group) that leave them at kInherit. Checks what every
  // optimizer requires: at least one parameter, lr and weight_decay finite and >= 0.
  Optimizer(std::string name, std::vector<ParamGroup> groups, double default_lr, double default_weight_decay);

  // The one group of the `std::vector<Tensor> params` constructors.
  static std::vector<ParamGroup> one_group(std::vector<Tensor> params);

  // The update rule: called by step() under NoGradGuard.
  virtual void update() = 0;

  // One parameter of the update, as for_each_param hands it to the update rule.
  struct ParamRef {
    const ParamGroup& group;
    size_t group_index;
    size_t index;   // within the group
    Tensor& param;  // p
    Tensor& grad;   // p.grad(), defined and of p's shape
  };
  // The loop every update rule shares. For each parameter p, in group order, whose gradient is
  // defined (one no gradient reached keeps its value and its state): checks the gradient's shape
  // (raising as `op`, e.g. "Adam.step"), takes p's entry in `state`, calls prepare(ref, st), which
  // makes the state it lacks and returns the step's numbers (an SgdStep, AdamStep, ...), marks p
  // modified as `op`, then runs fused(ref, st, step) when fusable(p, grad), and
  // reference(ref, st, step), the tensor ops, unless the fused step returned true.
  template <class S, class Prepare, class Fused, class Reference>
  void for_each_param(const char* op, PerParamState<S>& state, Prepare&& prepare, Fused&& fused, Reference&& reference);

  // True when p (and its gradient g) can take the fused loop: fused() is on,
  // both are contiguous CPU tensors of the same float dtype.
  bool fusable(const Tensor& p, const Tensor& g) const;

  // The tensor-op update(p, g, state...) of a reference path: on the tensors themselves, or, for a
  // float16/bfloat16 parameter, on float32 copies of all of them, each rounded back once at the end
  // as the fused step does (a step's intermediates, a tiny g * g or Adam's eps = 1e-8, would round
  // to 16 bits on the way). Undefined state tensors stay undefined.
  template <class F, class... S>
  static void in_float32(F&& update, Tensor& p, const Tensor& g, S&... state) {
    if (!is_reduced_float(p.dtype())) return update(p, g, state...);
    auto wide = [](const Tensor& t) { return t.defined() ? t.to(kFloat32) : t; };
    Tensor pw = wide(p);
    std::array<Tensor, sizeof...(S)> sw{wide(state)...};
    std::apply([&](auto&... w) { update(pw, wide(g), w...); }, sw);
    p.copy_(pw);
    size_t k = 0;
    ((sw[k].defined() ? (void)state.copy_(sw[k]) : (void)0, ++k), ...);
  }
  // Marks p as changed by this optimizer's step: bumps its storage version,
  // logged as `op` (a string literal such as "SGD.step"), so a tensor saved
  // for backward that is p raises if that backward runs after the step.
  // The fused loops write through data_ptr, which bumps nothing by itself.
  static void mark_modified(const Tensor& p, const char* op);

  // State entries: "g.i.key".
  static std::string state_key(size_t group, size_t index, const std::string& key);
  // Splits "g.i.key" and checks that group g has a parameter i; raises naming
  // this optimizer otherwise.
  std::tuple<size_t, size_t, std::string> parse_state_key(const std::string& full_key) const;
  // A private copy of a loaded state tensor for parameter (g, i): checks its
  // shape against the parameter and converts it to the parameter's dtype/device.
  Tensor load_state_tensor(const Tensor& saved, size_t group, size_t index, const std::string& key) const;

  std::vector<ParamGroup> groups_;

 private:
  void check_group(ParamGroup& g, size_t gi, const std::vector<const TensorImpl*>& seen) const;

  std::string name_;
  double default_lr_ = 1e-3;
  double default_weight_decay_ = 0.0;
  int64_t steps_ = 0;
  bool zeroed_since_step_ = true;
  bool accumulating_ = false;
  int64_t discarded_ = 0;
  bool accumulation_detected_ = false;
  bool fused_ = true;
  bool master_weights_ = false;
  struct Master {
    Tensor weight;          // float32
    uint64_t version = 0;   // the parameter's storage version after the last rounding into it
  };
  std::map<std::pair<size_t, size_t>, Master> masters_;
  // The float32 copy of p (group gi, index i), made from p when it is new or p changed from outside.
  Tensor& master_for(size_t gi, size_t i, const Tensor& p);
  void round_into(size_t gi, size_t i, Tensor& p);
  void note_rounded(size_t gi, size_t i, const Tensor& p);  // a fused step rounded the master into p
  // Where a fused step may round p's new values: into p itself (a 16-bit parameter with a master
  // weight, on the CPU), or into autocast's copy of it (`kept`); none otherwise.
  static RoundedCopy rounded_copy(const Tensor& p, bool master, detail::LowPrecisionCopy* kept, bool* written);
  std::vector<std::pair<const TensorImpl*, uint64_t>> grads_after_step_;  // (buffer, version) after the last step
  void remember_grads();
  bool accumulated_since_step() const;
  struct Hook {
    size_t id;
    bool pre;
    StepHook fn;
  };
  std::vector<Hook> hooks_;
  size_t next_id_ = 0;
};

// Per-parameter state of type S, indexed [group][index]; grows as groups do.
template <class S>
class PerParamState {
 public:
  S& at(size_t g, size_t i) {
    if (state_.size() <= g) state_.resize(g + 1);
    if (state_[g].size() <= i) state_[g].resize(i + 1);
    return state_[g][i];
  }
  // Visits every (g, i, state) held so far.
  template <class F>
  void for_each(F&& f) const {
    for (size_t g = 0; g < state_.size(); ++g)
      for (size_t i = 0; i < state_[g].size(); ++i) f(g, i, state_[g][i]);
  }
  void clear() { state_.clear(); }

 private:
  std::vector<std::vector<S>> state_;
};

template <class S, class Prepare, class Fused, class Reference>
void Optimizer::for_each_param(const char* op, PerParamState<S>& state, Prepare&& prepare, Fused&& fused,
                               Reference&& reference) {
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& group = groups_[gi];
    for (size_t i = 0; i < group.params.size(); ++i) {
      Tensor p = group.params[i];
      Tensor g = p.grad();
      if (!g.defined()) continue;  // no gradient reached p: leave it and its state alone
      GS_CHECK(g.shape() == p.shape(), op, "parameter ", i, " of group ", gi, " is ", p.str(), " but its gradient is ",
               g.str(), "; something replaced .grad with a tensor of another shape");
      // With master weights, the step runs on p's float32 copy and is rounded once into p after it.
      // The fused step on the CPU reads p's 16-bit gradient block by block; the tensor ops take
      // it widened.
      const bool master = master_weights_ && is_reduced_float(p.dtype());
      Tensor& target = master ? master_for(gi, i, p) : p;
      const bool grad16 = master && fused_ && p.device().is_cpu() && g.is_contiguous();
      Tensor step_grad = master && !grad16 ? g.to(kFloat32) : g;
      const ParamRef ref{group, gi, i, target, step_grad};
      S& st = state.at(gi, i);
      auto step = prepare(ref, st);
      // A fused step that can also round the new values into p (master weights) or into
      // autocast's copy of p does so as it computes them (RoundedCopy, core/optim_step.h).
      bool rounded = false;
      detail::LowPrecisionCopy* kept = master ? nullptr : detail::refreshable_copy(p);
      if constexpr (requires { step.copy; }) step.copy = rounded_copy(p, master, kept, &rounded);
      mark_modified(p, op);
      if (!((grad16 || fusable(ref.param, ref.grad)) && fused(ref, st, step))) {
        if (grad16) step_grad = g.to(kFloat32);
        reference(ref, st, step);
      }
      if (kept != nullptr && rounded) kept->source_version = p.storage()->version();
      if (master) rounded ? note_rounded(gi, i, p) : round_into(gi, i, p);
    }
  }
}

}  // namespace gradsleuth::optim
