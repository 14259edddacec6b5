// The data-parallel library in one process: DistributedSampler for ranks 0..W-1 built side by
// side, the DataLoader reading through it, rank_seed, the world of 1, DDP in a world of 1.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "core/ops.h"
#include "distributed/dist.h"
#include "nn/container.h"
#include "nn/data.h"
#include "nn/linear.h"
#include "nn_test_util.h"

namespace dist = gs::dist;
using gs::Tensor;

namespace {
std::vector<std::vector<int64_t>> shards(int64_t n, int W, dist::DistributedSamplerOptions o, int64_t epoch = 0) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < W; ++r) {
    dist::DistributedSampler s(n, r, W, o);
    s.set_epoch(epoch);
    out.push_back(s.indices());
    CHECK(static_cast<int64_t>(out.back().size()) == s.num_samples());
  }
  return out;
}
}  // namespace

TEST_CASE("DistributedSampler: disjoint shards that cover the epoch when W divides n") {
  for (int W : {1, 2, 3, 4}) {
    const int64_t n = 12;
    auto sh = shards(n, W, {.seed = 3});
    std::vector<int64_t> all;
    for (auto& s : sh) {
      CHECK(s.size() == size_t(n / W));
      all.insert(all.end(), s.begin(), s.end());
    }
    std::sort(all.begin(), all.end());
    std::vector<int64_t> want(n);
    std::iota(want.begin(), want.end(), 0);
    CHECK(all == want);  // each row exactly once: disjoint and complete
  }
}

TEST_CASE("DistributedSampler: padding wraps around, drop_last cuts") {
  const int64_t n = 10;
  const int W = 4;
  auto sh = shards(n, W, {.shuffle = false});
  // ceil(10/4) = 3 each: positions 0..11 of 0..9 then 0, 1 again, interleaved.
  CHECK(sh[0] == std::vector<int64_t>{0, 4, 8});
  CHECK(sh[1] == std::vector<int64_t>{1, 5, 9});
  CHECK(sh[2] == std::vector<int64_t>{2, 6, 0});
  CHECK(sh[3] == std::vector<int64_t>{3, 7, 1});
  auto cut = shards(n, W, {.shuffle = false, .drop_last = true});
  CHECK(cut[0] == std::vector<int64_t>{0, 4});
  CHECK(cut[3] == std::vector<int64_t>{3, 7});
  // More ranks than rows: wraps more than once, every rank still gets one row.
  auto tiny = shards(2, 3, {.shuffle = false});
  CHECK(tiny[2] == std::vector<int64_t>{0});
  CHECK_THROWS_WITH_AS(dist::DistributedSampler(2, 0, 3, {.drop_last = true}), doctest::Contains("nothing"), gs::Error);
  CHECK_THROWS_WITH_AS(dist::DistributedSampler(10, 2, 2), doctest::Contains("rank 2 is not in [0, 2)"), gs::Error);
}

TEST_CASE("DistributedSampler: reshuffled every epoch, the same on every rank") {
  auto e0 = shards(100, 2, {.seed = 9}, 0);
  auto e1 = shards(100, 2, {.seed = 9}, 1);
  CHECK(e0[0] != e1[0]);
  auto again = shards(100, 2, {.seed = 9}, 0);
  CHECK(again == e0);
  // The interleaved shards of the single-process order for seed + epoch.
  const auto perm = gs::nn::shuffle_order(100, 9 + 1);
  for (size_t i = 0; i < e1[1].size(); ++i) CHECK(e1[1][i] == perm[2 * i + 1]);
}

TEST_CASE("DistributedSampler: B31 gives every rank the whole epoch") {
  dist::DistributedSamplerOptions o{.seed = 2};
  o.bugs.add(gs::nn::Bug::B31);
  auto sh = shards(10, 2, o);
  CHECK(sh[0] == sh[1]);
  CHECK(sh[0].size() == 10);
}

TEST_CASE("DataLoader through DistributedSamplers: step k of W ranks at batch B is step k of one process at W*B") {
  const int64_t n = 48, B = 4;
  const int W = 3;
  auto ds = std::make_shared<gs::nn::TensorDataset>(gs::arange(double(n), gs::kFloat64).reshape({n, 1}),
                                                    gs::arange(double(n), gs::kInt64));
  gs::nn::DataLoader single(ds, gs::nn::DataLoaderOptions().batch_size(W * B).shuffle(true).seed(5));
  std::vector<gs::nn::DataLoader> ranks;
  for (int r = 0; r < W; ++r) {
    auto s = std::make_shared<dist::DistributedSampler>(n, r, W, dist::DistributedSamplerOptions{.seed = 5});
    ranks.emplace_back(ds, gs::nn::DataLoaderOptions().batch_size(B).sampler(s));
  }
  for (int epoch = 0; epoch < 2; ++epoch) {
    REQUIRE(single.num_batches() == ranks[0].num_batches());
    for (int64_t k = 0; k < single.num_batches(); ++k) {
      auto want = single.batch(epoch, k).indices;
      std::vector<int64_t> got;
      for (auto& l : ranks) {
        auto b = l.batch(epoch, k);
        got.insert(got.end(), b.indices.begin(), b.indices.end());
      }
      std::sort(want.begin(), want.end());
      std::sort(got.begin(), got.end());
      CHECK(got == want);
    }
  }
  // The loader calls set_epoch itself: two range-for epochs differ.
  std::vector<int64_t> first, second;
  for (const auto& b : ranks[0]) first.insert(first.end(), b.indices.begin(), b.indices.end());
  for (const auto& b : ranks[0]) second.insert(second.end(), b.indices.begin(), b.indices.end());
  CHECK(first.size() == 16);
  CHECK(first != second);
}

TEST_CASE("rank_seed: deterministic, different per rank and from the seed itself") {
  std::set<uint64_t> seen;
  for (int r = 0; r < 64; ++r) {
    CHECK(dist::rank_seed(7, r) == dist::rank_seed(7, r));
    seen.insert(dist::rank_seed(7, r));
  }
  CHECK(seen.size() == 64);
  CHECK(seen.count(7) == 0);
  CHECK(dist::rank_seed(7, 0) != dist::rank_seed(8, 0));
}

TEST_CASE("without a launcher the world is one rank and collectives are the identity") {
  auto& pg = dist::ProcessGroup::world();
  if (pg.world_size() != 1) return;  // run under mpirun by hand: nothing to check here
  CHECK(pg.rank() == 0);
  Tensor t = gs::tensor({1.0, 2.0});
  pg.all_reduce(t, dist::ReduceOp::Avg);
  nntest::check_close(t, {1.0, 2.0}, 0, 0);
  CHECK(pg.all_gather(t).shape() == gs::Shape{1, 2});
  CHECK(pg.all_reduce(3.0) == 3.0);
  Tensor i = gs::ones({2}, gs::kInt64);
  CHECK_THROWS_WITH_AS(pg.all_reduce(i, dist::ReduceOp::Avg), doctest::Contains("would truncate"), gs::Error);
  CHECK_THROWS_WITH_AS(pg.broadcast(t, 1), doctest::Contains("root 1"), gs::Error);
}

TEST_CASE("DDP in a world of one leaves gradients as a plain model's") {
  gs::manual_seed(1);
  auto m = std::make_shared<gs::nn::Sequential>(std::make_shared<gs::nn::Linear>(3, 2));
  m->to(gs::kFloat64);
  Tensor x = gs::arange(6.0, gs::kFloat64).reshape({2, 3});
  (*m)(x).square().sum().backward();
  std::vector<std::vector<double>> want;
  for (auto& p : m->parameters()) want.push_back(nntest::vals(p.grad()));
  m->zero_grad();
  dist::DistributedDataParallel ddp(m);
  ddp(x).square().sum().backward();
  auto ps = ddp.parameters();
  for (size_t k = 0; k < ps.size(); ++k) nntest::check_close(ps[k].grad(), want[k], 0, 0);
  CHECK(ddp.reduced_parameters() == std::vector<std::string>{"0.bias", "0.weight"});
  CHECK(ddp.registered_parameters() == std::vector<std::string>{"0.weight", "0.bias"});
}
