// Tests of the gradsleuth CLI's machine-readable output: runs the built tool
// (GS_CLI_PATH) and parses what it prints with a minimal JSON parser.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "cli_test_util.h"
#include "core/op_registry.h"
#include "json_mini.h"

namespace {

using clitest::Run;
inline Run run_cli(const std::string& args) { return clitest::run_cli(args, false); }

bool is_number_or_null(const json_mini::Value* v) {
  return v && (v->kind == json_mini::Value::Number || v->kind == json_mini::Value::Null);
}

}  // namespace

TEST_CASE("gradcheck --all-ops --json prints one JSON object with one entry per op") {
  Run r = run_cli("gradcheck --all-ops --json");
  INFO(r.out.substr(0, 2000));
  CHECK(r.status == 0);
  json_mini::Value doc;
  REQUIRE_NOTHROW(doc = json_mini::parse(r.out));  // exactly one value, nothing else on stdout
  REQUIRE(doc.kind == json_mini::Value::Object);
  const json_mini::Value* ops = doc.get("ops");
  REQUIRE(ops);
  REQUIRE(ops->kind == json_mini::Value::Array);
  CHECK(ops->arr.size() == gs::op_registry().size());
  for (const auto& op : ops->arr) {
    const json_mini::Value* name = op.get("name");
    REQUIRE(name);
    INFO("op: ", name->str);
    CHECK(name->kind == json_mini::Value::String);
    CHECK(gs::find_op(name->str) != nullptr);
    REQUIRE(op.get("category"));
    CHECK(op.get("category")->kind == json_mini::Value::String);
    REQUIRE(op.get("passed"));
    CHECK(op.get("passed")->kind == json_mini::Value::Bool);
    CHECK(op.get("passed")->b);
    CHECK(is_number_or_null(op.get("max_abs_error")));
    CHECK(is_number_or_null(op.get("max_rel_error")));
    // Second order: every differentiable op's registry claim is checked both ways: it
    // passes gradgradcheck, or (registered without double backward) it refuses create_graph.
    const gs::OpInfo* info = gs::find_op(name->str);
    if (info && info->differentiable) {
      REQUIRE(op.get("double_backward_checked"));
      CHECK(op.get("double_backward_checked")->b);
      CHECK(op.get("double_backward_passed")->b);
      REQUIRE(op.get("double_backward_refused"));
      CHECK(op.get("double_backward_refused")->b == !info->double_backward);
    }
    const json_mini::Value* samples = op.get("samples");
    REQUIRE(samples);
    REQUIRE(samples->kind == json_mini::Value::Array);
    CHECK_FALSE(samples->arr.empty());
    for (const auto& s : samples->arr) {
      CHECK(s.get("sample"));
      CHECK(s.get("passed"));
      CHECK(is_number_or_null(s.get("max_abs_error")));
    }
  }
  REQUIRE(doc.get("failed"));
  CHECK(doc.get("failed")->num == 0);
}

TEST_CASE("gradcheck --op filters, and a failing run exits 1 with valid JSON") {
  Run r = run_cli("gradcheck --op matmul --json --no-double");
  CHECK(r.status == 0);
  json_mini::Value doc = json_mini::parse(r.out);
  REQUIRE(doc.get("ops"));
  REQUIRE(doc.get("ops")->arr.size() == 1);
  CHECK(doc.get("ops")->arr[0].get("name")->str == "matmul");
  // A huge step makes central differences wrong (error ~ eps^2/6 * f'''(x)): the
  // check fails, exits 1, and the output is still valid JSON.
  Run bad = run_cli("gradcheck --op exp --json --eps 0.1 --rtol 1e-4 --atol 0");
  CHECK(bad.status == 1);
  json_mini::Value bdoc = json_mini::parse(bad.out);
  CHECK_FALSE(bdoc.get("ops")->arr[0].get("passed")->b);
  CHECK(run_cli("gradcheck --op no_such_op --json 2>/dev/null").status != 0);
}

TEST_CASE("ops --json lists the registry") {
  Run r = run_cli("ops --json");
  CHECK(r.status == 0);
  json_mini::Value doc = json_mini::parse(r.out);
  REQUIRE(doc.get("ops"));
  CHECK(doc.get("ops")->arr.size() == gs::op_registry().size());
  for (const auto& op : doc.get("ops")->arr) {
    CHECK(op.get("differentiable"));
    CHECK(op.get("double_backward"));
  }
}

TEST_CASE("demo --json trains the spiral MLP above 90% accuracy") {
  Run r = run_cli("demo --json");
  INFO(r.out);
  CHECK(r.status == 0);
  json_mini::Value doc = json_mini::parse(r.out);
  REQUIRE(doc.get("train_accuracy"));
  CHECK(doc.get("train_accuracy")->num > 0.9);
  REQUIRE(doc.get("final_loss"));
  CHECK(doc.get("final_loss")->num < 0.3);
  CHECK(doc.get("seconds"));
}

TEST_CASE("every command answers --help") {
  for (const char* cmd : {"gradcheck", "ops", "demo"}) {
    Run r = run_cli(std::string(cmd) + " --help");
    INFO(cmd);
    CHECK(r.status == 0);
    CHECK(r.out.find("usage: gradsleuth") != std::string::npos);
  }
}

TEST_CASE("gradcheck and demo range-check their options before any work") {
  struct Bad {
    const char* args;
    const char* message;
  };
  for (const Bad& b :
       {Bad{"gradcheck --all-ops --eps 0", "--eps must be a finite number in (0, 0.1], got '0'"},
        Bad{"gradcheck --all-ops --eps nan", "--eps must be a finite number in (0, 0.1]"},
        Bad{"gradcheck --all-ops --eps 1e10", "--eps must be a finite number in (0, 0.1], got '1e10'"},
        Bad{"gradcheck --all-ops --eps 0x1p-20", "no hex, inf or nan"},
        Bad{"gradcheck --all-ops --eps '1e-6 '", "got '1e-6 '"}, Bad{"gradcheck --all-ops --eps 1e-6x", "got '1e-6x'"},
        Bad{"gradcheck --all-ops --op add", "--all-ops and --op cannot be used together"},
        Bad{"gradcheck --op ''", "--op must not be empty"},
        Bad{"gradcheck --op add --seed 0x10", "--seed must be an integer >= 0, got '0x10' (decimal digits only"},
        Bad{"gradcheck --all-ops --rtol nan", "--rtol must be a finite number in [0, 1]"},
        Bad{"gradcheck --all-ops --atol -1", "--atol must be a finite number in [0, 1]"},
        Bad{"gradcheck --all-ops --seed -1", "--seed must be an integer >= 0"},
        Bad{"demo --lr nan", "--lr must be a finite number in (0, 10]"},
        Bad{"demo --lr 1e308", "--lr must be a finite number in (0, 10], got '1e308'"},
        Bad{"demo --momentum 2", "--momentum must be a finite number in [0, 1), got '2'"},
        Bad{"demo --momentum -0.5", "--momentum must be a finite number in [0, 1)"},
        Bad{"demo --log-every 0", "--log-every must be an integer in [1, "},
        Bad{"demo --steps -1", "--steps must be an integer in [0, "}}) {
    CAPTURE(b.args);
    clitest::Run r = clitest::run_cli_all(b.args);
    CHECK(r.status == 1);
    CHECK(r.out.find(b.message) != std::string::npos);
    CHECK(r.out.find("gradient check") == std::string::npos);  // no work was done
  }
}

TEST_CASE("--version and version --json say how this binary was built") {
  Run r = run_cli("--version");
  CHECK(r.status == 0);
  CHECK(r.out.rfind("gradsleuth ", 0) == 0);
  for (const char* line : {"commit:", "build type:", "ISA level:", "BLAS:", "CUDA:", "MPI:"})
    CHECK_MESSAGE(r.out.find(line) != std::string::npos, line);
  Run j = run_cli("version --json");
  CHECK(j.status == 0);
  json_mini::Value doc = json_mini::parse(j.out);
  for (const char* key : {"version", "commit", "build_type", "isa", "blas", "cuda", "mpi"})
    CHECK_MESSAGE(doc.get(key) != nullptr, key);
  const std::string commit = doc.get("commit")->str;
  CHECK((commit == "unknown" ||
         (commit.size() == 12 && commit.find_first_not_of("0123456789abcdef") == std::string::npos)));
  const std::string cuda = doc.get("cuda")->str;
  CHECK((cuda == "gpu" || cuda == "emulator" || cuda == "off" || cuda == "left out"));
  CHECK(clitest::run_cli("--version --bogus", true).status != 0);
}

TEST_CASE("--version names the BLAS's kernels beside the CPU's ISA, generic ones included") {
  Run r = run_cli("--version");
  CHECK(r.out.find("CPU:") != std::string::npos);
  CHECK(r.out.find("GEMM:") != std::string::npos);
  json_mini::Value doc = json_mini::parse(run_cli("version --json").out);
  for (const char* key : {"cpu_isa", "blas_version", "blas_core", "blas_generic", "gemm"})
    CHECK_MESSAGE(doc.get(key) != nullptr, key);
  if (doc.get("blas")->str != "OpenBLAS") return;
  // OpenBLAS's generic kernels, forced: on a CPU with AVX2 they are below it, and the products go to
  // gradsleuth's own kernel where the build has one (an -march=native build on such a CPU).
  const std::string env = "OPENBLAS_CORETYPE=Prescott GRADSLEUTH_GEMM=auto ";
  Run g = clitest::run_command(env + "\"" + GS_CLI_PATH + "\" --version 2>&1");
  CHECK(g.status == 0);
  INFO(g.out);
  CHECK(g.out.find(", core Prescott (") != std::string::npos);
  json_mini::Value gj =
      json_mini::parse(clitest::run_command(env + "\"" + GS_CLI_PATH + "\" version --json 2>/dev/null").out);
  const std::string isa = doc.get("cpu_isa")->str;
  if (isa.find("AVX2+FMA") != std::string::npos) {
    CHECK(g.out.find("core Prescott (generic: this CPU is newer than the library)") != std::string::npos);
    CHECK(gj.get("blas_generic")->kind == json_mini::Value::Bool);
    CHECK(gj.get("blas_generic")->b);
    CHECK(g.out.find("OPENBLAS_CORETYPE=" + gj.get("blas_suggested_core")->str) != std::string::npos);
#if defined(__AVX2__) && defined(__FMA__)
    CHECK(gj.get("gemm")->str == "engine");
#endif
  }
}
