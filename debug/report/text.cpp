// The printers of a Report (declared in debug/evidence/finding.h): the findings as text and JSON,
// grouped under their causes. Each reads the report's diagnosis (Report::diagnosis(), computed once
// per set of findings); none recomputes it.
#include <algorithm>
#include <sstream>

#include "debug/diagnosis/diagnosis.h"
#include "debug/evidence/finding.h"

namespace gradsleuth::debug {

namespace {
// The groups of an analysis already made (Report::str needs the analysis too).
std::vector<FindingGroup> groups_of(const std::vector<Finding>& findings_, const CauseAnalysis& a) {
  std::vector<FindingGroup> out;
  for (size_t root : a.roots) {
    FindingGroup g;
    g.root = root;
    for (size_t i = 0; i < findings_.size(); ++i)
      if (i != root && a.root[i] == static_cast<int64_t>(root)) g.follow_on.push_back(i);
    std::stable_sort(g.follow_on.begin(), g.follow_on.end(),
                     [&](size_t x, size_t y) { return finding_time(findings_[x]) < finding_time(findings_[y]); });
    if (!g.follow_on.empty()) {
      const Cause* c = fault_confirmed_by(findings_[root]);
      g.rule = c ? c->name : "the symptom " + findings_[root].check + " explains";
    }
    out.push_back(std::move(g));
  }
  return out;
}
}  // namespace

std::vector<FindingGroup> Report::groups() const { return groups_of(findings_, diagnosis()); }

std::vector<int64_t> Report::caused_by() const {
  std::vector<int64_t> out(findings_.size(), -1);
  for (const FindingGroup& g : groups())
    for (size_t i : g.follow_on) out[i] = static_cast<int64_t>(g.root);
  return out;
}

namespace {
// The finding as the diagnosis words it: its cause (and, for an explained symptom, its fix)
// replaced by the diagnosis's where it has one.
Finding diagnosed(const Finding& f, const CauseAnalysis& a, size_t i) {
  Finding g = f;
  if (!a.cause_text[i].empty()) g.cause = a.cause_text[i];
  if (!a.fix_text[i].empty()) g.fix = a.fix_text[i];
  return g;
}
}  // namespace

std::string Report::str(bool include_info, bool verbose) const {
  std::ostringstream os;
  const CauseAnalysis& a = diagnosis();
  bool first = true;
  if (a.lead) {
    os << a.lead->str(*this);
    first = false;
  }
  for (const FindingGroup& g : groups_of(findings_, a)) {
    os << (first ? "" : "\n") << diagnosed(findings_[g.root], a, g.root).str() << "\n";
    first = false;
    if (g.follow_on.empty()) continue;
    // "and 24 follow-on findings (explained by dead ReLU units: O1 x3, L1, O4, W3)"
    std::vector<std::pair<std::string, int>> ids;
    for (size_t i : g.follow_on) {
      const std::string& c = findings_[i].check;
      auto it = std::find_if(ids.begin(), ids.end(), [&](const auto& p) { return p.first == c; });
      if (it == ids.end())
        ids.emplace_back(c, 1);
      else
        ++it->second;
    }
    std::string list;
    for (const auto& [c, k] : ids) list += (list.empty() ? "" : ", ") + c + (k > 1 ? " x" + std::to_string(k) : "");
    os << "  and " << g.follow_on.size() << " follow-on finding" << (g.follow_on.size() == 1 ? "" : "s")
       << " (explained by " << g.rule << ": " << list << ")";
    if (!verbose) {
      os << "; str(verbose) / --verbose lists them\n";
      continue;
    }
    os << ":\n";
    for (size_t i : g.follow_on) {
      std::istringstream lines(diagnosed(findings_[i], a, i).str() + "\n  " + a.because[i]);
      bool head = true;
      for (std::string line; std::getline(lines, line); head = false) os << (head ? "  -> " : "     ") << line << "\n";
    }
  }
  if (include_info)
    for (const Finding& f : findings_) {
      if (f.fires()) continue;
      os << (first ? "" : "\n") << f.str() << "\n";
      first = false;
    }
  return os.str();
}

std::string Report::json() const {
  std::vector<size_t> all(findings_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return json(all);
}

std::string Report::json(const std::vector<size_t>& which) const {
  const CauseAnalysis& a = diagnosis();
  std::string s = "[";
  for (size_t i : which) {
    std::string one = diagnosed(findings_[i], a, i).json();
    one.pop_back();  // the closing brace: the report adds the finding's place in the diagnosis
    const bool root = a.root[i] < 0 || a.root[i] == static_cast<int64_t>(i);
    one += ",\"index\":" + std::to_string(i) + ",\"caused_by\":" + (root ? "null" : std::to_string(a.root[i])) +
           ",\"explained_by\":" + (a.parent[i] < 0 ? "null" : std::to_string(a.parent[i])) +
           ",\"because\":" + json_str(a.because[i]) + "}";
    s += (s.size() > 1 ? "," : "") + one;
  }
  return s + "]";
}

std::string Report::lead_json() const {
  const CauseAnalysis& a = diagnosis();
  return a.lead ? a.lead->json() : "null";
}

}  // namespace gradsleuth::debug
