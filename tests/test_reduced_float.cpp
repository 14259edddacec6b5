// float16 and bfloat16: the conversions' bit patterns, promotion, every registry op and its
// gradients against float64 on the same rounded inputs, the edges (65504, subnormals, far-apart
// logits), the losses, and model.to(dtype). docs/dtypes.md states the tolerance rule checked here.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <string>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/op_registry.h"
#include "core/ops.h"
#include "nn/nn.h"
#include "optim/adam.h"
#include "optim/rmsprop.h"
#include "optim/sgd.h"
#include "tests/prop_check.h"
#include "tests/reduced_float_tolerance.h"

namespace {

using gs::DType;
using gs::Tensor;
using gs::tensor_list;

const DType kReduced[] = {gs::kFloat16, gs::kBFloat16};

using reduced_float::eps_of;

uint16_t half_bits(float f) { return gs::Half(f).bits; }
uint16_t bf16_bits(float f) { return gs::BFloat16(f).bits; }
float from_bits_f32(uint32_t b) { return std::bit_cast<float>(b); }

// The bits of a 16-bit tensor's elements.
std::vector<uint16_t> bits_of(const Tensor& t) {
  Tensor c = t.contiguous();
  std::vector<uint16_t> out(static_cast<size_t>(c.numel()));
  std::memcpy(out.data(), c.raw_data(), out.size() * 2);
  return out;
}

}  // namespace

TEST_CASE("dtype facts: names, sizes, enum values, constants") {
  CHECK(std::string(gs::dtype_name(gs::kFloat16)) == "float16");
  CHECK(std::string(gs::dtype_name(gs::kBFloat16)) == "bfloat16");
  CHECK(gs::dtype_size(gs::kFloat16) == 2);
  CHECK(gs::dtype_size(gs::kBFloat16) == 2);
  CHECK(gs::kHalf == gs::kFloat16);
  CHECK(static_cast<int>(gs::kBool) == 0);
  CHECK(static_cast<int>(gs::kFloat64) == 3);
  CHECK(static_cast<int>(gs::kFloat16) == 4);
  CHECK(static_cast<int>(gs::kBFloat16) == 5);
  CHECK(gs::is_floating(gs::kFloat16));
  CHECK(gs::is_floating(gs::kBFloat16));
  CHECK_FALSE(gs::is_integral(gs::kFloat16));
  CHECK(gs::dtype_of_v<gs::Half> == gs::kFloat16);
  CHECK(gs::dtype_of_v<gs::BFloat16> == gs::kBFloat16);
  CHECK_NOTHROW(gs::check_dtype(gs::kBFloat16, "test"));
  CHECK_THROWS_AS(gs::check_dtype(static_cast<DType>(6), "test"), gs::Error);
}

TEST_CASE("float16 conversions: known bit patterns") {
  CHECK(half_bits(1.0f) == 0x3C00);
  CHECK(half_bits(-2.0f) == 0xC000);
  CHECK(half_bits(65504.0f) == 0x7BFF);  // the largest finite float16
  CHECK(half_bits(65519.0f) == 0x7BFF);  // below the midpoint to 65536: rounds down
  CHECK(half_bits(65520.0f) == 0x7C00);  // the midpoint: to even, which is inf
  CHECK(half_bits(1e6f) == 0x7C00);      // overflow: inf
  CHECK(half_bits(-1e6f) == 0xFC00);
  CHECK(half_bits(std::ldexp(1.0f, -24)) == 0x0001);         // the smallest subnormal
  CHECK(half_bits(std::ldexp(1.0f, -14)) == 0x0400);         // the smallest normal
  CHECK(half_bits(std::ldexp(1.0f, -25)) == 0x0000);         // half the smallest subnormal: tie to even 0
  CHECK(half_bits(std::ldexp(3.0f, -26)) == 0x0001);         // above that tie: up
  CHECK(half_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);  // tie between 1 and 1+2^-10: even (1)
  CHECK(half_bits(1.0f + std::ldexp(3.0f, -11)) == 0x3C02);  // tie between 1+2^-10 and 1+2^-9: even
  CHECK(half_bits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3C01);  // past the tie
  CHECK(std::isnan(gs::to_float(gs::Half(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(gs::to_float(gs::Half(from_bits_f32(0x7F800001u)))));  // a NaN with low payload only
  CHECK(gs::to_float(gs::Half::from_bits(0x0001)) == std::ldexp(1.0f, -24));
  CHECK(gs::to_float(gs::Half::from_bits(0x7BFF)) == 65504.0f);
  CHECK(std::isinf(gs::to_float(gs::Half::from_bits(0x7C00))));
}

TEST_CASE("bfloat16 conversions: known bit patterns") {
  CHECK(bf16_bits(1.0f) == 0x3F80);
  CHECK(bf16_bits(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);  // tie between 1 and 1+2^-7: even (1)
  CHECK(bf16_bits(1.0f + std::ldexp(3.0f, -8)) == 0x3F82);  // tie between 1+2^-7 and 1+2^-6: even
  CHECK(bf16_bits(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3F81);
  CHECK(bf16_bits(std::numeric_limits<float>::max()) == 0x7F80);  // rounds past the largest: inf
  CHECK(gs::to_float(gs::BFloat16::from_bits(0x7F7F)) == from_bits_f32(0x7F7F0000u));
  CHECK(bf16_bits(from_bits_f32(0x00000001u)) == 0x0000);  // float32's smallest subnormal: to 0
  CHECK(bf16_bits(from_bits_f32(0x00010000u)) == 0x0001);  // a bfloat16 subnormal is kept
  CHECK(std::isnan(gs::to_float(gs::BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(gs::to_float(gs::BFloat16(from_bits_f32(0x7F800001u)))));  // not truncated to inf
}

TEST_CASE("tensor rounding (vectorised rows, strided rows) matches the scalar conversion bit for bit") {
  // Random bit patterns (every exponent: subnormals, near-ties, overflow to inf) and the specials.
  std::vector<float> v;
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < 40000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v.push_back(from_bits_f32(static_cast<uint32_t>(x)));
  }
  for (uint32_t b : {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7F7FFFFFu, 0x7F7F8000u, 0x7F7F7FFFu,
                     0x00008000u, 0x00018000u, 0x3F808000u, 0x3F818000u, 0x7F800001u, 0xFFC00000u, 0x00000001u})
    v.push_back(from_bits_f32(b));
  const int64_t n = static_cast<int64_t>(v.size());
  const Tensor f = gs::tensor(v, {n}, gs::kFloat32);
  const Tensor strided = gs::tensor(v, {n / 2, 2}, gs::kFloat32).t();  // rows read with stride 2
  for (DType t : kReduced) {
    INFO(std::string(gs::dtype_name(t)));
    const auto rows = bits_of(f.to(t));
    const auto cols = bits_of(strided.to(t).t().contiguous().reshape({-1}));
    int mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t want = t == gs::kFloat16 ? half_bits(v[i]) : bf16_bits(v[i]);
      const bool nan = std::isnan(v[i]);
      const auto is_nan16 = [&](uint16_t b) {
        return t == gs::kFloat16 ? std::isnan(gs::to_float(gs::Half::from_bits(b)))
                                 : std::isnan(gs::to_float(gs::BFloat16::from_bits(b)));
      };
      if (nan ? !is_nan16(rows[i]) : rows[i] != want) ++mismatches;
      if (i < n / 2 * 2 && (nan ? !is_nan16(cols[i]) : cols[i] != want)) ++mismatches;
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("tensor conversions round once, to nearest even, and back exactly") {
  const float sub = std::ldexp(1.0f, -24);
  Tensor f = gs::tensor(std::vector<float>{65504.0f, 65520.0f, sub, 1.0f + std::ldexp(1.0f, -11), -0.0f,
                                           std::numeric_limits<float>::quiet_NaN()},
                        {6}, gs::kFloat32);
  Tensor h = f.to(gs::kFloat16);
  CHECK(h.dtype() == gs::kFloat16);
  CHECK(h.element_size() == 2);
  CHECK(bits_of(h) == std::vector<uint16_t>{0x7BFF, 0x7C00, 0x0001, 0x3C00, 0x8000, bits_of(h)[5]});
  CHECK(std::isnan(h.to(gs::kFloat32).to_vector<float>()[5]));
  auto back = h.to(gs::kFloat64).to_vector<double>();
  CHECK(back[0] == 65504.0);
  CHECK(std::isinf(back[1]));
  CHECK(back[2] == std::ldexp(1.0, -24));
  // A non-contiguous source and destination, and 16-bit to 16-bit.
  Tensor m = gs::arange(0, 12, 1, gs::TensorOptions(gs::kFloat32)).reshape({3, 4}).t();
  Tensor mh = m.to(gs::kBFloat16);
  CHECK(gs::equal(mh.to(gs::kFloat32), m));
  CHECK(gs::equal(mh.to(gs::kFloat16).to(gs::kFloat32), m));
  CHECK(gs::equal(m.to(gs::kInt64).to(gs::kFloat16).to(gs::kInt64), m.to(gs::kInt64)));
  CHECK(gs::tensor({1.0, 0.0}, gs::kFloat16).to(gs::kBool).to_vector<bool>() == std::vector<bool>{true, false});
  // item(), printing, data_ptr
  CHECK(gs::scalar_tensor(0.1, gs::kFloat16).item<float>() == gs::to_float(gs::Half(0.1f)));
  CHECK(gs::scalar_tensor(3.0, gs::kBFloat16).item<double>() == 3.0);
  CHECK(gs::to_float(gs::scalar_tensor(2.5, gs::kFloat32).item<gs::Half>()) == 2.5f);
  Tensor p = gs::tensor({1.5, -2.0}, gs::kFloat16);
  CHECK(p.data_ptr<gs::Half>()[0].bits == 0x3E00);
  CHECK_THROWS_AS(p.data_ptr<float>(), gs::Error);
  std::ostringstream os;
  os << p;
  CHECK(os.str().find("1.5000") != std::string::npos);
  CHECK(os.str().find("dtype=float16") != std::string::npos);
}

TEST_CASE("promotion with float16 and bfloat16 (PyTorch's rules)") {
  using gs::promote_types;
  CHECK(promote_types(gs::kFloat16, gs::kBFloat16) == gs::kFloat32);
  CHECK(promote_types(gs::kInt64, gs::kFloat16) == gs::kFloat16);
  CHECK(promote_types(gs::kBool, gs::kBFloat16) == gs::kBFloat16);
  CHECK(promote_types(gs::kFloat16, gs::kFloat32) == gs::kFloat32);
  CHECK(promote_types(gs::kBFloat16, gs::kFloat64) == gs::kFloat64);
  CHECK(promote_types(gs::kFloat16, gs::kFloat16) == gs::kFloat16);
  Tensor h = gs::ones({3}, gs::kFloat16), b = gs::ones({3}, gs::kBFloat16);
  CHECK((h + b).dtype() == gs::kFloat32);
  CHECK((h + gs::ones({3}, gs::kFloat32)).dtype() == gs::kFloat32);
  CHECK((gs::ones({3}, gs::kInt64) + h).dtype() == gs::kFloat16);
  CHECK((h * 2.5).dtype() == gs::kFloat16);  // a floating number does not widen
  CHECK((b * 2).dtype() == gs::kBFloat16);
  CHECK((gs::ones({3}, gs::kInt64) * 2.5).dtype() == gs::kFloat32);
  CHECK((h + gs::scalar_tensor(1.0, gs::kFloat64)).dtype() == gs::kFloat16);  // a 0-dim of the same category
  CHECK((gs::ones({3}, gs::kInt64) + gs::scalar_tensor(1.0, gs::kBFloat16)).dtype() == gs::kBFloat16);
  CHECK((gs::scalar_tensor(1.0, gs::kFloat16) + gs::scalar_tensor(1.0, gs::kBFloat16)).dtype() == gs::kFloat32);
  CHECK((h / 3).dtype() == gs::kFloat16);
  CHECK(gs::can_cast(gs::kFloat32, gs::kFloat16));
  CHECK_FALSE(gs::can_cast(gs::kFloat16, gs::kInt64));
  CHECK_THROWS_AS(gs::ones({3}, gs::kInt64).add_(h), gs::Error);
  Tensor acc = gs::zeros({3}, gs::kFloat16);
  acc.add_(gs::ones({3}, gs::kFloat32), 0.5);
  CHECK(acc.dtype() == gs::kFloat16);
  CHECK(acc.to_vector<float>() == std::vector<float>{0.5f, 0.5f, 0.5f});
}

TEST_CASE("a number beside a 16-bit tensor with dims enters the arithmetic in float32, unrounded") {
  for (DType t : kReduced) {
    INFO(std::string(gs::dtype_name(t)));
    Tensor x = gs::tensor({0.001, 2.0}, t);
    const float x0 = x.to_vector<float>()[0];
    // 65536 is beyond float16's range: rounded first it would be inf and x * it inf.
    Tensor y = x * 65536.0;
    CHECK(y.dtype() == t);
    const float want =
        t == gs::kFloat16 ? gs::to_float(gs::Half(x0 * 65536.0f)) : gs::to_float(gs::BFloat16(x0 * 65536.0f));
    CHECK(y.to_vector<float>()[0] == want);
    CHECK(std::isfinite(want));
    Tensor z = x.clone();
    z.mul_(65536.0);
    CHECK(z.to_vector<float>()[0] == want);
    CHECK((65536.0 * x).to_vector<float>()[0] == want);
    // A 0-dim 16-bit tensor (a loss) too: the number stays a number in promotion.
    Tensor loss = gs::scalar_tensor(0.001, t);
    Tensor scaled = loss * 65536.0;
    CHECK(scaled.dtype() == t);
    CHECK(scaled.item<float>() == want);
    CHECK((scaled / 65536.0).item<float>() == x0);  // back exactly: a power of two
    Tensor l2 = loss.clone();
    l2.mul_(65536.0);
    CHECK(l2.item<float>() == want);
    CHECK((loss + 1).dtype() == t);
    CHECK(gs::add(loss, 1.0, 2.0).dtype() == t);
    auto round_t = [&](float v) {
      return t == gs::kFloat16 ? gs::to_float(gs::Half(v)) : gs::to_float(gs::BFloat16(v));
    };
    CHECK(gs::sub(loss, 70000.0, 0.5).item<float>() == round_t(x0 - 35000.0f));  // 70000 beyond float16 too
    // Gradients through it keep the 16-bit dtype.
    Tensor w = gs::scalar_tensor(0.5, t).requires_grad_(true);
    (w * 65536.0).backward();
    CHECK(w.grad().dtype() == t);
    CHECK(std::isinf(w.grad().item<float>()) == (t == gs::kFloat16));  // 65536 itself overflows float16
  }
}

TEST_CASE("factories and overflow checks") {
  for (DType t : kReduced) {
    INFO(std::string(gs::dtype_name(t)));
    CHECK(gs::zeros({2, 3}, t).dtype() == t);
    CHECK(gs::ones({4}, t).to_vector<float>() == std::vector<float>(4, 1.0f));
    CHECK(gs::full({}, 0.1, t).item_double() != 0.1);  // rounded
    CHECK(gs::arange(0, 5, 1, gs::TensorOptions(t)).to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4});
    Tensor r = gs::rand({4096}, t);
    CHECK(r.dtype() == t);
    CHECK(gs::amax(r).item_double() < 1.0);
    CHECK(gs::amin(r).item_double() >= 0.0);
    Tensor n = gs::randn({4096}, t);
    CHECK(std::abs(gs::mean(n.to(gs::kFloat32)).item_double()) < 0.1);
    CHECK(gs::sum(gs::isfinite(n)).item<int64_t>() == 4096);
  }
  CHECK_THROWS_AS(gs::full({2}, 70000.0, gs::kFloat16), gs::Error);
  CHECK_THROWS_AS(gs::full({2}, 100000, gs::kFloat16), gs::Error);  // an integer too
  CHECK_NOTHROW(gs::full({2}, 65519.0, gs::kFloat16));              // rounds to 65504
  CHECK_NOTHROW(gs::full({2}, 70000.0, gs::kBFloat16));
  CHECK_NOTHROW(gs::full({2}, std::numeric_limits<double>::infinity(), gs::kFloat16));
  try {
    gs::zeros({2}, gs::kFloat16).fill_(1e5);
    FAIL("fill_ accepted 1e5 into float16");
  } catch (const gs::Error& err) {
    CHECK(std::string(err.what()).find("float16") != std::string::npos);
  }
}

// ---- every registry op, float16 and bfloat16 against float64 on the same rounded inputs -------
namespace {

using reduced_float::roundings;

Tensor cast_floating(const Tensor& t, DType to) { return t.is_floating_point() ? t.to(to) : t; }

// "" when got (16-bit) matches want (float64) within k * eps normwise, with the same
// NaN/inf pattern; else what differs.
std::string compare(const Tensor& got, const Tensor& want, DType t, int k) {
  return reduced_float::compare(got, want, t, k);
}

}  // namespace

TEST_CASE("every registry op computes float16/bfloat16 like float64 on the same rounded inputs, or refuses") {
  int ops_checked = 0, grads_checked = 0;
  for (const gs::OpInfo& op : gs::op_registry()) {
    for (DType t : kReduced) {
      std::string failures;
      for (uint64_t draw = 0; draw < 4; ++draw) {  // four draws of each sample set
        gs::Generator gen(draw);
        for (gs::OpSample s : op.samples(gen, gs::kFloat64)) {
          s.label = "draw " + std::to_string(draw) + ": " + s.label;
          tensor_list in16, in64;
          for (const Tensor& x : s.inputs) {
            in16.push_back(cast_floating(x, t));
            // The rounded values, exactly, in float64 (dropout: float32, whose mask a 16-bit x shares).
            in64.push_back(cast_floating(in16.back(), op.name == "dropout" ? gs::kFloat32 : gs::kFloat64));
          }
          Tensor got, want;
          try {
            got = op.fn(in16);
          } catch (const gs::Error& e) {
            const std::string msg = e.what();
            if (msg.find(op.name) == std::string::npos || msg.find(gs::dtype_name(t)) == std::string::npos)
              failures += "[" + s.label + "] refused without naming the op and dtype: " + msg + "\n";
            continue;
          }
          want = op.fn(in64);
          const DType expect = want.is_floating_point() ? t : want.dtype();
          if (got.dtype() != expect) {
            failures +=
                "[" + s.label + "] gave " + gs::dtype_name(got.dtype()) + ", expected " + gs::dtype_name(expect) + "\n";
            continue;
          }
          if (std::string d = compare(got, want, t, roundings(op.name)); !d.empty())
            failures += "[" + s.label + "] " + d + "\n";
          ++ops_checked;
          if (!op.differentiable) continue;
          // Gradients: a weighted sum of the output (weights exact in t), backward in both dtypes.
          tensor_list g16, g64;
          for (size_t i = 0; i < in16.size(); ++i) {
            g16.push_back(in16[i].is_floating_point() ? in16[i].detach().requires_grad_(true) : in16[i]);
            g64.push_back(in64[i].is_floating_point() ? in64[i].detach().requires_grad_(true) : in64[i]);
          }
          Tensor o16 = op.fn(g16), o64 = op.fn(g64);
          Tensor w = gs::rand(o16.shape(), gs::TensorOptions(t), &gen) + 0.5;
          gs::sum(o16 * w).backward();
          gs::sum(o64 * w.to(o64.dtype())).backward();
          for (size_t i = 0; i < g16.size(); ++i) {
            if (!g16[i].is_floating_point()) continue;
            Tensor a = g16[i].grad(), b = g64[i].grad();
            if (!a.defined() || !b.defined()) {
              if (a.defined() != b.defined()) failures += "[" + s.label + "] gradient defined in one dtype only\n";
              continue;
            }
            if (a.dtype() != t) failures += "[" + s.label + "] gradient is " + gs::dtype_name(a.dtype()) + "\n";
            if (std::string d = compare(a, b, t, 2 * roundings(op.name) + 2); !d.empty())
              failures += "[" + s.label + "] gradient of input " + std::to_string(i) + ": " + d + "\n";
            ++grads_checked;
          }
        }
      }
      INFO("op: ", op.name, " dtype: ", std::string(gs::dtype_name(t)), "\n", failures);
      CHECK(failures.empty());
    }
  }
  CHECK(ops_checked > 100);
  CHECK(grads_checked > 100);
}

TEST_CASE("every registry op computes float16/bfloat16 like float64 on property-drawn inputs, or refuses") {
  // Drawn from each op's whole domain (tests/prop_gen.h): values near the dtype's max, subnormals,
  // spreads over its whole range, logits thousands apart, odd and prime sizes, views, asymmetric
  // conv/pool geometry. A failure names the draw and the smallest failing case found by halving.
  const char* env = std::getenv("GRADSLEUTH_PROP_SEED");
  const uint64_t seed = env ? std::strtoull(env, nullptr, 10) : 1;
  for (const gs::OpInfo& op : gs::op_registry())
    for (DType t : kReduced) {
      const std::string failure = proptest::check_op(op, seed, 15, t, roundings(op.name));
      INFO("op: ", op.name, " dtype: ", std::string(gs::dtype_name(t)), " (run seed ", seed, ")\n", failure);
      CHECK(failure.empty());
    }
}

TEST_CASE("edges: values near 65504, subnormals, far-apart logits") {
  const Tensor big = gs::tensor({60000.0, 65504.0, -65504.0}, gs::kFloat16);
  CHECK((big + 0.0).to_vector<float>() == std::vector<float>{60000.0f, 65504.0f, -65504.0f});
  auto twice = (big * 2.0).to_vector<float>();
  CHECK(std::isinf(twice[1]));
  CHECK(twice[1] > 0);
  CHECK(twice[2] < 0);
  // The mean sums in float32: finite where the float16 sum is not.
  const Tensor pair = gs::tensor({65504.0, 65504.0}, gs::kFloat16);
  CHECK(std::isinf(gs::sum(pair).item<float>()));
  CHECK(gs::mean(pair).item<float>() == 65504.0f);
  CHECK(gs::var(gs::tensor({65504.0, 65504.0, 65504.0}, gs::kFloat16)).item<float>() == 0.0f);
  CHECK(gs::amax(big).item<float>() == 65504.0f);
  // bfloat16 keeps float32's range.
  CHECK(gs::sum(pair.to(gs::kBFloat16)).item<float>() == 131072.0f);  // 131008 rounded to 8 bits

  // Subnormals are kept through ops, not flushed.
  const double tiny = std::ldexp(1.0, -24);
  Tensor sub = gs::tensor({tiny, 3 * tiny, -tiny}, gs::kFloat16);
  CHECK(sub.to_vector<float>() == std::vector<float>{float(tiny), float(3 * tiny), float(-tiny)});
  CHECK((sub * 2.0).to_vector<float>() == std::vector<float>{float(2 * tiny), float(6 * tiny), float(-2 * tiny)});
  CHECK(gs::sum(sub).item<float>() == float(3 * tiny));
  CHECK((sub * 0.5).to_vector<float>()[1] == float(2 * tiny));  // 1.5 ulp: tie to even (2)
  Tensor bsub = gs::tensor({std::ldexp(1.0, -130)}, gs::kBFloat16);
  CHECK(bsub.item<double>() == std::ldexp(1.0, -130));

  // Softmax family and cross-entropy on logits thousands apart: computed in float32, no overflow.
  for (DType t : kReduced) {
    INFO(std::string(gs::dtype_name(t)));
    Tensor logits = gs::tensor({-3000.0, 0.0, 3000.0, 1000.0, 1000.0, -1000.0}, {2, 3}, t);
    Tensor sm = gs::softmax(logits, -1);
    CHECK(sm.dtype() == t);
    CHECK(sm.to_vector<float>() == std::vector<float>{0, 0, 1, 0.5f, 0.5f, 0});
    Tensor lsm = gs::log_softmax(logits, -1).to(gs::kFloat64);
    auto l = lsm.to_vector<double>();
    CHECK(l[2] == 0.0);
    CHECK(std::isfinite(l[0]));
    CHECK(l[0] == doctest::Approx(-6000.0).epsilon(2 * eps_of(t)));
    CHECK(l[3] == doctest::Approx(-std::log(2.0)).epsilon(eps_of(t)));
    // 3000 itself rounds in bfloat16 (to 3008): the row's max, as stored, comes out.
    CHECK(gs::logsumexp(logits, {-1}).to_vector<float>()[0] == gs::amax(logits).item<float>());
    Tensor target = gs::tensor(std::vector<int64_t>{2, 0}, {2});
    Tensor ce = gs::nn::functional::cross_entropy(logits, target);
    CHECK(ce.dtype() == t);
    CHECK(ce.item<double>() == doctest::Approx(std::log(2.0) / 2).epsilon(2 * eps_of(t)));
    Tensor miss = gs::nn::functional::cross_entropy(logits, gs::tensor(std::vector<int64_t>{0, 2}, {2}));
    CHECK(std::isfinite(miss.item<double>()));  // 6000 and 2000-ish: finite in both
    CHECK(miss.item<double>() == doctest::Approx((6000.0 + 2000.0 + std::log(2.0)) / 2).epsilon(2 * eps_of(t)));
  }
}

TEST_CASE("losses and their gradients in float16/bfloat16") {
  gs::Generator gen(3);
  for (DType t : kReduced) {
    INFO(std::string(gs::dtype_name(t)));
    Tensor x64 = gs::randn({4, 5}, gs::kFloat64, &gen).to(t).to(gs::kFloat64);
    Tensor y64 = gs::rand({4, 5}, gs::kFloat64, &gen).to(t).to(gs::kFloat64);
    Tensor target = gs::tensor(std::vector<int64_t>{0, 4, 2, 1}, {4});
    struct Loss {
      const char* name;
      std::function<Tensor(const Tensor&, const Tensor&)> f;
    };
    const Loss losses[] = {
        {"mse", [&](const Tensor& x, const Tensor& y) { return gs::nn::functional::mse_loss(x, y); }},
        {"cross_entropy", [&](const Tensor& x, const Tensor&) { return gs::nn::functional::cross_entropy(x, target); }},
        {"nll",
         [&](const Tensor& x, const Tensor&) { return gs::nn::functional::nll_loss(gs::log_softmax(x, 1), target); }},
        {"bce",
         [&](const Tensor& x, const Tensor& y) { return gs::nn::functional::binary_cross_entropy(gs::sigmoid(x), y); }},
        {"bce_with_logits",
         [&](const Tensor& x, const Tensor& y) { return gs::nn::functional::binary_cross_entropy_with_logits(x, y); }},
    };
    for (const Loss& L : losses) {
      INFO(std::string(L.name));
      Tensor a = x64.to(t).requires_grad_(true), b = x64.detach().requires_grad_(true);
      Tensor la = L.f(a, y64.to(t)), lb = L.f(b, y64);
      CHECK(la.dtype() == t);
      CHECK(compare(la, lb, t, 4) == "");
      la.backward();
      lb.backward();
      CHECK(a.grad().dtype() == t);
      CHECK(compare(a.grad(), b.grad(), t, 8) == "");
    }
  }
}

TEST_CASE("model.to(bfloat16) converts parameters and buffers; a step trains in it") {
  gs::manual_seed(1);
  gs::nn::Sequential model(std::make_shared<gs::nn::Linear>(4, 3), std::make_shared<gs::nn::ReLU>(),
                           std::make_shared<gs::nn::Linear>(3, 2));
  model.to(gs::kBFloat16);
  for (const auto& [name, p] : model.named_parameters()) {
    INFO(name);
    CHECK(p.dtype() == gs::kBFloat16);
    CHECK(p.requires_grad());
  }
  Tensor x = gs::randn({5, 4}, gs::kBFloat16);
  Tensor loss = gs::nn::functional::mse_loss(model.forward(x), gs::zeros({5, 2}, gs::kBFloat16));
  CHECK(loss.dtype() == gs::kBFloat16);
  loss.backward();
  for (const auto& [name, p] : model.named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == gs::kBFloat16);
  }
  gs::nn::BatchNorm1d bn(3);
  bn.to(gs::kFloat16);
  for (const auto& [name, b] : bn.named_buffers())
    if (b.is_floating_point()) {
      INFO(name);
      CHECK(b.dtype() == gs::kFloat16);
    }
  CHECK(bn.forward(gs::randn({4, 3}, gs::kFloat16)).dtype() == gs::kFloat16);
  model.to(gs::kFloat32);
  for (const auto& [name, p] : model.named_parameters()) CHECK(p.dtype() == gs::kFloat32);
}

TEST_CASE("SGD, Adam and RMSprop step float16/bfloat16 parameters like float32, rounded") {
  for (DType t : kReduced) {
    INFO(std::string(gs::dtype_name(t)));
    for (int which = 0; which < 6; ++which) {
      const bool fused = which < 3;  // then the tensor-op reference path (set_fused(false))
      const std::string what =
          std::string(which % 3 == 0 ? "SGD" : which % 3 == 1 ? "Adam" : "RMSprop") + (fused ? "" : ", reference");
      INFO(what);
      gs::Generator gen(5);
      const Tensor init = gs::randn({4, 3}, gs::kFloat32, &gen).to(t);
      const Tensor grad = gs::randn({4, 3}, gs::kFloat32, &gen).to(t);
      Tensor p16 = init.clone().requires_grad_(true), p32 = init.to(gs::kFloat32).requires_grad_(true);
      std::unique_ptr<gs::optim::Optimizer> o16, o32;
      if (which % 3 == 0) {
        o16 = std::make_unique<gs::optim::SGD>(std::vector<Tensor>{p16}, gs::optim::SGDOptions(0.1).momentum(0.9));
        o32 = std::make_unique<gs::optim::SGD>(std::vector<Tensor>{p32}, gs::optim::SGDOptions(0.1).momentum(0.9));
      } else if (which % 3 == 2) {
        o16 = std::make_unique<gs::optim::RMSprop>(std::vector<Tensor>{p16},
                                                   gs::optim::RMSpropOptions(0.01).momentum(0.5).centered(true));
        o32 = std::make_unique<gs::optim::RMSprop>(std::vector<Tensor>{p32},
                                                   gs::optim::RMSpropOptions(0.01).momentum(0.5).centered(true));
      } else {
        o16 = std::make_unique<gs::optim::Adam>(std::vector<Tensor>{p16}, gs::optim::AdamOptions(0.01));
        o32 = std::make_unique<gs::optim::Adam>(std::vector<Tensor>{p32}, gs::optim::AdamOptions(0.01));
      }
      o16->set_fused(fused);
      o32->set_fused(fused);
      for (int step = 0; step < 3; ++step) {
        p16.set_grad(grad.clone());
        p32.set_grad(grad.to(gs::kFloat32));
        o16->step();
        o32->step();
      }
      CHECK(p16.dtype() == t);
      CHECK(!gs::equal(p16.detach(), init));  // it moved
      // Each step rounds p (and the state) to 16 bits: three steps, a few roundings each.
      CHECK(compare(p16, p32, t, 6) == "");
    }
  }
}
