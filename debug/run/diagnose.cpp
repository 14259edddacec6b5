// The debug module on the user's own model (see diagnose.h): the data checks, the gate, the
// monitored run and the end-of-run diagnoses in one pipeline, shared by diagnose(), the Session
// of a hand-written loop and the bug zoo.
#include "debug/run/diagnose.h"
#include "debug/report/explore.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <sstream>

#include "core/autograd.h"
#include "debug/checks/data/data_checks.h"
#include "debug/checks/optim/weight_writes.h"
#include "debug/diagnosis/diagnosis.h"
#include "debug/evidence/catalogue.h"
#include "debug/report/html_report.h"
#include "debug/run/diagnose_util.h"

namespace gradsleuth::debug {

using namespace run_detail;

// ---- Session ----------------------------------------------------------------------------
Session::Session(nn::Module& model, nn::Loss& loss, optim::Optimizer& optimizer, DiagnoseData data, DiagnoseOptions o)
    : model_(model),
      loss_module_(&loss),
      loss_([&loss](const Tensor& out, const Tensor& y) { return loss(out, y); }),
      opt_(optimizer),
      data_(data),
      o_(std::move(o)) {
  init();
}

Session::Session(nn::Module& model, LossFunction loss, optim::Optimizer& optimizer, DiagnoseData data,
                 DiagnoseOptions o)
    : model_(model), loss_(std::move(loss)), opt_(optimizer), data_(data), o_(std::move(o)) {
  GS_CHECK(static_cast<bool>(loss_), "debug::Session",
           "the loss function is empty: pass an nn::Loss module or a "
           "function (output, target) -> loss");
  init();
}

Session::~Session() {
  hooks_.clear();
  for (size_t id : opt_hooks_) opt_.remove_hook(id);
}

void Session::say(const std::string& s) const {
  if (o_.progress) o_.progress(s);
}

void Session::init() {
  if (o_.num_classes > 0) {
    o_.gate_options.num_classes = o_.num_classes;
    o_.monitor.num_classes = o_.num_classes;
  }
  o_.monitor.data = o_.data;  // D5 on every training row uses the data checks' limits
  if (data_.train) {
    if (o_.data_checks) run_data_checks();
    if (o_.gate) {
      const nn::Batch first = data_.train->batch(data_.train->epoch(), 0);
      run_gate(first.x, first.y);
    }
  }
  start_monitor();
  // The starting point of the learning-rate probe (after the gate, which restores what it changes).
  if (data_.train && o_.lr_probe_steps > 0) {
    NoGradGuard ng;
    for (const Tensor& p : model_.parameters()) initial_params_.push_back(p.detach().clone());
    for (const Tensor& b : model_.buffers()) initial_buffers_.push_back(b.detach().clone());
    initial_opt_state_ = opt_.state_dict();
    for (const auto& g : opt_.param_groups()) initial_lrs_.push_back(g.lr);
    lr_group_ = lr_reference_group(initial_lrs_);
    have_initial_ = true;
  }
}

Report Session::begin(const Tensor& x, const Tensor& y) {
  GS_CHECK(!trainer_attached_ && monitor_->steps() == 0 && !finished_, "debug::Session::begin",
           "begin(x, y) runs the gate before training: call it before the first optimizer step and before "
           "attach(trainer)");
  if (data_.train && o_.data_checks && !data_checked_) run_data_checks();
  if (o_.gate) run_gate(x, y);
  // The gate's forwards and backwards must not count as training steps: a fresh monitor.
  start_monitor();
  return pretraining();
}

Report Session::pretraining() const {
  Report r;
  r.merge(data_phase_.findings);
  r.merge(gate_phase_.findings);
  return r;
}

void Session::run_data_checks() {
  data_checked_ = true;
  data_phase_.ran = true;
  say("data checks");
  Report& r = data_phase_.findings;
  const std::string who = "the data checks";
  const nn::DataLoader& train = *data_.train;
  const nn::Dataset& reference = data_.reference ? *data_.reference : train.dataset();
  guarded(r, who, "loader checks", "D1, D2, D3, D5, D8, D9", [&] {
    std::vector<Finding> fs = check_loader(train, o_.num_classes, o_.data);
    Tensor class_weight;  // D3: a loss that weighs its classes may compensate an imbalance
    if (auto* ce = dynamic_cast<const nn::CrossEntropyLoss*>(loss_module_)) class_weight = ce->options().weight_;
    if (auto* nl = dynamic_cast<const nn::NLLLoss*>(loss_module_)) class_weight = nl->options().weight_;
    // A binary task's pos_weight: class 0 weighs 1, class 1 pos_weight.
    if (auto* bl = dynamic_cast<const nn::BCEWithLogitsLoss*>(loss_module_))
      if (bl->options().pos_weight_.defined() && bl->options().pos_weight_.numel() == 1) {
        NoGradGuard ng;
        const double pw = bl->options().pos_weight_.detach().to(kCPU).to(kFloat64).item<double>();
        class_weight = tensor(std::vector<double>{1.0, pw}, {2});
      }
    weigh_class_counts(fs, class_weight, o_.data);
    revise_encoding_for_own_loss(fs, loss_module_ ? loss_module_->type_name() : std::string());
    revise_start_token_classes(fs, train.dataset());  // D3, D9: a start token is never a next-step target
    revise_start_token_labels(fs, train.dataset());
    r.add(fs);
    r.note_ran("D1, D2, D3, D5, D8, D9");
  });
  guarded(r, who, "alignment check", "D4", [&] {
    r.add(check_alignment(reference, train, o_.data));
    r.note_ran("D4");
  });
  if (data_.normalizer)
    guarded(r, who, "leakage check", "D7", [&] {
      r.add(check_leakage(*data_.normalizer, train.dataset(), data_.val ? &data_.val->dataset() : nullptr));
      r.note_ran("D7");
    });
  // D12 and D13-D16 read the training split's rows once.
  std::shared_ptr<const SplitSample> train_rows;
  auto read_train_rows = [&]() -> const SplitSample& {
    if (!train_rows) train_rows = read_split_sample(train.dataset(), o_.data);
    return *train_rows;
  };
  guarded(r, who, "duplicates check", "D12", [&] {
    r.add(check_duplicates(read_train_rows(), o_.data));
    r.note_ran("D12");
  });
  guarded(r, who, "target-leakage check", "D7", [&] {
    r.add(check_target_leakage(read_train_rows(), o_.data));
    r.note_ran("D7");
  });
  if (data_.val) {
    // D10 and D12's near copies read rows spread over both splits once.
    nn::Batch a, b;
    guarded(r, who, "split-consistency check", "D10", [&] {
      a = spread_rows(train.dataset(), o_.split_examples);
      b = spread_rows(data_.val->dataset(), o_.split_examples);
      r.add(check_split_consistency(a.x, a.y, b.x, b.y, o_.val_split, o_.data));
      // The first 64 of those validation rows read again: a random transform gives other inputs.
      const Tensor again = spread_rows(data_.val->dataset(), o_.split_examples, 64).x;
      if (b.x.dim() > 0 && again.dim() > 0 && again.size(0) <= b.x.size(0))
        r.add(check_split_repeatable(b.x.narrow(0, 0, again.size(0)), again, o_.val_split));
      r.note_ran("D10");
    });
    if (a.x.defined() && b.x.defined())
      guarded(r, who, "near-copies check", "D12",
              [&] { r.add(check_neighbour_conflicts(a.x, a.y, b.x, b.y, o_.val_split)); });
    guarded(r, who, "train/validation checks", "D13, D14, D15, D16", [&] {
      const std::shared_ptr<const SplitSample> val_rows = read_split_sample(data_.val->dataset(), o_.data);
      std::vector<Finding> fs = check_splits(read_train_rows(), *val_rows, o_.val_split, o_.data);
      revise_column_drift_by_augmentation(fs, train.dataset(), read_train_rows(), *val_rows, o_.val_split, o_.data);
      revise_example_drift_by_augmentation(fs, train.dataset(), read_train_rows(), o_.val_split);
      r.add(fs);
      r.add(check_split_shares(data_.train->dataset(), data_.val->dataset(), o_.val_split, o_.data));
      r.note_ran("D13, D14, D15, D16");
    });
  }
  train_rows_ = train_rows;
}

void Session::run_gate(const Tensor& x, const Tensor& y) {
  gate_phase_.ran = true;
  if (!o_.explore_path.empty()) {
    explore_x_ = x;
    explore_y_ = y;
  }
  say("pre-training gate");
  const Device d = model_device(model_);
  // pretrain_gate turns the errors of its phases into findings; this catches the rest (moving
  // the batch, a model that cannot list its parameters).
  guarded(gate_phase_.findings, "the pre-training gate", "gate", "W2",
          [&] {
            GateOptions go = o_.gate_options;
            if (loss_module_ && go.loss_type.empty()) go.loss_type = loss_module_->type_name();
            if (loss_module_) go.loss_summed = loss_module_->reduction() == nn::Reduction::Sum;
            if (data_.train) go.shuffled = data_.train->options().shuffle_ ? 1 : 0;
            gate_phase_.findings.merge(pretrain_gate(model_, x.to(d), y.to(d), loss_, &opt_, go, &zero_by_construction_,
                                                     &zero_until_first_step_));
          });
  // The loss's value on one output and its targets, asked again at the end of the run (a loss that
  // gives two values on them now draws something, and is not asked).
  try {
    NoGradGuard ng;
    ModeSnapshot modes(model_);
    model_.eval();
    objective_out_ = model_(x.to(d)).detach();
    objective_y_ = y.to(d);
    const double a = loss_(objective_out_, objective_y_).item<double>(),
                 b = loss_(objective_out_, objective_y_).item<double>();
    objective_before_ = a == b ? a : kNaN;
  } catch (const std::exception&) {
    objective_before_ = kNaN;
  }
  // D9's labels outside the classes, where the loss masks them itself (L5).
  guarded(data_phase_.findings, "the data checks", "the targets the loss masks", "D9, D3", [&] {
    revise_masked_labels(data_phase_.findings, gate_phase_.findings);
    if (targets_within_outputs(gate_phase_.findings)) revise_unused_class_zero(data_phase_.findings);
  });
  // D5 with what the model's first layer receives: a model may scale raw inputs itself.
  guarded(data_phase_.findings, "the data checks", "first-layer input", "D5's second look",
          [&] { revise_normalisation(data_phase_.findings, model_, x.to(d), o_.data); });
  Report& r = gate_phase_.findings;
  // The checks that train again: on the training loader's first batches.
  auto batches = [&](int64_t n) {
    std::vector<std::pair<Tensor, Tensor>> out;
    const int64_t e = data_.train->epoch();
    for (int64_t i = 0; i < std::min(n, data_.train->num_batches()); ++i) {
      const nn::Batch b = data_.train->batch(e, i);
      out.emplace_back(b.x.to(d), b.y.to(d));
    }
    return out;
  };
  if (o_.baseline && data_.train && data_.train->num_batches() >= 2) {
    say("input-independent baseline");
    guarded(r, "the input-independent baseline", "training runs", "M15", [&] {
      // Five batches to train on and one held out, where a batch smaller than
      // baseline_min_examples counts with the next ones (diagnose.h).
      const int64_t bs = std::max<int64_t>(data_.train->options().batch_size_, 1);  // 2+ batches: the first is full
      const int64_t per = std::max<int64_t>(1, (o_.baseline_min_examples + bs - 1) / bs);
      const int64_t have = std::min<int64_t>(6 * per, data_.train->num_batches());
      const int64_t units = std::max<int64_t>(2, have / per);
      const int64_t take = std::min<int64_t>(have, units * per);
      std::vector<std::pair<Tensor, Tensor>> all = batches(take);
      const int64_t held_from = std::max<int64_t>(1, take - per);
      std::vector<std::pair<Tensor, Tensor>> train(all.begin(), all.begin() + held_from);
      // Batches as one (x, y): one batch as it is, several joined along the rows.
      const auto joined = [](const tensor_list& xs, const tensor_list& ys) {
        return xs.size() == 1 ? std::make_pair(xs[0], ys[0]) : std::make_pair(gs::cat(xs, 0), gs::cat(ys, 0));
      };
      tensor_list hx, hy;
      for (int64_t i = held_from; i < take; ++i) {
        hx.push_back(all[static_cast<size_t>(i)].first);
        hy.push_back(all[static_cast<size_t>(i)].second);
      }
      const std::pair<Tensor, Tensor> held = joined(hx, hy);
      // Validation batches spread over the loader (a split sorted by class gives each class its share),
      // up to baseline_val_examples rows.
      std::pair<Tensor, Tensor> val;
      if (data_.val && data_.val->num_batches() > 0 && o_.baseline_val_examples > 0) {
        const int64_t vb = std::max<int64_t>(data_.val->options().batch_size_, 1);
        try {
          tensor_list vx, vy;
          for (int64_t i : spread_batches(*data_.val, std::max<int64_t>(1, o_.baseline_val_examples / vb))) {
            const nn::Batch b = data_.val->batch(0, i);
            vx.push_back(b.x.to(d));
            vy.push_back(b.y.to(d));
          }
          val = joined(vx, vy);
        } catch (const std::exception&) {
          val = {};  // batches that do not join (sequences of other lengths): the held-out batch alone
        }
      }
      r.add(input_independent_baseline(model_, train, held, loss_, o_.gate_options.model,
                                       val.first.defined() ? &val : nullptr,
                                       data_.val ? data_.val->dataset().size() : 0));
      r.note_ran("M15");
    });
    // The labels' findings, where the loss does not read the targets (M15).
    guarded(data_phase_.findings, "the data checks", "the targets the loss reads", "D3, D9, D15",
            [&] { revise_unread_targets(data_phase_.findings, gate_phase_.findings); });
  }
  if (o_.make_model && data_.train) {
    say("capacity check");
    guarded(r, "the capacity check", "training runs", "M16", [&] {
      r.add(capacity_check(o_.make_model, o_.small_width, o_.large_width, batches(4), loss_, o_.gate_options.model));
      r.note_ran("M16");
    });
  }
  if (o_.rerun || o_.rerun_model) {
    say("reproducibility check");
    guarded(r, "the reproducibility check", "two runs", "W1", [&] {
      r.add(o_.rerun_model ? check_reproducible(o_.rerun_model, o_.seed) : check_reproducible(o_.rerun, o_.seed));
      r.note_ran("W1");
    });
  }
}

void Session::start_monitor() {
  hooks_.clear();
  for (size_t id : opt_hooks_) opt_.remove_hook(id);
  opt_hooks_.clear();
  monitor_.reset();
  MonitorOptions mo = o_.monitor;
  // The gate's redundant biases: zero gradients the run need not judge again (a run check can probe
  // them itself only with a loss module).
  for (const std::string& p : zero_by_construction_) mo.optim.zero_grad_by_construction.push_back(p);
  for (const std::string& p : zero_until_first_step_) mo.optim.zero_until_first_step.push_back(p);
  if (data_.train) mo.loader_batches = data_.train->num_batches();  // D8 over the run
  if (data_.train) mo.train_dataset = &data_.train->dataset();      // D4 over the run
  if (data_.val) mo.val_dataset = &data_.val->dataset();            // D13 over the run
  mo.normalizer = data_.normalizer;                                 // D5's flattened features
  monitor_ = std::make_unique<Monitor>(model_, opt_, loss_module_, mo);
  if (scaler_) monitor_->watch(*scaler_);
  replay_.reset();
  if (!o_.explore_path.empty()) replay_ = std::make_unique<ReplayRecorder>(model_, opt_, o_.monitor.every);
  recorded_ = 0;
  heard_ = last_was_heard_ = false;
  epoch_first_step_ = 0;
  if (trainer_attached_) return;
  // Own loop: the loss module's value is this step's loss (training forwards only: an
  // evaluation runs without gradients); the optimizer's step records it.
  if (loss_module_)
    hooks_.loss_post(*loss_module_, [this](nn::Loss&, const Tensor&, const Tensor&, const Tensor& v) {
      if (!GradMode::is_enabled() || v.numel() != 1 || (monitor_ && monitor_->probing())) return;
      heard_loss_ = v.item<double>();
      heard_ = true;
      // Each call's value and the gradient the backward gives it: with several calls in a step (mixup's
      // two targets, a loss per head, accumulated micro-batches) the step's objective is their weighted
      // sum, the backward's weights (d objective / d value) times the values.
      std::shared_ptr<StepCalls> calls = step_calls_;
      const size_t k = calls->size();
      calls->push_back({heard_loss_, kNaN});
      if (v.requires_grad()) {
        Tensor t = v;
        t.register_hook([calls, k](const Tensor& g) {
          if (k < calls->size() && g.defined() && g.numel() == 1) (*calls)[k].second = g.item<double>();
          return Tensor();
        });
      }
    });
  // Added after the monitor's own post-step hook: monitor().steps() already counts this step.
  opt_hooks_.push_back(opt_.add_post_step_hook([this](optim::Optimizer&) {
    if (heard_ && recorded_ < monitor_->steps()) {
      double loss = heard_loss_;
      const StepCalls& calls = *step_calls_;
      if (calls.size() >= 2 && std::all_of(calls.begin(), calls.end(), [](const auto& c) {
            return std::isfinite(c.first) && std::isfinite(c.second);
          })) {
        loss = 0.0;
        for (const auto& [value, weight] : calls) loss += value * weight;
      }
      monitor_->record_step(loss);
      ++recorded_;
      last_was_heard_ = true;
    }
    heard_ = false;
    step_calls_ = std::make_shared<StepCalls>();  // the old list may still be held by a graph's hook
  }));
}

void Session::attach(optim::Trainer& trainer) {
  trainer_attached_ = true;
  hooks_.clear();
  for (size_t id : opt_hooks_) opt_.remove_hook(id);
  opt_hooks_.clear();
  monitor_->attach(trainer);
  if (trainer.options().grad_scaler()) watch(*trainer.options().grad_scaler());
}

void Session::watch(optim::GradScaler& scaler) {
  GS_CHECK(!finished_, "debug::Session::watch", "finish() was already called; watch the scaler before training");
  scaler_ = &scaler;
  monitor_->watch(scaler);
}

void Session::step(double loss) {
  // The step's loss was already heard from the loss module: the same value, not a new step.
  if (last_was_heard_ && recorded_ == monitor_->steps()) {
    last_was_heard_ = false;
    return;
  }
  monitor_->record_step(loss);
  ++recorded_;
  last_was_heard_ = false;
}

// O6 on weights that moved while the Session's optimizer never stepped (another one trains the model).
void Session::check_unwatched_updates(RunReport& r, int64_t training_losses) {
  if (r.steps > 0 || !have_initial_ || !stopped_.empty()) return;
  const std::vector<Tensor> params = model_.parameters();
  if (params.size() != initial_params_.size()) return;
  double moved = 0.0, start = 0.0;
  {
    NoGradGuard ng;
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i].shape() != initial_params_[i].shape()) return;
      const Tensor a = initial_params_[i].to(kCPU).to(kFloat64), b = params[i].detach().to(kCPU).to(kFloat64);
      moved += sum((b - a) * (b - a)).item<double>();
      start += sum(a * a).item<double>();
    }
  }
  if (!(start > 0)) return;
  Report found;
  for (Finding& f : judge_updates_without_steps(r.steps, training_losses, std::sqrt(moved / start), o_.monitor.optim))
    found.add(std::move(f));
  r.add_at_end(found);
}

void Session::step(const Tensor& loss) { step(loss.defined() && loss.numel() == 1 ? loss.item<double>() : kNaN); }

namespace {
// The Session's own pass over a loader while it lives (Monitor::own_pass).
struct OwnPass {
  explicit OwnPass(Monitor& m) : monitor(m) { monitor.own_pass(true); }
  ~OwnPass() { monitor.own_pass(false); }
  OwnPass(const OwnPass&) = delete;
  OwnPass& operator=(const OwnPass&) = delete;
  Monitor& monitor;
};
}  // namespace

void Session::epoch() {
  const std::vector<double>& sl = monitor_->history().step_losses;
  double train_loss = kNaN;
  if (sl.size() > epoch_first_step_) {
    double s = 0.0;
    for (size_t i = epoch_first_step_; i < sl.size(); ++i) s += sl[i];
    train_loss = s / static_cast<double>(sl.size() - epoch_first_step_);
  }
  double val_loss = kNaN, val_acc = kNaN;
  if (data_.val)
    guarded(monitor_->report(), "the epoch's evaluation", "validation pass", "L7, the W3 validation check", [&] {
      const OwnPass own(*monitor_);
      const optim::EvalResult ev = optim::evaluate(model_, *data_.val, loss_);
      val_loss = ev.loss;
      val_acc = ev.accuracy;
      val_class_examples_ = ev.class_examples;
      val_class_correct_ = ev.class_correct;
      val_classes_at_step_ = monitor_->steps();
      if (first_class_recall_.empty())
        for (size_t c = 0; c < ev.class_examples.size(); ++c)
          first_class_recall_.push_back(ev.class_examples[c] > 0 ? static_cast<double>(ev.class_correct[c]) /
                                                                       static_cast<double>(ev.class_examples[c])
                                                                 : kNaN);
    });
  record_epoch(train_loss, val_loss, val_acc, kNaN, kNaN);
}

void Session::epoch(double train_loss, double val_loss, double val_accuracy) {
  record_epoch(train_loss, val_loss, val_accuracy, measure_rows(data_.val, val_sample_, val_loss),
               measure_rows(data_.train, train_sample_, val_loss));
}

void Session::record_epoch(double train_loss, double val_loss, double val_accuracy, double measured_val_loss,
                           double measured_train_loss) {
  ++epochs_;
  monitor_->record_epoch(train_loss, val_loss, val_accuracy, measured_val_loss, measured_train_loss);
  epoch_first_step_ = monitor_->history().step_losses.size();
}

// The loss on up to 512 rows spread over a loader's dataset (the same rows each epoch, in its batch
// size), in eval mode without gradients, beside the validation loss the loop reported (W3). NaN where
// the loop reported none, there is no such loader, or the evaluation fails.
double Session::measure_rows(const nn::DataLoader* from, std::shared_ptr<nn::DataLoader>& sample, double reported) {
  if (!from || !std::isfinite(reported)) return kNaN;
  try {
    if (!sample) {
      const nn::Batch b = spread_rows(from->dataset(), 512);
      sample = std::make_shared<nn::DataLoader>(
          std::make_shared<nn::TensorDataset>(b.x, b.y, "rows sample"),
          nn::DataLoaderOptions().batch_size(std::max<int64_t>(1, from->options().batch_size_)));
    }
    const OwnPass own(*monitor_);
    return optim::evaluate(model_, *sample, loss_).loss;
  } catch (const std::exception&) {
    return kNaN;
  }
}

void Session::error(const std::exception& e) {
  if (std::optional<Finding> f = inplace_finding(e)) {
    monitor_->report().add(*f);
  } else {
    monitor_->training_failed(e.what());
  }
  stopped_ = std::string("training stopped at step ") + std::to_string(monitor_->steps() + 1) + ": " + e.what();
}

// D3 on the trained model: the recall of each class on the validation data, from the last
// epoch's pass when no step came after it, otherwise from a pass of its own.
void Session::check_class_errors_at_end() {
  if (!data_.val || !o_.data_checks || monitor_->steps() == 0 || !stopped_.empty()) return;
  Report& r = monitor_->report();
  guarded(r, "the end-of-run checks", "per-class validation pass", "D3's per-class recall", [&] {
    if (val_classes_at_step_ != monitor_->steps()) {
      const OwnPass own(*monitor_);
      const optim::EvalResult ev = optim::evaluate(model_, *data_.val, loss_);
      val_class_examples_ = ev.class_examples;
      val_class_correct_ = ev.class_correct;
    }
    if (val_class_examples_.empty()) return;  // not classification
    // An output far wider than the classes the labels reach (a metric model's embedding, which its own loss
    // scores) holds no class scores: its argmax is no prediction whose recall means anything.
    if (data_.val->num_batches() > 0) {
      const nn::Batch b = data_.val->batch(0, 0);
      const Device dev = model_device(model_);
      NoGradGuard ng;
      ModeSnapshot modes(model_);
      model_.eval();
      if (b.y.defined() && b.y.dtype() == kInt64 && b.y.dim() == 1 &&
          loss_type::wider_than_labels(model_(b.x.to(dev)), b.y.to(dev)))
        return;
    }
    // The first epoch's recall tells a class still being learned, when the run had later epochs.
    const std::vector<double> start = epochs_ >= 2 ? first_class_recall_ : std::vector<double>{};
    std::vector<Finding> recall = check_class_errors(val_class_examples_, val_class_correct_, o_.data, start);
    revise_class_imbalance(data_phase_.findings, recall, o_.data);  // an imbalance that cost no class
    revise_rare_class_recall(recall, data_phase_.findings);         // a rare class its weights already lift
    // Recall per position (a token's or a pixel's class), or over a vocabulary the inputs share (L5), judges
    // the imbalance only: a masked or next token that its context leaves open is a class no model recalls,
    // whatever the training.
    const bool positions = (data_.val->num_batches() > 0 && data_.val->batch(0, 0).y.dim() >= 2) ||
                           targets_within_outputs(gate_phase_.findings);
    for (Finding f : recall) {
      f.end_of_run = true;
      if (positions && f.fires()) {
        f.severity = Severity::Info;
        f.title += " (tokens or positions: a class its context leaves open is one no model recalls)";
      }
      r.add(std::move(f));
    }
    r.note_ran("D3");
  });
}

RunReport Session::finish(const Tensor& sample_x, const Tensor& sample_y) {
  GS_CHECK(!finished_, "debug::Session::finish", "finish() was already called: it runs once, after training");
  finished_ = true;
  hooks_.clear();
  for (size_t id : opt_hooks_) opt_.remove_hook(id);
  opt_hooks_.clear();
  RunReport r;
  const size_t before = monitor_->report().size();
  PhaseReport training{"training", false, "", {}}, end{"end of run", false, "", {}};
  training.ran = monitor_->steps() > 0;
  training.note = !stopped_.empty() ? stopped_ : std::to_string(monitor_->steps()) + " steps";
  training.findings = monitor_->report();
  if (o_.end_of_run) {
    end.ran = true;
    say("end-of-run checks");
    Tensor sx = sample_x, sy = sample_y;
    if (!sx.defined()) {
      const nn::DataLoader* src = data_.val ? data_.val : data_.train;
      if (src) {
        const nn::Batch b = first_rows(src->dataset(), o_.sample_examples);
        sx = b.x;
        sy = b.y;
      }
    }
    replay_batches();
    try {
      monitor_->finish(sx, sy);
    } catch (const std::exception& e) {
      Finding f;
      f.check = "W3";
      f.severity = Severity::Info;
      f.title = std::string("end-of-run checks failed: ") + e.what();
      monitor_->report().add(std::move(f));
    }
    // M7 over the training data with the trained model (the monitor saw only the sampled steps).
    if (o_.dead_pass && data_.train && stopped_.empty() && monitor_->steps() > 0 && model_device(model_) == kCPU)
      guarded(monitor_->report(), "the end-of-run checks", "dead-unit pass", "M7's pass over the training data", [&] {
        // Each layer's dead fraction at the run's first step, where the monitor recorded it and did not flag the
        // layer itself (its own finding says when the units died).
        std::map<std::string, double> at_init;
        for (const auto& [module, series] : monitor_->history().dead_fraction)
          if (!series.empty() && series.front().first == 1) at_init[module] = series.front().second;
        for (const Finding& f : monitor_->report().findings())
          if (f.check == "M7" && f.fires()) at_init.erase(f.module);
        for (Finding f : dead_relu_pass(model_, *data_.train, o_.dead_pass_batches, o_.monitor.activations, at_init)) {
          if (f.step < 0) f.end_of_run = true;
          monitor_->report().add(std::move(f));
        }
        monitor_->report().note_ran("M7");
      });
    check_class_errors_at_end();
    // D14 on the training split itself: read again, are its rows the ones the data checks read?
    if (train_rows_ && data_.train && stopped_.empty())
      guarded(monitor_->report(), "the end-of-run checks", "training rows read again", "D14's look after training",
              [&] {
                for (const Finding& f : check_training_rows_changed(data_.train->dataset(), *train_rows_, o_.data))
                  monitor_->report().add(f);
              });
    // Report::add appends a new finding and only counts one it already holds: the end of run's
    // own findings are those past the training's.
    const auto& all = monitor_->report().findings();
    for (size_t i = before; i < all.size(); ++i) end.findings.add(all[i]);
    // The end of the run may have judged a live finding again (W3's bump): the training phase shows
    // the verdict.
    for (size_t i = 0; i < before && i < training.findings.size(); ++i) training.findings.replace(i, all[i]);
  } else {
    end.note = "switched off (DiagnoseOptions::end_of_run)";
    monitor_->detach();
  }
  if (!data_phase_.ran)
    data_phase_.note = !o_.data_checks ? "switched off (DiagnoseOptions::data_checks)" : "no training loader";
  if (!gate_phase_.ran)
    gate_phase_.note =
        !o_.gate ? "switched off (DiagnoseOptions::gate)" : "no batch: no training loader and no begin(x, y)";
  const TrainingHistory seen = monitor_->history();
  revise_loss_reduction(gate_phase_.findings, seen.loss_divisors);  // L6 with the loop's division
  // The gate's gradients and loss probes with what the loop's backward reached and its loss took.
  revise_gradient_missing(gate_phase_.findings, seen, o_.gate_options.optim);  // O1
  revise_lr_range(gate_phase_.findings, seen.learning_rates);                  // O8 before a warm-up
  revise_parameter_unreached(gate_phase_.findings, seen);  // M5
  revise_linear_collapse(gate_phase_.findings, seen);      // M23 with the loss's other readers
  revise_random_at_eval(gate_phase_.findings, seen);       // M2 with a layer built in forward() (M5)
  revise_input_baseline(gate_phase_.findings, seen, o_.gate_options.model);  // M15 with the run's validation loss
  revise_gate_objective(gate_phase_.findings, seen);
  revise_missing_from_optimizer(gate_phase_.findings, model_, opt_);  // M10 with the groups at the end
  revise_balanced_evaluation(data_phase_.findings);                   // D15 under D3's compensated imbalance
  r.phases = {data_phase_, gate_phase_, training, end};
  r.findings.merge(data_phase_.findings);
  r.findings.merge(gate_phase_.findings);
  r.findings.merge(monitor_->report());
  // The run's O1 about a parameter the gate found used in eval mode only.
  soften_eval_only_findings(r.findings, gate_phase_.findings);
  for (PhaseReport& p : r.phases) soften_eval_only_findings(p.findings, gate_phase_.findings);
  r.history = seen;
  r.steps = monitor_->steps();
  r.stopped = stopped_;
  check_unwatched_updates(r, std::max<int64_t>(seen.loss_calls, recorded_));
  check_objective_drift(r);
  lr_probe(r);
  if (o_.end_of_run) {
    check_modes_at_end(r);
    check_fit_at_end(r);
  }
  if (o_.end_of_run) {  // L4's offset against L9's verdict
    const bool judged = r.findings.ran("L9");
    const bool slow = learned_slowly(r.findings);
    revise_output_init(r.findings, judged, slow, r.history.step_losses);
    for (PhaseReport& p : r.phases) revise_output_init(p.findings, judged, slow, r.history.step_losses);
  }
  if (o_.end_of_run) check_decay_at_end(r);
  if (o_.end_of_run) check_epsilon_at_end(r);
  if (o_.end_of_run) {  // O3's weight growth against a loss that settled
    const bool trained = started_trained(r.findings);
    revise_small_updates(r.findings, trained, r.history.epoch_val_loss);
    for (PhaseReport& p : r.phases) revise_small_updates(p.findings, trained, r.history.epoch_val_loss);
    const bool unstable = loss_history_unstable(r.findings);
    revise_weight_growth(r.findings, unstable, r.history.epoch_val_loss, o_.monitor.optim,
                         r.history.epoch_val_accuracy);
    for (PhaseReport& p : r.phases)
      revise_weight_growth(p.findings, unstable, r.history.epoch_val_loss, o_.monitor.optim,
                           r.history.epoch_val_accuracy);
  }
  if (stopped_.empty() && r.steps >= 3) {  // W2's errors of a loss the loop gives other targets
    const Report gate = gate_phase_.findings;
    revise_gate_premise(r.findings, gate, r.history, objective_y_);
    for (PhaseReport& p : r.phases) revise_gate_premise(p.findings, gate, r.history, objective_y_);
  }

  // What could not run, and what it needs.
  auto skip = [&](std::string checks, std::string reason, std::string remedy) {
    r.skipped.push_back({std::move(checks), std::move(reason), std::move(remedy)});
  };
  if (!loss_module_)
    skip("L2, L3, L5, D6, M3 (by values) and M19 (loss shapes) during training; M18's loss comparison",
         "the loss is a function, not an nn::Loss module: no hook sees its inputs",
         "pass the nn::Loss module (nn::CrossEntropyLoss, ...) instead of a lambda");
  if (!data_.train)
    skip("D3, D4, D5, D7, D8, D9, D10, D12-D16 (D1, D2 ran on the gate's batch only)",
         "no training DataLoader was given", "pass it as DiagnoseData::train");
  else if (!o_.data_checks)
    skip("D1-D10, D12-D16 on the loaders", "switched off", "DiagnoseOptions::data_checks = true");
  if (data_.train && o_.data_checks && !data_.normalizer) {
    // Said in the text report only when the training data went through an nn::Normalizer (its
    // dataset view is named "...+normalized"): synthetic or unnormalised data has nothing to leak.
    skip("D7", "no Normalizer was given", "pass the fitted nn::Normalizer as DiagnoseData::normalizer");
    r.skipped.back().quiet = data_.train->dataset().name().find("+normalized") == std::string::npos;
  }
  if (!data_.val)
    skip("D10, D13-D16 (train against validation), L7, the W3 validation check" +
             std::string(sample_x.defined() || data_.train ? "" : ", M18"),
         "no validation DataLoader was given", "pass it as DiagnoseData::val");
  if (!gate_phase_.ran)
    skip("W2: M1, M3-M6, M9-M14, L4, L6 before training", gate_phase_.note,
         o_.gate ? "give DiagnoseData::train, or call begin(x, y) before the loop" : "DiagnoseOptions::gate = true");
  if (!trainer_attached_ && r.history.step_losses.empty() && r.steps > 0)
    skip("L1, O6 (loss history)", "no step loss was recorded (the loss is a function and step() was not called)",
         "call step(loss) after each optimizer step, or attach a Trainer");
  if (!trainer_attached_ && epochs_ == 0 && r.steps > 0)
    skip("L7, the W3 validation check, M7's per-epoch pass", "no epoch was recorded",
         "call epoch() after each epoch, or attach a Trainer");
  if (o_.end_of_run && data_.train && (!o_.dead_pass || !stopped_.empty() || model_device(model_) != kCPU))
    skip("M7's pass over the training data",
         !o_.dead_pass       ? "switched off"
         : !stopped_.empty() ? "training stopped early: the model is not a trained one"
                             : "the model is not on the host (the pass feeds the loader's batches as they are)",
         !o_.dead_pass ? "DiagnoseOptions::dead_pass = true"
                       : "debug::dead_relu_pass(model, loader) on batches you move");
  if (!r.findings.ran("M15"))
    skip("M15 (input-independent baseline)",
         !o_.baseline                     ? "switched off"
         : !data_.train                   ? "no training DataLoader was given"
         : !gate_phase_.ran               ? "the gate did not run"
         : data_.train->num_batches() < 2 ? "the training loader has fewer than 2 batches"
                                          : "it raised an error (see the findings)",
         !o_.baseline ? "DiagnoseOptions::baseline = true" : "give a training DataLoader of 2 batches or more");
  if (!o_.make_model)
    skip("M16 (capacity check)", "it trains new models of two widths, and only your one model was given",
         "set DiagnoseOptions::make_model (width -> a new model), small_width and large_width");
  if (!o_.rerun && !o_.rerun_model)
    skip("W1 (reproducibility)", "it repeats a run from one seed, and only this run was given",
         "set DiagnoseOptions::rerun (seed -> the step losses of a short run of yours), or rerun_model (seed -> its "
         "losses and trained model)");
  skip("W5 (diagnosis report)",
       "a text report for a person, not a check: the gate's D1, M1, L4 and O1 findings hold "
       "its numbers",
       "call debug::diagnosis_report(model, x, y, loss) for the text");
  skip("W7 (profiler), W8's memory report (its rule on graphs kept from step to step runs)",
       "they measure where a step's time and memory go, not whether it is right",
       "wrap steps of your loop in a debug::Profiler (W7); call debug::memory_report(model, forward_loss) (W8)");
  if (r.steps == 0)
    skip("O1-O6, M7, M8, L1 during training",
         stopped_.empty() ? "no optimizer step was seen" : "training stopped before its first optimizer step",
         stopped_.empty() ? "construct the Session before the loop, then train with the same optimizer"
                          : "fix the error that stopped it (the findings above), then run again");

  // The run's diagnosis, made once here and kept in the report: every printer reads it.
  (void)r.findings.diagnosis();
  if (!o_.report_dir.empty()) {
    std::filesystem::create_directories(o_.report_dir);
    r.html_path = o_.report_dir + "/report.html";
    write_run_report(r.html_path, r, o_.title);
    MetricsLog log(o_.report_dir);
    for (size_t i = 0; i < r.history.step_losses.size(); ++i)
      log.log(static_cast<int64_t>(i + 1), "loss/train", r.history.step_losses[i]);
    for (auto& [name, pts] : r.history.grad_norms)
      for (auto& [st, val] : pts) log.log(st, "grad_norm/" + name, val);
  }
  if (!o_.explore_path.empty()) write_explorer(r);
  return r;
}

void Session::write_explorer(RunReport& r) {
  ReplaySeries replay;
  if (replay_) replay = replay_->series();
  replay_.reset();  // its hooks off before the explored forward
  if (!explore_x_.defined()) {
    r.skipped.push_back(SkippedChecks{
        "the explorer's page", "no batch was seen before training (no train loader, no begin(x, y), or the gate off)",
        "pass DiagnoseData::train, or call begin(x, y) before the loop, with the gate on"});
    return;
  }
  ExploreOptions eo;
  eo.title = o_.title;
  eo.replay = replay_from(r.history, &replay);
  eo.findings = &r.findings;
  const Device d = model_device(model_);
  const std::string err = explore(model_, explore_x_.to(d), explore_y_.to(d), loss_, o_.explore_path, eo);
  r.explore_path = o_.explore_path;
  if (!err.empty()) say("the explorer's pass failed (its page draws the graph up to the failing op): " + err);
}

// ---- diagnose ---------------------------------------------------------------------------
namespace {

RunReport run(Session& s, nn::Module& model, optim::Optimizer& optimizer, const LossFunction& loss,
              nn::DataLoader& train, const nn::DataLoader* val, const DiagnoseOptions& o) {
  optim::TrainerOptions to = o.trainer;
  to.epochs(o.epochs).max_steps(o.max_steps);
  optim::Trainer trainer(model, optimizer, to);
  trainer.set_loss(loss);
  s.attach(trainer);
  if (o.progress)
    o.progress(to.max_steps() > 0 ? "training " + std::to_string(to.max_steps()) + " steps"
                                  : "training " + std::to_string(to.epochs()) + " epochs");
  try {
    trainer.fit(train, o.validate ? val : nullptr);
  } catch (const std::exception& e) {
    s.error(e);
  }
  return s.finish();
}

}  // namespace

RunReport diagnose(nn::Module& model, nn::Loss& loss, optim::Optimizer& optimizer, nn::DataLoader& train,
                   const nn::DataLoader* val, const nn::Normalizer* normalizer, DiagnoseOptions o) {
  Session s(model, loss, optimizer, {&train, val, normalizer}, o);
  return run(
      s, model, optimizer, [&loss](const Tensor& out, const Tensor& y) { return loss(out, y); }, train, val, o);
}

RunReport diagnose(nn::Module& model, LossFunction loss, optim::Optimizer& optimizer, nn::DataLoader& train,
                   const nn::DataLoader* val, const nn::Normalizer* normalizer, DiagnoseOptions o) {
  Session s(model, loss, optimizer, {&train, val, normalizer}, o);
  return run(s, model, optimizer, loss, train, val, o);
}

}  // namespace gradsleuth::debug
