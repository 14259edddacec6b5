// The peer: the same kernels and training steps as bench_gemm / bench_train_step /
// bench_overhead, written against libtorch's C++ API (Debian libtorch-dev, OpenBLAS
// underneath), so the ratio compares the same API layer. Built with -DGRADSLEUTH_BENCH_PEER=ON
// when CMake finds Torch; nothing in the library or the tests depends on it. scripts/bench_peer.sh
// runs this and the gradsleuth programs alternately and prints the ratios.
//   gemm_torch/a@b/n:N        torch::mm on contiguous float32 (N, N), N = 256, 512, 1024
//   train_step/mlp/64, /256   MLP 784-256-10, SGD, batch 64 / 256
//   train_step/cnn/64         conv32-pool-conv64-pool-fc128-fc10, SGD, batch 64
//   train_step_bf16/{mlp,cnn}/...  the same steps under CPU autocast to bfloat16 (float32 parameters),
//                             beside bench_train_step's train_step_bf16
//   overhead/add/record       1-element add with autograd recording, per op
// One thread: torch::set_num_threads(1) (and OMP/OPENBLAS_NUM_THREADS=1 from the script).
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <string>

namespace {

torch::nn::Sequential mlp() {  // (B, 1, 28, 28) -> (B, 10)
  return torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(784, 256), torch::nn::ReLU(),
                               torch::nn::Linear(256, 10));
}

torch::nn::Sequential cnn() {  // the same graph as bench_train_step's cnn()
  namespace tnn = torch::nn;
  return tnn::Sequential(
      tnn::Conv2d(tnn::Conv2dOptions(1, 32, 3).padding(1)), tnn::ReLU(), tnn::MaxPool2d(tnn::MaxPool2dOptions(2)),
      tnn::Conv2d(tnn::Conv2dOptions(32, 64, 3).padding(1)), tnn::ReLU(), tnn::MaxPool2d(tnn::MaxPool2dOptions(2)),
      tnn::Flatten(), tnn::Linear(64 * 7 * 7, 128), tnn::ReLU(), tnn::Linear(128, 10));
}

// `bf16`: the forward and the loss under CPU autocast to bfloat16 (torch.autocast("cpu")), its cast
// cache cleared after each step as leaving the autocast region does.
void run_steps(benchmark::State& state, torch::nn::Sequential model, bool bf16 = false) {
  const int64_t B = state.range(0);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01));
  torch::Tensor x = torch::rand({B, 1, 28, 28});               // (B, 1, 28, 28)
  torch::Tensor y = torch::randint(0, 10, {B}, torch::kLong);  // (B)
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  for (auto _ : state) {
    opt.zero_grad();
    at::autocast::set_cpu_enabled(bf16);
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    at::autocast::set_cpu_enabled(false);
    if (bf16) at::autocast::clear_cache();
    loss.backward();
    opt.step();
    benchmark::DoNotOptimize(loss.data_ptr());
  }
  state.SetItemsProcessed(state.iterations() * B);
}

void BM_mlp(benchmark::State& s) {
  torch::manual_seed(0);
  run_steps(s, mlp());
}
void BM_cnn(benchmark::State& s) {
  torch::manual_seed(0);
  run_steps(s, cnn());
}
void BM_mlp_bf16(benchmark::State& s) {
  torch::manual_seed(0);
  run_steps(s, mlp(), true);
}
void BM_cnn_bf16(benchmark::State& s) {
  torch::manual_seed(0);
  run_steps(s, cnn(), true);
}

void BM_gemm(benchmark::State& state, int64_t n) {
  torch::NoGradGuard no_grad;
  torch::Tensor a = torch::randn({n, n}), b = torch::randn({n, n});
  for (auto _ : state) {
    torch::Tensor c = torch::mm(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

constexpr int kChain = 1000;  // as in bench_overhead.cpp
void BM_add_record(benchmark::State& state) {
  torch::Tensor x = torch::ones({1}, torch::requires_grad()), c = torch::ones({1});
  for (auto _ : state) {
    torch::Tensor y = x;
    for (int i = 0; i < kChain; ++i) y = torch::add(y, c);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.counters["per_op"] = benchmark::Counter(static_cast<double>(state.iterations()) * kChain,
                                                benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace

// The kernels of the OpenBLAS under libtorch, when it is OpenBLAS (looked up at run time): bench_peer.sh
// reports them beside gradsleuth's.
std::string blas_core() {
  using Text = char* (*)();
  auto core = reinterpret_cast<Text>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  auto config = reinterpret_cast<Text>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  if (!core) return "";
  return std::string(config ? config() : "OpenBLAS") + " (core " + core() + ")";
}

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  benchmark::AddCustomContext("blas", blas_core());
  for (int64_t n : {256, 512, 1024})
    benchmark::RegisterBenchmark(("gemm_torch/a@b/n:" + std::to_string(n)).c_str(), BM_gemm, n)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  benchmark::RegisterBenchmark("train_step/mlp", BM_mlp)->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("train_step/cnn", BM_cnn)->Arg(64)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("train_step_bf16/mlp", BM_mlp_bf16)->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("train_step_bf16/cnn", BM_cnn_bf16)->Arg(64)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("overhead/add/record", BM_add_record);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
