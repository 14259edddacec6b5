// Time to accuracy, the peer side: `gradsleuth train --model mlp|cnn` written against
// libtorch's C++ API with the same model, optimizer (Adam, lr 1e-3), per-epoch cosine
// schedule, batch size 64, epochs (mlp 10, cnn 8), per-epoch shuffling and a test
// evaluation after every epoch, on one thread. The images come through gradsleuth's
// own IDX reader (the same bytes, read once, outside the timed part on both sides'
// second run: the reader caches) and are copied into torch tensors.
//   peer_train_libtorch --model mlp|cnn [--epochs N] [--seed S]
// Prints one JSON line: {"model", "epochs", "test_accuracy", "seconds", "torch"}.
// Built with -DGRADSLEUTH_BENCH_PEER=ON when Debian's libtorch-dev is found (bench/CMakeLists.txt).
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "nn/fashion_mnist.h"

namespace {

torch::nn::Sequential make_mlp() {  // x (B, 1, 28, 28) -> 784 -> 256 -> 128 -> 10
  namespace tnn = torch::nn;
  return tnn::Sequential(tnn::Flatten(), tnn::Linear(784, 256), tnn::ReLU(), tnn::Linear(256, 128), tnn::ReLU(),
                         tnn::Linear(128, 10));
}

torch::nn::Sequential make_cnn() {  // as gradsleuth train's make_cnn(), dropout 0.25 included
  namespace tnn = torch::nn;
  return tnn::Sequential(tnn::Conv2d(tnn::Conv2dOptions(1, 32, 3).padding(1)), tnn::ReLU(),
                         tnn::MaxPool2d(tnn::MaxPool2dOptions(2)),
                         tnn::Conv2d(tnn::Conv2dOptions(32, 64, 3).padding(1)), tnn::ReLU(),
                         tnn::MaxPool2d(tnn::MaxPool2dOptions(2)), tnn::Flatten(), tnn::Linear(64 * 7 * 7, 128),
                         tnn::ReLU(), tnn::Dropout(0.25), tnn::Linear(128, 10));
}

// x (N, 1, 28, 28) float32, y (N) int64, copied out of gradsleuth tensors.
std::pair<torch::Tensor, torch::Tensor> to_torch(const gradsleuth::nn::FashionMnist& d) {
  gradsleuth::Tensor x = d.x().contiguous(), y = d.y().contiguous();
  torch::Tensor tx = torch::empty({x.size(0), 1, 28, 28}, torch::kFloat32);
  torch::Tensor ty = torch::empty({y.size(0)}, torch::kLong);
  std::memcpy(tx.data_ptr(), x.raw_data(), x.nbytes());
  std::memcpy(ty.data_ptr(), y.raw_data(), y.nbytes());
  return {tx, ty};
}

double accuracy(torch::nn::Sequential& model, const torch::Tensor& x, const torch::Tensor& y) {
  torch::NoGradGuard ng;
  model->eval();
  int64_t correct = 0;
  for (int64_t i = 0; i < x.size(0); i += 500) {
    const int64_t n = std::min<int64_t>(500, x.size(0) - i);
    correct += model->forward(x.narrow(0, i, n)).argmax(1).eq(y.narrow(0, i, n)).sum().item<int64_t>();
  }
  model->train();
  return double(correct) / double(x.size(0));
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_name = "mlp";
  int epochs = -1;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) model_name = argv[++i];
    else if (a == "--epochs" && i + 1 < argc) epochs = std::stoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = std::stoull(argv[++i]);
    else {
      std::fprintf(stderr, "usage: peer_train_libtorch --model mlp|cnn [--epochs N] [--seed S]\n");
      return 2;
    }
  }
  if (model_name != "mlp" && model_name != "cnn") {
    std::fprintf(stderr, "peer_train_libtorch: unknown --model '%s': use mlp or cnn\n", model_name.c_str());
    return 2;
  }
  if (epochs < 0) epochs = model_name == "cnn" ? 8 : 10;
  torch::set_num_threads(1);
  torch::manual_seed(seed);

  const auto t0 = std::chrono::steady_clock::now();
  auto [xtr, ytr] = to_torch(*gradsleuth::nn::load_fashion_mnist("train"));
  auto [xte, yte] = to_torch(*gradsleuth::nn::load_fashion_mnist("test"));
  torch::nn::Sequential model = model_name == "cnn" ? make_cnn() : make_mlp();
  const double lr = 1e-3;
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(lr));
  const int64_t B = 64, N = xtr.size(0);
  double acc = 0;
  for (int e = 0; e < epochs; ++e) {
    // Cosine annealing stepped per epoch, to 0 at the end (as CosineAnnealingLR(T_max = epochs)).
    const double lr_e = 0.5 * lr * (1 + std::cos(M_PI * e / epochs));
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamOptions&>(g.options()).lr(lr_e);
    torch::Tensor perm = torch::randperm(N, torch::kLong);
    for (int64_t i = 0; i < N; i += B) {
      torch::Tensor idx = perm.narrow(0, i, std::min<int64_t>(B, N - i));
      opt.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(xtr.index_select(0, idx)),
                                                                ytr.index_select(0, idx));
      loss.backward();
      opt.step();
    }
    acc = accuracy(model, xte, yte);
    std::fprintf(stderr, "peer_train_libtorch: epoch %d/%d test accuracy %.4f\n", e + 1, epochs, acc);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("{\"model\": \"%s\", \"epochs\": %d, \"test_accuracy\": %.4f, \"seconds\": %.1f, \"torch\": \"%s\"}\n",
              model_name.c_str(), epochs, acc, secs, TORCH_VERSION);
  return 0;
}
