// GEMM: gs::matmul on contiguous float32 (n, n) @ (n, n) against the raw Eigen
// product it wraps, at n = 256, 512, 1024, on 1 and on all threads.
// Goal (issue "Engine"): gradsleuth >= 0.9x raw Eigen.
//
// Counter "FLOP/s" = 2 n^3 per product. Each gradsleuth case sits next to its
// Eigen twin in the output. The "a@b.t()" cases multiply by a transposed view:
// the CPU backend maps it as a column-major matrix, so no copy is made; the
// "copies" counter (clone ops seen by an observer during one call) proves it.
//   ./bench_gemm --benchmark_min_time=0.2 [--benchmark_format=json]
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cstring>
#include <string>

#include "core/autograd.h"
#include "core/observer.h"
#include "core/ops.h"

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Eigen's GEMM parallelises with OpenMP over Eigen::nbThreads(); gradsleuth's
// bmm is that same Eigen code, so one setting governs both.
void set_threads(int threads) { Eigen::setNbThreads(threads); }

void set_flops(benchmark::State& state, int64_t n) {
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * n * n * n * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate);
}

// Counts the copies (clone ops) an op makes internally.
struct CloneCounter : gs::OpObserver {
  int clones = 0;
  void on_op(const gs::OpEvent& e) override { clones += std::strcmp(e.op, "clone") == 0; }
};

// (n, n) @ (n, n), or (n, n) @ (n, n).t() when `transposed_b`.
void BM_gs(benchmark::State& state, int64_t n, int threads, bool transposed_b) {
  set_threads(threads);
  gs::NoGradGuard no_grad;
  gs::Tensor a = gs::randn({n, n}), b = gs::randn({n, n});
  gs::Tensor rhs = transposed_b ? b.t() : b;  // (n, n), strides (1, n) when transposed
  {
    CloneCounter counter;
    gs::ObserverGuard guard(&counter);
    benchmark::DoNotOptimize(gs::matmul(a, rhs));
    state.counters["copies"] = counter.clones;
  }
  for (auto _ : state) {
    gs::Tensor c = gs::matmul(a, rhs);
    benchmark::DoNotOptimize(c.raw_data());
  }
  set_flops(state, n);
}

void BM_eigen(benchmark::State& state, int64_t n, int threads, bool transposed_b) {
  set_threads(threads);
  RowMat a = RowMat::Random(n, n), b = RowMat::Random(n, n), c(n, n);
  for (auto _ : state) {
    if (transposed_b) c.noalias() = a * b.transpose();
    else c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, n);
}

}  // namespace

int main(int argc, char** argv) {
  // Registered by hand so that each gradsleuth case is followed by its Eigen twin.
  const int max_threads = Eigen::nbThreads();
  for (bool transposed : {false, true}) {
    const std::string op = transposed ? "a@b.t()" : "a@b";
    for (int64_t n : {256, 512, 1024}) {
      for (int threads : {1, max_threads}) {
        const std::string suffix = "/n:" + std::to_string(n) + "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(("gemm_gs/" + op + suffix).c_str(), BM_gs, n, threads, transposed)
            ->Unit(benchmark::kMicrosecond)->UseRealTime();
        benchmark::RegisterBenchmark(("gemm_eigen/" + op + suffix).c_str(), BM_eigen, n, threads, transposed)
            ->Unit(benchmark::kMicrosecond)->UseRealTime();
        if (max_threads == 1) break;  // one thread only: no second row
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
