// The warning channel (see warning.h).
#include "core/warning.h"

#include <cstdio>
#include <mutex>
#include <set>
#include <utility>

namespace gradsleuth {

namespace {
std::mutex g_mu;
WarningHandler& handler() {
  static WarningHandler h;
  return h;
}
// This thread's own handler (WarningScope::ThisThread): no lock, no other thread reads it.
thread_local WarningHandler t_handler;
}  // namespace

namespace {
// The names of the checks the core library itself warns for, as in the debug
// module's catalogue (debug/evidence/catalogue.cpp), so the printout names the check by id
// and name; core does not depend on debug.
std::string check_label(const std::string& id) {
  if (id == "O5") return "O5 forgotten zero_grad";
  if (id == "M2") return "M2 train/eval mode";
  return id;
}
}  // namespace

void print_warning_once(const Warning& w) {
  static std::set<std::pair<std::string, std::string>> seen;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!seen.insert({w.check, w.where}).second) return;
  }
  // "gradsleuth: warning [O5 forgotten zero_grad] Adam: ..."
  const std::string label = check_label(w.check);
  std::fprintf(stderr, "gradsleuth: warning%s%s%s %s: %s\n", w.check.empty() ? "" : " [", label.c_str(),
               w.check.empty() ? "" : "]", w.where.c_str(), w.message.c_str());
}

void warn(const Warning& w) {
  if (t_handler) {
    t_handler(w);
    return;
  }
  WarningHandler h;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    h = handler();
  }
  if (h)
    h(w);
  else
    print_warning_once(w);
}

WarningHandler set_warning_handler(WarningHandler h, WarningScope scope) {
  if (scope == WarningScope::ThisThread) {
    WarningHandler prev = std::move(t_handler);
    t_handler = std::move(h);
    return prev;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  WarningHandler prev = std::move(handler());
  handler() = std::move(h);
  return prev;
}

}  // namespace gradsleuth
