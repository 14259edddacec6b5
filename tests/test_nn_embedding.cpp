// Tests for nn/embedding.h: row lookup, N(0, 1) init, the gradient summing over
// repeated ids, and the id checks.
#include <doctest/doctest.h>

#include <cmath>

#include "nn/embedding.h"
#include "nn_test_util.h"

namespace nn = gs::nn;
using gs::Tensor;
using nntest::vals;
using nntest::Vec;

TEST_CASE("Embedding: lookup and shape (..., D)") {
  nn::Embedding emb(10, 4);
  CHECK(emb.weight.shape() == gs::Shape{10, 4});
  CHECK(emb.extra_repr() == "10, 4");
  Tensor ids = gs::tensor(std::vector<int64_t>{3, 0, 9, 3, 1, 2}, {2, 3});
  Tensor y = emb(ids);
  REQUIRE(y.shape() == gs::Shape{2, 3, 4});
  Vec W = vals(emb.weight), want;
  for (int64_t id : {3, 0, 9, 3, 1, 2})
    for (int d = 0; d < 4; ++d) want.push_back(W[id * 4 + d]);
  nntest::check_close(y, want, 0, 0);
}

TEST_CASE("Embedding: default init is N(0, 1)") {
  nn::Embedding emb(1000, 100);
  CHECK(emb.weight.mean().item<double>() == doctest::Approx(0.0).epsilon(0.02).scale(1));
  CHECK(emb.weight.std().item<double>() == doctest::Approx(1.0).epsilon(0.02));
}

TEST_CASE("Embedding: gradient adds up over repeated ids; others get zero") {
  nn::Embedding emb(5, 3);
  emb.to(gs::kFloat64);
  Tensor ids = gs::tensor(std::vector<int64_t>{1, 4, 1}, {3});
  Tensor g = gs::randn({3, 3}, gs::kFloat64);
  (emb(ids) * g).sum().backward();
  Vec G = vals(g), want(15, 0.0);
  for (int d = 0; d < 3; ++d) {
    want[1 * 3 + d] = G[0 * 3 + d] + G[2 * 3 + d];
    want[4 * 3 + d] = G[1 * 3 + d];
  }
  nntest::check_close(emb.weight.grad(), want, 1e-12);
  GS_CHECK_GRADS([&] { return emb(ids); }, (std::vector<std::pair<std::string, Tensor>>{{"weight", emb.weight}}));
}

TEST_CASE("Embedding: id errors") {
  nn::Embedding emb(10, 4);
  nntest::check_error([&] { emb(gs::tensor({1.0, 2.0})); }, {"Embedding(10, 4)", "int64", "to(gs::kInt64)"});
  nntest::check_error(
      [&] {
        emb(gs::tensor(std::vector<int64_t>{2, 12}, {2}));
      },
      {"Embedding(10, 4)", "[2, 12]", "0..9", "num_embeddings"});
  nntest::check_error([&] { emb(gs::tensor(std::vector<int64_t>{-1}, {1})); }, {"Embedding", "[-1, -1]"});
}
