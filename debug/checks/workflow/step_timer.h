// W10, stalled training: StepTimer times each optimizer step (the debug module's own time left
// out) and watches, from a thread, for a step that never returns. Its options are RunCheckOptions'.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "debug/checks/model/run_checks.h"
#include "debug/evidence/finding.h"

namespace gradsleuth::debug {

// W10. Wall time between the ends of consecutive optimizer steps, less the time the debug
// module's own hooks took (detail::own_seconds); restart() after work that is not a step (the
// gate, an evaluation pass at the end of an epoch). The watchdog counts wall time. Beside each
// step, the time the training thread waited for a CPU while runnable (Linux's
// /proc/thread-self/schedstat; 0 where the kernel does not say): a step slow only by that wait
// was slowed by other processes on a busy machine, not by the loop.
class StepTimer {
 public:
  explicit StepTimer(RunCheckOptions o = {});
  ~StepTimer();  // stops the watchdog
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;
  void restart();
  void step_done(int64_t step);
  // No more steps to watch (the run is over): the watchdog stops.
  void stop_watching();
  std::vector<Finding> findings() const;
  std::vector<std::pair<int64_t, double>> durations() const;

 private:
  void watch();
  double run_queue_seconds();  // the training thread's run-queue wait so far (s); 0 where not reported
  static constexpr int kNoSchedstat = -2;
  int schedstat_fd_ = -1;  // /proc/thread-self/schedstat, opened at the first read (kNoSchedstat: absent)
  RunCheckOptions o_;
  mutable std::mutex m_;  // the watchdog thread reads what the training thread writes
  std::condition_variable wake_;
  bool running_ = false, stop_ = false, reported_ = false;
  int64_t steps_done_ = 0;
  std::chrono::steady_clock::time_point last_{};
  double own_at_last_ = 0.0;  // detail::own_seconds() at last_: the checks' time is not the step's
  double queued_at_last_ = 0.0;                        // the thread's run-queue wait (s) at last_
  std::vector<std::pair<int64_t, double>> durations_;  // (step, seconds)
  std::vector<double> queued_;                         // per entry of durations_: seconds waiting for a CPU
  std::vector<std::pair<int64_t, double>> hung_;       // (step, seconds waited) seen by the watchdog
  std::thread watchdog_;
};

}  // namespace gradsleuth::debug
