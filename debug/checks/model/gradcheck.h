// Numeric gradient check (M13 numeric gradient check, docs/checks.md): central differences in float64
// against the analytic gradient from autograd, with the worst element reported.
//
//   auto r = gs::debug::gradcheck([](const gs::tensor_list& x) { return x[0] * x[1] + gs::exp(x[0]); },
//                                 {gs::randn({3, 1}, gs::kFloat64), gs::randn({4}, gs::kFloat64)});
//   if (!r.passed) std::cerr << r.message;   // names the input, the element and both values
//
// The output may have any shape: we check d(sum(v * out))/d(input) for a fixed
// random weight v of the output's shape, so every output element takes part.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace gradsleuth::debug {

struct GradcheckOptions {
  double eps = 1e-6;   // central-difference step: (f(x + eps) - f(x - eps)) / (2 eps)
  double atol = 1e-5;  // an element passes when |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;
  // Fast mode: instead of one numeric derivative per input element, compare
  // `fast_projections` random directional derivatives  v^T J u  (numeric along u
  // vs the analytic gradient dotted with u). Two function calls per projection.
  bool fast = false;
  int fast_projections = 4;
  uint64_t seed = 0;  // for the projection weights v (and u in fast mode)
  // gradcheck: also run gradgradcheck on the same function.
  // gradcheck_all_ops: also run gradgradcheck on ops flagged double_backward.
  bool check_double_backward = false;
};

struct GradcheckResult {
  bool passed = true;
  double max_abs_error = 0.0;  // max over all elements of |analytic - numeric|
  // max over all elements of |analytic - numeric| / max(|analytic|, |numeric|, atol);
  // the atol floor keeps entries that are both ~0 from reporting rounding noise as error 1.
  double max_rel_error = 0.0;
  // The element that is furthest outside its tolerance (or closest to it, when all pass).
  size_t worst_input = 0;             // index into the inputs
  int64_t worst_index = -1;           // flat row-major index in that input (fast mode: the projection)
  std::vector<int64_t> worst_coords;  // the same element as coordinates (empty in fast mode)
  double analytic_at_worst = 0.0;
  double numeric_at_worst = 0.0;
  int64_t elements_checked = 0;
  int64_t elements_failed = 0;
  std::string message;  // a human-readable explanation: what, where, and the likely cause
};

using DiffFn = std::function<Tensor(const tensor_list&)>;

// Checks the first derivative of fn w.r.t. every floating input. Inputs must be
// float64 CPU tensors (int64/bool inputs, e.g. indices, are passed through and not
// differentiated). Inputs are never modified: perturbations go to a private copy
// that keeps each input's strides, so non-contiguous inputs stay non-contiguous.
// Throws gs::Error for float32 inputs or a non-floating output.
GradcheckResult gradcheck(const DiffFn& fn, const tensor_list& inputs, GradcheckOptions opts = {});

// Checks the second derivative: gradcheck of
//   (inputs, v) -> sum_i sum(w_i * grad_i),  grad_i = d(sum(v * fn(inputs)))/d(input_i) with create_graph=true
// for fixed random weights w_i — i.e. the backward of fn's backward, with respect to
// the inputs and to the incoming gradient v (grad_outputs, starting at a random value).
GradcheckResult gradgradcheck(const DiffFn& fn, const tensor_list& inputs, GradcheckOptions opts = {});

// One row per (op, sample) of the op registry (core/op_registry.h).
struct OpCheckRow {
  std::string name, category, sample;
  bool passed = true;
  bool skipped = false;                             // not differentiable: nothing to check
  double max_abs_error = 0.0, max_rel_error = 0.0;  // first order
  std::string message;                              // why it failed, or why it was skipped
  bool double_backward_checked = false;
  bool double_backward_passed = true;
  // An op registered without double backward: create_graph raised the clear
  // "second derivatives are not supported" error, as it must (counts as passed).
  bool double_backward_refused = false;
};

// Gradient-checks every registered op on each of its samples (float64 inputs made
// by a Generator seeded with opts.seed). Ops flagged double_backward also get
// gradgradcheck when opts.check_double_backward; the other differentiable ops must
// then refuse create_graph with a clear error (double_backward_refused). `filter` keeps only the op with
// that exact name (empty: all). Exceptions become failed rows, never escape.
std::vector<OpCheckRow> gradcheck_all_ops(const GradcheckOptions& opts = {}, const std::string& filter = "");

}  // namespace gradsleuth::debug
