// Learning-rate schedules and EarlyStopping: each schedule is one formula of
// (t, base lr), applied to every parameter group.
#include "optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <mutex>
#include <numbers>

namespace gradsleuth::optim {

// ---- the metric-step records -------------------------------------------------------

namespace {
constexpr size_t kMetricRecordsKept = 8;
struct MetricRecords {
  std::mutex mu;
  uint64_t tick = 0;
  int64_t next_id = 0;
  std::deque<std::pair<int64_t, MetricStepRecord>> kept;  // (id, record), oldest first
};
MetricRecords& metric_records() {
  static MetricRecords r;
  return r;
}
// Appends one step of the watcher whose record is `id` (-1: a new record, its id written back).
void record_metric_step(int64_t& id, const char* owner, Mode mode, double metric, bool acted) {
  MetricRecords& r = metric_records();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = std::find_if(r.kept.begin(), r.kept.end(), [&](const auto& e) { return e.first == id; });
  if (id < 0 || it == r.kept.end()) {
    id = r.next_id++;
    MetricStepRecord rec;
    rec.owner = owner;
    rec.mode = mode;
    rec.first_tick = r.tick;
    r.kept.emplace_back(id, std::move(rec));
    if (r.kept.size() > kMetricRecordsKept) r.kept.pop_front();
    it = std::prev(r.kept.end());
  } else {
    // The most recently stepped stays last, so the 8 kept are the last 8 to be stepped.
    std::rotate(it, std::next(it), r.kept.end());
    it = std::prev(r.kept.end());
  }
  MetricStepRecord& rec = it->second;
  if (acted) rec.acted.push_back(static_cast<int64_t>(rec.metrics.size()));
  rec.metrics.push_back(metric);
  ++r.tick;
}
}  // namespace

std::vector<MetricStepRecord> metric_step_records() {
  MetricRecords& r = metric_records();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<MetricStepRecord> out;
  for (const auto& e : r.kept) out.push_back(e.second);
  return out;
}

uint64_t metric_step_tick() {
  MetricRecords& r = metric_records();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.tick;
}

// ---- LRScheduler -------------------------------------------------------------------

namespace {
struct LiveSchedulers {
  std::mutex mu;
  std::vector<const LRScheduler*> all;
};
LiveSchedulers& live() {
  static LiveSchedulers l;
  return l;
}
}  // namespace

std::vector<const LRScheduler*> live_schedulers() {
  LiveSchedulers& l = live();
  std::lock_guard<std::mutex> lock(l.mu);
  return l.all;
}

LRScheduler::LRScheduler(Optimizer& optimizer) : opt_(optimizer) {
  for (const auto& g : opt_.param_groups()) base_lrs_.push_back(g.lr);
  last_lr_ = base_lrs_;
  LiveSchedulers& l = live();
  std::lock_guard<std::mutex> lock(l.mu);
  l.all.push_back(this);
}

LRScheduler::~LRScheduler() {
  LiveSchedulers& l = live();
  std::lock_guard<std::mutex> lock(l.mu);
  l.all.erase(std::remove(l.all.begin(), l.all.end(), this), l.all.end());
}

void LRScheduler::step() { apply(last_epoch_ + 1); }

void LRScheduler::apply(int64_t t) {
  auto& groups = opt_.param_groups();
  GS_CHECK(groups.size() == base_lrs_.size(), "LRScheduler.step", "the optimizer had ", base_lrs_.size(),
           " parameter group(s) when the scheduler was made and has ", groups.size(),
           " now; make the scheduler after the last add_param_group()");
  // Every new lr is computed, then each goes through the optimizer's checked setter.
  std::vector<double> lrs;
  for (size_t g = 0; g < groups.size(); ++g) lrs.push_back(lr_at(t, base_lrs_[g]));
  for (size_t g = 0; g < groups.size(); ++g)
    GS_CHECK(std::isfinite(lrs[g]) && lrs[g] >= 0.0, name_ + ".step", "step ", t, " gives group ", g,
             " the learning rate ", lrs[g], " (from the base lr ", base_lrs_[g],
             "); it must be finite and >= 0: check the schedule's factors. The lrs stay as they were");
  for (size_t g = 0; g < groups.size(); ++g) opt_.set_group_lr(g, lrs[g], name_ + ".step");
  last_lr_ = lrs;
  last_epoch_ = t;
}

// ---- StepLR, CosineAnnealingLR -----------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  name_ = "StepLR";
  GS_CHECK(step_size > 0, "StepLR", "step_size must be > 0 (steps between decays), got ", step_size);
  GS_CHECK(std::isfinite(gamma) && gamma > 0.0, "StepLR",
           "gamma must be finite and > 0 (0.1 divides the lr by 10 every step_size steps), got ", gamma);
  start();
}

double StepLR::lr_at(int64_t t, double base_lr) const {
  return base_lr * std::pow(gamma_, static_cast<double>(t / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), T_max_(T_max), eta_min_(eta_min) {
  GS_CHECK(T_max > 0, "CosineAnnealingLR", "T_max must be > 0 (steps from base lr down to eta_min), got ", T_max);
  name_ = "CosineAnnealingLR";
  GS_CHECK(std::isfinite(eta_min) && eta_min >= 0.0, "CosineAnnealingLR", "eta_min must be finite and >= 0, got ",
           eta_min);
  start();
}

double CosineAnnealingLR::lr_at(int64_t t, double base_lr) const {
  const double c = std::cos(std::numbers::pi * static_cast<double>(t) / static_cast<double>(T_max_));
  return eta_min_ + (base_lr - eta_min_) * (1.0 + c) / 2.0;
}

// ---- LinearWarmup ------------------------------------------------------------------

LinearWarmup::LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, double start_factor,
                           std::unique_ptr<LRScheduler> after)
    : LRScheduler(optimizer), warmup_steps_(warmup_steps), start_factor_(start_factor), after_(std::move(after)) {
  name_ = "LinearWarmup";
  GS_CHECK(warmup_steps >= 0, "LinearWarmup", "warmup_steps must be >= 0, got ", warmup_steps);
  GS_CHECK(start_factor > 0.0 && start_factor <= 1.0, "LinearWarmup", "start_factor must be in (0, 1], got ",
           start_factor, " (the first lr is base_lr * start_factor)");
  GS_CHECK(!after_ || &after_->optimizer() == &optimizer, "LinearWarmup",
           "the schedule to run after warm-up was made on a different optimizer; make it on the same one");
  start();
}

double LinearWarmup::lr_at(int64_t t, double base_lr) const {
  if (t < warmup_steps_)
    return base_lr *
           (start_factor_ + (1.0 - start_factor_) * static_cast<double>(t) / static_cast<double>(warmup_steps_));
  return after_ ? after_->lr_at(t - warmup_steps_, base_lr) : base_lr;
}

// ---- ReduceLROnPlateau -------------------------------------------------------------

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options)
    : opt_(optimizer), options_(options) {
  const char* op = "ReduceLROnPlateau";
  GS_CHECK(options.factor() > 0.0 && options.factor() < 1.0, op, "factor must be in (0, 1), got ", options.factor(),
           " (0.1 divides the lr by 10 at each plateau)");
  GS_CHECK(options.patience() >= 0, op, "patience must be >= 0, got ", options.patience());
  GS_CHECK(options.cooldown() >= 0, op, "cooldown must be >= 0, got ", options.cooldown());
  GS_CHECK(std::isfinite(options.threshold()) && options.threshold() >= 0.0, op,
           "threshold must be finite and >= 0, got ", options.threshold());
  GS_CHECK(std::isfinite(options.min_lr()) && options.min_lr() >= 0.0, op, "min_lr must be finite and >= 0, got ",
           options.min_lr());
  GS_CHECK(std::isfinite(options.eps()) && options.eps() >= 0.0, op, "eps must be finite and >= 0, got ",
           options.eps());
  GS_CHECK(options.mode() == Mode::Min || options.mode() == Mode::Max, op, "mode value ",
           static_cast<int>(options.mode()), " is not a Mode; pass Mode::Min or Mode::Max");
  using TM = ReduceLROnPlateauOptions::ThresholdMode;
  GS_CHECK(options.threshold_mode() == TM::Rel || options.threshold_mode() == TM::Abs, op, "threshold_mode value ",
           static_cast<int>(options.threshold_mode()),
           " is not a ThresholdMode; pass ThresholdMode::Rel or ThresholdMode::Abs");
  const double inf = std::numeric_limits<double>::infinity();
  best_ = options.mode() == Mode::Min ? inf : -inf;
  for (const auto& g : opt_.param_groups()) last_lr_.push_back(g.lr);
}

bool ReduceLROnPlateau::is_better(double a) const {
  const double th = options_.threshold();
  const bool rel = options_.threshold_mode() == ReduceLROnPlateauOptions::ThresholdMode::Rel;
  if (options_.mode() == Mode::Min) return rel ? a < best_ * (1.0 - th) : a < best_ - th;
  return rel ? a > best_ * (1.0 + th) : a > best_ + th;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_ = 0;
  } else {
    ++num_bad_;
  }
  if (cooldown_left_ > 0) {  // right after a reduction: give the new lr time to work
    --cooldown_left_;
    num_bad_ = 0;
  }
  auto& groups = opt_.param_groups();
  bool cut = false;
  if (num_bad_ > options_.patience()) {
    for (size_t g = 0; g < groups.size(); ++g) {
      const double new_lr = std::max(groups[g].lr * options_.factor(), options_.min_lr());
      if (groups[g].lr - new_lr > options_.eps()) {
        opt_.set_group_lr(g, new_lr, "ReduceLROnPlateau.step");
        cut = true;
      }
    }
    cooldown_left_ = options_.cooldown();
    num_bad_ = 0;
  }
  record_metric_step(record_, "ReduceLROnPlateau", options_.mode(), metric, cut);
  last_lr_.clear();
  for (const auto& g : groups) last_lr_.push_back(g.lr);
}

// ---- EarlyStopping -----------------------------------------------------------------

EarlyStopping::EarlyStopping(int64_t patience, double min_delta, Mode mode)
    : patience_(patience), min_delta_(min_delta), mode_(mode) {
  GS_CHECK(patience >= 1, "EarlyStopping", "patience must be >= 1 (steps without improvement before stopping), got ",
           patience);
  GS_CHECK(min_delta >= 0.0, "EarlyStopping", "min_delta must be >= 0, got ", min_delta,
           " (it is how much better a metric must be to count as an improvement)");
  GS_CHECK(mode == Mode::Min || mode == Mode::Max, "EarlyStopping", "mode value ", static_cast<int>(mode),
           " is not a Mode; pass Mode::Min or Mode::Max");
  reset();
}

void EarlyStopping::reset() {
  const double inf = std::numeric_limits<double>::infinity();
  best_ = mode_ == Mode::Min ? inf : -inf;
  best_step_ = -1;
  num_bad_ = steps_ = 0;
  stop_ = false;
  record_ = -1;  // a new run: its steps start a record of their own
}

bool EarlyStopping::step(double metric) {
  const int64_t index = steps_++;
  const bool was_stopped = stop_;
  if (!std::isfinite(metric)) {
    record_metric_step(record_, "EarlyStopping", mode_, metric, !was_stopped);
    return stop_ = true;
  }
  const bool improved = mode_ == Mode::Min ? metric < best_ - min_delta_ : metric > best_ + min_delta_;
  if (improved) {
    best_ = metric;
    best_step_ = index;
    num_bad_ = 0;
  } else {
    ++num_bad_;
  }
  stop_ = stop_ || num_bad_ >= patience_;
  record_metric_step(record_, "EarlyStopping", mode_, metric, stop_ && !was_stopped);
  return stop_;
}

}  // namespace gradsleuth::optim
