// ProcessGroup and DDP on CUDA tensors, under `mpirun -np 2` (CTest sets GS_EXPECT_WORLD). One
// source, two programs (tests/CMakeLists.txt):
//  - test_dist_device (label dist): the CUDA backend on the CPU emulator and gradsleuth_dist as
//    configured. Where NCCL is linked, device collectives and DDP on the device must match the CPU
//    path; where it is not (a machine without a GPU), every device collective and DDP around a
//    device model must raise the error naming the op, the tensor's device, why and the fix, leave
//    the tensor as it was, and leave the group usable (no rank stuck inside a collective).
//  - test_dist_nccl_gpu (labels dist, cuda; GS_DIST_NCCL_GPU=1): the nvcc-built backend and
//    gradsleuth_dist with NCCL, on real GPUs. NCCL must be there; the comparisons run. Without a
//    GPU it exits 77 (skipped), and with fewer GPUs than ranks too: NCCL refuses two ranks of one
//    communicator on the same GPU, so a one-GPU machine runs test_dist_nccl_gpu_1rank (-np 1: a
//    communicator of one rank, still every NCCL call) instead.
// Every rank runs every case in the same order (each case's collectives must match).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "cuda/cuda.h"
#include "distributed/dist.h"
#include "nn/activation.h"
#include "nn/container.h"
#include "nn/linear.h"
#include "nn_test_util.h"

#ifndef GS_DIST_NCCL_GPU
#define GS_DIST_NCCL_GPU 0
#endif
#if GS_DIST_NCCL_GPU
#include <cuda_runtime.h>
#endif

namespace dist = gs::dist;
using gs::Tensor;
using nntest::check_close;
using nntest::has;
using nntest::vals;
using nntest::Vec;

namespace {

const char* kProgram = GS_DIST_NCCL_GPU ? "test_dist_nccl_gpu" : "test_dist_device";

// Before any test case: the device, the world, and (GPU) one GPU per rank. Exit 77 = skipped.
const bool ready = [] {
#if GS_DIST_NCCL_GPU
  int gpus = 0;  // cudaGetDeviceCount leaves it unwritten when it fails (error 35 without a driver)
  const cudaError_t rc = cudaGetDeviceCount(&gpus);
  if (rc != cudaSuccess || gpus < 1) {
    std::printf("%s: no CUDA device (cudaGetDeviceCount: %s): NCCL collectives need a GPU: skipped\n", kProgram,
                rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
    std::exit(77);
  }
#endif
  auto& w = dist::ProcessGroup::world();
  w.set_timeout(120);  // a case that goes wrong fails within 2 minutes instead of hanging
  if (!std::getenv("GS_EXPECT_WORLD") && w.world_size() < 2) {
    std::printf("%s: started without `mpirun -np 2`, so no collective reaches the device path: skipped\n", kProgram);
    std::exit(77);
  }
#if GS_DIST_NCCL_GPU
  // One machine (CTest's mpirun): rank r takes GPU r. NCCL needs a GPU of its own per rank.
  if (w.world_size() > gpus) {
    if (w.is_main())
      std::printf(
          "%s: %d ranks but %d GPU(s): NCCL needs one GPU per rank (two ranks of one communicator on "
          "the same GPU are refused): skipped; test_dist_nccl_gpu_1rank runs the same checks with "
          "`mpirun -np 1`\n",
          kProgram, w.world_size(), gpus);
    std::exit(77);
  }
  if (cudaSetDevice(w.rank()) != cudaSuccess) {
    std::printf("%s: cudaSetDevice(%d) failed on %s\n", kProgram, w.rank(), w.where().c_str());
    std::exit(1);
  }
#endif
  if (!gs::cuda::init()) {
    std::printf("%s: no CUDA device (%s): skipped\n", kProgram, gs::cuda::unavailable_reason().c_str());
    std::exit(77);
  }
  return true;
}();

dist::ProcessGroup& pg() { return dist::ProcessGroup::world(); }

double tol(gs::DType t) { return t == gs::kFloat32 ? 1e-6 : 1e-14; }

// Rank r's values: differ per rank and per element, with signs (so max is not sum's order).
Tensor rank_values(gs::DType dt, int r) {
  return ((gs::arange(12.0, gs::kFloat64) * 0.37 + 0.5 * r).tanh() * (r + 1) - 0.1 * r).reshape({3, 4}).to(dt);
}

// A small MLP whose initial weights depend on `seed`.
std::shared_ptr<gs::nn::Sequential> make_mlp(uint64_t seed, gs::DType dt) {
  gs::manual_seed(seed);
  auto m = std::make_shared<gs::nn::Sequential>(
      std::make_shared<gs::nn::Linear>(5, 4), std::make_shared<gs::nn::Tanh>(), std::make_shared<gs::nn::Linear>(4, 3));
  m->to(dt);
  return m;
}
Tensor batch_x(int r, gs::DType dt) {
  return (gs::arange(10.0, gs::kFloat64) * 0.7 - 3.0 + r).tanh().reshape({2, 5}).to(dt);
}
Tensor batch_y(int r, gs::DType dt) {
  return (gs::arange(6.0, gs::kFloat64) * -0.45 + 2.0 - r).tanh().reshape({2, 3}).to(dt);
}

// The pieces every "no NCCL" message must carry: the op, the tensor and its device, why, the fix.
void check_no_nccl_message(const std::string& e, const std::string& op, const Tensor& t) {
  INFO("message: " << e);
  CHECK(has(e, op));
  CHECK(has(e, t.str()));                        // the tensor, "@cuda:0" included
  CHECK(has(e, "lives on " + gs::kCUDA.str()));  // the device
  CHECK(has(e, "NCCL"));                         // why
  CHECK(has(e, "t.cpu()"));                      // the fix here and now
  CHECK(has(e, "GRADSLEUTH_KERNELS_ON=GPU"));    // the fix at configure time
}

}  // namespace

TEST_CASE("the world is the one the launcher started, and the build is the one expected") {
  REQUIRE(ready);
  if (const char* want = std::getenv("GS_EXPECT_WORLD")) {
    CHECK(dist::mpi_available());
    CHECK(pg().world_size() == std::atoi(want));
  }
  if (GS_DIST_NCCL_GPU) CHECK(dist::nccl_available());  // the GPU program links the NCCL half
  const std::string mode =
      std::string(kProgram) + ": NCCL " +
      (dist::nccl_available() ? "linked: comparing device and cpu results" : "not linked: checking the errors");
  MESSAGE(mode);
}

TEST_CASE("all_reduce, broadcast, all_gather on device tensors: the cpu's results, or a clear error") {
  const int W = pg().world_size(), r = pg().rank();
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    const std::string dtype = gs::dtype_name(dt);
    CAPTURE(dtype);
    const Tensor x = rank_values(dt, r);
    for (dist::ReduceOp op : {dist::ReduceOp::Sum, dist::ReduceOp::Avg, dist::ReduceOp::Max}) {
      const std::string op_name = dist::reduce_op_name(op);
      CAPTURE(op_name);
      Tensor c = x.clone();
      pg().all_reduce(c, op);
      Tensor d = x.to(gs::kCUDA);
      Tensor base = x.t().contiguous().to(gs::kCUDA);  // (4, 3) on the device
      Tensor dnc = base.t();                           // x's values through a non-contiguous view
      if (dist::nccl_available()) {
        pg().all_reduce(d, op);
        pg().all_reduce(dnc, op);
        CHECK(d.is_cuda());
        check_close(d, vals(c), tol(dt), tol(dt));
        CHECK(!dnc.is_contiguous());
        check_close(dnc, vals(c), tol(dt), tol(dt));
        check_close(base.t(), vals(c), tol(dt), tol(dt));  // written back into the viewed storage
      } else {
        const std::string e = nntest::error_or_empty([&] { pg().all_reduce(d, op); });
        check_no_nccl_message(e, "dist::all_reduce", d);
        if (r == 0 && dt == gs::kFloat32 && op == dist::ReduceOp::Sum) MESSAGE(e);
        check_close(d, vals(x), 0, 0);  // untouched: no silent partial result, no cpu fallback
        // The fix the message gives works: the collective on a cpu copy, copied back.
        Tensor h = d.cpu();
        pg().all_reduce(h, op);
        d.copy_(h);
        CHECK(d.is_cuda());
        check_close(d, vals(c), 0, 0);
      }
    }

    const int root = W - 1;
    Tensor cb = x.clone();
    pg().broadcast(cb, root);
    Tensor db = x.to(gs::kCUDA);
    Tensor cg = pg().all_gather(x);
    Tensor dg_in = x.to(gs::kCUDA);
    if (dist::nccl_available()) {
      pg().broadcast(db, root);
      check_close(db, vals(cb), 0, 0);
      Tensor dg = pg().all_gather(dg_in);
      CHECK(dg.is_cuda());
      REQUIRE(dg.shape() == cg.shape());
      check_close(dg, vals(cg), 0, 0);
    } else {
      const std::string eb = nntest::error_or_empty([&] { pg().broadcast(db, root); });
      check_no_nccl_message(eb, "dist::broadcast", db);
      check_close(db, vals(x), 0, 0);
      const std::string eg = nntest::error_or_empty([&] { (void)pg().all_gather(dg_in); });
      check_no_nccl_message(eg, "dist::all_gather", dg_in);
    }
  }
  // The group still works afterwards: every rank failed (or succeeded) in the same place.
  CHECK(pg().all_reduce(1.0) == double(W));
}

TEST_CASE("16-bit device tensors: NCCL's float16/bfloat16 collectives give the cpu's, or a clear error") {
  const int W = pg().world_size(), r = pg().rank();
  auto f64 = [](const Tensor& t) { return t.detach().cpu().to(gs::kFloat64).contiguous().to_vector<double>(); };
  for (gs::DType dt : {gs::kFloat16, gs::kBFloat16}) {
    const std::string dtype = gs::dtype_name(dt);
    CAPTURE(dtype);
    const Tensor x = rank_values(dt, r);
    for (dist::ReduceOp op : {dist::ReduceOp::Sum, dist::ReduceOp::Avg, dist::ReduceOp::Max}) {
      const std::string op_name = dist::reduce_op_name(op);
      CAPTURE(op_name);
      Tensor c = x.clone();
      pg().all_reduce(c, op);  // MPI: the float32 sum of each pair, rounded
      Tensor d = x.to(gs::kCUDA);
      if (dist::nccl_available()) {
        pg().all_reduce(d, op);
        REQUIRE(d.dtype() == dt);
        // NCCL adds in the dtype (one rounding per addition, as MPI's pairs); its Avg may divide
        // before or after summing: one more rounding, so half an ulp of the largest value per rank.
        const auto got = f64(d), want = f64(c);
        double m = 0;
        for (double v : want) m = std::max(m, std::abs(v));
        const double eps = dt == gs::kFloat16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
        for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= W * eps * m);
      } else {
        const std::string e = nntest::error_or_empty([&] { pg().all_reduce(d, op); });
        check_no_nccl_message(e, "dist::all_reduce", d);
        CHECK(f64(d) == f64(x));
      }
    }
    Tensor cb = x.clone();
    pg().broadcast(cb, W - 1);
    Tensor db = x.to(gs::kCUDA);
    if (dist::nccl_available()) {
      pg().broadcast(db, W - 1);
      CHECK(f64(db) == f64(cb));
      Tensor dg = pg().all_gather(x.to(gs::kCUDA));
      CHECK(f64(dg) == f64(pg().all_gather(x)));
    } else {
      check_no_nccl_message(nntest::error_or_empty([&] { pg().broadcast(db, W - 1); }), "dist::broadcast", db);
    }
  }
  CHECK(pg().all_reduce(1.0) == double(W));
}

TEST_CASE("DDP around a model on the device: the cpu DDP's gradients, or a clear error") {
  const int W = pg().world_size(), r = pg().rank();
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    const std::string dtype = gs::dtype_name(dt);
    CAPTURE(dtype);
    // Different weights per rank: DDP's construction broadcast must make them rank 0's.
    const uint64_t seed = dist::rank_seed(5, pg());
    auto cpu_model = make_mlp(seed, dt);
    auto dev_model = make_mlp(seed, dt);
    dev_model->to(gs::kCUDA);
    auto cpu_ddp = std::make_shared<dist::DistributedDataParallel>(cpu_model, pg());
    gs::nn::ModulePtr dev_ddp;
    const std::string e =
        nntest::error_or_empty([&] { dev_ddp = std::make_shared<dist::DistributedDataParallel>(dev_model, pg()); });
    {
      Tensor loss = ((*cpu_ddp)(batch_x(r, dt)) - batch_y(r, dt)).square().mean();
      loss.backward();
    }
    // A world of one never communicates, so only W > 1 needs NCCL.
    const bool expect_error = !dist::nccl_available() && W > 1;
    CHECK(e.empty() == !expect_error);
    if (!expect_error) {
      REQUIRE(e.empty());
      Tensor loss = ((*dev_ddp)(batch_x(r, dt).to(gs::kCUDA)) - batch_y(r, dt).to(gs::kCUDA)).square().mean();
      loss.backward();
      auto cp = cpu_ddp->parameters(), dp = dev_ddp->parameters();
      REQUIRE(cp.size() == dp.size());
      for (size_t k = 0; k < cp.size(); ++k) {
        CHECK(dp[k].is_cuda());
        check_close(dp[k], vals(cp[k]), tol(dt), tol(dt));  // rank 0's weights on both
        REQUIRE(dp[k].grad().defined());
        check_close(dp[k].grad(), vals(cp[k].grad()), 10 * tol(dt), 10 * tol(dt));
      }
    } else {
      INFO("message: " << e);
      CHECK(has(e, "DistributedDataParallel"));
      CHECK(has(e, "parameter '0.weight'"));
      CHECK(has(e, "lives on " + gs::kCUDA.str()));
      CHECK(has(e, "NCCL"));
      CHECK(has(e, "model->to(gs::kCPU)"));
      CHECK(has(e, "GRADSLEUTH_KERNELS_ON=GPU"));
      // The model was left alone (no parameter half-broadcast) and the cpu DDP reduced normally.
      for (auto& p : dev_model->parameters()) CHECK(p.is_cuda());
      for (auto& p : cpu_ddp->parameters()) {
        Tensor all = pg().all_gather(p.grad());
        for (int k = 1; k < W; ++k) check_close(all[k], vals(all[0]), 0, 0);  // every rank the same average
      }
    }
  }
  CHECK(pg().all_reduce(1.0) == double(W));
}
