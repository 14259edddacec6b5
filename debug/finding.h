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
  // Every finding as str(), warnings and errors first; info findings only when asked.
  std::string str(bool include_info = true) const;
  std::string json() const;  // a JSON array of findings

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
