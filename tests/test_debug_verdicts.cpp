// Verdicts users can trust: root cause first (what a fault sets off grouped under the finding
// that started it, independent bugs kept apart), redundant biases said once as info,
// the adaptive overfit budget (M14), and messages that fit the case (the in-place
// hint, D4 against a reference with other preprocessing, float labels of shape (B, 1)).
// Each on models, losses and loops written as a user would, with a clean twin.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <set>

#include "core/autograd.h"
#include "debug/checks/data/data_checks.h"
#include "debug/diagnosis/diagnosis.h"
#include "debug/report/html_report.h"
#include "debug/run/monitor.h"
#include "debug_test_util.h"
#include "json_mini.h"
#include "optim/optim.h"

using namespace dtest;

namespace {

// log(softmax(x)) written out by hand: exp overflows for large logits (the classic unstable form).
struct NaiveLogSoftmax : nn::Module {
  NaiveLogSoftmax() : Module("NaiveLogSoftmax") {}
  Tensor forward(const Tensor& x) override {
    Tensor e = gs::exp(x);
    return gs::log(e / gs::sum(e, {1}, true));
  }
};
// The stable twin.
struct StableLogSoftmax : nn::Module {
  StableLogSoftmax() : Module("StableLogSoftmax") {}
  Tensor forward(const Tensor& x) override { return gs::log_softmax(x, 1); }
};

// A user's own loop with the monitor attached: NLL on the model's log-probabilities.
dbg::Report train_with_monitor(nn::Module& model, const Tensor& x, const Tensor& y, int64_t steps, double lr) {
  nn::NLLLoss loss;
  gs::optim::SGD opt(model.parameters(), gs::optim::SGDOptions(lr));
  dbg::MonitorOptions mo;
  mo.every = 1;
  dbg::Monitor m(model, opt, &loss, mo);
  for (int64_t s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor l = loss(model(x), y);
    l.backward();
    opt.step();
    m.record_step(l.item<double>());
  }
  m.finish();
  return m.report();
}

std::vector<const dbg::Finding*> of_check(const dbg::Report& r, const std::string& id) {
  std::vector<const dbg::Finding*> out;
  for (const auto& f : r.findings())
    if (f.check == id) out.push_back(&f);
  return out;
}

}  // namespace

// ---- root cause first -----------------------------------------------------------------

TEST_CASE("a NaN cascade is grouped under the op/module that started it; an unrelated data bug stays apart") {
  // The buggy twin: raw 0..255 inputs (D5, a data bug of its own) into a model whose
  // hand-written log-softmax overflows: NaN at one module, then gradients, weights, loss.
  gs::manual_seed(5);
  XY d = blobs(16, 3, 6, 11, 1.0);
  Tensor raw = (d.x.abs() * 60.0).clamp(0.0, 255.0).to(gs::kInt64).to(gs::kFloat32);  // whole 0..255
  auto model =
      std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 3), std::make_shared<NaiveLogSoftmax>());
  dbg::Report r = train_with_monitor(*model, raw, d.y, 6, 0.5);
  r.add(dbg::check_normalisation(raw));
  INFO(r.str(true, true));
  REQUIRE(r.fired("D5"));
  const std::vector<dbg::FindingGroup> groups = r.groups();
  // The NaN root: an error that names the module (and the op) where the first NaN/Inf came from.
  const dbg::FindingGroup* nan_group = nullptr;
  for (const auto& g : groups)
    if (r.findings()[g.root].check == "M12" || r.findings()[g.root].check == "W4") nan_group = &g;
  REQUIRE(nan_group != nullptr);
  const dbg::Finding& root = r.findings()[nan_group->root];
  CHECK(root.severity == dbg::Severity::Error);
  CHECK(root.module.find("1 (NaiveLogSoftmax)") == 0);
  CHECK_FALSE(root.op.empty());
  CHECK(nan_group->rule == dbg::find_cause("nonfinite-op")->name);
  // Its consequences: non-finite gradients (O1 errors), weights (O4), the loss (L1/W3).
  REQUIRE(nan_group->follow_on.size() >= 3);
  std::set<std::string> follow;
  for (size_t i : nan_group->follow_on) {
    follow.insert(r.findings()[i].check);
    CHECK(dbg::finding_time(r.findings()[i]) >= dbg::finding_time(root));  // never earlier than the root
  }
  CHECK(follow.count("O1"));
  CHECK(follow.count("O4"));
  CHECK((follow.count("L1") || follow.count("W3")));
  // D5 is not a consequence of the NaN: its own top-level group. The NaN source leads: a
  // confirmed fault that explains more than D5 does.
  CHECK(r.findings()[groups.front().root].check == root.check);
  CHECK(dbg::lead_finding(r)->check == root.check);
  CHECK(std::any_of(groups.begin(), groups.end(), [&](const auto& x) { return r.findings()[x.root].check == "D5"; }));
  for (const auto& g : groups) {
    if (r.findings()[g.root].check == "D5") continue;
    for (size_t i : g.follow_on) CHECK(r.findings()[i].check != "D5");
  }
  // Every firing finding is in exactly one group.
  size_t in_groups = 0, firing = 0;
  for (const auto& g : groups) in_groups += 1 + g.follow_on.size();
  for (const auto& f : r.findings()) firing += f.fires() ? 1 : 0;
  CHECK(in_groups == firing);

  // The text: the root in full, then "and N follow-on findings"; verbose lists them.
  const std::string s = r.str(false);
  const std::string n = "and " + std::to_string(nan_group->follow_on.size()) + " follow-on findings";
  CHECK(s.find(n) != std::string::npos);
  CHECK(s.find("[O4 error]") == std::string::npos);  // folded under the root
  const std::string v = r.str(false, true);
  CHECK(v.find("-> [O4 error]") != std::string::npos);
  CHECK(v.find("[D5 warning]") != std::string::npos);

  // JSON: every finding kept, each follow-on with "caused_by" its root's index.
  json_mini::Value j = json_mini::parse(r.json());
  REQUIRE(j.arr.size() == r.size());
  for (size_t i : nan_group->follow_on) {
    REQUIRE(j.arr[i].get("caused_by")->kind == json_mini::Value::Number);
    CHECK(j.arr[i].get("caused_by")->num == doctest::Approx(static_cast<double>(nan_group->root)));
  }
  CHECK(j.arr[nan_group->root].get("caused_by")->kind == json_mini::Value::Null);

  // HTML: the consequences in a collapsible block under the root.
  dbg::HtmlReport rep;
  rep.findings = r;
  const std::string html = dbg::render_html(rep);
  CHECK(html.find("<details><summary>" + n) != std::string::npos);
}

TEST_CASE("the clean twin of the NaN cascade: standardised inputs, the stable log-softmax: nothing fires or groups") {
  gs::manual_seed(5);
  XY d = blobs(16, 3, 6, 11, 1.0);
  nn::Normalizer norm;
  const Tensor xs = norm.fit(d.x).transform(d.x);
  auto clean =
      std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 3), std::make_shared<StableLogSoftmax>());
  dbg::Report c = train_with_monitor(*clean, xs, d.y, 6, 0.05);
  c.add(dbg::check_normalisation(xs));
  INFO(c.str(false));
  CHECK(c.fired_checks().empty());
  CHECK(c.groups().empty());
  CHECK(c.str(false).find("follow-on") == std::string::npos);
}

TEST_CASE("grouping rules: a second NaN source at another time stays a root; M5 gathers O1 on the same parameter") {
  auto make = [](const std::string& check, dbg::Severity s, const std::string& title, int64_t step) {
    dbg::Finding f;
    f.check = check;
    f.severity = s;
    f.title = title;
    f.step = step;
    return f;
  };
  dbg::Report r;
  // Each finding as its check makes it: the kind and the non-finite flag are what the diagnosis
  // reads (debug/evidence/kind.h), the titles are for people.
  dbg::Finding o1 = make("O1", dbg::Severity::Error, "the gradient of 0.weight holds NaN/Inf values", 3);
  o1.kind = dbg::Kind::GradientNonFinite;
  o1.nonfinite = true;
  r.add(o1);
  dbg::Finding w4 = make("W4", dbg::Severity::Error, "forward of 'log' produced Inf", 3);
  w4.nonfinite = true;
  w4.op = "log";
  w4.module = "2 (Head)";
  r.add(w4);
  dbg::Finding w4b = make("W4", dbg::Severity::Error, "forward of 'div' produced NaN", 9);
  w4b.nonfinite = true;
  w4b.op = "div";
  w4b.module = "4 (Norm)";
  r.add(w4b);
  dbg::Finding o4 = make("O4", dbg::Severity::Error, "0.weight holds NaN values", 10);
  o4.nonfinite = true;
  r.add(o4);
  dbg::Finding l1 = make("L1", dbg::Severity::Error, "the training loss is NaN from step 3 (of 12)", 3);
  l1.kind = dbg::Kind::LossNonFinite;
  l1.nonfinite = true;
  l1.end_of_run = true;
  r.add(l1);
  dbg::Finding stuck = make("L1", dbg::Severity::Warning, "the training loss is stuck at chance level", -1);
  stuck.kind = dbg::Kind::LossAtChance;
  stuck.end_of_run = true;
  r.add(stuck);
  dbg::Finding m5 =
      make("M5", dbg::Severity::Warning, "trainable parameter '1.weight' got no gradient from backward", -1);
  m5.kind = dbg::Kind::ParameterUnreached;
  m5.parameter = "1.weight";
  r.add(m5);
  dbg::Finding o1cut = make("O1", dbg::Severity::Warning, "the trainable parameter 1.weight got no gradient", -1);
  o1cut.kind = dbg::Kind::GradientMissing;
  o1cut.parameter = "1.weight";
  r.add(o1cut);
  dbg::Finding o1other = make("O1", dbg::Severity::Warning, "the gradient of 2.bias is vanishing", -1);
  o1other.kind = dbg::Kind::GradientVanishing;
  o1other.parameter = "2.bias";
  r.add(o1other);
  const std::vector<int64_t> by = r.caused_by();
  CHECK(by[0] == 1);   // O1 NaN gradient at step 3 -> W4 at step 3 (the source names the op)
  CHECK(by[1] == -1);  // W4 'log' is a root
  CHECK(by[2] == -1);  // a second source at step 9: not hidden
  CHECK(by[3] == 2);   // O4 at step 10 -> the latest source before it
  CHECK(by[4] == 1);   // the loss history's "NaN from step 3" -> the source at step 3
  CHECK(by[5] == 2);   // a loss stuck at the end: explained by the NaN, the latest source before it
  CHECK(by[6] == -1);  // M5 is a root
  CHECK(by[7] == 6);   // O1 on the same parameter -> M5
  CHECK(by[8] == -1);  // O1 vanishing on another parameter: a detach elsewhere does not explain it
  // Confirmed faults first (the one explaining the most, then the earliest), then symptoms no
  // probe explained.
  const auto g = r.groups();
  REQUIRE(g.size() == 4);
  CHECK(r.findings()[g[0].root].title.find("'log'") != std::string::npos);
  CHECK(r.findings()[g[1].root].title.find("'div'") != std::string::npos);
  CHECK(r.findings()[g[2].root].check == "M5");
  CHECK(r.findings()[g[3].root].parameter == "2.bias");
  const dbg::CauseAnalysis a = dbg::analyse_causes(r);
  REQUIRE(a.lead.has_value());
  CHECK(a.lead->index == 1);
  CHECK(a.lead->confirmed);
  CHECK(a.lead->cause == "nonfinite-op");
  CHECK(a.parent[5] == 3);  // the stuck loss hangs on the latest NaN finding before it
  CHECK(a.because[7].find("because") == 0);
  // The unexplained vanishing gradient keeps only candidates its probes did not rule out.
  CHECK(a.cause_text[8].find("no probe confirmed a cause") == 0);
  CHECK(a.cause_text[8].find("dead ReLU") != std::string::npos);  // M7 did not run: still a candidate
  dbg::Report ran = r;
  ran.note_ran("M7, M8");
  const dbg::CauseAnalysis b = dbg::analyse_causes(ran);
  CHECK(b.cause_text[8].find("Ruled out (their probes ran and were silent): ") != std::string::npos);
  CHECK(b.cause_text[8].find("dead ReLU") > b.cause_text[8].find("Ruled out"));
}

// ---- redundant bias ---------------------------------------------------------------------

TEST_CASE("a bias before BatchNorm is redundant at every width: 512 and 1024 wide as well as 100") {
  // The probe's noise on the module's output must differ between rows: a pattern that repeats with
  // the row (per-channel constant) is removed by the BatchNorm like the shift itself.
  XY d = blobs(32, 3, 8, 5, 1.0);
  nn::CrossEntropyLoss ce;
  dbg::LossFunction loss = [&ce](const Tensor& out, const Tensor& t) { return ce(out, t); };
  for (int64_t width : {100, 512, 1024}) {
    INFO("width " << width);
    gs::manual_seed(3);
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, width),
                                                  std::make_shared<nn::BatchNorm1d>(width),
                                                  std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(width, 3));
    model->train();
    ce((*model)(d.x), d.y).backward();
    const std::vector<dbg::Finding> red = dbg::find_redundant_biases(*model, d.x, d.y, loss);
    REQUIRE(red.size() == 1);
    CHECK(red[0].parameter == "0.bias");
  }
}

namespace {
// A graph network's first layer on constant node features (h = 1): (1 + eps) h + the neighbours' sum, then
// Linear -> BatchNorm. eps only shifts every node's input by one constant the BatchNorm removes; `gain`
// instead scales the neighbours' sum, which the BatchNorm keeps.
struct ConstantInputLayer : nn::Module {
  std::shared_ptr<nn::Linear> fc = register_module("fc", std::make_shared<nn::Linear>(1, 16));
  std::shared_ptr<nn::BatchNorm1d> bn = register_module("bn", std::make_shared<nn::BatchNorm1d>(16));
  std::shared_ptr<nn::Linear> head = register_module("head", std::make_shared<nn::Linear>(16, 3));
  Tensor eps = register_parameter("eps", gs::zeros({1}));
  Tensor gain = register_parameter("gain", gs::ones({1}));
  ConstantInputLayer() : Module("ConstantInputLayer") {}
  Tensor forward(const Tensor& degree) override {  // degree (N, 1): each node's neighbour count
    const Tensor h = gs::ones(degree.shape());
    return (*head)(gs::relu((*bn)((*fc)(h * (eps + 1.0) + degree * gain))));
  }
};
}  // namespace

TEST_CASE("a scalar that shifts a constant input before a BatchNorm is redundant (info); one that scales data is not") {
  gs::manual_seed(4);
  const Tensor degree = gs::randint(1, 8, {64, 1}).to(gs::kFloat32);
  const Tensor y = gs::randint(0, 3, {64});
  nn::CrossEntropyLoss ce;
  dbg::LossFunction loss = [&ce](const Tensor& out, const Tensor& t) { return ce(out, t); };
  auto model = std::make_shared<ConstantInputLayer>();
  model->train();
  ce((*model)(degree), y).backward();
  const std::vector<dbg::Finding> red = dbg::find_redundant_biases(*model, degree, y, loss);
  // fc.bias (before the BatchNorm) and eps; not gain.
  REQUIRE(red.size() == 2);
  const auto eps = std::find_if(red.begin(), red.end(), [](const dbg::Finding& f) { return f.parameter == "eps"; });
  REQUIRE(eps != red.end());
  CHECK(eps->severity == dbg::Severity::Info);
  CHECK(eps->title.find("redundant parameter") != std::string::npos);
  CHECK(std::none_of(red.begin(), red.end(), [](const dbg::Finding& f) { return f.parameter == "gain"; }));
}

TEST_CASE("a Linear bias right before BatchNorm is one info finding 'redundant bias', not a vanishing gradient") {
  XY d = blobs(32, 3, 8, 5, 1.0);
  nn::CrossEntropyLoss ce;
  dbg::LossFunction loss = [&ce](const Tensor& out, const Tensor& t) { return ce(out, t); };
  dbg::GateOptions g;
  g.overfit = false;
  g.gradcheck = false;
  {
    // Linear -> BatchNorm1d: the bias of 0 has a zero gradient by construction.
    gs::manual_seed(2);
    auto model =
        std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::BatchNorm1d>(16),
                                         std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 3));
    dbg::Report r = dbg::pretrain_gate(*model, d.x, d.y, loss, nullptr, g);
    INFO(r.str(true));
    std::vector<const dbg::Finding*> red;
    for (const auto* f : of_check(r, "O1"))
      if (f->title.find("redundant bias") != std::string::npos) red.push_back(f);
    REQUIRE(red.size() == 1);
    CHECK(red[0]->severity == dbg::Severity::Info);
    CHECK(red[0]->parameter == "0.bias");
    CHECK(red[0]->module == "0 (Linear)");
    CHECK(red[0]->fix.find("bias=false") != std::string::npos);
    for (const auto& f : r.findings())
      if (f.fires()) CHECK(f.parameter != "0.bias");  // no O1 vanishing, no M5
    CHECK_FALSE(r.fired("O1"));
    CHECK_FALSE(r.fired("M5"));

    // The monitor on the user's own loop: the same, once.
    gs::optim::Adam opt(model->parameters(), gs::optim::AdamOptions(1e-3));
    dbg::MonitorOptions mo;
    mo.every = 1;
    dbg::Monitor m(*model, opt, &ce, mo);
    for (int s = 0; s < 4; ++s) {
      opt.zero_grad();
      Tensor l = ce((*model)(d.x), d.y);
      l.backward();
      opt.step();
      m.record_step(l.item<double>());
    }
    m.finish();
    INFO(m.report().str(true));
    CHECK_FALSE(m.report().fired("O1"));
  }
  {
    // The twin whose bias gradient vanishes for a real reason: every unit after it is dead
    // (a bias of -100 before a ReLU). Shifting it moves the loss: the warning stays. The
    // BatchNorm after the dead units gets a constant input, so its weight's gradient is zero
    // too and shifting it changes nothing, but it is not a bias (it does not move the output).
    gs::manual_seed(2);
    auto fc = std::make_shared<nn::Linear>(8, 16);
    {
      gs::NoGradGuard ng;
      fc->bias.fill_(-100.0);
    }
    auto model = std::make_shared<nn::Sequential>(
        fc, std::make_shared<nn::ReLU>(), std::make_shared<nn::BatchNorm1d>(16), std::make_shared<nn::Linear>(16, 3));
    dbg::Report r = dbg::pretrain_gate(*model, d.x, d.y, loss, nullptr, g);
    INFO(r.str(true));
    for (const auto& f : r.findings()) CHECK(f.title.find("redundant bias") == std::string::npos);
    CHECK(r.fired("O1"));
    bool warned = false;
    for (const auto& f : r.findings())
      warned = warned || (f.fires() && f.parameter == "0.bias" && (f.check == "O1" || f.check == "M5"));
    CHECK(warned);
  }
  {
    // A vanishing signal: a deep stack of saturated sigmoids after the Linear. Nothing after it
    // reaches the loss (noise on its output does not move the loss either): not "by construction".
    gs::manual_seed(2);
    std::vector<nn::ModulePtr> layers{std::make_shared<nn::Linear>(8, 16)};
    for (int i = 0; i < 8; ++i) {
      auto l = std::make_shared<nn::Linear>(16, 16);
      {
        gs::NoGradGuard ng;
        l->weight.mul_(0.05);
      }
      layers.push_back(std::make_shared<nn::Sigmoid>());
      layers.push_back(l);
    }
    layers.push_back(std::make_shared<nn::Linear>(16, 3));
    auto model = std::make_shared<nn::Sequential>(layers);
    dbg::Report r = dbg::pretrain_gate(*model, d.x, d.y, loss, nullptr, g);
    INFO(r.str(true));
    for (const auto& f : r.findings()) CHECK(f.title.find("redundant bias") == std::string::npos);
    bool warned = false;  // the vanishing-gradient warning on the first bias stays
    for (const auto& f : r.findings()) warned = warned || (f.check == "O1" && f.fires() && f.parameter == "0.bias");
    CHECK(warned);
  }
}

// ---- M14's adaptive budget ------------------------------------------------------------------

namespace {
// Attention-like pooling over positions: x (B, T, D) -> softmax(x @ q) over T -> the weighted
// average of the positions -> Linear(D, C). Healthy, but slower to fit than an MLP.
struct AttentionPool : nn::Module {
  Tensor q;
  std::shared_ptr<nn::Linear> head;
  AttentionPool(int64_t D, int64_t C) : Module("AttentionPool") {
    q = register_parameter("q", gs::zeros({D, 1}));
    head = register_module("head", std::make_shared<nn::Linear>(D, C));
  }
  Tensor forward(const Tensor& x) override {
    Tensor w = gs::softmax(gs::matmul(x, q), 1);  // (B, T, 1)
    Tensor pooled = gs::sum(x * w, {1});          // (B, D)
    return (*head)(pooled);
  }
};
}  // namespace

TEST_CASE(
    "M14's budget extends while the loss still falls fast, reports the steps used, and still fails a model that cannot "
    "fit") {
  gs::manual_seed(4);
  Tensor x = gs::randn({16, 5, 6});
  Tensor y = gs::randint(0, 4, {16});
  nn::CrossEntropyLoss ce;
  dbg::LossFunction loss = [&ce](const Tensor& out, const Tensor& t) { return ce(out, t); };
  dbg::ModelCheckOptions o;
  o.overfit_steps = 40;
  o.overfit_lr = 0.1;  // the model needs ~115 steps: more than the base budget, less than the cap
  {
    gs::manual_seed(6);
    auto model = std::make_shared<AttentionPool>(6, 4);
    auto fs = dbg::overfit_one_batch(*model, x, y, loss, o);
    REQUIRE(fs.size() == 1);
    INFO(fs[0].str());
    CHECK(fs[0].severity == dbg::Severity::Info);  // overfits, given the steps it needed
    const double used = evidence(fs[0], "steps used");
    CHECK(used > 40);
    CHECK(used <= 160);  // the cap: 4 x the base budget
    CHECK(fs[0].title.find("extended") != std::string::npos);
    // With the budget fixed at the base, the same model "cannot overfit": the extension mattered.
    dbg::ModelCheckOptions fixed = o;
    fixed.overfit_max_steps = 40;
    fixed.overfit_retry_lr_factor = 1.0;  // the extension alone (no retry at a higher rate)
    gs::manual_seed(6);
    auto again = std::make_shared<AttentionPool>(6, 4);
    auto ff = dbg::overfit_one_batch(*again, x, y, loss, fixed);
    REQUIRE(ff.size() == 1);
    CHECK(ff[0].severity == dbg::Severity::Warning);
    CHECK(evidence(ff[0], "steps used") == 40);
  }
  {
    // Cannot overfit: the same input twice with two different labels (label noise in the
    // batch). The loss plateaus, the budget stops growing, M14 warns within the cap.
    Tensor xn = gs::cat({x, x}, 0);
    Tensor yn = gs::cat({y, gs::where(gs::eq(y, 3), y - 3, y + 1)}, 0);
    gs::manual_seed(6);
    auto model = std::make_shared<AttentionPool>(6, 4);
    auto fs = dbg::overfit_one_batch(*model, xn, yn, loss, o);
    REQUIRE(fs.size() == 1);
    INFO(fs[0].str());
    CHECK(fs[0].severity == dbg::Severity::Warning);
    CHECK(evidence(fs[0], "steps used") <= 160);
    CHECK(fs[0].title.find("cannot overfit") == 0);
  }
}

// ---- messages that fit the case --------------------------------------------------------------

TEST_CASE("the in-place hint names the out-of-place form of the op actually used") {
  auto backward_error = [](const std::function<Tensor(const Tensor&)>& f) {
    Tensor x = gs::randn({4, 3}).requires_grad_(true);
    try {
      f(x).sum().backward();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // relu_ on sigmoid's output (saved for its backward).
  const std::string relu = backward_error([](const Tensor& x) {
    Tensor s = gs::sigmoid(x);
    s.relu_();
    return s;
  });
  REQUIRE_FALSE(relu.empty());
  CHECK(relu.find("'relu' instead of 'relu_'") != std::string::npos);
  CHECK(relu.find("x.relu(") != std::string::npos);
  CHECK(relu.find("x = x + y") == std::string::npos);
  auto fr = dbg::inplace_finding(gs::Error("backward", relu));
  REQUIRE(fr.has_value());
  CHECK(fr->fix.find("x.relu()") != std::string::npos);
  CHECK(fr->fix.find("x + y") == std::string::npos);
  // mul_: the operator form.
  const std::string mul = backward_error([](const Tensor& x) {
    Tensor s = gs::sigmoid(x);
    s.mul_(2.0);
    return s;
  });
  CHECK(mul.find("'mul' instead of 'mul_': x = x * y instead of x *= y") != std::string::npos);
  // add_: x = x + y.
  const std::string add = backward_error([](const Tensor& x) {
    Tensor s = gs::sigmoid(x);
    s.add_(1.0);
    return s;
  });
  CHECK(add.find("x = x + y instead of x += y") != std::string::npos);
  auto fa = dbg::inplace_finding(gs::Error("backward", add));
  REQUIRE(fa.has_value());
  CHECK(fa->fix.find("x = x + y") != std::string::npos);
  // The clean twin: out of place, no error.
  CHECK(backward_error([](const Tensor& x) { return gs::relu(gs::sigmoid(x)); }).empty());
}

TEST_CASE("D4 with a reference that went through other preprocessing says so; misaligned pairs are still caught") {
  XY d = blobs(40, 4, 10, 9, 1.0);
  Tensor raw = (d.x * 30.0 + 100.0).clamp(0.0, 255.0).to(gs::kInt64).to(gs::kFloat32);  // raw, like 0..255 pixels
  auto reference = std::make_shared<nn::TensorDataset>(raw, d.y);
  nn::Normalizer norm;
  norm.fit(raw);
  // A correct loader on the normalised data: pairs intact.
  auto normalised = norm.transform(std::static_pointer_cast<nn::Dataset>(reference));
  nn::DataLoader good(normalised, nn::DataLoaderOptions().batch_size(16).shuffle(true).seed(3));
  auto fs = dbg::check_alignment(*reference, good);
  INFO(all_text(fs));
  CHECK_FALSE(fires(fs));
  const dbg::Finding* info = find(fs, "D4", dbg::Severity::Info);
  REQUIRE(info != nullptr);
  CHECK(info->title.find("per-feature affine transform") != std::string::npos);
  CHECK(info->title.find("every label matches") != std::string::npos);

  // B07 written by a user: the normalised inputs shuffled without their labels.
  gs::Generator gen(17);
  Tensor perm = gs::randperm(raw.size(0), &gen);
  auto shuffled = std::make_shared<nn::TensorDataset>(norm.transform(raw).index_select(0, perm), d.y);
  nn::DataLoader bad(shuffled, nn::DataLoaderOptions().batch_size(16).shuffle(true).seed(3));
  auto fb = dbg::check_alignment(*reference, bad);
  INFO(all_text(fb));
  const dbg::Finding* err = find(fb, "D4", dbg::Severity::Error);
  REQUIRE(err != nullptr);
  CHECK(err->title.find("misaligned") != std::string::npos);
  CHECK(err->title.find("affine") != std::string::npos);

  // Against a reference of other data altogether nothing can be compared (as with a loader that
  // augments its inputs): said as info, no warning.
  XY other = blobs(40, 4, 10, 99, 1.0);
  nn::TensorDataset unrelated(other.x * 7.0, other.y);
  auto fu = dbg::check_alignment(unrelated, good);
  CHECK(find(fu, "D4", dbg::Severity::Warning) == nullptr);
  const dbg::Finding* unknown = find(fu, "D4", dbg::Severity::Info);
  REQUIRE(unknown != nullptr);
  CHECK(unknown->title.find("cannot be checked") != std::string::npos);
}

TEST_CASE("float labels of shape (B, 1): the fix mentions the extra dim") {
  nn::CrossEntropyLoss ce;
  Tensor logits = gs::randn({6, 3});
  Tensor y = gs::tensor({0.0, 2.0, 1.0, 1.0, 0.0, 2.0});
  auto message = [&](const Tensor& t) {
    try {
      ce(logits, t);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string column = message(y.reshape({6, 1}));
  CHECK(column.find("target.squeeze(1).to(gs::kInt64)") != std::string::npos);
  const std::string flat = message(y);
  CHECK(flat.find("target.to(gs::kInt64)") != std::string::npos);
  CHECK(flat.find("squeeze") == std::string::npos);
  CHECK(message(y.to(gs::kInt64)).empty());  // the clean twin

  auto d9 = dbg::check_label_encoding(y.reshape({6, 1}), 3);
  const dbg::Finding* f = find(d9, "D9", dbg::Severity::Error);
  REQUIRE(f != nullptr);
  CHECK(f->fix.find("y.squeeze(1).to(gs::kInt64)") != std::string::npos);
  auto d9flat = dbg::check_label_encoding(y, 3);
  REQUIRE(find(d9flat, "D9", dbg::Severity::Error) != nullptr);
  CHECK(find(d9flat, "D9", dbg::Severity::Error)->fix.find("squeeze") == std::string::npos);
  CHECK_FALSE(fires(dbg::check_label_encoding(y.to(gs::kInt64), 3)));
}
