// The diagnosis (debug/diagnosis/diagnosis.h) on bugs written as a user writes them: hand-written
// modules and hand-written loops, each a buggy twin whose lead must be the root cause (with what
// confirmed it, and the symptoms it explains hanging under it) and a clean twin that must stay
// silent. Also the tables themselves: every cause a symptom names exists, and no symptom lists a
// cause twice.
#include <doctest/doctest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdio>
#include <ctime>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"
#include "json_mini.h"

using namespace gradsleuth;
using dtest::blobs;
using dtest::explained_checks;
using dtest::lead_of;
using dtest::Split;
using dtest::split;
using dtest::strings;
using dtest::train_own_loop;

namespace {

// Linear -> ReLU -> Linear -> ReLU -> Linear, written by hand. `hidden_bias` starts the first
// layer's bias there: -20 kills every unit of the first ReLU for every input.
struct ReluNet : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::ReLU> act1 = register_module("act1", std::make_shared<nn::ReLU>());
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 32));
  std::shared_ptr<nn::ReLU> act2 = register_module("act2", std::make_shared<nn::ReLU>());
  std::shared_ptr<nn::Linear> fc3 = register_module("fc3", std::make_shared<nn::Linear>(32, 3));
  explicit ReluNet(double hidden_bias = 0.0) : Module("ReluNet") {
    if (hidden_bias != 0.0) {
      NoGradGuard ng;
      fc1->bias.fill_(hidden_bias);
    }
  }
  Tensor forward(const Tensor& x) override { return (*fc3)((*act2)((*fc2)((*act1)((*fc1)(x))))); }
};

// `depth` layers of Linear -> Sigmoid, then a Linear head: a stack deep enough starves the
// first layers of gradient even though no unit saturates.
struct SigmoidStack : nn::Module {
  std::vector<std::shared_ptr<nn::Linear>> fcs;
  std::vector<std::shared_ptr<nn::Sigmoid>> acts;
  std::shared_ptr<nn::Linear> head;
  explicit SigmoidStack(int depth) : Module("SigmoidStack") {
    for (int i = 0; i < depth; ++i) {
      fcs.push_back(register_module("fc" + std::to_string(i), std::make_shared<nn::Linear>(i == 0 ? 6 : 16, 16)));
      acts.push_back(register_module("sig" + std::to_string(i), std::make_shared<nn::Sigmoid>()));
    }
    head = register_module("head", std::make_shared<nn::Linear>(16, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (size_t i = 0; i < fcs.size(); ++i) h = (*acts[i])((*fcs[i])(h));
    return (*head)(h);
  }
};

}  // namespace

TEST_CASE("the tables: every cause a symptom names exists, once per symptom; each cause has a check or is a symptom") {
  std::set<std::string> ids;
  for (const debug::Cause& c : debug::diagnosis_causes()) {
    CHECK_MESSAGE(ids.insert(c.id).second, c.id);
    CHECK(static_cast<bool>(c.confirms));
    CHECK_MESSAGE((!c.fault || (!c.check.empty() && !c.probe.empty())), c.id);
    if (c.fault) CHECK_MESSAGE(debug::find_check(c.check) != nullptr, c.id);
  }
  for (const debug::Symptom& s : debug::diagnosis_symptoms()) {
    CHECK(static_cast<bool>(s.shows));
    std::set<std::string> seen;
    for (const std::string& c : s.causes) {
      CHECK_MESSAGE(debug::find_cause(c) != nullptr, s.id << " -> " << c);
      CHECK_MESSAGE(seen.insert(c).second, s.id << " lists " << c << " twice");
    }
  }
}

TEST_CASE("dead ReLUs in a hand-written model: M7 leads, the vanishing gradients hang under it with the reason") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  SUBCASE("buggy twin: a first-layer bias of -20 kills every unit of the first ReLU") {
    auto owner = std::make_shared<ReluNet>(-20.0);
    ReluNet& model = *owner;
    optim::Adam opt(model.parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(model, ce, opt, d, 2);
    INFO(r.str());
    const json_mini::Value lead = lead_of(r);
    REQUIRE(lead.kind == json_mini::Value::Object);
    CHECK(lead.get("check")->str == "M7");
    CHECK(lead.get("confirmed")->b);
    CHECK(lead.get("cause")->str == "dead-relu");
    CHECK(strings(lead.get("confirmed_by")).front() == "M7");
    // The gradient symptoms are explained by the dead units, in words, with the vanishing
    // gradient's generic causes (sigmoid saturation, depth) gone from its cause line.
    const std::set<std::string> ex = explained_checks(r);
    CHECK((ex.count("O1") || ex.count("M5")));
    const debug::CauseAnalysis a = debug::analyse_causes(r.findings);
    for (size_t i : a.lead->explains) {
      CHECK(a.because[i].find("(M7)") != std::string::npos);
      const debug::Finding& f = r.findings.findings()[i];
      if (f.check == "O1") {
        CHECK(a.cause_text[i].rfind("confirmed: dead ReLU units", 0) == 0);
        CHECK(a.cause_text[i].find("sigmoid") == std::string::npos);
      }
    }
    // What was ruled out on the way: the graph reaches every parameter (M5's probe ran).
    CHECK(strings(lead.get("ruled_out")).size() >= 1);
    // The text starts with the diagnosis.
    CHECK(r.findings.str(false).rfind("Diagnosis: ", 0) == 0);
  }
  SUBCASE("clean twin: the same model with its default bias") {
    auto owner = std::make_shared<ReluNet>();
    ReluNet& model = *owner;
    optim::Adam opt(model.parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(model, ce, opt, d, 2);
    CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    CHECK(lead_of(r).kind == json_mini::Value::Null);
  }
}

TEST_CASE("a deep sigmoid stack: M8 measures the gradient's attenuation through the stack and leads") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  SUBCASE("buggy twin: 10 sigmoid layers") {
    auto owner = std::make_shared<SigmoidStack>(10);
    SigmoidStack& model = *owner;
    optim::SGD opt(model.parameters(), optim::SGDOptions(0.1));
    const debug::RunReport r = train_own_loop(model, ce, opt, d, 2);
    INFO(r.str());
    const json_mini::Value lead = lead_of(r);
    REQUIRE(lead.kind == json_mini::Value::Object);
    CHECK(lead.get("check")->str == "M8");
    CHECK(lead.get("cause")->str == "saturation");
    const debug::Finding& m8 = r.findings.findings()[static_cast<size_t>(lead.get("index")->num)];
    CHECK(m8.title.find("stacked Sigmoid layers") != std::string::npos);
    CHECK(dtest::evidence(m8, "product of the mean derivatives") < 1e-3);
    CHECK(dtest::evidence(m8, "sigmoid/tanh layers") == 10);
    // The vanishing gradient (O1) and the loss that does not fall are what it explains.
    CHECK(explained_checks(r).count("O1"));
  }
  SUBCASE("clean twin: the same sigmoid, two layers deep") {
    auto owner = std::make_shared<SigmoidStack>(2);
    SigmoidStack& model = *owner;
    optim::SGD opt(model.parameters(), optim::SGDOptions(0.5));
    const debug::RunReport r = train_own_loop(model, ce, opt, d, 10);  // trained until its loss levels off (L9)
    CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    CHECK(lead_of(r).kind == json_mini::Value::Null);
  }
}

TEST_CASE(
    "every target masked in a hand-written loop: L5 leads; the NaN loss, zero gradients and class counts follow") {
  manual_seed(4);
  const dtest::XY xy = blobs(64, 3, 6);
  SUBCASE("buggy twin: the labels were all replaced by the ignore value") {
    const Tensor masked = full_like(xy.y, -100);
    nn::DataLoader train(std::make_shared<nn::TensorDataset>(xy.x, masked), nn::DataLoaderOptions().batch_size(32));
    auto owner = std::make_shared<ReluNet>();
    ReluNet& model = *owner;
    nn::CrossEntropyLoss ce;
    optim::SGD opt(model.parameters(), optim::SGDOptions(0.1));
    debug::DiagnoseOptions o;
    o.num_classes = 3;
    const debug::RunReport r = debug::diagnose(model, ce, opt, train, nullptr, nullptr, o);
    INFO(r.str());
    const json_mini::Value lead = lead_of(r);
    REQUIRE(lead.kind == json_mini::Value::Object);
    CHECK(lead.get("check")->str == "L5");
    CHECK(lead.get("confirmed")->b);
    CHECK(lead.get("explains")->arr.size() >= 2);
    // The JSON of the whole run carries the same lead.
    const json_mini::Value doc = json_mini::parse(r.json());
    CHECK(doc.get("lead")->get("check")->str == "L5");
  }
  SUBCASE("clean twin: the labels as loaded") {
    nn::DataLoader train(std::make_shared<nn::TensorDataset>(xy.x, xy.y), nn::DataLoaderOptions().batch_size(32));
    auto owner = std::make_shared<ReluNet>();
    ReluNet& model = *owner;
    nn::CrossEntropyLoss ce;
    optim::SGD opt(model.parameters(), optim::SGDOptions(0.1));
    debug::DiagnoseOptions o;
    o.num_classes = 3;
    o.epochs = 3;
    const debug::RunReport r = debug::diagnose(model, ce, opt, train, nullptr, nullptr, o);
    CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    CHECK(json_mini::parse(r.json()).get("lead")->kind == json_mini::Value::Null);
  }
}

TEST_CASE("a loss summed by hand in a lambda: L6 leads, the inflated initial loss (L4) hangs under it") {
  manual_seed(4);
  const Split d = split();
  auto summed = [](const Tensor& out, const Tensor& y) -> Tensor {
    return nn::functional::cross_entropy(out, y) * static_cast<double>(out.size(0));
  };
  auto averaged = [](const Tensor& out, const Tensor& y) -> Tensor { return nn::functional::cross_entropy(out, y); };
  SUBCASE("buggy twin") {
    auto owner = std::make_shared<ReluNet>();
    ReluNet& model = *owner;
    optim::SGD opt(model.parameters(), optim::SGDOptions(0.01));
    debug::Session dbg(model, debug::LossFunction(summed), opt, {.train = d.train.get(), .val = d.val.get()}, [] {
      debug::DiagnoseOptions o;
      o.num_classes = 3;
      return o;
    }());
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = summed(model(b.x), b.y);
      l.backward();
      opt.step();
      dbg.step(l);
    }
    const debug::RunReport r = dbg.finish();
    INFO(r.str());
    const json_mini::Value lead = lead_of(r);
    REQUIRE(lead.kind == json_mini::Value::Object);
    CHECK(lead.get("check")->str == "L6");
    // L4 holds a loss function to its own value for an output of zeros (B log C for a sum): silent,
    // or explained by the sum when it fires.
    const auto fired = r.fired_checks();
    CHECK((explained_checks(r).count("L4") || std::find(fired.begin(), fired.end(), "L4") == fired.end()));
  }
  SUBCASE("clean twin: the mean") {
    auto owner = std::make_shared<ReluNet>();
    ReluNet& model = *owner;
    optim::SGD opt(model.parameters(), optim::SGDOptions(0.1));
    debug::Session dbg(model, debug::LossFunction(averaged), opt, {.train = d.train.get(), .val = d.val.get()}, [] {
      debug::DiagnoseOptions o;
      o.num_classes = 3;
      return o;
    }());
    for (int e = 0; e < 2; ++e)
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        Tensor l = averaged(model(b.x), b.y);
        l.backward();
        opt.step();
        dbg.step(l);
      }
    const debug::RunReport r = dbg.finish();
    CHECK_MESSAGE(r.fired_checks().empty(), r.str());
  }
}

TEST_CASE(
    "a learning rate far too high in a hand-written loop: O8 leads before training; O6 and the lr / 10 probe confirm "
    "it") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  SUBCASE("buggy twin: Adam at lr 1") {
    auto owner = std::make_shared<ReluNet>();
    ReluNet& model = *owner;
    optim::Adam opt(model.parameters(), optim::AdamOptions(1.0));
    debug::Session dbg(model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 3; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        Tensor l = ce(model(b.x), b.y);
        l.backward();
        opt.step();
      }
      dbg.epoch();
    }
    const nn::Batch all = d.val->batch(0, 0);
    const double trained = ce(model(all.x), all.y).item<double>();
    const std::map<std::string, Tensor> state = opt.state_dict();
    const debug::RunReport r = dbg.finish();
    // What training left is back after the probe: the same loss, the same optimizer state.
    CHECK(ce(model(all.x), all.y).item<double>() == trained);
    CHECK(opt.state_dict().size() == state.size());
    INFO(r.str());
    const json_mini::Value lead = lead_of(r);
    REQUIRE(lead.kind == json_mini::Value::Object);
    // The same fault seen three ways: O8's range before training leads, O6's loss history and the
    // probe, which trained the same model again from its initial weights at lr / 10 and saw it
    // train there, confirm it; the trained weights are back afterwards.
    CHECK(lead.get("check")->str == "O8");
    CHECK(lead.get("cause")->str == "lr-too-high");
    const std::vector<std::string> by = strings(lead.get("confirmed_by"));
    CHECK(by.front() == "O8");
    CHECK(std::find(by.begin(), by.end(), "O6") != by.end());
    CHECK(std::find(by.begin(), by.end(), "O6 probe (lr / 10)") != by.end());
    CHECK(opt.lr() == 1.0);
    REQUIRE(r.history.step_losses.size() == 45);
  }
  SUBCASE("buggy twin on a cosine schedule that anneals to 0: the probe replays the schedule at a tenth") {
    // Probing at a tenth of the final rate (0 here) would learn nothing and prove nothing.
    auto owner = std::make_shared<ReluNet>();
    ReluNet& model = *owner;
    optim::Adam opt(model.parameters(), optim::AdamOptions(1.0));
    optim::CosineAnnealingLR sched(opt, 45);
    debug::Session dbg(model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 3; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        Tensor l = ce(model(b.x), b.y);
        l.backward();
        opt.step();
        sched.step();
      }
      dbg.epoch();
    }
    const debug::RunReport r = dbg.finish();
    INFO(r.str());
    const json_mini::Value lead = lead_of(r);
    REQUIRE(lead.kind == json_mini::Value::Object);
    CHECK(lead.get("cause")->str == "lr-too-high");
    const std::vector<std::string> by = strings(lead.get("confirmed_by"));
    CHECK(std::find(by.begin(), by.end(), "O6 probe (lr / 10)") != by.end());
    CHECK(opt.lr() < 1e-3);  // the run's own rate is back afterwards
  }
  SUBCASE("clean twin: Adam at lr 1e-2") {
    auto owner = std::make_shared<ReluNet>();
    ReluNet& model = *owner;
    optim::Adam opt(model.parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(model, ce, opt, d, 3);
    CHECK_MESSAGE(r.fired_checks().empty(), r.str());
  }
}

TEST_CASE("no probe confirms a cause: the lead says so and lists the candidates left, in order") {
  // A symptom alone (a loss stuck at chance) in a report where only M7 ran: unconfirmed, with the
  // dead-unit probe ruled out and the rest still candidates.
  debug::Report r;
  debug::Finding stuck;
  stuck.check = "L1";
  stuck.kind = debug::Kind::LossAtChance;
  stuck.severity = debug::Severity::Warning;
  stuck.title = "the training loss is stuck at chance level: 1.1 after 100 steps";
  stuck.end_of_run = true;
  r.add(stuck);
  r.note_ran("M7");
  const debug::CauseAnalysis a = debug::analyse_causes(r);
  REQUIRE(a.lead.has_value());
  CHECK_FALSE(a.lead->confirmed);
  CHECK(a.lead->check == "L1");
  CHECK(a.lead->cause.empty());
  REQUIRE(a.lead->candidates.size() > 5);
  CHECK(std::none_of(a.lead->candidates.begin(), a.lead->candidates.end(),
                     [](const std::string& c) { return c.rfind("M7:", 0) == 0; }));
  CHECK(std::any_of(a.lead->ruled_out.begin(), a.lead->ruled_out.end(),
                    [](const std::string& c) { return c.rfind("M7:", 0) == 0; }));
  CHECK(a.lead->str(r).rfind("Diagnosis (unconfirmed): ", 0) == 0);
  CHECK(a.cause_text[0].rfind("no probe confirmed a cause", 0) == 0);
  const json_mini::Value j = json_mini::parse(a.lead->json());
  CHECK_FALSE(j.get("confirmed")->b);
  CHECK(j.get("candidates")->arr.size() == a.lead->candidates.size());
  // Nothing ran in 16 bits (M28's range watch and O10's scaler did not run): their causes are no
  // candidates of a float32 run; with M28 run, its causes are candidates again.
  auto names = [](const std::vector<std::string>& v, const char* prefix) {
    return std::any_of(v.begin(), v.end(), [&](const std::string& c) { return c.rfind(prefix, 0) == 0; });
  };
  CHECK_FALSE(names(a.lead->candidates, "M28:"));
  CHECK_FALSE(names(a.lead->candidates, "O10:"));
  debug::Report r16 = r;
  r16.note_ran("M28");
  const debug::CauseAnalysis a16 = debug::analyse_causes(r16);
  REQUIRE(a16.lead.has_value());
  CHECK(names(a16.lead->ruled_out, "M28:"));
}

TEST_CASE("docs/checks.md holds the diagnosis tables as the code has them") {
  std::ifstream in(std::string(GS_SOURCE_DIR) + "/docs/checks.md");
  REQUIRE(in.good());
  std::stringstream doc;
  doc << in.rdbuf();
  const std::string tables = debug::diagnosis_tables_markdown();
  CHECK_MESSAGE(doc.str().find("<!-- gradsleuth checks --causes -->\n" + tables) != std::string::npos,
                "regenerate the tables in docs/checks.md with `gradsleuth checks --causes`");
}

// ---- bugs of the training loop and the schedule -------------------------------------------

TEST_CASE("a scheduler stepped every batch instead of every epoch: O6's schedule finding leads") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool per_batch : {true, false}) {
    CAPTURE(per_batch);
    auto owner = std::make_shared<ReluNet>();
    ReluNet& model = *owner;
    optim::SGD opt(model.parameters(), optim::SGDOptions(0.1));
    optim::StepLR sched(opt, 2, 0.1);  // meant: divide by 10 every 2 epochs
    debug::Session dbg(model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 4; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        Tensor l = ce(model(b.x), b.y);
        l.backward();
        opt.step();
        if (per_batch) sched.step();  // the bug: 15 batches per epoch, so /10 every 2 batches
      }
      if (!per_batch) sched.step();
      dbg.epoch();
    }
    const debug::RunReport r = dbg.finish();
    INFO(r.str());
    if (per_batch) {
      const json_mini::Value lead = lead_of(r);
      REQUIRE(lead.kind == json_mini::Value::Object);
      CHECK(lead.get("check")->str == "O6");
      CHECK(lead.get("cause")->str == "lr-schedule");
      const debug::Finding& f = r.findings.findings()[static_cast<size_t>(lead.get("index")->num)];
      CHECK(f.title.find("cuts it 1000x by step 7 of 60") != std::string::npos);
    } else {
      CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    }
  }
}

TEST_CASE("one batch read before the loop and reused every step: D8 says the loop trains on one batch") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool reused : {true, false}) {
    CAPTURE(reused);
    auto owner = std::make_shared<ReluNet>();
    ReluNet& model = *owner;
    optim::Adam opt(model.parameters(), optim::AdamOptions(1e-2));
    debug::Session dbg(model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    const nn::Batch first = d.train->batch(0, 0);
    for (int e = 0; e < 2; ++e) {
      for (const nn::Batch& b : *d.train) {
        const nn::Batch& use = reused ? first : b;  // the bug: the batch of the loop is never used
        opt.zero_grad();
        Tensor l = ce(model(use.x), use.y);
        l.backward();
        opt.step();
      }
      dbg.epoch();
    }
    const debug::RunReport r = dbg.finish();
    INFO(r.str());
    if (reused) {
      const json_mini::Value lead = lead_of(r);
      REQUIRE(lead.kind == json_mini::Value::Object);
      CHECK(lead.get("check")->str == "D8");
      const debug::Finding& f = r.findings.findings()[static_cast<size_t>(lead.get("index")->num)];
      CHECK(f.title.find("the same batch was fed again at 29 of 29 steps") == 0);
    } else {
      CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    }
  }
}

TEST_CASE("zero_grad between backward and step: O1 finds no gradient at the step, and leads") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool misplaced : {true, false}) {
    CAPTURE(misplaced);
    auto owner = std::make_shared<ReluNet>();
    ReluNet& model = *owner;
    optim::SGD opt(model.parameters(), optim::SGDOptions(0.1));
    debug::Session dbg(model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 2; ++e) {
      for (const nn::Batch& b : *d.train) {
        if (!misplaced) opt.zero_grad();
        Tensor l = ce(model(b.x), b.y);
        l.backward();
        if (misplaced) opt.zero_grad();  // the bug: the gradients are gone before the step
        opt.step();
      }
      dbg.epoch();
    }
    const debug::RunReport r = dbg.finish();
    INFO(r.str());
    if (misplaced) {
      const json_mini::Value lead = lead_of(r);
      REQUIRE(lead.kind == json_mini::Value::Object);
      CHECK(lead.get("check")->str == "O1");
      CHECK(lead.get("cause")->str == "no-backward");
      CHECK(lead.get("confirmed")->b);
    } else {
      CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    }
  }
}

// Linear -> Dropout -> ReLU -> Linear.
struct DropNet : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::Dropout> drop = register_module("drop", std::make_shared<nn::Dropout>(0.3));
  std::shared_ptr<nn::ReLU> act = register_module("act", std::make_shared<nn::ReLU>());
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 3));
  DropNet() : Module("DropNet") {}
  Tensor forward(const Tensor& x) override { return (*fc2)((*act)((*drop)((*fc1)(x)))); }
};

TEST_CASE("model.eval() left on while training: M2 says the model trains in evaluation mode") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool left_in_eval : {true, false}) {
    CAPTURE(left_in_eval);
    auto model = std::make_shared<DropNet>();
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    debug::Session dbg(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 2; ++e) {
      if (!left_in_eval) model->train();  // the bug: never switched back after the evaluation
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        Tensor l = ce((*model)(b.x), b.y);
        l.backward();
        opt.step();
      }
      model->eval();
      dbg.epoch();
    }
    const debug::RunReport r = dbg.finish();
    INFO(r.str());
    if (left_in_eval) {
      const json_mini::Value lead = lead_of(r);
      REQUIRE(lead.kind == json_mini::Value::Object);
      CHECK(lead.get("check")->str == "M2");
      const debug::Finding& f = r.findings.findings()[static_cast<size_t>(lead.get("index")->num)];
      CHECK(f.title.find("in eval mode: the model is trained in evaluation mode") != std::string::npos);
      CHECK(f.module == "drop (Dropout)");
    } else {
      CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    }
  }
}

namespace {

// Two Linear layers; `activation` says whether a ReLU (written as a function call in forward(),
// not as a module) sits between them.
struct TwoLinear : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 3));
  bool activation;
  explicit TwoLinear(bool act) : Module("TwoLinear"), activation(act) {}
  Tensor forward(const Tensor& x) override {
    Tensor h = (*fc1)(x);
    if (!activation) return (*fc2)(h);
    if (in_place) return (*fc2)(h.relu_());
    return (*fc2)(relu(h));
  }
  bool in_place = false;
};

// Linear -> ReLU -> Dropout(p) -> Linear.
struct DropoutNet : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::ReLU> act = register_module("act", std::make_shared<nn::ReLU>());
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 3));
  explicit DropoutNet(double p) : Module("DropoutNet") {
    drop = register_module("drop", std::make_shared<nn::Dropout>(p));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)((*drop)((*act)((*fc1)(x)))); }
};

bool fired_at(const debug::RunReport& r, const char* check, const std::string& where) {
  for (const debug::Finding& f : r.findings.findings())
    if (f.fires() && f.check == check && (f.module.find(where) != std::string::npos || f.parameter == where))
      return true;
  return false;
}

}  // namespace

TEST_CASE("M23: two Linear layers with no activation between them collapse into one; a functional relu is seen") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  SUBCASE("buggy twin: forward() forgot the activation") {
    auto owner = std::make_shared<TwoLinear>(false);
    optim::Adam opt(owner->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*owner, ce, opt, d, 2);
    INFO(r.str());
    CHECK(fired_at(r, "M23", "fc2"));
    const json_mini::Value lead = lead_of(r);
    REQUIRE(lead.kind == json_mini::Value::Object);
    CHECK(lead.get("check")->str == "M23");
    CHECK(lead.get("cause")->str == "missing-nonlinearity");
  }
  SUBCASE("clean twin: an in-place relu_ on fc1's output is a non-linearity too") {
    auto owner = std::make_shared<TwoLinear>(true);
    owner->in_place = true;
    debug::Report r;
    r.add(debug::check_missing_nonlinearity(*owner, d.train->batch(0, 0).x));
    CHECK(r.fired_checks().empty());
  }
  SUBCASE("clean twin: relu(fc1(x)) in forward()") {
    auto owner = std::make_shared<TwoLinear>(true);
    optim::Adam opt(owner->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*owner, ce, opt, d, 2);
    CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    CHECK(r.findings.ran("M23"));
  }
}

TEST_CASE("M24: a dropout probability of 0.8 (meant as the keep probability) is reported before training") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  SUBCASE("buggy twin: Dropout(0.8)") {
    auto owner = std::make_shared<DropoutNet>(0.8);
    optim::Adam opt(owner->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*owner, ce, opt, d, 2);
    INFO(r.str());
    CHECK(fired_at(r, "M24", "drop"));
    const json_mini::Value lead = lead_of(r);
    REQUIRE(lead.kind == json_mini::Value::Object);
    CHECK(lead.get("cause")->str == "high-dropout");
  }
  SUBCASE("clean twin: Dropout(0.2)") {
    auto owner = std::make_shared<DropoutNet>(0.2);
    optim::Adam opt(owner->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*owner, ce, opt, d, 2);
    CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    CHECK(r.findings.ran("M24"));
  }
}

TEST_CASE("O8: a learning rate outside the optimizer's usual range is reported before the first step") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  SUBCASE("buggy twin: Adam at 1e-7 (an exponent typed wrong)") {
    auto owner = std::make_shared<ReluNet>();
    optim::Adam opt(owner->parameters(), optim::AdamOptions(1e-7));
    const debug::RunReport r = train_own_loop(*owner, ce, opt, d, 2);
    INFO(r.str());
    REQUIRE(r.fired("O8"));
    for (const debug::Finding& f : r.findings.findings())
      if (f.check == "O8") {
        CHECK(f.step < 0);  // before training
        CHECK(f.title.find("below the usual range") != std::string::npos);
      }
    const json_mini::Value lead = lead_of(r);
    REQUIRE(lead.kind == json_mini::Value::Object);
    const std::string cause = lead.get("cause")->str;
    CHECK((cause == "lr-out-of-range" || cause == "lr-too-low"));
  }
  SUBCASE("buggy twin: SGD at 5") {
    auto owner = std::make_shared<ReluNet>();
    optim::SGD opt(owner->parameters(), optim::SGDOptions(5.0));
    const std::vector<debug::Finding> f = debug::check_learning_rate_range(opt);
    REQUIRE(f.size() == 1);
    CHECK(f[0].title.find("above the usual range") != std::string::npos);
  }
  SUBCASE("clean twin: Adam at its default 1e-3") {
    auto owner = std::make_shared<ReluNet>();
    optim::Adam opt(owner->parameters(), optim::AdamOptions(1e-3));
    const debug::RunReport r = train_own_loop(*owner, ce, opt, d, 2);
    CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    CHECK(r.findings.ran("O8"));
  }
}

TEST_CASE("M25: weights initialised to zero stay zero over the run, and so does the layer's output") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  SUBCASE("buggy twin: every weight and bias zeroed by hand") {
    auto owner = std::make_shared<ReluNet>();
    for (Tensor& p : owner->parameters()) nn::init::zeros_(p);
    optim::Adam opt(owner->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*owner, ce, opt, d, 2);
    INFO(r.str());
    CHECK(fired_at(r, "M25", "fc1.weight"));
    CHECK(fired_at(r, "M25", "fc1 (Linear)"));
    const debug::CauseAnalysis a = debug::analyse_causes(r.findings);
    REQUIRE(a.lead.has_value());
    CHECK(a.lead->confirmed);
  }
  SUBCASE("clean twin: the layers' default initialisation") {
    auto owner = std::make_shared<ReluNet>();
    optim::Adam opt(owner->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*owner, ce, opt, d, 2);
    CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    CHECK(r.findings.ran("M25"));
  }
}

TEST_CASE("W10: a step that blocks for a second in a hand-written loop is reported as a stall") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool stall : {true, false}) {
    CAPTURE(stall);
    auto owner = std::make_shared<ReluNet>();
    optim::Adam opt(owner->parameters(), optim::AdamOptions(1e-2));
    debug::DiagnoseOptions o;
    o.monitor.run.stall_min_seconds = 0.4;
    debug::Session dbg(*owner, ce, opt, {.train = d.train.get(), .val = d.val.get()}, o);
    int64_t step = 0;
    for (int e = 0; e < 2; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        ce((*owner)(b.x), b.y).backward();
        if (stall && ++step == 12) std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // a blocked read
        opt.step();
      }
      dbg.epoch();
    }
    const debug::RunReport r = dbg.finish();
    INFO(r.str());
    CHECK(r.findings.ran("W10"));
    if (stall) {
      REQUIRE(r.fired("W10"));
      for (const debug::Finding& f : r.findings.findings())
        if (f.check == "W10") CHECK(f.step == 12);
    } else {
      CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    }
  }
}

TEST_CASE("M26: a weight decay of 50 (meant as 5e-4) shrinks every weight to ~0 and the layers' outputs go flat") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const double wd : {50.0, 1e-2}) {
    CAPTURE(wd);
    auto owner = std::make_shared<ReluNet>();
    optim::AdamW opt(owner->parameters(), optim::AdamWOptions(1e-2).weight_decay(wd));
    const debug::RunReport r = train_own_loop(*owner, ce, opt, d, 3);
    INFO(r.str());
    CHECK(r.findings.ran("M26"));
    if (wd > 1.0) {
      bool collapsed = false;
      for (const debug::Finding& f : r.findings.findings())
        collapsed = collapsed || (f.check == "M26" && f.title.find("collapsed") != std::string::npos);
      CHECK(collapsed);
    } else {
      CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    }
  }
}

TEST_CASE("W10's limits: a step above stall_max_seconds stalls whatever the median; too few steps judge nothing else") {
  debug::RunCheckOptions o;
  o.stall_min_seconds = 0.05;
  o.stall_max_seconds = 0.3;
  debug::StepTimer t(o);
  t.step_done(1);  // starts the clock
  t.step_done(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  t.step_done(3);  // slow against the first step, but 2 steps are too few for a median
  CHECK(t.findings().empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  t.step_done(4);
  const std::vector<debug::Finding> f = t.findings();
  REQUIRE(f.size() == 1);
  CHECK(f[0].check == "W10");
  CHECK(f[0].step == 4);
}

TEST_CASE("W10: a step slow only because other threads held the CPU is info (a busy machine); a blocked step warns") {
  // The training thread and 12 spinning threads pinned to one CPU: a step of 30 ms of the thread's own
  // work takes far longer on the wall, nearly all of it waiting on the run queue. Where the kernel does
  // not report that wait (no /proc/thread-self/schedstat), the busy case cannot be told and is not run.
  std::FILE* probe = std::fopen("/proc/thread-self/schedstat", "r");
  if (!probe) return;
  std::fclose(probe);
  // One CPU this process may run on (a container's cpuset need not hold CPU 0).
  cpu_set_t saved;
  if (sched_getaffinity(0, sizeof(saved), &saved) != 0) return;
  int cpu = -1;
  for (int k = 0; k < CPU_SETSIZE && cpu < 0; ++k)
    if (CPU_ISSET(k, &saved)) cpu = k;
  if (cpu < 0) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0) return;
  debug::RunCheckOptions o;
  o.stall_min_seconds = 0.05;
  o.stall_max_seconds = 0.1;  // the limit whatever the median (a loaded test machine's)
  debug::StepTimer t(o);
  auto work = [](double seconds) {  // `seconds` of this thread's CPU time
    auto cpu = [] {
      timespec ts{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
    };
    const double until = cpu() + seconds;
    volatile double x = 0;
    while (cpu() < until) x = x + 1.0;
  };
  t.step_done(1);
  for (int64_t s = 2; s <= 7; ++s) {
    work(0.001);
    t.step_done(s);
  }
  {
    std::atomic<bool> stop{false};
    std::vector<std::thread> others;
    for (int k = 0; k < 12; ++k)
      others.emplace_back([&] {
        pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
        volatile double x = 0;
        while (!stop.load()) x = x + 1.0;
      });
    work(0.03);  // 30 ms of work, sharing the CPU with 12 others: about 0.4 s on the wall
    stop = true;
    for (std::thread& th : others) th.join();
  }
  t.step_done(8);
  // The blocked twin: a step that sleeps (a loader waiting on a file) waits off the run queue.
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  sched_setaffinity(0, sizeof(saved), &saved);
  std::vector<debug::Finding> f = t.findings();
  REQUIRE(f.size() == 1);
  CHECK(f[0].step == 8);
  // A kernel that keeps the file but no run-queue accounting reads 0: nothing to tell the busy case by.
  if (f[0].value_of("the longest step's wait for a CPU (s)") == 0.0) return;
  CHECK_MESSAGE(f[0].severity == debug::Severity::Info, f[0].str());
  t.step_done(9);
  f = t.findings();
  REQUIRE(f.size() == 1);
  CHECK(f[0].step == 9);
  CHECK(f[0].severity == debug::Severity::Warning);
}

namespace {

// Five Linear -> ReLU layers and a head, biases zero; `init_std` > 0 draws every weight from
// N(0, init_std) (the "small random numbers" of old tutorials), else He initialisation.
struct DeepRelu : nn::Module {
  std::vector<std::shared_ptr<nn::Linear>> fcs;
  std::vector<std::shared_ptr<nn::ReLU>> acts;
  std::shared_ptr<nn::Linear> head;
  explicit DeepRelu(double init_std) : Module("DeepRelu") {
    for (int i = 0; i < 5; ++i) {
      fcs.push_back(register_module("fc" + std::to_string(i), std::make_shared<nn::Linear>(i == 0 ? 6 : 32, 32)));
      acts.push_back(register_module("relu" + std::to_string(i), std::make_shared<nn::ReLU>()));
    }
    head = register_module("head", std::make_shared<nn::Linear>(32, 3));
    for (auto& fc : fcs) {
      if (init_std > 0.0)
        nn::init::normal_(fc->weight, 0.0, init_std);
      else
        nn::init::kaiming_normal_(fc->weight);
      nn::init::zeros_(fc->bias);
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (size_t i = 0; i < fcs.size(); ++i) h = (*acts[i])((*fcs[i])(h));
    return (*head)(h);
  }
};

}  // namespace

TEST_CASE("M27: weights drawn with std 0.01 shrink the activations layer after layer; He initialisation keeps them") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  SUBCASE("buggy twin: normal_(w, 0, 0.01) and zero biases in every hidden layer") {
    auto owner = std::make_shared<DeepRelu>(0.01);
    optim::Adam opt(owner->parameters(), optim::AdamOptions(1e-3));
    const debug::RunReport r = train_own_loop(*owner, ce, opt, d, 2);
    INFO(r.str());
    REQUIRE(r.fired("M27"));
    for (const debug::Finding& f : r.findings.findings())
      if (f.check == "M27") {
        CHECK(f.step < 0);  // before training
        CHECK(f.title.find("shrinks") != std::string::npos);
        CHECK(f.module == "relu4 (ReLU)");
      }
  }
  SUBCASE("clean twin: kaiming_normal_") {
    auto owner = std::make_shared<DeepRelu>(0.0);
    optim::Adam opt(owner->parameters(), optim::AdamOptions(1e-3));
    const debug::RunReport r = train_own_loop(*owner, ce, opt, d, 2);
    CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    CHECK(r.findings.ran("M27"));
  }
}

TEST_CASE(
    "M7's pass after training: diagnose() runs the trained model over the training data, dead units named there too") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  auto owner = std::make_shared<ReluNet>(-20.0);
  optim::Adam opt(owner->parameters(), optim::AdamOptions(1e-2));
  for (const bool pass : {true, false}) {
    CAPTURE(pass);
    debug::DiagnoseOptions o;
    o.epochs = 1;
    o.dead_pass = pass;
    const debug::RunReport r = debug::diagnose(*owner, ce, opt, *d.train, d.val.get(), nullptr, o);
    // The pass's finding counts every batch of the loader (the monitor's, only the sampled steps').
    int64_t end_of_run_m7 = 0;
    for (const debug::Finding& f : r.phases[3].findings.findings())
      for (const debug::Evidence& e : f.evidence)
        if (f.check == "M7" && f.fires() && e.name == "batches in the pass" &&
            e.value == static_cast<double>(d.train->num_batches()))
          ++end_of_run_m7;
    INFO(r.str());
    if (pass)
      CHECK(end_of_run_m7 >= 1);
    else
      CHECK(end_of_run_m7 == 0);
  }
}

TEST_CASE("D3's per-class recall: the rule on counts, both sides of each limit") {
  // Three classes of 100 validation examples each.
  const std::vector<int64_t> n = {100, 100, 100};
  const debug::DataCheckOptions o;  // recall below 0.2 x the others' mean warns, that mean above 1.5 / C
  auto warns = [&](std::vector<int64_t> right, std::vector<int64_t> ex) {
    return dtest::find(debug::check_class_errors(ex, right, o), "D3") != nullptr;
  };
  CHECK(warns({90, 90, 17}, n));   // 0.17 < 0.2 x 0.90
  CHECK(!warns({90, 90, 19}, n));  // 0.19 >= 0.18: a hard class, not a missed one
  CHECK(!warns({45, 45, 5}, n));   // the others' mean 0.45 is not above 1.5 x chance (0.5)
  CHECK(warns({55, 55, 5}, n));
  CHECK(!warns({90, 90, 0}, {100, 100, 9}));  // too few examples of class 2 to judge
  CHECK(debug::check_class_errors({100}, {90}, o).empty());
  const std::vector<debug::Finding> f = debug::check_class_errors(n, {90, 90, 10}, o);
  REQUIRE(f.size() == 1);
  CHECK(f[0].title.find("class 2") != std::string::npos);
  CHECK(dtest::evidence(f[0], "class 2 recall / the others' mean") == doctest::Approx(0.1 / 0.9));
  CHECK(!f[0].cause.empty());
  CHECK(!f[0].fix.empty());

  // A class still being learned (its recall after the first epoch given): info at 2x and +0.1 or more.
  auto fires_from = [&](std::vector<int64_t> right, std::vector<double> first) {
    const std::vector<debug::Finding> fs = debug::check_class_errors(n, right, o, first);
    const debug::Finding* d3 = dtest::find(fs, "D3");
    return d3 != nullptr && d3->fires();
  };
  CHECK(!fires_from({90, 90, 15}, {0.6, 0.6, 0.03}));  // 0.03 -> 0.15: still being learned
  CHECK(fires_from({90, 90, 15}, {0.6, 0.6, 0.10}));   // 1.5x: not enough of a rise
  CHECK(fires_from({90, 90, 12}, {0.6, 0.6, 0.03}));   // 4x, but only +0.09
  CHECK(fires_from({90, 90, 0}, {0.6, 0.6, 0.0}));     // never learned
  const std::vector<debug::Finding> learning = debug::check_class_errors(n, {90, 90, 15}, o, {0.6, 0.6, 0.03});
  REQUIRE(learning.size() == 1);
  CHECK(learning[0].title.find("still being learned") != std::string::npos);
  CHECK(dtest::evidence(learning[0], "class 2 recall after the first epoch") == doctest::Approx(0.03));
}

TEST_CASE("D3 after training: a class kept at a twentieth of the others is missed on validation; the imbalance leads") {
  manual_seed(4);
  // Overlapping blobs: a class the model rarely sees loses the examples it shares with the others.
  // Scaled by hand to about unit variance.
  const dtest::XY all = blobs(400, 3, 6, 5, 6.0);
  const Tensor x = all.x / 7.0;
  const Tensor tx = x.narrow(0, 0, 900), ty = all.y.narrow(0, 0, 900);
  const Tensor vx = x.narrow(0, 900, 300), vy = all.y.narrow(0, 900, 300);
  auto loaders = [&](const Tensor& x, const Tensor& y) {
    Split s;
    s.train = std::make_shared<nn::DataLoader>(std::make_shared<nn::TensorDataset>(x, y),
                                               nn::DataLoaderOptions().batch_size(32).shuffle(true).seed(5));
    s.val = std::make_shared<nn::DataLoader>(std::make_shared<nn::TensorDataset>(vx, vy),
                                             nn::DataLoaderOptions().batch_size(100));
    return s;
  };
  nn::CrossEntropyLoss ce;
  SUBCASE("buggy twin: the user thins class 2 out of the training data (every 20th kept)") {
    const std::vector<int64_t> labels = ty.to_vector<int64_t>();
    std::vector<int64_t> keep;
    int64_t seen2 = 0;
    for (size_t i = 0; i < labels.size(); ++i)
      if (labels[i] != 2 || seen2++ % 20 == 0) keep.push_back(static_cast<int64_t>(i));
    const Tensor idx = tensor(keep, {static_cast<int64_t>(keep.size())});
    const Split d = loaders(tx.index_select(0, idx), ty.index_select(0, idx));
    auto owner = std::make_shared<ReluNet>();
    optim::Adam opt(owner->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*owner, ce, opt, d, 3);
    INFO(r.str());
    const debug::Finding* missed = nullptr;
    size_t at = 0;
    for (size_t i = 0; i < r.findings.findings().size(); ++i)
      if (r.findings.findings()[i].fires() &&
          r.findings.findings()[i].title.find("misses one class") != std::string::npos) {
        missed = &r.findings.findings()[i];
        at = i;
      }
    REQUIRE(missed != nullptr);
    CHECK(missed->title.find("class 2") != std::string::npos);
    CHECK(missed->end_of_run);
    const debug::CauseAnalysis a = debug::analyse_causes(r.findings);
    REQUIRE(a.lead.has_value());
    CHECK(a.lead->cause == "class-imbalance");
    CHECK(std::find(a.lead->explains.begin(), a.lead->explains.end(), at) != a.lead->explains.end());
  }
  SUBCASE("clean twin: every training example kept") {
    const Split d = loaders(tx, ty);
    auto owner = std::make_shared<ReluNet>();
    optim::Adam opt(owner->parameters(), optim::AdamOptions(1e-2));
    const debug::RunReport r = train_own_loop(*owner, ce, opt, d, 3);
    CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    CHECK(r.findings.ran("D3"));
    CHECK(dtest::find(r.findings.findings(), "D3", debug::Severity::Info) != nullptr);
  }
}

TEST_CASE("M25 mid-run: magnitude pruning with a threshold above every weight zeroes a layer after the first epoch") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  // The user's loop: after the first epoch, fc2's weights below `threshold` are pruned, and the
  // mask is applied again after every later step.
  auto train_pruned = [&](ReluNet& model, double threshold) {
    optim::Adam opt(model.parameters(), optim::AdamOptions(1e-2));
    debug::Session dbg(model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    Tensor mask;
    for (int e = 0; e < 3; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        Tensor l = ce(model(b.x), b.y);
        l.backward();
        opt.step();
        if (mask.defined()) {
          NoGradGuard ng;
          model.fc2->weight.mul_(mask);
        }
      }
      dbg.epoch();
      if (e == 0) {
        NoGradGuard ng;
        mask = (abs(model.fc2->weight) > threshold).to(kFloat32);
        model.fc2->weight.mul_(mask);
      }
    }
    return dbg.finish();
  };
  SUBCASE("buggy twin: a threshold of 1 (the weights are near 0.1): every weight of fc2 pruned") {
    auto owner = std::make_shared<ReluNet>();
    const debug::RunReport r = train_pruned(*owner, 1.0);
    INFO(r.str());
    const std::vector<debug::Finding>& fs = r.findings.findings();
    int64_t value = -1, grad = -1;
    for (size_t i = 0; i < fs.size(); ++i) {
      if (!fs[i].fires() || fs[i].check != "M25") continue;
      if (fs[i].parameter == "fc2.weight" && fs[i].title.find("parameter") == 0) value = static_cast<int64_t>(i);
      if (fs[i].parameter == "fc1.weight") grad = static_cast<int64_t>(i);
    }
    REQUIRE(value >= 0);
    CHECK(fs[value].title.find("became entirely zero at step") != std::string::npos);
    CHECK(fs[value].step > 15);  // after the first epoch's 15 steps
    CHECK(dtest::evidence(fs[value], "sampled steps all-zero from then on") ==
          dtest::evidence(fs[value], "sampled steps from then on"));  // the mask stays on
    // No gradient reaches fc1 through the zeroed layer: a symptom of the zeroed weights.
    REQUIRE(grad >= 0);
    CHECK(fs[grad].title.find("the gradient of fc1.weight became entirely zero") == 0);
    CHECK(r.findings.caused_by()[grad] == value);
    // The loss jumps when the layer is zeroed: O6 reads those jumps as a learning rate too high,
    // and hangs under the zeroed layer, which leads.
    CHECK(r.findings.caused_by()[value] == -1);
    const json_mini::Value lead = lead_of(r);
    REQUIRE(lead.kind == json_mini::Value::Object);
    CHECK(lead.get("check")->str == "M25");
    for (size_t i = 0; i < fs.size(); ++i)
      if (fs[i].fires() && fs[i].check == "O6" && fs[i].title.find("too high") != std::string::npos)
        CHECK(r.findings.caused_by()[i] == static_cast<int64_t>(lead.get("index")->num));
  }
  SUBCASE("clean twin: a threshold of 0.01 prunes a few weights") {
    auto owner = std::make_shared<ReluNet>();
    const debug::RunReport r = train_pruned(*owner, 0.01);
    CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    CHECK(r.findings.ran("M25"));
  }
}

namespace {
// ReluNet with a fixed random projection of its hidden layer (a readout used only for plots, not
// in the loss, frozen). `seed` < 0: the user draws it from std::random_device.
struct ProjectedNet : nn::Module {
  std::shared_ptr<nn::Linear> proj = register_module("proj", std::make_shared<nn::Linear>(32, 2));
  std::shared_ptr<ReluNet> net = register_module("net", std::make_shared<ReluNet>());
  explicit ProjectedNet(int64_t seed) : Module("ProjectedNet") {
    std::mt19937 rng(seed < 0 ? std::random_device{}() : static_cast<uint32_t>(seed));
    std::normal_distribution<float> nd(0.0f, 0.1f);
    std::vector<float> w(64);
    for (float& v : w) v = nd(rng);
    NoGradGuard ng;
    proj->weight.copy_(tensor(w, {2, 32}));
    for (Tensor& p : proj->parameters()) p.requires_grad_(false);
  }
  Tensor forward(const Tensor& x) override { return (*net)(x); }
};
}  // namespace

TEST_CASE("W1 on the final parameters: a frozen projection drawn from std::random_device differs between two runs") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  // The user's short run for W1: a new model and optimizer from the seed, 5 steps; it returns
  // the losses and the trained model.
  auto diagnose_with = [&](bool unseeded) {
    debug::DiagnoseOptions o;
    o.rerun_model = [&](uint64_t seed) {
      manual_seed(seed);
      auto m = std::make_shared<ProjectedNet>(unseeded ? -1 : static_cast<int64_t>(seed));
      optim::Adam opt(m->net->parameters(), optim::AdamOptions(1e-2));  // the projection is not trained
      debug::ReproRun run;
      for (int64_t i = 0; i < 5; ++i) {
        const nn::Batch b = d.train->batch(0, i);
        opt.zero_grad();
        Tensor l = ce((*m)(b.x), b.y);
        l.backward();
        opt.step();
        run.losses.push_back(l.item<double>());
      }
      run.model = m;
      return run;
    };
    auto owner = std::make_shared<ProjectedNet>(unseeded ? -1 : 4);
    optim::Adam opt(owner->net->parameters(), optim::AdamOptions(1e-2));
    debug::Session dbg(*owner, ce, opt, {.train = d.train.get(), .val = d.val.get()}, o);
    for (int e = 0; e < 2; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        Tensor l = ce((*owner)(b.x), b.y);
        l.backward();
        opt.step();
      }
      dbg.epoch();
    }
    return dbg.finish();
  };
  SUBCASE("buggy twin: the projection drawn from std::random_device") {
    const debug::RunReport r = diagnose_with(true);
    INFO(r.str());
    REQUIRE(r.fired("W1"));
    const debug::Finding* f = dtest::find(r.findings.findings(), "W1");
    REQUIRE(f != nullptr);
    CHECK(f->title.find("identical losses but end with different parameters") != std::string::npos);
    CHECK(f->parameter == "proj.weight");
    CHECK(dtest::evidence(*f, "largest difference in proj.weight") > 0.0);
    const json_mini::Value lead = lead_of(r);
    REQUIRE(lead.kind == json_mini::Value::Object);
    CHECK(lead.get("cause")->str == "nondeterminism");
  }
  SUBCASE("clean twin: the projection drawn from a generator seeded with the run's seed") {
    const debug::RunReport r = diagnose_with(false);
    CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    REQUIRE(r.findings.ran("W1"));
    const debug::Finding* f = dtest::find(r.findings.findings(), "W1", debug::Severity::Info);
    REQUIRE(f != nullptr);
    CHECK(f->title.find("identical final parameters") != std::string::npos);
    CHECK(dtest::evidence(*f, "final parameters that differ") == 0.0);
  }
}

TEST_CASE("L7: validation accuracy far above the training accuracy (noisy training labels, clean validation)") {
  manual_seed(4);
  const dtest::XY all = blobs(200, 3, 6, 3);
  nn::CrossEntropyLoss ce;
  for (const bool noisy : {true, false}) {
    CAPTURE(noisy);
    // The bug: the training labels come from another, noisy source (40% of them replaced by a
    // random class); the validation labels are the clean ones.
    Tensor ytr = all.y.narrow(0, 0, 480).clone();
    if (noisy) {
      gs::Generator g(11);
      const Tensor u = rand({480}, {}, &g);
      const Tensor other = randint(0, 3, {480}, kInt64, &g);
      ytr = where(u < 0.4, other, ytr);
    }
    nn::DataLoader train(std::make_shared<nn::TensorDataset>(all.x.narrow(0, 0, 480), ytr),
                         nn::DataLoaderOptions().batch_size(32).shuffle(true).seed(3));
    nn::DataLoader val(std::make_shared<nn::TensorDataset>(all.x.narrow(0, 480, 120), all.y.narrow(0, 480, 120)),
                       nn::DataLoaderOptions().batch_size(120));
    auto owner = std::make_shared<ReluNet>();
    optim::Adam opt(owner->parameters(), optim::AdamOptions(1e-2));
    debug::DiagnoseOptions o;
    o.monitor.every = 1;  // every batch counts towards the training accuracy
    debug::Session dbg(*owner, ce, opt, {.train = &train, .val = &val}, o);
    for (int e = 0; e < 5; ++e) {
      for (const nn::Batch& b : train) {
        opt.zero_grad();
        Tensor l = ce((*owner)(b.x), b.y);
        l.backward();
        opt.step();
      }
      dbg.epoch();
    }
    const debug::RunReport r = dbg.finish();
    INFO(r.str());
    REQUIRE(r.history.epoch_train_accuracy.size() == 5);
    CHECK(r.findings.ran("L7"));
    const debug::Finding* l7 = nullptr;
    for (const debug::Finding& f : r.findings.findings())
      if (f.fires() && f.check == "L7" && f.title.find("suspiciously high") != std::string::npos) l7 = &f;
    if (noisy) {
      REQUIRE(l7 != nullptr);
      CHECK(dtest::evidence(*l7, "smallest gap over the last epochs") > 0.1);
      // No shared rows, no label drift: L9's train-labels-disagree (the trained model right on more
      // of validation than of its own training data) confirms the noisy labels and explains L7.
      const debug::CauseAnalysis a = debug::analyse_causes(r.findings);
      const size_t i = static_cast<size_t>(l7 - r.findings.findings().data());
      REQUIRE(a.parent[i] >= 0);
      CHECK(r.findings.findings()[static_cast<size_t>(a.parent[i])].is("L9", debug::Kind::TrainLabelsDisagree));
      CHECK(a.cause_text[i].find("training labels") != std::string::npos);
    } else {
      CHECK(l7 == nullptr);
      CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    }
  }
}

TEST_CASE("W10's watchdog reports a step that has not returned while it is still blocked; a steady loop says nothing") {
  manual_seed(4);
  const Split d = split();
  nn::CrossEntropyLoss ce;
  for (const bool blocked : {true, false}) {
    CAPTURE(blocked);
    auto owner = std::make_shared<ReluNet>();
    optim::Adam opt(owner->parameters(), optim::AdamOptions(1e-2));
    debug::DiagnoseOptions o;
    o.monitor.run.watchdog_seconds = 1.0;
    std::vector<std::string> said;
    std::mutex said_m;
    bool step_returned = false;  // written by this thread only, read under the lock by the callback
    std::vector<bool> while_blocked;
    o.monitor.run.on_stall = [&](const std::string& s) {
      std::lock_guard<std::mutex> lk(said_m);
      said.push_back(s);
      while_blocked.push_back(!step_returned);
    };
    debug::Session dbg(*owner, ce, opt, {.train = d.train.get(), .val = d.val.get()}, o);
    int step = 0;
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l = ce((*owner)(b.x), b.y);
      l.backward();
      if (blocked && ++step == 5) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // a read that blocks
        std::lock_guard<std::mutex> lk(said_m);
        step_returned = true;
      }
      opt.step();
    }
    dbg.epoch();
    const debug::RunReport r = dbg.finish();
    std::lock_guard<std::mutex> lk(said_m);
    if (blocked) {
      REQUIRE(said.size() == 1);  // once for the step, though it stayed blocked for 3 periods
      CHECK(while_blocked[0]);    // said while the step was still blocked, not afterwards
      CHECK(said[0].find("no optimizer step for") != std::string::npos);
      CHECK(said[0].find("step 5 has not returned") != std::string::npos);
    } else {
      CHECK(said.empty());
      CHECK_MESSAGE(r.fired_checks().empty(), r.str());
    }
  }
  // A step that never returned before the report (the run was stopped in it): the watchdog's
  // finding is the only one that can tell.
  debug::RunCheckOptions ro;
  ro.watchdog_seconds = 0.1;
  ro.on_stall = [](const std::string&) {};
  debug::StepTimer t(ro);
  t.restart();
  t.step_done(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const std::vector<debug::Finding> fs = t.findings();
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].check == "W10");
  CHECK(fs[0].title.find("step 2 had not returned after") == 0);
}

TEST_CASE(
    "M26's absolute limits: the first sampled step outside variance_max / variance_min, per layer; off by default") {
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 3));
  auto run = [&](debug::RunCheckOptions o) {
    debug::VarianceTracker t(o);
    t.attach(*model);
    t.set_active(true);
    for (int64_t step = 1; step <= 6; ++step) {  // the input's scale, and so the output's variance, grows
      t.set_step(step);
      (*model)(gs::randn({16, 4}) * static_cast<double>(step * step));
    }
    return t.findings();
  };
  manual_seed(3);
  CHECK(run({}).empty());  // a 36 x growth of the std is far from the relative rule's 1e4
  debug::RunCheckOptions o;
  o.variance_max = 50.0;
  std::vector<debug::Finding> f = run(o);
  REQUIRE(f.size() == 1);
  CHECK(f[0].check == "M26");
  CHECK(f[0].title.find("above the limit 50") != std::string::npos);
  CHECK(f[0].step > 1);
  debug::RunCheckOptions lo;
  lo.variance_min = 1e6;  // every step is below it: reported once, at step 1
  f = run(lo);
  REQUIRE(f.size() == 1);
  CHECK(f[0].step == 1);
  CHECK(f[0].title.find("below the limit") != std::string::npos);
}

TEST_CASE("units that die in training beside a dropout above 0.5: M24 leads; the lr / 10 probe hangs under it") {
  // The findings of a Fashion-MNIST MLP whose Dropout(0.9) was meant as a keep probability: its kept
  // units are scaled by 10, and their steps with them, so the units before it die, and a tenth of the
  // learning rate saves them.
  auto finding = [](const char* check, debug::Kind kind, const char* module, const char* title) {
    debug::Finding f;
    f.check = check;
    f.kind = kind;
    f.severity = debug::Severity::Warning;
    f.module = module;
    f.title = title;
    return f;
  };
  debug::Report r;
  r.add(finding("M24", debug::Kind::None, "drop1 (Dropout)", "drop1 (Dropout) drops 90% of its inputs"));
  debug::Finding dead = finding("M7", debug::Kind::DiedInTraining, "act1 (ReLU)", "75% of the units of act1 died");
  dead.end_of_run = true;
  r.add(dead);
  debug::Finding probe = finding("O6", debug::Kind::LrProbeConfirms, "act1 (ReLU)",
                                 "probe (lr / 10): the same run at a tenth of the learning rate keeps the units alive");
  probe.end_of_run = true;
  r.add(probe);
  const debug::CauseAnalysis a = debug::analyse_causes(r);
  REQUIRE(a.lead.has_value());
  CHECK(a.lead->check == "M24");
  CHECK(a.lead->cause == "high-dropout");
  CHECK(a.lead->explains.size() == 2);
  // Without the dropout, the probe's learning rate leads and explains the dead units.
  debug::Report plain;
  plain.add(dead);
  plain.add(probe);
  const debug::CauseAnalysis b = debug::analyse_causes(plain);
  REQUIRE(b.lead.has_value());
  CHECK(b.lead->check == "O6");
  CHECK(b.lead->cause == "lr-too-high");
}
