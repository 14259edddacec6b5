// Tuned loops of the conv family (fast.h): im2col/col2im one loop per kernel tap over the
// flattened plane (conv_cols.h, shared with the fused conv2d), and max pooling without
// padding, branch-free. The reference is core/cpu/conv.cpp's loops; both agree bit for bit.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/conv_cols.h"
#include "core/cpu/fast/fast.h"

namespace gradsleuth::cpu::fast {

bool im2col(const Tensor& cols, const Tensor& in, const Conv2dGeometry& g) {
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in.raw_data());
    T* c = static_cast<T*>(cols.raw_data());
    const int64_t sN = cols.strides()[0], sK = cols.strides()[1];  // cols[n][row][l] at n*sN + row*sK + l
    const FlatTaps flat = flat_taps(g);
    parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        const int64_t n = nc / g.C, ch = nc % g.C;
        im2col_sample(x + n * g.C * g.H * g.W, c + n * sN, sK, g, flat, ch, ch + 1);
      }
    });
  });
  return true;
}

bool col2im(const Tensor& out, const Tensor& cols, const Conv2dGeometry& g) {
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* x = static_cast<T*>(out.raw_data());
    const T* c = static_cast<const T*>(cols.raw_data());
    const int64_t sN = cols.strides()[0], sK = cols.strides()[1];  // as in im2col
    const FlatTaps flat = flat_taps(g);
    parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        const int64_t n = nc / g.C, ch = nc % g.C;
        col2im_sample(x + n * g.C * g.H * g.W, c + n * sN, sK, g, flat, ch, ch + 1);
      }
    });
  });
  return true;
}

namespace {
// The common 2x2, stride-2 max pool (no padding, dilation 1). The first maximum in window
// order (row 0 left, right, row 1 left, right) wins ties and the first NaN wins outright,
// as in the general loop below; here as a tree, each pair's winner first, then the bottom
// pair's winner against the top's (a later element wins only when strictly greater, or NaN
// against a number), which is that same rule.
// Each choice is a bit blend, not a branch: on random data the branches mispredicted and
// the loop could not vectorise.
template <class T>
inline T blend(bool take, T v, T keep) {
  using Bits = std::conditional_t<
      sizeof(T) == 8, uint64_t,
      std::conditional_t<sizeof(T) == 4, uint32_t, std::conditional_t<sizeof(T) == 2, uint16_t, uint8_t>>>;
  static_assert(sizeof(Bits) == sizeof(T));
  Bits bv, bk;
  std::memcpy(&bv, &v, sizeof(T));
  std::memcpy(&bk, &keep, sizeof(T));
  const Bits m = static_cast<Bits>(-static_cast<Bits>(take));  // all ones when v wins
  bk ^= (bk ^ bv) & m;
  std::memcpy(&keep, &bk, sizeof(T));
  return keep;
}
template <class T>
inline bool beats(T v, T best) {
  return (v > best) | ((v != v) & (best == best));
}  // v != v: NaN

// n outputs of one output row: r0, r1 the window's two input rows, base = the flat index
// of r0[0] in the plane (argmax is h * W + w there).
template <class T>
inline void max_pool_2x2_row(const T* __restrict r0, const T* __restrict r1, T* __restrict o, int64_t* __restrict a,
                             int64_t base, int64_t W, int64_t n) {
  for (int64_t ow = 0; ow < n; ++ow) {
    const T x0 = r0[2 * ow], x1 = r0[2 * ow + 1], x2 = r1[2 * ow], x3 = r1[2 * ow + 1];
    const bool t1 = beats(x1, x0), t3 = beats(x3, x2);
    const T top = blend(t1, x1, x0), bot = blend(t3, x3, x2);
    const bool tb = beats(bot, top);
    o[ow] = blend(tb, bot, top);
    a[ow] = base + 2 * ow + int64_t(tb) * W + int64_t(tb ? t3 : t1);  // + 0, 1, W or W + 1
  }
}

// Planes [b, e). The CNN's pools have output rows of only 14 and 7: with the row as the
// vector loop, a 16-wide (AVX-512) loop ran mostly its scalar remainder. V > 0 (oW in
// (V/2, V]) computes every row as ONE vector of V outputs, with a trip count known at
// compile time: the lanes past oW compute garbage from the next input rows and write it
// over the start of the next output row, which the next row then rewrites. Only the
// chunk's last row, which has no next row of its own (the next chunk may belong to
// another thread), is computed exactly. The overrun stays inside the tensor: it reads
// at most 2V - 1 <= 4 oW - 3 < 2 W elements past r1 (the next row pair) and writes fewer
// than oW outputs past the row. (64, 32, 28, 28) -> 14: 0.69 -> 0.21 ms;
// (64, 64, 14, 14) -> 7: 0.97 -> 0.13 ms.
template <class T, int64_t V>
void max_pool_2x2_planes(const T* x, T* o, int64_t* am, const Conv2dGeometry& g, int64_t b, int64_t e) {
  const int64_t H = g.H, W = g.W, oH = g.outH, oW = g.outW;
  for (int64_t nc = b; nc < e; ++nc) {
    const T* xp = x + nc * H * W;
    T* op = o + nc * oH * oW;
    int64_t* ap = am + nc * oH * oW;
    for (int64_t oh = 0; oh < oH; ++oh) {
      const T* r0 = xp + 2 * oh * W;
      if (V > 0 && (nc + 1 < e || oh + 1 < oH))
        max_pool_2x2_row<T>(r0, r0 + W, op + oh * oW, ap + oh * oW, 2 * oh * W, W, V);
      else
        max_pool_2x2_row<T>(r0, r0 + W, op + oh * oW, ap + oh * oW, 2 * oh * W, W, oW);
    }
  }
}
}  // namespace

bool max_pool2d(const Tensor& out, const Tensor& argmax, const Tensor& in, const Conv2dGeometry& g) {
  if (g.pH != 0 || g.pW != 0) return false;  // windows may reach into the padding: the reference
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    int64_t* am = static_cast<int64_t*>(argmax.raw_data());
    parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
      if (g.kH == 2 && g.kW == 2 && g.sH == 2 && g.sW == 2 && g.dH == 1 && g.dW == 1) {
        if (g.outW > 4 && g.outW <= 8)
          max_pool_2x2_planes<T, 8>(x, o, am, g, b, e);
        else if (g.outW > 8 && g.outW <= 16)
          max_pool_2x2_planes<T, 16>(x, o, am, g, b, e);
        else
          max_pool_2x2_planes<T, 0>(x, o, am, g, b, e);
        return;
      }
      // No padding: every window lies inside the plane: no bounds checks and no
      // data-dependent branches, so random inputs cost no mispredictions (2-3x faster
      // than the reference loop). Same rule: the first maximum wins ties, and the
      // first NaN wins outright.
      const int64_t H = g.H, W = g.W, oH = g.outH, oW = g.outW, kH = g.kH, kW = g.kW;
      const int64_t sH = g.sH, sW = g.sW, dH = g.dH, dW = g.dW;
      for (int64_t nc = b; nc < e; ++nc) {
        const T* xp = x + nc * H * W;
        T* op = o + nc * oH * oW;
        int64_t* ap = am + nc * oH * oW;
        for (int64_t oh = 0; oh < oH; ++oh)
          for (int64_t ow = 0; ow < oW; ++ow) {
            const int64_t base = oh * sH * W + ow * sW;
            T best = xp[base];
            int64_t bi = base;
            for (int64_t ki = 0; ki < kH; ++ki)
              for (int64_t kj = 0; kj < kW; ++kj) {
                const int64_t i = base + ki * dH * W + kj * dW;
                const T v = xp[i];
                const bool take = (v > best || v != v) && best == best;  // v != v: v is NaN
                best = take ? v : best;
                bi = take ? i : bi;
              }
            op[oh * oW + ow] = best;
            ap[oh * oW + ow] = bi;
          }
      }
    });
  });
  return true;
}

}  // namespace gradsleuth::cpu::fast
