// One property-drawn case of a registry op run in a lower precision and in float64 on the same
// rounded inputs, forward and backward, compared with the tolerance rule of docs/dtypes.md.
#pragma once
#include <cmath>
#include <string>

#include "core/autograd.h"
#include "tests/prop_gen.h"
#include "tests/reduced_float_tolerance.h"

namespace proptest {

using reduced_float::eps_of;
using reduced_float::max_abs_finite;

// "" when `got` (dtype t) matches `want` (float64) within k * eps normwise — the norm being the
// largest finite magnitude of the reference rounded to t, at least `floor` — plus k subnormal
// spacings. At the overflow edge: where the reference is within a factor 4 of t's max, a sum of
// terms past the max may give inf or NaN (any sign); a reference that rounds to inf accepts a
// result within a factor 4 of the max of its sign; NaN matches NaN.
inline std::string compare_rounded(const Tensor& got, const Tensor& want, DType t, double k, double floor) {
  if (got.shape() != want.shape()) return "shape " + gs::shape_str(got.shape()) + " vs " + gs::shape_str(want.shape());
  const auto g = got.detach().to(gs::kFloat64).contiguous().to_vector<double>();
  const auto w = want.detach().to(gs::kFloat64).contiguous().to_vector<double>();
  const auto wr = want.detach().to(t).to(gs::kFloat64).contiguous().to_vector<double>();
  const double e = eps_of(t), edge = max_of(t) / 4;
  double norm = floor;
  for (double v : wr)
    if (std::isfinite(v)) norm = std::max(norm, std::abs(v));
  const double tol = k * e * norm + k * std::ldexp(1.0, min_exp(t));
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i]) && std::isnan(w[i])) continue;
    if (std::isnan(g[i]) && std::isinf(wr[i])) continue;  // an overflow: infinities of both signs met
    if (!std::isfinite(g[i]) && std::abs(w[i]) >= edge) continue;  // terms past the max may meet
    if (std::isinf(wr[i]) && std::abs(g[i]) >= edge && std::signbit(g[i]) == std::signbit(w[i])) continue;
    if (std::isfinite(g[i]) && std::isfinite(wr[i]) && std::abs(g[i] - wr[i]) <= tol) continue;
    return gs::detail::str_cat("element ", i, " of ", g.size(), ": ", g[i], " vs float64 ", w[i], " (rounded ", wr[i],
                               ", tolerance ", tol, ")");
  }
  return "";
}

inline Tensor as_leaf(const Tensor& x) {
  return x.is_floating_point() ? x.detach().requires_grad_(true) : x;
}

// Runs `spec` of `op` in dtype t and in float64 (`ref`: float64, or float32 for dropout, whose mask a
// 16-bit input shares), forward and, for a differentiable op, backward under a weighted sum; "" when
// they agree within `k` roundings (2k + 2 for gradients). A refusal must name the op and the dtype.
inline std::string check_case(const gs::OpInfo& op, const Spec& spec, DType t, double k) {
  const DType ref = op.name == "dropout" && t != gs::kFloat64 ? gs::kFloat32 : gs::kFloat64;
  Case lo = make(op, spec, t, t), hi = make(op, spec, t, ref);
  double floor = spec.mode == Mode::Tiny ? 0.0 : 1.0;
  if (op.category == "reduction" || op.category == "linalg" || op.category == "nn")
    for (const Tensor& x : hi.inputs)
      if (x.is_floating_point()) floor = std::max(floor, max_abs_finite(x));
  Tensor got;
  try {
    got = lo.fn(lo.inputs);
  } catch (const gs::Error& e) {
    const std::string msg = e.what();
    try {
      hi.fn(hi.inputs);
    } catch (const gs::Error&) {
      return "";  // not a valid input in float64 either (a shrunk geometry)
    }
    if (msg.find(op.name) == std::string::npos || msg.find(gs::dtype_name(t)) == std::string::npos)
      return "refused without naming the op and dtype: " + msg;
    return "";
  }
  Tensor want = hi.fn(hi.inputs);
  const DType expect = want.is_floating_point() ? t : want.dtype();
  if (got.dtype() != expect) return std::string("gave ") + gs::dtype_name(got.dtype()) + ", expected " + gs::dtype_name(expect);
  // Sums of products (matmul, linear, conv2d): the accumulator's error is relative to the terms,
  // K |a| |b|, not to the result, which may cancel.
  const bool products = op.category == "linalg" || is_conv(op.name);
  double terms = 0;
  if (products && hi.inputs.size() >= 2) {
    int64_t longest = 1;
    for (const Tensor& x : hi.inputs) longest = std::max(longest, x.numel());
    const double acc = t == gs::kFloat64 ? eps_of(gs::kFloat64) : std::ldexp(1.0, -24);
    terms = max_abs_finite(hi.inputs[0]) * max_abs_finite(hi.inputs[1]) * static_cast<double>(longest) * acc / eps_of(t);
  }
  if (std::string d = compare_rounded(got, want, t, k, std::max(floor, terms)); !d.empty()) return "forward: " + d;
  if (!op.differentiable) return "";
  // An output that overflowed t where float64's did not: its gradient has nothing to match.
  {
    const auto o_lo = got.detach().to(gs::kFloat64).contiguous().to_vector<double>();
    const auto o_hi = want.detach().to(gs::kFloat64).contiguous().to_vector<double>();
    for (size_t i = 0; i < o_lo.size(); ++i)
      if (!std::isfinite(o_lo[i]) && std::isfinite(o_hi[i])) return "";
  }
  tensor_list g_lo, g_hi;
  for (const Tensor& x : lo.inputs) g_lo.push_back(as_leaf(x));
  for (const Tensor& x : hi.inputs) g_hi.push_back(as_leaf(x));
  Tensor o_lo = lo.fn(g_lo), o_hi = hi.fn(g_hi);
  gs::Generator wg(spec.seed);
  // Upstream weights in [1, 2], values of t; a 64th of that beside values near the max, so that
  // the gradients' own products stay in range.
  Tensor w = gs::rand(o_lo.shape(), gs::TensorOptions(t), &wg) + 1.0;
  if (spec.mode == Mode::Huge || spec.mode == Mode::Spread) w = w * (1.0 / 64);
  gs::sum(o_lo * w).backward();
  gs::sum(o_hi * w.to(o_hi.dtype())).backward();
  for (size_t i = 0; i < g_lo.size(); ++i) {
    if (!g_lo[i].is_floating_point()) continue;
    Tensor a = g_lo[i].grad(), b = g_hi[i].grad();
    if (!a.defined() || !b.defined()) {
      if (a.defined() != b.defined()) return "gradient defined in one dtype only";
      continue;
    }
    if (a.dtype() != t) return std::string("gradient is ") + gs::dtype_name(a.dtype());
    double gterms = 0;
    if (products) {
      double m = 0;
      for (const Tensor& x : hi.inputs) m = std::max(m, max_abs_finite(x));
      gterms = terms / std::max(1e-300, std::min(max_abs_finite(hi.inputs[0]), max_abs_finite(hi.inputs[1]))) * m *
               max_abs_finite(w);
    }
    if (std::string d = compare_rounded(a, b, t, 2 * k + 2, std::max(floor, gterms)); !d.empty())
      return "gradient of input " + std::to_string(i) + ": " + d;
  }
  return "";
}

// Runs `spec` of `op` in dtype t (float32 or float64) on the CPU and on `dev`, forward and, for a
// differentiable op, backward under the same weighted sum; "" when the device matches the CPU within
// `k` roundings of t (normwise, as compare_rounded; sums of products relative to their terms).
inline std::string check_on_device(const gs::OpInfo& op, const Spec& spec, DType t, gs::Device dev, double k) {
  Case c = make(op, spec, t, t);
  auto run = [&](gs::Device d, Tensor* out, tensor_list* grads) {
    tensor_list xs;
    for (const Tensor& x : c.inputs) {
      Tensor y = x.detach().to(d);
      if (op.differentiable && y.is_floating_point()) y = y.requires_grad_(true);
      xs.push_back(y);
    }
    gs::manual_seed(spec.seed);  // ops that draw random numbers draw the same on both
    *out = c.fn(xs);
    if (!op.differentiable || !out->requires_grad()) return;
    gs::Generator wg(spec.seed);
    Tensor w = gs::rand(out->shape(), gs::TensorOptions(out->dtype()), &wg) + 1.0;
    if (spec.mode == Mode::Huge || spec.mode == Mode::Spread) w = w * (1.0 / 64);
    gs::sum(*out * w.to(d)).backward();
    for (const Tensor& x : xs)
      if (x.requires_grad()) grads->push_back(x.grad().defined() ? x.grad().to(gs::kCPU) : gs::zeros_like(x).to(gs::kCPU));
  };
  Tensor o_cpu, o_dev;
  tensor_list g_cpu, g_dev;
  try {
    run(gs::kCPU, &o_cpu, &g_cpu);
  } catch (const gs::Error&) {
    return "";  // not a valid input on the cpu either
  }
  run(dev, &o_dev, &g_dev);
  double floor = spec.mode == Mode::Tiny ? 0.0 : 1.0, m = 0;
  for (const Tensor& x : c.inputs)
    if (x.is_floating_point()) m = std::max(m, max_abs_finite(x));
  if (op.category == "reduction" || op.category == "linalg" || op.category == "nn") floor = std::max(floor, m);
  if ((op.category == "linalg" || is_conv(op.name)) && c.inputs.size() >= 2) {
    int64_t longest = 1;
    for (const Tensor& x : c.inputs) longest = std::max(longest, x.numel());
    floor = std::max(floor, m * m * static_cast<double>(longest));
  }
  // Where the cpu's result is NaN and the device's is not finite either, both overflowed (a sum of
  // values near the max meets inf and -inf in one order and not in another).
  const Tensor d_cpu = o_dev.to(gs::kCPU);
  if (o_cpu.is_floating_point()) {
    const Tensor both = gs::logical_and(gs::isnan(o_cpu), gs::logical_not(gs::isfinite(d_cpu)));
    o_cpu = gs::where(both, gs::zeros_like(o_cpu), o_cpu);
    o_dev = gs::where(both, gs::zeros_like(d_cpu), d_cpu);
  } else {
    o_dev = d_cpu;
  }
  if (std::string d = compare_rounded(o_dev, o_cpu, t, k, floor); !d.empty()) return "forward: " + d;
  if (g_dev.size() != g_cpu.size()) return "a different number of gradients";
  // An output that overflowed has no gradient to match.
  if (gs::sum(gs::isfinite(o_cpu)).item<int64_t>() != o_cpu.numel()) return "";
  for (size_t i = 0; i < g_cpu.size(); ++i)
    if (std::string d = compare_rounded(g_dev[i], g_cpu[i], t, 2 * k + 2, floor); !d.empty())
      return "gradient of input " + std::to_string(i) + ": " + d;
  return "";
}

// Draws `n` cases of `op` from `seed`; "" when all pass, else the first failure shrunk to the
// smallest failing case found by halving sizes and magnitudes, with the spec that rebuilds it.
inline std::string check_op(const gs::OpInfo& op, uint64_t seed, int n, DType t, double k) {
  for (const Spec& s : draw(op, seed, n)) {
    std::string first;
    try {
      first = check_case(op, s, t, k);
    } catch (const std::exception& e) {
      first = std::string("threw: ") + e.what();
    }
    if (first.empty()) continue;
    auto fails = [&](const Spec& x) { return !check_case(op, x, t, k).empty(); };
    const Spec small = shrink(s, fails);
    std::string why;
    try {
      why = check_case(op, small, t, k);
    } catch (const std::exception& e) {
      why = std::string("threw: ") + e.what();
    }
    return "[" + describe(op, s) + "] " + first + "\n  smallest failing case found: [" + describe(op, small) + "] " +
           why + "\n";
  }
  return "";
}

}  // namespace proptest
