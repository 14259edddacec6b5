// CPU backend, float16 and bfloat16: a Backend in front of the CPU backend that runs every kernel
// given a 16-bit float operand in float32 (operands widened, results rounded back once), so
// the kernel files keep their four dtypes (docs/dtypes.md, "float16 and bfloat16").
#include <Eigen/Core>
#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#include <algorithm>
#include <array>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/cpu/bf16_round.h"
#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/fast.h"
#include "core/cpu/fast/transpose.h"

namespace gradsleuth {

// The scalar conversions of core/dtype.h, here with the loops that share Eigen's types (so no
// other file of the engine parses <Eigen/Core> for them).
Half::Half(float f) : bits(Eigen::numext::bit_cast<uint16_t>(Eigen::half(f))) {}
BFloat16::BFloat16(float f) : bits(Eigen::numext::bit_cast<uint16_t>(Eigen::bfloat16(f))) {}
float to_float(Half h) { return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(h.bits)); }
float to_float(BFloat16 h) { return static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(h.bits)); }

namespace cpu {

namespace {

bool reduced(const Tensor& t) { return t.defined() && is_reduced_float(t.dtype()); }

// The C++ type Eigen converts with: round to nearest even, overflow to inf, subnormals kept.
template <class F>
void with_eigen_type(DType t, F&& f) {
  if (t == kFloat16)
    f(Eigen::half{});
  else
    f(Eigen::bfloat16{});
}

// Contiguous rows. float16 through the CPU's F16C instructions where the build has them (Eigen's
// scalar conversion is a software routine there), 8 values at a time, round to nearest even;
// bfloat16 widened by AVX2's 16-bit shift (exact); the rest through Eigen's vectorised cast.
template <class H>
void widen_row(float* out, const H* in, int64_t n) {
  int64_t k = 0;
#ifdef __AVX512F__  // the same conversions, 16 values at a time
  if constexpr (std::is_same_v<H, Eigen::half>)
    for (; k + 16 <= n; k += 16)
      _mm512_storeu_ps(out + k, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + k))));
  if constexpr (std::is_same_v<H, Eigen::bfloat16>)
    for (; k + 16 <= n; k += 16) {
      const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + k)));
      _mm512_storeu_ps(out + k, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
#endif
#ifdef __F16C__
  if constexpr (std::is_same_v<H, Eigen::half>)
    for (; k + 8 <= n; k += 8)
      _mm256_storeu_ps(out + k, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + k))));
#endif
#ifdef __AVX2__
  if constexpr (std::is_same_v<H, Eigen::bfloat16>)  // exact: a bfloat16 is a float32's upper 16 bits
    for (; k + 8 <= n; k += 8) {
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + k)));
      _mm256_storeu_ps(out + k, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
#endif
  Eigen::Map<Eigen::ArrayXf>(out + k, n - k) =
      Eigen::Map<const Eigen::Array<H, Eigen::Dynamic, 1>>(in + k, n - k).template cast<float>();
}
template <class H>
void narrow_row(H* out, const float* in, int64_t n) {
  int64_t k = 0;
#ifdef __AVX512F__  // the same roundings as below, 16 values at a time
  if constexpr (std::is_same_v<H, Eigen::half>)
    for (; k + 16 <= n; k += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k),
                          _mm512_cvtps_ph(_mm512_loadu_ps(in + k), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  if constexpr (std::is_same_v<H, Eigen::bfloat16>) {
    const auto sixteen = [&](int64_t at) {
      const __m512i r = bf16_round_bits(_mm512_castps_si512(_mm512_loadu_ps(in + at)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + at), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
    };
#ifdef __AVX512BF16__
    // The CPU's conversion rounds to nearest even and overflows to inf too, in one instruction
    // for 32 values (a 256 x 784 weight: 13.0 us against 20.5 with the formula on Zen 4), but it
    // flushes subnormal inputs to zero and keeps a NaN's payload: 32 values holding either take
    // the formula instead.
    for (; k + 32 <= n; k += 32) {
      const __m512 lo = _mm512_loadu_ps(in + k), hi = _mm512_loadu_ps(in + k + 16);
      constexpr int kNanOrSubnormal = 0x01 | 0x20 | 0x80;  // quiet NaN, subnormal, signalling NaN
      if ((_mm512_fpclass_ps_mask(lo, kNanOrSubnormal) | _mm512_fpclass_ps_mask(hi, kNanOrSubnormal)) != 0) {
        sixteen(k);
        sixteen(k + 16);
        continue;
      }
      _mm512_storeu_si512(out + k, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
#elif defined(__AVX512BW__)
    // 32 values: the upper halves of both vectors' rounded lanes gathered by one word permutation
    // (no shift, mask or narrowing moves): a third fewer vector instructions.
    const __m512i uppers = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                                            25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    for (; k + 32 <= n; k += 32) {
      const __m512i lo = bf16_round_bits_upper(_mm512_castps_si512(_mm512_loadu_ps(in + k)));
      const __m512i hi = bf16_round_bits_upper(_mm512_castps_si512(_mm512_loadu_ps(in + k + 16)));
      _mm512_storeu_si512(out + k, _mm512_permutex2var_epi16(lo, uppers, hi));
    }
#endif
    for (; k + 16 <= n; k += 16) sixteen(k);
  }
#endif
#ifdef __F16C__
  if constexpr (std::is_same_v<H, Eigen::half>)
    for (; k + 8 <= n; k += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k),
                       _mm256_cvtps_ph(_mm256_loadu_ps(in + k), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
#ifdef __AVX2__
  // bfloat16: bf16_round.h's rounding, the upper 16 bits kept.
  if constexpr (std::is_same_v<H, Eigen::bfloat16>) {
    for (; k + 8 <= n; k += 8) {
      const __m256i r = _mm256_srli_epi32(bf16_round_bits(_mm256_castps_si256(_mm256_loadu_ps(in + k))), 16);
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);  // qwords 0, 2
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k), _mm256_castsi256_si128(packed));
    }
  }
#endif
  Eigen::Map<Eigen::Array<H, Eigen::Dynamic, 1>>(out + k, n - k) =
      Eigen::Map<const Eigen::ArrayXf>(in + k, n - k).template cast<H>();
}

// p[k] = float(H(p[k])) for k < n: each value rounded to the 16-bit format and widened back in
// registers, 8 at a time, with narrow_row's roundings (so the bits of narrow_row then widen_row);
// the rest through a 16-bit buffer and those two.
template <class H>
void round_through_row(float* p, int64_t n) {
  int64_t k = 0;
#ifdef __F16C__
  if constexpr (std::is_same_v<H, Eigen::half>)
    for (; k + 8 <= n; k += 8)
      _mm256_storeu_ps(p + k, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(p + k),
                                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
#endif
#ifdef __AVX2__
  if constexpr (std::is_same_v<H, Eigen::bfloat16>)  // narrow_row's rounding, the low 16 bits cleared
    for (; k + 8 <= n; k += 8)
      _mm256_storeu_ps(p + k, _mm256_castsi256_ps(bf16_round_bits(_mm256_castps_si256(_mm256_loadu_ps(p + k)))));
#endif
  H buf[256];
  for (; k < n; k += 256) {
    const int64_t m = std::min<int64_t>(256, n - k);
    narrow_row(buf, p + k, m);
    widen_row(p + k, buf, m);
  }
}

// out[i * ldo + j] = in[j * ldi + i] for i < rows, j < cols: 8 x 8 blocks, each widened by rows of
// `in` and transposed in registers; the edges value by value.
template <class H>
void widen_transposed(float* out, int64_t ldo, const H* in, int64_t ldi, int64_t rows, int64_t cols) {
  const int64_t r8 = rows - rows % 8, c8 = cols - cols % 8;
  alignas(32) float buf[64];
  for (int64_t i = 0; i < r8; i += 8)
    for (int64_t j = 0; j < c8; j += 8) {
      for (int64_t q = 0; q < 8; ++q) widen_row(buf + q * 8, in + (j + q) * ldi + i, 8);
      fast::transpose8x8(buf, 8, out + i * ldo + j, ldo);
    }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = (i < r8 ? c8 : 0); j < cols; ++j) out[i * ldo + j] = static_cast<float>(in[j * ldi + i]);
}

// out (float32) <- in (16-bit float), both of one shape and any strides.
void widen(const Tensor& out, const Tensor& in) {
  with_eigen_type(in.dtype(), [&](auto tag) {
    using H = decltype(tag);
    // A transposed matrix into a row-major one (a gradient's transpose in a product's backward).
    if (out.dim() == 2 && in.size(0) >= 8 && in.size(1) >= 8 && out.stride(1) == 1 && out.stride(0) >= out.size(1) &&
        in.stride(0) == 1 && in.stride(1) >= in.size(0)) {
      widen_transposed(static_cast<float*>(out.raw_data()), out.stride(0), static_cast<const H*>(in.raw_data()),
                       in.stride(1), out.size(0), out.size(1));
      return;
    }
    for_each_row<2>(out.shape(), {&out, &in}, [](char** p, int64_t n, const int64_t* st) {
      if (st[0] == sizeof(float) && st[1] == sizeof(H)) {  // a contiguous row: Eigen's vectorised cast
        widen_row(reinterpret_cast<float*>(p[0]), reinterpret_cast<const H*>(p[1]), n);
        return;
      }
      for (int64_t k = 0; k < n; ++k) *at<float>(p[0], k, st[0]) = static_cast<float>(*at<H>(p[1], k, st[1]));
    });
  });
}

// out (16-bit float) <- in (float32), rounding each value once.
void narrow(const Tensor& out, const Tensor& in) {
  with_eigen_type(out.dtype(), [&](auto tag) {
    using H = decltype(tag);
    for_each_row<2>(out.shape(), {&out, &in}, [](char** p, int64_t n, const int64_t* st) {
      if (st[0] == sizeof(H) && st[1] == sizeof(float)) {  // a contiguous row: Eigen's vectorised cast
        narrow_row(reinterpret_cast<H*>(p[0]), reinterpret_cast<const float*>(p[1]), n);
        return;
      }
      if (st[0] == sizeof(H)) {  // a strided float32 row into a contiguous one: gathered, then rounded
        float buf[256];
        for (int64_t k0 = 0; k0 < n; k0 += 256) {
          const int64_t m = std::min<int64_t>(256, n - k0);
          for (int64_t k = 0; k < m; ++k) buf[k] = *at<float>(p[1], k0 + k, st[1]);
          narrow_row(reinterpret_cast<H*>(p[0]) + k0, buf, m);
        }
        return;
      }
      for (int64_t k = 0; k < n; ++k) *at<H>(p[0], k, st[0]) = H(*at<float>(p[1], k, st[1]));
    });
  });
}

// A float32 copy of a 16-bit operand; any other tensor (undefined included) as it is.
// A tensor whose dims, reordered by falling stride, are contiguous (a transposed weight) is widened
// in its memory order, and the copy keeps its strides: the kernel reads it as it would the original.
Tensor up(const Tensor& t) {
  if (!reduced(t)) return t;
  const int64_t nd = t.dim();
  // Broadcast dims (stride 0, a scalar expanded to a shape): the distinct values widened, the
  // copy expanded the same way.
  bool expanded = false;
  for (int64_t i = 0; i < nd; ++i) expanded |= t.strides()[i] == 0 && t.shape()[i] > 1;
  if (expanded) {
    Shape cs = t.shape();
    for (int64_t i = 0; i < nd; ++i)
      if (t.strides()[i] == 0) cs[i] = 1;
    const Tensor f = up(detail::make_alias(t, cs, t.strides(), t.offset()));
    Strides st = f.strides();
    for (int64_t i = 0; i < nd; ++i)
      if (t.strides()[i] == 0) st[i] = 0;
    return detail::make_alias(f, t.shape(), st, f.offset());
  }
  if (!t.is_contiguous() && nd >= 2) {
    Dims order;
    const Tensor p = detail::memory_order_alias(t, order);
    if (p.is_contiguous()) {
      Tensor f = empty(p.shape(), kFloat32);
      widen(f, p);
      Strides st(nd, 0);
      for (int64_t i = 0; i < nd; ++i) st[order[i]] = f.strides()[i];
      return detail::make_alias(f, t.shape(), st, 0);
    }
  }
  Tensor f = empty(t.shape(), kFloat32);
  widen(f, t);
  return f;
}

// Where a kernel writes a 16-bit result: a float32 buffer (holding the old values when the
// kernel accumulates into them), rounded into the real output by done().
struct Result {
  Tensor out, f32;
  Result(const Tensor& o, bool accumulates) : out(o), f32(o) {
    if (!reduced(o)) return;
    f32 = empty(o.shape(), kFloat32);
    if (accumulates) widen(f32, o);
  }
  void done() const {
    if (reduced(out)) narrow(out, f32);
  }
};

template <class... T>
bool any_reduced(const T&... t) {
  return (reduced(t) || ...);
}

// ---- elementwise kernels block by block ----------------------------------------------------
// An elementwise kernel (or an optimizer's fused step) run on blocks of about kBlockValues values:
// each block of a 16-bit operand widened into a float32 scratch block, the float32 kernel run on
// the blocks, the 16-bit results rounded back. Each output value depends only on the inputs at its
// own position, so the values are those of widening the whole tensors, while the float32 copies
// (a few blocks) stay in the cache instead of going out to memory and back.
constexpr int64_t kBlockValues = 8192;

// One operand: `read` widens each 16-bit block before the kernel, `write` rounds it back after.
struct BlockArg {
  Tensor t;  // undefined: passed on undefined
  bool read = true, write = false;
};

// Runs kernel(blocks) (blocks: the operands' blocks, in order; returns false when the float32
// kernel declines) block by block. Returns false, having written nothing, when an operand does
// not suit (not of `shape`, or a 16-bit operand neither contiguous nor, read only, broadcast
// along dim 0) or the kernel declines the first block.
template <size_t N, class K>
bool run_blocked(const Shape& shape, std::array<BlockArg, N> args, K&& kernel) {
  const int64_t numel = numel_of(shape);
  if (shape.empty() || numel == 0) return false;
  bool all_contiguous = true;
  for (const BlockArg& a : args) {
    if (!a.t.defined()) continue;
    if (a.t.shape() != shape) return false;
    all_contiguous &= a.t.is_contiguous();
  }
  // Every operand dense: blocks of the flat values. Else blocks of rows (dim 0).
  Shape sh = shape;
  if (all_contiguous) {
    sh = {numel};
    for (BlockArg& a : args)
      if (a.t.defined()) a.t = detail::make_alias(a.t, sh, {1}, a.t.offset());
  }
  const int64_t rows = sh[0], inner = numel / rows;
  const int64_t step = std::max<int64_t>(1, kBlockValues / inner);
  std::array<bool, N> scratch{};
  int64_t slots = 0;
  for (size_t i = 0; i < N; ++i) {
    BlockArg& a = args[i];
    if (!reduced(a.t)) continue;
    const bool dense_rows = all_contiguous || a.t.is_contiguous();
    if (dense_rows) {
      scratch[i] = true;
      ++slots;
    } else if (!a.write && a.t.stride(0) == 0) {
      a.t = up(a.t);  // the same row for every block: widened once
    } else {
      return false;
    }
  }
  const int64_t block = step * inner;
  const Tensor buf = slots > 0 ? empty({slots * block}, kFloat32) : Tensor();
  std::array<Tensor, N> blocks;
  for (int64_t r0 = 0; r0 < rows; r0 += step) {
    const int64_t nr = std::min(step, rows - r0), n = nr * inner;
    Shape bs = sh;
    bs[0] = nr;
    int64_t slot = 0;
    for (size_t i = 0; i < N; ++i) {
      const Tensor& t = args[i].t;
      if (!t.defined()) {
        blocks[i] = Tensor();
      } else if (scratch[i]) {
        blocks[i] = detail::make_alias(buf, bs, contiguous_strides(bs), slot++ * block);
        if (args[i].read)
          with_eigen_type(t.dtype(), [&](auto tag) {
            using H = decltype(tag);
            widen_row(static_cast<float*>(blocks[i].raw_data()), static_cast<const H*>(t.raw_data()) + r0 * inner, n);
          });
      } else {
        blocks[i] = detail::make_alias(t, bs, t.strides(), t.offset() + r0 * t.stride(0));
      }
    }
    if (!kernel(blocks)) {
      GS_CHECK(r0 == 0, "reduced float", "internal error: a kernel declined a block after accepting the first");
      return false;
    }
    for (size_t i = 0; i < N; ++i)
      if (scratch[i] && args[i].write)
        with_eigen_type(args[i].t.dtype(), [&](auto tag) {
          using H = decltype(tag);
          narrow_row(static_cast<H*>(args[i].t.raw_data()) + r0 * inner,
                     static_cast<const float*>(blocks[i].raw_data()), n);
        });
  }
  return true;
}

// A pooling kernel (each sample's planes from that sample's alone) run on blocks of samples, as
// run_blocked does for elementwise ops: `kernel(ins, outs, n)` on float32 blocks of n samples (the
// 16-bit inputs widened, the 16-bit outputs rounded back after) and on the other tensors' (argmax)
// samples in place. False, having done nothing, unless every tensor is contiguous with dim 0 the batch.
template <class K>
bool run_sample_blocks(std::initializer_list<Tensor> ins, std::initializer_list<Tensor> outs, K&& kernel) {
  const std::vector<Tensor> all_ins(ins), all_outs(outs);
  int64_t N = -1, per_block_values = 0;
  for (const std::vector<Tensor>* v : {&all_ins, &all_outs})
    for (const Tensor& t : *v) {
      if (!t.defined() || t.dim() < 1 || !t.is_contiguous()) return false;
      if (N < 0) N = t.size(0);
      if (t.size(0) != N) return false;
      if (reduced(t)) per_block_values += t.numel() / std::max<int64_t>(N, 1);
    }
  if (N <= 0) return false;
  const int64_t step = std::max<int64_t>(1, 4 * kBlockValues / std::max<int64_t>(per_block_values, 1));
  const Tensor buf = empty({per_block_values * std::min(step, N)}, kFloat32);
  const auto block_of = [&](const Tensor& t, int64_t n0, int64_t nb, int64_t& slot, bool widen_it) {
    Shape bs = t.shape();
    bs[0] = nb;
    const int64_t per = t.numel() / N;
    if (!reduced(t)) return detail::make_alias(t, bs, contiguous_strides(bs), t.offset() + n0 * per);
    const Tensor b = detail::make_alias(buf, bs, contiguous_strides(bs), slot);
    slot += per * nb;
    if (widen_it)
      with_eigen_type(t.dtype(), [&](auto tag) {
        using H = decltype(tag);
        widen_row(static_cast<float*>(b.raw_data()), static_cast<const H*>(t.raw_data()) + n0 * per, per * nb);
      });
    return b;
  };
  for (int64_t n0 = 0; n0 < N; n0 += step) {
    const int64_t nb = std::min(step, N - n0);
    int64_t slot = 0;
    std::vector<Tensor> bi, bo;
    for (const Tensor& t : all_ins) bi.push_back(block_of(t, n0, nb, slot, true));
    for (const Tensor& t : all_outs) bo.push_back(block_of(t, n0, nb, slot, false));
    kernel(bi, bo, nb);
    for (size_t i = 0; i < all_outs.size(); ++i)
      if (reduced(all_outs[i]))
        with_eigen_type(all_outs[i].dtype(), [&](auto tag) {
          using H = decltype(tag);
          narrow_row(static_cast<H*>(all_outs[i].raw_data()) + n0 * (all_outs[i].numel() / N),
                     static_cast<const float*>(bo[i].raw_data()), bo[i].numel());
        });
  }
  return true;
}

// relu and its backward on 16-bit values as stored, with the bits of widening, the float32 kernel
// (y = x <= 0 ? 0 : x; grad_in = x <= 0 ? 0 : grad) and rounding back. A value that is not NaN
// round-trips exactly, and x <= 0 is its bits read as a signed 16-bit integer <= 0 (the sign bit, or
// +0), so a chunk without NaN is integer selects; a chunk holding a NaN (whose rounding quietens it)
// takes the widening path. relu is the activation of most models: its 16-bit passes through float32
// took a third of the widening and rounding time of a bfloat16 CNN's training step.
constexpr int64_t kChunk16 = 64;
template <class H>
constexpr unsigned kInf16 = std::is_same_v<H, Eigen::half> ? 0x7C00u : 0x7F80u;
template <class H>
bool has_nan16(const uint16_t* v, int64_t m) {
  bool nan = false;
  for (int64_t i = 0; i < m; ++i) nan |= (v[i] & 0x7FFFu) > kInf16<H>;
  return nan;
}
// The widening path for one chunk: g = nullptr for relu, else relu's backward with gradient g.
template <class H>
void relu_chunk_widened(uint16_t* o, const uint16_t* g, const uint16_t* x, int64_t m) {
  float gb[kChunk16], xb[kChunk16];
  widen_row(xb, reinterpret_cast<const H*>(x), m);
  if (g) widen_row(gb, reinterpret_cast<const H*>(g), m);
  for (int64_t i = 0; i < m; ++i) gb[i] = xb[i] <= 0.0f ? 0.0f : (g ? gb[i] : xb[i]);
  narrow_row(reinterpret_cast<H*>(o), gb, m);
}
// o = x <= 0 ? 0 : (g ? g : x) over n values.
template <class H>
void relu_rows16(uint16_t* o, const uint16_t* g, const uint16_t* x, int64_t n) {
  int64_t k = 0;
#ifdef __AVX512BW__
  const __m512i mag = _mm512_set1_epi16(0x7FFF), inf = _mm512_set1_epi16(static_cast<short>(kInf16<H>)),
                zero = _mm512_setzero_si512();
  const auto nan_in = [&](__m512i v) { return _mm512_cmpgt_epu16_mask(_mm512_and_si512(v, mag), inf) != 0; };
  for (; k < n; k += 32) {
    const int64_t m = std::min<int64_t>(32, n - k);
    const __mmask32 in = m == 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << m) - 1);
    const __m512i xv = _mm512_maskz_loadu_epi16(in, x + k), gv = g ? _mm512_maskz_loadu_epi16(in, g + k) : xv;
    if (nan_in(xv) || (g && nan_in(gv))) {
      relu_chunk_widened<H>(o + k, g ? g + k : nullptr, x + k, m);
      continue;
    }
    const __mmask32 nonpositive = _mm512_cmple_epi16_mask(xv, zero);  // the bits as a signed integer
    _mm512_mask_storeu_epi16(o + k, in, _mm512_mask_blend_epi16(nonpositive, gv, zero));
  }
#endif
  for (; k < n; k += kChunk16) {
    const int64_t m = std::min(kChunk16, n - k);
    if (has_nan16<H>(x + k, m) || (g && has_nan16<H>(g + k, m))) {
      relu_chunk_widened<H>(o + k, g ? g + k : nullptr, x + k, m);
      continue;
    }
    for (int64_t i = 0; i < m; ++i)
      o[k + i] = static_cast<int16_t>(x[k + i]) <= 0 ? uint16_t{0} : (g ? g[k + i] : x[k + i]);
  }
}
// Whether relu (or its backward) can run on the 16-bit values as stored: every tensor contiguous, of
// one 16-bit dtype and one shape.
bool relu16_applies(std::initializer_list<const Tensor*> ts) {
  const Tensor& first = **ts.begin();
  for (const Tensor* t : ts)
    if (!reduced(*t) || t->dtype() != first.dtype() || t->shape() != first.shape() || !t->is_contiguous()) return false;
  return true;
}

// The unary ops whose float32 kernel gives every position the same formula (no packet
// approximation with a scalar fix-up for some positions): safe to run block by block.
bool blockwise_unary(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg:
    case UnaryOp::Abs:
    case UnaryOp::Sign:
    case UnaryOp::Relu:
    case UnaryOp::Square:
    case UnaryOp::LogicalNot:
    case UnaryOp::IsNan:
    case UnaryOp::IsInf:
    case UnaryOp::IsFinite: return true;
    default: return false;
  }
}

class ReducedFloatBackend final : public Backend {
 public:
  explicit ReducedFloatBackend(Backend& inner) : b_(inner) {}
  DeviceType type() const override { return b_.type(); }
  const char* name() const override { return b_.name(); }

  void* allocate(size_t n) override { return b_.allocate(n); }
  void deallocate(void* p, size_t n) override { b_.deallocate(p, n); }
  void copy_to_host(void* dst, const void* src, size_t n) override { b_.copy_to_host(dst, src, n); }
  void copy_from_host(void* dst, const void* src, size_t n) override { b_.copy_from_host(dst, src, n); }
  void synchronize() override { b_.synchronize(); }
  std::string memory_summary() const override { return b_.memory_summary(); }

  void copy(const Tensor& out, const Tensor& in) override {
    if (!any_reduced(out, in)) return b_.copy(out, in);
    if (out.dtype() == in.dtype()) {  // the 16 bits as they are
      for_each_row<2>(out.shape(), {&out, &in}, [](char** p, int64_t n, const int64_t* st) {
        for (int64_t k = 0; k < n; ++k) *at<uint16_t>(p[0], k, st[0]) = *at<uint16_t>(p[1], k, st[1]);
      });
      return;
    }
    // Through float32, which holds every float16 and bfloat16 value: one rounding into a
    // 16-bit float from float32, bool and float16/bfloat16; two (through float32) from float64
    // and int64, as PyTorch's conversions do.
    if (out.dtype() == kFloat32 && reduced(in)) return widen(out, in);
    Tensor mid = in;
    if (in.dtype() != kFloat32) {
      mid = empty(in.shape(), kFloat32);
      if (reduced(in))
        widen(mid, in);
      else
        b_.copy(mid, in);
    }
    if (reduced(out))
      narrow(out, mid);
    else
      b_.copy(out, mid);
  }
  void fill(const Tensor& out, double value) override {
    if (!reduced(out)) return b_.fill(out, value);
    with_eigen_type(out.dtype(), [&](auto tag) {
      using H = decltype(tag);
      const H v(static_cast<float>(value));
      for_each_row<1>(out.shape(), {&out}, [&](char** p, int64_t n, const int64_t* st) {
        for (int64_t k = 0; k < n; ++k) *at<H>(p[0], k, st[0]) = v;
      });
    });
  }
  void arange(const Tensor& out, double start, double step) override {
    if (!reduced(out)) return b_.arange(out, start, step);
    Result r(out, false);
    b_.arange(r.f32, start, step);
    r.done();
  }

  void unary(UnaryOp op, const Tensor& out, const Tensor& in) override {
    if (!any_reduced(out, in)) return b_.unary(op, out, in);
    if (op == UnaryOp::Relu && relu16_applies({&out, &in})) {
      with_eigen_type(out.dtype(), [&](auto tag) {
        relu_rows16<decltype(tag)>(static_cast<uint16_t*>(out.raw_data()), nullptr,
                                   static_cast<const uint16_t*>(in.raw_data()), out.numel());
      });
      return;
    }
    if (blockwise_unary(op) &&
        run_blocked<2>(out.shape(), {BlockArg{out, false, true}, BlockArg{in}}, [&](std::array<Tensor, 2>& t) {
          b_.unary(op, t[0], t[1]);
          return true;
        }))
      return;
    Result r(out, false);
    b_.unary(op, r.f32, up(in));
    r.done();
  }
  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override {
    if (!any_reduced(out, a, b)) return b_.binary(op, out, a, b);
    if (op != BinaryOp::Pow && run_blocked<3>(out.shape(), {BlockArg{out, false, true}, BlockArg{a}, BlockArg{b}},
                                              [&](std::array<Tensor, 3>& t) {
                                                b_.binary(op, t[0], t[1], t[2]);
                                                return true;
                                              }))
      return;
    Result r(out, false);
    b_.binary(op, r.f32, up(a), up(b));
    r.done();
  }
  void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override {
    if (!any_reduced(out, a, b)) return b_.where(out, cond, a, b);
    if (run_blocked<4>(out.shape(), {BlockArg{out, false, true}, BlockArg{cond}, BlockArg{a}, BlockArg{b}},
                       [&](std::array<Tensor, 4>& t) {
                         b_.where(t[0], t[1], t[2], t[3]);
                         return true;
                       }))
      return;
    Result r(out, false);
    b_.where(r.f32, cond, up(a), up(b));
    r.done();
  }
  void clamp(const Tensor& out, const Tensor& in, double lo, double hi) override {
    if (!any_reduced(out, in)) return b_.clamp(out, in, lo, hi);
    if (run_blocked<2>(out.shape(), {BlockArg{out, false, true}, BlockArg{in}}, [&](std::array<Tensor, 2>& t) {
          b_.clamp(t[0], t[1], lo, hi);
          return true;
        }))
      return;
    Result r(out, false);
    b_.clamp(r.f32, up(in), lo, hi);
    r.done();
  }
  void threshold_backward(const Tensor& out, const Tensor& grad, const Tensor& x, double threshold) override {
    if (!any_reduced(out, grad, x)) return b_.threshold_backward(out, grad, x, threshold);
    if (threshold == 0.0 && relu16_applies({&out, &grad, &x})) {
      with_eigen_type(out.dtype(), [&](auto tag) {
        relu_rows16<decltype(tag)>(static_cast<uint16_t*>(out.raw_data()),
                                   static_cast<const uint16_t*>(grad.raw_data()),
                                   static_cast<const uint16_t*>(x.raw_data()), out.numel());
      });
      return;
    }
    if (run_blocked<3>(out.shape(), {BlockArg{out, false, true}, BlockArg{grad}, BlockArg{x}},
                       [&](std::array<Tensor, 3>& t) {
                         b_.threshold_backward(t[0], t[1], t[2], threshold);
                         return true;
                       }))
      return;
    Result r(out, false);
    b_.threshold_backward(r.f32, up(grad), up(x), threshold);
    r.done();
  }

  // Sums accumulate in float32 (the float32 kernel's accurate sum) and round once.
  void reduce(ReduceOp op, const Tensor& out, const Tensor& in, const bool* dims) override {
    if (!any_reduced(out, in)) return b_.reduce(op, out, in, dims);
    Result r(out, false);
    b_.reduce(op, r.f32, up(in), dims);
    r.done();
  }
  void arg_reduce(bool is_max, const Tensor& out, const Tensor& in, int64_t dim) override {
    if (!reduced(in)) return b_.arg_reduce(is_max, out, in, dim);
    b_.arg_reduce(is_max, out, up(in), dim);
  }
  // The row's max, exp and sum in float32: logits thousands apart neither overflow nor
  // lose the row's small terms.
  void softmax_lastdim(const Tensor& out, const Tensor& in, bool log) override {
    if (!any_reduced(out, in)) return b_.softmax_lastdim(out, in, log);
    Result r(out, false);
    b_.softmax_lastdim(r.f32, up(in), log);
    r.done();
  }

  // Products and their sums in float32, each result rounded once.
  void bmm(const Tensor& out, const Tensor& a, const Tensor& b) override {
    if (!any_reduced(out, a, b)) return b_.bmm(out, a, b);
    Result r(out, false);
    // The packing-free SGEMM widens 16-bit operands as it reads them; elsewhere, widened copies.
    if (!(cpu_fast_kernels() && fast::bmm_mixed(r.f32, a, b))) b_.bmm(r.f32, up(a), up(b));
    r.done();
  }

  void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) override {
    if (!any_reduced(out, in)) return b_.gather(out, in, dim, index);
    Result r(out, false);
    b_.gather(r.f32, up(in), dim, index);
    r.done();
  }
  void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override {
    if (!any_reduced(out, src)) return b_.scatter_add(out, dim, index, src);
    Result r(out, true);
    b_.scatter_add(r.f32, dim, index, up(src));
    r.done();
  }
  void index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) override {
    if (!any_reduced(out, in)) return b_.index_select(out, in, dim, index);
    Result r(out, false);
    b_.index_select(r.f32, up(in), dim, index);
    r.done();
  }
  void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override {
    if (!any_reduced(out, src)) return b_.index_add(out, dim, index, src);
    Result r(out, true);
    b_.index_add(r.f32, dim, index, up(src));
    r.done();
  }

  void im2col(const Tensor& cols, const Tensor& in, const Conv2dGeometry& g) override {
    if (!any_reduced(cols, in)) return b_.im2col(cols, in, g);
    Result r(cols, false);
    b_.im2col(r.f32, up(in), g);
    r.done();
  }
  void col2im(const Tensor& out, const Tensor& cols, const Conv2dGeometry& g) override {
    if (!any_reduced(out, cols)) return b_.col2im(out, cols, g);
    Result r(out, true);
    b_.col2im(r.f32, up(cols), g);
    r.done();
  }
  void max_pool2d(const Tensor& out, const Tensor& argmax, const Tensor& in, const Conv2dGeometry& g) override {
    if (!any_reduced(out, in)) return b_.max_pool2d(out, argmax, in, g);
    if (run_sample_blocks({in}, {out, argmax}, [&](std::vector<Tensor>& i, std::vector<Tensor>& o, int64_t n) {
          Conv2dGeometry gb = g;
          gb.N = n;
          b_.max_pool2d(o[0], o[1], i[0], gb);
        }))
      return;
    Result r(out, false);
    b_.max_pool2d(r.f32, argmax, up(in), g);
    r.done();
  }
  void max_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& argmax,
                           const Conv2dGeometry& g) override {
    if (!any_reduced(grad_in, grad_out)) return b_.max_pool2d_backward(grad_in, grad_out, argmax, g);
    if (run_sample_blocks({grad_out, argmax}, {grad_in},
                          [&](std::vector<Tensor>& i, std::vector<Tensor>& o, int64_t n) {
                            Conv2dGeometry gb = g;
                            gb.N = n;
                            b_.max_pool2d_backward(o[0], i[0], i[1], gb);
                          }))
      return;
    Result r(grad_in, false);
    b_.max_pool2d_backward(r.f32, up(grad_out), argmax, g);
    r.done();
  }
  void avg_pool2d(const Tensor& out, const Tensor& in, const Conv2dGeometry& g) override {
    if (!any_reduced(out, in)) return b_.avg_pool2d(out, in, g);
    Result r(out, false);
    b_.avg_pool2d(r.f32, up(in), g);
    r.done();
  }
  void avg_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Conv2dGeometry& g) override {
    if (!any_reduced(grad_in, grad_out)) return b_.avg_pool2d_backward(grad_in, grad_out, g);
    Result r(grad_in, true);  // the kernel adds into grad_in
    b_.avg_pool2d_backward(r.f32, up(grad_out), g);
    r.done();
  }

  bool conv2d_fused_supported(const Conv2dGeometry& g, int64_t O, DType dt) const override {
    return b_.conv2d_fused_supported(g, O, is_reduced_float(dt) ? kFloat32 : dt);
  }
  bool conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                      const Conv2dGeometry& g) override {
    if (!any_reduced(out, x, w, bias)) return b_.conv2d_forward(out, x, w, bias, g);
    Result r(out, false);
    if (!b_.conv2d_forward(r.f32, up(x), up(w), up(bias), g)) return false;
    r.done();
    return true;
  }
  bool conv2d_backward(const Tensor& grad_x, const Tensor& grad_w, const Tensor& grad_b, const Tensor& grad_out,
                       const Tensor& x, const Tensor& w, const Conv2dGeometry& g) override {
    if (!any_reduced(grad_x, grad_w, grad_b, grad_out, x, w))
      return b_.conv2d_backward(grad_x, grad_w, grad_b, grad_out, x, w, g);
    Result rx(grad_x, false), rw(grad_w, false), rb(grad_b, false);
    if (!b_.conv2d_backward(rx.f32, rw.f32, rb.f32, up(grad_out), up(x), up(w), g)) return false;
    rx.done();
    rw.done();
    rb.done();
    return true;
  }

  // Drawn in float32 (the same stream as a float32 tensor) and rounded; a value that rounds
  // up to `hi` is moved to the 16-bit float just below it, so the range stays [lo, hi).
  void uniform(const Tensor& out, double lo, double hi, uint64_t seed, uint64_t offset) override {
    if (!reduced(out)) return b_.uniform(out, lo, hi, seed, offset);
    Result r(out, false);
    b_.uniform(r.f32, lo, hi, seed, offset);
    r.done();
    with_eigen_type(out.dtype(), [&](auto tag) {
      using H = decltype(tag);
      H* p = static_cast<H*>(out.raw_data());  // freshly allocated: contiguous
      for (int64_t k = 0; k < out.numel(); ++k) {
        if (!(static_cast<double>(static_cast<float>(p[k])) >= hi)) continue;
        const auto bits = Eigen::numext::bit_cast<uint16_t>(p[k]);
        // Sign and magnitude: one step towards -inf is bits - 1 above zero, bits + 1 below.
        p[k] = Eigen::numext::bit_cast<H>(static_cast<uint16_t>(hi > 0 ? bits - 1 : bits + 1));
      }
    });
  }
  void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) override {
    if (!reduced(out)) return b_.normal(out, mean, std, seed, offset);
    Result r(out, false);
    b_.normal(r.f32, mean, std, seed, offset);
    r.done();
  }

  // The fused steps in float32; every tensor the step updates is rounded back. A float32 p (a
  // master weight with its 16-bit parameter's gradient) is updated in place, block by block, and
  // a RoundedCopy of it (core/optim_step.h) follows its blocks; for a 16-bit p there is none.
  template <class Step>
  static Step for_block(const Step& s, const Tensor& p, const Tensor& block) {
    Step b = s;
    if (b.copy.data != nullptr && p.dtype() == kFloat32 && p.is_contiguous() && block.defined() &&
        block.storage() == p.storage())
      b.copy.data = static_cast<uint16_t*>(b.copy.data) + (block.offset() - p.offset());
    else
      b.copy = RoundedCopy{};
    return b;
  }
  bool sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStep& s) override {
    if (!any_reduced(p, g, buf)) return b_.sgd_step(p, g, buf, s);
    if (cpu_fast_kernels() && fast::sgd_step_reduced(p, g, buf, s)) return true;
    if (run_blocked<3>(p.shape(), {BlockArg{p, true, true}, BlockArg{g}, BlockArg{buf, true, true}},
                       [&](std::array<Tensor, 3>& t) { return b_.sgd_step(t[0], t[1], t[2], for_block(s, p, t[0])); }))
      return true;
    Result rp(p, true), rbuf(buf, true);
    if (!b_.sgd_step(rp.f32, up(g), rbuf.f32, for_block(s, p, Tensor()))) return false;
    rp.done();
    rbuf.done();
    return true;
  }
  bool adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                 const AdamStep& s) override {
    if (!any_reduced(p, g, m, v, vmax)) return b_.adam_step(p, g, m, v, vmax, s);
    if (cpu_fast_kernels() && fast::adam_step_reduced(p, g, m, v, vmax, s)) return true;
    if (run_blocked<5>(p.shape(),
                       {BlockArg{p, true, true}, BlockArg{g}, BlockArg{m, true, true}, BlockArg{v, true, true},
                        BlockArg{vmax, true, true}},
                       [&](std::array<Tensor, 5>& t) {
                         return b_.adam_step(t[0], t[1], t[2], t[3], t[4], for_block(s, p, t[0]));
                       }))
      return true;
    Result rp(p, true), rm(m, true), rv(v, true), rvmax(vmax, true);
    if (!b_.adam_step(rp.f32, up(g), rm.f32, rv.f32, rvmax.f32, for_block(s, p, Tensor()))) return false;
    rp.done();
    rm.done();
    rv.done();
    rvmax.done();
    return true;
  }
  bool rmsprop_step(const Tensor& p, const Tensor& g, const Tensor& square_avg, const Tensor& grad_avg,
                    const Tensor& buf, const RmspropStep& s) override {
    if (!any_reduced(p, g, square_avg, grad_avg, buf)) return b_.rmsprop_step(p, g, square_avg, grad_avg, buf, s);
    if (run_blocked<5>(p.shape(),
                       {BlockArg{p, true, true}, BlockArg{g}, BlockArg{square_avg, true, true},
                        BlockArg{grad_avg, true, true}, BlockArg{buf, true, true}},
                       [&](std::array<Tensor, 5>& t) { return b_.rmsprop_step(t[0], t[1], t[2], t[3], t[4], s); }))
      return true;
    Result rp(p, true), rsq(square_avg, true), rga(grad_avg, true), rbuf(buf, true);
    if (!b_.rmsprop_step(rp.f32, up(g), rsq.f32, rga.f32, rbuf.f32, s)) return false;
    rp.done();
    rsq.done();
    rga.done();
    rbuf.done();
    return true;
  }

  // The packing-free SGEMM rounds as it stores, where it runs this product.
  bool bmm_round_through(const Tensor& out, const Tensor& a, const Tensor& b, DType dtype) override {
    return is_reduced_float(dtype) && cpu_fast_kernels() && fast::bmm_mixed(out, a, b, dtype);
  }
  // One pass over t, with the roundings of t.to(dtype) (so the bits of converting twice), and no
  // 16-bit copy.
  bool round_through(const Tensor& t, DType dtype) override {
    if (t.dtype() != kFloat32 || !t.is_contiguous() || !is_reduced_float(dtype)) return false;
    with_eigen_type(dtype, [&](auto tag) {
      round_through_row<decltype(tag)>(static_cast<float*>(t.raw_data()), t.numel());
    });
    return true;
  }

 private:
  Backend& b_;
};

}  // namespace

std::unique_ptr<Backend> with_reduced_floats(Backend& inner) { return std::make_unique<ReducedFloatBackend>(inner); }

void narrow_floats(DType dtype, void* out, const float* in, int64_t n) {
  with_eigen_type(dtype, [&](auto tag) { narrow_row(static_cast<decltype(tag)*>(out), in, n); });
}

void widen_floats(DType dtype, float* out, const void* in, int64_t n) {
  with_eigen_type(dtype, [&](auto tag) { widen_row(out, static_cast<const decltype(tag)*>(in), n); });
}

}  // namespace cpu
}  // namespace gradsleuth
