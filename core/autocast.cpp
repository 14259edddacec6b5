// Autocast: the per-op policy table, the thread-local state and the casts at an op's entry.
#include "core/autocast.h"

#include <atomic>
#include <cstring>

#include "core/error.h"
#include "core/tensor.h"

namespace gradsleuth {

namespace {

constexpr AutocastPolicy kLow = AutocastPolicy::LowerPrecision;
constexpr AutocastPolicy kF32 = AutocastPolicy::Float32;
constexpr AutocastPolicy kRefuse = AutocastPolicy::Refuse;

// THE table (PyTorch's autocast lists, for the ops gradsleuth has). docs/dtypes.md reproduces it
// row by row; tests/test_autocast.cpp compares the two.
constexpr AutocastRule kRules[] = {
    // Products: the bulk of the time, and safe in 16 bits (each output is a float32 sum, rounded once).
    {"matmul", kLow},
    {"linear", kLow},
    {"conv2d", kLow},
    // Range- or accumulation-sensitive: computed in float32.
    {"exp", kF32},
    {"log", kF32},
    {"pow", kF32},
    {"sum", kF32},
    {"mean", kF32},
    {"softmax", kF32},
    {"log_softmax", kF32},
    {"logsumexp", kF32},
    {"layer_norm", kF32},
    {"batch_norm", kF32},
    {"mse_loss", kF32},
    {"nll_loss", kF32},
    {"cross_entropy", kF32},
    {"binary_cross_entropy_with_logits", kF32},
    // Unsafe: log of probabilities that 16 bits round to 0 or 1.
    {"binary_cross_entropy", kRefuse},
};

struct State {
  bool enabled = false;
  DType dtype = kBFloat16;
};
thread_local State t_state;

}  // namespace

const char* autocast_policy_name(AutocastPolicy p) {
  switch (p) {
    case AutocastPolicy::LowerPrecision: return "lower precision";
    case AutocastPolicy::Float32: return "float32";
    case AutocastPolicy::Refuse: return "refused";
  }
  return "?";
}

const AutocastRule* autocast_rules(size_t* count) {
  *count = sizeof(kRules) / sizeof(kRules[0]);
  return kRules;
}

const AutocastRule* find_autocast_rule(std::string_view op) {
  for (const AutocastRule& r : kRules)
    if (op == r.op) return &r;
  return nullptr;
}

AutocastGuard::AutocastGuard(DType dtype, bool enabled) : prev_enabled_(t_state.enabled), prev_dtype_(t_state.dtype) {
  GS_CHECK(is_reduced_float(dtype), "autocast",
           "the autocast dtype must be float16 (gs::kFloat16) or bfloat16 (gs::kBFloat16), got ", dtype_name(dtype),
           ". For float32 everywhere, leave autocast off (or gs::autocast(gs::kBFloat16, false)).");
  t_state.enabled = enabled;
  t_state.dtype = dtype;
}

AutocastGuard::~AutocastGuard() {
  t_state.enabled = prev_enabled_;
  t_state.dtype = prev_dtype_;
}

bool autocast_enabled() { return t_state.enabled; }
DType autocast_dtype() { return t_state.dtype; }

namespace detail {

AutocastScope::AutocastScope(const char* op) : op_(op), dtype_(t_state.dtype) {
  const AutocastRule* rule = find_autocast_rule(op);
  GS_CHECK(rule != nullptr, "autocast", "internal error: op '", op, "' applies autocast but is not in its table");
  policy_ = rule->policy;
  if (policy_ == AutocastPolicy::Refuse)
    GS_FAIL(op, "is unsafe to autocast (autocast to ", dtype_name(dtype_),
            " is on): the log of probabilities that a 16-bit sigmoid rounded to exactly 0 or 1 loses the "
            "loss. Use nn::functional::binary_cross_entropy_with_logits (nn::BCEWithLogitsLoss) on the "
            "logits instead of sigmoid + binary_cross_entropy: it combines the two stably and runs in float32 "
            "under autocast. Or switch autocast off around it: { auto off = gs::autocast(gs::autocast_dtype(), "
            "false); loss = nn::functional::binary_cross_entropy(p.to(gs::kFloat32), y); }");
  t_state.enabled = false;
}

AutocastScope::~AutocastScope() { t_state.enabled = true; }

Tensor AutocastScope::cast(const Tensor& t) const {
  if (!t.defined() || !t.is_floating_point() || t.dtype() == kFloat64) return t;
  const DType to = policy_ == AutocastPolicy::LowerPrecision ? dtype_ : kFloat32;
  if (t.dtype() == to) return t;
  return t.to(to);
}

AutocastSuspend::AutocastSuspend() : prev_(t_state.enabled) { t_state.enabled = false; }
AutocastSuspend::~AutocastSuspend() { t_state.enabled = prev_; }

namespace {
std::atomic<bool> g_cast_backward_fused{true};
}
void set_cast_backward_fused(bool enabled) { g_cast_backward_fused.store(enabled, std::memory_order_relaxed); }
bool cast_backward_fused() { return g_cast_backward_fused.load(std::memory_order_relaxed); }

}  // namespace detail

}  // namespace gradsleuth
