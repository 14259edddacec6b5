// The list of op observers (see observer.h).
#include "core/observer.h"

#include <algorithm>
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

// A copy of the list taken under the lock (another thread may attach or detach
// meanwhile, and an observer may detach itself from inside its callback), on the
// stack for the usual handful of observers: no allocation per op.
template <class F>
void each_observer(F&& f) {
  if (t_notifying) return;
  Notifying n;
  const std::thread::id me = std::this_thread::get_id();
  OpObserver* small[8];
  std::vector<OpObserver*> large;
  size_t k = 0;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (const Entry& e : observers()) {
      if (e.this_thread_only && e.thread != me) continue;
      if (k < 8) small[k++] = e.o;
      else large.push_back(e.o);
    }
  }
  for (size_t i = 0; i < k; ++i) f(small[i]);
  for (OpObserver* o : large) f(o);
}

void notify_op(const OpEvent& e) {
  each_observer([&](OpObserver* o) { o->on_op(e); });
}
void notify_op_begin(const char* op) {
  each_observer([&](OpObserver* o) { o->on_op_begin(op); });
}
void notify_backward(const BackwardEvent& e) {
  each_observer([&](OpObserver* o) { o->on_backward(e); });
}
}  // namespace detail

void add_observer(OpObserver* o, ObserverScope scope) {
  std::lock_guard<std::mutex> lock(detail::g_mu);
  detail::observers().push_back({o, scope == ObserverScope::ThisThread, std::this_thread::get_id()});
  detail::g_observer_count.store(static_cast<int>(detail::observers().size()));
}

void remove_observer(OpObserver* o) {
  std::lock_guard<std::mutex> lock(detail::g_mu);
  auto& v = detail::observers();
  v.erase(std::remove_if(v.begin(), v.end(), [o](const detail::Entry& e) { return e.o == o; }), v.end());
  detail::g_observer_count.store(static_cast<int>(v.size()));
}

}  // namespace gradsleuth
