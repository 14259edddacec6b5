// workbench/gelu.cpp: GELU, tanh form, y = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi),
// of n float32 values, on the CPU: three versions. threads > 1 split the array.
//
// The vectorised versions use 0.5 (1 + tanh(t)) = 1 / (1 + e^(-2t)): y = x / (1 + e^(-2t)).
// Error bound, relative to |y|: -2t is computed with about six roundings (x^2, the cubic term,
// the sum, the scaling, and the float constants), each relative u of |2t|, so e^(-2t) carries
// 6 u |2t| from its argument and 2 ulp (4 u) of its own (simd::exp); the add and the divide one
// u each: |err| / |y| <= (6 |2t| + 8) u, about 1.9e-5 at |x| = 6, 4.8e-7 near 0.
// workbench/tests/test_cpu_ladder.cpp checks it over 2M points in [-10, 10].
// The workbench's tolerance (atol 1e-6, rtol 16 eps, that of tanhf) holds on its inputs ([-5, 5]).
#include <cmath>
#include <cstdint>

#include "workbench/ladders.h"
#include "workbench/simd.h"

namespace gradsleuth::workbench::cpu {
namespace {
constexpr float kK = 0.7978845608028654f, kC = 0.044715f;

// v1: the formula with std::tanh, one element at a time (a libm call per element).
void v1(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::tanh(kK * (x[i] + kC * x[i] * x[i] * x[i])));
}

#if GS_WB_SIMD
using namespace simd;
inline V gelu(V v) {
  const V t2 = mul(splat(-2.0f * kK), fma(mul(splat(kC), mul(v, v)), v, v));  // -2t
  return div(v, add(splat(1.0f), exp(t2)));
}
// v2: x / (1 + e^(-2t)) in kW lanes with simd::exp: no libm call, no branch.
void v2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kW <= n; i += kW) store(y + i, gelu(load(x + i)));
  if (i < n) store(y + i, gelu(load(x + i, Mask(static_cast<int>(n - i)))), Mask(static_cast<int>(n - i)));
}
// v3: v2 with streaming (non-temporal) stores once y is aligned: y is written around the
// caches, so its lines are not first read from memory (no read-for-ownership): 8 bytes of
// traffic per element instead of 12. Worth it only when y does not fit in the caches.
void v3(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i < n && (reinterpret_cast<uintptr_t>(y + i) % (kW * 4)) != 0; ++i) {
    const float a = x[i];
    y[i] = a / (1.0f + std::exp(-2.0f * kK * (a + kC * a * a * a)));
  }
  for (; i + kW <= n; i += kW) stream(y + i, gelu(load(x + i)));
  if (i < n) store(y + i, gelu(load(x + i, Mask(static_cast<int>(n - i)))), Mask(static_cast<int>(n - i)));
  _mm_sfence();  // the streamed stores are visible before the caller reads y
}
#endif

KernelFn chunked(void (*f)(const float*, float*, int64_t)) {
  return [f](const float* const* in, float* out, const Shape& s, int threads) {
    parallel_for(threads, s.n, [&](int64_t i0, int64_t i1) { f(in[0] + i0, out + i0, i1 - i0); });
  };
}

}  // namespace

// For the tests: the vectorised GELU of one value (v2's formula), and its a priori bound.
float gelu_simd_one(float x) {
#if GS_WB_SIMD
  float y[simd::kW];
  const float in[simd::kW] = {x};
  v2(in, y, 1);
  return y[0];
#else
  return x;
#endif
}

Ladder gelu_ladder() {
  Ladder l;
  l.spec.name = "gelu";
  l.spec.what = "GELU (tanh approximation) of n float32 values: the elementwise op";
  l.spec.file = "workbench/gelu.cpp";
  l.spec.shape_help = "--size N: elements";
  l.spec.gpu_reference = "the copy bandwidth";
  l.spec.default_size = int64_t{1} << 25;
  l.rungs.push_back({{1, "scalar tanh", "the formula with std::tanh: a libm call per element"}, chunked(v1), "", {}});
#if GS_WB_SIMD
  l.rungs.push_back(
      {{2, "vectorised",
        std::string(simd::isa_name()) + ": x / (1 + e^(-2t)) with a polynomial exp; relative error <= (6|2t| + 8) u"},
       chunked(v2),
       "",
       {}});
  l.rungs.push_back({{3, "streaming stores",
                      "v2 writing y around the caches: no read-for-ownership of y, 8 bytes per element instead of 12"},
                     chunked(v3),
                     "",
                     {}});
#else
  l.rungs.push_back({{2, "vectorised", "x / (1 + e^(-2t)) in vector lanes"}, {}, kNoSimd, {}});
  l.rungs.push_back({{3, "streaming stores", "v2 writing around the caches"}, {}, kNoSimd, {}});
#endif
  return l;
}

}  // namespace gradsleuth::workbench::cpu
