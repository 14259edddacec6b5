// The data-parallel checks D11, L8, M21, M22, O7 and W9 (debug/checks/dist/dist_checks.h) on
// simulated ranks, in one process: each check gets the numbers N ranks would gather,
// built from real models, gradients, samplers and generators, once from a correct
// data-parallel step and once from its buggy twin (B29-B34). The buggy twin must
// fire with the check's id and severity, the clean one must stay silent. (The same
// checks under mpirun, on real ranks, are exercised by the distributed zoo test.)
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/dist/dist_checks.h"
#include "nn/nn.h"

#include "debug_test_util.h"

namespace dbg = gs::debug;
namespace nn = gs::nn;
using gs::Tensor;

namespace {

using dtest::evidence;
using dtest::find;
using dtest::fires;

// Strided shards of an epoch as a DistributedSampler deals them: the permutation padded to a
// multiple of the world size, rank r reading positions r, r + N, ...
std::vector<std::vector<int64_t>> strided_shards(int64_t n, int world, uint64_t seed, bool same_rank) {
  gs::Generator g(seed);
  Tensor perm = gs::randperm(n, &g);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = perm[i].item<int64_t>();
  const int64_t per = (n + world - 1) / world;
  for (int64_t i = 0; static_cast<int64_t>(order.size()) < per * world; ++i)
    order.push_back(order[static_cast<size_t>(i)]);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const int rank = same_rank ? 0 : r;  // B31: every rank reads rank 0's positions
    for (int64_t i = rank; i < per * world; i += world)
      out[static_cast<size_t>(r)].push_back(order[static_cast<size_t>(i)]);
  }
  return out;
}

// One data-parallel step of N replicas of the small reference MLP, by hand: each rank's local
// gradient on its own batch, then the reduction as asked. Returns per rank the model after the
// reduction (its .grad() set) and the average of the local gradients.
struct Ranks {
  std::vector<std::shared_ptr<nn::Sequential>> models;
  std::vector<Tensor> averaged;  // per trainable parameter
};
enum class Reduce { Average, Sum, SkipLast };
Ranks step(int world, Reduce how, bool same_init = true) {
  Ranks out;
  const auto data = dtest::blobs(16, 3, 6);
  nn::CrossEntropyLoss ce;
  std::vector<std::vector<Tensor>> local;
  for (int r = 0; r < world; ++r) {
    auto m = dtest::mlp(6, 8, 3, same_init ? 1 : 1 + static_cast<uint64_t>(r));
    m->eval();  // no dropout: the local gradients are a function of the weights and the batch only
    Tensor x = data.x.narrow(0, 8 * r, 8), y = data.y.narrow(0, 8 * r, 8);
    ce(m->forward(x), y).backward();
    std::vector<Tensor> g;
    for (const auto& [n, p] : m->named_parameters()) g.push_back(p.grad().clone());
    local.push_back(g);
    out.models.push_back(m);
  }
  const size_t P = local[0].size();
  for (size_t p = 0; p < P; ++p) {
    Tensor s = local[0][p].clone();
    for (int r = 1; r < world; ++r) s = s + local[static_cast<size_t>(r)][p];
    out.averaged.push_back(s / static_cast<double>(world));
  }
  for (int r = 0; r < world; ++r) {
    auto params = out.models[static_cast<size_t>(r)]->parameters();
    for (size_t p = 0; p < P; ++p) {
      if (how == Reduce::SkipLast && p + 1 == P) continue;  // B33: the last parameter keeps its local gradient
      Tensor g = how == Reduce::Sum ? out.averaged[p] * static_cast<double>(world) : out.averaged[p].clone();
      params[p].set_grad(g);
    }
  }
  return out;
}

dbg::GradReduction reduction_of(const Ranks& ranks, int world) {
  dbg::GradReduction in;
  in.names = dbg::trainable_names(*ranks.models[0]);
  for (const auto& m : ranks.models) in.reduced.push_back(dbg::fingerprint_grads(*m));
  std::vector<Tensor> red;
  for (const auto& p : ranks.models[0]->parameters()) red.push_back(p.grad());
  in.scale = dbg::reduction_scales(red, ranks.averaged);
  in.world_size = world;
  return in;
}

}  // namespace

TEST_CASE("fingerprints: equal tensors give equal values, an undefined one (0, -1)") {
  Tensor a = gs::randn({5, 7});
  const auto f = dbg::fingerprint({a, a.clone(), Tensor()});
  REQUIRE(f.size() == 6);
  CHECK(f[0] == f[2]);
  CHECK(f[1] == f[3]);
  CHECK(f[1] > 0.0);
  CHECK(f[4] == 0.0);
  CHECK(f[5] == -1.0);
  // The sum of squares is the squared norm, in float64.
  CHECK(f[1] == doctest::Approx(gs::sum(a.to(gs::kFloat64) * a.to(gs::kFloat64)).item<double>()).epsilon(1e-12));
}

TEST_CASE("D11: strided shards are disjoint and complete; every rank on rank 0's shard warns (B31)") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    const auto good = dbg::check_shards(strided_shards(1001, world, 5, false), 1001, 0);
    CHECK_FALSE(fires(good));
    REQUIRE(find(good, "D11", dbg::Severity::Info) != nullptr);
    CHECK(evidence(good[0], "indices read by more than one rank") <= world - 1);  // the padding only

    const auto bad = dbg::check_shards(strided_shards(1001, world, 5, true), 1001, 0);
    const dbg::Finding* f = find(bad, "D11");
    REQUIRE(f != nullptr);
    CHECK(f->severity == dbg::Severity::Warning);
    CHECK(f->title.find("every rank reads the same examples") != std::string::npos);
    CHECK(evidence(*f, "indices read by no rank") >= 1001 - 1001 / world - world);
  }
  // Each rank shuffling the whole dataset with its own seed (a plain loader per rank): overlap, not the same set.
  std::vector<std::vector<int64_t>> whole(2);
  for (int64_t i = 0; i < 100; ++i) whole[0].push_back(i), whole[1].push_back(99 - i);
  const auto wf = dbg::check_shards(whole, 100);
  const dbg::Finding* f = find(wf, "D11");
  REQUIRE(f != nullptr);
  CHECK(evidence(*f, "indices read by more than one rank") == 100);
  CHECK_THROWS(dbg::check_shards({}, 10));
}

TEST_CASE("L8: the global mean logged is silent; rank 0's loss or a double average warns (B34)") {
  dbg::LoggedLossCheck good, rank0, twice;
  for (int64_t s = 1; s <= 20; ++s) {
    const std::vector<double> losses = {2.0 / static_cast<double>(s), 1.0 + 0.5 / static_cast<double>(s)};
    const std::vector<double> sizes = {64, 64};
    const double global = (losses[0] + losses[1]) / 2.0;
    good.record(s, losses, sizes, static_cast<double>(static_cast<float>(global)));  // a float32 all-reduce
    rank0.record(s, losses, sizes, losses[0]);
    twice.record(s, losses, sizes, global / 2.0);
  }
  const auto g = good.findings();
  CHECK_FALSE(fires(g));
  REQUIRE(find(g, "L8", dbg::Severity::Info) != nullptr);

  const auto r0 = rank0.findings();
  const dbg::Finding* f = find(r0, "L8");
  REQUIRE(f != nullptr);
  CHECK(f->severity == dbg::Severity::Warning);
  CHECK(f->title.find("rank 0's local loss") != std::string::npos);
  CHECK(evidence(*f, "steps where logged != global") == 20);

  const auto tw = twice.findings();
  const dbg::Finding* t = find(tw, "L8");
  REQUIRE(t != nullptr);
  CHECK(t->title.find("averaged twice") != std::string::npos);
  CHECK(evidence(*t, "logged / global (median over those steps)") == doctest::Approx(0.5));

  // Unequal batch sizes: the global loss is the batch-weighted mean, not the plain one.
  dbg::LoggedLossCheck weighted;
  weighted.record(1, {1.0, 4.0}, {30, 10}, (1.0 * 30 + 4.0 * 10) / 40.0);
  CHECK_FALSE(fires(weighted.findings()));
  dbg::LoggedLossCheck plain;
  plain.record(1, {1.0, 4.0}, {30, 10}, 2.5);
  const auto pf = plain.findings();
  CHECK(find(pf, "L8") != nullptr);
}

TEST_CASE("M21: replicas after an averaged step are identical; different initial weights are an error (B30)") {
  const Ranks ok = step(2, Reduce::Average, true);
  const auto names = dbg::trainable_names(*ok.models[0]);
  dbg::PerRank same;
  for (const auto& m : ok.models) same.push_back(dbg::fingerprint_params(*m));
  CHECK(dbg::check_params_in_sync(names, same, 1).empty());

  const Ranks b30 = step(2, Reduce::Average, false);  // each rank initialised with its own seed, no broadcast
  dbg::PerRank apart;
  for (const auto& m : b30.models) apart.push_back(dbg::fingerprint_params(*m));
  const auto fs = dbg::check_params_in_sync(names, apart, 1);
  const dbg::Finding* f = find(fs, "M21");
  REQUIRE(f != nullptr);
  CHECK(f->severity == dbg::Severity::Error);
  CHECK(f->step == 1);
  // The weights and biases differ; BatchNorm's weight (ones) and bias (zeros) start equal on every rank.
  CHECK(evidence(*f, "parameters that differ") == static_cast<double>(names.size()) - 2);
  CHECK(f->cause.find("the replicas did not start from the same weights") == 0);
  // Before the first step only the start can be to blame, and the title says when.
  const auto fs0 = dbg::check_params_in_sync(names, apart, 0);
  REQUIRE(find(fs0, "M21") != nullptr);
  CHECK(find(fs0, "M21")->title.find("before the first step") != std::string::npos);

  // One parameter nudged on rank 1 only (an update applied with its local gradient): named.
  {
    gs::NoGradGuard ng;
    auto p = ok.models[1]->parameters().back();
    p.add_(gs::full_like(p, 1e-7));
  }
  dbg::PerRank one;
  for (const auto& m : ok.models) one.push_back(dbg::fingerprint_params(*m));
  const auto gs1 = dbg::check_params_in_sync(names, one, 2);
  const dbg::Finding* g = find(gs1, "M21");
  REQUIRE(g != nullptr);
  CHECK(g->parameter == names.back());
  CHECK(evidence(*g, "parameters that differ") == 1);
  CHECK(g->cause.find("their gradients were not all-reduced") == 0);
  // A tolerance lets it pass (for replicas synchronised only up to rounding).
  dbg::DistCheckOptions loose;
  loose.sync_tolerance = 1e-3;
  CHECK(dbg::check_params_in_sync(names, one, 2, loose).empty());
  CHECK_THROWS(dbg::check_params_in_sync(names, {{1.0, 2.0}}, 1));
}

TEST_CASE("M22: per-rank seeds draw differently; one seed on every rank warns (B32)") {
  auto fp = [](uint64_t seed) {
    gs::manual_seed(seed);
    return dbg::randomness_fingerprint();
  };
  // Reading the fingerprint does not advance the generator.
  gs::manual_seed(7);
  const auto a = dbg::randomness_fingerprint();
  CHECK(dbg::randomness_fingerprint() == a);

  const dbg::PerRank good = {fp(1 + 0), fp(1 + 1)};
  CHECK_FALSE(fires(dbg::check_rank_randomness(good, true)));
  const dbg::PerRank bad = {fp(1), fp(1)};
  const auto fs = dbg::check_rank_randomness(bad, true, 3);
  const dbg::Finding* f = find(fs, "M22");
  REQUIRE(f != nullptr);
  CHECK(f->severity == dbg::Severity::Warning);
  CHECK(f->title.find("0=1") != std::string::npos);
  // The same seed is harmless when nothing random runs.
  CHECK_FALSE(fires(dbg::check_rank_randomness(bad, false)));
  // A dropout mask really is the same with the same seed, and differs with seed + rank.
  auto mask = [](uint64_t seed) {
    gs::manual_seed(seed);
    nn::Dropout d(0.5);
    return d.forward(gs::ones({64}));
  };
  CHECK(gs::equal(mask(1), mask(1)));
  CHECK_FALSE(gs::equal(mask(1), mask(2)));
}

TEST_CASE("O7: averaged gradients are silent; summed (B29) and a parameter left out (B33) fire") {
  const dbg::GradReduction ok = reduction_of(step(2, Reduce::Average), 2);
  CHECK(dbg::check_gradient_reduction(ok).empty());
  CHECK(dbg::reduction_scale(ok) == doctest::Approx(1.0).epsilon(1e-6));

  for (int world : {2, 3}) {
    CAPTURE(world);
    const dbg::GradReduction sum = reduction_of(step(world, Reduce::Sum), world);
    const auto fs = dbg::check_gradient_reduction(sum);
    const dbg::Finding* f = find(fs, "O7");
    REQUIRE(f != nullptr);
    CHECK(f->severity == dbg::Severity::Warning);
    CHECK(f->title.find("summed across ranks, not averaged") != std::string::npos);
    CHECK(evidence(*f, "reduced / averaged gradient (median over parameters)") ==
          doctest::Approx(static_cast<double>(world)).epsilon(1e-5));
  }

  dbg::GradReduction skip = reduction_of(step(2, Reduce::SkipLast), 2);
  skip.reduced_names_known = true;
  skip.reduced_names.assign(skip.names.begin(), skip.names.end() - 1);
  const auto fs = dbg::check_gradient_reduction(skip);
  const dbg::Finding* e = find(fs, "O7", dbg::Severity::Error);
  REQUIRE(e != nullptr);
  CHECK(e->parameter == skip.names.back());
  CHECK(evidence(*e, "gradients that differ across ranks") == 1);
  int warnings = 0;
  for (const auto& f : fs) warnings += f.severity == dbg::Severity::Warning ? 1 : 0;
  CHECK(warnings == 1);  // the reduced list; not "summed": the reduced parameters are averaged
  CHECK(dbg::reduction_scale(skip) == doctest::Approx(1.0).epsilon(1e-6));
}

TEST_CASE("W9: reports the effective batch; a summed gradient warns with lr x N (B29)") {
  const auto info = dbg::report_effective_batch(2, 64, 1e-3, 1.0);
  REQUIRE(info.size() == 1);
  CHECK(info[0].check == "W9");
  CHECK(info[0].severity == dbg::Severity::Info);
  CHECK(evidence(info[0], "effective batch") == 128);
  const dbg::GradReduction sum = reduction_of(step(2, Reduce::Sum), 2);
  const auto warn = dbg::report_effective_batch(2, 64, 1e-3, dbg::reduction_scale(sum));
  REQUIRE(warn.size() == 1);
  CHECK(warn[0].severity == dbg::Severity::Warning);
  CHECK(evidence(warn[0], "effective learning rate") == doctest::Approx(2e-3).epsilon(1e-5));
  // Not measured: info only.
  CHECK_FALSE(fires(dbg::report_effective_batch(4, 32, 0.1, std::nan(""))));
}
