// Synthetic datasets (see synthetic.h). Values are built in double from a
// seeded Philox stream, then stored as float32.
#include "nn/synthetic.h"

#include <cmath>
#include <numbers>

#include "core/generator.h"
#include "core/ops.h"

namespace gradsleuth::nn {

std::shared_ptr<TensorDataset> make_spirals(int64_t n_per_class, int64_t num_classes, double noise, uint64_t seed,
                                            double turns) {
  GS_CHECK(n_per_class > 0 && num_classes > 0, "make_spirals", "needs n_per_class > 0 and num_classes > 0, got ",
           n_per_class, " and ", num_classes);
  Generator gen(seed);
  const int64_t n = n_per_class * num_classes;
  std::vector<double> eps = randn({n}, kFloat64, &gen).to_vector<double>();
  std::vector<float> x(static_cast<size_t>(2 * n));
  std::vector<int64_t> y(static_cast<size_t>(n));
  const double two_pi = 2.0 * std::numbers::pi;
  for (int64_t k = 0; k < num_classes; ++k)
    for (int64_t i = 0; i < n_per_class; ++i) {
      const int64_t row = k * n_per_class + i;
      const double r = n_per_class > 1 ? static_cast<double>(i) / static_cast<double>(n_per_class - 1) : 1.0;
      const double t =
          two_pi * static_cast<double>(k) / static_cast<double>(num_classes) + turns * two_pi * r + noise * eps[row];
      x[2 * row] = static_cast<float>(r * std::sin(t));
      x[2 * row + 1] = static_cast<float>(r * std::cos(t));
      y[row] = k;
    }
  return std::make_shared<TensorDataset>(tensor(x, {n, 2}), tensor(y, {n}), "spirals");
}

std::shared_ptr<TensorDataset> make_blobs(int64_t n_per_class, int64_t num_classes, int64_t dim, double spread,
                                          uint64_t seed, double center_box) {
  GS_CHECK(n_per_class > 0 && num_classes > 0 && dim > 0, "make_blobs",
           "needs positive n_per_class, num_classes and dim, got ", n_per_class, ", ", num_classes, ", ", dim);
  Generator gen(seed);
  const int64_t n = n_per_class * num_classes;
  std::vector<double> centres = rand({num_classes, dim}, kFloat64, &gen).to_vector<double>();
  std::vector<double> eps = randn({n, dim}, kFloat64, &gen).to_vector<double>();
  std::vector<float> x(static_cast<size_t>(n * dim));
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t k = 0; k < num_classes; ++k)
    for (int64_t i = 0; i < n_per_class; ++i) {
      const int64_t row = k * n_per_class + i;
      for (int64_t d = 0; d < dim; ++d) {
        const double c = center_box * (2.0 * centres[k * dim + d] - 1.0);
        x[row * dim + d] = static_cast<float>(c + spread * eps[row * dim + d]);
      }
      y[row] = k;
    }
  return std::make_shared<TensorDataset>(tensor(x, {n, dim}), tensor(y, {n}), "blobs");
}

RegressionSet make_linear_regression(int64_t n, int64_t in_features, double noise, uint64_t seed) {
  GS_CHECK(n > 0 && in_features > 0, "make_linear_regression", "needs n > 0 and in_features > 0, got ", n, " and ",
           in_features);
  Generator gen(seed);
  Tensor w = randn({in_features, 1}, kFloat32, &gen);                   // (D, 1)
  Tensor b = randn({1}, kFloat32, &gen);                                // (1)
  Tensor x = randn({n, in_features}, kFloat32, &gen);                   // (N, D)
  Tensor y = matmul(x, w) + b + randn({n, 1}, kFloat32, &gen) * noise;  // (N, 1)
  return RegressionSet{std::make_shared<TensorDataset>(x, y, "linear-regression"), w, b};
}

}  // namespace gradsleuth::nn
