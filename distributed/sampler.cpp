// DistributedSampler (see sampler.h): each rank's interleaved shard of one shared permutation.
#include "distributed/sampler.h"

#include <numeric>

namespace gradsleuth::dist {

DistributedSampler::DistributedSampler(int64_t dataset_size, int rank, int world_size, DistributedSamplerOptions o)
    : n_(dataset_size), rank_(rank), world_size_(world_size), o_(std::move(o)) {
  GS_CHECK(world_size >= 1, "DistributedSampler", "world_size must be at least 1, got ", world_size);
  GS_CHECK(rank >= 0 && rank < world_size, "DistributedSampler", "rank ", rank, " is not in [0, ", world_size,
           "): pass ProcessGroup::rank() and world_size()");
  GS_CHECK(dataset_size > 0, "DistributedSampler", "the dataset is empty");
  GS_CHECK(!o_.drop_last || dataset_size >= world_size, "DistributedSampler", "drop_last with ", dataset_size,
           " rows over ", world_size, " ranks leaves every rank with nothing");
}

int64_t DistributedSampler::num_samples() const {
  if (o_.bugs.has(nn::Bug::B31)) [[unlikely]]
    return n_;
  return o_.drop_last ? n_ / world_size_ : (n_ + world_size_ - 1) / world_size_;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> perm;
  if (o_.shuffle) {
    perm = nn::shuffle_order(n_, o_.seed + static_cast<uint64_t>(epoch_));
  } else {
    perm.resize(static_cast<size_t>(n_));
    std::iota(perm.begin(), perm.end(), int64_t{0});
  }
  if (o_.bugs.has(nn::Bug::B31)) [[unlikely]] {
    // BUG B31: the rank is ignored, every rank reads the whole epoch: the ranks average N copies
    // of the same gradient. Correct: the interleaved shard below.
    return perm;
  }
  const int64_t total = num_samples() * world_size_;
  // Pad by wrapping around (possibly more than once when n < world_size), or cut the tail.
  for (int64_t i = n_; i < total; ++i) perm.push_back(perm[static_cast<size_t>((i - n_) % n_)]);
  perm.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples()));
  for (int64_t i = rank_; i < total; i += world_size_) mine.push_back(perm[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace gradsleuth::dist
