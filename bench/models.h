// bench/models.h: the networks the training-step benchmarks time (bench_train_step,
// bench_step_device), the same graphs bench/peer_train_step.py builds in PyTorch.
#pragma once
#include <memory>

#include "nn/nn.h"

namespace gs_bench {

namespace nn = gradsleuth::nn;

// MLP 784-256-10: (B, 1, 28, 28) -> (B, 10).
inline std::shared_ptr<nn::Module> mlp2() {
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(256, 10));
}
// The CLI's MLP 784-256-128-10.
inline std::shared_ptr<nn::Module> mlp3() {
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(256, 128),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10));
}
// conv32-pool-conv64-pool-fc128-fc10, no dropout (the same graph as the PyTorch side).
inline std::shared_ptr<nn::Module> cnn() {
  return std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 32, 3).padding(1)), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Conv2d>(nn::Conv2dOptions(32, 64, 3).padding(1)),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(64 * 7 * 7, 128), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(128, 10));
}

}  // namespace gs_bench
