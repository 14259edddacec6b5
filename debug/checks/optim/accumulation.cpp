// O5, gradients accumulated across steps and gradient transforms at the wrong place in the loop: the
// optimizer (optim/optimizer.cpp) and the clipping functions (optim/clip.cpp) raise the warnings; this
// run check words them as findings and gives them their kinds.
#include <memory>
#include <string>

#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

namespace {
// O5 is raised by the optimizer itself (a core warning): its findings say what the loop did. A
// gradient transform (clipping) that ran with no gradient present is O5's other loop-order mistake.
class AccumulationRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "O5"; }
  uint32_t events() const override { return RunEvent::Warning; }
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
};
}  // namespace

std::unique_ptr<RunCheck> make_accumulation_run_check(const MonitorOptions&) {
  return std::make_unique<AccumulationRunCheck>();
}

}  // namespace gradsleuth::debug
