// A check that runs during training (a run check): the events a training run has, which of them a
// check listens to, and what the checks share through the run's context. The monitor (W3) asks each
// registered unit which events it wants and calls it; it knows no check by name.
//
//   RunCheckList list;
//   add_model_run_checks(list, options);   // each family registers its units (checks/<family>/register.cpp)
//   for (auto& c : list) if (c->events() & RunEvent::Finish) c->finish(ctx);
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/warning.h"
#include "debug/checks/data/data_checks.h"
#include "debug/checks/loss/loss_checks.h"
#include "debug/checks/model/activation_stats.h"
#include "debug/checks/model/anomaly.h"
#include "debug/checks/model/run_checks.h"
#include "debug/checks/optim/optim_checks.h"
#include "debug/checks/workflow/step_timer.h"
#include "debug/evidence/finding.h"
#include "nn/loss.h"
#include "optim/optimizer.h"

namespace gradsleuth::optim {
class GradScaler;  // optim/grad_scaler.h
}  // namespace gradsleuth::optim

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
  int64_t num_classes = -1;     // for L4 (initial loss ~ log C); -1: the output's last dim
  RunCheckOptions run;          // M25, M26 (all-zero tensors, variance, on the sampled steps) and W10 (stalled steps)
  DataCheckOptions data;        // D5 on every training row (RowRangeTracker; a Session passes DiagnoseOptions::data)
  int64_t loader_batches = -1;  // D8 over the run: the training loader's batches (-1: unknown, D8 does not judge)
  // D4 over the run: the training loader's dataset (the Session's), against which the pairs the loop
  // hands the model and the loss are compared; null: not judged. It must outlive the monitor.
  const nn::Dataset* train_dataset = nullptr;
  // D13 over the run: the validation loader's dataset (the Session's), whose rows the training batches
  // must not be; null: not judged. It must outlive the monitor.
  const nn::Dataset* val_dataset = nullptr;
  // D5 over the run: the fitted Normalizer the Session was given (per feature), against which the
  // training inputs' features are compared; null: not judged. It must outlive the monitor.
  const nn::Normalizer* normalizer = nullptr;
};

// Series for plots (W6).
struct TrainingHistory {
  std::vector<double> step_losses;  // one per optimizer step
  // What debug::Session measured by replaying training batches after the run, without an update:
  // the spikes' batches at the initial weights, and the swing between batches at the trained weights
  // (L1 and O6 judge spikes and wild swings by them).
  BatchReplay batch_replay;
  std::vector<double> epoch_train_loss, epoch_val_loss, epoch_val_accuracy;
  // Where the loop reported each epoch's validation loss itself (Session::epoch(train, val)): the loss
  // on up to 512 rows of the validation loader as debug::Session measured it after that epoch, in eval
  // mode (NaN where not measured). W3 compares the two curves.
  std::vector<double> epoch_val_loss_measured;
  // ... and the loss on up to 512 rows of the training loader's dataset, measured the same way (W3 tells a
  // reported validation loss that is the training rows' own).
  std::vector<double> epoch_train_loss_measured;
  // The training accuracy of each epoch, from the sampled steps' batches as the loss saw them
  // (train mode: dropout on); NaN when no sampled step had class-index targets.
  std::vector<double> epoch_train_accuracy;
  std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>> grad_norms;     // per parameter
  std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>> dead_fraction;  // per ReLU layer
  std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>> update_ratio;   // per parameter
  // M28, per 16-bit layer: the share of its nonzero values (activations, output and parameter
  // gradients) out of its dtype's range (above it, flushed, or in the lowest 3 octaves) at each
  // sampled step.
  std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>> range_share;
  // M28's exponent histograms over every 16-bit layer and sampled step: per kind of value
  // ("activation gradients", ...), (floor(log2 |x|), count); `range_dtype` is their dtype and
  // `range_zeros` the values that were zero in it.
  std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>> range_exponents;
  std::string range_dtype;
  int64_t range_zeros = 0;
  std::vector<double> learning_rates;  // the learning rate at each optimizer step (lr_reference_group's)
  // A fingerprint of each training step's input batch (a 64-bit hash of its shape and 64 values
  // spread over it): equal fingerprints on consecutive steps mean the same batch was fed again.
  std::vector<uint64_t> step_inputs;
  // L6: on each sampled step whose backward reached the loss module's value, what the loop divided
  // that value by before its backward, in units of the terms the loss summed (its rows, elements
  // or counted targets): 1 for a loss summed and divided by the batch size, k for that divided again
  // over k accumulated batches; NaN when the gradient that reached it is no such division.
  std::vector<double> loss_divisors;
  // The gate's premise (it trains and judges loss(model(x), y)) over the run: the training calls of
  // the loss module, and those whose input had as many elements as the output of the model's last
  // training forward. A contrastive loss on a product of two forwards, or a distance between
  // embeddings, takes something else.
  int64_t loss_calls = 0, loss_calls_on_output = 0;
  // The target of the last training call of the loss module (undefined dtype where none was heard): a
  // loss that compares two views' projections takes a float matrix where the loader gives labels.
  std::optional<DType> loss_target_dtype;
  Shape loss_target_shape;
  // O1 over the run: the sampled steps it judged, and each trainable parameter that went without a
  // gradient on some of them, with how many.
  // The loop wrote the weights after its last optimizer step (a checkpoint restored, averaged weights
  // copied back): O6's write tracker saw it at the end of the run.
  bool weights_loaded_after_run = false;
  // ... and that write left the weights as the last step made them (a restore of the last epoch).
  bool weights_loaded_unchanged = false;
  // M23 over the run: the Linear layers whose input's gradient, on a sampled step, held more than the part
  // the layer itself sent back: the training loss read that input another way too (a center or metric
  // loss on an embedding the layer then classifies). Their module labels.
  std::vector<std::string> linear_inputs_read_elsewhere;
  int64_t gradient_judged_steps = 0;
  std::vector<std::pair<std::string, int64_t>> gradient_missing;
  // ... and each parameter whose gradient norm passed the exploding bar on some of them: how many, and
  // the judged steps after the last of them, on which it stayed below the bar.
  struct Exploded {
    std::string name;
    int64_t steps = 0, judged_since = 0;
  };
  std::vector<Exploded> gradient_exploded;
  // O3 on the first step: a penalty on the weights the loop adds around the loss, fitted as the step's
  // gradient = loop_penalty_scale x the loss's + lambda w (loop_penalty.cpp): each weight matrix's
  // name and lambda, where the fit explained the step (empty otherwise).
  std::vector<std::pair<std::string, double>> loop_penalty;
  // M5 over the run: the shapes of tensors requiring grad that the forward made anew at every step (a
  // layer built inside forward()).
  std::vector<std::string> built_in_forward;
  double loop_penalty_scale = std::numeric_limits<double>::quiet_NaN();
};

// The events of a training run; a unit's events() is the set it listens to.
struct RunEvent {
  static constexpr uint32_t Attach = 1u << 0;      // once: hooks on the model, optimizer, loss
  static constexpr uint32_t Forward = 1u << 1;     // every training forward (grad mode on), with its input batch
  static constexpr uint32_t LossInput = 1u << 2;   // the loss module's input and target (training forwards)
  static constexpr uint32_t LossValue = 1u << 3;   // the loss module's value (training forwards)
  static constexpr uint32_t BeforeStep = 1u << 4;  // after backward, before the optimizer's update
  static constexpr uint32_t NonFinite =
      1u << 5;  // a unit saw a NaN/Inf this step (RunContext::flag_nonfinite): localise it now
  static constexpr uint32_t AfterStep = 1u << 6;  // after the optimizer's update
  static constexpr uint32_t Epoch = 1u << 7;      // an epoch was recorded (its losses and validation accuracy)
  static constexpr uint32_t Finish = 1u << 8;     // the end of the run, hooks still attached: the end-of-run findings
  static constexpr uint32_t Series = 1u << 9;     // the unit's series for the history and plots
  static constexpr uint32_t Detach = 1u << 10;    // remove the unit's hooks
  static constexpr uint32_t AfterRun =
      1u << 11;  // after every hook is gone: checks that run the model again (a sample batch)
  static constexpr uint32_t Pause =
      1u << 12;  // the monitor probes the model with forwards that are not training statistics
  static constexpr uint32_t Warning = 1u << 13;  // a core warning (check id, where, message) became a finding: the unit
                                                 // may word it, or hold it (clear its check) and add it later itself
  static constexpr uint32_t Trainer = 1u << 14;  // an optim::Trainer was attached (its epochs are passes over the data)
  static constexpr uint32_t Scaler = 1u << 15;   // an optim::GradScaler is watched (RunContext::scaler)
};

// One epoch as the monitor records it.
struct EpochRecord {
  double train_loss = std::numeric_limits<double>::quiet_NaN();
  double val_loss = std::numeric_limits<double>::quiet_NaN();
  double val_accuracy = std::numeric_limits<double>::quiet_NaN();
};

// What the units share: the run (model, optimizer, loss, options, the step counters, the current
// batch), the report, and the state one check hands to another, each named here.
class RunContext {
 public:
  RunContext(nn::Module& m, optim::Optimizer& o, nn::Loss* l, MonitorOptions opts)
      : model(m),
        optimizer(o),
        loss(l),
        options(std::move(opts)),
        zero_grad_by_construction(options.optim.zero_grad_by_construction) {}
  nn::Module& model;
  optim::Optimizer& optimizer;
  nn::Loss* loss;  // null: the loss-input checks do not run
  MonitorOptions options;
  optim::GradScaler* scaler = nullptr;  // the loss scaler watched (Monitor::watch), if any

  int64_t steps = 0;              // optimizer steps completed
  bool in_step = false;           // a training forward of step steps + 1 has run
  Tensor x, y;                    // the current step's training batch (its last forward's input, the loss's target)
  std::optional<DType> autocast;  // the autocast dtype that forward ran under (none: autocast was off)
  double loss_value = 0.0;        // the current step's loss (LossValue)
  Tensor loss_output;             // the loss module's value, during LossValue only (a unit may hook its gradient)
  bool loss_seen = false;         // LossValue heard this step
  // A sampled step whose gradients are all exactly zero, with a loss of exactly 0 where the loss module
  // was heard (one of the user's own: the library's cross-entropy, NLL, MSE and BCE reach 0 only by
  // saturating): a hinge or margin loss with every example past its margin (a triplet loss) has
  // nothing to learn from this batch. The gradient checks (O1, M25's gradients) do not judge it.
  bool flat_step = false;
  // Training is over and the monitor is paused for a replay before finish() (Monitor::
  // replay_batches): whatever the replay writes to the weights, it puts back.
  bool replaying = false;
  // A pass of debug::Session's own over a loader (its epoch and end measurements), not the loop's: units
  // that compare what the loop feeds the model leave its forwards out.
  bool own_pass = false;
  const TrainingHistory* history = nullptr;  // the monitor's losses, epochs and learning rates

  // Whether step `step` (1-based) is sampled: the first, and every `every`-th.
  static bool sampled_at(int64_t step, int64_t every) { return step == 1 || step % std::max<int64_t>(every, 1) == 0; }
  // The step in progress (steps + 1) is sampled.
  bool sampled() const { return sampled_at(steps + 1, options.every); }
  // The 1-based step findings belong to: the one running, else the last one completed.
  int64_t step_now() const { return in_step ? steps + 1 : steps; }

  // Findings and the checks that ran go to the monitor's report.
  std::function<void(Finding)> add;
  void add_all(const std::vector<Finding>& fs) {
    for (const Finding& f : fs) add(f);
  }
  std::function<void(const std::string&)> note_ran;
  // Pause (true) or resume (false) every unit that gathers training statistics from forwards,
  // around forwards of a probe of the model.
  std::function<void(bool)> pause;

  // ---- shared between checks ----
  // Parameters whose zero gradient is by construction (a bias before BatchNorm): M25's
  // redundant-bias probe finds them once; O1 and M25 do not report them.
  std::vector<std::string> zero_grad_by_construction;
  // O6 measures every weight's norm and finiteness around the sampled updates: O2/O3 and O4 reuse
  // them (NaN / false: not measured, compute it).
  std::function<double(const Tensor&)> measured_norm;
  std::function<bool(const Tensor&)> measured_finite;
  // A unit saw a non-finite loss or gradient this step: the NonFinite listeners localise it
  // before the optimizer's update (W4, M12).
  void flag_nonfinite() { nonfinite = true; }
  bool nonfinite = false;
  bool localised = false;    // the non-finite value was localised (once per run)
  bool scaler_skip = false;  // the NonFinite event is a step the loss scaler skipped (Monitor::watch)
};

// One check (or a small group sharing a home and its hooks) that runs during training.
class RunCheck {
 public:
  virtual ~RunCheck() = default;
  virtual std::string ids() const = 0;  // "M7", "O2, O3": the checks it runs (it notes them as ran when they do)
  virtual uint32_t events() const = 0;  // RunEvent bits
  virtual void attach(RunContext&) {}
  virtual void forward(RunContext&, const Tensor& /*x*/) {}
  virtual void loss_input(RunContext&, nn::Loss&, const Tensor& /*input*/, const Tensor& /*target*/) {}
  virtual void loss_value(RunContext&, nn::Loss&, const Tensor& /*target*/) {}
  virtual void before_step(RunContext&, bool /*sampled*/) {}
  virtual void nonfinite(RunContext&, const std::string& /*why*/) {}
  virtual void after_step(RunContext&, bool /*sampled*/) {}
  virtual void epoch(RunContext&, const EpochRecord&) {}
  virtual void finish(RunContext&) {}
  virtual void series(TrainingHistory&) const {}
  virtual void detach(RunContext&) {}
  virtual void after_run(RunContext&, const Tensor& /*sample_x*/, const Tensor& /*sample_y*/) {}
  virtual void pause(RunContext&, bool /*on*/) {}
  virtual void warning(RunContext&, const gradsleuth::Warning&, Finding&) {}
  virtual void trainer(RunContext&) {}
  virtual void scaler(RunContext&) {}
};

// A run check around a statistics tracker that hooks the model's forwards (M7, M8, M25, M26):
// the first step (initialisation) is always recorded, then the sampled steps; the monitor's probe
// forwards are not (RunEvent::Pause). The subclass adds its ids, events and findings.
template <class Tracker>
class TrackerRunCheck : public RunCheck {
 public:
  template <class Options>
  explicit TrackerRunCheck(const Options& o) : t_(o) {}
  void attach(RunContext& c) override {
    t_.attach(c.model);
    t_.set_active(true);
    t_.set_step(1);
  }
  void after_step(RunContext& c, bool) override {
    t_.set_step(c.steps + 1);
    t_.set_active(c.sampled());
  }
  void pause(RunContext& c, bool on) override { t_.set_active(!on && c.sampled()); }
  void detach(RunContext&) override { t_.detach(); }

 protected:
  static constexpr uint32_t kEvents =
      RunEvent::Attach | RunEvent::AfterStep | RunEvent::Pause | RunEvent::Detach | RunEvent::Finish;
  Tracker t_;
};

using RunCheckList = std::vector<std::unique_ptr<RunCheck>>;

// Each family registers its run checks, in its own folder (checks/<family>/register.cpp).
void add_data_run_checks(RunCheckList& list, const MonitorOptions& o);
void add_loss_run_checks(RunCheckList& list, const MonitorOptions& o);
void add_optim_run_checks(RunCheckList& list, const MonitorOptions& o);
void add_model_run_checks(RunCheckList& list, const MonitorOptions& o);
void add_workflow_run_checks(RunCheckList& list, const MonitorOptions& o);
// Every family's, in the order the monitor calls them.
RunCheckList all_run_checks(const MonitorOptions& o);

// A gate finding (`check`, `kind`) that a trainable parameter gets no gradient, where the run's
// sampled steps (O1 over the run, TrainingHistory::gradient_missing) show that it got one on some:
// the loop's backward reaches it through a term the Session's loss does not have (an auxiliary loss
// on a second head). Such a finding becomes info. The homes of M5 and O1 call it with their kinds.
void soften_reached_in_training(Report& gate, const TrainingHistory& h, const char* check, Kind kind);
// A gate finding (`check`, `kind`) that a parameter's gradient is zero, where the run's gradient
// records (TrainingHistory::grad_norms) show it above `vanishing` on at least half of the sampled
// steps: the gate ran the model with its randomness off, and the parameter is reached only through the
// random path. Such a finding becomes info.
void soften_zero_at_gate(Report& gate, const TrainingHistory& h, const char* check, Kind kind, double vanishing);

// The loss types the run checks tell apart (nn::Loss::type_name()).
namespace loss_type {
inline bool cross_entropy(const nn::Loss& l) { return l.type_name() == "CrossEntropyLoss"; }
inline bool nll(const nn::Loss& l) { return l.type_name() == "NLLLoss"; }
inline bool elementwise(const nn::Loss& l) {
  return l.type_name() == "MSELoss" || l.type_name() == "BCELoss" || l.type_name() == "BCEWithLogitsLoss";
}
// One of the library's losses whose scale and reading of the output the checks know (cross-entropy, NLL,
// MSE, BCE, BCE with logits), by its type_name; "" (a loss function) is none.
inline bool library(const std::string& type_name) {
  return type_name == "CrossEntropyLoss" || type_name == "NLLLoss" || type_name == "MSELoss" ||
         type_name == "BCELoss" || type_name == "BCEWithLogitsLoss";
}
inline bool library(const nn::Loss& l) { return library(l.type_name()); }
// An output (B, C) more than 4x as wide as the classes the int64 labels reach (2 at least; none read: 0):
// an embedding a loss of the user's own scores itself (a prototypical network's distances, a metric
// loss's features), not scores over the classes.
bool wider_than_labels(const Tensor& output, const Tensor& labels);
// A loss of the user's own (an nn::Loss subclass the library does not know) that gets logits (B, C)
// and class indices (B): whatever its formula, the prediction must be scores over classes. Not where C
// is over 4x the classes the batch's labels reach (an embedding the loss scores itself).
bool takes_class_indices(const nn::Loss& l, const Tensor& input, const Tensor& target);
// The class index a CrossEntropyLoss or NLLLoss masks (its ignore_index); -100 for any other loss.
int64_t ignore_index(const nn::Loss& l);
}  // namespace loss_type

}  // namespace gradsleuth::debug
