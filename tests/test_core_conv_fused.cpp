// Tests for the fused conv2d (one autograd node "conv2d", the backend's forward and
// backward kernels; CPU: core/cpu/fast/conv2d.cpp) against the composite unfold +
// matmul path it replaces, which detail::set_conv2d_fused(false) forces: outputs and
// gradients on many geometries in float32 and float64, numerical gradients and
// second derivatives in float64, saved-tensor version checks, which gradients the
// node computes, and what observers see. CTest runs it with OMP_NUM_THREADS=1 and =2: the
// fused kernels keep the BLAS on one thread whatever OpenMP's setting.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/fast_kernels.h"
#include "core/generator.h"
#include "core/observer.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "debug/checks/model/gradcheck.h"
#include "nn_test_util.h"

namespace {

// These tests are about the tuned kernels: on, even in a build whose default is the
// reference loops (GRADSLEUTH_FAST_KERNELS=OFF).
const bool kTunedKernelsOn = (gradsleuth::set_cpu_fast_kernels(true), true);

using gs::Tensor;
using nntest::vals;
using nntest::Vec;

// Forces the composite path for its lifetime.
struct CompositeGuard {
  CompositeGuard() { gs::detail::set_conv2d_fused(false); }
  ~CompositeGuard() { gs::detail::set_conv2d_fused(true); }
};

struct Conv {
  gs::Dims stride, padding, dilation;
};

struct Result {
  Vec out, gx, gw, gb;
  std::string node;  // the output's grad_fn name
};

// out = conv2d(x, w, b), then d(sum(v * out)) for a fixed v of out's shape into fresh leaves.
Result run(bool fused, const Tensor& x0, const Tensor& w0, const Tensor& b0, const Conv& c, bool need_x = true,
           bool need_w = true) {
  std::unique_ptr<CompositeGuard> guard;
  if (!fused) guard = std::make_unique<CompositeGuard>();
  Tensor x = x0.detach().clone().requires_grad_(need_x);
  Tensor w = w0.detach().clone().requires_grad_(need_w);
  Tensor b = b0.defined() ? b0.detach().clone().requires_grad_(true) : Tensor();
  if (!x0.is_contiguous()) x = x0.detach().requires_grad_(need_x);  // keep its strides
  Tensor out = gs::conv2d(x, w, b, c.stride, c.padding, c.dilation);
  gs::Generator gen(11);
  Tensor v = gs::randn(out.shape(), out.dtype(), &gen);
  (out * v).sum().backward();
  Result r;
  r.out = vals(out);
  r.node = out.grad_fn() ? out.grad_fn()->name() : "";
  if (need_x) r.gx = vals(x.grad());
  if (need_w) r.gw = vals(w.grad());
  if (b.defined()) r.gb = vals(b.grad());
  return r;
}

// |a - b| <= tol * (1 + max|b|) elementwise, the first failure reported.
void check_near(const Vec& got, const Vec& want, double tol, const char* what) {
  REQUIRE(got.size() == want.size());
  double scale = 1;
  for (double v : want) scale = std::max(scale, 1 + std::fabs(v));
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(what << " element " << i << ": fused " << got[i] << ", composite " << want[i]);
    CHECK(std::fabs(got[i] - want[i]) <= tol * scale);
    if (std::fabs(got[i] - want[i]) > tol * scale) return;
  }
}

void compare(const Tensor& x, const Tensor& w, const Tensor& b, const Conv& c, bool need_x = true, bool need_w = true) {
  const Result f = run(true, x, w, b, c, need_x, need_w), r = run(false, x, w, b, c, need_x, need_w);
  CHECK(f.node == "conv2d");  // the fused node really ran ...
  CHECK(r.node != "conv2d");  // ... and the reference did not
  const double tol = x.dtype() == gs::kFloat32 ? 2e-5 : 1e-12;
  check_near(f.out, r.out, tol, "out");
  check_near(f.gx, r.gx, tol, "grad x");
  check_near(f.gw, r.gw, tol, "grad w");
  check_near(f.gb, r.gb, tol, "grad b");
}

Tensor rnd(gs::Shape s, gs::DType dt, uint64_t seed) {
  gs::Generator gen(seed);
  return gs::randn(s, dt, &gen);
}

}  // namespace

TEST_CASE("fused conv2d equals the composite path on many geometries") {
  struct K {
    int64_t h, w;
  };
  const std::vector<K> kernels = {{1, 1}, {3, 3}, {5, 5}, {2, 3}};
  uint64_t seed = 1;
  int cases = 0;
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64})
    for (int64_t C : {1, 3, 32})
      for (K k : kernels)
        for (int64_t s : {1, 2})
          for (int64_t p : {0, 1, 2})
            for (int64_t d : {1, 2})
              for (int64_t N : {1, 5})
                for (bool bias : {true, false}) {
                  // 9x8 input (7x6 for the widest channel count, to keep the test quick).
                  const int64_t H = C == 32 ? 7 : 9, W = C == 32 ? 6 : 8, O = 4;
                  if (H + 2 * p < d * (k.h - 1) + 1 || W + 2 * p < d * (k.w - 1) + 1) continue;
                  if (C == 32 && N == 5 && bias) continue;  // the widest case once per geometry is enough
                  CAPTURE(dt);
                  CAPTURE(C);
                  CAPTURE(k.h);
                  CAPTURE(k.w);
                  CAPTURE(s);
                  CAPTURE(p);
                  CAPTURE(d);
                  CAPTURE(N);
                  CAPTURE(bias);
                  Tensor x = rnd({N, C, H, W}, dt, ++seed), w = rnd({O, C, k.h, k.w}, dt, ++seed);
                  Tensor b = bias ? rnd({O}, dt, ++seed) : Tensor();
                  compare(x, w, b, Conv{{s, s}, {p, p}, {d, d}});
                  ++cases;
                }
  CHECK(cases > 500);
}

TEST_CASE("fused conv2d: the CNN's layers, asymmetric stride and padding") {
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    CAPTURE(dt);
    // The first conv (C*kH*kW = 9) and the second (288), 'same' width.
    compare(rnd({3, 1, 28, 28}, dt, 1), rnd({8, 1, 3, 3}, dt, 2), rnd({8}, dt, 3), Conv{{1, 1}, {1, 1}, {1, 1}});
    compare(rnd({2, 32, 14, 14}, dt, 4), rnd({16, 32, 3, 3}, dt, 5), rnd({16}, dt, 6), Conv{{1, 1}, {1, 1}, {1, 1}});
    compare(rnd({2, 2, 9, 11}, dt, 7), rnd({3, 2, 3, 2}, dt, 8), rnd({3}, dt, 9), Conv{{2, 1}, {0, 2}, {1, 2}});
    compare(rnd({2, 20, 6, 5}, dt, 10), rnd({5, 20, 1, 1}, dt, 11), Tensor(), Conv{{1, 1}, {0, 0}, {1, 1}});
  }
}

TEST_CASE("fused conv2d takes non-contiguous inputs") {
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    Tensor base = rnd({2, 3, 8, 7}, dt, 21);
    Tensor xt = base.transpose(2, 3);  // (2, 3, 7, 8), not contiguous
    REQUIRE(!xt.is_contiguous());
    compare(xt, rnd({4, 3, 3, 3}, dt, 22), rnd({4}, dt, 23), Conv{{1, 1}, {1, 1}, {1, 1}});
    Tensor xn = rnd({2, 6, 8, 8}, dt, 24).narrow(1, 1, 3);  // a channel slice
    compare(xn, rnd({4, 3, 2, 3}, dt, 25), Tensor(), Conv{{2, 2}, {1, 0}, {1, 1}});
    // A non-contiguous weight.
    Tensor wt = rnd({4, 3, 3, 3}, dt, 26).transpose(2, 3);
    compare(rnd({2, 3, 6, 6}, dt, 27), wt, rnd({4}, dt, 28), Conv{{1, 1}, {0, 0}, {1, 1}});
  }
}

TEST_CASE("fused conv2d: gradients of the input only or the weight only") {
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64})
    for (int64_t C : {1, 8}) {  // one input channel (C*kH*kW = 9) and several
      CAPTURE(C);
      Tensor x = rnd({3, C, 7, 7}, dt, 31), w = rnd({5, C, 3, 3}, dt, 32), b = rnd({5}, dt, 33);
      compare(x, w, b, Conv{{1, 1}, {1, 1}, {1, 1}}, true, false);
      compare(x, w, b, Conv{{1, 1}, {1, 1}, {1, 1}}, false, true);
      compare(x, w, Tensor(), Conv{{1, 1}, {1, 1}, {1, 1}}, false, true);
    }
}

TEST_CASE("fused conv2d: numerical gradients in float64") {
  using gs::debug::gradcheck;
  struct G {
    gs::Shape x, w;
    Conv c;
  };
  const std::vector<G> geos = {
      {{2, 1, 6, 6}, {3, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}}},  // one channel, 'same' width
      {{2, 3, 6, 5}, {4, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}}},  // 'same' width (flat taps)
      {{1, 2, 7, 7}, {3, 2, 2, 3}, {{2, 1}, {2, 0}, {2, 1}}},  // strided, dilated
      {{2, 3, 5, 5}, {2, 3, 1, 1}, {{1, 1}, {0, 0}, {1, 1}}},  // 1x1: the columns are x itself
      {{1, 2, 5, 6}, {3, 2, 1, 2}, {{2, 2}, {1, 1}, {1, 2}}},  // one-row kernel, strided
  };
  uint64_t seed = 40;
  for (const G& g : geos) {
    CAPTURE(gs::shape_str(g.x));
    CAPTURE(gs::shape_str(g.w));
    Tensor x = rnd(g.x, gs::kFloat64, ++seed), w = rnd(g.w, gs::kFloat64, ++seed),
           b = rnd({g.w[0]}, gs::kFloat64, ++seed);
    const Conv c = g.c;
    auto fn = [c](const gs::tensor_list& in) {
      Tensor out = gs::conv2d(in[0], in[1], in[2], c.stride, c.padding, c.dilation);
      if (out.grad_fn()) CHECK(out.grad_fn()->name() == std::string("conv2d"));  // none in the no-grad probes
      return out;
    };
    auto r = gradcheck(fn, {x, w, b});
    INFO(r.message);
    CHECK(r.passed);
    CHECK(r.elements_checked == x.numel() + w.numel() + b.numel());
  }
}

TEST_CASE("fused conv2d: second derivatives (create_graph) stay correct") {
  using gs::debug::gradgradcheck;
  for (int64_t C : {1, 3}) {  // one input channel and several
    CAPTURE(C);
    Tensor x = rnd({2, C, 5, 5}, gs::kFloat64, 51), w = rnd({2, C, 3, 3}, gs::kFloat64, 52);
    Tensor b = rnd({2}, gs::kFloat64, 53);
    auto r = gradgradcheck(
        [](const gs::tensor_list& in) {
          return gs::conv2d(in[0], in[1], in[2], {1, 1}, {1, 1});
        },
        {x, w, b});
    INFO(r.message);
    CHECK(r.passed);
  }
  // A gradient penalty: d/dw of ||dL/dx||^2 has a term through the backward's W.
  Tensor x = rnd({2, 2, 5, 5}, gs::kFloat64, 54).requires_grad_(true);
  Tensor w = rnd({3, 2, 3, 3}, gs::kFloat64, 55).requires_grad_(true);
  auto penalty_grad = [&](bool fused) {
    std::unique_ptr<CompositeGuard> guard;
    if (!fused) guard = std::make_unique<CompositeGuard>();
    Tensor out = gs::conv2d(x, w, Tensor(), {1, 1}, {1, 1});
    Tensor gx = gs::autograd::grad({(out * out).sum()}, {x}, {}, std::nullopt, true)[0];
    return vals(gs::autograd::grad({(gx * gx).sum()}, {w})[0]);
  };
  check_near(penalty_grad(true), penalty_grad(false), 1e-11, "penalty grad w");
}

TEST_CASE("fused conv2d: changing x or the weight in place after the forward is an error") {
  Tensor x = rnd({2, 3, 6, 6}, gs::kFloat32, 61);
  Tensor w = rnd({4, 3, 3, 3}, gs::kFloat32, 62).requires_grad_(true);
  Tensor out = gs::conv2d(x, w, Tensor(), {1, 1}, {1, 1});
  x.mul_(2.0);
  const std::string msg = nntest::error_of([&] { out.sum().backward(); });
  CHECK(nntest::has(msg, "conv2d"));
  CHECK(nntest::has(msg, "modified by an in-place operation"));

  Tensor x2 = rnd({2, 3, 6, 6}, gs::kFloat32, 63).requires_grad_(true);
  Tensor w2 = rnd({4, 3, 3, 3}, gs::kFloat32, 64);
  Tensor out2 = gs::conv2d(x2, w2, Tensor(), {1, 1}, {1, 1});
  w2.add_(1.0);
  CHECK(nntest::has(nntest::error_of([&] { out2.sum().backward(); }), "modified by an in-place operation"));
}

namespace {
// Which gradients the conv2d node produced, and which forward ops were reported.
struct ConvWatcher : gs::OpObserver {
  std::vector<std::string> ops;
  std::vector<bool> grads_defined;
  void on_op(const gs::OpEvent& e) override {
    if (!gs::autograd::in_backward()) ops.push_back(e.op);
  }
  void on_backward(const gs::BackwardEvent& e) override {
    if (std::string(e.node->name()) != "conv2d") return;
    grads_defined.clear();
    for (size_t i = 0; i < e.num_grad_inputs; ++i) grads_defined.push_back(e.grad_inputs[i].defined());
  }
};
}  // namespace

TEST_CASE("fused conv2d: one op for observers, and only the gradients that are needed") {
  Tensor x = rnd({2, 1, 8, 8}, gs::kFloat32, 71);  // an input image: no gradient wanted
  Tensor w = rnd({4, 1, 3, 3}, gs::kFloat32, 72).requires_grad_(true);
  Tensor b = rnd({4}, gs::kFloat32, 73).requires_grad_(true);
  ConvWatcher watch;
  {
    gs::ObserverGuard og(&watch, gs::ObserverScope::ThisThread);
    Tensor out = gs::conv2d(x, w, b, {1, 1}, {1, 1});
    out.sum().backward();
  }
  CHECK(std::count(watch.ops.begin(), watch.ops.end(), "conv2d") == 1);
  CHECK(std::count(watch.ops.begin(), watch.ops.end(), "matmul") == 0);
  REQUIRE(watch.grads_defined.size() == 3);
  CHECK(!watch.grads_defined[0]);  // x does not require grad: its gradient is never computed
  CHECK(watch.grads_defined[1]);
  CHECK(watch.grads_defined[2]);
}

TEST_CASE("conv2d keeps the composite path where the fused kernel does not apply") {
  // An empty batch: an empty output and zero weight and bias gradients (an empty sum).
  {
    Tensor x = rnd({0, 3, 5, 5}, gs::kFloat32, 84);
    Tensor w = rnd({2, 3, 3, 3}, gs::kFloat32, 85).requires_grad_(true);
    Tensor b = rnd({2}, gs::kFloat32, 86).requires_grad_(true);
    Tensor out = gs::conv2d(x, w, b, {1, 1}, {1, 1});
    CHECK(out.shape() == gs::Shape{0, 2, 5, 5});
    out.sum().backward();
    for (double v : vals(w.grad())) CHECK(v == 0.0);
    for (double v : vals(b.grad())) CHECK(v == 0.0);
  }
  // groups > 1 and mixed dtypes: no "conv2d" node, and the same values as the reference loop.
  Tensor x = rnd({2, 4, 6, 6}, gs::kFloat64, 81).requires_grad_(true);
  Tensor w = rnd({4, 2, 3, 3}, gs::kFloat64, 82).requires_grad_(true);
  Tensor grouped = gs::conv2d(x, w, Tensor(), {1, 1}, {1, 1}, {1, 1}, 2);
  CHECK(grouped.grad_fn()->name() != std::string("conv2d"));
  Tensor w32 = rnd({3, 4, 3, 3}, gs::kFloat32, 83);
  Tensor mixed = gs::conv2d(x, w32, Tensor(), {1, 1}, {1, 1});
  CHECK(mixed.grad_fn()->name() != std::string("conv2d"));
  CHECK(mixed.dtype() == gs::kFloat64);
}

TEST_CASE("set_conv_algorithm: Gemm bounds each output by its own 3x3 window; Auto runs Winograd for 3x3 float32") {
  // Small values everywhere, one large value at input (1, 1) of every channel, and a tiny
  // weight at tap (2, 2), through which output (0, 0) reads it: the product x * w is small,
  // so (0, 0)'s dot-product bound is small. In the 4x4 patch of the tile holding (0, 0),
  // input (1, 1) enters 9 of the 16 transformed values, each multiplied by a transformed
  // weight that mixes all taps ((g0 + g1 + g2) / 2, ...): (0, 0) comes out of a
  // cancellation of terms of size |x| max|w|, and so does its rounding error.
  const int64_t C = 16, O = 4, H = 6, W = 6;
  Tensor x = (rnd({1, C, H, W}, gs::kFloat32, 91) * 1e-3).contiguous();
  std::vector<float> xv = x.to_vector<float>();
  for (int64_t c = 0; c < C; ++c) xv[static_cast<size_t>(c * H * W + 1 * W + 1)] = 1e4f;
  x = gs::tensor(xv, {1, C, H, W}, gs::kFloat32);
  std::vector<float> wv = rnd({O, C, 3, 3}, gs::kFloat32, 92).to_vector<float>();
  for (int64_t oc = 0; oc < O * C; ++oc) wv[static_cast<size_t>(oc * 9 + 8)] = 1e-6f;  // tap (2, 2)
  Tensor w = gs::tensor(wv, {O, C, 3, 3}, gs::kFloat32);
  const Vec ref = vals(gs::conv2d(x.to(gs::kFloat64), w.to(gs::kFloat64), Tensor(), {1, 1}, {1, 1}));
  // The dot-product bound of each output: K u sum over its window of |x||w| (K = 9C).
  const Vec ax = vals(x.abs()), aw = vals(w.abs());
  auto window_bound = [&](int64_t o, int64_t h, int64_t wc) {
    double s = 0;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 3; ++j) {
          const int64_t hh = h + i - 1, ww = wc + j - 1;
          if (hh < 0 || hh >= H || ww < 0 || ww >= W) continue;
          s += ax[static_cast<size_t>((c * H + hh) * W + ww)] * aw[static_cast<size_t>(((o * C + c) * 3 + i) * 3 + j)];
        }
    return 9.0 * C * std::ldexp(1.0, -24) * s;
  };
  auto outside_window_bound = [&](const Vec& got) {
    int n = 0;
    for (int64_t o = 0; o < O; ++o)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t wc = 0; wc < W; ++wc) {
          const size_t i = static_cast<size_t>((o * H + h) * W + wc);
          n += std::fabs(got[i] - ref[i]) > window_bound(o, h, wc);
        }
    return n;
  };
  struct Restore {
    ~Restore() { gs::set_conv_algorithm(gs::ConvAlgorithm::Auto); }
  } restore;
  gs::set_conv_algorithm(gs::ConvAlgorithm::Gemm);
  CHECK(gs::conv_algorithm() == gs::ConvAlgorithm::Gemm);
  const Vec gemm = vals(gs::conv2d(x, w, Tensor(), {1, 1}, {1, 1}));
  CHECK(outside_window_bound(gemm) == 0);
  gs::set_conv_algorithm(gs::ConvAlgorithm::Auto);
  const Vec wino = vals(gs::conv2d(x, w, Tensor(), {1, 1}, {1, 1}));
  CHECK(outside_window_bound(wino) > 0);  // Winograd ran: (0, 0) carries the cancellation's rounding
  for (size_t i = 0; i < ref.size(); ++i) CHECK(std::fabs(wino[i] - ref[i]) <= 1e-6 * 1e4 * C);  // still bounded
  // float64 is always im2col + GEMM: the setting changes nothing.
  const Vec a64 = vals(gs::conv2d(x.to(gs::kFloat64), w.to(gs::kFloat64), Tensor(), {1, 1}, {1, 1}));
  gs::set_conv_algorithm(gs::ConvAlgorithm::Gemm);
  const Vec g64 = vals(gs::conv2d(x.to(gs::kFloat64), w.to(gs::kFloat64), Tensor(), {1, 1}, {1, 1}));
  CHECK(a64 == g64);
}

TEST_CASE("set_conv_algorithm refuses a value outside ConvAlgorithm") {
  CHECK_THROWS_WITH_AS(gs::set_conv_algorithm(static_cast<gs::ConvAlgorithm>(9)),
                       doctest::Contains("is not a ConvAlgorithm"), gs::Error);
  CHECK(gs::conv_algorithm() == gs::ConvAlgorithm::Auto);
}
