// What the training loop writes into the weights between optimizer steps: a max-norm constraint, a
// Lookahead or an average copied back, a reset. The optimizer moves the weights inside its step();
// anything that changes them between one step's end and the next step's start is the loop's own
// write. O6 (debug/checks/optim/learning_rate.cpp) judges the measurement.
//
// Every step costs one read of each weight's version counter (the engine bumps it on every in-place
// write). From the first write the loop makes to a weight, that weight is followed: a copy after each
// step, compared with the weight at the next step's start, and the writes summed.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "debug/checks/optim/optim_checks.h"
#include "debug/evidence/finding.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace gradsleuth::debug {

class WeightWriteTracker {
 public:
  WeightWriteTracker() = default;
  ~WeightWriteTracker() { detach(); }
  WeightWriteTracker(const WeightWriteTracker&) = delete;
  WeightWriteTracker& operator=(const WeightWriteTracker&) = delete;

  // Hooks the optimizer's step: attach before any hook that probes the model inside a step. At most
  // `follow_max_elements` weight values are followed (three float64 copies each); writes to the
  // weights beyond them are counted, not measured.
  void attach(optim::Optimizer& opt, const nn::Module& model, int64_t follow_max_elements = int64_t{1} << 24);
  // A write after the last step (an average copied back at the end) counts too: call before the
  // model is probed again.
  void finish();
  // After a probe that changed the weights and put them back (debug::Session's replays after the
  // run): their state now is the baseline, so the probe's writes are not counted as the loop's.
  void resync();
  void detach();

  // Over the followed weights together (one vector of every weight the loop wrote twice or more).
  struct Summary {
    int64_t steps = 0;            // optimizer steps seen
    int64_t written_steps = 0;    // gaps between steps in which the loop wrote some weight
    int64_t measured_writes = 0;  // writes measured (followed weights, summed over them)
    int64_t followed = 0;         // weights followed
    // The optimizer's movement of the followed weights since they were first written (their change
    // minus the loop's writes) and the writes' sum: the share of that movement the writes took back,
    // -<writes, moved> / |moved|^2, and |writes| / |moved|. NaN when nothing was measured.
    double undone = std::numeric_limits<double>::quiet_NaN();
    double write_ratio = std::numeric_limits<double>::quiet_NaN();
    double cosine = std::numeric_limits<double>::quiet_NaN();  // <writes, moved> / (|writes| |moved|)
    std::string most_written;                                  // the followed weight with the most writes
    bool after_last_step = false;  // a write after the last step (finish() saw it): weights loaded at the end
    // That write left every weight's sampled values as the last step made them (a restore of the last
    // epoch, a snapshot that shared storage with the weights); false when none or the values changed.
    bool after_last_step_same = false;
  };
  Summary summary() const;

 private:
  struct Param {
    std::string name;
    Tensor tensor;  // shares state with the model's parameter
    uint64_t version_after = 0;
    bool stepped = false;  // a step ended since attach
    int64_t written = 0;   // gaps with a write to this weight
    bool follow = false;
    Tensor start, after, writes;  // float64 copies, from the first write on
    Tensor sample_index, sample;  // up to 64 evenly spaced values, as the last step left them
    int64_t measured = 0;
  };
  void pre_step();
  void post_step();
  void compare(Param& q);

  optim::Optimizer* opt_ = nullptr;
  std::vector<size_t> hooks_;
  std::vector<Param> params_;
  int64_t steps_ = 0, written_steps_ = 0;
  bool after_last_step_ = false;
  bool after_last_step_same_ = false;
  int64_t follow_budget_ = 0;  // weight values that may still be followed
};

// O6's rule on what the tracker measured (OptimCheckOptions::writes_*): an info finding whenever the
// loop wrote the weights, a warning when the writes take back most of the optimizer's movement
// (weights-rewritten) or add a second update along it (weights-updated-twice).
std::vector<Finding> judge_weight_writes(const WeightWriteTracker::Summary& s, const OptimCheckOptions& o);

// O6 on a run whose weights changed by `relative_change` (|end - start| / |start| over every
// parameter) over `training_losses` losses while the optimizer the Session watches took
// `optimizer_steps` steps: none, with the weights moving, warns (kind updated-outside-optimizer).
std::vector<Finding> judge_updates_without_steps(int64_t optimizer_steps, int64_t training_losses,
                                                 double relative_change, const OptimCheckOptions& o);

}  // namespace gradsleuth::debug
