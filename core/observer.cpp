// The list of op observers (see observer.h).
#include "core/observer.h"

#include <algorithm>
#include <mutex>
#include <vector>

namespace gradsleuth {
namespace detail {
std::atomic<int> g_observer_count{0};
namespace {
std::vector<OpObserver*>& observers() {
  static std::vector<OpObserver*> v;
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

// A copy of the list (an observer may detach itself from inside its callback),
// on the stack for the usual handful of observers: no allocation per op.
template <class F>
void each_observer(F&& f) {
  if (t_notifying) return;
  Notifying n;
  const std::vector<OpObserver*>& v = observers();
  if (v.size() <= 8) {
    OpObserver* list[8];
    const size_t k = v.size();
    std::copy(v.begin(), v.end(), list);
    for (size_t i = 0; i < k; ++i) f(list[i]);
    return;
  }
  const std::vector<OpObserver*> list = v;
  for (OpObserver* o : list) f(o);
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

void add_observer(OpObserver* o) {
  std::lock_guard<std::mutex> lock(detail::g_mu);
  detail::observers().push_back(o);
  detail::g_observer_count.store(static_cast<int>(detail::observers().size()));
}

void remove_observer(OpObserver* o) {
  std::lock_guard<std::mutex> lock(detail::g_mu);
  auto& v = detail::observers();
  v.erase(std::remove(v.begin(), v.end(), o), v.end());
  detail::g_observer_count.store(static_cast<int>(v.size()));
}

}  // namespace gradsleuth
