// im2col / col2im for one sample and a range of its channels: the loops behind the
// backend's batched im2col/col2im (conv.cpp) and the per-sample columns of the
// fused conv2d (conv_gemm.cpp), which builds one sample's columns at a time in a
// cache-resident scratch buffer instead of the whole batch's in memory.
// Internal to the CPU backend.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/op_kinds.h"

namespace gradsleuth::cpu::fast {

// Stride 1 with "same" width (W == outW, e.g. 3x3 with padding 1): output pixel
// (oh, ow) of kernel tap (ki, kj) reads input index j + shift, j = oh * W + ow, for
// every valid pixel, so a tap is ONE loop over [j0, j1) (first to last valid pixel)
// instead of outH loops of outW (14 or 28 for the CNN: too short to vectorise). The
// pixels whose column falls outside the input row (ow < ow0 or ow >= ow1) map to the
// neighbouring row's edge, inside the plane; they are masked: im2col writes 0 there
// and col2im adds 0 (an exact no-op: the plane starts at +0, so it never holds -0).
struct TapRange {
  int64_t j0, j1, shift;
  bool empty, full_rows;
};

// The tap's valid pixels: rows [oh0, oh1) (input row inside the plane), columns
// [ow0, ow1); j0, j1 the flat range from the first valid pixel to one past the last.
inline TapRange tap_range(const Conv2dGeometry& g, int64_t ki, int64_t kj) {
  const int64_t off = kj * g.dW - g.pW, rowoff = ki * g.dH - g.pH;  // h = oh + rowoff, w = ow + off
  const int64_t oh0 = std::max<int64_t>(0, -rowoff), oh1 = std::min(g.outH, g.H - rowoff);
  const int64_t ow0 = std::max<int64_t>(0, -off), ow1 = std::min(g.outW, g.W - off);
  TapRange t{};
  t.empty = oh0 >= oh1 || ow0 >= ow1;
  if (t.empty) return t;
  t.j0 = oh0 * g.outW + ow0;
  t.j1 = (oh1 - 1) * g.outW + ow1;
  t.shift = rowoff * g.W + off;
  t.full_rows = ow0 == 0 && ow1 == g.outW;
  return t;
}

struct FlatTaps {
  bool on = false;
  std::vector<uint8_t> keep;   // keep[kj * L + j]: column of j inside the input row for tap column kj
  std::vector<TapRange> taps;  // taps[ki * kW + kj]
};
inline FlatTaps flat_taps(const Conv2dGeometry& g) {
  FlatTaps f;
  f.on = g.sH == 1 && g.sW == 1 && g.W == g.outW;
  if (!f.on) return f;
  const int64_t L = g.outH * g.outW;
  f.keep.assign(static_cast<size_t>(g.kW * L), 0);
  for (int64_t kj = 0; kj < g.kW; ++kj) {
    const int64_t off = kj * g.dW - g.pW;
    for (int64_t j = 0; j < L; ++j) {
      const int64_t w = j % g.outW + off;
      f.keep[static_cast<size_t>(kj * L + j)] = w >= 0 && w < g.W;
    }
  }
  for (int64_t ki = 0; ki < g.kH; ++ki)
    for (int64_t kj = 0; kj < g.kW; ++kj) f.taps.push_back(tap_range(g, ki, kj));
  return f;
}

// Columns of channels [ch0, ch1) of one sample: x is the sample's (C, H, W) plane
// stack, row r = (ch * kH + ki) * kW + kj of the columns starts at c + r * sK and
// has outH * outW unit-stride entries.
template <class T>
void im2col_sample(const T* x, T* c, int64_t sK, const Conv2dGeometry& g, const FlatTaps& flat, int64_t ch0,
                   int64_t ch1) {
  const int64_t L = g.outH * g.outW;
  for (int64_t ch = ch0; ch < ch1; ++ch) {
    const T* xp = x + ch * g.H * g.W;
    for (int64_t ki = 0; ki < g.kH; ++ki)
      for (int64_t kj = 0; kj < g.kW; ++kj) {
        const int64_t row = (ch * g.kH + ki) * g.kW + kj;
        T* cp = c + row * sK;
        if (flat.on) {
          const TapRange& t = flat.taps[static_cast<size_t>(ki * g.kW + kj)];
          if (t.empty) {
            std::fill_n(cp, L, T(0));
            continue;
          }
          std::fill_n(cp, t.j0, T(0));
          const int64_t sh = t.shift;  // xp[j + sh]: the input pixel of output pixel j
          if (t.full_rows) {
            std::copy(xp + t.j0 + sh, xp + t.j1 + sh, cp + t.j0);
          } else {
            const uint8_t* keep = flat.keep.data() + kj * L;
            for (int64_t j = t.j0; j < t.j1; ++j) {  // unconditional load, byte test: vectorises
              const T v = xp[j + sh];
              cp[j] = keep[j] != 0 ? v : T(0);
            }
          }
          std::fill_n(cp + t.j1, L - t.j1, T(0));
          continue;
        }
        // Output columns [ow0, ow1) read inside the input row; the rest is padding.
        const int64_t off = kj * g.dW - g.pW;  // w = ow * sW + off
        const int64_t ow0 = off >= 0 ? 0 : std::min(g.outW, (-off + g.sW - 1) / g.sW);
        const int64_t ow1 = std::max(ow0, std::min(g.outW, g.W - off > 0 ? (g.W - off + g.sW - 1) / g.sW : 0));
        for (int64_t oh = 0; oh < g.outH; ++oh) {
          const int64_t h = oh * g.sH - g.pH + ki * g.dH;
          T* dst = cp + oh * g.outW;
          if (h < 0 || h >= g.H) {
            std::fill_n(dst, g.outW, T(0));
            continue;
          }
          const T* src = xp + h * g.W;  // input column of output column ow: ow * sW + off
          std::fill_n(dst, ow0, T(0));
          if (g.sW == 1)
            std::copy(src + ow0 + off, src + ow1 + off, dst + ow0);
          else
            for (int64_t ow = ow0; ow < ow1; ++ow) dst[ow] = src[ow * g.sW + off];
          std::fill_n(dst + ow1, g.outW - ow1, T(0));
        }
      }
  }
}

// The adjoint: x's channels [ch0, ch1) (pre-zeroed or holding a partial sum)
// += the columns scattered back, laid out as in im2col_sample.
template <class T>
void col2im_sample(T* x, const T* c, int64_t sK, const Conv2dGeometry& g, const FlatTaps& flat, int64_t ch0,
                   int64_t ch1) {
  const int64_t L = g.outH * g.outW;
  for (int64_t ch = ch0; ch < ch1; ++ch) {
    T* xp = x + ch * g.H * g.W;
    for (int64_t ki = 0; ki < g.kH; ++ki)
      for (int64_t kj = 0; kj < g.kW; ++kj) {
        const int64_t row = (ch * g.kH + ki) * g.kW + kj;
        const T* cp = c + row * sK;
        if (flat.on) {
          const TapRange& t = flat.taps[static_cast<size_t>(ki * g.kW + kj)];
          if (t.empty) continue;
          const int64_t sh = t.shift;  // xp[j + sh]: the input pixel of output pixel j
          if (t.full_rows) {
            for (int64_t j = t.j0; j < t.j1; ++j) xp[j + sh] += cp[j];
          } else {
            const uint8_t* keep = flat.keep.data() + kj * L;
            for (int64_t j = t.j0; j < t.j1; ++j) {
              const T v = cp[j];
              xp[j + sh] += keep[j] != 0 ? v : T(0);
            }
          }
          continue;
        }
        const int64_t off = kj * g.dW - g.pW;  // w = ow * sW + off, as in im2col
        const int64_t ow0 = off >= 0 ? 0 : std::min(g.outW, (-off + g.sW - 1) / g.sW);
        const int64_t ow1 = std::max(ow0, std::min(g.outW, g.W - off > 0 ? (g.W - off + g.sW - 1) / g.sW : 0));
        for (int64_t oh = 0; oh < g.outH; ++oh) {
          const int64_t h = oh * g.sH - g.pH + ki * g.dH;
          if (h < 0 || h >= g.H) continue;
          T* dst = xp + h * g.W;
          const T* src = cp + oh * g.outW;
          if (g.sW == 1)
            for (int64_t ow = ow0; ow < ow1; ++ow) dst[ow + off] += src[ow];
          else
            for (int64_t ow = ow0; ow < ow1; ++ow) dst[ow * g.sW + off] += src[ow];
        }
      }
  }
}

}  // namespace gradsleuth::cpu::fast
