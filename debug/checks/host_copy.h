// HostCopyGuard: a device module on the CPU for the length of a check. Used by the model
// checks (model_checks.h, M13), the behavioural probes (behaviour.h, M13's whole-model check)
// and the anomaly checks (anomaly.h, M18). DtypeGuard: a module in another floating dtype (M18, M30).
// host_floats: a tensor's values on the host (M28's range watch, M18, M30).
#pragma once
#include <exception>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/module.h"

namespace gradsleuth::debug {

// A tensor's values as float32 on the host (a detached, contiguous copy).
inline std::vector<float> host_floats(const Tensor& t) { return t.detach().to(kFloat32).contiguous().to_vector<float>(); }

// For the checks that perturb or round values one element at a time through host pointers
// (M13's central differences, M18's half-precision rounding): moves a module that lives on a
// device to the CPU for the guard's lifetime, and puts it back afterwards (its parameters and
// buffers on their device again, exactly, and every parameter's .grad), also when the check
// throws. Module::to moves in place, so handles held elsewhere (an optimizer, hooks) stay valid.
// A module already on the CPU is not touched. A module whose tensors are on more than one
// device is refused: it cannot run as it is, and moving it back would change it.
class HostCopyGuard {
 public:
  HostCopyGuard(nn::Module& module, const char* who);
  ~HostCopyGuard() noexcept(false);  // throws only when moving back fails outside unwinding
  HostCopyGuard(const HostCopyGuard&) = delete;
  HostCopyGuard& operator=(const HostCopyGuard&) = delete;
  bool moved() const { return moved_; }
  Device device() const { return device_; }  // where the module lives (kCPU when not moved)
  void restore();                            // back to the device now (idempotent)

 private:
  nn::Module& module_;
  Device device_ = kCPU;
  bool moved_ = false;
  std::vector<std::pair<Tensor, Tensor>> grads_;
  int exceptions_ = std::uncaught_exceptions();  // in flight at construction
};

// For the checks that run a model in another precision (M18 in float16, M30 in float32): converts
// every floating parameter and buffer to `dtype` for the guard's lifetime, and puts back each one's
// own dtype and exact values (and every parameter's .grad) afterwards, also when the check throws.
// Conversion is in place (Module::set_tensor), so handles held elsewhere stay valid.
class DtypeGuard {
 public:
  DtypeGuard(nn::Module& module, DType dtype);
  ~DtypeGuard();
  DtypeGuard(const DtypeGuard&) = delete;
  DtypeGuard& operator=(const DtypeGuard&) = delete;
  void restore();  // the original dtypes and values now (idempotent)

 private:
  nn::Module& module_;
  std::vector<std::pair<std::string, Tensor>> saved_;  // dotted name, a copy of the original value
  std::vector<std::pair<Tensor, Tensor>> grads_;
};

}  // namespace gradsleuth::debug
