// Recording the graph as the engine builds and runs it, for pictures that step through it
// (debug::explore): every node in the order the forward recorded it, with its output's and
// inputs' layout, and every node in the order backward() really ran it, with each gradient
// contribution that arrived for it, their sum, and for a leaf the .grad it left.
//
//   autograd::GraphTrace trace;            // active on this thread from here
//   Tensor loss = (a * b + a).sum();
//   loss.backward();
//   trace.stop();
//   for (const auto& s : trace.backward()) ...  // s.node->name(), s.incoming, s.grad
//
// Off (the default), the cost is one thread-local pointer test per recorded node and per
// node a backward runs.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace gradsleuth::autograd {

// A tensor's layout at the moment the trace saw it.
struct TensorLayout {
  const TensorImpl* impl = nullptr;  // identity only (may be freed later)
  const void* storage = nullptr;     // identity of the storage (views share their base's)
  Shape shape;
  Strides strides;
  int64_t offset = 0;
  DType dtype = DType::Float32;
  Device device = kCPU;
  uint64_t version = 0;
  bool requires_grad = false, is_leaf = true, is_view = false;
  std::string name;  // Tensor::name(), when set
};

// One node as the forward recorded it: the node, the tensor it produced (for an in-place op,
// the modified tensor) and its operands, in the order of the node's next_edges.
struct RecordedNode {
  std::shared_ptr<Node> node;
  TensorLayout output;
  std::vector<TensorLayout> inputs;
  bool inplace = false;
};

// A gradient that arrived for a node: sent by `from` for its input `input` (from == nullptr: the
// seed backward() starts with, ones for a scalar loss).
struct GradContribution {
  const Node* from = nullptr;
  size_t input = 0;
  Tensor grad;
};

// One node as backward() ran it.
struct BackwardStep {
  std::shared_ptr<Node> node;
  std::vector<GradContribution> incoming;  // in arrival order
  Tensor grad;                       // their sum, what the node's backward was called with (undefined: none arrived)
  bool ran = false;                  // false: skipped (nothing arrived, or grad() did not need it)
  Tensor leaf_grad;                  // AccumulateGrad: a copy of the leaf's .grad after it ran
  const TensorImpl* leaf = nullptr;  // AccumulateGrad: the leaf it accumulates into
  std::shared_ptr<const TensorImpl> leaf_ptr;  // the same, kept alive (its name, shape, version)
};

class GraphTrace {
 public:
  GraphTrace();  // active on this thread from here (nested traces: the innermost records)
  ~GraphTrace();
  GraphTrace(const GraphTrace&) = delete;
  GraphTrace& operator=(const GraphTrace&) = delete;
  void stop();  // stops recording; what was recorded stays
  bool active() const { return active_; }

  // Every node recorded while active, in the order the forward made them.
  const std::vector<RecordedNode>& forward() const { return forward_; }
  // Every node the backward passes run while active ran, in their order (several passes append).
  const std::vector<BackwardStep>& backward() const { return backward_; }
  // How many backward passes ran while active.
  int passes() const { return passes_; }

  static TensorLayout layout_of(const Tensor& t);

  // Called by the autograd (core/autograd.cpp) when a trace is active on the thread.
  static GraphTrace* current();
  void on_record(const std::shared_ptr<Node>& node, const Tensor& out, const std::vector<const Tensor*>& inputs,
                 bool inplace);
  void on_pass_begin();
  void on_contribution(Node* to, const Node* from, size_t input, const Tensor& grad);
  void on_run(Node* n, const Tensor& grad, bool ran);
  void on_leaf(const std::shared_ptr<TensorImpl>& leaf);

 private:
  std::vector<RecordedNode> forward_;
  std::vector<BackwardStep> backward_;
  // Contributions received by nodes that have not run yet in the current pass.
  std::unordered_map<const Node*, std::vector<GradContribution>> pending_;
  GraphTrace* prev_ = nullptr;
  bool active_ = false;
  int passes_ = 0;
};

// Reading a graph: the leaf tensor a node accumulates into (gradient_edge(leaf).fn, the node at the
// end of every path to a leaf that requires grad), or an undefined Tensor for any other node.
Tensor accumulated_leaf(const Node& node);

}  // namespace gradsleuth::autograd
