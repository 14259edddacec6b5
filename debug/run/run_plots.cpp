// A run's plots and its HTML report (see diagnose.h): the history's series, focused on what the lead names.
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

// ---- plots of a run's history -------------------------------------------------------------
namespace {

using NamedSeries = std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>>;

// "2 (ReLU)" -> "2": the module path of a module label.
std::string module_path(const std::string& label) {
  const size_t p = label.find(" (");
  return p == std::string::npos ? label : label.substr(0, p);
}

bool all_digits(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

// A parameter of module `m` or of a module inside it: "1.weight", "1.inner.bias" for "1".
bool inside(const std::string& name, const std::string& m) {
  return name.size() > m.size() + 1 && name.compare(0, m.size(), m) == 0 && name[m.size()] == '.';
}

std::vector<std::string> names_of(const NamedSeries& s) {
  std::vector<std::string> out;
  for (const auto& e : s) out.push_back(e.first);
  return out;
}

// The series `f` names first (its own parameter before the rest of its module's), then the
// others, each group in its order; `named` gets the names of the first ones.
NamedSeries focused(const NamedSeries& s, const Finding* f, std::vector<std::string>* named = nullptr) {
  if (!f) return s;
  const std::vector<std::string> names = names_of(s);
  NamedSeries own, first, rest;
  for (const auto& e : s) {
    const bool n = names_series(*f, e.first, names);
    (!n ? rest : e.first == f->parameter ? own : first).push_back(e);
  }
  own.insert(own.end(), first.begin(), first.end());
  if (named)
    for (const auto& e : own) named->push_back(e.first);
  own.insert(own.end(), rest.begin(), rest.end());
  return own;
}

// Says which series the finding names, for a plot's caption.
std::string named_note(const std::vector<std::string>& named) {
  if (named.empty()) return "";
  std::string list;
  for (size_t i = 0; i < named.size() && i < 6; ++i) list += (i ? ", " : "") + named[i];
  if (named.size() > 6) list += ", ...";
  return " The finding is about " + list + ": listed first in the legend (the first is the thick solid line).";
}

}  // namespace

bool names_series(const Finding& f, const std::string& name, const std::vector<std::string>& names) {
  if (name.empty()) return false;
  if (!f.parameter.empty() && name == f.parameter) return true;
  if (f.module.empty()) return false;
  const std::string m = module_path(f.module);
  if (m.empty() || m == "(model)") return false;               // the whole model: nothing in particular
  if (module_path(name) == m || inside(name, m)) return true;  // the layer's own series, or its parameters
  // A module with no parameters among `names` (a ReLU) stands for the nearest earlier sibling
  // with some: in a Sequential "a.2" is fed by "a.1".
  for (const std::string& n : names)
    if (inside(n, m)) return false;
  const size_t dot = m.find_last_of('.');
  const std::string parent = dot == std::string::npos ? "" : m.substr(0, dot + 1);
  const std::string index = dot == std::string::npos ? m : m.substr(dot + 1);
  if (!all_digits(index) || index.size() > 9) return false;
  const long own = std::stol(index);
  long feeder = -1;
  for (const std::string& n : names) {
    if (n.compare(0, parent.size(), parent) != 0) continue;
    const std::string rest = n.substr(parent.size());
    const std::string k = rest.substr(0, rest.find('.'));
    if (k.size() == rest.size() || !all_digits(k) || k.size() > 9) continue;
    const long i = std::stol(k);
    if (i < own) feeder = std::max(feeder, i);
  }
  return feeder >= 0 && inside(name, parent + std::to_string(feeder));
}

Plot grad_norm_plot(const TrainingHistory& h, const Finding* focus) {
  std::vector<std::string> named;
  Plot p = series_plot("gradient norm per parameter", "||grad||", true, focused(h.grad_norms, focus, &named));
  p.caption =
      "The gradient norm of each parameter at each step. A parameter whose gradient is exactly 0 (its units "
      "dead, or the layer cut off from the loss) runs along the floor, marked x; one that grows by decades "
      "is exploding." +
      named_note(named);
  return p;
}

Plot dead_unit_plot(const TrainingHistory& h, const Finding* focus) {
  std::vector<std::string> named;
  Plot p =
      series_plot("dead-unit fraction per ReLU layer", "dead fraction", false, focused(h.dead_fraction, focus, &named));
  p.lines.push_back({0.7, "M7 flags a layer at 0.7"});
  p.caption =
      "The share of each ReLU layer's units that output 0 for every example of a batch. Healthy layers "
      "stay near 0 (their lines overlap there; each has its own dash pattern)." +
      named_note(named);
  return p;
}

Plot update_ratio_plot(const TrainingHistory& h, const Finding* focus) {
  std::vector<std::string> named;
  Plot p = series_plot("update-to-weight ratio per parameter", "||dw|| / ||w||", true,
                       focused(h.update_ratio, focus, &named));
  p.bands.push_back({1e-4, 1e-2, "healthy: about 1e-3"});
  p.lines.push_back({1e-5, "O6: too low below 1e-5"});
  p.lines.push_back({1e-1, "O6: too high above 1e-1"});
  p.caption =
      "How much each step changes a weight relative to its size. Around 1e-3 is healthy (Karpathy, "
      "CS231n); far above means the learning rate is too high, far below too low or a frozen layer." +
      named_note(named);
  return p;
}

// M28's exponent histogram against the dtype's band (Micikevicius et al.'s Figure 3: the activation
// gradients' exponents, with float16's representable range marked).
Plot range_histogram_plot(const TrainingHistory& h) {
  Plot p;
  p.title = "exponents of the 16-bit values (" + h.range_dtype + ") against its range";
  p.x_label = "exponent: floor(log2 |x|)";
  p.y_label = "values";
  p.log_y = true;
  for (const auto& [name, counts] : h.range_exponents) {
    Series s;
    s.name = name;
    // From the first to the last power of two that holds a value (a 0 between them is drawn at the floor).
    size_t a = 0, b = counts.size();
    while (a < b && counts[a].second == 0.0) ++a;
    while (b > a && counts[b - 1].second == 0.0) --b;
    for (size_t k = a; k < b; ++k) {
      s.x.push_back(static_cast<double>(counts[k].first));
      s.y.push_back(counts[k].second);
    }
    p.series.push_back(std::move(s));
  }
  const bool bf16 = h.range_dtype == "bfloat16";
  // float16: subnormals from 2^-24, normals from 2^-14, the largest 65504 < 2^16. bfloat16 holds
  // float32's range, wider than the histogram's [2^-40, 2^20].
  if (bf16) {
    p.x_bands.push_back({-40.0, 20.0, "bfloat16's range covers all of this axis (2^-133 .. 2^127)"});
  } else {
    p.x_bands.push_back({-24.0, -14.0, "float16 subnormal: 2^-24 .. 2^-14 (few bits)"});
    p.x_bands.push_back({-14.0, 16.0, "float16 normal: 2^-14 .. 65504"});
  }
  p.caption =
      "How many of the 16-bit layers' values (over the sampled steps) fall in each power of two, with the "
      "dtype's representable band shaded. Values below it are 0 in " +
      h.range_dtype + " (" + std::to_string(h.range_zeros) +
      " values were zero, exact zeros included, and are not drawn); values above it are inf. Gradients "
      "piled against the left edge of the band are what loss scaling moves back into range (M28).";
  return p;
}

// M28's heat map: layers (rows) by sampled steps (columns), the share of each layer's values out of range.
HeatMap range_heatmap(const TrainingHistory& h) {
  HeatMap m;
  m.title = "share of each 16-bit layer's values out of range, per sampled step";
  m.x_label = "sampled step";
  m.y_label = "layer";
  std::vector<int64_t> steps;
  for (const auto& [name, s] : h.range_share)
    for (const auto& [step, v] : s) steps.push_back(step);
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  m.rows = static_cast<int64_t>(h.range_share.size());
  m.cols = static_cast<int64_t>(steps.size());
  m.values.assign(static_cast<size_t>(m.rows * m.cols), 0.0);
  for (size_t i = 0; i < h.range_share.size(); ++i) {
    m.row_labels.push_back(h.range_share[i].first);
    for (const auto& [step, v] : h.range_share[i].second) {
      const size_t j = static_cast<size_t>(std::lower_bound(steps.begin(), steps.end(), step) - steps.begin());
      m.values[i * steps.size() + j] = v;
    }
  }
  for (int64_t st : steps) m.col_labels.push_back(std::to_string(st));
  m.caption = "Each cell: the share of the layer's nonzero activations and gradients at that step that are above " +
              h.range_dtype +
              "'s range, flushed to zero or in its lowest three octaves (darker: more). A row that "
              "darkens over the run is a layer whose values drift out of range.";
  return m;
}

std::vector<Plot> lead_plots(const Finding& lead, const TrainingHistory& h) {
  std::vector<Plot> out;
  const std::string& c = lead.check;
  if (c == "M7" && !h.dead_fraction.empty()) out.push_back(dead_unit_plot(h, &lead));
  if ((c == "M28" || c == "M29") && !h.range_exponents.empty()) out.push_back(range_histogram_plot(h));
  if ((c == "O6" || c == "O1" || c == "M9") && !h.update_ratio.empty()) out.push_back(update_ratio_plot(h, &lead));
  const std::vector<std::string> names = names_of(h.grad_norms);
  for (const std::string& n : names)
    if (names_series(lead, n, names)) {
      out.push_back(grad_norm_plot(h, &lead));
      break;
    }
  return out;
}

// ---- HTML -------------------------------------------------------------------------------
void write_run_report(const std::string& path, const RunReport& r, const std::string& title) {
  HtmlReport html;
  html.title = title;
  std::string fired;
  for (const std::string& c : r.fired_checks()) fired += (fired.empty() ? "" : ", ") + check_label(c);
  html.summary.push_back(
      {"training", std::to_string(r.steps) + " steps" + (r.stopped.empty() ? "" : "; " + r.stopped)});
  for (const PhaseReport& p : r.phases)
    html.summary.push_back({p.name, p.ran ? findings_count(p.findings) : "did not run: " + p.note});
  html.summary.push_back({"checks that fired", fired.empty() ? "none" : fired});
  Plot loss;
  loss.title = "training loss";
  loss.x_label = "step";
  loss.y_label = "loss";
  Series s;
  s.name = "train (per step)";
  for (size_t i = 0; i < r.history.step_losses.size(); ++i) {
    s.x.push_back(static_cast<double>(i + 1));
    s.y.push_back(r.history.step_losses[i]);
  }
  loss.series.push_back(std::move(s));
  loss.caption = "A loss that does not fall, or falls and turns back up, is where to look first.";
  html.plots.push_back(loss);
  if (!r.history.grad_norms.empty()) html.plots.push_back(grad_norm_plot(r.history));
  if (!r.history.dead_fraction.empty()) html.plots.push_back(dead_unit_plot(r.history));
  if (!r.history.update_ratio.empty()) html.plots.push_back(update_ratio_plot(r.history));
  if (!r.history.range_exponents.empty()) html.plots.push_back(range_histogram_plot(r.history));
  if (!r.history.range_share.empty()) html.heatmaps.push_back(range_heatmap(r.history));
  html.findings = r.findings;
  if (const std::optional<Finding> lead = lead_finding(r.findings)) {
    LeadFinding l;
    l.finding = *lead;
    l.why = lead_why(r.findings);
    const std::vector<FindingGroup> g = r.findings.groups();
    l.follow_on = g.empty() ? 0 : static_cast<int64_t>(g.front().follow_on.size());
    l.plots = lead_plots(*lead, r.history);
    l.plots.push_back(loss);
    html.lead = std::move(l);
  }
  if (!r.skipped.empty()) {
    std::string text;
    for (const SkippedChecks& k : r.skipped) text += k.checks + ": " + k.reason + "; " + k.remedy + "\n";
    html.sections.push_back({"Checks that did not run", text});
  }
  write_html_report(path, html);
}

}  // namespace gradsleuth::debug
