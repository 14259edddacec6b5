// Normalisation layers: BatchNorm1d/2d (statistics over the batch) and LayerNorm
// (statistics over each example's features).
//
// Dimension letters: B = batch, C = channels/features, L = length, H/W = height/width.
//
// BatchNorm, per channel c:   y = (x - mean_c) / sqrt(var_c + eps) * weight_c + bias_c
//  - training mode: mean_c, var_c are the batch's (biased var, divide by n), and the
//    running statistics move towards them:
//        running_mean = (1 - momentum) * running_mean + momentum * mean_c
//        running_var  = (1 - momentum) * running_var  + momentum * var_c * n / (n - 1)   (unbiased)
//    with n = elements per channel (B, B*L or B*H*W); num_batches_tracked counts updates.
//    momentum = nullopt uses the cumulative average (momentum = 1 / num_batches_tracked).
//  - eval mode: mean_c, var_c are the running statistics.
//  - track_running_stats = false: no running statistics exist; both modes use batch
//    statistics (so an eval output depends on the rest of the batch: bug B23).
// Buffers: running_mean (C) zeros, running_var (C) ones, num_batches_tracked () int64.
// Default init: weight 1, bias 0 (PyTorch's).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "nn/module.h"

namespace gradsleuth::nn {

// BatchNormOptions(64).momentum(0.01).affine(false); an int converts implicitly.
struct BatchNormOptions {
  BatchNormOptions(int64_t num_features) : num_features_(num_features) {}  // NOLINT: implicit on purpose
  BatchNormOptions& eps(double e) {
    eps_ = e;
    return *this;
  }
  BatchNormOptions& momentum(std::optional<double> m) {
    momentum_ = m;
    return *this;
  }
  BatchNormOptions& affine(bool a) {
    affine_ = a;
    return *this;
  }
  BatchNormOptions& track_running_stats(bool t) {
    track_running_stats_ = t;
    return *this;
  }

  int64_t num_features_;
  double eps_ = 1e-5;
  std::optional<double> momentum_ = 0.1;
  bool affine_ = true;               // learn weight (C) and bias (C)
  bool track_running_stats_ = true;  // keep running_mean/running_var for eval mode
};

// The shared implementation; BatchNorm1d/2d only differ in the input shapes they accept.
class BatchNormBase : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  // "64, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true"
  std::string extra_repr() const override;
  void reset_running_stats();  // mean 0, var 1, count 0
  void reset_parameters();     // weight 1, bias 0, and the running statistics
  const BatchNormOptions& options() const { return options_; }
  std::vector<Bug> injectable_bugs() const override { return {Bug::B23}; }  // no running statistics
  int64_t num_features() const { return options_.num_features_; }
  bool track_running_stats() const { return options_.track_running_stats_; }

  Tensor weight, bias;                                    // (C), undefined when affine=false
  Tensor running_mean, running_var, num_batches_tracked;  // (C), (C), (); undefined without tracking

 protected:
  BatchNormBase(std::string type_name, const BatchNormOptions& options);
  // Throws a teaching error unless x has a shape this layer accepts.
  virtual void check_input_shape(const Tensor& x) const = 0;

 private:
  BatchNormOptions options_;
};

// x (B, C) or (B, C, L); statistics over B (and L).
class BatchNorm1d : public BatchNormBase {
 public:
  BatchNorm1d(const BatchNormOptions& options) : BatchNormBase("BatchNorm1d", options) {}  // NOLINT

 protected:
  void check_input_shape(const Tensor& x) const override;
};

// x (B, C, H, W); statistics over B, H and W.
class BatchNorm2d : public BatchNormBase {
 public:
  BatchNorm2d(const BatchNormOptions& options) : BatchNormBase("BatchNorm2d", options) {}  // NOLINT

 protected:
  void check_input_shape(const Tensor& x) const override;
};

// LayerNorm over the last dims, which must equal normalized_shape:
//   x (..., *normalized_shape) -> same shape, each example normalised by its own
//   mean and (biased) variance over those dims, then * weight + bias.
// Parameters: weight, bias of shape normalized_shape (weight 1, bias 0).
// Unlike BatchNorm it behaves the same in training and eval mode.
class LayerNorm : public Module {
 public:
  LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true)
      : LayerNorm(Shape{normalized_size}, eps, elementwise_affine) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;  // "[64], eps=1e-05, elementwise_affine=true"
  void reset_parameters();
  const Shape& normalized_shape() const { return normalized_shape_; }

  Tensor weight, bias;  // normalized_shape, undefined when elementwise_affine=false

 private:
  Shape normalized_shape_;
  double eps_;
};

}  // namespace gradsleuth::nn
