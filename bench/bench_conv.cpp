// 3x3 / stride 1 / padding 1 convolution on one thread at the CNN's shapes
// (bench/bench_train_step.cpp's train_step/cnn/64): Winograd F(2x2, 3x3)
// (core/cpu/fast/winograd.h) next to per-sample im2col + SGEMM (written out here: im2col of
// one sample into a scratch, then one (O, 9C) @ (9C, H*W) GEMM through the BLAS into
// out[n]), in the same run:
//   conv/<impl>/fwd2      x (64, 32, 14, 14) -> 64 outputs  (the second conv's forward)
//   conv/<impl>/dgrad2    dY (64, 64, 14, 14) -> 32 outputs (its input gradient)
//   conv/<impl>/fwd1      x (64, 1, 28, 28) -> 32 outputs   (the first conv, for information)
//   conv/<impl>/c<C>      x (64, C, 14, 14) -> 64 outputs, C = 2, 4, 8, 16: where Winograd
//                         starts to pay (few channels: short GEMMs, transforms dominate)
//   conv/<impl>/wgrad2    the second conv's weight gradient, x (64, 32, 14, 14), dY 64
//                         channels: winograd_conv3x3_weight_grad against per-sample im2col
//                         then dW += dY[n] (O, H*W) @ cols^T (one GEMM per sample, beta 1)
//   conv/<impl>/wgrad_c<C>, wgrad_o<O>  the same with C (or O) = 4, 8, 16 and the other 64:
//                         the weight gradient's crossover
// Counter "GFLOP/s" = the direct convolution's 2*N*O*C*9*H*W per call / time (an
// equivalent rate: Winograd does fewer multiply-adds). No bias on either side.
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ./bench_conv --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/cpu/fast/blas.h"
#include "core/cpu/fast/winograd.h"

namespace {

struct Shape {
  int64_t N, C, H, W, O;
};

std::vector<float> random_vector(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = d(gen);
  return v;
}

void set_flops(benchmark::State& state, const Shape& s) {
  const double flops = 2.0 * s.N * s.O * s.C * 9 * s.H * s.W;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * static_cast<double>(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}

// cols (9C, H*W) of one sample x (C, H, W), padding 1.
void im2col(const float* x, float* cols, int64_t C, int64_t H, int64_t W) {
  for (int64_t c = 0; c < C; ++c)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        float* dst = cols + ((c * 3 + i) * 3 + j) * H * W;
        for (int64_t h = 0; h < H; ++h) {
          const int64_t hh = h + i - 1;
          float* d = dst + h * W;
          if (hh < 0 || hh >= H) {
            std::fill(d, d + W, 0.0f);
            continue;
          }
          const float* src = x + (c * H + hh) * W;
          for (int64_t q = 0; q < W; ++q) {
            const int64_t qq = q + j - 1;
            d[q] = (qq >= 0 && qq < W) ? src[qq] : 0.0f;
          }
        }
      }
}

void BM_im2col(benchmark::State& state, Shape s) {
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
  const auto x = random_vector(s.N * s.C * s.H * s.W, 1), w = random_vector(s.O * s.C * 9, 2);
  std::vector<float> out(s.N * s.O * s.H * s.W), cols(s.C * 9 * s.H * s.W);
  const int64_t HW = s.H * s.W, K = 9 * s.C;
  for (auto _ : state) {
    for (int64_t n = 0; n < s.N; ++n) {
      im2col(x.data() + n * s.C * HW, cols.data(), s.C, s.H, s.W);
      gradsleuth::cpu::fast::blas_gemm(false, false, s.O, HW, K, w.data(), K, cols.data(), HW,
                                       out.data() + n * s.O * HW, HW);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, s);
}

void BM_winograd(benchmark::State& state, Shape s) {
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
  const auto x = random_vector(s.N * s.C * s.H * s.W, 1), w = random_vector(s.O * s.C * 9, 2);
  std::vector<float> out(s.N * s.O * s.H * s.W);
  for (auto _ : state) {
    gradsleuth::cpu::fast::winograd_conv3x3(x.data(), w.data(), nullptr, out.data(), s.N, s.C, s.H, s.W, s.O);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, s);
}

void BM_wgrad_im2col(benchmark::State& state, Shape s) {
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
  const auto x = random_vector(s.N * s.C * s.H * s.W, 1), dy = random_vector(s.N * s.O * s.H * s.W, 3);
  std::vector<float> gw(s.O * s.C * 9), cols(s.C * 9 * s.H * s.W);
  const int64_t HW = s.H * s.W, K = 9 * s.C;
  for (auto _ : state) {
    for (int64_t n = 0; n < s.N; ++n) {
      im2col(x.data() + n * s.C * HW, cols.data(), s.C, s.H, s.W);
      gradsleuth::cpu::fast::blas_gemm(false, true, s.O, K, HW, dy.data() + n * s.O * HW, HW, cols.data(), HW,
                                       n > 0 ? 1.0f : 0.0f, gw.data(), K);
    }
    benchmark::DoNotOptimize(gw.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, s);
}

void BM_wgrad_winograd(benchmark::State& state, Shape s) {
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
  const auto x = random_vector(s.N * s.C * s.H * s.W, 1), dy = random_vector(s.N * s.O * s.H * s.W, 3);
  std::vector<float> gw(s.O * s.C * 9);
  for (auto _ : state) {
    gradsleuth::cpu::fast::winograd_conv3x3_weight_grad(x.data(), dy.data(), gw.data(), s.N, s.C, s.H, s.W, s.O);
    benchmark::DoNotOptimize(gw.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, s);
}

}  // namespace

int main(int argc, char** argv) {
  const std::pair<const char*, Shape> shapes[] = {{"fwd2", {64, 32, 14, 14, 64}}, {"dgrad2", {64, 64, 14, 14, 32}},
                                                  {"fwd1", {64, 1, 28, 28, 32}},  {"c2", {64, 2, 14, 14, 64}},
                                                  {"c4", {64, 4, 14, 14, 64}},    {"c8", {64, 8, 14, 14, 64}},
                                                  {"c16", {64, 16, 14, 14, 64}}};
  for (const auto& [name, s] : shapes) {
    benchmark::RegisterBenchmark((std::string("conv/winograd/") + name).c_str(), BM_winograd, s)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((std::string("conv/im2col/") + name).c_str(), BM_im2col, s)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  const std::pair<const char*, Shape> wshapes[] = {
      {"wgrad2", {64, 32, 14, 14, 64}},    {"wgrad_c4", {64, 4, 14, 14, 64}}, {"wgrad_c8", {64, 8, 14, 14, 64}},
      {"wgrad_c16", {64, 16, 14, 14, 64}}, {"wgrad_o4", {64, 32, 14, 14, 4}}, {"wgrad_o8", {64, 32, 14, 14, 8}},
      {"wgrad_o16", {64, 32, 14, 14, 16}}};
  for (const auto& [name, s] : wshapes) {
    benchmark::RegisterBenchmark((std::string("conv/winograd/") + name).c_str(), BM_wgrad_winograd, s)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((std::string("conv/im2col/") + name).c_str(), BM_wgrad_im2col, s)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::AddCustomContext("gemm_library", gradsleuth::cpu::fast::gemm_library());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
