// The data-parallel library under MPI: collectives, DDP and its bugs. Run by CTest as
//   mpirun -np 2 --oversubscribe tests/test_dist      (env GS_EXPECT_WORLD=2)
// Every rank runs every test case in the same order (each case's collectives must match).
// Started without mpirun it runs as a world of 1, where the same checks still hold.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "distributed/dist.h"
#include "nn/activation.h"
#include "nn/container.h"
#include "nn/linear.h"
#include "nn_test_util.h"
#include "optim/grad_scaler.h"
#include "optim/sgd.h"
#include "reduced_float_tolerance.h"

namespace dist = gs::dist;
using gs::Tensor;
using nntest::check_close;
using nntest::vals;

namespace {

dist::ProcessGroup& pg() {
  auto& w = dist::ProcessGroup::world();
  w.set_timeout(120);  // a test that goes wrong fails within 2 minutes instead of hanging
  return w;
}

using nntest::error_or_empty;

// A small float64 MLP whose initial weights depend on `seed`.
std::shared_ptr<gs::nn::Sequential> make_mlp(uint64_t seed) {
  gs::manual_seed(seed);
  auto m = std::make_shared<gs::nn::Sequential>(
      std::make_shared<gs::nn::Linear>(5, 4), std::make_shared<gs::nn::Tanh>(), std::make_shared<gs::nn::Linear>(4, 3));
  m->to(gs::kFloat64);
  return m;
}

// The global batch every rank can compute: 2 * world_size rows; rank r owns rows [2r, 2r + 2).
Tensor global_x(int world) {
  return (gs::arange(10.0 * world, gs::kFloat64) * 0.7 - 3.0).tanh().reshape({2 * world, 5});
}
Tensor global_y(int world) {
  return (gs::arange(6.0 * world, gs::kFloat64) * -0.45 + 2.0).tanh().reshape({2 * world, 3});
}
Tensor mse(const Tensor& a, const Tensor& b) { return (a - b).square().mean(); }

// The single-process reference: the same weights, the whole global batch, float64.
std::vector<std::vector<double>> full_batch_grads(gs::nn::Module& replica, int world, int backwards = 1) {
  auto ref = make_mlp(0);
  auto src = replica.named_parameters();
  {
    gs::NoGradGuard ng;
    for (auto& [name, t] : ref->named_parameters())
      for (auto& [n2, t2] : src)
        if (n2 == name || n2 == "module." + name) t.copy_(t2);
  }
  for (int i = 0; i < backwards; ++i) {
    Tensor scale = gs::full({}, static_cast<double>(i + 1), gs::kFloat64);
    (mse((*ref)(global_x(world)), global_y(world)) * scale).backward();
  }
  std::vector<std::vector<double>> out;
  for (auto& t : ref->parameters()) out.push_back(vals(t.grad()));
  return out;
}

Tensor my_rows(const Tensor& t, const dist::ProcessGroup& g) { return t.narrow(0, 2 * g.rank(), 2); }

}  // namespace

TEST_CASE("the world is the one the launcher started") {
  if (const char* want = std::getenv("GS_EXPECT_WORLD")) {
    // Guards against a silent world of 1 when MPI failed to start under mpirun.
    CHECK(dist::mpi_available());
    CHECK(pg().world_size() == std::atoi(want));
  }
  CHECK(pg().rank() >= 0);
  CHECK(pg().rank() < pg().world_size());
}

TEST_CASE("all_reduce: sum, avg and max of known per-rank values") {
  const int W = pg().world_size(), r = pg().rank();
  // rank r holds [r + 1, 10 (r + 1), -r]
  Tensor t = gs::tensor({double(r + 1), 10.0 * (r + 1), -double(r)}, gs::kFloat64);
  Tensor s = t.clone(), a = t.clone(), m = t.clone();
  pg().all_reduce(s, dist::ReduceOp::Sum);
  pg().all_reduce(a, dist::ReduceOp::Avg);
  pg().all_reduce(m, dist::ReduceOp::Max);
  const double tri = W * (W + 1) / 2.0;  // sum of r + 1 over the ranks
  check_close(s, {tri, 10 * tri, -(tri - W)}, 0, 1e-15);
  check_close(a, {tri / W, 10 * tri / W, -(tri - W) / W}, 0, 1e-15);
  check_close(m, {double(W), 10.0 * W, 0.0}, 0, 0);

  // float32 and int64, and a non-contiguous tensor (reduced through a copy, written back).
  Tensor f = gs::full({2, 3}, float(r + 1), gs::kFloat32).t();
  pg().all_reduce(f);
  check_close(f, std::vector<double>(6, tri), 0, 0);
  Tensor i = gs::full({4}, int64_t(r + 1), gs::kInt64);
  pg().all_reduce(i, dist::ReduceOp::Max);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>(4, W));

  // scalars
  CHECK(pg().all_reduce(double(r + 1)) == tri);
  CHECK(pg().all_reduce(double(r + 1), dist::ReduceOp::Avg) == doctest::Approx(tri / W));
  CHECK(pg().all_reduce(double(-r), dist::ReduceOp::Max) == 0.0);
}

TEST_CASE("broadcast and all_gather") {
  const int W = pg().world_size(), r = pg().rank();
  const int root = W - 1;
  Tensor t = gs::full({3}, double(100 + r), gs::kFloat64);
  pg().broadcast(t, root);
  check_close(t, std::vector<double>(3, 100.0 + root), 0, 0);

  Tensor g = pg().all_gather(gs::tensor({double(r), double(r * r)}, gs::kFloat64));
  REQUIRE(g.shape() == gs::Shape{W, 2});
  std::vector<double> want;
  for (int k = 0; k < W; ++k) want.insert(want.end(), {double(k), double(k * k)});
  check_close(g, want, 0, 0);  // row k is rank k's tensor: rank order

  std::vector<double> s = pg().all_gather(double(7 * r));
  REQUIRE(s.size() == size_t(W));
  for (int k = 0; k < W; ++k) CHECK(s[size_t(k)] == 7.0 * k);
}

TEST_CASE("collectives refuse mismatched tensors on every rank, naming each rank's") {
  const int W = pg().world_size(), r = pg().rank();
  Tensor t = gs::zeros({r + 1}, gs::kFloat32);
  const std::string e = error_or_empty([&] { pg().all_reduce(t); });
  if (W > 1) {
    CHECK(e.find("dist::all_reduce") != std::string::npos);
    CHECK(e.find("rank 0 float32[1]") != std::string::npos);
    CHECK(e.find("rank 1 float32[2]") != std::string::npos);
  } else {
    CHECK(e.empty());
  }
  Tensor d = r == 0 ? gs::zeros({2}, gs::kFloat32) : gs::zeros({2}, gs::kFloat64);
  const std::string e2 = error_or_empty([&] { pg().broadcast(d, 0); });
  if (W > 1) CHECK(e2.find("rank 1 float64[2]") != std::string::npos);

  // Avg of integers would truncate: refused before any communication, on every rank.
  Tensor i = gs::ones({2}, gs::kInt64);
  CHECK(error_or_empty([&] { pg().all_reduce(i, dist::ReduceOp::Avg); }).find("would truncate") != std::string::npos);
  // The group still works afterwards (no rank was left inside a collective).
  CHECK(pg().all_reduce(1.0) == double(W));
}

TEST_CASE("DDP: after backward every rank holds the full-batch gradient") {
  const int W = pg().world_size();
  // Different initial weights per rank: the construction broadcast must make them equal.
  auto ddp = std::make_shared<dist::DistributedDataParallel>(make_mlp(dist::rank_seed(1, pg())), pg());
  for (auto& t : ddp->parameters()) {
    Tensor all = pg().all_gather(t.detach());
    for (int k = 1; k < W; ++k) check_close(all[k], vals(all[0]), 0, 0);
  }
  mse((*ddp)(my_rows(global_x(W), pg())), my_rows(global_y(W), pg())).backward();
  auto want = full_batch_grads(*ddp, W);
  auto params = ddp->parameters();
  REQUIRE(params.size() == want.size());
  for (size_t k = 0; k < params.size(); ++k) check_close(params[k].grad(), want[k], 1e-14, 1e-12);
  CHECK(ddp->reduced_parameters().size() == 4);
  CHECK(ddp->registered_parameters() == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  // The default 25 MB bucket holds this whole model: one all-reduce per backward (when W > 1).
  CHECK(ddp->num_buckets() == 1);
  CHECK(ddp->reduce_calls() == (W > 1 ? 1 : 1));
}

TEST_CASE("DDP: small buckets are reduced separately, last layer first") {
  const int W = pg().world_size();
  dist::DDPOptions o;
  o.bucket_bytes = 1;  // one parameter per bucket
  auto ddp = std::make_shared<dist::DistributedDataParallel>(make_mlp(3), pg(), o);
  REQUIRE(ddp->num_buckets() == 4);
  CHECK(ddp->bucket_layout()[0] == std::vector<std::string>{"2.bias"});
  CHECK(ddp->bucket_layout()[3] == std::vector<std::string>{"0.weight"});
  mse((*ddp)(my_rows(global_x(W), pg())), my_rows(global_y(W), pg())).backward();
  CHECK(ddp->reduce_calls() == 4);
  auto want = full_batch_grads(*ddp, W);
  auto params = ddp->parameters();
  for (size_t k = 0; k < params.size(); ++k) check_close(params[k].grad(), want[k], 1e-14, 1e-12);
  CHECK(ddp->reduced_parameters() == std::vector<std::string>{"2.bias", "2.weight", "0.bias", "0.weight"});
}

TEST_CASE("DDP: gradient accumulation over two backwards equals the sum of the full-batch gradients") {
  const int W = pg().world_size();
  dist::DDPOptions o;
  o.bucket_bytes = 64;
  auto ddp = std::make_shared<dist::DistributedDataParallel>(make_mlp(4), pg(), o);
  for (int i = 0; i < 2; ++i) {
    Tensor scale = gs::full({}, static_cast<double>(i + 1), gs::kFloat64);
    (mse((*ddp)(my_rows(global_x(W), pg())), my_rows(global_y(W), pg())) * scale).backward();
  }
  auto want = full_batch_grads(*ddp, W, 2);
  auto params = ddp->parameters();
  for (size_t k = 0; k < params.size(); ++k) check_close(params[k].grad(), want[k], 1e-14, 1e-12);
}

namespace {
// Uses its second layer only when `use_b`: ranks that disagree leave b without a gradient on some of them.
struct Branchy : gs::nn::Module {
  std::shared_ptr<gs::nn::Linear> a, b;
  bool use_b = true;
  Branchy() : Module("Branchy") {
    gs::manual_seed(5);
    a = register_module("a", std::make_shared<gs::nn::Linear>(5, 5));
    b = register_module("b", std::make_shared<gs::nn::Linear>(5, 5));
    to(gs::kFloat64);
  }
  Tensor forward(const Tensor& x) override { return use_b ? (*b)((*a)(x)) : (*a)(x); }
};
}  // namespace

TEST_CASE("DDP: a parameter without a gradient on some ranks is an error naming it and the ranks") {
  const int W = pg().world_size(), r = pg().rank();
  auto m = std::make_shared<Branchy>();
  m->use_b = r == 0;
  auto ddp = std::make_shared<dist::DistributedDataParallel>(m, pg());
  Tensor x = my_rows(global_x(W), pg());
  const std::string e = error_or_empty([&] { (*ddp)(x).square().sum().backward(); });
  if (W > 1) {
    CHECK(e.find("parameter b.weight got a gradient on rank(s) 0 but none on rank(s) 1") != std::string::npos);
    CHECK(e.find("find_unused_parameters") != std::string::npos);
  } else {
    CHECK(e.empty());
  }

  // With find_unused_parameters the missing contributions count as zero: b's gradient is rank 0's / W.
  auto m2 = std::make_shared<Branchy>();
  m2->use_b = r == 0;
  dist::DDPOptions o;
  o.find_unused_parameters = true;
  auto ddp2 = std::make_shared<dist::DistributedDataParallel>(m2, pg(), o);
  (*ddp2)(x).square().sum().backward();
  // Rank 0's local gradient of b, recomputed on a plain copy.
  auto ref = std::make_shared<Branchy>();
  Tensor x0 = global_x(W).narrow(0, 0, 2);
  (*ref)(x0).square().sum().backward();
  check_close(m2->b->weight.grad(), vals(ref->b->weight.grad() / double(W)), 1e-14, 1e-12);
  CHECK(ddp2->reduced_parameters().size() == 4);
}

TEST_CASE("DDP bugs: B29 sums, B30 skips the broadcast, B33 leaves the last parameter out") {
  const int W = pg().world_size();
  Tensor x = my_rows(global_x(W), pg()), y = my_rows(global_y(W), pg());
  {
    dist::DDPOptions o;
    o.bugs.add(gs::nn::Bug::B29);
    auto ddp = std::make_shared<dist::DistributedDataParallel>(make_mlp(6), pg(), o);
    mse((*ddp)(x), y).backward();
    auto want = full_batch_grads(*ddp, W);
    auto params = ddp->parameters();
    for (size_t k = 0; k < params.size(); ++k) {
      std::vector<double> w = want[k];
      for (double& v : w) v *= W;
      check_close(params[k].grad(), w, 1e-13, 1e-12);
    }
  }
  {
    dist::DDPOptions o;
    o.bugs.add(gs::nn::Bug::B30);
    auto ddp = std::make_shared<dist::DistributedDataParallel>(make_mlp(dist::rank_seed(2, pg())), pg(), o);
    Tensor w0 = ddp->parameters()[0].detach();
    Tensor all = pg().all_gather(w0);
    // Without the broadcast each rank keeps its own draw.
    if (W > 1) CHECK(vals(all[1]) != vals(all[0]));
  }
  {
    dist::DDPOptions o;
    o.bugs.add(gs::nn::Bug::B33);
    auto ddp = std::make_shared<dist::DistributedDataParallel>(make_mlp(7), pg(), o);
    mse((*ddp)(x), y).backward();
    auto red = ddp->reduced_parameters();
    CHECK(red == std::vector<std::string>{"2.weight", "0.bias", "0.weight"});
    CHECK(ddp->registered_parameters().size() == 4);
    // 2.bias kept this rank's local gradient: it differs across ranks.
    Tensor all = pg().all_gather(ddp->parameters()[3].grad());
    if (W > 1) CHECK(vals(all[1]) != vals(all[0]));
  }
}

TEST_CASE("DDP: a parameter added after wrapping is not reduced, and reduced_parameters shows it") {
  const int W = pg().world_size();
  auto m = make_mlp(8);
  auto ddp = std::make_shared<dist::DistributedDataParallel>(m, pg());
  Tensor extra = m->register_parameter("late", gs::zeros({3}, gs::kFloat64));
  Tensor out = (*ddp)(my_rows(global_x(W), pg())) + extra;
  mse(out, my_rows(global_y(W), pg())).backward();
  const auto red = ddp->reduced_parameters();
  CHECK(std::find(red.begin(), red.end(), "late") == red.end());
  CHECK(red.size() == 4);
  CHECK(extra.grad().defined());  // it has a gradient, a local one
}

TEST_CASE("DDP: a backward that fails on every rank after some buckets started leaves DDP ready for the next") {
  const int W = pg().world_size();
  dist::DDPOptions o;
  o.bucket_bytes = 1;  // four buckets: the last layer's start before the first layer's gradient arrives
  auto m = make_mlp(9);
  auto ddp = std::make_shared<dist::DistributedDataParallel>(m, pg(), o);
  bool fail = true;
  // A hook on the first layer's output throws: the last layer's buckets have started, the first
  // layer's gradients never come.
  m->named_children()[0].second->register_forward_hook([&fail](gs::nn::Module&, const Tensor&, const Tensor& out) {
    Tensor o = out;
    o.register_hook([&fail](const Tensor&) -> Tensor {
      if (fail) throw gs::Error("test", "injected backward failure");
      return Tensor();
    });
  });
  Tensor x = my_rows(global_x(W), pg()), y = my_rows(global_y(W), pg());
  CHECK(error_or_empty([&] { mse((*ddp)(x), y).backward(); }).find("injected backward failure") != std::string::npos);
  CHECK(ddp->reduce_calls() == 2);  // 2.bias and 2.weight started, then backward failed
  fail = false;
  ddp->zero_grad();
  mse((*ddp)(x), y).backward();
  auto want = full_batch_grads(*ddp, W);
  auto params = ddp->parameters();
  for (size_t k = 0; k < params.size(); ++k) check_close(params[k].grad(), want[k], 1e-14, 1e-12);
  CHECK(ddp->reduced_parameters().size() == 4);
}

// ---- 16-bit tensors (docs/distributed.md, "16-bit tensors") ------------------------------------
namespace {

// 64 values per rank whose sums need rounding in 16 bits, over several octaves and both signs.
Tensor values16(int rank, gs::DType dt) {
  std::vector<double> v;
  for (int i = 0; i < 64; ++i)
    v.push_back((1.0 + i / 64.0 + 0.013 * rank) * std::ldexp(1.0, i % 7 - 3) * (rank % 2 ? 1.0 : -0.37));
  return gs::tensor(v, {64}, gs::kFloat64).to(dt);
}
std::vector<double> f64(const Tensor& t) { return t.detach().to(gs::kFloat64).contiguous().to_vector<double>(); }

// |got - want| <= k * eps(dt) * max|want|, elementwise: "" or the first element that is not.
std::string within(const Tensor& got, const Tensor& want, gs::DType dt, double k) {
  const auto g = f64(got), w = f64(want);
  if (g.size() != w.size()) return "sizes differ";
  double m = 0;
  for (double x : w) m = std::max(m, std::abs(x));
  const double tol = k * reduced_float::eps_of(dt) * m;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::abs(g[i] - w[i]) <= tol))
      return gs::detail::str_cat("element ", i, ": ", g[i], " vs ", w[i], " (tolerance ", tol, ")");
  return "";
}

// A float32 MLP (the same weights on every rank for a given seed).
std::shared_ptr<gs::nn::Sequential> make_mlp32(uint64_t seed) {
  auto m = make_mlp(seed);
  m->to(gs::kFloat32);
  return m;
}
void copy_params(gs::nn::Module& to, gs::nn::Module& from) {
  gs::NoGradGuard ng;
  auto src = from.parameters(), dst = to.parameters();
  for (size_t k = 0; k < dst.size(); ++k) dst[k].copy_(src[k]);
}

}  // namespace

TEST_CASE("16-bit all_reduce: the float32 sum of the ranks' values, rounded to the dtype") {
  const int W = pg().world_size(), r = pg().rank();
  for (gs::DType dt : {gs::kFloat16, gs::kBFloat16}) {
    CAPTURE(gs::dtype_name(dt));
    const Tensor mine = values16(r, dt);
    Tensor all = pg().all_gather(mine);  // (W, 64): every rank's values, in rank order
    REQUIRE(all.dtype() == dt);
    CHECK(f64(all[r]) == f64(mine));
    // What the reduction must give: each element's float32 sum, rounded once (with more than two
    // ranks MPI combines pairwise, each combination rounded: a bound of W - 1 half-ulps).
    const Tensor want = all.to(gs::kFloat32).sum({0}).to(dt);
    if (W > 1) CHECK(f64(want) != f64(all.to(gs::kFloat64).sum({0})));  // the values do need rounding

    Tensor s = mine.clone();
    pg().all_reduce(s);
    REQUIRE(s.dtype() == dt);
    if (W <= 2)
      CHECK(f64(s) == f64(want));
    else
      CHECK(within(s, want, dt, 0.5 * (W - 1)) == "");

    Tensor a = mine.clone();
    pg().all_reduce(a, dist::ReduceOp::Avg);
    CHECK(f64(a) == f64((s.to(gs::kFloat32) / static_cast<float>(W)).to(dt)));

    Tensor m = mine.clone();
    pg().all_reduce(m, dist::ReduceOp::Max);
    CHECK(f64(m) == f64(all.to(gs::kFloat32).max(0).to(dt)));

    // DDP's path: the asynchronous all-reduce of a contiguous buffer.
    Tensor b = mine.clone();
    auto work = pg().all_reduce_async(b, "a 16-bit test buffer");
    work.wait();
    CHECK(f64(b) == f64(s));

    // A NaN on one rank, an inf on another: both reach every rank, as the float32 sum gives them.
    Tensor special = mine.clone();
    {
      gs::NoGradGuard ng;
      if (r == 0) special.narrow(0, 0, 1).fill_(std::nan(""));
      if (r == W - 1) special.narrow(0, 1, 1).fill_(INFINITY);
    }
    Tensor sm = special.clone();
    pg().all_reduce(special);
    pg().all_reduce(sm, dist::ReduceOp::Max);
    for (const Tensor& t : {special, sm}) {
      const auto v = f64(t);
      CHECK(std::isnan(v[0]));
      CHECK(v[1] == INFINITY);
    }

    Tensor bc = gs::full({5}, 1.0 + 0.25 * r, dt);
    pg().broadcast(bc, W - 1);
    CHECK(f64(bc) == std::vector<double>(5, 1.0 + 0.25 * (W - 1)));
  }
}

TEST_CASE("DDP with bfloat16 parameters: the averaged 16-bit gradient is the global batch's within the 16-bit rule") {
  const int W = pg().world_size();
  auto m = make_mlp32(21);
  m->to(gs::kBFloat16);
  auto ddp = std::make_shared<dist::DistributedDataParallel>(m, pg());
  const Tensor x = global_x(W).to(gs::kBFloat16), y = global_y(W).to(gs::kBFloat16);
  mse((*ddp)(my_rows(x, pg())), my_rows(y, pg())).backward();
  auto ref = make_mlp32(0);
  ref->to(gs::kBFloat16);
  copy_params(*ref, *m);
  mse((*ref)(x), y).backward();
  auto got = m->parameters(), want = ref->parameters();
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    CAPTURE(k);
    REQUIRE(got[k].grad().dtype() == gs::kBFloat16);
    // linear's backward (2 roundings, doubled, plus 2) with the all-reduce's and the division's.
    CHECK(within(got[k].grad(), want[k].grad(), gs::kBFloat16, 8) == "");
  }
}

TEST_CASE("DDP under autocast: N ranks' steps equal one process's steps on the global batch (bf16, fp16 + scaler)") {
  const int W = pg().world_size();
  for (gs::DType dt : {gs::kBFloat16, gs::kFloat16}) {
    CAPTURE(gs::dtype_name(dt));
    auto m = make_mlp32(31), ref = make_mlp32(0);
    copy_params(*ref, *m);
    std::vector<Tensor> init;
    for (auto& p : m->parameters()) init.push_back(p.detach().clone());
    auto ddp = std::make_shared<dist::DistributedDataParallel>(m, pg());
    gs::optim::SGD opt(m->parameters(), gs::optim::SGDOptions(0.5));
    gs::optim::SGD ref_opt(ref->parameters(), gs::optim::SGDOptions(0.5));
    const bool scaled = dt == gs::kFloat16;
    gs::optim::GradScaler scaler(gs::optim::GradScalerOptions().init_scale(1024.0).enabled(scaled));
    gs::optim::GradScaler ref_scaler(gs::optim::GradScalerOptions().init_scale(1024.0).enabled(scaled));
    const Tensor x = global_x(W).to(gs::kFloat32), y = global_y(W).to(gs::kFloat32);
    for (int step = 0; step < 3; ++step) {
      for (auto [model, o, sc, xb, yb] :
           {std::tuple{static_cast<gs::nn::Module*>(ddp.get()), &opt, &scaler, my_rows(x, pg()), my_rows(y, pg())},
            std::tuple{static_cast<gs::nn::Module*>(ref.get()), &ref_opt, &ref_scaler, x, y}}) {
        o->zero_grad();
        Tensor loss;
        {
          auto ac = gs::autocast(dt);
          loss = mse((*model)(xb), yb);
        }
        sc->scale(loss).backward();
        sc->step(*o);
        sc->update();
      }
    }
    CHECK(scaler.get_scale() == ref_scaler.get_scale());
    // The updates (float32 parameters) agree to the 16-bit rule, scaled by the update's size.
    auto got = m->parameters(), want = ref->parameters();
    for (size_t k = 0; k < got.size(); ++k) {
      CAPTURE(k);
      CHECK(within(got[k] - init[k], want[k] - init[k], dt, 8) == "");
    }
  }
}
