// The end-of-run pass of L9 (debug/checks/loss/end_fit.h) on the user's model: the training split
// evaluated like validation, and, when the loss still fell at the end, the run repeated from its
// initial weights at a higher learning rate (Session::rerun_from_start, shared with O6's probe), and
// trained on from its end with its own schedule replayed.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include "core/ops.h"
#include "debug/checks/data/data_checks.h"
#include "debug/checks/hooks.h"
#include "debug/checks/loss/end_fit.h"
#include "debug/checks/loss/loss_checks.h"
#include "debug/checks/model/behaviour.h"
#include "debug/run/diagnose.h"
#include "debug/run/diagnose_util.h"
#include "debug/run/split_score.h"
#include "nn/checkpoint.h"
#include "optim/adam.h"

namespace gradsleuth::debug {
using namespace run_detail;
namespace {

// The rows of up to max_batches batches of `loader` (its first epoch's order), as one (x, y); both
// undefined when there is none.
std::pair<Tensor, Tensor> first_batches(const nn::DataLoader& loader, int64_t max_batches) {
  std::vector<Tensor> xs, ys;
  const int64_t nb = std::min<int64_t>(loader.num_batches(), max_batches);
  for (int64_t i = 0; i < nb; ++i) {
    const nn::Batch b = loader.batch(0, i);
    xs.push_back(b.x);
    ys.push_back(b.y);
  }
  if (xs.empty()) return {};
  return {cat(xs, 0), cat(ys, 0)};
}

// The mean loss of the rows of up to max_batches batches of `loader`, scored again in whole batches
// of `size` rows (eval mode, no gradients; the modes put back); NaN when they fill none.
double loss_in_batches_of(nn::Module& model, const nn::DataLoader& loader, const LossFunction& loss, int64_t size,
                          int64_t max_batches) {
  NoGradGuard ng;
  ModeSnapshot modes(model);
  model.eval();
  const Device d = model_device(model);
  const auto [x, y] = first_batches(loader, max_batches);
  double sum = 0.0;
  int64_t rows = 0;
  if (x.defined() && size > 0) {
    for (int64_t start = 0; start + size <= x.size(0); start += size) {
      const Tensor l = loss(model(x.narrow(0, start, size).to(d)), y.narrow(0, start, size).to(d));
      if (l.numel() != 1) break;
      sum += l.item<double>() * static_cast<double>(size);
      rows += size;
    }
  }
  return rows > 0 ? sum / static_cast<double>(rows) : std::nan("");
}

// The trained model against the best constant output on up to max_batches batches of held-out rows:
// each example's loss scored alone under the model, and under one output row trained on those rows
// themselves (Adam at 0.1, 300 steps, from the model's mean output), which favours the constant. Empty
// where the loss is not the mean of its rows' losses (a loss over the batch as a whole) or a step fails.
ConstantComparison against_constant(nn::Module& model, const nn::DataLoader& loader, const LossFunction& loss,
                                    int64_t max_batches) {
  ConstantComparison c;
  try {
    Tensor out, y;
    {
      NoGradGuard ng;
      ModeSnapshot modes(model);
      model.eval();
      const auto [rows_x, rows_y] = first_batches(loader, max_batches);
      if (!rows_x.defined()) return c;
      const Device d = model_device(model);
      y = rows_y.to(d);
      out = model(rows_x.to(d)).detach();
    }
    const int64_t n = out.dim() >= 1 ? out.size(0) : 0;
    if (n < 8 || y.dim() < 1 || y.size(0) != n || !out.is_floating_point()) return c;
    // First, on 8 rows, whether the loss is the mean of its rows' losses: a loss over the batch as a whole
    // (a triplet loss over every triplet of the batch) is not compared, and is never called on all n rows
    // at once, where its cost may grow as n^3.
    {
      NoGradGuard ng;
      double rows8 = 0.0;
      for (int64_t k = 0; k < 8; ++k) rows8 += loss(out.narrow(0, k, 1), y.narrow(0, k, 1)).item<double>();
      const double whole8 = loss(out.narrow(0, 0, 8), y.narrow(0, 0, 8)).item<double>();
      if (!(std::fabs(rows8 / 8.0 - whole8) <= 1e-3 * std::max(1.0, std::fabs(whole8)))) return c;
    }
    Tensor row = out.mean({0}, true).to(kFloat32).detach().clone().requires_grad_(true);
    optim::Adam opt({row}, optim::AdamOptions(0.1));
    for (int s = 0; s < 300; ++s) {
      opt.zero_grad();
      Tensor l = loss(row.expand(out.shape()), y);
      if (!std::isfinite(l.item<double>())) return c;
      l.backward();
      opt.step();
    }
    NoGradGuard ng;
    const Tensor constant = row.detach().expand(out.shape());
    double sum = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      c.model_rows.push_back(loss(out.narrow(0, k, 1), y.narrow(0, k, 1)).item<double>());
      c.constant_rows.push_back(loss(constant.narrow(0, k, 1), y.narrow(0, k, 1)).item<double>());
      sum += c.model_rows.back();
    }
    const double whole = loss(out, y).item<double>();
    if (!(std::fabs(sum / static_cast<double>(n) - whole) <= 1e-3 * std::max(1.0, std::fabs(whole)))) c = {};
  } catch (const std::exception&) {
    c = {};
  }
  return c;
}

// A fixed share of n rows, drawn without replacement (the same rows on every call).
std::vector<int64_t> fixed_share(int64_t n, double share) {
  std::vector<int64_t> rows(static_cast<size_t>(n));
  std::iota(rows.begin(), rows.end(), 0);
  std::mt19937_64 g(0x5eed);
  std::shuffle(rows.begin(), rows.end(), g);
  rows.resize(static_cast<size_t>(std::clamp<int64_t>(std::llround(share * static_cast<double>(n)), 1, n)));
  std::sort(rows.begin(), rows.end());
  return rows;
}

// The values of `ts` (detached copies), and those values written back into them: the trained model
// kept across a probe that starts from the initial weights.
std::vector<Tensor> values_of(const std::vector<Tensor>& ts) {
  NoGradGuard ng;
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.detach().clone());
  return out;
}
void write_values(const std::vector<Tensor>& ts, const std::vector<Tensor>& values) {
  NoGradGuard ng;
  for (size_t i = 0; i < values.size() && i < ts.size(); ++i) ts[i].detach().copy_(values[i]);
}

}  // namespace

std::vector<double> Session::rerun_from_start(const std::vector<double>& lrs, int64_t steps, std::string& failed,
                                              bool from_start, const std::function<void()>& at_end,
                                              const std::vector<double>& schedule,
                                              const std::vector<int64_t>& rows) {
  const std::vector<Tensor> params = model_.parameters(), buffers = model_.buffers();
  std::vector<double> losses;
  if (params.size() != initial_params_.size() || buffers.size() != initial_buffers_.size()) {
    failed = "the model's parameters changed since training began";
    return losses;
  }
  const std::vector<Tensor> trained_params = values_of(params), trained_buffers = values_of(buffers);
  std::vector<double> run_lrs;
  const std::map<std::string, Tensor> trained_state = opt_.state_dict();
  for (const auto& g : opt_.param_groups()) run_lrs.push_back(g.lr);
  auto restore = [&](const std::vector<Tensor>& ps, const std::vector<Tensor>& bs) {
    write_values(params, ps);
    write_values(buffers, bs);
  };
  const bool was_training = model_.is_training();
  try {
    if (from_start) {
      restore(initial_params_, initial_buffers_);
      opt_.load_state_dict(initial_opt_state_);
      if (!opt_.state_dict().empty()) throw std::runtime_error("the optimizer's state could not be reset");
    }
    for (size_t g = 0; g < lrs.size() && g < opt_.param_groups().size(); ++g) opt_.param_groups()[g].lr = lrs[g];
    model_.train();
    const nn::DataLoader& train = *data_.train;
    const int64_t bs = train.options().batch_size_;
    const int64_t nb = rows.empty() ? train.num_batches() : (static_cast<int64_t>(rows.size()) + bs - 1) / bs;
    // A subset's epoch: the loader's order for that epoch, kept to `rows`.
    std::vector<char> in(rows.empty() ? 0 : static_cast<size_t>(train.dataset().size()), 0);
    for (int64_t r : rows) in[static_cast<size_t>(r)] = 1;
    std::vector<int64_t> epoch_rows;
    int64_t epoch_of_rows = -1;
    auto subset_batch = [&](int64_t e, int64_t i) {
      if (e != epoch_of_rows) {
        epoch_rows.clear();
        for (int64_t r : train.order(e))
          if (in[static_cast<size_t>(r)]) epoch_rows.push_back(r);
        epoch_of_rows = e;
      }
      const size_t hi = std::min(epoch_rows.size(), static_cast<size_t>((i + 1) * bs)),
                   lo = std::min(hi, static_cast<size_t>(i * bs));
      if (lo == hi) throw std::runtime_error("the training loader's epoch holds fewer of the probe's rows than it needs");
      return train.load_rows(std::vector<int64_t>(epoch_rows.begin() + lo, epoch_rows.begin() + hi));
    };
    const Device d = model_device(model_);
    for (int64_t i = 0; i < steps && nb > 0; ++i) {
      if (!schedule.empty())
        for (size_t g = 0; g < lrs.size() && g < opt_.param_groups().size(); ++g)
          opt_.param_groups()[g].lr = lrs[g] * schedule[static_cast<size_t>(i) % schedule.size()];
      const nn::Batch b = rows.empty() ? train.batch(i / nb, i % nb) : subset_batch(i / nb, i % nb);
      opt_.zero_grad();
      Tensor l = loss_(model_(b.x.to(d)), b.y.to(d));
      l.backward();
      opt_.step();
      losses.push_back(l.numel() == 1 ? l.item<double>() : kNaN);
    }
    if (at_end) at_end();
  } catch (const std::exception& e) {
    failed = e.what();
  }
  // Back to the trained model, whatever happened.
  restore(trained_params, trained_buffers);
  for (size_t g = 0; g < run_lrs.size(); ++g) opt_.param_groups()[g].lr = run_lrs[g];
  try {
    opt_.load_state_dict(trained_state);
  } catch (const std::exception&) {
  }
  opt_.zero_grad();
  model_.train(was_training);
  return losses;
}

// Training batches measured again without an update, with the monitor paused; the trained model is
// restored whatever happens.
// - The batches of the steps whose loss jumped above the first loss (L1's and O6's spike candidates,
//   the highest first, DiagnoseOptions::spike_replays of them), read again from the training loader
//   in the order rerun_from_start replays, kept only where the batch's fingerprint is the one the step
//   trained on, their loss taken at the initial weights (train mode, without gradients).
// - When the loss swung wildly: DiagnoseOptions::swing_batches consecutive batches of the last epoch
//   at the trained weights (train mode, without gradients), and their loss_spread.
void Session::replay_batches() {
  if (!data_.train) return;
  monitor_->replay_batches([&](const TrainingHistory& h) {
    BatchReplay out;
    const LossHistoryStats by_l1 = analyse_loss_history(h.step_losses, o_.monitor.loss),
                           by_o6 = analyse_loss_history(h.step_losses, o_.monitor.optim.loss);
    std::vector<int64_t> steps = by_l1.spike_steps;
    for (int64_t t : by_o6.spike_steps) steps.push_back(t);
    std::sort(steps.begin(), steps.end());
    steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
    const bool swung = by_l1.oscillating || by_o6.oscillating;
    const std::vector<Tensor> params = model_.parameters(), buffers = model_.buffers();
    const int64_t nb = data_.train->num_batches();
    if (nb == 0) return out;
    const bool spikes = !steps.empty() && have_initial_ && o_.spike_replays > 0 &&
                        params.size() == initial_params_.size() && buffers.size() == initial_buffers_.size();
    const bool swings = swung && o_.swing_batches >= 3 && nb >= 3;
    if (!spikes && !swings) return out;
    std::stable_sort(steps.begin(), steps.end(), [&](int64_t a, int64_t b) {
      return h.step_losses[static_cast<size_t>(a - 1)] > h.step_losses[static_cast<size_t>(b - 1)];
    });
    if (static_cast<int64_t>(steps.size()) > o_.spike_replays) steps.resize(static_cast<size_t>(o_.spike_replays));
    NoGradGuard ng;
    const std::vector<Tensor> trained_params = values_of(params), trained_buffers = values_of(buffers);
    auto restore = [&](const std::vector<Tensor>& ps, const std::vector<Tensor>& bs) {
      write_values(params, ps);
      write_values(buffers, bs);
    };
    const bool was_training = model_.is_training();
    const Device d = model_device(model_);
    model_.train();
    if (swings) {
      try {
        const int64_t epoch = std::max<int64_t>(0, (static_cast<int64_t>(h.step_losses.size()) - 1) / nb);
        std::vector<double> losses;
        for (int64_t i = 0; i < std::min(nb, o_.swing_batches); ++i) {
          const nn::Batch b = data_.train->batch(epoch, i);
          const Tensor l = loss_(model_(b.x.to(d)), b.y.to(d));
          if (l.numel() == 1 && std::isfinite(l.item<double>())) losses.push_back(l.item<double>());
        }
        out.spread = loss_spread(losses);
        out.spread_batches = static_cast<int64_t>(losses.size());
      } catch (const std::exception&) {
        out.spread = kNaN;  // judged on the run alone, as without the replay
      }
      write_values(buffers, trained_buffers);  // train mode moved the running statistics
    }
    if (spikes) {
      out.starts.assign(h.step_losses.size(), kNaN);
      try {
        restore(initial_params_, initial_buffers_);
        for (int64_t t : steps) {
          const size_t k = static_cast<size_t>(t - 1);
          if (k >= h.step_inputs.size()) continue;
          const nn::Batch b = data_.train->batch(static_cast<int64_t>(k) / nb, static_cast<int64_t>(k) % nb);
          const Tensor x = b.x.to(d);
          if (batch_fingerprint(x) != h.step_inputs[k]) continue;  // not the batch that step trained on
          const Tensor l = loss_(model_(x), b.y.to(d));
          if (l.numel() == 1) out.starts[k] = l.item<double>();
        }
      } catch (const std::exception&) {
        out.starts.clear();  // judged on the first loss, as without the replay
      }
    }
    restore(trained_params, trained_buffers);
    model_.train(was_training);
    return out;
  });
}

// M2 at the end of a run: the eval path against the training path, on the same training rows. Needs the
// training loader only (a loop that reports its own validation numbers passes no validation loader).
void Session::check_modes_at_end(RunReport& r) {
  if (!data_.train || !stopped_.empty() || r.steps < 2) return;
  Report found;
  guarded(found, "the end-of-run checks", "the eval path against the training path", "M2's mode agreement", [&] {
    const double threshold = accuracy_threshold(loss_module_);
    const int64_t nb = std::min<int64_t>(o_.dead_pass_batches, 20);
    ModeSnapshot modes(model_);
    QuietProbe quiet(model_);  // buffers (BatchNorm's running statistics) put back, warnings muted
    const Tensor x = data_.train->batch(0, 0).x.to(model_device(model_));
    const ModeProbe probe = probe_mode_dependence(model_, x);
    const SplitScore ev = score(model_, *data_.train, loss_, nb, threshold);
    const SplitScore tm = score(model_, *data_.train, loss_, nb, threshold, RowLosses::kNone, 0.1, &probe);
    const ModeAgreement m{ev.loss, tm.loss, ev.accuracy, tm.accuracy, ev.examples, probe.any_running_statistics()};
    for (Finding& f : check_mode_agreement(m, o_.gate_options.model)) found.add(std::move(f));
    if (!repeat_calls_reported(gate_phase_.findings))
      for (Finding& f : check_repeat_calls(model_, x, data_.train->options().shuffle_ ? 1 : 0)) found.add(std::move(f));
    found.note_ran("M2");
  });
  r.add_at_end(found);
}

void Session::check_fit_at_end(RunReport& r) {
  if (!data_.train || !data_.val || !stopped_.empty() || r.steps < 2) return;
  Report found;
  guarded(found, "the end-of-run checks", "L9's pass over both splits", "L9", [&] {
    const double threshold = accuracy_threshold(loss_module_);
    EndFitMeasure m;
    const double below = o_.fit.labels_tail.confident_below;
    const SplitScore tr =
        score(model_, *data_.train, loss_, o_.dead_pass_batches, threshold, RowLosses::kUnscored, below);
    const SplitScore va =
        score(model_, *data_.val, loss_, o_.dead_pass_batches, threshold, RowLosses::kUnscored, below);
    m.train_loss = tr.loss;
    m.train_accuracy = tr.accuracy;
    m.train_examples = tr.examples;
    m.val_loss = va.loss;
    m.val_accuracy = va.accuracy;
    m.val_exact_match = va.exact_match;
    m.val_examples = va.examples;
    m.val_confusion = va.confusion;
    {  // half the model's weights or more written by nn::load: a pretrained model, fine-tuned
      std::set<const void*> weights, loaded;
      for (auto& [name, t] : model_.named_parameters())
        if (t.dim() >= 2) weights.insert(t.impl_ptr().get());
      for (const nn::LoadRecord& rec : nn::load_records())
        for (const nn::LoadedTensor& l : rec.tensors)
          if (const auto into = l.into.lock(); into && weights.count(into.get())) loaded.insert(into.get());
      m.pretrained = !weights.empty() && 2 * loaded.size() >= weights.size();
    }
    // Validation's classes the training pass never met (a split cut from a class-ordered pool).
    int64_t seen_rows = 0, seen_hits = 0;
    for (size_t k = 0; k < va.confusion.size(); ++k) {
      int64_t rows = 0, trained = 0;
      for (int64_t n : va.confusion[k]) rows += n;
      if (k < tr.confusion.size())
        for (int64_t n : tr.confusion[k]) trained += n;
      if (trained == 0) {
        m.val_unseen_rows += rows;
        continue;
      }
      seen_rows += rows;
      seen_hits += k < va.confusion[k].size() ? va.confusion[k][k] : 0;
    }
    if (seen_rows > 0) m.val_seen_accuracy = static_cast<double>(seen_hits) / static_cast<double>(seen_rows);
    m.class_labels = va.class_labels;
    m.train_row_losses = tr.row_losses;
    m.val_row_losses = va.row_losses;
    m.epoch_train_loss = r.history.epoch_train_loss;
    m.clipping_caps_steps = std::any_of(r.findings.findings().begin(), r.findings.findings().end(),
                                        [](const Finding& f) { return f.check == "O9" && f.fires(); });
    m.epoch_val_loss = r.history.epoch_val_loss;
    m.epoch_val_accuracy = r.history.epoch_val_accuracy;
    m.loaded_after_run = r.history.weights_loaded_after_run;
    m.loaded_unchanged = r.history.weights_loaded_unchanged;
    // L7's "validation too good" with the training split scored as validation is.
    revise_validation_too_good(r.findings, m.train_accuracy, m.val_accuracy, o_.monitor.loss);
    for (PhaseReport& p : r.phases)
      revise_validation_too_good(p.findings, m.train_accuracy, m.val_accuracy, o_.monitor.loss);
    revise_overfitting(r.findings, tr.row_losses, va.row_losses, o_.monitor.loss);
    revise_train_down_val_up(r.findings, tr.loss, o_.monitor.loss);
    // The loop loaded the best epoch's weights after training: the final model scores that epoch's
    // validation loss (within 5%) and the last epoch stood 10% or more above it. The rise after the best
    // epoch (W3), the training loss falling while validation rose (L1) and the last epochs' gap (L7) do not
    // reach the final model.
    if (m.loaded_after_run && std::isfinite(va.loss)) {
      const auto& vl = r.history.epoch_val_loss;
      size_t best = vl.size();
      for (size_t e = 0; e < vl.size(); ++e)
        if (std::isfinite(vl[e]) && (best == vl.size() || vl[e] < vl[best])) best = e;
      if (best < vl.size() && vl[best] > 0 && std::fabs(va.loss - vl[best]) <= 0.05 * vl[best] &&
          std::isfinite(vl.back()) && vl.back() > 1.1 * vl[best]) {
        const auto restored = [&](Report& rep) {
          revise_validation_rose_restored(rep, best, va.loss);
          revise_train_down_val_up_restored(rep, best, va.loss);
          revise_overfitting_restored(rep, best, va.loss);
        };
        restored(r.findings);
        for (PhaseReport& p : r.phases) restored(p.findings);
      }
    }
    for (PhaseReport& p : r.phases) revise_train_down_val_up(p.findings, tr.loss, o_.monitor.loss);
    {
      std::vector<Finding> cancel = check_rows_cancel(tr.loss, tr.row_losses, "training", o_.monitor.loss);
      if (cancel.empty()) cancel = check_rows_cancel(va.loss, va.row_losses, "validation", o_.monitor.loss);
      if (!cancel.empty()) {
        const nn::Batch b = data_.train->batch(0, 0);
        const Device dev = model_device(model_);
        confirm_rows_cancel(cancel, model_, b.x.to(dev), b.y.to(dev), loss_);
      }
      for (Finding& f : cancel) found.add(std::move(f));
    }
    // L1's "stuck" against the best constant output on the validation rows (asked only where it fires).
    {
      std::optional<ConstantComparison> measured;
      const auto compare = [&] {
        if (!measured) measured = against_constant(model_, *data_.val, loss_, o_.dead_pass_batches);
        return *measured;
      };
      revise_loss_stuck(r.findings, compare, o_.monitor.loss);
      for (PhaseReport& p : r.phases) revise_loss_stuck(p.findings, compare, o_.monitor.loss);
      revise_loss_stuck_by_baseline(r.findings, gate_phase_.findings, o_.monitor.loss);
      for (PhaseReport& p : r.phases) revise_loss_stuck_by_baseline(p.findings, gate_phase_.findings, o_.monitor.loss);
    }
    found.note_ran("L6");
    for (PhaseReport& p : r.phases) revise_overfitting(p.findings, tr.row_losses, va.row_losses, o_.monitor.loss);
    // A loss over the batch as a whole grows with the batch's size: L7's gap with the validation
    // split scored in batches of the training size (asked only where L7 says overfitting).
    {
      const int64_t tb = data_.train->options().batch_size_;
      const int64_t vb = std::min<int64_t>(data_.val->options().batch_size_, data_.val->dataset().size());
      double rebatched = std::nan("");
      const auto at_train_batch = [&] {
        if (std::isnan(rebatched)) {
          try {
            rebatched = loss_in_batches_of(model_, *data_.val, loss_, tb, o_.dead_pass_batches);
          } catch (const std::exception&) {
            rebatched = std::numeric_limits<double>::infinity();
          }
        }
        return rebatched;
      };
      revise_overfitting_by_batch_size(r.findings, tr.loss, va.loss, tb, vb, at_train_batch, o_.monitor.loss);
      for (PhaseReport& p : r.phases)
        revise_overfitting_by_batch_size(p.findings, tr.loss, va.loss, tb, vb, at_train_batch, o_.monitor.loss);
    }
    // The run's own first and last tenth of steps.
    const auto& sl = r.history.step_losses;
    m.run_steps = static_cast<int64_t>(sl.size());
    if (!sl.empty()) {
      m.run_initial_loss = sl.front();
      m.run_first_loss = window_mean(sl, 0, tenth_of(sl.size()));
      m.run_window_loss = tail_mean(sl);
    }
    const std::vector<double>& run_lrs = r.history.learning_rates;
    if (!run_lrs.empty()) {
      m.final_lr = run_lrs.back();
      m.peak_lr = peak_lr(r);
    }
    bool falling = false, unread = false;
    std::vector<Finding> fs = check_end_fit(m, o_.fit, &falling, &unread);
    // Training on from the end for as many steps again (continue_min_steps at least for a run that
    // barely moved from its first loss, or whose curve cannot tell), with the run's recorded schedule
    // replayed: each group at its rate relative to the first's (a constant rate replays as itself, an
    // annealed one starts again from its peak), then the validation split.
    const bool barely = m.run_window_loss > o_.fit.barely_kept * m.run_first_loss;
    auto train_on = [&](int64_t run_steps, bool floor) {
      std::vector<double> final_lrs, rel;
      for (const auto& g : opt_.param_groups()) final_lrs.push_back(g.lr);
      const std::vector<double>& ref = !initial_lrs_.empty() && initial_lrs_[lr_group_] > 0 ? initial_lrs_ : final_lrs;
      const bool replay =
          !run_lrs.empty() && lr_group_ < ref.size() && ref[lr_group_] > 0 && ref.size() == final_lrs.size();
      if (replay)
        for (double lr : ref) rel.push_back(lr / ref[lr_group_]);
      const SplitScore& before = va;
      std::string failed_on;
      SplitScore after;
      rerun_from_start(
          replay ? rel : final_lrs, floor ? std::max(run_steps, o_.fit.continue_min_steps) : run_steps, failed_on,
          false,
          [&] {
            after = score(model_, *data_.val, loss_, o_.dead_pass_batches, threshold, RowLosses::kUnscored, below);
          },
          replay ? run_lrs : std::vector<double>{});
      m.continued_val_loss = failed_on.empty() ? after.loss : std::nan("");
      if (failed_on.empty()) m.continued_val_row_losses = after.row_losses;
      if (failed_on.empty()) count_flips(before, after, m.continued_fixed, m.continued_broken);
    };
    const int64_t steps =
        std::min<int64_t>(std::min<int64_t>(r.steps, 300), static_cast<int64_t>(r.history.step_losses.size()));
    if (falling && have_initial_ && !r.history.step_losses.empty()) {
      say("learning-rate probe (higher)");
      std::vector<double> lrs;
      for (double lr : initial_lrs_) lrs.push_back(lr * o_.fit.probe_factor);
      std::string failed;
      const std::vector<double> probe = rerun_from_start(lrs, steps, failed);
      if (failed.empty() && static_cast<int64_t>(probe.size()) == steps) {
        m.probe_window_loss = tail_mean(probe);
        const size_t n = probe.size();
        if (n < sl.size()) m.run_probe_window_loss = window_mean(sl, n - tenth_of(n), n);
        m.probe_steps = steps;
      }
      fs = check_end_fit(m, o_.fit);
      // The rate blamed: the same steps at the run's own first rates, the probe's way. The run's losses
      // include what its loop adds around the loader (mixup's blended targets, augmentation); the probe's
      // do not, and must beat this repeat as well.
      if (end_fit_blames_rate(fs)) {
        say("learning-rate probe (the run's own rate)");
        std::string failed_repeat;
        const std::vector<double> repeat = rerun_from_start(initial_lrs_, steps, failed_repeat);
        if (failed_repeat.empty() && static_cast<int64_t>(repeat.size()) == steps) {
          m.repeat_window_loss = tail_mean(repeat);
          fs = check_end_fit(m, o_.fit);
        }
      }
      // A short run the higher rate helps: probe_factor x its steps at its own rates (its schedule
      // stretched over them) instead.
      if (end_fit_blames_rate(fs) && steps < o_.fit.few_steps) {
        say("steps probe (longer)");
        const int64_t longer = static_cast<int64_t>(std::llround(static_cast<double>(steps) * o_.fit.probe_factor));
        std::vector<double> stretched;
        for (int64_t i = 0; i < longer && !run_lrs.empty(); ++i)
          stretched.push_back(
              run_lrs[std::min(run_lrs.size() - 1, static_cast<size_t>(static_cast<double>(i) / o_.fit.probe_factor))]);
        std::vector<double> rel;
        for (double lr : initial_lrs_) rel.push_back(initial_lrs_[lr_group_] > 0 ? lr / initial_lrs_[lr_group_] : 1.0);
        std::string failed_steps;
        const std::vector<double> run_longer =
            stretched.empty() || !(initial_lrs_[lr_group_] > 0)
                ? rerun_from_start(initial_lrs_, longer, failed_steps)
                : rerun_from_start(rel, longer, failed_steps, true, nullptr, stretched);
        if (failed_steps.empty() && static_cast<int64_t>(run_longer.size()) == longer)
          m.steps_probe_window_loss = tail_mean(run_longer);
        fs = check_end_fit(m, o_.fit);
      }
      // Not a rate too low: does training on from here still help?
      if (!end_fit_blames_rate(fs)) {
        train_on(steps, barely);
        fs = check_end_fit(m, o_.fit);
      }
    } else if (unread && !r.history.step_losses.empty()) {
      say("training on (the curve cannot tell)");
      train_on(steps, true);
      fs = check_end_fit(m, o_.fit);
    }
    // The learning-curve probe: the whole run again from its initial weights, its schedule replayed,
    // on a fixed share of its training examples and on all of them, then the validation split after
    // each. The rule compares the two repeats: both leave out alike what the loop adds around the
    // loader (augmentation, accumulation, clipping).
    const int64_t run_steps = static_cast<int64_t>(r.history.step_losses.size());
    if (have_initial_ && !data_.train->options().sampler_ && run_steps >= 2 && run_steps <= o_.fit.data_max_steps &&
        end_fit_wants_data_probe(m, fs, o_.fit)) {
      say("learning-curve probe (fewer training examples)");
      const int64_t n = data_.train->dataset().size();
      std::vector<double> schedule;
      const std::vector<double> lrs = replayed_rates(r, 1.0, schedule);
      std::string failed;
      auto repeat_on = [&](const std::vector<int64_t>& rows) {
        SplitScore after;
        rerun_from_start(
            lrs, run_steps, failed, true,
            [&] { after = score(model_, *data_.val, loss_, o_.dead_pass_batches, threshold); }, schedule, rows);
        return after;
      };
      // The share first: the repeat on all the examples runs only when the share falls short of the
      // run itself by the rule's margin (most runs stop here, at one repeat).
      const std::vector<int64_t> share = fixed_share(n, o_.fit.data_share);
      const SplitScore fewer = repeat_on(share);
      const bool short_of_run =
          failed.empty() && (std::isfinite(fewer.accuracy) && std::isfinite(va.accuracy)
                                 ? va.accuracy - fewer.accuracy > o_.fit.data_drop
                                 : fewer.loss > o_.fit.data_loss_rise * va.loss &&
                                       fewer.loss - va.loss > o_.fit.data_min_loss);
      const SplitScore all = short_of_run ? repeat_on({}) : SplitScore{};
      if (failed.empty() && std::isfinite(all.loss) && std::isfinite(fewer.loss)) {
        m.all_val_loss = all.loss;
        m.all_val_accuracy = all.accuracy;
        m.fewer_val_loss = fewer.loss;
        m.fewer_val_accuracy = fewer.accuracy;
        m.fewer_share = static_cast<double>(share.size()) / static_cast<double>(n);
        count_flips(all, fewer, m.fewer_fixed, m.fewer_broken);
        fs = check_end_fit(m, o_.fit);
      }
    }
    apply_label_tail(fs, LabelTailMeasure{tr.tail.scored, va.tail.scored, tr.tail.tail, va.tail.tail},
                     o_.fit.labels_tail);
    for (Finding& f : fs) found.add(std::move(f));
  });
  found.note_ran("L9");
  r.add_at_end(found);
}

}  // namespace gradsleuth::debug
