// Tests for views and in-place ops together (docs/autograd.md, "Views and
// in-place ops"): a view shares its base's version counter; an in-place op on
// the base gives existing views the new history; an in-place op on a view
// rewrites the base's history (CopySlices). Every expected gradient is derived
// by hand in the comments and computed here with plain double arithmetic (the
// out-of-place program it equals); a randomized property test then compares
// random programs of views and in-place ops against their functional rewrite and
// against numeric gradients, in float64.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "nn_test_util.h"

namespace {

using gs::Tensor;
using Vec = std::vector<double>;

const gs::TensorOptions kF64 = gs::TensorOptions().dtype(gs::kFloat64);
const gs::TensorOptions kLeaf = kF64.requires_grad(true);

Vec vals(const Tensor& t) { return t.to_vector<double>(); }
Tensor leaf(const Vec& v, const gs::Shape& s) { return gs::tensor(v, s, kLeaf); }
Tensor cst(const Vec& v, const gs::Shape& s) { return gs::tensor(v, s, kF64); }

using nntest::error_of;
using nntest::has;

void check_vec(const Vec& got, const Vec& want, double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CAPTURE(got[i]);
    CAPTURE(want[i]);
    CHECK(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])));
  }
}
void check_grad(const Tensor& t, const Vec& want, double tol = 1e-12) {
  REQUIRE(t.grad().defined());
  CHECK(t.grad().shape() == t.shape());
  check_vec(vals(t.grad()), want, tol);
}

}  // namespace

// ---- the three silent wrong gradients, now right ---------------------------------------------------------------
TEST_CASE("a view taken before an in-place op on its base sees the op's history") {
  SUBCASE("v = y.narrow(0, 0, 1); y.mul_(3); loss = sum(v * v)") {
    // v = 3 x[0]  =>  loss = 9 sum x[0]^2,  d/dx[0] = 18 x[0], d/dx[1] = 0.
    const Vec xv = {1, 2, 3, 4, 5, 6};
    Tensor x = leaf(xv, {2, 3});
    Tensor y = x * 1.0;
    Tensor v = y.narrow(0, 0, 1);
    y.mul_(3.0);
    CHECK(vals(v) == Vec{3, 6, 9});
    (v * v).sum().backward();
    check_grad(x, {18 * xv[0], 18 * xv[1], 18 * xv[2], 0, 0, 0});  // [18, 36, 54, 0, 0, 0]
  }
  SUBCASE("col = h.select(1, 0); h.mul_(s) with s a parameter; loss = sum(col * col)") {
    // h = x W (2x2), then h[:, j] *= s[j]. col = s0 h[:, 0], loss = s0^2 sum_i h_i0^2.
    //   dL/ds0 = 2 s0 sum_i h_i0^2,  dL/ds1 = 0,  dL/dh_i0 = 2 s0^2 h_i0 (dL/dh_i1 = 0),
    //   dL/dx = dh W^T,  dL/dW = x^T dh.
    const double x00 = 1, x01 = 2, x10 = 3, x11 = 4;
    const double w00 = 0.5, w01 = -1, w10 = 2, w11 = 1;
    const double s0 = 1.5, s1 = -2;
    Tensor x = leaf({x00, x01, x10, x11}, {2, 2}), W = leaf({w00, w01, w10, w11}, {2, 2}), s = leaf({s0, s1}, {2});
    Tensor h = x.matmul(W);
    Tensor col = h.select(1, 0);
    h.mul_(s);
    (col * col).sum().backward();
    const double h00 = x00 * w00 + x01 * w10, h10 = x10 * w00 + x11 * w10;  // 4.5, 9.5
    const double d0 = 2 * s0 * s0 * h00, d1 = 2 * s0 * s0 * h10;            // dL/dh_00, dL/dh_10
    check_grad(s, {2 * s0 * (h00 * h00 + h10 * h10), 0});                   // [331.5, 0]
    check_grad(x, {d0 * w00, d0 * w10, d1 * w00, d1 * w10});
    check_grad(W, {x00 * d0 + x10 * d1, 0, x01 * d0 + x11 * d1, 0});
    (void)s1;
  }
  SUBCASE("v = y.select(0, 1); y.add_(b); loss = sum(v * v)") {
    // v = x[1] + b  =>  dL/db = 2 (x[1] + b), dL/dx[1] = 2 (x[1] + b), dL/dx[0] = 0.
    const Vec xv = {1, 2, 7, 11}, bv = {9, 17};
    Tensor x = leaf(xv, {2, 2}), b = leaf(bv, {2});
    Tensor y = x * 1.0;
    Tensor v = y.select(0, 1);
    y.add_(b);
    (v * v).sum().backward();
    check_grad(b, {2 * (xv[2] + bv[0]), 2 * (xv[3] + bv[1])});  // [32, 56]
    check_grad(x, {0, 0, 2 * (xv[2] + bv[0]), 2 * (xv[3] + bv[1])});
  }
  SUBCASE("an expanded view re-derived after the base changed sums its repeated gradient") {
    // e = y[0] repeated 3 times, y = 2x after mul_: loss = sum_k sum_j c_j * 2 x0j = 3 * 2 sum_j c_j x0j.
    const Vec xv = {1, -2, 3, 4};
    Tensor x = leaf(xv, {2, 2});
    Tensor y = x * 1.0;
    Tensor e = y.narrow(0, 0, 1).expand({3, 2});
    y.mul_(2.0);
    Tensor c = cst({0.5, -1.5}, {2});
    (e * c).sum().backward();
    check_grad(x, {6 * 0.5, 6 * -1.5, 0, 0});
  }
  SUBCASE("a view of a view, both taken before the in-place op") {
    // t = y^T; v = t[1] = y[:, 1]; y.mul_(s) scales column j by s_j: v = s1 x[:, 1].
    const Vec xv = {1, 2, 3, 4, 5, 6};
    Tensor x = leaf(xv, {3, 2}), s = leaf({2, -3}, {2});
    Tensor y = x * 1.0;
    Tensor t = y.t();
    Tensor v = t.select(0, 1);
    y.mul_(s);
    CHECK(vals(v) == Vec{-6, -12, -18});
    (v * v).sum().backward();  // L = s1^2 sum_i x_i1^2
    check_grad(x, {0, 2 * 9 * 2.0, 0, 2 * 9 * 4.0, 0, 2 * 9 * 6.0});
    check_grad(s, {0, 2 * -3 * (4 + 16 + 36)});
  }
}

// ---- in-place on views ----------------------------------------------------------------------------------------------
TEST_CASE("in-place ops on views rewrite the base's history (CopySlices)") {
  const Vec xv = {1, -2, 3, -4, 5, -6};
  SUBCASE("y.narrow(0, 0, 1).mul_(s): loss over the whole base") {
    // y = [s * x[0]; x[1]], loss = sum(y * w): dL/dx[0] = s w[0], dL/dx[1] = w[1], dL/ds = sum x[0] w[0].
    const Vec wv = {1, 2, 3, 4, 5, 6};
    Tensor x = leaf(xv, {2, 3}), s = leaf({1.5}, {1});
    Tensor y = x * 1.0;
    Tensor v = y.narrow(0, 0, 1);
    v.mul_(s);
    CHECK(std::string(y.grad_fn()->name()) == "CopySlices");
    CHECK(vals(y) == Vec{1.5, -3, 4.5, -4, 5, -6});
    (y * cst(wv, {2, 3})).sum().backward();
    check_grad(x, {1.5 * 1, 1.5 * 2, 1.5 * 3, 4, 5, 6});
    check_grad(s, {xv[0] * wv[0] + xv[1] * wv[1] + xv[2] * wv[2]});
  }
  SUBCASE("the view itself, and a sibling view taken before, see the new history") {
    // y.select(0, 0).add_(b): row 0 = x[0] + b. loss = sum(v0^2) + sum(r^2) with r = y[:, 2] taken before.
    //   dL/db_j = 2 (x0j + b_j) + [j == 2] 2 (x02 + b2);  dL/dx0j likewise; dL/dx12 = 2 x12.
    Tensor x = leaf(xv, {2, 3}), b = leaf({0.5, 1, 2}, {3});
    Tensor y = x * 1.0;
    Tensor r = y.select(1, 2);
    Tensor v0 = y.select(0, 0);
    v0.add_(b);
    ((v0 * v0).sum() + (r * r).sum()).backward();
    const Vec row = {xv[0] + 0.5, xv[1] + 1, xv[2] + 2};
    check_grad(b, {2 * row[0], 2 * row[1], 4 * row[2]});
    check_grad(x, {2 * row[0], 2 * row[1], 4 * row[2], 0, 0, 2 * xv[5]});
  }
  SUBCASE("view.copy_(w) with w requiring grad, into a base that does not require grad") {
    // y = zeros(2, 3); y[1] = w. loss = sum(y * c) => dL/dw = c[1]; y now requires grad.
    Tensor y = gs::zeros({2, 3}, kF64);
    Tensor w = leaf({7, 8, 9}, {3});
    Tensor other = y.select(0, 0);  // a view taken before: it becomes part of the graph too
    y.select(0, 1).copy_(w);
    CHECK(y.requires_grad());
    CHECK(other.requires_grad());
    (y * cst({1, 2, 3, 4, 5, 6}, {2, 3})).sum().backward();
    check_grad(w, {4, 5, 6});
  }
  SUBCASE("copy_ replaces the region: the old values get no gradient there") {
    // y = 2x; y[:, 0:2] = w (slice). loss = sum(y): dL/dx = 2 in column 2 only, dL/dw = 1.
    Tensor x = leaf(xv, {2, 3}), w = leaf({1, 2, 3, 4}, {2, 2});
    Tensor y = x * 2.0;
    y.slice(1, 0, 2).copy_(w);
    y.sum().backward();
    check_grad(x, {0, 0, 2, 0, 0, 2});
    check_grad(w, {1, 1, 1, 1});
  }
  SUBCASE("masked_fill_, relu_ and clamp_ on views (transposed, strided)") {
    // y = x; y^T[0] (column 0) masked where mask; y[:, ::2] relu'd; row 1 clamped to [-4.5, 4.5].
    //   y = [[1, -2, 3], [-4, 5, -6]] -> masked_fill col 0 at row 1 with 9 -> [[1, -2, 3], [9, 5, -6]]
    //   relu on columns 0 and 2 -> [[1, -2, 3], [9, 5, 0]]; clamp row 1 -> [[1, -2, 3], [4.5, 4.5, 0]]
    //   loss = sum(y * c): dx = c where the element passed all three ops unchanged.
    const Vec cv = {1, 2, 3, 4, 5, 6};
    Tensor x = leaf(xv, {2, 3});
    Tensor y = x * 1.0;
    y.t().select(0, 0).masked_fill_(gs::tensor({0, 1}, {2}, gs::kBool), 9.0);
    y.slice(1, 0, 3, 2).relu_();
    y.select(0, 1).clamp_(-4.5, 4.5);
    CHECK(vals(y) == Vec{1, -2, 3, 4.5, 4.5, 0});
    (y * cst(cv, {2, 3})).sum().backward();
    check_grad(x, {1, 2, 3, 0, 0, 0});
  }
  SUBCASE("an in-place op on an old view after the base changed") {
    // v = y[0] taken first; y.mul_(2); v.add_(b). y = [2 x0 + b; 2 x1]. loss = sum(y^2)
    //   dL/dx0 = 4 (2 x0 + b), dL/dx1 = 8 x1, dL/db = 2 (2 x0 + b).
    Tensor x = leaf(xv, {2, 3}), b = leaf({1, 1, 1}, {3});
    Tensor y = x * 1.0;
    Tensor v = y.select(0, 0);
    y.mul_(2.0);
    v.add_(b);
    (y * y).sum().backward();
    Vec gx, gb;
    for (int j = 0; j < 3; ++j) gx.push_back(4 * (2 * xv[j] + 1)), gb.push_back(2 * (2 * xv[j] + 1));
    for (int j = 3; j < 6; ++j) gx.push_back(8 * xv[j]);
    check_grad(x, gx);
    check_grad(b, gb);
  }
  SUBCASE("second derivatives through CopySlices (create_graph)") {
    // y = [s x0; x1], L = sum(y^2) = s^2 sum x0^2 + sum x1^2.
    //   g = dL/dx = [2 s^2 x0; 2 x1];  sum(g) differentiated: d/ds = 4 s sum x0, d/dx = [2 s^2; 2].
    const double sv = 1.5;
    Tensor x = leaf(xv, {2, 3}), s = leaf({sv}, {1});
    Tensor y = x * 1.0;
    y.narrow(0, 0, 1).mul_(s);
    Tensor L = (y * y).sum();
    Tensor g = gs::autograd::grad({L}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
    check_vec(vals(g),
              {2 * sv * sv * xv[0], 2 * sv * sv * xv[1], 2 * sv * sv * xv[2], 2 * xv[3], 2 * xv[4], 2 * xv[5]});
    g.sum().backward();
    check_grad(s, {4 * sv * (xv[0] + xv[1] + xv[2])});
    check_grad(x, {2 * sv * sv, 2 * sv * sv, 2 * sv * sv, 2, 2, 2});
  }
}

// ---- what stays refused, and the version checks -------------------------------------------------------------------
TEST_CASE("in-place on a view of a leaf that requires grad is refused, naming the view, the base and the op") {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  std::string msg = error_of([&] { x.narrow(0, 0, 1).mul_(2.0); });
  CAPTURE(msg);
  CHECK(has(msg, "mul_"));
  CHECK(has(msg, "view float64[1, 2]"));
  CHECK(has(msg, "float64[2, 2]"));
  CHECK(has(msg, "leaf"));
  CHECK(has(msg, "NoGradGuard"));
  CHECK(vals(x) == Vec{1, 2, 3, 4});  // refused before writing
  // A view taken under no-grad is refused the same way: it still aliases the leaf.
  Tensor v;
  {
    gs::NoGradGuard ng;
    v = x.select(0, 1);
  }
  CHECK(has(error_of([&] { v.add_(1.0); }), "add_"));
  // Under NoGradGuard (an optimizer step on a slice of a parameter) it is allowed.
  {
    gs::NoGradGuard ng;
    x.select(0, 1).add_(1.0);
  }
  CHECK(vals(x) == Vec{1, 2, 4, 5});
  (x * x).sum().backward();
  check_grad(x, {2, 4, 8, 10});
}

TEST_CASE("modifying a tensor saved for backward through a view still raises, naming the ops") {
  SUBCASE("a base saved by log, modified through a view") {
    Tensor x = leaf({1, 2, 3, 4}, {2, 2});
    Tensor y = x * 1.0;
    Tensor l = gs::log(y);
    y.select(0, 1).add_(1.0);
    std::string msg = error_of([&] { l.sum().backward(); });
    CAPTURE(msg);
    CHECK(has(msg, "log"));
    CHECK(has(msg, "add_"));
    CHECK(has(msg, "version 0"));
    CHECK(has(msg, "version 1"));
  }
  SUBCASE("a view saved by mul, modified through its base") {
    Tensor x = leaf({1, 2, 3, 4}, {2, 2}), w = leaf({1, 1}, {2});
    Tensor y = x * 1.0;
    Tensor p = y.select(0, 0) * w;  // saves the view
    y.mul_(2.0);
    std::string msg = error_of([&] { p.sum().backward(); });
    CAPTURE(msg);
    CHECK(has(msg, "mul"));
    CHECK(has(msg, "mul_"));
    CHECK(has(msg, "float64[2]"));
  }
  SUBCASE("the in-place op's own saved operand, changed afterwards through another view") {
    Tensor x = leaf({1, 2, 3, 4}, {2, 2}), s = leaf({2, 3}, {2});
    Tensor y = x * 1.0;
    Tensor o = s * 1.0;
    y.select(0, 0).mul_(o);  // mul_ saves o
    o.narrow(0, 0, 1).fill_(5.0);
    std::string msg = error_of([&] { y.sum().backward(); });
    CAPTURE(msg);
    CHECK(has(msg, "mul_"));
    CHECK(has(msg, "fill_"));
  }
}

TEST_CASE("an in-place op whose operand overlaps the destination reads the operand's old values") {
  // y.mul_(y[0]): row 1 must be multiplied by the *old* row 0, which the op overwrites first.
  Tensor y = cst({1, 2, 3, 4}, {2, 2});
  y.mul_(y.select(0, 0));
  CHECK(vals(y) == Vec{1, 4, 3, 8});
  // z += z^T: z[1][0] must add the old z[0][1].
  Tensor z = cst({1, 2, 3, 4}, {2, 2});
  z.add_(z.t());
  CHECK(vals(z) == Vec{2, 5, 5, 8});
  // The same elements in the same order need no copy and stay right.
  Tensor w = cst({1, 2, 3}, {3});
  w.add_(w);
  CHECK(vals(w) == Vec{2, 4, 6});
  // With autograd: the operand was saved by mul_ and then changed by it, so the backward raises.
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor h = x * 1.0;
  h.mul_(h.select(0, 0));
  CHECK(vals(h) == Vec{1, 4, 3, 8});
  std::string msg = error_of([&] { h.sum().backward(); });
  CAPTURE(msg);
  CHECK(has(msg, "mul_"));
  CHECK(has(msg, "modified by an in-place operation"));
}

TEST_CASE("a gradient that arrives as a view becomes a plain .grad, not a view keeping its base alive") {
  // b's gradient is sum_to(g) = sum over dim 0 (keepdim) reshaped to [3]: a view of the sum.
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3}), b = leaf({1, 1, 1}, {3});
  ((x + b) * cst({1, 2, 3, 4, 5, 6}, {2, 3})).sum().backward();
  check_grad(b, {5, 7, 9});
  CHECK(b.grad().impl().view_base == nullptr);
  CHECK_FALSE(b.grad().impl().is_view);
  CHECK(b.grad().storage().use_count() == 1);  // nobody else holds its memory
  // Accumulating into it in place later leaves x's gradient alone.
  ((x + b) * 1.0).sum().backward();
  check_grad(b, {7, 9, 11});
  check_grad(x, {2, 3, 4, 5, 6, 7});
}

TEST_CASE("views share the version counter; no history change, no re-derivation") {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = x * 1.0;
  Tensor v = y.select(0, 0);
  const auto fn = v.grad_fn();
  CHECK(std::string(fn->name()) == "select");
  y.mul_(2.0);
  CHECK(v.version() == y.version());
  CHECK(std::string(v.grad_fn()->name()) == "AsStridedBackward");
  CHECK(v.grad_fn()->next_edges.at(0).fn == y.grad_fn());
  // Under no-grad the base's history does not change, so the view keeps its own.
  Tensor u = y.select(0, 1);
  const auto ufn = u.grad_fn();
  {
    gs::NoGradGuard ng;
    y.add_(1.0);
  }
  CHECK(u.grad_fn() == ufn);
  // Hooks and retain_grad() on a view stay with it when its history is re-derived.
  Tensor w = y.select(0, 0);
  w.retain_grad();
  y.mul_(3.0);
  (w * 2.0).sum().backward();
  REQUIRE(w.grad().defined());
  check_vec(vals(w.grad()), {2, 2});
  check_grad(x, {12, 12, 0, 0});  // w = 3 * (2 x0 + 1)... d/dx0 of 2 * sum(w) = 2 * 3 * 2
}

// ---- randomized property test ---------------------------------------------------------------------------------------
// Random programs of views and in-place ops on a float64 base, run twice:
//  - as written, with real views and in-place ops (the engine under test);
//  - as a functional rewrite with no view ever written to: the base is a flat
//    tensor S, a view is read as index_select(S, its element indices), and an
//    in-place op on a view becomes S = where(in_view, f(view) scattered back, S).
// The element indices of a view come from applying the same view chain to
// arange(numel): a separate mechanism from the engine's geometry bookkeeping.
// Loss values and the gradients of every leaf must agree; every fourth program
// is also checked against central differences of the in-place program.
namespace {

enum class ViewKind { Narrow, Select, Transpose, Slice, Flatten, Unsqueeze, Expand };
struct ViewStep {
  ViewKind kind = ViewKind::Narrow;
  int64_t a = 0, b = 0, c = 0, d = 0;
  gs::Shape shape;  // Expand's target
};
using Chain = std::vector<ViewStep>;

Tensor apply_step(const Tensor& t, const ViewStep& s) {
  switch (s.kind) {
    case ViewKind::Narrow: return t.narrow(s.a, s.b, s.c);
    case ViewKind::Select: return t.select(s.a, s.b);
    case ViewKind::Transpose: return t.transpose(s.a, s.b);
    case ViewKind::Slice: return t.slice(s.a, s.b, s.c, s.d);
    case ViewKind::Flatten: return t.view({-1});
    case ViewKind::Unsqueeze: return t.unsqueeze(s.a);
    case ViewKind::Expand: return t.expand(s.shape);
  }
  return t;
}
Tensor apply_chain(Tensor t, const Chain& c) {
  for (const ViewStep& s : c) t = apply_step(t, s);
  return t;
}

enum class OpKind { Add, Mul, Div, Copy, MaskedFill, Relu, Clamp };
const char* op_name(OpKind k) {
  static const char* names[] = {"add_", "mul_", "div_", "copy_", "masked_fill_", "relu_", "clamp_"};
  return names[static_cast<int>(k)];
}

struct Operand {
  int leaf = -1;  // index into Program::leaves, or -1 for the constant
  Tensor constant;
};

struct Step {
  bool make_view = false;  // else: an in-place op
  int parent = -1;         // a view taken from (or the in-place op applied to) an existing view; -1: the base
  Chain chain;             // applied to the parent (or the base)
  OpKind op = OpKind::Add;
  Operand operand;
  double alpha = 1.0;
  Tensor mask;
};

struct Program {
  gs::Shape base_shape;
  bool base_requires_grad = true;                 // y = x * c with x a leaf; else y is a constant
  Tensor c;                                       // y = x * c
  std::vector<std::pair<gs::Shape, Vec>> leaves;  // leaf 0 is x when base_requires_grad
  std::vector<Step> steps;
  // Every view taken (by a make_view step), as a chain from the base, with the
  // loss coefficients it is multiplied by at the end.
  std::vector<Chain> full_chain;
  std::vector<Tensor> coef;
  std::vector<bool> writable;
  Tensor base_coef;
  std::string text;  // a readable listing, printed when a check fails
};

std::string chain_text(const Chain& c) {
  std::string s;
  for (const ViewStep& v : c) {
    switch (v.kind) {
      case ViewKind::Narrow:
        s += ".narrow(" + std::to_string(v.a) + "," + std::to_string(v.b) + "," + std::to_string(v.c) + ")";
        break;
      case ViewKind::Select: s += ".select(" + std::to_string(v.a) + "," + std::to_string(v.b) + ")"; break;
      case ViewKind::Transpose: s += ".transpose(" + std::to_string(v.a) + "," + std::to_string(v.b) + ")"; break;
      case ViewKind::Slice:
        s += ".slice(" + std::to_string(v.a) + "," + std::to_string(v.b) + "," + std::to_string(v.c) + "," +
             std::to_string(v.d) + ")";
        break;
      case ViewKind::Flatten: s += ".view(-1)"; break;
      case ViewKind::Unsqueeze: s += ".unsqueeze(" + std::to_string(v.a) + ")"; break;
      case ViewKind::Expand: s += ".expand(" + gs::shape_str(v.shape) + ")"; break;
    }
  }
  return s;
}

class Generator {
 public:
  explicit Generator(uint32_t seed) : rng_(seed) {}
  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }  // [lo, hi]
  double real(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }
  bool coin(double p = 0.5) { return real(0, 1) < p; }
  Vec values(int64_t n, double lo, double hi) {
    Vec v(static_cast<size_t>(n));
    for (double& e : v) e = real(lo, hi);
    return v;
  }
  // Values of magnitude in [0.5, 1.5] with a random sign: safe divisors.
  Vec away_from_zero(int64_t n) {
    Vec v = values(n, 0.5, 1.5);
    for (double& e : v) e = coin() ? e : -e;
    return v;
  }

  // A random chain of 0-3 view steps from `from` (an int64 index tensor with the geometry the
  // real tensor has); `readonly` allows expand. Returns the index tensor of the result.
  Tensor chain(Tensor from, Chain& out, bool readonly) {
    const int64_t len = uniform(0, 3);
    for (int64_t i = 0; i < len; ++i) {
      const int64_t nd = from.dim();
      std::vector<ViewKind> options;
      if (nd >= 1) options.insert(options.end(), {ViewKind::Narrow, ViewKind::Select, ViewKind::Slice});
      if (nd >= 2) options.push_back(ViewKind::Transpose);
      if (nd >= 2 && from.is_contiguous()) options.push_back(ViewKind::Flatten);
      if (nd <= 3) options.push_back(ViewKind::Unsqueeze);
      if (readonly && nd <= 3) options.push_back(ViewKind::Expand);
      ViewStep s;
      s.kind = options[static_cast<size_t>(uniform(0, static_cast<int64_t>(options.size()) - 1))];
      const int64_t d = nd > 0 ? uniform(0, nd - 1) : 0;
      const int64_t n = nd > 0 ? from.size(d) : 0;
      switch (s.kind) {
        case ViewKind::Narrow:
          if (n == 0) continue;
          s.a = d, s.b = uniform(0, n - 1), s.c = uniform(1, n - s.b);
          break;
        case ViewKind::Select:
          if (n == 0) continue;
          s.a = d, s.b = uniform(0, n - 1);
          break;
        case ViewKind::Slice:
          if (n == 0) continue;
          s.a = d, s.b = uniform(0, n - 1), s.c = uniform(s.b + 1, n), s.d = uniform(1, 2);
          break;
        case ViewKind::Transpose: s.a = d, s.b = uniform(0, nd - 1); break;
        case ViewKind::Flatten: break;
        case ViewKind::Unsqueeze: s.a = uniform(0, nd); break;
        case ViewKind::Expand: {
          s.shape = from.shape();
          s.shape.insert(s.shape.begin(), uniform(2, 3));
          break;
        }
      }
      from = apply_step(from, s);
      out.push_back(s);
    }
    return from;
  }

  Program program() {
    Program p;
    const int64_t nd = uniform(1, 3);
    for (int64_t i = 0; i < nd; ++i) p.base_shape.push_back(uniform(1, 4));
    const int64_t N = gs::numel_of(p.base_shape);
    p.base_requires_grad = coin(0.8);
    if (p.base_requires_grad) p.leaves.push_back({p.base_shape, values(N, -2, 2)});
    p.c = cst(values(N, 0.5, 1.5), p.base_shape);
    p.text = "base " + gs::shape_str(p.base_shape) + (p.base_requires_grad ? " = x * c" : " (constant)") + "\n";
    Tensor index = gs::arange(static_cast<double>(N), gs::kInt64).view(p.base_shape);
    std::vector<Tensor> view_index;  // the index tensor of each view taken

    const int64_t nsteps = uniform(1, 10);
    for (int64_t k = 0; k < nsteps; ++k) {
      Step st;
      st.make_view = coin(0.4);
      // Start from the base or from an earlier view (writable ones only for an in-place op).
      Tensor from = index;
      Chain prefix;
      if (!view_index.empty() && coin(0.4)) {
        const int v = static_cast<int>(uniform(0, static_cast<int64_t>(view_index.size()) - 1));
        if (st.make_view || p.writable[v]) {
          st.parent = v;
          from = view_index[v];
          prefix = p.full_chain[v];
        }
      }
      Tensor idx = chain(from, st.chain, st.make_view);
      Chain full = prefix;
      full.insert(full.end(), st.chain.begin(), st.chain.end());
      const std::string where =
          (st.parent >= 0 ? "view" + std::to_string(st.parent) : std::string("base")) + chain_text(st.chain);
      if (st.make_view) {
        bool writable = st.parent < 0 || p.writable[st.parent];
        for (const ViewStep& s : st.chain) writable = writable && s.kind != ViewKind::Expand;
        p.full_chain.push_back(full);
        p.writable.push_back(writable);
        p.coef.push_back(cst(values(idx.numel(), -1, 1), idx.shape()));
        view_index.push_back(idx);
        p.text += "view" + std::to_string(view_index.size() - 1) + " = " + where + "\n";
        p.steps.push_back(std::move(st));
        continue;
      }
      st.op = static_cast<OpKind>(uniform(0, 6));
      const gs::Shape vs = idx.shape();
      if (st.op == OpKind::Add || st.op == OpKind::Mul || st.op == OpKind::Div || st.op == OpKind::Copy) {
        // Operand: the view's shape, its last dim, a 0-dim or a [1] tensor (broadcast).
        gs::Shape os = vs;
        const int64_t pick = uniform(0, 3);
        if (vs.size() >= 1 && pick == 1) os = gs::Shape{vs.back()};
        if (pick == 2) os = gs::Shape{};
        if (vs.size() >= 1 && pick == 3) os = gs::Shape{1};
        const int64_t on = gs::numel_of(os);
        Vec v = st.op == OpKind::Div || st.op == OpKind::Mul ? away_from_zero(on) : values(on, -2, 2);
        if (coin(0.75)) {
          st.operand.leaf = static_cast<int>(p.leaves.size());
          p.leaves.push_back({os, v});
        } else {
          st.operand.constant = cst(v, os);
        }
        if (st.op == OpKind::Add) st.alpha = std::vector<double>{1.0, -0.5, 2.0}[static_cast<size_t>(uniform(0, 2))];
      } else if (st.op == OpKind::MaskedFill) {
        std::vector<int64_t> m(static_cast<size_t>(idx.numel()));
        for (auto& e : m) e = coin() ? 1 : 0;
        st.mask = gs::tensor(m, vs).to(gs::kBool);
      }
      p.text += std::string(op_name(st.op)) + " on " + where +
                (st.operand.leaf >= 0 ? " with leaf" + std::to_string(st.operand.leaf) : std::string()) + "\n";
      p.steps.push_back(std::move(st));
    }
    p.base_coef = cst(values(N, -1, 1), p.base_shape);
    return p;
  }

 private:
  std::mt19937 rng_;
};

Tensor operand_of(const Step& s, const std::vector<Tensor>& leaves) {
  return s.operand.leaf >= 0 ? leaves[static_cast<size_t>(s.operand.leaf)] : s.operand.constant;
}

std::vector<Tensor> make_leaves(const Program& p, const std::vector<Vec>& values) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < p.leaves.size(); ++i) out.push_back(leaf(values[i], p.leaves[i].first));
  return out;
}

std::vector<Vec> leaf_values(const Program& p) {
  std::vector<Vec> v;
  for (const auto& l : p.leaves) v.push_back(l.second);
  return v;
}

// The program as written: real views, real in-place ops.
Tensor run_inplace(const Program& p, const std::vector<Tensor>& leaves) {
  Tensor y = p.base_requires_grad ? leaves[0] * p.c : p.c.clone();
  std::vector<Tensor> views;
  for (const Step& s : p.steps) {
    Tensor from = s.parent >= 0 ? views[static_cast<size_t>(s.parent)] : y;
    Tensor t = apply_chain(from, s.chain);
    if (s.make_view) {
      views.push_back(t);
      continue;
    }
    switch (s.op) {
      case OpKind::Add: t.add_(operand_of(s, leaves), s.alpha); break;
      case OpKind::Mul: t.mul_(operand_of(s, leaves)); break;
      case OpKind::Div: t.div_(operand_of(s, leaves)); break;
      case OpKind::Copy: t.copy_(operand_of(s, leaves)); break;
      case OpKind::MaskedFill: t.masked_fill_(s.mask, 0.3); break;
      case OpKind::Relu: t.relu_(); break;
      case OpKind::Clamp: t.clamp_(-0.6, 0.7); break;
    }
  }
  Tensor loss = (y * p.base_coef).sum();
  for (size_t k = 0; k < views.size(); ++k) loss = loss + (views[k] * p.coef[k]).sum();
  return loss;
}

// The same program with no view ever written to (see the comment above).
Tensor run_functional(const Program& p, const std::vector<Tensor>& leaves) {
  const int64_t N = gs::numel_of(p.base_shape);
  Tensor S = p.base_requires_grad ? (leaves[0] * p.c).reshape({-1}) : p.c.reshape({-1}).clone();
  Tensor index = gs::arange(static_cast<double>(N), gs::kInt64).view(p.base_shape);
  auto read = [&](const Tensor& idx) { return gs::index_select(S, 0, idx.reshape({-1})).reshape(idx.shape()); };
  size_t nviews = 0;
  for (const Step& s : p.steps) {
    Chain full = s.parent >= 0 ? p.full_chain[static_cast<size_t>(s.parent)] : Chain{};
    full.insert(full.end(), s.chain.begin(), s.chain.end());
    if (s.make_view) {
      ++nviews;
      continue;
    }
    const Tensor idx = apply_chain(index, full);
    const Tensor cur = read(idx);
    Tensor nv;
    switch (s.op) {
      case OpKind::Add: nv = gs::add(cur, operand_of(s, leaves), s.alpha); break;
      case OpKind::Mul: nv = cur * operand_of(s, leaves); break;
      case OpKind::Div: nv = cur / operand_of(s, leaves); break;
      case OpKind::Copy: nv = gs::zeros_like(cur.detach()) + operand_of(s, leaves); break;
      case OpKind::MaskedFill: nv = gs::where(s.mask, gs::full({}, 0.3, kF64), cur); break;
      case OpKind::Relu: nv = gs::relu(cur); break;
      case OpKind::Clamp: nv = gs::clamp(cur, -0.6, 0.7); break;
    }
    // Scatter the new values back: position k of the flat base takes element pos[k] of the view.
    const std::vector<int64_t> iv = idx.reshape({-1}).to_vector<int64_t>();
    std::vector<int64_t> pos(static_cast<size_t>(N), 0), in(static_cast<size_t>(N), 0);
    for (size_t j = 0; j < iv.size(); ++j)
      pos[static_cast<size_t>(iv[j])] = static_cast<int64_t>(j), in[static_cast<size_t>(iv[j])] = 1;
    Tensor scattered = gs::index_select(nv.reshape({-1}), 0, gs::tensor(pos, {N}));
    S = gs::where(gs::tensor(in, {N}).to(gs::kBool), scattered, S);
  }
  (void)nviews;
  Tensor loss = (S.reshape(p.base_shape) * p.base_coef).sum();
  for (size_t k = 0; k < p.full_chain.size(); ++k)
    loss = loss + (read(apply_chain(index, p.full_chain[k])) * p.coef[k]).sum();
  return loss;
}

Vec grad_or_zeros(const Tensor& t) {
  return t.grad().defined() ? vals(t.grad()) : Vec(static_cast<size_t>(t.numel()), 0.0);
}

}  // namespace

TEST_CASE("random programs of views and in-place ops: gradients equal the functional rewrite's and numeric ones") {
  Generator gen(20260611u);
  int checked_numeric = 0, with_leaves = 0;
  const int kPrograms = 400;
  for (int prog = 0; prog < kPrograms; ++prog) {
    const Program p = gen.program();
    CAPTURE(prog);
    CAPTURE(p.text);
    if (p.leaves.empty()) continue;
    ++with_leaves;
    std::vector<Tensor> a = make_leaves(p, leaf_values(p)), b = make_leaves(p, leaf_values(p));
    Tensor la = run_inplace(p, a);
    Tensor lb = run_functional(p, b);
    check_vec({la.item<double>()}, {lb.item<double>()}, 1e-12);
    if (!la.requires_grad()) {
      CHECK_FALSE(lb.requires_grad());
      continue;
    }
    la.backward();
    lb.backward();
    for (size_t i = 0; i < a.size(); ++i) {
      CAPTURE(i);
      check_vec(grad_or_zeros(a[i]), grad_or_zeros(b[i]), 1e-10);
    }
    if (prog % 4 != 0) continue;
    // Central differences of the in-place program itself (under no-grad).
    ++checked_numeric;
    const double eps = 1e-6;
    std::vector<Vec> v = leaf_values(p);
    for (size_t i = 0; i < v.size(); ++i) {
      Vec num;
      for (size_t j = 0; j < v[i].size(); ++j) {
        const double keep = v[i][j];
        gs::NoGradGuard ng;
        v[i][j] = keep + eps;
        const double up = run_inplace(p, make_leaves(p, v)).item<double>();
        v[i][j] = keep - eps;
        const double down = run_inplace(p, make_leaves(p, v)).item<double>();
        v[i][j] = keep;
        num.push_back((up - down) / (2 * eps));
      }
      CAPTURE(i);
      check_vec(grad_or_zeros(a[i]), num, 1e-5);
    }
  }
  CHECK(with_leaves >= 200);
  CHECK(checked_numeric >= 40);
}
