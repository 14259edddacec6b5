// Warnings: the quiet channel for problems that are not errors — a step taken
// without zero_grad(), a Dropout still in training mode under no_grad. The
// library calls warn(); by default each distinct (check, where) pair is printed
// once on stderr. The debug module installs its own handler to turn warnings
// into findings (debug/evidence/finding.h), so detection works during normal use.
//
//   gs::warn({"O5", "Adam", "step() ran twice without zero_grad() ..."});
#pragma once
#include <functional>
#include <string>

namespace gradsleuth {

struct Warning {
  std::string
      check;  // the id of the debug check this belongs to ("O5", "M2"; docs/checks.md), or "" for a general warning
  std::string where;    // what raised it: "Adam", "Dropout(p=0.5)", a module path
  std::string message;  // what happened, why it matters, and the fix
};

using WarningHandler = std::function<void(const Warning&)>;

// Reports a warning to the current handler.
void warn(const Warning& w);

// Which warnings a handler receives: those of every thread (the process-wide handler), or only
// those raised on the thread that installed it (two models training side by side on two threads,
// each with its own debug::Monitor). A thread's own handler comes first; without one, the
// process-wide handler; without that, print_warning_once.
enum class WarningScope { AllThreads, ThisThread };

// Replaces the handler of `scope` (an empty function restores the default) and returns the
// previous one, so a caller can chain to it or put it back.
WarningHandler set_warning_handler(WarningHandler handler, WarningScope scope = WarningScope::AllThreads);

// The default: prints "gradsleuth: warning [O5 forgotten zero_grad] Adam: ..." to stderr, once per
// (check, where) for the life of the process.
void print_warning_once(const Warning& w);

// RAII: installs a handler for the guard's lifetime, then restores the previous one.
class WarningHandlerGuard {
 public:
  explicit WarningHandlerGuard(WarningHandler h, WarningScope scope = WarningScope::AllThreads)
      : scope_(scope), prev_(set_warning_handler(std::move(h), scope)) {}
  ~WarningHandlerGuard() { set_warning_handler(std::move(prev_), scope_); }
  WarningHandlerGuard(const WarningHandlerGuard&) = delete;
  WarningHandlerGuard& operator=(const WarningHandlerGuard&) = delete;

 private:
  WarningScope scope_;
  WarningHandler prev_;
};

}  // namespace gradsleuth

namespace gs = gradsleuth;
