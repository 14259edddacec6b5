// Findings and reports (see finding.h).
#include "debug/evidence/finding.h"

#include "core/error.h"
#include "core/format.h"
#include "debug/evidence/catalogue.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
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
  const double a = std::fabs(v);
  if (v == 0.0) return "0";
  return a >= 1e-3 && a < 1e5 ? str_printf("%.4g", v) : str_printf("%.2e", v);
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
  os << "{\"check\":" << json_str(check) << ",\"name\":" << json_str(c ? c->name : "")
     << ",\"severity\":" << json_str(severity_name(severity)) << ",\"kind\":" << json_str(std::string(kind_name(kind)))
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

double Finding::value_of(const std::string& name) const {
  for (const Evidence& e : evidence)
    if (e.name == name) return e.value;
  return std::numeric_limits<double>::quiet_NaN();
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
  return check + '\x1f' + std::string(kind_name(kind)) + '\x1f' + t + '\x1f' + module + '\x1f' + parameter + '\x1f' +
         op;
}

int64_t Report::index_of(const Finding& f) const {
  const std::string k = f.key();
  for (size_t i = 0; i < keys_.size(); ++i)
    if (keys_[i] == k) return static_cast<int64_t>(i);
  return -1;
}

void Report::add(Finding f) {
  diagnosis_.reset();
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

void Report::replace(size_t i, Finding f) {
  GS_CHECK(i < findings_.size(), "debug::Report::replace", "finding ", i, " of ", findings_.size());
  diagnosis_.reset();
  keys_[i] = f.key();
  findings_[i] = std::move(f);
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
  diagnosis_.reset();
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

}  // namespace gradsleuth::debug
