// Tests for nn/data and nn/synthetic: TensorDataset, Subset, DataLoader (batch
// alignment, coverage, drop_last, determinism), train_val_split, Normalizer and
// the synthetic datasets.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/ops.h"
#include "nn/data.h"
#include "nn/synthetic.h"

namespace nn = gs::nn;
using gs::Tensor;

namespace {

// X row i is (i, 10 i + 1, ...) so every row is recognisable; y[i] = i % 7.
std::shared_ptr<nn::TensorDataset> numbered(int64_t n, int64_t d = 3) {
  std::vector<float> x(static_cast<size_t>(n * d));
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) x[i * d + j] = static_cast<float>(i * std::pow(10, j) + j);
    y[i] = i % 7;
  }
  return std::make_shared<nn::TensorDataset>(gs::tensor(x, {n, d}), gs::tensor(y, {n}), "numbered");
}

std::vector<int64_t> epoch_indices(nn::DataLoader& loader) {
  std::vector<int64_t> all;
  for (const nn::Batch& b : loader) all.insert(all.end(), b.indices.begin(), b.indices.end());
  return all;
}

}  // namespace

TEST_CASE("TensorDataset: get, get_batch and errors") {
  auto ds = numbered(10);
  CHECK(ds->size() == 10);
  nn::Example e = ds->get(4);
  CHECK(e.x.shape() == gs::Shape{3});
  CHECK(e.y.dim() == 0);
  CHECK(e.y.item<int64_t>() == 4);
  CHECK(e.x.to_vector<float>() == std::vector<float>{4, 41, 402});
  nn::Batch b = ds->get_batch({7, 2, 9});
  CHECK(b.x.shape() == gs::Shape{3, 3});
  CHECK(b.y.dtype() == gs::kInt64);
  CHECK(b.y.to_vector<int64_t>() == std::vector<int64_t>{0, 2, 2});
  CHECK(b.x[1].to_vector<float>() == std::vector<float>{2, 21, 202});
  CHECK_THROWS_WITH_AS(ds->get(10), doctest::Contains("out of range"), gs::Error);
  CHECK_THROWS_WITH_AS(nn::TensorDataset(gs::zeros({4, 2}), gs::zeros({5})), doctest::Contains("same number of rows"),
                       gs::Error);
}

TEST_CASE("Dataset: the default get_batch stacks get(i), float targets included") {
  // A dataset with only size/get: the base class's get_batch must stack.
  struct Squares : nn::Dataset {
    int64_t size() const override { return 5; }
    nn::Example get(int64_t i) const override {
      return {gs::full({2}, static_cast<double>(i)), gs::scalar_tensor(static_cast<double>(i * i))};
    }
  } sq;
  nn::Batch b = sq.get_batch({3, 1});
  CHECK(b.x.shape() == gs::Shape{2, 2});
  CHECK(b.y.shape() == gs::Shape{2});
  CHECK(b.y.dtype() == gs::kFloat32);
  CHECK(b.y.to_vector<float>() == std::vector<float>{9, 1});
  CHECK(sq.all().x.shape() == gs::Shape{5, 2});
}

TEST_CASE("DataLoader: every (x, y) in a batch is the dataset's row indices[b]") {
  auto ds = numbered(103);
  nn::DataLoader loader(ds, nn::DataLoaderOptions().batch_size(16).shuffle(true).seed(3));
  CHECK(loader.num_batches() == 7);
  int batches = 0;
  for (const nn::Batch& b : loader) {
    ++batches;
    REQUIRE(b.x.size(0) == b.size());
    REQUIRE(b.y.size(0) == b.size());
    for (int64_t k = 0; k < b.size(); ++k) {
      nn::Example e = ds->get(b.indices[k]);
      CHECK(gs::equal(b.x[k], e.x));
      CHECK(b.y[k].item<int64_t>() == e.y.item<int64_t>());
    }
  }
  CHECK(batches == 7);
}

TEST_CASE("DataLoader: each epoch covers every row once; drop_last drops the short batch") {
  auto ds = numbered(50);
  nn::DataLoader loader(ds, nn::DataLoaderOptions().batch_size(8).shuffle(true).seed(1));
  std::vector<int64_t> idx = epoch_indices(loader);
  std::vector<int64_t> sorted = idx;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> want(50);
  std::iota(want.begin(), want.end(), 0);
  CHECK(sorted == want);
  CHECK(idx != want);  // shuffled

  nn::DataLoader dl(ds, nn::DataLoaderOptions().batch_size(8).drop_last(true));
  CHECK(dl.num_batches() == 6);
  std::vector<int64_t> sizes;
  for (const nn::Batch& b : dl) sizes.push_back(b.size());
  CHECK(sizes == std::vector<int64_t>(6, 8));
  CHECK(epoch_indices(dl) == std::vector<int64_t>(want.begin(), want.begin() + 48));  // no shuffle: in order

  nn::DataLoader keep(ds, nn::DataLoaderOptions().batch_size(8));
  std::vector<int64_t> last;
  for (const nn::Batch& b : keep) last.push_back(b.size());
  CHECK(last.back() == 2);
}

TEST_CASE("DataLoader: same seed, same order; each epoch reshuffles; epochs are reproducible") {
  auto ds = numbered(40);
  auto opts = nn::DataLoaderOptions().batch_size(5).shuffle(true).seed(7);
  nn::DataLoader a(ds, opts), b(ds, opts);
  std::vector<int64_t> a0 = epoch_indices(a), a1 = epoch_indices(a);
  std::vector<int64_t> b0 = epoch_indices(b), b1 = epoch_indices(b);
  CHECK(a0 == b0);
  CHECK(a1 == b1);
  CHECK(a0 != a1);
  CHECK(a.epoch() == 2);
  CHECK(a.order(1) == a1);  // epoch e is a pure function of (seed, e)
  a.set_epoch(0);
  CHECK(epoch_indices(a) == a0);
  nn::DataLoader c(ds, opts.seed(8));
  CHECK(epoch_indices(c) != a0);
  nn::Batch third = b.batch(0, 2);
  CHECK(third.indices == std::vector<int64_t>(a0.begin() + 10, a0.begin() + 15));
}

TEST_CASE("DataLoader: bad options are clear errors") {
  auto ds = numbered(4);
  CHECK_THROWS_WITH_AS(nn::DataLoader(ds, nn::DataLoaderOptions().batch_size(0)),
                       doctest::Contains("batch_size must be positive"), gs::Error);
}

TEST_CASE("Subset, take and train_val_split: disjoint and complete") {
  auto ds = numbered(100);
  auto [train, val] = nn::train_val_split(ds, 0.2, 5);
  CHECK(train->size() == 80);
  CHECK(val->size() == 20);
  std::set<int64_t> seen;
  for (int64_t i : train->indices()) seen.insert(i);
  for (int64_t i : val->indices()) CHECK(seen.insert(i).second);  // disjoint
  CHECK(seen.size() == 100);                                      // complete
  // Same seed, same split; another seed, another split.
  CHECK(nn::train_val_split(ds, 0.2, 5).second->indices() == val->indices());
  CHECK(nn::train_val_split(ds, 0.2, 6).second->indices() != val->indices());
  // A subset's batch holds the base rows it maps to, with positions as indices.
  nn::Batch b = val->get_batch({0, 3});
  CHECK(b.indices == std::vector<int64_t>{0, 3});
  CHECK(gs::equal(b.x[1], ds->get(val->indices()[3]).x));
  nn::DataLoader loader(val, nn::DataLoaderOptions().batch_size(6));
  CHECK(loader.num_batches() == 4);

  auto first = nn::take(ds, 10);
  CHECK(first->size() == 10);
  CHECK(first->get(9).y.item<int64_t>() == 2);
  CHECK(nn::take(ds, -1) == nn::DatasetPtr(ds));
}

TEST_CASE("Normalizer: per feature and global, fitted_on, partial_fit") {
  auto blobs = nn::make_blobs(200, 3, 4, 2.0, 1);
  Tensor x = blobs->x();
  nn::Normalizer norm;
  CHECK_FALSE(norm.fitted());
  CHECK_THROWS_WITH_AS(norm.transform(x), doctest::Contains("not fitted"), gs::Error);
  norm.fit(x, "train");
  CHECK(norm.fitted_on() == std::vector<std::string>{"train"});
  Tensor z = norm.transform(x);
  CHECK(z.shape() == x.shape());
  for (double m : z.mean({0}).to_vector<double>()) CHECK(std::fabs(m) < 1e-4);
  for (double s : z.std({0}, false).to_vector<double>()) CHECK(std::fabs(s - 1.0) < 1e-3);
  CHECK(gs::allclose(norm.inverse_transform(z), x, 1e-4, 1e-4));
  // One example (D) is transformed too.
  CHECK(gs::allclose(norm.transform(x[3]), z[3], 1e-5, 1e-5));
  CHECK_THROWS_WITH_AS(norm.transform(gs::zeros({2, 5})), doctest::Contains("does not end with the features"),
                       gs::Error);

  // Fitting on two chunks with partial_fit gives the statistics of the whole.
  nn::Normalizer two;
  two.fit(x.narrow(0, 0, 250), "train").partial_fit(x.narrow(0, 250, 350), "test");
  CHECK(two.fitted_on() == std::vector<std::string>{"train", "test"});
  CHECK(gs::allclose(two.mean(), norm.mean(), 1e-5, 1e-5));
  CHECK(gs::allclose(two.std(), norm.std(), 1e-5, 1e-5));
  // fit() starts over.
  two.fit(x, "train");
  CHECK(two.fitted_on() == std::vector<std::string>{"train"});

  nn::Normalizer global(nn::Normalizer::Mode::Global);
  global.fit(x, "train");
  CHECK(global.mean().dim() == 0);
  Tensor g = global.transform(x);
  CHECK(std::fabs(g.mean().item<double>()) < 1e-4);
  CHECK(std::fabs(g.std({}, false).item<double>() - 1.0) < 1e-3);

  // A constant feature does not divide by zero.
  nn::Normalizer c;
  c.fit(gs::ones({10, 2}), "train");
  CHECK(gs::isfinite(c.transform(gs::ones({3, 2}))).to(gs::kInt64).sum().item<int64_t>() == 6);

  // The dataset form.
  auto zd = norm.transform(nn::DatasetPtr(blobs));
  CHECK(gs::allclose(zd->get_batch({0, 1}).x, z.narrow(0, 0, 2), 1e-5, 1e-5));
  CHECK(zd->get(5).y.item<int64_t>() == blobs->get(5).y.item<int64_t>());
}

TEST_CASE("Synthetic: spirals, blobs and regression are shaped, seeded and separable") {
  auto s = nn::make_spirals(100, 3, 0.2, 42);
  CHECK(s->x().shape() == gs::Shape{300, 2});
  CHECK(s->y().shape() == gs::Shape{300});
  CHECK(s->y().dtype() == gs::kInt64);
  CHECK(gs::equal(nn::make_spirals(100, 3, 0.2, 42)->x(), s->x()));
  CHECK_FALSE(gs::equal(nn::make_spirals(100, 3, 0.2, 43)->x(), s->x()));
  CHECK(s->x().abs().max().item<double>() <= 1.0 + 1e-6);
  for (int64_t k = 0; k < 3; ++k)
    CHECK(gs::eq(s->y(), gs::full({300}, k, gs::kInt64)).to(gs::kInt64).sum().item<int64_t>() == 100);

  // Blobs far apart: nearest-centre classification is (almost) perfect.
  auto b = nn::make_blobs(50, 4, 3, 0.5, 9, 10.0);
  CHECK(b->x().shape() == gs::Shape{200, 3});
  CHECK(gs::equal(nn::make_blobs(50, 4, 3, 0.5, 9, 10.0)->x(), b->x()));
  Tensor centres = gs::stack({b->x().narrow(0, 0, 50).mean({0}), b->x().narrow(0, 50, 50).mean({0}),
                              b->x().narrow(0, 100, 50).mean({0}), b->x().narrow(0, 150, 50).mean({0})});  // (4, 3)
  Tensor d2 = (b->x().unsqueeze(1) - centres.unsqueeze(0)).square().sum({2});                              // (200, 4)
  double acc = gs::eq(d2.argmin(1), b->y()).to(gs::kFloat64).mean().item<double>();
  CHECK(acc >= 0.9);

  // Regression: least squares recovers the true weights.
  nn::RegressionSet r = nn::make_linear_regression(400, 3, 0.01, 2);
  CHECK(r.data->x().shape() == gs::Shape{400, 3});
  CHECK(r.data->y().shape() == gs::Shape{400, 1});
  CHECK(r.true_weight.shape() == gs::Shape{3, 1});
  Tensor X = gs::cat({r.data->x(), gs::ones({400, 1})}, 1).to(gs::kFloat64);  // (N, 4)
  Tensor Y = r.data->y().to(gs::kFloat64);
  // Normal equations by a few steps of gradient descent (no solver in the engine).
  Tensor w = gs::zeros({4, 1}, gs::kFloat64);
  for (int it = 0; it < 500; ++it) w = w - X.t().matmul(X.matmul(w) - Y) * (0.5 / 400.0);
  Tensor want = gs::cat({r.true_weight, r.true_bias.view({1, 1})}, 0).to(gs::kFloat64);
  CHECK(gs::allclose(w, want, 0.0, 0.01));
}
