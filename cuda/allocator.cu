// cuda/allocator.cu: the caching device allocator. Freed blocks are kept by rounded size and
// handed out again, so a training step does no cudaMalloc after the first; statistics feed
// the memory report, and out-of-memory is an error that carries them.
#include "cuda/compat.h"

#include <map>
#include <mutex>
#include <vector>

#include "cuda/kernel_utils.h"

namespace gradsleuth::cuda {

namespace {

constexpr size_t kRound = 512;  // every block is a multiple of 512 bytes (and so 512-byte aligned)

struct Cache {
  std::mutex mu;
  std::multimap<size_t, void*> free_blocks;  // rounded size -> block
  AllocatorStats stats;
};
Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: tensors may be freed during static destruction
  return *c;
}

size_t round_up(size_t n) { return (n + kRound - 1) / kRound * kRound; }

// On the emulator, memcheck sees the rounded block as one allocation: tell it how many bytes the
// tensor owns, so an overrun into the rounding is reported, and 0 when the block goes back to the
// cache (a kernel touching it then is a use after free).
void mark_owned(void* p, size_t nbytes) {
#if GS_CUDA_EMU
  gs_emu::set_accessible_size(p, nbytes);
#else
  (void)p;
  (void)nbytes;
#endif
}

std::string mib(int64_t bytes) { return std::to_string(static_cast<double>(bytes) / (1 << 20)).substr(0, 8) + " MiB"; }

// Frees every cached block (caller holds the lock).
void release_cached(Cache& c) {
  for (auto& [size, p] : c.free_blocks) {
    cudaFree(p);
    c.stats.bytes_cached -= static_cast<int64_t>(size);
  }
  c.free_blocks.clear();
}

}  // namespace

void* device_allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const size_t size = round_up(nbytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.free_blocks.find(size);
  if (it != c.free_blocks.end()) {
    void* p = it->second;
    c.free_blocks.erase(it);
    c.stats.bytes_cached -= static_cast<int64_t>(size);
    c.stats.bytes_in_use += static_cast<int64_t>(size);
    c.stats.peak_bytes_in_use = std::max(c.stats.peak_bytes_in_use, c.stats.bytes_in_use);
    ++c.stats.cache_hits;
    mark_owned(p, nbytes);
    return p;
  }
  const int64_t limit = c.stats.limit_bytes;
  auto over_limit = [&] {
    return limit > 0 && c.stats.bytes_in_use + c.stats.bytes_cached + static_cast<int64_t>(size) > limit;
  };
  if (over_limit()) release_cached(c);
  void* p = nullptr;
  cudaError_t err = cudaSuccess;
  if (!over_limit()) {
    err = cudaMalloc(&p, size);
    if (err != cudaSuccess) {  // retry once with the cache handed back to the driver
      cudaGetLastError();
      release_cached(c);
      err = cudaMalloc(&p, size);
    }
  }
  if (over_limit() || err != cudaSuccess || p == nullptr) {
    if (err != cudaSuccess) cudaGetLastError();  // not sticky: the program may free tensors and go on
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    const AllocatorStats& s = c.stats;
    GS_FAIL("cuda allocate", "out of device memory allocating ", nbytes, " bytes (", mib(static_cast<int64_t>(nbytes)),
            ") on cuda:0. Allocator: ", mib(s.bytes_in_use), " in use by tensors, ", mib(s.bytes_cached),
            " cached, peak ", mib(s.peak_bytes_in_use), ", ", s.malloc_calls, " cudaMalloc calls, ", s.cache_hits,
            " cache hits", limit > 0 ? ", limit " + mib(limit) : std::string(),
            "; device: ", mib(static_cast<int64_t>(free_b)), " free of ", mib(static_cast<int64_t>(total_b)),
            (err != cudaSuccess ? std::string(" (") + cudaGetErrorName(err) + ")" : std::string()),
            ". Use a smaller batch, free tensors you no longer need, or keep part of the model on the cpu.");
  }
  ++c.stats.malloc_calls;
  c.stats.bytes_in_use += static_cast<int64_t>(size);
  c.stats.peak_bytes_in_use = std::max(c.stats.peak_bytes_in_use, c.stats.bytes_in_use);
  mark_owned(p, nbytes);
  return p;
}

void device_free(void* p, size_t nbytes) {
  if (!p) return;
  const size_t size = round_up(nbytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  mark_owned(p, 0);
  c.free_blocks.emplace(size, p);
  c.stats.bytes_in_use -= static_cast<int64_t>(size);
  c.stats.bytes_cached += static_cast<int64_t>(size);
  ++c.stats.frees;
}

AllocatorStats allocator_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void reset_allocator_peak() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.peak_bytes_in_use = c.stats.bytes_in_use;
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  release_cached(c);
}

void set_memory_limit(int64_t bytes) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.limit_bytes = bytes < 0 ? 0 : bytes;
}

}  // namespace gradsleuth::cuda
