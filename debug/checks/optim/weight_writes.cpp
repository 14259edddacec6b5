// The loop's writes to the weights between optimizer steps (see weight_writes.h).
#include "debug/checks/optim/weight_writes.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"

namespace gradsleuth::debug {

void WeightWriteTracker::attach(optim::Optimizer& opt, const nn::Module& model, int64_t follow_max_elements) {
  detach();
  params_.clear();
  steps_ = written_steps_ = 0;
  after_last_step_ = after_last_step_same_ = false;
  follow_budget_ = follow_max_elements;
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad()) continue;
    Param q;
    q.name = name;
    q.tensor = p;
    const int64_t n = p.numel(), every = std::max<int64_t>(1, n / 64);
    std::vector<int64_t> at;
    for (int64_t i = 0; i < n && at.size() < 64; i += every) at.push_back(i);
    q.sample_index = tensor(at, {static_cast<int64_t>(at.size())}).to(p.device());
    params_.push_back(std::move(q));
  }
  opt_ = &opt;
  hooks_ = {opt.add_pre_step_hook([this](optim::Optimizer&) { pre_step(); }),
            opt.add_post_step_hook([this](optim::Optimizer&) { post_step(); })};
}

void WeightWriteTracker::detach() {
  if (opt_ == nullptr) return;
  for (size_t id : hooks_) opt_->remove_hook(id);
  hooks_.clear();
  opt_ = nullptr;
}

void WeightWriteTracker::compare(Param& q) {
  if (!q.stepped || q.tensor.version() == q.version_after) return;
  NoGradGuard ng;
  ++q.written;
  q.version_after = q.tensor.version();  // counted once, also when finish() follows a pre_step
  if (!q.follow && q.tensor.numel() > follow_budget_) return;  // counted, not measured
  const Tensor now = q.tensor.detach().to(kFloat64);
  if (!q.follow) {
    // The first write: from here on, the weight is copied after every step.
    q.follow = true;
    follow_budget_ -= q.tensor.numel();
    q.start = now.clone();
    q.writes = zeros(now.shape(), TensorOptions(kFloat64).device(now.device()));
    return;
  }
  if (!q.after.defined()) return;
  q.writes = q.writes + (now - q.after);
  ++q.measured;
}

void WeightWriteTracker::pre_step() {
  bool any = false;
  for (Param& q : params_) {
    const int64_t before = q.written;
    compare(q);
    any = any || q.written > before;
  }
  if (any) ++written_steps_;
}

void WeightWriteTracker::post_step() {
  NoGradGuard ng;
  ++steps_;
  for (Param& q : params_) {
    q.version_after = q.tensor.version();
    q.stepped = true;
    q.sample = index_select(q.tensor.detach().reshape({-1}), 0, q.sample_index);
    if (q.follow) q.after = q.tensor.detach().to(kFloat64).clone();
  }
}

void WeightWriteTracker::finish() {
  const int64_t before = written_steps_;
  bool same = true;
  {
    NoGradGuard ng;
    for (const Param& q : params_)
      if (q.sample.defined() && q.tensor.version() != q.version_after)
        same = same && amax(abs(index_select(q.tensor.detach().reshape({-1}), 0, q.sample_index).to(kFloat64) -
                                q.sample.to(kFloat64)))
                               .item<double>() == 0.0;
  }
  pre_step();
  if (steps_ > 0 && written_steps_ > before) {
    after_last_step_ = true;
    after_last_step_same_ = same;
  }
}

void WeightWriteTracker::resync() {
  NoGradGuard ng;
  for (Param& q : params_) {
    if (!q.stepped) continue;
    q.version_after = q.tensor.version();
    if (q.follow) q.after = q.tensor.detach().to(kFloat64).clone();
  }
}

WeightWriteTracker::Summary WeightWriteTracker::summary() const {
  NoGradGuard ng;
  Summary s;
  s.steps = steps_;
  s.written_steps = written_steps_;
  s.after_last_step = after_last_step_;
  s.after_last_step_same = after_last_step_ && after_last_step_same_;
  double dot = 0.0, moved_sq = 0.0, writes_sq = 0.0;
  int64_t most = 0;
  for (const Param& q : params_) {
    if (!q.follow) continue;
    ++s.followed;
    s.measured_writes += q.measured;
    if (q.written > most) most = q.written, s.most_written = q.name;
    if (q.measured == 0) continue;
    const Tensor moved = (q.tensor.detach().to(kFloat64) - q.start) - q.writes;
    dot += sum(q.writes * moved).item<double>();
    moved_sq += sum(moved * moved).item<double>();
    writes_sq += sum(q.writes * q.writes).item<double>();
  }
  if (moved_sq > 0.0 && std::isfinite(moved_sq)) {
    s.undone = -dot / moved_sq;
    s.write_ratio = std::sqrt(writes_sq / moved_sq);
    if (writes_sq > 0.0) s.cosine = dot / std::sqrt(writes_sq * moved_sq);
  }
  return s;
}

}  // namespace gradsleuth::debug
