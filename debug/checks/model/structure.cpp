// M1 shape trace, M3 final activation and M5 gradient flow (see model_checks.h).
#include "debug/checks/model/model_checks.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <tuple>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/graph_trace.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/hooks.h"
#include "debug/checks/model/behaviour.h"
#include "debug/checks/model/model_util.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/activation.h"
#include "nn/checkpoint.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "optim/adam.h"

namespace gradsleuth::debug {

using namespace model_detail;

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
  f.title =
      "model summary: " + std::to_string(rows.size()) + " modules, " + std::to_string(total_parameters) + " parameters";
  f.module = "(model)";
  f.shape = rows.empty() ? "" : rows.front().output_shape;
  f.evidence = {{"parameters", static_cast<double>(total_parameters), ""},
                {"trainable parameters", static_cast<double>(trainable_parameters), ""}};
  f.cause = "\n" + str();
  return f;
}

// ---- M3 ------------------------------------------------------------------------------------
namespace {
// A regression's targets against a final activation's range: their least and largest value, and
// whether every one is 0 or 1 (labels, not a bounded quantity).
struct TargetRange {
  bool known = false, binary = false;
  double lo = 0, hi = 0;
};
TargetRange regression_targets(const Tensor& target, const std::string& loss_type) {
  TargetRange t;
  if (!target.defined() || !target.is_floating_point() || target.numel() == 0 || loss_type == "CrossEntropyLoss" ||
      loss_type == "NLLLoss" || loss_type == "BCEWithLogitsLoss")
    return t;
  NoGradGuard ng;
  const Tensor v = target.detach().to(kCPU).to(kFloat64);
  t.lo = amin(v).item<double>();
  t.hi = amax(v).item<double>();
  if (!std::isfinite(t.lo) || !std::isfinite(t.hi)) return t;
  t.binary = logical_and(ne(v, 0.0), ne(v, 1.0)).to(kFloat64).sum().item<double>() == 0.0;
  t.known = true;
  return t;
}

// M3 over the leaf modules in the order given (the last one judged first).
std::vector<Finding> final_activation(const std::vector<std::pair<std::string, nn::ModulePtr>>& leaves,
                                      const Tensor& logits, const ModelCheckOptions& o, const std::string& loss_type,
                                      const Tensor& target) {
  std::vector<Finding> out;
  const TargetRange range = regression_targets(target, loss_type);
  // The last module that is not a (log-)softmax head.
  for (auto it = leaves.rbegin(); it != leaves.rend(); ++it) {
    const std::string& type = it->second->type_name();
    if (type == "LogSoftmax" || type == "Softmax" || type == "Dropout" || type == "Identity" || type == "Flatten")
      continue;
    if (type == "Sigmoid" && loss_type == "BCELoss") break;  // the probabilities BCELoss expects
    if ((type == "ReLU" || type == "Sigmoid") && range.known) {
      // A regression: its targets decide whether the activation bounds it on purpose.
      const double top = type == "Sigmoid" ? 1.0 : std::numeric_limits<double>::infinity();
      if (range.lo >= 0.0 && range.hi <= top && !(type == "Sigmoid" && range.binary)) break;
      if (range.lo < 0.0 || range.hi > top) {
        Finding f;
        f.check = "M3";
        f.severity = Severity::Warning;
        f.kind = Kind::OutputOutOfRange;
        f.module = module_label(it->first, *it->second);
        f.title = "the model's last layer is a " + type + ": its outputs lie in " +
                  (type == "Sigmoid" ? "(0, 1)" : "[0, inf)") + ", but the targets run from " + fmt_num(range.lo) +
                  " to " + fmt_num(range.hi);
        f.evidence = {{"least target", range.lo, type == "Sigmoid" ? "< 0 or" : "< 0 warns"},
                      {"largest target", range.hi, type == "Sigmoid" ? "> 1 warns" : ""}};
        f.cause =
            "an activation after the final layer bounds the outputs, and part of the targets lies outside "
            "that bound: the model cannot reach them, and the loss keeps a floor";
        f.fix = type == "Sigmoid" ? "remove the Sigmoid, or scale the targets into [0, 1] (and the predictions back)"
                                  : "remove the ReLU after the last Linear, or shift the targets to be non-negative";
        out.push_back(std::move(f));
        break;
      }
    }
    if (type == "ReLU" || type == "Sigmoid") {
      Finding f;
      f.check = "M3";
      f.severity = Severity::Warning;
      f.title = "the model's last layer is a " + type + ": its outputs cannot be negative";
      f.module = module_label(it->first, *it->second);
      f.cause =
          "an activation after the final layer limits the logits' range: a class can never get a negative "
          "score, so cross-entropy cannot push wrong classes down properly";
      f.fix = "remove the " + type +
              " after the last Linear: cross-entropy expects raw logits (if the outputs are "
              "meant to be non-negative, e.g. a regression of counts, ignore this)";
      out.push_back(std::move(f));
    }
    break;
  }
  if (!logits.defined() || logits.dim() != 2 || logits.size(0) < o.min_rows_final_activation || logits.size(1) < 2 ||
      !logits.is_floating_point())
    return out;
  // A loss of the user's own over class indices whose outputs are far wider than the labels reach: an
  // embedding the loss scores itself (a prototypical network's distances), not logits.
  if (!loss_type::library(loss_type) && target.defined() && target.dtype() == kInt64 && target.dim() == 1 &&
      target.numel() > 0) {
    NoGradGuard ng;
    if (loss_type::wider_than_labels(logits, target)) return out;
  }
  NoGradGuard ng;
  const TensorSummary s = summarize(logits);
  // A ReLU's signature: no negative value, and many exact zeros (a linear head
  // whose outputs all happen to be positive has no zeros).
  if (!s.all_finite() || s.min < 0.0 || s.zero_fraction < o.min_zero_fraction_final_activation) return out;
  // ... that fall on different logits for different examples: a ReLU clips where each example's
  // score is negative. Every row the same (all zeros included) is an output that ignores its input,
  // a layer initialised or collapsed to zero (M25, M26), not a clipped one.
  const Tensor l64 = logits.detach().to(kFloat64);
  if (amax(abs(l64 - l64.select(0, 0))).item<double>() == 0.0) return out;
  // ... and within a row: a ReLU zeroes some classes of an example and keeps others. Rows each all zero or
  // all positive (every class scored alike: weights initialised to one constant, M27) are no
  // clipped logits.
  const Tensor zero = eq(l64, 0.0).to(kFloat64);
  const Tensor mixed = logical_and(gt(amax(zero, {1}), 0.0), lt(amin(zero, {1}), 1.0));
  if (!(sum(mixed.to(kFloat64)).item<double>() > 0.0)) return out;
  const double row_sum_err = amax(abs(sum(l64, {1}) - 1.0)).item<double>();
  if (row_sum_err < 1e-3) return out;  // probabilities: L2's double softmax
  Finding f;
  f.check = "M3";
  f.severity = Severity::Warning;
  f.title = "every logit of the batch is >= 0 and many are exactly 0: the outputs look like they passed a ReLU";
  f.module = out.empty() ? "(model output)" : out[0].module;
  f.shape = shape_of(logits);
  f.evidence = {{"min logit", s.min, "< 0 expected for raw logits"}, {"fraction exactly 0", s.zero_fraction, ""}};
  f.cause =
      "an activation after the final layer (ReLU clips negative logits to 0; sigmoid squeezes them into "
      "(0, 1)): cross-entropy cannot give a class a negative score";
  f.fix = "end the model with the last Linear layer and feed its raw logits to the loss";
  out.push_back(std::move(f));
  return out;
}

}  // namespace

std::vector<Finding> check_final_activation(nn::Module& model, const Tensor& logits, const ModelCheckOptions& o,
                                            const std::string& loss_type, const Tensor& target, const Tensor& sample) {
  return final_activation(leaves_by_last_call(model, sample), logits, o, loss_type, target);
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
    f.cause =
        "the graph from this parameter to the loss is cut: a detach() (or .data) inside the model, a layer "
        "that is never called in forward, or every unit after it dead";
    f.fix =
        "remove the detach() between this layer and the loss, call the layer in forward(), or freeze it on "
        "purpose with requires_grad_(false)";
    out.push_back(std::move(f));
  }
  return out;
}

// ---- M3 during training (the monitor's run check) -----------------------------------------------
namespace {
// By structure once, at the first training loss; by values on the sampled steps whose logits
// have no negative value (only such a batch can show it).
class FinalActivationRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "M3"; }
  uint32_t events() const override { return RunEvent::Forward | RunEvent::LossInput | RunEvent::Finish; }
  // The leaf modules in the order of their last call, from a probe forward of the first training batch run
  // before the step's own forward begins (paused: no training statistics; and before the step's graph, whose
  // saved tensors the probe's restored buffers would otherwise change).
  void forward(RunContext& c, const Tensor& x) override {
    if (ordered_ || !GradMode::is_enabled() || !x.defined()) return;
    ordered_ = true;
    c.pause(true);
    leaves_ = leaves_by_last_call(c.model, x);
    c.pause(false);
  }
  void loss_input(RunContext& c, nn::Loss& l, const Tensor& input, const Tensor& target) override {
    if (!structure_checked_) {
      structure_checked_ = true;
      const std::vector<Finding> found =
          final_activation(ordered_ ? leaves_ : leaf_modules(c.model), Tensor(), {}, l.type_name(), target);
      by_structure_ = !found.empty();
      c.add_all(found);
      c.note_ran("M3");
    }
    // A regression with one output per row: the least output over the sampled steps, and once, where the loss
    // is lowest for the rows of a batch (probe_loss_optimum).
    if (c.sampled() && input.defined() && input.is_floating_point() && input.numel() == input.size(0)) {
      ++judged_;
      low_ = std::min(low_, summarize(input).min);
      if (!optimum_.rows && input.size(0) >= 16 && target.defined() && target.sizes() == input.sizes()) {
        c.pause(true);
        optimum_ = probe_loss_optimum([&l](const Tensor& a, const Tensor& b) { return l(a, b); }, input, target);
        c.pause(false);
      }
    }
    if (!c.sampled() || !(loss_type::cross_entropy(l) || loss_type::takes_class_indices(l, input, target))) return;
    const TensorSummary logits = summarize(input);
    if (logits.finite > 0 && logits.min >= 0.0) c.add_all(check_final_activation(c.model, input));
  }
  // Outputs never negative on 3 sampled steps or more, while 5% of a batch's rows (2 at least) have their loss
  // lowest below 0: the outputs cannot reach them (unless structure said it: a module that bounds them).
  void finish(RunContext& c) override {
    const LossOptimum& p = optimum_;
    const int64_t needed = std::max<int64_t>(2, static_cast<int64_t>(std::ceil(0.05 * static_cast<double>(p.rows))));
    if (by_structure_ || judged_ < 3 || !(low_ >= 0.0) || p.rows < 16 || p.below_zero < needed) return;
    Finding f =
        detail::make("M3", Severity::Warning,
                     "the model's outputs were never negative on " + std::to_string(judged_) +
                         " sampled steps, but for " + std::to_string(p.below_zero) + " of " + std::to_string(p.rows) +
                         " targets the loss is lowest at a negative output: the model cannot reach them");
    f.kind = Kind::OutputOutOfRange;
    f.evidence = {{"least output over the sampled steps", low_, ">= 0: bounded below at 0"},
                  {"rows whose loss is lower at a negative output", static_cast<double>(p.below_zero), ">= 5% warns"},
                  {"rows probed", static_cast<double>(p.rows), ""},
                  {"the first such target", p.target, ""},
                  {"its loss at output 0", p.loss_at_zero, ""},
                  {"at " + fmt_num(p.output), p.loss_there, "lower"}};
    f.cause =
        "a final activation that keeps the outputs non-negative (softplus, exp, ReLU) before a loss that "
        "reads its input on another scale: one that takes the log of a rate (a Poisson loss with log_input) "
        "wants log(0) = -inf for a count of 0, a squared error every negative target. The output is then read "
        "as a rate the loss trained as a log-rate, or the negative targets stay out of reach";
    f.fix =
        "match the output to the loss: the raw output into a loss that takes the log (exp(output) is the rate), "
        "or the positive activation into a loss told its input is the rate (log_input false)";
    c.add(std::move(f));
  }

 private:
  bool structure_checked_ = false, ordered_ = false, by_structure_ = false;
  int64_t judged_ = 0;
  double low_ = std::numeric_limits<double>::infinity();
  LossOptimum optimum_;
  std::vector<std::pair<std::string, nn::ModulePtr>> leaves_;
};
}  // namespace

std::unique_ptr<RunCheck> make_final_activation_run_check(const MonitorOptions&) {
  return std::make_unique<FinalActivationRunCheck>();
}

void revise_parameter_unreached(Report& gate, const TrainingHistory& h) {
  soften_reached_in_training(gate, h, "M5", Kind::ParameterUnreached);
  soften_zero_at_gate(gate, h, "M5", Kind::GradientAllZero, 0.0);
  // An output the gate's loss left unread that the run's loss reads (a KL term weighted 0 at the start of
  // its annealing): alive in training.
  soften_zero_at_gate(gate, h, "M5", Kind::OutputUnread, 0.0);
}

// ---- M5's findings on tensors no one registered (gathered by unregistered_leaf.cpp's run check) -------
Finding unregistered_tensor_finding(const std::string& name, const Shape& shape, int64_t steps, int64_t min_steps,
                                    double grad_norm) {
  const std::string what =
      "a tensor" + (name.empty() ? std::string() : " '" + name + "'") + " of shape " + shape_str(shape);
  Finding f = detail::make("M5", Severity::Warning,
                           what +
                               " that the model's forward reads requires grad and gets a gradient, but neither "
                               "model.parameters() nor the optimizer holds it: its values never changed in " +
                               std::to_string(steps) + " steps");
  f.kind = Kind::ParameterUnregistered;
  f.shape = shape_str(shape);
  f.evidence = {
      {"optimizer steps since the first training loss", static_cast<double>(steps), ">= " + std::to_string(min_steps)},
      {"values that changed over the run (of up to 256 read)", 0.0, "0 warns"},
      {"norm of the gradient it holds at the end", grad_norm, "> 0: it takes part in backward"}};
  f.cause =
      "a layer or tensor the forward uses that was never registered (a module member not passed to "
      "register_module or register_parameter): parameters(), the optimizer, zero_grad() and checkpoints "
      "all miss it, so it keeps its initial values";
  f.fix =
      "register it in the constructor (member = register_module(\"name\", std::make_shared<...>(...))), build "
      "the optimizer from model.parameters() after that; if it is meant to stay fixed, requires_grad_(false)";
  return f;
}

Finding built_in_forward_finding(const std::vector<std::pair<std::string, Shape>>& tensors) {
  std::string what;
  for (const auto& [name, shape] : tensors)
    what += (what.empty() ? "" : ", ") + (name.empty() ? std::string() : "'" + name + "' ") + shape_str(shape);
  Finding f = detail::make("M5", Severity::Warning,
                           "tensors that require grad (" + what +
                               ") are created anew inside the model's forward at every step, with new values: a "
                               "layer built in forward(), never registered and never trained");
  f.kind = Kind::ParameterUnregistered;
  if (!tensors.empty()) f.shape = shape_str(tensors.front().second);
  f.evidence = {{"tensors of the first step's graph made anew at a later step", static_cast<double>(tensors.size()),
                 ">= 1 warns"}};
  f.cause =
      "a layer constructed inside forward() (built \"lazily\" where an input size is first known): each call "
      "draws new random weights that neither parameters() nor the optimizer holds, so it never learns, and the "
      "model's output changes from call to call even in eval mode";
  f.fix =
      "construct the layer once, in the constructor, with register_module (pass the size it needs to the "
      "constructor), then build the optimizer from model.parameters()";
  return f;
}

// ---- leaves of a graph that no one holds ---------------------------------------------------------
namespace model_detail {
// The leaves that require grad reached from `root` (not past the nodes in `stop`) and not in `held`, in
// the walk's order: the tensors a forward read that neither the model nor the optimizer holds.
std::vector<Tensor> leaves_outside(const Node* root, const std::set<const TensorImpl*>& held,
                                   std::set<const Node*> stop) {
  std::vector<Tensor> out;
  stop.insert(root);
  std::vector<const Node*> todo{root};
  while (!todo.empty()) {
    const Node* n = todo.back();
    todo.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.fn || !stop.insert(e.fn.get()).second) continue;
      const Tensor leaf = autograd::accumulated_leaf(*e.fn);
      if (!leaf.defined())
        todo.push_back(e.fn.get());
      else if (!held.count(leaf.impl_ptr().get()))
        out.push_back(leaf);
    }
  }
  return out;
}
}  // namespace model_detail

// ---- parameters replaced by assignment -------------------------------------------------------
void explain_replaced_parameters(nn::Module& model, const Tensor& loss, const optim::Optimizer* optimizer,
                                 std::vector<Finding>& found) {
  const auto unreached = [](const Finding& f) { return f.fires() && f.is("M5", Kind::ParameterUnreached); };
  if (std::none_of(found.begin(), found.end(), unreached) || !loss.defined() || !loss.grad_fn()) return;
  // Every leaf the loss reaches that neither the model nor the optimizer holds, with its shape.
  std::vector<std::pair<std::string, Tensor>> params = model.named_parameters();
  std::set<const TensorImpl*> held;
  for (const auto& [name, p] : params) held.insert(p.impl_ptr().get());
  if (optimizer) held.merge(held_parameters(*optimizer));
  std::vector<Shape> strangers;
  for (const Tensor& leaf : leaves_outside(loss.grad_fn().get(), held)) strangers.push_back(leaf.shape());
  for (Finding& f : found) {
    if (!unreached(f)) continue;
    const std::string& name = f.parameter;
    const auto it = std::find_if(params.begin(), params.end(), [&](const auto& np) { return np.first == name; });
    if (it == params.end()) continue;
    const auto match = std::find(strangers.begin(), strangers.end(), it->second.shape());
    if (match == strangers.end()) continue;
    strangers.erase(match);
    f.kind = Kind::ParameterReplaced;
    f.title = "parameter '" + name + "' was replaced: the forward uses another tensor of its shape " +
              shape_str(it->second.shape()) +
              " that is no parameter of the model, and the registered one gets no gradient";
    f.evidence.push_back({"leaves of the loss's graph outside the model and the optimizer, of this shape", 1.0,
                          "beside a parameter of that shape without a gradient warns"});
    f.cause =
        "a module member assigned a new tensor after register_parameter (a weight re-initialised or zeroed by "
        "assignment, often after the optimizer was built): the forward reads the new tensor, while parameters(), "
        "the optimizer and checkpoints hold the old one; the new tensor is never updated";
    f.fix =
        "change the registered tensor in place instead of assigning a new one: { NoGradGuard g; "
        "layer->weight.copy_(t); } or an nn::init function on layer->weight";
  }
}

// ---- output columns the loss does not read ----------------------------------------------------
namespace {

// "4, 5" for columns or units, the first 8 and ", ..." after them.
std::string index_list(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > 8) s += ", ...";
  return s;
}

}  // namespace

void explain_unread_outputs(nn::Module& model, const Tensor& x, const Tensor& output_grad,
                            std::vector<Finding>& found) {
  const auto all_zero = [](const Finding& f) { return f.fires() && f.is("M5", Kind::GradientAllZero); };
  if (std::none_of(found.begin(), found.end(), all_zero) || !output_grad.defined() || output_grad.dim() < 2 ||
      output_grad.size(1) < 2 || !x.defined())
    return;
  // The output's columns (dim 1) whose gradient is exactly zero on every row, beside columns that have one.
  std::vector<int64_t> unread;
  {
    NoGradGuard ng;
    const Tensor g = abs(output_grad.detach().to(kFloat64)).transpose(0, 1).reshape({output_grad.size(1), -1});
    const std::vector<double> largest = amax(g, {1}).to_vector<double>();
    for (size_t c = 0; c < largest.size(); ++c)
      if (largest[c] == 0.0) unread.push_back(static_cast<int64_t>(c));
    if (unread.empty() || unread.size() == largest.size()) return;
  }
  // Which of the parameters without a gradient feed those columns: the gradient of a fixed projection of
  // the unread columns alone, in one more forward.
  std::vector<std::pair<std::string, Tensor>> params;
  for (auto& [name, p] : model.named_parameters())
    for (const Finding& f : found)
      if (all_zero(f) && f.parameter == name && p.requires_grad()) params.emplace_back(name, p);
  if (params.empty()) return;
  std::set<std::string> feeds;
  try {
    QuietProbe quiet(model);
    EnableGradGuard eg;
    const Tensor y = model(x);
    if (!y.defined() || !y.requires_grad() || y.dim() != output_grad.dim() || y.size(1) != output_grad.size(1)) return;
    const Tensor cols = index_select(y, 1, tensor(unread, {static_cast<int64_t>(unread.size())}));
    const Tensor s = project_output(cols);
    std::vector<Tensor> leaves;
    for (const auto& np : params) leaves.push_back(np.second);
    const tensor_list g = autograd::grad({s}, leaves, {}, false, false, true);
    NoGradGuard ng;
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i].defined() && amax(abs(g[i].detach())).item<double>() > 0.0) feeds.insert(params[i].first);
  } catch (const std::exception&) {
    return;
  }
  const std::string columns = index_list(unread);
  for (Finding& f : found) {
    if (!all_zero(f) || !feeds.count(f.parameter)) continue;
    f.kind = Kind::OutputUnread;
    f.title = "trainable parameter '" + f.parameter + "' feeds only output column" + (unread.size() > 1 ? "s " : " ") +
              columns + " of the model, which the loss does not read: its gradient is zero on every row";
    f.evidence.push_back({"output columns whose gradient is zero on every row of the batch",
                          static_cast<double>(unread.size()), "beside columns the loss reads, warns"});
    f.evidence.push_back({"output columns", static_cast<double>(output_grad.size(1)), ""});
    f.cause =
        "the loss does not read part of the model's output: a term that reads the wrong column or head (a copy of "
        "the line above, out[:, 0] for out[:, 1]), or an output the loss leaves out. The layers that feed only "
        "those columns never train";
    f.fix =
        "check which output column each term of the loss reads; every output the model computes for training "
        "should reach the loss";
  }
}

// ---- a layer's units that nothing downstream reads ----------------------------------------------
namespace {
// Whether a probe forward's output is exactly the unprobed one (the same shape, every value equal).
bool same_output(const Tensor& o, const Tensor& base) {
  return o.shape() == base.shape() && amax(abs(o.to(kFloat64) - base.to(kFloat64))).item<double>() == 0.0;
}
}  // namespace

std::vector<Finding> find_unread_units(nn::Module& model, const Tensor& x) {
  std::vector<Finding> out;
  if (!x.defined() || x.dim() < 1 || x.size(0) < 8) return out;
  // Linear and Conv2d layers whose weight rows (output units) got an exactly zero gradient, weights and
  // bias, beside rows that got one: nothing downstream read those units on any row of the batch.
  struct Layer {
    std::string label;
    nn::ModulePtr module;
    bool channels = false;  // Conv2d: the units are dim 1 of the output; Linear: its last dim
    std::vector<int64_t> zero;
    int64_t units = 0;
  };
  std::vector<Layer> layers;
  std::set<const nn::Module*> seen;  // a layer called under two paths is judged once
  for (auto& [path, m] : model.named_modules()) {
    Tensor w, b;
    bool channels = false;
    if (auto* l = dynamic_cast<nn::Linear*>(m.get())) {
      w = l->weight;
      b = l->bias;
    } else if (auto* c = dynamic_cast<nn::Conv2d*>(m.get())) {
      w = c->weight;
      b = c->bias;
      channels = true;
    } else {
      continue;
    }
    if (!w.defined() || !w.requires_grad() || !w.grad().defined() || w.dim() < 2 || w.size(0) < 2 ||
        !seen.insert(m.get()).second)
      continue;
    NoGradGuard ng;
    const std::vector<double> rows =
        amax(abs(w.grad().detach().to(kFloat64).reshape({w.size(0), -1})), {1}).to_vector<double>();
    std::vector<double> biases;
    if (b.defined() && b.requires_grad() && b.grad().defined())
      biases = abs(b.grad().detach().to(kFloat64)).to_vector<double>();
    Layer l{module_label(path, *m), m, channels, {}, static_cast<int64_t>(rows.size())};
    for (size_t k = 0; k < rows.size(); ++k)
      if (rows[k] == 0.0 && (biases.size() != rows.size() || biases[k] == 0.0))
        l.zero.push_back(static_cast<int64_t>(k));
    if (l.zero.empty() || l.zero.size() == rows.size()) continue;  // all of them: a cut graph or a zero layer after
    layers.push_back(std::move(l));
  }
  if (layers.empty()) return out;
  std::vector<std::pair<const Layer*, std::vector<int64_t>>> found_units;
  bool masked = false;  // the forward multiplies by a constant 0/1 mask: units it cuts off are by design
  // A unit that a ReLU after it silenced on every row gets no gradient either. The test is causal: the
  // unit's output raised far above its values (which wakes a dead ReLU) in one more forward, in eval mode;
  // a unit that nothing reads leaves the model's output exactly as it was.
  try {
    QuietProbe quiet(model);
    ModeSnapshot modes(model);
    model.eval();
    NoGradGuard ng;
    const Tensor base = model_detail::forward_masked(model, x, masked).detach().clone();
    if (!base.defined() || !base.is_floating_point()) return out;
    const auto moved = [&](const Layer& l, const std::vector<int64_t>& units) {
      HookSet hooks;
      hooks.post(l.module, [&l, &units](nn::Module&, const Tensor&, const Tensor& y) {
        if (!y.defined() || y.dim() < 2) return;
        Tensor t = y;
        const int64_t dim = l.channels ? 1 : y.dim() - 1;
        const double c = 10.0 * (1.0 + amax(abs(y.detach())).item<double>());
        for (int64_t k : units) t.narrow(dim, k, 1).add_(c);
      });
      return !same_output(model(x).detach(), base);
    };
    int64_t forwards = 0;  // one per layer, then one per unit: at most 48 in all
    for (const Layer& l : layers) {
      if (++forwards > 48) break;
      std::vector<int64_t> unread;
      if (!moved(l, l.zero)) {
        unread = l.zero;
      } else {
        for (size_t i = 0; i < l.zero.size() && i < 16 && forwards < 48; ++i, ++forwards)
          if (!moved(l, {l.zero[i]})) unread.push_back(l.zero[i]);
      }
      if (!unread.empty()) found_units.emplace_back(&l, std::move(unread));
    }
  } catch (const std::exception&) {
    return out;
  }
  for (const auto& [lp, unread] : found_units) {
    const Layer& l = *lp;
    const std::string list = index_list(unread);
    Finding f;
    f.check = "M5";
    f.severity = masked ? Severity::Info : Severity::Warning;
    f.kind = Kind::UnitsUnread;
    f.module = l.label;
    f.title =
        std::string(l.channels ? "channel" : "unit") + (unread.size() > 1 ? "s " : " ") + list + " of " + l.label +
        " reach nothing: their weights got no gradient, and raising them moves no output of the model" +
        (masked ? " (the forward multiplies by a constant 0/1 mask, as a coupling layer does: masked by design?)" : "");
    f.evidence = {{"units whose weights and bias got a zero gradient, whose rise moves no output",
                   static_cast<double>(unread.size()), "any, beside units that got one, warns"},
                  {"units of the layer", static_cast<double>(l.units), ""},
                  {"rows of the batch", static_cast<double>(x.size(0)), ""}};
    f.cause =
        "the forward computes these units and nothing uses them: a slice or index that reads the wrong columns of "
        "the layer's output (narrow(1, 0, 2) where narrow(1, K, 2) was meant, a copy of the line above; for the "
        "model's last layer, a loss term that reads the wrong column), or a head "
        "that is computed and dropped. Their weights never train, and the part of the model meant to read them "
        "reads other units";
    f.fix =
        "check every narrow/index/chunk that reads this layer's output: each unit the layer computes should be "
        "read by the forward";
    out.push_back(std::move(f));
  }
  return out;
}

// ---- parameters used in eval mode only ------------------------------------------------------
std::vector<Finding> find_eval_only_parameters(nn::Module& model, const Tensor& x, const Tensor& y,
                                               const LossFunction& loss, const optim::Optimizer* optimizer,
                                               const std::vector<std::string>& unreached) {
  if (!optimizer || unreached.empty() || !x.defined()) return {};
  std::set<const TensorImpl*> held;
  for (const auto& g : optimizer->param_groups())
    for (const Tensor& p : g.params) held.insert(p.impl_ptr().get());
  std::vector<std::pair<std::string, Tensor>> params = model.named_parameters(), candidates;
  for (const auto& [name, p] : params)
    if (p.requires_grad() && !held.count(p.impl_ptr().get()) &&
        std::find(unreached.begin(), unreached.end(), name) != unreached.end())
      candidates.emplace_back(name, p);
  if (candidates.empty()) return {};
  std::vector<Tensor> grads;
  for (auto& [name, p] : params) {
    grads.push_back(p.grad());
    p.set_grad(Tensor());
  }
  std::vector<std::string> reached;
  try {
    ModeSnapshot modes(model);
    model.eval();
    const Tensor out = model(x);
    Tensor l;
    try {
      l = loss(out, y);
    } catch (const std::exception&) {
    }
    if (!l.defined() || l.numel() != 1 || !l.requires_grad()) l = sum(out.to(kFloat32) * out.to(kFloat32));
    if (l.requires_grad()) l.backward();
    NoGradGuard ng;
    for (const auto& [name, p] : candidates) {
      const Tensor g = p.grad();
      if (g.defined() && amax(abs(g.detach())).item<double>() > 0.0) reached.push_back(name);
    }
  } catch (const std::exception&) {
    reached.clear();  // the probe's own error: nothing is explained
  }
  for (size_t i = 0; i < params.size(); ++i) params[i].second.set_grad(grads[i]);
  std::vector<Finding> out;
  for (const std::string& name : reached) {
    Finding f;
    f.check = "M5";
    f.severity = Severity::Info;
    f.kind = Kind::EvalOnlyParameter;
    f.parameter = name;
    f.title = "trainable parameter '" + name +
              "' is used in eval mode only, and no optimizer group holds it: it is fitted apart from training";
    f.evidence = {{"gradient in training mode", 0.0, ""},
                  {"gradient in eval mode (1 = yes)", 1.0, "and outside the optimizer: by design"}};
    f.cause =
        "the forward uses it only when the model is evaluated, and the optimizer was built without it: a "
        "temperature or calibration parameter fitted on held-out data after training";
    f.fix = "nothing, if it is fitted after training; to make it plain, give it requires_grad_(false) during training";
    out.push_back(std::move(f));
  }
  return out;
}

namespace {
std::set<std::string> eval_only_names(const std::vector<Finding>& fs) {
  std::set<std::string> names;
  for (const Finding& f : fs)
    if (f.is("M5", Kind::EvalOnlyParameter)) names.insert(f.parameter);
  return names;
}

void soften_eval_only(std::vector<Finding>& found, const std::set<std::string>& eval_only) {
  if (eval_only.empty()) return;
  for (Finding& f : found) {
    if (!f.fires() || !eval_only.count(f.parameter)) continue;
    const bool gradient = f.check == "M5" || f.check == "O1";
    const bool optimizer = f.check == "M10" && f.value_of("trainable parameters missing from the optimizer") <=
                                                   static_cast<double>(eval_only.size());
    if (!gradient && !optimizer) continue;
    f.severity = Severity::Info;
    f.title += " (used in eval mode only, outside the optimizer: fitted apart from training)";
    f.fix = "nothing, if it is fitted after training";
  }
}
}  // namespace

void soften_eval_only_findings(std::vector<Finding>& found) { soften_eval_only(found, eval_only_names(found)); }

void soften_eval_only_findings(Report& r, const Report& gate) {
  std::vector<Finding> all = r.findings();
  soften_eval_only(all, eval_only_names(gate.findings()));
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].severity != r.findings()[i].severity) r.replace(i, all[i]);
}

// ---- input columns the model never reads ---------------------------------------------------------
std::vector<Finding> find_unread_input_columns(nn::Module& model, const Tensor& x) {
  constexpr int64_t kMaxColumns = 64, kMaxRows = 256;
  if (!x.defined() || !x.is_floating_point() || x.dim() != 2 || x.size(0) < 8 || x.size(1) < 2 ||
      x.size(1) > kMaxColumns)
    return {};
  std::vector<int64_t> unread;
  const int64_t B = std::min(x.size(0), kMaxRows), F = x.size(1);
  try {
    QuietProbe quiet(model);
    ModeSnapshot modes(model);
    model.eval();
    NoGradGuard ng;
    const Tensor xb = x.narrow(0, 0, B).contiguous();
    const Tensor base = model(xb).detach().clone();
    if (!base.defined() || !base.is_floating_point()) return {};
    if (!same_output(model(xb).detach(), base)) return {};  // an eval forward that draws randomness: nothing to compare
    // Each column's values moved to other rows (rolled by half the batch): a column the forward reads
    // moves some output; one it never reads leaves every output exactly as it was. A column constant
    // over the batch moves nothing when rolled and is not judged.
    std::vector<int64_t> roll(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) roll[static_cast<size_t>(i)] = (i + B / 2) % B;
    const Tensor rolled = xb.index_select(0, tensor(roll, {B}));
    int64_t judged = 0;
    for (int64_t j = 0; j < F; ++j) {
      const Tensor col = xb.narrow(1, j, 1);
      if (amax(abs(col - rolled.narrow(1, j, 1))).item<double>() == 0.0) continue;
      ++judged;
      Tensor moved = xb.clone();
      moved.narrow(1, j, 1).copy_(rolled.narrow(1, j, 1));
      if (same_output(model(moved).detach(), base)) unread.push_back(j);
    }
    if (unread.empty() || static_cast<int64_t>(unread.size()) == judged) return {};  // none, or none read at all
  } catch (const std::exception&) {
    return {};
  }
  Finding f;
  f.check = "M5";
  f.severity = Severity::Warning;
  f.kind = Kind::InputColumnsUnread;
  f.title = "the model never reads input column" + std::string(unread.size() > 1 ? "s " : " ") + index_list(unread) +
            " of " + std::to_string(F) + ": moving " + (unread.size() > 1 ? "each one's" : "its") +
            " values to other rows of the batch leaves every output exactly as it was";
  f.shape = shape_of(x);
  f.evidence = {{"input columns whose values, moved across the batch, move no output",
                 static_cast<double>(unread.size()), "any, beside columns that move it, warns"},
                {"input columns", static_cast<double>(F), ""},
                {"rows of the batch probed (eval mode)", static_cast<double>(B), ""}};
  f.cause =
      "the forward never uses these features: a slice that reads the wrong columns (narrow(1, 0, 10) where "
      "narrow(1, 10, 10) was meant), a branch handed the wrong variable (two towers both fed the user's "
      "features, the item's left out), or a feature block dropped. The data in those columns never reaches the "
      "prediction";
  f.fix =
      "check every narrow/index/chunk of the input and what each branch of the forward is given; columns "
      "carried on purpose (row ids, sample weights) belong outside the model's input";
  return {f};
}

}  // namespace gradsleuth::debug
