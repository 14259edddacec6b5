// O6 on a scheduler's stepping: what a live optim::LRScheduler of the run's optimizer reached with the
// step() calls it got, against what its own schedule gives over the run's optimizer steps
// (learning_rate.cpp judges it).
#include <algorithm>
#include <string>

#include "debug/checks/optim/optim_checks.h"
#include "optim/scheduler.h"

namespace gradsleuth::debug {

ScheduleReach measure_schedule_reach(const optim::Optimizer& optimizer, int64_t optimizer_steps) {
  ScheduleReach r;
  if (optimizer_steps < 20) return r;
  for (const optim::LRScheduler* s : optim::live_schedulers()) {
    if (&s->optimizer() != &optimizer || s->base_lrs().empty()) continue;
    const double base = s->base_lrs().front();
    if (!(base > 0)) continue;
    const int64_t stepped = s->last_epoch();
    // The schedule over the optimizer's steps: every step up to 4096 of them, else 4096 evenly spaced.
    const int64_t stride = std::max<int64_t>(1, optimizer_steps / 4096);
    double reached = 0, peak = 0;
    int64_t peak_at = 0;
    for (int64_t t = 0; t <= stepped; t += std::max<int64_t>(1, stepped / 4096))
      reached = std::max(reached, s->lr_at(t, base));
    reached = std::max(reached, s->lr_at(stepped, base));
    for (int64_t t = 0; t <= optimizer_steps; t += stride) {
      const double v = s->lr_at(t, base);
      if (v > peak) peak = v, peak_at = t;
    }
    r.found = true;
    r.scheduler = "the learning-rate scheduler";
    r.stepped = stepped;
    r.steps = optimizer_steps;
    r.base = base;
    r.reached = reached;
    r.peak = peak;
    r.peak_at = peak_at;
    if (reached < 0.5 * peak) return r;  // the first that fell short
  }
  return r;
}

}  // namespace gradsleuth::debug
