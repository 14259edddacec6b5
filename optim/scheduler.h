// Learning-rate schedules (StepLR, CosineAnnealingLR, LinearWarmup,
// ReduceLROnPlateau) and EarlyStopping. Call sched.step() once per epoch (or
// per batch), after optimizer.step(); every group's lr is scaled from that
// group's lr when the scheduler was made (its "base lr").
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace gradsleuth::optim {

// Whether a smaller (loss) or larger (accuracy) metric is better.
enum class Mode { Min, Max };

// What each ReduceLROnPlateau and EarlyStopping of this process was stepped with, kept for the
// debug module (a plateau scheduler in Mode::Min fed an accuracy cuts the rate after every
// improvement): the metric of each step(), the mode that judged it, and the steps after which it
// acted. The last 8 to be stepped, oldest first.
struct MetricStepRecord {
  std::string owner;  // "ReduceLROnPlateau" or "EarlyStopping"
  Mode mode = Mode::Min;
  uint64_t first_tick = 0;      // metric_step_tick() before its first step()
  std::vector<double> metrics;  // one per step()
  std::vector<int64_t> acted;   // 0-based steps after which it cut a rate, or first said stop
};
std::vector<MetricStepRecord> metric_step_records();
// The step() calls made so far by every ReduceLROnPlateau and EarlyStopping: a reader that notes
// it at its start keeps the records whose first_tick is not below it.
uint64_t metric_step_tick();

class LRScheduler;
// Every LRScheduler alive in this process, oldest first, for the debug module: a schedule whose
// lengths count optimizer steps but that is stepped once per epoch never reaches its peak, which
// its own lr_at says. The pointers are valid while those schedulers live.
std::vector<const LRScheduler*> live_schedulers();

// A schedule given in closed form: lr of a group = lr_at(t, its base lr), where
// t counts step() calls (t = 0 when the scheduler is made). The optimizer's
// lrs are set for t = 0 on construction, so a warm-up starts low right away.
// One scheduler per optimizer: each overwrites the lrs (compose with LinearWarmup).
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler();
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  void step();  // t += 1; every group's lr = lr_at(t, base lr)
  // The lrs the last step() (or the constructor) set, one per group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  int64_t last_epoch() const { return last_epoch_; }  // t
  Optimizer& optimizer() const { return opt_; }
  // The schedule: the lr for step t of a group whose lr started at base_lr.
  virtual double lr_at(int64_t t, double base_lr) const = 0;

 protected:
  // Derived constructors call this last (a virtual call cannot run in ours):
  // sets the lrs for t = 0.
  void start() { apply(0); }
  void apply(int64_t t);
  std::string name_ = "LRScheduler";  // each schedule's own name, for its errors

 private:
  Optimizer& opt_;
  std::vector<double> base_lrs_, last_lr_;
  int64_t last_epoch_ = 0;
};

// lr = base_lr * gamma^floor(t / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t t, double base_lr) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * t / T_max)) / 2
// (the closed form of torch's CosineAnnealingLR: base_lr at t = 0, eta_min at
// t = T_max, and back up again after it, with period 2 T_max).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  double lr_at(int64_t t, double base_lr) const override;

 private:
  int64_t T_max_;
  double eta_min_;
};

// Linear warm-up (torch's LinearLR with end_factor 1), then an optional
// schedule that takes over at t = warmup_steps and counts its own steps from 0:
//   t <  warmup_steps:  lr = base_lr * (start_factor + (1 - start_factor) * t / warmup_steps)
//   t >= warmup_steps:  lr = after ? after->lr_at(t - warmup_steps, base_lr) : base_lr
// Warm-up then cosine over 100 steps in all:
//   LinearWarmup sched(opt, 5, 0.1, std::make_unique<CosineAnnealingLR>(opt, 95));
// `after` must be made on the same optimizer; only this scheduler is stepped.
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, double start_factor = 1.0 / 3.0,
               std::unique_ptr<LRScheduler> after = nullptr);
  double lr_at(int64_t t, double base_lr) const override;
  const LRScheduler* after() const { return after_.get(); }

 private:
  int64_t warmup_steps_;
  double start_factor_;
  std::unique_ptr<LRScheduler> after_;
};

// Options of ReduceLROnPlateau, with torch's defaults.
struct ReduceLROnPlateauOptions {
  enum class ThresholdMode { Rel, Abs };
  GS_OPTIM_ARG(Mode, mode) = Mode::Min;
  GS_OPTIM_ARG(double, factor) = 0.1;      // new lr = lr * factor
  GS_OPTIM_ARG(int64_t, patience) = 10;    // steps without improvement tolerated
  GS_OPTIM_ARG(double, threshold) = 1e-4;  // how much better counts as better
  GS_OPTIM_ARG(ThresholdMode, threshold_mode) = ThresholdMode::Rel;
  GS_OPTIM_ARG(int64_t, cooldown) = 0;  // steps after a reduction when bad steps are not counted
  GS_OPTIM_ARG(double, min_lr) = 0.0;   // no group's lr goes below this
  GS_OPTIM_ARG(double, eps) = 1e-8;     // changes smaller than this are skipped
};

// Cuts every group's lr by `factor` when the metric stops improving, as torch's
// ReduceLROnPlateau. Each step(metric):
//   better = metric < best * (1 - threshold)   (Min, Rel; Abs: metric < best - threshold;
//            metric > best * (1 + threshold)    Max, Rel; Abs: metric > best + threshold)
//   better ? (best = metric, bad = 0) : bad += 1
//   in cooldown: cooldown_left -= 1, bad = 0
//   bad > patience: lr = max(lr * factor, min_lr) for each group (if it moves more than eps),
//                   cooldown_left = cooldown, bad = 0
// A NaN metric is never better.
class ReduceLROnPlateau {
 public:
  explicit ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options = {});
  void step(double metric);
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_; }
  int64_t cooldown_counter() const { return cooldown_left_; }
  int64_t last_epoch() const { return last_epoch_; }
  const ReduceLROnPlateauOptions& options() const { return options_; }

 private:
  bool is_better(double metric) const;
  Optimizer& opt_;
  ReduceLROnPlateauOptions options_;
  double best_;
  int64_t num_bad_ = 0, cooldown_left_ = 0, last_epoch_ = 0;
  std::vector<double> last_lr_;
  int64_t record_ = -1;  // its MetricStepRecord (metric_step_records())
};

// Stops training when the metric has not improved for `patience` steps:
//   improved = metric < best - min_delta   (Min)  /  metric > best + min_delta   (Max)
//   improved ? (best = metric, bad = 0) : bad += 1;     stop when bad >= patience
// A non-finite metric (NaN/Inf loss: training diverged) stops at once.
//   EarlyStopping stopper(5, 1e-4);   ...   if (stopper.step(val_loss)) break;
class EarlyStopping {
 public:
  explicit EarlyStopping(int64_t patience = 10, double min_delta = 0.0, Mode mode = Mode::Min);
  // Records one metric; true when training should stop.
  bool step(double metric);
  double best() const { return best_; }
  int64_t best_step() const { return best_step_; }  // 0-based index of the step() that set best(); -1 before any
  int64_t num_bad_steps() const { return num_bad_; }
  bool should_stop() const { return stop_; }
  void reset();

 private:
  int64_t patience_;
  double min_delta_;
  Mode mode_;
  double best_;
  int64_t best_step_ = -1, num_bad_ = 0, steps_ = 0;
  bool stop_ = false;
  int64_t record_ = -1;  // its MetricStepRecord (metric_step_records())
};

}  // namespace gradsleuth::optim
