// Dropout: the core op with the module's training flag.
#include "nn/dropout.h"

#include "nn/layer_checks.h"

namespace gradsleuth::nn {

Dropout::Dropout(double p) : Module("Dropout"), p_(p) {
  GS_CHECK(p >= 0.0 && p <= 1.0, "Dropout", "p is the probability of zeroing an element and must be in [0, 1], got ",
           p, (p > 1.0 && p <= 100.0 ? " (a percentage? use p=0.5 for 50%)" : ""));
}

std::string Dropout::extra_repr() const { return detail::str_cat("p=", p_); }

Tensor Dropout::forward(const Tensor& x) {
  detail::check_input(x, "Dropout(" + extra_repr() + ")");
  return dropout(x, p_, is_training());
}

}  // namespace gradsleuth::nn
