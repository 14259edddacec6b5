// The catalogue of checks (see checks.h): per check its id, name, group,
// sources (short titles, listed in full by all_sources()), rule and entry points.
#include "debug/evidence/catalogue.h"

#include <algorithm>
#include <cctype>

namespace gradsleuth::debug {

const std::vector<SourceInfo>& all_sources() {
  static const std::vector<SourceInfo> table = {
      {"Debugging Training", "\"Debugging Training\" (course notes, advanced level)",
       "the debugging mindset; data, gradient and loss problems, with cause tables for a loss that is NaN, Inf, "
       "stuck high, oscillating, or falling on train while rising on validation, and for vanishing and exploding "
       "gradients",
       "course staff (not named)", "undated", "", "course notes, no public URL"},
      {"Debugging neural networks", "\"Debugging neural networks\" (blog post, 2023)",
       "strong baselines, overfitting one batch, reproducibility, gradient and weight norms, practical tips",
       "the blog's author (not named)", "2023", "", "blog post, no public URL we could verify"},
      {"Troubleshooting Tips", "\"Troubleshooting Tips: Deep Learning Training Issues\" (2025)",
       "notes from debugging NaN losses in a text-to-speech project: non-finite inputs, masked batches, mixed "
       "precision, devices and dtypes, a pre-training checklist",
       "the notes' author (not named)", "2025", "", "project notes, no public URL we could verify"},
      {"debug-training", "\"debug-training\" (a checklist of common training problems)",
       "loss not decreasing, learning rate, initialisation, frozen parameters, a one-page diagnosis report",
       "the checklist's author (not named)", "undated", "", "checklist, no public URL we could verify"},
      {"Systematic Methodology",
       "\"A Systematic Methodology for Debugging Deep Learning Models: From Locating Problems to Optimising "
       "Performance\" (\u6df1\u5ea6\u5b66\u4e60\u6a21\u578b\u8c03\u8bd5\u7684\u7cfb\u7edf\u5316\u65b9\u6cd5\u8bba)",
       "locating problems step by step: shapes, NaN sources, gradient checks, dead units, under- and overfitting "
       "from train/validation curves, memory",
       "the article's author (not named)", "undated", "", "article, no public URL we could verify"},
      {"Karpathy 2019", "Andrej Karpathy, \"A Recipe for Training Neural Networks\" (2019)",
       "look at the data, verify the loss at initialisation, input-independent baseline, overfit one batch, use "
       "backprop to chart dependencies, fix the random seed",
       "Andrej Karpathy", "2019", "http://karpathy.github.io/2019/04/25/recipe/", ""},
      {"PyTorch docs", "PyTorch documentation: torch.autograd (anomaly detection, gradcheck, in-place correctness "
       "checks)",
       "torch.autograd.detect_anomaly, torch.autograd.gradcheck, and the version counter that rejects in-place "
       "changes to tensors saved for backward",
       "PyTorch contributors", "current", "https://pytorch.org/docs/stable/autograd.html", ""},
      {"PyTorch DDP", "PyTorch documentation: DistributedDataParallel and DistributedSampler (torch.nn.parallel, "
       "torch.utils.data.distributed)",
       "replicas broadcast from rank 0 at construction, gradients averaged by an all-reduce in buckets, unused "
       "parameters, one shard per rank with set_epoch, seeding each rank",
       "PyTorch contributors", "current",
       "https://pytorch.org/docs/stable/notes/ddp.html; "
       "https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html",
       ""},
      {"Li et al. 2020", "Shen Li et al., \"PyTorch Distributed: Experiences on Accelerating Data Parallel "
       "Training\" (VLDB 2020)",
       "how DistributedDataParallel keeps replicas identical: the initial broadcast, gradient bucketing, the "
       "all-reduce that averages, parameters that get no gradient",
       "Shen Li, Yanli Zhao, Rohan Varma, Omkar Salpekar, Pieter Noordhuis, Teng Li, Adam Paszke, Jeff Smith, "
       "Brian Vaughan, Pritam Damania, Soumith Chintala",
       "2020", "doi:10.14778/3415478.3415530; arXiv:2006.15704 (https://arxiv.org/abs/2006.15704)", ""},
      {"Goyal et al. 2017", "Priya Goyal et al., \"Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour\" (2017)",
       "the effective batch of data-parallel training, the linear learning-rate scaling rule with warm-up, and "
       "the pitfalls of distributed SGD: loss and gradient normalisation, per-worker data shuffling",
       "Priya Goyal, Piotr Doll\u00e1r, Ross Girshick, Pieter Noordhuis, Lukasz Wesolowski, Aapo Kyrola, Andrew "
       "Tulloch, Yangqing Jia, Kaiming He",
       "2017", "arXiv:1706.02677 (https://arxiv.org/abs/1706.02677)", ""},
      {"Pascanu et al. 2013", "Razvan Pascanu, Tomas Mikolov, Yoshua Bengio, \"On the difficulty of training recurrent "
       "neural networks\" (ICML 2013)",
       "gradient norm clipping: rescale the gradient when its norm exceeds a threshold, to tame the rare exploding "
       "step; the threshold chosen from the average norm over many updates",
       "Razvan Pascanu, Tomas Mikolov, Yoshua Bengio", "2013", "arXiv:1211.5063 (https://arxiv.org/abs/1211.5063)", ""},
      {"Deepchecks", "Deepchecks documentation: data integrity and train-test validation suites",
       "checks of a dataset and of its train/test split before training: duplicate samples, conflicting labels, "
       "train-test samples mix, feature (image property) drift, label drift, new labels, dataset size comparison",
       "Deepchecks", "current", "https://docs.deepchecks.com", ""},
      {"SageMaker Debugger", "Amazon SageMaker Debugger documentation: list of Debugger built-in rules",
       "rules run over the tensors a training job saves at every step: vanishing and exploding gradients, poor "
       "initialisation, saturated and dead activations, a loss that does not decrease, overfitting and "
       "overtraining, class imbalance, input images, all-zero, unchanged and high/low-variance tensors, the "
       "update-to-weight ratio, a stalled job, runs that differ",
       "Amazon Web Services", "current", "https://docs.aws.amazon.com/sagemaker/latest/dg/debugger-built-in-rules.html",
       ""},
      {"UMLAUT", "Eldon Schoop, Forrest Huang, Bj\u00f6rn Hartmann, \"UMLAUT: Debugging Deep Learning Programs using "
       "Program Structure, Model Behavior, and Error Messages\" (CHI 2021)",
       "heuristics checked on a Keras program's structure before training and on its behaviour each epoch: "
       "unnormalised or non-float inputs, NaN inputs and losses, a learning rate out of range, missing "
       "activations between layers, a missing softmax or an activation on the last layer, a high dropout rate, "
       "overfitting, a suspiciously high validation accuracy",
       "Eldon Schoop, Forrest Huang, Bj\u00f6rn Hartmann", "2021", "doi:10.1145/3411764.3445538", ""},
      {"Ivanov 2017", "Slav Ivanov, \"37 Reasons why your Neural Network is not working\" (2017)",
       "a checklist in four parts: dataset issues, data normalisation and augmentation, implementation issues, "
       "training issues",
       "Slav Ivanov", "2017", "https://blog.slavv.com/37-reasons-why-your-neural-network-is-not-working-4020854bd607",
       ""},
  };
  return table;
}

const SourceInfo* find_source(std::string_view short_name) {
  for (const SourceInfo& s : all_sources())
    if (s.short_name == short_name) return &s;
  return nullptr;
}

const std::vector<CheckInfo>& all_checks() {
  static std::vector<CheckInfo> table = {
      // ---- data --------------------------------------------------------------------------------
      {"D1", "batch sanity report", "data", {"Debugging Training", "debug-training", "Karpathy 2019"},
       "shape, dtype, device, min/max, mean/std of inputs and labels of one batch", "debug::check_batch",
       "gradsleuth doctor", true},
      {"D2", "non-finite inputs", "data", {"Debugging Training", "Troubleshooting Tips"}, "count NaN / Inf in inputs (and labels); fail loudly",
       "debug::check_finite_inputs", "gradsleuth doctor", true},
      {"D3", "label distribution", "data", {"Debugging Training"}, "class counts, imbalance ratio; warn on strong imbalance; per-class validation recall after training",
       "debug::check_label_distribution", "gradsleuth doctor", true},
      {"D4", "input/label alignment", "data", {"Debugging Training", "Debugging neural networks"},
       "verify that each (x, y) a loader yields is a pair that exists in the dataset (by hashing x back to its "
       "index); catches X shuffled without Y",
       "debug::check_alignment", "gradsleuth doctor --bug B07", true},
      {"D5", "normalisation", "data", {"Debugging Training", "Debugging neural networks", "UMLAUT"},
       "per-feature mean ~ 0 / std ~ 1 (or range [0,1]); warn on raw 0..255 pixels or features whose scales "
       "differ by orders of magnitude; each epoch, every training row's largest |value| against 20 x the median "
       "row's (and 10)",
       "debug::check_normalisation, debug::RowRangeTracker", "gradsleuth doctor --bug B25", true},
      {"D6", "label shape vs loss", "data", {"Debugging neural networks"},
       "labels (B,1) against predictions (B,) or the reverse: say so before the loss broadcasts",
       "debug::check_label_shape", "gradsleuth doctor --bug B01", true},
      {"D7", "data leakage", "data", {"Debugging Training"},
       "normalisation statistics must be fitted on the training split only; flag statistics fitted on data that "
       "includes validation/test rows",
       "debug::check_leakage", "gradsleuth doctor --bug B06", true},
      {"D8", "shuffling / batch diversity", "data", {"Debugging Training"},
       "flag batches that hold a single class (sorted data, shuffle off)", "debug::check_batch_diversity",
       "gradsleuth doctor --bug B28", true},
      {"D9", "label encoding", "data", {"Debugging Training"}, "labels integral, 0-indexed, inside [0, C)",
       "debug::check_label_encoding", "gradsleuth doctor --bug B26", true},
      {"D10", "same preprocessing for every split", "data", {"Debugging Training"},
       "flag a split whose statistics differ from train after preprocessing", "debug::check_split_consistency",
       "gradsleuth doctor", true},
      {"D11", "data shards across ranks", "data", {"PyTorch DDP", "Goyal et al. 2017"},
       "per epoch, the ranks' sampled indices are disjoint and cover the dataset (up to the sampler's padding of "
       "world_size - 1); flag ranks reading the same examples",
       "debug::check_shards", "mpirun -np 2 gradsleuth zoo --distributed --bug B31", true},
      {"D12", "duplicates and conflicting labels", "data", {"Deepchecks"},
       "hash every input of the training split byte for byte: warn when more than 5% of the rows repeat an "
       "earlier input, or more than 0.1% share their input with a row of another label",
       "debug::check_duplicates", "gradsleuth doctor", true},
      {"D13", "train-test samples mix", "data", {"Deepchecks"},
       "validation rows whose input is byte for byte a training row; warn above 1% of the validation rows",
       "debug::check_train_test_mix, debug::check_splits", "gradsleuth doctor", true},
      {"D14", "feature drift", "data", {"Deepchecks"},
       "two-sample Kolmogorov-Smirnov statistic of the per-example mean (brightness) and std (contrast), train "
       "vs validation; warn above 0.2",
       "debug::check_feature_drift, debug::check_splits", "gradsleuth doctor", true},
      {"D15", "label drift and new labels", "data", {"Deepchecks"},
       "classes of validation that never occur in train; population-stability index of the class frequencies, "
       "train vs validation, warn above 0.2",
       "debug::check_label_drift, debug::check_splits", "gradsleuth doctor", true},
      {"D16", "dataset size comparison", "data", {"Deepchecks"},
       "warn when the validation split has fewer than 100 examples or under 1% of the training rows",
       "debug::check_split_sizes, debug::check_splits", "gradsleuth doctor", true},
      // ---- loss and metrics --------------------------------------------------------------------
      {"L1", "loss symptom diagnosis", "loss", {"Debugging Training", "debug-training", "Systematic Methodology"},
       "from the loss history: NaN, Inf, stuck high, oscillating wildly, train down / val up, each mapped to the "
       "likely causes of the loss debugging guide",
       "debug::diagnose_loss_history", "gradsleuth doctor --bug B24", true},
      {"L2", "double softmax", "loss", {"Debugging Training"},
       "cross-entropy fed with probabilities (rows already sum to 1, all >= 0)", "debug::check_cross_entropy_input",
       "gradsleuth doctor --bug B08", true},
      {"L3", "BCE on logits", "loss", {"Debugging Training"}, "binary cross-entropy fed with values outside [0,1]",
       "debug::check_bce_input", "gradsleuth doctor --bug B09", true},
      {"L4", "initial loss", "loss", {"Debugging neural networks", "Karpathy 2019"},
       "first cross-entropy ~ log(C) (also BCE/MSE with a stated expectation); warn when far off; the untrained "
       "model's mean output against the batch's class frequencies (KL 0.5 nats above uniform guessing) or target "
       "mean (3 target stds)",
       "debug::check_initial_loss, debug::check_initial_outputs", "gradsleuth doctor", true},
      {"L5", "all labels masked", "loss", {"Troubleshooting Tips"},
       "cross-entropy with every label = ignore_index must not produce NaN silently; warn",
       "debug::check_masked_targets", "gradsleuth doctor --bug B19", true},
      {"L6", "wrong reduction", "loss", {"Debugging Training"}, "sum vs mean: gradient scale grows with batch size",
       "debug::check_loss_reduction", "gradsleuth doctor --bug B03", true},
      {"L7", "fitting diagnosis", "loss", {"Systematic Methodology", "debug-training"},
       "underfitting / overfitting / normal from train and validation curves", "debug::diagnose_fitting",
       "gradsleuth doctor", true},
      {"L8", "logged loss across ranks", "loss", {"PyTorch DDP", "Goyal et al. 2017"},
       "the loss logged for a step equals the batch-weighted mean of every rank's loss (not rank 0's alone, not "
       "averaged twice); report the ranks' loss spread",
       "debug::LoggedLossCheck", "mpirun -np 2 gradsleuth zoo --distributed --bug B34", true},
      // ---- model ---------------------------------------------------------------------------------
      {"M1", "shape trace / model summary", "model", {"Debugging neural networks", "Systematic Methodology"},
       "every module's output shape and parameter count on a sample batch", "debug::shape_trace",
       "gradsleuth doctor", true},
      {"M2", "train/eval mode", "model", {"Debugging Training"},
       "validation or inference run with a mode-dependent layer (Dropout/BatchNorm, or one of the user's own, "
       "found by probing) in training mode, and running statistics it updated; a random layer whose mean "
       "training output is not its eval output (dropout without 1/(1-p))",
       "nn::Dropout / nn::BatchNorm warnings, debug::Monitor, debug::probe_mode_dependence", "gradsleuth doctor --bug B05", true},
      {"M3", "activation after final layer", "model", {"Debugging Training"},
       "logits that cannot be negative (ReLU/sigmoid before cross-entropy)", "debug::check_final_activation",
       "gradsleuth doctor --bug B10", true},
      {"M4", "unintended shared weights", "model", {"Debugging Training"}, "one parameter registered under two module paths",
       "debug::check_shared_weights", "gradsleuth doctor --bug B11", true},
      {"M5", "gradient flow / detached tensors", "model", {"Debugging Training", "Troubleshooting Tips"},
       "trainable parameters that get no gradient after backward (detach, wrong freezing, unused layer)",
       "debug::check_gradient_flow", "gradsleuth doctor --bug B12", true},
      {"M6", "batch-mixing gradient test", "model", {"Debugging neural networks", "Karpathy 2019"},
       "loss = output[i] weighted and summed: input gradient zero for every row != i and non-zero for row i "
       "(three rows probed); BatchNorm in "
       "train mode reported as expected coupling",
       "debug::batch_mixing_test", "gradsleuth doctor --bug B13", true},
      {"M7", "dead-ReLU statistics", "model", {"Systematic Methodology"},
       "per ReLU layer: fraction of units never active over a batch and over a dataset pass; flag >= 0.7 dead; "
       "say whether units died at initialisation or during training",
       "debug::DeadReluTracker", "gradsleuth doctor --bug B18", true},
      {"M8", "saturation statistics", "model", {"Debugging Training"},
       "fraction of sigmoid/tanh pre-activations beyond +-5; flag a layer above 0.5", "debug::SaturationTracker",
       "gradsleuth doctor --bug B17", true},
      {"M9", "initialisation", "model", {"Debugging neural networks", "Troubleshooting Tips", "debug-training"},
       "per-layer weight std against the He/Xavier expectation; flag far-off layers", "debug::check_initialisation",
       "gradsleuth doctor --bug B16", true},
      {"M10", "trainable / frozen report", "model", {"Troubleshooting Tips", "debug-training"},
       "counts per module; parameters frozen that an optimizer expects, or trainable ones missing from the "
       "optimizer",
       "debug::check_trainable", "gradsleuth doctor --bug B15", true},
      {"M11", "device / dtype consistency", "model", {"Troubleshooting Tips"},
       "parameters and inputs on mixed devices or dtypes (float64 inputs into a float32 model)",
       "debug::check_devices_dtypes", "gradsleuth doctor --bug B27", true},
      {"M12", "NaN/Inf source in forward", "model", {"Troubleshooting Tips", "Systematic Methodology"},
       "name the first module/op whose output turned non-finite", "debug::find_nonfinite_source",
       "gradsleuth doctor --bug B20", true},
      {"M13", "numeric gradient check", "model", {"Systematic Methodology", "Debugging Training", "PyTorch docs"},
       "central differences in float64 against the analytic gradient; relative error per element, worst element "
       "reported",
       "debug::gradcheck, debug::gradcheck_module, debug::gradcheck_layers (layers with parameters and custom "
       "ops), debug::check_input_gradient",
       "gradsleuth gradcheck --all-ops; gradsleuth doctor --bug B22",
       true},
      {"M14", "overfit one batch", "model", {"Debugging Training", "Debugging neural networks", "Karpathy 2019"},
       "loss -> ~0 and accuracy -> 1 on one small batch within N steps", "debug::overfit_one_batch",
       "gradsleuth doctor", true},
      {"M15", "input-independent baseline", "model", {"Debugging neural networks", "Karpathy 2019"},
       "training on zeroed inputs must do worse than on real inputs", "debug::input_independent_baseline",
       "gradsleuth doctor", true},
      {"M16", "capacity check", "model", {"Debugging neural networks"}, "a larger model must reach a lower training loss",
       "debug::capacity_check", "gradsleuth doctor", true},
      {"M17", "BatchNorm running statistics", "model", {"Systematic Methodology"},
       "BatchNorm without running statistics (or never updated) used at eval", "debug::check_batchnorm_stats",
       "gradsleuth doctor --bug B23", true},
      {"M18", "reduced-precision compatibility", "model", {"Troubleshooting Tips"},
       "the same forward in float32 and in half precision: flag NaN/Inf or a large loss gap and the module "
       "responsible",
       "debug::check_half_precision", "gradsleuth doctor --bug B21", true},
      {"M19", "broadcasting detection", "model", {"Debugging Training", "Debugging neural networks"},
       "an elementwise op whose operands are both expanded ((100,1)+(1,100) -> (100,100)), or a loss whose inputs "
       "differ in shape; warn or raise by mode",
       "debug::BroadcastDetector", "gradsleuth doctor --bug B01", true},
      {"M20", "in-place detection", "model", {"Debugging Training", "PyTorch docs"},
       "an in-place op on a tensor saved for backward raises, naming the tensor, the op that saved it, the in-place "
       "op that modified it, and the versions",
       "core autograd (SavedTensor); debug::inplace_finding", "gradsleuth doctor --bug B02", true},
      {"M21", "replicas in sync", "model", {"PyTorch DDP", "Li et al. 2020"},
       "after a checked step every rank's parameters are identical: per-parameter float64 sum and sum of squares "
       "gathered and compared with tolerance 0",
       "debug::check_params_in_sync", "mpirun -np 2 gradsleuth zoo --distributed --bug B30", true},
      {"M22", "per-rank randomness", "model", {"PyTorch DDP", "Goyal et al. 2017"},
       "ranks must not draw the same random numbers (dropout masks, augmentation): the next draws of each rank's "
       "generator compared across ranks",
       "debug::check_rank_randomness", "mpirun -np 2 gradsleuth zoo --distributed --bug B32", true},
      {"M23", "missing non-linearity", "model", {"UMLAUT"},
       "two linear layers (Linear, Conv) in a row whose second takes exactly the first's output (reshaped at most) in "
       "an eval-mode forward: they collapse into one linear map",
       "debug::check_missing_nonlinearity", "gradsleuth doctor", true},
      {"M24", "dropout rate", "model", {"UMLAUT", "Ivanov 2017"},
       "a Dropout layer whose probability is above 0.5", "debug::check_dropout_rate", "gradsleuth doctor", true},
      {"M25", "all-zero tensors", "model", {"SageMaker Debugger"},
       "a layer output, a parameter or a gradient that is entirely zero at every sampled step of the run (from 2 "
       "samples; ReLU outputs are M7's), or that becomes entirely zero at a sampled step after being nonzero",
       "debug::AllZeroTracker, debug::Monitor", "gradsleuth doctor", true},
      {"M26", "tensor variance", "model", {"SageMaker Debugger"},
       "per layer output over the sampled steps of the run: its variance (the median of the last 3 samples) below "
       "1e-4 x or above 1e4 x its variance at the first sampled step",
       "debug::VarianceTracker, debug::Monitor", "gradsleuth doctor", true},
      {"M27", "weight initialisation across layers", "model", {"SageMaker Debugger"},
       "at initialisation, the variance of every ReLU layer's input in one forward: the largest above 100 x the "
       "smallest; over the first 10 steps, each weight's gradient: the 5th-95th percentile spread of its units' "
       "rows about their mean below 1e-3 x its root mean square at every step (symmetric units)",
       "debug::check_activation_variance, debug::GradientSpreadTracker, debug::Monitor", "gradsleuth doctor", true},
      // ---- optimisation -------------------------------------------------------------------------
      {"O1", "gradient health", "optimisation", {"Debugging Training", "Troubleshooting Tips", "debug-training", "Systematic Methodology"},
       "per parameter: NaN, Inf, vanishing (norm < 1e-7), exploding (norm > 1e3), no gradient; first/last layer "
       "gradient-norm ratio (vanishing < 1e-3, exploding > 70)",
       "debug::check_gradient_health", "gradsleuth doctor --bug B17", true},
      {"O2", "gradient-norm history", "optimisation", {"Debugging neural networks", "Troubleshooting Tips"}, "per-layer norms over steps; spike detection",
       "debug::NormHistory", "gradsleuth doctor", true},
      {"O3", "weight-norm history", "optimisation", {"Debugging neural networks"}, "steadily growing weight norm = early divergence",
       "debug::NormHistory", "gradsleuth doctor", true},
      {"O4", "non-finite weights", "optimisation", {"Debugging Training"}, "NaN/Inf in any parameter after a step",
       "debug::check_finite_weights", "gradsleuth doctor", true},
      {"O5", "forgotten zero_grad", "optimisation", {"Debugging Training"},
       "gradients accumulated across steps without an explicit opt-in; a gradient transform (clipping) run "
       "with no gradient present",
       "optim::Optimizer::step and optim::clip_grad_norm_ / clip_grad_value_ warnings; debug::Monitor", "gradsleuth doctor --bug B04", true},
      {"O6", "learning-rate diagnosis", "optimisation", {"Debugging Training"},
       "too high (oscillation/divergence) or too low (flat loss) from the loss history, and the update-to-weight "
       "ratio per layer outside [1e-5, 1e-1]",
       "debug::diagnose_learning_rate, debug::UpdateRatioTracker", "gradsleuth doctor --bug B24", true},
      {"O7", "gradients reduced and averaged", "optimisation", {"Li et al. 2020", "PyTorch DDP"},
       "after the all-reduce every parameter's gradient is identical across ranks and equals the average of the "
       "ranks' local gradients (summed = world_size x); every trainable parameter is in the reduced list",
       "debug::check_gradient_reduction", "mpirun -np 2 gradsleuth zoo --distributed --bug B29", true},
      {"O8", "learning rate out of range", "optimisation", {"UMLAUT", "Karpathy 2019"},
       "before training, each parameter group's learning rate against its optimizer's usual range: Adam, AdamW, "
       "RMSprop [1e-5, 1e-2]; SGD [1e-4, 1]",
       "debug::check_learning_rate_range", "gradsleuth doctor --bug B24", true},
      {"O9", "gradient clipping always active", "optimisation", {"Pascanu et al. 2013"},
       "during training, the total gradient norm at the sampled steps (after clipping, before the update): the same "
       "to 1e-3 relative at every one of 5 sampled steps or more means a clip threshold sets every update's length",
       "debug::Monitor", "gradsleuth doctor", true},
      // ---- workflow ------------------------------------------------------------------------------
      {"W1", "reproducibility", "workflow", {"Debugging Training", "Debugging neural networks", "Karpathy 2019"}, "seed everything; two runs with one seed give identical losses (and, given the models, final parameters; given a "
       "StepRecorder's fingerprints, every step's weights and gradients, naming where the runs part)",
       "debug::check_reproducible, debug::StepRecorder", "gradsleuth doctor", true},
      {"W2", "pre-training gate", "workflow", {"Troubleshooting Tips", "Debugging Training"},
       "one call: devices, trainable parameters, forward, backward, non-finite gradients, overfit-one-batch, "
       "initial loss",
       "debug::pretrain_gate", "gradsleuth doctor", true},
      {"W3", "training stability monitor", "workflow", {"Debugging Training"},
       "per step/epoch: loss finite, grad norms healthy every N steps, weights finite, validation improving, early "
       "stopping",
       "debug::Monitor", "gradsleuth doctor", true},
      {"W4", "anomaly mode", "workflow", {"Debugging Training", "Systematic Methodology", "PyTorch docs"},
       "a non-finite value (NaN and Inf, forward and backward) names the op and module that produced it, with the "
       "shapes, dtype and a summary of the offending tensor",
       "debug::AnomalyMode", "gradsleuth doctor --bug B20", true},
      {"W5", "diagnosis report", "workflow", {"debug-training"},
       "parameters, data, forward, initial loss, gradient statistics (min/max/mean/std) in one report",
       "debug::diagnosis_report", "gradsleuth doctor", true},
      {"W6", "training logs and plots", "workflow", {"Debugging Training", "Debugging neural networks"},
       "loss curves, gradient norms, dead-unit fractions written as files a person can look at",
       "debug::MetricsLog, debug::write_html_report", "gradsleuth doctor --out DIR", true},
      {"W7", "profiler", "workflow", {"Debugging Training", "Debugging neural networks"}, "time per op and per module; where the step time goes",
       "debug::Profiler", "gradsleuth doctor (the profile section)", true},
      {"W8", "memory report", "workflow", {"Systematic Methodology"}, "memory per parameter/activation/gradient, peak",
       "debug::memory_report", "gradsleuth doctor", true},
      {"W9", "effective batch and learning rate", "workflow", {"Goyal et al. 2017", "PyTorch DDP"},
       "report world_size x per-rank batch and the learning rate; warn when the gradient is summed, so the "
       "effective learning rate is lr x world_size",
       "debug::report_effective_batch", "mpirun -np 2 gradsleuth zoo --distributed", true},
      {"W10", "stalled training", "workflow", {"SageMaker Debugger"},
       "wall time between consecutive optimizer steps (evaluation passes left out): a step above 10 x the run's "
       "median step and above 2 s, or above 300 s",
       "debug::StepTimer, debug::Monitor", "gradsleuth doctor", true},
  };
  static const bool homed = [] {
    // Each check's home (CheckInfo::home): the file of its rule, thresholds and findings.
    static const std::pair<const char*, const char*> homes[] = {
      {"D1", "debug/checks/data/batch.cpp"},
      {"D2", "debug/checks/data/batch.cpp"},
      {"D3", "debug/checks/data/labels.cpp"},
      {"D4", "debug/checks/data/alignment.cpp"},
      {"D5", "debug/checks/data/normalisation.cpp"},
      {"D6", "debug/checks/data/label_shape.cpp"},
      {"D7", "debug/checks/data/leakage.cpp"},
      {"D8", "debug/checks/data/shuffling.cpp"},
      {"D9", "debug/checks/data/label_encoding.cpp"},
      {"D10", "debug/checks/data/split_consistency.cpp"},
      {"D11", "debug/checks/dist/dist_checks.cpp"},
      {"D12", "debug/checks/data/splits.cpp"},
      {"D13", "debug/checks/data/splits.cpp"},
      {"D14", "debug/checks/data/splits.cpp"},
      {"D15", "debug/checks/data/splits.cpp"},
      {"D16", "debug/checks/data/splits.cpp"},
      {"L1", "debug/checks/loss/history.cpp"},
      {"L2", "debug/checks/loss/loss_checks.cpp"},
      {"L3", "debug/checks/loss/loss_checks.cpp"},
      {"L4", "debug/checks/loss/loss_checks.cpp"},
      {"L5", "debug/checks/loss/loss_checks.cpp"},
      {"L6", "debug/checks/loss/loss_checks.cpp"},
      {"L7", "debug/checks/loss/history.cpp"},
      {"L8", "debug/checks/dist/dist_checks.cpp"},
      {"M1", "debug/checks/model/structure.cpp"},
      {"M2", "debug/checks/model/behaviour.cpp"},
      {"M3", "debug/checks/model/structure.cpp"},
      {"M4", "debug/checks/model/structure.cpp"},
      {"M5", "debug/checks/model/structure.cpp"},
      {"M6", "debug/checks/model/batch_mixing.cpp"},
      {"M7", "debug/checks/model/activation_stats.cpp"},
      {"M8", "debug/checks/model/activation_stats.cpp"},
      {"M9", "debug/checks/model/initialisation.cpp"},
      {"M10", "debug/checks/model/trainable.cpp"},
      {"M11", "debug/checks/model/devices.cpp"},
      {"M12", "debug/checks/model/anomaly.cpp"},
      {"M13", "debug/checks/model/gradcheck_layers.cpp"},
      {"M14", "debug/checks/model/training_probes.cpp"},
      {"M15", "debug/checks/model/training_probes.cpp"},
      {"M16", "debug/checks/model/training_probes.cpp"},
      {"M17", "debug/checks/model/batchnorm_stats.cpp"},
      {"M18", "debug/checks/model/anomaly.cpp"},
      {"M19", "debug/checks/model/anomaly.cpp"},
      {"M20", "debug/checks/model/anomaly.cpp"},
      {"M21", "debug/checks/dist/dist_checks.cpp"},
      {"M22", "debug/checks/dist/dist_checks.cpp"},
      {"M23", "debug/checks/model/architecture.cpp"},
      {"M24", "debug/checks/model/architecture.cpp"},
      {"M25", "debug/checks/model/run_checks.cpp"},
      {"M26", "debug/checks/model/run_checks.cpp"},
      {"M27", "debug/checks/model/architecture.cpp"},
      {"O1", "debug/checks/optim/optim_checks.cpp"},
      {"O2", "debug/checks/optim/optim_checks.cpp"},
      {"O3", "debug/checks/optim/optim_checks.cpp"},
      {"O4", "debug/checks/optim/optim_checks.cpp"},
      {"O5", "optim/optimizer.cpp"},
      {"O6", "debug/checks/optim/learning_rate.cpp"},
      {"O7", "debug/checks/dist/dist_checks.cpp"},
      {"O8", "debug/checks/optim/optim_checks.cpp"},
      {"O9", "debug/checks/optim/clipping.cpp"},
      {"W1", "debug/checks/workflow/reproducibility.cpp"},
      {"W2", "debug/run/gate.cpp"},
      {"W3", "debug/run/monitor.cpp"},
      {"W4", "debug/checks/model/anomaly.cpp"},
      {"W5", "debug/run/diagnosis_report.cpp"},
      {"W6", "debug/report/html_report.cpp"},
      {"W7", "debug/checks/workflow/profiler.cpp"},
      {"W8", "debug/checks/workflow/memory.cpp"},
      {"W9", "debug/checks/dist/dist_checks.cpp"},
      {"W10", "debug/checks/workflow/step_timer.cpp"},
    };
    for (CheckInfo& c : table)
      for (const auto& [id, path] : homes)
        if (c.id == id) c.home = path;
    return true;
  }();
  (void)homed;
  return table;
}

const CheckInfo* find_check(std::string_view id) {
  for (const CheckInfo& c : all_checks()) {
    if (c.id.size() != id.size()) continue;
    bool same = true;
    for (size_t i = 0; i < id.size(); ++i)
      same = same && std::toupper(static_cast<unsigned char>(id[i])) == c.id[i];
    if (same) return &c;
  }
  return nullptr;
}

std::string check_label(std::string_view id) {
  const CheckInfo* c = find_check(id);
  return c ? c->id + " " + c->name : std::string(id);
}

std::string sources_str(const CheckInfo& c) {
  std::string s;
  for (const std::string& x : c.sources) s += (s.empty() ? "" : "; ") + x;
  return s;
}

}  // namespace gradsleuth::debug
