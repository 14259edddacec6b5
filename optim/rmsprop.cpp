// RMSprop's update: the backend's fused step (Backend::rmsprop_step, core/optim_step.h) for
// contiguous float tensors on any device, tensor ops otherwise.
#include "optim/rmsprop.h"

#include <cmath>

#include "core/backend.h"
#include "core/ops.h"

namespace gradsleuth::optim {

namespace {

constexpr const char* kRmspropStepOp = "RMSprop.step";

}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options) : RMSprop(one_group(std::move(params)), options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options)
    : Optimizer("RMSprop", std::move(groups), options.lr(), options.weight_decay()), options_(options) {
  GS_CHECK(options.alpha() >= 0.0 && options.alpha() <= 1.0, "RMSprop", "invalid alpha ", options.alpha(),
           "; the smoothing constant must be in [0, 1] (0.99 is usual)");
  GS_CHECK(std::isfinite(options.eps()) && options.eps() >= 0.0, "RMSprop", "invalid eps ", options.eps(),
           "; it must be finite and >= 0");
  GS_CHECK(std::isfinite(options.momentum()) && options.momentum() >= 0.0, "RMSprop", "invalid momentum ",
           options.momentum(), "; it must be finite and >= 0");
}

void RMSprop::update() {
  const double alpha = options_.alpha(), eps = options_.eps(), mom = options_.momentum();
  const bool centered = options_.centered();
  for_each_param(
      kRmspropStepOp, state_,
      [&](const ParamRef& r, State& st) {
        const Tensor& p = r.param;
        const TensorOptions opts = TensorOptions(p.dtype()).device(p.device());
        if (!st.square_avg.defined()) st.square_avg = zeros(p.shape(), opts);
        if (centered && !st.grad_avg.defined()) st.grad_avg = zeros(p.shape(), opts);
        if (mom > 0.0 && !st.momentum_buffer.defined()) st.momentum_buffer = zeros(p.shape(), opts);
        ++st.step;
        RmspropStep step;
        step.lr = r.group.lr;
        step.alpha = alpha;
        step.eps = eps;
        step.weight_decay = r.group.weight_decay;
        step.momentum = mom;
        step.centered = centered;
        return step;
      },
      [&](const ParamRef& r, State& st, const RmspropStep& step) {
        return backend_of(r.param).rmsprop_step(r.param, r.grad, st.square_avg, st.grad_avg, st.momentum_buffer, step);
      },
      [&](const ParamRef& r, State& st, const RmspropStep& step) {
        // The formulas of rmsprop.h as tensor ops, on (p, g, square_avg, grad_avg, momentum_buffer).
        auto update = [&](Tensor& p, const Tensor& g, Tensor& sq, Tensor& ga, Tensor& buf) {
          Tensor grad = step.weight_decay != 0.0 ? g.add(p, step.weight_decay) : g;
          sq.mul_(alpha).add_(grad * grad, 1.0 - alpha);
          Tensor avg;
          if (centered) {
            ga.mul_(alpha).add_(grad, 1.0 - alpha);
            avg = (sq - ga * ga).sqrt() + eps;
          } else {
            avg = sq.sqrt() + eps;
          }
          if (mom > 0.0) {
            buf.mul_(mom).add_(grad / avg);
            p.add_(buf, -step.lr);
          } else {
            p.add_(grad / avg, -step.lr);
          }
        };
        in_float32(update, r.param, r.grad, st.square_avg, st.grad_avg, st.momentum_buffer);
      });
}

std::map<std::string, Tensor> RMSprop::state_dict() const {
  std::map<std::string, Tensor> out;
  state_.for_each([&](size_t g, size_t i, const State& st) {
    if (st.step == 0) return;
    out[state_key(g, i, "step")] = tensor(std::vector<int64_t>{st.step}, Shape{});
    out[state_key(g, i, "square_avg")] = st.square_avg.clone();
    if (st.grad_avg.defined()) out[state_key(g, i, "grad_avg")] = st.grad_avg.clone();
    if (st.momentum_buffer.defined()) out[state_key(g, i, "momentum_buffer")] = st.momentum_buffer.clone();
  });
  return out;
}

void RMSprop::load_state_dict(const std::map<std::string, Tensor>& state) {
  const char* op = "RMSprop.load_state_dict";
  PerParamState<State> loaded;
  for (const auto& [full_key, t] : state) {
    auto [g, i, key] = parse_state_key(full_key);
    State& st = loaded.at(g, i);
    if (key == "step") {
      GS_CHECK(t.defined() && t.numel() == 1, op, "state '", full_key, "' must hold one number, got ",
               t.defined() ? t.str() : "undefined");
      st.step = t.item<int64_t>();
    } else if (key == "square_avg") {
      st.square_avg = load_state_tensor(t, g, i, key);
    } else if (key == "grad_avg") {
      st.grad_avg = load_state_tensor(t, g, i, key);
    } else if (key == "momentum_buffer") {
      st.momentum_buffer = load_state_tensor(t, g, i, key);
    } else {
      GS_FAIL(op, "unknown state '", full_key,
              "'; RMSprop keeps 'step', 'square_avg', 'grad_avg' and 'momentum_buffer' (was this dict saved by "
              "another optimizer?)");
    }
  }
  state_ = std::move(loaded);
}

}  // namespace gradsleuth::optim
