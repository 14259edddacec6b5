// Datasets, the DataLoader, splits and the Normalizer (see data.h).
#include "nn/data.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"

namespace gradsleuth::nn {

// ---- Dataset ------------------------------------------------------------------

void Dataset::check_index(int64_t index, const char* op) const {
  GS_CHECK(index >= 0 && index < size(), op, "index ", index, " is out of range for ", name(), " of size ", size());
}

Batch Dataset::get_batch(const std::vector<int64_t>& indices) const {
  GS_CHECK(!indices.empty(), "Dataset::get_batch", "asked ", name(), " for an empty batch");
  tensor_list xs, ys;
  xs.reserve(indices.size());
  ys.reserve(indices.size());
  for (int64_t i : indices) {
    Example e = get(i);
    xs.push_back(e.x);
    ys.push_back(e.y);
  }
  NoGradGuard ng;
  return Batch{stack(xs), stack(ys), indices};
}

Batch Dataset::all() const {
  std::vector<int64_t> idx(static_cast<size_t>(size()));
  std::iota(idx.begin(), idx.end(), int64_t{0});
  return get_batch(idx);
}

// ---- TensorDataset -------------------------------------------------------------

TensorDataset::TensorDataset(Tensor x, Tensor y, std::string name) : name_(std::move(name)) {
  GS_CHECK(x.defined() && y.defined(), "TensorDataset", "needs two defined tensors");
  GS_CHECK(x.dim() >= 1 && y.dim() >= 1, "TensorDataset", "X and Y need a first (example) dim, got X ", x.str(),
           " and Y ", y.str());
  GS_CHECK(x.size(0) == y.size(0), "TensorDataset", "X ", x.str(), " and Y ", y.str(),
           " must have the same number of rows (dim 0): ", x.size(0), " vs ", y.size(0));
  // Data is not a parameter: drop any history so batches never join a graph.
  x_ = x.detach().contiguous();
  y_ = y.detach().contiguous();
}

Example TensorDataset::get(int64_t index) const {
  check_index(index, "TensorDataset::get");
  return Example{x_.select(0, index), y_.select(0, index)};
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  GS_CHECK(!indices.empty(), "TensorDataset::get_batch", "asked ", name_, " for an empty batch");
  for (int64_t i : indices) check_index(i, "TensorDataset::get_batch");
  NoGradGuard ng;
  Tensor idx = tensor(indices, {static_cast<int64_t>(indices.size())});
  return Batch{index_select(x_, 0, idx), index_select(y_, 0, idx), indices};
}

// ---- Subset --------------------------------------------------------------------

Subset::Subset(DatasetPtr base, std::vector<int64_t> indices, std::string name)
    : base_(std::move(base)), indices_(std::move(indices)), name_(std::move(name)) {
  GS_CHECK(base_ != nullptr, "Subset", "needs a dataset");
  if (name_.empty()) name_ = base_->name() + "[subset]";
  for (int64_t i : indices_)
    GS_CHECK(i >= 0 && i < base_->size(), "Subset", "row ", i, " is out of range for ", base_->name(), " of size ",
             base_->size());
}

Example Subset::get(int64_t index) const {
  check_index(index, "Subset::get");
  return base_->get(indices_[static_cast<size_t>(index)]);
}

Batch Subset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> rows;
  rows.reserve(indices.size());
  for (int64_t i : indices) {
    check_index(i, "Subset::get_batch");
    rows.push_back(indices_[static_cast<size_t>(i)]);
  }
  Batch b = base_->get_batch(rows);
  b.indices = indices;
  return b;
}

DatasetPtr take(DatasetPtr d, int64_t n) {
  if (n < 0 || n >= d->size()) return d;
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), int64_t{0});
  return std::make_shared<Subset>(d, std::move(idx), d->name() + "[:" + std::to_string(n) + "]");
}

// Fisher–Yates with a Philox stream: the same (n, seed) always gives the same order.
std::vector<int64_t> shuffle_order(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  Generator g(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[g.next_below(static_cast<uint64_t>(i + 1))]);
  return p;
}
namespace {
std::vector<int64_t> permutation(int64_t n, uint64_t seed) { return shuffle_order(n, seed); }
}  // namespace

std::pair<std::shared_ptr<Subset>, std::shared_ptr<Subset>> train_val_split(DatasetPtr d, double val_fraction,
                                                                            uint64_t seed) {
  GS_CHECK(d != nullptr, "train_val_split", "needs a dataset");
  GS_CHECK(val_fraction >= 0.0 && val_fraction <= 1.0, "train_val_split", "val_fraction must be in [0, 1], got ",
           val_fraction);
  const int64_t n = d->size();
  const int64_t n_val = static_cast<int64_t>(std::llround(val_fraction * static_cast<double>(n)));
  std::vector<int64_t> p = permutation(n, seed);
  std::vector<int64_t> train(p.begin(), p.end() - n_val), val(p.end() - n_val, p.end());
  return {std::make_shared<Subset>(d, std::move(train), d->name() + "/train"),
          std::make_shared<Subset>(d, std::move(val), d->name() + "/val")};
}

// ---- DataLoader ----------------------------------------------------------------

struct DataLoader::OrderCache {
  std::mutex mu;
  int64_t epoch = -1;
  std::shared_ptr<const std::vector<int64_t>> order;
};

DataLoader::DataLoader(DatasetPtr dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), opts_(options), order_cache_(std::make_shared<OrderCache>()) {
  GS_CHECK(dataset_ != nullptr, "DataLoader", "needs a dataset");
  GS_CHECK(opts_.batch_size_ > 0, "DataLoader", "batch_size must be positive, got ", opts_.batch_size_);
  GS_CHECK(dataset_->size() > 0, "DataLoader", "the dataset ", dataset_->name(), " is empty");
}

int64_t DataLoader::num_batches() const {
  const int64_t n = opts_.sampler_ ? opts_.sampler_->num_samples() : dataset_->size(), b = opts_.batch_size_;
  return opts_.drop_last_ ? n / b : (n + b - 1) / b;
}

std::vector<int64_t> DataLoader::order(int64_t epoch) const {
  const int64_t n = dataset_->size();
  if (opts_.sampler_) {
    opts_.sampler_->set_epoch(epoch);
    std::vector<int64_t> rows = opts_.sampler_->indices();
    GS_CHECK(static_cast<int64_t>(rows.size()) == opts_.sampler_->num_samples(), "DataLoader", "the sampler gave ",
             rows.size(), " indices for epoch ", epoch, " but num_samples() says ", opts_.sampler_->num_samples());
    for (int64_t r : rows)
      GS_CHECK(r >= 0 && r < n, "DataLoader", "the sampler gave row ", r, " of ", dataset_->name(), ", which has ", n,
               " rows: was the sampler made for another dataset size?");
    return rows;
  }
  if (opts_.bugs_.has(Bug::B28)) [[unlikely]] {
    // BUG B28: shuffle ignored, and the rows come sorted by class (as many files
    // store them): every batch holds one class, and each step pulls the model
    // towards that class. Correct: the permutation below.
    if (b28_sorted_rows_.empty()) {
      std::vector<int64_t> label(static_cast<size_t>(n));
      for (int64_t lo = 0; lo < n; lo += 4096) {
        std::vector<int64_t> idx(static_cast<size_t>(std::min(n, lo + 4096) - lo));
        std::iota(idx.begin(), idx.end(), lo);
        const std::vector<double> y = dataset_->get_batch(idx).y.to(kFloat64).to_vector<double>();
        for (size_t i = 0; i < idx.size() && i < y.size(); ++i)
          label[static_cast<size_t>(lo) + i] = static_cast<int64_t>(y[i]);
      }
      b28_sorted_rows_.resize(static_cast<size_t>(n));
      std::iota(b28_sorted_rows_.begin(), b28_sorted_rows_.end(), int64_t{0});
      std::stable_sort(b28_sorted_rows_.begin(), b28_sorted_rows_.end(), [&](int64_t a, int64_t b) {
        return label[static_cast<size_t>(a)] < label[static_cast<size_t>(b)];
      });
    }
    return b28_sorted_rows_;
  }
  if (opts_.shuffle_) return permutation(n, opts_.seed_ + static_cast<uint64_t>(epoch));
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  return p;
}

std::shared_ptr<const std::vector<int64_t>> DataLoader::shared_order(int64_t epoch) const {
  // Only the plain shuffle is a function of (seed, epoch, size) alone: a sampler may draw afresh.
  const bool pure = !opts_.sampler_ && !opts_.bugs_.has(Bug::B28) && opts_.shuffle_;
  if (!pure) return std::make_shared<const std::vector<int64_t>>(order(epoch));
  std::lock_guard<std::mutex> lock(order_cache_->mu);
  const size_t n = static_cast<size_t>(dataset_->size());
  if (order_cache_->epoch != epoch || !order_cache_->order || order_cache_->order->size() != n) {
    order_cache_->order = std::make_shared<const std::vector<int64_t>>(order(epoch));
    order_cache_->epoch = epoch;
  }
  return order_cache_->order;
}

Batch DataLoader::batch(int64_t epoch, int64_t i) const {
  GS_CHECK(i >= 0 && i < num_batches(), "DataLoader::batch", "batch ", i, " is out of range: an epoch has ",
           num_batches(), " batches");
  return *Iterator(this, shared_order(epoch), i);
}

DataLoader::Iterator DataLoader::begin() {
  auto o = shared_order(epoch_);
  ++epoch_;
  return Iterator(this, std::move(o), 0);
}

DataLoader::Iterator DataLoader::end() const { return Iterator(this, nullptr, num_batches()); }

void DataLoader::Iterator::load() const {
  if (loaded_) return;
  const int64_t b = loader_->opts_.batch_size_, n = static_cast<int64_t>(order_->size());
  const int64_t lo = pos_ * b, hi = std::min(n, lo + b);
  std::vector<int64_t> idx(order_->begin() + lo, order_->begin() + hi);
  batch_ = loader_->load_rows(idx);
  loaded_ = true;
}

Batch DataLoader::load_rows(const std::vector<int64_t>& rows) const {
  Batch b = dataset_->get_batch(rows);
  if (opts_.bugs_.empty()) [[likely]]
    return b;
  if (opts_.bugs_.has(Bug::B07)) {
    // BUG B07: the inputs were shuffled once on their own (np.random.shuffle(X))
    // and the labels were not: row i yields (X[perm[i]], Y[i]). Correct: one
    // permutation applied to both (which is what shuffle=true does).
    if (b07_x_rows_.empty()) b07_x_rows_ = permutation(dataset_->size(), opts_.seed_ ^ 0x5eedULL);
    std::vector<int64_t> xrows;
    for (int64_t r : rows) xrows.push_back(b07_x_rows_[static_cast<size_t>(r)]);
    b.x = dataset_->get_batch(xrows).x;
  }
  if (opts_.bugs_.has(Bug::B19) && b.y.dtype() == kInt64) {
    // BUG B19: a collate step masks every label with ignore_index (-100): the
    // cross-entropy then averages over zero labels (0/0 = NaN). Correct: mask
    // only the padding positions.
    b.y = full_like(b.y, -100.0);
  }
  return b;
}

// ---- Normalizer ----------------------------------------------------------------

namespace {

// x as contiguous float64 values, viewed as (rows, features).
std::vector<double> as_doubles(const Tensor& x) {
  NoGradGuard ng;
  return x.detach().to(kFloat64).contiguous().to_vector<double>();
}

// The dataset view Normalizer::transform(DatasetPtr) returns.
class NormalizedDataset : public Dataset {
 public:
  NormalizedDataset(DatasetPtr base, Normalizer norm) : base_(std::move(base)), norm_(std::move(norm)) {}
  int64_t size() const override { return base_->size(); }
  Example get(int64_t i) const override {
    Example e = base_->get(i);
    return Example{norm_.transform(e.x), e.y};
  }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    Batch b = base_->get_batch(indices);
    b.x = norm_.transform(b.x);
    return b;
  }
  std::string name() const override { return base_->name() + "+normalized"; }

 private:
  DatasetPtr base_;
  Normalizer norm_;
};

}  // namespace

Normalizer& Normalizer::fit(const Tensor& x, const std::string& split) {
  count_ = 0;
  mean_.clear();
  m2_.clear();
  fitted_on_.clear();
  return partial_fit(x, split);
}

Normalizer& Normalizer::partial_fit(const Tensor& x, const std::string& split) {
  GS_CHECK(x.defined() && x.dim() >= 1 && x.size(0) > 0, "Normalizer::fit",
           "needs data of shape (N, features...) with N > 0, got ", x.defined() ? x.str() : "an undefined tensor");
  GS_CHECK(x.dtype() != kBool, "Normalizer::fit", "cannot standardise a bool tensor ", x.str());
  Shape fs(x.shape().begin() + 1, x.shape().end());
  if (mode_ == Mode::Global) fs = Shape{};
  if (count_ > 0)
    GS_CHECK(fs == feature_shape_, "Normalizer::partial_fit", "the data's features ", shape_str(fs),
             " differ from those it was fitted on before ", shape_str(feature_shape_));
  const int64_t D = mode_ == Mode::Global ? 1 : numel_of(fs);
  const int64_t n = mode_ == Mode::Global ? x.numel() : x.size(0);
  std::vector<double> v = as_doubles(x);
  // This chunk's mean and sum of squared deviations per feature, in two passes.
  std::vector<double> mb(static_cast<size_t>(D), 0.0), m2b(static_cast<size_t>(D), 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t d = 0; d < D; ++d) mb[d] += v[r * D + d];
  for (auto& m : mb) m /= static_cast<double>(n);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t d = 0; d < D; ++d) {
      const double dev = v[r * D + d] - mb[d];
      m2b[d] += dev * dev;
    }
  if (count_ == 0) {
    mean_ = std::move(mb);
    m2_ = std::move(m2b);
    feature_shape_ = fs;
  } else {
    // Chan et al.'s pooled update: exact for any split of the data into chunks.
    const double na = static_cast<double>(count_), nb = static_cast<double>(n), nt = na + nb;
    for (int64_t d = 0; d < D; ++d) {
      const double delta = mb[d] - mean_[d];
      mean_[d] += delta * nb / nt;
      m2_[d] += m2b[d] + delta * delta * na * nb / nt;
    }
  }
  count_ += n;
  if (std::find(fitted_on_.begin(), fitted_on_.end(), split) == fitted_on_.end()) fitted_on_.push_back(split);
  return *this;
}

Tensor Normalizer::mean() const {
  GS_CHECK(fitted(), "Normalizer::mean", "the normalizer is not fitted yet; call fit(train_x, \"train\") first");
  return tensor(mean_, feature_shape_, kFloat32);
}

Tensor Normalizer::std() const {
  GS_CHECK(fitted(), "Normalizer::std", "the normalizer is not fitted yet; call fit(train_x, \"train\") first");
  std::vector<double> s(m2_.size());
  for (size_t d = 0; d < s.size(); ++d) s[d] = std::sqrt(m2_[d] / static_cast<double>(count_));
  return tensor(s, feature_shape_, kFloat32);
}

Tensor Normalizer::transform(const Tensor& x) const {
  GS_CHECK(fitted(), "Normalizer::transform",
           "the normalizer is not fitted yet; call fit(train_x, \"train\") on the training split first");
  if (mode_ == Mode::PerFeature) {
    const Shape& s = x.shape();
    bool ok = s.size() >= feature_shape_.size() &&
              std::equal(feature_shape_.begin(), feature_shape_.end(), s.end() - feature_shape_.size());
    GS_CHECK(ok, "Normalizer::transform", "input ", x.str(), " does not end with the features ",
             shape_str(feature_shape_), " the normalizer was fitted on");
  }
  NoGradGuard ng;
  Tensor denom = clamp(std(), eps_, std::nullopt);
  return (x.to(kFloat32) - mean()) / denom;
}

Tensor Normalizer::inverse_transform(const Tensor& z) const {
  GS_CHECK(fitted(), "Normalizer::inverse_transform", "the normalizer is not fitted yet");
  NoGradGuard ng;
  return z.to(kFloat32) * clamp(std(), eps_, std::nullopt) + mean();
}

DatasetPtr Normalizer::transform(DatasetPtr d) const {
  GS_CHECK(fitted(), "Normalizer::transform", "the normalizer is not fitted yet; call fit first");
  return std::make_shared<NormalizedDataset>(std::move(d), *this);
}

}  // namespace gradsleuth::nn
