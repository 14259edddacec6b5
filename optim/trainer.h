// The training loop, written once: epochs over a DataLoader, evaluation,
// callbacks, metric files and a progress bar.
//
//   optim::Adam opt(model->parameters(), optim::AdamOptions(1e-3));
//   optim::Trainer trainer(*model, opt, optim::TrainerOptions().epochs(5).run_dir("runs/mlp"));
//   optim::FitResult r = trainer.fit(train_loader, &test_loader);
//
// One step is the five lines every framework shares:
//   opt.zero_grad();  out = model(x);  loss = loss_fn(out, y);  loss.backward();  opt.step();
// Epochs and steps are counted from 1 in callbacks, files and messages.
#pragma once
#include <cstdint>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "nn/data.h"
#include "nn/module.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"

namespace gradsleuth::optim {

// loss = f(output, target): a 0-dim tensor. The default is cross-entropy on
// logits output (B, C) and int64 targets (B).
using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;
LossFn cross_entropy_loss();

inline constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

// Mean loss and accuracy over a loader. Accuracy is NaN unless the targets are
// class indices (int64 (B)) and the output is (B, C).
struct EvalResult {
  double loss = kNoValue;
  double accuracy = kNoValue;
  int64_t examples = 0;
  double seconds = 0.0;
  // Per class (index = the label), for class scores (B, C) against targets (B), or per position
  // (B, C, d1, ...) against (B, d1, ...): the examples (rows or positions) of each class and how many
  // of them the model predicts right (their ratio is the class's recall). accuracy is by row only.
  std::vector<int64_t> class_examples, class_correct;
};

// Runs the whole loader through the model in eval mode under NoGradGuard (each batch moved to
// the device of the model's first parameter: evaluation runs where the model is),
// then puts the model back in the mode it was in. The loader's epoch counter
// is left as it was (so evaluation never changes a training run's shuffling).
// eval_mode=false keeps the model's current mode (what bug B05 does; Dropout
// and BatchNorm then warn, check M2).
EvalResult evaluate(nn::Module& model, const nn::DataLoader& loader, const LossFn& loss = cross_entropy_loss(),
                    bool eval_mode = true);

// Of the rows of output (B, C) whose target (B) is a class in [0, C): how many there are, and how many
// argmax(output, 1) gets right. A target outside that range (CrossEntropyLoss's ignore_index, -100 by
// default: an unlabelled row) is left out, as the loss leaves it out.
struct ClassHits {
  int64_t right = 0, counted = 0;
};
ClassHits class_hits(const Tensor& output, const Tensor& target);
// The fraction of those rows that argmax gets right (kNoValue when no row has a class target).
double accuracy(const Tensor& output, const Tensor& target);

// What a step callback sees, after optimizer.step().
struct StepInfo {
  int64_t step = 0;         // optimizer steps so far in this fit, from 1
  int64_t epoch = 0;        // from 1
  int64_t batch_index = 0;  // within the epoch, from 0
  int64_t batches = 0;      // per epoch
  double loss = kNoValue;
  double accuracy = kNoValue;
  double lr = 0.0;
  const nn::Batch* batch = nullptr;  // this step's inputs
  Tensor output;                     // the model's output (still attached to the graph)
  Tensor loss_tensor;
};

// What an epoch callback sees, after evaluation.
struct EpochInfo {
  int64_t epoch = 0;             // from 1
  int64_t steps = 0;             // optimizer steps so far
  double train_loss = kNoValue;  // mean over the epoch's batches, weighted by batch size
  double train_accuracy = kNoValue;
  double val_loss = kNoValue;  // NaN without a validation loader
  double val_accuracy = kNoValue;
  double lr = 0.0;       // the lr used during this epoch
  double seconds = 0.0;  // training time of the epoch (evaluation excluded)
  double examples_per_second = 0.0;
};

// How the progress is shown on stderr. Auto: a bar redrawn in place (\r) when
// stderr is a terminal, otherwise a line every log_every steps and at each epoch end.
enum class Progress { Auto, Lines, Off };

using GradScalerPtr = GradScaler*;

struct TrainerOptions {
  GS_OPTIM_ARG(int64_t, epochs) = 1;
  // Where steps.csv and epochs.jsonl go ("" writes no files). Created if missing.
  GS_OPTIM_ARG(std::string, run_dir) = "";
  GS_OPTIM_ARG(Progress, progress) = Progress::Auto;
  GS_OPTIM_ARG(int64_t, log_every) = 100;  // steps between progress lines when not a terminal
  // Steps the scheduler once per batch instead of once per epoch.
  GS_OPTIM_ARG(bool, scheduler_per_step) = false;
  // clip_grad_norm_ before every step when > 0 (on the true gradients: after grad_scaler's unscale_).
  GS_OPTIM_ARG(double, clip_grad_norm) = 0.0;
  // Mixed precision (docs/dtypes.md, "Autocast"): the forward and the loss run under
  // gs::autocast(dtype), kFloat16 or kBFloat16; the backward and the step run outside it.
  // Unset (the default): no autocast. Evaluation runs under the same autocast.
  GS_OPTIM_ARG(std::optional<DType>, autocast);
  // A loss scaler (float16 mixed precision; docs/optim.md, "GradScaler"): each step is
  //   scaler.scale(loss).backward(); scaler.unscale_(opt) (when clipping); clip; scaler.step(opt);
  //   scaler.update();
  // It must outlive the Trainer. nullptr (the default): the loss is not scaled.
  GS_OPTIM_ARG(GradScalerPtr, grad_scaler) = nullptr;
  // Stop after this many optimizer steps in all (< 0: no limit).
  GS_OPTIM_ARG(int64_t, max_steps) = -1;
  // Where training runs. fit() moves the model there first (Module::to: in place, so the
  // optimizer's parameter handles stay valid; make the optimizer before or after, but its state
  // is made on the parameters' device at its first step) and moves each batch there (x and y,
  // train and validation). Unset (the default): the model's own device, batches moved to it.
  // A CUDA device needs the backend registered: gradsleuth::cuda::init() (cuda/cuda.h).
  GS_OPTIM_ARG(std::optional<Device>, device);
  // Data-parallel training (distributed/, docs/distributed.md): maps this process's per-step loss and
  // accuracy to the job's (dist: the mean over the ranks, an all-reduce), before they are
  // logged, shown or passed to callbacks, so every rank sees, and rank 0 writes, the global
  // value. Every rank calls it at the same points. Unset: this process's values.
  GS_OPTIM_ARG(std::function<double(double)>, reduce_mean);
  // How many processes train on disjoint shards (examples per second counts all of them).
  GS_OPTIM_ARG(int64_t, processes) = 1;
  // Injectable training-loop bugs (nn/bugs.h): B04 zero_grad() never called,
  // B05 validation run in training mode, B36 clipping before the loss scaler's unscale_.
  GS_OPTIM_ARG(nn::BugSet, bugs);

 public:
  TrainerOptions& bug(nn::Bug b) {
    bugs_.add(b);
    return *this;
  }
};

struct FitResult {
  std::vector<EpochInfo> epochs;
  std::vector<double> step_losses;  // one per optimizer step, in order
  int64_t steps = 0;
  double seconds = 0.0;        // wall time of the whole fit, evaluation included
  bool stopped_early = false;  // a callback called request_stop(), or max_steps was reached
  EpochInfo last() const { return epochs.empty() ? EpochInfo{} : epochs.back(); }
};

class Trainer {
 public:
  Trainer(nn::Module& model, Optimizer& optimizer, TrainerOptions options = {});
  ~Trainer();

  Trainer& set_loss(LossFn loss);
  // An lr schedule, stepped after each epoch (or each batch: scheduler_per_step).
  Trainer& set_scheduler(LRScheduler* scheduler);
  // Stepped after each epoch with the validation loss (the training loss without a val loader).
  Trainer& set_plateau_scheduler(ReduceLROnPlateau* scheduler);

  using StepCallback = std::function<void(const StepInfo&)>;
  using EpochCallback = std::function<void(const EpochInfo&)>;
  size_t on_step(StepCallback cb);
  size_t on_epoch(EpochCallback cb);
  void remove_callback(size_t id);
  // Ends training after the current step (callbacks call it: early stopping, a debug check).
  void request_stop() { stop_ = true; }

  // Trains for options().epochs() epochs over `train`; evaluates on `val` after
  // each epoch when given. Epoch e (from 1) visits the training data in
  // loader.order(first_epoch + e - 1), so the same seed gives the same run.
  FitResult fit(nn::DataLoader& train, const nn::DataLoader* val = nullptr);

  const TrainerOptions& options() const { return options_; }
  // The device fit() trains on: options().device(), else the model's (its first parameter's).
  Device device() const;
  nn::Module& model() { return model_; }
  Optimizer& optimizer() { return opt_; }

 private:
  void open_logs();
  void log_step(const StepInfo& s);
  void log_epoch(const EpochInfo& e);

  nn::Module& model_;
  Optimizer& opt_;
  TrainerOptions options_;
  LossFn loss_;
  LRScheduler* scheduler_ = nullptr;
  ReduceLROnPlateau* plateau_ = nullptr;
  struct Callback {
    size_t id;
    StepCallback step;
    EpochCallback epoch;
  };
  std::vector<Callback> callbacks_;
  size_t next_id_ = 0;
  bool stop_ = false;
  int64_t epochs_done_ = 0;  // across fit() calls: a second fit continues the epoch count
  int64_t steps_done_ = 0;
  std::ofstream steps_csv_, epochs_jsonl_;
};

// One call: Trainer(model, optimizer, options).fit(train, val).
FitResult fit(nn::Module& model, Optimizer& optimizer, nn::DataLoader& train, const nn::DataLoader* val = nullptr,
              TrainerOptions options = {});

}  // namespace gradsleuth::optim
