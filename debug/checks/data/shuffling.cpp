// D8 shuffling and batch diversity (see data_checks.h).
#include "debug/checks/data/data_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/data/data_util.h"

namespace gradsleuth::debug {

using namespace data_detail;

// ---- D8 shuffling / batch diversity ---------------------------------------------------------

std::vector<int64_t> spread_batches(const nn::DataLoader& loader, int64_t n) {
  const int64_t nb = loader.num_batches();
  n = std::min(n, nb);
  std::vector<int64_t> out;
  if (n <= 0) return out;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = n == 1 ? 0 : static_cast<int64_t>(std::llround(static_cast<double>(k) * (nb - 1) / (n - 1)));
    if (out.empty() || out.back() != i) out.push_back(i);
  }
  return out;
}

std::vector<Finding> check_batch_diversity(const nn::DataLoader& loader, const DataCheckOptions& opts) {
  std::vector<nn::Batch> batches;
  for (int64_t i : spread_batches(loader, opts.diversity_batches)) batches.push_back(loader.batch(loader.epoch(), i));
  return diversity(batches, loader, opts);
}

}  // namespace gradsleuth::debug
