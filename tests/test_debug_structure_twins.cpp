// Healthy model and data structures that a check before training misread, each against the fault the
// check is for:
//   - a contrastive model whose output is the (B, B) similarity of two views: M6 says the coupling is
//     by design (the output's width follows the batch), while a softmax over the batch stays an error;
//   - categorical codes stored among float features and cast to indices for an embedding: M13's
//     jitter leaves those columns alone instead of failing the gate (W2), and D5 judges the first layer
//     that reads numbers, not the codes;
//   - integer sequences from a finite set, where a held-out row meets a training row by chance: D13 is
//     info at that rate and warns on a split that copied training rows;
//   - a zero-initialised last layer trained with a loss function: O1's vanishing gradient at the first
//     step is info;
//   - sliding windows of one stationary series: D14 counts independent windows, not rows;
//   - a missing-value code (-999) scaled with the real values: D5 names it; a zero-inflated feature is
//     no such code;
//   - a graph convolution over one fixed set of nodes (Kipf and Welling, 2017), the whole graph one
//     batch: M6's coupling is its design and the checks on parts of the batch are left out (no W2
//     error); a softmax over the batch in a model that takes any batch stays an error (above).
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::first_of;
using dtest::Split;

namespace {

// Rows (B, 12) hold two views of one example (6 features each); both go through one encoder, and the
// output is the cosine similarity of every first view with every second view (B, B).
struct TwoViews : nn::Module {
  std::shared_ptr<nn::Linear> a, b;
  bool softmax_over_batch;  // the fault: a (B, 8) embedding normalised over the batch instead
  explicit TwoViews(bool fault = false) : Module("TwoViews"), softmax_over_batch(fault) {
    a = register_module("a", std::make_shared<nn::Linear>(6, 32));
    b = register_module("b", std::make_shared<nn::Linear>(32, 8));
  }
  Tensor embed(const Tensor& v) {
    const Tensor e = (*b)(relu((*a)(v)));
    return e / sqrt(sum(square(e), {1}, true) + 1e-8);
  }
  Tensor forward(const Tensor& x) override {
    if (softmax_over_batch) return softmax((*b)(relu((*a)(x.narrow(1, 0, 6)))), 0);
    return matmul(embed(x.narrow(1, 0, 6)), embed(x.narrow(1, 6, 6)).t()) / 0.5;
  }
};

}  // namespace

TEST_CASE("M6 on a (B, B) similarity of two views is info; a softmax over the batch is still an error") {
  manual_seed(15);
  Generator g(15);
  const Tensor base = randn({16, 6}, {}, &g);
  const Tensor x = cat({base + 0.1 * randn({16, 6}, {}, &g), base + 0.1 * randn({16, 6}, {}, &g)}, 1);
  auto pairs = std::make_shared<TwoViews>();
  const std::vector<debug::Finding> f = debug::batch_mixing_test(*pairs, x);
  REQUIRE(f.size() == 1);
  CHECK(f[0].kind == debug::Kind::BatchMixing);
  CHECK_MESSAGE(!f[0].fires(), f[0].str());

  auto mixed = std::make_shared<TwoViews>(true);
  const std::vector<debug::Finding> m = debug::batch_mixing_test(*mixed, x);
  REQUIRE(m.size() == 1);
  CHECK(m[0].kind == debug::Kind::BatchMixing);
  CHECK(m[0].severity == debug::Severity::Error);
}

namespace {

// Tabular rows (B, 3): a product code 0..11 stored as a number, then two standardised features; the
// code is cast to an index for an embedding in forward.
struct Coded : nn::Module {
  std::shared_ptr<nn::Embedding> product = register_module("product", std::make_shared<nn::Embedding>(12, 4));
  std::shared_ptr<nn::Linear> a = register_module("a", std::make_shared<nn::Linear>(6, 16));
  std::shared_ptr<nn::Linear> b = register_module("b", std::make_shared<nn::Linear>(16, 1));
  Coded() : Module("Coded") {}
  Tensor forward(const Tensor& x) override {
    const Tensor code = x.narrow(1, 0, 1).squeeze(1).to(kInt64);
    return (*b)(relu((*a)(cat({(*product)(code), x.narrow(1, 1, 2)}, 1))));
  }
};

}  // namespace

TEST_CASE("the gate on categorical codes stored among float features: M13 runs, no W2 error") {
  manual_seed(21);
  Generator g(21);
  const Tensor code = randint(0, 12, {64, 1}, kInt64, &g).to(kFloat32);
  code.narrow(0, 0, 1).fill_(11.0);  // the largest code is in the batch
  // Raw numeric columns (std 20): a jitter of 0.1 x the batch's spread would push code 11 off the table.
  const Tensor x = cat({code, 20.0 * randn({64, 2}, {}, &g)}, 1);
  const Tensor y = 0.3 * code + x.narrow(1, 1, 1);
  auto model = std::make_shared<Coded>();
  const debug::LossFunction mse = [](const Tensor& o, const Tensor& t) { return square(o - t).mean(); };
  const debug::Report r = debug::pretrain_gate(*model, x, y, mse);
  for (const debug::Finding& f : r.findings()) {
    CHECK_MESSAGE(f.check != "W2", f.str());
    CHECK_MESSAGE(!(f.check == "M13" && f.fires()), f.str());  // no step across a code in the directions
  }
  CHECK(r.ran("M13"));
}

namespace {

// Sequences of 6 tokens from 8 (262,144 of them): 3,200 training rows and 800 held out, each drawn
// independently; `copied` held-out rows are then replaced by training rows.
std::vector<debug::Finding> sequence_mix(int64_t copied) {
  Generator g(9);
  const Tensor all = randint(0, 8, {4000, 6}, kInt64, &g).to(kFloat32);
  const Tensor labels = randint(0, 2, {4000}, kInt64, &g);
  Tensor val = all.narrow(0, 3200, 800).clone();
  if (copied > 0) val.narrow(0, 0, copied).copy_(all.narrow(0, 0, copied));
  nn::TensorDataset train(all.narrow(0, 0, 3200), labels.narrow(0, 0, 3200));
  nn::TensorDataset held(val, labels.narrow(0, 3200, 800));
  return debug::check_train_test_mix(train, held);
}

}  // namespace

TEST_CASE("D13 on integer sequences from a finite set: the overlap chance makes is info; copied rows warn") {
  const std::vector<debug::Finding> chance = sequence_mix(0);
  REQUIRE(chance.size() == 1);
  CHECK(dtest::ev(chance[0], "mixed fraction") > 0.01);  // above the fixed line: 3,200 / 262,144 = 1.2%
  CHECK_MESSAGE(!chance[0].fires(), chance[0].str());

  const std::vector<debug::Finding> copied = sequence_mix(40);  // 5% of the held-out rows
  REQUIRE(copied.size() == 1);
  CHECK_MESSAGE(copied[0].fires(), copied[0].str());
}

TEST_CASE("a zero-initialised last layer trained with a loss function: O1 at the first step is info") {
  manual_seed(4);
  const Split d = dtest::split(4, 1.5);
  auto model = std::make_shared<dtest::Mlp>();
  {
    NoGradGuard ng;
    model->fc3->weight.zero_();
    model->fc3->bias.zero_();
  }
  const debug::LossFunction ce = [](const Tensor& o, const Tensor& t) { return nn::functional::cross_entropy(o, t); };
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 4; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = ce((*model)(b.x), b.y);
      l.backward();
      opt.step();
      s.step(l);
    }
    s.epoch();
  }
  const debug::RunReport r = s.finish();
  bool first_step_info = false;
  for (const debug::Finding& f : r.findings.findings())
    if (f.is("O1", debug::Kind::GradientVanishing)) {
      CHECK_MESSAGE(!f.fires(), f.str());
      first_step_info = first_step_info || f.title.find("first step only") != std::string::npos;
    }
  CHECK_MESSAGE(first_step_info, r.str(true));
}

namespace {

// Windows of 48 values cut at a stride of 1 from one AR(1) series (phi 0.97), scaled by `val_scale` after
// the split point: the first 3,152 windows train, the 752 after them validate.
std::vector<debug::Finding> window_drift(uint64_t seed, double val_scale) {
  Generator g(seed);
  const int64_t n = 4000, width = 48;
  const std::vector<float> e = randn({n + width}, {}, &g).to_vector<float>();
  std::vector<float> series(e.size());
  float v = 0.0f;
  for (size_t t = 0; t < e.size(); ++t) series[t] = v = 0.97f * v + e[t];
  for (size_t t = 3200; t < series.size(); ++t) series[t] *= static_cast<float>(val_scale);
  std::vector<float> rows;
  for (int64_t r = 0; r < 3904; ++r)
    for (int64_t j = 0; j < width; ++j) rows.push_back(series[static_cast<size_t>(r + j)]);
  const Tensor x = tensor(rows, {3904, width}), y = zeros({3904, 1});
  nn::TensorDataset train(x.narrow(0, 0, 3152), y.narrow(0, 0, 3152));
  nn::TensorDataset val(x.narrow(0, 3152, 752), y.narrow(0, 3152, 752));
  return debug::check_feature_drift(train, val);
}

}  // namespace

TEST_CASE("D14 on sliding windows of one stationary series counts independent windows, not rows") {
  // A seed whose windows differ by more than the fixed bar of 0.2 by chance alone.
  const std::vector<debug::Finding> stationary = window_drift(11, 1.0);
  for (const debug::Finding& f : stationary) CHECK_MESSAGE(!f.fires(), f.str());
  const std::vector<debug::Finding> drifted = window_drift(11, 3.0);
  REQUIRE(!drifted.empty());
  CHECK_MESSAGE(drifted[0].fires(), drifted[0].str());
}

TEST_CASE("D5 on categorical codes stored among float features: the first layer that reads numbers passes") {
  manual_seed(22);
  Generator g(22);
  const Tensor code = randint(0, 12, {600, 1}, kInt64, &g).to(kFloat32);
  const Tensor x = cat({code, randn({600, 2}, {}, &g)}, 1);
  const Tensor y = 0.2 * code - 1.0 + x.narrow(1, 1, 1) + 0.1 * randn({600, 1}, {}, &g);
  const Split d =
      dtest::loaders(x.narrow(0, 0, 480), y.narrow(0, 0, 480), x.narrow(0, 480, 120), y.narrow(0, 480, 120));
  auto model = std::make_shared<Coded>();
  nn::MSELoss mse;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  debug::Session s(*model, mse, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 4; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = mse((*model)(b.x), b.y);
      l.backward();
      opt.step();
    }
    s.epoch();
  }
  const debug::RunReport r = s.finish();
  bool judged = false;
  for (const debug::Finding& f : r.findings.findings())
    if (f.check == "D5" && f.title.find("inputs ") == 0) {
      judged = true;
      CHECK_MESSAGE(!f.fires(), f.str());
    }
  CHECK_MESSAGE(judged, r.str(true));  // the raw codes reach 11: the loader's inputs are judged
}

namespace {

// Two standardised columns, the first with 20% of its rows a missing-value code (-999) that went into
// the scaler's statistics (`sentinel`), or zero-inflated instead (half its rows exactly 0, the others
// exponential: a healthy skewed feature).
Tensor scaled_columns(bool sentinel) {
  std::mt19937 rng(6);
  std::normal_distribution<double> n(50.0, 10.0), other(0.0, 1.0);
  std::exponential_distribution<double> e(1.0);
  std::vector<double> a(400), b(400);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = sentinel ? (i % 5 == 0 ? -999.0 : n(rng)) : (i % 2 == 0 ? 0.0 : e(rng));
    b[i] = other(rng);
  }
  double m = 0, v = 0;
  for (double t : a) m += t / 400.0;
  for (double t : a) v += (t - m) * (t - m) / 400.0;
  std::vector<float> rows;
  for (size_t i = 0; i < a.size(); ++i) {
    rows.push_back(static_cast<float>((a[i] - m) / std::sqrt(v)));
    rows.push_back(static_cast<float>(b[i]));
  }
  return tensor(rows, {400, 2});
}

}  // namespace

TEST_CASE("D5 on a missing-value code scaled as data; a zero-inflated feature is no such code") {
  const std::vector<debug::Finding> coded = debug::check_normalisation(scaled_columns(true));
  bool said = false;
  for (const debug::Finding& f : coded)
    said = said || (f.fires() && f.title.find("missing-value code") != std::string::npos);
  CHECK(said);
  for (const debug::Finding& f : debug::check_normalisation(scaled_columns(false))) CHECK_MESSAGE(!f.fires(), f.str());
}

namespace {

// Two-layer GCN: H = A relu(A X W1) W2 with A the normalised adjacency (self loops, D^-1/2 (A+I) D^-1/2),
// a buffer of the set's size.
struct Gcn : nn::Module {
  std::shared_ptr<nn::Linear> l1 = register_module("l1", std::make_shared<nn::Linear>(6, 16));
  std::shared_ptr<nn::Linear> l2 = register_module("l2", std::make_shared<nn::Linear>(16, 3));
  Tensor a;
  explicit Gcn(const Tensor& adjacency) : Module("Gcn") { a = register_buffer("a", adjacency); }
  Tensor forward(const Tensor& x) override { return matmul(a, (*l2)(relu(matmul(a, (*l1)(x))))); }
};

}  // namespace

TEST_CASE("a GCN over one fixed graph, the whole graph one batch: M6 is info and no W2 error") {
  manual_seed(21);
  const int64_t n = 120;
  const Tensor y = randint(0, 3, {n});
  const Tensor onehot = eq(y.unsqueeze(1), arange(3.0, TensorOptions().dtype(kInt64)).unsqueeze(0)).to(kFloat32);
  const Tensor x = randn({n, 6}) * 1.5 + matmul(onehot, randn({3, 6}));
  // Edges mostly within a class.
  const Tensor same = eq(y.unsqueeze(1), y.unsqueeze(0)).to(kFloat32);
  Tensor adj = where(rand({n, n}) < same * 0.08 + 0.01, ones({n, n}), zeros({n, n}));
  adj = gt(adj + adj.t(), 0.0).to(kFloat32) + eye(n);
  const Tensor dinv = pow(sum(adj, {1}), -0.5);
  auto model = std::make_shared<Gcn>(dinv.unsqueeze(1) * adj * dinv.unsqueeze(0));
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  debug::Session s(*model, ce, opt);
  s.begin(x, y);
  for (int e = 0; e < 30; ++e) {
    opt.zero_grad();
    Tensor l = ce((*model)(x), y);
    l.backward();
    opt.step();
    s.epoch(l.item<double>());
  }
  const debug::RunReport r = s.finish();
  const debug::Finding* m6 = first_of(r, "M6", debug::Kind::BatchMixing);
  REQUIRE_MESSAGE(m6 != nullptr, r.str(true));
  CHECK_MESSAGE(m6->severity == debug::Severity::Info, r.str(true));
  bool whole = false;
  for (const debug::Finding& f : r.findings.findings()) {
    CHECK_MESSAGE(!(f.check == "W2" && f.severity == debug::Severity::Error), f.title);
    whole = whole || (f.check == "W2" && dtest::has(f.title, "takes only the whole batch of 120 rows"));
  }
  CHECK_MESSAGE(whole, r.str(true));
}

namespace {

// A count regression: the network's output goes through softplus (a positive rate), and the loss is a Poisson
// negative log-likelihood written as PyTorch's PoissonNLLLoss, on the log of the rate (log_input, the default)
// or on the rate itself.
struct PoissonLoss : nn::Loss {
  bool log_input;
  explicit PoissonLoss(bool log) : Loss("PoissonLoss"), log_input(log) {}
  nn::Reduction reduction() const override { return nn::Reduction::Mean; }
  Tensor forward(const Tensor& in, const Tensor& y) override {
    return log_input ? mean(exp(in) - y * in) : mean(in - y * log(in + 1e-8));
  }
};
struct RateNet : nn::Module {
  std::shared_ptr<nn::Linear> a = register_module("a", std::make_shared<nn::Linear>(4, 32));
  std::shared_ptr<nn::Linear> b = register_module("b", std::make_shared<nn::Linear>(32, 1));
  RateNet() : Module("RateNet") {}
  Tensor forward(const Tensor& x) override { return softplus((*b)(relu((*a)(x)))); }
};

}  // namespace

TEST_CASE(
    "M3 by the loss's optimum: a softplus rate into a Poisson loss on the log of the rate warns; on the rate not") {
  Generator g(5);
  const Tensor x = randn({600, 4}, {}, &g);
  const Tensor rate = exp(0.6 * x.narrow(1, 0, 1) - 0.4 * x.narrow(1, 1, 1) + 0.3);  // counts of 0 in about 1 row in 5
  std::vector<float> counts;
  std::mt19937 rng(5);
  for (float r : rate.contiguous().to_vector<float>()) counts.push_back(std::poisson_distribution<int>(r)(rng));
  const Tensor y = tensor(counts, {600, 1});
  for (const bool log_input : {true, false}) {
    CAPTURE(log_input);
    manual_seed(5);
    const Split d =
        dtest::loaders(x.narrow(0, 0, 480), y.narrow(0, 0, 480), x.narrow(0, 480, 120), y.narrow(0, 480, 120));
    auto model = std::make_shared<RateNet>();
    PoissonLoss loss(log_input);
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = dtest::train_own_loop(*model, loss, opt, d, 4);
    const debug::Finding* m3 = nullptr;
    for (const debug::Finding& f : r.findings.findings())
      if (f.is("M3", debug::Kind::OutputOutOfRange) && f.fires()) m3 = &f;
    if (log_input) {
      REQUIRE_MESSAGE(m3 != nullptr, r.str(true));
      CHECK(dtest::ev(*m3, "least output over the sampled steps") >= 0.0);
      CHECK(dtest::ev(*m3, "the first such target") == 0.0);
    } else {
      CHECK_MESSAGE(m3 == nullptr, r.str(true));
    }
  }
}
