// All the loader checks at once (check_loader: D1-D3, D8, D9 on a DataLoader; see data_checks.h).
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

// ---- all loader checks at once ---------------------------------------------------------------

namespace {
// Float targets of one column ((N) or (N, 1)) holding 0 and 1 only: a binary task's labels.
bool binary_labels(const Tensor& y) {
  if (!y.is_floating_point() || y.numel() == 0 || !(y.dim() == 1 || (y.dim() == 2 && y.size(1) == 1))) return false;
  const std::vector<double> v = doubles(y);
  return std::all_of(v.begin(), v.end(), [](double t) { return t == 0.0 || t == 1.0; });
}
}  // namespace

std::vector<Finding> check_loader(const nn::DataLoader& loader, int64_t num_classes, const DataCheckOptions& opts) {
  std::vector<nn::Batch> batches;
  for (int64_t i : spread_batches(loader, opts.diversity_batches)) batches.push_back(loader.batch(loader.epoch(), i));
  if (batches.empty()) return {};  // drop_last with fewer rows than one batch
  tensor_list xs, ys;
  for (const nn::Batch& b : batches) {
    xs.push_back(b.x);
    ys.push_back(b.y);
  }
  Tensor X, Y;
  {
    NoGradGuard ng;
    X = cat(xs);
    Y = cat(ys);
  }
  std::vector<Finding> out = check_batch(batches[0].x, batches[0].y);
  auto add = [&](std::vector<Finding> fs) { out.insert(out.end(), fs.begin(), fs.end()); };
  add(check_finite_inputs(X, Y));
  const bool classes = is_integral(Y.dtype()) || num_classes > 0;
  if (classes) {
    add(check_label_distribution(Y, num_classes, opts));
  } else if (binary_labels(Y)) {
    // A binary task's float targets (BCE): 0. and 1. in one column are the two classes' labels.
    NoGradGuard ng;
    add(check_label_distribution(Y.reshape({-1}), 2, opts));
  }
  add(check_normalisation(X, opts));
  add(diversity(batches, loader, opts));
  if (classes) {
    add(check_label_encoding(Y, num_classes, opts));
  } else {
    add(empty_one_hot_rows(Y));
    add(constant_target_columns(Y));
    add(check_target_scales(Y, opts));
  }
  return out;
}

}  // namespace gradsleuth::debug
