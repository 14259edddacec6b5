// The grader of lab 10 (data-parallel training). The answer keys are written here: the
// padded strided shards by a loop, the averaged gradient by the grader's own all-reduce of
// each rank's local gradient, and the replica checks' verdicts by the debug module's
// data-parallel checks (D11, M21, M22, O7) run next to the student's code. Tasks 10.2 and
// 10.3 need at least two ranks (mpirun -np 2); alone they are reported skipped with the
// command to run. Every rank grades (the cases call collectives); rank 0 prints.
//
// Dimension letters: N = examples, B = batch, C = classes, D = features.
#include "tutorials/grader/grader.h"
#include "tutorials/grader/labs.h"
#include "tutorials/lab10_dist/lab10.h"

#include <iostream>
#include <set>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/dist/dist_checks.h"
#include "debug/evidence/catalogue.h"
#include "distributed/ddp.h"
#include "distributed/sampler.h"
#include "nn/nn.h"
#include "optim/sgd.h"

namespace gradsleuth::labs {

namespace {

dist::ProcessGroup& world() { return dist::ProcessGroup::world(); }

// Tasks 10.2 and 10.3 talk to other ranks: alone there is nothing to average or compare.
void need_ranks() {
  if (world().world_size() < 2)
    throw Skip(std::string("needs at least 2 processes (this grader runs alone") +
               (dist::mpi_available() ? "" : ", and was built without MPI") +
               "): grade with `mpirun -np 2 build/tutorials/lab10_grader check 10` (as root in a container, add "
               "--allow-run-as-root)");
}

// ---- Task 10.1's key ------------------------------------------------------------------------
std::vector<int64_t> key_shard(int64_t n, int rank, int world, uint64_t seed, int64_t epoch) {
  if (n == 0) return {};
  Generator g(seed + static_cast<uint64_t>(epoch));
  std::vector<int64_t> order = randperm(n, &g).to_vector<int64_t>();
  const int64_t total = (n + world - 1) / world * world;
  for (int64_t i = 0; static_cast<int64_t>(order.size()) < total; ++i) order.push_back(order[static_cast<size_t>(i)]);
  std::vector<int64_t> out;
  for (int64_t i = rank; i < total; i += world) out.push_back(order[static_cast<size_t>(i)]);
  return out;
}

std::string list_str(const std::vector<int64_t>& v, size_t k = 12) {
  std::string s = "[";
  for (size_t i = 0; i < v.size() && i < k; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() > k ? ", ... (" + std::to_string(v.size()) + ")]" : "]");
}

// The student's shards for every rank, checked against the key, then D11 on them.
// seed: the sampler's seed on the public inputs; the instructor's input seed (grader.h) maps it
// to another.
void shards_case(Check& c, int64_t n, int ws, uint64_t public_seed, int64_t epoch) {
  const uint64_t seed = input_seed(public_seed);
  c.input("n = " + std::to_string(n) + ", " + std::to_string(ws) + " ranks, seed " + std::to_string(seed) + ", epoch " +
          std::to_string(epoch));
  std::vector<std::vector<int64_t>> got;
  for (int r = 0; r < ws; ++r) {
    got.push_back(lab10::shard_indices(n, r, ws, seed, epoch));
    const std::vector<int64_t> want = key_shard(n, r, ws, seed, epoch);
    c.require(got.back() == want,
              "rank " + std::to_string(r) + ": expected " + list_str(want) + ", got " + list_str(got.back()));
  }
  const auto d11 = debug::check_shards(got, n, epoch);
  c.require(!d11.empty() && !d11.front().fires(), "internal: D11 fired on the key's shards");
  c.note("D11 on your shards: " + d11.front().title);
}

// ---- Task 10.2: a small model, a different batch per rank ------------------------------------
std::shared_ptr<nn::Sequential> small_mlp(bool dropout) {
  auto m = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 32), std::make_shared<nn::ReLU>());
  if (dropout) m->push_back(std::make_shared<nn::Dropout>(0.3));
  m->push_back(std::make_shared<nn::Linear>(32, 3));
  return m;
}

struct Blobs {
  Tensor x, y;
};
Blobs blobs() {
  auto d = nn::make_blobs(40, 3, 6, 1.0, 17);
  Generator g(18);
  Tensor perm = randperm(d->size(), &g);
  return {d->x().index_select(0, perm), d->y().index_select(0, perm)};
}

std::vector<Tensor> grads_of(const nn::Module& m) {
  std::vector<Tensor> out;
  for (const auto& [name, p] : m.named_parameters())
    if (p.requires_grad()) out.push_back(p.grad());
  return out;
}

debug::PerRank gather(const std::vector<double>& v) {
  const int64_t n = static_cast<int64_t>(v.size());
  const std::vector<double> all = world().all_gather(tensor(v, {n}, kFloat64)).contiguous().to_vector<double>();
  debug::PerRank out;
  for (int r = 0; r < world().world_size(); ++r) out.emplace_back(all.begin() + r * n, all.begin() + (r + 1) * n);
  return out;
}

void average_case(Check& c, bool freeze_first) {
  need_ranks();
  auto& pg = world();
  const int ws = pg.world_size();
  c.input(std::string("Linear(6, 32), ReLU, Linear(32, 3), the same weights on every rank") +
          (freeze_first ? ", the first Linear frozen (no gradient)" : "") +
          "; rank r's batch: 8 blobs examples of its own; " + std::to_string(ws) + " ranks");
  manual_seed(21);
  auto m = small_mlp(false);
  if (freeze_first) (*m)[0]->requires_grad_(false);
  const Blobs d = blobs();
  nn::CrossEntropyLoss ce;
  ce(m->forward(d.x.narrow(0, 8 * pg.rank(), 8)), d.y.narrow(0, 8 * pg.rank(), 8)).backward();
  // The key: the average of the ranks' local gradients, by the grader's own all-reduce.
  std::vector<Tensor> want;
  for (const Tensor& g : grads_of(*m)) {
    if (!g.defined()) {
      want.push_back(Tensor());
      continue;
    }
    Tensor a = g.clone();
    pg.all_reduce(a, dist::ReduceOp::Avg);
    want.push_back(a);
  }
  lab10::average_gradients(*m, pg);
  // O7 on the result: identical on every rank, and equal to the average (not the sum).
  debug::GradReduction in;
  in.names = debug::trainable_names(*m);
  in.reduced = gather(debug::fingerprint_grads(*m));
  in.scale = debug::reduction_scales(grads_of(*m), want);
  in.world_size = ws;
  const auto o7 = debug::check_gradient_reduction(in);
  if (!o7.empty()) c.fail("O7 (debug::check_gradient_reduction) on your gradients:\n" + o7.front().str());
  const std::vector<Tensor> got = grads_of(*m);
  const auto names = debug::trainable_names(*m);
  for (size_t i = 0; i < got.size(); ++i) {
    if (!want[i].defined()) {
      c.require(!got[i].defined(), names[i] + " had no gradient (frozen) and must keep none, got " + describe(got[i]));
      continue;
    }
    c.require(got[i].defined(), "the gradient of " + names[i] + " is gone after average_gradients");
    c.require_close(got[i], want[i], "the gradient of " + names[i] + " (the average over the ranks)", 1e-5, 1e-7);
  }
  c.note("O7 on your gradients: silent (identical on every rank, reduced / averaged = " +
         fixed(debug::reduction_scale(in), 6) + ")");
}

// ---- Task 10.3: three data-parallel runs, the student's checks attached ------------------------
// The recipe: a per-rank seed (the initialisation differs per rank, DDP's broadcast makes the
// replicas equal; the dropout masks differ), DDP, the distributed sampler, SGD.
//   'A': DDP skips its initial broadcast (B30)    'B': every rank seeds with the same value (B32)
struct RunOut {
  debug::Report students, reference;
};
RunOut run_recipe(char which) {
  auto& pg = world();
  const uint64_t seed = 100;
  manual_seed(which == 'B' ? seed : dist::rank_seed(seed, pg));
  auto m = small_mlp(true);
  dist::DDPOptions o;
  if (which == 'A') o.bugs = nn::BugSet{nn::Bug::B30};
  auto ddp = std::make_shared<dist::DistributedDataParallel>(m, pg, o);
  optim::SGD opt(m->parameters(), optim::SGDOptions(0.1));
  const Blobs d = blobs();
  dist::DistributedSamplerOptions so;
  so.seed = 3;
  dist::DistributedSampler sampler(d.x.size(0), pg.rank(), pg.world_size(), so);
  const std::vector<int64_t> idx = sampler.indices();
  nn::CrossEntropyLoss ce;
  RunOut out;
  const int64_t B = 10;
  for (int64_t step = 1; step * B <= static_cast<int64_t>(idx.size()) && step <= 6; ++step) {
    const Tensor rows = tensor(std::vector<int64_t>(idx.begin() + (step - 1) * B, idx.begin() + step * B), {B});
    // What the checks see before the step: the generator the forward is about to draw from.
    const debug::PerRank gen = gather(debug::randomness_fingerprint());
    opt.zero_grad();
    ce((*ddp)(d.x.index_select(0, rows)), d.y.index_select(0, rows)).backward();
    opt.step();
    // The student's checks, then the reference (the library's), on the same state. The student's
    // reads the generator after the step: the forward advanced it by the same amount on every rank.
    out.students.add(lab10::check_replicas(*m, pg, step));
    out.reference.add(
        debug::check_params_in_sync(debug::trainable_names(*m), gather(debug::fingerprint_params(*m)), step));
    out.reference.add(debug::check_rank_randomness(gen, true, step));
  }
  return out;
}

std::string fired_str(const debug::Report& r) {
  std::string s;
  for (const auto& f : r.findings())
    if (f.fires()) s += "\n" + f.str();
  return s.empty() ? " none" : s;
}

void replica_case(Check& c, char which, const std::string& must_fire) {
  need_ranks();
  c.input(which == 'C' ? "a correct data-parallel run (per-rank seed, DDP, distributed sampler), 6 steps"
                       : std::string("mystery ") + which + ": the same recipe with one bug, 6 steps");
  const RunOut r = run_recipe(which);
  const std::vector<std::string> ref_fired = r.reference.fired_checks();
  c.require(must_fire.empty() ? ref_fired.empty() : r.reference.fired(must_fire),
            "internal: the reference checks disagree with the expected verdict");
  if (must_fire.empty()) {
    c.require(r.students.fired_checks().empty(),
              "your checks fire on a correct run (they must stay silent):" + fired_str(r.students));
    c.require(!r.students.of("M21").empty() || !r.students.of("M22").empty(),
              "your checks returned nothing: return the findings of check_params_in_sync (M21) and "
              "check_rank_randomness (M22), the info ones too");
    c.note("your checks on the correct run: nothing fired");
  } else {
    c.require(r.students.fired(must_fire), "the reference checks find this bug with " + debug::check_label(must_fire) +
                                               ", yours did not fire it; yours fired:" + fired_str(r.students));
    const std::vector<debug::Finding> fs = r.students.of(must_fire);
    for (const auto& f : fs)
      if (f.fires()) {
        c.note("mystery " + std::string(1, which) + ", your checks found:\n" + f.str());
        break;
      }
  }
}

}  // namespace

Lab make_lab10() {
  // Every rank grades (the cases talk to each other); only rank 0 prints the report.
  if (world().rank() != 0) std::cout.rdbuf(nullptr);
  world().set_timeout(120);  // a case that throws on one rank only must not freeze the others for long

  Lab lab;
  lab.number = 10;
  lab.dir = "lab10_dist";
  lab.title = "Data-parallel training: sharding, gradient averaging, and its silent bugs";
  lab.starter = "tutorials/lab10_dist/lab10.cpp";

  lab.tasks.push_back(
      {1,
       "one shard per rank",
       25,
       "lab10::shard_indices()",
       {{"2 ranks, n = 10 (no padding)", [](Check& c) { shards_case(c, 10, 2, 3, 0); }},
        {"3 ranks, n = 1001 (padded with 2)", [](Check& c) { shards_case(c, 1001, 3, 5, 4); }},
        {"4 ranks, n = 7 (padded with 1)", [](Check& c) { shards_case(c, 7, 4, 1, 2); }},
        {"1 rank reads everything once", [](Check& c) { shards_case(c, 50, 1, 9, 0); }},
        {"a new shuffle each epoch, the same one for a repeated epoch",
         [](Check& c) {
           c.input("n = 200, 2 ranks, seed 7, epochs 0, 1 and 0 again");
           const auto e0 = lab10::shard_indices(200, 0, 2, 7, 0), e1 = lab10::shard_indices(200, 0, 2, 7, 1);
           c.require(e0 != e1, "rank 0 reads the same order in epochs 0 and 1: seed the shuffle with seed + epoch");
           c.require(lab10::shard_indices(200, 0, 2, 7, 0) == e0, "epoch 0 twice gave two orders");
         }},
        {"bad arguments fail loudly",
         [](Check& c) {
           c.input("rank 2 of 2; world_size 0; n = -1");
           c.require_throws([] { lab10::shard_indices(10, 2, 2, 0, 0); }, "shard_indices(rank 2 of 2)");
           c.require_throws([] { lab10::shard_indices(10, 0, 0, 0, 0); }, "shard_indices(world_size 0)");
           c.require_throws([] { lab10::shard_indices(-1, 0, 2, 0, 0); }, "shard_indices(n = -1)");
         }},
        {"every rank on rank 0's shard is what D11 catches (bug B31)", [](Check& c) {
           c.input("n = 100, 2 ranks: both ranks call shard_indices with rank 0");
           const auto s = lab10::shard_indices(100, 0, 2, 2, 0);
           const auto d11 = debug::check_shards({s, s}, 100, 0);
           c.require(!d11.empty() && d11.front().fires(), "D11 did not fire on two identical shards of " + list_str(s) +
                                                              ": are your shards half the dataset?");
           c.note("D11 on rank 0's shard read twice: " + d11.front().title);
         }}}});

  lab.tasks.push_back({2,
                       "average the gradients",
                       25,
                       "lab10::average_gradients()",
                       {{"every parameter, averaged over the ranks", [](Check& c) { average_case(c, false); }, 2},
                        {"a frozen layer is skipped", [](Check& c) { average_case(c, true); }}}});

  lab.tasks.push_back({3,
                       "check the replicas",
                       30,
                       "lab10::check_replicas()",
                       {{"a correct run: silent", [](Check& c) { replica_case(c, 'C', ""); }},
                        {"mystery A is caught", [](Check& c) { replica_case(c, 'A', "M21"); }},
                        {"mystery B is caught", [](Check& c) { replica_case(c, 'B', "M22"); }}}});

  lab.tasks.push_back(
      {4,
       "name the two bugs",
       20,
       "lab10::mystery_bugs()",
       {{"mystery A and mystery B", [](Check& c) {
           c.input("the ids of mystery A's and mystery B's bugs, in that order");
           const std::vector<std::string> got = lab10::mystery_bugs();
           c.require_eq(static_cast<int64_t>(got.size()), 2, "the number of ids");
           c.require(got[0] == "B30", "mystery A is not " + got[0] +
                                          ": every parameter differs across ranks from the very first step, and "
                                          "the gradients are averaged correctly; what should have made the "
                                          "replicas equal before training started?");
           c.require(got[1] == "B32", "mystery B is not " + got[1] +
                                          ": the replicas stay equal and the data is sharded, yet the ranks draw "
                                          "the same random numbers; where does a rank's dropout get its seed?");
         }}}});
  return lab;
}

}  // namespace gradsleuth::labs
