// The list of op observers (see observer.h).
#include "core/observer.h"

#include "core/autograd.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace gradsleuth {
namespace detail {
std::atomic<int> g_observer_count{0};
namespace {
struct Entry {
  OpObserver* o;
  bool this_thread_only;
  std::thread::id thread;
  unsigned events;  // OpObserver::events() when it was attached
};
std::vector<Entry>& observers() {
  static std::vector<Entry> v;
  return v;
}
std::mutex g_mu;
// Ops that an observer runs itself (a check that sums a tensor) are not
// reported: that would recurse, and they are not the model's ops.
thread_local int t_notifying = 0;
struct Notifying {
  Notifying() { ++t_notifying; }
  ~Notifying() { --t_notifying; }
};
}  // namespace

// Each thread keeps its own copy of the list and takes a new one under the lock only when the
// list changed (the generation moved): a notification reads one atomic, not a mutex. An observer
// may detach itself from inside its callback (the copy is not changed while it is walked:
// notifications from inside a callback return at once); another thread may attach or detach
// meanwhile.
std::atomic<uint64_t> g_generation{1};
// Each thread's walks over its copy, for remove_observer: the count is odd while the thread walks
// (calls callbacks), even otherwise. remove_observer waits, for every other thread caught
// walking, until that walk ends: a walk that starts later reads the new generation and the list
// without the observer (both sides' accesses are sequentially consistent). Shared pointers, so
// that a thread that exits while a remover waits on its count leaves the count alive.
std::mutex g_walks_mu;
std::vector<std::shared_ptr<std::atomic<uint64_t>>>& walk_counts() {
  static std::vector<std::shared_ptr<std::atomic<uint64_t>>> v;
  return v;
}
struct WalkCount {
  std::shared_ptr<std::atomic<uint64_t>> n = std::make_shared<std::atomic<uint64_t>>(0);
  WalkCount() {
    std::lock_guard<std::mutex> lock(g_walks_mu);
    walk_counts().push_back(n);
  }
  ~WalkCount() {
    std::lock_guard<std::mutex> lock(g_walks_mu);
    auto& v = walk_counts();
    v.erase(std::remove(v.begin(), v.end(), n), v.end());
  }
};
thread_local WalkCount t_walks;
struct Walking {
  std::atomic<uint64_t>& n;
  explicit Walking(std::atomic<uint64_t>& count) : n(count) { n.fetch_add(1, std::memory_order_seq_cst); }
  ~Walking() { n.fetch_add(1, std::memory_order_release); }
};
// Returns once no thread but this one is inside a walk that began before the call.
void wait_for_walks() {
  std::vector<std::pair<std::shared_ptr<std::atomic<uint64_t>>, uint64_t>> walking;
  {
    std::lock_guard<std::mutex> lock(g_walks_mu);
    for (const auto& n : walk_counts()) {
      if (n == t_walks.n) continue;
      const uint64_t seen = n->load(std::memory_order_seq_cst);
      if (seen % 2 == 1) walking.emplace_back(n, seen);
    }
  }
  for (const auto& [n, seen] : walking)
    while (n->load(std::memory_order_acquire) == seen) std::this_thread::yield();
}
// How many attached observers listen to each kind of event (bit i of OpObserver::Events).
std::atomic<int> g_listening[3] = {0, 0, 0};
thread_local uint64_t t_generation = 0;
thread_local std::vector<std::pair<OpObserver*, unsigned>> t_observers;

template <class F>
void each_observer(unsigned kind, F&& f) {
  if (t_notifying) return;
  const int bit = kind == OpObserver::kOps ? 0 : kind == OpObserver::kBackwardOps ? 1 : 2;
  if (g_listening[bit].load(std::memory_order_relaxed) == 0) return;
  Notifying n;
  Walking walk(*t_walks.n);
  if (g_generation.load(std::memory_order_seq_cst) != t_generation) {
    const std::thread::id me = std::this_thread::get_id();
    std::lock_guard<std::mutex> lock(g_mu);
    t_observers.clear();
    for (const Entry& e : observers())
      if (!e.this_thread_only || e.thread == me) t_observers.emplace_back(e.o, e.events);
    t_generation = g_generation.load(std::memory_order_relaxed);
  }
  for (const auto& [o, events] : t_observers)
    if (events & kind) f(o);
}

unsigned op_kind() { return autograd::in_backward() ? OpObserver::kBackwardOps : OpObserver::kOps; }

void notify_op(const OpEvent& e) {
  each_observer(op_kind(), [&](OpObserver* o) { o->on_op(e); });
}
void notify_op_refs(const char* op, const TensorRef* inputs, size_t n, const Tensor& out, uint32_t expanded_mask,
                    bool inplace) {
  const Tensor* small[8];
  std::vector<const Tensor*> large;
  const Tensor** ptrs = small;
  if (n > 8) {
    large.resize(n);
    ptrs = large.data();
  }
  for (size_t i = 0; i < n; ++i) ptrs[i] = inputs[i].t;
  notify_op(OpEvent{op, ptrs, n, &out, expanded_mask, inplace});
}
void notify_op_begin(const char* op) {
  each_observer(op_kind(), [&](OpObserver* o) { o->on_op_begin(op); });
}
void notify_backward(const BackwardEvent& e) {
  each_observer(OpObserver::kBackwardNodes, [&](OpObserver* o) { o->on_backward(e); });
}
}  // namespace detail

void notify_op(const char* op, const tensor_list& inputs, const Tensor& out, uint32_t expanded_mask, bool inplace) {
  if (!observers_active()) return;
  std::vector<TensorRef> refs(inputs.begin(), inputs.end());
  detail::notify_op_refs(op, refs.data(), refs.size(), out, expanded_mask, inplace);
}

void add_observer(OpObserver* o, ObserverScope scope) {
  std::lock_guard<std::mutex> lock(detail::g_mu);
  const unsigned events = o->events();
  detail::observers().push_back({o, scope == ObserverScope::ThisThread, std::this_thread::get_id(), events});
  detail::g_observer_count.store(static_cast<int>(detail::observers().size()));
  for (int bit = 0; bit < 3; ++bit)
    if (events & (1u << bit)) detail::g_listening[bit].fetch_add(1);
  detail::g_generation.fetch_add(1, std::memory_order_release);
}

void remove_observer(OpObserver* o) {
  {
    std::lock_guard<std::mutex> lock(detail::g_mu);
    auto& v = detail::observers();
    for (const detail::Entry& e : v)
      if (e.o == o)
        for (int bit = 0; bit < 3; ++bit)
          if (e.events & (1u << bit)) detail::g_listening[bit].fetch_sub(1);
    v.erase(std::remove_if(v.begin(), v.end(), [o](const detail::Entry& e) { return e.o == o; }), v.end());
    detail::g_observer_count.store(static_cast<int>(v.size()));
    detail::g_generation.fetch_add(1, std::memory_order_seq_cst);
  }
  // The observer may be destroyed when this returns: wait for the other threads' callbacks in
  // progress. Not from inside a callback (two threads detaching from their callbacks would wait
  // for each other): there the observer must outlive the other threads' notifications.
  if (!detail::t_notifying) detail::wait_for_walks();
}

}  // namespace gradsleuth
