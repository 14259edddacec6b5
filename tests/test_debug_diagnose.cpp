// debug::diagnose and debug::Session: the data checks, the gate, the monitored run and the
// end-of-run diagnoses on models, losses and loops written as a user writes them; errors the
// checks provoke (an in-place backward, a loss that rejects its target) as findings; the
// checks a missing piece costs, listed in RunReport::skipped.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include <gradsleuth.h>  // the whole debug API with one include

#include "debug_test_util.h"
#include "json_mini.h"
#include "reworded_test_util.h"

using namespace gradsleuth;
using dtest::blobs;

namespace {

// A hand-written model: Linear -> x * 2 sigmoid(x) -> Linear. With `inplace`, the gate scales the
// sigmoid's output in place after the sigmoid saved it for backward: every backward fails.
// With `mix`, it subtracts the batch mean from the hidden layer (every output then depends on
// every example of the batch: M6).
struct GateNet : nn::Module {
  bool inplace = false, mix = false;
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 16));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(16, 3));
  explicit GateNet(bool bad = false) : Module("GateNet"), inplace(bad) {}
  Tensor forward(const Tensor& x) override {
    Tensor h = (*fc1)(x);
    if (mix) h = h - mean(h, {0}, true);
    Tensor g = sigmoid(h);
    if (inplace)
      g.mul_(2.0);
    else
      g = g * 2.0;
    return (*fc2)(h * g);
  }
};

struct Data {
  std::shared_ptr<nn::DataLoader> train, val;
};
Data loaders(uint64_t seed = 3) {
  // One draw of the blobs, split: 768 examples to train on, 192 to validate with.
  const dtest::XY all = blobs(320, 3, 6, seed);
  Data d;
  d.train = std::make_shared<nn::DataLoader>(
      std::make_shared<nn::TensorDataset>(all.x.narrow(0, 0, 768), all.y.narrow(0, 0, 768)),
      nn::DataLoaderOptions().batch_size(32).shuffle(true).seed(seed));
  d.val = std::make_shared<nn::DataLoader>(
      std::make_shared<nn::TensorDataset>(all.x.narrow(0, 768, 192), all.y.narrow(0, 768, 192)),
      nn::DataLoaderOptions().batch_size(128));
  return d;
}

bool skipped(const debug::RunReport& r, const std::string& checks_prefix) {
  for (const debug::SkippedChecks& s : r.skipped)
    if (s.checks.rfind(checks_prefix, 0) == 0) return true;
  return false;
}

const debug::Finding* fired(const debug::Report& r, const std::string& check) {
  for (const debug::Finding& f : r.findings())
    if (f.check == check && f.fires()) return &f;
  return nullptr;
}

}  // namespace

TEST_CASE("the gate: a backward that raises the in-place error is an M20 finding naming the op and the phase") {
  manual_seed(1);
  auto model = std::make_shared<GateNet>(true);
  const dtest::XY b = blobs(16, 3, 6);
  nn::CrossEntropyLoss ce;
  debug::LossFunction loss = [&](const Tensor& o, const Tensor& y) { return ce(o, y); };
  debug::Report r;
  CHECK_NOTHROW(r = debug::pretrain_gate(*model, b.x, b.y, loss));
  const debug::Finding* m20 = fired(r, "M20");
  REQUIRE(m20 != nullptr);
  CHECK(m20->severity == debug::Severity::Error);
  CHECK(m20->op == "mul_");
  CHECK(m20->cause.find("the pre-training gate's backward (O1, M5, L6, M14 could not run)") != std::string::npos);
  // The backward failed: the overfit test (which would fail the same way) did not run, while the
  // checks before it did (M1 shape trace, L4 initial loss).
  CHECK(r.of("M14").empty());
  CHECK_FALSE(r.of("M1").empty());
  CHECK_FALSE(r.of("L4").empty());
  // The clean twin: no error, and M14 ran.
  auto clean = std::make_shared<GateNet>(false);
  const debug::Report rc = debug::pretrain_gate(*clean, b.x, b.y, loss);
  CHECK(fired(rc, "M20") == nullptr);
  CHECK(fired(rc, "W2") == nullptr);
  CHECK_FALSE(rc.of("M14").empty());
}

TEST_CASE("the gate: a loss that rejects its target is a W2 error naming the loss phase; M6 and M13 still run") {
  manual_seed(1);
  auto model = std::make_shared<GateNet>();
  model->mix = true;  // a second bug, that the batch-mixing test (which needs no loss) must still find
  const dtest::XY b = blobs(16, 3, 6);
  nn::CrossEntropyLoss ce;
  // Float class labels: CrossEntropyLoss refuses them (it wants int64 class indices).
  const Tensor yf = b.y.to(kFloat32);
  debug::LossFunction loss = [&](const Tensor& o, const Tensor& y) { return ce(o, y); };
  debug::Report r;
  CHECK_NOTHROW(r = debug::pretrain_gate(*model, b.x, yf, loss));
  const debug::Finding* w2 = fired(r, "W2");
  REQUIRE(w2 != nullptr);
  CHECK(w2->severity == debug::Severity::Error);
  CHECK(w2->title.rfind("the pre-training gate could not run the loss: ", 0) == 0);
  CHECK(w2->title.find("CrossEntropyLoss") != std::string::npos);  // the loss's own message follows
  CHECK(w2->cause.find("L4, O1, M5, L6, M14 could not run") != std::string::npos);
  CHECK(r.of("M14").empty());
  CHECK(r.of("L6").empty());
  CHECK(fired(r, "M6") != nullptr);  // the checks that need no loss ran
  // The model was left as it was: same parameters, no gradient.
  for (const Tensor& p : model->parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("diagnose: one call on a clean hand-written model runs every phase in order and fires nothing") {
  manual_seed(2);
  Data d = loaders();
  auto model = std::make_shared<GateNet>();
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  debug::DiagnoseOptions o;
  o.epochs = 2;
  o.report_dir = (std::filesystem::temp_directory_path() / "gs_diagnose_clean").string();
  std::filesystem::remove_all(o.report_dir);
  std::vector<std::string> said;
  o.progress = [&](const std::string& s) { said.push_back(s); };
  const debug::RunReport r = debug::diagnose(*model, ce, opt, *d.train, d.val.get(), nullptr, o);
  REQUIRE(r.phases.size() == 4);
  CHECK(r.phases[0].name == "data checks");
  CHECK(r.phases[1].name == "pre-training gate");
  CHECK(r.phases[2].name == "training");
  CHECK(r.phases[3].name == "end of run");
  for (const auto& p : r.phases) CHECK_MESSAGE(p.ran, p.name);
  CHECK(said == std::vector<std::string>{"data checks", "pre-training gate", "input-independent baseline",
                                         "training 2 epochs", "end-of-run checks"});
  CHECK(r.steps == 2 * 24);
  CHECK(r.history.step_losses.size() == 48);
  CHECK(r.history.epoch_val_loss.size() == 2);
  CHECK_MESSAGE(r.fired_checks().empty(), r.str());
  // Each phase's findings are in the report, phase by phase: the data checks' D1 comes first.
  REQUIRE_FALSE(r.findings.empty());
  CHECK(r.findings.findings().front().check == "D1");
  CHECK_FALSE(r.phases[0].findings.of("D1").empty());
  CHECK_FALSE(r.phases[1].findings.of("M1").empty());
  // What a missing Normalizer costs: in the JSON, not in the text (these blobs went through no
  // nn::Normalizer, so there is nothing for D7 to check).
  CHECK(skipped(r, "D7"));
  CHECK(r.json().find("\"checks\":\"D7\"") != std::string::npos);
  CHECK(r.str().find("D7") == std::string::npos);
  CHECK_FALSE(skipped(r, "L2"));
  CHECK(r.html_path == o.report_dir + "/report.html");
  std::ifstream in(r.html_path);
  std::stringstream html;
  html << in.rdbuf();
  CHECK(html.str().find("training loss") != std::string::npos);
  CHECK(std::filesystem::exists(o.report_dir + "/metrics.csv"));
  CHECK(r.json().find("\"name\":\"pre-training gate\"") != std::string::npos);
}

TEST_CASE("a run's diagnosis is made once: every printer, the phases and the HTML report read the one it keeps") {
  manual_seed(2);
  Data d = loaders();
  auto model = std::make_shared<GateNet>();
  model->mix = true;  // the gate's M6 fires: a run with a lead and findings it explains
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  debug::DiagnoseOptions o;
  o.epochs = 1;
  o.report_dir = (std::filesystem::temp_directory_path() / "gs_diagnose_once").string();
  std::filesystem::remove_all(o.report_dir);
  const uint64_t before = debug::analyse_causes_runs();
  const debug::RunReport r = debug::diagnose(*model, ce, opt, *d.train, d.val.get(), nullptr, o);
  REQUIRE(r.findings.diagnosis().lead.has_value());
  CHECK(r.findings.diagnosis().lead->check == "M6");
  const std::string text = r.str(true), json = r.json();
  CHECK_FALSE(r.findings.str(true, true).empty());
  CHECK_FALSE(r.findings.groups().empty());
  CHECK(r.findings.caused_by().size() == r.findings.size());
  CHECK(r.findings.lead_json() != "null");
  debug::write_run_report(o.report_dir + "/again.html", r, "again");
  CHECK(debug::analyse_causes_runs() - before == 1);  // the run's one diagnosis, kept in its report

  // Each phase lists its findings as the run's diagnosis places them: the same index and cause.
  const json_mini::Value doc = json_mini::parse(json);
  const auto& all = doc.get("findings")->arr;
  size_t listed = 0;
  for (const auto& phase : doc.get("phases")->arr)
    for (const auto& f : phase.get("findings")->arr) {
      ++listed;
      const size_t i = static_cast<size_t>(f.get("index")->num);
      REQUIRE(i < all.size());
      CHECK(f.get("title")->str == all[i].get("title")->str);
      CHECK(f.get("caused_by")->kind == all[i].get("caused_by")->kind);
      if (f.get("caused_by")->kind == json_mini::Value::Number)
        CHECK(f.get("caused_by")->num == all[i].get("caused_by")->num);
    }
  CHECK(listed >= all.size());  // every finding of the run is in a phase

  // Typed evidence: the same diagnosis with every text of every finding reversed.
  reworded::check_diagnosis_ignores_words(r.findings);
  // A report that changes is diagnosed anew, once.
  debug::Report grown = r.findings;
  debug::Finding extra;
  extra.check = "D16";
  extra.title = "one more";
  grown.add(extra);
  const uint64_t mid = debug::analyse_causes_runs();
  (void)grown.str();
  (void)grown.json();
  CHECK(debug::analyse_causes_runs() - mid == 1);
}

TEST_CASE("diagnose: a loss that rejects its target stops nothing but training, and each phase says so") {
  manual_seed(2);
  const dtest::XY tr = blobs(64, 3, 6);
  nn::DataLoader train(std::make_shared<nn::TensorDataset>(tr.x, tr.y.to(kFloat32)),
                       nn::DataLoaderOptions().batch_size(32));
  auto model = std::make_shared<GateNet>();
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters());
  debug::DiagnoseOptions o;
  o.num_classes = 3;
  debug::RunReport r;
  CHECK_NOTHROW(r = debug::diagnose(*model, ce, opt, train, nullptr, nullptr, o));
  CHECK(fired(r.phases[1].findings, "W2") != nullptr);           // the gate's loss phase
  const debug::Finding* w3 = fired(r.phases[2].findings, "W3");  // the Trainer's first step
  REQUIRE(w3 != nullptr);
  CHECK(w3->title.rfind("training failed: ", 0) == 0);
  CHECK(r.stopped.rfind("training stopped at step 1: ", 0) == 0);
  CHECK(r.steps == 0);
  CHECK(fired(r.phases[0].findings, "D9") != nullptr);  // and the data checks saw why: float labels
}

TEST_CASE("Session on an own loop: the loss module's hook records every step; step() and epoch() are optional") {
  manual_seed(2);
  Data d = loaders();
  auto model = std::make_shared<GateNet>();
  nn::CrossEntropyLoss ce;
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1));
  debug::Session dbg(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
  CHECK_FALSE(dbg.pretraining().empty());  // the data checks and the gate ran at construction
  std::vector<double> losses;
  for (int e = 0; e < 2; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = ce((*model)(b.x), b.y);
      l.backward();
      opt.step();
      losses.push_back(l.item<double>());
      if (losses.size() % 2 == 0) dbg.step(l);  // the same step again: not counted twice
    }
    dbg.epoch();
  }
  const debug::RunReport r = dbg.finish();
  CHECK(r.steps == static_cast<int64_t>(losses.size()));
  CHECK(r.history.step_losses == losses);
  REQUIRE(r.history.epoch_val_loss.size() == 2);
  CHECK(std::isfinite(r.history.epoch_val_loss[1]));
  CHECK(r.history.epoch_val_accuracy[1] > 0.9);
  CHECK(std::abs(r.history.epoch_train_loss[1] - std::accumulate(losses.begin() + 24, losses.end(), 0.0) / 24.0) <
        1e-9);
  CHECK_MESSAGE(r.fired_checks().empty(), r.str());
  CHECK_FALSE(skipped(r, "L1"));
  CHECK_THROWS_AS(dbg.finish(), Error);  // once
}

TEST_CASE("Session with a lambda loss and no loader: begin(x, y) runs the gate; the report lists what was lost") {
  manual_seed(2);
  const dtest::XY tr = blobs(64, 3, 6);
  auto model = std::make_shared<GateNet>();
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  auto loss = [](const Tensor& out, const Tensor& y) { return nn::functional::cross_entropy(out, y); };
  debug::Session dbg(*model, loss, opt);
  const debug::Report pre = dbg.begin(tr.x.narrow(0, 0, 32), tr.y.narrow(0, 0, 32));
  CHECK_FALSE(pre.of("M1").empty());
  for (int s = 0; s < 20; ++s) {
    const Tensor x = tr.x.narrow(0, (s % 6) * 10, 32), y = tr.y.narrow(0, (s % 6) * 10, 32);
    opt.zero_grad();
    Tensor l = loss((*model)(x), y);
    l.backward();
    opt.step();
  }
  CHECK_THROWS_AS(dbg.begin(tr.x, tr.y), Error);  // the gate runs before training, not after
  debug::RunReport r = dbg.finish();
  CHECK(r.steps == 20);
  CHECK(r.history.step_losses.empty());  // nobody told the Session the losses
  CHECK_FALSE(r.phases[0].ran);
  CHECK(r.phases[0].note == "no training loader");
  CHECK(r.phases[1].ran);
  CHECK(skipped(r, "L2, L3, L5, D6"));  // the lambda: no hook sees the loss's inputs
  CHECK(skipped(r, "D3, D4, D5"));      // no loader
  CHECK(skipped(r, "D10, D13-D16"));    // no validation loader
  CHECK(skipped(r, "L1, O6"));          // no step losses
  CHECK(skipped(r, "L7, the W3"));      // no epochs
  CHECK(r.str().find("checks that did not run:") != std::string::npos);
}

TEST_CASE("diagnose: a validation loader holding training rows is a D13 finding; without one, D13-D16 are skipped") {
  manual_seed(2);
  const dtest::XY all = blobs(320, 3, 6);
  auto train_data = std::make_shared<nn::TensorDataset>(all.x.narrow(0, 0, 768), all.y.narrow(0, 0, 768));
  // Validation: 150 held-out rows and 42 rows copied from train (22%).
  auto val_data = std::make_shared<nn::TensorDataset>(cat({all.x.narrow(0, 768, 150), all.x.narrow(0, 100, 42)}),
                                                      cat({all.y.narrow(0, 768, 150), all.y.narrow(0, 100, 42)}));
  nn::DataLoader train(train_data, nn::DataLoaderOptions().batch_size(32).shuffle(true));
  nn::DataLoader val(val_data, nn::DataLoaderOptions().batch_size(128));
  auto model = std::make_shared<GateNet>();
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  debug::DiagnoseOptions o;
  o.val_split = "test";
  const debug::RunReport r = debug::diagnose(*model, ce, opt, train, &val, nullptr, o);
  const debug::Finding* d13 = fired(r.phases[0].findings, "D13");
  REQUIRE_MESSAGE(d13 != nullptr, r.str());
  CHECK(dtest::ev(*d13, "test rows also in train") == 42);
  CHECK(dtest::ev(*d13, "mixed fraction") == doctest::Approx(42.0 / 192));
  CHECK(d13->title.find("42 of 192 test rows") == 0);
  CHECK(r.str().find("[D13 warning] train-test samples mix: 42 of 192 test rows") != std::string::npos);
  CHECK_FALSE(skipped(r, "D10, D13-D16"));
  CHECK(r.fired("D13"));
  for (const char* c : {"D12", "D14", "D15", "D16"}) CHECK_MESSAGE(!r.fired(c), c);

  // No validation loader: the split checks cannot run, and the report says what enables them.
  auto model2 = std::make_shared<GateNet>();
  optim::Adam opt2(model2->parameters(), optim::AdamOptions(1e-2));
  debug::Session dbg(*model2, ce, opt2, {.train = &train});
  const debug::RunReport r2 = dbg.finish();
  CHECK(r2.findings.of("D13").empty());
  const debug::SkippedChecks* s = nullptr;
  for (const debug::SkippedChecks& k : r2.skipped)
    if (k.checks.rfind("D10, D13-D16", 0) == 0) s = &k;
  REQUIRE_MESSAGE(s != nullptr, r2.str());
  CHECK(s->reason == "no validation DataLoader was given");
  CHECK(s->remedy == "pass it as DiagnoseData::val");
  CHECK(r2.str().find("D10, D13-D16 (train against validation)") != std::string::npos);
}

TEST_CASE("Session on an own loop that raises: error() makes the finding, finish() still reports") {
  manual_seed(2);
  Data d = loaders();
  auto model = std::make_shared<GateNet>(true);
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters());
  debug::Session dbg(*model, ce, opt, {.train = d.train.get()});
  try {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      ce((*model)(b.x), b.y).backward();
      opt.step();
    }
  } catch (const std::exception& e) {
    dbg.error(e);
  }
  const debug::RunReport r = dbg.finish();
  CHECK(fired(r.phases[1].findings, "M20") != nullptr);  // from the gate
  CHECK(fired(r.phases[2].findings, "M20") != nullptr);  // and from the loop
  CHECK(r.stopped.rfind("training stopped at step 1: ", 0) == 0);
  CHECK(skipped(r, "O1-O6"));
}

TEST_CASE("the lead's plots show what it names: its parameters, its module's, or the layer feeding a ReLU") {
  const std::vector<std::string> names{"0.weight", "0.bias", "3.weight", "3.bias", "enc.1.weight", "enc.1.bias"};
  auto named = [&](const debug::Finding& f) {
    std::vector<std::string> out;
    for (const std::string& n : names)
      if (debug::names_series(f, n, names)) out.push_back(n);
    return out;
  };
  debug::Finding o1;
  o1.check = "O1";
  o1.parameter = "3.weight";
  CHECK(named(o1) == std::vector<std::string>{"3.weight"});
  debug::Finding m6;
  m6.check = "M6";
  m6.module = "3 (Linear)";
  CHECK(named(m6) == std::vector<std::string>{"3.weight", "3.bias"});
  // A ReLU has no parameters: it stands for the layer feeding it, the nearest earlier sibling with some.
  debug::Finding m7;
  m7.check = "M7";
  m7.module = "2 (ReLU)";
  CHECK(named(m7) == std::vector<std::string>{"0.weight", "0.bias"});
  CHECK(debug::names_series(m7, "2 (ReLU)", names));  // its own dead-unit series
  CHECK_FALSE(debug::names_series(m7, "4 (ReLU)", names));
  m7.module = "enc.2 (ReLU)";
  CHECK(named(m7) == std::vector<std::string>{"enc.1.weight", "enc.1.bias"});
  debug::Finding whole;
  whole.module = "(model)";
  CHECK(named(whole).empty());

  // M7 on a layer whose gradient is exactly 0: its check's plot and the gradient norms, each
  // starting with the named series; the zeros are drawn at the floor, not dropped.
  debug::TrainingHistory h;
  h.dead_fraction = {{"4 (ReLU)", {{1, 0.1}, {2, 0.1}}}, {"2 (ReLU)", {{1, 0.9}, {2, 1.0}}}};
  h.grad_norms = {
      {"3.weight", {{1, 0.5}, {2, 0.4}}}, {"0.weight", {{1, 0.0}, {2, 0.0}}}, {"0.bias", {{1, 0.0}, {2, 0.0}}}};
  m7.module = "2 (ReLU)";
  const std::vector<debug::Plot> plots = debug::lead_plots(m7, h);
  REQUIRE(plots.size() == 2);
  CHECK(plots[0].title == "dead-unit fraction per ReLU layer");
  CHECK(plots[0].series.front().name == "2 (ReLU)");
  CHECK(plots[1].title == "gradient norm per parameter");
  CHECK(plots[1].series.front().name == "0.weight");
  CHECK(plots[1].series.size() == 3);
  CHECK(plots[1].caption.find("0.weight, 0.bias") != std::string::npos);
  const std::string svg = debug::render_svg(plots[1]);
  CHECK(svg.find("data-name=\"0.weight\"") != std::string::npos);
  CHECK(svg.find("class=\"floor\" data-name=\"0.weight\"") != std::string::npos);
  CHECK(svg.find(">0 / non-finite drawn at the floor</text>") != std::string::npos);
  // A finding that names a parameter and its module lists the parameter first.
  debug::Finding o1b;
  o1b.check = "O1";
  o1b.module = "0 (Linear)";
  o1b.parameter = "0.bias";
  const std::vector<debug::Plot> o1_plots = debug::lead_plots(o1b, h);
  REQUIRE(o1_plots.size() == 1);  // no update-ratio history: the gradient norms only
  REQUIRE(o1_plots[0].series.size() == 3);
  CHECK(o1_plots[0].series[0].name == "0.bias");
  CHECK(o1_plots[0].series[1].name == "0.weight");
  CHECK(o1_plots[0].series[2].name == "3.weight");
  // A finding that names nothing in the history gets no gradient plot of its own.
  debug::Finding l1;
  l1.check = "L1";
  CHECK(debug::lead_plots(l1, h).empty());
}

TEST_CASE(
    "diagnose runs the pipeline's checks that retrain (M15; M16 and W1 when given what they need), M7's pass after "
    "training, and lists the rest") {
  manual_seed(2);
  Data d = loaders();
  nn::CrossEntropyLoss ce;
  SUBCASE(
      "defaults: M15 runs on the user's model and leaves it as it was; M16, W1, W5, W7, W8 are listed with a remedy") {
    auto model = std::make_shared<GateNet>();
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    debug::DiagnoseOptions o;
    o.max_steps = 5;
    std::vector<float> before;
    for (const Tensor& p : model->parameters())
      for (float v : p.to_vector<float>()) before.push_back(v);
    debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()}, o);
    CHECK(s.pretraining().ran("M15"));
    std::vector<float> after;
    for (const Tensor& p : model->parameters())
      for (float v : p.to_vector<float>()) after.push_back(v);
    CHECK(before == after);            // the baseline's training runs restored the parameters
    for (int64_t i = 0; i < 3; ++i) {  // a few steps of the user's own loop
      const nn::Batch b = d.train->batch(0, i);
      opt.zero_grad();
      ce((*model)(b.x), b.y).backward();
      opt.step();
    }
    const debug::RunReport r = s.finish();
    CHECK_FALSE(skipped(r, "M15"));
    CHECK_FALSE(skipped(r, "M7's pass"));  // the dead-unit pass over the training data ran after training
    for (const char* k : {"M16", "W1", "W5", "W7"}) {
      INFO(k);
      REQUIRE(skipped(r, k));
      for (const debug::SkippedChecks& sk : r.skipped)
        if (sk.checks.rfind(k, 0) == 0) {
          CHECK_FALSE(sk.reason.empty());
          CHECK_FALSE(sk.remedy.empty());
        }
    }
  }
  SUBCASE(
      "with make_model and rerun: M16 and W1 run; with baseline and dead_pass off, M15 and M7's pass are listed with "
      "their flags") {
    auto model = std::make_shared<GateNet>();
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    debug::DiagnoseOptions o;
    o.epochs = 1;
    o.baseline = false;
    o.dead_pass = false;
    o.make_model = [](int64_t width) {
      return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{std::make_shared<nn::Linear>(6, width),
                                                                         std::make_shared<nn::ReLU>(),
                                                                         std::make_shared<nn::Linear>(width, 3)});
    };
    int runs = 0;
    o.rerun = [&](uint64_t seed) {
      ++runs;
      manual_seed(seed);
      auto m = std::make_shared<GateNet>();
      optim::Adam o2(m->parameters(), optim::AdamOptions(1e-2));
      std::vector<double> losses;
      for (int64_t i = 0; i < 5; ++i) {
        const nn::Batch b = d.train->batch(0, i);
        o2.zero_grad();
        Tensor l = ce((*m)(b.x), b.y);
        l.backward();
        o2.step();
        losses.push_back(l.item<double>());
      }
      return losses;
    };
    const debug::RunReport r = debug::diagnose(*model, ce, opt, *d.train, d.val.get(), nullptr, o);
    CHECK(runs == 2);
    CHECK(r.findings.ran("M16"));
    CHECK(r.findings.ran("W1"));
    CHECK_FALSE(skipped(r, "M16"));
    CHECK_FALSE(skipped(r, "W1"));
    REQUIRE(skipped(r, "M15"));
    for (const debug::SkippedChecks& sk : r.skipped)
      if (sk.checks.rfind("M15", 0) == 0) CHECK(sk.remedy.find("DiagnoseOptions::baseline") != std::string::npos);
    REQUIRE(skipped(r, "M7's pass"));
    for (const debug::SkippedChecks& sk : r.skipped)
      if (sk.checks.rfind("M7's pass", 0) == 0)
        CHECK(sk.remedy.find("DiagnoseOptions::dead_pass") != std::string::npos);
    CHECK_MESSAGE(r.fired_checks().empty(), r.str());
  }
}

TEST_CASE("diagnose: training data that went through an nn::Normalizer not given to it lists D7 as not run") {
  manual_seed(2);
  const dtest::XY all = blobs(320, 3, 6, 3);
  auto raw = std::make_shared<nn::TensorDataset>(all.x.narrow(0, 0, 768), all.y.narrow(0, 0, 768));
  nn::Normalizer norm;
  norm.fit(*raw);
  nn::DataLoader train(norm.transform(raw), nn::DataLoaderOptions().batch_size(32).shuffle(true).seed(3));
  auto model = std::make_shared<GateNet>();
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  debug::DiagnoseOptions o;
  o.epochs = 1;
  o.report_dir = (std::filesystem::temp_directory_path() / "gs_diagnose_d7").string();
  const debug::RunReport r = debug::diagnose(*model, ce, opt, train, nullptr, nullptr, o);
  CHECK(r.str().find("D7: no Normalizer was given; pass the fitted nn::Normalizer") != std::string::npos);
  std::filesystem::remove_all(o.report_dir);
}
