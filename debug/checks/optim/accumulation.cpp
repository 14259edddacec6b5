// O5, gradients accumulated across steps and gradient transforms at the wrong place in the loop: the
// optimizer (optim/optimizer.cpp) and the clipping functions (optim/clip.cpp) raise the warnings; this
// run check words them as findings and gives them their kinds.
#include <memory>
#include <string>

#include "debug/checks/check_util.h"
#include "debug/checks/run_check.h"
#include "optim/optimizer.h"

namespace gradsleuth::debug {

namespace {
// O5 is raised by the optimizer itself (a core warning): its findings say what the loop did. A
// gradient transform (clipping) that ran with no gradient present is O5's other loop-order mistake.
class AccumulationRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "O5"; }
  uint32_t events() const override { return RunEvent::Warning | RunEvent::Attach | RunEvent::Finish; }
  void warning(RunContext&, const gradsleuth::Warning& w, Finding& f) override {
    if (w.check != "O5") return;
    const bool transform = w.where.rfind("clip_grad", 0) == 0;
    const bool after_step = transform && w.where.find(" after step()") != std::string::npos;
    if (transform) f.kind = Kind::TransformMisplaced;
    f.title = after_step ? w.where.substr(0, w.where.find(' ')) +
                               " ran after optimizer.step(), on the gradients the step had already used: it "
                               "clipped no update"
              : transform ? w.where +
                                " ran with no gradient present (before backward() or right after zero_grad()): "
                                "it changed nothing"
                          : "gradients accumulated across steps: zero_grad() was not called (" + w.where + ")";
    f.fix = transform ? "call it between loss.backward() and optimizer.step()"
                      : "call optimizer.zero_grad() before every backward()";
  }
  // Gradient accumulation on purpose (set_accumulating) whose loop clears the gradients between the
  // micro-batches: zero_grad() calls that threw away a backward's gradient before any step used it,
  // on at least half the steps (once per epoch is a leftover cycle dropped, not the fault).
  void finish(RunContext& c) override {
    const optim::Optimizer& opt = c.optimizer;
    const int64_t cleared = opt.gradients_discarded() - discarded_at_start_,
                  steps = opt.steps_taken() - steps_at_start_;
    if (cleared < kMinCleared || static_cast<double>(cleared) < 0.5 * static_cast<double>(steps)) return;
    Finding f = detail::make("O5", Severity::Warning,
                             "zero_grad() cleared gradients that no step used " + std::to_string(cleared) +
                                 " times in " + std::to_string(steps) +
                                 " optimizer steps, while set_accumulating(true) says they add up across "
                                 "micro-batches: each step sees only the last micro-batch's gradient");
    f.kind = Kind::AccumulationCleared;
    f.evidence = {{"zero_grad() calls that cleared an unused gradient", static_cast<double>(cleared),
                   ">= " + std::to_string(kMinCleared) + " and >= half the steps warns"},
                  {"optimizer steps", static_cast<double>(steps), ""}};
    f.cause =
        "optimizer.zero_grad() runs before every backward() inside the accumulation cycle, so the gradients of the "
        "cycle's earlier micro-batches are cleared before step(): the effective batch is one micro-batch, and a loss "
        "divided by the number of micro-batches also cuts the step by that factor";
    f.fix = "call zero_grad() once per cycle, right after optimizer.step() (or before the cycle's first backward)";
    c.add(f);
  }
  void attach(RunContext& c) override {
    discarded_at_start_ = c.optimizer.gradients_discarded();
    steps_at_start_ = c.optimizer.steps_taken();
  }

 private:
  static constexpr int64_t kMinCleared = 3;
  int64_t discarded_at_start_ = 0, steps_at_start_ = 0;
};
}  // namespace

std::unique_ptr<RunCheck> make_accumulation_run_check(const MonitorOptions&) {
  return std::make_unique<AccumulationRunCheck>();
}

}  // namespace gradsleuth::debug
