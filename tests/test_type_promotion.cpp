// Type promotion, PyTorch 1.13 rules (docs/dtypes.md): result_type over every dtype pair
// and every operand form (tensor with dims, 0-dim tensor, C++ bool/int/floating number),
// the ops' output dtypes and values against tables written out here by hand from the
// rules, the floating unary ops of integer tensors, in-place castability, Scalar, the
// factories that take a value, and gradients through mixed-dtype ops (float64, numeric).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "nn_test_util.h"

namespace {

using gs::DType;
using gs::Scalar;
using gs::Tensor;
using Vec = std::vector<double>;
using IVec = std::vector<int64_t>;

constexpr DType B = gs::kBool, I = gs::kInt64, F = gs::kFloat32, D = gs::kFloat64;
const DType kAll[4] = {B, I, F, D};
constexpr int kNoResult = -1;  // marks an op PyTorch refuses (bool - bool)

using nntest::error_of;
using nntest::has;
Vec vals(const Tensor& t) { return t.to_vector<double>(); }

// ---- the expected tables, by hand from the rules --------------------------------------
// Row: the left operand's dtype, column: the right one's, in the order bool, int64, float32, float64.

// Two tensors of the same tier (both with dims, or both 0-dim): the chain bool < int64 < float32 < float64.
const DType kSameTier[4][4] = {
    /* bool    */ {B, I, F, D},
    /* int64   */ {I, I, F, D},
    /* float32 */ {F, F, F, D},
    /* float64 */ {D, D, D, D},
};
// Left with dims, right 0-dim: the 0-dim operand counts only when it is of a higher category
// (bool < integral < floating); then the two promote. float32[3] + float64 0-dim stays float32.
const DType kDimsWithZeroDim[4][4] = {
    /* bool    */ {B, I, F, D},
    /* int64   */ {I, I, F, D},
    /* float32 */ {F, F, F, F},
    /* float64 */ {D, D, D, D},
};
// Tensor (with dims or 0-dim) with a C++ number: columns are the number's kind bool, int, floating.
// A floating number lifts an integral tensor to float32 (the default dtype), never to float64.
const DType kWithNumber[4][3] = {
    /* bool    */ {B, I, F},
    /* int64   */ {I, I, F},
    /* float32 */ {F, F, F},
    /* float64 */ {D, D, D},
};
// In place: self (row) may take the result type of (self, other) only if that is castable
// back: never down a category. Other = a tensor with dims of the column's dtype.
const bool kInPlaceTensorOk[4][4] = {
    /* bool    */ {true, false, false, false},
    /* int64   */ {true, true, false, false},
    /* float32 */ {true, true, true, true},
    /* float64 */ {true, true, true, true},
};
// ... and other = a number of kind bool, int, floating.
const bool kInPlaceNumberOk[4][3] = {
    /* bool    */ {true, false, false},
    /* int64   */ {true, true, false},
    /* float32 */ {true, true, true},
    /* float64 */ {true, true, true},
};

// Operand values: tensors with dims hold {3, 0} (bool: {true, false}); 0-dim tensors hold
// 2.5 (int64: 2, bool: true); numbers are true, 2 and 2.5. A fractional value computed in an
// integer type would come out different, so the values also show the compute type.
Tensor dims_operand(DType t) { return t == B ? gs::tensor({1, 0}, B) : gs::tensor({3, 0}, t); }
Tensor zero_dim_operand(DType t) { return gs::scalar_tensor(t == B ? 1.0 : t == I ? 2.0 : 2.5, t); }
const Scalar kNumbers[3] = {Scalar(true), Scalar(2), Scalar(2.5)};
const char* kNumberNames[3] = {"true", "2", "2.5"};

// The reference value of op(a, b) in the result dtype: inputs converted to it, the op in
// double, the result converted to it (bool: nonzero; int64: exact; float32: rounded).
double in_dtype(double v, DType t) {
  switch (t) {
    case DType::Bool: return v != 0 ? 1 : 0;
    case DType::Int64: return static_cast<double>(static_cast<int64_t>(v));
    case DType::Float32: return static_cast<double>(static_cast<float>(v));
    case DType::Float16: return static_cast<double>(gs::to_float(gs::Half(static_cast<float>(v))));
    case DType::BFloat16: return static_cast<double>(gs::to_float(gs::BFloat16(static_cast<float>(v))));
    case DType::Float64: break;
  }
  return v;
}

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> tt;
  std::function<Tensor(const Tensor&, const Scalar&)> ts;
  std::function<double(double, double)> ref;
  bool refuses_bool;  // sub: PyTorch has no bool subtraction
  bool true_division;
};
std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return gs::add(a, b); },
       [](const Tensor& a, const Scalar& b) { return gs::add(a, b); }, [](double a, double b) { return a + b; }, false,
       false},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; },
       [](const Tensor& a, const Scalar& b) { return a - b; }, [](double a, double b) { return a - b; }, true, false},
      {"mul", [](const Tensor& a, const Tensor& b) { return gs::mul(a, b); },
       [](const Tensor& a, const Scalar& b) { return a * b; }, [](double a, double b) { return a * b; }, false, false},
      {"div", [](const Tensor& a, const Tensor& b) { return gs::div(a, b); },
       [](const Tensor& a, const Scalar& b) { return a / b; }, [](double a, double b) { return a / b; }, false, true},
      {"maximum", [](const Tensor& a, const Tensor& b) { return gs::maximum(a, b); },
       [](const Tensor& a, const Scalar& b) { return gs::maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }, false, false},
  };
}

// Checks one binary op result: its dtype against `expected` (the table's result type, before
// div's true-division rule) and its values against the double reference.
void check_binary(const BinaryCase& c, const Tensor& a, double b_value, DType expected,
                  const std::function<Tensor()>& run) {
  if (c.refuses_bool && expected == B) {
    const std::string msg = error_of(run);
    CHECK(has(msg, "bool"));
    return;
  }
  const DType want = c.true_division && !gs::is_floating(expected) ? F : expected;
  const Tensor out = run();
  REQUIRE(out.dtype() == want);
  const Vec av = vals(a.reshape({-1}));
  const Vec got = vals(out.reshape({-1}));
  REQUIRE(got.size() == av.size());
  for (size_t k = 0; k < av.size(); ++k) {
    const double ref = in_dtype(c.ref(in_dtype(av[k], want), in_dtype(b_value, want)), want);
    if (std::isnan(ref) || std::isinf(ref)) {
      CHECK(std::isinf(got[k]) == std::isinf(ref));
    } else {
      CHECK(got[k] == doctest::Approx(ref).epsilon(1e-7));
    }
  }
}

// The comparisons compute in the result type too: `a < b` with a fractional b compared in
// an integer type would be wrong. Their output is always bool.
void check_comparisons(const Tensor& a, double b_value, DType ct, const std::function<Tensor(int)>& run) {
  const Vec av = vals(a.reshape({-1}));
  const double bv = in_dtype(b_value, ct);
  for (int which = 0; which < 6; ++which) {
    CAPTURE(which);
    const Tensor out = run(which);
    REQUIRE(out.dtype() == B);
    const Vec got = vals(out.reshape({-1}));
    for (size_t k = 0; k < av.size(); ++k) {
      const double x = in_dtype(av[k], ct);
      const bool want[6] = {x == bv, x != bv, x<bv, x <= bv, x> bv, x >= bv};
      CHECK(got[k] == (want[which] ? 1.0 : 0.0));
    }
  }
}
Tensor compare(int which, const Tensor& a, const Tensor& b) {
  switch (which) {
    case 0: return gs::eq(a, b);
    case 1: return a != b;
    case 2: return gs::lt(a, b);
    case 3: return a <= b;
    case 4: return a.gt(b);
    default: return a >= b;
  }
}
Tensor compare(int which, const Tensor& a, const Scalar& b) {
  switch (which) {
    case 0: return a == b;
    case 1: return gs::ne(a, b);
    case 2: return a < b;
    case 3: return gs::le(a, b);
    case 4: return a > b;
    default: return a.ge(b);
  }
}

double numeric_value(const Scalar& s) { return s.to_double(); }
double value_of(const Tensor& t) { return t.item<double>(); }

}  // namespace

// ---- result_type --------------------------------------------------------------------------
TEST_CASE("result_type: tensor-tensor, tensor-0dim, 0dim-tensor, 0dim-0dim, tensor-number, number-tensor") {
  for (int a = 0; a < 4; ++a) {
    for (int b = 0; b < 4; ++b) {
      const std::string left = gs::dtype_name(kAll[a]);
      CAPTURE(left);
      const std::string right = gs::dtype_name(kAll[b]);
      CAPTURE(right);
      const Tensor da = dims_operand(kAll[a]), db = dims_operand(kAll[b]);
      const Tensor za = zero_dim_operand(kAll[a]), zb = zero_dim_operand(kAll[b]);
      CHECK(gs::result_type(da, db) == kSameTier[a][b]);
      CHECK(gs::result_type(za, zb) == kSameTier[a][b]);
      CHECK(gs::result_type(da, zb) == kDimsWithZeroDim[a][b]);
      CHECK(gs::result_type(zb, da) == kDimsWithZeroDim[a][b]);  // the rule does not depend on the side
      // promote_types is the pairwise lattice: the same-tier table.
      CHECK(gs::promote_types(kAll[a], kAll[b]) == kSameTier[a][b]);
    }
    for (int k = 0; k < 3; ++k) {
      const std::string left = gs::dtype_name(kAll[a]);
      CAPTURE(left);
      const std::string number = kNumberNames[k];
      CAPTURE(number);
      CHECK(gs::result_type(dims_operand(kAll[a]), kNumbers[k]) == kWithNumber[a][k]);
      CHECK(gs::result_type(zero_dim_operand(kAll[a]), kNumbers[k]) == kWithNumber[a][k]);
      CHECK(gs::result_type(kNumbers[k], dims_operand(kAll[a])) == kWithNumber[a][k]);
    }
  }
  // The promotion examples of docs/dtypes.md, spelled out.
  const Tensor i64 = gs::tensor(IVec{1, 2, 3}, {3}), f32 = gs::ones({3}), f64 = gs::ones({3}, D);
  const Tensor b = gs::tensor({1, 0, 1}, B);
  CHECK(gs::result_type(i64, 2.0) == F);
  CHECK(gs::result_type(i64, 2) == I);
  CHECK(gs::result_type(b, 3) == I);
  CHECK(gs::result_type(b, 2.5) == F);
  CHECK(gs::result_type(f32, 2.5) == F);
  CHECK(gs::result_type(f32, i64) == F);
  CHECK(gs::result_type(f32, gs::scalar_tensor(1.0, D)) == F);
  CHECK(gs::result_type(i64, gs::scalar_tensor(1.0, F)) == F);
  CHECK(gs::result_type(gs::scalar_tensor(1.0, F), gs::scalar_tensor(1.0, D)) == D);
  CHECK(gs::result_type(f64, 2.5f) == D);  // a C++ float is a floating number like a double
  // Numbers alone: int with floating is float32, bool with int is int64.
  CHECK(gs::result_type(Scalar(2), Scalar(2.5)) == F);
  CHECK(gs::result_type(Scalar(true), Scalar(2)) == I);
  // Three operands (clamp's x, min, max): the same tiers.
  CHECK(gs::result_type(
            {gs::promotion_operand(i64), gs::promotion_operand(Scalar(0)), gs::promotion_operand(Scalar(0.5))}) == F);
  CHECK(gs::result_type({gs::promotion_operand(f32), gs::promotion_operand(gs::scalar_tensor(0.0, D)),
                         gs::promotion_operand(Scalar(1))}) == F);
  CHECK(gs::result_type({gs::promotion_operand(b), gs::promotion_operand(gs::scalar_tensor(1.0, I)),
                         gs::promotion_operand(Scalar(0.5))}) == F);
  CHECK(has(error_of([] { gs::result_type(nullptr, 0); }), "result_type"));
}

// ---- the ops follow it --------------------------------------------------------------------
TEST_CASE("add, sub, mul, div, maximum: output dtype and values for every dtype pair and operand form") {
  for (const BinaryCase& c : binary_cases()) {
    const std::string op = c.name;
    CAPTURE(op);
    for (int a = 0; a < 4; ++a) {
      const std::string left = gs::dtype_name(kAll[a]);
      CAPTURE(left);
      for (int b = 0; b < 4; ++b) {
        const std::string right = gs::dtype_name(kAll[b]);
        CAPTURE(right);
        const Tensor da = dims_operand(kAll[a]), db = dims_operand(kAll[b]);
        const Tensor za = zero_dim_operand(kAll[a]), zb = zero_dim_operand(kAll[b]);
        // Tensor-tensor against the right tensor's first element (3, or true), broadcast: a
        // nonzero divisor.
        const Tensor db0 = db.narrow(0, 0, 1);
        check_binary(c, da, vals(db0)[0], kSameTier[a][b], [&] { return c.tt(da, db0); });
        check_binary(c, da, value_of(zb), kDimsWithZeroDim[a][b], [&] { return c.tt(da, zb); });
        check_binary(c, za, value_of(zb), kSameTier[a][b], [&] { return c.tt(za, zb); });
        // 0-dim on the left with dims on the right: the dimensioned tensor still outranks it.
        if (c.name != std::string("div")) {           // (values: da holds a 0, a division by it is inf/nan)
          const DType want = kDimsWithZeroDim[a][b];  // row: the dimensioned operand
          const Tensor out = [&] {
            if (c.refuses_bool && want == B) return Tensor();
            return c.tt(zb, da);
          }();
          if (out.defined()) CHECK(out.dtype() == want);
        }
      }
      for (int k = 0; k < 3; ++k) {
        const std::string number = kNumberNames[k];
        CAPTURE(number);
        const Tensor da = dims_operand(kAll[a]), za = zero_dim_operand(kAll[a]);
        check_binary(c, da, numeric_value(kNumbers[k]), kWithNumber[a][k], [&] { return c.ts(da, kNumbers[k]); });
        check_binary(c, za, numeric_value(kNumbers[k]), kWithNumber[a][k], [&] { return c.ts(za, kNumbers[k]); });
      }
    }
  }
}

TEST_CASE("number on the left (2.5 * t, 2 - t, true + t, 2 / t): the same table") {
  for (int a = 0; a < 4; ++a) {
    for (int k = 0; k < 3; ++k) {
      const std::string left = gs::dtype_name(kAll[a]);
      CAPTURE(left);
      const std::string number = kNumberNames[k];
      CAPTURE(number);
      const Scalar& n = kNumbers[k];
      const Tensor t = zero_dim_operand(kAll[a]);  // nonzero: division is defined
      const DType want = kWithNumber[a][k];
      const double x = value_of(t), v = numeric_value(n);
      Tensor s = n + t, m = n * t, q = n / t;
      CHECK(s.dtype() == want);
      CHECK(m.dtype() == want);
      CHECK(q.dtype() == (gs::is_floating(want) ? want : F));
      CHECK(s.item<double>() == doctest::Approx(in_dtype(in_dtype(v, want) + in_dtype(x, want), want)));
      CHECK(m.item<double>() == doctest::Approx(in_dtype(in_dtype(v, want) * in_dtype(x, want), want)));
      CHECK(q.item<double>() == doctest::Approx(v / x).epsilon(1e-6));
      if (want == B) {
        CHECK(has(error_of([&] { return n - t; }), "bool"));
      } else {
        Tensor d = n - t;
        CHECK(d.dtype() == want);
        CHECK(d.item<double>() == doctest::Approx(in_dtype(in_dtype(v, want) - in_dtype(x, want), want)));
      }
    }
  }
}

TEST_CASE("comparisons compute in the result type and return bool, for every operand form") {
  for (int a = 0; a < 4; ++a) {
    const std::string left = gs::dtype_name(kAll[a]);
    CAPTURE(left);
    const Tensor da = dims_operand(kAll[a]), za = zero_dim_operand(kAll[a]);
    for (int b = 0; b < 4; ++b) {
      const std::string right = gs::dtype_name(kAll[b]);
      CAPTURE(right);
      const Tensor zb = zero_dim_operand(kAll[b]);
      const Tensor db0 = dims_operand(kAll[b]).narrow(0, 0, 1);
      check_comparisons(da, vals(db0)[0], kSameTier[a][b], [&](int w) { return compare(w, da, db0); });
      check_comparisons(da, value_of(zb), kDimsWithZeroDim[a][b], [&](int w) { return compare(w, da, zb); });
      check_comparisons(za, value_of(zb), kSameTier[a][b], [&](int w) { return compare(w, za, zb); });
    }
    for (int k = 0; k < 3; ++k) {
      const std::string number = kNumberNames[k];
      CAPTURE(number);
      const Scalar& n = kNumbers[k];
      check_comparisons(da, numeric_value(n), kWithNumber[a][k], [&](int w) { return compare(w, da, n); });
      check_comparisons(za, numeric_value(n), kWithNumber[a][k], [&](int w) { return compare(w, za, n); });
    }
  }
  // The compute type decides close calls: int64 2 < 2.5 compares in float32 (true); a float32
  // 0.1f equals the float64 0-dim 0.1 because the dimensioned float32 sets the type, while the
  // float64 tensor 0.1 does not equal a float32 0-dim 0.1f (compared in float64).
  CHECK((gs::tensor(IVec{2}, {1}) < 2.5).item<bool>());
  CHECK_FALSE((gs::tensor(IVec{2}, {1}) == 2.5).item<bool>());
  CHECK((gs::tensor({0.1}, F) == gs::scalar_tensor(0.1, D)).item<bool>());
  CHECK_FALSE((gs::tensor({0.1}, D) == gs::scalar_tensor(0.1, F)).item<bool>());
}

TEST_CASE("the examples of the rule, values included") {
  const Tensor i64 = gs::tensor(IVec{1, 2, 3}, {3});
  const Tensor b = gs::tensor({1, 0, 1}, B);
  const Tensor f32 = gs::tensor({1.5, 2.5, 3.5}, F);

  CHECK((i64 * 2.0).dtype() == F);  // a floating literal, even a whole one, is floating
  CHECK(vals(i64 * 2.0) == Vec{2, 4, 6});
  CHECK((i64 * 2).dtype() == I);
  CHECK((i64 * 2).to_vector<int64_t>() == IVec{2, 4, 6});
  CHECK((b * 3).dtype() == I);
  CHECK((b * 3).to_vector<int64_t>() == IVec{3, 0, 3});
  CHECK((b * 2.5).dtype() == F);
  CHECK(vals(b * 2.5) == Vec{2.5, 0, 2.5});
  CHECK((f32 * 2.5).dtype() == F);
  CHECK((f32 * i64).dtype() == F);
  CHECK(vals(f32 * i64) == Vec{1.5, 5, 10.5});
  // True division.
  CHECK((i64 / gs::tensor(IVec{2, 2, 2}, {3})).dtype() == F);
  CHECK(vals(i64 / gs::tensor(IVec{2, 2, 2}, {3})) == Vec{0.5, 1, 1.5});
  CHECK(vals(i64 / 2) == Vec{0.5, 1, 1.5});
  // 0-dim tensors.
  CHECK((f32 + gs::scalar_tensor(1.0, D)).dtype() == F);
  CHECK((i64 + gs::scalar_tensor(0.5, F)).dtype() == F);
  CHECK(vals(i64 + gs::scalar_tensor(0.5, F)) == Vec{1.5, 2.5, 3.5});
  CHECK((i64 + gs::scalar_tensor(0.5, D)).dtype() == D);  // higher category: int64 and float64 promote
  CHECK((gs::scalar_tensor(1.0, F) + gs::scalar_tensor(1.0, D)).dtype() == D);
  // Integers keep full int64 precision, also for literals beyond 2^53.
  const int64_t big = (int64_t{1} << 60) + 1;
  CHECK((gs::zeros({1}, I) + big).to_vector<int64_t>() == IVec{big});
  CHECK(gs::full({2}, big).to_vector<int64_t>() == IVec{big, big});
  CHECK(gs::scalar_tensor(big, I).item<int64_t>() == big);
}

TEST_CASE("where, cat, clamp, pow and matmul use the same rule") {
  const Tensor cond = gs::tensor({1, 0, 1}, B);
  const Tensor i64 = gs::tensor(IVec{-2, 1, 5}, {3});
  CHECK(gs::where(cond, i64, gs::scalar_tensor(0.5, F)).dtype() == F);
  CHECK(vals(gs::where(cond, i64, gs::scalar_tensor(0.5, F))) == Vec{-2, 0.5, 5});
  CHECK(gs::where(cond, gs::ones({3}), gs::scalar_tensor(0.5, D)).dtype() == F);
  CHECK(gs::where(cond, gs::ones({3}), gs::ones({3}, D)).dtype() == D);
  CHECK(gs::cat({i64, gs::ones({2}, F)}).dtype() == F);
  CHECK(gs::cat({i64, gs::tensor({1, 0}, B)}).dtype() == I);

  // clamp: the bounds are operands of the promotion.
  CHECK(gs::clamp(i64, 0, 2).dtype() == I);
  CHECK(gs::clamp(i64, 0, 2).to_vector<int64_t>() == IVec{0, 1, 2});
  CHECK(gs::clamp(i64, 0.5, std::nullopt).dtype() == F);
  CHECK(vals(gs::clamp(i64, 0.5, std::nullopt)) == Vec{0.5, 1, 5});
  CHECK(gs::clamp(gs::ones({2}, F), 0.0, 2.0).dtype() == F);
  CHECK(gs::clamp(gs::ones({2}, D), 0, 2).dtype() == D);

  // pow: the exponent's kind matters; integers have no negative powers.
  CHECK(gs::pow(i64, 2).dtype() == I);
  CHECK(gs::pow(i64, 2).to_vector<int64_t>() == IVec{4, 1, 25});
  CHECK(gs::pow(i64, 2.0).dtype() == F);
  CHECK(gs::pow(i64, 0.5).dtype() == F);
  CHECK(gs::pow(gs::tensor({1, 0}, B), 2).dtype() == I);
  const std::string neg = error_of([&] { gs::pow(i64, -1); });
  CHECK(has(neg, "pow"));
  CHECK(has(neg, "negative integer powers"));
  CHECK(has(neg, "int64[3]"));
  CHECK(vals(gs::pow(gs::tensor({2.0}, F), -1)) == Vec{0.5});  // fine for floating tensors

  // matmul of two dimensioned tensors: the lattice.
  CHECK(gs::matmul(gs::ones({2, 2}, I), gs::ones({2, 2}, F)).dtype() == F);
}

TEST_CASE("add/sub alpha: floating only for a floating result, bool only for a bool one") {
  const Tensor a = gs::tensor(IVec{1, 2}, {2}), b = gs::tensor(IVec{10, 20}, {2});
  CHECK(gs::add(a, b, 2).to_vector<int64_t>() == IVec{21, 42});
  CHECK(gs::add(a, b, 2).dtype() == I);
  CHECK(gs::sub(a, b, 2).to_vector<int64_t>() == IVec{-19, -38});
  const std::string m = error_of([&] { gs::add(a, b, 2.5); });
  CHECK(has(m, "add"));
  CHECK(has(m, "alpha 2.5"));
  CHECK(has(m, "int64"));
  CHECK(has(error_of([&] { a.sub(b, 0.5); }), "alpha 0.5"));
  CHECK(has(error_of([&] { gs::add(a, b, true); }), "bool alpha"));
  CHECK(vals(gs::add(gs::ones({2}), b, 0.5)) == Vec{6, 11});
  CHECK(gs::add(gs::ones({2}), b, 0.5).dtype() == F);
  CHECK(gs::add(a, 2, 3).to_vector<int64_t>() == IVec{7, 8});  // a + alpha * number
}

// ---- unary ----------------------------------------------------------------------------------
TEST_CASE("floating unary ops of int64 and bool tensors give float32 with correct values") {
  struct Case {
    const char* name;
    Tensor (*op)(const Tensor&);
    double (*ref)(double);
  };
  const Case cases[] = {
      {"exp", gs::exp, [](double v) { return std::exp(v); }},
      {"log", gs::log, [](double v) { return std::log(v); }},
      {"sqrt", gs::sqrt, [](double v) { return std::sqrt(v); }},
      {"rsqrt", gs::rsqrt, [](double v) { return 1.0 / std::sqrt(v); }},
      {"reciprocal", gs::reciprocal, [](double v) { return 1.0 / v; }},
      {"erf", gs::erf, [](double v) { return std::erf(v); }},
      {"log1p", gs::log1p, [](double v) { return std::log1p(v); }},
      {"sin", gs::sin, [](double v) { return std::sin(v); }},
      {"cos", gs::cos, [](double v) { return std::cos(v); }},
      {"sigmoid", gs::sigmoid, [](double v) { return 1.0 / (1.0 + std::exp(-v)); }},
      {"tanh", gs::tanh, [](double v) { return std::tanh(v); }},
      {"gelu", [](const Tensor& x) { return gs::gelu(x); },
       [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }},
      {"softplus", [](const Tensor& x) { return gs::softplus(x); }, [](double v) { return std::log1p(std::exp(v)); }},
  };
  const IVec ints = {0, 1, 2, 7, 30};
  for (const Case& c : cases) {
    const std::string op = c.name;
    CAPTURE(op);
    for (const Tensor& x : {gs::tensor(ints, {5}), gs::tensor(ints, {5}).reshape({5, 1}).t(), gs::tensor({1, 0, 1}, B),
                            gs::scalar_tensor(3, I)}) {
      CAPTURE(x.str());
      const Tensor y = c.op(x);
      CHECK(y.dtype() == F);
      CHECK(y.shape() == x.shape());
      const Vec xv = vals(x.reshape({-1})), yv = vals(y.reshape({-1}));
      for (size_t k = 0; k < xv.size(); ++k) {
        const double want = c.ref(xv[k]);
        if (std::isinf(want)) {
          CHECK(yv[k] == want);
        } else {
          CHECK(yv[k] == doctest::Approx(want).epsilon(2e-6));
        }
      }
    }
  }
  // The method forms too.
  CHECK(gs::tensor(ints, {5}).exp().dtype() == F);
  CHECK(gs::tensor(ints, {5}).sigmoid().dtype() == F);
  CHECK(gs::leaky_relu(gs::tensor(IVec{-2, 3}, {2}), 0.5).dtype() == F);
  CHECK(vals(gs::leaky_relu(gs::tensor(IVec{-2, 3}, {2}), 0.5)) == Vec{-1, 3});
}

TEST_CASE("unary ops that are not floating keep integer dtypes (and square of bool is int64)") {
  const Tensor i = gs::tensor(IVec{-3, 0, 2}, {3});
  CHECK(gs::neg(i).dtype() == I);
  CHECK(gs::neg(i).to_vector<int64_t>() == IVec{3, 0, -2});
  CHECK(gs::abs(i).dtype() == I);
  CHECK(gs::sign(i).dtype() == I);
  CHECK(gs::relu(i).dtype() == I);
  CHECK(gs::square(i).dtype() == I);
  CHECK(gs::square(i).to_vector<int64_t>() == IVec{9, 0, 4});
  const Tensor b = gs::tensor({1, 0}, B);
  CHECK(gs::square(b).dtype() == I);  // pow(bool, 2): result_type(bool, 2) is int64
  CHECK(gs::square(b).to_vector<int64_t>() == IVec{1, 0});
  CHECK(gs::sign(b).dtype() == B);
  CHECK(gs::isnan(i).dtype() == B);
  CHECK(gs::logical_not(i).dtype() == B);
}

TEST_CASE("reductions: sum of int64/bool is int64, mean of an integer tensor is an error") {
  CHECK(gs::sum(gs::tensor(IVec{1, 2, 3}, {3})).dtype() == I);
  CHECK(gs::sum(gs::tensor({1, 0, 1}, B)).dtype() == I);
  CHECK(gs::sum(gs::tensor({1, 0, 1}, B)).item<int64_t>() == 2);
  const std::string m = error_of([] { gs::mean(gs::tensor(IVec{1, 2}, {2})); });
  CHECK(has(m, "mean"));
  CHECK(has(m, "could not infer the output dtype"));
  CHECK(has(m, "int64[2]"));
  CHECK(has(m, "to(gs::kFloat32)"));
  CHECK(has(error_of([] { gs::tensor({1, 0}, B).mean(); }), "bool[2]"));
  CHECK(gs::mean(gs::tensor(IVec{1, 2}, {2}).to(F)).item<double>() == 1.5);
  CHECK(has(error_of([] { gs::var(gs::tensor(IVec{1, 2}, {2})); }), "floating-point"));
}

// ---- in place ---------------------------------------------------------------------------------
TEST_CASE("in-place ops: the result type must be castable to the tensor's dtype") {
  for (int s = 0; s < 4; ++s) {
    const std::string self_dtype = gs::dtype_name(kAll[s]);
    CAPTURE(self_dtype);
    for (int o = 0; o < 4; ++o) {
      const std::string other_dtype = gs::dtype_name(kAll[o]);
      CAPTURE(other_dtype);
      Tensor self = dims_operand(kAll[s]).clone();
      const Tensor other = dims_operand(kAll[o]);
      if (kInPlaceTensorOk[s][o]) {
        self.add_(other);
        CHECK(self.dtype() == kAll[s]);
        CHECK(vals(self) == Vec{in_dtype(in_dtype(vals(dims_operand(kAll[s]))[0], kSameTier[s][o]) +
                                             in_dtype(vals(other)[0], kSameTier[s][o]),
                                         kAll[s]),
                                0});
      } else {
        const std::string m = error_of([&] { self.add_(other); });
        CHECK(has(m, "add_"));
        CHECK(has(m, "can't be cast to the desired output type"));
        CHECK(has(m, gs::dtype_name(kSameTier[s][o])));
        CHECK(has(m, gs::dtype_name(kAll[s])));
        CHECK(vals(self) == vals(dims_operand(kAll[s])));  // untouched
      }
    }
    for (int k = 0; k < 3; ++k) {
      const std::string number = kNumberNames[k];
      CAPTURE(number);
      Tensor self = dims_operand(kAll[s]).clone();
      if (kInPlaceNumberOk[s][k]) {
        self.mul_(kNumbers[k]);
        CHECK(self.dtype() == kAll[s]);
        CHECK(vals(self)[0] == in_dtype(in_dtype(vals(dims_operand(kAll[s]))[0], kWithNumber[s][k]) *
                                            in_dtype(numeric_value(kNumbers[k]), kWithNumber[s][k]),
                                        kAll[s]));
      } else {
        const std::string m = error_of([&] { self.mul_(kNumbers[k]); });
        CHECK(has(m, "mul_"));
        CHECK(has(m, "can't be cast"));
        CHECK(has(m, std::string("the number ") + kNumberNames[k]));
      }
    }
  }
  // In-place ops that cannot hold the result, and the fix the message suggests.
  Tensor i = gs::tensor(IVec{1, 2}, {2});
  const std::string m = error_of([&] { i.add_(1.5); });
  CHECK(has(
      m, "add_: result type float32 (of int64[2] and the number 1.5) can't be cast to the desired output type int64"));
  CHECK(has(m, "to(gs::kFloat32)"));
  CHECK(has(error_of([&] { i += 1.5; }), "can't be cast"));
  CHECK(has(error_of([&] { i /= 2; }), "div_"));  // true division gives float32
  CHECK(has(error_of([&] { i.div_(gs::tensor(IVec{2, 2}, {2})); }), "result type float32"));
  CHECK(has(error_of([&] { i.clamp_(0.5, std::nullopt); }), "clamp_"));
  CHECK(has(error_of([&] { gs::tensor({1, 0}, B).sub_(gs::tensor({1, 1}, B)); }), "bool"));
  i.add_(3);
  i -= 1;
  i *= 2;
  i.clamp_(0, 7);
  CHECK(i.to_vector<int64_t>() == IVec{6, 7});
  CHECK(i.dtype() == I);

  // float32.add_(float64): computed in float64, then rounded once into float32 (PyTorch).
  // 1 + (2^-24 + 2^-50): rounding y to float32 first would give 1 + 2^-24, a tie that rounds to 1.
  Tensor f = gs::ones({1}, F);
  f.add_(gs::tensor({std::ldexp(1.0, -24) + std::ldexp(1.0, -50)}, D));
  CHECK(f.dtype() == F);
  CHECK(vals(f)[0] == 1.0 + std::ldexp(1.0, -23));
  Tensor f2 = gs::ones({2}, F);
  f2.mul_(gs::scalar_tensor(3.0, D));
  CHECK(vals(f2) == Vec{3, 3});
  CHECK(f2.dtype() == F);
}

// ---- Scalar and the factories -----------------------------------------------------------------
TEST_CASE("Scalar keeps the kind of the C++ number it was made from") {
  CHECK(Scalar(true).is_bool());
  CHECK(Scalar(2).is_integral());
  CHECK(Scalar(int64_t{2}).is_integral());
  CHECK(Scalar(size_t{7}).is_integral());
  CHECK(Scalar(uint8_t{7}).is_integral());
  CHECK(Scalar(2.0).is_floating());
  CHECK(Scalar(2.0f).is_floating());
  CHECK(Scalar(2).dtype() == I);
  CHECK(Scalar(2.0).dtype() == D);
  CHECK(Scalar(false).dtype() == B);
  CHECK(Scalar(-7).to_int64() == -7);
  CHECK(Scalar(2.5).to_double() == 2.5);
  CHECK((-Scalar(2.5)).to_double() == -2.5);
  CHECK((-Scalar(true)).is_integral());
  CHECK((-Scalar(true)).to_int64() == -1);
  std::ostringstream os;
  os << Scalar(2) << " " << Scalar(2.0) << " " << Scalar(2.5) << " " << Scalar(true) << " " << Scalar(1e20);
  CHECK(os.str() == "2 2.0 2.5 true 1e+20");
  CHECK(has(error_of([] {
              Scalar s(~uint64_t{0});
              (void)s;
            }),
            "does not fit int64"));
}

TEST_CASE("full infers its dtype from the value; values must fit the dtype they are stored in") {
  CHECK(gs::full({2}, true).dtype() == B);
  CHECK(gs::full({2}, 2).dtype() == I);
  CHECK(gs::full({2}, 2.0).dtype() == F);
  CHECK(gs::full({2}, 2.0, D).dtype() == D);
  CHECK(gs::full({2}, 2, F).dtype() == F);
  CHECK(gs::scalar_tensor(2).dtype() == F);  // torch.scalar_tensor does not infer
  CHECK(gs::zeros({2}).dtype() == F);
  CHECK(gs::full_like(gs::ones({2}, I), 3).dtype() == I);

  const std::string frac = error_of([] { gs::full({2}, 2.5, I); });
  CHECK(has(frac, "full"));
  CHECK(has(frac, "2.5"));
  CHECK(has(frac, "int64"));
  CHECK(has(frac, "fractional"));
  CHECK(gs::full({2}, 2.0, I).to_vector<int64_t>() == IVec{2, 2});  // a whole floating value fits
  CHECK(has(error_of([] { gs::full({1}, NAN, I); }), "no NaN"));
  CHECK(has(error_of([] { gs::full({1}, 1e300, F); }), "overflows float32"));
  CHECK(std::isinf(gs::full({1}, INFINITY, F).item<double>()));
  CHECK(has(error_of([] { gs::full({1}, 2, B); }), "bool"));
  CHECK(gs::full({1}, 1, B).item<bool>());

  Tensor i = gs::tensor(IVec{1, 2}, {2});
  const Tensor mask = gs::tensor({1, 0}, B);
  CHECK(gs::masked_fill(i, mask, 7).to_vector<int64_t>() == IVec{7, 2});
  CHECK(gs::masked_fill(i, mask, 7).dtype() == I);
  CHECK(has(error_of([&] { gs::masked_fill(i, mask, 2.5); }), "masked_fill"));
  CHECK(has(error_of([&] { i.masked_fill_(mask, -0.5); }), "masked_fill_"));
  CHECK(has(error_of([&] { i.fill_(0.5); }), "fill_"));
  i.fill_(4);
  CHECK(i.to_vector<int64_t>() == IVec{4, 4});
  CHECK(vals(gs::masked_fill(gs::ones({2}), mask, -INFINITY))[0] == -INFINITY);
}

// ---- gradients through mixed-dtype ops (float64, numeric) ------------------------------------
namespace {
// Central differences of a float64 scalar function of x, element by element.
Vec numeric_grad(const std::function<double(const Tensor&)>& f, const Tensor& x) {
  const Vec x0 = vals(x);
  Vec g(x0.size());
  const double h = 1e-6;
  for (size_t k = 0; k < x0.size(); ++k) {
    Vec xp = x0, xm = x0;
    xp[k] += h;
    xm[k] -= h;
    g[k] = (f(gs::tensor(xp, x.shape(), D)) - f(gs::tensor(xm, x.shape(), D))) / (2 * h);
  }
  return g;
}
void check_grad(const std::function<Tensor(const Tensor&)>& f, const Vec& x0, const gs::Shape& shape) {
  Tensor x = gs::tensor(x0, shape, D).requires_grad_(true);
  Tensor y = f(x);
  REQUIRE(y.dtype() == D);
  y.sum().backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == D);
  const Vec num = numeric_grad([&](const Tensor& v) { return f(v).sum().item<double>(); }, x);
  const Vec ana = vals(x.grad());
  for (size_t k = 0; k < num.size(); ++k) CHECK(ana[k] == doctest::Approx(num[k]).epsilon(1e-6));
}
}  // namespace

TEST_CASE("gradients through promoted ops match central differences in float64") {
  const Tensor ints = gs::tensor(IVec{2, -3, 5}, {3});
  const Vec x0 = {0.7, -1.3, 2.1};
  check_grad([&](const Tensor& x) { return x * ints; }, x0, {3});             // float64 * int64 tensor
  check_grad([&](const Tensor& x) { return ints / x; }, x0, {3});             // int64 / float64
  check_grad([&](const Tensor& x) { return gs::pow(x, 3); }, x0, {3});        // integral exponent
  check_grad([&](const Tensor& x) { return gs::add(x, ints, 2); }, x0, {3});  // integral alpha
  check_grad([&](const Tensor& x) { return gs::clamp(x, -1, 1); }, x0, {3});  // integral bounds
  check_grad([&](const Tensor& x) { return gs::maximum(x, 0); }, x0, {3});    // integral number
  check_grad([&](const Tensor& x) { return 2 - x * gs::scalar_tensor(1.5, F); }, x0,
             {3});  // float32 0-dim: stays float64
  check_grad([&](const Tensor& x) { return gs::where(x > 0, x, ints); }, x0, {3});
  // A float64 0-dim weight times an int64 tensor: float64 (a floating 0-dim lifts the integers).
  check_grad([&](const Tensor& w) { return ints * w; }, {0.25}, {});
  // A float64 0-dim weight times a float32 tensor gives float32 (the dimensioned tensor wins);
  // its gradient still comes back in float64, the weight's dtype.
  Tensor w = gs::scalar_tensor(0.5, D).requires_grad_(true);
  Tensor y = gs::tensor({1.0, 2.0, 4.0}, F) * w;
  CHECK(y.dtype() == F);
  y.sum().backward();
  CHECK(w.grad().dtype() == D);
  CHECK(w.grad().item<double>() == 7.0);
}

// ---- integer overflow --------------------------------------------------------------------
// int64 arithmetic wraps around (two's complement), as PyTorch's does; the kernels compute it in
// uint64, where overflow is defined (core/elementwise_math.h), so a UBSan build reports nothing.
TEST_CASE("int64 add, sub, mul, neg, abs, square, pow and sum wrap around on overflow") {
  constexpr int64_t kMax = INT64_MAX, kMin = INT64_MIN;
  auto t = [](IVec v) {
    const auto n = static_cast<int64_t>(v.size());
    return gs::tensor(std::move(v), {n});
  };
  CHECK((t({kMax, kMin, 5}) + t({1, -1, 7})).to_vector<int64_t>() == IVec{kMin, kMax, 12});
  CHECK((t({kMin, kMax}) - t({1, -1})).to_vector<int64_t>() == IVec{kMax, kMin});
  CHECK((t({kMax, int64_t{1} << 62, -3}) * t({2, 4, 3})).to_vector<int64_t>() == IVec{-2, 0, -9});
  CHECK((t({kMax}) + 1).to_vector<int64_t>() == IVec{kMin});  // a C++ number operand too
  CHECK((-t({kMin, 3})).to_vector<int64_t>() == IVec{kMin, -3});
  CHECK(gs::abs(t({kMin, -4})).to_vector<int64_t>() == IVec{kMin, 4});
  CHECK(gs::square(t({int64_t{1} << 32, -3})).to_vector<int64_t>() == IVec{0, 9});
  // Integer pow is exact (no detour through double) and wraps like repeated multiplication.
  CHECK(gs::pow(t({3, 2, -2, 10}), 39).to_vector<int64_t>() ==
        IVec{4052555153018976267, 549755813888, -549755813888, 0x5f65568000000000});
  CHECK(gs::pow(t({2, 2}), t({63, 64})).to_vector<int64_t>() == IVec{kMin, 0});
  CHECK(gs::pow(t({7}), 0).to_vector<int64_t>() == IVec{1});
  // Reductions accumulate in int64 and wrap the same way, along every dim.
  CHECK(t({kMax, 1, 1}).sum().item<int64_t>() == kMin + 1);
  Tensor m = gs::tensor(IVec{kMax, kMax, 2, 2}, {2, 2});
  CHECK(m.sum({0}).to_vector<int64_t>() == IVec{kMin + 1, kMin + 1});
  CHECK(m.sum({1}).to_vector<int64_t>() == IVec{-2, 4});
  // In place, the same formulas.
  Tensor u = t({kMax});
  u.add_(1);
  CHECK(u.to_vector<int64_t>() == IVec{kMin});
}

TEST_CASE("pow of integer tensors refuses a negative exponent tensor before computing") {
  Tensor base = gs::tensor(IVec{2, 3, 4}, {3});
  const std::string m = error_of([&] { gs::pow(base, gs::tensor(IVec{1, -2, 0}, {3})); });
  CHECK(has(m, "pow"));
  CHECK(has(m, "negative integer powers are not allowed"));
  CHECK(has(m, "int64[3] ** int64[3]"));
  CHECK(has(m, "-2"));
  CHECK(has(m, "to(gs::kFloat32)"));
  CHECK(has(error_of([&] { gs::pow(base, gs::full({}, gs::Scalar(int64_t{-1}))); }), "negative integer powers"));
  // A floating base or exponent has negative powers; a bool exponent has no negatives.
  nntest::check_close(gs::pow(base.to(F), gs::tensor(IVec{1, -2, 0}, {3})), Vec{2.0, 1.0 / 9.0, 1.0}, 1e-7, 1e-6);
  CHECK(gs::pow(base, gs::tensor({1, 0, 1}, B)).to_vector<int64_t>() == IVec{2, 1, 4});
}
