// A weight decay too strong (check O3's end-of-run probe) and training labels changed (L9's verdict
// leading the diagnosis), on the healthy corpus's programs as their users write them: each faulty twin
// must lead with its cause; each healthy twin (the same program, its decay usual) stays silent.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <gradsleuth.h>

#include "debug/corpus/corpus.h"
#include "debug/corpus/operators.h"

using namespace gradsleuth;
namespace dbg = gradsleuth::debug;
namespace corpus = gradsleuth::debug::corpus;

namespace {

dbg::RunReport run(const std::string& program, const char* op = nullptr, double strength = 0, uint64_t seed = 1) {
  const corpus::Program& p = corpus::program(program);
  const corpus::Program q = op ? corpus::fault_operator(op).mutate(p, strength, seed).program : p;
  corpus::Outcome o = corpus::run_program(q, seed);
  REQUIRE(o.error.empty());
  return o.report;
}

const dbg::Finding* lead(const dbg::RunReport& r) {
  const auto& a = r.findings.diagnosis();
  return a.lead ? &r.findings.findings()[a.lead->index] : nullptr;
}

bool fires(const dbg::RunReport& r, const char* check) {
  for (const dbg::Finding& f : r.findings.findings())
    if (f.check == check && f.fires()) return true;
  return false;
}

}  // namespace

TEST_CASE("coupled weight decay 0.1 under Adam leads with O3 (decay too strong); 0.01 stays silent") {
  const dbg::RunReport bad = run("binary", "RAW", 0.1);
  const dbg::Finding* l = lead(bad);
  REQUIRE(l != nullptr);
  CHECK(l->is("O3", dbg::Kind::WeightDecayTooStrong));
  CHECK(l->title.find("too strong") != std::string::npos);

  const dbg::RunReport ok = run("binary", "RAW", 0.01);
  CHECK_FALSE(fires(ok, "O3"));
  CHECK(lead(ok) == nullptr);
}

TEST_CASE("weights collapsed by the decay: O3 leads ahead of M26's constant layers, which it explains") {
  const dbg::RunReport bad = run("step-per-epoch", "RAW", 1.0);
  const auto& a = bad.findings.diagnosis();
  REQUIRE(a.lead);
  const auto& fs = bad.findings.findings();
  CHECK(fs[a.lead->index].is("O3", dbg::Kind::WeightDecayTooStrong));
  bool m26 = false;
  for (size_t i = 0; i < fs.size(); ++i)
    if (fs[i].is("M26", dbg::Kind::VarianceCollapsed) && fs[i].fires()) {
      m26 = true;
      CHECK(a.root[i] == static_cast<int64_t>(a.lead->index));
    }
  CHECK(m26);

  // The healthy twin: SGD with its usual L2 decay 5e-4.
  const dbg::RunReport ok = run("weight-decay-coupled");
  CHECK_FALSE(fires(ok, "O3"));
  CHECK(lead(ok) == nullptr);
}

TEST_CASE("half the training labels changed: L9's train-labels-disagree leads, not the learning rate it explains") {
  const dbg::RunReport bad = run("finetune-group-lrs", "TCL", 0.5);
  const dbg::Finding* l = lead(bad);
  REQUIRE(l != nullptr);
  CHECK(l->is("L9", dbg::Kind::TrainLabelsDisagree));
  const dbg::RunReport ok = run("finetune-group-lrs");
  CHECK(lead(ok) == nullptr);
}

TEST_CASE("O3's decay rule on measured numbers: the probe decides, the ratio only selects") {
  dbg::OptimCheckOptions o;
  dbg::DecayMeasure m;
  dbg::DecayGroup g;
  g.name = "0";
  g.weight_decay = 0.1;
  g.decay_norm = 0.8;
  g.step_norm = 1.0;
  g.weight_norm = 5;
  g.initial_weight_norm = 10;
  m.groups = {g};
  m.run_first_loss = 1.0;
  m.run_window_loss = 0.4;
  m.probe_steps = 200;
  m.val_examples = 400;
  m.kept_val_loss = 0.49;
  m.free_val_loss = 0.28;
  m.kept_val_accuracy = 0.82;
  m.free_val_accuracy = 0.91;
  CHECK(dbg::decay_worth_probing(m, o));
  auto fs = dbg::check_weight_decay(m, o);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].is("O3", dbg::Kind::WeightDecayTooStrong));
  CHECK(fs[0].severity == dbg::Severity::Warning);

  // The same accuracy with and without the decay (a lower loss alone is confidence, not accuracy): info.
  m.free_val_accuracy = 0.825;
  fs = dbg::check_weight_decay(m, o);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].severity == dbg::Severity::Info);

  // A decay that barely pulls is not probed, whatever the numbers say.
  m.free_val_accuracy = 0.91;
  m.groups[0].decay_norm = 0.01;
  CHECK_FALSE(dbg::decay_worth_probing(m, o));
  CHECK(dbg::check_weight_decay(m, o)[0].severity == dbg::Severity::Info);

  // Collapsed weights and a stalled loss: the run again without the decay learns.
  m.kept_val_loss = m.free_val_loss = std::nan("");
  m.groups[0].weight_norm = 0.1;
  m.run_window_loss = 0.95;
  CHECK(dbg::decay_collapsed(m, o));
  m.restart_steps = 300;
  m.restart_window_loss = 0.1;
  fs = dbg::check_weight_decay(m, o);
  CHECK(fs[0].is("O3", dbg::Kind::WeightDecayTooStrong));
  // ... and one that stalls as well is no proof.
  m.restart_window_loss = 0.9;
  CHECK(dbg::check_weight_decay(m, o)[0].severity == dbg::Severity::Info);
  // No decay: nothing to say.
  m.groups[0].weight_decay = 0;
  CHECK(dbg::check_weight_decay(m, o).empty());
}
