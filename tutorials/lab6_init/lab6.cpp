// Lab 6 starter code: dead ReLUs, saturation, vanishing gradients and initialisation.
// Replace each `throw` marked TODO with your code (README.md, Tasks 6.1-6.5),
// rebuild and grade:   ./run.sh lab check 6
#include "tutorials/lab6_init/lab6.h"

#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"
#include "nn/activation.h"
#include "nn/linear.h"

namespace gradsleuth::lab6 {

// TODO(lab 6, task 1): for each batch y (B, U, ...), a unit is alive in it when
// some value of its slice y[:, u, ...] is > 0. Move the unit dim first and
// flatten the rest: y.transpose(0, 1).flatten(1) is (U, B * ...); compare with
// 0 and reduce each row: amax(positive.to(kFloat32), {1}) > 0. A unit is
// alive over the pass when it is alive in any batch (a logical or, `||`); dead
// is the negation (`!`). Check the inputs first: an empty list, fewer than 2
// dims, or batches with different U must throw gs::Error (GS_CHECK).
Tensor dead_units(const std::vector<Tensor>& activations) {
  throw Error("lab 6", "not implemented: lab 6 task 1 (dead_units in tutorials/lab6_init/lab6.cpp)");
}

// TODO(lab 6, task 1): the mean of dead_units(activations) as a number.
double dead_fraction(const std::vector<Tensor>& activations) {
  throw Error("lab 6", "not implemented: lab 6 task 1 (dead_fraction in tutorials/lab6_init/lab6.cpp)");
}

// TODO(lab 6, task 2): a weight (M, D, k...) has fan_in = D * prod(k) and
// fan_out = M * prod(k): a conv kernel position is one more input of the unit.
// 0-D and 1-D tensors (biases) have no fan: throw gs::Error.
std::pair<int64_t, int64_t> fan_in_and_out(const Tensor& w) {
  throw Error("lab 6", "not implemented: lab 6 task 2 (fan_in_and_out in tutorials/lab6_init/lab6.cpp)");
}

// TODO(lab 6, task 2): std = sqrt(2 / fan_in). Draw from `gen` only:
//   w.copy_(randn(w.shape(), w.dtype(), &gen) * std)   inside a NoGradGuard.
// copy_ writes into w's own storage, so the model's handle sees the new values
// (w = ... would only rebind this local copy of the handle). w.normal_() and
// nn::init use the global generator: the grader checks that you do not.
void he_normal_(Tensor w, Generator& gen) {
  throw Error("lab 6", "not implemented: lab 6 task 2 (he_normal_ in tutorials/lab6_init/lab6.cpp)");
}

// TODO(lab 6, task 2): the same with std = sqrt(2 / (fan_in + fan_out)).
void xavier_normal_(Tensor w, Generator& gen) {
  throw Error("lab 6", "not implemented: lab 6 task 2 (xavier_normal_ in tutorials/lab6_init/lab6.cpp)");
}

// TODO(lab 6, task 3): for (name, p) of model.named_parameters(), keep the
// weights (p.dim() >= 2 and p.requires_grad()); the norm of p.grad() is
// sqrt(sum(g^2)) (compute it in float64: g.to(kFloat64)), or 0 when p.grad() is
// undefined.
std::vector<std::pair<std::string, double>> weight_grad_norms(const nn::Module& model) {
  throw Error("lab 6", "not implemented: lab 6 task 3 (weight_grad_norms in tutorials/lab6_init/lab6.cpp)");
}

// TODO(lab 6, task 3): first norm / last norm; gs::Error with fewer than two weights.
double first_last_ratio(const nn::Module& model) {
  throw Error("lab 6", "not implemented: lab 6 task 3 (first_last_ratio in tutorials/lab6_init/lab6.cpp)");
}

// TODO(lab 6, task 4): build the stack with std::make_shared<nn::Sequential>()
// and model->push_back(layer). For each hidden layer: an nn::Linear(d, width)
// (d = in for the first, width after), its weight drawn with he_normal_ (ReLUHe)
// or xavier_normal_ (Sigmoid), its bias zeroed (bias.zero_() in a NoGradGuard),
// then nn::ReLU or nn::Sigmoid. Last: nn::Linear(width, out) with
// xavier_normal_ and a zero bias.
std::shared_ptr<nn::Sequential> deep_stack(int64_t in, int64_t width, int64_t depth, int64_t out, Stack kind,
                                           Generator& gen) {
  throw Error("lab 6", "not implemented: lab 6 task 4 (deep_stack in tutorials/lab6_init/lab6.cpp)");
}

// ---- given: the network of Task 6.5 ----------------------------------------------------
std::shared_ptr<nn::Sequential> make_broken_mlp(uint64_t seed) {
  manual_seed(seed);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 128),
                                                std::make_shared<nn::Sigmoid>(), std::make_shared<nn::Linear>(128, 128),
                                                std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10));
  NoGradGuard no_grad;
  Generator gen(seed);
  model->at<nn::Linear>(1)->weight.copy_(randn({128, 784}, kFloat32, &gen));  // N(0, 1): B16's pattern
  model->at<nn::Linear>(3)->bias.fill_(-4.0);                                 // B18's pattern
  return model;
}

// TODO(lab 6, task 5): first find out what is wrong (README, Task 6.5: attach
// debug::DeadReluTracker and debug::SaturationTracker, run debug::check_initialisation).
// Then for each layer i of model.layers() that is an nn::Linear
// (std::dynamic_pointer_cast<nn::Linear>(layer) is non-null): he_normal_ on its
// weight when layer i + 1 is a ReLU (layers[i + 1]->type_name() == "ReLU"),
// xavier_normal_ otherwise, and its bias to zero. Change the tensors in place:
// the optimizer the grader builds afterwards must see the same tensors.
void fix_initialisation(nn::Sequential& model, Generator& gen) {
  throw Error("lab 6", "not implemented: lab 6 task 5 (fix_initialisation in tutorials/lab6_init/lab6.cpp)");
}

}  // namespace gradsleuth::lab6
