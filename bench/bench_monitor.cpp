// The cost of the training monitor (W3): one training step of the bug zoo's
// reference MLP (784-128 + BatchNorm + 2 residual blocks + 10, batch 64, Adam,
// cross-entropy) bare, and with debug::Monitor attached (its full checks every
// 10 steps, as in `gradsleuth zoo`; every step, the worst case; and never: the
// cost of the hooks alone), and with the explorer's replay recorder beside it (debug/report/explore.h).
// The goal: the monitor (every 10) costs <= 5% of the bare step (docs/benchmarks.md has the
// measurements and the command: 30 repetitions, interleaved at random).
//   OMP_NUM_THREADS=1 build/bin/bench_monitor --benchmark_repetitions=30 --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>

#include <memory>

#include "core/generator.h"
#include "debug/report/explore.h"
#include "debug/run/monitor.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace {

namespace nn = gs::nn;
namespace optim = gs::optim;

std::shared_ptr<nn::Sequential> zoo_mlp() {  // (B, 1, 28, 28) -> (B, 10)
  auto block = [] {
    return std::make_shared<nn::Residual>(
        std::make_shared<nn::Sequential>(std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 128)));
  };
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 128),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::BatchNorm1d>(128), block(),
                                          block(), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.2),
                                          std::make_shared<nn::Linear>(128, 10));
}

// every = 0: no monitor. replay: the explorer's ReplayRecorder too, at the monitor's sampling.
void run(benchmark::State& state, int64_t every, bool replay = false) {
  const int64_t B = 64;
  gs::manual_seed(0);
  auto model = zoo_mlp();
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-3));
  nn::CrossEntropyLoss ce;
  std::unique_ptr<gs::debug::Monitor> monitor;
  if (every > 0) {
    gs::debug::MonitorOptions o;
    o.every = every;
    monitor = std::make_unique<gs::debug::Monitor>(*model, opt, &ce, o);
  }
  std::unique_ptr<gs::debug::ReplayRecorder> recorder;
  if (replay) recorder = std::make_unique<gs::debug::ReplayRecorder>(*model, opt, every);
  gs::Tensor x = gs::randn({B, 1, 28, 28});  // (B, 1, 28, 28), standardised-like
  gs::Tensor y = gs::randint(0, 10, {B});    // (B)
  for (auto _ : state) {
    opt.zero_grad();
    gs::Tensor loss = ce((*model)(x), y);
    loss.backward();
    opt.step();
    if (monitor) monitor->record_step(loss.item<double>());
    benchmark::DoNotOptimize(loss.raw_data());
  }
  state.SetItemsProcessed(state.iterations() * B);
}

void BM_bare(benchmark::State& s) { run(s, 0); }
void BM_monitor10(benchmark::State& s) { run(s, 10); }
void BM_monitor1(benchmark::State& s) { run(s, 1); }
void BM_replay10(benchmark::State& s) { run(s, 10, true); }
void BM_fixed(benchmark::State& s) { run(s, int64_t{1} << 40); }  // hooks only: the sampled checks never run

}  // namespace

BENCHMARK(BM_bare)->Name("monitor/bare")->Unit(benchmark::kMicrosecond)->MinTime(1.0);
BENCHMARK(BM_monitor10)->Name("monitor/every10")->Unit(benchmark::kMicrosecond)->MinTime(1.0);
BENCHMARK(BM_replay10)->Name("monitor/every10_replay")->Unit(benchmark::kMicrosecond)->MinTime(1.0);
BENCHMARK(BM_monitor1)->Name("monitor/every1")->Unit(benchmark::kMicrosecond)->MinTime(1.0);
BENCHMARK(BM_fixed)->Name("monitor/hooks_only")->Unit(benchmark::kMicrosecond)->MinTime(1.0);
BENCHMARK_MAIN();
