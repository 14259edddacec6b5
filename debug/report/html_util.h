// Helpers shared by the HTML report's files (internal to report/): number text, text widths, the label
// layout that keeps text from overlapping, the colours and the style sheet.
#pragma once
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

namespace gradsleuth::debug::html_detail {

inline std::string errno_str() { return std::strerror(errno); }

// Shortest text that reads back as the same double; nan / inf / -inf otherwise.
inline std::string num_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

// Two decimals are plenty for SVG coordinates.
inline std::string coord(double v) { return str_printf("%.2f", v); }

// A tick label: 0.001, 250, 1e+06 (no "-0").
inline std::string tick_text(double v) {
  if (v == 0.0) return "0";
  return str_printf("%.6g", v);
}

// The colours of matplotlib's "tab10": distinct, readable, colour-blind aware.
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr size_t kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

// A step of 1, 2 or 5 x 10^k near range / target (range finite and > 0).
inline double nice_step(double range, int target) {
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

inline Axis make_axis(double lo, double hi, bool log) {
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

inline std::string log_tick_text(double e) {
  const double v = std::pow(10.0, e);
  if (e >= -3 && e <= 4) return tick_text(v);
  return "1e" + std::to_string(static_cast<int>(e));
}

// Dash patterns cycled over series (solid, dashed, dotted, dash-dot).
inline std::string dash_attr(size_t series_index) {
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
inline size_t glyphs(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}
inline double text_width(const std::string& s, double font, bool bold = false) {
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
inline Box text_box(const std::string& s, double x, double y, double font, Anchor a) {
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
inline std::string prefix_glyphs(const std::string& s, size_t n) {
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
inline std::string fit_text(const std::string& s, double width, double font) {
  const auto n = static_cast<size_t>(std::max(0.0, width / (font * kGlyphEm)));
  if (glyphs(s) <= n) return s;
  return n <= 3 ? prefix_glyphs(s, n) : prefix_glyphs(s, n - 3) + "...";
}
// s broken into lines of at most `per_line` characters at spaces (a longer word is cut), at
// most `max_lines` of them (the last ending in "..." when text is left over).
inline std::vector<std::string> wrap_text(const std::string& s, size_t per_line, size_t max_lines) {
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

inline const char* severity_class(Severity s) {
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

}  // namespace gradsleuth::debug::html_detail
