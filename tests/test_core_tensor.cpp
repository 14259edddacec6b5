// Tests for core/tensor.h: dtypes and promotion, factories, views (shape,
// strides, offset, shared storage), conversions, printing, and the errors that
// bad input raises. Expected values are written out by hand or computed here
// with plain loops, never copied from the engine's own output.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/generator.h"
#include "core/ops.h"
#include "nn_test_util.h"

using nntest::error_of;
using nntest::has;
#include "core/tensor.h"

namespace {

using gs::Tensor;
using Vec = std::vector<double>;
using IVec = std::vector<int64_t>;

// The message of the gs::Error that f throws (a marker string if it throws none).

Vec vals(const Tensor& t) { return t.to_vector<double>(); }
IVec shp(const Tensor& t) { return t.shape().vec(); }
IVec strd(const Tensor& t) { return t.strides().vec(); }

// 0, 1, ..., n-1 as float32 in `shape` (row-major), made from host values.
Tensor iota(const gs::Shape& shape, gs::DType dt = gs::kFloat32) {
  std::vector<double> v(static_cast<size_t>(gs::numel_of(shape)));
  std::iota(v.begin(), v.end(), 0.0);
  return gs::tensor(v, shape, dt);
}

}  // namespace

// ---- dtypes and promotion ---------------------------------------------------------
TEST_CASE("dtype names and element sizes") {
  CHECK(std::string(gs::dtype_name(gs::kBool)) == "bool");
  CHECK(std::string(gs::dtype_name(gs::kInt64)) == "int64");
  CHECK(std::string(gs::dtype_name(gs::kFloat32)) == "float32");
  CHECK(std::string(gs::dtype_name(gs::kFloat64)) == "float64");
  CHECK(gs::dtype_size(gs::kBool) == 1);
  CHECK(gs::dtype_size(gs::kInt64) == 8);
  CHECK(gs::dtype_size(gs::kFloat32) == 4);
  CHECK(gs::dtype_size(gs::kFloat64) == 8);
  CHECK(gs::is_floating(gs::kFloat32));
  CHECK(gs::is_floating(gs::kFloat64));
  CHECK_FALSE(gs::is_floating(gs::kInt64));
  CHECK_FALSE(gs::is_floating(gs::kBool));
}

TEST_CASE("promotion table: bool < int64 < float32 < float64") {
  using gs::DType;
  const DType B = gs::kBool, I = gs::kInt64, F = gs::kFloat32, D = gs::kFloat64;
  const DType all[4] = {B, I, F, D};
  // expected[a][b], written out by hand.
  const DType expected[4][4] = {{B, I, F, D}, {I, I, F, D}, {F, F, F, D}, {D, D, D, D}};
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      CAPTURE(a);
      CAPTURE(b);
      CHECK(gs::promote_types(all[a], all[b]) == expected[a][b]);
      // The ops follow the same table (mul and add are defined for every pair).
      Tensor x = gs::ones({2}, all[a]), y = gs::ones({2}, all[b]);
      CHECK(gs::mul(x, y).dtype() == expected[a][b]);
      CHECK(gs::add(x, y).dtype() == expected[a][b]);
    }
  // Values are computed in the promoted type: int64 3 + float32 0.5 = 3.5.
  Tensor r = gs::tensor({3}, gs::kInt64) + gs::tensor({0.5}, gs::kFloat32);
  CHECK(r.dtype() == gs::kFloat32);
  CHECK(r.item<double>() == 3.5);
}

TEST_CASE("scalar promotion rule") {
  Tensor f = gs::tensor({1.0, 2.0}, gs::kFloat32);
  Tensor d = gs::tensor({1.0, 2.0}, gs::kFloat64);
  Tensor i = gs::tensor({3.0, 4.0}, gs::kInt64);
  Tensor b = gs::tensor({1.0, 0.0}, gs::kBool);

  CHECK((f * 2.5).dtype() == gs::kFloat32);  // a float scalar does not promote float32
  CHECK(vals(f * 2.5) == Vec{2.5, 5.0});
  CHECK((d * 2.5).dtype() == gs::kFloat64);
  CHECK((i * 2).dtype() == gs::kInt64);  // an integral scalar keeps int64
  CHECK(i.mul(gs::scalar_tensor(2, gs::kInt64)).dtype() == gs::kInt64);
  CHECK((i * 2).to_vector<int64_t>() == IVec{6, 8});
  CHECK((i + 1).dtype() == gs::kInt64);
  CHECK((i * 2.5).dtype() == gs::kFloat32);  // a fractional scalar lifts int64 to float32
  CHECK(vals(i * 2.5) == Vec{7.5, 10.0});
  CHECK((i + 0.5).dtype() == gs::kFloat32);
  CHECK((2.5 * i).dtype() == gs::kFloat32);
  CHECK((b + 1).dtype() == gs::kInt64);
  CHECK((b + 1).to_vector<int64_t>() == IVec{2, 1});

  // int / int is true division in float32.
  Tensor q = gs::tensor({7.0, -3.0}, gs::kInt64) / gs::tensor({2.0, 2.0}, gs::kInt64);
  CHECK(q.dtype() == gs::kFloat32);
  CHECK(vals(q) == Vec{3.5, -1.5});
  CHECK((i / 2).dtype() == gs::kFloat32);
  CHECK(vals(i / 2) == Vec{1.5, 2.0});
}

// ---- factories ------------------------------------------------------------------------
TEST_CASE("zeros, ones, full, *_like, scalar_tensor") {
  Tensor z = gs::zeros({2, 3});
  CHECK(shp(z) == IVec{2, 3});
  CHECK(z.dtype() == gs::kFloat32);  // the default dtype
  CHECK(z.is_contiguous());
  CHECK(strd(z) == IVec{3, 1});
  CHECK(vals(z) == Vec(6, 0.0));

  Tensor o = gs::ones({4}, gs::kInt64);
  CHECK(o.dtype() == gs::kInt64);
  CHECK(o.to_vector<int64_t>() == IVec{1, 1, 1, 1});

  Tensor f = gs::full({3, 1, 2}, -1.25, gs::kFloat64);
  CHECK(shp(f) == IVec{3, 1, 2});
  CHECK(vals(f) == Vec(6, -1.25));

  Tensor r = gs::zeros({2}, gs::TensorOptions().dtype(gs::kFloat64).requires_grad(true));
  CHECK(r.requires_grad());
  CHECK(r.dtype() == gs::kFloat64);

  CHECK(vals(gs::ones_like(f)) == Vec(6, 1.0));
  CHECK(gs::ones_like(f).dtype() == gs::kFloat64);
  CHECK(vals(gs::full_like(o, 7)) == Vec(4, 7.0));
  CHECK(gs::zeros_like(o).dtype() == gs::kInt64);

  Tensor s = gs::scalar_tensor(3.5);
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item<double>() == 3.5);

  Tensor e = gs::zeros({0, 3});
  CHECK(e.numel() == 0);
  CHECK(vals(e).empty());
}

TEST_CASE("arange and linspace") {
  CHECK(vals(gs::arange(5)) == Vec{0, 1, 2, 3, 4});
  CHECK(vals(gs::arange(2, 5)) == Vec{2, 3, 4});
  CHECK(vals(gs::arange(1, 2, 0.25)) == Vec{1, 1.25, 1.5, 1.75});
  CHECK(vals(gs::arange(5, 0, -2)) == Vec{5, 3, 1});
  CHECK(gs::arange(0, 1, 0.1, gs::kFloat64).numel() == 10);  // end is excluded
  Tensor ai = gs::arange(0, 4, 1, gs::kInt64);
  CHECK(ai.dtype() == gs::kInt64);
  CHECK(ai.to_vector<int64_t>() == IVec{0, 1, 2, 3});
  CHECK(gs::arange(3, 3).numel() == 0);

  Tensor l = gs::linspace(0, 1, 5, gs::kFloat64);
  CHECK(vals(l) == Vec{0, 0.25, 0.5, 0.75, 1.0});
  Tensor l2 = gs::linspace(-1, 1, 3, gs::kFloat64);
  CHECK(vals(l2) == Vec{-1, 0, 1});
  CHECK(vals(gs::linspace(2, 9, 1)) == Vec{2});
  CHECK(gs::linspace(0, 1, 0).numel() == 0);
  // 11 points on [0, 1] in double: each within rounding of i/10.
  Vec l11 = vals(gs::linspace(0, 1, 11, gs::kFloat64));
  REQUIRE(l11.size() == 11);
  for (int k = 0; k <= 10; ++k) CHECK(l11[k] == doctest::Approx(k / 10.0).epsilon(1e-14));
}

TEST_CASE("eye") {
  CHECK(vals(gs::eye(3)) == Vec{1, 0, 0, 0, 1, 0, 0, 0, 1});
  Tensor r = gs::eye(2, 3);
  CHECK(shp(r) == IVec{2, 3});
  CHECK(vals(r) == Vec{1, 0, 0, 0, 1, 0});
  Tensor t = gs::eye(3, 2, gs::kInt64);
  CHECK(t.dtype() == gs::kInt64);
  CHECK(vals(t) == Vec{1, 0, 0, 1, 0, 0});
}

TEST_CASE("tensor() from values") {
  Tensor a = gs::tensor({1, 2, 3});
  CHECK(shp(a) == IVec{3});
  CHECK(a.dtype() == gs::kFloat32);
  CHECK(vals(a) == Vec{1, 2, 3});

  Tensor b = gs::tensor({1, 2, 3, 4, 5, 6}, {2, 3}, gs::kFloat64);
  CHECK(shp(b) == IVec{2, 3});
  CHECK(vals(b) == Vec{1, 2, 3, 4, 5, 6});
  CHECK(b.select(0, 1).select(0, 0).item<double>() == 4);

  Tensor c = gs::tensor(IVec{5, -6}, {2});
  CHECK(c.dtype() == gs::kInt64);
  CHECK(c.to_vector<int64_t>() == IVec{5, -6});

  Tensor d = gs::tensor(std::vector<float>{0.5f, 1.5f}, {1, 2});
  CHECK(d.dtype() == gs::kFloat32);
  CHECK(vals(d) == Vec{0.5, 1.5});

  // float32 storage rounds: 0.1 is stored as the nearest float.
  CHECK(gs::tensor({0.1}).item<double>() == static_cast<double>(0.1f));
  CHECK(gs::tensor({0.1}, gs::kFloat64).item<double>() == 0.1);

  double raw[4] = {1, 2, 3, 4};
  Tensor e = gs::from_blob(raw, {2, 2}, gs::kFloat64);
  raw[0] = 100;  // from_blob copies
  CHECK(vals(e) == Vec{1, 2, 3, 4});

  CHECK(has(error_of([] { gs::tensor({1, 2, 3}, {2, 2}); }), "[2, 2]"));
}

TEST_CASE("rand, randn, randint, randperm: values, shapes, ranges") {
  gs::Generator g(123);
  Tensor u = gs::rand({50, 40}, {}, &g);
  CHECK(shp(u) == IVec{50, 40});
  CHECK(u.dtype() == gs::kFloat32);
  Vec uv = vals(u);
  CHECK(*std::min_element(uv.begin(), uv.end()) >= 0.0);
  CHECK(*std::max_element(uv.begin(), uv.end()) < 1.0);
  double mean = std::accumulate(uv.begin(), uv.end(), 0.0) / uv.size();
  CHECK(mean == doctest::Approx(0.5).epsilon(0.05));  // 2000 samples: sd of mean ~ 0.0065

  Tensor ud = gs::rand({1000}, gs::kFloat64, &g);
  Vec udv = vals(ud);
  CHECK(*std::min_element(udv.begin(), udv.end()) >= 0.0);
  CHECK(*std::max_element(udv.begin(), udv.end()) < 1.0);
  CHECK(std::set<double>(udv.begin(), udv.end()).size() == udv.size());  // 53-bit values: no repeats

  Tensor ri = gs::randint(-3, 4, {5000}, gs::kInt64, &g);
  CHECK(ri.dtype() == gs::kInt64);
  IVec riv = ri.to_vector<int64_t>();
  std::vector<int> count(7, 0);
  for (int64_t v : riv) {
    REQUIRE(v >= -3);
    REQUIRE(v < 4);
    ++count[v + 3];
  }
  for (int c : count) CHECK(c > 5000 / 7 / 2);  // every value in [-3, 4) appears, roughly evenly
  Tensor rf = gs::randint(0, 10, {3, 3}, gs::kFloat32, &g);
  CHECK(rf.dtype() == gs::kFloat32);
  for (double v : vals(rf)) CHECK(v == std::floor(v));

  Tensor p = gs::randperm(50, &g);
  CHECK(p.dtype() == gs::kInt64);
  IVec pv = p.to_vector<int64_t>();
  IVec sorted = pv;
  std::sort(sorted.begin(), sorted.end());
  IVec expect(50);
  std::iota(expect.begin(), expect.end(), 0);
  CHECK(sorted == expect);
  CHECK(pv != expect);  // probability 1/50! of the identity

  CHECK(has(error_of([] { gs::randint(3, 3, {2}); }), "randint"));
  CHECK(has(error_of([] { gs::rand({2}, gs::kInt64); }), "rand"));
}

TEST_CASE("same seed gives bit-identical samples; different seeds differ") {
  auto bits = [](const Tensor& t) {
    std::vector<unsigned char> b(t.nbytes());
    std::memcpy(b.data(), t.contiguous().raw_data(), b.size());
    return b;
  };
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    gs::Generator g1(2024), g2(2024), g3(2025);
    Tensor a1 = gs::rand({257}, dt, &g1), a2 = gs::rand({257}, dt, &g2), a3 = gs::rand({257}, dt, &g3);
    CHECK(bits(a1) == bits(a2));
    CHECK(bits(a1) != bits(a3));
    Tensor n1 = gs::randn({3, 101}, dt, &g1), n2 = gs::randn({3, 101}, dt, &g2), n3 = gs::randn({3, 101}, dt, &g3);
    CHECK(bits(n1) == bits(n2));
    CHECK(bits(n1) != bits(n3));
    // The stream advances: the next call from the same generator differs.
    Tensor n1b = gs::randn({3, 101}, dt, &g1);
    CHECK(bits(n1b) != bits(n1));
  }
  // The global generator: manual_seed makes the sequence of calls repeat.
  gs::manual_seed(7);
  Tensor x1 = gs::randn({64}), y1 = gs::rand({64}), i1 = gs::randint(0, 1000, {64});
  gs::manual_seed(7);
  Tensor x2 = gs::randn({64}), y2 = gs::rand({64}), i2 = gs::randint(0, 1000, {64});
  CHECK(bits(x1) == bits(x2));
  CHECK(bits(y1) == bits(y2));
  CHECK(bits(i1) == bits(i2));
  gs::manual_seed(8);
  CHECK(bits(gs::randn({64})) != bits(x1));
  // randperm too.
  gs::Generator p1(5), p2(5);
  CHECK(gs::randperm(20, &p1).to_vector<int64_t>() == gs::randperm(20, &p2).to_vector<int64_t>());
}

TEST_CASE("randn is standard normal (100k samples)") {
  for (gs::DType dt : {gs::kFloat64, gs::kFloat32}) {
    gs::Generator g(99);
    const int n = 100000;
    Vec v = vals(gs::randn({n}, dt, &g));
    double m = 0;
    for (double x : v) m += x;
    m /= n;
    double var = 0, m3 = 0;
    for (double x : v) {
      var += (x - m) * (x - m);
      m3 += (x - m) * (x - m) * (x - m);
    }
    var /= (n - 1);
    m3 /= n;
    const double sd = std::sqrt(var);
    // Standard errors: mean 1/sqrt(n) = 0.0032, sd 1/sqrt(2n) = 0.0022; allow ~6 of them.
    CHECK(std::fabs(m) < 0.02);
    CHECK(std::fabs(sd - 1.0) < 0.015);
    CHECK(std::fabs(m3) < 0.05);  // symmetric
    // About 68.3% within one standard deviation.
    int within = 0;
    for (double x : v) within += std::fabs(x) < 1.0;
    CHECK(within / double(n) == doctest::Approx(0.6827).epsilon(0.02));
    int64_t not_finite = 0;
    for (double x : v) not_finite += !std::isfinite(x);
    CHECK(not_finite == 0);
  }
}

TEST_CASE("uniform_ and normal_ fill in place") {
  gs::manual_seed(3);
  Tensor t = gs::zeros({2000}, gs::kFloat64);
  const uint64_t v0 = t.version();
  t.uniform_(-2, 3);
  CHECK(t.version() == v0 + 1);
  Vec v = vals(t);
  CHECK(*std::min_element(v.begin(), v.end()) >= -2);
  CHECK(*std::max_element(v.begin(), v.end()) < 3);
  CHECK(std::accumulate(v.begin(), v.end(), 0.0) / v.size() == doctest::Approx(0.5).epsilon(0.2));

  // A non-contiguous target is filled through its strides.
  Tensor base = gs::zeros({100, 2}, gs::kFloat64);
  Tensor col = base.select(1, 1);
  col.normal_(10, 0.5);
  Vec bv = vals(base);
  double s = 0;
  for (int i = 0; i < 100; ++i) {
    CHECK(bv[2 * i] == 0.0);  // column 0 untouched
    s += bv[2 * i + 1];
  }
  CHECK(s / 100 == doctest::Approx(10).epsilon(0.02));
}

// ---- views --------------------------------------------------------------------------
TEST_CASE("views share storage: writes through a view reach the base") {
  Tensor x = gs::zeros({2, 3});
  Tensor tr = x.transpose(0, 1);
  CHECK(tr.storage() == x.storage());
  const uint64_t v0 = x.version();
  tr.select(0, 1).fill_(5);  // column 1 of x
  CHECK(vals(x) == Vec{0, 5, 0, 0, 5, 0});
  CHECK(x.version() == v0 + 1);
  CHECK(tr.version() == x.version());  // one counter per storage

  x.narrow(1, 2, 1).add_(gs::ones({2, 1}));
  CHECK(vals(x) == Vec{0, 5, 1, 0, 5, 1});
  CHECK(tr.version() == v0 + 2);
  CHECK(vals(tr) == Vec{0, 0, 5, 5, 1, 1});

  Tensor v = x.view({6});
  v.select(0, 0).fill_(-1);
  CHECK(vals(x)[0] == -1);
  x.slice(1, 0, 3, 2).mul_(gs::full({1}, 10.0));  // columns 0 and 2
  CHECK(vals(x) == Vec{-10, 5, 10, 0, 5, 10});
  CHECK(v.version() == x.version());
  CHECK(x.version() == v0 + 4);

  // detach() shares storage too; clone() does not.
  Tensor d = x.detach();
  CHECK(d.storage() == x.storage());
  Tensor c = x.clone();
  CHECK(c.storage() != x.storage());
  c.fill_(0);
  CHECK(vals(x)[1] == 5);
}

TEST_CASE("transpose and permute: shape, strides, offset, values") {
  Tensor x = iota({2, 3, 4});
  CHECK(strd(x) == IVec{12, 4, 1});
  CHECK(x.is_contiguous());

  Tensor t = x.transpose(0, 2);
  CHECK(shp(t) == IVec{4, 3, 2});
  CHECK(strd(t) == IVec{1, 4, 12});
  CHECK(t.offset() == 0);
  CHECK_FALSE(t.is_contiguous());
  Vec tv = vals(t);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) CHECK(tv[(i * 3 + j) * 2 + k] == k * 12 + j * 4 + i);

  CHECK(strd(x.transpose(-1, -2)) == IVec{12, 1, 4});
  Tensor m = iota({3, 5});
  CHECK(shp(m.t()) == IVec{5, 3});
  CHECK(strd(m.t()) == IVec{1, 5});
  CHECK(shp(gs::arange(4).t()) == IVec{4});  // 1-D: unchanged

  Tensor p = x.permute({2, 0, 1});
  CHECK(shp(p) == IVec{4, 2, 3});
  CHECK(strd(p) == IVec{1, 12, 4});
  Vec pv = vals(p);
  for (int i = 0; i < 4; ++i)
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 3; ++b) CHECK(pv[(i * 2 + a) * 3 + b] == a * 12 + b * 4 + i);
  CHECK(strd(x.permute({-1, -3, -2})) == IVec{1, 12, 4});
  CHECK(p.storage() == x.storage());
}

TEST_CASE("narrow, slice (with step) and select") {
  Tensor x = iota({2, 3, 4});

  Tensor n = x.narrow(1, 1, 2);
  CHECK(shp(n) == IVec{2, 2, 4});
  CHECK(strd(n) == IVec{12, 4, 1});
  CHECK(n.offset() == 4);
  CHECK(vals(n) == Vec{4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23});
  CHECK(x.narrow(2, -2, 2).offset() == 2);

  Tensor s = x.slice(2, 1, 4, 2);
  CHECK(shp(s) == IVec{2, 3, 2});
  CHECK(strd(s) == IVec{12, 4, 2});
  CHECK(s.offset() == 1);
  Vec sv = vals(s);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) CHECK(sv[(i * 3 + j) * 2 + k] == i * 12 + j * 4 + (1 + 2 * k));

  Tensor s3 = gs::arange(10).slice(0, 0, 10, 3);  // 0, 3, 6, 9
  CHECK(shp(s3) == IVec{4});
  CHECK(strd(s3) == IVec{3});
  CHECK(vals(s3) == Vec{0, 3, 6, 9});
  CHECK(vals(gs::arange(10).slice(0, -3, 10)) == Vec{7, 8, 9});
  CHECK(vals(gs::arange(10).slice(0, 8, 100)) == Vec{8, 9});  // end is clamped
  Tensor ss = s3.slice(0, 1, 4, 2);                           // a slice of a slice: 3, 9
  CHECK(strd(ss) == IVec{6});
  CHECK(ss.offset() == 3);
  CHECK(vals(ss) == Vec{3, 9});

  Tensor sel = x.select(1, 2);
  CHECK(shp(sel) == IVec{2, 4});
  CHECK(strd(sel) == IVec{12, 1});
  CHECK(sel.offset() == 8);
  CHECK(vals(sel) == Vec{8, 9, 10, 11, 20, 21, 22, 23});
  Tensor sel2 = x.select(-1, -1);
  CHECK(shp(sel2) == IVec{2, 3});
  CHECK(strd(sel2) == IVec{12, 4});
  CHECK(sel2.offset() == 3);
  CHECK(vals(sel2) == Vec{3, 7, 11, 15, 19, 23});
  CHECK(x[1].offset() == 12);
  CHECK(x[1][2][3].item<double>() == 23);
  CHECK(x[1][2][3].dim() == 0);
}

TEST_CASE("expand gives stride 0") {
  Tensor c = gs::tensor({1, 2, 3}, {3, 1});
  Tensor e = c.expand({3, 4});
  CHECK(shp(e) == IVec{3, 4});
  CHECK(strd(e) == IVec{1, 0});
  CHECK(e.storage() == c.storage());
  CHECK(vals(e) == Vec{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});

  Tensor e3 = c.expand({2, 3, 5});  // a new leading dim, stride 0 as well
  CHECK(shp(e3) == IVec{2, 3, 5});
  CHECK(strd(e3) == IVec{0, 1, 0});
  CHECK(c.expand({-1, 2}).shape().vec() == IVec{3, 2});

  Tensor r = gs::tensor({7, 8});
  Tensor er = r.expand({3, 2});
  CHECK(strd(er) == IVec{0, 1});
  CHECK(vals(er) == Vec{7, 8, 7, 8, 7, 8});
  CHECK(vals(er.contiguous()) == Vec{7, 8, 7, 8, 7, 8});
  CHECK(strd(er.contiguous()) == IVec{2, 1});
  CHECK(has(error_of([&] { r.expand({3, 3}); }), "expand"));
}

TEST_CASE("squeeze, unsqueeze, flatten") {
  Tensor x = gs::zeros({2, 1, 3, 1});
  CHECK(shp(x.squeeze()) == IVec{2, 3});
  CHECK(shp(x.squeeze(1)) == IVec{2, 3, 1});
  CHECK(shp(x.squeeze(-1)) == IVec{2, 1, 3});
  CHECK(shp(x.squeeze(0)) == IVec{2, 1, 3, 1});  // size 2: unchanged
  CHECK(x.squeeze().storage() == x.storage());

  Tensor y = iota({2, 3});
  Tensor u0 = y.unsqueeze(0);
  CHECK(shp(u0) == IVec{1, 2, 3});
  CHECK(u0.storage() == y.storage());
  Tensor u2 = y.unsqueeze(-1);
  CHECK(shp(u2) == IVec{2, 3, 1});
  CHECK(strd(u2).at(0) == 3);
  CHECK(strd(u2).at(1) == 1);
  CHECK(shp(y.unsqueeze(1)) == IVec{2, 1, 3});
  CHECK(vals(y.unsqueeze(1)) == vals(y));
  // unsqueeze of a transposed view keeps its strides for the old dims.
  Tensor yt = y.t().unsqueeze(1);
  CHECK(shp(yt) == IVec{3, 1, 2});
  CHECK(strd(yt).at(0) == 1);
  CHECK(strd(yt).at(2) == 3);
  CHECK(vals(yt) == Vec{0, 3, 1, 4, 2, 5});

  Tensor z = iota({2, 3, 4});
  CHECK(shp(z.flatten()) == IVec{24});
  CHECK(shp(z.flatten(1)) == IVec{2, 12});
  CHECK(shp(z.flatten(0, 1)) == IVec{6, 4});
  CHECK(z.flatten().storage() == z.storage());  // contiguous: a view
  Tensor zt = z.transpose(0, 2);
  Tensor zf = zt.flatten();  // non-contiguous: a copy, in the view's order
  CHECK(zf.storage() != z.storage());
  Vec zfv = vals(zf);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) CHECK(zfv[(i * 3 + j) * 2 + k] == k * 12 + j * 4 + i);
  CHECK(shp(gs::scalar_tensor(1).flatten()) == IVec{1});
}

TEST_CASE("view and reshape") {
  Tensor x = iota({2, 3, 4});
  Tensor v = x.view({6, -1});
  CHECK(shp(v) == IVec{6, 4});
  CHECK(strd(v) == IVec{4, 1});
  CHECK(v.storage() == x.storage());
  CHECK(vals(v) == vals(x));
  CHECK(shp(x.view({-1})) == IVec{24});
  CHECK(shp(x.view({4, 1, 6})) == IVec{4, 1, 6});

  // Non-contiguous, but the dims being split live in one contiguous chunk: a view.
  Tensor tr = x.transpose(0, 1);  // (3, 2, 4), strides (4, 12, 1)
  Tensor tv = tr.view({3, 2, 2, 2});
  CHECK(strd(tv) == IVec{4, 12, 2, 1});
  CHECK(tv.storage() == x.storage());
  CHECK(vals(tv) == vals(tr));

  // Merging dims that are not adjacent in memory cannot be a view.
  std::string msg = error_of([&] { tr.view({6, 4}); });
  CHECK(has(msg, "view"));
  CHECK(has(msg, "reshape"));
  CHECK(has(msg, "[3, 2, 4]"));
  CHECK_THROWS_AS(tr.view({6, 4}), gs::Error);
  CHECK(has(error_of([&] { x.t(); }), "transpose"));  // t() is for <= 2 dims
  CHECK(has(error_of([&] { x.view({5, -1}); }), "[5, -1]"));
  CHECK(has(error_of([&] { x.view({-1, -1}); }), "-1"));

  // reshape: a view when possible, a copy otherwise.
  Tensor r1 = x.reshape({4, 6});
  CHECK(r1.storage() == x.storage());
  Tensor r2 = tr.reshape({6, 4});
  CHECK(r2.storage() != x.storage());
  CHECK(r2.is_contiguous());
  Vec r2v = vals(r2);
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) CHECK(r2v[(j * 2 + i) * 4 + k] == i * 12 + j * 4 + k);
  // The copy is independent of the base.
  r2.fill_(0);
  CHECK(vals(x)[1] == 1);
}

TEST_CASE("contiguous()") {
  Tensor x = iota({3, 4});
  CHECK(x.contiguous().is_same(x));  // already contiguous: the same tensor
  Tensor t = x.t();
  Tensor c = t.contiguous();
  CHECK(c.is_contiguous());
  CHECK(strd(c) == IVec{3, 1});
  CHECK(c.storage() != x.storage());
  CHECK(vals(c) == Vec{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  // Size-1 dims never break contiguity.
  Tensor s = gs::detail::make_alias(x, {1, 12}, {999, 1}, 0);
  CHECK(s.is_contiguous());
  // A sliced row with a gap is not.
  CHECK_FALSE(x.slice(1, 0, 4, 2).is_contiguous());
  CHECK(vals(x.slice(1, 0, 4, 2).contiguous()) == Vec{0, 2, 4, 6, 8, 10});
}

TEST_CASE("to(dtype) conversions") {
  Tensor f = gs::tensor({-1.7, -0.2, 0.0, 2.9, 3.0}, gs::kFloat32);
  Tensor i = f.to(gs::kInt64);
  CHECK(i.dtype() == gs::kInt64);
  CHECK(i.to_vector<int64_t>() == IVec{-1, 0, 0, 2, 3});  // truncation toward zero, as in C++
  Tensor b = f.to(gs::kBool);
  CHECK(b.dtype() == gs::kBool);
  CHECK(b.to_vector<bool>() == std::vector<bool>{true, true, false, true, true});
  CHECK(vals(b.to(gs::kFloat32)) == Vec{1, 1, 0, 1, 1});
  CHECK(vals(gs::tensor(IVec{3, -4}, {2}).to(gs::kFloat64)) == Vec{3, -4});
  Tensor d = gs::tensor({0.1}, gs::kFloat64);
  CHECK(d.to(gs::kFloat32).item<double>() == static_cast<double>(0.1f));
  CHECK(d.to(gs::kFloat32).to(gs::kFloat64).dtype() == gs::kFloat64);

  CHECK(f.to(gs::kFloat32).is_same(f));  // no-op without copy
  Tensor cp = f.to(gs::kFloat32, /*copy=*/true);
  CHECK_FALSE(cp.is_same(f));
  CHECK(cp.storage() != f.storage());
  CHECK(vals(cp) == vals(f));

  // A non-contiguous source converts in logical order.
  Tensor m = iota({2, 3}).t().to(gs::kInt64);
  CHECK(m.to_vector<int64_t>() == IVec{0, 3, 1, 4, 2, 5});
}

TEST_CASE("item and to_vector") {
  CHECK(gs::tensor({2.5}).item<double>() == 2.5);
  CHECK(gs::tensor({2.5}).item<int64_t>() == 2);
  CHECK(gs::tensor({3}, {1, 1}, gs::kInt64).item<int64_t>() == 3);
  CHECK(gs::scalar_tensor(4).item_double() == 4.0);
  CHECK(gs::tensor({1.0}, gs::kBool).item<bool>());
  Tensor x = iota({2, 3});
  CHECK(x[1][0].item<float>() == 3.0f);
  CHECK(x.t().to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  CHECK(x.to_vector<int64_t>() == IVec{0, 1, 2, 3, 4, 5});
  CHECK(x.data_ptr<float>()[4] == 4.0f);
  CHECK(has(error_of([&] { x.data_ptr<double>(); }), "float32"));
}

TEST_CASE("printing") {
  Tensor x = gs::tensor({1.5, -2, 3, 4, 5, 6}, {2, 3});
  std::ostringstream os;
  os << x;
  const std::string s = os.str();
  CHECK(has(s, "shape=[2, 3]"));
  CHECK(has(s, "float32"));
  CHECK(has(s, "1.5"));
  CHECK(has(s, "-2"));
  CHECK_FALSE(has(s, "..."));

  std::ostringstream oi;
  oi << gs::tensor(IVec{7, 8}, {2});
  CHECK(has(oi.str(), "int64"));
  CHECK(has(oi.str(), "7"));

  std::ostringstream ob;
  ob << (gs::tensor({1, 0}) > 0.5);
  CHECK(has(ob.str(), "bool"));
  CHECK(has(ob.str(), "true"));
  CHECK(has(ob.str(), "false"));

  // 1000 elements print in full; 1001 are summarised with "...".
  std::ostringstream full, summ;
  full << gs::arange(1000);
  summ << gs::arange(1001);
  CHECK_FALSE(has(full.str(), "..."));
  CHECK(has(summ.str(), "..."));
  CHECK(has(summ.str(), "1000"));  // the last element is shown
  CHECK(has(summ.str(), "shape=[1001]"));
  CHECK(summ.str().size() < 400);
  std::ostringstream big;
  big << gs::zeros({100, 100, 10}, gs::kFloat64);
  CHECK(has(big.str(), "..."));
  CHECK(has(big.str(), "float64"));
  CHECK(has(big.str(), "shape=[100, 100, 10]"));
  CHECK(big.str().size() < 20000);  // not the 100,000 numbers

  std::ostringstream og;
  og << gs::ones({2}, gs::TensorOptions().requires_grad(true)) * 2;
  CHECK(has(og.str(), "grad_fn=mul"));

  CHECK(x.str() == "float32[2, 3]");
  CHECK(Tensor().str() == "undefined");
}

TEST_CASE("allclose and equal") {
  Tensor a = gs::tensor({1.0, 2.0, 3.0}, gs::kFloat64);
  CHECK(gs::allclose(a, a));
  CHECK(gs::allclose(a, a + 1e-9));
  CHECK_FALSE(gs::allclose(a, a + 1e-3));
  CHECK(gs::allclose(a, a + 1e-3, 1e-2));                              // rtol
  CHECK(gs::allclose(a, a + 1e-3, 0, 2e-3));                           // atol
  CHECK_FALSE(gs::allclose(a, gs::tensor({1.0, 2.0}, gs::kFloat64)));  // shape differs
  Tensor n = gs::tensor({1.0, NAN, 3.0}, gs::kFloat64);
  CHECK_FALSE(gs::allclose(n, n));  // NaN is never close
  Tensor inf = gs::tensor({INFINITY}, gs::kFloat64);
  CHECK(gs::allclose(inf, inf));
  CHECK(gs::allclose(a.to(gs::kFloat32), a));  // dtypes may differ

  CHECK(gs::equal(a, a.clone()));
  CHECK_FALSE(gs::equal(a, a + 1e-12));
  CHECK_FALSE(gs::equal(a, a.to(gs::kFloat32)));  // dtype must match
  CHECK_FALSE(gs::equal(a, a.view({3, 1})));
  CHECK(gs::equal(iota({2, 3}).t(), iota({2, 3}).t().contiguous()));
}

// ---- errors ---------------------------------------------------------------------------
TEST_CASE("errors name the op and the shapes") {
  SUBCASE("broadcast mismatch (3,2) + (4,)") {
    Tensor a = gs::zeros({3, 2}), b = gs::zeros({4});
    CHECK_THROWS_AS(a + b, gs::Error);
    try {
      (void)(a + b);
    } catch (const gs::Error& e) {
      CHECK(e.op() == "add");
      CHECK(has(e.what(), "add"));
      CHECK(has(e.what(), "[3, 2]"));
      CHECK(has(e.what(), "[4]"));
    }
    CHECK(has(error_of([&] { gs::mul(a, b); }), "mul"));
  }
  SUBCASE("matmul inner dims") {
    std::string m = error_of([] { gs::matmul(gs::zeros({2, 3}), gs::zeros({4, 5})); });
    CHECK(has(m, "matmul"));
    CHECK(has(m, "[2, 3]"));
    CHECK(has(m, "[4, 5]"));
  }
  SUBCASE("index out of range in gather and index_select") {
    Tensor x = gs::zeros({2, 3});
    std::string g = error_of([&] { gs::gather(x, 1, gs::tensor(IVec{0, 3, 1, 1}, {2, 2})); });
    CHECK(has(g, "gather"));
    CHECK(has(g, "out of range"));
    CHECK(has(g, "[2, 3]"));
    CHECK(has(g, "3"));
    std::string neg = error_of([&] { gs::gather(x, 0, gs::tensor(IVec{-1, 0, 0}, {1, 3})); });
    CHECK(has(neg, "gather"));
    CHECK(has(neg, "-1"));
    std::string is = error_of([&] { gs::index_select(x, 1, gs::tensor(IVec{0, 5}, {2})); });
    CHECK(has(is, "index_select"));
    CHECK(has(is, "[2, 3]"));
    CHECK(has(is, "5"));
    std::string e = error_of([&] { gs::embedding(gs::zeros({4, 2}), gs::tensor(IVec{4}, {1})); });
    CHECK(has(e, "index_select"));
    CHECK(has(e, "[4, 2]"));
    CHECK(has(error_of([&] { x.select(0, 2); }), "select"));
    CHECK(has(error_of([&] { x.narrow(1, 2, 2); }), "narrow"));
  }
  SUBCASE("wrong dims in permute") {
    Tensor x = gs::zeros({2, 3, 4});
    std::string m = error_of([&] { x.permute({0, 1}); });
    CHECK(has(m, "permute"));
    CHECK(has(m, "[2, 3, 4]"));
    CHECK(has(m, "[0, 1]"));
    std::string dup = error_of([&] { x.permute({0, 0, 1}); });
    CHECK(has(dup, "permute"));
    CHECK(has(dup, "twice"));
    CHECK(has(error_of([&] { x.permute({0, 1, 3}); }), "permute"));
    CHECK(has(error_of([&] { x.transpose(0, 3); }), "transpose"));
    CHECK(has(error_of([&] { x.sum({5}); }), "sum"));
  }
  SUBCASE("negative sizes") {
    std::string z = error_of([] { gs::zeros({-1, 2}); });
    CHECK(has(z, "negative"));
    CHECK(has(z, "[-1, 2]"));
    CHECK(has(error_of([] { gs::randn({2, -3}); }), "[2, -3]"));
    CHECK(has(error_of([] { gs::ones({3}).view({-2, 1}); }), "view"));
    CHECK(has(error_of([] { gs::linspace(0, 1, -1); }), "linspace"));
  }
  SUBCASE("item() on a multi-element tensor") {
    std::string m = error_of([] { gs::zeros({2, 3}).item<double>(); });
    CHECK(has(m, "item"));
    CHECK(has(m, "[2, 3]"));
  }
  SUBCASE("requires_grad_ on int64") {
    std::string m = error_of([] { gs::zeros({2}, gs::kInt64).requires_grad_(); });
    CHECK(has(m, "requires_grad_"));
    CHECK(has(m, "int64"));
    CHECK(has(error_of([] { gs::zeros({2}, gs::TensorOptions(gs::kBool).requires_grad(true)); }), "bool"));
  }
  SUBCASE("more than 8 dims") {
    std::string m = error_of([] { gs::zeros({1, 1, 1, 1, 1, 1, 1, 1, 1}); });
    CHECK(has(m, "8"));
    CHECK(has(m, "dimensions"));
    Tensor x8 = gs::zeros({1, 1, 1, 1, 1, 1, 1, 2});
    CHECK(x8.dim() == 8);
    CHECK_THROWS_AS(x8.unsqueeze(0), gs::Error);
  }
  SUBCASE("undefined tensor") {
    CHECK(has(error_of([] { Tensor().shape(); }), "undefined"));
  }
}

// ---- hardening: checked size arithmetic (sizes that overflow are errors, not wraps) ----
TEST_CASE("huge shapes are rejected before allocating: zeros({2^62}), zeros({2^32, 2^32})") {
  const std::string a = error_of([] { gs::zeros({int64_t{1} << 62}); });
  CHECK(has(a, "tensor factory"));
  CHECK(has(a, "[4611686018427387904]"));
  CHECK(has(a, "address space"));
  const std::string b = error_of([] { gs::zeros({int64_t{1} << 32, int64_t{1} << 32}); });
  CHECK(has(b, "[4294967296, 4294967296]"));
  CHECK(has(b, "overflows int64"));
  CHECK(has(error_of([] { gs::zeros({int64_t{1} << 40, int64_t{1} << 40, 0}); }), "overflows"));
  // Large but representable shapes still fail cleanly (as out of memory), never wrap.
  // (ASan aborts on such a request unless allocator_may_return_null=1, which ./test.sh sets.)
#if !defined(__SANITIZE_ADDRESS__)
  CHECK_THROWS_AS(gs::empty({int64_t{1} << 61}, gs::kBool), gs::Error);
#endif
  // A zero-sized dim with modest other sizes is fine.
  CHECK(gs::zeros({0, int64_t{1} << 20, int64_t{1} << 20}).numel() == 0);
}

TEST_CASE("checked_mul, numel_of and checked_nbytes name the op") {
  CHECK(gs::checked_mul(int64_t{1} << 31, int64_t{1} << 31, "t") == (int64_t{1} << 62));
  CHECK(has(error_of([] { gs::checked_mul(int64_t{1} << 32, int64_t{1} << 31, "myop"); }), "myop: "));
  CHECK(has(error_of([] { gs::checked_add(INT64_MAX, 1, "addop"); }), "addop: "));
  CHECK(has(error_of([] { gs::numel_of({int64_t{1} << 62, 4}, "reader"); }), "reader: shape [4611686018427387904, 4]"));
  CHECK(gs::checked_nbytes({3, 5}, 8, "t") == 120);
  CHECK(has(error_of([] { gs::checked_nbytes({int64_t{1} << 62}, 2, "nb"); }), "nb: "));
}

TEST_CASE("views with overflowing sizes are errors: expand, view with -1") {
  Tensor x = gs::zeros({1});
  CHECK(has(error_of([&] { x.expand({int64_t{1} << 40, int64_t{1} << 40}); }), "expand"));
  CHECK(has(error_of([&] { x.view({int64_t{1} << 40, int64_t{1} << 40, -1}); }), "view"));
  CHECK(has(error_of([] { gs::arange(0, 1e300, 1e-300); }), "arange"));
}

// ---- sanitizer builds: the allocator leaves no slack for an overrun to hide in ----------
#if defined(__SANITIZE_ADDRESS__)
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
TEST_CASE("ASan builds: reading one element past a tensor's buffer is reported") {
  for (int64_t n : {1, 5, 16, 1000}) {
    CAPTURE(n);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // The child dies by ASan's report: no doctest crash handler, no report noise on the parent's output.
      ::signal(SIGABRT, SIG_DFL);
      ::signal(SIGSEGV, SIG_DFL);
      if (FILE* devnull = std::fopen("/dev/null", "w")) ::dup2(::fileno(devnull), 2);
      Tensor t = gs::zeros({n});
      volatile const float* p = t.data_ptr<float>();
      volatile float past = p[n];  // one element past the end: ASan must abort here
      (void)past;
      ::_exit(0);
    }
    int st = 0;
    ::waitpid(pid, &st, 0);
    CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 0));  // the child did not get away with it
  }
}
#endif

TEST_CASE("slice with a huge step takes one element instead of overflowing") {
  Tensor x = iota({10});
  CHECK(vals(x.slice(0, 2, 10, INT64_MAX)) == Vec{2});
  CHECK(vals(x.slice(0, 0, 10, int64_t{1} << 62)) == Vec{0});
  CHECK(vals(x.slice(0, 1, 10, 4)) == Vec{1, 5, 9});
  CHECK(x.slice(0, 5, 5, INT64_MAX).numel() == 0);
}

// ---- enums from integers ------------------------------------------------------------------
// A DType or DeviceType cast from an integer outside its enum is refused where it enters
// (factories, conversions, backends), before dtype_size or a backend table is indexed with it.
TEST_CASE("a DType or device value outside its enum is refused before anything is allocated") {
  const auto bad_dtype = static_cast<gs::DType>(7);
  const gs::Device bad_device(static_cast<gs::DeviceType>(5));
  std::string m = error_of([&] { gs::zeros({4}, bad_dtype); });
  CHECK(has(m, "tensor factory"));
  CHECK(has(m, "dtype value 7"));
  CHECK(has(m, "gs::kFloat32"));
  CHECK(has(error_of([&] { gs::empty({1 << 20}, bad_dtype); }), "dtype value 7"));
  CHECK(has(error_of([&] { gs::full({3}, 1.0, bad_dtype); }), "dtype value 7"));
  CHECK(has(error_of([&] { gs::ones({2}).to(bad_dtype); }), "Tensor::to"));
  CHECK(has(error_of([&] { gs::to_dtype(gs::ones({2}), bad_dtype); }), "to_dtype"));
  m = error_of([&] { gs::zeros({2}, gs::TensorOptions().device(bad_device)); });
  CHECK(has(m, "device type value 5"));
  CHECK(has(error_of([&] { gs::ones({2}).to(bad_device); }), "device type value 5"));
  CHECK(has(error_of([&] { gs::ones({2}).to(gs::Device(gs::DeviceType::CPU, -1)); }), "negative"));
  CHECK_FALSE(gs::has_backend(static_cast<gs::DeviceType>(5)));
  // A device string with junk after "cuda:" is a gradsleuth error, not std::invalid_argument.
  CHECK(has(error_of([] { gs::Device("cuda:x"); }), "cuda:x"));
  CHECK(has(error_of([] { gs::Device("cuda:1x"); }), "cuda:1x"));
  CHECK(gs::Device("cuda:2").index == 2);
  // The four real dtypes still work.
  for (gs::DType t : {gs::kBool, gs::kInt64, gs::kFloat32, gs::kFloat64}) CHECK(gs::zeros({2}, t).dtype() == t);
}
