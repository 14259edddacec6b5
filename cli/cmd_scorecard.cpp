// gradsleuth scorecard: every fault operator x recipe x strength against the healthy corpus
// (debug/corpus/scorecard.h): detection and diagnosis recall per family, and the false alarms.
#include <cstdio>
#include <iostream>

#include "cli/cli.h"
#include "core/io.h"
#include "debug/corpus/scorecard.h"

namespace gradsleuth::cli {

int cmd_scorecard(const std::vector<std::string>& args) {
  Args a("scorecard", args);
  a.about(
      "Scores the checks on faults nobody wrote for them: every fault operator (gradsleuth mutate --list) on the\n"
      "scorecard's recipes at each strength, each mutant trained on several seeds beside its healthy program. A\n"
      "mutant counts only when it hurts (a one-sided Welch t-test on the test metric, p < 0.05, Cohen's d >= 0.5,\n"
      "a drop of 0.01 or more); the others are equivalent. Prints, per operator family and overall, detection recall\n"
      "(effective mutants with a warning or error), diagnosis recall (the lead names the mutated component) and the\n"
      "false alarms (the healthy corpus, and equivalent mutants of harmless operators), beside published figures.\n"
      "--quick: 5 recipes, each operator's middle strength, 3 seeds (./test.sh runs it).");
  a.flag("quick", "the small subset (5 recipes, middle strength, 3 seeds)");
  a.flag("json",
         "print the scorecard as JSON (detection_recall, diagnosis_recall, corpus_programs, "
         "corpus_false_alarms, effective_mutants, equivalent_mutants, families, mutants) instead of the table");
  a.option("operator", "ID", "only this operator (repeat for several)", "", true);
  a.option("recipe", "R", "only this corpus program (repeat for several)", "", true);
  a.option("seeds", "N", "training seeds per mutant and per healthy recipe (default 5, --quick 3)");
  a.flag("no-corpus", "skip the run over the whole healthy corpus");
  if (!a.parse()) return 0;
  set_thread_count();
  using namespace debug::corpus;
  ScorecardOptions o = a.has("quick") ? ScorecardOptions::quick() : ScorecardOptions();
  if (a.has("operator")) o.operators = a.get_all("operator");
  if (a.has("recipe")) o.recipes = a.get_all("recipe");
  if (a.has("seeds")) o.seeds = static_cast<int>(a.get_int_in("seeds", 2, 50));
  o.corpus = !a.has("no-corpus");
  o.progress = [](const std::string& line, size_t done, size_t total) {
    std::fprintf(stderr, "scorecard: [%zu/%zu] %s\n", done, total, line.c_str());
    std::fflush(stderr);
  };
  const Scorecard s = run_scorecard(o);
  std::cout << (a.has("json") ? scorecard_json(s) + "\n" : scorecard_text(s)) << std::flush;
  return 0;
}

}  // namespace gradsleuth::cli
