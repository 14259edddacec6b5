// Checks that listen to every op (debug/checks/model/anomaly.h): W4 anomaly mode, M12, M19,
// M18 (the forward in float16, bfloat16 or under autocast, against float32) and M20 (the in-place error as a finding).
#include <doctest/doctest.h>

#include <cmath>

#include "core/autograd.h"
#include "debug/checks/model/anomaly.h"
#include "debug_test_util.h"

using namespace dtest;

TEST_CASE("W4: the first op that turns finite values into Inf/NaN is named, forward and backward") {
  // log(0) = -inf in the forward.
  dbg::AnomalyMode am;
  Tensor x = gs::tensor({1.0, 0.0, 2.0}).requires_grad_(true);
  {
    auto on = am.enable();
    Tensor y = gs::log(x * 1.0);
    Tensor z = y * 2.0;  // propagates the -inf: must not be reported again
    (void)z;
  }
  REQUIRE(am.findings().size() == 1);
  const dbg::Finding& f = am.findings()[0];
  CHECK(f.check == "W4");
  CHECK(f.op == "log");
  CHECK(f.severity == dbg::Severity::Error);
  CHECK(evidence(f, "Inf values") == 1);
  CHECK(f.title.find("forward") != std::string::npos);

  // 0/0 = NaN names div.
  dbg::AnomalyMode nan_mode;
  {
    auto on = nan_mode.enable();
    gs::div(gs::zeros({2}), gs::zeros({2}));
  }
  REQUIRE(nan_mode.found());
  CHECK(nan_mode.findings()[0].op == "div");
  CHECK(evidence(nan_mode.findings()[0], "NaN values") == 2);

  // sqrt at 0: the forward is finite, its backward is not.
  dbg::AnomalyMode bw;
  Tensor a = gs::tensor({0.0, 4.0}).requires_grad_(true);
  {
    auto on = bw.enable();
    gs::sqrt(a).sum().backward();
  }
  REQUIRE(bw.findings().size() == 1);
  CHECK(bw.findings()[0].op == "sqrt");
  CHECK(bw.findings()[0].title.find("backward") != std::string::npos);

  // Clean computations are silent.
  dbg::AnomalyMode quiet;
  {
    auto on = quiet.enable();
    Tensor b = gs::tensor({1.0, 2.0}).requires_grad_(true);
    gs::log(b).sum().backward();
  }
  CHECK_FALSE(quiet.found());

  // raise mode stops at the first anomaly, with the finding's text.
  dbg::AnomalyMode strict({true, true, true, 8});
  auto on = strict.enable();
  CHECK_THROWS_WITH_AS(gs::log(gs::zeros({1})), doctest::Contains("'log' produced"), gs::Error);
}

TEST_CASE("W4 names the module the op ran in; M12 names the first module whose output turned non-finite") {
  auto m = mlp(6, 8, 3);
  auto head = std::make_shared<nn::LogSoftmax>(1);
  head->inject_bug(nn::Bug::B20);  // log(softmax(x))
  m->push_back(head);
  m->eval();
  XY d = blobs(4, 3, 6);
  Tensor big = d.x * 1e4;  // logits far apart: softmax underflows to 0 in float32
  auto fs = dbg::find_nonfinite_source(*m, big);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].check == "M12");
  CHECK(fs[0].module == "9 (LogSoftmax)");
  CHECK(fs[0].op == "log");

  dbg::AnomalyMode am;
  am.attach(*m);
  {
    gs::NoGradGuard ng;
    auto on = am.enable();
    (*m)(big);
  }
  REQUIRE(am.found());
  CHECK(am.findings()[0].module == "9 (LogSoftmax)");
  CHECK(am.findings()[0].op == "log");

  // The stable head is fine with the same logits.
  auto clean = mlp(6, 8, 3);
  clean->push_back(std::make_shared<nn::LogSoftmax>(1));
  clean->eval();
  CHECK(dbg::find_nonfinite_source(*clean, big).empty());
}

TEST_CASE("M19: both operands expanded, one along a dim it lacks, is flagged; bias addition and written-out outer combinations are not; raise mode throws") {
  dbg::BroadcastDetector det;
  {
    auto on = det.enable();
    Tensor a = gs::ones({100, 1}), b = gs::ones({100});
    Tensor c = a + b;  // (B, 1) + (B): b is repeated along a dim it does not have
    CHECK(c.shape() == gs::Shape{100, 100});
    Tensor bias = gs::ones({100, 10}) + gs::ones({10});  // (B, N) + (N): ordinary
    Tensor scalar = gs::ones({4, 1}) * 2.0;
    // Outer combinations written out, every stretched dim a size-1 dim of the operand's own: meant.
    Tensor labels = gs::tensor(std::vector<int64_t>{0, 2, 1, 3}, {4});
    Tensor onehot = gs::eq(labels.unsqueeze(1), gs::arange(4).unsqueeze(0));
    Tensor pairwise = gs::ones({5, 3}).unsqueeze(1) - gs::ones({6, 3}).unsqueeze(0);
    CHECK(onehot.shape() == gs::Shape{4, 4});
    CHECK(pairwise.shape() == gs::Shape{5, 6, 3});
    // A parameter shared by every row, stretched along the batch it lacks: an ordinal model's K cut
    // points added to one score per row, (B, 1) + (K) -> (B, K).
    Tensor cuts = gs::ones({4});
    cuts.requires_grad_();
    Tensor ordinal = gs::ones({100, 1}) + cuts;
    CHECK(ordinal.shape() == gs::Shape{100, 4});
    (void)bias;
    (void)scalar;
  }
  REQUIRE(det.findings().size() == 1);
  CHECK(det.findings()[0].op == "add");
  CHECK(det.findings()[0].shape == "[100, 100]");
  // The same (K) vector as data, not a parameter (per-class weights against per-row losses): flagged.
  dbg::BroadcastDetector data_det;
  {
    auto on = data_det.enable();
    Tensor weighted = gs::ones({100, 1}) * gs::ones({4});
    CHECK(weighted.shape() == gs::Shape{100, 4});
  }
  CHECK(data_det.findings().size() == 1);
  CHECK(det.findings()[0].severity == dbg::Severity::Warning);

  // A loss that broadcasts prediction (B, 1) against target (B): bug B01.
  dbg::BroadcastDetector loss_det;
  {
    auto on = loss_det.enable();
    nn::MSELoss mse;
    mse.inject_bug(nn::Bug::B01);
    mse(gs::ones({8, 1}), gs::zeros({8}));
  }
  REQUIRE(loss_det.findings().size() == 1);
  CHECK(loss_det.findings()[0].shape == "[8, 8]");
  auto lf = dbg::loss_shape_finding("MSELoss", gs::ones({8, 1}), gs::zeros({8}));
  REQUIRE(lf.has_value());
  CHECK(lf->check == "M19");
  CHECK(evidence(*lf, "broadcast elements") == 64);
  CHECK_FALSE(dbg::loss_shape_finding("MSELoss", gs::ones({8, 1}), gs::zeros({8, 1})).has_value());

  dbg::BroadcastDetector strict(dbg::BroadcastMode::Raise);
  auto on = strict.enable();
  CHECK_THROWS_WITH_AS(gs::ones({3, 1}) * gs::ones({3}), doctest::Contains("M19"), gs::Error);
  CHECK_NOTHROW(gs::ones({3, 1}) * gs::ones({1, 3}));
  CHECK_NOTHROW(gs::ones({3, 4}) * gs::ones({4}));
}

TEST_CASE("round_to_half matches IEEE binary16") {
  CHECK(dbg::round_to_half(1.0f) == 1.0f);
  CHECK(dbg::round_to_half(65504.0f) == 65504.0f);
  CHECK(std::isinf(dbg::round_to_half(65520.0f)));
  CHECK(dbg::round_to_half(65519.0f) == 65504.0f);
  CHECK(dbg::round_to_half(1.0f / 3.0f) == 0.333251953125f);
  CHECK(dbg::round_to_half(1.0e-8f) == 0.0f);                           // below half the smallest subnormal
  CHECK(dbg::round_to_half(6.0e-8f) == std::ldexp(1.0f, -24));          // the smallest subnormal
  CHECK(dbg::round_to_half(1.0009765625f + 0.0004f) == 1.0009765625f);  // 1 + 2^-10 is representable
  CHECK(dbg::round_to_half(-2.5f) == -2.5f);
  CHECK(dbg::round_to_half(std::exp(12.0f)) == std::numeric_limits<float>::infinity());
}

TEST_CASE("M18: a softmax without the max overflows in half precision; the stable one does not") {
  // logits = x (an identity Linear), some above 11: exp overflows half precision, not float32.
  auto make = [](bool naive) {
    auto fc = std::make_shared<nn::Linear>(3, 3);
    {
      gs::NoGradGuard ng;
      fc->weight.copy_(gs::eye(3));
      fc->bias.zero_();
    }
    auto head = std::make_shared<nn::LogSoftmax>(1);
    if (naive) head->inject_bug(nn::Bug::B21);
    return std::make_shared<nn::Sequential>(fc, head);
  };
  Tensor x = gs::tensor({20.0, 0.0, 1.0, 2.0, 3.0, 1.0, -4.0, 15.0, 0.5}, {3, 3});
  Tensor y = gs::tensor(std::vector<int64_t>{0, 1, 1}, {3});
  auto loss = [&](const Tensor& out) { return nn::functional::nll_loss(out, y); };
  auto naive = make(true);
  const Tensor w = naive->parameters()[0].clone();
  auto fs = dbg::check_half_precision(*naive, x, loss);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].check == "M18");
  CHECK(fs[0].severity == dbg::Severity::Error);
  CHECK(fs[0].module == "1 (LogSoftmax)");
  CHECK(evidence(fs[0], "largest |output| in float32") < 100);
  CHECK(gs::equal(naive->parameters()[0], w));  // parameters restored after rounding
  CHECK_FALSE(fires(dbg::check_half_precision(*make(false), x, loss)));
  // A float32 forward that is already broken is not blamed on half precision.
  auto already = dbg::check_half_precision(*naive, x * 100.0, loss);
  REQUIRE(already.size() == 1);
  CHECK_FALSE(already[0].fires());
}

TEST_CASE("M18 in the real dtypes: float16 and its emulation agree; bfloat16 and autocast hold the naive softmax") {
  auto make = [] {
    auto fc = std::make_shared<nn::Linear>(3, 3);
    {
      gs::NoGradGuard ng;
      fc->weight.copy_(gs::eye(3));
      fc->bias.zero_();
    }
    auto head = std::make_shared<nn::LogSoftmax>(1);
    head->inject_bug(nn::Bug::B21);
    return std::make_shared<nn::Sequential>(fc, head);
  };
  Tensor x = gs::tensor({20.0, 0.0, 1.0, 2.0, 3.0, 1.0, -4.0, 15.0, 0.5}, {3, 3});
  Tensor y = gs::tensor(std::vector<int64_t>{0, 1, 1}, {3});
  auto loss = [&](const Tensor& out) { return nn::functional::nll_loss(out, y); };
  auto naive = make();
  const auto real = dbg::check_half_precision(*naive, x, loss);
  const auto emulated = dbg::check_half_precision(*naive, x, loss, {.emulate = true});
  REQUIRE(real.size() == 1);
  REQUIRE(emulated.size() == 1);
  CHECK(real[0].severity == dbg::Severity::Error);
  CHECK(emulated[0].severity == dbg::Severity::Error);
  CHECK(real[0].module == emulated[0].module);
  CHECK(emulated[0].title.find("emulated") != std::string::npos);
  CHECK(real[0].title.find("emulated") == std::string::npos);
  // bfloat16 has float32's range: exp(20) fits.
  CHECK_FALSE(fires(dbg::check_half_precision(*naive, x, loss, {.dtype = gs::kBFloat16})));
  // Autocast keeps exp and the reductions in float32, as PyTorch's does.
  CHECK_FALSE(fires(dbg::check_half_precision(*naive, x, loss, {.autocast = true})));
  // 16-bit parameters: compared as they are, left in their dtype with their values.
  naive->to(gs::kFloat16);
  const Tensor w = naive->parameters()[0].clone();
  const auto p16 = dbg::check_half_precision(*naive, x.to(gs::kFloat16), loss);
  REQUIRE(p16.size() == 1);
  CHECK(p16[0].severity == dbg::Severity::Error);
  CHECK(naive->parameters()[0].dtype() == gs::kFloat16);
  CHECK(gs::equal(naive->parameters()[0], w));
  CHECK_THROWS_WITH_AS(dbg::check_half_precision(*naive, x, loss, {.dtype = gs::kFloat32}),
                       doctest::Contains("16-bit dtype"), gs::Error);
}

TEST_CASE("M18: a loss gap that matters warns; a loss near 0 that half precision rounds a little does not") {
  // An identity Linear and a squared error against the input itself: the float32 loss is 0, and
  // what half precision's rounding of the output leaves is the whole loss (a relative gap of 100%).
  auto fc = std::make_shared<nn::Linear>(1, 1);
  {
    gs::NoGradGuard ng;
    fc->weight.fill_(1.0);
    fc->bias.zero_();
  }
  auto model = std::make_shared<nn::Sequential>(fc);
  auto run = [&](double v, const dbg::HalfPrecisionOptions& o) {
    const Tensor x = gs::full({4, 1}, v);
    auto loss = [x](const Tensor& out) { return gs::mean((out - x) * (out - x)); };
    return dbg::check_half_precision(*model, x, loss, o);
  };
  // 1.0004 rounds to 1 in half (its spacing there is 2^-10): a loss of ~1.6e-7, nothing that
  // matters: silent.
  CHECK_FALSE(fires(run(1.0004, {})));
  // The rule needs both gaps: with no absolute floor the same case warns.
  dbg::HalfPrecisionOptions no_floor;
  no_floor.min_absolute_loss_gap = 0.0;
  const auto tiny = run(1.0004, no_floor);
  REQUIRE(fires(tiny));
  CHECK(evidence(tiny[0], "absolute gap") < 1e-6);
  // 1000.3 rounds to 1000.5 in half (its spacing there is 0.5): a loss of ~0.04 warns.
  const auto big = run(1000.3, {});
  REQUIRE(fires(big));
  CHECK(big[0].title.find("differs between float32 and half precision") != std::string::npos);
  CHECK(evidence(big[0], "absolute gap") > 1e-3);
}

TEST_CASE("M20: the in-place error of a residual sum done in place becomes a finding naming add_") {
  auto block = std::make_shared<nn::Residual>(
      std::make_shared<nn::Sequential>(std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(4, 4)));
  block->inject_bug(nn::Bug::B02);
  Tensor x = gs::randn({3, 4}).requires_grad_(true);
  Tensor h = x * 1.0;  // a non-leaf, like the output of a previous layer
  Tensor y = (*block)(h).sum();
  try {
    y.backward();
    FAIL("the backward should raise");
  } catch (const gs::Error& e) {
    auto f = dbg::inplace_finding(e);
    REQUIRE(f.has_value());
    CHECK(f->check == "M20");
    CHECK(f->op == "add_");
    CHECK(f->cause.find("relu") != std::string::npos);
    CHECK(f->cause.find("version") != std::string::npos);
  }
  CHECK_FALSE(dbg::inplace_finding(gs::Error("x", "something else")).has_value());
}

TEST_CASE("W4 names the module of a backward anomaly too (the nodes a module built are tagged with it)") {
  struct Sqrt : nn::Module {
    Sqrt() : Module("Sqrt") {}
    Tensor forward(const Tensor& x) override { return gs::sqrt(x); }
  };
  gs::manual_seed(1);
  auto fc = std::make_shared<nn::Linear>(3, 3);
  {
    gs::NoGradGuard ng;
    fc->weight.zero_();  // the output is the bias: sqrt of 0 below
    fc->bias.copy_(gs::tensor({0.0, 1.0, 4.0}));
  }
  auto model = std::make_shared<nn::Sequential>(fc, std::make_shared<Sqrt>());
  dbg::AnomalyMode am;
  am.attach(*model);
  {
    auto on = am.enable();
    (*model)(gs::ones({2, 3})).sum().backward();
  }
  REQUIRE(am.findings().size() == 1);
  CHECK(am.findings()[0].title.find("backward of 'sqrt'") != std::string::npos);
  CHECK(am.findings()[0].module == "1 (Sqrt)");
}
