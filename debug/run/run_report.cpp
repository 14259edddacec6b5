// RunReport's text and JSON (see diagnose.h): the phases, the findings as the run's one diagnosis orders them.
#include "debug/run/diagnose.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "core/autograd.h"
#include "debug/diagnosis/diagnosis.h"
#include "debug/evidence/catalogue.h"
#include "debug/report/html_report.h"
#include "debug/run/diagnose_util.h"

namespace gradsleuth::debug {

using namespace run_detail;

// ---- RunReport --------------------------------------------------------------------------
void RunReport::add_at_end(const Finding& f) {
  findings.add(f);
  for (PhaseReport& p : phases)
    if (p.name == "end of run") p.findings.add(f);
}

void RunReport::add_at_end(const Report& found) {
  findings.merge(found);
  for (PhaseReport& p : phases)
    if (p.name == "end of run") p.findings.merge(found);
}

std::string RunReport::str(bool include_info) const {
  std::ostringstream os;
  for (const PhaseReport& p : phases)
    os << p.name << ": " << (p.ran ? findings_count(p.findings) : "did not run")
       << (p.note.empty() ? "" : " (" + p.note + ")") << "\n";
  if (findings.fired_checks().empty())
    os << "\nno check fired" << (include_info ? "" : " (info findings left out: RunReport::str(true) prints them)")
       << "\n";
  const std::string body = findings.str(include_info);
  if (!body.empty()) os << "\n" << body;
  bool header = false;
  for (const SkippedChecks& s : skipped) {
    if (s.quiet) continue;
    if (!header) os << "\nchecks that did not run:\n";
    header = true;
    os << "  " << s.checks << ": " << s.reason << "; " << s.remedy << "\n";
  }
  return os.str();
}

std::string RunReport::json() const {
  std::ostringstream os;
  os << "{\"phases\":[";
  // Each phase's findings as the whole run's diagnosis places them ("index" and "caused_by" point
  // into the run's "findings"): one diagnosis, so a phase cannot disagree with the run.
  for (size_t i = 0; i < phases.size(); ++i) {
    std::vector<size_t> which;
    for (const Finding& f : phases[i].findings.findings()) {
      const int64_t k = findings.index_of(f);
      if (k >= 0 && std::find(which.begin(), which.end(), static_cast<size_t>(k)) == which.end())
        which.push_back(static_cast<size_t>(k));
    }
    os << (i ? "," : "") << "{\"name\":" << json_str(phases[i].name)
       << ",\"ran\":" << (phases[i].ran ? "true" : "false") << ",\"note\":" << json_str(phases[i].note)
       << ",\"findings\":" << findings.json(which) << "}";
  }
  os << "],\"skipped\":[";
  for (size_t i = 0; i < skipped.size(); ++i)
    os << (i ? "," : "") << "{\"checks\":" << json_str(skipped[i].checks)
       << ",\"reason\":" << json_str(skipped[i].reason) << ",\"remedy\":" << json_str(skipped[i].remedy) << "}";
  // The diagnosis over every phase: the lead, and the findings with their causes (indices into this array).
  os << "],\"lead\":" << findings.lead_json() << ",\"findings\":" << findings.json() << ",\"steps\":" << steps
     << ",\"stopped\":" << json_str(stopped) << ",\"report\":" << json_str(html_path)
     << ",\"explore\":" << json_str(explore_path) << "}";
  return os.str();
}

}  // namespace gradsleuth::debug
