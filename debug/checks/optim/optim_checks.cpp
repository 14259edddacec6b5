// O1 gradient health (see optim_checks.h), before training and on the sampled steps; O2/O3's norm
// histories live in norm_history.cpp, O5's findings in accumulation.cpp.
#include "debug/checks/optim/optim_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/hooks.h"
#include "debug/checks/model/model_checks.h"
#include "debug/checks/optim/gradient_text.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"

namespace gradsleuth::debug {

namespace {

using detail::kNaN;
using namespace optim_detail;
using detail::make;
using detail::median;
using detail::num;

Finding at(Finding f, const std::map<std::string, std::string>& labels, const std::string& name, const Tensor& p) {
  f.module = owner_label(labels, name);
  f.parameter = name;
  f.shape = shape_of(p);
  return f;
}

// An exploding gradient (O1) that passed the bar on a minority of the sampled steps, none of the
// last exploding_quiet_steps, while the step loss fell by half of its size or more: the gradient was
// large while the loss was (an unnormalised regression target, the scale of an objective's term), and
// fell with it. f becomes info; returns whether it did.
bool exploded_below_bar(Finding& f, int64_t steps, int64_t judged_since, int64_t judged, const std::vector<double>& sl,
                        const OptimCheckOptions& o) {
  const size_t n = sl.size(), w = std::clamp<size_t>(n / 10, 1, 10);
  if (n < 2 * w || judged_since < o.exploding_quiet_steps || 2 * steps >= judged) return false;
  const double first = median(std::vector<double>(sl.begin(), sl.begin() + static_cast<std::ptrdiff_t>(w)));
  const double last = median(std::vector<double>(sl.end() - static_cast<std::ptrdiff_t>(w), sl.end()));
  if (!std::isfinite(first) || !std::isfinite(last) || !(last < first - 0.5 * std::fabs(first))) return false;
  f.severity = Severity::Info;
  f.title += " on " + num(steps) + " of " + num(judged) + " sampled steps, then below " +
             fmt_num(o.exploding_grad_norm) + " on the " + num(judged_since) + " since, while the loss fell from " +
             fmt_num(first) + " to " + fmt_num(last);
  f.evidence.push_back({"sampled steps above the bar", static_cast<double>(steps), "under half of them, and"});
  f.evidence.push_back({"sampled steps since the last of them", static_cast<double>(judged_since),
                        ">= " + num(o.exploding_quiet_steps) + " below the bar, and"});
  f.evidence.push_back(
      {"step loss at the end (median) / at the start", first != 0 ? last / first : kNaN, "fell by half or more: info"});
  f.cause =
      "the gradient is large while the loss is large (a regression target in raw units, the scale of a term of "
      "the objective) and fell as the loss did: not the growth of an explosion";
  f.fix = "none needed; normalising the targets (or the term) keeps the gradients on one scale from the start";
  return true;
}

}  // namespace

// ---- O1 gradient health ---------------------------------------------------------------

std::vector<Finding> check_gradient_health(const nn::Module& model, const OptimCheckOptions& opts) {
  // The modules' labels, built the first time a finding needs one (a healthy step needs none).
  std::map<std::string, std::string> labels_built;
  auto labels_of = [&]() -> const std::map<std::string, std::string>& {
    if (labels_built.empty()) labels_built = module_labels(model);
    return labels_built;
  };
  auto has_batchnorm = [&] {
    const auto& labels = labels_of();
    return std::any_of(labels.begin(), labels.end(),
                       [](const auto& kv) { return kv.second.find("(BatchNorm") != std::string::npos; });
  };
  std::vector<Finding> out;
  struct Judged {
    std::string name;
    double norm;
    bool weight;
    int64_t in_dim = -1;  // a weight's second dim (a Linear's inputs, a Conv's input channels)
  };
  std::vector<Judged> judged;
  std::vector<std::pair<std::string, Tensor>> missing;
  int64_t trainable = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad()) continue;
    ++trainable;
    const Tensor g = p.grad();
    if (!g.defined()) {
      missing.emplace_back(name, p);
      continue;
    }
    const TensorSummary s = summarize_norm(g);  // the norm and the NaN/Inf counts
    if (!s.all_finite()) {
      Finding f =
          at(make("O1", Severity::Error, "the gradient of " + name + " holds NaN/Inf values"), labels_of(), name, p);
      f.kind = Kind::GradientNonFinite;
      f.nonfinite = true;
      f.evidence = {{"NaN values", static_cast<double>(s.nan), "any is an error"},
                    {"Inf values", static_cast<double>(s.inf), "any is an error"},
                    {"values", static_cast<double>(s.numel), ""}};
      f.cause = std::string("a non-finite loss or an overflow in the backward: ") + kCauseExploding +
                "; log or division of 0 in the loss";
      f.fix =
          "turn on anomaly mode (W4) to name the op whose backward made it; clip gradients and lower the "
          "learning rate";
      out.push_back(f);
      continue;
    }
    judged.push_back({name, s.norm, p.dim() >= 2, p.dim() >= 2 ? p.size(1) : -1});
    const bool by_construction = std::find(opts.zero_grad_by_construction.begin(), opts.zero_grad_by_construction.end(),
                                           name) != opts.zero_grad_by_construction.end();
    if (s.norm < opts.vanishing_grad_norm && by_construction) continue;  // a redundant bias: said once, as info
    if (s.norm < opts.vanishing_grad_norm) {
      Finding f = at(make("O1", Severity::Warning, "the gradient of " + name + " is vanishing"), labels_of(), name, p);
      f.kind = Kind::GradientVanishing;
      f.evidence = {{"gradient norm", s.norm, "< " + fmt_num(opts.vanishing_grad_norm) + " is vanishing"}};
      f.cause = kCauseVanishing;
      if (s.norm == 0.0)
        f.cause =
            "an exact zero: the parameter is in the graph but nothing flows back (dead ReLUs after it, M7; a "
            "multiplication by 0; a saturated activation); " +
            f.cause;
      if (p.dim() == 1 && name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0 && has_batchnorm())
        f.cause +=
            ". The model has a BatchNorm: a bias right before one always gets ~0 (the normalisation "
            "subtracts the batch mean, so the bias has no effect); then build that layer without bias, "
            "nothing is wrong with training";
      f.fix = kFixVanishing;
      out.push_back(f);
    } else if (s.norm > opts.exploding_grad_norm) {
      Finding f = at(make("O1", Severity::Warning, "the gradient of " + name + " is exploding"), labels_of(), name, p);
      f.kind = Kind::GradientExploding;
      f.evidence = {{"gradient norm", s.norm, "> " + fmt_num(opts.exploding_grad_norm) + " is exploding"}};
      f.cause = kCauseExploding;
      f.fix = kFixExploding;
      out.push_back(f);
    }
  }

  // No gradient at all: one finding, not one per parameter.
  if (!missing.empty() && static_cast<int64_t>(missing.size()) == trainable) {
    Finding f = make("O1", Severity::Warning, "no trainable parameter has a gradient");
    f.kind = Kind::NoGradientAtStep;
    f.evidence = {{"parameters without a gradient", static_cast<double>(trainable), "any warns"}};
    f.cause =
        "backward() has not run since the gradients were cleared (zero_grad sets them to none), or the loss "
        "was computed under no_grad / from detached outputs";
    f.fix =
        "call check_gradient_health after loss.backward() and before optimizer.zero_grad(); check that the "
        "loss requires grad";
    out.push_back(f);
  } else {
    for (const auto& [name, p] : missing) {
      Finding f = at(make("O1", Severity::Warning, "the trainable parameter " + name + " got no gradient"), labels_of(),
                     name, p);
      f.kind = Kind::GradientMissing;
      f.evidence = {{"gradient defined (1 = yes)", 0.0, "0 after a backward warns"}};
      f.cause =
          "no gradient reaches it: a detach() (or .data) between it and the loss, a layer the "
          "forward never uses, or it should have been frozen (requires_grad false)";
      f.fix =
          "find where the graph is cut (M5 gradient flow names the first module without gradient); freeze "
          "it on purpose with requires_grad_(false), or remove the unused layer";
      out.push_back(f);
    }
  }

  // Across depth: first weight / last weight.
  std::vector<const Judged*> weights;
  for (const Judged& j : judged)
    if (j.weight) weights.push_back(&j);
  double ratio = kNaN;
  if (weights.size() >= 2) {
    const Judged& first = *weights.front();
    // Parallel heads (the trailing weights that read one width, as a multi-task model's heads read the
    // trunk): the trunk's gradient is the sum of theirs, so growth towards the input is judged against the
    // largest of them. Shrinking is judged against the last.
    size_t h = weights.size() - 1;
    while (h > 1 && weights[h - 1]->in_dim > 0 && weights[h - 1]->in_dim == weights.back()->in_dim) --h;
    const Judged* head = weights.back();
    for (size_t k = h; k < weights.size(); ++k)
      if (weights[k]->norm > head->norm) head = weights[k];
    // A last weight without gradient is its own finding (vanishing), not gradients growing towards the input.
    ratio = weights.back()->norm > 0 ? first.norm / weights.back()->norm : kNaN;
    const bool vanish = ratio < opts.depth_ratio_vanishing;
    const bool explode = head->norm > 0 && first.norm / head->norm > opts.depth_ratio_exploding;
    if (explode) ratio = first.norm / head->norm;
    const Judged& last = explode ? *head : *weights.back();
    if (vanish || explode) {
      Finding f = make("O1", Severity::Warning,
                       std::string("gradients ") + (vanish ? "vanish" : "explode") + " towards the input: ||grad " +
                           first.name + "|| / ||grad " + last.name + "|| is " + (vanish ? "tiny" : "large"));
      f.kind = vanish ? Kind::VanishTowardsInput : Kind::ExplodeTowardsInput;
      f.module = owner_label(labels_of(), first.name) + " .. " + owner_label(labels_of(), last.name);
      f.parameter = first.name;
      f.evidence = {{"first weight's gradient norm (" + first.name + ")", first.norm, ""},
                    {"last weight's gradient norm (" + last.name + ")", last.norm, ""},
                    {"first / last", ratio,
                     vanish ? "< " + fmt_num(opts.depth_ratio_vanishing) + " is vanishing"
                            : "> " + fmt_num(opts.depth_ratio_exploding) + " is exploding"},
                    {"weights between them", static_cast<double>(weights.size()), ""}};
      f.cause = vanish ? kCauseVanishing : kCauseExploding;
      f.fix = vanish ? kFixVanishing : kFixExploding;
      out.push_back(f);
    }
  }

  if (out.empty() && !judged.empty()) {
    auto [lo, hi] = std::minmax_element(judged.begin(), judged.end(),
                                        [](const Judged& a, const Judged& b) { return a.norm < b.norm; });
    Finding f = make("O1", Severity::Info, "gradients look healthy (no NaN/Inf, none vanishing or exploding)");
    f.evidence = {{"parameters with a gradient", static_cast<double>(judged.size()), ""},
                  {"smallest gradient norm (" + lo->name + ")", lo->norm, ">= " + fmt_num(opts.vanishing_grad_norm)},
                  {"largest gradient norm (" + hi->name + ")", hi->norm, "<= " + fmt_num(opts.exploding_grad_norm)}};
    if (std::isfinite(ratio))
      f.evidence.push_back(
          {"first / last weight gradient norm", ratio,
           "inside [" + fmt_num(opts.depth_ratio_vanishing) + ", " + fmt_num(opts.depth_ratio_exploding) + "]"});
    f.fix = "none needed";
    out.push_back(f);
  }
  return out;
}

// ---- O1 during training (the monitor's run checks) -----------------
namespace {
// O1 on the sampled steps (M5's gradient flow runs in the gate). Once, the first time a 1-D
// parameter's gradient vanishes: is it a redundant bias (zero by construction, BatchNorm after
// it)? Then it is said once as info, O1 stays silent about it, and M25 skips it
// (RunContext::zero_grad_by_construction). A parameter without a gradient is judged at the end
// of the run: without one on every sampled step it is cut off (a warning); without one on some
// steps only, a branch that some steps skip (stochastic depth, a head used on some batches): info.
class GradientHealthRunCheck final : public RunCheck {
 public:
  explicit GradientHealthRunCheck(const OptimCheckOptions& o) : o_(o) {}
  std::string ids() const override { return "O1"; }
  uint32_t events() const override { return RunEvent::BeforeStep | RunEvent::Finish | RunEvent::Series; }
  void series(TrainingHistory& h) const override {
    h.gradient_judged_steps = judged_steps_;
    h.gradient_missing.clear();
    for (const auto& [name, held] : missing_) h.gradient_missing.emplace_back(name, held.second);
    h.gradient_exploded.clear();
    for (const auto& [name, e] : exploded_)
      h.gradient_exploded.push_back({name, e.steps, judged_steps_ - e.judged_at_last});
  }
  void finish(RunContext& c) override {
    // A gradient that vanished alone (others flowed) on under half the sampled steps, and not on the
    // last three in a row: info (an exact zero some batches give); otherwise the warning, as first seen.
    for (const auto& [name, v] : vanished_) {
      Finding f = v.first;
      f.evidence.push_back({"sampled steps with a vanishing gradient", static_cast<double>(v.steps),
                            "half the judged steps or more, or the last one, warns"});
      f.evidence.push_back({"sampled steps judged", static_cast<double>(judged_steps_), ""});
      if (!v.whole && !(v.last == last_judged_ && v.run >= 3) && 2 * v.steps < judged_steps_) {
        f.severity = Severity::Info;
        f.title += " on " + std::to_string(v.steps) + " of " + std::to_string(judged_steps_) +
                   " sampled steps; it flows on the others and at the last";
        f.cause =
            "some batches give this parameter an exact or near-zero gradient (a bias under an L1 loss gets the "
            "balance of its residuals' signs, 0 where as many lie above the prediction as below); the path "
            "is open";
        f.fix = "none needed";
      }
      c.add(std::move(f));
    }
    for (const auto& [name, held] : missing_) {
      Finding f = held.first;
      f.evidence = {{"sampled steps without a gradient", static_cast<double>(held.second), "every one of them warns"},
                    {"sampled steps judged", static_cast<double>(judged_steps_), ""}};
      if (held.second < judged_steps_) {
        f.severity = Severity::Info;
        f.title = "the trainable parameter " + name + " got no gradient on " + std::to_string(held.second) + " of " +
                  std::to_string(judged_steps_) + " sampled steps";
        f.cause =
            "its layer is skipped on some steps only: conditional computation (stochastic depth, a branch or head "
            "some batches do not use); on the other steps it learns";
        f.fix = "nothing, if the forward skips it on purpose";
      }
      c.add(std::move(f));
    }
    // An exploding gradient: judged over the run (exploded_below_bar).
    const std::vector<double>* sl = c.history ? &c.history->step_losses : nullptr;
    for (auto& [name, e] : exploded_) {
      Finding f = e.first;
      if (!(sl && exploded_below_bar(f, e.steps, judged_steps_ - e.judged_at_last, judged_steps_, *sl, o_)))
        f.evidence.push_back({"sampled steps above the bar", static_cast<double>(e.steps), ""});
      c.add(std::move(f));
    }
  }
  void before_step(RunContext& c, bool sampled) override {
    if (!sampled || c.flat_step) return;  // nothing to learn from this batch (RunContext::flat_step)
    o_.zero_grad_by_construction = c.zero_grad_by_construction;
    std::vector<Finding> health = check_gradient_health(c.model, o_);
    if (std::none_of(health.begin(), health.end(),
                     [](const Finding& f) { return f.is("O1", Kind::NoGradientAtStep); })) {
      ++judged_steps_;
      prev_judged_ = last_judged_;
      last_judged_ = c.steps + 1;
    }
    for (size_t i = 0; i < health.size();) {
      if (!health[i].is("O1", Kind::GradientMissing)) {
        ++i;
        continue;
      }
      auto [it, fresh] = missing_.try_emplace(health[i].parameter, health[i], 0);
      ++it->second.second;
      health.erase(health.begin() + static_cast<std::ptrdiff_t>(i));
    }
    // Probed again (a few times at most) when a parameter not probed before warns: a bias before a
    // BatchNorm whose rounding residue was above the bar at the first probe and fell below it later.
    if (redundant_probes_ < 4 && c.loss && c.x.defined() && c.y.defined() &&
        std::any_of(health.begin(), health.end(), [&](const Finding& f) {
          return f.is("O1", Kind::GradientVanishing) && f.severity == Severity::Warning && !f.parameter.empty() &&
                 !redundant_probed_.count(f.parameter);
        })) {
      ++redundant_probes_;
      for (const Finding& f : health)
        if (f.is("O1", Kind::GradientVanishing) && !f.parameter.empty()) redundant_probed_.insert(f.parameter);
      const LossFunction lf = [&loss = *c.loss](const Tensor& out, const Tensor& t) { return loss(out, t); };
      std::vector<Finding> red;
      c.pause(true);  // the probe's forwards are not training statistics
      try {
        red = find_redundant_biases(c.model, c.x, c.y, lf, o_.vanishing_grad_norm);
      } catch (const std::exception&) {
        red.clear();  // the probe could not run: the warnings stay as they are
      }
      c.pause(false);
      for (Finding& f : red) {
        c.zero_grad_by_construction.push_back(f.parameter);
        c.add(std::move(f));
      }
      o_.zero_grad_by_construction = c.zero_grad_by_construction;
      if (!red.empty()) health = check_gradient_health(c.model, o_);
    }
    // Zero gradients behind a parameter initialised to zero on purpose (a zero head): the first step's only.
    if (c.loss && c.x.defined() && c.y.defined() && std::any_of(health.begin(), health.end(), [](const Finding& f) {
          return f.is("O1", Kind::GradientVanishing) && f.severity == Severity::Warning && !f.parameter.empty();
        })) {
      c.pause(true);
      const ZeroInitProbe zero_init = probe_zero_initialised(c.model, c.x, c.y, *c.loss, o_.vanishing_grad_norm);
      c.pause(false);
      soften_zero_init_findings(health, zero_init);
      for (const Finding& f : zero_init.redundant) c.zero_grad_by_construction.push_back(f.parameter), c.add(f);
      if (!zero_init.held_back.empty()) c.add(zero_init.finding());
    }
    // A model that fits its batches: the loss itself at converged_loss_share of the run's first or
    // below, and gradients small with it (cross-entropy's gradient scales with its loss).
    // The steps before it too (up to 20): a loss that touches 0 on some batches between large ones
    // saturates, it has not converged.
    const std::vector<double>* sl = c.history ? &c.history->step_losses : nullptr;
    const double first = sl && !sl->empty() ? sl->front() : kNaN;
    double recent = c.loss_value;
    if (sl && !sl->empty())
      recent =
          std::max(recent, *std::max_element(sl->end() - std::min<std::ptrdiff_t>(20, std::ssize(*sl)), sl->end()));
    const bool converged = c.loss_seen && std::isfinite(first) && first > 0 && c.loss_value >= 0 &&
                           recent <= o_.converged_loss_share * first;
    c.note_ran("O1");
    // Every parameter's gradient vanishing at once is the loss's doing (a saturated softmax on a batch
    // it gets all right), not one parameter's exact zero.
    int64_t with_grad = 0;
    for (const Tensor& p : c.model.parameters()) with_grad += p.requires_grad() && p.grad().defined() ? 1 : 0;
    const bool whole_model = std::count_if(health.begin(), health.end(), [](const Finding& f) {
                               return f.kind == Kind::GradientVanishing && !f.parameter.empty();
                             }) >= with_grad;
    for (Finding& f : health) {
      // The first step of a model with a layer initialised to zero: the gate found these gradients
      // zero because of it, and the layer moves at this step.
      const auto& held = o_.zero_until_first_step;
      if (c.step_now() <= 1 && f.severity == Severity::Warning &&
          (f.kind == Kind::GradientVanishing || f.kind == Kind::VanishTowardsInput) &&
          std::find(held.begin(), held.end(), f.parameter) != held.end()) {
        f.severity = Severity::Info;
        f.title +=
            " (at the first step only: a layer after it starts at zero, as the check before training found, "
            "and learns from this step)";
        f.fix = "none needed";
        c.add(std::move(f));
        continue;
      }
      if (converged && f.severity == Severity::Warning && f.kind == Kind::GradientVanishing) {
        f.severity = Severity::Info;
        f.title += " (the loss is " + fmt_num(c.loss_value) + ", " + fmt_num(c.loss_value / first) +
                   " of its first: the model fits its batches, and the gradient falls with the loss)";
        f.evidence.push_back({"the step's loss / the run's first", c.loss_value / first,
                              "<= " + fmt_num(o_.converged_loss_share) + ": converged (info)"});
        f.fix = "none needed: stop earlier if the run goes on without gain";
      }
      if (f.severity == Severity::Error && f.kind == Kind::GradientNonFinite) c.flag_nonfinite();
      if (f.severity == Severity::Warning && f.kind == Kind::GradientExploding && !f.parameter.empty()) {
        if (f.step < 0) f.step = c.step_now();
        Exploded& e = exploded_.try_emplace(f.parameter, Exploded{f}).first->second;
        ++e.steps;
        e.judged_at_last = judged_steps_;
        continue;  // judged at the end of the run, with the steps after it
      }
      if (f.severity == Severity::Warning && f.kind == Kind::GradientVanishing && !f.parameter.empty()) {
        if (f.step < 0) f.step = c.step_now();  // said at the end of the run, at the step it was first seen
        Vanished& v = vanished_.try_emplace(f.parameter, Vanished{f}).first->second;
        ++v.steps;
        v.run = v.last == prev_judged_ ? v.run + 1 : 1;
        v.last = c.steps + 1;
        v.whole = v.whole || whole_model;
        continue;  // judged at the end of the run, over every sampled step
      }
      c.add(std::move(f));
    }
  }

 private:
  OptimCheckOptions o_;
  int redundant_probes_ = 0;                                    // find_redundant_biases runs so far
  std::set<std::string> redundant_probed_;                      // the vanishing parameters those runs saw
  int64_t judged_steps_ = 0;                                    // sampled steps on which some parameter had a gradient
  int64_t last_judged_ = -1, prev_judged_ = -1;                 // the last of them, the one before
  std::map<std::string, std::pair<Finding, int64_t>> missing_;  // the first finding, the steps without
  struct Vanished {
    Finding first;
    int64_t steps = 0, last = -1;  // sampled steps it vanished on, the last of them
    int64_t run = 0;               // judged steps in a row it vanished on, up to the last
    bool whole = false;            // on one of them every parameter's did
  };
  std::map<std::string, Vanished> vanished_;
  struct Exploded {
    Finding first;
    int64_t steps = 0;           // sampled steps it passed the bar on
    int64_t judged_at_last = 0;  // judged_steps_ at the last of them
  };
  std::map<std::string, Exploded> exploded_;
};

}  // namespace

void revise_gradient_missing(Report& gate, const TrainingHistory& h, const OptimCheckOptions& o) {
  soften_reached_in_training(gate, h, "O1", Kind::GradientMissing);
  soften_zero_at_gate(gate, h, "O1", Kind::GradientVanishing, o.vanishing_grad_norm);
  // The gate's exploding gradient, with the run's sampled steps after it.
  for (size_t i = 0; i < gate.size(); ++i) {
    Finding f = gate.findings()[i];
    if (!f.fires() || !f.is("O1", Kind::GradientExploding) || f.parameter.empty()) continue;
    int64_t steps = 0, since = h.gradient_judged_steps;  // not above the bar in the run: below since the gate
    for (const auto& e : h.gradient_exploded)
      if (e.name == f.parameter) steps = e.steps, since = e.judged_since;
    if (exploded_below_bar(f, steps + 1, since, h.gradient_judged_steps + 1, h.step_losses, o)) gate.replace(i, f);
  }
}

std::unique_ptr<RunCheck> make_gradient_health_run_check(const MonitorOptions& o) {
  return std::make_unique<GradientHealthRunCheck>(o.optim);
}

}  // namespace gradsleuth::debug
