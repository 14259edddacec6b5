// M13 numeric gradient check of every layer with parameters or a custom op, and of the whole model (see
// model_checks.h).
#include "debug/checks/model/model_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_set>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/observer.h"
#include "core/op_registry.h"
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

// ---- M13 -----------------------------------------------------------------------------------
std::vector<Finding> gradcheck_module(nn::Module& module, const Tensor& x, const std::string& path,
                                      GradcheckOptions opts) {
  std::vector<Finding> out;
  GS_CHECK(x.is_floating_point(), "gradcheck_module (M13)", "needs a floating-point input, got ", x.str());
  // Central differences perturb one element at a time through host pointers, so a module on a
  // device is checked on a CPU copy (moved back afterwards). That is honest: what M13 checks is
  // the layer's backward formula, the same code on every device, while the device kernels'
  // agreement with the CPU's, forward and backward, is what the CUDA backend's op-by-op tests
  // check. And it is cheap: at gate sizes, moving a layer is a few hundred KB, where perturbing
  // on the device would cost two launch-bound forwards and a host write per element.
  ModeSnapshot modes(module);
  GradSnapshot grads(module);
  HostCopyGuard host(module, "gradcheck_module (M13)");
  module.eval();
  DType orig = kFloat32;
  for (Tensor& p : module.parameters()) {
    orig = p.dtype();
    break;
  }
  module.to(kFloat64);
  struct Restore {
    nn::Module& m;
    DType t;
    ~Restore() { m.to(t); }
  } restore{module, orig};

  Tensor x64 = x.detach().to(kCPU).to(kFloat64).contiguous().clone().requires_grad_(true);
  std::vector<std::pair<std::string, Tensor>> targets{{"input", x64}};
  for (auto& [n, p] : module.named_parameters())
    if (p.requires_grad()) targets.emplace_back((path.empty() ? "" : path + ".") + n, p);
  for (auto& [n, t] : targets) t.zero_grad();

  Generator gen(opts.seed + 17);
  Tensor v;
  {
    Tensor y = module(x64);
    v = randn(y.shape(), kFloat64, &gen);
    (y * v).sum().backward();
  }
  auto f = [&]() {
    NoGradGuard ng;
    return sum(module(x64) * v).item<double>();
  };
  // The size of f's terms, sum |y v|: f is known to about u times it (u = 2^-53; more through the
  // module's own sums), so a central difference over a step h carries an error of about
  // u sum|y v| / h whatever the backward. With activations of 1e4 (raw features in their units
  // before a normalising layer) that is 1e-5 at h = 1e-6: a correct BatchNorm failed rtol 1e-3.
  // So each element is stepped in proportion to its size (h = eps max(1, |x|)), as numerical
  // differentiation does, and the tolerance carries that rounding term.
  double terms = 0.0;
  {
    NoGradGuard ng;
    terms = sum(abs(module(x64) * v)).item<double>();
  }
  const double rounding = 64.0 * std::ldexp(1.0, -53) * terms;  // over h: the numeric derivative's noise
  const int64_t full_limit = 512;  // tensors up to this size are checked element by element
  for (auto& [name, t] : targets) {
    GS_CHECK(t.is_contiguous() && t.dtype() == kFloat64, "gradcheck_module", "internal: ", name, " is ", t.str());
    Tensor g = t.grad();
    const std::vector<double> ga = g.defined() ? g.to_vector<double>() : std::vector<double>(t.numel(), 0.0);
    double* d = t.data_ptr<double>();
    double worst = 0.0, worst_a = 0.0, worst_n = 0.0, max_abs = 0.0;
    int64_t worst_i = -1, failed = 0, checked = 0;
    auto judge = [&](int64_t idx, double a, double n, double h) {
      const double err = std::fabs(a - n);
      const double noise = rounding / h;
      const double scale = std::max({std::fabs(a), std::fabs(n), opts.atol});
      const double rel = std::max(0.0, err - noise) / scale;
      max_abs = std::max(max_abs, err);
      ++checked;
      if (err > opts.atol + opts.rtol * std::fabs(n) + noise) ++failed;
      if (rel > worst || worst_i < 0) {
        worst = rel;
        worst_i = idx;
        worst_a = a;
        worst_n = n;
      }
    };
    if (t.numel() <= full_limit) {
      for (int64_t i = 0; i < t.numel(); ++i) {
        const double keep = d[i], h = opts.eps * std::max(1.0, std::fabs(keep));
        d[i] = keep + h;
        const double fp = f();
        d[i] = keep - h;
        const double fm = f();
        d[i] = keep;
        judge(i, ga[static_cast<size_t>(i)], (fp - fm) / (2 * h), h);
      }
    } else {
      const int projections = std::max(opts.fast_projections, 2);
      for (int k = 0; k < projections; ++k) {
        std::vector<double> u = randn(t.shape(), kFloat64, &gen).to_vector<double>();
        const std::vector<double> keep(d, d + t.numel());
        double a = 0.0, sq = 0.0;
        for (size_t i = 0; i < u.size(); ++i) a += ga[i] * u[i];
        for (double k0 : keep) sq += k0 * k0;
        // One step for the whole direction, in proportion to the tensor's root mean square.
        const double h = opts.eps * std::max(1.0, std::sqrt(sq / static_cast<double>(keep.size())));
        for (size_t i = 0; i < u.size(); ++i) d[i] = keep[i] + h * u[i];
        const double fp = f();
        for (size_t i = 0; i < u.size(); ++i) d[i] = keep[i] - h * u[i];
        const double fm = f();
        std::memcpy(d, keep.data(), keep.size() * sizeof(double));
        judge(k, a, (fp - fm) / (2 * h), h);
      }
    }
    if (failed == 0) continue;
    Finding fd;
    fd.check = "M13";
    fd.severity = Severity::Error;
    const bool proj = t.numel() > full_limit;
    fd.title = "the analytic gradient of " + (name == "input" ? std::string("the input") : "'" + name + "'") +
               " disagrees with central differences" + (proj ? " (random projections v^T J u)" : "");
    fd.module = module_label(path, module);
    fd.parameter = name == "input" ? "" : name;
    fd.shape = shape_of(t);
    fd.evidence = {{"worst relative error", worst, "> rtol " + fmt_num(opts.rtol) + " (+ atol) fails"},
                   {proj ? "worst projection" : "worst element (flat index)", static_cast<double>(worst_i), ""},
                   {"analytic", worst_a, ""},
                   {"numeric", worst_n, ""},
                   {"failed", static_cast<double>(failed), "of " + std::to_string(checked)}};
    fd.cause =
        "the backward of this layer computes a wrong gradient (a hand-written formula with a missing "
        "transpose, a wrong sign or factor, a reshape where a transpose was meant)";
    fd.fix = "fix the backward formula; derive it for a 2x3 example by hand and compare with gs::debug::gradcheck";
    if (host.moved())
      fd.cause += " (checked in float64 on a CPU copy of the layer, which lives on " + host.device().str() +
                  ": the formula is the same code on every device)";
    out.push_back(std::move(fd));
  }
  return out;
}

// ---- custom ops --------------------------------------------------------------------------------
namespace {
// The names of the ops the engine runs in this forward. An op reports itself
// before its backward node exists, so nodes are recognised by name: an engine
// node is named after its op (the registry's name, or the one it reported); a
// gs::record by the user carries the user's own name ("my_square").
class EngineOps : public OpObserver {
 public:
  void on_op(const OpEvent& e) override {
    if (e.op) names.insert(e.op);
  }
  std::unordered_set<std::string> names;
};

bool engine_node(const Node& n, const EngineOps& seen) {
  const char* name = n.name();
  if (!name) return true;
  const std::string s = name;
  // Leaves' accumulators, the engine's view bookkeeping, and the nodes an op
  // records inside itself under another name (the composite conv2d's unfold and
  // fold, also in the fused conv2d's backward under create_graph; a pooling
  // layer's backward when differentiated twice). The fused conv2d's own node is
  // "conv2d", the registry's name.
  static const std::unordered_set<std::string> internal = {"AccumulateGrad",
                                                           "CopySlices",
                                                           "unfold",
                                                           "fold",
                                                           "as_strided",
                                                           "as_strided_scatter",
                                                           "view_scatter",
                                                           "to_device",
                                                           "to_dtype",
                                                           "clone",
                                                           "index_add",
                                                           "scatter_add",
                                                           "avg_pool2d_backward",
                                                           "max_pool2d_backward",
                                                           "binary_cross_entropy"};
  return internal.count(s) > 0 || seen.names.count(s) > 0 || find_op(s) != nullptr;
}
}  // namespace

std::vector<std::pair<std::string, nn::ModulePtr>> custom_op_modules(nn::Module& model, const Tensor& x, int64_t rows) {
  std::vector<std::pair<std::string, nn::ModulePtr>> out;
  if (!x.defined()) return out;
  ModeSnapshot modes(model);
  GradSnapshot grads(model);
  QuietProbe quiet(model);
  model.eval();
  EngineOps engine;
  std::unordered_map<const Node*, size_t> owner;  // custom node -> index into mods
  std::vector<std::pair<std::string, nn::ModulePtr>> mods;
  std::vector<const Node*> stops;  // the current input's grad_fn per active module
  {
    HookSet hooks;
    std::set<const nn::Module*> seen;
    for (auto& [path, m] : model.named_modules()) {
      if (!seen.insert(m.get()).second) continue;
      const size_t idx = mods.size();
      mods.emplace_back(path, m);
      hooks.pre(
          m, [&stops](nn::Module&, const Tensor& in) { stops.push_back(in.defined() ? in.grad_fn().get() : nullptr); });
      // Inner modules finish first, so each node is owned by the innermost module that ran it.
      hooks.post(m, [&, idx](nn::Module&, const Tensor&, const Tensor& y) {
        const Node* stop = stops.empty() ? nullptr : stops.back();
        if (!stops.empty()) stops.pop_back();
        if (!y.defined() || !y.grad_fn()) return;
        std::vector<Node*> todo{y.grad_fn().get()};
        std::unordered_set<const Node*> visited;
        while (!todo.empty()) {
          Node* n = todo.back();
          todo.pop_back();
          if (!n || n == stop || !visited.insert(n).second) continue;
          if (!owner.count(n) && !engine_node(*n, engine)) owner[n] = idx;
          for (const Edge& e : n->next_edges) todo.push_back(e.fn.get());
        }
      });
    }
    Tensor xr = first_rows(x, rows).detach();
    if (xr.is_floating_point()) xr = xr.clone().requires_grad_(true);
    EnableGradGuard eg;
    try {
      ObserverGuard obs(&engine, ObserverScope::ThisThread);
      model(xr);
    } catch (const std::exception&) {
      return out;
    }
  }
  std::set<size_t> idx;
  for (auto& [n, i] : owner) idx.insert(i);
  for (size_t i : idx) out.push_back(mods[i]);
  return out;
}

std::vector<Finding> gradcheck_layers(nn::Module& model, const Tensor& x, int64_t rows, GradcheckOptions opts) {
  std::vector<std::pair<std::string, nn::ModulePtr>> layers;
  std::vector<Tensor> inputs;
  {
    HookSet hooks;
    // Layers with parameters, and modules that run a backward of their own.
    std::set<const nn::Module*> custom;
    for (auto& [path, m] : custom_op_modules(model, x, rows)) custom.insert(m.get());
    std::set<const nn::Module*> chosen;
    for (auto& [path, m] : model.named_modules()) {
      const bool leaf_with_params = m->named_children().empty() && !m->named_parameters(false).empty();
      if (!leaf_with_params && !custom.count(m.get())) continue;
      if (!chosen.insert(m.get()).second) continue;
      const size_t idx = layers.size();
      layers.emplace_back(path, m);
      inputs.emplace_back();
      hooks.pre(m, [&inputs, idx](nn::Module&, const Tensor& in) {
        if (!inputs[idx].defined()) inputs[idx] = in.detach().clone();
      });
    }
    ModeSnapshot modes(model);
    model.eval();
    NoGradGuard ng;
    model(x.narrow(0, 0, std::min<int64_t>(std::max<int64_t>(rows, 1), x.size(0))));
  }
  std::vector<Finding> out;
  std::set<const nn::Module*> seen;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].is_floating_point() || !seen.insert(layers[i].second.get()).second) continue;
    auto fs = gradcheck_module(*layers[i].second, inputs[i], layers[i].first, opts);
    out.insert(out.end(), fs.begin(), fs.end());
  }
  return out;
}

// ---- M13: the whole model's input gradient ----------------------------------------------------
std::vector<Finding> check_input_gradient(nn::Module& model, const Tensor& x, int64_t rows, int directions,
                                          GradcheckOptions opts) {
  std::vector<Finding> out;
  if (!x.defined() || !x.is_floating_point() || x.dim() == 0) return out;
  ModeSnapshot modes(model);
  GradSnapshot grads(model);
  HostCopyGuard host(model, "check_input_gradient (M13)");
  model.eval();
  DType orig = kFloat32;
  for (Tensor& p : model.parameters()) {
    orig = p.dtype();
    break;
  }
  model.to(kFloat64);
  struct Restore {
    nn::Module& m;
    DType t;
    ~Restore() { m.to(t); }
  } restore{model, orig};

  Generator gen(opts.seed + 29);
  // The check is about backward formulas, so the point can move: real inputs
  // hold ties (a background of equal pixels makes every max-pool window a tie,
  // and ReLUs sit exactly at their kink), where a one-sided derivative is not
  // the numeric one. A jitter of 0.1 x the input's spread separates ties by far
  // more than the step below.
  Tensor x64 = host64(first_rows(x, rows)).contiguous().clone();
  Tensor movable;  // (1, D): 0 for the columns of codes held still, in the jitter and in every direction
  {
    const double spread = x64.numel() > 1 ? summarize(x64).std : 1.0;
    const Tensor noise = randn(x64.shape(), kFloat64, &gen) * (0.1 * (spread > 0.0 ? spread : 1.0));
    const auto runs = [&](const Tensor& at) {
      try {
        NoGradGuard ng;
        model(at);
        return true;
      } catch (const std::exception&) {
        return false;
      }
    };
    Tensor jittered = x64 + noise;
    // Columns of whole numbers that the forward casts to indices (categorical codes stored among
    // float features, read by an embedding) cannot move: the jitter and the directions leave them
    // alone where moving them makes the forward fail (a step across a whole number would pick
    // another row of the table), and the check is skipped where that does not help either.
    if (!runs(jittered) && runs(x64)) {
      if (x64.dim() != 2) return out;
      const int64_t n = x64.size(0), d = x64.size(1);
      const std::vector<double> v = x64.to_vector<double>();
      std::vector<double> moves(static_cast<size_t>(d), 0.0);  // 1 for a column not all whole numbers
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < d; ++j) {
          const double e = v[static_cast<size_t>(i * d + j)];
          if (e != std::floor(e)) moves[static_cast<size_t>(j)] = 1.0;
        }
      movable = tensor(moves, {1, d}).to(kFloat64);
      jittered = x64 + noise * movable;
      if (!runs(jittered)) return out;
    }
    x64 = jittered.detach().requires_grad_(true);
  }
  // M2: a model whose output in eval mode changes between two calls on one input draws something
  // random at evaluation, or carries state from call to call: no derivative can be taken of it, so M13
  // stops here (the randomness is M2's warning; the state is judged with the training loader).
  {
    std::vector<Finding> calls = check_repeat_calls(model, x64, -1);
    for (Finding& f : calls)
      if (f.fires()) out.push_back(std::move(f));  // a draw at evaluation (a state is info here)
    if (!calls.empty()) return out;
  }
  // A step 10x below gradcheck's: the chance that it crosses a kink left after the
  // jitter is 10x smaller, and float64 rounding (1e-16 |f| / 1e-7) stays far below rtol.
  const double eps = std::min(opts.eps, 1e-7);
  Tensor v;
  std::string own_op;  // a node of the graph that is no op of the engine's registry (a backward of the user's)
  {
    Tensor y = model(x64);
    if (!y.defined() || !y.is_floating_point() || !y.requires_grad()) return out;  // no path to the input: M6/M5
    std::set<std::string> engine_ops{"AccumulateGrad"};
    for (const OpInfo& op : op_registry()) engine_ops.insert(op.name);
    std::vector<const Node*> todo{y.grad_fn().get()};
    std::set<const Node*> seen;
    while (!todo.empty() && own_op.empty()) {
      const Node* n = todo.back();
      todo.pop_back();
      if (!n || !seen.insert(n).second) continue;
      if (!engine_ops.count(n->name())) own_op = n->name();
      for (const Edge& e : n->next_edges) todo.push_back(e.fn.get());
    }
    v = randn(y.shape(), kFloat64, &gen);
    (y * v).sum().backward();
  }
  const Tensor g = x64.grad();
  if (!g.defined()) return out;
  auto f = [&](const Tensor& xp) {
    NoGradGuard ng;
    return sum(model(xp) * v).item<double>();
  };
  double worst = 0.0, worst_a = 0.0, worst_n = 0.0;
  int failed = 0;
  const Tensor base = x64.detach();
  for (int k = 0; k < std::max(directions, 1); ++k) {
    const Tensor u =
        movable.defined() ? randn(base.shape(), kFloat64, &gen) * movable : randn(base.shape(), kFloat64, &gen);
    const double a = sum(g * u).item<double>();
    double n = (f(base + u * eps) - f(base - u * eps)) / (2 * eps);
    // A unit within eps of its kink (a ReLU's 0, a max-pool's tie) bends the central difference: at a
    // step 100x smaller the numeric derivative moves to the analytic one. A wrong formula stays off.
    if (std::fabs(a - n) > opts.atol + opts.rtol * std::fabs(n)) {
      const double fine = (f(base + u * (eps / 100)) - f(base - u * (eps / 100))) / (2 * eps / 100);
      if (std::fabs(a - fine) <= opts.atol + opts.rtol * std::fabs(fine)) n = fine;
    }
    const double err = std::fabs(a - n);
    const double rel = err / std::max({std::fabs(a), std::fabs(n), opts.atol});
    if (err > opts.atol + opts.rtol * std::fabs(n)) ++failed;
    if (rel >= worst) {
      worst = rel;
      worst_a = a;
      worst_n = n;
    }
  }
  // A wrong formula fails along every random direction; a lone failure is a kink
  // crossed by chance (with one direction asked for, that one decides).
  const int needed = std::max(directions, 1) >= 2 ? 2 : 1;
  if (failed < needed) return out;
  Finding fd;
  fd.check = "M13";
  fd.severity = Severity::Error;
  fd.module = module_label("", model);
  fd.shape = shape_of(x64);
  fd.title =
      "the model's gradient with respect to its input disagrees with the directional derivative along a "
      "random direction (float64): a backward inside the model is wrong";
  fd.evidence = {{"worst relative error", worst, "> rtol " + fmt_num(opts.rtol) + " (+ atol) fails"},
                 {"analytic <grad, u>", worst_a, ""},
                 {"numeric (f(x + eps u) - f(x - eps u)) / 2 eps", worst_n, ""},
                 {"failed directions", static_cast<double>(failed), "of " + std::to_string(std::max(directions, 1))}};
  fd.cause =
      "some op's backward formula computes a wrong gradient; the per-layer check (M13 on every layer with "
      "parameters or a custom op) found none, so look for a backward written outside any module (an op "
      "recorded in the model's own forward)";
  fd.fix =
      "check each piece with debug::gradcheck_module (a sub-module) or debug::gradcheck (a function) to find "
      "it, then fix its backward formula";
  if (own_op.empty()) {
    // Every node is an engine op, whose backward the engine's own gradchecks cover: the gradient is right for
    // the graph, and the graph leaves part of the function out.
    fd.severity = Severity::Info;
    fd.title =
        "the model's gradient with respect to its input differs from the derivative of its output (float64), and "
        "every op of its graph is one of the engine's: the forward holds a stop-gradient";
    fd.cause =
        "a value the forward computes from the input is used without its gradient (detach(), a NoGradGuard "
        "region, a rounding or an argmax): the gradient is that of the function with that value held fixed. "
        "Meant in instance normalisation with detached statistics (RevIN), target networks and straight-through "
        "estimators";
    fd.fix = "none needed if the stop-gradient is meant; otherwise remove the detach() so the gradient flows";
  }
  out.push_back(std::move(fd));
  return out;
}

}  // namespace gradsleuth::debug
