// O10, the loss scaler: the trace of a GradScaler's updates, its rules and findings, and its run
// check (debug::Session::watch(scaler)); it also words the scaler's own warning about clipping scaled
// gradients.
#include "debug/checks/optim/loss_scale.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "debug/checks/check_util.h"
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

namespace {

// The thresholds (docs/checks.md, O10, derives them).
// A scale below 1 no longer scales anything up: the gradients overflow on their own (inf/NaN made
// by the model or the loss), and no scale will let a step through.
constexpr double kScaleFloor = 1.0;
// Halved this many updates in a row: every one of those steps skipped. With float16 gradients n
// halvings from 2^16 are needed only when some gradient exceeds 2^(n-1) (float16's largest value
// is ~2^16), so a calibration of the default 2^16 takes a few; 10 means gradients above 512 at every
// one of 10 steps, or gradients that are inf/NaN whatever the scale. With float32 gradients a
// single backoff already needs a gradient above ~5e33.
constexpr int64_t kBackoffRun = 10;
// After the first run of backoffs (the calibration), more than this share of the updates skipped,
// over at least kSkipMinUpdates of them. A healthy scaler skips about one step per growth_interval
// (it grows until it overflows once, 1/2000 by default).
constexpr double kSkipFraction = 0.5;
constexpr int64_t kSkipMinUpdates = 20;

std::string scale_str(double v) { return fmt_num(v); }

}  // namespace

void ScalerTrace::attach(optim::GradScaler& scaler, const nn::Module* model, std::function<int64_t()> step) {
  detach();
  scaler_ = &scaler;
  step_ = std::move(step);
  names_.clear();
  if (model)
    for (const auto& [name, p] : model->named_parameters()) names_.emplace_back(p.impl_ptr().get(), name);
  hook_ = scaler.add_update_hook([this](const optim::GradScaler&, const optim::ScalerUpdate& u) {
    ScalerRecord r;
    r.update = u.index;
    r.step = step_ ? step_() : -1;
    r.scale_before = u.scale_before;
    r.scale_after = u.scale_after;
    r.backoff = u.found_inf;
    for (const optim::NonFiniteGrad& g : u.nonfinite) r.nonfinite.push_back(name_of(g.param));
    records_.push_back(std::move(r));
  });
}

void ScalerTrace::detach() {
  if (scaler_) scaler_->remove_hook(hook_);
  scaler_ = nullptr;
}

std::string ScalerTrace::name_of(const Tensor& p) const {
  for (const auto& [impl, name] : names_)
    if (impl == p.impl_ptr().get()) return name;
  return p.str();
}

std::vector<std::pair<int64_t, double>> ScalerTrace::scale_series() const {
  std::vector<std::pair<int64_t, double>> out;
  for (const ScalerRecord& r : records_) out.emplace_back(r.update, r.scale_after);
  return out;
}

std::vector<Finding> ScalerTrace::findings() const {
  if (records_.empty()) return {};
  const int64_t n = static_cast<int64_t>(records_.size());
  // The first run of backoffs (from update 1), the longest run anywhere, the skipped steps.
  int64_t calibration = 0;
  while (calibration < n && records_[static_cast<size_t>(calibration)].backoff) ++calibration;
  int64_t longest = 0, run = 0, run_end = 0, skipped = 0;
  double min_scale = records_.front().scale_before;
  std::map<std::string, int64_t> culprits;
  for (int64_t k = 0; k < n; ++k) {
    const ScalerRecord& r = records_[static_cast<size_t>(k)];
    min_scale = std::min(min_scale, r.scale_after);
    if (!r.backoff) {
      run = 0;
      continue;
    }
    ++skipped;
    for (const std::string& p : r.nonfinite) ++culprits[p];
    if (++run > longest) longest = run, run_end = k;
  }
  const int64_t judged = n - calibration;
  const int64_t skipped_after = skipped - calibration;
  const double skip_share = judged > 0 ? static_cast<double>(skipped_after) / static_cast<double>(judged) : 0.0;
  // The parameter most often inf/NaN, and the list for the evidence.
  std::string worst;
  int64_t worst_count = 0;
  for (const auto& [p, c] : culprits)
    if (c > worst_count) worst = p, worst_count = c;
  const ScalerRecord& first = records_.front();
  const ScalerRecord& last = records_.back();

  auto base = [&](Finding& f) {
    f.evidence = {{"updates", static_cast<double>(n), ""},
                  {"skipped steps (inf/NaN gradient)", static_cast<double>(skipped), ""},
                  {"first scale", first.scale_before, ""},
                  {"lowest scale", min_scale, "< 1 warns"},
                  {"last scale", last.scale_after, ""},
                  {"longest run of backoffs", static_cast<double>(longest), ">= 10 warns"}};
    if (judged > 0)
      f.evidence.push_back(
          {"share of steps skipped after the first backoffs", skip_share, "> 0.5 over >= 20 updates warns"});
    if (!worst.empty()) {
      f.parameter = worst;
      f.evidence.push_back(
          {"updates where " + worst + "'s gradient was inf/NaN", static_cast<double>(worst_count), ""});
    }
    if (longest > 0 && last.step >= 0) f.step = records_[static_cast<size_t>(run_end)].step;  // the longest run's end
  };
  const std::string culprit_words =
      worst.empty() ? std::string() : " (" + worst + "'s gradient, at " + detail::num(worst_count) + " of them)";
  const std::string fix_nonfinite =
      "find where the inf/NaN first appears: run a step without the scaler (debug::check_gradient_health names "
      "the parameter, anomaly mode the op), then fix that op (a log or sqrt of 0, a division by zero, an "
      "overflowing exp); the scaler only hides it by skipping steps";

  std::vector<Finding> out;
  if (skipped > 0 && min_scale < kScaleFloor) {  // not a scale set below 1 on purpose
    Finding f = detail::make("O10", Severity::Warning,
                             "the loss scale fell to " + scale_str(min_scale) + " (below 1): " + detail::num(skipped) +
                                 " of " + detail::num(n) + " steps were skipped for inf/NaN gradients" + culprit_words);
    f.kind = Kind::ScaleCollapsed;
    base(f);
    f.cause =
        "gradients that are inf/NaN whatever the scale: below a scale of 1 the scaling no longer makes them "
        "overflow, so the model or the loss produces them, and GradScaler skips every such step and backs off "
        "again; the weights stop changing while the loop runs on";
    f.fix = fix_nonfinite;
    out.push_back(std::move(f));
  } else if (longest >= kBackoffRun) {
    Finding f = detail::make("O10", Severity::Warning,
                             "the loss scale was halved " + detail::num(longest) + " updates in a row, down to " +
                                 scale_str(min_scale) +
                                 ": every one of those steps "
                                 "was skipped for an inf/NaN gradient" +
                                 culprit_words);
    f.kind = Kind::ScaleHalving;
    base(f);
    f.cause =
        "gradients that overflow at every step even as the scale shrinks: inf/NaN made by the model or the loss, or "
        "gradients far larger than the scaled dtype holds (above 2^(n-1) after n halvings from 2^16 in float16)";
    f.fix = fix_nonfinite +
            "; if the gradients are finite but huge, lower the learning rate or clip them (after "
            "scaler.unscale_)";
    out.push_back(std::move(f));
  } else if (judged >= kSkipMinUpdates && skip_share > kSkipFraction) {
    Finding f = detail::make("O10", Severity::Warning,
                             detail::num(skipped_after) + " of " + detail::num(judged) +
                                 " steps after the first backoffs were skipped for inf/NaN gradients" + culprit_words +
                                 ": most of the training steps did nothing");
    f.kind = Kind::StepsSkipped;
    base(f);
    f.cause =
        "gradients that are inf/NaN at most steps (an op that overflows on some batches), or a scale grown back "
        "too soon (a growth_interval far below the default 2000 makes the scale overflow again after a few steps)";
    f.fix = fix_nonfinite + "; keep growth_interval at its default 2000";
    out.push_back(std::move(f));
  } else {
    Finding f = detail::make(
        "O10", Severity::Info,
        "the loss scale went from " + scale_str(first.scale_before) + " to " + scale_str(last.scale_after) + " over " +
            detail::num(n) + " updates; " + detail::num(skipped) + " step(s) skipped" +
            (calibration > 0 ? " (the first " + detail::num(calibration) + " while the scale found its range)"
                             : std::string()));
    f.kind = Kind::ScalerSummary;
    base(f);
    f.parameter.clear();
    out.push_back(std::move(f));
  }
  return out;
}

// ---- the run check ---------------------------------------------------------------------------

namespace {

class LossScaleRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "O10"; }
  uint32_t events() const override {
    return RunEvent::Scaler | RunEvent::Warning | RunEvent::Finish | RunEvent::Detach;
  }
  void scaler(RunContext& c) override {
    if (!c.scaler) return;
    RunContext* ctx = &c;
    trace_.attach(*c.scaler, &c.model, [ctx] { return ctx->step_now(); });
  }
  void warning(RunContext&, const gradsleuth::Warning& w, Finding& f) override {
    if (w.check != "O10") return;
    f.kind = Kind::ClippedScaledGradients;
    f.title = w.where + " ran on gradients still multiplied by the loss scale (before scaler.unscale_)";
    f.fix = "call scaler.unscale_(optimizer) after backward() and before " + w.where;
  }
  void finish(RunContext& c) override {
    if (trace_.records().empty()) return;
    c.note_ran("O10");
    c.add_all(trace_.findings());
  }
  void detach(RunContext&) override { trace_.detach(); }

 private:
  ScalerTrace trace_;
};

}  // namespace

std::unique_ptr<RunCheck> make_loss_scale_run_check(const MonitorOptions&) {
  return std::make_unique<LossScaleRunCheck>();
}

}  // namespace gradsleuth::debug
