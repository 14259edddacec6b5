// Containers: Sequential (layers applied in order) and residual connections.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"

namespace gradsleuth::nn {

// Applies its children in order; they are named "0", "1", ... so parameters read
// "0.weight", "2.bias" as in PyTorch.
//   auto net = std::make_shared<nn::Sequential>(
//       std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256),
//       std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(256, 10));
//   net->push_back(std::make_shared<nn::LogSoftmax>(1));
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<ModulePtr> layers);
  explicit Sequential(const std::vector<ModulePtr>& layers);
  template <class... Ms>
  explicit Sequential(std::shared_ptr<Ms>... layers) : Sequential(std::vector<ModulePtr>{ModulePtr(layers)...}) {}

  // Appends a layer under the next index; returns *this for chaining.
  Sequential& push_back(ModulePtr layer);
  Tensor forward(const Tensor& x) override;  // a chain of each layer's operator() (hooks fire)

  size_t size() const { return layers_.size(); }
  bool empty() const { return layers_.empty(); }
  const ModulePtr& operator[](size_t i) const;
  template <class M>
  std::shared_ptr<M> at(size_t i) const {
    return std::dynamic_pointer_cast<M>((*this)[i]);
  }  // null if not an M
  const std::vector<ModulePtr>& layers() const { return layers_; }

 private:
  std::vector<ModulePtr> layers_;
};

// A skip connection:  y = x + inner(x).  The inner module must keep the shape.
// Its child is named "inner", so parameters read "inner.0.weight".
class Residual : public Module {
 public:
  explicit Residual(ModulePtr inner);
  Tensor forward(const Tensor& x) override;
  const ModulePtr& inner() const { return inner_; }
  std::vector<Bug> injectable_bugs() const override { return {Bug::B02}; }  // in-place skip sum

 private:
  ModulePtr inner_;
};

// ResNet's basic block with an identity skip, x (N, C, H, W) -> (N, C, H, W):
//   y = relu(x + bn2(conv2(relu(bn1(conv1(x))))))     conv: 3x3, padding 1, no bias
// Children: conv1, bn1, conv2, bn2 (torchvision's names).
class ResidualBlock : public Module {
 public:
  explicit ResidualBlock(int64_t channels);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;  // "channels=64"

 private:
  int64_t channels_;
  ModulePtr conv1_, bn1_, conv2_, bn2_;
};

}  // namespace gradsleuth::nn
