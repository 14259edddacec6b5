// Lab 4: broadcasting and in-place bugs (README.md in this folder): predict what
// broadcasting does, refuse it where it would be silently wrong, locate it with
// the debug module's detector (M19), fix the training loop it broke (bug B01),
// read the engine's in-place error (M20) and fix the residual block that caused
// it (bug B02). Declared once for your code (lab4.cpp) and the reference
// solution (solution/lab4.cpp); the grader (../grader/grade_lab4.cpp) calls them here.
//
// Dimension letters: B = batch, D = features, N = examples in a data set.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nn/linear.h"
#include "nn/module.h"

namespace gradsleuth::lab4 {

// ---- Task 4.1: predict, then compute -----------------------------------------------------
// Your predictions, made by hand before running anything, of the result shape of
// each expression below, in this order; std::nullopt where the engine raises an
// error because the shapes do not broadcast.
//   1. pred (64, 1) - target (64)
//   2. x (32, 10) - x.mean({1})                    the mean of each row, (32)
//   3. x (32, 10) - x.mean({1}, true)              the same with keepdim, (32, 1)
//   4. x (10, 10) - x.mean({1})                    expression 2 on a square batch
//   5. images (16, 3, 32, 32) * scale (3)          one scale per colour channel
//   6. images (16, 3, 32, 32) * scale.view({3, 1, 1})
//   7. a (4, 1, 3) + b (5, 1)
//   8. loss () * weights (8)                       a 0-dim tensor times a vector
std::vector<std::optional<Shape>> predicted_shapes();

// What broadcasting does to the two operands of an elementwise op.
struct Stretch {
  Shape result;              // the shape a and b broadcast to
  bool a_stretched = false;  // the result has more elements than a: a's elements are repeated
  bool b_stretched = false;
  bool suspicious = false;  // both stretched: the case check M19 is about
};
// Task 4.1: the Stretch of a op b. Throws a gs::Error naming both shapes when they
// do not broadcast.      (64, 1) and (64) -> result (64, 64), both stretched, suspicious
Stretch stretch(const Shape& a, const Shape& b);

// ---- Task 4.2 --------------------------------------------------------------------------------
// mean((pred - target)^2) over every element, as a 0-dim tensor, for pred and target
// of the same shape. Any other pair of shapes throws a gs::Error from
// "lab4::safe_mse" that names both shapes, what they would broadcast to (or that
// they do not broadcast) and the fix.
Tensor safe_mse(const Tensor& pred, const Tensor& target);

// ---- Task 4.3 --------------------------------------------------------------------------------
// What debug::BroadcastDetector found while a piece of code ran.
struct BroadcastReport {
  bool found = false;   // at least one op broadcast both of its operands
  int64_t count = 0;    // the number of findings (the detector lists each op and module once)
  std::string op;       // the first finding's op: "sub", "mul", ...
  std::string module;   // where it ran, "head (GatedHead)"; "" outside every module (a loss)
  std::string shape;    // the op's output shape, "[8, 8]"
  std::string message;  // the first finding as a person reads it (Finding::str())
};
// Task 4.3: runs `run` (which calls `model` and usually a loss) with a
// debug::BroadcastDetector in Warn mode attached to `model`, and reports its
// findings. `model` must be owned by a std::shared_ptr (the detector walks it with
// named_modules()). Nothing may keep listening after the function returns.
BroadcastReport locate_broadcast(nn::Module& model, const std::function<void()>& run);

// ---- Task 4.4 --------------------------------------------------------------------------------
// Given: a regression training loop with bug B01. x (N, D) inputs, y (N) targets,
// model(x) -> (N, 1). SGD with learning rate lr; returns the loss of each step
// (before its update). It runs without a word and learns almost nothing.
std::vector<double> train_regression_buggy(nn::Module& model, const Tensor& x, const Tensor& y, int steps, double lr);

// Task 4.4: the same loop, fixed. y may be (N) or (N, 1); any other shape throws a
// gs::Error naming it. Returns each step's mean squared error, before its update.
std::vector<double> train_regression(nn::Module& model, const Tensor& x, const Tensor& y, int steps, double lr);

// ---- Task 4.5 --------------------------------------------------------------------------------
// The parts of the engine's error for a tensor saved for backward and then changed
// in place (core/autograd.cpp, SavedTensor::unpack), for instance
//   matmul: one of the tensors needed for its gradient has been modified by an
//   in-place operation. The float32[2, 3] tensor was saved by 'matmul' at version 0
//   and is now at version 2; it was modified by 'add_' (first of 2 in-place
//   modifications). Fix: ...
struct InplaceReport {
  bool found = false;          // the message is this error (and not some other one)
  std::string tensor;          // the saved tensor as the message names it: "float32[2, 3]"
  std::string saved_by;        // the op that saved it for its backward: "matmul"
  std::string modified_by;     // the in-place op that changed it afterwards: "add_"
  int64_t saved_version = -1;  // its version when it was saved: 0
  int64_t version_now = -1;    // its version when the backward needed it: 2
};
// Task 4.5: reads those parts out of an error message. found = false (and the
// rest left as is) for any other message.
InplaceReport read_inplace_error(const std::string& message);

// ---- Task 4.6 --------------------------------------------------------------------------------
// A residual MLP block:  y = relu(x + fc2(relu(fc1(x))))      x (B, D) -> y (B, D)
// The constructor is given: fc1 and fc2 are nn::Linear(D, D).
class ResidualMLP : public nn::Module {
 public:
  explicit ResidualMLP(int64_t features);
  Tensor forward(const Tensor& x) override;  // Task 4.6: out of place

  std::shared_ptr<nn::Linear> fc1, fc2;
};

// Given: the same block as it was first written, summing the skip path into x in
// place (bug B02). Its backward raises the error of Task 4.5, and it changes the
// caller's x.
class ResidualMLPInplace : public ResidualMLP {
 public:
  using ResidualMLP::ResidualMLP;
  Tensor forward(const Tensor& x) override;
};

}  // namespace gradsleuth::lab4
