// Parameters initialised to exactly zero that learn from their first step (see model_checks.h).
#include "debug/checks/model/model_checks.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/hooks.h"
#include "debug/checks/model/behaviour.h"
#include "debug/checks/model/model_util.h"
#include "nn/loss.h"

namespace gradsleuth::debug {

using namespace model_detail;

namespace {

double l2_norm64(const Tensor& t) {
  NoGradGuard ng;
  return std::sqrt(sum(square(t.detach().to(kFloat64))).item<double>());
}

bool exactly_all_zero(const Tensor& p) {
  NoGradGuard ng;
  return p.numel() > 0 && amax(abs(p.detach().to(kFloat64))).item<double>() == 0.0;
}

// A small step along minus a zero parameter's own gradient: 1e-3 of its values' typical size at a
// default initialisation (1 / sqrt(fan_in), from its number of columns), far above rounding.
ZeroInitProbe::Step small_step(const Tensor& p) {
  const Tensor g = p.grad().detach();
  const double fan_in = p.dim() >= 2 ? static_cast<double>(p.numel() / p.size(0)) : static_cast<double>(p.numel());
  const double size = 1e-3 / std::sqrt(std::max(fan_in, 1.0));
  NoGradGuard ng;
  const double rms = l2_norm64(g) / std::sqrt(static_cast<double>(g.numel()));
  return {p, mul(g, -size / rms).to(p.dtype()), p.detach().clone()};
}

std::string names(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& n : v) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

bool ZeroInitProbe::holds_back(const std::string& parameter) const {
  return std::find(held_back.begin(), held_back.end(), parameter) != held_back.end();
}
bool ZeroInitProbe::is_zero(const std::string& parameter) const {
  return std::find(zero.begin(), zero.end(), parameter) != zero.end();
}

void ZeroInitProbe::step(bool on) const {
  NoGradGuard ng;
  for (const Step& s : steps) s.param.detach().copy_(on ? s.original + s.delta : s.original);
}

Finding ZeroInitProbe::finding() const {
  Finding f;
  f.check = "O1";
  f.severity = Severity::Info;
  f.title = "initialised to zero: " + names(zero) + " (learning from the first step); the gradient of " +
            names(held_back) + " is zero until then, not vanishing";
  f.parameter = held_back.empty() ? "" : held_back.front();
  f.evidence = {{"parameters exactly zero with a gradient of their own", static_cast<double>(zero.size()), ""},
                {"parameters whose gradient is zero only because of them", static_cast<double>(held_back.size()),
                 "non-zero after one small step of the zero parameters"}};
  f.cause =
      "a layer initialised to zero on purpose (a zero-initialised classifier head or last layer of a residual "
      "branch, as in Fixup and torchvision's zero_init_residual) passes no gradient to the layers before it until "
      "its first update; it receives a gradient itself, so the first step makes it non-zero";
  f.fix = "nothing to fix: the checks of the gradients judge the layers behind it from the second step on";
  return f;
}

ZeroInitProbe probe_zero_initialised(nn::Module& model, const Tensor& x, const Tensor& y, nn::Loss& loss,
                                     double vanishing_grad_norm) {
  try {
    return probe_zero_initialised(
        model, x, y, [&loss](const Tensor& out, const Tensor& t) { return loss(out, t); }, vanishing_grad_norm);
  } catch (const std::exception&) {
    return {};  // the probe could not run: the findings stay as they are
  }
}

ZeroInitProbe probe_zero_initialised(nn::Module& model, const Tensor& x, const Tensor& y, const LossFunction& loss,
                                     double vanishing_grad_norm) {
  ZeroInitProbe r;
  // Candidates: trainable parameters exactly zero, whose own gradient is there and finite, above the
  // vanishing line (a zero layer that receives nothing either, such as a hidden layer whose ReLU
  // units all sit at 0, is dead, not waiting for its first step).
  std::vector<std::pair<std::string, Tensor>> zeros;
  std::vector<std::string> quiet;  // trainable parameters whose gradient is at most the vanishing line
  for (auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad()) continue;
    const Tensor g = p.grad();
    const double n = g.defined() ? l2_norm64(g) : 0.0;
    if (!std::isfinite(n)) return r;
    if (n <= vanishing_grad_norm)
      quiet.push_back(name);
    else if (exactly_all_zero(p))
      zeros.emplace_back(name, p);
  }
  if (zeros.empty() || quiet.empty()) return r;
  GradSnapshot grads(model);
  ModeSnapshot modes(model);
  QuietProbe mute(model);  // no warnings; buffers (BatchNorm statistics) put back
  set_mode_without_randomness(model, true, probe_mode_dependence(model, x));
  for (auto& [name, p] : zeros) r.steps.push_back(small_step(p));
  r.step(true);
  try {
    std::map<std::string, Tensor> params;
    for (auto& [name, p] : model.named_parameters()) params[name] = p;
    // A chain of zero layers (a zero head after a residual branch whose last layer is zero too, as Fixup
    // initialises it) opens one layer per step: after the probe's step, a zero parameter that was quiet
    // may get a gradient, and then the parameters behind it wait on it. So the probe steps again along
    // each newly reached zero parameter's gradient, up to kChain levels.
    constexpr int kChain = 4;
    bool backward_ran = false;
    for (int level = 0; level < kChain; ++level) {
      for (Tensor& p : model.parameters()) p.set_grad(Tensor());
      Tensor l = loss(model(x), y);
      if (l.numel() != 1 || !l.requires_grad()) break;
      l.backward();
      backward_ran = true;
      std::vector<std::string> reached;
      for (const std::string& name : quiet) {
        if (std::find(r.held_back.begin(), r.held_back.end(), name) != r.held_back.end()) continue;
        const Tensor g = params[name].grad();
        if (g.defined() && l2_norm64(g) > vanishing_grad_norm) {
          r.held_back.push_back(name);
          if (exactly_all_zero(params[name])) reached.push_back(name);
        }
      }
      if (reached.empty()) break;
      for (const std::string& name : reached) {  // the next level's small steps, on top of the ones taken
        Tensor& p = params[name];
        ZeroInitProbe::Step s = small_step(p);
        {
          NoGradGuard ng;
          p.detach().copy_(s.original + s.delta);
        }
        r.steps.push_back(std::move(s));
        zeros.emplace_back(name, p);
      }
    }
    if (backward_ran) {
      // Those still quiet may be biases with a BatchNorm after them. Their test needs the branch to carry
      // a signal the loss feels: the zero parameters at a default initialisation's size (1000 steps).
      {
        NoGradGuard ng;
        for (const ZeroInitProbe::Step& s : r.steps) s.param.detach().copy_(s.original + s.delta * 1000.0);
      }
      for (Finding& f : find_redundant_biases(model, x, y, loss, vanishing_grad_norm))
        if (std::find(quiet.begin(), quiet.end(), f.parameter) != quiet.end()) r.redundant.push_back(std::move(f));
    }
  } catch (const std::exception&) {
    r.held_back.clear();  // the probe could not run: the findings stay as they are
    r.redundant.clear();
  }
  r.step(false);
  if (r.empty()) {
    r.steps.clear();
    return r;
  }
  for (const auto& [name, p] : zeros) r.zero.push_back(name);
  return r;
}

void soften_zero_init_findings(std::vector<Finding>& found, const ZeroInitProbe& probe) {
  if (probe.empty()) return;
  // A redundant bias's zero gradient is said once, by its own info finding (as without a zero layer).
  found.erase(std::remove_if(found.begin(), found.end(),
                             [&](const Finding& f) {
                               return f.fires() && (f.check == "O1" || f.check == "M5") &&
                                      std::any_of(probe.redundant.begin(), probe.redundant.end(),
                                                  [&](const Finding& b) { return b.parameter == f.parameter; });
                             }),
              found.end());
  for (Finding& f : found) {
    if (!f.fires() || f.parameter.empty()) continue;
    // O1's and M5's warnings about a parameter held back are about its zero gradient (the probe
    // saw it finite and at most the vanishing line), which the first step ends.
    const bool held =
        probe.holds_back(f.parameter) && f.severity == Severity::Warning && (f.check == "O1" || f.check == "M5");
    const bool zero = f.check == "M9" && probe.is_zero(f.parameter);
    if (!held && !zero) continue;
    f.severity = Severity::Info;
    if (zero)
      f.title = "the weight of " + f.module + " is initialised to zero and learns from its first step";
    else
      f.title += " (only until the first step)";
    f.cause = probe.finding().cause;
  }
}

}  // namespace gradsleuth::debug
