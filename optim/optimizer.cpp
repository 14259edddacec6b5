// Optimizer base: parameter groups, step bookkeeping, zero_grad, step hooks,
// and the helpers every update rule shares (fused-path test, state keys).
#include "optim/optimizer.h"

#include <memory>
#include <utility>

#include "optim/stepped_grads.h"

#include "core/warning.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"

namespace gradsleuth::optim {

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups)
    : Optimizer(std::move(name), std::move(groups), 1e-3, 0.0) {}

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups, double default_lr, double default_weight_decay)
    : groups_(std::move(groups)),
      name_(std::move(name)),
      default_lr_(default_lr),
      default_weight_decay_(default_weight_decay) {
  // What every optimizer requires; each one's own options are checked by its constructor.
  GS_CHECK(std::isfinite(default_lr) && default_lr >= 0.0, name_, "invalid learning rate ", default_lr,
           "; it must be finite and >= 0");
  GS_CHECK(std::isfinite(default_weight_decay) && default_weight_decay >= 0.0, name_, "invalid weight_decay ",
           default_weight_decay, "; it must be finite and >= 0");
  std::vector<const TensorImpl*> seen;
  size_t n = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    check_group(groups_[g], g, seen);
    for (const Tensor& p : groups_[g].params) seen.push_back(p.impl_ptr().get());
    n += groups_[g].params.size();
  }
  GS_CHECK(n > 0, name_, "got an empty parameter list; pass model->parameters() after the layers are registered");
}

// Fills inherited values and checks that every parameter is a floating-point
// leaf that no earlier group already holds (it would be updated twice a step).
void Optimizer::check_group(ParamGroup& group, size_t g, const std::vector<const TensorImpl*>& seen) const {
  if (std::isnan(group.lr)) group.lr = default_lr_;
  if (std::isnan(group.weight_decay)) group.weight_decay = default_weight_decay_;
  GS_CHECK(std::isfinite(group.lr) && group.lr >= 0.0, name_, "group ", g, " has an invalid learning rate ", group.lr,
           "; learning rates must be finite and >= 0");
  GS_CHECK(std::isfinite(group.weight_decay) && group.weight_decay >= 0.0, name_, "group ", g,
           " has an invalid weight_decay ", group.weight_decay, "; weight decay must be finite and >= 0");
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    GS_CHECK(p.defined() && p.is_floating_point(), name_, "parameter ", i, " of group ", g,
             " must be a defined floating-point tensor, got ", p.defined() ? p.str() : "undefined");
    GS_CHECK(p.is_leaf(), name_, "parameter ", p.str(), " is not a leaf tensor (it was computed by '",
             p.grad_fn()->name(), "'); optimize the leaf it came from");
    const TensorImpl* id = p.impl_ptr().get();
    bool dup = std::find(seen.begin(), seen.end(), id) != seen.end();
    for (size_t j = 0; j < i && !dup; ++j) dup = group.params[j].impl_ptr().get() == id;
    GS_CHECK(!dup, name_, "parameter ", i, " of group ", g, " (", p.str(),
             ") appears more than once in the parameter groups; each step would update it twice. "
             "List every parameter in exactly one group.");
  }
}

std::vector<ParamGroup> Optimizer::one_group(std::vector<Tensor> params) {
  std::vector<ParamGroup> groups;
  groups.emplace_back(std::move(params));
  return groups;
}

void Optimizer::add_param_group(ParamGroup group) {
  std::vector<const TensorImpl*> seen;
  for (const auto& g : groups_)
    for (const Tensor& p : g.params) seen.push_back(p.impl_ptr().get());
  check_group(group, groups_.size(), seen);
  groups_.push_back(std::move(group));
}

void Optimizer::step() {
  // An lr written straight into param_groups() is checked here (set_group_lr checks the others).
  for (size_t g = 0; g < groups_.size(); ++g)
    GS_CHECK(std::isfinite(groups_[g].lr) && groups_[g].lr >= 0.0, name_ + ".step", "group ", g,
             " has the learning rate ", groups_[g].lr, "; it must be finite and >= 0 (set it with set_lr)");
  std::vector<Hook> hooks = hooks_;
  for (auto& h : hooks)
    if (h.pre) h.fn(*this);
  if (!accumulating_ && accumulated_since_step()) [[unlikely]] {
    accumulation_detected_ = true;
    warn({"O5", name_,
          "step() ran on gradients that still hold the previous step's: zero_grad() was not called between "
          "steps, so every batch's gradient adds to all earlier ones and the updates grow and point the wrong "
          "way. Call optimizer.zero_grad() (or model.zero_grad()) before each backward(); if you accumulate "
          "gradients on purpose, call set_accumulating(true)."});
  }
  {
    NoGradGuard ng;
    update();
  }
  ++steps_;
  zeroed_since_step_ = false;
  remember_grads();
  for (auto& h : hooks)
    if (!h.pre) h.fn(*this);
}

// O5: after a step we remember each gradient buffer and its version. Autograd
// accumulates into an existing .grad in place (add_), which bumps its version;
// zero_grad() drops the buffer, so the next backward makes a new one.
void Optimizer::remember_grads() {
  grads_after_step_.clear();
  std::vector<Tensor> used;
  for (auto& g : groups_)
    for (auto& p : g.params) {
      Tensor gr = p.grad();
      if (gr.defined()) {
        grads_after_step_.push_back({gr.impl_ptr().get(), gr.version()});
        used.push_back(gr);
      }
    }
  stepped::remember_stepped_grads(this, used);
}

namespace stepped {
namespace {
// Per thread, the last step of each of the (at most kKept most recent) optimizers: weak references,
// so a buffer freed by zero_grad() (and an address reused by the next backward) never matches.
struct Stepped {
  const void* optimizer;
  std::vector<std::pair<std::weak_ptr<TensorImpl>, uint64_t>> grads;
};
constexpr size_t kKept = 8;
thread_local std::vector<Stepped> t_stepped;
}  // namespace

void remember_stepped_grads(const void* optimizer, const std::vector<Tensor>& grads) {
  t_stepped.erase(
      std::remove_if(t_stepped.begin(), t_stepped.end(), [&](const Stepped& s) { return s.optimizer == optimizer; }),
      t_stepped.end());
  if (t_stepped.size() >= kKept) t_stepped.erase(t_stepped.begin());
  Stepped s{optimizer, {}};
  for (const Tensor& g : grads) s.grads.emplace_back(g.impl_ptr(), g.version());
  t_stepped.push_back(std::move(s));
}

bool grads_already_stepped(const std::vector<Tensor>& params) {
  bool any = false;
  for (const Tensor& p : params) {
    const Tensor g = p.defined() ? p.grad() : Tensor();
    if (!g.defined()) continue;
    any = true;
    bool found = false;
    for (const Stepped& s : t_stepped)
      for (const auto& [weak, version] : s.grads)
        if (weak.lock() == g.impl_ptr() && version == g.version()) found = true;
    if (!found) return false;
  }
  return any;
}
}  // namespace stepped

bool Optimizer::accumulated_since_step() const {
  if (steps_ == 0 || zeroed_since_step_) return false;
  for (auto& g : groups_)
    for (auto& p : g.params) {
      Tensor gr = p.grad();
      if (!gr.defined()) continue;
      for (const auto& [impl, version] : grads_after_step_)
        if (impl == gr.impl_ptr().get() && version != gr.version()) return true;  // the old buffer grew
    }
  return false;
}

void Optimizer::zero_grad() {
  bool held = false;  // a gradient no step() used since the previous zero_grad()
  for (auto& g : groups_)
    for (auto& p : g.params) {
      held = held || p.grad().defined();
      p.zero_grad();
    }
  if (accumulating_ && zeroed_since_step_ && held) ++discarded_;
  zeroed_since_step_ = true;
}

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < groups_.size(); ++g) set_group_lr(g, lr, name_ + ".set_lr");
}

void Optimizer::set_group_lr(size_t group, double lr, const std::string& who) {
  GS_CHECK(group < groups_.size(), who, "parameter group ", group, " does not exist; ", name_, " has ", groups_.size(),
           " group(s)");
  GS_CHECK(std::isfinite(lr) && lr >= 0.0, who, "would set the learning rate of group ", group, " to ", lr,
           "; it must be finite and >= 0 (a schedule factor that overflowed, or a division by zero?). The lr stays ",
           groups_[group].lr);
  groups_[group].lr = lr;
}

size_t Optimizer::add_pre_step_hook(StepHook h) {
  hooks_.push_back({next_id_, true, std::move(h)});
  return next_id_++;
}
size_t Optimizer::add_post_step_hook(StepHook h) {
  hooks_.push_back({next_id_, false, std::move(h)});
  return next_id_++;
}
void Optimizer::remove_hook(size_t id) {
  hooks_.erase(std::remove_if(hooks_.begin(), hooks_.end(), [&](const Hook& h) { return h.id == id; }), hooks_.end());
}

// ---- helpers for the update rules ------------------------------------------------

// float16/bfloat16 parameters on the CPU take the fused step too: it runs in float32 there
// (core/cpu/reduced_float.cpp), so a step's intermediates (Adam's sqrt(v) + eps, with eps = 1e-8
// below float16's smallest subnormal) are not rounded to 16 bits; only p and the state are.
bool Optimizer::fusable(const Tensor& p, const Tensor& g) const {
  const bool dtype_ok =
      p.dtype() == kFloat32 || p.dtype() == kFloat64 || (is_reduced_float(p.dtype()) && p.device().is_cpu());
  return fused_ && p.device() == g.device() && p.dtype() == g.dtype() && dtype_ok && p.is_contiguous() &&
         g.is_contiguous();
}

void Optimizer::mark_modified(const Tensor& p, const char* op) { p.storage()->bump_version(op); }

void Optimizer::set_master_weights(bool on) {
  GS_CHECK(steps_ == 0 || on == master_weights_, name_ + ".set_master_weights", "called after ", steps_,
           " step(s): the state already made is in the parameters' dtype; choose master weights before the first "
           "step (right after constructing the optimizer)");
  master_weights_ = on;
}

Tensor Optimizer::master_weight(size_t group, size_t index) const {
  auto it = masters_.find({group, index});
  return it == masters_.end() ? Tensor() : it->second.weight;
}

Tensor& Optimizer::master_for(size_t gi, size_t i, const Tensor& p) {
  Master& m = masters_[{gi, i}];
  if (!m.weight.defined() || m.version != p.storage()->version() || m.weight.shape() != p.shape())
    m.weight = p.detach().to(kFloat32).contiguous();
  return m.weight;
}

void Optimizer::round_into(size_t gi, size_t i, Tensor& p) {
  Master& m = masters_.at({gi, i});
  p.copy_(m.weight);
  m.version = p.storage()->version();
}

void Optimizer::note_rounded(size_t gi, size_t i, const Tensor& p) { masters_.at({gi, i}).version = p.storage()->version(); }

RoundedCopy Optimizer::rounded_copy(const Tensor& p, bool master, detail::LowPrecisionCopy* kept, bool* written) {
  RoundedCopy c;
  if (master && p.device().is_cpu() && p.is_contiguous()) {
    c.data = p.raw_data();
    c.dtype = p.dtype();
  } else if (kept != nullptr) {
    c.data = kept->copy.raw_data();
    c.dtype = kept->copy.dtype();
  }
  if (is_reduced_float(c.dtype)) c.written = written;
  return c;
}

std::string Optimizer::state_key(size_t group, size_t index, const std::string& key) {
  return std::to_string(group) + "." + std::to_string(index) + "." + key;
}

std::tuple<size_t, size_t, std::string> Optimizer::parse_state_key(const std::string& full_key) const {
  const size_t d1 = full_key.find('.');
  const size_t d2 = d1 == std::string::npos ? d1 : full_key.find('.', d1 + 1);
  auto is_num = [](const std::string& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  GS_CHECK(full_key.compare(0, 7, "scaler.") != 0, name_ + ".load_state_dict", "key '", full_key,
           "' is a GradScaler's state: this dict holds the optimizer's and a scaler's (optim::training_state_dict). "
           "Load it with optim::load_training_state_dict(state, optimizer, scaler).");
  GS_CHECK(d2 != std::string::npos && is_num(full_key.substr(0, d1)) && is_num(full_key.substr(d1 + 1, d2 - d1 - 1)),
           name_ + ".load_state_dict", "key '", full_key,
           "' is not of the form 'group.index.name' (e.g. '0.3.exp_avg'); was this dict made by state_dict()?");
  // Checked conversion: a number too long for size_t is an error naming the key, not std::out_of_range.
  auto to_index = [&](const std::string& digits) {
    size_t v = 0;
    for (char c : digits)
      GS_CHECK(!__builtin_mul_overflow(v, size_t{10}, &v) && !__builtin_add_overflow(v, size_t(c - '0'), &v),
               name_ + ".load_state_dict", "key '", full_key, "': the number '", digits,
               "' is too large to be a group or parameter index");
    return v;
  };
  const size_t g = to_index(full_key.substr(0, d1)), i = to_index(full_key.substr(d1 + 1, d2 - d1 - 1));
  GS_CHECK(g < groups_.size() && i < groups_[g].params.size(), name_ + ".load_state_dict", "key '", full_key,
           "' names parameter ", i, " of group ", g, ", but this optimizer has ", groups_.size(), " group(s)",
           g < groups_.size() ? " and group " + std::to_string(g) + " has " + std::to_string(groups_[g].params.size()) +
                                    " parameter(s)"
                              : std::string(),
           ". Build the optimizer over the same parameters, in the same order, as the one that was saved.");
  return {g, i, full_key.substr(d2 + 1)};
}

Tensor Optimizer::load_state_tensor(const Tensor& saved, size_t g, size_t i, const std::string& key) const {
  const Tensor& p = groups_[g].params[i];
  GS_CHECK(saved.defined() && saved.shape() == p.shape(), name_ + ".load_state_dict", "state '", state_key(g, i, key),
           "' is ", saved.defined() ? saved.str() : "undefined", " but parameter ", i, " of group ", g, " is ", p.str(),
           ". The optimizer must be built over the same parameters as the one that was saved.");
  Tensor out = zeros(p.shape(), TensorOptions(p.dtype()).device(p.device()));
  out.copy_(saved.detach());
  return out;
}

}  // namespace gradsleuth::optim
