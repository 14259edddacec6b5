// The fault operators and the scorecard's statistics (debug/corpus/operators.h, scorecard.h): each
// operator writes its fault into a copy of the program and nothing else, refuses a program it does not
// apply to, and the Welch test matches values computed by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "debug/corpus/corpus.h"
#include "debug/corpus/operators.h"
#include "debug/corpus/scorecard.h"

using namespace gradsleuth;
using namespace gradsleuth::debug::corpus;

TEST_CASE("the operators: DeepCrime's 24 and the program-text families, unique ids, each with causes or a blind spot") {
  const auto& ops = fault_operators();
  CHECK(ops.size() >= 24);
  std::set<std::string> ids, families;
  for (const Operator& op : ops) {
    CAPTURE(op.id);
    CHECK(ids.insert(op.id).second);
    families.insert(op.family);
    CHECK_FALSE(op.strengths.empty());
    CHECK((!op.causes.empty() || !op.blind_spot.empty()));
    CHECK(static_cast<bool>(op.applies));
    CHECK(static_cast<bool>(op.apply));
  }
  for (const char* id : {"TCL", "TRD", "TUD", "TAN", "TCO", "HBS", "HLR", "HNE", "HDB", "ACH", "ARM", "AAL", "RAW",
                         "RCW", "RRW", "RCD", "RCP", "WCI", "WAB", "WRB", "LCH", "OCH", "OCG", "VRM"})
    CHECK_MESSAGE(ids.count(id), "DeepCrime's " << id << " is missing");
  for (const char* f : {"splits", "preprocessing", "mode", "parameters", "schedules", "reductions"})
    CHECK_MESSAGE(families.count(f), "the family " << f << " is missing");
  CHECK(fault_operator("tcl").id == "TCL");
  CHECK_THROWS_WITH_AS(fault_operator("XYZ"), doctest::Contains("TCL"), Error);
}

TEST_CASE("each operator changes what it names and keeps the healthy program otherwise") {
  const Program& base = program("step-per-epoch");
  const Mutant tcl = fault_operator("TCL").mutate(base, 0.3, 1);
  CHECK(tcl.program.data.fault_label_change == doctest::Approx(0.3));
  CHECK(tcl.program.name == "step-per-epoch+TCL");
  CHECK(tcl.program.optim.lr == base.optim.lr);
  CHECK(tcl.program.data.fault_remove == 0.0);
  CHECK(tcl.description.find("30%") != std::string::npos);

  const Mutant hlr = fault_operator("HLR").mutate(base, 0.1, 1);
  CHECK(hlr.program.optim.lr == doctest::Approx(base.optim.lr * 0.1));
  CHECK(hlr.program.data.fault_label_change == 0.0);

  const Mutant hbs = fault_operator("HBS").mutate(base, 4, 1);
  CHECK(hbs.program.loop.batch_size == base.loop.batch_size * 4);

  const Mutant ssr = fault_operator("SSR").mutate(base, 1, 1);  // StepLR per epoch, stepped per batch
  CHECK(ssr.program.schedule.fault_stepped == "batch");

  // A layer operator's seed picks the hidden layer.
  const Mutant a0 = fault_operator("ARM").mutate(base, 1, 0), a1 = fault_operator("ARM").mutate(base, 1, 1);
  CHECK(a0.program.model.fault_layer == 0);
  CHECK(a1.program.model.fault_layer == 1);
  CHECK(a1.program.model.fault_activation == "identity");
}

TEST_CASE(
    "the prior operators apply to a program whose loop adds a prior: RPN multiplies it by N, RPS flips its sign") {
  const Program& map = program("map-prior");
  REQUIRE(map.loss.prior > 0);
  const Mutant rpn = fault_operator("RPN").mutate(map, 1, 1);
  CHECK(rpn.program.loss.fault_prior_factor == doctest::Approx(static_cast<double>(map.data.train)));
  const Mutant rps = fault_operator("RPS").mutate(map, 10, 1);
  CHECK(rps.program.loss.fault_prior_factor == doctest::Approx(-10.0));
  CHECK(rps.program.loss.prior == map.loss.prior);
  CHECK_THROWS_AS(fault_operator("RPN").mutate(program("binary"), 1, 1), Error);
}

TEST_CASE("LCH on a class-weighted loss drops the weights too, and says which check names that second fault") {
  // MSE takes no class weights: on a weighted cross-entropy the mutant loses them, a fault of its own
  // that D3's class counts name, and that an accuracy on an equally imbalanced test split cannot see.
  const Program& weighted = program("imbalanced-weighted");
  REQUIRE(weighted.loss.class_weights);
  const Mutant w = fault_operator("LCH").mutate(weighted, 1, 1);
  CHECK(w.program.loss.kind == "mse_onehot");
  CHECK_FALSE(w.program.loss.class_weights);
  CHECK(w.description.find("class weights dropped") != std::string::npos);
  CHECK(w.also_causes == std::vector<std::string>{"D3:class-counts"});
  CHECK_FALSE(w.also_metric_blind.empty());
  // Without weights the loss change is LCH's one fault.
  const Mutant plain = fault_operator("LCH").mutate(program("step-per-epoch"), 1, 1);
  CHECK(plain.program.loss.kind == "mse_onehot");
  CHECK(plain.also_causes.empty());
  CHECK(plain.also_metric_blind.empty());
}

TEST_CASE("an operator refuses a program it does not apply to, naming both") {
  // RCD changes a dropout rate: step-per-epoch has no dropout.
  CHECK_FALSE(fault_operator("RCD").applies(program("step-per-epoch")));
  CHECK_THROWS_WITH_AS(fault_operator("RCD").mutate(program("step-per-epoch"), 0.5, 1),
                       doctest::Contains("step-per-epoch"), Error);
  CHECK(fault_operator("RCD").applies(program("dropout")));
  // RAC needs gradient accumulation; PAE a noise augmentation.
  CHECK(fault_operator("RAC").applies(program("grad-accumulation")));
  CHECK_FALSE(fault_operator("RAC").applies(program("binary")));
  CHECK(fault_operator("PAE").applies(program("noise-augmentation")));
}

TEST_CASE("the Welch test: one-sided p-values computed by hand") {
  // means 3 and 4, variances 2.5, n 5: t = -1 on 8 degrees of freedom; P(T > -1) = 1 - 0.17330.
  CHECK(welch_p_greater({1, 2, 3, 4, 5}, {2, 3, 4, 5, 6}) == doctest::Approx(0.82670).epsilon(1e-4));
  // n 2 with equal variances (2): 2 degrees of freedom, where P(T > t) = 1/2 - t / (2 sqrt(t^2 + 2)).
  const double mb = 2 - 2 * std::sqrt(2.0);  // t = 2
  CHECK(welch_p_greater({1, 3}, {mb - 1, mb + 1}) == doctest::Approx(0.5 - 2 / (2 * std::sqrt(6.0))).epsilon(1e-6));
  // Identical constant samples: no evidence either way.
  CHECK(welch_p_greater({0.9, 0.9}, {0.9, 0.9}) == 1.0);
  CHECK(welch_p_greater({0.9, 0.9}, {0.8, 0.8}) == 0.0);
}

TEST_CASE("a mutant that hurts is effective and detected; one that does not is equivalent") {
  ScorecardOptions o;
  o.recipes = {"step-per-epoch"};
  o.operators = {"PSP", "WAB"};  // validation/test left raw: hurts; WAB does not apply (no BatchNorm)
  o.seeds = 2;
  o.all_strengths = false;
  o.corpus = false;
  const Scorecard s = run_scorecard(o);
  REQUIRE(s.mutants.size() == 1);  // WAB does not apply to the recipe
  const MutantResult& m = s.mutants[0];
  CHECK(m.op == "PSP");
  CHECK(m.effective);
  CHECK(m.mutant_mean < m.healthy_mean - 0.05);
  CHECK(m.detected);
  CHECK(m.diagnosed);
  CHECK(s.overall.effective == 1);
  CHECK(s.detection_recall() == 1.0);
  const std::string j = scorecard_json(s);
  for (const char* key : {"\"detection_recall\"", "\"diagnosis_recall\"", "\"corpus_programs\"",
                          "\"corpus_false_alarms\"", "\"effective_mutants\"", "\"equivalent_mutants\""})
    CHECK_MESSAGE(j.find(key) != std::string::npos, key);
}

TEST_CASE("a flagged equivalent mutant: a mistake, a true flag when most flagged runs name its fault, a false alarm") {
  MutantResult m;
  m.runs = 5;
  m.detected_runs = 3;
  m.detected = true;
  CHECK(m.equivalent_flag() == "false-alarm");  // a harmless operator flagged in most runs
  m.metric_blind = true;
  m.diagnosed_runs = 2;  // 2 of the 3 flagged runs name the fault (HLR 30x: O8), the third another check
  CHECK(m.equivalent_flag() == "metric-blind");
  m.diagnosed_runs = 1;  // most flagged runs name something else
  CHECK(m.equivalent_flag() == "false-alarm");
  m.always_mistake = true;
  CHECK(m.equivalent_flag() == "mistake");
  m.detected = false;  // flagged in fewer than most runs: no flag
  CHECK(m.equivalent_flag().empty());
  m.detected = true;
  m.effective = true;
  CHECK(m.equivalent_flag().empty());
}
