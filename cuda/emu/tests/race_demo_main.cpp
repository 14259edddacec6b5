// cuda/emu/tests/race_demo_main.cpp: runs the block sum once, `racy` (no first __syncthreads) or
// `fixed`; scripts/emu_tsan.sh expects a ThreadSanitizer report for racy only.
#include <cstdio>
#include <cstring>
#include <vector>

namespace gs_emu_test::racy {
std::vector<float> block_sums(const std::vector<float>& x);
}
namespace gs_emu_test::fixed {
std::vector<float> block_sums(const std::vector<float>& x);
}

int main(int argc, char** argv) {
  const bool racy = argc > 1 && std::strcmp(argv[1], "racy") == 0;
  std::vector<float> x(256);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7);
  const auto sums = racy ? gs_emu_test::racy::block_sums(x) : gs_emu_test::fixed::block_sums(x);
  std::printf("%s block sums: %g %g (expected 379 383)\n", racy ? "racy" : "fixed", sums[0], sums[1]);
  return 0;
}
