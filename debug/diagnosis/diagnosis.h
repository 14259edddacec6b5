// Diagnosis: from the findings of a run to the cause that explains them, the way a
// physician works through a differential diagnosis (docs/checks.md, "Diagnosis").
//
//   evidence   the findings that fired (a Report);
//   symptoms   findings that many different faults can produce: a loss that does not fall,
//              gradients that vanish or explode, NaN/Inf, an update ratio out of band;
//   causes     the faults that can produce each symptom, most likely first, each with the
//              probe (a check) that confirms or rules it out on this model and this data;
//   diagnosis  the confirmed cause that explains the most, as the lead; every symptom it
//              explains hangs under it with the reason in words ("because ..."); a symptom no
//              probe explains keeps the candidates its probes did not rule out, in order.
//
//   const debug::CauseAnalysis& d = report.diagnosis();   // made once, then kept
//   if (d.lead) std::cout << d.lead->str(report);   // the cause, what confirmed it, what it explains
//
// Report::diagnosis() runs this analysis once per set of findings and keeps it; Report::groups(),
// caused_by(), str() and json(), the HTML report, `gradsleuth zoo`, `doctor` and debug::diagnose()
// all read that one result.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "debug/evidence/finding.h"

namespace gradsleuth::debug {

// A fault that can explain findings, and how it is confirmed.
struct Cause {
  std::string id;     // "dead-relu"
  std::string name;   // "dead ReLU units"
  std::string check;  // the check whose finding confirms it ("M7"); the probe
  std::string probe;  // what that probe measures, in words
  // A fault of the code, data or settings. False for a symptom that is itself the cause of
  // other symptoms ("gradients vanish" explains "the loss is stuck"): such a cause never leads
  // while a fault explains it.
  bool fault = true;
  bool (*confirms)(const Finding& f) = nullptr;
  // It explains only findings at its own place (a detach cuts the parameters below it, not
  // others): a finding that names a parameter or module needs the confirming finding to name
  // the same parameter or a module containing it.
  bool local = false;
};

// Findings that many faults can produce, and those faults, most likely first.
struct Symptom {
  std::string id;        // "vanishing-gradients"
  std::string name;      // "gradients vanish"
  std::string shown_by;  // the findings that show it, in words: "O1 (vanishing), O2 (vanishing)"
  bool (*shows)(const Finding& f) = nullptr;
  std::vector<std::string> causes;  // Cause ids, most likely first
};

// The tables (docs/checks.md, "Diagnosis": the same rows as a table).
const std::vector<Cause>& diagnosis_causes();
const std::vector<Symptom>& diagnosis_symptoms();
const Cause* find_cause(const std::string& id);
// The first fault (Cause::fault) the finding confirms, or nullptr: a symptom, or info.
const Cause* fault_confirmed_by(const Finding& f);
// The checks that localise where a non-finite value came from: D2, M12, W4 and L5's error.
bool nonfinite_source(const Finding& f);
// A finding that says the run learned too slowly: a loss that does not fall or still fell at the end
// (L1 stuck, M14, M15, L7 underfitting, L9 undertrained) or a learning rate found too low (O6, O8, L9's
// probe). The eps rule of O6 warns only beside one.
bool reports_slow_learning(const Finding& f);
// The two tables as Markdown (docs/checks.md, "Diagnosis", holds this text verbatim; `gradsleuth
// checks --causes` prints it): each symptom with the findings that show it and its candidate
// causes in order, then each cause with its probe.
std::string diagnosis_tables_markdown();

// The lead: the cause the report starts with.
struct Lead {
  size_t index = 0;        // into Report::findings()
  std::string check;       // the lead finding's check
  bool confirmed = false;  // a probe confirmed a fault; false: a symptom nothing explained
  std::string cause;       // the Cause id it confirms ("dead-relu"); "" when unconfirmed
  // The probes (check ids) whose findings confirm the lead: its own check first, then any
  // other check that saw the same fault.
  std::vector<std::string> confirmed_by;
  // Candidate causes of the lead's symptoms that were probed and ruled out ("M8: saturated
  // sigmoid/tanh units"): the probe ran and did not fire.
  std::vector<std::string> ruled_out;
  // Unconfirmed lead only: the candidates left, most likely first ("M9: poor initialisation").
  std::vector<std::string> candidates;
  std::vector<size_t> explains;  // the findings it explains (all of its chain), report order
  std::string why;               // one sentence: why this one leads

  std::string str(const Report& r) const;  // a few lines for a person
  std::string json() const;                // {"index":..,"check":..,"confirmed":..,"cause":..,"confirmed_by":[..],...}
};

// The diagnosis of a whole report.
struct CauseAnalysis {
  // Per finding (parallel to Report::findings()); -1 where none.
  std::vector<int64_t> parent;       // the finding that explains it directly
  std::vector<int64_t> root;         // the root of its chain (itself for a root; -1 for info findings)
  std::vector<std::string> because;  // "because 100% of the units of 2 (ReLU) are dead (M7)"
  // The symptom's cause text with only what its probes did not rule out (empty: keep the
  // finding's own cause text, as for findings that name a fault).
  std::vector<std::string> cause_text;
  // The fix of an explained symptom: its root's (fixing the cause removes the symptom); empty:
  // keep the finding's own.
  std::vector<std::string> fix_text;
  // Roots in lead order (the lead first).
  std::vector<size_t> roots;
  std::optional<Lead> lead;
};

// Diagnoses a report: the chains, the roots in order, the lead. Pure: reads the findings and
// Report::ran() (which checks ran, for what was ruled out). A report keeps its own
// (Report::diagnosis()), which every printer reads: call this for a fresh analysis only.
CauseAnalysis analyse_causes(const Report& r);
// How many times analyse_causes has run in this process (a run's diagnosis is made once; the
// tests count it).
uint64_t analyse_causes_runs();

}  // namespace gradsleuth::debug
