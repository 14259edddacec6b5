// One training step (zero_grad, forward, cross-entropy, backward, optimizer
// step) of the models `gradsleuth train` uses, on random Fashion-MNIST-shaped
// data: the gradsleuth side of the peer comparison in scripts/bench_peer.sh
// (bench/peer_train_step.py times the same steps in PyTorch).
//   train_step/mlp/64    MLP 784-256-10, batch 64, SGD      (the goal: <= 0.7x libtorch)
//   train_step/mlp/256   the same at batch 256                 (<= 1.0x libtorch)
//   train_step_blas/mlp/{64,256}  the same with every GEMM on the BLAS (no sgemm_direct)
//   train_step/cnn/64    conv32-pool-conv64-pool-fc128-fc10, batch 64, SGD
//   train_step/mlp3/64   the CLI's MLP 784-256-128-10, Adam
//   conv2d/cnn{1,2}/...  the CNN's two convolutions alone, fused kernel (/1) or composite (/0)
//   train_step_bf16/{mlp,cnn}/..., train_step_fp16/...  the same steps under gs::autocast (float32
//     parameters, the products in 16 bits); train_step_bf16_weights/mlp/...: the model itself in bfloat16
//     (the goal: within 1.1x of the float32 step); train_step_bf16_master/mlp/...: the same with the
//     optimizer's float32 master weights (Optimizer::set_master_weights)
//   train_step_bf16_unfused/mlp/...  train_step_bf16 with the cast's fused backward switched off
//     (gs::detail::set_cast_backward_fused): each parameter's gradient rounded to bfloat16 and widened
//   train_step_bf16_fma/mlp/...  train_step_bf16 with the bfloat16 products on the FMA path
//     (gs::cpu::fast::set_sgemm_bf16_dot(false)): the path the CPU's dot products replace where it has them
// Run single-threaded for the comparison: OMP_NUM_THREADS=1 ./bench_train_step
#include <benchmark/benchmark.h>

#include <memory>

#include "bench/models.h"
#include "core/cpu/fast/sgemm.h"
#include "core/autocast.h"
#include "core/generator.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace {

namespace nn = gs::nn;
namespace optim = gs::optim;

// `autocast`: the forward and the loss under gs::autocast(that dtype) (kFloat32: off); `weights`: the
// model's parameters converted to that dtype first (kFloat32: as made).
template <class MakeModel>
void run_steps(benchmark::State& state, MakeModel make, bool adam, gs::DType autocast = gs::kFloat32,
               gs::DType weights = gs::kFloat32, bool master_weights = false) {
  const int64_t B = state.range(0);
  gs::manual_seed(0);
  auto model = make();
  if (weights != gs::kFloat32) model->to(weights);
  std::unique_ptr<optim::Optimizer> opt;
  if (adam)
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions(1e-3));
  else
    opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions(0.01));
  opt->set_master_weights(master_weights);
  gs::Tensor x = gs::rand({B, 1, 28, 28});  // (B, 1, 28, 28)
  gs::Tensor y = gs::randint(0, 10, {B});   // (B) int64
  if (weights != gs::kFloat32) x = x.to(weights);
  for (auto _ : state) {
    opt->zero_grad();
    gs::Tensor loss;
    {
      auto ac = gs::autocast(autocast == gs::kFloat32 ? gs::kBFloat16 : autocast, autocast != gs::kFloat32);
      loss = nn::functional::cross_entropy((*model)(x), y);
    }
    loss.backward();
    opt->step();
    benchmark::DoNotOptimize(loss.raw_data());
  }
  state.SetItemsProcessed(state.iterations() * B);  // examples/s
}

void BM_mlp(benchmark::State& s) { run_steps(s, gs_bench::mlp2, false); }
// The same step with every GEMM on the BLAS (core/cpu/fast/sgemm.h's kernel switched off).
void BM_mlp_blas(benchmark::State& s) {
  gs::cpu::fast::set_sgemm_direct(false);
  run_steps(s, gs_bench::mlp2, false);
  gs::cpu::fast::set_sgemm_direct(true);
}
void BM_cnn(benchmark::State& s) { run_steps(s, gs_bench::cnn, false); }
void BM_mlp3_adam(benchmark::State& s) { run_steps(s, gs_bench::mlp3, true); }
void BM_mlp_bf16(benchmark::State& s) { run_steps(s, gs_bench::mlp2, false, gs::kBFloat16); }
void BM_mlp_fp16(benchmark::State& s) { run_steps(s, gs_bench::mlp2, false, gs::kFloat16); }
void BM_cnn_bf16(benchmark::State& s) { run_steps(s, gs_bench::cnn, false, gs::kBFloat16); }
void BM_mlp_bf16_unfused(benchmark::State& s) {
  gs::detail::set_cast_backward_fused(false);
  run_steps(s, gs_bench::mlp2, false, gs::kBFloat16);
  gs::detail::set_cast_backward_fused(true);
}
void BM_mlp_bf16_fma(benchmark::State& s) {
  gs::cpu::fast::set_sgemm_bf16_dot(false);
  run_steps(s, gs_bench::mlp2, false, gs::kBFloat16);
  gs::cpu::fast::set_sgemm_bf16_dot(true);
}
void BM_mlp_bf16_weights(benchmark::State& s) {
  run_steps(s, gs_bench::mlp2, false, gs::kFloat32, gs::kBFloat16);
}
void BM_mlp_bf16_master(benchmark::State& s) {
  run_steps(s, gs_bench::mlp2, false, gs::kFloat32, gs::kBFloat16, true);
}

}  // namespace

// The CNN's two convolutions alone, batch 64: the forward (no graph), and forward +
// backward (dW, db, and dx for the second; the first one's input needs no gradient).
// Arg 1 runs conv2d's fused kernel, 0 the composite unfold + matmul path.
void conv_layer(benchmark::State& state, int64_t C, int64_t O, int64_t HW, bool backward) {
  gs::detail::set_conv2d_fused(state.range(0) != 0);
  gs::manual_seed(0);
  gs::Tensor x = gs::randn({64, C, HW, HW}).requires_grad_(backward && C > 1);
  gs::Tensor w = gs::randn({O, C, 3, 3}).requires_grad_(backward), b = gs::randn({O}).requires_grad_(backward);
  gs::Tensor g = gs::randn({64, O, HW, HW});
  for (auto _ : state) {
    gs::Tensor out = gs::conv2d(x, w, b, {1, 1}, {1, 1});
    if (backward) out.backward(g);
    benchmark::DoNotOptimize(out.raw_data());
  }
  gs::detail::set_conv2d_fused(true);
}
void BM_conv1_fwd(benchmark::State& s) { conv_layer(s, 1, 32, 28, false); }
void BM_conv1_fwd_bwd(benchmark::State& s) { conv_layer(s, 1, 32, 28, true); }
void BM_conv2_fwd(benchmark::State& s) { conv_layer(s, 32, 64, 14, false); }
void BM_conv2_fwd_bwd(benchmark::State& s) { conv_layer(s, 32, 64, 14, true); }

BENCHMARK(BM_mlp)->Name("train_step/mlp")->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mlp_blas)->Name("train_step_blas/mlp")->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cnn)->Name("train_step/cnn")->Arg(64)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_mlp3_adam)->Name("train_step/mlp3")->Arg(64)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mlp_bf16)->Name("train_step_bf16/mlp")->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mlp_bf16_unfused)->Name("train_step_bf16_unfused/mlp")->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mlp_bf16_fma)->Name("train_step_bf16_fma/mlp")->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mlp_fp16)->Name("train_step_fp16/mlp")->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cnn_bf16)->Name("train_step_bf16/cnn")->Arg(64)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_mlp_bf16_weights)->Name("train_step_bf16_weights/mlp")->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mlp_bf16_master)->Name("train_step_bf16_master/mlp")->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_conv1_fwd)->Name("conv2d/cnn1/fwd")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_conv1_fwd_bwd)->Name("conv2d/cnn1/fwd_bwd")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_conv2_fwd)->Name("conv2d/cnn2/fwd")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_conv2_fwd_bwd)->Name("conv2d/cnn2/fwd_bwd")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
