// cuda/emu/tests/race_demo_main.cpp: runs the racy block sum once (scripts/emu_tsan.sh expects a
// ThreadSanitizer report) and the fixed one; prints both results.
#include <cstdio>
#include <vector>

namespace gs_emu_test::racy {
std::vector<float> block_sums(const std::vector<float>& x);
}
namespace gs_emu_test::fixed {
std::vector<float> block_sums(const std::vector<float>& x);
}

int main() {
  std::vector<float> x(256);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7);
  const auto good = gs_emu_test::fixed::block_sums(x);
  const auto bad = gs_emu_test::racy::block_sums(x);
  std::printf("fixed: %g %g   racy: %g %g\n", good[0], good[1], bad[0], bad[1]);
  return 0;
}
