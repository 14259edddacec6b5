// Storage: a block of device memory shared by a tensor and all of its views,
// with the version counter that in-place ops bump.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"

namespace gradsleuth {

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

  // The version counter: every in-place op on any view of this storage calls
  // bump_version(op) (PyTorch keeps the same counter). A tensor saved for
  // backward remembers the version it saw; see SavedTensor.
  uint64_t version() const { return version_; }
  void bump_version(const char* inplace_op);
  // The in-place op that moved the counter from `v` to `v + 1`, if still in the
  // short log kept here (the last 16 modifications); nullptr otherwise.
  const char* modifier_after(uint64_t v) const;
  const char* last_modifier() const;

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  uint64_t version_ = 0;
  static constexpr int kLog = 16;
  std::array<const char*, kLog> log_{};  // log_[v % kLog] = op that made version v+1
};

}  // namespace gradsleuth
