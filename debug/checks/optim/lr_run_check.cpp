// O6 during training, the monitor's run check: it gathers what O6 judges at the end of a run (the loop's
// writes to the weights, the update/weight ratios on the sampled steps, the plateau schedulers' records);
// learning_rate.cpp, O6's home, judges them (judge_learning_rate_run).
#include <algorithm>
#include <memory>

#include "debug/checks/optim/optim_checks.h"
#include "debug/checks/optim/weight_writes.h"
#include "debug/checks/run_check.h"
#include "optim/scheduler.h"

namespace gradsleuth::debug {

namespace {
// The update/weight ratios on the sampled steps (1, every, 2 every, ...), the same steps as the
// other parameter checks: its reads of the weights right before and after the update bring them
// into cache for those, and O2/O3 and O4 reuse its measurements (RunContext::measured_norm,
// measured_finite). At the end, the loss history and the schedule.
class LearningRateRunCheck final : public RunCheck {
 public:
  explicit LearningRateRunCheck(const OptimCheckOptions& o)
      : o_(o), ratios_(o), metric_tick_(optim::metric_step_tick()) {}
  std::string ids() const override { return "O6"; }
  uint32_t events() const override {
    return RunEvent::Attach | RunEvent::Detach | RunEvent::Pause | RunEvent::Finish | RunEvent::Series;
  }
  void pause(RunContext& c, bool on) override {
    // A replay after the run: the loop's last writes are counted before it, its own are not.
    if (!c.replaying) return;
    if (on)
      writes_.finish();
    else
      writes_.resync();
  }
  void attach(RunContext& c) override {
    writes_.attach(c.optimizer, c.model);  // first: the probes inside a step restore what they change
    ratios_.attach(c.optimizer, c.model, [every = std::max<int64_t>(c.options.every, 1)](int64_t step) {
      return RunContext::sampled_at(step, every);
    });
    c.measured_norm = [this](const Tensor& p) { return ratios_.measured_norm(p); };
    c.measured_finite = [this](const Tensor& p) { return ratios_.measured_finite(p); };
  }
  void detach(RunContext&) override {
    ratios_.detach();
    writes_.detach();
  }
  void finish(RunContext& c) override {
    writes_.finish();  // a write after the last step
    c.add_all(judge_weight_writes(writes_.summary(), o_));
    judge_learning_rate_run(c, o_, ratios_, metric_tick_);
  }
  void series(TrainingHistory& h) const override {
    h.update_ratio = ratios_.series();
    const WeightWriteTracker::Summary w = writes_.summary();
    h.weights_loaded_after_run = w.after_last_step;
    h.weights_loaded_unchanged = w.after_last_step_same;
  }

 private:
  OptimCheckOptions o_;
  UpdateRatioTracker ratios_;
  WeightWriteTracker writes_;
  uint64_t metric_tick_;  // optim::metric_step_tick() when the run began
};
}  // namespace

std::unique_ptr<RunCheck> make_learning_rate_run_check(const MonitorOptions& o) {
  return std::make_unique<LearningRateRunCheck>(o.optim);
}

}  // namespace gradsleuth::debug
