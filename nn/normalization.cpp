// BatchNorm and LayerNorm from mean/var and elementwise ops (autograd gives the
// backward, including the gradient through the batch statistics).
#include "nn/normalization.h"

#include <sstream>

#include "core/autocast.h"
#include "core/warning.h"
#include "nn/init.h"
#include "nn/layer_checks.h"

namespace gradsleuth::nn {

// ---- BatchNorm ------------------------------------------------------------------
BatchNormBase::BatchNormBase(std::string type_name, const BatchNormOptions& o)
    : Module(std::move(type_name)), options_(o) {
  const int64_t C = o.num_features_;
  GS_CHECK(C > 0, this->type_name(), "num_features must be positive, got ", C);
  GS_CHECK(o.eps_ >= 0, this->type_name(), "eps must be >= 0, got ", o.eps_);
  GS_CHECK(!o.momentum_ || (*o.momentum_ >= 0 && *o.momentum_ <= 1), this->type_name(),
           "momentum must be in [0, 1], got ", o.momentum_.value_or(0),
           ". Note PyTorch's convention: running = (1 - momentum) * running + momentum * batch, so 0.1 is the usual "
           "value (Keras' 0.99 corresponds to 0.01 here).");
  if (o.affine_) {
    weight = register_parameter("weight", empty({C}));  // (C)
    bias = register_parameter("bias", empty({C}));      // (C)
  }
  if (o.track_running_stats_) {
    running_mean = register_buffer("running_mean", zeros({C}));                       // (C)
    running_var = register_buffer("running_var", ones({C}));                          // (C)
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));  // ()
  }
  reset_parameters();
}

void BatchNormBase::reset_running_stats() {
  if (!options_.track_running_stats_) return;
  NoGradGuard ng;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

void BatchNormBase::reset_parameters() {
  reset_running_stats();
  if (options_.affine_) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

std::string BatchNormBase::extra_repr() const {
  std::ostringstream os;
  os << options_.num_features_ << ", eps=" << options_.eps_ << ", momentum=";
  if (options_.momentum_)
    os << *options_.momentum_;
  else
    os << "none";
  os << ", affine=" << (options_.affine_ ? "true" : "false")
     << ", track_running_stats=" << (options_.track_running_stats_ ? "true" : "false");
  return os.str();
}

void BatchNorm1d::check_input_shape(const Tensor& x) const {
  const int64_t C = num_features();
  const std::string who = "BatchNorm1d(" + std::to_string(C) + ")";
  if (x.dim() == 4)
    GS_FAIL(who, "expects (B, C) or (B, C, L) but got the 4-D input ", shape_str(x.shape()),
            ": for images (B, C, H, W) use nn::BatchNorm2d.");
  if (x.dim() == 1)
    GS_FAIL(who, "expects (B, C) or (B, C, L) but got ", shape_str(x.shape()),
            ": a single example has no batch to normalise over. Add the batch dim with x.unsqueeze(0).");
  GS_CHECK(x.dim() == 2 || x.dim() == 3, who, "expects (B, C) or (B, C, L) but got ", shape_str(x.shape()));
  if (x.size(1) != C) {
    if (x.dim() == 3 && x.size(2) == C)
      GS_FAIL(who, "expects the ", C, " features in dim 1 of (B, C, L), but got ", shape_str(x.shape()),
              ": this looks like (B, L, C). Use x.transpose(1, 2) first (or nn::LayerNorm over the last dim).");
    GS_FAIL(who, "expects ", C, " features in dim 1, but got ", shape_str(x.shape()), " with ", x.size(1),
            ". Set num_features=", x.size(1), ", or check the layer before it.");
  }
}

void BatchNorm2d::check_input_shape(const Tensor& x) const {
  const int64_t C = num_features();
  const std::string who = "BatchNorm2d(" + std::to_string(C) + ")";
  if (x.dim() == 2 || (x.dim() == 3 && x.size(0) != C))
    GS_FAIL(who, "expects a 4-D input (B, C, H, W) but got ", shape_str(x.shape()),
            ": for (B, C) or (B, C, L) features use nn::BatchNorm1d.");
  if (x.dim() == 3)
    GS_FAIL(who, "expects a 4-D input (B, C, H, W) but got ", shape_str(x.shape()),
            ", which looks like a single image (C, H, W): add the batch dim with x.unsqueeze(0).");
  GS_CHECK(x.dim() == 4, who, "expects a 4-D input (B, C, H, W) but got ", shape_str(x.shape()));
  if (x.size(1) != C) {
    if (x.size(3) == C)
      GS_FAIL(who, "expects ", C, " channels in dim 1 of (B, C, H, W), but got ", shape_str(x.shape()),
              ": this looks like channels-last (B, H, W, C). Use x.permute({0, 3, 1, 2}) first.");
    GS_FAIL(who, "expects ", C, " channels in dim 1 of (B, C, H, W), but got ", shape_str(x.shape()), " with ",
            x.size(1), ". Set num_features=", x.size(1), ", or check the out_channels of the layer before it.");
  }
}

Tensor BatchNormBase::forward(const Tensor& x) {
  if (autocast_enabled()) [[unlikely]] {  // batch_norm runs in float32 (docs/dtypes.md, "Autocast")
    gradsleuth::detail::AutocastScope ac("batch_norm");
    return forward(ac.cast(x));
  }
  detail::check_input(x, type_name() + "(" + std::to_string(num_features()) + ")");
  check_input_shape(x);
  const int64_t C = num_features();
  Dims reduce{0};      // every dim but the channel dim 1
  Shape bshape{1, C};  // (1, C, 1, ...) broadcasts a per-channel value over x
  for (int64_t d = 2; d < x.dim(); ++d) {
    reduce.push_back(d);
    bshape.push_back(1);
  }
  const int64_t n = x.numel() / C;  // elements per channel

  if (is_training() && !GradMode::is_enabled()) [[unlikely]]
    warn({"M2", type_name() + "(" + std::to_string(C) + ")",
          "ran in training mode under no_grad (an evaluation?): it normalises with this batch's statistics and "
          "moves the running statistics towards the evaluation data. Call model.eval() before evaluating."});
  // BUG B23: the layer keeps no usable running statistics: it normalises with the
  // batch's own statistics in eval mode too (and never updates running_mean/var),
  // so a prediction depends on the other examples in the batch and on its size.
  // Correct: running statistics updated in training, used in eval (below).
  const bool b23 = has_bug(Bug::B23);
  Tensor mean, var;  // (1, C, 1, ...)
  if (is_training() || !track_running_stats() || b23) {
    GS_CHECK(!is_training() || n > 1, type_name() + "(" + std::to_string(C) + ")",
             "expected more than 1 value per channel when training, got input ", shape_str(x.shape()),
             ": the variance of one value is 0. Use a batch size > 1, or call model.eval() "
             "to use the running statistics.");
    mean = x.mean(reduce, true);
    Tensor centered = x - mean;
    var = (centered * centered).mean(reduce, true);  // biased: the batch is normalised by its own spread
    if (is_training() && track_running_stats() && !b23) {
      NoGradGuard ng;
      num_batches_tracked.add_(1);  // an integer: 1.0 into the int64 counter is an error (as in PyTorch)
      const double f =
          options_.momentum_ ? *options_.momentum_ : 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
      const double unbias = static_cast<double>(n) / static_cast<double>(n - 1);
      running_mean.mul_(1.0 - f).add_(mean.detach().reshape({C}).to(running_mean.dtype()), f);
      running_var.mul_(1.0 - f).add_(var.detach().reshape({C}).to(running_var.dtype()), f * unbias);
    }
  } else {
    mean = running_mean.view(bshape);
    var = running_var.view(bshape);
  }
  Tensor y = (x - mean) / sqrt(var + options_.eps_);
  if (options_.affine_) y = y * weight.view(bshape) + bias.view(bshape);
  return y;
}

// ---- LayerNorm ------------------------------------------------------------------
LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine)
    : Module("LayerNorm"), normalized_shape_(normalized_shape), eps_(eps) {
  GS_CHECK(!normalized_shape.empty(), "LayerNorm", "normalized_shape must have at least one dim");
  for (int64_t s : normalized_shape)
    GS_CHECK(s > 0, "LayerNorm", "normalized_shape must have positive sizes, got ", shape_str(normalized_shape));
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape));
    bias = register_parameter("bias", zeros(normalized_shape));
  }
}

void LayerNorm::reset_parameters() {
  if (!weight.defined()) return;
  init::ones_(weight);
  init::zeros_(bias);
}

std::string LayerNorm::extra_repr() const {
  std::ostringstream os;
  os << shape_str(normalized_shape_) << ", eps=" << eps_
     << ", elementwise_affine=" << (weight.defined() ? "true" : "false");
  return os.str();
}

Tensor LayerNorm::forward(const Tensor& x) {
  if (autocast_enabled()) [[unlikely]] {  // layer_norm runs in float32 (docs/dtypes.md, "Autocast")
    gradsleuth::detail::AutocastScope ac("layer_norm");
    return forward(ac.cast(x));
  }
  const std::string who = "LayerNorm(" + extra_repr() + ")";
  detail::check_input(x, who);
  const int64_t k = static_cast<int64_t>(normalized_shape_.size());
  bool ok = x.dim() >= k;
  for (int64_t i = 0; ok && i < k; ++i) ok = x.size(x.dim() - k + i) == normalized_shape_[i];
  if (!ok) {
    if (k == 1 && x.dim() >= 2 && x.size(1) == normalized_shape_[0])
      GS_FAIL(who, "normalises the last dim, which must be ", normalized_shape_[0], ", but the input is ",
              shape_str(x.shape()),
              ". The features are in dim 1: move them last (e.g. x.transpose(1, -1)) or use "
              "nn::BatchNorm1d/2d for per-channel statistics.");
    GS_FAIL(who, "expects the input's last ", k, " dim(s) to be ", shape_str(normalized_shape_), " but got ",
            shape_str(x.shape()), ". Set normalized_shape to the trailing dims of the input.");
  }
  Dims dims;
  for (int64_t i = 0; i < k; ++i) dims.push_back(x.dim() - k + i);
  Tensor mean = x.mean(dims, true);  // (..., 1, ..., 1)
  Tensor centered = x - mean;
  Tensor var = (centered * centered).mean(dims, true);  // biased
  Tensor y = centered / sqrt(var + eps_);
  if (weight.defined()) y = y * weight + bias;  // normalized_shape broadcasts over the leading dims
  return y;
}

}  // namespace gradsleuth::nn
