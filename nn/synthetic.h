// Small synthetic datasets for tests and lessons: each is a pure function of
// its arguments and seed, so a test can rely on the exact values.
//
//   auto spirals = nn::make_spirals(200, 3);        // x (600, 2), y (600) int64 in 0..2
//   auto blobs   = nn::make_blobs(100, 4, 8);       // x (400, 8), y (400)
//   auto reg     = nn::make_linear_regression(500, 5);  // y = x @ w + b + noise
#pragma once
#include <cstdint>
#include <memory>

#include "nn/data.h"

namespace gradsleuth::nn {

// K interleaved spiral arms in 2-D (cs231n's classic): class k's points go out
// from the origin along angle t * turns * 2pi + 2pi k / K, with gaussian angle noise.
// x (K * n_per_class, 2) float32 in about [-1, 1], y int64.
std::shared_ptr<TensorDataset> make_spirals(int64_t n_per_class, int64_t num_classes = 3, double noise = 0.2,
                                            uint64_t seed = 0, double turns = 0.75);

// K gaussian blobs in `dim` dims: centres uniform in [-center_box, center_box],
// points centre + spread * N(0, I). x (K * n_per_class, dim), y int64.
std::shared_ptr<TensorDataset> make_blobs(int64_t n_per_class, int64_t num_classes = 3, int64_t dim = 2,
                                          double spread = 1.0, uint64_t seed = 0, double center_box = 5.0);

// y = x @ true_weight + true_bias + noise * N(0, 1), with x ~ N(0, I).
// x (N, in_features), y (N, 1) float32; the true parameters come with it.
struct RegressionSet {
  std::shared_ptr<TensorDataset> data;
  Tensor true_weight;  // (in_features, 1)
  Tensor true_bias;    // (1)
};
RegressionSet make_linear_regression(int64_t n, int64_t in_features = 3, double noise = 0.1, uint64_t seed = 0);

}  // namespace gradsleuth::nn
