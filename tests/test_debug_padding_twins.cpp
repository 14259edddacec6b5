// Padded sequences and the loss over them (L5): a per-token loss averaged over every position, the
// padding included, beside the same loss masked (sum(loss * mask) / sum(mask)); and the batches that
// look like padding and are not (a background class in the bottom rows of images, sequences of one
// length, a pad value that also occurs among the real positions), on which L5 must say nothing.
#include <doctest/doctest.h>

#include <memory>
#include <random>
#include <vector>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::expect_lead;
using dtest::Split;

namespace {

constexpr int64_t kT = 16, kF = 6, kTags = 4;  // tags 1..kTags; 0 is the pad tag

// A per-token MLP over (B, T, F) to (B, T, kTags + 1).
struct Tagger : nn::Module {
  std::shared_ptr<nn::Linear> a = register_module("a", std::make_shared<nn::Linear>(kF, 32));
  std::shared_ptr<nn::Linear> b = register_module("b", std::make_shared<nn::Linear>(32, kTags + 1));
  Tagger() : Module("Tagger") {}
  Tensor forward(const Tensor& x) override { return (*b)(relu((*a)(x))); }
};

struct Sequences {
  Tensor x, tags;
};

// n sequences of lengths 3..kT: the tag of a real token is 1 + argmax of a linear map of its
// features; padded positions (at the end, or at the start when `left`) are zero vectors tagged 0.
Sequences sequences(int64_t n, const Tensor& W, bool left = false) {
  Tensor x = randn({n, kT, kF});
  Tensor tag = argmax(matmul(x, W), -1) + 1;
  const Tensor len = randint(3, kT + 1, {n, 1});
  const Tensor pos = arange(kT, kInt64).view({1, kT});
  const Tensor real = left ? ge(pos, kT - len) : lt(pos, len);
  return {x * real.unsqueeze(-1).to(kFloat32), where(real, tag, zeros({n, kT}, kInt64))};
}

Tensor token_nll(const Tensor& logits, const Tensor& tags) {
  return neg(gather(log_softmax(logits, -1), 2, tags.unsqueeze(-1)).squeeze(-1));  // (B, T)
}
Tensor mean_over_every_position(const Tensor& logits, const Tensor& tags) { return mean(token_nll(logits, tags)); }
Tensor mean_over_real_tokens(const Tensor& logits, const Tensor& tags) {
  const Tensor mask = ne(tags, 0).to(kFloat32);
  return sum(token_nll(logits, tags) * mask) / sum(mask);
}

const debug::Finding* padding_finding(const std::vector<debug::Finding>& fs) {
  for (const debug::Finding& f : fs)
    if (f.fires() && f.is("L5", debug::Kind::PaddingInLoss)) return &f;
  return nullptr;
}

// One batch of 32 sequences and the untrained tagger's output on it.
struct Probe {
  Sequences s;
  Tensor out;
};
Probe probe(bool left = false) {
  manual_seed(3);
  const Tensor W = randn({kF, kTags});
  Probe p{sequences(32, W, left), Tensor()};
  Tagger m;
  p.out = m(p.s.x).detach();
  return p;
}

}  // namespace

TEST_CASE("a tagger's loss averaged over every position of padded sequences: L5 leads; masked, clean") {
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    manual_seed(4);
    const Tensor W = randn({kF, kTags});
    const Sequences tr = sequences(640, W), va = sequences(160, W);
    const Split d = dtest::loaders(tr.x, tr.tags, va.x, va.tags);
    auto model = std::make_shared<Tagger>();
    debug::LossFunction loss = bug ? mean_over_every_position : mean_over_real_tokens;
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = dtest::train_own_loop(*model, loss, opt, d, 12);
    if (bug) {
      const debug::Finding* f = padding_finding(r.findings.findings());
      REQUIRE_MESSAGE(f != nullptr, r.str(true));
      CHECK(f->severity == debug::Severity::Warning);
      // A mean over every position gives a padded position about a real one's gradient.
      CHECK(dtest::ev(*f, "padded positions") > 0.2);
      const double ratio = dtest::ev(*f, "gradient per padded position / per real position");
      CHECK(ratio > 0.3);
      CHECK(ratio < 3.0);
      expect_lead(r, "L5", "padding-in-loss");
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("L5's padding probe: masked by a mask, by ignore_index, on the left, in (B, C, T) layout") {
  const Probe p = probe();
  const debug::Finding* f = nullptr;
  const std::vector<debug::Finding> unmasked =
      debug::check_padding_in_loss(p.s.x, p.out, p.s.tags, mean_over_every_position);
  REQUIRE((f = padding_finding(unmasked)) != nullptr);
  CHECK(dtest::ev(*f, "pad target") == 0.0);
  CHECK(debug::check_padding_in_loss(p.s.x, p.out, p.s.tags, mean_over_real_tokens).empty());

  // CrossEntropyLoss over the flattened tokens, the pad tag as ignore_index; and without it.
  for (const bool ignore : {true, false}) {
    CAPTURE(ignore);
    nn::CrossEntropyLoss ce(nn::CrossEntropyLossOptions().ignore_index(ignore ? 0 : -100));
    auto flat = [&](const Tensor& out, const Tensor& y) { return ce(out.reshape({-1, kTags + 1}), y.reshape({-1})); };
    CHECK((padding_finding(debug::check_padding_in_loss(p.s.x, p.out, p.s.tags, flat)) != nullptr) == !ignore);
  }

  // The output laid out (B, C, T), as PyTorch's cross-entropy over a sequence reads it.
  auto channels_first = [](const Tensor& out, const Tensor& y) {
    return mean_over_every_position(out.transpose(1, 2), y);
  };
  CHECK(padding_finding(debug::check_padding_in_loss(p.s.x, p.out.transpose(1, 2), p.s.tags, channels_first)) !=
        nullptr);

  // Left-padded sequences.
  const Probe l = probe(true);
  REQUIRE((f = padding_finding(debug::check_padding_in_loss(l.s.x, l.out, l.s.tags, mean_over_every_position))) !=
          nullptr);
  CHECK(dtest::has(f->title, "padded at the start"));
  CHECK(debug::check_padding_in_loss(l.s.x, l.out, l.s.tags, mean_over_real_tokens).empty());
}

TEST_CASE("L5's padding probe over token ids: a next-token model whose targets are the inputs shifted") {
  // Ids 1..29, pad id 0 on both sides: the target of the last real token is the pad id.
  manual_seed(5);
  const int64_t B = 24, T = 12;
  Tensor ids = randint(1, 30, {B, T + 1});
  const Tensor len = randint(4, T + 2, {B, 1});
  ids = where(lt(arange(T + 1, kInt64).view({1, T + 1}), len), ids, zeros({B, T + 1}, kInt64));
  const Tensor x = ids.narrow(1, 0, T).contiguous(), y = ids.narrow(1, 1, T).contiguous();
  nn::Embedding emb(30, 8);
  nn::Linear head(8, 30);
  const Tensor out = head(emb(x)).detach();
  nn::CrossEntropyLoss all, masked(nn::CrossEntropyLossOptions().ignore_index(0));
  auto over = [](nn::CrossEntropyLoss& ce) {
    return [&ce](const Tensor& o, const Tensor& t) { return ce(o.reshape({-1, 30}), t.reshape({-1})); };
  };
  CHECK(padding_finding(debug::check_padding_in_loss(x, out, y, over(all))) != nullptr);
  CHECK(debug::check_padding_in_loss(x, out, y, over(masked)).empty());
}

TEST_CASE("L5's padding probe is silent where the batch holds no padding") {
  const Probe p = probe();
  SUBCASE("sequences of one length") {
    manual_seed(6);
    const Tensor x = randn({32, kT, kF}), tags = randint(0, kTags + 1, {32, kT});
    Tagger m;
    CHECK(debug::check_padding_in_loss(x, m(x).detach(), tags, mean_over_every_position).empty());
  }
  SUBCASE("a per-row segmentation whose background (class 0) fills the bottom rows and others too") {
    // Images (B, H, W) with a bright bar at a random height: rows below it are zero and background,
    // and so are the rows above it: the background is a class of the data, not padding.
    manual_seed(7);
    const int64_t B = 32, H = 16, W = 8;
    std::vector<float> img(static_cast<size_t>(B * H * W), 0.0f);
    std::vector<int64_t> cls(static_cast<size_t>(B * H), 0);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t top = 2 + b % 10, rows = 1 + b % 3;
      for (int64_t h = top; h < top + rows; ++h) {
        cls[static_cast<size_t>(b * H + h)] = 1 + h % 2;
        for (int64_t w = 0; w < W; ++w) img[static_cast<size_t>((b * H + h) * W + w)] = 1.0f;
      }
    }
    const Tensor x = tensor(img, {B, H, W}), y = tensor(cls, {B, H});
    nn::Linear row(W, 3);
    auto loss = [](const Tensor& o, const Tensor& t) { return mean(token_nll(o, t)); };
    CHECK(debug::check_padding_in_loss(x, row(x).detach(), y, loss).empty());
  }
  SUBCASE("a pad label that real tokens carry as well") {
    Tensor tags = p.s.tags.clone();
    // Every fourth real token relabelled 0 (a frequent real class 0 with the pad sharing its label).
    std::vector<int64_t> fourth(static_cast<size_t>(kT), 0);
    for (size_t t = 0; t < fourth.size(); t += 4) fourth[t] = 1;
    const Tensor every4 = ne(tensor(fourth, {1, kT}), 0);
    tags = where(logical_and(ne(tags, 0), every4), zeros_like(tags), tags);
    CHECK(debug::check_padding_in_loss(p.s.x, p.out, tags, mean_over_every_position).empty());
  }
  SUBCASE("a regression over time steps: masked squared error is clean, the mean over every step is not") {
    const Tensor target = p.s.x.select(2, 0) * 2.0 + 0.5 * ne(p.s.tags, 0).to(kFloat32);  // 0 on padding
    const Tensor pred = p.out.select(2, 0).contiguous();
    auto all = [](const Tensor& o, const Tensor& t) { return mean(square(o - t)); };
    auto masked = [&](const Tensor& o, const Tensor& t) {
      const Tensor mask = ne(p.s.tags, 0).to(kFloat32);
      return sum(square(o - t) * mask) / sum(mask);
    };
    CHECK(padding_finding(debug::check_padding_in_loss(p.s.x, pred, target, all)) != nullptr);
    CHECK(debug::check_padding_in_loss(p.s.x, pred, target, masked).empty());
  }
}

TEST_CASE(
    "L5 on token ids padded with a real class's tag (a tagger's 'O'): the loss counts the padding; -100: silent") {
  manual_seed(12);
  const int64_t B = 32, T = 20, V = 50;
  // Token ids 1..V-1 (0 is the pad id); tags 0 ("O", most tokens), 1 and 2 for two groups of ids.
  Tensor ids = randint(1, V, {B, T});
  Tensor tags = where(lt(ids, 8), ones_like(ids), where(lt(ids, 14), full_like(ids, 2), zeros_like(ids)));
  const Tensor len = randint(6, T + 1, {B, 1});
  const Tensor real = lt(arange(T, kInt64).view({1, T}), len);
  ids = where(real, ids, zeros_like(ids));
  auto emb = std::make_shared<nn::Embedding>(V, 16);
  nn::Linear head(16, 3);
  const Tensor out = head((*emb)(ids)).detach();  // (B, T, 3)
  nn::CrossEntropyLoss ce;                        // ignore_index -100
  auto loss = [&](const Tensor& o, const Tensor& t) { return ce(o.reshape({-1, 3}), t.reshape({-1})); };
  // The bug: the pad positions tagged 0, the real class most tokens carry.
  const Tensor as_o = where(real, tags, zeros_like(tags));
  const debug::Finding* f = padding_finding(debug::check_padding_in_loss(ids, out, as_o, loss));
  REQUIRE(f != nullptr);
  CHECK(f->title.find("is a real class here too") != std::string::npos);
  CHECK(f->fix.find("ignore_index") != std::string::npos);
  // Tagged -100: the loss leaves them out.
  const Tensor ignored = where(real, tags, full_like(tags, -100));
  CHECK(padding_finding(debug::check_padding_in_loss(ids, out, ignored, loss)) == nullptr);
}

namespace {

// Sequence classifiers over right-padded token ids (0 pads): an Elman RNN that reads its state after the
// last step of the padded batch (output[:, -1]), the same RNN gathered at each row's own last token, a mean
// of the embeddings over the real positions, over every position, and a convolution max-pooled over time.
struct ReadsPadding : nn::Module {
  enum class Kind { LastStep, Gathered, MaskedMean, Mean, MaxPool } kind;
  std::shared_ptr<nn::Embedding> emb = register_module("emb", std::make_shared<nn::Embedding>(30, 16));
  std::shared_ptr<nn::Linear> wx = register_module("wx", std::make_shared<nn::Linear>(16, 32));
  std::shared_ptr<nn::Linear> wh = register_module("wh", std::make_shared<nn::Linear>(32, 32, false));
  std::shared_ptr<nn::Conv2d> conv =
      register_module("conv", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(16, 32, Dims{1, 3})));
  std::shared_ptr<nn::Linear> out = register_module("out", std::make_shared<nn::Linear>(32, 4));
  std::shared_ptr<nn::Linear> out16 = register_module("out16", std::make_shared<nn::Linear>(16, 4));
  explicit ReadsPadding(Kind k) : Module("ReadsPadding"), kind(k) {}
  Tensor forward(const Tensor& ids) override {
    const int64_t B = ids.size(0), T = ids.size(1);
    const Tensor e = (*emb)(ids);  // (B, T, 16)
    const Tensor real = (ids != 0).to(kFloat32);
    if (kind == Kind::MaskedMean) return (*out16)(sum(e * real.unsqueeze(2), {1}) / sum(real, {1}, true));
    if (kind == Kind::Mean) return (*out16)(e.mean({1}));
    if (kind == Kind::MaxPool) return (*out)(amax(relu((*conv)(e.transpose(1, 2).unsqueeze(2))).squeeze(2), {2}));
    const Tensor xin = (*wx)(e);
    Tensor h = zeros({B, 32});
    std::vector<Tensor> states;
    for (int64_t t = 0; t < T; ++t) {
      h = tanh(xin.select(1, t) + (*wh)(h));
      states.push_back(h);
    }
    if (kind == Kind::LastStep) return (*out)(h);
    const Tensor all = stack(states, 1);                                       // (B, T, 32)
    const Tensor last = (sum(real, {1}) - 1.0).to(kInt64).reshape({B, 1, 1});  // each row's last token
    return (*out)(gather(all, 1, last.expand({B, 1, 32})).squeeze(1));
  }
};

Tensor padded_ids(int64_t B, int64_t T, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int64_t> v(static_cast<size_t>(B * T), 0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = 5 + static_cast<int64_t>(g() % static_cast<uint32_t>(T - 4));
    for (int64_t t = 0; t < len; ++t) v[static_cast<size_t>(b * T + t)] = 1 + static_cast<int64_t>(g() % 29);
  }
  return tensor(v, {B, T});
}

}  // namespace

TEST_CASE("L5's padding the model reads: an RNN reading its state after the padded batch's last step warns") {
  manual_seed(3);
  const Tensor ids = padded_ids(128, 30, 5);
  using K = ReadsPadding::Kind;
  auto last = std::make_shared<ReadsPadding>(K::LastStep);
  const std::vector<debug::Finding> fs = debug::check_padding_read(*last, ids);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].kind == debug::Kind::PaddingRead);
  CHECK(fs[0].severity == debug::Severity::Warning);
  CHECK(dtest::evidence(fs[0], "pad id") == 0);
  CHECK(last->is_training());  // its mode put back
  // The state gathered at each row's length, and a mean over the real positions: exactly unmoved. A mean over
  // every position and a convolution max-pooled over the padding move, but within what rows differ by.
  for (K k : {K::Gathered, K::MaskedMean, K::Mean, K::MaxPool}) {
    CAPTURE(static_cast<int>(k));
    auto m = std::make_shared<ReadsPadding>(k);
    CHECK(debug::check_padding_read(*m, ids).empty());
  }
  // Sequences of one length hold no padding: nothing is judged.
  CHECK(debug::check_padding_read(*last, ids.narrow(1, 0, 4) + 1).empty());
}
