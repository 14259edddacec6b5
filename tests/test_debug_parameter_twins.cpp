// M5 on parameters the training forward does not reach, each twin written as a user writes it.
// Eval-only parameters: temperature scaling (Guo et al., 2017), whose temperature divides the logits
// only in eval mode and is fitted on held-out data after training, outside the training optimizer
// (healthy); the same model with the temperature in the training optimizer, where the loop means to
// train it and never can (a bug); and a parameter registered but used in neither mode.
// Replaced parameters: a head re-initialised by assigning a new tensor to its weight after the
// optimizer was built (the forward reads a tensor nobody updates), against the same initialisation
// copied in place; and a learnable tensor kept beside the model and given to the optimizer (healthy).
// Unread input columns: a tower handed the wrong block of features beside the right one, and a column
// read only through its sign (no gradient, still read). Unregistered layers: a bag-of-tokens classifier
// whose Embedding member was never passed to register_module, against the registered one and against
// the unregistered one trained by an optimizer of its own.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::expect_lead;
using dtest::first_of;
using dtest::Mlp;
using dtest::Split;

namespace {

// An MLP whose logits are divided by exp(log_t) in eval mode only; `unused` is registered and never read.
struct Calibrated : nn::Module {
  std::shared_ptr<Mlp> net = register_module("net", std::make_shared<Mlp>());
  Tensor log_t = register_parameter("log_t", zeros({1}));
  Tensor unused;
  explicit Calibrated(bool with_unused = false) : Module("Calibrated") {
    if (with_unused) unused = register_parameter("unused", zeros({3}));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor z = (*net)(x);
    return is_training() ? z : z / exp(log_t);
  }
};

// Trains the net, then (as temperature scaling does) fits log_t alone on the validation split.
debug::RunReport train_then_calibrate(Calibrated& m, optim::Optimizer& opt, const Split& d) {
  nn::CrossEntropyLoss ce;
  debug::Session session(m, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 6; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = ce(m(b.x), b.y);
      l.backward();
      opt.step();
    }
    session.epoch();
  }
  const debug::RunReport r = session.finish();
  m.eval();
  optim::Adam calibrate({m.log_t}, optim::AdamOptions(0.05));
  for (int i = 0; i < 50; ++i)
    for (const nn::Batch& b : *d.val) {
      calibrate.zero_grad();
      Tensor l = nn::functional::cross_entropy(m(b.x), b.y);
      l.backward();
      calibrate.step();
    }
  return r;
}

}  // namespace

TEST_CASE("a temperature used in eval mode only, outside the optimizer, is info; in the optimizer it warns") {
  manual_seed(9);
  const Split d = dtest::split(3, 2.0);
  auto m = std::make_shared<Calibrated>();
  optim::Adam opt(m->net->parameters(), optim::AdamOptions(3e-3));
  const debug::RunReport r = train_then_calibrate(*m, opt, d);
  expect_clean(r);
  const debug::Finding* f = first_of(r, "M5", debug::Kind::EvalOnlyParameter);
  REQUIRE_MESSAGE(f != nullptr, r.str(true));
  CHECK(f->parameter == "log_t");
  // The calibration itself ran: the temperature moved off 1.
  CHECK(std::abs(m->log_t.item<double>()) > 1e-3);

  // The bug: the optimizer holds the temperature (the loop means to train it), and the training
  // forward never uses it.
  manual_seed(9);
  auto bug = std::make_shared<Calibrated>();
  optim::Adam bug_opt(bug->parameters(), optim::AdamOptions(3e-3));
  const debug::RunReport b = train_then_calibrate(*bug, bug_opt, d);
  CHECK(first_of(b, "M5", debug::Kind::EvalOnlyParameter) == nullptr);
  const debug::Finding* cut = first_of(b, "M5", debug::Kind::ParameterUnreached);
  REQUIRE_MESSAGE(cut != nullptr, b.str(true));
  CHECK(cut->severity == debug::Severity::Warning);
  expect_lead(b, "M5", "cut-graph");
}

TEST_CASE("a parameter used in neither mode still warns beside an eval-only one") {
  manual_seed(9);
  const Split d = dtest::split(3, 2.0);
  auto m = std::make_shared<Calibrated>(true);
  optim::Adam opt(m->net->parameters(), optim::AdamOptions(3e-3));
  const debug::RunReport r = train_then_calibrate(*m, opt, d);
  bool unused_warns = false;
  for (const debug::Finding& f : r.findings.findings()) {
    if (f.fires() && f.parameter == "unused" && f.check == "M5") unused_warns = true;
    if (f.parameter == "log_t" && (f.check == "M5" || f.check == "O1")) CHECK_MESSAGE(!f.fires(), f.str());
  }
  CHECK_MESSAGE(unused_warns, r.str(true));
  // M10 names both: one of them is no eval-only parameter, so it keeps its warning.
  bool m10 = false;
  for (const debug::Finding& f : r.findings.findings()) m10 = m10 || (f.check == "M10" && f.fires());
  CHECK(m10);
}

TEST_CASE("a weight re-initialised by assignment after the optimizer leads as replaced; copied in place it is clean") {
  for (bool zero : {false, true}) {
    manual_seed(4);
    const Split d = dtest::split(3, 2.0);
    nn::CrossEntropyLoss ce;
    auto bug = std::make_shared<Mlp>();
    optim::Adam bug_opt(bug->parameters(), optim::AdamOptions(3e-3));
    // "Xavier (or zeros) for the head", written after the optimizer: a new tensor in the member.
    Tensor w = zeros({3, 32});
    if (!zero) nn::init::xavier_uniform_(w);
    bug->fc3->weight = w.requires_grad_(true);
    const debug::RunReport b = dtest::train_own_loop(*bug, ce, bug_opt, d, 4);
    const debug::Finding* f = first_of(b, "M5", debug::Kind::ParameterReplaced);
    REQUIRE_MESSAGE(f != nullptr, b.str(true));
    CHECK(f->parameter == "fc3.weight");
    expect_lead(b, "M5", "parameter-replaced", {"O1"});

    manual_seed(4);
    auto clean = std::make_shared<Mlp>();
    optim::Adam clean_opt(clean->parameters(), optim::AdamOptions(3e-3));
    Tensor v = zeros({3, 32});
    if (!zero) nn::init::xavier_uniform_(v);
    {
      NoGradGuard g;
      clean->fc3->weight.copy_(v);
    }
    expect_clean(dtest::train_own_loop(*clean, ce, clean_opt, d, 4));
  }
}

TEST_CASE("a learnable tensor kept beside the model, in the optimizer, is no replaced parameter") {
  // Homoscedastic uncertainty weighting (Kendall et al., 2018) of one task: loss * exp(-s) + s, with s
  // a tensor of the loop, not of the model, trained by the same optimizer.
  manual_seed(4);
  const Split d = dtest::split(3, 2.0);
  auto m = std::make_shared<Mlp>();
  Tensor s = zeros({3, 32}).requires_grad_(true);  // the shape of a weight of the model, on purpose
  std::vector<Tensor> params = m->parameters();
  params.push_back(s);
  optim::Adam opt(params, optim::AdamOptions(3e-3));
  const debug::LossFunction weighted = [&](const Tensor& out, const Tensor& y) {
    const Tensor log_var = mean(s);
    return nn::functional::cross_entropy(out, y) * exp(-log_var) + log_var;
  };
  debug::Session session(*m, weighted, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 4; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = weighted((*m)(b.x), b.y);
      l.backward();
      opt.step();
      session.step(l);
    }
    session.epoch();
  }
  const debug::RunReport r = session.finish();
  CHECK(first_of(r, "M5", debug::Kind::ParameterReplaced) == nullptr);
  CHECK_MESSAGE(!r.fired("M5"), r.str(true));
}

namespace {

// Four epochs of the user's own loop over d.train, watched by a Session.
debug::RunReport own_loop_run(nn::Module& m, const debug::LossFunction& loss, optim::Optimizer& opt, const Split& d) {
  debug::Session session(m, loss, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < 4; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = loss(m(b.x), b.y);
      l.backward();
      opt.step();
      session.step(l);
    }
    session.epoch(std::nan(""), std::nan(""));
  }
  return session.finish();
}

// Two regression heads on one trunk, output (B, 2): price and days.
struct TwoHeads : nn::Module {
  std::shared_ptr<nn::Linear> trunk, price, days;
  TwoHeads() : Module("TwoHeads") {
    trunk = register_module("trunk", std::make_shared<nn::Linear>(6, 32));
    price = register_module("price", std::make_shared<nn::Linear>(32, 1));
    days = register_module("days", std::make_shared<nn::Linear>(32, 1));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = relu((*trunk)(x));
    return cat({(*price)(h), (*days)(h)}, 1);
  }
};

// The loop's loss sums the two tasks' MSE. `bug`: the second term reads column 0 again (a copy of the line
// above), so the days head never trains.
debug::RunReport two_heads_run(bool bug) {
  manual_seed(8);
  const Tensor x = randn({400, 6});
  const Tensor w = randn({6, 2});
  const Tensor y = matmul(x, w) + randn({400, 2}) * 0.1;
  const Split d = dtest::loaders(x.narrow(0, 0, 320), y.narrow(0, 0, 320), x.narrow(0, 320, 80), y.narrow(0, 320, 80));
  auto m = std::make_shared<TwoHeads>();
  optim::Adam opt(m->parameters(), optim::AdamOptions(3e-3));
  const debug::LossFunction two_tasks = [bug](const Tensor& out, const Tensor& t) {
    const Tensor first = nn::functional::mse_loss(out.select(1, 0), t.select(1, 0));
    const Tensor second = nn::functional::mse_loss(out.select(1, bug ? 0 : 1), t.select(1, 1));
    return first + second;
  };
  return own_loop_run(*m, two_tasks, opt, d);
}

}  // namespace

namespace {

// A localiser: one head computes 4 class logits and a 2-d centre, output (B, 6). `bug`: the centre is read
// from the head's first two units (a copy of the logits' slice) instead of its last two.
struct JointHead : nn::Module {
  std::shared_ptr<nn::Linear> trunk, head;
  bool bug;
  explicit JointHead(bool b) : Module("JointHead"), bug(b) {
    trunk = register_module("trunk", std::make_shared<nn::Linear>(6, 32));
    head = register_module("head", std::make_shared<nn::Linear>(32, 6));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = (*head)(relu((*trunk)(x)));
    return cat({h.narrow(1, 0, 4), sigmoid(h.narrow(1, bug ? 0 : 4, 2))}, 1);
  }
};

debug::RunReport joint_head_run(bool bug) {
  manual_seed(12);
  const Tensor x = randn({400, 6});
  const Tensor cls = argmax(matmul(x, randn({6, 4})), 1).to(kFloat32).unsqueeze(1);
  const Tensor centre = sigmoid(matmul(x, randn({6, 2})));
  const Tensor y = cat({cls, centre}, 1);  // (B, 3): the class and the centre
  const Split d = dtest::loaders(x.narrow(0, 0, 320), y.narrow(0, 0, 320), x.narrow(0, 320, 80), y.narrow(0, 320, 80));
  auto m = std::make_shared<JointHead>(bug);
  optim::Adam opt(m->parameters(), optim::AdamOptions(3e-3));
  const debug::LossFunction joint = [](const Tensor& out, const Tensor& t) {
    const Tensor ce = nn::functional::cross_entropy(out.narrow(1, 0, 4), t.select(1, 0).to(kInt64));
    return ce + nn::functional::mse_loss(out.narrow(1, 4, 2), t.narrow(1, 1, 2));
  };
  return own_loop_run(*m, joint, opt, d);
}

}  // namespace

TEST_CASE("a slice that reads a layer's wrong units: M5 units-unread names them and leads; the right slice is clean") {
  const debug::RunReport bug = joint_head_run(true);
  const debug::Finding* f = first_of(bug, "M5", debug::Kind::UnitsUnread);
  REQUIRE_MESSAGE(f != nullptr, bug.str(true));
  CHECK(f->title.find("units 4, 5 of head") != std::string::npos);
  CHECK(dtest::ev(*f, "units whose weights and bias got a zero gradient, whose rise moves no output") == 2.0);
  expect_lead(bug, "M5", "output-unread");
  const debug::RunReport fixed = joint_head_run(false);
  CHECK(first_of(fixed, "M5", debug::Kind::UnitsUnread) == nullptr);
  CHECK_MESSAGE(!fixed.fired("M5"), fixed.str(true));
}

namespace {

// fc (6 -> 8), ReLU, then out; `sliced`: the forward keeps fc's first 7 units only.
struct SlicedHidden : nn::Module {
  std::shared_ptr<nn::Linear> fc, out;
  bool sliced;
  explicit SlicedHidden(bool s) : Module("SlicedHidden"), sliced(s) {
    fc = register_module("fc", std::make_shared<nn::Linear>(6, 8));
    out = register_module("out", std::make_shared<nn::Linear>(s ? 7 : 8, 1));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = relu((*fc)(x));
    return (*out)(sliced ? h.narrow(1, 0, 7) : h);
  }
};

}  // namespace

TEST_CASE("M5 units-unread: a unit a ReLU silences on every row is not unread; a unit the forward drops is") {
  // The silenced unit gets no gradient through its ReLU (M7's matter); raising it wakes the ReLU and
  // moves the output. The dropped unit gets none either, and raising it moves nothing.
  for (const bool sliced : {false, true}) {
    CAPTURE(sliced);
    manual_seed(13);
    auto model = std::make_shared<SlicedHidden>(sliced);
    {
      NoGradGuard ng;
      model->fc->bias.narrow(0, 7, 1).fill_(sliced ? 0.0 : -100.0);
    }
    const Tensor x = randn({32, 6});
    (*model)(x).square().mean().backward();
    CHECK(amax(abs(model->fc->weight.grad().narrow(0, 7, 1))).item<double>() == 0.0);
    const std::vector<debug::Finding> fs = debug::find_unread_units(*model, x);
    REQUIRE(fs.size() == (sliced ? 1u : 0u));
    if (sliced) CHECK(fs[0].title.find("unit 7 of fc") != std::string::npos);
  }
}

namespace {

// A Real NVP coupling layer on 2-D points: its network outputs a scale and a shift for both coordinates,
// and a fixed 0/1 mask (a buffer) keeps those of the coordinate that passes through at zero, as the
// paper's implementation does. Without the mask the same units are read through a slice that skips them.
struct Coupling : nn::Module {
  std::shared_ptr<nn::Linear> fc, st;
  Tensor mask;
  bool masked;
  explicit Coupling(bool m) : Module("Coupling"), masked(m) {
    fc = register_module("fc", std::make_shared<nn::Linear>(2, 16));
    st = register_module("st", std::make_shared<nn::Linear>(16, 4));
    mask = register_buffer("mask", tensor({0.0, 1.0}, {1, 2}));  // coordinate 0 passes through
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = (*st)(relu((*fc)(masked ? x * (1.0 - mask) : x)));
    const Tensor s = masked ? tanh(h.narrow(1, 0, 2)) * mask : tanh(h.narrow(1, 1, 1));
    const Tensor t = masked ? h.narrow(1, 2, 2) * mask : h.narrow(1, 3, 1);
    if (!masked) return cat({x.narrow(1, 0, 1), x.narrow(1, 1, 1) * exp(s) + t}, 1);
    return x * (1.0 - mask) + mask * (x * exp(s) + t);
  }
};

}  // namespace

TEST_CASE("M5 units-unread: units a constant 0/1 mask cuts off (a coupling layer) are info; sliced away they warn") {
  for (const bool masked : {true, false}) {
    CAPTURE(masked);
    manual_seed(14);
    auto model = std::make_shared<Coupling>(masked);
    const Tensor x = randn({32, 2});
    (*model)(x).square().mean().backward();
    const std::vector<debug::Finding> fs = debug::find_unread_units(*model, x);
    REQUIRE(fs.size() == 1u);
    CHECK(fs[0].title.find("units 0, 2 of st") != std::string::npos);
    CHECK(fs[0].severity == (masked ? debug::Severity::Info : debug::Severity::Warning));
  }
}

TEST_CASE("a loss term that reads the wrong output column: M5 output-unread leads; the right column is clean") {
  const debug::RunReport bug = two_heads_run(true);
  expect_lead(bug, "M5", "output-unread");
  const debug::Finding* f = first_of(bug, "M5", debug::Kind::OutputUnread);
  REQUIRE_MESSAGE(f != nullptr, bug.str(true));
  CHECK(f->parameter.rfind("days.", 0) == 0);
  CHECK(dtest::ev(*f, "output columns whose gradient is zero on every row of the batch") == 1.0);
  CHECK(f->title.find("output column 1") != std::string::npos);
  const debug::RunReport fixed = two_heads_run(false);
  CHECK(first_of(fixed, "M5", debug::Kind::OutputUnread) == nullptr);
  CHECK_MESSAGE(!fixed.fired("M5"), fixed.str(true));
}

namespace {

// Two towers over two blocks of features, x (B, 12): the first reads columns 0-5, the second columns
// 6-11; their outputs joined feed the classifier. `bug`: the second tower is handed the first block
// again (the wrong variable), so columns 6-11 never reach the prediction.
struct TwoTowers : nn::Module {
  std::shared_ptr<nn::Linear> a, b, head;
  bool bug;
  explicit TwoTowers(bool bg) : Module("TwoTowers"), bug(bg) {
    a = register_module("a", std::make_shared<nn::Linear>(6, 16));
    b = register_module("b", std::make_shared<nn::Linear>(6, 16));
    head = register_module("head", std::make_shared<nn::Linear>(32, 3));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor first = x.narrow(1, 0, 6), second = x.narrow(1, bug ? 0 : 6, 6);
    return (*head)(cat({relu((*a)(first)), relu((*b)(second))}, 1));
  }
};

// Column 3 read through its sign (no gradient reaches it), column 5 never: the roll test tells them apart.
struct RoundedColumn : nn::Module {
  std::shared_ptr<nn::Linear> fc = register_module("fc", std::make_shared<nn::Linear>(5, 2));
  RoundedColumn() : Module("RoundedColumn") {}
  Tensor forward(const Tensor& x) override {
    return (*fc)(cat({x.narrow(1, 0, 3), sign(x.narrow(1, 3, 1)), x.narrow(1, 4, 1)}, 1));
  }
};

}  // namespace

TEST_CASE("a tower handed the wrong input block: M5 input-columns-unread names the columns and leads; clean twin") {
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    manual_seed(14);
    const dtest::XY all = dtest::blobs(200, 3, 12, 5, 2.0);
    const Split d = dtest::loaders(all.x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), all.x.narrow(0, 480, 120),
                                   all.y.narrow(0, 480, 120));
    auto model = std::make_shared<TwoTowers>(bug);
    nn::CrossEntropyLoss ce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 8);
    if (bug) {
      const debug::Finding* f = first_of(r, "M5", debug::Kind::InputColumnsUnread);
      REQUIRE_MESSAGE(f != nullptr, r.str(true));
      CHECK(f->title.find("input columns 6, 7, 8") != std::string::npos);
      CHECK(dtest::ev(*f, "input columns whose values, moved across the batch, move no output") == 6.0);
      expect_lead(r, "M5", "output-unread");
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("M5 input-columns-unread: a column read through its sign is read; one never read, or constant, is told") {
  manual_seed(15);
  auto model = std::make_shared<RoundedColumn>();
  Tensor x = randn({32, 6});
  const std::vector<debug::Finding> fs = debug::find_unread_input_columns(*model, x);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].title.find("input column 5 of 6") != std::string::npos);
  // Column 5 constant over the batch: not judged, and nothing else is unread.
  x.narrow(1, 5, 1).fill_(1.0);
  CHECK(debug::find_unread_input_columns(*model, x).empty());
  // Images and sequences of more than 64 values per row are not judged.
  CHECK(debug::find_unread_input_columns(*model, randn({32, 80})).empty());
}

namespace {

// Tokens of 3 topics: each of 12 tokens drawn from its topic's 20 ids with probability 0.6, else from
// all 60; the label is the topic. The model averages the token embeddings and classifies them.
struct Bag : nn::Module {
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::Linear> fc = register_module("fc", std::make_shared<nn::Linear>(8, 3));
  explicit Bag(bool registered) : Module("Bag") {
    embed = registered ? register_module("embed", std::make_shared<nn::Embedding>(60, 8))
                       : std::make_shared<nn::Embedding>(60, 8);
  }
  Tensor forward(const Tensor& ids) override { return (*fc)(mean((*embed)(ids), {1})); }
};

Split topics() {
  manual_seed(12);
  auto make = [](int64_t n) {
    const Tensor y = randint(0, 3, {n});
    const Tensor own = y.unsqueeze(1) * 20 + randint(0, 20, {n, 12});
    const Tensor any = randint(0, 60, {n, 12});
    return std::make_pair(where(rand({n, 12}) < 0.6, own, any), y);
  };
  const auto [xtr, ytr] = make(960);
  const auto [xva, yva] = make(240);
  return dtest::loaders(xtr, ytr, xva, yva);
}

// The user's loop over the topics, with a Session; `also`: a second optimizer stepped beside `opt`.
debug::RunReport topics_loop(const Split& d, nn::Module& model, optim::Optimizer& opt, int epochs,
                             optim::Optimizer* also = nullptr) {
  nn::CrossEntropyLoss ce;
  debug::Session s(model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  for (int e = 0; e < epochs; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      if (also) also->zero_grad();
      Tensor l = ce(model(b.x), b.y);
      l.backward();
      opt.step();
      if (also) also->step();
    }
    s.epoch();
  }
  return s.finish();
}

// `own_optimizer`: the unregistered embedding trained by an Adam of its own.
debug::RunReport bag_run(bool registered, bool own_optimizer = false) {
  const Split d = topics();  // seeds the generator, then the model is drawn
  auto model = std::make_shared<Bag>(registered);
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  optim::Adam embed_opt(model->embed->parameters(), optim::AdamOptions(1e-2));
  return topics_loop(d, *model, opt, 6, own_optimizer ? &embed_opt : nullptr);
}

}  // namespace

TEST_CASE("an Embedding never registered: M5 parameter-unregistered leads; registered, or trained apart, it is not") {
  const debug::RunReport bug = bag_run(false);
  const debug::Finding* f = first_of(bug, "M5", debug::Kind::ParameterUnregistered);
  REQUIRE_MESSAGE(f != nullptr, bug.str(true));
  CHECK(f->severity == debug::Severity::Warning);
  CHECK(f->shape == "[60, 8]");
  CHECK(dtest::ev(*f, "norm of the gradient it holds at the end") > 0);
  CHECK(dtest::lead_cause(bug) == "unregistered-parameter");
  const debug::RunReport ok = bag_run(true);
  CHECK(first_of(ok, "M5", debug::Kind::ParameterUnregistered) == nullptr);
  expect_clean(ok);
  const debug::RunReport apart = bag_run(false, true);
  CHECK_MESSAGE(first_of(apart, "M5", debug::Kind::ParameterUnregistered) == nullptr, apart.str(true));
}

namespace {

// The bag-of-tokens classifier whose head is built "lazily" inside forward(), where the embedding's width
// is first known: a new Linear with new random weights at every call, never registered (the bug); built
// once in the constructor (the twin).
struct LazyBag : nn::Module {
  std::shared_ptr<nn::Embedding> embed = register_module("embed", std::make_shared<nn::Embedding>(60, 8));
  std::shared_ptr<nn::Linear> hidden = register_module("hidden", std::make_shared<nn::Linear>(8, 16));
  std::shared_ptr<nn::Linear> fc;
  bool lazy;
  explicit LazyBag(bool l) : Module("LazyBag"), lazy(l) {
    if (!lazy) fc = register_module("fc", std::make_shared<nn::Linear>(16, 3));
  }
  Tensor forward(const Tensor& ids) override {
    const Tensor h = relu((*hidden)(mean((*embed)(ids), {1})));
    if (lazy) return (*std::make_shared<nn::Linear>(h.size(1), 3))(h);  // BUG: a new layer at every call
    return (*fc)(h);
  }
};

debug::RunReport lazy_run(bool lazy) {
  const Split d = topics();
  auto model = std::make_shared<LazyBag>(lazy);
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  return topics_loop(d, *model, opt, 4);
}

}  // namespace

TEST_CASE(
    "a layer built inside forward(): M5 names the tensors made anew at every step and leads; M2's randomness "
    "at evaluation is its symptom; built in the constructor, clean") {
  const debug::RunReport bug = lazy_run(true);
  const debug::Finding* f = first_of(bug, "M5", debug::Kind::ParameterUnregistered);
  REQUIRE_MESSAGE(f != nullptr, bug.str(true));
  CHECK(f->fires());
  CHECK(f->title.find("created anew inside the model's forward") != std::string::npos);
  CHECK(f->title.find("[3, 16]") != std::string::npos);
  CHECK(dtest::lead_cause(bug) == "unregistered-parameter");
  const debug::Finding* m2 = first_of(bug, "M2", debug::Kind::RandomAtEval);
  if (m2 != nullptr) CHECK_FALSE(m2->fires());  // explained by the layer built in forward()
  const debug::RunReport ok = lazy_run(false);
  CHECK(first_of(ok, "M5", debug::Kind::ParameterUnregistered) == nullptr);
  expect_clean(ok);
}

namespace {

// A hand-written recurrent cell over 12 steps of 4 features; the label says whether the first feature
// summed over the steps is positive, so the state must carry what earlier steps saw. `carried` false is the
// bug: the loop passes the initial zero state at every step (cell(x_t, h0) for cell(x_t, h)).
struct Recurrent : nn::Module {
  std::shared_ptr<nn::Linear> ih, hh, out;
  bool carried;
  explicit Recurrent(bool c) : Module("Recurrent"), carried(c) {
    ih = register_module("ih", std::make_shared<nn::Linear>(4, 24));
    hh = register_module("hh", std::make_shared<nn::Linear>(24, 24));
    out = register_module("out", std::make_shared<nn::Linear>(24, 2));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h0 = zeros({x.size(0), 24});
    Tensor h = h0;
    for (int64_t t = 0; t < x.size(1); ++t) h = tanh((*ih)(x.select(1, t)) + (*hh)(carried ? h : h0));
    return (*out)(h);
  }
};

}  // namespace

TEST_CASE("a recurrent cell given the initial zero state at every step: M25's zero input leads; carried: clean") {
  auto data = [](int64_t n) {
    const Tensor x = randn({n, 12, 4});
    return std::make_pair(x, (x.select(2, 0).sum({1}) > 0.0).to(kInt64));
  };
  for (const bool carried : {false, true}) {
    CAPTURE(carried);
    manual_seed(31);
    const auto [xt, yt] = data(2560);
    const auto [xv, yv] = data(320);
    const Split d = dtest::loaders(xt, yt, xv, yv);
    auto model = std::make_shared<Recurrent>(carried);
    nn::CrossEntropyLoss ce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 8);
    const debug::Finding* zero = nullptr;
    for (const debug::Finding& f : r.findings.findings())
      if (f.fires() && f.is("M25", debug::Kind::ZeroValue) && f.title.find("the input of hh") == 0) zero = &f;
    if (carried) {
      CHECK(zero == nullptr);
      expect_clean(r);
    } else {
      REQUIRE_MESSAGE(zero != nullptr, r.str(true));
      expect_lead(r, "M25", "all-zero");
    }
  }
}
