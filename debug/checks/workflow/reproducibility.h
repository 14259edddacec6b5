// W1, reproducibility: a run repeated from one seed must give the same losses, gradients and
// weights, bit for bit; step fingerprints name the first step and parameter that part.
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "debug/checks/hooks.h"
#include "debug/evidence/finding.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace gradsleuth::debug {

// ---- W1 -----------------------------------------------------------------------------
// Runs `run(seed)` twice; the two loss sequences must be identical (bit for
// bit). An error names the first differing step and both values.
std::vector<Finding> check_reproducible(const std::function<std::vector<double>(uint64_t seed)>& run,
                                        uint64_t seed = 1);
// W1 step by step: per optimizer step and parameter, a fingerprint of three moments of the step,
// each an FNV-1a hash of the tensor's bytes (equal hashes: bit-identical) and its float64 sum (to
// show): the weight as the step's first training forward saw it, its gradient when the optimizer
// stepped, and the weight after the update.
struct StepFingerprint {
  uint64_t before = 0, grad = 0, after = 0;  // 0: not seen (no gradient, no forward)
  double before_sum = 0.0, grad_sum = 0.0, after_sum = 0.0;
};
struct StepFingerprints {
  std::vector<std::string> names;                   // the parameters, in the model's order
  std::vector<std::vector<StepFingerprint>> steps;  // [step][parameter]
};
// Records them while it lives: a forward pre-hook on the model and the optimizer's step hooks.
// Construct it after the model and optimizer of a rerun, before its first step; the model and
// optimizer must outlive it. A read of every parameter (and gradient) three times a step: for the
// short runs of W1, not for training.
class StepRecorder {
 public:
  StepRecorder(nn::Module& model, optim::Optimizer& optimizer);
  ~StepRecorder();
  StepRecorder(const StepRecorder&) = delete;
  StepRecorder& operator=(const StepRecorder&) = delete;
  const StepFingerprints& fingerprints() const { return fp_; }

 private:
  std::vector<StepFingerprint>& current();
  nn::Module& model_;
  optim::Optimizer& opt_;
  HookSet hooks_;
  std::vector<size_t> opt_hooks_;
  StepFingerprints fp_;
  bool open_ = false;  // a step began (its first training forward) and has not been stepped
};

// What a run returns to compare more than its losses: the step losses and the trained model.
struct ReproRun {
  std::vector<double> losses;
  nn::ModulePtr model;  // its final parameters are compared by name, bit for bit (null: losses only)
  // Filled from a StepRecorder (recorder.fingerprints()): the weights and gradients of every step
  // are compared too, and an error names the first step, parameter and moment where the runs part.
  StepFingerprints steps;
};
// The same on runs that return their model: the losses must be identical, and so must every
// final parameter. An error names the first parameter that differs and the largest difference
// (also when the losses agree: a parameter the loss never depended on, left unseeded). With step
// fingerprints, the first step and parameter whose weight (before the forward), gradient or
// updated weight differ are named too, against the first step whose loss differs.
std::vector<Finding> check_reproducible(const std::function<ReproRun(uint64_t seed)>& run, uint64_t seed = 1);

}  // namespace gradsleuth::debug
