// Helpers shared by the model checks' files (internal to checks/model/): a snapshot of the gradients to put
// back after a probe, whether a batch is a classification one, its accuracy, the trainable parameters, row norms.
#pragma once
#include "debug/checks/model/model_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
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

}  // namespace gradsleuth::debug::model_detail
