// workbench/limits.cpp: this machine's limits, measured by the workbench itself:
//   the FMA peak: independent chains of vector FMAs on registers (no memory), enough of them to
//     cover the FMA latency times the FMA units (16 with AVX-512, 12 with AVX2), at the ISA level
//     of this build;
//   the memory bandwidth: STREAM's copy (c = a) and triad (a = b + s c) kernels (McCalpin) on
//     arrays past the last-level cache, bytes counted as STREAM counts them (read + written),
//     with ordinary stores, like the kernels it is compared with.
// With threads > 1 every thread runs its own part at once; the result is their total.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "core/cpu/fast/blas.h"
#include "workbench/ladders.h"
#include "workbench/simd.h"

namespace gradsleuth::workbench::cpu {
namespace {

double seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Runs body(thread) on `threads` threads at once; returns the wall time in seconds.
template <class F>
double on_threads(int threads, F body) {
  const double t0 = seconds();
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back([&body, t] { body(t); });
  body(0);
  for (std::thread& th : pool) th.join();
  return seconds() - t0;
}

// The FMA chains: kChains accumulators, each an independent chain of a += a * m (m just below 1
// and a small: nothing overflows or goes subnormal). Returns flops done.
#if GS_WB_SIMD
using namespace simd;
constexpr int kChains = kW == 16 ? 16 : 12;
double fma_loop(int64_t iters) {
  V acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = splat(1.0f + c * 1e-3f);
  const V m = splat(0.999999f), a = splat(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = fma(acc[c], m, a);
  V s = zero();
  for (int c = 0; c < kChains; ++c) s = add(s, acc[c]);
  volatile float sink = hsum(s);
  (void)sink;
  return 2.0 * kW * kChains * static_cast<double>(iters);
}
#else
double fma_loop(int64_t iters) {
  float acc[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  for (int64_t i = 0; i < iters; ++i)
    for (float& a : acc) a = a * 0.999999f + 1e-7f;
  volatile float sink = acc[0] + acc[7];
  (void)sink;
  return 2.0 * 8 * static_cast<double>(iters);
}
#endif

// Copy and triad written with explicit vector loads and stores: a plain loop `c[i] = a[i]`
// becomes a memcpy call, whose non-temporal stores no kernel here uses.
void copy(const float* a, float* c, int64_t n) {
#if GS_WB_SIMD
  int64_t i = 0;
  for (; i + kW <= n; i += kW) store(c + i, load(a + i));
  for (; i < n; ++i) c[i] = a[i];
#else
  for (int64_t i = 0; i < n; ++i) {
    c[i] = a[i];
    asm volatile("" ::: "memory");
  }
#endif
}
void triad(float* a, const float* b, const float* c, float s, int64_t n) {
#if GS_WB_SIMD
  int64_t i = 0;
  const V sv = splat(s);
  for (; i + kW <= n; i += kW) store(a + i, fma(sv, load(c + i), load(b + i)));
  for (; i < n; ++i) a[i] = b[i] + s * c[i];
#else
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
#endif
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t c = line.find(':');
      return c == std::string::npos ? line : line.substr(line.find_first_not_of(" \t", c + 1));
    }
  return "unknown CPU";
}

double l3_mib() { return static_cast<double>(gradsleuth::cpu::fast::cpu_isa().llc) / 1048576.0; }

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Buf = std::unique_ptr<float, FreeDeleter>;
Buf alloc(int64_t n) {
  return Buf(static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>((n * 4 + 63) / 64 * 64))));
}

Limits measure(int threads, bool quick) {
  Limits lim;
  lim.cpu = cpu_model();
  lim.isa = simd::isa_name();
  lim.threads = threads;
  lim.l3_mib = l3_mib();
  lim.fma_gflops = measure_fma_peak(threads, quick ? 5 : 30);
  // STREAM: each array 4x the LLC (at least 64 MiB; quick: 2x, at least 16 MiB), first touched
  // by the thread that uses its part.
  const double llc = lim.l3_mib > 0 ? lim.l3_mib : 32.0;
  const double mib = quick ? std::max(16.0, 2.0 * llc) : std::max(64.0, 4.0 * llc);
  const int64_t n = static_cast<int64_t>(mib * 1048576.0 / 4.0);
  lim.stream_mib = mib;
  Buf a = alloc(n), b = alloc(n), c = alloc(n);
  const int64_t per = (n + threads - 1) / threads;
  auto part = [&](int t, auto f) {
    const int64_t i0 = std::min(n, t * per), i1 = std::min(n, i0 + per);
    f(i0, i1 - i0);
  };
  on_threads(threads, [&](int t) {
    part(t, [&](int64_t i0, int64_t m) {
      std::fill(a.get() + i0, a.get() + i0 + m, 1.0f);
      std::fill(b.get() + i0, b.get() + i0 + m, 2.0f);
      std::fill(c.get() + i0, c.get() + i0 + m, 0.5f);
    });
  });
  double best_copy = 0, best_triad = 0;
  for (int rep = 0; rep < (quick ? 3 : 10); ++rep) {
    const double tc = on_threads(
        threads, [&](int t) { part(t, [&](int64_t i0, int64_t m) { copy(a.get() + i0, c.get() + i0, m); }); });
    best_copy = std::max(best_copy, 8.0 * static_cast<double>(n) / tc / 1e9);
    const double tt = on_threads(threads, [&](int t) {
      part(t, [&](int64_t i0, int64_t m) { triad(a.get() + i0, b.get() + i0, c.get() + i0, 0.5f, m); });
    });
    best_triad = std::max(best_triad, 12.0 * static_cast<double>(n) / tt / 1e9);
  }
  lim.copy_gb_per_s = best_copy;
  lim.triad_gb_per_s = best_triad;
  return lim;
}

}  // namespace

const char* isa_level() { return simd::isa_name(); }

// The best of `bursts` runs of ~10 ms: short runs, so that on a shared machine some of them run
// undisturbed, and the best is the machine's rate.
double measure_fma_peak(int threads, int bursts) {
  const int64_t iters = 200000;
  double best = 0;
  for (int rep = 0; rep < std::max(1, bursts); ++rep) {
    double flops = 0;
    std::mutex mu;
    const double t = on_threads(std::max(1, threads), [&](int) {
      const double f = fma_loop(iters);
      std::lock_guard<std::mutex> lock(mu);
      flops += f;
    });
    best = std::max(best, flops / t / 1e9);
  }
  return best;
}

bool confirm_fma_peak(Limits& lim, double fastest_gflops, bool quick) {
  const int bursts = quick ? 5 : 30;
  lim.fma_gflops_after = measure_fma_peak(lim.threads, bursts);
  for (int again = 0; again < 2 && fastest_gflops > std::max(lim.fma_gflops, lim.fma_gflops_after); ++again)
    lim.fma_gflops_after = std::max(lim.fma_gflops_after, measure_fma_peak(lim.threads, bursts));
  lim.fma_gflops = std::max(lim.fma_gflops, lim.fma_gflops_after);
  lim.peak_exceeded = fastest_gflops > lim.fma_gflops;
  return !lim.peak_exceeded;
}

const Limits& measure_limits(int threads, bool quick) {
  static std::mutex mu;
  static std::map<std::pair<int, bool>, std::unique_ptr<Limits>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[{threads, quick}];
  if (!slot) slot = std::make_unique<Limits>(measure(threads, quick));
  return *slot;
}

}  // namespace gradsleuth::workbench::cpu
