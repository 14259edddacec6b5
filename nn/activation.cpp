// Activation layers: each forward is one core op (autograd gives the backward).
#include "nn/activation.h"

#include <cmath>

#include "nn/layer_checks.h"

namespace gradsleuth::nn {

Tensor ReLU::forward(const Tensor& x) {
  detail::check_input(x, "ReLU");
  return relu(x);
}

Tensor LeakyReLU::forward(const Tensor& x) {
  detail::check_input(x, "LeakyReLU");
  return leaky_relu(x, negative_slope_);
}
std::string LeakyReLU::extra_repr() const { return detail::str_cat("negative_slope=", negative_slope_); }

Tensor Sigmoid::forward(const Tensor& x) {
  detail::check_input(x, "Sigmoid");
  return sigmoid(x);
}

Tensor Tanh::forward(const Tensor& x) {
  detail::check_input(x, "Tanh");
  return tanh(x);
}

GELU::GELU(std::string approximate) : Module("GELU"), approximate_(std::move(approximate)) {
  GS_CHECK(approximate_ == "none" || approximate_ == "tanh", "GELU", "approximate must be 'none' or 'tanh', got '",
           approximate_, "'");
}
std::string GELU::extra_repr() const { return "approximate='" + approximate_ + "'"; }
Tensor GELU::forward(const Tensor& x) {
  detail::check_input(x, "GELU");
  if (approximate_ == "none") return gelu(x);
  const double c = std::sqrt(2.0 / M_PI);
  return x * 0.5 * (tanh((x + x * x * x * 0.044715) * c) + 1.0);
}

static void check_dim(const Tensor& x, int64_t dim, const std::string& who) {
  GS_CHECK(x.dim() == 0 || (dim >= -x.dim() && dim < x.dim()), who, "dim ", dim, " is out of range for the input ",
           shape_str(x.shape()), " (", x.dim(), " dims; valid are ", -x.dim(), "..", x.dim() - 1,
           "). For logits (B, C) use dim=1.");
}

Tensor Softmax::forward(const Tensor& x) {
  const std::string who = "Softmax(" + extra_repr() + ")";
  detail::check_input(x, who);
  check_dim(x, dim_, who);
  return softmax(x, dim_);
}
std::string Softmax::extra_repr() const { return detail::str_cat("dim=", dim_); }

Tensor LogSoftmax::forward(const Tensor& x) {
  const std::string who = "LogSoftmax(" + extra_repr() + ")";
  detail::check_input(x, who);
  check_dim(x, dim_, who);
  if (!bugs().empty()) [[unlikely]] {
    // BUG B14: normalises over dim 0, the batch, instead of the classes: each
    // "probability" is shared between examples (the batch is mixed).
    // Correct: dim_ (1 for logits (B, C)).
    const int64_t d = has_bug(Bug::B14) ? 0 : dim_;
    // BUG B20: log(softmax(x)): softmax underflows to 0 for a logit far below the
    // largest (a gap over ~100 in float32) and log(0) = -inf. Correct: the
    // log-sum-exp form, log_softmax(x) = x - logsumexp(x).
    if (has_bug(Bug::B20)) return log(softmax(x, d));
    // BUG B21: the textbook formula exp(x) / sum(exp(x)) without subtracting the
    // maximum: fine in float32 below x ~ 88, but exp overflows to inf in half
    // precision above x ~ 11, and inf / inf = NaN. Correct: log_softmax (stable).
    if (has_bug(Bug::B21)) {
      Tensor e = exp(x);
      return log(e / sum(e, {d}, true));
    }
    return log_softmax(x, d);
  }
  return log_softmax(x, dim_);
}
std::string LogSoftmax::extra_repr() const { return detail::str_cat("dim=", dim_); }

}  // namespace gradsleuth::nn
