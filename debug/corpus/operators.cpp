// The fault operators (debug/corpus/operators.h): each writes one fault into a copy of a healthy
// program. DeepCrime's 24 operators first, by its groups, then the program-text families.
#include "debug/corpus/operators.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/error.h"
#include "core/format.h"

namespace gradsleuth::debug::corpus {
namespace {

constexpr const char* kDeepCrime = "DeepCrime (Humbatova, Jahangirova and Tonella, ISSTA 2021)";
constexpr const char* kIslam =
    "Islam et al., \"A comprehensive study on deep learning bug characteristics\" (FSE 2019)";
constexpr const char* kDefect4ml = "defect4ML (Morovati et al., 2023); Islam et al. (FSE 2020)";

std::string pct(double s) { return str_printf("%g%%", 100.0 * s); }

Mutant mutant(const Program& p, const std::string& id, const std::string& what) {
  Mutant m;
  m.program = p;
  m.program.name = p.name + "+" + id;
  m.description = what;
  return m;
}

bool classifies(const Program& p) { return p.data.task == Task::Multiclass || p.data.task == Task::Binary; }
bool multiclass(const Program& p) { return p.data.task == Task::Multiclass; }
bool own_loop(const Program& p) { return p.loop.api == "own-loop"; }
bool has_hidden(const Program& p) { return !p.model.hidden.empty() && p.model.arch != "resmlp"; }
bool always(const Program&) { return true; }
std::string act_name(double s) {
  static const char* acts[] = {"sigmoid", "tanh", "identity", "relu"};
  return acts[static_cast<size_t>(std::clamp(s, 0.0, 3.0))];
}
// The hidden layer a layer operator mutates: the seed picks one.
int64_t pick_layer(const Program& p, uint64_t seed) {
  return static_cast<int64_t>(seed % std::max<size_t>(p.model.hidden.size(), 1));
}

// The table below leaves Operator::metric_blind out of each row and fills it in from one list at its end.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
std::vector<Operator> make_operators() {
  std::vector<Operator> ops;
  // ---------------- DeepCrime: training data ----------------
  ops.push_back({"TCL",
                 "change labels of training data",
                 "training data",
                 kDeepCrime,
                 {0.1, 0.3, 0.5},
                 "share of training labels changed",
                 {"D12", "L9:train-labels-disagree"},
                 false,
                 "",
                 [](const Program& p) { return p.data.task != Task::Regression; },
                 [](const Program& p, double s, uint64_t) {
                   Mutant m = mutant(p, "TCL", "the labels of " + pct(s) + " of the training examples changed");
                   m.program.data.fault_label_change = s;
                   return m;
                 }});
  ops.push_back({"TRD",
                 "remove portion of training data",
                 "training data",
                 kDeepCrime,
                 {0.5, 0.8, 0.9},
                 "share of training examples removed",
                 {"D16", "L7", "L9:generalisation-gap", "L9:undertrained"},
                 false,
                 "",
                 always,
                 [](const Program& p, double s, uint64_t) {
                   Mutant m = mutant(p, "TRD", pct(s) + " of the training examples removed");
                   m.program.data.fault_remove = s;
                   return m;
                 }});
  ops.push_back({"TUD",
                 "unbalance training data",
                 "training data",
                 kDeepCrime,
                 {0.5, 0.8, 0.95},
                 "share of the last class removed (less for the others)",
                 {"D3", "D15"},
                 false,
                 "",
                 classifies,
                 [](const Program& p, double s, uint64_t) {
                   Mutant m = mutant(p, "TUD", "up to " + pct(s) + " of each class's training examples removed");
                   m.program.data.fault_unbalance = s;
                   return m;
                 }});
  ops.push_back({"TAN",
                 "add noise to training data",
                 "training data",
                 kDeepCrime,
                 {0.5, 1.0, 2.0},
                 "noise std in units of each feature's std",
                 {"D14", "L9:train-labels-disagree"},
                 false,
                 "",
                 always,
                 [](const Program& p, double s, uint64_t) {
                   Mutant m = mutant(p, "TAN", str_printf("gaussian noise of %g std added to the training inputs", s));
                   m.program.data.fault_noise = s;
                   return m;
                 }});
  ops.push_back({"TCO",
                 "make output classes overlap",
                 "training data",
                 kDeepCrime,
                 {0.1, 0.3, 0.5},
                 "share of training examples copied with another label",
                 {"D12"},
                 false,
                 "",
                 classifies,
                 [](const Program& p, double s, uint64_t) {
                   Mutant m = mutant(p, "TCO", pct(s) + " of the training examples copied with another class's label");
                   m.program.data.fault_overlap = s;
                   return m;
                 }});
  // ---------------- DeepCrime: hyperparameters ----------------
  ops.push_back({"HBS",
                 "change batch size",
                 "hyperparameters",
                 kDeepCrime,
                 {4, 16, 0.125},
                 "factor on the batch size",
                 {"W9", "L7", "O8", "O6", "L9:undertrained", "L9:lr-probe-too-low"},
                 false,
                 "",
                 own_loop,
                 [](const Program& p, double s, uint64_t) {
                   Mutant m = mutant(p, "HBS",
                                     str_printf("batch size %lld instead of %lld",
                                                (long long)std::max<int64_t>(1, std::llround(p.loop.batch_size * s)),
                                                (long long)p.loop.batch_size));
                   m.program.loop.batch_size =
                       std::max<int64_t>(1, std::llround(static_cast<double>(p.loop.batch_size) * s));
                   return m;
                 }});
  ops.push_back({"HLR",
                 "change learning rate",
                 "hyperparameters",
                 kDeepCrime,
                 {0.01, 0.1, 30},
                 "factor on the learning rate",
                 {"O6", "O8", "L9:lr-probe-too-low"},
                 false,
                 "",
                 always,
                 [](const Program& p, double s, uint64_t) {
                   Mutant m =
                       mutant(p, "HLR", str_printf("learning rate %g instead of %g", p.optim.lr * s, p.optim.lr));
                   m.program.optim.lr *= s;
                   return m;
                 }});
  ops.push_back({"HNE",
                 "change number of epochs",
                 "hyperparameters",
                 kDeepCrime,
                 {0.5, 0.25, 0.125},
                 "factor on the epochs",
                 {"L7", "L9:undertrained"},
                 false,
                 "",
                 always,
                 [](const Program& p, double s, uint64_t) {
                   Mutant m = mutant(p, "HNE",
                                     str_printf("%lld epochs instead of %lld",
                                                (long long)std::max<int64_t>(1, std::llround(p.loop.epochs * s)),
                                                (long long)p.loop.epochs));
                   m.program.loop.epochs = std::max<int64_t>(1, std::llround(static_cast<double>(p.loop.epochs) * s));
                   return m;
                 }});
  ops.push_back({"HDB",
                 "disable batching",
                 "hyperparameters",
                 kDeepCrime,
                 {1},
                 "(one strength: the whole training set in one batch)",
                 {"W9", "L7", "O8", "L9:undertrained", "L9:lr-probe-too-low"},
                 false,
                 "",
                 own_loop,
                 [](const Program& p, double, uint64_t) {
                   Mutant m = mutant(p, "HDB", "the whole training set in one batch (no mini-batches)");
                   m.program.loop.batch_size = 0;
                   m.program.loop.accumulate = 1;
                   return m;
                 }});
  // ---------------- DeepCrime: activation ----------------
  ops.push_back({"ACH",
                 "change activation function",
                 "activation",
                 kDeepCrime,
                 {0, 1, 3},
                 "0 sigmoid, 1 tanh, 3 relu",
                 {"M8", "M7", "M23", "O1", "M27"},
                 false,
                 "",
                 has_hidden,
                 [](const Program& p, double s, uint64_t seed) {
                   std::string a = act_name(s);
                   if (a == p.model.activation) a = a == "relu" ? "sigmoid" : "relu";
                   const int64_t l = pick_layer(p, seed);
                   Mutant m = mutant(p, "ACH", "hidden layer " + std::to_string(l) + "'s activation changed to " + a);
                   m.program.model.fault_layer = l;
                   m.program.model.fault_activation = a;
                   return m;
                 }});
  ops.push_back({"ARM",
                 "remove activation function",
                 "activation",
                 kDeepCrime,
                 {1},
                 "(one strength: the activation of one hidden layer removed)",
                 {"M23"},
                 false,
                 "",
                 has_hidden,
                 [](const Program& p, double, uint64_t seed) {
                   const int64_t l = pick_layer(p, seed);
                   Mutant m = mutant(p, "ARM", "hidden layer " + std::to_string(l) + "'s activation removed");
                   m.program.model.fault_layer = l;
                   m.program.model.fault_activation = "identity";
                   return m;
                 }});
  ops.push_back({"AAL",
                 "add activation function to layer",
                 "activation",
                 kDeepCrime,
                 {0, 1, 2},
                 "0 relu, 1 softmax, 2 sigmoid after the output layer",
                 {"M3", "L2", "L3"},
                 false,
                 "",
                 [](const Program& p) { return p.loss.kind != "nll"; },
                 [](const Program& p, double s, uint64_t) {
                   static const char* acts[] = {"relu", "softmax", "sigmoid"};
                   std::string a = acts[static_cast<size_t>(std::clamp(s, 0.0, 2.0))];
                   if (a == "softmax" && p.data.task != Task::Multiclass) a = "sigmoid";
                   Mutant m = mutant(p, "AAL", a + " added after the output layer");
                   m.program.model.fault_add_activation = a;
                   return m;
                 }});
  // ---------------- DeepCrime: regularisation ----------------
  ops.push_back({"RAW",
                 "add weights regularisation",
                 "regularisation",
                 kDeepCrime,
                 {0.01, 0.1, 1.0},
                 "coupled weight decay added",
                 {"O3:weight-decay-too-strong", "O8"},
                 false,
                 "",
                 [](const Program& p) { return p.optim.weight_decay == 0.0 && p.optim.kind != "adamw"; },
                 [](const Program& p, double s, uint64_t) {
                   Mutant m = mutant(p, "RAW", str_printf("weight decay %g added", s));
                   m.program.optim.weight_decay = s;
                   return m;
                 }});
  ops.push_back({"RCW",
                 "change weights regularisation",
                 "regularisation",
                 kDeepCrime,
                 {10, 100, 1000},
                 "factor on the weight decay",
                 {"O3:weight-decay-too-strong", "O8"},
                 false,
                 "",
                 [](const Program& p) { return p.optim.weight_decay > 0.0; },
                 [](const Program& p, double s, uint64_t) {
                   Mutant m = mutant(
                       p, "RCW",
                       str_printf("weight decay %g instead of %g", p.optim.weight_decay * s, p.optim.weight_decay));
                   m.program.optim.weight_decay *= s;
                   return m;
                 }});
  ops.push_back({"RRW",
                 "remove weights regularisation",
                 "regularisation",
                 kDeepCrime,
                 {1},
                 "(one strength: the weight decay removed)",
                 {"L7", "L9:generalisation-gap"},
                 false,
                 "",
                 [](const Program& p) { return p.optim.weight_decay > 0.0; },
                 [](const Program& p, double, uint64_t) {
                   Mutant m = mutant(p, "RRW", "the weight decay removed");
                   m.program.optim.weight_decay = 0.0;
                   return m;
                 }});
  ops.push_back({"RCD",
                 "change dropout rate",
                 "regularisation",
                 kDeepCrime,
                 {0.5, 0.8, 0.95},
                 "the dropout probability",
                 {"M24"},
                 false,
                 "",
                 [](const Program& p) { return p.model.dropout > 0.0; },
                 [](const Program& p, double s, uint64_t) {
                   Mutant m = mutant(p, "RCD", str_printf("dropout %g instead of %g", s, p.model.dropout));
                   m.program.model.dropout = s;
                   return m;
                 }});
  ops.push_back({"RCP",
                 "change patience parameter",
                 "regularisation",
                 kDeepCrime,
                 {1},
                 "(one strength: early stopping with patience 1)",
                 {"L7", "L9:undertrained"},
                 false,
                 "",
                 [](const Program& p) { return own_loop(p) && p.data.use_validation; },
                 [](const Program& p, double, uint64_t) {
                   Mutant m = mutant(p, "RCP", "early stopping with patience 1");
                   m.program.loop.patience = 1;
                   m.program.loop.epochs = std::max<int64_t>(p.loop.epochs, 12);
                   return m;
                 }});
  ops.push_back({"RPN",
                 "count a prior once per minibatch",
                 "regularisation",
                 kIslam,
                 {1},
                 "(one strength: the prior's term not divided by the training examples)",
                 {"O3:weight-decay-too-strong"},
                 false,
                 "",
                 [](const Program& p) { return p.loss.prior > 0.0 && own_loop(p); },
                 [](const Program& p, double, uint64_t) {
                   Mutant m = mutant(p, "RPN", "the prior's penalty added to each minibatch mean without 1/N");
                   m.program.loss.fault_prior_factor = static_cast<double>(p.data.train);
                   return m;
                 }});
  ops.push_back({"RPS",
                 "subtract a penalty",
                 "regularisation",
                 kIslam,
                 {1, 10, 100},
                 "factor on the prior's term, its sign flipped",
                 {"O3:penalty-wrong-sign"},
                 true,
                 "",
                 [](const Program& p) { return p.loss.prior > 0.0 && own_loop(p); },
                 [](const Program& p, double s, uint64_t) {
                   Mutant m = mutant(p, "RPS", str_printf("the prior's penalty subtracted (x %g)", s));
                   m.program.loss.fault_prior_factor = -s;
                   return m;
                 }});
  // ---------------- DeepCrime: weights ----------------
  ops.push_back({"WCI",
                 "change weights initialisation",
                 "weights",
                 kDeepCrime,
                 {0, 1, 2},
                 "0 zeros, 1 std 1, 2 std 1e-4 on one layer",
                 {"M9", "M27", "M25", "M8", "M7", "O1"},
                 false,
                 "",
                 has_hidden,
                 [](const Program& p, double s, uint64_t seed) {
                   static const char* inits[] = {"zeros", "normal1", "tiny"};
                   const std::string i = inits[static_cast<size_t>(std::clamp(s, 0.0, 2.0))];
                   const int64_t l = pick_layer(p, seed);
                   Mutant m = mutant(p, "WCI", "hidden layer " + std::to_string(l) + " initialised with " + i);
                   m.program.model.fault_layer = l;
                   m.program.model.fault_init = i;
                   return m;
                 }});
  ops.push_back({"WAB",
                 "add bias to a layer",
                 "weights",
                 kDeepCrime,
                 {1},
                 "(one strength: a bias on each layer that BatchNorm follows)",
                 {"M9"},
                 false,
                 "",
                 [](const Program& p) { return p.model.norm == "batch"; },
                 [](const Program& p, double, uint64_t) {
                   Mutant m = mutant(p, "WAB", "a bias added to each layer that BatchNorm follows");
                   m.program.model.fault_bias = 1;
                   return m;
                 }});
  ops.push_back({"WRB",
                 "remove bias from a layer",
                 "weights",
                 kDeepCrime,
                 {1},
                 "(one strength: every layer's bias removed)",
                 {"M9"},
                 false,
                 "",
                 always,
                 [](const Program& p, double, uint64_t) {
                   Mutant m = mutant(p, "WRB", "every layer's bias removed");
                   m.program.model.fault_bias = -1;
                   return m;
                 }});
  // ---------------- DeepCrime: loss, optimisation, validation ----------------
  ops.push_back(
      {"LCH",
       "change loss function",
       "loss",
       kDeepCrime,
       {1},
       "(one strength: MSE on one-hot labels for classification, BCE-style to MSE)",
       {"L1", "L4", "D6", "L3"},
       false,
       "",
       [](const Program& p) { return p.data.task != Task::Regression && p.loss.kind != "nll" && own_loop(p); },
       [](const Program& p, double, uint64_t) {
         Mutant m = mutant(p, "LCH",
                           multiclass(p) ? "MSE on one-hot labels instead of cross-entropy"
                                         : "MSE on the logits instead of BCE with logits");
         m.program.loss.kind = multiclass(p) ? "mse_onehot" : "mse";
         m.program.loss.label_smoothing = 0;
         // MSE takes no class weights (nn::MSELoss, as PyTorch's): a weighted loss loses them.
         if (p.loss.class_weights) {
           m.description += ", its class weights dropped";
           m.also_causes = {"D3:class-counts"};
           m.also_metric_blind =
               "the class weights that compensated an imbalance dropped with the loss: the rare classes weigh as "
               "little as they are frequent (D3), whatever an accuracy over a test split as imbalanced as training";
         }
         m.program.loss.class_weights = false;
         return m;
       }});
  ops.push_back({"OCH",
                 "change optimisation function",
                 "optimisation",
                 kDeepCrime,
                 {0, 1, 2},
                 "0 SGD, 1 Adam, 2 RMSprop, at the program's learning rate",
                 {"O6", "O8", "L9:lr-probe-too-low"},
                 false,
                 "",
                 always,
                 [](const Program& p, double s, uint64_t) {
                   static const char* kinds[] = {"sgd", "adam", "rmsprop"};
                   std::string k = kinds[static_cast<size_t>(std::clamp(s, 0.0, 2.0))];
                   if (k == p.optim.kind || (k == "adam" && p.optim.kind == "adamw")) k = k == "sgd" ? "adam" : "sgd";
                   Mutant m =
                       mutant(p, "OCH", k + " instead of " + p.optim.kind + " at lr " + str_printf("%g", p.optim.lr));
                   m.program.optim.kind = k;
                   return m;
                 }});
  ops.push_back({"OCG",
                 "change gradient clipping",
                 "optimisation",
                 kDeepCrime,
                 {0.1, 0.01, 0.001},
                 "the max gradient norm",
                 {"O9"},
                 false,
                 "",
                 always,
                 [](const Program& p, double s, uint64_t) {
                   Mutant m = mutant(p, "OCG", str_printf("gradients clipped to norm %g", s));
                   m.program.loop.clip_norm = s;
                   return m;
                 }});
  ops.push_back({"VRM",
                 "remove validation set",
                 "validation",
                 kDeepCrime,
                 {1},
                 "(one strength: no validation split)",
                 {},
                 false,
                 "a missing validation split changes what the program decides (early stopping, the plateau schedule), "
                 "not how it trains; the report lists the checks it skips for want of one",
                 [](const Program& p) { return p.data.use_validation; },
                 [](const Program& p, double, uint64_t) {
                   Mutant m = mutant(p, "VRM", "the validation split removed");
                   m.program.data.use_validation = false;
                   return m;
                 }});
  // ---------------- the program text: splits, preprocessing, mode, parameters, schedules, reductions ----------------
  ops.push_back({"SLK",
                 "leak validation data into training",
                 "splits",
                 kIslam,
                 {0.2, 0.5, 1.0},
                 "share of validation rows copied into train",
                 {"D13"},
                 true,
                 "",
                 always,
                 [](const Program& p, double s, uint64_t) {
                   Mutant m = mutant(p, "SLK", pct(s) + " of the validation rows copied into the training split");
                   m.program.data.fault_leak = s;
                   return m;
                 }});
  ops.push_back({"SMA",
                 "misalign inputs and labels",
                 "splits",
                 kIslam,
                 {0.1, 0.3, 1.0},
                 "share of training rows whose inputs move without their labels",
                 {"D4"},
                 true,
                 "",
                 always,
                 [](const Program& p, double s, uint64_t) {
                   Mutant m = mutant(
                       p, "SMA", "the inputs of " + pct(s) + " of the training rows reordered without their labels");
                   m.program.data.fault_misalign = s;
                   return m;
                 }});
  ops.push_back({"PSP",
                 "preprocess one split differently",
                 "preprocessing",
                 kDefect4ml,
                 {0, 1, 2},
                 "0 validation/test left raw, 1 divided by 255 once more, 2 standardised with their own statistics",
                 {"D10", "D14"},
                 true,
                 "",
                 [](const Program& p) { return p.data.standardise; },
                 [](const Program& p, double s, uint64_t) {
                   static const char* how[] = {"raw", "scaled", "own"};
                   const std::string h = how[static_cast<size_t>(std::clamp(s, 0.0, 2.0))];
                   Mutant m = mutant(p, "PSP", "validation and test preprocessed differently from train (" + h + ")");
                   m.program.data.fault_preprocess = h;
                   return m;
                 }});
  ops.push_back({"PAE",
                 "augment the evaluation splits",
                 "preprocessing",
                 kDefect4ml,
                 {1},
                 "(one strength: the training noise augmentation applied to validation and test)",
                 {"D10", "D14"},
                 true,
                 "",
                 [](const Program& p) { return p.data.augment == "noise"; },
                 [](const Program& p, double, uint64_t) {
                   Mutant m = mutant(p, "PAE", "the training augmentation applied to validation and test too");
                   m.program.data.fault_augment_eval = true;
                   return m;
                 }});
  ops.push_back({"MEV",
                 "leave the model in eval mode",
                 "mode",
                 kIslam,
                 {1},
                 "(one strength: model.eval() for validation, model.train() never called again)",
                 {"M2"},
                 true,
                 "",
                 [](const Program& p) { return own_loop(p) && (p.model.dropout > 0 || p.model.norm == "batch"); },
                 [](const Program& p, double, uint64_t) {
                   Mutant m = mutant(p, "MEV", "model.eval() for validation and model.train() never called again");
                   m.program.loop.fault_eval_left_on = true;
                   return m;
                 }});
  ops.push_back({"MTE",
                 "validate in training mode",
                 "mode",
                 kIslam,
                 {1},
                 "(one strength: the program's own validation without model.eval())",
                 {"M2"},
                 true,
                 "",
                 [](const Program& p) {
                   return own_loop(p) && (p.model.dropout > 0 || p.model.norm == "batch") &&
                          (p.loop.patience > 0 || p.schedule.kind == "plateau");
                 },
                 [](const Program& p, double, uint64_t) {
                   Mutant m =
                       mutant(p, "MTE", "validation run without model.eval() (dropout and BatchNorm in training mode)");
                   m.program.loop.fault_train_mode_eval = true;
                   return m;
                 }});
  ops.push_back({"POH",
                 "leave the head out of the optimizer",
                 "parameters",
                 kIslam,
                 {0, 1},
                 "0 the output layer, 1 the first hidden layer",
                 {"M10"},
                 true,
                 "",
                 [](const Program& p) { return own_loop(p) && !p.model.freeze_body; },
                 [](const Program& p, double s, uint64_t) {
                   Mutant m = mutant(p, "POH",
                                     s < 0.5 ? "the output layer's parameters not given to the optimizer"
                                             : "the first hidden layer's parameters not given to the optimizer");
                   (s < 0.5 ? m.program.optim.fault_head_outside : m.program.optim.fault_first_outside) = true;
                   return m;
                 }});
  ops.push_back(
      {"SSR",
       "step a schedule at the wrong rate",
       "schedules",
       kDefect4ml,
       {1},
       "(one strength: an epoch schedule stepped every batch, or a batch schedule every epoch)",
       {"O6", "O8"},
       true,
       "",
       [](const Program& p) { return own_loop(p) && p.schedule.kind != "none" && p.schedule.kind != "plateau"; },
       [](const Program& p, double, uint64_t) {
         Mutant m = mutant(p, "SSR",
                           p.schedule.per_batch ? "the per-batch schedule stepped once per epoch"
                                                : "the per-epoch schedule stepped every batch");
         m.program.schedule.fault_stepped = p.schedule.per_batch ? "epoch" : "batch";
         return m;
       }});
  ops.push_back({"RSU",
                 "sum the loss instead of averaging it",
                 "reductions",
                 kIslam,
                 {1},
                 "(one strength: reduction sum, the learning rate tuned for a mean)",
                 {"L6", "O6", "O8"},
                 true,
                 "",
                 own_loop,
                 [](const Program& p, double, uint64_t) {
                   Mutant m = mutant(p, "RSU", "the loss summed over the batch instead of averaged");
                   m.program.loss.reduction = "sum";
                   return m;
                 }});
  ops.push_back({"RSC",
                 "scale the loss",
                 "reductions",
                 kIslam,
                 {10, 100, 0.01},
                 "factor on the loss before backward",
                 {"L6", "O6", "O8", "W9", "L9:lr-probe-too-low"},
                 false,
                 "",
                 own_loop,
                 [](const Program& p, double s, uint64_t) {
                   Mutant m = mutant(p, "RSC", str_printf("the loss multiplied by %g before backward", s));
                   m.program.loss.scale = s;
                   return m;
                 }});
  ops.push_back({"RAC",
                 "accumulate gradients without dividing",
                 "reductions",
                 kIslam,
                 {1},
                 "(one strength: micro-batch losses not divided by the accumulation count)",
                 {"W9", "O6", "O8", "L6"},
                 true,
                 "",
                 [](const Program& p) { return own_loop(p) && p.loop.accumulate > 1; },
                 [](const Program& p, double, uint64_t) {
                   Mutant m = mutant(p, "RAC", "the micro-batch losses summed over the accumulation, not averaged");
                   m.program.loop.fault_accumulate_unscaled = true;
                   return m;
                 }});
  ops.push_back({"LZG",
                 "never zero the gradients",
                 "loop",
                 kIslam,
                 {1},
                 "(one strength: optimizer.zero_grad() missing from the loop)",
                 {"O5"},
                 true,
                 "",
                 own_loop,
                 [](const Program& p, double, uint64_t) {
                   Mutant m = mutant(p, "LZG", "optimizer.zero_grad() never called");
                   m.program.loop.fault_no_zero_grad = true;
                   return m;
                 }});
  // The faults that stay faults where the test metric does not move (docs/corpus.md, "Flags on
  // equivalent mutants").
  const std::pair<const char*, const char*> blind[] = {
      {"TCL",
       "a share of the training labels wrong: the supervision contradicts the data (L9: the trained model is "
       "right on more of validation than of its own training data), whatever a large-margin task's metric"},
      {"TRD",
       "examples lost to a filter or a split: the model learns from less than the program holds; an easy task "
       "still reaches its test metric, the gap between the splits grows (D16, L7, L9)"},
      {"TUD",
       "the training classes sampled at other frequencies than the population the model is scored on: a prior "
       "shift between the splits (D3, D15), whatever the metric"},
      {"TAN",
       "noise written into the stored training inputs (not a fresh draw per batch, as augmentation is): the "
       "training split no longer follows the validation and test distribution (D14), whatever the metric"},
      {"TCO",
       "the same inputs under two labels: contradictory supervision no model can fit (D12), whatever the metric"},
      {"ARM",
       "two linear layers with no activation between them compose to one linear map: the layer's parameters add "
       "no capacity (M23), whatever the metric"},
      {"AAL",
       "an activation after the output layer, before a loss that expects raw scores (softmax into cross-entropy, "
       "sigmoid into BCE with logits, ReLU on logits): the loss reads the wrong quantity and its gradients "
       "shrink (M3, L2, L3); a separable task still trains"},
      {"WCI",
       "a layer initialised at zero, at std 1 whatever its fan-in, or at 1e-4: the signal's scale is wrong from "
       "the first step (M9); BatchNorm or an adaptive optimizer rescues the metric, not the initialisation"},
      {"RCD",
       "a drop probability of 0.8 or more is the keep probability written where the drop probability goes "
       "(TensorFlow 1's keep_prob against p): most units are dropped (M24), whatever a wide model's metric"},
      {"OCH",
       "an optimizer swapped without retuning its learning rate runs outside the range its step is made for "
       "(O8: Adam at 0.05, SGD at 0.001); a forgiving task survives it"},
      {"HLR",
       "a learning rate moved 30x up or 100x down leaves the range its optimizer's step is made for, as OCH "
       "does (O8: Adam at 0.03-0.06, where 86% of a ReLU layer of `spirals` dies); a forgiving task survives it"},
      {"OCG",
       "a clipping threshold below every step's gradient norm clips every step: the run takes steps of a fixed "
       "length, at another learning rate than it sets (O9), whatever a forgiving task's metric"},
      {"HNE",
       "a run cut to a fraction of its epochs while its validation loss still falls by a third per window, and "
       "training on lowers it by as much again (L9's undertrained), stopped early: a few hundred test examples "
       "near the task's ceiling do not show the point of accuracy it costs"},
  };
  for (const auto& [id, why] : blind)
    for (Operator& o : ops)
      if (o.id == id) o.metric_blind = why;
  return ops;
}
#pragma GCC diagnostic pop

}  // namespace

Mutant Operator::mutate(const Program& p, double strength, uint64_t seed) const {
  GS_CHECK(applies(p), "mutate " + id, "the operator '", name, "' does not apply to the program '", p.name, "' (",
           p.summary, ")");
  Mutant m = apply(p, strength, seed);
  m.program.expected_metric = 0.0;
  return m;
}

const std::vector<Operator>& fault_operators() {
  static const std::vector<Operator> ops = make_operators();
  return ops;
}

const Operator& fault_operator(const std::string& id) {
  std::string want = id;
  std::transform(want.begin(), want.end(), want.begin(), [](unsigned char c) { return std::toupper(c); });
  std::string ids;
  for (const Operator& o : fault_operators()) {
    if (o.id == want) return o;
    ids += (ids.empty() ? "" : ", ") + o.id;
  }
  throw Error("mutate", "no operator '" + id + "'; the operators are: " + ids + " (gradsleuth mutate --list)");
}

}  // namespace gradsleuth::debug::corpus
