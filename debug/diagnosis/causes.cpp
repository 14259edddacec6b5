// The diagnosis's tables (see diagnosis.h): the causes a check can confirm, and the symptoms with the
// causes that can explain them, most specific first. diagnosis.cpp searches them.
#include <string>
#include <vector>

#include "debug/diagnosis/diagnosis.h"

namespace gradsleuth::debug {

bool nonfinite_source(const Finding& f) {
  return f.fires() &&
         (f.check == "D2" || f.check == "M12" || f.check == "W4" || (f.check == "L5" && f.severity == Severity::Error));
}

namespace {

bool is(const Finding& f, const char* check) { return f.fires() && f.check == check; }
bool is(const Finding& f, const char* check, Kind k) { return f.fires() && f.is(check, k); }
// A finding about non-finite values. M18 is left out: its own forward in half precision overflows by itself.
bool nonfinite_member(const Finding& f) {
  if (!f.fires() || f.check == "M18") return false;
  if (nonfinite_source(f) || f.check == "O4") return true;
  if (f.check == "O1" && f.severity == Severity::Error) return true;  // NaN/Inf gradients
  return f.reports_nonfinite();
}

bool o1_vanishing(const Finding& f) {
  return f.severity == Severity::Warning &&
         (is(f, "O1", Kind::GradientVanishing) || is(f, "O1", Kind::VanishTowardsInput) ||
          is(f, "O1", Kind::GradientMissing));
}
bool o1_exploding(const Finding& f) {
  return f.severity == Severity::Warning &&
         (is(f, "O1", Kind::GradientExploding) || is(f, "O1", Kind::ExplodeTowardsInput));
}
bool cut_graph(const Finding& f) { return is(f, "M5", Kind::ParameterUnreached); }
// M25 about a gradient (the others name a layer output or a parameter's value).
bool m25_gradient(const Finding& f) { return is(f, "M25", Kind::ZeroGradient); }
// D3 about the trained model's per-class recall (the others count the labels).
bool d3_class_errors(const Finding& f) { return is(f, "D3", Kind::ClassRecallLow); }
bool zero_gradient(const Finding& f) {
  return is(f, "M5", Kind::GradientAllZero) || m25_gradient(f) || is(f, "O6", Kind::NeverUpdated) ||
         is(f, "M6", Kind::InputUnreached) || is(f, "M6", Kind::OutputIgnoresInput);
}
// L4 about the initial outputs against the targets (the others judge the initial loss).
bool output_init(const Finding& f) { return is(f, "L4", Kind::InitialOutputBiased); }
// M27 about the gradients of the first steps (the others measure activation variance).
bool symmetric_init(const Finding& f) { return is(f, "M27", Kind::SymmetricUnits); }
bool batch_mixing(const Finding& f) { return is(f, "M6") && !zero_gradient(f) && !f.is("M6", Kind::SeesFuture); }
// O6 judges the learning rate by what the run did (and its lr / 10 probe confirms it); O8 by its
// value against the optimizer's usual range before training: all confirm the same cause.
bool o6_too_high(const Finding& f) {
  return is(f, "O6", Kind::LrTooHigh) || is(f, "O6", Kind::UpdatesTooLarge) || is(f, "O6", Kind::LrProbeConfirms);
}
// O10 about the steps a loss scaler skipped (the others: its summary, clipping before unscale_).
bool scaler_skips(const Finding& f) {
  return is(f, "O10", Kind::ScaleCollapsed) || is(f, "O10", Kind::ScaleHalving) || is(f, "O10", Kind::StepsSkipped);
}
bool lr_too_high(const Finding& f) { return o6_too_high(f) || is(f, "O8", Kind::LrAboveRange); }
bool lr_too_low(const Finding& f) {
  return is(f, "O6", Kind::LrTooLow) || is(f, "O6", Kind::UpdatesTooSmall) || is(f, "O8", Kind::LrBelowRange) ||
         is(f, "L9", Kind::LrProbeTooLow);
}
bool lr_schedule(const Finding& f) {
  return is(f, "O6", Kind::ScheduleStartsAtZero) || is(f, "O6", Kind::ScheduleCollapses) ||
         is(f, "O6", Kind::ScheduleGrows) || is(f, "O6", Kind::ScheduleUnreached) ||
         is(f, "O6", Kind::ScheduleRebounds);
}
bool loss_unstable(const Finding& f) {
  return !nonfinite_member(f) &&
         (is(f, "L1", Kind::LossSpiking) || is(f, "L1", Kind::LossDiverging) || is(f, "L1", Kind::LossOscillating) ||
          (is(f, "O2") && f.severity == Severity::Warning) || is(f, "O3", Kind::None) ||
          is(f, "M26", Kind::VarianceBlewUp));
}
bool not_learning(const Finding& f) {
  if (!f.fires()) return false;
  if (f.check == "L1") return f.kind == Kind::LossStuck || f.kind == Kind::LossAtChance;
  if (f.check == "L7") return f.kind == Kind::Underfitting;
  return f.check == "M14" || f.check == "M15" || (lr_too_low(f) && f.check != "L9");  // L9's is a probe's verdict
}

// Each fault's own findings: every firing finding of its check.
#define GS_CHECK_CONFIRMS(ID) [](const Finding& f) { return is(f, ID); }

}  // namespace

bool reports_slow_learning(const Finding& f) {
  return not_learning(f) || lr_too_low(f) || is(f, "L9", Kind::Undertrained);
}

const std::vector<Cause>& diagnosis_causes() {
  static const std::vector<Cause> table = {
      // ---- the data ----
      {"nonfinite-input", "NaN/Inf in the inputs or labels", "D2", "counts NaN/Inf in a batch", true,
       GS_CHECK_CONFIRMS("D2")},
      {"misaligned-labels", "inputs and labels out of step", "D4",
       "hashes each loaded input back to the dataset and compares its label", true,
       [](const Finding& f) {
         return is(f, "D4") && f.kind != Kind::TargetsFromPredictions && f.kind != Kind::TargetsAreInputs;
       }},
      {"targets-from-predictions", "the model's own predictions passed to the loss as its targets", "D4",
       "the loss's targets against its input's top-scored class and the dataset's labels", true,
       [](const Finding& f) { return is(f, "D4", Kind::TargetsFromPredictions); }},
      {"targets-are-inputs", "the model's inputs passed to the loss as its targets (the data's own targets unread)",
       "D4", "the loss's targets against the model's input at each sampled step, and the dataset's targets", true,
       [](const Finding& f) { return is(f, "D4", Kind::TargetsAreInputs); }},
      {"inputs-ignored",
       "labels the inputs do not predict (inputs and labels shuffled apart inside the dataset, the input dropped or "
       "zeroed on its way to the model)",
       "M15", "trains from the same weights on zeroed inputs and on the real ones, and compares their held-out loss",
       true, [](const Finding& f) { return is(f, "M15") && f.kind != Kind::LossIgnoresTargets; }},
      {"loss-ignores-targets",
       "a hand-written loss whose value does not depend on its targets (a term that reads the prediction where "
       "it should read the target)",
       "M15", "the loss on one batch with its targets and with other targets", true,
       [](const Finding& f) { return is(f, "M15", Kind::LossIgnoresTargets); }},
      {"label-encoding",
       "labels outside [0, C) or numbered from 1, or a 0/1 target column set on every row (an ordinal encoding "
       "built with >= for >)",
       "D9", "the labels' range against the output width, and each 0/1 target column", true, GS_CHECK_CONFIRMS("D9")},
      {"label-shape", "labels shaped differently from the prediction", "D6", "the shapes that reach the loss", true,
       GS_CHECK_CONFIRMS("D6")},
      {"unscaled-inputs", "inputs not normalised", "D5", "per-feature mean and std of a batch", true,
       [](const Finding& f) { return is(f, "D5") && f.kind != Kind::TargetScales; }},
      {"unscaled-targets", "regression targets on scales orders of magnitude apart (one left in raw units)", "D5",
       "each float target column's std", true, [](const Finding& f) { return is(f, "D5", Kind::TargetScales); }},
      {"unshuffled", "batches not shuffled, or one batch fed every step", "D8",
       "the classes in sampled batches, and whether consecutive steps see the same batch", true,
       GS_CHECK_CONFIRMS("D8")},
      {"split-preprocessing", "splits preprocessed differently", "D10", "the statistics of each split", true,
       GS_CHECK_CONFIRMS("D10")},
      {"leakage", "normalisation fitted on held-out data", "D7", "what the Normalizer was fitted on", true,
       [](const Finding& f) { return is(f, "D7", Kind::NormalizerLeak); }},
      {"target-leakage", "an input feature that copies the label (target leakage)", "D7",
       "the label against each input feature of the training rows", true,
       [](const Finding& f) { return is(f, "D7", Kind::TargetLeakage); }},
      {"rank-shards", "ranks reading the same data", "D11", "the sample indices of each rank", true,
       GS_CHECK_CONFIRMS("D11")},
      {"class-weights-inverted",
       "class weights that do not lift the rare classes (grown with the counts, count / N for N / count, or computed "
       "in another order than the classes)",
       "D3", "the classes' masses in the loss (count x weight) against their counts", true,
       [](const Finding& f) { return is(f, "D3", Kind::ClassWeightsAmplify); }},
      {"class-imbalance", "classes missing or badly imbalanced", "D3", "the class counts", true,
       [](const Finding& f) { return is(f, "D3") && !d3_class_errors(f) && f.kind != Kind::ClassWeightsAmplify; }},
      {"blank-inputs",
       "inputs emptied by the pipeline (a crop that kept only the padding, a lookup that sends every word to one "
       "id, a loader that returns zeros): many rows are one constant input under several labels",
       "D12", "the training inputs hashed, and the most repeated one's values", true,
       [](const Finding& f) { return is(f, "D12", Kind::BlankInputs); }},
      {"conflicting-labels",
       "the same or near-identical inputs with conflicting labels (duplicates relabelled, or a training-only transform "
       "that turns one class into another and keeps the label)",
       "D12",
       "exact duplicates among the training inputs, and each row's nearest neighbour's label in train and validation",
       true, [](const Finding& f) { return is(f, "D12") && f.kind != Kind::BlankInputs; }},
      {"split-mix", "validation rows that are also training rows", "D13", "the validation inputs hashed against train",
       true, GS_CHECK_CONFIRMS("D13")},
      {"augmentation-noise",
       "an augmentation whose noise swamps some input columns (noise added before the normaliser, one noise level "
       "for columns of different units)",
       "D14", "each training column read twice, its noise against the column's validation variance", true,
       [](const Finding& f) { return is(f, "D14", Kind::AugmentationSwamps); }},
      {"feature-drift", "validation inputs from another distribution", "D14",
       "the per-image brightness and contrast of each split (KS statistic)", true,
       [](const Finding& f) { return is(f, "D14") && f.kind != Kind::AugmentationSwamps; }},
      {"label-drift", "validation labels distributed differently (classes, or a regression's targets), or new ones",
       "D15", "the class frequencies of each split (PSI), classes train never has, one target per row's distribution",
       true, GS_CHECK_CONFIRMS("D15")},
      {"tiny-validation", "a validation split too small to judge", "D16", "the sizes of the splits", true,
       GS_CHECK_CONFIRMS("D16")},
      {"validation-misreported",
       "a validation loss the loop computes wrong (an accumulator not reset between epochs, a running total, the "
       "training rows evaluated instead)",
       "W3", "the validation loss the loop reports against the loss measured on the validation and training rows", true,
       [](const Finding& f) { return is(f, "W3", Kind::ValidationMisreported); }},
      // ---- the loss ----
      {"masked-targets", "every target masked by ignore_index", "L5", "the targets against ignore_index", true,
       [](const Finding& f) { return is(f, "L5") && f.kind != Kind::PaddingInLoss && f.kind != Kind::PaddingRead; }},
      {"metric-misaligned",
       "an evaluation that pairs predictions with the wrong labels (two passes of a shuffled loader)", "L9",
       "the accuracy the loop reported against the trained model's on the same split", true,
       [](const Finding& f) { return is(f, "L9", Kind::ReportedAccuracyLow); }},
      {"padding-in-loss", "padded positions of sequences counted in the loss (a mask built and never applied)", "L5",
       "the loss's gradient on the padded positions of a batch", true,
       [](const Finding& f) { return is(f, "L5", Kind::PaddingInLoss); }},
      {"padding-read", "a sequence model that reads the padding (the state after the last step of the padded batch)",
       "L5", "each row's output with more padding added", true,
       [](const Finding& f) { return is(f, "L5", Kind::PaddingRead); }},
      {"double-softmax", "probabilities fed to cross-entropy (a second softmax)", "L2",
       "whether every row of the loss input is a distribution", true,
       [](const Finding& f) { return is(f, "L2") && !f.is("L2", Kind::NllOnScores); }},
      {"nll-on-scores", "raw scores fed to NLLLoss, which expects log-probabilities (the LogSoftmax forgotten)", "L2",
       "whether each row of the NLLLoss input is <= 0 with a logsumexp of 0", true,
       [](const Finding& f) { return is(f, "L2", Kind::NllOnScores); }},
      {"bce-logits", "logits fed to a loss that expects probabilities", "L3", "the range of the BCE input", true,
       [](const Finding& f) { return is(f, "L3", Kind::BceLogits); }},
      {"eval-path", "a model that computes something else in eval mode (a normaliser's or a branch's eval path)", "M2",
       "the trained model on the same training rows in eval mode and in training mode", true,
       [](const Finding& f) { return is(f, "M2", Kind::EvalPathDiffers); }},
      {"double-sigmoid", "probabilities passed through a sigmoid twice before binary cross-entropy", "L3",
       "the range of the BCE input over the run", true,
       [](const Finding& f) { return is(f, "L3", Kind::BceSquashedTwice); }},
      {"loss-blind-to-labels", "a loss that does not score the labels (an inverted term, ignore_index on a real class)",
       "M14", "the loss and the accuracy one batch reaches when overfitted", true,
       [](const Finding& f) { return is(f, "M14", Kind::LossBlindToLabels); }},
      {"bce-16bit", "probabilities rounded to 16 bits before binary cross-entropy (a sigmoid under autocast)", "L3",
       "the dtype of the BCE input and whether its values lie on the float16/bfloat16 grid", true,
       [](const Finding& f) { return is(f, "L3", Kind::BceRounded16); }},
      {"bce-target-range", "targets outside [0, 1] given to binary cross-entropy", "L3", "the range of the BCE targets",
       true, [](const Finding& f) { return is(f, "L3", Kind::BceTargetRange); }},
      {"output-init", "a final layer that starts far from the targets (its bias)", "L4",
       "the untrained model's mean output against the batch's class frequencies or target mean", true,
       [](const Finding& f) { return output_init(f); }},
      {"sum-reduction", "the loss summed over the batch", "L6", "the gradient's growth when the batch doubles", true,
       [](const Finding& f) { return is(f, "L6", Kind::ReductionSum); }},
      {"rows-cancel", "a loss reduced before the error (|mean(p - y)| for mean(|p - y|)): errors cancel", "L6",
       "the trained model's batch loss against its examples' losses each scored alone", true,
       [](const Finding& f) { return is(f, "L6", Kind::RowsCancel); }},
      {"mean-divided-again", "a mean loss divided by the batch size again (each step B times too small)", "L6",
       "the gradient that reaches the loss's value during backward", true,
       [](const Finding& f) { return is(f, "L6", Kind::MeanDividedAgain); }},
      {"loss-negated", "a loss negated before backward (the optimizer climbs it)", "L6",
       "the gradient that reaches the loss's value during backward", true,
       [](const Finding& f) { return is(f, "L6", Kind::LossNegated); }},
      {"graphs-retained", "each step's graph kept alive by the loop (a loss stored without item())", "W8",
       "the autograd nodes alive after each optimizer step", true,
       [](const Finding& f) { return is(f, "W8", Kind::GraphsRetained); }},
      {"rank-loss-logging", "one rank's loss logged as the global loss", "L8", "the logged loss against every rank's",
       true, GS_CHECK_CONFIRMS("L8")},
      // ---- the model ----
      {"inplace", "an in-place change to a tensor saved for backward", "M20", "the autograd version counter", true,
       GS_CHECK_CONFIRMS("M20")},
      {"gate-error", "the model or the loss raised an error", "W2", "the pre-training gate's forward and backward",
       true, GS_CHECK_CONFIRMS("W2")},
      {"parameter-replaced",
       "a parameter replaced by assignment after registration (the forward uses a tensor the "
       "optimizer does not hold)",
       "M5",
       "the leaves of the loss's graph against the model's and the optimizer's "
       "parameters",
       true, [](const Finding& f) { return is(f, "M5", Kind::ParameterReplaced); }},
      {"unregistered-parameter",
       "a layer or tensor the forward uses that was never registered (register_module, register_parameter), so "
       "parameters(), the optimizer and checkpoints miss it and it never trains",
       "M5",
       "the leaves of the model's output graph against the model's and the optimizer's parameters, and their "
       "values at the end of the run",
       true, [](const Finding& f) { return is(f, "M5", Kind::ParameterUnregistered); }},
      {"output-unread",
       "a model output, a layer's units or input columns that nothing reads (a loss term or a slice that reads the "
       "wrong column or head, a branch given the wrong input), so the weights that feed them never train",
       "M5",
       "the gradient that reaches each column of the model's output and each unit of its layers, the parameters "
       "that feed those without one, and each input column moved across the batch",
       true,
       [](const Finding& f) {
         return is(f, "M5", Kind::OutputUnread) || is(f, "M5", Kind::UnitsUnread) ||
                is(f, "M5", Kind::InputColumnsUnread);
       },
       true},
      {"cut-graph", "a parameter the gradient does not reach (detach, a frozen or unused layer)", "M5",
       "which trainable parameters get a gradient from one backward", true,
       [](const Finding& f) { return cut_graph(f); }, true},
      {"frozen", "the wrong parameters frozen", "M10", "requires_grad against the optimizer's parameters", true,
       GS_CHECK_CONFIRMS("M10"), true},
      {"final-activation", "an activation after the final layer", "M3", "the last module and the sign of the logits",
       true, GS_CHECK_CONFIRMS("M3")},
      {"batchnorm-stats", "BatchNorm evaluated without running statistics", "M17",
       "num_batches_tracked of each BatchNorm at evaluation", true,
       [](const Finding& f) {
         return is(f, "M17") && f.kind != Kind::BatchNormSmallBatch && f.kind != Kind::BatchNormMomentum;
       }},
      {"batchnorm-momentum",
       "a BatchNorm momentum in Keras's convention (0.99: here the weight of the newest batch, so the running "
       "statistics are the last batch's)",
       "M17", "each BatchNorm's momentum against the batches it trained on", true,
       [](const Finding& f) { return is(f, "M17", Kind::BatchNormMomentum); }},
      {"batchnorm-small-batch", "BatchNorm trained on batches of a few examples", "M17",
       "the examples in each BatchNorm's training batches", true,
       [](const Finding& f) { return is(f, "M17", Kind::BatchNormSmallBatch); }},
      {"train-mode-eval", "the wrong train/eval mode (evaluation in training mode, training in eval mode)", "M2",
       "the mode of dropout/BatchNorm-like layers during evaluation and during training steps", true,
       [](const Finding& f) {
         return is(f, "M2") && !f.is("M2", Kind::EvalPathDiffers) && !f.is("M2", Kind::StateBetweenCalls);
       }},
      {"state-between-calls",
       "a model that carries state from one batch to the next (a recurrent state kept across shuffled, "
       "unrelated batches)",
       "M2", "the model's output for one batch passed twice in eval mode, the random generator reset", true,
       [](const Finding& f) { return is(f, "M2", Kind::StateBetweenCalls); }},
      {"batch-mixing", "examples of the batch mixed (a reshape for a transpose, a reduction over the batch)", "M6",
       "the Jacobian of one output row with respect to every input row", true,
       [](const Finding& f) { return batch_mixing(f); }},
      {"sees-future", "a next-step model that reads the steps it predicts (a causal mask missing or inverted)", "M6",
       "the outputs before a step against a change of that step's input", true,
       [](const Finding& f) { return is(f, "M6", Kind::SeesFuture); }},
      {"broadcast", "an elementwise op broadcasting two differently shaped operands", "M19",
       "the shapes of the loss's operands", true, GS_CHECK_CONFIRMS("M19")},
      {"shared-weights", "one layer instance used twice", "M4", "parameters registered under two paths", true,
       GS_CHECK_CONFIRMS("M4")},
      {"nonfinite-op", "a numerically unstable op (log of 0, exp overflow)", "M12",
       "the first module (and, in anomaly mode W4, the op) whose output turns non-finite", true,
       [](const Finding& f) { return is(f, "M12") || is(f, "W4"); }},
      {"dead-relu", "dead ReLU units", "M7", "the fraction of each ReLU layer's units never active over the data", true,
       GS_CHECK_CONFIRMS("M7")},
      {"saturation", "saturated or stacked sigmoid/tanh units", "M8",
       "the saturated fraction of each sigmoid/tanh layer and the product of their mean derivatives", true,
       GS_CHECK_CONFIRMS("M8")},
      {"bad-init", "weights initialised at the wrong scale", "M9", "each weight's std against He/Xavier", true,
       [](const Finding& f) {
         return is(f, "M9") && f.kind != Kind::LoadedRedrawn && f.kind != Kind::LoadedUntrained &&
                f.kind != Kind::LoadedSkipped;
       }},
      {"wrong-backward", "a layer whose backward is wrong", "M13", "analytic against numerical gradients", true,
       GS_CHECK_CONFIRMS("M13")},
      {"dtype-device", "inputs of another dtype or device than the model", "M11", "the dtypes and devices of a forward",
       true, GS_CHECK_CONFIRMS("M11")},
      {"half-overflow", "a forward that overflows in half precision", "M18", "the forward run in float16", true,
       [](const Finding& f) { return is(f, "M18") || is(f, "M29", Kind::ForwardOverflow); }},
      {"fp16-underflow", "float16 gradients that underflow to zero (autocast without loss scaling)", "M28",
       "each float16 layer's parameter gradients as the backward made them, against float16's range", true,
       [](const Finding& f) { return is(f, "M28", Kind::GradientUnderflow) || is(f, "M29", Kind::BackwardUnderflow); }},
      {"bf16-updates", "16-bit weights whose updates round away (no float32 master weights)", "M28",
       "each 16-bit parameter's values before and after the sampled updates", true,
       [](const Finding& f) { return is(f, "M28", Kind::UpdatesVanish); }},
      {"capacity", "a model too small for the task", "M16", "a wider model on the same data", true,
       GS_CHECK_CONFIRMS("M16")},
      {"missing-nonlinearity", "two linear layers with no non-linearity between them", "M23",
       "each linear layer's input against the previous linear layer's output", true,
       [](const Finding& f) { return is(f, "M23", Kind::LinearCollapse); }},
      {"embeddings-one-table",
       "two embedding tables looked up with the same indices (a positional table read "
       "with the token ids)",
       "M23",
       "the indices of each pair of embedding lookups and the gradients flowing into "
       "them",
       true, [](const Finding& f) { return is(f, "M23", Kind::EmbeddingsOneTable); }},
      {"high-dropout", "a dropout rate above 0.5", "M24", "the probability of each Dropout layer", true,
       GS_CHECK_CONFIRMS("M24")},
      {"all-zero", "a weight, a layer's input or its output that stays zero", "M25",
       "each parameter, and each layer's output and a weighted layer's input, over the sampled steps of the run", true,
       [](const Finding& f) { return is(f, "M25") && !m25_gradient(f); }},
      {"init-variance", "activations whose variance shrinks or grows through the layers at initialisation", "M27",
       "the variance of each ReLU layer's input at initialisation", true,
       [](const Finding& f) { return is(f, "M27") && !symmetric_init(f); }},
      {"symmetric-init", "weights initialised symmetric (one value), so a layer's units stay identical", "M27",
       "the 5th-95th percentile spread of each weight's gradient over the first steps", true,
       [](const Finding& f) { return symmetric_init(f); }, true},
      {"variance-collapse", "a layer whose output became constant", "M26",
       "the variance of each layer's output over the sampled steps of the run", true,
       [](const Finding& f) { return is(f, "M26", Kind::VarianceCollapsed); }},
      {"weight-decay", "a weight decay (or a penalty on the weights) too strong", "O3",
       "the decay's pull against the loss gradient, and training with and without it", true,
       [](const Finding& f) { return is(f, "O3", Kind::WeightDecayTooStrong); }},
      {"penalty-sign", "a penalty on the weights subtracted from the loss (it rewards larger weights)", "O3",
       "the step's gradient against the loss's own on the first step", true,
       [](const Finding& f) { return is(f, "O3", Kind::PenaltyWrongSign); }},
      {"replicas-diverged", "replicas whose weights differ across ranks", "M21",
       "a checksum of every rank's parameters", true, GS_CHECK_CONFIRMS("M21")},
      {"rank-randomness", "the same random stream on every rank", "M22", "dropout masks across ranks", true,
       GS_CHECK_CONFIRMS("M22")},
      // ---- the optimisation ----
      {"zero-grad", "gradients never zeroed between steps", "O5", "the gradient's growth across steps", true,
       [](const Finding& f) {
         return is(f, "O5") && !f.is("O5", Kind::TransformMisplaced) && !f.is("O5", Kind::AccumulationCleared);
       }},
      {"accumulation-cleared",
       "zero_grad() inside a gradient-accumulation cycle: each step sees only the last micro-batch's gradient", "O5",
       "the zero_grad() calls that cleared gradients no optimizer step had used", true,
       [](const Finding& f) { return is(f, "O5", Kind::AccumulationCleared); }},
      {"clip-misplaced", "gradient clipping at the wrong place in the loop (before backward(), or after step())", "O5",
       "whether the clip found gradients, and whether a step had already used them", true,
       [](const Finding& f) { return is(f, "O5", Kind::TransformMisplaced); }},
      {"scaled-clipping", "gradients clipped while still multiplied by the loss scale (before scaler.unscale_)", "O10",
       "whether clip_grad_norm_ / clip_grad_value_ ran on the parameters of an optimizer between "
       "scaler.scale(loss).backward() and scaler.unscale_",
       true, [](const Finding& f) { return is(f, "O10", Kind::ClippedScaledGradients); }},
      {"scaler-skips", "a loss scaler that skips most steps (its scale collapses or keeps halving)", "O10",
       "the scaler's scale at every update and the steps it skipped for inf/NaN gradients", true,
       [](const Finding& f) { return scaler_skips(f); }},
      {"grad-reduction", "gradients summed across ranks, or a parameter left out of the all-reduce", "O7",
       "every rank's gradient against the reduced one", true, GS_CHECK_CONFIRMS("O7")},
      {"effective-batch", "a learning rate not scaled for the effective batch", "W9",
       "the global batch and learning rate of a data-parallel run", true, GS_CHECK_CONFIRMS("W9")},
      {"weights-rewritten",
       "weights rewritten by the loop between optimizer steps, taking back its updates (a constraint far too tight, "
       "a reset to earlier weights, a re-initialisation)",
       "O6", "each weight's version counter around the optimizer's steps, and the loop's writes against its movement",
       true, [](const Finding& f) { return is(f, "O6", Kind::WeightsRewritten); }},
      {"weights-updated-twice",
       "a second update of the weights outside the optimizer (a hand-written step beside step())", "O6",
       "each weight's version counter around the optimizer's steps, and the loop's writes against its movement", true,
       [](const Finding& f) { return is(f, "O6", Kind::WeightsUpdatedTwice); }},
      {"unwatched-optimizer",
       "an optimizer other than the one the Session watches updates the model (one built inside the loop restarts "
       "its momentum and moments at every step)",
       "O6", "the weights at the run's start and end against the steps of the optimizer given to the Session", true,
       [](const Finding& f) { return is(f, "O6", Kind::UpdatedOutsideOptimizer); }},
      {"eps-dominates",
       "an adaptive optimizer's eps far above its gradients' scale (eps, not the gradients, sets the step)", "O6",
       "the optimizer's second-moment estimate against its eps after the run", true,
       [](const Finding& f) { return is(f, "O6", Kind::EpsDominates); }},
      {"clip-always", "gradient clipping at every step (a threshold below the gradient's norm sets every step)", "O9",
       "the total gradient norm right before each sampled update", true, GS_CHECK_CONFIRMS("O9")},
      {"adam-betas",
       "Adam's betas the wrong way round (the second moment forgetting faster than the first: single steps far above "
       "the learning rate)",
       "O8", "the optimizer's betas against Adam's convergence condition beta1^2 / sqrt(beta2) < 1, before training",
       true, [](const Finding& f) { return is(f, "O8", Kind::AdamBetasUnstable); }},
      {"sgd-lr-decay-swapped", "SGD's learning rate and weight decay passed the wrong way round", "O8",
       "each SGD parameter group's weight decay against its learning rate", true,
       [](const Finding& f) { return is(f, "O8", Kind::SgdLrDecaySwapped); }},
      {"frozen-bias-group",
       "a parameter group of biases and normalisation gains at learning rate 0 while the weights train (a weight "
       "decay of 0 written where ParamGroup takes the learning rate)",
       "O8", "each parameter group's learning rate and the shapes of its parameters, before training", true,
       [](const Finding& f) { return is(f, "O8", Kind::BiasGroupFrozen); }},
      {"lr-too-high", "a learning rate too high", "O6",
       "the learning rate against its optimizer's usual range before training (O8), the loss history and each "
       "parameter's update-to-weight ratio (O6), and, where the run can be repeated, the same run at a tenth of the "
       "learning rate",
       true, [](const Finding& f) { return lr_too_high(f); }},
      {"lr-too-low", "a learning rate too low", "O6",
       "the learning rate against its optimizer's usual range (O8), the "
       "loss's relative decrease and the update-to-weight ratios (O6)",
       true, [](const Finding& f) { return lr_too_low(f); }},
      {"noisy-train-labels", "training labels (or inputs) wrong in a share of the training split", "L9",
       "the trained model's accuracy on its training split against validation, both in eval mode", true,
       [](const Finding& f) { return is(f, "L9", Kind::TrainLabelsDisagree); }},
      {"split-label-order", "validation labels numbered in another class order than the training labels", "L9",
       "the trained model's validation predictions per label: each class predicted as one other class", true,
       [](const Finding& f) { return is(f, "L9", Kind::ValLabelsRemapped); }},
      {"worse-checkpoint",
       "weights loaded after training that score worse than the run's best and last epochs "
       "(a checkpoint comparator the wrong way round)",
       "L9",
       "the final model's validation loss and accuracy against the run's epochs, after a write past the last step",
       true, [](const Finding& f) { return is(f, "L9", Kind::RestoredWorse); }},
      {"loaded-redrawn",
       "every weight loaded from a checkpoint drawn again before training (a re-initialisation meant for a new "
       "head run over every layer), or weights the checkpoint holds under other names skipped by a strict=false load",
       "M9", "each weight nn::load wrote, at the first step, against the values it loaded, and the names it skipped",
       true, [](const Finding& f) { return is(f, "M9", Kind::LoadedRedrawn) || is(f, "M9", Kind::LoadedSkipped); }},
      {"checkpoint-untrained",
       "a checkpoint written before training (nn::save before fit()): the weights loaded from it are random", "M9",
       "each loaded weight's values against the spread of a fresh initialisation of its shape", true,
       [](const Finding& f) { return is(f, "M9", Kind::LoadedUntrained); }},
      {"snapshot-aliased",
       "a best-epoch snapshot that shares storage with the weights (detach() without clone()), so the restore "
       "brings back the last epoch",
       "L9", "the final model's validation loss against the run's epochs, after a write past the last step", true,
       [](const Finding& f) { return is(f, "L9", Kind::RestoredLast); }},
      {"memorised", "too little data or regularisation: the training split memorised", "L9",
       "the trained model's accuracy on its training split against validation, both in eval mode", true,
       [](const Finding& f) { return is(f, "L9", Kind::GeneralisationGap); }},
      {"undertrained", "too few optimizer steps: the run ended while the loss still fell", "L9",
       "the last epochs' losses, the run repeated at 10x the learning rate (or for 10x its steps), and training "
       "on from its end with its schedule replayed",
       true, [](const Finding& f) { return is(f, "L9", Kind::Undertrained); }},
      {"metric-direction",
       "a plateau scheduler or early stopper told the wrong direction: Mode::Min fed an accuracy, or Mode::Max a "
       "loss",
       "O6",
       "the metric of each ReduceLROnPlateau and EarlyStopping step against the run's validation accuracy and loss",
       true, [](const Finding& f) { return is(f, "O6", Kind::MetricDirectionInverted); }},
      {"lr-schedule",
       "a learning-rate schedule that collapses, grows, starts at 0, or never reaches its peak (stepped once per "
       "epoch where it counts optimizer steps)",
       "O6", "the learning rate at every optimizer step, and each scheduler's own schedule against its step() calls",
       true, [](const Finding& f) { return lr_schedule(f); }},
      {"no-backward", "no gradient at the optimizer's step (zero_grad between backward and step, no backward)", "O1",
       "whether any trainable parameter holds a gradient when the optimizer steps", true,
       [](const Finding& f) { return is(f, "O1", Kind::NoGradientAtStep); }},
      {"stalled", "a training loop that stalls between steps", "W10", "the wall time of every step", true,
       GS_CHECK_CONFIRMS("W10")},
      {"nondeterminism", "a run that does not reproduce", "W1", "two runs from the same seed", true,
       GS_CHECK_CONFIRMS("W1")},
      // ---- symptoms that explain other symptoms ----
      {"nonfinite-values", "NaN/Inf values", "", "", false, [](const Finding& f) { return nonfinite_member(f); }},
      {"vanishing-gradients", "vanishing gradients", "O1", "", false, [](const Finding& f) { return o1_vanishing(f); }},
      {"zero-gradients", "all-zero gradients", "M5", "", false, [](const Finding& f) { return zero_gradient(f); }},
      {"exploding-gradients", "exploding gradients", "O1", "", false, [](const Finding& f) { return o1_exploding(f); }},
      {"unstable-loss", "an unstable loss", "L1", "", false, [](const Finding& f) { return loss_unstable(f); }},
  };
  return table;
}

#undef GS_CHECK_CONFIRMS

const Cause* find_cause(const std::string& id) {
  for (const Cause& c : diagnosis_causes())
    if (c.id == id) return &c;
  return nullptr;
}

const std::vector<Symptom>& diagnosis_symptoms() {
  // The causes every "it does not learn" symptom can have, most specific first: faults a
  // check sees directly, then the symptoms that would explain it, then the hyperparameters.
  static const std::vector<std::string> any_fault = {"nonfinite-values",
                                                     "gate-error",
                                                     "inplace",
                                                     "loss-negated",
                                                     "masked-targets",
                                                     "padding-in-loss",
                                                     "misaligned-labels",
                                                     "targets-from-predictions",
                                                     "targets-are-inputs",
                                                     "loss-ignores-targets",
                                                     "label-encoding",
                                                     "label-shape",
                                                     "broadcast",
                                                     "double-softmax",
                                                     "nll-on-scores",
                                                     "bce-logits",
                                                     "double-sigmoid",
                                                     "loss-blind-to-labels",
                                                     "bce-16bit",
                                                     "final-activation",
                                                     "batch-mixing",
                                                     "sees-future",
                                                     "parameter-replaced",
                                                     "unregistered-parameter",
                                                     "output-unread",
                                                     "cut-graph",
                                                     "frozen",
                                                     "frozen-bias-group",
                                                     "wrong-backward",
                                                     "weight-decay",
                                                     "penalty-sign",
                                                     "all-zero",
                                                     "variance-collapse",
                                                     "dead-relu",
                                                     "saturation",
                                                     "bad-init",
                                                     "loaded-redrawn",
                                                     "checkpoint-untrained",
                                                     "init-variance",
                                                     "symmetric-init",
                                                     "shared-weights",
                                                     "output-init",
                                                     "sum-reduction",
                                                     "rows-cancel",
                                                     "clip-misplaced",
                                                     "mean-divided-again",
                                                     "unscaled-inputs",
                                                     "unshuffled",
                                                     "nonfinite-input",
                                                     "blank-inputs",
                                                     "conflicting-labels",
                                                     "split-label-order",
                                                     "class-weights-inverted",
                                                     "noisy-train-labels",
                                                     "feature-drift",
                                                     "zero-grad",
                                                     "fp16-underflow",
                                                     "bf16-updates",
                                                     "scaler-skips",
                                                     "scaled-clipping",
                                                     "grad-reduction",
                                                     "replicas-diverged",
                                                     "rank-shards",
                                                     "batchnorm-small-batch",
                                                     "batchnorm-stats",
                                                     "batchnorm-momentum",
                                                     "train-mode-eval",
                                                     "state-between-calls",
                                                     "dtype-device",
                                                     "split-preprocessing",
                                                     "effective-batch",
                                                     "no-backward",
                                                     "weights-rewritten",
                                                     "weights-updated-twice",
                                                     "eps-dominates",
                                                     "clip-always",
                                                     "lr-schedule",
                                                     "zero-gradients",
                                                     "vanishing-gradients",
                                                     "exploding-gradients",
                                                     "unstable-loss",
                                                     "adam-betas",
                                                     "lr-too-high",
                                                     "high-dropout",
                                                     "missing-nonlinearity",
                                                     "embeddings-one-table",
                                                     "capacity",
                                                     "sgd-lr-decay-swapped",
                                                     "lr-too-low",
                                                     "inputs-ignored"};
  static const std::vector<Symptom> table = {
      {"non-finite",
       "NaN/Inf values",
       "O1 and O2 errors, O4, and any finding whose numbers are NaN/Inf (L1, L4, M14, ...)",
       [](const Finding& f) { return nonfinite_member(f); },
       {"nonfinite-input", "masked-targets", "bce-16bit", "loss-negated", "nonfinite-op"}},
      {"diverged",
       "NaN/Inf that no op of the forward made (weights an update blew up, a loss that overflowed)",
       "O4, and the non-finite findings that are no source (not M12, W4 or D2)",
       [](const Finding& f) { return nonfinite_member(f) && !nonfinite_source(f); },
       {"sum-reduction", "exploding-gradients", "adam-betas", "lr-too-high"}},
      {"initial-loss",
       "an initial loss far from log(C)",
       "L4 (the loss)",
       [](const Finding& f) { return is(f, "L4") && !output_init(f); },
       {"output-init", "sum-reduction", "masked-targets", "label-encoding", "label-shape", "broadcast",
        "final-activation", "double-softmax", "nll-on-scores", "bce-logits", "batch-mixing", "nonfinite-op", "bad-init",
        "unscaled-inputs", "class-weights-inverted", "class-imbalance"}},
      {"biased-start",
       "an untrained model whose mean output is far from the targets",
       "L4 (the initial outputs)",
       [](const Finding& f) { return output_init(f); },
       {"unscaled-inputs", "bad-init", "init-variance"}},
      {"not-learning", "a loss that does not fall (stuck, at chance, cannot overfit one batch)",
       "L1 (stuck, at chance), M14, M15, L7 (underfitting), O6 (too low)",
       [](const Finding& f) { return not_learning(f); }, any_fault},
      {"unstable-loss",
       "a loss that spikes, oscillates or diverges; weights that keep growing",
       "L1 (spikes, oscillation, divergence), O2 (jumps), O3, M26 (variance blew up), O6 (too high)",
       [](const Finding& f) { return loss_unstable(f) || o6_too_high(f); },
       {"loss-negated",     "nll-on-scores",  "unshuffled",      "sum-reduction",         "unscaled-inputs",
        "unscaled-targets", "label-encoding", "bad-init",        "output-init",           "batchnorm-small-batch",
        "zero-grad",        "grad-reduction", "effective-batch", "weights-updated-twice", "weights-rewritten",
        "lr-schedule",      "all-zero",       "weight-decay",    "rows-cancel",           "clip-misplaced",
        "adam-betas",       "lr-too-high",    "penalty-sign"}},
      {"collapsed-layers",
       "layer outputs or weights that became constant or zero during training",
       "M26 (variance collapsed), M25 (a weight or output all zero)",
       [](const Finding& f) { return is(f, "M26", Kind::VarianceCollapsed) || (is(f, "M25") && !m25_gradient(f)); },
       {"weight-decay"}},
      {"clipped-every-step",
       "gradients clipped at every step",
       "O9",
       [](const Finding& f) { return is(f, "O9"); },
       {"scaled-clipping"}},
      {"slow-learning", "a run that ended while its loss still fell", "L9 (undertrained, its lr probe)",
       [](const Finding& f) { return is(f, "L9", Kind::Undertrained) || is(f, "L9", Kind::LrProbeTooLow); }, any_fault},
      {"schedule-cut",
       "a learning rate cut far below its start",
       "O6 (schedule collapses)",
       [](const Finding& f) { return is(f, "O6", Kind::ScheduleCollapses); },
       {"metric-direction"}},
      {"rewritten-weights",
       "weights the loop rewrites between optimizer steps",
       "O6 (weights rewritten)",
       [](const Finding& f) { return is(f, "O6", Kind::WeightsRewritten); },
       {"all-zero"}},
      {"vanishing-gradients",
       "gradients that vanish or never arrive",
       "O1 (vanishing, no gradient), O6 (one layer's updates too small beside its group's)",
       [](const Finding& f) { return o1_vanishing(f) || is(f, "O6", Kind::LayerUpdatesTooSmall); },
       {"parameter-replaced", "output-unread", "cut-graph", "frozen", "masked-targets", "batchnorm-small-batch",
        "weight-decay", "weights-rewritten", "all-zero", "dead-relu", "saturation", "bad-init", "init-variance",
        "double-softmax", "bce-logits", "final-activation", "fp16-underflow", "zero-gradients"}},
      {"zero-gradients",
       "all-zero gradients; weights that never change",
       "M5 (all-zero gradient), M25 (a gradient zero over the run), O6 (never changed), M6 (no gradient reaches the "
       "input)",
       [](const Finding& f) { return zero_gradient(f); },
       {"no-backward", "parameter-replaced", "output-unread", "cut-graph", "frozen", "fp16-underflow", "bf16-updates",
        "scaler-skips", "lr-schedule", "masked-targets", "all-zero", "dead-relu", "saturation", "final-activation",
        "symmetric-init", "vanishing-gradients"}},
      {"exploding-gradients",
       "gradients that explode",
       "O1 (exploding)",
       [](const Finding& f) { return o1_exploding(f); },
       {"loss-negated", "bad-init", "init-variance", "output-init", "unscaled-inputs", "unscaled-targets",
        "sum-reduction", "zero-grad", "grad-reduction", "clip-misplaced", "adam-betas", "lr-too-high"}},
      {"dead-in-training",
       "ReLU units that died during training",
       "M7 (died during training)",
       [](const Finding& f) { return is(f, "M7", Kind::DiedInTraining); },
       {"high-dropout", "lr-schedule", "lr-too-high", "unscaled-inputs", "bad-init", "exploding-gradients"}},
      // Class counts that include padded positions labelled as a real class: the padding swells that class.
      {"imbalance-with-padding",
       "one class far more frequent than another",
       "D3 (class counts)",
       [](const Finding& f) { return is(f, "D3") && !d3_class_errors(f) && f.kind != Kind::ClassWeightsAmplify; },
       {"padding-in-loss"}},
      // The final model scores worse than the run's best and last epochs as the loop reported them: where those
      // figures were not the validation rows' (the training rows' loss), no checkpoint need be wrong.
      {"final-below-reported",
       "a final model that scores worse on validation than the epochs the loop reported",
       "L9 (the weights loaded after the last step score worse than the run did)",
       [](const Finding& f) { return is(f, "L9", Kind::RestoredWorse); },
       {"validation-misreported"}},
      // A dropout above 0.5 scales the units it keeps by 1 / (1 - p), and their gradients with them: the
      // layers beside it take steps that much larger, which a tenth of the learning rate undoes.
      {"units-saved-by-lower-lr",
       "ReLU units that survive at a tenth of the learning rate",
       "O6 (the probe at lr / 10 keeps them alive)",
       [](const Finding& f) { return is(f, "O6", Kind::LrProbeConfirms); },
       {"high-dropout"}},
      {"batch-coupling",
       "outputs that depend on other examples of the batch",
       "M6 (the model mixes the batch)",
       [](const Finding& f) { return batch_mixing(f); },
       {"batchnorm-stats", "batchnorm-momentum", "train-mode-eval"}},
      {"wrong-gradient",
       "an analytic gradient that disagrees with the numerical one",
       "M13",
       [](const Finding& f) { return is(f, "M13"); },
       {"cut-graph", "inplace"}},
      {"broadcast",
       "a loss that broadcasts its operands",
       "M19",
       [](const Finding& f) { return is(f, "M19"); },
       {"label-shape"}},
      {"label-counts",
       "classes with no examples",
       "D3",
       [](const Finding& f) { return is(f, "D3") && !d3_class_errors(f); },
       {"masked-targets", "label-encoding"}},
      {"class-errors",
       "one class predicted far worse than the others",
       "D3 (per-class recall)",
       [](const Finding& f) { return d3_class_errors(f); },
       {"worse-checkpoint",       "snapshot-aliased",   "split-label-order",
        "batchnorm-small-batch",  "batchnorm-momentum", "eval-path",
        "class-weights-inverted", "class-imbalance",    "label-encoding",
        "conflicting-labels",     "misaligned-labels",  "label-drift",
        "final-activation",       "fp16-underflow",     "bf16-updates",
        "weights-rewritten",      "eps-dominates",      "clip-always",
        "weight-decay",           "lr-too-low",         "dead-relu",
        "symmetric-init",         "blank-inputs"}},
      {"validation-gap",
       "a validation loss far above the training loss",
       "L7 (overfitting, validation rising), W3 (validation rising), L1 (training falls while validation rises)",
       [](const Finding& f) {
         return is(f, "L7", Kind::Overfitting) || is(f, "W3", Kind::ValidationRose) ||
                is(f, "L1", Kind::TrainDownValUp);
       },
       {"validation-misreported", "rows-cancel", "worse-checkpoint", "snapshot-aliased", "split-label-order",
        "sum-reduction", "train-mode-eval", "state-between-calls", "batchnorm-stats", "batchnorm-momentum",
        "batchnorm-small-batch", "eval-path", "batch-mixing", "weights-rewritten", "split-preprocessing",
        "feature-drift", "label-drift", "tiny-validation"}},
      {"eval-differs",
       "a trained model that does far worse in eval mode than in training mode on the same rows",
       "M2 (the eval path against the training path)",
       [](const Finding& f) { return is(f, "M2", Kind::EvalPathDiffers); },
       {"batchnorm-momentum", "batchnorm-stats", "batchnorm-small-batch", "train-mode-eval", "eval-path"}},
      {"validation-too-good",
       "a validation accuracy suspiciously above the training accuracy",
       "L7 (suspiciously high validation accuracy)",
       [](const Finding& f) { return is(f, "L7", Kind::ValidationTooGood); },
       {"augmentation-noise", "split-mix", "leakage", "target-leakage", "misaligned-labels", "conflicting-labels",
        "feature-drift", "noisy-train-labels", "label-drift", "tiny-validation", "train-mode-eval"}},
      {"training-failed",
       "a training loop that raised an error",
       "W3 (training failed)",
       [](const Finding& f) { return is(f, "W3", Kind::TrainingFailed); },
       {"gate-error", "inplace", "bce-logits", "label-encoding", "label-shape", "dtype-device"}},
      {"gate-failure",
       "the model or the loss raised an error in the pre-training gate",
       "W2",
       [](const Finding& f) { return is(f, "W2"); },
       {"bce-logits", "label-encoding", "label-shape", "dtype-device", "inplace", "double-softmax"}},
      {"train-labels-disagree",
       "a trained model right on more of validation than of its own training data",
       "L9 (train-labels-disagree)",
       [](const Finding& f) { return is(f, "L9", Kind::TrainLabelsDisagree); },
       {"augmentation-noise", "misaligned-labels", "conflicting-labels", "feature-drift"}},
      {"class-shift",
       "class frequencies of validation that differ from the training split's",
       "D15",
       [](const Finding& f) { return is(f, "D15"); },
       {"split-label-order"}},
      {"stale-running-stats",
       "BatchNorm running statistics never updated by the training steps",
       "M17 (never updated)",
       [](const Finding& f) {
         return is(f, "M17") && f.kind != Kind::BatchNormSmallBatch && f.kind != Kind::BatchNormMomentum;
       },
       {"train-mode-eval"}},
      {"noisy-training-inputs",
       "training batches far outside the unit range while the inputs are normalised",
       "D5",
       [](const Finding& f) { return is(f, "D5"); },
       {"augmentation-noise"}},
      {"validation-shift",
       "validation inputs whose statistics differ from the training inputs'",
       "D14",
       [](const Finding& f) { return is(f, "D14"); },
       {"split-preprocessing", "label-drift"}},
      {"replicas-apart",
       "replicas whose weights drift apart",
       "M21",
       [](const Finding& f) { return is(f, "M21"); },
       {"grad-reduction"}},
      {"effective-lr",
       "an effective learning rate scaled by the number of ranks",
       "W9",
       [](const Finding& f) { return is(f, "W9"); },
       {"grad-reduction"}},
  };
  return table;
}

}  // namespace gradsleuth::debug
