// cuda/emu/tests/util.h: small helpers for the emulator tests (a device buffer, an error drain).
#pragma once
#include <vector>

#include "cuda/compat.h"

template <class T>
struct DevBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t count) : n(count) { GS_CUDA_CHECK(cudaMalloc(&p, count * sizeof(T))); }
  explicit DevBuf(const std::vector<T>& host) : DevBuf(host.size()) {
    GS_CUDA_CHECK(cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  std::vector<T> get() const {
    std::vector<T> h(n);
    GS_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

// After a test that faults a kernel on purpose: clear the sticky error and the allocations.
inline void reset_device() {
  cudaDeviceReset();
  cudaGetLastError();
}
