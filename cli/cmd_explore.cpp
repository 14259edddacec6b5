// gradsleuth explore: writes the autograd explorer's page (debug/report/explore.h) for the bug
// zoo's model: the graph of one forward and loss with its backward, and the replay of a short
// monitored training run (with --bug, that bug switched on and the diagnosis's lead marked).
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/evidence/catalogue.h"
#include "debug/report/explore.h"
#include "debug/report/html_report.h"
#include "debug/zoo/zoo.h"

namespace gradsleuth::cli {

namespace {

// The small graphs of docs/explore.md and the autograd lab, in raw ops (no model, no training).
std::string example_json(const std::string& name) {
  const TensorOptions f64 = TensorOptions().dtype(kFloat64).requires_grad(true);
  debug::ExploreCapture cap;
  Tensor loss;
  if (name == "twice") {  // b = a + a: two contributions arrive at a and sum to a.grad = 2
    Tensor a = tensor({1.0, -2.0, 3.0}, f64);
    a.set_name("a");
    loss = (a + a).sum();
    loss.backward();
  } else if (name == "tanh") {  // h is used three times, a twice
    Tensor a = tensor({0.5, -1.0, 2.0}, f64), w = tensor({1.5, 0.25, -0.5}, f64);
    a.set_name("a");
    w.set_name("w");
    Tensor h = tanh(a * w);
    loss = (h * h + h * a).sum();
    loss.backward();
  } else if (name == "shape-error") {  // the second matmul's shapes do not match
    manual_seed(1);
    Tensor x = randn({4, 3}, TensorOptions().dtype(kFloat64)), w1 = randn({3, 5}, f64), w2 = randn({4, 2}, f64);
    x.set_name("x");
    w1.set_name("w1");
    w2.set_name("w2");
    try {
      Tensor h = tanh(matmul(x, w1));
      loss = matmul(h, w2).sum();
      loss.backward();
    } catch (const std::exception& e) {
      cap.failed(e, "forward");
    }
  } else {
    GS_FAIL("explore", "unknown --example '", name, "': use twice, tanh or shape-error");
  }
  cap.stop();
  debug::ExploreOptions o;
  o.title = "gradsleuth explore --example " + name;
  return debug::explore_json(cap, loss, o);
}

}  // namespace

int cmd_explore(const std::vector<std::string>& args) {
  Args a("explore", args);
  a.about(
      "Writes one self-contained HTML page (no server, no network) that draws the autograd graph of one forward\n"
      "pass and loss of the bug zoo's model, steps through the forward and through the backward in the order the\n"
      "engine ran it (each gradient contribution, their sum, the .grad it leaves), and replays a short monitored\n"
      "training run (gradient norms, update ratios, weight norms, layer statistics, the loss) with the diagnosis's\n"
      "findings linked to the nodes they name. Open it in a browser; docs/explore.md walks through it.");
  a.option("model", "mlp|cnn", "the zoo's reference model (as in gradsleuth graph)", "mlp");
  a.option("bug", "ID", "switch a bug on (" + nn::bug_range() + "); repeatable", "", true);
  a.option("steps", "N", "training steps to record for the replay (0: the graph alone)", "150");
  a.option("batch-size", "B", "examples in the batch whose graph is drawn", "8");
  a.option("train-examples", "N", "training images the run reads", "6000");
  a.option("out", "FILE", "the page to write", "explore.html");
  a.option("data-dir", "D", "folder with the Fashion-MNIST IDX files", "/usr/share/datasets/fashion-mnist");
  a.option("example", "twice|tanh|shape-error",
           "a small graph in raw ops instead of the zoo's model: twice = (a + a).sum(), a used twice; tanh = "
           "h = tanh(a * w) used three times; shape-error = a forward that fails at its second matmul");
  a.flag("json", "print the page's data as one JSON object on stdout (the page is still written)");
  a.flag("quiet", "no progress lines on stderr");
  if (!a.parse()) return 0;
  for (const char* other : {"model", "bug", "steps", "batch-size", "train-examples"})
    a.refuse_together("example", other, "an example is a small graph of its own, without the zoo's model or a run");
  if (a.has("example")) {
    const std::string out = a.get_nonempty("out");
    a.check_writable_file("out");
    const std::string json = example_json(a.get("example"));
    debug::write_explore(out, json, "gradsleuth explore --example " + a.get("example"));
    if (a.has("json")) std::cout << json << "\n";
    std::fprintf(stderr, "explore: wrote %s\n", out.c_str());
    return 0;
  }

  debug::zoo::Options o = debug::zoo::Options::quick();
  o.model = a.get("model");
  GS_CHECK(o.model == "mlp" || o.model == "cnn", "explore", "unknown --model '", o.model, "': use mlp or cnn");
  o.data_dir = a.get_nonempty("data-dir");
  o.steps = a.get_int_in("steps", 0, 100000);
  o.train_examples = a.get_int_in("train-examples", 64, 60000);
  o.test_examples = std::min<int64_t>(o.test_examples, 1000);
  const int64_t batch = a.get_int_in("batch-size", 1, 4096);
  nn::BugSet bugs;
  std::vector<nn::Bug> bug_list;
  for (const std::string& id : a.get_all("bug")) {
    bugs.add(nn::parse_bug(id));
    bug_list.push_back(nn::parse_bug(id));
  }
  debug::zoo::check_recipe(bug_list, o.model);
  const std::string out = a.get_nonempty("out");
  a.check_writable_file("out");
  const bool quiet = a.has("quiet");
  auto say = [&](const std::string& s) {
    if (!quiet) std::fprintf(stderr, "explore: %s\n", s.c_str());
  };

  debug::zoo::Variant v = debug::zoo::build(bugs, o);
  debug::ExploreOptions eo;
  eo.title = "gradsleuth explore --model " + o.model + (bugs.empty() ? "" : " --bug " + bugs.str());
  std::optional<debug::zoo::RunResult> run;
  std::optional<debug::ReplayRecorder> rec;
  if (o.steps > 0) {
    say("training " + std::to_string(o.steps) + " steps with the monitor attached (the replay)");
    rec.emplace(*v.model, *v.optimizer, o.monitor_every);
    run = debug::zoo::run_variant(v, o, [&](const std::string& s) { say(s); });
    eo.replay = debug::replay_from(run->history, &rec->series());
    eo.findings = &run->report;
    if (const std::optional<debug::Finding> lead = debug::lead_finding(run->report))
      say("the lead finding: " + debug::check_label(lead->check) + ": " + lead->title);
  }
  // The graph: one batch of the training data, the model as it is after the run.
  Tensor x, y;
  for (const nn::Batch& b : *v.train) {
    const int64_t n = std::min<int64_t>(batch, b.x.size(0));
    x = b.x.narrow(0, 0, n);
    y = b.y.narrow(0, 0, n);
    break;
  }
  GS_CHECK(x.defined(), "explore", "the training loader gave no batch (--train-examples too small?)");
  if (v.device != kCPU) {
    x = x.to(v.device);
    y = y.to(v.device);
  }
  auto loss = v.loss;
  std::string json;
  const std::string err = debug::explore(
      *v.model, x, y, [loss](const Tensor& out_, const Tensor& y_) { return (*loss)(out_, y_); }, out, eo, &json);
  rec.reset();
  if (!err.empty()) say("the recorded pass failed (drawn up to the failing op): " + err);
  if (a.has("json")) std::cout << json << "\n";
  std::fprintf(stderr, "explore: wrote %s\n", out.c_str());
  return 0;
}

}  // namespace gradsleuth::cli
