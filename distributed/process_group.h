// ProcessGroup: the ranks of a data-parallel job and the collectives between them.
//
// One process per rank, started by an MPI launcher; the same program runs on every rank:
//
//   mpirun -np 2 build/bin/gradsleuth train --model mlp      (docs/distributed.md)
//
//   auto& pg = dist::ProcessGroup::world();   // rank 0..world_size()-1
//   dist::all_reduce: every rank passes a tensor of the same shape and dtype; afterwards
//   every rank holds the element-wise sum (or mean, or max) of all of them.
//
// Transport: CPU tensors go through MPI (OpenMPI or MPICH, whatever CMake found), CUDA tensors
// through NCCL when the library was built with it (the CUDA backend and NCCL were found);
// there is no home-made transport. float16/bfloat16 tensors travel in 16 bits: MPI through our
// own MPI_Op on a 2-byte type (each pair summed in float32 and rounded back), NCCL natively
// (ncclFloat16/ncclBfloat16); docs/distributed.md, "16-bit tensors". Without an MPI launcher
// (no mpirun in the environment), or in a build without MPI, world() is a world of one rank
// where every collective is the identity, so a program written for N ranks also runs as one
// process.
//
// Failure is loud, never a hang or a silent mix-up:
//  - every tensor collective first compares the ranks' shapes and dtypes (a small all-gather)
//    and raises the same error on every rank when they differ, naming the op, each rank's
//    tensor and the fix;
//  - every collective waits at most timeout() seconds (set_timeout, default 300, or the
//    environment variable GRADSLEUTH_DIST_TIMEOUT) and then raises an error naming the op and
//    the rank: a rank that died or went down another code path no longer freezes the job;
//  - an exception nobody catches on one rank ends the whole job (MPI_Abort) after printing
//    which rank failed and why, instead of leaving the other ranks blocked in a collective.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace gradsleuth::dist {

enum class ReduceOp { Sum, Avg, Max };
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", "max"

// The library was built with MPI (CMake found it). Without it every ProcessGroup is a world of 1.
bool mpi_available();
// The library was built with NCCL, so all_reduce/broadcast/all_gather accept CUDA tensors.
bool nccl_available();

class ProcessGroup {
 public:
  // The group of every rank the launcher started. The first call initialises MPI
  // (MPI_Init_thread, MPI_THREAD_FUNNELED: only the thread that called it talks to MPI) when
  // the process was started by an MPI launcher; MPI_Finalize runs at exit. Otherwise: a world of 1.
  static ProcessGroup& world();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  bool is_main() const { return rank_ == 0; }  // rank 0 writes logs, checkpoints and summaries

  // In place: afterwards every rank's `t` holds the reduction over the ranks' values.
  // Avg is the sum divided by world_size() (floating tensors only). Every rank must pass the
  // same shape and dtype (checked: a clear error on every rank otherwise).
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum);
  // In place: every rank's `t` becomes root's.
  void broadcast(Tensor& t, int root = 0);
  // (world_size, ...t.shape): row r is rank r's `t`.
  Tensor all_gather(const Tensor& t);
  void barrier();
  // Scalars, for metrics and checks (no signature check: a double is a double).
  double all_reduce(double v, ReduceOp op = ReduceOp::Sum);
  std::vector<double> all_gather(double v);  // one value per rank, in rank order

  // Hang protection: a collective that has not completed after `seconds` raises an error on
  // the rank waiting for it. <= 0 waits forever. Default 300 s, or GRADSLEUTH_DIST_TIMEOUT.
  void set_timeout(double seconds) { timeout_ = seconds; }
  double timeout() const { return timeout_; }

  // "rank 1 of 2" (for messages).
  std::string where() const;

  // ---- for DistributedDataParallel: the asynchronous all-reduce behind its buckets -------
  // Starts a SUM all-reduce of a contiguous floating (float32/64, float16, bfloat16) CPU (or,
  // with NCCL, CUDA) buffer and returns at once (MPI_Iallreduce), so the reduction overlaps the
  // rest of backward.
  // No signature check: the caller guarantees the ranks' buffers match (DDP checks its
  // layout once, at construction). Every rank must start the same requests in the same order.
  class Work {
   public:
    Work() = default;
    bool defined() const { return pg_ != nullptr; }
    void wait();  // blocks (at most timeout()) until the reduction is complete
   private:
    friend class ProcessGroup;
    ProcessGroup* pg_ = nullptr;
    int64_t id_ = -1;  // index into the group's pending requests
    std::string what_;
  };
  Work all_reduce_async(Tensor& contiguous_buffer, const std::string& what);
  // Lets MPI advance the started requests without waiting for them. MPI implementations
  // commonly progress a non-blocking collective only inside MPI calls, so DDP calls this as
  // each gradient arrives: the bucket reductions then move on while backward computes.
  void progress();

  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

 private:
  ProcessGroup();
  struct Impl;
  Impl* impl_ = nullptr;  // MPI state (null in a world of 1); lives until exit
  int rank_ = 0;
  int world_size_ = 1;
  double timeout_ = 300.0;
};

// ProcessGroup::world() has been called in this process (so abort_job has a job to end).
bool world_started();

// The seed for this rank's own random stream: dropout masks, data augmentation, anything that
// must DIFFER across ranks (the same masks on every rank make N ranks do the work of one:
// bug B32). Deterministic in (seed, rank); different ranks get well-separated seeds
// (splitmix64 of seed and rank), and rank_seed(seed, world of 1) != seed so code that seeds
// globally with `seed` and per rank with rank_seed does not reuse one stream twice.
// What must be the SAME on every rank — parameter initialisation, the sampler's shuffle —
// uses `seed` itself (DDP also broadcasts rank 0's parameters).
uint64_t rank_seed(uint64_t seed, int rank);
uint64_t rank_seed(uint64_t seed, const ProcessGroup& pg);

// Ends every rank of the job at once: prints "gradsleuth dist: rank r of N failed: <message>"
// to stderr and calls MPI_Abort (a plain exit in a world of 1). For a program that caught an
// error on one rank: returning from main instead would leave the other ranks blocked in their
// next collective (MPI_Finalize waits for them). The CLI's main calls it.
[[noreturn]] void abort_job(const std::string& message, int exit_code = 1);

}  // namespace gradsleuth::dist
