// The CUDA backend family by family on strided, broadcast, empty, bool and int64 operands (each
// compared with the CPU backend), device moves and their errors, the caching allocator, the
// Philox streams (same seed, same numbers on both devices), and a small training run.
#include "tests/cuda/cuda_test_util.h"

#include <sstream>

#include "debug/checks/workflow/memory.h"
#include "nn/activation.h"
#include "nn/container.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "optim/sgd.h"

using gs::kCPU;
using gs::kCUDA;
using gs::Tensor;

namespace {

// f(device) on both devices must agree (inputs are made inside f, on the device given).
template <class F>
void same_on_both(F f) {
  const Tensor c = f(kCPU);
  const Tensor d = f(kCUDA);
  CHECK(d.is_cuda());
  const std::string m = cuda_test::compare(d, c);
  INFO(m);
  CHECK(m.empty());
}

Tensor seq(const gs::Shape& s, gs::DType t, gs::Device d, double scale = 0.25) {
  return (gs::arange(0, static_cast<double>(gs::numel_of(s)), 1, gs::TensorOptions(gs::kFloat64).device(d)) * scale -
          1.0)
      .reshape(s)
      .to(t);
}

}  // namespace

// ---- memory ----------------------------------------------------------------
TEST_CASE("round trip cpu -> cuda -> cpu keeps values, dtype and shape for every dtype") {
  for (gs::DType t : {gs::kBool, gs::kInt64, gs::kFloat32, gs::kFloat64}) {
    Tensor c = seq({3, 5}, t, kCPU);
    Tensor d = c.to(kCUDA);
    CHECK(d.is_cuda());
    CHECK(d.dtype() == t);
    CHECK(gs::equal(d.cpu(), c));
  }
}
TEST_CASE("copy with dtype cast over a transposed view") {
  same_on_both([](gs::Device d) { return seq({4, 3}, gs::kFloat64, d).t().to(gs::kFloat32).contiguous(); });
  same_on_both([](gs::Device d) { return seq({4, 3}, gs::kFloat32, d).t().to(gs::kInt64); });
  same_on_both([](gs::Device d) { return seq({4, 3}, gs::kFloat32, d).to(gs::kBool); });
}
TEST_CASE("fill, zeros, ones, full, eye and arange honour the device option") {
  const auto o = gs::TensorOptions(gs::kFloat32).device(kCUDA);
  CHECK(gs::zeros({2, 3}, o).is_cuda());
  CHECK(gs::full({2, 2}, 2.5, o).sum().item<float>() == 10.0f);
  same_on_both([](gs::Device d) { return gs::eye(4, gs::TensorOptions(gs::kFloat64).device(d)); });
  same_on_both([](gs::Device d) { return gs::arange(-3, 7, 0.5, gs::TensorOptions(gs::kFloat32).device(d)); });
  same_on_both([](gs::Device d) { return gs::linspace(0, 1, 7, gs::TensorOptions(gs::kFloat64).device(d)); });
  CHECK(gs::tensor({1, 2, 3}, gs::TensorOptions().device(kCUDA)).is_cuda());
  float v[4] = {1, 2, 3, 4};
  CHECK(gs::from_blob(v, {4}, gs::TensorOptions().device(kCUDA)).is_cuda());
}
TEST_CASE("fill_ and zero_ on a strided device view") {
  same_on_both([](gs::Device d) {
    Tensor t = gs::zeros({4, 4}, gs::TensorOptions(gs::kFloat32).device(d));
    t.slice(1, 0, 4, 2).fill_(3.0);
    return t;
  });
}
TEST_CASE("empty tensors on the device") {
  Tensor e = gs::zeros({0, 3}, gs::TensorOptions().device(kCUDA));
  CHECK(e.numel() == 0);
  CHECK((e + 1).numel() == 0);
  CHECK(e.sum().item<float>() == 0.0f);
  CHECK(e.cpu().numel() == 0);
}

// ---- elementwise -------------------------------------------------------------
TEST_CASE("unary ops on a non-contiguous float64 view") {
  for (auto f : {+[](const Tensor& x) { return x.exp(); }, +[](const Tensor& x) { return x.tanh(); },
                 +[](const Tensor& x) { return x.sigmoid(); }, +[](const Tensor& x) { return x.abs().sqrt(); },
                 +[](const Tensor& x) { return x.sign(); }, +[](const Tensor& x) { return x.relu(); },
                 +[](const Tensor& x) { return gs::erf(x); }, +[](const Tensor& x) { return gs::log1p(x.abs()); }})
    same_on_both([&](gs::Device d) { return f(seq({5, 4}, gs::kFloat64, d).t()); });
}
TEST_CASE("binary ops broadcast (3,1) with (1,4)") {
  same_on_both([](gs::Device d) { return seq({3, 1}, gs::kFloat32, d) + seq({1, 4}, gs::kFloat32, d); });
  same_on_both([](gs::Device d) { return seq({3, 1}, gs::kFloat64, d) * seq({1, 4}, gs::kFloat64, d); });
  same_on_both([](gs::Device d) { return seq({3, 1}, gs::kFloat64, d).pow(seq({1, 4}, gs::kFloat64, d).abs()); });
  same_on_both([](gs::Device d) { return seq({3, 1}, gs::kFloat32, d).maximum(seq({1, 4}, gs::kFloat32, d)); });
}
TEST_CASE("int64 arithmetic and comparisons") {
  same_on_both([](gs::Device d) { return seq({2, 6}, gs::kInt64, d, 3.0) * 3 + 1; });
  same_on_both([](gs::Device d) { return seq({2, 6}, gs::kInt64, d, 3.0) < seq({6}, gs::kInt64, d, 2.0); });
}
TEST_CASE("int64 overflow wraps on the device as on the cpu; negative integer powers are refused before launch") {
  const std::vector<int64_t> a = {INT64_MAX, INT64_MIN, 3, -2}, b = {1, -1, 40, 63};
  for (gs::Device d : {gs::kCPU, gs::kCUDA}) {
    CAPTURE(d);
    gs::Tensor x = gs::tensor(a, {4}).to(d), y = gs::tensor(b, {4}).to(d);
    CHECK((x + y).to_vector<int64_t>() == std::vector<int64_t>{INT64_MIN, INT64_MAX, 43, 61});
    CHECK((x * y).to_vector<int64_t>() == std::vector<int64_t>{INT64_MAX, INT64_MIN, 120, -126});
    CHECK((-x).to_vector<int64_t>() == std::vector<int64_t>{-INT64_MAX, INT64_MIN, -3, 2});
    CHECK(x.sum().item<int64_t>() == INT64_MAX + INT64_MIN + 1);
    CHECK(gs::pow(x.narrow(0, 2, 2), gs::tensor(std::vector<int64_t>{40, 63}, {2}).to(d)).to_vector<int64_t>() ==
          (gs::pow(gs::tensor(std::vector<int64_t>{3, -2}, {2}), gs::tensor(std::vector<int64_t>{40, 63}, {2})))
              .to_vector<int64_t>());
    try {
      (void)gs::pow(x, gs::tensor(std::vector<int64_t>{1, 2, -3, 0}, {4}).to(d));
      FAIL("pow with a negative int64 exponent did not throw");
    } catch (const gs::Error& e) {
      CHECK(std::string(e.what()).find("negative integer powers are not allowed") != std::string::npos);
    }
  }
}
TEST_CASE("type promotion (result_type, decided before dispatch) gives the same dtypes and values on both devices") {
  auto on = [](gs::DType t, gs::Device d) { return gs::TensorOptions(t).device(d); };
  same_on_both([](gs::Device d) { return seq({2, 3}, gs::kInt64, d, 3.0) * 2.5; });     // float32
  same_on_both([](gs::Device d) { return seq({2, 3}, gs::kInt64, d, 3.0) * 2; });       // int64
  same_on_both([](gs::Device d) { return (seq({2, 3}, gs::kFloat32, d) > 0.0) * 3; });  // bool * int: int64
  same_on_both([&](gs::Device d) {
    return seq({2, 3}, gs::kFloat32, d) + gs::scalar_tensor(0.1, on(gs::kFloat64, d));
  });
  same_on_both([&](gs::Device d) {
    return seq({2, 3}, gs::kInt64, d, 3.0) + gs::scalar_tensor(0.5, on(gs::kFloat32, d));
  });
  same_on_both([](gs::Device d) { return seq({6}, gs::kInt64, d, 0.5).exp(); });  // float32
  same_on_both([](gs::Device d) { return seq({6}, gs::kInt64, d, 3.0) / (seq({6}, gs::kInt64, d, 1.0).abs() + 1); });
  same_on_both([](gs::Device d) { return seq({6}, gs::kInt64, d, 3.0).clamp(0.5, std::nullopt); });
  same_on_both([&](gs::Device d) { return gs::full({3}, (int64_t{1} << 60) + 1, on(gs::kInt64, d)); });
  same_on_both([](gs::Device d) {  // float32.add_(float64): computed in float64, rounded once
    Tensor x = seq({4}, gs::kFloat32, d);
    x.add_(seq({4}, gs::kFloat64, d) * 1e-9 + 1e-8);
    return x;
  });
  Tensor i = seq({3}, gs::kInt64, kCUDA, 2.0);
  CHECK_THROWS_AS(i.add_(0.5), gs::Error);
}
TEST_CASE("bool logic: and, or, not") {
  same_on_both([](gs::Device d) {
    Tensor a = seq({8}, gs::kFloat32, d) > 0.0, b = seq({8}, gs::kFloat32, d) < 0.5;
    return (a && b) || !a;
  });
}
TEST_CASE("NaN wins in maximum and minimum; isnan/isinf/isfinite") {
  Tensor a = gs::tensor({1.0, NAN, 3.0, INFINITY}).to(kCUDA), b = gs::tensor({NAN, 2.0, 1.0, 0.0}).to(kCUDA);
  const auto mx = a.maximum(b).cpu().to_vector<double>();
  CHECK(std::isnan(mx[0]));
  CHECK(std::isnan(mx[1]));
  CHECK(mx[2] == 3.0);
  CHECK(gs::equal(a.isnan().cpu(), gs::tensor({0, 1, 0, 0}).to(gs::kBool)));
  CHECK(gs::equal(a.isinf().cpu(), gs::tensor({0, 0, 0, 1}).to(gs::kBool)));
  CHECK(gs::equal(a.isfinite().cpu(), gs::tensor({1, 0, 1, 0}).to(gs::kBool)));
}
TEST_CASE("every unary op treats NaN, +-inf and -0 as the CPU does, contiguous and strided") {
  // The CPU propagates NaN through relu (x <= 0 ? 0 : x) and friends; the device must too.
  // Also the ends of exp's and log's range (underflow to 0, overflow to inf, denormal
  // inputs and results), repeated so that the CPU's vectorised loop sees every value.
  std::vector<double> edge = {NAN,   INFINITY, -INFINITY, -0.0, 0.0,   -2.5,  2.5,    1e-300, 1e-40, 1e-310,
                              -1000, 1000,     -100,      88.5, -88.5, 709.5, -745.5, 1e38,   -1e38, 0.5};
  for (int rep = 0; rep < 2; ++rep)
    for (size_t i = 0; i < 20; ++i) edge.push_back(edge[i]);
  using Fn = Tensor (*)(const Tensor&);
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"relu", [](const Tensor& x) { return gs::relu(x); }},
      {"neg", [](const Tensor& x) { return gs::neg(x); }},
      {"abs", [](const Tensor& x) { return gs::abs(x); }},
      {"sign", [](const Tensor& x) { return gs::sign(x); }},
      {"sigmoid", [](const Tensor& x) { return gs::sigmoid(x); }},
      {"tanh", [](const Tensor& x) { return gs::tanh(x); }},
      {"exp", [](const Tensor& x) { return gs::exp(x); }},
      {"square", [](const Tensor& x) { return gs::square(x); }},
      {"clamp", [](const Tensor& x) { return gs::clamp(x, -1.0, 1.0); }},
      {"log", [](const Tensor& x) { return gs::log(x); }},
      {"sqrt", [](const Tensor& x) { return gs::sqrt(x); }},
      {"reciprocal", [](const Tensor& x) { return gs::reciprocal(x); }},
      {"log1p", [](const Tensor& x) { return gs::log1p(x); }},
      {"erf", [](const Tensor& x) { return gs::erf(x); }},
      {"softplus", [](const Tensor& x) { return gs::softplus(x); }},
      {"log(exp)", [](const Tensor& x) { return gs::log(gs::exp(x)); }}};
  for (const auto& [name, f] : ops) {
    for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
      for (bool strided : {false, true}) {
        CAPTURE(name);
        CAPTURE(dt);
        CAPTURE(strided);
        same_on_both([&, f = f](gs::Device d) {
          Tensor x = gs::tensor(edge, {static_cast<int64_t>(edge.size())}, gs::TensorOptions(dt).device(d));
          if (strided) x = gs::stack({x, x}, 1).select(1, 0);  // stride 2
          return f(x);
        });
      }
    }
  }
}
TEST_CASE("binary ops on every pair of edge values agree with the cpu") {
  const std::vector<double> edge = {NAN,  INFINITY, -INFINITY, -0.0,  0.0, 1e-310, 1e-40,
                                    1e38, -1e38,    1000,      -1000, 2.5, -0.5};
  std::vector<double> av, bv;
  for (double a : edge)
    for (double b : edge) {
      av.push_back(a);
      bv.push_back(b);
    }
  const int64_t n = static_cast<int64_t>(av.size());
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return gs::add(a, b); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return gs::sub(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return gs::mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return gs::div(a, b); }},
      {"pow", [](const Tensor& a, const Tensor& b) { return gs::pow(a, b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return gs::maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return gs::minimum(a, b); }}};
  for (const auto& [name, f] : ops)
    for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
      CAPTURE(name);
      CAPTURE(dt);
      same_on_both([&, f = f](gs::Device d) {
        return f(gs::tensor(av, {n}, gs::TensorOptions(dt).device(d)),
                 gs::tensor(bv, {n}, gs::TensorOptions(dt).device(d)));
      });
    }
}
TEST_CASE("where and clamp with broadcasting and infinite bounds") {
  same_on_both([](gs::Device d) {
    Tensor x = seq({3, 4}, gs::kFloat32, d);
    return gs::where(x > 0.0, x, seq({4}, gs::kFloat32, d) * 2.0);
  });
  same_on_both([](gs::Device d) { return seq({3, 4}, gs::kFloat64, d).clamp(-0.5, std::nullopt); });
  same_on_both([](gs::Device d) { return seq({3, 4}, gs::kInt64, d, 2.0).clamp(-1, 4); });
}
TEST_CASE("in-place ops on device tensors bump the version") {
  Tensor t = gs::ones({3}, gs::TensorOptions().device(kCUDA));
  const uint64_t v = t.version();
  t.add_(2.0).mul_(3.0);
  CHECK(t.version() > v);
  CHECK(t.cpu().to_vector<float>() == std::vector<float>{9, 9, 9});
}
TEST_CASE("in-place ops on views and views of a base modified in place: the same gradients on both devices") {
  // CopySlices (in place on a view) and the re-derived history of an older view
  // (AsStridedBackward, here of an expanded view) run their gather/scatter on the device.
  auto grads = [](gs::Device d) {
    Tensor x = seq({3, 4}, gs::kFloat64, d).requires_grad_();
    Tensor s = seq({4}, gs::kFloat64, d, 0.5).requires_grad_();
    Tensor y = x * 2.0;
    Tensor old = y.narrow(0, 1, 1).expand({2, 4});
    y.t().select(0, 2).mul_(s.narrow(0, 0, 3));
    y.select(0, 0).add_(s);
    Tensor loss = (y * y).sum() + (old * seq({2, 4}, gs::kFloat64, d)).sum();
    loss.backward();
    return gs::cat({x.grad().reshape({-1}), s.grad()}, 0);
  };
  same_on_both(grads);
}

// ---- reductions ---------------------------------------------------------------
TEST_CASE("sum over every dim set of a (2,3,4) tensor, keepdim or not") {
  for (gs::Dims dims : {gs::Dims{0}, gs::Dims{1}, gs::Dims{2}, gs::Dims{0, 2}, gs::Dims{0, 1, 2}})
    for (bool keep : {false, true})
      same_on_both([&](gs::Device d) { return seq({2, 3, 4}, gs::kFloat32, d).sum(dims, keep); });
}
TEST_CASE("float32 sum of many values accumulates in float64") {
  same_on_both([](gs::Device d) { return gs::full({5000}, 0.1, gs::TensorOptions(gs::kFloat32).device(d)).sum(); });
}
TEST_CASE("max/min/mean/var over a transposed view; int64 and bool sums") {
  same_on_both([](gs::Device d) { return seq({4, 5}, gs::kFloat64, d).t().max(1); });
  same_on_both([](gs::Device d) { return seq({4, 5}, gs::kFloat32, d).t().min(0); });
  same_on_both([](gs::Device d) { return seq({4, 5}, gs::kFloat64, d).var({1}); });
  same_on_both([](gs::Device d) { return seq({4, 5}, gs::kFloat32, d).mean(); });
  same_on_both([](gs::Device d) { return seq({4, 5}, gs::kInt64, d, 3.0).sum({0}); });
  same_on_both([](gs::Device d) { return (seq({4, 5}, gs::kFloat32, d) > 0.0).sum(); });
}
TEST_CASE("max propagates NaN; argmax takes the first of ties and the first NaN") {
  Tensor x = gs::tensor({1.0, 5.0, 5.0, 2.0, NAN, 7.0, NAN, 0.0}, {2, 4}).to(kCUDA);
  CHECK(std::isnan(x.max().item<double>()));
  CHECK(x.argmax(1).cpu().to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(x.argmin(1).cpu().to_vector<int64_t>() == std::vector<int64_t>{0, 0});
  same_on_both([](gs::Device d) { return seq({3, 5}, gs::kFloat32, d).t().argmax(0); });
}

// ---- softmax ---------------------------------------------------------------------
TEST_CASE("softmax and log_softmax rows, including a row of -inf") {
  same_on_both([](gs::Device d) { return seq({3, 7}, gs::kFloat32, d).softmax(1); });
  same_on_both([](gs::Device d) { return seq({3, 7}, gs::kFloat64, d).log_softmax(-1); });
  same_on_both([](gs::Device d) { return seq({4, 3}, gs::kFloat64, d).softmax(0); });  // not the last dim
  same_on_both([](gs::Device d) {
    return gs::full({2, 3}, -INFINITY, gs::TensorOptions(gs::kFloat32).device(d)).softmax(1);
  });
  same_on_both([](gs::Device d) {
    return seq({2, 300}, gs::kFloat32, d, 0.01).softmax(1);
  });  // more columns than threads
}

// ---- linear algebra ----------------------------------------------------------------
TEST_CASE("matmul: contiguous, transposed operands, batched broadcast (cuBLAS path)") {
  same_on_both([](gs::Device d) { return seq({3, 4}, gs::kFloat32, d).matmul(seq({4, 5}, gs::kFloat32, d)); });
  same_on_both([](gs::Device d) { return seq({4, 3}, gs::kFloat32, d).t().matmul(seq({5, 4}, gs::kFloat32, d).t()); });
  same_on_both([](gs::Device d) { return seq({2, 3, 4}, gs::kFloat64, d).matmul(seq({4, 2}, gs::kFloat64, d)); });
  same_on_both([](gs::Device d) { return seq({4}, gs::kFloat64, d).matmul(seq({4}, gs::kFloat64, d)); });
}
TEST_CASE("matmul of int64 and of arbitrarily strided operands (tiled kernel)") {
  same_on_both([](gs::Device d) { return seq({5, 17}, gs::kInt64, d, 3.0).matmul(seq({17, 18}, gs::kInt64, d, 2.0)); });
  // Several 16 x 16 tiles in every direction, none of the sizes a multiple of the tile: a grid one
  // tile short, or a missing bound check on the last partial tile, changes these.
  same_on_both([](gs::Device d) {
    return seq({37, 45}, gs::kInt64, d, 3.0).matmul(seq({45, 50}, gs::kInt64, d, 2.0));
  });
  same_on_both([](gs::Device d) {
    return seq({3, 20, 17}, gs::kInt64, d, 3.0).matmul(seq({3, 17, 35}, gs::kInt64, d, 2.0));
  });
  same_on_both([](gs::Device d) {
    return seq({40, 66}, gs::kFloat64, d).slice(1, 0, 66, 2).matmul(seq({66, 50}, gs::kFloat64, d).slice(0, 0, 66, 2));
  });
  same_on_both([](gs::Device d) {
    return seq({6, 8}, gs::kFloat32, d).slice(1, 0, 8, 2).matmul(seq({8, 6}, gs::kFloat32, d).slice(0, 0, 8, 2));
  });
}

// ---- indexing ------------------------------------------------------------------------
TEST_CASE("gather and its backward (scatter_add with atomics)") {
  same_on_both([](gs::Device d) {
    Tensor x = seq({3, 4}, gs::kFloat64, d).requires_grad_();
    Tensor idx = gs::tensor(std::vector<int64_t>{0, 3, 3, 3, 1, 0}, {3, 2}).to(d);
    x.gather(1, idx).sum().backward();
    return x.grad();
  });
  same_on_both([](gs::Device d) {
    return seq({3, 4}, gs::kInt64, d, 2.0).gather(0, gs::tensor(std::vector<int64_t>{2, 1, 0, 0}, {1, 4}).to(d));
  });
}
TEST_CASE("index_select with repeated indices and its backward (index_add with atomics)") {
  same_on_both([](gs::Device d) {
    Tensor x = seq({4, 3}, gs::kFloat32, d).requires_grad_();
    Tensor idx = gs::tensor(std::vector<int64_t>{2, 0, 2, 2}, {4}).to(d);
    (x.index_select(0, idx) * seq({4, 3}, gs::kFloat32, d)).sum().backward();
    return x.grad();
  });
  same_on_both([](gs::Device d) {
    return seq({4, 3}, gs::kFloat64, d).t().index_select(1, gs::tensor(std::vector<int64_t>{3, 1}, {2}).to(d));
  });
}
TEST_CASE("embedding lookups and cat on the device") {
  same_on_both([](gs::Device d) {
    return gs::embedding(seq({5, 3}, gs::kFloat32, d), gs::tensor(std::vector<int64_t>{1, 4, 1, 0}, {2, 2}).to(d));
  });
  same_on_both([](gs::Device d) { return gs::cat({seq({2, 3}, gs::kFloat32, d), seq({2, 2}, gs::kFloat32, d)}, 1); });
}

// ---- convolution and pooling ------------------------------------------------------------
TEST_CASE("conv2d forward and backward with padding, stride and dilation") {
  for (gs::DType t : {gs::kFloat32, gs::kFloat64})
    for (int k = 0; k < 3; ++k)
      same_on_both([&](gs::Device d) {
        Tensor x = seq({1, 2, 6, 6}, t, d, 0.05).requires_grad_();
        Tensor w = seq({3, 2, 3, 3}, t, d, 0.02).requires_grad_();
        Tensor y = gs::conv2d(x, w, Tensor(), gs::Dims{k == 1 ? 2 : 1, k == 1 ? 2 : 1}, gs::Dims{1, 1},
                              gs::Dims{k == 2 ? 2 : 1, k == 2 ? 2 : 1});
        (y * y).sum().backward();
        return k == 0 ? y : (k == 1 ? x.grad() : w.grad());
      });
}
TEST_CASE("max_pool2d forward, argmax ties and backward with overlapping windows") {
  same_on_both([](gs::Device d) {
    Tensor x = (seq({1, 2, 5, 5}, gs::kFloat32, d) * 0.0 + 1.0).requires_grad_();  // all ties
    gs::max_pool2d(x, {3, 3}, {1, 1}).sum().backward();
    return x.grad();
  });
  same_on_both([](gs::Device d) {
    return gs::max_pool2d(gs::sin(seq({2, 1, 5, 5}, gs::kFloat64, d)), {3, 3}, {2, 2}, {1, 1});
  });
}
TEST_CASE(
    "max_pool2d backward fills its uninitialised buffer on both devices: 2x2 with odd sizes, overlapping windows") {
  // The backward's buffer is not pre-zeroed (core/backend.h): each kernel writes every element.
  // Odd sizes leave rows/columns no 2x2 window covers; the gradient holds -0, NaN and inf.
  for (int64_t k : {2, 3}) {
    CAPTURE(k);
    same_on_both([k](gs::Device d) {
      // Values -1, 0 and 1 (the sine truncated toward zero): many ties.
      Tensor x =
          (gs::sin(seq({2, 3, 7, 9}, gs::kFloat32, d) * 0.37) * 1.9).to(gs::kInt64).to(gs::kFloat32).requires_grad_();
      Tensor y = gs::max_pool2d(x, {k, k}, {2, 2});
      Tensor g = seq(y.shape(), gs::kFloat32, d, 0.5);
      g = gs::where(g == 0.5, gs::full({}, -0.0, gs::TensorOptions(gs::kFloat32).device(d)), g);
      g = gs::where(g == 1.0, gs::full({}, NAN, gs::TensorOptions(gs::kFloat32).device(d)), g);
      g = gs::where(g == 2.0, gs::full({}, INFINITY, gs::TensorOptions(gs::kFloat32).device(d)), g);
      { Tensor junk = gs::full({2, 3, 7, 9}, NAN, gs::TensorOptions(gs::kFloat32).device(d)); }
      return gs::autograd::grad({y}, {x}, {g})[0];
    });
  }
}
TEST_CASE("relu backward (threshold_backward) on both devices: NaN, inf, -0 and strided gradients") {
  for (gs::DType t : {gs::kFloat32, gs::kFloat64}) {
    CAPTURE(t);
    for (int strided = 0; strided < 2; ++strided) {
      CAPTURE(strided);
      same_on_both([t, strided](gs::Device d) {
        const auto o = gs::TensorOptions(t).device(d);
        Tensor x = gs::tensor({NAN, -1.0, 2.0, 0.0, -0.0, INFINITY, -INFINITY, 1e-30, -1e-30, 3.0, NAN, 0.0}, o)
                       .reshape({3, 4})
                       .detach()
                       .requires_grad_();
        Tensor gv =
            gs::tensor({1.0, INFINITY, -INFINITY, NAN, 5.0, -0.0, 2.0, -3.0, INFINITY, NAN, -INFINITY, -0.0}, o);
        Tensor g = strided ? gv.reshape({4, 3}).t() : gv.reshape({3, 4});
        return gs::autograd::grad({gs::relu(x)}, {x}, {g})[0];
      });
    }
  }
}
TEST_CASE("second derivatives through max_pool2d and avg_pool2d agree with the cpu") {
  // d/dx sum(dL/dx) for L = sum(pool(x)^3) + sum(x^2): needs pooling's backward differentiated.
  for (bool is_max : {true, false}) {
    CAPTURE(is_max);
    same_on_both([is_max](gs::Device d) {
      Tensor x = gs::sin(seq({1, 2, 5, 5}, gs::kFloat64, d)).detach().requires_grad_();
      Tensor y = is_max ? gs::max_pool2d(x, {3, 3}, {2, 2}, {1, 1}) : gs::avg_pool2d(x, {3, 3}, {2, 2}, {1, 1});
      Tensor L = (y * y * y).sum() + (x * x).sum();
      Tensor g = gs::autograd::grad({L}, {x}, {}, std::nullopt, true)[0];
      return gs::autograd::grad({g.sum()}, {x})[0];
    });
  }
}
TEST_CASE("logsumexp of an all -inf row is -inf with a NaN gradient on both devices") {
  same_on_both([](gs::Device d) {
    Tensor x =
        gs::cat(
            {gs::full({1, 20}, -INFINITY, gs::TensorOptions(gs::kFloat32).device(d)), seq({1, 20}, gs::kFloat32, d)}, 0)
            .detach()
            .requires_grad_();
    Tensor y = gs::logsumexp(x, {1});
    y.sum().backward();
    return gs::cat({y.detach().reshape({2, 1}), x.grad()}, 1);
  });
}
TEST_CASE("avg_pool2d forward and backward") {
  same_on_both([](gs::Device d) {
    Tensor x = seq({1, 2, 5, 5}, gs::kFloat64, d).requires_grad_();
    (gs::avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}) * 2.0).sum().backward();
    return x.grad();
  });
}

// ---- random: the same Philox stream on both devices ------------------------------------
TEST_CASE("rand gives bit-identical tensors on cpu and cuda for float32 and float64") {
  for (gs::DType t : {gs::kFloat32, gs::kFloat64}) {
    gs::Generator a, b;
    Tensor c = gs::rand({7, 5}, t, &a);
    Tensor d = gs::rand({7, 5}, gs::TensorOptions(t).device(kCUDA), &b);
    CHECK(d.is_cuda());
    CHECK(gs::equal(d.cpu(), c));
    CHECK(a.offset() == b.offset());
  }
}
TEST_CASE("randn gives the same samples on cpu and cuda") {
  for (gs::DType t : {gs::kFloat32, gs::kFloat64}) {
    gs::Generator a, b;
    Tensor c = gs::randn({9}, t, &a), d = gs::randn({9}, gs::TensorOptions(t).device(kCUDA), &b);
    CHECK(cuda_test::compare(d, c).empty());
#if GS_CUDA_EMU
    CHECK(gs::equal(d.cpu(), c));  // the same libm: bit-identical
#endif
  }
}
TEST_CASE("dropout with the same generator state gives the same mask on both devices") {
  gs::Generator a, b;
  Tensor x = gs::ones({6, 7});
  Tensor c = gs::dropout(x, 0.4, true, &a), d = gs::dropout(x.to(kCUDA), 0.4, true, &b);
  CHECK(gs::equal(d.cpu(), c));
}
TEST_CASE("randint on the device") {
  gs::Generator a, b;
  CHECK(gs::equal(gs::randint(-3, 9, {20}, gs::TensorOptions(gs::kInt64).device(kCUDA), &b).cpu(),
                  gs::randint(-3, 9, {20}, gs::kInt64, &a)));
}

// ---- device semantics ------------------------------------------------------------------
TEST_CASE("mixed-device operands: the error names the op and both devices") {
  Tensor a = gs::ones({2}), b = gs::ones({2}).to(kCUDA);
  try {
    (void)(a + b);
    FAIL("no error");
  } catch (const gs::Error& e) {
    const std::string m = e.what();
    CHECK(m.find("add") != std::string::npos);
    CHECK(m.find("cpu") != std::string::npos);
    CHECK(m.find("cuda") != std::string::npos);
  }
  CHECK_THROWS_AS(a.matmul(b), gs::Error);
}
TEST_CASE("raw_data and data_ptr of a device tensor are errors naming the tensor and the fix") {
  Tensor d = gs::ones({2, 2}).to(kCUDA).set_name("w");
  try {
    (void)d.raw_data();
    FAIL("no error");
  } catch (const gs::Error& e) {
    const std::string m = e.what();
    CHECK(m.find("'w'") != std::string::npos);
    CHECK(m.find("cuda") != std::string::npos);
    CHECK(m.find(".cpu()") != std::string::npos);
  }
  CHECK_THROWS_AS(d.data_ptr<float>(), gs::Error);
  CHECK(d.unsafe_data() != nullptr);
}
TEST_CASE("item, to_vector and printing of device tensors go through the host") {
  Tensor d = gs::tensor({1.5, -2.0}).to(kCUDA);
  CHECK(d.sum().item<double>() == doctest::Approx(-0.5));
  CHECK(d.to_vector<float>() == std::vector<float>{1.5f, -2.0f});
  std::ostringstream os;
  os << d;
  CHECK(os.str().find("device=cuda") != std::string::npos);
  CHECK(os.str().find("1.5") != std::string::npos);
  CHECK(d.str().find("@cuda") != std::string::npos);
}
TEST_CASE("to(device) is differentiable: gradients flow back to the cpu leaf") {
  Tensor x = gs::tensor({1.0, 2.0, 3.0}).requires_grad_();
  Tensor y = (x.to(kCUDA) * x.to(kCUDA)).sum();
  y.backward();
  CHECK(x.grad().device() == kCPU);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
}
TEST_CASE("autograd on device: gradients stay on the device") {
  Tensor w = gs::randn({3, 2}).to(kCUDA).requires_grad_();
  (w.tanh() * w).sum().backward();
  CHECK(w.grad().is_cuda());
}

// ---- allocator -------------------------------------------------------------------------
TEST_CASE("the caching allocator reuses a freed block: no new cudaMalloc") {
  { Tensor warm = gs::empty({1000}, gs::TensorOptions().device(kCUDA)); }
  const auto before = gs::cuda::allocator_stats();
  { Tensor t = gs::empty({1000}, gs::TensorOptions().device(kCUDA)); }
  const auto after = gs::cuda::allocator_stats();
  CHECK(after.malloc_calls == before.malloc_calls);
  CHECK(after.cache_hits == before.cache_hits + 1);
}
TEST_CASE("allocator statistics: in use, cached, peak") {
  gs::cuda::empty_cache();
  gs::cuda::reset_allocator_peak();
  const auto s0 = gs::cuda::allocator_stats();
  {
    Tensor t = gs::empty({1 << 16}, gs::TensorOptions(gs::kFloat32).device(kCUDA));
    const auto s1 = gs::cuda::allocator_stats();
    CHECK(s1.bytes_in_use >= s0.bytes_in_use + (1 << 18));
    CHECK(s1.peak_bytes_in_use >= s1.bytes_in_use);
  }
  const auto s2 = gs::cuda::allocator_stats();
  CHECK(s2.bytes_in_use == s0.bytes_in_use);
  CHECK(s2.bytes_cached >= (1 << 18));
  CHECK(gs::cuda::memory_summary().find("cached") != std::string::npos);
  gs::cuda::empty_cache();
  CHECK(gs::cuda::allocator_stats().bytes_cached == 0);
}
TEST_CASE("out of device memory is a clear error carrying the allocator statistics") {
  gs::cuda::set_memory_limit(1 << 20);
  try {
    Tensor t = gs::empty({1 << 20}, gs::TensorOptions(gs::kFloat32).device(kCUDA));
    FAIL("no error");
  } catch (const gs::Error& e) {
    const std::string m = e.what();
    CHECK(m.find("out of device memory") != std::string::npos);
    CHECK(m.find("in use") != std::string::npos);
    CHECK(m.find("cudaMalloc calls") != std::string::npos);
    CHECK(m.find("smaller batch") != std::string::npos);
  }
  gs::cuda::set_memory_limit(0);
  Tensor ok = gs::empty({1 << 10}, gs::TensorOptions(gs::kFloat32).device(kCUDA));  // usable afterwards
  CHECK(ok.is_cuda());
}

// ---- nn on the device ------------------------------------------------------------------
TEST_CASE("Module::to(device) moves parameters in place, keeping their identity") {
  gs::manual_seed(gs::Generator().seed());
  auto lin = std::make_shared<gs::nn::Linear>(4, 3);
  Tensor w = lin->parameters()[0];
  lin->to(kCUDA);
  CHECK(w.is_cuda());
  CHECK(lin->parameters()[0].is_same(w));
  lin->to(kCPU);
  CHECK(!w.is_cuda());
}
TEST_CASE("a small MLP trained with SGD on cuda follows the cpu losses") {
  auto make = [] {
    gs::manual_seed(gs::Generator().seed());
    return std::make_shared<gs::nn::Sequential>(std::make_shared<gs::nn::Linear>(6, 16),
                                                std::make_shared<gs::nn::ReLU>(),
                                                std::make_shared<gs::nn::Linear>(16, 3));
  };
  gs::Generator g;
  Tensor x = gs::randn({24, 6}, {}, &g);
  Tensor y = gs::randint(0, 3, {24}, gs::kInt64, &g);
  auto train = [&](gs::Device d) {
    auto model = make();
    model->to(d);
    gs::optim::SGD opt(model->parameters(), gs::optim::SGDOptions(0.1));
    std::vector<double> losses;
    Tensor xd = x.to(d), yd = y.to(d);
    for (int step = 0; step < 8; ++step) {
      opt.zero_grad();
      Tensor loss = gs::nn::functional::cross_entropy((*model)(xd), yd);
      loss.backward();
      opt.step();
      losses.push_back(loss.item<double>());
    }
    return losses;
  };
  const auto lc = train(kCPU), ld = train(kCUDA);
  REQUIRE(lc.size() == ld.size());
  for (size_t i = 0; i < lc.size(); ++i) CHECK(ld[i] == doctest::Approx(lc[i]).epsilon(1e-4));
  CHECK(lc.back() < lc.front());
}

// ---- backend plumbing ------------------------------------------------------------------
TEST_CASE("init is idempotent and the backend is registered for cuda") {
  CHECK(gs::cuda::init());
  CHECK(gs::cuda::init());
  CHECK(gs::has_backend(gs::DeviceType::CUDA));
  CHECK(std::string(gs::backend_for(kCUDA).name()) == "cuda");
#if GS_CUDA_EMU
  CHECK(gs::cuda::is_emulated());
#endif
  gs::backend_for(kCUDA).synchronize();
}
TEST_CASE("a cpu tensor handed to a cuda kernel is an error naming the tensor, not a fault") {
  Tensor c = gs::zeros({3});
  try {
    gs::backend_for(kCUDA).fill(c, 1.0);
    FAIL("no error");
  } catch (const gs::Error& e) {
    const std::string m = e.what();
    CHECK(m.find("float32[3]") != std::string::npos);
    CHECK(m.find(".device(") != std::string::npos);
  }
}
TEST_CASE("to(device) of a tensor already there is the same tensor; cuda -> cuda copies keep values") {
  Tensor d = gs::ones({2}).to(kCUDA);
  CHECK(d.to(kCUDA).is_same(d));
  Tensor e = d.clone();
  CHECK(e.is_cuda());
  CHECK(e.storage() != d.storage());
  CHECK(gs::equal(e.cpu(), d.cpu()));
}
TEST_CASE("the memory summary names the allocator's counters") {
  const std::string s = gs::backend_for(kCUDA).memory_summary();
  CHECK(s.find("cuda:0") != std::string::npos);
  CHECK(s.find("cudaMalloc calls") != std::string::npos);
  CHECK(gs::backend_for(kCPU).memory_summary().empty());
}
TEST_CASE("the W8 memory report of a model on cuda shows the caching allocator") {
  auto model = std::make_shared<gs::nn::Linear>(5, 4);
  model->to(kCUDA);
  Tensor x = gs::randn({8, 5}).to(kCUDA);
  const gs::debug::MemoryReport r = gs::debug::memory_report(*model, [&] { return (*model)(x).square().mean(); });
  CHECK(r.device == "cuda:0");
  CHECK(r.allocator.find("caching allocator") != std::string::npos);
  CHECK(r.str().find("cudaMalloc calls") != std::string::npos);
  CHECK(r.parameter_bytes == (5 * 4 + 4) * 4);
}

// ---- grid-stride loops: more elements / rows than one capped grid covers ------------------
TEST_CASE("elementwise, copy and rand over more elements than the capped grid (256 x 256)") {
  same_on_both([](gs::Device d) { return seq({70001}, gs::kFloat32, d, 1e-4).exp() + 1.0; });
  same_on_both([](gs::Device d) { return seq({300, 240}, gs::kFloat64, d, 1e-3).t().contiguous(); });
  gs::Generator a, b;
  CHECK(gs::equal(gs::rand({70001}, gs::TensorOptions(gs::kFloat64).device(kCUDA), &b).cpu(),
                  gs::rand({70001}, gs::kFloat64, &a)));
}
TEST_CASE("reductions and softmax with more outputs / rows than blocks in the grid") {
  same_on_both([](gs::Device d) { return seq({300, 5}, gs::kFloat32, d).sum({1}); });
  same_on_both([](gs::Device d) { return seq({300, 5}, gs::kFloat64, d).max(1); });
  same_on_both([](gs::Device d) { return seq({300, 5}, gs::kFloat32, d).argmin(1); });
  same_on_both([](gs::Device d) { return seq({300, 7}, gs::kFloat32, d).log_softmax(1); });
  same_on_both([](gs::Device d) { return seq({70001}, gs::kFloat32, d, 1e-3).sum(); });
}
