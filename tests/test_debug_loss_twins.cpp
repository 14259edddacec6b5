// Healthy losses and targets the checks must read right, each written as a user writes it, beside the
// bug it resembles: a semi-supervised split whose unlabelled rows carry ignore_index (they are not
// scored: the model is not "wrong" on them) against a split with a share of its labels flipped; a
// triplet loss whose batches often sit past the margin (loss and gradients exactly 0); a run that
// converged (loss 1e-6, gradients with it); a per-channel bias stored as (1, C, 1, 1); a next-token
// model over token ids, whose contexts repeat with other next tokens by nature, against token rows
// appended with other labels; M15's gate verdict judged again with the run's validation loss; and a
// validation split whose labels are numbered in another class order, against the same split as built;
// BatchNorm trained on batches of 2 against the same model on batches of 32; heavy augmentation in the
// loop, whose training steps score far below validation.
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
using dtest::expect_clean;
using dtest::expect_lead;
using dtest::Mlp;
using dtest::Split;
using dtest::XY;

namespace {

// 200 blobs per class (3 classes, 10 features), the first 480 rows for training, standardised by the
// training split's statistics; `train_labels` replaces the training labels.
Split standardised(const XY& all, const Tensor& train_labels) {
  const Tensor xtr = all.x.narrow(0, 0, 480), xva = all.x.narrow(0, 480, 120);
  const Tensor mu = mean(xtr, {0}, true), sd = xtr.std({0}, true, true);
  return dtest::loaders((xtr - mu) / sd, train_labels, (xva - mu) / sd, all.y.narrow(0, 480, 120));
}

// Anchor, positive and negative (B, 3, D) to unit-length embeddings (B, 3, 8).
struct TripletNet : nn::Module {
  std::shared_ptr<nn::Linear> a = register_module("a", std::make_shared<nn::Linear>(10, 64));
  std::shared_ptr<nn::Linear> b = register_module("b", std::make_shared<nn::Linear>(64, 8));
  TripletNet() : Module("TripletNet") {}
  Tensor forward(const Tensor& x) override {
    const int64_t B = x.size(0), D = x.size(2);
    Tensor z = (*b)(relu((*a)(x.reshape({B * 3, D}))));
    return (z / sqrt(sum(z * z, {1}, true) + 1e-8)).reshape({B, 3, -1});
  }
};
// The triplet margin loss as the user's own nn::Loss (its target, the anchor's class, unused).
struct TripletLoss : nn::Loss {
  TripletLoss() : nn::Loss("TripletLoss") {}
  Tensor forward(const Tensor& e, const Tensor&) override {
    const Tensor a = e.select(1, 0), p = e.select(1, 1), n = e.select(1, 2);
    return mean(relu(sum(square(a - p), {1}) - sum(square(a - n), {1}) + 0.2));
  }
  nn::Reduction reduction() const override { return nn::Reduction::Mean; }
};

// Triplets of rows `off`..`off + n` of (x, y): each anchor with a row of its class and one of another.
XY triplets(const XY& all, int64_t off, int64_t n, uint64_t seed) {
  std::mt19937 g(static_cast<unsigned>(seed));
  const std::vector<int64_t> lab = all.y.narrow(0, off, n).to_vector<int64_t>();
  std::vector<int64_t> pi(static_cast<size_t>(n)), ni(static_cast<size_t>(n));
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  for (int64_t i = 0; i < n; ++i) {
    int64_t j;
    do j = pick(g);
    while (j == i || lab[static_cast<size_t>(j)] != lab[static_cast<size_t>(i)]);
    pi[static_cast<size_t>(i)] = off + j;
    do j = pick(g);
    while (lab[static_cast<size_t>(j)] == lab[static_cast<size_t>(i)]);
    ni[static_cast<size_t>(i)] = off + j;
  }
  const Tensor a = all.x.narrow(0, off, n), p = all.x.index_select(0, tensor(pi, {n})),
               q = all.x.index_select(0, tensor(ni, {n}));
  return XY{stack({a, p, q}, 1), all.y.narrow(0, off, n)};
}

// Three tokens of context (ids in [0, 20)) to the next token.
struct NextToken : nn::Module {
  std::shared_ptr<nn::Embedding> emb = register_module("emb", std::make_shared<nn::Embedding>(20, 16));
  std::shared_ptr<nn::Linear> h = register_module("h", std::make_shared<nn::Linear>(48, 128));
  std::shared_ptr<nn::Linear> o = register_module("o", std::make_shared<nn::Linear>(128, 20));
  NextToken() : Module("NextToken") {}
  Tensor forward(const Tensor& ctx) override { return (*o)(tanh((*h)((*emb)(ctx).reshape({ctx.size(0), 48})))); }
};

// A text of 6,003 tokens from a noisy rule (the next token (3 t[i-1] + t[i-3] + 1) mod 20 with
// probability 0.85, else any token): the contexts and their next tokens.
XY markov_text() {
  std::mt19937 g(5);
  std::uniform_real_distribution<double> u(0, 1);
  std::uniform_int_distribution<int> tok(0, 19);
  const int64_t T = 6003;
  std::vector<int64_t> s(static_cast<size_t>(T));
  for (size_t i = 0; i < 3; ++i) s[i] = tok(g);
  for (size_t i = 3; i < s.size(); ++i) s[i] = u(g) < 0.85 ? (3 * s[i - 1] + s[i - 3] + 1) % 20 : tok(g);
  std::vector<int64_t> ctx, next;
  for (size_t i = 3; i < s.size(); ++i) {
    ctx.insert(ctx.end(), {s[i - 3], s[i - 2], s[i - 1]});
    next.push_back(s[i]);
  }
  const int64_t n = static_cast<int64_t>(next.size());
  return XY{tensor(ctx, {n, 3}), tensor(next, {n})};
}

// Linear -> BatchNorm1d -> ReLU, twice, then the classifier.
struct BatchNormNet : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::BatchNorm1d> bn1 = register_module("bn1", std::make_shared<nn::BatchNorm1d>(32));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 32));
  std::shared_ptr<nn::BatchNorm1d> bn2 = register_module("bn2", std::make_shared<nn::BatchNorm1d>(32));
  std::shared_ptr<nn::Linear> fc3 = register_module("fc3", std::make_shared<nn::Linear>(32, 3));
  BatchNormNet() : Module("BatchNormNet") {}
  Tensor forward(const Tensor& x) override { return (*fc3)(relu((*bn2)((*fc2)(relu((*bn1)((*fc1)(x))))))); }
};

}  // namespace

TEST_CASE("accuracy leaves out rows whose target is ignore_index, as the loss does") {
  const Tensor logits = tensor(std::vector<float>{2, 0, 0, 0, 2, 0, 0, 0, 2, 2, 0, 0}, {4, 3});
  const Tensor y = tensor(std::vector<int64_t>{0, 2, -100, -100}, {4});
  const optim::ClassHits h = optim::class_hits(logits, y);
  CHECK(h.counted == 2);
  CHECK(h.right == 1);
  CHECK(optim::accuracy(logits, y) == doctest::Approx(0.5));
  CHECK(std::isnan(optim::accuracy(logits, full({4}, int64_t{-100}))));
}

TEST_CASE(
    "70% of the training rows unlabelled (ignore_index) is clean; 30% of the labels flipped is L9's noisy labels") {
  manual_seed(12);
  const XY all = dtest::blobs(200, 3, 10, 4, 4.0);
  const Tensor labels = all.y.narrow(0, 0, 480).clone();
  const Tensor draw = rand({480});
  nn::CrossEntropyLoss ce(nn::CrossEntropyLossOptions().ignore_index(-100));

  const Tensor unlabelled = where(lt(draw, 0.7), full({480}, int64_t{-100}), labels);
  const Split semi = standardised(all, unlabelled);
  auto model = std::make_shared<Mlp>(10, 3);
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  const debug::RunReport clean = dtest::train_own_loop(*model, ce, opt, semi, 10);
  const nn::Batch val = semi.val->batch(0, 0);
  CHECK(optim::accuracy((*model)(val.x), val.y) > 0.8);
  expect_clean(clean);

  manual_seed(12);
  const Tensor next = where(eq(labels, int64_t{2}), zeros_like(labels), labels + int64_t{1});
  const Tensor flipped = where(lt(draw, 0.3), next, labels);
  const Split noisy = standardised(all, flipped);
  auto noisy_model = std::make_shared<Mlp>(10, 3);
  optim::Adam noisy_opt(noisy_model->parameters(), optim::AdamOptions(3e-3));
  expect_lead(dtest::train_own_loop(*noisy_model, ce, noisy_opt, noisy, 10), "L9", "noisy-train-labels");
}

TEST_CASE("a triplet loss whose batches sit past the margin is clean: a batch with loss 0 has nothing to learn") {
  manual_seed(9);
  XY all = dtest::blobs(160, 5, 10, 8, 3.0);
  all.x = (all.x - mean(all.x, {0}, true)) / all.x.std({0}, true, true);
  const XY tr = triplets(all, 0, 640, 1), va = triplets(all, 640, 160, 2);
  const Split d = dtest::loaders(tr.x, tr.y, va.x, va.y);
  auto model = std::make_shared<TripletNet>();
  TripletLoss loss;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  int zero = 0;
  debug::Session s(*model, loss, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 10; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = loss((*model)(b.x), b.y);
      zero += l.item<double>() == 0.0;
      l.backward();
      opt.step();
    }
    s.epoch();
  }
  const debug::RunReport r = s.finish();
  CHECK(zero > 10);  // the premise: many batches past the margin
  expect_clean(r);
}

TEST_CASE("a run converged to a loss of 1e-6 on raw features: its tiny gradients are info, not vanishing") {
  manual_seed(7);
  const XY all = dtest::blobs(200, 4, 10, 5, 1.0);  // separable; raw features in [-8, 8]
  const Split d = dtest::loaders(all.x.narrow(0, 0, 640), all.y.narrow(0, 0, 640), all.x.narrow(0, 640, 160),
                                 all.y.narrow(0, 640, 160));
  auto model = std::make_shared<Mlp>(10, 4);
  nn::CrossEntropyLoss ce;
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 20);
  REQUIRE_FALSE(r.history.step_losses.empty());
  CHECK(r.history.step_losses.back() < 1e-4 * r.history.step_losses.front());  // the premise: converged
  expect_clean(r);
  bool said = false;  // O1 saw the small gradients and said why they are small
  for (const debug::Finding& f : r.findings.findings())
    said = said || (f.check == "O1" && dtest::has(f.title, "the model fits its batches"));
  CHECK(said);
}

TEST_CASE("a next-token model over token ids: repeated contexts with other next tokens are D12/D13/M15 info") {
  manual_seed(12);
  const XY text = markov_text();
  const int64_t n = text.y.size(0);
  const Split d = dtest::loaders(text.x.narrow(0, 0, 5000), text.y.narrow(0, 0, 5000), text.x.narrow(0, 5000, n - 5000),
                                 text.y.narrow(0, 5000, n - 5000));
  auto model = std::make_shared<NextToken>();
  nn::CrossEntropyLoss ce;
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(3e-3).weight_decay(0.01));
  const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 10);
  expect_clean(r);
  const debug::Finding* dup = nullptr;
  for (const debug::Finding& f : r.findings.findings())
    if (f.check == "D12") dup = &f;
  REQUIRE(dup != nullptr);
  CHECK(dtest::has(dup->title, "inputs from a small discrete set"));
  CHECK(dtest::ev(*dup, "accuracy the labels allow") > 0.5);
}

TEST_CASE(
    "token rows appended with other labels still warn D12: the discrete rule needs inputs that repeat by nature") {
  // 1,000 distinct 3-token contexts (ids < 20), then 50 of them again with the next label: 4.8% repeat.
  std::vector<int64_t> ctx, lab;
  for (int64_t i = 0; i < 1000; ++i) {
    ctx.insert(ctx.end(), {i % 20, (i / 20) % 20, (i / 400) % 20});
    lab.push_back(i % 5);
  }
  for (int64_t i = 0; i < 50; ++i) {
    ctx.insert(ctx.end(), {i % 20, (i / 20) % 20, (i / 400) % 20});
    lab.push_back((i + 1) % 5);
  }
  const nn::TensorDataset data(tensor(ctx, {1050, 3}), tensor(lab, {1050}));
  const std::vector<debug::Finding> fs = debug::check_duplicates(data);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].severity == debug::Severity::Warning);
  CHECK(dtest::ev(fs[0], "rows whose input has another label") == 100);
}

TEST_CASE("M15's gate warning is info when the run's validation loss beats the zeroed-input run") {
  debug::Report gate;
  debug::Finding m15;
  m15.check = "M15";
  m15.severity = debug::Severity::Warning;
  m15.evidence = {{"held-out loss, real inputs (the lowest of the run)", 0.75, ""},
                  {"held-out loss, zeroed inputs (the lowest of the run)", 0.69, ""}};
  gate.add(m15);
  debug::TrainingHistory learned;
  learned.epoch_val_loss = {0.6, 0.2, 0.05};
  debug::Report revised = gate;
  debug::revise_input_baseline(revised, learned);
  CHECK(revised.findings()[0].severity == debug::Severity::Info);
  CHECK(dtest::has(revised.findings()[0].title, "but the run did"));
  debug::TrainingHistory flat;  // labels that do not depend on the inputs: the run stays at the marginal
  flat.epoch_val_loss = {0.70, 0.69, 0.70};
  debug::Report kept = gate;
  debug::revise_input_baseline(kept, flat);
  CHECK(kept.findings()[0].severity == debug::Severity::Warning);
}

TEST_CASE("M15's revision against the zeroed-input run's validation loss: 2% on a large split, more on a small one") {
  // A skip-gram: the run's validation loss falls 4% below the zeroed-input run's, measured on the same
  // split of 42,000 rows: it learned from its inputs. On 120 rows a model that ignores its inputs gets
  // 3% below the baseline by chance, and the warning stays.
  auto gate_with = [](double zero_val, double rows) {
    debug::Report gate;
    debug::Finding m15;
    m15.check = "M15";
    m15.severity = debug::Severity::Warning;
    m15.evidence = {{"held-out loss, real inputs (the lowest of the run)", 2.74, ""},
                    {"held-out loss, zeroed inputs (the lowest of the run)", 2.70, ""}};
    if (rows > 0)
      m15.evidence.insert(m15.evidence.end(), {{"validation loss, zeroed inputs (the lowest of the run)", zero_val, ""},
                                               {"validation rows", rows, ""}});
    gate.add(m15);
    return gate;
  };
  debug::TrainingHistory run;
  run.epoch_val_loss = {2.71, 2.65, 2.61, 2.588};
  debug::Report large = gate_with(2.704, 42000);
  debug::revise_input_baseline(large, run);
  CHECK(large.findings()[0].severity == debug::Severity::Info);
  CHECK(dtest::ev(large.findings()[0], "the run's last validation loss") == doctest::Approx(2.588));
  debug::Report small = gate_with(2.704, 120);
  debug::revise_input_baseline(small, run);
  CHECK(small.findings()[0].severity == debug::Severity::Warning);
  // Without the validation rows the held-out batch's 5% applies.
  debug::Report bare = gate_with(2.704, 0);
  debug::revise_input_baseline(bare, run);
  CHECK(bare.findings()[0].severity == debug::Severity::Warning);
}

TEST_CASE("validation labels numbered in another class order: L9 leads with split-label-order; as built, clean") {
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    manual_seed(4);
    const XY all = dtest::blobs(200, 3, 6, 3, 2.0);
    const Tensor yva = all.y.narrow(0, 480, 120).contiguous();
    // The validation label map built again, from the classes in another order: 0 -> 1, 1 -> 2, 2 -> 0.
    const Tensor relabelled = bug ? tensor(std::vector<int64_t>{1, 2, 0}, {3}).index_select(0, yva).contiguous() : yva;
    const Split d =
        dtest::loaders(all.x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), all.x.narrow(0, 480, 120), relabelled);
    auto model = std::make_shared<Mlp>();
    nn::CrossEntropyLoss ce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 5);
    if (bug)
      expect_lead(r, "L9", "split-label-order");
    else
      expect_clean(r);
  }
}

TEST_CASE("validation labels renumbered, classes of 60/30/10%: L9 leads, and D15's class shift follows from it") {
  manual_seed(4);
  const XY all = dtest::blobs(600, 3, 6, 3, 2.0);
  // Keep every class-0 row, half of class 1's and a sixth of class 2's: 600 / 300 / 100, shuffled.
  std::vector<int64_t> keep;
  const std::vector<int64_t> labels = all.y.to_vector<int64_t>();
  int64_t seen[3] = {0, 0, 0};
  for (int64_t i = 0; i < static_cast<int64_t>(labels.size()); ++i) {
    const int64_t c = labels[static_cast<size_t>(i)], k = seen[c]++;
    if (c == 0 || (c == 1 && k % 2 == 0) || (c == 2 && k % 6 == 0)) keep.push_back(i);
  }
  const Tensor idx =
      tensor(keep, {static_cast<int64_t>(keep.size())}).index_select(0, randperm(static_cast<int64_t>(keep.size())));
  const Tensor x = all.x.index_select(0, idx), y = all.y.index_select(0, idx);
  const int64_t n = x.size(0), ntr = n * 4 / 5;
  const Tensor yva = tensor(std::vector<int64_t>{1, 2, 0}, {3}).index_select(0, y.narrow(0, ntr, n - ntr)).contiguous();
  const Split d = dtest::loaders(x.narrow(0, 0, ntr), y.narrow(0, 0, ntr), x.narrow(0, ntr, n - ntr), yva);
  auto model = std::make_shared<Mlp>();
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 6);
  bool d15 = false;
  for (const debug::Finding& f : r.findings.findings()) d15 = d15 || (f.check == "D15" && f.fires());
  CHECK_MESSAGE(d15, r.str(true));
  expect_lead(r, "L9", "split-label-order");
}

TEST_CASE("a contrastive loss over unit-length embeddings (labels group the rows): L4 does not judge its start") {
  // 16-d embeddings of 3 classes: same-class pairs pulled together, other pairs pushed to a margin of 1.
  // An output of zeros is no "no preference among the classes" here (2 for this loss, against a healthy
  // start of about 0.7: embeddings of a fresh network lie close together).
  manual_seed(9);
  const Split d = dtest::split(3, 2.0);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 32), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(32, 16));
  debug::LossFunction contrastive = [](const Tensor& out, const Tensor& y) {
    const Tensor e = out * rsqrt(sum(out * out, {1}, true) + 1e-12);
    const Tensor sq = clamp(2.0 - matmul(e, e.t()) * 2.0, 0.0, std::nullopt);
    const Tensor dist = sqrt(sq + 1e-6);
    const Tensor same = eq(y.unsqueeze(1), y.unsqueeze(0)).to(kFloat32);
    const Tensor pos = same - eye(y.size(0)), neg = 1.0 - same;
    return sum(sq * pos) / clamp(sum(pos), 1.0, std::nullopt) +
           sum(square(relu(1.0 - dist)) * neg) / clamp(sum(neg), 1.0, std::nullopt);
  };
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-3));
  const debug::RunReport r = dtest::train_own_loop(*model, contrastive, opt, d, 4);
  for (const debug::Finding& f : r.findings.findings()) CHECK_MESSAGE(!(f.check == "L4" && f.fires()), f.str());
  expect_clean(r);
}

TEST_CASE("BatchNorm trained on batches of 2: M17 leads with batchnorm-small-batch; on batches of 32, clean") {
  for (const int64_t batch : {int64_t{2}, int64_t{32}}) {
    CAPTURE(batch);
    manual_seed(4);
    const XY all = dtest::blobs(200, 3, 6, 3, 2.0);
    Split d = dtest::loaders(all.x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), all.x.narrow(0, 480, 120),
                             all.y.narrow(0, 480, 120));
    d.train = std::make_shared<nn::DataLoader>(
        std::make_shared<nn::TensorDataset>(all.x.narrow(0, 0, 480), all.y.narrow(0, 0, 480)),
        nn::DataLoaderOptions().batch_size(batch).shuffle(true).seed(3));
    auto model = std::make_shared<BatchNormNet>();
    nn::CrossEntropyLoss ce;
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.01).momentum(0.9));
    const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, batch == 2 ? 1 : 4);
    if (batch == 2)
      expect_lead(r, "M17", "batchnorm-small-batch");
    else
      expect_clean(r);
  }
}

TEST_CASE("BatchNorm momentum 0.99 (Keras's convention): M17 leads with batchnorm-momentum; at 0.1, clean") {
  // 482 training rows in batches of 32: the last batch of each epoch holds 2 examples, and at 0.99 the
  // running statistics are that batch's.
  for (const double momentum : {0.99, 0.1}) {
    CAPTURE(momentum);
    manual_seed(46);
    const XY all = dtest::blobs(200, 3, 6, 9, 2.0);
    const Tensor x = all.x * 5.0 + 3.0;
    const Split d =
        dtest::loaders(x.narrow(0, 0, 482), all.y.narrow(0, 0, 482), x.narrow(0, 482, 118), all.y.narrow(0, 482, 118));
    auto model =
        std::make_shared<nn::Sequential>(std::make_shared<nn::BatchNorm1d>(nn::BatchNormOptions(6).momentum(momentum)),
                                         std::make_shared<nn::Linear>(6, 32),
                                         std::make_shared<nn::BatchNorm1d>(nn::BatchNormOptions(32).momentum(momentum)),
                                         std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 3));
    nn::CrossEntropyLoss ce;
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 8);
    if (momentum > 0.5)
      expect_lead(r, "M17", "batchnorm-momentum");
    else
      expect_clean(r);
  }
}

TEST_CASE("heavy augmentation in the loop: validation above the training steps' accuracy is L7 info") {
  // Each training step drops half the features (the kept ones doubled) and adds noise of std 0.5: the
  // training accuracy the steps see is far below validation's, while the trained model, scored in eval
  // mode on the stored training rows, is as right there as on validation.
  manual_seed(13);
  const XY all = dtest::blobs(200, 3, 10, 4, 3.0);
  const Split d = standardised(all, all.y.narrow(0, 0, 480));
  auto m = std::make_shared<Mlp>(10, 3);
  nn::CrossEntropyLoss ce;
  optim::Adam opt(m->parameters(), optim::AdamOptions(3e-3));
  debug::Session session(*m, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 10; ++e) {
    for (const nn::Batch& b : *d.train) {
      const Tensor keep = lt(rand(b.x.shape()), 0.5).to(kFloat32);
      const Tensor x = b.x * keep * 2.0 + randn(b.x.shape()) * 0.5;
      opt.zero_grad();
      Tensor l = ce((*m)(x), b.y);
      l.backward();
      opt.step();
    }
    session.epoch();
  }
  const debug::RunReport r = session.finish();
  const debug::Finding* f = dtest::first_of(r, "L7", debug::Kind::ValidationTooGood);
  REQUIRE_MESSAGE(f != nullptr, r.str(true));
  CHECK(f->severity == debug::Severity::Info);
  CHECK(dtest::ev(*f, "training accuracy of the trained model (eval mode, stored rows)") >
        dtest::ev(*f, "training accuracy (last epoch, train mode)") + 0.1);
  expect_clean(r);
}
