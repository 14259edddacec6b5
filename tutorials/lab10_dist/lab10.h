// Lab 10: data-parallel training and its silent bugs (README.md in this folder).
// Declared once for your code (lab10.cpp) and the reference solution
// (solution/lab10.cpp); the grader (../grader/grade_lab10.cpp) calls them here and
// compares with distributed/ (DistributedSampler, DistributedDataParallel) and the debug
// module's data-parallel checks (debug/checks/dist/dist_checks.h: D11, M21, M22, O7).
//
// Tasks 10.2 and 10.3 need several processes: grade them with
//   mpirun -np 2 build/tutorials/lab10_grader check 10
// (alone, the grader reports them "skipped" and says so).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "debug/evidence/finding.h"
#include "distributed/process_group.h"
#include "nn/module.h"

namespace gradsleuth::lab10 {

// Task 10.1: the indices rank `rank` of `world_size` reads in epoch `epoch` of a dataset of
// `n` examples. Every rank shuffles the same way: perm = randperm(n) drawn from
// Generator(seed + epoch); the epoch is padded to total = ceil(n / world_size) * world_size
// by appending perm[0], perm[1], ... (total - n of them); rank r takes positions r,
// r + world_size, r + 2 world_size, ... of that padded list. gs::Error for world_size < 1,
// rank outside [0, world_size) or n < 0.
std::vector<int64_t> shard_indices(int64_t n, int rank, int world_size, uint64_t seed, int64_t epoch);

// Task 10.2: after loss.backward() on every rank, make each trainable parameter's gradient the
// average over the ranks of their gradients: all-reduce (sum) a copy, divide by the world size,
// put it back with set_grad. Parameters without a gradient (frozen) are skipped on every rank.
void average_gradients(nn::Module& model, dist::ProcessGroup& pg);

// Task 10.3: the replica checks, called by every rank after the optimizer step `step`: gather
// the fingerprints of the model's trainable parameters (debug::fingerprint_params) and of the
// random generator (debug::randomness_fingerprint) from every rank, and return what
// debug::check_params_in_sync (M21) and debug::check_rank_randomness (M22) say about them.
std::vector<debug::Finding> check_replicas(const nn::Module& model, dist::ProcessGroup& pg, int64_t step);

// Task 10.4: the grader trains two data-parallel recipes, "mystery A" and "mystery B", each with
// one bug of the catalog (docs/catalog.md, B29-B34) and your check_replicas attached; the report
// shows what your checks found. Return the two bugs' ids: {"B..", "B.."} (A first).
std::vector<std::string> mystery_bugs();

}  // namespace gradsleuth::lab10
