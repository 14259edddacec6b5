// core/optim_step.h: the fused optimizer updates (SGD, Adam/AdamW, RMSprop), one element at a
// time, shared by the CPU backend (core/cpu/fast/optim.cpp) and the CUDA backend (cuda/optim.cu), so
// both devices run one formula. Plain C++ that nvcc also compiles: no core/tensor.h here.
#pragma once
#include <math.h>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/host_device.h"

namespace gradsleuth {

// A 16-bit copy of a float32 parameter that a fused step also writes, each new value rounded to
// it as it is computed (while the values are still in cache): the parameter's float16/bfloat16
// copy that autocast keeps (core/autocast.h), or, with float32 master weights, the 16-bit
// parameter itself. `dtype` is float16 or bfloat16 (float32: none). A kernel that wrote it sets
// *written; one that cannot leaves it, and the caller rounds in a pass of its own.
struct RoundedCopy {
  void* data = nullptr;
  DType dtype = DType::Float32;
  bool* written = nullptr;
};

// The numbers of one step, in float64; the kernels round them to the parameter's type.
struct SgdStep {
  double lr = 0, weight_decay = 0, momentum = 0, dampening = 0;
  bool nesterov = false;
  bool first = false;  // the momentum buffer's first step: it starts as the gradient
  RoundedCopy copy;    // float32 parameters on the CPU only
};
struct AdamStep {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0, lr = 0;
  double step_size = 0;    // lr / (1 - beta1^t)
  double bc2_sqrt = 1;     // sqrt(1 - beta2^t)
  bool l2 = false;         // Adam's weight decay: g += wd * p
  bool decoupled = false;  // AdamW's: p *= 1 - lr * wd
  bool amsgrad = false;
  RoundedCopy copy;        // float32 parameters on the CPU only
};
struct RmspropStep {
  double lr = 0, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0;
  bool centered = false;
};

namespace optim_step {

// with_flags(f, a, b) calls f(std::bool_constant<a>{}, std::bool_constant<b>{}): inside f,
// `if constexpr (A)` removes the branch from the loop.
template <class F>
void with_flags(F&& f) {
  f();
}
template <class F, class... Rest>
void with_flags(F&& f, bool first, Rest... rest) {
  if (first) {
    with_flags([&](auto... flags) { f(std::true_type{}, flags...); }, rest...);
  } else {
    with_flags([&](auto... flags) { f(std::false_type{}, flags...); }, rest...);
  }
}

template <class T>
struct SgdCoeffs {
  T lr, wd, mom, keep;  // keep = 1 - dampening
  explicit SgdCoeffs(const SgdStep& s)
      : lr(static_cast<T>(s.lr)),
        wd(static_cast<T>(s.weight_decay)),
        mom(static_cast<T>(s.momentum)),
        keep(static_cast<T>(1.0 - s.dampening)) {}
};

// Element j of SGD. buf is unused without Momentum.
template <class T, bool Decay, bool Momentum, bool Nesterov, bool First>
GS_HOST_DEVICE inline void sgd_element(int64_t j, T* __restrict p, const T* __restrict g, T* __restrict buf,
                                       const SgdCoeffs<T>& c) {
  T d = g[j];
  if constexpr (Decay) d = d + c.wd * p[j];
  if constexpr (Momentum) {
    T b;
    if constexpr (First) {
      b = d;
    } else {
      b = buf[j] * c.mom + d * c.keep;
    }
    buf[j] = b;
    if constexpr (Nesterov) {
      d = d + b * c.mom;
    } else {
      d = b;
    }
  }
  p[j] = p[j] - c.lr * d;
}

template <class T>
struct AdamCoeffs {
  T beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, step_size, bc2_sqrt, decay;
  explicit AdamCoeffs(const AdamStep& s)
      : beta1(static_cast<T>(s.beta1)),
        beta2(static_cast<T>(s.beta2)),
        one_minus_beta1(static_cast<T>(1.0 - s.beta1)),
        one_minus_beta2(static_cast<T>(1.0 - s.beta2)),
        eps(static_cast<T>(s.eps)),
        weight_decay(static_cast<T>(s.weight_decay)),
        step_size(static_cast<T>(s.step_size)),
        bc2_sqrt(static_cast<T>(s.bc2_sqrt)),
        decay(static_cast<T>(1.0 - s.lr * s.weight_decay)) {}
};

// Element j of Adam/AdamW. vmax is unused without AMSGrad.
template <class T, bool L2, bool Decoupled, bool AMSGrad>
GS_HOST_DEVICE inline void adam_element(int64_t j, T* __restrict p, const T* __restrict g, T* __restrict m,
                                        T* __restrict v, T* __restrict vmax, const AdamCoeffs<T>& c) {
  T pj = p[j], gj = g[j];
  if constexpr (L2) gj = gj + c.weight_decay * pj;
  if constexpr (Decoupled) pj = pj * c.decay;
  const T mj = m[j] * c.beta1 + gj * c.one_minus_beta1;
  T vj = v[j] * c.beta2 + gj * gj * c.one_minus_beta2;
  m[j] = mj;
  v[j] = vj;
  if constexpr (AMSGrad) {
    vj = (vmax[j] < vj || vj != vj) ? vj : vmax[j];  // max that keeps a NaN, like gs::maximum
    vmax[j] = vj;
  }
  const T denom = sqrt(vj) / c.bc2_sqrt + c.eps;
  p[j] = pj - c.step_size * (mj / denom);
}

template <class T>
struct RmspropCoeffs {
  T lr, alpha, one_minus_alpha, eps, weight_decay, momentum;
  explicit RmspropCoeffs(const RmspropStep& s)
      : lr(static_cast<T>(s.lr)),
        alpha(static_cast<T>(s.alpha)),
        one_minus_alpha(static_cast<T>(1.0 - s.alpha)),
        eps(static_cast<T>(s.eps)),
        weight_decay(static_cast<T>(s.weight_decay)),
        momentum(static_cast<T>(s.momentum)) {}
};

// Element j of RMSprop. a is unused unless Centered, buf unless Momentum.
template <class T, bool Decay, bool Centered, bool Momentum>
GS_HOST_DEVICE inline void rmsprop_element(int64_t j, T* __restrict p, const T* __restrict g, T* __restrict s,
                                           T* __restrict a, T* __restrict buf, const RmspropCoeffs<T>& c) {
  T gj = g[j];
  if constexpr (Decay) gj = gj + c.weight_decay * p[j];
  const T sj = s[j] * c.alpha + gj * gj * c.one_minus_alpha;
  s[j] = sj;
  T avg;
  if constexpr (Centered) {
    const T aj = a[j] * c.alpha + gj * c.one_minus_alpha;
    a[j] = aj;
    avg = sqrt(sj - aj * aj) + c.eps;
  } else {
    avg = sqrt(sj) + c.eps;
  }
  if constexpr (Momentum) {
    const T b = buf[j] * c.momentum + gj / avg;
    buf[j] = b;
    p[j] = p[j] - c.lr * b;
  } else {
    p[j] = p[j] - c.lr * (gj / avg);
  }
}

}  // namespace optim_step
}  // namespace gradsleuth
