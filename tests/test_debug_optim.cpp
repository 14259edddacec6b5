// The optimisation checks O1-O4 and O6 (debug/checks/optim/optim_checks.h): each fires on the
// bug it is meant to catch (B16, B17, B24, an unused layer, injected NaN, spikes,
// growing weights, lr 1e-7) and stays silent on a healthy run of the reference MLP; O10's
// thresholds on synthetic sequences of a GradScaler's clean and inf/NaN steps.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/optim/loss_scale.h"
#include "debug/checks/optim/optim_checks.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/nn.h"
#include "optim/optim.h"

#include "debug_test_util.h"

namespace dbg = gs::debug;
namespace nn = gs::nn;
namespace optim = gs::optim;
using gs::Tensor;
using std::make_shared;

namespace {

using dtest::all_str;
using dtest::any_fires;
using dtest::ev;
using dtest::has;
using dtest::titled;

std::vector<dbg::Finding> of(const std::vector<dbg::Finding>& fs, const std::string& check,
                             dbg::Severity min = dbg::Severity::Info) {
  std::vector<dbg::Finding> out;
  for (const auto& f : fs)
    if (f.check == check && f.severity >= min) out.push_back(f);
  return out;
}

const dbg::Finding* for_param(const std::vector<dbg::Finding>& fs, const std::string& p) {
  for (const auto& f : fs)
    if (f.parameter == p) return &f;
  return nullptr;
}

std::vector<double> values(const std::vector<std::pair<int64_t, double>>& s) {
  std::vector<double> v;
  for (const auto& [step, x] : s) v.push_back(x);
  return v;
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : v[v.size() / 2];
}

// Runs one backward of cross-entropy on random data through `model`.
void backward_once(nn::Module& model, int64_t in, int64_t classes, int64_t B = 32) {
  Tensor x = gs::randn({B, in});
  std::vector<int64_t> y(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) y[static_cast<size_t>(i)] = i % classes;
  nn::functional::cross_entropy(model(x), gs::tensor(y, {B})).backward();
}

// The reference MLP of the bug catalog.
std::shared_ptr<nn::Sequential> reference_mlp() {
  auto block = [] {
    auto inner = make_shared<nn::Sequential>(make_shared<nn::ReLU>(), make_shared<nn::Linear>(128, 128));
    return make_shared<nn::Residual>(inner);
  };
  return make_shared<nn::Sequential>(
      std::vector<nn::ModulePtr>{make_shared<nn::Flatten>(), make_shared<nn::Linear>(784, 128), make_shared<nn::ReLU>(),
                                 make_shared<nn::BatchNorm1d>(128), block(), block(), make_shared<nn::ReLU>(),
                                 make_shared<nn::Dropout>(0.2), make_shared<nn::Linear>(128, 10)});
}

// Standardised Fashion-MNIST, the first n training images (loaded once).
nn::DatasetPtr fashion(int64_t n) {
  static nn::DatasetPtr cached;
  static int64_t cached_n = -1;
  if (cached_n != n) {
    auto tr = nn::take(nn::load_fashion_mnist("train"), n);
    nn::Normalizer norm(nn::Normalizer::Mode::Global);
    norm.fit(tr->all().x, "train");
    cached = norm.transform(tr);
    cached_n = n;
  }
  return cached;
}

// A real run with every check of this file attached: O1 and the norm history on
// every step, O4 after every step, update ratios every 10 steps.
struct Run {
  std::vector<double> losses;
  std::vector<dbg::Finding> o1, o4, norms, lr, ratios;
  dbg::NormSeries grad_series, weight_series, ratio_series;
};
Run train_reference(double lr, int64_t n_steps, uint64_t seed) {
  gs::manual_seed(seed);
  auto model = reference_mlp();
  optim::Adam opt(model->parameters(), optim::AdamOptions(lr));
  nn::CrossEntropyLoss ce;
  nn::DataLoader loader(fashion(3000), nn::DataLoaderOptions().batch_size(64).shuffle(true).seed(seed));
  dbg::NormHistory history;
  dbg::UpdateRatioTracker ratios;
  ratios.attach(opt, *model, 10);
  dbg::Report o1, o4;
  Run r;
  while (static_cast<int64_t>(r.losses.size()) < n_steps)
    for (const nn::Batch& b : loader) {
      const int64_t step = static_cast<int64_t>(r.losses.size()) + 1;
      if (step > n_steps) break;
      opt.zero_grad();
      Tensor l = ce((*model)(b.x), b.y);
      l.backward();
      o1.add(dbg::check_gradient_health(*model));
      history.record(step, *model);
      opt.step();
      o4.add(dbg::check_finite_weights(*model));
      r.losses.push_back(l.item<double>());
    }
  r.o1 = o1.findings();
  r.o4 = o4.findings();
  r.norms = history.findings();
  r.lr = dbg::diagnose_learning_rate(r.losses);
  r.ratios = ratios.findings();
  r.grad_series = history.grad_series();
  r.weight_series = history.weight_series();
  r.ratio_series = ratios.series();
  return r;
}

const std::vector<std::string> kWeights = {"1.weight", "4.inner.1.weight", "5.inner.1.weight", "8.weight"};

}  // namespace

// ---- O1 gradient health ------------------------------------------------------------------

TEST_CASE("O1 check_gradient_health: healthy gradients give one info finding with the norms") {
  gs::manual_seed(1);
  auto net = make_shared<nn::Sequential>(make_shared<nn::Linear>(20, 32), make_shared<nn::ReLU>(),
                                         make_shared<nn::Linear>(32, 32), make_shared<nn::ReLU>(),
                                         make_shared<nn::Linear>(32, 5));
  backward_once(*net, 20, 5);
  const auto fs = dbg::check_gradient_health(*net);
  INFO(all_str(fs));
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].check == "O1");
  CHECK(fs[0].severity == dbg::Severity::Info);
  CHECK(ev(fs[0], "parameters with a gradient") == 6);
  const double ratio = ev(fs[0], "first / last weight gradient norm");
  CHECK(ratio == doctest::Approx(dbg::summarize(net->parameters()[0].grad()).norm /
                                 dbg::summarize(net->parameters()[4].grad()).norm));
  CHECK(ratio > 1e-3);
  CHECK(ratio < 70);
}

TEST_CASE("O1: no gradient at all, an unused layer, a frozen parameter") {
  gs::manual_seed(2);
  auto net = make_shared<nn::Sequential>(make_shared<nn::Linear>(4, 8), make_shared<nn::ReLU>(),
                                         make_shared<nn::Linear>(8, 3));
  auto fs = dbg::check_gradient_health(*net);  // before any backward
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].severity == dbg::Severity::Warning);
  CHECK(has(fs[0].title, "no trainable parameter has a gradient"));
  CHECK(ev(fs[0], "parameters without a gradient") == 4);

  // A layer registered but never used by the forward (a Sequential inside a bigger module).
  struct Net : nn::Module {
    std::shared_ptr<nn::Linear> used, unused;
    Net() : nn::Module("Net") {
      used = register_module("used", make_shared<nn::Linear>(4, 3));
      unused = register_module("unused", make_shared<nn::Linear>(4, 3));
    }
    Tensor forward(const Tensor& x) override { return (*used)(x); }
  };
  auto two = make_shared<Net>();
  two->used->named_parameters()[1].second.requires_grad_(false);  // a frozen bias: not judged
  backward_once(*two, 4, 3);
  fs = dbg::check_gradient_health(*two);
  INFO(all_str(fs));
  const auto missing = of(fs, "O1", dbg::Severity::Warning);
  REQUIRE(missing.size() == 2);
  CHECK(missing[0].parameter == "unused.weight");
  CHECK(missing[1].parameter == "unused.bias");
  CHECK(missing[0].module == "unused (Linear)");
  CHECK(missing[0].shape == "[3, 4]");
  CHECK(ev(missing[0], "gradient defined") == 0);
  CHECK(has(missing[0].cause, "detach"));
  CHECK(for_param(fs, "used.bias") == nullptr);
}

TEST_CASE("O1: NaN/Inf gradients are errors, tiny and huge norms warnings, with the parameter named") {
  gs::manual_seed(3);
  auto net = make_shared<nn::Sequential>(make_shared<nn::Linear>(4, 8), make_shared<nn::ReLU>(),
                                         make_shared<nn::Linear>(8, 3));
  backward_once(*net, 4, 3);
  auto ps = net->named_parameters();
  Tensor g = gs::zeros({8, 4});
  g.data_ptr<float>()[5] = NAN;
  g.data_ptr<float>()[6] = INFINITY;
  ps[0].second.set_grad(g);
  ps[1].second.set_grad(gs::full({8}, 1e-10));
  ps[3].second.set_grad(gs::full({3}, 1e4));
  const auto fs = dbg::check_gradient_health(*net);
  INFO(all_str(fs));
  const dbg::Finding* nan = for_param(fs, "0.weight");
  REQUIRE(nan != nullptr);
  CHECK(nan->severity == dbg::Severity::Error);
  CHECK(nan->module == "0 (Linear)");
  CHECK(ev(*nan, "NaN values") == 1);
  CHECK(ev(*nan, "Inf values") == 1);
  const dbg::Finding* tiny = for_param(fs, "0.bias");
  REQUIRE(tiny != nullptr);
  CHECK(tiny->severity == dbg::Severity::Warning);
  CHECK(has(tiny->title, "vanishing"));
  CHECK(ev(*tiny, "gradient norm") == doctest::Approx(1e-10 * std::sqrt(8.0)));
  CHECK_FALSE(has(tiny->cause, "BatchNorm"));  // the note on biases before a BatchNorm only when there is one
  const dbg::Finding* huge = for_param(fs, "2.bias");
  REQUIRE(huge != nullptr);
  CHECK(has(huge->title, "exploding"));
  CHECK(ev(*huge, "gradient norm") == doctest::Approx(1e4 * std::sqrt(3.0)));
}

TEST_CASE("O1 across depth: a deep sigmoid stack vanishes (B17), N(0,1) weights explode (B16)") {
  gs::manual_seed(4);
  std::vector<nn::ModulePtr> layers;
  for (int i = 0; i < 10; ++i) {
    layers.push_back(make_shared<nn::Linear>(32, 32));
    layers.push_back(make_shared<nn::Sigmoid>());
  }
  layers.push_back(make_shared<nn::Linear>(32, 10));
  auto deep = make_shared<nn::Sequential>(layers);
  backward_once(*deep, 32, 10);
  auto fs = dbg::check_gradient_health(*deep);
  INFO(all_str(fs));
  auto w = of(fs, "O1", dbg::Severity::Warning);
  std::vector<dbg::Finding> depth;
  for (const auto& f : w)
    if (has(f.title, "vanish towards the input")) depth.push_back(f);
  REQUIRE(depth.size() == 1);
  CHECK(depth[0].parameter == "0.weight");
  CHECK(depth[0].module == "0 (Linear) .. 20 (Linear)");
  CHECK(ev(depth[0], "first / last") < 1e-3);
  CHECK(ev(depth[0], "weights between them") == 11);
  CHECK(has(depth[0].cause, "sigmoid"));
  // The first layers' own norms are below 1e-7 too: each is named.
  const dbg::Finding* first0 = for_param(w, "0.weight");
  REQUIRE(first0 != nullptr);
  CHECK(has(first0->title, "is vanishing"));
  CHECK(ev(*first0, "gradient norm") < 1e-7);
  CHECK(for_param(w, "20.weight") == nullptr);  // the last layer's gradient is fine
  MESSAGE("B17 (10 sigmoid layers): first/last weight gradient norm = " << ev(depth[0], "first / last") << ", "
                                                                        << w.size() - 1 << " parameters vanishing");

  // The same depth with ReLU and skip connections is healthy.
  std::vector<nn::ModulePtr> res;
  for (int i = 0; i < 10; ++i) {
    auto inner = make_shared<nn::Sequential>(make_shared<nn::ReLU>(), make_shared<nn::Linear>(32, 32));
    res.push_back(make_shared<nn::Residual>(inner));
  }
  res.push_back(make_shared<nn::Linear>(32, 10));
  auto resnet = make_shared<nn::Sequential>(res);
  backward_once(*resnet, 32, 10);
  CHECK_FALSE(any_fires(dbg::check_gradient_health(*resnet)));

  gs::manual_seed(5);
  // Five N(0, 1) layers (784-256-256-256-256-10): activations grow ~sqrt(fan_in) per layer, every
  // weight gradient is ~1e5 (measured 7e4-3e5 over 4 seeds; with three layers only ~1e3).
  std::vector<nn::ModulePtr> ls;
  for (int64_t i = 0, in = 784; i < 4; ++i, in = 256) {
    ls.push_back(make_shared<nn::Linear>(in, 256));
    ls.push_back(make_shared<nn::ReLU>());
  }
  ls.push_back(make_shared<nn::Linear>(256, 10));
  auto big = make_shared<nn::Sequential>(ls);
  for (size_t i = 0; i < ls.size(); i += 2) big->at<nn::Linear>(i)->inject_bug(nn::Bug::B16);
  backward_once(*big, 784, 10, 64);
  fs = dbg::check_gradient_health(*big);
  INFO(all_str(fs));
  w = of(fs, "O1", dbg::Severity::Warning);
  REQUIRE_FALSE(w.empty());
  const dbg::Finding* first = for_param(w, "0.weight");
  REQUIRE(first != nullptr);
  CHECK(has(first->title, "exploding"));
  CHECK(ev(*first, "gradient norm") > 1e4);
  CHECK(has(first->cause, "weights too large"));
  for (const char* p : {"2.weight", "4.weight", "6.weight", "8.weight"}) CHECK(for_param(w, p) != nullptr);
  MESSAGE("B16: ||grad 0.weight|| = " << ev(*first, "gradient norm"));
}

// ---- O2 / O3 norm histories ----------------------------------------------------------------

namespace {
// A tiny model whose gradients and weights a test sets by hand, step by step.
struct Scripted {
  std::shared_ptr<nn::Linear> lin = make_shared<nn::Linear>(4, 3);
  std::mt19937 gen{7};
  std::normal_distribution<double> z{0.0, 0.1};
  // Gradients of norm ~`scale` (10% noise); weights of norm ~`wnorm`.
  void set(double scale, double wnorm = 1.0) {
    for (auto& [name, p] : lin->named_parameters()) {
      const double n = std::sqrt(static_cast<double>(p.numel()));
      p.set_grad(gs::full(p.shape(), scale * (1.0 + z(gen)) / n));
      gs::NoGradGuard ng;
      p.detach().fill_(wnorm / n);
    }
  }
};
}  // namespace

TEST_CASE("O2 NormHistory: a heavy-tailed norm's run of high records, and one layer's jump alone, are info") {
  // Small-batch noise: most records near 1, one in four between 8 and 20. Five records in a row at
  // 15x the window's median (as batches of 4 give) stay below 2x the window's largest (20): no new level.
  dbg::NormHistory noisy;
  Scripted m;
  for (int64_t s = 1; s <= 80; ++s) {
    const double tail = (s % 4 == 0) ? 8.0 + static_cast<double>(s % 13) : 1.0;
    m.set(s >= 60 && s < 65 ? 15.0 : tail);
    noisy.record(s, *m.lin);
  }
  auto fs = noisy.findings();
  INFO(all_str(fs));
  CHECK_FALSE(any_fires(fs));
  REQUIRE_FALSE(fs.empty());

  // The same 30x jump as below, in one of four layers' parameters: info, naming how many moved.
  auto net = std::make_shared<nn::Sequential>();
  for (int i = 0; i < 4; ++i) net->push_back(std::make_shared<nn::Linear>(4, 4));
  dbg::NormHistory one, all;
  for (int64_t s = 1; s <= 60; ++s) {
    int k = 0;
    for (auto& [name, p] : net->named_parameters()) {
      const double scale = s >= 40 && k == 0 ? 30.0 : 1.0;
      p.set_grad(gs::full(p.shape(), scale / std::sqrt(static_cast<double>(p.numel()))));
      ++k;
    }
    one.record(s, *net);
    for (auto& [name, p] : net->named_parameters())
      p.set_grad(gs::full(p.shape(), (s >= 40 ? 30.0 : 1.0) / std::sqrt(static_cast<double>(p.numel()))));
    all.record(s, *net);
  }
  fs = one.findings();
  INFO(all_str(fs));
  CHECK_FALSE(any_fires(fs));
  auto alone = titled(fs, "stayed up, alone");
  REQUIRE(alone.size() == 1);
  CHECK(alone[0].step == 40);
  CHECK(ev(alone[0], "parameters whose norm stayed up with it") == 1);
  // Every layer jumping together is instability: each parameter warns.
  fs = all.findings();
  auto w = of(fs, "O2", dbg::Severity::Warning);
  CHECK(w.size() == 8);
  REQUIRE_FALSE(w.empty());
  CHECK(ev(w[0], "parameters whose norm stayed up with it") == 8);
}

TEST_CASE("O2 NormHistory: a lone spike is info, a sustained one a warning, a non-finite norm an error") {
  dbg::NormHistory h;
  Scripted m;
  for (int64_t s = 1; s <= 60; ++s) {
    m.set(s == 30 ? 50.0 : 1.0);
    h.record(s, *m.lin);
  }
  auto fs = h.findings();
  INFO(all_str(fs));
  REQUIRE(fs.size() == 2);  // weight and bias, each an info
  CHECK_FALSE(any_fires(fs));
  CHECK(fs[0].check == "O2");
  CHECK(fs[0].parameter == "weight");
  CHECK(fs[0].step == 30);
  CHECK(ev(fs[0], "lone spikes") == 1);
  CHECK(ev(fs[0], "worst spike") == doctest::Approx(50.0).epsilon(0.3));
  CHECK(h.records() == 60);
  const auto gs_ = h.grad_series();
  REQUIRE(gs_.size() == 2);
  CHECK(gs_[0].first == "weight");
  CHECK(gs_[0].second.size() == 60);
  CHECK(gs_[0].second[29].first == 30);
  CHECK(gs_[0].second[29].second == doctest::Approx(50.0).epsilon(0.3));

  dbg::NormHistory up;
  for (int64_t s = 1; s <= 60; ++s) {
    m.set(s >= 40 ? 30.0 : 1.0);  // the norm jumps 30x at step 40 and stays
    up.record(s, *m.lin);
  }
  fs = up.findings();
  INFO(all_str(fs));
  auto w = of(fs, "O2", dbg::Severity::Warning);
  REQUIRE(w.size() == 2);
  CHECK(w[0].step == 40);
  CHECK(has(w[0].title, "stayed up"));
  CHECK(ev(w[0], "median of the 5 records from the spike") == doctest::Approx(30.0).epsilon(0.2));
  CHECK(ev(w[0], "gradient norm before") == doctest::Approx(1.0).epsilon(0.2));

  dbg::NormHistory bad;
  for (int64_t s = 1; s <= 30; ++s) {
    m.set(1.0);
    if (s == 25) m.lin->named_parameters()[0].second.set_grad(gs::full({3, 4}, NAN));
    bad.record(s, *m.lin);
  }
  fs = bad.findings();
  auto e = of(fs, "O2", dbg::Severity::Error);
  REQUIRE(e.size() == 1);
  CHECK(e[0].parameter == "weight");
  CHECK(e[0].step == 25);
}

TEST_CASE("O3 NormHistory: a weight norm growing steadily 10x+ warns; a stable or noisy one does not") {
  dbg::NormHistory grow, flat;
  Scripted m;
  for (int64_t s = 1; s <= 40; ++s) {
    m.set(1.0, std::pow(1.1, static_cast<double>(s - 1)));  // x1.1 per record: 41x in 40 records
    grow.record(s, *m.lin);
  }
  auto fs = of(grow.findings(), "O3");
  REQUIRE(fs.size() == 1);  // the weight; biases are not judged
  CHECK(fs[0].parameter == "weight");
  CHECK(fs[0].severity == dbg::Severity::Warning);
  CHECK(ev(fs[0], "last / first weight norm") == doctest::Approx(std::pow(1.1, 39.0)).epsilon(1e-3));
  CHECK(ev(fs[0], "fraction of records where it grew") == 1.0);
  CHECK(has(fs[0].fix, "weight decay"));
  const auto ws = grow.weight_series();
  CHECK(ws[0].second.front().second == doctest::Approx(1.0).epsilon(1e-5));

  for (int64_t s = 1; s <= 40; ++s) {
    m.set(1.0, s == 40 ? 20.0 : (s % 2 ? 1.0 : 0.5));  // 20x at the end, but in one jump: not steady growth
    flat.record(s, *m.lin);
  }
  CHECK(of(flat.findings(), "O3").empty());
}

TEST_CASE("O3 NormHistory: a weight that starts at zero grows out of nothing, judged from a default init's norm") {
  // The same steady growth, 0.04 to 0.9 (22x): after a start at exactly zero (a layer initialised to
  // zero on purpose) it counts from sqrt(fan_out / 3) = 1 for this (3, 4) weight: no warning; from a
  // first record of 0.04 it warns.
  dbg::NormHistory from_zero, from_small;
  Scripted a, b;
  a.set(1.0, 0.0);
  from_zero.record(0, *a.lin);
  for (int64_t s = 1; s <= 40; ++s) {
    const double w = 0.04 * std::pow(0.9 / 0.04, static_cast<double>(s - 1) / 39.0);
    a.set(1.0, w);
    from_zero.record(s, *a.lin);
    b.set(1.0, w);
    from_small.record(s, *b.lin);
  }
  CHECK(of(from_zero.findings(), "O3").empty());
  const auto fs = of(from_small.findings(), "O3");
  REQUIRE(fs.size() == 1);
  CHECK(ev(fs[0], "last / first weight norm") == doctest::Approx(0.9 / 0.04).epsilon(1e-3));
}

// ---- O4 non-finite weights ----------------------------------------------------------------

TEST_CASE("O4 check_finite_weights: an error per parameter holding NaN/Inf") {
  gs::manual_seed(6);
  auto net = make_shared<nn::Sequential>(make_shared<nn::Linear>(4, 8), make_shared<nn::ReLU>(),
                                         make_shared<nn::Linear>(8, 3));
  CHECK(dbg::check_finite_weights(*net).empty());
  auto ps = net->named_parameters();
  ps[0].second.data_ptr<float>()[3] = NAN;
  ps[0].second.data_ptr<float>()[4] = NAN;
  ps[3].second.data_ptr<float>()[0] = -INFINITY;
  const auto fs = dbg::check_finite_weights(*net);
  REQUIRE(fs.size() == 2);
  CHECK(fs[0].check == "O4");
  CHECK(fs[0].severity == dbg::Severity::Error);
  CHECK(fs[0].parameter == "0.weight");
  CHECK(fs[0].module == "0 (Linear)");
  CHECK(ev(fs[0], "NaN values") == 2);
  CHECK(ev(fs[0], "Inf values") == 0);
  CHECK(ev(fs[0], "non-finite fraction") == doctest::Approx(2.0 / 32.0));
  CHECK(fs[1].parameter == "2.bias");
  CHECK(ev(fs[1], "Inf values") == 1);
}

// ---- O6 learning rate ---------------------------------------------------------------------

TEST_CASE("O6 diagnose_learning_rate from synthetic loss histories") {
  std::mt19937 gen(2);
  std::normal_distribution<double> z(0.0, 0.25);
  std::vector<double> healthy, flat, nan;
  for (int t = 0; t < 400; ++t) {
    healthy.push_back((0.35 + 1.95 * std::exp(-t / 80.0)) * std::exp(t ? z(gen) : 0.0));
    flat.push_back(2.3 - 0.0001 * t + 0.02 * z(gen));
  }
  nan = healthy;
  nan[150] = NAN;
  CHECK(dbg::diagnose_learning_rate(healthy).empty());
  auto fs = dbg::diagnose_learning_rate(flat);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].check == "O6");
  CHECK(has(fs[0].title, "too low"));
  CHECK(ev(fs[0], "relative decrease") < 0.1);
  fs = dbg::diagnose_learning_rate(nan);
  REQUIRE(fs.size() == 1);
  CHECK(has(fs[0].title, "too high"));
  CHECK(ev(fs[0], "first NaN step") == 151);
}

TEST_CASE("O6's probe of units that died: alive at lr / 10 confirms, dead again rules out, a stalled probe cannot tell") {
  dbg::DeadUnitsProbe p;
  p.module = "3 (ReLU)";
  p.run_dead = 0.75;
  p.lr = 0.09;
  p.run_losses = {2.3, 1.0, 0.4, 0.3};
  p.probe_losses = {2.3, 1.2, 0.6, 0.5};  // fell 78% against the run's 87%
  SUBCASE("the units survive and the loss falls as far: the learning rate is too high") {
    p.probe_dead = 0.05;
    const dbg::Finding f = dbg::judge_dead_units_lr_probe(p);
    CHECK(f.severity == dbg::Severity::Warning);
    CHECK(f.is("O6", dbg::Kind::LrProbeConfirms));
    CHECK(f.module == "3 (ReLU)");
    CHECK(ev(f, "dead fraction at lr / 10") == 0.05);
    CHECK(has(f.title, "too high"));
  }
  SUBCASE("at the threshold the units die again: ruled out") {
    p.probe_dead = 0.7;
    const dbg::Finding f = dbg::judge_dead_units_lr_probe(p);
    CHECK(f.severity == dbg::Severity::Info);
    CHECK(f.is("O6", dbg::Kind::LrProbeRulesOut));
  }
  SUBCASE("alive but the loss fell less than half as far: units that barely moved say nothing") {
    p.probe_dead = 0.05;
    p.probe_losses = {2.3, 2.2, 2.0, 2.0};
    const dbg::Finding f = dbg::judge_dead_units_lr_probe(p);
    CHECK(f.severity == dbg::Severity::Info);
    CHECK(f.is("O6", dbg::Kind::LrProbeInconclusive));
  }
  SUBCASE("a probe that failed, or saw no input in the layer, is info") {
    p.failed = "the model's parameters changed since training began";
    CHECK(dbg::judge_dead_units_lr_probe(p).severity == dbg::Severity::Info);
    p.failed.clear();
    CHECK(dbg::judge_dead_units_lr_probe(p).severity == dbg::Severity::Info);  // probe_dead is NaN
  }
}

TEST_CASE("O6 UpdateRatioTracker: too large and never-updated weights; detach stops it") {
  gs::manual_seed(7);
  auto net = make_shared<nn::Sequential>(make_shared<nn::Linear>(8, 8), make_shared<nn::ReLU>(),
                                         make_shared<nn::Linear>(8, 3));
  auto params = net->parameters();
  // The last layer is left out of the optimizer: it never moves.
  optim::SGD opt({params[0], params[1]}, optim::SGDOptions(5.0));
  {
    dbg::UpdateRatioTracker t;
    t.attach(opt, *net, 2);
    for (int s = 0; s < 7; ++s) {
      opt.zero_grad();
      net->zero_grad();
      backward_once(*net, 8, 3);
      opt.step();
    }
    CHECK(t.measurements() == 4);  // steps 1, 3, 5, 7
    const auto series = t.series();
    REQUIRE(series.size() == 4);
    CHECK(series[0].second.size() == 4);
    CHECK(series[0].second[1].first == 3);
    const auto fs = t.findings();
    INFO(all_str(fs));
    const dbg::Finding* large = for_param(fs, "0.weight");
    REQUIRE(large != nullptr);
    CHECK(has(large->title, "too large"));
    CHECK(ev(*large, "median update/weight ratio") > 0.1);
    CHECK(ev(*large, "learning rate") == 5.0);
    const dbg::Finding* never = for_param(fs, "2.weight");
    REQUIRE(never != nullptr);
    CHECK(has(never->title, "never changed"));
    CHECK(has(never->cause, "not in the optimizer"));
    CHECK(for_param(fs, "0.bias") == nullptr);  // biases are not judged
    t.detach();
    CHECK_FALSE(t.attached());
    opt.step();
    CHECK(t.measurements() == 4);
    t.attach(opt, *net, 1);  // re-attaching starts afresh
  }                          // the destructor detaches: the optimizer steps on without it
  opt.step();
  CHECK(opt.steps_taken() == 9);
}

// ---- real runs -----------------------------------------------------------------------------

TEST_CASE("O1-O4, O6 on the reference MLP: healthy (Adam 1e-3) is silent, lr 0.1 (B24) and 1e-7 fire") {
  REQUIRE_FASHION_MNIST();
  const Run ok = train_reference(1e-3, 300, 11);
  INFO("healthy:\n" << all_str(ok.o1) << all_str(ok.norms) << all_str(ok.lr) << all_str(ok.ratios));
  CHECK_FALSE(any_fires(ok.o1));
  CHECK(ok.o4.empty());
  CHECK_FALSE(any_fires(ok.norms));  // lone first-layer spikes are info
  CHECK(ok.lr.empty());
  CHECK(ok.ratios.empty());
  REQUIRE(ok.ratio_series.size() == 10);
  for (const auto& [name, s] : ok.ratio_series) {
    if (std::find(kWeights.begin(), kWeights.end(), name) == kWeights.end()) continue;
    INFO(name);
    CHECK(s.size() == 30);  // steps 1, 11, ..., 291
    CHECK(s[1].first == 11);
    CHECK(median(values(s)) > 1e-3);  // measured 3e-3-8e-3
    CHECK(median(values(s)) < 2e-2);
  }
  REQUIRE(ok.weight_series.size() == 10);
  CHECK(ok.weight_series[0].second.size() == 300);

  const Run b24 = train_reference(0.1, 150, 11);
  INFO("B24:\n" << all_str(b24.o1) << all_str(b24.norms) << all_str(b24.lr) << all_str(b24.ratios));
  const auto lr = of(b24.lr, "O6", dbg::Severity::Warning);
  REQUIRE(lr.size() == 1);
  CHECK(has(lr[0].title, "too high"));
  CHECK(ev(lr[0], "spikes above the first loss") >= 1);
  const auto o3 = of(b24.norms, "O3", dbg::Severity::Warning);
  const dbg::Finding* first = for_param(o3, "1.weight");
  REQUIRE(first != nullptr);
  CHECK(ev(*first, "last / first weight norm") > 10.0);  // measured 31x by step 100
  MESSAGE("B24: 1.weight norm grew " << ev(*first, "last / first weight norm") << "x in 150 steps");
  // The update/weight ratio stays inside [1e-5, 1e-1] for B24: the weights grow as fast as the steps
  // (BatchNorm makes the first layer's scale free). Only the very first step is far too large.
  CHECK(b24.ratios.empty());
  for (const auto& [name, s] : b24.ratio_series)
    if (name == "1.weight") CHECK(s[0].second > 1.0);

  const Run low = train_reference(1e-7, 150, 11);
  INFO("lr 1e-7:\n" << all_str(low.lr) << all_str(low.ratios));
  const auto flat = of(low.lr, "O6", dbg::Severity::Warning);
  REQUIRE(flat.size() == 1);
  CHECK(has(flat[0].title, "too low"));
  const auto small = of(low.ratios, "O6", dbg::Severity::Warning);
  REQUIRE(small.size() == kWeights.size());
  for (const auto& f : small) {
    INFO(f.parameter);
    CHECK(has(f.title, "too small"));
    CHECK(ev(f, "median update/weight ratio") < 1e-5);  // measured 1.1e-6-2.6e-6
    CHECK(ev(f, "learning rate") == 1e-7);
  }
}

TEST_CASE("SummaryCache: one pass per tensor while its data is unchanged, a fresh one after a write") {
  Tensor t = gs::arange(1000.0, gs::TensorOptions(gs::kFloat32));  // 0..999
  const dbg::TensorSummary plain = dbg::summarize(t);
  {
    dbg::SummaryCache cache;
    const dbg::TensorSummary a = dbg::summarize(t);
    const dbg::TensorSummary b = dbg::summarize(t);
    CHECK(cache.hits() == 1);
    CHECK(a.norm == plain.norm);
    CHECK(b.max == 999.0);
    t.mul_(2.0);  // an in-place write bumps the storage's version: the cached summary is stale
    const dbg::TensorSummary c = dbg::summarize(t);
    CHECK(cache.hits() == 1);
    CHECK(c.max == 1998.0);
    CHECK(c.norm == doctest::Approx(2.0 * plain.norm));
    // Another tensor of the same size and dtype is not confused with t.
    const dbg::TensorSummary d = dbg::summarize(gs::zeros({1000}, gs::TensorOptions(gs::kFloat32)));
    CHECK(d.max == 0.0);
    // A view that starts at t's address but is shorter is not taken for t.
    CHECK(dbg::summarize(t.narrow(0, 0, 500)).max == 998.0);
    CHECK(cache.hits() == 1);
  }
  // Outside the scope nothing is remembered.
  t.fill_(1.0);
  CHECK(dbg::summarize(t).max == 1.0);
}

TEST_CASE(
    "sampled_finite on float16 and bfloat16 gradients: every finite one passes, a non-finite value anywhere fails") {
  // A 16-bit tensor is read whole, in its own width: the sample's float32 and float64 reads would
  // run past its end.
  for (gs::DType dt : {gs::kFloat16, gs::kBFloat16}) {
    for (const gs::Shape& shape : std::vector<gs::Shape>{{128, 784}, {5000, 10}}) {
      const Tensor clean = gs::randn(shape).to(dt);
      INFO(gs::dtype_name(dt), " ", gs::shape_str(shape));
      CHECK(dbg::sampled_finite(clean));
      for (int64_t at : {int64_t{1}, clean.numel() / 2 + 3, clean.numel() - 1}) {
        Tensor g = clean.clone();
        g.view({-1}).narrow(0, at, 1).fill_(INFINITY);
        CHECK_FALSE(dbg::sampled_finite(g));
      }
    }
  }
}

TEST_CASE("sampled_finite: a NaN row or a NaN column of a large gradient is found, whatever its index") {
  // The shapes of linear layers' weight gradients: [out, in], and [rows, a short last dim]; 1-D
  // tensors are read whole (a "column" is then one element).
  for (const gs::Shape& shape : std::vector<gs::Shape>{{128, 784}, {784, 128}, {10, 1000}, {5000, 10}, {4097}}) {
    const int64_t rows = shape.size() == 2 ? shape[0] : 1, cols = shape.back();
    const Tensor clean = gs::randn(shape);
    CHECK(dbg::sampled_finite(clean));
    for (int64_t r : {int64_t{0}, rows / 3, rows - 1}) {
      Tensor g = clean.clone();
      float* p = static_cast<float*>(g.raw_data());
      for (int64_t c = 0; c < cols; ++c) p[r * cols + c] = NAN;
      INFO("NaN row ", r, " of ", gs::shape_str(shape));
      CHECK_FALSE(dbg::sampled_finite(g));
    }
    for (int64_t c : {int64_t{0}, int64_t{1}, cols / 2 + 1, cols - 1}) {
      Tensor g = clean.clone();
      float* p = static_cast<float*>(g.raw_data());
      for (int64_t r = 0; r < rows; ++r) p[r * cols + c] = NAN;
      INFO("NaN column ", c, " of ", gs::shape_str(shape));
      CHECK_FALSE(dbg::sampled_finite(g));
    }
  }
  // A convolution's weight gradient [out, in, kh, kw]: one output channel's whole slice (a row),
  // or one (in, kh, kw) entry in every output channel (a column).
  const Tensor conv = gs::randn({64, 32, 3, 3});
  CHECK(dbg::sampled_finite(conv));
  for (int64_t o : {int64_t{0}, int64_t{37}}) {
    Tensor g = conv.clone();
    g.narrow(0, o, 1).fill_(NAN);
    CHECK_FALSE(dbg::sampled_finite(g));
  }
  for (int64_t e : {int64_t{0}, int64_t{200}, int64_t{32 * 9 - 1}}) {
    Tensor g = conv.clone();
    float* p = static_cast<float*>(g.raw_data());
    for (int64_t o = 0; o < 64; ++o) p[o * 32 * 9 + e] = INFINITY;
    CHECK_FALSE(dbg::sampled_finite(g));
  }
  // What it leaves to the sampled steps' full read: one NaN away from the first row and column.
  Tensor lone = gs::randn({128, 784});
  static_cast<float*>(lone.raw_data())[5 * 784 + 9] = NAN;
  CHECK(dbg::sampled_finite(lone));
  CHECK_FALSE(dbg::all_finite(lone));
}

// ---- O10: the loss scaler's trace ----------------------------------------------------------

namespace {

// A GradScaler stepping a one-parameter SGD through a sequence of updates, each clean or with an
// inf gradient; the trace's findings after it.
std::vector<dbg::Finding> scaler_findings(const std::vector<bool>& inf, optim::GradScalerOptions o = {}) {
  Tensor p = gs::tensor(std::vector<double>{1.0}, {1}, gs::TensorOptions(gs::kFloat32)).requires_grad_();
  optim::SGD opt({p}, optim::SGDOptions(0.01));
  optim::GradScaler s(o);
  dbg::ScalerTrace trace;
  trace.attach(s);
  for (bool bad : inf) {
    opt.zero_grad();
    const double g = bad ? std::numeric_limits<double>::infinity() : 0.5;
    s.scale((p * gs::tensor(std::vector<double>{g}, {1}, gs::TensorOptions(gs::kFloat32))).sum()).backward();
    s.step(opt);
    s.update();
  }
  REQUIRE(trace.records().size() == inf.size());
  return trace.findings();
}

dbg::Kind only_kind(const std::vector<dbg::Finding>& fs) {
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].check == "O10");
  return fs[0].kind;
}

std::vector<bool> seq(std::initializer_list<std::pair<int, bool>> runs) {
  std::vector<bool> v;
  for (auto [n, bad] : runs) v.insert(v.end(), static_cast<size_t>(n), bad);
  return v;
}

}  // namespace

TEST_CASE("O10: a few backoffs while the scale calibrates, and the periodic overflow of growth, are info") {
  // 5 backoffs from 2^16, then clean steps; growth every 10 clean steps with an overflow after each.
  std::vector<bool> v = seq({{5, true}, {40, false}});
  for (int k = 0; k < 4; ++k) {
    const std::vector<bool> more = seq({{10, false}, {1, true}});
    v.insert(v.end(), more.begin(), more.end());
  }
  const auto fs = scaler_findings(v, optim::GradScalerOptions().growth_interval(10));
  CHECK(only_kind(fs) == dbg::Kind::ScalerSummary);
  CHECK_FALSE(fs[0].fires());
  CHECK(fs[0].title.find("the first 5") != std::string::npos);
  // A run without any backoff: info too.
  CHECK(only_kind(scaler_findings(seq({{30, false}}))) == dbg::Kind::ScalerSummary);
}

TEST_CASE("O10: 10 backoffs in a row warn, 9 do not; a scale below 1 warns") {
  // From 2^20: ten halvings end at 2^10, far above the floor.
  const auto o = optim::GradScalerOptions().init_scale(1048576.0);
  const auto nine = scaler_findings(seq({{3, false}, {9, true}, {10, false}}), o);
  CHECK(only_kind(nine) == dbg::Kind::ScalerSummary);
  const auto ten = scaler_findings(seq({{3, false}, {10, true}, {10, false}}), o);
  CHECK(only_kind(ten) == dbg::Kind::ScaleHalving);
  CHECK(ten[0].fires());
  CHECK(ten[0].title.find("halved 10 updates in a row") != std::string::npos);
  // From 4: three halvings reach 0.5.
  const auto low = scaler_findings(seq({{2, false}, {3, true}, {5, false}}), optim::GradScalerOptions().init_scale(4.0));
  CHECK(only_kind(low) == dbg::Kind::ScaleCollapsed);
  CHECK(low[0].title.find("0.5") != std::string::npos);
  // Two halvings from 4 stop at 1: not below the floor.
  const auto one = scaler_findings(seq({{2, false}, {2, true}, {5, false}}), optim::GradScalerOptions().init_scale(4.0));
  CHECK(only_kind(one) == dbg::Kind::ScalerSummary);
}

TEST_CASE("O10: most steps skipped after the calibration warns; half of them does not") {
  // Alternating clean / inf with growth after every clean step keeps the scale up: 50% skipped.
  const auto o = optim::GradScalerOptions().growth_interval(1);
  std::vector<bool> half, most;
  for (int k = 0; k < 15; ++k) half.insert(half.end(), {false, true});
  CHECK(only_kind(scaler_findings(half, o)) == dbg::Kind::ScalerSummary);
  // Two inf for every clean step (2/3 skipped), never 10 in a row, scale above 1.
  for (int k = 0; k < 10; ++k) most.insert(most.end(), {false, true, true});
  const auto fs = scaler_findings(most, optim::GradScalerOptions().growth_interval(1).init_scale(1e30));
  CHECK(only_kind(fs) == dbg::Kind::StepsSkipped);
  // Too few updates to judge: silent.
  std::vector<bool> few;
  for (int k = 0; k < 5; ++k) few.insert(few.end(), {false, true, true});
  CHECK(only_kind(scaler_findings(few, optim::GradScalerOptions().growth_interval(1).init_scale(1e30))) ==
        dbg::Kind::ScalerSummary);
}

TEST_CASE("metric_step_records: each plateau scheduler and early stopper's metrics, mode and the steps it acted on") {
  auto w = gs::randn({2, 2}).requires_grad_(true);
  optim::SGD opt({w}, optim::SGDOptions(0.1));
  const uint64_t start = optim::metric_step_tick();
  optim::ReduceLROnPlateau sched(opt, optim::ReduceLROnPlateauOptions().mode(optim::Mode::Min).patience(0));
  optim::EarlyStopping stopper(2, 0.0, optim::Mode::Max);
  for (double m : {0.5, 0.6, 0.7}) {
    sched.step(m);  // never below its first value: a cut after steps 2 and 3
    stopper.step(m);
  }
  stopper.step(0.6);
  stopper.step(0.6);  // two steps without a new best: stop (after step 5)
  stopper.step(0.6);
  std::vector<optim::MetricStepRecord> mine;
  for (const auto& r : optim::metric_step_records())
    if (r.first_tick >= start) mine.push_back(r);
  REQUIRE(mine.size() == 2);
  const auto& p = mine[0].owner == "ReduceLROnPlateau" ? mine[0] : mine[1];
  const auto& e = mine[0].owner == "ReduceLROnPlateau" ? mine[1] : mine[0];
  CHECK(p.mode == optim::Mode::Min);
  CHECK(p.metrics == std::vector<double>{0.5, 0.6, 0.7});
  CHECK(p.acted == std::vector<int64_t>{1, 2});
  CHECK(e.mode == optim::Mode::Max);
  CHECK(e.metrics.size() == 6);
  CHECK(e.acted == std::vector<int64_t>{4});  // said stop once, at its fifth step
  CHECK(optim::metric_step_tick() - start == 9);
  // After reset() the stopper's steps start a record of their own, which a run begun now reads.
  const uint64_t again = optim::metric_step_tick();
  stopper.reset();
  stopper.step(0.5);
  int fresh = 0;
  for (const auto& r : optim::metric_step_records())
    if (r.first_tick >= again) {
      ++fresh;
      CHECK(r.metrics == std::vector<double>{0.5});
    }
  CHECK(fresh == 1);
}

TEST_CASE("O6 metric direction: Mode::Min fed the accuracy, Mode::Max fed the loss; the right modes and a loss pass") {
  dbg::TrainingHistory h;
  h.epoch_val_accuracy = {0.60, 0.70, 0.76, 0.80, 0.82, 0.83};
  h.epoch_val_loss = {1.00, 0.80, 0.65, 0.55, 0.50, 0.48};
  h.epoch_train_loss = {1.10, 0.85, 0.70, 0.58, 0.52, 0.49};
  auto record = [](optim::Mode mode, std::vector<double> m, std::vector<int64_t> acted) {
    optim::MetricStepRecord r;
    r.owner = "ReduceLROnPlateau";
    r.mode = mode;
    r.metrics = std::move(m);
    r.acted = std::move(acted);
    return r;
  };
  auto judged = [&](const optim::MetricStepRecord& r) { return dbg::diagnose_metric_direction({r}, h); };
  // Mode::Min on the accuracy (as a fraction, or in %, computed on other rows: a point or two apart).
  std::vector<dbg::Finding> fs = judged(record(optim::Mode::Min, h.epoch_val_accuracy, {2, 4}));
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].severity == dbg::Severity::Warning);
  CHECK(fs[0].kind == dbg::Kind::MetricDirectionInverted);
  CHECK(ev(fs[0], "times it cut the learning rate") == 2);
  fs = judged(record(optim::Mode::Min, {61.0, 69.5, 77.0, 79.0, 83.0, 82.5}, {2}));
  REQUIRE(fs.size() == 1);
  CHECK(has(fs[0].title, "in %"));
  // Not acted yet: info.
  fs = judged(record(optim::Mode::Min, h.epoch_val_accuracy, {}));
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].severity == dbg::Severity::Info);
  // Mode::Max on the validation loss.
  fs = judged(record(optim::Mode::Max, h.epoch_val_loss, {3}));
  REQUIRE(fs.size() == 1);
  CHECK(has(fs[0].title, "the validation loss"));
  // The right modes, an error rate in Mode::Min, and Mode::Min on the loss: nothing.
  CHECK(judged(record(optim::Mode::Max, h.epoch_val_accuracy, {})).empty());
  CHECK(judged(record(optim::Mode::Min, h.epoch_val_loss, {5})).empty());
  CHECK(judged(record(optim::Mode::Min, {0.40, 0.30, 0.24, 0.20, 0.18, 0.17}, {})).empty());
  // Too few steps matched with epochs.
  CHECK(judged(record(optim::Mode::Min, {0.60, 0.70, 0.76}, {2})).empty());
  // Without an accuracy: a rising score in [0, 1] while the validation loss falls, in Mode::Min, warns;
  // the validation loss itself rising (overfitting, Mode::Min as it should be) does not.
  h.epoch_val_accuracy.clear();
  fs = judged(record(optim::Mode::Min, {0.31, 0.42, 0.50, 0.55, 0.58, 0.60}, {3}));
  REQUIRE(fs.size() == 1);
  CHECK(has(fs[0].title, "rises as the validation loss falls"));
  h.epoch_val_loss = {0.50, 0.52, 0.55, 0.60, 0.66, 0.70};
  CHECK(judged(record(optim::Mode::Min, h.epoch_val_loss, {3})).empty());
  CHECK(judged(record(optim::Mode::Min, {0.31, 0.42, 0.50, 0.55, 0.58, 0.60}, {3})).empty());
}

TEST_CASE(
    "O8 outcome: a tenth of the rate beats another run by McNemar's z on accuracy, or by the loss at no cost in "
    "accuracy") {
  const dbg::OptimCheckOptions o;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(dbg::detail::mcnemar_z(14, 2) == doctest::Approx(3.0));
  CHECK(dbg::detail::mcnemar_z(0, 0) == 0.0);
  // Accuracy: 14 examples fixed against 2 broken (z 3) beats; 8 against 4 (z 1.15) does not by itself.
  CHECK(dbg::tenth_rate_beats(0.30, 0.29, 0.90, 0.93, 14, 2, 0.5, o));
  CHECK_FALSE(dbg::tenth_rate_beats(0.30, 0.29, 0.90, 0.91, 8, 4, 0.5, o));
  // ... but a loss 30% lower with a paired z of 2.5 at no lower accuracy does; with a lower accuracy it does not.
  CHECK(dbg::tenth_rate_beats(0.30, 0.21, 0.90, 0.91, 8, 4, 2.5, o));
  CHECK_FALSE(dbg::tenth_rate_beats(0.30, 0.21, 0.91, 0.90, 4, 8, 2.5, o));
  // Without accuracies: the loss 10% lower or more, with z >= 2.
  CHECK(dbg::tenth_rate_beats(1.0, 0.85, nan, nan, -1, -1, 3.0, o));
  CHECK_FALSE(dbg::tenth_rate_beats(1.0, 0.95, nan, nan, -1, -1, 3.0, o));
  CHECK_FALSE(dbg::tenth_rate_beats(1.0, 0.85, nan, nan, -1, -1, 1.5, o));
  // Both the run and the repeat at the run's own rate must be beaten.
  dbg::RateOutcome m;
  m.run_loss = 1.0;
  m.tenth_loss = 0.8;
  m.run_loss_z = 3.0;
  CHECK_FALSE(dbg::tenth_rate_ends_better(m, o));  // no repeat measured
  m.repeat_loss = 0.82;
  m.repeat_loss_z = 0.4;
  CHECK_FALSE(dbg::tenth_rate_ends_better(m, o));  // the repeat at the run's rate does as well: the loop's part
  m.repeat_loss = 0.95;
  m.repeat_loss_z = 2.6;
  CHECK(dbg::tenth_rate_ends_better(m, o));
}
