// IEEE edge values through every unary and binary elementwise op: +-0, +-inf,
// NaN, denormals, 1e+-38, +-1000 and a few ordinary numbers, in float32 and
// float64, on every kernel path: a long contiguous tensor (the vectorised
// Eigen/SIMD loop, with every value at every lane position), a strided view
// (the scalar loop), a one-element tensor and, for binary ops, a broadcast
// scalar. The expected values are computed here with <cmath> in long double and
// rounded to the dtype, independently of the engine.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/tensor.h"

namespace {

using gs::Tensor;
using LD = long double;

template <class T>
std::vector<T> edge_values() {
  using L = std::numeric_limits<T>;
  return {T(0),
          -T(0),
          L::infinity(),
          -L::infinity(),
          L::quiet_NaN(),
          L::denorm_min(),
          -L::denorm_min(),
          L::min() / T(4),
          T(1e-38),
          T(-1e-38),
          T(1e38),
          T(-1e38),
          T(1000),
          T(-1000),
          T(1),
          T(-1),
          T(0.5),
          T(-2.5),
          T(88.5),
          T(-88.5),
          T(-100),
          T(709.5),
          T(-709.5),
          T(-745.5),
          T(20.5),
          T(3)};
}

// Same value, or both NaN, or within a few units in the last place. Denormal
// results compare in absolute terms (their spacing is denorm_min).
template <class T>
bool close(T got, LD want_ld) {
  const T want = static_cast<T>(want_ld);
  if (std::isnan(want)) return std::isnan(got);
  if (std::isnan(got)) return false;
  if (std::isinf(want) || std::isinf(got)) return got == want;
  if (got == want) return true;
  const T diff = std::abs(got - want);
  if (diff <= T(4) * std::numeric_limits<T>::denorm_min()) return true;
  const T tol = std::is_same_v<T, float> ? T(4e-6) : T(1e-13);
  return diff <= tol * std::abs(want);
}

struct Unary {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<LD(LD)> ref;
};

// softplus as PyTorch defines it (beta 1, threshold 20): linear above the threshold.
LD softplus_ref(LD x) { return x > 20 ? x : std::log1p(std::exp(x)); }

std::vector<Unary> unary_ops() {
  return {
      {"neg", [](const Tensor& x) { return gs::neg(x); }, [](LD x) { return -x; }},
      {"exp", [](const Tensor& x) { return gs::exp(x); }, [](LD x) { return std::exp(x); }},
      {"log", [](const Tensor& x) { return gs::log(x); }, [](LD x) { return std::log(x); }},
      {"sqrt", [](const Tensor& x) { return gs::sqrt(x); }, [](LD x) { return std::sqrt(x); }},
      {"rsqrt", [](const Tensor& x) { return gs::rsqrt(x); }, [](LD x) { return 1 / std::sqrt(x); }},
      {"abs", [](const Tensor& x) { return gs::abs(x); }, [](LD x) { return std::fabs(x); }},
      {"square", [](const Tensor& x) { return gs::square(x); }, [](LD x) { return x * x; }},
      {"reciprocal", [](const Tensor& x) { return gs::reciprocal(x); }, [](LD x) { return 1 / x; }},
      {"erf", [](const Tensor& x) { return gs::erf(x); }, [](LD x) { return std::erf(x); }},
      {"log1p", [](const Tensor& x) { return gs::log1p(x); }, [](LD x) { return std::log1p(x); }},
      {"relu", [](const Tensor& x) { return gs::relu(x); }, [](LD x) { return std::isnan(x) ? x : (x <= 0 ? 0 : x); }},
      {"sigmoid", [](const Tensor& x) { return gs::sigmoid(x); }, [](LD x) { return 1 / (1 + std::exp(-x)); }},
      {"tanh", [](const Tensor& x) { return gs::tanh(x); }, [](LD x) { return std::tanh(x); }},
      {"softplus", [](const Tensor& x) { return gs::softplus(x); }, softplus_ref},
      // NaN passes through clamp and leaky_relu, as in PyTorch.
      {"clamp", [](const Tensor& x) { return gs::clamp(x, -1.0, 1.0); },
       [](LD x) { return std::isnan(x) ? x : (x < -1 ? LD(-1) : (x > 1 ? LD(1) : x)); }},
      {"leaky_relu", [](const Tensor& x) { return gs::leaky_relu(x, 0.125); },
       [](LD x) { return x > 0 ? x : x * LD(0.125); }},
  };
}

// sin/cos of 1e38 are exact only with a full range reduction; checked on the
// values where every libm agrees to the tolerance.
std::vector<Unary> trig_ops() {
  return {{"sin", [](const Tensor& x) { return gs::sin(x); }, [](LD x) { return std::sin(x); }},
          {"cos", [](const Tensor& x) { return gs::cos(x); }, [](LD x) { return std::cos(x); }}};
}

// The values laid out three ways: a long contiguous tensor (each value at every
// position modulo 16, so every SIMD lane and the scalar tail see it), a strided
// view of the same values, and each value alone in a one-element tensor.
template <class T>
std::vector<std::pair<std::string, Tensor>> layouts(const std::vector<T>& v) {
  constexpr gs::DType dt = std::is_same_v<T, float> ? gs::kFloat32 : gs::kFloat64;
  std::vector<T> longv;
  for (int rep = 0; rep < 17; ++rep)
    for (size_t i = 0; i < v.size(); ++i) longv.push_back(v[(i + rep) % v.size()]);
  const int64_t n = static_cast<int64_t>(longv.size());
  std::vector<double> ld(longv.begin(), longv.end());  // every float32 value is a double exactly
  Tensor contiguous = gs::tensor(ld, {n}, dt);
  // (n, 2) storage, column 0: stride 2 elements.
  std::vector<double> wide;
  for (double x : ld) {
    wide.push_back(x);
    wide.push_back(7.0);
  }
  Tensor strided = gs::tensor(wide, {n, 2}, dt).select(1, 0);
  return {{"contiguous (" + std::to_string(n) + ")", contiguous}, {"strided", strided}};
}

template <class T>
void check_unary(const Unary& u, const std::vector<T>& values) {
  constexpr gs::DType dt = std::is_same_v<T, float> ? gs::kFloat32 : gs::kFloat64;
  auto check_all = [&](const std::string& layout, const Tensor& x) {
    const std::vector<T> in = x.to_vector<T>();
    const std::vector<T> out = u.op(x).template to_vector<T>();
    REQUIRE(out.size() == in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      const LD want = u.ref(static_cast<LD>(in[i]));
      INFO(std::string(u.name), " ", std::string(gs::dtype_name(dt)), " ", layout, " x = ", in[i], ": got ", out[i],
           ", want ", static_cast<T>(want));
      CHECK(close<T>(out[i], want));
    }
  };
  for (const auto& [layout, x] : layouts(values)) check_all(layout, x);
  for (T v : values) check_all("one element", gs::tensor({static_cast<double>(v)}, {1}, dt));
}

TEST_CASE("unary ops at IEEE edge values match long-double <cmath>, on every kernel path") {
  for (const Unary& u : unary_ops()) {
    check_unary<float>(u, edge_values<float>());
    check_unary<double>(u, edge_values<double>());
  }
  for (const Unary& u : trig_ops()) {
    auto modest = [](auto vals) {
      decltype(vals) keep;
      for (auto x : vals)
        if (!(std::abs(x) > 1e3)) keep.push_back(x);  // NaN kept
      return keep;
    };
    check_unary<float>(u, modest(edge_values<float>()));
    check_unary<double>(u, modest(edge_values<double>()));
  }
}

struct Binary {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<LD(LD, LD)> ref;
};

LD nan_wins(LD a, LD b, bool is_max) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<LD>::quiet_NaN();
  return is_max ? (a > b ? a : b) : (a < b ? a : b);
}

std::vector<Binary> binary_ops() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return gs::add(a, b); }, [](LD a, LD b) { return a + b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return gs::sub(a, b); }, [](LD a, LD b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return gs::mul(a, b); }, [](LD a, LD b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return gs::div(a, b); }, [](LD a, LD b) { return a / b; }},
      {"pow", [](const Tensor& a, const Tensor& b) { return gs::pow(a, b); },
       [](LD a, LD b) { return std::pow(a, b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return gs::maximum(a, b); },
       [](LD a, LD b) { return nan_wins(a, b, true); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return gs::minimum(a, b); },
       [](LD a, LD b) { return nan_wins(a, b, false); }},
  };
}

// Every pair of edge values, against the long-double result rounded to T. (The
// engine rounds once, in T; the reference twice, in long double and then to T.
// The two can differ by one unit in the last place, within `close`'s tolerance.)
template <class T>
void check_binary(const Binary& op) {
  constexpr gs::DType dt = std::is_same_v<T, float> ? gs::kFloat32 : gs::kFloat64;
  const std::vector<T> v = edge_values<T>();
  // Every pair (a, b): a runs over the values, b over the values shifted by k.
  std::vector<double> av, bv;
  for (size_t k = 0; k < v.size(); ++k)
    for (size_t i = 0; i < v.size(); ++i) {
      av.push_back(static_cast<double>(v[i]));
      bv.push_back(static_cast<double>(v[(i + k) % v.size()]));
    }
  const int64_t n = static_cast<int64_t>(av.size());
  auto check = [&](const std::string& layout, const Tensor& a, const Tensor& b) {
    const std::vector<T> x = a.to_vector<T>(), y = b.to_vector<T>();
    const std::vector<T> out = op.op(a, b).template to_vector<T>();
    const size_t m = out.size();
    for (size_t i = 0; i < m; ++i) {
      const T xi = x.size() == 1 ? x[0] : x[i], yi = y.size() == 1 ? y[0] : y[i];
      const LD want = op.ref(static_cast<LD>(xi), static_cast<LD>(yi));
      INFO(std::string(op.name), " ", std::string(gs::dtype_name(dt)), " ", layout, " (", xi, ", ", yi, "): got ",
           out[i], ", want ", static_cast<T>(want));
      CHECK(close<T>(out[i], want));
    }
  };
  Tensor a = gs::tensor(av, {n}, dt), b = gs::tensor(bv, {n}, dt);
  check("contiguous", a, b);
  std::vector<double> aw;
  for (double x : av) {
    aw.push_back(x);
    aw.push_back(3.0);
  }
  check("strided", gs::tensor(aw, {n, 2}, dt).select(1, 0), b);
  // A broadcast scalar operand on either side (the kernels' stride-0 fast paths).
  for (T s : v) {
    Tensor st = gs::tensor({static_cast<double>(s)}, {1}, dt);
    Tensor col = gs::tensor(std::vector<double>(av.begin(), av.begin() + static_cast<long>(v.size())),
                            {static_cast<int64_t>(v.size())}, dt);
    check("broadcast scalar b", col, st);
    check("broadcast scalar a", st, col);
    check("one element", st, st);
  }
}

TEST_CASE("binary ops at IEEE edge values match long-double <cmath>, on every kernel path") {
  for (const Binary& op : binary_ops()) {
    check_binary<float>(op);
    check_binary<double>(op);
  }
}

}  // namespace
