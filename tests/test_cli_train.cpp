// Tests of `gradsleuth train` on a small slice of Fashion-MNIST: the --json
// line, the run directory, the same seed giving the same losses, bad options.
// Fails, saying how to install it, when dataset-fashion-mnist is not installed.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "fashion_mnist_required.h"
#include "json_mini.h"

namespace fs = std::filesystem;

namespace {

using clitest::Run;
inline Run run_cli(const std::string& args) { return clitest::run_cli(args, true); }

using clitest::last_line;

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("train --json: the last stdout line is one JSON object; same seed, same losses") {
  testdata::require_fashion_mnist();
  const fs::path base = fs::temp_directory_path() / ("gs_cli_train_" + std::to_string(::getpid()));
  fs::remove_all(base);
  const std::string common =
      "train --model mlp --epochs 2 --limit-train 640 --limit-test 500 --seed 3 --threads 1 --json --run-dir ";
  Run a = run_cli(common + (base / "a").string());
  Run b = run_cli(common + (base / "b").string());
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  json_mini::Value doc;
  REQUIRE_NOTHROW(doc = json_mini::parse(last_line(a.out)));
  for (const char* key : {"model", "epochs", "test_accuracy", "test_loss", "val_accuracy", "val_loss", "seconds",
                          "train_loss", "seed", "examples_per_second"})
    CHECK_MESSAGE(doc.get(key) != nullptr, key);
  CHECK(doc.get("model")->str == "mlp");
  CHECK(doc.get("epochs")->num == 2);
  // Honest splits: 10% of the 640 training images held out for validation, the test set apart.
  CHECK(doc.get("train_examples")->num == 576);
  CHECK(doc.get("val_examples")->num == 64);
  CHECK(doc.get("test_examples")->num == 500);
  CHECK(doc.get("test_accuracy")->num > 0.3);
  CHECK(doc.get("val_accuracy")->num > 0.3);
  // The run directory and bit-identical loss sequences.
  const std::string sa = slurp(base / "a" / "steps.csv"), sb = slurp(base / "b" / "steps.csv");
  CHECK(std::count(sa.begin(), sa.end(), '\n') == 1 + 18);  // 576 / 64 = 9 steps per epoch
  CHECK(sa == sb);
  CHECK(fs::exists(base / "a" / "epochs.jsonl"));
  CHECK(fs::exists(base / "a" / "summary.json"));
  Run c = run_cli(std::string(common).replace(common.find("--seed 3"), 8, "--seed 4") + (base / "c").string());
  REQUIRE(c.status == 0);
  CHECK(slurp(base / "c" / "steps.csv") != sa);
  fs::remove_all(base);
}

TEST_CASE("train: bad options and a missing dataset are clear errors") {
  testdata::require_fashion_mnist();
  CHECK(run_cli("train --model resnet").status == 1);
  CHECK(run_cli("train --optimizer lion").status == 1);
  Run r = run_cli("train --data-dir /nonexistent --json");
  CHECK(r.status == 1);
  // The message goes to stderr; check it through a shell redirect.
  const std::string cmd = std::string("\"") + GS_CLI_PATH + "\" train --data-dir /nonexistent 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  CHECK(out.find("apt-get install dataset-fashion-mnist") != std::string::npos);
}

TEST_CASE("train: every numeric option is range-checked before any work, naming the option and the range") {
  struct Bad {
    const char* args;
    const char* message;
  };
  for (const Bad& b :
       {Bad{"--lr inf", "--lr must be a finite number in (0, 10], got 'inf' (a decimal number"},
        Bad{"--lr nan", "--lr must be a finite number in (0, 10]"},
        Bad{"--lr 0", "--lr must be a finite number in (0, 10]"},
        Bad{"--lr 1e308", "--lr must be a finite number in (0, 10], got '1e308'"},
        Bad{"--lr 0x10", "--lr must be a finite number in (0, 10], got '0x10' (a decimal number"},
        Bad{"--lr 0.01abc", "got '0.01abc'"},
        Bad{"--epochs 0x2", "--epochs must be an integer in [1, 1000000], got '0x2' (decimal digits only"},
        Bad{"--limit-train -5", "--limit-train must be an integer >= 1, got '-5'"},
        Bad{"--limit-test 0", "--limit-test must be an integer >= 1"},
        Bad{"--threads 0", "--threads must be an integer in [1, 1024]"},
        Bad{"--data-dir ''", "--data-dir must not be empty"},
        Bad{"--seed -1", "--seed must be an integer >= 0, got '-1'"},
        Bad{"--epochs 0", "--epochs must be an integer in [1, "},
        Bad{"--batch-size -3", "--batch-size must be an integer in [1, "},
        Bad{"--val-fraction 0.7", "--val-fraction must be a finite number in [0, 0.5]"},
        Bad{"--val-fraction -0.1", "--val-fraction must be a finite number in [0, 0.5]"},
        Bad{"--label-smoothing 1", "--label-smoothing must be a finite number in [0, 1), got '1'"},
        Bad{"--label-smoothing -0.1", "--label-smoothing must be a finite number in [0, 1)"},
        Bad{"--schedule onecycle", "unknown --schedule 'onecycle': use cosine, warmup-cosine or none"},
        Bad{"--run-dir /proc/gradsleuth-cannot-exist", "--run-dir"}}) {
    CAPTURE(b.args);
    // --data-dir /nonexistent: a check that ran after loading the data would report the dataset instead.
    const std::string extra = std::string(b.args).find("--data-dir") == 0 ? "" : " --data-dir /nonexistent";
    Run r = clitest::run_cli_all(std::string("train ") + b.args + extra);
    CHECK(r.status == 1);
    CHECK(r.out.find(b.message) != std::string::npos);
    CHECK(r.out.find("apt-get install") == std::string::npos);
  }
}

// A learning rate that would blow the loss up to inf (1e30 did, at step 2) is refused before
// the data is read. (Within (0, 10] these models' losses grow but stay finite on Fashion-MNIST,
// so no test here reaches the CLI's non-finite-loss exit.)
TEST_CASE("train: a learning rate that can only diverge is refused before any work") {
  Run r = clitest::run_cli_all(
      "train --optimizer sgd --lr 1e30 --schedule none --epochs 1 --limit-train 256 "
      "--limit-test 64 --quiet --data-dir /nonexistent");
  CHECK(r.status == 1);
  CHECK(r.out.find("--lr must be a finite number in (0, 10], got '1e30'") != std::string::npos);
  CHECK(r.out.find("/nonexistent") == std::string::npos);  // refused before the data was looked for
}

TEST_CASE("train: the validation split comes from the training images; the test set is evaluated once") {
  testdata::require_fashion_mnist();
  const std::string common =
      "train --model mlp --epochs 1 --limit-train 640 --limit-test 300 --seed 5 --threads 1 "
      "--json --quiet ";
  Run none = run_cli(common + "--val-fraction 0");
  REQUIRE(none.status == 0);
  json_mini::Value d0 = json_mini::parse(last_line(none.out));
  CHECK(d0.get("train_examples")->num == 640);
  CHECK(d0.get("val_examples")->num == 0);
  CHECK(d0.get("val_accuracy")->kind == json_mini::Value::Null);  // no validation: nothing reported as val
  CHECK(d0.get("test_examples")->num == 300);
  Run quarter = run_cli(common + "--val-fraction 0.25");
  REQUIRE(quarter.status == 0);
  json_mini::Value d1 = json_mini::parse(last_line(quarter.out));
  CHECK(d1.get("train_examples")->num == 480);
  CHECK(d1.get("val_examples")->num == 160);
  CHECK(d1.get("test_examples")->num == 300);
}

TEST_CASE("train --schedule warmup-cosine: the lr rises over half an epoch, then decays to 0 step by step") {
  // 576 training images at batch 64: 9 steps per epoch, 18 in all, a warm-up of 4 steps
  // from a tenth of the lr. steps.csv logs, after each step, the lr the next step uses.
  testdata::require_fashion_mnist();
  const fs::path base = fs::temp_directory_path() / ("gs_cli_train_wc_" + std::to_string(::getpid()));
  fs::remove_all(base);
  const std::string common =
      "train --model mlp --epochs 2 --limit-train 640 --limit-test 100 --seed 3 --threads 1 "
      "--lr 0.002 --schedule warmup-cosine --json --quiet ";
  Run a = run_cli(common + "--label-smoothing 0.1 --run-dir " + (base / "a").string());
  REQUIRE(a.status == 0);
  json_mini::Value doc = json_mini::parse(last_line(a.out));
  CHECK(doc.get("schedule")->str == "warmup-cosine");
  CHECK(doc.get("label_smoothing")->num == doctest::Approx(0.1));
  std::istringstream csv(slurp(base / "a" / "steps.csv"));
  std::string line;
  std::getline(csv, line);  // header: step,epoch,loss,accuracy,lr
  std::vector<double> lr;
  while (std::getline(csv, line)) lr.push_back(std::stod(line.substr(line.rfind(',') + 1)));
  REQUIRE(lr.size() == 18);
  const double pi = 3.14159265358979323846;
  for (int k = 1; k <= 18; ++k) {  // lr[k - 1] = lr_at(k)
    CAPTURE(k);
    const double want = k < 4 ? 0.002 * (0.1 + 0.9 * k / 4.0) : 0.001 * (1 + std::cos(pi * (k - 4) / 14.0));
    CHECK(lr[static_cast<size_t>(k - 1)] == doctest::Approx(want).epsilon(1e-5));
  }
  // Label smoothing changes the training loss (same seed, same batches), not the data.
  Run b = run_cli(common + "--label-smoothing 0 --run-dir " + (base / "b").string());
  REQUIRE(b.status == 0);
  CHECK(json_mini::parse(last_line(b.out)).get("label_smoothing")->num == 0);
  CHECK(slurp(base / "a" / "steps.csv") != slurp(base / "b" / "steps.csv"));
  fs::remove_all(base);
}

TEST_CASE("train: a --run-dir holding an earlier run is refused before any work unless --overwrite") {
  const fs::path dir = fs::temp_directory_path() / ("gs_cli_train_over_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string run =
      "train --epochs 1 --limit-train 128 --limit-test 64 --val-fraction 0 --quiet --run-dir " + dir.string();
  { std::ofstream(dir / "steps.csv") << "step,epoch,loss,accuracy,lr\n1,1,0.5,0.5,0.001\n"; }
  Run r = clitest::run_cli_all(run + " --data-dir /nonexistent");
  CHECK(r.status == 1);
  CHECK(r.out.find("holds an earlier run (steps.csv)") != std::string::npos);
  CHECK(r.out.find("--overwrite") != std::string::npos);
  CHECK(r.out.find("/nonexistent") == std::string::npos);                // refused before the data was looked for
  CHECK(slurp(dir / "steps.csv").find("0.5,0.5") != std::string::npos);  // untouched
  Run o = clitest::run_cli_all("train --overwrite --quiet --data-dir /nonexistent");
  CHECK(o.status == 1);
  CHECK(o.out.find("--overwrite applies to --run-dir only") != std::string::npos);
  testdata::require_fashion_mnist();
  Run ok = clitest::run_cli_all(run + " --overwrite");
  CHECK(ok.status == 0);
  CHECK(slurp(dir / "steps.csv").find("0.5,0.5") == std::string::npos);  // replaced by this run
  fs::remove_all(dir);
}
