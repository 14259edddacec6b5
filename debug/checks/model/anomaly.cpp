// Observer-based numerics checks: W4 anomaly mode, M12, M19, M18, M20 (see anomaly.h).
#include "debug/checks/model/anomaly.h"


#include <cmath>
#include <cstring>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/host_copy.h"
#include "debug/checks/model/model_checks.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/conv.h"
#include "nn/linear.h"

namespace gradsleuth::debug {

namespace {

std::string shapes_of(const OpEvent& e) {
  std::string s;
  for (size_t i = 0; i < e.num_inputs; ++i)
    s += (i ? ", " : "") + (e.input(i).defined() ? e.input(i).str() : std::string("none"));
  return s;
}

// Causes of a NaN/Inf by the op that produced it (the NaN/Inf rows of the loss-debugging
// cause table in docs/checks.md, L1 and W4).
std::string cause_for_op(const std::string& op, bool backward) {
  if (op == "log" || op == "log_softmax" || op == "log1p")
    return "log of zero or of a negative number: typically log(softmax(x)) where softmax underflowed to 0, or "
           "log of a probability that reached 0";
  if (op == "exp" || op == "softmax" || op == "pow" || op == "square")
    return "numerical overflow: exp of a large value (a softmax computed without subtracting the maximum, logits "
           "that grew because the learning rate is too high)";
  if (op == "div" || op == "reciprocal") return "division by zero (a normalisation by a sum, std or count that was 0)";
  if (op == "sqrt") return backward ? "the gradient of sqrt at 0 is infinite" : "sqrt of a negative number";
  if (op == "matmul" || op == "linear" || op == "add" || op == "mul" || op == "sum" || op == "mean")
    return "overflow of large values: activations or weights that grew without bound (learning rate too high, "
           "weights initialised far too large)";
  return "a numerical edge case of this op (overflow, 0/0, log or sqrt outside its domain)";
}

std::string fix_for_op(const std::string& op) {
  if (op == "log" || op == "softmax" || op == "exp")
    return "use the stable forms: log_softmax / cross_entropy on raw logits (log-sum-exp), never log(softmax(x)) "
           "or exp(x) / sum(exp(x))";
  if (op == "div" || op == "reciprocal") return "add an epsilon to the denominator, or mask the empty case";
  if (op == "sqrt") return "add an epsilon inside the sqrt: sqrt(x + 1e-8)";
  return "lower the learning rate, clip gradients (optim::clip_grad_norm_), check the initialisation";
}

}  // namespace

// ---- W4 ----------------------------------------------------------------------------------
void AnomalyMode::attach(nn::Module& model) {
  tracker_.attach(model);
  tags_.clear();
  inputs_.clear();
  // Ops report themselves before their backward node exists, so a node learns
  // its module afterwards: when a module finishes, every node between its output
  // and its input that has no module yet gets this one (inner modules finish
  // first, so each node keeps the innermost module that made it).
  for (auto& [path, m] : model.named_modules()) {
    auto label = std::make_shared<const std::string>(module_label(path, *m));
    tags_.pre(m,
              [this](nn::Module&, const Tensor& x) { inputs_.push_back(x.defined() ? x.grad_fn().get() : nullptr); });
    tags_.post(m, [this, label](nn::Module&, const Tensor&, const Tensor& y) {
      const Node* stop = inputs_.empty() ? nullptr : inputs_.back();
      if (!inputs_.empty()) inputs_.pop_back();
      if (!y.defined() || !y.grad_fn()) return;
      std::vector<Node*> todo{y.grad_fn().get()};
      std::unordered_set<const Node*> seen;
      while (!todo.empty()) {
        Node* n = todo.back();
        todo.pop_back();
        if (!n || n == stop || !seen.insert(n).second) continue;
        if (n->context.empty()) n->context = *label;
        for (const Edge& e : n->next_edges) todo.push_back(e.fn.get());
      }
    });
  }
}

void AnomalyMode::report(Finding f) {
  if (findings_.size() >= o_.max_findings) return;
  findings_.push_back(f);
  if (o_.raise) GS_FAIL("anomaly mode (W4)", f.str());
}

void AnomalyMode::on_op(const OpEvent& e) {
  if (!e.output || !e.output->defined()) return;
  const Tensor& out = *e.output;
  if (out.grad_fn() && out.grad_fn()->context.empty()) out.grad_fn()->context = tracker_.current();
  if (!o_.forward || autograd::in_backward() || !out.is_floating_point()) return;
  if (all_finite(out)) return;
  // Only the op that created the problem: its inputs were finite. An in-place
  // op's input 0 is its output, already modified: it counts as finite unless
  // an earlier op left that storage non-finite (then this op only carried it on).
  const Storage* st = out.storage().get();
  const bool was_tainted = tainted_.count(st) > 0;
  tainted_.insert(st);
  if (e.inplace && was_tainted) return;
  for (size_t i = e.inplace ? 1 : 0; i < e.num_inputs; ++i)
    if (!all_finite(e.input(i))) return;
  const TensorSummary s = summarize(out);
  Finding f;
  f.check = "W4";
  f.severity = Severity::Error;
  f.nonfinite = true;
  f.title = std::string("'") + e.op + "' produced " + (s.nan ? "NaN" : "") + (s.nan && s.inf ? " and " : "") +
            (s.inf ? "Inf" : "") + " from finite inputs (forward)";
  f.module = tracker_.current();
  f.op = e.op;
  f.shape = shape_of(out);
  f.evidence = {{"NaN values", static_cast<double>(s.nan), "any is an error"},
                {"Inf values", static_cast<double>(s.inf), "any is an error"},
                {"finite min", s.min, ""},
                {"finite max", s.max, ""}};
  f.cause = cause_for_op(e.op, false) + ". Inputs: " + shapes_of(e) + "; output " + s.str(out);
  f.fix = fix_for_op(e.op);
  report(std::move(f));
}

void AnomalyMode::on_backward(const BackwardEvent& e) {
  if (!o_.backward) return;
  if (e.grad_output && !all_finite(*e.grad_output)) return;  // it arrived broken: not this node's doing
  for (size_t i = 0; i < e.num_grad_inputs; ++i) {
    const Tensor& g = e.grad_inputs[i];
    if (!g.defined() || all_finite(g)) continue;
    const TensorSummary s = summarize(g);
    Finding f;
    f.check = "W4";
    f.severity = Severity::Error;
    f.nonfinite = true;
    std::string op = e.node->name();
    f.title = "the backward of '" + op + "' produced " + (s.nan ? "NaN" : "Inf") +
              " gradients from a finite incoming gradient (input " + std::to_string(i) + ")";
    f.module = e.node->context;
    f.op = op;
    f.shape = shape_of(g);
    f.evidence = {{"NaN values", static_cast<double>(s.nan), "any is an error"},
                  {"Inf values", static_cast<double>(s.inf), "any is an error"}};
    f.cause = cause_for_op(op, true) + ". Gradient " + s.str(g);
    f.fix = fix_for_op(op);
    report(std::move(f));
    return;
  }
}

// ---- M12 ----------------------------------------------------------------------------------
std::vector<Finding> find_nonfinite_source(nn::Module& model, const Tensor& x) {
  std::vector<Finding> out;
  QuietProbe probe(model);
  HookSet hooks;
  bool done = false;
  for (auto& [path, m] : model.named_modules()) {
    const std::string label = module_label(path, *m);
    hooks.post(m, [&, label](nn::Module& self, const Tensor& in, const Tensor& y) {
      if (done || !y.defined() || !y.is_floating_point() || all_finite(y) || !all_finite(in)) return;
      // A module whose own weights are already non-finite passes on what an update did (O4 says
      // which), and a linear map (Linear, Conv2d) in float32 or float64 turns finite operands into
      // Inf only when they grew past the type's range (weights an update blew up): no op of its
      // forward is unstable, so it is no source. In 16 bits the range itself is the question (M18).
      bool blown = false;
      for (const auto& [name, p] : self.named_parameters(false))
        blown = blown || (p.defined() && p.is_floating_point() && !all_finite(p));
      const bool linear_map = (dynamic_cast<nn::Linear*>(&self) || dynamic_cast<nn::Conv2d*>(&self)) &&
                              (y.dtype() == kFloat32 || y.dtype() == kFloat64);
      if (blown || linear_map) {
        done = true;
        return;
      }
      done = true;
      const TensorSummary s = summarize(y), si = summarize(in);
      Finding f;
      f.check = "M12";
      f.severity = Severity::Error;
      f.nonfinite = true;
      f.title = "the output of " + label + " turned non-finite although its input was finite";
      f.module = label;
      f.shape = shape_of(y);
      f.evidence = {{"NaN in output", static_cast<double>(s.nan), "any is an error"},
                    {"Inf in output", static_cast<double>(s.inf), "any is an error"},
                    {"input max |x|", std::max(std::fabs(si.min), std::fabs(si.max)), ""}};
      f.cause = "this module is the first (in execution order) to produce NaN/Inf: input " + si.str(in) + "; output " +
                s.str(y);
      f.fix = "look inside this module for log/exp/div/sqrt on extreme values (W4 anomaly mode names the op)";
      out.push_back(std::move(f));
    });
  }
  AnomalyMode anomaly(AnomalyOptions{true, false, false, 1});
  anomaly.attach(model);
  {
    NoGradGuard ng;
    auto on = anomaly.enable();
    model(x);
  }
  for (const Finding& f : anomaly.findings()) {
    if (!out.empty() && out[0].fix.find("names the op") != std::string::npos) {
      out[0].op = f.op;
      out[0].fix = fix_for_op(f.op) + " (the op: '" + f.op + "', W4)";
    }
  }
  return out;
}

// ---- M19 ----------------------------------------------------------------------------------
void BroadcastDetector::on_op(const OpEvent& e) {
  if (mode_ == BroadcastMode::Off || autograd::in_backward() || e.num_inputs < 2) return;
  // Count operands that broadcasting enlarged, ignoring one-element ones (scalars).
  // An operand counts when broadcasting repeated its elements (fewer elements
  // than the result): (2, 3) against (1, 1, 3) only gains a leading 1 and does not.
  // The bug's mark is an operand repeated along a dim it does not have, (B, 1) against (B):
  // when every repeated operand has the result's rank, each stretched dim was written as a size-1
  // dim on purpose, (B, 1) against (1, C): an outer combination that is meant (a one-hot built by
  // comparison, a mask, pairwise differences), as the fix below advises writing one. A parameter
  // (a leaf that requires grad) stretched along the dims it lacks is a bias shared by every row,
  // whatever its length: (B, 1) + thresholds (K) -> (B, K), as an ordinal model's K cut points.
  int expanded = 0;
  bool implicit = false;
  const int64_t n_out = e.output->numel();
  for (size_t i = 0; i < e.num_inputs && i < 32; ++i)
    if ((e.expanded_mask >> i & 1u) && e.input(i).numel() > 1 && e.input(i).numel() < n_out) {
      ++expanded;
      const bool parameter = e.input(i).requires_grad() && e.input(i).is_leaf();
      implicit = implicit || (e.input(i).dim() < e.output->dim() && !parameter);
    }
  if (expanded < 2 || !implicit) return;
  Finding f;
  f.check = "M19";
  f.severity = mode_ == BroadcastMode::Raise ? Severity::Error : Severity::Warning;
  f.title = std::string("'") + e.op + "' broadcast both operands: " + shapes_of(e) + " -> " + shape_of(*e.output);
  f.module = tracker_.current();
  f.op = e.op;
  f.shape = shape_of(*e.output);
  f.evidence = {{"expanded operands", static_cast<double>(expanded), ">= 2, one of them without the dim, flags the op"},
                {"output elements", static_cast<double>(e.output->numel()), ""}};
  f.cause =
      "each operand was stretched along a different dim, e.g. (B, 1) against (B) or (1, B): the result "
      "combines every element of one with every element of the other, usually a missing or extra "
      "unsqueeze/squeeze (a prediction (B, 1) against a target (B))";
  f.fix =
      "make the shapes equal before the op (target.unsqueeze(1) or prediction.squeeze(1)); if an outer "
      "product is meant, write it explicitly with unsqueeze on both";
  if (mode_ == BroadcastMode::Raise) GS_FAIL("broadcasting check (M19)", f.str());
  for (const Finding& g : findings_)
    if (g.key() == f.key()) return;
  findings_.push_back(std::move(f));
}

std::optional<Finding> loss_shape_finding(const std::string& loss_name, const Tensor& input, const Tensor& target) {
  if (!input.defined() || !target.defined() || input.shape() == target.shape()) return std::nullopt;
  Shape b;
  try {
    b = broadcast_shapes(input.shape(), target.shape(), "loss");
  } catch (const Error&) {
    return std::nullopt;  // the loss will raise its own error
  }
  Finding f;
  f.check = "M19";
  f.severity = Severity::Warning;
  f.title = loss_name + " gets a prediction " + shape_of(input) + " and a target " + shape_of(target) +
            " of different shapes: an elementwise loss broadcasts them to " + shape_str(b);
  f.module = loss_name;
  f.shape = shape_str(b);
  f.evidence = {{"prediction elements", static_cast<double>(input.numel()), ""},
                {"target elements", static_cast<double>(target.numel()), ""},
                {"broadcast elements", static_cast<double>(numel_of(b)), "> either operand flags the loss"}};
  f.cause =
      "a regression target (B) against a prediction (B, 1): every prediction is compared with every "
      "target, and the loss trains towards the mean";
  f.fix = "give both the same shape: target.unsqueeze(1) (or prediction.squeeze(1))";
  return f;
}

// ---- M18 ----------------------------------------------------------------------------------
float round_to_half(float v) { return to_float(Half(v)); }  // the engine's float16 conversion

void HalfPrecisionEmulation::on_op(const OpEvent& e) {
  if (!e.output || !e.output->defined() || e.output->dtype() != kFloat32) return;
  Tensor out = *e.output;
  // Skipping a device result would leave that op in float32 and the emulation silently partial.
  GS_CHECK(out.device().is_cpu(), "HalfPrecisionEmulation", "rounds each op's result on the host, but '", e.op,
           "' produced ", out.str(), " on ", out.device().str(),
           "; run the forward on the CPU (debug::check_half_precision moves a device model there itself)");
  if (!out.is_contiguous()) return;  // views share an already-rounded storage
  float* p = static_cast<float*>(out.raw_data());
  for (int64_t i = 0, n = out.numel(); i < n; ++i) p[i] = round_to_half(p[i]);
}

std::vector<Finding> check_half_precision(nn::Module& model, const Tensor& x, const LossOf& loss,
                                          const HalfPrecisionOptions& o) {
  std::vector<Finding> out;
  GS_CHECK(x.defined() && x.is_floating_point(), "check_half_precision", "expects a floating input, got ",
           x.defined() ? x.str() : std::string("an undefined tensor"));
  GS_CHECK(is_reduced_float(o.dtype), "check_half_precision", "compares float32 with a 16-bit dtype, got ",
           dtype_name(o.dtype), "; set HalfPrecisionOptions::dtype to kFloat16 or kBFloat16");
  GS_CHECK(!o.emulate || o.dtype == kFloat16, "check_half_precision", "emulates float16 only, not ",
           dtype_name(o.dtype), "; leave HalfPrecisionOptions::emulate off for the real dtype");
  // The runs are on the host: a model on a device is compared on a CPU copy (moved back afterwards,
  // exactly). The device's float32 forward equals the CPU's within rounding (the CUDA backend's
  // op-by-op tests), and the device refuses 16-bit ops. The loss is called with outputs on the CPU.
  HostCopyGuard host(model, "check_half_precision (M18)");
  const Tensor xc = x.detach().to(kCPU);
  NoGradGuard ng;
  // Which modules produce non-finite outputs in each run, in execution order.
  std::vector<std::pair<std::string, bool>> finite_fp32, finite_half;
  std::vector<std::pair<std::string, bool>>* sink = &finite_fp32;
  std::vector<double> largest_fp32;  // each float32 call's largest |output| (NaN: not a float)
  HookSet hooks;
  for (auto& [path, m] : model.named_modules()) {
    const std::string label = module_label(path, *m);
    hooks.post(m, [&, label](nn::Module&, const Tensor&, const Tensor& y) {
      sink->emplace_back(label, !y.is_floating_point() || all_finite(y));
      if (sink == &finite_fp32)
        largest_fp32.push_back(
            y.is_floating_point() && y.numel() > 0 ? amax(abs(y.detach().to(kFloat32))).item<double>() : std::nan(""));
    });
  }
  Tensor y32;
  double l32 = 0.0;
  {
    DtypeGuard f32(model, kFloat32);  // 16-bit parameters widen exactly; float32 ones are untouched
    y32 = model(xc.to(kFloat32));
    l32 = loss ? loss(y32).to(kFloat32).item<double>() : 0.0;
  }
  if (!all_finite(y32) || !std::isfinite(l32)) {
    Finding f;
    f.check = "M18";
    f.severity = Severity::Info;
    f.title = "not compared: the float32 forward is already non-finite (see M12 and W4 for its source)";
    f.module = "(model)";
    out.push_back(std::move(f));
    return out;
  }

  // The 16-bit run, in the real dtype: the parameters and the input converted (or autocast).
  const DType dt = o.dtype;
  Tensor yh;
  double lh = 0.0;
  bool emulated = o.emulate;
  if (!emulated) {
    sink = &finite_half;
    try {
      std::optional<DtypeGuard> cast;
      std::optional<AutocastGuard> ac;
      Tensor xin = xc;
      if (o.autocast) {
        ac.emplace(dt);
      } else {
        cast.emplace(model, dt);
        xin = xc.to(dt);
      }
      yh = model(xin);
      lh = loss ? loss(yh).to(kFloat32).item<double>() : 0.0;
    } catch (const Error&) {
      // An op that refuses the dtype: float16 falls back on the emulation, bfloat16 has none.
      if (dt != kFloat16 || o.autocast) throw;
      emulated = true;
      finite_half.clear();
    }
  }
  if (emulated) {
    // Emulated float16: the parameters and the input rounded (restored below), then every op's result.
    DtypeGuard f32(model, kFloat32);
    std::vector<std::pair<Tensor, Tensor>> saved;
    for (Tensor& p : model.parameters())
      if (p.dtype() == kFloat32 && p.is_contiguous()) {
        saved.emplace_back(p, p.detach().clone());
        float* d = static_cast<float*>(p.raw_data());
        for (int64_t i = 0; i < p.numel(); ++i) d[i] = round_to_half(d[i]);
        p.storage()->bump_version("check_half_precision");  // autocast's kept copy must not be reused
      }
    Tensor xh = xc.to(kFloat32).contiguous().clone();
    {
      float* d = static_cast<float*>(xh.raw_data());
      for (int64_t i = 0; i < xh.numel(); ++i) d[i] = round_to_half(d[i]);
    }
    sink = &finite_half;
    HalfPrecisionEmulation half;
    try {
      Scope on(&half, ObserverScope::ThisThread);  // this forward's ops, not another thread's
      yh = model(xh);
      lh = loss ? loss(yh).item<double>() : 0.0;
    } catch (...) {
      for (auto& [p, v] : saved) {
        std::memcpy(p.raw_data(), v.raw_data(), p.nbytes());
        p.storage()->bump_version("check_half_precision");
      }
      throw;
    }
    for (auto& [p, v] : saved) {
      std::memcpy(p.raw_data(), v.raw_data(), p.nbytes());
      p.storage()->bump_version("check_half_precision");
    }
  }
  const std::string run = std::string(o.autocast ? "under autocast to " : "in ") + dtype_name(dt) +
                          (emulated ? " (emulated: each float32 result rounded)" : "");
  const double largest = dt == kFloat16 ? 65504.0 : 3.3895313892515355e38;

  const bool half_broken = !all_finite(yh) || (loss && !std::isfinite(lh));
  if (half_broken) {
    std::string culprit = "(model)";
    double culprit_fp32 = std::nan("");
    for (size_t i = 0; i < finite_half.size(); ++i)
      if (!finite_half[i].second && (i >= finite_fp32.size() || finite_fp32[i].second)) {
        culprit = finite_half[i].first;
        if (i < largest_fp32.size()) culprit_fp32 = largest_fp32[i];
        break;
      }
    const TensorSummary s32 = summarize(y32);
    const TensorSummary sx = summarize(xc.to(kFloat32));
    Finding f;
    f.check = "M18";
    f.severity = Severity::Error;
    f.title = "the forward overflows " + run + ": " + culprit +
              " is the first module whose output turns NaN/Inf (it is " + "finite in float32)";
    f.module = culprit;
    f.shape = shape_of(y32);
    f.evidence = {{"largest |output| in float32", std::max(std::fabs(s32.min), std::fabs(s32.max)), ""},
                  {std::string("largest ") + dtype_name(dt) + " value", largest, "anything above overflows to inf"},
                  {"loss float32", l32, ""},
                  {std::string("loss ") + dtype_name(dt), lh, "must be finite"}};
    if (std::isfinite(culprit_fp32))
      f.evidence.push_back({"largest |output| of " + culprit + " in float32", culprit_fp32, ""});
    // The model's input itself past the 16-bit range (raw features in their units): the data
    // overflows before any module runs.
    const double input_max = std::max(std::fabs(sx.min), std::fabs(sx.max));
    const bool input_overflows = !o.autocast && input_max > largest;
    f.evidence.push_back({"largest |input|", input_max, input_overflows ? "above the largest value: inf" : ""});
    f.cause =
        "half precision overflows above 65504: exp(x) for x > 11.1 is already inf, so a softmax computed as "
        "exp(x) / sum(exp(x)) without subtracting the maximum gives inf / inf = NaN; large activations or "
        "sums of squares overflow the same way";
    f.fix =
        "use the stable softmax/log_softmax (they subtract the row maximum), keep reductions and the loss in "
        "float32 (mixed precision), and scale the loss for backward (loss scaling)";
    if (input_overflows) {
      f.cause = "the input's values are past " + std::string(dtype_name(dt)) +
                "'s largest value: converted, they are inf before any module runs (features in their raw units)";
      f.fix =
          "standardise the input (mean and scale fitted on the training split) before the model, or keep "
          "the input and the first layer in float32 (autocast)";
    }
    out.push_back(std::move(f));
    return out;
  }
  if (loss && std::fabs(lh - l32) > o.max_relative_loss_gap * std::max(std::fabs(l32), 1e-12) &&
      std::fabs(lh - l32) >= o.min_absolute_loss_gap) {
    Finding f;
    f.check = "M18";
    f.severity = Severity::Warning;
    f.title = "the loss differs between float32 and " + std::string(dt == kFloat16 ? "half precision" : "bfloat16") +
              (o.autocast ? " (autocast)" : "") + " by more than " + fmt_num(100 * o.max_relative_loss_gap) + "%";
    f.module = "(model)";
    f.evidence = {{"loss float32", l32, ""},
                  {std::string("loss ") + dtype_name(dt), lh, ""},
                  {"relative gap", std::fabs(lh - l32) / std::max(std::fabs(l32), 1e-12),
                   "> " + fmt_num(o.max_relative_loss_gap) + " warns"},
                  {"absolute gap", std::fabs(lh - l32), ">= " + fmt_num(o.min_absolute_loss_gap) + " needed"}};
    f.cause = std::string("values that lose too much precision in ") + dtype_name(dt) + " (" +
              (dt == kFloat16 ? "10" : "7") +
              "-bit mantissa): tiny differences of large numbers, small probabilities, long sums";
    f.fix =
        "keep the sensitive parts (softmax, normalisation statistics, the loss) in float32 (M30 names the op "
        "that differs most)";
    out.push_back(std::move(f));
  }
  return out;
}

// ---- M20 ----------------------------------------------------------------------------------
std::optional<Finding> inplace_finding(const std::exception& e) {
  const std::string msg = e.what();
  if (msg.find("modified by an in-place operation") == std::string::npos) return std::nullopt;
  Finding f;
  f.check = "M20";
  f.severity = Severity::Error;
  f.title = "backward failed: a tensor saved for the gradient was modified in place";
  auto quoted_after = [&](const std::string& key) {
    const auto at = msg.find(key);
    if (at == std::string::npos) return std::string();
    const auto begin = at + key.size(), end = msg.find('\'', begin);
    return end == std::string::npos ? std::string() : msg.substr(begin, end - begin);
  };
  f.op = quoted_after("modified by '");
  const std::string saver = quoted_after("saved by '");
  if (!saver.empty())
    f.title += ": '" + saver + "' saved it, '" + (f.op.empty() ? "an in-place op" : f.op) + "' changed it";
  f.cause = msg;
  // The out-of-place form of the op actually used: the operator for arithmetic (x = x + y
  // instead of x += y), the method without its '_' otherwise (y = x.relu() instead of x.relu_()).
  const std::string plain = !f.op.empty() && f.op.back() == '_' ? f.op.substr(0, f.op.size() - 1) : "";
  const char* sym = plain == "add" ? "+" : plain == "sub" ? "-" : plain == "mul" ? "*" : plain == "div" ? "/" : nullptr;
  const bool unary = plain == "relu" || plain == "sigmoid" || plain == "tanh" || plain == "exp";
  f.fix = plain.empty() ? "use the out-of-place op, or clone() the tensor before modifying it"
          : sym ? "use '" + plain + "' (out of place: x = x " + sym + " y instead of x " + sym + "= y or x." + f.op +
                      "(y)), or clone() the tensor before modifying it"
                : "use '" + plain + "' (out of place: y = x." + plain + (unary ? "()" : "(...)") + " instead of x." +
                      f.op + (unary ? "()" : "(...)") + "), or clone() the tensor before modifying it";
  return f;
}

// ---- M19, W4/M12 and M18 during training (the monitor's run checks) ----------------------------
namespace {
// M19: silent broadcasts in the model's ops (not in the probes'), and an elementwise loss's
// prediction and target shapes.
class BroadcastRunCheck final : public RunCheck {
 public:
  explicit BroadcastRunCheck(BroadcastMode m) : broadcast_(m) {}
  std::string ids() const override { return "M19"; }
  uint32_t events() const override {
    return RunEvent::Attach | RunEvent::LossInput | RunEvent::Pause | RunEvent::Detach | RunEvent::Finish;
  }
  void attach(RunContext& c) override {
    broadcast_.attach(c.model);
    on_ = broadcast_.enable();
  }
  void loss_input(RunContext& c, nn::Loss& l, const Tensor& input, const Tensor& target) override {
    if (!loss_type::elementwise(l)) return;
    if (auto f = loss_shape_finding(l.type_name(), input, target)) c.add(*f);
  }
  void pause(RunContext&, bool on) override {
    if (on)
      on_.reset();
    else if (attached_)
      on_ = broadcast_.enable();
  }
  void detach(RunContext&) override {
    attached_ = false;
    on_.reset();
    broadcast_.detach();
  }
  void finish(RunContext& c) override {
    c.add_all(broadcast_.findings());
    c.note_ran("M19");
  }

 private:
  BroadcastDetector broadcast_;
  std::unique_ptr<Scope> on_;
  bool attached_ = true;
};

// W4/M12: when a step's loss or gradients turn non-finite, the batch runs again with every op
// checked, before the optimizer step changes the weights, to name the op and the module. Every
// step cheaply (a strided sample of each large gradient the optimizer will use): a backward that
// made NaN/Inf from a finite loss must be caught on its own step; the sampled steps read every
// element (O1).
class NonFiniteRunCheck final : public RunCheck {
 public:
  explicit NonFiniteRunCheck(bool on) : on_(on) {}
  std::string ids() const override { return "W4, M12"; }
  uint32_t events() const override { return RunEvent::BeforeStep | RunEvent::NonFinite; }
  void before_step(RunContext& c, bool sampled) override {
    if (c.nonfinite || c.localised || sampled) return;
    for (const optim::ParamGroup& group : c.optimizer.param_groups())
      for (const Tensor& p : group.params) {
        const Tensor g = p.defined() ? p.grad() : Tensor();
        if (g.defined() && !sampled_finite(g)) {
          c.flag_nonfinite();
          return;
        }
      }
  }
  void nonfinite(RunContext& c, const std::string& why) override {
    // A step the loss scaler skipped with a finite loss may be its calibration (the scaling alone
    // overflowed): tried every time, not counted.
    const bool maybe_calibration = c.scaler_skip && !(c.loss_seen && !std::isfinite(c.loss_value));
    if (c.localised || !on_ || !c.x.defined() || (!maybe_calibration && tries_ >= kMaxTries)) return;
    if (!maybe_calibration) ++tries_;
    // The weights are still those that produced the problem: run the batch again with every op
    // checked, without touching the gradients: the step's are set aside (the probe's backward would
    // add into them in place) and put back after.
    struct SetAside {
      std::vector<std::pair<Tensor, Tensor>> grads;
      explicit SetAside(nn::Module& m) {
        for (Tensor& p : m.parameters()) grads.emplace_back(p, p.grad());
        for (auto& [p, g] : grads) p.set_grad(Tensor());
      }
      ~SetAside() {
        for (auto& [p, g] : grads) p.set_grad(g);
      }
    } grads(c.model);
    // In the precision the step ran in: under the step's autocast (a float16 overflow is not one
    // in float32).
    std::optional<AutocastGuard> ac;
    if (c.autocast) ac.emplace(*c.autocast);
    const std::vector<Finding> sources = find_nonfinite_source(c.model, c.x);  // M12
    const size_t found = sources.size();
    c.add_all(sources);
    QuietProbe probe(c.model);
    AnomalyMode anomaly;
    anomaly.attach(c.model);
    try {
      auto scope = anomaly.enable();
      Tensor out = c.model(c.x);
      if (c.loss && c.y.defined()) {
        Tensor l = (*c.loss)(out, c.y);
        if (l.requires_grad()) l.backward();
      }
    } catch (const std::exception&) {
    }
    for (Finding f : anomaly.findings()) {
      f.cause = why + ". " + f.cause;
      c.add(std::move(f));
    }
    // Localised once: when an op was named (a step the loss scaler skipped because the scaling
    // alone overflowed names none, and a later step may still), or after kMaxTries tries.
    c.localised = c.localised || found > 0 || !anomaly.findings().empty();
  }

 private:
  static constexpr int kMaxTries = 8;
  bool on_;
  int tries_ = 0;
};

// M18 on a run that trained in float32 (no autocast, no 16-bit parameters) asks whether the model
// would survive the move to float16. A module that overflows on values float16 holds (its float32
// output within float16's range: exp(x) / sum(exp(x)) on logits of 30) is unstable code, and stays
// an error. Values that do not fit float16 themselves (a regression onto prices in dollars, logits
// in the thousands, a loss summed past 65504, raw input features past 65504) and a loss that
// differs by precision alone are what a move to float16 would meet, not a fault of this run: info.
void soften_float32_run(Finding& f) {
  if (!f.fires()) return;
  const double inside = f.value_of("largest |output| of " + f.module + " in float32");
  const double input = f.value_of("largest |input|");
  const bool input_fits = !std::isfinite(input) || input <= 65504.0;
  if (f.severity == Severity::Error && f.module != "(model)" && std::isfinite(inside) && inside <= 65504.0 &&
      input_fits)
    return;
  f.severity = Severity::Info;
  f.title += " (the run trains in float32: what a move to float16 would meet)";
  f.fix = "nothing for this run; before training in float16, " + f.fix;
}

// M18 after the run, on a sample batch: the model in 16 bits against float32. In the run's own
// setting when it used autocast or 16-bit parameters, else in float16 (would it survive the move?).
// It runs on the host (a model on a device is compared on a CPU copy): the targets follow the output.
class HalfPrecisionRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "M18"; }
  uint32_t events() const override { return RunEvent::Forward | RunEvent::AfterRun; }
  void forward(RunContext& c, const Tensor&) override {
    if (!GradMode::is_enabled()) return;  // an evaluation
    if (autocast_enabled()) autocast_ = autocast_dtype();
    if (!params16_)
      for (const Tensor& p : c.model.parameters())
        if (is_reduced_float(p.dtype())) params16_ = p.dtype();
  }
  void after_run(RunContext& c, const Tensor& x, const Tensor& y) override {
    if (!x.defined() || !x.is_floating_point()) return;
    HalfPrecisionOptions o;
    if (autocast_)
      o.dtype = *autocast_, o.autocast = true;
    else if (params16_)
      o.dtype = *params16_;
    LossOf lf;
    if (c.loss && y.defined()) lf = [&c, &y](const Tensor& out) { return (*c.loss)(out, y.to(out.device())); };
    const bool was = c.model.is_training();
    c.model.eval();
    try {
      std::vector<Finding> found = check_half_precision(c.model, x, lf, o);
      if (!autocast_ && !params16_)
        for (Finding& f : found) soften_float32_run(f);
      c.add_all(found);
    } catch (const std::exception& e) {
      Finding f;
      f.check = "M18";
      f.severity = Severity::Info;
      f.title = std::string("not run: ") + e.what();
      c.add(std::move(f));
    }
    c.model.train(was);
  }

 private:
  std::optional<DType> autocast_, params16_;
};
}  // namespace

std::unique_ptr<RunCheck> make_broadcast_run_check(const MonitorOptions& o) {
  return std::make_unique<BroadcastRunCheck>(o.broadcast);
}
std::unique_ptr<RunCheck> make_nonfinite_run_check(const MonitorOptions& o) {
  return std::make_unique<NonFiniteRunCheck>(o.localise_nonfinite);
}
std::unique_ptr<RunCheck> make_half_precision_run_check(const MonitorOptions&) {
  return std::make_unique<HalfPrecisionRunCheck>();
}

}  // namespace gradsleuth::debug
