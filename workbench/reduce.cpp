// workbench/reduce.cpp: the sum of n float32 values, on the CPU: six versions, timed and also
// checked for accuracy, each against the a priori error bound of its order of additions
// (Higham, "Accuracy and Stability of Numerical Algorithms", ch. 4). With u = 2^-24:
//   one running sum of n terms          |err| <= gamma_(n-1) sum|x|       (gamma_k = k u / (1 - k u))
//   L running sums, then combined       |err| <= gamma_(n/L + L) sum|x|
//   pairwise over blocks of b           |err| <= gamma_(b/L + L + log2(n/b)) sum|x|
//   compensated (Kahan) per lane        |err| <= (2u + n u^2) sum|x|, plus the lanes' merge
// threads > 1: each thread sums a contiguous chunk; the chunks' sums are added in order.
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu/accurate_sum.h"
#include "workbench/ladders.h"
#include "workbench/simd.h"

namespace gradsleuth::workbench::cpu {
namespace {
constexpr double kU = 5.9604644775390625e-08;  // 2^-24, float32's unit roundoff
// gamma_k bounds k roundings while k u < 1; past that the bound says nothing (infinity).
double gamma(double k) { return k * kU < 1.0 ? k * kU / (1.0 - k * kU) : std::numeric_limits<double>::infinity(); }

// v1: one float accumulator: each addition waits for the last (an add's latency, ~3 cycles,
// per element), and the compiler may not reorder them (no -ffast-math).
float v1(const float* x, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

// v2: 8 independent accumulators: 8 additions in flight hide the latency; each sums n/8 terms.
float v2(const float* x, int64_t n) {
  float a[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) a[j] += x[i + j];
  for (int j = 0; i < n; ++i, ++j) a[j] += x[i];
  float s = 0.0f;
  for (float v : a) s += v;
  return s;
}

#if GS_WB_SIMD
using namespace simd;
constexpr int kAcc = 4;  // vector accumulators: 4 x kW lanes
constexpr int kLanes = kAcc * kW;

// v3: kAcc vector accumulators: kLanes additions per kAcc instructions, latency hidden.
float simd_sum(const float* x, int64_t n) {
  V a[kAcc];
  for (V& v : a) v = zero();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kAcc; ++j) a[j] = add(a[j], load(x + i + j * kW));
  for (; i + kW <= n; i += kW) a[0] = add(a[0], load(x + i));
  if (i < n) a[1] = add(a[1], load(x + i, Mask(static_cast<int>(n - i))));
  return hsum(add(add(a[0], a[1]), add(a[2], a[3])));
}

// v4: v3 on blocks of kBlock elements, the block sums combined pairwise (a balanced tree):
// the same speed, and the error grows with log2(n) instead of n.
constexpr int64_t kBlock = 4096;
float pairwise(const float* x, int64_t n) {
  if (n <= kBlock) return simd_sum(x, n);
  const int64_t half = (n / kBlock + 1) / 2 * kBlock;
  return pairwise(x, half) + pairwise(x + half, n - half);
}

// v5: compensated (Kahan) summation in every lane: c keeps the low bits each addition lost
// and feeds them back. 4 operations per element instead of 1, still under the memory's pace;
// the lanes are merged in double. (No -ffast-math: it would simplify the compensation away.)
float kahan(const float* x, int64_t n) {
  V s[2] = {zero(), zero()}, c[2] = {zero(), zero()};
  auto step = [&](int j, V v) {
    const V y = sub(v, c[j]);
    const V t = add(s[j], y);
    c[j] = sub(sub(t, s[j]), y);
    s[j] = t;
  };
  int64_t i = 0;
  for (; i + 2 * kW <= n; i += 2 * kW) {
    step(0, load(x + i));
    step(1, load(x + i + kW));
  }
  for (; i + kW <= n; i += kW) step(0, load(x + i));
  if (i < n) step(1, load(x + i, Mask(static_cast<int>(n - i))));
  alignas(64) float sv[2][kW], cv[2][kW];
  double total = 0.0;
  for (int j = 0; j < 2; ++j) {
    to_array(s[j], sv[j]);
    to_array(c[j], cv[j]);
    for (int l = 0; l < kW; ++l) total += static_cast<double>(sv[j][l]) - static_cast<double>(cv[j][l]);
  }
  return static_cast<float>(total);
}
#endif

// v6: the engine's sum (core/cpu/accurate_sum.h): 32 float64 lanes, pairwise over blocks;
// every float32 reduction of the CPU backend ends in it.
float engine(const float* x, int64_t n) { return static_cast<float>(gradsleuth::cpu::accurate_sum(x, n)); }

KernelFn chunked(float (*f)(const float*, int64_t)) {
  return [f](const float* const* in, float* out, const Shape& s, int threads) {
    std::vector<float> part(static_cast<size_t>(threads > 0 ? threads : 1), 0.0f);
    const int64_t per = (s.n + threads - 1) / threads;
    parallel_for(threads, s.n,
                 [&](int64_t i0, int64_t i1) { part[static_cast<size_t>(i0 / per)] = f(in[0] + i0, i1 - i0); });
    float total = 0.0f;
    for (float p : part) total += p;
    out[0] = total;
  };
}

}  // namespace

Ladder reduce_ladder() {
  Ladder l;
  l.spec.name = "reduce";
  l.spec.what = "sum of n float32 values into one float";
  l.spec.file = "workbench/reduce.cpp";
  l.spec.shape_help = "--size N: elements";
  l.spec.gpu_reference = "the copy bandwidth";
  l.spec.default_size = int64_t{1} << 26;
  l.rungs.push_back(
      {{1, "naive", "one running sum: each add waits for the previous one's latency"}, chunked(v1), "", [](int64_t n) {
         return gamma(static_cast<double>(n));
       }});
  l.rungs.push_back({{2, "8 accumulators", "8 independent running sums: 8 adds in flight hide the latency"},
                     chunked(v2),
                     "",
                     [](int64_t n) { return gamma(std::ceil(n / 8.0) + 16); }});
#if GS_WB_SIMD
  l.rungs.push_back({{3, "SIMD",
                      std::string(simd::isa_name()) + ": " + std::to_string(kAcc) + " vector accumulators, " +
                          std::to_string(kLanes) + " lanes added per " + std::to_string(kAcc) + " instructions"},
                     chunked(simd_sum),
                     "",
                     [](int64_t n) { return gamma(std::ceil(n / double(kW)) + 2 * kW + 4); }});
  l.rungs.push_back(
      {{4, "pairwise", "v3 on 4096-element blocks combined as a balanced tree: same speed, error ~log2(n) not ~n"},
       chunked(pairwise),
       "",
       [](int64_t n) {
         return gamma(kBlock / double(kW) + 2 * kW + 4 + std::ceil(std::log2(std::max(1.0, n / double(kBlock)))) + 1);
       }});
  l.rungs.push_back(
      {{5, "Kahan", "compensated sum per lane: 4 flops per element, still memory-bound; error ~2u, not growing with n"},
       chunked(kahan),
       "",
       [](int64_t n) { return 2 * kU + n * kU * kU + gamma(2) + 1e-15 * kW; }});
#else
  l.rungs.push_back({{3, "SIMD", "vector accumulators"}, {}, kNoSimd, {}});
  l.rungs.push_back({{4, "pairwise", "v3 on blocks combined as a tree"}, {}, kNoSimd, {}});
  l.rungs.push_back({{5, "Kahan", "compensated sum per lane"}, {}, kNoSimd, {}});
#endif
  l.rungs.push_back(
      {{6, "engine (float64 lanes)",
        "core/cpu/accurate_sum.h: 32 float64 lanes, pairwise blocks: the CPU backend's sum, one float rounding"},
       chunked(engine),
       "",
       [](int64_t n) { return kU + (37 + std::ceil(std::log2(std::max(1.0, n / 1024.0)))) * 1.1102230246251565e-16; }});
  return l;
}

}  // namespace gradsleuth::workbench::cpu
