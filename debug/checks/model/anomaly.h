// Numerics checks that listen to every op through the op observer:
//   W4  AnomalyMode: the first op (forward or backward) that produced NaN/Inf
//       from finite inputs, with its module, shapes, dtype and a value summary;
//   M12 find_nonfinite_source: the first module whose output turned non-finite;
//   M19 BroadcastDetector: elementwise ops whose operands were both expanded;
//   M18 check_half_precision: the forward again in float16 (or bfloat16, or under
//       autocast), to find the module that overflows;
//   M20 inplace_finding: the engine's in-place error as a finding.
//
//   debug::AnomalyMode anomaly;
//   anomaly.attach(*model);                  // optional: names modules
//   { auto on = anomaly.enable(); loss = loss_fn(model(x), y); loss.backward(); }
//   for (auto& f : anomaly.findings()) std::cout << f.str();
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/observer.h"
#include "debug/checks/hooks.h"
#include "debug/evidence/finding.h"

namespace gradsleuth::debug {

// Turns an observer on for a scope (RAII around add_observer/remove_observer).
using Scope = ObserverGuard;

// ---- W4 ---------------------------------------------------------------------------
struct AnomalyOptions {
  bool forward = true;   // check every op's result
  bool backward = true;  // check every gradient a backward node produces
  bool raise = false;    // throw gs::Error at the first anomaly (like torch's detect_anomaly)
  size_t max_findings = 8;
};

class AnomalyMode : public OpObserver {
 public:
  explicit AnomalyMode(AnomalyOptions o = {}) : o_(o) {}
  // Names the module an op ran in (adds tracking hooks to every module), in
  // the forward and, by tagging the graph each module built, in the backward.
  void attach(nn::Module& model);
  void detach() {
    tracker_.detach();
    tags_.clear();
    inputs_.clear();
  }
  // Observes the ops of this thread (or, with AllThreads, of every thread) while the returned guard
  // lives: a model training on another thread is not this one's.
  [[nodiscard]] std::unique_ptr<Scope> enable(ObserverScope scope = ObserverScope::ThisThread) {
    return std::make_unique<Scope>(this, scope);
  }

  const std::vector<Finding>& findings() const { return findings_; }
  bool found() const { return !findings_.empty(); }
  void clear() {
    findings_.clear();
    tainted_.clear();
  }

  void on_op(const OpEvent& e) override;
  void on_backward(const BackwardEvent& e) override;

 private:
  void report(Finding f);
  AnomalyOptions o_;
  ModuleTracker tracker_;
  std::vector<Finding> findings_;
  std::unordered_set<const Storage*> tainted_;  // storages an observed op left non-finite
  HookSet tags_;                                // post-hooks that label each module's backward nodes
  std::vector<const Node*> inputs_;             // the grad_fn of each running module's input
};

// ---- M12 ---------------------------------------------------------------------------
// Runs `model(x)` with hooks on every module and returns an error finding naming
// the first module (in execution order) whose output holds NaN/Inf although its
// input was finite (with W4's op-level detail when an op inside it is to blame),
// or nothing when the forward stays finite.
std::vector<Finding> find_nonfinite_source(nn::Module& model, const Tensor& x);

// ---- M19 ---------------------------------------------------------------------------
enum class BroadcastMode { Off, Warn, Raise };

class BroadcastDetector : public OpObserver {
 public:
  explicit BroadcastDetector(BroadcastMode mode = BroadcastMode::Warn) : mode_(mode) {
    GS_CHECK(mode == BroadcastMode::Off || mode == BroadcastMode::Warn || mode == BroadcastMode::Raise,
             "BroadcastDetector", "mode value ", static_cast<int>(mode),
             " is not a BroadcastMode; pass BroadcastMode::Off, Warn or Raise");
  }
  void attach(nn::Module& model) { tracker_.attach(model); }
  void detach() { tracker_.detach(); }
  // Observes the ops of this thread (or, with AllThreads, of every thread) while the returned guard lives.
  [[nodiscard]] std::unique_ptr<Scope> enable(ObserverScope scope = ObserverScope::ThisThread) {
    return std::make_unique<Scope>(this, scope);
  }
  void set_mode(BroadcastMode m) { mode_ = m; }
  const std::vector<Finding>& findings() const { return findings_; }
  void clear() { findings_.clear(); }
  void on_op(const OpEvent& e) override;
  unsigned events() const override { return kOps; }  // the forward's ops: a backward's are not the model's code

 private:
  BroadcastMode mode_;
  ModuleTracker tracker_;
  std::vector<Finding> findings_;
};

// The loss half of M19 (and D6's words): a loss whose prediction and target
// shapes differ, so that an elementwise loss would broadcast them.
std::optional<Finding> loss_shape_finding(const std::string& loss_name, const Tensor& input, const Tensor& target);

// ---- M18 ---------------------------------------------------------------------------
// Rounds a float to the nearest IEEE binary16 value (round half to even):
// +-inf from 65520 on (the midpoint above the largest half, 65504); below the
// normal range the step is 2^-24, so values up to 2^-25 become 0 and those
// between 2^-25 and 2^-24 round to 2^-24.
float round_to_half(float v);

// While enabled, every floating op's result is rounded to half precision in
// place: the forward computes in emulated fp16 (with each op's internal
// arithmetic in fp32, like fp16 tensor cores that accumulate in fp32).
class HalfPrecisionEmulation : public OpObserver {
 public:
  void on_op(const OpEvent& e) override;
};

struct HalfPrecisionOptions {
  // The 16-bit run: the model's parameters and the input in `dtype` with every op running in it (the
  // engine's 16-bit kernels), or, with `autocast`, the model as it is under gs::autocast(dtype).
  DType dtype = kFloat16;
  bool autocast = false;
  // Round each float32 op's result to float16 instead (HalfPrecisionEmulation). Also used, for
  // float16, when the model cannot run in the real dtype (an op that refuses it).
  bool emulate = false;
  double max_relative_loss_gap = 0.05;  // |loss_half - loss_fp32| / |loss_fp32| above this warns
  // ... and only when the gap is at least this large in absolute terms: a loss near 0 (a model
  // that fits its batch) differs by a large fraction of itself from its half-precision value
  // (5.96e-09 against 0) with no precision that matters lost.
  double min_absolute_loss_gap = 1e-3;
};

// M18: the same forward (and loss, when given) in float32 and in 16 bits (HalfPrecisionOptions:
// float16 by default, in the real dtype). Error when the 16-bit forward turns NaN/Inf, naming the
// first module whose output did; warning when the losses differ by more than the option. The
// model's parameters are converted for the runs and restored afterwards, exactly; x may be float32
// or in the parameters' dtype.
using LossOf = std::function<Tensor(const Tensor& output)>;
std::vector<Finding> check_half_precision(nn::Module& model, const Tensor& x, const LossOf& loss = nullptr,
                                          const HalfPrecisionOptions& o = {});

// ---- M20 ---------------------------------------------------------------------------
// The engine raises when an in-place op changed a tensor saved for backward
// (core/autograd.h, SavedTensor); its message names the tensor, the op that
// saved it, the in-place op and both versions. This turns such an error into a
// finding (nullopt for any other error).
std::optional<Finding> inplace_finding(const std::exception& e);

}  // namespace gradsleuth::debug
