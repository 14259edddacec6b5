// A training program as data: the data pipeline, the model, the loss, the optimizer, the schedule
// and the loop of a user's script, each a field a fault operator can change (debug/corpus/operators.h).
// run_program() writes it out as user code does, through debug::Session (the user's own loop) or
// debug::diagnose() (the Trainer's), and measures the outcome on a held-out test split that the
// program and the checks never see.
//
//   const corpus::Program& p = corpus::program("cosine-per-batch");
//   corpus::Outcome o = corpus::run_program(p, /*seed=*/1);
//   std::cout << o.report.str() << "test accuracy " << o.metric << "\n";
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "debug/run/diagnose.h"

namespace gradsleuth::debug::corpus {

// ---- the data -------------------------------------------------------------------------------
enum class Task {
  Multiclass,  // int64 labels (N), cross-entropy on logits (N, C)
  Binary,      // float labels (N, 1) in {0, 1}, BCE on logits (N, 1)
  Multilabel,  // float labels (N, K) in {0, 1}, BCE on logits (N, K)
  Regression,  // float targets (N, 1), MSE
};
const char* task_name(Task t);

struct DataSpec {
  Task task = Task::Multiclass;
  // "blobs": C gaussian blobs in `features` dims; "spirals": C interleaved arms in 2-D padded with
  // noise features; "images": 1 x 12 x 12 class templates with noise and shifts; "planes": labels
  // (multilabel/binary) or targets (regression) from random projections of the inputs.
  std::string generator = "blobs";
  int64_t features = 16, classes = 4;
  int64_t train = 1200, val = 400, test = 1000;  // examples per split, before any fault
  double spread = 2.0;                           // blobs: within-class std (class centres sit ~5 apart)
  double label_noise = 0.0;                      // planes/binary: flipped labels in every split (the task's own noise)
  // Imbalance: class c keeps a share imbalance^(-c / (C - 1)) of its examples in every split
  // (1: balanced; 10: the last class is 10x rarer than the first).
  double imbalance = 1.0;
  int64_t hard_class = -1;  // >= 0: this class's centre sits beside class 0's (hard by nature)
  // The raw units the features arrive in (x * raw_scale + raw_offset), undone by standardisation.
  double raw_scale = 25.0, raw_offset = 100.0;
  uint64_t seed = 7;  // the data are fixed per program; run seeds vary training only

  // ---- the pipeline (the program's own preprocessing) ----
  bool standardise = true;       // an nn::Normalizer fitted on train, applied to every split
  std::string augment = "none";  // "none", "noise" (gaussian, train only), "flip" (images, train only)
  double mixup = 0.0;            // mixup alpha on training batches (0: off)
  bool shuffle = true;           // the training loader shuffles
  bool use_validation = true;    // the program has a validation loader (checks, early stopping)

  // ---- faults a data operator writes (0 / false in a healthy program) ----
  double fault_label_change = 0.0;  // share of training labels changed to another class
  double fault_remove = 0.0;        // share of training examples removed
  double fault_unbalance = 0.0;     // share of each class but the first removed, growing with class
  double fault_noise = 0.0;         // gaussian noise on training inputs, in units of the features' std
  double fault_overlap = 0.0;       // share of training examples copied with another class's label
  double fault_leak = 0.0;          // share of the test split copied into train and validation
  double fault_misalign = 0.0;      // share of training rows whose labels are rotated to other rows
  // "none"; "raw": validation and test left unstandardised; "own": each split standardised with its
  // own statistics; "scaled": validation and test divided by 255 once more
  std::string fault_preprocess = "none";
  bool fault_augment_eval = false;  // the training augmentation applied to validation and test too
};

// ---- the model ------------------------------------------------------------------------------
struct ModelSpec {
  std::string arch = "mlp";                // "mlp", "resmlp" (residual blocks), "cnn"
  std::vector<int64_t> hidden = {64, 64};  // mlp/resmlp: widths; cnn: the channels of each conv
  int64_t fc = 64;                         // cnn: the fully connected layer before the head
  std::string activation = "relu";         // relu, leaky_relu, gelu, tanh, sigmoid
  std::string norm = "none";               // none, batch, layer (after each hidden linear/conv)
  double dropout = 0.0;                    // before the head (and between hidden layers when > 0)
  // "default" (the layers' own: PyTorch's), "kaiming", "xavier"; faults: "zeros", "normal1"
  // (std 1), "tiny" (std 1e-4), "constant"
  std::string init = "default";
  // Fine-tuning: the body is first trained on a related task (the classes folded into
  // pretrain_groups groups, class c into c mod pretrain_groups), then frozen (requires_grad off) or
  // trained at body_lr_mult x the head's lr; a new head follows.
  bool pretrained = false;
  int64_t pretrain_groups = 2;
  bool freeze_body = false;
  bool frozen_bn_eval = false;  // the frozen body's BatchNorm kept in eval mode while training
  // ---- faults a model operator writes ----
  int64_t fault_layer = -1;               // the hidden layer the next four apply to (-1: none)
  std::string fault_activation = "";      // that layer's activation replaced ("identity": removed)
  std::string fault_add_activation = "";  // an activation added after the head ("relu", "softmax", "sigmoid")
  std::string fault_init = "";            // that layer's initialisation replaced
  int fault_bias = 0;                     // +1: a bias on the layers BatchNorm follows; -1: every layer's bias removed
};

// ---- the loss --------------------------------------------------------------------------------
struct LossSpec {
  // "ce" (logits), "nll" (log_softmax in the model's head), "bce_logits", "mse";
  // faults: "mse_onehot" (MSE on one-hot labels of the logits), "bce_probs" (BCE on sigmoid
  // outputs computed without logits), "hinge" is not offered
  std::string kind = "";  // "" : the task's usual one
  double label_smoothing = 0.0;
  bool class_weights = false;  // inverse class frequency (multiclass) / pos_weight (binary)
  // A Gaussian prior N(0, 1 / prior) on the weight matrices, added by the loop to the minibatch mean
  // (a MAP estimate): prior / N x sum w^2 / 2, N the training examples (0: none). The own loop only.
  double prior = 0.0;
  // ---- faults ----
  std::string reduction = "mean";  // "sum": a summed loss where the lr was tuned for a mean
  double scale = 1.0;              // the loss multiplied by this before backward
  double fault_prior_factor = 1.0;  // the prior's term multiplied by this (N: not divided by N; < 0: subtracted)
};

// ---- the optimizer ---------------------------------------------------------------------------
struct OptimSpec {
  std::string kind = "adam";  // sgd, momentum, nesterov, adam, adamw, rmsprop
  double lr = 1e-3;
  double weight_decay = 0.0;  // coupled (L2 in the gradient); decoupled for adamw
  double head_lr_mult = 1.0;  // fine-tuning: the head's group at this x the body's lr
  // ---- faults ----
  bool fault_head_outside = false;   // the head's parameters never given to the optimizer
  bool fault_first_outside = false;  // the first hidden layer's parameters never given to it
};

// ---- the schedule ----------------------------------------------------------------------------
struct ScheduleSpec {
  // none, step, cosine, warmup_cosine, onecycle, linear, exponential, plateau
  std::string kind = "none";
  bool per_batch = false;  // designed to be stepped every batch (else every epoch)
  int64_t warmup = 0;      // warm-up length, in the schedule's own units
  double gamma = 0.5;      // step/exponential decay
  int64_t step_size = 4;   // step: units between decays
  // ---- faults ----
  // "": as designed; "batch": an epoch schedule stepped every batch; "epoch": a batch schedule
  // stepped once per epoch
  std::string fault_stepped = "";
};

// ---- the loop --------------------------------------------------------------------------------
struct LoopSpec {
  std::string api =
      "own-loop";  // "own-loop": the user's loop with a debug::Session; "diagnose": diagnose() and the Trainer
  int64_t epochs = 8;
  int64_t batch_size = 32;
  int64_t accumulate = 1;  // micro-batches per optimizer step (each loss divided by it)
  double clip_norm = 0.0;  // clip_grad_norm_ before each step (0: none)
  int64_t patience = 0;    // early stopping on the validation loss (0: none)
  // The precision it trains in: "float32"; "bf16-autocast" (the forward and the loss under bfloat16
  // autocast); "fp16-autocast" (float16 autocast and a GradScaler, its unscale_ before any clipping);
  // "bf16-weights" (bfloat16 parameters and inputs, the optimizer keeping float32 master weights;
  // the own loop only)
  std::string precision = "float32";
  // ---- faults ----
  bool fault_accumulate_unscaled = false;  // the micro-batch losses not divided by `accumulate`
  bool fault_eval_left_on = false;         // model.eval() for validation, never model.train() again
  bool fault_no_zero_grad = false;         // gradients never zeroed between steps
  bool fault_train_mode_eval = false;      // validation run in training mode (dropout and BN active)
};

struct Program {
  std::string name;     // "cosine-per-batch"
  std::string family;   // "schedules", "fine-tuning", "tasks", "depth", "regularisation", "loop"
  std::string summary;  // one line: what the program does
  std::string source;   // the public reference it follows, by title
  DataSpec data;
  ModelSpec model;
  LossSpec loss;
  OptimSpec optim;
  ScheduleSpec schedule;
  LoopSpec loop;
  // The least test metric a healthy run reaches (accuracy, or R^2 for regression): the corpus
  // test holds every program to it.
  double expected_metric = 0.8;
};

// ---- running one ------------------------------------------------------------------------------
struct RunOptions {
  bool checks = true;               // false: the same program with no Session attached (a reference outcome)
  debug::DiagnoseOptions diagnose;  // its report_dir, progress, ... (num_classes is set per task)
  std::function<void(const std::string&)> progress;
};

struct Outcome {
  double metric = 0.0;      // on the test split: accuracy (multiclass/binary), mean label accuracy
                            // (multilabel) or R^2 (regression)
  double val_metric = 0.0;  // the same on the validation split (NaN without one)
  double train_loss = 0.0;  // the mean loss of the last epoch's steps
  int64_t steps = 0;
  int64_t epochs = 0;  // epochs run (early stopping may end sooner)
  double seconds = 0.0;
  debug::RunReport report;  // empty when RunOptions::checks is false
  std::string error;        // the program raised (the run's outcome is then its metric so far)
};

// Trains the program once with training seed `seed` (the data stay the program's own).
Outcome run_program(const Program& p, uint64_t seed, const RunOptions& o = {});

// The name of the metric for the program's task ("test accuracy", "test R^2").
std::string metric_name(const Program& p);

}  // namespace gradsleuth::debug::corpus
