// cuda/emu/check.cpp: memcheck and racecheck for kernels run on the emulator.
//
// How accesses are seen: the emulated .cu sources are compiled with GCC's ThreadSanitizer
// instrumentation (-fsanitize=thread at compile time only), which calls __tsan_read4(addr),
// __tsan_write8(addr), __tsan_atomic32_fetch_add(...) ... around every load, store and atomic
// that may touch shared data. This file is the runtime those calls land in (libtsan is not
// linked): outside a kernel each call returns at once; inside one it
//   - memcheck: finds the device allocation (or dynamic shared memory) the address belongs to.
//     Every allocation has a red zone of kRedZone bytes on each side (runtime.cpp), and the
//     caching allocator marks the bytes a tensor does not own as red too
//     (gs_emu::set_accessible_size), so one element before the start or past the end lands in
//     memory that is ours, is reported, and harms nothing;
//   - racecheck: keeps, per address, the last write and the last two reads (thread, block,
//     barrier epoch, warp epoch, atomic or not). Two accesses of different threads of one block
//     in the same barrier interval, one a write, neither ordered by a warp operation of their
//     warp, and not both atomic, are a race; so are two non-atomic writes to one global address
//     from different blocks of one launch.
// A launch with a finding fails like a faulting kernel: the report goes to stderr and the launch
// leaves a sticky error (cudaErrorIllegalAddress for memcheck, cudaErrorLaunchFailure for races).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/format.h"
#include "cuda/emu/internal.h"

#if GS_EMU_CHECKS
namespace gs_emu {
namespace internal {
namespace {

struct Range {
  uintptr_t lo, live_end, end, red_lo, red_hi;  // [lo, live_end) is in bounds; the rest up to red_hi is red
  int arg = -1;                                 // the kernel argument pointing into it (-1: none)
  uintptr_t arg_ptr = 0;
  bool shared = false;  // dynamic shared memory
};

struct Acc {
  uint64_t block = 0;
  uint32_t thread = 0, epoch = 0, wepoch = 0;
  bool atomic = false, valid = false;
};
struct Cell {
  uintptr_t key = 0;
  uint32_t gen = 0;
  Acc w, r1, r2;
};

unsigned g_enabled = 0;  // the checks on for this process (kMemcheck | kRacecheck)
bool g_enabled_init = false;
thread_local bool t_active = false;  // a checked kernel runs on this OS thread
const void* g_kernel = nullptr;
std::vector<Range> g_ranges;
uint64_t g_block = 0;
uint32_t g_epoch = 0;
std::vector<uint32_t> g_wepoch;
std::vector<std::string> g_reports;
bool g_memcheck_hit = false;
size_t g_suppressed = 0;
constexpr size_t kMaxReports = 4;

// The racecheck shadow: open addressing, cleared per launch by bumping the generation.
std::vector<Cell> g_table;
uint32_t g_gen = 1;
size_t g_used = 0;

uint64_t hash(uintptr_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return k;
}
Cell& cell(uintptr_t key) {
  if (g_used * 2 >= g_table.size()) {
    std::vector<Cell> old;
    old.swap(g_table);
    g_table.assign(std::max<size_t>(1 << 16, old.size() * 2), Cell{});
    g_used = 0;
    for (Cell& c : old)
      if (c.gen == g_gen) {
        const size_t mask = g_table.size() - 1;
        size_t i = hash(c.key) & mask;
        while (g_table[i].gen == g_gen) i = (i + 1) & mask;
        g_table[i] = c;
        ++g_used;
      }
  }
  const size_t mask = g_table.size() - 1;
  size_t i = hash(key) & mask;
  for (;;) {
    Cell& c = g_table[i];
    if (c.gen != g_gen) {
      c = Cell{};
      c.key = key;
      c.gen = g_gen;
      ++g_used;
      return c;
    }
    if (c.key == key) return c;
    i = (i + 1) & mask;
  }
}

// An address is looked up in three tiers: a direct-mapped cache of 64-byte lines that lie wholly in
// one range or one gap (the emulated threads' own host state, each at its own heap address between
// device allocations, hits here), the ranges hit last (a kernel streams over a few buffers at a time),
// then a binary search. Every tier is cleared at each launch.
struct Line {
  uintptr_t tag = ~uintptr_t{0};
  const Range* range = nullptr;  // nullptr: the line lies in no allocation
};
constexpr size_t kLines = 4096;
Line g_lines[kLines];
const Range* g_recent[4] = {};
unsigned g_recent_next = 0;
void clear_lookup() {
  for (const Range*& r : g_recent) r = nullptr;
  for (Line& l : g_lines) l = Line{};
}
// Remembers that a's line lies in [lo, hi), where `r` answers (a range, or nullptr for a gap).
inline void remember(uintptr_t a, uintptr_t lo, uintptr_t hi, const Range* r) {
  const uintptr_t line = a >> 6;
  if ((line << 6) >= lo && (line << 6) + 64 <= hi) g_lines[line & (kLines - 1)] = Line{line, r};
}
const Range* find_range(uintptr_t a) {
  const Line& l = g_lines[(a >> 6) & (kLines - 1)];
  if (l.tag == (a >> 6)) return l.range;
  for (const Range* r : g_recent)
    if (r && a >= r->red_lo && a < r->red_hi) {
      remember(a, r->red_lo, r->red_hi, r);
      return r;
    }
  auto it =
      std::upper_bound(g_ranges.begin(), g_ranges.end(), a, [](uintptr_t x, const Range& r) { return x < r.red_lo; });
  const uintptr_t gap_hi = it == g_ranges.end() ? UINTPTR_MAX : it->red_lo;
  if (it == g_ranges.begin()) {
    remember(a, 0, gap_hi, nullptr);  // kernel arguments on the launching stack, statics, host data
    return nullptr;
  }
  --it;
  if (a >= it->red_hi) {
    remember(a, it->red_hi, gap_hi, nullptr);
    return nullptr;
  }
  g_recent[g_recent_next++ & 3] = &*it;
  remember(a, it->red_lo, it->red_hi, &*it);
  return &*it;
}

std::string idx_str(const uint3& i, const dim3& d) {
  if (d.y == 1 && d.z == 1) return std::to_string(i.x);
  if (d.z == 1) return "(" + std::to_string(i.x) + "," + std::to_string(i.y) + ")";
  return "(" + std::to_string(i.x) + "," + std::to_string(i.y) + "," + std::to_string(i.z) + ")";
}
uint3 thread_of(uint32_t linear) {
  const dim3& b = detail::g_block_dim;
  return uint3{linear % b.x, (linear / b.x) % b.y, linear / (b.x * b.y)};
}
uint3 block_of(uint64_t linear) {
  const dim3& g = detail::g_grid_dim;
  return uint3{static_cast<unsigned>(linear % g.x), static_cast<unsigned>((linear / g.x) % g.y),
               static_cast<unsigned>(linear / (static_cast<uint64_t>(g.x) * g.y))};
}
std::string thread_str(uint32_t linear) { return idx_str(thread_of(linear), detail::g_block_dim); }
std::string block_str(uint64_t linear) { return idx_str(block_of(linear), detail::g_grid_dim); }

// "argument 1[5]" / "dynamic shared memory[5]" / "s_sum[5]" (a static __shared__ array) / an address.
std::string where(uintptr_t a, size_t size) {
  const Range* r = find_range(a);
  const long long esz = static_cast<long long>(size ? size : 1);
  if (r && r->shared) return "dynamic shared memory[" + std::to_string(static_cast<long long>(a - r->lo) / esz) + "]";
  if (r && r->arg >= 0)
    return "kernel argument " + std::to_string(r->arg) + "[" +
           std::to_string((static_cast<long long>(a) - static_cast<long long>(r->arg_ptr)) / esz) + "]";
  if (r)
    return "device memory at offset " + std::to_string(a - r->lo) + " of a " + std::to_string(r->end - r->lo) +
           "-byte allocation";
  uintptr_t base = 0;
  std::string name = data_symbol(reinterpret_cast<const void*>(a), &base);
  if (!name.empty()) return name + "[" + std::to_string(static_cast<long long>(a - base) / esz) + "]";
  return gradsleuth::str_printf("address 0x%" PRIxPTR, a);
}

void report(std::string msg) {
  if (g_reports.size() >= kMaxReports) {
    ++g_suppressed;
    return;
  }
  for (const std::string& r : g_reports)
    if (r == msg) return;
  g_reports.push_back(std::move(msg));
}

void memcheck(uintptr_t a, size_t size, bool write) {
  const Range* r = find_range(a);
  if (!r) return;  // not device memory: a fiber stack, a static __shared__ array, host data
  if (a >= r->lo && a + size <= r->live_end) return;
  g_memcheck_hit = true;
  const detail::ThreadState* t = detail::g_current;
  std::string what =
      std::string(write ? "wrote " : "read ") + std::to_string(size) + " bytes at " + where(a, size) + ": ";
  const size_t live = r->live_end - r->lo;
  const char* kind = r->shared ? "dynamic shared memory of" : "device allocation of";
  std::string advice = "Check the bounds guard (i < n, not i <= n), the index arithmetic and the grid size";
  if (a < r->lo) {
    what += std::to_string(r->lo - a) + " bytes before the start of the " + std::string(kind) + " " +
            std::to_string(live) + " bytes";
  } else if (r->live_end == r->lo && r->end > r->lo) {
    what += "inside a freed block (kept by the caching allocator): a use after free";
    advice = "The tensor was freed before the kernel ran: keep it alive until the kernel has finished";
  } else {
    const uintptr_t past = a >= r->live_end ? a - r->live_end : 0;
    what += (past == 0 ? std::string("just") : std::to_string(past) + " bytes") + " past the end of the " +
            std::string(kind) + " " + std::to_string(live) + " bytes";
    if (r->live_end < r->end) what += " (the caching allocator's block is larger; the tensor owns only these)";
  }
  report("memcheck: thread " + (t ? thread_str(t->linear) : std::string("?")) + " of block " + block_str(g_block) +
         " " + what + "; on a GPU this is an illegal address (compute-sanitizer --tool memcheck reports it). " +
         advice);
}

void racecheck(uintptr_t a, size_t size, bool write, bool atomic) {
  const detail::ThreadState* t = detail::g_current;
  if (!t) return;
  const Range* r = find_range(a);
  const bool global = r && !r->shared;
  const uint32_t T = t->linear, W = g_wepoch.empty() ? 0 : g_wepoch[t->warp];
  Cell& c = cell(a);
  auto unordered = [&](const Acc& p) {
    return p.valid && p.block == g_block && p.thread != T && p.epoch == g_epoch &&
           !(p.thread / 32 == t->warp && p.wepoch != W);
  };
  auto name = [&](const Acc& p) { return "thread " + thread_str(p.thread); };
  const std::string here = "thread " + thread_str(T);
  const char* fix = "; put a __syncthreads() (or __syncwarp() within a warp) between them, or make both atomic";
  // An atomic write against a plain read is the classic CAS loop's first load (`old = *p`, then
  // atomicCAS): not reported, as on a GPU where the CAS corrects a stale read. Every other pair with
  // a write, unless both are atomic, is.
  if (unordered(c.w) && !(c.w.atomic && (atomic || !write))) {
    report("racecheck: " + name(c.w) +
           (write ? " and " + here + " of block " + block_str(g_block) + " both wrote "
                  : " wrote and " + here + " of block " + block_str(g_block) + " read ") +
           where(a, size) + " with no barrier between them" + (write ? " and without an atomic" : "") + fix);
  } else if (write && global && c.w.valid && c.w.block != g_block && !(c.w.atomic && atomic)) {
    report("racecheck: thread " + thread_str(c.w.thread) + " of block " + block_str(c.w.block) + " and " + here +
           " of block " + block_str(g_block) + " both wrote " + where(a, size) +
           " without an atomic: blocks run in any order on a GPU, so the value left is either one (use atomicAdd, "
           "or give each block its own output)");
  }
  if (write) {
    for (const Acc* p : {&c.r1, &c.r2})
      if (unordered(*p) && !atomic) {
        report("racecheck: " + name(*p) + " read and " + here + " of block " + block_str(g_block) + " wrote " +
               where(a, size) + " with no barrier between them" + fix);
        break;
      }
  }
  Acc now;
  now.block = g_block;
  now.thread = T;
  now.epoch = g_epoch;
  now.wepoch = W;
  now.atomic = atomic;
  now.valid = true;
  if (write) {
    c.w = now;
  } else if (!(c.r1.valid && c.r1.thread == T && c.r1.block == g_block && c.r1.epoch == g_epoch)) {
    c.r2 = c.r1;
    c.r1 = now;
  }
}

inline void access(const volatile void* p, size_t size, bool write, bool atomic) {
  if (!t_active) return;
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a >= g_stack_lo && a < g_stack_hi) return;  // the thread's own locals: private, and not device memory
  if (g_enabled & kMemcheck) memcheck(a, size, write);
  if (g_enabled & kRacecheck) racecheck(a, size, write, atomic);
}

}  // namespace

bool checks_compiled() { return true; }

void check_launch_begin(const void* kernel, const detail::PointerArg* args, int n, void* dyn_smem, size_t dyn_bytes) {
  if (!g_enabled_init) checks();
  t_active = g_enabled != 0;
  if (!t_active) return;
  g_kernel = kernel;
  g_ranges.clear();
  for (const AllocInfo& a : snapshot_allocations()) {
    Range r;
    r.lo = reinterpret_cast<uintptr_t>(a.base);
    r.live_end = r.lo + a.accessible;
    r.end = r.lo + a.size;
    r.red_lo = r.lo - a.red_before;
    r.red_hi = r.end + a.red_after;
    g_ranges.push_back(r);
  }
  if (dyn_smem && dyn_bytes) {
    Range r;
    r.lo = reinterpret_cast<uintptr_t>(dyn_smem);
    r.live_end = r.end = r.lo + dyn_bytes;
    r.red_lo = r.lo - kRedZone;
    r.red_hi = r.end + kRedZone;
    r.shared = true;
    g_ranges.push_back(r);
  }
  std::sort(g_ranges.begin(), g_ranges.end(), [](const Range& x, const Range& y) { return x.red_lo < y.red_lo; });
  clear_lookup();
  for (int i = 0; i < n; ++i) {
    const auto p = reinterpret_cast<uintptr_t>(args[i].ptr);
    Range* r = const_cast<Range*>(find_range(p));
    if (r && !r->shared && (r->arg < 0 || p > r->arg_ptr) && p <= r->end) {
      r->arg = args[i].index;
      r->arg_ptr = p;
    }
  }
  g_reports.clear();
  g_suppressed = 0;
  g_memcheck_hit = false;
  if (++g_gen == 0) {  // wrapped: clear for real
    g_table.assign(g_table.size(), Cell{});
    g_gen = 1;
  }
  g_used = 0;
  g_wepoch.assign((detail::g_block_dim.x * detail::g_block_dim.y * detail::g_block_dim.z + 31) / 32, 0);
}

void check_block_begin(uint64_t linear_block) {
  g_block = linear_block;
  ++g_epoch;
  std::fill(g_wepoch.begin(), g_wepoch.end(), 0u);
}
void check_block_barrier() { ++g_epoch; }
void check_warp_sync(unsigned warp) {
  if (warp < g_wepoch.size()) ++g_wepoch[warp];
}

std::string check_launch_end(cudaError_t* err) {
  if (!t_active) return "";
  t_active = false;
  if (g_reports.empty()) return "";
  *err = g_memcheck_hit ? cudaErrorIllegalAddress : cudaErrorLaunchFailure;
  std::string out;
  for (const std::string& r : g_reports) out += (out.empty() ? "" : "\n  ") + r;
  if (g_suppressed) out += "\n  (" + std::to_string(g_suppressed) + " more findings not shown)";
  return out;
}

}  // namespace internal

unsigned checks() {
  if (!internal::g_enabled_init) {
    internal::g_enabled_init = true;
    internal::g_enabled = kMemcheck | kRacecheck;
    if (const char* e = std::getenv("GS_EMU_CHECKS")) {
      const std::string s = e;
      unsigned m = 0;
      if (s.find("memcheck") != std::string::npos) m |= kMemcheck;
      if (s.find("racecheck") != std::string::npos) m |= kRacecheck;
      if (s != "none" && s != "off" && s != "0" && m == 0)
        std::fprintf(stderr,
                     "gs_emu: GS_EMU_CHECKS='%s' names no check: use memcheck, racecheck, both (comma-separated) "
                     "or none; keeping both\n",
                     e);
      else
        internal::g_enabled = m;
    }
  }
  return internal::g_enabled;
}
void set_checks(unsigned mask) {
  internal::g_enabled_init = true;
  internal::g_enabled = mask & (kMemcheck | kRacecheck);
}
bool checks_available() { return true; }

}  // namespace gs_emu

// ---- the ThreadSanitizer instrumentation ABI, as GCC emits it ----
extern "C" {
using gs_emu::internal::access;

void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
void __tsan_read_range(void* p, unsigned long n) { access(p, n, false, false); }
void __tsan_write_range(void* p, unsigned long n) { access(p, n, true, false); }

#define GS_TSAN_RW(N)                                                             \
  void __tsan_read##N(void* p) { access(p, N, false, false); }                    \
  void __tsan_write##N(void* p) { access(p, N, true, false); }                    \
  void __tsan_unaligned_read##N(void* p) { access(p, N, false, false); }          \
  void __tsan_unaligned_write##N(void* p) { access(p, N, true, false); }          \
  void __tsan_volatile_read##N(void* p) { access(p, N, false, false); }           \
  void __tsan_volatile_write##N(void* p) { access(p, N, true, false); }           \
  void __tsan_unaligned_volatile_read##N(void* p) { access(p, N, false, false); } \
  void __tsan_unaligned_volatile_write##N(void* p) { access(p, N, true, false); }
GS_TSAN_RW(1)
GS_TSAN_RW(2)
GS_TSAN_RW(4)
GS_TSAN_RW(8)
GS_TSAN_RW(16)
#undef GS_TSAN_RW

// Atomics: record the access as atomic, then do the operation (sequentially consistent: stronger
// than any order asked for, which is always allowed).
#define GS_TSAN_ATOMIC(N, T)                                                                \
  T __tsan_atomic##N##_load(const volatile T* a, int) {                                     \
    access(a, sizeof(T), false, true);                                                      \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                            \
  }                                                                                         \
  void __tsan_atomic##N##_store(volatile T* a, T v, int) {                                  \
    access(a, sizeof(T), true, true);                                                       \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                               \
  }                                                                                         \
  T __tsan_atomic##N##_exchange(volatile T* a, T v, int) {                                  \
    access(a, sizeof(T), true, true);                                                       \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                     \
  }                                                                                         \
  T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int) {                                 \
    access(a, sizeof(T), true, true);                                                       \
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                      \
  }                                                                                         \
  T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int) {                                 \
    access(a, sizeof(T), true, true);                                                       \
    return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                      \
  }                                                                                         \
  T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int) {                                 \
    access(a, sizeof(T), true, true);                                                       \
    return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                      \
  }                                                                                         \
  T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int) {                                  \
    access(a, sizeof(T), true, true);                                                       \
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                       \
  }                                                                                         \
  T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int) {                                 \
    access(a, sizeof(T), true, true);                                                       \
    return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                      \
  }                                                                                         \
  T __tsan_atomic##N##_fetch_nand(volatile T* a, T v, int) {                                \
    access(a, sizeof(T), true, true);                                                       \
    return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                     \
  }                                                                                         \
  int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {      \
    access(a, sizeof(T), true, true);                                                       \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
  }                                                                                         \
  int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {        \
    access(a, sizeof(T), true, true);                                                       \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
  }                                                                                         \
  T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, int, int) {            \
    access(a, sizeof(T), true, true);                                                       \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);       \
    return c;                                                                               \
  }
GS_TSAN_ATOMIC(8, uint8_t)
GS_TSAN_ATOMIC(16, uint16_t)
GS_TSAN_ATOMIC(32, uint32_t)
GS_TSAN_ATOMIC(64, uint64_t)
#undef GS_TSAN_ATOMIC
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
}
#else  // GS_EMU_CHECKS: the AddressSanitizer and ThreadSanitizer builds check with those instead

namespace gs_emu {
namespace internal {
bool checks_compiled() { return false; }
void check_launch_begin(const void*, const detail::PointerArg*, int, void*, size_t) {}
void check_block_begin(uint64_t) {}
void check_block_barrier() {}
void check_warp_sync(unsigned) {}
std::string check_launch_end(cudaError_t*) { return ""; }
}  // namespace internal
unsigned checks() { return 0; }
void set_checks(unsigned) {}
bool checks_available() { return false; }
}  // namespace gs_emu
#endif
