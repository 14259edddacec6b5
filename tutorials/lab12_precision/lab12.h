// Lab 12: reduced precision (README.md in this folder). float16 and bfloat16 bit by bit, a dynamic
// loss scaler and the autocast policy, declared once for your code (lab12.cpp) and the reference
// solution (solution/lab12.cpp); the grader (../grader/grade_lab12.cpp) compares them with the
// engine's own: gs::Half / gs::BFloat16 (Eigen's conversions), optim::GradScaler and the autocast
// table of core/autocast.cpp.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/tensor.h"
#include "optim/optimizer.h"

namespace gradsleuth::lab12 {

// ---- Task 12.1: float32 <-> float16 (IEEE 754 binary16) ---------------------------------
// float16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits. Largest finite value 65504,
// smallest normal 2^-14, smallest subnormal 2^-24.
// The bit pattern of the float16 nearest to f: round to nearest, ties to even; |f| >= 65520 (the
// midpoint between 65504 and the next power of two) gives +-inf; values below the normal range
// become subnormals (or +-0); NaN stays a NaN (any NaN pattern: exponent 31, mantissa != 0).
uint16_t float_to_half_bits(float f);
// The float32 value of a float16 bit pattern: exact for every pattern (+-0, subnormals, +-inf,
// NaN).
float half_bits_to_float(uint16_t h);

// ---- Task 12.2: float32 <-> bfloat16 ----------------------------------------------------
// bfloat16: the upper 16 bits of a float32: 1 sign bit, 8 exponent bits (bias 127), 7 mantissa
// bits. float32's range (largest finite 3.3895e38), 3 significant decimal digits.
// Round to nearest, ties to even, on the 16 bits that are dropped; a value that rounds past the
// largest finite bfloat16 gives +-inf; float32 subnormals become bfloat16 subnormals (or +-0);
// NaN stays a NaN (mind a NaN whose mantissa bits are all in the dropped half).
uint16_t float_to_bfloat16_bits(float f);
// The float32 value of a bfloat16 bit pattern (exact).
float bfloat16_bits_to_float(uint16_t h);

// ---- Task 12.3: a dynamic loss scaler ---------------------------------------------------
// PyTorch's GradScaler (torch.amp.GradScaler) for one optimizer:
//   LossScaler scaler;                 // scale 2^16, x2 after 2000 clean steps, x0.5 on inf/NaN
//   opt.zero_grad();
//   scaler.scale(loss).backward();     // the gradients are scale x the true ones
//   scaler.unscale_(opt);              // optional: the true gradients now (before clipping)
//   scaler.step(opt);                  // opt.step(), skipped when a gradient is inf/NaN
//   scaler.update();                   // back off after an overflow, grow after clean steps
struct ScalerOptions {
  double init_scale = 65536.0;     // > 0 and finite in float32
  double growth_factor = 2.0;      // > 1 and finite
  double backoff_factor = 0.5;     // in (0, 1)
  int64_t growth_interval = 2000;  // >= 1: clean steps in a row before the scale grows
};

class LossScaler {
 public:
  // Checks the options: a value outside its range throws gs::Error("LossScaler", ...) naming it.
  // The scale starts at float(init_scale).
  explicit LossScaler(const ScalerOptions& options = {});
  // loss x the scale (differentiable: the backward of the result gives scale x the gradients).
  Tensor scale(const Tensor& loss);
  // Multiplies every gradient of opt's parameters (param_groups()[g].params[i].grad(), those that
  // are defined) in place by float(1 / scale) and records whether any element is inf or NaN.
  // A second call before update(), or a call after step(), throws gs::Error (the gradients
  // would be divided twice, or after the step used them).
  void unscale_(optim::Optimizer& opt);
  // unscale_(opt) unless it already ran since update(), then opt.step() unless a gradient was
  // inf/NaN. Returns whether opt.step() ran. A second step() before update() throws gs::Error.
  bool step(optim::Optimizer& opt);
  // Ends the iteration (throws gs::Error when step() or unscale_() did not run since the last
  // update). A gradient was inf/NaN: scale = float(scale x backoff_factor) and the count of clean
  // steps restarts at 0. Otherwise the count grows by 1; when it reaches growth_interval it
  // restarts at 0 and scale = float(scale x growth_factor), unless that is inf in float32 (the
  // scale then stays).
  void update();
  double get_scale() const;            // the scale now (a float32 value)
  int64_t get_growth_tracker() const;  // clean steps in a row since the scale last changed

 private:
  ScalerOptions options_;
  double scale_ = 0.0;          // a float32 value, kept in a double
  int64_t growth_tracker_ = 0;  // clean steps in a row
  bool unscaled_ = false;       // unscale_() ran since the last update()
  bool stepped_ = false;        // step() ran since the last update()
  bool found_inf_ = false;      // unscale_() found an inf/NaN gradient since the last update()
};

// ---- Task 12.4: the autocast policy ----------------------------------------------------
// Inside gs::autocast(autocast_dtype), the dtype to which op `op` casts an input of dtype `input`
// before it runs (op names as the engine's ops and modules call themselves: "matmul", "linear",
// "softmax", "cross_entropy", "relu", "add", ...):
//   - the products (matmul, linear, conv2d): autocast_dtype, their speed is in them;
//   - range- or accumulation-sensitive ops (exp, log, pow, sum, mean, softmax, log_softmax,
//     logsumexp, layer_norm, batch_norm and the losses mse_loss, nll_loss, cross_entropy,
//     binary_cross_entropy_with_logits): float32;
//   - binary_cross_entropy: unsafe under autocast, throws gs::Error naming the op and the fix;
//   - every other op: not cast (input; it runs in the promoted dtype of its inputs).
// Only floating inputs are cast, and never float64 (int64, bool and float64 inputs: input).
// autocast_dtype must be float16 or bfloat16: anything else throws gs::Error, whatever the op.
DType autocast_input_dtype(const std::string& op, DType input, DType autocast_dtype);

}  // namespace gradsleuth::lab12
