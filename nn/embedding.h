// Embedding: a lookup table of learned vectors, one row per token id.
//
// Dimension letters: V = num_embeddings (vocabulary), D = embedding_dim.
#pragma once
#include <cstdint>
#include <string>

#include "nn/module.h"

namespace gradsleuth::nn {

// ids int64 (...) -> (..., D): row ids[i] of weight for every id.
// Parameter: weight (V, D). Default init (PyTorch's): N(0, 1).
// The gradient of a row is the sum of the gradients of every position holding its id.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& ids) override;
  std::string extra_repr() const override;  // "10000, 64"
  void reset_parameters();
  int64_t num_embeddings() const { return num_; }
  int64_t embedding_dim() const { return dim_; }

  Tensor weight;  // (V, D)

 private:
  int64_t num_, dim_;
};

}  // namespace gradsleuth::nn
