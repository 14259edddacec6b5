// CPU backend, convolution and pooling (NCHW, contiguous): im2col/col2im for
// conv via GEMM (their per-sample loops are in conv_cols.h, shared with the fused
// conv2d of conv_gemm.cpp), max pooling with argmax for backward, average pooling.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu/conv_cols.h"
#include "core/cpu/cpu_backend.h"

namespace gradsleuth::cpu {

void CpuBackend::im2col(const Tensor& cols, const Tensor& in, const Conv2dGeometry& g) {
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
}

void CpuBackend::col2im(const Tensor& out, const Tensor& cols, const Conv2dGeometry& g) {
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
}

namespace {
// Max-pools one (H, W) plane with the common 2x2, stride-2 window: two input rows per
// output row, the four candidates compared in window order (first maximum wins, the
// first NaN wins outright). Each choice is a bit blend, not a branch: on random data
// the branches mispredicted and the loop could not vectorise (1.0 ms instead of 5.8
// for the CNN's first pool, (64, 32, 28, 28)).
// OW_ > 0 makes the output width a compile-time constant: the CNN's pools have rows of
// only 14 and 7 outputs, and with a runtime width the vectorised loop ran mostly its
// scalar remainder; with the width known GCC unrolls the row into full and partial
// vectors (the first pool of the CNN, (64, 32, 28, 28): 2.9 ms -> 1.0 ms).
template <class T, int64_t OW_ = 0>
void max_pool_2x2_plane(const T* xp, T* op, int64_t* ap, int64_t W, int64_t oH, int64_t oW_runtime) {
  const int64_t oW = OW_ > 0 ? OW_ : oW_runtime;
  using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, std::conditional_t<sizeof(T) == 4, uint32_t,
                                  std::conditional_t<sizeof(T) == 2, uint16_t, uint8_t>>>;
  static_assert(sizeof(Bits) == sizeof(T));
  for (int64_t oh = 0; oh < oH; ++oh) {
    const T* r0 = xp + 2 * oh * W;
    const T* r1 = r0 + W;
    for (int64_t ow = 0; ow < oW; ++ow) {
      const int64_t i0 = 2 * oh * W + 2 * ow;
      T best = r0[2 * ow];
      int64_t bi = i0;
      auto consider = [&](T v, int64_t i) {
        const int64_t take = int64_t(v > best) | (int64_t(v != v) & int64_t(best == best));  // v != v: NaN
        const int64_t mask = -take;  // all ones when v wins
        bi ^= (bi ^ i) & mask;
        Bits bb, vb;
        std::memcpy(&bb, &best, sizeof(T));
        std::memcpy(&vb, &v, sizeof(T));
        bb ^= (bb ^ vb) & static_cast<Bits>(mask);
        std::memcpy(&best, &bb, sizeof(T));
      };
      consider(r0[2 * ow + 1], i0 + 1);
      consider(r1[2 * ow], i0 + W);
      consider(r1[2 * ow + 1], i0 + W + 1);
      op[oh * oW + ow] = best;
      ap[oh * oW + ow] = bi;
    }
  }
}
}  // namespace

void CpuBackend::max_pool2d(const Tensor& out, const Tensor& argmax, const Tensor& in, const Conv2dGeometry& g) {
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    int64_t* am = static_cast<int64_t*>(argmax.raw_data());
    parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
      if (g.pH == 0 && g.pW == 0 && g.kH == 2 && g.kW == 2 && g.sH == 2 && g.sW == 2 && g.dH == 1 && g.dW == 1) {
        auto planes = [&](auto kernel) {
          for (int64_t nc = b; nc < e; ++nc)
            kernel(x + nc * g.H * g.W, o + nc * g.outH * g.outW, am + nc * g.outH * g.outW, g.W, g.outH, g.outW);
        };
        switch (g.outW) {  // the widths of 28x28 inputs pooled twice, and powers of two
          case 14: planes(max_pool_2x2_plane<T, 14>); break;
          case 7: planes(max_pool_2x2_plane<T, 7>); break;
          case 16: planes(max_pool_2x2_plane<T, 16>); break;
          case 8: planes(max_pool_2x2_plane<T, 8>); break;
          default: planes(max_pool_2x2_plane<T>); break;
        }
        return;
      }
      if (g.pH == 0 && g.pW == 0) {
        // Fast path (no padding: every window lies inside the plane): no bounds
        // checks and no data-dependent branches, so random inputs cost no
        // mispredictions (2-3x faster than the general loop below). Same rule:
        // the first maximum wins ties, and the first NaN wins outright.
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
        return;
      }
      for (int64_t nc = b; nc < e; ++nc) {
        const T* xp = x + nc * g.H * g.W;
        for (int64_t oh = 0; oh < g.outH; ++oh)
          for (int64_t ow = 0; ow < g.outW; ++ow) {
            T best = std::numeric_limits<T>::lowest();
            if constexpr (std::is_floating_point_v<T>) best = -std::numeric_limits<T>::infinity();
            int64_t bi = -1;
            for (int64_t ki = 0; ki < g.kH; ++ki) {
              const int64_t h = oh * g.sH - g.pH + ki * g.dH;
              if (h < 0 || h >= g.H) continue;
              for (int64_t kj = 0; kj < g.kW; ++kj) {
                const int64_t w = ow * g.sW - g.pW + kj * g.dW;
                if (w < 0 || w >= g.W) continue;
                const T v = xp[h * g.W + w];
                bool nan = false;
                if constexpr (std::is_floating_point_v<T>) nan = std::isnan(v);
                if (bi < 0 || v > best || nan) { best = v; bi = h * g.W + w; if (nan) { kj = g.kW; ki = g.kH; } }
              }
            }
            const int64_t oi = nc * g.outH * g.outW + oh * g.outW + ow;
            o[oi] = best;
            am[oi] = bi;
          }
      }
    });
  });
}

void CpuBackend::max_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& argmax,
                         const Conv2dGeometry& g) {
  dispatch_dtype(grad_in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* gi = static_cast<T*>(grad_in.raw_data());
    const T* go = static_cast<const T*>(grad_out.raw_data());
    const int64_t* am = static_cast<const int64_t*>(argmax.raw_data());
    const int64_t L = g.outH * g.outW;
    parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc)
        for (int64_t l = 0; l < L; ++l) {
          const int64_t a = am[nc * L + l];
          if (a >= 0) gi[nc * g.H * g.W + a] += go[nc * L + l];
        }
    });
  });
}

void CpuBackend::avg_pool2d(const Tensor& out, const Tensor& in, const Conv2dGeometry& g) {
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    const double inv = 1.0 / static_cast<double>(g.kH * g.kW);
    parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        const T* xp = x + nc * g.H * g.W;
        for (int64_t oh = 0; oh < g.outH; ++oh)
          for (int64_t ow = 0; ow < g.outW; ++ow) {
            double s = 0;
            for (int64_t ki = 0; ki < g.kH; ++ki) {
              const int64_t h = oh * g.sH - g.pH + ki;
              if (h < 0 || h >= g.H) continue;
              for (int64_t kj = 0; kj < g.kW; ++kj) {
                const int64_t w = ow * g.sW - g.pW + kj;
                if (w >= 0 && w < g.W) s += static_cast<double>(xp[h * g.W + w]);
              }
            }
            o[nc * g.outH * g.outW + oh * g.outW + ow] = static_cast<T>(s * inv);
          }
      }
    });
  });
}

void CpuBackend::avg_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Conv2dGeometry& g) {
  dispatch_dtype(grad_in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* gi = static_cast<T*>(grad_in.raw_data());
    const T* go = static_cast<const T*>(grad_out.raw_data());
    const double inv = 1.0 / static_cast<double>(g.kH * g.kW);
    parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        T* gp = gi + nc * g.H * g.W;
        for (int64_t oh = 0; oh < g.outH; ++oh)
          for (int64_t ow = 0; ow < g.outW; ++ow) {
            const T v = static_cast<T>(go[nc * g.outH * g.outW + oh * g.outW + ow] * inv);
            for (int64_t ki = 0; ki < g.kH; ++ki) {
              const int64_t h = oh * g.sH - g.pH + ki;
              if (h < 0 || h >= g.H) continue;
              for (int64_t kj = 0; kj < g.kW; ++kj) {
                const int64_t w = ow * g.sW - g.pW + kj;
                if (w >= 0 && w < g.W) gp[h * g.W + w] += v;
              }
            }
          }
      }
    });
  });
}

}  // namespace gradsleuth::cpu
