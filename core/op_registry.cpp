// The op registry: one row per op, with the sample inputs the gradient checker
// and the backend-coverage tests use. Samples cover broadcasting and
// non-contiguous inputs where an op has them.
#include "core/op_registry.h"

#include <cmath>
#include <iterator>
#include <limits>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"

namespace gradsleuth {

namespace {

using Samples = std::vector<OpSample>;

// Random inputs in a range, in the requested dtype.
Tensor rnd(Generator& g, const Shape& s, DType t, double lo = -1.0, double hi = 1.0) {
  return rand(s, t, &g) * (hi - lo) + lo;
}
// A non-contiguous tensor of shape s (transposed storage of s reversed in the last two dims).
Tensor noncontig(Generator& g, const Shape& s, DType t, double lo = -1.0, double hi = 1.0) {
  Shape r = s;
  std::swap(r[r.size() - 1], r[r.size() - 2]);
  return rnd(g, r, t, lo, hi).transpose(-1, -2);
}
// Values bounded away from 0 with random signs (for division, abs, ...).
Tensor away_from_zero(Generator& g, const Shape& s, DType t) {
  Tensor m = rnd(g, s, t, 0.5, 1.5);
  Tensor sg = where(rand(s, t, &g) > 0.5, ones(s, t), full(s, -1.0, t));
  return m * sg;
}

// Standard sample sets.
Samples unary_samples(Generator& g, DType t, double lo, double hi) {
  return {{"(3,4)", {rnd(g, {3, 4}, t, lo, hi)}},
          {"non-contiguous (4,3)", {noncontig(g, {4, 3}, t, lo, hi)}},
          {"scalar ()", {rnd(g, {}, t, lo, hi)}}};
}
Samples binary_samples(Generator& g, DType t, double lo, double hi, double blo, double bhi) {
  return {{"same shape (3,4)", {rnd(g, {3, 4}, t, lo, hi), rnd(g, {3, 4}, t, blo, bhi)}},
          {"broadcast (3,1)x(1,4)", {rnd(g, {3, 1}, t, lo, hi), rnd(g, {1, 4}, t, blo, bhi)}},
          {"bias (2,3)x(3)", {rnd(g, {2, 3}, t, lo, hi), rnd(g, {3}, t, blo, bhi)}},
          {"non-contiguous (4,3)x(4,3)", {noncontig(g, {4, 3}, t, lo, hi), rnd(g, {4, 3}, t, blo, bhi)}}};
}
// Distinct values (no ties) for max/min-style ops.
Tensor distinct(Generator& g, const Shape& s, DType t) {
  const int64_t n = numel_of(s);
  Tensor p = randperm(n, &g).to(t) / static_cast<double>(n);
  return p.reshape(s);
}

using Fn = std::function<Tensor(const tensor_list&)>;
OpInfo op(std::string name, std::string cat, Fn fn, std::function<Samples(Generator&, DType)> samples,
          bool differentiable = true, bool double_backward = true) {
  OpInfo o;
  o.name = std::move(name);
  o.category = std::move(cat);
  o.fn = std::move(fn);
  o.samples = std::move(samples);
  o.differentiable = differentiable;
  o.double_backward = double_backward;
  return o;
}

// ---- the rows of the kernel ops, generated from core/op_kinds.h ------------------------------
// Each unary and binary op code X(Enumerator, name) of GS_UNARY_OPS / GS_BINARY_OPS gets the row
// `name` calling the public gradsleuth::name(x) / gradsleuth::name(a, b), sampled as its traits
// below say. The traits are looked up by enumerator (unary_traits::Exp), so an op added to the
// list without its line here does not compile, and with it the op is gradient-checked and
// compared on CUDA with no other edit.
enum class Sampling {
  Range,         // uniform in [lo, hi] (the second operand in [blo, bhi]): the standard shapes,
                 // non-contiguous, a scalar / broadcasting
  AwayFromZero,  // |x| in [0.5, 1.5] with random signs: the derivative jumps at 0 (abs, relu, ...)
  Distinct,      // distinct values, no ties between the operands (maximum, minimum)
  Special,       // 0, NaN, +-Inf and a non-contiguous tensor (the predicates)
  Logical,       // bool operands, and floats read as bools (nonzero is true)
};
struct KernelRowTraits {
  Sampling sampling = Sampling::Range;
  double lo = -1.0, hi = 1.0;    // the (first) operand's range
  double blo = -1.0, bhi = 1.0;  // the second operand's range (binary ops)
  bool differentiable = true;
  bool double_backward = true;
  const char* category = "elementwise";
};
constexpr KernelRowTraits kNotDifferentiable{
    .differentiable = false, .double_backward = false, .category = "comparison"};

namespace unary_traits {
constexpr KernelRowTraits Neg{}, Exp{}, Square{}, Expm1{};
constexpr KernelRowTraits Log{.lo = 0.5, .hi = 2.0}, Sqrt{.lo = 0.5, .hi = 2.0}, Rsqrt{.lo = 0.5, .hi = 2.0};
constexpr KernelRowTraits Abs{.sampling = Sampling::AwayFromZero}, Reciprocal{.sampling = Sampling::AwayFromZero};
constexpr KernelRowTraits Relu{.sampling = Sampling::AwayFromZero};
constexpr KernelRowTraits Sign{.sampling = Sampling::AwayFromZero,
                               .differentiable = false,
                               .double_backward = false};  // piecewise constant: nothing to differentiate
constexpr KernelRowTraits Sigmoid{.lo = -3.0, .hi = 3.0}, Tanh{.lo = -2.0, .hi = 2.0};
constexpr KernelRowTraits Erf{.lo = -1.5, .hi = 1.5}, Log1p{.lo = -0.5, .hi = 1.0};
constexpr KernelRowTraits Sin{.lo = -2.0, .hi = 2.0}, Cos{.lo = -2.0, .hi = 2.0};
constexpr KernelRowTraits LogicalNot{
    .sampling = Sampling::Logical, .differentiable = false, .double_backward = false, .category = "comparison"};
constexpr KernelRowTraits IsNan{
    .sampling = Sampling::Special, .differentiable = false, .double_backward = false, .category = "comparison"};
constexpr KernelRowTraits IsInf = IsNan, IsFinite = IsNan;
}  // namespace unary_traits

namespace binary_traits {
constexpr KernelRowTraits Add{}, Sub{}, Mul{};
constexpr KernelRowTraits Div{.blo = 0.5, .bhi = 1.5}, Pow{.lo = 0.5, .hi = 1.5};
constexpr KernelRowTraits Maximum{.sampling = Sampling::Distinct}, Minimum{.sampling = Sampling::Distinct};
constexpr KernelRowTraits Eq = kNotDifferentiable, Ne = kNotDifferentiable, Lt = kNotDifferentiable,
                          Le = kNotDifferentiable, Gt = kNotDifferentiable, Ge = kNotDifferentiable;
constexpr KernelRowTraits LogicalAnd{
    .sampling = Sampling::Logical, .differentiable = false, .double_backward = false, .category = "comparison"};
constexpr KernelRowTraits LogicalOr = LogicalAnd;
}  // namespace binary_traits

// Predicates' inputs: NaN, +-Inf and 0 among ordinary values, and a non-contiguous tensor.
Samples special_samples(Generator& g, DType t) {
  const double inf = std::numeric_limits<double>::infinity();
  return {{"NaN, +-Inf, 0 (2,3)", {tensor({0.0, 1.5, -2.0, std::nan(""), inf, -inf}, t).reshape({2, 3})}},
          {"non-contiguous (4,3)", {noncontig(g, {4, 3}, t)}}};
}

Samples unary_kernel_samples(const KernelRowTraits& k, Generator& g, DType t) {
  switch (k.sampling) {
    case Sampling::Range: return unary_samples(g, t, k.lo, k.hi);
    case Sampling::AwayFromZero:
      return {{"(3,4) away from 0", {away_from_zero(g, {3, 4}, t)}},
              {"non-contiguous (4,3) away from 0", {away_from_zero(g, {3, 4}, t).t()}}};
    case Sampling::Distinct: return {{"(3,4) distinct", {distinct(g, {3, 4}, t)}}};
    case Sampling::Special: return special_samples(g, t);
    case Sampling::Logical: {
      Samples s{{"bool (3,4)", {rnd(g, {3, 4}, t) > 0.0}},
                {"bool non-contiguous (4,3)", {(rnd(g, {3, 4}, t) > 0.0).t()}}};
      for (OpSample& f : special_samples(g, t)) s.push_back({"as bool: " + f.label, f.inputs});
      return s;
    }
  }
  return {};
}

Samples binary_kernel_samples(const KernelRowTraits& k, Generator& g, DType t) {
  switch (k.sampling) {
    case Sampling::Range: return binary_samples(g, t, k.lo, k.hi, k.blo, k.bhi);
    case Sampling::AwayFromZero:
      return {{"same shape (3,4) away from 0", {away_from_zero(g, {3, 4}, t), away_from_zero(g, {3, 4}, t)}},
              {"broadcast (3,1)x(1,4) away from 0", {away_from_zero(g, {3, 1}, t), away_from_zero(g, {1, 4}, t)}}};
    case Sampling::Distinct:
      // distinct() draws multiples of 1/n; the shift keeps the second operand off the first's
      // values, so no element ties with its partner (where the gradient would be split).
      return {{"(3,4)", {distinct(g, {3, 4}, t), distinct(g, {3, 4}, t) + 0.01}},
              {"broadcast (3,1)x(4)", {distinct(g, {3, 1}, t), distinct(g, {4}, t) + 0.03}}};
    case Sampling::Special: {
      Samples s = special_samples(g, t);
      for (OpSample& x : s) x.inputs.push_back(rnd(g, x.inputs[0].shape(), t));
      return s;
    }
    case Sampling::Logical: {
      Samples s;
      for (OpSample& f : binary_samples(g, t, -1, 1, -1, 1))
        s.push_back({"bool " + f.label, {f.inputs[0] > 0.0, f.inputs[1] > 0.0}});
      auto with_zeros = [&] { return where(rnd(g, {3, 4}, t) > 0.0, zeros({3, 4}, t), away_from_zero(g, {3, 4}, t)); };
      s.push_back({"as bool: floats (3,4) with zeros", {with_zeros(), with_zeros()}});
      return s;
    }
  }
  return {};
}

// The reductions' public functions take dims and keepdim, and the list's max/min are reached
// through amax/amin and max(x, dim), so their rows are written out in build(); each ReduceOp
// names the rows that run its kernel, looked up by enumerator like the traits above.
namespace reduce_rows {
constexpr const char* Sum[] = {"sum", "sum_dim", "mean", "var", "std"};
constexpr const char* Max[] = {"amax", "max_dim"};
constexpr const char* Min[] = {"amin", "min_dim"};
}  // namespace reduce_rows

std::vector<OpInfo> build() {
  std::vector<OpInfo> r;
  auto kernel_row = [&](const char* name, Fn fn, std::function<Samples(Generator&, DType)> samples,
                        const KernelRowTraits& k) {
    r.push_back(op(name, k.category, std::move(fn), std::move(samples), k.differentiable, k.double_backward));
  };
  // ---- elementwise: one row per kernel op code ----
#define GS_UNARY_ROW(e, name)                                             \
  kernel_row(                                                             \
      #name, [](const tensor_list& x) { return gradsleuth::name(x[0]); }, \
      [](Generator& g, DType t) { return unary_kernel_samples(unary_traits::e, g, t); }, unary_traits::e);
#define GS_BINARY_ROW(e, name)                                                  \
  kernel_row(                                                                   \
      #name, [](const tensor_list& x) { return gradsleuth::name(x[0], x[1]); }, \
      [](Generator& g, DType t) { return binary_kernel_samples(binary_traits::e, g, t); }, binary_traits::e);
  GS_UNARY_OPS(GS_UNARY_ROW)
  GS_BINARY_OPS(GS_BINARY_ROW)
#undef GS_UNARY_ROW
#undef GS_BINARY_ROW

  // ---- elementwise ops whose public function takes more than tensors, or that compose kernels ----
  r.push_back(op(
      "pow_scalar", "elementwise", [](const tensor_list& x) { return pow(x[0], 2.5); },
      [](Generator& g, DType t) { return unary_samples(g, t, 0.5, 1.5); }));
  r.push_back(op(
      "clamp", "elementwise", [](const tensor_list& x) { return clamp(x[0], -0.5, 0.5); },
      [](Generator& g, DType t) {
        // keep values away from the clamp edges, where the derivative jumps
        Tensor v = away_from_zero(g, {3, 4}, t) * 0.9;
        return Samples{{"(3,4)", {where(abs(abs(v) - 0.5) < 0.05, v * 0.5, v)}}};
      }));
  r.push_back(op(
      "leaky_relu", "elementwise", [](const tensor_list& x) { return leaky_relu(x[0], 0.1); },
      [](Generator& g, DType t) {
        return Samples{{"(3,4) away from 0", {away_from_zero(g, {3, 4}, t)}}};
      }));
  r.push_back(op(
      "gelu", "elementwise", [](const tensor_list& x) { return gelu(x[0]); },
      [](Generator& g, DType t) { return unary_samples(g, t, -2, 2); }));
  r.push_back(op(
      "softplus", "elementwise", [](const tensor_list& x) { return softplus(x[0]); },
      [](Generator& g, DType t) { return unary_samples(g, t, -3, 3); }));
  r.push_back(op(
      "where", "elementwise", [](const tensor_list& x) { return where(x[0] > 0.0, x[1], x[2]); },
      [](Generator& g, DType t) {
        return Samples{{"broadcast cond (3,4), a (3,1), b (4)",
                        {away_from_zero(g, {3, 4}, t), rnd(g, {3, 1}, t), rnd(g, {4}, t)}}};
      }));
  r.push_back(op(
      "masked_fill", "elementwise", [](const tensor_list& x) { return masked_fill(x[0], x[1] > 0.0, 2.0); },
      [](Generator& g, DType t) {
        return Samples{{"(3,4) mask (4)", {rnd(g, {3, 4}, t), away_from_zero(g, {4}, t)}}};
      }));
  // A float32 round trip rounds x (spacing ~1e-7 near 1, vs eps = 1e-6), so central
  // differences through it are noise. Straight-through instead: the values are x
  // exactly, while autograd's path runs through both casts' backward.
  r.push_back(op(
      "to_dtype", "elementwise",
      [](const tensor_list& x) {
        Tensor r = to_dtype(to_dtype(x[0], kFloat32), x[0].dtype());
        return (r + (x[0] - r).detach()) * 3.0;
      },
      [](Generator& g, DType t) { return unary_samples(g, t, -1, 1); }));

  // ---- reductions ----
  auto red = [&](std::string name, Fn fn, bool distinct_values = false, bool dbl = true) {
    r.push_back(op(
        name, "reduction", fn,
        [distinct_values](Generator& g, DType t) {
          auto mk = [&](const Shape& s) { return distinct_values ? distinct(g, s, t) : rnd(g, s, t); };
          Tensor nc = mk({4, 3}).t();
          return Samples{{"(2,3,4)", {mk({2, 3, 4})}}, {"non-contiguous (3,4)", {nc}}};
        },
        true, dbl));
  };
  red("sum", [](const tensor_list& x) { return sum(x[0]); });
  red("sum_dim", [](const tensor_list& x) { return sum(x[0], {0, -1}, true); });
  red("mean", [](const tensor_list& x) { return mean(x[0], {1}); });
  red(
      "amax", [](const tensor_list& x) { return amax(x[0], {-1}); }, true);
  red(
      "amin", [](const tensor_list& x) { return amin(x[0]); }, true);
  red(
      "max_dim", [](const tensor_list& x) { return max(x[0], 1); }, true);
  red(
      "min_dim", [](const tensor_list& x) { return min(x[0], 0, true); }, true);
  red("var", [](const tensor_list& x) { return var(x[0], {-1}); });
  red("std", [](const tensor_list& x) { return std(x[0], {0}, false); });
  red("softmax", [](const tensor_list& x) { return softmax(x[0], -1) * softmax(x[0], 0); });
  red("log_softmax", [](const tensor_list& x) { return log_softmax(x[0], -1) + log_softmax(x[0], 0); });
  red("logsumexp", [](const tensor_list& x) { return logsumexp(x[0], {-1}); });
  r.push_back(op(
      "argmax", "reduction", [](const tensor_list& x) { return argmax(x[0], 1); },
      [](Generator& g, DType t) {
        return Samples{{"(3,4)", {distinct(g, {3, 4}, t)}}};
      },
      false, false));
  r.push_back(op(
      "argmin", "reduction", [](const tensor_list& x) { return argmin(x[0]); },
      [](Generator& g, DType t) {
        return Samples{{"(3,4)", {distinct(g, {3, 4}, t)}}};
      },
      false, false));

  // ---- linear algebra ----
  r.push_back(op(
      "matmul", "linalg", [](const tensor_list& x) { return matmul(x[0], x[1]); },
      [](Generator& g, DType t) {
        return Samples{{"(3,4)@(4,2)", {rnd(g, {3, 4}, t), rnd(g, {4, 2}, t)}},
                       {"transposed (3,4)@(4,2)", {noncontig(g, {3, 4}, t), noncontig(g, {4, 2}, t)}},
                       {"batched broadcast (2,3,4)@(4,2)", {rnd(g, {2, 3, 4}, t), rnd(g, {4, 2}, t)}},
                       {"batched (2,1,3,4)@(3,4,2)", {rnd(g, {2, 1, 3, 4}, t), rnd(g, {3, 4, 2}, t)}},
                       {"vector (4)@(4,2)", {rnd(g, {4}, t), rnd(g, {4, 2}, t)}},
                       {"(3,4)@vector (4)", {rnd(g, {3, 4}, t), rnd(g, {4}, t)}},
                       {"dot (4)@(4)", {rnd(g, {4}, t), rnd(g, {4}, t)}}};
      }));
  r.push_back(op(
      "linear", "linalg", [](const tensor_list& x) { return linear(x[0], x[1], x[2]); },
      [](Generator& g, DType t) {
        return Samples{{"x (5,4), W (3,4), b (3)", {rnd(g, {5, 4}, t), rnd(g, {3, 4}, t), rnd(g, {3}, t)}}};
      }));

  // ---- views ----
  auto view_op = [&](std::string name, Fn fn, Shape s) {
    r.push_back(op(name, "view", fn, [s](Generator& g, DType t) {
      return Samples{{"contiguous " + shape_str(s), {rnd(g, s, t)}}};
    }));
  };
  view_op("view", [](const tensor_list& x) { return x[0].view({4, 6}); }, {2, 3, 4});
  r.push_back(op(
      "reshape", "view", [](const tensor_list& x) { return x[0].reshape({-1}); },
      [](Generator& g, DType t) {
        return Samples{{"non-contiguous (4,3)", {noncontig(g, {4, 3}, t)}}};
      }));
  view_op("flatten", [](const tensor_list& x) { return x[0].flatten(1); }, {2, 3, 4});
  view_op("transpose", [](const tensor_list& x) { return x[0].transpose(0, 2); }, {2, 3, 4});
  view_op("permute", [](const tensor_list& x) { return x[0].permute({2, 0, 1}); }, {2, 3, 4});
  view_op("narrow", [](const tensor_list& x) { return x[0].narrow(1, 1, 2); }, {2, 3, 4});
  view_op("slice", [](const tensor_list& x) { return x[0].slice(2, 0, 4, 2); }, {2, 3, 4});
  view_op("select", [](const tensor_list& x) { return x[0].select(0, 1); }, {2, 3, 4});
  view_op("expand", [](const tensor_list& x) { return x[0].expand({2, 3, 4}); }, {3, 1});
  view_op("squeeze", [](const tensor_list& x) { return x[0].squeeze(); }, {2, 1, 4});
  view_op("unsqueeze", [](const tensor_list& x) { return x[0].unsqueeze(1); }, {2, 4});
  r.push_back(op(
      "contiguous", "view", [](const tensor_list& x) { return x[0].contiguous(); },
      [](Generator& g, DType t) {
        return Samples{{"non-contiguous (4,3)", {noncontig(g, {4, 3}, t)}}};
      }));
  view_op("clone", [](const tensor_list& x) { return x[0].clone(); }, {3, 2});

  // ---- indexing and joining ----
  r.push_back(op(
      "gather", "indexing", [](const tensor_list& x) { return gather(x[0], 1, x[1]); },
      [](Generator& g, DType t) {
        return Samples{{"(3,4) idx (3,2)", {rnd(g, {3, 4}, t), randint(0, 4, {3, 2}, kInt64, &g)}}};
      }));
  r.push_back(op(
      "index_select", "indexing", [](const tensor_list& x) { return index_select(x[0], 0, x[1]); },
      [](Generator& g, DType t) {
        return Samples{{"(4,3) idx [2,0,2]", {rnd(g, {4, 3}, t), tensor(std::vector<int64_t>{2, 0, 2}, {3})}}};
      }));
  r.push_back(op(
      "embedding", "indexing", [](const tensor_list& x) { return embedding(x[0], x[1]); },
      [](Generator& g, DType t) {
        return Samples{{"V=5 D=3, idx (2,2)", {rnd(g, {5, 3}, t), tensor(std::vector<int64_t>{1, 4, 1, 0}, {2, 2})}}};
      }));
  r.push_back(op(
      "cat", "indexing",
      [](const tensor_list& x) {
        return cat({x[0], x[1]}, 1);
      },
      [](Generator& g, DType t) {
        return Samples{{"(2,3)+(2,2) dim 1", {rnd(g, {2, 3}, t), noncontig(g, {2, 2}, t)}}};
      }));
  r.push_back(op(
      "stack", "indexing",
      [](const tensor_list& x) {
        return stack({x[0], x[1]}, 0);
      },
      [](Generator& g, DType t) {
        return Samples{{"2x(2,3)", {rnd(g, {2, 3}, t), rnd(g, {2, 3}, t)}}};
      }));
  r.push_back(op(
      "split", "indexing",
      [](const tensor_list& x) {
        auto p = split(x[0], 2, 1);
        return p[0] * 2.0 + p[1].sum({1}, true);
      },
      [](Generator& g, DType t) {
        return Samples{{"(3,4)", {rnd(g, {3, 4}, t)}}};
      }));

  // ---- convolution, pooling, dropout ----
  r.push_back(op(
      "conv2d", "nn",
      [](const tensor_list& x) {
        return conv2d(x[0], x[1], x[2], {1, 1}, {1, 1});
      },
      [](Generator& g, DType t) {
        return Samples{
            {"x (2,2,5,5) w (3,2,3,3) pad 1", {rnd(g, {2, 2, 5, 5}, t), rnd(g, {3, 2, 3, 3}, t), rnd(g, {3}, t)}}};
      }));
  r.push_back(op(
      "conv2d_strided_grouped", "nn",
      [](const tensor_list& x) {
        return conv2d(x[0], x[1], Tensor(), {2, 2}, {1, 1}, {2, 2}, 2);
      },
      [](Generator& g, DType t) {
        return Samples{
            {"x (1,4,7,7) w (4,2,3,3) stride 2 dil 2 groups 2", {rnd(g, {1, 4, 7, 7}, t), rnd(g, {4, 2, 3, 3}, t)}}};
      }));
  r.push_back(op(
      "max_pool2d", "nn",
      [](const tensor_list& x) {
        return max_pool2d(x[0], {2, 2});
      },
      [](Generator& g, DType t) {
        return Samples{{"(2,2,4,4)", {distinct(g, {2, 2, 4, 4}, t)}}};
      }));
  r.push_back(op(
      "avg_pool2d", "nn",
      [](const tensor_list& x) {
        return avg_pool2d(x[0], {3, 3}, {2, 2}, {1, 1});
      },
      [](Generator& g, DType t) {
        return Samples{{"(1,2,5,5) k3 s2 p1", {rnd(g, {1, 2, 5, 5}, t)}}};
      }));
  r.push_back(op(
      "dropout", "nn",
      [](const tensor_list& x) {
        Generator fixed(7);  // the same mask on every call, so numeric differences are meaningful
        return dropout(x[0], 0.3, true, &fixed);
      },
      [](Generator& g, DType t) {
        return Samples{{"(4,5)", {rnd(g, {4, 5}, t)}}};
      }));

  // ---- in-place ops (differentiated through a clone) ----
  auto inplace = [&](std::string name, std::function<void(Tensor&, const tensor_list&)> f, int n_inputs) {
    r.push_back(op(
        name, "inplace",
        [f](const tensor_list& x) {
          Tensor y = x[0] * 1.0;  // a non-leaf that may be modified in place
          f(y, x);
          return y;
        },
        [n_inputs](Generator& g, DType t) {
          tensor_list in{away_from_zero(g, {3, 4}, t)};
          if (n_inputs > 1) in.push_back(away_from_zero(g, {4}, t));
          return Samples{{n_inputs > 1 ? "(3,4) with (4)" : "(3,4)", in}};
        }));
  };
  inplace(
      "add_", [](Tensor& y, const tensor_list& x) { y.add_(x[1], 0.5); }, 2);
  inplace(
      "mul_", [](Tensor& y, const tensor_list& x) { y.mul_(x[1]); }, 2);
  inplace(
      "div_", [](Tensor& y, const tensor_list& x) { y.div_(x[1]); }, 2);
  inplace(
      "relu_", [](Tensor& y, const tensor_list&) { y.relu_(); }, 1);
  inplace(
      "clamp_", [](Tensor& y, const tensor_list&) { y.clamp_(-0.8, 0.8); }, 1);
  inplace(
      "copy_", [](Tensor& y, const tensor_list& x) { y.copy_(x[1]); }, 2);
  inplace(
      "masked_fill_", [](Tensor& y, const tensor_list& x) { y.masked_fill_(x[0] > 0.0, 0.0); }, 1);
  return r;
}

}  // namespace

const std::vector<OpInfo>& op_registry() {
  static const std::vector<OpInfo> table = build();
  return table;
}

std::vector<std::string> registry_rows_of(UnaryOp op) { return {unary_op_name(op)}; }
std::vector<std::string> registry_rows_of(BinaryOp op) { return {binary_op_name(op)}; }
std::vector<std::string> registry_rows_of(ReduceOp op) {
  switch (op) {
#define GS_REDUCE_ROWS(e, name) \
  case ReduceOp::e: return {std::begin(reduce_rows::e), std::end(reduce_rows::e)};
    GS_REDUCE_OPS(GS_REDUCE_ROWS)
#undef GS_REDUCE_ROWS
    case ReduceOp::kCount: break;
  }
  return {};
}

const OpInfo* find_op(std::string_view name) {
  for (const OpInfo& o : op_registry())
    if (o.name == name) return &o;
  return nullptr;
}

}  // namespace gradsleuth
