// The model checks (docs/checks.md) that look at a model's structure, its
// parameters and a few probing forward/backward passes:
//   M1 shape_trace            M3 check_final_activation   M4 check_shared_weights
//   M5 check_gradient_flow    M6 batch_mixing_test        M9 check_initialisation
//   M10 check_trainable       M11 check_devices_dtypes    M13 gradcheck_module
//   M14 overfit_one_batch     M15 input_independent_baseline
//   M16 capacity_check        M17 check_batchnorm_stats
//   M23 check_missing_nonlinearity                        M24 check_dropout_rate
//   M27 check_activation_variance
// (M2, M7, M8 watch training through hooks: activation_stats.h and monitor.h;
// M12, M18, M19, M20 listen to ops: anomaly.h.)
//
//   debug::Report r;
//   r.add(debug::check_shared_weights(*model));            // M4
//   r.add(debug::batch_mixing_test(*model, batch.x));      // M6
//   std::cout << r.str();
//
// Dimension letters: B = batch, C = classes, D... = one example's features.
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "debug/checks/check_util.h"
#include "debug/checks/host_copy.h"
#include "debug/checks/model/gradcheck.h"
#include "debug/evidence/finding.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace gradsleuth::nn {
class Loss;
}

namespace gradsleuth::debug {

struct ModelCheckOptions {
  // ---- M3 ----
  int64_t min_rows_final_activation = 8;            // judge non-negative logits only on batches this large
  // M6's next-step test (future_leak_test): the share of target positions that copy the next input, at least
  // this many positions, and the change of an earlier output (relative to their largest) that is a leak.
  double next_step_share = detail::kNextStepShare;
  int64_t next_step_min_positions = 16;
  double future_leak_tolerance = 1e-5;
  double min_zero_fraction_final_activation = 0.1;  // ... and only with this many exact zeros (a ReLU's mark)
  // ---- M6 ----
  int64_t mixing_row = 0;          // the example whose output is differentiated
  double mixing_tolerance = 1e-6;  // another row's |grad| above this fraction of row i's |grad| is coupling
  // ---- M9 ----
  // A weight's std outside [lowest expected / f, highest expected * f] is far
  // off; expected = PyTorch's default 1/sqrt(3 fan_in), Xavier, He.
  double init_std_factor = 3.0;
  // ---- M14 / M15 / M16: short training runs from the same starting point ----
  int64_t overfit_steps = 150;  // the base budget
  // The budget adapts (a healthy but slower-converging model must not fail because a fixed
  // budget ran out): once the base budget is spent, M14 goes on a window at a time while the
  // loss is still falling fast (the mean of the last window below the mean of the window
  // before by more than overfit_extend_drop), up to overfit_max_steps in all.
  int64_t overfit_max_steps = 0;     // the hard cap; 0: 4 * overfit_steps
  int64_t overfit_window = 0;        // steps per window; 0: max(10, overfit_steps / 5)
  double overfit_extend_drop = 0.1;  // "still falling fast": > 10% lower than the window before
  double overfit_lr = 3e-3;          // Adam
  double overfit_loss = 0.05;        // "loss -> ~0"
  // Class targets: a loss below this fraction of chance's, log C, also counts as ~0 once every example
  // is right (a tied or normalised output layer approaches 0 slowly; a second softmax stays above it).
  double overfit_loss_chance = 0.05;
  double overfit_accuracy = 1.0;     // "accuracy -> 1" (classification)
  // A loss that fell to this fraction of its first value or below also passes: the model fits the
  // batch, and what is left is the loss's own floor. A VAE's KL term and the noise of its sampling
  // keep its loss above 0 (32.3 -> 0.287 on a batch of 32, a fall of 112x); a final activation that
  // cannot reach the targets, or gradients that do not arrive, leave far more (2-10x falls).
  double overfit_relative = 0.025;
  // A batch that holds more target values than the model has trainable parameter values (a
  // segmentation's pixels: 4,608 per-pixel labels against 673 weights) cannot be memorised by any
  // model of that size: a loss that fell to this fraction of its first value or below is info.
  double overfit_dense_fall = 0.5;
  // Outputs not shaped as the targets (a density's parameters per row) under a loss that is the mean
  // of its rows' losses, where free outputs run the loss to minus infinity (a free dispersion per row):
  // a final loss below the best constant output's (one output row for every example) by this fraction
  // of max(|that loss|, 1) passes.
  double overfit_beat_constant = 0.1;
  // Real-valued targets over inputs of at most this many features (a curve, a surface): a batch is not
  // expected to be memorised (a function through noisy targets bends between neighbouring rows); where the
  // loss fell by half or more the test is info.
  int64_t overfit_low_dim_features = 2;
  // Against the loss's floor (free outputs trained on the batch): a final loss within overfit_loss of
  // it, or within this share of the way from the first loss to it, passes (a noise-corrected
  // cross-entropy 1.39 -> 0.488 against a floor of 0.431; a supervised contrastive loss 3.50 -> 1.99
  // against log 7).
  double overfit_floor_share = 0.1;
  // A loss that failed the test while still falling steadily at its end (the last window's mean below
  // the window before's by more than overfit_retry_drop, and below half the first loss) gets one more
  // run at overfit_retry_lr_factor x overfit_lr: under Adam each parameter moves about lr per step, so
  // parameters that must travel far (an ordinal model's cut points, 1 -> 6 apart) need distance / lr
  // steps; a model that cannot fit (dead units, labels it cannot see) does not pass at any rate.
  double overfit_retry_lr_factor = 10.0;
  double overfit_retry_drop = 0.02;
  // Where the retry ends within overfit_floor_match of the test's own final loss, and both lie below
  // overfit_floor_fall x the first loss, the loss levelled off at a floor of the batch itself: inputs the
  // model cannot tell apart with different targets (a next-token model over a window of 3 tokens: 2.81
  // -> 0.311, and 0.299 at 10x the rate; the window's own floor on the batch, 0.297). A model capped by
  // a fault stays far higher (a double softmax: log C - 0.7).
  double overfit_floor_fall = 0.2;
  double overfit_floor_match = 0.1;
  // Class targets whose loss reached its line while at most this share of the batch (and at least one row)
  // stayed wrong: the same test runs under cross-entropy, and where that fits every row, the model can
  // memorise the batch and the rows left are the loss's choice: a loss that bounds what a wrong row
  // costs (a noise-robust loss: generalized cross-entropy, MAE on probabilities) fits them last.
  double overfit_straggler_share = 1.0 / 16.0;
  int64_t baseline_steps = 60;       // M15 and M16 (per model)
  double baseline_lr = 1e-3;
  double baseline_margin = 0.05;  // real inputs must beat zeroed inputs by this fraction of the loss
  // After the run: the run's last validation loss against the zeroed-input run's loss on validation
  // rows (the same split, so no other rows' class mix in the comparison) must be lower by this fraction
  // on a split of baseline_val_rows rows or more; on a smaller split by more, as 1 / sqrt(rows), up to
  // baseline_margin (chance lets a model that ignores its inputs beat the baseline on a few rows).
  double baseline_val_margin = 0.02;
  int64_t baseline_val_rows = 1000;
  double capacity_margin = 0.0;   // the larger model must reach a loss lower by this fraction
  // ---- M2 at the end of a run (check_mode_agreement, behaviour.h) ----
  double mode_accuracy_gap = 0.2;  // eval-mode accuracy this far below the training mode's warns
  double mode_loss_ratio = 3.0;    // without accuracies: eval-mode loss > this x the training mode's + 0.1
  // with accuracies: eval-mode loss > this x the training mode's + 0.1 while the eval-mode accuracy is lower
  double mode_loss_ratio_with_accuracy = 2.0;
  // ---- M24 ----
  double max_dropout = 0.5;  // a dropout probability above this drops most activations
  // ---- M27 ----
  // The largest variance of a ReLU layer's input over the smallest, at initialisation, above
  // this flags. A PyTorch-style default initialisation (uniform, 1/sqrt(fan_in)) shrinks the
  // variance about 6x per ReLU layer, so a lower limit would flag plain 3-layer nets that train
  // well; 100 is reached from 4 such layers, or by one layer initialised at a wrong scale.
  double activation_variance_ratio = 100.0;
};

// Loss of a model's output against a target (a 0-dim tensor).
using LossFunction = std::function<Tensor(const Tensor& output, const Tensor& target)>;

// ---- M1 ----------------------------------------------------------------------------
struct ShapeRow {
  std::string path, type;
  std::string output_shape;  // "-" when the module did not run
  int64_t parameters = 0;    // its own (not its children's)
  int64_t calls = 0;
};
struct ShapeTrace {
  std::vector<ShapeRow> rows;
  int64_t total_parameters = 0, trainable_parameters = 0;
  std::string str() const;
  Finding finding() const;  // an info finding holding the table
};
// Runs `sample` through the model (no grad) and records each module's output shape.
ShapeTrace shape_trace(nn::Module& model, const Tensor& sample);

// ---- M3 ----------------------------------------------------------------------------
// Logits (B, C) that cannot be negative: the last leaf module is a ReLU/Sigmoid,
// or every value of a batch is >= 0 (rows summing to 1 are L2's double softmax,
// not this). `logits` may be undefined (structure only). `loss_type` is the type name of the
// loss the outputs go to: a Sigmoid before a BCELoss (which expects probabilities) is its input,
// not an activation too many. `target` (optional): floating targets, one per output, that are not
// all 0/1 and lie within the activation's range (a regression bounded on purpose: a Sigmoid on a
// target scaled into [0, 1], a ReLU on counts) leave a final activation alone, unless the loss
// takes logits (cross-entropy, BCEWithLogitsLoss); targets outside its range warn with that range.
// `sample` (optional): an input batch; the last layer is then the last one a forward of it calls (one
// ReLU registered after the output layer and called between the others is not last), else the last
// registered.
std::vector<Finding> check_final_activation(nn::Module& model, const Tensor& logits, const ModelCheckOptions& o = {},
                                            const std::string& loss_type = "", const Tensor& target = Tensor(),
                                            const Tensor& sample = Tensor());

// ---- M4 ----------------------------------------------------------------------------
// One module instance or one parameter reachable under two paths.
std::vector<Finding> check_shared_weights(nn::Module& model);

// ---- M5 ----------------------------------------------------------------------------
// After a backward: trainable parameters whose .grad is missing or all zero.
// `skip`: parameters whose zero gradient is by construction (find_redundant_biases).
std::vector<Finding> check_gradient_flow(nn::Module& model, const std::vector<std::string>& skip = {});
// M5's "got no gradient from backward" at the gate, judged again with the run as O1's
// (revise_gradient_missing): a parameter the loop's backward reached is info.
struct TrainingHistory;
void revise_parameter_unreached(Report& gate, const TrainingHistory& h);
// M23's collapsed pair, judged again with the run: where the training loss also read the first layer's
// output (TrainingHistory::linear_inputs_read_elsewhere), that output is an embedding trained for its own
// sake (a center loss on the features a linear head classifies): info.
void revise_linear_collapse(Report& gate, const TrainingHistory& h);
// M2's "something random runs at evaluation", judged again with the run: where M5 saw a layer built
// inside forward() (TrainingHistory::built_in_forward), its new weights at every call are that
// randomness, and M5 names the cause: info.
void revise_random_at_eval(Report& gate, const TrainingHistory& h);
// M5's findings on tensors the forward trains that no one registered, from what the run check in
// unregistered_leaf.cpp gathered: one that kept its values over `steps` (>= min_steps) steps; tensors made
// anew at every step (a layer built inside forward()).
Finding unregistered_tensor_finding(const std::string& name, const Shape& shape, int64_t steps, int64_t min_steps,
                                    double grad_norm);
Finding built_in_forward_finding(const std::vector<std::pair<std::string, Shape>>& tensors);

// ---- parameters replaced by assignment after registration (M5) -----------------------------
// A module member assigned a new tensor after register_parameter (`linear->weight = t`, a head
// re-initialised by assignment): the forward then uses a tensor that parameters(), the optimizer and
// checkpoints do not hold, and the registered one (never read again) gets no gradient. After a
// backward of `loss`, with M5's findings in `found`: the leaves of its graph that require grad, are
// no parameter of the model and are held by no group of `optimizer`, each paired with a parameter of
// its shape that M5 found without a gradient. That finding becomes a warning of kind
// parameter-replaced. A leaf the optimizer holds (a learnable tensor kept beside the model on
// purpose) is not one.
void explain_replaced_parameters(nn::Module& model, const Tensor& loss, const optim::Optimizer* optimizer,
                                 std::vector<Finding>& found);
// M5's all-zero gradients explained by the loss: after the gate's backward, with the gradient that reached
// the model's output (`output_grad`): output columns (dim 1) whose gradient is zero on every row, beside
// columns that have one, are columns the loss does not read. A parameter without a gradient that feeds
// those columns (one more forward of `x`: the gradient of the unread columns alone reaches it) becomes a
// warning of kind output-unread (a loss term that reads the wrong column).
void explain_unread_outputs(nn::Module& model, const Tensor& x, const Tensor& output_grad, std::vector<Finding>& found);

// ---- a layer's units nothing downstream reads (M5, kind units-unread) -------------------------
// After the gate's backward: Linear and Conv2d layers whose weight rows (output units, or channels) got
// an exactly zero gradient, weights and bias, beside rows that got one. Such units are raised far above
// their values in more forwards of `x` (eval mode; all at once, then one by one, 48 forwards at most): one
// that leaves the model's output exactly as it
// was is a unit the forward computes and never reads (a slice of the wrong columns); one that moves it
// was silenced by a ReLU after it (M7's). A warning per layer; empty when every unit got a gradient, or
// none did (a cut graph, M5's own).
std::vector<Finding> find_unread_units(nn::Module& model, const Tensor& x);
// ---- input columns the model never reads (M5, kind input-columns-unread) ----------------------
// Tabular inputs x (B, F), 2 <= F <= 64: each column's values rolled across the first 256 rows in one
// eval-mode forward each; a column that leaves every output exactly as it was, beside columns that move
// it, is a feature the forward never reads (a slice of the wrong columns, a branch given the wrong
// variable): a warning. Columns constant over the batch are not judged; nothing when no column moves the
// output, or the eval forward is random.
std::vector<Finding> find_unread_input_columns(nn::Module& model, const Tensor& x);

// ---- parameters the model uses in eval mode only (M5 info; softens M5, M10 and O1) ----------
// A trainable parameter that the training forward does not reach (`unreached`, from the gate's
// backward), that no group of `optimizer` holds, and whose gradient the same batch does reach in
// eval mode: it is fitted apart from the training loop, by design. Temperature scaling divides the
// logits by a temperature only at evaluation and fits it on held-out data after training (Guo et
// al., "On Calibration of Modern Neural Networks", 2017). The probe runs (x, y) through the model in
// eval mode and differentiates loss(out, y) (the output's squared sum when the loss raises); .grad
// and the modules' modes are put back. One info finding (kind eval-only-parameter) per parameter.
// A parameter the optimizer holds is meant to train: it stays M5's warning.
std::vector<Finding> find_eval_only_parameters(nn::Module& model, const Tensor& x, const Tensor& y,
                                               const LossFunction& loss, const optim::Optimizer* optimizer,
                                               const std::vector<std::string>& unreached);
// The warnings that the eval-only findings among `found` explain, made info: M5's and O1's about
// such a parameter's missing gradient, and M10's "in no optimizer group" when it names no other.
void soften_eval_only_findings(std::vector<Finding>& found);
// The same over a report, with the eval-only findings of `gate` (the gate's report: the run's O1
// is explained by the gate's probe).
void soften_eval_only_findings(Report& r, const Report& gate);

// Redundant biases (reported under O1 at info level): after a backward on (x, y), a 1-D
// parameter whose gradient is small (below 1000 x vanishing_grad_norm: float32's residue of a
// mean subtracted over a wide layer can sit either side of the vanishing threshold from one
// batch to the next) is shifted by a constant per
// entry, as large as its module's output (alternating signs), and the same batch's loss
// is computed again in training mode (dropout off, no gradients, the values, buffers and
// gradients put back). A loss that does not move (relative change <= 1e-4) means the
// parameter cannot affect the loss: a bias whose output goes into a normalisation that
// subtracts the per-channel mean (Linear/Conv followed by BatchNorm). Found by behaviour,
// not by layer type; a bias whose gradient vanishes for a real reason (dead units after
// it, a saturated activation) moves the loss when shifted and is not reported. One info
// finding per parameter; pass their names to OptimCheckOptions::zero_grad_by_construction
// and to check_gradient_flow's `skip` so the vanishing-gradient warnings stay silent.
std::vector<Finding> find_redundant_biases(nn::Module& model, const Tensor& x, const Tensor& y,
                                           const LossFunction& loss, double vanishing_grad_norm = 1e-7);

// ---- parameters initialised to zero (O1 info; softens O1, M5 and M9) -----------------------
// A parameter initialised to exactly zero that learns from its first step: a zero-initialised
// classifier head or last layer of a residual branch (Fixup; torchvision's zero_init_residual).
// Until its first update it passes no gradient to the parameters behind it, whose gradient is
// then zero at initialisation only. After a backward: the trainable parameters that are exactly
// zero while their own gradient is above vanishing_grad_norm take a small step along minus that
// gradient, the loss of (x, y) is differentiated again (training mode with the randomness off,
// library warnings muted), and the parameters whose gradient was at most vanishing_grad_norm and
// is above it now are the ones they held back. Values, .grad, buffers and modes are put back.
// A zero parameter that receives no gradient itself (a hidden layer whose ReLU units all sit at
// 0) is not one: it is dead, and the warnings about it stay.
struct ZeroInitProbe {
  struct Step {
    Tensor param, delta, original;
  };
  std::vector<std::string> zero;       // exactly zero, learning from their first step
  std::vector<std::string> held_back;  // a zero gradient only because of them
  std::vector<Step> steps;             // the small step each zero parameter took in the probe
  // Biases whose gradient stays zero after that step because a BatchNorm follows them (O1's info,
  // find_redundant_biases on the stepped model): behind a zero layer their redundancy cannot be told
  // from a dead branch until the layer has moved.
  std::vector<Finding> redundant;
  bool empty() const { return held_back.empty() && redundant.empty(); }
  bool holds_back(const std::string& parameter) const;
  bool is_zero(const std::string& parameter) const;
  // Puts the probe's small step on the zero parameters (on), or their zeros back (off): a check
  // that cannot judge a model whose output ignores its input yet (M6) runs one step later.
  void step(bool on) const;
  Finding finding() const;  // one info finding (O1) naming both lists
};
ZeroInitProbe probe_zero_initialised(nn::Module& model, const Tensor& x, const Tensor& y, const LossFunction& loss,
                                     double vanishing_grad_norm = 1e-7);
// The same with a loss module (a run check's); an error of the probe's own leaves it empty.
ZeroInitProbe probe_zero_initialised(nn::Module& model, const Tensor& x, const Tensor& y, nn::Loss& loss,
                                     double vanishing_grad_norm = 1e-7);
// The findings the probe explains, made info with the reason: O1's and M5's warnings about the
// parameters held back (their zero gradient), and M9's "initialised far too small" of the zero ones.
void soften_zero_init_findings(std::vector<Finding>& found, const ZeroInitProbe& probe);

// ---- M6 ----------------------------------------------------------------------------
// The batch-mixing test: loss = sum(w * output[i]) for a fixed random w (a plain
// sum is constant for a softmax row); d(loss)/d(x) must be zero on every row but
// i, and non-zero on row i. Probes three rows (o.mixing_row, the middle, the
// last: x[i] - x[0] leaves row 0 alone). Runs in eval mode (no dropout, running
// BatchNorm statistics); when the model has a BatchNorm-like layer (found by
// probe_mode_dependence: deterministic, but different in train mode), repeats in
// train mode with the randomness off and reports the coupling it adds as expected
// (info), not as a bug. Modes, the parameters' .grad and the buffers are restored.
// An input that cannot carry a gradient (token ids, any integer x) is tested by substitution
// instead: row i's input replaced by another example's, only out[i] may change.
// x (B, D...), B >= 2.
std::vector<Finding> batch_mixing_test(nn::Module& model, const Tensor& x, const ModelCheckOptions& o = {});
// M3 by the loss's optimum (loss_optimum.cpp): for up to max_rows rows of a batch with one output per row,
// the loss on that row alone at the output 0 against -0.25, -1, -3 and -10: the rows whose loss is lower at a
// negative output (a count of 0 under a Poisson loss that takes the log of the rate), and the first of them.
struct LossOptimum {
  int64_t rows = 0, below_zero = 0;
  double target = 0, output = 0, loss_at_zero = 0, loss_there = 0;
};
LossOptimum probe_loss_optimum(const std::function<Tensor(const Tensor&, const Tensor&)>& loss, const Tensor& input,
                               const Tensor& target, int64_t max_rows = 64);
// M6 across time: where the targets are the inputs shifted by one step (y[:, t] == x[:, t + 1] on
// ModelCheckOptions::next_step_share of the judged positions, (B, T) token ids or values), the input at one
// step is changed and the outputs at the steps before it must not move (eval mode, no gradients): an error
// when they do (a causal mask missing or inverted). Empty when the batch is no next-step prediction.
std::vector<Finding> future_leak_test(nn::Module& model, const Tensor& x, const Tensor& y,
                                      const ModelCheckOptions& o = {});
// Whether the model's forward (eval mode, no gradient) raises on the first half of the batch's rows
// while it takes the whole batch: a model over a fixed set of items (a graph convolution whose
// adjacency matrix has the set's size). `why` gets the error. Needs 8 rows or more.
bool takes_whole_batch_only(nn::Module& model, const Tensor& x, std::string* why = nullptr);

// ---- M9 ----------------------------------------------------------------------------
// Each Linear/Conv2d weight's std against the expectations for its fans.
std::vector<Finding> check_initialisation(nn::Module& model, const ModelCheckOptions& o = {});

// ---- M10 ---------------------------------------------------------------------------
// Trainable/frozen counts per module (info); frozen parameters the optimizer
// holds, trainable parameters no optimizer group holds, a frozen output layer.
std::vector<Finding> check_trainable(nn::Module& model, const optim::Optimizer* optimizer = nullptr);

// At the end of a run: trainable parameters that were in no optimizer group at its start
// (missing-from-optimizer) but are held by `optimizer` now, with no trainable parameter left outside
// it, were added during the run (add_param_group: a backbone unfrozen after some epochs, gradual
// unfreezing). The warning becomes info: they did change, from the step they were added on.
void revise_missing_from_optimizer(Report& gate, nn::Module& model, const optim::Optimizer& optimizer);

// ---- M11 ---------------------------------------------------------------------------
// Parameters on mixed devices or dtypes; an input whose dtype or device differs
// from the parameters' (float64 data into a float32 model computes in float64).
// `loader_batch`: x is a batch as the loader gives it, before the training loop's own conversions; a
// float32 batch beside float16/bfloat16 parameters is then not judged (a loop converts it per batch;
// the run check judges the input of the first forward).
std::vector<Finding> check_devices_dtypes(nn::Module& model, const Tensor& x = Tensor(), bool loader_batch = false);

// ---- M13 ---------------------------------------------------------------------------
// The numeric gradient check of a module: the module and x are copied to
// float64 (the module is converted back afterwards), the module is put in eval
// mode, and d(sum(v * module(x)))/d(x and every parameter) is compared with
// central differences. Returns one finding per failing tensor (error), naming
// the parameter and the worst element.
std::vector<Finding> gradcheck_module(nn::Module& module, const Tensor& x, const std::string& path = "",
                                      GradcheckOptions opts = {});
// Runs gradcheck_module on every leaf module that has parameters and on every
// module whose forward records a backward of its own (custom_op_modules: a
// gs::record the engine did not make, with or without parameters), feeding each
// the input it saw in one forward of `x` (first `rows` rows only).
std::vector<Finding> gradcheck_layers(nn::Module& model, const Tensor& x, int64_t rows = 4, GradcheckOptions opts = {});

// ---- M14, M15, M16: short training runs ------------------------------------------
// Every run starts from the model's current parameters and buffers and puts them
// back afterwards (a snapshot), with a fresh Adam; every layer that is random in
// train mode (found by probe_mode_dependence, whatever its type) runs in eval mode.
class ParamSnapshot {
 public:
  explicit ParamSnapshot(nn::Module& model);
  void restore();  // values, .grad cleared
 private:
  std::vector<std::pair<Tensor, Tensor>> saved_;  // (live tensor, copy)
};

// The findings about the labels (D3, D9, D15) made info where the gate found that the loss does not
// read its targets (M15's targets-unread: a density's likelihood of its inputs beside a dummy target).
void revise_unread_targets(Report& data, const Report& gate);

// Whether a loss reads (B, C) outputs as class scores for the int64 labels y (M14, and L4's expected
// initial loss): raising each row's score of its own label and raising the next class's instead move
// it in opposite directions (a cross-entropy, NLL, a focal or a corrected loss, or one of them
// inverted; not a contrastive loss over an embedding). True where it cannot tell (an error, NaN).
bool loss_scores_classes(const Tensor& out, const Tensor& y, const LossFunction& loss);

// M14: trains on one batch; the loss must fall below o.overfit_loss (and the
// accuracy reach o.overfit_accuracy for class targets) within o.overfit_steps,
// extended a window at a time while the loss is still falling fast (up to
// o.overfit_max_steps; see ModelCheckOptions). The finding's "steps" evidence is
// the number of steps used, "budget" the steps allowed in the end.
std::vector<Finding> overfit_one_batch(nn::Module& model, const Tensor& x, const Tensor& y, const LossFunction& loss,
                                       const ModelCheckOptions& o = {});
// M15: trains on batches (x_i, y_i) once with real and once with zeroed inputs,
// then compares the loss on a held-out batch: real inputs must do better. With `validation` (rows of
// the validation split, which has validation_rows rows in all), the zeroed-input run's lowest loss on
// those rows is kept in the evidence for revise_input_baseline.
std::vector<Finding> input_independent_baseline(nn::Module& model, const std::vector<std::pair<Tensor, Tensor>>& train,
                                                const std::pair<Tensor, Tensor>& held_out, const LossFunction& loss,
                                                const ModelCheckOptions& o = {},
                                                const std::pair<Tensor, Tensor>* validation = nullptr,
                                                int64_t validation_rows = 0);
// M15's warning at the gate judged again with the run (TrainingHistory's validation losses): a run whose
// last validation loss is below (1 - margin) x the zeroed-input run's loss on validation rows (the
// margin from baseline_val_margin and the split's rows), or without those below (1 - baseline_margin) x its held-out
// loss, did learn from its inputs, where the gate's few batches could not show it (a model with many parameters per
// example: an embedding over token ids). The warning turns into info.
void revise_input_baseline(Report& gate, const TrainingHistory& h, const ModelCheckOptions& o = {});
// M16: a small and a large model from `make(width)` trained the same way: the
// large one must reach the lower training loss.
std::vector<Finding> capacity_check(const std::function<nn::ModulePtr(int64_t width)>& make, int64_t small_width,
                                    int64_t large_width, const std::vector<std::pair<Tensor, Tensor>>& train,
                                    const LossFunction& loss, const ModelCheckOptions& o = {});

// ---- M17 ---------------------------------------------------------------------------
// BatchNorm layers that will use batch statistics at eval (no running
// statistics), or whose running statistics were never updated, when the model
// is (or is about to be) evaluated.
std::vector<Finding> check_batchnorm_stats(nn::Module& model);
// During training (the monitor): a BatchNorm evaluated without running statistics, or with ones
// never updated after `steps` training steps; a BatchNorm-like layer of the user's own evaluated
// with buffers that never changed.
Finding batchnorm_eval_finding(const std::string& label, bool no_running_stats, int64_t steps);
Finding stale_buffers_finding(const std::string& label, const std::string& buffers, int64_t steps);

// ---- M23 ---------------------------------------------------------------------------
// Two linear layers (Linear, Conv1d, Conv2d) in a row with no non-linearity between them: in
// one eval-mode forward of `x` without gradients, a linear layer whose input is exactly the
// previous linear layer's output (reshaped at most: a Flatten, a view, a dropout in eval mode
// change no value). The two collapse into one linear map. Found by values, so an activation
// written as a function in forward() (gs::relu(fc1(x))) counts as well as an nn::ReLU module.
std::vector<Finding> check_missing_nonlinearity(nn::Module& model, const Tensor& x);
// Two Embedding tables (different modules) looked up with the same indices in one forward, whose
// lookups reach the output only summed (the gradients with respect to the two lookups proportional):
// one table in effect, a positional table indexed by the token ids (kind embeddings-one-table).
std::vector<Finding> check_embeddings_one_table(nn::Module& model, const Tensor& x);

// ---- M24 ---------------------------------------------------------------------------
// Dropout layers (nn::Dropout) whose probability is above o.max_dropout: most of the
// activations are zeroed at every training step.
std::vector<Finding> check_dropout_rate(nn::Module& model, const ModelCheckOptions& o = {});

// ---- M27 ---------------------------------------------------------------------------
// The variance of every ReLU layer's input in one eval-mode forward of `x` (at initialisation,
// before training): a warning when the largest is more than o.activation_variance_ratio times
// the smallest. Needs two ReLU layers whose inputs vary.
std::vector<Finding> check_activation_variance(nn::Module& model, const Tensor& x, const ModelCheckOptions& o = {});

}  // namespace gradsleuth::debug
