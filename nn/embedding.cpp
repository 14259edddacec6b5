// Embedding: index checks with teaching errors, then core's embedding op
// (index_select, whose backward is index_add).
#include "nn/embedding.h"

#include "nn/init.h"
#include "nn/layer_checks.h"

namespace gradsleuth::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim)
    : Module("Embedding"), num_(num_embeddings), dim_(embedding_dim) {
  GS_CHECK(num_embeddings > 0 && embedding_dim > 0, "Embedding",
           "sizes must be positive, got num_embeddings=", num_embeddings, ", embedding_dim=", embedding_dim);
  weight = register_parameter("weight", empty({num_, dim_}));  // (V, D)
  reset_parameters();
}

void Embedding::reset_parameters() { init::normal_(weight, 0.0, 1.0); }

std::string Embedding::extra_repr() const { return detail::str_cat(num_, ", ", dim_); }

Tensor Embedding::forward(const Tensor& ids) {
  const std::string who = "Embedding(" + extra_repr() + ")";
  detail::check_input(ids, who, false);
  GS_CHECK(ids.dtype() == kInt64, who, "expects int64 token ids, got ", ids.str(),
           (ids.is_floating_point() ? ". If these are ids stored as floats, convert with ids.to(gs::kInt64); if they "
                                      "are already vectors, you do not need an Embedding."
                                    : ". Convert with ids.to(gs::kInt64)."));
  if (ids.numel() > 0) {
    NoGradGuard ng;
    const int64_t lo = amin(ids).item<int64_t>(), hi = amax(ids).item<int64_t>();
    GS_CHECK(lo >= 0 && hi < num_, who, "token ids span [", lo, ", ", hi, "] but the table has ", num_,
             " rows (valid ids are 0..", num_ - 1, "). Raise num_embeddings to at least ", std::max(hi + 1, num_),
             " or fix the tokenizer/vocabulary mapping.");
  }
  return embedding(weight, ids);  // (...) -> (..., D)
}

}  // namespace gradsleuth::nn
