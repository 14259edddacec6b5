// Lab 7 starter code: hunting a NaN with log-sum-exp, anomaly mode and half precision.
// Replace each `throw` marked TODO with your code (README.md, Tasks 7.1-7.6),
// rebuild and grade:   ./run.sh lab check 7
#include "tutorials/lab7_nan/lab7.h"

#include <cmath>
#include <cstring>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/model/anomaly.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "optim/clip.h"
#include "optim/sgd.h"

namespace gradsleuth::lab7 {

// TODO(lab 7, task 1): m = x.max(-1, true) (keepdim, so it broadcasts; detach it),
// shifted = x - m (every entry <= 0, so exp(shifted) <= 1 cannot overflow, and
// the largest is exactly 1, so the sum is >= 1 and its log is finite), then
// shifted - log(sum(exp(shifted), {-1}, keepdim)). Use x.exp(), .sum({-1}, true)
// and .log(); the grader refuses the library's softmax and log_softmax ops.
Tensor log_softmax(const Tensor& x) {
  throw Error("lab 7", "not implemented: lab 7 task 1 (log_softmax in tutorials/lab7_nan/lab7.cpp)");
}

// TODO(lab 7, task 2): debug::AnomalyMode anomaly; anomaly.attach(model) (so it can
// name modules). Forward and loss inside { auto on = anomaly.enable(); ... }: if
// anomaly.found(), the source is in the forward. Otherwise run loss.backward()
// inside a second enable() scope: a finding then comes from the backward.
// Report anomaly.findings().front(): its .op and .module.
NanSource find_nan_source(nn::Module& model, const Tensor& x, const Tensor& y) {
  throw Error("lab 7", "not implemented: lab 7 task 2 (find_nan_source in tutorials/lab7_nan/lab7.cpp)");
}

// TODO(lab 7, task 3): sign = bit 15, exponent e = bits 10..14, mantissa m = bits 0..9.
//   e == 0:  (-1)^sign * m * 2^-24                 (zero and subnormals)
//   e == 31: +-inf when m == 0, else NaN
//   else:    (-1)^sign * (1024 + m) * 2^(e - 25)    (= 1.m * 2^(e - 15))
// std::ldexp(value, exponent) computes value * 2^exponent exactly.
float half_bits_to_float(uint16_t h) {
  throw Error("lab 7", "not implemented: lab 7 task 3 (half_bits_to_float in tutorials/lab7_nan/lab7.cpp)");
}

// TODO(lab 7, task 3): keep the sign; NaN -> 0x7e00; |v| >= 65520 -> inf (0x7c00).
// |v| < 2^-14 (subnormal): the half is a multiple of 2^-24, so its bits are
// std::nearbyint(|v| * 2^24) (nearbyint rounds ties to even).
// Otherwise take the float's bits (std::memcpy into a uint32_t): exponent
// e = bits 23..30 minus 127, mantissa = bits 0..22. The half keeps the top 10
// mantissa bits; the 13 dropped bits decide the rounding: above 0x1000 round
// up, exactly 0x1000 round up only when the kept mantissa is odd (ties to even).
// Rounding up may carry into the exponent; that is still the right pattern.
uint16_t float_to_half_bits(float v) {
  throw Error("lab 7", "not implemented: lab 7 task 3 (float_to_half_bits in tutorials/lab7_nan/lab7.cpp)");
}

// TODO(lab 7, task 3): decode(encode(v)).
float round_to_half(float v) {
  throw Error("lab 7", "not implemented: lab 7 task 3 (round_to_half in tutorials/lab7_nan/lab7.cpp)");
}

// TODO(lab 7, task 4): a contiguous float32 copy (x.detach().to(kFloat32).contiguous().clone()),
// then round every element in place through y.data_ptr<float>().
Tensor to_half(const Tensor& x) {
  throw Error("lab 7", "not implemented: lab 7 task 4 (to_half in tutorials/lab7_nan/lab7.cpp)");
}

// TODO(lab 7, task 4): round the input, then every result: exp, the row sums
// (.sum({-1}, true)), the quotient. For stable, first subtract the row max
// (x.max(-1, true)) and round the difference.
Tensor softmax_half(const Tensor& x, bool stable) {
  throw Error("lab 7", "not implemented: lab 7 task 4 (softmax_half in tutorials/lab7_nan/lab7.cpp)");
}

// TODO(lab 7, task 4): bisection on [0, 20]: exp(lo) is finite in half,
// exp(hi) is inf (std::isinf(round_to_half(float(std::exp(x))))); halve the
// interval until it is narrower than 1e-6 and return hi.
double half_exp_overflow() {
  throw Error("lab 7", "not implemented: lab 7 task 4 (half_exp_overflow in tutorials/lab7_nan/lab7.cpp)");
}

// ---- given: the recipe of Tasks 7.5 and 7.6 ---------------------------------------
Recipe broken_recipe() { return Recipe{/*stable_log_softmax=*/false, /*lr=*/2.0, /*clip_norm=*/0.0}; }

std::shared_ptr<nn::Sequential> make_recipe_model(const Recipe& r, uint64_t seed) {
  manual_seed(seed);
  auto head = std::make_shared<nn::LogSoftmax>(1);
  if (!r.stable_log_softmax) head->inject_bug(nn::Bug::B20);  // log(softmax(x)): nn/activation.cpp
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 128),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10), head);
}

// TODO(lab 7, task 5): optim::SGD opt(model.parameters(), optim::SGDOptions(r.lr));
// model.train(); then for each epoch, for (const nn::Batch& b : loader):
//   opt.zero_grad(); loss = nn::functional::nll_loss(model(b.x), b.y); loss.backward();
//   the loss (loss.item<double>()) or the gradients not finite? The norm of all
//     gradients together, optim::grad_norm(model.parameters()), is NaN or inf
//     as soon as one gradient element is. Then record the step, find the source
//     with find_nan_source(model, b.x, b.y) and return at once: no step, so the
//     NaN never reaches the weights;
//   else optim::clip_grad_norm_(model.parameters(), r.clip_norm) when
//     r.clip_norm > 0; opt.step(); record the loss.
// Steps count from 0 across epochs.
GuardedRun train_guarded(nn::Sequential& model, const Recipe& r, nn::DataLoader& loader, int epochs) {
  throw Error("lab 7", "not implemented: lab 7 task 5 (train_guarded in tutorials/lab7_nan/lab7.cpp)");
}

// TODO(lab 7, task 6): run broken_recipe() through train_guarded and read what it
// says (README, Task 7.6); then return a copy of `broken` with what is wrong repaired.
Recipe fix_recipe(const Recipe& broken) {
  throw Error("lab 7", "not implemented: lab 7 task 6 (fix_recipe in tutorials/lab7_nan/lab7.cpp)");
}

}  // namespace gradsleuth::lab7
