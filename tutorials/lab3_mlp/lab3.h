// Lab 3: an MLP on Fashion-MNIST (README.md in this folder): a layer, a loss,
// an optimizer and the training loop, each written by you on top of the engine.
// Declared once for your code (lab3.cpp) and the reference solution
// (solution/lab3.cpp); the grader (../grader/grade_lab3.cpp) calls them here.
//
// Dimension letters: B = batch, D = input features, M = output features,
// K = classes (10), H = hidden units.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "nn/data.h"
#include "nn/module.h"

namespace gradsleuth::lab3 {

// Task 3.1: y = x @ weight^T + bias.   x (B, D) -> y (B, M)
// The constructor is given: it registers weight (M, D) and bias (M), both drawn
// from U(-1/sqrt(D), 1/sqrt(D)) (the default of nn::Linear and PyTorch).
class Linear : public nn::Module {
 public:
  Linear(int64_t in_features, int64_t out_features);
  Tensor forward(const Tensor& x) override;  // Task 3.1

  Tensor weight;  // (M, D)
  Tensor bias;    // (M)
};

// Task 3.2: log(sum_k exp(x[b, k])) for each row b, without overflow:
//   x (B, K) -> (B)
Tensor logsumexp(const Tensor& x);

// Task 3.3: the mean over the batch of -log softmax(logits)[b, targets[b]].
//   logits (B, K) float, targets (B) int64 in [0, K) -> a 0-dim tensor
Tensor cross_entropy(const Tensor& logits, const Tensor& targets);

// Task 3.4: stochastic gradient descent without momentum:  p <- p - lr * p.grad
class SGD {
 public:
  SGD(std::vector<Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {}
  void zero_grad();  // Task 3.4: forget every parameter's gradient
  void step();       // Task 3.4: update every parameter that has a gradient, in place
  double lr() const { return lr_; }
  const std::vector<Tensor>& params() const { return params_; }

 private:
  std::vector<Tensor> params_;
  double lr_;
};

// Task 3.5: one training step on a batch x, y (int64 classes): forget the old
// gradients, forward, cross_entropy loss, backward, update. Returns the loss
// (computed before the update) as a number.
double train_step(nn::Module& model, SGD& opt, const Tensor& x, const Tensor& y);

// Task 3.6: x (B, 1, 28, 28) -> flatten (B, 784) -> fc1 (B, H) -> relu -> fc2 (B, K) logits.
// The constructor is given: it registers fc1 = Linear(784, H) and fc2 = Linear(H, 10).
class MLP : public nn::Module {
 public:
  explicit MLP(int64_t hidden = 128);
  Tensor forward(const Tensor& x) override;  // Task 3.6

  std::shared_ptr<Linear> fc1, fc2;
};

// Task 3.7: `epochs` passes over the loader, one train_step per batch, with the
// model in training mode. Returns each epoch's mean batch loss.
std::vector<double> fit(nn::Module& model, SGD& opt, nn::DataLoader& loader, int epochs);

}  // namespace gradsleuth::lab3
