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
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "debug/evidence/kind.h"

namespace gradsleuth::debug {

struct CauseAnalysis;  // debug/diagnosis/diagnosis.h

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
  // What it says, for programs (debug/evidence/kind.h): the diagnosis, the zoo and the tests match on
  // check and kind, never on the title. Kind::None: the check says one thing only.
  Kind kind = Kind::None;
  // It reports NaN/Inf values (a count above 0, a loss or norm that is NaN/Inf): the diagnosis
  // groups it with the other non-finite findings. A number in evidence that is itself NaN/Inf
  // counts too (reports_nonfinite).
  bool nonfinite = false;
  std::string title;  // one line for a person: what went wrong
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
  bool is(const char* id, Kind k) const { return check == id && kind == k; }
  // The value of the evidence named `name`; NaN when it holds none.
  double value_of(const std::string& name) const;
  // nonfinite, or a number in its evidence that is NaN/Inf.
  bool reports_nonfinite() const;
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

// Root cause first: one fault sets off symptoms (dead ReLUs, then vanishing gradients, then a
// stuck loss). Report::groups() puts each finding under the cause that explains it, by the
// symptom and cause tables of debug/diagnosis/diagnosis.h (docs/checks.md, "Diagnosis"); a finding
// nothing explains is a root of its own, so two independent bugs are both shown.
struct FindingGroup {
  size_t root = 0;                // index into Report::findings()
  std::vector<size_t> follow_on;  // the findings it explains, in time order
  std::string rule;               // the cause they share ("dead ReLU units"; "" when alone)
};

// A finding's place in time, for ordering: (phase, step), phase 0 before training
// (step -1), 1 during training (step >= 0), 2 at the end of the run (end_of_run).
std::pair<int, int64_t> finding_time(const Finding& f);

// Findings in the order they were found. Adding one with the key of a finding
// already held only counts it again (a check that fires every step is listed once).
class Report {
 public:
  void add(Finding f);
  void add(const std::vector<Finding>& fs);
  // Puts f in the place of findings()[i] (a live finding the end of the run judged again), keeping its
  // place in time.
  void replace(size_t i, Finding f);
  void merge(const Report& other) {
    add(other.findings_);
    ran_.insert(other.ran_.begin(), other.ran_.end());
    diagnosis_.reset();
  }
  void clear() {
    findings_.clear();
    keys_.clear();
    ran_.clear();
    diagnosis_.reset();
  }

  // The checks that ran, whether they fired or not: what the diagnosis may call ruled out.
  // `checks` is one id or a list ("M11, M10, D1").
  void note_ran(const std::string& checks);
  bool ran(const std::string& check) const { return ran_.count(check) > 0 || fired(check); }
  const std::set<std::string>& ran_checks() const { return ran_; }

  const std::vector<Finding>& findings() const { return findings_; }
  bool empty() const { return findings_.empty(); }
  size_t size() const { return findings_.size(); }
  // True when `check` produced a warning or an error.
  bool fired(const std::string& check) const;
  // Its place in findings() of a finding with f's key (the same check, kind, title without its
  // numbers and place), or -1.
  int64_t index_of(const Finding& f) const;

  // The diagnosis of these findings (debug/diagnosis/diagnosis.h: the causes, their chains and the
  // lead), made by debug::analyse_causes once and kept: every printer below reads it. Adding a
  // finding or noting a check that ran discards it, and the next call makes it again.
  const CauseAnalysis& diagnosis() const;

  // The ids of the checks that fired, sorted ("D5", "L1", "M19", ...), each once.
  std::vector<std::string> fired_checks() const;
  // Findings of one check (any severity).
  std::vector<Finding> of(const std::string& check) const;
  // The printers (defined in debug/report/text.cpp), each reading diagnosis().
  // The findings that fired (warnings and errors), grouped by cause (debug::analyse_causes):
  // each group's root is a cause nothing else explains, its follow_on everything it explains.
  // Groups in lead order: confirmed faults first, then the one explaining the most, then the
  // earliest. Info findings are not grouped. Every firing finding is in exactly one group.
  std::vector<FindingGroup> groups() const;
  // Index of the root finding i was grouped under, or -1 (a root, alone, or info).
  std::vector<int64_t> caused_by() const;
  // The diagnosis's lead first ("Diagnosis: ..."), then every finding as str(), roots in lead
  // order, each followed by "and N follow-on findings (...)"; verbose lists the follow-ons in
  // full under their root, each with its "because". A symptom's cause line names only the
  // causes its probes did not rule out. Info findings last, only when asked.
  std::string str(bool include_info = true, bool verbose = false) const;
  // A JSON array of every finding; each carries "index" (its place in the array),
  // "caused_by" (the index of its root, or null), "explained_by" (the finding that explains it
  // directly, or null) and "because" (the reason in words).
  std::string json() const;
  // The same entries for some findings only (indices into findings()), as this report diagnoses
  // them: a phase of a run lists its findings as the whole run's diagnosis places them.
  std::string json(const std::vector<size_t>& which) const;
  // {"check":..,"confirmed":..,"confirmed_by":[..],"ruled_out":[..],...} of the lead, or null.
  std::string lead_json() const;

 private:
  std::vector<Finding> findings_;
  std::vector<std::string> keys_;  // findings_[i].key(), kept beside it (findings_ grows only through add)
  std::set<std::string> ran_;
  mutable std::shared_ptr<const CauseAnalysis> diagnosis_;  // diagnosis(), once made
};

// The JSON writers of core/json.h, as the debug module's reports use them.
using gradsleuth::json_num;  // NaN/Inf (no JSON spelling) become null
using gradsleuth::json_str;  // a quoted, escaped JSON string

// Formats a number compactly for messages: 0.83, 1.2e-08, 3.4e+05.
std::string fmt_num(double v);

}  // namespace gradsleuth::debug

namespace gs = gradsleuth;
