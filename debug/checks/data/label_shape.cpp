// D6 label shape against the loss (see data_checks.h).
#include "debug/checks/data/data_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/data/data_util.h"
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

using namespace data_detail;

// ---- D6 label shape vs loss -------------------------------------------------------------

std::vector<Finding> check_label_shape(const Tensor& prediction, const Tensor& target) {
  GS_CHECK(prediction.defined() && target.defined(), "check_label_shape", "needs a defined prediction and target");
  const Shape& p = prediction.shape();
  const Shape& t = target.shape();
  if (p == t) return {};
  // Classification: logits (B, C, ...) against class indices (B, ...), C >= 2.
  if (prediction.is_floating_point() && is_integral(target.dtype()) && p.size() == t.size() + 1 && p.size() >= 2 &&
      p[0] == t[0] && p[1] >= 2 && std::equal(p.begin() + 2, p.end(), t.begin() + 1))
    return {};
  Finding f = make("D6", Severity::Warning, "");
  f.shape = "prediction " + shape_str(p) + ", target " + shape_str(t);
  Shape b;
  if (!try_broadcast(p, t, b)) {
    f.severity = Severity::Error;
    f.title = "prediction " + shape_str(p) + " and target " + shape_str(t) + " cannot be broadcast: the loss will fail";
    f.evidence = {{"prediction elements", static_cast<double>(numel_of(p)), ""},
                  {"target elements", static_cast<double>(numel_of(t)), "must match the prediction's"}};
    f.cause =
        "the target has a different layout from the model's output (a flattened image, a missing or extra "
        "dim, one-hot vs class indices, the wrong number of outputs)";
    f.fix = "reshape the target or change the model's last layer so both have the same shape";
    return {f};
  }
  const int64_t pn = numel_of(p), tn = numel_of(t), bn = numel_of(b);
  f.evidence = {{"prediction elements", static_cast<double>(pn), ""},
                {"target elements", static_cast<double>(tn), ""},
                {"elements after broadcasting", static_cast<double>(bn), "more than either input warns"}};
  if (bn <= std::max(pn, tn)) {
    f.severity = Severity::Info;
    f.title = "prediction " + shape_str(p) + " and target " + shape_str(t) + " differ; the smaller is broadcast to " +
              shape_str(b);
    f.fix = "fine if one target really serves every row; otherwise make the shapes equal";
    return {f};
  }
  f.title = "prediction " + shape_str(p) + " and target " + shape_str(t) + " broadcast to " + shape_str(b) +
            ": the loss would compare every prediction with every target";
  f.cause =
      "a (B, 1) output against (B) targets, or the reverse: the loss silently averages over the "
      "enlarged " +
      shape_str(b) +
      " grid, every prediction is pulled toward every target, and the model "
      "learns to predict the mean; the loss still goes down a little and nothing errors";
  f.fix = (p.size() > t.size() ? std::string("prediction.squeeze(-1)") : std::string("target.squeeze(-1)")) +
          " (or view both as (B, 1)) so prediction and target have the same shape before the loss";
  return {f};
}

// ---- D6 during training: an elementwise loss's prediction and target (the monitor's run check) --
namespace {
class LabelShapeRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "D6"; }
  uint32_t events() const override { return RunEvent::LossInput; }
  void loss_input(RunContext& c, nn::Loss& l, const Tensor& input, const Tensor& target) override {
    if (!loss_type::elementwise(l)) return;
    if (!input.defined() || !target.defined() || input.shape() != target.shape())
      c.add_all(check_label_shape(input, target));
  }
};
}  // namespace

std::unique_ptr<RunCheck> make_label_shape_run_check(const MonitorOptions&) {
  return std::make_unique<LabelShapeRunCheck>();
}

}  // namespace gradsleuth::debug
