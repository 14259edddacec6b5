// cuda/strided.h: a tensor's geometry as a small value type that kernels take by value,
// so one kernel handles contiguous, transposed, sliced and broadcast (stride 0) operands.
#pragma once
#include <cstdint>

#include "core/host_device.h"

namespace gradsleuth::cuda {

inline constexpr int kMaxDims = 8;  // == core/shape.h's kMaxDims (checked in backend.cpp)

// sizes/strides in elements, outermost first. 136 bytes: four of them fit a kernel's
// 4 KiB parameter space easily.
struct Strided {
  int32_t ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  // Element offset of the i-th element in row-major order of `sizes`.
  GS_HOST_DEVICE int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t s = sizes[d];
      off += (i % s) * strides[d];
      i /= s;
    }
    return off;
  }
  GS_HOST_DEVICE int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= sizes[d];
    return n;
  }
  GS_HOST_DEVICE bool contiguous() const {
    int64_t expected = 1;
    for (int d = ndim - 1; d >= 0; --d) {
      if (sizes[d] == 1) continue;
      if (strides[d] != expected) return false;
      expected *= sizes[d];
    }
    return true;
  }
};

}  // namespace gradsleuth::cuda
