// cuda/workbench/tests/test_workbench.cpp: every version of every workbench kernel against the
// CPU reference on the emulator, at sizes that are and are not multiples of the tiles; the
// argument checks; and a few versions under several random thread orders (race-free).
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "cuda/emu/emu.h"
#include "workbench/workbench.h"

namespace wb = gradsleuth::workbench;

namespace {

void check_run(const std::string& kernel, int version, const wb::Shape& s) {
  const wb::KernelSpec* k = wb::find_kernel(kernel);
  REQUIRE(k);
  INFO(kernel, " v", version, " at ", wb::shape_str(*k, s));
  const wb::RunResult r = wb::emu::run(kernel, version, s, wb::RunOptions{});
  INFO("mismatches ", r.validation.mismatches, " of ", r.validation.n, "; first at ", r.validation.first_bad, ": want ",
       r.validation.first_want, ", got ", r.validation.first_got, "; max abs err ", r.validation.max_abs_err, " (atol ",
       r.atol, ", rtol ", r.rtol, ")");
  CHECK(r.validation.ok);
  CHECK(r.emulator);
  CHECK_FALSE(r.timed);  // the emulator never times
  CHECK(r.validation.n > 0);
}

void matmul_sizes(int v) {
  SUBCASE("64 x 64 x 64: whole tiles") { check_run("matmul", v, {64, 64, 64}); }
  SUBCASE("100 x 100 x 100: partial tiles, rows a multiple of 4") { check_run("matmul", v, {100, 100, 100}); }
  SUBCASE("37 x 70 x 45: nothing a multiple of anything, unaligned rows") { check_run("matmul", v, {37, 70, 45}); }
  SUBCASE("1 x 1 x 1") { check_run("matmul", v, {1, 1, 1}); }
}
void rows_sizes(const std::string& kernel, int v) {
  SUBCASE("64 rows x 1000") { check_run(kernel, v, {64, 1000, 0}); }
  SUBCASE("7 rows x 33: a row shorter than a block, longer than a warp") { check_run(kernel, v, {7, 33, 0}); }
  SUBCASE("5 rows x 1") { check_run(kernel, v, {5, 1, 0}); }
}
void flat_sizes(const std::string& kernel, int v) {
  SUBCASE("100000 elements") { check_run(kernel, v, {0, 100000, 0}); }
  SUBCASE("300001 elements: several grid-stride iterations, an odd tail") { check_run(kernel, v, {0, 300001, 0}); }
  SUBCASE("1 element") { check_run(kernel, v, {0, 1, 0}); }
  SUBCASE("1027 elements") { check_run(kernel, v, {0, 1027, 0}); }
  // Toward the GPU's default (2^26) at the emulator's cost: thousands of blocks, an odd tail.
  SUBCASE("2^21 + 3 elements") { check_run(kernel, v, {0, (1 << 21) + 3, 0}); }
}

}  // namespace

TEST_CASE("workbench: matmul v1 naive") { matmul_sizes(1); }
TEST_CASE("workbench: matmul v2 coalesced") { matmul_sizes(2); }
TEST_CASE("workbench: matmul v3 shared-memory tiled") { matmul_sizes(3); }
TEST_CASE("workbench: matmul v4 2-D register tiled") { matmul_sizes(4); }
TEST_CASE("workbench: matmul v5 vectorised") { matmul_sizes(5); }
TEST_CASE("workbench: matmul v6 warp tiled") { matmul_sizes(6); }
TEST_CASE("workbench: matmul v7 cuBLAS (the emulator's reference GEMM)") { matmul_sizes(7); }
TEST_CASE("workbench: softmax v1 naive") { rows_sizes("softmax", 1); }
TEST_CASE("workbench: softmax v2 block per row") { rows_sizes("softmax", 2); }
TEST_CASE("workbench: softmax v3 warp online") { rows_sizes("softmax", 3); }
TEST_CASE("workbench: layernorm v1 naive") { rows_sizes("layernorm", 1); }
TEST_CASE("workbench: layernorm v2 block per row") { rows_sizes("layernorm", 2); }
TEST_CASE("workbench: layernorm v3 warp welford") { rows_sizes("layernorm", 3); }
TEST_CASE("workbench: reduce v1 atomic") { flat_sizes("reduce", 1); }
TEST_CASE("workbench: reduce v2 shared tree") { flat_sizes("reduce", 2); }
TEST_CASE("workbench: reduce v3 warp shuffle") { flat_sizes("reduce", 3); }
TEST_CASE("workbench: gelu v1 plain") { flat_sizes("gelu", 1); }
TEST_CASE("workbench: gelu v2 grid-stride") { flat_sizes("gelu", 2); }
TEST_CASE("workbench: gelu v3 float4") { flat_sizes("gelu", 3); }

TEST_CASE("workbench: the registry: versions numbered 1..n, costs positive, defaults valid") {
  REQUIRE(wb::kernels().size() == 5);
  for (const wb::KernelSpec& k : wb::kernels()) {
    INFO(k.name);
    for (size_t i = 0; i < k.versions.size(); ++i) CHECK(k.versions[i].number == static_cast<int>(i + 1));
    CHECK(k.versions.size() >= 3);
    const wb::Shape emu = wb::shape_for(k, 0, 0, true), gpu = wb::shape_for(k, 0, 0, false);
    CHECK_NOTHROW(wb::check_args(k.name, 1, emu, true));
    CHECK_NOTHROW(wb::check_args(k.name, 1, gpu, false));
    CHECK(wb::cost(k, gpu).bytes > 0);
    CHECK(wb::cost(k, gpu).flops > 0);
  }
  CHECK(wb::find_kernel("matmul")->versions.size() == 8);
  CHECK(wb::find_kernel("matmul")->versions[7].tensor_core);
}

// The tensor-core version cannot run on the emulator (no WMMA there): it is refused before any
// work, saying why and where it runs; the GPU build accepts the same arguments.
TEST_CASE("workbench: matmul v8 (tensor cores) is refused by the emulator with the reason, accepted for a GPU") {
  std::string msg = "(no error)";
  try {
    wb::emu::run("matmul", 8, {32, 32, 32}, {});
  } catch (const std::invalid_argument& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg.find("matmul v8 (tensor cores (bf16)) runs on a GPU only") != std::string::npos);
  CHECK(msg.find("no tensor cores") != std::string::npos);
  CHECK_NOTHROW(wb::check_args("matmul", 8, {64, 64, 64}, false));
}

TEST_CASE("workbench: bad arguments are refused before any work, naming the valid choices") {
  auto message = [](auto f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string unknown = message([] { wb::emu::run("conv", 1, {0, 10, 0}, {}); });
  CHECK(unknown.find("unknown kernel 'conv'") != std::string::npos);
  CHECK(unknown.find("matmul, softmax, reduce, layernorm, gelu") != std::string::npos);
  const std::string version = message([] { wb::emu::run("softmax", 9, {4, 10, 0}, {}); });
  CHECK(version.find("softmax has no version 9") != std::string::npos);
  CHECK(version.find("3 (warp online)") != std::string::npos);
  const std::string big = message([] { wb::emu::run("matmul", 3, {1024, 1024, 1024}, {}); });
  CHECK(big.find("too big for the CPU emulator") != std::string::npos);
  CHECK(big.find("--size 256") != std::string::npos);
  const std::string empty = message([] { wb::emu::run("gelu", 1, {0, 0, 0}, {}); });
  CHECK(empty.find("at least 1") != std::string::npos);
}

TEST_CASE("workbench: validate_result: NaN and infinities never match a finite value") {
  const float want[4] = {1.0f, 0.0f, 2.0f, 3.0f};
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float got[4] = {1.0f, nan, inf, 3.0f + 1e-3f};
  const wb::Validation v = wb::validate_result(got, want, 4, 1e-6, 1e-6);
  CHECK_FALSE(v.ok);
  CHECK(v.mismatches == 3);
  CHECK(v.first_bad == 1);
  CHECK(wb::validate_result(want, want, 4, 0.0, 0.0).ok);
}

TEST_CASE("workbench: shared-memory and warp versions are race-free under several random thread orders") {
  const struct {
    const char* kernel;
    int version;
    wb::Shape shape;
  } runs[] = {{"matmul", 3, {40, 70, 45}},  {"matmul", 5, {40, 70, 44}},   {"matmul", 6, {70, 40, 45}},
              {"softmax", 2, {5, 300, 0}},  {"softmax", 3, {9, 100, 0}},   {"reduce", 2, {0, 5000, 0}},
              {"reduce", 3, {0, 70000, 0}}, {"layernorm", 2, {5, 300, 0}}, {"layernorm", 3, {9, 100, 0}}};
  for (uint64_t order = 2; order <= 5; ++order) {
    gs_emu::set_schedule(gs_emu::Schedule::Random, order);
    for (const auto& r : runs) {
      INFO("random order ", order);
      check_run(r.kernel, r.version, r.shape);
    }
  }
  gs_emu::set_schedule(gs_emu::Schedule::InOrder);
  for (const auto& r : runs) check_run(r.kernel, r.version, r.shape);
  gs_emu::set_schedule(gs_emu::Schedule::Random, 1);
}
