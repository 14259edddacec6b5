// Lab 7 reference solution (built only with -DGRADSLEUTH_LAB_SOLUTIONS=ON).
// Hunting a NaN: log-sum-exp, anomaly mode, half precision; see ../README.md.
#include "tutorials/lab7_nan/lab7.h"

#include <cmath>
#include <cstring>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/model/anomaly.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "optim/clip.h"
#include "optim/sgd.h"

namespace gradsleuth::lab7 {

// Task 7.1: x - m - log(sum(exp(x - m))); m detached (any constant gives the same value and gradient).
Tensor log_softmax(const Tensor& x) {
  GS_CHECK(x.defined() && x.dim() >= 1 && x.is_floating_point(), "lab7::log_softmax",
           "expects a floating-point tensor (..., K), got ", x.defined() ? x.str() : "an undefined tensor");
  const Tensor m = x.max(-1, /*keepdim=*/true).detach();  // (..., 1)
  const Tensor shifted = x - m;                           // every entry <= 0: exp cannot overflow
  return shifted - shifted.exp().sum({-1}, /*keepdim=*/true).log();
}

// Task 7.2: forward and loss first, then the backward, each observed by anomaly mode.
NanSource find_nan_source(nn::Module& model, const Tensor& x, const Tensor& y) {
  debug::AnomalyMode anomaly;
  anomaly.attach(model);  // names the module each op runs in
  NanSource s;
  Tensor loss;
  {
    auto on = anomaly.enable();
    loss = nn::functional::cross_entropy(model(x), y);
  }
  if (!anomaly.found() && loss.requires_grad()) {
    auto on = anomaly.enable();
    loss.backward();
    s.backward = anomaly.found();
  }
  anomaly.detach();
  if (!anomaly.found()) return s;
  const debug::Finding& f = anomaly.findings().front();
  s.found = true;
  s.op = f.op;
  s.module = f.module;
  return s;
}

// Task 7.3
float half_bits_to_float(uint16_t h) {
  const bool neg = (h >> 15) & 1u;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(mant), -24);  // subnormal (or 0)
  else if (exp == 31)
    v = mant == 0 ? INFINITY : NAN;  // inf or NaN
  else
    v = std::ldexp(static_cast<float>(1024 + mant), exp - 25);  // (1 + m/1024) 2^(e-15)
  return neg ? -v : v;
}

uint16_t float_to_half_bits(float v) {
  uint32_t f;
  std::memcpy(&f, &v, sizeof f);
  const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  if (std::isnan(v)) return sign | 0x7e00u;
  const float a = std::fabs(v);
  if (a >= 65520.0f) return sign | 0x7c00u;  // rounds past 65504: inf
  if (a < 0x1p-14f) {
    // Subnormal: a multiple of 2^-24. a * 2^24 is exact; nearbyint rounds half to even.
    return sign | static_cast<uint16_t>(std::nearbyint(a * 0x1p24f));
  }
  // Normal: a = 1.m * 2^e with e in [-14, 15]; keep 10 of float's 23 mantissa bits, ties to even.
  const uint32_t fa = f & 0x7fffffffu;
  const int e = static_cast<int>(fa >> 23) - 127;
  uint32_t mant = fa & 0x7fffffu;
  const uint32_t rest = mant & 0x1fffu;  // the 13 bits that are dropped
  mant >>= 13;
  uint32_t h = (static_cast<uint32_t>(e + 15) << 10) | mant;
  if (rest > 0x1000u || (rest == 0x1000u && (mant & 1u))) ++h;  // a carry into the exponent is right too
  return sign | static_cast<uint16_t>(h);
}

float round_to_half(float v) { return half_bits_to_float(float_to_half_bits(v)); }

// Task 7.4
Tensor to_half(const Tensor& x) {
  Tensor y = x.detach().to(kFloat32).contiguous().clone();
  float* p = y.data_ptr<float>();
  for (int64_t i = 0, n = y.numel(); i < n; ++i) p[i] = round_to_half(p[i]);
  return y;
}

Tensor softmax_half(const Tensor& x, bool stable) {
  NoGradGuard no_grad;
  Tensor h = to_half(x);
  if (stable) h = to_half(h - h.max(-1, /*keepdim=*/true));  // every entry <= 0
  const Tensor e = to_half(h.exp());
  const Tensor s = to_half(e.sum({-1}, /*keepdim=*/true));
  return to_half(e / s);
}

double half_exp_overflow() {
  // exp(lo) is finite in half, exp(hi) is inf; halve the interval until it is 1e-6 wide.
  double lo = 0.0, hi = 20.0;
  while (hi - lo > 1e-6) {
    const double mid = 0.5 * (lo + hi);
    if (std::isinf(round_to_half(static_cast<float>(std::exp(mid)))))
      hi = mid;
    else
      lo = mid;
  }
  return hi;
}

// Given (the same as in the starter).
Recipe broken_recipe() { return Recipe{/*stable_log_softmax=*/false, /*lr=*/2.0, /*clip_norm=*/0.0}; }

std::shared_ptr<nn::Sequential> make_recipe_model(const Recipe& r, uint64_t seed) {
  manual_seed(seed);
  auto head = std::make_shared<nn::LogSoftmax>(1);
  if (!r.stable_log_softmax) head->inject_bug(nn::Bug::B20);  // log(softmax(x)): nn/activation.cpp
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 128),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10), head);
}

// Task 7.5
GuardedRun train_guarded(nn::Sequential& model, const Recipe& r, nn::DataLoader& loader, int epochs) {
  GuardedRun run;
  optim::SGD opt(model.parameters(), optim::SGDOptions(r.lr));
  model.train();
  int64_t step = 0;
  for (int e = 0; e < epochs; ++e) {
    for (const nn::Batch& b : loader) {
      opt.zero_grad();
      Tensor loss = nn::functional::nll_loss(model(b.x), b.y);
      loss.backward();
      const double value = loss.item<double>();
      // grad_norm is the norm of all gradients together: NaN or inf when any of them is.
      if (!std::isfinite(value) || !std::isfinite(optim::grad_norm(model.parameters()))) {
        run.nan_step = step;  // stop before the step: the weights stay finite
        run.source = find_nan_source(model, b.x, b.y);
        return run;
      }
      if (r.clip_norm > 0.0) optim::clip_grad_norm_(model.parameters(), r.clip_norm);
      opt.step();
      run.losses.push_back(value);
      ++step;
    }
  }
  return run;
}

// Task 7.6: the stable log-softmax, and a learning rate that does not blow the logits up.
Recipe fix_recipe(const Recipe& broken) {
  Recipe r = broken;
  r.stable_log_softmax = true;
  r.lr = 0.1;
  return r;
}

}  // namespace gradsleuth::lab7
