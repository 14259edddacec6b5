// Tests for core/ops.h (forward values only; gradients are the gradient
// checker's job): every op against hand-computed values or a plain loop over
// the inputs' values in double precision, written here independently of the
// engine. Dimension letters: B = batch, N = rows, K = inner, M = columns,
// C = channels, H/W = height/width, O = output channels.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace {

using gs::Tensor;
using Vec = std::vector<double>;
using IVec = std::vector<int64_t>;

Vec vals(const Tensor& t) { return t.to_vector<double>(); }
IVec shp(const Tensor& t) { return t.shape().vec(); }

// ---- a tiny reference n-d array (row-major, double) ---------------------------------
struct Ref {
  IVec shape;
  Vec v;
  static Ref of(const Tensor& t) { return {t.shape().vec(), t.to_vector<double>()}; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  int64_t flat(const IVec& idx) const {
    int64_t f = 0;
    for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
    return f;
  }
  double at(const IVec& idx) const { return v[flat(idx)]; }
};

IVec unravel(int64_t f, const IVec& shape) {
  IVec idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = f % shape[d];
    f /= shape[d];
  }
  return idx;
}

// out[i0..] = x[i_perm...]: the values of x.permute(order), by index arithmetic.
Ref ref_permute(const Ref& x, const IVec& order) {
  Ref out;
  for (int64_t d : order) out.shape.push_back(x.shape[d]);
  out.v.resize(x.v.size());
  for (int64_t f = 0; f < out.numel(); ++f) {
    IVec oi = unravel(f, out.shape), xi(x.shape.size());
    for (size_t k = 0; k < order.size(); ++k) xi[order[k]] = oi[k];
    out.v[f] = x.at(xi);
  }
  return out;
}

// Reduces x over `dims` (all when empty) with `combine`, starting from `init`.
Ref ref_reduce(const Ref& x, IVec dims, bool keepdim, double init,
               const std::function<double(double, double)>& combine) {
  const int64_t nd = static_cast<int64_t>(x.shape.size());
  std::vector<bool> red(nd, dims.empty());
  for (int64_t d : dims) red[d < 0 ? d + nd : d] = true;
  IVec keep = x.shape;
  for (int64_t d = 0; d < nd; ++d)
    if (red[d]) keep[d] = 1;
  Ref k{keep, Vec(1, 0.0)};
  k.v.assign(k.numel(), init);
  for (int64_t f = 0; f < x.numel(); ++f) {
    IVec i = unravel(f, x.shape);
    for (int64_t d = 0; d < nd; ++d)
      if (red[d]) i[d] = 0;
    double& o = k.v[k.flat(i)];
    o = combine(o, x.v[f]);
  }
  if (!keepdim) {
    IVec s;
    for (int64_t d = 0; d < nd; ++d)
      if (!red[d]) s.push_back(x.shape[d]);
    k.shape = s;
  }
  return k;
}
double add2(double a, double b) { return a + b; }
double max2(double a, double b) { return std::max(a, b); }
double min2(double a, double b) { return std::min(a, b); }

// Checks shape and every value (absolute + relative tolerance).
void check_close(const Tensor& got, const Ref& want, double tol = 1e-12) {
  REQUIRE(shp(got) == want.shape);
  Vec g = vals(got);
  REQUIRE(g.size() == want.v.size());
  for (size_t i = 0; i < g.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(g[i] - want.v[i]) <= tol * (1.0 + std::fabs(want.v[i])));
  }
}
void check_close(const Tensor& got, const Vec& want, double tol = 1e-12) { check_close(got, Ref{shp(got), want}, tol); }

// Elementwise reference for a unary function.
Ref map(const Ref& x, double (*f)(double)) {
  Ref o = x;
  for (double& v : o.v) v = f(v);
  return o;
}

// Broadcast binary reference (NumPy rule), by explicit index arithmetic.
Ref ref_binary(const Ref& a, const Ref& b, const std::function<double(double, double)>& f) {
  const size_t n = std::max(a.shape.size(), b.shape.size());
  IVec s(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.shape.size() ? 1 : a.shape[i - (n - a.shape.size())];
    int64_t db = i < n - b.shape.size() ? 1 : b.shape[i - (n - b.shape.size())];
    s[i] = std::max(da, db);
  }
  Ref o{s, {}};
  o.v.resize(o.numel());
  for (int64_t f2 = 0; f2 < o.numel(); ++f2) {
    IVec i = unravel(f2, s);
    IVec ia(a.shape.size()), ib(b.shape.size());
    for (size_t d = 0; d < a.shape.size(); ++d) ia[d] = a.shape[d] == 1 ? 0 : i[d + n - a.shape.size()];
    for (size_t d = 0; d < b.shape.size(); ++d) ib[d] = b.shape[d] == 1 ? 0 : i[d + n - b.shape.size()];
    o.v[f2] = f(a.at(ia), b.at(ib));
  }
  return o;
}

Tensor randn64(const gs::Shape& s, uint64_t seed) {
  gs::Generator g(seed);
  return gs::randn(s, gs::kFloat64, &g);
}

}  // namespace

// ---- elementwise ------------------------------------------------------------------------
TEST_CASE("add/sub/mul/div with broadcasting (3,1) op (1,4)") {
  Tensor a = gs::tensor({1, 2, 3}, {3, 1}, gs::kFloat64);
  Tensor b = gs::tensor({10, 20, 30, 40}, {1, 4}, gs::kFloat64);
  Tensor s = a + b;
  CHECK(shp(s) == IVec{3, 4});
  CHECK(vals(s) == Vec{11, 21, 31, 41, 12, 22, 32, 42, 13, 23, 33, 43});
  CHECK(vals(b - a) == Vec{9, 19, 29, 39, 8, 18, 28, 38, 7, 17, 27, 37});
  CHECK(vals(a * b) == Vec{10, 20, 30, 40, 20, 40, 60, 80, 30, 60, 90, 120});
  check_close(b / a, Vec{10, 20, 30, 40, 5, 10, 15, 20, 10. / 3, 20. / 3, 10, 40. / 3});
  CHECK(vals(gs::add(a, b, 2.0)) == Vec{21, 41, 61, 81, 22, 42, 62, 82, 23, 43, 63, 83});
  CHECK(vals(gs::sub(b, a, 0.5)) == Vec{9.5, 19.5, 29.5, 39.5, 9, 19, 29, 39, 8.5, 18.5, 28.5, 38.5});
}

TEST_CASE("bias add (B,N) + (N) and general broadcasting against a reference loop") {
  Tensor x = randn64({4, 5}, 1), bias = randn64({5}, 2);
  check_close(x + bias, ref_binary(Ref::of(x), Ref::of(bias), add2));
  Tensor y = randn64({2, 1, 3}, 3), z = randn64({4, 1}, 4);  // -> (2, 4, 3)
  check_close(y * z, ref_binary(Ref::of(y), Ref::of(z), [](double p, double q) { return p * q; }));
  check_close(gs::maximum(y, z), ref_binary(Ref::of(y), Ref::of(z), max2));
  check_close(gs::minimum(y, z), ref_binary(Ref::of(y), Ref::of(z), min2));
  check_close(y - z, ref_binary(Ref::of(y), Ref::of(z), [](double p, double q) { return p - q; }));
  // A 0-dim operand broadcasts to anything.
  CHECK(vals(gs::tensor({1, 2}) + gs::scalar_tensor(5)) == Vec{6, 7});
  CHECK(shp(gs::scalar_tensor(1) + gs::scalar_tensor(2)).empty());
}

TEST_CASE("pow, scalar ops and operators") {
  Tensor x = gs::tensor({1, 2, 4}, gs::kFloat64);
  CHECK(vals(x + 2) == Vec{3, 4, 6});
  CHECK(vals(2 + x) == Vec{3, 4, 6});
  CHECK(vals(x - 1) == Vec{0, 1, 3});
  CHECK(vals(10 - x) == Vec{9, 8, 6});
  CHECK(vals(x * 3) == Vec{3, 6, 12});
  CHECK(vals(3 * x) == Vec{3, 6, 12});
  CHECK(vals(x / 4) == Vec{0.25, 0.5, 1});
  CHECK(vals(1 / x) == Vec{1, 0.5, 0.25});
  CHECK(vals(-x) == Vec{-1, -2, -4});
  CHECK(vals(gs::neg(x)) == Vec{-1, -2, -4});
  CHECK(vals(gs::pow(x, 2.0)) == Vec{1, 4, 16});
  CHECK(vals(gs::pow(x, 0.5)) == Vec{1, std::sqrt(2.0), 2});
  CHECK(vals(gs::pow(x, -1.0)) == Vec{1, 0.5, 0.25});
  CHECK(vals(gs::pow(x, gs::tensor({3, 0, 0.5}, gs::kFloat64))) == Vec{1, 1, 2});
  CHECK(vals(gs::pow(gs::tensor({2}, gs::kFloat64), gs::tensor({1, 2, 3}, gs::kFloat64))) == Vec{2, 4, 8});
  CHECK(vals(x.pow(3.0)) == Vec{1, 8, 64});
  // Method forms.
  CHECK(vals(x.add(x, 0.5)) == Vec{1.5, 3, 6});
  CHECK(vals(x.sub(x, 2)) == Vec{-1, -2, -4});
  CHECK(vals(x.mul(x)) == Vec{1, 4, 16});
  CHECK(vals(x.div(x)) == Vec{1, 1, 1});
  // Integer arithmetic stays exact.
  Tensor i = gs::tensor(IVec{7, -3, 1 << 30}, {3});
  CHECK((i * 4).to_vector<int64_t>() == IVec{28, -12, int64_t(1) << 32});
  CHECK((i - 10).to_vector<int64_t>() == IVec{-3, -13, (1 << 30) - 10});
}

TEST_CASE("elementwise ops on non-contiguous inputs") {
  Tensor X = randn64({4, 3}, 5), Y = randn64({3, 4}, 6);
  Ref xt = ref_permute(Ref::of(X), {1, 0});  // X.t() as a reference array
  check_close(X.t() + Y, ref_binary(xt, Ref::of(Y), add2));
  check_close(Y * X.t(), ref_binary(Ref::of(Y), xt, [](double p, double q) { return p * q; }));
  check_close(X.t() / (Y * Y + 1), ref_binary(xt, Ref::of(Y), [](double p, double q) { return p / (q * q + 1); }));
  // A strided slice and an expanded view.
  Tensor Z = randn64({6, 4}, 7);
  Tensor zs = Z.slice(0, 0, 6, 2);  // rows 0, 2, 4
  Ref zr{{3, 4}, {}};
  Vec zv = vals(Z);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) zr.v.push_back(zv[(2 * r) * 4 + c]);
  check_close(zs - Y, ref_binary(zr, Ref::of(Y), [](double p, double q) { return p - q; }));
  Tensor col = randn64({3, 1}, 8);
  check_close(col.expand({3, 4}) * zs, ref_binary(Ref::of(col), zr, [](double p, double q) { return p * q; }));
  // Both operands transposed (an output in the layout of neither input).
  Tensor W = randn64({4, 3}, 9);
  check_close(X.t() + W.t(), ref_binary(xt, ref_permute(Ref::of(W), {1, 0}), add2));
}

TEST_CASE("unary math matches <cmath> (contiguous and strided paths)") {
  Tensor pos = gs::linspace(0.05, 7.5, 60, gs::kFloat64).view({6, 10});
  Tensor any = gs::linspace(-6, 6, 60, gs::kFloat64).view({6, 10});
  struct Case {
    const char* name;
    Tensor (*op)(const Tensor&);
    double (*ref)(double);
    bool positive_only;
  };
  const Case cases[] = {
      {"exp", gs::exp, [](double v) { return std::exp(v); }, false},
      {"log", gs::log, [](double v) { return std::log(v); }, true},
      {"sqrt", gs::sqrt, [](double v) { return std::sqrt(v); }, true},
      {"rsqrt", gs::rsqrt, [](double v) { return 1.0 / std::sqrt(v); }, true},
      {"abs", gs::abs, [](double v) { return std::fabs(v); }, false},
      {"sign", gs::sign, [](double v) { return double((v > 0) - (v < 0)); }, false},
      {"square", gs::square, [](double v) { return v * v; }, false},
      {"reciprocal", gs::reciprocal, [](double v) { return 1.0 / v; }, true},
      {"erf", gs::erf, [](double v) { return std::erf(v); }, false},
      {"log1p", gs::log1p, [](double v) { return std::log1p(v); }, true},
      {"sin", gs::sin, [](double v) { return std::sin(v); }, false},
      {"cos", gs::cos, [](double v) { return std::cos(v); }, false},
      {"neg", gs::neg, [](double v) { return -v; }, false},
      {"tanh", gs::tanh, [](double v) { return std::tanh(v); }, false},
      {"relu", gs::relu, [](double v) { return v > 0 ? v : 0.0; }, false},
      {"sigmoid", gs::sigmoid, [](double v) { return 1.0 / (1.0 + std::exp(-v)); }, false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    Tensor in = c.positive_only ? pos : any;
    Ref r = map(Ref::of(in), c.ref);
    check_close(c.op(in), r, 1e-12);                           // contiguous
    check_close(c.op(in.t()), ref_permute(r, {1, 0}), 1e-12);  // strided
    check_close(c.op(in.to(gs::kFloat32)), r, 2e-6);           // float32
    check_close(c.op(in.to(gs::kFloat32).t()), ref_permute(r, {1, 0}), 2e-6);
  }
  Tensor x = gs::tensor({-2, 0.5, 3}, gs::kFloat64);
  CHECK(vals(gs::sign(x)) == Vec{-1, 1, 1});
  CHECK(vals(gs::sign(gs::tensor({0.0}))) == Vec{0});
  CHECK(vals(gs::abs(gs::tensor(IVec{-3, 2}, {2}))) == Vec{3, 2});
  CHECK(vals(gs::clamp(x, -1.0, 1.0)) == Vec{-1, 0.5, 1});
  CHECK(vals(gs::clamp(x, 0.0, std::nullopt)) == Vec{0, 0.5, 3});
  CHECK(vals(gs::clamp(x, std::nullopt, 1.0)) == Vec{-2, 0.5, 1});
  CHECK(vals(x.clamp(1.0, 2.0)) == Vec{1, 1, 2});
  CHECK(gs::clamp(gs::tensor(IVec{-5, 5}, {2}), -1.0, 1.0).to_vector<int64_t>() == IVec{-1, 1});
  // Method forms.
  CHECK(vals(x.square()) == Vec{4, 0.25, 9});
  CHECK(vals(x.abs()) == Vec{2, 0.5, 3});
  CHECK(vals(x.reciprocal()) == Vec{-0.5, 2, 1.0 / 3});
  // Floating ops of integers compute in float32, as in PyTorch (tests/test_type_promotion.cpp
  // covers every one of them).
  Tensor e = gs::exp(gs::tensor(IVec{0, 1}, {2}));
  CHECK(e.dtype() == gs::kFloat32);
  CHECK(vals(e) == Vec{1.0, double(std::exp(1.0f))});
}

TEST_CASE("activations: relu, leaky_relu, sigmoid, tanh, gelu, softplus") {
  Tensor x = gs::tensor({-3, -0.5, 0, 0.5, 3}, gs::kFloat64);
  CHECK(vals(gs::relu(x)) == Vec{0, 0, 0, 0.5, 3});
  CHECK(vals(x.relu()) == Vec{0, 0, 0, 0.5, 3});
  check_close(gs::leaky_relu(x, 0.1), Vec{-0.3, -0.05, 0, 0.5, 3}, 1e-15);
  check_close(gs::leaky_relu(x), Vec{-0.03, -0.005, 0, 0.5, 3}, 1e-15);  // default slope 0.01

  SUBCASE("sigmoid is stable for large |x|") {
    const Vec xs = {-1000, -100, -20, -1, 0, 1, 20, 100, 1000};
    for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
      Tensor t = gs::tensor(xs, {9}, dt);
      // Contiguous (vectorised) and strided (scalar) paths.
      for (const Tensor& y : {gs::sigmoid(t), gs::sigmoid(gs::stack({t, t}, 1).select(1, 0))}) {
        Vec v = vals(y);
        REQUIRE(v.size() == 9);
        for (size_t i = 0; i < 9; ++i) {
          CAPTURE(xs[i]);
          CHECK(std::isfinite(v[i]));
          const double want = xs[i] >= 0 ? 1 / (1 + std::exp(-xs[i])) : std::exp(xs[i]) / (1 + std::exp(xs[i]));
          CHECK(std::fabs(v[i] - want) <= 1e-7 + 1e-6 * want);
          CHECK(v[i] >= 0.0);
          CHECK(v[i] <= 1.0);
        }
        CHECK(v[8] == 1.0);
        CHECK(v[4] == 0.5);
      }
    }
  }
  SUBCASE("sigmoid keeps its relative accuracy for negative x") {
    // sigmoid(x) for x << 0 is tiny but representable; 1 - sigmoid(-x) would round it to 0.
    for (gs::DType dt : {gs::kFloat64, gs::kFloat32}) {
      const double lo = dt == gs::kFloat64 ? -700 : -80, tol = dt == gs::kFloat64 ? 1e-12 : 1e-5;
      Tensor t = gs::linspace(lo, -1, 64, dt);
      Vec in = vals(t);
      for (const Tensor& y : {gs::sigmoid(t), gs::sigmoid(gs::stack({t, t}, 1).select(1, 1))}) {
        Vec v = vals(y);
        for (size_t i = 0; i < in.size(); ++i) {
          CAPTURE(in[i]);
          const double want = std::exp(in[i]) / (1 + std::exp(in[i]));
          CHECK(std::fabs(v[i] - want) <= tol * want);
        }
      }
    }
  }
  SUBCASE("tanh saturates without NaN") {
    Tensor t = gs::tensor({-1000, -30, 30, 1000});
    CHECK(vals(gs::tanh(t)) == Vec{-1, -1, 1, 1});
    CHECK(vals(gs::tanh(t.to(gs::kFloat64))) == Vec{-1, -1, 1, 1});
  }
  SUBCASE("gelu is the exact x * Phi(x), not the tanh approximation") {
    Tensor g = gs::linspace(-5, 5, 41, gs::kFloat64);
    Ref want = map(Ref::of(g), [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); });
    check_close(gs::gelu(g), want, 1e-13);
    // At x = 1 the tanh approximation is off by 1.5e-4.
    CHECK(gs::gelu(gs::tensor({1.0}, gs::kFloat64)).item<double>() ==
          doctest::Approx(0.8413447460685429).epsilon(1e-12));
    check_close(gs::gelu(g.to(gs::kFloat32)), want, 1e-6);
  }
  SUBCASE("softplus, including large inputs") {
    Tensor s = gs::tensor({-1000, -20, -1, 0, 1, 10, 19.5, 25, 100, 1000}, gs::kFloat64);
    Vec v = vals(gs::softplus(s));
    const Vec in = vals(s);
    for (size_t i = 0; i < in.size(); ++i) {
      CAPTURE(in[i]);
      // log(1 + e^x) = max(x, 0) + log1p(e^-|x|), exact in double for all these x.
      const double want = in[i] > 20 ? in[i] : std::max(in[i], 0.0) + std::log1p(std::exp(-std::fabs(in[i])));
      CHECK(v[i] == doctest::Approx(want).epsilon(1e-13));
    }
    CHECK(v[0] >= 0.0);
    Vec f = vals(gs::softplus(s.to(gs::kFloat32)));
    for (double e : f) CHECK(std::isfinite(e));
    CHECK(f.back() == 1000.0);
    // beta and threshold: linear when beta * x > threshold.
    Tensor b = gs::tensor({5, 15, -4}, gs::kFloat64);
    Vec vb = vals(gs::softplus(b, 2.0, 20.0));
    CHECK(vb[0] == doctest::Approx(0.5 * std::log1p(std::exp(10.0))).epsilon(1e-13));
    CHECK(vb[1] == 15.0);
    CHECK(vb[2] == doctest::Approx(0.5 * std::log1p(std::exp(-8.0))).epsilon(1e-13));
    CHECK(gs::softplus(gs::tensor({30.0}, gs::kFloat64), 0.5).item<double>() ==
          doctest::Approx(2 * std::log1p(std::exp(15.0))).epsilon(1e-13));
  }
}

TEST_CASE("sum_to and to_dtype") {
  // sum_to reduces a broadcast result back to an operand's shape: the dims that
  // were added on the left, and the size-1 dims that were expanded.
  Tensor g = randn64({2, 3, 4}, 17);
  Ref r = Ref::of(g);
  check_close(gs::sum_to(g, {3, 1}), ref_reduce(r, {0, 2}, true, 0.0, add2).v);
  CHECK(shp(gs::sum_to(g, {3, 1})) == IVec{3, 1});
  Ref to4 = ref_reduce(r, {0, 1}, false, 0.0, add2);
  check_close(gs::sum_to(g, {4}), to4);
  check_close(gs::sum_to(g, {1, 1, 4}), Ref{{1, 1, 4}, to4.v});
  CHECK(gs::sum_to(g, {}).dim() == 0);
  CHECK(gs::sum_to(g, {}).item<double>() == doctest::Approx(ref_reduce(r, {}, false, 0.0, add2).v[0]).epsilon(1e-13));
  CHECK(gs::sum_to(g, {2, 3, 4}).is_same(g));  // nothing to reduce
  CHECK_THROWS_AS(gs::sum_to(g, {5, 2, 3, 4}), gs::Error);

  Tensor x = gs::tensor({1.5, -2.5, 3}, gs::kFloat64);
  Tensor f = gs::to_dtype(x, gs::kFloat32);
  CHECK(f.dtype() == gs::kFloat32);
  CHECK(vals(f) == Vec{1.5, -2.5, 3});
  CHECK(gs::to_dtype(x, gs::kInt64).to_vector<int64_t>() == IVec{1, -2, 3});
  CHECK(gs::to_dtype(x.view({3, 1}).expand({3, 2}), gs::kFloat32).is_contiguous());
  CHECK(vals(gs::to_dtype(x.view({3, 1}).expand({3, 2}), gs::kFloat32)) == Vec{1.5, 1.5, -2.5, -2.5, 3, 3});
}

// ---- comparisons, selection, logic -----------------------------------------------------------
TEST_CASE("comparisons give bool tensors, with broadcasting") {
  Tensor a = gs::tensor({1, 2, 3}, {3, 1});
  Tensor b = gs::tensor({2, 2}, {1, 2});
  using BV = std::vector<bool>;
  Tensor e = gs::eq(a, b);
  CHECK(e.dtype() == gs::kBool);
  CHECK(shp(e) == IVec{3, 2});
  CHECK(e.to_vector<bool>() == BV{false, false, true, true, false, false});
  CHECK(gs::ne(a, b).to_vector<bool>() == BV{true, true, false, false, true, true});
  CHECK(gs::lt(a, b).to_vector<bool>() == BV{true, true, false, false, false, false});
  CHECK(gs::le(a, b).to_vector<bool>() == BV{true, true, true, true, false, false});
  CHECK(gs::gt(a, b).to_vector<bool>() == BV{false, false, false, false, true, true});
  CHECK(gs::ge(a, b).to_vector<bool>() == BV{false, false, true, true, true, true});
  CHECK((a == b).to_vector<bool>() == e.to_vector<bool>());
  CHECK((a > 1.5).to_vector<bool>() == BV{false, true, true});
  CHECK((a <= 2).to_vector<bool>() == BV{true, true, false});
  CHECK((a != 2).to_vector<bool>() == BV{true, false, true});
  CHECK((a >= 3).to_vector<bool>() == BV{false, false, true});
  CHECK((a < 2).to_vector<bool>() == BV{true, false, false});
  CHECK((a == 3).to_vector<bool>() == BV{false, false, true});
  // Mixed dtypes compare in the promoted type: int64 2 < float32 2.5.
  CHECK(gs::lt(gs::tensor(IVec{2, 3}, {2}), gs::tensor({2.5, 2.5})).to_vector<bool>() == BV{true, false});
  CHECK(a.gt(b).to_vector<bool>() == gs::gt(a, b).to_vector<bool>());
}

TEST_CASE("where, masked_fill and logical ops") {
  using BV = std::vector<bool>;
  Tensor cond = gs::tensor({1, 0, 1}, {3, 1}, gs::kBool);
  Tensor a = gs::tensor({1, 2, 3, 4}, {1, 4}, gs::kFloat64);
  Tensor w = gs::where(cond, a, gs::scalar_tensor(-1, gs::kFloat64));
  CHECK(shp(w) == IVec{3, 4});
  CHECK(vals(w) == Vec{1, 2, 3, 4, -1, -1, -1, -1, 1, 2, 3, 4});
  CHECK(gs::where(cond, gs::ones({1}), gs::zeros({1}, gs::kFloat64)).dtype() == gs::kFloat64);
  CHECK_THROWS_AS(gs::where(gs::ones({3}), a, a), gs::Error);  // condition must be bool

  Tensor x = gs::tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor m = gs::tensor({0, 1, 0}, {3}, gs::kBool);
  CHECK(vals(gs::masked_fill(x, m, 9)) == Vec{1, 9, 3, 4, 9, 6});
  CHECK(vals(x.masked_fill(x > 3.5, -1)) == Vec{1, 2, 3, -1, -1, -1});
  CHECK(vals(x) == Vec{1, 2, 3, 4, 5, 6});  // out of place
  CHECK(gs::masked_fill(gs::tensor(IVec{1, 2}, {2}), gs::tensor({1, 0}, gs::kBool), 7).to_vector<int64_t>() ==
        IVec{7, 2});

  Tensor p = gs::tensor({1, 1, 0, 0}, gs::kBool), q = gs::tensor({1, 0, 1, 0}, gs::kBool);
  CHECK(gs::logical_and(p, q).to_vector<bool>() == BV{true, false, false, false});
  CHECK(gs::logical_or(p, q).to_vector<bool>() == BV{true, true, true, false});
  CHECK(gs::logical_not(p).to_vector<bool>() == BV{false, false, true, true});
  CHECK((p && q).to_vector<bool>() == BV{true, false, false, false});
  CHECK((p || q).to_vector<bool>() == BV{true, true, true, false});
  CHECK((!q).to_vector<bool>() == BV{false, true, false, true});
  // Non-bool inputs: nonzero is true.
  Tensor f = gs::tensor({0, 2, -1, 0}), g = gs::tensor({3, 0, 0.5, 0});
  CHECK(gs::logical_and(f, g).to_vector<bool>() == BV{false, false, true, false});
  CHECK(gs::logical_or(f, g).to_vector<bool>() == BV{true, true, true, false});
  CHECK(gs::logical_not(f).to_vector<bool>() == BV{true, false, false, true});
  CHECK(gs::logical_not(f).dtype() == gs::kBool);
}

TEST_CASE("where: the contiguous fast paths (both sides, a scalar side, two scalars) agree with a loop") {
  // Long rows (the vectorised loop and its remainder), NaN and infinities in the branch
  // that is NOT taken must not leak, every dtype the select is compiled for, and
  // masked_fill_ (where with out == b).
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64, gs::kInt64}) {
    CAPTURE(dt);
    const int64_t n = 1000 + 37;
    Vec av(n), bv(n);
    std::vector<double> cv(n);
    for (int64_t i = 0; i < n; ++i) {
      av[i] = double(i % 13) - 6;
      bv[i] = double(i % 7) * 3 - 10;
      cv[i] = (i * 7919) % 5 < 2;
    }
    if (dt != gs::kInt64) {
      av[3] = NAN;
      cv[3] = 0;  // a NaN in the side not taken
      bv[4] = INFINITY;
      cv[4] = 1;
      av[5] = -INFINITY;
      cv[5] = 1;  // and one that is taken
    }
    Tensor c = gs::tensor(cv, {n}, gs::kBool), a = gs::tensor(av, {n}, dt), b = gs::tensor(bv, {n}, dt);
    Tensor s1 = gs::scalar_tensor(2, dt), s2 = gs::scalar_tensor(-7, dt);
    const double s1v = vals(s1)[0], s2v = vals(s2)[0];
    auto expect = [&](bool a_scalar, bool b_scalar) {
      Vec e(n);
      for (int64_t i = 0; i < n; ++i) e[i] = cv[i] ? (a_scalar ? s1v : av[i]) : (b_scalar ? s2v : bv[i]);
      return e;
    };
    auto same = [](const Vec& got, const Vec& want) {
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        if (std::isnan(want[i]))
          CHECK(std::isnan(got[i]));
        else
          CHECK(got[i] == want[i]);
      }
    };
    same(vals(gs::where(c, a, b)), expect(false, false));
    same(vals(gs::where(c, s1, b)), expect(true, false));
    same(vals(gs::where(c, a, s2)), expect(false, true));
    same(vals(gs::where(c, s1, s2)), expect(true, true));
    // A strided condition and side take the general loop: same answer.
    Tensor c2 = gs::stack({c, c}, 1).select(1, 0), a2 = gs::stack({a, a}, 1).select(1, 1);
    same(vals(gs::where(c2, a2, b)), expect(false, false));
    Tensor m = b.clone();
    m.masked_fill_(c, 2);
    same(vals(m), expect(true, false));
  }
}

TEST_CASE("isnan, isinf, isfinite") {
  using BV = std::vector<bool>;
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    Tensor x = gs::tensor({0, nan, inf, -inf, -1.5}, dt);
    CHECK(gs::isnan(x).to_vector<bool>() == BV{false, true, false, false, false});
    CHECK(gs::isinf(x).to_vector<bool>() == BV{false, false, true, true, false});
    CHECK(gs::isfinite(x).to_vector<bool>() == BV{true, false, false, false, true});
    CHECK(x.isnan().dtype() == gs::kBool);
    CHECK(x.isinf().to_vector<bool>() == gs::isinf(x).to_vector<bool>());
    CHECK(x.isfinite().to_vector<bool>() == gs::isfinite(x).to_vector<bool>());
  }
  Tensor i = gs::tensor(IVec{1, 2}, {2});
  CHECK(gs::isfinite(i).to_vector<bool>() == BV{true, true});
  CHECK(gs::isnan(i).to_vector<bool>() == BV{false, false});
}

// ---- reductions -------------------------------------------------------------------------------
TEST_CASE("sum, mean, amax, amin over dims, keepdim, negative dims, non-contiguous input") {
  Tensor X = randn64({3, 4, 5}, 11);
  const std::vector<IVec> dim_sets = {{}, {0}, {1}, {2}, {-1}, {-3}, {0, 2}, {1, -1}, {0, 1, 2}};
  for (int variant = 0; variant < 2; ++variant) {
    // variant 1: a permuted (non-contiguous) view with the same reference values.
    Tensor x = variant == 0 ? X : X.permute({2, 0, 1});
    Ref r = variant == 0 ? Ref::of(X) : ref_permute(Ref::of(X), {2, 0, 1});
    for (const IVec& dims : dim_sets)
      for (bool keep : {false, true}) {
        CAPTURE(variant);
        CAPTURE(keep);
        CAPTURE(dims.size());
        gs::Dims d(dims);
        Ref s = ref_reduce(r, dims, keep, 0.0, add2);
        check_close(gs::sum(x, d, keep), s);
        Ref mean = s;
        const double count = double(r.numel()) / double(s.numel());
        for (double& v : mean.v) v /= count;
        check_close(gs::mean(x, d, keep), mean);
        check_close(gs::amax(x, d, keep), ref_reduce(r, dims, keep, -INFINITY, max2));
        check_close(gs::amin(x, d, keep), ref_reduce(r, dims, keep, INFINITY, min2));
      }
  }
  // Method forms and whole-tensor reductions give 0-dim results.
  Tensor t = gs::tensor({1, 5, -2, 4}, {2, 2}, gs::kFloat64);
  CHECK(t.sum().dim() == 0);
  CHECK(t.sum().item<double>() == 8);
  CHECK(t.mean().item<double>() == 2);
  CHECK(t.max().item<double>() == 5);
  CHECK(t.min().item<double>() == -2);
  CHECK(vals(t.sum({0})) == Vec{-1, 9});
  CHECK(vals(t.mean({1}, true)) == Vec{3, 1});
  CHECK(shp(t.mean({1}, true)) == IVec{2, 1});
  // Integer and bool sums accumulate in int64.
  CHECK(gs::sum(gs::tensor(IVec{1, 2, 3}, {3})).dtype() == gs::kInt64);
  CHECK(gs::sum(gs::tensor(IVec{1, 2, 3}, {3})).item<int64_t>() == 6);
  Tensor bsum = gs::sum(gs::tensor({1, 0, 1, 1}, gs::kBool));
  CHECK(bsum.dtype() == gs::kInt64);
  CHECK(bsum.item<int64_t>() == 3);
  CHECK(gs::amax(gs::tensor(IVec{-7, 3, 2}, {3})).item<int64_t>() == 3);
  CHECK_THROWS_AS(gs::mean(gs::tensor(IVec{1, 2}, {2})), gs::Error);
  // NaN propagates through max.
  CHECK(std::isnan(gs::amax(gs::tensor({1, NAN, 3})).item<double>()));
}

TEST_CASE("max/min along a dim and argmax/argmin") {
  Tensor X = randn64({4, 6}, 12);
  Ref r = Ref::of(X);
  auto check_arg = [](const Tensor& x, const Ref& r, int64_t dim, bool keep) {
    const int64_t nd = static_cast<int64_t>(r.shape.size());
    const int64_t d = dim < 0 ? dim + nd : dim;
    IVec oshape = r.shape;
    oshape[d] = 1;
    Ref kmax{oshape, {}}, kmin{oshape, {}}, vmax{oshape, {}}, vmin{oshape, {}};
    for (int64_t f = 0; f < kmax.numel(); ++f) {
      IVec idx = unravel(f, oshape);
      int64_t bi = 0, si = 0;
      for (int64_t i = 0; i < r.shape[d]; ++i) {
        IVec j = idx, jb = idx, js = idx;
        j[d] = i;
        jb[d] = bi;
        js[d] = si;
        if (r.at(j) > r.at(jb)) bi = i;
        if (r.at(j) < r.at(js)) si = i;
      }
      kmax.v.push_back(double(bi));
      kmin.v.push_back(double(si));
      IVec jb = idx, js = idx;
      jb[d] = bi;
      js[d] = si;
      vmax.v.push_back(r.at(jb));
      vmin.v.push_back(r.at(js));
    }
    if (!keep) {
      IVec s;
      for (int64_t k = 0; k < nd; ++k)
        if (k != d) s.push_back(r.shape[k]);
      kmax.shape = kmin.shape = vmax.shape = vmin.shape = s;
    }
    Tensor am = gs::argmax(x, dim, keep);
    CHECK(am.dtype() == gs::kInt64);
    check_close(am, kmax, 0);
    check_close(gs::argmin(x, dim, keep), kmin, 0);
    check_close(gs::max(x, dim, keep), vmax, 0);
    check_close(gs::min(x, dim, keep), vmin, 0);
    check_close(x.max(dim, keep), vmax, 0);
    check_close(x.argmin(dim, keep), kmin, 0);
  };
  for (int64_t dim : {0, 1, -1, -2})
    for (bool keep : {false, true}) {
      CAPTURE(dim);
      CAPTURE(keep);
      check_arg(X, r, dim, keep);
      check_arg(X.t(), ref_permute(r, {1, 0}), dim, keep);  // non-contiguous
    }
  Tensor Y = randn64({2, 3, 4}, 13);
  check_arg(Y.permute({1, 2, 0}), ref_permute(Ref::of(Y), {1, 2, 0}), 1, true);
  check_arg(Y.slice(2, 0, 4, 2), ref_permute(Ref::of(Y.slice(2, 0, 4, 2).contiguous()), {0, 1, 2}), -1, false);

  // Ties: the first index wins.
  Tensor t = gs::tensor({1, 3, 3, 2});
  CHECK(gs::argmax(t).item<int64_t>() == 1);
  CHECK(gs::argmin(gs::tensor({2, 1, 5, 1})).item<int64_t>() == 1);
  // Without a dim: the index into the flattened tensor.
  Tensor m = gs::tensor({1, 9, 3, 4, -5, 6}, {2, 3});
  CHECK(gs::argmax(m).item<int64_t>() == 1);
  CHECK(gs::argmin(m).item<int64_t>() == 4);
  CHECK(gs::argmax(m.t()).item<int64_t>() == 2);  // m.t() flattened: 1, 4, 9, -5, 3, 6
  CHECK(gs::argmax(m).dim() == 0);
}

TEST_CASE("var and std, unbiased and biased") {
  Tensor X = randn64({5, 7}, 14) * 3.0 + 1.0;
  Ref r = Ref::of(X);
  auto ref_var = [&](const Ref& x, int64_t dim, bool unbiased) {  // dim -1 means all
    Vec out;
    const int64_t R = x.shape[0], C = x.shape[1];
    auto var_of = [&](const Vec& v) {
      double m = 0;
      for (double e : v) m += e;
      m /= double(v.size());
      double s = 0;
      for (double e : v) s += (e - m) * (e - m);
      return s / double(v.size() - (unbiased ? 1 : 0));
    };
    if (dim < 0) return Vec{var_of(x.v)};
    if (dim == 0) {
      for (int64_t c = 0; c < C; ++c) {
        Vec col;
        for (int64_t i = 0; i < R; ++i) col.push_back(x.v[i * C + c]);
        out.push_back(var_of(col));
      }
    } else {
      for (int64_t i = 0; i < R; ++i) out.push_back(var_of(Vec(x.v.begin() + i * C, x.v.begin() + (i + 1) * C)));
    }
    return out;
  };
  for (bool unbiased : {true, false}) {
    CAPTURE(unbiased);
    Vec all = ref_var(r, -1, unbiased);
    check_close(gs::var(X, {}, unbiased), Ref{{}, all});
    check_close(gs::std(X, {}, unbiased), Ref{{}, {std::sqrt(all[0])}});
    Vec d0 = ref_var(r, 0, unbiased), d1 = ref_var(r, 1, unbiased);
    check_close(gs::var(X, {0}, unbiased), Ref{{7}, d0});
    check_close(gs::var(X, {-1}, unbiased, true), Ref{{5, 1}, d1});
    Vec s1 = d1;
    for (double& v : s1) v = std::sqrt(v);
    check_close(gs::std(X, {1}, unbiased), Ref{{5}, s1});
    check_close(X.var({1}, unbiased), Ref{{5}, d1});
    // The same on a transposed view.
    check_close(gs::var(X.t(), {1}, unbiased), Ref{{7}, d0});
  }
  // Hand example: {1, 2, 3, 4}: mean 2.5, squared deviations sum to 5.
  Tensor h = gs::tensor({1, 2, 3, 4}, gs::kFloat64);
  CHECK(gs::var(h).item<double>() == doctest::Approx(5.0 / 3.0).epsilon(1e-15));
  CHECK(gs::var(h, {}, false).item<double>() == 1.25);
  CHECK(gs::std(h, {}, false).item<double>() == doctest::Approx(std::sqrt(1.25)).epsilon(1e-15));
  // A large offset does not destroy the variance (two-pass algorithm).
  Tensor big = gs::tensor({1e8 + 1, 1e8 + 2, 1e8 + 3, 1e8 + 4}, gs::kFloat64);
  CHECK(gs::var(big).item<double>() == doctest::Approx(5.0 / 3.0).epsilon(1e-9));
  CHECK_THROWS_AS(gs::var(gs::tensor({1.0})), gs::Error);  // unbiased needs 2 elements
  CHECK(gs::var(gs::tensor({1.0}), {}, false).item<double>() == 0.0);
}

TEST_CASE("float32 sums of a million elements are accurate") {
  const int64_t n = 1 << 20;
  gs::Generator g(15);
  Tensor u = gs::rand({n}, gs::kFloat32, &g);
  std::vector<float> uv = u.to_vector<float>();
  double want = 0;
  for (float f : uv) want += f;
  CHECK(std::fabs(gs::sum(u).item<double>() - want) <= 1e-6 * want);
  CHECK(std::fabs(gs::mean(u).item<double>() - want / n) <= 1e-6 * (want / n));

  // 0.1f added a million times: naive float accumulation is off by ~1%.
  Tensor c = gs::full({n}, 0.1);
  const double want_c = double(0.1f) * double(n);
  CHECK(std::fabs(gs::sum(c).item<double>() - want_c) <= 1e-6 * want_c);
  // The same along the inner dim of a 2-D tensor, and along the outer dim.
  Tensor rows = gs::full({16, n / 16}, 0.1);
  for (double v : vals(gs::sum(rows, {1}))) CHECK(std::fabs(v - double(0.1f) * (n / 16)) <= 1e-6 * (n / 16) * 0.1);
  Tensor cols = gs::full({n / 4, 4}, 0.1);
  for (double v : vals(gs::sum(cols, {0}))) CHECK(std::fabs(v - double(0.1f) * (n / 4)) <= 1e-5 * (n / 4) * 0.1);
  // A strided (non-contiguous) whole-tensor sum.
  Tensor ct = cols.t();
  CHECK(std::fabs(gs::sum(ct).item<double>() - want_c) <= 1e-6 * want_c);
}

TEST_CASE("float sums meet accurate_sum.h's documented bound on hard inputs") {
  // Mixed signs and magnitudes (cancellation): the bound is relative to sum|x|, so
  // compare against a long double sum of the same float values.
  for (int64_t n : {int64_t{7}, int64_t{1000}, int64_t{4099}, int64_t{1} << 18}) {
    gs::Generator g(40 + n);
    Tensor u = gs::randn({n}, gs::kFloat64, &g) *
               gs::pow(gs::full({n}, 10.0, gs::kFloat64), gs::randn({n}, gs::kFloat64, &g) * 3.0);
    for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
      Tensor x = u.to(dt);
      std::vector<double> xv = vals(x);
      long double exact = 0, abs_sum = 0;
      for (double v : xv) {
        exact += v;
        abs_sum += std::fabs(v);
      }
      const double levels = std::ceil(std::log2(std::max(1.0, double(n) / 1024)));
      const double bound = (37 + levels) * std::ldexp(1.0, -53) * double(abs_sum);
      // The float64 result is the accumulator itself; a float32 one is rounded once more.
      const double rounding = dt == gs::kFloat32 ? std::ldexp(1.0, -24) * std::fabs(double(exact)) : 0.0;
      CAPTURE(n);
      CAPTURE(dt);
      CHECK(std::fabs(gs::sum(x).item<double>() - double(exact)) <= bound + rounding);
      // A strided row (every other element of a 2n buffer) has its own, looser bound.
      Tensor wide = gs::stack({x, x}, 1);  // (n, 2): column 0 is x with stride 2
      Tensor col = wide.select(1, 0);
      const double bound_s = (37 + double(n) / 1024) * std::ldexp(1.0, -53) * double(abs_sum);
      CHECK(std::fabs(gs::sum(col).item<double>() - double(exact)) <= bound_s + rounding);
    }
  }
}

TEST_CASE("softmax, log_softmax, logsumexp") {
  Tensor X = randn64({4, 5}, 16) * 3.0;
  Ref r = Ref::of(X);
  // Reference softmax along dim d of a 2-D Ref.
  auto ref_softmax = [](const Ref& x, int d, bool log) {
    Ref o = x;
    const int64_t R = x.shape[0], C = x.shape[1];
    const int64_t outer = d == 1 ? R : C, len = d == 1 ? C : R;
    for (int64_t a = 0; a < outer; ++a) {
      auto idx = [&](int64_t k) { return d == 1 ? a * C + k : k * C + a; };
      double m = -INFINITY;
      for (int64_t k = 0; k < len; ++k) m = std::max(m, x.v[idx(k)]);
      double s = 0;
      for (int64_t k = 0; k < len; ++k) s += std::exp(x.v[idx(k)] - m);
      for (int64_t k = 0; k < len; ++k)
        o.v[idx(k)] = log ? x.v[idx(k)] - m - std::log(s) : std::exp(x.v[idx(k)] - m) / s;
    }
    return o;
  };
  for (int d : {0, 1}) {
    CAPTURE(d);
    check_close(gs::softmax(X, d), ref_softmax(r, d, false));
    check_close(gs::log_softmax(X, d), ref_softmax(r, d, true));
    check_close(gs::softmax(X, d - 2), ref_softmax(r, d, false));  // negative dim
    // Non-contiguous input: X.t() along each dim.
    Ref rt = ref_permute(r, {1, 0});
    check_close(gs::softmax(X.t(), d), ref_softmax(rt, d, false));
    check_close(gs::log_softmax(X.t(), d), ref_softmax(rt, d, true));
    // Rows sum to 1.
    Ref s = ref_reduce(Ref::of(gs::softmax(X.t(), d)), {d}, false, 0.0, add2);
    for (double v : s.v) CHECK(v == doctest::Approx(1.0).epsilon(1e-14));
  }
  // logsumexp against a direct double loop.
  Ref l1 = ref_reduce(r, {1}, false, 0.0, [](double acc, double v) { return acc + std::exp(v); });
  for (double& v : l1.v) v = std::log(v);
  check_close(gs::logsumexp(X, {1}), l1);
  check_close(X.logsumexp({-1}, true), Ref{{4, 1}, l1.v});
  Ref l0 = ref_reduce(r, {0}, false, 0.0, [](double acc, double v) { return acc + std::exp(v); });
  for (double& v : l0.v) v = std::log(v);
  check_close(gs::logsumexp(X.t(), {1}), l0);
  double all = 0;
  for (double v : r.v) all += std::exp(v);
  CHECK(gs::logsumexp(X, {0, 1}).item<double>() == doctest::Approx(std::log(all)).epsilon(1e-14));

  SUBCASE("stable for inputs like 1000 and -1000") {
    for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
      Tensor big = gs::tensor({1000, 999, -1000, 1000, 1000, 1000, -1000, -1001, -1000}, {3, 3}, dt);
      Vec sm = vals(gs::softmax(big, 1)), ls = vals(gs::log_softmax(big, 1)), lse = vals(gs::logsumexp(big, {1}));
      for (double v : sm) CHECK(std::isfinite(v));
      for (double v : ls) CHECK(std::isfinite(v));
      for (double v : lse) CHECK(std::isfinite(v));
      const double e1 = std::exp(-1.0);
      const double tol = dt == gs::kFloat32 ? 1e-6 : 1e-14;
      CHECK(sm[0] == doctest::Approx(1 / (1 + e1)).epsilon(tol));
      CHECK(sm[1] == doctest::Approx(e1 / (1 + e1)).epsilon(tol));
      CHECK(sm[2] == 0.0);
      for (int k = 3; k < 6; ++k) CHECK(sm[k] == doctest::Approx(1.0 / 3).epsilon(tol));
      CHECK(sm[6] == doctest::Approx(1 / (2 + e1)).epsilon(tol));
      CHECK(ls[2] == doctest::Approx(-2000 - std::log1p(e1)).epsilon(tol));
      CHECK(ls[7] == doctest::Approx(-1 - std::log(2 + e1)).epsilon(tol));
      CHECK(lse[0] == doctest::Approx(1000 + std::log1p(e1)).epsilon(tol));
      CHECK(lse[1] == doctest::Approx(1000 + std::log(3.0)).epsilon(tol));
      CHECK(lse[2] == doctest::Approx(-1000 + std::log(2 + e1)).epsilon(tol));
      // Over dim 0 of a transposed view too.
      Vec sm0 = vals(gs::softmax(big.t(), 0));
      for (double v : sm0) CHECK(std::isfinite(v));
      CHECK(sm0[0] == doctest::Approx(1 / (1 + e1)).epsilon(tol));
    }
  }
}

// ---- linear algebra ---------------------------------------------------------------------------
namespace {
// torch.matmul semantics by loops: 1-D operands are promoted and the added dim
// removed; batch dims broadcast.
Ref naive_matmul(Ref a, Ref b) {
  const bool a1 = a.shape.size() == 1, b1 = b.shape.size() == 1;
  if (a1) a.shape.insert(a.shape.begin(), 1);
  if (b1) b.shape.push_back(1);
  const int64_t N = a.shape[a.shape.size() - 2], K = a.shape.back(), M = b.shape.back();
  REQUIRE(b.shape[b.shape.size() - 2] == K);
  IVec ba(a.shape.begin(), a.shape.end() - 2), bb(b.shape.begin(), b.shape.end() - 2);
  const size_t nb = std::max(ba.size(), bb.size());
  while (ba.size() < nb) ba.insert(ba.begin(), 1);
  while (bb.size() < nb) bb.insert(bb.begin(), 1);
  IVec batch(nb);
  for (size_t i = 0; i < nb; ++i) batch[i] = std::max(ba[i], bb[i]);
  IVec os = batch;
  os.push_back(N);
  os.push_back(M);
  Ref o{os, {}};
  o.v.assign(o.numel(), 0.0);
  Ref A{ba, a.v}, B{bb, b.v};
  A.shape.push_back(N);
  A.shape.push_back(K);
  B.shape.push_back(K);
  B.shape.push_back(M);
  for (int64_t f = 0; f < o.numel(); ++f) {
    IVec i = unravel(f, os);
    IVec ia(nb + 2), ib(nb + 2);
    for (size_t d = 0; d < nb; ++d) {
      ia[d] = ba[d] == 1 ? 0 : i[d];
      ib[d] = bb[d] == 1 ? 0 : i[d];
    }
    double s = 0;
    for (int64_t k = 0; k < K; ++k) {
      ia[nb] = i[nb];
      ia[nb + 1] = k;
      ib[nb] = k;
      ib[nb + 1] = i[nb + 1];
      s += A.at(ia) * B.at(ib);
    }
    o.v[f] = s;
  }
  if (b1) o.shape.pop_back();
  if (a1) o.shape.erase(o.shape.end() - (b1 ? 1 : 2));
  return o;
}
}  // namespace

TEST_CASE("matmul against a naive triple loop") {
  Tensor A = randn64({3, 4}, 20), B = randn64({4, 5}, 21);
  check_close(gs::matmul(A, B), naive_matmul(Ref::of(A), Ref::of(B)));
  check_close(A.matmul(B), naive_matmul(Ref::of(A), Ref::of(B)));
  check_close(A.mm(B), naive_matmul(Ref::of(A), Ref::of(B)));
  // Hand example.
  Tensor p = gs::tensor({1, 2, 3, 4}, {2, 2}, gs::kFloat64), q = gs::tensor({5, 6, 7, 8}, {2, 2}, gs::kFloat64);
  CHECK(vals(gs::matmul(p, q)) == Vec{19, 22, 43, 50});

  SUBCASE("transposed views") {
    Tensor At = randn64({4, 3}, 22), Bt = randn64({5, 4}, 23);
    Ref at = ref_permute(Ref::of(At), {1, 0}), bt = ref_permute(Ref::of(Bt), {1, 0});
    check_close(gs::matmul(At.t(), B), naive_matmul(at, Ref::of(B)));
    check_close(gs::matmul(A, Bt.t()), naive_matmul(Ref::of(A), bt));
    check_close(gs::matmul(At.t(), Bt.t()), naive_matmul(at, bt));
    // A column slice with a row stride larger than its width, and a strided row slice.
    Tensor W = randn64({3, 9}, 24);
    Tensor Ws = W.narrow(1, 2, 4);
    check_close(gs::matmul(Ws, B), naive_matmul(Ref::of(Ws.contiguous()), Ref::of(B)));
    Tensor Wstep = W.slice(1, 0, 8, 2);  // (3, 4) with inner stride 2
    check_close(gs::matmul(Wstep, B), naive_matmul(Ref::of(Wstep.contiguous()), Ref::of(B)));
  }
  SUBCASE("batched with broadcasting") {
    Tensor a = randn64({2, 1, 3, 4}, 25), b = randn64({3, 4, 2}, 26);
    Tensor c = gs::matmul(a, b);
    CHECK(shp(c) == IVec{2, 3, 3, 2});
    check_close(c, naive_matmul(Ref::of(a), Ref::of(b)));
    Tensor x = randn64({5, 3, 4}, 27), w = randn64({4, 6}, 28);
    check_close(gs::matmul(x, w), naive_matmul(Ref::of(x), Ref::of(w)));
    check_close(gs::matmul(w.t(), x.transpose(1, 2)),
                naive_matmul(ref_permute(Ref::of(w), {1, 0}), ref_permute(Ref::of(x), {0, 2, 1})));
    // Batch dims that are not laid out back to back (a permuted batch).
    Tensor y = randn64({3, 2, 4, 5}, 29);
    Tensor yp = y.permute({1, 0, 2, 3});  // (2, 3, 4, 5)
    Tensor z = randn64({2, 3, 5, 2}, 30);
    check_close(gs::matmul(yp, z), naive_matmul(ref_permute(Ref::of(y), {1, 0, 2, 3}), Ref::of(z)));
  }
  SUBCASE("1-D operands") {
    Tensor v = randn64({4}, 31), u = randn64({4}, 32), M = randn64({4, 3}, 33), N = randn64({2, 4}, 34);
    Tensor dot = gs::matmul(v, u);
    CHECK(dot.dim() == 0);
    check_close(dot, naive_matmul(Ref::of(v), Ref::of(u)));
    check_close(gs::matmul(v, M), naive_matmul(Ref::of(v), Ref::of(M)));
    CHECK(shp(gs::matmul(v, M)) == IVec{3});
    check_close(gs::matmul(N, v), naive_matmul(Ref::of(N), Ref::of(v)));
    CHECK(shp(gs::matmul(N, v)) == IVec{2});
    Tensor Bt = randn64({5, 2, 4}, 35), Bk = randn64({5, 4, 3}, 36);
    check_close(gs::matmul(Bt, v), naive_matmul(Ref::of(Bt), Ref::of(v)));
    CHECK(shp(gs::matmul(Bt, v)) == IVec{5, 2});
    check_close(gs::matmul(v, Bk), naive_matmul(Ref::of(v), Ref::of(Bk)));
    CHECK(shp(gs::matmul(v, Bk)) == IVec{5, 3});
    // A strided vector.
    Tensor s = randn64({8}, 37).slice(0, 0, 8, 2);
    check_close(gs::matmul(s, u), naive_matmul(Ref::of(s.contiguous()), Ref::of(u)));
    check_close(gs::matmul(N, s), naive_matmul(Ref::of(N), Ref::of(s.contiguous())));
    // Hand example.
    CHECK(gs::matmul(gs::tensor({1, 2, 3}), gs::tensor({4, 5, 6})).item<double>() == 32);
  }
  SUBCASE("float32 and mixed dtypes") {
    Tensor a = randn64({16, 33}, 38), b = randn64({33, 7}, 39);
    Ref want = naive_matmul(Ref::of(a), Ref::of(b));
    Tensor c = gs::matmul(a.to(gs::kFloat32), b.to(gs::kFloat32));
    CHECK(c.dtype() == gs::kFloat32);
    check_close(c, want, 1e-5);
    Tensor m = gs::matmul(a.to(gs::kFloat32), b);
    CHECK(m.dtype() == gs::kFloat64);
    check_close(m, naive_matmul(Ref::of(a.to(gs::kFloat32)), Ref::of(b)), 1e-12);
    Tensor ia = gs::tensor(IVec{1, 2, 3, 4}, {2, 2});
    CHECK(gs::matmul(ia, ia).to_vector<int64_t>() == IVec{7, 10, 15, 22});
  }
  SUBCASE("larger: a GEMM big enough for blocked kernels") {
    Tensor a = randn64({65, 130}, 40), b = randn64({130, 67}, 41);
    check_close(gs::matmul(a, b), naive_matmul(Ref::of(a), Ref::of(b)), 1e-11);
    check_close(gs::matmul(b.t(), a.t()), ref_permute(naive_matmul(Ref::of(a), Ref::of(b)), {1, 0}), 1e-11);
  }
}

TEST_CASE("linear") {
  Tensor x = randn64({3, 4}, 42), w = randn64({5, 4}, 43), b = randn64({5}, 44);
  Ref rx = Ref::of(x), rw = Ref::of(w), rb = Ref::of(b);
  Ref want{{3, 5}, {}}, want_nb{{3, 5}, {}};
  for (int i = 0; i < 3; ++i)
    for (int o = 0; o < 5; ++o) {
      double s = 0;
      for (int k = 0; k < 4; ++k) s += rx.v[i * 4 + k] * rw.v[o * 4 + k];
      want_nb.v.push_back(s);
      want.v.push_back(s + rb.v[o]);
    }
  check_close(gs::linear(x, w, b), want);
  check_close(gs::linear(x, w), want_nb);
  // A batch of sequences (B, T, in).
  Tensor xs = gs::stack({x, x * 2.0}, 0);
  Tensor ys = gs::linear(xs, w, b);
  CHECK(shp(ys) == IVec{2, 3, 5});
  Vec yv = vals(ys);
  for (int i = 0; i < 15; ++i) {
    CHECK(yv[i] == doctest::Approx(want.v[i]).epsilon(1e-12));
    CHECK(yv[15 + i] == doctest::Approx(2 * want_nb.v[i] + rb.v[i % 5]).epsilon(1e-12));
  }
  std::string msg;
  try {
    gs::linear(x, w.t());
  } catch (const gs::Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("linear") != std::string::npos);
  CHECK(msg.find("[4, 5]") != std::string::npos);
}

// ---- indexing and joining ----------------------------------------------------------------------
TEST_CASE("gather and index_select") {
  Tensor x = gs::tensor({0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23}, {3, 4}, gs::kFloat64);
  Tensor i1 = gs::tensor(IVec{3, 0, 1, 1, 2, 3}, {3, 2});
  CHECK(vals(gs::gather(x, 1, i1)) == Vec{3, 0, 11, 11, 22, 23});
  CHECK(vals(x.gather(-1, i1)) == Vec{3, 0, 11, 11, 22, 23});
  Tensor i0 = gs::tensor(IVec{2, 0, 1, 2, 0, 0, 0, 1}, {2, 4});
  CHECK(vals(gs::gather(x, 0, i0)) == Vec{20, 1, 12, 23, 0, 1, 2, 13});
  // The index may be smaller than the input in the other dims.
  CHECK(vals(gs::gather(x, 1, gs::tensor(IVec{1, 3}, {2, 1}))) == Vec{1, 13});
  // Non-contiguous input: gather from x.t() (4, 3).
  CHECK(vals(gs::gather(x.t(), 1, gs::tensor(IVec{2, 0, 1, 1}, {4, 1}))) == Vec{20, 1, 12, 13});

  CHECK(vals(gs::index_select(x, 0, gs::tensor(IVec{2, 0, 2}, {3}))) ==
        Vec{20, 21, 22, 23, 0, 1, 2, 3, 20, 21, 22, 23});
  CHECK(vals(x.index_select(1, gs::tensor(IVec{3, 1}, {2}))) == Vec{3, 1, 13, 11, 23, 21});
  CHECK(vals(gs::index_select(x.t(), 0, gs::tensor(IVec{1}, {1}))) == Vec{1, 11, 21});
  CHECK(shp(gs::index_select(x, 1, gs::tensor(IVec{}, {0}))) == IVec{3, 0});
  CHECK_THROWS_AS(gs::index_select(x, 0, gs::tensor({0.0})), gs::Error);  // float indices
}

TEST_CASE("embedding") {
  Tensor w = gs::tensor({0, 1, 10, 11, 20, 21, 30, 31, 40, 41}, {5, 2});
  Tensor idx = gs::tensor(IVec{4, 0, 2, 1, 1, 3}, {2, 3});
  Tensor e = gs::embedding(w, idx);
  CHECK(shp(e) == IVec{2, 3, 2});
  CHECK(vals(e) == Vec{40, 41, 0, 1, 20, 21, 10, 11, 10, 11, 30, 31});
  CHECK(shp(gs::embedding(w, gs::tensor(IVec{3}, {1}))) == IVec{1, 2});
  CHECK_THROWS_AS(gs::embedding(w, gs::tensor({1.0})), gs::Error);
}

TEST_CASE("cat and stack") {
  Tensor a = gs::tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = gs::tensor({7, 8, 9}, {1, 3});
  Tensor c = gs::tensor({-1, -2, -3, -4}, {2, 2});
  Tensor r0 = gs::cat({a, b}, 0);
  CHECK(shp(r0) == IVec{3, 3});
  CHECK(vals(r0) == Vec{1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor r1 = gs::cat({a, c}, 1);
  CHECK(shp(r1) == IVec{2, 5});
  CHECK(vals(r1) == Vec{1, 2, 3, -1, -2, 4, 5, 6, -3, -4});
  CHECK(vals(gs::cat({c, a, c}, -1)) == Vec{-1, -2, 1, 2, 3, -1, -2, -3, -4, 4, 5, 6, -3, -4});
  // Non-contiguous parts and dtype promotion.
  Tensor r2 = gs::cat({a.t(), gs::ones({3, 1}, gs::kFloat64)}, 1);
  CHECK(r2.dtype() == gs::kFloat64);
  CHECK(vals(r2) == Vec{1, 4, 1, 2, 5, 1, 3, 6, 1});
  CHECK(shp(gs::cat({a.t(), gs::zeros({3, 1})}, 1)) == IVec{3, 3});
  CHECK(vals(gs::cat({a.t(), gs::zeros({3, 1})}, 1)) == Vec{1, 4, 0, 2, 5, 0, 3, 6, 0});
  CHECK(vals(gs::cat({a}, 0)) == vals(a));
  std::string msg;
  try {
    gs::cat({a, b}, 1);
  } catch (const gs::Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("cat") != std::string::npos);
  CHECK(msg.find("[1, 3]") != std::string::npos);

  Tensor x = gs::tensor({1, 2}), y = gs::tensor({3, 4}), z = gs::tensor({5, 6});
  Tensor s0 = gs::stack({x, y, z}, 0);
  CHECK(shp(s0) == IVec{3, 2});
  CHECK(vals(s0) == Vec{1, 2, 3, 4, 5, 6});
  Tensor s1 = gs::stack({x, y, z}, 1);
  CHECK(shp(s1) == IVec{2, 3});
  CHECK(vals(s1) == Vec{1, 3, 5, 2, 4, 6});
  CHECK(vals(gs::stack({x, y, z}, -1)) == vals(s1));
  Tensor s3 = gs::stack({a, a * 10}, 2);
  CHECK(shp(s3) == IVec{2, 3, 2});
  CHECK(vals(s3) == Vec{1, 10, 2, 20, 3, 30, 4, 40, 5, 50, 6, 60});
  CHECK_THROWS_AS(gs::stack({x, a}), gs::Error);
}

TEST_CASE("split, split_with_sizes, chunk") {
  Tensor x = gs::arange(10);
  std::vector<Tensor> p = gs::split(x, 3);
  REQUIRE(p.size() == 4);
  CHECK(vals(p[0]) == Vec{0, 1, 2});
  CHECK(vals(p[1]) == Vec{3, 4, 5});
  CHECK(vals(p[2]) == Vec{6, 7, 8});
  CHECK(vals(p[3]) == Vec{9});
  CHECK(p[2].storage() == x.storage());  // views
  CHECK(p[2].offset() == 6);

  Tensor m = gs::arange(10).view({2, 5});
  std::vector<Tensor> q = m.split(2, 1);
  REQUIRE(q.size() == 3);
  CHECK(shp(q[0]) == IVec{2, 2});
  CHECK(vals(q[1]) == Vec{2, 3, 7, 8});
  CHECK(vals(q[2]) == Vec{4, 9});
  std::vector<Tensor> w = gs::split_with_sizes(m, {1, 4}, -1);
  REQUIRE(w.size() == 2);
  CHECK(vals(w[0]) == Vec{0, 5});
  CHECK(vals(w[1]) == Vec{1, 2, 3, 4, 6, 7, 8, 9});
  CHECK_THROWS_AS(gs::split_with_sizes(m, {1, 3}, 1), gs::Error);

  std::vector<Tensor> c = gs::arange(5).chunk(3);
  REQUIRE(c.size() == 3);
  CHECK(vals(c[0]) == Vec{0, 1});
  CHECK(vals(c[1]) == Vec{2, 3});
  CHECK(vals(c[2]) == Vec{4});
  std::vector<Tensor> c6 = gs::arange(6).chunk(3);
  REQUIRE(c6.size() == 3);
  CHECK(vals(c6[2]) == Vec{4, 5});
  std::vector<Tensor> c2 = m.chunk(2, 0);
  REQUIRE(c2.size() == 2);
  CHECK(vals(c2[1]) == Vec{5, 6, 7, 8, 9});
}

// ---- convolution and pooling ----------------------------------------------------------------------
namespace {
struct ConvArgs {
  int64_t sH = 1, sW = 1, pH = 0, pW = 0, dH = 1, dW = 1, groups = 1;
};

// Direct convolution: out[n][o][i][j] = b[o] + sum_{c, ki, kj} x[n][g*Cg + c][i*s - p + ki*d][...] * w[o][c][ki][kj].
Ref naive_conv2d(const Ref& x, const Ref& w, const Ref* b, const ConvArgs& a) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t O = w.shape[0], Cg = w.shape[1], kH = w.shape[2], kW = w.shape[3];
  REQUIRE(Cg * a.groups == C);
  const int64_t oH = (H + 2 * a.pH - a.dH * (kH - 1) - 1) / a.sH + 1;
  const int64_t oW = (W + 2 * a.pW - a.dW * (kW - 1) - 1) / a.sW + 1;
  const int64_t Og = O / a.groups;
  Ref o{{N, O, oH, oW}, {}};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oc = 0; oc < O; ++oc)
      for (int64_t i = 0; i < oH; ++i)
        for (int64_t j = 0; j < oW; ++j) {
          double s = b ? b->v[oc] : 0.0;
          const int64_t g = oc / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t ki = 0; ki < kH; ++ki)
              for (int64_t kj = 0; kj < kW; ++kj) {
                const int64_t h = i * a.sH - a.pH + ki * a.dH, ww = j * a.sW - a.pW + kj * a.dW;
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                s += x.at({n, g * Cg + c, h, ww}) * w.at({oc, c, ki, kj});
              }
          o.v.push_back(s);
        }
  return o;
}

// Pooling by loops. max ignores padded positions; avg divides by kH*kW (padding counts as zeros).
Ref naive_pool(const Ref& x, int64_t kH, int64_t kW, int64_t sH, int64_t sW, int64_t pH, int64_t pW, int64_t dH,
               int64_t dW, bool is_max) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t oH = (H + 2 * pH - dH * (kH - 1) - 1) / sH + 1, oW = (W + 2 * pW - dW * (kW - 1) - 1) / sW + 1;
  Ref o{{N, C, oH, oW}, {}};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < oH; ++i)
        for (int64_t j = 0; j < oW; ++j) {
          double m = -INFINITY, s = 0;
          for (int64_t ki = 0; ki < kH; ++ki)
            for (int64_t kj = 0; kj < kW; ++kj) {
              const int64_t h = i * sH - pH + ki * dH, w = j * sW - pW + kj * dW;
              if (h < 0 || h >= H || w < 0 || w >= W) continue;
              m = std::max(m, x.at({n, c, h, w}));
              s += x.at({n, c, h, w});
            }
          o.v.push_back(is_max ? m : s / double(kH * kW));
        }
  return o;
}
}  // namespace

TEST_CASE("conv2d against a direct convolution loop") {
  struct Case {
    const char* label;
    IVec xs, ws;
    ConvArgs a;
    bool bias;
  };
  const Case cases[] = {
      {"3x3 basic", {2, 3, 7, 6}, {4, 3, 3, 3}, {}, true},
      {"1x1", {1, 4, 5, 5}, {2, 4, 1, 1}, {}, false},
      {"stride 2", {2, 2, 9, 8}, {3, 2, 3, 3}, {2, 2, 0, 0, 1, 1, 1}, true},
      {"padding 1", {1, 3, 5, 4}, {2, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1}, true},
      {"dilation 2", {1, 2, 9, 9}, {3, 2, 3, 3}, {1, 1, 0, 0, 2, 2, 1}, false},
      {"groups 2", {2, 4, 6, 6}, {6, 2, 3, 3}, {1, 1, 1, 1, 1, 1, 2}, true},
      {"depthwise", {1, 3, 5, 5}, {3, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 3}, true},
      {"rectangular kernel, asymmetric stride/padding/dilation",
       {2, 2, 8, 10},
       {3, 2, 2, 3},
       {2, 1, 1, 2, 1, 2, 1},
       true},
      {"everything at once", {2, 4, 11, 9}, {4, 2, 3, 2}, {2, 3, 2, 1, 2, 1, 2}, true},
  };
  for (const Case& c : cases) {
    CAPTURE(c.label);
    Tensor x = randn64(gs::Shape(c.xs), 50), w = randn64(gs::Shape(c.ws), 51), b = randn64({c.ws[0]}, 52);
    Ref rb = Ref::of(b);
    Ref want = naive_conv2d(Ref::of(x), Ref::of(w), c.bias ? &rb : nullptr, c.a);
    Tensor y =
        gs::conv2d(x, w, c.bias ? b : Tensor(), {c.a.sH, c.a.sW}, {c.a.pH, c.a.pW}, {c.a.dH, c.a.dW}, c.a.groups);
    check_close(y, want, 1e-12);
    Tensor y32 = gs::conv2d(x.to(gs::kFloat32), w.to(gs::kFloat32), c.bias ? b.to(gs::kFloat32) : Tensor(),
                            {c.a.sH, c.a.sW}, {c.a.pH, c.a.pW}, {c.a.dH, c.a.dW}, c.a.groups);
    CHECK(y32.dtype() == gs::kFloat32);
    check_close(y32, want, 1e-5);
  }
  // A non-contiguous input (NCWH storage seen as NCHW).
  Tensor xb = randn64({2, 3, 6, 5}, 53);
  Tensor xt = xb.transpose(2, 3);  // (2, 3, 5, 6)
  Tensor w = randn64({2, 3, 3, 3}, 54);
  check_close(gs::conv2d(xt, w), naive_conv2d(ref_permute(Ref::of(xb), {0, 1, 3, 2}), Ref::of(w), nullptr, {}));
  // Single-entry lists mean the same value for H and W.
  Tensor x = randn64({1, 3, 7, 7}, 55);
  check_close(gs::conv2d(x, w, Tensor(), {2}, {1}, {1}),
              naive_conv2d(Ref::of(x), Ref::of(w), nullptr, {2, 2, 1, 1, 1, 1, 1}));
  // Hand example: a 2x2 all-ones kernel sums each window.
  Tensor h = gs::arange(9).view({1, 1, 3, 3});
  CHECK(vals(gs::conv2d(h, gs::ones({1, 1, 2, 2}))) == Vec{0 + 1 + 3 + 4, 1 + 2 + 4 + 5, 3 + 4 + 6 + 7, 4 + 5 + 7 + 8});
  // Errors name the op and the shapes.
  std::string msg;
  try {
    gs::conv2d(x, randn64({2, 4, 3, 3}, 56));
  } catch (const gs::Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("conv2d") != std::string::npos);
  CHECK(msg.find("[1, 3, 7, 7]") != std::string::npos);
  CHECK(msg.find("[2, 4, 3, 3]") != std::string::npos);
  CHECK_THROWS_AS(gs::conv2d(randn64({3, 7, 7}, 1), w), gs::Error);
  CHECK_THROWS_AS(gs::conv2d(randn64({1, 3, 2, 2}, 1), w), gs::Error);  // too small
}

TEST_CASE("max_pool2d and avg_pool2d against loops") {
  Tensor x = randn64({2, 3, 8, 7}, 60);
  Ref r = Ref::of(x);
  // kernel, stride (empty: = kernel), padding, dilation
  check_close(gs::max_pool2d(x, {2}), naive_pool(r, 2, 2, 2, 2, 0, 0, 1, 1, true));
  check_close(gs::max_pool2d(x, {3, 2}, {2, 1}), naive_pool(r, 3, 2, 2, 1, 0, 0, 1, 1, true));
  check_close(gs::max_pool2d(x, {3}, {2}, {1}), naive_pool(r, 3, 3, 2, 2, 1, 1, 1, 1, true));
  check_close(gs::max_pool2d(x, {2}, {1}, {0}, {2}), naive_pool(r, 2, 2, 1, 1, 0, 0, 2, 2, true));
  check_close(gs::max_pool2d(x, {3, 3}, {1, 2}, {1, 0}, {1, 2}), naive_pool(r, 3, 3, 1, 2, 1, 0, 1, 2, true));
  check_close(gs::avg_pool2d(x, {2}), naive_pool(r, 2, 2, 2, 2, 0, 0, 1, 1, false));
  check_close(gs::avg_pool2d(x, {3, 2}, {2, 1}), naive_pool(r, 3, 2, 2, 1, 0, 0, 1, 1, false));
  check_close(gs::avg_pool2d(x, {3}, {2}, {1}), naive_pool(r, 3, 3, 2, 2, 1, 1, 1, 1, false));
  // Non-contiguous input.
  Tensor xt = x.transpose(2, 3);
  Ref rt = ref_permute(r, {0, 1, 3, 2});
  check_close(gs::max_pool2d(xt, {2}), naive_pool(rt, 2, 2, 2, 2, 0, 0, 1, 1, true));
  check_close(gs::avg_pool2d(xt, {2, 3}, {1, 2}), naive_pool(rt, 2, 3, 1, 2, 0, 0, 1, 1, false));
  // float32 and all-negative windows with padding (a padded zero must not win).
  Tensor neg = -(gs::abs(x) + 1.0);
  check_close(gs::max_pool2d(neg.to(gs::kFloat32), {3}, {2}, {1}),
              naive_pool(Ref::of(neg), 3, 3, 2, 2, 1, 1, 1, 1, true), 1e-6);
  // Hand example.
  Tensor h = gs::arange(16).view({1, 1, 4, 4});
  CHECK(vals(gs::max_pool2d(h, {2})) == Vec{5, 7, 13, 15});
  CHECK(vals(gs::avg_pool2d(h, {2})) == Vec{2.5, 4.5, 10.5, 12.5});
}

// ---- dropout -----------------------------------------------------------------------------------------
TEST_CASE("dropout") {
  Tensor x = gs::ones({200, 500});
  SUBCASE("eval mode is the identity") {
    Tensor y = gs::dropout(x, 0.5, /*training=*/false);
    CHECK(vals(y) == vals(x));
    CHECK(gs::equal(gs::dropout(x, 0.0, true), x));
  }
  SUBCASE("training: fraction zeroed ~ p, survivors scaled by 1/(1-p)") {
    for (double p : {0.1, 0.3, 0.75}) {
      CAPTURE(p);
      gs::Generator g(70);
      Vec v = vals(gs::dropout(x, p, true, &g));
      const float scale = static_cast<float>(1.0 / (1.0 - p));
      int64_t zeros = 0, bad = 0;
      for (double e : v) {
        if (e == 0.0)
          ++zeros;
        else
          bad += !(std::fabs(e - scale) <= 1e-6 * scale);
      }
      CHECK(bad == 0);
      // 100k elements: standard error of the fraction <= 0.0016.
      CHECK(double(zeros) / double(v.size()) == doctest::Approx(p).epsilon(0.01 / p));
      // E[output] = x.
      double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
      CHECK(mean == doctest::Approx(1.0).epsilon(0.02));
    }
    // Values are scaled, not replaced: input 3 -> 3/(1-p).
    gs::Generator g(71);
    Vec w = vals(gs::dropout(gs::full({1000}, 3.0, gs::kFloat64), 0.5, true, &g));
    int64_t other = 0;
    for (double e : w) other += !(e == 0.0 || e == 6.0);
    CHECK(other == 0);
  }
  SUBCASE("same seed, same mask; different seeds differ") {
    gs::Generator g1(5), g2(5), g3(6);
    Tensor a = gs::dropout(x, 0.5, true, &g1), b = gs::dropout(x, 0.5, true, &g2), c = gs::dropout(x, 0.5, true, &g3);
    CHECK(vals(a) == vals(b));
    CHECK(vals(a) != vals(c));
    // The generator advances: a second call gives a new mask.
    CHECK(vals(gs::dropout(x, 0.5, true, &g1)) != vals(a));
    gs::manual_seed(9);
    Tensor d1 = gs::dropout(x, 0.2, true);
    gs::manual_seed(9);
    Tensor d2 = gs::dropout(x, 0.2, true);
    CHECK(vals(d1) == vals(d2));
  }
  SUBCASE("p = 1 zeroes everything; bad p raises") {
    CHECK(vals(gs::dropout(x, 1.0, true)) == Vec(x.numel(), 0.0));
    CHECK_THROWS_AS(gs::dropout(x, 1.5, true), gs::Error);
    CHECK_THROWS_AS(gs::dropout(x, -0.1, true), gs::Error);
  }
}

// ---- hardening: NaN on every path, pooling/conv output sizes ---------------------------
TEST_CASE("every unary op gives the same result for NaN on every path (contiguous, strided, one element)") {
  using F = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<std::string, F>> ops = {
      {"neg", [](const Tensor& x) { return gs::neg(x); }},
      {"exp", [](const Tensor& x) { return gs::exp(x); }},
      {"log", [](const Tensor& x) { return gs::log(x); }},
      {"sqrt", [](const Tensor& x) { return gs::sqrt(x); }},
      {"abs", [](const Tensor& x) { return gs::abs(x); }},
      {"sign", [](const Tensor& x) { return gs::sign(x); }},
      {"square", [](const Tensor& x) { return gs::square(x); }},
      {"reciprocal", [](const Tensor& x) { return gs::reciprocal(x); }},
      {"erf", [](const Tensor& x) { return gs::erf(x); }},
      {"log1p", [](const Tensor& x) { return gs::log1p(x); }},
      {"sin", [](const Tensor& x) { return gs::sin(x); }},
      {"cos", [](const Tensor& x) { return gs::cos(x); }},
      {"relu", [](const Tensor& x) { return gs::relu(x); }},
      {"sigmoid", [](const Tensor& x) { return gs::sigmoid(x); }},
      {"tanh", [](const Tensor& x) { return gs::tanh(x); }},
      {"gelu", [](const Tensor& x) { return gs::gelu(x); }},
      {"leaky_relu", [](const Tensor& x) { return gs::leaky_relu(x); }},
      {"softplus", [](const Tensor& x) { return gs::softplus(x); }},
      {"clamp", [](const Tensor& x) { return gs::clamp(x, -1.0, 1.0); }},
      {"clamp_min", [](const Tensor& x) { return gs::clamp(x, 0.0, std::nullopt); }},
      {"maximum", [](const Tensor& x) { return gs::maximum(x, gs::zeros_like(x)); }},
      {"minimum", [](const Tensor& x) { return gs::minimum(gs::zeros_like(x), x); }},
  };
  const double nan = std::nan("");
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    for (const auto& [name, f] : ops) {
      CAPTURE(name);
      CAPTURE(gs::dtype_name(dt));
      // Contiguous, >= 2 elements (the vectorised paths): NaN among ordinary values.
      Tensor c = gs::tensor({-2, nan, 3, nan, 0.5, -0.25, nan, 1, 2, nan, -1, 4, nan, 5, -3, nan, 0.125}, dt);
      Tensor yc = f(c);
      // Strided: every other element of a longer tensor.
      Tensor big = gs::full({34}, 7.0, dt);
      big.slice(0, 0, 34, 2).copy_(c);
      Tensor ys = f(big.slice(0, 0, 34, 2));
      // One element and a 0-dim tensor.
      Tensor y1 = f(gs::tensor({nan}, dt));
      Tensor y0 = f(gs::scalar_tensor(nan, dt));
      const Vec vc = vals(yc), vs = vals(ys);
      const double r1 = vals(y1)[0], r0 = y0.item<double>();
      const bool expect_nan = name != "sign";
      for (size_t i = 0; i < vc.size(); ++i) {
        CAPTURE(i);
        if (std::isnan(vals(c)[i])) {
          CHECK(std::isnan(vc[i]) == expect_nan);
          CHECK(std::isnan(vs[i]) == std::isnan(vc[i]));
        } else {
          const bool same =
              (std::isnan(vs[i]) && std::isnan(vc[i])) || vs[i] == vc[i] || vs[i] == doctest::Approx(vc[i]);
          CHECK(same);
        }
      }
      CHECK(std::isnan(r1) == expect_nan);
      CHECK(std::isnan(r0) == expect_nan);
      if (!expect_nan) CHECK(r1 == r0);
    }
  }
}

TEST_CASE("relu, maximum and minimum backward do not hide NaN (PyTorch's rules)") {
  const double nan = std::nan("");
  Tensor x = gs::tensor({nan, -1, 2, 0}, gs::kFloat64).requires_grad_(true);
  gs::relu(x).sum().backward();
  CHECK(vals(x.grad()) == Vec{1, 0, 1, 0});  // NaN: the gradient passes (threshold_backward: x <= 0 ? 0 : g)
  Tensor a = gs::tensor({nan, 1, 2, 3}, gs::kFloat64).requires_grad_(true);
  Tensor b = gs::tensor({0, nan, 2, 1}, gs::kFloat64).requires_grad_(true);
  gs::maximum(a, b).sum().backward();
  CHECK(vals(a.grad()) == Vec{1, 1, 0.5, 1});
  CHECK(vals(b.grad()) == Vec{1, 1, 0.5, 0});
  a.zero_grad();
  b.zero_grad();
  gs::minimum(a, b).sum().backward();
  CHECK(vals(a.grad()) == Vec{1, 1, 0.5, 0});
  CHECK(vals(b.grad()) == Vec{1, 1, 0.5, 1});
}

TEST_CASE("functional pooling and conv validate output sizes: a kernel larger than the input is an error") {
  Tensor x = gs::ones({1, 1, 1, 2});
  // Before: truncating division gave a 1x1 (or larger) output and a read past the buffer.
  auto msg = [](auto&& f) {
    try {
      f();
    } catch (const gs::Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  for (const std::string& m : {msg([&] { gs::max_pool2d(x, {5}); }), msg([&] {
                                 gs::max_pool2d(x, {3, 3}, {1});
                               }),
                               msg([&] { gs::avg_pool2d(x, {5}); }), msg([&] {
                                 gs::conv2d(x, gs::ones({1, 1, 5, 5}), Tensor());
                               })}) {
    CAPTURE(m);
    CHECK(m.find("is too small for a") != std::string::npos);
    CHECK(m.find("[1, 1, 1, 2]") != std::string::npos);
  }
  // Dilation that spans past the input.
  CHECK(msg([&] {
          gs::max_pool2d(gs::ones({1, 1, 4, 4}), {2}, {1}, {0}, {4});
        }).find("too small") != std::string::npos);
  // avg_pool2d checks padding like max_pool2d.
  CHECK(msg([&] { gs::avg_pool2d(gs::ones({1, 1, 4, 4}), {2}, {1}, {2}); }).find("at most half") != std::string::npos);
  // Overflowing geometry is an error, not a wrap.
  CHECK(msg([&] { gs::max_pool2d(x, {2}, {1}, {0}, {int64_t{1} << 62}); }).find("max_pool2d") == 0);
  // Exact fits still work.
  CHECK(gs::max_pool2d(gs::ones({1, 1, 2, 2}), {2}).shape().vec() == IVec{1, 1, 1, 1});
  CHECK(gs::max_pool2d(x, {1, 2}).shape().vec() == IVec{1, 1, 1, 1});
}
