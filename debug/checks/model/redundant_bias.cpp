// Redundant biases (O1's info): a bias whose gradient is zero by construction, a BatchNorm right after it (see
// model_checks.h).
#include "debug/checks/model/model_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/hooks.h"
#include "debug/checks/model/behaviour.h"
#include "debug/checks/model/model_util.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "optim/adam.h"

namespace gradsleuth::debug {

using namespace model_detail;

// ---- redundant biases (O1 info) --------------------------------------------------------------
std::vector<Finding> find_redundant_biases(nn::Module& model, const Tensor& x, const Tensor& y,
                                           const LossFunction& loss, double vanishing_grad_norm) {
  std::vector<Finding> out;
  // Candidates: 1-D trainable parameters whose gradient is there, finite and small. A bias before a
  // BatchNorm has a gradient of float32's rounding only, which sits either side of the vanishing
  // threshold from one batch to the next: the probe below decides, the bar only saves its forwards.
  const double candidate = 1e3 * vanishing_grad_norm;
  std::vector<std::pair<std::string, Tensor>> cands;
  for (auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad() || p.dim() != 1 || p.numel() == 0) continue;
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    NoGradGuard ng;
    const double norm = std::sqrt(sum(square(g.detach().to(kFloat64))).item<double>());
    if (std::isfinite(norm) && norm < candidate) cands.emplace_back(name, p);
  }
  if (cands.empty()) return out;
  ModeSnapshot modes(model);
  QuietProbe quiet(model);  // no warnings; buffers (BatchNorm statistics) put back
  set_mode_without_randomness(model, true, probe_mode_dependence(model, x));
  NoGradGuard ng;
  auto loss_now = [&] {
    const Tensor l = loss(model(x), y);
    return l.numel() == 1 ? l.item<double>() : std::nan("");
  };
  const double base = loss_now();
  if (!std::isfinite(base)) return out;
  std::map<std::string, nn::ModulePtr> modules;
  for (auto& [path, m] : model.named_modules()) modules[path] = m;
  for (auto& [name, p] : cands) {
    const size_t dot = name.rfind('.');
    const std::string owner = dot == std::string::npos ? "" : name.substr(0, dot);
    auto it = modules.find(owner);
    if (it == modules.end()) continue;
    // The owning module's output, seen (and for the noise probe changed in place) by a hook.
    Tensor seen;
    Tensor noise;  // added to the output when defined
    int64_t calls = 0;  // the module's calls in this forward: a module used twice (a siamese encoder
                        // whose outputs are subtracted) gets a different multiple of the noise each time
    HookSet hooks;
    hooks.post(it->second, [&](nn::Module&, const Tensor& in, const Tensor& o) {
      // In place on the module's own result (never on its input, should the output alias it).
      if (noise.defined() && o.defined() && o.shape() == noise.shape() &&
          (!in.defined() || o.raw_data() != in.raw_data()))
        const_cast<Tensor&>(o).add_(noise.to(o.dtype()) * static_cast<double>(++calls));
      seen = o.defined() ? o.detach().to(kFloat64) : Tensor();
    });
    loss_now();
    if (!seen.defined() || seen.numel() == 0 || seen.dim() < 1) continue;
    const Tensor out0 = seen;
    // The shift: as large as twice the module's output (so units a bias keeps dead or saturated
    // are moved out of it), alternating signs across entries.
    const double scale = std::max(1.0, 2.0 * amax(abs(out0)).item<double>());
    if (!std::isfinite(scale)) continue;
    // The channel dim the parameter is added along: dim 1 of (B, C, ...), else the last.
    const int64_t C = p.numel();
    const int64_t cdim = out0.dim() >= 2 && out0.size(1) == C ? 1 : out0.size(-1) == C ? out0.dim() - 1 : -1;
    if (cdim < 0 && C == 1) {
      // A scalar that is not its module's bias (a GIN layer's eps, scaling a constant input that a
      // BatchNorm then removes): redundant when shifts either way, as large as the module's output,
      // leave the loss unchanged. A path that is dead for any value (units a shift would revive) moves.
      const Tensor saved = p.detach().clone();
      const double step = std::max(1.0, 2.0 * std::fabs(saved.to(kFloat64).item<double>()));
      double worst = 0;
      for (const double sign : {1.0, -1.0}) {
        p.detach().add_(sign * scale * step);
        worst = std::max(worst, std::fabs(loss_now() - base));
        p.detach().copy_(saved);
      }
      if (!(worst <= 1e-4 * std::max(std::fabs(base), 1e-3))) continue;
      Finding f;
      f.check = "O1";
      f.severity = Severity::Info;
      f.title = "redundant parameter: " + name + " cannot change the loss, so its gradient is zero by construction";
      f.module = owner;
      f.parameter = name;
      f.shape = shape_of(p);
      f.evidence = {{"gradient norm", std::sqrt(sum(square(p.grad().detach().to(kFloat64))).item<double>()),
                     "< " + fmt_num(candidate) + " (1000 x the vanishing bar) made it a candidate"},
                    {"loss", base, ""},
                    {"largest change of the loss with it shifted by +-" + fmt_num(scale * step), worst,
                     "unchanged (relative 1e-4) means redundant"}};
      f.cause =
          "the scalar acts only through a constant that what follows removes: a normalisation after it (a "
          "BatchNorm subtracts the batch's mean), as with a graph network's eps on constant node features. It "
          "has no effect: harmless for training";
      f.fix = "none needed (or leave the scalar out where it multiplies a constant input)";
      out.push_back(std::move(f));
      continue;
    }
    if (cdim < 0) continue;
    const Tensor saved = p.detach().clone();
    std::vector<double> d(static_cast<size_t>(C));
    for (size_t k = 0; k < d.size(); ++k)
      d[k] = (k % 2 ? -1.0 : 1.0) * scale * (1.0 + 0.25 * static_cast<double>(k % 3));
    const Tensor delta = tensor(d, {C}, kFloat64);
    p.detach().add_(delta.to(p.dtype()).to(p.device()));
    const double shifted = loss_now();
    const Tensor out1 = seen;
    p.detach().copy_(saved);
    // 1. It acts as a bias: shifting it moves the module's output by exactly the shift, per channel
    //    (BatchNorm's weight over a constant input, say, does not).
    Shape bshape(static_cast<size_t>(out0.dim()), 1);
    bshape[static_cast<size_t>(cdim)] = C;
    const double off = amax(abs(out1 - out0 - delta.reshape(bshape))).item<double>();
    if (!(off <= 1e-3 * 1.75 * scale)) continue;
    // 2. The loss does not see that shift.
    if (!(std::fabs(shifted - base) <= 1e-4 * std::max(std::fabs(base), 1e-3))) continue;
    // 3. But it does see the module's output: noise of the same size that differs between
    //    examples moves it. Otherwise nothing after the module reaches the loss (saturated or dead
    //    units, a vanishing signal): a real problem, whose warning stays.
    std::vector<double> nz(static_cast<size_t>(out0.numel()));
    // Four levels drawn by a full 64-bit mix of the index (splitmix64's finaliser): a multiplicative
    // hash's low bits repeat with the row width (every row of a 512-wide output got the same noise,
    // a per-channel constant the BatchNorm removed).
    for (size_t k = 0; k < nz.size(); ++k) {
      uint64_t h = static_cast<uint64_t>(k) + 0x9e3779b97f4a7c15ull;
      h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
      h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
      h ^= h >> 31;
      nz[k] = scale * (static_cast<double>(h % 4) - 1.5) / 1.5;
    }
    noise = tensor(nz, out0.shape(), kFloat64).to(out0.device());
    const double noisy = loss_now();
    noise = Tensor();
    // Used: the noise moves the loss by 1e-3 of it, or (an untrained attention whose values barely
    // differ between the elements it weighs) by 1e-5 of it and 100x what the shift moved it.
    const double moved = std::fabs(noisy - base), level = std::max(std::fabs(base), 1e-3);
    if (!(moved > 1e-3 * level || (moved > 1e-5 * level && moved > 100.0 * std::fabs(shifted - base)))) continue;
    Finding f;
    f.check = "O1";
    f.severity = Severity::Info;
    const std::string label = it != modules.end() ? module_label(owner, *it->second) : owner;
    f.title = "redundant bias: " + name + " cannot change the loss, so its gradient is zero by construction";
    f.module = label;
    f.parameter = name;
    f.shape = shape_of(p);
    f.evidence = {{"gradient norm", std::sqrt(sum(square(p.grad().detach().to(kFloat64))).item<double>()),
                   "< " + fmt_num(candidate) + " (1000 x the vanishing bar) made it a candidate"},
                  {"loss", base, ""},
                  {"loss with the bias shifted by up to " + fmt_num(1.5 * scale), shifted,
                   "unchanged (relative 1e-4) means redundant"},
                  {"loss with noise of that size on the module's output", noisy,
                   "must change (1e-3 of the loss, or 1e-5 and 100x the shift's change): the output itself is used"}};
    f.cause = "what comes after " + (owner.empty() ? std::string("this module") : "module " + label) +
              " removes any per-channel constant from its output while still using the output: a normalisation "
              "that subtracts the per-channel mean (BatchNorm right after a Linear or a Conv). Adding any constant "
              "changes nothing, so the bias has no effect: harmless for training, but its parameters are wasted "
              "(and weight decay still shrinks them). With no normalisation after it, look for a softmax or a mean "
              "taken over the batch dimension";
    f.fix =
        "build that layer without a bias (bias=false: nn::Linear(in, out, false), Conv2dOptions().bias(false)); "
        "nothing else needs to change";
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace gradsleuth::debug
