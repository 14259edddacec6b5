// Summaries of a tensor's values for findings: counts of NaN/Inf, and min/max/
// mean/std over the finite values. Used by every check that quotes numbers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace gradsleuth::debug {

struct TensorSummary {
  int64_t numel = 0;
  int64_t nan = 0, inf = 0;      // non-finite counts
  int64_t finite = 0;            // numel - nan - inf
  double min = 0.0, max = 0.0;   // over the finite values (0 when there are none)
  double mean = 0.0, std = 0.0;  // population std over the finite values
  double norm = 0.0;             // L2 norm over the finite values
  double zero_fraction = 0.0;    // fraction of exact zeros
  bool all_finite() const { return nan == 0 && inf == 0; }
  // "float32[64, 10]: 3 NaN, 0 Inf; finite values in [-2.1, 7.4], mean 0.13, std 1.2"
  std::string str(const Tensor& t) const;
};

// Reads the values (any dtype, any strides) in one pass on the CPU; a device tensor (CUDA) is
// summarised on its device by tensor ops, and only the resulting scalars are copied back.
TensorSummary summarize(const Tensor& t);
// Only the norm and the NaN/Inf counts (numel, finite, nan, inf, norm; the rest as a default
// TensorSummary has them), in a lighter pass on the CPU: what a gradient's health and its norm
// history need. Shares a SummaryCache with summarize().
TensorSummary summarize_norm(const Tensor& t);

// While one is alive on this thread, summarize() (and summarize_norm()) remembers its result for each contiguous CPU
// tensor it read and returns it again for the same data (same address, size, dtype and storage
// version): the monitor's sampled step reads every gradient for O2/O3's norms and again for O1's
// health, and this makes that one pass. Keep its scope short (one step), where the tensors read
// stay alive: a freed buffer reused at the same address with the same version would be taken for
// the old one.
class SummaryCache {
 public:
  SummaryCache();
  ~SummaryCache();
  SummaryCache(const SummaryCache&) = delete;
  SummaryCache& operator=(const SummaryCache&) = delete;
  int64_t hits() const { return hits_; }

 private:
  friend TensorSummary summarize(const Tensor& t);
  friend TensorSummary summarize_norm(const Tensor& t);
  struct Entry {
    const void* data;
    int64_t numel;
    DType dtype;
    uint64_t version;
    TensorSummary summary;
    bool full;  // summarize()'s (else summarize_norm()'s: the norm and the counts only)
  };
  Entry* find(const Tensor& t);  // the entry for t's data (address, size, dtype, version), or null
  std::vector<Entry> entries_;
  int64_t hits_ = 0;
  SummaryCache* outer_;
};

// Cheap: true when every value is finite (integral and bool tensors always are). On a device:
// one float64 sum there, one scalar back.
bool all_finite(const Tensor& t);
// The sum of squares of n values in float64 (of the differences a - b, each taken in float32),
// vectorised; false when a value of a is NaN or Inf (the sum is then not meaningful).
bool sum_of_squares(const float* a, int64_t n, double& squares);
bool sum_of_squares(const double* a, int64_t n, double& squares);
bool sum_of_squared_differences(const float* a, const float* b, int64_t n, double& squares);

// True when the tensor holds values and every one is exactly zero (NaN and Inf are not zero). On
// the CPU it stops at the first nonzero value, so a healthy tensor costs a few cache lines.
bool all_zero(const Tensor& t);
// Cheaper still, for a check on every training step: every element of tensors up to 4096
// elements and of 1-D ones; of larger contiguous ones, seen as (dimension 0, the rest), the first
// row whole and the first element of every row. A NaN from the backward fills whole rows or whole
// columns of the weight gradients it reaches (it enters through one output unit's gradient: a
// row, or one input value: a column, and 0 x NaN is NaN), so one row and one column meet it:
// about (rows + the rest / 16) cache lines, a few percent of the tensor. A NaN confined to a few
// entries elsewhere is left to the full read of the sampled steps.
bool sampled_finite(const Tensor& t);

// "[64, 10]"
std::string shape_of(const Tensor& t);

// How a random layer's training-mode output `drawn` differs from its eval-mode output `reference` (same
// shape): whether it is a mask (every changed entry zero, every other one a common multiple of the
// reference, as dropout's), and whether the zeroed entries are an occlusion (a patch of each spatial
// plane, as Cutout's or random erasing's, not scattered entries nor whole planes).
struct MaskPattern {
  bool mask = false;       // zeros, and the rest c x reference for one c
  double multiple = 1.0;   // that c (1 / (1 - p) for inverted dropout)
  double zeroed = 0.0;     // the share of the nonzero reference entries zeroed
  bool occlusion = false;  // inputs of 3 or more dims: zeroed runs along the last dim, planes only in part
};
MaskPattern mask_pattern(const Tensor& drawn, const Tensor& reference);

}  // namespace gradsleuth::debug
