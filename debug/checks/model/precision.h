// Reduced precision op by op: M29 names the first op whose 16-bit result (forward) or gradient
// (backward) left float16/bfloat16's range; M30 runs one batch in the 16-bit setting and in float32
// and names the op whose result differs most (docs/checks.md, M29 and M30).
//
//   debug::RangeTrace trace;                    // M29
//   trace.attach(*model);                       // names the module each op ran in
//   { auto on = trace.enable(); auto ac = autocast(kFloat16); loss = ce((*model)(x), y); }
//   loss.backward();                            // (the trace is still enabled here in real use)
//   report.add(trace.findings());
//
//   debug::PrecisionComparison c = debug::compare_precision(*model, x, loss_of, {kFloat16, true});  // M30
//   std::cout << c.str();                       // the ops, worst first
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/observer.h"
#include "debug/checks/hooks.h"
#include "debug/checks/model/anomaly.h"
#include "debug/evidence/finding.h"

namespace gradsleuth::debug {

// Where an op was recorded: its position among the forward's ops (1-based, the dtype casts of
// autocast counted too), its name and the module it ran in.
struct OpSite {
  int64_t index = 0;
  std::string op;
  std::string module;
};

// Maps the backward nodes of a forward to the op that recorded them (an OpObserver's helper): an
// op's node is found from its output, at the op's report or at the next one.
class OpSites {
 public:
  void clear();
  // A forward op reported with its output; returns its site.
  const OpSite& record(const char* op, const Tensor& out, const std::string& module);
  // The site that recorded `node`; nullptr when unknown.
  const OpSite* of(const Node* node);
  int64_t count() const { return count_; }

 private:
  void resolve();
  std::vector<OpSite> sites_;
  std::vector<std::pair<Tensor, size_t>> pending_;  // outputs whose node was not made yet
  std::unordered_map<const Node*, size_t> nodes_;
  int64_t count_ = 0;
};

// ---- M29 ---------------------------------------------------------------------------------------
struct RangeTraceOptions {
  // An op's 16-bit result has left the range at the bottom when more than this share of its mass
  // (the sum of |x|; for a cast to 16 bits, of the values it was given) lies below 8 x the dtype's
  // smallest subnormal: flushed, or in the lowest three octaves above zero.
  double underflow_share = 0.10;
  bool forward = true, backward = true;
  // Hold an overflow until confirm_step() says it mattered: under a loss scaler a step whose
  // gradients overflow is skipped (and the scale lowered), which is the scaler working, and an inf
  // that a later op masks (a ReLU's backward, 1 / inf = 0) changes nothing. The monitor confirms a
  // forward overflow when the step's loss or gradients turn non-finite, a backward one when the
  // optimizer is about to step with non-finite gradients; discard_step() drops both.
  bool hold_overflow = false;
};

class RangeTrace : public OpObserver {
 public:
  explicit RangeTrace(RangeTraceOptions o = {}) : o_(o) {}
  void attach(nn::Module& model) { tracker_.attach(model); }
  void detach() { tracker_.detach(); }
  [[nodiscard]] std::unique_ptr<Scope> enable() { return std::make_unique<Scope>(this, ObserverScope::ThisThread); }
  void set_active(bool on) { active_ = on; }
  void set_step(int64_t step) { step_ = step; }
  // The held forward and/or backward overflow of this step is a finding.
  void confirm_step(bool forward, bool backward);
  void discard_step();  // the held overflows are dropped
  bool holding() const { return held_forward_.has_value() || held_.has_value(); }
  // A new forward begins: ops are numbered from 1 again (the monitor calls it at each forward).
  void begin_forward();
  // At most one forward and one backward finding: the first op of each that left the range.
  std::vector<Finding> findings() const;
  bool found() const { return forward_.has_value() || backward_.has_value(); }
  // The forward ops seen since the last clear (for evidence and tests).
  int64_t ops_seen() const { return sites_.count(); }
  void clear();

  void on_op(const OpEvent& e) override;
  void on_backward(const BackwardEvent& e) override;

 private:
  RangeTraceOptions o_;
  ModuleTracker tracker_;
  OpSites sites_;
  bool active_ = true;
  int64_t step_ = -1;
  std::optional<Finding> forward_, backward_, held_forward_, held_;
};

// ---- M30 ---------------------------------------------------------------------------------------
// The 16-bit setting to compare with float32: autocast (the parameters stay as they are, the
// forward runs inside gs::autocast(dtype)) or the model's parameters in `dtype` (the input cast to it).
struct PrecisionSetting {
  DType dtype = kFloat16;
  bool autocast = true;
};

// One op (forward) or one gradient a backward node produced, compared across the two runs.
struct OpComparison {
  OpSite site;  // where the forward recorded it (for a gradient: the op whose node made it)
  bool backward = false;
  size_t input = 0;        // for a gradient: which input of the node
  DType dtype = kFloat32;  // its dtype in the 16-bit run
  std::string shape;
  double rel_error = 0.0;  // ||low - f32|| / ||f32|| over the elements (inf: non-finite in 16 bits only)
  double max_abs = 0.0;    // the largest |value| in float32
  double low_max_abs = 0.0;
};

struct PrecisionComparison {
  PrecisionSetting setting;
  std::vector<OpComparison> ops;  // in recording order: the forward's ops, then the backward's gradients
  // The sequences matched op for op (dtype casts left out); otherwise the ops up to the first
  // mismatch are compared and `note` says where they diverged.
  bool matched = true;
  std::string note;
  double loss_f32 = 0.0, loss_low = 0.0;  // when a loss was given
  // The op with the largest rel_error (the first within 10% of it: the ops after an op inherit its
  // error); nullptr when nothing was compared.
  const OpComparison* worst() const;
  std::string str(size_t rows = 10) const;
};

// Runs model(x) (and loss(output).backward() when a loss is given) once in the 16-bit setting and
// once in float32 on the same batch, records every op's result and every gradient a backward node
// produced, and compares them op by op. The model's parameters, buffers and .grad are left as they
// were. x is the batch as float32 (or in the parameters' dtype). Run it in eval mode when the model has
// dropout: the two runs must compute the same function.
PrecisionComparison compare_precision(nn::Module& model, const Tensor& x, const LossOf& loss,
                                      const PrecisionSetting& setting);

struct PrecisionCompareOptions {
  // An op whose 16-bit result is this far from float32 (relative, over its elements) has lost most
  // of what it computes: warns.
  double warn_rel_error = 0.5;
};
// M30's findings from a comparison: a warning naming the op whose relative error is largest when it
// is above the option (or non-finite only in 16 bits), else one info finding naming it.
std::vector<Finding> precision_findings(const PrecisionComparison& c, const PrecisionCompareOptions& o = {});
// Both: compare_precision, then precision_findings.
std::vector<Finding> check_precision_ops(nn::Module& model, const Tensor& x, const LossOf& loss,
                                         const PrecisionSetting& setting, const PrecisionCompareOptions& o = {});

}  // namespace gradsleuth::debug
