// DistributedSampler: which rows of a dataset each rank trains on.
//
//   dist::DistributedSampler s(train->size(), pg.rank(), pg.world_size(), {.seed = 1});
//   nn::DataLoader loader(train, nn::DataLoaderOptions().batch_size(B).sampler(ptr_to_s));
//
// Every rank draws the SAME permutation of [0, n) (nn::shuffle_order(n, seed + epoch), the
// order a single-process DataLoader with shuffle(true).seed(seed) visits epoch `epoch` in) and
// takes every world_size-th element of it starting at its rank: rank r gets positions
// r, r + W, r + 2W, ... (interleaved shards). So the ranks' shards are disjoint, their union
// is the whole epoch, and — the property data-parallel training relies on — batch k of
// every rank at per-rank batch size B together hold exactly the rows of batch k of one
// process at batch size W*B (positions [k*W*B, (k+1)*W*B) of the permutation). With the
// gradients averaged, N ranks at batch B take the same steps as one process at batch N*B.
//
// Padding: when W does not divide n, the permutation is extended by wrapping around to its
// first elements until its length is a multiple of W (PyTorch does the same), so every rank
// has num_samples() = ceil(n / W) rows and runs the same number of steps (a rank with one
// batch fewer would leave the others waiting in the all-reduce). A few rows are then seen
// twice per epoch. With drop_last the tail is dropped instead: num_samples() = floor(n / W)
// and up to W-1 rows are not seen that epoch (a different set each epoch when shuffling).
//
// Bug B31 (DistributedSamplerOptions::bugs): the rank is ignored and every rank gets the whole
// permutation, so N ranks compute the same gradient N times (an epoch is N times as long and
// the effective batch is one rank's).
#pragma once
#include <cstdint>
#include <vector>

#include "nn/bugs.h"
#include "nn/data.h"

namespace gradsleuth::dist {

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  nn::BugSet bugs{};
};

class DistributedSampler : public nn::Sampler {
 public:
  DistributedSampler(int64_t dataset_size, int rank, int world_size, DistributedSamplerOptions o = {});
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  std::vector<int64_t> indices() const override;                      // this rank's rows for the current epoch
  int64_t num_samples() const override;                               // per rank
  int64_t total_size() const { return num_samples() * world_size_; }  // padded (or cut) epoch length
  int64_t dataset_size() const { return n_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const DistributedSamplerOptions& options() const { return o_; }

 private:
  int64_t n_;
  int rank_, world_size_;
  DistributedSamplerOptions o_;
  int64_t epoch_ = 0;
};

}  // namespace gradsleuth::dist
