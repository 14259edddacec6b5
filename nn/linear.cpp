// Linear, Flatten: forward passes built from core ops (autograd gives the backward).
#include "nn/linear.h"

#include "nn/init.h"
#include "nn/layer_checks.h"

namespace gradsleuth::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias)
    : Module("Linear"), in_features_(in_features), out_features_(out_features) {
  GS_CHECK(in_features >= 0 && out_features >= 0, "Linear", "sizes must be non-negative, got in_features=",
           in_features, ", out_features=", out_features);
  weight = register_parameter("weight", empty({out_features, in_features}));  // (M, D)
  if (with_bias) bias = register_parameter("bias", empty({out_features}));    // (M)
  reset_parameters();
}

void Linear::reset_parameters() { init::default_linear_init_(weight, bias); }

std::string Linear::extra_repr() const {
  return detail::str_cat("in_features=", in_features_, ", out_features=", out_features_,
                         ", bias=", bias.defined() ? "true" : "false");
}

Tensor Linear::forward(const Tensor& x) {
  const std::string who = detail::layer_name(type_name(), extra_repr());
  detail::check_input(x, who);
  GS_CHECK(x.dim() >= 1, who, "expects an input (B, ", in_features_, "), got the 0-dim tensor ", x.str());
  if (x.size(-1) != in_features_) {
    int64_t trailing = 1;  // values per example if the input were flattened from dim 1
    for (int64_t d = 1; d < x.dim(); ++d) trailing *= x.size(d);
    if (x.dim() >= 3 && trailing == in_features_)
      GS_FAIL(who, "expects an input (B, ", in_features_, ") but got ", shape_str(x.shape()), ": its last dim is ",
              x.size(-1), ", not ", in_features_, ". Each example holds ", trailing,
              " values in several dims: add nn::Flatten before this layer (or call x.flatten(1)).");
    GS_FAIL(who, "expects an input (B, ", in_features_, ") but got ", shape_str(x.shape()), ": its last dim is ",
            x.size(-1), ". Set in_features=", x.size(-1), ", or check the output size of the layer before it.");
  }
  return linear(x, weight, bias);  // (..., D) @ (M, D)^T + (M) -> (..., M)
}

Flatten::Flatten(int64_t start_dim, int64_t end_dim) : Module("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}

std::string Flatten::extra_repr() const { return detail::str_cat("start_dim=", start_dim_, ", end_dim=", end_dim_); }

Tensor Flatten::forward(const Tensor& x) {
  const std::string who = detail::layer_name(type_name(), extra_repr());
  detail::check_input(x, who, false);
  const int64_t n = x.dim();
  const int64_t s = start_dim_ < 0 ? start_dim_ + n : start_dim_;
  const int64_t e = end_dim_ < 0 ? end_dim_ + n : end_dim_;
  GS_CHECK(n > 0 && s >= 0 && e < n && s <= e, who, "cannot flatten dims ", start_dim_, "..", end_dim_,
           " of ", x.str(), " (", n, " dims). A Flatten(1) expects a batch dim first: (B, ...).");
  return x.flatten(s, e);
}

}  // namespace gradsleuth::nn
