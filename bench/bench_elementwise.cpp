// Memory-bound kernels: elementwise ops and reductions on contiguous float32
// tensors of 1M and 16M elements, next to plain memory copies of the same bytes.
//
// Counter "bytes/s" = (bytes read + bytes written) per call, as a rate
// (1 GB = 1e9 bytes). Every op allocates its output, as a user's op does; the
// memcpy baselines copy into a buffer allocated once, and gs clone allocates.
// No autograd (NoGradGuard): this measures the kernels, not the graph.
//   Dimension letters: B = rows (n / N), N = 1024 columns.
//   cnn/...: the activation pipeline between the convolutions of bench_train_step's CNN,
//   at its shapes: (64, 32, 28, 28) after the first conv, (64, 64, 14, 14) after the
//   second (range(0) = C, range(1) = H = W). The backwards run through autograd::grad
//   on a graph built once (retain_graph), so they time the node's backward formula as a
//   training step runs it.
//   elementwise/neg, sin, erf: unary ops that have no tuned kernel (the contiguous loops of
//   core/cpu/elementwise_unary.cpp run them). GRADSLEUTH_FAST_KERNELS=0 runs every op on the
//   reference loops (core/cpu/elementwise*.cpp) instead of the tuned ones (core/cpu/fast/).
//   ./bench_elementwise --benchmark_min_time=0.2 [--benchmark_format=json]
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>

#include "core/autograd.h"
#include "core/ops.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

constexpr int64_t kCols = 1024;  // N for the 2-D cases
constexpr int64_t kF = sizeof(float);

void set_bytes(benchmark::State& state, int64_t bytes_per_call) {
  state.counters["bytes/s"] =
      benchmark::Counter(static_cast<double>(bytes_per_call) * state.iterations(), benchmark::Counter::kIsRate);
}

// Runs `op` (returns a gs::Tensor) under NoGradGuard and reports bytes/s.
template <class Op>
void run_gs(benchmark::State& state, int64_t bytes_per_call, Op op) {
  gs::NoGradGuard no_grad;
  for (auto _ : state) {
    gs::Tensor y = op();
    benchmark::DoNotOptimize(y.raw_data());
  }
  set_bytes(state, bytes_per_call);
}

// ---- baselines -----------------------------------------------------------------
void BM_memcpy(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::unique_ptr<float[]> src(new float[n]), dst(new float[n]);
  std::memset(src.get(), 1, n * kF);
  std::memset(dst.get(), 0, n * kF);
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), n * kF);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2 * n * kF);
}

// memcpy split over the same OpenMP threads the CPU backend uses.
void BM_memcpy_threads(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::unique_ptr<float[]> src(new float[n]), dst(new float[n]);
  std::memset(src.get(), 1, n * kF);
  std::memset(dst.get(), 0, n * kF);
  for (auto _ : state) {
#ifdef _OPENMP
#pragma omp parallel
    {
      const int64_t T = omp_get_num_threads(), t = omp_get_thread_num(), chunk = (n + T - 1) / T;
      const int64_t b = std::min(n, t * chunk), e = std::min(n, b + chunk);
      std::memcpy(dst.get() + b, src.get() + b, (e - b) * kF);
    }
#else
    std::memcpy(dst.get(), src.get(), n * kF);
#endif
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2 * n * kF);
}

void BM_clone(benchmark::State& state) {
  const int64_t n = state.range(0);
  gs::Tensor x = gs::randn({n});
  run_gs(state, 2 * n * kF, [&] { return x.clone(); });
}

// ---- elementwise --------------------------------------------------------------
void BM_add(benchmark::State& state) {
  const int64_t n = state.range(0);
  gs::Tensor a = gs::randn({n}), b = gs::randn({n});
  run_gs(state, 3 * n * kF, [&] { return gs::add(a, b); });
}

void BM_relu(benchmark::State& state) {
  const int64_t n = state.range(0);
  gs::Tensor x = gs::randn({n});
  run_gs(state, 2 * n * kF, [&] { return gs::relu(x); });
}

void BM_exp(benchmark::State& state) {
  const int64_t n = state.range(0);
  gs::Tensor x = gs::randn({n});
  run_gs(state, 2 * n * kF, [&] { return gs::exp(x); });
}

void BM_mul(benchmark::State& state) {
  const int64_t n = state.range(0);
  gs::Tensor a = gs::randn({n}), b = gs::randn({n});
  run_gs(state, 3 * n * kF, [&] { return gs::mul(a, b); });
}

// Unary ops without a tuned kernel of their own: the CPU backend's contiguous loops
// (core/cpu/elementwise_unary.cpp) run them in either mode.
template <gs::Tensor (*F)(const gs::Tensor&)>
void BM_unary(benchmark::State& state) {
  const int64_t n = state.range(0);
  gs::Tensor x = gs::randn({n});
  run_gs(state, 2 * n * kF, [&] { return F(x); });
}

// (B, N) + (N): the bias is broadcast along B (stride 0).
void BM_bias_add(benchmark::State& state) {
  const int64_t n = state.range(0), B = n / kCols;
  gs::Tensor x = gs::randn({B, kCols}), bias = gs::randn({kCols});
  run_gs(state, (2 * n + kCols) * kF, [&] { return gs::add(x, bias); });
}

// ---- the CNN's activation pipeline -------------------------------------------------
// relu's backward: reads x and g, writes the gradient.
void BM_cnn_relu_backward(benchmark::State& state) {
  const int64_t C = state.range(0), H = state.range(1), n = 64 * C * H * H;
  gs::Tensor x = gs::randn({64, C, H, H}).requires_grad_(), g = gs::randn({64, C, H, H});
  gs::Tensor y = gs::relu(x);
  for (auto _ : state) {
    gs::tensor_list gx = gs::autograd::grad({y}, {x}, {g}, /*retain_graph=*/true);
    benchmark::DoNotOptimize(gx[0].raw_data());
  }
  set_bytes(state, 3 * n * kF);
}

// 2x2 max pool, forward: reads x, writes the max and an int64 argmax per window.
void BM_cnn_max_pool(benchmark::State& state) {
  const int64_t C = state.range(0), H = state.range(1), n = 64 * C * H * H;
  gs::Tensor x = gs::randn({64, C, H, H});
  run_gs(state, n * kF + n / 4 * (kF + 8), [&] { return gs::max_pool2d(x, {2}); });
}

// Its backward: reads the window gradients and the argmax, writes the input gradient.
void BM_cnn_max_pool_backward(benchmark::State& state) {
  const int64_t C = state.range(0), H = state.range(1), n = 64 * C * H * H;
  gs::Tensor x = gs::randn({64, C, H, H}).requires_grad_();
  gs::Tensor y = gs::max_pool2d(x, {2});
  gs::Tensor g = gs::randn(y.shape());
  for (auto _ : state) {
    gs::tensor_list gx = gs::autograd::grad({y}, {x}, {g}, /*retain_graph=*/true);
    benchmark::DoNotOptimize(gx[0].raw_data());
  }
  set_bytes(state, n / 4 * (kF + 8) + n * kF);
}

void cnn_shapes(benchmark::internal::Benchmark* b) {
  b->Args({32, 28})->Args({64, 14})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

// ---- reductions -----------------------------------------------------------------
void BM_sum_all(benchmark::State& state) {
  const int64_t n = state.range(0);
  gs::Tensor x = gs::randn({n});
  run_gs(state, n * kF, [&] { return gs::sum(x); });
}

// (B, N) -> (N)
void BM_sum_dim0(benchmark::State& state) {
  const int64_t n = state.range(0), B = n / kCols;
  gs::Tensor x = gs::randn({B, kCols});
  run_gs(state, (n + kCols) * kF, [&] { return gs::sum(x, {0}); });
}

// (B, N) -> (B)
void BM_sum_dim1(benchmark::State& state) {
  const int64_t n = state.range(0), B = n / kCols;
  gs::Tensor x = gs::randn({B, kCols});
  run_gs(state, (n + B) * kF, [&] { return gs::sum(x, {1}); });
}

void sizes(benchmark::internal::Benchmark* b) {
  b->Arg(1 << 20)->Arg(1 << 24)->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(BM_memcpy)->Name("copy/memcpy")->Apply(sizes);
BENCHMARK(BM_memcpy_threads)->Name("copy/memcpy_omp")->Apply(sizes);
BENCHMARK(BM_clone)->Name("copy/gs_clone")->Apply(sizes);
BENCHMARK(BM_add)->Name("elementwise/add")->Apply(sizes);
BENCHMARK(BM_relu)->Name("elementwise/relu")->Apply(sizes);
BENCHMARK(BM_exp)->Name("elementwise/exp")->Apply(sizes);
BENCHMARK(BM_mul)->Name("elementwise/mul")->Apply(sizes);
BENCHMARK(BM_unary<gs::neg>)->Name("elementwise/neg")->Apply(sizes);
BENCHMARK(BM_unary<gs::sin>)->Name("elementwise/sin")->Apply(sizes);
BENCHMARK(BM_unary<gs::erf>)->Name("elementwise/erf")->Apply(sizes);
BENCHMARK(BM_bias_add)->Name("elementwise/bias_add(B,N)+(N)")->Apply(sizes);
BENCHMARK(BM_cnn_relu_backward)->Name("cnn/relu_backward")->Apply(cnn_shapes);
BENCHMARK(BM_cnn_max_pool)->Name("cnn/max_pool2d")->Apply(cnn_shapes);
BENCHMARK(BM_cnn_max_pool_backward)->Name("cnn/max_pool2d_backward")->Apply(cnn_shapes);
BENCHMARK(BM_sum_all)->Name("reduce/sum")->Apply(sizes);
BENCHMARK(BM_sum_dim0)->Name("reduce/sum_dim0(B,N)")->Apply(sizes);
BENCHMARK(BM_sum_dim1)->Name("reduce/sum_dim1(B,N)")->Apply(sizes);

}  // namespace

BENCHMARK_MAIN();
