// workbench/layernorm.cpp: layer norm of x (R rows, C columns) over the columns, with weight w
// and bias b (C), eps 1e-5, float32, on the CPU: four versions. Key: x(r, c) = x[r*C + c].
// threads > 1 split the rows.
#include <cmath>

#include "workbench/ladders.h"
#include "workbench/simd.h"

namespace gradsleuth::workbench::cpu {
namespace {
constexpr float kLnEps = 1e-5f;

// v1: the textbook: a pass for the mean, a pass for the variance, a pass that writes y.
void v1_row(const float* x, const float* w, const float* b, float* y, int64_t C) {
  float mean = 0.0f;
  for (int64_t c = 0; c < C; ++c) mean += x[c];
  mean /= static_cast<float>(C);
  float var = 0.0f;
  for (int64_t c = 0; c < C; ++c) var += (x[c] - mean) * (x[c] - mean);
  var /= static_cast<float>(C);
  const float rstd = 1.0f / std::sqrt(var + kLnEps);
  for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - mean) * rstd * w[c] + b[c];
}

#if GS_WB_SIMD
using namespace simd;
// v2: the same three passes in kW lanes (kW partial sums per pass, also more accurate: each
// lane sums C / kW terms), y = (x - mean) * (rstd w) + b as one FMA.
void v2_row(const float* x, const float* w, const float* b, float* y, int64_t C) {
  const int64_t full = C / kW * kW;
  const Mask tail(static_cast<int>(C - full));
  V vs = zero();
  for (int64_t c = 0; c < full; c += kW) vs = add(vs, load(x + c));
  float sum = hsum(vs);
  for (int64_t c = full; c < C; ++c) sum += x[c];
  const float mean = sum / static_cast<float>(C);
  const V mv = splat(mean);
  V vq = zero();
  for (int64_t c = 0; c < full; c += kW) {
    const V d = sub(load(x + c), mv);
    vq = fma(d, d, vq);
  }
  float q = hsum(vq);
  for (int64_t c = full; c < C; ++c) q += (x[c] - mean) * (x[c] - mean);
  const V rs = splat(1.0f / std::sqrt(q / static_cast<float>(C) + kLnEps));
  for (int64_t c = 0; c < full; c += kW) store(y + c, fma(mul(sub(load(x + c), mv), rs), load(w + c), load(b + c)));
  if (full < C)
    store(y + full, fma(mul(sub(load(x + full, tail), mv), rs), load(w + full, tail), load(b + full, tail)), tail);
}

// v3 and v4's statistics from the shifted sums of their vector part: a1 = sum(x - x0), a2 =
// sum((x - x0)^2) over [0, full), completed with the scalar tail [full, C).
struct RowStats {
  float mean, rstd;
};
RowStats shifted_stats(const float* x, int64_t full, int64_t C, float x0, float a1, float a2) {
  for (int64_t c = full; c < C; ++c) {
    const float d = x[c] - x0;
    a1 += d;
    a2 += d * d;
  }
  const float n = static_cast<float>(C), dm = a1 / n;
  const float var = std::max(0.0f, a2 / n - dm * dm);
  return {x0 + dm, 1.0f / std::sqrt(var + kLnEps)};
}

// v3: the statistics in one pass: sums of d and d^2 with d = x - x[0] (shifting by one sample
// keeps sum d^2 - (sum d)^2 / C free of the cancellation the raw sum of squares has when the
// mean is large), then the writing pass: x read twice instead of three times.
void v3_row(const float* x, const float* w, const float* b, float* y, int64_t C) {
  const int64_t full = C / kW * kW;
  const Mask tail(static_cast<int>(C - full));
  const float x0 = x[0];
  const V sv = splat(x0);
  V s1 = zero(), s2 = zero();
  for (int64_t c = 0; c < full; c += kW) {
    const V d = sub(load(x + c), sv);
    s1 = add(s1, d);
    s2 = fma(d, d, s2);
  }
  const RowStats st = shifted_stats(x, full, C, x0, hsum(s1), hsum(s2));
  const V mv = splat(st.mean), rs = splat(st.rstd);
  for (int64_t c = 0; c < full; c += kW) store(y + c, fma(mul(sub(load(x + c), mv), rs), load(w + c), load(b + c)));
  if (full < C)
    store(y + full, fma(mul(sub(load(x + full, tail), mv), rs), load(w + full, tail), load(b + full, tail)), tail);
}

// v4: v3 writing y with streaming (non-temporal) stores, and the next row prefetched. y goes
// around the caches, so its lines are not first read from memory (no read-for-ownership): 8
// bytes of memory traffic per element instead of 12. And v3's statistics pass waited on
// memory while its writing pass left the memory idle; prefetching the next row during this
// one keeps a row's worth of reads in flight all the time.
void v4_row(const float* x, const float* w, const float* b, float* y, int64_t C) {
  const int64_t full = C / kW * kW;
  // The next row (contiguous after this one) is prefetched a line per step of the statistics
  // pass: it is in flight while this row is summed and written, and the memory is never idle.
  constexpr int64_t kLine = 64 / sizeof(float);
  const float x0 = x[0];
  const V sv = splat(x0);
  V s1[2] = {zero(), zero()}, s2[2] = {zero(), zero()};
  for (int64_t c = 0; c < full; c += kW) {
    const int j = static_cast<int>((c / kW) & 1);
    for (int64_t l = 0; l < kW; l += kLine) __builtin_prefetch(x + C + c + l, 0);
    const V d = sub(load(x + c), sv);
    s1[j] = add(s1[j], d);
    s2[j] = fma(d, d, s2[j]);
  }
  const RowStats st = shifted_stats(x, full, C, x0, hsum(add(s1[0], s1[1])), hsum(add(s2[0], s2[1])));
  const float mean = st.mean, rstd = st.rstd;
  const V mv = splat(mean), rs = splat(rstd);
  int64_t c = 0;
  for (; c < C && (reinterpret_cast<uintptr_t>(y + c) % (kW * 4)) != 0; ++c) y[c] = (x[c] - mean) * rstd * w[c] + b[c];
  for (; c + kW <= C; c += kW) stream(y + c, fma(mul(sub(load(x + c), mv), rs), load(w + c), load(b + c)));
  for (; c < C; ++c) y[c] = (x[c] - mean) * rstd * w[c] + b[c];
}
#endif

// streamed: the rows write y with streaming stores, so each thread ends with a store fence
// (the streamed stores are then visible before the caller reads y).
KernelFn by_rows(void (*row)(const float*, const float*, const float*, float*, int64_t), bool streamed = false) {
  return [row, streamed](const float* const* in, float* out, const Shape& s, int threads) {
    parallel_for(threads, s.m, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) row(in[0] + r * s.n, in[1], in[2], out + r * s.n, s.n);
#if GS_WB_SIMD
      if (streamed) _mm_sfence();
#endif
    });
  };
}

}  // namespace

Ladder layernorm_ladder() {
  Ladder l;
  l.spec.name = "layernorm";
  l.spec.what = "layer norm of x (rows, cols) over the columns, with weight and bias";
  l.spec.file = "workbench/layernorm.cpp";
  l.spec.shape_help = "--size C: columns per row; --rows R (default 4096)";
  l.spec.gpu_reference = "the copy bandwidth";
  l.spec.default_size = 4096;
  l.spec.default_rows = 4096;
  l.rungs.push_back(
      {{1, "scalar two-pass", "mean, then variance, then y: three scalar passes, one float running sum each"},
       by_rows(v1_row),
       "",
       {}});
#if GS_WB_SIMD
  l.rungs.push_back(
      {{2, "vectorised", std::string(simd::isa_name()) + " lanes in each pass (kW partial sums), y as one FMA"},
       by_rows(v2_row),
       "",
       {}});
  l.rungs.push_back({{3, "one-pass statistics",
                      "sum and sum of squares of x - x[0] in one pass: x read twice instead of three times"},
                     by_rows(v3_row),
                     "",
                     {}});
  l.rungs.push_back({{4, "streamed, prefetched",
                      "v3 writing y around the caches (no read-for-ownership: 8 bytes per element instead of 12), the "
                      "next row prefetched so the memory is never idle"},
                     by_rows(v4_row, /*streamed=*/true),
                     "",
                     {}});
#else
  l.rungs.push_back({{2, "vectorised", "AVX2/AVX-512 lanes in each pass"}, {}, kNoSimd, {}});
  l.rungs.push_back({{3, "one-pass statistics", "sum and sum of squares in one pass"}, {}, kNoSimd, {}});
  l.rungs.push_back(
      {{4, "streamed, prefetched", "v3 writing y around the caches, the next row prefetched"}, {}, kNoSimd, {}});
#endif
  return l;
}

}  // namespace gradsleuth::workbench::cpu
