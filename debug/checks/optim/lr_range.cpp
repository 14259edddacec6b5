// O8, the learning rate before training: each parameter group's starting rate against its optimizer's
// usual range (see OptimCheckOptions).
#include <algorithm>
#include <string>
#include <vector>

#include "debug/checks/check_util.h"
#include "debug/checks/optim/optim_checks.h"
#include "optim/adam.h"
#include "optim/rmsprop.h"

namespace gradsleuth::debug {

using detail::make;
using detail::num;

std::vector<Finding> check_learning_rate_range(const optim::Optimizer& opt, const OptimCheckOptions& o) {
  const std::string& kind = opt.name();
  const bool adaptive = kind == "Adam" || kind == "AdamW" || kind == "RMSprop";
  if (!adaptive && kind != "SGD") return {};
  const double lo = adaptive ? o.adaptive_lr_min : o.sgd_lr_min, hi = adaptive ? o.adaptive_lr_max : o.sgd_lr_max;
  std::vector<Finding> out;
  const auto& groups = opt.param_groups();
  const bool trains = std::any_of(groups.begin(), groups.end(), [](const optim::ParamGroup& g) { return g.lr > 0; });
  // An eps this large sets the step itself (lr / eps times the averaged gradient, RMSprop at eps 1 and
  // lr 0.045 in Inception's recipe): the usual range does not apply; the eps rule judges it after the run.
  double eps = 0;
  if (const auto* adam = dynamic_cast<const optim::Adam*>(&opt)) eps = adam->options().eps();
  if (const auto* rms = dynamic_cast<const optim::RMSprop*>(&opt)) eps = rms->options().eps();
  const bool eps_sets_step = adaptive && eps >= o.adaptive_eps_large;
  for (size_t i = 0; i < groups.size(); ++i) {
    const double lr = groups[i].lr;
    if (lr >= lo && lr <= hi) continue;
    const bool high = lr > hi, frozen = lr == 0.0 && trains;  // a group held still by its rate beside others
    const bool unjudged = frozen || eps_sets_step;
    const std::string group =
        groups.size() == 1
            ? std::string()
            : " (parameter group " + (groups[i].name.empty() ? num(static_cast<int64_t>(i)) : groups[i].name) + ")";
    Finding f = make("O8", unjudged ? Severity::Info : Severity::Warning,
                     "the " + kind + " learning rate " + fmt_num(lr) + group + " is " + (high ? "above" : "below") +
                         " the usual range [" + fmt_num(lo) + ", " + fmt_num(hi) + "] before training starts" +
                         (frozen          ? ": its parameters are frozen by their rate while the other groups train"
                          : eps_sets_step ? ": with eps " + fmt_num(eps) + " the range does not apply"
                                          : ""));
    f.kind = high ? Kind::LrAboveRange : Kind::LrBelowRange;
    f.evidence = {{"learning rate", lr,
                   "outside [" + fmt_num(lo) + ", " + fmt_num(hi) + "] flags (0 beside a group that trains: info)"}};
    if (adaptive) f.evidence.push_back({"eps", eps, ">= " + fmt_num(o.adaptive_eps_large) + ": not judged (info)"});
    f.cause = high ? "a learning rate this high makes the first updates overshoot: the loss jumps, oscillates or "
                     "turns NaN, and ReLU units can die in the first steps"
                   : "a learning rate this low moves the weights so little that the loss barely falls within a "
                     "normal budget of steps";
    f.fix = frozen ? "none needed if freezing was meant (requires_grad_(false) also skips their gradients)"
            : kind == "SGD"
                ? "start SGD between 1e-3 and 0.1 (0.01-0.1 with momentum 0.9), then tune by factors of 3"
                : "start " + kind + " at its default 1e-3 (3e-4 is a common choice), then tune by factors of 3";
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace gradsleuth::debug
