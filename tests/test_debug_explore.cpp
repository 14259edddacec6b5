// The autograd explorer (debug/report/explore.h): its JSON (node names, the engine's backward
// order and contributions, the failure, the replay), and its page in headless Chromium, driven
// through the page's test hook (#test=...): expand a module, step the backward to a node used
// twice and read the gradient it shows (it must equal the engine's), move the replay slider and
// read a gradient norm (it must equal the recorded one), and find the failing op of a forward
// that failed. Chromium is required (scripts/setup.sh installs it).
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/json.h"
#include "debug/report/explore.h"
#include "debug/run/diagnose.h"
#include "debug/run/monitor.h"
#include "debug_test_util.h"
#include "json_mini.h"
#include "optim/optim.h"

using namespace dtest;

namespace {

std::string tmp_dir() {
  static std::string d = [] {
    char t[] = "/tmp/gs_explore_test_XXXXXX";
    REQUIRE(::mkdtemp(t) != nullptr);
    return std::string(t);
  }();
  return d;
}

std::string browser() {
  for (const char* b : {"chromium", "chromium-browser", "google-chrome"}) {
    const std::string cmd = std::string("command -v ") + b + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return b;
  }
  return "";
}

std::string read_file(const std::string& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string unescape(std::string s) {
  const std::pair<const char*, const char*> ents[] = {
      {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#39;", "'"}, {"&amp;", "&"}};
  for (const auto& [e, c] : ents)
    for (size_t p = s.find(e); p != std::string::npos; p = s.find(e, p + 1)) s.replace(p, std::string(e).size(), c);
  return s;
}

// Opens `page` with `#test=commands` in headless Chromium and returns the test hook's lines.
std::vector<std::string> drive(const std::string& page, const std::string& commands) {
  const std::string b = browser();
  REQUIRE_MESSAGE(!b.empty(),
                  "no Chromium on this machine: install it with scripts/setup.sh (apt-get install chromium)");
  const std::string dom = page + ".dom.html", log = page + ".console.log";
  std::string flags = "--headless --disable-gpu --disable-dev-shm-usage --no-first-run --user-data-dir=" + tmp_dir() +
                      "/profile --virtual-time-budget=5000 --window-size=1280,800";
  if (::geteuid() == 0) flags += " --no-sandbox";
  const std::string url = "file://" + page + "#test=" + commands;
  const std::string cmd = "timeout 120 " + b + " " + flags + " --dump-dom '" + url + "' >'" + dom + "' 2>'" + log + "'";
  const int rc = std::system(cmd.c_str());
  INFO("console: " << read_file(log).substr(0, 3000));
  REQUIRE(rc == 0);
  const std::string d = read_file(dom);
  const size_t a = d.find("<pre id=\"gs-test\"");
  REQUIRE(a != std::string::npos);
  const size_t s = d.find('>', a) + 1, e = d.find("</pre>", s);
  REQUIRE(d.find("data-done=\"1\"", a) < s);
  std::vector<std::string> lines;
  std::istringstream is(unescape(d.substr(s, e - s)));
  for (std::string l; std::getline(is, l);) lines.push_back(l);
  // No script error in the page.
  const std::string console = read_file(log);
  CHECK_MESSAGE(console.find("Uncaught") == std::string::npos, console.substr(0, 2000));
  return lines;
}

// The numbers after `key` in a line: "sum 2 2 2 grad ..." -> {2, 2, 2}.
std::vector<double> numbers_after(const std::string& line, const std::string& key) {
  std::vector<double> v;
  size_t p = line.find(" " + key + " ");
  if (p == std::string::npos) return v;
  std::istringstream is(line.substr(p + key.size() + 2));
  for (std::string w; is >> w;) {
    char* end = nullptr;
    const double x = std::strtod(w.c_str(), &end);
    if (end == w.c_str() || *end != '\0') break;
    v.push_back(x);
  }
  return v;
}

void check_close(const std::vector<double>& shown, const std::vector<double>& engine) {
  REQUIRE(shown.size() == engine.size());
  for (size_t i = 0; i < shown.size(); ++i) CHECK(shown[i] == doctest::Approx(engine[i]).epsilon(1e-8));
}

std::string line_with(const std::vector<std::string>& lines, const std::string& start) {
  for (const auto& l : lines)
    if (l.rfind(start, 0) == 0) return l;
  return "";
}

}  // namespace

TEST_CASE("the JSON names each node, and keeps the engine's backward order and contributions") {
  Tensor a = gs::tensor({1.0, -2.0, 3.0}, gs::TensorOptions().dtype(gs::kFloat64).requires_grad(true));
  a.set_name("a");
  dbg::ExploreCapture cap;
  Tensor b = a + a;  // a is used twice: its gradient is 1 + 1
  Tensor loss = (b * b).sum();
  loss.backward();
  cap.stop();
  const std::string json = dbg::explore_json(cap, loss, {});
  const auto j = json_mini::parse(json);
  std::vector<std::string> ids;
  for (const auto& n : j["nodes"].arr) ids.push_back(n["id"].str);
  CHECK(std::find(ids.begin(), ids.end(), "add#1") != ids.end());
  CHECK(std::find(ids.begin(), ids.end(), "mul#1") != ids.end());
  CHECK(std::find(ids.begin(), ids.end(), "sum#1") != ids.end());
  CHECK(std::find(ids.begin(), ids.end(), "a") != ids.end());
  std::vector<std::string> fwd;
  for (const auto& f : j["forward"].arr) fwd.push_back(f.str);
  CHECK(fwd == std::vector<std::string>{"add#1", "mul#1", "sum#1"});
  const auto& bw = j["backward"].arr;
  REQUIRE(bw.size() == 4);
  CHECK(bw[0]["node"].str == "sum#1");
  CHECK(bw[0]["incoming"].arr[0]["from"].str == "seed");
  CHECK(bw[3]["node"].str == "a");
  REQUIRE(bw[3]["incoming"].arr.size() == 2);
  CHECK(bw[3]["incoming"].arr[0]["from"].str == "add#1");
  const auto grad = a.grad().to_vector<double>();  // 2 * (2a) * 2 = 8a
  const auto& shown = bw[3]["leaf_grad"]["values"].arr;
  REQUIRE(shown.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(shown[i].num == doctest::Approx(grad[i]));
  // explore_node_names gives the same names to the grader.
  bool found = false;
  for (const auto& [node, name] : dbg::explore_node_names(cap, loss))
    if (node == loss.grad_fn().get()) found = name == "sum#1";
  CHECK(found);
}

TEST_CASE("a failed forward is drawn up to the failing op, with the engine's message") {
  gs::manual_seed(3);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::Tanh>(),
                                                std::make_shared<nn::Linear>(5, 2));  // 3 -> 5: a shape error
  std::string json;
  const std::string err = dbg::explore(
      *model, gs::randn({6, 4}), gs::zeros({6}, gs::TensorOptions().dtype(gs::kInt64)),
      [](const Tensor& o, const Tensor& y) { return nn::functional::cross_entropy(o, y); }, tmp_dir() + "/failed.html",
      {}, &json);
  CHECK_FALSE(err.empty());
  const auto j = json_mini::parse(json);
  REQUIRE(j["failure"].kind == json_mini::Value::Object);
  CHECK(j["failure"]["module"].str == "2 (Linear)");
  CHECK(j["failure"]["phase"].str == "forward");
  CHECK(j["failure"]["message"].str.find("[6, 3]") != std::string::npos);
  CHECK(j["forward"].arr.size() >= 2);  // the first Linear and the tanh ran
}

TEST_CASE("a backward that fails (an in-place change of a saved tensor) is marked on the node that raised") {
  Tensor a = gs::tensor({0.5, 1.0}, gs::TensorOptions().dtype(gs::kFloat64).requires_grad(true));
  dbg::ExploreCapture cap;
  Tensor e = gs::exp(a * 3.0);  // exp saves its output
  Tensor loss = e.sum();
  e.add_(1.0);  // ... which this changes before the backward
  bool threw = false;
  try {
    loss.backward();
  } catch (const std::exception& ex) {
    cap.failed(ex, "backward");
    threw = true;
  }
  CHECK(threw);
  cap.stop();
  const std::string json = dbg::explore_json(cap, loss, {});
  const auto j = json_mini::parse(json);
  CHECK(j["failure"]["phase"].str == "backward");
  CHECK(j["failure"]["node"].str == "exp#1");
  CHECK(j["failure"]["message"].str.find("in-place") != std::string::npos);
  const std::string page = tmp_dir() + "/inplace.html";
  dbg::write_explore(page, json, "in-place");
  const auto lines = drive(page, "failure;layout");
  const std::string f = line_with(lines, "failure");
  INFO(f);
  CHECK(f.find("failure exp#1 marked") != std::string::npos);
  CHECK(line_with(lines, "layout").find("overlaps 0") != std::string::npos);
}

TEST_CASE("explore in Chromium: expand, step backward to a node used twice, replay, a failed forward") {
  // 1. Raw ops, as in the autograd lab: h is used three times, a twice.
  const gs::TensorOptions f64 = gs::TensorOptions().dtype(gs::kFloat64);
  Tensor a = gs::tensor({0.5, -1.0, 2.0}, f64.requires_grad(true));
  Tensor w = gs::tensor({1.5, 0.25, -0.5}, f64.requires_grad(true));
  a.set_name("a");
  w.set_name("w");
  dbg::ExploreCapture cap;
  Tensor h = gs::tanh(a * w);
  h.retain_grad();
  Tensor loss = (h * h + h * a).sum();
  loss.backward();
  cap.stop();
  const std::string raw_page = tmp_dir() + "/raw.html";
  dbg::write_explore(raw_page, dbg::explore_json(cap, loss, {}), "raw ops");
  {
    const auto lines = drive(raw_page, "backward:mul#3;layout;backward:tanh#1;backward:a;layout");
    INFO(lines.size() << " lines");
    const std::string th = line_with(lines, "backward tanh#1");
    INFO(th);
    CHECK(th.find("contributions 3") != std::string::npos);
    check_close(numbers_after(th, "sum"), h.grad().to_vector<double>());
    const std::string la = line_with(lines, "backward a ");
    INFO(la);
    CHECK(la.find("contributions 2") != std::string::npos);
    check_close(numbers_after(la, "grad"), a.grad().to_vector<double>());
    CHECK(la.find("current a") != std::string::npos);
    for (const auto& l : lines)  // mid-backward (badges on nodes waiting for contributions) and at the end
      if (l.rfind("layout", 0) == 0) CHECK_MESSAGE(l.find("overlaps 0") != std::string::npos, l);
  }

  // 2. A model with modules (collapsed at first; two residual blocks fold), and a replay.
  Tensor x, y;
  {
    XY d = blobs(32, 3, 8, 7, 1.5);
    x = d.x;
    y = d.y;
  }
  auto model = mlp(8, 16, 3, 1);
  auto opt = std::make_unique<gs::optim::Adam>(model->parameters(), gs::optim::AdamOptions(3e-3));
  nn::CrossEntropyLoss ce;
  dbg::MonitorOptions mo;
  mo.every = 10;
  dbg::Monitor mon(*model, *opt, &ce, mo);
  dbg::ReplayRecorder rec(*model, *opt, mo.every);
  for (int s = 0; s < 30; ++s) {
    opt->zero_grad();
    Tensor l = ce((*model)(x), y);
    l.backward();
    opt->step();
    mon.record_step(l.item<double>());
  }
  mon.finish();
  const dbg::TrainingHistory hist = mon.history();
  // The explored pass: the engine's own gradient of 1.weight, kept from this very backward.
  model->zero_grad();
  Tensor engine_grad;
  std::string json;
  {
    dbg::ExploreCapture mcap(*model);
    Tensor l = ce((*model)(x), y);
    l.backward();
    mcap.stop();
    engine_grad = model->named_parameters()[0].second.grad().clone();
    REQUIRE(model->named_parameters()[0].first == "1.weight");
    dbg::ExploreOptions eo;
    eo.replay = dbg::replay_from(hist, &rec.series());
    eo.findings = &mon.report();
    eo.max_values = 1000;
    json = dbg::explore_json(mcap, l, eo);
  }
  const std::string model_page = tmp_dir() + "/model.html";
  dbg::write_explore(model_page, json, "model");
  // The recorded gradient norm of 1.weight at step 10.
  double recorded = NAN;
  for (const auto& [name, s] : hist.grad_norms)
    if (name == "1.weight")
      for (const auto& [step, v] : s)
        if (step == 10) recorded = v;
  REQUIRE(std::isfinite(recorded));
  {
    const auto lines = drive(model_page, "layout;expand:4;layout;backward:1.weight;replay:10:1.weight");
    for (const auto& l : lines) MESSAGE(l.substr(0, 160));
    const std::string ex = line_with(lines, "expanded 4");
    CHECK(ex.find("cluster yes") != std::string::npos);
    CHECK(numbers_after(ex, "inside").at(0) > 0);
    for (const auto& l : lines)
      if (l.rfind("layout", 0) == 0) CHECK(l.find("overlaps 0") != std::string::npos);
    const std::string bw = line_with(lines, "backward 1.weight");
    check_close(numbers_after(bw, "grad"), engine_grad.to(gs::kFloat64).to_vector<double>());
    const std::string rp = line_with(lines, "replay step 10 1.weight");
    REQUIRE_FALSE(rp.empty());
    CHECK(numbers_after(rp, "grad_norm").at(0) == doctest::Approx(recorded).epsilon(1e-9));
  }
  // A node used twice in the model: the residual block's input (the skip and the branch).
  {
    const auto j = json_mini::parse(json);
    std::string shared;
    std::vector<double> sum;
    for (const auto& s : j["backward"].arr)
      if (s["incoming"].arr.size() == 2 && shared.empty() && s["grad"].kind == json_mini::Value::Object &&
          s["grad"]["values"].kind == json_mini::Value::Array) {
        shared = s["node"].str;
        for (const auto& v : s["grad"]["values"].arr) sum.push_back(v.num);
      }
    REQUIRE_FALSE(shared.empty());
    const auto lines = drive(model_page, "backward:" + shared);
    const std::string l = line_with(lines, "backward " + shared);
    INFO(l);
    CHECK(l.find("contributions 2") != std::string::npos);
    check_close(numbers_after(l, "sum"), sum);
  }

  // 3. A forward that fails: the page draws what ran and marks the failing op.
  gs::manual_seed(3);
  auto bad = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::Tanh>(),
                                              std::make_shared<nn::Linear>(5, 2));
  const std::string failed_page = tmp_dir() + "/failed_model.html";
  dbg::explore(
      *bad, gs::randn({6, 4}), gs::zeros({6}, gs::TensorOptions().dtype(gs::kInt64)),
      [](const Tensor& o, const Tensor& t) { return nn::functional::cross_entropy(o, t); }, failed_page);
  {
    const auto lines = drive(failed_page, "failure;layout");
    const std::string f = line_with(lines, "failure");
    INFO(f);
    CHECK(f.find(" marked") != std::string::npos);
    CHECK(f.find("banner shown") != std::string::npos);
    CHECK(f.find("[6, 3]") != std::string::npos);
    CHECK(line_with(lines, "layout").find("overlaps 0") != std::string::npos);
  }
}

TEST_CASE("diagnose() writes the explorer's page when asked: the gate's batch, the run's replay and findings") {
  gs::manual_seed(2);
  const XY tr = blobs(64, 3, 8, 7, 1.5);
  nn::DataLoader train(std::make_shared<nn::TensorDataset>(tr.x, tr.y), nn::DataLoaderOptions().batch_size(32));
  auto model = mlp(8, 16, 3, 1);
  nn::CrossEntropyLoss ce;
  gs::optim::Adam opt(model->parameters(), gs::optim::AdamOptions(3e-3));
  dbg::DiagnoseOptions o;
  o.num_classes = 3;
  o.epochs = 3;
  o.baseline = false;
  o.lr_probe_steps = 0;
  o.dead_pass = false;
  o.gate_options.overfit = false;
  o.gate_options.gradcheck = false;
  o.explore_path = tmp_dir() + "/diagnose.html";
  const dbg::RunReport r = dbg::diagnose(*model, ce, opt, train, nullptr, nullptr, o);
  CHECK(r.explore_path == o.explore_path);
  CHECK(r.json().find("\"explore\":\"" + o.explore_path + "\"") != std::string::npos);
  const std::string page = read_file(o.explore_path);
  REQUIRE_FALSE(page.empty());
  const size_t a = page.find("<script id=\"gs-data\" type=\"application/json\">");
  REQUIRE(a != std::string::npos);
  const size_t s = page.find('>', a) + 1, e = page.find("</script>", s);
  const auto j = json_mini::parse(page.substr(s, e - s));
  CHECK(j["replay"]["loss"].arr.size() == static_cast<size_t>(r.steps));
  CHECK(j["replay"]["weight_norm"]["1.weight"].arr.size() >= 2);  // the sampled steps 1, 10, ...
  CHECK(j["replay"]["grad_norm"]["1.weight"].arr.size() >= 2);
  CHECK(j["backward"].arr.size() > 10);
  CHECK(j["modules"].arr.size() > 5);
  // The model's gradients are as diagnose left them: explore() restores them.
  CHECK(j["failure"].kind == json_mini::Value::Null);
}

namespace {
std::string read_dagre_error(const std::string& path) {
  try {
    dbg::read_dagre(path);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("the page's dagre: embedded, or read from Debian's node-dagre-layout, or an error naming the package") {
  // scripts/setup.sh installs the package: a page has dagre whether this build embedded it (configured
  // with the package) or reads it (configured by ./run.sh's set-up, before ./test.sh installed it).
  const std::string dagre = dbg::dagre_source();
  CHECK(dagre.find("dagre") != std::string::npos);
  CHECK(dagre.size() > 10000);
  CHECK(dbg::read_dagre(dbg::kDagreSystemPath) == dagre);  // the embedded bundle is the package's file
  const std::string missing = tmp_dir() + "/no_such_dir/dagre.min.js";
  const std::string e = read_dagre_error(missing);
  CHECK(e.find(missing) != std::string::npos);
  CHECK(e.find("node-dagre-layout") != std::string::npos);
  CHECK(e.find("apt-get install") != std::string::npos);
  const std::string empty = tmp_dir() + "/empty.js";
  std::ofstream(empty).close();
  CHECK(read_dagre_error(empty).find("cannot be read") != std::string::npos);
}
