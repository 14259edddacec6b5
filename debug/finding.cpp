// Findings and reports (see finding.h).
#include "debug/finding.h"

#include "debug/checks.h"

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

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      case '\r': o += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o + "\"";
}

std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
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
     << ",\"title\":" << json_str(title) << ",\"module\":" << json_str(module)
     << ",\"parameter\":" << json_str(parameter) << ",\"op\":" << json_str(op) << ",\"shape\":" << json_str(shape)
     << ",\"evidence\":[";
  for (size_t i = 0; i < evidence.size(); ++i)
    os << (i ? "," : "") << "{\"name\":" << json_str(evidence[i].name) << ",\"value\":" << json_num(evidence[i].value)
       << ",\"rule\":" << json_str(evidence[i].rule) << "}";
  os << "],\"cause\":" << json_str(cause) << ",\"fix\":" << json_str(fix) << ",\"step\":" << step
     << ",\"count\":" << count << ",\"end_of_run\":" << (end_of_run ? "true" : "false") << "}";
  return os.str();
}

std::string Finding::key() const {
  // The title without its numbers: the same problem seen again with other
  // values ("logits in -1.9 .. 0.86", then "-4.4 .. 4.5") is one finding.
  std::string t;
  for (char c : title)
    if (!(c >= '0' && c <= '9') && c != '.' && c != '-' && c != '+') t += c;
  return check + '\x1f' + t + '\x1f' + module + '\x1f' + parameter + '\x1f' + op;
}

void Report::add(Finding f) {
  const std::string k = f.key();
  for (Finding& g : findings_) {
    if (g.key() != k) continue;
    g.count += f.count;
    if (f.severity > g.severity) g.severity = f.severity;
    return;
  }
  findings_.push_back(std::move(f));
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
namespace {

bool word_in(const std::string& s, const char* w) {
  const std::string needle = w;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) {
    const bool left = at == 0 || !std::isalpha(static_cast<unsigned char>(s[at - 1]));
    const size_t end = at + needle.size();
    const bool right = end >= s.size() || !std::isalpha(static_cast<unsigned char>(s[end]));
    if (left && right) return true;
  }
  return false;
}

// The finding reports a non-finite value: its own numbers are NaN/Inf, it counts
// NaN/Inf values, or its title says so.
bool reports_nonfinite(const Finding& f) {
  for (const Evidence& e : f.evidence) {
    if (!std::isfinite(e.value)) return true;
    if ((word_in(e.name, "NaN") || word_in(e.name, "Inf") || e.name.find("non-finite") != std::string::npos) &&
        e.value > 0 && e.name.find("first") == std::string::npos)
      return true;
  }
  return word_in(f.title, "NaN") || word_in(f.title, "Inf") || word_in(f.title, "nan") || word_in(f.title, "inf") ||
         f.title.find("non-finite") != std::string::npos;
}

bool is(const Finding& f, std::initializer_list<const char*> ids) {
  for (const char* id : ids)
    if (f.check == id) return true;
  return false;
}

// Rule 1. The checks that localise where a non-finite value came from: each can
// start a cascade of its own.
bool nonfinite_source(const Finding& f) {
  return f.fires() && (is(f, {"D2", "M12", "W4"}) || (f.check == "L5" && f.severity == Severity::Error));
}
// A finding about non-finite values: the sources above, and the checks that see
// the NaN/Inf downstream (gradients, weights, the loss, the histories and the
// short training runs of the gate). M18 is left out: it runs its own forward in
// half precision, and its overflow is a bug of its own (B21).
bool nonfinite_member(const Finding& f) {
  if (!f.fires()) return false;
  if (nonfinite_source(f)) return true;
  if (is(f, {"O4"})) return true;                                     // non-finite weights
  if (f.check == "O1" && f.severity == Severity::Error) return true;  // O1's errors are NaN/Inf gradients
  if (is(f, {"L1", "W3", "M14", "M15", "M16", "O2", "O3", "O6", "W1", "L4", "L6", "M6", "M13"}))
    return reports_nonfinite(f);
  return false;
}

// Rule 2. A parameter the gradient does not reach: M5 names it; O1's "got no
// gradient" / "vanishing" for the same parameter is the same fact seen again.
bool cut_source(const Finding& f) { return f.fires() && f.check == "M5" && !f.parameter.empty(); }
bool cut_member(const Finding& f) {
  return cut_source(f) || (f.fires() && f.check == "O1" && f.severity == Severity::Warning && !f.parameter.empty() &&
                           (f.title.find("no gradient") != std::string::npos ||
                            f.title.find("is vanishing") != std::string::npos));
}

}  // namespace

const std::vector<CascadeRule>& cascade_rules() {
  static const std::vector<CascadeRule> rules = {
      {"non-finite values",
       "a finding that names where a NaN/Inf came from: W4 (anomaly mode: the op and module), M12 (the first "
       "module whose output is non-finite), D2 (non-finite inputs), L5 (a NaN loss from all-masked targets); "
       "without one, the earliest finding about a non-finite value",
       "the findings about non-finite values that come at or after it: O1 errors (NaN/Inf gradients), O4 "
       "(non-finite weights), and L1, W3, M14, M15, M16, O2, O3, O6, W1, L4, L6, M6, M13 when their title or "
       "evidence holds a NaN/Inf; a second source (W4, M12, D2, L5) seen at another time stays a root of its own",
       [](const Finding& f) { return nonfinite_member(f); }, [](const Finding& f) { return nonfinite_source(f); },
       [](const Finding&, const Finding& f) { return nonfinite_member(f); }},
      {"a parameter the gradient does not reach",
       "M5 naming a parameter whose gradient is missing or all zero",
       "O1's \"got no gradient\" or \"is vanishing\" warning for the same parameter",
       [](const Finding& f) { return cut_member(f); }, [](const Finding& f) { return cut_source(f); },
       [](const Finding& root, const Finding& f) {
         return cut_source(root) && f.check == "O1" && f.parameter == root.parameter && cut_member(f);
       }},
  };
  return rules;
}

std::pair<int, int64_t> finding_time(const Finding& f) {
  if (f.step >= 0) return {1, f.step};
  return {f.end_of_run ? 2 : 0, 0};
}

std::vector<FindingGroup> Report::groups() const {
  const size_t n = findings_.size();
  std::vector<int64_t> root_of(n, -1);
  std::vector<std::string> rule_of(n);
  std::vector<bool> is_root(n, false);
  const std::vector<CascadeRule>& rules = cascade_rules();
  auto is_source = [&](size_t rule, const Finding& f) { return rules[rule].is_source(f); };
  auto names_place = [](const Finding& f) { return (f.op.empty() ? 0 : 2) + (f.module.empty() ? 0 : 1); };
  // Earlier first; at one time a source first, then the one naming an op/module, errors first, report order.
  auto before = [&](size_t rule, size_t a, size_t b) {
    const Finding &x = findings_[a], &y = findings_[b];
    if (finding_time(x) != finding_time(y)) return finding_time(x) < finding_time(y);
    if (is_source(rule, x) != is_source(rule, y)) return is_source(rule, x);
    if (names_place(x) != names_place(y)) return names_place(x) > names_place(y);
    if (x.severity != y.severity) return x.severity > y.severity;
    return a < b;
  };
  for (size_t r = 0; r < rules.size(); ++r) {
    std::vector<size_t> members;
    for (size_t i = 0; i < n; ++i)
      if (root_of[i] < 0 && !is_root[i] && rules[r].is_member(findings_[i])) members.push_back(i);
    std::sort(members.begin(), members.end(), [&](size_t a, size_t b) { return before(r, a, b); });
    std::vector<size_t> roots;  // this rule's roots so far, in time order
    for (size_t m : members) {
      const Finding& f = findings_[m];
      int64_t parent = -1;
      for (auto it = roots.rbegin(); it != roots.rend() && parent < 0; ++it) {
        const Finding& root = findings_[*it];
        // A second source seen at another time is not explained by the first: it stays a root.
        if (is_source(r, f) && finding_time(f) != finding_time(root)) continue;
        if (rules[r].is_consequence(root, f)) parent = static_cast<int64_t>(*it);
      }
      if (parent >= 0) {
        root_of[m] = parent;
        rule_of[m] = rules[r].name;
      } else {
        roots.push_back(m);
        is_root[m] = true;
      }
    }
  }
  std::vector<FindingGroup> out;
  std::vector<size_t> top;
  for (size_t i = 0; i < n; ++i)
    if (findings_[i].fires() && root_of[i] < 0) top.push_back(i);
  std::sort(top.begin(), top.end(), [&](size_t a, size_t b) {
    const Finding &x = findings_[a], &y = findings_[b];
    if (finding_time(x) != finding_time(y)) return finding_time(x) < finding_time(y);
    if (x.severity != y.severity) return x.severity > y.severity;
    if (names_place(x) != names_place(y)) return names_place(x) > names_place(y);
    return a < b;
  });
  for (size_t t : top) {
    FindingGroup g;
    g.root = t;
    for (size_t i = 0; i < n; ++i)
      if (root_of[i] == static_cast<int64_t>(t)) {
        g.follow_on.push_back(i);
        g.rule = rule_of[i];
      }
    std::stable_sort(g.follow_on.begin(), g.follow_on.end(),
                     [&](size_t a, size_t b) { return finding_time(findings_[a]) < finding_time(findings_[b]); });
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<int64_t> Report::caused_by() const {
  std::vector<int64_t> out(findings_.size(), -1);
  for (const FindingGroup& g : groups())
    for (size_t i : g.follow_on) out[i] = static_cast<int64_t>(g.root);
  return out;
}

std::string Report::str(bool include_info, bool verbose) const {
  std::ostringstream os;
  bool first = true;
  for (const FindingGroup& g : groups()) {
    os << (first ? "" : "\n") << findings_[g.root].str() << "\n";
    first = false;
    if (g.follow_on.empty()) continue;
    // "and 24 follow-on findings (non-finite values: O1 x3, L1, O4, W3)"
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
       << " (consequences of " << g.rule << ": " << list << ")";
    if (!verbose) {
      os << "; str(verbose) / --verbose lists them\n";
      continue;
    }
    os << ":\n";
    for (size_t i : g.follow_on) {
      std::istringstream lines(findings_[i].str());
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
  const std::vector<int64_t> by = caused_by();
  std::string s = "[";
  for (size_t i = 0; i < findings_.size(); ++i) {
    std::string one = findings_[i].json();
    one.pop_back();  // the closing brace: the report adds the finding's place in the cascade
    one += ",\"index\":" + std::to_string(i) + ",\"caused_by\":" + (by[i] < 0 ? "null" : std::to_string(by[i])) + "}";
    s += (i ? "," : "") + one;
  }
  return s + "]";
}

}  // namespace gradsleuth::debug
