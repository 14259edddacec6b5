// Built without NCCL: collectives on CUDA tensors are a clear error (see nccl.h).
#include "dist/nccl.h"

namespace gradsleuth::dist::detail {

namespace {
[[noreturn]] void no_nccl(const char* op, const Tensor& t) {
  GS_FAIL(op, t.str(), " lives on ", t.device().str(), ", but this build of gradsleuth_dist has no NCCL (it needs "
          "the nvcc-built CUDA backend and NCCL at configure time). Move the tensor to the CPU first "
          "(t.cpu(), then copy the result back), or rebuild where CMake finds nccl.h and libnccl.");
}
}  // namespace

bool nccl_built() { return false; }
void nccl_all_reduce(ProcessGroup&, Tensor& t, ReduceOp) { no_nccl("dist::all_reduce", t); }
void nccl_broadcast(ProcessGroup&, Tensor& t, int) { no_nccl("dist::broadcast", t); }
Tensor nccl_all_gather(ProcessGroup&, const Tensor& t) { no_nccl("dist::all_gather", t); }

}  // namespace gradsleuth::dist::detail
