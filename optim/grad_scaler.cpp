// GradScaler: the scale and its update rule, unscale_ with the inf/NaN check per parameter, the
// per-optimizer stages that refuse misuse, the scaler's state, and the clip-before-unscale trace.
#include "optim/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <unordered_set>

#include "core/autograd.h"
#include "core/warning.h"

namespace gradsleuth::optim {

namespace {

// The live scalers, for note_gradient_transform (clip_grad_norm_ knows no scaler). Each is
// told only of the clipping done on the thread it scales on: a scaler another thread trains
// with is that thread's to read and change.
std::mutex g_registry_mutex;
std::vector<GradScaler*>& registry() {
  static std::vector<GradScaler*> r;
  return r;
}

// PyTorch keeps the scale in a float32 tensor: every value it takes is a float32 value.
double as_float32(double v) { return static_cast<double>(static_cast<float>(v)); }

// Multiplies g by inv in place and counts its NaN and Inf elements.
template <class T>
void unscale_loop(T* g, int64_t n, T inv, int64_t& nan, int64_t& inf) {
  for (int64_t j = 0; j < n; ++j) {
    const T v = g[j] * inv;
    g[j] = v;
    if (!std::isfinite(v)) [[unlikely]]
      (std::isnan(v) ? nan : inf) += 1;
  }
}

void unscale_grad(Tensor& g, double inv, int64_t& nan, int64_t& inf) {
  if (g.device().is_cpu() && g.is_contiguous() && (g.dtype() == kFloat32 || g.dtype() == kFloat64)) {
    if (g.dtype() == kFloat32)
      unscale_loop(g.data_ptr<float>(), g.numel(), static_cast<float>(inv), nan, inf);
    else
      unscale_loop(g.data_ptr<double>(), g.numel(), inv, nan, inf);
    g.storage()->bump_version("GradScaler.unscale_");
    return;
  }
  // Any other dtype, layout or device: the same with tensor ops.
  g.mul_(inv);
  nan = g.isnan().sum().item<int64_t>();
  inf = g.isinf().sum().item<int64_t>();
}

std::string num(double v) { return detail::str_cat(v); }

}  // namespace

GradScaler::GradScaler(GradScalerOptions o)
    : enabled_(o.enabled()),
      init_scale_(o.init_scale()),
      growth_factor_(o.growth_factor()),
      backoff_factor_(o.backoff_factor()),
      growth_interval_(o.growth_interval()) {
  const char* op = "GradScaler";
  if (enabled_) {
    GS_CHECK(std::isfinite(init_scale_) && init_scale_ > 0.0 && std::isfinite(static_cast<float>(init_scale_)), op,
             "init_scale must be > 0 and finite in float32, got ", init_scale_, " (the default is 65536 = 2^16)");
    set_growth_factor(growth_factor_);
    set_backoff_factor(backoff_factor_);
    set_growth_interval(growth_interval_);
  }
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  registry().push_back(this);
}

GradScaler::~GradScaler() {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  auto& r = registry();
  r.erase(std::remove(r.begin(), r.end(), this), r.end());
}

void GradScaler::set_growth_factor(double f) {
  GS_CHECK(std::isfinite(f) && f > 1.0, "GradScaler", "growth_factor must be > 1 and finite, got ", f,
           " (the scale is multiplied by it after growth_interval clean steps; the default is 2)");
  growth_factor_ = f;
}

void GradScaler::set_backoff_factor(double f) {
  GS_CHECK(f > 0.0 && f < 1.0, "GradScaler", "backoff_factor must be in (0, 1), got ", f,
           " (the scale is multiplied by it after an inf/NaN gradient; the default is 0.5)");
  backoff_factor_ = f;
}

void GradScaler::set_growth_interval(int64_t n) {
  GS_CHECK(n >= 1, "GradScaler", "growth_interval must be >= 1, got ", n,
           " (the number of clean steps in a row before the scale grows; the default is 2000)");
  growth_interval_ = n;
}

double GradScaler::get_scale() const {
  if (!enabled_) return 1.0;
  return initialised_ ? scale_ : as_float32(init_scale_);
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!enabled_) return loss;
  GS_CHECK(loss.defined() && loss.is_floating_point(), "GradScaler.scale", "expects a floating-point loss, got ",
           loss.defined() ? loss.str() : "an undefined tensor");
  if (!initialised_) {
    scale_ = as_float32(init_scale_);
    growth_tracker_ = init_growth_tracker_;
    initialised_ = true;
  }
  scaled_since_update_ = true;
  scaling_thread_.store(std::this_thread::get_id());
  return loss.mul(scale_);
}

GradScaler::PerOptimizer& GradScaler::state_of(const Optimizer& opt) {
  for (PerOptimizer& s : per_opt_)
    if (s.opt == &opt) return s;
  per_opt_.push_back({&opt});
  return per_opt_.back();
}

const GradScaler::PerOptimizer* GradScaler::find_state(const Optimizer& opt) const {
  for (const PerOptimizer& s : per_opt_)
    if (s.opt == &opt) return &s;
  return nullptr;
}

bool GradScaler::grads_scaled(const Optimizer& opt) const {
  if (!enabled_ || !scaled_since_update_) return false;
  const PerOptimizer* s = find_state(opt);
  return s == nullptr || s->stage == Stage::Ready;
}

void GradScaler::check_scale_initialised(const char* op) const {
  GS_CHECK(initialised_, op,
           "no scale yet: scaler.scale(loss) was never called, so the gradients are not scaled. Use "
           "scaler.scale(loss).backward() instead of loss.backward() earlier in the iteration.");
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!enabled_) return;
  const char* op = "GradScaler.unscale_";
  check_scale_initialised(op);
  PerOptimizer& st = state_of(opt);
  GS_CHECK(st.stage != Stage::Unscaled, op, "unscale_() was already called on ", opt.name(),
           " since the last update(): a second call would divide its gradients by the scale (", scale_,
           ") again. Call unscale_ once per optimizer per iteration, then step() and update().");
  GS_CHECK(st.stage != Stage::Stepped, op, "unscale_() is called after step() on ", opt.name(),
           " since the last update(); call unscale_ before step(), or call update() to end the iteration first.");
  check_pending_clips(opt);
  // The reciprocal in float64, rounded to float32 (as PyTorch): exact for a power-of-two scale.
  const double inv = static_cast<double>(static_cast<float>(1.0 / scale_));
  NoGradGuard ng;
  bool found = false;
  for (size_t gi = 0; gi < opt.param_groups().size(); ++gi) {
    const ParamGroup& group = opt.param_groups()[gi];
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      Tensor g = p.grad();
      if (!g.defined()) continue;
      int64_t nan = 0, inf = 0;
      unscale_grad(g, inv, nan, inf);
      if (nan + inf == 0) continue;
      found = true;
      nonfinite_.push_back({opt.name(), gi, i, p, nan, inf});
    }
  }
  st.found_inf = found;
  st.stage = Stage::Unscaled;
}

bool GradScaler::step(Optimizer& opt) {
  if (!enabled_) {
    opt.step();
    return true;
  }
  const char* op = "GradScaler.step";
  check_scale_initialised(op);
  {
    const PerOptimizer& st = state_of(opt);
    GS_CHECK(st.stage != Stage::Stepped, op, "step() was already called on ", opt.name(),
             " since the last update(); call scaler.update() once per iteration, after the step(s).");
    if (st.stage == Stage::Ready) unscale_(opt);
  }
  PerOptimizer& st = state_of(opt);  // unscale_ may have grown per_opt_
  st.stage = Stage::Stepped;
  if (st.found_inf) {
    st.skipped = true;
    return false;
  }
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!enabled_) return;
  const char* op = "GradScaler.update";
  check_scale_initialised(op);
  bool recorded = false;
  for (const PerOptimizer& s : per_opt_) recorded |= s.stage != Stage::Ready;
  GS_CHECK(recorded, op,
           "no inf/NaN check was recorded since the last update(): call scaler.step(opt) (or "
           "scaler.unscale_(opt)) before scaler.update(), once per iteration.");
  bool found_inf = false;
  for (const PerOptimizer& s : per_opt_) found_inf |= s.found_inf;
  const double before = scale_;
  if (found_inf) {
    scale_ = as_float32(scale_ * backoff_factor_);
    growth_tracker_ = 0;
  } else if (growth_tracker_ + 1 == growth_interval_) {
    const double grown = scale_ * growth_factor_;
    if (std::isfinite(static_cast<float>(grown))) scale_ = as_float32(grown);
    growth_tracker_ = 0;
  } else {
    growth_tracker_ += 1;
  }
  finish_update(before, found_inf, false);
}

void GradScaler::update(double new_scale) {
  if (!enabled_) return;
  const char* op = "GradScaler.update";
  check_scale_initialised(op);
  GS_CHECK(std::isfinite(new_scale) && new_scale > 0.0 && std::isfinite(static_cast<float>(new_scale)), op,
           "new_scale must be > 0 and finite in float32, got ", new_scale);
  const double before = scale_;
  bool found_inf = false;
  for (const PerOptimizer& s : per_opt_) found_inf |= s.found_inf;
  scale_ = as_float32(new_scale);
  finish_update(before, found_inf, true);
}

void GradScaler::finish_update(double before, bool found_inf, bool explicit_scale) {
  ++updates_;
  ScalerUpdate u;
  u.index = updates_;
  u.scale_before = before;
  u.scale_after = scale_;
  u.growth_tracker = growth_tracker_;
  u.found_inf = found_inf;
  u.explicit_scale = explicit_scale;
  for (const PerOptimizer& s : per_opt_) {
    if (s.skipped) u.skipped.push_back(s.opt->name());
    if (s.stage == Stage::Stepped && !s.skipped) ++u.stepped;
  }
  u.nonfinite = std::move(nonfinite_);
  nonfinite_.clear();
  per_opt_.clear();
  pending_clips_.clear();
  scaled_since_update_ = false;
  const std::vector<Hook> hooks = hooks_;
  for (const Hook& h : hooks) h.fn(*this, u);
}

size_t GradScaler::add_update_hook(UpdateHook h) {
  hooks_.push_back({next_id_, std::move(h)});
  return next_id_++;
}

void GradScaler::remove_hook(size_t id) {
  hooks_.erase(std::remove_if(hooks_.begin(), hooks_.end(), [&](const Hook& h) { return h.id == id; }), hooks_.end());
}

// ---- clipping scaled gradients (O10) --------------------------------------------------

void note_gradient_transform(const std::vector<Tensor>& params, const char* op) {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  const std::thread::id me = std::this_thread::get_id();
  for (GradScaler* s : registry())
    if (s->scaling_thread_.load() == me) s->note_transform(params, op);
}

void GradScaler::note_transform(const std::vector<Tensor>& params, const char* op) {
  if (!enabled_ || !scaled_since_update_) return;
  // Parameters of an optimizer already unscaled this iteration hold true gradients.
  std::unordered_set<const TensorImpl*> unscaled;
  for (const PerOptimizer& s : per_opt_) {
    if (s.stage == Stage::Ready) continue;
    for (const ParamGroup& g : s.opt->param_groups())
      for (const Tensor& p : g.params) unscaled.insert(p.impl_ptr().get());
  }
  PendingClip c{op, {}};
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined() && !unscaled.count(p.impl_ptr().get())) c.params.insert(p.impl_ptr().get());
  if (!c.params.empty()) pending_clips_.push_back(std::move(c));
}

void GradScaler::check_pending_clips(const Optimizer& opt) {
  if (pending_clips_.empty()) return;
  for (const PendingClip& c : pending_clips_) {
    bool hit = false;
    for (const ParamGroup& g : opt.param_groups())
      for (const Tensor& p : g.params) hit = hit || c.params.count(p.impl_ptr().get()) > 0;
    if (!hit || std::find(clip_warned_.begin(), clip_warned_.end(), c.op) != clip_warned_.end()) continue;
    clip_warned_.push_back(c.op);
    warn({"O10", c.op,
          "ran on gradients still multiplied by the GradScaler's scale (" + num(scale_) + "): scaler.unscale_(" +
              opt.name() + ") came after it, so the clipping threshold was compared with a norm " + num(scale_) +
              " times too large and cut the gradients far more than meant. Call scaler.unscale_(optimizer) "
              "after backward() and before clipping."});
  }
}

// ---- state ------------------------------------------------------------------------------

std::map<std::string, Tensor> GradScaler::state_dict() const {
  if (!enabled_) return {};
  auto f64 = [](double v) { return scalar_tensor(v, TensorOptions(kFloat64)); };
  auto i64 = [](int64_t v) { return scalar_tensor(v, TensorOptions(kInt64)); };
  return {{"scale", f64(get_scale())},
          {"growth_factor", f64(growth_factor_)},
          {"backoff_factor", f64(backoff_factor_)},
          {"growth_interval", i64(growth_interval_)},
          {"growth_tracker", i64(get_growth_tracker())}};
}

void GradScaler::load_state_dict(const std::map<std::string, Tensor>& state) {
  if (!enabled_) return;
  const char* op = "GradScaler.load_state_dict";
  GS_CHECK(!state.empty(), op,
           "the state is empty: it was saved from a disabled GradScaler (enabled=false), which keeps no state");
  const char* keys[] = {"scale", "growth_factor", "backoff_factor", "growth_interval", "growth_tracker"};
  for (const auto& [k, t] : state)
    GS_CHECK(std::find_if(std::begin(keys), std::end(keys), [&](const char* s) { return k == s; }) != std::end(keys),
             op, "unknown entry '", k, "'; a GradScaler's state has 'scale', 'growth_factor', 'backoff_factor', ",
             "'growth_interval' and 'growth_tracker'");
  auto get = [&](const char* k) {
    auto it = state.find(k);
    GS_CHECK(it != state.end(), op, "the entry '", k, "' is missing; a GradScaler's state has 'scale', ",
             "'growth_factor', 'backoff_factor', 'growth_interval' and 'growth_tracker'");
    GS_CHECK(it->second.defined() && it->second.numel() == 1, op, "'", k, "' must hold one number, got ",
             it->second.defined() ? it->second.str() : "undefined");
    return it->second.item<double>();
  };
  const double scale = get("scale"), growth = get("growth_factor"), backoff = get("backoff_factor");
  const double interval = get("growth_interval"), tracker = get("growth_tracker");
  GS_CHECK(std::isfinite(scale) && scale > 0.0, op, "'scale' must be > 0 and finite, got ", scale);
  GS_CHECK(interval >= 1 && interval == std::floor(interval) && interval < 9.0e18, op,
           "'growth_interval' must be a whole number >= 1, got ", interval);
  GS_CHECK(tracker >= 0 && tracker == std::floor(tracker) && tracker < interval, op,
           "'growth_tracker' must be a whole number in [0, growth_interval = ", interval, "), got ", tracker);
  // Checked before anything changes: a bad entry leaves the scaler as it was.
  const double old_growth = growth_factor_, old_backoff = backoff_factor_;
  try {
    set_growth_factor(growth);
    set_backoff_factor(backoff);
  } catch (...) {
    growth_factor_ = old_growth;
    backoff_factor_ = old_backoff;
    throw;
  }
  growth_interval_ = static_cast<int64_t>(interval);
  // As PyTorch: the loaded values become the initial ones, and the current ones when a scale exists.
  init_scale_ = scale;
  init_growth_tracker_ = static_cast<int64_t>(tracker);
  if (initialised_) {
    scale_ = as_float32(scale);
    growth_tracker_ = init_growth_tracker_;
  }
}

std::map<std::string, Tensor> training_state_dict(const Optimizer& opt, const GradScaler& scaler) {
  std::map<std::string, Tensor> out = opt.state_dict();
  for (auto& [k, t] : scaler.state_dict()) out[kScalerStatePrefix + k] = t;
  return out;
}

bool load_training_state_dict(const std::map<std::string, Tensor>& state, Optimizer& opt, GradScaler& scaler) {
  const std::string prefix = kScalerStatePrefix;
  std::map<std::string, Tensor> opt_state, scaler_state;
  for (const auto& [k, t] : state) {
    if (k.compare(0, prefix.size(), prefix) == 0)
      scaler_state[k.substr(prefix.size())] = t;
    else
      opt_state[k] = t;
  }
  // Either both load or neither changes: the scaler goes back to its state when the optimizer's fails.
  const std::map<std::string, Tensor> scaler_before = scaler.state_dict();
  if (!scaler_state.empty()) scaler.load_state_dict(scaler_state);
  try {
    opt.load_state_dict(opt_state);
  } catch (...) {
    if (!scaler_state.empty() && !scaler_before.empty()) scaler.load_state_dict(scaler_before);
    throw;
  }
  return !scaler_state.empty() && scaler.is_enabled();
}

}  // namespace gradsleuth::optim
