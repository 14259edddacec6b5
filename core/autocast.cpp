// Autocast: the per-op policy table, the thread-local state and the casts at an op's entry.
#include "core/autocast.h"

#include <atomic>
#include <cstring>
#include <mutex>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/error.h"
#include "core/observer.h"
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

namespace {

std::atomic<bool> g_autocast_copies{true};

// p is a float32 parameter on the CPU that fills its storage: the kind autocast keeps a copy of.
bool keeps_copy(const Tensor& p) {
  return p.dtype() == kFloat32 && p.is_leaf() && p.requires_grad() && p.device().is_cpu() && p.is_contiguous() &&
         p.offset() == 0 && p.nbytes() == p.storage()->nbytes();
}

// Whether c holds p's values now, rounded to `to`.
bool current(const LowPrecisionCopy& c, const Tensor& p, DType to) {
  return c.copy.dtype() == to && c.copy.shape() == p.shape() && c.source_version == p.storage()->version() &&
         c.copy.storage()->version() == c.copy_version;
}

// One lock for every parameter's copy: threads may run forwards of one model at once (the
// casts only read the parameter); a cast holds it for one lookup, or one rounding.
std::mutex g_copies_lock;

// p.to(to), through p's kept copy: reused when current, else rounded again (into the same storage
// when nothing else holds it). The cast is recorded as to_dtype, as Tensor::to records it.
Tensor cast_through_copy(const Tensor& p, DType to) {
  std::unique_lock lock(g_copies_lock);
  std::shared_ptr<LowPrecisionCopy>& kept = p.storage()->low_copy;
  if (!kept || !current(*kept, p, to)) {
    const bool reuse = kept && kept->copy.dtype() == to && kept->copy.shape() == p.shape() &&
                       kept->copy.storage().use_count() == 1 && kept.use_count() == 1;
    if (!reuse) {
      kept = std::make_shared<LowPrecisionCopy>();
      kept->copy = empty(p.shape(), TensorOptions(to).device(p.device()));
    }
    backend_of(p).copy(kept->copy, p);
    kept->source_version = p.storage()->version();
    kept->copy_version = kept->copy.storage()->version();
  }
  Tensor out = detail::make_alias(kept->copy, p.shape(), p.strides(), 0);
  lock.unlock();
  if (needs_grad(p))
    record("to_dtype", out, {&p}, [](const Tensor& g, Node&) { return tensor_list{g.to(kFloat32)}; });
  notify_op("to_dtype", {p}, out);
  return out;
}

}  // namespace

Tensor AutocastScope::cast(const Tensor& t) const {
  if (!t.defined() || !t.is_floating_point() || t.dtype() == kFloat64) return t;
  const DType to = policy_ == AutocastPolicy::LowerPrecision ? dtype_ : kFloat32;
  if (t.dtype() == to) return t;
  if (is_reduced_float(to) && keeps_copy(t) && autocast_copies()) return cast_through_copy(t, to);
  return t.to(to);
}

LowPrecisionCopy* refreshable_copy(const Tensor& p) {
  if (!p.defined() || !p.storage()) return nullptr;
  std::lock_guard lock(g_copies_lock);
  LowPrecisionCopy* c = p.storage()->low_copy.get();
  if (c == nullptr || !keeps_copy(p) || !current(*c, p, c->copy.dtype()) || c->copy.storage().use_count() != 1 ||
      p.storage()->low_copy.use_count() != 1)
    return nullptr;
  return c;
}

void set_autocast_copies(bool enabled) { g_autocast_copies.store(enabled, std::memory_order_relaxed); }
bool autocast_copies() { return g_autocast_copies.load(std::memory_order_relaxed); }

AutocastSuspend::AutocastSuspend() : prev_(t_state.enabled) { t_state.enabled = false; }
AutocastSuspend::~AutocastSuspend() { t_state.enabled = prev_; }

namespace {
std::atomic<bool> g_cast_backward_fused{true};
}
void set_cast_backward_fused(bool enabled) { g_cast_backward_fused.store(enabled, std::memory_order_relaxed); }
bool cast_backward_fused() { return g_cast_backward_fused.load(std::memory_order_relaxed); }

}  // namespace detail

}  // namespace gradsleuth
