// Data: datasets, the DataLoader that batches and shuffles them, splits and
// feature normalisation. Everything is deterministic from a seed.
//
//   auto train = nn::load_fashion_mnist("train");                    // N = 60000
//   nn::DataLoader loader(train, nn::DataLoaderOptions().batch_size(64).shuffle(true).seed(1));
//   for (const nn::Batch& b : loader) { ... b.x (B, 1, 28, 28), b.y (B) int64 ... }
//
// Dimension letters: N = examples in a dataset, B = examples in a batch,
// D... = the shape of one example's features.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/bugs.h"

namespace gradsleuth::nn {

// One example: features x (D...) and target y (a 0-dim int64 class, or a float tensor).
struct Example {
  Tensor x;
  Tensor y;
};

// A batch: x (B, D...), y (B) int64 for classes or (B, ...) float for regression,
// and which dataset rows it holds (indices[b] is the row of x[b]).
struct Batch {
  Tensor x;
  Tensor y;
  std::vector<int64_t> indices;
  int64_t size() const { return static_cast<int64_t>(indices.size()); }
};

// The interface every dataset implements: a size and random access.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  // Rows `indices` stacked along a new dim 0. The default stacks get(i) one by
  // one; datasets held as big tensors override it with a single index_select.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const;
  // A short name for messages ("fashion-mnist/train", "spirals").
  virtual std::string name() const { return "dataset"; }
  // Every example at once: get_batch(0..N-1).
  Batch all() const;

 protected:
  // Throws a clear error when index is outside [0, size()).
  void check_index(int64_t index, const char* op) const;
};
using DatasetPtr = std::shared_ptr<const Dataset>;

// A dataset held as two tensors with the same first dim: X (N, D...), Y (N, ...).
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor x, Tensor y, std::string name = "tensors");
  int64_t size() const override { return x_.size(0); }
  Example get(int64_t index) const override;                            // views of row `index`
  Batch get_batch(const std::vector<int64_t>& indices) const override;  // one index_select each
  std::string name() const override { return name_; }
  const Tensor& x() const { return x_; }
  const Tensor& y() const { return y_; }

 private:
  Tensor x_, y_;
  std::string name_;
};

// The rows `indices` of another dataset (a split, or the first N examples).
class Subset : public Dataset {
 public:
  Subset(DatasetPtr base, std::vector<int64_t> indices, std::string name = "");
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Example get(int64_t index) const override;
  // Batch.indices are positions in this subset (0..size()-1), not in the base.
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  std::string name() const override { return name_; }
  const std::vector<int64_t>& indices() const { return indices_; }  // rows of the base
  const DatasetPtr& base() const { return base_; }

 private:
  DatasetPtr base_;
  std::vector<int64_t> indices_;
  std::string name_;
};

// The first `n` examples of `d` (all of them when n < 0 or n >= size).
DatasetPtr take(DatasetPtr d, int64_t n);

// Splits `d` into (train, val): a seeded random permutation, the last
// round(val_fraction * N) rows going to val. The two are disjoint and cover d.
std::pair<std::shared_ptr<Subset>, std::shared_ptr<Subset>> train_val_split(DatasetPtr d, double val_fraction,
                                                                            uint64_t seed = 0);

// A seeded random permutation of 0..n-1 (Fisher-Yates on a Philox stream): the order a
// shuffling DataLoader visits epoch e in is shuffle_order(n, seed + e).
std::vector<int64_t> shuffle_order(int64_t n, uint64_t seed);

// ---- the loader -------------------------------------------------------------
// Decides which rows a DataLoader visits in an epoch, and in which order, instead of the
// loader's own shuffle (dist::DistributedSampler: this rank's shard). The loader calls
// set_epoch(e) before asking for epoch e's indices().
class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual void set_epoch(int64_t epoch) = 0;
  virtual std::vector<int64_t> indices() const = 0;  // rows of the dataset, in visiting order
  virtual int64_t num_samples() const = 0;           // indices().size(), for every epoch
};
using SamplerPtr = std::shared_ptr<Sampler>;

// Options in the TensorOptions style: DataLoaderOptions().batch_size(64).shuffle(true).
struct DataLoaderOptions {
  int64_t batch_size_ = 64;
  bool shuffle_ = false;
  uint64_t seed_ = 1;
  bool drop_last_ = false;  // drop a last batch smaller than batch_size
  // Injectable loader bugs (nn/bugs.h): B07 inputs shuffled without their labels,
  // B19 every label masked with ignore_index (-100), B28 no shuffling, rows sorted by class.
  BugSet bugs_;
  // When set, the rows and their order come from the sampler (shuffle_ and seed_ are then
  // unused: the sampler shuffles with its own seed); the loader calls its set_epoch.
  SamplerPtr sampler_;
  DataLoaderOptions batch_size(int64_t b) const {
    auto o = *this;
    o.batch_size_ = b;
    return o;
  }
  DataLoaderOptions shuffle(bool s) const {
    auto o = *this;
    o.shuffle_ = s;
    return o;
  }
  DataLoaderOptions seed(uint64_t s) const {
    auto o = *this;
    o.seed_ = s;
    return o;
  }
  DataLoaderOptions drop_last(bool d) const {
    auto o = *this;
    o.drop_last_ = d;
    return o;
  }
  DataLoaderOptions bug(Bug b) const {
    auto o = *this;
    o.bugs_.add(b);
    return o;
  }
  DataLoaderOptions sampler(SamplerPtr s) const {
    auto o = *this;
    o.sampler_ = std::move(s);
    return o;
  }
};

// Iterates a dataset in batches. Each range-for over the loader is one epoch;
// with shuffle on, epoch e visits the rows in the order of a permutation drawn
// from Generator(seed + e), so a run is reproducible and every epoch differs.
//
//   for (int epoch = 0; epoch < 3; ++epoch)
//     for (const Batch& b : loader) step(b);       // epochs 0, 1, 2
class DataLoader {
 public:
  DataLoader(DatasetPtr dataset, DataLoaderOptions options = {});

  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    const Batch& operator*() const {
      load();
      return batch_;
    }
    const Batch* operator->() const {
      load();
      return &batch_;
    }
    Iterator& operator++() {
      ++pos_;
      loaded_ = false;
      return *this;
    }
    bool operator==(const Iterator& o) const { return pos_ == o.pos_; }
    bool operator!=(const Iterator& o) const { return pos_ != o.pos_; }

   private:
    friend class DataLoader;
    Iterator(const DataLoader* loader, std::shared_ptr<const std::vector<int64_t>> order, int64_t pos)
        : loader_(loader), order_(std::move(order)), pos_(pos) {}
    void load() const;
    const DataLoader* loader_ = nullptr;
    std::shared_ptr<const std::vector<int64_t>> order_;
    int64_t pos_ = 0;  // batch number within the epoch
    mutable Batch batch_;
    mutable bool loaded_ = false;
  };

  // Starts the next epoch (epoch() counts them from 0) and returns its first batch.
  Iterator begin();
  Iterator end() const;

  // The order in which epoch `e` visits the dataset's rows.
  std::vector<int64_t> order(int64_t epoch) const;
  // The batch made of the dataset's rows `rows` (what the iterator yields).
  Batch load_rows(const std::vector<int64_t>& rows) const;
  // Batch `i` of epoch `e`, without touching the epoch counter.
  Batch batch(int64_t epoch, int64_t i) const;
  // The epoch the next begin() starts (set it to resume a run).
  int64_t epoch() const { return epoch_; }
  void set_epoch(int64_t e) { epoch_ = e; }
  int64_t num_batches() const;  // batches per epoch
  int64_t size() const { return num_batches(); }
  const Dataset& dataset() const { return *dataset_; }
  const DatasetPtr& dataset_ptr() const { return dataset_; }
  const DataLoaderOptions& options() const { return opts_; }

 private:
  DatasetPtr dataset_;
  DataLoaderOptions opts_;
  int64_t epoch_ = 0;
  // For the injected bugs: B07's fixed permutation of the inputs, B28's rows by class.
  mutable std::vector<int64_t> b07_x_rows_, b28_sorted_rows_;
  // The last shuffled epoch's order, kept for begin() and batch(e, i): a caller that walks an epoch batch
  // by batch (the debug module's reruns) would otherwise shuffle every row again for each batch. Shared by
  // copies of this loader, which shuffle the same way.
  struct OrderCache;
  std::shared_ptr<OrderCache> order_cache_;
  std::shared_ptr<const std::vector<int64_t>> shared_order(int64_t epoch) const;
};

// ---- normalisation ------------------------------------------------------------
// Standardises features: (x - mean) / std, with statistics from the data it is
// fitted on. It records the split(s) it was fitted on, because fitting on test
// data leaks it into training (the debug module's leakage check reads fitted_on()).
//
//   Normalizer norm;                     // per feature
//   norm.fit(train_x, "train");          // train_x (N, D...)
//   Tensor z = norm.transform(test_x);   // fitted_on() == {"train"}
class Normalizer {
 public:
  enum class Mode {
    PerFeature,  // a mean/std for each feature position (D...)
    Global,      // one mean/std over every value
  };
  explicit Normalizer(Mode mode = Mode::PerFeature, double eps = 1e-6) : mode_(mode), eps_(eps) {}

  // Computes mean/std of x (N, D...) over N (and D... for Global), replacing any
  // earlier statistics; fitted_on() becomes {split}.
  Normalizer& fit(const Tensor& x, const std::string& split = "train");
  Normalizer& fit(const Dataset& d, const std::string& split = "train") { return fit(d.all().x, split); }
  // Folds more data into the statistics (exact pooled mean/variance); adds
  // `split` to fitted_on().
  Normalizer& partial_fit(const Tensor& x, const std::string& split = "train");

  // (x - mean) / max(std, eps) for x (N, D...) or one example (D...). Float32 out.
  Tensor transform(const Tensor& x) const;
  Tensor inverse_transform(const Tensor& z) const;
  // A dataset whose x are transformed on the fly (targets unchanged).
  DatasetPtr transform(DatasetPtr d) const;

  bool fitted() const { return count_ > 0; }
  const std::vector<std::string>& fitted_on() const { return fitted_on_; }
  int64_t count() const { return count_; }  // examples seen
  Tensor mean() const;                      // (D...) or () for Global
  Tensor std() const;                       // population std, before the eps floor
  Mode mode() const { return mode_; }

 private:
  Mode mode_;
  double eps_;
  int64_t count_ = 0;              // examples (PerFeature) or values (Global) folded in
  Shape feature_shape_;            // D... (empty for Global)
  std::vector<double> mean_, m2_;  // running mean and sum of squared deviations, per feature
  std::vector<std::string> fitted_on_;
};

}  // namespace gradsleuth::nn
