// The distributed bug zoo: under `mpirun -np N` (N >= 2), every rank trains one
// replica of the reference MLP on its shard of Fashion-MNIST with
// dist::DistributedDataParallel, once clean and once per data-parallel bug
// (B29-B34, the table's "dist" recipe), with the data-parallel checks attached
// (D11, L8, M21, M22, O7, W9; debug/checks/dist/dist_checks.h). `gradsleuth zoo
// --distributed` prints its detection matrix on rank 0.
//
//   auto& pg = dist::ProcessGroup::world();
//   debug::dist_zoo::Result r = debug::dist_zoo::run(debug::dist_zoo::catalog(), {}, pg);
//   if (pg.rank() == 0) std::cout << debug::dist_zoo::matrix(r);
//
// The recipe (one rank's view):
//   manual_seed(dist::rank_seed(seed, pg))    per-rank seed: the initialisation differs per rank
//                                             (DDP's broadcast makes the replicas equal) and so do
//                                             the dropout masks       [B32: manual_seed(seed)]
//   DistributedDataParallel(mlp, pg, {bugs})  [B29 sum, B30 no broadcast, B33 last parameter left out]
//   DistributedSampler(n, rank, N, {bugs})    [B31 ignores the rank]
//   SGD(lr 0.02, momentum 0.9), batch 64 per rank
//   logged loss = all-reduced batch-weighted mean of the local losses   [B34: rank 0's local loss]
// Checked steps (the first, then every check_every-th): O7 compares the reduced gradients across
// ranks and with the average of the local gradients (measured on a copy of the replica with the
// same random state, so the real step is unchanged), M21 the parameters after the step, M22 the
// ranks' random generators before the forward; D11 the epoch's shards; L8 every step's logged loss;
// W9 at the end. This library links MPI (gradsleuth_dist); gradsleuth_debug does not.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "debug/zoo/zoo.h"
#include "distributed/process_group.h"
#include "nn/bugs.h"

namespace gradsleuth::debug::dist_zoo {

struct Options {
  int64_t train_examples = 4000;  // the first N training images, split among the ranks
  int64_t test_examples = 1000;   // evaluated on rank 0
  int64_t steps = 100;            // optimizer steps per variant
  int64_t batch_size = 64;        // per rank
  double lr = 0.02;               // SGD with momentum 0.9
  uint64_t seed = 1;
  int64_t check_every = 10;  // the checked steps: 1, 1 + check_every, ...
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
};

// The data-parallel bugs (the table's "dist" recipe), in order.
std::vector<nn::Bug> catalog();

// Trains the clean reference and each bug on every rank of pg (collective: every rank calls it with
// the same arguments). The results are complete on every rank. Refuses a world of 1 and a bug
// whose recipe is not "dist". progress(done, total, line) is called on every rank after each variant.
struct Result {
  zoo::RunResult clean;
  std::vector<zoo::RunResult> bugs;
  int world_size = 1;
  double seconds = 0.0;
  Options options;
};
Result run(const std::vector<nn::Bug>& bugs, const Options& o, dist::ProcessGroup& pg,
           const std::function<void(size_t done, size_t total, const std::string& line)>& progress = nullptr);

// One variant (the clean reference when bugs is empty).
zoo::RunResult run_variant(const nn::BugSet& bugs, const Options& o, dist::ProcessGroup& pg);

// The detection matrix, in the look of `gradsleuth zoo`'s, and its JSON.
std::string matrix(const Result& r);
std::string json(const Result& r);

// The check ids of the distributed zoo (D11 L8 M21 M22 O7 W9).
const std::vector<std::string>& dist_check_ids();

}  // namespace gradsleuth::debug::dist_zoo
