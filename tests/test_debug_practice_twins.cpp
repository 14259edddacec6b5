// Healthy practices the checks must stay silent on, each written as a user writes it, beside the
// bug it resembles: a classifier head initialised to zero (Fixup, zero-initialised heads) against a
// hidden layer initialised to zero; a model on token ids (an embedding bag) against the same model
// mixing the batch, and against a loop that feeds one batch of ids again and again; a one-hot built
// by comparison (an outer combination written out) against a (B, 1) prediction compared with (B)
// labels; and a frozen body, unfrozen a layer at a time (gradual unfreezing), against a frozen head.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
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
      bool said = false;
      for (const debug::Finding& f : r.findings.findings())
        said = said || (f.check == "O1" && !f.fires() && f.title.find("fc3.weight") != std::string::npos &&
                        f.title.find("fc1.weight") != std::string::npos);
      CHECK_MESSAGE(said, r.findings.str(true));
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
  bool said = false;
  for (const debug::Finding& f : r.findings.findings())
    said = said || (f.check == "O1" && !f.fires() && f.parameter == "enc.2.bias" &&
                    f.title.find("redundant bias") != std::string::npos);
  CHECK_MESSAGE(said, r.findings.str(true));
}
