// Activation statistics gathered through forward hooks while a model trains:
//   M7 DeadReluTracker    per ReLU layer, the fraction of units never active
//                         (over a batch and over a pass through the data), and
//                         whether they died at initialisation or during training;
//   M8 SaturationTracker  per sigmoid/tanh layer, the fraction of pre-activations
//                         beyond +-5, where the gradient is ~0.
//
//   debug::DeadReluTracker dead;
//   dead.attach(*model);             // hooks on every nn::ReLU
//   dead.begin_pass();  ... train or evaluate ...  dead.end_pass();
//   for (auto& f : dead.findings()) std::cout << f.str();
//
// A unit is one feature of a (B, D) activation, or one channel of (B, C, H, W);
// it is dead over some inputs when it is <= 0 for every one of them.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "debug/checks/hooks.h"
#include "debug/evidence/finding.h"
#include "nn/data.h"

namespace gradsleuth::debug {

struct ActivationOptions {
  double dead_fraction =
      0.7;  // M7: a layer with >= this fraction of dead units is flagged (published detectors' level)
  double saturation_threshold = 5.0;  // M8: |pre-activation| beyond this is saturated
  double saturated_fraction = 0.5;    // M8: a layer above this fraction is flagged
  // M8: stacked sigmoid/tanh layers whose mean derivatives multiply to less than this shrink
  // the gradient reaching the input by that factor (vanishing gradients by depth).
  // On the healthy corpus a 4-layer sigmoid stack at Xavier initialisation (Adam) multiplies to
  // 7.3e-4-7.7e-4 (0.18 per layer) and trains to 92%; a 10-layer one (SGD) to ~4e-8 and does not
  // train. The limit sits 70x below the healthy stack: 7 sigmoid layers at 0.18 each reach it.
  double attenuation = 1e-5;
};

struct DeadLayerStats {
  std::string module;  // "2 (ReLU)"
  int64_t units = 0;
  double init_dead = std::numeric_limits<double>::quiet_NaN();   // the first batch seen (at initialisation)
  double batch_dead = std::numeric_limits<double>::quiet_NaN();  // the last batch seen
  double pass_dead = std::numeric_limits<double>::quiet_NaN();   // the last completed pass
  int64_t first_flagged_step = -1;                  // the first recorded step whose batch reached the threshold
  int64_t pass_batches = 0;                         // batches behind pass_dead (a monitor records every N-th step's)
  int64_t pass_batches_seen = 0;                    // (the pass being gathered)
  std::vector<std::pair<int64_t, double>> history;  // (step, batch dead fraction)
};

class DeadReluTracker {
 public:
  explicit DeadReluTracker(ActivationOptions o = {}) : o_(o) {}
  void attach(nn::Module& model);
  void detach() { hooks_.clear(); }
  // Only batches seen while active are recorded (a monitor samples every N steps).
  void set_active(bool on) { active_ = on; }
  void set_step(int64_t step) { step_ = step; }
  // Off: the first batch is not taken as the initialisation (a pass over the
  // data with a trained model says nothing about when units died).
  void set_track_initialisation(bool on) { track_init_ = on; }
  // The dead fraction another tracker saw at initialisation for `module` (a monitor's first step), for a pass
  // over the data with the trained model to say when its units died.
  void set_initial_dead(const std::string& module, double dead) {
    for (DeadLayerStats& s : layers_)
      if (s.module == module) s.init_dead = dead;
  }
  // Units never active over all batches recorded between the two calls (a
  // monitor records every N-th training batch: the pass is then a sample of the
  // epoch; dead_relu_pass() runs every batch of a loader).
  void begin_pass();
  void end_pass();
  const std::vector<DeadLayerStats>& layers() const { return layers_; }
  // A warning per layer at or above the dead fraction (the pass figure when a
  // pass was completed, else the last batch), saying when the units died.
  std::vector<Finding> findings() const;

 private:
  void record(size_t layer, const Tensor& y);
  ActivationOptions o_;
  HookSet hooks_;
  std::vector<DeadLayerStats> layers_;
  std::vector<std::vector<bool>> alive_in_pass_;
  bool active_ = true, in_pass_ = false, track_init_ = true;
  int64_t step_ = -1;
};

// M7 over a whole dataset: runs (up to max_batches of) the loader through the
// model in eval mode without gradients and reports the layers whose units are
// never active. `at_init`: each layer's dead fraction at initialisation where the run's monitor saw it
// (module -> fraction), so a layer flagged here is said to have died in training or to be dead since then.
std::vector<Finding> dead_relu_pass(nn::Module& model, const nn::DataLoader& loader, int64_t max_batches = -1,
                                    ActivationOptions o = {}, const std::map<std::string, double>& at_init = {});
// An M7 warning about units that died during training (not at initialisation).
bool died_in_training(const Finding& f);
// The same pass's figures for every ReLU layer (flagged or not): pass_dead is each layer's dead
// fraction over the pass.
std::vector<DeadLayerStats> dead_relu_stats(nn::Module& model, const nn::DataLoader& loader, int64_t max_batches = -1,
                                            ActivationOptions o = {});

struct SaturationLayerStats {
  std::string module, type;  // "3 (Sigmoid)", "Sigmoid"
  double last = std::numeric_limits<double>::quiet_NaN();
  double mean = 0.0;             // over the recorded batches
  double mean_derivative = 0.0;  // the activation's derivative at its inputs, mean over units and batches
  int64_t batches = 0;
  int64_t order = -1;                               // when it first ran, among the tracker's layers (the chain's order)
  std::vector<std::pair<int64_t, double>> history;  // (step, saturated fraction)
};

class SaturationTracker {
 public:
  explicit SaturationTracker(ActivationOptions o = {}) : o_(o) {}
  void attach(nn::Module& model);  // hooks on every nn::Sigmoid and nn::Tanh
  void detach() { hooks_.clear(); }
  void set_active(bool on) { active_ = on; }
  void set_step(int64_t step) { step_ = step; }
  const std::vector<SaturationLayerStats>& layers() const { return layers_; }
  // A warning per layer whose mean fraction exceeds the option, and one for the whole stack
  // when the product of the layers' mean derivatives is below ActivationOptions::attenuation
  // (the layers are taken as a chain, in the order they first ran).
  std::vector<Finding> findings() const;

 private:
  ActivationOptions o_;
  HookSet hooks_;
  std::vector<SaturationLayerStats> layers_;
  bool active_ = true;
  int64_t step_ = -1;
  int64_t next_order_ = 0;
};

}  // namespace gradsleuth::debug
