// cuda/emu/tests/test_emu_race.cu: the random schedule flags a missing __syncthreads: the racy block
// sum differs from the reference on some seed; the fixed one is right on every seed.
#include <doctest/doctest.h>

#include <vector>

#include "cuda/compat.h"

namespace gs_emu_test::racy {
std::vector<float> block_sums(const std::vector<float>& x);
}
namespace gs_emu_test::fixed {
std::vector<float> block_sums(const std::vector<float>& x);
}

TEST_CASE("emu: a missing __syncthreads is caught by the random schedule; the fixed kernel passes every seed") {
  std::vector<float> x(512);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 5 + 1);
  std::vector<float> ref(4, 0.0f);
  for (size_t i = 0; i < x.size(); ++i) ref[i / 128] += x[i];
  int flagged = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    gs_emu::set_schedule(gs_emu::Schedule::Random, seed);
    CHECK(gs_emu_test::fixed::block_sums(x) == ref);
    if (gs_emu_test::racy::block_sums(x) != ref) ++flagged;
  }
  MESSAGE("racy kernel differed from the reference on ", flagged, " of 20 seeds");
  CHECK(flagged > 0);
  gs_emu::set_schedule(gs_emu::Schedule::Random, 1);
}
