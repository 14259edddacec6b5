// W7 profiler: where the step time goes — time per module, per op, per
// backward node and per phase (forward, backward, optimizer step, other).
//
//   debug::Profiler prof;
//   prof.attach(*model);          // times every module (forward pre/post hooks)
//   prof.attach(opt);             // times optimizer.step() (pre/post step hooks)
//   prof.start();                 // observes ops (the op observer)
//   for (...) { opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step(); }
//   prof.stop();
//   std::cout << prof.report().str();
//
// How op time is measured (the gap method). Ops report only their completion
// (OpObserver::on_op), not their start, so each op is given the time since the
// previous event the profiler saw: the previous op, backward node, module
// boundary or optimizer hook. For ops that run back to back this is exactly the
// op's own time. Its limits:
//   - code that is not an op (argument checks, string building, a fused
//     optimizer loop, data loading) is charged to the event that ends its gap:
//     the next op (a layer's input checks land on its first op), or at a module
//     boundary the row "(module code between ops)" (outside any module:
//     "(outside forward, backward and step)"), or at the end of a step
//     "<optimizer>.step (code between ops)";
//   - the ops a backward node runs (autograd::in_backward() is true) are folded
//     into that node's row, "backward: <node name>", which is inclusive; the
//     first node also carries the engine's set-up (graph sort);
//   - the profiler's own clock reads are inside the measured time (a few tens of
//     nanoseconds per event; see the tests for the measured overhead).
// Module rows are exact: inclusive wall time from the pre-hook to the post-hook.
// Single-threaded: observe from the thread that runs the model.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/observer.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace gradsleuth::debug {

// The four phases of a training step.
//   forward         ops and code inside a module call, and grad-recording ops
//                   outside modules (a loss function called directly);
//   backward        backward nodes (with the ops they run, hooks included);
//   optimizer step  everything between the optimizer's pre- and post-step hooks;
//   other           the rest of the profiled time: data loading, zero_grad,
//                   logging, no-grad ops outside modules (metrics).
enum class Phase { Forward = 0, Backward = 1, OptimizerStep = 2, Other = 3 };
const char* phase_name(Phase p);  // "forward", "backward", "optimizer step", "other"

struct ProfileRow {
  std::string name;   // "matmul", "backward: matmul", "0.fc1 (Linear)", "forward"
  std::string phase;  // phase_name() of the row; "" for module rows
  int64_t calls = 0;
  double total_ms = 0.0;
  double percent = 0.0;  // of the profiled wall time
  double mean_ms() const { return calls ? total_ms / static_cast<double>(calls) : 0.0; }
};

struct ProfileReport {
  double wall_ms = 0.0;  // time between start() and stop() (summed over start/stop pairs)
  int64_t steps = 0;     // optimizer steps seen (0 without attach(optimizer))
  int64_t events = 0;    // ops, backward nodes, module calls and steps observed
  // Each list sorted by total_ms, largest first.
  std::vector<ProfileRow> phases;   // the four phases; they add up to wall_ms
  std::vector<ProfileRow> modules;  // inclusive time per module (a parent includes its children)
  std::vector<ProfileRow> ops;      // self time per op / backward node (gap method); adds up to wall_ms
  double ms_per_step() const { return steps ? wall_ms / static_cast<double>(steps) : wall_ms; }

  // The row named `name` in `rows`, or nullptr.
  static const ProfileRow* find(const std::vector<ProfileRow>& rows, const std::string& name);
  // "Where the step time goes": the phases, then the top `max_rows` modules and ops.
  std::string str(size_t max_rows = 15) const;
  std::string json() const;
};

class Profiler final : public OpObserver {
 public:
  Profiler() = default;
  ~Profiler() override;  // stop() and detach()
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Adds forward pre/post hooks to every module of `model` (model.named_modules(),
  // so the model must be owned by a shared_ptr). A module reachable under two
  // paths is timed once, under the first. Modules are timed only while started.
  void attach(nn::Module& model);
  // Times optimizer.step(); the optimizer must outlive the profiler or detach().
  void attach(optim::Optimizer& optimizer);
  // Removes every hook this profiler added (modules already destroyed are skipped).
  void detach();

  void start();  // begins observing ops and timing hooks
  void stop();   // the time since the last event is charged to "other"
  bool running() const { return running_; }
  void reset();  // forgets everything measured (keeps the hooks)

  // A snapshot; may be called while running (the open gap counts as "other").
  ProfileReport report() const;

  // OpObserver
  void on_op(const OpEvent& e) override;
  void on_backward(const BackwardEvent& e) override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Acc {
    std::string name;
    Phase phase = Phase::Other;
    int64_t calls = 0;
    double ns = 0.0;
  };
  struct Pending {  // an op run by a backward formula, waiting for its node's on_backward
    const char* op;
    double ns;
  };
  // Time since the previous event, and moves the clock to now.
  double lap(Clock::time_point now);
  void charge(Phase phase, const std::string& name, double ns, int64_t calls = 1);
  void flush_pending();
  void module_pre(nn::Module& m, size_t index);
  void module_post(nn::Module& m, size_t index);
  void step_pre(optim::Optimizer& o);
  void step_post(optim::Optimizer& o);

  bool running_ = false;
  Clock::time_point last_{};
  Clock::time_point started_{};
  double wall_ns_ = 0.0;
  int64_t steps_ = 0;
  int64_t events_ = 0;
  bool in_step_ = false;
  std::string step_name_;

  std::vector<Acc> rows_;  // ops, backward nodes and non-op code, by (phase, name)
  std::unordered_map<std::string, size_t> row_index_;
  std::vector<Pending> pending_;

  struct ModuleInfo {
    std::weak_ptr<nn::Module> module;
    std::string label;  // "0.fc1 (Linear)"
    std::vector<size_t> hooks;
    int64_t calls = 0;
    double ns = 0.0;
  };
  std::vector<ModuleInfo> modules_;
  std::vector<std::pair<size_t, Clock::time_point>> stack_;  // open module calls: (index, entry time)

  struct OptInfo {
    optim::Optimizer* opt;
    size_t pre, post;
  };
  std::vector<OptInfo> optimizers_;
  Clock::time_point step_start_{};
};

}  // namespace gradsleuth::debug
