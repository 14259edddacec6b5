// O8, the learning rate before training: each parameter group's starting rate against its optimizer's
// usual range, a group of biases held at rate 0 beside the weights, and Adam's betas against its
// convergence condition (see OptimCheckOptions).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "debug/checks/check_util.h"
#include "debug/checks/optim/optim_checks.h"
#include "optim/adam.h"
#include "optim/rmsprop.h"

namespace gradsleuth::debug {

using detail::make;
using detail::num;

std::vector<Finding> check_learning_rate_range(const optim::Optimizer& opt, const OptimCheckOptions& o) {
  const std::string& kind = opt.name();
  const bool adaptive = kind == "Adam" || kind == "AdamW" || kind == "RMSprop";
  if (!adaptive && kind != "SGD") return {};
  const double lo = adaptive ? o.adaptive_lr_min : o.sgd_lr_min, hi = adaptive ? o.adaptive_lr_max : o.sgd_lr_max;
  std::vector<Finding> out;
  const auto& groups = opt.param_groups();
  const bool trains = std::any_of(groups.begin(), groups.end(), [](const optim::ParamGroup& g) { return g.lr > 0; });
  // An eps this large sets the step itself (lr / eps times the averaged gradient, RMSprop at eps 1 and
  // lr 0.045 in Inception's recipe): the usual range does not apply; the eps rule judges it after the run.
  double eps = 0;
  const auto* adam = dynamic_cast<const optim::Adam*>(&opt);  // AdamW too
  if (adam) eps = adam->options().eps();
  if (const auto* rms = dynamic_cast<const optim::RMSprop*>(&opt)) eps = rms->options().eps();
  const bool eps_sets_step = adaptive && eps >= o.adaptive_eps_large;
  // Weight matrices (2-D or more) that train in some group.
  const bool weights_train = std::any_of(groups.begin(), groups.end(), [](const optim::ParamGroup& g) {
    return g.lr > 0 && std::any_of(g.params.begin(), g.params.end(), [](const Tensor& p) { return p.dim() >= 2; });
  });
  for (size_t i = 0; i < groups.size(); ++i) {
    const double lr = groups[i].lr;
    if (lr >= lo && lr <= hi) continue;
    const bool high = lr > hi, frozen = lr == 0.0 && trains;  // a group held still by its rate beside others
    // Frozen layers are frozen whole; a group of only biases and normalisation gains (1-D) at rate 0
    // while the weight matrices train is the no-weight-decay group of a recipe, its weight decay of 0
    // written where ParamGroup takes the learning rate.
    const auto& ps = groups[i].params;
    const bool biases_frozen = frozen && weights_train && !ps.empty() &&
                               std::all_of(ps.begin(), ps.end(), [](const Tensor& p) { return p.dim() <= 1; });
    // A group above the range that holds only scalars and vectors, where no weight matrix trains anywhere
    // (a temperature fitted after training), or only a few values (at most 16: the log-variances that weigh
    // the tasks of a loss): the usual range is that of weight matrices.
    int64_t values = 0;
    for (const Tensor& p : ps) values += p.numel();
    const bool no_matrix = high && !ps.empty() && (!weights_train || values <= 16) &&
                           std::all_of(ps.begin(), ps.end(), [](const Tensor& p) { return p.dim() <= 1; });
    const bool unjudged = (frozen && !biases_frozen) || eps_sets_step || no_matrix;
    const std::string group =
        groups.size() == 1
            ? std::string()
            : " (parameter group " + (groups[i].name.empty() ? num(static_cast<int64_t>(i)) : groups[i].name) + ")";
    Finding f =
        make("O8", unjudged ? Severity::Info : Severity::Warning,
             "the " + kind + " learning rate " + fmt_num(lr) + group + " is " + (high ? "above" : "below") +
                 " the usual range [" + fmt_num(lo) + ", " + fmt_num(hi) + "] before training starts" +
                 (biases_frozen
                      ? ": a group of only biases and normalisation gains (" + num(static_cast<int64_t>(ps.size())) +
                            " vectors) held still while the weight matrices train"
                  : frozen        ? ": its parameters are frozen by their rate while the other groups train"
                  : eps_sets_step ? ": with eps " + fmt_num(eps) + " the range does not apply"
                  : no_matrix     ? ": the group holds only " + num(values) + " values in scalars and vectors, " +
                                    (weights_train ? "a few weights of the loss" : "and no weight matrix trains")
                              : ""));
    f.kind = biases_frozen ? Kind::BiasGroupFrozen : high ? Kind::LrAboveRange : Kind::LrBelowRange;
    f.evidence = {{"learning rate", lr,
                   "outside [" + fmt_num(lo) + ", " + fmt_num(hi) + "] flags (0 beside a group that trains: info)"}};
    if (adaptive) f.evidence.push_back({"eps", eps, ">= " + fmt_num(o.adaptive_eps_large) + ": not judged (info)"});
    f.cause = high ? "a learning rate this high makes the first updates overshoot: the loss jumps, oscillates or "
                     "turns NaN, and ReLU units can die in the first steps"
                   : "a learning rate this low moves the weights so little that the loss barely falls within a "
                     "normal budget of steps";
    if (biases_frozen)
      f.cause =
          "ParamGroup(params, lr, weight_decay) takes the learning rate first: the usual group of biases and "
          "normalisation gains without weight decay, written ParamGroup(no_decay, 0.0), gets learning rate 0 "
          "and weight decay from the optimizer, so its biases and gains never move";
    f.fix = biases_frozen ? "ParamGroup(no_decay, ParamGroup::kInherit, 0.0): the optimizer's learning rate and no "
                            "weight decay (freeze whole layers with requires_grad_(false) instead)"
            : frozen      ? "none needed if freezing was meant (requires_grad_(false) also skips their gradients)"
            : kind == "SGD"
                ? "start SGD between 1e-3 and 0.1 (0.01-0.1 with momentum 0.9), then tune by factors of 3"
                : "start " + kind + " at its default 1e-3 (3e-4 is a common choice), then tune by factors of 3";
    out.push_back(std::move(f));
  }
  // SGD's learning rate and (coupled) weight decay the wrong way round: a decay far above the rate.
  if (kind == "SGD")
    for (size_t i = 0; i < groups.size(); ++i) {
      const double lr = groups[i].lr, wd = groups[i].weight_decay;
      if (!(lr > 0) || !(wd >= o.sgd_swap_wd_min && wd >= o.sgd_swap_ratio * lr)) continue;
      const std::string group =
          groups.size() == 1
              ? std::string()
              : " (parameter group " + (groups[i].name.empty() ? num(static_cast<int64_t>(i)) : groups[i].name) + ")";
      Finding f = make("O8", Severity::Warning,
                       "the SGD learning rate " + fmt_num(lr) + " and weight decay " + fmt_num(wd) + group +
                           " look swapped: the decay is " + fmt_num(wd / lr) + "x the rate");
      f.kind = Kind::SgdLrDecaySwapped;
      f.evidence = {{"learning rate", lr, ""},
                    {"weight decay (coupled, L2)", wd, ">= " + fmt_num(o.sgd_swap_wd_min) + " and"},
                    {"weight decay / learning rate", wd / lr, ">= " + fmt_num(o.sgd_swap_ratio) + " warns"}};
      f.cause =
          "the two numbers were passed in each other's place (a helper make_sgd(params, weight_decay, lr), a "
          "config's keys crossed): SGD then steps at the decay's value, far too slowly, and its L2 term pulls "
          "the weights toward 0 as hard as the loss; recipes pair a rate of 0.01-0.1 with a decay of 1e-4-5e-4";
      f.fix = "SGDOptions(" + str_printf("%g", wd) + ").weight_decay(" + str_printf("%g", lr) +
              "), if the two were swapped";
      out.push_back(std::move(f));
    }
  // Adam's betas: the second moment must not forget faster than the first (Kingma & Ba's condition).
  if (adam) {
    const auto [b1, b2] = adam->options().betas();
    const double gamma = b2 > 0 ? b1 * b1 / std::sqrt(b2) : 0.0;
    if (b2 > 0 && b1 < 1 && gamma >= o.adam_betas_gamma_max) {
      // Below 1 the condition fails only where beta1 > beta2, and the pair swapped always meets it.
      const bool swapped = b2 < b1 && b2 * b2 / std::sqrt(b1) < o.adam_betas_gamma_max;
      Finding f = make("O8", Severity::Warning,
                       "the " + kind + " betas (" + fmt_num(b1) + ", " + fmt_num(b2) +
                           ") break Adam's condition beta1^2 / sqrt(beta2) < 1" +
                           (swapped ? ": they look swapped (beta1, the first moment's, is the smaller: 0.9 "
                                      "against 0.999 by default)"
                                    : ""));
      f.kind = Kind::AdamBetasUnstable;
      f.evidence = {{"beta1^2 / sqrt(beta2)", gamma, ">= " + fmt_num(o.adam_betas_gamma_max) + " flags"},
                    {"beta1", b1, "the first moment's decay"},
                    {"beta2", b2, "the second moment's decay"}};
      f.cause =
          "the second moment forgets faster than the first: after a few small gradients its square root "
          "shrinks while the first moment still carries the earlier large ones, so single updates grow far "
          "beyond the learning rate and the loss spikes";
      f.fix = swapped ? "betas({" + fmt_num(b2) + ", " + fmt_num(b1) + "})"
                      : "betas({0.9, 0.999}), PyTorch's defaults (0.9 and 0.95-0.98 for large models)";
      out.push_back(std::move(f));
    }
  }
  return out;
}

void revise_lr_range(Report& gate, const std::vector<double>& learning_rates) {
  double peak = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < learning_rates.size(); ++i)
    if (std::isfinite(learning_rates[i]) && learning_rates[i] > peak) peak = learning_rates[i], at = i;
  if (!(peak > 0.0)) return;
  for (size_t i = 0; i < gate.size(); ++i) {
    const Finding& g = gate.findings()[i];
    if (!g.fires() || !g.is("O8", Kind::LrBelowRange)) continue;
    const double lr = g.value_of("learning rate");
    if (!(lr == 0.0 || peak >= 10.0 * lr)) continue;
    Finding f = g;
    f.severity = Severity::Info;
    f.title +=
        " (a warm-up: the run's rate rose to " + fmt_num(peak) + " by step " + num(static_cast<int64_t>(at + 1)) + ")";
    f.evidence.push_back(
        {"the run's highest learning rate", peak, ">= 10 x the rate before training: a warm-up (info)"});
    f.fix = "none needed: the schedule raises the rate from where it starts";
    gate.replace(i, f);
  }
}

namespace {
// O8's "above the usual range" findings in r made info, the probe's two decreases in the title and their
// ratio in the evidence: where the run needs its rate (`needed`), or was calm at it.
void soften_above_range(Report& r, const Finding& verdict, bool needed) {
  const double probe_fell = verdict.value_of("relative decrease at lr / 10"),
               run_fell = verdict.value_of("relative decrease at the run's lr");
  const std::string fell = fmt_num(100.0 * probe_fell) + "% against " + fmt_num(100.0 * run_fell) + "%";
  for (size_t i = 0; i < r.size(); ++i) {
    const Finding& g = r.findings()[i];
    if (!g.fires() || !g.is("O8", Kind::LrAboveRange)) continue;
    Finding f = g;
    f.severity = Severity::Info;
    f.title += needed ? ", but the run trained calmly at it, and at a tenth of it the loss fell " + fell +
                            ": the run needs this rate"
                      : ", but the run trained calmly at it (no spike, divergence or dead unit), and a tenth of it "
                        "trained no better (its loss fell " +
                            fell + ")";
    f.evidence.push_back({"relative decrease at lr / 10 / at the run's lr", probe_fell / run_fell,
                          needed
                              ? "< 0.1 with a calm run: the rate is needed (info)"
                              : "<= " + fmt_num(kCalmProbeMargin) + " with a calm run: the rate did no harm (info)"});
    if (!needed)
      f.fix =
          "none needed for this run; a rate above the usual range leaves less margin when the model or data "
          "change";
    r.replace(i, f);
  }
}
}  // namespace

void soften_range_for_needed_rate(Report& r, const Finding& verdict) { soften_above_range(r, verdict, true); }

// O8's warning foretells what a rate above the range brings about; where a run calm at its rate
// (calm_at_rate, debug/run/lr_probe.cpp) showed none of it, it is info.
void soften_range_for_calm_run(Report& r, const Finding& verdict) { soften_above_range(r, verdict, false); }

bool tenth_rate_beats(double other_loss, double tenth_loss, double other_accuracy, double tenth_accuracy, int64_t fixed,
                      int64_t broken, double loss_z, const OptimCheckOptions& o) {
  const bool accuracies = std::isfinite(other_accuracy) && std::isfinite(tenth_accuracy);
  if (accuracies && tenth_accuracy > other_accuracy && fixed >= 0 && broken >= 0 &&
      detail::mcnemar_z(fixed, broken) >= o.outcome_min_z)
    return true;
  // The loss: with accuracies, only where the tenth's is no lower (a sharper fit of the same answers).
  return (!accuracies || tenth_accuracy >= other_accuracy) && std::isfinite(other_loss) && std::isfinite(tenth_loss) &&
         other_loss > 0 && tenth_loss <= (1.0 - o.outcome_loss_drop) * other_loss && loss_z >= o.outcome_min_z;
}

bool tenth_rate_ends_better(const RateOutcome& m, const OptimCheckOptions& o) {
  return tenth_rate_beats(m.run_loss, m.tenth_loss, m.run_accuracy, m.tenth_accuracy, m.run_fixed, m.run_broken,
                          m.run_loss_z, o) &&
         tenth_rate_beats(m.repeat_loss, m.tenth_loss, m.repeat_accuracy, m.tenth_accuracy, m.repeat_fixed,
                          m.repeat_broken, m.repeat_loss_z, o);
}

namespace {
// The outcome probe's numbers, as evidence: the accuracies and McNemar's z where measured, the losses
// and their paired z otherwise.
std::vector<Evidence> outcome_evidence(const RateOutcome& m, const OptimCheckOptions& o) {
  const bool acc = std::isfinite(m.run_accuracy) && std::isfinite(m.tenth_accuracy);
  const std::string acc_rule = ">= " + fmt_num(o.outcome_min_z) +
                               ", the accuracy higher, over the run and over the repeat: the rate costs accuracy",
                    loss_rule = ">= " + fmt_num(o.outcome_min_z) + ", the loss " + fmt_num(100 * o.outcome_loss_drop) +
                                "% lower or more" + (acc ? " and the accuracy no lower" : "") +
                                ", over the run and over the repeat: the rate costs the fit";
  std::vector<Evidence> ev{
      {"steps of each repeat (the run's, from its initial weights)", static_cast<double>(m.steps), ""},
      {"validation examples", static_cast<double>(m.examples), ""}};
  const bool repeated = std::isfinite(m.repeat_loss);
  if (acc) {
    ev.push_back({"validation accuracy, the run", m.run_accuracy, ""});
    if (repeated) ev.push_back({"validation accuracy, the run repeated at its rate", m.repeat_accuracy, ""});
    ev.push_back({"validation accuracy, the run repeated at lr / 10", m.tenth_accuracy, ""});
    ev.push_back({"McNemar z, lr / 10 over the run", detail::mcnemar_z(m.run_fixed, m.run_broken), acc_rule});
    if (repeated)
      ev.push_back(
          {"McNemar z, lr / 10 over the repeat", detail::mcnemar_z(m.repeat_fixed, m.repeat_broken), acc_rule});
  }
  ev.push_back({"validation loss, the run", m.run_loss, ""});
  if (repeated) ev.push_back({"validation loss, the run repeated at its rate", m.repeat_loss, ""});
  ev.push_back({"validation loss, the run repeated at lr / 10", m.tenth_loss, ""});
  ev.push_back({"paired z of the examples' losses, lr / 10 under the run", m.run_loss_z, loss_rule});
  if (repeated)
    ev.push_back({"paired z of the examples' losses, lr / 10 under the repeat", m.repeat_loss_z, loss_rule});
  return ev;
}
}  // namespace

void judge_range_by_outcome(Report& r, const Finding& verdict, const RateOutcome& m, const OptimCheckOptions& o) {
  const bool better = tenth_rate_ends_better(m, o);
  if (!better) soften_above_range(r, verdict, false);
  const bool acc = std::isfinite(m.run_accuracy) && std::isfinite(m.tenth_accuracy);
  const std::vector<Evidence> ev = outcome_evidence(m, o);
  for (size_t i = 0; i < r.size(); ++i) {
    const Finding& g = r.findings()[i];
    if (!g.is("O8", Kind::LrAboveRange) || g.fires() != better) continue;
    Finding f = g;
    if (better) {
      f.title +=
          ": the run trained calmly at it, but the whole run again at a tenth of it ends better on validation (" +
          (acc ? "accuracy " + fmt_num(100 * m.tenth_accuracy) + "% against " + fmt_num(100 * m.run_accuracy) + "%"
               : "loss " + fmt_num(m.tenth_loss) + " against " + fmt_num(m.run_loss)) +
          ")";
      f.cause =
          "a rate above the range that trains without a spike still takes steps too long to settle into a "
          "minimum: the weights keep moving, and the model ends less fit than the same run at a tenth of the rate";
    } else {
      f.title += "; the whole run again at a tenth of it ends no better on validation";
    }
    f.evidence.insert(f.evidence.end(), ev.begin(), ev.end());
    r.replace(i, f);
  }
}

}  // namespace gradsleuth::debug
