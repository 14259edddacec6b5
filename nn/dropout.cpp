// Dropout: the core op with the module's training flag.
#include "nn/dropout.h"

#include "core/warning.h"

#include "nn/layer_checks.h"

namespace gradsleuth::nn {

Dropout::Dropout(double p) : Module("Dropout"), p_(p) {
  GS_CHECK(p >= 0.0 && p <= 1.0, "Dropout", "p is the probability of zeroing an element and must be in [0, 1], got ", p,
           (p > 1.0 && p <= 100.0 ? " (a percentage? use p=0.5 for 50%)" : ""));
}

std::string Dropout::extra_repr() const { return detail::str_cat("p=", p_); }

Tensor Dropout::forward(const Tensor& x) {
  detail::check_input(x, "Dropout(" + extra_repr() + ")");
  if (is_training() && p_ > 0.0 && !GradMode::is_enabled()) [[unlikely]]
    warn({"M2", "Dropout(" + extra_repr() + ")",
          "ran in training mode under no_grad (an evaluation?): it zeroes a random fraction p of the activations, "
          "so the evaluation is noisy and pessimistic. Call model.eval() before evaluating (and model.train() "
          "after)."});
  return dropout(x, p_, is_training());
}

}  // namespace gradsleuth::nn
