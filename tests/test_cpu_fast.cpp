// Every tuned CPU kernel (core/cpu/fast/) against the reference loop it replaces
// (core/cpu/*.cpp), with set_cpu_fast_kernels on and off in one process: matmul within
// the dot-product bound, the transcendental functions and softmax within a few ulps with
// the special values exact, im2col/col2im and max pooling bit for bit, conv2d within
// the GEMM's bound (and Winograd's), the optimizer steps bit for bit (SGD) or within a
// few ulps, binary ops, comparisons, where and relu's backward bit for bit, reductions
// within accurate_sum.h's bound, large buffers on huge pages. Sizes are odd, so no block or
// vector width divides them.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/fast_kernels.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "optim/optim.h"

namespace {

using gs::Tensor;

// Tuned kernels on or off for its lifetime.
struct Fast {
  bool was;
  explicit Fast(bool on) : was(gs::cpu_fast_kernels()) { gs::set_cpu_fast_kernels(on); }
  ~Fast() { gs::set_cpu_fast_kernels(was); }
};

std::vector<double> values(const Tensor& t) { return t.detach().to_vector<double>(); }

Tensor randn(std::vector<int64_t> shape, gs::DType dt, uint64_t seed) {
  gs::Generator g(seed);
  return gs::randn(shape, gs::TensorOptions(dt), &g);
}

// Both NaN, or equal bits (as doubles: -0 and +0 differ).
bool same_bits(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// Within `ulps` units in the last place of `dt` (relative), or both the same special value.
bool close_ulps(double a, double b, gs::DType dt, double ulps) {
  if (std::isnan(a) || std::isnan(b) || std::isinf(a) || std::isinf(b) || a == 0 || b == 0)
    return same_bits(a, b) || a == b;
  const double eps = dt == gs::kFloat32 ? std::ldexp(1.0, -23) : std::ldexp(1.0, -52);
  const double tiny = dt == gs::kFloat32 ? 1e-44 : 1e-320;  // denormal results: absolute
  return std::fabs(a - b) <= ulps * eps * std::max(std::fabs(a), std::fabs(b)) + tiny;
}

}  // namespace

TEST_CASE("cpu fast: the switch starts at the build's default or GRADSLEUTH_FAST_KERNELS, and works") {
  const char* env = std::getenv("GRADSLEUTH_FAST_KERNELS");
  const bool def = env ? std::string(env) != "0" : gs::cpu_fast_kernels_default();
  CHECK(gs::cpu_fast_kernels() == def);
  {
    Fast off(false);
    CHECK_FALSE(gs::cpu_fast_kernels());
  }
  CHECK(gs::cpu_fast_kernels() == def);
}

TEST_CASE("cpu fast: matmul agrees with the reference loop within the dot-product bound") {
  struct Case {
    int64_t B, N, K, M;
    bool ta, tb;  // a, b as transposed views
  };
  const Case cases[] = {{1, 37, 53, 29, false, false}, {3, 17, 65, 33, false, true},  {2, 31, 9, 47, true, false},
                        {1, 5, 257, 3, true, true},    {1, 64, 784, 70, false, true}, {4, 1, 13, 1, false, false}};
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    for (const Case& c : cases) {
      CAPTURE(std::string(gs::dtype_name(dt)));
      CAPTURE(c.B);
      CAPTURE(c.N);
      CAPTURE(c.K);
      CAPTURE(c.M);
      CAPTURE(c.ta);
      CAPTURE(c.tb);
      Tensor a = c.ta ? randn({c.B, c.K, c.N}, dt, 1).transpose(1, 2) : randn({c.B, c.N, c.K}, dt, 1);
      Tensor b = c.tb ? randn({c.B, c.M, c.K}, dt, 2).transpose(1, 2) : randn({c.B, c.K, c.M}, dt, 2);
      Tensor fast, ref;
      {
        Fast on(true);
        fast = gs::matmul(a, b);
      }
      {
        Fast off(false);
        ref = gs::matmul(a, b);
      }
      // |fast - ref| <= 2 K u sum_k |a_ik||b_kj| (each side within K u of the exact sum).
      const std::vector<double> bound = values(gs::matmul(gs::abs(a).to(gs::kFloat64), gs::abs(b).to(gs::kFloat64)));
      const std::vector<double> f = values(fast), r = values(ref);
      const double u = dt == gs::kFloat32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53);
      REQUIRE(f.size() == r.size());
      int bad = 0;
      for (size_t i = 0; i < f.size(); ++i) bad += !(std::fabs(f[i] - r[i]) <= 2.0 * c.K * u * bound[i]);
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("cpu fast: empty matmuls give empty results, and zeros where the sum over k is empty") {
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    CAPTURE(std::string(gs::dtype_name(dt)));
    for (bool on : {true, false}) {
      CAPTURE(on);
      Fast f(on);
      Tensor k0 = gs::matmul(randn({3, 0}, dt, 1), randn({0, 4}, dt, 2));
      CHECK(k0.shape() == gs::Shape{3, 4});
      for (double v : values(k0)) CHECK(v == 0.0);
      Tensor batched = gs::matmul(randn({2, 3, 0}, dt, 1), randn({2, 0, 5}, dt, 2));
      CHECK(batched.shape() == gs::Shape{2, 3, 5});
      for (double v : values(batched)) CHECK(v == 0.0);
      CHECK(gs::matmul(randn({0, 7}, dt, 1), randn({7, 4}, dt, 2)).shape() == gs::Shape{0, 4});
      CHECK(gs::matmul(randn({5, 7}, dt, 1), randn({7, 0}, dt, 2)).shape() == gs::Shape{5, 0});
      CHECK(gs::matmul(randn({0, 5, 7}, dt, 1), randn({0, 7, 2}, dt, 2)).shape() == gs::Shape{0, 5, 2});
    }
  }
}

TEST_CASE("cpu fast: int64 matmul wraps on overflow, with tuned kernels on and off") {
  const int64_t big = int64_t{1} << 62;
  Tensor a = gs::tensor(std::vector<double>{0, 0}, {1, 2}, gs::TensorOptions(gs::kInt64));
  a.fill_(static_cast<double>(big));
  Tensor b = gs::full({2, 1}, 2.0, gs::TensorOptions(gs::kInt64));
  for (bool on : {true, false}) {
    Fast f(on);
    Tensor c = gs::matmul(a, b);  // 2 * 2^62 * 2 = 2^65: wraps to 0
    CHECK(c.item<int64_t>() == 0);
  }
}

TEST_CASE("cpu fast: the vectorised unary functions agree with the formula, special values exactly") {
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    const double dmin = dt == gs::kFloat32 ? 1.17549435e-38 : 2.2250738585072014e-308;
    std::vector<double> v = {0.0,    -0.0,    inf,  -inf,  nan,  dmin,   dmin / 8, -dmin / 8,
                             1e-30,  -1e-30,  88.5, -88.5, 89.0, -104.0, 709.0,    -745.0,
                             1000.0, -1000.0, 20.0, -20.0, 40.0, -40.0,  0.5,      -0.5};
    gs::Generator g(7);
    Tensor r = gs::randn({1021}, gs::TensorOptions(gs::kFloat64), &g) * 8.0;
    for (double x : values(r)) v.push_back(x);
    Tensor x = gs::tensor(v, {static_cast<int64_t>(v.size())}, gs::TensorOptions(dt));
    struct Fn {
      const char* name;
      Tensor (*f)(const Tensor&);
      double ulps;  // 0: bit for bit
    };
    const Fn fns[] = {{"exp", gs::exp, 4},   {"log", gs::log, 4},
                      {"tanh", gs::tanh, 4}, {"sigmoid", gs::sigmoid, 4},
                      {"sqrt", gs::sqrt, 0}, {"neg", gs::neg, 0},
                      {"relu", gs::relu, 0}, {"square", gs::square, 0},
                      {"abs", gs::abs, 0},   {"reciprocal", gs::reciprocal, 0}};
    for (const Fn& fn : fns) {
      CAPTURE(std::string(fn.name));
      CAPTURE(std::string(gs::dtype_name(dt)));
      std::vector<double> fast, ref;
      {
        Fast on(true);
        fast = values(fn.f(x));
      }
      {
        Fast off(false);
        ref = values(fn.f(x));
      }
      int bad = 0;
      for (size_t i = 0; i < v.size(); ++i) {
        const bool ok = fn.ulps == 0 ? same_bits(fast[i], ref[i]) : close_ulps(fast[i], ref[i], dt, fn.ulps);
        if (!ok && bad++ < 3)
          MESSAGE(std::string(fn.name) << "(" << v[i] << "): tuned " << fast[i] << ", reference " << ref[i]);
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("cpu fast: neg(+0) is -0 and abs(-0) is +0 on both paths") {
  for (bool on : {true, false}) {
    Fast f(on);
    Tensor z = gs::tensor(std::vector<double>{0.0, -0.0}, {2}, gs::TensorOptions(gs::kFloat32));
    const std::vector<double> n = values(gs::neg(z)), a = values(gs::abs(z));
    CHECK(std::signbit(n[0]));
    CHECK_FALSE(std::signbit(n[1]));
    CHECK_FALSE(std::signbit(a[0]));
    CHECK_FALSE(std::signbit(a[1]));
  }
}

TEST_CASE("cpu fast: softmax and log_softmax agree with the reference loop, masked and NaN rows included") {
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    Tensor x = randn({7, 133}, dt, 3) * 6.0;
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<double> xs = values(x);
    for (int64_t c = 0; c < 133; c += 5) xs[c] = -inf;            // row 0: masked logits
    for (int64_t c = 0; c < 133; ++c) xs[133 + c] = -inf;         // row 1: all masked
    xs[2 * 133 + 17] = std::numeric_limits<double>::quiet_NaN();  // row 2: a NaN
    xs[3 * 133 + 4] = inf;                                        // row 3: +inf
    xs[4 * 133 + 9] = -200.0;                                     // row 4: exp underflows
    x = gs::tensor(xs, {7, 133}, gs::TensorOptions(dt));
    for (bool log : {false, true}) {
      CAPTURE(log);
      CAPTURE(std::string(gs::dtype_name(dt)));
      std::vector<double> fast, ref;
      {
        Fast on(true);
        fast = values(log ? gs::log_softmax(x, -1) : gs::softmax(x, -1));
      }
      {
        Fast off(false);
        ref = values(log ? gs::log_softmax(x, -1) : gs::softmax(x, -1));
      }
      int bad = 0;
      for (size_t i = 0; i < fast.size(); ++i) bad += !close_ulps(fast[i], ref[i], dt, 8);
      CHECK(bad == 0);
      CHECK(std::isnan(ref[133]));          // the all-masked row
      CHECK(ref[0] == (log ? -inf : 0.0));  // a masked logit: probability 0 exactly
    }
  }
}

TEST_CASE("cpu fast: im2col and col2im are bit for bit the reference loops") {
  struct Geo {
    int64_t C, H, W, kH, kW, sH, sW, pH, pW, dH, dW;
  };
  const Geo geos[] = {{3, 7, 9, 3, 3, 1, 1, 1, 1, 1, 1},   // "same" (the flat-tap path)
                      {2, 11, 6, 3, 2, 2, 3, 1, 0, 1, 1},  // strided
                      {2, 9, 10, 3, 3, 1, 1, 2, 2, 2, 2},  // dilated, "same" width
                      {4, 5, 5, 1, 1, 1, 1, 0, 0, 1, 1},   // 1x1
                      {1, 6, 13, 5, 4, 1, 2, 3, 1, 1, 2}};
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    for (const Geo& q : geos) {
      gs::Conv2dGeometry g{2, q.C, q.H, q.W, q.kH, q.kW, q.sH, q.sW, q.pH, q.pW, q.dH, q.dW, 0, 0};
      g.outH = (g.H + 2 * g.pH - g.dH * (g.kH - 1) - 1) / g.sH + 1;
      g.outW = (g.W + 2 * g.pW - g.dW * (g.kW - 1) - 1) / g.sW + 1;
      CAPTURE(q.H);
      CAPTURE(q.W);
      CAPTURE(q.kH);
      Tensor x = randn({g.N, g.C, g.H, g.W}, dt, 4);
      const int64_t K = g.C * g.kH * g.kW, L = g.outH * g.outW;
      Tensor cols_fast = gs::zeros({g.N, K, L}, gs::TensorOptions(dt)),
             cols_ref = gs::zeros({g.N, K, L}, gs::TensorOptions(dt));
      Tensor back_fast = gs::zeros({g.N, g.C, g.H, g.W}, gs::TensorOptions(dt));
      Tensor back_ref = gs::zeros({g.N, g.C, g.H, g.W}, gs::TensorOptions(dt));
      {
        Fast on(true);
        gs::backend_of(x).im2col(cols_fast, x, g);
        gs::backend_of(x).col2im(back_fast, cols_fast, g);
      }
      {
        Fast off(false);
        gs::backend_of(x).im2col(cols_ref, x, g);
        gs::backend_of(x).col2im(back_ref, cols_ref, g);
      }
      const std::vector<double> cf = values(cols_fast), cr = values(cols_ref), bf = values(back_fast),
                                br = values(back_ref);
      int bad = 0;
      for (size_t i = 0; i < cf.size(); ++i) bad += !same_bits(cf[i], cr[i]);
      for (size_t i = 0; i < bf.size(); ++i) bad += !same_bits(bf[i], br[i]);
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("cpu fast: max pooling is bit for bit the reference loop, argmax, ties and NaN included") {
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    // Rounded values make ties; a NaN in one window.
    std::vector<double> xs = values(randn({3, 2, 15, 13}, dt, 5));
    for (double& v : xs) v = std::round(2.0 * v);
    xs[40] = std::numeric_limits<double>::quiet_NaN();
    Tensor x = gs::tensor(xs, {3, 2, 15, 13}, gs::TensorOptions(dt));
    struct P {
      gs::Dims k, s, d;
    };
    const P pools[] = {{{2, 2}, {2, 2}, {1, 1}}, {{3, 2}, {2, 1}, {1, 1}}, {{2, 3}, {1, 2}, {2, 1}}};
    for (const P& p : pools) {
      std::vector<double> of, orr, gf, gr;
      for (bool on : {true, false}) {
        Fast f(on);
        Tensor xi = x.detach().clone().requires_grad_(true);
        Tensor y = gs::max_pool2d(xi, p.k, p.s, {0, 0}, p.d);
        gs::sum(y * gs::arange(0, static_cast<double>(y.numel()), 1, gs::TensorOptions(dt)).reshape(y.shape()))
            .backward();
        (on ? of : orr) = values(y);
        (on ? gf : gr) = values(xi.grad());  // where each window's gradient went: its argmax
      }
      int bad = 0;
      for (size_t i = 0; i < of.size(); ++i) bad += !same_bits(of[i], orr[i]);
      for (size_t i = 0; i < gf.size(); ++i) bad += !same_bits(gf[i], gr[i]);
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("cpu fast: conv2d (the fused kernel, Winograd) agrees with the reference composite path") {
  struct Conv {
    int64_t C, O, H, W, k, s, p;
  };
  const Conv convs[] = {{9, 10, 13, 11, 3, 1, 1},  // Winograd-eligible (float32, >= 8 channels)
                        {3, 5, 9, 12, 3, 2, 1},
                        {2, 4, 7, 7, 1, 1, 0},
                        {5, 3, 8, 9, 5, 1, 2}};
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    for (const Conv& c : convs) {
      CAPTURE(std::string(gs::dtype_name(dt)));
      CAPTURE(c.C);
      CAPTURE(c.k);
      Tensor x = randn({3, c.C, c.H, c.W}, dt, 8), w = randn({c.O, c.C, c.k, c.k}, dt, 9), b = randn({c.O}, dt, 10);
      std::vector<double> out[2], gx[2], gw[2];
      for (int on = 0; on < 2; ++on) {
        Fast f(on != 0);
        Tensor xi = x.detach().clone().requires_grad_(true), wi = w.detach().clone().requires_grad_(true);
        Tensor y = gs::conv2d(xi, wi, b, {c.s, c.s}, {c.p, c.p});
        gs::sum(y * y).backward();
        out[on] = values(y);
        gx[on] = values(xi.grad());
        gw[on] = values(wi.grad());
      }
      // Relative to the size of the values: a dot product of C*k*k terms (Winograd's
      // transforms mix taps, so its bound is a small multiple of this).
      const double u = dt == gs::kFloat32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53);
      auto check = [&](const std::vector<double>& a, const std::vector<double>& r, double terms) {
        double scale = 0;
        for (double v : r) scale = std::max(scale, std::fabs(v));
        int bad = 0;
        for (size_t i = 0; i < a.size(); ++i) bad += !(std::fabs(a[i] - r[i]) <= 64 * terms * u * (scale + 1));
        return bad;
      };
      const double terms = static_cast<double>(c.C * c.k * c.k);
      CHECK(check(out[1], out[0], terms) == 0);
      CHECK(check(gx[1], gx[0], terms * c.O) == 0);
      CHECK(check(gw[1], gw[0], terms * 3 * c.H * c.W) == 0);
    }
  }
}

TEST_CASE("cpu fast: the fused optimizer steps agree with the optimizers' tensor-op formulas") {
  struct Opt {
    const char* name;
    double ulps;
  };
  for (const Opt& o : {Opt{"sgd", 0}, Opt{"adam", 4}, Opt{"rmsprop", 4}}) {
    for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
      CAPTURE(std::string(o.name));
      CAPTURE(std::string(gs::dtype_name(dt)));
      std::vector<double> result[2];
      for (int on = 0; on < 2; ++on) {
        Fast f(on != 0);
        Tensor p = randn({257}, dt, 11).requires_grad_(true);
        std::unique_ptr<gs::optim::Optimizer> opt;
        if (std::string(o.name) == "sgd")
          opt = std::make_unique<gs::optim::SGD>(
              std::vector<Tensor>{p}, gs::optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(0.01));
        else if (std::string(o.name) == "adam")
          opt = std::make_unique<gs::optim::Adam>(std::vector<Tensor>{p},
                                                  gs::optim::AdamOptions(0.01).amsgrad(true).weight_decay(0.01));
        else
          opt = std::make_unique<gs::optim::RMSprop>(std::vector<Tensor>{p},
                                                     gs::optim::RMSpropOptions(0.01).centered(true).momentum(0.5));
        for (int step = 0; step < 5; ++step) {
          p.set_grad(randn({257}, dt, 100 + step));
          opt->step();
        }
        result[on] = values(p);
      }
      int bad = 0;
      for (size_t i = 0; i < result[0].size(); ++i)
        bad +=
            !(o.ulps == 0 ? same_bits(result[1][i], result[0][i]) : close_ulps(result[1][i], result[0][i], dt, o.ulps));
      CHECK(bad == 0);
    }
  }
}

namespace {

// The same values bit for bit (NaN matching NaN).
int bits_differ(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = values(a), y = values(b);
  if (x.size() != y.size()) return -1;
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) bad += !same_bits(x[i], y[i]);
  return bad;
}

// randn with a few special values (NaN, +-inf, +-0) at odd places, for floating dtypes.
Tensor with_specials(std::vector<int64_t> shape, gs::DType dt, uint64_t seed) {
  if (dt == gs::kInt64) return (randn(shape, gs::kFloat64, seed) * 1000.0).to(gs::kInt64);
  std::vector<double> v = values(randn(shape, gs::kFloat64, seed));
  const double specials[] = {std::nan(""), INFINITY, -INFINITY, 0.0, -0.0};
  for (size_t i = 0; i < v.size(); i += 97) v[i] = specials[(i / 97) % 5];
  return gs::tensor(v, shape, gs::TensorOptions(dt));
}

}  // namespace

TEST_CASE("cpu fast: binary ops, comparisons, where and relu's backward are bit for bit the reference loops") {
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64, gs::kInt64}) {
    CAPTURE(std::string(gs::dtype_name(dt)));
    const Tensor a = with_specials({37, 41}, dt, 21);
    // b: the same shape, a broadcast scalar, a broadcast row, a broadcast column, transposed.
    const Tensor bs[] = {with_specials({37, 41}, dt, 22), with_specials({1}, dt, 23), with_specials({41}, dt, 24),
                         with_specials({37, 1}, dt, 25), with_specials({41, 37}, dt, 26).t()};
    for (const Tensor& b : bs) {
      CAPTURE(b.str());
      std::vector<Tensor> got[2];
      for (int on = 0; on < 2; ++on) {
        Fast f(on != 0);
        got[on] = {gs::add(a, b),
                   gs::mul(a, b),
                   gs::sub(b, a),
                   gs::lt(a, b),
                   gs::le(b, a),
                   gs::eq(a, b),
                   gs::where(gs::gt(a, b), a, b),
                   gs::where(gs::gt(a, b), b, gs::zeros({1}, gs::TensorOptions(dt))),
                   gs::where(gs::le(a, b), gs::ones({1}, gs::TensorOptions(dt)), a)};
        if (dt != gs::kInt64) got[on].push_back(gs::div(a, b));
      }
      for (size_t k = 0; k < got[0].size(); ++k) {
        CAPTURE(k);
        CHECK(bits_differ(got[1][k], got[0][k]) == 0);
      }
    }
  }
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {  // relu's backward (threshold_backward)
    CAPTURE(std::string(gs::dtype_name(dt)));
    Tensor grads[2];
    for (int on = 0; on < 2; ++on) {
      Fast f(on != 0);
      Tensor x = with_specials({3, 5, 67}, dt, 31).requires_grad_(true);
      gs::relu(x).backward(with_specials({3, 5, 67}, dt, 32));
      grads[on] = x.grad();
    }
    CHECK(bits_differ(grads[1], grads[0]) == 0);
  }
}

TEST_CASE("cpu fast: sum, amax and amin agree with the serial reference, over any dims and one long row") {
  struct Case {
    std::vector<int64_t> shape;
    gs::Dims dims;
  };
  // A long row (above the parallel grain: per-thread partials), a sum over dim 0 (the
  // vectorised column rows), over the last dim (rows in parallel), over both, and a middle dim.
  const Case cases[] = {{{70001}, {0}}, {{301, 257}, {0}}, {{301, 257}, {1}}, {{301, 257}, {0, 1}}, {{7, 33, 29}, {1}}};
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64, gs::kInt64}) {
    for (const Case& c : cases) {
      CAPTURE(std::string(gs::dtype_name(dt)));
      CAPTURE(c.shape.size());
      CAPTURE(c.shape[0]);
      CAPTURE(c.dims.size());
      CAPTURE(c.dims[0]);
      const Tensor x = dt == gs::kInt64 ? with_specials(c.shape, dt, 41) : randn(c.shape, dt, 41);
      Tensor sums[2], maxs[2], mins[2];
      for (int on = 0; on < 2; ++on) {
        Fast f(on != 0);
        sums[on] = gs::sum(x, c.dims);
        maxs[on] = gs::amax(x, c.dims);
        mins[on] = gs::amin(x, c.dims);
      }
      CHECK(bits_differ(maxs[1], maxs[0]) == 0);
      CHECK(bits_differ(mins[1], mins[0]) == 0);
      if (dt == gs::kInt64) {
        CHECK(bits_differ(sums[1], sums[0]) == 0);
        continue;
      }
      // Both within accurate_sum.h's bound of the exact sum (float64), then one rounding to
      // float32: 1e-13 * sum |x| + 1 ulp of the result.
      const std::vector<double> f = values(sums[1]), r = values(sums[0]);
      const std::vector<double> mag = values(gs::sum(gs::abs(x).to(gs::kFloat64), c.dims));
      const double ulp = dt == gs::kFloat32 ? std::ldexp(1.0, -23) : std::ldexp(1.0, -52);
      REQUIRE(f.size() == r.size());
      int bad = 0;
      for (size_t i = 0; i < f.size(); ++i) bad += !(std::fabs(f[i] - r[i]) <= 1e-13 * mag[i] + ulp * std::fabs(r[i]));
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("cpu fast: a buffer of 2 MiB or more is 2 MiB aligned with tuned kernels on, 64-byte aligned either way") {
  for (bool on : {true, false}) {
    CAPTURE(on);
    Tensor big, small;
    {
      Fast f(on);
      big = gs::ones({int64_t{1} << 20});  // 4 MiB of float32
      small = gs::ones({1000});
    }
    const auto addr = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()); };
    CHECK(addr(big) % 64 == 0);
    CHECK(addr(small) % 64 == 0);
#if !defined(__SANITIZE_ADDRESS__)
    if (on) CHECK(addr(big) % (uintptr_t{2} << 20) == 0);
#endif
    CHECK(gs::sum(big).item<float>() == float(1 << 20));
    // Freed with the switch the other way: deallocate finds either block's malloc'd pointer.
    Fast other(!on);
    big = Tensor();
  }
}
