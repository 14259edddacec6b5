// cuda/optim.cu: the fused optimizer steps on the device, one thread per element (grid-stride),
// running core/optim_step.h's element updates, the very formulas of the CPU backend's loops
// (core/cpu/fast/optim.cpp). The options are template flags, as on the CPU.
#include "cuda/compat.h"

#include <math.h>

#include "cuda/kernel_utils.h"
#include "cuda/optim_kernels.h"

namespace gradsleuth::cuda {

namespace {

// p[i] -= lr * d, d from the gradient, weight decay and the momentum buffer. 1-D grid-stride.
template <class T, bool Decay, bool Momentum, bool Nesterov, bool First>
__global__ void sgd_kernel(T* p, const T* g, T* buf, int64_t n, optim_step::SgdCoeffs<T> c) {
  for (GS_GRID_STRIDE(i, n)) optim_step::sgd_element<T, Decay, Momentum, Nesterov, First>(i, p, g, buf, c);
}

// Adam/AdamW: the moments m, v (and AMSGrad's running max vmax), then p. 1-D grid-stride.
template <class T, bool L2, bool Decoupled, bool AMSGrad>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, optim_step::AdamCoeffs<T> c) {
  for (GS_GRID_STRIDE(i, n)) optim_step::adam_element<T, L2, Decoupled, AMSGrad>(i, p, g, m, v, vmax, c);
}

// RMSprop: the square average (and the centered gradient average, the momentum buffer), then p.
// 1-D grid-stride.
template <class T, bool Decay, bool Centered, bool Momentum>
__global__ void rmsprop_kernel(T* p, const T* g, T* s, T* a, T* buf, int64_t n, optim_step::RmspropCoeffs<T> c) {
  for (GS_GRID_STRIDE(i, n)) optim_step::rmsprop_element<T, Decay, Centered, Momentum>(i, p, g, s, a, buf, c);
}

// f(float{}) or f(double{}).
template <class F>
void with_float(DType t, F&& f) {
  if (t == DType::Float64) {
    f(double{});
  } else {
    f(float{});
  }
}

}  // namespace

void sgd_step(DType t, int64_t n, void* p, const void* g, void* buf, const SgdStep& s) {
  if (n == 0) return;
  with_float(t, [&](auto tag) {
    using T = decltype(tag);
    const optim_step::SgdCoeffs<T> c(s);
    optim_step::with_flags(
        [&](auto decay, auto mom, auto nesterov, auto first) {
          launch_op("SGD.step",
                    sgd_kernel<T, decltype(decay)::value, decltype(mom)::value, decltype(nesterov)::value,
                               decltype(first)::value>,
                    blocks_for(n), kThreads, 0, static_cast<T*>(p), static_cast<const T*>(g), static_cast<T*>(buf), n,
                    c);
        },
        s.weight_decay != 0.0, s.momentum != 0.0, s.nesterov, s.first);
  });
}

void adam_step(DType t, int64_t n, void* p, const void* g, void* m, void* v, void* vmax, const AdamStep& s) {
  if (n == 0) return;
  with_float(t, [&](auto tag) {
    using T = decltype(tag);
    const optim_step::AdamCoeffs<T> c(s);
    optim_step::with_flags(
        [&](auto l2, auto decoupled, auto amsgrad) {
          launch_op("Adam.step",
                    adam_kernel<T, decltype(l2)::value, decltype(decoupled)::value, decltype(amsgrad)::value>,
                    blocks_for(n), kThreads, 0, static_cast<T*>(p), static_cast<const T*>(g), static_cast<T*>(m),
                    static_cast<T*>(v), static_cast<T*>(vmax), n, c);
        },
        s.l2, s.decoupled, s.amsgrad);
  });
}

void rmsprop_step(DType t, int64_t n, void* p, const void* g, void* square_avg, void* grad_avg, void* buf,
                  const RmspropStep& s) {
  if (n == 0) return;
  with_float(t, [&](auto tag) {
    using T = decltype(tag);
    const optim_step::RmspropCoeffs<T> c(s);
    optim_step::with_flags(
        [&](auto decay, auto centered, auto mom) {
          launch_op("RMSprop.step",
                    rmsprop_kernel<T, decltype(decay)::value, decltype(centered)::value, decltype(mom)::value>,
                    blocks_for(n), kThreads, 0, static_cast<T*>(p), static_cast<const T*>(g),
                    static_cast<T*>(square_avg), static_cast<T*>(grad_avg), static_cast<T*>(buf), n, c);
        },
        s.weight_decay != 0.0, s.centered, s.momentum > 0.0);
  });
}

}  // namespace gradsleuth::cuda
