// Time to accuracy, the peer side: `gradsleuth train --model mlp|cnn` written against
// libtorch's C++ API with the same recipe: the same model, Adam, batch 64, epochs,
// lr schedule and label smoothing as cli/cmd_train.cpp's per-model defaults
//   mlp: 10 epochs, lr 1e-3, cosine stepped per epoch, no smoothing
//   cnn:  6 epochs, lr 2e-3, linear warm-up from a tenth over half an epoch, then
//         cosine to 0 stepped per batch, label smoothing 0.1 on the training loss
// the same 10% validation split (gradsleuth's own train_val_split, seed 1, so the very
// same images), per-epoch shuffling, validation after every epoch and the test set
// once at the end, on one thread. The images come through gradsleuth's IDX reader and
// are copied into torch tensors (inside the timed part, as on the gradsleuth side).
//   peer_train_libtorch --model mlp|cnn [--epochs N] [--seed S]
// Prints one JSON line: {"model", "epochs", "val_accuracy", "test_accuracy", "seconds", "cpu_seconds", "torch"}.
// Built with -DGRADSLEUTH_BENCH_PEER=ON when Debian's libtorch-dev is found (bench/CMakeLists.txt).
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "nn/data.h"
#include "nn/fashion_mnist.h"

namespace {

torch::nn::Sequential make_mlp() {  // x (B, 1, 28, 28) -> 784 -> 256 -> 128 -> 10
  namespace tnn = torch::nn;
  return tnn::Sequential(tnn::Flatten(), tnn::Linear(784, 256), tnn::ReLU(), tnn::Linear(256, 128), tnn::ReLU(),
                         tnn::Linear(128, 10));
}

torch::nn::Sequential make_cnn() {  // as gradsleuth train's make_cnn(), dropout 0.25 included
  namespace tnn = torch::nn;
  return tnn::Sequential(
      tnn::Conv2d(tnn::Conv2dOptions(1, 32, 3).padding(1)), tnn::ReLU(), tnn::MaxPool2d(tnn::MaxPool2dOptions(2)),
      tnn::Conv2d(tnn::Conv2dOptions(32, 64, 3).padding(1)), tnn::ReLU(), tnn::MaxPool2d(tnn::MaxPool2dOptions(2)),
      tnn::Flatten(), tnn::Linear(64 * 7 * 7, 128), tnn::ReLU(), tnn::Dropout(0.25), tnn::Linear(128, 10));
}

// x (N, 1, 28, 28) float32, y (N) int64 of the rows `rows` of a gradsleuth dataset.
std::pair<torch::Tensor, torch::Tensor> to_torch(const gradsleuth::nn::FashionMnist& d,
                                                 const std::vector<int64_t>& rows) {
  gradsleuth::Tensor x = d.x().contiguous(), y = d.y().contiguous();
  const int64_t n = static_cast<int64_t>(rows.size()), px = x.numel() / x.size(0);
  torch::Tensor tx = torch::empty({n, 1, 28, 28}, torch::kFloat32);
  torch::Tensor ty = torch::empty({n}, torch::kLong);
  const float* xs = static_cast<const float*>(x.raw_data());
  const int64_t* ys = static_cast<const int64_t*>(y.raw_data());
  float* xd = tx.data_ptr<float>();
  int64_t* yd = ty.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(xd + i * px, xs + rows[static_cast<size_t>(i)] * px, static_cast<size_t>(px) * sizeof(float));
    yd[i] = ys[rows[static_cast<size_t>(i)]];
  }
  return {tx, ty};
}
std::vector<int64_t> all_rows(int64_t n) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[static_cast<size_t>(i)] = i;
  return r;
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
    if (a == "--model" && i + 1 < argc)
      model_name = argv[++i];
    else if (a == "--epochs" && i + 1 < argc)
      epochs = std::stoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc)
      seed = std::stoull(argv[++i]);
    else {
      std::fprintf(stderr, "usage: peer_train_libtorch --model mlp|cnn [--epochs N] [--seed S]\n");
      return 2;
    }
  }
  if (model_name != "mlp" && model_name != "cnn") {
    std::fprintf(stderr, "peer_train_libtorch: unknown --model '%s': use mlp or cnn\n", model_name.c_str());
    return 2;
  }
  const bool cnn = model_name == "cnn";
  if (epochs < 0) epochs = cnn ? 6 : 10;
  torch::set_num_threads(1);
  torch::manual_seed(seed);

  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  auto train_all = gradsleuth::nn::load_fashion_mnist("train"), test_all = gradsleuth::nn::load_fashion_mnist("test");
  auto [tr, va] = gradsleuth::nn::train_val_split(train_all, 0.1, seed);  // as gradsleuth train --val-fraction 0.1
  auto [xtr, ytr] = to_torch(*train_all, tr->indices());
  auto [xva, yva] = to_torch(*train_all, va->indices());
  auto [xte, yte] = to_torch(*test_all, all_rows(test_all->size()));
  torch::nn::Sequential model = cnn ? make_cnn() : make_mlp();
  const double lr = cnn ? 2e-3 : 1e-3, smoothing = cnn ? 0.1 : 0.0;
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(lr));
  const int64_t B = 64, N = xtr.size(0), batches = (N + B - 1) / B, steps = epochs * batches;
  const int64_t warmup = std::min<int64_t>(steps / 2, std::max<int64_t>(1, batches / 2));
  auto set_lr = [&](double v) {
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamOptions&>(g.options()).lr(v);
  };
  // The lr of step t (0-based) as gradsleuth's LinearWarmup(0.1) + CosineAnnealingLR(steps - warmup).
  auto step_lr = [&](int64_t t) {
    if (t < warmup) return lr * (0.1 + 0.9 * static_cast<double>(t) / static_cast<double>(warmup));
    return 0.5 * lr * (1 + std::cos(M_PI * static_cast<double>(t - warmup) / static_cast<double>(steps - warmup)));
  };
  auto loss_options = torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(smoothing);
  double val_acc = 0;
  int64_t t = 0;
  for (int e = 0; e < epochs; ++e) {
    // mlp: cosine annealing stepped per epoch, to 0 at the end (CosineAnnealingLR(T_max = epochs)).
    if (!cnn) set_lr(0.5 * lr * (1 + std::cos(M_PI * e / epochs)));
    torch::Tensor perm = torch::randperm(N, torch::kLong);
    for (int64_t i = 0; i < N; i += B, ++t) {
      if (cnn) set_lr(step_lr(t));
      torch::Tensor idx = perm.narrow(0, i, std::min<int64_t>(B, N - i));
      opt.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(xtr.index_select(0, idx)),
                                                                ytr.index_select(0, idx), loss_options);
      loss.backward();
      opt.step();
    }
    val_acc = accuracy(model, xva, yva);
    std::fprintf(stderr, "peer_train_libtorch: epoch %d/%d validation accuracy %.4f\n", e + 1, epochs, val_acc);
  }
  const double acc = accuracy(model, xte, yte);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  std::printf(
      "{\"model\": \"%s\", \"epochs\": %d, \"val_accuracy\": %.4f, \"test_accuracy\": %.4f, \"seconds\": %.1f, "
      "\"cpu_seconds\": %.1f, \"torch\": \"%s\"}\n",
      model_name.c_str(), epochs, val_acc, acc, secs, cpu, TORCH_VERSION);
  return 0;
}
