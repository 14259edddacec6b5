// cuda/emu/tests/test_emu_race.cu: a missing __syncthreads in a block sum: racecheck reports it by
// name; without racecheck the random schedule still makes the racy sum differ on some seed.
#include <doctest/doctest.h>

#include <vector>

#include "cuda/compat.h"
#include "cuda/emu/tests/util.h"

namespace gs_emu_test::racy {
std::vector<float> block_sums(const std::vector<float>& x);
}
namespace gs_emu_test::fixed {
std::vector<float> block_sums(const std::vector<float>& x);
}

TEST_CASE("emu: racecheck names a missing __syncthreads: the array, both threads and the block") {
  if (!gs_emu::checks_available()) return;  // a sanitizer build: TSan/ASan check instead
  std::vector<float> x(512, 1.0f);
  gs_emu::set_checks(gs_emu::kMemcheck | gs_emu::kRacecheck);
  CHECK(gs_emu_test::fixed::block_sums(x) == std::vector<float>(4, 128.0f));
  CHECK_THROWS_WITH(gs_emu_test::racy::block_sums(x), doctest::Contains("cudaErrorLaunchFailure"));
  const std::string report = gs_emu::last_check_report();
  CHECK(report.find("block_sum") != std::string::npos);
  CHECK(report.find("racecheck: thread ") != std::string::npos);
  CHECK(report.find("tile[") != std::string::npos);  // the __shared__ array, by name
  CHECK(report.find("no barrier between them") != std::string::npos);
  reset_device();
}

TEST_CASE("emu: without racecheck, the random schedule still exposes the missing __syncthreads") {
  std::vector<float> x(512);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 5 + 1);
  std::vector<float> ref(4, 0.0f);
  for (size_t i = 0; i < x.size(); ++i) ref[i / 128] += x[i];
  gs_emu::set_checks(gs_emu::kMemcheck);
  int flagged = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    gs_emu::set_schedule(gs_emu::Schedule::Random, seed);
    CHECK(gs_emu_test::fixed::block_sums(x) == ref);
    if (gs_emu_test::racy::block_sums(x) != ref) ++flagged;
  }
  MESSAGE("racy kernel differed from the reference on ", flagged, " of 20 seeds");
  CHECK(flagged > 0);
  gs_emu::set_schedule(gs_emu::Schedule::Random, 1);
  if (gs_emu::checks_available()) gs_emu::set_checks(gs_emu::kMemcheck | gs_emu::kRacecheck);
}
