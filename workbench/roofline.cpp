// workbench/roofline.cpp: the roofline picture (Williams, Waterman & Patterson 2009) of the CPU
// ladder's results, as one SVG in the style of the HTML report's plots (debug/report/html_report.cpp):
// x = arithmetic intensity (flops per byte of the napkin-math traffic), y = GFLOP/s, both
// log-scaled; the roof is min(FMA peak, intensity x copy bandwidth), both measured here.
// Each version is a dot labelled with its kernel's letter and number ("M7": matmul v7); labels
// are placed greedily where they touch no other label, dot or the legend, with a leader line
// when they sit away from their dot.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/format.h"

#include "workbench/ladders.h"

namespace gradsleuth::workbench::cpu {
namespace {

const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

std::string num(double v) { return str_printf("%.1f", v); }
std::string short_num(double v) { return str_printf("%.*f", v >= 100 ? 0 : v >= 10 ? 1 : 2, v); }
std::string esc(const std::string& s) {
  std::string o;
  for (char c : s)
    o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
  return o;
}
std::string tick(double e) { return str_printf("%g", std::pow(10.0, e)); }

struct Box {
  double x0, y0, x1, y1;
  bool hits(const Box& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
};

// Every text's box is estimated from its length at this width per character, an upper bound for
// an 11 px sans-serif font (DejaVu Sans, headless Chromium's on Debian, averages about 6.5), so that
// no label placed beside another overlaps it when rendered (the browser check measures the boxes).
constexpr double kCharWidth = 7.5;
double text_width(const std::string& s) { return kCharWidth * static_cast<double>(s.size()) + 2; }
// The box of an 11 px text right-aligned at x_end on `baseline` (a ceiling's label), with a pixel's
// margin around the rendered box (10.5 px above the baseline, 2.6 below).
Box right_aligned_box(double x_end, double baseline, const std::string& s) {
  return {x_end - text_width(s), baseline - 12, x_end + 1, baseline + 4};
}

char letter(const std::string& kernel) {
  if (kernel == "layernorm") return 'L';
  if (kernel == "conv2d") return 'C';
  return static_cast<char>(std::toupper(static_cast<unsigned char>(kernel[0])));
}

}  // namespace

std::string roofline_svg(const Limits& lim, const std::vector<Result>& results) {
  constexpr double W = 940, H = 600, L = 70, T = 50, PW = 600, PH = 480;
  std::vector<const Result*> pts;
  for (const Result& r : results)
    if (r.skipped.empty() && r.ms > 0 && r.cost.flops > 0 && r.cost.bytes > 0) pts.push_back(&r);
  // Axis ranges: whole decades around the points, the ridge and the peak.
  const double ridge = lim.copy_gb_per_s > 0 ? lim.fma_gflops / lim.copy_gb_per_s : 1.0;
  double xlo = std::log10(std::max(1e-3, ridge)), xhi = xlo, ylo = std::log10(std::max(1e-3, lim.fma_gflops)),
         yhi = ylo;
  for (const Result* r : pts) {
    const double ai = std::log10(r->cost.flops / r->cost.bytes), g = std::log10(std::max(1e-6, r->gflops()));
    xlo = std::min(xlo, ai), xhi = std::max(xhi, ai), ylo = std::min(ylo, g), yhi = std::max(yhi, g);
  }
  xlo = std::floor(xlo - 0.3), xhi = std::ceil(xhi + 0.3), ylo = std::floor(ylo - 0.2), yhi = std::ceil(yhi + 0.3);
  auto px = [&](double ai) { return L + (std::log10(ai) - xlo) / (xhi - xlo) * PW; };
  auto py = [&](double g) { return T + PH - (std::log10(g) - ylo) / (yhi - ylo) * PH; };

  const std::string title =
      "Roofline: " + lim.cpu + ", " + lim.isa +
      (lim.threads <= 0 ? std::string()
                        : ", " + std::to_string(lim.threads) + (lim.threads == 1 ? " thread" : " threads"));
  std::ostringstream os;
  os << "<svg class=\"plot\" id=\"roofline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
     << "\" viewBox=\"0 0 " << W << " " << H << "\" role=\"img\" aria-label=\"" << esc(title) << "\">\n"
     << "<title>" << esc(title) << "</title>\n"
     << "<style>text { font-family: system-ui, Helvetica, Arial, sans-serif; fill: #222; }</style>\n"
     << "<rect x=\"0\" y=\"0\" width=\"" << W << "\" height=\"" << H << "\" fill=\"#fff\"/>\n"
     << "<text x=\"" << num(L + PW / 2) << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">"
     << esc(title) << "</text>\n";
  std::vector<Box> taken;  // every label, dot and the legend: nothing may overlap a label
  // Grid, axes, ticks.
  os << "<g class=\"grid\" stroke=\"#e8e8e8\" stroke-width=\"1\">\n";
  for (double e = xlo; e <= xhi; ++e)
    os << "<line x1=\"" << num(px(std::pow(10, e))) << "\" y1=\"" << T << "\" x2=\"" << num(px(std::pow(10, e)))
       << "\" y2=\"" << T + PH << "\"/>\n";
  for (double e = ylo; e <= yhi; ++e)
    os << "<line x1=\"" << L << "\" y1=\"" << num(py(std::pow(10, e))) << "\" x2=\"" << L + PW << "\" y2=\""
       << num(py(std::pow(10, e))) << "\"/>\n";
  os << "</g>\n<g class=\"axes\" stroke=\"#444\" stroke-width=\"1\">\n"
     << "<line x1=\"" << L << "\" y1=\"" << T + PH << "\" x2=\"" << L + PW << "\" y2=\"" << T + PH << "\"/>\n"
     << "<line x1=\"" << L << "\" y1=\"" << T << "\" x2=\"" << L << "\" y2=\"" << T + PH << "\"/>\n</g>\n";
  for (double e = xlo; e <= xhi; ++e) {
    const double x = px(std::pow(10, e));
    os << "<text class=\"tick\" x=\"" << num(x) << "\" y=\"" << T + PH + 20
       << "\" text-anchor=\"middle\" font-size=\"11\">" << tick(e) << "</text>\n";
  }
  for (double e = ylo; e <= yhi; ++e)
    os << "<text class=\"tick\" x=\"" << L - 6 << "\" y=\"" << num(py(std::pow(10, e)) + 4)
       << "\" text-anchor=\"end\" font-size=\"11\">" << tick(e) << "</text>\n";
  os << "<text x=\"" << num(L + PW / 2) << "\" y=\"" << H - 12
     << "\" text-anchor=\"middle\" font-size=\"12\">arithmetic intensity (flops per byte moved, at least)</text>\n"
     << "<text x=\"16\" y=\"" << num(T + PH / 2)
     << "\" text-anchor=\"middle\" font-size=\"12\" transform=\"rotate(-90 16 " << num(T + PH / 2)
     << ")\">GFLOP/s</text>\n";
  // The roof: bandwidth slope up to the ridge, then the FMA peak.
  const double x0 = std::pow(10, xlo), x1 = std::pow(10, xhi);
  const double ylow = std::pow(10, ylo);
  const double xs = std::max(x0, ylow / std::max(1e-9, lim.copy_gb_per_s));  // where the slope enters the plot
  os << "<polyline class=\"series\" data-name=\"roof\" fill=\"none\" stroke=\"#222\" stroke-width=\"2.2\" points=\""
     << num(px(xs)) << "," << num(py(std::max(ylow, xs * lim.copy_gb_per_s))) << " " << num(px(ridge)) << ","
     << num(py(lim.fma_gflops)) << " " << num(px(x1)) << "," << num(py(lim.fma_gflops)) << "\"/>\n";
  const std::string peak = lim.peak_label + " " + short_num(lim.fma_gflops) + " GFLOP/s";
  const std::string bw = lim.bandwidth_label + " " + short_num(lim.copy_gb_per_s) + " GB/s";
  // Right-aligned at the plot's edge: the text grows left, inside its estimated box.
  const double peak_x1 = L + PW - 6, peak_y = py(lim.fma_gflops) - 6;
  os << "<text class=\"ceiling\" x=\"" << num(peak_x1) << "\" y=\"" << num(peak_y)
     << "\" font-size=\"11\" text-anchor=\"end\">" << peak << "</text>\n";
  taken.push_back(right_aligned_box(peak_x1, peak_y, peak));
  // The bandwidth label just above the slope, a third of the way along it.
  const double bx = std::pow(10, std::log10(xs) + (std::log10(ridge) - std::log10(xs)) / 3);
  const double lx = px(bx), ly = py(bx * lim.copy_gb_per_s) - 8;
  os << "<text class=\"ceiling\" x=\"" << num(lx) << "\" y=\"" << num(ly) << "\" font-size=\"11\" text-anchor=\"end\">"
     << bw << "</text>\n";
  taken.push_back(right_aligned_box(lx, ly, bw));
  // The legend, right of the plot.
  std::vector<std::string> kernels;
  for (const Result* r : pts)
    if (std::find(kernels.begin(), kernels.end(), r->kernel) == kernels.end()) kernels.push_back(r->kernel);
  const double gx = L + PW + 20;
  os << "<g class=\"legend\">\n<text x=\"" << gx << "\" y=\"" << T + 4
     << "\" font-size=\"12\" font-weight=\"bold\">kernels</text>\n";
  for (size_t i = 0; i < kernels.size(); ++i) {
    const double y = T + 24 + 18 * static_cast<double>(i);
    os << "<circle cx=\"" << gx + 5 << "\" cy=\"" << y - 4 << "\" r=\"4.5\" fill=\"" << kPalette[i % 8] << "\"/>"
       << "<text x=\"" << gx + 16 << "\" y=\"" << y << "\" font-size=\"12\">" << letter(kernels[i])
       << "n: " << kernels[i] << " vn</text>\n";
  }
  os << "</g>\n";
  taken.push_back({gx - 4, T - 10, W, T + 30 + 18 * static_cast<double>(kernels.size())});
  // The dots first (labels must avoid all of them), then the labels.
  struct Dot {
    double x, y;
    const Result* r;
    size_t colour;
  };
  std::vector<Dot> dots;
  os << "<g class=\"points\">\n";
  for (const Result* r : pts) {
    const size_t ci = static_cast<size_t>(std::find(kernels.begin(), kernels.end(), r->kernel) - kernels.begin());
    const Dot d{px(r->cost.flops / r->cost.bytes), py(std::max(1e-6, r->gflops())), r, ci};
    dots.push_back(d);
    taken.push_back({d.x - 4.5, d.y - 4.5, d.x + 4.5, d.y + 4.5});
    os << "<circle class=\"point\" data-kernel=\"" << r->kernel << "\" data-version=\"" << r->version << "\" cx=\""
       << num(d.x) << "\" cy=\"" << num(d.y) << "\" r=\"4\" fill=\"" << kPalette[ci % 8] << "\" stroke=\"#fff\" "
       << "stroke-width=\"0.8\"><title>"
       << esc(r->kernel + " v" + std::to_string(r->version) + " (" + r->name + "): " + short_num(r->gflops()) +
              " GFLOP/s, " + short_num(r->gb_per_s()) + " GB/s, intensity " + short_num(r->cost.flops / r->cost.bytes))
       << "</title></circle>\n";
  }
  os << "</g>\n<g class=\"labels\">\n";
  // Candidate places, nearest first: right, left, above, below, then further out with a leader.
  for (const Dot& d : dots) {
    const std::string text = std::string(1, letter(d.r->kernel)) + std::to_string(d.r->version);
    // 14 px high with the baseline 3 px above the bottom: the rendered box reaches about 10.5 px
    // above the baseline and 2.6 below.
    const double tw = text_width(text), th = 14;
    bool placed = false;
    for (int ring = 0; ring < 14 && !placed; ++ring) {
      const double r = 7 + 9.0 * ring;
      for (int a = 0; a < 16 && !placed; ++a) {
        const double ang = a * 3.14159265358979 / 8;
        const double cx = d.x + r * std::cos(ang), cy = d.y - r * std::sin(ang);
        // The box's nearest edge at (cx, cy): left edge when right of the dot, etc.
        const double bx0 = std::cos(ang) > 0.3 ? cx : std::cos(ang) < -0.3 ? cx - tw : cx - tw / 2;
        const double by0 = std::sin(ang) > 0.3 ? cy - th : std::sin(ang) < -0.3 ? cy : cy - th / 2;
        const Box b{bx0, by0, bx0 + tw, by0 + th};
        if (b.x0 < L + 1 || b.x1 > L + PW - 1 || b.y0 < T + 1 || b.y1 > T + PH - 1) continue;
        if (std::any_of(taken.begin(), taken.end(), [&](const Box& o) { return b.hits(o); })) continue;
        taken.push_back(b);
        placed = true;
        if (ring > 1)
          os << "<line class=\"leader\" x1=\"" << num(d.x) << "\" y1=\"" << num(d.y) << "\" x2=\""
             << num((b.x0 + b.x1) / 2) << "\" y2=\"" << num((b.y0 + b.y1) / 2) << "\" stroke=\""
             << kPalette[d.colour % 8] << "\" stroke-width=\"0.7\" opacity=\"0.6\"/>\n";
        os << "<text class=\"label\" x=\"" << num(b.x0 + 1) << "\" y=\"" << num(b.y1 - 3)
           << "\" font-size=\"11\" fill=\"" << kPalette[d.colour % 8] << "\" style=\"fill: " << kPalette[d.colour % 8]
           << "\">" << text << "</text>\n";
      }
    }
    if (!placed)  // no free place within 130 px: the dot's tooltip still names it
      os << "<!-- no room for the label of " << text << " -->\n";
  }
  os << "</g>\n</svg>\n";
  return os.str();
}

}  // namespace gradsleuth::workbench::cpu
