// O3's weight-decay probe on the user's model at the end of a run (its rule: check_weight_decay in
// debug/checks/optim/optim_checks.h): the decay's pull against the loss gradient's per parameter group,
// and, where the decay pulls hard, training on with and without it (Session::rerun_from_start).
#include <algorithm>
#include <cmath>

#include "core/ops.h"
#include "debug/checks/optim/optim_checks.h"
#include "debug/diagnosis/diagnosis.h"
#include "debug/evidence/tensor_stats.h"
#include "debug/run/diagnose.h"
#include "debug/run/diagnose_util.h"
#include "debug/run/split_score.h"
#include "nn/loss.h"
#include "optim/adam.h"
#include "optim/trainer.h"

namespace gradsleuth::debug {
using namespace run_detail;
namespace {

double sq_norm(const Tensor& t) {
  const double n = summarize_norm(t.detach()).norm;
  return n * n;
}

}  // namespace

void Session::check_decay_at_end(RunReport& r) {
  if (!data_.train || !data_.val || !stopped_.empty() || r.steps < 2) return;
  auto& groups = opt_.param_groups();
  // The penalty the loop adds around the loss (O3's run check fitted it on the first step), by matrix.
  std::vector<std::pair<Tensor, double>> loop;
  const double a = r.history.loop_penalty_scale;
  for (const auto& [name, lambda] : r.history.loop_penalty)
    for (auto& [pname, p] : model_.named_parameters())
      if (pname == name && lambda > 0) loop.emplace_back(p, lambda);
  if (loop.size() != r.history.loop_penalty.size() || !(a > 0)) loop.clear();  // a penalty with a minus sign
  if (loop.empty() &&
      std::none_of(groups.begin(), groups.end(), [](const optim::ParamGroup& g) { return g.weight_decay > 0; }))
    return;
  const OptimCheckOptions& oo = o_.monitor.optim;
  Report found;
  guarded(found, "the end-of-run checks", "O3's weight-decay probe", "O3", [&] {
    DecayMeasure m;
    m.optimizer = opt_.name();
    const auto* adam = dynamic_cast<const optim::Adam*>(&opt_);
    const bool decoupled = adam && adam->decoupled_weight_decay();
    // The loss gradient averaged over the first training batches, in training mode (the buffers a
    // BatchNorm updates on the way are put back).
    const nn::DataLoader& train = *data_.train;
    const std::vector<Tensor> buffers = model_.buffers();
    std::vector<Tensor> saved_buffers;
    {
      NoGradGuard ng;
      for (const Tensor& b : buffers) saved_buffers.push_back(b.detach().clone());
    }
    const int64_t nb = std::min<int64_t>(train.num_batches(), oo.decay_grad_batches);
    const Device d = model_device(model_);
    std::map<const TensorImpl*, Tensor> grad_sum;
    const bool was_training = model_.is_training();
    model_.train();
    for (int64_t i = 0; i < nb; ++i) {
      const nn::Batch b = train.batch(0, i);
      opt_.zero_grad();
      Tensor l = loss_(model_(b.x.to(d)), b.y.to(d));
      l.backward();
      NoGradGuard ng;
      for (const auto& g : groups)
        for (const Tensor& p : g.params) {
          if (!p.grad().defined()) continue;
          Tensor gp = p.grad().detach().to(kFloat32);
          auto it = grad_sum.find(p.impl_ptr().get());
          if (it == grad_sum.end())
            grad_sum.emplace(p.impl_ptr().get(), gp.clone());
          else
            it->second = it->second + gp;
        }
    }
    opt_.zero_grad();
    model_.train(was_training);
    {
      NoGradGuard ng;
      for (size_t i = 0; i < buffers.size(); ++i) buffers[i].detach().copy_(saved_buffers[i]);
    }
    const std::map<std::string, Tensor> state = decoupled ? opt_.state_dict() : std::map<std::string, Tensor>{};
    const std::vector<Tensor> params = model_.parameters();
    // A parameter's squared norm before training, found by identity among the model's (NaN: unknown).
    const auto initial_sq = [&](const Tensor& p) {
      for (size_t k = 0; have_initial_ && initial_params_.size() == params.size() && k < params.size(); ++k)
        if (params[k].is_same(p)) return sq_norm(initial_params_[k]);
      return kNaN;
    };
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const optim::ParamGroup& g = groups[gi];
      DecayGroup dg;
      dg.name = g.name.empty() ? std::to_string(gi) : g.name;
      dg.weight_decay = g.weight_decay;
      dg.lr = g.lr;
      dg.decoupled = decoupled;
      double w2 = 0, w02 = 0, s2 = 0;
      for (size_t pi = 0; pi < g.params.size(); ++pi) {
        const Tensor& p = g.params[pi];
        w2 += sq_norm(p);
        w02 += initial_sq(p);
        if (decoupled) {
          const auto m1 = state.find(std::to_string(gi) + "." + std::to_string(pi) + ".exp_avg");
          const auto m2 = state.find(std::to_string(gi) + "." + std::to_string(pi) + ".exp_avg_sq");
          if (m1 != state.end() && m2 != state.end()) {
            NoGradGuard ng;
            s2 += sq_norm(m1->second.to(kFloat32) / (sqrt(m2->second.to(kFloat32)) + 1e-8));
          }
        } else {
          const auto it = grad_sum.find(p.impl_ptr().get());
          if (it != grad_sum.end()) s2 += sq_norm(it->second) / static_cast<double>(nb * nb);
        }
      }
      dg.weight_norm = std::sqrt(w2);
      dg.initial_weight_norm = std::sqrt(w02);
      dg.decay_norm = g.weight_decay * dg.weight_norm;
      dg.step_norm = std::sqrt(s2);
      m.groups.push_back(dg);
    }
    if (!loop.empty()) {  // the loop's penalty as a coupled decay of lambda / a beside the loss gradient
      DecayGroup dg;
      dg.name = "the loop's penalty";
      dg.loop_penalty = true;
      dg.weight_decay = loop.front().second;
      double w2 = 0, w02 = 0, d2 = 0, s2 = 0;
      for (const auto& [p, lambda] : loop) {
        const double n2 = sq_norm(p);
        w2 += n2;
        w02 += initial_sq(p);
        d2 += (lambda / a) * (lambda / a) * n2;
        const auto it = grad_sum.find(p.impl_ptr().get());
        if (it != grad_sum.end()) s2 += sq_norm(it->second) / static_cast<double>(nb * nb);
      }
      dg.weight_norm = std::sqrt(w2);
      dg.initial_weight_norm = std::sqrt(w02);
      dg.decay_norm = std::sqrt(d2);
      dg.step_norm = std::sqrt(s2);
      m.groups.push_back(dg);
    }
    const auto& sl = r.history.step_losses;
    if (!sl.empty()) {
      m.run_first_loss = window_mean(sl, 0, tenth_of(sl.size()));
      m.run_window_loss = tail_mean(sl);
    }
    const double threshold = accuracy_threshold(loss_module_);
    std::vector<double> final_lrs, decays;
    for (const auto& g : groups) {
      final_lrs.push_back(g.lr);
      decays.push_back(g.weight_decay);
    }
    // Runs `probe` with every group's decay at 0, and puts the decays back whatever happens.
    auto without_decay = [&](const std::function<void()>& probe) {
      for (auto& g : groups) g.weight_decay = 0;
      try {
        probe();
      } catch (...) {
        for (size_t gi = 0; gi < groups.size(); ++gi) groups[gi].weight_decay = decays[gi];
        throw;
      }
      for (size_t gi = 0; gi < groups.size(); ++gi) groups[gi].weight_decay = decays[gi];
    };
    // With the loop's penalty, the probes train on its objective: a x the loss, plus the penalty where it
    // is kept; validation is scored on the loss alone. Runs `probe` so, and puts the loss back.
    const LossFunction plain = loss_;
    auto as_the_loop = [&](bool penalty, const std::function<void()>& probe) {
      if (loop.empty()) return probe();
      loss_ = [&, penalty](const Tensor& out, const Tensor& y) {
        Tensor l = plain(out, y) * a;
        if (penalty)
          for (const auto& [p, lambda] : loop) l = l + sum(p * p) * (0.5 * lambda);
        return l;
      };
      try {
        probe();
      } catch (...) {
        loss_ = plain;
        throw;
      }
      loss_ = plain;
    };
    if (decay_worth_probing(m, oo)) {
      say("weight-decay probe (on from the end)");
      m.probe_steps = std::min<int64_t>(oo.decay_probe_steps, r.steps);
      const SplitScore end = score(model_, *data_.val, loss_, o_.dead_pass_batches, threshold);
      m.val_loss = end.loss;
      m.val_accuracy = end.accuracy;
      m.val_examples = end.examples;
      std::string failed;
      SplitScore kept, free;
      as_the_loop(true, [&] {
        rerun_from_start(final_lrs, m.probe_steps, failed, false,
                         [&] { kept = score(model_, *data_.val, plain, o_.dead_pass_batches, threshold); });
      });
      as_the_loop(false, [&] {
        without_decay([&] {
          rerun_from_start(final_lrs, m.probe_steps, failed, false,
                           [&] { free = score(model_, *data_.val, plain, o_.dead_pass_batches, threshold); });
        });
      });
      if (failed.empty()) {
        m.kept_val_loss = kept.loss;
        m.free_val_loss = free.loss;
        m.kept_val_accuracy = kept.accuracy;
        m.free_val_accuracy = free.accuracy;
      }
    }
    if (decay_collapsed(m, oo) && have_initial_) {
      say("weight-decay probe (again without it)");
      const int64_t steps = std::min<int64_t>(std::min<int64_t>(r.steps, 300), static_cast<int64_t>(sl.size()));
      std::string failed;
      std::vector<double> again;
      as_the_loop(false, [&] { without_decay([&] { again = rerun_from_start(initial_lrs_, steps, failed); }); });
      if (!loop.empty())
        for (double& l : again) l /= a;  // the loss's own values, as the run's were recorded
      if (failed.empty() && static_cast<int64_t>(again.size()) == steps) {
        m.restart_steps = steps;
        m.restart_window_loss = tail_mean(again);
      }
    }
    for (Finding& f : check_weight_decay(m, oo)) found.add(std::move(f));
  });
  found.note_ran("O3");
  r.add_at_end(found);
}

// O6's eps rule: the optimizer's state after the run, judged beside what the run's own findings say of
// its pace.
void Session::check_epsilon_at_end(RunReport& r) {
  if (r.steps < 1) return;
  const bool slow = learned_slowly(r.findings);
  Report found;
  guarded(found, "the end-of-run checks", "O6's eps rule", "O6", [&] {
    for (Finding& f : check_adaptive_epsilon(opt_, model_, slow, o_.monitor.optim)) found.add(std::move(f));
  });
  r.add_at_end(found);
}

}  // namespace gradsleuth::debug
