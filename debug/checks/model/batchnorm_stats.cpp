// M17 BatchNorm running statistics at evaluation (see model_checks.h).
#include "debug/checks/model/model_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/hooks.h"
#include "debug/checks/model/behaviour.h"
#include "debug/checks/model/model_util.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "optim/adam.h"

namespace gradsleuth::debug {

using namespace model_detail;

// ---- M17 -----------------------------------------------------------------------------------
std::vector<Finding> check_batchnorm_stats(nn::Module& model) {
  std::vector<Finding> out;
  for (auto& [path, m] : model.named_modules()) {
    auto* bn = dynamic_cast<nn::BatchNormBase*>(m.get());
    if (!bn) continue;
    const bool none = !bn->track_running_stats();
    const int64_t tracked = none ? 0 : bn->num_batches_tracked.item<int64_t>();
    if (!none && tracked > 0) continue;
    Finding f;
    f.check = "M17";
    f.severity = Severity::Warning;
    f.module = module_label(path, *m);
    f.title = none ? "BatchNorm without running statistics: in eval mode it normalises with each batch's own "
                     "statistics"
                   : "BatchNorm's running statistics were never updated (num_batches_tracked = 0) but the model "
                     "is being evaluated";
    f.evidence = {{"num_batches_tracked", static_cast<double>(tracked), "0 at eval flags"}};
    if (!none) {
      const TensorSummary rm = summarize(bn->running_mean), rv = summarize(bn->running_var);
      f.evidence.push_back({"running_mean mean", rm.mean, ""});
      f.evidence.push_back({"running_var mean", rv.mean, ""});
    }
    f.cause = none ? "track_running_stats=false: a prediction depends on the other examples in the batch and on "
                     "its size; a single example cannot be evaluated"
                   : "the layer never ran in training mode with statistics tracking (trained in eval mode, or a "
                     "forward that skips the update), so eval uses mean 0 / var 1 instead of the data's";
    f.fix = "keep track_running_stats=true and train in train mode so the running statistics follow the data";
    out.push_back(std::move(f));
  }
  return out;
}

// ---- M17 during training: what the monitor's mode tracker (behaviour.cpp) hears ---------------
Finding batchnorm_eval_finding(const std::string& label, bool no_running_stats, int64_t steps) {
  Finding f;
  f.check = "M17";
  f.severity = Severity::Warning;
  f.module = label;
  f.title = no_running_stats ? label + " is evaluated without running statistics: it uses each batch's own statistics"
                             : label +
                                   " is evaluated with running statistics that were never updated (num_batches_tracked "
                                   "= 0 after " +
                                   std::to_string(steps) + " training steps)";
  f.evidence = {{"num_batches_tracked", 0.0, "0 at eval flags"},
                {"training steps so far", static_cast<double>(steps), ""}};
  f.cause = no_running_stats ? "track_running_stats=false: predictions depend on the batch they are evaluated with"
                             : "the running statistics are never updated in training (the layer normalises with batch "
                               "statistics only), so eval uses mean 0 / var 1 instead of the data's";
  f.fix = "keep track_running_stats=true, and train in train mode so the running statistics follow the data";
  return f;
}

Finding stale_buffers_finding(const std::string& label, const std::string& buffers, int64_t steps) {
  Finding f;
  f.check = "M17";
  f.severity = Severity::Warning;
  f.module = label;
  f.title = label + " is evaluated with buffers (" + buffers + ") that never changed in " + std::to_string(steps) +
            " training steps";
  f.evidence = {{"training steps so far", static_cast<double>(steps), ""},
                {"buffer updates seen", 0.0, "0 at eval flags"}};
  f.cause =
      "the layer computes differently in eval mode (BatchNorm-like) from statistics it keeps in buffers, "
      "but its training forward never updates them, so eval uses their initial values instead of the "
      "data's";
  f.fix = "update the running statistics in the training-mode forward (under no_grad), as nn::BatchNorm does";
  return f;
}

// ---- M17 during training: how many examples each BatchNorm normalises with ---------------------
namespace {
class BatchNormBatchRunCheck final : public RunCheck {
 public:
  explicit BatchNormBatchRunCheck(const RunCheckOptions& o) : o_(o) {}
  std::string ids() const override { return "M17"; }
  uint32_t events() const override { return RunEvent::Attach | RunEvent::Pause | RunEvent::Detach | RunEvent::Finish; }
  void attach(RunContext& c) override {
    for (auto& [path, m] : c.model.named_modules()) {
      if (!dynamic_cast<nn::BatchNormBase*>(m.get())) continue;
      const size_t i = layers_.size();
      const std::optional<double> momentum = dynamic_cast<nn::BatchNormBase*>(m.get())->options().momentum_;
      layers_.push_back({module_label(path, *m)});
      layers_.back().momentum = momentum.value_or(detail::kNaN);
      hooks_.pre(
          m,
          [this, i](nn::Module& self, const Tensor& in) {
            if (paused_ || !self.is_training() || !GradMode::is_enabled() || !in.defined() || in.dim() < 2) return;
            Layer& l = layers_[i];
            ++l.forwards;
            l.small += in.size(0) < o_.batchnorm_min_batch ? 1 : 0;
            l.fewest = l.fewest < 0 ? in.size(0) : std::min(l.fewest, in.size(0));
          },
          false);
    }
  }
  void pause(RunContext&, bool on) override { paused_ = on; }
  void detach(RunContext&) override { hooks_.clear(); }
  void finish(RunContext& c) override {
    for (const Layer& l : layers_) {
      if (l.forwards == 0 || !(l.momentum > o_.batchnorm_max_momentum)) continue;
      Finding f;
      f.check = "M17";
      f.severity = Severity::Warning;
      f.kind = Kind::BatchNormMomentum;
      f.module = l.label;
      f.title = l.label + " has momentum " + fmt_num(l.momentum) +
                ": its running statistics are its last few training batches' alone (the new batch weighs " +
                fmt_num(l.momentum) + ")";
      f.evidence = {
          {"momentum (weight of the newest batch)", l.momentum, "> " + fmt_num(o_.batchnorm_max_momentum) + " warns"},
          {"training forwards", static_cast<double>(l.forwards), ""},
          {"fewest examples in a batch", static_cast<double>(l.fewest), ""}};
      f.cause =
          "a momentum written in Keras's convention, where it is the weight of the old statistics (0.99); here, as "
          "in PyTorch, it is the weight of the new batch, so evaluation normalises with the statistics of the last "
          "batch or two, and a small last batch throws them off";
      f.fix = "use 1 - the Keras value (0.01 for 0.99); the default 0.1 suits most runs";
      c.add(std::move(f));
    }
    for (const Layer& l : layers_) {
      if (l.forwards < 3 || 2 * l.small <= l.forwards) continue;
      Finding f;
      f.check = "M17";
      f.severity = Severity::Warning;
      f.kind = Kind::BatchNormSmallBatch;
      f.module = l.label;
      f.title = l.label + " normalised batches of fewer than " + std::to_string(o_.batchnorm_min_batch) +
                " examples in " + std::to_string(l.small) + " of its " + std::to_string(l.forwards) +
                " training forwards (as few as " + std::to_string(l.fewest) + ")";
      f.evidence = {{"training forwards", static_cast<double>(l.forwards), ""},
                    {"of them with fewer examples than batchnorm_min_batch", static_cast<double>(l.small),
                     "> half warns (" + std::to_string(o_.batchnorm_min_batch) + " examples)"},
                    {"fewest examples in a batch", static_cast<double>(l.fewest), ""}};
      f.cause =
          "BatchNorm normalises each example with the mean and variance of its batch: from two or three examples "
          "those are noise (two examples normalise to +-1 whatever they hold), every output depends on the "
          "other example, and the running statistics used at evaluation drift from the data's";
      f.fix =
          "train with batches of 8 examples or more per BatchNorm, or use a normalisation that does not depend "
          "on the batch (nn::LayerNorm, GroupNorm)";
      c.add(std::move(f));
    }
    // A model without a BatchNorm layer has none of M17's causes: ruled out, not left open (an
    // overfitting run's candidates then do not name BatchNorm's statistics).
    c.note_ran("M17");
  }

 private:
  struct Layer {
    std::string label;
    int64_t forwards = 0, small = 0, fewest = -1;
    double momentum = detail::kNaN;  // NaN: the cumulative average
  };
  RunCheckOptions o_;
  HookSet hooks_;
  std::vector<Layer> layers_;
  bool paused_ = false;
};
}  // namespace

std::unique_ptr<RunCheck> make_batchnorm_batch_run_check(const MonitorOptions& o) {
  return std::make_unique<BatchNormBatchRunCheck>(o.run);
}

}  // namespace gradsleuth::debug
