// M28, the range watch of reduced precision: per module and sampled step, the share of its 16-bit
// activations and gradients outside float16/bfloat16's normal range, and the share of a 16-bit
// parameter's updates that round away (docs/checks.md, M28).
//
//   debug::RangeWatch watch;
//   watch.attach(*model);          // module forward hooks, parameter gradient hooks, optimizer hooks
//   watch.attach(optimizer);       // the vanishing updates of 16-bit parameters
//   ... train (autocast, or 16-bit parameters) ...
//   report.add(watch.findings());
//
// debug::Monitor and debug::Session run it on their sampled steps. Nothing is measured for a
// module that runs in float32 or float64: a run with nothing 16-bit has no M28 finding at all.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "debug/checks/hooks.h"
#include "debug/evidence/finding.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace gradsleuth::debug {

// Counts of values against a 16-bit dtype's range.
struct RangeCounts {
  int64_t values = 0;     // all values seen
  int64_t nonzero = 0;    // values != 0 (finite or not)
  int64_t zero = 0;       // |x| below the dtype's smallest subnormal: zero in the dtype (exact zeros included)
  int64_t subnormal = 0;  // nonzero and below the dtype's smallest normal
  int64_t edge = 0;       // in the lowest three octaves above zero: [smallest subnormal, 8 x it)
  int64_t overflow = 0;   // inf/NaN or above the dtype's largest finite value
  // Counts per power of two: exponent e = floor(log2 |x|) clamped to [-40, 20]; index e + 40.
  std::array<int64_t, 61> exponents{};
  void add(float v, DType dt);
  // The share of the nonzero values flushed to zero or in the lowest three octaves above zero (an
  // estimate of the share the rounding flushed: see docs/checks.md, M28); 1 when every value is
  // zero; 0 when nothing was seen. M28 judges gradients on it.
  double lost_share() const;
  // The share of the nonzero values out of the range: above it (or non-finite), flushed, or in the
  // lowest three octaves; 1 when every value is zero; 0 when nothing was seen.
  double out_of_range_share() const;
  void merge(const RangeCounts& o);
};

// One module's measures over the sampled steps.
struct RangeModuleStats {
  std::string module;      // path ("fc1"; "(model)" for the root)
  std::string label;       // "fc1 (Linear)"
  DType dtype = kFloat32;  // the 16-bit dtype it ran in (its output's, or its parameters')
  RangeCounts activations, output_grads, param_grads;
  int64_t update_elems = 0;  // 16-bit parameter elements with a nonzero gradient on sampled updates
  int64_t vanished = 0;      // ... whose value did not change in the update
  int64_t worst_grad_step = -1, worst_update_step = -1;
  double worst_grad_share = 0.0;  // the largest lost_share() of its parameter gradients at one sampled step
  std::vector<std::pair<int64_t, double>> step_share;  // per sampled step: out_of_range_share() of all its values
};

class RangeWatch {
 public:
  RangeWatch() = default;
  ~RangeWatch() { detach(); }
  RangeWatch(const RangeWatch&) = delete;
  RangeWatch& operator=(const RangeWatch&) = delete;

  void attach(nn::Module& model);
  void attach(
      optim::Optimizer& optimizer);  // after attach(model); the optimizer must outlive the watch (or detach() first)
  void detach();
  // Measure the next forwards/backwards/updates (true) or not (false); `step` (1-based) goes into findings.
  void set_active(bool on) { active_ = on; }
  // The optimizer keeps float32 master weights (optim::Optimizer::set_master_weights): an update too
  // small to move a 16-bit parameter is kept in its float32 copy, so no update is counted as vanished.
  void set_master_weights(bool on) { masters_ = on; }
  void set_step(int64_t step) { step_ = step; }
  // Around an optimizer update, when no optimizer was attached (a Monitor calls these).
  void before_update();
  void after_update();

  const std::vector<RangeModuleStats>& modules() const { return stats_; }
  // The series of the run's HTML report: per 16-bit module, its step_share; the exponent histograms.
  void series(std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>>& share,
              std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>>& exponents,
              std::string& dtype, int64_t& zeros) const;
  // Warnings: a module whose 16-bit parameter gradients have more than 10% of their nonzero values
  // below the dtype's normal range, or are all zero (GradientUnderflow), a 16-bit parameter whose updates round away in
  // more than half of its elements (UpdatesVanish); otherwise one info finding (RangeSummary). Empty when nothing
  // 16-bit was seen.
  std::vector<Finding> findings() const;

 private:
  struct ParamRef {
    Tensor p;
    size_t module = 0;
    size_t hook = 0;
    std::string name;
    std::vector<float> before;        // the values before the update (sampled steps, 16-bit parameters)
    std::vector<uint8_t> moved;       // the gradient was nonzero
    int64_t elems = 0, vanished = 0;  // over the sampled updates
  };
  size_t module_of(const std::string& path);
  HookSet hooks_;
  std::vector<RangeModuleStats> stats_;
  std::vector<bool> seen16_;  // the module ran in 16 bits (output or parameters)
  std::vector<ParamRef> params_;
  std::vector<RangeCounts> step_grads_;  // this step's parameter gradients per module
  std::vector<RangeCounts> step_all_;    // this step's values of every kind per module
  optim::Optimizer* opt_ = nullptr;
  std::vector<size_t> opt_hooks_;
  bool active_ = true;
  bool masters_ = false;
  int64_t step_ = -1;
};

}  // namespace gradsleuth::debug
