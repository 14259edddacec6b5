// Finding kinds: the machine-readable name of what a finding says, one set per check, so the
// diagnosis, the zoo and tests match on kinds and never on a finding's English title.
//
//   if (f.kind == debug::Kind::GradientVanishing) ...       // O1: one parameter's gradient
//   debug::kind_name(debug::Kind::LrTooHigh)                 // "lr-too-high" (JSON, docs)
//
// A check that says one thing needs no kind of its own (Kind::None: its check id says it). A
// check that says several things the diagnosis tells apart gives each its kind; the numbers
// behind it stay in Finding::evidence, by name.
#pragma once
#include <cstdint>
#include <string_view>

namespace gradsleuth::debug {

// X(symbol, "json-name", "check"): every kind with the check that emits it.
#define GS_FINDING_KINDS(X)                                                                           \
  X(None, "none", "")                                                                                 \
  /* D3 class balance: the label counts, or the trained model's per-class recall */                   \
  X(ClassCounts, "class-counts", "D3")                                                                \
  X(ClassWeightsAmplify, "class-weights-amplify", "D3")                                               \
  X(ClassRecallLow, "class-recall-low", "D3")                                                         \
  /* D9 label encoding: a 0/1 target column that never changes, labels that are no whole numbers */   \
  X(TargetColumnConstant, "target-column-constant", "D9")                                             \
  X(LabelsNotWhole, "labels-not-whole", "D9")                                                         \
  /* D4 alignment over the run: the loss's targets are the model's predictions, or its inputs */      \
  X(TargetsFromPredictions, "targets-from-predictions", "D4")                                         \
  X(TargetsAreInputs, "targets-are-inputs", "D4")                                                     \
  /* D7 leakage: statistics fitted on held-out rows, or a feature that copies the label */            \
  X(TargetScales, "target-scales", "D5")                                                              \
  X(NormalizerLeak, "normalizer-leak", "D7")                                                          \
  X(TargetLeakage, "target-leakage", "D7")                                                            \
  /* D12 duplicates: a share of the rows that is one constant input (padding only, say) */            \
  X(BlankInputs, "blank-inputs", "D12")                                                               \
  /* D14 feature drift: the tabular columns compared one by one */                                    \
  X(ColumnDrift, "column-drift", "D14")                                                               \
  X(AugmentationSwamps, "augmentation-swamps", "D14")                                                 \
  /* D15 label drift: one regression target per row */                                                \
  X(TargetDrift, "target-drift", "D15")                                                               \
  /* L1 loss history */                                                                               \
  X(LossNonFinite, "loss-nonfinite", "L1")                                                            \
  X(LossStuck, "loss-stuck", "L1")                                                                    \
  X(LossAtChance, "loss-at-chance", "L1")                                                             \
  X(LossDiverging, "loss-diverging", "L1")                                                            \
  X(LossSpiking, "loss-spiking", "L1")                                                                \
  X(LossOscillating, "loss-oscillating", "L1")                                                        \
  X(TrainDownValUp, "train-down-val-up", "L1")                                                        \
  /* L2 the input of cross-entropy and NLL: probabilities, scores that are no log-probabilities */    \
  X(NllOnScores, "nll-on-scores", "L2")                                                               \
  /* L3 the BCE input: logits, or probabilities rounded to 16 bits */                                 \
  X(BceLogits, "bce-logits", "L3")                                                                    \
  X(BceRounded16, "bce-rounded-16bit", "L3")                                                          \
  X(BceSquashedTwice, "bce-squashed-twice", "L3")                                                     \
  X(BceTargetRange, "bce-target-range", "L3")                                                         \
  /* L4 the initial loss, and the untrained model's mean output */                                    \
  X(InitialLoss, "initial-loss", "L4")                                                                \
  X(InitialOutputBiased, "initial-output-biased", "L4")                                               \
  /* L5 masking: padded positions the loss reads; targets it masks itself */                          \
  X(PaddingInLoss, "padding-in-loss", "L5")                                                           \
  X(PaddingRead, "padding-read", "L5")                                                                \
  X(TargetsMaskedByLoss, "targets-masked-by-loss", "L5")                                              \
  X(TargetsWithinOutputs, "targets-within-outputs", "L5")                                             \
  /* L6 the reduction, and what the loop multiplies the loss by */                                    \
  X(ReductionSum, "reduction-sum", "L6")                                                              \
  X(MeanDividedAgain, "mean-divided-again", "L6")                                                     \
  X(LossNegated, "loss-negated", "L6")                                                                \
  X(RowsCancel, "rows-cancel", "L6")                                                                  \
  /* L7 fitting */                                                                                    \
  X(Underfitting, "underfitting", "L7")                                                               \
  X(Overfitting, "overfitting", "L7")                                                                 \
  X(ValidationTooGood, "validation-too-good", "L7")                                                   \
  X(FittingNormal, "fitting-normal", "L7")                                                            \
  /* L9 the trained model on both splits */                                                           \
  X(TrainLabelsDisagree, "train-labels-disagree", "L9")                                               \
  X(GeneralisationGap, "generalisation-gap", "L9")                                                    \
  X(ValLabelsRemapped, "val-labels-remapped", "L9")                                                   \
  X(RestoredWorse, "restored-worse", "L9")                                                            \
  X(RestoredLast, "restored-last", "L9")                                                              \
  X(ReportedAccuracyLow, "reported-accuracy-low", "L9")                                               \
  X(Undertrained, "undertrained", "L9")                                                               \
  X(LrProbeTooLow, "lr-probe-too-low", "L9")                                                          \
  X(FitMeasured, "fit-measured", "L9")                                                                \
  /* M10 the frozen and trainable parameters against the optimizer */                                 \
  X(FrozenInOptimizer, "frozen-in-optimizer", "M10")                                                  \
  X(MissingFromOptimizer, "missing-from-optimizer", "M10")                                            \
  /* M5 gradient flow */                                                                              \
  X(ParameterUnreached, "parameter-unreached", "M5")                                                  \
  X(GradientAllZero, "gradient-all-zero", "M5")                                                       \
  X(EvalOnlyParameter, "eval-only-parameter", "M5")                                                   \
  X(ParameterReplaced, "parameter-replaced", "M5")                                                    \
  X(ParameterUnregistered, "parameter-unregistered", "M5")                                            \
  X(OutputUnread, "output-unread", "M5")                                                              \
  X(UnitsUnread, "units-unread", "M5")                                                                \
  X(InputColumnsUnread, "input-columns-unread", "M5")                                                 \
  /* M6 batch independence */                                                                         \
  X(BatchMixing, "batch-mixing", "M6")                                                                \
  X(SeesFuture, "sees-future", "M6")                                                                  \
  X(InputUnreached, "input-unreached", "M6")                                                          \
  X(OutputIgnoresInput, "output-ignores-input", "M6")                                                 \
  /* M14 overfit one batch */                                                                         \
  X(LossBlindToLabels, "loss-blind-to-labels", "M14")                                                 \
  /* M9 initialisation over the run: weights loaded from a checkpoint, then drawn again */            \
  X(LoadedRedrawn, "loaded-redrawn", "M9")                                                            \
  X(LoadedUntrained, "loaded-untrained", "M9")                                                        \
  X(LoadedSkipped, "loaded-skipped", "M9")                                                            \
  /* M15 input-independent baseline */                                                                \
  X(TargetsUnread, "targets-unread", "M15")                                                           \
  X(LossIgnoresTargets, "loss-ignores-targets", "M15")                                                \
  /* M7 dead units */                                                                                 \
  X(DeadUnits, "dead-units", "M7")                                                                    \
  X(DiedInTraining, "died-in-training", "M7")                                                         \
  /* M25 all-zero tensors over the run */                                                             \
  X(ZeroValue, "zero-value", "M25")                                                                   \
  X(ZeroGradient, "zero-gradient", "M25")                                                             \
  /* M26 layer-output variance over the run */                                                        \
  X(VarianceCollapsed, "variance-collapsed", "M26")                                                   \
  X(VarianceBlewUp, "variance-blew-up", "M26")                                                        \
  /* M27 initialisation: activation variance through depth, symmetric units */                        \
  X(VarianceDrift, "variance-drift", "M27")                                                           \
  X(SymmetricUnits, "symmetric-units", "M27")                                                         \
  /* M23 layers that collapse into one: linear layers in a row, tables read with one index */         \
  X(LinearCollapse, "linear-collapse", "M23")                                                         \
  X(EmbeddingsOneTable, "embeddings-one-table", "M23")                                                \
  /* M28 the range watch of reduced precision */                                                      \
  X(GradientUnderflow, "gradient-underflow", "M28")                                                   \
  X(UpdatesVanish, "updates-vanish", "M28")                                                           \
  X(RangeSummary, "range-summary", "M28")                                                             \
  /* M29 the first op whose 16-bit result or gradient left the range */                               \
  X(ForwardOverflow, "forward-overflow", "M29")                                                       \
  X(ForwardUnderflow, "forward-underflow", "M29")                                                     \
  X(BackwardOverflow, "backward-overflow", "M29")                                                     \
  X(BackwardUnderflow, "backward-underflow", "M29")                                                   \
  /* O1 gradient health */                                                                            \
  X(GradientNonFinite, "gradient-nonfinite", "O1")                                                    \
  X(GradientVanishing, "gradient-vanishing", "O1")                                                    \
  X(GradientExploding, "gradient-exploding", "O1")                                                    \
  X(GradientMissing, "gradient-missing", "O1")                                                        \
  X(NoGradientAtStep, "no-gradient-at-step", "O1")                                                    \
  X(VanishTowardsInput, "vanish-towards-input", "O1")                                                 \
  X(ExplodeTowardsInput, "explode-towards-input", "O1")                                               \
  /* O2 gradient-norm history */                                                                      \
  X(NormNonFinite, "norm-nonfinite", "O2")                                                            \
  X(NormJump, "norm-jump", "O2")                                                                      \
  /* O3 weight norms: a decay too strong for the loss gradient (growth has no kind) */                \
  X(WeightDecayTooStrong, "weight-decay-too-strong", "O3")                                            \
  /* O3 a penalty on the weights with the wrong sign (the loss rewards larger weights) */             \
  X(PenaltyWrongSign, "penalty-wrong-sign", "O3")                                                     \
  /* O5 a gradient transform at the wrong place in the loop */                                        \
  X(TransformMisplaced, "transform-misplaced", "O5")                                                  \
  X(AccumulationCleared, "accumulation-cleared", "O5")                                                \
  /* O6 learning rate: the loss history, the update/weight ratios, the schedule, the lr / 10 probe */ \
  X(LrTooHigh, "lr-too-high", "O6")                                                                   \
  X(LrTooLow, "lr-too-low", "O6")                                                                     \
  X(UpdatesTooLarge, "updates-too-large", "O6")                                                       \
  X(UpdatesTooSmall, "updates-too-small", "O6")                                                       \
  X(LayerUpdatesTooSmall, "layer-updates-too-small", "O6")                                            \
  X(NeverUpdated, "never-updated", "O6")                                                              \
  X(ScheduleStartsAtZero, "schedule-starts-at-zero", "O6")                                            \
  X(ScheduleCollapses, "schedule-collapses", "O6")                                                    \
  X(ScheduleGrows, "schedule-grows", "O6")                                                            \
  X(ScheduleUnreached, "schedule-unreached", "O6")                                                    \
  X(ScheduleRebounds, "schedule-rebounds", "O6")                                                      \
  X(MetricDirectionInverted, "metric-direction-inverted", "O6")                                       \
  X(LrProbeConfirms, "lr-probe-confirms", "O6")                                                       \
  X(LrProbeRulesOut, "lr-probe-rules-out", "O6")                                                      \
  X(LrProbeInconclusive, "lr-probe-inconclusive", "O6")                                               \
  X(LrRuledOut, "lr-ruled-out", "O6")                                                                 \
  X(WeightsRewritten, "weights-rewritten", "O6")                                                      \
  X(WeightsUpdatedTwice, "weights-updated-twice", "O6")                                               \
  X(UpdatedOutsideOptimizer, "updated-outside-optimizer", "O6")                                       \
  X(EpsDominates, "eps-dominates", "O6")                                                              \
  X(BatchNormSmallBatch, "batchnorm-small-batch", "M17")                                              \
  X(BatchNormMomentum, "batchnorm-momentum", "M17")                                                   \
  X(OutputOutOfRange, "output-out-of-range", "M3")                                                    \
  X(RandomAtEval, "random-at-eval", "M2")                                                             \
  X(EvalPathDiffers, "eval-path-differs", "M2")                                                       \
  X(StateBetweenCalls, "state-between-calls", "M2")                                                   \
  /* O8 the learning rate against its optimizer's usual range, and the settings beside it */          \
  X(LrAboveRange, "lr-above-range", "O8")                                                             \
  X(LrBelowRange, "lr-below-range", "O8")                                                             \
  X(AdamBetasUnstable, "adam-betas-unstable", "O8")                                                   \
  X(SgdLrDecaySwapped, "sgd-lr-decay-swapped", "O8")                                                  \
  X(BiasGroupFrozen, "bias-group-frozen", "O8")                                                       \
  /* O10 the loss scaler */                                                                           \
  X(ScaleCollapsed, "scale-collapsed", "O10")                                                         \
  X(ScaleHalving, "scale-halving", "O10")                                                             \
  X(StepsSkipped, "steps-skipped", "O10")                                                             \
  X(ClippedScaledGradients, "clipped-scaled-gradients", "O10")                                        \
  X(ScalerSummary, "scaler-summary", "O10")                                                           \
  /* W3 the monitored run */                                                                          \
  X(ValidationRose, "validation-rose", "W3")                                                          \
  X(ValidationMisreported, "validation-misreported", "W3")                                            \
  X(TrainingFailed, "training-failed", "W3")                                                          \
  /* W8 memory: each step's graph kept alive by the loop */                                           \
  X(GraphsRetained, "graphs-retained", "W8")

enum class Kind : uint16_t {
#define GS_KIND_ENUM(sym, name, check) sym,
  GS_FINDING_KINDS(GS_KIND_ENUM)
#undef GS_KIND_ENUM
};

// "gradient-vanishing"; the JSON and docs spelling.
std::string_view kind_name(Kind k);
// The check that emits the kind ("O1"); "" for Kind::None.
std::string_view kind_check(Kind k);
// Every kind, in declaration order (Kind::None first).
const Kind* all_kinds(size_t* count);

}  // namespace gradsleuth::debug
