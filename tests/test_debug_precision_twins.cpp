// Reduced precision op by op (checks M29 and M30) written as a user writes it: each buggy twin must
// name the op where float16 failed, each clean twin must stay silent.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"
#include "json_mini.h"
#include "temp_dir.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::expect_lead;
using dtest::Mlp;
using dtest::Split;

namespace {

const debug::Finding* first_m29(const std::vector<debug::Finding>& fs, debug::Kind k) {
  for (const debug::Finding& f : fs)
    if (f.is("M29", k)) return &f;
  return nullptr;
}

// A Linear(6, 8) whose weights are all `w` and bias `b`, fed rows of `x` (one forward and a
// backward of the mean square) under autocast to `dt`, with a RangeTrace on.
std::vector<debug::Finding> trace_linear(DType dt, float x, float w, float b) {
  auto lin = std::make_shared<nn::Linear>(6, 8);
  {
    NoGradGuard ng;
    lin->weight.fill_(w);
    lin->bias.fill_(b);
  }
  debug::RangeTrace trace;
  trace.attach(*lin);
  {
    auto on = trace.enable();
    Tensor l;
    {
      auto ac = autocast(dt);
      Tensor y = (*lin)(full({4, 6}, x));
      l = (y.to(kFloat32) * y.to(kFloat32)).mean();
    }
    l.backward();
  }
  trace.detach();
  return trace.findings();
}

// M28's float16 twin (diagnosis_test_util.h): a loss weighted by 1e-6 under float16 autocast,
// without (bug) or with a GradScaler (clean).
debug::RunReport run_fp16(bool bug, const std::string& report_dir = "") {
  return dtest::run_fp16_weighted(bug, report_dir);
}

// Subtracts each row's mean: the centring step of a hand-written normalisation.
struct Centred : nn::Module {
  std::shared_ptr<nn::Linear> fc = register_module("fc", std::make_shared<nn::Linear>(6, 8));
  Centred() : Module("Centred") {}
  Tensor forward(const Tensor& x) override {
    Tensor y = (*fc)(x);
    return y - y.mean({1}, true);
  }
};

// The linear layer's output is `offset` plus a spread of about 0.01 (weights 0.001 on inputs of
// about 2): in float16, whose spacing is 1 at 2000, the difference from the mean is rounding noise.
debug::PrecisionComparison compare_centred(float offset) {
  manual_seed(5);
  auto m = std::make_shared<Centred>();
  {
    NoGradGuard ng;
    m->fc->weight.copy_(randn({8, 6}) * 0.001);
    m->fc->bias.fill_(offset);
  }
  const Tensor x = randn({16, 6}) * 2.0;
  auto loss = [](const Tensor& out) { return (out.to(kFloat32) * out.to(kFloat32)).mean(); };
  return debug::compare_precision(*m, x, loss, {kFloat16, true});
}

}  // namespace

TEST_CASE("M29: a float16 linear whose result exceeds 65504 is the first op out of range; bfloat16 holds it") {
  // 6 inputs of 10000 times weights of 2: 120000 per output, above float16's 65504.
  const std::vector<debug::Finding> bug = trace_linear(kFloat16, 10000.f, 2.f, 0.f);
  const debug::Finding* f = first_m29(bug, debug::Kind::ForwardOverflow);
  REQUIRE_MESSAGE(f != nullptr, bug.size());
  MESSAGE(f->title);
  CHECK(f->fires());
  CHECK(f->op == "matmul");  // inside the Linear: the product, before the bias is added
  CHECK(f->module.find("Linear") != std::string::npos);
  CHECK(f->cause.find("float16[4, 6]") != std::string::npos);  // the input's range is quoted
  // Its position among the forward's ops: after autocast's casts of the input and the weight.
  double pos = 0;
  for (const debug::Evidence& e : f->evidence)
    if (e.name.find("position of the op") != std::string::npos) pos = e.value;
  CHECK(pos > 2);
  // The clean twin: the same computation in bfloat16 (float32's range) leaves nothing out of range.
  for (const debug::Finding& g : trace_linear(kBFloat16, 10000.f, 2.f, 0.f)) CHECK_MESSAGE(!g.fires(), g.str());
  // And in float16 with values in range.
  CHECK(trace_linear(kFloat16, 1.f, 0.5f, 0.f).empty());
}

TEST_CASE("M29: float32 values too small for float16 flush at the cast; the first op to leave the range is it") {
  // Inputs of 1e-9: zero in float16 (below 2^-24), so the cast of the input flushes every value.
  const std::vector<debug::Finding> fs = trace_linear(kFloat16, 1e-9f, 0.5f, 0.f);
  const debug::Finding* f = first_m29(fs, debug::Kind::ForwardUnderflow);
  REQUIRE(f != nullptr);
  MESSAGE(f->title);
  CHECK(f->op == "to_dtype");
  // bfloat16 holds 1e-9.
  for (const debug::Finding& g : trace_linear(kBFloat16, 1e-9f, 0.5f, 0.f)) CHECK_FALSE(g.fires());
}

TEST_CASE("M29 in a run: float16 without loss scaling flushes the loss's gradient at its cast to float16") {
  const debug::RunReport r = run_fp16(true);
  const debug::Finding* f = dtest::first_of(r, "M29", debug::Kind::BackwardUnderflow);
  REQUIRE_MESSAGE(f != nullptr, r.str(true));
  MESSAGE(f->title);
  CHECK(f->fires());
  CHECK(f->step >= 1);
  CHECK(f->op == "to_dtype");
  CHECK(r.findings.ran("M29"));
  // M28 leads (fp16-underflow), M29's finding confirms the same cause and hangs under it.
  expect_lead(r, "M28", "fp16-underflow");
}

TEST_CASE("M29 and M30 in a run with a GradScaler: scaled gradients stay in range, silent") {
  TempDir dir("precision_twins");
  const debug::RunReport r = run_fp16(false, dir.path.string());
  // The report has the range watch's pictures: the exponent histogram with float16's band, the heat map.
  std::ifstream in(dir.path / "report.html");
  std::stringstream page;
  page << in.rdbuf();
  CHECK(page.str().find("class=\"xband\"") != std::string::npos);
  CHECK(page.str().find("out of range, per sampled step") != std::string::npos);
  CHECK(page.str().find(">fc1 (Linear)</text>") != std::string::npos);
  expect_clean(r);
  CHECK(r.findings.ran("M29"));
  CHECK(r.findings.ran("M30"));
  bool m30 = false;
  for (const debug::Finding& f : r.findings.findings())
    if (f.check == "M30") {
      m30 = true;
      MESSAGE(f.title);
      CHECK_FALSE(f.fires());
    }
  CHECK(m30);
}

TEST_CASE("M29 and M30 do not run when nothing is 16-bit") {
  const debug::RunReport r = dtest::run_float32_mlp();
  CHECK_FALSE(r.findings.ran("M29"));
  CHECK_FALSE(r.findings.ran("M30"));
  for (const debug::Finding& f : r.findings.findings()) CHECK((f.check != "M29" && f.check != "M30"));
}

TEST_CASE("M30: a subtraction of nearly equal float16 values differs most from float32; centred values do not") {
  const debug::PrecisionComparison bug = compare_centred(2000.f);
  MESSAGE(bug.str());
  CHECK(bug.matched);
  const debug::OpComparison* w = bug.worst();
  REQUIRE(w != nullptr);
  CHECK(w->site.op == "sub");
  CHECK_FALSE(w->backward);
  CHECK(w->rel_error > 0.5);
  const std::vector<debug::Finding> fs = debug::precision_findings(bug);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].check == "M30");
  CHECK(fs[0].fires());
  CHECK(fs[0].op == "sub");
  // Both directions were compared: the forward's ops and the backward's gradients.
  bool fwd = false, bwd = false;
  for (const debug::OpComparison& c : bug.ops) (c.backward ? bwd : fwd) = true;
  CHECK(fwd);
  CHECK(bwd);

  const debug::PrecisionComparison clean = compare_centred(0.f);
  MESSAGE(clean.str());
  REQUIRE(clean.worst() != nullptr);
  CHECK(clean.worst()->rel_error < 0.01);
  const std::vector<debug::Finding> cf = debug::precision_findings(clean);
  REQUIRE(cf.size() == 1);
  CHECK_FALSE(cf[0].fires());
}

TEST_CASE("M30 with 16-bit parameters: the model, its gradients and its dtype are left as they were") {
  manual_seed(6);
  auto m = std::make_shared<Mlp>();
  m->to(kBFloat16);
  const Tensor x = randn({8, 6});
  const Tensor y = randint(0, 3, {8});
  nn::CrossEntropyLoss ce;
  std::vector<Tensor> before;
  for (const Tensor& p : m->parameters()) before.push_back(p.detach().clone());
  const debug::PrecisionComparison c =
      debug::compare_precision(*m, x, [&](const Tensor& out) { return ce(out, y); }, {kBFloat16, false});
  MESSAGE(c.str());
  CHECK(c.matched);
  CHECK_FALSE(c.ops.empty());
  REQUIRE(c.worst() != nullptr);
  CHECK(c.worst()->rel_error < 0.5);  // bfloat16 rounding, no lost op
  const std::vector<Tensor> after = m->parameters();
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    CHECK(after[i].dtype() == kBFloat16);
    CHECK(equal(after[i], before[i]));
    CHECK_FALSE(after[i].grad().defined());
  }
  // A 16-bit setting is required.
  CHECK_THROWS_WITH_AS(debug::compare_precision(*m, x, nullptr, {kFloat32, true}),
                       doctest::Contains("compare_precision"), Error);
}

TEST_CASE("M29 holding overflows (as the monitor does): one counts only when confirmed") {
  auto lin = std::make_shared<nn::Linear>(6, 8);
  {
    NoGradGuard ng;
    lin->weight.fill_(2.f);
    lin->bias.fill_(0.f);
  }
  debug::RangeTraceOptions o;
  o.hold_overflow = true;
  debug::RangeTrace trace(o);
  trace.attach(*lin);
  auto run = [&] {
    auto on = trace.enable();
    auto ac = autocast(kFloat16);
    (void)(*lin)(full({4, 6}, 10000.0));
  };
  run();
  CHECK(trace.holding());
  CHECK(trace.findings().empty());
  trace.confirm_step(false, false);  // it did not reach the loss or the gradients
  CHECK_FALSE(trace.holding());
  CHECK(trace.findings().empty());
  run();
  trace.confirm_step(true, false);
  REQUIRE(trace.findings().size() == 1);
  CHECK(trace.findings()[0].is("M29", debug::Kind::ForwardOverflow));
  trace.detach();
}
