// The model checks (see model_checks.h): structure, parameters, and probing runs.
#include "debug/model_checks.h"

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
#include "debug/behaviour.h"
#include "debug/check_util.h"
#include "debug/hooks.h"
#include "debug/tensor_stats.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "optim/adam.h"

namespace gradsleuth::debug {

namespace {

// The .grad of every parameter, to put back after a probe.
class GradSnapshot {
 public:
  explicit GradSnapshot(nn::Module& model) {
    for (Tensor& p : model.parameters()) saved_.emplace_back(p, p.grad());
  }
  ~GradSnapshot() {
    for (auto& [p, g] : saved_) p.set_grad(g);
  }

 private:
  std::vector<std::pair<Tensor, Tensor>> saved_;
};

bool is_classification(const Tensor& out, const Tensor& y) {
  return y.dtype() == kInt64 && y.dim() == 1 && out.dim() == 2 && out.size(0) == y.size(0);
}

double accuracy_of(const Tensor& out, const Tensor& y) {
  NoGradGuard ng;
  Tensor hit = eq(argmax(out.detach(), 1), y);
  return sum(hit.to(kFloat64)).item<double>() / static_cast<double>(y.size(0));
}

std::vector<Tensor> trainable(nn::Module& model) {
  std::vector<Tensor> out;
  for (Tensor& p : model.parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
}

// Row norms of g (B, ...): the L2 norm of each example's slice.
std::vector<double> row_norms(const Tensor& g) {
  std::vector<double> out;
  NoGradGuard ng;
  Tensor flat = g.detach().reshape({g.size(0), -1}).to(kFloat64);
  const std::vector<double> v = sqrt(sum(flat * flat, {1})).to_vector<double>();
  return v;
}

}  // namespace

// ---- M1 ------------------------------------------------------------------------------------
ShapeTrace shape_trace(nn::Module& model, const Tensor& sample) {
  ShapeTrace t;
  HookSet hooks;
  for (auto& [path, m] : model.named_modules()) {
    ShapeRow r;
    r.path = path.empty() ? "(model)" : path;
    r.type = m->type_name();
    r.output_shape = "-";
    for (auto& [n, p] : m->named_parameters(false)) r.parameters += p.numel();
    const size_t idx = t.rows.size();
    t.rows.push_back(r);
    hooks.post(m, [&t, idx](nn::Module&, const Tensor&, const Tensor& out) {
      t.rows[idx].output_shape = out.defined() ? shape_str(out.shape()) : "undefined";
      ++t.rows[idx].calls;
    });
  }
  t.total_parameters = model.num_parameters();
  t.trainable_parameters = model.num_parameters(true);
  ModeSnapshot modes(model);
  model.eval();  // a probe, not training: BatchNorm's running statistics stay as they are
  NoGradGuard ng;
  model(sample);
  return t;
}

std::string ShapeTrace::str() const {
  std::ostringstream os;
  size_t w = 8;
  for (const ShapeRow& r : rows) w = std::max(w, r.path.size() + r.type.size() + 3);
  for (const ShapeRow& r : rows) {
    const std::string left = r.path + " (" + r.type + ")";
    os << left << std::string(w - left.size() + 2, ' ') << r.output_shape
       << std::string(r.output_shape.size() < 20 ? 20 - r.output_shape.size() : 1, ' ') << r.parameters;
    if (r.calls > 1) os << "  (called " << r.calls << " times)";
    os << "\n";
  }
  os << total_parameters << " parameters, " << trainable_parameters << " trainable";
  return os.str();
}

Finding ShapeTrace::finding() const {
  Finding f;
  f.check = "M1";
  f.severity = Severity::Info;
  f.title = "model summary: " + std::to_string(rows.size()) + " modules, " + std::to_string(total_parameters) +
            " parameters";
  f.module = "(model)";
  f.shape = rows.empty() ? "" : rows.front().output_shape;
  f.evidence = {{"parameters", static_cast<double>(total_parameters), ""},
                {"trainable parameters", static_cast<double>(trainable_parameters), ""}};
  f.cause = "\n" + str();
  return f;
}

// ---- M3 ------------------------------------------------------------------------------------
std::vector<Finding> check_final_activation(nn::Module& model, const Tensor& logits, const ModelCheckOptions& o) {
  std::vector<Finding> out;
  const auto leaves = leaf_modules(model);
  // The last module that is not a (log-)softmax head.
  for (auto it = leaves.rbegin(); it != leaves.rend(); ++it) {
    const std::string& type = it->second->type_name();
    if (type == "LogSoftmax" || type == "Softmax" || type == "Dropout" || type == "Identity" || type == "Flatten")
      continue;
    if (type == "ReLU" || type == "Sigmoid") {
      Finding f;
      f.check = "M3";
      f.severity = Severity::Warning;
      f.title = "the model's last layer is a " + type + ": its outputs cannot be negative";
      f.module = module_label(it->first, *it->second);
      f.cause = "an activation after the final layer limits the logits' range: a class can never get a negative "
                "score, so cross-entropy cannot push wrong classes down properly";
      f.fix = "remove the " + type + " after the last Linear: cross-entropy expects raw logits (if the outputs are "
              "meant to be non-negative, e.g. a regression of counts, ignore this)";
      out.push_back(std::move(f));
    }
    break;
  }
  if (!logits.defined() || logits.dim() != 2 || logits.size(0) < o.min_rows_final_activation || logits.size(1) < 2 ||
      !logits.is_floating_point())
    return out;
  NoGradGuard ng;
  const TensorSummary s = summarize(logits);
  // A ReLU's signature: no negative value, and many exact zeros (a linear head
  // whose outputs all happen to be positive has no zeros).
  if (!s.all_finite() || s.min < 0.0 || s.zero_fraction < o.min_zero_fraction_final_activation) return out;
  const double row_sum_err = amax(abs(sum(logits.detach().to(kFloat64), {1}) - 1.0)).item<double>();
  if (row_sum_err < 1e-3) return out;  // probabilities: L2's double softmax
  Finding f;
  f.check = "M3";
  f.severity = Severity::Warning;
  f.title = "every logit of the batch is >= 0 and many are exactly 0: the outputs look like they passed a ReLU";
  f.module = out.empty() ? "(model output)" : out[0].module;
  f.shape = shape_of(logits);
  f.evidence = {{"min logit", s.min, "< 0 expected for raw logits"},
                {"fraction exactly 0", s.zero_fraction, ""}};
  f.cause = "an activation after the final layer (ReLU clips negative logits to 0; sigmoid squeezes them into "
            "(0, 1)): cross-entropy cannot give a class a negative score";
  f.fix = "end the model with the last Linear layer and feed its raw logits to the loss";
  out.push_back(std::move(f));
  return out;
}

// ---- M4 ------------------------------------------------------------------------------------
std::vector<Finding> check_shared_weights(nn::Module& model) {
  std::vector<Finding> out;
  std::map<const nn::Module*, std::vector<std::string>> module_paths;
  std::vector<std::pair<std::string, nn::ModulePtr>> unique;
  for (auto& [path, m] : model.named_modules()) {
    auto& v = module_paths[m.get()];
    if (v.empty()) unique.emplace_back(path, m);
    v.push_back(path.empty() ? "(model)" : path);
  }
  for (auto& [path, m] : unique) {
    const auto& paths = module_paths[m.get()];
    if (paths.size() < 2 || m->num_parameters() == 0) continue;
    Finding f;
    f.check = "M4";
    f.severity = Severity::Warning;
    std::string list;
    for (const auto& p : paths) list += (list.empty() ? "" : " and ") + p;
    f.title = "one " + m->type_name() + " instance is used at " + list + ": its " +
              std::to_string(m->num_parameters()) + " parameters are shared";
    f.module = module_label(path, *m);
    f.evidence = {{"paths", static_cast<double>(paths.size()), "> 1 means shared"},
                  {"shared parameters", static_cast<double>(m->num_parameters()), ""}};
    f.cause = "the same layer object was added twice (e.g. reusing a variable in a loop or in Sequential) where two "
              "layers were meant: both places compute with one set of weights, which get the sum of both "
              "gradients, and the model has fewer parameters than it looks";
    f.fix = "create a new layer instance for each place (std::make_shared<nn::Linear>(...) twice); if the weights "
            "are tied on purpose, ignore this";
    out.push_back(std::move(f));
  }
  // Parameters registered in two different modules that share one storage
  // (register_parameter detaches, so the handles differ but the memory is one).
  std::map<const Storage*, std::vector<std::string>> param_paths;
  std::map<const Storage*, Shape> shapes;
  std::vector<const Storage*> order;
  for (auto& [path, m] : unique)
    for (auto& [n, p] : m->named_parameters(false)) {
      const Storage* st = p.storage().get();
      auto& v = param_paths[st];
      if (v.empty()) {
        order.push_back(st);
        shapes[st] = p.shape();
      }
      v.push_back(path.empty() ? n : path + "." + n);
    }
  for (const Storage* t : order) {
    const auto& paths = param_paths[t];
    if (paths.size() < 2) continue;
    Finding f;
    f.check = "M4";
    f.severity = Severity::Warning;
    std::string list;
    for (const auto& p : paths) list += (list.empty() ? "" : ", ") + p;
    f.title = "one parameter tensor is registered under " + std::to_string(paths.size()) + " names: " + list;
    f.parameter = paths[0];
    f.shape = shape_str(shapes[t]);
    f.evidence = {{"names", static_cast<double>(paths.size()), "> 1 means shared"}};
    f.cause = "two layers hold the same tensor (assigned from one to the other): they update together";
    f.fix = "give each layer its own parameter (clone() it); if the tying is intended, ignore this";
    out.push_back(std::move(f));
  }
  return out;
}

// ---- M5 ------------------------------------------------------------------------------------
std::vector<Finding> check_gradient_flow(nn::Module& model, const std::vector<std::string>& skip) {
  std::vector<Finding> out;
  int64_t total = 0, missing = 0;
  std::vector<std::pair<std::string, Tensor>> bad;
  for (auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad()) continue;
    if (std::find(skip.begin(), skip.end(), name) != skip.end()) continue;  // zero by construction
    ++total;
    Tensor g = p.grad();
    bool none = !g.defined();
    if (!none) {
      NoGradGuard ng;
      none = amax(abs(g.detach())).item<double>() == 0.0;
    }
    if (!none) continue;
    ++missing;
    bad.emplace_back(name, g);
  }
  for (auto& [name, g] : bad) {
    Finding f;
    f.check = "M5";
    f.severity = Severity::Warning;
    f.title = std::string("trainable parameter '") + name + "' got " + (g.defined() ? "an all-zero" : "no") +
              " gradient from backward";
    f.kind = g.defined() ? Kind::GradientAllZero : Kind::ParameterUnreached;
    f.parameter = name;
    f.evidence = {{"parameters without gradient", static_cast<double>(missing), "any is suspicious"},
                  {"trainable parameters", static_cast<double>(total), ""}};
    f.cause = "the graph from this parameter to the loss is cut: a detach() (or .data) inside the model, a layer "
              "that is never called in forward, or every unit after it dead";
    f.fix = "remove the detach() between this layer and the loss, call the layer in forward(), or freeze it on "
            "purpose with requires_grad_(false)";
    out.push_back(std::move(f));
  }
  return out;
}

// ---- M6 ------------------------------------------------------------------------------------
namespace {
struct MixingResult {
  bool has_grad = false;
  double row_i = 0.0, other_max = 0.0;
  int64_t coupled = 0;
};

MixingResult mixing_once(nn::Module& model, const Tensor& x, int64_t i, double tol) {
  MixingResult r;
  Tensor xi = x.detach().clone().requires_grad_(true);
  Tensor out = model(xi);
  GS_CHECK(out.dim() >= 1 && out.size(0) == x.size(0), "batch_mixing_test (M6)", "the model's output ",
           out.str(), " has no batch dim matching the input ", x.str());
  // A fixed random weighting of row i's outputs: with a plain sum, a softmax
  // head's row (which always sums to 1) would have a zero gradient everywhere.
  Tensor row = out.select(0, i);
  Generator gen(12345);
  // Drawn on the host and moved: the same weights (and so the same verdict) on every device.
  Tensor w = randn(row.shape(), TensorOptions(row.dtype()), &gen).to(row.device());
  Tensor loss = (row * w).sum();
  if (!loss.requires_grad()) return r;
  loss.backward();
  Tensor g = xi.grad();
  if (!g.defined()) return r;
  r.has_grad = true;
  const std::vector<double> n = row_norms(g);
  r.row_i = n[static_cast<size_t>(i)];
  for (size_t j = 0; j < n.size(); ++j) {
    if (static_cast<int64_t>(j) == i) continue;
    r.other_max = std::max(r.other_max, n[j]);
    if (n[j] > tol * std::max(r.row_i, 1e-30)) ++r.coupled;
  }
  return r;
}

// The op of module `m` that makes the batch's rows out of a tensor whose dim 0 was not the
// batch: a view (every reshape is one) from [M, B] to [B, M] where a transpose was meant. Read off
// the autograd graph of `m` run alone on `in`; "" when there is no such op, or more than one.
std::string batch_reshape_op(nn::Module& m, const Tensor& in) {
  const int64_t B = in.size(0);
  Tensor xi = in.detach().clone().requires_grad_(true);
  Tensor out = m(xi);
  if (!out.defined() || !out.grad_fn()) return "";
  std::vector<const Node*> todo{out.grad_fn().get()};
  std::set<const Node*> seen;
  int found = 0;
  while (!todo.empty()) {
    const Node* n = todo.back();
    todo.pop_back();
    if (!n || !seen.insert(n).second) continue;
    const bool into_rows = std::strcmp(n->name(), "view") == 0 && !n->out_shape.empty() && n->out_shape[0] == B &&
                           !n->next_edges.empty() && !n->next_edges[0].shape.empty() &&
                           n->next_edges[0].shape[0] != B;
    found += into_rows ? 1 : 0;
    for (const Edge& e : n->next_edges) todo.push_back(e.fn.get());
  }
  return found == 1 ? "view" : "";
}

// Where the batch is mixed: the first leaf module, in the order the forward runs them, whose
// output mixes the rows of its own input (mixing_once on the module alone, with the input it got
// in the forward), as {module label, op} (the op when batch_reshape_op names one). Both "" when
// no module does by itself (the mixing happens between modules, in a model's own forward).
std::pair<std::string, std::string> mixing_module(nn::Module& model, const Tensor& x, int64_t row, double tol) {
  std::vector<std::pair<std::string, nn::ModulePtr>> ran;  // in call order, with their inputs
  std::vector<Tensor> inputs;
  {
    HookSet hooks;
    for (const auto& [path, m] : leaf_modules(model))
      hooks.pre(m, [&ran, &inputs, path = path, m = m](nn::Module&, const Tensor& in) {
        ran.emplace_back(path, m);
        inputs.push_back(in.defined() ? in.detach().clone() : in);
      });
    NoGradGuard ng;
    model(x);
  }
  for (size_t k = 0; k < ran.size(); ++k) {
    const Tensor& in = inputs[k];
    if (!in.defined() || in.dim() < 1 || in.size(0) != x.size(0) || !in.is_floating_point()) continue;
    try {
      if (mixing_once(*ran[k].second, in, row, tol).coupled > 0)
        return {module_label(ran[k].first, *ran[k].second), batch_reshape_op(*ran[k].second, in)};
    } catch (const std::exception&) {
      // An output without the input's batch dim: this module alone cannot be tested.
    }
  }
  return {};
}
}  // namespace

std::vector<Finding> batch_mixing_test(nn::Module& model, const Tensor& x, const ModelCheckOptions& o) {
  GS_CHECK(x.dim() >= 1 && x.size(0) >= 2, "batch_mixing_test (M6)", "needs a batch of at least 2 examples, got ",
           x.str());
  GS_CHECK(x.is_floating_point(), "batch_mixing_test (M6)", "needs a floating-point input, got ", x.str());
  const int64_t i = std::min<int64_t>(std::max<int64_t>(o.mixing_row, 0), x.size(0) - 1);
  std::vector<Finding> out;
  ModeSnapshot modes(model);
  GradSnapshot grads(model);
  ParamSnapshot params(model);  // train mode updates BatchNorm's running statistics
  // Layers whose output depends on the mode, found by their behaviour (a
  // hand-written BatchNorm-like layer counts as nn::BatchNorm1d does).
  const ModeProbe probe = probe_mode_dependence(model, x);
  const bool has_bn = probe.any_deterministic_mode_dependent();

  model.eval();
  // Probe a few rows (the option's, the middle one, the last): a mix such as
  // x[i] - x[0] leaves row 0 alone and shows only on the others.
  const int64_t B = x.size(0);
  std::vector<int64_t> rows{i};
  for (int64_t r : {B / 2, B - 1})
    if (std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
  std::vector<MixingResult> probes;
  for (int64_t r : rows) probes.push_back(mixing_once(model, x, r, o.mixing_tolerance));
  size_t worst = 0;
  bool any_grad = false, self_blind = false;
  int64_t blind_row = -1;
  for (size_t k = 0; k < probes.size(); ++k) {
    any_grad = any_grad || probes[k].has_grad;
    if (probes[k].coupled > probes[worst].coupled) worst = k;
    if (probes[k].has_grad && probes[k].row_i == 0.0 && !self_blind) {
      self_blind = true;
      blind_row = rows[k];
    }
  }
  const MixingResult& ev = probes[worst];
  const int64_t row = rows[worst];
  const std::string others = std::to_string(B - 1) + " other rows";
  if (!any_grad) {
    Finding f;
    f.check = "M6";
    f.severity = Severity::Warning;
    f.kind = Kind::InputUnreached;
    f.title = "no gradient reaches the input: the batch-mixing test cannot run";
    f.shape = shape_of(x);
    f.cause = "the output does not depend on the input through differentiable ops (a detach() near the input?)";
    f.fix = "remove the detach(); the test needs d(output)/d(input)";
    out.push_back(std::move(f));
  } else if (ev.coupled > 0) {
    Finding f;
    f.check = "M6";
    f.severity = Severity::Error;
    f.title = "the output for example " + std::to_string(row) + " depends on " + std::to_string(ev.coupled) +
              (ev.coupled == 1 ? " other example" : " other examples") +
              " of the batch (in eval mode): the model mixes the batch";
    f.kind = Kind::BatchMixing;
    f.shape = shape_of(x);
    // Where: the module that mixes rows of its own input, when one does (graph --check and the
    // report's graph draw its ops in red).
    std::tie(f.module, f.op) = mixing_module(model, x, row, o.mixing_tolerance);
    f.evidence = {{"|d out[i] / d x[i]|", ev.row_i, ""},
                  {"largest |d out[i] / d x[j]|, j != i", ev.other_max,
                   "> " + fmt_num(o.mixing_tolerance) + " x the first flags coupling"},
                  {"coupled rows", static_cast<double>(ev.coupled), "of the " + others},
                  {"probed example i", static_cast<double>(row), ""}};
    f.cause = "an op moved data across the batch dim: a reshape/view where a transpose/permute was meant (the "
              "shapes fit, the rows interleave), a softmax/mean/sum over dim 0 instead of the feature dim, or a "
              "flatten that includes the batch";
    f.fix = (f.module.empty() ? std::string("find the op whose batch dim is not dim 0 any more")
             : !f.op.empty()   ? "in " + f.module + " (its output rows mix its input rows when tested alone), its " +
                                   f.op + " (a reshape) makes rows out of a tensor whose dim 0 is not the batch"
                               : "in " + f.module + " (its output rows mix its input rows when tested alone), find "
                                 "the op whose batch dim is not dim 0 any more") +
            " (print shapes with gradsleuth's shape trace, M1): use transpose/permute to reorder dims, and reduce "
            "over the feature dims only";
    out.push_back(std::move(f));
  } else if (self_blind) {
    Finding f;
    f.check = "M6";
    f.severity = Severity::Warning;
    f.kind = Kind::OutputIgnoresInput;
    f.title = "the output for example " + std::to_string(blind_row) + " does not depend on its own input";
    f.shape = shape_of(x);
    f.evidence = {{"|d out[i] / d x[i]|", 0.0, "must be > 0"},
                  {"probed example i", static_cast<double>(blind_row), ""}};
    f.cause = "the input of this example is cut off (a detach, every unit dead, a multiplication by zero), or its "
              "output is built from another example (a subtraction of x[0], a shift along the batch)";
    f.fix = "check the gradient flow (M5) and dead units (M7), and any op that indexes the batch dim";
    out.push_back(std::move(f));
  }
  if (has_bn && ev.has_grad && ev.coupled == 0) {
    set_mode_without_randomness(model, true, probe);
    const MixingResult tr = mixing_once(model, x, i, o.mixing_tolerance);
    if (tr.coupled > 0) {
      Finding f;
      f.check = "M6";
      f.severity = Severity::Info;
      f.title = "in train mode the examples are coupled through BatchNorm's batch statistics (expected, not a bug)";
      f.evidence = {{"coupled rows (train mode)", static_cast<double>(tr.coupled), "of the " + others},
                    {"coupled rows (eval mode)", 0.0, ""}};
      f.cause = "BatchNorm normalises each example with the batch's mean and variance, so in training every "
                "output depends a little on the whole batch; in eval mode it uses running statistics";
      out.push_back(std::move(f));
    }
  }
  params.restore();
  return out;
}

// ---- M9 ------------------------------------------------------------------------------------
std::vector<Finding> check_initialisation(nn::Module& model, const ModelCheckOptions& o) {
  std::vector<Finding> out;
  for (auto& [path, m] : model.named_modules()) {
    Tensor w;
    if (auto* l = dynamic_cast<nn::Linear*>(m.get())) w = l->weight;
    else if (auto* c = dynamic_cast<nn::Conv2d*>(m.get())) w = c->weight;
    if (!w.defined() || w.dim() < 2 || w.numel() < 16) continue;
    const auto [fan_in, fan_out] = nn::init::calculate_fan_in_and_fan_out(w);
    const double std = summarize(w).std;
    const double def = 1.0 / std::sqrt(3.0 * static_cast<double>(fan_in));
    const double xavier = std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
    const double he = std::sqrt(2.0 / static_cast<double>(fan_in));
    const double lo = std::min({def, xavier, he}) / o.init_std_factor;
    const double hi = std::max({def, xavier, he}) * o.init_std_factor;
    if (std >= lo && std <= hi) continue;
    const bool big = std > hi;
    Finding f;
    f.check = "M9";
    f.severity = Severity::Warning;
    f.title = std::string("the weight of ") + module_label(path, *m) + " is initialised " +
              (big ? "far too large" : "far too small") + ": std " + fmt_num(std) + " vs He " + fmt_num(he) +
              " / Xavier " + fmt_num(xavier);
    f.module = module_label(path, *m);
    f.parameter = (path.empty() ? "" : path + ".") + "weight";
    f.shape = shape_of(w);
    f.evidence = {{"weight std", std, "outside [" + fmt_num(lo) + ", " + fmt_num(hi) + "] flags"},
                  {"He std sqrt(2/fan_in)", he, ""},
                  {"Xavier std sqrt(2/(fan_in+fan_out))", xavier, ""},
                  {"fan_in", static_cast<double>(fan_in), ""}};
    f.cause = big ? "weights drawn without the 1/sqrt(fan_in) scale (e.g. randn): each layer multiplies the "
                    "activations' scale, the logits and gradients explode and saturating units stop learning"
                  : "weights so small that activations and gradients shrink layer after layer (vanishing signal)";
    f.fix = "use the layer's default initialisation, or init::kaiming_normal_ (ReLU nets) / init::xavier_uniform_ "
            "(tanh/sigmoid nets)";
    out.push_back(std::move(f));
  }
  return out;
}

// ---- M10 -----------------------------------------------------------------------------------
std::vector<Finding> check_trainable(nn::Module& model, const optim::Optimizer* optimizer) {
  std::vector<Finding> out;
  const auto params = model.named_parameters();
  int64_t trainable_n = 0, frozen_n = 0, trainable_t = 0, frozen_t = 0;
  std::ostringstream per_module;
  for (auto& [path, m] : model.named_modules()) {
    int64_t tr = 0, fr = 0;
    for (auto& [n, p] : m->named_parameters(false)) (p.requires_grad() ? tr : fr) += p.numel();
    if (tr + fr == 0) continue;
    per_module << "\n  " << module_label(path, *m) << ": " << tr << " trainable, " << fr << " frozen";
  }
  for (auto& [n, p] : params) {
    if (p.requires_grad()) { trainable_n += p.numel(); ++trainable_t; }
    else { frozen_n += p.numel(); ++frozen_t; }
  }
  Finding info;
  info.check = "M10";
  info.severity = Severity::Info;
  info.title = std::to_string(trainable_n) + " trainable and " + std::to_string(frozen_n) + " frozen parameters";
  info.module = "(model)";
  info.evidence = {{"trainable values", static_cast<double>(trainable_n), ""},
                   {"frozen values", static_cast<double>(frozen_n), ""}};
  info.cause = "per module:" + per_module.str();
  out.push_back(info);

  if (optimizer) {
    std::set<const TensorImpl*> held;
    for (const auto& g : optimizer->param_groups())
      for (const Tensor& p : g.params) held.insert(p.impl_ptr().get());
    std::vector<std::string> frozen_held, missing;
    for (auto& [n, p] : params) {
      const bool in = held.count(p.impl_ptr().get()) > 0;
      if (in && !p.requires_grad()) frozen_held.push_back(n);
      if (!in && p.requires_grad()) missing.push_back(n);
    }
    auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + v[i];
      if (v.size() > 8) s += ", ...";
      return s;
    };
    if (!frozen_held.empty()) {
      Finding f;
      f.check = "M10";
      f.severity = Severity::Warning;
      f.title = std::to_string(frozen_held.size()) + " frozen parameters are in the optimizer (" + optimizer->name() +
                "): it expects to train them, but they never get a gradient: " + list(frozen_held);
      f.parameter = frozen_held[0];
      f.evidence = {{"frozen parameters held by the optimizer", static_cast<double>(frozen_held.size()), "> 0 warns"}};
      f.cause = "requires_grad_(false) was applied to layers the optimizer was built to train: often the wrong "
                "module was frozen (the head instead of the backbone)";
      f.fix = "freeze exactly the modules you mean to keep fixed, and build the optimizer from the trainable "
              "parameters only";
      out.push_back(std::move(f));
    }
    if (!missing.empty()) {
      Finding f;
      f.check = "M10";
      f.severity = Severity::Warning;
      f.title = std::to_string(missing.size()) + " trainable parameters are in no optimizer group: they get "
                "gradients but never change: " + list(missing);
      f.parameter = missing[0];
      f.evidence = {{"trainable parameters missing from the optimizer", static_cast<double>(missing.size()),
                     "> 0 warns"}};
      f.cause = "the optimizer was built before these layers existed, or from a sub-module's parameters only";
      f.fix = "build the optimizer from model.parameters() (or add_param_group for layers added later)";
      out.push_back(std::move(f));
    }
  }
  // A frozen output layer while the rest trains.
  if (trainable_t > 0) {
    const auto leaves = leaf_modules(model);
    for (auto it = leaves.rbegin(); it != leaves.rend(); ++it) {
      const auto own = it->second->named_parameters(false);
      if (own.empty()) continue;
      bool all_frozen = true;
      for (auto& [n, p] : own) all_frozen = all_frozen && !p.requires_grad();
      if (all_frozen) {
        Finding f;
        f.check = "M10";
        f.severity = Severity::Warning;
        f.title = "the output layer " + module_label(it->first, *it->second) +
                  " is frozen while earlier layers train";
        f.module = module_label(it->first, *it->second);
        f.evidence = {{"frozen output parameters", static_cast<double>(own.size()), ""}};
        f.cause = "when fine-tuning one freezes the pretrained backbone and trains the new head; this is the "
                  "reverse: the randomly initialised head is fixed";
        f.fix = "freeze the backbone and leave the head trainable";
        out.push_back(std::move(f));
      }
      break;
    }
  }
  return out;
}

// ---- M11 -----------------------------------------------------------------------------------
std::vector<Finding> check_devices_dtypes(nn::Module& model, const Tensor& x) {
  std::vector<Finding> out;
  std::map<std::string, std::vector<std::string>> by_kind;  // "float32 on cpu" -> parameter names
  DType pdt = kFloat32;
  Device pdev = kCPU;
  bool first = true;
  for (auto& [n, p] : model.named_parameters()) {
    by_kind[std::string(dtype_name(p.dtype())) + " on " + p.device().str()].push_back(n);
    if (first) { pdt = p.dtype(); pdev = p.device(); first = false; }
  }
  if (by_kind.size() > 1) {
    Finding f;
    f.check = "M11";
    f.severity = Severity::Warning;
    std::string kinds;
    for (auto& [k, v] : by_kind) kinds += (kinds.empty() ? "" : "; ") + k + ": " + v[0] + (v.size() > 1 ? ", ..." : "");
    f.title = "the model's parameters have mixed dtypes/devices: " + kinds;
    f.parameter = by_kind.begin()->second[0];
    f.evidence = {{"distinct dtype/device combinations", static_cast<double>(by_kind.size()), "> 1 warns"}};
    f.cause = "part of the model was converted (to(kFloat64), cuda()) and part was not";
    f.fix = "convert the whole model at once: model->to(dtype) / model->to(device)";
    out.push_back(std::move(f));
  }
  if (x.defined() && !first) {
    if (x.device() != pdev) {
      Finding f;
      f.check = "M11";
      f.severity = Severity::Error;
      f.title = "the input is on " + x.device().str() + " but the parameters are on " + pdev.str();
      f.shape = shape_of(x);
      f.cause = "the batch was not moved to the model's device";
      f.fix = "move the batch: x = x.to(device) (and the labels)";
      out.push_back(std::move(f));
    }
    if (x.is_floating_point() && x.dtype() != pdt) {
      Finding f;
      f.check = "M11";
      f.severity = Severity::Warning;
      f.title = std::string("the input is ") + dtype_name(x.dtype()) + " but the model's parameters are " +
                dtype_name(pdt) + ": every layer computes in " + dtype_name(promote_types(x.dtype(), pdt));
      f.shape = shape_of(x);
      f.evidence = {{"input bytes per value", static_cast<double>(dtype_size(x.dtype())), ""},
                    {"parameter bytes per value", static_cast<double>(dtype_size(pdt)), ""}};
      f.cause = std::string(x.dtype() == kFloat64 ? "data loaded as float64 (NumPy's default) into a float32 model: "
                                                  "type promotion makes each op compute in float64, twice the "
                                                  "memory, slower arithmetic (float64 GEMM runs at about half the float32 rate) and "
                                                  "outputs that come back float64"
                                                : "data in a lower precision than the model");
      f.fix = std::string("convert the data once, where it is loaded: x.to(gs::") +
              (pdt == kFloat32 ? "kFloat32" : "kFloat64") + ")";
      out.push_back(std::move(f));
    }
  }
  return out;
}

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
  for (Tensor& p : module.parameters()) { orig = p.dtype(); break; }
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
  const int64_t full_limit = 512;  // tensors up to this size are checked element by element
  for (auto& [name, t] : targets) {
    GS_CHECK(t.is_contiguous() && t.dtype() == kFloat64, "gradcheck_module", "internal: ", name, " is ", t.str());
    Tensor g = t.grad();
    const std::vector<double> ga = g.defined() ? g.to_vector<double>() : std::vector<double>(t.numel(), 0.0);
    double* d = t.data_ptr<double>();
    double worst = 0.0, worst_a = 0.0, worst_n = 0.0, max_abs = 0.0;
    int64_t worst_i = -1, failed = 0, checked = 0;
    auto judge = [&](int64_t idx, double a, double n) {
      const double err = std::fabs(a - n);
      const double scale = std::max({std::fabs(a), std::fabs(n), opts.atol});
      const double rel = err / scale;
      max_abs = std::max(max_abs, err);
      ++checked;
      if (err > opts.atol + opts.rtol * std::fabs(n)) ++failed;
      if (rel > worst || worst_i < 0) { worst = rel; worst_i = idx; worst_a = a; worst_n = n; }
    };
    if (t.numel() <= full_limit) {
      for (int64_t i = 0; i < t.numel(); ++i) {
        const double keep = d[i];
        d[i] = keep + opts.eps;
        const double fp = f();
        d[i] = keep - opts.eps;
        const double fm = f();
        d[i] = keep;
        judge(i, ga[static_cast<size_t>(i)], (fp - fm) / (2 * opts.eps));
      }
    } else {
      const int projections = std::max(opts.fast_projections, 2);
      for (int k = 0; k < projections; ++k) {
        std::vector<double> u = randn(t.shape(), kFloat64, &gen).to_vector<double>();
        const std::vector<double> keep(d, d + t.numel());
        double a = 0.0;
        for (size_t i = 0; i < u.size(); ++i) a += ga[i] * u[i];
        for (size_t i = 0; i < u.size(); ++i) d[i] = keep[i] + opts.eps * u[i];
        const double fp = f();
        for (size_t i = 0; i < u.size(); ++i) d[i] = keep[i] - opts.eps * u[i];
        const double fm = f();
        std::memcpy(d, keep.data(), keep.size() * sizeof(double));
        judge(k, a, (fp - fm) / (2 * opts.eps));
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
    fd.cause = "the backward of this layer computes a wrong gradient (a hand-written formula with a missing "
               "transpose, a wrong sign or factor, a reshape where a transpose was meant)";
    fd.fix = "fix the backward formula; derive it for a 2x3 example by hand and compare with gs::debug::gradcheck";
    if (host.moved())
      fd.cause += " (checked in float64 on a CPU copy of the layer, which lives on " + host.device().str() +
                  ": the formula is the same code on every device)";
    out.push_back(std::move(fd));
  }
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

// ---- M14 / M15 / M16 ------------------------------------------------------------------------
ParamSnapshot::ParamSnapshot(nn::Module& model) {
  NoGradGuard ng;
  for (Tensor& p : model.parameters()) saved_.emplace_back(p, p.detach().clone());
  for (Tensor& b : model.buffers()) saved_.emplace_back(b, b.detach().clone());
}

void ParamSnapshot::restore() {
  NoGradGuard ng;
  for (auto& [live, copy] : saved_) {
    if (live.device().is_cpu() && live.shape() == copy.shape() && live.dtype() == copy.dtype() && live.is_contiguous())
      std::memcpy(live.raw_data(), copy.raw_data(), copy.nbytes());
    else
      live.detach().copy_(copy);
    live.zero_grad();
  }
}

namespace {
// Trains a fresh Adam for `steps` over `batches` (cycled); returns the per-step losses.
// With `more`, when the budget is spent more(losses) may grant further steps (0: stop).
std::vector<double> short_run(nn::Module& model, const std::vector<std::pair<Tensor, Tensor>>& batches,
                              const LossFunction& loss, int64_t steps, double lr, bool zero_inputs,
                              double stop_below = -1.0, double* final_acc = nullptr, double stop_accuracy = 1.0,
                              const std::function<int64_t(const std::vector<double>&)>& more = nullptr) {
  std::vector<double> losses;
  std::vector<Tensor> ps = trainable(model);
  if (ps.empty() || batches.empty()) return losses;
  optim::Adam opt(ps, optim::AdamOptions(lr));
  // Train mode with the randomness off: every layer found random in train mode
  // (nn::Dropout or a hand-written one) runs in eval mode; BatchNorm-like layers
  // keep training mode, which is deterministic.
  set_mode_without_randomness(model, true, probe_mode_dependence(model, batches.front().first));
  for (int64_t s = 0; s < steps || (more && s == steps && (steps += more(losses)) > s); ++s) {
    const auto& [x, y] = batches[static_cast<size_t>(s) % batches.size()];
    opt.zero_grad();
    Tensor out = model(zero_inputs ? zeros_like(x) : x);
    Tensor l = loss(out, y);
    l.backward();
    opt.step();
    losses.push_back(l.item<double>());
    if (final_acc && is_classification(out, y)) *final_acc = accuracy_of(out, y);
    if (stop_below > 0 && losses.back() < stop_below && (!final_acc || *final_acc >= stop_accuracy)) break;
    if (!std::isfinite(losses.back())) break;
  }
  return losses;
}

double eval_loss(nn::Module& model, const std::pair<Tensor, Tensor>& b, const LossFunction& loss, bool zero_inputs) {
  NoGradGuard ng;
  model.eval();
  return loss(model(zero_inputs ? zeros_like(b.first) : b.first), b.second).item<double>();
}
}  // namespace

std::vector<Finding> overfit_one_batch(nn::Module& model, const Tensor& x, const Tensor& y, const LossFunction& loss,
                                       const ModelCheckOptions& o) {
  ModeSnapshot modes(model);
  ParamSnapshot snap(model);
  double acc = std::nan("");
  const bool classes = y.dtype() == kInt64 && y.dim() == 1;
  // The adaptive budget: past the base budget, one more window while the last window's mean
  // loss is below the window before's by more than overfit_extend_drop, up to the cap.
  const int64_t base = std::max<int64_t>(o.overfit_steps, 1);
  const int64_t cap = std::max(base, o.overfit_max_steps > 0 ? o.overfit_max_steps : 4 * base);
  const int64_t window = o.overfit_window > 0 ? o.overfit_window : std::max<int64_t>(10, base / 5);
  auto more = [&](const std::vector<double>& l) -> int64_t {
    const int64_t n = static_cast<int64_t>(l.size());
    if (n < 2 * window || n >= cap) return 0;
    double last_w = 0.0, prev_w = 0.0;
    for (int64_t i = n - window; i < n; ++i) last_w += l[static_cast<size_t>(i)];
    for (int64_t i = n - 2 * window; i < n - window; ++i) prev_w += l[static_cast<size_t>(i)];
    if (!std::isfinite(last_w) || !std::isfinite(prev_w) || prev_w <= 0.0) return 0;
    const bool falling_fast = last_w < (1.0 - o.overfit_extend_drop) * prev_w;
    return falling_fast ? std::min(window, cap - n) : 0;
  };
  std::vector<double> losses = short_run(model, {{x, y}}, loss, base, o.overfit_lr, false, o.overfit_loss,
                                         classes ? &acc : nullptr, o.overfit_accuracy, more);
  snap.restore();
  std::vector<Finding> out;
  if (losses.empty()) return out;
  const double first = losses.front(), last = losses.back();
  const double best = *std::min_element(losses.begin(), losses.end());
  const bool ok = last < o.overfit_loss && (!classes || acc >= o.overfit_accuracy);
  const int64_t used = static_cast<int64_t>(losses.size());
  const std::string budget = "base budget " + std::to_string(base) + ", extended by " + std::to_string(window) +
                             " while the loss still falls > " + fmt_num(100 * o.overfit_extend_drop) +
                             "% per window, at most " + std::to_string(cap);
  Finding f;
  f.check = "M14";
  f.module = "(model)";
  f.shape = shape_of(x);
  f.evidence = {{"initial loss", first, ""},
                {"final loss", last, "< " + fmt_num(o.overfit_loss) + " expected"},
                {"best loss", best, ""},
                {"steps used", static_cast<double>(used), budget}};
  if (classes) f.evidence.push_back({"final accuracy", acc, ">= " + fmt_num(o.overfit_accuracy) + " expected"});
  const std::string extended = used > base ? " (base budget " + std::to_string(base) + ", extended while the loss was still falling fast)" : "";
  if (ok) {
    f.severity = Severity::Info;
    f.title = "overfits one batch of " + std::to_string(x.size(0)) + ": loss " + fmt_num(first) + " -> " +
              fmt_num(last) + " in " + std::to_string(used) + " steps" + extended;
  } else {
    f.severity = Severity::Warning;
    f.title = "cannot overfit one batch of " + std::to_string(x.size(0)) + " examples in " + std::to_string(used) +
              " steps (loss " + fmt_num(first) + " -> " + fmt_num(last) + ")" +
              (used >= cap ? " (the cap of the adaptive budget)" : used > base ? extended : "");
    f.cause = std::string(!std::isfinite(last) ? "the loss became non-finite: numerical instability or a learning "
                                                 "rate too high. "
                          : last > first ? "the loss went up: the loss is ill-defined (a flipped sign), the "
                                           "learning rate is too high, or the computation is unstable. "
                                         : "") +
              "A model that cannot memorise a handful of examples has a bug: inputs and labels not aligned, "
              "gradients that do not reach the layers (detach, frozen, dead units), an output activation that "
              "limits the logits, or too little capacity";
    f.fix = "run the gradient-flow (M5), final-activation (M3) and alignment (D4) checks; try a higher learning rate "
            "for this test only";
  }
  return {f};
}

std::vector<Finding> input_independent_baseline(nn::Module& model, const std::vector<std::pair<Tensor, Tensor>>& train,
                                                const std::pair<Tensor, Tensor>& held_out, const LossFunction& loss,
                                                const ModelCheckOptions& o) {
  ModeSnapshot modes(model);
  ParamSnapshot snap(model);
  short_run(model, train, loss, o.baseline_steps, o.baseline_lr, false);
  const double real = eval_loss(model, held_out, loss, false);
  snap.restore();
  short_run(model, train, loss, o.baseline_steps, o.baseline_lr, true);
  const double zero = eval_loss(model, held_out, loss, true);
  snap.restore();
  Finding f;
  f.check = "M15";
  f.module = "(model)";
  f.evidence = {{"held-out loss, real inputs", real, ""},
                {"held-out loss, zeroed inputs", zero,
                 "real must be lower by " + fmt_num(100 * o.baseline_margin) + "%"}};
  if (std::isfinite(real) && real < zero * (1.0 - o.baseline_margin)) {
    f.severity = Severity::Info;
    f.title = "the model uses its inputs: held-out loss " + fmt_num(real) + " with real inputs vs " + fmt_num(zero) +
              " with zeroed inputs";
  } else {
    f.severity = Severity::Warning;
    f.title = "training on zeroed inputs does as well as on the real ones: the model learns nothing from its inputs";
    f.cause = "the inputs carry no usable signal for the labels: inputs and labels misaligned (shuffled "
              "separately), a bug that drops the input (multiplied by 0, detached), or labels that do not depend "
              "on the inputs";
    f.fix = "check the alignment of (x, y) pairs (D4) and the data pipeline; print a few inputs with their labels";
  }
  return {f};
}

std::vector<Finding> capacity_check(const std::function<nn::ModulePtr(int64_t width)>& make, int64_t small_width,
                                    int64_t large_width, const std::vector<std::pair<Tensor, Tensor>>& train,
                                    const LossFunction& loss, const ModelCheckOptions& o) {
  auto final_loss = [&](int64_t width) {
    nn::ModulePtr m = make(width);
    short_run(*m, train, loss, o.baseline_steps, o.baseline_lr, false);
    double s = 0.0;
    for (const auto& b : train) s += eval_loss(*m, b, loss, false);
    return s / static_cast<double>(std::max<size_t>(train.size(), 1));
  };
  const double small = final_loss(small_width), large = final_loss(large_width);
  Finding f;
  f.check = "M16";
  f.module = "(model)";
  f.evidence = {{"training loss, width " + std::to_string(small_width), small, ""},
                {"training loss, width " + std::to_string(large_width), large, "must be lower"}};
  if (std::isfinite(large) && large < small * (1.0 - o.capacity_margin)) {
    f.severity = Severity::Info;
    f.title = "more capacity fits better: training loss " + fmt_num(small) + " (width " +
              std::to_string(small_width) + ") -> " + fmt_num(large) + " (width " + std::to_string(large_width) + ")";
  } else {
    f.severity = Severity::Warning;
    f.title = "a larger model does not reach a lower training loss";
    f.cause = "capacity is not what limits training: an optimisation problem (learning rate, initialisation), a "
              "bottleneck elsewhere in the model, or inputs that carry no signal";
    f.fix = "fix optimisation first (overfit one batch, M14; learning-rate diagnosis, O6), then grow the model";
  }
  return {f};
}

// ---- M17 -----------------------------------------------------------------------------------
std::vector<Finding> check_batchnorm_stats(nn::Module& model) {
  std::vector<Finding> out;
  for (auto& [path, m] : model.named_modules()) {
    auto* bn = dynamic_cast<nn::BatchNormBase*>(m.get());
    if (!bn) continue;
    const bool none = !bn->track_running_stats();
    const int64_t tracked = none ? 0 : bn->num_batches_tracked.item<int64_t>();
    if (!none && tracked > 0) continue;
    Finding f;
    f.check = "M17";
    f.severity = Severity::Warning;
    f.module = module_label(path, *m);
    f.title = none ? "BatchNorm without running statistics: in eval mode it normalises with each batch's own "
                     "statistics"
                   : "BatchNorm's running statistics were never updated (num_batches_tracked = 0) but the model "
                     "is being evaluated";
    f.evidence = {{"num_batches_tracked", static_cast<double>(tracked), "0 at eval flags"}};
    if (!none) {
      const TensorSummary rm = summarize(bn->running_mean), rv = summarize(bn->running_var);
      f.evidence.push_back({"running_mean mean", rm.mean, ""});
      f.evidence.push_back({"running_var mean", rv.mean, ""});
    }
    f.cause = none ? "track_running_stats=false: a prediction depends on the other examples in the batch and on "
                     "its size; a single example cannot be evaluated"
                   : "the layer never ran in training mode with statistics tracking (trained in eval mode, or a "
                     "forward that skips the update), so eval uses mean 0 / var 1 instead of the data's";
    f.fix = "keep track_running_stats=true and train in train mode so the running statistics follow the data";
    out.push_back(std::move(f));
  }
  return out;
}

// ---- redundant biases (O1 info) --------------------------------------------------------------
std::vector<Finding> find_redundant_biases(nn::Module& model, const Tensor& x, const Tensor& y,
                                           const LossFunction& loss, double vanishing_grad_norm) {
  std::vector<Finding> out;
  // Candidates: 1-D trainable parameters whose gradient is there, finite and ~0.
  std::vector<std::pair<std::string, Tensor>> cands;
  for (auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad() || p.dim() != 1 || p.numel() == 0) continue;
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    NoGradGuard ng;
    const double norm = std::sqrt(sum(square(g.detach().to(kFloat64))).item<double>());
    if (std::isfinite(norm) && norm < vanishing_grad_norm) cands.emplace_back(name, p);
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
    HookSet hooks;
    hooks.post(it->second, [&](nn::Module&, const Tensor& in, const Tensor& o) {
      // In place on the module's own result (never on its input, should the output alias it).
      if (noise.defined() && o.defined() && o.shape() == noise.shape() && (!in.defined() || o.raw_data() != in.raw_data()))
        const_cast<Tensor&>(o).add_(noise.to(o.dtype()));
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
    if (cdim < 0) continue;
    const Tensor saved = p.detach().clone();
    std::vector<double> d(static_cast<size_t>(C));
    for (size_t k = 0; k < d.size(); ++k) d[k] = (k % 2 ? -1.0 : 1.0) * scale * (1.0 + 0.25 * static_cast<double>(k % 3));
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
    for (size_t k = 0; k < nz.size(); ++k)
      nz[k] = scale * (static_cast<double>((k * 2654435761u >> 7) % 4) - 1.5) / 1.5;
    noise = tensor(nz, out0.shape(), kFloat64).to(out0.device());
    const double noisy = loss_now();
    noise = Tensor();
    if (!(std::fabs(noisy - base) > 1e-3 * std::max(std::fabs(base), 1e-3))) continue;
    Finding f;
    f.check = "O1";
    f.severity = Severity::Info;
    const std::string label = it != modules.end() ? module_label(owner, *it->second) : owner;
    f.title = "redundant bias: " + name + " cannot change the loss, so its gradient is zero by construction";
    f.module = label;
    f.parameter = name;
    f.shape = shape_of(p);
    f.evidence = {{"gradient norm", std::sqrt(sum(square(p.grad().detach().to(kFloat64))).item<double>()),
                   "< " + fmt_num(vanishing_grad_norm) + " made it a candidate"},
                  {"loss", base, ""},
                  {"loss with the bias shifted by up to " + fmt_num(1.5 * scale), shifted,
                   "unchanged (relative 1e-4) means redundant"},
                  {"loss with noise of that size on the module's output", noisy,
                   "must change: the output itself is used"}};
    f.cause = "what comes after " + (owner.empty() ? std::string("this module") : "module " + label) +
              " removes any per-channel constant from its output while still using the output: a normalisation "
              "that subtracts the per-channel mean (BatchNorm right after a Linear or a Conv). Adding any constant "
              "changes nothing, so the bias has no effect: harmless for training, but its parameters are wasted "
              "(and weight decay still shrinks them). With no normalisation after it, look for a softmax or a mean "
              "taken over the batch dimension";
    f.fix = "build that layer without a bias (bias=false: nn::Linear(in, out, false), Conv2dOptions().bias(false)); "
            "nothing else needs to change";
    out.push_back(std::move(f));
  }
  return out;
}

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
