// DistributedDataParallel (see ddp.h): gradients bucketed and all-reduced while backward runs.
#include "distributed/ddp.h"

#include <chrono>
#include <cmath>
#include <sstream>

#include "core/autograd.h"
#include "core/ops.h"

namespace gradsleuth::dist {

namespace {
uint64_t fnv1a(uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ULL;
  return h;
}
}  // namespace

DistributedDataParallel::DistributedDataParallel(nn::ModulePtr module, ProcessGroup& pg, DDPOptions o)
    : nn::Module("DistributedDataParallel"), module_(std::move(module)), pg_(pg), o_(std::move(o)) {
  GS_CHECK(module_ != nullptr, "DistributedDataParallel", "needs a module to wrap");
  GS_CHECK(o_.bucket_bytes > 0, "DistributedDataParallel", "bucket_bytes must be positive, got ", o_.bucket_bytes);
  register_module("module", module_);
  training_ = module_->is_training();

  for (auto& [name, t] : module_->named_parameters())
    if (t.requires_grad()) {
      params_.emplace_back();
      params_.back().name = name;
      params_.back().tensor = t;
    }
  check_same_model();
  if (pg_.world_size() > 1 && !nccl_available()) {
    // A model on the device needs NCCL for its broadcast and its gradient all-reduces. Say so
    // here, naming DDP and the parameter, rather than through the first broadcast's error (every
    // rank wraps the same model on the same device, checked above, so every rank fails alike).
    for (auto& [name, t] : module_->named_parameters())
      GS_CHECK(!t.is_cuda(), "DistributedDataParallel", "parameter '", name, "' (", t.str(), ") lives on ",
               t.device().str(),
               ", but this build of gradsleuth_dist has no NCCL, which a model on a CUDA device "
               "needs for its broadcast and its gradient all-reduces (",
               "dist::nccl_available() is false). Train the model on the CPU (model->to(gs::kCPU) "
               "before wrapping it), or configure on a machine with a GPU, nvcc and NCCL "
               "(cmake -DGRADSLEUTH_KERNELS_ON=GPU).");
  }

  if (!o_.bugs.has(nn::Bug::B30)) [[likely]] {
    // Every replica starts from rank 0's weights: without this each rank keeps what its own
    // initialisation drew, and averaged gradients never bring them together.
    NoGradGuard ng;
    for (auto& [name, t] : module_->named_parameters()) pg_.broadcast(t, 0);
    for (auto& [name, t] : module_->named_buffers()) pg_.broadcast(t, 0);
  }
  // BUG B30: the broadcast above skipped: the replicas start from different weights.

  // Buckets: reverse registration order, about bucket_bytes each, one dtype and device per bucket.
  const size_t last = params_.empty() ? 0 : params_.size() - 1;
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    if (k == last && o_.bugs.has(nn::Bug::B33)) [[unlikely]]
      continue;  // BUG B33: the last parameter never enters a bucket, so its gradient stays local.
    Param& p = params_[k];
    const bool new_bucket = buckets_.empty() || bytes >= o_.bucket_bytes ||
                            params_[buckets_.back().params.front()].tensor.dtype() != p.tensor.dtype() ||
                            params_[buckets_.back().params.front()].tensor.device() != p.tensor.device();
    if (new_bucket) {
      buckets_.emplace_back();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    p.bucket = static_cast<int64_t>(buckets_.size() - 1);
    p.offset = 0;
    for (size_t j : b.params) p.offset += params_[j].tensor.numel();
    p.slot = static_cast<int64_t>(b.params.size());
    b.params.push_back(k);
    bytes += static_cast<int64_t>(p.tensor.nbytes());
  }
  for (Bucket& b : buckets_) {
    const Tensor& first = params_[b.params.front()].tensor;
    b.numel = 0;
    for (size_t j : b.params) b.numel += params_[j].tensor.numel();
    // After the gradients, one counter per parameter: 1 when this rank's backward produced its
    // gradient. Summed with the gradients, it tells every rank how many ranks used each
    // parameter without a collective of its own (small integers are exact in float32).
    b.buffer =
        zeros({b.numel + static_cast<int64_t>(b.params.size())}, TensorOptions(first.dtype()).device(first.device()));
  }
  for (size_t k = 0; k < params_.size(); ++k) {
    if (params_[k].bucket < 0) continue;
    params_[k].hook = params_[k].tensor.register_hook([this, k](const Tensor& g) {
      on_grad(k, g);
      return Tensor();  // .grad accumulates the local gradient; finish_backward replaces it
    });
    params_[k].has_hook = true;
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (Param& p : params_)
    if (p.has_hook) p.tensor.remove_hook(p.hook);
}

// Every rank must wrap the same model: a different parameter list would pack different
// buckets, and the all-reduce would add unrelated numbers together (or read past a buffer).
void DistributedDataParallel::check_same_model() {
  if (pg_.world_size() == 1) return;
  uint64_t h = 0xCBF29CE484222325ULL;
  for (const Param& p : params_) {
    h = fnv1a(h, p.name);
    h = fnv1a(h, p.tensor.str());
  }
  // 52 bits survive the trip through a double exactly.
  const std::vector<double> all = pg_.all_gather(static_cast<double>(h & ((uint64_t{1} << 52) - 1)));
  for (int r = 1; r < pg_.world_size(); ++r) {
    if (all[static_cast<size_t>(r)] == all[0]) continue;
    std::ostringstream os;
    os << "rank " << pg_.rank() << " wraps " << params_.size() << " parameters (";
    for (size_t i = 0; i < params_.size() && i < 4; ++i)
      os << (i ? ", " : "") << params_[i].name << " " << params_[i].tensor.str();
    os << (params_.size() > 4 ? ", ..." : "") << ")";
    GS_FAIL("DistributedDataParallel", "the ranks wrapped different models: rank ", r,
            "'s parameter names/shapes/dtypes differ from rank 0's; ", os.str(),
            ". Build the same model on every rank (only the data may differ).");
  }
}

std::vector<std::string> DistributedDataParallel::registered_parameters() const {
  std::vector<std::string> out;
  for (const Param& p : params_) out.push_back(p.name);
  return out;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_layout() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) {
    out.emplace_back();
    for (size_t j : b.params) out.back().push_back(params_[j].name);
  }
  return out;
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (o_.broadcast_buffers && is_training() && pg_.world_size() > 1) {
    // Buffers that forward updates (BatchNorm's running mean/var) drift apart per rank's data;
    // rank 0's win, as in PyTorch.
    NoGradGuard ng;
    for (auto& [name, t] : module_->named_buffers()) pg_.broadcast(t, 0);
  }
  return (*module_)(x);
}

void DistributedDataParallel::on_grad(size_t i, const Tensor& g) {
  if (!in_backward_) {
    // The first gradient of this backward: reset the buckets and make sure we run when it ends.
    // A bucket still in flight belongs to a backward that failed before its end (its callback
    // was dropped): let it land before its buffer is reused.
    for (Bucket& b : buckets_)
      if (b.launched) b.work.wait();
    in_backward_ = true;
    next_bucket_ = 0;
    for (Param& p : params_) {
      p.ready = false;
      p.grad_before = Tensor();
    }
    for (Bucket& b : buckets_) {
      b.pending = static_cast<int64_t>(b.params.size());
      b.launched = false;
      b.buffer.zero_();
    }
    // When a backward fails, the engine drops its queued callbacks without running them; the
    // guard then marks this round over, so the next backward starts a fresh one.
    struct RoundGuard {
      explicit RoundGuard(DistributedDataParallel* d) : self(d) {}
      RoundGuard(const RoundGuard&) = delete;
      DistributedDataParallel* self;
      bool ran = false;
      ~RoundGuard() {
        if (!ran) self->in_backward_ = false;
      }
    };
    auto guard = std::make_shared<RoundGuard>(this);
    autograd::queue_callback([this, guard] {
      guard->ran = true;
      finish_backward();
    });
  }
  Param& p = params_[i];
  GS_CHECK(!p.ready, "DistributedDataParallel", "parameter ", p.name, " received two gradients in one backward");
  Bucket& b = buckets_[static_cast<size_t>(p.bucket)];
  GS_CHECK(!b.launched, "DistributedDataParallel", "parameter ", p.name,
           "'s gradient arrived after its bucket was "
           "all-reduced");
  {
    NoGradGuard ng;
    b.buffer.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape()).copy_(g.detach());
    b.buffer.narrow(0, b.numel + p.slot, 1).fill_(1.0);
    // Gradient accumulation: .grad holds earlier backwards' (already averaged) gradients.
    // Keep them, to add this backward's average to them exactly.
    Tensor before = p.tensor.grad();
    if (before.defined()) p.grad_before = before.detach().clone();
  }
  p.ready = true;
  --b.pending;
  launch_ready_buckets();
  if (next_bucket_ > 0) pg_.progress();  // move the started buckets' reductions along
}

void DistributedDataParallel::launch(size_t k) {
  Bucket& b = buckets_[k];
  b.launched = true;
  b.work =
      pg_.all_reduce_async(b.buffer, "gradient bucket " + std::to_string(k) + " (" + std::to_string(b.params.size()) +
                                         " parameters, first " + params_[b.params.front()].name + ")");
  ++reduce_calls_;
}

// Starts buckets in bucket order as long as the next one is complete.
void DistributedDataParallel::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) launch(next_bucket_++);
}

void DistributedDataParallel::finish_backward() {
  in_backward_ = false;
  const auto t0 = std::chrono::steady_clock::now();
  struct AddTime {
    double& total;
    std::chrono::steady_clock::time_point t0;
    ~AddTime() { total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
  } add_time{wait_seconds_, t0};
  // Buckets with a parameter that got no gradient here never filled: start them now (their
  // empty slots are zeros), so every rank starts every bucket, in order.
  while (next_bucket_ < buckets_.size()) launch(next_bucket_++);
  for (Bucket& b : buckets_) {
    b.work.wait();
    b.launched = false;
  }

  // How many ranks used each parameter: the counters summed with the gradients.
  const int W = pg_.world_size();
  std::vector<int64_t> used_on(params_.size(), 0);
  bool disagree = false;
  for (Bucket& b : buckets_) {
    const std::vector<double> counts =
        b.buffer.narrow(0, b.numel, static_cast<int64_t>(b.params.size())).to(kCPU).to(kFloat64).to_vector<double>();
    for (size_t j = 0; j < b.params.size(); ++j) {
      const size_t k = b.params[j];
      used_on[k] = std::llround(counts[j]);
      if (used_on[k] != 0 && used_on[k] != W) disagree = true;
    }
  }
  if (disagree && !o_.find_unused_parameters) {
    // Every rank saw the same counts, so every rank is here: gather who used what, for the message.
    Tensor mask = zeros({static_cast<int64_t>(params_.size())}, kFloat64);
    double* m = mask.data_ptr<double>();
    for (size_t k = 0; k < params_.size(); ++k) m[k] = params_[k].ready ? 1.0 : 0.0;
    Tensor all = pg_.all_gather(mask);  // (W, P)
    const double* a = all.data_ptr<double>();
    for (size_t k = 0; k < params_.size(); ++k) {
      if (params_[k].bucket < 0 || used_on[k] == 0 || used_on[k] == W) continue;
      std::string with, without;
      for (int r = 0; r < W; ++r) {
        std::string& list = a[static_cast<size_t>(r) * params_.size() + k] != 0.0 ? with : without;
        list += (list.empty() ? "" : ", ") + std::to_string(r);
      }
      GS_FAIL("DistributedDataParallel", "parameter ", params_[k].name, " got a gradient on rank(s) ", with,
              " but none on rank(s) ", without,
              " in this backward: those ranks' forward did not use it. "
              "The averaged gradient would be wrong, and a rank whose forward skips a layer usually means the "
              "ranks ran different code paths. If some parameters are legitimately unused in some steps, pass "
              "DDPOptions{.find_unused_parameters = true} (their missing gradient then counts as zero).");
    }
  }

  reduced_.clear();
  NoGradGuard ng;
  for (Bucket& b : buckets_) {
    if (!o_.bugs.has(nn::Bug::B29)) [[likely]]
      b.buffer.narrow(0, 0, b.numel).div_(static_cast<double>(W));
    // BUG B29: no division: every rank steps with the SUM of the ranks' gradients, world_size
    // times the single-process step. Correct: the division by world_size above.
    for (size_t k : b.params) {
      Param& p = params_[k];
      if (used_on[k] == 0) continue;  // no rank used it: .grad stays as it was
      Tensor avg = b.buffer.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape());
      Tensor g = p.tensor.grad();
      if (!p.ready) {
        // Unused here (find_unused_parameters) but used elsewhere: .grad gets the average.
        if (g.defined())
          g.add_(avg);
        else
          p.tensor.set_grad(avg.clone());
      } else if (p.grad_before.defined()) {
        g.copy_(p.grad_before);
        g.add_(avg);
      } else {
        g.copy_(avg);
      }
      p.grad_before = Tensor();
      reduced_.push_back(p.name);
    }
  }
}

}  // namespace gradsleuth::dist
