// Lab 7: hunting a NaN: log-sum-exp, anomaly mode, half precision (README.md
// in this folder). Declared once for your code (lab7.cpp) and the reference
// solution (solution/lab7.cpp); the grader (../grader/grade_lab7.cpp) calls them
// here and compares with the debug module (debug/checks/model/anomaly.h: W4 AnomalyMode, M18
// round_to_half and HalfPrecisionEmulation).
//
// Dimension letters: B = batch, K = classes (the last dim), D = features.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/container.h"
#include "nn/data.h"
#include "nn/module.h"

namespace gradsleuth::lab7 {

// Task 7.1: log softmax over the last dim, stably:  x (..., K) -> (..., K)
//   log_softmax(x)_k = x_k - m - log(sum_j exp(x_j - m)),   m = max_j x_j
// Differentiable; finite for logits of +-1000. Built from max, exp, log and sum:
// not from the library's softmax or log_softmax.
Tensor log_softmax(const Tensor& x);

// Task 7.2: where does the first NaN or Inf come from? Runs
//   loss = nn::functional::cross_entropy(model(x), y);  loss.backward();
// with debug::AnomalyMode attached to the model and enabled, and reports its
// first finding: the op ("log"), the module it ran in ("4 (LogSoftmax)") and
// whether it came from the backward. found = false when everything stayed finite.
struct NanSource {
  bool found = false;
  std::string op;      // registry name of the op: "log", "sqrt", "div"
  std::string module;  // the module path with its type, as the debug module names it: "4 (LogSoftmax)"
  bool backward = false;
};
NanSource find_nan_source(nn::Module& model, const Tensor& x, const Tensor& y);

// Task 7.3: IEEE 754 binary16 ("half"): 1 sign bit, 5 exponent bits (bias 15),
// 10 mantissa bits. Largest finite value 65504, smallest normal 2^-14, smallest
// subnormal 2^-24.
// The float32 value of a half's bit pattern (subnormals, +-0, +-inf and NaN included).
float half_bits_to_float(uint16_t h);
// The bit pattern of the half nearest to v, ties to even; beyond the largest
// half (|v| >= 65520) +-inf; NaN stays NaN.
uint16_t float_to_half_bits(float v);
// v rounded to half and back: half_bits_to_float(float_to_half_bits(v)).
float round_to_half(float v);

// Task 7.4: softmax in emulated half precision.
// A float32 copy of x with every element rounded to half (round_to_half).
Tensor to_half(const Tensor& x);
// softmax over the last dim of x (..., K), with the input and every intermediate
// result rounded to half:  stable = false: exp(x) / sum(exp(x));  stable = true:
// exp(x - m) / sum(exp(x - m)), m the row max.
Tensor softmax_half(const Tensor& x, bool stable);
// The smallest x (within 1e-4) for which exp(x) overflows in half, found by bisection.
double half_exp_overflow();

// Given (Tasks 7.5, 7.6): a training recipe for an MLP on Fashion-MNIST,
//   Flatten, Linear(784, 128), ReLU, Linear(128, 10), nn::LogSoftmax(1)   (+ NLL loss, SGD)
struct Recipe {
  bool stable_log_softmax = true;  // false: the last layer computes log(softmax(x)) (bug B20)
  double lr = 0.1;                 // SGD learning rate
  double clip_norm = 0.0;          // > 0: optim::clip_grad_norm_(params, clip_norm) before each step
};
// The recipe that turns NaN: log(softmax(x)) and lr 2.
Recipe broken_recipe();
// The recipe's model, its parameters drawn from manual_seed(seed).
std::shared_ptr<nn::Sequential> make_recipe_model(const Recipe& r, uint64_t seed = 1);

// Task 7.5: train with a guard. For each epoch, each batch of the loader:
//   zero_grad; loss = nll_loss(model(x), y); backward;
//   if the loss or any gradient is not finite: stop, before the step; else
//   clip (when r.clip_norm > 0), step.
// A finite loss can come with NaN gradients (log(0) = -inf in a class that is
// not the target), and one step with them makes every weight NaN: the guard
// looks at both. At the step it stops, it runs the same forward, loss and
// backward again (the weights have not changed) through find_nan_source.
struct GuardedRun {
  std::vector<double> losses;  // the loss of every completed step (one that updated the weights), in order
  int64_t nan_step = -1;       // the step (0-based) where the loss or a gradient was not finite; -1: none
  NanSource source;            // what anomaly mode found at that step
};
GuardedRun train_guarded(nn::Sequential& model, const Recipe& r, nn::DataLoader& loader, int epochs);

// Task 7.6: the broken recipe, repaired.
Recipe fix_recipe(const Recipe& broken);

}  // namespace gradsleuth::lab7
