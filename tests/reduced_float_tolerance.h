// The tolerance rule for float16/bfloat16 results (docs/dtypes.md, "Accuracy checked"), shared by
// the CPU's accuracy test (test_reduced_float.cpp) and the CUDA-vs-CPU test (cuda/test_cuda_ops.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "core/ops.h"

namespace reduced_float {

// Machine epsilon: the spacing just above 1.
inline double eps_of(gs::DType t) {
  switch (t) {
    case gs::kFloat16: return std::ldexp(1.0, -10);
    case gs::kBFloat16: return std::ldexp(1.0, -7);
    case gs::kFloat32: return std::ldexp(1.0, -23);
    default: return std::ldexp(1.0, -52);
  }
}

// The roundings an op's path can take in a 16-bit dtype, counting the final one: 1 for a single
// kernel (its float32 result rounded once), more for an op composed of several rounded steps
// (softmax(x,-1) * softmax(x,0): three). The tolerance is normwise: the largest error over the
// output is at most k * eps * (the output's largest magnitude, at least 1 for values that
// cancel). Gradients take the backward's roundings too: k doubled plus two.
inline int roundings(const std::string& op) {
  // (var, logsumexp and mean compute in float32 and round once: k = 1, the default.)
  static const std::map<std::string, int> k{
      {"softmax", 3}, {"log_softmax", 3}, {"split", 3},  {"to_dtype", 3}, {"gelu", 4}, {"softplus", 4},
      {"std", 2},     {"linear", 2},      {"conv2d", 2}, {"dropout", 2},  {"add_", 2}, {"leaky_relu", 2},
  };
  auto it = k.find(op);
  return it == k.end() ? 1 : it->second;
}

// Largest |x| over a floating tensor (0 for an empty one), NaN and inf skipped.
inline double max_abs_finite(const gs::Tensor& t) {
  double m = 0;
  for (double v : t.detach().to(gs::kFloat64).contiguous().cpu().to_vector<double>())
    if (std::isfinite(v)) m = std::max(m, std::abs(v));
  return m;
}

// "" when got (16-bit, any device) matches want (any dtype, any device) within k * eps of dtype t
// normwise, with the same NaN/inf pattern; else the first element that differs.
inline std::string compare(const gs::Tensor& got, const gs::Tensor& want, gs::DType t, int k) {
  if (got.shape() != want.shape()) return "shape " + gs::shape_str(got.shape()) + " vs " + gs::shape_str(want.shape());
  const auto g = got.detach().cpu().to(gs::kFloat64).contiguous().to_vector<double>();
  const auto w = want.detach().cpu().to(gs::kFloat64).contiguous().to_vector<double>();
  const double tol = k * eps_of(t) * std::max(1.0, max_abs_finite(want));
  for (size_t i = 0; i < g.size(); ++i) {
    const bool same_special = (std::isnan(g[i]) && std::isnan(w[i])) || (std::isinf(w[i]) && g[i] == w[i]);
    if (same_special) continue;
    if (!std::isfinite(g[i]) || !std::isfinite(w[i]) || std::abs(g[i] - w[i]) > tol)
      return gs::detail::str_cat("element ", i, ": ", g[i], " vs ", w[i], " (tolerance ", tol, ")");
  }
  return "";
}

}  // namespace reduced_float
