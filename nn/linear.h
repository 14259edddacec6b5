// Linear (fully connected) layers and the shape helpers that usually sit next
// to them: Flatten and Identity.
//
// Dimension letters: B = batch, D = in_features, M = out_features.
#pragma once
#include <cstdint>
#include <string>

#include "nn/module.h"

namespace gradsleuth::nn {

// y = x @ weight^T + bias.   x (B, D) or (..., D) -> y (..., M)
// Parameters: weight (M, D), bias (M) (absent with bias=false).
// Default init (PyTorch's): weight kaiming_uniform_(a=sqrt(5)), which is
// U(-1/sqrt(D), 1/sqrt(D)); bias U(-1/sqrt(D), 1/sqrt(D)).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;  // "in_features=784, out_features=256, bias=true"
  // Re-draws the parameters with the default initialisation.
  void reset_parameters();
  // B12 detach, B13 reshape-for-transpose, B16 huge init, B18 dying bias, B22 wrong backward.
  std::vector<Bug> injectable_bugs() const override { return {Bug::B12, Bug::B13, Bug::B16, Bug::B18, Bug::B22}; }

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }

  Tensor weight;  // (M, D)
  Tensor bias;    // (M), undefined when bias=false

 protected:
  void on_bug_injected(Bug b) override;

 private:
  int64_t in_features_, out_features_;
};

// Collapses dims start_dim..end_dim into one:   x (B, C, H, W) -> (B, C*H*W) by default.
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;  // "start_dim=1, end_dim=-1"

 private:
  int64_t start_dim_, end_dim_;
};

// Returns its input: a placeholder (e.g. a skip path, or a layer switched off).
class Identity : public Module {
 public:
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};

}  // namespace gradsleuth::nn
