// Tests of `gradsleuth lab`: runs the built tool (GS_CLI_PATH), which runs each lab's
// grader (GS_LAB_GRADER_DIR/labN_grader, the starter code), and checks the list, the JSON
// report and the summary line. Whatever the student has finished, grading must run to
// the end and exit 0, and a task whose stub still throws must get 0 points and say so.
// A lab whose grader is missing (its code did not compile) is reported with the command
// that builds it, and the other labs are still graded.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <unistd.h>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/cli_test_util.h"
#include "tests/json_mini.h"

namespace {

using clitest::Run;
inline Run run_cli(const std::string& args) { return clitest::run_cli(args, false); }

// `VAR=value gradsleuth ARGS`: stdout, and stderr too when `with_stderr`.
Run run_cli_env(const std::string& env, const std::string& args, bool with_stderr = false) {
  Run r;
  const std::string cmd = env + " \"" + GS_CLI_PATH + "\" " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE_MESSAGE(p != nullptr, "could not start ", cmd);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

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

TEST_CASE("lab check all --json: every lab's grader in turn, the points summed") {
  Run r = run_cli("lab check all --json");
  INFO(r.out.substr(0, 2000));
  CHECK(r.status == 0);
  json_mini::Value doc;
  REQUIRE_NOTHROW(doc = json_mini::parse(r.out));
  REQUIRE(doc.get("labs"));
  REQUIRE(doc.get("labs")->arr.size() >= 9);
  double points = 0, max_points = 0;
  for (size_t i = 0; i < doc.get("labs")->arr.size(); ++i) {
    const json_mini::Value& l = doc.get("labs")->arr[i];
    CHECK(l.get("lab")->num == static_cast<double>(i + 1));
    REQUIRE(l.get("tasks"));
    points += l.get("points")->num;
    max_points += l.get("max_points")->num;
  }
  CHECK(doc.get("points")->num == points);
  CHECK(doc.get("max_points")->num == max_points);
  CHECK(max_points > 0);
  CHECK(doc.get("not_graded") == nullptr);
}

TEST_CASE("a lab whose grader is missing: named with its build command; the others are graded") {
  // A graders directory with lab 1's grader only, as after lab 2..9 failed to compile.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("gs_cli_lab_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::create_symlink(fs::path(GS_LAB_GRADER_DIR) / "lab1_grader", dir / "lab1_grader");
  const std::string env = "GRADSLEUTH_LAB_GRADERS='" + dir.string() + "'";

  Run one = run_cli_env(env, "lab check 2", true);
  INFO(one.out);
  CHECK(one.status == 1);
  CHECK(one.out.find("lab 2's grader is not built") != std::string::npos);
  CHECK(one.out.find("--target lab2_grader") != std::string::npos);
  CHECK(one.out.find("./run.sh lab check 2") != std::string::npos);

  Run all = run_cli_env(env, "lab check all", true);
  INFO(all.out);
  CHECK(all.status == 1);
  CHECK(all.out.find("lab 1: 0/100 points") != std::string::npos);  // graded
  CHECK(all.out.find("lab 2: not graded") != std::string::npos);
  CHECK(all.out.find("(not graded: lab 2 lab 3") != std::string::npos);

  Run json = run_cli_env(env, "lab check all --json");
  INFO(json.out);
  CHECK(json.status == 1);
  json_mini::Value doc;
  REQUIRE_NOTHROW(doc = json_mini::parse(json.out));
  REQUIRE(doc.get("labs"));
  CHECK(doc.get("labs")->arr.size() == 1);
  REQUIRE(doc.get("not_graded"));
  CHECK(doc.get("not_graded")->arr.size() >= 8);
  CHECK(doc.get("not_graded")->arr[0].get("lab")->num == 2);
  fs::remove_all(dir);
}

TEST_CASE("a grader older than its lab's files: a warning to rebuild, and grading still runs") {
  // A copy of lab 1's grader dated 1 s after the epoch: every file of tutorials/lab1_tensors is newer.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("gs_cli_lab_stale_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(fs::path(GS_LAB_GRADER_DIR) / "lab1_grader", dir / "lab1_grader");
  fs::last_write_time(dir / "lab1_grader", fs::file_time_type::clock::now() - std::chrono::hours(24 * 365 * 30));
  const std::string env = "GRADSLEUTH_LAB_GRADERS='" + dir.string() + "'";
  Run r = run_cli_env(env, "lab check 1", true);
  INFO(r.out);
  CHECK(r.status == 0);
  const size_t warning = r.out.find("gradsleuth lab: warning: ");
  REQUIRE(warning != std::string::npos);
  CHECK(r.out.find("tutorials/lab1_tensors/", warning) != std::string::npos);
  CHECK(r.out.find("was built: this grades your previous code. Rebuild first: ./run.sh lab check 1") !=
        std::string::npos);
  CHECK(r.out.find("lab 1: 0/100 points") != std::string::npos);
  // The grader as built by CMake is newer than the lab's files: no warning.
  Run fresh = run_cli_env("", "lab check 1", true);
  CHECK(fresh.out.find("warning:") == std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("lab list with no grader built: every lab and task from tutorials/labs.txt, one build hint") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("gs_cli_lab_none_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  Run r = run_cli_env("GRADSLEUTH_LAB_GRADERS='" + dir.string() + "'", "lab list", true);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("Task 1.1  row-major strides") != std::string::npos);
  CHECK(r.out.find("Task 3.7") != std::string::npos);
  CHECK(r.out.find("lab 10: ") != std::string::npos);
  CHECK(r.out.find("Task 11.3  a SIMD register-blocked micro-kernel") != std::string::npos);
  const size_t hint = r.out.find("No lab's grader is built yet");
  REQUIRE(hint != std::string::npos);
  CHECK(r.out.find("./run.sh lab check", hint) != std::string::npos);
  CHECK(r.out.find("not built", hint + 1) == std::string::npos);  // said once
  CHECK(r.out.find("is not built") == std::string::npos);         // no per-lab message
  fs::remove_all(dir);
}

TEST_CASE("lab check --gradescope, --seed and grade-all refuse contradictions before any work") {
  CHECK(run_cli("lab check 1 --gradescope --json 2>/dev/null").status != 0);
  CHECK(run_cli("lab check 1 --out x.json 2>/dev/null").status != 0);
  CHECK(run_cli("lab check 1 --seed 0x10 2>/dev/null").status != 0);
  CHECK(run_cli("lab check all --gradescope 2>/dev/null").status != 0);
  CHECK(run_cli("lab grade-all 1 /nonexistent-folder --out /tmp/x.csv 2>/dev/null").status != 0);
  CHECK(run_cli("lab grade-all 99 . --out /tmp/x.csv 2>/dev/null").status != 0);
  CHECK(run_cli("lab list --jobs 2 2>/dev/null").status != 0);
}
