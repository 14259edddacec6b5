// The training monitor (W3): it attaches to a model, its optimizer and loss, and calls the run
// checks each family registered on the events they listen to. See monitor.h.
#include "debug/run/monitor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "core/autocast.h"
#include "core/autograd.h"
#include "debug/checks/check_util.h"
#include "debug/evidence/tensor_stats.h"

namespace gradsleuth::debug {

namespace {
// A validation loss against the run's best as a ratio: latest / best for a positive best, and
// 1 + (latest - best) / |best| otherwise (a negative log-likelihood, where latest / best would fall
// as the loss rises).
double relative_to_best(double latest, double best) {
  return best > 0 ? latest / best : best < 0 ? 1.0 + (latest - best) / std::fabs(best) : std::nan("");
}
}  // namespace

namespace {
constexpr size_t kEvents = 16;  // RunEvent's bits
int bit_of(uint32_t event) {
  int b = 0;
  while (event > 1) event >>= 1, ++b;
  return b;
}
}  // namespace

const std::vector<RunCheck*>& Monitor::listening(uint32_t event) const { return listeners_[bit_of(event)]; }

// ---- W3 ---------------------------------------------------------------------------------
Monitor::Monitor(nn::Module& model, optim::Optimizer& optimizer, nn::Loss* loss, MonitorOptions o)
    : ctx_(model, optimizer, loss, o), checks_(all_run_checks(o)) {
  static_assert(RunEvent::Scaler == 1u << (kEvents - 1), "one listener list per RunEvent bit");
  ctx_.history = &history_;
  std::vector<double> lrs;
  for (const auto& g : optimizer.param_groups()) lrs.push_back(g.lr);
  lr_group_ = lr_reference_group(lrs);
  ctx_.add = [this](Finding f) { add(std::move(f)); };
  ctx_.note_ran = [this](const std::string& c) { report_.note_ran(c); };
  ctx_.pause = [this](bool on) { pause(on); };
  for (const auto& c : checks_)
    for (size_t b = 0; b < kEvents; ++b)
      if (c->events() & (1u << b)) listeners_[b].push_back(c.get());
  // Warnings the library raises (O5 from the optimizer, M2 from the layers) on this thread become
  // findings; the check they belong to words them (RunEvent::Warning). Another thread's training
  // (a second model, watched by its own Monitor) keeps its warnings.
  warnings_ = std::make_unique<WarningHandlerGuard>([this](const gradsleuth::Warning& w) {
    Finding f;
    f.check = w.check.empty() ? "W3" : w.check;
    f.severity = Severity::Warning;
    f.module = w.where;
    f.step = ctx_.step_now();
    const auto colon = w.message.find(": ");
    f.title = w.where + (colon == std::string::npos ? ": " + w.message : " " + w.message.substr(0, colon));
    f.cause = w.message;
    for (RunCheck* c : listening(RunEvent::Warning)) c->warning(ctx_, w, f);
    if (!f.check.empty()) add(std::move(f));  // a unit that cleared the check holds it, to add later
  }, WarningScope::ThisThread);
  for (RunCheck* c : listening(RunEvent::Attach)) c->attach(ctx_);

  // Every forward of the model (not the monitor's own probes): the training forwards carry the
  // step's batch.
  auto root = model.named_modules().front().second;  // (a clear error when the model is not in a shared_ptr)
  hooks_.pre(root, [this](nn::Module&, const Tensor& x) {
    if (probing_) return;
    const bool training = GradMode::is_enabled();
    if (training) {
      ctx_.x = x;
      ctx_.autocast = autocast_enabled() ? std::optional<DType>(autocast_dtype()) : std::nullopt;
    }
    for (RunCheck* c : listening(RunEvent::Forward)) c->forward(ctx_, x);
    if (training) ctx_.in_step = true;  // a training forward: step steps + 1 has begun
  });
  hooks_.post(root, [this](nn::Module&, const Tensor&, const Tensor& out) {
    if (!probing_ && GradMode::is_enabled()) output_numel_ = out.defined() ? out.numel() : -1;
  });
  if (nn::Loss* l = ctx_.loss) {
    hooks_.loss_pre(*l, [this](nn::Loss& l, const Tensor& in, const Tensor& t) {
      if (!GradMode::is_enabled()) return;  // an evaluation, not a training step
      ctx_.y = t;
      if (!probing_) {
        ++history_.loss_calls;
        if (in.defined() && in.numel() == output_numel_) ++history_.loss_calls_on_output;
        if (t.defined()) {
          history_.loss_target_dtype = t.dtype();
          history_.loss_target_shape = t.shape();
        }
      }
      for (RunCheck* c : listening(RunEvent::LossInput)) c->loss_input(ctx_, l, in, t);
    });
    hooks_.loss_post(*l, [this](nn::Loss& l, const Tensor&, const Tensor& t, const Tensor& v) {
      // A probe's call (the monitor paused) is not the step's loss.
      if (!GradMode::is_enabled() || v.numel() != 1 || probing_) return;
      ctx_.loss_value = v.item<double>();  // one value: cheap enough for every step
      ctx_.loss_seen = true;
      ctx_.loss_output = v;
      for (RunCheck* c : listening(RunEvent::LossValue)) c->loss_value(ctx_, l, t);
      ctx_.loss_output = Tensor();  // not kept: it holds the step's graph
    });
  }
  const size_t pre = ctx_.optimizer.add_pre_step_hook([this](optim::Optimizer&) {
    detail::OwnTime own;  // the checks' time, not the step's (W10)
    on_pre_step();
  });
  const size_t post = ctx_.optimizer.add_post_step_hook([this](optim::Optimizer&) {
    detail::OwnTime own;
    on_post_step();
  });
  opt_hooks_ = {pre, post};
}

Monitor::~Monitor() { detach(); }

std::vector<std::string> Monitor::run_check_ids() const {
  std::vector<std::string> ids;
  for (const auto& c : checks_) ids.push_back(c->ids());
  return ids;
}

void Monitor::detach() {
  if (!attached_) return;
  attached_ = false;
  hooks_.clear();
  for (size_t id : opt_hooks_) ctx_.optimizer.remove_hook(id);
  opt_hooks_.clear();
  if (ctx_.scaler) ctx_.scaler->remove_hook(scaler_hook_);
  for (RunCheck* c : listening(RunEvent::Detach)) c->detach(ctx_);
  warnings_.reset();
}

void Monitor::add(Finding f) {
  if (f.step < 0 && !finished_ && ctx_.step_now() > 0) f.step = ctx_.step_now();
  if (f.step < 0 && finished_) f.end_of_run = true;  // after the last step (Report::groups orders by it)
  report_.add(std::move(f));
}

void Monitor::pause(bool on) {
  probing_ = on;
  for (RunCheck* c : listening(RunEvent::Pause)) c->pause(ctx_, on);
}

void Monitor::watch(optim::GradScaler& scaler) {
  GS_CHECK(attached_ && !finished_, "debug::Monitor::watch",
           "the monitor is detached or finished; watch the scaler "
           "before training");
  if (ctx_.scaler == &scaler) return;  // watched already (a Session's watch() and its Trainer's scaler)
  if (ctx_.scaler) ctx_.scaler->remove_hook(scaler_hook_);
  ctx_.scaler = &scaler;
  for (RunCheck* c : listening(RunEvent::Scaler)) c->scaler(ctx_);
  // A step the scaler skips for inf/NaN gradients never reaches the optimizer's hooks: the
  // non-finite checks hear of it here, while the weights are still those that produced it. A
  // skip that the scaling alone caused (the calibration from init_scale) is localised to nothing.
  scaler_hook_ = scaler.add_update_hook([this](const optim::GradScaler&, const optim::ScalerUpdate& u) {
    if (!attached_ || finished_ || probing_ || !u.found_inf || u.skipped.empty() || !ctx_.in_step) return;
    const std::string why =
        "the loss scaler skipped step " + std::to_string(ctx_.steps + 1) + " for inf/NaN gradients" +
        (ctx_.loss_seen && !std::isfinite(ctx_.loss_value) ? " (the loss itself was non-finite)" : "");
    ctx_.scaler_skip = true;
    for (RunCheck* c : listening(RunEvent::NonFinite)) c->nonfinite(ctx_, why);
    ctx_.scaler_skip = false;
    ctx_.loss_seen = false;
  });
}

void Monitor::attach(optim::Trainer& trainer) {
  // The trainer may be destroyed before or after the monitor: its callbacks
  // hold only a weak token, and the monitor never calls back into the trainer.
  std::weak_ptr<bool> alive = alive_;
  trainer.on_step([this, alive](const optim::StepInfo& s) {
    if (alive.lock() && attached_) record_step(s.loss);
  });
  trainer.on_epoch([this, alive](const optim::EpochInfo& e) {
    if (alive.lock() && attached_) record_epoch(e.train_loss, e.val_loss, e.val_accuracy);
  });
  for (RunCheck* c : listening(RunEvent::Trainer)) c->trainer(ctx_);
}

void Monitor::record_step(double loss) {
  history_.step_losses.push_back(loss);
  if (!std::isfinite(loss) && !ctx_.localised) {
    Finding f;
    f.check = "W3";
    f.severity = Severity::Error;
    f.title = "the training loss is " + fmt_num(loss) + " at step " + std::to_string(ctx_.steps);
    f.step = ctx_.steps;
    f.evidence = {{"loss", loss, "must be finite"}};
    f.cause = "a NaN/Inf in the forward or the loss (see W4/M12 for where), or weights that diverged";
    f.fix = "lower the learning rate, use numerically stable ops (log_softmax, cross_entropy on logits)";
    add(std::move(f));
  }
}

void Monitor::record_epoch(double train_loss, double val_loss, double val_accuracy, double measured_val_loss,
                           double measured_train_loss) {
  history_.epoch_train_loss.push_back(train_loss);
  history_.epoch_val_loss.push_back(val_loss);
  history_.epoch_val_loss_measured.push_back(measured_val_loss);
  history_.epoch_train_loss_measured.push_back(measured_train_loss);
  history_.epoch_val_accuracy.push_back(val_accuracy);
  const EpochRecord e{train_loss, val_loss, val_accuracy};
  for (RunCheck* c : listening(RunEvent::Epoch)) c->epoch(ctx_, e);
  // W3: validation no longer improving: the loss rose two epochs in a row, well above its best, and
  // (where the validation accuracy is known) the accuracy fell from its best too. A loss that rises
  // while the accuracy holds is a model growing more confident on the examples it gets wrong.
  const auto& v = history_.epoch_val_loss;
  if (v.size() >= 3 && std::isfinite(v.back())) {
    const double best = *std::min_element(v.begin(), v.end() - 2);
    if (v[v.size() - 2] > best && v.back() > v[v.size() - 2]) {
      const LossCheckOptions& lo = ctx_.options.loss;
      const double rise = relative_to_best(v.back(), best);
      const double drop = validation_accuracy_drop(history_.epoch_val_accuracy);
      const bool confirmable = std::isfinite(drop);
      const double bar = 1.0 + (confirmable ? lo.val_rise_w3 : lo.val_rise_w3_unconfirmed);
      const bool big = rise > bar;
      const bool worse = !confirmable || drop > lo.val_accuracy_drop;
      Finding f;
      f.check = "W3";
      f.severity = big && worse ? Severity::Warning : Severity::Info;
      f.kind = big && worse ? Kind::ValidationRose : Kind::None;
      f.title = big && worse ? "the validation loss rose two epochs in a row: consider early stopping"
                : !big       ? "the validation loss rose two epochs in a row, within the noise of a healthy run"
                             : "the validation loss rose two epochs in a row but the validation accuracy held: the "
                               "model grows more confident on the examples it gets wrong, not worse at the task";
      f.evidence = {{"best validation loss", best, ""},
                    {"latest validation loss", v.back(), "> best twice"},
                    {"latest / best validation loss", rise,
                     "> " + fmt_num(bar) +
                         (confirmable ? " warns" : " warns (no validation accuracy to confirm it)")}};
      if (std::isfinite(drop))
        f.evidence.push_back({"validation accuracy: best - latest", drop,
                              "> " + fmt_num(lo.val_accuracy_drop) + " (with the rise) warns"});
      f.cause = "overfitting, or a learning rate too high for this stage of training";
      f.fix = big && worse ? "optim::EarlyStopping with patience, keep the best checkpoint, or lower the learning rate"
                           : "none needed; early stopping on the validation metric keeps the best epoch";
      add(std::move(f));
    }
  }
}

void revise_validation_rose_restored(Report& r, size_t best_epoch, double final_val_loss) {
  for (size_t i = 0; i < r.size(); ++i)
    if (r.findings()[i].fires() && r.findings()[i].is("W3", Kind::ValidationRose))
      r.replace(i, detail::as_best_epoch_restored(r.findings()[i], best_epoch, final_val_loss,
                                                  "the epochs after its best do not reach the final model"));
}

void revise_validation_rose(Report& r, const std::vector<double>& val_losses) {
  // The last rise of the run by W3's rule (a finding repeated over epochs keeps its first evidence), and
  // whether a later epoch came back to the best before it.
  const std::vector<double>& v = val_losses;
  size_t at = 0;
  double best = std::numeric_limits<double>::quiet_NaN();
  for (size_t e = 2; e < v.size(); ++e) {
    double before = std::numeric_limits<double>::infinity();
    for (size_t k = 0; k + 2 <= e; ++k)
      if (std::isfinite(v[k])) before = std::min(before, v[k]);
    if (std::isfinite(v[e]) && v[e - 1] > before && v[e] > v[e - 1]) at = e, best = before;
  }
  if (at == 0) return;
  size_t again = 0;
  for (size_t k = at + 1; k < v.size() && again == 0; ++k)
    if (v[k] <= best) again = k;
  if (again == 0) return;
  for (size_t i = 0; i < r.size(); ++i) {
    const Finding& g = r.findings()[i];
    if (!g.fires() || !g.is("W3", Kind::ValidationRose)) continue;
    Finding f = g;
    f.severity = Severity::Info;
    f.title = "the validation loss rose two epochs in a row, last up to epoch " + std::to_string(at) +
              ", then reached a new best at epoch " + std::to_string(again) + ": a wobble, not the end of improvement";
    f.evidence.push_back({"last epoch of a rise", static_cast<double>(at), "counted from 0"});
    f.evidence.push_back({"validation loss at the new best", v[again], "<= the best before the rise"});
    f.fix = "none needed; early stopping with patience keeps the best epoch";
    r.replace(i, f);
  }
}

void soften_validation_rose_of_changed_objective(Report& r, double before, double after) {
  for (size_t i = 0; i < r.size(); ++i) {
    const Finding& g = r.findings()[i];
    if (!g.fires() || !g.is("W3", Kind::ValidationRose)) continue;
    Finding f = detail::as_objective_change(g, before, after);
    f.title =
        "the validation loss rose two epochs in a row, but the loss function itself changed during the run (a "
        "weight or a target the loop updates): the rise is the objective's";
    f.fix = "none needed; judge the epochs by a fixed metric (an accuracy, the loss at a fixed weight)";
    r.replace(i, f);
  }
}

void Monitor::training_failed(const std::string& what) {
  Finding f;
  f.check = "W3";
  f.severity = Severity::Error;
  f.kind = Kind::TrainingFailed;
  f.title = std::string("training failed: ") + what;
  report_.add(std::move(f));
}

void Monitor::dispatch_pre_step(bool sample) {
  for (RunCheck* c : listening(RunEvent::BeforeStep)) c->before_step(ctx_, sample);
}

void Monitor::on_pre_step() {
  const bool sample = ctx_.sampled();
  // A non-finite loss (every step), or a unit that saw a non-finite gradient: localised now,
  // while the weights are still the ones that produced it.
  const bool bad_loss = ctx_.loss_seen && !std::isfinite(ctx_.loss_value);
  ctx_.nonfinite = bad_loss;
  if (sample) {
    SummaryCache once;  // the sampled checks read the same gradients: one pass over each
    // The library's likelihood losses reach exactly 0 only by saturating (float32 probabilities of 1):
    // a symptom to judge, not a batch past its margin.
    const bool saturating_loss = ctx_.loss && (loss_type::cross_entropy(*ctx_.loss) || loss_type::nll(*ctx_.loss) ||
                                               loss_type::elementwise(*ctx_.loss));
    ctx_.flat_step = !bad_loss && !saturating_loss && (!ctx_.loss_seen || ctx_.loss_value == 0.0) && [&] {
      bool any = false;
      for (const Tensor& p : ctx_.model.parameters()) {
        const Tensor g = p.grad();
        if (!g.defined()) continue;
        if (!(summarize_norm(g).norm == 0.0)) return false;
        any = true;
      }
      return any;
    }();
    dispatch_pre_step(sample);
    ctx_.flat_step = false;
  } else {
    dispatch_pre_step(sample);
  }
  if (ctx_.nonfinite) {
    const std::string why = std::string(bad_loss ? "the loss turned non-finite" : "gradients turned non-finite") +
                            " at step " + std::to_string(ctx_.steps + 1);
    for (RunCheck* c : listening(RunEvent::NonFinite)) c->nonfinite(ctx_, why);
  }
  ctx_.loss_seen = false;
}

// W3 on the validation loss a loop reports itself (Session::epoch(train, val)) beside the same loss
// measured on the validation loader after each of those epochs. A report in other units (a root, a
// sum, the target's own scale) or on other rows rises and falls with the measured loss; an accumulator
// not reset between epochs, a running total or a value kept from another epoch moves on its own. Over
// at least kMinReportedEpochs epochs: from the report's lowest epoch to the last, the report rose by
// more than kNetMove while the measured loss fell by more, and over the whole run the two curves'
// Spearman correlation is negative: a warning.
namespace {
constexpr size_t kMinReportedEpochs = 4;
constexpr double kNetMove = 0.1;

// The reported validation loss is the training rows' own: over the epochs where the model's loss on the
// validation rows stands kParted or more above its loss on training rows (the splits have parted, so which
// one a figure matches says which one was evaluated), at least kMinParted of them, the reported figure lies
// nearer the training rows' loss than the validation rows' (in log terms) in all but one, the last epoch
// included, and at the last epoch the validation rows' loss is kSplitGap or more above both. (The two
// measurements read up to 512 rows each, so a figure over a whole split differs from them by sampling
// noise: nearer, not equal.) At the last epoch the figure also lies within half the gap between the two
// measurements of the training rows' (in log terms): a figure far below both is in other units (a loop
// that reports plain cross-entropy beside a label-smoothed or mixup loss, whose floor is above zero),
// and which measurement it lies nearer says nothing of which rows it read.
constexpr double kParted = 1.15;
constexpr size_t kMinParted = 3;
constexpr double kSplitGap = 1.3;

}  // namespace

// W3: the loop's "validation" loss read from the training rows (evaluate(train_loader) for
// evaluate(val_loader)).
std::optional<Finding> monitor_detail::reported_on_training(const TrainingHistory& h) {
  const auto &r = h.epoch_val_loss, &mv = h.epoch_val_loss_measured, &mt = h.epoch_train_loss_measured;
  std::vector<double> rep, val, train;
  for (size_t e = 0; e < std::min({r.size(), mv.size(), mt.size()}); ++e)
    if (std::isfinite(r[e]) && std::isfinite(mv[e]) && std::isfinite(mt[e]) && r[e] > 0 && mt[e] > 0 && mv[e] > 0)
      rep.push_back(r[e]), val.push_back(mv[e]), train.push_back(mt[e]);
  const size_t n = rep.size();
  if (n < kMinReportedEpochs) return std::nullopt;
  const auto nearer_train = [&](size_t e) {
    return std::fabs(std::log(rep[e] / train[e])) < std::fabs(std::log(rep[e] / val[e]));
  };
  size_t parted = 0, near = 0;
  for (size_t e = 0; e < n; ++e)
    if (val[e] >= kParted * train[e]) {
      ++parted;
      if (nearer_train(e)) ++near;
    }
  const double last_gap = val.back() / std::max(train.back(), rep.back());
  const double off_train = std::fabs(std::log(rep.back() / train.back())),
               half_gap = 0.5 * std::log(val.back() / train.back());
  if (parted < kMinParted || near + 1 < parted || !nearer_train(n - 1) || !(last_gap >= kSplitGap) ||
      !(off_train <= half_gap))
    return std::nullopt;
  Finding f;
  f.check = "W3";
  f.severity = Severity::Warning;
  f.kind = Kind::ValidationMisreported;
  f.title = "the validation loss your loop reports is the training rows' loss: " + fmt_num(rep.back()) +
            " at the last epoch, where the model's loss on training rows is " + fmt_num(train.back()) +
            " and on the validation rows " + fmt_num(val.back());
  f.evidence = {{"epochs whose validation rows' loss is " + fmt_num(kParted) +
                     "x the training rows' or more (up to "
                     "512 rows each, eval mode)",
                 static_cast<double>(parted), ">= " + std::to_string(kMinParted)},
                {"of those, epochs whose reported validation loss is nearer the training rows' loss",
                 static_cast<double>(near), ">= all but one, the last included, and"},
                {"reported validation loss, last epoch", rep.back(), ""},
                {"measured loss on training rows, last epoch", train.back(), ""},
                {"measured loss on validation rows, last epoch", val.back(), ""},
                {"|log(reported / training rows' loss)|, last epoch", off_train,
                 "<= half of log(validation rows' / training rows' loss) = " + fmt_num(half_gap) + ", and"},
                {"validation rows' loss / the larger of the two", last_gap, ">= " + fmt_num(kSplitGap) + " warns"}};
  f.cause =
      "the loop evaluates the training data where it means the validation data (evaluate(train_loader) for "
      "evaluate(val_loader)), or its validation rows are training rows: the best epoch it keeps, its early "
      "stopping and every validation figure it prints read the training fit, which keeps improving while the "
      "validation loss does not";
  f.fix =
      "pass the validation loader to the epoch's evaluation, or call Session::epoch() without numbers to let it "
      "evaluate the validation loader itself";
  return f;
}

void Monitor::judge_reported_validation() {
  if (std::optional<Finding> f = monitor_detail::reported_on_training(history_)) {
    add(std::move(*f));
    return;
  }
  const auto& r = history_.epoch_val_loss;
  const auto& m = history_.epoch_val_loss_measured;
  std::vector<double> reported, measured;
  for (size_t e = 0; e < std::min(r.size(), m.size()); ++e)
    if (std::isfinite(r[e]) && std::isfinite(m[e])) reported.push_back(r[e]), measured.push_back(m[e]);
  if (reported.size() < kMinReportedEpochs) return;
  const double rho = detail::spearman(reported, measured);
  const size_t low = static_cast<size_t>(std::min_element(reported.begin(), reported.end()) - reported.begin());
  const double r0 = reported[low], r1 = reported.back(), m0 = measured[low], m1 = measured.back();
  const bool report_up = r0 > 0 && r1 > r0 * (1 + kNetMove), measured_down = m0 > 0 && m1 < m0 * (1 - kNetMove);
  if (!(rho < 0) || !report_up || !measured_down) return;
  Finding f;
  f.check = "W3";
  f.severity = Severity::Warning;
  f.kind = Kind::ValidationMisreported;
  f.title = "the validation loss your loop reports rose from " + fmt_num(r0) + " to " + fmt_num(r1) + " over epochs " +
            std::to_string(low + 1) + "-" + std::to_string(reported.size()) +
            " while the loss on the validation rows fell from " + fmt_num(m0) + " to " + fmt_num(m1) +
            ": the loop's validation computation, not the model, rose";
  f.evidence = {
      {"epochs with both values", static_cast<double>(reported.size()), ">= " + std::to_string(kMinReportedEpochs)},
      {"reported validation loss, at its lowest epoch", r0, ""},
      {"reported validation loss, last epoch", r1, "> (1 + " + fmt_num(kNetMove) + ") x its lowest, and"},
      {"measured validation loss (up to 512 rows, eval mode), at that epoch", m0, ""},
      {"measured validation loss, last epoch", m1, "< (1 - " + fmt_num(kNetMove) + ") x that, and"},
      {"Spearman correlation of the two curves over the epochs", rho, "< 0 warns"}};
  f.cause =
      "the number handed to Session::epoch as the validation loss does not follow the model's loss on the "
      "validation rows: a sum or count not reset between epochs (the squared errors of every epoch so far "
      "divided by this epoch's rows), a running total, a value from another epoch or another model, or another "
      "metric passed where the loss belongs. Early stopping, a plateau schedule and W3 read that number";
  f.fix =
      "reset every validation accumulator at the start of each validation pass (sum and count together), "
      "or call Session::epoch() without numbers to let it evaluate the validation loader itself";
  add(std::move(f));
}

void Monitor::on_post_step() {
  const bool sampled = ctx_.sampled();  // the step just taken
  const auto& groups = ctx_.optimizer.param_groups();
  history_.learning_rates.push_back(lr_group_ < groups.size() ? groups[lr_group_].lr : ctx_.optimizer.lr());
  ++ctx_.steps;
  ctx_.in_step = false;
  for (RunCheck* c : listening(RunEvent::AfterStep)) c->after_step(ctx_, sampled);
}

// W3 warns live, on the epoch where the validation loss has risen twice. The end of the run reads its
// rule again on the last epoch: the validation loss above (1 + val_rise_w3) x the run's best with the
// accuracy more than val_accuracy_drop under its best. Where the run went on and either came back (a
// bump of a noisy validation curve), or only the loss stayed up while the accuracy recovered (a model
// more confident on the examples it gets wrong), the rise is not the lasting loss of quality early
// stopping is for, and the end of the run keeps it as info. A rise that lasts to the end keeps its
// warning.
void Monitor::judge_validation_rise_at_end() {
  const auto& v = history_.epoch_val_loss;
  if (v.size() < 4 || !std::isfinite(v.back())) return;
  const auto& all = report_.findings();
  for (size_t i = 0; i < all.size(); ++i) {
    const Finding& w = all[i];
    if (w.check != "W3" || w.kind != Kind::ValidationRose) continue;
    const LossCheckOptions& lo = ctx_.options.loss;
    double best = v.back();
    for (double x : v)
      if (std::isfinite(x)) best = std::min(best, x);
    const double end_rise = relative_to_best(v.back(), best);
    const double drop = validation_accuracy_drop(history_.epoch_val_accuracy);
    const bool confirmable = std::isfinite(drop);
    const double bar = 1.0 + (confirmable ? lo.val_rise_w3 : lo.val_rise_w3_unconfirmed);
    const bool loss_up = end_rise > bar, accuracy_down = !confirmable || drop > lo.val_accuracy_drop;
    if (loss_up && accuracy_down) return;
    Finding f = w;
    f.severity = Severity::Info;
    f.kind = Kind::None;
    f.title = !loss_up ? "the validation loss rose two epochs in a row, then came back: at the last epoch it is " +
                             fmt_num(end_rise) + "x its best, a bump of a noisy validation curve, not a trend"
                       : "the validation loss rose two epochs in a row and stayed up, but by the last epoch the "
                         "validation accuracy is back within " +
                             fmt_num(lo.val_accuracy_drop) +
                             " of its best: the model grows more confident on the examples it gets wrong, not "
                             "worse at the task";
    f.evidence.push_back({"last epoch's validation loss / the run's best", end_rise,
                          "> " + fmt_num(bar) + " at the end, and"});
    if (confirmable)
      f.evidence.push_back({"validation accuracy at the last epoch: best - last", drop,
                            "> " + fmt_num(lo.val_accuracy_drop) + " at the end keeps the warning"});
    f.fix = "none needed; early stopping on the validation metric keeps the best epoch";
    report_.replace(i, std::move(f));
    return;
  }
}

void Monitor::finish(const Tensor& sample_x, const Tensor& sample_y) {
  if (finished_) return;
  finished_ = true;
  judge_validation_rise_at_end();
  revise_validation_rose(report_, history_.epoch_val_loss);  // W3's last rise followed by a new best
  judge_reported_validation();
  for (RunCheck* c : listening(RunEvent::Finish)) c->finish(ctx_);
  detach();
  for (RunCheck* c : listening(RunEvent::AfterRun)) c->after_run(ctx_, sample_x, sample_y);
}

void Monitor::replay_batches(const std::function<BatchReplay(const TrainingHistory&)>& replay) {
  if (finished_) return;
  const TrainingHistory h = history();
  ctx_.replaying = true;
  pause(true);
  BatchReplay r;
  try {
    r = replay(h);
  } catch (...) {
    pause(false);
    ctx_.replaying = false;
    throw;
  }
  pause(false);
  ctx_.replaying = false;
  if (!std::any_of(r.starts.begin(), r.starts.end(), [](double v) { return std::isfinite(v); })) r.starts.clear();
  history_.batch_replay = std::move(r);
}

TrainingHistory Monitor::history() const {
  TrainingHistory h = history_;
  for (RunCheck* c : listening(RunEvent::Series)) c->series(h);
  return h;
}

}  // namespace gradsleuth::debug
