// Lab 3 reference solution (built only with -DGRADSLEUTH_LAB_SOLUTIONS=ON).
// An MLP on Fashion-MNIST; see ../README.md.
#include "tutorials/lab3_mlp/lab3.h"

#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"

namespace gradsleuth::lab3 {

// Given (the same as in the starter).
Linear::Linear(int64_t in_features, int64_t out_features) : Module("lab3.Linear") {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", empty({out_features, in_features}).uniform_(-bound, bound));  // (M, D)
  bias = register_parameter("bias", empty({out_features}).uniform_(-bound, bound));                   // (M)
}

// Task 3.1: x (B, D) @ weight^T (D, M) + bias (M) -> (B, M).
Tensor Linear::forward(const Tensor& x) { return x.matmul(weight.t()) + bias; }

// Task 3.2: m + log(sum exp(x - m)), m the row max (keepdim to broadcast).
Tensor logsumexp(const Tensor& x) {
  Tensor m = x.max(-1, /*keepdim=*/true).detach();  // (B, 1); any constant works, detached or not
  return (x - m).exp().sum({-1}).log() + m.squeeze(-1);
}

// Task 3.3: mean_b (logsumexp(logits[b]) - logits[b, targets[b]]).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets) {
  GS_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0), "lab3::cross_entropy",
           "expects logits (B, K) and targets (B), got ", logits.str(), " and ", targets.str());
  Tensor picked = logits.gather(1, targets.unsqueeze(1)).squeeze(1);  // (B)
  return (logsumexp(logits) - picked).mean();
}

// Task 3.4
void SGD::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
}

void SGD::step() {
  NoGradGuard no_grad;
  for (Tensor& p : params_)
    if (p.grad().defined()) p.sub_(p.grad(), lr_);
}

// Task 3.5
double train_step(nn::Module& model, SGD& opt, const Tensor& x, const Tensor& y) {
  opt.zero_grad();
  Tensor loss = cross_entropy(model(x), y);
  loss.backward();
  opt.step();
  return loss.item<double>();
}

// Given (the same as in the starter).
MLP::MLP(int64_t hidden) : Module("lab3.MLP") {
  fc1 = register_module("fc1", std::make_shared<Linear>(28 * 28, hidden));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden, 10));
}

// Task 3.6: (B, 1, 28, 28) -> (B, 784) -> (B, H) -> (B, 10).
Tensor MLP::forward(const Tensor& x) { return (*fc2)((*fc1)(x.flatten(1)).relu()); }

// Task 3.7
std::vector<double> fit(nn::Module& model, SGD& opt, nn::DataLoader& loader, int epochs) {
  model.train();
  std::vector<double> losses;
  for (int e = 0; e < epochs; ++e) {
    double total = 0.0;
    int64_t batches = 0;
    for (const nn::Batch& b : loader) {
      total += train_step(model, opt, b.x, b.y);
      ++batches;
    }
    losses.push_back(batches ? total / static_cast<double>(batches) : 0.0);
  }
  return losses;
}

}  // namespace gradsleuth::lab3
