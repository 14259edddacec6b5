// tutorials/examples/own_model: a hand-written model and training loop with a debug::Session
// attached, run as a user runs it. Each bug switched on by --bug must be reported with its
// check, severity and the module or op it names; the clean twin must get no warning or error;
// the HTML report must be written either way.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "json_mini.h"

namespace {

struct Result {
  json_mini::Value doc;
  std::vector<const json_mini::Value*> findings;  // every phase's
  std::string html;
};

Result run(const std::string& bug) {
  const std::string out =
      (std::filesystem::temp_directory_path() / ("gs_own_model_" + (bug.empty() ? std::string("clean") : bug)))
          .string();
  std::filesystem::remove_all(out);
  clitest::Run r = clitest::run_cli((bug.empty() ? "" : "--bug " + bug) + " --json --out " + out, true);
  REQUIRE(r.status == 0);
  Result res;
  res.doc = json_mini::parse(r.out);
  const json_mini::Value* phases = res.doc.get("phases");
  REQUIRE(phases != nullptr);
  REQUIRE(phases->arr.size() == 4);
  for (const auto& p : phases->arr)
    for (const auto& f : p.get("findings")->arr) res.findings.push_back(&f);
  std::ifstream in(out + "/report.html");
  std::stringstream ss;
  ss << in.rdbuf();
  res.html = ss.str();
  return res;
}

// The findings of `check` that fired (warning or error).
std::vector<const json_mini::Value*> fired(const Result& r, const std::string& check) {
  std::vector<const json_mini::Value*> out;
  for (const json_mini::Value* f : r.findings)
    if (f->get("check")->str == check && f->get("severity")->str != "info") out.push_back(f);
  return out;
}

}  // namespace

TEST_CASE("own_model without a bug: every phase runs, no check fires, the HTML report is written") {
  const Result r = run("");
  const auto& phases = r.doc.get("phases")->arr;
  CHECK(phases[0].get("name")->str == "data checks");
  CHECK(phases[1].get("name")->str == "pre-training gate");
  CHECK(phases[2].get("name")->str == "training");
  CHECK(phases[3].get("name")->str == "end of run");
  for (const auto& p : phases) CHECK_MESSAGE(p.get("ran")->b, p.get("name")->str);
  for (const json_mini::Value* f : r.findings)
    CHECK_MESSAGE(f->get("severity")->str == "info", f->get("check")->str, ": ", f->get("title")->str);
  CHECK(r.doc.get("steps")->num == 4 * 32);
  CHECK(r.doc.get("stopped")->str.empty());
  // No normaliser in this pipeline: the report says D7 did not run and what it needs.
  bool d7 = false;
  for (const auto& s : r.doc.get("skipped")->arr) d7 = d7 || s.get("checks")->str == "D7";
  CHECK(d7);
  CHECK(r.html.find("<svg") != std::string::npos);
  CHECK(r.html.find("Checks that did not run") != std::string::npos);
}

TEST_CASE("own_model --bug no-zero-grad: O5 names the optimizer") {
  const Result r = run("no-zero-grad");
  const auto o5 = fired(r, "O5");
  REQUIRE(o5.size() == 1);
  CHECK(o5[0]->get("severity")->str == "warning");
  CHECK(o5[0]->get("module")->str.find("Adam") != std::string::npos);
}

TEST_CASE("own_model --bug eval-mode: M2 names the Dropout layer") {
  const Result r = run("eval-mode");
  const auto m2 = fired(r, "M2");
  REQUIRE(m2.size() >= 1);
  CHECK(m2[0]->get("severity")->str == "warning");
  CHECK(m2[0]->get("module")->str.find("Dropout") != std::string::npos);
  CHECK(fired(r, "O5").empty());
}

TEST_CASE("own_model --bug inplace: M20 from the gate and the loop, naming mul_; nothing escapes") {
  const Result r = run("inplace");
  const auto& phases = r.doc.get("phases")->arr;
  // The gate's backward raised the engine's in-place error: a finding, not an exception.
  bool gate_m20 = false;
  for (const auto& f : phases[1].get("findings")->arr)
    gate_m20 =
        gate_m20 || (f.get("check")->str == "M20" && f.get("severity")->str == "error" && f.get("op")->str == "mul_" &&
                     f.get("cause")->str.find("the pre-training gate's backward") != std::string::npos);
  CHECK(gate_m20);
  // The loop's first backward raised it again: training stopped at step 1, reported.
  CHECK(r.doc.get("stopped")->str.find("training stopped at step 1") != std::string::npos);
  CHECK(r.doc.get("steps")->num == 0);
  CHECK(!r.html.empty());
}
