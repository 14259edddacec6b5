// cuda/conv.cu: im2col/col2im for convolution through GEMM, max pooling (argmax recorded for
// backward) and average pooling (count_include_pad), NCHW contiguous, as core/cpu/conv.cpp.
// Shape letters: N batch, C channels, H x W input plane, kH x kW kernel, L = outH * outW.
// float16/bfloat16: the pools compute in float32 and round once; the kernels that add into their
// output (col2im, the pools' backward) add into a float32 copy that is rounded once at the end.
#include "cuda/compat.h"

#include <math.h>

#include "core/pool_math.h"
#include "cuda/kernel_utils.h"

namespace gradsleuth::cuda {

namespace {

// A 16-bit plane read as float32 values (core/pool_math.h indexes it like a pointer).
template <class T>
struct Widened {
  const T* p;
  __host__ __device__ compute_t<T> operator[](int64_t k) const { return widen(p[k]); }
};
template <class T>
__host__ __device__ auto plane_of(const T* p) {
  if constexpr (is_half_v<T>)
    return Widened<T>{p};
  else
    return p;
}

// cols (N, C*kH*kW, L) <- x (N, C, H, W); zero outside the padded plane. cols[b][row][l] is at
// b * sN + row * sK + l (conv2d passes a (CK, N, L) buffer: sN = L, sK = N * L). One thread per
// cols element, 1-D grid-stride.
template <class T>
__global__ void im2col_kernel(T* cols, const T* x, Conv2dGeometry g, int64_t n, int64_t sN, int64_t sK) {
  const int64_t L = g.outH * g.outW, K = g.C * g.kH * g.kW;
  for (GS_GRID_STRIDE(i, n)) {
    const int64_t l = i % L, row = (i / L) % K, b = i / (L * K);
    const int64_t kj = row % g.kW, ki = (row / g.kW) % g.kH, ch = row / (g.kW * g.kH);
    const int64_t oh = l / g.outW, ow = l % g.outW;
    const int64_t h = oh * g.sH - g.pH + ki * g.dH, w = ow * g.sW - g.pW + kj * g.dW;
    cols[b * sN + row * sK + l] =
        (h >= 0 && h < g.H && w >= 0 && w < g.W) ? x[((b * g.C + ch) * g.H + h) * g.W + w] : narrow<T>(0);
  }
}

// x (N, C, H, W) += the cols entries that im2col copied from each element (cols strided as in
// im2col_kernel). One thread per input element (it gathers its own contributions: no
// atomics), 1-D grid-stride. x is compute_t<T> (a float32 copy for 16-bit cols).
template <class T>
__global__ void col2im_kernel(compute_t<T>* x, const T* cols, Conv2dGeometry g, int64_t n, int64_t sN, int64_t sK) {
  for (GS_GRID_STRIDE(i, n)) {
    const int64_t w = i % g.W, h = (i / g.W) % g.H, ch = (i / (g.W * g.H)) % g.C, b = i / (g.W * g.H * g.C);
    compute_t<T> acc = compute_t<T>(0);
    for (int64_t ki = 0; ki < g.kH; ++ki) {
      const int64_t hh = h + g.pH - ki * g.dH;
      if (hh < 0 || hh % g.sH != 0 || hh / g.sH >= g.outH) continue;
      for (int64_t kj = 0; kj < g.kW; ++kj) {
        const int64_t ww = w + g.pW - kj * g.dW;
        if (ww < 0 || ww % g.sW != 0 || ww / g.sW >= g.outW) continue;
        const int64_t row = (ch * g.kH + ki) * g.kW + kj;
        acc += widen(cols[b * sN + row * sK + (hh / g.sH) * g.outW + ww / g.sW]);
      }
    }
    x[i] += acc;
  }
}

// out, argmax (N, C, outH, outW) <- x. One thread per output, grid-stride. The first maximum
// wins ties and the first NaN wins outright; argmax is h * W + w within the plane.
template <class T>
__global__ void max_pool_kernel(T* out, int64_t* argmax, const T* x, Conv2dGeometry g, int64_t n) {
  for (GS_GRID_STRIDE(i, n)) {
    const int64_t ow = i % g.outW, oh = (i / g.outW) % g.outH, nc = i / (g.outW * g.outH);
    out[i] = narrow<T>(max_pool_at(plane_of(x + nc * g.H * g.W), g, oh, ow, &argmax[i]));
  }
}

// grad_in[nc, argmax] += grad_out into the zero-filled grad_in (compute_t<T>). One thread per output gradient,
// grid-stride; windows may overlap (stride < kernel), hence the atomic.
template <class T>
__global__ void max_pool_backward_kernel(compute_t<T>* gi, const T* go, const int64_t* argmax, Conv2dGeometry g,
                                         int64_t n) {
  const int64_t L = g.outH * g.outW;
  for (GS_GRID_STRIDE(i, n)) {
    const int64_t a = argmax[i];
    if (a >= 0) atomic_add(gi + (i / L) * g.H * g.W + a, widen(go[i]));
  }
}

// out (N, C, outH, outW) = window sum / (kH * kW) in float64. One thread per output, grid-stride.
template <class T>
__global__ void avg_pool_kernel(T* out, const T* x, Conv2dGeometry g, int64_t n) {
  for (GS_GRID_STRIDE(i, n)) {
    const int64_t ow = i % g.outW, oh = (i / g.outW) % g.outH, nc = i / (g.outW * g.outH);
    out[i] = narrow<T>(avg_pool_at(plane_of(x + nc * g.H * g.W), g, oh, ow));
  }
}

// grad_in (compute_t<T>) += grad_out / (kH * kW) over each window. One thread per output gradient, atomics.
template <class T>
__global__ void avg_pool_backward_kernel(compute_t<T>* gi, const T* go, Conv2dGeometry g, int64_t n) {
  using C = compute_t<T>;
  const double inv = 1.0 / static_cast<double>(g.kH * g.kW);
  for (GS_GRID_STRIDE(i, n)) {
    const int64_t ow = i % g.outW, oh = (i / g.outW) % g.outH, nc = i / (g.outW * g.outH);
    C* gp = gi + nc * g.H * g.W;
    const C v = static_cast<C>(static_cast<double>(widen(go[i])) * inv);
    for_each_in_window(g, oh, ow, [&](int64_t k) { atomic_add(gp + k, v); });
  }
}

}  // namespace

void im2col(const DevTensor& cols, const DevTensor& in, const Conv2dGeometry& g) {
  const int64_t n = cols.numel();
  if (n == 0) return;
  dispatch(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch_op("im2col", im2col_kernel<T>, blocks_for(n), kThreads, 0, static_cast<T*>(cols.data),
              static_cast<const T*>(in.data), g, n, cols.g.strides[0], cols.g.strides[1]);
  });
}

void col2im(const DevTensor& out_, const DevTensor& cols, const Conv2dGeometry& g) {
  const int64_t n = out_.numel();
  if (n == 0 || g.outH * g.outW == 0) return;
  accumulate_in_float32(out_, true, [&](const DevTensor& out) {
    dispatch(cols.dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, bool>)
        launch_op("col2im", col2im_kernel<T>, blocks_for(n), kThreads, 0, static_cast<compute_t<T>*>(out.data),
                  static_cast<const T*>(cols.data), g, n, cols.g.strides[0], cols.g.strides[1]);
    });
  });
}

void max_pool2d(const DevTensor& out, const DevTensor& argmax, const DevTensor& in, const Conv2dGeometry& g) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch_op("max_pool2d", max_pool_kernel<T>, blocks_for(n), kThreads, 0, static_cast<T*>(out.data),
              static_cast<int64_t*>(argmax.data), static_cast<const T*>(in.data), g, n);
  });
}

void max_pool2d_backward(const DevTensor& grad_in_, const DevTensor& grad_out, const DevTensor& argmax,
                         const Conv2dGeometry& g) {
  const int64_t n = grad_out.numel();
  accumulate_in_float32(grad_in_, false, [&](const DevTensor& grad_in) {
    fill(grad_in, 0.0);  // the contract (core/backend.h): grad_in arrives uninitialised
    if (n == 0) return;
    dispatch(grad_out.dtype, [&](auto tag) {
      using T = decltype(tag);
      launch_op("max_pool2d_backward", max_pool_backward_kernel<T>, blocks_for(n), kThreads, 0,
                static_cast<compute_t<T>*>(grad_in.data), static_cast<const T*>(grad_out.data),
                static_cast<const int64_t*>(argmax.data), g, n);
    });
  });
}

void avg_pool2d(const DevTensor& out, const DevTensor& in, const Conv2dGeometry& g) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch_op("avg_pool2d", avg_pool_kernel<T>, blocks_for(n), kThreads, 0, static_cast<T*>(out.data),
              static_cast<const T*>(in.data), g, n);
  });
}

void avg_pool2d_backward(const DevTensor& grad_in_, const DevTensor& grad_out, const Conv2dGeometry& g) {
  const int64_t n = grad_out.numel();
  if (n == 0) return;
  accumulate_in_float32(grad_in_, true, [&](const DevTensor& grad_in) {  // the kernel adds into grad_in
    dispatch(grad_out.dtype, [&](auto tag) {
      using T = decltype(tag);
      launch_op("avg_pool2d_backward", avg_pool_backward_kernel<T>, blocks_for(n), kThreads, 0,
                static_cast<compute_t<T>*>(grad_in.data), static_cast<const T*>(grad_out.data), g, n);
    });
  });
}

}  // namespace gradsleuth::cuda
