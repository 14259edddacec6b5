// Behavioural probes (see behaviour.h): train/eval dependence measured, custom
// backward nodes found in the graph, and the whole-model input-gradient check.
#include "debug/checks/model/behaviour.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/observer.h"
#include "core/op_registry.h"
#include "core/ops.h"
#include "debug/checks/data/data_checks.h"
#include "debug/checks/hooks.h"
#include "debug/checks/host_copy.h"
#include "debug/checks/model/model_checks.h"
#include "debug/checks/model/model_util.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/dropout.h"
#include "nn/normalization.h"

namespace gradsleuth::debug {

// ---- modes -----------------------------------------------------------------------------------
ModeSnapshot::ModeSnapshot(nn::Module& model) {
  for (auto& [path, m] : model.named_modules()) modes_.emplace_back(m, m->is_training());
}

ModeSnapshot::~ModeSnapshot() {
  for (auto& [m, on] : modes_) m->train(on);
  for (auto& [m, on] : modes_) set_own_mode(*m, on);
}

// train() recurses: set the flag, then put each child's own flag back. Children
// keep theirs exactly because each child's train() is applied to its subtree
// before its own children are put back, in pre-order.
void set_own_mode(nn::Module& m, bool training) {
  if (m.is_training() == training) return;
  std::vector<std::pair<nn::Module*, bool>> kids;
  for (auto& [n, c] : m.named_children()) kids.emplace_back(c.get(), c->is_training());
  m.train(training);
  for (auto& [c, k] : kids) c->train(k);
}

namespace {

// The default generator's state, put back on destruction: the probe draws from
// it (dropout) and must not shift the user's random stream.
class GeneratorSnapshot {
 public:
  GeneratorSnapshot() : saved_(default_generator()) {}
  ~GeneratorSnapshot() { default_generator() = saved_; }

 private:
  Generator saved_;
};

using model_detail::GradSnapshot;  // the .grad of every parameter, put back after a probe

Tensor host64(const Tensor& t) { return t.detach().to(kCPU).to(kFloat64); }

// max|a - b| relative to max|b|; NaN when either holds a non-finite value.
double rel_diff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return std::numeric_limits<double>::infinity();
  if (a.numel() == 0) return 0.0;
  const double d = amax(abs(a - b)).item<double>();
  const double s = amax(abs(b)).item<double>();
  if (!std::isfinite(d) || !std::isfinite(s)) return std::nan("");
  return d / (s + 1e-12);
}

uint64_t buffer_version(const nn::Module& m) {
  uint64_t v = 0;
  for (const Tensor& b : m.buffers(false)) v += b.version();
  return v;
}

// The first `rows` rows of x (all of a 0-dim tensor).
Tensor first_rows(const Tensor& x, int64_t rows) {
  if (x.dim() == 0) return x;
  return x.narrow(0, 0, std::min<int64_t>(std::max<int64_t>(rows, 1), x.size(0)));
}

}  // namespace

// ---- the train/eval probe --------------------------------------------------------------------
ModeProbe probe_mode_dependence(nn::Module& model, const Tensor& x, const ModeProbeOptions& o) {
  ModeProbe probe;
  if (!x.defined()) return probe;
  ModeSnapshot modes(model);
  GradSnapshot grads(model);
  GeneratorSnapshot rng;
  QuietProbe quiet(model);  // warnings muted, every buffer restored at the end
  NoGradGuard ng;
  model.eval();

  // Each module's input in one eval-mode forward (the first call of a module used twice).
  std::vector<std::pair<std::string, nn::ModulePtr>> mods;
  std::vector<Tensor> inputs;
  {
    HookSet hooks;
    std::set<const nn::Module*> seen;
    for (auto& [path, m] : model.named_modules()) {
      if (!seen.insert(m.get()).second) continue;
      const size_t idx = mods.size();
      mods.emplace_back(path, m);
      inputs.emplace_back();
      hooks.pre(m, [&inputs, idx](nn::Module&, const Tensor& in) {
        if (!inputs[idx].defined() && in.defined()) inputs[idx] = in.detach();
      });
    }
    try {
      model(first_rows(x, o.rows));
    } catch (const std::exception&) {
      return probe;  // the forward itself fails: the gate reports that (W2)
    }
  }

  for (size_t i = 0; i < mods.size(); ++i) {
    const auto& [path, m] = mods[i];
    const Tensor& in = inputs[i];
    if (!in.defined()) continue;
    ModuleBehaviour b;
    b.path = path;
    b.label = module_label(path, *m);
    b.module = m;
    try {
      // A fresh copy per call: a layer that works in place (x.mul_(mask)) must
      // not change the input the next call gets.
      auto call = [&]() { return (*m)(in.clone()); };
      const Tensor e1 = call(), e2 = call();
      if (!e1.defined() || !e1.is_floating_point()) continue;
      const Tensor e = host64(e1);
      const double eval_diff = rel_diff(host64(e2), e);
      set_own_mode(*m, true);
      const uint64_t v0 = buffer_version(*m);
      const Tensor t1 = host64(call());
      b.updates_buffers = buffer_version(*m) != v0;
      const Tensor t2 = host64(call());
      const double train_diff = rel_diff(t2, t1), mode_diff = rel_diff(t1, e);
      if (std::isnan(eval_diff) || std::isnan(train_diff) || std::isnan(mode_diff)) {
        set_own_mode(*m, false);
        continue;  // non-finite outputs: M12's business, not a mode comparison
      }
      b.eval_stochastic = eval_diff > o.tolerance;
      b.stochastic = !b.eval_stochastic && train_diff > o.tolerance;
      b.mode_dependent = b.stochastic || (!b.eval_stochastic && mode_diff > o.tolerance);
      if (b.stochastic) {
        const MaskPattern drawn = mask_pattern(t1, e);
        b.occludes = drawn.mask && drawn.occlusion;
        // E[train(x)] against eval(x): least squares s_k = <y_k, e> / <e, e> per draw.
        const double ee = sum(e * e).item<double>();
        if (ee > 0.0) {
          const int64_t n = std::max<int64_t>(e.numel(), 1);
          b.draws = std::clamp<int64_t>((o.target_samples + n - 1) / n, o.min_draws, o.max_draws);
          std::vector<double> s;
          s.push_back(sum(t1 * e).item<double>() / ee);
          s.push_back(sum(t2 * e).item<double>() / ee);
          while (static_cast<int64_t>(s.size()) < b.draws) s.push_back(sum(host64(call()) * e).item<double>() / ee);
          b.draws = static_cast<int64_t>(s.size());
          double mean = 0.0, var = 0.0;
          for (double v : s) mean += v;
          mean /= static_cast<double>(s.size());
          for (double v : s) var += (v - mean) * (v - mean);
          var /= static_cast<double>(s.size() - 1);
          b.scale = mean;
          b.scale_se = std::sqrt(var / static_cast<double>(s.size()));
        }
      }
      set_own_mode(*m, false);
    } catch (const std::exception&) {
      set_own_mode(*m, false);
      continue;  // e.g. BatchNorm in train mode on one row: nothing to compare
    }
    if (b.mode_dependent || b.eval_stochastic) probe.modules.push_back(std::move(b));
  }
  return probe;
}

std::vector<nn::ModulePtr> ModeProbe::stochastic_modules() const {
  std::vector<nn::ModulePtr> out;
  for (const ModuleBehaviour& b : modules)
    if (b.stochastic) out.push_back(b.module);
  return out;
}

bool ModeProbe::any_deterministic_mode_dependent() const {
  for (const ModuleBehaviour& b : modules)
    if (b.mode_dependent && !b.stochastic) return true;
  return false;
}

const ModuleBehaviour* ModeProbe::find(const nn::Module* m) const {
  for (const ModuleBehaviour& b : modules)
    if (b.module.get() == m) return &b;
  return nullptr;
}

std::vector<Finding> ModeProbe::findings(const ModeProbeOptions& o) const {
  std::vector<Finding> out;
  for (const ModuleBehaviour& b : modules) {
    if (!b.stochastic || b.draws == 0) continue;
    // A module with parameters maps its random part through learned, nonlinear layers (a block with
    // a dropout between two Linear + ReLU): the mean of a ReLU of noisy input is above the ReLU of
    // the mean, so its training-mode mean is not its eval output even with inverted dropout. The
    // rule judges the random layer itself (a hand-written dropout holds no parameter).
    if (b.module && !b.module->parameters().empty()) continue;
    // Patches of each plane zeroed (Cutout, random erasing): an augmentation, whose evaluation sees whole inputs.
    if (b.occludes) continue;
    const double off = std::fabs(b.scale - 1.0);
    if (!(off > o.scale_tolerance && off > 4.0 * b.scale_se)) continue;
    Finding f;
    f.check = "M2";
    f.severity = Severity::Error;
    f.module = b.label;
    f.title = b.label + " is random in training mode, and its mean training-mode output is " + fmt_num(b.scale) +
              " x its eval-mode output (1 expected)";
    f.evidence = {
        {"E[train(x)] / eval(x) (least squares)", b.scale, "|s - 1| > " + fmt_num(o.scale_tolerance) + " flags"},
        {"standard error", b.scale_se, ""},
        {"draws on the same input", static_cast<double>(b.draws), ""}};
    f.cause =
        "the layer drops or perturbs activations at random in training without keeping their expected "
        "value: a hand-written dropout that zeroes with probability p but does not scale the kept values "
        "by 1/(1-p)" +
        (b.scale > 0.0 && b.scale < 1.0 ? " (here p ~ " + fmt_num(1.0 - b.scale) + ")" : std::string()) +
        ". The layers after it learn on activations " + fmt_num(b.scale) +
        " times the size of those they get in evaluation, so every evaluated prediction is off";
    f.fix =
        "scale the kept values by 1/(1-p) in training (inverted dropout, as nn::Dropout and gs::dropout do), "
        "or use nn::Dropout";
    out.push_back(std::move(f));
  }
  return out;
}

void set_mode_without_randomness(nn::Module& model, bool training, const ModeProbe& probe) {
  model.train(training);
  for (const nn::ModulePtr& m : probe.stochastic_modules()) set_own_mode(*m, false);
}

// ---- M2 at the end of a run: the eval path against the training path ---------------------------
std::vector<Finding> check_mode_agreement(const ModeAgreement& m, const ModelCheckOptions& o) {
  if (m.examples < 8) return {};
  const bool by_accuracy = std::isfinite(m.eval_accuracy) && std::isfinite(m.train_accuracy);
  const bool differs = by_accuracy ? m.eval_accuracy < m.train_accuracy - o.mode_accuracy_gap
                                   : std::isfinite(m.eval_loss) && std::isfinite(m.train_loss) && m.train_loss >= 0 &&
                                         m.eval_loss > o.mode_loss_ratio * m.train_loss + 0.1;
  if (!differs) return {};
  Finding f;
  f.check = "M2";
  f.severity = Severity::Warning;
  f.kind = Kind::EvalPathDiffers;
  f.module = "(model)";
  f.title = "on the same training rows the trained model does far worse in eval mode than in training mode (" +
            (by_accuracy ? "accuracy " + fmt_num(m.eval_accuracy) + " against " + fmt_num(m.train_accuracy)
                         : "loss " + fmt_num(m.eval_loss) + " against " + fmt_num(m.train_loss)) +
            "): its eval path computes something else";
  f.evidence = {{"eval-mode loss on training rows", m.eval_loss, ""},
                {"training-mode loss on them (randomness off)", m.train_loss, ""},
                {"training rows scored", static_cast<double>(m.examples), ""}};
  if (by_accuracy) {
    f.evidence.push_back(
        {"eval-mode accuracy", m.eval_accuracy, "< the next - " + fmt_num(o.mode_accuracy_gap) + " warns"});
    f.evidence.push_back({"training-mode accuracy (randomness off)", m.train_accuracy, ""});
  }
  f.cause =
      "a layer or a branch that the forward takes only in eval mode computes something else than in training: "
      "a hand-written normaliser whose eval branch uses its running statistics wrongly (the variance for "
      "its square root), halves joined in another order at inference, a branch on is_training() that was "
      "never trained; validation and inference run that path";
  f.fix =
      "compare the model's outputs on one batch in train() and eval() (dropout off): find the module whose "
      "output differs most and fix its eval branch";
  return {f};
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
  // random at evaluation (a dropout called with training = true whatever the mode): its validation
  // scores are a draw, and no derivative can be taken of it, so M13 stops here.
  {
    NoGradGuard ng;
    const Tensor at = x64.detach();
    const Tensor y1 = model(at), y2 = model(at);
    if (y1.defined() && y2.defined() && y1.is_floating_point() && y1.shape() == y2.shape() && y1.numel() > 0) {
      const double scale = amax(abs(y1)).item<double>();
      const double moved = amax(abs(y1 - y2)).item<double>();
      if (std::isfinite(scale) && moved > 1e-9 * (1.0 + scale)) {
        Finding f;
        f.check = "M2";
        f.severity = Severity::Warning;
        f.kind = Kind::RandomAtEval;
        f.module = module_label("", model);
        f.shape = shape_of(x64);
        f.title = "in eval mode the model's output changes between two calls on the same input (by up to " +
                  fmt_num(moved) + "): something random runs at evaluation";
        f.evidence = {{"largest change between the two outputs", moved, "> 1e-9 x (1 + largest output) warns"},
                      {"largest output", scale, ""}};
        f.cause =
            "a dropout (or noise) applied whatever the mode: a functional dropout called with training = "
            "true, or a random draw in forward() that does not ask is_training(); validation then scores "
            "a thinned model, differently each time";
        f.fix =
            "pass is_training() to functional dropout (dropout(h, p, is_training())), or use nn::Dropout; "
            "draw noise only when is_training()";
        out.push_back(std::move(f));
        return out;
      }
    }
  }
  // A step 10x below gradcheck's: the chance that it crosses a kink left after the
  // jitter is 10x smaller, and float64 rounding (1e-16 |f| / 1e-7) stays far below rtol.
  const double eps = std::min(opts.eps, 1e-7);
  Tensor v;
  {
    Tensor y = model(x64);
    if (!y.defined() || !y.is_floating_point() || !y.requires_grad()) return out;  // no path to the input: M6/M5
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
    const double n = (f(base + u * eps) - f(base - u * eps)) / (2 * eps);
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
  out.push_back(std::move(fd));
  return out;
}

// ---- M2 and M17 during training (the monitor's run check) --------------------------------------
// Which modules ran in training mode in each forward, whether a backward followed (a tensor hook on
// the output), and whose buffers moved: a pass of forwards that no optimizer step followed before
// the epoch was recorded is an evaluation. The probe of which layers depend on the mode runs once,
// when first needed.
namespace {
class ModeRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "M2, M17"; }
  uint32_t events() const override {
    return RunEvent::Attach | RunEvent::Forward | RunEvent::AfterStep | RunEvent::Epoch | RunEvent::Pause |
           RunEvent::Warning | RunEvent::Detach;
  }
  void attach(RunContext& c) override;
  void forward(RunContext& c, const Tensor& x) override;
  void after_step(RunContext& c, bool) override {
    check_training_mode(c);
    flush_held(c);
    reset_pass();  // the forwards so far were training forwards
  }
  void epoch(RunContext& c, const EpochRecord&) override {
    check_eval_pass(c);
    reset_pass();
  }
  // A dropout layer's own warning (run in training mode under no_grad) is held until the pass ends:
  // repeated passes of one input are Monte Carlo dropout (see check_eval_pass).
  void flush_held(RunContext& c) {
    for (Finding f : held_) {
      if (mc_dropout()) soften_mc_dropout(f);
      if (pass_stats_refresh_) soften_stats_refresh(f);
      c.add(std::move(f));
    }
    held_.clear();
  }
  // A pass under no_grad in training mode, after training, whose BatchNorm layers began it with their
  // running statistics reset (num_batches_tracked at 0): the statistics recomputed for new weights, as
  // PyTorch's swa_utils.update_bn does for averaged weights.
  static void soften_stats_refresh(Finding& f) {
    f.severity = Severity::Info;
    f.title += ", its running statistics reset just before: they are being recomputed (as SWA's update_bn does)";
    f.cause =
        "averaged or otherwise rewritten weights need BatchNorm statistics of their own: resetting them and "
        "forwarding the training data in training mode under no_grad recomputes them";
    f.fix = "none needed; evaluate afterwards in eval mode";
  }
  // The pass forwarded one input kMcPasses times in a row or more under no_grad: Monte Carlo dropout
  // (Gal and Ghahramani, "Dropout as a Bayesian Approximation", 2016) samples predictions so. Two
  // forwards of a batch (its loss, then its accuracy) are not.
  static constexpr int64_t kMcPasses = 5;
  bool mc_dropout() const { return pass_repeat_run_ + 1 >= kMcPasses; }
  static void soften_mc_dropout(Finding& f) {
    f.severity = Severity::Info;
    f.title += ", on one input " + std::to_string(kMcPasses) +
               " times in a row or more: sampled predictions (Monte Carlo dropout)";
    f.cause =
        "dropout kept on at evaluation and the same input forwarded many times: Monte Carlo dropout averages "
        "those passes for a prediction and its uncertainty";
    f.fix = "none needed, if the sampling is meant; the score the Session reads is its own, in eval mode";
  }
  void pause(RunContext&, bool on) override { probing_ = on; }
  void warning(RunContext&, const gradsleuth::Warning& w, Finding& f) override {
    if (w.check != "M2") return;
    // Raised by a layer of another model (an averaged copy whose BatchNorm statistics are being
    // recomputed, a teacher): the watched model's own layers were not running.
    if (own_layers_running_ == 0) {
      f.check.clear();
      return;
    }
    f.title = w.where + " ran in training mode during an evaluation (no_grad)";
    f.fix = "call model.eval() before evaluating and model.train() afterwards";
    warned_.push_back(w.where);
    held_.push_back(f);
    f.check.clear();  // held: added when the pass ends
  }
  void detach(RunContext& c) override {
    flush_held(c);
    hooks_.clear();
  }

 private:
  void ensure_probe(RunContext& c);
  void check_training_mode(RunContext& c);
  void check_eval_pass(RunContext& c);
  void reset_pass() {
    pass_forwards_ = 0;
    own_layers_running_ = 0;  // (a forward that threw left its count up)
    pass_stats_refresh_ = false;
    pass_repeat_run_ = pass_repeat_now_ = 0;
    last_input_ = 0;
    pass_backward_ = pass_grad_mode_ = false;
    pass_x_ = Tensor();
    std::fill(pass_train_.begin(), pass_train_.end(), 0);
    std::fill(pass_buffers_.begin(), pass_buffers_.end(), 0);
    std::fill(pass_eval_.begin(), pass_eval_.end(), 0);
  }
  HookSet hooks_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // the output hooks' weak token
  std::vector<std::pair<nn::ModulePtr, std::string>> modules_;  // each module once, with its label
  std::vector<char> pass_train_, pass_buffers_, pass_eval_;     // per module, during the pending pass
  std::vector<char> buffers_moved_, m17_named_;                 // per module, over the run
  std::vector<uint64_t> buffer_versions_;                       // per module: before its forward
  int64_t pass_forwards_ = 0;
  int64_t own_layers_running_ = 0;  // the watched model's Dropout and BatchNorm layers inside a forward now
  bool pass_backward_ = false, pass_grad_mode_ = false, probing_ = false, eval_in_training_warned_ = false;
  bool pass_stats_refresh_ = false;  // the pass began with every training-mode BatchNorm's statistics reset
  Tensor pass_x_;                    // the pass's first input, to probe the model with
  std::vector<Finding> held_;        // the layers' own M2 warnings of the pending pass
  uint64_t last_input_ = 0;          // the fingerprint of the pass's last no_grad forward's input
  int64_t pass_repeat_now_ = 0, pass_repeat_run_ = 0;  // forwards of one input in a row: now, longest
  std::optional<ModeProbe> probe_;   // which modules depend on the mode
  std::vector<std::string> warned_;  // where the layers' own M2 warnings came from
};

void ModeRunCheck::attach(RunContext& c) {
  std::set<const nn::Module*> seen;
  for (auto& [path, m] : c.model.named_modules())
    if (seen.insert(m.get()).second) modules_.emplace_back(m, module_label(path, *m));
  for (auto* v : {&pass_train_, &pass_buffers_, &pass_eval_, &buffers_moved_, &m17_named_})
    v->assign(modules_.size(), 0);
  buffer_versions_.assign(modules_.size(), 0);
  auto root = c.model.named_modules().front().second;
  std::weak_ptr<bool> alive = alive_;
  hooks_.post(root, [this, alive](nn::Module&, const Tensor&, const Tensor& y) {
    // (Only on a graph output: a hook on a leaf would stay for good and pile up.)
    if (probing_ || !y.defined() || !y.grad_fn()) return;
    Tensor out = y;
    out.register_hook([this, alive](const Tensor&) {
      if (alive.lock()) pass_backward_ = true;
      return Tensor();
    });
  });
  // Running statistics (any module's buffers) that move during a forward: a few integer reads.
  for (size_t i = 0; i < modules_.size(); ++i) {
    if (modules_[i].first->buffers(false).empty()) continue;
    auto version = [](const nn::Module& m) {
      uint64_t v = 0;
      for (const Tensor& b : m.buffers(false)) v += b.version();
      return v;
    };
    hooks_.pre(
        modules_[i].first,
        [this, i, version](nn::Module& self, const Tensor&) {
          if (!probing_) buffer_versions_[i] = version(self);
        },
        false);
    hooks_.post(
        modules_[i].first,
        [this, i, version](nn::Module& self, const Tensor&, const Tensor&) {
          if (!probing_ && version(self) != buffer_versions_[i]) pass_buffers_[i] = buffers_moved_[i] = 1;
        },
        false);
  }
  // M17: a BatchNorm evaluated with no (or never updated) running statistics.
  // The layers that raise M2 warnings themselves (nn::Dropout, the BatchNorms): a warning raised while
  // none of the watched model's runs comes from another model's layer.
  for (auto& [path, m] : c.model.named_modules()) {
    if (!dynamic_cast<nn::BatchNormBase*>(m.get()) && !dynamic_cast<nn::Dropout*>(m.get())) continue;
    hooks_.pre(
        m, [this](nn::Module&, const Tensor&) { ++own_layers_running_; }, false);
    hooks_.post(
        m,
        [this](nn::Module&, const Tensor&, const Tensor&) {
          own_layers_running_ = std::max<int64_t>(own_layers_running_ - 1, 0);
        },
        false);
  }
  for (auto& [path, m] : c.model.named_modules()) {
    if (!dynamic_cast<nn::BatchNormBase*>(m.get())) continue;
    const std::string label = module_label(path, *m);
    hooks_.pre(m, [this, label, &c](nn::Module& self, const Tensor&) {
      if (self.is_training() || probing_) return;
      auto& bn = static_cast<nn::BatchNormBase&>(self);
      const bool none = !bn.track_running_stats();
      if (!none && bn.num_batches_tracked.item<int64_t>() > 0) return;
      if (!none && c.steps == 0) return;  // evaluating before training: the statistics are legitimately fresh
      Finding f = batchnorm_eval_finding(label, none, c.steps);
      f.step = c.step_now();
      c.add(std::move(f));
    });
  }
}

void ModeRunCheck::forward(RunContext& c, const Tensor& x) {
  if (pass_forwards_++ == 0) {
    pass_x_ = x;
    pass_grad_mode_ = GradMode::is_enabled();
  }
  if (!pass_stats_refresh_ && !GradMode::is_enabled() && c.steps > 0) {
    // Every BatchNorm in training mode with its statistics at their start (this forward may have
    // counted itself already), after training steps, under no_grad: a refresh of the statistics.
    int64_t norms = 0, reset = 0;
    for (const auto& [m, label] : modules_) {
      const auto* bn = dynamic_cast<const nn::BatchNormBase*>(m.get());
      if (!bn || !bn->is_training() || !bn->track_running_stats()) continue;
      ++norms;
      reset += bn->num_batches_tracked.item<int64_t>() <= 1;
    }
    pass_stats_refresh_ = norms > 0 && reset == norms;
  }
  if (!GradMode::is_enabled() && x.defined() && x.device() == kCPU) {
    const uint64_t fp = batch_fingerprint(x);
    pass_repeat_now_ = fp == last_input_ && pass_forwards_ > 1 ? pass_repeat_now_ + 1 : 0;
    pass_repeat_run_ = std::max(pass_repeat_run_, pass_repeat_now_);
    last_input_ = fp;
  }
  for (size_t i = 0; i < modules_.size(); ++i) {
    const bool on = modules_[i].first->is_training();
    pass_train_[i] |= on ? 1 : 0;
    pass_eval_[i] |= on ? 0 : 1;
  }
}

void ModeRunCheck::ensure_probe(RunContext& c) {
  if (probe_) return;
  c.pause(true);  // the probe's forwards are not the user's
  try {
    probe_ = probe_mode_dependence(c.model, pass_x_);
  } catch (const std::exception&) {
    probe_ = ModeProbe{};
  }
  c.pause(false);
}

void ModeRunCheck::check_training_mode(RunContext& c) {
  // A training step (a backward reached the output) whose forward ran layers that compute
  // differently by mode (dropout, BatchNorm, the user's own) in eval mode: model.eval() was
  // left on, so dropout never drops and BatchNorm normalises with running statistics.
  if (eval_in_training_warned_ || pass_forwards_ == 0 || !pass_backward_ || !pass_x_.defined()) return;
  if (std::none_of(pass_eval_.begin(), pass_eval_.end(), [](char e) { return e != 0; })) return;
  ensure_probe(c);
  std::vector<std::string> labels;
  for (size_t i = 0; i < modules_.size(); ++i) {
    if (!pass_eval_[i] || pass_train_[i]) continue;
    const ModuleBehaviour* b = probe_->find(modules_[i].first.get());
    if (b && b->mode_dependent) labels.push_back(modules_[i].second);
  }
  if (labels.empty()) return;
  eval_in_training_warned_ = true;
  std::string list;
  for (size_t i = 0; i < labels.size() && i < 4; ++i) list += (i ? ", " : "") + labels[i];
  if (labels.size() > 4) list += ", ...";
  // model.eval() left on puts the whole model, its root included, in eval mode; a model in
  // training mode with some of its parts switched to eval (BatchNorm frozen while fine-tuning)
  // was set so on purpose.
  const bool root_training = pass_train_[0] && !pass_eval_[0];
  Finding f;
  f.check = "M2";
  f.severity = root_training ? Severity::Info : Severity::Warning;
  f.module = labels.front();
  f.title = root_training ? "training step " + std::to_string(c.steps) + " ran " + list +
                                " in eval mode inside a model in training mode: parts kept in eval mode on "
                                "purpose (BatchNorm frozen while fine-tuning)"
                          : "training step " + std::to_string(c.steps) + " ran " + list +
                                " in eval mode: the model is trained in evaluation mode";
  f.evidence = {
      {"mode-dependent layers in eval mode during a training step", static_cast<double>(labels.size()), "any warns"},
      {"the model itself in training mode", root_training ? 1.0 : 0.0, "1: parts set to eval on purpose (info)"}};
  if (root_training) {
    f.cause = "the model is in training mode and only these layers were switched to eval: their running "
              "statistics stay as they are, as fine-tuning with frozen BatchNorm intends";
    f.fix = "none needed when intended; if not, call model.train() after setting the parts' modes";
    c.add(std::move(f));
    return;
  }
  f.cause =
      "model.eval() was called (for an evaluation, or by mistake) and model.train() never followed, so dropout "
      "does not drop and BatchNorm normalises with its running statistics instead of the batch's while "
      "training";
  f.fix = "call model.train() before the training loop (and after every evaluation)";
  c.add(std::move(f));
}

void ModeRunCheck::check_eval_pass(RunContext& c) {
  // Forwards that no backward and no optimizer step followed before the epoch was recorded: an
  // evaluation, under no_grad or not. Modules that ran in training mode in it matter when their
  // output depends on the mode, which the probe measures (a hand-written dropout or BatchNorm as
  // well as nn's).
  flush_held(c);
  const bool eval_pass = pass_forwards_ > 0 && !pass_backward_ && pass_x_.defined();
  const bool any_train = std::any_of(pass_train_.begin(), pass_train_.end(), [](char t) { return t != 0; });
  // M17 for a BatchNorm-like layer of the user's own (nn::BatchNorm has its own hook): evaluated
  // in eval mode after training, with buffers that never moved.
  auto stale_at = [&](size_t i) {
    return pass_eval_[i] && !buffers_moved_[i] && !m17_named_[i] &&
           !dynamic_cast<const nn::BatchNormBase*>(modules_[i].first.get()) &&
           !modules_[i].first->buffers(false).empty();
  };
  bool stale = false;
  for (size_t i = 0; i < modules_.size(); ++i) stale = stale || stale_at(i);
  if (!eval_pass || (!any_train && !(stale && c.steps > 0))) return;
  ensure_probe(c);
  auto buffer_names = [](const nn::Module& m) {
    std::string names;
    for (auto& [n, t] : m.named_buffers(false)) names += (names.empty() ? "" : ", ") + n;
    return names;
  };
  for (size_t i = 0; i < modules_.size() && stale && c.steps > 0; ++i) {
    if (!stale_at(i)) continue;
    const ModuleBehaviour* b = probe_->find(modules_[i].first.get());
    if (!b || !b->mode_dependent || b->stochastic) continue;
    m17_named_[i] = 1;
    c.add(stale_buffers_finding(modules_[i].second, buffer_names(*modules_[i].first), c.steps));
  }
  for (size_t i = 0; i < modules_.size(); ++i) {
    if (!pass_train_[i]) continue;
    const nn::Module& m = *modules_[i].first;
    const ModuleBehaviour* b = probe_->find(&m);
    if (!b || !b->mode_dependent) continue;
    const bool stats = pass_buffers_[i] != 0;
    bool warned = false;  // the layer's own M2 warning already said it (nn::Dropout, nn::BatchNorm)
    for (const std::string& w : warned_) warned = warned || w.rfind(m.type_name() + "(", 0) == 0;
    if (warned && !stats) continue;
    const std::string& label = modules_[i].second;
    const std::string names = buffer_names(m);
    Finding f;
    f.check = "M2";
    f.severity = Severity::Warning;
    f.module = label;
    f.title =
        stats ? label +
                    " ran in training mode during an evaluation pass, and the evaluation data updated its "
                    "running statistics (" +
                    names + ")"
              : label + " ran in training mode during an evaluation pass" + (pass_grad_mode_ ? "" : " (under no_grad)");
    f.evidence = {{"forwards in the pass", static_cast<double>(pass_forwards_),
                   "no backward and no optimizer step followed them before the epoch was recorded"},
                  {"random in training mode", b->stochastic ? 1.0 : 0.0, ""},
                  {"buffers changed by the pass", stats ? 1.0 : 0.0, ""}};
    f.cause = std::string(b->stochastic ? "the layer is random in training mode (dropout-like): the evaluation is "
                                          "noisy and pessimistic"
                                        : "the layer computes differently in training mode (BatchNorm-like: the "
                                          "batch's statistics instead of the running ones)") +
              (stats ? "; and its buffers " + names +
                           " moved towards the evaluation data, so validation data "
                           "leaked into the model's running statistics and every later evaluation uses them"
                     : "");
    f.fix =
        "call model.eval() before the evaluation loop and model.train() after it (no_grad alone does not "
        "change the mode)";
    if (b->stochastic && !stats && mc_dropout()) soften_mc_dropout(f);
    if (!b->stochastic && pass_stats_refresh_) soften_stats_refresh(f);
    c.add(std::move(f));
  }
}
}  // namespace

std::unique_ptr<RunCheck> make_mode_run_check(const MonitorOptions&) { return std::make_unique<ModeRunCheck>(); }

}  // namespace gradsleuth::debug
