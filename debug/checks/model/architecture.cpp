// M23 missing non-linearity, M24 dropout rate and M27 activation variance at initialisation (see model_checks.h).
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
#include "debug/checks/model/behaviour.h"
#include "debug/checks/check_util.h"
#include "debug/checks/hooks.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "optim/adam.h"
#include "debug/checks/model/model_util.h"

namespace gradsleuth::debug {

using namespace model_detail;

// ---- M23 -----------------------------------------------------------------------------------
std::vector<Finding> check_missing_nonlinearity(nn::Module& model, const Tensor& x) {
  auto is_linear = [](const nn::Module& m) {
    const std::string& t = m.type_name();
    return t == "Linear" || t == "Conv1d" || t == "Conv2d";
  };
  struct Call {
    std::string label;
    Tensor input, output;
  };
  std::vector<Call> calls;  // the linear layers' calls, in forward order
  HookSet hooks;
  for (auto& [path, m] : leaf_modules(model)) {
    if (!is_linear(*m)) continue;
    const std::string label = module_label(path, *m);
    // Copies: an in-place activation applied later (h.relu_()) would change a shared tensor.
    hooks.pre(m, [&calls, label](nn::Module&, const Tensor& in) {
      calls.push_back({label, in.defined() ? in.detach().clone() : in, Tensor()});
    });
    hooks.post(m, [&calls](nn::Module&, const Tensor&, const Tensor& out) {
      if (!calls.empty() && out.defined()) calls.back().output = out.detach().clone();
    });
  }
  if (hooks.empty()) return {};
  {
    QuietProbe quiet(model);
    ModeSnapshot modes(model);
    model.eval();  // dropout passes its input through unchanged
    NoGradGuard ng;
    model(x);
  }
  hooks.clear();
  std::vector<Finding> out;
  for (size_t i = 1; i < calls.size(); ++i) {
    const Call& a = calls[i - 1];
    const Call& b = calls[i];
    if (!a.output.defined() || !b.input.defined() || a.output.numel() != b.input.numel() || a.output.numel() == 0)
      continue;
    NoGradGuard ng;
    const Tensor prev = a.output.detach().reshape({-1}).to(kFloat64);
    const Tensor next = b.input.detach().reshape({-1}).to(kFloat64);
    const double diff = amax(abs(prev - next)).item<double>();
    const double scale = amax(abs(prev)).item<double>();
    // A non-linearity changes the values: a ReLU zeroes the negative half of a layer's output.
    if (!(scale > 0.0) || diff > 1e-6 * scale) continue;
    Finding f = detail::make("M23", Severity::Warning,
                             b.label + " takes " + a.label + "'s output with no non-linearity between them: the two "
                                       "layers collapse into one linear map");
    f.module = b.label;
    f.shape = shape_str(b.input.shape());
    f.evidence = {{"max |input of the second - output of the first|", diff, "0 (the same values) flags"},
                  {"max |output of the first|", scale, ""}};
    f.cause = "an activation is missing between two linear layers (forgotten in forward(), or left out of a "
              "Sequential): however many such layers are stacked, the model can only learn a linear function of its "
              "input";
    f.fix = "put a non-linearity (nn::ReLU, gs::relu, nn::Tanh, ...) between " + a.label + " and " + b.label;
    out.push_back(std::move(f));
  }
  return out;
}

// ---- M24 -----------------------------------------------------------------------------------
std::vector<Finding> check_dropout_rate(nn::Module& model, const ModelCheckOptions& o) {
  std::vector<Finding> out;
  for (auto& [path, m] : leaf_modules(model)) {
    const auto* d = dynamic_cast<const nn::Dropout*>(m.get());
    if (!d || !(d->p() > o.max_dropout)) continue;
    const std::string label = module_label(path, *m);
    Finding f = detail::make("M24", Severity::Warning,
                             label + " drops " + fmt_num(100.0 * d->p()) + "% of its inputs at every training step");
    f.module = label;
    f.evidence = {{"dropout probability p", d->p(), "> " + fmt_num(o.max_dropout) + " flags"}};
    f.cause = "a dropout probability above 0.5 keeps less than half of the activations (and of the gradient through "
              "them) at each step: the model trains on a small random part of itself and may not learn at all; p is "
              "the probability of dropping, not of keeping";
    f.fix = "use p between 0.1 and 0.5 (0.2-0.3 is usual); if p was meant as the keep probability, pass 1 - p";
    out.push_back(std::move(f));
  }
  return out;
}

// ---- M27 -----------------------------------------------------------------------------------
std::vector<Finding> check_activation_variance(nn::Module& model, const Tensor& x, const ModelCheckOptions& o) {
  std::vector<std::pair<std::string, double>> layers;  // (ReLU layer, variance of its input), forward order
  HookSet hooks;
  for (auto& [path, m] : leaf_modules(model)) {
    if (m->type_name() != "ReLU") continue;
    const std::string label = module_label(path, *m);
    hooks.pre(m, [&layers, label](nn::Module&, const Tensor& in) {
      if (!in.defined() || in.numel() < 2 || !in.is_floating_point()) return;
      const Tensor t = in.detach().to(kFloat64);
      const Tensor c = t - mean(t);
      layers.emplace_back(label, mean(c * c).item<double>());
    });
  }
  if (hooks.empty()) return {};
  {
    QuietProbe quiet(model);
    ModeSnapshot modes(model);
    model.eval();
    NoGradGuard ng;
    model(x);
  }
  hooks.clear();
  size_t lo = layers.size(), hi = layers.size();
  for (size_t i = 0; i < layers.size(); ++i) {
    const double v = layers[i].second;
    if (!std::isfinite(v) || !(v > 0.0)) continue;  // NaN is M12's; a constant input is M25's
    if (lo == layers.size() || v < layers[lo].second) lo = i;
    if (hi == layers.size() || v > layers[hi].second) hi = i;
  }
  if (lo == layers.size() || lo == hi) return {};
  const double ratio = layers[hi].second / layers[lo].second;
  if (!(ratio > o.activation_variance_ratio)) return {};
  const bool shrinks = lo > hi;  // the smaller variance comes later in the forward
  Finding f = detail::make("M27", Severity::Warning,
                           "at initialisation the variance of the ReLU inputs " + std::string(shrinks ? "shrinks" : "grows") +
                               " " + fmt_num(ratio) + "x across the layers: " + fmt_num(layers[hi].second) + " at " +
                               layers[hi].first + ", " + fmt_num(layers[lo].second) + " at " + layers[lo].first);
  f.kind = Kind::VarianceDrift;
  f.module = layers[shrinks ? lo : hi].first;
  f.evidence = {{"largest input variance (" + layers[hi].first + ")", layers[hi].second, ""},
                {"smallest input variance (" + layers[lo].first + ")", layers[lo].second, ""},
                {"ratio", ratio, "> " + fmt_num(o.activation_variance_ratio) + " flags"},
                {"ReLU layers measured", static_cast<double>(layers.size()), ""}};
  f.cause = shrinks ? "the weights are initialised too small for the depth: each layer shrinks the signal, so the last "
                      "layers see almost constant inputs and the first ones get vanishing gradients"
                    : "the weights are initialised too large for the depth: each layer amplifies the signal, so the last "
                      "layers saturate or overflow and the gradients explode";
  f.fix = "initialise the layers before each ReLU with init::kaiming_normal_ (He: std sqrt(2 / fan_in)), or put a "
          "normalisation (BatchNorm/LayerNorm) before the activations";
  return {f};
}

}  // namespace gradsleuth::debug
