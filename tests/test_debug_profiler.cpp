// W7 profiler: module times and call counts, op and backward-node rows, phases
// that add up to the profiled time, optimizer steps, and clean detaching.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/workflow/profiler.h"
#include "json_mini.h"
#include "nn/nn.h"
#include "optim/sgd.h"

namespace nn = gs::nn;
namespace dbg = gs::debug;
using gs::Tensor;

namespace {

// Deliberately slow: kMatmuls (64, 256) @ (256, 256) products per call.
struct Slow : nn::Module {
  static constexpr int kMatmuls = 4;
  Tensor w;
  Slow() : Module("Slow") {
    gs::Generator g(1);
    w = register_parameter("w", gs::randn({256, 256}, gs::kFloat32, &g) * 0.05);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (int i = 0; i < kMatmuls; ++i) h = h.matmul(w);
    return h;
  }
};

// Cheap: one elementwise op on a (64, 4) slice.
struct Cheap : nn::Module {
  Cheap() : Module("Cheap") {}
  Tensor forward(const Tensor& x) override { return x.narrow(1, 0, 4) * 2.0; }
};

struct Net : nn::Module {
  std::shared_ptr<Slow> slow;
  std::shared_ptr<Cheap> cheap;
  Net() : Module("Net") {
    slow = register_module("slow", std::make_shared<Slow>());
    cheap = register_module("cheap", std::make_shared<Cheap>());
  }
  Tensor forward(const Tensor& x) override { return (*cheap)((*slow)(x)); }
};

const dbg::ProfileRow* row(const std::vector<dbg::ProfileRow>& rows, const std::string& name,
                           const std::string& phase) {
  for (const auto& r : rows)
    if (r.name == name && r.phase == phase) return &r;
  return nullptr;
}

Tensor batch() {
  gs::Generator g(2);
  return gs::randn({64, 256}, gs::kFloat32, &g);
}

}  // namespace

TEST_CASE("the profiler charges a slow module more than a cheap one and counts calls exactly") {
  auto net = std::make_shared<Net>();
  const Tensor x = batch();
  constexpr int kCalls = 5;
  // Wall time on a shared machine: a preemption can land inside the cheap
  // module once. The timing claims must hold in one of three fresh runs; the
  // counts must hold in every run.
  bool slow_costs_more = false;
  for (int attempt = 0; attempt < 3 && !slow_costs_more; ++attempt) {
    dbg::Profiler prof;
    prof.attach(*net);
    prof.start();
    for (int i = 0; i < kCalls; ++i) (*net)(x);
    prof.stop();
    const dbg::ProfileReport r = prof.report();

    const auto* slow = dbg::ProfileReport::find(r.modules, "slow (Slow)");
    const auto* cheap = dbg::ProfileReport::find(r.modules, "cheap (Cheap)");
    const auto* root = dbg::ProfileReport::find(r.modules, "(model) (Net)");
    REQUIRE(slow);
    REQUIRE(cheap);
    REQUIRE(root);
    CHECK(slow->calls == kCalls);
    CHECK(cheap->calls == kCalls);
    CHECK(root->calls == kCalls);
    CHECK(root->total_ms >= slow->total_ms + cheap->total_ms);  // inclusive: children nest in the parent
    CHECK(r.modules.front().name == "(model) (Net)");           // sorted, largest first

    // Ops: every matmul counted once, in the forward phase.
    const auto* mm = row(r.ops, "matmul", "forward");
    const auto* mul = row(r.ops, "mul", "forward");
    REQUIRE(mm);
    REQUIRE(mul);
    CHECK(mm->calls == kCalls * Slow::kMatmuls);
    CHECK(mul->calls == kCalls);
    CHECK(r.steps == 0);
    MESSAGE("attempt " << attempt << ": slow " << slow->total_ms << " ms, cheap " << cheap->total_ms << " ms");
    slow_costs_more = slow->total_ms > 5.0 * cheap->total_ms && mm->total_ms > mul->total_ms;
  }
  CHECK(slow_costs_more);
}

TEST_CASE("phases and op rows add up to the profiled time") {
  auto net = std::make_shared<Net>();
  const Tensor x = batch();
  dbg::Profiler prof;
  prof.attach(*net);
  prof.start();
  for (int i = 0; i < 3; ++i) (*net)(x).sum().backward();
  prof.stop();
  const dbg::ProfileReport r = prof.report();
  double phases = 0, ops = 0, pct = 0;
  for (const auto& p : r.phases) phases += p.total_ms, pct += p.percent;
  for (const auto& o : r.ops) ops += o.total_ms;
  CHECK(r.phases.size() == 4);
  CHECK(phases == doctest::Approx(r.wall_ms).epsilon(1e-6));
  CHECK(ops == doctest::Approx(r.wall_ms).epsilon(1e-6));
  CHECK(pct == doctest::Approx(100.0).epsilon(1e-6));
  CHECK(r.wall_ms > 0.0);
}

TEST_CASE("backward nodes are rows of their own; the ops they run are folded into them") {
  auto net = std::make_shared<Net>();
  const Tensor x = batch();
  dbg::Profiler prof;
  prof.attach(*net);
  prof.start();
  constexpr int kIters = 3;
  for (int i = 0; i < kIters; ++i) (*net)(x).sum().backward();
  prof.stop();
  const dbg::ProfileReport r = prof.report();
  // Each forward matmul has a backward node "matmul" whose own matmuls (dA = g B^T,
  // dB = A^T g) must not show up as forward or other ops.
  const auto* fwd = row(r.ops, "matmul", "forward");
  REQUIRE(fwd);
  CHECK(fwd->calls == kIters * Slow::kMatmuls);
  CHECK(row(r.ops, "matmul", "other") == nullptr);
  const auto* bwd = row(r.ops, "backward: matmul", "backward");
  REQUIRE(bwd);
  CHECK(bwd->calls == kIters * Slow::kMatmuls);
  const auto* backward = dbg::ProfileReport::find(r.phases, "backward");
  const auto* forward = dbg::ProfileReport::find(r.phases, "forward");
  REQUIRE(backward);
  REQUIRE(forward);
  CHECK(backward->total_ms > 0.0);
  CHECK(forward->total_ms > 0.0);
}

TEST_CASE("backward ops are folded even with create_graph; no-grad metric ops before backward stay apart") {
  auto net = std::make_shared<Net>();
  const Tensor x = batch();
  dbg::Profiler prof;
  prof.attach(*net);
  prof.start();
  Tensor out = (*net)(x);
  {
    gs::NoGradGuard ng;  // a metric: not part of the backward that follows
    out.abs().max();
  }
  out.sum().backward(Tensor(), /*retain_graph=*/false, /*create_graph=*/true);
  prof.stop();
  const dbg::ProfileReport r = prof.report();
  // With create_graph the backward formulas run with grad mode on; they are
  // still the backward's, not forward ops.
  REQUIRE(row(r.ops, "matmul", "forward"));
  CHECK(row(r.ops, "matmul", "forward")->calls == Slow::kMatmuls);
  REQUIRE(row(r.ops, "backward: matmul", "backward"));
  CHECK(row(r.ops, "backward: matmul", "backward")->calls == Slow::kMatmuls);
  REQUIRE(row(r.ops, "abs", "other"));
  CHECK(row(r.ops, "abs", "other")->calls == 1);
  for (const auto& o : r.ops) CHECK_FALSE((o.phase == "backward" && o.name.rfind("backward: ", 0) != 0));
  // create_graph leaves each parameter's .grad holding a graph that saved the
  // parameter itself (a reference cycle, as in PyTorch): clear it.
  for (Tensor& p : net->parameters()) p.zero_grad();
}

TEST_CASE("the optimizer step is timed through its hooks") {
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(32, 64), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(64, 10));
  gs::optim::SGD opt(model->parameters(), gs::optim::SGDOptions(0.01).momentum(0.9));
  opt.set_fused(false);  // tensor ops, so the step has op rows too
  gs::Generator g(3);
  const Tensor x = gs::randn({16, 32}, gs::kFloat32, &g);
  dbg::Profiler prof;
  prof.attach(*model);
  prof.attach(opt);
  prof.attach(opt);  // twice: still one set of hooks
  prof.start();
  constexpr int kSteps = 4;
  for (int i = 0; i < kSteps; ++i) {
    opt.zero_grad();
    (*model)(x).pow(2.0).mean().backward();
    opt.step();
  }
  prof.stop();
  const dbg::ProfileReport r = prof.report();
  CHECK(r.steps == kSteps);
  CHECK(r.ms_per_step() == doctest::Approx(r.wall_ms / kSteps));
  const auto* step = dbg::ProfileReport::find(r.phases, "optimizer step");
  REQUIRE(step);
  CHECK(step->calls == kSteps);
  CHECK(step->total_ms > 0.0);
  bool step_ops = false;
  for (const auto& o : r.ops) step_ops |= o.phase == "optimizer step" && o.name.find("SGD.step") == std::string::npos;
  CHECK(step_ops);  // the unfused update's ops are listed under the step
  const auto* lin = dbg::ProfileReport::find(r.modules, "0 (Linear)");
  REQUIRE(lin);
  CHECK(lin->calls == kSteps);

  const std::string s = r.str();
  CHECK(s.find("where the step time goes") == 0);
  CHECK(s.find("4 optimizer steps") != std::string::npos);
  CHECK(s.find("0 (Linear)") != std::string::npos);
  CHECK(s.find("backward: matmul") != std::string::npos);
  json_mini::Value v = json_mini::parse(r.json());
  CHECK(v.get("steps")->num == kSteps);
  CHECK(v.get("phases")->arr.size() == 4);
  CHECK(v.get("modules")->arr.size() == r.modules.size());
}

TEST_CASE("nothing is measured outside start/stop, and detach removes every hook") {
  auto net = std::make_shared<Net>();
  gs::optim::SGD opt(net->parameters(), gs::optim::SGDOptions(0.01));
  const Tensor x = batch();
  {
    dbg::Profiler prof;
    prof.attach(*net);
    prof.attach(opt);
    (*net)(x);  // not started: not counted
    prof.start();
    (*net)(x);
    prof.stop();
    (*net)(x);  // stopped: not counted
    const auto r = prof.report();
    REQUIRE(dbg::ProfileReport::find(r.modules, "slow (Slow)"));
    CHECK(dbg::ProfileReport::find(r.modules, "slow (Slow)")->calls == 1);
    prof.reset();
    CHECK(prof.report().modules.empty());
    CHECK(prof.report().wall_ms == 0.0);
    // detach, then attach again: timed again, each module once.
    prof.detach();
    prof.attach(*net);
    prof.attach(*net);
    prof.start();
    (*net)(x);
    prof.stop();
    CHECK(dbg::ProfileReport::find(prof.report().modules, "slow (Slow)")->calls == 1);
  }
  // The profiler is gone: had it left a hook behind, these calls would run a
  // hook whose `this` is dangling (a crash, or an ASan error in sanitizer builds).
  for (int i = 0; i < 3; ++i) (*net)(x).sum().backward();
  opt.step();
  CHECK(gs::observers_active() == false);
}

TEST_CASE("a module that throws does not corrupt the timing of later calls") {
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 4), std::make_shared<nn::ReLU>());
  dbg::Profiler prof;
  prof.attach(*model);
  prof.start();
  CHECK_THROWS_AS((*model)(gs::zeros({2, 5})), gs::Error);  // wrong in_features: Linear throws
  (*model)(gs::zeros({2, 8}));
  (*model)(gs::zeros({2, 8}));
  prof.stop();
  const auto r = prof.report();
  REQUIRE(dbg::ProfileReport::find(r.modules, "(model) (Sequential)"));
  CHECK(dbg::ProfileReport::find(r.modules, "(model) (Sequential)")->calls == 2);
  CHECK(dbg::ProfileReport::find(r.modules, "1 (ReLU)")->calls == 2);
}

TEST_CASE("a module registered under two paths is timed once per call, under its first path") {
  auto lin = std::make_shared<nn::Linear>(8, 8);
  auto model = std::make_shared<nn::Sequential>(lin, std::make_shared<nn::ReLU>(), lin);
  dbg::Profiler prof;
  prof.attach(*model);
  prof.start();
  for (int i = 0; i < 3; ++i) (*model)(gs::zeros({2, 8}));
  prof.stop();
  const auto r = prof.report();
  REQUIRE(dbg::ProfileReport::find(r.modules, "0 (Linear)"));
  CHECK(dbg::ProfileReport::find(r.modules, "0 (Linear)")->calls == 6);
  CHECK(dbg::ProfileReport::find(r.modules, "2 (Linear)") == nullptr);
}
