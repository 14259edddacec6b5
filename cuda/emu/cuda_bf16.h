// cuda/emu/cuda_bf16.h: the emulator's stand-in for <cuda_bf16.h>: the __nv_bfloat16 storage type
// and the conversions kernels use, as plain C++ (round to nearest even; a NaN stays a quiet NaN).
#pragma once
#include <cstdint>
#include <cstring>

// The upper 16 bits of a float32. No arithmetic and no implicit conversions, as in cuda_fp16.h.
struct __nv_bfloat16 {
  unsigned short __x;
};

inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t u = static_cast<uint32_t>(h.__x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{static_cast<unsigned short>((u >> 16) | 0x0040u)};
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even; overflow carries into inf
  return __nv_bfloat16{static_cast<unsigned short>(u >> 16)};
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) { return __nv_bfloat16{b}; }
