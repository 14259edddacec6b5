// workbench/softmax.cpp: row softmax of x (R rows, C columns), float32, on the CPU: four
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

// v4: v2, with the memory traffic overlapped with the arithmetic. A row (16 KiB at 4096
// columns) fits in L1/L2, so only v2's first pass waits on memory; its exp and scale passes
// run from cache while the memory sits idle. Here each iteration of the exp pass also
// prefetches one cache line of the next row's x (and, for writing, of its y), so the next
// row is in cache when its max pass starts; and the max pass keeps 4 vector maxima, so its
// dependency chain is 4 times shorter.
void v4_row(const float* x, float* y, int64_t C, const float* x_next, float* y_next) {
  const int64_t full = C / kW * kW;
  const Mask tail(static_cast<int>(C - full));
  const V ninf = splat(-std::numeric_limits<float>::infinity());
  V m4[4] = {ninf, ninf, ninf, ninf};
  int64_t c = 0;
  for (; c + 4 * kW <= full; c += 4 * kW)
    for (int j = 0; j < 4; ++j) m4[j] = max(m4[j], load(x + c + j * kW));
  for (; c < full; c += kW) m4[0] = max(m4[0], load(x + c));
  float m = hmax(max(max(m4[0], m4[1]), max(m4[2], m4[3])));
  for (int64_t k = full; k < C; ++k) m = std::max(m, x[k]);
  const V mv = splat(m);
  V vs[2] = {zero(), zero()};
  constexpr int64_t kLine = 64 / sizeof(float);  // floats per cache line
  for (c = 0; c < full; c += kW) {
    if (x_next != nullptr) {
      for (int64_t l = 0; l < kW; l += kLine) {
        __builtin_prefetch(x_next + c + l, 0);
        __builtin_prefetch(y_next + c + l, 1);
      }
    }
    const V e = exp(sub(load(x + c), mv));
    store(y + c, e);
    vs[(c / kW) & 1] = add(vs[(c / kW) & 1], e);
  }
  if (full < C) {
    const V e = exp(sub(load(x + full, tail), mv));
    store(y + full, e, tail);
  }
  float s = hsum(add(vs[0], vs[1]));
  for (int64_t k = full; k < C; ++k) s += y[k];
  const V inv = splat(1.0f / s);
  for (c = 0; c < full; c += kW) store(y + c, mul(load(y + c), inv));
  if (full < C) store(y + full, mul(load(y + full, tail), inv), tail);
}
#endif

KernelFn by_rows(void (*row)(const float*, float*, int64_t)) {
  return [row](const float* const* in, float* out, const Shape& s, int threads) {
    parallel_for(threads, s.m, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) row(in[0] + r * s.n, out + r * s.n, s.n);
    });
  };
}

#if GS_WB_SIMD
// Rows with the next row of the same thread's range named (nullptr for its last), for v4.
KernelFn by_rows_next(void (*row)(const float*, float*, int64_t, const float*, float*)) {
  return [row](const float* const* in, float* out, const Shape& s, int threads) {
    parallel_for(threads, s.m, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const bool last = r + 1 == r1;
        row(in[0] + r * s.n, out + r * s.n, s.n, last ? nullptr : in[0] + (r + 1) * s.n,
            last ? nullptr : out + (r + 1) * s.n);
      }
    });
  };
}
#endif

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
  l.rungs.push_back(
      {{1, "scalar three-pass", "max, then sum of exp (std::exp), then a division per element: one element at a time"},
       by_rows(v1_row),
       "",
       {}});
#if GS_WB_SIMD
  l.rungs.push_back(
      {{2, "vectorised",
        std::string(simd::isa_name()) +
            " lanes, a polynomial exp (< 2 ulp), one reciprocal per row instead of a division per element"},
       by_rows(v2_row),
       "",
       {}});
  l.rungs.push_back({{3, "online one-pass",
                      "running max and rescaled sum in one pass: x read twice instead of three times, y written once"},
                     by_rows(v3_row),
                     "",
                     {}});
  l.rungs.push_back(
      {{4, "overlapped",
        "v2 with the next row prefetched during the exp pass, so memory and arithmetic overlap; 4 running maxima"},
       by_rows_next(v4_row),
       "",
       {}});
#else
  l.rungs.push_back({{2, "vectorised", "AVX2/AVX-512 lanes and a polynomial exp"}, {}, kNoSimd, {}});
  l.rungs.push_back({{3, "online one-pass", "running max and rescaled sum in one pass"}, {}, kNoSimd, {}});
  l.rungs.push_back({{4, "overlapped", "the next row prefetched while this one is computed"}, {}, kNoSimd, {}});
#endif
  return l;
}

}  // namespace gradsleuth::workbench::cpu
