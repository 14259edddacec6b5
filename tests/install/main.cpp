// Uses the installed gradsleuth package: ones({2,2}).sum() must be 4.
#include <gradsleuth.h>

#include <cstdio>

int main() {
  gs::Tensor t = gs::ones({2, 2});
  double s = t.sum().item<double>();
  if (s != 4.0) {
    std::fprintf(stderr, "install_check: ones({2,2}).sum() = %g, expected 4\n", s);
    return 1;
  }
  std::printf("install_check: ok (sum = %g)\n", s);
  return 0;
}
