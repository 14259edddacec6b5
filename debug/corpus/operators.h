// Fault operators: functions (healthy program, strength, seed) -> mutant over the corpus's programs.
// The operators of DeepCrime (Humbatova, Jahangirova and Tonella, "DeepCrime: Mutation Testing of
// Deep Learning Systems Based on Real Faults", ISSTA 2021), which come from the taxonomy of real
// faults (Humbatova et al., ICSE 2020), and the families DeepCrime leaves to the program text, from
// defect4ML and the bug studies of Islam et al. (FSE 2019, FSE 2020): data between splits,
// preprocessing per split, train/eval mode, parameters outside the optimizer, schedules stepped at
// the wrong rate, reductions and scales.
//
//   const corpus::Operator& op = corpus::fault_operator("TCL");
//   corpus::Mutant m = op.mutate(corpus::program("step-per-epoch"), 0.3, /*seed=*/1);
//   corpus::Outcome o = corpus::run_program(m.program, 1);   // the mutant's diagnosis in o.report
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "debug/corpus/program.h"

namespace gradsleuth::debug::corpus {

struct Mutant {
  Program program;          // the healthy program with the fault written in (its name gains the operator's id)
  std::string description;  // "the labels of 30% of the training examples changed to another class"
  std::string location;     // the mutated layer's module path ("2"), or "" for a program-wide fault
  // A second fault the operator writes into this program beside its own, where the program has what
  // it removes (LCH: MSE takes no class weights, so a weighted cross-entropy's weights go with it):
  // the checks that name it (as Operator::causes), and why it stays a fault where the test metric does
  // not move (as Operator::metric_blind).
  std::vector<std::string> also_causes;
  std::string also_metric_blind;
};

struct Operator {
  std::string id;      // "TCL"
  std::string name;    // "change labels of training data"
  std::string family;  // "training data", "hyperparameters", ..., "splits", "mode", "reductions"
  std::string source;  // "DeepCrime" or the bug study it comes from
  // The strengths the scorecard tries, weakest first, and what a strength means.
  std::vector<double> strengths;
  std::string strength_unit;  // "share of training labels", "factor on the learning rate", ...
  // The checks whose lead names the mutated component: a mutant is diagnosed when the lead (or a
  // check confirming it) is one of them.
  std::vector<std::string> causes;
  // The mutation is a mistake whatever it does to the outcome (a leaked split, a forgotten
  // model.train()): a check that flags a harmless mutant of it is right, not a false alarm.
  bool always_mistake = false;
  // Why the checks cannot see it from inside training ("" when they can).
  std::string blind_spot;

  bool (*applies)(const Program& p) = nullptr;
  Mutant (*apply)(const Program& p, double strength, uint64_t seed) = nullptr;
  // Why the fault is a mistake even where the test metric does not move ("" when the operator can be
  // harmless, or is always a mistake): a check that flags an equivalent mutant of it with a lead
  // naming one of causes flags a real fault the metric cannot see, not a false alarm.
  std::string metric_blind;

  // The mutant; throws gs::Error naming the operator and the program when it does not apply.
  Mutant mutate(const Program& p, double strength, uint64_t seed) const;
};

// Every operator, DeepCrime's first.
const std::vector<Operator>& fault_operators();
// The operator with this id (case-insensitive); throws gs::Error listing the ids.
const Operator& fault_operator(const std::string& id);

}  // namespace gradsleuth::debug::corpus
