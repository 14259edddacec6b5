// gradsleuth scorecard --quick --json (the subset ./test.sh runs), mutate and corpus: the checks on
// faults written by the operators and on the healthy corpus, held to the figures docs/checks.md
// publishes ("The scorecard").
#include <doctest/doctest.h>

#include <string>

#include "cli_test_util.h"
#include "json_mini.h"

using clitest::run_cli;

TEST_CASE("scorecard --quick: the corpus silent, the effective mutants caught and diagnosed") {
  const clitest::Run r = run_cli("scorecard --quick --json", true);
  REQUIRE(r.status == 0);
  const json_mini::Value j = json_mini::parse(r.out);
  REQUIRE(j.kind == json_mini::Value::Object);
  INFO(r.out.substr(0, 4000));
  CHECK(j.get("corpus_programs")->num >= 40);
  CHECK(j.get("corpus_false_alarms")->num == 0);
  CHECK(j.get("operators")->num >= 24);
  CHECK(j.get("effective_mutants")->num >= 40);
  CHECK(j.get("equivalent_mutants")->num >= 1);
  CHECK(j.get("detection_recall")->num >= 0.95);
  CHECK(j.get("diagnosis_recall")->num >= 0.85);
  // A flag on an equivalent mutant is a mistake flagged, a true flag the metric cannot see (its lead
  // names the fault), or a false alarm; none of the last.
  CHECK(j.get("equivalent_false_alarms")->num == 0);
  CHECK(j.get("equivalent_true_flags")->num >= 1);
  int metric_blind = 0;
  for (const json_mini::Value& m : j.get("mutants")->arr) {
    // Detected and diagnosed mean: in most of the mutant's runs (one per seed).
    const double runs = m.get("runs")->num;
    CHECK(runs == m.get("seeds")->num);
    CHECK(m.get("detected")->b == (2 * m.get("detected_runs")->num > runs));
    CHECK(m.get("diagnosed")->b == (2 * m.get("diagnosed_runs")->num > runs));
    CHECK(m.get("diagnosed_runs")->num <= m.get("detected_runs")->num);
    const std::string flag = m.get("flag")->str;
    CHECK((flag.empty() || flag == "mistake" || flag == "metric-blind" || flag == "false-alarm"));
    if (flag == "metric-blind") {
      ++metric_blind;
      CHECK_FALSE(m.get("effective")->b);
      CHECK(m.get("detected")->b);
      // Named by the lead in most of the runs that flagged it.
      CHECK(2 * m.get("diagnosed_runs")->num > m.get("detected_runs")->num);
    }
  }
  CHECK(metric_blind == j.get("equivalent_true_flags")->num);
  // Every family the operators come from is in the table.
  CHECK(j.get("families")->arr.size() >= 12);
}

TEST_CASE("mutate --list and one mutant's diagnosis; corpus --list") {
  const clitest::Run list = run_cli("mutate --list", true);
  CHECK(list.status == 0);
  CHECK(list.out.find("TCL") != std::string::npos);
  CHECK(list.out.find("operators") != std::string::npos);
  const clitest::Run m = run_cli("mutate PSP --recipe step-per-epoch --json", true);
  REQUIRE(m.status == 0);
  const json_mini::Value j = json_mini::parse(m.out);
  REQUIRE(j.kind == json_mini::Value::Object);
  CHECK(j.get("operator")->str == "PSP");
  CHECK(j.get("mutant_metric")->num < j.get("healthy_metric")->num);
  const std::string lead = j.get("lead")->str;
  CHECK_MESSAGE((lead == "D10" || lead == "D14"), "lead " << lead);
  const clitest::Run bad = run_cli("mutate RCD --recipe step-per-epoch 2>&1");
  CHECK(bad.status != 0);
  CHECK(bad.out.find("does not apply") != std::string::npos);
  const clitest::Run c = run_cli("corpus --list", true);
  CHECK(c.status == 0);
  CHECK(c.out.find("warmup-cosine-per-batch") != std::string::npos);
}
