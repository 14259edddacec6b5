// M11 dtypes and devices of a forward (see model_checks.h).
#include "debug/checks/model/model_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/hooks.h"
#include "debug/checks/model/behaviour.h"
#include "debug/checks/model/model_util.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "optim/adam.h"

namespace gradsleuth::debug {

using namespace model_detail;

// ---- M11 -----------------------------------------------------------------------------------
std::vector<Finding> check_devices_dtypes(nn::Module& model, const Tensor& x, bool loader_batch) {
  std::vector<Finding> out;
  std::map<std::string, std::vector<std::string>> by_kind;  // "float32 on cpu" -> parameter names
  DType pdt = kFloat32;
  Device pdev = kCPU;
  bool first = true;
  for (auto& [n, p] : model.named_parameters()) {
    by_kind[std::string(dtype_name(p.dtype())) + " on " + p.device().str()].push_back(n);
    if (first) {
      pdt = p.dtype();
      pdev = p.device();
      first = false;
    }
  }
  if (by_kind.size() > 1) {
    Finding f;
    f.check = "M11";
    f.severity = Severity::Warning;
    std::string kinds;
    for (auto& [k, v] : by_kind) kinds += (kinds.empty() ? "" : "; ") + k + ": " + v[0] + (v.size() > 1 ? ", ..." : "");
    f.title = "the model's parameters have mixed dtypes/devices: " + kinds;
    f.parameter = by_kind.begin()->second[0];
    f.evidence = {{"distinct dtype/device combinations", static_cast<double>(by_kind.size()), "> 1 warns"}};
    f.cause = "part of the model was converted (to(kFloat64), cuda()) and part was not";
    f.fix = "convert the whole model at once: model->to(dtype) / model->to(device)";
    out.push_back(std::move(f));
  }
  if (x.defined() && !first) {
    if (x.device() != pdev) {
      Finding f;
      f.check = "M11";
      f.severity = Severity::Error;
      f.title = "the input is on " + x.device().str() + " but the parameters are on " + pdev.str();
      f.shape = shape_of(x);
      f.cause = "the batch was not moved to the model's device";
      f.fix = "move the batch: x = x.to(device) (and the labels)";
      out.push_back(std::move(f));
    }
    const bool converted_in_loop = loader_batch && x.dtype() == kFloat32 && is_reduced_float(pdt);
    if (x.is_floating_point() && x.dtype() != pdt && !converted_in_loop) {
      Finding f;
      f.check = "M11";
      f.severity = Severity::Warning;
      f.title = std::string("the input is ") + dtype_name(x.dtype()) + " but the model's parameters are " +
                dtype_name(pdt) + ": every layer computes in " + dtype_name(promote_types(x.dtype(), pdt));
      f.shape = shape_of(x);
      f.evidence = {{"input bytes per value", static_cast<double>(dtype_size(x.dtype())), ""},
                    {"parameter bytes per value", static_cast<double>(dtype_size(pdt)), ""}};
      f.cause = std::string(x.dtype() == kFloat64
                                ? "data loaded as float64 (NumPy's default) into a float32 model: "
                                  "type promotion makes each op compute in float64, twice the "
                                  "memory, slower arithmetic (float64 GEMM runs at about half the float32 rate) and "
                                  "outputs that come back float64"
                                : "data in a lower precision than the model");
      f.fix = std::string("convert the data once, where it is loaded: x.to(gs::") +
              (pdt == kFloat32 ? "kFloat32" : "kFloat64") + ")";
      out.push_back(std::move(f));
    }
  }
  return out;
}

// ---- M11 during training (the monitor's run check): the first forward's input -------------------
namespace {
class DevicesRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "M11"; }
  uint32_t events() const override { return RunEvent::Forward; }
  void forward(RunContext& c, const Tensor& x) override {
    if (checked_ || !x.defined()) return;
    checked_ = true;
    c.add_all(check_devices_dtypes(c.model, x));
    c.note_ran("M11");
  }

 private:
  bool checked_ = false;
};
}  // namespace

std::unique_ptr<RunCheck> make_devices_run_check(const MonitorOptions&) { return std::make_unique<DevicesRunCheck>(); }

}  // namespace gradsleuth::debug
