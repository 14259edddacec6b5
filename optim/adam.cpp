// Adam/AdamW's update: the backend's fused step (Backend::adam_step, core/optim_step.h) for
// contiguous float tensors on any device, tensor ops otherwise.
#include "optim/adam.h"

#include <cmath>

#include "core/backend.h"
#include "core/ops.h"

namespace gradsleuth::optim {

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Adam(one_group(std::move(params)), options) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options) : Adam("Adam", std::move(groups), options, false) {}

Adam::Adam(const char* name, std::vector<ParamGroup> groups, AdamOptions options, bool decoupled)
    : Optimizer(name, std::move(groups), options.lr(), options.weight_decay()),
      options_(options),
      decoupled_(decoupled),
      step_op_(decoupled ? "AdamW.step" : "Adam.step") {
  GS_CHECK(std::isfinite(options.eps()) && options.eps() >= 0.0, name, "invalid eps ", options.eps(),
           "; it must be finite and >= 0 (1e-8 is usual)");
  const auto [b1, b2] = options.betas();
  GS_CHECK(b1 >= 0.0 && b1 < 1.0 && b2 >= 0.0 && b2 < 1.0, name, "invalid betas (", b1, ", ", b2,
           "); both must be in [0, 1), e.g. .betas({0.9, 0.999})");
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options) : AdamW(one_group(std::move(params)), options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions o)
    : Adam("AdamW", std::move(groups),
           AdamOptions(o.lr()).betas(o.betas()).eps(o.eps()).weight_decay(o.weight_decay()).amsgrad(o.amsgrad()),
           true) {}

void Adam::update() {
  const auto [beta1, beta2] = options_.betas();
  const double eps = options_.eps();
  const bool amsgrad = options_.amsgrad();
  for_each_param(
      step_op_, state_,
      [&](const ParamRef& r, State& st) {
        const Tensor& p = r.param;
        if (st.step == 0 || !st.exp_avg.defined()) {
          const TensorOptions opts = TensorOptions(p.dtype()).device(p.device());
          st.exp_avg = zeros(p.shape(), opts);
          st.exp_avg_sq = zeros(p.shape(), opts);
        }
        if (amsgrad && !st.max_exp_avg_sq.defined())
          st.max_exp_avg_sq = zeros(p.shape(), TensorOptions(p.dtype()).device(p.device()));
        const int64_t t = ++st.step;
        const double lr = r.group.lr, wd = r.group.weight_decay;
        AdamStep step;
        step.beta1 = beta1;
        step.beta2 = beta2;
        step.eps = eps;
        step.weight_decay = wd;
        step.lr = lr;
        step.step_size = lr / (1.0 - std::pow(beta1, static_cast<double>(t)));
        step.bc2_sqrt = std::sqrt(1.0 - std::pow(beta2, static_cast<double>(t)));
        step.l2 = !decoupled_ && wd != 0.0;
        step.decoupled = decoupled_ && wd != 0.0;
        step.amsgrad = amsgrad;
        return step;
      },
      [&](const ParamRef& r, State& st, const AdamStep& step) {
        return backend_of(r.param).adam_step(r.param, r.grad, st.exp_avg, st.exp_avg_sq, st.max_exp_avg_sq, step);
      },
      [&](const ParamRef& r, State& st, const AdamStep& step) {
        // The formulas of adam.h as tensor ops, on (p, g, exp_avg, exp_avg_sq, max_exp_avg_sq).
        auto update = [&](Tensor& p, const Tensor& g, Tensor& m, Tensor& v2, Tensor& vmax) {
          Tensor grad = step.l2 ? g.add(p, step.weight_decay) : g;
          if (step.decoupled) p.mul_(1.0 - step.lr * step.weight_decay);
          m.mul_(beta1).add_(grad, 1.0 - beta1);
          v2.mul_(beta2).add_(grad * grad, 1.0 - beta2);
          Tensor v = v2;
          if (amsgrad) {
            vmax.copy_(maximum(vmax, v2));
            v = vmax;
          }
          Tensor denom = v.sqrt() / step.bc2_sqrt + eps;
          p.add_(m / denom, -step.step_size);
        };
        in_float32(update, r.param, r.grad, st.exp_avg, st.exp_avg_sq, st.max_exp_avg_sq);
      });
}

std::map<std::string, Tensor> Adam::state_dict() const {
  std::map<std::string, Tensor> out;
  state_.for_each([&](size_t g, size_t i, const State& st) {
    if (st.step == 0) return;
    out[state_key(g, i, "step")] = tensor(std::vector<int64_t>{st.step}, Shape{});
    out[state_key(g, i, "exp_avg")] = st.exp_avg.clone();
    out[state_key(g, i, "exp_avg_sq")] = st.exp_avg_sq.clone();
    if (st.max_exp_avg_sq.defined()) out[state_key(g, i, "max_exp_avg_sq")] = st.max_exp_avg_sq.clone();
  });
  return out;
}

void Adam::load_state_dict(const std::map<std::string, Tensor>& state) {
  const std::string op = name() + ".load_state_dict";
  PerParamState<State> loaded;
  std::vector<std::pair<size_t, size_t>> seen;
  for (const auto& [full_key, t] : state) {
    auto [g, i, key] = parse_state_key(full_key);
    State& st = loaded.at(g, i);
    seen.emplace_back(g, i);
    if (key == "step") {
      GS_CHECK(t.defined() && t.numel() == 1, op, "state '", full_key, "' must hold one number, got ",
               t.defined() ? t.str() : "undefined");
      st.step = t.item<int64_t>();
    } else if (key == "exp_avg") {
      st.exp_avg = load_state_tensor(t, g, i, key);
    } else if (key == "exp_avg_sq") {
      st.exp_avg_sq = load_state_tensor(t, g, i, key);
    } else if (key == "max_exp_avg_sq") {
      st.max_exp_avg_sq = load_state_tensor(t, g, i, key);
    } else {
      GS_FAIL(op, "unknown state '", full_key, "'; ", name(),
              " keeps 'step', 'exp_avg', 'exp_avg_sq' and 'max_exp_avg_sq' (was this dict saved by another "
              "optimizer?)");
    }
  }
  for (auto [g, i] : seen) {
    const State& st = loaded.at(g, i);
    GS_CHECK(st.step > 0 && st.exp_avg.defined() && st.exp_avg_sq.defined(), op, "the state of parameter ", i,
             " of group ", g, " is incomplete: it needs '", state_key(g, i, "step"), "' (> 0), '",
             state_key(g, i, "exp_avg"), "' and '", state_key(g, i, "exp_avg_sq"), "'");
  }
  state_ = std::move(loaded);
}

}  // namespace gradsleuth::optim
