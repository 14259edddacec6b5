// `gradsleuth train --device cuda` on the CUDA backend (its CPU emulator here): a short MLP run
// reaches the same train/test losses as the same run on --device cpu; a bad --device is refused.
// `gradsleuth precision --device cuda`: the device model's M30 table (compared on a CPU copy) is the CPU's.
// `gradsleuth zoo --device cuda` on one bug with a token budget: the run is on the device and the
// bug is caught (the verdicts against the CPU's are tests/cuda/test_cuda_zoo.cpp's job).
// Fails, saying how to install it, when dataset-fashion-mnist is not installed.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli_test_util.h"
#include "fashion_mnist_required.h"
#include "json_mini.h"

namespace {

using clitest::last_line;

json_mini::Value train_json(const std::string& device) {
  const clitest::Run r = clitest::run_cli("train --model mlp --device " + device +
                                              " --limit-train 256 --limit-test 128 --epochs 1 --batch-size 64"
                                              " --seed 2 --threads 1 --quiet --json",
                                          true);
  REQUIRE_MESSAGE(r.status == 0, "train --device ", device, " failed: ", r.out);
  json_mini::Value doc;
  REQUIRE_NOTHROW(doc = json_mini::parse(last_line(r.out)));
  return doc;
}

void check_close(double cuda, double cpu, const char* what) {
  INFO(what, ": cuda ", cuda, " cpu ", cpu);
  CHECK(std::isfinite(cuda));
  CHECK(std::abs(cuda - cpu) <= 1e-4 * std::abs(cpu) + 1e-6);
}

}  // namespace

TEST_CASE("train --device cuda: an MLP reaches the CPU run's losses") {
  testdata::require_fashion_mnist();
  const json_mini::Value cpu = train_json("cpu"), cuda = train_json("cuda");
  CHECK(cpu.get("device")->str == "cpu");
  CHECK(cuda.get("device")->str == "cuda:0");
  CHECK(cuda.get("steps")->num == 4);
  check_close(cuda.get("train_loss")->num, cpu.get("train_loss")->num, "train_loss");
  check_close(cuda.get("test_loss")->num, cpu.get("test_loss")->num, "test_loss");
  CHECK(cuda.get("test_accuracy")->num == cpu.get("test_accuracy")->num);
}

TEST_CASE("train --device: an unknown device is refused before any work") {
  const clitest::Run r = clitest::run_cli("train --device tpu --json", true);
  CHECK(r.status == 1);
}

TEST_CASE("zoo --device cuda: the matrix and the JSON say cuda:0, and B22 is caught (M13 on a CPU copy)") {
  testdata::require_fashion_mnist();
  const std::string path = "zoo_device_test.json";
  std::filesystem::remove(path);
  // Two training steps: B22's check runs in the pre-training gate. A whole zoo run: the emulator's
  // memcheck only (racecheck checks these kernels one by one in test_cuda_backend_emu).
  setenv("GS_EMU_CHECKS", "memcheck", 1);
  const clitest::Run r = clitest::run_cli(
      "zoo --device cuda --quick --bug B22 --steps 2 --train-examples 128 --quiet --json " + path, true);
  REQUIRE_MESSAGE(r.status == 0, r.out);
  CHECK(r.out.find("model mlp on cuda:0") != std::string::npos);
  CHECK(r.out.find("1/1 bugs caught") != std::string::npos);
  std::ifstream f(path);
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  const json_mini::Value doc = json_mini::parse(ss.str());
  CHECK(doc.get("options")->get("device")->str == "cuda:0");
  const json_mini::Value& b22 = doc.get("bugs")->arr.at(0);
  CHECK(b22.get("id")->str == "B22");
  CHECK(b22.get("caught")->b);
  CHECK(b22.get("steps")->num == 2);
  std::filesystem::remove(path);
}

TEST_CASE("precision --device cuda: M30's table on the CUDA backend matches the CPU's") {
  testdata::require_fashion_mnist();
  json_mini::Value docs[2];
  const char* devices[2] = {"cpu", "cuda"};
  for (int i = 0; i < 2; ++i) {
    const clitest::Run r = clitest::run_cli(
        std::string("precision --model mlp --dtype bf16 --batch-size 16 --json --device ") + devices[i], true);
    REQUIRE_MESSAGE(r.status == 0, "precision --device ", devices[i], " failed: ", r.out);
    REQUIRE_NOTHROW(docs[i] = json_mini::parse(last_line(r.out)));
  }
  const json_mini::Value &cpu = docs[0], &cuda = docs[1];
  CHECK(cuda.get("device")->str == "cuda:0");
  REQUIRE(cuda.get("ops")->arr.size() == cpu.get("ops")->arr.size());
  const json_mini::Value *wc = cuda.get("worst"), *wp = cpu.get("worst");
  REQUIRE(wc->kind == json_mini::Value::Object);
  // M30 compares a device model on a CPU copy: the same op is the worst, with the same error.
  CHECK(wc->get("op")->str == wp->get("op")->str);
  CHECK(wc->get("index")->num == wp->get("index")->num);
  CHECK(std::abs(wc->get("rel_error")->num - wp->get("rel_error")->num) <= 0.25 * wp->get("rel_error")->num);
}
