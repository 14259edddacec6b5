// Lab 3 starter code: an MLP on Fashion-MNIST, from the layer to the training loop.
// Replace each `throw` marked TODO with your code (README.md, Tasks 3.1-3.7),
// rebuild and grade:   ./run.sh lab check 3
#include "tutorials/lab3_mlp/lab3.h"

#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"

namespace gradsleuth::lab3 {

// ---- given: the parameters of a Linear layer ------------------------------------------
// register_parameter makes the module own the tensor (model.parameters() lists
// it) and sets requires_grad. The scale 1/sqrt(D) keeps each output's variance
// near its input's (lab 6 shows what happens without it).
Linear::Linear(int64_t in_features, int64_t out_features) : Module("lab3.Linear") {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", empty({out_features, in_features}).uniform_(-bound, bound));  // (M, D)
  bias = register_parameter("bias", empty({out_features}).uniform_(-bound, bound));                   // (M)
}

// TODO(lab 3, task 1): y = x @ weight^T + bias, with tensor ops so that autograd
// records the backward for you: x (B, D) @ weight^T (D, M) -> (B, M), + bias (M)
// broadcast over the rows.
Tensor Linear::forward(const Tensor& x) {
  throw Error("lab 3", "not implemented: lab 3 task 1 (Linear::forward in tutorials/lab3_mlp/lab3.cpp)");
}

// TODO(lab 3, task 2): subtract each row's max m (keepdim, so it broadcasts),
// exponentiate, sum the row, take the log, add m back:
//   logsumexp(x) = m + log(sum_k exp(x_k - m))
// Every exp(x_k - m) is at most 1, so nothing overflows.
Tensor logsumexp(const Tensor& x) {
  throw Error("lab 3", "not implemented: lab 3 task 2 (logsumexp in tutorials/lab3_mlp/lab3.cpp)");
}

// TODO(lab 3, task 3): log softmax(z)_k = z_k - logsumexp(z), so the loss of row
// b is logsumexp(logits[b]) - logits[b, targets[b]]. Pick the target logits with
// logits.gather(1, targets.unsqueeze(1)) -> (B, 1), then average over the batch.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets) {
  throw Error("lab 3", "not implemented: lab 3 task 3 (cross_entropy in tutorials/lab3_mlp/lab3.cpp)");
}

// TODO(lab 3, task 4): p.set_grad(Tensor()) for every parameter (an undefined
// gradient: the next backward starts from nothing instead of adding to it).
void SGD::zero_grad() {
  throw Error("lab 3", "not implemented: lab 3 task 4 (SGD::zero_grad in tutorials/lab3_mlp/lab3.cpp)");
}

// TODO(lab 3, task 4): for every parameter p with a defined p.grad():
// p.sub_(p.grad(), lr_) inside a NoGradGuard. In place, so that the model, which
// holds the same tensor, sees the new values; under NoGradGuard, because the
// update is not part of any computation to differentiate.
void SGD::step() { throw Error("lab 3", "not implemented: lab 3 task 4 (SGD::step in tutorials/lab3_mlp/lab3.cpp)"); }

// TODO(lab 3, task 5): the five lines every framework shares:
//   zero_grad, forward (model(x)), loss (cross_entropy), backward, step;
// then return the loss as a double (loss.item<double>()).
double train_step(nn::Module& model, SGD& opt, const Tensor& x, const Tensor& y) {
  throw Error("lab 3", "not implemented: lab 3 task 5 (train_step in tutorials/lab3_mlp/lab3.cpp)");
}

// ---- given: the MLP's layers ----------------------------------------------------------
MLP::MLP(int64_t hidden) : Module("lab3.MLP") {
  fc1 = register_module("fc1", std::make_shared<Linear>(28 * 28, hidden));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden, 10));
}

// TODO(lab 3, task 6): flatten everything after the batch dim (x.flatten(1)),
// then fc1, relu, fc2. Call the layers as (*fc1)(h): operator() runs forward()
// with the module's hooks around it.
Tensor MLP::forward(const Tensor& x) {
  throw Error("lab 3", "not implemented: lab 3 task 6 (MLP::forward in tutorials/lab3_mlp/lab3.cpp)");
}

// TODO(lab 3, task 7): model.train(); then for each epoch, for each batch b of
// the loader (for (const nn::Batch& b : loader)), loss = train_step(model, opt,
// b.x, b.y); return the mean loss of each epoch.
std::vector<double> fit(nn::Module& model, SGD& opt, nn::DataLoader& loader, int epochs) {
  throw Error("lab 3", "not implemented: lab 3 task 7 (fit in tutorials/lab3_mlp/lab3.cpp)");
}

}  // namespace gradsleuth::lab3
