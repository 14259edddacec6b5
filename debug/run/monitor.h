// The training monitor (W3) and the workflow checks around it:
//   W3 Monitor             attaches to a model, its optimizer and loss (and a
//                          Trainer) and runs the per-step checks every N steps:
//                          O1-O6, M7, M8, M25, M26, L1 (and M27's gradient spread
//                          on the first steps, D5 on every training row), plus what it hears on every step
//                          (O5, M2, M17, M19, L2, L3, L5, M3, D6, W4/M12 when the
//                          loss turns non-finite);
//   W2 pretrain_gate       one call before training: devices, trainable
//                          parameters, forward, backward, non-finite gradients,
//                          overfit-one-batch, initial loss (and more, see below);
//   W5 diagnosis_report    parameters, data, forward, initial loss, gradient
//                          statistics in one report;
//   W1 check_reproducible  two runs with one seed give identical losses.
//
//   optim::Trainer trainer(*model, opt, optim::TrainerOptions().epochs(2));
//   trainer.set_loss([&](const Tensor& out, const Tensor& y) { return loss(out, y); });
//   debug::Monitor monitor(*model, opt, &loss);
//   monitor.attach(trainer);
//   trainer.fit(train_loader, &val_loader);
//   monitor.finish();
//   std::cout << monitor.report().str(false);
//
// With nothing attached the engine pays nothing; with a monitor attached the
// cost is a few hooks per step and the full checks every `every` steps
// (bench/bench_monitor.cpp measures it against a bare training step).
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/warning.h"
#include "debug/checks/model/activation_stats.h"
#include "debug/checks/model/anomaly.h"
#include "debug/checks/model/behaviour.h"
#include "debug/checks/data/data_checks.h"
#include "debug/evidence/finding.h"
#include "debug/checks/hooks.h"
#include "debug/checks/loss/loss_checks.h"
#include "debug/checks/model/model_checks.h"
#include "debug/checks/optim/optim_checks.h"
#include "debug/checks/model/run_checks.h"
#include "debug/checks/workflow/reproducibility.h"
#include "nn/loss.h"
#include "optim/trainer.h"
#include "debug/run/diagnosis_report.h"
#include "debug/run/gate.h"

namespace gradsleuth::debug {

struct MonitorOptions {
  int64_t every = 10;  // the per-step checks (O1, O2/O3 records, O4, O6 ratios, M7, M8) run every N steps
  ActivationOptions activations;
  LossCheckOptions loss;
  OptimCheckOptions optim;
  BroadcastMode broadcast = BroadcastMode::Warn;  // M19 during training
  // W4/M12: when a step's loss or gradients turn non-finite, run that batch again
  // in anomaly mode (before the optimizer step changes the weights) to name the
  // op and module.
  bool localise_nonfinite = true;
  int64_t num_classes = -1;  // for L4 (initial loss ~ log C); -1: the output's last dim
  RunCheckOptions run;       // M25, M26 (all-zero tensors, variance, on the sampled steps) and W10 (stalled steps)
  DataCheckOptions data;     // D5 on every training row (RowRangeTracker; a Session passes DiagnoseOptions::data)
};

// Series for plots (W6).
struct TrainingHistory {
  std::vector<double> step_losses;                              // one per optimizer step
  std::vector<double> epoch_train_loss, epoch_val_loss, epoch_val_accuracy;
  // The training accuracy of each epoch, from the sampled steps' batches as the loss saw them
  // (train mode: dropout on); NaN when no sampled step had class-index targets.
  std::vector<double> epoch_train_accuracy;
  std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>> grad_norms;    // per parameter
  std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>> dead_fraction; // per ReLU layer
  std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>> update_ratio;  // per parameter
  std::vector<double> learning_rates;  // the first group's learning rate at each optimizer step
  // A fingerprint of each training step's input batch (a 64-bit hash of its shape and 64 values
  // spread over it): equal fingerprints on consecutive steps mean the same batch was fed again.
  std::vector<uint64_t> step_inputs;
};

// The model, optimizer and loss are held by reference and must outlive the
// monitor (or call detach() first); a Trainer may come and go.
class Monitor {
 public:
  // `loss` may be null (the loss-input checks are then skipped).
  Monitor(nn::Module& model, optim::Optimizer& optimizer, nn::Loss* loss = nullptr, MonitorOptions o = {});
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // Step losses and epoch summaries come from the Trainer's callbacks (and the
  // dead-unit statistics are gathered per epoch, as a pass through the data).
  void attach(optim::Trainer& trainer);
  // Without a Trainer, report them yourself.
  void record_step(double loss);
  void record_epoch(double train_loss, double val_loss, double val_accuracy = std::numeric_limits<double>::quiet_NaN());

  // The end-of-run diagnoses: L1, L7, O2, O3, O6, M7, M8, M19, M25, M26, W10; with a sample
  // batch also M18 (half precision). Call once, after training. Detaches every
  // hook. (M17 is heard live, when a BatchNorm layer is evaluated.)
  void finish(const Tensor& sample_x = Tensor(), const Tensor& sample_y = Tensor());
  void detach();

  Report& report() { return report_; }
  const Report& report() const { return report_; }
  TrainingHistory history() const;
  int64_t steps() const { return steps_; }

 private:
  bool sampled_step() const;
  // The 1-based step findings belong to: the one running (from its forward to
  // its optimizer step), else the last one completed.
  int64_t step_now() const { return in_step_ ? steps_ + 1 : steps_; }
  void on_pre_step(optim::Optimizer& opt);
  void on_post_step(optim::Optimizer& opt);
  void on_loss_input(nn::Loss& l, const Tensor& input, const Tensor& target);
  void on_loss_value(nn::Loss& l, const Tensor& target, const Tensor& loss);
  void localise(const std::string& why);
  // M2 by behaviour: the forwards since the last optimizer step, judged when the
  // epoch is recorded (an evaluation pass when no backward and no step followed).
  void check_eval_pass();
  void check_training_mode();  // M2: a training step run with mode-dependent layers in eval mode
  void ensure_probe();         // probe_ (which layers depend on the mode), once
  void reset_pass();
  void add(Finding f);
  void add(const std::vector<Finding>& fs);

  nn::Module& model_;
  optim::Optimizer& opt_;
  nn::Loss* loss_;
  MonitorOptions o_;
  Report report_;
  HookSet hooks_;
  std::vector<size_t> opt_hooks_;
  std::unique_ptr<WarningHandlerGuard> warnings_;
  BroadcastDetector broadcast_;
  std::unique_ptr<Scope> broadcast_on_;
  DeadReluTracker dead_;
  SaturationTracker saturation_;
  NormHistory norms_;
  UpdateRatioTracker ratios_;
  AllZeroTracker zero_;  // M25
  VarianceTracker variance_;  // M26
  GradientSpreadTracker spread_;  // M27's gradient part (the first steps)
  RowRangeTracker rows_;          // D5 on every training row
  StepTimer timer_;      // W10
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // the trainer callbacks' weak token
  // State of the current step.
  int64_t steps_ = 0;              // optimizer steps seen
  Tensor last_x_, last_y_;         // the batch of the current step (for W4 re-runs)
  double last_loss_ = 0.0;
  bool loss_seen_this_step_ = false, localised_ = false, first_loss_checked_ = false, structure_checked_ = false;
  bool input_checked_ = false, finished_ = false, attached_ = true, in_step_ = false;
  bool redundant_checked_ = false;  // the redundant-bias probe ran (once, see on_pre_step)
  TrainingHistory history_;
  // The pending pass (forwards no optimizer step has followed yet), for M2.
  std::vector<std::pair<nn::ModulePtr, std::string>> modules_;  // each module once, with its label
  std::vector<char> pass_train_;    // per module: ran in training mode during the pass
  std::vector<char> pass_buffers_;  // per module: its buffers changed during the pass
  std::vector<char> pass_eval_;     // per module: ran in eval mode during the pass
  std::vector<char> buffers_moved_; // per module: its buffers ever changed (M17 for layers of the user's own)
  std::vector<char> m17_named_;     // per module: M17 already reported
  std::vector<uint64_t> buffer_versions_;  // per module: the buffers' version sum before its forward
  int64_t pass_forwards_ = 0;
  bool pass_backward_ = false, pass_grad_mode_ = false, probing_ = false;
  Tensor pass_x_;                     // the pass's first input, to probe the model with
  std::optional<ModeProbe> probe_;    // which modules depend on the mode (run once, when first needed)
  std::vector<std::string> m2_warned_;  // where the layers' own M2 warnings came from
  bool eval_in_training_warned_ = false;
  int64_t acc_correct_ = 0, acc_seen_ = 0;  // this epoch's sampled training batches
};

}  // namespace gradsleuth::debug
