// Tests of `gradsleuth lab`: runs the built tool (GS_CLI_PATH), which grades the
// starter code, and checks the list, the JSON report and the summary line.
// Whatever the student has finished, grading must run to the end and exit 0,
// and a task whose stub still throws must get 0 points and say so.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "tests/cli_test_util.h"
#include "tests/json_mini.h"

namespace {

using clitest::Run;
inline Run run_cli(const std::string& args) { return clitest::run_cli(args, false); }

}  // namespace

TEST_CASE("lab list --json names every lab and task with points") {
  Run r = run_cli("lab list --json");
  INFO(r.out.substr(0, 2000));
  CHECK(r.status == 0);
  json_mini::Value doc;
  REQUIRE_NOTHROW(doc = json_mini::parse(r.out));
  const json_mini::Value* labs = doc.get("labs");
  REQUIRE(labs);
  REQUIRE(labs->arr.size() >= 3);
  for (size_t i = 0; i < labs->arr.size(); ++i) {
    const json_mini::Value& l = labs->arr[i];
    REQUIRE(l.get("lab"));
    CHECK(l.get("lab")->num == static_cast<double>(i + 1));  // course order
    REQUIRE(l.get("tasks"));
    double sum = 0;
    for (const auto& t : l.get("tasks")->arr) {
      REQUIRE(t.get("points"));
      CHECK(t.get("points")->num > 0);
      sum += t.get("points")->num;
    }
    CHECK(sum == l.get("max_points")->num);
  }
}

TEST_CASE("lab list prints a table") {
  Run r = run_cli("lab list");
  CHECK(r.status == 0);
  CHECK(r.out.find("Task 1.1") != std::string::npos);
  CHECK(r.out.find("Task 3.7") != std::string::npos);
}

TEST_CASE("lab check N --json: every task reported; unfinished tasks get 0 points") {
  for (int lab : {1, 2, 3}) {
    INFO("lab ", lab);
    Run r = run_cli("lab check " + std::to_string(lab) + " --json");
    INFO(r.out.substr(0, 3000));
    CHECK(r.status == 0);
    json_mini::Value doc;
    REQUIRE_NOTHROW(doc = json_mini::parse(r.out));
    REQUIRE(doc.get("tasks"));
    double points = 0;
    for (const auto& t : doc.get("tasks")->arr) {
      const std::string status = t.get("status")->str;
      CHECK((status == "passed" || status == "partial" || status == "failed" || status == "not_implemented" ||
             status == "skipped"));
      if (status == "not_implemented") {
        CHECK(t.get("points")->num == 0);
        CHECK(t.get("feedback")->str.rfind("not implemented yet", 0) == 0);
      }
      CHECK(t.get("points")->num <= t.get("max_points")->num);
      points += t.get("points")->num;
    }
    CHECK(doc.get("points")->num == points);
  }
}

TEST_CASE("lab check N prints the summary line; a bad lab number is an error") {
  Run r = run_cli("lab check 1");
  CHECK(r.status == 0);
  CHECK(r.out.find("lab 1: ") != std::string::npos);
  CHECK(r.out.find(" points\n") != std::string::npos);
  Run one = run_cli("lab check 2 --task 1 --json");
  CHECK(one.status == 0);
  json_mini::Value doc = json_mini::parse(one.out);
  CHECK(doc.get("tasks")->arr.size() == 1);
  Run bad = run_cli("lab check 99 2>/dev/null");
  CHECK(bad.status != 0);
}
