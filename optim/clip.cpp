// Gradient clipping: the total gradient norm (one pass per gradient, summed in
// float64) and the in-place rescale / clamp.
#include "optim/clip.h"

#include <cmath>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/warning.h"
#include "optim/grad_scaler.h"
#include "optim/stepped_grads.h"

namespace gradsleuth::optim {

namespace {

// Each gradient's contribution to the total: sum |g|^p, or max |g| for the
// inf norm. NaN when an element is NaN.
template <class T>
double partial_norm(const T* g, int64_t n, double p) {
  double acc = 0.0;
  bool nan = false;
  if (std::isinf(p)) {
    for (int64_t j = 0; j < n; ++j) {
      const double a = std::abs(static_cast<double>(g[j]));
      nan |= std::isnan(a);
      acc = a > acc ? a : acc;
    }
  } else if (p == 2.0) {
    for (int64_t j = 0; j < n; ++j) acc += static_cast<double>(g[j]) * static_cast<double>(g[j]);
  } else if (p == 1.0) {
    for (int64_t j = 0; j < n; ++j) acc += std::abs(static_cast<double>(g[j]));
  } else {
    for (int64_t j = 0; j < n; ++j) acc += std::pow(std::abs(static_cast<double>(g[j])), p);
  }
  return nan ? std::nan("") : acc;
}

double partial_norm(const Tensor& grad, double p) {
  const Tensor g = grad.detach();
  if (g.device().is_cpu() && g.is_contiguous() && (g.dtype() == kFloat32 || g.dtype() == kFloat64)) {
    return g.dtype() == kFloat32 ? partial_norm(g.data_ptr<float>(), g.numel(), p)
                                 : partial_norm(g.data_ptr<double>(), g.numel(), p);
  }
  // Any other layout or device: the same sums as tensor ops, in float64.
  const Tensor a = g.to(kFloat64).abs();
  if (std::isinf(p))
    return a.numel() == 0 ? 0.0 : (a.isnan().sum().item<double>() > 0 ? std::nan("") : a.max().item<double>());
  return (p == 1.0 ? a : p == 2.0 ? a * a : a.pow(p)).sum().item<double>();
}

struct Norms {
  double total = 0.0;
  std::vector<std::pair<size_t, double>> partials;  // (index into params, partial) per gradient
};

Norms compute_norms(const std::vector<Tensor>& params, double p, const char* op) {
  GS_CHECK(p > 0.0, op, "norm_type must be > 0 (2.0 for the Euclidean norm, optim::kInfNorm for the max), got ", p);
  NoGradGuard ng;
  Norms n;
  double acc = 0.0;
  bool nan = false;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& prm = params[i];
    if (!prm.defined() || !prm.grad().defined()) continue;
    const double part = partial_norm(prm.grad(), p);
    n.partials.emplace_back(i, part);
    nan |= std::isnan(part);
    acc = std::isinf(p) ? (part > acc ? part : acc) : acc + part;
  }
  n.total = nan ? std::nan("") : std::isinf(p) ? acc : std::pow(acc, 1.0 / p);
  return n;
}

// O5 (docs/checks.md): a gradient transform that finds no gradient to transform
// ran at the wrong place in the loop, before backward() or right after
// zero_grad(). It silently does nothing, and the gradients backward() makes
// next reach step() untransformed, so say so (once per op by default).
void warn_no_gradient(const char* op, size_t params, size_t with_grad) {
  warn({"O5", op,
        with_grad == 0
            ? "ran when none of its " + std::to_string(params) +
                  " parameters has a gradient (every .grad is undefined): it was called before backward() or right "
                  "after zero_grad(), so it clipped nothing and the gradients of the coming backward() reach "
                  "step() unclipped. Call it between loss.backward() and optimizer.step()."
            : "ran when every gradient of its " + std::to_string(params) +
                  " parameters is zero (right after zero_grad(), or a backward that reached none of them): it "
                  "clipped nothing. Call it between loss.backward() and optimizer.step()."});
}

// O5: a transform that would change the gradients an optimizer step already used (none written
// since) runs after step(): the update is made, and the next zero_grad() drops what it changed.
void warn_after_step(const char* op, const std::vector<Tensor>& params) {
  if (!stepped::grads_already_stepped(params)) return;
  warn({"O5", std::string(op) + " after step()",
        "changed the gradients that optimizer.step() already used, before any new backward(): it ran after "
        "step(), so no update was clipped. Call it between loss.backward() and optimizer.step()."});
}

}  // namespace

double grad_norm(const std::vector<Tensor>& params, double norm_type) {
  return compute_norms(params, norm_type, "grad_norm").total;
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  const char* op = "clip_grad_norm_";
  GS_CHECK(max_norm >= 0.0, op, "max_norm must be >= 0, got ", max_norm,
           " (a negative max_norm would flip every gradient's sign)");
  note_gradient_transform(params, op);  // O10: a GradScaler warns if these gradients are still scaled
  const Norms n = compute_norms(params, norm_type, op);
  if (!params.empty() && (n.partials.empty() || n.total == 0.0)) [[unlikely]]
    warn_no_gradient(op, params.size(), n.partials.size());
  if (error_if_nonfinite && !std::isfinite(n.total)) {
    std::string bad;
    for (auto [i, part] : n.partials) {
      if (std::isfinite(part)) continue;
      const Tensor& p = params[i];
      bad += "\n  parameter " + std::to_string(i) + " " + p.str() + ": its gradient " +
             (std::isnan(part) ? "holds NaN" : "holds Inf (or overflows)");
    }
    GS_FAIL(op, "the total ", std::isinf(norm_type) ? "inf" : detail::str_cat(norm_type), "-norm of the gradients of ",
            n.partials.size(), " parameter(s) is ", n.total, "; non-finite gradients:", bad,
            "\nFix: find where the NaN/Inf first appears (a log of 0, a division by zero, a too-large learning "
            "rate), or pass error_if_nonfinite=false to clip anyway.");
  }
  // coef >= 1: the gradients are already short enough. NaN: scale anyway (as PyTorch).
  const double coef = max_norm / (n.total + 1e-6);
  if (!(coef >= 1.0)) {
    warn_after_step(op, params);
    NoGradGuard ng;
    for (auto [i, part] : n.partials) {
      Tensor g = params[i].grad();
      g.mul_(coef);
    }
  }
  return n.total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  GS_CHECK(clip_value >= 0.0, "clip_grad_value_", "clip_value must be >= 0, got ", clip_value,
           "; gradients are clamped into [-clip_value, clip_value]");
  note_gradient_transform(params, "clip_grad_value_");  // O10, as clip_grad_norm_
  NoGradGuard ng;
  size_t with_grad = 0;
  bool nonzero = false;
  for (const Tensor& p : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    ++with_grad;
    // One extra read while nothing non-zero was seen (usually just the first gradient).
    if (!nonzero) nonzero = !(partial_norm(g, kInfNorm) == 0.0);
    g.clamp_(-clip_value, clip_value);
  }
  if (!params.empty() && (with_grad == 0 || !nonzero)) [[unlikely]]
    warn_no_gradient("clip_grad_value_", params.size(), with_grad);
}

}  // namespace gradsleuth::optim
