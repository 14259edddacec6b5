// Autograd: the dynamic graph, saved tensors with version checks, and the engine.
//
// Every differentiable op, after computing its output, records a Node: the
// backward function, the edges to its inputs' nodes, and what it saved.
//   y = exp(x)   records   ExpBackward{ saved y, next = [x's node] }
// backward() walks the graph from the output, in dependency order, calling each
// node with the gradient of its output and passing the results to its inputs.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace gradsleuth {

// ---- grad mode: a thread-local switch that turns recording off ------------
struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};
// Inside this guard no op records a graph (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }

 private:
  bool prev_;
};
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }

 private:
  bool prev_;
};

// ---- the graph ------------------------------------------------------------
// An edge from a node to the node of one of its inputs; `fn` is null when that
// input needs no gradient. shape/dtype let the engine check what backward returns.
struct Edge {
  std::shared_ptr<Node> fn;
  Shape shape;
  DType dtype = DType::Float32;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  explicit Node(const char* name) : name_(name) { live_.fetch_add(1, std::memory_order_relaxed); }
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  virtual ~Node();  // frees the graph behind it iteratively (a 100,000-node chain must not recurse)
  const char* name() const { return name_; }
  // The nodes alive now, in every thread: the graphs something still holds. A training loop whose count
  // grows from step to step keeps each step's graph (a loss stored without .item()).
  static int64_t live() { return live_.load(std::memory_order_relaxed); }

  // Given d(loss)/d(output), returns d(loss)/d(input_i) for each input, in the
  // order of next_edges (undefined Tensor where an input needs none).
  virtual tensor_list apply(const Tensor& grad_output) = 0;
  // Frees saved tensors once a backward has used them (unless retain_graph).
  virtual void release_saved() { released_ = true; }
  bool released() const { return released_; }

  std::vector<Edge> next_edges;
  Shape out_shape;  // the output this node's gradient arrives for
  DType out_dtype = DType::Float32;
  std::vector<GradHook> pre_hooks;  // tensor hooks on the (non-leaf) output
  std::string context;              // where the op ran (a module path set by nn/debug); may be empty

  // Engine bookkeeping for the current backward pass.
  struct PassState {
    uint64_t epoch = 0;
    int64_t dependencies = 0;
    bool needed = true;
    Tensor pending_grad;
  };
  PassState pass_;
  // A leaf's AccumulateGrad, which the graphs of several threads may share (their backward passes
  // may run at once): each pass then keeps this node's PassState in a table of its own.
  bool pass_local_ = false;

 protected:
  bool released_ = false;

 private:
  static std::atomic<int64_t> live_;
  const char* name_;
};

// A tensor kept for backward, "a snapshot of a variable at a certain version".
// Unpacking it checks the version: if an in-place op changed the storage since
// it was saved, the gradient would be silently wrong, so we raise instead —
// naming the tensor, the op that saved it, the in-place op that changed it and
// both versions.
class SavedTensor {
 public:
  SavedTensor() = default;
  // `is_output`: the op saves its own result (exp, sigmoid). Saving it as-is
  // would make a reference cycle (result -> node -> result), so we keep a
  // detached alias and re-attach it to the node when unpacked.
  SavedTensor(const Tensor& t, const char* saved_by, bool is_output = false);
  // Inside a float16/bfloat16 op's backward (detail::WidenedBackward) a 16-bit tensor comes back
  // widened to float32.
  Tensor unpack(Node& node) const;
  // The same check, the tensor in its saved dtype (a kernel that reads 16-bit operands itself).
  Tensor unpack_as_saved(Node& node) const;
  bool defined() const { return data_.defined(); }
  void reset() { data_ = Tensor(); }

 private:
  Tensor data_;
  uint64_t version_ = 0;
  const char* saved_by_ = nullptr;
  bool is_output_ = false;
};

// A node whose backward is a lambda: tensor_list f(const Tensor& grad, Node& self).
// This is how ops write their backward right beside their forward.
template <class F>
class LambdaNode final : public Node {
 public:
  LambdaNode(const char* name, F f) : Node(name), f_(std::move(f)) {}
  tensor_list apply(const Tensor& grad) override;
  void release_saved() override {
    f_.reset();  // drops every SavedTensor captured by the lambda
    released_ = true;
  }

 private:
  std::optional<F> f_;
};

// True when recording is on and some input needs a gradient.
bool needs_grad(const Tensor& a);
bool needs_grad(const Tensor& a, const Tensor& b);
bool needs_grad(const tensor_list& ts);
bool needs_grad(std::initializer_list<const Tensor*> ts);

// The edge a new node should point to for `t`: its grad_fn, its (shared) grad
// accumulator if it is a leaf that requires grad, or an empty edge.
Edge gradient_edge(const Tensor& t);

// Attaches `node` as `out`'s grad_fn with edges to `inputs` (call only when needs_grad).
void set_history(Tensor& out, const std::shared_ptr<Node>& node, std::initializer_list<const Tensor*> inputs);
void set_history(Tensor& out, const std::shared_ptr<Node>& node, const tensor_list& inputs);

// record("exp", y, {&x}, [sy = SavedTensor(y, "exp", true)](const Tensor& g, Node& n) { ... });
template <class F>
void record(const char* name, Tensor& out, std::initializer_list<const Tensor*> inputs, F&& backward) {
  auto node = std::make_shared<LambdaNode<std::decay_t<F>>>(name, std::forward<F>(backward));
  set_history(out, node, inputs);
}
template <class F>
void record(const char* name, Tensor& out, const tensor_list& inputs, F&& backward) {
  auto node = std::make_shared<LambdaNode<std::decay_t<F>>>(name, std::forward<F>(backward));
  set_history(out, node, inputs);
}

// In-place ops: before modifying `self`, check that autograd allows it (a leaf
// that requires grad cannot be modified in place while grad mode is on).
void check_inplace(const Tensor& self, const char* op);
// After an in-place op: bump the version and, when recording, make `self`'s
// history go through `node` (its old history becomes the node's first input).
void finish_inplace(Tensor& self, const char* op, const std::shared_ptr<Node>& node,
                    std::initializer_list<const Tensor*> other_inputs);
template <class F>
void finish_inplace(Tensor& self, const char* op, std::initializer_list<const Tensor*> other_inputs, F&& backward) {
  std::shared_ptr<Node> node;
  if (GradMode::is_enabled()) node = std::make_shared<LambdaNode<std::decay_t<F>>>(op, std::forward<F>(backward));
  finish_inplace(self, op, node, other_inputs);
}

// ---- the engine -------------------------------------------------------------
namespace autograd {

// Accumulates d(sum_i <roots_i, grad_roots_i>)/d(leaf) into each leaf's .grad.
// A missing grad_root is ones for a one-element root (error otherwise).
// retain_graph keeps saved tensors for another backward; create_graph records
// the backward itself so it can be differentiated again (implies retain_graph).
void backward(const tensor_list& roots, const tensor_list& grad_roots = {}, bool retain_graph = false,
              bool create_graph = false);

// Functional gradients: d(outputs)/d(inputs), returned instead of accumulated
// into .grad. allow_unused=false raises when an input is not reached.
tensor_list grad(const tensor_list& outputs, const tensor_list& inputs, const tensor_list& grad_outputs = {},
                 std::optional<bool> retain_graph = std::nullopt, bool create_graph = false, bool allow_unused = false);

// True while a backward pass is running nodes on this thread (observers use it
// to tell the ops of a backward formula from forward ops).
bool in_backward();

// Runs `cb` once the backward pass that is running on this thread has finished: after every
// node ran and every leaf's .grad holds its accumulated gradient, before backward() returns.
// Call it from a hook during backward (an error otherwise). Callbacks run in the order they
// were queued; one queued by a callback runs too. When the backward fails, queued callbacks
// are dropped. A hook only sees one leaf's gradient; this is the place for work that needs
// all of them: dist::DistributedDataParallel waits here for its gradient all-reduces.
void queue_callback(std::function<void()> cb);

}  // namespace autograd

namespace detail {
// A float16/bfloat16 op's backward runs in float32, like its forward: the saved tensors it unpacks
// are widened (the gradient joins them in float32 by promotion at its first product with one; a
// gradient only passed on, as by a view or an add, is never converted), and each input's
// gradient is rounded once (docs/dtypes.md).
class WidenedBackward {
 public:
  WidenedBackward();
  ~WidenedBackward();
  WidenedBackward(const WidenedBackward&) = delete;
  WidenedBackward& operator=(const WidenedBackward&) = delete;

 private:
  bool prev_;
};
bool backward_widened();
void round_to_inputs(tensor_list& grads, const Node& node);
// Asked by a backward before it computes the float32 gradient of `node`'s input `input`: the
// dtype that gradient will be rounded through by the fused backward of a cast (the input is a
// float16/bfloat16 cast of a float32 tensor, or a view of one, and nothing else can see the
// 16-bit step), or nullopt. A backward that rounds its result to that dtype as it computes it
// marks the result's storage (Storage::mark_rounded_through), and the cast skips its own pass.
std::optional<DType> rounded_through(const Node& node, size_t input);
// t.to(want), keeping a transposed (permuted dense) layout outside create_graph.
Tensor to_keeping_layout(const Tensor& t, DType want);
}  // namespace detail

// ---- template definitions ---------------------------------------------------
template <class F>
tensor_list LambdaNode<F>::apply(const Tensor& grad) {
  GS_CHECK(f_.has_value(), name(),
           "trying to backward through the graph a second time; its saved tensors were freed after the first "
           "backward. Pass retain_graph=true to the first backward() if you need to call it twice.");
  if (!grad.defined() || !is_reduced_float(grad.dtype())) [[likely]]
    return (*f_)(grad, *this);
  tensor_list r;
  {
    detail::WidenedBackward widened;
    r = (*f_)(grad, *this);
  }
  detail::round_to_inputs(r, *this);
  return r;
}

}  // namespace gradsleuth
