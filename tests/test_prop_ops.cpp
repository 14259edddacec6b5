// Every registry op on property-drawn inputs from its whole domain (tests/prop_gen.h): float32
// against float64 on the same rounded inputs, forward and backward, and the generator itself —
// reproducible from its seed, every mode, view and asymmetric geometry drawn, shrinking that halves.
#include <doctest/doctest.h>

#include <cstdlib>
#include <set>

#include "tests/prop_check.h"

namespace {

// The seed of a run: GRADSLEUTH_PROP_SEED when set (to replay a reported failure), else fixed.
uint64_t run_seed() {
  const char* s = std::getenv("GRADSLEUTH_PROP_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 1;
}

}  // namespace

TEST_CASE("every registry op computes float32 like float64 on property-drawn inputs") {
  const uint64_t seed = run_seed();
  int ops = 0;
  for (const gs::OpInfo& op : gs::op_registry()) {
    const std::string failure = proptest::check_op(op, seed, 15, gs::kFloat32, 4);
    INFO("op: ", op.name, " (run seed ", seed, ")\n", failure);
    CHECK(failure.empty());
    ++ops;
  }
  CHECK(ops > 50);
}

TEST_CASE("the generator: the same spec gives the same tensors; every mode and view is drawn") {
  const gs::OpInfo* add = gs::find_op("add");
  REQUIRE(add);
  std::set<int> modes, views;
  int resized = 0;
  for (const proptest::Spec& s : proptest::draw(*add, 3, 40)) {
    modes.insert(static_cast<int>(s.mode));
    views.insert(static_cast<int>(s.view));
    resized += !s.sizes.empty();
    proptest::Case a = proptest::make(*add, s, gs::kFloat16, gs::kFloat32);
    proptest::Case b = proptest::make(*add, s, gs::kFloat16, gs::kFloat32);
    REQUIRE(a.inputs.size() == b.inputs.size());
    for (size_t i = 0; i < a.inputs.size(); ++i) CHECK(gs::equal(a.inputs[i], b.inputs[i]));
  }
  CHECK(modes.size() == 5);
  CHECK(views.size() == 4);
  CHECK(resized > 10);
}

TEST_CASE("the generator: near-max and subnormal draws hit the dtype's edges; views are views") {
  const gs::OpInfo* neg = gs::find_op("neg");
  REQUIRE(neg);
  proptest::Spec s;
  s.sizes = {{3, 31}, {4, 17}};
  for (gs::DType t : {gs::kFloat16, gs::kBFloat16, gs::kFloat32}) {
    INFO(gs::dtype_name(t));
    s.mode = proptest::Mode::Huge;
    const gs::Tensor big = proptest::make(*neg, s, t, t).inputs[0];
    CHECK(big.shape() == gs::Shape{31, 17});
    CHECK(gs::amax(gs::abs(big)).item<double>() > proptest::max_of(t) * 0.9);
    CHECK(gs::sum(gs::isfinite(big)).item<int64_t>() == big.numel());
    s.mode = proptest::Mode::Tiny;
    const gs::Tensor tiny = proptest::make(*neg, s, t, gs::kFloat64).inputs[0];
    const double smallest_normal = std::ldexp(1.0, proptest::normal_exp(t));
    CHECK(gs::sum(gs::logical_and(gs::abs(tiny) < smallest_normal, tiny != 0.0)).item<int64_t>() > 0);
    CHECK(gs::amax(gs::abs(tiny)).item<double>() < 16 * smallest_normal);
  }
  s.mode = proptest::Mode::Unit;
  for (proptest::View v : {proptest::View::Transposed, proptest::View::Stepped, proptest::View::Expanded}) {
    s.view = v;
    const gs::Tensor x = proptest::make(*neg, s, gs::kFloat32, gs::kFloat32).inputs[0];
    CHECK(x.shape() == gs::Shape{31, 17});
    CHECK_FALSE(x.is_contiguous());
  }
}

TEST_CASE("the generator: conv and pool geometry differs between height and width") {
  for (const char* name : {"conv2d", "conv2d_strided_grouped", "max_pool2d", "avg_pool2d"}) {
    INFO(name);
    const gs::OpInfo* op = gs::find_op(name);
    REQUIRE(op);
    int asymmetric = 0, ran = 0;
    for (const proptest::Spec& s : proptest::draw(*op, 5, 30)) {
      const proptest::Geometry& g = s.geo;
      asymmetric += g.kh != g.kw || g.sh != g.sw || g.ph != g.pw || g.dh != g.dw;
      proptest::Case c = proptest::make(*op, s, gs::kFloat32, gs::kFloat32);
      gs::Tensor y = c.fn(c.inputs);
      CHECK(y.dim() == 4);
      ++ran;
    }
    CHECK(asymmetric > 15);
    CHECK(ran == 30);
  }
}

TEST_CASE("the generator: a failing property is shrunk by halving to a smaller failing case") {
  const gs::OpInfo* add = gs::find_op("add");
  REQUIRE(add);
  proptest::Spec s;
  s.sizes = {{3, 67}, {4, 131}};
  s.mode = proptest::Mode::Huge;
  s.view = proptest::View::Transposed;
  // A made-up property that fails while the first input has more than 8 elements.
  auto fails = [&](const proptest::Spec& x) { return proptest::make(*add, x, gs::kFloat32, gs::kFloat32).inputs[0].numel() > 8; };
  const proptest::Spec small = proptest::shrink(s, fails, 200);
  const int64_t n = proptest::make(*add, small, gs::kFloat32, gs::kFloat32).inputs[0].numel();
  CHECK(n > 8);
  CHECK(n <= 32);
  CHECK(small.view == proptest::View::None);  // dropped: the property does not need it
  CHECK(small.halvings > 0);                   // magnitudes halved as far as the budget went
  CHECK(proptest::describe(*add, small).find("seed") != std::string::npos);
}
