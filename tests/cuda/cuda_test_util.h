// Shared by the CUDA backend tests: registers the backend once (exit code 77, "skipped", when no
// device exists, as on a GPU-less machine running the nvcc build), and host-side comparisons.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cuda/cuda.h"
#include "gradsleuth.h"

namespace cuda_test {

inline bool registered = [] {
  if (!gs::cuda::init()) {
    std::printf("no CUDA device (%s): CUDA backend tests skipped\n", gs::cuda::unavailable_reason().c_str());
    std::exit(77);
  }
  return true;
}();

// Tolerances scaled to the dtype: float32 results may differ in summation order (block
// trees, cuBLAS) and in libm's last bits; float64 only in summation order.
inline double rtol(gs::DType t) { return t == gs::kFloat32 ? 2e-4 : 1e-9; }
inline double atol(gs::DType t) { return t == gs::kFloat32 ? 2e-5 : 1e-11; }

// "" when a (any device) and b (cpu) agree elementwise within the dtype's tolerance (NaN
// matches NaN, equal infinities match); otherwise the first mismatch.
inline std::string compare(const gs::Tensor& dev, const gs::Tensor& cpu) {
  if (dev.shape() != cpu.shape()) return "shape " + dev.str() + " vs " + cpu.str();
  if (dev.dtype() != cpu.dtype()) return "dtype " + dev.str() + " vs " + cpu.str();
  const std::vector<double> x = dev.to_vector<double>(), y = cpu.to_vector<double>();
  const double rt = rtol(cpu.dtype()), at = atol(cpu.dtype());
  const bool exact = !cpu.is_floating_point();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    if (x[i] == y[i]) continue;
    if (!exact && std::fabs(x[i] - y[i]) <= at + rt * std::fabs(y[i])) continue;
    return "element " + std::to_string(i) + ": cuda " + std::to_string(x[i]) + " vs cpu " + std::to_string(y[i]);
  }
  return "";
}

}  // namespace cuda_test
