// Property-based inputs for the registry's ops: seeded draws from each op's whole domain (values near
// a dtype's max, subnormals, wide spreads, logits thousands apart), odd and prime sizes, non-contiguous
// views, per-axis asymmetric conv/pool geometry, and shrinking of a failing draw. docs/dtypes.md.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/generator.h"
#include "core/op_registry.h"
#include "core/ops.h"

namespace proptest {

using gs::DType;
using gs::Shape;
using gs::Tensor;
using gs::tensor_list;

// How a draw's values are spread.
enum class Mode { Unit, Huge, Tiny, Spread, Apart };
inline const char* mode_name(Mode m) {
  switch (m) {
    case Mode::Unit: return "unit";
    case Mode::Huge: return "near-max";
    case Mode::Tiny: return "subnormal";
    case Mode::Spread: return "spread";
    case Mode::Apart: return "thousands-apart";
  }
  return "?";
}
// The layout an input is handed to the op in (same shape, other strides).
enum class View { None, Transposed, Stepped, Expanded };
inline const char* view_name(View v) {
  switch (v) {
    case View::None: return "contiguous";
    case View::Transposed: return "transposed";
    case View::Stepped: return "sliced with step";
    case View::Expanded: return "expanded";
  }
  return "?";
}

// conv2d/max_pool2d/avg_pool2d geometry, each axis its own.
struct Geometry {
  int64_t n = 1, c = 1, o = 1, groups = 1, h = 5, w = 5;
  int64_t kh = 3, kw = 3, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  bool bias = false;
};

// Everything a case is made from: the same Spec gives the same tensors.
struct Spec {
  uint64_t seed = 0;
  size_t sample = 0;  // which of the registry's samples gives the shapes and index inputs
  Mode mode = Mode::Unit;
  std::vector<std::pair<int64_t, int64_t>> sizes;  // registry size -> drawn size (empty: registry shapes)
  View view = View::None;
  size_t view_input = 0;
  int halvings = 0;  // every drawn magnitude is scaled by 2^-halvings
  bool conv = false, pool = false;
  Geometry geo;
};

struct Case {
  std::string label;
  tensor_list inputs;
  std::function<Tensor(const tensor_list&)> fn;  // the registry's fn, or conv/pool with the drawn geometry
};

// ---- a dtype's range --------------------------------------------------------------------------
inline double max_of(DType t) {
  switch (t) {
    case gs::kFloat16: return 65504.0;
    case gs::kBFloat16: return std::ldexp(255.0, 120);  // 0x7F7F
    case gs::kFloat32: return std::numeric_limits<float>::max();
    default: return std::numeric_limits<double>::max();
  }
}
inline int min_exp(DType t) {  // log2 of the smallest subnormal
  switch (t) {
    case gs::kFloat16: return -24;
    case gs::kBFloat16: return -133;
    case gs::kFloat32: return -149;
    default: return -1074;
  }
}
inline int normal_exp(DType t) {  // log2 of the smallest normal
  switch (t) {
    case gs::kFloat16: return -14;
    case gs::kFloat64: return -1022;
    default: return -126;
  }
}

// ---- each op's domain ------------------------------------------------------------------------
enum class Dom { Real, Positive, NonZero, AboveMinusOne, WithSpecials };
inline Dom domain_of(const std::string& op, size_t input) {
  if (op == "log" || op == "sqrt" || op == "rsqrt" || op == "pow_scalar" || (op == "pow" && input == 0))
    return Dom::Positive;
  if (op == "reciprocal" || (op == "div" && input == 1) || (op == "div_" && input == 1)) return Dom::NonZero;
  if (op == "log1p") return Dom::AboveMinusOne;
  if (op == "isnan" || op == "isinf" || op == "isfinite") return Dom::WithSpecials;
  return Dom::Real;
}
// The largest magnitude a draw of `op` takes in dtype t: the dtype's max, but for the ops that sum
// products (matmul, linear, conv2d) the square root of the accumulator's max (float32 for the 16-bit
// dtypes) over 256, since a sum of products past the accumulator's range overflows with an arbitrary
// sign in any summation order; for split's composition (2 x + a sum of two) a quarter of the max.
inline double top_of(const std::string& op, DType t) {
  if (op == "matmul" || op == "linear" || op == "conv2d" || op == "conv2d_strided_grouped") {
    const double acc = t == gs::kFloat64 ? std::numeric_limits<double>::max() : std::numeric_limits<float>::max();
    return std::min(max_of(t), std::sqrt(acc) / 256);
  }
  if (op == "split") return max_of(t) / 4;
  return max_of(t);
}

// Ops whose every size may be redrawn (a registry size maps to the same drawn size in every input,
// so broadcasting and matmul's inner sizes stay consistent).
inline bool resizable(const gs::OpInfo& op) {
  if (op.name == "dropout" || op.name == "split" || op.name == "masked_fill_") return false;
  return op.category == "elementwise" || op.category == "comparison" || op.category == "reduction" ||
         op.category == "linalg" || op.category == "inplace";
}
inline bool is_conv(const std::string& op) { return op == "conv2d" || op == "conv2d_strided_grouped"; }
inline bool is_pool(const std::string& op) { return op == "max_pool2d" || op == "avg_pool2d"; }

// ---- drawing ----------------------------------------------------------------------------------
struct Rng {
  std::mt19937_64 e;
  explicit Rng(uint64_t s) : e(s) {}
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(e); }
  int64_t below(int64_t n) { return static_cast<int64_t>(e() % static_cast<uint64_t>(n)); }
  bool coin(double p) { return uniform(0, 1) < p; }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[static_cast<size_t>(below(static_cast<int64_t>(v.size())))]; }
};

inline double draw_value(Rng& r, Mode m, DType t, Dom d, double top) {
  double v = 0;
  const double sign = r.coin(0.5) ? 1.0 : -1.0;
  switch (m) {
    case Mode::Unit: v = r.uniform(-1, 1) * std::ldexp(1.0, static_cast<int>(r.below(5)) - 2); break;
    case Mode::Huge: v = r.coin(0.2) ? r.uniform(-1, 1) : sign * top * r.uniform(0.125, 1.0); break;
    case Mode::Tiny:
      v = r.coin(0.1) ? 0.0
                      : sign * std::ldexp(1.0, min_exp(t)) *
                            std::ldexp(r.uniform(1, 2), static_cast<int>(r.below(normal_exp(t) - min_exp(t) + 3)));
      break;
    case Mode::Spread: {
      const double lo = min_exp(t), hi = std::log2(top) - 0.01;
      v = sign * std::exp2(r.uniform(lo, hi));
      break;
    }
    case Mode::Apart: v = 1000.0 * static_cast<double>(r.below(7) - 3) + r.uniform(-1, 1); break;
  }
  switch (d) {
    case Dom::Real: break;
    case Dom::Positive: v = std::abs(v); break;
    case Dom::NonZero: break;
    case Dom::AboveMinusOne: v = -1.0 + std::abs(v); break;
    case Dom::WithSpecials:
      if (r.coin(0.15)) v = r.pick(std::vector<double>{std::nan(""), INFINITY, -INFINITY, 0.0});
      break;
  }
  if ((d == Dom::Positive || d == Dom::NonZero) && v == 0.0)
    v = (d == Dom::Positive ? 1.0 : sign) * std::ldexp(1.0, min_exp(t));
  return v;
}

// The base of a view: the shape to draw so that `v` of it has shape s, or s itself when v does not
// apply to s.
inline Shape view_base(const Shape& s, View v) {
  Shape b = s;
  if (v == View::Transposed && s.size() >= 2) std::swap(b[b.size() - 1], b[b.size() - 2]);
  if (v == View::Stepped && !s.empty()) b[0] = s[0] * 2 + 1;
  if (v == View::Expanded && !s.empty()) b[s.size() - 1] = 1;
  return b;
}
inline Tensor apply_view(const Tensor& base, const Shape& s, View v) {
  if (v == View::Transposed && s.size() >= 2) return base.transpose(-1, -2);
  if (v == View::Stepped && !s.empty()) return base.slice(0, 1, s[0] * 2 + 1, 2);
  if (v == View::Expanded && !s.empty()) return base.expand(s);
  return base;
}

inline int64_t mapped(const Spec& s, int64_t size) {
  for (const auto& [from, to] : s.sizes)
    if (from == size) return to;
  return size;
}

// Draws the floating values of one input: shape `s`, domain `d`, rounded to `round_to`, stored as
// `as`, in layout `v`.
inline Tensor draw_tensor(Rng& r, const Spec& spec, const Shape& s, Dom d, double top, DType round_to, DType as,
                          View v) {
  const Shape b = view_base(s, v);
  std::vector<double> vals(static_cast<size_t>(gs::numel_of(b)));
  for (double& x : vals) {
    x = draw_value(r, spec.mode, round_to, d, top);
    if (std::isfinite(x) && spec.halvings > 0) {
      const double y = std::ldexp(x, -spec.halvings);
      if (!(d == Dom::NonZero || d == Dom::Positive) || y != 0.0) x = y;
    }
    if (d == Dom::AboveMinusOne && x < -1.0) x = -1.0;
  }
  Tensor base = gs::tensor(vals, b, gs::TensorOptions(gs::kFloat64)).to(round_to).to(as);
  if (d == Dom::Positive) base = gs::abs(base);  // -0.0 after a halving
  return apply_view(base, s, v);
}

inline std::string shape_list(const Spec& s) {
  std::string out;
  for (const auto& [from, to] : s.sizes) out += (out.empty() ? "" : ",") + std::to_string(from) + "->" + std::to_string(to);
  return out;
}

inline std::string describe(const gs::OpInfo& op, const Spec& s) {
  std::string d = op.name + " seed " + std::to_string(s.seed) + " sample " + std::to_string(s.sample) + " " +
                  mode_name(s.mode);
  if (s.halvings) d += " /2^" + std::to_string(s.halvings);
  if (!s.sizes.empty()) d += " sizes {" + shape_list(s) + "}";
  if (s.view != View::None) d += std::string(" input ") + std::to_string(s.view_input) + " " + view_name(s.view);
  if (s.conv || s.pool) {
    const Geometry& g = s.geo;
    d += gs::detail::str_cat(" x (", g.n, ",", g.c, ",", g.h, ",", g.w, ") k (", g.kh, ",", g.kw, ") stride (", g.sh,
                             ",", g.sw, ") pad (", g.ph, ",", g.pw, ") dil (", g.dh, ",", g.dw, ")");
    if (s.conv) d += gs::detail::str_cat(" out ", g.o, " groups ", g.groups, g.bias ? " bias" : "");
  }
  return d;
}

// Builds the case of `spec`: floating inputs rounded to `round_to` and stored as `as` (so a 16-bit
// run and its float64 reference see the same values).
inline Case make(const gs::OpInfo& op, const Spec& spec, DType round_to, DType as) {
  Rng r(spec.seed * 0x9E3779B97F4A7C15ull + 1);
  Case c;
  c.label = describe(op, spec);
  c.fn = op.fn;
  if (spec.conv || spec.pool) {
    const Geometry g = spec.geo;
    auto in = [&](const Shape& s, size_t i) {
      return draw_tensor(r, spec, s, Dom::Real, top_of(op.name, round_to), round_to, as,
                         spec.view_input == i ? spec.view : View::None);
    };
    c.inputs.push_back(in({g.n, g.c, g.h, g.w}, 0));
    if (spec.conv) {
      c.inputs.push_back(in({g.o, g.c / g.groups, g.kh, g.kw}, 1));
      if (g.bias) c.inputs.push_back(in({g.o}, 2));
      c.fn = [g](const tensor_list& x) {
        return gs::conv2d(x[0], x[1], g.bias ? x[2] : Tensor(), {g.sh, g.sw}, {g.ph, g.pw}, {g.dh, g.dw}, g.groups);
      };
    } else if (op.name == "max_pool2d") {
      c.fn = [g](const tensor_list& x) {
        return gs::max_pool2d(x[0], {g.kh, g.kw}, {g.sh, g.sw}, {g.ph, g.pw}, {g.dh, g.dw});
      };
    } else {
      c.fn = [g](const tensor_list& x) { return gs::avg_pool2d(x[0], {g.kh, g.kw}, {g.sh, g.sw}, {g.ph, g.pw}); };
    }
    return c;
  }
  gs::Generator reg(spec.seed);
  const std::vector<gs::OpSample> samples = op.samples(reg, gs::kFloat64);
  const gs::OpSample& base = samples[spec.sample % samples.size()];
  for (size_t i = 0; i < base.inputs.size(); ++i) {
    const Tensor& x = base.inputs[i];
    Shape s = x.shape();
    for (int64_t& d : s) d = mapped(spec, d);
    const View v = spec.view_input == i ? spec.view : View::None;
    if (x.is_floating_point()) {
      c.inputs.push_back(draw_tensor(r, spec, s, domain_of(op.name, i), top_of(op.name, round_to), round_to, as, v));
    } else if (x.dtype() == gs::kBool) {
      std::vector<double> bits(static_cast<size_t>(gs::numel_of(view_base(s, v))));
      for (double& b : bits) b = r.coin(0.5) ? 1.0 : 0.0;
      c.inputs.push_back(apply_view(gs::tensor(bits, view_base(s, v), gs::TensorOptions(gs::kFloat64)) > 0.5, s, v));
    } else {
      c.inputs.push_back(x);  // indices: the registry's (their ops are not resized)
    }
  }
  return c;
}

inline int64_t draw_size(Rng& r, bool big) {
  static const std::vector<int64_t> small{1, 2, 3, 5, 7, 11, 13};
  static const std::vector<int64_t> large{17, 31, 37, 67, 131};
  return big ? r.pick(large) : r.pick(small);
}

// `n` specs for `op`, drawn from `seed`, with the ranges of dtype `t` in mind for the views.
inline std::vector<Spec> draw(const gs::OpInfo& op, uint64_t seed, int n) {
  std::vector<Spec> out;
  gs::Generator reg(seed);
  const size_t n_samples = op.samples(reg, gs::kFloat64).size();
  for (int i = 0; i < n; ++i) {
    Spec s;
    s.seed = seed * 1000003ull + static_cast<uint64_t>(i);
    Rng r(s.seed);
    s.sample = static_cast<size_t>(r.below(static_cast<int64_t>(n_samples)));
    s.mode = static_cast<Mode>((static_cast<uint64_t>(i) + seed) % 5);  // every mode within five draws
    if (is_conv(op.name) || is_pool(op.name)) {
      Geometry& g = s.geo;
      s.conv = is_conv(op.name);
      s.pool = !s.conv;
      g.n = 1 + r.below(3);
      g.groups = s.conv && op.name == "conv2d_strided_grouped" ? 1 + r.below(3) : 1;
      g.c = g.groups * (1 + r.below(3));
      g.o = g.groups * (1 + r.below(3));
      g.kh = 1 + r.below(s.conv ? 5 : 4);
      g.kw = 1 + r.below(s.conv ? 5 : 4);
      g.sh = 1 + r.below(3);
      g.sw = 1 + r.below(3);
      g.dh = op.name == "avg_pool2d" ? 1 : 1 + r.below(3);
      g.dw = op.name == "avg_pool2d" ? 1 : 1 + r.below(3);
      g.ph = r.below(g.kh / 2 + 1);
      g.pw = r.below(g.kw / 2 + 1);
      g.bias = op.name == "conv2d";
      const int64_t eh = g.dh * (g.kh - 1) + 1, ew = g.dw * (g.kw - 1) + 1;  // the kernels' reach
      g.h = std::max<int64_t>(eh - 2 * g.ph, 1) + r.below(9);
      g.w = std::max<int64_t>(ew - 2 * g.pw, 1) + r.below(9);
      if (g.h % 2 == 0) ++g.h;  // odd
    } else if (resizable(op) && r.coin(0.8)) {
      gs::Generator reg2(s.seed);
      const std::vector<gs::OpSample> samples = op.samples(reg2, gs::kFloat64);
      std::vector<int64_t> seen;
      for (const Tensor& x : samples[s.sample].inputs)
        for (int64_t d : x.shape())
          if (d > 1 && std::find(seen.begin(), seen.end(), d) == seen.end()) seen.push_back(d);
      int64_t total = 1;
      for (size_t k = 0; k < seen.size(); ++k) {
        int64_t z = draw_size(r, k == 0 && r.coin(0.4));
        while (total * z > 40000 && z > 1) z /= 2;
        total *= std::max<int64_t>(z, 1);
        s.sizes.push_back({seen[k], std::max<int64_t>(z, 1)});
      }
    }
    s.view = op.name == "view" ? View::None : static_cast<View>(r.below(4));  // view() needs viewable strides
    gs::Generator reg3(s.seed);
    const size_t n_inputs = s.conv ? 2 : s.pool ? 1 : op.samples(reg3, gs::kFloat64)[s.sample].inputs.size();
    s.view_input = static_cast<size_t>(r.below(static_cast<int64_t>(std::max<size_t>(n_inputs, 1))));
    out.push_back(s);
  }
  return out;
}

// Smaller neighbours of a failing spec: sizes and geometry halved, magnitudes halved, the view dropped.
inline std::vector<Spec> shrink_steps(const Spec& s) {
  std::vector<Spec> out;
  for (size_t k = 0; k < s.sizes.size(); ++k)
    if (s.sizes[k].second > 1) {
      Spec t = s;
      t.sizes[k].second = (t.sizes[k].second + 1) / 2;
      if (t.sizes[k].second == s.sizes[k].second) t.sizes[k].second = 1;
      out.push_back(t);
    }
  if (s.conv || s.pool) {
    auto halve = [&](int64_t Geometry::*f, int64_t lo) {
      if (s.geo.*f > lo) {
        Spec t = s;
        t.geo.*f = std::max(lo, t.geo.*f / 2);
        out.push_back(t);
      }
    };
    halve(&Geometry::n, 1);
    halve(&Geometry::h, 1);
    halve(&Geometry::w, 1);
  }
  if (s.view != View::None) {
    Spec t = s;
    t.view = View::None;
    out.push_back(t);
  }
  if (s.halvings < 24 && s.mode != Mode::Tiny) {
    Spec t = s;
    ++t.halvings;
    out.push_back(t);
  }
  return out;
}

// The smallest failing spec reachable from `s` by shrink_steps, with `fails` telling whether a spec
// still fails (a spec that throws while being built counts as passing). At most `budget` tries.
inline Spec shrink(Spec s, const std::function<bool(const Spec&)>& fails, int budget = 60) {
  bool progress = true;
  while (progress && budget > 0) {
    progress = false;
    for (const Spec& t : shrink_steps(s)) {
      if (--budget < 0) break;
      bool f = false;
      try {
        f = fails(t);
      } catch (const std::exception&) {
        f = false;
      }
      if (f) {
        s = t;
        progress = true;
        break;
      }
    }
  }
  return s;
}

}  // namespace proptest
