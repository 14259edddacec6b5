// W6 training logs and plots: per-step metrics as CSV and JSON lines, and an HTML
// report (inline SVG plots, findings) that opens in a browser with no server or network.
//
//   debug::MetricsLog log("runs/mlp");                 // runs/mlp/metrics.csv, metrics.jsonl
//   log.log(step, {{"loss/train", loss}, {"grad_norm/0.weight", g0}});
//   ...
//   debug::HtmlReport rep;
//   rep.title = "MLP on Fashion-MNIST";
//   rep.plots.push_back(log.plot("loss", "loss/"));                    // train and val curves
//   rep.plots.push_back(log.plot("gradient norm per layer", "grad_norm/", /*log_y=*/true));
//   rep.plots.push_back(log.plot("dead-unit fraction per ReLU layer", "dead/"));
//   rep.findings = report;                                             // a debug::Report
//   debug::write_html_report("runs/mlp/report.html", rep);
#pragma once
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "debug/evidence/finding.h"

namespace gradsleuth::debug {

// One curve: y[i] at x[i]. A y that is NaN/Inf (or <= 0 on a log axis) is drawn at the
// floor of the y axis with an x marker, and the legend says so ("0 / non-finite drawn at
// the floor"): a dead layer's gradient norm of 0 stays visible. Only a point whose x is
// not finite is left out (the legend counts it); the line joins the points on either side.
struct Series {
  std::string name;
  std::vector<double> x, y;
};

// A horizontal reference line across a plot ("chance level ln 10 = 2.303").
struct RefLine {
  double y = 0.0;
  std::string label;
};
// A shaded horizontal band ("healthy: 1e-4 .. 1e-2").
struct Band {
  double lo = 0.0, hi = 0.0;
  std::string label;
};
// A shaded vertical band over an x range ("float16's range: 2^-24 .. 2^15").
struct XBand {
  double lo = 0.0, hi = 0.0;
  std::string label;
};

struct Plot {
  std::string title, x_label, y_label;
  bool log_y = false;
  std::vector<Series> series;  // each drawn in its own colour and dash pattern, so overlapping lines stay legible
  std::vector<RefLine> lines;
  std::vector<Band> bands;
  std::string caption;  // a sentence under the plot saying what to look for
  std::vector<XBand> x_bands;
};

// One line per named series of (step, value) pairs (a TrainingHistory's grad_norms,
// dead_fraction, update_ratio), the first `max_series` of them, against "step".
Plot series_plot(const std::string& title, const std::string& y_label, bool log_y,
                 const std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>>& s,
                 size_t max_series = 12);

// A matrix drawn as coloured cells (|value| on a white-to-red scale), e.g. the
// batch-mixing Jacobian: how much output row i depends on input example j.
struct HeatMap {
  std::string title, x_label, y_label, caption;
  int64_t rows = 0, cols = 0;
  std::vector<double> values;  // rows * cols, row-major
  // Names for the rows and columns ("fc1 (Linear)", "step 10"); empty: their indices.
  std::vector<std::string> row_labels, col_labels;
};

// The finding that explains the run, shown first with the plots made for it.
struct LeadFinding {
  Finding finding;
  std::string why;        // why this one leads (lead_why)
  int64_t follow_on = 0;  // how many findings are its consequences (Report::groups)
  std::vector<Plot> plots;
  std::vector<HeatMap> heatmaps;
};

// A titled block of preformatted text (the profile, the memory report).
struct TextSection {
  std::string title, text;
};

struct HtmlReport {
  std::string title;
  std::vector<std::pair<std::string, std::string>> summary;  // key, value rows ("epochs", "5")
  std::optional<LeadFinding> lead;
  std::vector<Plot> plots;
  std::vector<HeatMap> heatmaps;  // after the plots
  Report findings;
  // The autograd graph: an SVG document from Graphviz (embedded as is), or DOT text
  // (shown as text) when Graphviz is not installed. Empty: no graph section.
  std::string graph_svg, graph_dot;
  std::vector<TextSection> sections;
};

// The finding a report should lead with: the diagnosis's lead (debug::analyse_causes), its
// cause line naming only what its probes did not rule out; nullopt when nothing fired.
std::optional<Finding> lead_finding(const Report& r);
// Why it leads, in one line: confirmed by what, what was ruled out or is left.
std::string lead_why(const Report& r);

// One heat map as an <svg> element, with the row and column indices on its axes.
std::string render_heatmap(const HeatMap& h);

// The whole page. Every text is HTML-escaped, and text of several lines keeps its line
// breaks; each plot is one <svg> with one <polyline> per series, its labels laid out so
// that none overlaps another (legend entries on rows of their own, tick labels thinned);
// void elements are written self-closed ("<meta .../>").
std::string render_html(const HtmlReport& report);
// One plot as an <svg> element (what render_html embeds).
std::string render_svg(const Plot& plot);
// & < > " ' as entities.
std::string html_escape(const std::string& s);

// Writes render_html(report) to `path` atomically: a temporary file in the same
// directory, fsync, then rename over `path`. On any failure the old file (if
// any) is unchanged and gs::Error names the path and the reason.
void write_html_report(const std::string& path, const HtmlReport& report);

// Per-step metrics in `dir` (created if missing):
//   metrics.csv     long format, one row per value:  step,name,value
//   metrics.jsonl   one JSON object per log() call:  {"step":3,"loss/train":0.52}
// Name metrics "group/member" ("loss/train", "grad_norm/0.weight"): plot()
// gathers a group into one chart. Non-finite values are written as nan/inf in
// the CSV and null in JSON. Both files are flushed after every log() call, so
// a crashed run keeps its history.
class MetricsLog {
 public:
  // append=false starts new files; append=true continues existing ones (a
  // resumed run) and reads the CSV back so plot() sees the earlier steps.
  explicit MetricsLog(const std::string& dir, bool append = false);

  void log(int64_t step, const std::string& name, double value);
  void log(int64_t step, const std::vector<std::pair<std::string, double>>& values);

  const std::string& dir() const { return dir_; }
  std::string csv_path() const { return dir_ + "/metrics.csv"; }
  std::string jsonl_path() const { return dir_ + "/metrics.jsonl"; }

  // Names in the order they were first logged.
  std::vector<std::string> names() const;
  // x = step, y = value, in logging order; empty series if never logged.
  Series series(const std::string& name) const;
  // A plot of every series whose name starts with `name_prefix`, each labelled
  // by the rest of its name ("loss/" -> "train", "val"). y_label defaults to
  // the prefix without its trailing '/'.
  Plot plot(const std::string& title, const std::string& name_prefix, bool log_y = false,
            const std::string& y_label = "") const;

 private:
  void record(int64_t step, const std::string& name, double value);
  void check_streams();

  std::string dir_;
  std::ofstream csv_, jsonl_;
  std::vector<Series> series_;
  std::unordered_map<std::string, size_t> index_;
};

// Reads a metrics.csv written by MetricsLog: one Series per name, in file order.
std::vector<Series> read_metrics_csv(const std::string& path);

namespace testing {
// Makes the next atomic writes fail after `after_bytes` bytes of the temporary
// file (std::nullopt: off), to test that a failed write leaves the old file.
void set_report_write_failure(std::optional<uint64_t> after_bytes);
}  // namespace testing

}  // namespace gradsleuth::debug
