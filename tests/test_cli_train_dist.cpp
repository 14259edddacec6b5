// gradsleuth train under mpirun: data-parallel training gives the single-process run.
//   mpirun -np 2 gradsleuth train --batch-size B   ==   gradsleuth train --batch-size 2B
// step for step (losses to float32 rounding: the gradients are summed in another order), because
// each rank reads every second row of the single-process shuffle and DDP averages the gradients.
// The MLP has no dropout, so nothing random differs between the two runs.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_util.h"

namespace fs = std::filesystem;

namespace {

const std::string kMpirun = std::string("\"") + GS_MPIEXEC + "\" -np 2 --oversubscribe ";

struct Row {
  double loss, accuracy;
};
std::vector<Row> read_steps(const fs::path& csv) {
  std::ifstream f(csv);
  REQUIRE_MESSAGE(f.good(), "missing ", csv.string());
  std::string line;
  std::getline(f, line);
  CHECK(line == "step,epoch,loss,accuracy,lr");
  std::vector<Row> rows;
  while (std::getline(f, line)) {
    std::stringstream ss(line);
    std::string step, epoch, loss, acc;
    std::getline(ss, step, ',');
    std::getline(ss, epoch, ',');
    std::getline(ss, loss, ',');
    std::getline(ss, acc, ',');
    rows.push_back({std::stod(loss), std::stod(acc)});
  }
  return rows;
}

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("gs_cli_train_dist_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("mpirun -np 2 at batch B takes the same steps as one process at batch 2B") {
  const std::string common =
      " train --model mlp --limit-train 768 --limit-test 200 --epochs 2 --val-fraction 0 --seed 3 --quiet";
  const fs::path one = fresh_dir("one"), two = fresh_dir("two");
  auto r1 = clitest::run_cli(common + " --batch-size 64 --run-dir \"" + one.string() + "\"");
  REQUIRE(r1.status == 0);
  // The whole command line goes through mpirun: the test runs the CLI twice, under it.
  const std::string cmd =
      kMpirun + "\"" + GS_CLI_PATH + "\"" + common + " --batch-size 32 --run-dir \"" + two.string() + "\"";
  const clitest::Run r2 = clitest::run_command(cmd);
  const std::string& out = r2.out;
  REQUIRE(r2.status == 0);
  // Rank 0 alone prints: one header, one result line.
  CHECK(count(out, "train: mlp") == 1);
  CHECK(count(out, "test accuracy") == 1);
  CHECK(out.find("2 processes (global batch 64)") != std::string::npos);

  const auto a = read_steps(one / "steps.csv"), b = read_steps(two / "steps.csv");
  REQUIRE(a.size() == 24);  // 768 / 64 per epoch, 2 epochs
  REQUIRE(b.size() == a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("step " << i + 1 << ": one process " << a[i].loss << ", two " << b[i].loss);
    CHECK(std::fabs(a[i].loss - b[i].loss) <= 1e-5 * std::fabs(a[i].loss) + 1e-6);
    // The global accuracy: the same hits out of 64 (one example's argmax may flip on a rounding tie).
    CHECK(std::fabs(a[i].accuracy - b[i].accuracy) <= 1.0 / 64 + 1e-12);
  }
  // The losses moved: the comparison is of a run that trained, not of two copies of step 1.
  CHECK(a.back().loss < a.front().loss - 0.3);
  std::ifstream summary(two / "summary.json");
  std::stringstream js;
  js << summary.rdbuf();
  CHECK(js.str().find("\"processes\":2") != std::string::npos);
  fs::remove_all(one);
  fs::remove_all(two);
}

TEST_CASE("mpirun -np 2 with bfloat16 parameters (16-bit gradients all-reduced) follows one process at batch 2B") {
  const std::string common =
      " train --model mlp --limit-train 768 --limit-test 200 --epochs 2 --val-fraction 0 "
      "--seed 3 --quiet --precision bf16 --master-weights";
  const fs::path one = fresh_dir("bf16_one"), two = fresh_dir("bf16_two");
  auto r1 = clitest::run_cli(common + " --batch-size 64 --run-dir \"" + one.string() + "\"");
  REQUIRE(r1.status == 0);
  const clitest::Run r2 = clitest::run_command(kMpirun + "\"" + GS_CLI_PATH + "\"" + common +
                                               " --batch-size 32 --run-dir \"" + two.string() + "\"");
  REQUIRE_MESSAGE(r2.status == 0, r2.out);
  CHECK(r2.out.find("16-bit parameters with float32 master weights") != std::string::npos);
  const auto a = read_steps(one / "steps.csv"), b = read_steps(two / "steps.csv");
  REQUIRE(a.size() == 24);
  REQUIRE(b.size() == a.size());
  // bfloat16 rounds the gradients (summed in another order, then all-reduced in 16 bits) and the
  // parameters, and each step's rounding moves the next steps' weights: over 24 steps the losses agree to
  // 4 x bfloat16's epsilon (2^-7), relative (2% apart at worst in a loaded test run). Gradients summed
  // over the ranks instead of averaged take steps twice as large.
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("step " << i + 1 << ": one process " << a[i].loss << ", two " << b[i].loss);
    CHECK(std::fabs(a[i].loss - b[i].loss) <= 4 * std::ldexp(1.0, -7) * std::fabs(a[i].loss));
  }
  CHECK(a.back().loss < a.front().loss - 0.3);
  fs::remove_all(one);
  fs::remove_all(two);
}

TEST_CASE("mpirun -np 2 trains the CNN (dropout seeded per rank) and reports once") {
  const std::string cmd = kMpirun + "\"" + GS_CLI_PATH + "\"" +
                          " train --model cnn --limit-train 128 --limit-test 64 --epochs 1 --batch-size 16 "
                          "--val-fraction 0 --quiet --json";
  const clitest::Run r = clitest::run_command(cmd);
  const std::string& out = r.out;
  REQUIRE(r.status != -1);  // exited, not killed by a signal
  CHECK(r.status == 0);
  CHECK(count(out, "\"model\":\"cnn\"") == 1);
  CHECK(out.find("\"processes\":2") != std::string::npos);
  CHECK(out.find("\"steps\":4") != std::string::npos);  // 128 / (2 * 16)
}

TEST_CASE("a command that fails under mpirun ends the whole job, naming the rank") {
  // Every rank fails here (no data); each prints which rank failed and MPI_Abort ends the job
  // instead of one rank returning while the other waits in a collective.
  const std::string cmd =
      kMpirun + "\"" + GS_CLI_PATH + "\"" + " train --model mlp --data-dir /nonexistent-gradsleuth-data --quiet 2>&1";
  const clitest::Run r = clitest::run_command(cmd);
  const std::string& out = r.out;
  CHECK(r.status != 0);  // a failure exit or a signal (-1)
  INFO(out);
  CHECK(out.find("of 2 failed: gradsleuth train: error:") != std::string::npos);
  CHECK(out.find("nonexistent-gradsleuth-data") != std::string::npos);
}
