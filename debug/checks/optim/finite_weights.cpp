// O4, non-finite weights: a parameter holding NaN/Inf after an update. Its run check reads the
// weights after each sampled step's update.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/hooks.h"
#include "debug/checks/optim/optim_checks.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"

namespace gradsleuth::debug {

std::vector<Finding> check_finite_weights(const nn::Module& model,
                                          const std::function<bool(const Tensor&)>& known_finite) {
  std::vector<Finding> out;
  std::map<std::string, std::string> labels;
  for (const auto& [name, p] : model.named_parameters()) {
    if ((known_finite && known_finite(p)) || all_finite(p)) continue;
    if (labels.empty()) labels = module_labels(model);
    const TensorSummary s = summarize(p);
    Finding f = detail::make("O4", Severity::Error, "the parameter " + name + " holds NaN/Inf values");
    f.module = owner_label(labels, name);
    f.parameter = name;
    f.shape = shape_of(p);
    f.nonfinite = true;
    f.evidence = {{"NaN values", static_cast<double>(s.nan), "any is an error"},
                  {"Inf values", static_cast<double>(s.inf), "any is an error"},
                  {"values", static_cast<double>(s.numel), ""},
                  {"non-finite fraction", static_cast<double>(s.nan + s.inf) / static_cast<double>(s.numel), ""}};
    f.cause =
        "an update with a non-finite gradient or a step so large that it overflowed (exploding "
        "gradients, learning rate too high); once a weight is NaN every output and gradient after it is too";
    f.fix =
        "stop and go back to the last finite checkpoint; find the first non-finite loss or gradient (L1, O1, "
        "anomaly mode W4); lower the learning rate and clip gradients";
    out.push_back(f);
  }
  return out;
}

namespace {

// O4 after each sampled step's update, right after O6 read the updated weights.
class FiniteWeightsRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "O4"; }
  uint32_t events() const override { return RunEvent::AfterStep; }
  void after_step(RunContext& c, bool sampled) override {
    if (!sampled) return;
    c.add_all(check_finite_weights(c.model, c.measured_finite));
    c.note_ran("O4");
  }
};

}  // namespace

std::unique_ptr<RunCheck> make_finite_weights_run_check(const MonitorOptions&) {
  return std::make_unique<FiniteWeightsRunCheck>();
}

}  // namespace gradsleuth::debug
