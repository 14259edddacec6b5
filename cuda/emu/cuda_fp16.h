// cuda/emu/cuda_fp16.h: the emulator's stand-in for <cuda_fp16.h>: the __half storage type and the
// conversions kernels use, as plain C++ (round to nearest even, overflow to inf, subnormals kept).
#pragma once
#include <cstring>

// 16 bits, IEEE binary16. No arithmetic and no implicit conversions: kernels convert explicitly
// (__half2float / __float2half_rn), which the real header also provides.
struct __half {
  unsigned short __x;
};

inline float __half2float(__half h) {
  _Float16 v;
  std::memcpy(&v, &h.__x, 2);
  return static_cast<float>(v);
}
// _Float16's conversion from float is IEEE's: round to nearest, ties to even.
inline __half __float2half_rn(float f) {
  const _Float16 v = static_cast<_Float16>(f);
  __half h;
  std::memcpy(&h.__x, &v, 2);
  return h;
}
inline __half __float2half(float f) { return __float2half_rn(f); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short b) { return __half{b}; }
