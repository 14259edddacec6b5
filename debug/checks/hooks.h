// Attaching to a model without changing it: a set of forward hooks removed
// together, and the ModuleTracker that knows which module an op runs in.
#pragma once
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/generator.h"
#include "core/warning.h"
#include "nn/loss.h"
#include "nn/module.h"

namespace gradsleuth::debug {

namespace detail {
// Seconds this thread has spent inside the debug module's own hooks (the checks' work, not the
// user's step). W10 subtracts it from each step's wall time, so a sampled step on which the
// checks do more work (slow on the CUDA emulator) does not read as a stalled training loop.
double own_seconds();
// Adds the time from construction to destruction to own_seconds(); nested scopes count once.
class OwnTime {
 public:
  OwnTime();
  ~OwnTime();
  OwnTime(const OwnTime&) = delete;
  OwnTime& operator=(const OwnTime&) = delete;

 private:
  bool outer_;
  std::chrono::steady_clock::time_point start_;
};
}  // namespace detail

// Hooks registered through it are removed when it is cleared or destroyed; their time counts as
// the debug module's own (detail::own_seconds).
class HookSet {
 public:
  HookSet() = default;
  ~HookSet() { clear(); }
  HookSet(const HookSet&) = delete;
  HookSet& operator=(const HookSet&) = delete;

  // Each call of a hook is timed as the debug module's own work (two clock reads), unless
  // `timed` is false: for hooks that are O(1) (a stack push) or that return at once when inactive
  // and time their own real work with a detail::OwnTime (the trackers of the sampled steps).
  void pre(const nn::ModulePtr& m, nn::Module::ForwardPreHook h, bool timed = true);
  void post(const nn::ModulePtr& m, nn::Module::ForwardHook h, bool timed = true);
  void loss_pre(const std::shared_ptr<nn::Loss>& l, nn::Loss::LossPreHook h);
  void loss_pre(nn::Loss& l, nn::Loss::LossPreHook h);  // the caller keeps l alive while hooked
  void loss_post(nn::Loss& l, nn::Loss::LossHook h);
  void clear();
  bool empty() const { return handles_.empty(); }

 private:
  struct Handle {
    nn::ModulePtr module;  // keeps the module alive until the hook is removed
    nn::Module* raw = nullptr;
    size_t id = 0;
    bool loss = false;
  };
  std::vector<Handle> handles_;
};

// "3 (Linear)", "(model) (Sequential)": a module path with its type, for findings.
std::string module_label(const std::string& path, const nn::Module& m);
// Every module under `model`: path -> module_label ("" -> "(model) (Net)").
std::map<std::string, std::string> module_labels(const nn::Module& model);
// The label of the module owning parameter `param` ("4.inner.1.weight" -> "4.inner.1 (Linear)"); "" if none.
std::string owner_label(const std::map<std::string, std::string>& labels, const std::string& param);

// A stack of the modules running right now, kept by pre/post hooks on every
// module of a model: current() names the innermost one ("2.inner.0 (ReLU)").
class ModuleTracker {
 public:
  void attach(nn::Module& model);
  void detach() {
    hooks_.clear();
    stack_.clear();
    labels_.clear();
  }
  bool attached() const { return !hooks_.empty(); }
  std::string current() const { return stack_.empty() ? "" : *stack_.back(); }

 private:
  HookSet hooks_;
  std::vector<std::shared_ptr<const std::string>> labels_;  // one per module, owned here
  std::vector<const std::string*> stack_;                   // no string copies on the hot path
};

// A check's own probing run of a model: while it lives, library warnings (M2,
// O5) raised on its thread are muted — they would be about the probe, not the user's code — and on
// destruction the model's buffers (BatchNorm running statistics) and the thread's random stream are
// restored: a probe's dropout draws must not shift the masks the user's run draws next.
class QuietProbe {
 public:
  explicit QuietProbe(nn::Module& model);
  ~QuietProbe();
  QuietProbe(const QuietProbe&) = delete;
  QuietProbe& operator=(const QuietProbe&) = delete;

 private:
  WarningHandlerGuard mute_;
  Generator rng_;                                   // the thread's default generator, put back
  std::vector<std::pair<Tensor, Tensor>> buffers_;  // (live, copy)
};

// The leaf modules of a model in registration order (depth first), with paths.
std::vector<std::pair<std::string, nn::ModulePtr>> leaf_modules(nn::Module& model);

}  // namespace gradsleuth::debug
