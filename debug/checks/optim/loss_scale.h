// O10, the loss scaler (optim::GradScaler): its scale at every update, each skipped step with the
// parameters whose gradient was inf/NaN, and the findings on that trace (docs/checks.md, O10).
//
//   optim::GradScaler scaler;
//   debug::ScalerTrace trace;
//   trace.attach(scaler, model.get());          // names the parameters by their path in the model
//   for (...) { scaler.scale(loss).backward(); scaler.step(opt); scaler.update(); }
//   report.add(trace.findings());
//
// debug::Session::watch(scaler) and debug::Monitor::watch(scaler) do the same. Clipping applied to
// still-scaled gradients is raised by the scaler itself (a core warning with check O10, which a
// Monitor turns into a finding).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "debug/evidence/finding.h"
#include "nn/module.h"
#include "optim/grad_scaler.h"

namespace gradsleuth::debug {

// One update() of the scaler.
struct ScalerRecord {
  int64_t update = 0;  // 1-based
  int64_t step = -1;   // the training step it belongs to, when a Monitor knows it (-1: not known)
  double scale_before = 0.0, scale_after = 0.0;
  bool backoff = false;                // an inf/NaN gradient: the step was skipped and the scale backed off
  std::vector<std::string> nonfinite;  // the parameters whose gradient was inf/NaN (model paths when known)
};

class ScalerTrace {
 public:
  ScalerTrace() = default;
  ~ScalerTrace() { detach(); }
  ScalerTrace(const ScalerTrace&) = delete;
  ScalerTrace& operator=(const ScalerTrace&) = delete;

  // Listens to every update() of `scaler` (which must outlive the trace, or detach() first).
  // `model` (optional) names the parameters by their path; `step` (optional) says which training
  // step an update belongs to (a Monitor's).
  void attach(optim::GradScaler& scaler, const nn::Module* model = nullptr, std::function<int64_t()> step = {});
  void detach();
  bool attached() const { return scaler_ != nullptr; }

  const std::vector<ScalerRecord>& records() const { return records_; }
  // (update, scale after it), for plots.
  std::vector<std::pair<int64_t, double>> scale_series() const;
  // Warnings: the scale fell below 1 (ScaleCollapsed), was halved 10 updates in a row or more
  // (ScaleHalving), or more than half the steps after the first backoffs were skipped
  // (StepsSkipped); otherwise one info finding (ScalerSummary). Empty when no update was seen.
  std::vector<Finding> findings() const;

 private:
  std::string name_of(const Tensor& p) const;
  optim::GradScaler* scaler_ = nullptr;
  size_t hook_ = 0;
  std::vector<std::pair<const TensorImpl*, std::string>> names_;
  std::function<int64_t()> step_;
  std::vector<ScalerRecord> records_;
};

}  // namespace gradsleuth::debug
