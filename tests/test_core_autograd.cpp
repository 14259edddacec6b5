// Tests for core/autograd.h: the engine, gradient accumulation, broadcasting and
// view gradients, retain_graph, grad mode, hooks, functional gradients, higher
// derivatives, and in-place ops with their version checks. Every expected
// gradient is derived by hand (formula in the comment) and evaluated here with
// plain double arithmetic. Numeric gradient checks of every op live in
// test_all_ops_gradcheck.cpp.
#include <doctest/doctest.h>

#include <pthread.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "nn_test_util.h"

using nntest::error_of;
using nntest::has;
#include "core/tensor.h"

namespace {

using gs::Tensor;
using Vec = std::vector<double>;
using IVec = std::vector<int64_t>;

const gs::TensorOptions kF64 = gs::TensorOptions().dtype(gs::kFloat64);
const gs::TensorOptions kLeaf = kF64.requires_grad(true);

Vec vals(const Tensor& t) { return t.to_vector<double>(); }
IVec shp(const Tensor& t) { return t.shape().vec(); }

Tensor leaf(std::initializer_list<double> v, const gs::Shape& s) { return gs::tensor(v, s, kLeaf); }
Tensor leaf(std::initializer_list<double> v) { return gs::tensor(v, kLeaf); }
Tensor cst(std::initializer_list<double> v, const gs::Shape& s) { return gs::tensor(v, s, kF64); }
Tensor cst(std::initializer_list<double> v) { return gs::tensor(v, kF64); }

void check_vec(const Vec& got, const Vec& want, double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])));
  }
}
void check_grad(const Tensor& t, const Vec& want, double tol = 1e-12) {
  REQUIRE(t.grad().defined());
  CHECK(t.grad().shape() == t.shape());
  check_vec(vals(t.grad()), want, tol);
}

}  // namespace

// ---- basics --------------------------------------------------------------------------------
TEST_CASE("gradients of simple expressions match hand derivations") {
  SUBCASE("polynomial: d/dx (x^3 + 2x) = 3x^2 + 2") {
    Tensor x = leaf({2, -1, 0.5});
    (x * x * x + x * 2.0).sum().backward();
    check_grad(x, {14, 5, 2.75});
    CHECK(x.is_leaf());
    CHECK(x.grad().is_leaf());
    CHECK_FALSE(x.grad().requires_grad());
  }
  SUBCASE("two inputs: f = ab + a/b - log a + sqrt b + exp(0.1 a)") {
    const double av = 3, bv = 4;
    Tensor a = leaf({av}), b = leaf({bv});
    Tensor f = a * b + a / b - gs::log(a) + gs::sqrt(b) + gs::exp(a * 0.1);
    f.backward();
    check_grad(a, {bv + 1 / bv - 1 / av + 0.1 * std::exp(0.1 * av)});
    check_grad(b, {av - av / (bv * bv) + 0.5 / std::sqrt(bv)});
  }
  SUBCASE("activations: f = sum(tanh x + sigmoid x + relu x)") {
    Tensor x = leaf({-1.5, 0.3, 2});
    (gs::tanh(x) + gs::sigmoid(x) + gs::relu(x)).sum().backward();
    Vec want;
    for (double v : {-1.5, 0.3, 2.0}) {
      const double t = std::tanh(v), s = 1 / (1 + std::exp(-v));
      want.push_back(1 - t * t + s * (1 - s) + (v > 0 ? 1 : 0));
    }
    check_grad(x, want);
  }
  SUBCASE("mean, sub with alpha, neg, pow with a tensor exponent") {
    Tensor x = leaf({1, 2, 3, 4});
    gs::mean(x * x).backward();  // d/dx mean(x^2) = 2x / n
    check_grad(x, {0.5, 1, 1.5, 2});

    Tensor a = leaf({1, 2}), b = leaf({3, 4});
    gs::sub(-a, b, 2.5).sum().backward();  // -a - 2.5 b
    check_grad(a, {-1, -1});
    check_grad(b, {-2.5, -2.5});

    Tensor p = leaf({2, 3}), q = leaf({3, 0.5});
    gs::pow(p, q).sum().backward();  // d/dp = q p^(q-1), d/dq = p^q log p
    check_grad(p, {3 * 4, 0.5 / std::sqrt(3.0)});
    check_grad(q, {8 * std::log(2.0), std::sqrt(3.0) * std::log(3.0)});
  }
  SUBCASE("matmul: d sum(AB)/dA = row sums of B broadcast; d/dB = column sums of A") {
    Tensor A = leaf({1, 2, 3, 4, 5, 6}, {2, 3}), B = leaf({1, -1, 2, 0, 0.5, 3}, {3, 2});
    gs::matmul(A, B).sum().backward();
    // dA[i][k] = sum_j B[k][j] = (0, 2, 3.5);  dB[k][j] = sum_i A[i][k] = (5, 7, 9)
    check_grad(A, {0, 2, 3.5, 0, 2, 3.5});
    check_grad(B, {5, 5, 7, 7, 9, 9});
  }
  SUBCASE("a shared subexpression (diamond): L = sum(y + y*y), y = x*x") {
    Tensor x = leaf({1.5, -2});
    Tensor y = x * x;
    (y + y * y).sum().backward();  // dL/dx = 2x + 4x^3
    check_grad(x, {3 + 4 * 3.375, -4 - 32});
  }
  SUBCASE("dtype casts pass the gradient back in the source dtype") {
    Tensor x = gs::tensor({1, 2}, gs::TensorOptions().requires_grad(true));  // float32
    (x.to(gs::kFloat64) * 3.0).sum().backward();
    CHECK(x.grad().dtype() == gs::kFloat32);
    check_vec(vals(x.grad()), {3, 3});
  }
  SUBCASE("several roots at once") {
    Tensor x = leaf({1, 2});
    gs::autograd::backward({(x * 2.0).sum(), (x * x).sum()});
    check_grad(x, {4, 6});
  }
}

TEST_CASE("gradients accumulate into leaves across backward calls") {
  Tensor x = leaf({1, -2, 3});
  (x * 3.0).sum().backward();
  check_grad(x, {3, 3, 3});
  (x * x).sum().backward();  // adds 2x
  check_grad(x, {5, -1, 9});
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
  (x * x).sum().backward();
  check_grad(x, {2, -4, 6});
  // Non-leaves keep no .grad unless asked to.
  Tensor y = x * 2.0;
  (y * y).sum().backward();
  CHECK_FALSE(y.grad().defined());
  // A tensor that does not require grad gets none.
  Tensor c = cst({1, 2, 3});
  (x * c).sum().backward();
  CHECK_FALSE(c.grad().defined());
}

TEST_CASE("backward() on a non-scalar, explicit gradients, and what cannot be differentiated") {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  std::string msg = error_of([&] { y.backward(); });
  CHECK(has(msg, "backward"));
  CHECK(has(msg, "one-element"));
  CHECK(has(msg, "[3]"));
  CHECK(has(msg, "sum()"));

  y.backward(cst({1, 2, 3}));  // vector-Jacobian product with v = (1, 2, 3)
  check_grad(x, {2, 4, 6});

  Tensor z = x * x;
  std::string shape_msg = error_of([&] { z.backward(cst({1, 2})); });
  CHECK(has(shape_msg, "[2]"));
  CHECK(has(shape_msg, "[3]"));

  CHECK(has(error_of([] { cst({1}).backward(); }), "does not require grad"));
  // A one-element tensor of any rank works without a gradient.
  Tensor w = leaf({2}, {1, 1});
  (w * w).backward();
  check_grad(w, {4});
}

// ---- broadcasting and views -------------------------------------------------------------------------
TEST_CASE("broadcast gradients are summed back to the input's shape") {
  SUBCASE("bias (B,N) + (N): the bias gradient is the column sums") {
    Tensor x = gs::zeros({4, 3}, kLeaf), b = leaf({0.1, 0.2, 0.3});
    Tensor W = cst({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {4, 3});
    ((x + b) * W).sum().backward();
    check_grad(b, {1 + 4 + 7 + 10, 2 + 5 + 8 + 11, 3 + 6 + 9 + 12});
    check_grad(x, vals(W));
  }
  SUBCASE("(3,1) + (1,4): row sums and column sums") {
    Tensor a = gs::zeros({3, 1}, kLeaf), b = gs::zeros({1, 4}, kLeaf);
    Tensor W = gs::arange(12, kF64).view({3, 4});  // W[i][j] = 4i + j
    ((a + b) * W).sum().backward();
    check_grad(a, {0 + 1 + 2 + 3, 4 + 5 + 6 + 7, 8 + 9 + 10 + 11});
    check_grad(b, {0 + 4 + 8, 1 + 5 + 9, 2 + 6 + 10, 3 + 7 + 11});
    CHECK(shp(a.grad()) == IVec{3, 1});
  }
  SUBCASE("mul and div with a broadcast operand, and a 0-dim scalar") {
    Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3}), s = leaf({2, 3, 4}, {1, 3});
    (x * s).sum().backward();
    check_grad(s, {1 + 4, 2 + 5, 3 + 6});
    check_grad(x, {2, 3, 4, 2, 3, 4});
    Tensor k = gs::scalar_tensor(2, kLeaf);
    Tensor y = cst({1, 2, 3});
    (y / k).sum().backward();  // d/dk sum(y/k) = -sum(y)/k^2
    CHECK(k.grad().dim() == 0);
    CHECK(k.grad().item<double>() == doctest::Approx(-6.0 / 4));
  }
}

TEST_CASE("gradients through views") {
  SUBCASE("transpose") {
    Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor W = cst({10, 20, 30, 40, 50, 60}, {3, 2});
    (x.t() * W).sum().backward();  // x.grad[i][j] = W[j][i]
    check_grad(x, {10, 30, 50, 20, 40, 60});
  }
  SUBCASE("permute, view, reshape, flatten, squeeze, unsqueeze") {
    Tensor x = gs::zeros({2, 3, 1}, kLeaf);
    Tensor w6 = gs::arange(6, kF64);
    (x.view({6}) * w6).sum().backward();
    check_grad(x, {0, 1, 2, 3, 4, 5});
    x.zero_grad();
    // x.permute(1, 0, 2)[j][i][0] = x[i][j][0]
    (x.permute({1, 0, 2}).reshape({6}) * w6).sum().backward();
    check_grad(x, {0, 2, 4, 1, 3, 5});
    x.zero_grad();
    (x.squeeze(2).unsqueeze(0).flatten() * w6).sum().backward();
    check_grad(x, {0, 1, 2, 3, 4, 5});
  }
  SUBCASE("narrow") {
    Tensor x = gs::zeros({2, 3}, kLeaf);
    (x.narrow(1, 1, 2) * cst({1, 2, 3, 4}, {2, 2})).sum().backward();
    check_grad(x, {0, 1, 2, 0, 3, 4});
  }
  SUBCASE("expand") {
    Tensor x = leaf({1, 2, 3}, {3, 1});
    Tensor W = gs::arange(12, kF64).view({3, 4});
    (x.expand({3, 4}) * W).sum().backward();  // x.grad[i] = sum_j W[i][j]
    check_grad(x, {6, 22, 38});
    Tensor r = leaf({1, 2});
    (r.expand({3, 2}) * gs::arange(6, kF64).view({3, 2})).sum().backward();
    check_grad(r, {0 + 2 + 4, 1 + 3 + 5});
  }
  SUBCASE("select and operator[]") {
    Tensor x = gs::zeros({3, 2}, kLeaf);
    (x.select(0, 1) * cst({5, 7})).sum().backward();
    check_grad(x, {0, 0, 5, 7, 0, 0});
    x.zero_grad();
    (x[2][1] * 3.0).backward();
    check_grad(x, {0, 0, 0, 0, 0, 3});
    x.zero_grad();
    (x.select(-1, 0) * cst({1, 2, 3})).sum().backward();
    check_grad(x, {1, 0, 2, 0, 3, 0});
  }
  SUBCASE("slice with a step") {
    Tensor x = gs::zeros({2, 5}, kLeaf);
    (x.slice(1, 0, 5, 2) * cst({1, 2, 3, 4, 5, 6}, {2, 3})).sum().backward();
    check_grad(x, {1, 0, 2, 0, 3, 4, 0, 5, 0, 6});
    Tensor x2 = gs::tensor(Vec{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 5}, kLeaf);
    Tensor s = x2.slice(1, 1, 5, 3);  // columns 1 and 4
    (s * s).sum().backward();         // 2x there, 0 elsewhere
    check_grad(x2, {0, 2, 0, 0, 8, 0, 12, 0, 0, 18});
  }
  SUBCASE("a chain of views") {
    Tensor x = gs::zeros({3, 4}, kLeaf);
    // x.t() is (4, 3); rows 1..2 of it are columns 1..2 of x; column 0 of that is x[0][1], x[0][2].
    (x.t().narrow(0, 1, 2).select(1, 0) * cst({2, 3})).sum().backward();
    check_grad(x, {0, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  }
  SUBCASE("split, chunk, cat, stack") {
    Tensor x = leaf({1, 2, 3, 4, 5});
    std::vector<Tensor> p = x.split(2);
    (p[0] * 1.0 + p[1] * 10.0).sum().backward();
    (p[2] * 100.0).sum().backward();
    check_grad(x, {1, 1, 10, 10, 100});
    Tensor a = leaf({1, 2}), b = leaf({3});
    (gs::cat({a, b}) * cst({4, 5, 6})).sum().backward();
    check_grad(a, {4, 5});
    check_grad(b, {6});
    Tensor u = leaf({1, 2}), v = leaf({3, 4});
    (gs::stack({u, v}, 1) * cst({1, 2, 3, 4}, {2, 2})).sum().backward();
    check_grad(u, {1, 3});
    check_grad(v, {2, 4});
  }
}

// ---- graph lifetime and grad mode --------------------------------------------------------------------
TEST_CASE("retain_graph") {
  Tensor x = leaf({1, 2});
  Tensor y = (x * x).sum();
  y.backward();
  check_grad(x, {2, 4});
  std::string msg = error_of([&] { y.backward(); });
  CHECK(has(msg, "retain_graph"));
  CHECK(has(msg, "second time"));

  Tensor x2 = leaf({1, 2});
  Tensor y2 = (x2 * x2 * x2).sum();
  y2.backward(Tensor(), /*retain_graph=*/true);
  check_grad(x2, {3, 12});
  y2.backward();  // the graph is still there; gradients accumulate
  check_grad(x2, {6, 24});
  CHECK(has(error_of([&] { y2.backward(); }), "retain_graph"));
}

TEST_CASE("NoGradGuard records nothing") {
  Tensor x = leaf({1, 2});
  CHECK(gs::GradMode::is_enabled());
  {
    gs::NoGradGuard ng;
    CHECK_FALSE(gs::GradMode::is_enabled());
    Tensor y = x * 2.0 + gs::exp(x);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    CHECK(y.is_leaf());
    Tensor v = x.view({2, 1});
    CHECK(v.grad_fn() == nullptr);
    CHECK_FALSE(v.requires_grad());
    {
      gs::EnableGradGuard eg;  // nested: recording again
      CHECK((x * 2.0).requires_grad());
      CHECK((x * 2.0).grad_fn() != nullptr);
    }
    CHECK_FALSE(gs::GradMode::is_enabled());
  }
  CHECK(gs::GradMode::is_enabled());
  Tensor z = x * 2.0;
  CHECK(z.requires_grad());
  REQUIRE(z.grad_fn() != nullptr);
  CHECK(std::string(z.grad_fn()->name()) == "mul");
}

TEST_CASE("detach and requires_grad_") {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  Tensor d = y.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.storage() == y.storage());
  CHECK(vals(d) == Vec{2, 4, 6});
  (d * x).sum().backward();  // no gradient flows through d: x.grad = d
  check_grad(x, {2, 4, 6});

  Tensor c = cst({1, 2});
  CHECK_FALSE(c.requires_grad());
  c.requires_grad_();
  CHECK(c.requires_grad());
  CHECK(c.is_leaf());
  (c * c).sum().backward();
  check_grad(c, {2, 4});
  c.requires_grad_(false);
  CHECK_FALSE((c * 2.0).requires_grad());

  std::string nl = error_of([&] { y.requires_grad_(false); });
  CHECK(has(nl, "requires_grad_"));
  CHECK(has(nl, "detach"));
  CHECK(has(error_of([] { gs::zeros({2}, gs::kInt64).requires_grad_(); }), "int64"));

  Tensor z = x * 3.0;
  z.detach_();
  CHECK(z.is_leaf());
  CHECK_FALSE(z.requires_grad());
}

// ---- hooks and retain_grad ----------------------------------------------------------------------------------
TEST_CASE("tensor hooks") {
  SUBCASE("a hook on a leaf that doubles the gradient") {
    Tensor x = leaf({1, 2});
    x.register_hook([](const Tensor& g) { return g * 2.0; });
    ((x * 2.0).sum() + (x * 3.0).sum()).backward();  // the hook sees the summed gradient 5 once
    check_grad(x, {10, 10});
  }
  SUBCASE("a hook on a non-leaf changes what flows to its inputs") {
    Tensor x = leaf({1, 2});
    Tensor y = x * 3.0;
    y.register_hook([](const Tensor& g) { return g * 2.0; });
    (y * cst({1, 10})).sum().backward();  // dL/dy = (1, 10), doubled, times 3
    check_grad(x, {6, 60});
  }
  SUBCASE("a hook that only observes") {
    Tensor x = leaf({1, 2});
    Tensor y = x * x;
    Vec seen;
    y.register_hook([&seen](const Tensor& g) {
      seen = g.to_vector<double>();
      return Tensor();  // keep the gradient
    });
    (y * cst({3, 4})).sum().backward();
    check_vec(seen, {3, 4});
    check_grad(x, {6, 16});
  }
  SUBCASE("remove_hook") {
    Tensor x = leaf({1});
    size_t h = x.register_hook([](const Tensor& g) { return g * 100.0; });
    size_t h2 = x.register_hook([](const Tensor& g) { return g + 1.0; });
    (x * 2.0).backward();
    check_grad(x, {201});  // (2 * 100) + 1: hooks run in order
    x.zero_grad();
    x.remove_hook(h);
    (x * 2.0).backward();
    check_grad(x, {3});
    x.zero_grad();
    x.remove_hook(h2);
    (x * 2.0).backward();
    check_grad(x, {2});
    Tensor y = x * 5.0;
    size_t hy = y.register_hook([](const Tensor& g) { return g * 0.0; });
    y.remove_hook(hy);
    x.zero_grad();
    y.backward();
    check_grad(x, {5});
    CHECK_THROWS_AS(x.remove_hook(99), gs::Error);
  }
  SUBCASE("hooks need requires_grad") {
    Tensor c = cst({1});
    CHECK(has(error_of([&] { c.register_hook([](const Tensor& g) { return g; }); }), "register_hook"));
  }
}

TEST_CASE("retain_grad keeps .grad on a non-leaf") {
  Tensor x = leaf({1, -2});
  Tensor y = x * 3.0;
  y.retain_grad();
  Tensor z = y * 1.0;
  (y * y).sum().backward();  // dL/dy = 2y = (6, -12)
  check_grad(y, {6, -12});
  check_grad(x, {18, -36});
  CHECK_FALSE(z.grad().defined());
  // It accumulates like a leaf's.
  Tensor x2 = leaf({1, 2});
  Tensor y2 = x2 * 2.0;
  y2.retain_grad();
  Tensor L = (y2 * cst({1, 1})).sum();
  L.backward(Tensor(), true);
  L.backward();
  check_grad(y2, {2, 2});
}

// ---- functional gradients ----------------------------------------------------------------------------------
TEST_CASE("autograd::grad") {
  SUBCASE("with respect to leaves, leaving .grad alone") {
    Tensor x = leaf({1, 2}), y = leaf({3, -1});
    Tensor out = (x * x * y).sum();
    gs::tensor_list g = gs::autograd::grad({out}, {x, y});
    REQUIRE(g.size() == 2);
    check_vec(vals(g[0]), {2 * 1 * 3, 2 * 2 * -1.0});  // 2xy
    check_vec(vals(g[1]), {1, 4});                     // x^2
    CHECK_FALSE(x.grad().defined());
    CHECK_FALSE(y.grad().defined());
    CHECK_FALSE(g[0].requires_grad());
  }
  SUBCASE("with respect to a non-leaf intermediate") {
    Tensor x = leaf({1, 2});
    Tensor h = x * 2.0;
    Tensor out = (h * h).sum();
    gs::tensor_list g = gs::autograd::grad({out}, {h, x});
    check_vec(vals(g[0]), {4, 8});   // 2h
    check_vec(vals(g[1]), {8, 16});  // 8x
    CHECK_FALSE(x.grad().defined());
    CHECK_FALSE(h.grad().defined());
  }
  SUBCASE("allow_unused") {
    Tensor x = leaf({1, 2}), unused = leaf({5});
    Tensor out = (x * x).sum();
    std::string msg = error_of([&] { gs::autograd::grad({out}, {x, unused}, {}, true); });
    CHECK(has(msg, "grad"));
    CHECK(has(msg, "allow_unused"));
    gs::tensor_list g = gs::autograd::grad({out}, {x, unused}, {}, std::nullopt, false, /*allow_unused=*/true);
    REQUIRE(g.size() == 2);
    check_vec(vals(g[0]), {2, 4});
    CHECK_FALSE(g[1].defined());
  }
  SUBCASE("grad_outputs and retain_graph") {
    Tensor x = leaf({1, 2, 3});
    Tensor y = x * x;
    gs::tensor_list g = gs::autograd::grad({y}, {x}, {cst({1, 0, 2})}, /*retain_graph=*/true);
    check_vec(vals(g[0]), {2, 0, 12});
    gs::tensor_list g2 = gs::autograd::grad({y}, {x}, {cst({1, 1, 1})});
    check_vec(vals(g2[0]), {2, 4, 6});
    CHECK(has(error_of([&] { gs::autograd::grad({y}, {x}, {cst({1, 1, 1})}); }), "retain_graph"));
    CHECK(has(error_of([&] { gs::autograd::grad({y.sum()}, {cst({1})}); }), "does not require grad"));
  }
}

namespace {
// Runs f on a thread with a 1 MiB stack and waits for it. A recursion 100,000
// deep needs far more than that, so it crashes here at any optimisation level
// (with the default 8 MiB stack an optimised build may get away with it).
template <class F>
void run_on_small_stack(F f) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, size_t{1} << 20);
  pthread_t th;
  auto body = [](void* p) -> void* {
    (*static_cast<F*>(p))();
    return nullptr;
  };
  REQUIRE(pthread_create(&th, &attr, body, &f) == 0);
  pthread_join(th, nullptr);
  pthread_attr_destroy(&attr);
}
}  // namespace

TEST_CASE("a 100,000-op chain: no stack overflow, correct gradient") {
  const int n = 100000;
  double grad = 0, value = 0;
  bool released = false;
  run_on_small_stack([&] {
    Tensor x = leaf({1.0});
    Tensor y = x;
    for (int i = 0; i < n; ++i) y = (i % 2 == 0) ? y * 1.0001 : y + 1.0;
    y.backward();
    grad = x.grad().item<double>();
    y = Tensor();  // freeing the chain must not recurse 100,000 deep either
    // And a chain that is freed without running backward (its nodes still hold saved tensors).
    Tensor z = x;
    for (int i = 0; i < n; ++i) z = (i % 2 == 0) ? gs::sin(z) : z + 1.0;
    value = z.item<double>();
    z = Tensor();
    released = true;
  });
  // Each multiply scales the gradient by 1.0001; each add passes it through.
  CHECK(grad == doctest::Approx(std::pow(1.0001, n / 2)).epsilon(1e-9));
  double want = 1.0;
  for (int i = 0; i < n; ++i) want = (i % 2 == 0) ? std::sin(want) : want + 1.0;
  CHECK(value == doctest::Approx(want).epsilon(1e-12));
  CHECK(released);
}

// ---- higher-order gradients -------------------------------------------------------------------------------------
TEST_CASE("create_graph: second derivatives") {
  using gs::autograd::grad;
  SUBCASE("d2/dx2 x^3 = 6x, through mul and through pow") {
    for (int variant = 0; variant < 2; ++variant) {
      CAPTURE(variant);
      Tensor x = leaf({0.5, -2, 3});
      Tensor y = variant == 0 ? (x * x * x).sum() : gs::pow(x, 3.0).sum();
      Tensor g = grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
      CHECK(g.requires_grad());
      check_vec(vals(g), {0.75, 12, 27});  // 3x^2
      Tensor gg = grad({g.sum()}, {x})[0];
      check_vec(vals(gg), {3, -12, 18});  // 6x
    }
  }
  SUBCASE("exp, tanh and sigmoid (ops that save their own output)") {
    const Vec xs = {-1.2, 0.1, 0.8};
    Tensor x = leaf({-1.2, 0.1, 0.8});
    Tensor ge = grad({gs::exp(x).sum()}, {x}, {}, std::nullopt, true)[0];
    Tensor gge = grad({ge.sum()}, {x})[0];
    Tensor gt = grad({gs::tanh(x).sum()}, {x}, {}, std::nullopt, true)[0];
    Tensor ggt = grad({gt.sum()}, {x})[0];
    Tensor gsig = grad({gs::sigmoid(x).sum()}, {x}, {}, std::nullopt, true)[0];
    Tensor ggsig = grad({gsig.sum()}, {x})[0];
    Vec we, wt, wt2, ws, ws2;
    for (double v : xs) {
      const double t = std::tanh(v), s = 1 / (1 + std::exp(-v));
      we.push_back(std::exp(v));
      wt.push_back(1 - t * t);
      wt2.push_back(-2 * t * (1 - t * t));  // d/dx (1 - tanh^2) = -2 tanh (1 - tanh^2)
      ws.push_back(s * (1 - s));
      ws2.push_back(s * (1 - s) * (1 - 2 * s));  // d/dx s(1-s) = s(1-s)(1-2s)
    }
    check_vec(vals(ge), we);
    check_vec(vals(gge), we);
    check_vec(vals(gt), wt);
    check_vec(vals(ggt), wt2);
    check_vec(vals(gsig), ws);
    check_vec(vals(ggsig), ws2);
  }
  SUBCASE("sum(x*x): grad of grad through backward(create_graph=true)") {
    Tensor x = leaf({1, -3, 2});
    (x * x).sum().backward(Tensor(), false, /*create_graph=*/true);
    Tensor gx = x.grad();
    REQUIRE(gx.defined());
    check_vec(vals(gx), {2, -6, 4});
    CHECK(gx.requires_grad());
    x.zero_grad();
    gx.sum().backward();
    check_grad(x, {2, 2, 2});
  }
  SUBCASE("a matmul-based function: Hessian-vector product of sum((A x)^2)") {
    // f(x) = |A x|^2, grad = 2 A^T A x, Hessian = 2 A^T A.
    const double Av[3][4] = {{1, 2, 0, -1}, {0.5, -1, 3, 2}, {2, 0, 1, 1}};
    const double xv[4] = {0.3, -0.7, 1.1, 0.2}, vv[4] = {1, -2, 0.5, 3};
    Tensor A = cst({1, 2, 0, -1, 0.5, -1, 3, 2, 2, 0, 1, 1}, {3, 4});
    Tensor x = leaf({0.3, -0.7, 1.1, 0.2});
    Tensor v = cst({1, -2, 0.5, 3});
    Tensor Ax = gs::matmul(A, x);
    Tensor g = grad({(Ax * Ax).sum()}, {x}, {}, std::nullopt, true)[0];
    Tensor hv = grad({(g * v).sum()}, {x})[0];
    Vec want_g(4, 0.0), want_hv(4, 0.0);
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < 3; ++i) {
        double ax = 0, av = 0;
        for (int j = 0; j < 4; ++j) {
          ax += Av[i][j] * xv[j];
          av += Av[i][j] * vv[j];
        }
        want_g[k] += 2 * Av[i][k] * ax;
        want_hv[k] += 2 * Av[i][k] * av;
      }
    check_vec(vals(g), want_g);
    check_vec(vals(hv), want_hv);
    // The same with x as a (4, 1) matrix and a transposed operand.
    Tensor X = leaf({0.3, -0.7, 1.1, 0.2}, {4, 1});
    Tensor AX = gs::matmul(X.t(), A.t());  // (1, 3) = (A x)^T
    Tensor G = grad({(AX * AX).sum()}, {X}, {}, std::nullopt, true)[0];
    Tensor HV = grad({(G * v.view({4, 1})).sum()}, {X})[0];
    check_vec(vals(G), want_g);
    check_vec(vals(HV), want_hv);
  }
  SUBCASE("a mixed second derivative: d2/dxdy (x^2 y^3) = 6 x y^2") {
    const double xv = 1.5, yv = -2;
    Tensor x = leaf({xv}), y = leaf({yv});
    Tensor f = x * x * y * y * y;
    gs::tensor_list g = grad({f}, {x, y}, {}, std::nullopt, true);
    check_vec(vals(g[0]), {2 * xv * yv * yv * yv});
    check_vec(vals(g[1]), {3 * xv * xv * yv * yv});
    Tensor gxy = grad({g[0]}, {y}, {}, true)[0];
    Tensor gyx = grad({g[1]}, {x}, {}, true)[0];
    Tensor gxx = grad({g[0]}, {x})[0];
    check_vec(vals(gxy), {6 * xv * yv * yv});
    check_vec(vals(gyx), {6 * xv * yv * yv});
    check_vec(vals(gxx), {2 * yv * yv * yv});
  }
}

// ---- in-place ops --------------------------------------------------------------------------------------------------
TEST_CASE("every in-place op bumps the version counter once") {
  Tensor t = gs::ones({3}, kF64);
  Tensor view = t.narrow(0, 1, 2);
  uint64_t v = t.version();
  auto bumped = [&](const char* op) {
    CAPTURE(op);
    CHECK(t.version() == v + 1);
    CHECK(view.version() == t.version());
    v = t.version();
  };
  t.add_(gs::ones({3}, kF64));
  bumped("add_");
  t.add_(2.0);
  bumped("add_(scalar)");
  t.sub_(gs::ones({3}, kF64), 0.5);
  bumped("sub_");
  t.mul_(gs::full({3}, 2.0, kF64));
  bumped("mul_");
  t.mul_(0.5);
  bumped("mul_(scalar)");
  t.div_(cst({1, 2, 4}));
  bumped("div_");
  t.relu_();
  bumped("relu_");
  t.clamp_(0.0, 1.0);
  bumped("clamp_");
  t.zero_();
  bumped("zero_");
  CHECK(vals(t) == Vec{0, 0, 0});
  t.fill_(4.0);
  bumped("fill_");
  t.copy_(cst({1, 2, 3}));
  bumped("copy_");
  t.masked_fill_(gs::tensor({1, 0, 0}, gs::kBool), -1.0);
  bumped("masked_fill_");
  CHECK(vals(t) == Vec{-1, 2, 3});
  t += 1.0;
  bumped("+=");
  view.mul_(10.0);  // through the view
  bumped("view.mul_");
  CHECK(vals(t) == Vec{0, 30, 40});
  // Out-of-place ops and views do not bump it.
  Tensor u = t * 2.0 + t.t();
  (void)u;
  CHECK(t.version() == v);
}

TEST_CASE("modifying a saved tensor in place: the error names both ops, the tensor and both versions") {
  Tensor x = gs::randn({2, 3}, gs::TensorOptions().requires_grad(true));
  Tensor y = x.sigmoid();
  y.mul_(2);
  std::string msg;
  try {
    y.sum().backward();
  } catch (const gs::Error& e) {
    msg = e.what();
    CHECK(e.op() == "sigmoid");
  }
  CAPTURE(msg);
  CHECK(has(msg, "sigmoid"));
  CHECK(has(msg, "mul_"));
  CHECK(has(msg, "[2, 3]"));
  CHECK(has(msg, "float32"));
  CHECK(has(msg, "version 0"));
  CHECK(has(msg, "version 1"));

  // A saved input (log saves x) modified twice.
  Tensor a = leaf({1, 2});
  Tensor h = a * 1.0;
  Tensor l = gs::log(h);
  h.add_(1.0);
  h.add_(1.0);
  std::string m2 = error_of([&] { l.sum().backward(); });
  CHECK(has(m2, "log"));
  CHECK(has(m2, "add_"));
  CHECK(has(m2, "version 0"));
  CHECK(has(m2, "version 2"));
  CHECK(has(m2, "float64[2]"));
}

TEST_CASE("in-place on a leaf that requires grad raises, but works under NoGradGuard") {
  Tensor x = leaf({1, 2});
  std::string msg = error_of([&] { x.add_(1.0); });
  CHECK(has(msg, "add_"));
  CHECK(has(msg, "leaf"));
  CHECK(has(msg, "NoGradGuard"));
  CHECK_THROWS_AS(x.mul_(2.0), gs::Error);
  CHECK_THROWS_AS(x.relu_(), gs::Error);
  CHECK_THROWS_AS(x.zero_(), gs::Error);
  CHECK_THROWS_AS(x.copy_(cst({3, 4})), gs::Error);
  CHECK(vals(x) == Vec{1, 2});  // nothing was modified
  const uint64_t v = x.version();
  {
    gs::NoGradGuard ng;
    x.add_(1.0);  // e.g. an optimizer step
    x.mul_(cst({2, 3}));
  }
  CHECK(vals(x) == Vec{4, 9});
  CHECK(x.version() == v + 2);
  CHECK(x.is_leaf());
  CHECK(x.requires_grad());
  CHECK(x.grad_fn() == nullptr);
  (x * x).sum().backward();
  check_grad(x, {8, 18});
  // A view of such a leaf cannot be modified in place either.
  CHECK(has(error_of([&] { x.narrow(0, 0, 1).mul_(2.0); }), "view"));
}

TEST_CASE("in-place ops on non-leaves give the same gradients as their out-of-place forms") {
  const Vec xv = {-1, 2, -3, 4}, zv = {0.5, -2, 3, 1.5}, wv = {1, 2, 3, 4};
  auto X = [&] { return gs::tensor(xv, {4}, kLeaf); };
  auto Z = [&] { return gs::tensor(zv, {4}, kLeaf); };
  Tensor w = gs::tensor(wv, {4}, kF64);
  auto same = [](const Tensor& a, const Tensor& b) {
    REQUIRE(a.grad().defined());
    REQUIRE(b.grad().defined());
    check_vec(vals(a.grad()), vals(b.grad()));
  };

  SUBCASE("relu_") {
    Tensor x = X(), x2 = X();
    Tensor y = x * 1.0;
    y.relu_();
    CHECK(std::string(y.grad_fn()->name()) == "relu_");
    (y * w).sum().backward();
    (gs::relu(x2 * 1.0) * w).sum().backward();
    check_grad(x, {0, 2, 0, 4});  // w where x > 0
    same(x, x2);
  }
  SUBCASE("add_ with a tensor that requires grad (and alpha, and broadcasting)") {
    Tensor x = X(), z = Z(), x2 = X(), z2 = Z();
    Tensor y = x * 2.0;
    y.add_(z, 3.0);
    (y * w).sum().backward();
    (gs::add(x2 * 2.0, z2, 3.0) * w).sum().backward();
    check_grad(x, {2, 4, 6, 8});
    check_grad(z, {3, 6, 9, 12});
    same(x, x2);
    same(z, z2);
    Tensor s = leaf({1});
    Tensor y2 = X() * 1.0;
    y2 += s;
    (y2 * w).sum().backward();
    check_grad(s, {10});
  }
  SUBCASE("mul_") {
    Tensor x = X(), z = Z(), x2 = X(), z2 = Z();
    Tensor y = x * 2.0;
    y.mul_(z);
    (y * w).sum().backward();
    ((x2 * 2.0) * z2 * w).sum().backward();
    Vec gx, gz;
    for (int i = 0; i < 4; ++i) {
      gx.push_back(2 * zv[i] * wv[i]);
      gz.push_back(2 * xv[i] * wv[i]);
    }
    check_grad(x, gx);
    check_grad(z, gz);
    same(x, x2);
    same(z, z2);
  }
  SUBCASE("div_ and sub_") {
    Tensor x = X(), z = Z(), x2 = X(), z2 = Z();
    Tensor y = x * 2.0;
    y.div_(z);
    y.sub_(z);
    (y * w).sum().backward();
    ((x2 * 2.0 / z2 - z2) * w).sum().backward();
    Vec gz;
    for (int i = 0; i < 4; ++i) gz.push_back((-2 * xv[i] / (zv[i] * zv[i]) - 1) * wv[i]);
    check_grad(z, gz);
    same(x, x2);
    same(z, z2);
  }
  SUBCASE("copy_") {
    Tensor x = X(), z = Z(), x2 = X(), z2 = Z();
    Tensor y = x * 2.0;
    y.copy_(z);  // y's old value (and so x) no longer reaches the output through y
    ((y * w).sum() + (x * x).sum()).backward();
    ((z2 * w).sum() + (x2 * x2).sum()).backward();
    check_grad(z, wv);
    check_grad(x, {-2, 4, -6, 8});
    same(x, x2);
    same(z, z2);
    // Copying from another dtype sends the gradient back in that dtype.
    Tensor f = gs::tensor({1, 2, 3, 4}, gs::TensorOptions().requires_grad(true));  // float32
    Tensor y3 = X() * 1.0;
    y3.copy_(f);
    (y3 * w).sum().backward();
    CHECK(f.grad().dtype() == gs::kFloat32);
    check_grad(f, wv);
  }
  SUBCASE("masked_fill_") {
    Tensor x = X(), x2 = X();
    Tensor mask = gs::tensor({0, 1, 1, 0}, gs::kBool);
    Tensor y = x * 2.0;
    y.masked_fill_(mask, 5.0);
    CHECK(vals(y) == Vec{-2, 5, 5, 8});
    (y * w).sum().backward();
    (gs::masked_fill(x2 * 2.0, mask, 5.0) * w).sum().backward();
    check_grad(x, {2, 0, 0, 8});
    same(x, x2);
  }
  SUBCASE("clamp_ and zero_") {
    Tensor x = X(), x2 = X();
    Tensor y = x * 1.0;
    y.clamp_(-2.0, 3.0);
    (y * w).sum().backward();
    (gs::clamp(x2 * 1.0, -2.0, 3.0) * w).sum().backward();
    check_grad(x, {1, 2, 0, 0});
    same(x, x2);
    Tensor x3 = X();
    Tensor y3 = x3 * 1.0;
    y3.zero_();
    ((y3 + 1.0) * w).sum().backward();
    CHECK((!x3.grad().defined() || vals(x3.grad()) == Vec(4, 0.0)));
  }
  SUBCASE("in-place on a view that takes part in autograd rewrites the base's history") {
    // (more in test_core_views_inplace.cpp)
    Tensor x = X(), x2 = X();
    Tensor y = x * 1.0;
    y.narrow(0, 0, 2).mul_(2.0);
    (y * w).sum().backward();
    (gs::cat({x2.narrow(0, 0, 2) * 2.0, x2.narrow(0, 2, 2)}, 0) * w).sum().backward();
    check_grad(x, {2 * wv[0], 2 * wv[1], wv[2], wv[3]});
    same(x, x2);
  }
}

// ---- the engine's own checks ---------------------------------------------------------------------------------------
TEST_CASE("custom nodes made with gs::record") {
  SUBCASE("a correct hand-written backward") {
    Tensor x = leaf({1, -2, 3});
    Tensor out = x.detach() * x.detach();  // forward computed without recording
    gs::record("my_square", out, {&x}, [sx = gs::SavedTensor(x, "my_square")](const Tensor& g, gs::Node& n) {
      return gs::tensor_list{g * sx.unpack(n) * 2.0};
    });
    CHECK(std::string(out.grad_fn()->name()) == "my_square");
    out.sum().backward();
    check_grad(x, {2, -4, 6});
  }
  SUBCASE("a backward that returns a wrong-shaped gradient is an error naming the op") {
    Tensor x = leaf({1, 2, 3});
    Tensor out = x.detach() * 2.0;
    gs::record("my_bad_op", out, {&x},
               [](const Tensor&, gs::Node&) { return gs::tensor_list{gs::zeros({5}, gs::kFloat64)}; });
    std::string msg;
    try {
      out.sum().backward();
    } catch (const gs::Error& e) {
      msg = e.what();
      CHECK(e.op() == "my_bad_op");
    }
    CHECK(has(msg, "my_bad_op"));
    CHECK(has(msg, "[5]"));
    CHECK(has(msg, "[3]"));
    CHECK_FALSE(x.grad().defined());
  }
  SUBCASE("a backward that returns the wrong number of gradients") {
    Tensor x = leaf({1, 2});
    Tensor out = x.detach() * 2.0;
    gs::record("my_two_grads", out, {&x}, [](const Tensor& g, gs::Node&) { return gs::tensor_list{g, g}; });
    std::string msg = error_of([&] { out.sum().backward(); });
    CHECK(has(msg, "my_two_grads"));
    CHECK(has(msg, "2 gradients"));
  }
}

TEST_CASE("autograd::queue_callback runs after every leaf's .grad is accumulated") {
  Tensor a = gs::tensor({1.0, 2.0}, gs::TensorOptions().dtype(gs::kFloat64).requires_grad());
  Tensor b = gs::tensor({3.0}, gs::TensorOptions().dtype(gs::kFloat64).requires_grad());
  std::vector<std::string> log;
  std::vector<double> seen_a, seen_b;
  // b's gradient is produced first (it is nearer the loss); its hook queues the callback.
  b.register_hook([&](const Tensor& g) {
    log.push_back("hook b");
    gs::autograd::queue_callback([&] {
      log.push_back("callback");
      seen_a = a.grad().to_vector<double>();  // a's hook and accumulation have run by now
      seen_b = b.grad().to_vector<double>();
      gs::autograd::queue_callback([&] { log.push_back("queued by a callback"); });
    });
    return Tensor();
  });
  a.register_hook([&](const Tensor& g) {
    log.push_back("hook a");
    return Tensor();
  });
  ((a * b).sum() * b.sum()).backward();
  CHECK(log == std::vector<std::string>{"hook b", "hook a", "callback", "queued by a callback"});
  CHECK(seen_a == std::vector<double>{9.0, 9.0});  // d/da = b^2
  CHECK(seen_b == std::vector<double>{18.0});      // d/db = 2 b sum(a)
  // Outside a backward there is nothing to run it after.
  CHECK_THROWS_WITH_AS(gs::autograd::queue_callback([] {}), doctest::Contains("outside a backward"), gs::Error);
  // A failed backward drops its callbacks.
  bool ran = false;
  Tensor c = gs::tensor({1.0}, gs::TensorOptions().dtype(gs::kFloat64).requires_grad());
  c.register_hook([&](const Tensor& g) {
    gs::autograd::queue_callback([&] { ran = true; });
    throw gs::Error("test", "hook failure");
    return Tensor();
  });
  CHECK_THROWS_WITH_AS((c * 2.0).sum().backward(), doctest::Contains("hook failure"), gs::Error);
  CHECK_FALSE(ran);
}
