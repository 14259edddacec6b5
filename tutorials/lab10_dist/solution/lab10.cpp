// Lab 10 reference solution: data-parallel training and its silent bugs.
#include "tutorials/lab10_dist/lab10.h"

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/dist/dist_checks.h"

namespace gradsleuth::lab10 {

std::vector<int64_t> shard_indices(int64_t n, int rank, int world_size, uint64_t seed, int64_t epoch) {
  GS_CHECK(world_size >= 1, "shard_indices", "world_size must be >= 1, got ", world_size);
  GS_CHECK(rank >= 0 && rank < world_size, "shard_indices", "rank must be in [0, ", world_size, "), got ", rank);
  GS_CHECK(n >= 0, "shard_indices", "n must be >= 0, got ", n);
  if (n == 0) return {};
  Generator g(seed + static_cast<uint64_t>(epoch));
  std::vector<int64_t> order = randperm(n, &g).to_vector<int64_t>();
  const int64_t total = (n + world_size - 1) / world_size * world_size;
  for (int64_t i = 0; static_cast<int64_t>(order.size()) < total; ++i) order.push_back(order[static_cast<size_t>(i)]);
  std::vector<int64_t> mine;
  for (int64_t i = rank; i < total; i += world_size) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

void average_gradients(nn::Module& model, dist::ProcessGroup& pg) {
  NoGradGuard ng;
  for (auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad() || !p.grad().defined()) continue;
    Tensor g = p.grad().clone();
    pg.all_reduce(g, dist::ReduceOp::Sum);
    p.set_grad(g / static_cast<double>(pg.world_size()));
  }
}

namespace {
debug::PerRank gather(dist::ProcessGroup& pg, const std::vector<double>& v) {
  const int64_t n = static_cast<int64_t>(v.size());
  const std::vector<double> all = pg.all_gather(tensor(v, {n}, kFloat64)).contiguous().to_vector<double>();
  debug::PerRank out;
  for (int r = 0; r < pg.world_size(); ++r) out.emplace_back(all.begin() + r * n, all.begin() + (r + 1) * n);
  return out;
}
bool has_dropout(const nn::Module& m) {
  if (m.type_name() == "Dropout") return true;
  for (const auto& [name, c] : m.named_children())
    if (has_dropout(*c)) return true;
  return false;
}
}  // namespace

std::vector<debug::Finding> check_replicas(const nn::Module& model, dist::ProcessGroup& pg, int64_t step) {
  std::vector<debug::Finding> out =
      debug::check_params_in_sync(debug::trainable_names(model), gather(pg, debug::fingerprint_params(model)), step);
  const bool random_layers = model.is_training() && has_dropout(model);
  for (debug::Finding& f :
       debug::check_rank_randomness(gather(pg, debug::randomness_fingerprint()), random_layers, step))
    out.push_back(std::move(f));
  return out;
}

std::vector<std::string> mystery_bugs() { return {"B30", "B32"}; }

}  // namespace gradsleuth::lab10
