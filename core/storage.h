// Storage: a block of device memory shared by a tensor and all of its views,
// with the version counter that in-place ops bump, and the process-wide byte
// counters (live bytes, peak) that the memory report (W8) reads.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"

namespace gradsleuth {

namespace detail {
struct LowPrecisionCopy;  // core/autocast.h
}

class Storage {
 public:
  // Allocates `nbytes` on `device` through that device's backend.
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // Allocation order: this was the serial()-th Storage allocated on its device
  // type (from 0). memory_stats().allocations read before a computation tells
  // which live storages it allocated (the memory report uses this).
  int64_t serial() const { return serial_; }

  // The version counter: every in-place op on any view of this storage calls
  // bump_version(op) (PyTorch keeps the same counter). A tensor saved for
  // backward remembers the version it saw; see SavedTensor.
  uint64_t version() const { return version_; }
  void bump_version(const char* inplace_op);
  // The in-place op that moved the counter from `v` to `v + 1`, if still in the
  // short log kept here (the last 16 modifications); nullptr otherwise.
  const char* modifier_after(uint64_t v) const;
  const char* last_modifier() const;

  // A float32 storage whose every value a kernel has just written already rounded to `dtype`
  // (float16/bfloat16) and kept in float32 (a product whose result is bound for the fused backward
  // of a cast, core/autograd.cpp): that backward then skips its rounding pass. The mark holds
  // until the next in-place op bumps the version, and is read once: take_rounded_through(dtype)
  // answers whether it held, and clears it.
  void mark_rounded_through(DType dtype) {
    rounded_through_ = dtype;
    rounded_at_ = version_;
  }
  bool take_rounded_through(DType dtype) {
    const bool held = is_reduced_float(dtype) && rounded_through_ == dtype && rounded_at_ == version_;
    rounded_through_ = kFloat32;
    return held;
  }

  // The float16/bfloat16 copy autocast keeps of the float32 parameter stored here, if any
  // (core/autocast.h, detail::LowPrecisionCopy).
  std::shared_ptr<detail::LowPrecisionCopy> low_copy;

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  int64_t serial_ = 0;
  uint64_t version_ = 0;
  static constexpr int kLog = 16;
  std::array<const char*, kLog> log_{};  // log_[v % kLog] = op that made version v+1
  uint64_t rounded_at_ = 0;
  DType rounded_through_ = kFloat32;  // float32: no mark
};

// ---- allocation accounting (W8) --------------------------------------------------
// Every Storage adds its bytes to a per-device-type counter when it is allocated
// and subtracts them when it is freed, so these numbers are the bytes held by
// live tensors (views share their storage and are counted once). A backend's
// cache of freed blocks is not counted: this is what tensors hold, not what the
// process holds. Counters are process-wide and updated with relaxed atomics.
struct MemoryStats {
  int64_t current_bytes = 0;  // bytes in live Storage objects now
  int64_t peak_bytes = 0;     // the largest current_bytes since the last reset_peak_memory()
  int64_t allocations = 0;    // Storage objects allocated since the process started
};
MemoryStats memory_stats(DeviceType device = DeviceType::CPU);
// Sets the peak to the current bytes, so the next peak measures what follows.
// The counters are shared by the whole process: resetting them mid-way through
// someone else's measurement changes theirs.
void reset_peak_memory(DeviceType device);
void reset_peak_memory();  // every device type

}  // namespace gradsleuth
