// Hook sets and the module tracker (see hooks.h).
#include "debug/checks/hooks.h"

#include "core/autograd.h"

namespace gradsleuth::debug {

namespace detail {
namespace {
thread_local double t_own = 0.0;
thread_local int t_depth = 0;
}  // namespace
double own_seconds() { return t_own; }
OwnTime::OwnTime()
    : outer_(t_depth++ == 0),
      start_(outer_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{}) {}
OwnTime::~OwnTime() {
  --t_depth;
  if (outer_) t_own += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}
}  // namespace detail

namespace {
// The hook, timed as the debug module's own work.
template <class H>
H timed(H h) {
  return [h = std::move(h)](auto&&... args) {
    detail::OwnTime own;
    return h(std::forward<decltype(args)>(args)...);
  };
}
}  // namespace

void HookSet::pre(const nn::ModulePtr& m, nn::Module::ForwardPreHook h, bool time_it) {
  handles_.push_back({m, m.get(), m->register_forward_pre_hook(time_it ? timed(std::move(h)) : std::move(h)), false});
}

void HookSet::post(const nn::ModulePtr& m, nn::Module::ForwardHook h, bool time_it) {
  handles_.push_back({m, m.get(), m->register_forward_hook(time_it ? timed(std::move(h)) : std::move(h)), false});
}

void HookSet::loss_pre(const std::shared_ptr<nn::Loss>& l, nn::Loss::LossPreHook h) {
  handles_.push_back({l, l.get(), l->register_loss_pre_hook(timed(std::move(h))), true});
}

void HookSet::loss_pre(nn::Loss& l, nn::Loss::LossPreHook h) {
  handles_.push_back({nullptr, &l, l.register_loss_pre_hook(timed(std::move(h))), true});
}

void HookSet::loss_post(nn::Loss& l, nn::Loss::LossHook h) {
  handles_.push_back({nullptr, &l, l.register_loss_hook(timed(std::move(h))), true});
}

void HookSet::clear() {
  for (Handle& h : handles_) {
    if (h.loss)
      static_cast<nn::Loss*>(h.raw)->remove_loss_hook(h.id);
    else
      h.raw->remove_forward_hook(h.id);
  }
  handles_.clear();
}

std::string module_label(const std::string& path, const nn::Module& m) {
  return (path.empty() ? std::string("(model)") : path) + " (" + m.type_name() + ")";
}

namespace {
void label_under(const nn::Module& m, const std::string& path, std::map<std::string, std::string>& out) {
  out[path] = module_label(path, m);
  for (const auto& [name, c] : m.named_children()) label_under(*c, path.empty() ? name : path + "." + name, out);
}
}  // namespace

std::map<std::string, std::string> module_labels(const nn::Module& model) {
  std::map<std::string, std::string> out;
  label_under(model, "", out);
  return out;
}

std::string owner_label(const std::map<std::string, std::string>& labels, const std::string& param) {
  const auto dot = param.rfind('.');
  const auto it = labels.find(dot == std::string::npos ? "" : param.substr(0, dot));
  return it == labels.end() ? "" : it->second;
}

void ModuleTracker::attach(nn::Module& model) {
  detach();
  for (auto& [path, m] : model.named_modules()) {
    labels_.push_back(std::make_shared<const std::string>(module_label(path, *m)));
    const std::string* label = labels_.back().get();
    const bool root = path.empty();
    // O(1): not timed (two clock reads would cost more than the hook).
    hooks_.pre(
        m,
        [this, label, root](nn::Module&, const Tensor&) {
          if (root) stack_.clear();  // a forward that threw never popped: start clean at the top
          stack_.push_back(label);
        },
        false);
    hooks_.post(
        m,
        [this](nn::Module&, const Tensor&, const Tensor&) {
          if (!stack_.empty()) stack_.pop_back();
        },
        false);
  }
}

QuietProbe::QuietProbe(nn::Module& model)
    : mute_([](const Warning&) {}, WarningScope::ThisThread), rng_(default_generator()) {
  NoGradGuard ng;
  for (Tensor& b : model.buffers()) buffers_.emplace_back(b, b.detach().clone());
}

QuietProbe::~QuietProbe() {
  NoGradGuard ng;
  // Only the buffers the probe changed: writing an unchanged one would still raise its version, and a
  // graph built before the probe (a step's forward, the gate's) that saved it could not run backward.
  for (auto& [live, copy] : buffers_)
    if (!gradsleuth::equal(live, copy)) live.copy_(copy);
  default_generator() = rng_;
}

std::vector<std::pair<std::string, nn::ModulePtr>> leaf_modules(nn::Module& model) {
  std::vector<std::pair<std::string, nn::ModulePtr>> out;
  for (auto& [path, m] : model.named_modules())
    if (m->named_children().empty()) out.emplace_back(path, m);
  return out;
}

}  // namespace gradsleuth::debug
