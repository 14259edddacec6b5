// Checks over a whole training run that the monitor (W3) feeds step by step:
//   M25 AllZeroTracker  a layer output, a weight or a gradient that is entirely zero at every
//                       sampled step of the run, or that was nonzero and then entirely zero at a
//                       later sampled step (a collapse mid-run);
//   M26 VarianceTracker a layer output whose variance collapses towards zero or blows up over the
//                       run, against its variance at the first sampled step;
//   M27 GradientSpreadTracker  a weight whose gradient entries are all (nearly) one value at each
//                       of the first steps: its units were initialised symmetric (its home is
//                       architecture.cpp, with M27's part at initialisation).
// W10's StepTimer uses RunCheckOptions too: it lives in checks/workflow/step_timer.h.
//
//   debug::AllZeroTracker zero;
//   zero.attach(*model);  zero.set_active(true);   // hooks on the leaf modules' outputs
//   ... on a sampled step, after backward: zero.record_parameters(*model);
//   for (auto& f : zero.findings()) std::cout << f.str();
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "debug/checks/hooks.h"
#include "debug/evidence/finding.h"
#include "nn/module.h"

namespace gradsleuth::debug {

struct RunCheckOptions {
  // ---- M9 during training ----
  // At the first step, a weight the latest nn::load wrote whose values now have a correlation below
  // redrawn_correlation (in size) with the loaded ones was drawn again; every loaded weight (2 or
  // more) drawn again warns, some of them is info (a new head). Averaged or fine-tuned weights still
  // follow the loaded ones (correlation near 1); a fresh draw does not (near 0).
  double redrawn_correlation = 0.3;
  // ---- M17 during training ----
  // A BatchNorm layer whose training forwards normalise batches of fewer than batchnorm_min_batch
  // examples in more than half of them warns: its statistics come from a handful of examples (two
  // examples normalise to +-1 whatever they hold), and its running statistics drift from the data's.
  // Group Normalization (Wu and He) measures BatchNorm's error rising from batches of 8 down to 2.
  int64_t batchnorm_min_batch = 4;
  // A BatchNorm whose momentum (the weight of the newest batch in its running statistics, as in
  // PyTorch) is above batchnorm_max_momentum keeps statistics of its last few batches only: Keras's
  // momentum is the weight of the old statistics, so its 0.99 is 0.01 here. 0.99 with a last batch
  // of 2 examples: 50.6% validation accuracy against 97.5% at 0.1.
  double batchnorm_max_momentum = 0.5;
  // ---- M25 ----
  int64_t all_zero_min_samples = 2;  // judge a tensor only after this many sampled steps saw it
  // ---- M26 ----
  // A layer output whose variance (the median of its last 3 sampled steps) fell below
  // variance_collapse x, or rose above variance_growth x, its variance at the first sampled
  // step, judged from variance_min_records samples on.
  double variance_collapse = 1e-4;
  double variance_growth = 1e4;
  // Growth is judged from max(first, variance_floor): on the healthy corpus a binary head's
  // logits go from 0.003-0.007 to 38-98 (x1.8e4 from its first value, x98 from the floor).
  double variance_floor = 1.0;
  int64_t variance_min_records = 5;
  // Absolute limits you set for your model (0: off): a sampled layer output whose variance is
  // above variance_max, or below variance_min, is reported at the first step it crossed. The
  // relative rule above needs no knowledge of the model; these catch a layer that starts wrong.
  double variance_max = 0.0;
  double variance_min = 0.0;
  // ---- W10 ----
  // A step whose wall time is above stall_factor x the median step, and above
  // stall_min_seconds, stalled; judged once stall_min_steps steps were timed. A step longer
  // than stall_max_seconds stalled whatever the median (and however few steps were timed).
  double stall_factor = 10.0;
  double stall_min_seconds = 2.0;
  int64_t stall_min_steps = 5;
  double stall_max_seconds = 300.0;
  // A watchdog thread looks, while training runs, for a step that has not returned: after
  // watchdog_seconds without an optimizer step it reports at once, through on_stall (default: a
  // line on stderr), and the finding is kept for the report. 0: no watchdog.
  double watchdog_seconds = 300.0;
  std::function<void(const std::string&)> on_stall;
  // ---- M27 (the gradient part) ----
  // Over the first spread_steps optimizer steps, each trainable weight's gradient (2 or more
  // dimensions, 4 units (rows) or more, spread_min_values values or more): the spread between the
  // 5th and 95th percentiles of each entry's difference from its column's mean over the units,
  // over the gradient's root mean square. Below spread_relative at every one of those steps
  // warns: the units get copies of one gradient, they are symmetric.
  int64_t spread_steps = 10;
  double spread_relative = 1e-3;
  int64_t spread_min_values = 16;
};

// M25. ReLU outputs are left to M7 (dead units), which says more about them.
class AllZeroTracker {
 public:
  explicit AllZeroTracker(RunCheckOptions o = {}) : o_(o) {}
  // A post hook on every leaf module except ReLU (its output), and on each with a weight of 2 or more
  // dimensions (its floating input: a layer fed zeros at every call, a recurrent state never carried).
  void attach(nn::Module& model);
  void detach() { hooks_.clear(); }
  void set_active(bool on) { active_ = on; }
  void set_step(int64_t step) { step_ = step; }  // the step the next records belong to (from 1)
  // On a sampled step, after backward: each trainable weight's value (parameters of 2 or more
  // dimensions: a bias may rightly start at zero) and each trainable parameter's gradient (a
  // parameter with no gradient is M5's and O1's, not counted here); `gradients` false: the values only
  // (a step whose gradients are all zero because its loss was 0, RunContext::flat_step).
  void record_parameters(const nn::Module& model, bool gradients = true);
  // `skip`: parameters whose zero gradient is by construction (a bias before BatchNorm).
  std::vector<Finding> findings(const std::vector<std::string>& skip = {}) const;

 private:
  struct Seen {
    std::string name;
    int64_t samples = 0;
    bool nonzero = false;       // nonzero at some sampled step so far
    int64_t collapsed_at = -1;  // the first step it was entirely zero after being nonzero
    int64_t zero_after = 0;     // sampled steps entirely zero from collapsed_at on
    int64_t samples_after = 0;  // sampled steps from collapsed_at on
    int64_t last_step = -1;     // the step of the last sample (an output seen twice in a step counts once)
    bool last_zero = false;     // that sample was entirely zero
  };
  void see(Seen& s, const Tensor& t) const;
  RunCheckOptions o_;
  HookSet hooks_;
  bool active_ = false;
  int64_t step_ = -1;                 // -1: no set_step(), every record is a sampled step of its own
  std::vector<Seen> outputs_;         // per leaf module
  std::vector<Seen> inputs_;          // per leaf module with a weight, its input
  std::vector<Seen> values_, grads_;  // per parameter, by name
};

// M26. Every leaf module's output (training forwards only, while active), except an output that
// is the input's own values unchanged (a view of it: Flatten, a reshape).
class VarianceTracker {
 public:
  explicit VarianceTracker(RunCheckOptions o = {}) : o_(o) {}
  void attach(nn::Module& model);
  void detach() { hooks_.clear(); }
  void set_active(bool on) { active_ = on; }
  void set_step(int64_t step) { step_ = step; }
  std::vector<Finding> findings() const;

 private:
  struct Layer {
    std::string name;
    std::vector<std::pair<int64_t, double>> variance;  // (step, variance of the output)
    const Storage* in_storage = nullptr;               // the input's storage and version before the forward
    uint64_t in_version = 0;
  };
  RunCheckOptions o_;
  HookSet hooks_;
  bool active_ = false;
  int64_t step_ = 1;
  std::vector<Layer> layers_;
};

// M27, its gradient part (SageMaker Debugger's poor_weight_initialization: the 5th-95th
// percentile spread of the gradients in the first steps). Weights initialised to one value (a
// constant, or one row copied) make the units of a layer compute the same thing and get the same
// gradient, and gradient descent keeps them identical: the layer works as one unit. Each unit's
// gradient row (the weight's first dim) minus the mean row over the units is then zero, so the
// 5th-95th percentile spread of those differences is ~0 next to the gradient's size. The monitor
// records the first RunCheckOptions::spread_steps steps (after backward, before the update). A
// weight whose spread is above the limit at one step is ruled out and not measured again; each
// measurement reads the gradient in place and selects the percentiles from at most 2048 entries.
class GradientSpreadTracker {
 public:
  explicit GradientSpreadTracker(RunCheckOptions o = {}) : o_(o) {}
  bool wants(int64_t step) const { return step >= 1 && step <= o_.spread_steps; }
  void record(const nn::Module& model, int64_t step);
  std::vector<Finding> findings() const;

 private:
  struct Seen {
    std::string name, shape;
    int64_t steps = 0;               // steps judged (a finite, nonzero gradient), until one rules it out
    double max_relative = 0.0;       // the largest (p95 - p5) / rms over those steps
    double spread = 0.0, rms = 0.0;  // at that step
    int64_t units = 0;
  };
  RunCheckOptions o_;
  std::vector<Seen> seen_;  // per weight, by name
  // Weights whose every value is one nonzero constant at the first step (before any update): their
  // units start identical whatever their biases (0 is M25's).
  struct Constant {
    std::string name, shape;
    double value = 0.0;
    int64_t units = 0;
  };
  std::vector<Constant> constant_;
};

}  // namespace gradsleuth::debug
