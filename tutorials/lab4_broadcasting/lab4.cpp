// Lab 4 starter code: broadcasting and in-place bugs.
// Replace each `throw` marked TODO with your code (README.md, Tasks 4.1-4.6),
// rebuild and grade:   ./run.sh lab check 4
#include "tutorials/lab4_broadcasting/lab4.h"

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/model/anomaly.h"
#include "nn/loss.h"
#include "optim/sgd.h"

namespace gradsleuth::lab4 {

namespace {
// Given: the text of `s` between the first `before` and the next `after` after it;
// "" when either is missing.   text_between("saved by 'mul' at", "saved by '", "'") == "mul"
[[maybe_unused]] std::string text_between(const std::string& s, const std::string& before, const std::string& after) {
  const size_t a = s.find(before);
  if (a == std::string::npos) return "";
  const size_t from = a + before.size();
  const size_t b = s.find(after, from);
  return b == std::string::npos ? "" : s.substr(from, b - from);
}
}  // namespace

// TODO(lab 4, task 1): your eight predictions, by hand, in the order of lab4.h.
// Write them down before running anything: the point is to find out which ones
// you got wrong. A shape is written Shape{64, 64}; an error is std::nullopt.
std::vector<std::optional<Shape>> predicted_shapes() {
  throw Error("lab 4", "not implemented: lab 4 task 1 (predicted_shapes in tutorials/lab4_broadcasting/lab4.cpp)");
}

// TODO(lab 4, task 1): the result shape (you wrote the rule in lab 1; here you may
// call gs::broadcast_shapes(a, b, "lab4::stretch"), which throws a gs::Error naming
// both shapes), then compare each operand's element count with the result's
// (numel_of(shape)).
Stretch stretch(const Shape& a, const Shape& b) {
  throw Error("lab 4", "not implemented: lab 4 task 1 (stretch in tutorials/lab4_broadcasting/lab4.cpp)");
}

// TODO(lab 4, task 2): refuse any two shapes that differ, with a GS_CHECK or GS_FAIL
// from "lab4::safe_mse" whose message names both shapes (shape_str(s) writes
// "[8, 1]"), the shape they would broadcast to, and the fix; then compute the mean
// squared error with tensor ops so that autograd records it.
Tensor safe_mse(const Tensor& pred, const Tensor& target) {
  throw Error("lab 4", "not implemented: lab 4 task 2 (safe_mse in tutorials/lab4_broadcasting/lab4.cpp)");
}

// TODO(lab 4, task 3): make a debug::BroadcastDetector (Warn mode is the default),
// attach it to the model (so findings name the module), run the code while
// det.enable()'s guard lives, detach, and copy what det.findings() holds into the
// report (Finding has op, module, shape and str()).
BroadcastReport locate_broadcast(nn::Module& model, const std::function<void()>& run) {
  throw Error("lab 4", "not implemented: lab 4 task 3 (locate_broadcast in tutorials/lab4_broadcasting/lab4.cpp)");
}

// ---- given: the training loop with bug B01 --------------------------------------------------
std::vector<double> train_regression_buggy(nn::Module& model, const Tensor& x, const Tensor& y, int steps, double lr) {
  // MSELoss refused (N, 1) against (N) with an error, so broadcasting was switched on "to make it run".
  nn::MSELoss loss_fn(nn::MSELossOptions().allow_broadcast(true));
  optim::SGD opt(model.parameters(), optim::SGDOptions(lr));
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor pred = model(x);          // (N, 1)
    Tensor loss = loss_fn(pred, y);  // y (N)
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

// TODO(lab 4, task 4): copy train_regression_buggy above and fix it. Run the buggy
// one first and look at its losses (README.md explains the number they stop at).
// Accept y of shape (N) or (N, 1) and give it the prediction's shape (N, 1); throw
// a gs::Error naming any other shape. Keep MSELoss's default (no broadcasting), so
// a mismatch that slips through still raises.
std::vector<double> train_regression(nn::Module& model, const Tensor& x, const Tensor& y, int steps, double lr) {
  throw Error("lab 4", "not implemented: lab 4 task 4 (train_regression in tutorials/lab4_broadcasting/lab4.cpp)");
}

// TODO(lab 4, task 5): the error is recognised by its words "modified by an in-place
// operation"; then read each part with text_between (above), for instance
// text_between(message, "saved by '", "'"), and the versions with std::stoll.
InplaceReport read_inplace_error(const std::string& message) {
  throw Error("lab 4", "not implemented: lab 4 task 5 (read_inplace_error in tutorials/lab4_broadcasting/lab4.cpp)");
}

// ---- given: the residual block's layers -----------------------------------------------------
ResidualMLP::ResidualMLP(int64_t features) : Module("lab4.ResidualMLP") {
  fc1 = register_module("fc1", std::make_shared<nn::Linear>(features, features));
  fc2 = register_module("fc2", std::make_shared<nn::Linear>(features, features));
}

// ---- given: the block with bug B02 ----------------------------------------------------------
Tensor ResidualMLPInplace::forward(const Tensor& x) {
  Tensor h = (*fc1)(x);  // (B, D); fc1's matmul saved x for its weight's gradient
  h.relu_();             // in place on a tensor nobody saved
  h = (*fc2)(h);         // (B, D)
  Tensor out = x;        // "saves memory": out is another handle to x, not a copy
  out.add_(h);           // x += h
  out.relu_();
  return out;
}

// TODO(lab 4, task 6): run ResidualMLPInplace on a batch and call backward() to
// see its error (Task 4.5 reads it), then write the block out of place:
// relu(x + fc2(relu(fc1(x)))). Call the layers as (*fc1)(x).
Tensor ResidualMLP::forward(const Tensor& x) {
  throw Error("lab 4", "not implemented: lab 4 task 6 (ResidualMLP::forward in tutorials/lab4_broadcasting/lab4.cpp)");
}

}  // namespace gradsleuth::lab4
