// workbench/simd.h: the few vector operations the CPU ladder's SIMD rungs use, for the ISA
// level this build compiles for: AVX-512 (16 floats), AVX2 + FMA (8 floats), or none
// (kHaveSimd = false: the SIMD rungs say they are not built and are skipped).
// One name per operation, so a rung reads the same at both widths.
#pragma once
#include <cstdint>

#if defined(__AVX512F__)
#define GS_WB_SIMD 512
#include <immintrin.h>
#elif defined(__AVX2__) && defined(__FMA__)
#define GS_WB_SIMD 256
#include <immintrin.h>
#else
#define GS_WB_SIMD 0
#endif

namespace gradsleuth::workbench::cpu::simd {

constexpr bool kHaveSimd = GS_WB_SIMD != 0;
// "AVX-512", "AVX2+FMA" or "scalar (no AVX2 in this build)".
inline const char* isa_name() {
  return GS_WB_SIMD == 512 ? "AVX-512" : GS_WB_SIMD == 256 ? "AVX2+FMA" : "scalar (no AVX2 in this build)";
}

#if GS_WB_SIMD == 512
constexpr int kW = 16;  // floats per vector
using V = __m512;
struct Mask {  // the first n lanes, 0 <= n <= kW
  __mmask16 m;
  explicit Mask(int n) : m(static_cast<__mmask16>((1u << n) - 1u)) {}
};
inline V load(const float* p) { return _mm512_loadu_ps(p); }
inline V load(const float* p, Mask k) { return _mm512_maskz_loadu_ps(k.m, p); }
inline void store(float* p, V v) { _mm512_storeu_ps(p, v); }
inline void store(float* p, V v, Mask k) { _mm512_mask_storeu_ps(p, k.m, v); }
inline void stream(float* p, V v) { _mm512_stream_ps(p, v); }  // p 64-byte aligned
inline V splat(float s) { return _mm512_set1_ps(s); }
inline V zero() { return _mm512_setzero_ps(); }
inline V add(V a, V b) { return _mm512_add_ps(a, b); }
inline V sub(V a, V b) { return _mm512_sub_ps(a, b); }
inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
inline V div(V a, V b) { return _mm512_div_ps(a, b); }
inline V max(V a, V b) { return _mm512_max_ps(a, b); }
inline V min(V a, V b) { return _mm512_min_ps(a, b); }
inline V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }  // a * b + c
inline V round_near(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline V pow2i(V n) {  // 2^n for integral n in [-126, 127]
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
inline void to_array(V v, float* out) { _mm512_storeu_ps(out, v); }
#elif GS_WB_SIMD == 256
constexpr int kW = 8;
using V = __m256;
struct Mask {
  __m256i m;
  explicit Mask(int n) : m(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))) {}
};
inline V load(const float* p) { return _mm256_loadu_ps(p); }
inline V load(const float* p, Mask k) { return _mm256_maskload_ps(p, k.m); }
inline void store(float* p, V v) { _mm256_storeu_ps(p, v); }
inline void store(float* p, V v, Mask k) { _mm256_maskstore_ps(p, k.m, v); }
inline void stream(float* p, V v) { _mm256_stream_ps(p, v); }  // p 32-byte aligned
inline V splat(float s) { return _mm256_set1_ps(s); }
inline V zero() { return _mm256_setzero_ps(); }
inline V add(V a, V b) { return _mm256_add_ps(a, b); }
inline V sub(V a, V b) { return _mm256_sub_ps(a, b); }
inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V div(V a, V b) { return _mm256_div_ps(a, b); }
inline V max(V a, V b) { return _mm256_max_ps(a, b); }
inline V min(V a, V b) { return _mm256_min_ps(a, b); }
inline V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V round_near(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline V pow2i(V n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
inline void to_array(V v, float* out) { _mm256_storeu_ps(out, v); }
#endif

#if GS_WB_SIMD
// Lanes combined in a fixed order (lane 0 + lane 1 + ...): the same bits every run.
inline float hsum(V v) {
  alignas(64) float t[kW];
  to_array(v, t);
  float s = 0.0f;
  for (int i = 0; i < kW; ++i) s += t[i];
  return s;
}
inline float hmax(V v) {
  alignas(64) float t[kW];
  to_array(v, t);
  float s = t[0];
  for (int i = 1; i < kW; ++i) s = s > t[i] ? s : t[i];
  return s;
}

// e^x for every lane: x clamped to [-87, 88]; n = round(x / ln 2), r = x - n ln 2 in two
// parts (Cody-Waite: n * kLn2Hi is exact), e^r by its degree-7 Taylor polynomial (truncation
// |r|^8 / 8! <= 5.3e-9 for |r| <= ln(2) / 2, under 0.05 ulp), times 2^n built in the exponent
// bits. Error, measured over every float in [-87, 88] against exp in double
// (workbench/tests/test_cpu_ladder.cpp checks it): under 2 ulp, i.e. relative 2.4e-7.
inline V exp(V x) {
  constexpr float kLn2Hi = 0.693145751953125f, kLn2Lo = 1.428606765330187e-06f, kLog2e = 1.44269504088896341f;
  x = min(max(x, splat(-87.0f)), splat(88.0f));
  const V n = round_near(mul(x, splat(kLog2e)));
  V r = fma(n, splat(-kLn2Hi), x);
  r = fma(n, splat(-kLn2Lo), r);
  V p = splat(1.0f / 5040.0f);
  p = fma(p, r, splat(1.0f / 720.0f));
  p = fma(p, r, splat(1.0f / 120.0f));
  p = fma(p, r, splat(1.0f / 24.0f));
  p = fma(p, r, splat(1.0f / 6.0f));
  p = fma(p, r, splat(0.5f));
  p = fma(p, r, splat(1.0f));
  p = fma(p, r, splat(1.0f));
  return mul(p, pow2i(n));
}
#endif

}  // namespace gradsleuth::workbench::cpu::simd
