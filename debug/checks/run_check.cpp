// The run checks of every family, in the order the monitor calls them (see run_check.h), and the
// loss types they tell apart.
#include "debug/checks/run_check.h"

#include <algorithm>
#include <cmath>

#include "core/ops.h"

namespace gradsleuth::debug {

RunCheckList all_run_checks(const MonitorOptions& o) {
  // The order is the order of the end-of-run findings: the loss history first, then the
  // optimisation, the model, the data and the workflow.
  RunCheckList list;
  add_loss_run_checks(list, o);
  add_optim_run_checks(list, o);
  add_model_run_checks(list, o);
  add_data_run_checks(list, o);
  add_workflow_run_checks(list, o);
  return list;
}

void soften_reached_in_training(Report& gate, const TrainingHistory& h, const char* check, Kind kind) {
  const int64_t judged = h.gradient_judged_steps;
  if (judged <= 0) return;
  for (size_t i = 0; i < gate.size(); ++i) {
    const Finding& g = gate.findings()[i];
    if (!g.is(check, kind) || !g.fires() || g.parameter.empty()) continue;
    int64_t without = 0;
    for (const auto& [name, n] : h.gradient_missing)
      if (name == g.parameter) without = n;
    if (without >= judged) continue;
    Finding f = g;
    f.severity = Severity::Info;
    f.title = "the trainable parameter " + g.parameter +
              " gets no gradient from the loss the Session was given, but had one in training (on " +
              std::to_string(judged - without) + " of " + std::to_string(judged) + " sampled steps)";
    f.evidence.push_back({"sampled training steps on which it had a gradient", static_cast<double>(judged - without),
                          "> 0: the loop's backward reaches it"});
    f.cause =
        "the loop's objective has a term the Session's loss does not: an auxiliary loss on a second head, a "
        "penalty on these weights";
    f.fix =
        "nothing; for the checks before training to judge the whole objective, give the Session a loss function "
        "(output, target) -> loss that computes it";
    gate.replace(i, f);
  }
}

void soften_zero_at_gate(Report& gate, const TrainingHistory& h, const char* check, Kind kind, double vanishing) {
  for (size_t i = 0; i < gate.size(); ++i) {
    const Finding& g = gate.findings()[i];
    if (!g.is(check, kind) || !g.fires() || g.parameter.empty()) continue;
    int64_t records = 0, alive = 0;
    for (const auto& [name, series] : h.grad_norms) {
      if (name != g.parameter) continue;
      for (const auto& [step, norm] : series) {
        ++records;
        alive += std::isfinite(norm) && norm > vanishing;
      }
    }
    if (records < 2 || 2 * alive < records) continue;
    Finding f = g;
    f.severity = Severity::Info;
    f.title = "the gradient of " + g.parameter +
              " is zero in the check before training, which runs the model with its randomness off, but not in "
              "training (above " +
              fmt_num(vanishing) + " on " + std::to_string(alive) + " of " + std::to_string(records) +
              " sampled steps)";
    f.evidence.push_back({"sampled training steps with a gradient norm above the vanishing one",
                          static_cast<double>(alive), ">= half of them: reached in training (info)"});
    f.cause =
        "the check before training switches the model's random layers off (dropout, a sampled latent) so one "
        "draw does not decide its verdicts; a parameter reached only through the random path (a VAE's "
        "log-variance through the sampled latent, while its KL weight is still 0) has no gradient there";
    f.fix = "nothing";
    gate.replace(i, f);
  }
}

namespace loss_type {
bool wider_than_labels(const Tensor& output, const Tensor& labels) {
  const int64_t top = labels.numel() > 0 ? static_cast<int64_t>(amax(labels).item<int64_t>()) : 0;
  return output.dim() >= 2 && output.size(1) > 4 * std::max<int64_t>(top + 1, 2);
}

bool takes_class_indices(const nn::Loss& l, const Tensor& input, const Tensor& target) {
  if (library(l)) return false;
  if (!(input.defined() && target.defined() && input.is_floating_point() && target.dtype() == kInt64 &&
        input.dim() == 2 && target.dim() == 1 && input.size(0) == target.size(0) && input.size(1) >= 2))
    return false;
  // Scores over classes have about as many columns as there are classes: far more columns than the
  // batch's labels reach (a prototypical network's 144-wide embedding under 5-way labels, a metric
  // loss's features) is an embedding the loss turns into scores itself.
  return !wider_than_labels(input, target);
}
int64_t ignore_index(const nn::Loss& l) {
  if (auto* ce = dynamic_cast<const nn::CrossEntropyLoss*>(&l)) return ce->options().ignore_index_;
  if (auto* nl = dynamic_cast<const nn::NLLLoss*>(&l)) return nl->options().ignore_index_;
  return -100;
}
}  // namespace loss_type

}  // namespace gradsleuth::debug
