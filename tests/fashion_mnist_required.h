// For the tests that train on Fashion-MNIST: the dataset is the Debian package that scripts/setup.sh
// installs, so a machine without it fails these tests (saying how to install it) instead of skipping them.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace testdata {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

inline bool have_fashion_mnist() {
  const std::string dir = kFashionMnistDir;
  return std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz") ||
         std::filesystem::exists(dir + "/train-images-idx3-ubyte");
}

// Returns when the dataset is installed; otherwise ends the test program with status 1 and the fix.
inline void require_fashion_mnist() {
  if (have_fashion_mnist()) return;
  std::fprintf(stderr,
               "dataset-fashion-mnist is not installed (no %s/train-images-idx3-ubyte.gz): this test needs it; "
               "install it with scripts/setup.sh (apt-get install dataset-fashion-mnist)\n",
               kFashionMnistDir);
  std::exit(1);
}

}  // namespace testdata
