// `gradsleuth zoo --json` on a small subset, `gradsleuth doctor --json`, and
// `gradsleuth checks --list --json`: the machine-readable outputs parse and hold
// what the issues promise.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "cli_test_util.h"
#include "fashion_mnist_required.h"
#include "json_mini.h"

namespace {

using clitest::Run;
inline Run run_cli(const std::string& args) { return clitest::run_cli(args, true); }

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

std::vector<std::string> strings(const json_mini::Value* v) {
  std::vector<std::string> out;
  if (!v) return out;
  for (const auto& e : v->arr) out.push_back(e.str);
  return out;
}

}  // namespace

TEST_CASE("checks --list --json lists the 75 checks with id, name and implemented") {
  Run r = run_cli("checks --list --json");
  CHECK(r.status == 0);
  json_mini::Value doc = json_mini::parse(r.out);
  REQUIRE(doc.kind == json_mini::Value::Array);
  CHECK(doc.arr.size() == 75);
  CHECK(doc.arr[0].get("id")->str == "D1");
  CHECK(doc.arr[0].get("name")->str == "batch sanity report");
  for (const auto& c : doc.arr) CHECK(c.get("implemented")->kind == json_mini::Value::Bool);
  // Sources: an array of public titles, never seed numbers.
  for (const auto& c : doc.arr) {
    const json_mini::Value* src = c.get("sources");
    REQUIRE(src != nullptr);
    REQUIRE(src->kind == json_mini::Value::Array);
    CHECK_FALSE(src->arr.empty());
    for (const auto& t : src->arr) CHECK(t.str.find_first_not_of("0123456789, ") != std::string::npos);
  }
  const std::vector<std::string> d1 = strings(doc.arr[0].get("sources"));
  REQUIRE_FALSE(d1.empty());
  CHECK(d1[0] == "\"Debugging Training\" (course notes, advanced level)");
}

TEST_CASE("checks --sources prints each source's authors, year and URL or DOI, as text and as JSON") {
  Run t = run_cli("checks --sources");
  CHECK(t.status == 0);
  CHECK(t.out.find("http://karpathy.github.io/2019/04/25/recipe/") != std::string::npos);
  CHECK(t.out.find("by:    Andrej Karpathy (2019)") != std::string::npos);
  CHECK(t.out.find("doi:10.14778/3415478.3415530") != std::string::npos);
  CHECK(t.out.find("course notes, no public URL") != std::string::npos);
  CHECK(t.out.find("doi:10.1145/3411764.3445538") != std::string::npos);  // UMLAUT, cited by M23, M24, O8
  Run r = run_cli("checks --sources --json");
  CHECK(r.status == 0);
  json_mini::Value doc = json_mini::parse(r.out);
  REQUIRE(doc.kind == json_mini::Value::Array);
  REQUIRE(doc.arr.size() >= 10);
  for (const auto& s : doc.arr) {
    INFO(s.get("short")->str);
    CHECK_FALSE(s.get("authors")->str.empty());
    CHECK_FALSE(s.get("year")->str.empty());
    CHECK(s.get("link")->str.empty() != s.get("no_link")->str.empty());
    CHECK(s.get("compared")->kind == json_mini::Value::Bool);
  }
}

TEST_CASE("zoo --json FILE on B13 and B28 writes the detection results") {
  testdata::require_fashion_mnist();
  const std::string path = "zoo_subset_test.json";
  std::filesystem::remove(path);
  Run r = run_cli("zoo --quick --quiet --bug B13 --bug b28 --json " + path);
  CHECK(r.status == 0);
  CHECK(r.out.find("2/2 bugs caught") != std::string::npos);
  CHECK(r.out.find("gradsleuth checks --list") != std::string::npos);       // the legend of check ids
  CHECK(r.out.find("M6 batch-mixing gradient test") != std::string::npos);  // B13's intended check, named
  std::ifstream f(path);
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  json_mini::Value doc = json_mini::parse(ss.str());
  const json_mini::Value* clean = doc.get("clean");
  REQUIRE(clean);
  CHECK(strings(clean->get("fired")).empty());
  CHECK(clean->get("test_accuracy")->num > 0.7);
  const json_mini::Value* bugs = doc.get("bugs");
  REQUIRE(bugs);
  REQUIRE(bugs->arr.size() == 2);
  const json_mini::Value& b13 = bugs->arr[0];
  CHECK(b13.get("id")->str == "B13");
  CHECK(strings(b13.get("intended")) == std::vector<std::string>{"M6"});
  const auto fired = strings(b13.get("fired"));
  CHECK(std::find(fired.begin(), fired.end(), "M6") != fired.end());
  CHECK(b13.get("caught")->b);
  CHECK(b13.get("test_accuracy")->kind == json_mini::Value::Number);
  CHECK(b13.get("final_loss")->kind == json_mini::Value::Number);
  CHECK(b13.get("seconds")->num > 0);
  CHECK(bugs->arr[1].get("id")->str == "B28");
  CHECK(bugs->arr[1].get("caught")->b);
  std::filesystem::remove(path);
}

TEST_CASE("zoo explains a bad bug name; doctor --json reports findings and writes the HTML report") {
  Run bad = run_cli("zoo --bug B99");
  CHECK(bad.status == 1);
  testdata::require_fashion_mnist();
  const std::string dir = "doctor_test_out";
  std::filesystem::remove_all(dir);
  Run r = run_cli("doctor --bug B18 --steps 40 --train-examples 2000 --json --out " + dir);
  CHECK(r.status == 0);
  json_mini::Value doc = json_mini::parse(r.out);
  const auto fired = strings(doc.get("fired"));
  CHECK(std::find(fired.begin(), fired.end(), "M7") != fired.end());
  REQUIRE(doc.get("findings"));
  CHECK_FALSE(doc.get("findings")->arr.empty());
  CHECK(doc.get("profile")->kind == json_mini::Value::Object);
  CHECK(doc.get("memory")->kind == json_mini::Value::Object);
  CHECK(std::filesystem::exists(dir + "/report.html"));
  CHECK(std::filesystem::exists(dir + "/metrics.csv"));
  CHECK(std::filesystem::exists(dir + "/explore.html"));  // the autograd explorer's page, linked from the report
  REQUIRE(doc.get("explore"));
  CHECK(doc.get("explore")->str == dir + "/explore.html");
  std::ifstream html(dir + "/report.html");
  std::stringstream hs;
  hs << html.rdbuf();
  CHECK(hs.str().find("<svg") != std::string::npos);
  CHECK(hs.str().find("M7") != std::string::npos);
  CHECK(hs.str().find("<a href=\"explore.html\">") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("zoo --json and doctor --out are checked writable before the run starts") {
  clitest::Run z = clitest::run_cli_all("zoo --bug B13 --quick --json /nonexistent-dir/x.json --data-dir /nonexistent");
  CHECK(z.status == 1);
  CHECK(z.out.find("--json '/nonexistent-dir/x.json'") != std::string::npos);
  CHECK(z.out.find("checked before the run starts") != std::string::npos);
  CHECK(z.out.find("clean reference") == std::string::npos);  // no progress line: nothing ran
  clitest::Run d = clitest::run_cli_all("doctor --out /proc/gradsleuth-no/x --json --data-dir /nonexistent");
  CHECK(d.status == 1);
  CHECK(d.out.find("--out '/proc/gradsleuth-no/x'") != std::string::npos);
  clitest::Run s = clitest::run_cli_all("zoo --steps 0");
  CHECK(s.status == 1);
  CHECK(s.out.find("--steps must be an integer in [1, 10000000]") != std::string::npos);
  clitest::Run seed = clitest::run_cli_all("doctor --seed -1");
  CHECK(seed.status == 1);
  CHECK(seed.out.find("--seed must be an integer >= 0") != std::string::npos);
}

TEST_CASE("zoo refuses a bug the model's recipe cannot reproduce before anything trains") {
  // B11 (a layer instance reused) exists in the mlp recipe only: the error must come at once,
  // not after the clean reference has trained.
  const auto t0 = std::chrono::steady_clock::now();
  Run r = clitest::run_cli_all("zoo --quick --model cnn --bug B11 --quiet");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.status != 0);
  CHECK(r.out.find("B11") != std::string::npos);
  CHECK(r.out.find("--model mlp") != std::string::npos);
  CHECK(s < 5.0);  // the clean CNN reference alone trains for ~20 s
}

TEST_CASE("zoo's matrix names the reference each bug is compared with and wraps notes at word ends") {
  testdata::require_fashion_mnist();
  Run r = run_cli("zoo --quick --bug B09 --steps 20 --train-examples 640 --quiet");
  REQUIRE(r.status == 0);
  CHECK(r.out.find("test acc (ref)") != std::string::npos);
  CHECK(r.out.find("(fw ") != std::string::npos);  // B09 trains the footwear task
  CHECK(r.out.find("fw: the clean footwear model") != std::string::npos);
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    CAPTURE(line);
    CHECK(line.size() <= 110);
  }
}

TEST_CASE("graph --dot draws the zoo's model; with --check the module a finding names is red") {
  testdata::require_fashion_mnist();
  Run plain = run_cli("graph --dot --model mlp");
  REQUIRE(plain.status == 0);
  CHECK(plain.out.rfind("digraph autograd {", 0) == 0);
  CHECK(plain.out.find("1.weight\\nfloat32[128, 784]") != std::string::npos);
  CHECK(plain.out.find("in 1 (Linear)") != std::string::npos);
  CHECK(plain.out.find("color=red") == std::string::npos);
  // B16 (weights initialised far too large): M9 names module 1 and its weight; the ops of
  // that Linear and the weight's leaf are drawn in red, nothing else.
  Run bug = run_cli("graph --dot --model mlp --bug B16 --check");
  REQUIRE(bug.status == 0);
  std::istringstream lines(bug.out);
  int red = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("color=red") == std::string::npos) continue;
    ++red;
    CAPTURE(line);
    CHECK((line.find("in 1 (Linear)") != std::string::npos || line.find("1.weight\\n") != std::string::npos));
  }
  CHECK(red >= 2);
  // B13 (a reshape where a transpose was meant): M6 names the Linear whose rows mix, and the
  // ops of that module are red, the reshape (a view) among them.
  Run mix = clitest::run_cli_all("graph --dot --model mlp --bug B13 --check");
  REQUIRE(mix.status == 0);
  CHECK(mix.out.find("graph: the lead finding: M6 batch-mixing gradient test") != std::string::npos);
  std::istringstream mix_lines(mix.out);
  int mix_red = 0;
  bool reshape_red = false;
  for (std::string line; std::getline(mix_lines, line);) {
    if (line.find("color=red") == std::string::npos) continue;
    ++mix_red;
    CAPTURE(line);
    CHECK(line.find("in 1 (Linear)") != std::string::npos);
    reshape_red = reshape_red || line.find("label=\"reshape\\n") != std::string::npos ||
                  line.find("label=\"view\\n") != std::string::npos;  // reshape of a contiguous tensor
  }
  CHECK(mix_red >= 2);
  CHECK(reshape_red);
  CHECK(mix.out.find("op view") != std::string::npos);  // the lead names the reshape
  CHECK(count_of(mix.out, "peripheries=2") == 1);       // and only that view is marked, not the Flatten's
  Run bad = clitest::run_cli_all("graph --model rnn");
  CHECK(bad.status != 0);
  CHECK(bad.out.find("unknown --model 'rnn'") != std::string::npos);
}

TEST_CASE("zoo --device: documented in --help; an unknown device is refused before any work") {
  const Run help = run_cli("zoo --help");
  CHECK(help.status == 0);
  CHECK(help.out.find("--device cpu|cuda") != std::string::npos);
  clitest::Run r = clitest::run_cli_all("zoo --device tpu --bug B13 --quick --data-dir /nonexistent");
  CHECK(r.status == 1);
  CHECK(r.out.find("unknown --device 'tpu': use cpu or cuda") != std::string::npos);
  CHECK(r.out.find("clean reference") == std::string::npos);  // nothing ran
  // --precision: documented; an unknown one refused before any work.
  CHECK(help.out.find("--precision float32|float16|bfloat16") != std::string::npos);
  clitest::Run p = clitest::run_cli_all("zoo --precision float8 --bug B13 --quick --data-dir /nonexistent");
  CHECK(p.status == 1);
  CHECK(p.out.find("unknown --precision 'float8': use float32, float16 or bfloat16") != std::string::npos);
  CHECK(p.out.find("clean reference") == std::string::npos);
}

TEST_CASE("zoo and doctor refuse a data-parallel bug before printing their plan, prefixed by the command") {
  for (const char* cmd : {"zoo --quick --bug B29", "doctor --bug B29 --out /tmp"}) {
    CAPTURE(cmd);
    Run r = clitest::run_cli_all(cmd);
    CHECK(r.status == 1);
    const std::string command = std::string(cmd).substr(0, std::string(cmd).find(' '));
    CHECK(r.out.rfind("gradsleuth " + command + ": error: bug B29", 0) == 0);  // the first line: no plan before it
    CHECK(r.out.find("mpirun -np 2 gradsleuth zoo --distributed --bug B29") != std::string::npos);
    CHECK(r.out.find("check_recipe") == std::string::npos);  // no C++ function names
  }
  Run u = clitest::run_cli_all("zoo --bug B99");
  CHECK(u.status == 1);
  CHECK(u.out.rfind("gradsleuth zoo: error: unknown bug 'B99'", 0) == 0);  // not "parse_bug: ..."
}

TEST_CASE("zoo refuses contradictory options before any work, naming both") {
  struct Bad {
    const char* args;
    const char* message;
  };
  for (const Bad& b : {Bad{"zoo --list --bug B99", "--list and --bug cannot be used together"},
                       Bad{"zoo --list --quick", "--list and --quick cannot be used together"},
                       Bad{"zoo --verbose", "--verbose applies to --distributed only"},
                       Bad{"zoo --distributed --quick", "--distributed and --quick cannot be used together"},
                       Bad{"checks --id M7 --sources", "--id and --sources cannot be used together"},
                       Bad{"checks --causes --json", "--causes and --json cannot be used together"}}) {
    CAPTURE(b.args);
    Run r = clitest::run_cli_all(b.args);
    CHECK(r.status == 1);
    CHECK(r.out.find(b.message) != std::string::npos);
    CHECK(r.out.find("clean reference") == std::string::npos);
  }
}

TEST_CASE("checks --help and the --id error give the id ranges of the check table; the lists fit the terminal") {
  // The ranges, computed here from the JSON list: per letter, 1 to the highest number.
  json_mini::Value doc = json_mini::parse(run_cli("checks --list --json").out);
  std::map<char, int> hi;
  for (const auto& c : doc.arr) {
    const std::string id = c.get("id")->str;
    hi[id[0]] = std::max(hi[id[0]], std::stoi(id.substr(1)));
  }
  REQUIRE(hi.size() == 5);
  const std::string help = run_cli("checks --help").out, bad = clitest::run_cli_all("checks --id Z9").out;
  for (const auto& [letter, n] : hi) {
    const std::string range = std::string(1, letter) + "1-" + std::string(1, letter) + std::to_string(n);
    CAPTURE(range);
    CHECK(help.find(range) != std::string::npos);
    CHECK(bad.find(range) != std::string::npos);
  }
  CHECK(help.find(std::to_string(doc.arr.size()) + ": ") != std::string::npos);
  for (const char* width : {"60", "100", "200"}) {
    for (const char* cmd : {"checks", "zoo --list"}) {
      CAPTURE(width);
      CAPTURE(cmd);
      Run r = clitest::run_command(std::string("COLUMNS=") + width + " \"" + GS_CLI_PATH + "\" " + cmd);
      CHECK(r.status == 0);
      std::istringstream lines(r.out);
      size_t rows = 0;
      for (std::string line; std::getline(lines, line); ++rows)
        CHECK(line.size() <= static_cast<size_t>(std::stoi(width)));
      CHECK(rows > 30);
    }
  }
  CHECK(run_cli("checks").out.find(" impl ") == std::string::npos);  // no column that always says yes
}
