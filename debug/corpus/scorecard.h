// The scorecard: every fault operator x recipe x strength, each mutant trained on several seeds
// beside its healthy program, and the checks scored on what they say about it.
//
// A mutant counts only when it hurts (DeepCrime's killing criterion): its test metric over the seeds
// is compared with the healthy program's by a one-sided Welch t-test, and it is effective when
// p < alpha, Cohen's d >= min_effect and the mean falls by min_drop or more. Otherwise it is
// equivalent and left out of the recall; a check that flags an equivalent mutant is right when the
// operator is always a mistake (a leaked split), and a false alarm otherwise.
//   detection recall: effective mutants with a warning or error (in most of their seeds' runs);
//   diagnosis recall: effective mutants whose lead names the mutated component (Operator::causes);
//   false alarms: warnings on the corpus's healthy programs and on equivalent mutants of harmless
//   operators. A flag on an equivalent mutant of an operator whose fault stays a fault where the
//   metric does not move (Operator::metric_blind, or a mutant's second fault) is a true flag when its
//   lead names the fault in most of the runs that flagged it, and is counted apart ("true flags the
//   metric cannot see").
// A mutant that passes the effect size and the drop but not the p-value is undecided, not harmless:
// it gets as many seeds again (and so does its healthy recipe) and the test runs on all of them.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "debug/corpus/operators.h"

namespace gradsleuth::debug::corpus {

struct ScorecardOptions {
  std::vector<std::string> recipes;    // corpus programs to mutate (default: scorecard_recipes())
  std::vector<std::string> operators;  // operator ids (default: every operator)
  int seeds = 5;                       // training seeds per mutant and per healthy recipe
  bool all_strengths = true;           // false: each operator's middle strength only
  bool corpus = true;                  // also run every corpus program once (the false alarms on it)
  double alpha = 0.05, min_effect = 0.5, min_drop = 0.01;
  bool confirm_undecided = true;  // an undecided mutant gets `seeds` more seeds before it is judged
  std::function<void(const std::string& line, size_t done, size_t total)> progress;

  // The subset of ./test.sh: 5 recipes, the middle strength, 3 seeds.
  static ScorecardOptions quick();
};

// The recipes the full scorecard mutates: corpus programs of every family and task.
std::vector<std::string> scorecard_recipes();
std::vector<std::string> quick_recipes();

struct MutantResult {
  std::string op, family, recipe, description;
  double strength = 0.0;
  double healthy_mean = 0.0, healthy_sd = 0.0, mutant_mean = 0.0, mutant_sd = 0.0;
  double p_value = 1.0, effect = 0.0;  // one-sided Welch t-test; Cohen's d (healthy - mutant)
  bool effective = false;
  bool always_mistake = false;
  // The fault stays a fault where the metric does not move: the operator's (Operator::metric_blind),
  // or the second one this mutant writes (Mutant::also_metric_blind).
  bool metric_blind = false;
  int seeds = 0;              // the seeds the killing criterion used (more when the first were undecided)
  int runs = 0, detected_runs = 0, diagnosed_runs = 0;
  bool detected = false, diagnosed = false;  // in most runs
  std::vector<std::string> fired;            // the first seed's checks that fired
  std::string lead;                          // the first seed's lead check ("" when silent)
  // An equivalent mutant flagged in most runs: "mistake" (the operator is always one), "metric-blind"
  // (a fault the metric cannot see, named by the lead in most of the runs that flagged it), or
  // "false-alarm"; "" for an effective mutant or one flagged in fewer than most runs.
  std::string equivalent_flag() const;
};

struct FamilyScore {
  std::string family;
  int mutants = 0, effective = 0, equivalent = 0, detected = 0, diagnosed = 0;
  int equivalent_flagged_mistakes = 0;  // equivalent mutants of always-mistake operators, flagged (right)
  int equivalent_true_flags = 0;        // equivalent mutants of metric-blind faults, flagged with the right lead
  int equivalent_false_alarms = 0;      // every other flag on an equivalent mutant (wrong)
  std::string blind_spot;               // why part of it cannot be seen from inside training
};

struct Scorecard {
  std::vector<MutantResult> mutants;
  std::vector<FamilyScore> families;  // per operator family, in operator order
  FamilyScore overall;
  int corpus_programs = 0, corpus_false_alarms = 0;
  std::vector<std::string> corpus_alarms;  // "program: checks"
  int recipes = 0, operators = 0, seeds = 0;
  double seconds = 0.0;

  double detection_recall() const;
  double diagnosis_recall() const;
};

Scorecard run_scorecard(const ScorecardOptions& o);

// One-sided Welch t-test: the p-value of mean(a) > mean(b).
double welch_p_greater(const std::vector<double>& a, const std::vector<double>& b);

// The table for a person: per family and overall, the published figures beside them, and the
// effective mutants that were missed or misdiagnosed.
std::string scorecard_text(const Scorecard& s);
// {"detection_recall":..,"diagnosis_recall":..,"corpus_programs":..,"corpus_false_alarms":..,
//  "effective_mutants":..,"equivalent_mutants":..,"families":[..],"mutants":[..]}
std::string scorecard_json(const Scorecard& s);

}  // namespace gradsleuth::debug::corpus
