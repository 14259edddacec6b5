// cuda/workbench/tests/test_workbench_cli.cpp: `gradsleuth kernels` and `gradsleuth devices` in a
// build whose kernels run on the CPU emulator: validation passes and no timing is ever printed.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/cli_test_util.h"
#include "tests/json_mini.h"

using clitest::Run;
using clitest::run_cli;

TEST_CASE("kernels list --json: every kernel with its numbered versions") {
  const Run r = run_cli("kernels list --json");
  INFO(r.out.substr(0, 2000));
  REQUIRE(r.status == 0);
  json_mini::Value doc;
  REQUIRE_NOTHROW(doc = json_mini::parse(r.out));
  REQUIRE(doc.get("runs_on"));
  CHECK(doc.get("runs_on")->str == "emulator");
  const json_mini::Value* ks = doc.get("kernels");
  REQUIRE(ks);
  REQUIRE(ks->arr.size() == 5);
  CHECK(ks->arr[0].get("name")->str == "matmul");
  CHECK(ks->arr[0].get("versions")->arr.size() == 8);
  for (const auto& k : ks->arr) {
    INFO(k.get("name")->str);
    const auto& vs = k.get("versions")->arr;
    REQUIRE(vs.size() >= 3);
    for (size_t i = 0; i < vs.size(); ++i) CHECK(vs[i].get("version")->num == static_cast<double>(i + 1));
  }
}

TEST_CASE("kernels bench matmul --version 3 --size 64 on the emulator: validated, never timed") {
  const Run r = run_cli("kernels bench matmul --version 3 --size 64");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("validation: passed") != std::string::npos);
  CHECK(r.out.find("emulator: validation only, no timing") != std::string::npos);
  CHECK(r.out.find(" ms") == std::string::npos);
  CHECK(r.out.find("GFLOP/s") == std::string::npos);
  CHECK(r.out.find("% of") == std::string::npos);
}

// All versions on the emulator: the tensor-core version is listed as skipped, not failed.
TEST_CASE("kernels bench matmul --json on the emulator: versions 1-7 pass, the tensor-core version is skipped") {
  const Run r = run_cli("kernels bench matmul --size 32 --json");
  INFO(r.out);
  REQUIRE(r.status == 0);
  json_mini::Value doc;
  REQUIRE_NOTHROW(doc = json_mini::parse(r.out));
  CHECK(doc.get("passed")->b);
  CHECK(doc.get("results")->arr.size() == 7);
  REQUIRE(doc.get("skipped")->arr.size() == 1);
  CHECK(doc.get("skipped")->arr[0].str == "v8 (tensor cores (bf16))");
}

TEST_CASE("kernels bench softmax --json: every version passes, none timed") {
  const Run r = run_cli("kernels bench softmax --size 100 --rows 8 --json");
  INFO(r.out);
  REQUIRE(r.status == 0);
  json_mini::Value doc;
  REQUIRE_NOTHROW(doc = json_mini::parse(r.out));
  CHECK(doc.get("passed")->b);
  REQUIRE(doc.get("results")->arr.size() == 3);
  for (const auto& x : doc.get("results")->arr) {
    CHECK(x.get("validation")->get("passed")->b);
    CHECK_FALSE(x.get("timed")->b);
    CHECK(x.get("ms") == nullptr);
  }
}

TEST_CASE("kernels bench: unknown kernels, versions and oversized problems are errors naming the fix") {
  Run r = run_cli("kernels bench conv 2>&1");
  CHECK(r.status == 1);
  CHECK(r.out.find("unknown kernel 'conv'") != std::string::npos);
  r = run_cli("kernels bench matmul --version 9 2>&1");
  CHECK(r.status == 1);
  CHECK(r.out.find("7 (cuBLAS)") != std::string::npos);
  CHECK(r.out.find("8 (tensor cores (bf16))") != std::string::npos);
  r = run_cli("kernels bench matmul --version 8 2>&1");  // tensor cores: the emulator has none
  CHECK(r.status == 1);
  CHECK(r.out.find("runs on a GPU only") != std::string::npos);
  r = run_cli("kernels bench matmul --version 3 --size 4096 2>&1");
  CHECK(r.status == 1);
  CHECK(r.out.find("too big for the CPU emulator") != std::string::npos);
  r = run_cli("kernels bench gelu --rows 4 2>&1");
  CHECK(r.status == 1);
  CHECK(r.out.find("takes no --rows") != std::string::npos);
}

TEST_CASE("devices: says whether there are GPUs and that the emulator is built") {
  const Run r = run_cli("devices --json");
  INFO(r.out);
  REQUIRE(r.status == 0);
  json_mini::Value doc;
  REQUIRE_NOTHROW(doc = json_mini::parse(r.out));
  CHECK(doc.get("emulator_built")->b);
  CHECK(doc.get("kernels_run_on")->str == "emulator");
  const Run t = run_cli("devices");
  CHECK(t.out.find("CPU emulator (cuda/emu/): built") != std::string::npos);
}

TEST_CASE("kernels roofline --device cuda on the emulator: refused, naming why, and no file written") {
  const std::string out =
      std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/gs_cuda_roofline_test.svg";
  std::remove(out.c_str());
  const Run r = run_cli("kernels roofline --device cuda --out " + out + " 2>&1");
  INFO(r.out);
  CHECK(r.status != 0);
  CHECK(r.out.find("needs a GPU") != std::string::npos);
  CHECK(r.out.find("--device cpu") != std::string::npos);
  std::FILE* f = std::fopen(out.c_str(), "r");
  CHECK(f == nullptr);
  if (f != nullptr) std::fclose(f);
}
