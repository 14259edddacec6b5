// Gradient clipping: rescales (clip_grad_norm_) or clamps (clip_grad_value_)
// every parameter's .grad in place, between backward() and optimizer.step().
// Both warn (check O5, through gs::warn) when they find no gradient to transform:
// every .grad undefined or zero means the call sits before backward() or right
// after zero_grad(), where it silently does nothing. Both also tell a live optim::GradScaler
// which gradients they change: on still-scaled gradients it warns (check O10, grad_scaler.h).
#pragma once
#include <limits>
#include <vector>

#include "core/tensor.h"

namespace gradsleuth::optim {

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// The norm of all gradients taken together, as if concatenated into one vector:
//   total = (sum over params, elements |g|^p)^(1/p)      p = norm_type > 0
//   total = max over params, elements |g|                p = kInfNorm
// Parameters without a gradient are skipped (0 when none has one).
double grad_norm(const std::vector<Tensor>& params, double norm_type = 2.0);

// Scales every gradient by min(1, max_norm / (total + 1e-6)), as
// torch.nn.utils.clip_grad_norm_, and returns `total` (before clipping).
// error_if_nonfinite: raise, naming each parameter whose gradient holds NaN or
// Inf, instead of clipping. Without it a non-finite total leaves the gradients
// NaN/0 (PyTorch does the same), so the next step() spreads it.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Clamps every gradient element into [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace gradsleuth::optim
