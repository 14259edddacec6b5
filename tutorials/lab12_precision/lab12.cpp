// Lab 12 starter code: float16 and bfloat16 by hand, a dynamic loss scaler and the autocast policy
// (README.md, Tasks 12.1-12.4). Replace each `throw` marked TODO with your code, rebuild and grade:
//   ./run.sh lab check 12
// Write the conversions yourself, on the bits: the grader compares them with the engine's
// (gs::Half, gs::BFloat16), so calling those would only grade the engine.
#include "tutorials/lab12_precision/lab12.h"

#include <cmath>
#include <cstring>

#include "core/autograd.h"
#include "core/error.h"

namespace gradsleuth::lab12 {

// TODO(lab 12, task 1): take the float's 32 bits (std::memcpy into a uint32_t), split sign,
// exponent (8 bits, bias 127) and mantissa (23 bits). Handle NaN (keep it a NaN: exponent 31 and a
// mantissa with its top bit set), then |f| >= 65520 (inf), then values too small for a subnormal
// (0). For the rest, the kept bits are the mantissa (with its hidden 1 for a subnormal result)
// shifted right by 13, or by more for a subnormal; round the dropped bits to nearest, ties to
// even. A rounding that carries out of the mantissa may simply carry into the exponent field.
uint16_t float_to_half_bits(float f) {
  throw Error("lab 12", "not implemented: lab 12 task 1 (float_to_half_bits in tutorials/lab12_precision/lab12.cpp)");
}

// TODO(lab 12, task 1): exponent 31: inf or NaN; exponent 0: m x 2^-24 (subnormal, or +-0);
// otherwise a normal number: float32 exponent = e - 15 + 127, mantissa m << 13. Keep the sign
// (also of -0).
float half_bits_to_float(uint16_t h) {
  throw Error("lab 12", "not implemented: lab 12 task 1 (half_bits_to_float in tutorials/lab12_precision/lab12.cpp)");
}

// TODO(lab 12, task 2): bfloat16 is the upper half of the float32. Round the lower 16 bits to
// nearest, ties to even: add 0x7fff plus the lowest bit you keep, then shift right by 16 (the
// carry runs into the exponent, up to inf, by itself). NaN first: a NaN whose payload lies only in
// the lower 16 bits would otherwise come out as inf.
uint16_t float_to_bfloat16_bits(float f) {
  throw Error("lab 12",
              "not implemented: lab 12 task 2 (float_to_bfloat16_bits in tutorials/lab12_precision/lab12.cpp)");
}

// TODO(lab 12, task 2): the 16 bits are the upper half of the float32.
float bfloat16_bits_to_float(uint16_t h) {
  throw Error("lab 12",
              "not implemented: lab 12 task 2 (bfloat16_bits_to_float in tutorials/lab12_precision/lab12.cpp)");
}

// TODO(lab 12, task 3): check each option (GS_CHECK(cond, "LossScaler", "what, got ", value)),
// keep them in options_ and start scale_ at static_cast<float>(init_scale).
LossScaler::LossScaler(const ScalerOptions& options) : options_(options) {
  throw Error("lab 12", "not implemented: lab 12 task 3 (LossScaler in tutorials/lab12_precision/lab12.cpp)");
}

// TODO(lab 12, task 3): loss times the scale, as a tensor op (so that backward sees it).
Tensor LossScaler::scale(const Tensor& loss) {
  throw Error("lab 12", "not implemented: lab 12 task 3 (LossScaler::scale in tutorials/lab12_precision/lab12.cpp)");
}

// TODO(lab 12, task 3): refuse a second call and a call after step(). Under a NoGradGuard,
// multiply each defined gradient in place by static_cast<float>(1.0 / scale_) (g.mul_(...)), and
// set found_inf_ when one holds inf or NaN (g.isnan(), g.isinf()). Then unscaled_ = true.
void LossScaler::unscale_(optim::Optimizer& opt) {
  throw Error("lab 12", "not implemented: lab 12 task 3 (LossScaler::unscale_ in tutorials/lab12_precision/lab12.cpp)");
}

// TODO(lab 12, task 3): refuse a second call; unscale_ unless it ran; skip opt.step() when
// found_inf_. Return whether the step ran.
bool LossScaler::step(optim::Optimizer& opt) {
  throw Error("lab 12", "not implemented: lab 12 task 3 (LossScaler::step in tutorials/lab12_precision/lab12.cpp)");
}

// TODO(lab 12, task 3): back off on found_inf_, else count the clean step and grow the scale
// every growth_interval of them (unless the grown scale is inf in float32); then reset the flags
// of this iteration.
void LossScaler::update() {
  throw Error("lab 12", "not implemented: lab 12 task 3 (LossScaler::update in tutorials/lab12_precision/lab12.cpp)");
}

double LossScaler::get_scale() const {
  throw Error("lab 12",
              "not implemented: lab 12 task 3 (LossScaler::get_scale in tutorials/lab12_precision/lab12.cpp)");
}

int64_t LossScaler::get_growth_tracker() const {
  throw Error("lab 12",
              "not implemented: lab 12 task 3 (LossScaler::get_growth_tracker in tutorials/lab12_precision/lab12.cpp)");
}

// TODO(lab 12, task 4): refuse an autocast dtype that is not float16 or bfloat16, and
// binary_cross_entropy (name the fix in the message); leave inputs that are not float32, float16
// or bfloat16 alone; then your table: the products to autocast_dtype, the range-sensitive ops to
// float32, every other op unchanged (lab12.h lists them; README.md says why).
DType autocast_input_dtype(const std::string& op, DType input, DType autocast_dtype) {
  throw Error("lab 12", "not implemented: lab 12 task 4 (autocast_input_dtype in tutorials/lab12_precision/lab12.cpp)");
}

}  // namespace gradsleuth::lab12
