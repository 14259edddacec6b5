// M28, the range watch of reduced precision: the counts against float16/bfloat16's range per module
// and sampled step, the rules on them, and its run check (docs/checks.md, M28).
#include "debug/checks/model/range_watch.h"

#include <algorithm>
#include <cmath>

#include "debug/checks/check_util.h"
#include "debug/checks/host_copy.h"
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

namespace {

// The thresholds (docs/checks.md, M28, derives them).
// More than this share of a module's nonzero parameter-gradient values flushed or in the three
// octaves above zero ([2^-24, 2^-21) in float16), or every value zero, over the sampled steps
// (RangeCounts::lost_share).
constexpr double kUnderflowShare = 0.10;
// More than this share of a 16-bit parameter's elements with a nonzero gradient unchanged by the
// update: most of the step rounds away.
constexpr double kVanishShare = 0.5;
constexpr int kExpLo = -40, kExpHi = 20;

struct Range {
  double zero, normal, max;
};
Range range_of(DType dt) {
  if (dt == kBFloat16) return {std::ldexp(1.0, -133), std::ldexp(1.0, -126), 3.3895313892515355e38};
  return {std::ldexp(1.0, -24), std::ldexp(1.0, -14), 65504.0};  // float16
}
std::string range_pct(double share) { return fmt_num(100.0 * share) + "%"; }

}  // namespace

void RangeCounts::add(float v, DType dt) {
  const Range r = range_of(dt);
  const double a = std::fabs(static_cast<double>(v));
  ++values;
  if (v != 0.0f) ++nonzero;
  if (!std::isfinite(a) || a > r.max) {
    ++overflow;
    return;
  }
  if (a < r.zero) {
    ++zero;
    return;
  }
  if (a < r.normal) ++subnormal;
  if (a < 8.0 * r.zero) ++edge;
  const int e = std::clamp(static_cast<int>(std::floor(std::log2(a))), kExpLo, kExpHi);
  ++exponents[static_cast<size_t>(e - kExpLo)];
}

double RangeCounts::lost_share() const {
  if (values == 0) return 0.0;
  if (nonzero == 0) return 1.0;
  const int64_t flushed = zero - (values - nonzero);  // nonzero values below the smallest subnormal
  return static_cast<double>(flushed + edge) / static_cast<double>(nonzero);
}

double RangeCounts::out_of_range_share() const {
  if (values == 0) return 0.0;
  if (nonzero == 0) return 1.0;
  const int64_t flushed = zero - (values - nonzero);
  return static_cast<double>(flushed + edge + overflow) / static_cast<double>(nonzero);
}

void RangeCounts::merge(const RangeCounts& o) {
  values += o.values, nonzero += o.nonzero, zero += o.zero, subnormal += o.subnormal, overflow += o.overflow;
  edge += o.edge;
  for (size_t i = 0; i < exponents.size(); ++i) exponents[i] += o.exponents[i];
}

size_t RangeWatch::module_of(const std::string& path) {
  for (size_t i = 0; i < stats_.size(); ++i)
    if (stats_[i].module == path) return i;
  return stats_.size();
}

void RangeWatch::attach(nn::Module& model) {
  detach();
  stats_.clear();
  seen16_.clear();
  for (auto& [path, m] : model.named_modules()) {
    if (!m->named_children().empty()) continue;  // leaf modules: the layers themselves
    const size_t idx = stats_.size();
    RangeModuleStats s;
    s.module = path.empty() ? "(model)" : path;
    s.label = module_label(path, *m);
    stats_.push_back(s);
    seen16_.push_back(false);
    for (auto& [name, p] : m->named_parameters(false)) {
      if (!p.requires_grad() || !p.is_floating_point()) continue;
      ParamRef r;
      r.p = p;
      r.module = idx;
      r.name = path.empty() ? name : path + "." + name;
      if (is_reduced_float(p.dtype())) {
        stats_[idx].dtype = p.dtype();
        seen16_[idx] = true;
      }
      params_.push_back(std::move(r));
    }
    hooks_.post(m, [this, idx](nn::Module&, const Tensor&, const Tensor& out) {
      if (!active_ || !out.defined() || !out.device().is_cpu() || !is_reduced_float(out.dtype())) return;
      detail::OwnTime own;
      stats_[idx].dtype = out.dtype();
      seen16_[idx] = true;
      const DType dt = out.dtype();
      for (float v : host_floats(out)) stats_[idx].activations.add(v, dt), step_all_[idx].add(v, dt);
      if (!out.requires_grad()) return;
      Tensor o = out;
      o.register_hook([this, idx, dt](const Tensor& g) {
        if (active_ && g.defined() && g.device().is_cpu())
          for (float v : host_floats(g)) stats_[idx].output_grads.add(v, dt), step_all_[idx].add(v, dt);
        return Tensor();
      });
    });
  }
  step_grads_.assign(stats_.size(), RangeCounts{});
  step_all_.assign(stats_.size(), RangeCounts{});
  for (size_t k = 0; k < params_.size(); ++k) {
    params_[k].hook = params_[k].p.register_hook([this, k](const Tensor& g) {
      const size_t idx = params_[k].module;
      if (!active_ || !seen16_[idx] || !g.defined() || !g.device().is_cpu()) return Tensor();
      detail::OwnTime own;
      const DType dt = stats_[idx].dtype;
      for (float v : host_floats(g)) step_grads_[idx].add(v, dt), step_all_[idx].add(v, dt);
      return Tensor();
    });
  }
}

void RangeWatch::attach(optim::Optimizer& optimizer) {
  opt_ = &optimizer;
  masters_ = optimizer.master_weights();
  opt_hooks_.push_back(optimizer.add_pre_step_hook([this](optim::Optimizer& o) {
    masters_ = o.master_weights();
    before_update();
  }));
  opt_hooks_.push_back(optimizer.add_post_step_hook([this](optim::Optimizer&) { after_update(); }));
}

void RangeWatch::detach() {
  hooks_.clear();
  for (ParamRef& r : params_) r.p.remove_hook(r.hook);
  params_.clear();
  if (opt_)
    for (size_t h : opt_hooks_) opt_->remove_hook(h);
  opt_ = nullptr;
  opt_hooks_.clear();
}

void RangeWatch::before_update() {
  // This step's parameter gradients, as the backward made them (scaled, when a loss scaler scaled).
  for (size_t i = 0; i < step_grads_.size(); ++i) {
    RangeCounts& c = step_grads_[i];
    if (c.values == 0) continue;
    const double share = c.lost_share();
    if (share > stats_[i].worst_grad_share || stats_[i].worst_grad_step < 0)
      stats_[i].worst_grad_share = share, stats_[i].worst_grad_step = step_;
    stats_[i].param_grads.merge(c);
    c = RangeCounts{};
  }
  for (size_t i = 0; i < step_all_.size(); ++i) {
    if (step_all_[i].values > 0) stats_[i].step_share.emplace_back(step_, step_all_[i].out_of_range_share());
    step_all_[i] = RangeCounts{};
  }
  for (ParamRef& r : params_) r.before.clear();
  if (!active_ || masters_) return;
  for (ParamRef& r : params_) {
    r.before.clear();
    r.moved.clear();
    const Tensor g = r.p.grad();
    if (!is_reduced_float(r.p.dtype()) || !g.defined() || !r.p.device().is_cpu()) continue;
    r.before = host_floats(r.p);
    for (float v : host_floats(g)) r.moved.push_back(v != 0.0f && std::isfinite(v));
  }
}

void RangeWatch::after_update() {
  for (ParamRef& r : params_) {
    if (r.before.empty()) continue;
    const std::vector<float> now = host_floats(r.p);
    int64_t elems = 0, same = 0;
    for (size_t i = 0; i < now.size() && i < r.moved.size(); ++i) {
      if (!r.moved[i]) continue;
      ++elems;
      if (now[i] == r.before[i]) ++same;
    }
    r.elems += elems;
    r.vanished += same;
    RangeModuleStats& s = stats_[r.module];
    s.update_elems += elems;
    s.vanished += same;
    if (elems > 0 && static_cast<double>(same) > kVanishShare * static_cast<double>(elems)) s.worst_update_step = step_;
    r.before.clear();
  }
}

std::vector<Finding> RangeWatch::findings() const {
  std::vector<Finding> out;
  size_t lead = stats_.size();
  double lead_share = -1.0;
  auto histogram = [](Finding& f, const RangeCounts& c, const char* what) {
    for (size_t i = 0; i < c.exponents.size(); ++i)
      if (c.exponents[i] > 0) {
        const int e = static_cast<int>(i) + kExpLo;
        f.evidence.push_back({std::string(what) + " in [2^" + std::to_string(e) + ", 2^" + std::to_string(e + 1) + ")",
                              static_cast<double>(c.exponents[i]), ""});
      }
  };
  for (size_t i = 0; i < stats_.size(); ++i) {
    if (!seen16_[i]) continue;
    const RangeModuleStats& s = stats_[i];
    const Range r = range_of(s.dtype);
    const std::string dt = dtype_name(s.dtype);
    const RangeCounts& g = s.param_grads;
    const double zero_share = g.lost_share();
    if (g.values > 0 && zero_share > lead_share) lead = i, lead_share = zero_share;
    auto base = [&](Finding& f) {
      f.module = s.label;
      f.evidence = {
          {"dtype " + dt + " (1 = float16, 2 = bfloat16)", s.dtype == kFloat16 ? 1.0 : 2.0, ""},
          {"share of nonzero parameter-gradient values flushed or in " + dt +
               "'s lowest 3 octaves (1 when all are zero)",
           zero_share, "> 0.1 warns"},
          {"share of parameter-gradient values zero in " + dt,
           g.values ? static_cast<double>(g.zero) / static_cast<double>(g.values) : 0.0, ""},
          {"share of parameter-gradient values subnormal in " + dt,
           g.values ? static_cast<double>(g.subnormal) / static_cast<double>(g.values) : 0.0, ""},
          {"share of parameter-gradient values above " + dt + "'s range (inf)",
           g.values ? static_cast<double>(g.overflow) / static_cast<double>(g.values) : 0.0, ""},
          {"share of nonzero output-gradient values flushed or in " + dt + "'s lowest 3 octaves (1 when all are zero)",
           s.output_grads.lost_share(), ""},
          {"share of activation values subnormal in " + dt,
           s.activations.values
               ? static_cast<double>(s.activations.subnormal) / static_cast<double>(s.activations.values)
               : 0.0,
           ""},
          {"share of activation values above " + dt + "'s range (inf)",
           s.activations.values
               ? static_cast<double>(s.activations.overflow) / static_cast<double>(s.activations.values)
               : 0.0,
           ""},
          {"smallest normal " + dt + " value", r.normal, ""}};
    };
    if (g.values > 0 && zero_share > kUnderflowShare) {
      Finding f = detail::make("M28", Severity::Warning,
                               (g.nonzero == 0 ? "every parameter-gradient value of " + s.label + " is zero in " + dt
                                               : range_pct(zero_share) + " of " + s.label +
                                                     "'s nonzero parameter-gradient values are at the bottom of " + dt +
                                                     "'s range (below 2^" + std::to_string(std::ilogb(r.zero) + 3) +
                                                     ", where it flushes to zero)") +
                                   ": the gradient underflows");
      f.kind = Kind::GradientUnderflow;
      base(f);
      f.step = s.worst_grad_step;
      f.evidence.push_back({"the worst sampled step's share", s.worst_grad_share, ""});
      histogram(f, g, "parameter-gradient values");
      f.cause = s.dtype == kFloat16
                    ? "float16 gradients without loss scaling: gradients below 2^-24 flush to zero (and below 2^-14 "
                      "lose precision), which the float32 values would have kept"
                    : "gradients below bfloat16's (float32's) smallest value";
      f.fix = s.dtype == kFloat16 ? "scale the loss: optim::GradScaler (scaler.scale(loss).backward(); "
                                    "scaler.step(opt); scaler.update()), or autocast to bfloat16"
                                  : "look for gradients that are genuinely near zero (M5, M27)";
      out.push_back(std::move(f));
    }
    // The parameter whose updates vanish most, among this module's 16-bit ones.
    const ParamRef* worst = nullptr;
    double worst_share = 0.0;
    for (const ParamRef& p : params_)
      if (p.module == i && p.elems > 0) {
        const double sh = static_cast<double>(p.vanished) / static_cast<double>(p.elems);
        if (!worst || sh > worst_share) worst = &p, worst_share = sh;
      }
    if (worst && worst_share > kVanishShare) {
      const std::string pdt = dtype_name(worst->p.dtype());
      Finding f = detail::make("M28", Severity::Warning,
                               range_pct(worst_share) + " of " + worst->name + "'s updates round away in " + pdt +
                                   " (the step is below half a unit in the last place of the weight)");
      f.kind = Kind::UpdatesVanish;
      base(f);
      f.parameter = worst->name;
      f.step = s.worst_update_step;
      f.evidence.push_back(
          {"share of " + worst->name + "'s elements with a nonzero gradient left unchanged by the update", worst_share,
           "> 0.5 warns"});
      f.evidence.push_back(
          {"elements with a nonzero gradient, over the sampled updates", static_cast<double>(worst->elems), ""});
      f.cause =
          "16-bit weights updated in their own dtype without float32 master weights: an update smaller than "
          "half the weight's spacing in " +
          pdt + " (2^-8 of |w| in bfloat16, 2^-11 in float16) is lost";
      f.fix =
          "keep the parameters in float32 and train under gs::autocast (float32 master weights), or raise the "
          "learning rate only if the steps are genuinely too small (O6)";
      out.push_back(std::move(f));
    }
  }
  if (out.empty() && lead < stats_.size()) {
    const RangeModuleStats& s = stats_[lead];
    Finding f = detail::make("M28", Severity::Info,
                             "the 16-bit layers stay in range: at most " + range_pct(lead_share) +
                                 " of a layer's nonzero parameter-gradient values are at the bottom of " +
                                 dtype_name(s.dtype) + "'s range (" + s.label + ")");
    f.kind = Kind::RangeSummary;
    f.module = s.label;
    f.evidence = {
        {"share of nonzero parameter-gradient values flushed or in the lowest 3 octaves", lead_share, "> 0.1 warns"}};
    histogram(f, s.param_grads, "parameter-gradient values");
    out.push_back(std::move(f));
  }
  return out;
}

void RangeWatch::series(std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>>& share,
                        std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>>& exponents,
                        std::string& dtype, int64_t& zeros) const {
  RangeCounts act, out_g, par_g;
  for (size_t i = 0; i < stats_.size(); ++i) {
    if (!seen16_[i]) continue;
    if (!stats_[i].step_share.empty()) share.emplace_back(stats_[i].label, stats_[i].step_share);
    act.merge(stats_[i].activations), out_g.merge(stats_[i].output_grads), par_g.merge(stats_[i].param_grads);
    dtype = dtype_name(stats_[i].dtype);
  }
  auto hist = [&](const char* name, const RangeCounts& c) {
    if (c.values == 0) return;
    std::vector<std::pair<int64_t, double>> h;
    for (size_t k = 0; k < c.exponents.size(); ++k)
      h.emplace_back(static_cast<int64_t>(k) + kExpLo, static_cast<double>(c.exponents[k]));
    exponents.emplace_back(name, std::move(h));
    zeros += c.zero;
  };
  hist("activation gradients", out_g);
  hist("parameter gradients", par_g);
  hist("activations", act);
}

// ---- the run check ---------------------------------------------------------------------------

namespace {

class RangeWatchRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "M28"; }
  uint32_t events() const override {
    return RunEvent::Attach | RunEvent::BeforeStep | RunEvent::AfterStep | RunEvent::Pause | RunEvent::Finish |
           RunEvent::Detach | RunEvent::Series;
  }
  void series(TrainingHistory& h) const override {
    h.range_share.clear(), h.range_exponents.clear(), h.range_zeros = 0;
    w_.series(h.range_share, h.range_exponents, h.range_dtype, h.range_zeros);
  }
  void attach(RunContext& c) override {
    w_.attach(c.model);
    w_.set_step(1);
    w_.set_active(true);
  }
  void before_step(RunContext& c, bool) override {
    w_.set_master_weights(c.optimizer.master_weights());
    w_.before_update();
  }
  void after_step(RunContext& c, bool) override {
    w_.after_update();
    w_.set_step(c.steps + 1);
    w_.set_active(c.sampled());
  }
  void pause(RunContext& c, bool on) override { w_.set_active(!on && c.sampled()); }
  void finish(RunContext& c) override {
    std::vector<Finding> fs = w_.findings();
    if (fs.empty()) return;  // nothing ran in 16 bits
    c.note_ran("M28");
    c.add_all(fs);
  }
  void detach(RunContext&) override { w_.detach(); }

 private:
  RangeWatch w_;
};

}  // namespace

std::unique_ptr<RunCheck> make_range_watch_run_check(const MonitorOptions&) {
  return std::make_unique<RangeWatchRunCheck>();
}

}  // namespace gradsleuth::debug
