// Tests of debug/gradcheck (M13 numeric gradient check): silent on correct gradients, fires on
// a wrong backward and locates the wrong element, first and second order.
#include <doctest/doctest.h>

#include <string>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/model/gradcheck.h"

using gs::Tensor;
using gs::tensor_list;
using namespace gs::debug;

namespace {

Tensor rnd(const gs::Shape& s, uint64_t seed) {
  gs::Generator g(seed);
  return gs::randn(s, gs::kFloat64, &g);
}

// y = 3x, with a backward that returns 3g except at flat element `bad` (2g there);
// bad = -1: 2g everywhere. The forward runs unrecorded; we attach our own node.
Tensor wrong_triple(const Tensor& x, int64_t bad) {
  Tensor y;
  {
    gs::NoGradGuard no_grad;
    y = x * 3.0;
  }
  if (gs::needs_grad(x)) {
    Tensor factor = gs::full(x.shape(), bad < 0 ? 2.0 : 3.0, gs::kFloat64);
    if (bad >= 0) factor.data_ptr<double>()[bad] = 2.0;
    gs::record("wrong_triple", y, {&x}, [factor](const Tensor& g, gs::Node&) { return tensor_list{g * factor}; });
  }
  return y;
}

// y = x^3 with a correct first derivative 3x^2 g, but computed from a detached x:
// differentiating the backward again (create_graph) misses the 6x term.
Tensor cube_detached_backward(const Tensor& x) {
  Tensor y;
  {
    gs::NoGradGuard no_grad;
    y = x * x * x;
  }
  if (gs::needs_grad(x))
    gs::record("cube", y, {&x}, [sx = gs::SavedTensor(x, "cube")](const Tensor& g, gs::Node& n) {
      Tensor xd = sx.unpack(n).detach();  // the bug: the saved input loses its history
      return tensor_list{g * 3.0 * xd * xd};
    });
  return y;
}

}  // namespace

TEST_CASE("gradcheck passes on x*y + exp(x) with broadcasting and a non-contiguous input") {
  Tensor x = rnd({4, 3}, 1).t();  // (3, 4), non-contiguous
  Tensor y = rnd({4}, 2);         // broadcast over rows
  REQUIRE_FALSE(x.is_contiguous());
  const auto x_before = x.to_vector<double>();
  bool saw_noncontiguous = true;
  auto fn = [&](const tensor_list& in) {
    saw_noncontiguous = saw_noncontiguous && !in[0].is_contiguous();
    return in[0] * in[1] + gs::exp(in[0]);
  };
  GradcheckResult r = gradcheck(fn, {x, y});
  INFO(r.message);
  CHECK(r.passed);
  CHECK(r.max_abs_error < 1e-7);
  CHECK(r.elements_checked == 12 + 4);
  CHECK(r.elements_failed == 0);
  CHECK(saw_noncontiguous);                  // the check kept the input's strides
  CHECK(x.to_vector<double>() == x_before);  // and never modified the caller's tensor
  CHECK(r.message.find("passed") != std::string::npos);
}

TEST_CASE("gradcheck: integer inputs pass through, expanded inputs are checked per element") {
  Tensor x = rnd({3, 4}, 3);
  Tensor idx = gs::tensor(std::vector<int64_t>{0, 3, 1, 1, 2, 0}, {3, 2});
  GradcheckResult r = gradcheck([](const tensor_list& in) { return gs::gather(in[0], 1, in[1]).square(); }, {x, idx});
  INFO(r.message);
  CHECK(r.passed);
  CHECK(r.elements_checked == 12);

  Tensor e = rnd({3, 1}, 4).expand({3, 4});  // stride 0: its elements share memory
  GradcheckResult r2 = gradcheck([](const tensor_list& in) { return gs::sin(in[0]) * 2.0; }, {e});
  INFO(r2.message);
  CHECK(r2.passed);
  CHECK(r2.elements_checked == 12);
}

TEST_CASE("gradcheck fails on a wrong backward and locates the element") {
  SUBCASE("wrong everywhere: 2g instead of 3g") {
    GradcheckResult r = gradcheck([](const tensor_list& in) { return wrong_triple(in[0], -1); }, {rnd({3, 4}, 5)});
    INFO(r.message);
    CHECK_FALSE(r.passed);
    CHECK(r.elements_failed == 12);
    CHECK(r.analytic_at_worst == doctest::Approx(r.numeric_at_worst * 2.0 / 3.0).epsilon(1e-6));
    CHECK(r.message.find("FAILED") != std::string::npos);
    CHECK(r.message.find("0.666667 x numeric") != std::string::npos);  // the diagnosis: a constant factor
    CHECK(r.message.find("wrong_triple") != std::string::npos);        // the suspect node is named
  }
  SUBCASE("wrong at one element of the second input") {
    const int64_t bad = 6;  // (1, 2) in a (3, 4)
    auto fn = [](const tensor_list& in) { return gs::sin(in[0]) + wrong_triple(in[1], bad); };
    GradcheckResult r = gradcheck(fn, {rnd({3, 4}, 6), rnd({3, 4}, 7)});
    INFO(r.message);
    CHECK_FALSE(r.passed);
    CHECK(r.elements_failed == 1);
    CHECK(r.worst_input == 1);
    CHECK(r.worst_index == bad);
    CHECK(r.worst_coords == std::vector<int64_t>{1, 2});
    CHECK(r.analytic_at_worst == doctest::Approx(r.numeric_at_worst * 2.0 / 3.0).epsilon(1e-6));
    CHECK(r.max_abs_error > 0.1);
    CHECK(r.message.find("input 1") != std::string::npos);
    CHECK(r.message.find("(1, 2)") != std::string::npos);
  }
  SUBCASE("a non-contiguous input: coordinates are logical, not storage order") {
    Tensor x = rnd({4, 3}, 8).t();  // (3, 4); storage order differs from logical order
    GradcheckResult r = gradcheck([](const tensor_list& in) { return wrong_triple(in[0], 6); }, {x});
    INFO(r.message);
    CHECK_FALSE(r.passed);
    CHECK(r.worst_index == 6);
    CHECK(r.worst_coords == std::vector<int64_t>{1, 2});
  }
}

TEST_CASE("gradcheck fast mode agrees with the full check") {
  GradcheckOptions fast;
  fast.fast = true;
  fast.fast_projections = 6;
  auto good = [](const tensor_list& in) { return gs::tanh(in[0].matmul(in[1])) * in[0].sum(); };
  GradcheckResult r = gradcheck(good, {rnd({3, 4}, 9), rnd({4, 2}, 10)}, fast);
  INFO(r.message);
  CHECK(r.passed);
  CHECK(r.elements_checked == 6);

  GradcheckResult bad =
      gradcheck([](const tensor_list& in) { return wrong_triple(in[0], -1); }, {rnd({3, 4}, 11)}, fast);
  INFO(bad.message);
  CHECK_FALSE(bad.passed);
  CHECK(bad.message.find("fast") != std::string::npos);
}

TEST_CASE("gradgradcheck: second derivatives of tanh and matmul, and a backward that is not differentiable") {
  GradcheckResult t = gradgradcheck([](const tensor_list& in) { return gs::tanh(in[0]); }, {rnd({3, 4}, 12)});
  INFO(t.message);
  CHECK(t.passed);
  GradcheckResult m =
      gradgradcheck([](const tensor_list& in) { return gs::matmul(in[0], in[1]); }, {rnd({3, 4}, 13), rnd({4, 2}, 14)});
  INFO(m.message);
  CHECK(m.passed);

  auto cube = [](const tensor_list& in) { return cube_detached_backward(in[0]); };
  Tensor x = rnd({2, 3}, 15);
  GradcheckResult first = gradcheck(cube, {x});
  INFO(first.message);
  CHECK(first.passed);  // the first derivative is right...
  GradcheckResult second = gradgradcheck(cube, {x});
  INFO(second.message);
  CHECK_FALSE(second.passed);  // ...its derivative is not
  CHECK(second.message.find("second order") != std::string::npos);
  CHECK(second.message.find("all zero") != std::string::npos);

  GradcheckOptions both;
  both.check_double_backward = true;
  CHECK_FALSE(gradcheck(cube, {x}, both).passed);
}

TEST_CASE("gradcheck rejects float32 inputs and non-floating outputs with a fix") {
  auto fn = [](const tensor_list& in) { return in[0] * 2.0; };
  CHECK_THROWS_AS(gradcheck(fn, {gs::randn({3})}), gs::Error);
  try {
    gradcheck(fn, {gs::randn({3})});
  } catch (const gs::Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("float32[3]") != std::string::npos);
    CHECK(msg.find("gs::kFloat64") != std::string::npos);
  }
  CHECK_THROWS_AS(gradcheck([](const tensor_list& in) { return in[0] > 0.0; }, {rnd({3}, 16)}), gs::Error);
  CHECK_THROWS_AS(gradcheck([](const tensor_list& in) { return in[0].to(gs::kFloat32); }, {rnd({3}, 17)}), gs::Error);
}

TEST_CASE("gradcheck_all_ops: filter, skipped ops, unknown names") {
  auto rows = gradcheck_all_ops({}, "relu");
  REQUIRE_FALSE(rows.empty());
  for (const auto& row : rows) {
    CHECK(row.name == "relu");
    CHECK(row.passed);
    CHECK_FALSE(row.double_backward_checked);  // check_double_backward is off by default
  }
  auto cmp = gradcheck_all_ops({}, "lt");
  REQUIRE(cmp.size() == 1);
  CHECK(cmp[0].skipped);
  CHECK_THROWS_AS(gradcheck_all_ops({}, "no_such_op"), gs::Error);

  GradcheckOptions dbl;
  dbl.check_double_backward = true;
  for (const auto& row : gradcheck_all_ops(dbl, "tanh")) {
    CHECK(row.double_backward_checked);
    CHECK(row.double_backward_passed);
  }
}
