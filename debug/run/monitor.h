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
// The monitor knows no check by name: each family registers its run checks
// (debug/checks/run_check.h, checks/<family>/register.cpp), and the monitor asks each
// which events of the run it wants and calls it.
//
// With nothing attached the engine pays nothing; with a monitor attached the
// cost is a few hooks per step and the full checks every `every` steps
// (bench/bench_monitor.cpp measures it against a bare training step).
#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/warning.h"
#include "debug/checks/data/data_checks.h"
#include "debug/checks/hooks.h"
#include "debug/checks/loss/loss_checks.h"
#include "debug/checks/model/activation_stats.h"
#include "debug/checks/model/anomaly.h"
#include "debug/checks/model/behaviour.h"
#include "debug/checks/model/model_checks.h"
#include "debug/checks/model/run_checks.h"
#include "debug/checks/optim/optim_checks.h"
#include "debug/checks/run_check.h"
#include "debug/checks/workflow/reproducibility.h"
#include "debug/evidence/finding.h"
#include "debug/run/diagnosis_report.h"
#include "debug/run/gate.h"
#include "nn/loss.h"
#include "optim/trainer.h"

namespace gradsleuth::debug {

// The model, optimizer and loss are held by reference and must outlive the
// monitor (or call detach() first); a Trainer may come and go. A monitor lives on the thread
// that trains: it takes the library's warnings of that thread (WarningScope::ThisThread), so
// models training side by side on several threads each keep their own.
// The parameter group whose learning rate stands for the run's (TrainingHistory::learning_rates, the
// probes' replayed schedule): the first with a positive rate, else the first. A group held at lr 0
// beside others that train is frozen by design, not the run's schedule.
inline size_t lr_reference_group(const std::vector<double>& lrs) {
  for (size_t i = 0; i < lrs.size(); ++i)
    if (lrs[i] > 0) return i;
  return 0;
}

// W3's "the validation loss rose two epochs in a row" turned into info where a later epoch's validation
// loss came back to the best before the rise (a wobble), and where the loss function itself changed during
// the run (its value on one fixed output and target, `before` and `after`: a ramped consistency weight).
void revise_validation_rose(Report& r, const std::vector<double>& val_losses);
// W3's rise where the loop loaded the best epoch's weights after training (`best_epoch`, counted from 0,
// whose validation loss the final model scores): the epochs after it do not reach the final model, info.
void revise_validation_rose_restored(Report& r, size_t best_epoch, double final_val_loss);
void soften_validation_rose_of_changed_objective(Report& r, double before, double after);

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
  // O10: the loss scaler of the loop (its scale and skipped steps); it must outlive the monitor.
  void watch(optim::GradScaler& scaler);
  // Without a Trainer, report them yourself.
  void record_step(double loss);
  // `measured_val_loss`, `measured_train_loss`: the loss on validation and on training rows measured apart
  // from the loop's report (debug::Session, where the loop gave its own val_loss), NaN otherwise.
  void record_epoch(double train_loss, double val_loss, double val_accuracy = std::numeric_limits<double>::quiet_NaN(),
                    double measured_val_loss = std::numeric_limits<double>::quiet_NaN(),
                    double measured_train_loss = std::numeric_limits<double>::quiet_NaN());

  // The end-of-run diagnoses (each registered check's Finish: L1, L7, O2, O3, O6, M7, M8, M19,
  // M25, M26, M27, D5, D8, W10); with a sample batch also M18 (half precision). Call once, after
  // training. Detaches every hook. (M17 is heard live, when a BatchNorm layer is evaluated.)
  void finish(const Tensor& sample_x = Tensor(), const Tensor& sample_y = Tensor());
  // Before finish(): `replay` reads the history and measures training batches again without an
  // update (TrainingHistory::batch_replay), which L1 and O6 then judge spikes and wild swings by. It
  // runs with the monitor's hooks paused: its forwards are not steps. debug::Session calls it.
  void replay_batches(const std::function<BatchReplay(const TrainingHistory&)>& replay);
  void detach();
  // W3: training stopped on an exception (a Session's loop reports it).
  void training_failed(const std::string& what);

  Report& report() { return report_; }
  const Report& report() const { return report_; }
  TrainingHistory history() const;
  int64_t steps() const { return ctx_.steps; }
  // The ids of the registered run checks, one entry per unit, in the order they are called.
  std::vector<std::string> run_check_ids() const;

  // A pass of the Session's own over a loader (RunContext::own_pass) is running, or no longer.
  void own_pass(bool on) { ctx_.own_pass = on; }
  // Paused for a probe (pause(true)): the model's forwards and the loss's calls are not the run's.
  bool probing() const { return probing_; }

 private:
  void on_pre_step();
  void on_post_step();
  void pause(bool on);
  void add(Finding f);
  void dispatch_pre_step(bool sample);
  // W3 at the end of the run: a rise that did not last is a bump, not a trend.
  void judge_validation_rise_at_end();
  void judge_reported_validation();  // W3: the loop's validation loss against the measured one

  RunContext ctx_;
  Report report_;
  RunCheckList checks_;
  // The units that listen to each event, in registration order (one list per RunEvent bit).
  std::vector<RunCheck*> listeners_[16];
  const std::vector<RunCheck*>& listening(uint32_t event) const;
  HookSet hooks_;
  std::vector<size_t> opt_hooks_;
  size_t scaler_hook_ = 0;  // watch(): the skipped steps, for the non-finite checks
  std::unique_ptr<WarningHandlerGuard> warnings_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // the trainer callbacks' weak token
  bool finished_ = false, attached_ = true, probing_ = false;
  int64_t output_numel_ = -1;  // the elements of the model's output at its last training forward
  TrainingHistory history_;
  size_t lr_group_ = 0;  // the group history_.learning_rates follows (lr_reference_group)
};

namespace monitor_detail {
// W3's reading of the loop's reported validation losses beside the two splits' measured ones: a finding
// when the reported figure is the training rows' loss (evaluate(train_loader) for evaluate(val_loader)).
std::optional<Finding> reported_on_training(const TrainingHistory& h);
}  // namespace monitor_detail

}  // namespace gradsleuth::debug
