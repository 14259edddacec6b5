// An asynchronous kernel fault is reported with the name of the op that launched it: at the
// launch in debug builds (every launch checked), at the next synchronisation otherwise. Its
// own program (label cuda_emu): the fault is sticky until cudaDeviceReset, which frees
// every allocation, so no other test may share its process.
#include <doctest/doctest.h>

#include "cuda/kernel_utils.h"

namespace {

// One block; thread 3 faults, as a device-side assert would.
__global__ void faulting_kernel(int* out) {
  if (threadIdx.x == 3) __trap();
  out[threadIdx.x] = 1;
}

}  // namespace

TEST_CASE("a kernel fault is reported naming the op that launched it, then cleared by a device reset") {
  int* buf = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&buf), 32 * sizeof(int)) == cudaSuccess);
  std::string message;
  try {
    gradsleuth::cuda::launch_op("test_faulty_op", faulting_kernel, dim3(1), dim3(32), 0, buf);
    gradsleuth::cuda::synchronize();  // Release builds: the fault surfaces here
  } catch (const gradsleuth::Error& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("test_faulty_op") != std::string::npos);  // the op that launched last
  CHECK(message.find("cudaErrorLaunchFailure") != std::string::npos);
  // The error is sticky, as on a GPU: every later call fails until the device is reset.
  CHECK(cudaDeviceSynchronize() != cudaSuccess);
  CHECK(cudaDeviceReset() == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}
