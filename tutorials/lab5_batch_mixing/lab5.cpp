// Lab 5 starter code: batches that mix examples.
// Replace each `throw` marked TODO with your code (README.md, Tasks 5.1-5.5),
// rebuild and grade:   ./run.sh lab check 5
#include "tutorials/lab5_batch_mixing/lab5.h"

#include <cmath>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "nn/normalization.h"

namespace gradsleuth::lab5 {

// TODO(lab 5, task 1): the batch-mixing test for row i.
//  1. Check B >= 2 and 0 <= i < B (GS_CHECK(cond, "lab5::batch_mixing_probe", ...)).
//  2. Move every parameter's .grad out of the way (model.parameters(); keep p.grad(),
//     then p.set_grad(Tensor())): backward adds into an existing .grad in place, so
//     you could not undo that. Put the kept gradients back at the end (p.set_grad(g)).
//  3. xi = x.detach().clone().requires_grad_(true): your own leaf, so x gets no .grad.
//  4. out = model(xi); check that out.size(0) == B; row = out.select(0, i);
//     loss = row.sum(), or with weight_seed != 0, (row * w).sum() where
//     Generator gen(weight_seed); Tensor w = randn(row.shape(), kFloat32, &gen);
//  5. If loss.requires_grad(), loss.backward(); g = xi.grad() (undefined: no gradient
//     reached x; use zeros).
//  6. Per row j: the norm of g[j] (g.reshape({B, -1}) makes one row per example) and
//     whether it has a non-zero element (compare its largest |value| with 0).
MixingProbe batch_mixing_probe(nn::Module& model, const Tensor& x, int64_t i, uint64_t weight_seed) {
  throw Error("lab 5", "not implemented: lab 5 task 1 (batch_mixing_probe in tutorials/lab5_batch_mixing/lab5.cpp)");
}

// TODO(lab 5, task 2): probe every row i of x, with a weight_seed (any fixed one but 0);
// the layer mixes the batch when some probe lists a row other than its own i. Why
// every row, and why weighted? README.md, Task 5.2.
bool mixes_batch(nn::Module& layer, const Tensor& x) {
  throw Error("lab 5", "not implemented: lab 5 task 2 (mixes_batch in tutorials/lab5_batch_mixing/lab5.cpp)");
}

// ---- given: the running-mean matrix and the layer's parameters ------------------------------
Tensor running_mean_matrix(int64_t T) {
  Tensor a = zeros({T, T});  // (T, T)
  float* p = a.data_ptr<float>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s <= t; ++s) p[t * T + s] = 1.0f / static_cast<float>(t + 1);
  return a;
}

TimeAverage::TimeAverage(int64_t in_features, int64_t out_features) : Module("lab5.TimeAverage") {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", empty({out_features, in_features}).uniform_(-bound, bound));  // (M, D)
  bias = register_parameter("bias", empty({out_features}).uniform_(-bound, bound));                   // (M)
}

// ---- given: the layer with the bug ----------------------------------------------------------
Tensor TimeAverageBuggy::forward(const Tensor& x) {
  GS_CHECK(x.dim() == 3 && x.size(2) == weight.size(1), "lab5::TimeAverage", "expects x (B, T, ", weight.size(1),
           "), got ", x.str());
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2), M = weight.size(0);
  Tensor xt = x.reshape({T, B * D});                                // "time-major" (BUG: see Task 5.3)
  Tensor h = running_mean_matrix(T).matmul(xt).reshape({T, B, D});  // (T, B, D)
  Tensor y = linear(h, weight, bias);                               // (T, B, M)
  return y.reshape({B, T, M});                                      // back to batch-major (BUG)
}

// TODO(lab 5, task 3): the same computation without mixing the batch. A reshape
// keeps the elements in memory order and only cuts the sequence differently; to
// move the time dim in front you need x.transpose(0, 1) (then reshape, which copies
// because the transpose is not contiguous), and y.transpose(0, 1) to move it back.
// Check the input shape as the buggy version does.
Tensor TimeAverage::forward(const Tensor& x) {
  throw Error("lab 5", "not implemented: lab 5 task 3 (TimeAverage::forward in tutorials/lab5_batch_mixing/lab5.cpp)");
}

// TODO(lab 5, task 4): mean and var (C) from the batch (x.mean({0}); the biased
// variance is the mean of the squared deviations) in training, from the running
// statistics in eval; then normalise, scale by weight and shift by bias when they
// are defined. Tensor ops only, so that autograd records the gradient.
Tensor batchnorm_forward(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                         const Tensor& bias, double eps, bool training) {
  throw Error("lab 5", "not implemented: lab 5 task 4 (batchnorm_forward in tutorials/lab5_batch_mixing/lab5.cpp)");
}

// TODO(lab 5, task 5): remember each module's mode (model.named_modules(),
// m->is_training()) and a clone of every buffer (model.buffers()); model.eval() and
// probe every row; if no row mixes and some module is a BatchNorm
// (dynamic_cast<nn::BatchNormBase*>), model.train() and probe again. Then put the
// buffers back (copy_ under a NoGradGuard) and the modes (m->train(mode) for each
// module, parents first: train() also sets the children).
MixingVerdict check_batch_mixing(nn::Module& model, const Tensor& x) {
  throw Error("lab 5", "not implemented: lab 5 task 5 (check_batch_mixing in tutorials/lab5_batch_mixing/lab5.cpp)");
}

}  // namespace gradsleuth::lab5
