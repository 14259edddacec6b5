// workbench/softmax.cpp: row softmax of x (R rows, C columns), float32, on the CPU: three
// versions. Key: R rows, C columns; x(r, c) = x[r*C + c]. threads > 1 split the rows.
#include <algorithm>
#include <cmath>
#include <limits>

#include "workbench/ladders.h"
#include "workbench/simd.h"

namespace gradsleuth::workbench::cpu {
namespace {

// v1: three scalar passes per row: the max, the sum of exp(x - max) (written to y), y / sum.
void v1_row(const float* x, float* y, int64_t C) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < C; ++c) m = std::max(m, x[c]);
  float sum = 0.0f;
  for (int64_t c = 0; c < C; ++c) sum += (y[c] = std::exp(x[c] - m));
  for (int64_t c = 0; c < C; ++c) y[c] /= sum;
}

#if GS_WB_SIMD
using namespace simd;
// v2: the same three passes, kW lanes at a time: vector max, a polynomial exp (simd::exp, < 2 ulp)
// summed in kW lanes, and one multiply by 1 / sum instead of a division per element.
void v2_row(const float* x, float* y, int64_t C) {
  const int64_t full = C / kW * kW;
  const Mask tail(static_cast<int>(C - full));
  V vm = splat(-std::numeric_limits<float>::infinity());
  for (int64_t c = 0; c < full; c += kW) vm = max(vm, load(x + c));
  float m = hmax(vm);
  for (int64_t c = full; c < C; ++c) m = std::max(m, x[c]);
  const V mv = splat(m);
  V vs = zero();
  for (int64_t c = 0; c < full; c += kW) {
    const V e = exp(sub(load(x + c), mv));
    store(y + c, e);
    vs = add(vs, e);
  }
  if (full < C) {
    const V e = exp(sub(load(x + full, tail), mv));
    store(y + full, e, tail);  // the tail is added below, from y (the masked-off lanes hold exp(-m))
  }
  float s = hsum(vs);
  for (int64_t c = full; c < C; ++c) s += y[c];
  const V inv = splat(1.0f / s);
  for (int64_t c = 0; c < full; c += kW) store(y + c, mul(load(y + c), inv));
  if (full < C) store(y + full, mul(load(y + full, tail), inv), tail);
}

// v3: online softmax (Milakov & Gimelshein 2018): one pass keeps, per lane, the running max m
// and the sum s of exp(x - m), rescaling s by exp(m_old - m_new) when the max grows; the lanes
// are merged the same way. x is read twice instead of three times, y written once.
void v3_row(const float* x, float* y, int64_t C) {
  const int64_t full = C / kW * kW;
  const Mask tail(static_cast<int>(C - full));
  const float ninf = -std::numeric_limits<float>::infinity();
  V vm = splat(ninf), vs = zero();
  for (int64_t c = 0; c < full; c += kW) {
    const V v = load(x + c), nm = max(vm, v);
    vs = fma(vs, exp(sub(vm, nm)), exp(sub(v, nm)));
    vm = nm;
  }
  alignas(64) float ms[kW], ss[kW];
  to_array(vm, ms);
  to_array(vs, ss);
  float m = ninf, s = 0.0f;
  for (int i = 0; i < kW; ++i) {  // merge the lanes (a lane that saw nothing has m = -inf, s = 0)
    if (ms[i] == ninf) continue;
    const float nm = std::max(m, ms[i]);
    s = s * std::exp(m - nm) + ss[i] * std::exp(ms[i] - nm);
    m = nm;
  }
  for (int64_t c = full; c < C; ++c) {
    const float nm = std::max(m, x[c]);
    s = s * std::exp(m - nm) + std::exp(x[c] - nm);
    m = nm;
  }
  const V mv = splat(m), inv = splat(1.0f / s);
  for (int64_t c = 0; c < full; c += kW) store(y + c, mul(exp(sub(load(x + c), mv)), inv));
  if (full < C) store(y + full, mul(exp(sub(load(x + full, tail), mv)), inv), tail);
}
#endif

KernelFn by_rows(void (*row)(const float*, float*, int64_t)) {
  return [row](const float* const* in, float* out, const Shape& s, int threads) {
    parallel_for(threads, s.m, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) row(in[0] + r * s.n, out + r * s.n, s.n);
    });
  };
}

}  // namespace

Ladder softmax_ladder() {
  Ladder l;
  l.spec.name = "softmax";
  l.spec.what = "row softmax of x (rows, cols), float32";
  l.spec.file = "workbench/softmax.cpp";
  l.spec.shape_help = "--size C: columns per row; --rows R (default 4096)";
  l.spec.gpu_reference = "the copy bandwidth";
  l.spec.default_size = 4096;
  l.spec.default_rows = 4096;
  l.rungs.push_back({{1, "scalar three-pass", "max, then sum of exp (std::exp), then a division per element: one element at a time"},
                     by_rows(v1_row), "", {}});
#if GS_WB_SIMD
  l.rungs.push_back({{2, "vectorised", std::string(simd::isa_name()) + " lanes, a polynomial exp (< 2 ulp), one reciprocal per row instead of a division per element"},
                     by_rows(v2_row), "", {}});
  l.rungs.push_back({{3, "online one-pass", "running max and rescaled sum in one pass: x read twice instead of three times, y written once"},
                     by_rows(v3_row), "", {}});
#else
  l.rungs.push_back({{2, "vectorised", "AVX2/AVX-512 lanes and a polynomial exp"}, {}, kNoSimd, {}});
  l.rungs.push_back({{3, "online one-pass", "running max and rescaled sum in one pass"}, {}, kNoSimd, {}});
#endif
  return l;
}

}  // namespace gradsleuth::workbench::cpu
