// Findings: what every check of the debug module returns (docs/checks.md), and the
// Report that collects them.
//
//   debug::Report r;
//   r.add(debug::check_gradient_health(*model));          // O1 after a backward
//   for (const debug::Finding& f : r.findings()) std::cout << f.str() << "\n";
//   if (r.fired("O1")) ...                                // a warning or error from O1
//
// A finding says what went wrong (title), where (module path, parameter, op,
// shape), the evidence (the numbers measured against the check's threshold),
// the likely cause and the fix. Severity:
//   info     a report, not a problem (a batch summary, expected BatchNorm coupling);
//   warning  probably a bug: training runs but the numbers will be worse;
//   error    certainly wrong (non-finite values, a wrong gradient).
// A check "fires" when it produces a warning or an error.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gradsleuth::debug {

enum class Severity { Info = 0, Warning = 1, Error = 2 };
const char* severity_name(Severity s);  // "info", "warning", "error"

// One measured number and the rule it broke (or met).
//   {"dead fraction", 0.83, ">= 0.7 flags a layer"}
struct Evidence {
  std::string name;
  double value = 0.0;
  std::string rule;  // the threshold, in words; empty for context numbers
};

struct Finding {
  std::string check;  // "M7"
  Severity severity = Severity::Warning;
  std::string title;  // one line: what went wrong
  // Where (each may be empty).
  std::string module;     // module path ("2", "encoder.fc1"); "(model)" for the root
  std::string parameter;  // parameter path ("0.weight")
  std::string op;         // registry op name ("log", "add")
  std::string shape;      // "[64, 10]"
  std::vector<Evidence> evidence;
  std::string cause;  // the likely cause (the cause tables of docs/checks.md)
  std::string fix;    // what to do about it
  int64_t step = -1;  // training step when it was found (-1: outside training)
  int64_t count = 1;  // how many times a Report saw it (see Report::add)
  // Found by an end-of-run diagnosis (Monitor::finish: the loss history, the norm
  // histories...): after the last step, though step stays -1. Report::groups()
  // orders findings in time with it (before training < training steps < end of run).
  bool end_of_run = false;

  bool fires() const { return severity != Severity::Info; }
  // "module 3 (Linear), parameter 3.weight, op matmul, shape [64, 10]"; "" when nowhere.
  std::string location() const;
  // Several lines for a person:
  //   [M7 warning] dead-ReLU statistics: 83% of the units of a ReLU layer are dead
  //     where:    module 2 (ReLU)
  //     evidence: dead fraction = 0.83 (>= 0.7 flags a layer)
  //     cause:    ...
  //     fix:      ...
  std::string str() const;
  std::string json() const;  // one JSON object; "name" is the check's catalogue name
  // Identity for de-duplication: check, title (its numbers left out), module, parameter, op.
  std::string key() const;
};

// Root cause first: one fault often sets off a cascade (a NaN at one op, then
// non-finite gradients, loss and weights). Report::groups() puts each consequence
// under the finding that caused it, by the explicit rules of cascade_rules()
// (docs/checks.md, "Root cause first"); a finding no rule explains stays at the
// top level, so two independent bugs are both shown.
struct FindingGroup {
  size_t root = 0;                // index into Report::findings()
  std::vector<size_t> follow_on;  // its consequences, in time order
  std::string rule;               // the rule that grouped them ("" when alone)
};

// One row of the table of consequences (docs/checks.md, "Root cause first"): the
// findings a cascade is made of, those that start one of their own (a source: it
// names where the fault came from), and which members are consequences of a root.
struct CascadeRule {
  std::string name;     // "non-finite values"
  std::string starts;   // in words, for the docs: the findings that can be a root
  std::string follows;  // in words: the findings that are consequences
  bool (*is_member)(const Finding& f) = nullptr;
  bool (*is_source)(const Finding& f) = nullptr;
  bool (*is_consequence)(const Finding& root, const Finding& f) = nullptr;
};
const std::vector<CascadeRule>& cascade_rules();

// A finding's place in time, for ordering: (phase, step), phase 0 before training
// (step -1), 1 during training (step >= 0), 2 at the end of the run (end_of_run).
std::pair<int, int64_t> finding_time(const Finding& f);

// Findings in the order they were found. Adding one with the key of a finding
// already held only counts it again (a check that fires every step is listed once).
class Report {
 public:
  void add(Finding f);
  void add(const std::vector<Finding>& fs);
  void merge(const Report& other) { add(other.findings_); }
  void clear() { findings_.clear(); }

  const std::vector<Finding>& findings() const { return findings_; }
  bool empty() const { return findings_.empty(); }
  size_t size() const { return findings_.size(); }
  // True when `check` produced a warning or an error.
  bool fired(const std::string& check) const;
  // The ids of the checks that fired, sorted ("D5", "L1", "M19", ...), each once.
  std::vector<std::string> fired_checks() const;
  // Findings of one check (any severity).
  std::vector<Finding> of(const std::string& check) const;
  // The findings that fired (warnings and errors), grouped root cause first: each
  // group's root is the earliest finding of its cascade (at one time, the one that
  // names an op or a module), its follow_on the consequences cascade_rules() assigns
  // to it. Groups in time order (at one time, errors first); info findings are not
  // grouped. Every firing finding is in exactly one group, as root or follow-on.
  std::vector<FindingGroup> groups() const;
  // Index of the root finding i was grouped under, or -1 (a root, alone, or info).
  std::vector<int64_t> caused_by() const;
  // Every finding as str(), root causes first (groups(): earliest first, errors
  // before warnings at one time), each followed by "and N follow-on findings
  // (...)"; verbose lists the follow-ons in full under their root. Info findings
  // last, only when asked.
  std::string str(bool include_info = true, bool verbose = false) const;
  // A JSON array of every finding; each carries "index" (its place in the array)
  // and "caused_by" (the index of its root, or null).
  std::string json() const;

 private:
  std::vector<Finding> findings_;
};

// JSON helpers shared by the debug module's writers.
std::string json_str(const std::string& s);  // a quoted, escaped JSON string
std::string json_num(double v);              // NaN/Inf (no JSON spelling) become null

// Formats a number compactly for messages: 0.83, 1.2e-08, 3.4e+05.
std::string fmt_num(double v);

}  // namespace gradsleuth::debug

namespace gs = gradsleuth;
