// HostCopyGuard and DtypeGuard (see host_copy.h).
#include "debug/checks/host_copy.h"

#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace gradsleuth::debug {

HostCopyGuard::HostCopyGuard(nn::Module& module, const char* who) : module_(module) {
  std::vector<std::pair<std::string, Device>> where;
  for (auto& [n, p] : module.named_parameters()) where.emplace_back(n, p.device());
  for (auto& [n, b] : module.named_buffers()) where.emplace_back(n, b.device());
  const std::pair<std::string, Device>* other = nullptr;  // the first tensor off the CPU
  for (const auto& w : where)
    if (!w.second.is_cpu()) {
      other = &w;
      break;
    }
  if (!other) return;
  for (const auto& w : where)
    GS_CHECK(w.second == other->second, who, "the module's tensors are on more than one device ('", other->first,
             "' on ", other->second.str(), ", '", w.first, "' on ", w.second.str(),
             "); move the whole model at once with model->to(device) (check M11)");
  device_ = other->second;
  for (Tensor& p : module.parameters()) grads_.emplace_back(p, p.grad());
  module.to(kCPU);  // (clears every .grad: they are put back by restore())
  moved_ = true;
}

void HostCopyGuard::restore() {
  if (!moved_) return;
  moved_ = false;
  module_.to(device_);
  for (auto& [p, g] : grads_) p.set_grad(g);
  grads_.clear();
}

HostCopyGuard::~HostCopyGuard() noexcept(false) {
  if (std::uncaught_exceptions() > exceptions_) {
    // The check is unwinding with its own error, the one to report: a failed move back
    // cannot replace it (that would terminate).
    try {
      restore();
    } catch (...) {
    }
    return;
  }
  restore();  // a failure here is reported: the model must not stay on the CPU silently
}

DtypeGuard::DtypeGuard(nn::Module& module, DType dtype) : module_(module) {
  for (Tensor& p : module.parameters()) grads_.emplace_back(p, p.grad());
  for (auto& [n, p] : module.named_parameters())
    if (p.is_floating_point() && p.dtype() != dtype) saved_.emplace_back(n, p.detach().clone());
  for (auto& [n, b] : module.named_buffers())
    if (b.is_floating_point() && b.dtype() != dtype) saved_.emplace_back(n, b.detach().clone());
  try {
    module.to(dtype);
  } catch (...) {
    restore();
    throw;
  }
}

void DtypeGuard::restore() {
  for (auto& [n, v] : saved_) module_.set_tensor(n, v);
  saved_.clear();
  for (auto& [p, g] : grads_) p.set_grad(g);
  grads_.clear();
}

DtypeGuard::~DtypeGuard() {
  try {
    restore();
  } catch (...) {
  }
}

}  // namespace gradsleuth::debug
