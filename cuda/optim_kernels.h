// cuda/optim_kernels.h: the launchers of cuda/optim.cu, the fused optimizer steps on the device
// (Backend::sgd_step/adam_step/rmsprop_step; the element formulas are core/optim_step.h's).
// p, g and every state operand are contiguous, one floating dtype; unused state has data nullptr.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/optim_step.h"

namespace gradsleuth::cuda {

// One operand: the address of element 0 on the device (nullptr when the options leave it unused).
void sgd_step(DType t, int64_t n, void* p, const void* g, void* buf, const SgdStep& s);
void adam_step(DType t, int64_t n, void* p, const void* g, void* m, void* v, void* vmax, const AdamStep& s);
void rmsprop_step(DType t, int64_t n, void* p, const void* g, void* square_avg, void* grad_avg, void* buf,
                  const RmspropStep& s);

}  // namespace gradsleuth::cuda
