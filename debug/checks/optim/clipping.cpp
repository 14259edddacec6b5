// O9, gradient clipping always active: the total gradient norm is the same at every sampled step,
// so a clip threshold (clip_grad_norm_'s max_norm) sets every update's length. Its run check.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "debug/checks/check_util.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"

namespace gradsleuth::debug {

namespace {

// The total 2-norm of the gradients at each sampled step, after backward and whatever the loop did
// to them before optimizer.step() (clipping included): the norm the update is built from. A norm
// that is the same, to within clip_spread relative, at every one of clip_min_steps sampled steps or
// more warns. clip_grad_norm_ scales the gradients by max_norm / (total + 1e-6): the norm it leaves
// is max_norm x total / (total + 1e-6), the same to 1e-6 relative whatever the batch (and to float32
// rounding, ~1e-7). Minibatch gradients that nothing rescaled differ from step to step by sampling
// noise and by the weights' change: 10% or more between sampled steps in the bug zoo's references.
// 1e-3 sits three orders of magnitude from both.
constexpr int64_t kClipMinSteps = 5;
constexpr double kClipSpread = 1e-3;
// Under an adaptive optimizer (Adam, AdamW, RMSprop, Adagrad) the step divides each coordinate's
// gradient by its running RMS, so a gradient scaled by max_norm / total comes out the same length:
// the threshold does not set the update's length, and the clipping is info. It still warns when
// the clipped gradient's RMS per coordinate falls below kClipAdaptiveRms (100x Adam's default
// epsilon of 1e-8), where the epsilon, not the gradient, sets the step.
constexpr double kClipAdaptiveRms = 1e-6;

bool adaptive(const optim::Optimizer& o) {
  const std::string& n = o.name();
  return n == "Adam" || n == "AdamW" || n == "RMSprop" || n == "Adagrad";
}

class ClippingRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "O9"; }
  uint32_t events() const override { return RunEvent::BeforeStep | RunEvent::Finish; }
  void before_step(RunContext& c, bool sampled) override {
    if (!sampled) return;
    // The optimizer's parameters, read by reference; in the sampled step's summary cache, where
    // O1 and O2/O3 already read each gradient.
    double squares = 0.0;
    int64_t count = 0;
    bool any = false;
    for (const optim::ParamGroup& group : c.optimizer.param_groups())
      for (const Tensor& p : group.params) {
        const Tensor g = p.defined() ? p.grad() : Tensor();
        if (!g.defined() || !g.is_floating_point()) continue;
        const TensorSummary s = summarize_norm(g);
        if (!s.all_finite()) return;  // O1's
        squares += s.norm * s.norm;
        count += g.numel();
        any = true;
      }
    if (!any) return;
    norms_.emplace_back(c.steps + 1, std::sqrt(squares));
    numel_ = count;
  }
  void finish(RunContext& c) override {
    std::vector<double> v;
    for (const auto& [step, n] : norms_)
      if (n > 0.0) v.push_back(n);
    if (static_cast<int64_t>(v.size()) < kClipMinSteps) return;
    c.note_ran("O9");
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    const double median = detail::median(v);
    const double spread = (*hi - *lo) / median;
    if (!(spread <= kClipSpread)) return;
    const double rms = numel_ > 0 ? median / std::sqrt(static_cast<double>(numel_)) : 0.0;
    if (adaptive(c.optimizer) && rms >= kClipAdaptiveRms) {
      Finding f = detail::make("O9", Severity::Info,
                               "the gradient norm is " + fmt_num(median) + " at every one of " +
                                   detail::num(static_cast<int64_t>(v.size())) + " sampled steps: clipped at every step; " +
                                   c.optimizer.name() +
                                   " divides each coordinate by its running RMS, so the threshold does not set the "
                                   "update's length");
      f.evidence = {{"sampled steps", static_cast<double>(v.size()), ">= 5 judged"},
                    {"gradient norm (median)", median, ""},
                    {"(max - min) / median of the norms", spread, "<= 1e-3 is clipped at every step"},
                    {"clipped gradient RMS per coordinate", rms,
                     "< " + fmt_num(kClipAdaptiveRms) + " warns under an adaptive optimizer"}};
      f.fix =
          "none needed for the step's length; to keep clipping for rare spikes only, raise max_norm above the "
          "usual gradient norm (O2's history shows it)";
      c.add(std::move(f));
      return;
    }
    Finding f = detail::make("O9", Severity::Warning,
                             "the gradient norm is " + fmt_num(median) + " at every one of " +
                                 detail::num(static_cast<int64_t>(v.size())) +
                                 " sampled steps: the gradients are clipped at every step, and the threshold, not the "
                                 "gradient, sets the length of every update");
    f.evidence = {{"sampled steps", static_cast<double>(v.size()), ">= 5 judged"},
                  {"gradient norm (median)", median, ""},
                  {"(max - min) / median of the norms", spread, "<= 1e-3 warns"}};
    if (adaptive(c.optimizer))
      f.evidence.push_back({"clipped gradient RMS per coordinate", rms,
                            "< " + fmt_num(kClipAdaptiveRms) + " warns under an adaptive optimizer"});
    f.cause =
        "clip_grad_norm_ (or TrainerOptions::clip_grad_norm) with a max_norm below the gradient's norm at "
        "every step: every update has the same length, max_norm x the learning rate, whatever the loss says, "
        "so training is slower where the gradient is large and noisier near a minimum";
    f.fix =
        "raise max_norm above the usual gradient norm (O2's history shows it; clipping should act only on "
        "rare spikes), or remove the clipping";
    c.add(std::move(f));
  }

 private:
  std::vector<std::pair<int64_t, double>> norms_;  // (step, total gradient norm) at the sampled steps
  int64_t numel_ = 0;                               // the gradients' elements at the last sampled step
};

}  // namespace

std::unique_ptr<RunCheck> make_clipping_run_check(const MonitorOptions&) {
  return std::make_unique<ClippingRunCheck>();
}

}  // namespace gradsleuth::debug
