// W1, reproducibility: runs repeated from one seed, compared step by step (see reproducibility.h).
#include "debug/checks/workflow/reproducibility.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/data/data_checks.h"
#include "debug/checks/model/behaviour.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/normalization.h"

namespace gradsleuth::debug {

// ---- W1 ---------------------------------------------------------------------------------
// ---- W1: step fingerprints ----------------------------------------------------------------
namespace {
// FNV-1a over the bytes of a host copy, and the float64 sum.
std::pair<uint64_t, double> fingerprint_of(const Tensor& t) {
  NoGradGuard ng;
  const Tensor h = t.detach().to(kCPU).contiguous();
  const auto* b = static_cast<const unsigned char*>(h.raw_data());
  uint64_t x = 1469598103934665603ULL;
  for (size_t i = 0; i < h.nbytes(); ++i) x = (x ^ b[i]) * 1099511628211ULL;
  const double s = h.numel() == 0 ? 0.0 : sum(h.to(kFloat64)).item<double>();
  return {x | 1, s};  // never 0, which means "not seen"
}
}  // namespace

StepRecorder::StepRecorder(nn::Module& model, optim::Optimizer& optimizer) : model_(model), opt_(optimizer) {
  for (const auto& [name, p] : model_.named_parameters()) fp_.names.push_back(name);
  auto root = model_.named_modules().front().second;
  hooks_.pre(root, [this](nn::Module&, const Tensor&) {
    if (!GradMode::is_enabled() || open_) return;  // an evaluation, or a second forward of the step
    std::vector<StepFingerprint>& s = current();
    size_t i = 0;
    for (const auto& [name, p] : model_.named_parameters()) {
      if (i < s.size()) std::tie(s[i].before, s[i].before_sum) = fingerprint_of(p);
      ++i;
    }
  });
  opt_hooks_.push_back(opt_.add_pre_step_hook([this](optim::Optimizer&) {
    std::vector<StepFingerprint>& s = current();
    size_t i = 0;
    for (const auto& [name, p] : model_.named_parameters()) {
      const Tensor g = p.grad();
      if (i < s.size() && g.defined()) std::tie(s[i].grad, s[i].grad_sum) = fingerprint_of(g);
      ++i;
    }
  }));
  opt_hooks_.push_back(opt_.add_post_step_hook([this](optim::Optimizer&) {
    std::vector<StepFingerprint>& s = current();
    size_t i = 0;
    for (const auto& [name, p] : model_.named_parameters()) {
      if (i < s.size()) std::tie(s[i].after, s[i].after_sum) = fingerprint_of(p);
      ++i;
    }
    open_ = false;
  }));
}

StepRecorder::~StepRecorder() {
  hooks_.clear();
  for (size_t id : opt_hooks_) opt_.remove_hook(id);
}

std::vector<StepFingerprint>& StepRecorder::current() {
  if (!open_) {
    fp_.steps.emplace_back(fp_.names.size());
    open_ = true;
  }
  return fp_.steps.back();
}

std::vector<Finding> check_reproducible(const std::function<std::vector<double>(uint64_t seed)>& run, uint64_t seed) {
  return check_reproducible(std::function<ReproRun(uint64_t)>([&run](uint64_t s) {
                              return ReproRun{run(s), nullptr, {}};
                            }),
                            seed);
}

namespace {
// The final parameters of two runs, by name: how many differ, the first that does and by how much.
struct ParamDiff {
  int64_t compared = 0, differ = 0;
  std::string first;
  double first_max = 0.0;
};
ParamDiff compare_parameters(const nn::Module& a, const nn::Module& b) {
  ParamDiff d;
  const auto pb = b.named_parameters();
  for (const auto& [name, p] : a.named_parameters()) {
    const auto it = std::find_if(pb.begin(), pb.end(), [&name = name](const auto& q) { return q.first == name; });
    ++d.compared;
    double gap = std::numeric_limits<double>::infinity();  // missing or reshaped: differs
    if (it != pb.end() && it->second.shape() == p.shape()) {
      NoGradGuard ng;
      const Tensor x = p.detach().to(kFloat64), y = it->second.detach().to(kFloat64).to(x.device());
      gap = p.numel() == 0 ? 0.0 : amax(abs(x - y)).item<double>();  // NaN: differs
    }
    if (gap == 0.0) continue;
    if (d.differ++ == 0) {
      d.first = name;
      d.first_max = gap;
    }
  }
  return d;
}
// The first (step, parameter, moment) where two runs' fingerprints differ, in the order a step
// runs: the weight its forward saw, then its gradient, then the updated weight.
struct StepDiff {
  int64_t compared = 0;  // steps compared
  int64_t step = -1;     // 1-based; -1: none differs
  std::string parameter, moment;
  double a = 0.0, b = 0.0;  // the two sums
};
StepDiff compare_steps(const StepFingerprints& x, const StepFingerprints& y) {
  StepDiff d;
  if (x.names != y.names) return d;
  const size_t n = std::min(x.steps.size(), y.steps.size());
  d.compared = static_cast<int64_t>(n);
  for (size_t s = 0; s < n; ++s) {
    const auto& u = x.steps[s];
    const auto& v = y.steps[s];
    for (int m = 0; m < 3; ++m)
      for (size_t i = 0; i < u.size() && i < v.size(); ++i) {
        const uint64_t hu = m == 0 ? u[i].before : m == 1 ? u[i].grad : u[i].after;
        const uint64_t hv = m == 0 ? v[i].before : m == 1 ? v[i].grad : v[i].after;
        if (hu == hv) continue;
        d.step = static_cast<int64_t>(s) + 1;
        d.parameter = x.names[i];
        d.moment = m == 0   ? "the weight before the step's forward"
                   : m == 1 ? "the gradient"
                            : "the weight after the update";
        d.a = m == 0 ? u[i].before_sum : m == 1 ? u[i].grad_sum : u[i].after_sum;
        d.b = m == 0 ? v[i].before_sum : m == 1 ? v[i].grad_sum : v[i].after_sum;
        return d;
      }
  }
  return d;
}
}  // namespace

std::vector<Finding> check_reproducible(const std::function<ReproRun(uint64_t seed)>& run, uint64_t seed) {
  const ReproRun ra = run(seed), rb = run(seed);
  const std::vector<double>&a = ra.losses, &b = rb.losses;
  Finding f;
  f.check = "W1";
  const size_t n = std::min(a.size(), b.size());
  size_t first = n;
  for (size_t i = 0; i < n; ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) {
      first = i;
      break;
    }
  const bool models = ra.model && rb.model;
  const ParamDiff pd = models ? compare_parameters(*ra.model, *rb.model) : ParamDiff{};
  const bool stepwise = !ra.steps.steps.empty() && !rb.steps.steps.empty();
  const StepDiff sd = stepwise ? compare_steps(ra.steps, rb.steps) : StepDiff{};
  // Where the runs part step by step, against the losses: "at step 3 the gradient of fc1.weight
  // differs (sum a vs b), a step before the losses".
  auto step_evidence = [&] {
    if (!stepwise || sd.step < 0) return;
    f.evidence.push_back({"steps whose weights and gradients were compared", static_cast<double>(sd.compared), ""});
    f.evidence.push_back({"first step where they differ", static_cast<double>(sd.step), ""});
    f.evidence.push_back({"run 1: sum of " + sd.moment + " of " + sd.parameter, sd.a, ""});
    f.evidence.push_back({"run 2: the same", sd.b, "must be bit-identical"});
  };
  auto param_evidence = [&] {
    if (!models) return;
    f.evidence.push_back({"final parameters compared", static_cast<double>(pd.compared), ""});
    f.evidence.push_back({"final parameters that differ", static_cast<double>(pd.differ), "any is an error"});
    if (pd.differ > 0) f.evidence.push_back({"largest difference in " + pd.first, pd.first_max, "must be 0"});
  };
  const std::string s = std::to_string(seed);
  if (first == n && a.size() == b.size() && pd.differ == 0 && sd.step < 0) {
    f.severity = Severity::Info;
    f.title =
        "two runs with seed " + s + " gave identical losses (" + std::to_string(n) + " steps)" +
        (models ? " and identical final parameters (" + std::to_string(pd.compared) + ")" : "") +
        (stepwise ? ", with identical weights and gradients at every one of " + std::to_string(sd.compared) + " steps"
                  : "");
    f.evidence = {{"steps compared", static_cast<double>(n), ""}};
    param_evidence();
    if (stepwise)
      f.evidence.push_back({"steps whose weights and gradients were compared", static_cast<double>(sd.compared), ""});
    return {f};
  }
  f.severity = Severity::Error;
  // The weights or gradients part before the losses do (or while the losses agree throughout).
  if (sd.step >= 0 && (first == n || sd.step <= static_cast<int64_t>(first) + 1)) {
    const bool agree = first == n && a.size() == b.size();
    const bool earlier = !agree && sd.step < static_cast<int64_t>(first) + 1;
    f.title =
        "two runs with the same seed part at step " + std::to_string(sd.step) + ": " + sd.moment + " of " +
        sd.parameter + " differs" +
        (agree     ? ", though the losses agree at every step"
         : earlier ? ", " + std::to_string(first + 1 - sd.step) + " step" + (first + 1 - sd.step == 1 ? "" : "s") +
                         " before the losses (step " + std::to_string(first + 1) + ")"
                   : ", at the step the losses part");
    f.parameter = sd.parameter;
    f.step = -1;
    f.evidence = {{"first step whose loss differs",
                   first < n ? static_cast<double>(first + 1) : std::numeric_limits<double>::quiet_NaN(),
                   agree ? "none" : ""}};
    step_evidence();
    param_evidence();
    f.cause = sd.moment == "the gradient"
                  ? "the step's forward saw the same weights, and the gradient came out different: something between "
                    "the backward and the optimizer's step is not seeded (gradient noise from a generator of its "
                    "own, an augmentation of the gradient), or the backward's reduction order changes (threads)"
              : sd.moment == "the weight after the update"
                  ? "the same weights and gradients were updated into different weights: the optimizer's update is "
                    "not deterministic (an unseeded noise in the update, a multi-threaded reduction)"
              : sd.step == 1
                  ? "the initial weights differ: the model was built before manual_seed(seed), or a layer draws its "
                    "initial values from a generator of its own"
                  : "the weights changed between the last update and this step's forward in different ways: code of "
                    "the loop writes to the weights outside the optimizer (a perturbation, a reset, a pruning mask) "
                    "from an unseeded source";
    f.fix =
        "seed the generator that part of the loop draws from with the run's seed (a Generator(seed), never "
        "std::random_device), or run on one thread when bit-exactness matters";
    return {f};
  }
  if (first == n && a.size() == b.size()) {
    f.title = "two runs with the same seed give identical losses but end with different parameters: " +
              std::to_string(pd.differ) + " of " + std::to_string(pd.compared) + " differ (first " + pd.first + ")";
    f.parameter = pd.first;
    f.evidence = {{"steps compared", static_cast<double>(n), ""}};
    param_evidence();
    f.cause =
        "a parameter the loss did not depend on during these steps (a layer used only at inference, a head "
        "switched off) was initialised from a generator that is not seeded, or what runs after the last "
        "loss (the last step) is not deterministic; the trained models differ although the losses agree";
    f.fix =
        "create every layer after manual_seed(seed) and draw its initial values from the seeded generator "
        "(no std::random_device, no generator of its own); seed every generator from one value";
    return {f};
  }
  f.title = "two runs with the same seed differ" +
            (first < n ? " from step " + std::to_string(first + 1) : std::string(" in length"));
  f.evidence = {{"first differing step", static_cast<double>(first + 1), ""},
                {"run 1", first < n ? a[first] : static_cast<double>(a.size()), ""},
                {"run 2", first < n ? b[first] : static_cast<double>(b.size()), "must equal run 1"}};
  param_evidence();
  if (stepwise && sd.step < 0)  // the losses part while every weight and gradient agrees: the forward itself
    f.evidence.push_back({"steps whose weights and gradients agree", static_cast<double>(sd.compared), ""});
  f.cause =
      "something is not seeded: the initialisation (manual_seed before building the model), the loader's "
      "shuffle seed, dropout, or a multi-threaded reduction whose order changes";
  f.fix =
      "seed every generator from one value (manual_seed, DataLoaderOptions().seed), and run on one thread "
      "when bit-exactness matters";
  return {f};
}

}  // namespace gradsleuth::debug
