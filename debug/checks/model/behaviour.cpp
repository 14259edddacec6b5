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

using model_detail::first_rows;
using model_detail::GradSnapshot;  // the .grad of every parameter, put back after a probe
using model_detail::host64;

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

}  // namespace

// ---- the train/eval probe --------------------------------------------------------------------
ModeProbe probe_mode_dependence(nn::Module& model, const Tensor& x, const ModeProbeOptions& o) {
  ModeProbe probe;
  if (!x.defined()) return probe;
  ModeSnapshot modes(model);
  GradSnapshot grads(model);
  QuietProbe quiet(model);  // warnings muted, every buffer and the random stream restored at the end
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

bool ModeProbe::any_running_statistics() const {
  for (const ModuleBehaviour& b : modules)
    if (b.mode_dependent && !b.stochastic && b.updates_buffers) return true;
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
  const bool losses = std::isfinite(m.eval_loss) && std::isfinite(m.train_loss) && m.train_loss >= 0;
  // With accuracies, a loss far above in eval mode counts too where the accuracy also fell: a hand-written
  // dropout whose mask was drawn once trains one half of the units, and eval mode switches the other half
  // on (accuracy 0.82 against 0.87, loss 1.00 against 0.31). Not with running statistics: the whole
  // training set as one batch takes a step per epoch, and BatchNorm's averages are still far off.
  const bool loss_up = by_accuracy ? losses && !m.running_statistics &&
                                         m.eval_loss > o.mode_loss_ratio_with_accuracy * m.train_loss + 0.1 &&
                                         m.eval_accuracy < m.train_accuracy
                                   : losses && m.eval_loss > o.mode_loss_ratio * m.train_loss + 0.1;
  const bool differs = (by_accuracy && m.eval_accuracy < m.train_accuracy - o.mode_accuracy_gap) || loss_up;
  if (!differs) return {};
  Finding f;
  f.check = "M2";
  f.severity = Severity::Warning;
  f.kind = Kind::EvalPathDiffers;
  f.module = "(model)";
  f.title =
      "on the same training rows the trained model does far worse in eval mode than in training mode (" +
      (by_accuracy ? "accuracy " + fmt_num(m.eval_accuracy) + " against " + fmt_num(m.train_accuracy) + ", " : "") +
      "loss " + fmt_num(m.eval_loss) + " against " + fmt_num(m.train_loss) + "): its eval path computes something else";
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

// ---- M2: two eval-mode calls on one input ------------------------------------------------------
std::vector<Finding> check_repeat_calls(nn::Module& model, const Tensor& x, int shuffled) {
  std::vector<Finding> out;
  if (!x.defined()) return out;
  ModeSnapshot modes(model);
  QuietProbe quiet(model);  // buffers put back, warnings muted
  NoGradGuard ng;
  model.eval();
  const Tensor at = x.detach();
  // The largest change between two outputs where it is above tol x (1 + the largest output), else 0.
  auto moved = [](const Tensor& a, const Tensor& b, double tol, double& scale) {
    if (!a.defined() || !b.defined() || !a.is_floating_point() || a.shape() != b.shape() || a.numel() == 0) return 0.0;
    scale = amax(abs(a.to(kFloat64))).item<double>();
    const double d = amax(abs(a.to(kFloat64) - b.to(kFloat64))).item<double>();
    return std::isfinite(scale) && std::isfinite(d) && d > tol * (1.0 + scale) ? d : 0.0;
  };
  double scale = 0.0;
  // Each call from the same state of the random generator: outputs that still differ were made from
  // something the model keeps between calls, not from a draw.
  Tensor y1, y2;
  {
    GeneratorSnapshot rng;
    y1 = model(at);
  }
  {
    GeneratorSnapshot rng;
    y2 = model(at);
  }
  // A state changes the output by far more than rounding; a layer that refines itself a little at each
  // call (a power iteration run in eval mode too) is below 1e-5.
  const double kept = moved(y1, y2, 1e-5, scale);
  if (kept > 0.0) {
    Finding f;
    f.check = "M2";
    f.kind = Kind::StateBetweenCalls;
    f.severity = shuffled == 1 ? Severity::Warning : Severity::Info;
    f.module = module_label("", model);
    f.shape = shape_of(at);
    f.title = "in eval mode the model's output for one batch changes when the batch is passed again (by up to " +
              fmt_num(kept) + ", the random generator reset): the model carries state from one call to the next" +
              (shuffled == 1   ? ", while the training loader shuffles its rows: each batch starts from the state "
                                 "an unrelated batch left"
               : shuffled == 0 ? "; the training loader keeps its order, as a state carried over one stream "
                                 "(truncated backpropagation through time) needs"
                               : "");
    f.evidence = {{"largest change between the two outputs", kept, "> 1e-5 x (1 + largest output)"},
                  {"largest output", scale, ""},
                  {"training loader shuffles",
                   shuffled == 1   ? 1.0
                   : shuffled == 0 ? 0.0
                                   : std::nan(""),
                   "1 warns: consecutive batches are unrelated examples"}};
    if (shuffled == 1) {
      f.cause =
          "a state kept from the previous call (a recurrent model's final hidden state, a running value in a "
          "member) where each example should start fresh: code written for one long stream applied to "
          "independent, shuffled sequences";
      f.fix =
          "start every batch from a fresh state (zeros) inside forward(); keep a state across batches only over "
          "one stream read in order, and reset it at each epoch";
    }
    out.push_back(std::move(f));
    return out;
  }
  const Tensor y3 = model(at), y4 = model(at);      // the generator moves on between these two
  const double drawn = moved(y3, y4, 1e-5, scale);  // float32 kernels may round a call apart by ~1e-7
  if (drawn > 0.0) {
    // A model that samples from a distribution it computes: every draw of the forward multiplied by a
    // spread computed per example (z = mu + sigma * eps, a VAE's latent), no dropout, no other noise.
    const model_detail::ForwardDraws draws = model_detail::forward_draws(model, at);
    const bool sampling = !draws.dropout && draws.scaled > 0 && draws.other == 0;
    Finding f;
    f.check = "M2";
    f.severity = sampling ? Severity::Info : Severity::Warning;
    f.kind = Kind::RandomAtEval;
    f.module = module_label("", model);
    f.shape = shape_of(at);
    f.title = "in eval mode the model's output changes between two calls on the same input (by up to " +
              fmt_num(drawn) + "): " +
              (sampling ? "the model samples from a distribution it computes (each draw scaled by a spread "
                          "computed for each example: z = mu + sigma * eps), by design"
                        : "something random runs at evaluation");
    f.evidence = {{"largest change between the two outputs", drawn, "> 1e-5 x (1 + largest output) warns"},
                  {"largest output", scale, ""},
                  {"draws of the forward scaled by a spread it computed per example", static_cast<double>(draws.scaled),
                   "all of them, and no dropout: a sampling model (info)"},
                  {"other draws (noise added, masks) and dropout ops",
                   static_cast<double>(draws.other + (draws.dropout ? 1 : 0)), "0"}};
    f.cause =
        "a dropout (or noise) applied whatever the mode: a functional dropout called with training = "
        "true, or a random draw in forward() that does not ask is_training(); validation then scores "
        "a thinned model, differently each time";
    f.fix =
        "pass is_training() to functional dropout (dropout(h, p, is_training())), or use nn::Dropout; "
        "draw noise only when is_training()";
    if (sampling) {
      f.cause =
          "a reparameterised sample in forward() (a VAE's latent, a stochastic policy's action): each "
          "evaluation is one draw, and a validation loss a one-sample estimate";
      f.fix = "none needed for a sampling model; to score it without noise, use the mean (z = mu) in eval mode";
    }
    out.push_back(std::move(f));
  }
  return out;
}

void revise_random_at_eval(Report& gate, const TrainingHistory& h) {
  if (h.built_in_forward.empty()) return;
  for (size_t i = 0; i < gate.findings().size(); ++i) {
    Finding f = gate.findings()[i];
    if (!f.is("M2", Kind::RandomAtEval) || !f.fires()) continue;
    f.severity = Severity::Info;
    f.title += " (the layer built in forward() draws new weights at every call: M5)";
    f.fix = "see M5: construct the layer once, in the constructor";
    gate.replace(i, f);
  }
}

bool repeat_calls_reported(const Report& gate) {
  return std::any_of(gate.findings().begin(), gate.findings().end(), [](const Finding& f) {
    return f.is("M2", Kind::StateBetweenCalls) || f.is("M2", Kind::RandomAtEval);
  });
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

// The leaf modules one forward of `sample` calls, ordered by each one's last call (a ReLU used after every
// layer sits at its last use), in eval mode without gradients; registration order where the forward fails.
std::vector<std::pair<std::string, nn::ModulePtr>> leaves_by_last_call(nn::Module& model, const Tensor& sample) {
  std::vector<std::pair<std::string, nn::ModulePtr>> leaves = leaf_modules(model);
  if (!sample.defined()) return leaves;
  std::vector<int64_t> last(leaves.size(), -1);
  int64_t clock = 0;
  try {
    HookSet hooks;
    for (size_t i = 0; i < leaves.size(); ++i)
      hooks.post(leaves[i].second,
                 [&last, &clock, i](nn::Module&, const Tensor&, const Tensor&) { last[i] = clock++; });
    QuietProbe quiet(model);
    ModeSnapshot modes(model);
    model.eval();
    NoGradGuard ng;
    model(sample);
  } catch (const std::exception&) {
    return leaves;
  }
  std::vector<size_t> called;
  for (size_t i = 0; i < leaves.size(); ++i)
    if (last[i] >= 0) called.push_back(i);
  if (called.empty()) return leaves;
  std::sort(called.begin(), called.end(), [&last](size_t a, size_t b) { return last[a] < last[b]; });
  std::vector<std::pair<std::string, nn::ModulePtr>> ordered;
  for (size_t i : called) ordered.push_back(leaves[i]);
  return ordered;
}

}  // namespace gradsleuth::debug
