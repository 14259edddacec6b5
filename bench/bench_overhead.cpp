// Per-op overhead: the fixed cost of one op on a 1-element float32 tensor,
// where the arithmetic is nothing and the bookkeeping is everything.
// Goal: <= 0.3 us per op with autograd recording
// (libtorch's C++ API is ~1 us).
//
// Each iteration runs a chain of kChain adds, y = y + c (y starts at a leaf x
// that requires grad; c is a constant), so the counter "per_op" is the
// iteration time / kChain. Freeing the chain's graph happens inside the
// iteration too: it is part of what an op costs.
//   overhead/add/record            forward only, recording the graph
//   overhead/add/record+backward   forward, then y.backward() through the chain
//   overhead/add/no_grad           forward under NoGradGuard (reference)
//   ./bench_overhead --benchmark_min_time=0.2 [--benchmark_format=json]
#include <benchmark/benchmark.h>

#include "core/autograd.h"
#include "core/ops.h"

namespace {

constexpr int kChain = 1000;

void set_per_op(benchmark::State& state) {
  // kIsRate | kInvert: seconds per op (the console prints e.g. "250n" for 250 ns).
  state.counters["per_op"] = benchmark::Counter(static_cast<double>(state.iterations()) * kChain,
                                                benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetItemsProcessed(state.iterations() * kChain);
}

void BM_add_record(benchmark::State& state) {
  gs::Tensor x = gs::ones({1}, gs::requires_grad()), c = gs::ones({1});
  for (auto _ : state) {
    gs::Tensor y = x;
    for (int i = 0; i < kChain; ++i) y = gs::add(y, c);
    benchmark::DoNotOptimize(y.raw_data());
  }
  set_per_op(state);
}
BENCHMARK(BM_add_record)->Name("overhead/add/record");

void BM_add_record_backward(benchmark::State& state) {
  gs::Tensor x = gs::ones({1}, gs::requires_grad()), c = gs::ones({1});
  for (auto _ : state) {
    gs::Tensor y = x;
    for (int i = 0; i < kChain; ++i) y = gs::add(y, c);
    y.backward();
    benchmark::DoNotOptimize(x.grad().raw_data());
    x.zero_grad();
  }
  set_per_op(state);
}
BENCHMARK(BM_add_record_backward)->Name("overhead/add/record+backward");

void BM_add_no_grad(benchmark::State& state) {
  gs::NoGradGuard no_grad;
  gs::Tensor x = gs::ones({1}, gs::requires_grad()), c = gs::ones({1});
  for (auto _ : state) {
    gs::Tensor y = x;
    for (int i = 0; i < kChain; ++i) y = gs::add(y, c);
    benchmark::DoNotOptimize(y.raw_data());
  }
  set_per_op(state);
}
BENCHMARK(BM_add_no_grad)->Name("overhead/add/no_grad");

}  // namespace

BENCHMARK_MAIN();
