// CPU backend, optimizer steps. A fused step is a tuned kernel only (fast/optim.cpp:
// one loop per parameter over core/optim_step.h's element update). Its reference is the
// optimizer's own formula in tensor ops (optim/sgd.cpp, adam.cpp, rmsprop.cpp), which the
// optimizer runs whenever these return false.
#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/fast.h"

namespace gradsleuth::cpu {

bool CpuBackend::sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStep& s) {
  return cpu_fast_kernels() && fast::sgd_step(p, g, buf, s);
}

bool CpuBackend::adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                           const AdamStep& s) {
  return cpu_fast_kernels() && fast::adam_step(p, g, m, v, vmax, s);
}

bool CpuBackend::rmsprop_step(const Tensor& p, const Tensor& g, const Tensor& square_avg, const Tensor& grad_avg,
                              const Tensor& buf, const RmspropStep& s) {
  return cpu_fast_kernels() && fast::rmsprop_step(p, g, square_avg, grad_avg, buf, s);
}

}  // namespace gradsleuth::cpu
