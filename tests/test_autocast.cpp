// Tests for autocast (core/autocast.h): the guard's nesting and thread locality, every row of the
// policy table, the BCE refusal, float32 gradients of float32 parameters, the docs' copy of the
// table, and small models trained in float32, bfloat16 autocast and float16 autocast + GradScaler.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/autocast.h"
#include "core/fast_kernels.h"
#include "core/generator.h"
#include "core/ops.h"
#include "nn/nn.h"
#include "nn/synthetic.h"
#include "nn_test_util.h"
#include "optim/optim.h"

namespace nn = gs::nn;
namespace F = gs::nn::functional;
namespace optim = gs::optim;
using gs::DType;
using gs::Tensor;
using nntest::error_of;
using nntest::has;

namespace {

Tensor randn(gs::Shape s, DType t = gs::kFloat32, uint64_t seed = 1) {
  gs::Generator g(seed);
  return gs::randn(s, {}, &g).to(t);
}

// One call per table row: the op on inputs of dtype `t` (its floating operands), returning its output.
std::map<std::string, std::function<Tensor(DType)>> row_calls() {
  std::map<std::string, std::function<Tensor(DType)>> m;
  m["matmul"] = [](DType t) { return gs::matmul(randn({3, 4}, t), randn({4, 2}, t, 2)); };
  m["linear"] = [](DType t) { return gs::linear(randn({3, 4}, t), randn({2, 4}, t, 2), randn({2}, t, 3)); };
  m["conv2d"] = [](DType t) { return gs::conv2d(randn({1, 2, 5, 5}, t), randn({3, 2, 3, 3}, t, 2), randn({3}, t, 3)); };
  m["exp"] = [](DType t) { return gs::exp(randn({4}, t)); };
  m["log"] = [](DType t) { return gs::log(gs::abs(randn({4}, t)) + 0.5); };
  m["pow"] = [](DType t) { return gs::pow(randn({4}, t), 2); };
  m["sum"] = [](DType t) { return gs::sum(randn({4}, t)); };
  m["mean"] = [](DType t) { return gs::mean(randn({4}, t)); };
  m["softmax"] = [](DType t) { return gs::softmax(randn({2, 4}, t), 1); };
  m["log_softmax"] = [](DType t) { return gs::log_softmax(randn({2, 4}, t), 1); };
  m["logsumexp"] = [](DType t) { return gs::logsumexp(randn({2, 4}, t), {1}); };
  m["layer_norm"] = [](DType t) { return nn::LayerNorm(gs::Shape{4})(randn({2, 4}, t)); };
  m["batch_norm"] = [](DType t) { return nn::BatchNorm1d(4)(randn({3, 4}, t)); };
  m["mse_loss"] = [](DType t) { return F::mse_loss(randn({4}, t), randn({4}, t, 2)); };
  m["nll_loss"] = [](DType t) {
    return F::nll_loss(gs::log_softmax(randn({2, 3}, t), 1).to(t), gs::tensor({0, 2}, gs::kInt64));
  };
  m["cross_entropy"] = [](DType t) { return F::cross_entropy(randn({2, 3}, t), gs::tensor({0, 2}, gs::kInt64)); };
  m["binary_cross_entropy_with_logits"] = [](DType t) {
    return F::binary_cross_entropy_with_logits(randn({4}, t), gs::tensor({0, 1, 1, 0}).to(t));
  };
  m["binary_cross_entropy"] = [](DType t) {
    return F::binary_cross_entropy(gs::sigmoid(randn({4}, t)), gs::tensor({0, 1, 1, 0}).to(t));
  };
  return m;
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  auto va = nntest::vals(a), vb = nntest::vals(b);
  REQUIRE(va.size() == vb.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    num = std::max(num, std::abs(va[i] - vb[i]));
    den = std::max(den, std::abs(vb[i]));
  }
  return num / std::max(den, 1e-12);
}

}  // namespace

TEST_CASE("autocast: off by default; guards nest and restore; only 16-bit dtypes") {
  CHECK_FALSE(gs::autocast_enabled());
  CHECK(gs::autocast_dtype() == gs::kBFloat16);
  {
    auto ac = gs::autocast(gs::kFloat16);
    CHECK(gs::autocast_enabled());
    CHECK(gs::autocast_dtype() == gs::kFloat16);
    {
      auto off = gs::autocast(gs::kBFloat16, false);
      CHECK_FALSE(gs::autocast_enabled());
      CHECK(gs::autocast_dtype() == gs::kBFloat16);
      {
        auto on = gs::autocast(gs::kBFloat16);
        CHECK(gs::autocast_enabled());
      }
      CHECK_FALSE(gs::autocast_enabled());
    }
    CHECK(gs::autocast_enabled());
    CHECK(gs::autocast_dtype() == gs::kFloat16);
    // An exception thrown through a guard restores the state too.
    try {
      auto inner = gs::autocast(gs::kBFloat16, false);
      throw std::runtime_error("x");
    } catch (const std::runtime_error&) {
    }
    CHECK(gs::autocast_enabled());
  }
  CHECK_FALSE(gs::autocast_enabled());
  for (DType bad : {gs::kFloat32, gs::kFloat64, gs::kInt64, gs::kBool}) {
    const std::string e = error_of([&] { auto ac = gs::autocast(bad); });
    CAPTURE(e);
    CHECK(has(e, "autocast"));
    CHECK(has(e, "float16 (gs::kFloat16) or bfloat16"));
    CHECK(has(e, gs::dtype_name(bad)));
    CHECK_FALSE(gs::autocast_enabled());
  }
}

TEST_CASE("autocast: the state is per thread") {
  auto ac = gs::autocast(gs::kFloat16);
  bool other_enabled = true;
  DType other_out = gs::kFloat16;
  std::thread th([&] {
    other_enabled = gs::autocast_enabled();
    other_out = gs::matmul(randn({2, 2}), randn({2, 2})).dtype();
    auto mine = gs::autocast(gs::kBFloat16);  // does not leak into the main thread
  });
  th.join();
  CHECK_FALSE(other_enabled);
  CHECK(other_out == gs::kFloat32);
  CHECK(gs::autocast_enabled());
  CHECK(gs::autocast_dtype() == gs::kFloat16);
  CHECK(gs::matmul(randn({2, 2}), randn({2, 2})).dtype() == gs::kFloat16);
}

TEST_CASE("autocast: every row of the table gives its dtype; other ops keep their inputs' dtype") {
  auto calls = row_calls();
  size_t n = 0;
  const gs::AutocastRule* rules = gs::autocast_rules(&n);
  REQUIRE(n == calls.size());  // a new row needs its call above
  for (DType ac_dtype : {gs::kBFloat16, gs::kFloat16}) {
    auto ac = gs::autocast(ac_dtype);
    for (size_t i = 0; i < n; ++i) {
      const gs::AutocastRule& r = rules[i];
      CAPTURE(r.op);
      CAPTURE(ac_dtype);
      REQUIRE(calls.count(r.op) == 1);
      REQUIRE(gs::find_autocast_rule(r.op) == &rules[i]);
      auto& call = calls[r.op];
      switch (r.policy) {
        case gs::AutocastPolicy::LowerPrecision:
          CHECK(call(gs::kFloat32).dtype() == ac_dtype);
          CHECK(call(gs::kFloat16).dtype() == ac_dtype);   // any 16-bit float goes to the autocast dtype
          CHECK(call(gs::kFloat64).dtype() == gs::kFloat64);  // float64 is never cast down
          break;
        case gs::AutocastPolicy::Float32:
          CHECK(call(gs::kFloat32).dtype() == gs::kFloat32);
          CHECK(call(gs::kFloat16).dtype() == gs::kFloat32);
          CHECK(call(gs::kBFloat16).dtype() == gs::kFloat32);
          CHECK(call(gs::kFloat64).dtype() == gs::kFloat64);
          break;
        case gs::AutocastPolicy::Refuse: CHECK(has(error_of([&] { call(gs::kFloat32); }), "unsafe to autocast")); break;
      }
      CHECK(gs::autocast_enabled());  // an op leaves the state as it found it, also after an error
    }
    // Not in the table: the inputs' dtype, promoted as usual.
    const Tensor b16 = randn({4}, gs::kBFloat16), f32 = randn({4});
    CHECK(gs::relu(b16).dtype() == gs::kBFloat16);
    CHECK(gs::tanh(b16).dtype() == gs::kBFloat16);
    CHECK(gs::softplus(b16).dtype() == gs::kBFloat16);  // its inner exp is not cast up
    CHECK(gs::var(b16).dtype() == gs::kBFloat16);
    CHECK((b16 * 2.0).dtype() == gs::kBFloat16);
    CHECK((b16 + f32).dtype() == gs::kFloat32);
    CHECK(gs::relu(f32).dtype() == gs::kFloat32);
    // Integer and bool inputs are never cast.
    CHECK(gs::sum(gs::tensor({1, 2, 3}, gs::kInt64)).dtype() == gs::kInt64);
    CHECK(gs::sum(gs::tensor({1, 0, 1}, gs::kBool)).dtype() == gs::kInt64);
    CHECK(gs::matmul(gs::tensor({1, 2, 3, 4}, gs::kInt64).view({2, 2}), gs::tensor({1, 2, 3, 4}, gs::kInt64).view({2, 2}))
              .dtype() == gs::kInt64);
    // A lower-precision op with one float64 and one float32 input: the float32 one is cast, then they promote.
    CHECK(gs::matmul(randn({2, 2}, gs::kFloat64), randn({2, 2})).dtype() == gs::kFloat64);
  }
  // Switched off: float32 stays float32 everywhere.
  {
    auto ac = gs::autocast(gs::kBFloat16, false);
    CHECK(calls["matmul"](gs::kFloat32).dtype() == gs::kFloat32);
    CHECK(calls["binary_cross_entropy"](gs::kFloat32).dtype() == gs::kFloat32);
    CHECK(calls["exp"](gs::kBFloat16).dtype() == gs::kBFloat16);
  }
}

TEST_CASE("autocast: the values are the 16-bit op's values") {
  const Tensor a = randn({5, 7}), b = randn({7, 3}, gs::kFloat32, 2);
  Tensor got;
  {
    auto ac = gs::autocast(gs::kFloat16);
    got = gs::matmul(a, b);
  }
  const Tensor want = gs::matmul(a.to(gs::kFloat16), b.to(gs::kFloat16));
  CHECK(nntest::vals(got) == nntest::vals(want));
  Tensor s;
  {
    auto ac = gs::autocast(gs::kBFloat16);
    s = gs::softmax(a.to(gs::kBFloat16), 1);
  }
  CHECK(nntest::vals(s) == nntest::vals(gs::softmax(a.to(gs::kBFloat16).to(gs::kFloat32), 1)));
}

TEST_CASE("autocast: binary_cross_entropy is refused with the fix; switched off around it, it runs") {
  const Tensor p = gs::sigmoid(randn({4})), y = gs::tensor({0, 1, 1, 0});
  const double want = F::binary_cross_entropy(p, y).item<double>();
  auto ac = gs::autocast(gs::kBFloat16);
  const std::string e = error_of([&] { F::binary_cross_entropy(p, y); });
  CAPTURE(e);
  CHECK(has(e, "binary_cross_entropy"));
  CHECK(has(e, "unsafe to autocast"));
  CHECK(has(e, "bfloat16"));
  CHECK(has(e, "binary_cross_entropy_with_logits"));
  CHECK(has(e, "gs::autocast(gs::autocast_dtype(), false)"));
  CHECK(has(error_of([&] { nn::BCELoss()(p, y); }), "unsafe to autocast"));
  Tensor loss;
  {
    auto off = gs::autocast(gs::autocast_dtype(), false);
    loss = F::binary_cross_entropy(p, y);
  }
  CHECK(gs::autocast_enabled());
  CHECK(loss.dtype() == gs::kFloat32);
  CHECK(loss.item<double>() == want);
}

TEST_CASE("autocast: float32 parameters get float32 gradients close to a float32 run") {
  auto grads = [](bool use_ac, DType t, bool backward_inside) {
    gs::manual_seed(5);
    auto model = std::make_shared<nn::Sequential>(
        std::make_shared<nn::Conv2d>(nn::Conv2dOptions(2, 4, 3).padding(1)), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(4 * 5 * 5, 16),
        std::make_shared<nn::LayerNorm>(gs::Shape{16}), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 3));
    const Tensor x = randn({6, 2, 5, 5}, gs::kFloat32, 7);
    const Tensor y = gs::tensor({0, 1, 2, 0, 1, 2}, gs::kInt64);
    Tensor loss;
    {
      auto ac = gs::autocast(t, use_ac);
      Tensor logits = (*model)(x);
      if (use_ac) CHECK(logits.dtype() == t);
      loss = F::cross_entropy(logits, y);
      CHECK(loss.dtype() == gs::kFloat32);
      if (backward_inside) loss.backward();
    }
    if (!backward_inside) loss.backward();
    std::vector<Tensor> g;
    for (const Tensor& p : model->parameters()) {
      CHECK(p.dtype() == gs::kFloat32);
      REQUIRE(p.grad().defined());
      CHECK(p.grad().dtype() == gs::kFloat32);
      g.push_back(p.grad().detach().clone());
    }
    return g;
  };
  const auto ref = grads(false, gs::kBFloat16, false);
  // Tolerance: four roundings of the 16-bit dtype (eps: bfloat16 2^-7 = 0.0078, float16 2^-10 =
  // 0.00098) relative to each gradient's largest entry; measured: about 1.2 eps for both.
  for (auto [t, tol] : {std::pair{gs::kBFloat16, 0.03}, std::pair{gs::kFloat16, 0.004}}) {
    CAPTURE(t);
    const auto got = grads(true, t, false);
    const auto inside = grads(true, t, true);
    REQUIRE(got.size() == ref.size());
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, max_rel_diff(got[i], ref[i]));
      // backward() inside the scope runs the same gradient ops (the backward is never autocast).
      CHECK(nntest::vals(inside[i]) == nntest::vals(got[i]));
    }
    CAPTURE(worst);
    CHECK(worst < tol);
    CHECK(worst > 0.0);  // the 16-bit products did run
  }
}

TEST_CASE("autocast: float64 is untouched, so numerical gradient checks are unaffected") {
  auto ac = gs::autocast(gs::kBFloat16);
  const Tensor w = randn({3, 4}, gs::kFloat64).requires_grad_(true);
  const Tensor x = randn({2, 4}, gs::kFloat64, 3);
  auto f = [&] { return gs::linear(x, w).exp().sum(); };
  Tensor out = f();
  CHECK(out.dtype() == gs::kFloat64);
  out.backward();
  // Central difference on one weight, in float64.
  const double h = 1e-6, g = w.grad().to_vector<double>()[5];
  std::vector<double> vp = w.to_vector<double>(), vm = vp;
  vp[5] += h;
  vm[5] -= h;
  const Tensor wp = gs::tensor(vp, {3, 4}, gs::kFloat64), wm = gs::tensor(vm, {3, 4}, gs::kFloat64);
  const double num = (gs::linear(x, wp).exp().sum().item<double>() - gs::linear(x, wm).exp().sum().item<double>()) / (2 * h);
  CHECK(g == doctest::Approx(num).epsilon(1e-6));
}

TEST_CASE("autocast: docs/dtypes.md's table is the code's table") {
  std::ifstream in(std::string(GS_SOURCE_DIR) + "/docs/dtypes.md");
  REQUIRE(in);
  std::string line;
  bool section = false;
  std::vector<std::pair<std::string, std::string>> doc;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) section = line == "## Autocast";
    if (!section || line.rfind("| `", 0) != 0) continue;
    // | `op` | policy | why |
    const size_t a = line.find('`') + 1, b = line.find('`', a);
    const size_t c = line.find('|', b) + 1, d = line.find('|', c);
    std::string policy = line.substr(c, d - c);
    policy = policy.substr(policy.find_first_not_of(' '));
    policy = policy.substr(0, policy.find_last_not_of(' ') + 1);
    doc.emplace_back(line.substr(a, b - a), policy);
  }
  size_t n = 0;
  const gs::AutocastRule* rules = gs::autocast_rules(&n);
  std::vector<std::pair<std::string, std::string>> code;
  for (size_t i = 0; i < n; ++i) code.emplace_back(rules[i].op, gs::autocast_policy_name(rules[i].policy));
  CHECK(doc == code);
}

namespace {

// A 3-class spiral (600 points), 2-64-64-3 MLP, full-batch Adam; accuracy on the training set,
// evaluated in float32. mode 0: float32, 1: bfloat16 autocast, 2: float16 autocast + GradScaler.
double train_spirals(int mode) {
  gs::manual_seed(3);
  auto data = nn::make_spirals(200, 3, 0.2, 1);
  const Tensor x = data->x(), y = data->y();
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(2, 64), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(64, 64), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(64, 3));
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  optim::GradScaler scaler(optim::GradScalerOptions().enabled(mode == 2));
  for (int step = 0; step < 300; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      auto ac = gs::autocast(mode == 2 ? gs::kFloat16 : gs::kBFloat16, mode != 0);
      loss = F::cross_entropy((*model)(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  }
  for (const Tensor& p : model->parameters()) CHECK(p.dtype() == gs::kFloat32);
  gs::NoGradGuard ng;
  auto test = nn::make_spirals(500, 3, 0.2, 2);  // held out: another draw of the same spirals
  const Tensor pred = gs::argmax((*model)(test->x()), 1);
  return 100.0 * (pred == test->y()).to(gs::kFloat32).mean().item<double>();
}

}  // namespace

TEST_CASE("autocast: an MLP trains to float32's accuracy under bfloat16 and float16 + GradScaler") {
  const double f32 = train_spirals(0), bf16 = train_spirals(1), fp16 = train_spirals(2);
  MESSAGE("spirals accuracy: float32 " << f32 << ", bfloat16 autocast " << bf16 << ", float16 autocast + scaler " << fp16);
  CHECK(f32 > 95.0);
  // Held out: 1500 points, so half a point is 7 of them. Over 7 initialisations of the model the
  // autocast runs ended at most 0.07 points below float32 (one point near the arms' boundaries).
  CHECK(bf16 >= f32 - 0.5);
  CHECK(fp16 >= f32 - 0.5);
}

namespace {

// 4 gaussian blobs in 64 dims seen as 1x8x8 images, spread so that they overlap (float32 reaches
// about 95%); conv-BatchNorm-ReLU-pool-linear, minibatch Adam. Held-out accuracy, in float32.
double train_cnn(int mode) {
  gs::manual_seed(4);
  const double spread = 5.0;
  // 250 points per class: the first 150 of each train (interleaved, so each batch holds every
  // class), the other 100 are held out.
  auto all = nn::make_blobs(250, 4, 64, spread, 1);
  std::vector<int64_t> tr, te;
  for (int64_t i = 0; i < 250; ++i)
    for (int64_t k = 0; k < 4; ++k) (i < 150 ? tr : te).push_back(k * 250 + i);
  const Tensor tri = gs::tensor(tr, {600}), tei = gs::tensor(te, {400});
  const Tensor x = all->x().index_select(0, tri).view({-1, 1, 8, 8}), y = all->y().index_select(0, tri);
  auto model = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 8, 3).padding(1)), std::make_shared<nn::BatchNorm2d>(8),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(8 * 4 * 4, 4));
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  optim::GradScaler scaler(optim::GradScalerOptions().enabled(mode == 2));
  for (int epoch = 0; epoch < 10; ++epoch)
    for (int64_t b = 0; b < 600; b += 60) {
      const Tensor xb = x.narrow(0, b, 60), yb = y.narrow(0, b, 60);
      opt.zero_grad();
      Tensor loss;
      {
        auto ac = gs::autocast(mode == 2 ? gs::kFloat16 : gs::kBFloat16, mode != 0);
        loss = F::cross_entropy((*model)(xb), yb);
      }
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
    }
  model->eval();
  gs::NoGradGuard ng;
  const Tensor tx = all->x().index_select(0, tei).view({-1, 1, 8, 8}), ty = all->y().index_select(0, tei);
  const Tensor pred = gs::argmax((*model)(tx), 1);
  return 100.0 * (pred == ty).to(gs::kFloat32).mean().item<double>();
}

}  // namespace

TEST_CASE("autocast: a small CNN trains to float32's accuracy under bfloat16 and float16 + GradScaler") {
  const double f32 = train_cnn(0), bf16 = train_cnn(1), fp16 = train_cnn(2);
  MESSAGE("blob-image CNN accuracy: float32 " << f32 << ", bfloat16 autocast " << bf16 << ", float16 autocast + scaler "
                                             << fp16);
  // 400 held-out images: half a point is 2 of them. Over 7 initialisations of the model the
  // autocast runs ended at most 0.25 points (one image) below float32.
  CHECK(f32 > 90.0);
  CHECK(bf16 >= f32 - 0.5);
  CHECK(fp16 >= f32 - 0.5);
}

namespace {

// Bitwise equality of two tensors of one dtype and shape.
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

// A 784-256-10 MLP trained `steps` steps under autocast with SGD (momentum) or Adam, from one seed;
// returns its parameters. `copies`: autocast keeps 16-bit copies of the weights (the default).
std::vector<Tensor> train_mlp_autocast(DType t, bool adam, bool copies, int steps) {
  gs::detail::set_autocast_copies(copies);
  gs::manual_seed(11);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(256, 10));
  std::unique_ptr<optim::Optimizer> opt;
  if (adam)
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions(1e-3));
  else
    opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  for (int step = 0; step < steps; ++step) {
    const Tensor x = randn({64, 784}, gs::kFloat32, 100 + step);
    const Tensor y = gs::argmax(randn({64, 10}, gs::kFloat32, 200 + step), 1);
    opt->zero_grad();
    Tensor loss;
    {
      auto ac = gs::autocast(t);
      loss = F::cross_entropy((*model)(x), y);
    }
    loss.backward();
    opt->step();
  }
  gs::detail::set_autocast_copies(true);
  return model->parameters();
}

}  // namespace

TEST_CASE("autocast's kept 16-bit copies of the weights: the bits of casting every time") {
  for (DType t : {gs::kBFloat16, gs::kFloat16})
    for (bool adam : {false, true}) {
      CAPTURE(std::string(gs::dtype_name(t)));
      CAPTURE(adam);
      const auto kept = train_mlp_autocast(t, adam, true, 4), cast = train_mlp_autocast(t, adam, false, 4);
      REQUIRE(kept.size() == cast.size());
      for (size_t i = 0; i < kept.size(); ++i) {
        CAPTURE(i);
        CHECK(same_bits(kept[i], cast[i]));
      }
      // The optimizer's fused step rounded each weight's new values into its copy: the copies are
      // current. (The reference kernels' steps do not: their copies are made again at the next cast.)
      for (const Tensor& p : kept) {
        gs::detail::LowPrecisionCopy* c = gs::detail::refreshable_copy(p);
        CHECK((c != nullptr) == gs::cpu_fast_kernels());
        if (c != nullptr) CHECK(same_bits(c->copy, p.detach().to(t)));
      }
    }
}

TEST_CASE("autocast's kept copy follows every change of the weight and of the cast's output") {
  const DType t = gs::kBFloat16;
  Tensor w = randn({40, 33}, gs::kFloat32, 7).requires_grad_(true);
  const Tensor x = randn({5, 33}, gs::kFloat32, 8);
  const auto forward = [&] {
    auto ac = gs::autocast(t);
    return gs::linear(x, w, Tensor());
  };
  const auto want = [&] { return gs::matmul(x.to(t), w.detach().to(t).t()); };
  CHECK(same_bits(forward(), want()));
  CHECK(w.storage()->low_copy != nullptr);
  // The weight changed in place (no optimizer): the next cast rounds it again.
  {
    gs::NoGradGuard ng;
    w.mul_(1.7);
  }
  CHECK(gs::detail::refreshable_copy(w) == nullptr);
  CHECK(same_bits(forward(), want()));
  // The cast's output changed in place: the copy it shares is stale, and the next cast makes it again.
  Tensor alias;
  {
    auto ac = gs::autocast(t);
    gs::detail::AutocastScope scope("linear");
    alias = scope.cast(w).detach();
  }
  {
    gs::NoGradGuard ng;
    alias.mul_(0.0);
  }
  CHECK(same_bits(forward(), want()));
  // A graph that still holds the copy (saved for the input's gradient): the optimizer leaves it
  // alone, and the next cast makes a new one.
  const Tensor xg = x.detach().requires_grad_(true);
  Tensor kept_out;
  {
    auto ac = gs::autocast(t);
    kept_out = gs::linear(xg, w, Tensor());
  }
  optim::SGD opt({w}, optim::SGDOptions(0.1));
  kept_out.sum().backward(Tensor(), /*retain_graph=*/true);
  CHECK(gs::detail::refreshable_copy(w) == nullptr);
  const Tensor before = kept_out.detach().clone();
  opt.step();
  CHECK(same_bits(forward(), want()));
  // The retained graph still sees the values it saved: a second backward runs.
  kept_out.sum().backward();
  CHECK(same_bits(kept_out.detach(), before));
  // Without a graph holding it, the optimizer rounds the new values into the copy.
  opt.zero_grad();
  forward().sum().backward();
  REQUIRE(gs::detail::refreshable_copy(w) != nullptr);
  opt.step();
  const gs::detail::LowPrecisionCopy* c = gs::detail::refreshable_copy(w);
  CHECK((c != nullptr) == gs::cpu_fast_kernels());  // the reference kernels' step does not round into it
  if (c != nullptr) CHECK(same_bits(c->copy, w.detach().to(t)));
  CHECK(same_bits(forward(), want()));
}

TEST_CASE("float32 master weights rounded into 16-bit parameters by the fused step: the bits of rounding after it") {
  for (DType t : {gs::kBFloat16, gs::kFloat16})
    for (int kind = 0; kind < 3; ++kind) {  // SGD, Adam, RMSprop (whose fused step reads the 16-bit gradient too)
      CAPTURE(std::string(gs::dtype_name(t)));
      CAPTURE(kind);
      std::vector<Tensor> out[2];
      for (int fused = 0; fused < 2; ++fused) {
        gs::manual_seed(5);
        nn::Linear layer(300, 70);
        layer.to(t);
        std::unique_ptr<optim::Optimizer> opt;
        if (kind == 1)
          opt = std::make_unique<optim::Adam>(layer.parameters(), optim::AdamOptions(1e-2));
        else if (kind == 2)
          opt = std::make_unique<optim::RMSprop>(layer.parameters(), optim::RMSpropOptions(1e-2).momentum(0.5));
        else
          opt = std::make_unique<optim::SGD>(layer.parameters(), optim::SGDOptions(0.1).momentum(0.9));
        opt->set_master_weights(true);
        opt->set_fused(fused == 1);
        for (int step = 0; step < 3; ++step) {
          opt->zero_grad();
          layer(randn({16, 300}, t, 30 + step)).pow(2).mean().backward();
          opt->step();
        }
        out[fused] = layer.parameters();
      }
      for (size_t i = 0; i < out[0].size(); ++i) {
        CAPTURE(i);
        CHECK(out[1][i].dtype() == t);
        CHECK(same_bits(out[1][i], out[0][i]));
      }
    }
}

TEST_CASE("autocast's kept copies: threads running inference with one model at once get the one-thread values") {
  Tensor w = randn({64, 48}, gs::kFloat32, 21).requires_grad_(true);
  const Tensor x = randn({8, 48}, gs::kFloat32, 22);
  const auto forward = [&] {
    gs::NoGradGuard ng;
    auto ac = gs::autocast(gs::kBFloat16);
    return gs::linear(x, w, Tensor());
  };
  const Tensor want = forward();
  w.storage()->bump_version("test");  // the copy is stale: the threads' first casts race to make it again
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) wrong[static_cast<size_t>(t)] += same_bits(forward(), want) ? 0 : 1;
    });
  for (std::thread& th : pool) th.join();
  for (int n : wrong) CHECK(n == 0);
}
