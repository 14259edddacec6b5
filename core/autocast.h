// Autocast (mixed precision, like torch.autocast): a thread-local scope in which chosen ops cast
// their floating inputs to float16/bfloat16 or up to float32 (docs/dtypes.md, "Autocast").
#pragma once
#include <cstddef>
#include <string_view>

#include "core/dtype.h"
#include "core/tensor.h"

namespace gradsleuth {

class Tensor;

// What an op does with its floating inputs inside an enabled autocast scope.
enum class AutocastPolicy : uint8_t {
  LowerPrecision,  // float32/float16/bfloat16 inputs are cast to the autocast dtype (float64 is left alone)
  Float32,         // float16/bfloat16 inputs are cast up to float32
  Refuse,          // the op is an error under autocast (binary_cross_entropy: unsafe to autocast)
};
const char* autocast_policy_name(AutocastPolicy p);  // "lower precision", "float32", "refused"

// One row of the policy table (core/autocast.cpp; docs/dtypes.md reproduces it). An op not in the
// table runs in the dtype of its inputs, promoted as usual.
struct AutocastRule {
  const char* op;  // the op's name (gs::matmul, nn::functional::cross_entropy; nn::LayerNorm is layer_norm)
  AutocastPolicy policy;
};
// The whole table, in the order docs/dtypes.md lists it.
const AutocastRule* autocast_rules(size_t* count);
// The policy of `op`, or nullptr when the op is not in the table.
const AutocastRule* find_autocast_rule(std::string_view op);

// The RAII scope. `auto ac = gs::autocast(gs::kBFloat16);` turns autocast on for this thread until
// `ac` is destroyed; `gs::autocast(dtype, false)` turns it off for a region (an unstable op) inside
// an enabled one. Nested guards restore the state they found. The dtype must be float16 or
// bfloat16 (anything else is an error, enabled or not).
class [[nodiscard]] AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
};
[[nodiscard]] inline AutocastGuard autocast(DType dtype, bool enabled = true) { return AutocastGuard(dtype, enabled); }

// This thread's state: whether autocast is on, and its dtype (bfloat16 when no guard set one).
bool autocast_enabled();
DType autocast_dtype();

namespace detail {
// Used at the entry of each op of the table: applies `op`'s policy to its inputs and turns
// autocast off until destroyed, so the op's own inner ops (linear's matmul, a loss's
// log_softmax) are not cast again. Throws for a Refuse op. Construct only when
// autocast_enabled().
class AutocastScope {
 public:
  explicit AutocastScope(const char* op);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;
  // The input as the policy wants it: a differentiable to(dtype) of a floating tensor, the
  // tensor itself otherwise (undefined, integer, bool, float64, or already of that dtype).
  Tensor cast(const Tensor& t) const;

 private:
  const char* op_;
  AutocastPolicy policy_;
  DType dtype_;
};
// Turns autocast off on this thread until destroyed (the backward pass runs under one: each
// gradient op runs in the dtype its forward op ran in).
class AutocastSuspend {
 public:
  AutocastSuspend();
  ~AutocastSuspend();
  AutocastSuspend(const AutocastSuspend&) = delete;
  AutocastSuspend& operator=(const AutocastSuspend&) = delete;

 private:
  bool prev_;
};
// Whether the backward of a cast from float32 to 16 bits may round its gradient through the 16-bit
// dtype in float32, in one pass (core/autograd.cpp; the same bits as rounding it to 16 bits and
// widening it back). On by default; process-wide. Off, every cast's gradient is rounded to 16 bits
// and widened back: the reference the tests compare the fused path with.
void set_cast_backward_fused(bool enabled);
bool cast_backward_fused();

// The 16-bit copy autocast keeps of a float32 parameter (a leaf that requires grad, on the CPU,
// covering its storage), held by the parameter's storage (Storage::low_copy). A cast of the
// parameter reuses it while neither has changed since it was made, instead of rounding the
// parameter again; and an optimizer's fused step rounds the parameter's new values into it as it
// computes them (core/optim_step.h, RoundedCopy), so that a training step's casts of the weights
// cost no pass of their own. It costs half the parameter's bytes, for the parameter's lifetime.
struct LowPrecisionCopy {
  Tensor copy;              // float16/bfloat16, contiguous, the parameter's shape
  uint64_t source_version;  // the parameter storage's version the values were rounded from
  uint64_t copy_version;    // the copy's storage version then (an in-place op on a cast's output moves it)
};
// The copy of p that an optimizer may round p's next values into: one that holds p's values now
// and that nothing but p's storage holds (no autograd graph, no tensor of the user's); else null.
LowPrecisionCopy* refreshable_copy(const Tensor& p);
// Whether casts keep and reuse these copies. On by default; process-wide. Off, every cast rounds
// the parameter again: the reference the tests compare with.
void set_autocast_copies(bool enabled);
bool autocast_copies();
}  // namespace detail

}  // namespace gradsleuth
