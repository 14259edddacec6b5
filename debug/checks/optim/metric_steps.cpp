// O6: what a plateau scheduler or an early stopper was fed. Each ReduceLROnPlateau and
// EarlyStopping records the metric of every step() (optim::metric_step_records()); here a record
// is matched, step i against epoch i, with the series of the run's epochs it follows. The verdict
// (learning_rate.cpp) reads a Mode::Min record that follows the validation accuracy, or a Mode::Max
// one that follows a loss, as judging its metric the wrong way round.
#include <algorithm>
#include <numeric>

#include "debug/checks/check_util.h"
#include "debug/checks/optim/optim_checks.h"
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

namespace {
bool follows(const detail::SeriesFollow& f, double allowed_gap) {
  return f.n >= kMinMetricSteps && (f.exact || (f.gap <= allowed_gap && f.r >= kFollowCorrelation));
}
double mean_of(const std::vector<double>& v) { return detail::mean_and_variance(detail::finite_only(v)).first; }
// The matched series' first and last values, over the epochs the record's steps cover.
MetricFed fed_by(const detail::SeriesFollow& f, const std::vector<double>& series, size_t steps, double scale,
                 std::string what) {
  MetricFed fed;
  fed.what = std::move(what);
  fed.n = f.n;
  fed.gap = f.gap;
  fed.r = f.r;
  std::vector<double> s;
  for (size_t i = 0; i < std::min(series.size(), steps); ++i)
    if (std::isfinite(series[i])) s.push_back(scale * series[i]);
  if (!s.empty()) fed.first = s.front(), fed.last = s.back();
  return fed;
}
}  // namespace

MetricFed match_metric_steps(const optim::MetricStepRecord& rec, const TrainingHistory& h) {
  const std::vector<double>& m = rec.metrics;
  if (rec.mode == optim::Mode::Max) {
    const std::pair<const std::vector<double>*, const char*> losses[] = {
        {&h.epoch_val_loss, "the validation loss"},
        {&h.epoch_val_loss_measured, "the validation loss"},
        {&h.epoch_train_loss, "the training loss"}};
    for (const auto& [series, what] : losses) {
      const detail::SeriesFollow f = detail::follow_series(m, *series);
      if (follows(f, kLossGap * mean_of(*series))) return fed_by(f, *series, m.size(), 1.0, what);
    }
    return {};
  }
  for (double scale : {1.0, 100.0}) {
    const detail::SeriesFollow f = detail::follow_series(m, h.epoch_val_accuracy, scale);
    if (follows(f, kAccuracyGap * scale))
      return fed_by(f, h.epoch_val_accuracy, m.size(), scale,
                    scale == 1.0 ? "the validation accuracy" : "the validation accuracy in %");
  }
  // No accuracy reported: a number in [0, 1] or [0, 100] that rises while the validation loss (as
  // reported, else as the Session measured it) falls.
  if (!detail::finite_only(h.epoch_val_accuracy).empty()) return {};
  const std::vector<double>& val =
      detail::finite_only(h.epoch_val_loss).size() >= detail::finite_only(h.epoch_val_loss_measured).size()
          ? h.epoch_val_loss
          : h.epoch_val_loss_measured;
  const std::vector<double> x = detail::finite_only(m), vl = detail::finite_only(val);
  const size_t k = std::min(x.size(), vl.size());
  if (x.size() != m.size() || k < static_cast<size_t>(kMinMetricSteps) + 1) return {};
  auto within = [&](double hi) { return std::all_of(x.begin(), x.end(), [&](double v) { return v >= 0 && v <= hi; }); };
  const std::vector<double> xs(x.begin(), x.begin() + k), ls(vl.begin(), vl.begin() + k);
  std::vector<double> t(k);
  std::iota(t.begin(), t.end(), 0.0);
  if (!(within(1.0) || within(100.0)) || !(detail::spearman(xs, t) >= kMetricTrend) ||
      !(detail::spearman(ls, t) <= -kMetricTrend) || follows(detail::follow_series(m, val), kLossGap * mean_of(val)))
    return {};
  MetricFed fed;
  fed.what = "a number that rises as the validation loss falls (an accuracy or a score)";
  fed.n = static_cast<int64_t>(k);
  fed.r = detail::spearman(xs, ls);
  fed.first = xs.front();
  fed.last = xs.back();
  fed.by_trend = true;
  return fed;
}

}  // namespace gradsleuth::debug
