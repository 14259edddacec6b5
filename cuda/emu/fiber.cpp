// cuda/emu/fiber.cpp: the emulator's scheduler: every CUDA thread of a block is a stackful fiber
// (Boost.Context fcontext) on the calling OS thread; blocks run one after another.
#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/detail/fcontext.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "core/format.h"
#include "cuda/emu/internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define GS_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GS_EMU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) && !defined(GS_EMU_TSAN)
#define GS_EMU_TSAN 1
#elif defined(__has_feature) && !defined(GS_EMU_TSAN)
#if __has_feature(thread_sanitizer)
#define GS_EMU_TSAN 1
#endif
#endif

#if GS_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if GS_EMU_TSAN
extern "C" {
void* __tsan_get_current_fiber(void);
void* __tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void* fiber);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}
#endif

namespace bctx = boost::context::detail;

namespace gs_emu {
namespace detail {
ThreadState* g_current = nullptr;
uint3 g_block_idx{0, 0, 0};
dim3 g_block_dim;
dim3 g_grid_dim;
}  // namespace detail

namespace internal {
Stats g_stats;
uintptr_t g_stack_lo = 0, g_stack_hi = 0;
}  // namespace internal

namespace {

// ---- scheduler mode ----
struct ScheduleState {
  bool init = false;
  Schedule mode = Schedule::Random;
  uint64_t seed = 1;
  uint64_t rng = 1;
};
ScheduleState g_sched;

void init_schedule() {
  if (g_sched.init) return;
  g_sched.init = true;
  const char* env = std::getenv("GS_EMU_SCHEDULE");
  if (env && *env) {
    std::string s(env);
    if (s == "inorder") {
      g_sched.mode = Schedule::InOrder;
    } else if (s == "random") {
      g_sched.mode = Schedule::Random;
    } else if (s.rfind("random:", 0) == 0) {
      g_sched.mode = Schedule::Random;
      g_sched.seed = std::strtoull(s.c_str() + 7, nullptr, 0);
    } else {
      std::fprintf(stderr,
                   "gs_emu: GS_EMU_SCHEDULE='%s' not understood (use inorder, random or random:SEED); using random:1\n",
                   env);
    }
  }
  g_sched.rng = g_sched.seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
}

uint64_t next_random() {  // splitmix64
  uint64_t z = (g_sched.rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// ---- fibers ----
enum class FState { Ready, Running, AtBlockBarrier, AtWarpOp, Done, Trapped };

struct Fiber {
  detail::ThreadState ts{};
  bctx::fcontext_t ctx = nullptr;
  void* mem = nullptr;
  size_t mem_size = 0;
  char* stack_lo = nullptr;
  size_t stack_size = 0;
  bool abandoned = false;  // stack holds frames of an aborted launch
  FState state = FState::Ready;
  std::source_location site;
  const char* op = "";
  unsigned mask = 0;
  uint64_t value = 0;
  int src = -1;
  uint64_t result = 0;
  unsigned ballot = 0;
  int pred = 0;
  int bar_result = 0;
  void* asan_fake = nullptr;
  void* tsan = nullptr;
};

std::vector<std::unique_ptr<Fiber>> g_pool;
unsigned g_nthreads = 0;
bctx::fcontext_t g_sched_ctx = nullptr;
Fiber* g_running = nullptr;
void (*g_body)(void*) = nullptr;
void* g_closure = nullptr;
std::string g_fault;  // set by a fiber: the block is aborted
std::vector<unsigned> g_ready;
size_t g_ready_head = 0;
unsigned g_bar_arrived = 0;

#if GS_EMU_ASAN
const void* g_main_bottom = nullptr;
size_t g_main_size = 0;
void* g_sched_fake = nullptr;
#endif
#if GS_EMU_TSAN
void* g_tsan_main = nullptr;
char g_tsan_launch_begin, g_tsan_launch_end;
std::unique_ptr<char[]> g_tsan_sync;  // per block: [0] block barrier, [1 + w] warp w
#endif

size_t stack_bytes() {
  static size_t bytes = [] {
    size_t kb = 256;
#if GS_EMU_ASAN
    kb = 1024;
#endif
    if (const char* env = std::getenv("GS_EMU_STACK_KB")) kb = std::strtoull(env, nullptr, 10);
    if (kb < 16) kb = 16;
    return kb * 1024;
  }();
  return bytes;
}

void switch_to_scheduler(Fiber* f) {
#if GS_EMU_ASAN
  __sanitizer_start_switch_fiber(&f->asan_fake, g_main_bottom, g_main_size);
#endif
#if GS_EMU_TSAN
  __tsan_switch_to_fiber(g_tsan_main, 1 /* __tsan_switch_to_fiber_no_sync */);
#endif
  bctx::transfer_t t = bctx::jump_fcontext(g_sched_ctx, nullptr);
  g_sched_ctx = t.fctx;
#if GS_EMU_ASAN
  __sanitizer_finish_switch_fiber(f->asan_fake, nullptr, nullptr);
#endif
}

void fiber_main(bctx::transfer_t t) {
  Fiber* f = static_cast<Fiber*>(t.data);
  g_sched_ctx = t.fctx;
#if GS_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_main_bottom, &g_main_size);
#endif
  for (;;) {
#if GS_EMU_TSAN
    __tsan_acquire(&g_tsan_launch_begin);
#endif
    try {
      g_body(g_closure);
    } catch (const std::exception& e) {
      g_fault =
          std::string("the kernel threw an exception in thread ") + std::to_string(f->ts.linear) + ": " + e.what();
    } catch (...) {
      g_fault = "the kernel threw an exception in thread " + std::to_string(f->ts.linear);
    }
#if GS_EMU_TSAN
    __tsan_release(&g_tsan_launch_end);
#endif
    f->state = FState::Done;
    switch_to_scheduler(f);
  }
}

void resume(Fiber* f) {
  g_running = f;
  detail::g_current = &f->ts;
  internal::g_stack_lo = reinterpret_cast<uintptr_t>(f->stack_lo);
  internal::g_stack_hi = internal::g_stack_lo + f->stack_size;
  f->state = FState::Running;
  ++internal::g_stats.fiber_switches;
#if GS_EMU_ASAN
  __sanitizer_start_switch_fiber(&g_sched_fake, f->stack_lo, f->stack_size);
#endif
#if GS_EMU_TSAN
  __tsan_switch_to_fiber(f->tsan, 1);
#endif
  bctx::transfer_t t = bctx::jump_fcontext(f->ctx, f);
  f->ctx = t.fctx;
#if GS_EMU_ASAN
  __sanitizer_finish_switch_fiber(g_sched_fake, nullptr, nullptr);
#endif
  g_running = nullptr;
}

void ensure_pool(unsigned n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  while (g_pool.size() < n) {
    auto f = std::make_unique<Fiber>();
    f->stack_size = (stack_bytes() + page - 1) / page * page;
    f->mem_size = f->stack_size + page;
    f->mem = mmap(nullptr, f->mem_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (f->mem == MAP_FAILED) {
      std::fprintf(stderr, "gs_emu: cannot map a %zu KiB fiber stack\n", f->mem_size / 1024);
      std::abort();
    }
    mprotect(f->mem, page, PROT_NONE);  // guard page: a stack overflow faults instead of corrupting memory
    f->stack_lo = static_cast<char*>(f->mem) + page;
    g_pool.push_back(std::move(f));
  }
}

unsigned present_mask(unsigned warp) {
  const unsigned first = warp * 32;
  const unsigned left = g_nthreads - first;
  return left >= 32 ? 0xffffffffu : ((1u << left) - 1u);
}

void make_ready(unsigned i) {
  g_pool[i]->state = FState::Ready;
  g_ready.push_back(i);
}

std::string site_str(const std::source_location& s) {
  return std::string(s.file_name()) + ":" + std::to_string(s.line());
}
bool same_site(const std::source_location& a, const std::source_location& b) {
  return a.line() == b.line() && a.column() == b.column() && std::strcmp(a.file_name(), b.file_name()) == 0;
}

std::string ranges(const std::vector<unsigned>& ids) {
  std::string out;
  int parts = 0;
  for (size_t i = 0; i < ids.size();) {
    if (++parts > 8) {
      out += ",... (" + std::to_string(ids.size()) + " threads)";
      break;
    }
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(ids[i]);
    if (j > i) out += "-" + std::to_string(ids[j]);
    i = j + 1;
  }
  return out;
}

void release_block_barrier() {
  const Fiber* first = g_pool[0].get();
  for (unsigned i = 1; i < g_nthreads; ++i) {
    if (!same_site(g_pool[i]->site, first->site)) {
      std::vector<unsigned> a, b;
      for (unsigned k = 0; k < g_nthreads; ++k) (same_site(g_pool[k]->site, first->site) ? a : b).push_back(k);
      g_fault =
          "divergent __syncthreads: threads " + ranges(a) + " wait at " + site_str(first->site) + " but threads " +
          ranges(b) + " wait at another __syncthreads (first at " + site_str(g_pool[b[0]]->site) +
          "); every thread of the block must reach the same __syncthreads (keep barriers out of divergent branches)";
      return;
    }
  }
  int count = 0;
  for (unsigned i = 0; i < g_nthreads; ++i) count += g_pool[i]->pred;
  for (unsigned i = 0; i < g_nthreads; ++i) {
    g_pool[i]->bar_result = count;
    make_ready(i);
  }
  g_bar_arrived = 0;
  internal::check_block_barrier();
  ++internal::g_stats.block_barriers;
}

void try_release_warp(Fiber* f) {
  const unsigned w = f->ts.warp;
  const unsigned present = present_mask(w);
  const unsigned group = (f->mask & present) | (1u << f->ts.lane);
  const unsigned base = w * 32;
  for (unsigned l = 0; l < 32; ++l) {
    if (!(group & (1u << l))) continue;
    const Fiber* g = g_pool[base + l].get();
    if (g->state != FState::AtWarpOp || ((g->mask & present) | (1u << l)) != group) return;
  }
  unsigned ballot = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((group & (1u << l)) && g_pool[base + l]->value != 0) ballot |= 1u << l;
  for (unsigned l = 0; l < 32; ++l) {
    if (!(group & (1u << l))) continue;
    Fiber* g = g_pool[base + l].get();
    const int src = g->src;
    g->result = (src >= 0 && src < 32 && (present & (1u << src))) ? g_pool[base + src]->value : g->value;
    g->ballot = ballot;
    make_ready(base + l);
  }
  internal::check_warp_sync(w);
  ++internal::g_stats.warp_ops;
}

std::string describe_deadlock() {
  std::vector<unsigned> exited, at_bar;
  std::string msg = "deadlock: no thread of the block can run. ";
  for (unsigned i = 0; i < g_nthreads; ++i) {
    const Fiber* f = g_pool[i].get();
    if (f->state == FState::Done) exited.push_back(i);
    if (f->state == FState::AtBlockBarrier) at_bar.push_back(i);
  }
  if (!at_bar.empty())
    msg += "Threads " + ranges(at_bar) + " wait at __syncthreads (" + site_str(g_pool[at_bar[0]]->site) + "). ";
  if (!exited.empty()) msg += "Threads " + ranges(exited) + " have exited. ";
  unsigned shown = 0;
  for (unsigned i = 0; i < g_nthreads && shown < 4; ++i) {
    const Fiber* f = g_pool[i].get();
    if (f->state != FState::AtWarpOp) continue;
    std::vector<unsigned> same;
    for (unsigned k = f->ts.warp * 32; k < g_nthreads && k < f->ts.warp * 32 + 32; ++k)
      if (g_pool[k]->state == FState::AtWarpOp && same_site(g_pool[k]->site, f->site) && g_pool[k]->mask == f->mask)
        same.push_back(k);
    if (same.empty() || same[0] != i) continue;
    msg += "Threads " + ranges(same) + " wait at " + f->op + "(mask " + gradsleuth::str_printf("0x%08x", f->mask) +
           ") (" + site_str(f->site) + "). ";
    ++shown;
  }
  if (!at_bar.empty() && !exited.empty())
    msg +=
        "This is a divergent __syncthreads: some threads returned (or branched around it) while others wait; "
        "every thread of the block must reach every __syncthreads.";
  else
    msg +=
        "A warp operation waits for lanes named in its mask that exited or wait elsewhere; every lane in the "
        "mask must call the same warp operation.";
  return msg;
}

void abandon_block() {  // fibers stopped mid-kernel get a fresh context before reuse
  for (unsigned i = 0; i < g_nthreads; ++i)
    if (g_pool[i]->state != FState::Done) g_pool[i]->abandoned = true;
}

bool run_block(const uint3& bidx, std::string* error) {
  detail::g_block_idx = bidx;
#if GS_EMU_TSAN
  g_tsan_sync.reset(new char[1 + (g_nthreads + 31) / 32]);
#endif
  g_ready.clear();
  g_ready_head = 0;
  g_bar_arrived = 0;
  for (unsigned i = 0; i < g_nthreads; ++i) {
    Fiber* f = g_pool[i].get();
    if (!f->ctx || f->abandoned) {
#if GS_EMU_ASAN
      ASAN_UNPOISON_MEMORY_REGION(f->stack_lo, f->stack_size);
#endif
      f->ctx = bctx::make_fcontext(f->stack_lo + f->stack_size, f->stack_size, &fiber_main);
      f->abandoned = false;
    }
#if GS_EMU_TSAN
    f->tsan = __tsan_create_fiber(0);
#endif
    f->ts.linear = i;
    f->ts.thread_idx = uint3{i % detail::g_block_dim.x, (i / detail::g_block_dim.x) % detail::g_block_dim.y,
                             i / (detail::g_block_dim.x * detail::g_block_dim.y)};
    f->ts.lane = i % 32;
    f->ts.warp = i / 32;
    make_ready(i);
  }
  unsigned done = 0;
  const bool random = g_sched.mode == Schedule::Random;
  bool ok = true;
  while (ok) {
    if (g_ready_head == g_ready.size()) {
      if (done == g_nthreads) break;
      *error = describe_deadlock();
      ok = false;
      break;
    }
    if (random) {
      const size_t span = g_ready.size() - g_ready_head;
      const size_t pick = g_ready_head + static_cast<size_t>(next_random() % span);
      std::swap(g_ready[pick], g_ready[g_ready_head]);
    }
    Fiber* f = g_pool[g_ready[g_ready_head++]].get();
    if (g_ready_head > 4096 && g_ready_head * 2 > g_ready.size()) {
      g_ready.erase(g_ready.begin(), g_ready.begin() + static_cast<std::ptrdiff_t>(g_ready_head));
      g_ready_head = 0;
    }
    resume(f);
    if (!g_fault.empty()) {
      *error = g_fault;
      ok = false;
      break;
    }
    switch (f->state) {
      case FState::Done: ++done; break;
      case FState::AtBlockBarrier:
        if (++g_bar_arrived == g_nthreads) release_block_barrier();
        if (!g_fault.empty()) {
          *error = g_fault;
          ok = false;
        }
        break;
      case FState::AtWarpOp: try_release_warp(f); break;
      default: break;
    }
  }
  if (!ok) abandon_block();
#if GS_EMU_TSAN
  for (unsigned i = 0; i < g_nthreads; ++i) {
    __tsan_destroy_fiber(g_pool[i]->tsan);
    g_pool[i]->tsan = nullptr;
  }
#endif
  return ok;
}

}  // namespace

void set_schedule(Schedule mode, uint64_t seed) {
  g_sched.init = true;
  g_sched.mode = mode;
  g_sched.seed = seed;
  g_sched.rng = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
}
Schedule schedule() {
  init_schedule();
  return g_sched.mode;
}
uint64_t schedule_seed() {
  init_schedule();
  return g_sched.seed;
}

namespace detail {

int block_barrier(int pred, const std::source_location& loc) {
  Fiber* f = g_running;
  if (!f) {
    std::fprintf(stderr, "gs_emu: __syncthreads called outside a kernel (%s)\n", site_str(loc).c_str());
    std::abort();
  }
  f->state = FState::AtBlockBarrier;
  f->site = loc;
  f->pred = pred;
#if GS_EMU_TSAN
  __tsan_release(&g_tsan_sync[0]);
#endif
  switch_to_scheduler(f);
#if GS_EMU_TSAN
  __tsan_acquire(&g_tsan_sync[0]);
#endif
  return f->bar_result;
}

uint64_t warp_exchange(unsigned mask, uint64_t value, int src_lane, unsigned* ballot, const char* op,
                       const std::source_location& loc) {
  Fiber* f = g_running;
  if (!f) {
    std::fprintf(stderr, "gs_emu: %s called outside a kernel (%s)\n", op, site_str(loc).c_str());
    std::abort();
  }
  f->state = FState::AtWarpOp;
  f->site = loc;
  f->op = op;
  f->mask = mask;
  f->value = value;
  f->src = src_lane;
#if GS_EMU_TSAN
  __tsan_release(&g_tsan_sync[1 + f->ts.warp]);
#endif
  switch_to_scheduler(f);
#if GS_EMU_TSAN
  __tsan_acquire(&g_tsan_sync[1 + f->ts.warp]);
#endif
  if (ballot) *ballot = f->ballot;
  return f->result;
}

unsigned warp_present_mask() { return g_running ? present_mask(g_running->ts.warp) : 0xffffffffu; }

void trap(const std::source_location& loc) {
  Fiber* f = g_running;
  if (!f) {
    std::fprintf(stderr, "gs_emu: __trap() outside a kernel (%s)\n", site_str(loc).c_str());
    std::abort();
  }
  g_fault = "__trap() in thread " + std::to_string(f->ts.linear) + " at " + site_str(loc);
  f->state = FState::Trapped;
  switch_to_scheduler(f);
  std::abort();  // never resumed
}

}  // namespace detail

namespace internal {

bool run_grid(dim3 grid, dim3 block, void (*body)(void*), void* closure, std::string* error) {
  init_schedule();
  g_nthreads = block.x * block.y * block.z;
  ensure_pool(g_nthreads);
  detail::g_block_dim = block;
  detail::g_grid_dim = grid;
  g_body = body;
  g_closure = closure;
  g_fault.clear();
#if GS_EMU_TSAN
  if (!g_tsan_main) g_tsan_main = __tsan_get_current_fiber();
  __tsan_release(&g_tsan_launch_begin);
#endif
  const uint64_t nblocks = static_cast<uint64_t>(grid.x) * grid.y * grid.z;
  std::vector<uint32_t> order;
  if (g_sched.mode == Schedule::Random && nblocks > 1 && nblocks <= (1u << 16)) {
    order.resize(nblocks);
    for (uint32_t i = 0; i < nblocks; ++i) order[i] = i;
    for (size_t i = nblocks - 1; i > 0; --i) std::swap(order[i], order[next_random() % (i + 1)]);
  }
  bool ok = true;
  for (uint64_t k = 0; k < nblocks && ok; ++k) {
    const uint64_t b = order.empty() ? k : order[k];
    const uint3 bidx{static_cast<unsigned>(b % grid.x), static_cast<unsigned>((b / grid.x) % grid.y),
                     static_cast<unsigned>(b / (static_cast<uint64_t>(grid.x) * grid.y))};
    internal::check_block_begin(b);
    const bool block_ok = run_block(bidx, error);
#if GS_EMU_TSAN
    // Blocks have separate shared memory on a GPU: order block b+1 after block b for TSan so reused
    // static __shared__ arrays are not reported (races between blocks are a documented blind spot).
    __tsan_acquire(&g_tsan_launch_end);
#endif
    if (!block_ok) {
      *error = "block (" + std::to_string(bidx.x) + "," + std::to_string(bidx.y) + "," + std::to_string(bidx.z) +
               "): " + *error;
      ok = false;
    }
    ++g_stats.blocks;
    g_stats.threads += g_nthreads;
  }
  detail::g_current = nullptr;
  g_body = nullptr;
  g_closure = nullptr;
  return ok;
}

}  // namespace internal
}  // namespace gs_emu
