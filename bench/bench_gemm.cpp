// GEMM: gs::matmul on contiguous float32 (n, n) @ (n, n) against the raw library
// call it wraps — cblas_sgemm of the BLAS the build uses (OpenBLAS by default) — and
// against Eigen's own product (the fallback), at n = 256, 512, 1024, on 1 and on all
// threads, in one run. The "sgemm_direct" cases time the packing-free kernel
// (core/cpu/fast/sgemm.h) against the BLAS at the training steps' shapes, and report
// whether blas_gemm routes each shape to it ("dispatched"); the "sgemm_mixed" cases time it on
// operands stored in float16 and bfloat16 against float32 ones. Goals: gradsleuth >= 1.0x the raw BLAS,
// and >= 0.9x raw Eigen when built with GRADSLEUTH_BLAS=OFF.
//
// Counter "FLOP/s" = 2 n^3 per product. Each gradsleuth case sits next to its
// Eigen twin in the output. The "a@b.t()" cases multiply by a transposed view:
// the CPU backend maps it as a column-major matrix, so no copy is made; the
// "copies" counter (clone ops seen by an observer during one call) proves it.
//   ./bench_gemm --benchmark_min_time=0.2 [--benchmark_format=json]
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/autograd.h"
#include "core/cpu/fast/blas.h"
#include "core/cpu/fast/sgemm.h"
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
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
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
    if (transposed_b)
      c.noalias() = a * b.transpose();
    else
      c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, n);
}

// The raw library call on row-major buffers (through blas.h's thin CBLAS wrapper,
// which only converts the arguments): what gs::matmul adds on top is the difference.
// (The packing-free kernel is switched off around it: blas_gemm would route the
// one-thread 256^3 and 512^3 products to it.)
void BM_blas(benchmark::State& state, int64_t n, int threads, bool transposed_b) {
  set_threads(threads);
  gs::cpu::fast::set_sgemm_direct(false);
  RowMat a = RowMat::Random(n, n), b = RowMat::Random(n, n), c(n, n);
  for (auto _ : state) {
    gs::cpu::fast::blas_gemm(false, transposed_b, n, n, n, a.data(), n, b.data(), n, c.data(), n);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  gs::cpu::fast::set_sgemm_direct(true);
  set_flops(state, n);
}

// The products of the training steps, one thread: the packing-free kernel (sgemm.h)
// against the BLAS on the same operands, at the shapes that decided its dispatch rule.
// "a_col"/"b_col" are blas_gemm's layouts: the forward x @ W^T is (false, true), the
// weight gradient dY^T @ x is (true, false).
struct Product {
  const char* name;
  bool a_col, b_col;
  int64_t M, N, K;
};
constexpr Product kProducts[] = {
    {"mlp64_fwd", false, true, 64, 256, 784},    {"mlp64_dW", true, false, 256, 784, 64},
    {"mlp256_fwd", false, true, 256, 256, 784},  {"mlp256_dW", true, false, 256, 784, 256},
    {"cnn_fc1_fwd", false, true, 64, 128, 3136}, {"cnn_fc1_dW", true, false, 128, 3136, 64},
    {"cnn_fc1_dx", false, false, 64, 3136, 128}, {"square256", false, false, 256, 256, 256},
    {"square512", false, false, 512, 512, 512},  {"square1024", false, false, 1024, 1024, 1024},
    {"small64", false, false, 64, 64, 64},       {"wino_64x63x32", false, false, 64, 63, 32},
};

// direct: the packing-free kernel with its walk (sgemm.h's SgemmWalk: Auto, or one forced, so that
// both walks are timed side by side on any CPU); else the BLAS.
void BM_product(benchmark::State& state, Product p, bool direct, gs::cpu::fast::SgemmWalk walk) {
  set_threads(1);
  const int64_t lda = p.a_col ? p.M : p.K, ldb = p.b_col ? p.K : p.N;
  RowMat a = RowMat::Random(p.M, p.K), b = RowMat::Random(p.K, p.N), c(p.M, p.N);
  if (direct && !gs::cpu::fast::sgemm_direct_available()) {
    state.SkipWithError("the packing-free kernel needs an AVX2+FMA build");
    return;
  }
  gs::cpu::fast::set_sgemm_direct(false);  // the BLAS case must not be routed to the kernel
  gs::cpu::fast::set_sgemm_walk(walk);
  for (auto _ : state) {
    if (direct)
      gs::cpu::fast::sgemm_direct(p.a_col, p.b_col, p.M, p.N, p.K, a.data(), lda, b.data(), ldb, 0.0f, c.data(), p.N);
    else
      gs::cpu::fast::blas_gemm(p.a_col, p.b_col, p.M, p.N, p.K, a.data(), lda, b.data(), ldb, c.data(), p.N);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  gs::cpu::fast::set_sgemm_direct(true);
  gs::cpu::fast::set_sgemm_walk(gs::cpu::fast::SgemmWalk::Auto);
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * p.M * p.N * p.K * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["dispatched"] = gs::cpu::fast::sgemm_direct_pays(p.a_col, p.b_col, p.M, p.N, p.K);
}

// The same products with both operands stored in 16 bits (sgemm_direct_mixed, which widens them
// as it reads them: autocast's products on the CPU), against float32 operands through the same
// entry point. "ratio to float32" is read off the two rows.
// "bf16_fma" is bf16 with the dot-product path off (sgemm.h's set_sgemm_bf16_dot): the FMA path it replaces
// where the CPU has AVX-512 BF16.
void BM_mixed(benchmark::State& state, Product p, gs::cpu::fast::Elem e, bool dot) {
  set_threads(1);
  if (!gs::cpu::fast::sgemm_direct_available()) {
    state.SkipWithError("the packing-free kernel needs an AVX2+FMA build");
    return;
  }
  const int64_t lda = p.a_col ? p.M : p.K, ldb = p.b_col ? p.K : p.N;
  RowMat a = RowMat::Random(p.M, p.K), b = RowMat::Random(p.K, p.N), c(p.M, p.N);
  // 16-bit operands: the upper halves of the float32 values (bfloat16 by truncation) or 1 + a
  // float16 mantissa pattern; the products' time does not depend on the values.
  const auto narrow = [e](const RowMat& m) {
    std::vector<uint16_t> v(static_cast<size_t>(m.size()));
    for (size_t i = 0; i < v.size(); ++i) {
      uint32_t u;
      std::memcpy(&u, m.data() + i, sizeof u);
      v[i] = e == gs::cpu::fast::Elem::Float16 ? static_cast<uint16_t>(0x3C00u | (u & 0x3FFu))
                                               : static_cast<uint16_t>(u >> 16);
    }
    return v;
  };
  const std::vector<uint16_t> a16 = narrow(a), b16 = narrow(b);
  const bool f32 = e == gs::cpu::fast::Elem::Float32;
  const void* pa = f32 ? static_cast<const void*>(a.data()) : a16.data();
  const void* pb = f32 ? static_cast<const void*>(b.data()) : b16.data();
  gs::cpu::fast::set_sgemm_bf16_dot(dot);
  for (auto _ : state) {
    gs::cpu::fast::sgemm_direct_mixed(p.a_col, p.b_col, p.M, p.N, p.K, pa, e, lda, pb, e, ldb, c.data(), p.N);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  gs::cpu::fast::set_sgemm_bf16_dot(true);
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * p.M * p.N * p.K * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
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
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        if (std::strcmp(gs::cpu::fast::gemm_library(), "Eigen") != 0)
          benchmark::RegisterBenchmark(("gemm_blas/" + op + suffix).c_str(), BM_blas, n, threads, transposed)
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
        benchmark::RegisterBenchmark(("gemm_eigen/" + op + suffix).c_str(), BM_eigen, n, threads, transposed)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        if (max_threads == 1) break;  // one thread only: no second row
      }
    }
  }
  if (std::strcmp(gs::cpu::fast::gemm_library(), "Eigen") != 0)
    for (const Product& p : kProducts) {
      using gs::cpu::fast::SgemmWalk;
      // "direct" takes the walk Auto chooses on this CPU; "inplace" and "packed" force one.
      for (auto [direct, walk, name] :
           {std::tuple{true, SgemmWalk::Auto, "direct"}, std::tuple{false, SgemmWalk::Auto, "blas"},
            std::tuple{true, SgemmWalk::InPlace, "inplace"}, std::tuple{true, SgemmWalk::Packed, "packed"}})
        benchmark::RegisterBenchmark((std::string("sgemm_direct/") + p.name + "/" + name).c_str(), BM_product, p,
                                     direct, walk)
            ->Unit(benchmark::kMicrosecond);
    }
  for (const Product& p : kProducts) {
    if (std::strncmp(p.name, "mlp", 3) != 0 && std::strncmp(p.name, "cnn", 3) != 0) continue;
    using gs::cpu::fast::Elem;
    for (auto [e, name, dot] :
         {std::tuple{Elem::Float32, "f32", true}, std::tuple{Elem::BFloat16, "bf16", true},
          std::tuple{Elem::BFloat16, "bf16_fma", false}, std::tuple{Elem::Float16, "f16", true}}) {
      if (!dot && !gs::cpu::fast::sgemm_bf16_dot_available()) continue;  // the same path as "bf16"
      benchmark::RegisterBenchmark((std::string("sgemm_mixed/") + p.name + "/" + name).c_str(), BM_mixed, p, e, dot)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::AddCustomContext("gemm_library", gs::cpu::fast::gemm_library());
  // The BLAS's kernels beside the CPU's ISA (core/cpu/fast/blas.h): scripts/bench_peer.sh reads them to
  // report both peers' cores and to give the peer the right core type.
  const gs::cpu::fast::BlasInfo& blas = gs::cpu::fast::blas_info();
  benchmark::AddCustomContext("blas", blas.str());
  benchmark::AddCustomContext("blas_core", blas.core);
  benchmark::AddCustomContext("blas_far_below", blas.far_below ? "true" : "false");
  benchmark::AddCustomContext("blas_suggested_core", blas.suggested_core);
  benchmark::AddCustomContext("cpu_isa", gs::cpu::fast::cpu_isa().str());
  benchmark::AddCustomContext("gemm_route", gs::cpu::fast::gemm_uses_engine() ? "engine" : "blas");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
