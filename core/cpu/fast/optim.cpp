// The CPU backend's fused optimizer steps: the element updates of core/optim_step.h in loops
// split across threads, with the options as compile-time flags so each variant vectorises.
#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/fast.h"
#include "core/optim_step.h"

#include <algorithm>
#include <array>
#include <initializer_list>
#include <type_traits>

namespace gradsleuth::cpu::fast {

namespace {

// T* of a state tensor, or nullptr when the options leave it undefined.
template <class T>
T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.raw_data()) : nullptr;
}

// Calls f(float{}) or f(double{}); false for any other dtype.
template <class F>
bool with_float_type(DType t, F&& f) {
  if (t == DType::Float32) {
    f(float{});
    return true;
  }
  if (t == DType::Float64) {
    f(double{});
    return true;
  }
  return false;
}

// Every defined tensor contiguous with p's dtype.
bool fusable(const Tensor& p, std::initializer_list<const Tensor*> others) {
  if (!p.is_contiguous()) return false;
  for (const Tensor* t : others)
    if (t->defined() && (!t->is_contiguous() || t->dtype() != p.dtype() || !t->device().is_cpu())) return false;
  return true;
}

// Runs step(j) for every element j of p, split across threads; with a RoundedCopy for a float32
// p, each block of kCopyBlock elements is then rounded into the copy while it is in cache.
constexpr int64_t kCopyBlock = 2048;
template <class T, class Step>
void each_element(const Tensor& p, const RoundedCopy& copy, Step&& step) {
  const bool to_copy = std::is_same_v<T, float> && copy.data != nullptr && is_reduced_float(copy.dtype);
  parallel_for(p.numel(), kParallelGrain, [&](int64_t b, int64_t e) {
    if (!to_copy) {
      for (int64_t j = b; j < e; ++j) step(j);
      return;
    }
    if constexpr (std::is_same_v<T, float>) {
      const float* pp = static_cast<const float*>(p.raw_data());
      for (int64_t j0 = b; j0 < e; j0 += kCopyBlock) {
        const int64_t j1 = std::min(e, j0 + kCopyBlock);
        for (int64_t j = j0; j < j1; ++j) step(j);
        narrow_floats(copy.dtype, static_cast<uint16_t*>(copy.data) + j0, pp + j0, j1 - j0);
      }
    }
  });
  if (to_copy && copy.written != nullptr) *copy.written = true;
}

// A step over operands some of which are float16/bfloat16 (fast.h's sgd_step_reduced): ts[0] is
// the parameter; undefined operands are passed on as nullptr. step(q, n) updates elements 0..n-1 of
// the float32 arrays q. A float32 parameter with a RoundedCopy has each chunk rounded into it.
constexpr int64_t kChunk = 512;
template <size_t N, class Step>
bool each_chunk_reduced(const std::array<const Tensor*, N>& ts, const std::array<bool, N>& writes,
                        const RoundedCopy& copy, Step&& step) {
  const Tensor& p = *ts[0];
  bool any = false;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    const DType d = t->dtype();
    if (!t->is_contiguous() || !t->device().is_cpu() || t->numel() != p.numel() ||
        (d != DType::Float32 && !is_reduced_float(d)))
      return false;
    any |= is_reduced_float(d);
  }
  if (!any) return false;
  const bool to_copy = p.dtype() == DType::Float32 && copy.data != nullptr && is_reduced_float(copy.dtype);
  parallel_for(p.numel(), kParallelGrain, [&](int64_t b, int64_t e) {
    alignas(64) float wide[N][kChunk];
    std::array<float*, N> q{};
    for (int64_t j0 = b; j0 < e; j0 += kChunk) {
      const int64_t n = std::min(e, j0 + kChunk) - j0;
      for (size_t i = 0; i < N; ++i) {
        const Tensor& t = *ts[i];
        if (!t.defined()) {
          q[i] = nullptr;
        } else if (t.dtype() == DType::Float32) {
          q[i] = static_cast<float*>(t.raw_data()) + j0;
        } else {
          q[i] = wide[i];
          widen_floats(t.dtype(), wide[i], static_cast<const uint16_t*>(t.raw_data()) + j0, n);
        }
      }
      step(q, n);
      for (size_t i = 0; i < N; ++i)
        if (writes[i] && ts[i]->defined() && ts[i]->dtype() != DType::Float32)
          narrow_floats(ts[i]->dtype(), static_cast<uint16_t*>(ts[i]->raw_data()) + j0, wide[i], n);
      if (to_copy) narrow_floats(copy.dtype, static_cast<uint16_t*>(copy.data) + j0, q[0], n);
    }
  });
  if (to_copy && copy.written != nullptr) *copy.written = true;
  return true;
}

}  // namespace

bool sgd_step_reduced(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStep& s) {
  const bool momentum = s.momentum != 0.0;
  if (momentum && !buf.defined()) return false;
  const optim_step::SgdCoeffs<float> c(s);
  bool done = false;
  optim_step::with_flags(
      [&](auto decay, auto mom, auto nesterov, auto first) {
        done = each_chunk_reduced<3>({&p, &g, &buf}, {true, false, true}, s.copy, [&](auto& q, int64_t n) {
          float* __restrict pp = q[0], * __restrict bp = q[2];
          const float* __restrict gp = q[1];
          for (int64_t k = 0; k < n; ++k)
            optim_step::sgd_element<float, decltype(decay)::value, decltype(mom)::value, decltype(nesterov)::value,
                                    decltype(first)::value>(k, pp, gp, bp, c);
        });
      },
      s.weight_decay != 0.0, momentum, s.nesterov, s.first);
  return done;
}

bool adam_step_reduced(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                       const AdamStep& s) {
  if (!m.defined() || !v.defined() || (s.amsgrad && !vmax.defined())) return false;
  const optim_step::AdamCoeffs<float> c(s);
  const Tensor none;
  bool done = false;
  optim_step::with_flags(
      [&](auto l2, auto decoupled, auto amsgrad) {
        done = each_chunk_reduced<5>({&p, &g, &m, &v, s.amsgrad ? &vmax : &none}, {true, false, true, true, true},
                                     s.copy, [&](auto& q, int64_t n) {
                                       for (int64_t k = 0; k < n; ++k)
                                         optim_step::adam_element<float, decltype(l2)::value,
                                                                  decltype(decoupled)::value, decltype(amsgrad)::value>(
                                             k, q[0], q[1], q[2], q[3], q[4], c);
                                     });
      },
      s.l2, s.decoupled, s.amsgrad);
  return done;
}

bool sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStep& s) {
  if (!fusable(p, {&g, &buf})) return false;
  const bool momentum = s.momentum != 0.0;
  if (momentum && !buf.defined()) return false;
  return with_float_type(p.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T *pp = ptr<T>(p), *bp = momentum ? ptr<T>(buf) : nullptr;
    const T* gp = ptr<T>(g);
    const optim_step::SgdCoeffs<T> c(s);
    optim_step::with_flags(
        [&](auto decay, auto mom, auto nesterov, auto first) {
          each_element<T>(p, s.copy, [&](int64_t j) {
            optim_step::sgd_element<T, decltype(decay)::value, decltype(mom)::value, decltype(nesterov)::value,
                                    decltype(first)::value>(j, pp, gp, bp, c);
          });
        },
        s.weight_decay != 0.0, momentum, s.nesterov, s.first);
  });
}

bool adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
               const AdamStep& s) {
  if (!fusable(p, {&g, &m, &v, &vmax}) || !m.defined() || !v.defined() || (s.amsgrad && !vmax.defined())) return false;
  return with_float_type(p.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T *pp = ptr<T>(p), *mp = ptr<T>(m), *vp = ptr<T>(v), *xp = s.amsgrad ? ptr<T>(vmax) : nullptr;
    const T* gp = ptr<T>(g);
    const optim_step::AdamCoeffs<T> c(s);
    optim_step::with_flags(
        [&](auto l2, auto decoupled, auto amsgrad) {
          each_element<T>(p, s.copy, [&](int64_t j) {
            optim_step::adam_element<T, decltype(l2)::value, decltype(decoupled)::value, decltype(amsgrad)::value>(
                j, pp, gp, mp, vp, xp, c);
          });
        },
        s.l2, s.decoupled, s.amsgrad);
  });
}

bool rmsprop_step(const Tensor& p, const Tensor& g, const Tensor& square_avg, const Tensor& grad_avg, const Tensor& buf,
                  const RmspropStep& s) {
  const bool momentum = s.momentum > 0.0;
  if (!fusable(p, {&g, &square_avg, &grad_avg, &buf}) || !square_avg.defined() || (s.centered && !grad_avg.defined()) ||
      (momentum && !buf.defined()))
    return false;
  return with_float_type(p.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T *pp = ptr<T>(p), *sp = ptr<T>(square_avg), *ap = s.centered ? ptr<T>(grad_avg) : nullptr,
      *bp = momentum ? ptr<T>(buf) : nullptr;
    const T* gp = ptr<T>(g);
    const optim_step::RmspropCoeffs<T> c(s);
    optim_step::with_flags(
        [&](auto decay, auto centered, auto mom) {
          parallel_for(p.numel(), kParallelGrain, [&](int64_t b, int64_t e) {
            for (int64_t j = b; j < e; ++j)
              optim_step::rmsprop_element<T, decltype(decay)::value, decltype(centered)::value, decltype(mom)::value>(
                  j, pp, gp, sp, ap, bp, c);
          });
        },
        s.weight_decay != 0.0, s.centered, momentum);
  });
}

}  // namespace gradsleuth::cpu::fast
