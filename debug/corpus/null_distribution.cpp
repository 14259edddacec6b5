// measure_null(): the corpus over seeds, every finding's evidence pooled per check and evidence
// name, with the threshold read from the rule's words and the margin to it (null_distribution.h).
#include "debug/corpus/null_distribution.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>

#include "core/format.h"
#include "core/json.h"

namespace gradsleuth::debug::corpus {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The evidence name with each number written "#".
std::string pooled_name(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const bool starts = std::isdigit(static_cast<unsigned char>(s[i])) ||
                        (s[i] == '.' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])));
    if (!starts) {
      out += s[i++];
      continue;
    }
    while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.' ||
                            ((s[i] == 'e' || s[i] == 'E') && i + 1 < s.size() &&
                             (std::isdigit(static_cast<unsigned char>(s[i + 1])) || s[i + 1] == '-'))))
      i += (s[i] == 'e' || s[i] == 'E') && s[i + 1] == '-' ? 2 : 1;
    out += '#';
  }
  return out;
}

// A number at s[i] (after spaces); advances i. NaN when there is none.
double number_at(const std::string& s, size_t& i) {
  while (i < s.size() && s[i] == ' ') ++i;
  const char* begin = s.c_str() + i;
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (end == begin) return kNaN;
  i += static_cast<size_t>(end - begin);
  return v;
}

std::string fmt(double v) { return std::isfinite(v) ? fmt_num(v) : "-"; }

}  // namespace

RuleThreshold parse_rule(const std::string& rule) {
  RuleThreshold t;
  for (const char* word : {"outside [", "inside ["}) {
    const size_t at = rule.find(word);
    if (at == std::string::npos) continue;
    size_t i = at + std::string(word).size();
    const double a = number_at(rule, i);
    while (i < rule.size() && (rule[i] == ',' || rule[i] == ' ')) ++i;
    const double b = number_at(rule, i);
    if (std::isfinite(a) && std::isfinite(b)) {
      t.op = std::string(word) == "outside [" ? "outside" : "inside";
      t.low = a;
      t.high = b;
    }
    return t;
  }
  // The first comparison the rule makes: "> 1.5 warns", "at most 1.2 (>= 2 warns)".
  for (size_t k = 0; k < rule.size(); ++k) {
    const char c = rule[k];
    if (c != '>' && c != '<') continue;
    size_t i = k + 1;
    const bool eq = i < rule.size() && rule[i] == '=';
    if (eq) ++i;
    const double v = number_at(rule, i);
    if (!std::isfinite(v)) continue;
    t.op = std::string(1, c) + (eq ? "=" : "");
    (c == '>' ? t.high : t.low) = v;
    return t;
  }
  return t;
}

double EvidenceDistribution::median() const {
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double EvidenceDistribution::margin() const {
  const std::string& op = threshold.op;
  auto ratio = [](double a, double b) { return a > 0 && b > 0 ? a / b : kNaN; };
  if (op == ">" || op == ">=") return ratio(threshold.high, max());
  if (op == "<" || op == "<=") return ratio(min(), threshold.low);
  if (op == "outside") return std::min(ratio(min(), threshold.low), ratio(threshold.high, max()));
  return kNaN;
}

double EvidenceDistribution::margin_abs() const {
  const std::string& op = threshold.op;
  if (op == ">" || op == ">=") return threshold.high - max();
  if (op == "<" || op == "<=") return min() - threshold.low;
  if (op == "outside") return std::min(min() - threshold.low, threshold.high - max());
  return kNaN;
}

NullDistribution measure_null(const std::vector<const Program*>& programs, const std::vector<uint64_t>& seeds,
                              const std::function<void(size_t, size_t, const std::string&)>& progress) {
  NullDistribution nd;
  nd.seeds = seeds;
  std::map<std::pair<std::string, std::string>, EvidenceDistribution> rows;
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<double, std::string>>> seen;
  const size_t n = programs.size() * seeds.size();
  size_t i = 0;
  for (uint64_t seed : seeds)
    for (const Program* p : programs) {
      if (progress) progress(++i, n, p->name + " (seed " + std::to_string(seed) + ")");
      const Outcome o = run_program(*p, seed);
      ++nd.runs;
      nd.runs_with_alarm += !o.report.fired_checks().empty() || !o.error.empty();
      const std::string where = p->name + "/" + std::to_string(seed);
      for (const Finding& f : o.report.findings.findings())
        for (const Evidence& e : f.evidence) {
          if (!std::isfinite(e.value)) continue;
          const auto key = std::make_pair(f.check, pooled_name(e.name));
          EvidenceDistribution& r = rows[key];
          if (r.check.empty()) {
            r.check = f.check;
            r.evidence = key.second;
          }
          if (r.rule.empty() && !e.rule.empty()) {
            r.rule = e.rule;
            r.threshold = parse_rule(e.rule);
          }
          r.warned += f.fires();
          seen[key].emplace_back(e.value, where);
        }
    }
  for (auto& [key, r] : rows) {
    auto& vs = seen[key];
    std::sort(vs.begin(), vs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [v, w] : vs) r.values.push_back(v);
    r.at_min = vs.front().second;
    r.at_max = vs.back().second;
    nd.rows.push_back(std::move(r));
  }
  std::stable_sort(nd.rows.begin(), nd.rows.end(), [](const auto& a, const auto& b) {
    // D, L, M, O, W by family, then by number: "M2" before "M14".
    auto rank = [](const std::string& c) { return std::make_pair(c.substr(0, 1), std::atoi(c.c_str() + 1)); };
    return rank(a.check) < rank(b.check);
  });
  return nd;
}

std::string null_text(const NullDistribution& nd) {
  std::string seeds;
  for (uint64_t s : nd.seeds) seeds += (seeds.empty() ? "" : ",") + std::to_string(s);
  std::string out = str_printf("the healthy corpus, %lld runs (seeds %s), %lld with a warning or error\n",
                               static_cast<long long>(nd.runs), seeds.c_str(),
                               static_cast<long long>(nd.runs_with_alarm));
  out += "margin: how far the healthy values sit from the rule's threshold (> 1: all on the quiet side)\n\n";
  out += str_printf("%-4s %-58s %5s %10s %10s %10s  %-26s %8s\n", "chk", "evidence", "n", "min", "median", "max",
                    "rule", "margin");
  for (const EvidenceDistribution& r : nd.rows) {
    std::string name = r.evidence.size() > 58 ? r.evidence.substr(0, 55) + "..." : r.evidence;
    std::string rule = r.rule.size() > 26 ? r.rule.substr(0, 23) + "..." : r.rule;
    const double m = r.margin();
    std::string margin = std::isfinite(m) ? fmt_num(m) + "x" : std::isfinite(r.margin_abs()) ? fmt(r.margin_abs()) : "";
    out += str_printf("%-4s %-58s %5zu %10s %10s %10s  %-26s %8s%s\n", r.check.c_str(), name.c_str(), r.values.size(),
                      fmt(r.min()).c_str(), fmt(r.median()).c_str(), fmt(r.max()).c_str(), rule.c_str(),
                      margin.c_str(), r.warned ? str_printf("  (%lld warned)", static_cast<long long>(r.warned)).c_str() : "");
  }
  return out;
}

std::string null_json(const NullDistribution& nd) {
  std::string seeds;
  for (uint64_t s : nd.seeds) seeds += (seeds.empty() ? "" : ",") + std::to_string(s);
  std::string out = "{\"seeds\":[" + seeds + "],\"runs\":" + std::to_string(nd.runs) +
                    ",\"runs_with_alarm\":" + std::to_string(nd.runs_with_alarm) + ",\"rows\":[";
  for (size_t i = 0; i < nd.rows.size(); ++i) {
    const EvidenceDistribution& r = nd.rows[i];
    out += std::string(i ? "," : "") + "{\"check\":" + json_str(r.check) + ",\"evidence\":" + json_str(r.evidence) +
           ",\"rule\":" + json_str(r.rule) + ",\"op\":" + json_str(r.threshold.op) +
           ",\"low\":" + json_num(r.threshold.op.empty() ? kNaN : r.threshold.low) +
           ",\"high\":" + json_num(r.threshold.op.empty() ? kNaN : r.threshold.high) +
           ",\"n\":" + std::to_string(r.values.size()) + ",\"warned\":" + std::to_string(r.warned) +
           ",\"min\":" + json_num(r.min()) + ",\"median\":" + json_num(r.median()) + ",\"max\":" + json_num(r.max()) +
           ",\"at_min\":" + json_str(r.at_min) + ",\"at_max\":" + json_str(r.at_max) +
           ",\"margin\":" + json_num(r.margin()) + ",\"margin_abs\":" + json_num(r.margin_abs()) + "}";
  }
  return out + "]}";
}

}  // namespace gradsleuth::debug::corpus
