// Uses the installed gradsleuth::cuda part: registers the CUDA backend and says whether a device exists.
#include <cstdio>

#include <gradsleuth.h>

#include "cuda/cuda.h"

int main() {
  if (!gradsleuth::cuda::init()) {
    std::fprintf(stderr, "install_check_cuda: no CUDA device: %s\n", gradsleuth::cuda::unavailable_reason().c_str());
    return 1;
  }
  gs::Tensor t = gs::ones({2, 2}).to(gs::Device(gs::DeviceType::CUDA));
  double s = t.sum().item<double>();
  std::printf("install_check_cuda: sum on the device = %g\n", s);
  return s == 4.0 ? 0 : 1;
}
