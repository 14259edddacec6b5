// M23 missing non-linearity (layers that collapse into one), M24 dropout rate and M27 activation variance at
// initialisation (see model_checks.h).
#include "debug/checks/model/model_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <numeric>
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
#include "debug/checks/model/run_checks.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "optim/adam.h"

namespace gradsleuth::debug {

using namespace model_detail;

// ---- M23 -----------------------------------------------------------------------------------
namespace {
// Whether the output of the linear layers' call `a` reaches the model's output other than through call
// `b` (a residual stream, a second head): the gradient of a fixed projection of the output with respect
// to a's output, against the part of it that flows back through b. A pair with no other path collapses.
bool reaches_output_elsewhere(nn::Module& model, const Tensor& x, const std::vector<nn::ModulePtr>& linear, size_t a,
                              size_t b) {
  std::vector<Tensor> outs;
  HookSet hooks;
  for (const nn::ModulePtr& m : linear)
    hooks.post(m, [&outs](nn::Module&, const Tensor&, const Tensor& out) { outs.push_back(out); });
  try {
    QuietProbe quiet(model);
    ModeSnapshot modes(model);
    model.eval();
    EnableGradGuard eg;
    const Tensor y = model(x);
    hooks.clear();
    if (b >= outs.size() || !y.requires_grad() || !outs[a].requires_grad() || !outs[b].requires_grad()) return false;
    const Tensor s = project_output(y);
    const tensor_list g = autograd::grad({s}, {outs[a], outs[b]}, {}, true, false, true);
    if (!g[0].defined() || !g[1].defined()) return false;
    const Tensor via = autograd::grad({outs[b]}, {outs[a]}, {g[1]}, false, false, true)[0];
    if (!via.defined()) return false;
    NoGradGuard ng;
    const double scale = amax(abs(g[0].to(kFloat64))).item<double>();
    const double other = amax(abs(g[0].to(kFloat64) - via.to(kFloat64))).item<double>();
    return scale > 0.0 && other > 1e-4 * scale;
  } catch (const std::exception&) {
    return false;
  }
}
}  // namespace

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
  std::vector<nn::ModulePtr> linear;
  HookSet hooks;
  for (auto& [path, m] : leaf_modules(model)) {
    if (!is_linear(*m)) continue;
    linear.push_back(m);
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
    // A code: an output narrower than its input (features for a Linear, channels for a Conv). One
    // narrower than the next layer's output as well (a 2-D embedding under a 10-class head), or read by
    // another linear layer too (an autoencoder's code under a classifier head and a decoder), is a
    // bottleneck by design: a map through fewer dimensions than it ends with is what it is meant to be.
    // An MLP's hidden layer without its activation (64 -> 32 -> 4) still warns.
    const auto width = [](const Tensor& t) { return t.dim() >= 3 ? t.size(1) : t.dim() >= 1 ? t.size(-1) : 0; };
    const bool narrows = a.input.dim() >= 1 && a.output.dim() >= 1 && width(a.output) < width(a.input);
    const auto reads_it = [&](const Call& c) {
      if (&c == &b || !c.input.defined() || c.input.numel() != a.output.numel()) return false;
      const Tensor in = c.input.detach().reshape({-1}).to(kFloat64);
      return amax(abs(prev - in)).item<double>() <= 1e-6 * scale;
    };
    const bool below_output = b.output.defined() && b.output.dim() >= 1 && width(a.output) < width(b.output);
    if (narrows && (below_output || std::any_of(calls.begin() + static_cast<std::ptrdiff_t>(i), calls.end(), reads_it)))
      continue;
    // The first layer's output also reaches the model's output another way (a linear stem whose output is
    // a residual stream every block adds to): the pair is one path of several, not a collapsed map.
    if (reaches_output_elsewhere(model, x, linear, i - 1, i)) continue;
    Finding f = detail::make("M23", Severity::Warning,
                             b.label + " takes " + a.label +
                                 "'s output with no non-linearity between them: the two "
                                 "layers collapse into one linear map");
    f.kind = Kind::LinearCollapse;
    f.module = b.label;
    f.shape = shape_str(b.input.shape());
    f.evidence = {{"max |input of the second - output of the first|", diff, "0 (the same values) flags"},
                  {"max |output of the first|", scale, ""}};
    f.cause =
        "an activation is missing between two linear layers (forgotten in forward(), or left out of a "
        "Sequential): however many such layers are stacked, the model can only learn a linear function of its "
        "input";
    f.fix = "put a non-linearity (nn::ReLU, gs::relu, nn::Tanh, ...) between " + a.label + " and " + b.label;
    out.push_back(std::move(f));
  }
  return out;
}

// M23 during training: on the first judged sampled steps, each Linear layer's input gradient against the
// part the layer sends back (the gradient of its output times its weight). More than that part means the
// loss read the input another way as well: the first layer of a collapsed pair feeds an auxiliary loss.
namespace {
class LinearReadersRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "M23"; }
  uint32_t events() const override {
    return RunEvent::Attach | RunEvent::BeforeStep | RunEvent::AfterStep | RunEvent::Pause | RunEvent::Finish |
           RunEvent::Series | RunEvent::Detach;
  }
  void finish(RunContext& c) override {
    if (judged_steps_ > 0) c.note_ran("M23");
  }
  void attach(RunContext& c) override {
    for (auto& [path, m] : leaf_modules(c.model)) {
      auto* linear = dynamic_cast<nn::Linear*>(m.get());
      if (!linear) continue;
      const std::string label = module_label(path, *m);
      hooks_.post(
          m,
          [this, label, linear](nn::Module&, const Tensor& in, const Tensor& out) { capture(label, *linear, in, out); },
          false);
    }
    active_ = true;
  }
  void pause(RunContext& c, bool on) override { active_ = !on && c.sampled(); }
  void before_step(RunContext&, bool) override {
    bool judged = false;
    for (const std::shared_ptr<Call>& call : calls_) {
      if (!call->in_grad.defined() || !call->out_grad.defined()) continue;
      NoGradGuard ng;
      const Tensor w = call->weight.detach().to(kFloat64);
      const Tensor through = call->out_grad.reshape({-1, w.size(0)}).matmul(w);
      if (through.numel() != call->in_grad.numel()) continue;
      judged = true;
      const Tensor total = call->in_grad.reshape(through.shape());
      const double scale = amax(abs(total)).item<double>();
      const double other = amax(abs(total - through)).item<double>();
      if (scale > 0.0 && other > kOtherReader * scale) read_elsewhere_.insert(call->label);
    }
    calls_.clear();
    if (judged) ++judged_steps_;
  }
  void after_step(RunContext& c, bool) override {
    calls_.clear();
    active_ = c.sampled();
  }
  void series(TrainingHistory& h) const override {
    h.linear_inputs_read_elsewhere.assign(read_elsewhere_.begin(), read_elsewhere_.end());
  }
  void detach(RunContext&) override {
    hooks_.clear();
    calls_.clear();
  }

 private:
  static constexpr int kJudgedSteps = 3;
  static constexpr double kOtherReader = 1e-3;  // of the input gradient's largest entry
  struct Call {
    std::string label;
    Tensor weight, in_grad, out_grad;
  };
  void capture(const std::string& label, nn::Linear& linear, const Tensor& in, const Tensor& out) {
    if (!active_ || judged_steps_ >= kJudgedSteps || !GradMode::is_enabled() || read_elsewhere_.count(label)) return;
    if (!in.defined() || !out.defined() || !in.requires_grad() || in.is_leaf() || !out.requires_grad() ||
        !out.is_floating_point())
      return;
    auto call = std::make_shared<Call>();
    call->label = label;
    call->weight = linear.weight;
    Tensor input = in, output = out;
    // The gradients as backward hands them over (the total that reached the tensor); kept as float64 copies.
    input.register_hook([call](const Tensor& g) {
      call->in_grad = g.detach().to(kFloat64).clone();
      return Tensor();
    });
    output.register_hook([call](const Tensor& g) {
      call->out_grad = g.detach().to(kFloat64).clone();
      return Tensor();
    });
    calls_.push_back(std::move(call));
  }
  HookSet hooks_;
  bool active_ = false;
  int judged_steps_ = 0;
  std::vector<std::shared_ptr<Call>> calls_;
  std::set<std::string> read_elsewhere_;
};
}  // namespace

std::unique_ptr<RunCheck> make_linear_readers_run_check(const MonitorOptions&) {
  return std::make_unique<LinearReadersRunCheck>();
}

void revise_linear_collapse(Report& gate, const TrainingHistory& h) {
  if (h.linear_inputs_read_elsewhere.empty()) return;
  for (size_t i = 0; i < gate.size(); ++i) {
    const Finding& g = gate.findings()[i];
    if (!g.is("M23", Kind::LinearCollapse) || !g.fires()) continue;
    const auto& read = h.linear_inputs_read_elsewhere;
    if (std::find(read.begin(), read.end(), g.module) == read.end()) continue;
    Finding f = g;
    f.severity = Severity::Info;
    f.title = g.title + " for the model's output, but the training loss also read the input of " + g.module +
              " another way: an embedding trained for its own sake (a center or metric loss on the features a "
              "linear head classifies)";
    f.evidence.push_back({"input of the second layer also read by the loss in training", 1.0,
                          "its gradient held more than the part the layer sent back (1e-3 of its largest entry)"});
    gate.replace(i, f);
  }
}

// Two Embedding tables looked up with the same indices whose lookups reach the output only as a
// weighted sum: a*E1[ids] + b*E2[ids] is one table, (a*E1 + b*E2)[ids]. The usual cause is a positional
// table indexed by the token ids. Found in one eval-mode forward with gradients: the indices of every pair
// of calls to two different tables are compared, then the gradients of a fixed projection of the output
// with respect to the two lookups (proportional when the two are only summed; a gate or a concatenation
// makes them differ).
std::vector<Finding> check_embeddings_one_table(nn::Module& model, const Tensor& x) {
  struct Call {
    std::string label;
    const nn::Embedding* table;
    Tensor ids, output;
  };
  std::vector<Call> calls;
  HookSet hooks;
  int tables = 0;
  for (auto& [path, m] : leaf_modules(model)) {
    const auto* e = dynamic_cast<const nn::Embedding*>(m.get());
    if (!e) continue;
    ++tables;
    const std::string label = module_label(path, *m);
    hooks.pre(m, [&calls, label, e](nn::Module&, const Tensor& in) {
      calls.push_back({label, e, in.defined() ? in.detach().clone() : in, Tensor()});
    });
    hooks.post(m, [&calls](nn::Module&, const Tensor&, const Tensor& out) {
      if (!calls.empty()) calls.back().output = out;
    });
  }
  if (tables < 2) return {};
  std::vector<Finding> out;
  try {
    QuietProbe quiet(model);
    ModeSnapshot modes(model);
    model.eval();
    EnableGradGuard eg;
    const Tensor y = model(x);
    hooks.clear();
    if (!y.defined() || !y.is_floating_point() || !y.requires_grad()) return {};
    const Tensor s = project_output(y);
    std::set<std::pair<const nn::Embedding*, const nn::Embedding*>> reported;
    for (size_t i = 0; i < calls.size(); ++i)
      for (size_t j = i + 1; j < calls.size(); ++j) {
        const Call& a = calls[i];
        const Call& b = calls[j];
        if (a.table == b.table || reported.count({a.table, b.table})) continue;
        if (!a.ids.defined() || !b.ids.defined() || a.ids.shape() != b.ids.shape() || a.ids.numel() < 2) continue;
        if (!a.output.defined() || !b.output.defined() || a.output.shape() != b.output.shape()) continue;
        if (!a.output.requires_grad() || !b.output.requires_grad()) continue;
        {
          NoGradGuard ng;
          if (amax(abs(a.ids.to(kFloat64) - b.ids.to(kFloat64))).item<double>() != 0.0) continue;
        }
        const tensor_list g = autograd::grad({s}, {a.output, b.output}, {}, true, false, true);
        if (!g[0].defined() || !g[1].defined()) continue;
        NoGradGuard ng;
        const Tensor ga = g[0].to(kFloat64).reshape({-1});
        const Tensor gb = g[1].to(kFloat64).reshape({-1});
        const double aa = sum(ga * ga).item<double>();
        const double scale = amax(abs(gb)).item<double>();
        if (!(aa > 0.0) || !(scale > 0.0)) continue;
        const double c = sum(ga * gb).item<double>() / aa;
        const double residual = amax(abs(gb - ga * c)).item<double>() / scale;
        if (residual > 1e-5) continue;
        reported.insert({a.table, b.table});
        const auto top = static_cast<int64_t>(amax(a.ids.to(kFloat64)).item<double>()) + 1;
        const int64_t rows_a = a.table->num_embeddings(), rows_b = b.table->num_embeddings();
        Finding f = detail::make("M23", Severity::Warning,
                                 a.label + " and " + b.label +
                                     " are looked up with the same indices and their lookups are only summed: "
                                     "the two tables act as one");
        f.kind = Kind::EmbeddingsOneTable;
        f.module = b.label;
        f.shape = shape_str(b.ids.shape());
        f.evidence = {{"max |indices of the first - indices of the second|", 0.0, "0 (the same indices) flags"},
                      {"gradient of the second against the first's, times a scalar (relative residual)", residual,
                       "<= 1e-5 (only summed) flags"},
                      {"rows of " + a.label, static_cast<double>(rows_a), ""},
                      {"rows of " + b.label, static_cast<double>(rows_b), ""},
                      {"largest index + 1", static_cast<double>(top), ""}};
        f.cause =
            "a second embedding table (a positional one, most often) is indexed by the same ids as the first (the "
            "token ids, a copy of the line above): the sum of two lookups of the same ids is one lookup of the "
            "summed table, so the second table adds nothing, and a positional table gives the model no "
            "information about order";
        f.fix =
            "look each table up with the indices it encodes: the token table with the token ids, a positional "
            "table with arange(T) (0..T-1) broadcast over the batch";
        out.push_back(std::move(f));
      }
  } catch (const std::exception&) {
    return out;
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
    f.cause =
        "a dropout probability above 0.5 keeps less than half of the activations (and of the gradient through "
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
    // A normalisation layer resets the scale: the drift is judged between two of them (a marker).
    if (m->type_name().find("Norm") != std::string::npos) {
      hooks.pre(m, [&layers](nn::Module&, const Tensor&) { layers.emplace_back("", -1.0); });
      continue;
    }
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
    // In training mode, as training sees the signal: a BatchNorm before a ReLU normalises it with the
    // batch's statistics (in eval mode, at initialisation, it is the identity). The running statistics
    // that forward updates are put back.
    QuietProbe quiet(model);
    ModeSnapshot modes(model);
    std::vector<Tensor> buffers = model.buffers(), saved;
    for (const Tensor& b : buffers) saved.push_back(b.detach().clone());
    model.train();
    NoGradGuard ng;
    model(x);
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].detach().copy_(saved[i]);
  }
  hooks.clear();
  // The segment (between normalisation layers) with the largest spread.
  size_t lo = layers.size(), hi = layers.size();
  double ratio = 0;
  int64_t relus = 0;
  for (size_t start = 0; start < layers.size();) {
    size_t end = start;
    while (end < layers.size() && layers[end].second != -1.0) ++end;
    size_t slo = end, shi = end;
    for (size_t i = start; i < end; ++i) {
      const double v = layers[i].second;
      ++relus;
      if (!std::isfinite(v) || !(v > 0.0)) continue;  // NaN is M12's; a constant input is M25's
      if (slo == end || v < layers[slo].second) slo = i;
      if (shi == end || v > layers[shi].second) shi = i;
    }
    if (slo != end && slo != shi && layers[shi].second / layers[slo].second > ratio) {
      ratio = layers[shi].second / layers[slo].second;
      lo = slo;
      hi = shi;
    }
    start = end + 1;
  }
  if (lo == layers.size() || lo == hi) return {};
  if (!(ratio > o.activation_variance_ratio)) return {};
  const bool shrinks = lo > hi;  // the smaller variance comes later in the forward
  Finding f =
      detail::make("M27", Severity::Warning,
                   "at initialisation the variance of the ReLU inputs " + std::string(shrinks ? "shrinks" : "grows") +
                       " " + fmt_num(ratio) + "x across the layers: " + fmt_num(layers[hi].second) + " at " +
                       layers[hi].first + ", " + fmt_num(layers[lo].second) + " at " + layers[lo].first);
  f.kind = Kind::VarianceDrift;
  f.module = layers[shrinks ? lo : hi].first;
  f.evidence = {{"largest input variance (" + layers[hi].first + ")", layers[hi].second, ""},
                {"smallest input variance (" + layers[lo].first + ")", layers[lo].second, ""},
                {"ratio", ratio, "> " + fmt_num(o.activation_variance_ratio) + " flags"},
                {"ReLU layers measured", static_cast<double>(relus), ""}};
  f.cause = shrinks
                ? "the weights are initialised too small for the depth: each layer shrinks the signal, so the last "
                  "layers see almost constant inputs and the first ones get vanishing gradients"
                : "the weights are initialised too large for the depth: each layer amplifies the signal, so the last "
                  "layers saturate or overflow and the gradients explode";
  f.fix =
      "initialise the layers before each ReLU with init::kaiming_normal_ (He: std sqrt(2 / fan_in)), or put a "
      "normalisation (BatchNorm/LayerNorm) before the activations";
  return {f};
}

// ---- M27: gradient spread in the first steps ---------------------------------------------
void GradientSpreadTracker::record(const nn::Module& model, int64_t step) {
  if (!wants(step)) return;
  NoGradGuard ng;
  if (step == 1)
    for (const auto& [name, p] : model.named_parameters()) {
      if (!p.requires_grad() || p.dim() < 2 || p.size(0) < 4 || !p.is_floating_point()) continue;
      const Tensor w = p.detach();
      const double lo = amin(w).item<double>(), hi = amax(w).item<double>();
      if (lo == hi && lo != 0.0 && std::isfinite(lo)) constant_.push_back({name, shape_of(p), lo, p.size(0)});
    }
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad() || p.dim() < 2 || p.numel() < o_.spread_min_values) continue;
    const Tensor g = p.grad();
    if (!g.defined() || !g.is_floating_point()) continue;
    // Rows are the layer's units (output channels), the rest of each row their inputs. A unit's
    // gradient row minus the mean row over the units: zero in every entry when the units are copies.
    const int64_t units = g.size(0), k = g.numel() / std::max<int64_t>(units, 1);
    if (units < 4) continue;
    auto it = std::find_if(seen_.begin(), seen_.end(), [&n = name](const Seen& s) { return s.name == n; });
    // Flagged only when below the limit at every step: one step above it rules the weight out
    // for good, and it is not measured again.
    if (it != seen_.end() && it->steps > 0 && !(it->max_relative < o_.spread_relative)) continue;
    // Read in place when the gradient is a contiguous float32/float64 CPU tensor (the usual
    // case); otherwise one float64 copy.
    const Tensor h = g.device().is_cpu() && g.is_contiguous() && (g.dtype() == kFloat32 || g.dtype() == kFloat64)
                         ? g.detach()
                         : g.detach().to(kCPU).to(kFloat64).contiguous();
    double sq = 0.0, spread = 0.0;
    bool finite = true, judged = false;
    int64_t live_values = 0;  // the entries of the rows that got a gradient
    auto measure = [&](auto tag) {
      using T = decltype(tag);
      const T* v = static_cast<const T*>(h.raw_data());
      // The mean row over the units that got a gradient, and the sum of squares, one row at a time. A row
      // that got none is left out: an embedding's rows the batch did not look up, a unit dead this step.
      std::vector<double> mean(static_cast<size_t>(k), 0.0);
      std::vector<bool> live(static_cast<size_t>(units), false);
      int64_t lived = 0;
      int bad = 0;
      for (int64_t i = 0; i < units; ++i) {
        const T* r = v + i * k;
        double rsq = 0.0;
#pragma omp simd reduction(+ : rsq) reduction(| : bad)
        for (int64_t j = 0; j < k; ++j) {
          const double x = static_cast<double>(r[j]);
          bad |= (x - x) != 0.0 ? 1 : 0;
          rsq += x * x;
          mean[static_cast<size_t>(j)] += x;
        }
        sq += rsq;
        live[static_cast<size_t>(i)] = rsq > 0.0;
        lived += rsq > 0.0;
      }
      finite = bad == 0 && std::isfinite(sq);
      if (!finite || sq == 0.0 || lived < 4) return;
      live_values = lived * k;
      for (double& m : mean) m /= static_cast<double>(lived);
      // The percentiles on at most 2048 of the deviations, at a stride coprime with the row
      // length (so every row and column is reached): the same answer for symmetric units (all
      // ~0), and a few microseconds instead of two selections over a large layer's every entry.
      int64_t stride = std::max<int64_t>(1, (h.numel() + 2047) / 2048);
      while (stride > 1 && std::gcd(stride, k) != 1) ++stride;
      std::vector<double> dev;
      dev.reserve(static_cast<size_t>(h.numel() / stride + 1));
      for (int64_t e = 0; e < h.numel(); e += stride)
        if (live[static_cast<size_t>(e / k)])
          dev.push_back(static_cast<double>(v[e]) - mean[static_cast<size_t>(e % k)]);
      if (dev.size() < 2) return;
      // Both percentiles from one buffer: the 5th, then the 95th among the values above it.
      const size_t n = dev.size(), lo = static_cast<size_t>(std::floor(0.05 * static_cast<double>(n - 1))),
                   hi = static_cast<size_t>(std::floor(0.95 * static_cast<double>(n - 1)));
      std::nth_element(dev.begin(), dev.begin() + static_cast<std::ptrdiff_t>(lo), dev.end());
      const double p5 = dev[lo];
      std::nth_element(dev.begin() + static_cast<std::ptrdiff_t>(lo), dev.begin() + static_cast<std::ptrdiff_t>(hi),
                       dev.end());
      spread = dev[hi] - p5;
      judged = true;
    };
    if (h.dtype() == kFloat32)
      measure(float{});
    else
      measure(double{});
    // NaN/Inf is O1's, an all-zero gradient M25's; fewer than 4 units with a gradient cannot be compared.
    if (!finite || sq == 0.0 || !judged) continue;
    const double rms = std::sqrt(sq / static_cast<double>(live_values));
    const double rel = spread / rms;
    if (it == seen_.end()) {
      seen_.push_back({name, shape_of(p)});
      it = seen_.end() - 1;
    }
    if (it->steps == 0 || rel > it->max_relative) {
      it->max_relative = rel;
      it->spread = spread;
      it->rms = rms;
      it->units = units;
    }
    ++it->steps;
  }
}

namespace {
constexpr const char* kRandomInitFix =
    "initialise the weights randomly: the layer's default, init::kaiming_normal_ (ReLU) or init::xavier_uniform_ "
    "(tanh/sigmoid); only biases may start at one constant";
}  // namespace

std::vector<Finding> GradientSpreadTracker::findings() const {
  std::vector<Finding> out;
  // A weight set to one constant: its units compute the same function of their inputs, so they differ
  // only by their biases, and the gradient keeps their rows alike (a rank-one update for the whole layer).
  for (const Constant& c : constant_) {
    const bool by_spread = std::any_of(seen_.begin(), seen_.end(), [&](const Seen& s) {
      return s.name == c.name && s.steps > 0 && s.max_relative < o_.spread_relative;
    });
    if (by_spread) continue;  // the spread rule below says it, with its numbers
    Finding f =
        detail::make("M27", Severity::Warning,
                     "every value of " + c.name + " is " + fmt_num(c.value) + " at the first step: its " +
                         detail::num(c.units) + " units start as copies of one another (symmetric initialisation)");
    f.kind = Kind::SymmetricUnits;
    f.parameter = c.name;
    f.shape = c.shape;
    f.evidence = {{"the one value of every entry at the first step", c.value, "one nonzero constant flags"},
                  {"units (rows)", static_cast<double>(c.units), ">= 4"}};
    f.cause =
        "the weights were set to one constant (an init meant for the bias applied to the weight, constant_ "
        "in place of a random draw): every unit computes the same weighted sum, the biases alone tell them "
        "apart, and the gradient moves their rows alike, so the layer learns as if it had far fewer units";
    f.fix = kRandomInitFix;
    out.push_back(std::move(f));
  }
  for (const Seen& s : seen_) {
    if (s.steps == 0 || !(s.max_relative < o_.spread_relative)) continue;
    Finding f = detail::make("M27", Severity::Warning,
                             "the " + detail::num(s.units) + " units of " + s.name +
                                 " get the same gradient at each of the first " + detail::num(s.steps) +
                                 " steps: its units are symmetric (5th-95th percentile spread across the "
                                 "units " +
                                 fmt_num(s.spread) + " against a root mean square of " + fmt_num(s.rms) + ")");
    f.kind = Kind::SymmetricUnits;
    f.parameter = s.name;
    f.shape = s.shape;
    f.evidence = {{"largest spread across the units / rms of the gradient over the first steps", s.max_relative,
                   "< " + fmt_num(o_.spread_relative) + " at every step flags"},
                  {"5th-95th percentile spread across the units at that step", s.spread, ""},
                  {"root mean square of the gradient", s.rms, ""},
                  {"steps judged", static_cast<double>(s.steps), ""},
                  {"units (rows)", static_cast<double>(s.units), ""}};
    f.cause =
        "the weights were initialised symmetric (one constant, or one row copied): every unit of the layer "
        "computes the same function and gets the same gradient, and gradient descent keeps them identical, "
        "so the layer works as a single unit";
    f.fix = kRandomInitFix;
    out.push_back(std::move(f));
  }
  return out;
}

// M27's gradient part during training (the monitor's run check): the first spread_steps steps.
namespace {
class GradientSpreadRunCheck final : public RunCheck {
 public:
  explicit GradientSpreadRunCheck(const RunCheckOptions& o) : spread_(o) {}
  std::string ids() const override { return "M27"; }
  uint32_t events() const override { return RunEvent::BeforeStep | RunEvent::Finish; }
  void before_step(RunContext& c, bool) override {
    if (spread_.wants(c.steps + 1)) spread_.record(c.model, c.steps + 1);
  }
  void finish(RunContext& c) override {
    c.add_all(spread_.findings());
    if (c.steps > 0) c.note_ran("M27");
  }

 private:
  GradientSpreadTracker spread_;
};
}  // namespace

std::unique_ptr<RunCheck> make_gradient_spread_run_check(const MonitorOptions& o) {
  return std::make_unique<GradientSpreadRunCheck>(o.run);
}

}  // namespace gradsleuth::debug
