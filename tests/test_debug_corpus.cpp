// The healthy-practice corpus (debug/corpus/corpus.h) as a test: every correct training program,
// with four training seeds, reaches its expected test metric and no check warns or errs on it. A
// warning here is a false alarm on correct code; the failure names the program and the findings.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <string>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "debug/corpus/corpus.h"
#include "debug/corpus/null_distribution.h"

using namespace gradsleuth;
namespace corpus = gradsleuth::debug::corpus;

namespace {

// The findings that warn or err, one line each: "[L1 warning] the training loss ...".
std::string alarms(const debug::RunReport& r) {
  std::string s;
  for (const debug::Finding& f : r.findings.findings())
    if (f.fires())
      s += "  [" + f.check + (f.severity == debug::Severity::Error ? " error] " : " warning] ") + f.title + "\n";
  return s;
}

// Each program on the given seeds; every failure names the program, the seed and the findings.
void check_corpus_silent(std::initializer_list<uint64_t> seeds) {
#ifdef _OPENMP
  // The programs are small: one thread each (as `gradsleuth corpus` runs them) is ~5x faster than
  // a team of threads waiting on each other's tiny loops.
  if (!std::getenv("OMP_NUM_THREADS")) omp_set_num_threads(1);
#endif
  const auto& programs = corpus::healthy_programs();
  REQUIRE(programs.size() >= 40);
  for (const uint64_t seed : seeds)
    for (const corpus::Program& p : programs) {
      CAPTURE(p.name);
      CAPTURE(seed);
      const corpus::Outcome o = corpus::run_program(p, seed);
      CHECK_MESSAGE(o.error.empty(), p.name << " (seed " << seed << ") raised: " << o.error);
      CHECK_MESSAGE(o.report.fired_checks().empty(),
                    p.name << " (seed " << seed << "): false alarm on a healthy program:\n" << alarms(o.report));
      CHECK_MESSAGE(o.metric >= p.expected_metric, p.name << " (seed " << seed << "): " << corpus::metric_name(p)
                                                          << " " << o.metric << " below its expected "
                                                          << p.expected_metric);
      CHECK(o.steps > 0);  // the checks saw the training steps
    }
}

}  // namespace

// Two cases, so that ctest runs them side by side.
TEST_CASE("the healthy corpus: every program trains to its expected metric and no check warns, seeds 1 and 2") {
  check_corpus_silent({1, 2});
}

TEST_CASE("the healthy corpus: every program trains to its expected metric and no check warns, seeds 3 and 4") {
  check_corpus_silent({3, 4});
}

TEST_CASE("corpus --null reads the threshold from a rule's words") {
  corpus::RuleThreshold t = corpus::parse_rule("> 1.5 warns");
  CHECK(t.op == ">");
  CHECK(t.high == 1.5);
  t = corpus::parse_rule("< 0.1 is stuck");
  CHECK(t.op == "<");
  CHECK(t.low == 0.1);
  t = corpus::parse_rule("outside [0.5, 1.5] warns");
  CHECK(t.op == "outside");
  CHECK(t.low == 0.5);
  CHECK(t.high == 1.5);
  t = corpus::parse_rule("lower: training still improves");
  CHECK(t.op.empty());

  corpus::EvidenceDistribution d;
  d.threshold = corpus::parse_rule("> 2 warns");
  d.values = {0.5, 1.0, 1.6};
  CHECK(d.median() == 1.0);
  CHECK(d.margin() == doctest::Approx(2.0 / 1.6));
  CHECK(d.margin_abs() == doctest::Approx(0.4));
  d.threshold = corpus::parse_rule("outside [0.5, 1.5] warns");
  CHECK(d.margin() == doctest::Approx(1.5 / 1.6));  // the smaller of 0.5 / 0.5 and 1.5 / 1.6
  CHECK(d.margin_abs() == doctest::Approx(-0.1));  // 1.6 is past 1.5
}
