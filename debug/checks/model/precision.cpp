// M29 (the first op out of the 16-bit range) and M30 (the per-op comparison against float32): their
// rules, thresholds, findings and run check (see precision.h; docs/checks.md, M29 and M30).
#include "debug/checks/model/precision.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/autocast.h"
#include "core/autograd.h"
#include "debug/checks/check_util.h"
#include "debug/checks/host_copy.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"
#include "optim/grad_scaler.h"

namespace gradsleuth::debug {

namespace {

// "float16[32, 8], |x| in [6.1e-05, 7.2e+04], 3 inf/NaN": a tensor's range, for causes.
std::string range_str(const Tensor& t) {
  if (!t.defined()) return "none";
  std::ostringstream s;
  s << dtype_name(t.dtype()) << shape_of(t);
  if (!t.is_floating_point()) return s.str();
  double lo = std::numeric_limits<double>::infinity(), hi = 0.0;
  int64_t bad = 0, zero = 0;
  for (float v : host_floats(t)) {
    if (!std::isfinite(v)) {
      ++bad;
      continue;
    }
    const double a = std::fabs(static_cast<double>(v));
    if (a == 0.0) {
      ++zero;
      continue;
    }
    lo = std::min(lo, a), hi = std::max(hi, a);
  }
  if (hi > 0.0)
    s << ", nonzero |x| in [" << fmt_num(lo) << ", " << fmt_num(hi) << "]";
  else
    s << ", every finite value 0";
  if (zero > 0 && hi > 0.0) s << ", " << zero << " zeros";
  if (bad > 0) s << ", " << bad << " inf/NaN";
  return s.str();
}

// The share of a tensor's L1 mass (sum of |x| over its finite values) carried by values at the
// bottom of dt's range: below 8 x its smallest subnormal (flushed, or in the lowest three octaves
// above zero); 0 when every value is 0.
double bottom_mass(const std::vector<float>& v, DType dt) {
  const double edge = 8.0 * (dt == kBFloat16 ? std::ldexp(1.0, -133) : std::ldexp(1.0, -24));
  double low = 0.0, all = 0.0;
  for (float x : v) {
    if (!std::isfinite(x)) continue;
    const double a = std::fabs(static_cast<double>(x));
    all += a;
    if (a < edge) low += a;
  }
  return all > 0.0 ? low / all : 0.0;
}

bool is_cast(const char* op) { return std::string_view(op) == "to_dtype"; }

}  // namespace

// ---- OpSites -------------------------------------------------------------------------------------
void OpSites::clear() {
  sites_.clear();
  pending_.clear();
  nodes_.clear();
  count_ = 0;
}

void OpSites::resolve() {
  for (size_t i = 0; i < pending_.size();) {
    const Tensor& out = pending_[i].first;
    if (out.grad_fn()) {
      nodes_.emplace(out.grad_fn().get(), pending_[i].second);
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  // An op whose output never gets a node (no gradient needed) leaves the list after a few ops.
  if (pending_.size() > 4) pending_.erase(pending_.begin(), pending_.end() - 4);
}

const OpSite& OpSites::record(const char* op, const Tensor& out, const std::string& module) {
  resolve();
  sites_.push_back({++count_, op, module});
  const size_t idx = sites_.size() - 1;
  if (out.grad_fn())
    nodes_.emplace(out.grad_fn().get(), idx);
  else if (out.requires_grad() || GradMode::is_enabled())
    pending_.emplace_back(out, idx);
  return sites_[idx];
}

const OpSite* OpSites::of(const Node* node) {
  resolve();
  const auto it = nodes_.find(node);
  return it == nodes_.end() ? nullptr : &sites_[it->second];
}

// ---- M29 -----------------------------------------------------------------------------------------
namespace {

// The bottom of a dtype's range in words (float16: the lowest three octaves above 2^-24).
std::string bottom_of(DType dt) {
  return std::string("below 2^") + (dt == kBFloat16 ? "-130" : "-21") + " (the lowest 3 octaves above " +
         (dt == kBFloat16 ? "2^-133" : "2^-24") + ", where " + dtype_name(dt) + " flushes to zero)";
}

// One tensor as M29 judges it against a 16-bit dtype.
struct Judged {
  int64_t values = 0, nonfinite = 0;
  double bottom = 0.0;  // bottom_mass
};
Judged judge(const Tensor& t, DType dt) {
  Judged j;
  const std::vector<float> v = host_floats(t);
  j.values = static_cast<int64_t>(v.size());
  for (float x : v)
    if (!std::isfinite(x)) ++j.nonfinite;
  j.bottom = bottom_mass(v, dt);
  return j;
}

// Whether a result left the range: at the top (inf/NaN from finite inputs), or at the bottom (more
// than `share` of the mass of what it was made from at the bottom of the dtype's range, from inputs
// in range). `wider` is an input of a wider dtype and the result's shape (a cast to 16 bits): its
// values are the exact ones, flushed values included; otherwise the result's own values are read.
struct Verdict {
  bool overflow = false, underflow = false;
  Judged result;
  double bottom = 0.0;  // the judged bottom mass
};
Verdict decide(const Tensor& out, const std::vector<const Tensor*>& inputs, double share) {
  Verdict v;
  const DType dt = out.dtype();
  v.result = judge(out, dt);
  bool finite = true, in_range = true;
  const Tensor* wider = nullptr;
  for (const Tensor* x : inputs) {
    if (!x->defined() || !x->is_floating_point()) continue;
    if (is_reduced_float(x->dtype())) {
      const Judged j = judge(*x, x->dtype());
      finite = finite && j.nonfinite == 0;
      in_range = in_range && j.nonfinite == 0 && j.bottom <= share;
    } else {
      const Judged j = judge(*x, kFloat32);
      finite = finite && j.nonfinite == 0;
      if (x->shape() == out.shape()) wider = x;
    }
  }
  v.overflow = v.result.nonfinite > 0 && finite;
  v.bottom = wider ? bottom_mass(host_floats(*wider), dt) : v.result.bottom;
  v.underflow = !v.overflow && finite && in_range && v.bottom > share;
  return v;
}

void range_evidence(Finding& f, const Verdict& v, DType dt, const OpSite* site) {
  f.evidence.push_back(
      {"dtype " + std::string(dtype_name(dt)) + " (1 = float16, 2 = bfloat16)", dt == kFloat16 ? 1.0 : 2.0, ""});
  if (site) f.evidence.push_back({"position of the op among the forward's ops", static_cast<double>(site->index), ""});
  f.evidence.push_back({"values", static_cast<double>(v.result.values), ""});
  f.evidence.push_back({"values inf/NaN", static_cast<double>(v.result.nonfinite), "any, from finite inputs, warns"});
  f.evidence.push_back(
      {"share of the mass (sum of |x|) at the bottom of the range", v.bottom, "> 0.1, from inputs in range, warns"});
}

}  // namespace

void RangeTrace::clear() {
  forward_.reset();
  backward_.reset();
  held_forward_.reset();
  held_.reset();
  sites_.clear();
}

void RangeTrace::confirm_step(bool forward, bool backward) {
  if (forward && held_forward_ && !forward_) forward_ = std::move(held_forward_);
  if (backward && held_ && !backward_) backward_ = std::move(held_);
  held_forward_.reset();
  held_.reset();
}

void RangeTrace::discard_step() {
  held_forward_.reset();
  held_.reset();
}

void RangeTrace::begin_forward() { sites_.clear(); }

void RangeTrace::on_op(const OpEvent& e) {
  if (!active_ || !e.output || !e.output->defined() || autograd::in_backward()) return;
  const Tensor& out = *e.output;
  const OpSite& site = sites_.record(e.op, out, tracker_.current());
  if (!o_.forward || forward_ || held_forward_ || !out.is_floating_point() || !is_reduced_float(out.dtype()) ||
      !out.device().is_cpu())
    return;
  detail::OwnTime own;
  const DType dt = out.dtype();
  std::vector<const Tensor*> inputs;
  // An in-place op's input 0 is its output, already modified: its other inputs are judged.
  for (size_t i = e.inplace ? 1 : 0; i < e.num_inputs; ++i) {
    const Tensor& x = e.input(i);
    if (!x.defined() || !x.is_floating_point()) continue;
    if (!x.device().is_cpu()) return;
    inputs.push_back(&x);
  }
  const Verdict v = decide(out, inputs, o_.underflow_share);
  if (!v.overflow && !v.underflow) return;
  std::string in_text;  // the inputs' ranges, for the cause: only for an op that left the range
  for (const Tensor* x : inputs) in_text += (in_text.empty() ? "" : "; ") + range_str(*x);
  const std::string where = site.module.empty() ? "" : " in " + site.module;
  const std::string pos = " (forward, op #" + detail::num(site.index) + ")";
  Finding f = detail::make(
      "M29", Severity::Warning,
      std::string("'") + e.op + "'" + where + " is the first op whose " + dtype_name(dt) + " result left the range " +
          (v.overflow
               ? "at the top: " + detail::num(v.result.nonfinite) + " of its " + detail::num(v.result.values) +
                     " values are inf/NaN although its inputs were finite"
               : "at the bottom: " + fmt_num(100.0 * v.bottom) + "% of the mass of its values is " + bottom_of(dt)) +
          pos);
  f.kind = v.overflow ? Kind::ForwardOverflow : Kind::ForwardUnderflow;
  f.nonfinite = v.overflow;
  f.op = e.op;
  f.module = site.module;
  f.shape = shape_of(out);
  f.step = step_;
  range_evidence(f, v, dt, &site);
  f.cause = (v.overflow ? std::string(dtype_name(dt)) + " holds nothing above " +
                              (dt == kFloat16 ? "65504" : "3.39e38") + ": the op's result is larger"
                        : std::string(dtype_name(dt)) + " keeps few or no bits of values this small") +
            ". Inputs: " + (in_text.empty() ? "none floating" : in_text) + "; output " + range_str(out);
  f.fix = v.overflow ? "run this op in float32 (gs::autocast(dtype, false) around it, or cast its inputs up), bring "
                       "its inputs into range (normalise the data, a smaller initialisation), or use bfloat16 "
                       "(float32's range)"
                     : "keep this op in float32, scale the values up before it, or use bfloat16 (float32's range)";
  if (v.overflow && o_.hold_overflow)
    held_forward_ = std::move(f);
  else
    forward_ = std::move(f);
}

void RangeTrace::on_backward(const BackwardEvent& e) {
  if (!active_ || !o_.backward || backward_ || !e.node) return;
  const Tensor* gi = e.grad_output;
  if (gi && gi->defined() && !gi->device().is_cpu()) return;
  for (size_t i = 0; i < e.num_grad_inputs; ++i) {
    const Tensor& g = e.grad_inputs[i];
    if (!g.defined() || !g.is_floating_point() || !is_reduced_float(g.dtype()) || !g.device().is_cpu()) continue;
    detail::OwnTime own;
    const DType dt = g.dtype();
    std::vector<const Tensor*> inputs;
    if (gi && gi->defined()) inputs.push_back(gi);
    const Verdict v = decide(g, inputs, o_.underflow_share);
    if (!v.overflow && !v.underflow) continue;
    const OpSite* site = sites_.of(e.node);
    const std::string op = e.node->name();
    const std::string module = site ? site->module : e.node->context;
    const std::string where = module.empty() ? "" : " in " + module;
    const std::string pos = site ? ", recorded as op #" + detail::num(site->index) + " of the forward" : "";
    Finding f =
        detail::make("M29", Severity::Warning,
                     "the backward of '" + op + "'" + where + " is the first to leave " + dtype_name(dt) + "'s range " +
                         (v.overflow ? "at the top: " + detail::num(v.result.nonfinite) + " of the " +
                                           detail::num(v.result.values) + " gradient values for its input " +
                                           std::to_string(i) + " are inf/NaN from a finite incoming gradient"
                                     : "at the bottom: " + fmt_num(100.0 * v.bottom) +
                                           "% of the mass of the gradient for its input " + std::to_string(i) + " is " +
                                           bottom_of(dt)) +
                         " (backward" + pos + ")");
    f.kind = v.overflow ? Kind::BackwardOverflow : Kind::BackwardUnderflow;
    f.nonfinite = v.overflow;
    f.op = op;
    f.module = module;
    f.shape = shape_of(g);
    f.step = step_;
    range_evidence(f, v, dt, site);
    f.cause = (v.overflow ? "the gradient grew beyond " + std::string(dtype_name(dt)) + "'s largest value"
                          : std::string("gradients this small flush to zero in ") + dtype_name(dt)) +
              ". Incoming gradient: " + (gi ? range_str(*gi) : std::string("none")) + "; produced " + range_str(g);
    f.fix = v.overflow ? "lower the loss scale (optim::GradScaler lowers it by itself when its step() sees inf), "
                         "clip gradients after scaler.unscale_(), or keep this op in float32"
                       : "scale the loss: optim::GradScaler (scaler.scale(loss).backward(); scaler.step(opt); "
                         "scaler.update()), or autocast to bfloat16";
    if (v.overflow && o_.hold_overflow) {
      if (!held_) held_ = std::move(f);
    } else {
      backward_ = std::move(f);
    }
    return;
  }
}

std::vector<Finding> RangeTrace::findings() const {
  std::vector<Finding> out;
  if (forward_) out.push_back(*forward_);
  if (backward_) out.push_back(*backward_);

  return out;
}

// ---- M30 -----------------------------------------------------------------------------------------
namespace {

// One run's record: every forward op's result and every gradient the backward's nodes produced,
// as float32 values (the dtype casts left out).
struct RunRecord {
  struct Entry {
    OpSite site;
    bool backward = false;
    size_t input = 0;
    DType dtype = kFloat32;
    Shape shape;
    std::vector<float> values;
    bool floating = false;
  };
  std::vector<Entry> entries;
};

class Recorder : public OpObserver {
 public:
  explicit Recorder(RunRecord& r) : r_(r) {}
  ModuleTracker tracker;
  void on_op(const OpEvent& e) override {
    if (!e.output || !e.output->defined() || autograd::in_backward()) return;
    const OpSite site = sites_.record(e.op, *e.output, tracker.current());
    if (is_cast(e.op)) return;
    add(site, false, 0, *e.output);
  }
  void on_backward(const BackwardEvent& e) override {
    if (!e.node || is_cast(e.node->name())) return;
    const OpSite* s = sites_.of(e.node);
    const OpSite site = s ? *s : OpSite{0, e.node->name(), e.node->context};
    for (size_t i = 0; i < e.num_grad_inputs; ++i)
      if (e.grad_inputs[i].defined()) add({site.index, e.node->name(), site.module}, true, i, e.grad_inputs[i]);
  }

 private:
  void add(const OpSite& site, bool backward, size_t input, const Tensor& t) {
    RunRecord::Entry en;
    en.site = site;
    en.backward = backward;
    en.input = input;
    en.dtype = t.dtype();
    en.shape = t.shape();
    en.floating = t.is_floating_point();
    if (en.floating) en.values = host_floats(t);
    r_.entries.push_back(std::move(en));
  }
  RunRecord& r_;
  OpSites sites_;
};

double rel_error(const std::vector<float>& low, const std::vector<float>& ref, double* low_max) {
  double num = 0.0, den = 0.0, lm = 0.0;
  bool low_bad = false;
  for (size_t i = 0; i < low.size() && i < ref.size(); ++i) {
    const double a = low[i], b = ref[i];
    if (!std::isfinite(a)) {
      low_bad = true;
      continue;
    }
    lm = std::max(lm, std::fabs(a));
    num += (a - b) * (a - b);
    den += b * b;
  }
  *low_max = lm;
  if (low_bad) return std::numeric_limits<double>::infinity();
  if (den == 0.0) return num == 0.0 ? 0.0 : 1.0;
  return std::sqrt(num / den);
}

bool all_finite_values(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

}  // namespace

const OpComparison* PrecisionComparison::worst() const {
  double m = -1.0;
  for (const OpComparison& c : ops) m = std::max(m, c.rel_error);
  if (m < 0.0) return nullptr;
  // The ops after it inherit an op's error: the first one within 10% of the largest is where it arose.
  for (const OpComparison& c : ops)
    if (c.rel_error >= 0.9 * m) return &c;
  return nullptr;
}

std::string PrecisionComparison::str(size_t rows) const {
  std::ostringstream s;
  s << "per-op comparison, " << (setting.autocast ? "autocast " : "parameters in ") << dtype_name(setting.dtype)
    << " against float32: " << ops.size() << " results compared" << (matched ? "" : " (" + note + ")") << "\n";
  std::vector<const OpComparison*> order;
  for (const OpComparison& c : ops) order.push_back(&c);
  std::stable_sort(order.begin(), order.end(),
                   [](const OpComparison* a, const OpComparison* b) { return a->rel_error > b->rel_error; });
  char line[320];
  std::snprintf(line, sizeof line, "  %-10s %-6s %-24s %-28s %-9s %-14s %s\n", "rel.error", "op#", "op", "module",
                "dtype", "shape", "max |x| f32");
  s << line;
  for (size_t i = 0; i < order.size() && i < rows; ++i) {
    const OpComparison& c = *order[i];
    const std::string op = c.backward ? c.site.op + " (grad " + std::to_string(c.input) + ")" : c.site.op;
    std::snprintf(line, sizeof line, "  %-10s %-6s %-24s %-28s %-9s %-14s %s\n", fmt_num(c.rel_error).c_str(),
                  c.site.index > 0 ? std::to_string(c.site.index).c_str() : "-", op.c_str(),
                  c.site.module.empty() ? "-" : c.site.module.c_str(), dtype_name(c.dtype), c.shape.c_str(),
                  fmt_num(c.max_abs).c_str());
    s << line;
  }
  return s.str();
}

PrecisionComparison compare_precision(nn::Module& model, const Tensor& x, const LossOf& loss,
                                      const PrecisionSetting& setting) {
  GS_CHECK(is_reduced_float(setting.dtype), "compare_precision (M30)", "compares a 16-bit setting with float32, got ",
           dtype_name(setting.dtype), "; pass kFloat16 or kBFloat16");
  GS_CHECK(x.defined() && x.is_floating_point(), "compare_precision (M30)", "needs a floating input batch, got ",
           x.defined() ? x.str() : std::string("an undefined tensor"));
  PrecisionComparison out;
  out.setting = setting;
  HostCopyGuard host(model, "compare_precision (M30)");
  QuietProbe probe(model);
  // Each run starts without gradients; the caller's are put back afterwards, also on an error.
  struct Grads {
    std::vector<std::pair<Tensor, Tensor>> saved;
    explicit Grads(nn::Module& m) {
      for (Tensor& p : m.parameters()) saved.emplace_back(p, p.grad());
    }
    void clear() {
      for (auto& [p, g] : saved) p.set_grad(Tensor());
    }
    ~Grads() {
      for (auto& [p, g] : saved) p.set_grad(g);
    }
  } grads(model);
  const Tensor xc = x.detach().to(kCPU);
  auto run = [&](bool low, RunRecord& rec) -> double {
    grads.clear();
    Recorder r(rec);
    r.tracker.attach(model);
    double lv = 0.0;
    ObserverGuard on(&r, ObserverScope::ThisThread);
    Tensor xin = xc;
    std::optional<AutocastGuard> ac;
    if (low && setting.autocast)
      ac.emplace(setting.dtype);
    else if (low)
      xin = xc.to(setting.dtype);
    else
      xin = xc.to(kFloat32);
    Tensor y = model(xin);
    Tensor l;
    if (loss) l = loss(y);
    ac.reset();
    if (l.defined()) {
      lv = l.to(kFloat32).item<double>();
      if (l.requires_grad()) l.backward();
    }
    r.tracker.detach();
    return lv;
  };
  RunRecord low, ref;
  {
    // The 16-bit run: autocast over the model as it is, or its parameters in the dtype.
    std::optional<DtypeGuard> cast;
    if (!setting.autocast) cast.emplace(model, setting.dtype);
    out.loss_low = run(true, low);
  }
  {
    DtypeGuard f32(model, kFloat32);  // 16-bit parameters widen exactly; float32 ones are untouched
    out.loss_f32 = run(false, ref);
  }
  const size_t n = std::min(low.entries.size(), ref.entries.size());
  // A float32 result below 2^-20 of the largest value of its pass (forward or backward) is float32's
  // own rounding noise (a sum that cancels to zero): its relative error means nothing.
  double largest[2] = {0.0, 0.0};
  for (size_t i = 0; i < n; ++i)
    for (float v : ref.entries[i].values)
      if (std::isfinite(v))
        largest[ref.entries[i].backward] = std::max(largest[ref.entries[i].backward], std::fabs(double(v)));
  for (size_t i = 0; i < n; ++i) {
    const RunRecord::Entry& a = low.entries[i];
    const RunRecord::Entry& b = ref.entries[i];
    if (a.site.op != b.site.op || a.backward != b.backward || a.shape != b.shape) {
      out.matched = false;
      out.note = "the runs diverge at " + std::string(a.backward ? "the backward of '" : "op '") + a.site.op +
                 "' against '" + b.site.op + "'; the results before it are compared";
      break;
    }
    if (!a.floating || !b.floating || !all_finite_values(b.values)) continue;
    OpComparison c;
    c.site = a.site;
    c.backward = a.backward;
    c.input = a.input;
    c.dtype = a.dtype;
    c.shape = shape_str(a.shape);
    c.rel_error = rel_error(a.values, b.values, &c.low_max_abs);
    for (float v : b.values) c.max_abs = std::max(c.max_abs, std::fabs(static_cast<double>(v)));
    if (c.max_abs < std::ldexp(largest[b.backward], -20)) continue;
    out.ops.push_back(std::move(c));
  }
  if (out.matched && low.entries.size() != ref.entries.size()) {
    out.matched = false;
    out.note = "the 16-bit run recorded " + std::to_string(low.entries.size()) + " results, float32 " +
               std::to_string(ref.entries.size());
  }
  return out;
}

std::vector<Finding> precision_findings(const PrecisionComparison& c, const PrecisionCompareOptions& o) {
  std::vector<Finding> out;
  const OpComparison* w = c.worst();
  if (!w) return out;
  const std::string dt = dtype_name(c.setting.dtype);
  const std::string setting = (c.setting.autocast ? "autocast " : "parameters in ") + dt;
  const std::string what = w->backward ? "the gradient the backward of '" + w->site.op + "' produced for its input " +
                                             std::to_string(w->input)
                                       : "'" + w->site.op + "'";
  const std::string where = (w->site.module.empty() ? "" : " in " + w->site.module) +
                            (w->site.index > 0 ? " (op #" + detail::num(w->site.index) + " of the forward)" : "");
  const bool fires = !std::isfinite(w->rel_error) || w->rel_error > o.warn_rel_error;
  Finding f = detail::make(
      "M30", fires ? Severity::Warning : Severity::Info,
      fires ? what + where + " differs most from float32 under " + setting + ": relative error " +
                  fmt_num(w->rel_error) + (std::isfinite(w->rel_error) ? "" : " (non-finite in 16 bits only)")
            : "under " + setting + " every op stays close to float32: the largest relative error is " +
                  fmt_num(w->rel_error) + ", " + what + where);
  f.op = w->site.op;
  f.module = w->site.module;
  f.shape = w->shape;
  f.nonfinite = !std::isfinite(w->rel_error);
  f.evidence = {{"relative error of the worst result (||low - f32|| / ||f32||)", w->rel_error,
                 "> " + fmt_num(o.warn_rel_error) + " warns"},
                {"largest |value| in float32", w->max_abs, ""},
                {"largest finite |value| in " + dt, w->low_max_abs, ""},
                {"results compared", static_cast<double>(c.ops.size()), ""},
                {"the op sequences matched (1) or diverged (0)", c.matched ? 1.0 : 0.0, ""}};
  if (w->site.index > 0)
    f.evidence.push_back({"position of the op among the forward's ops", static_cast<double>(w->site.index), ""});
  f.evidence.push_back({"loss float32", c.loss_f32, ""});
  f.evidence.push_back({"loss " + dt, c.loss_low, ""});
  // The next worst, for the reader.
  std::vector<const OpComparison*> order;
  for (const OpComparison& x : c.ops) order.push_back(&x);
  std::stable_sort(order.begin(), order.end(),
                   [](const OpComparison* a, const OpComparison* b) { return a->rel_error > b->rel_error; });
  for (size_t i = 1; i < order.size() && i < 5; ++i)
    f.evidence.push_back({"relative error of " + std::string(order[i]->backward ? "the gradient of '" : "'") +
                              order[i]->site.op + "'" +
                              (order[i]->site.module.empty() ? "" : " in " + order[i]->site.module),
                          order[i]->rel_error, ""});
  f.cause = fires ? "the 16-bit result keeps little of the float32 one: a difference of nearly equal values "
                    "(cancellation: 11 significant bits in float16, 8 in bfloat16), values flushed to zero below "
                    "the range, or values above it" +
                        (c.matched ? std::string() : ". " + c.note)
                  : "each op's 16-bit result is within its rounding of float32";
  f.fix = fires ? "run this op in float32 (gs::autocast(dtype, false) around it, or cast its inputs up); centre the "
                  "values before a subtraction of large numbers; scale the loss when gradients flush to zero"
                : "nothing to do";
  out.push_back(std::move(f));
  return out;
}

std::vector<Finding> check_precision_ops(nn::Module& model, const Tensor& x, const LossOf& loss,
                                         const PrecisionSetting& setting, const PrecisionCompareOptions& o) {
  return precision_findings(compare_precision(model, x, loss, setting), o);
}

// ---- the run check: M29 on the sampled steps, M30 on the sample batch after the run --------------
namespace {

class PrecisionRunCheck final : public RunCheck {
 public:
  PrecisionRunCheck() : trace_(RangeTraceOptions{0.10, true, true, true}) {}
  std::string ids() const override { return "M29, M30"; }
  uint32_t events() const override {
    return RunEvent::Attach | RunEvent::Forward | RunEvent::BeforeStep | RunEvent::NonFinite | RunEvent::AfterStep |
           RunEvent::Pause | RunEvent::Finish | RunEvent::Detach | RunEvent::AfterRun;
  }
  void attach(RunContext& c) override {
    trace_.attach(c.model);
    trace_.set_step(1);
    trace_.set_active(false);
    on_ = trace_.enable();
  }
  // The trace reads the ops of the sampled steps' forwards and backwards, in a run that uses 16 bits
  // (known at each training forward, before its ops run).
  void forward(RunContext& c, const Tensor&) override {
    trace_.begin_forward();
    if (!GradMode::is_enabled()) return;  // an evaluation
    // A new forward: an overflow held from the last one that did not matter is dropped.
    trace_.discard_step();
    if (autocast_enabled()) autocast_ = autocast_dtype();
    if (!params16_)
      for (const Tensor& p : c.model.parameters())
        if (is_reduced_float(p.dtype())) params16_ = p.dtype();
    live_ = sampled_ && (autocast_ || params16_);
    trace_.set_active(live_);
  }
  // An overflow held this step counts when it reached what the step uses: a non-finite loss, or
  // non-finite gradients the optimizer is about to step with.
  void before_step(RunContext& c, bool) override {
    if (!trace_.holding()) return;
    bool grads = false;
    for (const optim::ParamGroup& group : c.optimizer.param_groups())
      for (const Tensor& p : group.params)
        if (p.defined() && p.grad().defined() && !all_finite(p.grad())) grads = true;
    trace_.confirm_step(grads || (c.loss_seen && !std::isfinite(c.loss_value)), grads);
  }
  // A step the loss scaler skipped (or a non-finite loss): the forward's overflow counts when the loss
  // itself turned non-finite; the backward's is the scaler working.
  void nonfinite(RunContext& c, const std::string&) override {
    if (trace_.holding()) trace_.confirm_step(c.loss_seen && !std::isfinite(c.loss_value), false);
  }
  void after_step(RunContext& c, bool) override {
    trace_.set_step(c.steps + 1);
    sampled_ = c.sampled();
    live_ = false;  // until the next training forward
    trace_.set_active(false);
  }
  void pause(RunContext&, bool on) override { trace_.set_active(!on && live_); }
  void finish(RunContext& c) override {
    if (!autocast_ && !params16_) return;
    c.note_ran("M29");
    c.add_all(trace_.findings());
  }
  void detach(RunContext&) override {
    on_.reset();
    trace_.detach();
  }
  void after_run(RunContext& c, const Tensor& x, const Tensor& y) override {
    if ((!autocast_ && !params16_) || !x.defined() || !x.is_floating_point()) return;
    const PrecisionSetting s = autocast_ ? PrecisionSetting{*autocast_, true} : PrecisionSetting{*params16_, false};
    // The run's own 16-bit setting includes its loss scale: a watched GradScaler's scale multiplies
    // the loss in both runs, as scaler.scale(loss) did in training (the relative errors do not
    // depend on it; the 16-bit gradients' range does).
    double scale = 1.0;
    if (c.scaler && c.scaler->is_enabled() && std::isfinite(c.scaler->get_scale()) && c.scaler->get_scale() > 0)
      scale = c.scaler->get_scale();
    LossOf lf;
    if (c.loss && y.defined())
      lf = [&c, &y, scale](const Tensor& out) {
        Tensor l = (*c.loss)(out, y.to(out.device()));
        return scale == 1.0 ? l : l * scale;
      };
    const bool was = c.model.is_training();
    c.model.eval();
    try {
      c.add_all(check_precision_ops(c.model, x, lf, s));
      c.note_ran("M30");
    } catch (const std::exception& e) {
      Finding f = detail::make("M30", Severity::Info, std::string("not run: ") + e.what());
      c.add(std::move(f));
    }
    c.model.train(was);
  }

 private:
  RangeTrace trace_;
  std::unique_ptr<Scope> on_;
  std::optional<DType> autocast_, params16_;
  bool sampled_ = true;  // the step in progress is sampled (step 1 is)
  bool live_ = false;    // the trace reads this step's ops
};

}  // namespace

std::unique_ptr<RunCheck> make_precision_run_check(const MonitorOptions&) {
  return std::make_unique<PrecisionRunCheck>();
}

}  // namespace gradsleuth::debug
