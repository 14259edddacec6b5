// Detection by behaviour, not by type (docs/checks.md, "Behavioural probes"):
// a user's hand-written layer must be seen by the checks as well as nn::Dropout
// or nn::BatchNorm1d are, so what a module *does* is measured instead of asking
// what C++ type it has.
//
//   ModeProbe probe_mode_dependence(model, x)   which modules behave differently in
//       train() and eval(): random in train mode (dropout-like), or deterministic
//       but different (BatchNorm-like); and for the random ones, whether the mean
//       train-mode output matches the eval-mode output (M2: a dropout that does not
//       rescale by 1/(1-p) is a finding).
//   set_mode_without_randomness(model, training, probe)   the mode the checks that
//       need a deterministic model (M6, M14-M16, L4, L6) train or evaluate in.
//   custom_op_modules(model, x)   modules whose forward records a backward of its
//       own (gs::record under a name no engine op uses): M13 checks each of them,
//       with or without parameters.
//   check_input_gradient(model, x)   M13's whole-model check: the directional
//       derivative of the model along a random input direction against autograd.
//
//   auto probe = debug::probe_mode_dependence(*model, batch.x);
//   report.add(probe.findings());                       // M2: train/eval scale mismatch
//   debug::ModeSnapshot modes(*model);
//   debug::set_mode_without_randomness(*model, true, probe);
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "debug/checks/model/gradcheck.h"
#include "debug/checks/model/model_checks.h"
#include "debug/evidence/finding.h"
#include "nn/module.h"

namespace gradsleuth::debug {

// Every module's training flag, put back in pre-order on destruction (a parent's
// train() would otherwise overwrite a child that was in another mode).
class ModeSnapshot {
 public:
  explicit ModeSnapshot(nn::Module& model);
  ~ModeSnapshot();
  ModeSnapshot(const ModeSnapshot&) = delete;
  ModeSnapshot& operator=(const ModeSnapshot&) = delete;

 private:
  std::vector<std::pair<nn::ModulePtr, bool>> modes_;
};

// Sets `m`'s own training flag, leaving its children's as they are.
void set_own_mode(nn::Module& m, bool training);

// The leaf modules one forward of `sample` calls, ordered by each one's last call (a ReLU module used
// after every layer sits at its last use), in eval mode without gradients, the model's buffers and modes
// put back; registration order (leaf_modules) where `sample` is undefined or the forward fails.
std::vector<std::pair<std::string, nn::ModulePtr>> leaves_by_last_call(nn::Module& model, const Tensor& sample);

struct ModeProbeOptions {
  int64_t rows = 16;        // the probe runs on the first rows of x
  double tolerance = 1e-6;  // outputs differ when max|a - b| > tolerance * (max|b| + tolerance)
  // The mean train-mode output of a random module is estimated from repeated draws
  // on the same input: at least min_draws, and more (up to max_draws) until
  // draws x output elements reaches target_samples.
  int64_t min_draws = 8, max_draws = 256, target_samples = 20000;
  // E[train(x)] = s * eval(x) with |s - 1| beyond this (and beyond 4 standard
  // errors of the estimate) is an M2 finding.
  double scale_tolerance = 0.1;
};

// What the probe measured for one module (only modules whose output depends on
// the mode, or is random in both modes, are listed).
struct ModuleBehaviour {
  std::string path, label;  // "2", "2 (MyDropout)"
  nn::ModulePtr module;
  bool stochastic = false;       // two train-mode calls on the same input differ
  bool mode_dependent = false;   // train mode differs from eval mode (randomly or not)
  bool eval_stochastic = false;  // random in eval mode too: eval() cannot switch it off
  bool updates_buffers = false;  // a train-mode call changes its buffers (running statistics)
  // Stochastic modules: the least-squares s in mean_k train_k(x) ~ s * eval(x), its
  // standard error over the draws, and how many draws were made.
  double scale = 1.0, scale_se = 0.0;
  int64_t draws = 0;
  bool occludes = false;  // a draw zeroes patches of its input's planes (Cutout): an augmentation
};

struct ModeProbe {
  std::vector<ModuleBehaviour> modules;
  // Modules whose randomness model.eval() switches off (stochastic, not eval_stochastic).
  std::vector<nn::ModulePtr> stochastic_modules() const;
  bool any_deterministic_mode_dependent() const;  // BatchNorm-like
  bool any_running_statistics() const;            // mode-dependent, deterministic, buffers move in training
  const ModuleBehaviour* find(const nn::Module* m) const;
  // M2: random modules whose mean train-mode output is not their eval-mode output.
  std::vector<Finding> findings(const ModeProbeOptions& o = {}) const;
};

// Runs one eval-mode forward of the first o.rows rows of x to capture every
// module's input, then calls each module (once per distinct module) on that input
// in eval mode and with only its own flag in train mode (its children stay in
// eval), several times. The default generator, every buffer, every mode and
// every .grad are restored, and library warnings are muted: the probe changes
// nothing. A module that throws on its captured input is skipped.
ModeProbe probe_mode_dependence(nn::Module& model, const Tensor& x, const ModeProbeOptions& o = {});

// model.train(training), then every random module the probe found in eval mode:
// the randomness is off, a BatchNorm-like layer keeps the mode asked for. Restore
// the modes with a ModeSnapshot taken before.
void set_mode_without_randomness(nn::Module& model, bool training, const ModeProbe& probe);

// ---- M2 at the end of a run: the eval path against the training path ---------------------------
// The trained model scored on the same training rows in eval mode and in training mode with its
// randomness off (a dropout off, a BatchNorm-like layer on its batch statistics): losses, and
// accuracies where the targets are classes (NaN otherwise).
struct ModeAgreement {
  double eval_loss = std::nan(""), train_loss = std::nan("");
  double eval_accuracy = std::nan(""), train_accuracy = std::nan("");
  int64_t examples = 0;
  // A layer that keeps running statistics (BatchNorm-like: different in training mode, and its buffers
  // move there): its eval path reads averages that few steps or small batches leave far from the batch's
  // own, so only the accuracy gap judges.
  bool running_statistics = false;
};
// A warning (kind eval-path-differs) where the eval-mode accuracy is below the training mode's by
// more than o.mode_accuracy_gap, or below it at all with the eval-mode loss above
// o.mode_loss_ratio_with_accuracy x the training mode's plus 0.1 (no running statistics in the
// model); without accuracies, the eval-mode
// loss above o.mode_loss_ratio x the training mode's plus 0.1: the model computes something else in
// eval mode (a hand-written normaliser's eval branch, a branch taken only at inference, a dropout mask
// drawn once). Empty otherwise.
std::vector<Finding> check_mode_agreement(const ModeAgreement& m, const ModelCheckOptions& o = {});

// ---- M2: two eval-mode calls on one input --------------------------------------------------------
// The model in eval mode called twice on x, each time from the same state of the default random
// generator: outputs that differ come from state the model keeps between calls (kind
// state-between-calls: a warning where `shuffled` is 1, the training loader shuffling its rows, so
// each batch starts from an unrelated batch's state; info otherwise). Outputs that differ only when
// the generator moves on between the calls are a draw at evaluation (kind random-at-eval, a warning; info
// where every draw of the forward is scaled by a spread it computed per example and no dropout runs: a
// model that samples from a distribution it computes, z = mu + sigma * eps).
// Modes and buffers are put back; state kept in plain members is not. Empty when the calls agree.
std::vector<Finding> check_repeat_calls(nn::Module& model, const Tensor& x, int shuffled);
// Whether a report (the gate's) already holds check_repeat_calls' finding: the end of a run asks again
// only where the gate did not see it (a recurrent state that an untrained model forgets within a few
// steps is seen once the model has trained).
bool repeat_calls_reported(const Report& gate);

// ---- M13 on custom ops ------------------------------------------------------------------
// The modules whose forward records a backward node that no engine op made (a
// gs::record / custom function written by the user), each named by the innermost
// module that ran it, with or without parameters. Runs one forward of the first
// `rows` rows of x in eval mode with recording on (the model is left as it was).
// An op reports itself before its node exists, so nodes are told apart by name:
// an engine node carries its op's name (the registry's, or one reported during
// this forward, or one of the few internal names); any other name is the user's.
// A user op named exactly like an engine op ("mul") is not seen here: the
// whole-model check below is the backstop.
std::vector<std::pair<std::string, nn::ModulePtr>> custom_op_modules(nn::Module& model, const Tensor& x,
                                                                     int64_t rows = 4);

// M13's whole-model check, cheap: in float64 (the model is converted and put back,
// as gradcheck_module does) and eval mode, on the first `rows` rows of x moved by a
// small random jitter (0.1 x their std: real inputs hold ties, e.g. max-pool
// windows of equal background pixels, where no derivative exists), the autograd
// input gradient of sum(v * model(x)) for a random v, dotted with `directions`
// random directions u, against the central difference along u (step
// min(opts.eps, 1e-7)). An error finding names the model when at least two
// directions fail (one when only one is asked for); empty when it agrees, or
// when x is not floating. First, two eval-mode calls on the same input (check_repeat_calls):
// outputs that differ are not judged; a draw at evaluation is M2's warning (kind random-at-eval),
// returned instead. Defined in gradcheck_layers.cpp, M13's home.
std::vector<Finding> check_input_gradient(nn::Module& model, const Tensor& x, int64_t rows = 4, int directions = 3,
                                          GradcheckOptions opts = {});

}  // namespace gradsleuth::debug
