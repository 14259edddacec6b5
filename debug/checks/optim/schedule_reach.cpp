// O6 on a scheduler's stepping: what a live optim::LRScheduler of the run's optimizer reached with the
// step() calls it got, against what its own schedule gives over the run's optimizer steps
// (learning_rate.cpp judges it), and the shape of a schedule that falls and climbs again.
#include <algorithm>
#include <string>
#include <utility>

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
    // The schedule's highest rate over step() counts 0..n and the first count that gives it: every count
    // up to 4096 of them, else 4096 evenly spaced, and n itself.
    const auto highest = [&](int64_t n) {
      std::pair<double, int64_t> best{0.0, 0};
      const auto at = [&](int64_t t) {
        const double v = s->lr_at(t, base);
        if (v > best.first) best = {v, t};
      };
      for (int64_t t = 0; t <= n; t += std::max<int64_t>(1, n / 4096)) at(t);
      at(n);
      return best;
    };
    const double reached = highest(stepped).first;
    const auto [peak, peak_at] = highest(optimizer_steps);
    r.found = true;
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

namespace detail {
ScheduleRebound schedule_rebound(const std::vector<double>& lrs, int64_t from) {
  ScheduleRebound r;
  const int64_t n = static_cast<int64_t>(lrs.size());
  if (from < 0 || n - from < 3) return r;
  const auto low = std::min_element(lrs.begin() + from, lrs.end());
  r.trough = low - lrs.begin();
  if (!(*low > 0)) return r;
  r.fall = lrs[static_cast<size_t>(from)] / *low;
  r.rise = lrs.back() / *low;
  r.share = static_cast<double>(n - 1 - r.trough) / static_cast<double>(n);
  r.steady = true;
  for (int64_t i = r.trough + 1; i < n; ++i) r.steady = r.steady && lrs[i] >= lrs[i - 1];
  return r;
}
}  // namespace detail

}  // namespace gradsleuth::debug
