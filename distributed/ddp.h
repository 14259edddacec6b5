// DistributedDataParallel: one model replica per rank, kept identical by averaging gradients.
//
//   auto model = std::make_shared<dist::DistributedDataParallel>(nn_model);   // broadcasts rank 0's weights
//   optim::SGD opt(model->parameters(), ...);
//   loss = criterion((*model)(batch.x), batch.y);   // this rank's shard of the global batch
//   loss.backward();                                // gradients all-reduced (averaged) during backward
//   opt.step();                                     // every rank takes the same step
//
// Construction broadcasts rank 0's parameters and buffers, so every replica starts equal
// whatever each rank's initialisation drew, and checks that every rank wrapped the same model
// (the same parameter names, shapes and dtypes; an error naming the difference otherwise).
//
// Bucketing: the parameters that require grad are packed, in REVERSE registration order
// (backward produces the last layer's gradients first), into buckets of about
// bucket_bytes each (one flat buffer per bucket; a new bucket also starts at a dtype or device
// change). A hook on each parameter copies its gradient into its bucket slot as backward
// produces it; a bucket whose every slot is filled is all-reduced at once with a non-blocking
// MPI_Iallreduce, so its communication overlaps the backward of the earlier layers. Buckets
// are started strictly in bucket order on every rank (MPI matches collectives by order). When
// backward has finished (autograd::queue_callback), DDP starts any bucket not yet started,
// waits for all of them, divides by world_size and writes each parameter's .grad.
//
// Unused parameters: each bucket carries, after its gradients, one counter per parameter (1 when
// this rank produced its gradient), summed by the same all-reduce, so every rank learns how
// many ranks used each parameter at no extra collective. A parameter that got no gradient in
// this backward on some ranks but not on others is an error on every rank naming the parameter and the ranks, unless
// find_unused_parameters (then its missing contribution counts as zero, as PyTorch does: the
// average over the global batch, where those ranks' examples did not touch it). A parameter
// that no rank used keeps its .grad as it was.
//
// Gradient accumulation (several backwards before one optimizer step) is exact: each backward
// all-reduces its own contribution and adds the average to whatever .grad already held, so k
// backwards give the average of the k global-batch gradients' sum, as in one process. (Each
// backward communicates; PyTorch's no_sync() saving is not implemented.)
//
// A parameter added to the wrapped module after construction is not known to DDP and is not
// reduced: every rank keeps its own gradient and the replicas drift apart. reduced_parameters()
// lists what the last backward did reduce; compare it with the module's named_parameters().
//
// Injectable bugs (DDPOptions::bugs, docs/catalog.md): B29 sums the gradients instead of
// averaging them (a world_size times larger step); B30 skips the initial broadcast (replicas
// start from different weights and never agree); B33 leaves the last registered parameter out
// of the buckets (as if it had been registered after wrapping).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "nn/bugs.h"
#include "nn/module.h"

namespace gradsleuth::dist {

struct DDPOptions {
  int64_t bucket_bytes = 25 << 20;  // PyTorch's default bucket_cap_mb = 25
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;  // rank 0's buffers (BatchNorm's running statistics) before every training forward
  nn::BugSet bugs{};
};

class DistributedDataParallel : public nn::Module {
 public:
  DistributedDataParallel(nn::ModulePtr module, ProcessGroup& pg = ProcessGroup::world(), DDPOptions o = {});
  ~DistributedDataParallel() override;

  Tensor forward(const Tensor& x) override;
  nn::Module& module() { return *module_; }
  const nn::ModulePtr& module_ptr() const { return module_; }
  ProcessGroup& process_group() { return pg_; }
  const DDPOptions& options() const { return o_; }

  // Names (as in module().named_parameters()) of the parameters whose gradient went through the
  // all-reduce in the last backward, in bucket order.
  std::vector<std::string> reduced_parameters() const { return reduced_; }
  // The parameters (requiring grad) known at construction, in registration order.
  std::vector<std::string> registered_parameters() const;
  int64_t reduce_calls() const { return reduce_calls_; }  // bucket all-reduces started so far
  // Seconds the backward passes so far spent waiting, after their last node ran, for the bucket
  // all-reduces to finish (plus the unused-parameter check): the communication backward could
  // not hide behind computation.
  double wait_seconds() const { return wait_seconds_; }
  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  // The parameter names in each bucket (bucket 0 is reduced first).
  std::vector<std::vector<std::string>> bucket_layout() const;

 private:
  struct Param {
    std::string name;
    Tensor tensor;
    int64_t bucket = -1;  // -1: not reduced (B33)
    int64_t offset = 0;   // in elements, within the bucket's buffer
    int64_t slot = 0;     // its position in the bucket (its use counter is buffer[numel + slot])
    size_t hook = 0;
    bool has_hook = false;
    // This backward: a gradient arrived; .grad's value before it (accumulation), if any.
    bool ready = false;
    Tensor grad_before;
  };
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    Tensor buffer;               // flat, contiguous: the gradients, then one use counter per parameter
    int64_t numel = 0;           // elements of gradient in the buffer
    int64_t pending = 0;         // slots still waiting for a gradient this backward
    bool launched = false;
    ProcessGroup::Work work;
  };
  void on_grad(size_t i, const Tensor& g);
  void launch_ready_buckets();
  void launch(size_t b);
  void finish_backward();
  void check_same_model();

  nn::ModulePtr module_;
  ProcessGroup& pg_;
  DDPOptions o_;
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  size_t next_bucket_ = 0;  // the next bucket to start this backward
  bool in_backward_ = false;
  std::vector<std::string> reduced_;
  int64_t reduce_calls_ = 0;
  double wait_seconds_ = 0.0;
};

}  // namespace gradsleuth::dist
