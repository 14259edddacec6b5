// Optimizer base: step bookkeeping, zero_grad and step hooks.
#include "optim/optimizer.h"

#include <algorithm>

#include "core/autograd.h"

namespace gradsleuth::optim {

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups) : groups_(std::move(groups)), name_(std::move(name)) {
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      GS_CHECK(p.defined() && p.is_floating_point(), name_, "parameter ", i, " of group ", g,
               " must be a defined floating-point tensor, got ", p.defined() ? p.str() : "undefined");
      GS_CHECK(p.is_leaf(), name_, "parameter ", p.str(), " is not a leaf tensor (it was computed by '",
               p.grad_fn()->name(), "'); optimize the leaf it came from");
    }
}

void Optimizer::step() {
  std::vector<Hook> hooks = hooks_;
  for (auto& h : hooks)
    if (h.pre) h.fn(*this);
  {
    NoGradGuard ng;
    update();
  }
  ++steps_;
  zeroed_since_step_ = false;
  for (auto& h : hooks)
    if (!h.pre) h.fn(*this);
}

void Optimizer::zero_grad() {
  for (auto& g : groups_)
    for (auto& p : g.params) p.zero_grad();
  zeroed_since_step_ = true;
}

void Optimizer::set_lr(double lr) {
  for (auto& g : groups_) g.lr = lr;
}

size_t Optimizer::add_pre_step_hook(StepHook h) {
  hooks_.push_back({next_id_, true, std::move(h)});
  return next_id_++;
}
size_t Optimizer::add_post_step_hook(StepHook h) {
  hooks_.push_back({next_id_, false, std::move(h)});
  return next_id_++;
}
void Optimizer::remove_hook(size_t id) {
  hooks_.erase(std::remove_if(hooks_.begin(), hooks_.end(), [&](const Hook& h) { return h.id == id; }), hooks_.end());
}

}  // namespace gradsleuth::optim
