// Objectives whose loss cannot reach 0 or whose parameters cannot all move it, each written as a
// user writes it, with the loss as a function: a variational autoencoder (reconstruction plus the KL
// term, a sample drawn in every training forward), whose loss has a floor of its own, against the same
// model with a sigmoid on its reconstruction of data that spans +-3 (it cannot fit); and a siamese
// network trained on the distance between two embeddings, whose last bias cancels in e1 - e2; and
// mixup, whose loss module is called twice a step; and M14 on heads that parametrise a distribution
// per row (a zero-inflated Poisson, a Gamma with a learned shape) against the same heads blind to
// their inputs, and a hand-written MSE that broadcasts its operands; and M14 on a noisy curve of one
// input feature against the same model blind to its input.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::first_of;
using dtest::Split;

namespace {

// Output (B, 10 + 2 x 4): the reconstruction, the posterior's mean and log-variance.
struct Vae : nn::Module {
  std::shared_ptr<nn::Linear> enc, mu, log_var, dec1, dec2;
  bool sigmoid_out;
  explicit Vae(bool sigmoid = false) : Module("Vae"), sigmoid_out(sigmoid) {
    enc = register_module("enc", std::make_shared<nn::Linear>(10, 32));
    mu = register_module("mu", std::make_shared<nn::Linear>(32, 4));
    log_var = register_module("log_var", std::make_shared<nn::Linear>(32, 4));
    dec1 = register_module("dec1", std::make_shared<nn::Linear>(4, 32));
    dec2 = register_module("dec2", std::make_shared<nn::Linear>(32, 10));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = relu((*enc)(x)), m = (*mu)(h), lv = (*log_var)(h);
    const Tensor noise = exp(0.5 * lv) * randn(m.shape());
    const Tensor z = is_training() ? m + noise : m;
    const Tensor rec = (*dec2)(relu((*dec1)(z)));
    return cat({sigmoid_out ? sigmoid(rec) : rec, m, lv}, 1);
  }
};

Tensor vae_loss(const Tensor& out, const Tensor& x) {
  const Tensor rec = out.narrow(1, 0, 10), m = out.narrow(1, 10, 4), lv = out.narrow(1, 14, 4);
  const Tensor kl = (-0.5 * (1.0 + lv - square(m) - exp(lv)).sum({1})).mean();
  return square(rec - x).sum({1}).mean() + kl;
}

debug::RunReport train_vae(bool sigmoid_out) {
  manual_seed(17);
  // 10-d data on a 3-d linear subspace plus noise.
  const Tensor a = randn({3, 10});
  const Tensor xtr = matmul(randn({640, 3}), a) + 0.1 * randn({640, 10});
  const Tensor xva = matmul(randn({160, 3}), a) + 0.1 * randn({160, 10});
  const Split d = dtest::loaders(xtr, xtr, xva, xva);
  auto m = std::make_shared<Vae>(sigmoid_out);
  optim::Adam opt(m->parameters(), optim::AdamOptions(2e-3));
  const debug::LossFunction loss = vae_loss;
  debug::Session session(*m, loss, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 12; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = vae_loss((*m)(b.x), b.y);
      l.backward();
      opt.step();
      session.step(l);
    }
    session.epoch();
  }
  return session.finish();
}

// Both halves of a row (B, 12) through one encoder; the output is their squared distance (B).
struct Siamese : nn::Module {
  std::shared_ptr<nn::Linear> a, b;
  Siamese() : Module("Siamese") {
    a = register_module("a", std::make_shared<nn::Linear>(6, 32));
    b = register_module("b", std::make_shared<nn::Linear>(32, 8));
  }
  Tensor embed(const Tensor& x) { return (*b)(relu((*a)(x))); }
  Tensor forward(const Tensor& x) override {
    return square(embed(x.narrow(1, 0, 6)) - embed(x.narrow(1, 6, 6))).sum({1});
  }
};

// Contrastive loss with margin 1 (Hadsell et al., 2006): same-class pairs pulled together, others
// pushed to the margin.
Tensor contrastive(const Tensor& dist, const Tensor& same) {
  return (same * dist + (1.0 - same) * square(relu(1.0 - sqrt(dist + 1e-8)))).mean();
}

}  // namespace

TEST_CASE("a VAE overfits its batch down to its loss's own floor; with a sigmoid on its reconstruction it cannot") {
  const debug::RunReport r = train_vae(false);
  const debug::Finding* fit = first_of(r, "M14", debug::Kind::None);
  REQUIRE_MESSAGE(fit != nullptr, r.str(true));
  CHECK(fit->severity == debug::Severity::Info);
  CHECK(dtest::ev(*fit, "final / initial loss") <= 0.01);
  CHECK(dtest::ev(*fit, "final loss") > 0.05);  // above the absolute line: the floor
  expect_clean(r);

  const debug::RunReport bug = train_vae(true);
  const debug::Finding* cannot = first_of(bug, "M14", debug::Kind::None);
  REQUIRE_MESSAGE(cannot != nullptr, bug.str(true));
  CHECK_MESSAGE(cannot->severity == debug::Severity::Warning, cannot->str());
}

TEST_CASE("a siamese distance trained with a loss function: the last bias that cancels is no vanishing gradient") {
  manual_seed(16);
  const dtest::XY all = dtest::blobs(200, 3, 6, 3, 2.0);
  // Pairs: each row with a partner, half of them of its class.
  std::vector<int64_t> labels = all.y.to_vector<int64_t>(), partner(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    size_t j = (i * 7919 + 13) % labels.size();
    if (i % 2 == 0)
      while (labels[j] != labels[i]) j = (j + 1) % labels.size();
    partner[i] = static_cast<int64_t>(j);
  }
  const Tensor p = tensor(partner, {static_cast<int64_t>(partner.size())});
  const Tensor x = cat({all.x, all.x.index_select(0, p)}, 1);
  const Tensor same = eq(all.y, all.y.index_select(0, p)).to(kFloat32);
  const Split d =
      dtest::loaders(x.narrow(0, 0, 480), same.narrow(0, 0, 480), x.narrow(0, 480, 120), same.narrow(0, 480, 120));
  auto m = std::make_shared<Siamese>();
  optim::Adam opt(m->parameters(), optim::AdamOptions(2e-3));
  const debug::LossFunction loss = contrastive;
  debug::Session session(*m, loss, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 8; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = contrastive((*m)(b.x), b.y);
      l.backward();
      opt.step();
      session.step(l);
    }
    session.epoch();
  }
  const debug::RunReport r = session.finish();
  for (const debug::Finding& f : r.findings.findings())
    if (f.parameter == "b.bias") CHECK_MESSAGE(!f.fires(), f.str());
  bool redundant = false;  // the gate's finding says why its gradient is zero
  for (const debug::Finding& f : r.findings.findings())
    redundant = redundant || (f.check == "O1" && f.parameter == "b.bias" && !f.fires());
  CHECK(redundant);
}

TEST_CASE("mixup with two targets: the step's loss is the weighted objective, and the run is clean") {
  // Zhang et al., "mixup: Beyond Empirical Risk Minimization" (2018): inputs mixed with a permutation of
  // the batch at lam ~ Beta(0.4, 0.4), the loss lam CE(y_a) + (1 - lam) CE(y_b) from two calls of one
  // loss module. The Session hears both calls; the step's loss is their sum weighted by the backward.
  manual_seed(10);
  const Split d = dtest::split(3, 2.0);
  auto m = std::make_shared<dtest::Mlp>();
  nn::CrossEntropyLoss ce;
  optim::Adam opt(m->parameters(), optim::AdamOptions(2e-3));
  std::mt19937 rng(3);
  std::gamma_distribution<double> gamma(0.4, 1.0);
  std::vector<double> objective;
  debug::Session session(*m, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 8; ++e) {
    for (const nn::Batch& b : *d.train) {
      const double g1 = gamma(rng), g2 = gamma(rng), lam = g1 / (g1 + g2);
      const Tensor perm = randperm(b.x.size(0));
      opt.zero_grad();
      const Tensor out = (*m)(lam * b.x + (1 - lam) * b.x.index_select(0, perm));
      Tensor l = lam * ce(out, b.y) + (1 - lam) * ce(out, b.y.index_select(0, perm));
      l.backward();
      opt.step();
      objective.push_back(l.item<double>());
    }
    session.epoch();
  }
  const debug::RunReport r = session.finish();
  REQUIRE(r.history.step_losses.size() == objective.size());
  for (size_t i = 0; i < objective.size(); ++i)
    CHECK(r.history.step_losses[i] == doctest::Approx(objective[i]).epsilon(1e-5));
  expect_clean(r);
}

namespace {

// A zero-inflated Poisson's negative log-likelihood over outputs (B, 2) = (logit of the extra zeros,
// log rate) against counts (B, 1), log y! included (a constant of the data).
Tensor zip_nll(const Tensor& o, const Tensor& y) {
  std::vector<float> lf;
  for (float v : y.to(kFloat32).to_vector<float>())
    lf.push_back(static_cast<float>(std::lgamma(static_cast<double>(v) + 1.0)));
  const Tensor logfact = tensor(lf, y.shape());
  const Tensor z = o.narrow(1, 0, 1), ll = o.narrow(1, 1, 1), lam = exp(ll);
  const Tensor lpi = -softplus(-z), l1pi = -softplus(z);
  const Tensor lp0 = logsumexp(cat({lpi, l1pi - lam}, 1), {1}, true);
  const Tensor lpy = l1pi + y * ll - lam - logfact;
  return -where(y == 0.0, lp0, lpy).mean();
}

// log Gamma(k) for k > 0 by Stirling's series after a shift of 6, as a user writes it from ops.
Tensor log_gamma(const Tensor& k) {
  const Tensor z = k + 6.0;
  const Tensor lz = (z - 0.5) * log(z) - z + 0.5 * std::log(2 * M_PI) + 1.0 / (12.0 * z);
  return lz - log(k) - log(k + 1.0) - log(k + 2.0) - log(k + 3.0) - log(k + 4.0) - log(k + 5.0);
}

// A Gamma regression's negative log-likelihood: outputs (B, 2) = (log mean, log shape) against
// positive targets (B, 1).
Tensor gamma_nll(const Tensor& o, const Tensor& y) {
  const Tensor lmu = o.narrow(1, 0, 1), k = exp(o.narrow(1, 1, 1));
  return (log_gamma(k) - k * (log(k) - lmu) - (k - 1.0) * log(y) + k * y * exp(-lmu)).mean();
}

// The same MLP fed zeros instead of its inputs: it can only learn one output row for the batch.
struct Blind : nn::Module {
  std::shared_ptr<dtest::Mlp> m = register_module("m", std::make_shared<dtest::Mlp>(6, 2));
  Blind() : Module("Blind") {}
  Tensor forward(const Tensor& in) override { return (*m)(zeros_like(in)); }
};

// A Gamma regression's head: the log mean from an MLP, one learned log shape for every row (as a
// GLM's dispersion); `blind` feeds the MLP zeros instead of its inputs.
struct GammaHead : nn::Module {
  std::shared_ptr<dtest::Mlp> m = register_module("m", std::make_shared<dtest::Mlp>(6, 1));
  Tensor log_k = register_parameter("log_k", zeros({1}));
  bool blind;
  explicit GammaHead(bool blind_to_inputs = false) : Module("GammaHead"), blind(blind_to_inputs) {}
  Tensor forward(const Tensor& in) override {
    return cat({(*m)(blind ? zeros_like(in) : in), log_k.reshape({1, 1}).expand({in.size(0), 1})}, 1);
  }
};

}  // namespace

TEST_CASE("M14 on a zero-inflated Poisson head: judged against its loss's floor; a model blind to its inputs warns") {
  manual_seed(205);
  Generator g(55);
  std::mt19937 rng(55);
  const Tensor x = randn({32, 6}, {}, &g);
  const Tensor zl = -0.5 + 1.2 * x.narrow(1, 0, 1), ll = 1.0 + 0.5 * x.narrow(1, 1, 1);
  const std::vector<float> pis = sigmoid(zl).to_vector<float>(), lams = exp(ll).to_vector<float>();
  std::vector<float> ys(32);
  std::uniform_real_distribution<double> u(0, 1);
  for (size_t i = 0; i < ys.size(); ++i) {
    std::poisson_distribution<int> p(lams[i]);
    ys[i] = u(rng) < pis[i] ? 0.0f : static_cast<float>(std::min(39, p(rng)));
  }
  const Tensor y = tensor(ys, {32, 1});
  auto model = std::make_shared<dtest::Mlp>(6, 2);
  const std::vector<debug::Finding> f = debug::overfit_one_batch(*model, x, y, zip_nll);
  REQUIRE(f.size() == 1);
  CHECK_MESSAGE(!f[0].fires(), f[0].str());
  const double floor = dtest::evidence(f[0], "the loss's floor (free outputs trained on the batch)");
  REQUIRE(std::isfinite(floor));
  CHECK(floor > 0.05);  // a count's probability stays below 1
  CHECK(dtest::ev(f[0], "final loss") < floor + 0.05);

  auto blind = std::make_shared<Blind>();
  const std::vector<debug::Finding> b = debug::overfit_one_batch(*blind, x, y, zip_nll);
  REQUIRE(b.size() == 1);
  CHECK_MESSAGE(b[0].fires(), b[0].str());
}

TEST_CASE("M14 on a Gamma regression with a learned shape: no floor, so the best constant output is the bar") {
  manual_seed(204);
  Generator g(44);
  std::mt19937 rng(44);
  const Tensor x = randn({32, 6}, {}, &g);
  const std::vector<float> mus = exp(1.0 + 0.6 * x.narrow(1, 0, 1)).to_vector<float>();
  std::vector<float> ys;
  for (float mu : mus) ys.push_back(static_cast<float>(std::gamma_distribution<double>(3.0, mu / 3.0)(rng)));
  const Tensor y = tensor(ys, {32, 1});
  auto model = std::make_shared<GammaHead>();
  const std::vector<debug::Finding> f = debug::overfit_one_batch(*model, x, y, gamma_nll);
  REQUIRE(f.size() == 1);
  CHECK_MESSAGE(!f[0].fires(), f[0].str());
  CHECK(dtest::ev(f[0], "final loss") > 0.05);  // one shape for all rows keeps the loss up
  const double constant = dtest::evidence(f[0], "the best constant output's loss (one output row for every example)");
  REQUIRE(std::isfinite(constant));
  CHECK(dtest::ev(f[0], "final loss") < constant - 0.1 * std::max(1.0, std::fabs(constant)));

  auto blind = std::make_shared<GammaHead>(true);
  const std::vector<debug::Finding> b = debug::overfit_one_batch(*blind, x, y, gamma_nll);
  REQUIRE(b.size() == 1);
  CHECK_MESSAGE(b[0].fires(), b[0].str());
}

TEST_CASE("M14 on a hand-written MSE that broadcasts (B, 1) outputs against (B) targets: no floor, it warns") {
  manual_seed(7);
  Generator g(7);
  const Tensor x = randn({32, 6}, {}, &g);
  const Tensor y = x.narrow(1, 0, 1).squeeze(1) * 2.0 + 0.1 * randn({32}, {}, &g);
  struct One : nn::Module {
    std::shared_ptr<dtest::Mlp> m = register_module("m", std::make_shared<dtest::Mlp>(6, 1));
    One() : Module("One") {}
    Tensor forward(const Tensor& in) override { return (*m)(in); }
  };
  auto model = std::make_shared<One>();
  const debug::LossFunction mse = [](const Tensor& o, const Tensor& t) { return square(o - t).mean(); };
  const std::vector<debug::Finding> f = debug::overfit_one_batch(*model, x, y, mse);
  REQUIRE(f.size() == 1);
  CHECK_MESSAGE(f[0].fires(), f[0].str());
}

namespace {

// Khosla et al.'s supervised contrastive loss (temperature 0.1) over L2-normalised embeddings (B, D):
// each row against the other rows of its class, the row itself left out.
Tensor supcon(const Tensor& z, const Tensor& y) {
  const int64_t B = z.size(0);
  std::vector<float> self(static_cast<size_t>(B * B), 0.0f);
  for (int64_t i = 0; i < B; ++i) self[static_cast<size_t>(i * B + i)] = 1.0f;
  const Tensor eye = tensor(self, {B, B});
  const Tensor zn = z / sqrt(sum(square(z), {1}, true) + 1e-8);
  const Tensor logits = matmul(zn, zn.t()) / 0.1 - 1e9 * eye;
  const Tensor logprob = logits - logsumexp(logits, {1}, true);
  const Tensor pos = eq(y.reshape({B, 1}), y.reshape({1, B})).to(kFloat32) * (1.0 - eye);
  return (-(pos * logprob).sum({1}) / (pos.sum({1}) + 1e-8)).mean();
}

// A cross-entropy corrected for known label noise (35% of each class's labels flipped to the next
// class): -log((softmax(o) T)[y]), whose least value is -log 0.65 = 0.431, not 0.
Tensor noise_corrected_ce(const Tensor& o, const Tensor& y) {
  const int64_t C = o.size(1);
  std::vector<float> t(static_cast<size_t>(C * C), 0.0f);
  for (int64_t k = 0; k < C; ++k) {
    t[static_cast<size_t>(k * C + k)] = 0.65f;
    t[static_cast<size_t>(k * C + (k + 1) % C)] = 0.35f;
  }
  const Tensor p = matmul(softmax(o, 1), tensor(t, {C, C}));
  return -log(gather(p, 1, y.unsqueeze(1)) + 1e-12).mean();
}

}  // namespace

TEST_CASE("M14 on losses whose least value is above 0: a supervised contrastive loss, a noise-corrected CE") {
  manual_seed(11);
  const dtest::XY all = dtest::blobs(8, 4, 6, 11, 2.0);  // one batch of 32, 4 classes
  // Labels beside a 16-wide embedding are no class scores: the batch is judged against its loss's floor.
  auto embed = std::make_shared<dtest::Mlp>(6, 16);
  const std::vector<debug::Finding> s = debug::overfit_one_batch(*embed, all.x, all.y, supcon);
  REQUIRE(s.size() == 1);
  CHECK_MESSAGE(!s[0].fires(), s[0].str());
  CHECK(dtest::evidence(s[0], "the loss's floor (free outputs trained on the batch)") > 1.0);  // about log 7

  auto classifier = std::make_shared<dtest::Mlp>(6, 4);
  const std::vector<debug::Finding> c = debug::overfit_one_batch(*classifier, all.x, all.y, noise_corrected_ce);
  REQUIRE(c.size() == 1);
  CHECK_MESSAGE(!c[0].fires(), c[0].str());
  const double floor = dtest::evidence(c[0], "the loss's floor (free outputs trained on the batch)");
  CHECK(floor == doctest::Approx(-std::log(0.65)).epsilon(0.05));
}

namespace {
// The sine regression's model, and its twin blind to its input (x * 0 reaches the layers).
struct Curve : nn::Module {
  std::shared_ptr<nn::Sequential> net = register_module(
      "net", std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(1, 64), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(64, 64), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(64, 1)));
  bool blind;
  explicit Curve(bool b) : Module("Curve"), blind(b) {}
  Tensor forward(const Tensor& x) override { return (*net)(blind ? x * 0.0 : x); }
};
}  // namespace

TEST_CASE("M14 on a noisy curve (one input feature): not memorised, judged as learning where the loss halves") {
  manual_seed(205);
  Generator g(45);
  const Tensor x = rand({32, 1}, {}, &g) * 6.0 - 3.0;
  const Tensor y = sin(x * 2.0) + (abs(x) * 0.3 + 0.1) * randn({32, 1}, {}, &g);
  const auto mse = [](const Tensor& p, const Tensor& t) { return mean(square(p - t)); };
  auto model = std::make_shared<Curve>(false);
  const std::vector<debug::Finding> f = debug::overfit_one_batch(*model, x / std::sqrt(3.0), y, mse);
  REQUIRE(f.size() == 1);
  CHECK_MESSAGE(!f[0].fires(), f[0].str());
  if (f[0].title.find("does not overfit") != std::string::npos) {  // not memorised in the budget: said why
    CHECK(f[0].title.find("on inputs of 1 feature") != std::string::npos);
    CHECK(dtest::ev(f[0], "final loss") <= 0.5 * dtest::ev(f[0], "initial loss"));
  }
  // Blind to its input, the same model only learns the targets' mean: the loss does not halve, M14 warns.
  auto blind = std::make_shared<Curve>(true);
  const std::vector<debug::Finding> b = debug::overfit_one_batch(*blind, x / std::sqrt(3.0), y, mse);
  REQUIRE(b.size() == 1);
  CHECK_MESSAGE(b[0].fires(), b[0].str());
}

namespace {
// Generalized cross-entropy (Zhang and Sabuncu, 2018): (1 - p_y^q) / q, q = 0.7. A row predicted wrong
// costs at most 1 / q, and its gradient is scaled by p_y^q: the rows the model finds least plausible
// (a wrong label) are fitted last.
Tensor generalized_ce(const Tensor& out, const Tensor& y) {
  const Tensor p = softmax(out, 1).gather(1, y.unsqueeze(1)).squeeze(1);
  return ((1.0 - pow(p, 0.7)) / 0.7).mean();
}
// An MLP over 5 classes whose class-4 logit is always 30 below the least of the others (a padding
// class's mask left on a real one): no training predicts class 4.
struct PinnedClass : nn::Module {
  std::shared_ptr<dtest::Mlp> net = register_module("net", std::make_shared<dtest::Mlp>(6, 4));
  PinnedClass() : Module("PinnedClass") {}
  Tensor forward(const Tensor& x) override {
    const Tensor z = (*net)(x);
    return cat({z, amin(z, {1}, true) - 30.0}, 1);
  }
};
}  // namespace

TEST_CASE("M14 under a noise-robust loss that leaves a mislabelled row wrong: info where cross-entropy fits it") {
  manual_seed(31);
  dtest::XY all = dtest::blobs(8, 4, 6, 31, 1.0);  // one batch of 32, 4 classes
  // One row of class 0 relabelled 3: a wrong label deep inside another class.
  std::vector<int64_t> y = all.y.to_vector<int64_t>();
  const auto row = static_cast<int64_t>(std::find(y.begin(), y.end(), int64_t{0}) - y.begin());
  y[static_cast<size_t>(row)] = 3;
  const Tensor labels = tensor(y, {static_cast<int64_t>(y.size())});

  auto model = std::make_shared<dtest::Mlp>(6, 4);
  const std::vector<debug::Finding> robust = debug::overfit_one_batch(*model, all.x, labels, generalized_ce);
  REQUIRE(robust.size() == 1);
  CHECK_MESSAGE(!robust[0].fires(), robust[0].str());
  CHECK(robust[0].title.find("as far as its loss asks") != std::string::npos);
  CHECK(dtest::evidence(robust[0], "accuracy on the batch with cross-entropy as the loss (same model, same budget)") ==
        doctest::Approx(1.0));

  // The twin: the row is labelled 4, a class the model cannot predict. The loss still reaches its line (a
  // wrong row costs at most 1 / q), but cross-entropy cannot fit the row either: the model's limit, a warning.
  y[static_cast<size_t>(row)] = 4;
  auto pinned = std::make_shared<PinnedClass>();
  const std::vector<debug::Finding> limited =
      debug::overfit_one_batch(*pinned, all.x, tensor(y, {static_cast<int64_t>(y.size())}), generalized_ce);
  REQUIRE(limited.size() == 1);
  CHECK_MESSAGE(limited[0].fires(), limited[0].str());
  CHECK(dtest::evidence(limited[0], "accuracy on the batch with cross-entropy as the loss (same model, same budget)") <
        1.0);
}
