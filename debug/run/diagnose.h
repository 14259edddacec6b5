// The debug module on the user's own model: the data checks (D1-D10, D12-D16), the pre-training gate
// (W2, then M15 and, when asked, M16 and W1), a monitored training run (W3) and the end-of-run
// diagnoses (with M7's pass over the training data), in that order, from what a
// user already has (a Module, a loss, an optimizer, loaders, a Normalizer), as one report.
//
// One call, "train this and tell me what is wrong" (it trains with an optim::Trainer):
//
//   debug::DiagnoseOptions o;
//   o.epochs = 2;
//   o.report_dir = "runs/mine";                       // runs/mine/report.html
//   debug::RunReport r = debug::diagnose(*model, loss, opt, train, &val, &norm, o);
//   std::cout << r.str();
//
// Or attached to your own loop (the Session sees forwards, the loss and the optimizer through
// hooks; with an nn::Loss module it also records each step's loss by itself):
//
//   debug::Session dbg(*model, loss, opt, {.train = &train, .val = &val});  // data checks + gate now
//   for (int e = 0; e < 2; ++e) {
//     for (const nn::Batch& b : train) { ...; l.backward(); opt.step(); }
//     dbg.epoch();                                    // evaluates on val, records the epoch
//   }
//   debug::RunReport r = dbg.finish();
//
// Any piece may be missing (a lambda instead of an nn::Loss, no validation loader, no
// Normalizer, no loader at all: begin(x, y) on a batch of yours): the checks that can still
// run do, and RunReport::skipped says which could not and what they need (docs/checks.md,
// "What each check needs from you"). An exception the checks provoke in the model or the loss
// (an in-place error in backward, a loss that rejects its target) becomes an error finding
// naming the phase; the phases that do not depend on it still run.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "debug/checks/data/data_checks.h"
#include "debug/checks/loss/end_fit.h"
#include "debug/evidence/finding.h"
#include "debug/report/html_report.h"
#include "debug/run/monitor.h"
#include "nn/data.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/trainer.h"

namespace gradsleuth::debug {

class ReplayRecorder;  // debug/report/explore.h

// The data the checks may use. Every member is optional; each one left out costs the checks
// RunReport::skipped lists.
struct DiagnoseData {
  nn::DataLoader* train = nullptr;      // D1-D9 on its batches, the gate's batch (its first), D4/D7's reference, D12
  const nn::DataLoader* val = nullptr;  // D10, D13-D16 against train, epoch() evaluation, L7, M18's sample
  const nn::Normalizer* normalizer = nullptr;  // D7: fitted on the training split only?
  // D4's reference: the (x, y) pairs as loaded, before the loader; default: the train loader's dataset.
  const nn::Dataset* reference = nullptr;
};

struct DiagnoseOptions {
  // ---- which phases run ----
  bool data_checks = true;  // D1-D10, D12 (need DiagnoseData::train), D13-D16 (and DiagnoseData::val)
  bool gate = true;         // W2 on the first training batch (or begin(x, y)'s batch)
  bool end_of_run = true;   // the monitor's end-of-run diagnoses (L1, L7, O2, O3, O6, M7, M8, M18, M19)
  // ---- the training run of diagnose() ----
  int64_t epochs = 1;
  int64_t max_steps = -1;  // < 0: every batch of every epoch
  bool validate = true;    // evaluate on DiagnoseData::val after each epoch (when given)
  // The Trainer's other settings (clip_grad_norm, device, run_dir, ...); epochs and max_steps above
  // replace its own. Progress is off by default.
  optim::TrainerOptions trainer = optim::TrainerOptions().progress(optim::Progress::Off);
  // ---- the checks ----
  // Classes of a classification task: D3, D9 (labels inside [0, C)), L4 (initial loss ~ log C).
  // -1: inferred (the labels' max + 1 for D3, the output's last dim for L4).
  int64_t num_classes = -1;
  DataCheckOptions data;
  GateOptions gate_options;       // its num_classes is set from num_classes when that is > 0
  MonitorOptions monitor;         // likewise
  int64_t split_examples = 2000;  // D10 compares N rows spread over the train and val datasets
  // D12-D16 read the first data.integrity_examples rows of each dataset (60000 by default).
  std::string val_split = "validation";  // what D10 and D13-D16 call the val loader's split ("test", ...)
  int64_t sample_examples =
      1000;  // M18 (and M30 in a 16-bit run) run on the first N rows of val (else train) at finish()
  // The learning-rate probe: when O6 or O8 says the learning rate is too high, finish() trains the same
  // model again from its initial weights at a tenth of the learning rate for this many steps (on
  // the train loader, with the same optimizer, its state reset) and compares: a run that trains
  // cleanly there confirms the learning rate as the cause; one that misbehaves the same rules it
  // out. The trained weights and the optimizer's state are restored afterwards. 0: off. Needs
  // DiagnoseData::train and an optimizer whose state_dict()/load_state_dict() round-trip.
  int64_t lr_probe_steps = 100;
  // ... or, where the run misbehaved later (the step its finding names), past that step by a tenth of
  // it, up to this many steps.
  int64_t lr_probe_max_steps = 2000;
  // L1's and O6's spikes against their own batches: up to this many steps whose loss jumped above the
  // first loss (the highest first) have their batch read again from DiagnoseData::train (when it is
  // the batch the step trained on) and its loss taken at the initial weights; a jump on a batch that
  // was as hard before any update is the data's, not a spike. 0: off.
  int64_t spike_replays = 8;
  // L1's and O6's wild swings against the data's: when the loss swung by more than its level from
  // step to step, up to this many consecutive training batches are read again and their loss taken
  // at the trained weights without an update; a run whose wildest window spreads no more than
  // LossCheckOptions::data_swing_factor x theirs moves with its batches (outlier targets), not with
  // its updates. 0: off.
  int64_t swing_batches = 32;
  // L9 (the trained model on both splits, and the higher-learning-rate probe when the loss still fell).
  EndFitOptions fit;
  // ---- the checks that train the model again (before training, with the gate) ----
  // M15: the model trained on the first (up to 5) training batches with real and with zeroed
  // inputs, judged on the next batch; the model's parameters are restored afterwards. Needs a
  // training loader of 2 batches or more. Batches smaller than baseline_min_examples count
  // together: k of them (k x batch >= baseline_min_examples) stand for one, so a batch of 4 trains
  // on up to 40 batches and is judged on the next 8 joined.
  bool baseline = true;
  // ... the examples that stand for one batch (the held-out loss of 4 examples is noise).
  int64_t baseline_min_examples = 32;
  // ... and the validation rows (from batches spread over the validation loader) on which the
  // zeroed-input run's loss is kept: the run's validation loss is compared with it after the run.
  int64_t baseline_val_examples = 1024;
  // M16: a new model of a given width (hidden units); when set, the models at small_width and
  // large_width are trained on the first 4 training batches and the larger must do better.
  std::function<nn::ModulePtr(int64_t width)> make_model;
  int64_t small_width = 16, large_width = 128;
  // W1: a short run of yours from a seed (a new model, optimizer and loader seeded with it),
  // returning its step losses; when set, it runs twice with `seed` and the losses must match.
  std::function<std::vector<double>(uint64_t seed)> rerun;
  // W1 on the final parameters too: the same short run returning its step losses and its trained
  // model; when set (it takes the place of rerun), both runs' parameters must match bit for bit.
  std::function<ReproRun(uint64_t seed)> rerun_model;
  uint64_t seed = 1;
  // ---- after training ----
  // M7 over a pass through the training loader (every batch, up to dead_pass_batches) with the
  // trained model, in eval mode, when training did not stop and the model lives on the host.
  bool dead_pass = true;
  int64_t dead_pass_batches = 100;
  // ---- output ----
  std::string report_dir;  // when not empty: report.html (W6 plots and findings) and metrics.csv there
  // When not empty: the autograd explorer's page (debug/report/explore.h) written here by finish():
  // the graph and backward of the gate's batch through the trained model, and the run's replay.
  std::string explore_path;
  std::string title = "gradsleuth: diagnosis of your model";
  std::function<void(const std::string&)> progress;  // "data checks", "pre-training gate", ...
};

// Checks that did not run, why, and what would let them run.
struct SkippedChecks {
  std::string checks;  // "D7"
  std::string reason;  // "no Normalizer was given"
  std::string remedy;  // "pass the fitted nn::Normalizer (DiagnoseData::normalizer)"
  // Left out of the text report (str()), kept in json() and the HTML report: it matters only in
  // a setup this run shows no sign of (D7 when the training data went through no nn::Normalizer).
  bool quiet = false;
};

// One phase's findings, in the order found.
struct PhaseReport {
  std::string name;  // "data checks", "pre-training gate", "training", "end of run"
  bool ran = false;
  std::string note;  // why it did not run, or how it ended ("stopped at step 12: ...")
  Report findings;
};

struct RunReport {
  Report findings;                  // every phase's findings, phase by phase (data, gate, training, end of run)
  std::vector<PhaseReport> phases;  // the same, per phase
  std::vector<SkippedChecks> skipped;
  TrainingHistory history;
  int64_t steps = 0;         // optimizer steps seen
  std::string stopped;       // why training stopped early ("" when it did not)
  std::string html_path;     // the report written (DiagnoseOptions::report_dir), else ""
  std::string explore_path;  // the explorer's page written (DiagnoseOptions::explore_path), else ""

  bool fired(const std::string& check) const { return findings.fired(check); }
  std::vector<std::string> fired_checks() const { return findings.fired_checks(); }
  // A finding (or a pass's findings, with the checks it ran) of the end of the run: into the
  // whole report and the "end of run" phase.
  void add_at_end(const Finding& f);
  void add_at_end(const Report& found);
  // The phases and their counts, the findings (info ones only when asked), then the checks
  // that did not run and what they need.
  std::string str(bool include_info = false) const;
  // {"phases":[{"name":..,"ran":..,"note":..,"findings":[..]}],"skipped":[..],"steps":..,"stopped":..}
  std::string json() const;
};

struct RateOutcome;  // checks/optim/optim_checks.h

// The attachable form. Construct it before the training loop; it hooks the model, the loss
// (when it is an nn::Loss module) and the optimizer, and with DiagnoseData::train it runs the
// data checks and the gate on that loader's first batch right away (without one, call
// begin(x, y)). The model, loss, optimizer and data are held by reference and must outlive it.
class Session {
 public:
  Session(nn::Module& model, nn::Loss& loss, optim::Optimizer& optimizer, DiagnoseData data = {},
          DiagnoseOptions o = {});
  // A loss written as a function: the monitor cannot see its inputs (RunReport::skipped says
  // which checks that costs), and each step's loss must be passed to step().
  Session(nn::Module& model, LossFunction loss, optim::Optimizer& optimizer, DiagnoseData data = {},
          DiagnoseOptions o = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // The gate (and the data checks, when a train loader was given and they have not run) on
  // the batch (x, y): for users without a DataLoader, before the first step. Returns the
  // findings made before training so far.
  Report begin(const Tensor& x, const Tensor& y);

  // A Trainer reports each step and epoch itself (step()/epoch() are then not needed); its
  // loss scaler (TrainerOptions::grad_scaler), when it has one, is watched as by watch().
  void attach(optim::Trainer& trainer);
  // O10: the loop's loss scaler (mixed precision), its scale and the steps it skips. The scaler
  // must outlive the Session. Its clipping-before-unscale_ warning is heard without this.
  void watch(optim::GradScaler& scaler);

  // Your own loop: the loss of the step just taken, after optimizer.step(). Needed only when
  // the loss is a function (an nn::Loss module's value is heard by its hook); harmless otherwise.
  void step(double loss);
  void step(const Tensor& loss);
  // After each epoch: the mean training loss of the epoch's steps, and the loss and accuracy on
  // DiagnoseData::val (evaluated here, in eval mode, without gradients) when given.
  void epoch();
  // The same with your own numbers.
  void epoch(double train_loss, double val_loss = std::numeric_limits<double>::quiet_NaN(),
             double val_accuracy = std::numeric_limits<double>::quiet_NaN());
  // The loop raised: the error as a finding (M20 for an in-place error), training marked stopped.
  void error(const std::exception& e);

  // The end-of-run diagnoses (M18 on sample_x, or on the first rows of val/train), the hooks
  // removed, and the report (written as HTML when DiagnoseOptions::report_dir is set). Once.
  RunReport finish(const Tensor& sample_x = Tensor(), const Tensor& sample_y = Tensor());

  Monitor& monitor() { return *monitor_; }
  // The findings made before training (data checks and gate).
  Report pretraining() const;

 private:
  void init();
  void run_data_checks();
  void run_gate(const Tensor& x, const Tensor& y);
  void record_epoch(double train_loss, double val_loss, double val_accuracy, double measured_val_loss,
                    double measured_train_loss);
  // W3's measured losses (Session::epoch with numbers): up to 512 rows of a loader's dataset, kept in `sample`.
  double measure_rows(const nn::DataLoader* from, std::shared_ptr<nn::DataLoader>& sample, double reported);
  void start_monitor();
  void say(const std::string& s) const;
  // L1's and O6's divergence where the loss function changed during the run (debug/run/lr_probe.cpp).
  void check_objective_drift(RunReport& r);
  void lr_probe(RunReport& r);
  void dead_units_lr_probe(RunReport& r);  // O6's probe of units that died (M7)
  bool rate_outcome(const RunReport& r, RateOutcome& m);  // O8's outcome probe of a calm run
  // The groups' rates of a probe that replays the run's recorded schedule: each group at its initial
  // rate relative to the first's, times `scale`, and `schedule` set to the first group's rate at each
  // step of the run; without a record (or a first rate of 0), each initial rate times `scale` and no
  // schedule.
  std::vector<double> replayed_rates(const RunReport& r, double scale, std::vector<double>& schedule) const;
  double peak_lr(const RunReport& r) const;
  // The same training again from the initial weights (from_start) or on from the trained ones, with
  // the groups' learning rates `lrs`, for `steps` steps on the train loader; at_end (when given) sees
  // the model after them. Returns its step losses; the trained state is restored. With `schedule`,
  // step i runs at lrs x schedule[i % its size] (a recorded schedule replayed). With `rows`, the
  // batches come from those rows of the training set only (each epoch in the loader's order).
  std::vector<double> rerun_from_start(const std::vector<double>& lrs, int64_t steps, std::string& failed,
                                       bool from_start = true, const std::function<void()>& at_end = nullptr,
                                       const std::vector<double>& schedule = {},
                                       const std::vector<int64_t>& rows = {});
  void replay_batches();                  // L1's and O6's spikes and swings (debug/run/end_fit_pass.cpp)
  void check_modes_at_end(RunReport& r);  // M2 mode agreement (debug/run/end_fit_pass.cpp)
  void check_fit_at_end(RunReport& r);    // L9 (debug/run/end_fit_pass.cpp)
  void check_decay_at_end(RunReport& r);  // O3's weight-decay probe (debug/run/decay_pass.cpp)
  void check_unwatched_updates(RunReport& r, int64_t training_losses);
  void check_epsilon_at_end(RunReport& r);  // O6's eps rule (debug/run/decay_pass.cpp)
  void check_class_errors_at_end();
  void write_explorer(RunReport& r);

  nn::Module& model_;
  nn::Loss* loss_module_ = nullptr;
  LossFunction loss_;
  optim::Optimizer& opt_;
  DiagnoseData data_;
  DiagnoseOptions o_;
  PhaseReport data_phase_{"data checks", false, "", {}}, gate_phase_{"pre-training gate", false, "", {}};
  std::unique_ptr<Monitor> monitor_;
  HookSet hooks_;
  std::vector<size_t> opt_hooks_;
  optim::GradScaler* scaler_ = nullptr;  // watch()
  bool trainer_attached_ = false, finished_ = false, data_checked_ = false;
  // Step losses: heard from the loss module, or given to step().
  double heard_loss_ = 0.0;
  // This step's calls of the loss module: (value, the gradient its backward gave it; NaN before).
  using StepCalls = std::vector<std::pair<double, double>>;
  std::shared_ptr<StepCalls> step_calls_ = std::make_shared<StepCalls>();
  bool heard_ = false, last_was_heard_ = false;
  int64_t recorded_ = 0;
  size_t epoch_first_step_ = 0;  // index into the history's step losses where this epoch began
  int64_t epochs_ = 0;
  // The per-class counts of the last validation pass of epoch(), and the step count it saw.
  std::vector<int64_t> val_class_examples_, val_class_correct_;
  std::vector<double> first_class_recall_;  // per class, after the first epoch (D3: still being learned?)
  int64_t val_classes_at_step_ = -1;
  std::string stopped_;
  // The model and optimizer before training, for the learning-rate probe.
  std::vector<Tensor> initial_params_, initial_buffers_;
  std::vector<std::string> zero_by_construction_;  // the gate's redundant biases (pretrain_gate)
  std::vector<std::string> zero_until_first_step_;  // held back by a zero-initialised layer (pretrain_gate)
  std::shared_ptr<const SplitSample> train_rows_;  // the training rows the data checks read (D14 after training)
  std::map<std::string, Tensor> initial_opt_state_;
  std::vector<double> initial_lrs_;  // each group's
  size_t lr_group_ = 0;              // the group the run's recorded schedule follows (lr_reference_group)
  bool have_initial_ = false;
  // One output of the model at the gate, its targets and the loss's value on them: the same call at the
  // end of the run tells whether the loop changed what its loss computes.
  Tensor objective_out_, objective_y_;
  double objective_before_ = std::numeric_limits<double>::quiet_NaN();
  // The explorer's page (DiagnoseOptions::explore_path): the gate's batch and the replay's extra series.
  Tensor explore_x_, explore_y_;
  std::unique_ptr<ReplayRecorder> replay_;
  std::shared_ptr<nn::DataLoader> val_sample_, train_sample_;  // measure_rows' rows
};

// The one-call form: Session, then optim::Trainer(model, optimizer, o.trainer) with o.epochs
// and o.max_steps trains on `train` (validating on `val` when o.validate), then finish().
RunReport diagnose(nn::Module& model, nn::Loss& loss, optim::Optimizer& optimizer, nn::DataLoader& train,
                   const nn::DataLoader* val = nullptr, const nn::Normalizer* normalizer = nullptr,
                   DiagnoseOptions o = {});
// With a loss function (fewer checks: see RunReport::skipped).
RunReport diagnose(nn::Module& model, LossFunction loss, optim::Optimizer& optimizer, nn::DataLoader& train,
                   const nn::DataLoader* val = nullptr, const nn::Normalizer* normalizer = nullptr,
                   DiagnoseOptions o = {});

// The HTML report of a run (W6): summary, the leading finding, the loss / gradient-norm /
// dead-unit / update-ratio plots, every finding, and the checks that did not run.
void write_run_report(const std::string& path, const RunReport& r, const std::string& title);

// ---- the plots of a run's history (write_run_report and `gradsleuth doctor`) ----------------
// Gradient norm per parameter (log scale), dead-unit fraction per ReLU layer with M7's limit,
// update-to-weight ratio per parameter with its healthy band and O6's limits; at most 12 series
// each. With `focus`, the series the finding names (names_series) come first, so the limit never
// cuts them; a zero (a dead layer's gradient) is drawn at the floor with a marker.
Plot grad_norm_plot(const TrainingHistory& h, const Finding* focus = nullptr);
Plot dead_unit_plot(const TrainingHistory& h, const Finding* focus = nullptr);
Plot update_ratio_plot(const TrainingHistory& h, const Finding* focus = nullptr);

// Whether the series `name` (a parameter "1.weight", or a layer "2 (ReLU)" of the dead-unit
// history) is one that `f` names: its parameter, its module, or a parameter of its module
// ("<module path>.weight", ".bias", ...). A module with no parameters of its own in `names` (a
// ReLU) stands for the layer that feeds it: its nearest earlier sibling that has some ("2" -> "1"
// in a Sequential), whose gradient is what a dead ReLU stops.
bool names_series(const Finding& f, const std::string& name, const std::vector<std::string>& names);

// M28's pictures of a run in 16 bits (the report's plots when the history has them): the exponent
// histogram of the 16-bit layers' values against the dtype's representable band, and the heat map
// of layers x sampled steps of the share of their values out of range.
Plot range_histogram_plot(const TrainingHistory& h);
HeatMap range_heatmap(const TrainingHistory& h);

// The plots under the lead finding, from the run's history: its check's own plot (M7: dead units;
// M28, M29: the exponent histogram; O1, O6, M9: update ratios) and, when it names parameters or a module that the
// history has gradient norms of, their gradient norms; in each, the series it names first. The caller adds the loss
// plot (and M6's heat map).
std::vector<Plot> lead_plots(const Finding& lead, const TrainingHistory& h);

}  // namespace gradsleuth::debug
