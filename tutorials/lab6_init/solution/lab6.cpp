// Lab 6 reference solution (built only with -DGRADSLEUTH_LAB_SOLUTIONS=ON).
// Dead ReLUs, saturation, vanishing gradients and initialisation; see ../README.md.
#include "tutorials/lab6_init/lab6.h"

#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"
#include "nn/activation.h"
#include "nn/linear.h"

namespace gradsleuth::lab6 {

// Task 6.1: alive = some value > 0 in the unit's column (B, U, ...) of some batch.
Tensor dead_units(const std::vector<Tensor>& activations) {
  GS_CHECK(!activations.empty(), "lab6::dead_units", "needs at least one batch of activations");
  NoGradGuard no_grad;
  Tensor alive;  // (U) bool
  for (const Tensor& y : activations) {
    GS_CHECK(y.defined() && y.dim() >= 2, "lab6::dead_units", "expects activations (B, U, ...), got ",
             y.defined() ? y.str() : "an undefined tensor");
    const Tensor positive = y.detach().transpose(0, 1).flatten(1) > 0.0;  // (U, B * ...) bool
    Tensor a = amax(positive.to(kFloat32), {1}) > 0.0;                    // (U): positive somewhere
    if (!alive.defined()) {
      alive = a;
    } else {
      GS_CHECK(a.shape() == alive.shape(), "lab6::dead_units",
               "the batches have different numbers of units: ", alive.size(0), " and ", a.size(0));
      alive = alive || a;
    }
  }
  return !alive;
}

double dead_fraction(const std::vector<Tensor>& activations) {
  const Tensor dead = dead_units(activations);
  return dead.numel() == 0 ? 0.0 : dead.to(kFloat64).mean().item<double>();
}

// Task 6.2
std::pair<int64_t, int64_t> fan_in_and_out(const Tensor& w) {
  GS_CHECK(w.defined() && w.dim() >= 2, "lab6::fan_in_and_out",
           "needs a weight with at least 2 dims (out, in, k...), got ", w.defined() ? w.str() : "an undefined tensor",
           ": a bias has no fan");
  int64_t receptive = 1;  // prod(k): the kernel's positions
  for (int64_t d = 2; d < w.dim(); ++d) receptive *= w.size(d);
  return {w.size(1) * receptive, w.size(0) * receptive};
}

namespace {
// w <- N(0, std^2) drawn from gen, in place and outside the graph.
void fill_normal(Tensor& w, double std, Generator& gen) {
  NoGradGuard no_grad;
  w.copy_(randn(w.shape(), w.dtype(), &gen) * std);
}
}  // namespace

void he_normal_(Tensor w, Generator& gen) {
  const auto [fan_in, fan_out] = fan_in_and_out(w);
  fill_normal(w, std::sqrt(2.0 / static_cast<double>(fan_in)), gen);
}

void xavier_normal_(Tensor w, Generator& gen) {
  const auto [fan_in, fan_out] = fan_in_and_out(w);
  fill_normal(w, std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)), gen);
}

// Task 6.3
std::vector<std::pair<std::string, double>> weight_grad_norms(const nn::Module& model) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [name, p] : model.named_parameters()) {
    if (p.dim() < 2 || !p.requires_grad()) continue;
    const Tensor g = p.grad();
    out.emplace_back(name, g.defined() ? g.to(kFloat64).square().sum().sqrt().item<double>() : 0.0);
  }
  return out;
}

double first_last_ratio(const nn::Module& model) {
  const auto norms = weight_grad_norms(model);
  GS_CHECK(norms.size() >= 2, "lab6::first_last_ratio", "needs at least two weights, the model has ", norms.size());
  return norms.front().second / norms.back().second;
}

// Task 6.4
std::shared_ptr<nn::Sequential> deep_stack(int64_t in, int64_t width, int64_t depth, int64_t out, Stack kind,
                                           Generator& gen) {
  auto model = std::make_shared<nn::Sequential>();
  int64_t d = in;
  for (int64_t i = 0; i < depth; ++i, d = width) {
    auto fc = std::make_shared<nn::Linear>(d, width);
    if (kind == Stack::ReLUHe)
      he_normal_(fc->weight, gen);
    else
      xavier_normal_(fc->weight, gen);
    {
      NoGradGuard no_grad;
      fc->bias.zero_();
    }
    model->push_back(fc);
    if (kind == Stack::ReLUHe)
      model->push_back(std::make_shared<nn::ReLU>());
    else
      model->push_back(std::make_shared<nn::Sigmoid>());
  }
  auto head = std::make_shared<nn::Linear>(d, out);
  xavier_normal_(head->weight, gen);
  NoGradGuard no_grad;
  head->bias.zero_();
  model->push_back(head);
  return model;
}

// Given (the same as in the starter).
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

// Task 6.5: He before a ReLU, Xavier elsewhere, biases zero, all in place.
void fix_initialisation(nn::Sequential& model, Generator& gen) {
  const auto& layers = model.layers();
  for (size_t i = 0; i < layers.size(); ++i) {
    auto fc = std::dynamic_pointer_cast<nn::Linear>(layers[i]);
    if (!fc) continue;
    const bool relu_next = i + 1 < layers.size() && layers[i + 1]->type_name() == "ReLU";
    if (relu_next)
      he_normal_(fc->weight, gen);
    else
      xavier_normal_(fc->weight, gen);
    NoGradGuard no_grad;
    if (fc->bias.defined()) fc->bias.zero_();
  }
}

}  // namespace gradsleuth::lab6
