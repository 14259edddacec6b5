// Findings and reports (see finding.h).
#include "debug/finding.h"

#include "debug/checks.h"
#include "debug/diagnosis.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

namespace gradsleuth::debug {

const char* severity_name(Severity s) {
  switch (s) {
    case Severity::Info: return "info";
    case Severity::Warning: return "warning";
    case Severity::Error: break;
  }
  return "error";
}

std::string fmt_num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  const double a = std::fabs(v);
  if (v == 0.0) return "0";
  if (a >= 1e-3 && a < 1e5) std::snprintf(buf, sizeof buf, "%.4g", v);
  else std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

std::string Finding::location() const {
  std::vector<std::string> parts;
  if (!module.empty()) parts.push_back("module " + module);
  if (!parameter.empty()) parts.push_back("parameter " + parameter);
  if (!op.empty()) parts.push_back("op " + op);
  if (!shape.empty()) parts.push_back("shape " + shape);
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i];
  return s;
}

std::string Finding::str() const {
  std::ostringstream os;
  // "[M7 warning] dead-ReLU statistics: 83% of the units ...": the id and the check's name.
  os << "[" << check << " " << severity_name(severity) << "] ";
  if (const CheckInfo* c = find_check(check)) os << c->name << ": ";
  os << title;
  if (count > 1) os << " (x" << count << ")";
  if (step >= 0) os << " (step " << step << ")";
  const std::string loc = location();
  if (!loc.empty()) os << "\n  where:    " << loc;
  for (size_t i = 0; i < evidence.size(); ++i) {
    const Evidence& e = evidence[i];
    os << (i ? "\n            " : "\n  evidence: ") << e.name << " = " << fmt_num(e.value);
    if (!e.rule.empty()) os << " (" << e.rule << ")";
  }
  if (!cause.empty()) os << "\n  cause:    " << cause;
  if (!fix.empty()) os << "\n  fix:      " << fix;
  return os.str();
}

std::string Finding::json() const {
  std::ostringstream os;
  const CheckInfo* c = find_check(check);
  os << "{\"check\":" << json_str(check) << ",\"name\":" << json_str(c ? c->name : "") << ",\"severity\":" << json_str(severity_name(severity))
     << ",\"kind\":" << json_str(std::string(kind_name(kind))) << ",\"title\":" << json_str(title) << ",\"module\":" << json_str(module)
     << ",\"parameter\":" << json_str(parameter) << ",\"op\":" << json_str(op) << ",\"shape\":" << json_str(shape)
     << ",\"evidence\":[";
  for (size_t i = 0; i < evidence.size(); ++i)
    os << (i ? "," : "") << "{\"name\":" << json_str(evidence[i].name) << ",\"value\":" << json_num(evidence[i].value)
       << ",\"rule\":" << json_str(evidence[i].rule) << "}";
  os << "],\"cause\":" << json_str(cause) << ",\"fix\":" << json_str(fix) << ",\"step\":" << step
     << ",\"count\":" << count << ",\"end_of_run\":" << (end_of_run ? "true" : "false") << "}";
  return os.str();
}

bool Finding::reports_nonfinite() const {
  if (nonfinite) return true;
  for (const Evidence& e : evidence)
    if (!std::isfinite(e.value)) return true;
  return false;
}

std::string Finding::key() const {
  // The title without its numbers: the same problem seen again with other
  // values ("logits in -1.9 .. 0.86", then "-4.4 .. 4.5") is one finding.
  std::string t;
  for (char c : title)
    if (!(c >= '0' && c <= '9') && c != '.' && c != '-' && c != '+') t += c;
  return check + '\x1f' + std::string(kind_name(kind)) + '\x1f' + t + '\x1f' + module + '\x1f' + parameter + '\x1f' + op;
}

void Report::add(Finding f) {
  std::string k = f.key();
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i] != k) continue;
    Finding& g = findings_[i];
    g.count += f.count;
    if (f.severity > g.severity) g.severity = f.severity;
    return;
  }
  findings_.push_back(std::move(f));
  keys_.push_back(std::move(k));
}

void Report::add(const std::vector<Finding>& fs) {
  for (const Finding& f : fs) add(f);
}

bool Report::fired(const std::string& check) const {
  return std::any_of(findings_.begin(), findings_.end(),
                     [&](const Finding& f) { return f.check == check && f.fires(); });
}

std::vector<std::string> Report::fired_checks() const {
  std::set<std::string> ids;
  for (const Finding& f : findings_)
    if (f.fires()) ids.insert(f.check);
  std::vector<std::string> out(ids.begin(), ids.end());
  // Natural order: group letter, then number (M2 before M19).
  std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
    if (a[0] != b[0]) return a[0] < b[0];
    return std::atoi(a.c_str() + 1) < std::atoi(b.c_str() + 1);
  });
  return out;
}

std::vector<Finding> Report::of(const std::string& check) const {
  std::vector<Finding> out;
  for (const Finding& f : findings_)
    if (f.check == check) out.push_back(f);
  return out;
}

// ---- root cause first ------------------------------------------------------------------
void Report::note_ran(const std::string& checks) {
  std::string id;
  for (char c : checks + ",") {
    if (c == ',' || c == ' ') {
      if (!id.empty()) ran_.insert(id);
      id.clear();
    } else {
      id += c;
    }
  }
}

std::pair<int, int64_t> finding_time(const Finding& f) {
  if (f.step >= 0) return {1, f.step};
  return {f.end_of_run ? 2 : 0, 0};
}

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

std::vector<FindingGroup> Report::groups() const { return groups_of(findings_, analyse_causes(*this)); }

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
  const CauseAnalysis a = analyse_causes(*this);
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
      if (it == ids.end()) ids.emplace_back(c, 1);
      else ++it->second;
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
  const CauseAnalysis a = analyse_causes(*this);
  std::string s = "[";
  for (size_t i = 0; i < findings_.size(); ++i) {
    std::string one = diagnosed(findings_[i], a, i).json();
    one.pop_back();  // the closing brace: the report adds the finding's place in the diagnosis
    const bool root = a.root[i] < 0 || a.root[i] == static_cast<int64_t>(i);
    one += ",\"index\":" + std::to_string(i) + ",\"caused_by\":" + (root ? "null" : std::to_string(a.root[i])) +
           ",\"explained_by\":" + (a.parent[i] < 0 ? "null" : std::to_string(a.parent[i])) +
           ",\"because\":" + json_str(a.because[i]) + "}";
    s += (i ? "," : "") + one;
  }
  return s + "]";
}

std::string Report::lead_json() const {
  const CauseAnalysis a = analyse_causes(*this);
  return a.lead ? a.lead->json() : "null";
}

}  // namespace gradsleuth::debug
