// Lab 12 reference solution: float16 and bfloat16 by hand, a dynamic loss scaler and the autocast
// policy (README.md, Tasks 12.1-12.4).
#include "tutorials/lab12_precision/lab12.h"

#include <cmath>
#include <cstring>

#include "core/autograd.h"
#include "core/error.h"

namespace gradsleuth::lab12 {

namespace {
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace

// Task 12.1. The magnitude is rounded as an integer count of the target's last place: for a
// normal result that is the float32 mantissa (with its hidden 1) shifted right by 13, for a
// subnormal result by 13 + (the missing exponent steps); the carry of a rounding that fills the
// mantissa moves into the exponent by itself (the fields are adjacent).
uint16_t float_to_half_bits(float f) {
  const uint32_t u = bits_of(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((mag >> 13) & 0x3ffu));  // NaN, quiet
  if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 (and inf): inf
  const int exp = static_cast<int>(mag >> 23) - 127;                     // unbiased float32 exponent
  if (exp < -25) return static_cast<uint16_t>(sign);  // below half the smallest subnormal (float32 subnormals too): 0
  uint32_t mant = (mag & 0x7fffffu) | 0x800000u;      // 24 bits with the hidden 1
  int shift = 13;                                     // normal: drop 13 bits
  uint32_t base = static_cast<uint32_t>(exp + 15) << 10;
  if (exp < -14) {  // subnormal in float16: fewer mantissa bits survive
    shift = 13 + (-14 - exp);
    base = 0;
  } else {
    mant &= 0x7fffffu;  // the hidden 1 is in the exponent field now
  }
  const uint32_t kept = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  uint32_t r = base + kept;
  if (rest > half || (rest == half && (kept & 1u))) r += 1;  // ties to even
  return static_cast<uint16_t>(sign | r);
}

float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 31) return float_of(sign | 0x7f800000u | (m << 13));            // inf, NaN (payload kept)
  if (e != 0) return float_of(sign | ((e - 15 + 127) << 23) | (m << 13));  // normal
  const float v = std::ldexp(static_cast<float>(m), -24);                  // subnormal or 0: exact
  return sign ? -v : v;
}

// Task 12.2. Adding 0x7fff plus the lowest kept bit rounds the dropped half to nearest, ties to
// even, and carries into the exponent (up to inf) by itself; NaN first, or a NaN whose payload
// lies in the dropped bits would become inf.
uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN, quiet
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16);
}

float bfloat16_bits_to_float(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

// Task 12.3.
LossScaler::LossScaler(const ScalerOptions& o) : options_(o) {
  GS_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0.0 && std::isfinite(static_cast<float>(o.init_scale)),
           "LossScaler", "init_scale must be > 0 and finite in float32, got ", o.init_scale);
  GS_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1.0, "LossScaler",
           "growth_factor must be > 1 and finite, got ", o.growth_factor);
  GS_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0, "LossScaler", "backoff_factor must be in (0, 1), got ",
           o.backoff_factor);
  GS_CHECK(o.growth_interval >= 1, "LossScaler", "growth_interval must be >= 1, got ", o.growth_interval);
  scale_ = static_cast<float>(o.init_scale);
}

Tensor LossScaler::scale(const Tensor& loss) { return loss.mul(scale_); }

void LossScaler::unscale_(optim::Optimizer& opt) {
  GS_CHECK(!unscaled_, "LossScaler.unscale_",
           "already called since the last update(): the gradients would be "
           "divided by the scale twice");
  GS_CHECK(!stepped_, "LossScaler.unscale_", "called after step(): call it before step(), or update() first");
  const float inv = static_cast<float>(1.0 / scale_);
  NoGradGuard no_grad;
  for (optim::ParamGroup& group : opt.param_groups())
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      g.mul_(static_cast<double>(inv));
      if (g.isnan().sum().item<int64_t>() + g.isinf().sum().item<int64_t>() > 0) found_inf_ = true;
    }
  unscaled_ = true;
}

bool LossScaler::step(optim::Optimizer& opt) {
  GS_CHECK(!stepped_, "LossScaler.step",
           "already called since the last update(): call update() once per "
           "iteration, after step()");
  if (!unscaled_) unscale_(opt);
  stepped_ = true;
  if (found_inf_) return false;
  opt.step();
  return true;
}

void LossScaler::update() {
  GS_CHECK(unscaled_ || stepped_, "LossScaler.update",
           "no step() or unscale_() since the last update(): nothing was checked for inf/NaN");
  if (found_inf_) {
    scale_ = static_cast<float>(scale_ * options_.backoff_factor);
    growth_tracker_ = 0;
  } else if (growth_tracker_ + 1 == options_.growth_interval) {
    const float grown = static_cast<float>(scale_ * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  } else {
    growth_tracker_ += 1;
  }
  unscaled_ = stepped_ = found_inf_ = false;
}

double LossScaler::get_scale() const { return scale_; }
int64_t LossScaler::get_growth_tracker() const { return growth_tracker_; }

// Task 12.4.
DType autocast_input_dtype(const std::string& op, DType input, DType autocast_dtype) {
  GS_CHECK(autocast_dtype == kFloat16 || autocast_dtype == kBFloat16, "autocast",
           "the autocast dtype must be float16 or bfloat16, got ", dtype_name(autocast_dtype));
  static const char* const low[] = {"matmul", "linear", "conv2d"};
  static const char* const f32[] = {"exp",           "log",
                                    "pow",           "sum",
                                    "mean",          "softmax",
                                    "log_softmax",   "logsumexp",
                                    "layer_norm",    "batch_norm",
                                    "mse_loss",      "nll_loss",
                                    "cross_entropy", "binary_cross_entropy_with_logits"};
  GS_CHECK(op != "binary_cross_entropy", op,
           "is unsafe to autocast: use binary_cross_entropy_with_logits on the logits, or switch autocast off "
           "around it");
  const bool castable = input == kFloat32 || input == kFloat16 || input == kBFloat16;
  if (!castable) return input;
  for (const char* name : low)
    if (op == name) return autocast_dtype;
  for (const char* name : f32)
    if (op == name) return kFloat32;
  return input;
}

}  // namespace gradsleuth::lab12
