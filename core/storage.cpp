// Storage allocation through the device's backend, and the version log.
#include "core/storage.h"

#include "core/backend.h"

namespace gradsleuth {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = backend_for(device).allocate(nbytes);
}

Storage::~Storage() {
  if (data_) backend_for(device_).deallocate(data_, nbytes_);
}

void Storage::bump_version(const char* inplace_op) {
  log_[version_ % kLog] = inplace_op;
  ++version_;
}

const char* Storage::modifier_after(uint64_t v) const {
  if (v >= version_ || version_ - v > static_cast<uint64_t>(kLog)) return nullptr;
  return log_[v % kLog];
}

const char* Storage::last_modifier() const { return version_ == 0 ? nullptr : log_[(version_ - 1) % kLog]; }

}  // namespace gradsleuth
