// O6's update/weight ratios, measured: the weights copied before each sampled optimizer step and compared
// after it (||w_after - w_before|| / ||w_before||), with the norms and finiteness O2/O3 and O4 reuse. The
// verdict on the ratios is learning_rate.cpp's (UpdateRatioTracker::findings).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/optim/optim_checks.h"
#include "debug/evidence/tensor_stats.h"

namespace gradsleuth::debug {

namespace detail {
std::vector<double> moving_ratios(const std::vector<std::pair<int64_t, double>>& ratios) {
  std::vector<double> moving;
  for (const auto& [step, v] : ratios)
    if (v > 0) moving.push_back(v);
  return moving;
}
bool skipped_at_times(const std::vector<double>& moving, size_t measured, double min_ratio) {
  const double n = static_cast<double>(measured), k = static_cast<double>(moving.size());
  return moving.size() >= 3 && k >= 0.2 * n && k <= 0.8 * n && median(moving) >= min_ratio;
}
}  // namespace detail

using detail::kNaN;
using detail::median;

double UpdateRatioTracker::measured_norm(const Tensor& p) const {
  if (measuring_step_ < 0 || !p.defined()) return kNaN;
  for (const Param& q : params_)
    if (q.tensor.is_same(p)) return q.norm_before;
  return kNaN;
}

bool UpdateRatioTracker::measured_finite(const Tensor& p) const {
  return p.defined() &&
         std::find(finite_after_.begin(), finite_after_.end(), p.impl_ptr().get()) != finite_after_.end();
}

// ---- O6 update/weight ratios -----------------------------------------------------------------

void UpdateRatioTracker::attach(optim::Optimizer& opt, const nn::Module& model, int64_t every) {
  every = std::max<int64_t>(every, 1);
  attach(opt, model, [every](int64_t step) { return (step - 1) % every == 0; });
}

void UpdateRatioTracker::attach(optim::Optimizer& opt, const nn::Module& model,
                                std::function<bool(int64_t step)> measure) {
  detach();
  params_.clear();
  measurements_ = 0;
  measure_ = std::move(measure);
  const auto& groups = opt.param_groups();
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad()) continue;
    Param q;
    q.name = name;
    q.shape = shape_of(p);
    q.tensor = p;
    q.dim = p.dim();
    q.numel = p.numel();
    for (size_t g = 0; g < groups.size() && q.group < 0; ++g)
      for (const Tensor& t : groups[g].params)
        if (t.is_same(p)) {
          q.group = static_cast<int>(g);
          break;
        }
    params_.push_back(std::move(q));
  }
  opt_ = &opt;
  hooks_ = {opt.add_pre_step_hook([this](optim::Optimizer& o) { pre_step(o); }),
            opt.add_post_step_hook([this](optim::Optimizer& o) { post_step(o); })};
}

void UpdateRatioTracker::detach() {
  if (opt_ == nullptr) return;
  for (size_t id : hooks_) opt_->remove_hook(id);
  hooks_.clear();
  opt_ = nullptr;
  measuring_step_ = -1;
  for (Param& q : params_) q.before = Tensor();
}

void UpdateRatioTracker::pre_step(optim::Optimizer& opt) {
  const int64_t step = opt.steps_taken() + 1;
  if (!measure_ || !measure_(step)) return;
  NoGradGuard ng;
  for (Param& q : params_) {
    const Tensor& t = q.tensor;
    // The snapshot's buffer is kept from one measured step to the next (a fresh one each time
    // costs an allocation and, for large weights, page faults).
    if (!q.before.defined() || q.before.shape() != t.shape() || q.before.dtype() != t.dtype() ||
        q.before.device() != t.device())
      q.before = empty(t.shape(), TensorOptions(t.dtype()).device(t.device()));
    q.norm_before = kNaN;
    const bool host = t.device().is_cpu() && t.is_contiguous();  // q.before is contiguous: made by empty()
    if (host && t.dtype() == kFloat32) {
      // The copy and the weight's norm in one pass (NormHistory's weight norm: norm_before);
      // x * 0 is 0 for a finite x and NaN for NaN and Inf.
      const float* src = static_cast<const float*>(t.raw_data());
      float* dst = static_cast<float*>(q.before.raw_data());
      double sq = 0.0;
      float nonfinite = 0.0f;
#pragma omp simd reduction(+ : sq, nonfinite)
      for (int64_t i = 0; i < t.numel(); ++i) {
        const float v = src[i];
        dst[i] = v;
        sq += static_cast<double>(v) * static_cast<double>(v);
        nonfinite += v * 0.0f;
      }
      if (nonfinite == 0.0f && std::isfinite(sq)) q.norm_before = std::sqrt(sq);
    } else if (host) {
      std::memcpy(q.before.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()) * dtype_size(t.dtype()));
    } else {
      q.before.copy_(t.detach());
    }
  }
  measuring_step_ = step;
}

void UpdateRatioTracker::post_step(optim::Optimizer& opt) {
  finite_after_.clear();
  if (measuring_step_ < 0) return;
  NoGradGuard ng;
  for (Param& q : params_) {
    double wb = 0.0, d = 0.0;
    const Tensor after = q.tensor.detach().contiguous();
    if (!after.device().is_cpu() && after.numel() == q.before.numel()) {
      // On a device: the two sums there, in float64; two scalars come back.
      const Tensor a = after.to(kFloat64), b = q.before.to(kFloat64), diff = a - b;
      const std::vector<double> v = stack({sum(b * b), sum(diff * diff)}).to_vector<double>();
      wb = v[0];
      d = v[1];
    } else if (after.dtype() == kFloat32 && q.before.dtype() == kFloat32 && after.numel() == q.before.numel()) {
      // The common case (float32 on the host), vectorised. The read of the updated weight also
      // tells whether it is finite, which spares O4 a read of it (measured_finite).
      const float* a = static_cast<const float*>(after.raw_data());
      const float* b = static_cast<const float*>(q.before.raw_data());
      const int64_t n = after.numel();
      // ||w_before|| came with the copy (when the weight was finite; else it is read again). Each
      // difference is taken in float32 (exact when the two values are within a factor of 2 of
      // each other, as one step's are: Sterbenz) and squared in float64.
      if (std::isfinite(q.norm_before))
        wb = q.norm_before * q.norm_before;
      else
        sum_of_squares(b, n, wb);
      if (sum_of_squared_differences(a, b, n, d)) finite_after_.push_back(q.tensor.impl_ptr().get());
    } else {
      const std::vector<double> b = q.before.to_vector<double>(), a = after.to_vector<double>();
      for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        wb += b[i] * b[i];
        d += (a[i] - b[i]) * (a[i] - b[i]);
      }
    }
    wb = std::sqrt(wb);
    if (!std::isfinite(wb) || wb < o_.min_weight_rms * std::sqrt(static_cast<double>(std::max<int64_t>(q.numel, 1))))
      continue;
    q.ratios.emplace_back(measuring_step_, std::sqrt(d) / wb);
    q.lrs.push_back(q.group >= 0 ? opt.param_groups()[static_cast<size_t>(q.group)].lr : kNaN);
  }
  for (const optim::ParamGroup& g : opt.param_groups()) some_group_trains_ = some_group_trains_ || g.lr > 0;
  ++measurements_;
  measuring_step_ = -1;
}

bool UpdateRatioTracker::judged(const Param& q) const {
  return q.dim >= 2 && static_cast<int64_t>(q.ratios.size()) >= std::max<int64_t>(o_.min_update_records, 1);
}

double UpdateRatioTracker::median_ratio(const Param& q) {
  std::vector<double> r;
  for (const auto& [step, v] : q.ratios) r.push_back(v);
  return median(r);
}

double UpdateRatioTracker::median_weight_ratio() const {
  std::vector<double> medians;
  for (const Param& q : params_)
    if (judged(q)) medians.push_back(median_ratio(q));
  return medians.empty() ? kNaN : median(medians);
}

NormSeries UpdateRatioTracker::series() const {
  NormSeries s;
  for (const Param& q : params_) s.emplace_back(q.name, q.ratios);
  return s;
}

}  // namespace gradsleuth::debug
