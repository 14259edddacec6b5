// The op observer: lets other modules (debug's broadcasting detector, NaN
// localiser, profiler) see every op executed, without core depending on them.
// With no observer attached, an op pays one relaxed atomic load.
#pragma once
#include <atomic>
#include <cstdint>

#include "core/tensor.h"

namespace gradsleuth {

struct OpEvent {
  const char* op;               // registry name: "add", "matmul", "relu_"
  const Tensor* const* inputs;  // the tensor operands, by address (scalars appear as 0-dim tensors)
  size_t num_inputs;
  const Tensor* output;    // the result (for in-place ops, the modified tensor)
  uint32_t expanded_mask;  // bit i set: broadcasting expanded input i to a larger shape
  bool inplace;
  const Tensor& input(size_t i) const { return *inputs[i]; }
};

// Called for each node a backward pass runs: its name, the gradient that
// arrived for its output, and the gradients it produced for its inputs.
struct BackwardEvent {
  const Node* node;
  const Tensor* grad_output;
  const Tensor* grad_inputs;
  size_t num_grad_inputs;
};

// Ops an observer runs inside its own callbacks are not reported to anyone.
class OpObserver {
 public:
  // What an observer listens to: the ops run outside a backward pass (the forward, the
  // optimizer), the ops a backward pass runs (its formulas), and the backward's nodes
  // (on_backward). Read once, when it is attached; it is not called for the others, and an op no
  // attached observer listens to costs a check of three counts.
  enum Events : unsigned { kOps = 1u, kBackwardOps = 2u, kBackwardNodes = 4u, kAll = 7u };
  virtual unsigned events() const { return kAll; }

  virtual ~OpObserver() = default;
  virtual void on_op(const OpEvent&) {}
  virtual void on_backward(const BackwardEvent&) {}
  virtual void on_op_begin(const char* op) {}  // for timing (profiler)
};

// Which ops an observer sees: those of every thread (the default), or only those
// run by the thread that attached it (two threads training side by side, each
// with its own profiler or checks). Attaching and detaching are thread-safe.
enum class ObserverScope { AllThreads, ThisThread };

void add_observer(OpObserver* o, ObserverScope scope = ObserverScope::AllThreads);
void remove_observer(OpObserver* o);

// RAII: observes for the guard's lifetime.
class ObserverGuard {
 public:
  explicit ObserverGuard(OpObserver* o, ObserverScope scope = ObserverScope::AllThreads) : o_(o) {
    add_observer(o_, scope);
  }
  ~ObserverGuard() { remove_observer(o_); }
  ObserverGuard(const ObserverGuard&) = delete;
  ObserverGuard& operator=(const ObserverGuard&) = delete;

 private:
  OpObserver* o_;
};

namespace detail {
extern std::atomic<int> g_observer_count;
void notify_op(const OpEvent& e);
void notify_op_begin(const char* op);
void notify_backward(const BackwardEvent& e);
}  // namespace detail

inline bool observers_active() { return detail::g_observer_count.load(std::memory_order_relaxed) != 0; }

// An operand as an op reports it: its address, so that reporting copies no tensor (an op's
// `{a, b}` builds these in place, for the length of the call).
struct TensorRef {
  const Tensor* t;
  TensorRef(const Tensor& x) : t(&x) {}  // NOLINT: implicit, for notify_op("add", {a, b}, out)
};

namespace detail {
void notify_op_refs(const char* op, const TensorRef* inputs, size_t n, const Tensor& out, uint32_t expanded_mask,
                    bool inplace);
}  // namespace detail

// Used by ops: reports the op when someone listens.
inline void notify_op(const char* op, std::initializer_list<TensorRef> inputs, const Tensor& out,
                      uint32_t expanded_mask = 0, bool inplace = false) {
  if (observers_active()) [[unlikely]]
    detail::notify_op_refs(op, inputs.begin(), inputs.size(), out, expanded_mask, inplace);
}
void notify_op(const char* op, const tensor_list& inputs, const Tensor& out, uint32_t expanded_mask = 0,
               bool inplace = false);

}  // namespace gradsleuth
