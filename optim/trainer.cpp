// The training loop (see trainer.h): fit, evaluate, metric files, progress.
#include "optim/trainer.h"

#include <unistd.h>
#include <numeric>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/format.h"
#include "core/ops.h"
#include "nn/loss.h"
#include "optim/clip.h"
#include "optim/progress.h"

namespace gradsleuth::optim {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A JSON number; NaN and Inf (no JSON spelling) become null.
std::string json_num(double v) { return std::isfinite(v) ? str_printf("%.8g", v) : "null"; }
// A CSV field: empty for NaN.
std::string csv_num(double v) { return std::isnan(v) ? "" : json_num(v); }

// The device of a model's first parameter (CPU for a model without parameters).
Device model_device(nn::Module& model) {
  for (const Tensor& p : model.parameters()) return p.device();
  return kCPU;
}

// The batch on device d: x and y moved (no copy when already there), the indices kept.
nn::Batch batch_on(const nn::Batch& b, Device d) {
  if (b.x.device() == d && (!b.y.defined() || b.y.device() == d)) return b;
  nn::Batch out;
  out.x = b.x.to(d);
  out.y = b.y.defined() ? b.y.to(d) : b.y;
  out.indices = b.indices;
  return out;
}

bool is_classification(const Tensor& output, const Tensor& target) {
  return target.dtype() == kInt64 && target.dim() == 1 && output.dim() == 2 && output.size(0) == target.size(0);
}

// Class scores per position: output (B, C, d1, ...) and int64 targets (B, d1, ...), as cross-entropy
// reads a sequence or an image (a tagger, a segmentation).
bool is_class_map(const Tensor& output, const Tensor& target) {
  if (target.dtype() != kInt64 || target.dim() < 2 || output.dim() != target.dim() + 1 ||
      output.size(0) != target.size(0))
    return false;
  for (int64_t d = 1; d < target.dim(); ++d)
    if (output.size(d + 1) != target.size(d)) return false;
  return true;
}

// The progress display on stderr: one line redrawn with \r on a terminal,
// or plain lines (every `every` steps and at epoch ends) in a log file.
class ProgressBar {
 public:
  // first_epoch: the number of the run's first epoch (the ETA covers this run's epochs).
  ProgressBar(Progress mode, int64_t every, int64_t first_epoch)
      : every_(std::max<int64_t>(every, 1)), first_epoch_(first_epoch), start_(Clock::now()) {
    tty_ = mode == Progress::Auto && isatty(fileno(stderr));
    off_ = mode == Progress::Off;
  }
  void step(int64_t epoch, int64_t epochs, int64_t batch, int64_t batches, double loss, double acc, double ex_s) {
    if (off_) return;
    const auto now = Clock::now();
    const double run_batches = static_cast<double>(std::max<int64_t>((epochs - first_epoch_ + 1) * batches, 1));
    const double done = static_cast<double>((epoch - first_epoch_) * batches + batch + 1) / run_batches;
    const std::string eta = optim::eta(std::chrono::duration<double>(now - start_).count(), done);
    if (tty_) {
      if (batch + 1 < batches && now - last_draw_ < std::chrono::milliseconds(100)) return;
      last_draw_ = now;
      const double in_epoch = static_cast<double>(batch + 1) / static_cast<double>(std::max<int64_t>(batches, 1));
      std::fprintf(stderr, "\repoch %lld/%lld %s %lld/%lld  loss %.4f%s  %.0f ex/s  %s   ",
                   static_cast<long long>(epoch), static_cast<long long>(epochs), progress_bar(in_epoch).c_str(),
                   static_cast<long long>(batch + 1), static_cast<long long>(batches), loss, acc_str(acc).c_str(), ex_s,
                   eta.c_str());
      std::fflush(stderr);
    } else if ((batch + 1) % every_ == 0) {
      std::fprintf(stderr, "epoch %lld/%lld  step %lld/%lld  loss %.4f%s  %.0f ex/s  %s\n",
                   static_cast<long long>(epoch), static_cast<long long>(epochs), static_cast<long long>(batch + 1),
                   static_cast<long long>(batches), loss, acc_str(acc).c_str(), ex_s, eta.c_str());
    }
  }
  void epoch_end(const EpochInfo& e, int64_t epochs) {
    if (off_) return;
    if (tty_) std::fprintf(stderr, "\r\033[K");
    std::fprintf(stderr, "epoch %lld/%lld  train loss %.4f%s", static_cast<long long>(e.epoch),
                 static_cast<long long>(epochs), e.train_loss, acc_str(e.train_accuracy).c_str());
    if (!std::isnan(e.val_loss))
      std::fprintf(stderr, "  val loss %.4f%s", e.val_loss,
                   std::isnan(e.val_accuracy) ? "" : (" acc " + str_printf("%.4f", e.val_accuracy)).c_str());
    std::fprintf(stderr, "  lr %.3g  %.1fs  %.0f ex/s\n", e.lr, e.seconds, e.examples_per_second);
    std::fflush(stderr);
  }

 private:
  static std::string acc_str(double acc) { return std::isnan(acc) ? "" : "  acc " + str_printf("%.4f", acc); }
  bool tty_ = false, off_ = false;
  int64_t every_, first_epoch_;
  Clock::time_point start_, last_draw_{};
};

}  // namespace

LossFn cross_entropy_loss() {
  return [](const Tensor& out, const Tensor& y) { return nn::functional::cross_entropy(out, y); };
}

ClassHits class_hits(const Tensor& output, const Tensor& target) {
  GS_CHECK(is_classification(output, target), "accuracy", "needs logits (B, C) and int64 class targets (B), got ",
           output.str(), " and ", target.str());
  NoGradGuard ng;
  const Tensor t = target.to(output.device());
  const Tensor labelled = logical_and(ge(t, 0), lt(t, output.size(1)));
  const Tensor hit = logical_and(eq(argmax(output.detach(), 1), t), labelled);
  return {sum(hit.to(kInt64)).item<int64_t>(), sum(labelled.to(kInt64)).item<int64_t>()};
}

double accuracy(const Tensor& output, const Tensor& target) {
  const ClassHits h = class_hits(output, target);
  return h.counted > 0 ? static_cast<double>(h.right) / static_cast<double>(h.counted) : kNoValue;
}

EvalResult evaluate(nn::Module& model, const nn::DataLoader& loader, const LossFn& loss, bool eval_mode) {
  const auto t0 = Clock::now();
  const bool was_training = model.is_training();
  const Device dev = model_device(model);
  if (eval_mode) model.eval();
  NoGradGuard ng;
  EvalResult r;
  double loss_sum = 0.0;
  bool classes = true, per_class = true;  // accuracy by row; recall by class, by row or by position
  const std::vector<int64_t> order = loader.order(loader.epoch());
  const int64_t n = static_cast<int64_t>(order.size()), bs = loader.options().batch_size_;
  for (int64_t lo = 0; lo < n; lo += bs) {
    std::vector<int64_t> idx(order.begin() + lo, order.begin() + std::min(n, lo + bs));
    nn::Batch b = batch_on(loader.dataset().get_batch(idx), dev);
    Tensor out = model(b.x);
    const double bsz = static_cast<double>(b.size());
    loss_sum += loss(out, b.y).item<double>() * bsz;
    classes = classes && is_classification(out, b.y);
    per_class = per_class && (is_classification(out, b.y) || is_class_map(out, b.y));
    if (per_class) {
      // The rows (or positions) with a class target, per class (an ignore_index target is left out, as
      // the loss leaves it).
      const std::vector<int64_t> pred = argmax(out.detach(), 1).contiguous().to_vector<int64_t>(),
                                 truth = b.y.contiguous().to_vector<int64_t>();
      const size_t C = static_cast<size_t>(out.size(1));
      r.class_examples.resize(std::max(r.class_examples.size(), C), 0);
      r.class_correct.resize(r.class_examples.size(), 0);
      for (size_t i = 0; i < truth.size(); ++i) {
        if (truth[i] < 0 || static_cast<size_t>(truth[i]) >= C) continue;
        ++r.class_examples[static_cast<size_t>(truth[i])];
        r.class_correct[static_cast<size_t>(truth[i])] += pred[i] == truth[i] ? 1 : 0;
      }
    }
    r.examples += b.size();
  }
  model.train(was_training);
  r.loss = loss_sum / static_cast<double>(std::max<int64_t>(r.examples, 1));
  const int64_t labelled = std::accumulate(r.class_examples.begin(), r.class_examples.end(), int64_t{0});
  const int64_t hits = std::accumulate(r.class_correct.begin(), r.class_correct.end(), int64_t{0});
  r.accuracy = classes && labelled > 0 ? static_cast<double>(hits) / static_cast<double>(labelled) : kNoValue;
  if (!per_class) r.class_examples.clear(), r.class_correct.clear();
  r.seconds = seconds_since(t0);
  return r;
}

// ---- Trainer ------------------------------------------------------------------

Trainer::Trainer(nn::Module& model, Optimizer& optimizer, TrainerOptions options)
    : model_(model), opt_(optimizer), options_(std::move(options)), loss_(cross_entropy_loss()) {
  GS_CHECK(options_.epochs() >= 0, "Trainer", "epochs must be >= 0, got ", options_.epochs());
  const Progress pr = options_.progress();
  GS_CHECK(pr == Progress::Auto || pr == Progress::Lines || pr == Progress::Off, "Trainer", "progress value ",
           static_cast<int>(pr), " is not a Progress; pass Progress::Auto, Progress::Lines or Progress::Off");
  if (options_.autocast())
    GS_CHECK(is_reduced_float(*options_.autocast()), "Trainer", "autocast runs in float16 or bfloat16, got ",
             dtype_name(*options_.autocast()), ": pass TrainerOptions().autocast(gs::kFloat16) or gs::kBFloat16");
}

Trainer::~Trainer() = default;

Trainer& Trainer::set_loss(LossFn loss) {
  loss_ = loss ? std::move(loss) : cross_entropy_loss();
  return *this;
}
Trainer& Trainer::set_scheduler(LRScheduler* s) {
  scheduler_ = s;
  return *this;
}
Trainer& Trainer::set_plateau_scheduler(ReduceLROnPlateau* s) {
  plateau_ = s;
  return *this;
}

size_t Trainer::on_step(StepCallback cb) {
  callbacks_.push_back({next_id_, std::move(cb), nullptr});
  return next_id_++;
}
size_t Trainer::on_epoch(EpochCallback cb) {
  callbacks_.push_back({next_id_, nullptr, std::move(cb)});
  return next_id_++;
}
void Trainer::remove_callback(size_t id) {
  std::erase_if(callbacks_, [id](const Callback& c) { return c.id == id; });
}

void Trainer::open_logs() {
  if (options_.run_dir().empty() || steps_csv_.is_open()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(options_.run_dir(), ec);
  GS_CHECK(!ec, "Trainer", "cannot create the run directory ", options_.run_dir(), ": ", ec.message());
  const fs::path dir(options_.run_dir());
  // A new Trainer starts fresh files; a second fit() of the same one appends.
  steps_csv_.open(dir / "steps.csv", std::ios::out | std::ios::trunc);
  epochs_jsonl_.open(dir / "epochs.jsonl", std::ios::out | std::ios::trunc);
  GS_CHECK(steps_csv_ && epochs_jsonl_, "Trainer", "cannot write steps.csv / epochs.jsonl in ", options_.run_dir());
  steps_csv_ << "step,epoch,loss,accuracy,lr\n";
  steps_csv_.flush();
}

void Trainer::log_step(const StepInfo& s) {
  if (!steps_csv_.is_open()) return;
  steps_csv_ << s.step << ',' << s.epoch << ',' << csv_num(s.loss) << ',' << csv_num(s.accuracy) << ','
             << json_num(s.lr) << '\n';
}

void Trainer::log_epoch(const EpochInfo& e) {
  if (!epochs_jsonl_.is_open()) return;
  epochs_jsonl_ << "{\"epoch\":" << e.epoch << ",\"steps\":" << e.steps << ",\"train_loss\":" << json_num(e.train_loss)
                << ",\"train_accuracy\":" << json_num(e.train_accuracy) << ",\"val_loss\":" << json_num(e.val_loss)
                << ",\"val_accuracy\":" << json_num(e.val_accuracy) << ",\"lr\":" << json_num(e.lr)
                << ",\"seconds\":" << json_num(e.seconds)
                << ",\"examples_per_second\":" << json_num(e.examples_per_second) << "}\n";
  epochs_jsonl_.flush();
  steps_csv_.flush();
}

Device Trainer::device() const { return options_.device() ? *options_.device() : model_device(model_); }

FitResult Trainer::fit(nn::DataLoader& train, const nn::DataLoader* val) {
  const auto t_fit = Clock::now();
  const Device dev = device();
  if (options_.device()) model_.to(dev);  // in place: the optimizer's handles see the moved values
  open_logs();
  stop_ = false;
  FitResult result;
  ProgressBar bar(options_.progress(), options_.log_every(), epochs_done_ + 1);
  const int64_t epochs = options_.epochs(), batches = train.num_batches();
  const int64_t last_epoch = epochs_done_ + epochs;
  const std::vector<Tensor> params = model_.parameters();

  for (int64_t e = 0; e < epochs && !stop_; ++e) {
    const int64_t epoch = ++epochs_done_;  // from 1
    train.set_epoch(epoch - 1);            // the shuffle order depends only on (seed, epoch)
    model_.train();
    const auto t_epoch = Clock::now();
    const double lr = opt_.lr();
    double loss_sum = 0.0, hit_sum = 0.0;
    int64_t seen = 0, batch_index = 0;
    bool classes = true;
    for (const nn::Batch& host_batch : train) {
      const nn::Batch b = batch_on(host_batch, dev);
      // The step.
      // BUG B04: zero_grad() forgotten: each backward adds to the gradients of all
      // earlier batches. Correct: clear them first, every step.
      if (!options_.bugs().has(nn::Bug::B04)) opt_.zero_grad();
      Tensor out, loss;
      {
        std::optional<AutocastGuard> ac;  // mixed precision: the forward and the loss only
        if (options_.autocast()) ac.emplace(*options_.autocast());
        out = model_(b.x);
        loss = loss_(out, b.y);
      }
      GS_CHECK(loss.numel() == 1, "Trainer::fit", "the loss function must return one value, got ", loss.str(),
               " (did you pass a reduction of 'none'?)");
      GradScaler* scaler = options_.grad_scaler();
      (scaler ? scaler->scale(loss) : loss).backward();
      if (options_.clip_grad_norm() > 0) {
        // BUG B36: unscale_ forgotten before clipping: the norm compared with max_norm is the
        // scaled one (x 65536), so every gradient is cut far more than meant. Correct: unscale_
        // first (scaler.step then does not divide again).
        if (scaler && !options_.bugs().has(nn::Bug::B36)) scaler->unscale_(opt_);
        clip_grad_norm_(params, options_.clip_grad_norm());
      }
      if (scaler) {
        scaler->step(opt_);  // skipped when a gradient is inf/NaN
        scaler->update();
      } else {
        opt_.step();
      }
      if (scheduler_ && options_.scheduler_per_step()) scheduler_->step();

      // Bookkeeping.
      StepInfo s;
      s.step = ++steps_done_;
      s.epoch = epoch;
      s.batch_index = batch_index;
      s.batches = batches;
      s.loss = loss.item<double>();
      classes = classes && is_classification(out, b.y);
      s.accuracy = classes ? accuracy(out, b.y) : kNoValue;
      if (options_.reduce_mean()) {
        s.loss = options_.reduce_mean()(s.loss);
        if (classes) s.accuracy = options_.reduce_mean()(s.accuracy);
      }
      s.lr = opt_.lr();
      s.batch = &b;
      s.output = out;
      s.loss_tensor = loss;
      const double bsz = static_cast<double>(b.size());
      loss_sum += s.loss * bsz;
      if (classes) hit_sum += s.accuracy * bsz;
      seen += b.size();
      result.step_losses.push_back(s.loss);
      log_step(s);
      for (auto& c : callbacks_)
        if (c.step) c.step(s);
      bar.step(epoch, last_epoch, batch_index, batches, loss_sum / static_cast<double>(seen),
               classes ? hit_sum / static_cast<double>(seen) : kNoValue,
               static_cast<double>(seen * options_.processes()) / std::max(seconds_since(t_epoch), 1e-9));
      ++batch_index;
      if (options_.max_steps() >= 0 && steps_done_ >= options_.max_steps()) stop_ = true;
      if (stop_) break;
    }

    EpochInfo info;
    info.epoch = epoch;
    info.steps = steps_done_;
    info.seconds = seconds_since(t_epoch);
    info.train_loss = seen ? loss_sum / static_cast<double>(seen) : kNoValue;
    info.train_accuracy = seen && classes ? hit_sum / static_cast<double>(seen) : kNoValue;
    info.examples_per_second = static_cast<double>(seen * options_.processes()) / std::max(info.seconds, 1e-9);
    info.lr = lr;
    if (val) {
      // BUG B05: validation run in training mode (model.eval() forgotten): Dropout
      // keeps zeroing activations and BatchNorm uses (and updates from) the
      // validation batches. Correct: evaluate() switches to eval mode.
      std::optional<AutocastGuard> ac;  // evaluated in the precision it trains in
      if (options_.autocast()) ac.emplace(*options_.autocast());
      EvalResult ev = evaluate(model_, *val, loss_, /*eval_mode=*/!options_.bugs().has(nn::Bug::B05));
      info.val_loss = ev.loss;
      info.val_accuracy = ev.accuracy;
    }
    if (scheduler_ && !options_.scheduler_per_step()) scheduler_->step();
    if (plateau_) plateau_->step(val ? info.val_loss : info.train_loss);
    result.epochs.push_back(info);
    log_epoch(info);
    bar.epoch_end(info, last_epoch);
    for (auto& c : callbacks_)
      if (c.epoch) c.epoch(info);
  }
  result.steps = static_cast<int64_t>(result.step_losses.size());
  result.stopped_early = stop_;
  result.seconds = seconds_since(t_fit);
  return result;
}

FitResult fit(nn::Module& model, Optimizer& optimizer, nn::DataLoader& train, const nn::DataLoader* val,
              TrainerOptions options) {
  Trainer t(model, optimizer, std::move(options));
  return t.fit(train, val);
}

}  // namespace gradsleuth::optim
