// Linear, Flatten: forward passes built from core ops (autograd gives the backward).
#include "nn/linear.h"

#include "nn/init.h"
#include "nn/layer_checks.h"

namespace gradsleuth::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias)
    : Module("Linear"), in_features_(in_features), out_features_(out_features) {
  GS_CHECK(in_features >= 0 && out_features >= 0, "Linear", "sizes must be non-negative, got in_features=", in_features,
           ", out_features=", out_features);
  checked_nbytes({out_features, in_features}, sizeof(float), "Linear");  // a weight this large is an error, not a wrap
  weight = register_parameter("weight", empty({out_features, in_features}));  // (M, D)
  if (with_bias) bias = register_parameter("bias", empty({out_features}));    // (M)
  reset_parameters();
}

void Linear::reset_parameters() {
  init::default_linear_init_(weight, bias);
  NoGradGuard ng;
  // BUG B16: weights drawn from N(0, 1), forgetting the 1/sqrt(fan_in) scale:
  // for 784 inputs that is ~50x the default, pre-activations and gradients explode.
  // Correct: the default above (or init::kaiming_normal_ for ReLU nets).
  if (has_bug(Bug::B16)) weight.normal_(0.0, 1.0);
  // BUG B18: a large negative bias: pre-activations start far below zero, the
  // ReLU after this layer outputs 0 for every input and passes no gradient, so
  // the units never recover. Correct: a bias near zero (the default above).
  if (has_bug(Bug::B18) && bias.defined()) bias.fill_(-4.0);
}

void Linear::on_bug_injected(Bug b) {
  if (b == Bug::B16 || b == Bug::B18) reset_parameters();
}

namespace {
// BUG B22: linear with a hand-written backward whose weight gradient is
// (x^T g).reshape(M, D): the (D, M) matrix x^T g has the right number of
// elements, so a reshape "fixes" the shape error where a transpose was needed.
// Correct: grad_w = g^T x (M, D), as autograd derives from x @ w^T.
//   x (B, D), w (M, D), b (M) -> y (B, M)
Tensor linear_wrong_backward(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor y;
  {
    NoGradGuard ng;
    y = linear(x, w, b);
  }
  if (needs_grad({&x, &w, &b})) {
    record("linear_B22", y, {&x, &w, &b},
           [sx = SavedTensor(x, "linear_B22"), sw = SavedTensor(w, "linear_B22"), has_b = b.defined()](const Tensor& g,
                                                                                                       Node& n) {
             Tensor xv = sx.unpack(n), wv = sw.unpack(n);
             Tensor gx = matmul(g, wv);                                        // (B, D): correct
             Tensor gw = matmul(xv.t(), g).reshape({wv.size(0), wv.size(1)});  // BUG: (D, M) reshaped
             Tensor gb = has_b ? sum(g, {0}) : Tensor();                       // (M): correct
             return tensor_list{gx, gw, gb};
           });
  }
  return y;
}
}  // namespace

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
  if (!bugs().empty()) [[unlikely]] {
    Tensor in = x;
    // BUG B12: the input is detached ("to save memory"): no gradient flows to the
    // layers before this one, which silently stop learning. Correct: use x as is.
    if (has_bug(Bug::B12)) in = x.detach();
    // BUG B13: y = (w @ x^T) gives (M, B); .reshape(B, M) has the right shape but
    // interleaves the examples of the batch. Correct: .t() (a transpose).
    if (has_bug(Bug::B13) && in.dim() == 2) {
      Tensor y = matmul(weight, in.t()).reshape({in.size(0), out_features_});
      return bias.defined() ? y + bias : y;
    }
    if (has_bug(Bug::B22) && in.dim() == 2) return linear_wrong_backward(in, weight, bias);
    return linear(in, weight, bias);
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
  GS_CHECK(n > 0 && s >= 0 && e < n && s <= e, who, "cannot flatten dims ", start_dim_, "..", end_dim_, " of ", x.str(),
           " (", n, " dims). A Flatten(1) expects a batch dim first: (B, ...).");
  return x.flatten(s, e);
}

}  // namespace gradsleuth::nn
