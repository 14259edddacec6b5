// GradScaler: dynamic loss scaling for mixed-precision training, with PyTorch's semantics
// (torch.amp.GradScaler). Docs: docs/optim.md, "GradScaler".
//
//   optim::GradScaler scaler;                       // scale 2^16, x2 after 2000 clean steps, x0.5 on inf/NaN
//   opt.zero_grad();
//   scaler.scale(loss).backward();                  // the gradients are scale x the true ones
//   scaler.unscale_(opt);                           // optional: true gradients now (before clipping)
//   optim::clip_grad_norm_(params, 1.0);
//   scaler.step(opt);                               // opt.step(), skipped when a gradient is inf/NaN
//   scaler.update();                                // back off after an overflow, grow after clean steps
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "core/tensor.h"
#include "optim/optimizer.h"

namespace gradsleuth::optim {

struct GradScalerOptions {
  GS_OPTIM_ARG(double, init_scale) = 65536.0;  // 2^16
  GS_OPTIM_ARG(double, growth_factor) = 2.0;   // > 1
  GS_OPTIM_ARG(double, backoff_factor) = 0.5;  // in (0, 1)
  GS_OPTIM_ARG(int64_t, growth_interval) = 2000;
  GS_OPTIM_ARG(bool, enabled) = true;  // false: scale() returns the loss, step() is opt.step(), the rest do nothing
};

// A parameter whose gradient held NaN or Inf when it was unscaled.
struct NonFiniteGrad {
  std::string optimizer;  // the optimizer's name ("Adam")
  size_t group = 0, index = 0;
  Tensor param;  // the parameter itself (a handle: names can be looked up by identity)
  int64_t nan = 0, inf = 0;
};

// What one update() did, for listeners (the debug module's O10 check).
struct ScalerUpdate {
  int64_t index = 0;  // 1-based count of update() calls
  double scale_before = 0.0, scale_after = 0.0;
  int64_t growth_tracker = 0;            // clean steps in a row after this update
  bool found_inf = false;                // some gradient was inf/NaN: the scale backed off
  bool explicit_scale = false;           // update(new_scale) set it
  std::vector<std::string> skipped;      // optimizers whose step() was skipped (by name)
  int64_t stepped = 0;                   // optimizer steps taken through step() since the last update
  std::vector<NonFiniteGrad> nonfinite;  // the parameters whose gradient was inf/NaN
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions o = {});
  ~GradScaler();
  GradScaler(const GradScaler&) = delete;
  GradScaler& operator=(const GradScaler&) = delete;

  // loss x the current scale, in the loss's dtype (the loss itself when disabled).
  Tensor scale(const Tensor& loss);
  // Divides the gradients of opt's parameters by the scale, in place, and records whether any
  // is inf/NaN. At most once per optimizer between two update()s, and before step().
  void unscale_(Optimizer& opt);
  // unscale_(opt) unless already done, then opt.step() unless a gradient was inf/NaN. Returns
  // whether opt.step() ran. Once per optimizer between two update()s.
  bool step(Optimizer& opt);
  // After the step(s) of the iteration: scale x backoff_factor when any recorded gradient was
  // inf/NaN (and the clean-step count restarts), else after growth_interval clean steps in a row
  // scale x growth_factor (when that is finite in float32).
  void update();
  // Sets the scale to new_scale (> 0 and finite) instead.
  void update(double new_scale);

  // The scale (init_scale before the first scale(); 1 when disabled).
  double get_scale() const;
  bool is_enabled() const { return enabled_; }
  double get_growth_factor() const { return growth_factor_; }
  double get_backoff_factor() const { return backoff_factor_; }
  int64_t get_growth_interval() const { return growth_interval_; }
  int64_t get_growth_tracker() const { return initialised_ ? growth_tracker_ : init_growth_tracker_; }
  void set_growth_factor(double f);
  void set_backoff_factor(double f);
  void set_growth_interval(int64_t n);
  // True when scale() ran since the last update() and unscale_(opt) has not: opt's gradients
  // from this iteration's backward are still scaled.
  bool grads_scaled(const Optimizer& opt) const;

  // "scale" (float64), "growth_factor", "backoff_factor" (float64), "growth_interval",
  // "growth_tracker" (int64); empty when disabled (as PyTorch's). For nn::save_state.
  std::map<std::string, Tensor> state_dict() const;
  // Every key above, checked; nothing when disabled. An empty dict is an error (it came from a
  // disabled scaler).
  void load_state_dict(const std::map<std::string, Tensor>& state);

  // Listeners called at the end of every update() (the debug module attaches here).
  using UpdateHook = std::function<void(const GradScaler&, const ScalerUpdate&)>;
  size_t add_update_hook(UpdateHook h);
  void remove_hook(size_t id);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    const Optimizer* opt = nullptr;
    Stage stage = Stage::Ready;
    bool found_inf = false;
    bool skipped = false;
  };
  struct PendingClip {
    std::string op;
    std::unordered_set<const TensorImpl*> params;
  };
  PerOptimizer& state_of(const Optimizer& opt);
  const PerOptimizer* find_state(const Optimizer& opt) const;
  void check_scale_initialised(const char* op) const;
  void finish_update(double before, bool found_inf, bool explicit_scale);
  friend void note_gradient_transform(const std::vector<Tensor>& params, const char* op);
  void note_transform(const std::vector<Tensor>& params, const char* op);
  void check_pending_clips(const Optimizer& opt);

  bool enabled_ = true;
  double init_scale_ = 65536.0;
  double scale_ = 0.0;  // a float32 value (PyTorch keeps the scale in a float32 tensor)
  bool initialised_ = false;
  double growth_factor_ = 2.0, backoff_factor_ = 0.5;
  int64_t growth_interval_ = 2000;
  int64_t growth_tracker_ = 0;
  int64_t init_growth_tracker_ = 0;
  int64_t updates_ = 0;
  bool scaled_since_update_ = false;
  // The thread of the last scale(): only clipping on that thread is this scaler's
  // (note_gradient_transform), and another thread's scaler is never touched.
  std::atomic<std::thread::id> scaling_thread_{};
  std::vector<PerOptimizer> per_opt_;
  std::vector<NonFiniteGrad> nonfinite_;
  std::vector<PendingClip> pending_clips_;
  std::vector<std::string> clip_warned_;  // ops already warned about (once per op)
  struct Hook {
    size_t id;
    UpdateHook fn;
  };
  std::vector<Hook> hooks_;
  size_t next_id_ = 0;
};

// Called by clip_grad_norm_ / clip_grad_value_ before they change `params`' gradients: a live
// scaler that scaled this iteration's loss on this thread remembers the call, and when it unscales
// an optimizer holding those parameters it warns (check O10) that the clipping saw scaled gradients.
void note_gradient_transform(const std::vector<Tensor>& params, const char* op);

// The optimizer's and the scaler's state in one checkpoint map: opt.state_dict() as it is and
// scaler.state_dict() under "scaler." ("scaler.scale", ...).
//   nn::save_state(optim::training_state_dict(opt, scaler), "run/optim.ckpt");
inline constexpr const char* kScalerStatePrefix = "scaler.";
std::map<std::string, Tensor> training_state_dict(const Optimizer& opt, const GradScaler& scaler);
// Loads such a map: the "scaler." entries into the scaler, the rest into the optimizer. A map
// without them (written before the scaler was saved, or by a disabled one) loads the optimizer and
// leaves the scaler as it is; returns whether the scaler's state was loaded.
//   optim::load_training_state_dict(nn::load_state("run/optim.ckpt"), opt, scaler);
bool load_training_state_dict(const std::map<std::string, Tensor>& state, Optimizer& opt, GradScaler& scaler);

}  // namespace gradsleuth::optim
