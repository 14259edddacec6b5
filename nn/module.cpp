// Module bookkeeping: registration, traversal, modes, hooks, printing.
#include "nn/module.h"

#include <algorithm>
#include <sstream>

namespace gradsleuth::nn {

Tensor Module::forward(const Tensor&) {
  GS_FAIL(type_name_,
          "this module has no single-input forward(x); call it with the arguments it expects "
          "(for example loss(input, target))");
}

Tensor Module::operator()(const Tensor& x) {
  if (!hooks_) return forward(x);
  return call_with_hooks(x, [&] { return forward(x); });
}

Tensor Module::call_with_hooks(const Tensor& x, const std::function<Tensor()>& body) {
  if (!hooks_) return body();
  const std::shared_ptr<const std::vector<Hook>> hooks = hooks_;  // this call's list (see hooks_)
  for (const Hook& h : *hooks)
    if (h.pre) h.pre(*this, x);
  Tensor y = body();
  for (const Hook& h : *hooks)
    if (h.post) h.post(*this, x, y);
  return y;
}

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  GS_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name_, "invalid parameter name '", name,
           "': names must be non-empty and contain no '.'");
  for (auto& [n, p] : params_) GS_CHECK(n != name, type_name_, "a parameter named '", name, "' is already registered");
  if (t.defined()) {
    t = t.detach();
    if (requires_grad) t.requires_grad_(true);
    t.set_name(name);
  }
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  for (auto& [n, b] : buffers_) GS_CHECK(n != name, type_name_, "a buffer named '", name, "' is already registered");
  if (t.defined()) t = t.detach();
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  GS_CHECK(m != nullptr, type_name_, "cannot register a null module as '", name, "'");
  GS_CHECK(m.get() != this, type_name_, "a module cannot contain itself");
  for (auto& [n, c] : children_)
    GS_CHECK(n != name, type_name_, "a child module named '", name, "' is already registered");
  children_.emplace_back(name, std::move(m));
}

static std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  // Iterative DFS, preserving registration order.
  std::shared_ptr<Module> self = weak_from_this().lock();
  GS_CHECK(self != nullptr, type_name_,
           "named_modules() needs a model owned by a std::shared_ptr (hooks and "
           "debug tools keep the modules alive through it), but this one was created on the stack or with new. "
           "Create it with std::make_shared<",
           type_name_, ">(...).");
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> stack{{prefix, self}};
  while (!stack.empty()) {
    auto cur = stack.back();
    stack.pop_back();
    out.push_back(cur);
    const auto& ch = cur.second->children_;
    for (auto it = ch.rbegin(); it != ch.rend(); ++it) stack.emplace_back(join(cur.first, it->first), it->second);
  }
  return out;
}

// Parameters reachable under two paths (a layer reused) are listed once, under
// their first path — the optimizer must not step them twice. (debug's M4 check
// reports the sharing.)
std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<const TensorImpl*> seen;
  auto add = [&](const std::string& path, const Tensor& t) {
    if (!t.defined()) return;
    if (std::find(seen.begin(), seen.end(), t.impl_ptr().get()) != seen.end()) return;
    seen.push_back(t.impl_ptr().get());
    out.emplace_back(path, t);
  };
  std::vector<std::pair<std::string, const Module*>> stack{{"", this}};
  while (!stack.empty()) {
    auto [prefix, m] = stack.back();
    stack.pop_back();
    for (const auto& [n, p] : m->params_) add(join(prefix, n), p);
    if (!recurse) break;
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it)
      stack.emplace_back(join(prefix, it->first), it->second.get());
  }
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, p] : named_parameters(recurse)) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<std::pair<std::string, const Module*>> stack{{"", this}};
  while (!stack.empty()) {
    auto [prefix, m] = stack.back();
    stack.pop_back();
    for (const auto& [n, b] : m->buffers_)
      if (b.defined()) out.emplace_back(join(prefix, n), b);
    if (!recurse) break;
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it)
      stack.emplace_back(join(prefix, it->first), it->second.get());
  }
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, b] : named_buffers(recurse)) out.push_back(b);
  return out;
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (auto& [name, p] : named_parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

void Module::set_tensor(const std::string& dotted, const Tensor& value) {
  const auto dot = dotted.find('.');
  if (dot != std::string::npos) {
    const std::string head = dotted.substr(0, dot);
    for (auto& [n, c] : children_)
      if (n == head) return c->set_tensor(dotted.substr(dot + 1), value);
    GS_FAIL(type_name_, "no child module '", head, "' (while setting '", dotted, "')");
  }
  for (auto* list : {&params_, &buffers_}) {
    for (auto& [n, t] : *list) {
      if (n != dotted) continue;
      GS_CHECK(t.defined(), type_name_, "'", dotted, "' is not set");
      // Swap the storage and geometry under the same TensorImpl, so every
      // handle (the layer's member, the optimizer's list) sees the new value.
      TensorImpl& impl = t.impl();
      Tensor v = value.detach().contiguous();
      if (v.is_same(value) || v.storage() == value.storage()) v = v.clone();
      impl.storage = v.storage();
      impl.shape = v.shape();
      impl.strides = v.strides();
      impl.offset = v.offset();
      impl.dtype = v.dtype();
      impl.grad.reset();
      return;
    }
  }
  GS_FAIL(type_name_, "no parameter or buffer named '", dotted, "'");
}

void Module::inject_bug(Bug b) {
  const std::vector<Bug> ok = injectable_bugs();
  if (std::find(ok.begin(), ok.end(), b) == ok.end()) {
    std::string list;
    for (Bug o : ok) list += (list.empty() ? "" : ", ") + bug_code(o);
    GS_FAIL(type_name_, "cannot carry bug ", bug_code(b), " (", bug_info(b).title, "): it lives in ",
            bug_info(b).lives_in, ". This module type can carry: ", list.empty() ? "none" : list, ".");
  }
  bugs_.add(b);
  on_bug_injected(b);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad() {
  for (auto& p : parameters()) p.zero_grad();
}

void Module::requires_grad_(bool on) {
  for (auto& p : parameters()) p.requires_grad_(on);
}

void Module::to(DType t) {
  check_dtype(t, "Module::to");
  for (auto& [n, p] : named_parameters())
    if (p.is_floating_point() && p.dtype() != t) set_tensor(n, p.detach().to(t));
  for (auto& [n, b] : named_buffers())
    if (b.is_floating_point() && b.dtype() != t) set_tensor(n, b.to(t));
}

void Module::to(Device d) {
  check_device(d, "Module::to");
  for (auto& [n, p] : named_parameters())
    if (p.device() != d) set_tensor(n, p.detach().to(d));
  for (auto& [n, b] : named_buffers())
    if (b.device() != d) set_tensor(n, b.detach().to(d));
}

size_t Module::add_hook(ForwardPreHook pre, ForwardHook post) {
  auto next = hooks_ ? std::make_shared<std::vector<Hook>>(*hooks_) : std::make_shared<std::vector<Hook>>();
  next->push_back({next_hook_id_, std::move(pre), std::move(post)});
  hooks_ = std::move(next);
  return next_hook_id_++;
}
size_t Module::register_forward_pre_hook(ForwardPreHook h) { return add_hook(std::move(h), nullptr); }
size_t Module::register_forward_hook(ForwardHook h) { return add_hook(nullptr, std::move(h)); }
void Module::remove_forward_hook(size_t handle) {
  if (!hooks_) return;
  auto next = std::make_shared<std::vector<Hook>>();
  for (const Hook& h : *hooks_)
    if (h.id != handle) next->push_back(h);
  if (next->empty())
    hooks_.reset();  // no hooks: the forward's fast path
  else
    hooks_ = std::move(next);
}

std::string Module::repr(int indent) const {
  std::ostringstream os;
  os << type_name_ << "(" << extra_repr();
  if (!children_.empty()) {
    os << "\n";
    for (auto& [n, c] : children_)
      os << std::string(indent + 2, ' ') << "(" << n << "): " << c->repr(indent + 2) << "\n";
    os << std::string(indent, ' ');
  }
  os << ")";
  return os.str();
}

std::string Module::summary(const Tensor& sample) {
  struct Row {
    std::string path, type, shape;
    int64_t params;
  };
  std::vector<Row> rows;
  std::vector<std::pair<ModulePtr, size_t>> attached;
  for (auto& [path, m] : named_modules()) {
    int64_t own = 0;
    for (auto& [n, p] : m->named_parameters(false)) own += p.numel();
    size_t idx = rows.size();
    rows.push_back({path.empty() ? "(model)" : path, m->type_name(), "-", own});
    attached.emplace_back(m, m->register_forward_hook([&rows, idx](Module&, const Tensor&, const Tensor& out) {
      rows[idx].shape = shape_str(out.shape());
    }));
  }
  {
    NoGradGuard ng;
    try {
      (*this)(sample);
    } catch (...) {
      for (auto& [m, h] : attached) m->remove_forward_hook(h);
      throw;
    }
  }
  for (auto& [m, h] : attached) m->remove_forward_hook(h);
  std::ostringstream os;
  os << "input " << shape_str(sample.shape()) << " " << dtype_name(sample.dtype()) << "\n";
  size_t w = 6;
  for (auto& r : rows) w = std::max(w, r.path.size() + r.type.size() + 3);
  for (auto& r : rows) {
    std::string left = r.path + " (" + r.type + ")";
    os << left << std::string(w - left.size() + 2, ' ') << r.shape
       << std::string(r.shape.size() < 22 ? 22 - r.shape.size() : 1, ' ') << r.params << "\n";
  }
  os << "total parameters: " << num_parameters() << " (trainable " << num_parameters(true) << ")\n";
  return os.str();
}

}  // namespace gradsleuth::nn
