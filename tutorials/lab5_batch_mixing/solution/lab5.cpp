// Lab 5 reference solution (built only with -DGRADSLEUTH_LAB_SOLUTIONS=ON).
// Batches that mix examples; see ../README.md.
#include "tutorials/lab5_batch_mixing/lab5.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "nn/normalization.h"

namespace gradsleuth::lab5 {

// Task 5.1
MixingProbe batch_mixing_probe(nn::Module& model, const Tensor& x, int64_t i, uint64_t weight_seed) {
  GS_CHECK(x.defined() && x.dim() >= 1 && x.size(0) >= 2, "lab5::batch_mixing_probe",
           "needs a batch of at least 2 examples, got ", x.defined() ? x.str() : std::string("an undefined tensor"));
  const int64_t B = x.size(0);
  GS_CHECK(i >= 0 && i < B, "lab5::batch_mixing_probe", "row ", i, " is not in the batch of ", B);
  // The probe's backward adds into the parameters' .grad, in place: move the old
  // gradients out of its way (undefined while it runs) and put them back afterwards.
  std::vector<Tensor> params = model.parameters();
  std::vector<Tensor> grads;
  for (Tensor& p : params) {
    grads.push_back(p.grad());
    p.set_grad(Tensor());
  }

  Tensor xi = x.detach().clone().requires_grad_(true);  // (B, ...): our own leaf
  Tensor g;
  try {
    const Tensor out = model(xi);
    GS_CHECK(out.dim() >= 1 && out.size(0) == B, "lab5::batch_mixing_probe", "the model's output ", out.str(),
             " has no batch dim of size ", B, " first");
    const Tensor row = out.select(0, i);  // output row i only
    Tensor loss;
    if (weight_seed == 0) {
      loss = row.sum();
    } else {
      Generator gen(weight_seed);
      loss = (row * randn(row.shape(), kFloat32, &gen)).sum();  // no constant row sum can hide a path
    }
    if (loss.requires_grad()) {
      loss.backward();
      g = xi.grad();
    }
  } catch (...) {
    for (size_t k = 0; k < params.size(); ++k) params[k].set_grad(grads[k]);
    throw;
  }
  for (size_t k = 0; k < params.size(); ++k) params[k].set_grad(grads[k]);

  NoGradGuard no_grad;
  if (!g.defined()) g = zeros_like(xi.detach());
  const Tensor rows = g.reshape({B, -1});  // (B, elements per example)
  MixingProbe r;
  r.grad_norms = rows.square().sum({1}).sqrt();  // (B)
  const std::vector<double> largest = rows.abs().max(1).to_vector<double>();
  for (int64_t j = 0; j < B; ++j)
    if (largest[j] > 0.0) r.rows.push_back(j);
  return r;
}

// Task 5.2: every row, since a layer can couple some rows and not others; weighted,
// since a softmax row sums to 1 whatever its inputs (its plain sum has no gradient).
constexpr uint64_t kWeightSeed = 1234;

bool mixes_batch(nn::Module& layer, const Tensor& x) {
  for (int64_t i = 0; i < x.size(0); ++i)
    for (int64_t j : batch_mixing_probe(layer, x, i, kWeightSeed).rows)
      if (j != i) return true;
  return false;
}

// Given (the same as in the starter).
Tensor running_mean_matrix(int64_t T) {
  Tensor a = zeros({T, T});
  float* p = a.data_ptr<float>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s <= t; ++s) p[t * T + s] = 1.0f / static_cast<float>(t + 1);
  return a;
}

TimeAverage::TimeAverage(int64_t in_features, int64_t out_features) : Module("lab5.TimeAverage") {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", empty({out_features, in_features}).uniform_(-bound, bound));
  bias = register_parameter("bias", empty({out_features}).uniform_(-bound, bound));
}

Tensor TimeAverageBuggy::forward(const Tensor& x) {
  GS_CHECK(x.dim() == 3 && x.size(2) == weight.size(1), "lab5::TimeAverage", "expects x (B, T, ", weight.size(1),
           "), got ", x.str());
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2), M = weight.size(0);
  Tensor xt = x.reshape({T, B * D});
  Tensor h = running_mean_matrix(T).matmul(xt).reshape({T, B, D});
  Tensor y = linear(h, weight, bias);
  return y.reshape({B, T, M});
}

// Task 5.3: transpose to time-major and back; reshape only merges (B, D) into one dim.
Tensor TimeAverage::forward(const Tensor& x) {
  GS_CHECK(x.dim() == 3 && x.size(2) == weight.size(1), "lab5::TimeAverage", "expects x (B, T, ", weight.size(1),
           "), got ", x.str());
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
  Tensor xt = x.transpose(0, 1).reshape({T, B * D});                // (T, B, D) -> (T, B*D), a copy
  Tensor h = running_mean_matrix(T).matmul(xt).reshape({T, B, D});  // h[t, b] = mean_{s<=t} x[b, s]
  Tensor y = linear(h, weight, bias);                               // (T, B, M)
  return y.transpose(0, 1);                                         // (B, T, M)
}

// Task 5.4
Tensor batchnorm_forward(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                         const Tensor& bias, double eps, bool training) {
  GS_CHECK(x.dim() == 2, "lab5::batchnorm_forward", "expects x (B, C), got ", x.str());
  Tensor mean, var;  // (C)
  if (training) {
    mean = x.mean({0});  // every row's output now depends on every row
    const Tensor c = x - mean;
    var = (c * c).mean({0});  // biased: divide by B
  } else {
    mean = running_mean;  // constants: each row on its own
    var = running_var;
  }
  Tensor y = (x - mean) / (var + eps).sqrt();
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}

// Task 5.5
namespace {
// The rows i whose output depends on another row's input, in the model's current mode.
std::vector<int64_t> coupled_rows(nn::Module& model, const Tensor& x) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < x.size(0); ++i) {
    const std::vector<int64_t> rows = batch_mixing_probe(model, x, i, kWeightSeed).rows;
    if (std::any_of(rows.begin(), rows.end(), [i](int64_t j) { return j != i; })) out.push_back(i);
  }
  return out;
}

// Puts every module's mode and every buffer back when it goes out of scope (also on an error).
class ModelState {
 public:
  explicit ModelState(nn::Module& model) : modules_(model.named_modules()) {
    for (auto& [path, m] : modules_) modes_.push_back(m->is_training());
    for (const Tensor& b : model.buffers()) buffers_.emplace_back(b, b.clone());
  }
  ~ModelState() {
    NoGradGuard no_grad;
    for (auto& [live, copy] : buffers_) live.copy_(copy);
    for (size_t k = 0; k < modules_.size(); ++k) modules_[k].second->train(modes_[k]);  // parents first
  }
  bool has_batchnorm() const {
    return std::any_of(modules_.begin(), modules_.end(),
                       [](const auto& pm) { return dynamic_cast<nn::BatchNormBase*>(pm.second.get()) != nullptr; });
  }

 private:
  std::vector<std::pair<std::string, nn::ModulePtr>> modules_;
  std::vector<bool> modes_;
  std::vector<std::pair<Tensor, Tensor>> buffers_;  // (live, copy)
};
}  // namespace

MixingVerdict check_batch_mixing(nn::Module& model, const Tensor& x) {
  ModelState restore(model);
  MixingVerdict v;
  model.eval();  // running statistics, no dropout: any coupling left is a bug
  v.mixing_rows = coupled_rows(model, x);
  v.mixes = !v.mixing_rows.empty();
  if (!v.mixes && restore.has_batchnorm()) {
    model.train();  // batch statistics: coupling expected
    v.batchnorm_coupling = !coupled_rows(model, x).empty();
  }
  return v;
}

}  // namespace gradsleuth::lab5
