// Summaries of a tensor's values for findings: counts of NaN/Inf, and min/max/
// mean/std over the finite values. Used by every check that quotes numbers.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace gradsleuth::debug {

struct TensorSummary {
  int64_t numel = 0;
  int64_t nan = 0, inf = 0;        // non-finite counts
  int64_t finite = 0;              // numel - nan - inf
  double min = 0.0, max = 0.0;     // over the finite values (0 when there are none)
  double mean = 0.0, std = 0.0;    // population std over the finite values
  double norm = 0.0;               // L2 norm over the finite values
  double zero_fraction = 0.0;      // fraction of exact zeros
  bool all_finite() const { return nan == 0 && inf == 0; }
  // "float32[64, 10]: 3 NaN, 0 Inf; finite values in [-2.1, 7.4], mean 0.13, std 1.2"
  std::string str(const Tensor& t) const;
};

// Reads the values (any dtype, any strides) in one pass on the CPU; a device tensor (CUDA) is
// summarised on its device by tensor ops, and only the resulting scalars are copied back.
TensorSummary summarize(const Tensor& t);

// Cheap: true when every value is finite (integral and bool tensors always are). On a device:
// one float64 sum there, one scalar back.
bool all_finite(const Tensor& t);
// Cheaper still, for a check on every training step: every element of tensors
// up to 4096 elements, every `stride`-th element of larger contiguous ones (a
// NaN from the backward spreads over whole rows of the gradients it reaches).
bool sampled_finite(const Tensor& t, int64_t stride = 8);

// "[64, 10]"
std::string shape_of(const Tensor& t);

}  // namespace gradsleuth::debug
