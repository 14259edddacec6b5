// The NCCL half of ProcessGroup (see nccl.h): collectives on CUDA tensors, on the legacy default
// stream the CUDA backend's kernels run on, synchronised before returning (so a collective is
// ordered after the kernels that produced its input and before those that read its result).
// Built only with the nvcc build of the CUDA backend and NCCL; it cannot run without a GPU.
// One communicator per ProcessGroup, made on first use: rank 0's ncclUniqueId travels to the
// other ranks through an MPI broadcast. Each rank uses its current CUDA device: with several
// GPUs per machine, give each rank its own (CUDA_VISIBLE_DEVICES per rank, docs/distributed.md).
// The watchdog (ProcessGroup::set_timeout) does not cover NCCL calls.
#include "distributed/nccl.h"

#include <cstring>

#include <cuda_runtime.h>
#include <nccl.h>

#include "core/autograd.h"
#include "core/ops.h"

namespace gradsleuth::dist::detail {

namespace {

void check_nccl(ncclResult_t rc, const char* op, const ProcessGroup& pg) {
  if (rc != ncclSuccess) GS_FAIL(op, "NCCL error on ", pg.where(), ": ", ncclGetErrorString(rc));
}
void check_cuda(cudaError_t rc, const char* op, const ProcessGroup& pg) {
  if (rc != cudaSuccess) GS_FAIL(op, "CUDA error on ", pg.where(), ": ", cudaGetErrorString(rc));
}

ncclComm_t comm_for(ProcessGroup& pg) {
  static ProcessGroup* owner = nullptr;
  static ncclComm_t comm = nullptr;
  if (comm) {
    GS_CHECK(owner == &pg, "dist (NCCL)", "only the world group has an NCCL communicator");
    return comm;
  }
  ncclUniqueId id;
  static_assert(sizeof id % sizeof(int64_t) == 0);
  Tensor buf = zeros({static_cast<int64_t>(sizeof id / sizeof(int64_t))}, kInt64);
  if (pg.rank() == 0) {
    check_nccl(ncclGetUniqueId(&id), "dist (NCCL)", pg);
    std::memcpy(buf.raw_data(), &id, sizeof id);
  }
  pg.broadcast(buf, 0);
  std::memcpy(&id, buf.raw_data(), sizeof id);
  check_nccl(ncclCommInitRank(&comm, pg.world_size(), id, pg.rank()), "dist (NCCL)", pg);
  owner = &pg;
  return comm;
}

ncclDataType_t nccl_type(DType t, const char* op) {
  switch (t) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Int64: return ncclInt64;
    case DType::Bool: return ncclUint8;
    // 16-bit floats natively: NCCL reduces them in their own type (docs/distributed.md, "16-bit tensors").
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16:
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
      return ncclBfloat16;
#else
      break;
#endif
  }
  GS_FAIL(op, "no NCCL collective for ", dtype_name(t), " tensors with this NCCL (", NCCL_MAJOR, ".", NCCL_MINOR,
          "; bfloat16 needs 2.10 or later); convert with .to(gs::kFloat32) first, or update NCCL");
}

void write_back(Tensor& t, const Tensor& buf, const char* op) {
  if (buf.storage() == t.storage()) {
    t.storage()->bump_version(op);
    return;
  }
  NoGradGuard ng;
  t.copy_(buf);
}

}  // namespace

bool nccl_built() { return true; }

void nccl_all_reduce(ProcessGroup& pg, Tensor& t, ReduceOp op) {
  Tensor buf = t.is_contiguous() ? t : t.contiguous();
  const ncclRedOp_t nop = op == ReduceOp::Max ? ncclMax : (op == ReduceOp::Avg ? ncclAvg : ncclSum);
  check_nccl(ncclAllReduce(buf.unsafe_data(), buf.unsafe_data(), static_cast<size_t>(buf.numel()),
                           nccl_type(t.dtype(), "dist::all_reduce"), nop, comm_for(pg), cudaStreamLegacy),
             "dist::all_reduce", pg);
  check_cuda(cudaStreamSynchronize(cudaStreamLegacy), "dist::all_reduce", pg);
  write_back(t, buf, "dist::all_reduce");
}

void nccl_broadcast(ProcessGroup& pg, Tensor& t, int root) {
  Tensor buf = t.is_contiguous() ? t : t.contiguous();
  check_nccl(ncclBroadcast(buf.unsafe_data(), buf.unsafe_data(), static_cast<size_t>(buf.numel()),
                           nccl_type(t.dtype(), "dist::broadcast"), root, comm_for(pg), cudaStreamLegacy),
             "dist::broadcast", pg);
  check_cuda(cudaStreamSynchronize(cudaStreamLegacy), "dist::broadcast", pg);
  write_back(t, buf, "dist::broadcast");
}

Tensor nccl_all_gather(ProcessGroup& pg, const Tensor& t) {
  Tensor src = t.detach().contiguous();
  Shape s{pg.world_size()};
  for (int64_t d : t.shape()) s.push_back(d);
  Tensor out = empty(s, TensorOptions(t.dtype()).device(t.device()));
  check_nccl(ncclAllGather(src.unsafe_data(), out.unsafe_data(), static_cast<size_t>(src.numel()),
                           nccl_type(t.dtype(), "dist::all_gather"), comm_for(pg), cudaStreamLegacy),
             "dist::all_gather", pg);
  check_cuda(cudaStreamSynchronize(cudaStreamLegacy), "dist::all_gather", pg);
  return out;
}

}  // namespace gradsleuth::dist::detail
