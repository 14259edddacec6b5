// Healthy practices the checks must stay silent on, each written as a user writes it, beside the
// bug it resembles: a classifier head initialised to zero (Fixup, zero-initialised heads) against a
// hidden layer initialised to zero; a model on token ids (an embedding bag) against the same model
// mixing the batch, and against a loop that feeds one batch of ids again and again; a one-hot built
// by comparison (an outer combination written out) against a (B, 1) prediction compared with (B)
// labels; a frozen body, unfrozen a layer at a time (gradual unfreezing), against a frozen head; a
// small dataset split 80/20, a residual block's last BatchNorm scale at zero, a summed loss divided by
// the batch size in the loop and a parameter group held at lr 0, each against its faulty twin.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::any_finding;
using dtest::expect_clean;
using dtest::Mlp;
using dtest::Split;
using dtest::train_own_loop;

namespace {

bool warned(const debug::RunReport& r, const std::string& check, const std::string& parameter) {
  for (const debug::Finding& f : r.findings.findings())
    if (f.check == check && f.fires() && f.parameter == parameter) return true;
  return false;
}

// An info finding of `check` whose title holds `text` (and, when given, about `parameter`): what the
// clean twin is told instead of a warning.
bool said(const debug::RunReport& r, const std::string& check, const std::string& text,
          const std::string& parameter = "") {
  for (const debug::Finding& f : r.findings.findings())
    if (f.check == check && !f.fires() && f.title.find(text) != std::string::npos &&
        (parameter.empty() || f.parameter == parameter))
      return true;
  return false;
}

// The cause the lead names ("" without a lead).
std::string lead_of_cause(const debug::RunReport& r) {
  const json_mini::Value lead = dtest::lead_of(r);
  const json_mini::Value* c = lead.kind == json_mini::Value::Object ? lead.get("cause") : nullptr;
  return c ? c->str : "";
}

}  // namespace

TEST_CASE("a head initialised to zero learns from its first step: no warning; a hidden layer at zero is dead: M9") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  nn::CrossEntropyLoss ce;
  for (const bool bug : {false, true}) {
    CAPTURE(bug);
    auto model = std::make_shared<Mlp>();
    {
      NoGradGuard ng;
      nn::Linear& zeroed = bug ? *model->fc2 : *model->fc3;  // bug: a hidden layer, weight and bias
      zeroed.weight.zero_();
      zeroed.bias.zero_();
    }
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    if (!bug) {
      expect_clean(r);
      // Said as info: the zero head, and the layers it holds back until its first step.
      const bool both = any_finding(r, [](const debug::Finding& f) {
        return f.check == "O1" && !f.fires() && f.title.find("fc3.weight") != std::string::npos &&
               f.title.find("fc1.weight") != std::string::npos;
      });
      CHECK_MESSAGE(both, r.findings.str(true));
      CHECK(r.findings.ran("M6"));
    } else {
      // Its ReLUs sit at 0 and pass nothing back: no first step brings it to life.
      CHECK_MESSAGE(warned(r, "M9", "fc2.weight"), r.str());
    }
  }
}

namespace {

// Token ids (B, L) -> mean of their embeddings -> a linear head; `mix`: the batch's mean embedding
// added to every row (the bug: one example's output depends on the others').
struct Bag : nn::Module {
  std::shared_ptr<nn::Embedding> emb = register_module("emb", std::make_shared<nn::Embedding>(40, 16));
  std::shared_ptr<nn::Linear> fc = register_module("fc", std::make_shared<nn::Linear>(16, 3));
  bool mix;
  explicit Bag(bool m) : Module("Bag"), mix(m) {}
  Tensor forward(const Tensor& ids) override {
    Tensor h = mean((*emb)(ids), {1});
    if (mix) h = h + mean(h, {0}, true);
    return (*fc)(h);
  }
};

// Sentences of 8 ids from 40; class c puts three of its marker ids (c * 10 .. c * 10 + 9) first.
Split token_split() {
  const auto make = [](int64_t n) {
    Tensor y = randint(0, 3, {n});
    Tensor marks = add(mul(y.unsqueeze(1), 10), randint(0, 10, {n, 3}));
    return std::make_pair(cat({marks, randint(0, 40, {n, 5})}, 1), y);
  };
  const auto [xtr, ytr] = make(480);
  const auto [xva, yva] = make(120);
  return dtest::loaders(xtr, ytr, xva, yva);
}

}  // namespace

TEST_CASE("a model on token ids: M6 tests it by substitution, D8 fingerprints its batches; the bugs are caught") {
  manual_seed(5);
  const Split d = token_split();
  nn::CrossEntropyLoss ce;
  SUBCASE("clean: nothing fires, M6 ran") {
    auto model = std::make_shared<Bag>(false);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 12);
    expect_clean(r);
    CHECK(r.findings.ran("M6"));
    CHECK(r.findings.ran("D8"));
  }
  SUBCASE("the batch's mean added to every row: M6's error") {
    auto model = std::make_shared<Bag>(true);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 1);
    const debug::Finding* f = dtest::first_of(r, "M6", debug::Kind::BatchMixing);
    REQUIRE_MESSAGE(f != nullptr, r.str());
    CHECK(f->severity == debug::Severity::Error);
  }
  SUBCASE("one batch of ids fed at every step: D8") {
    auto model = std::make_shared<Bag>(false);
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    const nn::Batch first = d.train->batch(0, 0);
    for (int step = 0; step < 20; ++step) {
      opt.zero_grad();
      ce((*model)(first.x), first.y).backward();
      opt.step();
    }
    s.epoch();
    const debug::RunReport r = s.finish();
    CHECK_MESSAGE(r.fired("D8"), r.str());
  }
  // The fingerprints themselves: two batches of ids differ, one batch equals itself.
  const nn::Batch a = d.train->batch(0, 0), b = d.train->batch(0, 1);
  CHECK(debug::batch_fingerprint(a.x) != debug::batch_fingerprint(b.x));
  CHECK(debug::batch_fingerprint(a.x) == debug::batch_fingerprint(a.x.clone()));
  CHECK(debug::batch_fingerprint(a.x.transpose(0, 1)) != debug::batch_fingerprint(b.x.transpose(0, 1)));
}

TEST_CASE("a one-hot built by comparison (written out) is not M19; a (B, 1) prediction against (B) labels is") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  for (const bool bug : {false, true}) {
    CAPTURE(bug);
    auto model = std::make_shared<Mlp>();
    nn::CrossEntropyLoss ce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 2; ++e) {
      double hits = 0, seen = 0;
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        Tensor logits = (*model)(b.x);
        ce(logits, b.y).backward();
        opt.step();
        NoGradGuard ng;
        // The training accuracy, by hand: the predicted class against the label.
        Tensor pred = argmax(logits, 1).unsqueeze(1);   // (B, 1)
        Tensor hit = bug ? eq(pred, b.y)                // (B, 1) against (B): (B, B)
                         : eq(pred, b.y.unsqueeze(1));  // (B, 1) against (B, 1)
        // A one-hot of the labels, written out: (B, 1) against (1, C).
        Tensor onehot = eq(b.y.unsqueeze(1), arange(3, TensorOptions(kInt64)).unsqueeze(0));
        hits += sum(hit.to(kFloat64)).item<double>() + 0.0 * sum(onehot.to(kFloat64)).item<double>();
        seen += static_cast<double>(b.size());
      }
      s.epoch();
    }
    const debug::RunReport r = s.finish();
    if (bug)
      CHECK_MESSAGE(r.fired("M19"), r.str());
    else
      expect_clean(r);
  }
}

TEST_CASE("gradual unfreezing (the optimizer over every layer, the body frozen first) is not M10; a frozen head is") {
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  nn::CrossEntropyLoss ce;
  for (const bool bug : {false, true}) {
    CAPTURE(bug);
    auto model = std::make_shared<Mlp>();
    if (bug)
      model->fc3->requires_grad_(false);
    else {
      model->fc1->requires_grad_(false);
      model->fc2->requires_grad_(false);
    }
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 3; ++e) {
      if (!bug && e == 1) model->fc2->requires_grad_(true);
      if (!bug && e == 2) model->fc1->requires_grad_(true);
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        ce((*model)(b.x), b.y).backward();
        opt.step();
      }
      s.epoch();
    }
    const debug::RunReport r = s.finish();
    if (bug)
      CHECK_MESSAGE(r.fired("M10"), r.str());
    else
      expect_clean(r);
  }
}

namespace {

// Next-token prediction from a bag of context ids, the output layer tied to the input embedding
// (logits = mean embedding x E^T + b): its logits grow slowly, so the loss nears 0 slowly too.
struct TiedBag : nn::Module {
  std::shared_ptr<nn::Embedding> emb = register_module("emb", std::make_shared<nn::Embedding>(30, 32));
  Tensor out_bias = register_parameter("out_bias", zeros({30}));
  TiedBag() : Module("TiedBag") {}
  Tensor forward(const Tensor& ids) override { return linear(mean((*emb)(ids), {1}), emb->weight, out_bias); }
};

// A siamese pair classifier: one encoder on both halves of the input, |a - b| into the head. The
// encoder's last bias cancels in a - b: its gradient is zero by construction.
struct Siamese : nn::Module {
  std::shared_ptr<nn::Sequential> enc = register_module(
      "enc", std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 16), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(16, 8)));
  std::shared_ptr<nn::Linear> head = register_module("head", std::make_shared<nn::Linear>(8, 2));
  Siamese() : Module("Siamese") {}
  Tensor forward(const Tensor& x) override {
    return (*head)(abs((*enc)(x.narrow(1, 0, 4)) - (*enc)(x.narrow(1, 4, 4))));
  }
};

bool m14_warns(nn::Module& model, const Tensor& x, const Tensor& y, nn::Loss& loss) {
  for (const debug::Finding& f :
       debug::overfit_one_batch(model, x, y, [&](const Tensor&o, const Tensor&t) { return loss(o, t); }))
    if (f.check == "M14" && f.fires()) return true;
  return false;
}

}  // namespace

TEST_CASE("M14 on one batch: targets ignored by the loss and a tied output layer fit; a second softmax does not") {
  manual_seed(6);
  nn::CrossEntropyLoss ce;
  SUBCASE("padding positions labelled -100 (ignore_index) are not counted against the accuracy") {
    auto model = std::make_shared<Mlp>(6, 3);
    Tensor x = randn({32, 6}), y = randint(0, 3, {32});
    std::vector<int64_t> t = y.to_vector<int64_t>();
    for (size_t i = 0; i < t.size(); i += 3) t[i] = -100;
    CHECK_FALSE(m14_warns(*model, x, tensor(t, {32}), ce));
  }
  SUBCASE("a tied output layer: every example right, the loss 95% of the way from chance to 0") {
    auto model = std::make_shared<TiedBag>();
    Tensor ids = randint(0, 30, {32, 6});
    std::vector<int64_t> c = ids.to_vector<int64_t>(), t(32);
    for (size_t i = 0; i < t.size(); ++i) t[i] = (c[i * 6] + c[i * 6 + 1]) % 30;
    CHECK_FALSE(m14_warns(*model, ids, tensor(t, {32}), ce));
  }
  SUBCASE("bug: softmax before cross-entropy (every example right, the loss far from 0)") {
    struct DoubleSoftmax : nn::Module {
      std::shared_ptr<Mlp> body = register_module("body", std::make_shared<Mlp>(6, 30));
      DoubleSoftmax() : Module("DoubleSoftmax") {}
      Tensor forward(const Tensor& x) override { return softmax((*body)(x), 1); }
    };
    auto model = std::make_shared<DoubleSoftmax>();
    CHECK(m14_warns(*model, randn({32, 6}), randint(0, 30, {32}), ce));
  }
}

TEST_CASE("a siamese encoder's last bias cancels in a - b: a redundant bias (info), not a vanishing gradient") {
  manual_seed(7);
  const dtest::XY blobs4 = dtest::blobs(200, 2, 8, 7, 2.0);
  const Split d = dtest::loaders(blobs4.x.narrow(0, 0, 320), blobs4.y.narrow(0, 0, 320), blobs4.x.narrow(0, 320, 80),
                                 blobs4.y.narrow(0, 320, 80));
  auto model = std::make_shared<Siamese>();
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  const debug::RunReport r = train_own_loop(*model, ce, opt, d, 4);
  CHECK_FALSE(warned(r, "O1", "enc.2.bias"));
  CHECK_FALSE(warned(r, "M5", "enc.2.bias"));
  CHECK_MESSAGE(said(r, "O1", "redundant bias", "enc.2.bias"), r.findings.str(true));
}

TEST_CASE("a warm-up from lr 0 (Hugging Face's linear schedule) is not 'starts at 0'; an lr that stays at 0 is") {
  const auto kind_of = [](const std::vector<double>& lrs, debug::Kind k) {
    for (const debug::Finding& f : debug::diagnose_lr_schedule(lrs))
      if (f.is("O6", k) && f.fires()) return true;
    return false;
  };
  std::vector<double> warm(200);
  for (size_t t = 0; t < warm.size(); ++t) warm[t] = 1e-3 * (t < 20 ? t / 20.0 : (200.0 - t) / 180.0);
  CHECK_FALSE(kind_of(warm, debug::Kind::ScheduleStartsAtZero));
  CHECK(kind_of(warm, debug::Kind::ScheduleGrows));  // judged from its first positive value (the run: info)
  CHECK(kind_of(std::vector<double>(200, 0.0), debug::Kind::ScheduleStartsAtZero));
  // The same warm-up with its factor in integers (step / 20 is 0 for 20 steps, then 1): 0, then the peak at once.
  std::vector<double> jumped(warm);
  for (size_t t = 0; t < 20; ++t) jumped[t] = 0.0;
  jumped[20] = 1e-3;
  CHECK(kind_of(jumped, debug::Kind::ScheduleStartsAtZero));
  // Two steps at 0 before a ramp (a warm-up counted from step 0 with a delay of one) stay silent.
  std::vector<double> delayed(warm);
  delayed[1] = 0.0;
  CHECK_FALSE(kind_of(delayed, debug::Kind::ScheduleStartsAtZero));
  std::vector<double> late(200, 1e-3);
  std::fill(late.begin(), late.begin() + 120, 0.0);  // a warm-up that was stepped only from step 121
  CHECK(kind_of(late, debug::Kind::ScheduleStartsAtZero));

  // The whole run, written as a user writes it: calm loss, nothing fires.
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  auto model = std::make_shared<Mlp>();
  nn::CrossEntropyLoss ce;
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(3e-3));
  debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  const int64_t total = 4 * d.train->num_batches(), warmup = total / 10;
  int64_t step = 0;
  for (int e = 0; e < 4; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.set_lr(3e-3 * (step < warmup ? double(step) / warmup : double(total - step) / double(total - warmup)));
      ++step;
      opt.zero_grad();
      ce((*model)(b.x), b.y).backward();
      opt.step();
    }
    s.epoch();
  }
  expect_clean(s.finish());
}

TEST_CASE(
    "CosineAnnealingLR with eta_min above the base rate climbs to the run's end: O6 warns; eta_min = a tenth, silent") {
  // eta_min 0.1 meant as "10% of the base rate" (3e-3): the rate rises 33x, calmly, to the last epoch.
  for (const double eta_min : {0.1, 3e-4}) {
    CAPTURE(eta_min);
    manual_seed(4);
    const Split d = dtest::split(3, 2.0);
    auto model = std::make_shared<Mlp>();
    nn::CrossEntropyLoss ce;
    optim::SGD opt(model->parameters(), optim::SGDOptions(3e-3));
    optim::CosineAnnealingLR sched(opt, 6, eta_min);
    debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 6; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        ce((*model)(b.x), b.y).backward();
        opt.step();
      }
      sched.step();
      s.epoch();
    }
    const debug::RunReport r = s.finish();
    bool grows = false, too_high = false;
    for (const debug::Finding& f : r.findings.findings()) {
      grows = grows || (f.is("O6", debug::Kind::ScheduleGrows) && f.fires());
      too_high = too_high || (f.is("O6", debug::Kind::LrTooHigh) && f.fires());
    }
    CHECK_MESSAGE(grows == (eta_min > 3e-3), r.str(true));
    CHECK_FALSE(too_high);  // the loss stayed calm: the schedule's shape alone warns
  }
}

TEST_CASE("a small dataset split 80/20 is not 'too little held out' (D16 info); 20 of 620 rows held out is") {
  const auto d16 = [](int64_t train, int64_t val) {
    nn::TensorDataset tr(randn({train, 2}), zeros({train}, kInt64)), va(randn({val, 2}), zeros({val}, kInt64));
    const std::vector<debug::Finding> fs = debug::check_split_sizes(tr, va);
    REQUIRE(fs.size() == 1);
    return fs.front();
  };
  const debug::Finding small = d16(96, 24);  // 120 rows, 20% held out: as much as such a dataset allows
  CHECK(small.severity == debug::Severity::Info);
  CHECK(small.cause.find("the dataset is small") != std::string::npos);
  CHECK(d16(600, 20).severity == debug::Severity::Warning);  // 3% held out: it could have held out more
  CHECK(d16(6000, 30).severity == debug::Severity::Warning);
  CHECK(debug::check_split_sizes(nn::TensorDataset(randn({400, 2}), zeros({400}, kInt64)),
                                 nn::TensorDataset(randn({100, 2}), zeros({100}, kInt64)))
            .empty());
}

TEST_CASE(
    "D16: one dataset split 10/90 (the fraction given for training) warns; 90/10, a subset against a test set, or "
    "two small draws from a pool, not") {
  auto pool = std::make_shared<nn::TensorDataset>(randn({2000, 2}), zeros({2000}, kInt64));
  const auto swapped = nn::train_val_split(pool, 0.9, 3);  // 90% held out where 90% training was meant
  const std::vector<debug::Finding> fs = debug::check_split_sizes(*swapped.first, *swapped.second);
  REQUIRE(fs.size() == 1);
  CHECK(fs.front().severity == debug::Severity::Warning);
  CHECK(fs.front().title.find("the shares look swapped") != std::string::npos);
  const auto right = nn::train_val_split(pool, 0.1, 3);
  CHECK(debug::check_split_sizes(*right.first, *right.second).empty());
  // 200 training rows taken to go fast, scored on a separate test set of 1,800: another dataset, no split.
  auto test_set = std::make_shared<nn::TensorDataset>(randn({1800, 2}), zeros({1800}, kInt64));
  CHECK(debug::check_split_sizes(*nn::take(pool, 200), *test_set).empty());
  CHECK(debug::check_split_shares(*swapped.first, *test_set).empty());
  // A semi-supervised run: 40 labelled rows for training and 200 for validation drawn from the pool,
  // the other 1,760 left unlabelled: two draws from a larger set, not a swapped split (info).
  std::vector<int64_t> lab(40), held(200);
  for (int64_t i = 0; i < 40; ++i) lab[static_cast<size_t>(i)] = i;
  for (int64_t i = 0; i < 200; ++i) held[static_cast<size_t>(i)] = 40 + i;
  const std::vector<debug::Finding> ssl = debug::check_split_shares(nn::Subset(pool, lab), nn::Subset(pool, held));
  REQUIRE(ssl.size() == 1);
  CHECK(ssl.front().severity == debug::Severity::Info);
  CHECK(dtest::ev(ssl.front(), "share of the base dataset the two cover") == doctest::Approx(0.12));
}

namespace {

// Residual blocks x + BN(Linear(ReLU(BN(Linear(x))))), their Linears with a bias; `residual` false
// drops the skip (the bug's twin: the block's output is then its zero-initialised BatchNorm's).
struct ResidualBn : nn::Module {
  std::shared_ptr<nn::Linear> inp = register_module("inp", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::Linear> l1 = register_module("l1", std::make_shared<nn::Linear>(32, 32));
  std::shared_ptr<nn::BatchNorm1d> n1 = register_module("n1", std::make_shared<nn::BatchNorm1d>(32));
  std::shared_ptr<nn::Linear> l2 = register_module("l2", std::make_shared<nn::Linear>(32, 32));
  std::shared_ptr<nn::BatchNorm1d> n2 = register_module("n2", std::make_shared<nn::BatchNorm1d>(32));
  std::shared_ptr<nn::Linear> head = register_module("head", std::make_shared<nn::Linear>(32, 3));
  bool residual;
  explicit ResidualBn(bool r) : Module("ResidualBn"), residual(r) {
    NoGradGuard ng;
    n2->weight.zero_();  // the block's last BatchNorm scale at 0 (Goyal et al., torchvision's zero_init_residual)
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu((*inp)(x));
    const Tensor branch = (*n2)((*l2)(relu((*n1)((*l1)(h)))));
    return (*head)(relu(residual ? h + branch : branch));
  }
};

}  // namespace

TEST_CASE(
    "a residual block's last BatchNorm scale at zero with biases before its BatchNorms: redundant biases (info)") {
  for (const bool residual : {true, false}) {
    CAPTURE(residual);
    manual_seed(4);
    const Split d = dtest::split(3, 2.0);
    auto model = std::make_shared<ResidualBn>(residual);
    nn::CrossEntropyLoss ce;
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 3);
    if (residual) {
      expect_clean(r);
      // l1.bias: BatchNorm n1 right after it, whatever n2's scale.
      CHECK_MESSAGE(said(r, "O1", "redundant bias", "l1.bias"), r.findings.str(true));
    } else {
      // No skip: the block passes nothing until its scale moves, and its scale gets no gradient
      // through the ReLU at 0: the layers before it never learn.
      CHECK_MESSAGE(!r.fired_checks().empty(), r.str());
    }
  }
}

TEST_CASE("a loss summed over the batch and divided by the batch size in the loop is a mean: L6 and L4 silent") {
  for (const bool divide : {true, false}) {
    CAPTURE(divide);
    manual_seed(4);
    const Split d = dtest::split(3, 2.0);
    auto model = std::make_shared<Mlp>();
    nn::CrossEntropyLoss ce(nn::CrossEntropyLossOptions().reduction(nn::Reduction::Sum));
    optim::SGD opt(model->parameters(), optim::SGDOptions(divide ? 0.05 : 0.05 / 32).momentum(0.9));
    debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 3; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        Tensor l = ce((*model)(b.x), b.y);
        if (divide) l = l / static_cast<double>(b.x.size(0));  // the per-example mean, as VAE examples write it
        l.backward();
        opt.step();
      }
      s.epoch();
    }
    const debug::RunReport r = s.finish();
    if (divide) {
      expect_clean(r);
      CHECK_MESSAGE(said(r, "L6", "divides its value"), r.findings.str(true));
    } else {
      CHECK_MESSAGE(r.fired("L6"), r.str());  // summed: the gradient grows with the batch
      CHECK_FALSE(r.fired("L4"));             // the first loss is B x log C, as a sum's should be
    }
  }
}

TEST_CASE("a parameter group frozen by lr 0 beside groups that train: O8 and O6 info; every group at 0 warns") {
  for (const bool all_zero : {false, true}) {
    CAPTURE(all_zero);
    manual_seed(4);
    const Split d = dtest::split(3, 2.0);
    auto model = std::make_shared<Mlp>();
    nn::CrossEntropyLoss ce;
    std::vector<optim::ParamGroup> groups;
    groups.emplace_back(model->fc1->parameters(), 0.0);  // the first layer held still by its rate
    std::vector<Tensor> rest = model->fc2->parameters();
    for (const Tensor& p : model->fc3->parameters()) rest.push_back(p);
    groups.emplace_back(rest, all_zero ? 0.0 : 3e-3);
    optim::Adam opt(groups, optim::AdamOptions(3e-3));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 3);
    if (!all_zero) {
      expect_clean(r);
      CHECK_MESSAGE(said(r, "O8", "frozen by their rate"), r.findings.str(true));
    } else {
      CHECK_MESSAGE(r.fired("O8"), r.str());
      CHECK_MESSAGE(r.fired("O6"), r.str());  // no step changes a weight
    }
  }
}

namespace {

// Raw 0..255 "pixels" into an MLP; `scale`: the forward divides by 255 first (Keras' Rescaling layer).
struct Pixels : nn::Module {
  std::shared_ptr<Mlp> mlp = register_module("mlp", std::make_shared<Mlp>());
  bool scale;
  explicit Pixels(bool s) : Module("Pixels"), scale(s) {}
  Tensor forward(const Tensor& x) override { return (*mlp)(scale ? x / 255.0 : x); }
};

}  // namespace

TEST_CASE("raw pixels the model divides by 255 itself: D5 info; the same pixels into the first layer: D5 warns") {
  for (const bool scale : {true, false}) {
    CAPTURE(scale);
    manual_seed(4);
    const dtest::XY all = dtest::blobs(200, 3, 6, 3, 2.0);
    const Tensor x = clamp(all.x * 12.0 + 128.0, 0.0, 255.0).to(kInt64).to(kFloat32);  // whole values
    const Split d =
        dtest::loaders(x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), x.narrow(0, 480, 120), all.y.narrow(0, 480, 120));
    auto model = std::make_shared<Pixels>(scale);
    nn::CrossEntropyLoss ce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = train_own_loop(*model, ce, opt, d, 2);
    CHECK_MESSAGE(r.fired("D5") != scale, r.str());
    if (scale) {
      // The raw values are still said, as info.
      CHECK_MESSAGE(said(r, "D5", "scales them before its first layer"), r.findings.str(true));
    }
  }
}

TEST_CASE(
    "a loop that relabels the classes consistently is aligned; a loop that takes the previous batch's labels is D4") {
  for (const bool previous : {false, true}) {
    CAPTURE(previous);
    manual_seed(4);
    const Split d = dtest::split(3, 2.0);
    auto model = std::make_shared<Mlp>();
    nn::CrossEntropyLoss ce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    Tensor last;
    for (int e = 0; e < 4; ++e) {
      for (const nn::Batch& b : *d.train) {
        // Clean: the classes renamed in the loop (c -> 2 - c; a class map, y - 1 for 1-based labels).
        Tensor y = previous ? (last.defined() && last.size(0) == b.y.size(0) ? last : b.y) : 2 - b.y;
        last = b.y;
        opt.zero_grad();
        ce((*model)(b.x), y).backward();
        opt.step();
      }
      s.epoch();
    }
    const debug::RunReport r = s.finish();
    CHECK_MESSAGE(r.fired("D4") == previous, r.str());
    if (previous) dtest::expect_lead(r, "D4", "misaligned-labels");
  }
}

TEST_CASE("a loop that trains on the model's own predictions is D4 (targets-from-predictions); labels are not") {
  // 0: the batch's labels; 1: the classes renamed (c -> 4 - c), learned perfectly; 2: argmax(logits, 1),
  // computed for a running accuracy, passed to the loss where b.y was meant.
  for (const int variant : {0, 1, 2}) {
    CAPTURE(variant);
    manual_seed(6);
    const dtest::XY all = dtest::blobs(120, 5, 6, 8, 2.5);
    const Split d = dtest::loaders(all.x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), all.x.narrow(0, 480, 120),
                                   all.y.narrow(0, 480, 120), 8);
    auto model = std::make_shared<Mlp>(6, 5);
    nn::CrossEntropyLoss ce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 5; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        const Tensor logits = (*model)(b.x);
        const Tensor pred = argmax(logits.detach(), 1);
        const Tensor y = variant == 0 ? b.y : variant == 1 ? 4 - b.y : pred;
        ce(logits, y).backward();
        opt.step();
      }
      s.epoch();
    }
    const debug::RunReport r = s.finish();
    bool self = false;
    for (const debug::Finding& f : r.findings.findings())
      self = self || (f.fires() && f.is("D4", debug::Kind::TargetsFromPredictions));
    CHECK_MESSAGE(self == (variant == 2), r.str());
    if (variant == 2) dtest::expect_lead(r, "D4", "targets-from-predictions");
    if (variant == 0) expect_clean(r);
  }
}

TEST_CASE("BCE on targets in {0, 1} (and soft ones) is silent; on 0/255 masks it is L3 (bce-target-range)") {
  for (const double top : {1.0, 0.9, 255.0}) {  // hard labels, smoothed labels, a mask's raw bytes
    CAPTURE(top);
    manual_seed(4);
    const Tensor x = randn({600, 6});
    const Tensor hit = gt(matmul(x, randn({6, 1})), 0.0).to(kFloat32);
    const Tensor y = top == 0.9 ? hit * 0.8 + 0.1 : hit * top;
    const Split d =
        dtest::loaders(x.narrow(0, 0, 480), y.narrow(0, 0, 480), x.narrow(0, 480, 120), y.narrow(0, 480, 120));
    auto model = std::make_shared<Mlp>(6, 1);
    nn::BCEWithLogitsLoss bce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = train_own_loop(*model, bce, opt, d, 2);
    if (top <= 1.0) {
      CHECK_MESSAGE(!r.fired("L3"), r.str());
    } else {
      CHECK_MESSAGE(dtest::first_of(r, "L3", debug::Kind::BceTargetRange) != nullptr, r.str());
      CHECK(lead_of_cause(r) == "bce-target-range");
    }
  }
}

TEST_CASE(
    "a warm-up/decay schedule with its branches swapped falls, then climbs to the end; cycles and warm-ups do not") {
  const auto rebounds = [](const std::vector<double>& lrs) {
    for (const debug::Finding& f : debug::diagnose_lr_schedule(lrs))
      if (f.is("O6", debug::Kind::ScheduleRebounds) && f.fires()) return true;
    return false;
  };
  // "Attention Is All You Need"'s schedule, d^-0.5 min(t^-0.5, t w^-1.5), warm-up 100 over 846 steps; with max for
  // min the decay branch runs first (10x the peak at step 1) and the warm-up ramp climbs from step 100 to the end.
  std::vector<double> noam(846), swapped(846);
  for (size_t i = 0; i < noam.size(); ++i) {
    const double t = static_cast<double>(i + 1), a = std::pow(t, -0.5), b = t * std::pow(100.0, -1.5);
    noam[i] = 0.25 / 16 * std::min(a, b);
    swapped[i] = 0.25 / 16 * std::max(a, b);
  }
  CHECK(rebounds(swapped));
  CHECK_FALSE(rebounds(noam));
  // Triangular cycles (Smith, 2017) of 200 steps from the base over 700 steps, and the same started at the top
  // (it falls first, then each climb lasts half a cycle): neither climbs for 60% of the run.
  std::vector<double> tri(700), top(700);
  for (size_t i = 0; i < tri.size(); ++i) {
    const double phase = static_cast<double>(i % 200) / 100.0;
    tri[i] = 1e-4 + 9e-4 * (phase < 1 ? phase : 2 - phase);
    top[i] = 1e-4 + 9e-3 * std::fabs(1 - static_cast<double>(i % 200) / 100.0);
  }
  CHECK_FALSE(rebounds(tri));
  CHECK_FALSE(rebounds(top));
  // A learning-rate range test climbs from its first step; warm restarts jump back up and decay again.
  std::vector<double> range(300), sgdr(160);
  for (size_t i = 0; i < range.size(); ++i) range[i] = 1e-6 * std::pow(1e6, static_cast<double>(i) / 299.0);
  for (size_t t = 0; t < sgdr.size(); ++t) sgdr[t] = 0.05 * (1 + std::cos(M_PI * (t % 40) / 40.0)) / 2;
  CHECK_FALSE(rebounds(range));
  CHECK_FALSE(rebounds(sgdr));
  // A decay that stops at its floor and a step decay end flat.
  std::vector<double> floor_(300);
  for (size_t i = 0; i < floor_.size(); ++i) floor_[i] = std::max(1e-4, 1e-2 * std::pow(0.97, static_cast<double>(i)));
  CHECK_FALSE(rebounds(floor_));
}

TEST_CASE("cosine annealing with warm restarts dips below 1/100 of its rate near each trough and is no collapse") {
  const auto collapses = [](const std::vector<double>& lrs) {
    for (const debug::Finding& f : debug::diagnose_lr_schedule(lrs))
      if (f.is("O6", debug::Kind::ScheduleCollapses) && f.fires()) return true;
    return false;
  };
  // SGDR (Loshchilov and Hutter, 2017): T_0 = 40 steps, eta_min 0, over 160 steps: each cycle spends
  // its last 4 steps below 1% of the peak.
  std::vector<double> restarts(160);
  for (size_t t = 0; t < restarts.size(); ++t) restarts[t] = 0.05 * (1 + std::cos(M_PI * (t % 40) / 40.0)) / 2;
  CHECK_FALSE(collapses(restarts));
  // The same cosine without restarts annealed over the first 40 steps, then left at its floor.
  std::vector<double> once(160);
  for (size_t t = 0; t < once.size(); ++t) once[t] = t < 40 ? restarts[t] : 0.0;
  CHECK(collapses(once));
  // Step decay /10 at 1/3 and 2/3 of the run (a recipe's schedule) ends at exactly 1/100: no collapse.
  std::vector<double> steps(90);
  for (size_t t = 0; t < steps.size(); ++t) steps[t] = 0.1 * std::pow(0.1, static_cast<double>(t / 30));
  CHECK_FALSE(collapses(steps));
}

namespace {
// Token ids stored as floats (as a loader that reads one float matrix gives them), cast to indices
// by the model: a bag of embeddings; with `batch_mean`, each row's bag has the batch's mean added
// (a mean over dim 0 where dim 1 was meant: the rows mix).
struct FloatIdBag : nn::Module {
  std::shared_ptr<nn::Embedding> emb = register_module("emb", std::make_shared<nn::Embedding>(20, 8));
  std::shared_ptr<nn::Linear> out = register_module("out", std::make_shared<nn::Linear>(8, 3));
  bool batch_mean;
  explicit FloatIdBag(bool mix) : Module("FloatIdBag"), batch_mean(mix) {}
  Tensor forward(const Tensor& x) override {
    Tensor bag = mean((*emb)(x.to(kInt64)), {1});
    if (batch_mean) bag = bag + mean(bag, {0}, true);
    return (*out)(bag);
  }
};
}  // namespace

TEST_CASE("M6 on float token ids: no gradient reaches them, so the test runs by substitution") {
  manual_seed(5);
  const Tensor ids = randint(0, 20, {64, 6}).to(kFloat32);
  for (bool mix : {false, true}) {
    auto m = std::make_shared<FloatIdBag>(mix);
    bool warned_unreached = false, mixing = false;
    for (const debug::Finding& f : debug::batch_mixing_test(*m, ids)) {
      warned_unreached = warned_unreached || (f.is("M6", debug::Kind::InputUnreached) && f.fires());
      mixing = mixing || (f.is("M6", debug::Kind::BatchMixing) && f.fires());
    }
    CHECK_FALSE(warned_unreached);
    CHECK(mixing == mix);
  }
}

namespace {

// R-Drop (Liang et al., 2021): in training the model runs its batch twice in one forward (two dropout
// masks), and the loss reads the 2B rows: cross-entropy of both halves against the labels twice over,
// plus the symmetric KL divergence between the halves' predictions.
struct TwiceInTraining : nn::Module {
  std::shared_ptr<Mlp> net = register_module("net", std::make_shared<Mlp>());
  std::shared_ptr<nn::Dropout> drop = register_module("drop", std::make_shared<nn::Dropout>(0.2));
  TwiceInTraining() : Module("TwiceInTraining") {}
  Tensor forward(const Tensor& x) override {
    return is_training() ? (*net)((*drop)(cat({x, x}, 0))) : (*net)((*drop)(x));
  }
};

struct RDropLoss : nn::Loss {
  RDropLoss() : nn::Loss("RDropLoss") {}
  nn::Reduction reduction() const override { return nn::Reduction::Mean; }
  Tensor forward(const Tensor& out, const Tensor& y) override {
    if (out.size(0) == y.size(0)) return nn::functional::cross_entropy(out, y);
    const int64_t B = y.size(0);
    const Tensor a = log_softmax(out.narrow(0, 0, B), 1), b = log_softmax(out.narrow(0, B, B), 1);
    const Tensor kl = mean(sum((exp(a) - exp(b)) * (a - b), {1}));
    return nn::functional::cross_entropy(out, cat({y, y}, 0)) + kl * 0.5;
  }
};

}  // namespace

TEST_CASE("R-Drop: a model that runs its batch twice in training is clean (M6 and M14 judge what they can)") {
  manual_seed(17);
  const Split d = dtest::split(9, 1.5);
  auto model = std::make_shared<TwiceInTraining>();
  RDropLoss loss;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  const debug::RunReport r = train_own_loop(*model, loss, opt, d, 6);
  CHECK_FALSE(r.fired("W2"));
  CHECK_FALSE(r.fired("M14"));
  expect_clean(r);
}

namespace {

// Temperature scaling (Guo et al., 2017) as a wrapper: a trained network, frozen whole, whose logits are
// divided by exp(log_t); only log_t trains, by Adam at 0.02.
struct Tempered : nn::Module {
  std::shared_ptr<Mlp> net = register_module("net", std::make_shared<Mlp>());
  Tensor log_t = register_parameter("log_t", zeros({1}));
  Tempered() : Module("Tempered") {}
  Tensor forward(const Tensor& x) override { return (*net)(x) / exp(log_t); }
};

}  // namespace

TEST_CASE(
    "temperature scaling: a frozen network and a temperature at Adam 0.02 are no frozen head (M10) nor a rate too high "
    "(O8)") {
  manual_seed(18);
  const Split d = dtest::split(11, 1.0);
  auto model = std::make_shared<Tempered>();
  {
    nn::CrossEntropyLoss ce;
    optim::Adam pre(model->net->parameters(), optim::AdamOptions(3e-3));
    for (int e = 0; e < 6; ++e)
      for (const nn::Batch& b : *d.train) {
        pre.zero_grad();
        ce((*model)(b.x), b.y).backward();
        pre.step();
      }
  }
  for (Tensor& p : model->net->parameters()) p.requires_grad_(false);
  nn::CrossEntropyLoss ce;
  optim::Adam opt({model->log_t}, optim::AdamOptions(0.02));
  const debug::RunReport r = train_own_loop(*model, ce, opt, d, 4);
  CHECK_FALSE(r.fired("M10"));
  CHECK_FALSE(r.fired("O8"));
  CHECK(said(r, "O8", "no weight matrix trains"));
  // The same temperature beside a trainable layer at that rate: the usual range applies again.
  for (Tensor& p : model->net->fc1->parameters()) p.requires_grad_(true);
  optim::Adam both({model->log_t, model->net->fc1->weight}, optim::AdamOptions(0.02));
  CHECK(any_finding(train_own_loop(*model, ce, both, d, 1),
                    [](const debug::Finding& f) { return f.check == "O8" && f.fires(); }));
}

namespace {

// A coordinate regression: one input in [0, 1), target sin(6 x). Training rows shuffled; the held-out rows
// stored in coordinate order (as an image's pixels in raster order are), `scale` times the training scale.
debug::RunReport ordered_split_run(double scale) {
  manual_seed(19);
  const Tensor xt = rand({3000, 1}), xv = arange(3000, kFloat32).reshape({3000, 1}) / 3000.0;
  const Split d = dtest::loaders(xt, sin(xt * 6.0), xv * scale, sin(xv * 6.0));
  auto model = std::make_shared<dtest::Regressor>(1, 32);
  nn::MSELoss mse;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  return train_own_loop(*model, mse, opt, d, 2);
}

}  // namespace

TEST_CASE("D10 reads rows spread over each split: a held-out split stored in order is no other preprocessing") {
  const debug::RunReport ordered = ordered_split_run(1.0);
  CHECK_MESSAGE(!ordered.fired("D10"), ordered.str(true));
  // The same split scaled 10x: another preprocessing, and D10 says so.
  CHECK(ordered_split_run(10.0).fired("D10"));
}

namespace {

// A mixture of two experts whose forward stores a load-balancing term (Switch Transformer's auxiliary
// loss: the experts' routed shares times their mean gate probabilities) that the loss function reads
// from the model, as user code does.
struct TwoExperts : nn::Module {
  std::shared_ptr<nn::Linear> gate = register_module("gate", std::make_shared<nn::Linear>(6, 2));
  std::shared_ptr<Mlp> e0 = register_module("e0", std::make_shared<Mlp>(6, 3));
  std::shared_ptr<Mlp> e1 = register_module("e1", std::make_shared<Mlp>(6, 3));
  Tensor aux;
  TwoExperts() : Module("TwoExperts") {}
  Tensor forward(const Tensor& x) override {
    const Tensor p = softmax((*gate)(x), 1);
    const Tensor routed = mean(gt(p, 0.5).to(kFloat32), {0}).detach();  // the share routed to each
    aux = 2.0 * sum(routed * mean(p, {0}));
    return p.narrow(1, 0, 1) * (*e0)(x) + p.narrow(1, 1, 1) * (*e1)(x);
  }
};

}  // namespace

TEST_CASE("a loss that reads a load-balancing term the model's forward stored: the gate runs, no W2") {
  manual_seed(71);
  const Split d = dtest::split(7, 2.0);
  auto model = std::make_shared<TwoExperts>();
  nn::CrossEntropyLoss ce;
  const debug::LossFunction loss = [&](const Tensor& out, const Tensor& y) { return ce(out, y) + 0.01 * model->aux; };
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  const debug::RunReport r = train_own_loop(*model, loss, opt, d, 6);
  CHECK_FALSE(any_finding(r, [](const debug::Finding& f) { return f.check == "W2"; }));
  expect_clean(r);
}
