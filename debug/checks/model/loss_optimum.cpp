// M3 by the loss's own optimum (its finding is made in structure.cpp): for each of a batch's rows, whether
// the loss is lower at a negative output than at 0 (and bounded below there), so that a model whose outputs
// are never negative (a softplus, an exp or a ReLU at its end, as a module or a function) cannot reach that
// row's optimum.
#include "debug/checks/model/model_checks.h"

#include <algorithm>
#include <cmath>
#include <exception>

#include "core/autograd.h"
#include "core/ops.h"

namespace gradsleuth::debug {

LossOptimum probe_loss_optimum(const std::function<Tensor(const Tensor&, const Tensor&)>& loss, const Tensor& input,
                               const Tensor& target, int64_t max_rows) {
  LossOptimum r;
  if (!input.defined() || !target.defined() || !input.is_floating_point() || !target.is_floating_point() ||
      input.sizes() != target.sizes() || input.dim() < 1 || input.size(0) < 1 || input.numel() != input.size(0))
    return r;
  NoGradGuard ng;
  const int64_t n = std::min(max_rows, input.size(0));
  for (int64_t i = 0; i < n; ++i) {
    const Tensor t = target.narrow(0, i, 1).detach();
    const Tensor one = input.narrow(0, i, 1).detach() * 0.0;
    const auto at = [&](double z) {
      try {
        const double v = loss(one + z, t).detach().to(kCPU).to(kFloat64).item<double>();
        return std::isfinite(v) ? v : std::nan("");
      } catch (const std::exception&) {
        return std::nan("");  // a loss that refuses the value (probabilities outside [0, 1])
      }
    };
    const double at_zero = at(0.0);
    if (!std::isfinite(at_zero)) continue;
    ++r.rows;
    double best = at_zero, where = 0.0;
    for (const double z : {-0.25, -1.0, -3.0, -10.0}) {
      const double v = at(z);
      if (std::isfinite(v) && v < best) best = v, where = z;
    }
    if (!(best < at_zero - 1e-3 * (std::fabs(at_zero) + 1e-3))) continue;
    // A loss with no lower bound there (the rate itself under a Poisson loss on a count of 0: rate - 0 x log
    // rate falls without end) still falls over [-100, -30] at half its rate over [-30, -10] or more: the
    // rate's own domain leaves negative outputs out, and the row is not counted. A loss bounded below (the
    // log of a rate: exp(z) tends to 0) or with an optimum (a squared error) slows down or turns back up.
    const double at10 = at(-10.0), at30 = at(-30.0), at100 = at(-100.0);
    if (std::isfinite(at10) && std::isfinite(at30) && std::isfinite(at100) && at30 < at10 &&
        (at30 - at100) / 70.0 >= 0.5 * (at10 - at30) / 20.0)
      continue;
    if (r.below_zero++ == 0) {
      r.target = t.to(kCPU).to(kFloat64).item<double>();
      r.output = where;
      r.loss_at_zero = at_zero;
      r.loss_there = best;
    }
  }
  return r;
}

}  // namespace gradsleuth::debug
