// Bad command lines that used to be accepted, fail late or give a raw message: each is refused
// at once with what was wrong (the CLI as a user runs it).
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli_test_util.h"

namespace fs = std::filesystem;
using clitest::Run;

// Whether the CLI links the kernel workbench (-DGRADSLEUTH_CLI_WORKBENCH, cli/CMakeLists.txt): without it
// every `kernels` command is refused with how to build it.
#ifndef GS_CLI_WORKBENCH
#define GS_CLI_WORKBENCH 1
#endif
constexpr bool kWorkbench = GS_CLI_WORKBENCH != 0;

namespace {
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
// Runs a command line the CLI must refuse (a nonzero exit) and returns what it printed (stdout and
// stderr), for the message's checks.
std::string refused(const std::string& args) {
  const Run r = clitest::run_cli_all(args);
  CHECK_MESSAGE(r.status != 0, args);
  return r.out;
}
std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}
}  // namespace

TEST_CASE("doctor: an --out folder holding an earlier report is refused before any work unless --overwrite") {
  const fs::path dir = fs::temp_directory_path() / ("gs_cli_doctor_over_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  { std::ofstream(dir / "report.html") << "<p>an earlier report</p>"; }
  const Run r = clitest::run_cli_all("doctor --out " + dir.string() + " --data-dir /nonexistent");
  CHECK(r.status != 0);
  CHECK(has(r.out, "holds an earlier report (report.html)"));
  CHECK(has(r.out, "--overwrite"));
  CHECK(!has(r.out, "/nonexistent"));  // refused before the data was looked for
  CHECK(slurp(dir / "report.html") == "<p>an earlier report</p>");
  // With --overwrite the check passes and the run goes on (here to the missing data set).
  const Run o = clitest::run_cli_all("doctor --overwrite --out " + dir.string() + " --data-dir /nonexistent");
  CHECK(o.status != 0);
  CHECK(!has(o.out, "earlier report"));
  CHECK(has(o.out, "/nonexistent"));
  fs::remove_all(dir);
}

TEST_CASE("a repeated flag is refused like a repeated option") {
  CHECK(has(refused("ops --json --json"), "--json was given twice"));
  CHECK(has(refused("train --seed 1 --seed 2"), "--seed was given twice"));
  CHECK(clitest::run_cli("ops --json", true).status == 0);
}

TEST_CASE("numbers too large or too small are named as such, with the limit") {
  if (kWorkbench) {
    CHECK(has(refused("kernels bench matmul --device cpu --size 1000000000000"),
              "--size must be an integer in [1, 1073741824], got '1000000000000' (too large)"));
    const std::string huge = refused("kernels bench matmul --device cpu --size 100000000000000000000000");
    CHECK(has(huge, "--size is too large"));
    CHECK(!has(huge, "needs an integer"));
  }
  CHECK(has(refused("train --lr 1e-320 --data-dir /nonexistent"),
            "--lr is too small: '1e-320' is below the smallest normal double"));
  CHECK(has(refused("train --lr 1e400 --data-dir /nonexistent"), "--lr is too large"));
}

TEST_CASE("kernels roofline: an --out that cannot be written is refused before measuring") {
  if (!kWorkbench) return;  // refused as a whole: below
  const auto t0 = std::chrono::steady_clock::now();
  const Run r = clitest::run_cli_all("kernels roofline --device cpu --quick --out /nonexistent-dir/roofline.svg");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.status != 0);
  CHECK(has(r.out, "/nonexistent-dir"));
  CHECK(has(r.out, "does not exist"));
  CHECK(s < 3.0);  // no measuring ran (it takes seconds)
}

TEST_CASE("kernels in a CLI built without the workbench: refused, naming the option and how to build it") {
  CHECK(clitest::run_cli("kernels --help", true).status == 0);  // the help says what it does in either build
  if (kWorkbench) return;
  for (const char* cmd : {"kernels list", "kernels bench matmul --device cpu", "kernels roofline --out x.svg"}) {
    CAPTURE(cmd);
    const std::string out = refused(cmd);
    CHECK(has(out, "without the kernel workbench"));
    CHECK(has(out, "-DGRADSLEUTH_CLI_WORKBENCH=ON"));
    CHECK(has(out, "./run.sh kernels"));
  }
}
