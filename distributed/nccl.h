// The NCCL half of ProcessGroup: collectives on CUDA tensors. Internal to distributed/.
// Built from nccl.cpp when the CUDA backend (nvcc) and NCCL are found, else from
// nccl_none.cpp, whose functions raise a clear error naming the tensor and the fix.
#pragma once
#include "core/tensor.h"
#include "distributed/process_group.h"

namespace gradsleuth::dist::detail {

bool nccl_built();
// In place on every rank's CUDA tensor; blocking (the stream is synchronised before returning).
void nccl_all_reduce(ProcessGroup& pg, Tensor& t, ReduceOp op);
void nccl_broadcast(ProcessGroup& pg, Tensor& t, int root);
Tensor nccl_all_gather(ProcessGroup& pg, const Tensor& t);

}  // namespace gradsleuth::dist::detail
