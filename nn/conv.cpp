// Conv2d, MaxPool2d, AvgPool2d: shape checks with teaching errors, then the core
// ops (conv2d is im2col + matmul, so its backward comes from autograd).
#include "nn/conv.h"

#include "nn/init.h"
#include "nn/layer_checks.h"

namespace gradsleuth::nn {

namespace {

Dims pair_dims(Dims d, const char* what) {
  GS_CHECK(d.size() == 1 || d.size() == 2, "Conv2dOptions", what, " takes 1 or 2 values ({h, w}), got ", shape_str(d));
  return d.size() == 1 ? Dims{d[0], d[0]} : d;
}

std::string pair_str(const Dims& d) {
  return d.size() == 2 ? detail::str_cat("(", d[0], ", ", d[1], ")") : shape_str(d);
}

// Checks that x is (N, C, H, W) with C == channels; `who` names the layer.
void check_nchw(const Tensor& x, int64_t channels, const std::string& who) {
  detail::check_input(x, who);
  if (x.dim() == 3)
    GS_FAIL(who, "expects a 4-D input (N, C, H, W) but got ", shape_str(x.shape()),
            (channels < 0 || x.size(0) == channels ? ", which looks like a single image (C, H, W): add the batch dim "
                                                     "with x.unsqueeze(0)."
                                                   : ". Add the missing dim (e.g. x.unsqueeze(1) for one channel)."));
  if (x.dim() == 2)
    GS_FAIL(who, "expects a 4-D input (N, C, H, W) but got ", shape_str(x.shape()),
            ", a batch of flat vectors: reshape it first, e.g. x.view({N, 1, 28, 28}) for 28x28 grey images.");
  GS_CHECK(x.dim() == 4, who, "expects a 4-D input (N, C, H, W) but got ", shape_str(x.shape()));
  if (channels >= 0 && x.size(1) != channels) {
    if (x.size(3) == channels)
      GS_FAIL(who, "expects ", channels, " input channels in dim 1 of (N, C, H, W), but got ", shape_str(x.shape()),
              ": this looks like channels-last (N, H, W, C). Use x.permute({0, 3, 1, 2}) first.");
    GS_FAIL(who, "expects ", channels, " input channels in dim 1 of (N, C, H, W), but got ", shape_str(x.shape()),
            " with ", x.size(1), " channels. Set in_channels=", x.size(1),
            ", or check the out_channels of the layer before it.");
  }
}

// Output size per spatial dim; fails with the layer's name when a dim vanishes.
void check_output_size(const Tensor& x, const Dims& k, const Dims& s, const Dims& p, const Dims& d,
                       const std::string& who) {
  for (int i = 0; i < 2; ++i) {
    const int64_t in = x.size(2 + i);
    const int64_t out = (in + 2 * p[i] - d[i] * (k[i] - 1) - 1) / s[i] + 1;
    GS_CHECK(in + 2 * p[i] - d[i] * (k[i] - 1) - 1 >= 0 && out > 0, who, "the input ", shape_str(x.shape()),
             " is too small: its ", i == 0 ? "height" : "width", " ", in, " with padding ", p[i],
             " is smaller than the (dilated) kernel ", d[i] * (k[i] - 1) + 1,
             ". Add padding, use a smaller kernel, or remove a downsampling layer before this one.");
  }
}

}  // namespace

Conv2dOptions::Conv2dOptions(int64_t in_channels, int64_t out_channels, Dims kernel_size)
    : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(pair_dims(kernel_size, "kernel_size")) {}
Conv2dOptions& Conv2dOptions::stride(Dims s) {
  stride_ = pair_dims(s, "stride");
  return *this;
}
Conv2dOptions& Conv2dOptions::padding(Dims p) {
  padding_ = pair_dims(p, "padding");
  return *this;
}
Conv2dOptions& Conv2dOptions::dilation(Dims d) {
  dilation_ = pair_dims(d, "dilation");
  return *this;
}

// ---- Conv2d ----------------------------------------------------------------------
Conv2d::Conv2d(const Conv2dOptions& o) : Module("Conv2d"), options_(o) {
  const auto& k = o.kernel_size_;
  GS_CHECK(o.in_channels_ > 0 && o.out_channels_ > 0, "Conv2d",
           "channels must be positive, got in_channels=", o.in_channels_, ", out_channels=", o.out_channels_);
  GS_CHECK(o.groups_ > 0 && o.in_channels_ % o.groups_ == 0 && o.out_channels_ % o.groups_ == 0, "Conv2d",
           "groups=", o.groups_, " must divide both in_channels=", o.in_channels_,
           " and out_channels=", o.out_channels_);
  GS_CHECK(k[0] > 0 && k[1] > 0 && o.stride_[0] > 0 && o.stride_[1] > 0 && o.dilation_[0] > 0 && o.dilation_[1] > 0 &&
               o.padding_[0] >= 0 && o.padding_[1] >= 0,
           "Conv2d",
           "kernel_size, stride and dilation must be positive and padding non-negative, got kernel_size=", pair_str(k),
           ", stride=", pair_str(o.stride_), ", padding=", pair_str(o.padding_), ", dilation=", pair_str(o.dilation_));
  weight = register_parameter("weight", empty({o.out_channels_, o.in_channels_ / o.groups_, k[0], k[1]}));
  if (o.bias_) bias = register_parameter("bias", empty({o.out_channels_}));
  reset_parameters();
}

void Conv2d::reset_parameters() { init::default_linear_init_(weight, bias); }

std::string Conv2d::extra_repr() const {
  const auto& o = options_;
  std::string s = detail::str_cat(o.in_channels_, ", ", o.out_channels_, ", kernel_size=", pair_str(o.kernel_size_),
                                  ", stride=", pair_str(o.stride_));
  if (o.padding_ != Dims{0, 0}) s += ", padding=" + pair_str(o.padding_);
  if (o.dilation_ != Dims{1, 1}) s += ", dilation=" + pair_str(o.dilation_);
  if (o.groups_ != 1) s += detail::str_cat(", groups=", o.groups_);
  if (!o.bias_) s += ", bias=false";
  return s;
}

Tensor Conv2d::forward(const Tensor& x) {
  const auto& o = options_;
  const std::string who = detail::layer_name(type_name(), extra_repr());
  check_nchw(x, o.in_channels_, who);
  check_output_size(x, o.kernel_size_, o.stride_, o.padding_, o.dilation_, who);
  // (N, C, H, W) * (O, C/groups, kH, kW) -> (N, O, outH, outW)
  return conv2d(x, weight, bias, o.stride_, o.padding_, o.dilation_, o.groups_);
}

// ---- pooling ------------------------------------------------------------------------
static void check_pool_options(const Dims& k, const Dims& s, const Dims& p, const char* who) {
  GS_CHECK(k.size() == 2 && (s.empty() || s.size() == 2) && p.size() == 2, who,
           "kernel_size, stride and padding take 1 or 2 values");
  GS_CHECK(k[0] > 0 && k[1] > 0 && (s.empty() || (s[0] > 0 && s[1] > 0)) && p[0] >= 0 && p[1] >= 0, who,
           "kernel_size and stride must be positive and padding non-negative, got kernel_size=", pair_str(k),
           ", stride=", pair_str(s), ", padding=", pair_str(p));
  GS_CHECK(2 * p[0] <= k[0] && 2 * p[1] <= k[1], who, "padding ", pair_str(p), " must be at most half the kernel size ",
           pair_str(k));
}

static Dims as_pair(const Dims& d) { return d.size() == 1 ? Dims{d[0], d[0]} : d; }

MaxPool2d::MaxPool2d(MaxPool2dOptions o) : Module("MaxPool2d"), options_(std::move(o)) {
  options_.kernel_size_ = as_pair(options_.kernel_size_);
  options_.stride_ = options_.stride_.empty() ? options_.kernel_size_ : as_pair(options_.stride_);
  options_.padding_ = as_pair(options_.padding_);
  options_.dilation_ = as_pair(options_.dilation_);
  check_pool_options(options_.kernel_size_, options_.stride_, options_.padding_, "MaxPool2d");
  GS_CHECK(options_.dilation_.size() == 2 && options_.dilation_[0] > 0 && options_.dilation_[1] > 0, "MaxPool2d",
           "dilation must be positive, got ", pair_str(options_.dilation_));
}

std::string MaxPool2d::extra_repr() const {
  std::string s = "kernel_size=" + pair_str(options_.kernel_size_) + ", stride=" + pair_str(options_.stride_) +
                  ", padding=" + pair_str(options_.padding_);
  if (options_.dilation_ != Dims{1, 1}) s += ", dilation=" + pair_str(options_.dilation_);
  return s;
}

Tensor MaxPool2d::forward(const Tensor& x) {
  const auto& o = options_;
  const std::string who = detail::layer_name(type_name(), extra_repr());
  check_nchw(x, -1, who);
  check_output_size(x, o.kernel_size_, o.stride_, o.padding_, o.dilation_, who);
  return max_pool2d(x, o.kernel_size_, o.stride_, o.padding_, o.dilation_);  // (N, C, outH, outW)
}

AvgPool2d::AvgPool2d(AvgPool2dOptions o) : Module("AvgPool2d"), options_(std::move(o)) {
  options_.kernel_size_ = as_pair(options_.kernel_size_);
  options_.stride_ = options_.stride_.empty() ? options_.kernel_size_ : as_pair(options_.stride_);
  options_.padding_ = as_pair(options_.padding_);
  check_pool_options(options_.kernel_size_, options_.stride_, options_.padding_, "AvgPool2d");
}

std::string AvgPool2d::extra_repr() const {
  return "kernel_size=" + pair_str(options_.kernel_size_) + ", stride=" + pair_str(options_.stride_) +
         ", padding=" + pair_str(options_.padding_);
}

Tensor AvgPool2d::forward(const Tensor& x) {
  const auto& o = options_;
  const std::string who = detail::layer_name(type_name(), extra_repr());
  check_nchw(x, -1, who);
  check_output_size(x, o.kernel_size_, o.stride_, o.padding_, Dims{1, 1}, who);
  return avg_pool2d(x, o.kernel_size_, o.stride_, o.padding_);  // (N, C, outH, outW)
}

}  // namespace gradsleuth::nn
