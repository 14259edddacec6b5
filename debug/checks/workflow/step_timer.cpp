// W10, stalled training: the wall time of each optimizer step against the run's median, a
// watchdog for a step that never returns, and its run check (RunCheck).
#include "debug/checks/workflow/step_timer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "debug/checks/check_util.h"
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

using detail::make;
using detail::num;

// ---- W10 ------------------------------------------------------------------------------------
StepTimer::StepTimer(RunCheckOptions o) : o_(std::move(o)) {
  if (o_.watchdog_seconds > 0.0) watchdog_ = std::thread([this] { watch(); });
}

StepTimer::~StepTimer() {
  stop_watching();
  if (schedstat_fd_ >= 0) ::close(schedstat_fd_);
}

// Seconds the training thread has waited on a run queue (runnable, not running) since it started: the
// second field of Linux's /proc/thread-self/schedstat, in nanoseconds; 0 elsewhere. The file is opened
// once, by the thread that first asks (the training thread: step_done and restart run on it), and read
// again in place at every step.
double StepTimer::run_queue_seconds() {
  if (schedstat_fd_ == kNoSchedstat) return 0.0;
  if (schedstat_fd_ < 0) {
    schedstat_fd_ = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (schedstat_fd_ < 0) {
      schedstat_fd_ = kNoSchedstat;
      return 0.0;
    }
  }
  char buf[96];
  const ssize_t n = ::pread(schedstat_fd_, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return 0.0;
  buf[n] = '\0';
  unsigned long long on_cpu = 0, waited = 0;
  return std::sscanf(buf, "%llu %llu", &on_cpu, &waited) == 2 ? static_cast<double>(waited) * 1e-9 : 0.0;
}

void StepTimer::stop_watching() {
  {
    std::lock_guard<std::mutex> lk(m_);
    stop_ = true;
  }
  wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

// The watchdog: wakes a few times per watchdog_seconds (at least once a second) and reports, once
// per step, a step that has not returned for longer than that.
void StepTimer::watch() {
  using namespace std::chrono;
  const auto period = duration_cast<steady_clock::duration>(duration<double>(std::min(1.0, o_.watchdog_seconds / 4.0)));
  std::unique_lock<std::mutex> lk(m_);
  while (!stop_) {
    wake_.wait_for(lk, period);
    if (stop_ || !running_ || reported_) continue;
    const double waited = duration<double>(steady_clock::now() - last_).count();
    if (waited <= o_.watchdog_seconds) continue;
    reported_ = true;
    const int64_t step = steps_done_ + 1;
    hung_.emplace_back(step, waited);
    const std::string msg = "gradsleuth: W10 stalled training: no optimizer step for " + fmt_num(waited) + " s (step " +
                            num(step) + " has not returned; the limit is " + fmt_num(o_.watchdog_seconds) + " s)";
    const auto say = o_.on_stall;
    lk.unlock();  // the callback may take its time, and must not hold up the training thread
    if (say)
      say(msg);
    else
      std::fprintf(stderr, "%s\n", msg.c_str());
    lk.lock();
  }
}

void StepTimer::restart() {
  std::lock_guard<std::mutex> lk(m_);
  running_ = true;
  reported_ = false;
  last_ = std::chrono::steady_clock::now();
  own_at_last_ = detail::own_seconds();
  queued_at_last_ = run_queue_seconds();
}

void StepTimer::step_done(int64_t step) {
  const double own = detail::own_seconds();  // the training thread's: step_done runs on it
  const double queued = run_queue_seconds();
  std::lock_guard<std::mutex> lk(m_);
  const auto now = std::chrono::steady_clock::now();
  if (running_) {
    durations_.emplace_back(step,
                            std::max(0.0, std::chrono::duration<double>(now - last_).count() - (own - own_at_last_)));
    queued_.push_back(std::max(0.0, queued - queued_at_last_));
  }
  running_ = true;
  reported_ = false;
  steps_done_ = step;
  last_ = now;
  own_at_last_ = own;
  queued_at_last_ = queued;
}

std::vector<std::pair<int64_t, double>> StepTimer::durations() const {
  std::lock_guard<std::mutex> lk(m_);
  return durations_;
}

std::vector<Finding> StepTimer::findings() const {
  std::lock_guard<std::mutex> lk(m_);
  std::vector<Finding> out;
  // A step the watchdog saw hanging that never returned (the run ended with it, or was stopped):
  // the durations below cannot tell it.
  for (const auto& [st, waited] : hung_) {
    const bool returned =
        std::any_of(durations_.begin(), durations_.end(), [&](const auto& d) { return d.first == st; });
    if (returned) continue;
    Finding f = make("W10", Severity::Warning,
                     "step " + num(st) + " had not returned after " + fmt_num(waited) +
                         " s: no optimizer step for longer than the watchdog's " + fmt_num(o_.watchdog_seconds) + " s");
    f.step = st;
    f.evidence = {{"seconds without an optimizer step", waited, "> " + fmt_num(o_.watchdog_seconds) + " warns"}};
    f.cause =
        "the loop is blocked: a data loader waiting on a file, a lock or a worker that died, a collective "
        "waiting for a rank that left, or an endless loop in the step";
    f.fix =
        "look at where the process waits (a debugger's backtrace of every thread); give reads and "
        "collectives a timeout";
    out.push_back(std::move(f));
  }
  if (durations_.empty()) return out;
  std::vector<double> secs;
  for (const auto& [st, s] : durations_) secs.push_back(s);
  const double med = detail::median(secs);
  // Too few steps for a median to mean much: only the absolute limit.
  const bool few = static_cast<int64_t>(durations_.size()) < std::max<int64_t>(o_.stall_min_steps, 1);
  const double limit = few ? o_.stall_max_seconds
                           : std::min(std::max(o_.stall_factor * med, o_.stall_min_seconds), o_.stall_max_seconds);
  int64_t slow = 0, worst_step = -1, busy = 0;  // busy: slow steps within the limit once the CPU wait is out
  double worst = 0.0, worst_queued = 0.0;
  for (size_t i = 0; i < durations_.size(); ++i) {
    const auto& [st, s] = durations_[i];
    if (!(s > limit)) continue;
    ++slow;
    const double queued = i < queued_.size() ? queued_[i] : 0.0;
    busy += s - queued <= limit;
    if (s > worst) {
      worst = s;
      worst_step = st;
      worst_queued = queued;
    }
  }
  if (slow == 0) return out;
  // Every slow step slow only by the time its thread waited for a CPU: other processes held the
  // machine's cores. The run is not at fault: info.
  const bool machine_busy = busy == slow;
  Finding f = make("W10", machine_busy ? Severity::Info : Severity::Warning,
                   "step " + num(worst_step) + " took " + fmt_num(worst) + " s, " + fmt_num(worst / med) +
                       " times the median step (" + fmt_num(med) + " s): training stalled" +
                       (slow > 1 ? " (" + num(slow) + " slow steps)" : "") +
                       (machine_busy ? ", waiting " + fmt_num(worst_queued) +
                                           " s for a CPU: other processes held the machine's cores"
                                     : ""));
  f.step = worst_step;
  f.evidence = {{"longest step (s)", worst,
                 "> max(" + fmt_num(o_.stall_factor) + " x median, " + fmt_num(o_.stall_min_seconds) + " s), or > " +
                     fmt_num(o_.stall_max_seconds) + " s, flags"},
                {"median step (s)", med, ""},
                {"slow steps", static_cast<double>(slow), ""},
                {"the longest step's wait for a CPU (s)", worst_queued, ""},
                {"slow steps within the limit without that wait", static_cast<double>(busy),
                 "all of them: a busy machine (info)"},
                {"steps timed", static_cast<double>(durations_.size()), ""}};
  f.cause =
      "something blocked the training loop between two optimizer steps: a data loader waiting on disk or a "
      "network share, a lock or a collective waiting for another process, swapping, or work done inside the "
      "loop every few steps (checkpointing, logging large tensors)";
  f.fix =
      "time the parts of a slow step (debug::Profiler, W7): the loader, the forward/backward and the code "
      "around them; move occasional work (checkpoints, evaluation) out of the step or make it asynchronous";
  if (machine_busy) {
    f.cause = "the training thread was runnable but waited for a CPU: other processes shared the machine's cores";
    f.fix = "none needed for the run's correctness; time it on a quiet machine";
  }
  out.push_back(std::move(f));
  return out;
}

// @@UNITS@@

// ---- W10 during training (the monitor's run check) ----------------------------------------------
namespace {
class StepTimerRunCheck final : public RunCheck {
 public:
  explicit StepTimerRunCheck(const RunCheckOptions& o) : timer_(o) {}
  std::string ids() const override { return "W10"; }
  uint32_t events() const override {
    return RunEvent::AfterStep | RunEvent::Epoch | RunEvent::Detach | RunEvent::Finish;
  }
  void after_step(RunContext& c, bool) override { timer_.step_done(c.steps); }
  void epoch(RunContext&, const EpochRecord&) override { timer_.restart(); }  // the epoch's evaluation is not a step
  void detach(RunContext&) override { timer_.stop_watching(); }               // no more steps to watch (the watchdog)
  void finish(RunContext& c) override {
    c.add_all(timer_.findings());
    c.note_ran("W10");
  }

 private:
  StepTimer timer_;
};
}  // namespace

std::unique_ptr<RunCheck> make_step_timer_run_check(const MonitorOptions& o) {
  return std::make_unique<StepTimerRunCheck>(o.run);
}

}  // namespace gradsleuth::debug
