// ProcessGroup over MPI (see process_group.h). Every collective is issued non-blocking
// (MPI_Iallreduce, MPI_Ibcast, ...) and waited for by polling, so a wait can give up after
// timeout() seconds with an error instead of blocking forever.
#include "distributed/process_group.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "core/autograd.h"
#include "core/ops.h"
#include "distributed/nccl.h"

#if GS_HAVE_MPI
#include <mpi.h>
#endif

namespace gradsleuth::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

bool mpi_available() { return GS_HAVE_MPI != 0; }
bool nccl_available() { return detail::nccl_built(); }

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

#if GS_HAVE_MPI
// Started by an MPI launcher? mpirun/mpiexec (OpenMPI, MPICH/Hydra, Intel MPI) set these.
// Without one we do not call MPI_Init: a "singleton" MPI start forks a runtime daemon, which
// a plain `gradsleuth train` must not pay for (nor fail on in a sandbox). GRADSLEUTH_DIST=1
// forces MPI on anyway.
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  const char* force = std::getenv("GRADSLEUTH_DIST");
  return force && std::strcmp(force, "1") == 0;
}

#endif

double timeout_from_env() {
  if (const char* s = std::getenv("GRADSLEUTH_DIST_TIMEOUT")) {
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (end != s) return v;
  }
  return 300.0;
}

#if GS_HAVE_MPI
std::string signature_str(DType dt, int64_t ndim, const int64_t* dims, bool cuda) {
  std::ostringstream os;
  os << dtype_name(dt) << "[";
  for (int64_t i = 0; i < ndim; ++i) os << (i ? ", " : "") << dims[i];
  os << "]" << (cuda ? " on cuda" : "");
  return os.str();
}
#endif

}  // namespace

uint64_t rank_seed(uint64_t seed, int rank) {
  return splitmix64(splitmix64(seed) ^ splitmix64(0xD157ULL + static_cast<uint64_t>(rank)));
}
uint64_t rank_seed(uint64_t seed, const ProcessGroup& pg) { return rank_seed(seed, pg.rank()); }

std::string ProcessGroup::where() const {
  return "rank " + std::to_string(rank_) + " of " + std::to_string(world_size_);
}

#if GS_HAVE_MPI
// ======================================================================================
// The MPI build.
// ======================================================================================
struct ProcessGroup::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  std::unordered_map<int64_t, MPI_Request> pending;  // all_reduce_async's requests by Work id
  int64_t next_id = 0;
};

namespace {

ProcessGroup* g_world = nullptr;

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// An exception nobody caught on this rank: say which rank and why, then take the whole job
// down. Without this the process would die alone and the other ranks would wait in their
// next collective until the launcher noticed (OpenMPI does not always notice a dead rank
// that was blocked in a collective).
void terminate_handler() {
  std::string what = "terminate called without an active exception";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = std::string("uncaught exception: ") + ex.what();
    } catch (...) {
      what = "uncaught exception of unknown type";
    }
  }
  abort_job(what, 1);
}

// float16/bfloat16 travel as a 2-byte contiguous type (MPI has no 16-bit float type) and are reduced
// by our own ops: each pairwise combination widens both operands to float32, sums (or compares) and
// rounds once, so the wire carries 2 bytes per element (docs/distributed.md, "16-bit tensors").
template <class H>
void sum16(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = H(to_float(a[i]) + to_float(b[i]));
}
// A NaN on any rank is the result (as the float32 sum would give), never hidden by a comparison.
template <class H>
void max16(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = to_float(a[i]), y = to_float(b[i]);
    if (std::isnan(x) || x > y) b[i] = a[i];
  }
}

// Made once, after MPI_Init, and kept until MPI_Finalize.
struct Mpi16 {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op sum_half = MPI_OP_NULL, max_half = MPI_OP_NULL, sum_bf16 = MPI_OP_NULL, max_bf16 = MPI_OP_NULL;
};
const Mpi16& mpi16() {
  static Mpi16 m = [] {
    Mpi16 r;
    MPI_Type_contiguous(2, MPI_BYTE, &r.type);
    MPI_Type_commit(&r.type);
    MPI_Op_create(&sum16<Half>, 1, &r.sum_half);
    MPI_Op_create(&max16<Half>, 1, &r.max_half);
    MPI_Op_create(&sum16<BFloat16>, 1, &r.sum_bf16);
    MPI_Op_create(&max16<BFloat16>, 1, &r.max_bf16);
    return r;
  }();
  return m;
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int64: return MPI_INT64_T;
    case DType::Bool: return MPI_C_BOOL;
    case DType::Float16:
    case DType::BFloat16: return mpi16().type;
  }
  GS_FAIL("dist", "unknown dtype code ", static_cast<int>(t));
}

// Avg is reduced as Sum (then divided).
MPI_Op mpi_op(DType t, ReduceOp op) {
  const bool max = op == ReduceOp::Max;
  if (t == DType::Float16) return max ? mpi16().max_half : mpi16().sum_half;
  if (t == DType::BFloat16) return max ? mpi16().max_bf16 : mpi16().sum_bf16;
  return max ? (t == DType::Bool ? MPI_LOR : MPI_MAX) : MPI_SUM;
}

}  // namespace

ProcessGroup::ProcessGroup() : timeout_(timeout_from_env()) {
  if (!launched_by_mpi()) return;  // a world of 1
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    std::atexit(finalize_at_exit);
  }
  impl_ = new Impl;
  // A communicator of our own: the user's MPI calls on MPI_COMM_WORLD cannot interleave with ours.
  MPI_Comm_dup(MPI_COMM_WORLD, &impl_->comm);
  // Errors come back as return codes (checked below) instead of MPI's default abort-on-error,
  // so the message names the gradsleuth op.
  MPI_Comm_set_errhandler(impl_->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(impl_->comm, &rank_);
  MPI_Comm_size(impl_->comm, &world_size_);
  if (world_size_ > 1) std::set_terminate(terminate_handler);
}

bool world_started() { return g_world != nullptr; }

ProcessGroup& ProcessGroup::world() {
  // Never destroyed: MPI_Finalize (at exit) must not run before a static object's last collective.
  static std::once_flag once;
  std::call_once(once, [] { g_world = new ProcessGroup(); });
  return *g_world;
}

namespace {
void check_mpi(int rc, const char* op, const ProcessGroup& pg) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  GS_FAIL(op, "MPI error on ", pg.where(), ": ", std::string(msg, static_cast<size_t>(len)));
}

// Polls `req` until done or the group's timeout. MPI's non-blocking collectives progress only
// inside MPI calls (OpenMPI runs no progress thread), so the first 50 ms poll back to back: a
// large all-reduce is a chain of rounds, each waiting for the next MPI_Test (measured: a 1 MB
// all-reduce took 15 ms when each poll was followed by a 20 us sleep, 0.5 ms polled back to back).
// A wait that lasts longer is one for a slow or stuck rank: then yield the core between polls
// (ranks share cores here) and sleep a little, still far below any timeout.
void wait_for(MPI_Request& req, const char* op, const std::string& what, const ProcessGroup& pg) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int done = 0;
  for (uint64_t polls = 0;; ++polls) {
    check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), op, pg);
    if (done) return;
    if (polls % 256 != 255) continue;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (pg.timeout() > 0 && waited > pg.timeout())
      GS_FAIL(op, "timed out on ", pg.where(), " after ", pg.timeout(), " s waiting for ", what,
              ": another rank has not joined this collective. It probably failed, is stuck, or went down a code "
              "path that calls different collectives (every rank must call the same collectives in the same "
              "order). Raise the limit with ProcessGroup::set_timeout or GRADSLEUTH_DIST_TIMEOUT (seconds).");
    if (waited > 0.05) std::this_thread::sleep_for(std::chrono::microseconds(waited > 1.0 ? 1000 : 50));
  }
}
}  // namespace

void ProcessGroup::barrier() {
  if (!impl_) return;
  MPI_Request req;
  check_mpi(MPI_Ibarrier(impl_->comm, &req), "dist::barrier", *this);
  wait_for(req, "dist::barrier", "the other ranks to reach the barrier", *this);
}

double ProcessGroup::all_reduce(double v, ReduceOp op) {
  if (!impl_) return v;
  double out = 0;
  MPI_Request req;
  check_mpi(MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, op == ReduceOp::Max ? MPI_MAX : MPI_SUM, impl_->comm, &req),
            "dist::all_reduce", *this);
  wait_for(req, "dist::all_reduce", "a scalar all-reduce", *this);
  return op == ReduceOp::Avg ? out / world_size_ : out;
}

std::vector<double> ProcessGroup::all_gather(double v) {
  std::vector<double> out(static_cast<size_t>(world_size_), v);
  if (!impl_) return out;
  MPI_Request req;
  check_mpi(MPI_Iallgather(&v, 1, MPI_DOUBLE, out.data(), 1, MPI_DOUBLE, impl_->comm, &req), "dist::all_gather", *this);
  wait_for(req, "dist::all_gather", "a scalar all-gather", *this);
  return out;
}

namespace {
// What every rank passes to a tensor collective, gathered and compared before the data moves:
// different shapes would make MPI read past the smaller buffer or silently reduce misaligned
// elements; different dtypes would reinterpret bytes.
constexpr int kSigDims = 8;
constexpr int kSigLen = 6 + kSigDims;
}  // namespace

// Throws the same error on every rank when the ranks' tensors differ.
static void check_signature(ProcessGroup& pg, MPI_Comm comm, const char* op, const Tensor& t, int extra) {
  int64_t sig[kSigLen] = {};
  sig[0] = static_cast<int64_t>(t.dtype());
  sig[1] = t.is_cuda() ? 1 : 0;
  sig[2] = t.dim();
  sig[3] = t.numel();
  sig[4] = extra;    // the reduce op, or broadcast's root
  int64_t tail = 0;  // dims past kSigDims folded into one number
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (i < kSigDims)
      sig[6 + i] = t.size(i);
    else
      tail = tail * 1000003 + t.size(i);
  }
  sig[5] = tail;
  std::vector<int64_t> all(static_cast<size_t>(kSigLen) * static_cast<size_t>(pg.world_size()));
  MPI_Request req;
  check_mpi(MPI_Iallgather(sig, kSigLen, MPI_INT64_T, all.data(), kSigLen, MPI_INT64_T, comm, &req), op, pg);
  wait_for(req, op, "the ranks' tensor shapes (the check before the data moves)", pg);
  bool same = true;
  for (int r = 1; r < pg.world_size(); ++r)
    if (std::memcmp(&all[static_cast<size_t>(r) * kSigLen], all.data(), sizeof sig) != 0) same = false;
  if (same) return;
  std::ostringstream os;
  os << "the ranks passed different tensors:";
  for (int r = 0; r < pg.world_size(); ++r) {
    const int64_t* s = &all[static_cast<size_t>(r) * kSigLen];
    os << (r ? "," : "") << " rank " << r << " "
       << signature_str(static_cast<DType>(s[0]), std::min<int64_t>(s[2], kSigDims), s + 6, s[1] != 0);
    if (std::strcmp(op, "dist::all_reduce") == 0) os << " (" << reduce_op_name(static_cast<ReduceOp>(s[4])) << ")";
    if (std::strcmp(op, "dist::broadcast") == 0) os << " (root " << s[4] << ")";
  }
  os << ". Every rank must pass a tensor of the same shape, dtype and device (and the same op or root); a "
        "per-rank batch of a different size is the usual cause: reduce a per-rank statistic (a mean, a count) "
        "instead of the raw tensor, or pad to a common shape.";
  GS_FAIL(op, os.str());
}

namespace {
void check_reducible(const Tensor& t, ReduceOp op) {
  GS_CHECK(t.defined(), "dist::all_reduce", "got an undefined tensor");
  if (t.dtype() == DType::Bool)
    GS_CHECK(op == ReduceOp::Max, "dist::all_reduce", "a bool tensor (", t.str(),
             ") can only be reduced with Max "
             "(a logical or); convert it with .to(gs::kInt64) to count");
  if (op == ReduceOp::Avg)
    GS_CHECK(t.is_floating_point(), "dist::all_reduce", "Avg of an integer tensor (", t.str(),
             ") would truncate; convert it to float or reduce with Sum and divide yourself");
}

// A contiguous CPU buffer with t's values (t itself when possible), and how to put the result back.
Tensor contiguous_buffer(const Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }
void write_back(Tensor& t, const Tensor& buf, const char* op) {
  if (buf.is_same(t) || buf.storage() == t.storage()) {
    t.storage()->bump_version(op);  // the values changed under autograd's feet: saved copies must notice
    return;
  }
  NoGradGuard ng;
  t.copy_(buf);
}

template <class H>
void divide16(Tensor& buf, int n) {  // one more rounding: exact for a power-of-two n above the subnormals
  H* p = static_cast<H*>(buf.raw_data());
  for (int64_t i = 0; i < buf.numel(); ++i) p[i] = H(to_float(p[i]) / static_cast<float>(n));
}

void divide_by(Tensor& buf, int n) {
  if (buf.dtype() == DType::Float32) {
    float* p = buf.data_ptr<float>();
    for (int64_t i = 0; i < buf.numel(); ++i) p[i] /= static_cast<float>(n);
  } else if (buf.dtype() == DType::Float16) {
    divide16<Half>(buf, n);
  } else if (buf.dtype() == DType::BFloat16) {
    divide16<BFloat16>(buf, n);
  } else {
    double* p = buf.data_ptr<double>();
    for (int64_t i = 0; i < buf.numel(); ++i) p[i] /= static_cast<double>(n);
  }
}
}  // namespace

void ProcessGroup::all_reduce(Tensor& t, ReduceOp op) {
  check_reducible(t, op);
  if (!impl_) return;
  check_signature(*this, impl_->comm, "dist::all_reduce", t, static_cast<int>(op));
  if (t.is_cuda()) {
    detail::nccl_all_reduce(*this, t, op);
    return;
  }
  Tensor buf = contiguous_buffer(t);
  MPI_Request req;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buf.raw_data(), static_cast<int>(buf.numel()), mpi_type(t.dtype()),
                           mpi_op(t.dtype(), op), impl_->comm, &req),
            "dist::all_reduce", *this);
  wait_for(req, "dist::all_reduce", "the all-reduce of " + t.str(), *this);
  if (op == ReduceOp::Avg) divide_by(buf, world_size_);
  write_back(t, buf, "dist::all_reduce");
}

void ProcessGroup::broadcast(Tensor& t, int root) {
  GS_CHECK(t.defined(), "dist::broadcast", "got an undefined tensor");
  GS_CHECK(root >= 0 && root < world_size_, "dist::broadcast", "root ", root, " is not a rank of this world of ",
           world_size_);
  if (!impl_) return;
  check_signature(*this, impl_->comm, "dist::broadcast", t, root);
  if (t.is_cuda()) {
    detail::nccl_broadcast(*this, t, root);
    return;
  }
  Tensor buf = contiguous_buffer(t);
  MPI_Request req;
  check_mpi(MPI_Ibcast(buf.raw_data(), static_cast<int>(buf.numel() * static_cast<int64_t>(buf.element_size())),
                       MPI_BYTE, root, impl_->comm, &req),
            "dist::broadcast", *this);
  wait_for(req, "dist::broadcast", "the broadcast of " + t.str() + " from rank " + std::to_string(root), *this);
  write_back(t, buf, "dist::broadcast");
}

Tensor ProcessGroup::all_gather(const Tensor& t) {
  GS_CHECK(t.defined(), "dist::all_gather", "got an undefined tensor");
  Shape out_shape{world_size_};
  for (int64_t d : t.shape()) out_shape.push_back(d);
  if (!impl_) return t.detach().clone().reshape(out_shape);
  check_signature(*this, impl_->comm, "dist::all_gather", t, 0);
  if (t.is_cuda()) return detail::nccl_all_gather(*this, t);
  Tensor src = t.detach().contiguous();
  Tensor out = empty(out_shape, TensorOptions(t.dtype()));
  const int bytes = static_cast<int>(src.numel() * static_cast<int64_t>(src.element_size()));
  MPI_Request req;
  check_mpi(MPI_Iallgather(src.raw_data(), bytes, MPI_BYTE, out.raw_data(), bytes, MPI_BYTE, impl_->comm, &req),
            "dist::all_gather", *this);
  wait_for(req, "dist::all_gather", "the all-gather of " + t.str(), *this);
  return out;
}

ProcessGroup::Work ProcessGroup::all_reduce_async(Tensor& buf, const std::string& what) {
  Work w;
  w.pg_ = this;
  w.what_ = what;
  if (!impl_) return w;  // id_ -1: nothing to wait for
  GS_CHECK(buf.is_contiguous() && buf.is_floating_point(), "dist::all_reduce_async",
           "needs a contiguous floating buffer, got ", buf.str());
  if (buf.is_cuda()) {  // NCCL runs on its own stream; the wait is nccl_all_reduce's own
    detail::nccl_all_reduce(*this, buf, ReduceOp::Sum);
    return w;
  }
  MPI_Request req;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buf.raw_data(), static_cast<int>(buf.numel()), mpi_type(buf.dtype()),
                           mpi_op(buf.dtype(), ReduceOp::Sum), impl_->comm, &req),
            "dist::all_reduce_async", *this);
  w.id_ = impl_->next_id++;
  impl_->pending.emplace(w.id_, req);
  return w;
}

void ProcessGroup::progress() {
  if (!impl_) return;
  for (auto& [id, req] : impl_->pending) {
    // A completed request becomes MPI_REQUEST_NULL, which Work::wait then finds done at once.
    int done = 0;
    check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "dist::all_reduce", *this);
  }
}

void ProcessGroup::Work::wait() {
  if (!pg_ || id_ < 0) return;
  auto it = pg_->impl_->pending.find(id_);
  GS_CHECK(it != pg_->impl_->pending.end(), "dist::Work::wait", "waited twice for ", what_);
  MPI_Request req = it->second;
  pg_->impl_->pending.erase(it);
  id_ = -1;
  wait_for(req, "dist::all_reduce", what_, *pg_);
}

[[noreturn]] void abort_job(const std::string& message, int exit_code) {
  ProcessGroup* pg = g_world;
  const std::string who = pg ? pg->where() : std::string("rank 0 of 1");
  std::fprintf(stderr, "gradsleuth dist: %s failed: %s\n", who.c_str(), message.c_str());
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (pg && pg->world_size() > 1 && initialized && !finalized) {
    std::fprintf(stderr, "gradsleuth dist: aborting every rank of the job (MPI_Abort)\n");
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
  }
  std::fflush(stderr);
  std::exit(exit_code);
}

#else
// ======================================================================================
// Built without MPI: every group is a world of 1 and every collective the identity.
// ======================================================================================
struct ProcessGroup::Impl {};

ProcessGroup::ProcessGroup() : timeout_(timeout_from_env()) {}

namespace {
ProcessGroup* g_world = nullptr;
}
bool world_started() { return g_world != nullptr; }

ProcessGroup& ProcessGroup::world() {
  if (!g_world) g_world = new ProcessGroup();
  return *g_world;
}

void ProcessGroup::barrier() {}
double ProcessGroup::all_reduce(double v, ReduceOp) { return v; }
std::vector<double> ProcessGroup::all_gather(double v) { return {v}; }
void ProcessGroup::all_reduce(Tensor& t, ReduceOp op) {
  GS_CHECK(t.defined(), "dist::all_reduce", "got an undefined tensor");
  GS_CHECK(op != ReduceOp::Avg || t.is_floating_point(), "dist::all_reduce", "Avg of an integer tensor (", t.str(),
           ") would truncate; convert it to float or reduce with Sum and divide yourself");
}
void ProcessGroup::broadcast(Tensor& t, int root) {
  GS_CHECK(t.defined(), "dist::broadcast", "got an undefined tensor");
  GS_CHECK(root == 0, "dist::broadcast", "root ", root, " is not a rank of this world of 1");
}
Tensor ProcessGroup::all_gather(const Tensor& t) {
  GS_CHECK(t.defined(), "dist::all_gather", "got an undefined tensor");
  Shape s{1};
  for (int64_t d : t.shape()) s.push_back(d);
  return t.detach().clone().reshape(s);
}
ProcessGroup::Work ProcessGroup::all_reduce_async(Tensor&, const std::string& what) {
  Work w;
  w.pg_ = this;
  w.what_ = what;
  return w;
}
void ProcessGroup::progress() {}
void ProcessGroup::Work::wait() {}

[[noreturn]] void abort_job(const std::string& message, int exit_code) {
  std::fprintf(stderr, "gradsleuth dist: rank 0 of 1 failed: %s\n", message.c_str());
  std::fflush(stderr);
  std::exit(exit_code);
}
#endif

}  // namespace gradsleuth::dist
