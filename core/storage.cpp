// Storage allocation through the device's backend, the version log, and the
// live/peak byte counters of the memory report.
#include "core/storage.h"

#include <atomic>

#include "core/backend.h"

namespace gradsleuth {

namespace {

// One set of counters per device type. On every allocation: one add to
// `current`, one to `allocations`, one load of `peak` (and a compare-exchange
// only when a new peak is reached); on every free: one subtract.
struct alignas(64) Counters {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocations{0};
};
constexpr int kDeviceTypes = 2;  // CPU, CUDA
Counters g_counters[kDeviceTypes];

Counters& counters(DeviceType t) { return g_counters[static_cast<int>(t) < kDeviceTypes ? static_cast<int>(t) : 0]; }

// Returns the allocation's serial number.
int64_t count_alloc(DeviceType t, size_t nbytes) {
  Counters& c = counters(t);
  const auto n = static_cast<int64_t>(nbytes);
  const int64_t now = c.current.fetch_add(n, std::memory_order_relaxed) + n;
  int64_t peak = c.peak.load(std::memory_order_relaxed);
  while (now > peak && !c.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return c.allocations.fetch_add(1, std::memory_order_relaxed);
}

void count_free(DeviceType t, size_t nbytes) {
  counters(t).current.fetch_sub(static_cast<int64_t>(nbytes), std::memory_order_relaxed);
}

}  // namespace

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = backend_for(device).allocate(nbytes);
  serial_ = count_alloc(device.type, nbytes);  // after allocate: a failed allocation counts nothing
}

Storage::~Storage() {
  if (data_) backend_for(device_).deallocate(data_, nbytes_);
  count_free(device_.type, nbytes_);
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

MemoryStats memory_stats(DeviceType device) {
  const Counters& c = counters(device);
  return MemoryStats{c.current.load(std::memory_order_relaxed), c.peak.load(std::memory_order_relaxed),
                     c.allocations.load(std::memory_order_relaxed)};
}

void reset_peak_memory(DeviceType device) {
  Counters& c = counters(device);
  c.peak.store(c.current.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void reset_peak_memory() {
  for (int t = 0; t < kDeviceTypes; ++t) reset_peak_memory(static_cast<DeviceType>(t));
}

}  // namespace gradsleuth
