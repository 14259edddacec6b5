// GEMM: gs::matmul on contiguous float32 (n, n) @ (n, n) against the raw library
// call it wraps — cblas_sgemm of the BLAS the build uses (OpenBLAS by default) — and
// against Eigen's own product (the fallback), at n = 256, 512, 1024, on 1 and on all
// threads, in one run. Goals: gradsleuth >= 1.0x the raw BLAS (issue "CPU speed"),
// and >= 0.9x raw Eigen when built with GRADSLEUTH_BLAS=OFF.
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
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/autograd.h"
#include "core/cpu/blas.h"
#include "core/observer.h"
#include "core/ops.h"

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Eigen's GEMM parallelises with OpenMP over Eigen::nbThreads(), and gradsleuth
// hands the BLAS OpenMP's setting too, so one setting governs all three.
void set_threads(int threads) {
  Eigen::setNbThreads(threads);
#ifdef _OPENMP
  omp_set_num_threads(threads);
#endif
}

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

// The raw library call on row-major buffers (through blas.h's thin CBLAS wrapper,
// which only converts the arguments): what gs::matmul adds on top is the difference.
void BM_blas(benchmark::State& state, int64_t n, int threads, bool transposed_b) {
  set_threads(threads);
  RowMat a = RowMat::Random(n, n), b = RowMat::Random(n, n), c(n, n);
  for (auto _ : state) {
    gs::cpu::blas_gemm(false, transposed_b, n, n, n, a.data(), n, b.data(), n, c.data(), n);
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
        if (std::strcmp(gs::cpu::gemm_library(), "Eigen") != 0)
          benchmark::RegisterBenchmark(("gemm_blas/" + op + suffix).c_str(), BM_blas, n, threads, transposed)
              ->Unit(benchmark::kMicrosecond)->UseRealTime();
        benchmark::RegisterBenchmark(("gemm_eigen/" + op + suffix).c_str(), BM_eigen, n, threads, transposed)
            ->Unit(benchmark::kMicrosecond)->UseRealTime();
        if (max_threads == 1) break;  // one thread only: no second row
      }
    }
  }
  benchmark::AddCustomContext("gemm_library", gs::cpu::gemm_library());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
