// Lab 5: batches that mix examples (README.md in this folder): the batch-mixing
// gradient test (check M6) written by you, used to sort layers into those that
// keep examples apart and those that mix them, to fix a layer that reshapes where
// it meant to transpose (bug B13's pattern), and to tell BatchNorm's intended
// coupling from a bug. Declared once for your code (lab5.cpp) and the reference
// solution (solution/lab5.cpp); the grader (../grader/grade_lab5.cpp) calls them here.
//
// Dimension letters: B = batch, T = time steps, D = input features, M = output
// features, C = BatchNorm channels.
#pragma once
#include <cstdint>
#include <vector>

#include "nn/module.h"

namespace gradsleuth::lab5 {

// ---- Task 5.1 --------------------------------------------------------------------------------
// The batch-mixing test for one output row i: with loss = out[i].sum(), the
// gradient d loss / d x[j] for every input row j.
struct MixingProbe {
  Tensor grad_norms;          // (B): the L2 norm of d loss / d x[j], for each row j
  std::vector<int64_t> rows;  // the rows j whose gradient has a non-zero element, ascending
};
// Task 5.1: runs model(x) in whatever mode the model is in and probes row i with
//   loss = out[i].sum()                  when weight_seed == 0,
//   loss = (out[i] * w).sum()            otherwise, w = randn(out[i].shape(), kFloat32, &gen)
//                                        with Generator gen(weight_seed): a fixed random weighting
//                                        (a plain sum is blind where a row's sum is constant).
// x (B, ...) with B >= 2 and 0 <= i < B, else gs::Error; the output must keep the
// batch dim first, out (B, ...), else gs::Error. When no gradient reaches x (the
// output does not depend on it through differentiable ops), grad_norms are all 0
// and rows is empty. Leaves no trace: x gets no .grad, and every parameter's .grad
// is what it was before the call.
MixingProbe batch_mixing_probe(nn::Module& model, const Tensor& x, int64_t i, uint64_t weight_seed = 0);

// ---- Task 5.2 --------------------------------------------------------------------------------
// Task 5.2: true when some output row of `layer` depends on the input of another
// row: the probe of some row i lists a row j != i. Probe every row of x, with a
// weighted probe (a softmax must not hide the mixing). Runs the layer in whatever
// mode it is in.
bool mixes_batch(nn::Module& layer, const Tensor& x);

// ---- Task 5.3 --------------------------------------------------------------------------------
// Given: the (T, T) running-mean matrix, A[t, s] = 1 / (t + 1) for s <= t, else 0:
// A @ h averages the rows 0..t of h into row t.
Tensor running_mean_matrix(int64_t T);

// A causal running mean over time, then a linear map:
//   y[b, t] = weight @ (mean over s <= t of x[b, s]) + bias      x (B, T, D) -> y (B, T, M)
// Inside, it works time-major: seen as (T, B * D), the running mean of every
// example at once is one matmul with running_mean_matrix(T).
// The constructor is given: weight (M, D) and bias (M), U(-1/sqrt(D), 1/sqrt(D)).
class TimeAverage : public nn::Module {
 public:
  TimeAverage(int64_t in_features, int64_t out_features);
  Tensor forward(const Tensor& x) override;  // Task 5.3

  Tensor weight;  // (M, D)
  Tensor bias;    // (M)
};

// Given: the layer as it was first written, with reshape where a transpose was
// meant, twice (bug B13's pattern). The shapes are right; the examples are mixed.
class TimeAverageBuggy : public TimeAverage {
 public:
  using TimeAverage::TimeAverage;
  Tensor forward(const Tensor& x) override;
};

// ---- Task 5.4 --------------------------------------------------------------------------------
// Task 5.4: BatchNorm1d's forward, x (B, C) -> (B, C):
//   (x - mean) / sqrt(var + eps) * weight + bias
// training: mean and var are the batch's, over dim 0 (var biased: divide by B);
// eval:     mean = running_mean, var = running_var.
// weight and bias (C) may be undefined (a BatchNorm without affine parameters).
// Does not change running_mean or running_var.
Tensor batchnorm_forward(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                         const Tensor& bias, double eps, bool training);

// ---- Task 5.5 --------------------------------------------------------------------------------
struct MixingVerdict {
  bool mixes = false;                // in eval mode, an output row depends on another row's input: a bug
  std::vector<int64_t> mixing_rows;  // those rows i (in eval mode), ascending
  bool batchnorm_coupling = false;   // eval mode is clean, the model has BatchNorm, and in training
                                     // mode the rows are coupled: expected, not a bug
};
// Task 5.5: the batch-mixing test as a debugging tool: probe every row of x in eval
// mode; if that is clean and the model has a BatchNorm layer, probe again in
// training mode. Leaves the model as it was: every module's mode, and every buffer
// (BatchNorm's running statistics). model must be owned by a std::shared_ptr.
MixingVerdict check_batch_mixing(nn::Module& model, const Tensor& x);

}  // namespace gradsleuth::lab5
