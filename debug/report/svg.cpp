// W6's pictures: SVG line plots (axes, ticks, legend, one polyline per series) and heat maps, drawn
// here with no plotting library (see html_report.h).
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
    for (const XBand& b : plot.x_bands)
      if (std::isfinite(b.lo) && std::isfinite(b.hi))
        xlo = std::min({xlo, b.lo, b.hi}), xhi = std::max({xhi, b.lo, b.hi});
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
    for (const XBand& b : plot.x_bands) {
      if (!std::isfinite(b.lo) || !std::isfinite(b.hi)) continue;
      const double x1 = px(std::min(b.lo, b.hi)), x2 = px(std::max(b.lo, b.hi));
      os << "<rect class=\"xband\" x=\"" << coord(x1) << "\" y=\"" << coord(T) << "\" width=\""
         << coord(std::max(x2 - x1, 1.0)) << "\" height=\"" << coord(PH)
         << "\" fill=\"#1f77b4\" fill-opacity=\"0.10\"/>\n";
    }
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
    enum Kind { Line, Ref, Band, XBand, Floor, Note } kind;
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
    for (const XBand& b : plot.x_bands)
      if (std::isfinite(b.lo) && std::isfinite(b.hi)) entries.push_back({Entry::XBand, 0, b.label});
  }
  if (floored)
    entries.push_back(
        {Entry::Floor, 0, std::string(plot.log_y ? "0 / non-finite" : "non-finite") + " drawn at the floor"});
  if (dropped)
    entries.push_back(
        {Entry::Note, 0, std::to_string(dropped) + " point" + (dropped == 1 ? "" : "s") + " not drawn (x not finite)"});
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
      os << "<text x=\"" << coord(lx) << "\" y=\"" << coord(ly) << "\">... " << entries.size() - e << " more</text>\n";
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
      case Entry::XBand:
        os << "<rect x=\"" << coord(lx) << "\" y=\"" << coord(my - 5) << "\" width=\"20\" height=\"10\" "
           << "fill=\"#1f77b4\" fill-opacity=\"0.25\"/>\n";
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
  const double cell =
      h.rows > 0 && h.cols > 0 ? std::min(cell_max, 600.0 / static_cast<double>(std::max(h.rows, h.cols))) : cell_max;
  // Left to right: the rotated y-axis title, a gap, the row indices, the cells.
  GS_CHECK(h.row_labels.empty() || h.row_labels.size() == static_cast<size_t>(h.rows), "render_heatmap", "has ",
           h.row_labels.size(), " row labels for ", h.rows, " rows");
  GS_CHECK(h.col_labels.empty() || h.col_labels.size() == static_cast<size_t>(h.cols), "render_heatmap", "has ",
           h.col_labels.size(), " column labels for ", h.cols, " columns");
  auto row_text = [&](int64_t i) { return h.row_labels.empty() ? std::to_string(i) : h.row_labels[size_t(i)]; };
  auto col_text = [&](int64_t j) { return h.col_labels.empty() ? std::to_string(j) : h.col_labels[size_t(j)]; };
  double ytick_w = 0.0;
  for (int64_t i = 0; i < h.rows; ++i) ytick_w = std::max(ytick_w, text_width(row_text(i), kTick));
  const double L = std::max(60.0, ytick_w + 34.0);
  const double PW = cell * static_cast<double>(h.cols), PH = cell * static_cast<double>(h.rows);
  const double W = std::max(L + std::max(PW, 200.0) + R, L + text_width(h.title, 15, true) + 12);
  const double H = T + std::max(PH, 40.0) + B;
  double vmax = 0.0;
  size_t nonfinite = 0;
  for (double v : h.values) {
    if (std::isfinite(v))
      vmax = std::max(vmax, std::fabs(v));
    else
      ++nonfinite;
  }
  std::ostringstream os;
  os << "<svg class=\"heatmap\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << coord(W) << "\" height=\"" << coord(H)
     << "\" viewBox=\"0 0 " << coord(W) << " " << coord(H) << "\" role=\"img\" aria-label=\"" << html_escape(h.title)
     << "\">\n<title>" << html_escape(h.title) << "</title>\n";
  os << "<text x=\"" << coord(L) << "\" y=\"24\" font-size=\"15\" font-weight=\"bold\">" << html_escape(h.title)
     << "</text>\n";
  for (int64_t i = 0; i < h.rows; ++i)
    for (int64_t j = 0; j < h.cols; ++j) {
      const double v = h.values[static_cast<size_t>(i * h.cols + j)];
      std::string fill = "#999999";  // non-finite
      if (std::isfinite(v)) {
        const double t = vmax > 0.0 ? std::fabs(v) / vmax : 0.0;  // 0 white .. 1 dark red
        fill = str_printf("#%02x%02x%02x", static_cast<int>(255 - 75 * t), static_cast<int>(255 - 235 * t),
                          static_cast<int>(255 - 235 * t));
      }
      os << "<rect x=\"" << coord(L + cell * static_cast<double>(j)) << "\" y=\""
         << coord(T + cell * static_cast<double>(i)) << "\" width=\"" << coord(cell) << "\" height=\"" << coord(cell)
         << "\" fill=\"" << fill << "\" stroke=\"#fff\" stroke-width=\"0.5\"><title>" << html_escape(row_text(i))
         << ", " << html_escape(col_text(j)) << ": " << html_escape(fmt_num(v)) << "</title></rect>\n";
    }
  // Example indices on both axes, thinned like a plot's tick labels when the cells are small.
  os << "<g class=\"tick-labels\" font-size=\"" << kTick << "\">\n";
  {
    Layout xl, yl;
    for (int64_t j = 0; j < h.cols; ++j) {
      const std::string s = col_text(j);
      const double x = L + cell * (static_cast<double>(j) + 0.5), y = T + PH + 13;
      if (xl.place(text_box(s, x, y, kTick, Anchor::Middle), 3.0))
        os << "<text x=\"" << coord(x) << "\" y=\"" << coord(y) << "\" text-anchor=\"middle\">" << s << "</text>\n";
    }
    for (int64_t i = 0; i < h.rows; ++i) {
      const std::string s = row_text(i);
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
     << "<text x=\"" << coord(sx + 20) << "\" y=\"" << coord(T + 11) << "\" font-size=\"11\">"
     << html_escape(fmt_num(vmax)) << "</text>\n<rect x=\"" << coord(sx) << "\" y=\"" << coord(T + 22)
     << "\" width=\"14\" height=\"14\" fill=\"#ffffff\" "
     << "stroke=\"#ccc\"/><text x=\"" << coord(sx + 20) << "\" y=\"" << coord(T + 33)
     << "\" font-size=\"11\">0</text>\n";
  if (nonfinite)
    os << "<text x=\"" << coord(sx) << "\" y=\"" << coord(T + 56) << "\" font-size=\"11\" fill=\"#666\">" << nonfinite
       << " non-finite (grey)</text>\n";
  if (h.rows == 0 || h.cols == 0)
    os << "<text x=\"" << coord(L) << "\" y=\"" << coord(T + 20)
       << "\" font-size=\"13\" fill=\"#999\">empty matrix</text>\n";
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

}  // namespace gradsleuth::debug
