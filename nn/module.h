// Module: the base of every layer. Holds named parameters, buffers and child
// modules; switches train/eval; runs forward hooks (the debug module attaches
// through them, so a model needs no change to be checked).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "nn/bugs.h"

namespace gradsleuth::nn {

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation. Single-input modules override this one.
  virtual Tensor forward(const Tensor& x);
  // Calls forward with the hooks around it: pre-hooks, forward, post-hooks.
  Tensor operator()(const Tensor& x);

  // ---- structure --------------------------------------------------------
  // Registers a parameter (requires_grad set as given) and returns its handle.
  // Handles share state: the optimizer's in-place updates are seen by the layer.
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

  // Dotted paths ("0.weight", "encoder.fc1.bias"), in registration order.
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  // This module ("" or `prefix`) and every descendant, depth first.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules(const std::string& prefix = "");
  int64_t num_parameters(bool trainable_only = false) const;

  // Replaces a registered parameter's or buffer's value in place (all handles
  // see it); used by checkpoint loading and to(dtype).
  void set_tensor(const std::string& dotted_name, const Tensor& value);

  // ---- modes -------------------------------------------------------------
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();              // clears .grad of every parameter
  void requires_grad_(bool on);  // freezes (false) or unfreezes every parameter
  void to(DType t);              // converts parameters and floating buffers
  // Moves every parameter and buffer to `d` in place: the Tensor handles (the layer's members,
  // an optimizer's list) keep their identity and see the moved values, as in PyTorch.
  // Make the optimizer's state after moving (its buffers are made on the parameters' device).
  void to(Device d);

  // ---- hooks -------------------------------------------------------------
  // A call runs the hooks registered when it began: a hook may remove itself or register
  // another, which takes effect from the next call.
  using ForwardPreHook = std::function<void(Module& self, const Tensor& input)>;
  using ForwardHook = std::function<void(Module& self, const Tensor& input, const Tensor& output)>;
  size_t register_forward_pre_hook(ForwardPreHook h);
  size_t register_forward_hook(ForwardHook h);
  void remove_forward_hook(size_t handle);  // handles from either register call

  // ---- injectable bugs (nn/bugs.h, docs/catalog.md) --------------------------
  // Switches a catalogued bug on in this module (not its children). A module
  // accepts only the bugs it has a buggy code path for; others raise an error
  // that lists them.
  void inject_bug(Bug b);
  void remove_bug(Bug b) { bugs_.remove(b); }
  bool has_bug(Bug b) const { return bugs_.has(b); }
  const BugSet& bugs() const { return bugs_; }
  // The bugs this module type can carry (none by default).
  virtual std::vector<Bug> injectable_bugs() const { return {}; }

  // ---- description ---------------------------------------------------------
  const std::string& type_name() const { return type_name_; }
  virtual std::string extra_repr() const { return ""; }  // "in_features=784, out_features=256"
  std::string repr(int indent = 0) const;                // the module tree, PyTorch style
  // M1: runs `sample` through the model and lists every module's output shape
  // and parameter count.
  std::string summary(const Tensor& sample);

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  // Runs `body` between the forward pre-hooks and hooks, which see `input` as the
  // module's input. operator()(x) is call_with_hooks(x, forward(x)); modules with
  // two inputs (losses) pass their prediction.
  Tensor call_with_hooks(const Tensor& input, const std::function<Tensor()>& body);
  bool training_ = true;
  // Called after inject_bug(b) switched b on: layers whose bug is in their
  // initialisation (B16, B18) re-draw their parameters here.
  virtual void on_bug_injected(Bug b) { (void)b; }

 private:
  BugSet bugs_;
  std::string type_name_;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  struct Hook {
    size_t id;
    ForwardPreHook pre;
    ForwardHook post;
  };
  // Copy on write: a call holds the list it started with (a hook may remove itself, or add
  // another), and registering replaces the list, so a forward copies one pointer, not the hooks.
  std::shared_ptr<const std::vector<Hook>> hooks_;
  size_t add_hook(ForwardPreHook pre, ForwardHook post);  // a new list with the hook added
  size_t next_hook_id_ = 0;
};

using ModulePtr = std::shared_ptr<Module>;

}  // namespace gradsleuth::nn
