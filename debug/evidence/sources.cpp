// The public sources the checks cite, and the tools docs/checks.md compares them with (see catalogue.h).
#include "debug/evidence/catalogue.h"

#include <algorithm>

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
      {"PyTorch docs",
       "PyTorch documentation: torch.autograd (anomaly detection, gradcheck, in-place correctness "
       "checks)",
       "torch.autograd.detect_anomaly, torch.autograd.gradcheck, and the version counter that rejects in-place "
       "changes to tensors saved for backward",
       "PyTorch contributors", "current", "https://pytorch.org/docs/stable/autograd.html", ""},
      {"PyTorch DDP",
       "PyTorch documentation: DistributedDataParallel and DistributedSampler (torch.nn.parallel, "
       "torch.utils.data.distributed)",
       "replicas broadcast from rank 0 at construction, gradients averaged by an all-reduce in buckets, unused "
       "parameters, one shard per rank with set_epoch, seeding each rank",
       "PyTorch contributors", "current",
       "https://pytorch.org/docs/stable/notes/ddp.html; "
       "https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html",
       ""},
      {"Li et al. 2020",
       "Shen Li et al., \"PyTorch Distributed: Experiences on Accelerating Data Parallel "
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
      {"Kingma & Ba 2015", "Diederik P. Kingma, Jimmy Ba, \"Adam: A Method for Stochastic Optimization\" (ICLR 2015)",
       "the Adam update (bias-corrected first and second moments of the gradient, decays beta1 and beta2, defaults "
       "0.9 and 0.999) and its convergence analysis, which assumes beta1^2 / sqrt(beta2) < 1",
       "Diederik P. Kingma, Jimmy Ba", "2015", "arXiv:1412.6980 (https://arxiv.org/abs/1412.6980)", ""},
      {"Pascanu et al. 2013",
       "Razvan Pascanu, Tomas Mikolov, Yoshua Bengio, \"On the difficulty of training recurrent "
       "neural networks\" (ICML 2013)",
       "gradient norm clipping: rescale the gradient when its norm exceeds a threshold, to tame the rare exploding "
       "step; the threshold chosen from the average norm over many updates",
       "Razvan Pascanu, Tomas Mikolov, Yoshua Bengio", "2013", "arXiv:1211.5063 (https://arxiv.org/abs/1211.5063)", ""},
      {"Micikevicius et al. 2018", "Paulius Micikevicius et al., \"Mixed Precision Training\" (ICLR 2018)",
       "float16 training with float32 master weights and loss scaling: gradients too small for float16 are "
       "shifted into its range by scaling the loss, and a dynamic scale backs off and skips the step when a "
       "gradient overflows",
       "Paulius Micikevicius, Sharan Narang, Jonah Alben, Gregory Diamos, Erich Elsen, David Garcia, Boris Ginsburg, "
       "Michael Houston, Oleksii Kuchaiev, Ganesh Venkatesh, Hao Wu",
       "2018", "arXiv:1710.03740 (https://arxiv.org/abs/1710.03740)", ""},
      {"PyTorch AMP", "PyTorch documentation: Automatic Mixed Precision (torch.amp) and its examples",
       "GradScaler's dynamic loss scale (init 2^16, x0.5 on an inf/NaN gradient with the step skipped, x2 after "
       "2000 clean steps) and its use: unscale_ before clipping, one update per iteration",
       "PyTorch contributors", "current",
       "https://pytorch.org/docs/stable/amp.html; https://pytorch.org/docs/stable/notes/amp_examples.html", ""},
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
      {"UMLAUT",
       "Eldon Schoop, Forrest Huang, Bj\u00f6rn Hartmann, \"UMLAUT: Debugging Deep Learning Programs using "
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

}  // namespace gradsleuth::debug
