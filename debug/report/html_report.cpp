// W6: metric files (CSV, JSON lines), SVG plots drawn here (axes, ticks,
// legend, one polyline per series) and the HTML page with its atomic write.
#include "debug/report/html_report.h"

#include "core/io.h"
#include "debug/diagnosis/diagnosis.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "debug/evidence/catalogue.h"

namespace gradsleuth::debug {

namespace {

std::string errno_str() { return std::strerror(errno); }

// Shortest text that reads back as the same double; nan / inf / -inf otherwise.
std::string num_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

// Two decimals are plenty for SVG coordinates.
std::string coord(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

// A tick label: 0.001, 250, 1e+06 (no "-0").
std::string tick_text(double v) {
  if (v == 0.0) return "0";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

// The colours of matplotlib's "tab10": distinct, readable, colour-blind aware.
const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                          "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr size_t kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

// A step of 1, 2 or 5 x 10^k near range / target (range finite and > 0).
double nice_step(double range, int target) {
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f < 1.5 ? 1.0 : f < 3.5 ? 2.0 : f < 7.5 ? 5.0 : 10.0) * mag;
}

// Axis ranges are sanitised so that every tick computation is finite: values
// beyond +-kAxisClip are clipped (the span of +-1e308 overflows a double), and
// a span below kAxisMinSpan (denormals: {0, 5e-324}) is drawn as one value.
constexpr double kAxisClip = 1e306;
constexpr double kAxisMinSpan = 1e-290;
constexpr int kMaxTicks = 64;  // the tick loop is bounded whatever the range

// An axis: the data range widened to round ticks. For a log axis, lo/hi and
// the ticks are log10 of the values. `clipped`: the data went past +-kAxisClip.
struct Axis {
  double lo = 0.0, hi = 1.0;
  std::vector<double> ticks;
  bool log = false;
  bool clipped = false;
};

Axis make_axis(double lo, double hi, bool log) {
  Axis a;
  a.log = log;
  if (!(lo <= hi) || !std::isfinite(lo) || !std::isfinite(hi)) lo = 0.0, hi = 1.0;  // no finite data
  if (log) {  // log10 values are within [-324, 309]: always finite
    lo = std::floor(lo), hi = std::ceil(hi);
    if (hi <= lo) hi = lo + 1.0;
    const int decades = static_cast<int>(hi - lo);
    const int every = std::max(1, (decades + 7) / 8);  // at most ~8 labels
    for (double t = lo; t <= hi + 1e-9 && a.ticks.size() < kMaxTicks; t += every) a.ticks.push_back(t);
    a.lo = lo, a.hi = hi;
    return a;
  }
  if (lo < -kAxisClip || hi > kAxisClip) {
    a.clipped = true;
    lo = std::clamp(lo, -kAxisClip, kAxisClip), hi = std::clamp(hi, -kAxisClip, kAxisClip);
  }
  if (hi - lo < kAxisMinSpan || hi - lo <= std::max(std::fabs(lo), std::fabs(hi)) * 1e-12) {
    const double mid = std::fabs(lo) < kAxisMinSpan ? 0.0 : lo;
    const double pad = mid == 0.0 ? 1.0 : std::fabs(mid) * 0.1;
    lo = mid - pad, hi = mid + pad;
  }
  const double step = nice_step(hi - lo, 5);
  a.lo = std::floor(lo / step + 1e-9) * step;
  a.hi = std::ceil(hi / step - 1e-9) * step;
  if (!(step > 0.0) || !std::isfinite(step) || !std::isfinite(a.lo) || !std::isfinite(a.hi) || !(a.lo < a.hi)) {
    a.lo = lo, a.hi = hi;  // cannot happen after the sanitising above; never loop on it anyway
    a.ticks = {lo, hi};
    return a;
  }
  for (int i = 0; i < kMaxTicks; ++i) {
    double t = a.lo + i * step;
    if (t > a.hi + step * 1e-6) break;
    if (std::fabs(t) < step * 1e-9) t = 0.0;
    a.ticks.push_back(t);
  }
  return a;
}

std::string log_tick_text(double e) {
  const double v = std::pow(10.0, e);
  if (e >= -3 && e <= 4) return tick_text(v);
  return "1e" + std::to_string(static_cast<int>(e));
}

// Dash patterns cycled over series (solid, dashed, dotted, dash-dot).
std::string dash_attr(size_t series_index) {
  static const char* kDash[] = {"", "8 4", "2 3", "10 3 2 3"};
  const char* d = kDash[series_index % 4];
  return *d ? std::string(" stroke-dasharray=\"") + d + "\"" : std::string();
}

// ---- label layout: no text drawn over another ---------------------------------------------
// A label's box is estimated from its length: a glyph of the sans-serif fonts browsers pick
// is at most ~0.65 em wide (0.72 em bold), and a line reaches ~0.95 em above its baseline and
// ~0.25 em below it. The estimates err on the large side, so labels kept apart here are apart
// in the browser too.
constexpr double kGlyphEm = 0.65, kBoldGlyphEm = 0.72;

// Characters, not bytes: UTF-8 continuation bytes do not count.
size_t glyphs(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}
double text_width(const std::string& s, double font, bool bold = false) {
  return static_cast<double>(glyphs(s)) * font * (bold ? kBoldGlyphEm : kGlyphEm);
}

struct Box {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  bool hits(const Box& o, double gap) const {
    return x0 < o.x1 + gap && o.x0 < x1 + gap && y0 < o.y1 + gap && o.y0 < y1 + gap;
  }
};
enum class Anchor { Start, Middle, End };
// The box of a label drawn at (x, baseline y) with SVG's text-anchor `a`.
Box text_box(const std::string& s, double x, double y, double font, Anchor a) {
  const double w = text_width(s, font);
  const double x0 = a == Anchor::Start ? x : a == Anchor::Middle ? x - w / 2 : x - w;
  return {x0, y - 0.95 * font, x0 + w, y + 0.25 * font};
}
// The labels placed so far: place() takes a label only where it keeps `gap` pixels from each.
struct Layout {
  std::vector<Box> boxes;
  bool place(const Box& b, double gap) {
    for (const Box& o : boxes)
      if (b.hits(o, gap)) return false;
    boxes.push_back(b);
    return true;
  }
};

// The first `n` characters of s (UTF-8 aware).
std::string prefix_glyphs(const std::string& s, size_t n) {
  size_t i = 0, seen = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (seen == n) break;
      ++seen;
    }
  }
  return s.substr(0, i);
}
// s cut to fit `width` pixels at `font`, ending in "..." when cut.
std::string fit_text(const std::string& s, double width, double font) {
  const auto n = static_cast<size_t>(std::max(0.0, width / (font * kGlyphEm)));
  if (glyphs(s) <= n) return s;
  return n <= 3 ? prefix_glyphs(s, n) : prefix_glyphs(s, n - 3) + "...";
}
// s broken into lines of at most `per_line` characters at spaces (a longer word is cut), at
// most `max_lines` of them (the last ending in "..." when text is left over).
std::vector<std::string> wrap_text(const std::string& s, size_t per_line, size_t max_lines) {
  per_line = std::max<size_t>(per_line, 4);
  std::vector<std::string> lines;
  std::string rest = s;
  while (!rest.empty()) {
    if (lines.size() + 1 == max_lines || glyphs(rest) <= per_line) {
      lines.push_back(glyphs(rest) <= per_line ? rest : prefix_glyphs(rest, per_line - 3) + "...");
      break;
    }
    std::string head = prefix_glyphs(rest, per_line + 1);
    size_t cut = head.find_last_of(' ');
    if (cut == std::string::npos || cut == 0) cut = prefix_glyphs(rest, per_line).size();
    lines.push_back(rest.substr(0, cut));
    rest = rest.substr(cut);
    while (!rest.empty() && rest.front() == ' ') rest.erase(0, 1);
  }
  if (lines.empty()) lines.push_back("");
  return lines;
}

const char* severity_class(Severity s) {
  switch (s) {
    case Severity::Error: return "sev-error";
    case Severity::Warning: return "sev-warning";
    case Severity::Info: break;
  }
  return "sev-info";
}

constexpr const char* kStyle = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1100px; color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; }
h2 { font-size: 1.25em; margin-top: 1.6em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 0.3em 0.6em; text-align: left; vertical-align: top; font-size: 0.92em; }
/* A multi-line title, cause, fix, evidence or summary value keeps its line breaks (and indentation). */
td, .lead p { white-space: pre-wrap; }
table, tr.follow-on > td { white-space: normal; }
.lines { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 0.85em; }
div.lines { white-space: pre-wrap; }
th { background: #f4f4f4; }
td.sev { font-weight: bold; white-space: nowrap; }
tr.sev-error td.sev { background: #fbe3e3; color: #a40000; }
tr.sev-warning td.sev { background: #fff1d6; color: #8a5a00; }
tr.sev-info td.sev { background: #e4eefb; color: #1f4f8a; }
tr.follow-on > td { background: #fafafa; }
tr.follow-on summary { cursor: pointer; color: #555; }
figure { margin: 1em 0; }
figure svg { width: 100%; height: auto; }
figure svg.heatmap { width: auto; max-width: 100%; }  /* at its own size: a 12 x 12 map is not blown up */
figcaption { color: #444; font-size: 0.9em; margin-top: 0.3em; }
svg { background: #fff; border: 1px solid #e4e4e4; }
.lead { border: 2px solid #c33; border-radius: 6px; padding: 0.2em 1em 0.8em; background: #fff8f8; }
.lead h2 { border: none; margin-top: 0.6em; }
pre { background: #f7f7f7; border: 1px solid #e4e4e4; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
.graph svg { border: none; }
svg text { font-family: system-ui, Helvetica, Arial, sans-serif; fill: #222; }
.note { color: #666; font-size: 0.9em; }
.fallback { background: #fff1d6; border: 1px solid #e0c080; padding: 0.4em 0.6em; }
)";

}  // namespace

namespace testing {
void set_report_write_failure(std::optional<uint64_t> after_bytes) { gradsleuth::testing::set_file_write_failure(after_bytes); }
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

// ---- SVG plots ------------------------------------------------------------------------
std::string render_svg(const Plot& plot) {
  // Canvas, legend column and margins, in SVG pixels; the left margin grows with the y tick labels.
  constexpr double W = 980, H = 400, R = 280, T = 42, B = 58;
  constexpr double kTick = 11, kLegend = 11, kAxisTitle = 12;

  // A point is drawn where its value is when it is finite (and > 0 on a log axis); a zero or
  // non-finite value is drawn at the floor of the y axis with a marker; only a point whose x is
  // not finite cannot be placed.
  auto usable = [&](double y) { return std::isfinite(y) && (!plot.log_y || y > 0.0); };
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  size_t drawn = 0, floored = 0, dropped = 0;
  for (const Series& s : plot.series) {
    const size_t n = std::min(s.x.size(), s.y.size());
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(s.x[i])) {
        ++dropped;
        continue;
      }
      xlo = std::min(xlo, s.x[i]), xhi = std::max(xhi, s.x[i]);
      if (!usable(s.y[i])) {
        ++floored;
        continue;
      }
      const double y = plot.log_y ? std::log10(s.y[i]) : s.y[i];
      ylo = std::min(ylo, y), yhi = std::max(yhi, y);
      ++drawn;
    }
  }
  // Reference lines and bands are part of the y range: a chance level or a healthy band far
  // from the data is the point of drawing it.
  auto take_y = [&](double y) {
    if (!usable(y)) return;
    const double v = plot.log_y ? std::log10(y) : y;
    ylo = std::min(ylo, v), yhi = std::max(yhi, v);
  };
  if (drawn > 0) {
    for (const RefLine& l : plot.lines) take_y(l.y);
    for (const Band& b : plot.bands) take_y(b.lo), take_y(b.hi);
    // The floor sits below the smallest value drawn (a decade on a log axis), so a point at
    // the floor is never mistaken for the smallest one.
    if (floored > 0 && plot.log_y) ylo -= 1.0;
    if (floored > 0 && !plot.log_y) {  // halves first: the span of +-1e308 overflows a double
      const double lower = ylo - std::max((yhi / 2 - ylo / 2) * 0.2, std::fabs(ylo) * 1e-3);
      ylo = std::isfinite(lower) ? lower : -std::numeric_limits<double>::max();
    }
  }
  const Axis ax = make_axis(xlo, xhi, false), ay = make_axis(ylo, yhi, plot.log_y);
  std::vector<std::string> ytexts;
  double ytick_w = 0.0;
  for (double t : ay.ticks) {
    ytexts.push_back(plot.log_y ? log_tick_text(t) : tick_text(t));
    ytick_w = std::max(ytick_w, text_width(ytexts.back(), kTick));
  }
  // Left to right: the rotated y-axis title, a gap, the tick labels, the tick marks.
  const double L = std::max(72.0, ytick_w + 34.0);
  const double PW = W - L - R, PH = H - T - B;
  // Positions are computed on the clipped range and kept inside the plot area, so
  // every coordinate written is finite (a clipped axis says so in its label).
  auto clip = [](double v, double lo, double hi) { return std::isfinite(v) ? std::clamp(v, lo, hi) : lo; };
  auto px = [&](double x) {
    return clip(L + (clip(x, -kAxisClip, kAxisClip) - ax.lo) / (ax.hi - ax.lo) * PW, L, L + PW);
  };
  auto py = [&](double y) {
    if (!usable(y)) return T + PH;  // the floor
    const double v = plot.log_y ? std::log10(y) : clip(y, -kAxisClip, kAxisClip);
    return clip(T + PH - (v - ay.lo) / (ay.hi - ay.lo) * PH, T, T + PH);
  };
  auto py_axis = [&](double t) { return T + PH - (t - ay.lo) / (ay.hi - ay.lo) * PH; };  // t already in axis units

  std::ostringstream os;
  os << "<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
     << "\" viewBox=\"0 0 " << W << " " << H << "\" role=\"img\" aria-label=\"" << html_escape(plot.title) << "\">\n";
  os << "<title>" << html_escape(plot.title) << "</title>\n";
  os << "<text x=\"" << coord(L + PW / 2) << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">"
     << html_escape(plot.title) << "</text>\n";

  // Grid and ticks.
  os << "<g class=\"grid\" stroke=\"#e8e8e8\" stroke-width=\"1\">\n";
  for (double t : ax.ticks)
    os << "<line x1=\"" << coord(px(t)) << "\" y1=\"" << coord(T) << "\" x2=\"" << coord(px(t)) << "\" y2=\""
       << coord(T + PH) << "\"/>\n";
  for (double t : ay.ticks)
    os << "<line x1=\"" << coord(L) << "\" y1=\"" << coord(py_axis(t)) << "\" x2=\"" << coord(L + PW) << "\" y2=\""
       << coord(py_axis(t)) << "\"/>\n";
  os << "</g>\n";
  os << "<g class=\"axes\" stroke=\"#444\" stroke-width=\"1\">\n";
  os << "<line x1=\"" << coord(L) << "\" y1=\"" << coord(T + PH) << "\" x2=\"" << coord(L + PW) << "\" y2=\""
     << coord(T + PH) << "\"/>\n";
  os << "<line x1=\"" << coord(L) << "\" y1=\"" << coord(T) << "\" x2=\"" << coord(L) << "\" y2=\"" << coord(T + PH)
     << "\"/>\n";
  for (double t : ax.ticks)
    os << "<line x1=\"" << coord(px(t)) << "\" y1=\"" << coord(T + PH) << "\" x2=\"" << coord(px(t)) << "\" y2=\""
       << coord(T + PH + 5) << "\"/>\n";
  for (double t : ay.ticks)
    os << "<line x1=\"" << coord(L - 5) << "\" y1=\"" << coord(py_axis(t)) << "\" x2=\"" << coord(L) << "\" y2=\""
       << coord(py_axis(t)) << "\"/>\n";
  os << "</g>\n";
  // Tick labels, thinned: a label that would touch one already placed (on either axis) is left
  // out; its tick mark and grid line stay.
  os << "<g class=\"tick-labels\" font-size=\"" << kTick << "\">\n";
  {
    Layout ticks;
    for (double t : ax.ticks) {
      const std::string s = tick_text(t);
      if (ticks.place(text_box(s, px(t), T + PH + 18, kTick, Anchor::Middle), 4.0))
        os << "<text x=\"" << coord(px(t)) << "\" y=\"" << coord(T + PH + 18) << "\" text-anchor=\"middle\">"
           << html_escape(s) << "</text>\n";
    }
    for (size_t k = 0; k < ay.ticks.size(); ++k) {
      const double y = py_axis(ay.ticks[k]) + 4;
      if (ticks.place(text_box(ytexts[k], L - 8, y, kTick, Anchor::End), 2.0))
        os << "<text x=\"" << coord(L - 8) << "\" y=\"" << coord(y) << "\" text-anchor=\"end\">"
           << html_escape(ytexts[k]) << "</text>\n";
    }
  }
  os << "</g>\n";
  os << "<text x=\"" << coord(L + PW / 2) << "\" y=\"" << coord(H - 14) << "\" text-anchor=\"middle\" font-size=\""
     << kAxisTitle << "\">" << html_escape(plot.x_label + (ax.clipped ? " (clipped to +-1e306)" : "")) << "</text>\n";
  const std::string ylab = fit_text(
      plot.y_label + (plot.log_y ? " (log scale)" : "") + (ay.clipped ? " (clipped to +-1e306)" : ""), PH, kAxisTitle);
  const double ylab_x = L - 8 - ytick_w - 9;  // the rotated title's glyphs reach ~0.95 em left of it, 0.25 em right
  os << "<text x=\"" << coord(ylab_x) << "\" y=\"" << coord(T + PH / 2) << "\" text-anchor=\"middle\" font-size=\""
     << kAxisTitle << "\" transform=\"rotate(-90 " << coord(ylab_x) << " " << coord(T + PH / 2) << ")\">"
     << html_escape(ylab) << "</text>\n";

  // Labels inside the plot area: each where it does not cover another; one that finds no free
  // place is left to the legend, which lists every line and band.
  Layout inside;
  if (drawn == 0) {
    const std::string s = "no finite points to draw";
    inside.place(text_box(s, L + PW / 2, T + PH / 2, 13, Anchor::Middle), 2.0);
    os << "<text x=\"" << coord(L + PW / 2) << "\" y=\"" << coord(T + PH / 2)
       << "\" text-anchor=\"middle\" font-size=\"13\" fill=\"#999\">" << s << "</text>\n";
  }
  // Bands and reference lines under the data.
  if (drawn > 0) {
    for (const Band& b : plot.bands) {
      if (!usable(b.lo) || !usable(b.hi)) continue;
      const double y1 = py(std::max(b.lo, b.hi)), y2 = py(std::min(b.lo, b.hi));
      os << "<rect class=\"band\" x=\"" << coord(L) << "\" y=\"" << coord(y1) << "\" width=\"" << coord(PW)
         << "\" height=\"" << coord(std::max(y2 - y1, 1.0)) << "\" fill=\"#2ca02c\" fill-opacity=\"0.12\"/>\n";
      for (double y : {y1 + 13, y2 - 4, y1 - 4}) {
        const std::string s = fit_text(b.label, PW - 12, kLegend);
        if (y < T + kLegend || y > T + PH - 2 || !inside.place(text_box(s, L + 6, y, kLegend, Anchor::Start), 2.0))
          continue;
        os << "<text x=\"" << coord(L + 6) << "\" y=\"" << coord(y) << "\" font-size=\"" << kLegend
           << "\" fill=\"#1d6b1d\">" << html_escape(s) << "</text>\n";
        break;
      }
    }
    for (const RefLine& l : plot.lines) {
      if (!usable(l.y)) continue;
      const double y = py(l.y);
      os << "<line class=\"refline\" x1=\"" << coord(L) << "\" y1=\"" << coord(y) << "\" x2=\"" << coord(L + PW)
         << "\" y2=\"" << coord(y) << "\" stroke=\"#555\" stroke-width=\"1.2\" stroke-dasharray=\"7 4\"/>\n";
      for (double ty : {y - 5, y + 14}) {
        const std::string s = fit_text(l.label, PW - 12, kLegend);
        if (ty < T + kLegend || ty > T + PH - 2 ||
            !inside.place(text_box(s, L + PW - 4, ty, kLegend, Anchor::End), 2.0))
          continue;
        os << "<text x=\"" << coord(L + PW - 4) << "\" y=\"" << coord(ty) << "\" text-anchor=\"end\" font-size=\""
           << kLegend << "\" fill=\"#444\">" << html_escape(s) << "</text>\n";
        break;
      }
    }
  }

  // One polyline per series (and a dot where a series has a single point,
  // which a polyline alone would not show). Colours cycle with the palette and
  // dash patterns with a shorter cycle, so two series never share both. Points at
  // the floor (zero or non-finite) carry an x marker.
  for (size_t si = 0; si < plot.series.size(); ++si) {
    const Series& s = plot.series[si];
    const char* colour = kPalette[si % kPaletteSize];
    std::string pts, marks;
    size_t count = 0;
    double lastx = 0, lasty = 0;
    const size_t n = std::min(s.x.size(), s.y.size());
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(s.x[i])) continue;
      lastx = px(s.x[i]), lasty = py(s.y[i]);
      if (count++) pts += ' ';
      pts += coord(lastx) + "," + coord(lasty);
      if (!usable(s.y[i])) marks += "M" + coord(lastx - 3.5) + " " + coord(lasty - 3.5) + "l7 7m0 -7l-7 7";
    }
    os << "<polyline class=\"series\" data-name=\"" << html_escape(s.name) << "\" fill=\"none\" stroke=\"" << colour
       << "\" stroke-width=\"" << (si == 0 ? "2.2" : "1.6") << "\" stroke-linejoin=\"round\"" << dash_attr(si)
       << " points=\"" << pts << "\"/>\n";
    if (count == 1)
      os << "<circle cx=\"" << coord(lastx) << "\" cy=\"" << coord(lasty) << "\" r=\"3\" fill=\"" << colour << "\"/>\n";
    if (!marks.empty())
      os << "<path class=\"floor\" data-name=\"" << html_escape(s.name) << "\" d=\"" << marks << "\" stroke=\""
         << colour << "\" stroke-width=\"1.6\" fill=\"none\"/>\n";
  }

  // Legend, right of the plot area: one entry per series, reference line and band, then the
  // notes; each entry on rows of its own (a long name wraps), so no two overlap. What does not
  // fit the column's height is counted on a last row.
  struct Entry {
    enum Kind { Line, Ref, Band, Floor, Note } kind;
    size_t series;
    std::string text;
  };
  std::vector<Entry> entries;
  for (size_t si = 0; si < plot.series.size(); ++si) entries.push_back({Entry::Line, si, plot.series[si].name});
  if (drawn > 0) {
    for (const RefLine& l : plot.lines)
      if (usable(l.y)) entries.push_back({Entry::Ref, 0, l.label});
    for (const Band& b : plot.bands)
      if (usable(b.lo) && usable(b.hi)) entries.push_back({Entry::Band, 0, b.label});
  }
  if (floored)
    entries.push_back({Entry::Floor, 0, std::string(plot.log_y ? "0 / non-finite" : "non-finite") + " drawn at the floor"});
  if (dropped)
    entries.push_back({Entry::Note, 0, std::to_string(dropped) + " point" + (dropped == 1 ? "" : "s") +
                                           " not drawn (x not finite)"});
  os << "<g class=\"legend\" font-size=\"" << kLegend << "\">\n";
  const double lx = L + PW + 14, row = 16, text_x = lx + 26;
  const size_t per_row = static_cast<size_t>((W - text_x - 4) / (kLegend * kGlyphEm));
  double ly = T + 8;
  for (size_t e = 0; e < entries.size(); ++e) {
    const Entry& en = entries[e];
    const std::vector<std::string> lines = wrap_text(en.text.empty() ? "(unnamed)" : en.text, per_row, 3);
    const bool last = e + 1 == entries.size();
    // Room for this entry, and (unless it is the last) for the "... more" row after it.
    if (ly + row * static_cast<double>(lines.size() - 1 + (last ? 0 : 1)) > H - 8) {
      os << "<text x=\"" << coord(lx) << "\" y=\"" << coord(ly) << "\">... " << entries.size() - e
         << " more</text>\n";
      break;
    }
    const double my = ly - 4;
    switch (en.kind) {
      case Entry::Line:
        os << "<line x1=\"" << coord(lx) << "\" y1=\"" << coord(my) << "\" x2=\"" << coord(lx + 20) << "\" y2=\""
           << coord(my) << "\" stroke=\"" << kPalette[en.series % kPaletteSize] << "\" stroke-width=\"2.5\""
           << dash_attr(en.series) << "/>\n";
        break;
      case Entry::Ref:
        os << "<line x1=\"" << coord(lx) << "\" y1=\"" << coord(my) << "\" x2=\"" << coord(lx + 20) << "\" y2=\""
           << coord(my) << "\" stroke=\"#555\" stroke-width=\"1.2\" stroke-dasharray=\"7 4\"/>\n";
        break;
      case Entry::Band:
        os << "<rect x=\"" << coord(lx) << "\" y=\"" << coord(my - 5) << "\" width=\"20\" height=\"10\" "
           << "fill=\"#2ca02c\" fill-opacity=\"0.25\"/>\n";
        break;
      case Entry::Floor:
        os << "<path d=\"M" << coord(lx + 6.5) << " " << coord(my - 3.5) << "l7 7m0 -7l-7 7\" stroke=\"#444\" "
           << "stroke-width=\"1.6\" fill=\"none\"/>\n";
        break;
      case Entry::Note: break;
    }
    for (size_t k = 0; k < lines.size(); ++k) {
      os << "<text x=\"" << coord(text_x) << "\" y=\"" << coord(ly) << "\""
         << (en.kind == Entry::Note || en.kind == Entry::Floor ? " class=\"note\" fill=\"#666\"" : "") << ">"
         << html_escape(lines[k]) << "</text>\n";
      ly += row;
    }
    ly += 3;
  }
  os << "</g>\n</svg>";
  return os.str();
}

// ---- heat maps --------------------------------------------------------------------------
std::string render_heatmap(const HeatMap& h) {
  GS_CHECK(h.rows >= 0 && h.cols >= 0 && h.values.size() == static_cast<size_t>(h.rows * h.cols), "render_heatmap",
           "values hold ", h.values.size(), " numbers for a ", h.rows, "x", h.cols, " map");
  constexpr double T = 42, R = 110, B = 50, cell_max = 28, kTick = 10;
  const double cell = h.rows > 0 && h.cols > 0
                          ? std::min(cell_max, 600.0 / static_cast<double>(std::max(h.rows, h.cols)))
                          : cell_max;
  // Left to right: the rotated y-axis title, a gap, the row indices, the cells.
  const double ytick_w = h.rows > 0 ? text_width(std::to_string(h.rows - 1), kTick) : 0.0;
  const double L = std::max(60.0, ytick_w + 34.0);
  const double PW = cell * static_cast<double>(h.cols), PH = cell * static_cast<double>(h.rows);
  const double W = std::max(L + std::max(PW, 200.0) + R, L + text_width(h.title, 15, true) + 12);
  const double H = T + std::max(PH, 40.0) + B;
  double vmax = 0.0;
  size_t nonfinite = 0;
  for (double v : h.values) {
    if (std::isfinite(v)) vmax = std::max(vmax, std::fabs(v));
    else ++nonfinite;
  }
  std::ostringstream os;
  os << "<svg class=\"heatmap\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << coord(W) << "\" height=\""
     << coord(H) << "\" viewBox=\"0 0 " << coord(W) << " " << coord(H) << "\" role=\"img\" aria-label=\""
     << html_escape(h.title) << "\">\n<title>" << html_escape(h.title) << "</title>\n";
  os << "<text x=\"" << coord(L) << "\" y=\"24\" font-size=\"15\" font-weight=\"bold\">" << html_escape(h.title)
     << "</text>\n";
  for (int64_t i = 0; i < h.rows; ++i)
    for (int64_t j = 0; j < h.cols; ++j) {
      const double v = h.values[static_cast<size_t>(i * h.cols + j)];
      std::string fill = "#999999";  // non-finite
      if (std::isfinite(v)) {
        const double t = vmax > 0.0 ? std::fabs(v) / vmax : 0.0;  // 0 white .. 1 dark red
        char b[8];
        std::snprintf(b, sizeof b, "#%02x%02x%02x", static_cast<int>(255 - 75 * t), static_cast<int>(255 - 235 * t),
                      static_cast<int>(255 - 235 * t));
        fill = b;
      }
      os << "<rect x=\"" << coord(L + cell * static_cast<double>(j)) << "\" y=\"" << coord(T + cell * static_cast<double>(i))
         << "\" width=\"" << coord(cell) << "\" height=\"" << coord(cell) << "\" fill=\"" << fill
         << "\" stroke=\"#fff\" stroke-width=\"0.5\"><title>" << i << ", " << j << ": " << html_escape(fmt_num(v))
         << "</title></rect>\n";
    }
  // Example indices on both axes, thinned like a plot's tick labels when the cells are small.
  os << "<g class=\"tick-labels\" font-size=\"" << kTick << "\">\n";
  {
    Layout xl, yl;
    for (int64_t j = 0; j < h.cols; ++j) {
      const std::string s = std::to_string(j);
      const double x = L + cell * (static_cast<double>(j) + 0.5), y = T + PH + 13;
      if (xl.place(text_box(s, x, y, kTick, Anchor::Middle), 3.0))
        os << "<text x=\"" << coord(x) << "\" y=\"" << coord(y) << "\" text-anchor=\"middle\">" << s << "</text>\n";
    }
    for (int64_t i = 0; i < h.rows; ++i) {
      const std::string s = std::to_string(i);
      const double y = T + cell * (static_cast<double>(i) + 0.5) + 3.5;
      if (yl.place(text_box(s, L - 5, y, kTick, Anchor::End), 1.0))
        os << "<text x=\"" << coord(L - 5) << "\" y=\"" << coord(y) << "\" text-anchor=\"end\">" << s << "</text>\n";
    }
  }
  os << "</g>\n";
  const double xlab_y = T + std::max(PH, 40.0) + 32, ylab_x = L - 5 - ytick_w - 9;
  os << "<text x=\"" << coord(L + PW / 2) << "\" y=\"" << coord(xlab_y) << "\" text-anchor=\"middle\" font-size=\"12\">"
     << html_escape(h.x_label) << "</text>\n";
  os << "<text x=\"" << coord(ylab_x) << "\" y=\"" << coord(T + PH / 2) << "\" text-anchor=\"middle\" font-size=\"12\" "
     << "transform=\"rotate(-90 " << coord(ylab_x) << " " << coord(T + PH / 2) << ")\">"
     << html_escape(fit_text(h.y_label, std::max(PH, 40.0) + 40, 12)) << "</text>\n";
  // Scale: white = 0, dark red = the largest |value|.
  const double sx = L + PW + 20;
  os << "<rect x=\"" << coord(sx) << "\" y=\"" << coord(T) << "\" width=\"14\" height=\"14\" fill=\"#b41414\"/>"
     << "<text x=\"" << coord(sx + 20) << "\" y=\"" << coord(T + 11) << "\" font-size=\"11\">" << html_escape(fmt_num(vmax))
     << "</text>\n<rect x=\"" << coord(sx) << "\" y=\"" << coord(T + 22) << "\" width=\"14\" height=\"14\" fill=\"#ffffff\" "
     << "stroke=\"#ccc\"/><text x=\"" << coord(sx + 20) << "\" y=\"" << coord(T + 33) << "\" font-size=\"11\">0</text>\n";
  if (nonfinite)
    os << "<text x=\"" << coord(sx) << "\" y=\"" << coord(T + 56) << "\" font-size=\"11\" fill=\"#666\">" << nonfinite
       << " non-finite (grey)</text>\n";
  if (h.rows == 0 || h.cols == 0)
    os << "<text x=\"" << coord(L) << "\" y=\"" << coord(T + 20) << "\" font-size=\"13\" fill=\"#999\">empty matrix</text>\n";
  os << "</svg>";
  return os.str();
}

std::optional<Finding> lead_finding(const Report& r) {
  // The diagnosis's lead (debug::analyse_causes): the confirmed cause that explains the most.
  const CauseAnalysis& a = r.diagnosis();
  if (!a.lead) return std::nullopt;
  Finding f = r.findings()[a.lead->index];
  if (!a.cause_text[a.lead->index].empty()) f.cause = a.cause_text[a.lead->index];
  if (!a.fix_text[a.lead->index].empty()) f.fix = a.fix_text[a.lead->index];
  return f;
}

std::string lead_why(const Report& r) {
  const CauseAnalysis& a = r.diagnosis();
  if (!a.lead) return "";
  const Lead& l = *a.lead;
  std::string s = l.why;
  if (l.confirmed && l.confirmed_by.size() > 1) {
    s += "; confirmed by";
    for (size_t i = 0; i < l.confirmed_by.size(); ++i) s += (i ? ", " : " ") + l.confirmed_by[i];
  }
  if (!l.ruled_out.empty()) {
    s += "; ruled out:";
    for (size_t i = 0; i < l.ruled_out.size(); ++i) s += (i ? "; " : " ") + l.ruled_out[i];
  }
  if (!l.candidates.empty()) {
    s += "; candidates left:";
    for (size_t i = 0; i < l.candidates.size(); ++i) s += (i ? "; " : " ") + l.candidates[i];
  }
  return s;
}

namespace {
// An SVG document from Graphviz, ready to embed in HTML: its XML prolog and doctype removed.
std::string embeddable_svg(const std::string& svg) {
  const size_t p = svg.find("<svg");
  return p == std::string::npos ? std::string() : svg.substr(p);
}

// Text of several lines (a model summary in a finding's cause, a report) is set in a fixed-width
// font, so its columns line up; the style sheet keeps the line breaks of every table cell.
const char* lines_class(const std::string& s) {
  return s.find('\n') == std::string::npos ? "" : " class=\"lines\"";
}
std::string text_cell(const std::string& s) { return std::string("<td") + lines_class(s) + ">" + html_escape(s) + "</td>"; }
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
         (p.caption.empty() ? std::string() : "<figcaption>" + html_escape(p.caption) + "</figcaption>\n") + "</figure>\n";
}
std::string figure(const HeatMap& h) {
  return "<figure>\n" + render_heatmap(h) + "\n" +
         (h.caption.empty() ? std::string() : "<figcaption>" + html_escape(h.caption) + "</figcaption>\n") + "</figure>\n";
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
    for (const auto& [k, v] : rep.summary)
      os << "<tr><th>" << html_escape(k) << "</th>" << text_cell(v) << "</tr>\n";
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
          r << "<tr class=\"" << severity_class(f.severity) << " detail\"><td></td><td colspan=\"7\"><div class=\"lines\">"
            << label << ":\n" << html_escape(trim_newlines(*text)) << "</div></td></tr>\n";
      return r.str();
    };
    const std::string head = "<tr><th>severity</th><th>check</th><th>what</th><th>where</th><th>evidence</th>"
                             "<th>likely cause</th><th>fix</th><th>seen</th></tr>\n";
    os << "<table class=\"findings\">\n" << head;
    const std::vector<Finding>& all = rep.findings.findings();
    // Each finding as the diagnosis words it: a symptom's cause line names only what its probes
    // did not rule out (or the cause that explains it), and a follow-on says why it follows.
    const CauseAnalysis& a = rep.findings.diagnosis();
    auto shown = [&](size_t i) {
      Finding f = all[i];
      if (!a.cause_text[i].empty()) f.cause = a.cause_text[i];
      else if (!a.because[i].empty()) f.cause = a.because[i] + (f.cause.empty() ? "" : "; " + f.cause);
      if (!a.fix_text[i].empty()) f.fix = a.fix_text[i];
      return f;
    };
    for (const FindingGroup& g : rep.findings.groups()) {
      os << row(shown(g.root));
      if (g.follow_on.empty()) continue;
      // Collapsed: a <details> element needs no script.
      os << "<tr class=\"follow-on\"><td colspan=\"8\"><details><summary>and " << g.follow_on.size()
         << " follow-on finding" << (g.follow_on.size() == 1 ? "" : "s") << " (explained by "
         << html_escape(g.rule) << ")</summary>\n<table class=\"findings\">\n" << head;
      for (size_t i : g.follow_on) os << row(shown(i));
      os << "</table>\n</details></td></tr>\n";
    }
    for (const Finding& f : all)
      if (!f.fires()) os << row(f);
    os << "</table>\n";
  }

  if (!rep.plots.empty()) {
    os << "<h2>Plots</h2>\n";
    for (const Plot& p : rep.plots) os << figure(p);
  }
  if (!rep.graph_svg.empty() || !rep.graph_dot.empty()) {
    if (!rep.graph_svg.empty()) {
      os << "<h2>Autograd graph</h2>\n<div class=\"graph\">\n" << embeddable_svg(rep.graph_svg) << "\n</div>\n";
    } else {
      // The fallback for a machine without Graphviz (scripts/setup.sh installs it).
      os << "<h2>Autograd graph (fallback: DOT text, no picture)</h2>\n<p class=\"fallback\"><strong>Graphviz is "
            "not installed</strong>, so the graph could not be drawn. Install it (scripts/setup.sh, or apt-get "
            "install graphviz) and run again for a picture; until then, the graph in Graphviz's DOT language "
            "(paste it into any DOT viewer):</p>\n<pre class=\"dot-fallback\">" << html_escape(rep.graph_dot)
         << "</pre>\n";
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
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') out.back() += '"', ++i;
      else if (c == '"') quoted = false;
      else out.back() += c;
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
  GS_CHECK(!ec && std::filesystem::is_directory(dir_), op, "cannot create the metrics directory '", dir_, "': ",
           ec ? ec.message() : "a file with that name exists", ".");
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
    GS_CHECK(f.size() == 3, op, "'", path, "' line ", lineno, " has ", f.size(), " fields, expected 3 (step,name,value): ",
             line);
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
