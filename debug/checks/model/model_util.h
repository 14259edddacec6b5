// Helpers shared by the model checks' files (internal to checks/model/): a snapshot of the gradients to put
// back after a probe, whether a batch is a classification one, its accuracy, the trainable parameters, row norms,
// whether a loss is the mean of its rows' losses, a fixed projection of an output to a scalar.
#pragma once
#include "debug/checks/model/model_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/hooks.h"
#include "debug/checks/model/behaviour.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "optim/adam.h"

namespace gradsleuth::debug::model_detail {

using detail::GradSnapshot;

// The parameters (by identity) some group of `optimizer` holds, and with `model` every parameter the model
// registers too.
inline std::set<const TensorImpl*> held_parameters(const optim::Optimizer& optimizer,
                                                   const nn::Module* model = nullptr) {
  std::set<const TensorImpl*> held;
  for (const auto& g : optimizer.param_groups())
    for (const Tensor& p : g.params) held.insert(p.impl_ptr().get());
  if (model)
    for (const Tensor& p : model->parameters()) held.insert(p.impl_ptr().get());
  return held;
}

// The leaves that require grad reached from `root` (not past the nodes in `stop`) and not in `held`, in
// the walk's order: the tensors a forward read that neither the model nor the optimizer holds
// (structure.cpp).
std::vector<Tensor> leaves_outside(const Node* root, const std::set<const TensorImpl*>& held,
                                   std::set<const Node*> stop = {});

inline bool is_classification(const Tensor& out, const Tensor& y) {
  return y.dtype() == kInt64 && y.dim() == 1 && out.dim() == 2 && out.size(0) == y.size(0);
}

// The share of the rows with a class (0 <= y < C) whose argmax is it: a target the loss ignores
// (ignore_index, the padding of a sequence) counts for none. NaN when no row has a class.
inline double accuracy_of(const Tensor& out, const Tensor& y) {
  NoGradGuard ng;
  const Tensor labelled = logical_and(ge(y, 0), lt(y, out.size(1))).to(kFloat64);
  const Tensor hit = eq(argmax(out.detach(), 1), y).to(kFloat64) * labelled;
  return sum(hit).item<double>() / sum(labelled).item<double>();
}

inline std::vector<Tensor> trainable(nn::Module& model) {
  std::vector<Tensor> out;
  for (Tensor& p : model.parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
}

// Row norms of g (B, ...): the L2 norm of each example's slice.
inline std::vector<double> row_norms(const Tensor& g) {
  std::vector<double> out;
  NoGradGuard ng;
  Tensor flat = g.detach().reshape({g.size(0), -1}).to(kFloat64);
  const std::vector<double> v = sqrt(sum(flat * flat, {1})).to_vector<double>();
  return v;
}

// Whether the batch's loss is the mean of its rows' losses, each row scored alone: a likelihood over per-row
// distribution parameters is; a loss that broadcasts its operands (B, 1) against (B) pairs every output with every
// target and is not, nor is one over the batch as a whole (a ranking, a partial likelihood over risk sets).
inline bool rows_separate(const Tensor& z, const Tensor& y, const LossFunction& loss) {
  try {
    NoGradGuard ng;
    const int64_t B = z.size(0);
    if (z.dim() < 1 || y.dim() < 1 || B < 2 || y.size(0) != B) return false;
    const double whole = loss(z, y).item<double>();
    double sum = 0.0;
    for (int64_t i = 0; i < B; ++i) sum += loss(z.narrow(0, i, 1), y.narrow(0, i, 1)).item<double>();
    const double mean = sum / static_cast<double>(B);
    return std::isfinite(whole) && std::fabs(mean - whole) <= 1e-4 * std::max(1.0, std::fabs(whole));
  } catch (const std::exception&) {
    return false;
  }
}

// A fixed projection of a tensor (a model's output, some of its columns) to a scalar, weights sin(0.7 i + 0.3):
// its gradient reaches every entry, so the gradients it sends back tell apart the paths that reach them.
inline Tensor project_output(const Tensor& y) {
  return sum(y * sin(arange(y.numel(), kFloat64) * 0.7 + 0.3).to(y.dtype()).reshape(y.shape()));
}

// A detached float64 copy on the host.
// y moved one row on (row i takes row i + 1's): the targets a loss that reads them tells from y.
inline Tensor rows_rolled(const Tensor& y) {
  const int64_t n = y.size(0);
  std::vector<int64_t> shift(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) shift[static_cast<size_t>(i)] = (i + 1) % n;
  return y.index_select(0, tensor(shift, {n}).to(y.device()));
}

// Whether loss(out, other) differs from `at`, the loss at the targets themselves, beyond rounding, or
// either is not finite.
inline bool loss_moves(const LossFunction& loss, const Tensor& out, double at, const Tensor& other) {
  const double c = loss(out, other).item<double>();
  return !(std::isfinite(at) && std::isfinite(c)) || std::fabs(at - c) > 1e-9 * (1.0 + std::fabs(at));
}

inline Tensor host64(const Tensor& t) { return t.detach().to(kCPU).to(kFloat64); }

// The first `rows` rows of x (all of a 0-dim tensor).
inline Tensor first_rows(const Tensor& x, int64_t rows) {
  if (x.dim() == 0) return x;
  return x.narrow(0, 0, std::min<int64_t>(std::max<int64_t>(rows, 1), x.size(0)));
}

// Trains a fresh Adam for `steps` over `batches` (cycled); returns the per-step losses. With `more`, when the
// budget is spent more(losses) may grant further steps (0: stop). after_step(s) runs after each step s (1-based).
// Defined in training_probes.cpp; M14, M15 and M16 train with it.
std::vector<double> short_run(nn::Module& model, const std::vector<std::pair<Tensor, Tensor>>& batches,
                              const LossFunction& loss, int64_t steps, double lr, bool zero_inputs,
                              double stop_below = -1.0, double* final_acc = nullptr, double stop_accuracy = 1.0,
                              const std::function<int64_t(const std::vector<double>&)>& more = nullptr,
                              const std::function<void(int64_t)>& after_step = nullptr);
// The loss on batch b in eval mode without gradients (the inputs zeroed with zero_inputs); the mode is
// left in eval: callers keep a ModeSnapshot.
double eval_loss(nn::Module& model, const std::pair<Tensor, Tensor>& b, const LossFunction& loss, bool zero_inputs);

// The random draws of one forward of `model` on x, in the mode the caller set (draws.cpp): whether an op
// named dropout ran (a functional dropout told it trains), and the tensors the forward made itself (not a
// parameter, a buffer, x, nor any op's result: a randn() inside forward) with more than one value, each
// counted as `scaled` where it was multiplied by a tensor the forward computed with one row per example
// (a reparameterised sample: z = mu + exp(logvar / 2) * eps), else as `other` (noise added, a mask).
struct ForwardDraws {
  bool dropout = false;
  int64_t scaled = 0, other = 0;
};
ForwardDraws forward_draws(nn::Module& model, const Tensor& x);

// One forward of `model` on x (draws.cpp), and whether it multiplied a result by a constant mask: a
// tensor that needs no gradient, of 0s and 1s with both present, shared by the rows of the batch (fewer
// dims than the other operand, or one row): the fixed masks of coupling layers (Real NVP) and of
// causal attention, which cut some units' way to the output by design.
Tensor forward_masked(nn::Module& model, const Tensor& x, bool& masked);

}  // namespace gradsleuth::debug::model_detail
