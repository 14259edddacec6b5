// W6 logs and plots: metric files, SVG plots (one polyline per series, NaN skipped, log
// scale), escaping, well-formed HTML, and an atomic write that never damages the old file.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "debug/report/html_report.h"
#include "debug/run/diagnose.h"
#include "json_mini.h"

namespace dbg = gs::debug;
namespace fs = std::filesystem;

namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

// Every tag we emit is closed or self-closed ("<br/>"), in order. Returns "" or
// what is wrong.
std::string check_balanced(const std::string& html) {
  std::vector<std::string> stack;
  size_t i = 0;
  while ((i = html.find('<', i)) != std::string::npos) {
    const size_t end = html.find('>', i);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(i);
    const std::string tag = html.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty()) return "empty tag";
    if (tag[0] == '!') continue;  // <!DOCTYPE html>
    if (tag.back() == '/') continue;
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty()) return "</" + name + "> closes nothing";
      if (stack.back() != name) return "</" + name + "> closes <" + stack.back() + ">";
      stack.pop_back();
      continue;
    }
    stack.push_back(tag.substr(0, tag.find_first_of(" \n\t")));
  }
  return stack.empty() ? "" : "<" + stack.back() + "> is never closed";
}

// The "points" of the polyline whose data-name is `name`, as (x, y) pairs.
std::vector<std::pair<double, double>> points_of(const std::string& svg, const std::string& name) {
  const size_t at = svg.find("data-name=\"" + name + "\"");
  REQUIRE(at != std::string::npos);
  const size_t p = svg.find("points=\"", at) + 8;
  const std::string pts = svg.substr(p, svg.find('"', p) - p);
  std::vector<std::pair<double, double>> out;
  std::istringstream in(pts);
  std::string pair;
  while (in >> pair) {
    const size_t comma = pair.find(',');
    out.emplace_back(std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1)));
  }
  return out;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("gs_html_test_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, ec);
    fs::remove_all(path, ec);
  }
};

dbg::HtmlReport sample_report() {
  dbg::HtmlReport rep;
  rep.title = "a <script> & \"quotes\"";
  rep.summary = {{"epochs", "5"}, {"lr < 1", "yes"}};
  dbg::Plot loss{"loss", "step", "loss", false, {}, {}, {}, "", {}};
  loss.series.push_back({"train", {1, 2, 3, 4}, {2.3, 1.2, 0.8, 0.6}});
  loss.series.push_back({"val", {1, 2, 3, 4}, {2.4, 1.4, 1.1, 1.2}});
  dbg::Plot grads{"gradient norm per layer", "step", "norm", true, {}, {}, {}, "", {}};
  grads.series.push_back({"0.weight", {1, 2, 3}, {1e-3, 1e-2, 1e-1}});
  grads.series.push_back({"2.weight", {1, 2, 3}, {1.0, 10.0, 100.0}});
  grads.series.push_back({"4.weight <last>", {1, 2, 3}, {0.5, 0.4, 0.3}});
  rep.plots = {loss, grads};
  dbg::Finding f;
  f.check = "O1";
  f.severity = dbg::Severity::Error;
  f.title = "gradient of 0.weight is NaN <bad>";
  f.module = "0 (Linear)";
  f.evidence.push_back({"non-finite elements", 3, "> 0 is an error"});
  f.cause = "learning rate too high";
  f.fix = "lower it";
  rep.findings.add(f);
  dbg::Finding w = f;
  w.check = "M7";
  w.severity = dbg::Severity::Warning;
  w.title = "dead units";
  rep.findings.add(w);
  return rep;
}

}  // namespace

TEST_CASE("the HTML report is well formed, escaped, with one svg per plot and one polyline per series") {
  const dbg::HtmlReport rep = sample_report();
  const std::string html = dbg::render_html(rep);
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(check_balanced(html) == "");
  CHECK(count(html, "<svg") == 2);
  CHECK(count(html, "<polyline") == 5);
  // Escaped everywhere: the title, summary keys, finding titles, series names.
  CHECK(html.find("<script>") == std::string::npos);
  CHECK(html.find("a &lt;script&gt; &amp; &quot;quotes&quot;") != std::string::npos);
  CHECK(html.find("lr &lt; 1") != std::string::npos);
  CHECK(html.find("is NaN &lt;bad&gt;") != std::string::npos);
  CHECK(html.find("4.weight &lt;last&gt;") != std::string::npos);
  // Self-contained: no scripts, no external resources.
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("src=") == std::string::npos);
  CHECK(html.find("href=") == std::string::npos);
  // Findings in the diagnosis's order, coloured by severity: a confirmed fault (M7's dead units)
  // before a symptom no probe explained (O1's NaN gradient), though that one is an error.
  CHECK(html.find("class=\"sev-error\"") != std::string::npos);
  CHECK(html.find("class=\"sev-warning\"") != std::string::npos);
  CHECK(html.find("sev-warning\"><td") < html.find("sev-error\"><td"));
  CHECK(html.find("non-finite elements = 3 (&gt; 0 is an error)") != std::string::npos);
  CHECK(check_balanced("<p><b></p></b>") != "");  // the checker itself can fail
}

TEST_CASE(
    "plots draw NaN and Inf values at the floor with a marker, draw inside the axes, and put larger values higher") {
  dbg::Plot p{"t", "step", "v", false, {}, {}, {}, "", {}};
  p.series.push_back({"s", {0, 1, 2, 3, 4, std::nan("")}, {1.0, std::nan(""), 3.0, INFINITY, 2.0, 5.0}});
  const std::string svg = dbg::render_svg(p);
  CHECK(check_balanced(svg) == "");
  const auto pts = points_of(svg, "s");
  REQUIRE(pts.size() == 5);  // (0,1), (1,floor), (2,3), (3,floor), (4,2); the point at x = NaN cannot be placed
  for (size_t i = 1; i < pts.size(); ++i) CHECK(pts[i - 1].first < pts[i].first);
  CHECK(pts[2].second < pts[4].second);                   // 3 is above 2 (SVG y grows downwards)
  CHECK(pts[4].second < pts[0].second);                   // 2 is above 1
  CHECK(pts[1].second == doctest::Approx(400.0 - 58.0));  // NaN at the floor of the plot area
  CHECK(pts[3].second == doctest::Approx(400.0 - 58.0));  // Inf too
  CHECK(pts[0].second < 400.0 - 58.0);
  for (const auto& [x, y] : pts) {
    CHECK(x >= 72.0);
    CHECK(x <= 980.0 - 280.0);  // the plot area: canvas width minus the legend column
    CHECK(y >= 42.0);
    CHECK(y <= 400.0 - 58.0);
  }
  // A marker per floor point, and a legend note saying what the floor means.
  CHECK(count(svg, "class=\"floor\"") == 1);
  CHECK(count(svg, "l7 7m0 -7l-7 7") == 2 + 1);  // two points and the legend's sample
  CHECK(svg.find(">non-finite drawn at the floor</text>") != std::string::npos);
  CHECK(svg.find(">1 point not drawn (x not finite)</text>") != std::string::npos);
  CHECK(svg.find("nan") == std::string::npos);
  CHECK(svg.find("inf") == std::string::npos);
}

TEST_CASE("a log-scale plot has decade ticks, spaces decades evenly and draws values <= 0 at the floor") {
  dbg::Plot p{"grad norms", "step", "norm", true, {}, {}, {}, "", {}};
  p.series.push_back({"g", {1, 2, 3, 4, 5}, {1.0, 10.0, 100.0, 0.0, -1.0}});
  const std::string svg = dbg::render_svg(p);
  const auto pts = points_of(svg, "g");
  REQUIRE(pts.size() == 5);                                                                // 0 and -1 at the floor
  CHECK(pts[0].second - pts[1].second == doctest::Approx(pts[1].second - pts[2].second));  // equal decade steps
  CHECK(pts[3].second == doctest::Approx(400.0 - 58.0));
  CHECK(pts[4].second == doctest::Approx(400.0 - 58.0));
  CHECK(pts[0].second < pts[3].second);  // 1 is above the floor
  CHECK(svg.find(">0 / non-finite drawn at the floor</text>") != std::string::npos);
  CHECK(svg.find(">100</text>") != std::string::npos);
  CHECK(svg.find(">10</text>") != std::string::npos);
  CHECK(svg.find("(log scale)") != std::string::npos);
  // A series with no drawable point still gets its (empty) polyline and a note.
  dbg::Plot empty{"nothing", "step", "v", true, {{"z", {1, 2}, {0.0, std::nan("")}}}, {}, {}, "", {}};
  const std::string e = dbg::render_svg(empty);
  CHECK(count(e, "<polyline") == 1);
  CHECK(e.find("no finite points") != std::string::npos);
}

TEST_CASE("write_html_report writes atomically and a failed write leaves the old file untouched") {
  TempDir tmp;
  const dbg::HtmlReport rep = sample_report();
  const fs::path target = tmp.path / "report.html";
  dbg::write_html_report(target.string(), rep);
  CHECK(read(target) == dbg::render_html(rep));

  {  // an existing file, then a write whose target is a directory
    std::ofstream(target) << "OLD";
    const fs::path dir = tmp.path / "adir";
    fs::create_directories(dir);
    try {
      dbg::write_html_report(dir.string(), rep);
      FAIL("expected a gs::Error");
    } catch (const gs::Error& e) {
      CHECK(std::string(e.what()).find(dir.string()) != std::string::npos);
      CHECK(std::string(e.what()).find("is a directory") != std::string::npos);
    }
    CHECK(read(target) == "OLD");
  }
  {  // a directory that does not exist
    const std::string bad = (tmp.path / "missing" / "report.html").string();
    try {
      dbg::write_html_report(bad, rep);
      FAIL("expected a gs::Error");
    } catch (const gs::Error& e) {
      CHECK(std::string(e.what()).find(bad) != std::string::npos);
    }
  }
  {  // the write fails half-way: the old file stays, no temporary is left behind
    dbg::testing::set_report_write_failure(100);
    CHECK_THROWS_AS(dbg::write_html_report(target.string(), rep), gs::Error);
    dbg::testing::set_report_write_failure(std::nullopt);
    CHECK(read(target) == "OLD");
    size_t files = 0;
    for (const auto& e : fs::directory_iterator(tmp.path)) files += e.is_regular_file();
    CHECK(files == 1);
  }
  {  // a directory the process cannot write to (root ignores permissions: skipped)
    const fs::path ro = tmp.path / "readonly";
    fs::create_directories(ro);
    std::ofstream(ro / "report.html") << "KEEP";
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    if (::geteuid() == 0) {
      MESSAGE("running as root: the unwritable-directory case cannot be tested (root may write anywhere)");
    } else {
      try {
        dbg::write_html_report((ro / "report.html").string(), rep);
        FAIL("expected a gs::Error");
      } catch (const gs::Error& e) {
        CHECK(std::string(e.what()).find((ro / "report.html").string()) != std::string::npos);
      }
      CHECK(read(ro / "report.html") == "KEEP");
    }
    fs::permissions(ro, fs::perms::owner_all);
  }
}

TEST_CASE("MetricsLog writes long-format CSV and JSON lines, and plots groups of series") {
  TempDir tmp;
  const std::string dir = (tmp.path / "run" / "nested").string();  // created on demand
  {
    dbg::MetricsLog log(dir);
    log.log(1, {{"loss/train", 2.5}, {"loss/val", 2.75}});
    log.log(2, {{"loss/train", 1.25}, {"loss/val", std::nan("")}});
    log.log(2, "grad_norm/0.weight", 0.001);
    log.log(3, "weird,name\"x", 1.0);
    CHECK(log.names() == std::vector<std::string>{"loss/train", "loss/val", "grad_norm/0.weight", "weird,name\"x"});
    const dbg::Series s = log.series("loss/train");
    CHECK(s.x == std::vector<double>{1, 2});
    CHECK(s.y == std::vector<double>{2.5, 1.25});
    const dbg::Plot p = log.plot("loss", "loss/");
    REQUIRE(p.series.size() == 2);
    CHECK(p.series[0].name == "train");
    CHECK(p.series[1].name == "val");
    CHECK(p.y_label == "loss");
    CHECK(p.x_label == "step");
    CHECK(log.plot("g", "grad_norm/", true).series.size() == 1);
  }
  const std::string csv = read(fs::path(dir) / "metrics.csv");
  CHECK(csv ==
        "step,name,value\n"
        "1,loss/train,2.5\n1,loss/val,2.75\n2,loss/train,1.25\n2,loss/val,nan\n"
        "2,grad_norm/0.weight,0.001\n3,\"weird,name\"\"x\",1\n");
  std::ifstream jl(fs::path(dir) / "metrics.jsonl");
  std::vector<json_mini::Value> lines;
  for (std::string line; std::getline(jl, line);) lines.push_back(json_mini::parse(line));
  REQUIRE(lines.size() == 4);
  CHECK(lines[0].get("step")->num == 1);
  CHECK(lines[0].get("loss/val")->num == 2.75);
  CHECK(lines[1].get("loss/val")->kind == json_mini::Value::Null);  // NaN has no JSON spelling

  // Read back, then continue the run in append mode.
  const auto back = dbg::read_metrics_csv((fs::path(dir) / "metrics.csv").string());
  REQUIRE(back.size() == 4);
  CHECK(back[3].name == "weird,name\"x");
  CHECK(std::isnan(back[1].y[1]));
  {
    dbg::MetricsLog log(dir, /*append=*/true);
    log.log(3, "loss/train", 0.5);
    CHECK(log.series("loss/train").y == std::vector<double>{2.5, 1.25, 0.5});
  }
  CHECK(dbg::read_metrics_csv((fs::path(dir) / "metrics.csv").string())[0].y.size() == 3);
  CHECK_THROWS_AS(dbg::read_metrics_csv((tmp.path / "nope.csv").string()), gs::Error);
}

// ---- hardening: extreme ranges never hang, every coordinate is finite ------------------
namespace {
// Every number in the SVG's coordinates and points attributes is finite and inside the canvas (+-1 px).
void check_finite_coords(const std::string& svg) {
  CHECK(svg.find("nan") == std::string::npos);
  CHECK(svg.find("inf\"") == std::string::npos);
  for (const char* attr : {" x1=\"", " x2=\"", " y1=\"", " y2=\"", " cx=\"", " cy=\""}) {
    for (size_t at = svg.find(attr); at != std::string::npos; at = svg.find(attr, at + 1)) {
      const double v = std::stod(svg.substr(at + std::strlen(attr)));
      CHECK(std::isfinite(v));
      CHECK(v >= -1.0);
      CHECK(v <= 761.0);
    }
  }
}
}  // namespace

TEST_CASE("plots with extreme ranges finish: +-1e308, {0, 5e-324}, NaN, single points") {
  const double big = 1e308, tiny = 5e-324, nan = std::nan("");
  struct Case {
    const char* name;
    std::vector<double> x, y;
    bool log;
  };
  for (const Case& c :
       {Case{"huge y span", {0, 1, 2}, {-big, 0.0, big}, false}, Case{"huge x span", {-big, big}, {1.0, 2.0}, false},
        Case{"max doubles", {0, 1}, {-std::numeric_limits<double>::max(), std::numeric_limits<double>::max()}, false},
        Case{"denormal span", {0, 1}, {0.0, tiny}, false}, Case{"denormal x", {0.0, tiny}, {1.0, 2.0}, false},
        Case{"all NaN", {0, 1}, {nan, nan}, false}, Case{"single point", {3}, {7.0}, false},
        Case{"single huge point", {1e300}, {-1e308}, false},
        Case{"log denormal to huge", {0, 1, 2}, {tiny, 1.0, big}, true}, Case{"log single point", {0}, {tiny}, true}}) {
    CAPTURE(c.name);
    dbg::Plot p{"t", "x", "y", c.log, {}, {}, {}, "", {}};
    p.series.push_back({"s", c.x, c.y});
    const std::string svg = dbg::render_svg(p);  // before the fix: an endless tick loop
    CHECK(check_balanced(svg) == "");
    check_finite_coords(svg);
    CHECK(count(svg, "<line") < 400);  // a bounded number of ticks
  }
  // A clipped axis says so; dropped points are counted.
  dbg::Plot p;
  p.title = "t";
  p.x_label = "x";
  p.y_label = "y";
  p.series.push_back({"s", {0, 1, nan, 3}, {-1e308, 1e308, 1.0, INFINITY}});
  const std::string svg = dbg::render_svg(p);
  CHECK(svg.find("(clipped to +-1e306)") != std::string::npos);
  CHECK(svg.find(">1 point not drawn (x not finite)</text>") != std::string::npos);
  CHECK(svg.find(">non-finite drawn at the floor</text>") != std::string::npos);
  const auto pts = points_of(svg, "s");
  REQUIRE(pts.size() == 3);
  CHECK(pts[1].second < pts[0].second);  // 1e308 above -1e308
}

TEST_CASE("the report leads with the diagnosis's lead, its plots, and shows bands, reference lines and sections") {
  dbg::Report r;
  dbg::Finding late;
  late.check = "L1";
  late.severity = dbg::Severity::Error;
  late.title = "loss is NaN";
  late.step = 40;
  dbg::Finding early;
  early.check = "M6";
  early.severity = dbg::Severity::Warning;
  early.title = "outputs depend on other examples of the batch";
  early.module = "1";
  dbg::Finding info;
  info.check = "D1";
  info.severity = dbg::Severity::Info;
  info.title = "batch summary";
  r.add(late);
  r.add(info);
  r.add(early);
  const auto lead = dbg::lead_finding(r);
  REQUIRE(lead.has_value());
  CHECK(lead->check == "M6");  // a fault (batch mixing) beats a symptom (a NaN loss nothing explains)
  dbg::Report same_time;
  early.step = late.step = 5;
  same_time.add(early);
  same_time.add(late);
  CHECK(dbg::lead_finding(same_time)->check == "M6");  // a confirmed fault beats a symptom nothing explains
  dbg::Finding l2 = late;  // two faults at the same step, neither explaining anything: the error leads
  l2.check = "L2";
  l2.title = "cross-entropy is fed probabilities";
  same_time.add(l2);
  CHECK(dbg::lead_finding(same_time)->check == "L2");
  CHECK_FALSE(dbg::lead_finding(dbg::Report()).has_value());

  dbg::HtmlReport rep;
  rep.title = "lead";
  rep.findings = r;
  dbg::LeadFinding l;
  l.finding = *lead;
  l.why = "earliest";
  l.follow_on = 1;
  dbg::HeatMap h;
  h.title = "mixing";
  h.rows = 2;
  h.cols = 3;
  h.values = {1, 0, 0.5, 0, 2, std::numeric_limits<double>::quiet_NaN()};
  h.caption = "diagonal is healthy";
  l.heatmaps.push_back(h);
  dbg::Plot p;
  p.title = "ratio";
  p.log_y = true;
  p.series.push_back({"a", {1, 2, 3}, {1e-6, 2e-6, 3e-6}});
  p.series.push_back({"b", {1, 2, 3}, {1e-6, 2e-6, 3e-6}});  // on top of a: a different dash
  p.bands.push_back({1e-4, 1e-2, "healthy"});
  p.lines.push_back({1e-1, "too high"});
  p.caption = "what to look for";
  l.plots.push_back(p);
  rep.lead = l;
  rep.sections.push_back({"Profile", "op  ms\nmatmul <1>"});
  rep.graph_dot = "digraph g { a -> b; }";
  const std::string html = dbg::render_html(rep);
  CAPTURE(html);
  CHECK(check_balanced(html) == "");
  // The lead comes before the summary and the findings table.
  const size_t lead_at = html.find("<section class=\"lead\" data-check=\"M6\" data-module=\"1\" data-parameter=\"\">");
  REQUIRE(lead_at != std::string::npos);
  CHECK(lead_at < html.find("<h2>Findings</h2>"));
  CHECK(html.find("Diagnosis: M6") != std::string::npos);
  CHECK(html.find("and 1 follow-on finding below") != std::string::npos);
  // The heat map: one cell per value, the largest darkest, NaN grey.
  CHECK(count(html, "<rect x=") >= 6);
  CHECK(html.find("fill=\"#b41414\" stroke=\"#fff\"") != std::string::npos);  // the 2 cell
  CHECK(html.find("fill=\"#999999\"") != std::string::npos);
  CHECK(html.find("1 non-finite (grey)") != std::string::npos);
  // The band and the reference line are drawn though the data is far below them (the y range takes them in).
  CHECK(html.find("class=\"band\"") != std::string::npos);
  CHECK(html.find("class=\"refline\"") != std::string::npos);
  CHECK(html.find(">healthy</text>") != std::string::npos);
  // Overlapping series differ in dash pattern.
  const size_t a = html.find("data-name=\"a\""), b = html.find("data-name=\"b\"");
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  CHECK(html.substr(a, html.find("/>", a) - a).find("stroke-dasharray") == std::string::npos);
  CHECK(html.substr(b, html.find("/>", b) - b).find("stroke-dasharray") != std::string::npos);
  CHECK(html.find("<figcaption>what to look for</figcaption>") != std::string::npos);
  // Sections and the graph's DOT fallback, escaped.
  CHECK(html.find("<h2>Profile</h2>\n<pre>op  ms\nmatmul &lt;1&gt;</pre>") != std::string::npos);
  CHECK(html.find("<h2>Autograd graph (fallback: DOT text, no picture)</h2>") != std::string::npos);
  CHECK(html.find("Graphviz is not installed") != std::string::npos);
  CHECK(html.find("<pre class=\"dot-fallback\">digraph g { a -&gt; b; }</pre>") != std::string::npos);
  // With Graphviz's SVG the graph is a picture, and no DOT text is shown.
  rep.graph_svg = "<?xml version=\"1.0\"?>\n<svg width=\"10\" height=\"10\"><g/></svg>";
  const std::string with_svg = dbg::render_html(rep);
  CHECK(with_svg.find("<h2>Autograd graph</h2>\n<div class=\"graph\">\n<svg width") != std::string::npos);
  CHECK(with_svg.find("dot-fallback") == std::string::npos);
  // A heat map whose values do not fill it is an error, not a read past the end.
  dbg::HeatMap bad;
  bad.rows = 2;
  bad.cols = 2;
  bad.values = {1, 2, 3};
  CHECK_THROWS_AS(dbg::render_heatmap(bad), gs::Error);
}

namespace {

// The boxes of every unrotated <text> of an SVG, from its x, y, text-anchor and font-size (its own
// or its <g>'s), with a glyph of 0.5 em and a line of 0.8 em above the baseline to 0.2 em below: a
// smaller estimate than the renderer's, so an overlap found here is an overlap on screen.
struct TextBox {
  std::string text;
  double x0, y0, x1, y1;
};
std::string attr(const std::string& tag, const std::string& name) {
  const size_t p = tag.find(" " + name + "=\"");
  if (p == std::string::npos) return "";
  const size_t b = p + name.size() + 3;
  return tag.substr(b, tag.find('"', b) - b);
}
std::vector<TextBox> text_boxes(const std::string& svg) {
  std::vector<TextBox> out;
  std::vector<double> group_font{12.0};
  size_t i = 0;
  while ((i = svg.find('<', i)) != std::string::npos) {
    const size_t end = svg.find('>', i);
    const std::string tag = svg.substr(i, end - i + 1);
    i = end + 1;
    if (tag.rfind("<g", 0) == 0 && tag.find("/>") == std::string::npos) {
      const std::string f = attr(tag, "font-size");
      group_font.push_back(f.empty() ? group_font.back() : std::stod(f));
    } else if (tag == "</g>") {
      group_font.pop_back();
    } else if (tag.rfind("<text", 0) == 0) {
      const std::string text = svg.substr(i, svg.find("</text>", i) - i);
      if (!attr(tag, "transform").empty()) continue;
      const std::string f = attr(tag, "font-size");
      const double font = f.empty() ? group_font.back() : std::stod(f);
      const double x = std::stod(attr(tag, "x")), y = std::stod(attr(tag, "y"));
      size_t glyphs = 0;
      for (size_t k = 0; k < text.size(); ++k)
        if (text[k] == '&')
          k = text.find(';', k), ++glyphs;
        else
          glyphs += (static_cast<unsigned char>(text[k]) & 0xC0) != 0x80;
      const double w = static_cast<double>(glyphs) * font * 0.5;
      const std::string a = attr(tag, "text-anchor");
      const double x0 = a == "middle" ? x - w / 2 : a == "end" ? x - w : x;
      out.push_back({text, x0, y - 0.8 * font, x0 + w, y + 0.2 * font});
    }
  }
  return out;
}
// "" when no two text boxes of the SVG intersect, else the first pair that does.
std::string overlapping_texts(const std::string& svg) {
  const std::vector<TextBox> b = text_boxes(svg);
  for (size_t i = 0; i < b.size(); ++i)
    for (size_t j = i + 1; j < b.size(); ++j)
      if (b[i].x0 < b[j].x1 && b[j].x0 < b[i].x1 && b[i].y0 < b[j].y1 && b[j].y0 < b[i].y1)
        return "'" + b[i].text + "' and '" + b[j].text + "'";
  return "";
}

}  // namespace

TEST_CASE("no two labels of a plot overlap: legend rows, thinned tick labels, reference-line labels") {
  dbg::Plot p{"update-to-weight ratio per parameter", "step", "||dw|| / ||w||", true, {}, {}, {}, "", {}};
  for (int i = 0; i < 12; ++i)
    p.series.push_back({"encoder.block" + std::to_string(i) + ".attention.query_projection.weight",
                        {1e6, 2e6, 3e6},
                        {1e-3 * (i + 1), 2e-3, 3e-3}});
  p.series[3].y = {0.0, 0.0, 0.0};  // a dead layer: at the floor
  p.lines = {{1e-5, "O6: too low below 1e-5"}, {1.2e-5, "another line right beside it"}, {1e-1, "O6: too high"}};
  p.bands = {{1e-4, 1e-2, "healthy: about 1e-3"}};
  const std::string svg = dbg::render_svg(p);
  CHECK(check_balanced(svg) == "");
  CHECK(text_boxes(svg).size() > 20);
  CHECK(overlapping_texts(svg) == "");
  // Every series is listed (a long name wraps onto a second row), or counted as "more".
  CHECK((svg.find("... ") != std::string::npos || count(svg, "attention.query") >= 12));
  // Ticks at 1e6 .. 3e6 with many steps: labels are thinned, tick marks are not.
  dbg::Plot dense{"dense", "step", "v", false, {{"s", {1234567.0, 1234567.0 + 250.0}, {1.0, 2.0}}}, {}, {}, "", {}};
  const std::string d = dbg::render_svg(dense);
  CHECK(overlapping_texts(d) == "");
  // The checker itself finds an overlap.
  CHECK(overlapping_texts("<svg><text x=\"10\" y=\"10\" font-size=\"11\">abc</text>"
                          "<text x=\"12\" y=\"12\" font-size=\"11\">def</text></svg>") != "");
}

TEST_CASE("the batch-mixing heat map has example indices on both axes, thinned when the cells are small") {
  dbg::HeatMap h;
  h.title = "batch-mixing Jacobian: |d output[i] / d input[j]|";
  h.x_label = "input example j";
  h.y_label = "output row i";
  h.rows = h.cols = 12;
  for (int i = 0; i < 144; ++i) h.values.push_back(i % 13 == 0 ? 0.9 : 0.01);
  const std::string svg = dbg::render_heatmap(h);
  CHECK(check_balanced(svg) == "");
  // Each index as a column and as a row label (and 0 once more: the colour scale's white end).
  for (int k = 0; k < 12; ++k) CHECK(count(svg, ">" + std::to_string(k) + "</text>") == (k == 0 ? 3 : 2));
  CHECK(overlapping_texts(svg) == "");
  h.rows = h.cols = 200;  // 3-pixel cells: not every index fits
  h.values.assign(200 * 200, 0.5);
  const std::string big = dbg::render_heatmap(h);
  CHECK(overlapping_texts(big) == "");
  CHECK(count(big, ">0</text>") == 3);
  CHECK(count(big, ">1</text>") == 0);  // thinned
}

TEST_CASE("multi-line text keeps its line breaks: a model summary in a cause, a multi-line fix, a summary value") {
  dbg::HtmlReport rep;
  rep.summary = {{"model", "0 (Linear)  [8, 4]\n1 (ReLU)    [8, 4]"}};
  dbg::Finding f;
  f.check = "M1";
  f.severity = dbg::Severity::Warning;
  f.title = "model summary";
  f.cause = "\n0 (Linear)  [8, 4]  20\n1 (ReLU)    [8, 4]  0 <none>\n2 (Linear)  [8, 2]  10";
  f.fix = "one line";
  rep.findings.add(f);
  dbg::LeadFinding l;
  l.finding = f;
  rep.lead = l;
  const std::string html = dbg::render_html(rep);
  CHECK(check_balanced(html) == "");
  // Table cells keep their line breaks (white-space: pre-wrap), escaped; a multi-line one is fixed-width.
  CHECK(html.find("td, .lead p { white-space: pre-wrap; }") != std::string::npos);
  // A cause of three lines or more gets a full-width row of its own under the finding.
  CHECK(html.find("<td class=\"note\">(below)</td>") != std::string::npos);
  CHECK(
      html.find("<tr class=\"sev-warning detail\"><td></td><td colspan=\"7\"><div class=\"lines\">likely cause:\n"
                "0 (Linear)  [8, 4]  20\n1 (ReLU)    [8, 4]  0 &lt;none&gt;\n2 (Linear)  [8, 2]  10</div></td></tr>") !=
      std::string::npos);
  // Two lines stay in their cell.
  dbg::Finding two = f;
  two.check = "M7";
  two.cause = "first line\nsecond line";
  dbg::HtmlReport rep2;
  rep2.findings.add(two);
  CHECK(dbg::render_html(rep2).find("<td class=\"lines\">first line\nsecond line</td>") != std::string::npos);
  CHECK(html.find("div.lines { white-space: pre-wrap; }") != std::string::npos);
  CHECK(html.find("<td class=\"lines\">0 (Linear)  [8, 4]\n1 (ReLU)    [8, 4]</td>") != std::string::npos);
  CHECK(html.find("<td>one line</td>") != std::string::npos);
  CHECK(html.find("<p class=\"lines\">likely cause: \n0 (Linear)") != std::string::npos);
  // The follow-on rows' wrapper cell does not keep the markup's own line breaks.
  CHECK(html.find("tr.follow-on > td { white-space: normal; }") != std::string::npos);
}

TEST_CASE("the range watch's pictures: the exponent histogram against the dtype's band, the layers x steps heat map") {
  dbg::TrainingHistory h;
  h.range_dtype = "float16";
  h.range_zeros = 40;
  std::vector<std::pair<int64_t, double>> grads, acts;
  for (int e = -40; e <= 20; ++e) {
    grads.emplace_back(e, e >= -30 && e <= -10 ? 100.0 : 0.0);  // a pile partly below 2^-24
    acts.emplace_back(e, e >= -4 && e <= 4 ? 500.0 : 0.0);
  }
  h.range_exponents = {{"activation gradients", grads}, {"activations", acts}};
  h.range_share = {{"fc1 (Linear)", {{1, 0.02}, {10, 0.3}, {20, 0.9}}}, {"fc2 (Linear)", {{1, 0.0}, {20, 0.05}}}};
  const dbg::Plot p = dbg::range_histogram_plot(h);
  const std::string svg = dbg::render_svg(p);
  CHECK(check_balanced(svg) == "");
  CHECK(count(svg, "class=\"xband\"") == 2);  // subnormal and normal
  CHECK(svg.find("float16 normal") != std::string::npos);
  CHECK(count(svg, "<polyline") == 2);
  CHECK(overlapping_texts(svg) == "");
  CHECK(p.caption.find("40 values were zero") != std::string::npos);
  h.range_dtype = "bfloat16";
  CHECK(count(dbg::render_svg(dbg::range_histogram_plot(h)), "class=\"xband\"") == 1);

  const dbg::HeatMap m = dbg::range_heatmap(h);
  CHECK(m.rows == 2);
  CHECK(m.cols == 3);  // steps 1, 10, 20
  REQUIRE(m.values.size() == 6);
  CHECK(m.values[2] == doctest::Approx(0.9));  // fc1 at step 20
  CHECK(m.values[4] == 0.0);                   // fc2 has no value at step 10
  const std::string hm = dbg::render_heatmap(m);
  CHECK(check_balanced(hm) == "");
  CHECK(hm.find(">fc1 (Linear)</text>") != std::string::npos);
  CHECK(hm.find(">20</text>") != std::string::npos);
  CHECK(overlapping_texts(hm) == "");
  // Labels that do not match the matrix are an error, not a silently wrong picture.
  dbg::HeatMap bad = m;
  bad.row_labels.pop_back();
  CHECK_THROWS_WITH_AS(dbg::render_heatmap(bad), doctest::Contains("row labels"), gs::Error);
  // In the page: under the plots.
  dbg::HtmlReport rep;
  rep.plots.push_back(p);
  rep.heatmaps.push_back(m);
  const std::string page = dbg::render_html(rep);
  CHECK(page.find("class=\"heatmap\"") != std::string::npos);
  CHECK(page.find("<h2>Plots</h2>") < page.find("class=\"heatmap\""));
}
