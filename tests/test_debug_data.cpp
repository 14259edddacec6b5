// The data checks D1-D10 and D12-D16 (debug/checks/data/data_checks.h): each fires on the bug it is
// meant to catch and stays silent on clean data, synthetic and Fashion-MNIST.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/data/data_checks.h"
#include "debug/checks/data/data_util.h"
#include "nn/fashion_mnist.h"

#include "debug_test_util.h"

namespace dbg = gs::debug;
namespace nn = gs::nn;
using gs::Tensor;

namespace {

using dtest::all_str;
using dtest::any_fires;
using dtest::ev;
using dtest::has;
using dtest::titled;

// The first n training images: x (n, 1, 28, 28) in [0, 1], y (n) int64.
nn::DatasetPtr fmnist(int64_t n, bool raw = false) {
  return nn::take(nn::load_fashion_mnist("train", nn::FashionMnistOptions().raw(raw)), n);
}

// The same rows, sorted by label (stable): bug B28's data.
nn::DatasetPtr sorted_by_class(const nn::Dataset& d) {
  nn::Batch b = d.all();
  std::vector<int64_t> y = b.y.to_vector<int64_t>(), idx(y.size());
  std::iota(idx.begin(), idx.end(), int64_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t c) { return y[a] < y[c]; });
  Tensor p = gs::tensor(idx, {static_cast<int64_t>(idx.size())});
  return std::make_shared<nn::TensorDataset>(b.x.index_select(0, p), b.y.index_select(0, p), "sorted");
}

}  // namespace

// ---- D1 --------------------------------------------------------------------------

// The data checks' row kernels (row_kernels.cpp) against the plain loops they replace.
TEST_CASE("nearest_rows: the blocked distance loop finds a nearest row, the first of exact copies") {
  // The reference: the documented rule's distances, one pair at a time.
  auto reference = [](const std::vector<double>& v, int64_t rows, int64_t n, int64_t max_features, bool floor_spread) {
    const int64_t F = static_cast<int64_t>(v.size()) / rows, k = std::min(F, max_features);
    std::vector<std::vector<double>> cols;
    std::vector<double> sds;
    for (int64_t j = 0; j < k; ++j) {
      std::vector<double> c(static_cast<size_t>(n));
      double mean = 0;
      for (int64_t i = 0; i < n; ++i) mean += c[i] = v[i * F + j * F / k];
      mean /= static_cast<double>(n);
      double var = 0;
      for (double& x : c) {
        x -= mean;
        var += x * x;
      }
      const double sd = std::sqrt(var / static_cast<double>(n));
      if (sd > 0) cols.push_back(c), sds.push_back(sd);
    }
    std::vector<double> sorted = sds;
    std::sort(sorted.begin(), sorted.end());
    const double floor = floor_spread ? sorted[sorted.size() / 2] : 0.0;
    std::vector<std::vector<double>> dist(static_cast<size_t>(n),
                                          std::vector<double>(static_cast<size_t>(n), INFINITY));
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t r = 0; r < n; ++r) {
        if (r == i) continue;
        double d = 0;
        for (size_t j = 0; j < cols.size(); ++j) {
          const double s = std::max(sds[j], floor), e = cols[j][i] / s - cols[j][r] / s;
          d += e * e;
        }
        dist[i][r] = d;
      }
    }
    return dist;
  };
  gs::manual_seed(11);
  for (const auto& [rows, n, F, max_features] : std::vector<std::array<int64_t, 4>>{
           {300, 300, 40, 256}, {101, 97, 7, 256}, {50, 13, 600, 256}, {64, 64, 1000, 300}}) {
    // Whole numbers 0..3: many exact ties; rows 5-7 copies of row 2; feature 1 constant.
    std::vector<double> v = gs::randint(0, 4, {rows, F}).to(gs::kFloat64).to_vector<double>();
    for (int64_t r : {5, 6, 7})
      for (int64_t j = 0; j < F; ++j) v[r * F + j] = v[2 * F + j];
    for (int64_t r = 0; r < rows; ++r) v[r * F + 1] = 3.0;
    for (bool floor : {false, true}) {
      INFO(rows, " rows, n ", n, ", ", F, " features (up to ", max_features, "), floor ", floor);
      const std::vector<int64_t> got = dbg::data_detail::nearest_rows(v, rows, n, max_features, floor);
      const std::vector<std::vector<double>> d = reference(v, rows, n, max_features, floor);
      REQUIRE(got.size() == static_cast<size_t>(n));
      // Each row's answer is a nearest row: its distance the least, up to the rounding of a sum
      // formed with or without fused multiply-adds (ties of whole-number data are common here).
      for (int64_t i = 0; i < n; ++i) {
        const double best = *std::min_element(d[i].begin(), d[i].end());
        REQUIRE(got[i] >= 0);
        CHECK(got[i] != i);
        CHECK(d[i][got[i]] <= best * (1 + 1e-12) + 1e-300);
      }
      if (n > 7) CHECK(got[5] == 2);  // exact ties: a copy's nearest is the first copy
    }
  }
  CHECK(dbg::data_detail::nearest_rows(std::vector<double>(20, 1.0), 10, 10, 8, false).empty());  // nothing varies
}

TEST_CASE("hash_bytes: equal bytes hash equal; one flipped bit, or two sign bits, changes the hash") {
  std::vector<float> row(200);
  for (size_t i = 0; i < row.size(); ++i) row[i] = static_cast<float>(i) * 0.37f - 20.0f;
  for (size_t len : {size_t{0}, size_t{3}, size_t{4}, size_t{7}, size_t{8}, size_t{31}, size_t{32}, size_t{33},
                     size_t{63}, size_t{64}, size_t{65}, size_t{800}}) {
    INFO(len, " bytes");
    std::vector<unsigned char> a(len), b;
    std::memcpy(a.data(), row.data(), len);
    b = a;
    const uint64_t h = dbg::data_detail::hash_bytes(a.data(), len);
    CHECK(dbg::data_detail::hash_bytes(b.data(), len) == h);
    for (size_t byte = 0; byte < len; byte += std::max<size_t>(1, len / 9))
      for (int bit : {0, 7}) {
        b = a;
        b[byte] ^= static_cast<unsigned char>(1u << bit);
        CHECK(dbg::data_detail::hash_bytes(b.data(), len) != h);
      }
  }
  // Two values negated (their sign bits, the top bit of two words): a hash whose mixing leaves the
  // top bit alone would cancel them.
  std::vector<float> neg = row;
  neg[2] = -neg[2];
  neg[3] = -neg[3];
  CHECK(dbg::data_detail::hash_bytes(neg.data(), neg.size() * 4) !=
        dbg::data_detail::hash_bytes(row.data(), row.size() * 4));
  // A length that differs by trailing zero bytes hashes differently.
  std::vector<unsigned char> z(40, 0);
  CHECK(dbg::data_detail::hash_bytes(z.data(), 39) != dbg::data_detail::hash_bytes(z.data(), 40));
}

TEST_CASE(
    "D12 and D13 on copied rows: the rare class's rows copied (oversampling) are info, copies across the split warn") {
  // 600 rows of 6 features, 3 classes of which class 2 is rare (about 1 row in 12).
  gs::manual_seed(21);
  const Tensor x = gs::randn({600, 6});
  std::vector<int64_t> labels(600);
  for (int64_t i = 0; i < 600; ++i) labels[static_cast<size_t>(i)] = i % 12 == 0 ? 2 : i % 2;
  const Tensor y = gs::tensor(labels, {600});
  auto base = std::make_shared<nn::TensorDataset>(x, y, "rows");
  std::vector<int64_t> oversampled, twice;
  for (int64_t i = 0; i < 600; ++i)
    for (int c = 0; c < (labels[static_cast<size_t>(i)] == 2 ? 4 : 1); ++c) oversampled.push_back(i);
  for (int c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 600; ++i) twice.push_back(i);
  const std::vector<dbg::Finding> over = dbg::check_duplicates(nn::Subset(base, oversampled, "oversampled"));
  REQUIRE(over.size() == 1);
  CHECK(over[0].severity == dbg::Severity::Info);
  CHECK(over[0].title.find("oversampling") != std::string::npos);
  CHECK(ev(over[0], "a copy's label's share among the distinct inputs / a distinct input's label's") < 0.7);
  const std::vector<dbg::Finding> dup = dbg::check_duplicates(nn::Subset(base, twice, "appended twice"));
  REQUIRE(dup.size() == 1);
  CHECK(dup[0].severity == dbg::Severity::Warning);
  // Oversampled before the split: the copies of a rare row land on both sides.
  auto pool = std::make_shared<nn::Subset>(base, oversampled, "pool");
  auto [train, val] = nn::train_val_split(pool, 0.2, 3);
  const std::vector<dbg::Finding> mix = dbg::check_train_test_mix(*train, *val, "val");
  REQUIRE_FALSE(mix.empty());
  CHECK(mix[0].severity == dbg::Severity::Warning);
}

TEST_CASE("D1 check_batch: one info finding with shapes, dtypes and statistics") {
  Tensor x = gs::tensor({0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0}, {4, 2});
  Tensor y = gs::tensor(std::vector<int64_t>{0, 2, 2, 1}, {4});
  auto fs = dbg::check_batch(x, y);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].check == "D1");
  CHECK(fs[0].severity == dbg::Severity::Info);
  CHECK(fs[0].title.find("float32[4, 2] on cpu") != std::string::npos);
  CHECK(fs[0].title.find("int64[4]") != std::string::npos);
  CHECK(fs[0].shape == "x [4, 2], y [4]");
  CHECK(ev(fs[0], "x min") == 0.0);
  CHECK(ev(fs[0], "x max") == 7.0);
  CHECK(ev(fs[0], "x mean") == doctest::Approx(3.5));
  CHECK(ev(fs[0], "x std") == doctest::Approx(std::sqrt(5.25)));  // population std of 0..7
  CHECK(ev(fs[0], "y min") == 0.0);
  CHECK(ev(fs[0], "y max") == 2.0);
  CHECK(ev(fs[0], "y distinct") == 3.0);

  // Float targets: mean and std instead of distinct values.
  auto reg = dbg::check_batch(x, gs::tensor({1.0, 3.0, 1.0, 3.0}, {4, 1}));
  REQUIRE(reg.size() == 1);
  CHECK(ev(reg[0], "y mean") == doctest::Approx(2.0));
  CHECK(ev(reg[0], "y std") == doctest::Approx(1.0));

  // Fires (error) when x and y disagree on the number of rows.
  auto bad = dbg::check_batch(x, gs::tensor(std::vector<int64_t>{0, 1, 2}, {3}));
  REQUIRE(bad.size() == 2);
  CHECK(bad[1].severity == dbg::Severity::Error);
  CHECK(ev(bad[1], "x rows") == 4.0);
  CHECK(ev(bad[1], "y rows") == 3.0);
}

TEST_CASE("D1 check_batch on a Fashion-MNIST batch") {
  REQUIRE_FASHION_MNIST();
  nn::DataLoader loader(fmnist(1000), nn::DataLoaderOptions().batch_size(256).shuffle(true));
  nn::Batch b = loader.batch(0, 0);
  auto fs = dbg::check_batch(b.x, b.y);
  REQUIRE(fs.size() == 1);
  CHECK_FALSE(fs[0].fires());
  CHECK(fs[0].shape == "x [256, 1, 28, 28], y [256]");
  CHECK(ev(fs[0], "x min") == 0.0);
  CHECK(ev(fs[0], "x max") == doctest::Approx(1.0));
  CHECK(ev(fs[0], "x mean") == doctest::Approx(0.286).epsilon(0.1));
  CHECK(ev(fs[0], "y distinct") == 10.0);
}

// ---- D2 --------------------------------------------------------------------------

TEST_CASE("D2 check_finite_inputs: counts NaN and Inf, fails loudly; silent on finite data") {
  Tensor x = gs::zeros({4, 3});
  float* p = x.data_ptr<float>();
  p[4] = NAN;       // row 1
  p[5] = NAN;       // row 1
  p[9] = INFINITY;  // row 3
  Tensor y = gs::tensor({0.5, NAN, 1.0, 2.0}, {4});
  auto fs = dbg::check_finite_inputs(x, y);
  REQUIRE(fs.size() == 2);
  CHECK(fs[0].check == "D2");
  CHECK(fs[0].severity == dbg::Severity::Error);
  CHECK(fs[0].title.find("inputs x holds 2 NaN and 1 Inf") == 0);
  CHECK(ev(fs[0], "NaN values") == 2.0);
  CHECK(ev(fs[0], "Inf values") == 1.0);
  CHECK(ev(fs[0], "rows affected") == 2.0);
  CHECK(ev(fs[0], "first bad row") == 1.0);
  CHECK(fs[1].title.find("targets y holds 1 NaN and 0 Inf") == 0);

  try {
    dbg::require_finite_inputs(x, y);
    FAIL("require_finite_inputs should throw");
  } catch (const gs::Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("require_finite_inputs") == 0);
    CHECK(msg.find("[D2 error] non-finite inputs: inputs x holds 2 NaN and 1 Inf") != std::string::npos);
  }

  // Silent: finite floats, and int64 labels (never non-finite).
  CHECK(dbg::check_finite_inputs(gs::ones({4, 3}), gs::tensor(std::vector<int64_t>{0, 1, 2, 3}, {4})).empty());
  CHECK_NOTHROW(dbg::require_finite_inputs(gs::ones({4, 3}), gs::ones({4})));
}

TEST_CASE("D2 is silent on Fashion-MNIST") {
  REQUIRE_FASHION_MNIST();
  nn::Batch b = fmnist(2000)->all();
  CHECK(dbg::check_finite_inputs(b.x, b.y).empty());
}

// ---- D3 --------------------------------------------------------------------------

TEST_CASE("D3 check_label_distribution: warns on imbalance and empty classes, reports balanced counts") {
  std::vector<int64_t> v(100, 0);
  v.insert(v.end(), 5, 1);
  auto fs = dbg::check_label_distribution(gs::tensor(v, {105}), 2);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].check == "D3");
  CHECK(fs[0].severity == dbg::Severity::Warning);
  CHECK(ev(fs[0], "class 0") == 100.0);
  CHECK(ev(fs[0], "class 1") == 5.0);
  CHECK(ev(fs[0], "imbalance ratio") == doctest::Approx(20.0));
  CHECK(fs[0].title.find("class 0 has 100 examples, class 1 only 5") != std::string::npos);

  // A class with no example (C = 3, labels only 0 and 1).
  auto empty = dbg::check_label_distribution(gs::tensor(std::vector<int64_t>{0, 1, 0, 1, 1, 0}, {6}), 3);
  REQUIRE(empty.size() == 1);
  CHECK(empty[0].severity == dbg::Severity::Warning);
  CHECK(ev(empty[0], "classes with no example") == 1.0);
  CHECK(ev(empty[0], "class 2") == 0.0);
  CHECK(empty[0].title.find("(class 2)") != std::string::npos);

  // The threshold is an option.
  dbg::DataCheckOptions o;
  o.max_imbalance_ratio = 50.0;
  REQUIRE(dbg::check_label_distribution(gs::tensor(v, {105}), 2, o).size() == 1);
  CHECK_FALSE(dbg::check_label_distribution(gs::tensor(v, {105}), 2, o)[0].fires());

  // Balanced: one info finding with the counts; C inferred when <= 0.
  auto ok = dbg::check_label_distribution(gs::tensor(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 2}, {7}), 0);
  REQUIRE(ok.size() == 1);
  CHECK(ok[0].severity == dbg::Severity::Info);
  CHECK(ev(ok[0], "class 2") == 3.0);
  CHECK(ev(ok[0], "imbalance ratio") == doctest::Approx(1.5));
}

TEST_CASE("D3 on Fashion-MNIST: balanced; a 10x downsampled class fires") {
  REQUIRE_FASHION_MNIST();
  Tensor y = fmnist(3000)->all().y;
  auto fs = dbg::check_label_distribution(y, 10);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].severity == dbg::Severity::Info);
  CHECK(ev(fs[0], "imbalance ratio") < 1.5);
  // Keep only every 20th example of class 0: ratio ~20.
  std::vector<int64_t> v = y.to_vector<int64_t>(), kept;
  int64_t zeros = 0;
  for (int64_t c : v)
    if (c != 0 || zeros++ % 20 == 0) kept.push_back(c);
  auto bad = dbg::check_label_distribution(gs::tensor(kept, {static_cast<int64_t>(kept.size())}), 10);
  REQUIRE(bad.size() == 1);
  CHECK(bad[0].severity == dbg::Severity::Warning);
  CHECK(ev(bad[0], "imbalance ratio") > 10.0);
  CHECK(bad[0].title.find("class 0 only") != std::string::npos);
}

// ---- D4 --------------------------------------------------------------------------

TEST_CASE("D4 check_alignment: inputs shuffled without their labels (B07) on Fashion-MNIST") {
  REQUIRE_FASHION_MNIST();
  nn::Batch all = fmnist(2000)->all();
  nn::TensorDataset reference(all.x, all.y, "fmnist-2000");
  // The bug: permute x, keep y.
  gs::Generator g(3);
  Tensor perm = gs::randperm(2000, &g);
  auto shuffled_x = std::make_shared<nn::TensorDataset>(all.x.index_select(0, perm), all.y, "x-shuffled");
  nn::DataLoader bad(shuffled_x, nn::DataLoaderOptions().batch_size(50).shuffle(true));
  auto fs = dbg::check_alignment(reference, bad);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].check == "D4");
  CHECK(fs[0].severity == dbg::Severity::Error);
  CHECK(ev(fs[0], "examples checked") == 1000.0);  // 20 batches of 50
  CHECK(ev(fs[0], "mismatched fraction") > 0.8);   // ~0.9: a random label matches 1 time in 10
  CHECK(ev(fs[0], "inputs not in the reference") == 0.0);
  CHECK(fs[0].cause.find("batch ") != std::string::npos);
  CHECK(bad.epoch() == 0);  // the loader's epoch counter is untouched

  // Clean: the same pairs, shuffled together.
  nn::DataLoader good(std::make_shared<nn::TensorDataset>(all.x, all.y),
                      nn::DataLoaderOptions().batch_size(50).shuffle(true));
  CHECK(dbg::check_alignment(reference, good).empty());
  // Clean, permuted the right way (x and y with the same indices), small reference chunks.
  auto both = std::make_shared<nn::TensorDataset>(all.x.index_select(0, perm), all.y.index_select(0, perm));
  dbg::DataCheckOptions o;
  o.alignment_chunk = 77;
  CHECK(dbg::check_alignment(reference, nn::DataLoader(both), o).empty());
}

TEST_CASE("D4 check_alignment: duplicated images with different labels are not mismatches") {
  // Rows 0 and 1 hold the same image with labels 0 and 1.
  Tensor x = gs::tensor({1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {4, 2});
  Tensor y = gs::tensor(std::vector<int64_t>{0, 1, 2, 3}, {4});
  nn::TensorDataset reference(x, y);
  // A loader over duplicates whose labels are swapped: still pairs that exist.
  Tensor y2 = gs::tensor(std::vector<int64_t>{1, 0, 2, 3}, {4});
  nn::DataLoader dup(std::make_shared<nn::TensorDataset>(x, y2), nn::DataLoaderOptions().batch_size(2));
  dbg::DataCheckOptions o;
  o.alignment_chunk = 3;
  CHECK(dbg::check_alignment(reference, dup, o).empty());
  // But a label that image never has is a mismatch: 1 of 4 > 0.01.
  Tensor y3 = gs::tensor(std::vector<int64_t>{0, 1, 3, 3}, {4});
  auto fs = dbg::check_alignment(reference, nn::DataLoader(std::make_shared<nn::TensorDataset>(x, y3)), o);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].severity == dbg::Severity::Error);
  CHECK(ev(fs[0], "mismatched (x, y) pairs") == 1.0);
  CHECK(ev(fs[0], "mismatched fraction") == doctest::Approx(0.25));
  CHECK(fs[0].cause.find("has label 3, but the reference has that image with label 2") != std::string::npos);
  // Inputs that are the reference after an affine transform (x * 2): compared through it, the
  // duplicates' labels allowed as above: an info finding, no warning.
  auto aff = dbg::check_alignment(reference, nn::DataLoader(std::make_shared<nn::TensorDataset>(x * 2.0, y)), o);
  REQUIRE(aff.size() == 1);
  CHECK(aff[0].severity == dbg::Severity::Info);
  CHECK(aff[0].title.find("per-feature affine transform") != std::string::npos);
  // Inputs that are not in the reference at all, not even after an affine transform (x * x, a
  // non-affine transform in the loader, as an augmentation is): not judged, an info finding.
  auto unk = dbg::check_alignment(reference, nn::DataLoader(std::make_shared<nn::TensorDataset>(x * x, y)), o);
  REQUIRE(unk.size() == 1);
  CHECK(unk[0].severity == dbg::Severity::Info);
  CHECK_FALSE(unk[0].fires());
  CHECK(ev(unk[0], "unknown fraction") == 1.0);
}

// ---- D5 --------------------------------------------------------------------------

TEST_CASE("D5 check_normalisation on Fashion-MNIST: silent on [0, 1] and standardised, fires on raw 0..255") {
  REQUIRE_FASHION_MNIST();
  Tensor x = fmnist(2000)->all().x;
  CHECK(dbg::check_normalisation(x).empty());
  nn::Normalizer global(nn::Normalizer::Mode::Global);
  global.fit(x, "train");
  CHECK(dbg::check_normalisation(global.transform(x)).empty());
  nn::Normalizer per_feature;  // z-scores up to ~45 for near-constant border pixels: still silent
  per_feature.fit(x, "train");
  CHECK(dbg::check_normalisation(per_feature.transform(x)).empty());

  Tensor raw = fmnist(2000, /*raw=*/true)->all().x;  // B25
  auto fs = dbg::check_normalisation(raw);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].check == "D5");
  CHECK(fs[0].severity == dbg::Severity::Warning);
  CHECK(fs[0].title.find("raw 0..255 pixel values") != std::string::npos);
  CHECK(ev(fs[0], "|x| at the 99.9th percentile") == 255.0);
  CHECK(ev(fs[0], "max") == 255.0);
  CHECK(fs[0].fix.find("255") != std::string::npos);
}

TEST_CASE("D5 check_normalisation on tabular data: features ~1 and ~1e4") {
  gs::Generator g(5);
  Tensor a = gs::randn({500, 1}, {}, &g);              // std ~1
  Tensor b = gs::randn({500, 1}, {}, &g) * 1e4 + 3e4;  // std ~1e4
  Tensor c = gs::randn({500, 1}, {}, &g) * 2.0;
  Tensor x = gs::cat({a, b, c}, 1);  // (500, 3)
  auto fs = dbg::check_normalisation(x);
  auto it = std::find_if(fs.begin(), fs.end(), [](const dbg::Finding& f) {
    return f.title.find("orders of magnitude") != std::string::npos;
  });
  REQUIRE(it != fs.end());
  CHECK(it->severity == dbg::Severity::Warning);
  CHECK(ev(*it, "scale ratio") == doctest::Approx(1e4).epsilon(0.2));
  CHECK(ev(*it, "largest feature std (feature 1)") == doctest::Approx(1e4).epsilon(0.2));
  CHECK(it->title.find("feature 1 has std") != std::string::npos);
  // Standardised per feature: silent.
  nn::Normalizer norm;
  norm.fit(x, "train");
  CHECK(dbg::check_normalisation(norm.transform(x)).empty());
  // A feature that is exactly constant is ignored, not a scale of 0.
  CHECK(dbg::check_normalisation(gs::cat({a, gs::zeros({500, 1})}, 1)).empty());
}

TEST_CASE("D5: tabular rows z-scored over their own features warn; per-feature scaling and per-series z-norm do not") {
  gs::Generator g(11);
  // Eight features in their own units (an income ~4, an age ~30, a population ~1e3, a longitude ~-119, ...).
  const std::vector<double> loc{4, 30, 5, 1, 1200, 3, 35, -119}, spread{2, 12, 1, 0.2, 600, 0.7, 2, 2};
  std::vector<Tensor> cols;
  for (size_t j = 0; j < loc.size(); ++j) cols.push_back(gs::randn({400, 1}, {}, &g) * spread[j] + loc[j]);
  const Tensor raw = gs::cat(cols, 1);  // (400, 8)
  const auto row_wise = [](const Tensor& t) { return (t - t.mean({1}, true)) / t.std({1}, true, true); };
  const auto rows_rule = [](const std::vector<dbg::Finding>& fs) {
    for (const dbg::Finding& f : fs)
      if (f.title.find("standardised over its own") != std::string::npos) return &f - fs.data();
    return static_cast<std::ptrdiff_t>(-1);
  };
  const std::vector<dbg::Finding> bad = dbg::check_normalisation(row_wise(raw));
  const std::ptrdiff_t at = rows_rule(bad);
  REQUIRE(at >= 0);
  CHECK(bad[at].severity == dbg::Severity::Warning);
  CHECK(ev(bad[at], "rows with mean 0 and std 1 over their features") == 400);
  CHECK(ev(bad[at], "share of the columns' variance between their means") > 0.9);
  // The same columns standardised over the rows: silent.
  nn::Normalizer norm;
  norm.fit(raw, "train");
  CHECK(rows_rule(dbg::check_normalisation(norm.transform(raw))) < 0);
  // Standardised per feature first, then z-scored per row: the columns stay alike (each varies over the rows).
  CHECK(rows_rule(dbg::check_normalisation(row_wise(norm.transform(raw)))) < 0);
  // Time series z-normalised per example (the UCR archive's convention): 400 noisy sines of 48 steps.
  const Tensor t = gs::arange(0, 48, 1).to(gs::kFloat32).reshape({1, 48});
  const Tensor phase = gs::rand({400, 1}, {}, &g) * 6.28, freq = gs::rand({400, 1}, {}, &g) * 0.5 + 0.1;
  const Tensor series = gs::sin(t * freq + phase) * 3.0 + 7.0 + gs::randn({400, 48}, {}, &g) * 0.3;
  CHECK(rows_rule(dbg::check_normalisation(row_wise(series))) < 0);
}

TEST_CASE(
    "D5: a multi-task target with one column in raw units warns; standardised columns and multi-hot labels do not") {
  gs::Generator g(12);
  const Tensor like = (gs::rand({300, 1}, {}, &g) > 0.5).to(gs::kFloat32);
  const Tensor seconds = gs::randn({300, 1}, {}, &g) * 180.0 + 240.0;
  const std::vector<dbg::Finding> fs = dbg::check_target_scales(gs::cat({like, seconds}, 1));
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].kind == dbg::Kind::TargetScales);
  CHECK(fs[0].severity == dbg::Severity::Warning);
  CHECK(ev(fs[0], "ratio") > 300);
  CHECK(fs[0].title.find("column 1 has std") != std::string::npos);
  // The seconds standardised: silent. So are multi-hot labels with a rare label, and one column alone.
  CHECK(dbg::check_target_scales(gs::cat({like, (seconds - 240.0) / 180.0}, 1)).empty());
  const Tensor rare = (gs::rand({300, 1}, {}, &g) > 0.99).to(gs::kFloat32);
  CHECK(dbg::check_target_scales(gs::cat({like, rare, like}, 1)).empty());
  CHECK(dbg::check_target_scales(seconds).empty());
  // Two raw columns in like units (a box's x and y in pixels): no ratio.
  CHECK(dbg::check_target_scales(gs::cat({seconds, seconds * 0.8 + 3.0}, 1)).empty());
}

// ---- D6 --------------------------------------------------------------------------

TEST_CASE("D6 check_label_shape: (B,1) against (B) and the reverse; silent on matching and classification") {
  auto fs = dbg::check_label_shape(gs::zeros({8, 1}), gs::zeros({8}));  // B01
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].check == "D6");
  CHECK(fs[0].severity == dbg::Severity::Warning);
  CHECK(fs[0].title.find("broadcast to [8, 8]") != std::string::npos);
  CHECK(fs[0].shape == "prediction [8, 1], target [8]");
  CHECK(ev(fs[0], "elements after broadcasting") == 64.0);
  CHECK(fs[0].fix.find("prediction.squeeze(-1)") == 0);
  auto rev = dbg::check_label_shape(gs::zeros({8}), gs::zeros({8, 1}));
  REQUIRE(rev.size() == 1);
  CHECK(rev[0].severity == dbg::Severity::Warning);
  CHECK(rev[0].fix.find("target.squeeze(-1)") == 0);

  CHECK(dbg::check_label_shape(gs::zeros({8, 1}), gs::zeros({8, 1})).empty());
  CHECK(dbg::check_label_shape(gs::zeros({8, 10}), gs::zeros({8}, gs::kInt64)).empty());
  CHECK(dbg::check_label_shape(gs::zeros({8, 10, 5, 5}), gs::zeros({8, 5, 5}, gs::kInt64)).empty());

  // Shapes that cannot broadcast: an error, the loss will fail.
  auto no = dbg::check_label_shape(gs::zeros({8, 3}), gs::zeros({8}));
  REQUIRE(no.size() == 1);
  CHECK(no[0].severity == dbg::Severity::Error);
  // Broadcasting that does not enlarge (one target row for all): info only.
  auto one = dbg::check_label_shape(gs::zeros({8, 3}), gs::zeros({3}));
  REQUIRE(one.size() == 1);
  CHECK_FALSE(one[0].fires());
}

// ---- D7 --------------------------------------------------------------------------

TEST_CASE("D7 check_leakage: statistics fitted on test rows (B06)") {
  gs::Generator g(1);
  Tensor train = gs::randn({100, 4}, {}, &g), test = gs::randn({30, 4}, {}, &g);
  nn::Normalizer leaky;
  leaky.fit(train, "train").partial_fit(test, "test");
  auto fs = dbg::check_leakage(leaky, 100);
  REQUIRE(fs.size() == 2);
  CHECK(fs[0].check == "D7");
  CHECK(fs[0].severity == dbg::Severity::Error);
  CHECK(fs[0].title.find("fitted on test data (fitted_on = train, test)") != std::string::npos);
  CHECK(ev(fs[0], "splits fitted on") == 2.0);
  CHECK(fs[1].severity == dbg::Severity::Error);
  CHECK(ev(fs[1], "rows fitted") == 130.0);
  CHECK(ev(fs[1], "training rows") == 100.0);

  // Fitted on everything but labelled "train": the row count gives it away.
  nn::Normalizer mislabelled;
  mislabelled.fit(gs::cat({train, test}), "train");
  auto rows = dbg::check_leakage(mislabelled, 100);
  REQUIRE(rows.size() == 1);
  CHECK(ev(rows[0], "rows fitted") == 130.0);
  CHECK(dbg::check_leakage(mislabelled).empty());  // without train_size only the split names are checked

  // Global mode counts values: the Dataset overload converts with the example size.
  nn::Normalizer global(nn::Normalizer::Mode::Global);
  global.fit(gs::cat({train, test}), "train");
  nn::TensorDataset train_ds(train, gs::zeros({100}, gs::kInt64));
  REQUIRE(dbg::check_leakage(global, train_ds).size() == 1);
  CHECK(ev(dbg::check_leakage(global, train_ds)[0], "rows fitted") == 130.0);

  // Clean: fitted on train only.
  nn::Normalizer clean;
  clean.fit(train, "train");
  CHECK(dbg::check_leakage(clean, 100).empty());
  nn::Normalizer clean_global(nn::Normalizer::Mode::Global);
  clean_global.fit(train, "train");
  CHECK(dbg::check_leakage(clean_global, train_ds).empty());
  CHECK(dbg::check_leakage(nn::Normalizer()).empty());  // not fitted: nothing to say
}

TEST_CASE("D7 grades statistics fitted on more rows than the training split by how many more") {
  gs::Generator g(2);
  const Tensor x = gs::randn({1000, 3}, {}, &g);
  auto full = std::make_shared<nn::TensorDataset>(x, gs::zeros({1000}, gs::kInt64));
  auto [train, val] = nn::train_val_split(full, 0.2, 1);  // 800 and 200 rows
  auto severity_of = [&](const Tensor& fitted_on, const nn::Dataset* v) {
    nn::Normalizer n;
    n.fit(fitted_on, "train");
    const std::vector<dbg::Finding> fs = dbg::check_leakage(n, *train, v);
    REQUIRE(fs.size() == 1);
    CHECK(fs[0].kind == dbg::Kind::NormalizerLeak);
    return fs[0].severity;
  };
  // The dataset the splits were cut from, with or without the validation split known: an error.
  CHECK(severity_of(x, val.get()) == dbg::Severity::Error);
  CHECK(severity_of(x, nullptr) == dbg::Severity::Error);
  // The training and validation rows of another cut, 1,000 rows in all: an error with the split known.
  nn::TensorDataset loose_train(x.narrow(0, 0, 800), gs::zeros({800}, gs::kInt64));
  nn::TensorDataset loose_val(x.narrow(0, 800, 200), gs::zeros({200}, gs::kInt64));
  nn::Normalizer both;
  both.fit(x, "train");
  CHECK(dbg::check_leakage(both, loose_train, &loose_val)[0].severity == dbg::Severity::Error);
  // 1,300 rows: the labelled data and a test split the check does not see: a warning.
  const Tensor more = gs::cat({x, gs::randn({300, 3}, {}, &g)});
  CHECK(dbg::check_leakage(
            [&] {
              nn::Normalizer n;
              n.fit(more, "train");
              return n;
            }(),
            loose_train, &loose_val)[0]
            .severity == dbg::Severity::Warning);
  // A corpus 20x the labelled rows (the images a backbone was pretrained on): info.
  nn::Normalizer corpus;
  corpus.fit(gs::randn({20000, 3}, {}, &g), "train");
  const std::vector<dbg::Finding> big = dbg::check_leakage(corpus, loose_train, &loose_val);
  REQUIRE(big.size() == 1);
  CHECK(big[0].severity == dbg::Severity::Info);
  CHECK(ev(big[0], "validation rows") == 200.0);
}

// ---- D8 --------------------------------------------------------------------------

TEST_CASE("D8 check_batch_diversity: Fashion-MNIST sorted by class without shuffling (B28)") {
  REQUIRE_FASHION_MNIST();
  nn::DatasetPtr sorted = sorted_by_class(*fmnist(3000));
  nn::DataLoader bad(sorted, nn::DataLoaderOptions().batch_size(64));
  auto fs = dbg::check_batch_diversity(bad);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].check == "D8");
  CHECK(fs[0].severity == dbg::Severity::Warning);
  CHECK(ev(fs[0], "batches judged") == 20.0);
  CHECK(ev(fs[0], "single-class fraction") >= 0.8);  // a few batches straddle two classes
  CHECK(ev(fs[0], "expected under shuffling") < 1e-6);
  CHECK(ev(fs[0], "classes in the sample") == 10.0);
  CHECK(ev(fs[0], "loader shuffles") == 0.0);
  CHECK(fs[0].title.find("does not shuffle") != std::string::npos);
  CHECK(bad.epoch() == 0);

  // The same sorted data, shuffled: silent. And the original order, unshuffled: silent.
  CHECK(
      dbg::check_batch_diversity(nn::DataLoader(sorted, nn::DataLoaderOptions().batch_size(64).shuffle(true))).empty());
  CHECK(dbg::check_batch_diversity(nn::DataLoader(fmnist(3000), nn::DataLoaderOptions().batch_size(64))).empty());
}

TEST_CASE("D8 check_batch_diversity: imbalanced data is not mistaken for sorted data") {
  // 95% class 0, shuffled, batches of 8: ~66% single-class batches by chance (0.95^8).
  std::vector<int64_t> y(2000, 0);
  for (size_t i = 0; i < y.size(); i += 20) y[i] = 1;
  auto d = std::make_shared<nn::TensorDataset>(gs::zeros({2000, 2}), gs::tensor(y, {2000}));
  dbg::DataCheckOptions o;
  o.diversity_batches = 100;
  CHECK(dbg::check_batch_diversity(nn::DataLoader(d, nn::DataLoaderOptions().batch_size(8).shuffle(true)), o).empty());
  // Float (regression) targets: not judged.
  auto r = std::make_shared<nn::TensorDataset>(gs::zeros({64, 2}), gs::zeros({64}));
  CHECK(dbg::check_batch_diversity(nn::DataLoader(r, nn::DataLoaderOptions().batch_size(8))).empty());
  // Batches below min_batch_for_diversity are not judged.
  std::vector<int64_t> s(64, 0);
  std::fill(s.begin() + 32, s.end(), 1);
  auto sorted = std::make_shared<nn::TensorDataset>(gs::zeros({64, 2}), gs::tensor(s, {64}));
  CHECK(dbg::check_batch_diversity(nn::DataLoader(sorted, nn::DataLoaderOptions().batch_size(4))).empty());
  CHECK(dbg::check_batch_diversity(nn::DataLoader(sorted, nn::DataLoaderOptions().batch_size(8))).size() == 1);
}

// ---- D9 --------------------------------------------------------------------------

TEST_CASE("D9 check_label_encoding: float, one-hot, out-of-range and 1-indexed labels") {
  // Float labels holding whole numbers: convert.
  auto fl = dbg::check_label_encoding(gs::tensor({0.0, 1.0, 2.0}), 3);
  REQUIRE(fl.size() == 1);
  CHECK(fl[0].check == "D9");
  CHECK(fl[0].severity == dbg::Severity::Error);
  CHECK(fl[0].title == "class labels are float32, not int64");
  CHECK(fl[0].fix.find("y.to(gs::kInt64)") != std::string::npos);
  // Not whole numbers.
  auto frac = dbg::check_label_encoding(gs::tensor({0.2, 1.7}), 3);
  REQUIRE(frac.size() == 1);
  CHECK(ev(frac[0], "whole numbers") == 0.0);
  // One-hot rows.
  auto oh = dbg::check_label_encoding(gs::tensor({1.0, 0.0, 0.0, 0.0, 0.0, 1.0}, {2, 3}), 3);
  REQUIRE(oh.size() == 1);
  CHECK(oh[0].title.find("one-hot") != std::string::npos);
  CHECK(oh[0].fix.find("argmax(1)") != std::string::npos);

  // Labels 1..10 with C = 10 (B26): out of range, and named 1-indexed.
  std::vector<int64_t> one_based;
  for (int i = 0; i < 60; ++i) one_based.push_back(1 + i % 10);
  Tensor y1 = gs::tensor(one_based, {60});
  auto oob = dbg::check_label_encoding(y1, 10);
  REQUIRE(oob.size() == 1);
  CHECK(oob[0].severity == dbg::Severity::Error);
  CHECK(oob[0].title.find("1-indexed") != std::string::npos);
  CHECK(ev(oob[0], "min label") == 1.0);
  CHECK(ev(oob[0], "max label") == 10.0);
  CHECK(ev(oob[0], "classes C") == 10.0);
  CHECK(ev(oob[0], "labels outside [0, 10)") == 6.0);
  CHECK(oob[0].fix.find("y = y - 1") != std::string::npos);
  // The same labels with C unknown: a warning.
  auto warn = dbg::check_label_encoding(y1, 0);
  REQUIRE(warn.size() == 1);
  CHECK(warn[0].severity == dbg::Severity::Warning);
  CHECK(warn[0].title.find("0 never occurs among 60 labels while 1..10 all do") != std::string::npos);
  // Too few labels to tell: silent.
  CHECK(dbg::check_label_encoding(gs::tensor(std::vector<int64_t>{1, 2, 3}, {3}), 0).empty());

  // Negative labels: an error; ignore_index (-100) is masking, not an error.
  auto neg = dbg::check_label_encoding(gs::tensor(std::vector<int64_t>{0, -1, 2}, {3}), 3);
  REQUIRE(neg.size() == 1);
  CHECK(neg[0].severity == dbg::Severity::Error);
  CHECK(ev(neg[0], "min label") == -1.0);
  CHECK(dbg::check_label_encoding(gs::tensor(std::vector<int64_t>{0, -100, 2, 1}, {4}), 3).empty());
  // Too many classes for the model: an error naming max + 1.
  auto over = dbg::check_label_encoding(gs::tensor(std::vector<int64_t>{0, 1, 4}, {3}), 3);
  REQUIRE(over.size() == 1);
  CHECK(over[0].fix.find("max label + 1 = 5") != std::string::npos);
}

TEST_CASE(
    "D9 on float targets of several values per row: soft labels pass; a packed target is info under a loss of one's "
    "own") {
  // Rows of class probabilities (a teacher's, smoothed or mixed): cross-entropy takes them. Silent.
  const Tensor soft = gs::tensor({0.7, 0.2, 0.1, 0.05, 0.05, 0.9}, {2, 3});
  CHECK(dbg::check_label_encoding(soft, 3).empty());
  CHECK(dbg::check_label_encoding(soft, 0).empty());
  // Rows that do not sum to 1, or as wide as another number of classes: not probabilities over the classes.
  CHECK_FALSE(dbg::check_label_encoding(gs::tensor({0.7, 0.2, 0.3, 0.05, 0.05, 0.9}, {2, 3}), 3).empty());
  CHECK_FALSE(dbg::check_label_encoding(soft, 4).empty());
  // A teacher's logits beside the label (B, C + 1): an error for a library loss, info for one's own.
  const Tensor packed = gs::tensor({2.5, -1.0, 0.3, 0.0, -0.7, 3.1, 1.2, 1.0}, {2, 4});
  std::vector<dbg::Finding> fs = dbg::check_label_encoding(packed, 3);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].kind == dbg::Kind::LabelsNotWhole);
  CHECK(ev(fs[0], "values per label row") == 4.0);
  std::vector<dbg::Finding> library = fs;
  dbg::revise_encoding_for_own_loss(library, "CrossEntropyLoss");
  CHECK(library[0].severity == dbg::Severity::Error);
  dbg::revise_encoding_for_own_loss(fs, "DistillationLoss");
  CHECK(fs[0].severity == dbg::Severity::Info);
  CHECK(fs[0].title.find("DistillationLoss") != std::string::npos);
  // One float per row stays an error under any loss: a label column.
  std::vector<dbg::Finding> column = dbg::check_label_encoding(gs::tensor({0.2, 1.7}), 3);
  dbg::revise_encoding_for_own_loss(column, "");
  REQUIRE(column.size() == 1);
  CHECK(column[0].severity == dbg::Severity::Error);
}

TEST_CASE("D9 is silent on Fashion-MNIST labels and fires on them shifted by one") {
  REQUIRE_FASHION_MNIST();
  Tensor y = fmnist(2000)->all().y;
  CHECK(dbg::check_label_encoding(y, 10).empty());
  CHECK(dbg::check_label_encoding(y, 0).empty());
  auto fs = dbg::check_label_encoding(y + gs::ones_like(y), 10);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].severity == dbg::Severity::Error);
  CHECK(fs[0].title.find("1-indexed") != std::string::npos);
}

// ---- D10 -------------------------------------------------------------------------

TEST_CASE("D10 check_split_consistency: train standardised, test left unscaled") {
  REQUIRE_FASHION_MNIST();
  Tensor train = fmnist(3000)->all().x;
  Tensor test = nn::take(nn::load_fashion_mnist("test"), 2000)->all().x;
  CHECK(dbg::check_split_consistency(train, test, "test").empty());  // the same [0, 1] scaling
  nn::Normalizer norm(nn::Normalizer::Mode::Global);
  norm.fit(train, "train");
  CHECK(dbg::check_split_consistency(norm.transform(train), norm.transform(test), "test").empty());

  auto fs = dbg::check_split_consistency(norm.transform(train), test, "test");  // forgot to transform test
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].check == "D10");
  CHECK(fs[0].severity == dbg::Severity::Warning);
  CHECK(ev(fs[0], "train mean") == doctest::Approx(0.0).epsilon(1e-3).scale(1));
  CHECK(ev(fs[0], "test mean") == doctest::Approx(0.286).epsilon(0.05));
  CHECK(ev(fs[0], "std ratio") == doctest::Approx(0.353).epsilon(0.05));  // outside [0.5, 2]
  auto raw = dbg::check_split_consistency(train, test * 255.0, "val");
  REQUIRE(raw.size() == 1);
  CHECK(ev(raw[0], "mean shift") > 0.5);
  CHECK(ev(raw[0], "std ratio") == doctest::Approx(255.0).epsilon(0.01));
  CHECK(raw[0].title.find("the val inputs") == 0);

  // Per-pixel standardisation fitted on a small training split gives a few huge
  // z-scores on test (near-constant border pixels): not a preprocessing mismatch.
  Tensor small = fmnist(1000)->all().x;
  nn::Normalizer per_pixel(nn::Normalizer::Mode::PerFeature);
  per_pixel.fit(small, "train");
  CHECK(dbg::check_split_consistency(per_pixel.transform(small), per_pixel.transform(test), "test").empty());

  // A log on one split (monotone per pixel) is still preprocessing: the warning stays, and the
  // rank correlations between pixels agree.
  auto logged = dbg::check_split_consistency(train, gs::log(test * 255.0 + 1.0), "test");
  REQUIRE(logged.size() == 1);
  CHECK(logged[0].severity == dbg::Severity::Warning);
  CHECK(ev(logged[0], "mean |rank correlation| between features, train") ==
        doctest::Approx(ev(logged[0], "the same, test")).epsilon(0.15));
}

TEST_CASE("D10: noise written into one split's inputs is no preprocessing step: info, and the rank structure says so") {
  // Blobs with correlated features (one latent factor per row), train with noise of 2 feature stds.
  gs::Generator g(3);
  auto make = [&](int64_t n) {
    Tensor z = gs::randn({n, 1}, {}, &g);
    return z * gs::ones({1, 12}) + 0.5 * gs::randn({n, 12}, {}, &g);
  };
  Tensor train = make(1200), val = make(400);
  Tensor noisy = train + 2.0 * gs::randn({1200, 12}, {}, &g) * 1.12;  // each feature's std is ~1.12
  auto fs = dbg::check_split_consistency(noisy, val, "val");
  INFO(all_str(fs));
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].check == "D10");
  CHECK(fs[0].severity == dbg::Severity::Info);
  CHECK(fs[0].title.find("in more than their preprocessing") != std::string::npos);
  CHECK(ev(fs[0], "mean |rank correlation| between features, train") <
        0.7 * ev(fs[0], "the same, val"));
  // The same rows scaled 3x (a preprocessing step): a warning.
  auto scaled = dbg::check_split_consistency(train, val * 3.0, "val");
  REQUIRE(scaled.size() == 1);
  CHECK(scaled[0].severity == dbg::Severity::Warning);
}

TEST_CASE("D10: with the labels, noise on features without rank structure is told apart from a scale") {
  // Two classes apart along feature 0 (+-2), five more features of independent noise: no rank
  // structure between the features. Standardised, then train with noise of 2 feature stds written
  // in, as a stored-noise fault does; the rank correlations cannot tell it from a scale.
  gs::Generator g(3);
  const int64_t n = 1600, d = 6;
  const Tensor z = gs::randn({n, d}, {}, &g);
  std::vector<float> xs(static_cast<size_t>(n * d));
  std::vector<int64_t> ys(static_cast<size_t>(n));
  const std::vector<float> zv = z.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    ys[static_cast<size_t>(i)] = i % 2;
    for (int64_t j = 0; j < d; ++j)
      xs[static_cast<size_t>(i * d + j)] =
          zv[static_cast<size_t>(i * d + j)] + (j == 0 ? (i % 2 ? 2.0f : -2.0f) : 0.0f);
  }
  const Tensor x = gs::tensor(xs, {n, d}), y = gs::tensor(ys, {n});
  const Tensor mu = gs::mean(x, {0}, /*keepdim=*/true), sd = gs::std(x, {0}, /*unbiased=*/false, /*keepdim=*/true);
  const Tensor xs_std = (x - mu) / sd;
  const Tensor tr = xs_std.narrow(0, 0, 1200), va = xs_std.narrow(0, 1200, 400);
  const Tensor ytr = y.narrow(0, 0, 1200), yva = y.narrow(0, 1200, 400);
  const Tensor noisy = tr + 2.0 * gs::randn({1200, d}, {}, &g);
  auto fs = dbg::check_split_consistency(noisy, ytr, va, yva, "val");
  INFO(all_str(fs));
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].severity == dbg::Severity::Info);
  CHECK(fs[0].title.find("nearest neighbour") != std::string::npos);
  CHECK(ev(fs[0], "labels told by the nearest neighbour (above chance), train") <
        0.7 * ev(fs[0], "labels told by the nearest neighbour (above chance), val"));
  // Without the labels the same inputs read as preprocessing: no rank structure to tell.
  auto blind = dbg::check_split_consistency(noisy, va, "val");
  INFO(all_str(blind));
  REQUIRE(blind.size() == 1);
  CHECK(blind[0].severity == dbg::Severity::Warning);
  // A scale on one split keeps what the neighbours say: a preprocessing mismatch, a warning.
  auto scaled = dbg::check_split_consistency(tr, ytr, va * 3.0, yva, "val");
  INFO(all_str(scaled));
  REQUIRE(scaled.size() == 1);
  CHECK(scaled[0].severity == dbg::Severity::Warning);
  CHECK(ev(scaled[0], "labels told by the nearest neighbour (above chance), train") ==
        doctest::Approx(ev(scaled[0], "labels told by the nearest neighbour (above chance), val")).epsilon(0.2));
}

// ---- check_loader ----------------------------------------------------------------

TEST_CASE("check_loader: a clean Fashion-MNIST loader is quiet; a raw, sorted, 1-indexed one is not") {
  REQUIRE_FASHION_MNIST();
  nn::DataLoader clean(fmnist(3000), nn::DataLoaderOptions().batch_size(64).shuffle(true));
  auto fs = dbg::check_loader(clean, 10);
  INFO(all_str(fs));
  CHECK_FALSE(any_fires(fs));
  REQUIRE(fs.size() >= 2);
  CHECK(fs[0].check == "D1");
  CHECK(std::any_of(fs.begin(), fs.end(), [](const dbg::Finding& f) { return f.check == "D3"; }));

  // Raw pixels, sorted by class, labels 1..10: D5, D8 and D9 fire.
  nn::Batch b = sorted_by_class(*fmnist(3000, /*raw=*/true))->all();
  auto buggy = std::make_shared<nn::TensorDataset>(b.x, b.y + gs::ones_like(b.y));
  dbg::Report r;
  r.add(dbg::check_loader(nn::DataLoader(buggy, nn::DataLoaderOptions().batch_size(64)), 10));
  INFO(r.str());
  CHECK(r.fired("D5"));
  CHECK(r.fired("D8"));
  CHECK(r.fired("D9"));
  CHECK_FALSE(r.fired("D2"));
}

TEST_CASE("spread_batches: evenly over the epoch, first and last included; none when the epoch is empty") {
  auto d = std::make_shared<nn::TensorDataset>(gs::zeros({100, 2}), gs::zeros({100}, gs::kInt64));
  nn::DataLoader l(d, nn::DataLoaderOptions().batch_size(10));
  CHECK(dbg::spread_batches(l, 4) == std::vector<int64_t>{0, 3, 6, 9});
  CHECK(dbg::spread_batches(l, 20).size() == 10);
  nn::DataLoader none(d, nn::DataLoaderOptions().batch_size(200).drop_last(true));
  CHECK(dbg::spread_batches(none, 5).empty());
  CHECK(dbg::check_loader(none, 10).empty());
}

// Cumulative targets of an ordinal label (levels 0-4, column k meaning "level > k"): built with >= (every
// row's column 0 is 1, each target one level up) D9 warns; with > it does not, nor on multi-label targets
// whose rare label the rows lack (a column of 0s) or on one-hot rows.
TEST_CASE("D9 on 0/1 target columns: a column set on every row (an ordinal encoding built with >=) warns") {
  gs::manual_seed(3);
  const int64_t n = 400;
  const Tensor x = gs::randn({n, 5});
  const Tensor level = gs::randint(0, 5, {n, 1});
  const Tensor k = gs::arange(4, gs::kInt64).view({1, 4});
  auto loader_of = [&](const Tensor& y) {
    return nn::DataLoader(std::make_shared<nn::TensorDataset>(x, y.to(gs::kFloat32)),
                          nn::DataLoaderOptions().batch_size(50));
  };
  auto constant_columns = [](const std::vector<dbg::Finding>& fs) {
    for (const dbg::Finding& f : fs)
      if (f.fires() && f.is("D9", dbg::Kind::TargetColumnConstant)) return &f - &fs[0];
    return std::ptrdiff_t{-1};
  };
  const std::vector<dbg::Finding> ge = dbg::check_loader(loader_of(gs::ge(level, k)), -1);
  const std::ptrdiff_t at = constant_columns(ge);
  REQUIRE_MESSAGE(at >= 0, all_str(ge));
  CHECK(ge[static_cast<size_t>(at)].severity == dbg::Severity::Warning);
  CHECK(has(ge[static_cast<size_t>(at)].title, "target column 0 of"));
  CHECK(ev(ge[static_cast<size_t>(at)], "columns that are 1 on every row") == 1);
  CHECK(constant_columns(dbg::check_loader(loader_of(gs::gt(level, k)), -1)) < 0);
  // Multi-label targets with a label no row has: a column of 0s is left alone.
  Tensor multi = gs::gt(gs::rand({n, 4}), 0.6).to(gs::kFloat32);
  multi = multi * gs::tensor(std::vector<float>{1, 1, 1, 0}, {1, 4});
  CHECK(constant_columns(dbg::check_loader(loader_of(multi), -1)) < 0);
  // One-hot rows of the five levels.
  CHECK(constant_columns(dbg::check_loader(loader_of(gs::eq(level, gs::arange(5, gs::kInt64).view({1, 5}))), -1)) < 0);
}

// ---- D12-D16 ---------------------------------------------------------------------

namespace {

// Synthetic images of one distribution: x (n, 1, 8, 8) in [0, 1], a bright 3x3 square at a
// place set by the class (of C) on uniform noise; y (n) int64, classes in turn (balanced).
struct Images {
  Tensor x, y;
};
Images images(int64_t n, int64_t C, uint64_t seed) {
  gs::Generator g(seed);
  Tensor x = gs::rand({n, 1, 8, 8}, {}, &g) * 0.5;
  std::vector<float> v = x.to_vector<float>();
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    y[i] = i % C;
    const int64_t r0 = (y[i] * 2) % 6, c0 = (y[i] * 3) % 6;
    for (int64_t r = r0; r < r0 + 3; ++r)
      for (int64_t c = c0; c < c0 + 3; ++c) v[i * 64 + r * 8 + c] += 0.5f;
  }
  return {gs::tensor(v, {n, 1, 8, 8}), gs::tensor(y, {n})};
}

nn::DatasetPtr dataset(const Tensor& x, const Tensor& y, const std::string& name) {
  return std::make_shared<nn::TensorDataset>(x, y, name);
}

// Rows [lo, lo + n) of x or y.
Tensor rows_of(const Tensor& t, int64_t lo, int64_t n) { return t.narrow(0, lo, n); }

// The clean twin: one draw of 2000 images split at random into 1600 / 400, disjoint.
std::pair<nn::DatasetPtr, nn::DatasetPtr> clean_splits() {
  const Images all = images(2000, 5, 7);
  auto [tr, va] = nn::train_val_split(dataset(all.x, all.y, "images"), 0.2, 3);
  return {tr, va};
}

}  // namespace

TEST_CASE("D12-D16 are silent on two disjoint random splits of one distribution") {
  auto [train, val] = clean_splits();
  REQUIRE(train->size() == 1600);
  REQUIRE(val->size() == 400);
  auto dup = dbg::check_duplicates(*train);
  INFO(all_str(dup));
  CHECK(dup.empty());  // continuous noise: every input unique
  auto fs = dbg::check_splits(*train, *val, "validation");
  INFO(all_str(fs));
  CHECK(fs.empty());
  CHECK(dbg::check_train_test_mix(*train, *val).empty());
  CHECK(dbg::check_feature_drift(*train, *val).empty());
  CHECK(dbg::check_label_drift(*train, *val).empty());
  CHECK(dbg::check_split_sizes(*train, *val).empty());
}

// Impressions of a recommender: each row joins one of 300 users' and one of 200 articles' features (5
// each), the label a click drawn from their affinity. 6,000 impressions meet the same pair again by
// chance (4,800 training rows: about 190 times), with another click outcome often: D12 and D13 are info
// there. The same
// rows with 300 of them appended again under the other label still warn.
TEST_CASE(
    "D12 and D13 on rows joined from repeated items: outcomes that differ are no conflict; relabelled copies are") {
  gs::Generator g(21);
  const Tensor users = gs::randn({300, 5}, {}, &g), items = gs::randn({200, 5}, {}, &g);
  const int64_t n = 6000;
  const Tensor u = gs::randint(0, 300, {n}, gs::kInt64, &g), i = gs::randint(0, 200, {n}, gs::kInt64, &g);
  const Tensor x = gs::cat({users.index_select(0, u), items.index_select(0, i)}, 1);
  const Tensor p = gs::sigmoid(gs::sum(users.index_select(0, u) * items.index_select(0, i), {1}));
  const Tensor y = gs::lt(gs::rand({n}, {}, &g), p).to(gs::kInt64);
  auto [train, val] = nn::train_val_split(dataset(x, y, "impressions"), 0.2, 3);
  const std::vector<dbg::Finding> dup = dbg::check_duplicates(*train);
  REQUIRE(dup.size() == 1);
  INFO(dup[0].str());
  CHECK(dup[0].severity == dbg::Severity::Info);
  CHECK(has(dup[0].title, "rows joined from repeated items"));
  CHECK(ev(dup[0], "rows whose input has another label elsewhere") > 0);
  const std::vector<dbg::Finding> mix = dbg::check_train_test_mix(*train, *val);
  REQUIRE(mix.size() == 1);
  INFO(mix[0].str());
  CHECK(mix[0].severity == dbg::Severity::Info);
  CHECK(has(mix[0].title, "rows joined from repeated items"));
  // 300 training rows appended again, each with the other click label: conflicts on every copy.
  const nn::Batch t = train->all();
  const Tensor again = gs::cat({t.x, t.x.narrow(0, 0, 300)}), labels = gs::cat({t.y, 1 - t.y.narrow(0, 0, 300)});
  const std::vector<dbg::Finding> relabelled = dbg::check_duplicates(*dataset(again, labels, "appended"));
  REQUIRE(relabelled.size() == 1);
  INFO(relabelled[0].str());
  CHECK(relabelled[0].severity == dbg::Severity::Warning);
}

TEST_CASE("D12 check_duplicates: 5% of the rows copied with flipped labels; copies alone; a few copies") {
  const Images a = images(1000, 5, 11);
  // Rows 0..49 appended again with the next class: 50 copies, 100 rows with conflicting labels.
  std::vector<int64_t> next = rows_of(a.y, 0, 50).to_vector<int64_t>();
  for (int64_t& c : next) c = (c + 1) % 5;
  Tensor flipped = gs::tensor(next, {50});
  auto conflicting = dataset(gs::cat({a.x, rows_of(a.x, 0, 50)}), gs::cat({a.y, flipped}), "relabelled");
  auto fs = dbg::check_duplicates(*conflicting);
  REQUIRE(fs.size() == 1);
  INFO(fs[0].str());
  CHECK(fs[0].check == "D12");
  CHECK(fs[0].severity == dbg::Severity::Warning);
  CHECK(ev(fs[0], "rows read") == 1050);
  CHECK(ev(fs[0], "repeated rows") == 50);
  CHECK(ev(fs[0], "duplicate fraction") == doctest::Approx(50.0 / 1050));  // under 5%: the conflicts fire
  CHECK(ev(fs[0], "rows whose input has another label") == 100);
  CHECK(ev(fs[0], "conflicting-label fraction") == doctest::Approx(100.0 / 1050));
  CHECK(has(fs[0].title, "100 of 1050 rows of relabelled share their input with a row of another label"));
  CHECK(has(fs[0].cause, "rows 0 and 1000 hold the same input (labels 0, 1)"));

  // The same 50 rows copied twice with their own labels: 100 of 1100 rows repeat (9.1% > 5%).
  auto copied = dataset(gs::cat({a.x, rows_of(a.x, 0, 50), rows_of(a.x, 0, 50)}),
                        gs::cat({a.y, rows_of(a.y, 0, 50), rows_of(a.y, 0, 50)}), "copied");
  auto cp = dbg::check_duplicates(*copied);
  REQUIRE(cp.size() == 1);
  CHECK(cp[0].severity == dbg::Severity::Warning);
  CHECK(ev(cp[0], "duplicate fraction") == doctest::Approx(100.0 / 1100));
  CHECK(ev(cp[0], "rows whose input has another label") == 0);
  CHECK(ev(cp[0], "most copies of one input") == 3);
  CHECK(has(cp[0].title, "100 of 1100 rows of copied repeat an earlier row's input (9.1%)"));

  // Five copies with their labels (0.5%): an info finding, not a warning.
  auto few = dataset(gs::cat({a.x, rows_of(a.x, 0, 5)}), gs::cat({a.y, rows_of(a.y, 0, 5)}), "few");
  auto fw = dbg::check_duplicates(*few);
  REQUIRE(fw.size() == 1);
  CHECK(fw[0].severity == dbg::Severity::Info);
  CHECK(ev(fw[0], "repeated rows") == 5);

  // Bounded: with integrity_examples = 1000 the appended copies are not read.
  dbg::DataCheckOptions o;
  o.integrity_examples = 1000;
  CHECK(dbg::check_duplicates(*conflicting, o).empty());
}

namespace {
// Context k as four token ids of a vocabulary of 40 (its digits in base 40).
void push_context(std::vector<int64_t>& x, int64_t k) {
  for (int64_t j = 0, d = 1; j < 4; ++j, d *= 40) x.push_back((k / d) % 40);
}

// 6,000 rows of four token ids, each row one of 400,000 contexts drawn with Zipf weights (1 / rank^0.7):
// the head recurs, the tail is met once. The label (of 20) is the context's own with probability 0.7,
// another at random otherwise: the next token after a context.
std::pair<Tensor, Tensor> zipf_contexts(int64_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  const int64_t contexts = 400000;
  std::vector<double> w(contexts);
  for (int64_t k = 0; k < contexts; ++k) w[k] = 1.0 / std::pow(static_cast<double>(k + 1), 0.7);
  std::discrete_distribution<int64_t> pick(w.begin(), w.end());
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int64_t> x, y;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = pick(g);
    push_context(x, k);
    y.push_back(u(g) < 0.7 ? k % 20 : static_cast<int64_t>(u(g) * 20));
  }
  return {gs::tensor(x, {n, 4}), gs::tensor(y, {n})};
}
}  // namespace

TEST_CASE("D12: token contexts that recur by nature are info; token rows appended again with another label warn") {
  const auto [x, y] = zipf_contexts(6000, 5);
  const std::vector<dbg::Finding> natural = dbg::check_duplicates(*dataset(x, y, "contexts"));
  REQUIRE(natural.size() == 1);
  INFO(natural[0].str());
  CHECK(ev(natural[0], "duplicate fraction") > 0.05);  // past the copies' limit, under a discrete set's
  CHECK(ev(natural[0], "duplicate fraction") < 0.2);
  CHECK(ev(natural[0], "conflicting-label fraction") > 0.01);
  CHECK(ev(natural[0], "copies in groups of three rows or more") >= 0.25);
  CHECK(natural[0].severity == dbg::Severity::Info);
  CHECK(has(natural[0].title, "recur by nature"));
  // Contexts met once each (the first 3,000 distinct ones), 300 of them appended again with the next label:
  // every copy a pair.
  std::vector<int64_t> ux, uy;
  for (int64_t k = 0; k < 3000; ++k) {
    push_context(ux, k * 97);
    uy.push_back(k % 20);
  }
  for (int64_t k = 0; k < 300; ++k) {
    push_context(ux, k * 97);
    uy.push_back((k + 1) % 20);
  }
  const std::vector<dbg::Finding> appended =
      dbg::check_duplicates(*dataset(gs::tensor(ux, {3300, 4}), gs::tensor(uy, {3300}), "appended"));
  REQUIRE(appended.size() == 1);
  INFO(appended[0].str());
  CHECK(ev(appended[0], "copies in groups of three rows or more") == 0.0);
  CHECK(appended[0].severity == dbg::Severity::Warning);
}

TEST_CASE("D12: a regression's copies within the target's noise are info; a target column of another source warns") {
  // 4,000 ratings of (user, item) pairs over 400 users and 300 items: pairs met again by chance, each rating
  // the pair's mean plus noise of sd 0.2 against a spread of about 1.
  std::mt19937_64 g(3);
  std::uniform_int_distribution<int64_t> user(0, 399), item(0, 299);
  std::normal_distribution<double> z(0.0, 1.0);
  std::vector<double> bias_u(400), bias_i(300);
  for (double& b : bias_u) b = z(g);
  for (double& b : bias_i) b = z(g);
  // 4,000 (user, item) pairs drawn by the two distributions, each rated at the pair's mean plus noise.
  auto ratings = [&](auto& pick_user, auto& pick_item) {
    std::vector<int64_t> ids;
    std::vector<float> y;
    for (int64_t r = 0; r < 4000; ++r) {
      const int64_t a = pick_user(g), b = pick_item(g);
      ids.push_back(a);
      ids.push_back(b);
      y.push_back(static_cast<float>(3.0 + 0.7 * (bias_u[a] + bias_i[b]) + 0.2 * z(g)));
    }
    return std::make_pair(ids, y);
  };
  const auto [x, noisy] = ratings(user, item);
  std::vector<float> shuffled = noisy;
  std::shuffle(shuffled.begin(), shuffled.end(), g);  // the targets of another file, in another order
  const Tensor xt = gs::tensor(x, {4000, 2});
  const std::vector<dbg::Finding> noise = dbg::check_duplicates(*dataset(xt, gs::tensor(noisy, {4000}), "ratings"));
  REQUIRE(noise.size() == 1);
  INFO(noise[0].str());
  CHECK(ev(noise[0], "conflicting-label fraction") > 0.01);
  CHECK(ev(noise[0], "variance of the targets about each repeated input's mean / the targets' variance") < 0.1);
  CHECK(noise[0].severity == dbg::Severity::Info);
  CHECK_FALSE(has(noise[0].title, "accuracy"));
  // The same ratings over 40 users and 30 items: half the rows repeat (a discrete set), and the title
  // gives a regression's targets no accuracy ceiling.
  std::vector<int64_t> few_ids;
  for (size_t k = 0; k < x.size(); ++k) few_ids.push_back(x[k] % (k % 2 == 0 ? 40 : 30));
  const std::vector<dbg::Finding> dense =
      dbg::check_duplicates(*dataset(gs::tensor(few_ids, {4000, 2}), gs::tensor(noisy, {4000}), "ratings (dense)"));
  REQUIRE(dense.size() == 1);
  INFO(dense[0].str());
  CHECK(has(dense[0].title, "a small discrete set"));
  CHECK(has(dense[0].title, "with other targets"));
  CHECK_FALSE(has(dense[0].title, "accuracy"));
  // Users and items drawn with Zipf weights (1 / rank^0.7): the popular pairs recur, past the copies' 5%
  // and in groups of three or more. Copies within the rating's noise are info; the shuffled column warns.
  auto zipf = [](size_t n) {
    std::vector<double> w(n);
    for (size_t k = 0; k < n; ++k) w[k] = 1.0 / std::pow(static_cast<double>(k + 1), 0.7);
    return std::discrete_distribution<int64_t>(w.begin(), w.end());
  };
  auto zu = zipf(400), zi = zipf(300);
  auto [zx, zy] = ratings(zu, zi);
  const Tensor zxt = gs::tensor(zx, {4000, 2});
  const std::vector<dbg::Finding> popular = dbg::check_duplicates(*dataset(zxt, gs::tensor(zy, {4000}), "popular"));
  REQUIRE(popular.size() == 1);
  INFO(popular[0].str());
  CHECK(ev(popular[0], "duplicate fraction") > 0.05);
  CHECK(ev(popular[0], "duplicate fraction") < 0.2);
  CHECK(ev(popular[0], "copies in groups of three rows or more") >= 0.25);
  CHECK(popular[0].severity == dbg::Severity::Info);
  std::shuffle(zy.begin(), zy.end(), g);
  const std::vector<dbg::Finding> mixed =
      dbg::check_duplicates(*dataset(zxt, gs::tensor(zy, {4000}), "popular (shuffled)"));
  REQUIRE(mixed.size() == 1);
  INFO(mixed[0].str());
  CHECK(mixed[0].severity == dbg::Severity::Warning);
  const std::vector<dbg::Finding> other =
      dbg::check_duplicates(*dataset(xt, gs::tensor(shuffled, {4000}), "ratings (shuffled)"));
  REQUIRE(other.size() == 1);
  INFO(other[0].str());
  CHECK(ev(other[0], "variance of the targets about each repeated input's mean / the targets' variance") > 0.5);
  CHECK(other[0].severity == dbg::Severity::Warning);
}

TEST_CASE("D13 check_train_test_mix: a validation split that holds training rows") {
  auto [train, val] = clean_splits();
  const nn::Batch t = train->all(), v = val->all();
  // 300 held-out rows and 60 training rows (one of them relabelled): 60 of 360 mixed.
  Tensor ty = rows_of(t.y, 0, 60).clone();
  auto leaky =
      dataset(gs::cat({rows_of(v.x, 0, 300), rows_of(t.x, 0, 60)}), gs::cat({rows_of(v.y, 0, 300), ty}), "leaky");
  auto fs = dbg::check_train_test_mix(*train, *leaky, "validation");
  REQUIRE(fs.size() == 1);
  INFO(fs[0].str());
  CHECK(fs[0].check == "D13");
  CHECK(fs[0].severity == dbg::Severity::Warning);
  CHECK(ev(fs[0], "validation rows also in train") == 60);
  CHECK(ev(fs[0], "mixed fraction") == doctest::Approx(60.0 / 360));
  CHECK(ev(fs[0], "of them with another label") == 0);
  CHECK(has(fs[0].title, "60 of 360 validation rows (16.7%) are also training rows"));
  CHECK(has(fs[0].cause, "validation row 300 is training row 0"));
  // Two training rows in 400 (0.5% <= 1%): info.
  auto two = dataset(gs::cat({rows_of(v.x, 0, 398), rows_of(t.x, 5, 2)}),
                     gs::cat({rows_of(v.y, 0, 398), rows_of(t.y, 5, 2)}), "two");
  auto tw = dbg::check_train_test_mix(*train, *two);
  REQUIRE(tw.size() == 1);
  CHECK(tw[0].severity == dbg::Severity::Info);
  // The same images flattened are the same inputs: found through the reshape.
  auto flat = dataset(leaky->all().x.reshape({360, 64}), leaky->all().y, "flat");
  auto fl = dbg::check_train_test_mix(*train, *flat);
  REQUIRE(fl.size() == 1);
  CHECK(ev(fl[0], "validation rows also in train") == 60);
  // Inputs with another number of values cannot be compared: a clear error naming the check.
  auto cropped = dataset(v.x.reshape({400, 64}).narrow(1, 0, 32).contiguous(), v.y, "cropped");
  for (const char* which : {"check_train_test_mix", "check_feature_drift"}) {
    try {
      if (std::string(which) == "check_train_test_mix")
        dbg::check_train_test_mix(*train, *cropped);
      else
        dbg::check_feature_drift(*train, *cropped);
      FAIL("no error from " << which);
    } catch (const gs::Error& e) {
      CHECK(has(e.what(), which));
      CHECK(has(e.what(), "shape [1, 8, 8] (64 values)"));
      CHECK(has(e.what(), "validation examples [32] (32 values)"));
    }
  }
}

TEST_CASE("D14 check_feature_drift: a brightened validation split, a low-contrast one") {
  auto [train, val] = clean_splits();
  const nn::Batch v = val->all();
  auto bright = dataset(gs::clamp(v.x + 0.15, 0.0, 1.0), v.y, "bright");
  auto fs = dbg::check_feature_drift(*train, *bright, "validation");
  REQUIRE(fs.size() == 1);
  INFO(fs[0].str());
  CHECK(fs[0].check == "D14");
  CHECK(fs[0].severity == dbg::Severity::Warning);
  CHECK(ev(fs[0], "KS statistic, per-example mean") > 0.9);  // the two brightness distributions hardly overlap
  CHECK(ev(fs[0], "validation median of the per-example mean") - ev(fs[0], "train median of the per-example mean") ==
        doctest::Approx(0.15).epsilon(0.1));
  CHECK(has(fs[0].title, "the validation inputs drifted from train: per-example mean (brightness)"));
  // Contrast halved around the same mean: the std drifts, the mean does not.
  Tensor m = gs::mean(v.x);
  auto flat = dataset((v.x - m) * 0.5 + m, v.y, "flat");
  auto fl = dbg::check_feature_drift(*train, *flat, "test");
  REQUIRE(fl.size() == 1);
  CHECK(ev(fl[0], "KS statistic, per-example std") > 0.9);
  CHECK(ev(fl[0], "KS statistic, per-example mean") < 0.2);
  CHECK(has(fl[0].title, "std (contrast)"));
  // Too few rows to judge a distribution: silent (D16 speaks).
  auto tiny = dataset(rows_of(bright->all().x, 0, 20), rows_of(v.y, 0, 20), "tiny");
  CHECK(dbg::check_feature_drift(*train, *tiny).empty());
}

TEST_CASE("D15 check_label_drift: a class missing from train; a validation split with one class oversampled") {
  const Images a = images(2000, 5, 21);
  const std::vector<int64_t> y = a.y.to_vector<int64_t>();
  // Train: the first 1500 rows without class 4; validation: the last 500 (100 of each class).
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < 1500; ++i)
    if (y[i] != 4) keep.push_back(i);
  Tensor k = gs::tensor(keep, {static_cast<int64_t>(keep.size())});
  auto train = dataset(a.x.index_select(0, k), a.y.index_select(0, k), "train");
  auto val = dataset(rows_of(a.x, 1500, 500), rows_of(a.y, 1500, 500), "val");
  auto fs = dbg::check_label_drift(*train, *val, "validation");
  REQUIRE(fs.size() == 1);  // the new class; over the shared classes the shares agree
  INFO(fs[0].str());
  CHECK(fs[0].check == "D15");
  CHECK(fs[0].severity == dbg::Severity::Warning);
  CHECK(ev(fs[0], "new classes") == 1);
  CHECK(ev(fs[0], "validation rows with a new class") == 100);
  CHECK(has(fs[0].title, "1 class of validation never occurs in train: class 4 (100 of 500 validation rows)"));

  // Validation with class 0 at half the rows (train: a fifth): PSI well above 0.2.
  auto [tr, va] = clean_splits();
  const nn::Batch v = va->all();
  const std::vector<int64_t> vy = v.y.to_vector<int64_t>();
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < v.size(); ++i) rows.push_back(i);  // every row once...
  for (int64_t i = 0; i < v.size(); ++i)
    if (vy[i] == 0)
      for (int r = 0; r < 3; ++r) rows.push_back(i);  // ...class 0 four times
  Tensor ri = gs::tensor(rows, {static_cast<int64_t>(rows.size())});
  auto skewed = dataset(v.x.index_select(0, ri), v.y.index_select(0, ri), "skewed");
  auto sk = dbg::check_label_drift(*tr, *skewed, "validation");
  REQUIRE(sk.size() == 1);
  INFO(sk[0].str());
  CHECK(ev(sk[0], "population-stability index") > 0.2);
  CHECK(ev(sk[0], "class 0 share in validation") == doctest::Approx(0.5).epsilon(0.1));
  CHECK(ev(sk[0], "class 0 share in train") == doctest::Approx(0.2).epsilon(0.05));
  CHECK(has(sk[0].title, "the class frequencies of validation differ from train: PSI"));
  // Regression targets are not classes: silent.
  auto reg = dataset(v.x, gs::rand({v.size(), 1}), "regression");
  CHECK(dbg::check_label_drift(*tr, *reg).empty());
}

// Counts as targets (a Poisson model's): values 0..14 in train, and validation's rare highest counts
// past them on 2 of 1,000 rows are a count's tail (info); a value inside the range that train lacks,
// or the same values on many rows, still warns.
TEST_CASE("D15 check_label_drift: new values past train's largest on a few rows of a count target are its tail") {
  auto counts = [](int64_t n, int64_t top, const std::vector<int64_t>& extra, int64_t skip) {
    std::vector<int64_t> y;
    for (int64_t i = 0; static_cast<int64_t>(y.size()) < n - static_cast<int64_t>(extra.size()); ++i)
      if (i % (top + 1) != skip) y.push_back(i % (top + 1));
    y.insert(y.end(), extra.begin(), extra.end());
    const int64_t m = static_cast<int64_t>(y.size());
    return dataset(gs::zeros({m, 2}), gs::tensor(y, {m}), "counts");
  };
  auto train = counts(3000, 14, {}, -1);
  const std::vector<dbg::Finding> tail = dbg::check_label_drift(*train, *counts(1000, 14, {21, 30}, -1), "validation");
  REQUIRE(tail.size() == 1);
  CHECK(tail[0].severity == dbg::Severity::Info);
  CHECK(ev(tail[0], "new classes") == 2);
  // Value 7 missing from train, present in validation: warns.
  auto gap = counts(3000, 14, {}, 7);
  const std::vector<dbg::Finding> inside = dbg::check_label_drift(*gap, *counts(1000, 14, {}, -1), "validation");
  REQUIRE_FALSE(inside.empty());
  CHECK(inside[0].severity == dbg::Severity::Warning);
  // Past the range but on 3% of the rows: warns.
  const std::vector<int64_t> many(30, 20);
  const std::vector<dbg::Finding> wide = dbg::check_label_drift(*train, *counts(1000, 14, many, -1), "validation");
  REQUIRE_FALSE(wide.empty());
  CHECK(wide[0].severity == dbg::Severity::Warning);
}

// D15's second rule: a shift under the PSI's 0.2 that stands out from the counts' noise. Two classes,
// train at 2:1 and validation at 1:1 (PSI 0.116, what removing half of one class's training examples
// does): 3000 and 1000 rows make it a chi-square z of 7.7; 300 and 100 rows, a z of 2.7, within the
// noise of so few counts.
TEST_CASE("D15 check_label_drift: a small shift over many rows warns, the same shift over few rows does not") {
  auto split = [](int64_t rows, int64_t every, const std::string& name) {
    std::vector<int64_t> y(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) y[static_cast<size_t>(i)] = i % every == 0 ? 1 : 0;
    return dataset(gs::randn({rows, 4}), gs::tensor(y, {rows}), name);
  };
  auto fs = dbg::check_label_drift(*split(3000, 3, "train"), *split(1000, 2, "val"), "validation");
  REQUIRE(fs.size() == 1);
  INFO(fs[0].str());
  CHECK(fs[0].severity == dbg::Severity::Warning);
  CHECK(ev(fs[0], "population-stability index") == doctest::Approx(0.1155).epsilon(0.01));
  CHECK(ev(fs[0], "population-stability index") < 0.2);
  CHECK(ev(fs[0], "z of the shift against the counts' noise (chi-square, Wilson-Hilferty)") == doctest::Approx(7.74).epsilon(0.01));
  CHECK(dbg::check_label_drift(*split(300, 3, "train"), *split(100, 2, "val"), "validation").empty());
  // The same splits balanced alike: silent however many rows.
  CHECK(dbg::check_label_drift(*split(3000, 2, "train"), *split(1000, 2, "val"), "validation").empty());
}

TEST_CASE("D16 check_split_sizes: a 20-example validation split; an empty one; 0.5% of train") {
  auto [train, val] = clean_splits();
  const nn::Batch v = val->all();
  auto small = dataset(rows_of(v.x, 0, 20), rows_of(v.y, 0, 20), "small");
  auto fs = dbg::check_split_sizes(*train, *small, "validation");
  REQUIRE(fs.size() == 1);
  INFO(fs[0].str());
  CHECK(fs[0].check == "D16");
  CHECK(fs[0].severity == dbg::Severity::Warning);
  CHECK(ev(fs[0], "training rows") == 1600);
  CHECK(ev(fs[0], "validation rows") == 20);
  CHECK(ev(fs[0], "validation / train ratio") == doctest::Approx(20.0 / 1600));
  CHECK(ev(fs[0], "std error") == doctest::Approx(std::sqrt(0.09 / 20)));
  CHECK(fs[0].title == "the validation split has only 20 examples against 1600 in train (ratio 0.0125)");
  // check_splits reports it too, and judges no drift on 20 rows.
  auto all = dbg::check_splits(*train, *small, "validation");
  INFO(all_str(all));
  REQUIRE(all.size() == 1);
  CHECK(all[0].check == "D16");
  auto empty = dataset(rows_of(v.x, 0, 0), rows_of(v.y, 0, 0), "empty");
  auto em = dbg::check_splits(*train, *empty, "test");
  REQUIRE(em.size() == 1);
  CHECK(em[0].title == "the test split is empty");
  // 150 examples against 30000 (0.5% < 1%): the ratio rule alone.
  dbg::DataCheckOptions o;
  auto big = dataset(gs::zeros({30000, 1}), gs::zeros({30000}, gs::kInt64), "big");
  auto mid = dataset(gs::zeros({150, 1}), gs::zeros({150}, gs::kInt64), "mid");
  auto rt = dbg::check_split_sizes(*big, *mid, "validation", o);
  REQUIRE(rt.size() == 1);
  CHECK(ev(rt[0], "validation / train ratio") == doctest::Approx(0.005));
  // A test set larger than train is not this check's business (a quick run on few training rows, scored
  // on a separate test set); one dataset split with the larger side held out is (practice twins).
  auto test_set = dataset(gs::zeros({1600, 1}), gs::zeros({1600}, gs::kInt64), "test");
  CHECK(dbg::check_split_sizes(*mid, *test_set, "test").empty());
  CHECK_FALSE(dbg::check_split_sizes(*val, *train, "test").empty());  // 400 trained on, 1600 held out
}

TEST_CASE("D12-D16 on Fashion-MNIST train and test: nothing fires") {
  REQUIRE_FASHION_MNIST();
  auto train = nn::load_fashion_mnist("train");
  auto test = nn::load_fashion_mnist("test");
  auto dup = dbg::check_duplicates(*train);
  auto fs = dbg::check_splits(*train, *test, "test");
  MESSAGE(all_str(dup) << all_str(fs));
  CHECK_FALSE(any_fires(dup));
  CHECK_FALSE(any_fires(fs));
}

namespace {

// A tabular data set: n rows of 8 columns, three of them correlated with the first (x1 = x0 + noise,
// x5 = 2 x0 - x3 + noise, x7 a copy of x2: the covariance is singular), the labels a linear score's sign.
std::pair<Tensor, Tensor> table(int64_t n, uint64_t seed) {
  gs::Generator g(seed);
  Tensor z = gs::randn({n, 8}, {}, &g);
  std::vector<float> v = z.to_vector<float>(), y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float* r = &v[static_cast<size_t>(i * 8)];
    r[1] = r[0] + 0.3f * r[1];
    r[5] = 2 * r[0] - r[3] + 0.5f * r[5];
    r[7] = r[2];
    y[static_cast<size_t>(i)] = r[0] + r[4] - r[6] > 0 ? 1.0f : 0.0f;
  }
  return {gs::tensor(v, {n, 8}), gs::tensor(y, {n, 1})};
}

}  // namespace

// D14 on tabular inputs: each column's mean and variance, the columns whitened by their pooled
// covariance. A random split is silent whatever the correlations (a copied column included); noise
// of 0.5 standard deviations written into the stored training rows (every training variance 1.25x)
// warns, and so does one validation column shifted by 0.4 of its standard deviation.
TEST_CASE("D14 on tabular inputs: noise written into the training rows and one shifted column warn, a random split does not") {
  auto [x, y] = table(1600, 41);
  auto [train, val] = nn::train_val_split(dataset(x, y, "table"), 0.25, 5);
  REQUIRE(train->size() == 1200);
  auto quiet = dbg::check_feature_drift(*train, *val);
  INFO(all_str(quiet));
  CHECK(quiet.empty());

  const nn::Batch t = train->all(), v = val->all();
  gs::Generator g(9);
  // The noise in units of each column's own standard deviation.
  Tensor sd = gs::sqrt(gs::var(t.x, {0}, true, true));
  auto noisy = dataset(t.x + gs::randn(t.x.shape(), {}, &g) * sd * 0.5, t.y, "noisy train");
  auto fs = dbg::check_feature_drift(*noisy, *val);
  REQUIRE(fs.size() == 1);
  INFO(fs[0].str());
  CHECK(fs[0].severity == dbg::Severity::Warning);
  CHECK(has(fs[0].title, "column by column"));
  CHECK(has(fs[0].title, "variance in train is"));
  CHECK(ev(fs[0], "its z") >= 5);

  // One column (4) of validation shifted by 0.4 standard deviations.
  std::vector<float> shifted = v.x.to_vector<float>();
  for (size_t i = 4; i < shifted.size(); i += 8) shifted[i] += 0.4f;
  auto moved = dataset(gs::tensor(shifted, v.x.shape()), v.y, "moved");
  fs = dbg::check_feature_drift(*train, *moved);
  REQUIRE(fs.size() == 1);
  INFO(fs[0].str());
  CHECK(has(fs[0].title, "column 4's mean in train is"));
  CHECK(ev(fs[0], "columns compared (whitened by the pooled covariance)") == 7);  // the copied column counts once
  CHECK(ev(fs[0], "largest mean shift in pooled standard deviations (column 4)") == doctest::Approx(-0.4).epsilon(0.35));

  // Below the z (the same shift on 40 validation rows, where 100 are needed): silent.
  auto few = dataset(rows_of(moved->all().x, 0, 40), rows_of(v.y, 0, 40), "few");
  CHECK(dbg::check_feature_drift(*train, *few).empty());
  // The column test switched off (z out of reach): the per-example rule alone, quiet here.
  dbg::DataCheckOptions off;
  off.min_column_drift_z = 1e9;
  CHECK(dbg::check_feature_drift(*noisy, *val, "validation", off).empty());
}

// A training dataset that adds noise afresh at each read (augmentation in get()): `scale` per column.
class Jittered : public nn::Dataset {
 public:
  Jittered(nn::DatasetPtr base, Tensor scale) : base_(std::move(base)), scale_(std::move(scale)) {}
  int64_t size() const override { return base_->size(); }
  std::string name() const override { return base_->name() + "+jitter"; }
  nn::Example get(int64_t i) const override {
    nn::Example e = base_->get(i);
    e.x = e.x + gs::randn(e.x.shape(), {}, &g_) * scale_;
    return e;
  }

 private:
  nn::DatasetPtr base_;
  Tensor scale_;
  mutable gs::Generator g_{11};
};

// Cutout (DeVries and Taylor, 2017) in get(): a random 12x12 square of each image set to 0; `inverted`:
// the mask kept where it should erase, so only the square is left.
class Cutout : public nn::Dataset {
 public:
  Cutout(nn::DatasetPtr base, bool inverted) : base_(std::move(base)), inverted_(inverted) {}
  int64_t size() const override { return base_->size(); }
  std::string name() const override { return base_->name() + "+cutout"; }
  nn::Example get(int64_t i) const override {
    nn::Example e = base_->get(i);
    const int64_t h = e.x.size(-2), w = e.x.size(-1);
    const int64_t r = static_cast<int64_t>(gs::rand({1}, {}, &g_).item<double>() * static_cast<double>(h - 12));
    const int64_t c = static_cast<int64_t>(gs::rand({1}, {}, &g_).item<double>() * static_cast<double>(w - 12));
    Tensor keep = gs::ones({h, w});
    keep.narrow(0, r, 12).narrow(1, c, 12).fill_(0.0);
    e.x = e.x * (inverted_ ? 1.0 - keep : keep);
    return e;
  }

 private:
  nn::DatasetPtr base_;
  bool inverted_;
  mutable gs::Generator g_{12};
};

TEST_CASE("D14 on images: an inverted Cutout in the training dataset's get() is named as the augmentation's drift") {
  auto [train, val] = nn::train_val_split(fmnist(3000), 0.25, 5);
  // The mask kept where it should erase: only a 12x12 square of each training image is left, drawn anew
  // at each read.
  const nn::DatasetPtr cut = std::make_shared<Cutout>(train, true);
  const auto a = dbg::read_split_sample(*cut), b = dbg::read_split_sample(*val);
  std::vector<dbg::Finding> fs = dbg::check_splits(*a, *b, "validation");
  dbg::revise_example_drift_by_augmentation(fs, *cut, *a, "validation");
  const dbg::Finding* d14 = dtest::find(fs, "D14");
  REQUIRE_MESSAGE(d14 != nullptr, dtest::all_str(fs));
  CHECK(d14->kind == dbg::Kind::AugmentationSwamps);
  CHECK(has(d14->title, "an augmentation makes the training inputs unlike the validation inputs"));
  CHECK(ev(*d14, "training rows whose per-example mean differs between two reads") > 200);
  // The training images stored at half their brightness (no transform at read time): the drift stays
  // the split's, not an augmentation's.
  const nn::Batch all = train->all();
  const nn::DatasetPtr dim = dataset(all.x * 0.5, all.y, "dimmed");
  const auto c = dbg::read_split_sample(*dim);
  std::vector<dbg::Finding> gs_ = dbg::check_splits(*c, *b, "validation");
  dbg::revise_example_drift_by_augmentation(gs_, *dim, *c, "validation");
  const dbg::Finding* stored = dtest::find(gs_, "D14");
  REQUIRE_MESSAGE(stored != nullptr, dtest::all_str(gs_));
  CHECK(stored->kind == dbg::Kind::None);
}

// D14's column drift judged again by reading the training rows twice: noise of half a column's spread
// drawn at each read is augmentation (info); the same noise written into the stored rows still warns;
// noise of 20x a column's spread swamps it (a warning that says so).
TEST_CASE("D14 on tabular inputs: noise drawn afresh at each read is augmentation; noise that swamps a column warns") {
  auto [x, y] = table(1600, 41);
  auto [train, val] = nn::train_val_split(dataset(x, y, "table"), 0.25, 5);
  const Tensor sd = gs::sqrt(gs::var(train->all().x, {0}, true, false));  // (8): one example's shape
  auto judged = [&](const nn::DatasetPtr& t) {
    const auto a = dbg::read_split_sample(*t), b = dbg::read_split_sample(*val);
    std::vector<dbg::Finding> fs = dbg::check_splits(*a, *b, "validation");
    dbg::revise_column_drift_by_augmentation(fs, *t, *a, *b, "validation");
    for (const dbg::Finding& f : fs)
      if (f.is("D14", dbg::Kind::ColumnDrift) || f.is("D14", dbg::Kind::AugmentationSwamps)) return f;
    return dbg::Finding();
  };
  // Augmentation: the drift less the noise's variance (half a column's spread) is none.
  const dbg::Finding aug = judged(std::make_shared<Jittered>(train, sd * 0.5));
  INFO(aug.str());
  CHECK(aug.check == "D14");
  CHECK(aug.severity == dbg::Severity::Info);
  CHECK(has(aug.title, "afresh at each read"));
  CHECK(ev(aug, "largest noise variance of a read") == doctest::Approx(0.25).epsilon(0.2));
  // The same noise stored once in the rows: no second read differs, and the warning stands.
  const nn::Batch t = train->all();
  gs::Generator g(9);
  const dbg::Finding stored = judged(dataset(t.x + gs::randn(t.x.shape(), {}, &g) * sd * 0.5, t.y, "noisy train"));
  CHECK(stored.severity == dbg::Severity::Warning);
  CHECK_FALSE(has(stored.title, "augmentation"));
  // Noise of 20x column 2's spread, drawn at each read: it swamps that column.
  std::vector<float> scale(static_cast<size_t>(sd.numel()), 0.0f);
  scale[2] = 20.0f * sd.to_vector<float>()[2];
  const dbg::Finding swamped = judged(std::make_shared<Jittered>(train, gs::tensor(scale, sd.shape())));
  INFO(swamped.str());
  CHECK(swamped.severity == dbg::Severity::Warning);
  CHECK(swamped.kind == dbg::Kind::AugmentationSwamps);
  CHECK(has(swamped.title, "swamps that column"));
  CHECK(has(swamped.title, "column 2's validation variance"));
}

// D14 on token ids (int64 inputs for an embedding): their values are indices, so their means and spreads
// measure nothing. Training sequences padded more than validation ones (the lengths differ) drift as
// numbers, and the same values as floats warn; as ids they are not judged.
TEST_CASE("D14 does not judge token ids: sequences padded differently warn as floats, not as int64 ids") {
  gs::Generator g(21);
  auto sequences = [&](int64_t n, int64_t shortest) {
    std::vector<int64_t> ids(static_cast<size_t>(n * 20), 0);
    const std::vector<int64_t> len = gs::randint(shortest, 21, {n}, gs::kInt64, &g).to_vector<int64_t>();
    const std::vector<int64_t> tok = gs::randint(2, 500, {n, 20}, gs::kInt64, &g).to_vector<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t t = 0; t < len[static_cast<size_t>(i)]; ++t) ids[static_cast<size_t>(i * 20 + t)] = tok[i * 20 + t];
    return gs::tensor(ids, {n, 20});
  };
  const Tensor train_ids = sequences(600, 4), val_ids = sequences(300, 14);
  const Tensor ytr = gs::zeros({600}, gs::kInt64), yva = gs::zeros({300}, gs::kInt64);
  const auto as_floats = dbg::check_feature_drift(*dataset(train_ids.to(gs::kFloat32), ytr, "train"),
                                                  *dataset(val_ids.to(gs::kFloat32), yva, "val"));
  REQUIRE(as_floats.size() == 1);
  CHECK(as_floats[0].fires());
  const auto as_ids = dbg::check_feature_drift(*dataset(train_ids, ytr, "train"), *dataset(val_ids, yva, "val"));
  INFO(all_str(as_ids));
  CHECK(as_ids.empty());
}

// D15 on a long-tailed training split scored on a balanced one: a training split thinned unevenly, or a
// long-tail benchmark's design; the counts cannot tell, so it warns and says both. An evaluation split
// skewed another way warns without the balanced split's words.
TEST_CASE("D15: a balanced evaluation of a long-tailed training split warns and names both readings") {
  const Images a = images(3000, 5, 23);
  const std::vector<int64_t> y = a.y.to_vector<int64_t>();
  // Train: class c kept for its first 400 / 2^c rows of the first 2400 (400, 200, 100, 50, 25).
  std::vector<int64_t> kept, seen(5, 0);
  for (int64_t i = 0; i < 2400; ++i)
    if (seen[static_cast<size_t>(y[i])]++ < (400 >> y[i])) kept.push_back(i);
  // Evaluation: 40 of each class from the last 600 rows; the skewed one: class 4 four times as often.
  std::vector<int64_t> balanced, skewed, per(5, 0), per2(5, 0);
  for (int64_t i = 2400; i < 3000; ++i) {
    const size_t c = static_cast<size_t>(y[i]);
    if (per[c]++ < 40) balanced.push_back(i);
    if (per2[c]++ < (c == 4 ? 120 : 30)) skewed.push_back(i);
  }
  const auto subset = [&](const std::vector<int64_t>& rows, const std::string& name) {
    const Tensor k = gs::tensor(rows, {static_cast<int64_t>(rows.size())});
    return dataset(a.x.index_select(0, k), a.y.index_select(0, k), name);
  };
  const auto train = subset(kept, "train");
  const auto fb = dbg::check_label_drift(*train, *subset(balanced, "balanced"), "validation");
  REQUIRE(fb.size() == 1);
  INFO(fb[0].str());
  CHECK(fb[0].severity == dbg::Severity::Warning);
  CHECK(has(fb[0].title, "balanced evaluation"));
  CHECK(has(fb[0].cause, "long-tail benchmark"));
  CHECK(ev(fb[0], "largest / smallest class count in validation") <= 1.05);
  const auto fs = dbg::check_label_drift(*train, *subset(skewed, "skewed"), "validation");
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].severity == dbg::Severity::Warning);
  CHECK_FALSE(has(fs[0].title, "balanced evaluation"));

  // With the loss's class weights N / (C x count) D3 finds the imbalance compensated: the balanced
  // evaluation is a long tail trained on purpose (info). Uniform weights leave D3's warning, and D15's.
  for (const bool weighted : {true, false}) {
    CAPTURE(weighted);
    std::vector<dbg::Finding> d3 = dbg::check_label_distribution(train->all().y, 5);
    std::vector<double> w;
    for (int c = 0; c < 5; ++c) w.push_back(weighted ? 775.0 / (5.0 * (400 >> c)) : 1.0);
    dbg::weigh_class_counts(d3, gs::tensor(w, {5}));
    dbg::Report data;
    data.add(d3);
    data.add(fb);
    dbg::revise_balanced_evaluation(data);
    const dbg::Finding* d15 = dtest::find(data.findings(), "D15", dbg::Severity::Info);
    REQUIRE(d15 != nullptr);
    CHECK(d15->severity == (weighted ? dbg::Severity::Info : dbg::Severity::Warning));
  }
  // A sampler that draws the classes evenly: the labels the loader yields (D3's count) sit far closer
  // than the split's 16x, so the balanced evaluation is info too.
  std::vector<int64_t> drawn;
  for (int i = 0; i < 500; ++i) drawn.push_back(i % 5);
  dbg::Report resampled;
  resampled.add(dbg::check_label_distribution(gs::tensor(drawn, {500}), 5));
  resampled.add(fb);
  dbg::revise_balanced_evaluation(resampled);
  const dbg::Finding* d15 = dtest::find(resampled.findings(), "D15", dbg::Severity::Info);
  REQUIRE(d15 != nullptr);
  CHECK(d15->severity == dbg::Severity::Info);
  CHECK(has(d15->title, "rebalanced on purpose"));
}

TEST_CASE("D14: one-hot columns coded in another order in validation (an encoder fitted apart) say so") {
  // Two numeric columns and a 4-category column one-hot coded (shares 0.45, 0.3, 0.15, 0.1). `order`: the
  // column each category gets in the validation split; `shares`: the validation split's category shares.
  auto table = [](int64_t n, uint64_t seed, const std::vector<int64_t>& order, const std::vector<double>& shares) {
    gs::Generator g(seed);
    const Tensor u = gs::rand({n}, {}, &g), num = gs::randn({n, 2}, {}, &g);
    std::vector<float> hot(static_cast<size_t>(n * 4), 0.0f);
    std::vector<int64_t> label(static_cast<size_t>(n));
    const std::vector<double> us = u.to(gs::kFloat64).to_vector<double>();
    for (int64_t i = 0; i < n; ++i) {
      int64_t k = 0;
      for (double acc = shares[0]; k < 3 && us[static_cast<size_t>(i)] > acc; acc += shares[static_cast<size_t>(++k)]) {
      }
      hot[static_cast<size_t>(i * 4 + order[static_cast<size_t>(k)])] = 1.0f;
      label[static_cast<size_t>(i)] = k >= 2 ? 1 : 0;
    }
    const Tensor x = gs::cat({num, gs::tensor(hot, {n, 4})}, 1);
    return dataset(x, gs::tensor(label, {n}), "table");
  };
  const std::vector<double> shares = {0.45, 0.3, 0.15, 0.1};
  const auto train = table(1200, 1, {0, 1, 2, 3}, shares);
  auto recoded = [](const std::vector<dbg::Finding>& fs) {
    for (const dbg::Finding& f : fs)
      if (f.fires() && f.is("D14", dbg::Kind::ColumnDrift) && f.title.find("in another order") != std::string::npos)
        return true;
    return false;
  };
  // Coded in the order each split meets its categories: the same shares in other columns.
  const std::vector<dbg::Finding> apart = dbg::check_splits(*train, *table(600, 2, {2, 0, 3, 1}, shares), "validation");
  INFO(all_str(apart));
  CHECK(recoded(apart));
  // One encoder for both: silent. The categories' shares changed in validation: a drift, not a recoding.
  CHECK(dbg::check_splits(*train, *table(600, 2, {0, 1, 2, 3}, shares), "validation").empty());
  const std::vector<dbg::Finding> moved =
      dbg::check_splits(*train, *table(600, 2, {0, 1, 2, 3}, {0.2, 0.3, 0.25, 0.25}), "validation");
  INFO(all_str(moved));
  CHECK(any_fires(moved));
  CHECK_FALSE(recoded(moved));
}

TEST_CASE("D14: inputs that drift only as the classes' shares do (a balanced validation split) are info") {
  // Two classes whose first three columns sit 1.5 apart; train holds class 1 in 10% of its rows,
  // validation in 50% (a long tail trained on purpose, scored on a balanced split). `scale`: validation's
  // inputs spread that much wider (a drift of the inputs themselves).
  auto table = [](int64_t n, uint64_t seed, double share1, double scale) {
    gs::Generator g(seed);
    const std::vector<double> u = gs::rand({n}, {}, &g).to(gs::kFloat64).to_vector<double>();
    std::vector<double> x = gs::randn({n, 6}, {}, &g).to(gs::kFloat64).to_vector<double>();
    std::vector<int64_t> y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      y[static_cast<size_t>(i)] = u[static_cast<size_t>(i)] < share1 ? 1 : 0;
      for (int64_t j = 0; j < 6; ++j) {
        double& v = x[static_cast<size_t>(i * 6 + j)];
        v = v * scale + (j < 3 && y[static_cast<size_t>(i)] == 1 ? 1.5 : 0.0);
      }
    }
    std::vector<float> xf(x.begin(), x.end());
    return dataset(gs::tensor(xf, {n, 6}), gs::tensor(y, {n}), "table");
  };
  auto drift = [](const std::vector<dbg::Finding>& fs) {
    for (const dbg::Finding& f : fs)
      if (f.is("D14", dbg::Kind::ColumnDrift)) return &f;
    return static_cast<const dbg::Finding*>(nullptr);
  };
  const auto train = table(2000, 1, 0.1, 1.0);
  const std::vector<dbg::Finding> balanced = dbg::check_splits(*train, *table(800, 2, 0.5, 1.0), "validation");
  INFO(all_str(balanced));
  const dbg::Finding* f = drift(balanced);
  REQUIRE(f != nullptr);
  CHECK(f->severity == dbg::Severity::Info);
  CHECK(has(f->title, "weighted to the validation split's class shares match it"));
  // The same class shares with validation's inputs spread 1.5x wider: a drift the shares do not explain.
  const std::vector<dbg::Finding> wider = dbg::check_splits(*train, *table(800, 2, 0.5, 1.5), "validation");
  INFO(all_str(wider));
  f = drift(wider);
  REQUIRE(f != nullptr);
  CHECK(f->severity == dbg::Severity::Warning);
}

TEST_CASE("D3, D9: a start token that next-step targets never are is info; a tagger's missing class 0 still warns") {
  // Next-token data over ids 0..4: 0 starts every sequence (x[:, 0]) and appears nowhere else, so no target is 0.
  gs::Generator gen(9);
  const Tensor body = gs::randint(1, 5, {256, 17}, gs::kInt64, &gen);
  const Tensor seq = gs::cat({gs::zeros({256, 1}, gs::kInt64), body}, 1);
  const Tensor x = seq.narrow(1, 0, 17).contiguous(), y = seq.narrow(1, 1, 17).contiguous();
  auto lm = std::make_shared<nn::TensorDataset>(x, y, "next-token");
  CHECK(dbg::data_detail::start_tokens(*lm) == std::set<int64_t>{0});
  auto revised = [](const std::shared_ptr<nn::TensorDataset>& d) {
    std::vector<dbg::Finding> fs = dbg::check_loader(nn::DataLoader(d, nn::DataLoaderOptions().batch_size(64)), 5);
    dbg::revise_start_token_classes(fs, *d);
    dbg::revise_start_token_labels(fs, *d);
    return fs;
  };
  auto find_in = [](const std::vector<dbg::Finding>& fs, const char* check, const std::string& part) {
    for (const dbg::Finding& f : fs)
      if (f.check == check && f.title.find(part) != std::string::npos) return &f - fs.data();
    return static_cast<std::ptrdiff_t>(-1);
  };
  const std::vector<dbg::Finding> a = revised(lm);
  const auto d3 = find_in(a, "D3", "have no example"), d9 = find_in(a, "D9", "1-indexed");
  REQUIRE(d3 >= 0);
  REQUIRE(d9 >= 0);
  CHECK(a[static_cast<size_t>(d3)].severity == dbg::Severity::Info);
  CHECK(a[static_cast<size_t>(d9)].severity == dbg::Severity::Info);
  CHECK(a[static_cast<size_t>(d3)].title.find("start token") != std::string::npos);
  // The same labels under inputs that do not lead them (a tagger over random ids): both warn.
  auto tagger = std::make_shared<nn::TensorDataset>(gs::randint(0, 5, {256, 17}, gs::kInt64, &gen), y, "tagger");
  CHECK(dbg::data_detail::start_tokens(*tagger).empty());
  const std::vector<dbg::Finding> b = revised(tagger);
  REQUIRE(find_in(b, "D3", "have no example") >= 0);
  CHECK(b[static_cast<size_t>(find_in(b, "D3", "have no example"))].severity == dbg::Severity::Warning);
  CHECK(b[static_cast<size_t>(find_in(b, "D9", "1-indexed"))].severity == dbg::Severity::Warning);
}

TEST_CASE(
    "D3's per-class recall: a rare class under compensating weights is info; a common one, or one without them, "
    "warns") {
  // Training counts of a long tail (2,000 down to 20) whose loss weights compensate them, as weigh_class_counts says.
  dbg::Finding counts;
  counts.check = "D3";
  counts.kind = dbg::Kind::ClassCounts;
  counts.severity = dbg::Severity::Info;
  const std::vector<double> n = {2000, 1500, 1000, 700, 500, 300, 20, 150, 100, 60};
  for (size_t c = 0; c < n.size(); ++c) counts.evidence.push_back({"class " + std::to_string(c), n[c], ""});
  counts.evidence.push_back({"imbalance ratio of count x the loss's class weight", 1.3, ""});
  dbg::Report data;
  data.add(counts);
  // Validation recall: class `missed` at 6.5%, the others near 0.88.
  auto recall_missing = [](int missed) {
    std::vector<int64_t> examples(10, 200), correct(10, 176);
    correct[static_cast<size_t>(missed)] = 13;
    return dbg::check_class_errors(examples, correct);
  };
  std::vector<dbg::Finding> rare = recall_missing(6);
  REQUIRE(rare.size() == 1);
  REQUIRE(rare[0].fires());
  dbg::revise_rare_class_recall(rare, data);
  CHECK(rare[0].severity == dbg::Severity::Info);
  CHECK(rare[0].title.find("rarest class in training (20 examples") != std::string::npos);
  // A class as common as the median missed, or the same rare class without compensating weights: warnings.
  std::vector<dbg::Finding> common = recall_missing(4);
  dbg::revise_rare_class_recall(common, data);
  CHECK(common[0].fires());
  dbg::Report unweighted;
  counts.evidence.pop_back();
  counts.severity = dbg::Severity::Warning;
  unweighted.add(counts);
  std::vector<dbg::Finding> plain = recall_missing(6);
  dbg::revise_rare_class_recall(plain, unweighted);
  CHECK(plain[0].fires());
}
