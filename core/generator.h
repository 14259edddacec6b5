// Random numbers that are reproducible from a seed, on every backend.
//
// We use Philox4x32-10, a counter-based generator (Salmon et al., SC'11): the
// n-th random number is a pure function philox(key = seed, counter = offset + n),
// so any thread — or CUDA thread — can compute its own element, and the same
// seed gives bit-identical tensors regardless of threading.
#pragma once
#include <math.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/host_device.h"

namespace gradsleuth {

struct Philox4x32 {
  // Returns four 32-bit random words for (key, counter).
  GS_HOST_DEVICE static void round4(uint64_t key, uint64_t counter, uint32_t out[4]) {
    uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
    for (int r = 0; r < 10; ++r) {
      uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
      uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
      uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
      uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
      c1 = static_cast<uint32_t>(p1);
      c3 = static_cast<uint32_t>(p0);
      c0 = n0;
      c2 = n2;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
  }
  // Element i of the stream (seed, offset): word i%4 of block offset + i/4.
  GS_HOST_DEVICE static uint32_t word(uint64_t seed, uint64_t offset, uint64_t i) {
    uint32_t r[4];
    round4(seed, offset + i / 4, r);
    return r[i % 4];
  }
  // Uniform in [0, 1) with 24 random bits (float) or 53 (double, from 2 words).
  GS_HOST_DEVICE static float uniform_float(uint32_t w) { return static_cast<float>(w >> 8) * (1.0f / 16777216.0f); }
  GS_HOST_DEVICE static double uniform_double(uint32_t a, uint32_t b) {
    uint64_t bits = (static_cast<uint64_t>(a) << 21) ^ static_cast<uint64_t>(b >> 11);
    return static_cast<double>(bits & ((1ULL << 53) - 1)) * (1.0 / 9007199254740992.0);
  }
};

// The samples of the backends' uniform and normal kernels, element for element the same on
// the CPU (core/cpu/random.cpp) and on CUDA (cuda/random.cu), so a seed gives one tensor on both.
namespace philox_sample {

// Elements 4*blk .. 4*blk+3 of o (n elements, contiguous), uniform in [lo, hi). float: element
// i is word i % 4 of block offset + i / 4; double: element i uses words 2i and 2i+1, from
// blocks offset + 2*blk and offset + 2*blk + 1; int64 floors, bool is u < 0.5.
template <class T>
GS_HOST_DEVICE inline void uniform_block(T* o, int64_t n, int64_t blk, double lo, double hi, uint64_t seed,
                                         uint64_t offset) {
  uint32_t r[4];
  if constexpr (std::is_same_v<T, double>) {
    uint32_t r2[4];
    Philox4x32::round4(seed, offset + 2 * blk, r);
    Philox4x32::round4(seed, offset + 2 * blk + 1, r2);
    const uint32_t w[8] = {r[0], r[1], r[2], r[3], r2[0], r2[1], r2[2], r2[3]};
    for (int j = 0; j < 4 && blk * 4 + j < n; ++j)
      o[blk * 4 + j] = lo + (hi - lo) * Philox4x32::uniform_double(w[2 * j], w[2 * j + 1]);
  } else {
    Philox4x32::round4(seed, offset + blk, r);
    for (int j = 0; j < 4 && blk * 4 + j < n; ++j) {
      const double u = Philox4x32::uniform_float(r[j]);
      if constexpr (std::is_same_v<T, bool>)
        o[blk * 4 + j] = u < 0.5;
      else if constexpr (std::is_integral_v<T>)
        o[blk * 4 + j] = static_cast<T>(::floor(lo + (hi - lo) * u));
      else
        o[blk * 4 + j] = static_cast<T>(lo + (hi - lo) * u);
    }
  }
}

// Box-Muller: elements 2j and 2j+1 of o (n elements, contiguous) from Philox block offset + j.
template <class T>
GS_HOST_DEVICE inline void normal_pair(T* o, int64_t n, int64_t j, double mean, double stdv, uint64_t seed,
                                       uint64_t offset) {
  uint32_t r[4];
  Philox4x32::round4(seed, offset + j, r);
  const double u1 = 1.0 - Philox4x32::uniform_double(r[0], r[1]);  // (0, 1]
  const double u2 = Philox4x32::uniform_double(r[2], r[3]);
  const double rad = ::sqrt(-2.0 * ::log(u1)), th = 2.0 * M_PI * u2;
  o[2 * j] = static_cast<T>(mean + stdv * rad * ::cos(th));
  if (2 * j + 1 < n) o[2 * j + 1] = static_cast<T>(mean + stdv * rad * ::sin(th));
}

}  // namespace philox_sample

// A stream of random numbers. Each sampling call consumes a block of counters,
// so consecutive calls give independent values and the sequence of calls is
// reproducible from the seed.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) { manual_seed(seed); }
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  // Reserves `n` 32-bit words and returns the first counter block to use.
  uint64_t reserve(uint64_t n_words) {
    uint64_t start = offset_;
    offset_ += (n_words + 3) / 4;
    return start;
  }
  uint32_t next_u32() { return Philox4x32::word(seed_, reserve(4), 0); }
  double next_double() {  // [0, 1)
    uint64_t b = reserve(4);
    uint32_t r[4];
    Philox4x32::round4(seed_, b, r);
    return Philox4x32::uniform_double(r[0], r[1]);
  }
  // Uniform integer in [0, n).
  uint64_t next_below(uint64_t n) {
    uint64_t b = reserve(4);
    uint32_t r[4];
    Philox4x32::round4(seed_, b, r);
    uint64_t x = (static_cast<uint64_t>(r[0]) << 32) | r[1];
    return n == 0 ? 0 : x % n;
  }

 private:
  uint64_t seed_ = 0;
  uint64_t offset_ = 0;
};

// The default generator used when a sampling function is given none. There is one
// per thread (thread_local): safe to use from several threads, and manual_seed(s)
// followed by model construction gives the same weights in any thread. A Generator
// object itself is not synchronised: share one between threads only with a lock.
Generator& default_generator();
// Seeds the calling thread's default generator (and so every rand/randn/dropout
// that uses it in this thread).
void manual_seed(uint64_t seed);

}  // namespace gradsleuth
