// CPU backend, convolution and pooling (NCHW, contiguous): im2col/col2im (a conv2d is
// im2col, then a matmul: core/ops/conv.cpp), max pooling with argmax for backward,
// average pooling. With tuned kernels on, im2col/col2im and max pooling without padding
// go to fast/conv.cpp, and a whole conv2d to the fused kernel of fast/conv2d.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/fast.h"
#include "core/pool_math.h"

namespace gradsleuth::cpu {

// Column row (c * kH + ki) * kW + kj of sample n holds, at output pixel (oh, ow), the
// input pixel that kernel tap (ki, kj) of channel c reads there: x[n][c][h][w] with
// h = oh * sH - pH + ki * dH and w = ow * sW - pW + kj * dW, or 0 in the padding.
// cols (N, C * kH * kW, outH * outW) may be a view with strides (sN, sK, 1).
void CpuBackend::im2col(const Tensor& cols, const Tensor& in, const Conv2dGeometry& g) {
  if (cpu_fast_kernels() && fast::im2col(cols, in, g)) return;
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in.raw_data());
    T* c = static_cast<T*>(cols.raw_data());
    const int64_t sN = cols.strides()[0], sK = cols.strides()[1];
    parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        const int64_t n = nc / g.C, ch = nc % g.C;
        const T* plane = x + nc * g.H * g.W;
        for (int64_t ki = 0; ki < g.kH; ++ki)
          for (int64_t kj = 0; kj < g.kW; ++kj) {
            T* row = c + n * sN + ((ch * g.kH + ki) * g.kW + kj) * sK;
            for (int64_t oh = 0; oh < g.outH; ++oh)
              for (int64_t ow = 0; ow < g.outW; ++ow) {
                const int64_t h = oh * g.sH - g.pH + ki * g.dH, w = ow * g.sW - g.pW + kj * g.dW;
                const bool inside = h >= 0 && h < g.H && w >= 0 && w < g.W;
                row[oh * g.outW + ow] = inside ? plane[h * g.W + w] : T(0);
              }
          }
      }
    });
  });
}

// The adjoint of im2col: every column entry is added back to the input pixel it was read
// from (out must hold zeros, or a partial sum, on entry). Taps in order, so each pixel's
// contributions are added in one fixed order.
void CpuBackend::col2im(const Tensor& out, const Tensor& cols, const Conv2dGeometry& g) {
  if (cpu_fast_kernels() && fast::col2im(out, cols, g)) return;
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* x = static_cast<T*>(out.raw_data());
    const T* c = static_cast<const T*>(cols.raw_data());
    const int64_t sN = cols.strides()[0], sK = cols.strides()[1];
    parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        const int64_t n = nc / g.C, ch = nc % g.C;
        T* plane = x + nc * g.H * g.W;
        for (int64_t ki = 0; ki < g.kH; ++ki)
          for (int64_t kj = 0; kj < g.kW; ++kj) {
            const T* row = c + n * sN + ((ch * g.kH + ki) * g.kW + kj) * sK;
            for (int64_t oh = 0; oh < g.outH; ++oh)
              for (int64_t ow = 0; ow < g.outW; ++ow) {
                const int64_t h = oh * g.sH - g.pH + ki * g.dH, w = ow * g.sW - g.pW + kj * g.dW;
                if (h >= 0 && h < g.H && w >= 0 && w < g.W) plane[h * g.W + w] += row[oh * g.outW + ow];
              }
          }
      }
    });
  });
}

// Each output is the maximum of its window (pool_math.h: the first maximum in window
// order wins ties, the first NaN wins outright), argmax its flat index h * W + w in the
// plane (-1 for a window entirely in the padding).
void CpuBackend::max_pool2d(const Tensor& out, const Tensor& argmax, const Tensor& in, const Conv2dGeometry& g) {
  if (cpu_fast_kernels() && fast::max_pool2d(out, argmax, in, g)) return;
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    int64_t* am = static_cast<int64_t*>(argmax.raw_data());
    parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        const T* xp = x + nc * g.H * g.W;
        for (int64_t oh = 0; oh < g.outH; ++oh)
          for (int64_t ow = 0; ow < g.outW; ++ow) {
            const int64_t oi = nc * g.outH * g.outW + oh * g.outW + ow;
            o[oi] = max_pool_at(xp, g, oh, ow, &am[oi]);
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
    const int64_t L = g.outH * g.outW, HW = g.H * g.W;
    const bool disjoint = g.pH == 0 && g.pW == 0 && g.sH >= (g.kH - 1) * g.dH + 1 && g.sW >= (g.kW - 1) * g.dW + 1;
    // Plane by plane: zero it, then add each window's gradient at its argmax (windows may
    // overlap when stride < kernel). A plane (3 KiB for 28x28 floats) stays in L1 between
    // the two, so the input gradient goes to memory once; zeroing the whole tensor first
    // and then scattering into it made two passes over it.
    parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        T* gp = gi + nc * HW;
        const T* gop = go + nc * L;
        const int64_t* ap = am + nc * L;
        std::fill_n(gp, HW, T(0));
        if (disjoint) {
          for (int64_t l = 0; l < L; ++l) gp[ap[l]] = gop[l] + T(0);
          continue;
        }
        for (int64_t l = 0; l < L; ++l) {
          const int64_t a = ap[l];
          if (a >= 0) gp[a] += gop[l];
        }
      }
    });
  });
}

void CpuBackend::avg_pool2d(const Tensor& out, const Tensor& in, const Conv2dGeometry& g) {
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        const T* xp = x + nc * g.H * g.W;
        for (int64_t oh = 0; oh < g.outH; ++oh)
          for (int64_t ow = 0; ow < g.outW; ++ow)
            o[nc * g.outH * g.outW + oh * g.outW + ow] = avg_pool_at(xp, g, oh, ow);
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
            for_each_in_window(g, oh, ow, [&](int64_t k) { gp[k] += v; });
          }
      }
    });
  });
}

// The fused conv2d is a tuned kernel only: its reference is the composite path above
// (im2col + linalg.cpp's matmul, col2im), which ops/conv.cpp takes when these say no.
bool CpuBackend::conv2d_fused_supported(const Conv2dGeometry& g, int64_t O, DType dt) const {
  return cpu_fast_kernels() && fast::conv2d_supported(g, O, dt);
}

bool CpuBackend::conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                                const Conv2dGeometry& g) {
  return cpu_fast_kernels() && fast::conv2d_forward(out, x, w, bias, g);
}

bool CpuBackend::conv2d_backward(const Tensor& grad_x, const Tensor& grad_w, const Tensor& grad_b,
                                 const Tensor& grad_out, const Tensor& x, const Tensor& w, const Conv2dGeometry& g) {
  return cpu_fast_kernels() && fast::conv2d_backward(grad_x, grad_w, grad_b, grad_out, x, w, g);
}

}  // namespace gradsleuth::cpu
