// Models over token ids, written as users write them, beside the fault each resembles: a next-token
// head that scores the whole vocabulary (its pad id 0 is never a target) against class labels numbered
// from 1; a pad tag of -1 that a loss function masks itself against one it does not; a masked-mean
// pooling whose all-pad "zeroed" inputs give 0 / 0; and token rows that recur with other labels.
#include <doctest/doctest.h>

#include <memory>
#include <random>
#include <vector>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::Split;

namespace {

constexpr int64_t kV = 12, kT = 10;  // ids 1..kV-1; 0 is the pad id

// Embedding -> per-token MLP -> (B, T, kV) scores over the whole vocabulary, pad id included.
struct TokenNet : nn::Module {
  std::shared_ptr<nn::Embedding> emb = register_module("emb", std::make_shared<nn::Embedding>(kV, 16));
  std::shared_ptr<nn::Linear> h = register_module("h", std::make_shared<nn::Linear>(16, 32));
  std::shared_ptr<nn::Linear> out = register_module("out", std::make_shared<nn::Linear>(32, kV));
  TokenNet() : Module("TokenNet") {}
  Tensor forward(const Tensor& ids) override { return (*out)(relu((*h)((*emb)(ids)))); }
};

// n rows of right-padded ids (lengths 4..kT) and, per position, the next id of a noiseless rule
// ((id * 5 + 1) mod (kV - 1)) + 1 in 1..kV-1; padded positions carry `pad_target`.
struct Rows {
  Tensor ids, next;
};
Rows rows(int64_t n, int64_t pad_target, uint64_t seed, int64_t targets = kV - 1) {
  std::mt19937 g(static_cast<unsigned>(seed));
  std::uniform_int_distribution<int64_t> tok(1, kV - 1), len(4, kT);
  std::vector<int64_t> ids(static_cast<size_t>(n * kT), 0), next(static_cast<size_t>(n * kT), pad_target);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t L = len(g);
    for (int64_t t = 0; t < L; ++t) {
      const size_t i = static_cast<size_t>(r * kT + t);
      ids[i] = tok(g);
      next[i] = (ids[i] * 5 + 1) % targets + 1;
    }
  }
  return {tensor(ids, {n, kT}), tensor(next, {n, kT})};
}

Split token_split(int64_t pad_target, int64_t targets = kV - 1) {
  const Rows tr = rows(480, pad_target, 1, targets), va = rows(120, pad_target, 2, targets);
  return dtest::loaders(tr.ids, tr.next, va.ids, va.next);
}

bool fires(const debug::RunReport& r, const char* check) {
  return dtest::any_finding(r, [&](const debug::Finding& f) { return f.check == check && f.fires(); });
}

}  // namespace

TEST_CASE("a vocabulary head whose pad id (or half its tokens) is never a target: D9 and D3 are info; clean") {
  // Next ids over all of 1..11, or over 1..6 only (ids 7..11 are never a next token).
  for (const int64_t targets : {kV - 1, int64_t{6}}) {
    CAPTURE(targets);
    manual_seed(5);
    const Split d = token_split(-100, targets);
    auto model = std::make_shared<TokenNet>();
    nn::CrossEntropyLoss ce;  // ignore_index -100 on the padded positions
    debug::LossFunction loss = [&](const Tensor& out, const Tensor& y) {
      return ce(out.reshape({-1, kV}), y.reshape({-1}));
    };
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = dtest::train_own_loop(*model, loss, opt, d, 8);
    const debug::Finding* within = dtest::first_of(r, "L5", debug::Kind::TargetsWithinOutputs);
    REQUIRE_MESSAGE(within != nullptr, r.str(true));
    CHECK(within->severity == debug::Severity::Info);
    CHECK_FALSE(fires(r, "D9"));
    CHECK_FALSE(fires(r, "D3"));
    expect_clean(r);
  }
}

namespace {
// TokenNet's scores laid out (B, C, T), as cross-entropy takes per-position classes without a reshape.
struct Tagger : TokenNet {
  Tensor forward(const Tensor& ids) override { return TokenNet::forward(ids).permute({0, 2, 1}); }
};
}  // namespace

TEST_CASE("a tagger's (B, C, T) scores against (B, T) tags: L9 judges the fit by each token's accuracy; clean") {
  manual_seed(5);
  const Split d = token_split(-100);
  auto model = std::make_shared<Tagger>();
  nn::CrossEntropyLoss ce;  // per position, ignore_index -100 on the padding
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 8);
  const debug::Finding* fit = dtest::first_of(r, "L9", debug::Kind::FitMeasured);
  REQUIRE_MESSAGE(fit != nullptr, r.str(true));
  CHECK(dtest::ev(*fit, "training accuracy (eval mode)") > 0.95);  // the padded positions are not counted
  CHECK(dtest::ev(*fit, "validation accuracy") > 0.95);
  expect_clean(r);
}

TEST_CASE("a pad tag of -1: masked by the loss function, D9 is info; read by it, D9's error stands") {
  for (const bool masked : {true, false}) {
    CAPTURE(masked);
    manual_seed(6);
    const Split d = token_split(-1);
    auto model = std::make_shared<TokenNet>();
    // Per-position NLL at clamp(tag, 0): the mask (tag >= 0) leaves the pad out; without it, the pad
    // positions are scored as id 0.
    debug::LossFunction loss = [masked](const Tensor& out, const Tensor& y) {
      const Tensor nll = neg(gather(log_softmax(out, -1), 2, clamp(y, 0, std::nullopt).unsqueeze(-1)).squeeze(-1));
      if (!masked) return mean(nll);
      const Tensor m = ge(y, 0).to(kFloat32);
      return sum(nll * m) / sum(m);
    };
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = dtest::train_own_loop(*model, loss, opt, d, 8);
    const debug::Finding* d9 = nullptr;
    for (const debug::Finding& f : r.findings.findings())
      if (f.check == "D9" && !d9) d9 = &f;
    REQUIRE_MESSAGE(d9 != nullptr, r.str(true));
    if (masked) {
      CHECK(d9->severity == debug::Severity::Info);
      CHECK(dtest::first_of(r, "L5", debug::Kind::TargetsMaskedByLoss) != nullptr);
      expect_clean(r);
    } else {
      CHECK(d9->severity == debug::Severity::Error);
    }
  }
}

TEST_CASE("M15 with a masked-mean pooling: inputs of the pad id only give 0 / 0, and the test is not judged") {
  manual_seed(7);
  // Sequence classification: the class is whether id 1..5 outnumber 6..11 among the real tokens.
  const Rows tr = rows(240, 0, 3), va = rows(60, 0, 4);
  auto label = [](const Tensor& ids) {
    const Tensor low = logical_and(ge(ids, 1), le(ids, 5)).to(kFloat32), high = ge(ids, 6).to(kFloat32);
    return gt(sum(low, {1}), sum(high, {1})).to(kInt64);
  };
  const Tensor ytr = label(tr.ids), yva = label(va.ids);
  struct Pool : nn::Module {
    std::shared_ptr<nn::Embedding> emb = register_module("emb", std::make_shared<nn::Embedding>(kV, 8));
    std::shared_ptr<nn::Linear> head = register_module("head", std::make_shared<nn::Linear>(8, 2));
    Pool() : Module("Pool") {}
    Tensor forward(const Tensor& ids) override {
      const Tensor m = ne(ids, 0).to(kFloat32).unsqueeze(-1);
      return (*head)(sum((*emb)(ids)*m, {1}) / sum(m, {1}));  // 0 / 0 on a row of pads only
    }
  };
  auto model = std::make_shared<Pool>();
  nn::CrossEntropyLoss ce;
  std::vector<std::pair<Tensor, Tensor>> train;
  for (int64_t i = 0; i < 4; ++i) train.emplace_back(tr.ids.narrow(0, 48 * i, 48), ytr.narrow(0, 48 * i, 48));
  const std::vector<debug::Finding> fs = debug::input_independent_baseline(
      *model, train, {va.ids, yva}, [&](const Tensor& o, const Tensor& y) { return ce(o, y); });
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].severity == debug::Severity::Info);
  CHECK(fs[0].title.find("not judged") != std::string::npos);
}

TEST_CASE("D12: a few token rows that recur with other labels are info; feature rows that do, a warning") {
  // 1,000 rows; 4 pairs of them share an input with another label (0.8%).
  for (const bool ids : {true, false}) {
    CAPTURE(ids);
    std::mt19937 g(8);
    std::uniform_int_distribution<int64_t> tok(1, 1000);
    std::vector<int64_t> x(1000 * 6), y(1000);
    for (size_t i = 0; i < x.size(); ++i) x[i] = tok(g);
    for (size_t r = 0; r < 1000; ++r) y[r] = static_cast<int64_t>(r % 3);
    for (size_t k = 0; k < 4; ++k)
      for (size_t j = 0; j < 6; ++j) x[(500 + k) * 6 + j] = x[k * 6 + j];  // row 500+k copies row k's input
    for (size_t k = 0; k < 4; ++k) y[500 + k] = (y[k] + 1) % 3;
    Tensor xt = tensor(x, {1000, 6});
    if (!ids) xt = xt.to(kFloat32) / 1000.0;
    const std::vector<debug::Finding> fs = debug::check_duplicates(nn::TensorDataset(xt, tensor(y, {1000})));
    REQUIRE(fs.size() == 1);
    CHECK(fs[0].severity == (ids ? debug::Severity::Info : debug::Severity::Warning));
  }
}

namespace {
// Reviews as token ids, left-padded to 48 with the pad id 0 (the last positions hold the tokens): a
// review is positive when ids 1..5 outnumber 6..11 among its last 16 of 3..44 tokens. The pipeline then
// keeps 16 positions: the first 16 (for the 7 reviews in 10 of 32 tokens or fewer, nothing but padding) or
// the last 16.
struct Bag : nn::Module {
  std::shared_ptr<nn::Embedding> emb = register_module("emb", std::make_shared<nn::Embedding>(kV, 16));
  std::shared_ptr<nn::Linear> h = register_module("h", std::make_shared<nn::Linear>(16, 16));
  std::shared_ptr<nn::Linear> out = register_module("out", std::make_shared<nn::Linear>(16, 2));
  Bag() : Module("Bag") {}
  Tensor forward(const Tensor& ids) override { return (*out)(relu((*h)(mean((*emb)(ids), {1})))); }
};
Rows reviews(int64_t n, uint64_t seed, bool keep_front) {
  constexpr int64_t kPad = 48, kKeep = 16;
  std::mt19937 g(static_cast<unsigned>(seed));
  std::uniform_int_distribution<int64_t> tok(1, kV - 1), len(3, 44);
  std::vector<int64_t> ids(static_cast<size_t>(n * kPad), 0), label(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    const int64_t L = len(g);
    int64_t pos = 0;
    for (int64_t t = kPad - L; t < kPad; ++t) {
      const int64_t id = tok(g);
      ids[static_cast<size_t>(r * kPad + t)] = id;
      if (t >= kPad - kKeep) pos += id <= 5 ? 1 : -1;
    }
    label[static_cast<size_t>(r)] = pos > 0 ? 1 : 0;
  }
  const Tensor x = tensor(ids, {n, kPad}).narrow(1, keep_front ? 0 : kPad - kKeep, kKeep).contiguous();
  return {x, tensor(label, {n})};
}
}  // namespace

TEST_CASE("left-padded reviews cut to their first positions (padding only for most): D12 leads; their last: clean") {
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    manual_seed(8);
    const Rows tr = reviews(600, 1, bug), va = reviews(200, 2, bug);
    const Split d = dtest::loaders(tr.ids, tr.next, va.ids, va.next);
    auto model = std::make_shared<Bag>();
    nn::CrossEntropyLoss loss;
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = dtest::train_own_loop(*model, loss, opt, d, 20);
    if (bug) {
      dtest::expect_lead(r, "D12", "blank-inputs");
      const debug::Finding* blank = dtest::first_of(r, "D12", debug::Kind::BlankInputs);
      REQUIRE(blank != nullptr);
      CHECK(blank->value_of("rows holding the most repeated input, one value in every position") >= 0.3);
    } else {
      expect_clean(r);
    }
  }
}
