// The null distribution of the checks' evidence: every healthy program of the corpus run over
// several training seeds, and for each check and evidence name the values seen in its findings
// (info ones included), beside the threshold its rule states and how far the healthy values sit
// from it. It is how a threshold is derived (docs/checks.md gives each one's margin).
//
//   corpus::NullDistribution nd = corpus::measure_null(programs, {1, 2, 3});
//   std::cout << corpus::null_text(nd);
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "debug/corpus/program.h"

namespace gradsleuth::debug::corpus {

// A threshold read from an evidence rule's words: "> 1.5 warns" (op ">", high 1.5), "< 0.1 is
// stuck" (op "<", low 0.1), "outside [0.5, 1.5] warns" (op "outside", low 0.5, high 1.5). op is ""
// when the rule states none.
struct RuleThreshold {
  std::string op;
  double low = 0.0, high = 0.0;
};
RuleThreshold parse_rule(const std::string& rule);

struct EvidenceDistribution {
  std::string check;     // "L4"
  std::string evidence;  // the evidence's name, its numbers written "#" (so "the last 3 epochs" pools)
  std::string rule;      // the first non-empty rule seen with it
  RuleThreshold threshold;
  std::vector<double> values;  // sorted
  std::string at_min, at_max;  // "program/seed" of the smallest and largest value
  int64_t warned = 0;          // values from findings that warned or erred
  double min() const { return values.front(); }
  double max() const { return values.back(); }
  double median() const;
  // How far the healthy values sit from the threshold, as a factor: > 1 means every value is on
  // the quiet side ("> T": T / max; "< T": min / T; "outside [a, b]": the smaller of min / a and
  // b / max), <= 1 that some healthy value reaches it. NaN without a threshold, or when the
  // factor is not defined (a threshold or value <= 0: margin_abs says it then).
  double margin() const;
  // The same as a distance in the evidence's units ("> T": T - max; "< T": min - T; "outside":
  // the smaller of min - a and b - max); NaN without a threshold.
  double margin_abs() const;
};

struct NullDistribution {
  std::vector<uint64_t> seeds;
  int64_t runs = 0, runs_with_alarm = 0;
  std::vector<EvidenceDistribution> rows;  // by check, then evidence name
};

// Runs every program with every seed (progress(i, n, name) before each run, when given).
NullDistribution measure_null(const std::vector<const Program*>& programs, const std::vector<uint64_t>& seeds,
                              const std::function<void(size_t, size_t, const std::string&)>& progress = {});

// A table: check, evidence, n, min, median, max, the rule, the margin.
std::string null_text(const NullDistribution& nd);
// {"seeds":[..],"runs":..,"runs_with_alarm":..,"rows":[{"check","evidence","rule","op","low","high","n","warned",
//  "min","median","max","at_min","at_max","margin","margin_abs"}]}
std::string null_json(const NullDistribution& nd);

}  // namespace gradsleuth::debug::corpus
