// "No silent wrong answer": cases where the engine once gave a wrong number
// without a word, each checked against the value PyTorch gives (worked out by
// hand in the comments), plus the pieces a PyTorch user reaches for: soft-label
// cross-entropy, masked_fill with a broadcasting mask, reductions over an empty
// dim, and the refusal of create_graph by a backward that is not differentiable.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/op_registry.h"
#include "core/ops.h"
#include "core/ops/op_utils.h"
#include "debug/checks/model/gradcheck.h"
#include "nn/loss.h"
#include "nn_test_util.h"

namespace F = gs::nn::functional;
using gs::Tensor;
using Vec = std::vector<double>;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

Vec vals(const Tensor& t) { return t.to_vector<double>(); }

Tensor leaf(const Vec& v, const gs::Shape& s, gs::DType dt = gs::kFloat64) {
  Tensor t = gs::tensor(v, s, dt);
  t.requires_grad_(true);
  return t;
}

using nntest::check_error;

// d/dx of sum(d L / dx) for L = pool(x)^3 + sum(x^2): a Hessian-vector product
// (H 1) that needs pooling's backward to be differentiated again.
Vec hessian_row_sums(const std::function<Tensor(const Tensor&)>& pool, const Tensor& x) {
  Tensor y = pool(x);
  Tensor L = (y * y * y).sum() + (x * x).sum();
  Tensor g = gs::autograd::grad({L}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  return vals(gs::autograd::grad({g.sum()}, {x})[0]);
}

}  // namespace

// ---- second derivatives through pooling ---------------------------------------------
TEST_CASE("second derivatives through avg_pool2d include the pooling term (PyTorch's value)") {
  // x = [[1, 2], [3, 4]], a 2x2 average: y = 2.5. L = y^3 + sum x^2, so
  //   dL/dx_i = 3 y^2 / 4 + 2 x_i,  d/dx_j sum_i dL/dx_i = 4 * (6 y / 16) + 2 = 1.5 y + 2 = 5.75.
  // Without the pooling term it would be 2.
  Tensor x = leaf({1, 2, 3, 4}, {1, 1, 2, 2});
  const Vec h = hessian_row_sums([](const Tensor& t) { return gs::avg_pool2d(t, {2, 2}); }, x);
  for (double v : h) CHECK(v == doctest::Approx(5.75));
}

TEST_CASE("second derivatives through max_pool2d include the pooling term (PyTorch's value)") {
  // x = [[1, 2], [3, 4]], a 2x2 max: y = 4 at index 3. dL/dx_i = 3 y^2 [i = 3] + 2 x_i, so
  //   d/dx_j sum_i dL/dx_i = 6 y [j = 3] + 2 = [2, 2, 2, 26].
  Tensor x = leaf({1, 2, 3, 4}, {1, 1, 2, 2});
  const Vec h = hessian_row_sums([](const Tensor& t) { return gs::max_pool2d(t, {2, 2}); }, x);
  REQUIRE(h.size() == 4);
  CHECK(h[0] == doctest::Approx(2.0));
  CHECK(h[1] == doctest::Approx(2.0));
  CHECK(h[2] == doctest::Approx(2.0));
  CHECK(h[3] == doctest::Approx(26.0));
}

// ---- exp at the edges of its range, on the vectorised path ------------------------------
TEST_CASE("exp underflows to 0 and overflows to inf on long tensors (float32 and float64)") {
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    INFO(gs::dtype_name(dt));
    // 64 elements: the SIMD loop, not the scalar tail. PyTorch: exp(-inf) = exp(-1000) = 0,
    // exp(1000) = inf, log(exp(-1000)) = -inf.
    Vec v;
    for (int i = 0; i < 16; ++i) {
      v.push_back(-kInf);
      v.push_back(-1000.0);
      v.push_back(1000.0);
      v.push_back(0.0);
    }
    Tensor x = gs::tensor(v, {64}, dt);
    const Vec e = vals(gs::exp(x)), le = vals(gs::log(gs::exp(x)));
    for (size_t i = 0; i < v.size(); i += 4) {
      CHECK(e[i] == 0.0);
      CHECK(e[i + 1] == 0.0);
      CHECK(e[i + 2] == kInf);
      CHECK(e[i + 3] == 1.0);
      CHECK(le[i + 1] == -kInf);
    }
  }
}

// ---- softmax family on all -inf rows -------------------------------------------------------
TEST_CASE("logsumexp of an all -inf row is -inf with a NaN gradient (PyTorch)") {
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    INFO(gs::dtype_name(dt));
    // Row 0 all -inf (16 wide: the vectorised exp), row 1 ordinary: log(16 e^0) = log 16.
    Vec v(32, -kInf);
    for (int i = 16; i < 32; ++i) v[i] = 0.0;
    Tensor x = gs::tensor(v, {2, 16}, gs::TensorOptions(dt).requires_grad());
    Tensor y = gs::logsumexp(x, {1});
    const Vec yv = vals(y);
    CHECK(yv[0] == -kInf);
    CHECK(yv[1] == doctest::Approx(std::log(16.0)));
    // PyTorch: grad = g * exp(x - logsumexp) = exp(-inf + inf) = NaN on row 0; 1/16 on row 1.
    y.sum().backward();
    const Vec g = vals(x.grad());
    for (int i = 0; i < 16; ++i) CHECK(std::isnan(g[i]));
    for (int i = 16; i < 32; ++i) CHECK(g[i] == doctest::Approx(1.0 / 16));
  }
}

TEST_CASE("softmax gives a masked (-inf) logit probability 0 exactly, on the vectorised path") {
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    INFO(gs::dtype_name(dt));
    // 32 logits, every other one masked: the rest share 1 equally (PyTorch: 0 and 1/16).
    Vec v(32, 0.0);
    for (int i = 0; i < 32; i += 2) v[i] = -kInf;
    const Vec p = vals(gs::softmax(gs::tensor(v, {1, 32}, dt), 1));
    for (int i = 0; i < 32; i += 2) {
      CHECK(p[i] == 0.0);
      CHECK(p[i + 1] == doctest::Approx(1.0 / 16));
    }
    const Vec lp = vals(gs::log_softmax(gs::tensor(v, {1, 32}, dt), 1));
    for (int i = 0; i < 32; i += 2) CHECK(lp[i] == -kInf);
  }
}

TEST_CASE("softmax and log_softmax of an all -inf row are NaN (PyTorch)") {
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    Tensor x = gs::full({3, 8}, -kInf, dt);
    for (double v : vals(gs::softmax(x, 1))) CHECK(std::isnan(v));
    for (double v : vals(gs::log_softmax(x, 1))) CHECK(std::isnan(v));
    for (double v : vals(gs::softmax(x, 0))) CHECK(std::isnan(v));  // the transposed path
  }
}

// ---- zero spread -------------------------------------------------------------------------------
TEST_CASE("std and var of a constant row have gradient 0 (PyTorch's subgradient), not NaN") {
  // Row 0 constant, row 1 = [1, 2, 3]: std (unbiased) = 1, d std / dx = (x - mean) / ((n - 1) std)
  // = [-0.5, 0, 0.5].
  Tensor x = leaf({2, 2, 2, 1, 2, 3}, {2, 3});
  Tensor s = gs::std(x, {1});
  CHECK(vals(s)[0] == 0.0);
  s.sum().backward();
  const Vec g = vals(x.grad());
  for (int i = 0; i < 3; ++i) CHECK(g[i] == 0.0);
  CHECK(g[3] == doctest::Approx(-0.5));
  CHECK(g[4] == doctest::Approx(0.0));
  CHECK(g[5] == doctest::Approx(0.5));

  Tensor c = leaf({5, 5, 5, 5}, {4});
  gs::var(c).backward();
  for (double v : vals(c.grad())) CHECK(v == 0.0);
}

TEST_CASE("std's gradient and second derivative stay correct away from zero spread") {
  gs::Tensor x = gs::tensor({0.3, -1.2, 0.7, 2.0, 0.1, -0.4}, {2, 3}, gs::kFloat64);
  auto fn = [](const gs::tensor_list& in) { return gs::std(in[0], {1}); };
  auto r = gs::debug::gradcheck(fn, {x});
  INFO(r.message);
  CHECK(r.passed);
  auto r2 = gs::debug::gradgradcheck(fn, {x});
  INFO(r2.message);
  CHECK(r2.passed);
}

// ---- pow at 0 -------------------------------------------------------------------------------------------
TEST_CASE("pow's gradients at x = 0 follow PyTorch: d/dx x^0 = 0, d/dy x^y = -inf for y < 0, 0 for y >= 0") {
  // x = 0 against y = 0, -1, 2, 0.5 (PyTorch's pow_backward_self / pow_backward_exponent):
  //   d/dx = y x^(y-1), set to 0 where y == 0 (x^0 is constant in x):  0, -1 * 0^-2 = -inf, 2 * 0 = 0,
  //          0.5 * 0^-0.5 = inf;
  //   d/dy = x^y log x, set to 0 where x == 0 and y >= 0:  0, 0^-1 * log 0 = inf * -inf = -inf, 0, 0.
  Tensor x = leaf({0, 0, 0, 0}, {4});
  Tensor y = leaf({0, -1, 2, 0.5}, {4});
  gs::pow(x, y).sum().backward();
  const Vec gx = vals(x.grad()), gy = vals(y.grad());
  CHECK(gx[0] == 0.0);
  CHECK(gx[1] == -kInf);
  CHECK(gx[2] == 0.0);
  CHECK(gx[3] == kInf);
  CHECK(gy[0] == 0.0);
  CHECK(gy[1] == -kInf);
  CHECK(gy[2] == 0.0);
  CHECK(gy[3] == 0.0);
  // Away from 0 the formulas are unchanged: d/dx 2^3 = 12, d/dy = 8 log 2.
  Tensor a = leaf({2}, {1}), b = leaf({3}, {1});
  gs::pow(a, b).sum().backward();
  CHECK(vals(a.grad())[0] == doctest::Approx(12.0));
  CHECK(vals(b.grad())[0] == doctest::Approx(8.0 * std::log(2.0)));
}

// ---- reductions over an empty dim ---------------------------------------------------------------
TEST_CASE("reductions over an empty dim: sum 0, mean NaN, logsumexp -inf, amax/max raise (PyTorch)") {
  Tensor x = gs::zeros({3, 0}, gs::kFloat64);
  CHECK(vals(gs::sum(x, {1})) == Vec{0, 0, 0});
  for (double v : vals(gs::mean(x, {1}))) CHECK(std::isnan(v));
  CHECK(std::isnan(gs::mean(gs::zeros({0}, gs::kFloat32)).item<double>()));
  Tensor l = gs::logsumexp(x, {1});
  CHECK(l.shape() == gs::Shape{3});
  for (double v : vals(l)) CHECK(v == -kInf);
  CHECK(gs::logsumexp(x, {1}, true).shape() == gs::Shape{3, 1});
  check_error([&] { gs::amax(x, {1}); }, {"amax", "dim 1", "empty", "maximum"});
  check_error([&] { gs::amin(x); }, {"amin", "empty", "minimum"});
  check_error([&] { gs::max(x, 1); }, {"max", "dim 1", "empty"});
  check_error([&] { gs::min(x, -1); }, {"min", "dim 1", "empty"});
  // Over a non-empty dim of an empty tensor there is nothing to reduce and no error.
  CHECK(gs::amax(x, {0}).shape() == gs::Shape{0});
  // The graph survives: the gradient of an empty input is empty.
  Tensor e = gs::zeros({2, 0}, gs::TensorOptions(gs::kFloat64).requires_grad());
  (gs::sum(e, {1}) + gs::logsumexp(e, {1}).clamp(-1.0, 1.0)).sum().backward();
  CHECK(e.grad().shape() == gs::Shape{2, 0});
}

// ---- masked_fill with a broadcasting mask -----------------------------------------------------------
TEST_CASE("masked_fill broadcasts the mask (and the input) like PyTorch, with the gradient summed back") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor col = gs::tensor({1.0, 0.0}, {2, 1}) > 0.5;  // (2, 1): fills row 0
  Tensor y = gs::masked_fill(x, col, -1.0);
  CHECK(vals(y) == Vec{-1, -1, -1, 4, 5, 6});
  (y * 2.0).sum().backward();
  CHECK(vals(x.grad()) == Vec{0, 0, 0, 2, 2, 2});
  // A mask with more dims than the input: the result has the broadcast shape (2, 2, 3).
  Tensor v = leaf({1, 2, 3}, {3});
  Tensor m = gs::tensor({1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1}, {2, 2, 3}) > 0.5;
  Tensor z = gs::masked_fill(v, m, 0.0);
  CHECK(z.shape() == gs::Shape{2, 2, 3});
  CHECK(vals(z) == Vec{0, 2, 3, 1, 0, 3, 1, 2, 0, 0, 0, 0});
  z.sum().backward();
  CHECK(vals(v.grad()) == Vec{2, 2, 2});  // each of 4 copies kept where the mask is 0
  check_error([&] { gs::masked_fill(x, gs::ones({4}, gs::kBool), 0.0); }, {"masked_fill", "broadcast"});
  check_error([&] { gs::masked_fill(x, gs::ones({2, 3}), 0.0); }, {"masked_fill", "bool"});
}

// ---- cross-entropy with class-probability targets ----------------------------------------------------------
namespace {
// -sum_c t_c log_softmax(x)_c per row, in plain loops.
Vec soft_ce_rows(const Vec& x, const Vec& t, int C, double eps = 0.0, const Vec& w = {}) {
  Vec out;
  for (size_t r = 0; r * C < x.size(); ++r) {
    double m = -kInf, s = 0.0, l = 0.0;
    for (int c = 0; c < C; ++c) m = std::max(m, x[r * C + c]);
    for (int c = 0; c < C; ++c) s += std::exp(x[r * C + c] - m);
    for (int c = 0; c < C; ++c) {
      const double tc = t[r * C + c] * (1 - eps) + eps / C;
      l -= (w.empty() ? 1.0 : w[c]) * tc * (x[r * C + c] - m - std::log(s));
    }
    out.push_back(l);
  }
  return out;
}
}  // namespace

TEST_CASE("cross_entropy takes class-probability targets (soft labels, mixup) like PyTorch") {
  const Vec xv{0.2, -1.0, 2.0, 0.5, 0.0, -0.3, 1.5, 1.5, -2.0};
  const Vec tv{0.7, 0.2, 0.1, 0.0, 1.0, 0.0, 0.25, 0.25, 0.5};
  Tensor x = gs::tensor(xv, {3, 3}, gs::kFloat64), t = gs::tensor(tv, {3, 3}, gs::kFloat64);
  const Vec rows = soft_ce_rows(xv, tv, 3);
  const Vec none = vals(F::cross_entropy(x, t, gs::nn::Reduction::None));
  REQUIRE(none.size() == 3);
  for (int r = 0; r < 3; ++r) CHECK(none[r] == doctest::Approx(rows[r]));
  // Mean divides by the number of rows (not by a weight sum), Sum adds them.
  CHECK(F::cross_entropy(x, t).item<double>() == doctest::Approx((rows[0] + rows[1] + rows[2]) / 3));
  CHECK(F::cross_entropy(x, t, gs::nn::Reduction::Sum).item<double>() == doctest::Approx(rows[0] + rows[1] + rows[2]));
  // A one-hot probability target gives the class-index loss.
  const Tensor onehot = gs::tensor({0, 1, 0, 0, 0, 1, 1, 0, 0}, {3, 3}, gs::kFloat64);
  CHECK(F::cross_entropy(x, onehot).item<double>() ==
        doctest::Approx(F::cross_entropy(x, gs::tensor(std::vector<int64_t>{1, 2, 0}, {3})).item<double>()));
  // Label smoothing mixes the target with the uniform distribution; weights scale each class,
  // and (as in PyTorch) Mean still divides by the number of rows.
  const Vec w{1.0, 2.0, 0.5};
  const Vec sm = soft_ce_rows(xv, tv, 3, 0.1, w);
  auto o = gs::nn::CrossEntropyLossOptions().label_smoothing(0.1).weight(gs::tensor(w, {3}, gs::kFloat64));
  CHECK(F::cross_entropy(x, t, o).item<double>() == doctest::Approx((sm[0] + sm[1] + sm[2]) / 3));
  // Smoothing a one-hot probability target equals smoothing the class index.
  auto o2 = gs::nn::CrossEntropyLossOptions().label_smoothing(0.2);
  CHECK(F::cross_entropy(x, onehot, o2).item<double>() ==
        doctest::Approx(F::cross_entropy(x, gs::tensor(std::vector<int64_t>{1, 2, 0}, {3}), o2).item<double>()));
  // (B, C, d1) inputs: the class dim is dim 1.
  Tensor x3 = gs::randn({2, 3, 4}, gs::kFloat64);
  Tensor t3 = gs::softmax(gs::randn({2, 3, 4}, gs::kFloat64), 1);
  Tensor flat_x = x3.permute({0, 2, 1}).reshape({8, 3}), flat_t = t3.permute({0, 2, 1}).reshape({8, 3});
  CHECK(F::cross_entropy(x3, t3).item<double>() == doctest::Approx(F::cross_entropy(flat_x, flat_t).item<double>()));
  // Unbatched (C) input with a (C) target.
  CHECK(F::cross_entropy(x.select(0, 0), t.select(0, 0)).item<double>() == doctest::Approx(rows[0]));
}

TEST_CASE("cross_entropy with probability targets: gradients w.r.t. logits and targets (float64 gradcheck)") {
  Tensor x = gs::randn({4, 5}, gs::kFloat64);
  Tensor t = gs::softmax(gs::randn({4, 5}, gs::kFloat64), 1);
  auto fn = [](const gs::tensor_list& in) {
    return F::cross_entropy(in[0], in[1], gs::nn::CrossEntropyLossOptions().label_smoothing(0.1));
  };
  auto r = gs::debug::gradcheck(fn, {x, t});
  INFO(r.message);
  CHECK(r.passed);
  auto r2 = gs::debug::gradgradcheck(fn, {x, t});
  INFO(r2.message);
  CHECK(r2.passed);
  // Hand value: d loss / d x = (softmax(x) - t) / B for Mean.
  Tensor xl = x.detach();
  xl.requires_grad_(true);
  F::cross_entropy(xl, t).backward();
  const Vec g = vals(xl.grad()), want = vals((gs::softmax(x, 1) - t) / 4.0);
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(want[i]));
}

TEST_CASE("cross_entropy rejects probability targets that are not distributions") {
  Tensor x = gs::randn({4, 10});
  check_error(
      [&] {
        F::cross_entropy(x, gs::zeros({4, 10}));
      },
      {"CrossEntropyLoss", "probabilities", "sum", "argmax(1)"});
  check_error([&] { F::cross_entropy(x, gs::full({4, 10}, 0.2)); }, {"CrossEntropyLoss", "sum to values"});
  std::vector<double> nv(40, 0.0);
  for (int r = 0; r < 4; ++r) {
    nv[r * 10] = -0.5;  // -0.5 + 1.5: sums to 1, but not a distribution
    nv[r * 10 + 1] = 1.5;
  }
  Tensor neg = gs::tensor(nv, {4, 10}, gs::kFloat32);
  check_error([&] { F::cross_entropy(x, neg); }, {"CrossEntropyLoss", "negative"});
  check_error([&] { F::cross_entropy(x, gs::softmax(x, 1), gs::nn::CrossEntropyLossOptions().ignore_index(0)); },
              {"CrossEntropyLoss", "ignore_index", "class-index"});
}

// ---- higher order: right or refused ---------------------------------------------------------------------------
namespace {
// A test op whose backward uses a raw kernel copy: first order only.
Tensor twice_raw(const Tensor& x) {
  Tensor y;
  {
    gs::NoGradGuard ng;
    y = x * 2.0;
  }
  if (gs::needs_grad(x))
    gs::record("twice_raw", y, {&x}, gs::detail::first_order_only("twice_raw", [](const Tensor& g, gs::Node&) {
                 gs::NoGradGuard ng;  // as a raw kernel would: no graph
                 return gs::tensor_list{g * 2.0};
               }));
  return y;
}
// The same op without the refusal: what pooling's backward used to be.
Tensor twice_raw_silent(const Tensor& x) {
  Tensor y;
  {
    gs::NoGradGuard ng;
    y = x * 2.0;
  }
  if (gs::needs_grad(x))
    gs::record("twice_raw_silent", y, {&x}, [](const Tensor& g, gs::Node&) {
      gs::NoGradGuard ng;
      return gs::tensor_list{g * 2.0};
    });
  return y;
}
}  // namespace

TEST_CASE("gradgradcheck catches a backward whose result has no graph back to the incoming gradient") {
  // f(x) = sum(v * 2 x^3) through the silent op: the first derivative 6 v x^2 is right, but
  // its graph misses the op's term, so the Hessian-vector product loses it.
  Tensor x = gs::tensor({0.5, -1.0, 1.5}, {3}, gs::kFloat64);
  auto r =
      gs::debug::gradgradcheck([](const gs::tensor_list& in) { return twice_raw_silent(in[0] * in[0] * in[0]); }, {x});
  CHECK_FALSE(r.passed);
  CHECK(r.message.find("grad_outputs") != std::string::npos);
  auto ok = gs::debug::gradgradcheck([](const gs::tensor_list& in) { return in[0] * in[0] * in[0] * 2.0; }, {x});
  INFO(ok.message);
  CHECK(ok.passed);
}

TEST_CASE("a backward that is not differentiable refuses create_graph, naming the op") {
  Tensor x = leaf({1, 2, 3}, {3});
  // First order works, with or without retain_graph.
  Tensor y = twice_raw(x * x).sum();
  CHECK(vals(gs::autograd::grad({y}, {x})[0]) == Vec{4, 8, 12});
  check_error([&] { gs::autograd::grad({twice_raw(x * x).sum()}, {x}, {}, std::nullopt, true); },
              {"twice_raw", "second derivatives are not supported"});
  check_error([&] { twice_raw(x).sum().backward(Tensor(), false, true); }, {"twice_raw", "second derivatives"});
}

TEST_CASE("the registry's double_backward flags: claimed ops pass gradgradcheck, the others refuse") {
  gs::debug::GradcheckOptions o;
  o.check_double_backward = true;
  int claimed = 0, refused = 0;
  for (const gs::OpInfo& op : gs::op_registry()) {
    if (!op.differentiable) continue;
    for (const auto& row : gs::debug::gradcheck_all_ops(o, op.name)) {
      INFO("op ", op.name, " [", row.sample, "]: ", row.message);
      CHECK(row.double_backward_checked);
      CHECK(row.double_backward_passed);
      CHECK(row.double_backward_refused == !op.double_backward);
    }
    (op.double_backward ? claimed : refused)++;
  }
  CHECK(claimed > 0);
  // Pooling once silently lost its second-order term; it now claims it (and passes above).
  CHECK(gs::find_op("max_pool2d")->double_backward);
  CHECK(gs::find_op("avg_pool2d")->double_backward);
}

// ---- the deliberate differences documented in docs/autograd.md ---------------------------------------------
TEST_CASE("documented differences: second backward refused without saved tensors; unbiased var of one element") {
  Tensor a = leaf({1, 2}, {2}), b = leaf({3, 4}, {2});
  Tensor y = (a + b).sum();  // add and sum save nothing; PyTorch would allow a second backward
  y.backward();
  check_error([&] { y.backward(); }, {"second time", "retain_graph"});
  check_error([&] { gs::var(gs::tensor({1.0}, {1})); }, {"var", "unbiased=false"});
  CHECK(gs::var(gs::tensor({1.0}, {1}), {}, false).item<double>() == 0.0);
  check_error([&] { F::mse_loss(gs::zeros({4, 1}), gs::zeros({4})); }, {"MSELoss", "[4, 1]", "[4]"});
}

// ---- the losses outside the registry: second derivatives too --------------------------------------------------
TEST_CASE("every loss supports second derivatives (gradgradcheck, float64)") {
  gs::Generator gen(3);
  Tensor x = gs::randn({4, 3}, gs::kFloat64, &gen);
  Tensor p = gs::rand({4, 3}, gs::kFloat64, &gen) * 0.8 + 0.1;  // probabilities away from 0 and 1
  Tensor y = gs::rand({4, 3}, gs::kFloat64, &gen);              // soft binary targets
  Tensor soft = gs::softmax(gs::randn({4, 3}, gs::kFloat64, &gen), 1);
  Tensor idx = gs::tensor(std::vector<int64_t>{0, 2, 1, 2}, {4});
  struct Case {
    const char* name;
    gs::debug::DiffFn fn;
    gs::tensor_list in;
  };
  const std::vector<Case> cases = {
      {"mse_loss", [](const gs::tensor_list& a) { return F::mse_loss(a[0], a[1]); }, {x, y}},
      {"nll_loss", [](const gs::tensor_list& a) { return F::nll_loss(gs::log_softmax(a[0], 1), a[1]); }, {x, idx}},
      {"cross_entropy (indices, smoothing)",
       [](const gs::tensor_list& a) {
         return F::cross_entropy(a[0], a[1], gs::nn::CrossEntropyLossOptions().label_smoothing(0.2));
       },
       {x, idx}},
      {"cross_entropy (probabilities)",
       [](const gs::tensor_list& a) { return F::cross_entropy(a[0], a[1]); },
       {x, soft}},
      {"binary_cross_entropy", [](const gs::tensor_list& a) { return F::binary_cross_entropy(a[0], a[1]); }, {p, y}},
      {"binary_cross_entropy_with_logits",
       [](const gs::tensor_list& a) { return F::binary_cross_entropy_with_logits(a[0], a[1]); },
       {x, y}},
  };
  for (const Case& c : cases) {
    auto r = gs::debug::gradgradcheck(c.fn, c.in);
    INFO(std::string(c.name), ": ", r.message);
    CHECK(r.passed);
  }
}
