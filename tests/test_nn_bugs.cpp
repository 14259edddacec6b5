// The injectable bugs (nn/bugs.h): each buggy path does what the catalog says,
// next to the correct one, and is off by default.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/format.h"
#include "core/generator.h"
#include "core/warning.h"
#include "nn/nn.h"
#include "nn_test_util.h"
#include "optim/optim.h"

namespace nn = gs::nn;
using gs::Tensor;
using nn::Bug;

TEST_CASE("the catalog is the table: ids in order, parse_bug accepts B13/b13/13 and explains bad names") {
  const auto& cat = nn::bug_catalog();
  REQUIRE(cat.size() == static_cast<size_t>(nn::kNumBugs));
  std::set<std::string> codes;
  for (size_t i = 0; i < cat.size(); ++i) {
    const auto& b = cat[i];
    CAPTURE(b.code);
    CHECK(static_cast<size_t>(b.id) == i + 1);  // numbered in order, no gaps
    CHECK(b.code == gs::str_printf("B%02zu", i + 1));
    CHECK(nn::parse_bug(b.code) == b.id);
    CHECK(codes.insert(b.code).second);
    CHECK_FALSE(b.title.empty());
    CHECK_FALSE(b.caught_by.empty());
    CHECK_FALSE(b.recipes.empty());
    for (const std::string& r : b.recipes) CHECK((r == "mlp" || r == "cnn" || r == "dist"));
  }
  CHECK(nn::parse_bug("B13") == Bug::B13);
  CHECK(nn::parse_bug("b13") == Bug::B13);
  CHECK(nn::parse_bug("13") == Bug::B13);
  const std::string range = nn::bug_range();
  CHECK(range == cat.front().code + ".." + cat.back().code);
  CHECK_THROWS_WITH_AS(nn::parse_bug("B" + std::to_string(nn::kNumBugs + 1)), doctest::Contains(range.c_str()),
                       gs::Error);
  CHECK_THROWS_AS(nn::parse_bug("B0"), gs::Error);
  CHECK_THROWS_AS(nn::parse_bug("x"), gs::Error);
  nn::BugSet s{Bug::B13, Bug::B03};
  CHECK(s.str() == "B03, B13");
  CHECK(nn::BugSet().str() == "none");
}

TEST_CASE("BugSet has room for any number of bugs") {
  nn::BugSet s;
  const auto far = static_cast<Bug>(200);  // past any fixed-width bitmask
  CHECK_FALSE(s.has(far));
  s.add(far).add(Bug::B01).add(static_cast<Bug>(64)).add(static_cast<Bug>(63));
  CHECK(s.has(far));
  CHECK(s.has(static_cast<Bug>(64)));
  CHECK(s.has(static_cast<Bug>(63)));
  CHECK_FALSE(s.has(static_cast<Bug>(65)));
  CHECK(s.list() == std::vector<Bug>{Bug::B01, static_cast<Bug>(63), static_cast<Bug>(64), far});
  s.remove(far).remove(static_cast<Bug>(64)).remove(static_cast<Bug>(63));
  CHECK(s == nn::BugSet{Bug::B01});  // equal however many words each grew
  s.remove(Bug::B01);
  CHECK(s.empty());
}

TEST_CASE("docs/catalog.md has a section for every bug of the table, with its title") {
  std::ifstream in(std::string(GS_SOURCE_DIR) + "/docs/catalog.md");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  for (const auto& b : nn::bug_catalog()) {
    CAPTURE(b.code);
    CHECK(doc.find("## " + b.code + " — " + b.title + "\n") != std::string::npos);
  }
}

TEST_CASE("a module refuses a bug it has no buggy path for, naming the ones it has") {
  nn::Linear fc(3, 2);
  CHECK_THROWS_WITH_AS(fc.inject_bug(Bug::B23), doctest::Contains("B12, B13, B16, B18, B22"), gs::Error);
  nn::ReLU relu;
  CHECK_THROWS_WITH_AS(relu.inject_bug(Bug::B13), doctest::Contains("can carry: none"), gs::Error);
  CHECK(fc.bugs().empty());
}

TEST_CASE("Linear: B13 mixes the batch, B12 detaches, B16/B18 re-initialise, B22 breaks only the backward") {
  gs::manual_seed(3);
  nn::Linear fc(4, 3);
  Tensor x = gs::randn({5, 4});
  Tensor good = fc(x);
  fc.inject_bug(Bug::B13);
  Tensor bad = fc(x);
  CHECK(bad.shape() == good.shape());
  CHECK_FALSE(gs::allclose(bad, good));
  // The reshape interleaves rows: the values are a permutation of (W x^T)'s.
  std::multiset<float> a, b;
  for (float v : (good - fc.bias).to_vector<float>()) a.insert(std::round(v * 1e4f));
  for (float v : (bad - fc.bias).to_vector<float>()) b.insert(std::round(v * 1e4f));
  CHECK(a == b);
  fc.remove_bug(Bug::B13);

  Tensor xr = x.clone().requires_grad_(true);
  fc.inject_bug(Bug::B12);
  fc(xr).sum().backward();
  CHECK_FALSE(xr.grad().defined());
  CHECK(fc.weight.grad().defined());
  fc.remove_bug(Bug::B12);

  nn::Linear big(784, 64);
  big.inject_bug(Bug::B16);
  const std::vector<float> w = big.weight.to_vector<float>();
  double ss = 0;
  for (float v : w) ss += double(v) * v;
  CHECK(std::sqrt(ss / w.size()) == doctest::Approx(1.0).epsilon(0.05));
  big.inject_bug(Bug::B18);
  for (float v : big.bias.to_vector<float>()) CHECK(v == -4.0f);

  // B22: the same forward, a different weight gradient (and the same input gradient).
  nn::Linear c(4, 3), d(4, 3);
  d.set_tensor("weight", c.weight);
  d.set_tensor("bias", c.bias);
  d.inject_bug(Bug::B22);
  Tensor x1 = x.clone().requires_grad_(true), x2 = x.clone().requires_grad_(true);
  Tensor y1 = c(x1), y2 = d(x2);
  CHECK(gs::allclose(y1, y2));
  y1.sum().backward();
  y2.sum().backward();
  CHECK(gs::allclose(x1.grad(), x2.grad()));
  CHECK(gs::allclose(c.bias.grad(), d.bias.grad()));
  CHECK_FALSE(gs::allclose(c.weight.grad(), d.weight.grad()));
}

TEST_CASE("Residual B02: the in-place skip sum makes the backward raise, naming relu and add_") {
  auto inner = std::make_shared<nn::Sequential>(std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(3, 3));
  nn::Residual r(inner);
  Tensor x = gs::randn({2, 3}).requires_grad_(true);
  Tensor ok = r(x * 1.0).sum();
  CHECK_NOTHROW(ok.backward());
  r.inject_bug(Bug::B02);
  Tensor y = r(x * 1.0).sum();
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("'add_'"), gs::Error);
}

TEST_CASE("LogSoftmax: B14 normalises the batch dim, B20/B21 agree with the stable form on small logits") {
  Tensor x = gs::randn({4, 3});
  nn::LogSoftmax good(1), b14(1), b20(1), b21(1);
  b14.inject_bug(Bug::B14);
  b20.inject_bug(Bug::B20);
  b21.inject_bug(Bug::B21);
  CHECK(gs::allclose(b14(x), gs::log_softmax(x, 0)));
  CHECK(gs::allclose(b20(x), good(x), 1e-4, 1e-5));
  CHECK(gs::allclose(b21(x), good(x), 1e-4, 1e-5));
  // Where they differ: a gap of 200 underflows log(softmax) to -inf; exp(100) overflows float32.
  Tensor far = gs::tensor({0.0, 200.0}, {1, 2});
  CHECK(std::isinf(b20(far).to_vector<float>()[0]));
  CHECK(std::isfinite(good(far).to_vector<float>()[0]));
  Tensor huge = gs::tensor({100.0, 0.0}, {1, 2});
  CHECK(std::isnan(b21(huge).to_vector<float>()[0]));
}

TEST_CASE("BatchNorm B23: never updates its running statistics and uses batch statistics in eval") {
  gs::manual_seed(1);
  nn::BatchNorm1d bn(3);
  bn.inject_bug(Bug::B23);
  Tensor x = gs::randn({8, 3}) * 3.0 + 1.0;
  bn(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 0);
  bn.eval();
  // In eval the output of a row depends on the rest of the batch.
  Tensor alone = bn(x.narrow(0, 0, 2)).narrow(0, 0, 1);
  Tensor with_all = bn(x).narrow(0, 0, 1);
  CHECK_FALSE(gs::allclose(alone, with_all));
}

TEST_CASE("losses: B03 sums, B01 broadcasts (B,1) against (B), B09 accepts logits") {
  Tensor logits = gs::randn({6, 4});
  Tensor y = gs::randint(0, 4, {6});
  nn::CrossEntropyLoss ce, ce_sum;
  ce_sum.inject_bug(Bug::B03);
  CHECK(ce_sum(logits, y).item<double>() == doctest::Approx(6 * ce(logits, y).item<double>()).epsilon(1e-5));

  nn::MSELoss mse;
  CHECK_THROWS_AS(mse(gs::ones({5, 1}), gs::zeros({5})), gs::Error);
  mse.inject_bug(Bug::B01);
  Tensor l = mse(gs::ones({5, 1}), gs::zeros({5}));
  CHECK(l.item<double>() == doctest::Approx(1.0));

  nn::BCELoss bce;
  Tensor raw = gs::tensor({-2.0, 3.0, 0.5}, {3, 1});
  Tensor t = gs::tensor({0.0, 1.0, 1.0}, {3, 1});
  CHECK_THROWS_AS(bce(raw, t), gs::Error);
  bce.inject_bug(Bug::B09);
  CHECK(std::isfinite(bce(raw, t).item<double>()));
}

TEST_CASE("DataLoader: B07 breaks (x, y) pairs, B19 masks every label, B28 sorts by class") {
  auto d = nn::make_blobs(10, 3, 2, 1.0, 5);
  auto opts = nn::DataLoaderOptions().batch_size(30).shuffle(false);
  nn::DataLoader clean(d, opts), b07(d, opts.bug(Bug::B07)), b19(d, opts.bug(Bug::B19)),
      b28(d, nn::DataLoaderOptions().batch_size(10).shuffle(true).bug(Bug::B28));
  const nn::Batch c = clean.batch(0, 0), m = b07.batch(0, 0);
  CHECK(gs::equal(c.y, m.y));
  CHECK_FALSE(gs::equal(c.x, m.x));
  for (int64_t v : b19.batch(0, 0).y.to_vector<int64_t>()) CHECK(v == -100);
  for (int i = 0; i < 3; ++i) {
    const std::vector<int64_t> ys = b28.batch(0, i).y.to_vector<int64_t>();
    CHECK(std::set<int64_t>(ys.begin(), ys.end()).size() == 1);
  }
}

TEST_CASE("optimizers warn (O5) when gradients accumulate across steps; model.zero_grad() counts as zeroing") {
  std::vector<gs::Warning> got;
  gs::WarningHandlerGuard g([&](const gs::Warning& w) { got.push_back(w); });
  gs::manual_seed(2);
  nn::Linear fc(3, 2);
  gs::optim::SGD opt(fc.parameters(), gs::optim::SGDOptions(0.1));
  Tensor x = gs::randn({4, 3});
  for (int i = 0; i < 2; ++i) {
    fc.zero_grad();  // the model's zero_grad, not the optimizer's
    fc(x).sum().backward();
    opt.step();
  }
  CHECK(got.empty());
  CHECK_FALSE(opt.accumulation_detected());
  fc(x).sum().backward();  // no zero_grad: accumulates into last step's buffers
  opt.step();
  REQUIRE(got.size() == 1);
  CHECK(got[0].check == "O5");
  CHECK(opt.accumulation_detected());
  opt.set_accumulating(true);  // on purpose: quiet
  fc(x).sum().backward();
  opt.step();
  CHECK(got.size() == 1);
}

TEST_CASE("Trainer B04 skips zero_grad (O5 warns); B05 evaluates in training mode (M2 warns)") {
  auto data = nn::make_blobs(32, 3, 4, 1.0, 1);
  nn::DataLoader loader(data, nn::DataLoaderOptions().batch_size(16));
  for (Bug b : {Bug::B04, Bug::B05}) {
    std::vector<gs::Warning> got;
    gs::WarningHandlerGuard g([&](const gs::Warning& w) { got.push_back(w); });
    gs::manual_seed(1);
    auto model =
        std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
                                         std::make_shared<nn::Dropout>(0.5), std::make_shared<nn::Linear>(8, 3));
    gs::optim::Adam opt(model->parameters());
    gs::optim::Trainer t(*model, opt, gs::optim::TrainerOptions().epochs(1).progress(gs::optim::Progress::Off).bug(b));
    t.fit(loader, &loader);
    REQUIRE_FALSE(got.empty());
    CHECK(got[0].check == (b == Bug::B04 ? "O5" : "M2"));
  }
  // The clean loop warns about nothing.
  std::vector<gs::Warning> none;
  gs::WarningHandlerGuard g([&](const gs::Warning& w) { none.push_back(w); });
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::Dropout>(0.5));
  gs::optim::Adam opt(model->parameters());
  gs::optim::Trainer t(*model, opt, gs::optim::TrainerOptions().epochs(1).progress(gs::optim::Progress::Off));
  t.fit(loader, &loader);
  CHECK(none.empty());
}
