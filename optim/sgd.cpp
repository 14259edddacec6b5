// SGD's update: the backend's fused step (Backend::sgd_step, core/optim_step.h) for contiguous float
// tensors on any device, tensor ops otherwise.
#include "optim/sgd.h"

#include <cmath>

#include "core/backend.h"
#include "core/ops.h"

namespace gradsleuth::optim {

namespace {

constexpr const char* kSgdStepOp = "SGD.step";

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : SGD(one_group(std::move(params)), options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options)
    : Optimizer("SGD", std::move(groups), options.lr(), options.weight_decay()), options_(options) {
  GS_CHECK(std::isfinite(options.momentum()) && options.momentum() >= 0.0, "SGD", "invalid momentum ",
           options.momentum(), "; it must be finite and >= 0");
  GS_CHECK(!options.nesterov() || (options.momentum() > 0.0 && options.dampening() == 0.0), "SGD",
           "Nesterov momentum needs momentum > 0 and dampening == 0 (got momentum ", options.momentum(), ", dampening ",
           options.dampening(), "); set .momentum(0.9).dampening(0) or turn nesterov off");
}

void SGD::update() {
  const double mom = options_.momentum(), damp = options_.dampening();
  for_each_param(
      kSgdStepOp, state_,
      [&](const ParamRef& r, State& st) {
        SgdStep step;
        step.lr = r.group.lr;
        step.weight_decay = r.group.weight_decay;
        step.momentum = mom;
        step.dampening = damp;
        step.nesterov = options_.nesterov();
        step.first = !st.momentum_buffer.defined();
        return step;
      },
      [&](const ParamRef& r, State& st, const SgdStep& step) {
        Tensor& p = r.param;
        if (mom != 0.0 && step.first)
          st.momentum_buffer = empty(p.shape(), TensorOptions(p.dtype()).device(p.device()));
        if (backend_of(p).sgd_step(p, r.grad, st.momentum_buffer, step)) return true;
        if (step.first) st.momentum_buffer = Tensor();  // not fused after all: the tensor ops start it
        return false;
      },
      [&](const ParamRef& r, State& st, const SgdStep& step) {
        // The formulas of sgd.h as tensor ops.
        Tensor d = step.weight_decay != 0.0 ? r.grad.add(r.param, step.weight_decay) : r.grad;
        if (mom != 0.0) {
          if (step.first) {
            st.momentum_buffer = d.clone();
          } else {
            st.momentum_buffer.mul_(mom).add_(d, 1.0 - damp);
          }
          d = step.nesterov ? d.add(st.momentum_buffer, mom) : st.momentum_buffer;
        }
        r.param.add_(d, -step.lr);
      });
}

std::map<std::string, Tensor> SGD::state_dict() const {
  std::map<std::string, Tensor> out;
  state_.for_each([&](size_t g, size_t i, const State& st) {
    if (st.momentum_buffer.defined()) out[state_key(g, i, "momentum_buffer")] = st.momentum_buffer.clone();
  });
  return out;
}

void SGD::load_state_dict(const std::map<std::string, Tensor>& state) {
  PerParamState<State> loaded;
  for (const auto& [full_key, t] : state) {
    auto [g, i, key] = parse_state_key(full_key);
    GS_CHECK(key == "momentum_buffer", "SGD.load_state_dict", "unknown state '", full_key,
             "'; SGD keeps only 'momentum_buffer' (was this dict saved by another optimizer?)");
    loaded.at(g, i).momentum_buffer = load_state_tensor(t, g, i, key);
  }
  state_ = std::move(loaded);
}

}  // namespace gradsleuth::optim
