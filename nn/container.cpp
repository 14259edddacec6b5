// Sequential, Residual, ResidualBlock.
#include "nn/container.h"

#include "nn/conv.h"
#include "nn/layer_checks.h"
#include "nn/normalization.h"

namespace gradsleuth::nn {

// ---- Sequential ---------------------------------------------------------------------
Sequential::Sequential(std::initializer_list<ModulePtr> layers) : Module("Sequential") {
  for (const auto& l : layers) push_back(l);
}
Sequential::Sequential(const std::vector<ModulePtr>& layers) : Module("Sequential") {
  for (const auto& l : layers) push_back(l);
}

Sequential& Sequential::push_back(ModulePtr layer) {
  GS_CHECK(layer != nullptr, "Sequential", "cannot add a null module as layer ", layers_.size(),
           " (was its shared_ptr moved from, or never made with std::make_shared?)");
  add_child(std::to_string(layers_.size()), layer);
  layers_.push_back(std::move(layer));
  return *this;
}

const ModulePtr& Sequential::operator[](size_t i) const {
  GS_CHECK(i < layers_.size(), "Sequential", "index ", i, " is out of range: it has ", layers_.size(), " layers");
  return layers_[i];
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& layer : layers_) h = (*layer)(h);
  return h;
}

// ---- Residual -------------------------------------------------------------------------
Residual::Residual(ModulePtr inner) : Module("Residual"), inner_(std::move(inner)) {
  GS_CHECK(inner_ != nullptr, "Residual", "the inner module is null");
  add_child("inner", inner_);
}

Tensor Residual::forward(const Tensor& x) {
  Tensor fx = (*inner_)(x);
  GS_CHECK(fx.shape() == x.shape(), "Residual", "the inner module (", inner_->type_name(), ") maps ",
           shape_str(x.shape()), " to ", shape_str(fx.shape()),
           ", but x + inner(x) needs the same shape in and "
           "out (broadcasting would silently mix values). Keep the sizes equal inside the block, or project the "
           "skip path with a Linear/1x1 Conv2d in a custom module.");
  if (has_bug(Bug::B02)) [[unlikely]] {
    // BUG B02: the skip sum is accumulated in place into x ("saves memory"), but
    // the inner block's first op saved x for its backward: the backward raises
    // (M20). Correct: a new tensor, x + inner(x).
    Tensor out = x;
    out.add_(fx);
    return out;
  }
  return x + fx;
}

// ---- ResidualBlock ------------------------------------------------------------------------
ResidualBlock::ResidualBlock(int64_t channels) : Module("ResidualBlock"), channels_(channels) {
  GS_CHECK(channels > 0, "ResidualBlock", "channels must be positive, got ", channels);
  auto conv = [&] { return std::make_shared<Conv2d>(Conv2dOptions(channels, channels, 3).padding(1).bias(false)); };
  conv1_ = register_module("conv1", conv());
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(channels));
  conv2_ = register_module("conv2", conv());
  bn2_ = register_module("bn2", std::make_shared<BatchNorm2d>(channels));
}

std::string ResidualBlock::extra_repr() const { return detail::str_cat("channels=", channels_); }

Tensor ResidualBlock::forward(const Tensor& x) {
  Tensor h = relu((*bn1_)((*conv1_)(x)));  // (N, C, H, W)
  h = (*bn2_)((*conv2_)(h));
  return relu(x + h);
}

}  // namespace gradsleuth::nn
