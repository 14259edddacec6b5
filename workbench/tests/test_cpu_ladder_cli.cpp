// workbench/tests/test_cpu_ladder_cli.cpp: `gradsleuth kernels list`, `kernels bench NAME
// --device cpu` (text and JSON) and `kernels roofline --device cpu` (the SVG parses, has a dot
// per built version, and renders in headless Chromium without overlapping labels when Chromium
// is installed).
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/cli_test_util.h"
#include "tests/json_mini.h"

using clitest::Run;
using clitest::run_cli;
using clitest::run_cli_all;
using clitest::run_command;

namespace {
json_mini::Value parse(const Run& r) {
  json_mini::Value doc;
  REQUIRE_NOTHROW(doc = json_mini::parse(r.out));
  return doc;
}
}  // namespace

TEST_CASE("kernels list: the CPU versions beside the CUDA ones") {
  const Run r = run_cli("kernels list --json");
  INFO(r.out.substr(0, 3000));
  REQUIRE(r.status == 0);
  const json_mini::Value doc = parse(r);
  const json_mini::Value* cpu = doc.get("cpu");
  REQUIRE(cpu);
  const auto& ks = cpu->get("kernels")->arr;
  REQUIRE(ks.size() == 6);
  CHECK(ks[0].get("name")->str == "matmul");
  CHECK(ks[0].get("versions")->arr.size() == 8);
  CHECK(ks[5].get("name")->str == "conv2d");
  for (const auto& k : ks)
    for (size_t i = 0; i < k.get("versions")->arr.size(); ++i)
      CHECK(k.get("versions")->arr[i].get("version")->num == static_cast<double>(i + 1));
  const Run t = run_cli("kernels list");
  CHECK(t.status == 0);
  CHECK(t.out.find("The kernel workbench on the CPU (workbench/)") != std::string::npos);
  CHECK(t.out.find("v7  engine (packing-free)") != std::string::npos);
  CHECK(t.out.find("kernels roofline --device cpu") != std::string::npos);
}

TEST_CASE("kernels bench matmul --device cpu --json: validated, timed, against the measured limits") {
  const Run r = run_cli("kernels bench matmul --device cpu --size 67 --repeats 3 --quick --json");
  INFO(r.out);
  REQUIRE(r.status == 0);
  const json_mini::Value doc = parse(r);
  CHECK(doc.get("device")->str == "cpu");
  CHECK(doc.get("passed")->b);
  CHECK(doc.get("limits")->get("fma_gflops")->num > 0);
  CHECK(doc.get("limits")->get("copy_gb_per_s")->num > 0);
  // matmul is compute-bound: the peak is measured again after the runs, and the best of both kept.
  CHECK(doc.get("limits")->get("fma_gflops_after")->num > 0);
  CHECK(doc.get("limits")->get("fma_gflops")->num >= doc.get("limits")->get("fma_gflops_after")->num);
  const bool exceeded = doc.get("limits")->get("peak_exceeded")->b;
  const auto& rs = doc.get("results")->arr;
  REQUIRE(rs.size() == 8);
  double fastest = 0;
  for (const auto& x : rs)
    if (!x.get("skipped")) fastest = std::max(fastest, x.get("gflops")->num);
  CHECK(exceeded == (fastest > doc.get("limits")->get("fma_gflops")->num));
  bool first = true;
  for (const auto& x : rs) {
    INFO("v", x.get("version")->num);
    if (x.get("skipped")) continue;
    CHECK(x.get("validation")->get("passed")->b);
    CHECK(x.get("repeats")->num == 3);
    const double ms = x.get("ms")->num;
    CHECK(ms > 0);
    CHECK(x.get("min_ms")->num <= ms);
    CHECK(x.get("max_ms")->num >= ms);
    CHECK(x.get("gflops")->num > 0);
    CHECK(x.get("pct_of_limit")->num > 0);
    CHECK(x.get("limit")->str == "fma_peak");
    if (first)
      CHECK(x.get("speedup_over_previous")->kind == json_mini::Value::Null);
    else
      CHECK(x.get("speedup_over_previous")->num > 0);
    first = false;
  }
}

TEST_CASE("kernels bench reduce --device cpu: a table with time, spread, GB/s, % of copy, speed-up and accuracy") {
  const Run r = run_cli("kernels bench reduce --device cpu --size 100003 --repeats 3 --quick", true);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("limits, measured now: FMA peak") != std::string::npos);
  CHECK(r.out.find("GB/s") != std::string::npos);
  CHECK(r.out.find("% limit") != std::string::npos);
  CHECK(r.out.find("speed-up") != std::string::npos);
  CHECK(r.out.find("a priori bound") != std::string::npos);
  CHECK(r.out.find("EXCEEDED") == std::string::npos);
  CHECK(r.out.find("FAILED") == std::string::npos);
  CHECK(r.out.find("  6  engine (float64 lanes)") != std::string::npos);
  const Run j = run_cli("kernels bench reduce --device cpu --size 5000 --version 5 --repeats 1 --quick --json");
  REQUIRE(j.status == 0);
  const json_mini::Value doc = parse(j);
  REQUIRE(doc.get("results")->arr.size() == 1);
  const auto& x = doc.get("results")->arr[0];
  if (!x.get("skipped")) {
    CHECK(x.get("accuracy")->get("within_bound")->b);
    CHECK(x.get("accuracy")->get("rel_err")->num <= x.get("accuracy")->get("bound")->num);
  }
}

TEST_CASE("kernels bench --device cpu: bad arguments are errors naming the fix") {
  Run r = run_cli_all("kernels bench conv --device cpu");
  CHECK(r.status == 1);
  CHECK(r.out.find("unknown kernel 'conv'") != std::string::npos);
  CHECK(r.out.find("conv2d") != std::string::npos);
  r = run_cli_all("kernels bench matmul --device cpu --version 9");
  CHECK(r.status == 1);
  CHECK(r.out.find("8 (") != std::string::npos);
  r = run_cli_all("kernels bench gelu --device cpu --threads 0");
  CHECK(r.status == 1);
  CHECK(r.out.find("--threads") != std::string::npos);
  r = run_cli_all("kernels bench gelu --device tpu");
  CHECK(r.status == 1);
  CHECK(r.out.find("use cpu or cuda") != std::string::npos);
  r = run_cli_all("kernels roofline --device cpu");
  CHECK(r.status == 1);
  CHECK(r.out.find("--out") != std::string::npos);
}

TEST_CASE("kernels roofline --device cpu --quick: an SVG with a dot per built version, checked in Chromium") {
  const std::string dir = std::string(GS_CLI_PATH) + "_roofline_test";
  const std::string svg = dir + "/roofline.svg";
  run_command("rm -rf '" + dir + "' && mkdir -p '" + dir + "'");
  const Run r = run_cli("kernels roofline --device cpu --quick --out '" + svg + "' --json", true);
  INFO(r.out.substr(0, 2000));
  REQUIRE(r.status == 0);
  const json_mini::Value doc = parse(r);
  CHECK(doc.get("passed")->b);
  size_t built = 0;
  for (const auto& x : doc.get("results")->arr) built += x.get("skipped") ? 0 : 1;
  CHECK(doc.get("results")->arr.size() == 28);  // 8 matmul + 4 softmax + 6 reduce + 4 layernorm + 3 gelu + 3 conv2d
  std::ifstream f(svg);
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  size_t dots = 0, at = 0;
  while ((at = text.find("<circle class=\"point\"", at)) != std::string::npos) ++dots, ++at;
  CHECK(dots == built);
  CHECK(text.find("no room for the label") == std::string::npos);
  // The SVG is well-formed XML (python3 is part of scripts/setup.sh).
  const Run xml = run_command(
      "python3 -c \"import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); "
      "print(len(d.getElementsByTagName('circle')))\" '" +
      svg + "' 2>&1");
  INFO(xml.out);
  CHECK(xml.status == 0);
  // In headless Chromium, as the HTML report is checked: no console error, the roof drawn, no two
  // labels overlapping (measured by the browser). Skipped where Chromium is not installed.
  const std::string html = dir + "/roofline.html";
  {
    std::ofstream h(html);
    h << "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>roofline</title></head><body><h1>roofline</h1>\n"
      << text << "</body></html>\n";
  }
  const Run browser =
      run_command("'" + std::string(GS_SOURCE_DIR) + "/scripts/check_report_browser.sh' '" + html + "' 2>&1");
  INFO(browser.out);
  if (browser.status == 77) {
    MESSAGE("no Chromium: the browser check was skipped (scripts/setup.sh --browser installs it)");
  } else {
    CHECK(browser.status == 0);
    CHECK(browser.out.find("OK labels checked: ") != std::string::npos);
    CHECK(browser.out.find("FAIL") == std::string::npos);
  }
}
