// W2, the pre-training gate: one call on one batch before training runs the structural checks,
// the forward, the backward and the probes, and reports each failed phase as a finding.
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "debug/checks/loss/loss_checks.h"
#include "debug/checks/model/model_checks.h"
#include "debug/checks/optim/optim_checks.h"
#include "debug/evidence/finding.h"
#include "optim/optimizer.h"

namespace gradsleuth::debug {

// ---- W2 -----------------------------------------------------------------------------
struct GateOptions {
  ModelCheckOptions model;
  LossCheckOptions loss;
  OptimCheckOptions optim;
  bool overfit = true;       // M14 (the slowest part: o.model.overfit_steps steps on the batch)
  bool gradcheck = true;     // M13 on every layer with parameters or a custom op, then the whole model's input gradient
                             // (float64, a few rows)
  bool batch_mixing = true;  // M6
  bool reduction = true;     // L6
  int64_t num_classes = -1;  // L4; -1: the output's last dim for class targets
  // L4: the nn::Loss's type name ("CrossEntropyLoss") when the loss is one; "" for a plain function,
  // which L4 judges against log C when it gets class indices.
  std::string loss_type;
  // L4: the nn::Loss sums over the batch (Reduction::Sum): its first value is judged against its own for
  // an output that prefers no class (B x log C for cross-entropy), not against log C.
  bool loss_summed = false;
  // M2's repeated calls: whether the training loader shuffles (1) or keeps its order (0); -1 unknown. A
  // model that carries state between calls warns only where consecutive batches are unrelated.
  int shuffled = -1;
};

// One call before training, on one batch (x, y): M11 devices/dtypes, M10
// trainable parameters (with the optimizer when given), M1 shape trace, M4
// shared weights, M9 initialisation, M23 linear layers with no non-linearity
// between them, M24 dropout rates, M27 activation variance across layers, O8 the
// learning rate (with the optimizer),
// the train/eval probe (M2: a random layer
// whose mean training output is not its eval output), the forward with the
// randomness off (M12 when non-finite), M3, L4 initial loss and initial outputs against the targets, the backward (O1
// gradient health, M5 gradient flow), M6 batch mixing, M13 per-layer gradient
// check (layers with parameters and custom ops; then the whole model's input
// gradient), L6 reduction and M14 overfit one batch. The model's parameters,
// buffers, gradients and modes are left as they were.
// It does not throw for errors the model or the loss raise: each phase that fails becomes an
// error finding (phase_failure) and the gate goes on with the phases that do not depend on it
// (a loss that rejects its target skips L4, O1, M5, L6 and M14, not M6 and M13).
// `zero_by_construction`, when given, receives the parameters whose gradient the gate found zero by
// construction (redundant biases): the training monitor then leaves them to that finding (O1, M25).
// `zero_until_first_step`, when given, receives those whose gradient is zero only because a layer
// after them starts at zero (a zero-initialised head): the monitor's first step sees the same.
Report pretrain_gate(nn::Module& model, const Tensor& x, const Tensor& y, const LossFunction& loss,
                     const optim::Optimizer* optimizer = nullptr, const GateOptions& o = {},
                     std::vector<std::string>* zero_by_construction = nullptr,
                     std::vector<std::string>* zero_until_first_step = nullptr);

// The gate's loss probes (L4, L6, M3, M5, M14, M15, M16 and O1's gradients) train and judge
// loss(model(x), y). After the run they are judged again with what the loop's loss module took
// (TrainingHistory::loss_calls_on_output): where under half of its training calls took the model's
// output (a contrastive loss on the product of two forwards, a distance between embeddings), the loop
// trains another objective, and their findings become info saying so.
struct TrainingHistory;
void revise_gate_objective(Report& gate, const TrainingHistory& h);
// W2's errors of a loss that rejects the loader's labels as its target, where the training loop calls
// that loss with targets of another dtype or shape (a second view's projections) and trains without
// an error: the checks' premise, loss(model(x), y), is not the loop's objective. Each W2 error raised
// by the same message becomes info (the gate's, the epochs' validation passes' and the end-of-run checks'
// that call it again; the message's sizes may differ): `gate`
// holds the gate's findings, `labels` the targets the gate gave the loss; `r` is revised.
void revise_gate_premise(Report& r, const Report& gate, const TrainingHistory& h, const Tensor& labels);

// An exception a phase of the checks provoked in the user's model or loss, as an error finding:
// M20 for the engine's in-place error (its cause naming the phase), else W2 titled
// "<who> could not run the <phase>: <what>", saying which checks (`lost`, e.g. "O1, M5")
// could not run. pretrain_gate and debug::diagnose report failed phases this way.
Finding phase_failure(const std::exception& e, const std::string& who, const std::string& phase,
                      const std::string& lost);

}  // namespace gradsleuth::debug
