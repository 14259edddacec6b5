// workbench/tests/test_cpu_ladder.cpp: every version of every CPU workbench kernel against the
// float64 reference at sizes that are multiples of no block, tile or vector width (and on
// several threads); reduce's accuracy against each version's a priori bound; the vector exp's
// and GELU's error bounds over dense sweeps; the measured limits; the argument checks; the
// roofline SVG.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "workbench/ladders.h"
#include "workbench/simd.h"

namespace cw = gradsleuth::workbench::cpu;
namespace wb = gradsleuth::workbench;

namespace {

cw::Options fast(int threads = 1) {
  cw::Options o;
  o.threads = threads;
  o.warmup = 0;
  o.repeats = 1;
  return o;
}

void check_all_versions(const std::string& kernel, const wb::Shape& s, int threads = 1) {
  const cw::Ladder* l = cw::find_ladder(kernel);
  REQUIRE(l);
  for (const cw::Rung& g : l->rungs) {
    INFO(kernel, " v", g.v.number, " (", g.v.name, ") at ", cw::shape_str(*l, s), ", ", threads, " threads");
    const cw::Result r = cw::run(kernel, g.v.number, s, fast(threads));
    if (!g.skip.empty()) {
      CHECK(r.skipped == g.skip);
      continue;
    }
    INFO("mismatches ", r.validation.mismatches, " of ", r.validation.n, "; first at ", r.validation.first_bad,
         ": want ", r.validation.first_want, ", got ", r.validation.first_got, "; max abs err ",
         r.validation.max_abs_err, " (atol ", r.atol, ", rtol ", r.rtol, ")");
    CHECK(r.validation.ok);
    CHECK(r.validation.n > 0);
    CHECK(r.repeats == 1);
    CHECK(r.ms >= 0);
    if (r.has_accuracy) {
      INFO("accuracy: relative error ", r.accuracy_err, ", bound ", r.accuracy_bound);
      CHECK(r.accuracy_ok);
    }
  }
}

}  // namespace

TEST_CASE("cpu workbench: matmul, every version, odd sizes") {
  SUBCASE("37 x 70 x 45: nothing a multiple of a tile or a vector") { check_all_versions("matmul", {37, 70, 45}); }
  SUBCASE("1 x 1 x 1") { check_all_versions("matmul", {1, 1, 1}); }
  SUBCASE("13 x 33 x 300: K past one k-block, N one past a 2-vector panel") {
    check_all_versions("matmul", {13, 33, 300});
  }
  SUBCASE("101 x 131 x 67 on 3 threads: uneven row blocks") { check_all_versions("matmul", {101, 131, 67}, 3); }
}

TEST_CASE("cpu workbench: softmax and layernorm, every version, odd sizes") {
  for (const char* k : {"softmax", "layernorm"}) {
    SUBCASE((std::string(k) + " 7 rows x 33").c_str()) { check_all_versions(k, {7, 33, 0}); }
    SUBCASE((std::string(k) + " 5 rows x 1").c_str()) { check_all_versions(k, {5, 1, 0}); }
    SUBCASE((std::string(k) + " 9 rows x 1001, 2 threads").c_str()) { check_all_versions(k, {9, 1001, 0}, 2); }
  }
}

TEST_CASE("cpu workbench: reduce and gelu, every version, odd sizes") {
  for (const char* k : {"reduce", "gelu"}) {
    SUBCASE((std::string(k) + " 1 element").c_str()) { check_all_versions(k, {0, 1, 0}); }
    SUBCASE((std::string(k) + " 1027 elements").c_str()) { check_all_versions(k, {0, 1027, 0}); }
    SUBCASE((std::string(k) + " 300001 elements, 3 threads").c_str()) { check_all_versions(k, {0, 300001, 0}, 3); }
  }
}

TEST_CASE("cpu workbench: conv2d, every version, odd sizes") {
  SUBCASE("batch 2 x 3 channels x 7 x 7: a partial Winograd tile") { check_all_versions("conv2d", {3, 7, 2}); }
  SUBCASE("batch 1 x 5 channels x 1 x 1") { check_all_versions("conv2d", {5, 1, 1}); }
  SUBCASE("batch 3 x 8 channels x 13 x 13 on 2 threads") { check_all_versions("conv2d", {8, 13, 3}, 2); }
}

TEST_CASE("cpu workbench: reduce's accuracy: naive loses bits, pairwise and Kahan do not, each within its bound") {
  const int64_t n = (int64_t{1} << 22) + 5;  // the running sum passes 2^21: ulp 0.25, each add rounds
  double err[7] = {};
  for (int v = 1; v <= 6; ++v) {
    const cw::Result r = cw::run("reduce", v, {0, n, 0}, fast());
    if (!r.skipped.empty()) continue;
    INFO("v", v, ": relative error ", r.accuracy_err, ", bound ", r.accuracy_bound);
    REQUIRE(r.has_accuracy);
    CHECK(r.accuracy_ok);
    CHECK(r.validation.ok);
    err[v] = r.accuracy_err;
  }
  CHECK(err[1] > 1e-4);  // one float running sum of 4M copies of 0.1f: every rounding has the same sign
  CHECK(err[6] < 1e-7);  // float64 lanes: one final rounding
  if (cw::simd::kHaveSimd) {
    CHECK(err[4] < err[1] / 10);
    CHECK(err[5] < 2e-7);
  }
}

#if GS_WB_SIMD
TEST_CASE("cpu workbench: simd::exp is within 2 ulp of exp over [-87, 88]") {
  using namespace cw::simd;
  double worst = 0;
  float in[kW], out[kW];
  int filled = 0;
  auto flush = [&] {
    to_array(exp(load(in)), out);
    for (int i = 0; i < filled; ++i) {
      const double want = std::exp(static_cast<double>(in[i]));
      worst = std::max(worst, std::fabs(out[i] - want) / want);
    }
    filled = 0;
  };
  const int64_t N = 1 << 21;  // 2M points across the range, plus the ends
  for (int64_t i = 0; i <= N; ++i) {
    in[filled++] = static_cast<float>(-87.0 + 175.0 * static_cast<double>(i) / N);
    if (filled == kW) flush();
  }
  const int tail = filled;
  for (int i = filled; i < kW; ++i) in[i] = 0;
  filled = tail;
  flush();
  INFO("worst relative error ", worst);
  CHECK(worst <= 2.0 * 1.1920928955078125e-07);
}
#endif

TEST_CASE("cpu workbench: gelu v2's vectorised formula is within its a priori bound over [-10, 10]") {
  if (!cw::simd::kHaveSimd) return;
  const double u = 5.9604644775390625e-08, k = std::sqrt(2.0 / 3.14159265358979323846);
  double worst = 0;
  int64_t checked = 0;
  const int64_t N = 1 << 21;
  for (int64_t i = 0; i <= N; ++i) {
    const float x = static_cast<float>(-10.0 + 20.0 * static_cast<double>(i) / N);
    const double xd = x, t = k * (xd + 0.044715 * xd * xd * xd);
    const double want = xd / (1.0 + std::exp(-2.0 * t));  // = 0.5 x (1 + tanh t), without its cancellation
    const double got = cw::gelu_simd_one(x);
    const double bound = (6.0 * std::fabs(2.0 * t) + 8.0) * u * std::fabs(want);
    if (std::fabs(got - want) > bound) {
      INFO("x = ", x, ": got ", got, ", want ", want, ", bound ", bound);
      CHECK(false);
      break;
    }
    worst = std::max(worst, want != 0 ? std::fabs(got - want) / std::fabs(want) : 0.0);
    ++checked;
  }
  MESSAGE("gelu v2: ", checked, " values, worst relative error ", worst);
  CHECK(checked > 100000);
}

TEST_CASE(
    "cpu workbench: the registry: versions numbered 1..n, each says what it changes; the top rungs are the engine's") {
  REQUIRE(cw::ladders().size() == 6);
  for (const cw::Ladder& l : cw::ladders()) {
    INFO(l.spec.name);
    CHECK(l.rungs.size() >= 3);
    CHECK(l.spec.versions.size() == l.rungs.size());
    for (size_t i = 0; i < l.rungs.size(); ++i) {
      CHECK(l.rungs[i].v.number == static_cast<int>(i + 1));
      CHECK_FALSE(l.rungs[i].v.change.empty());
      CHECK((l.rungs[i].skip.empty() == static_cast<bool>(l.rungs[i].fn)));
    }
    const wb::Shape s = cw::shape_for(l, 0, 0);
    CHECK_NOTHROW(cw::check_args(l.spec.name, 1, s));
    CHECK(cw::cost(l, s).flops > 0);
    CHECK(cw::cost(l, s).bytes > 0);
  }
  const cw::Ladder* mm = cw::find_ladder("matmul");
  REQUIRE(mm->rungs.size() == 8);
  CHECK(mm->rungs[6].v.change.find("core/cpu/fast/sgemm.h") != std::string::npos);
  CHECK(cw::find_ladder("conv2d")->rungs[2].v.change.find("core/cpu/fast/winograd.h") != std::string::npos);
  CHECK(cw::find_ladder("reduce")->rungs[5].v.change.find("core/cpu/accurate_sum.h") != std::string::npos);
}

TEST_CASE("cpu workbench: bad arguments are refused before any work, naming the valid choices") {
  auto message = [](auto f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string unknown = message([] { cw::run("conv", 1, {0, 10, 0}, fast()); });
  CHECK(unknown.find("unknown kernel 'conv'") != std::string::npos);
  CHECK(unknown.find("matmul, softmax, reduce, layernorm, gelu, conv2d") != std::string::npos);
  const std::string version = message([] { cw::run("softmax", 9, {4, 10, 0}, fast()); });
  CHECK(version.find("softmax has no CPU version 9") != std::string::npos);
  CHECK(version.find("3 (online one-pass)") != std::string::npos);
  CHECK(message([] { cw::run("gelu", 1, {0, 0, 0}, fast()); }).find("at least 1") != std::string::npos);
  CHECK(message([] { cw::run("gelu", 1, {0, 10, 0}, fast(0)); }).find("--threads") != std::string::npos);
  CHECK(message([] {
          cw::run("matmul", 1, {4096, 4096, 4096}, fast());
        }).find("--size 2048 or less") != std::string::npos);
}

TEST_CASE("cpu workbench: a broken version fails validation") {
  // The reference and the check are shared with the CUDA side; here a version that drops the
  // last column of C must be caught at an odd size.
  const cw::Ladder* mm = cw::find_ladder("matmul");
  const wb::Shape s{9, 11, 13};
  wb::Problem p = cw::make_problem(*mm, s);
  std::vector<const float*> in = {p.inputs[0].data(), p.inputs[1].data()};
  std::vector<float> out(p.want.size());
  mm->rungs[1].fn(in.data(), out.data(), s, 1);
  CHECK(wb::validate_result(out.data(), p.want.data(), 99, 0, 0, p.atol_each.data()).ok);
  for (int64_t i = 0; i < 9; ++i) out[static_cast<size_t>(i * 11 + 10)] += 1e-3f;
  const wb::Validation v = wb::validate_result(out.data(), p.want.data(), 99, 0, 0, p.atol_each.data());
  CHECK_FALSE(v.ok);
  CHECK(v.mismatches == 9);
}

TEST_CASE("cpu workbench: the measured limits are positive and the STREAM arrays pass the last-level cache") {
  const cw::Limits& l = cw::measure_limits(1, true);
  CHECK(l.fma_gflops > 0.5);
  CHECK(l.copy_gb_per_s > 0.5);
  CHECK(l.triad_gb_per_s > 0.5);
  CHECK(l.isa == cw::isa_level());
  CHECK(l.stream_mib >= 16);
  if (l.l3_mib > 0) CHECK(l.stream_mib >= 2 * l.l3_mib);
  CHECK(&cw::measure_limits(1, true) == &l);  // measured once
}

TEST_CASE("cpu workbench: the FMA peak is measured again after the runs, and a version above it is flagged") {
  // A first measurement taken in a slow minute (here: 1 GFLOP/s) gives way to the one after the runs.
  cw::Limits slow = cw::measure_limits(1, true);
  slow.fma_gflops = 1.0;
  CHECK(cw::confirm_fma_peak(slow, 0.5, true));
  CHECK(slow.fma_gflops_after > 1.0);
  CHECK(slow.fma_gflops == slow.fma_gflops_after);
  CHECK_FALSE(slow.peak_exceeded);
  // A first measurement above the second one stays: the peak is the best of both.
  cw::Limits high = cw::measure_limits(1, true);
  high.fma_gflops = 1e6;
  CHECK(cw::confirm_fma_peak(high, 10.0, true));
  CHECK(high.fma_gflops == 1e6);
  // A version faster than any measurement of the peak: its % would be above 100, so it is flagged.
  cw::Limits over = cw::measure_limits(1, true);
  CHECK_FALSE(cw::confirm_fma_peak(over, 1e9, true));
  CHECK(over.peak_exceeded);
  CHECK(over.fma_gflops < 1e9);
}

namespace {
// A result for version g of ladder l at its default shape, not yet timed (ms 0).
cw::Result untimed(const cw::Ladder& l, const cw::Rung& g) {
  cw::Result r;
  r.kernel = l.spec.name;
  r.version = g.v.number;
  r.name = g.v.name;
  r.cost = cw::cost(l, cw::shape_for(l, 0, 0));
  return r;
}
}  // namespace

TEST_CASE("cpu workbench: the roofline SVG has a dot per version, the roof, and labels that do not overlap") {
  cw::Limits lim;
  lim.cpu = "test CPU";
  lim.isa = "AVX-512";
  lim.fma_gflops = 100;
  lim.copy_gb_per_s = 25;
  std::vector<cw::Result> rs;
  int n = 0;
  for (const cw::Ladder& l : cw::ladders())
    for (const cw::Rung& g : l.rungs) {
      cw::Result r = untimed(l, g);
      // crowded on purpose: every version of a kernel within a factor 2 of the next
      r.ms = r.cost.flops / (1e6 * (l.spec.compute_bound ? 3.0 * g.v.number * g.v.number : 0.8 * g.v.number));
      rs.push_back(r);
      ++n;
    }
  const std::string svg = cw::roofline_svg(lim, rs);
  CHECK(svg.rfind("<svg class=\"plot\" id=\"roofline\"", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  size_t dots = 0, at = 0;
  while ((at = svg.find("<circle class=\"point\"", at)) != std::string::npos) ++dots, ++at;
  CHECK(dots == static_cast<size_t>(n));
  CHECK(svg.find("data-name=\"roof\"") != std::string::npos);
  CHECK(svg.find("FMA peak 100 GFLOP/s") != std::string::npos);
  CHECK(svg.find("no room for the label") == std::string::npos);
  CHECK(svg.find("data-kernel=\"conv2d\" data-version=\"3\"") != std::string::npos);
}

namespace {
// The boxes of an SVG's texts of one class as a browser renders an 11 px sans-serif font, with a
// margin: 7.5 px a character, 10.5 px above the baseline and 2.6 below. x/y are a label's start and
// baseline, or a right-aligned ceiling's end and baseline.
struct TextBox {
  std::string text;
  double x0, y0, x1, y1;
};
std::vector<TextBox> text_boxes(const std::string& svg, const std::string& cls) {
  std::vector<TextBox> out;
  const std::string open = "<text class=\"" + cls + "\" x=\"";
  for (size_t at = svg.find(open); at != std::string::npos; at = svg.find(open, at + 1)) {
    const size_t end_tag = svg.find('>', at), close = svg.find("</text>", end_tag);
    const std::string tag = svg.substr(at, end_tag - at);
    const double x = std::stod(tag.substr(open.size()));
    const double y = std::stod(tag.substr(tag.find(" y=\"") + 4));
    const std::string text = svg.substr(end_tag + 1, close - end_tag - 1);
    const double w = 7.5 * static_cast<double>(text.size());
    const bool right = tag.find("text-anchor=\"end\"") != std::string::npos;
    out.push_back({text, right ? x - w : x, y - 10.5, right ? x : x + w, y + 2.6});
  }
  return out;
}
}  // namespace

TEST_CASE("cpu workbench: the roofline's labels keep clear of the ceilings' where the dots sit on the roof") {
  // A loaded machine measures a lower FMA peak, and the best matmul versions then reach it: their
  // labels crowd the peak's label at the plot's right edge. Peaks and reaches across a range.
  for (double peak = 40; peak <= 160; peak += 7.3)
    for (double reach : {0.85, 0.93, 0.99})
      for (double intensity : {8.0, 30.0, 60.0, 120.0, 250.0}) {
      cw::Limits lim;
      lim.cpu = "test CPU";
      lim.isa = "AVX2+FMA";
      lim.fma_gflops = peak;
      lim.copy_gb_per_s = 20;
      std::vector<cw::Result> rs;
      for (const cw::Ladder& l : cw::ladders()) {
        if (l.spec.name != "matmul") continue;
        for (const cw::Rung& g : l.rungs) {
          cw::Result r = untimed(l, g);
          r.cost.bytes = r.cost.flops / intensity;  // where the size puts the column of matmul dots
          const double gflops = g.v.number >= 4 ? peak * (reach + 0.005 * g.v.number) : 10.0 * g.v.number;
          r.ms = r.cost.flops / (1e6 * gflops);
          rs.push_back(r);
        }
      }
      REQUIRE(rs.size() >= 5);
      const std::string svg = cw::roofline_svg(lim, rs);
      INFO("peak ", peak, " reach ", reach, " intensity ", intensity);
      CHECK(svg.find("no room for the label") == std::string::npos);
      const std::vector<TextBox> ceilings = text_boxes(svg, "ceiling"), labels = text_boxes(svg, "label");
      REQUIRE(ceilings.size() == 2);
      CHECK(labels.size() == rs.size());
      for (const TextBox& c : ceilings)
        for (const TextBox& b : labels) {
          INFO(c.text, " and ", b.text);
          CHECK_FALSE((b.x0 < c.x1 && c.x0 < b.x1 && b.y0 < c.y1 && c.y0 < b.y1));
        }
    }
}
