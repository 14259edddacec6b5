// W6 training logs and plots: the HTML page (findings in the diagnosis's order, the lead, plots,
// heat maps, the graph) and the metric files (CSV, JSON lines). See html_report.h.
#include "debug/report/html_report.h"

#include "core/format.h"
#include "core/io.h"
#include "debug/diagnosis/diagnosis.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "debug/evidence/catalogue.h"
#include "debug/report/html_util.h"

namespace gradsleuth::debug {

using namespace html_detail;

namespace testing {
void set_report_write_failure(std::optional<uint64_t> after_bytes) {
  gradsleuth::testing::set_file_write_failure(after_bytes);
}
}  // namespace testing

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {
// An SVG document from Graphviz, ready to embed in HTML: its XML prolog and doctype removed.
std::string embeddable_svg(const std::string& svg) {
  const size_t p = svg.find("<svg");
  return p == std::string::npos ? std::string() : svg.substr(p);
}

// Text of several lines (a model summary in a finding's cause, a report) is set in a fixed-width
// font, so its columns line up; the style sheet keeps the line breaks of every table cell.
const char* lines_class(const std::string& s) { return s.find('\n') == std::string::npos ? "" : " class=\"lines\""; }
std::string text_cell(const std::string& s) {
  return std::string("<td") + lines_class(s) + ">" + html_escape(s) + "</td>";
}
// Three lines or more: shown in a full-width row of its own (see render_html's findings table).
bool is_long_text(const std::string& s) {
  const std::string t = s.substr(0, s.find_last_not_of('\n') + 1);
  return std::count(t.begin() + static_cast<std::ptrdiff_t>(std::min(t.find_first_not_of('\n'), t.size())), t.end(),
                    '\n') >= 2;
}
std::string trim_newlines(const std::string& s) {
  const size_t b = s.find_first_not_of('\n');
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of('\n') - b + 1);
}

std::string figure(const Plot& p) {
  return "<figure>\n" + render_svg(p) + "\n" +
         (p.caption.empty() ? std::string() : "<figcaption>" + html_escape(p.caption) + "</figcaption>\n") +
         "</figure>\n";
}
std::string figure(const HeatMap& h) {
  return "<figure>\n" + render_heatmap(h) + "\n" +
         (h.caption.empty() ? std::string() : "<figcaption>" + html_escape(h.caption) + "</figcaption>\n") +
         "</figure>\n";
}
}  // namespace

// ---- the page -------------------------------------------------------------------------
std::string render_html(const HtmlReport& rep) {
  const std::string title = rep.title.empty() ? "gradsleuth report" : rep.title;
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
     << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n"
     << "<title>" << html_escape(title) << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n";
  os << "<h1>" << html_escape(title) << "</h1>\n";
  os << "<p class=\"note\">Written by gradsleuth's debug module (W6). Self-contained: no scripts, no network.</p>\n";

  if (rep.lead) {
    const LeadFinding& l = *rep.lead;
    const Finding& f = l.finding;
    // What the lead names, for tools that check the page (scripts/check_report_browser.sh).
    os << "<section class=\"lead\" data-check=\"" << html_escape(f.check) << "\" data-module=\""
       << html_escape(f.module) << "\" data-parameter=\"" << html_escape(f.parameter)
       << "\">\n<h2>Diagnosis: " << html_escape(check_label(f.check)) << "</h2>\n";
    os << "<p><strong>" << severity_name(f.severity) << ":</strong> " << html_escape(f.title) << "</p>\n";
    if (!f.location().empty()) os << "<p>where: " << html_escape(f.location()) << "</p>\n";
    if (!f.cause.empty()) os << "<p" << lines_class(f.cause) << ">likely cause: " << html_escape(f.cause) << "</p>\n";
    if (!f.fix.empty()) os << "<p" << lines_class(f.fix) << ">fix: " << html_escape(f.fix) << "</p>\n";
    if (!l.why.empty() || l.follow_on > 0)
      os << "<p class=\"note\">" << html_escape(l.why)
         << (l.follow_on > 0 ? (l.why.empty() ? "" : "; ") + std::string("and ") + std::to_string(l.follow_on) +
                                   " follow-on finding" + (l.follow_on == 1 ? "" : "s") + " below"
                             : std::string())
         << "</p>\n";
    for (const HeatMap& h : l.heatmaps) os << figure(h);
    for (const Plot& p : l.plots) os << figure(p);
    os << "</section>\n";
  }

  if (!rep.summary.empty()) {
    os << "<h2>Summary</h2>\n<table class=\"summary\">\n";
    for (const auto& [k, v] : rep.summary) os << "<tr><th>" << html_escape(k) << "</th>" << text_cell(v) << "</tr>\n";
    os << "</table>\n";
  }

  os << "<h2>Findings</h2>\n";
  if (rep.findings.empty()) {
    os << "<p>No findings.</p>\n";
  } else {
    // Root causes first (Report::groups: earliest first, errors first at one time), each
    // with its consequences folded under it; then the info findings.
    auto row = [](const Finding& f) {
      std::string ev;
      for (size_t i = 0; i < f.evidence.size(); ++i) {
        const Evidence& e = f.evidence[i];
        if (i) ev += "<br/>";
        ev += html_escape(e.name + " = " + fmt_num(e.value) + (e.rule.empty() ? "" : " (" + e.rule + ")"));
      }
      // A cause or fix of several lines (a model summary, a per-module list) reads best at the
      // table's width: in a row of its own under the finding, its cell pointing there.
      const bool long_cause = is_long_text(f.cause), long_fix = is_long_text(f.fix);
      std::ostringstream r;
      r << "<tr class=\"" << severity_class(f.severity) << "\"><td class=\"sev\">" << severity_name(f.severity)
        << "</td><td>" << html_escape(check_label(f.check)) << "</td>" << text_cell(f.title) << "<td>"
        << html_escape(f.location()) << "</td><td>" << ev << "</td>"
        << (long_cause ? "<td class=\"note\">(below)</td>" : text_cell(f.cause))
        << (long_fix ? "<td class=\"note\">(below)</td>" : text_cell(f.fix)) << "<td>" << f.count
        << (f.step >= 0 ? " (step " + std::to_string(f.step) + ")" : "") << "</td></tr>\n";
      for (const auto& [label, text] : {std::pair<const char*, const std::string*>{"likely cause", &f.cause},
                                        std::pair<const char*, const std::string*>{"fix", &f.fix}})
        if (is_long_text(*text))
          r << "<tr class=\"" << severity_class(f.severity)
            << " detail\"><td></td><td colspan=\"7\"><div class=\"lines\">" << label << ":\n"
            << html_escape(trim_newlines(*text)) << "</div></td></tr>\n";
      return r.str();
    };
    const std::string head =
        "<tr><th>severity</th><th>check</th><th>what</th><th>where</th><th>evidence</th>"
        "<th>likely cause</th><th>fix</th><th>seen</th></tr>\n";
    os << "<table class=\"findings\">\n" << head;
    const std::vector<Finding>& all = rep.findings.findings();
    // Each finding as the diagnosis words it: a symptom's cause line names only what its probes
    // did not rule out (or the cause that explains it), and a follow-on says why it follows.
    const CauseAnalysis& a = rep.findings.diagnosis();
    auto shown = [&](size_t i) {
      Finding f = all[i];
      if (!a.cause_text[i].empty())
        f.cause = a.cause_text[i];
      else if (!a.because[i].empty())
        f.cause = a.because[i] + (f.cause.empty() ? "" : "; " + f.cause);
      if (!a.fix_text[i].empty()) f.fix = a.fix_text[i];
      return f;
    };
    for (const FindingGroup& g : rep.findings.groups()) {
      os << row(shown(g.root));
      if (g.follow_on.empty()) continue;
      // Collapsed: a <details> element needs no script.
      os << "<tr class=\"follow-on\"><td colspan=\"8\"><details><summary>and " << g.follow_on.size()
         << " follow-on finding" << (g.follow_on.size() == 1 ? "" : "s") << " (explained by " << html_escape(g.rule)
         << ")</summary>\n<table class=\"findings\">\n"
         << head;
      for (size_t i : g.follow_on) os << row(shown(i));
      os << "</table>\n</details></td></tr>\n";
    }
    for (const Finding& f : all)
      if (!f.fires()) os << row(f);
    os << "</table>\n";
  }

  if (!rep.plots.empty() || !rep.heatmaps.empty()) {
    os << "<h2>Plots</h2>\n";
    for (const Plot& p : rep.plots) os << figure(p);
    for (const HeatMap& h : rep.heatmaps) os << figure(h);
  }
  if (!rep.graph_svg.empty() || !rep.graph_dot.empty()) {
    if (!rep.graph_svg.empty()) {
      os << "<h2>Autograd graph</h2>\n<div class=\"graph\">\n" << embeddable_svg(rep.graph_svg) << "\n</div>\n";
    } else {
      // The fallback for a machine without Graphviz (scripts/setup.sh installs it).
      os << "<h2>Autograd graph (fallback: DOT text, no picture)</h2>\n<p class=\"fallback\"><strong>Graphviz is "
            "not installed</strong>, so the graph could not be drawn. Install it (scripts/setup.sh, or apt-get "
            "install graphviz) and run again for a picture; until then, the graph in Graphviz's DOT language "
            "(paste it into any DOT viewer):</p>\n<pre class=\"dot-fallback\">"
         << html_escape(rep.graph_dot) << "</pre>\n";
    }
  }
  for (const TextSection& t : rep.sections)
    os << "<h2>" << html_escape(t.title) << "</h2>\n<pre>" << html_escape(t.text) << "</pre>\n";
  os << "</body>\n</html>\n";
  return os.str();
}

void write_html_report(const std::string& path, const HtmlReport& report) {
  write_file_atomic(path, render_html(report), "debug::write_html_report");
}

// ---- metric files ---------------------------------------------------------------------
namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// Splits one CSV line into fields (quotes as RFC 4180, no embedded newlines).
std::vector<std::string> csv_split(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"')
        out.back() += '"', ++i;
      else if (c == '"')
        quoted = false;
      else
        out.back() += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else if (c != '\r') {
      out.back() += c;
    }
  }
  return out;
}

double parse_value(const std::string& s) {
  if (s == "nan" || s == "-nan") return std::nan("");
  if (s == "inf") return INFINITY;
  if (s == "-inf") return -INFINITY;
  size_t used = 0;
  const double v = std::stod(s, &used);
  if (used != s.size()) throw std::invalid_argument(s);
  return v;
}

}  // namespace

MetricsLog::MetricsLog(const std::string& dir, bool append) : dir_(dir.empty() ? "." : dir) {
  const char* op = "debug::MetricsLog";
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  GS_CHECK(!ec && std::filesystem::is_directory(dir_), op, "cannot create the metrics directory '", dir_,
           "': ", ec ? ec.message() : "a file with that name exists", ".");
  const bool had_csv = std::filesystem::exists(csv_path());
  if (append && had_csv)
    for (Series& s : read_metrics_csv(csv_path())) {
      index_[s.name] = series_.size();
      series_.push_back(std::move(s));
    }
  const auto mode = append ? std::ios::app : std::ios::trunc;
  csv_.open(csv_path(), std::ios::out | mode);
  jsonl_.open(jsonl_path(), std::ios::out | mode);
  GS_CHECK(csv_.good(), op, "cannot open '", csv_path(), "' for writing: ", errno_str());
  GS_CHECK(jsonl_.good(), op, "cannot open '", jsonl_path(), "' for writing: ", errno_str());
  if (!(append && had_csv)) csv_ << "step,name,value\n";
  csv_.flush();
}

void MetricsLog::record(int64_t step, const std::string& name, double value) {
  GS_CHECK(!name.empty(), "debug::MetricsLog::log", "a metric needs a name (step ", step, ")");
  auto it = index_.find(name);
  if (it == index_.end()) {
    it = index_.emplace(name, series_.size()).first;
    series_.push_back(Series{name, {}, {}});
  }
  series_[it->second].x.push_back(static_cast<double>(step));
  series_[it->second].y.push_back(value);
  csv_ << step << "," << csv_field(name) << "," << num_text(value) << "\n";
}

void MetricsLog::check_streams() {
  csv_.flush();
  jsonl_.flush();
  GS_CHECK(csv_.good(), "debug::MetricsLog::log", "writing '", csv_path(), "' failed (disk full?)");
  GS_CHECK(jsonl_.good(), "debug::MetricsLog::log", "writing '", jsonl_path(), "' failed (disk full?)");
}

void MetricsLog::log(int64_t step, const std::string& name, double value) { log(step, {{name, value}}); }

void MetricsLog::log(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string line = "{\"step\":" + std::to_string(step);
  for (const auto& [name, v] : values) {
    record(step, name, v);
    line += "," + json_str(name) + ":" + (std::isfinite(v) ? num_text(v) : "null");
  }
  jsonl_ << line << "}\n";
  check_streams();
}

std::vector<std::string> MetricsLog::names() const {
  std::vector<std::string> out;
  for (const Series& s : series_) out.push_back(s.name);
  return out;
}

Series MetricsLog::series(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? Series{name, {}, {}} : series_[it->second];
}

Plot series_plot(const std::string& title, const std::string& y_label, bool log_y,
                 const std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>>& s,
                 size_t max_series) {
  Plot p;
  p.title = title;
  p.x_label = "step";
  p.y_label = y_label;
  p.log_y = log_y;
  for (size_t i = 0; i < s.size() && i < max_series; ++i) {
    Series se;
    se.name = s[i].first;
    for (auto& [x, y] : s[i].second) {
      se.x.push_back(static_cast<double>(x));
      se.y.push_back(y);
    }
    p.series.push_back(std::move(se));
  }
  return p;
}

Plot MetricsLog::plot(const std::string& title, const std::string& name_prefix, bool log_y,
                      const std::string& y_label) const {
  Plot p;
  p.title = title;
  p.x_label = "step";
  p.log_y = log_y;
  std::string prefix_label = name_prefix;
  while (!prefix_label.empty() && prefix_label.back() == '/') prefix_label.pop_back();
  p.y_label = y_label.empty() ? prefix_label : y_label;
  for (const Series& s : series_) {
    if (s.name.compare(0, name_prefix.size(), name_prefix) != 0) continue;
    Series c = s;
    if (c.name.size() > name_prefix.size()) c.name = c.name.substr(name_prefix.size());
    p.series.push_back(std::move(c));
  }
  return p;
}

std::vector<Series> read_metrics_csv(const std::string& path) {
  const char* op = "debug::read_metrics_csv";
  std::ifstream in(path);
  GS_CHECK(in.good(), op, "cannot open '", path, "': ", errno_str());
  std::string line;
  GS_CHECK(std::getline(in, line) && csv_split(line) == std::vector<std::string>({"step", "name", "value"}), op, "'",
           path, "' does not start with the header 'step,name,value'; is it a metrics.csv written by MetricsLog?");
  std::vector<Series> out;
  std::unordered_map<std::string, size_t> index;
  for (int64_t lineno = 2; std::getline(in, line); ++lineno) {
    if (line.empty() || line == "\r") continue;
    const std::vector<std::string> f = csv_split(line);
    GS_CHECK(f.size() == 3, op, "'", path, "' line ", lineno, " has ", f.size(),
             " fields, expected 3 (step,name,value): ", line);
    double step, value;
    try {
      step = parse_value(f[0]);
      value = parse_value(f[2]);
    } catch (const std::exception&) {
      GS_FAIL(op, "'", path, "' line ", lineno, ": cannot read the numbers in '", line, "'");
    }
    auto it = index.find(f[1]);
    if (it == index.end()) {
      it = index.emplace(f[1], out.size()).first;
      out.push_back(Series{f[1], {}, {}});
    }
    out[it->second].x.push_back(step);
    out[it->second].y.push_back(value);
  }
  return out;
}

}  // namespace gradsleuth::debug
