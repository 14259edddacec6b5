// RMSprop's update: a fused loop for contiguous CPU float tensors, tensor ops otherwise.
#include "optim/rmsprop.h"

#include <cmath>

#include "core/ops.h"
#include "optim/fused.h"

namespace gradsleuth::optim {

namespace {

constexpr const char* kStepOp = "RMSprop.step";

// The step's numbers, in the parameter's type.
template <class T>
struct RMSpropCoeffs {
  T lr, alpha, one_minus_alpha, eps, weight_decay, momentum;
};

// The whole update of elements [begin, end) of one parameter, in one pass.
// p, g, s, a, buf: contiguous; a is unused unless Centered, buf unless
// Momentum. The flags are the options, fixed at compile time.
template <class T, bool Decay, bool Centered, bool Momentum>
void rmsprop_fused(int64_t begin, int64_t end, T* __restrict p, const T* __restrict g, T* __restrict s, T* __restrict a,
                   T* __restrict buf, const RMSpropCoeffs<T> c) {
  for (int64_t j = begin; j < end; ++j) {
    T gj = g[j];
    if constexpr (Decay) gj = gj + c.weight_decay * p[j];
    const T sj = s[j] * c.alpha + gj * gj * c.one_minus_alpha;
    s[j] = sj;
    T avg;
    if constexpr (Centered) {
      const T aj = a[j] * c.alpha + gj * c.one_minus_alpha;
      a[j] = aj;
      avg = std::sqrt(sj - aj * aj) + c.eps;
    } else {
      avg = std::sqrt(sj) + c.eps;
    }
    if constexpr (Momentum) {
      const T b = buf[j] * c.momentum + gj / avg;
      buf[j] = b;
      p[j] = p[j] - c.lr * b;
    } else {
      p[j] = p[j] - c.lr * (gj / avg);
    }
  }
}

}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options) : RMSprop(one_group(std::move(params)), options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options)
    : Optimizer("RMSprop", std::move(groups), options.lr(), options.weight_decay()), options_(options) {
  size_t n = 0;
  for (const auto& g : groups_) n += g.params.size();
  GS_CHECK(n > 0, "RMSprop", "got an empty parameter list; pass model->parameters() after the layers are registered");
  GS_CHECK(options.lr() >= 0.0, "RMSprop", "invalid learning rate ", options.lr(), "; it must be >= 0");
  GS_CHECK(options.alpha() >= 0.0 && options.alpha() <= 1.0, "RMSprop", "invalid alpha ", options.alpha(),
           "; the smoothing constant must be in [0, 1] (0.99 is usual)");
  GS_CHECK(options.eps() >= 0.0, "RMSprop", "invalid eps ", options.eps(), "; it must be >= 0");
  GS_CHECK(options.momentum() >= 0.0, "RMSprop", "invalid momentum ", options.momentum(), "; it must be >= 0");
  GS_CHECK(options.weight_decay() >= 0.0, "RMSprop", "invalid weight_decay ", options.weight_decay(),
           "; it must be >= 0");
}

void RMSprop::update() {
  const double alpha = options_.alpha(), eps = options_.eps(), mom = options_.momentum();
  const bool centered = options_.centered();
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& group = groups_[gi];
    const double lr = group.lr, wd = group.weight_decay;
    for (size_t i = 0; i < group.params.size(); ++i) {
      Tensor p = group.params[i];
      Tensor g = p.grad();
      if (!g.defined()) continue;  // no gradient reached p: leave it and its state alone
      GS_CHECK(g.shape() == p.shape(), "RMSprop.step", "parameter ", i, " of group ", gi, " is ", p.str(),
               " but its gradient is ", g.str(), "; something replaced .grad with a tensor of another shape");
      State& st = state_.at(gi, i);
      const TensorOptions opts = TensorOptions(p.dtype()).device(p.device());
      if (!st.square_avg.defined()) st.square_avg = zeros(p.shape(), opts);
      if (centered && !st.grad_avg.defined()) st.grad_avg = zeros(p.shape(), opts);
      if (mom > 0.0 && !st.momentum_buffer.defined()) st.momentum_buffer = zeros(p.shape(), opts);
      ++st.step;
      mark_modified(p, kStepOp);

      if (fusable(p, g)) {
        detail::with_float_type(p.dtype(), [&](auto tag) {
          using T = decltype(tag);
          auto t_ = [](double x) { return static_cast<T>(x); };
          const RMSpropCoeffs<T> c{t_(lr), t_(alpha), t_(1.0 - alpha), t_(eps), t_(wd), t_(mom)};
          T *pp = p.data_ptr<T>(), *s = st.square_avg.data_ptr<T>(),
            *a = centered ? st.grad_avg.data_ptr<T>() : nullptr,
            *buf = mom > 0.0 ? st.momentum_buffer.data_ptr<T>() : nullptr;
          const T* gp = g.data_ptr<T>();
          detail::with_flags(
              [&](auto decay, auto centered_on, auto momentum) {
                detail::for_ranges(p.numel(), [&](int64_t b, int64_t e) {
                  rmsprop_fused<T, decltype(decay)::value, decltype(centered_on)::value, decltype(momentum)::value>(
                      b, e, pp, gp, s, a, buf, c);
                });
              },
              wd != 0.0, centered, mom > 0.0);
        });
        continue;
      }

      // The reference path: the formulas above as tensor ops.
      Tensor grad = wd != 0.0 ? g.add(p, wd) : g;
      st.square_avg.mul_(alpha).add_(grad * grad, 1.0 - alpha);
      Tensor avg;
      if (centered) {
        st.grad_avg.mul_(alpha).add_(grad, 1.0 - alpha);
        avg = (st.square_avg - st.grad_avg * st.grad_avg).sqrt() + eps;
      } else {
        avg = st.square_avg.sqrt() + eps;
      }
      if (mom > 0.0) {
        st.momentum_buffer.mul_(mom).add_(grad / avg);
        p.add_(st.momentum_buffer, -lr);
      } else {
        p.add_(grad / avg, -lr);
      }
    }
  }
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
