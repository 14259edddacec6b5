// A float32 8x8 transpose in registers, written with GCC/Clang vector extensions so
// it compiles to shuffles at every x86-64 level (and to SSE pairs in a portable
// build). Used by Winograd's input layout (winograd.cpp) and by the packing-free
// SGEMM's operand and output transposes (sgemm.cpp).
#pragma once
#include <cstdint>
#include <cstring>

namespace gradsleuth::cpu::fast {

// Eight floats as one GCC/Clang vector (AVX2 width; an AVX-512 build uses it too), and
// __builtin_shufflevector (GCC >= 12, Clang) for the register transposes.
typedef float Vec8 __attribute__((vector_size(32)));

// dst[j * ld + i] = src[i * ls + j] for i, j < 8: an 8x8 transpose in registers
// (unpack, then pairs of pairs, then 128-bit halves).
// Always inlined: a profile then charges it to its caller (the GEMM or Winograd).
__attribute__((always_inline)) inline void transpose8x8(const float* src, int64_t ls, float* dst, int64_t ld) {
  Vec8 r[8], t[8], u[8];
  // memcpy in place of helpers: a vector passed by value to or from a function would
  // change the ABI without AVX (GCC's -Wpsabi in a portable build).
  for (int i = 0; i < 8; ++i) std::memcpy(&r[i], src + i * ls, sizeof(Vec8));
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4)
    for (int k = 0; k < 2; ++k) {
      u[i + 2 * k] = __builtin_shufflevector(t[i + k], t[i + 2 + k], 0, 1, 8, 9, 4, 5, 12, 13);
      u[i + 2 * k + 1] = __builtin_shufflevector(t[i + k], t[i + 2 + k], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  // u[0..3]: rows 0-3 of columns (0,4), (1,5), (2,6), (3,7); u[4..7]: rows 4-7.
  for (int j = 0; j < 4; ++j) {
    const Vec8 lo = __builtin_shufflevector(u[j], u[4 + j], 0, 1, 2, 3, 8, 9, 10, 11);
    const Vec8 hi = __builtin_shufflevector(u[j], u[4 + j], 4, 5, 6, 7, 12, 13, 14, 15);
    std::memcpy(dst + j * ld, &lo, sizeof(Vec8));
    std::memcpy(dst + (j + 4) * ld, &hi, sizeof(Vec8));
  }
}

// dst[j * ld + i] = src[i * ls + j] for i < rows, j < cols: blocks of 8x8 in registers,
// the edges element by element.
inline void transpose(const float* src, int64_t ls, float* dst, int64_t ld, int64_t rows, int64_t cols) {
  const int64_t r8 = rows - rows % 8, c8 = cols - cols % 8;
  for (int64_t i = 0; i < r8; i += 8)
    for (int64_t j = 0; j < c8; j += 8) transpose8x8(src + i * ls + j, ls, dst + j * ld + i, ld);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = (i < r8 ? c8 : 0); j < cols; ++j) dst[j * ld + i] = src[i * ls + j];
}

}  // namespace gradsleuth::cpu::fast
