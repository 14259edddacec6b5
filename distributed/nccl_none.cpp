// Built without NCCL: collectives on CUDA tensors are a clear error (see nccl.h), never a
// silent copy through the host. The message names the op, the tensor and its device, why this
// build has no NCCL (GS_NCCL_FOUND_NOT_LINKED: NCCL was found but the CUDA tensors programs make
// come from the CPU emulator, or NCCL/nvcc were not found at all) and the two ways out.
#include "distributed/nccl.h"

#ifndef GS_NCCL_FOUND_NOT_LINKED
#define GS_NCCL_FOUND_NOT_LINKED 0
#endif

namespace gradsleuth::dist::detail {

namespace {
[[noreturn]] void no_nccl(const char* op, const Tensor& t) {
  const char* why = GS_NCCL_FOUND_NOT_LINKED
                        ? "NCCL was found, but gradsleuth_dist links it only when programs use the nvcc-built CUDA "
                          "backend (a GPU seen at configure time, or GRADSLEUTH_KERNELS_ON=GPU); in this build CUDA "
                          "tensors come from the CPU emulator, which NCCL cannot reach"
                        : "this build of gradsleuth_dist has no NCCL (it needs nvcc's CUDA backend, MPI and "
                          "nccl.h/libnccl at configure time)";
  GS_FAIL(op, t.str(), " lives on ", t.device().str(), ", which needs NCCL: ", why,
          ". Move the tensor to the CPU for the collective (c = t.cpu(), the collective on c, then t.copy_(c)), or "
          "configure on a machine with a GPU, nvcc and NCCL (cmake -DGRADSLEUTH_KERNELS_ON=GPU) so that CUDA "
          "tensors go through NCCL.");
}
}  // namespace

bool nccl_built() { return false; }
void nccl_all_reduce(ProcessGroup&, Tensor& t, ReduceOp) { no_nccl("dist::all_reduce", t); }
void nccl_broadcast(ProcessGroup&, Tensor& t, int) { no_nccl("dist::broadcast", t); }
Tensor nccl_all_gather(ProcessGroup&, const Tensor& t) { no_nccl("dist::all_gather", t); }

}  // namespace gradsleuth::dist::detail
