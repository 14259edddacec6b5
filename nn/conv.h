// 2-D convolution and pooling layers, NCHW.
//
// Dimension letters: N = batch, C = in_channels, O = out_channels, H/W = height/width,
// kH/kW = kernel size. Output size per spatial dim:
//   out = (in + 2*padding - dilation*(k - 1) - 1) / stride + 1      (integer division)
#pragma once
#include <cstdint>
#include <string>

#include "nn/module.h"

namespace gradsleuth::nn {

// Options, PyTorch C++ style:  Conv2dOptions(1, 32, 3).stride(2).padding(1).
// Sizes take one value for both dims (3) or {height, width} ({3, 5}).
struct Conv2dOptions {
  Conv2dOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_{kernel_size, kernel_size} {}
  Conv2dOptions(int64_t in_channels, int64_t out_channels, Dims kernel_size);
  Conv2dOptions& stride(int64_t s) {
    stride_ = {s, s};
    return *this;
  }
  Conv2dOptions& stride(Dims s);
  Conv2dOptions& padding(int64_t p) {
    padding_ = {p, p};
    return *this;
  }
  Conv2dOptions& padding(Dims p);
  Conv2dOptions& dilation(int64_t d) {
    dilation_ = {d, d};
    return *this;
  }
  Conv2dOptions& dilation(Dims d);
  Conv2dOptions& groups(int64_t g) {
    groups_ = g;
    return *this;
  }
  Conv2dOptions& bias(bool b) {
    bias_ = b;
    return *this;
  }

  int64_t in_channels_, out_channels_;
  Dims kernel_size_;  // {kH, kW}
  Dims stride_{1, 1};
  Dims padding_{0, 0};  // zeros on every side
  Dims dilation_{1, 1};
  int64_t groups_ = 1;  // in and out channels split into this many independent groups
  bool bias_ = true;
};

// x (N, C, H, W) -> (N, O, outH, outW).
// Parameters: weight (O, C/groups, kH, kW), bias (O).
// Default init (PyTorch's): weight kaiming_uniform_(a=sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
// bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = C/groups * kH * kW.
class Conv2d : public Module {
 public:
  explicit Conv2d(const Conv2dOptions& options);
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : Conv2d(Conv2dOptions(in_channels, out_channels, kernel_size)) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;  // "1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1)"
  void reset_parameters();
  const Conv2dOptions& options() const { return options_; }

  Tensor weight;  // (O, C/groups, kH, kW)
  Tensor bias;    // (O), undefined when bias(false)

 private:
  Conv2dOptions options_;
};

// Max over each kH x kW window:  (N, C, H, W) -> (N, C, outH, outW). The stride
// defaults to the kernel size (non-overlapping windows). Padding counts as -inf.
struct MaxPool2dOptions {
  MaxPool2dOptions(int64_t kernel_size) : kernel_size_{kernel_size, kernel_size} {}  // NOLINT: implicit on purpose
  MaxPool2dOptions(Dims kernel_size) : kernel_size_(kernel_size) {}                  // NOLINT
  MaxPool2dOptions& stride(int64_t s) {
    stride_ = {s, s};
    return *this;
  }
  MaxPool2dOptions& stride(Dims s) {
    stride_ = s;
    return *this;
  }
  MaxPool2dOptions& padding(int64_t p) {
    padding_ = {p, p};
    return *this;
  }
  MaxPool2dOptions& padding(Dims p) {
    padding_ = p;
    return *this;
  }
  MaxPool2dOptions& dilation(int64_t d) {
    dilation_ = {d, d};
    return *this;
  }
  MaxPool2dOptions& dilation(Dims d) {
    dilation_ = d;
    return *this;
  }
  Dims kernel_size_, stride_{}, padding_{0, 0}, dilation_{1, 1};  // empty stride = kernel_size
};

class MaxPool2d : public Module {
 public:
  MaxPool2d(MaxPool2dOptions options);  // std::make_shared<nn::MaxPool2d>(2)
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;  // "kernel_size=(2, 2), stride=(2, 2), padding=(0, 0)"
  const MaxPool2dOptions& options() const { return options_; }

 private:
  MaxPool2dOptions options_;
};

// Mean over each window:  (N, C, H, W) -> (N, C, outH, outW). Padding counts as
// zeros in the mean (PyTorch's count_include_pad=true).
struct AvgPool2dOptions {
  AvgPool2dOptions(int64_t kernel_size) : kernel_size_{kernel_size, kernel_size} {}  // NOLINT
  AvgPool2dOptions(Dims kernel_size) : kernel_size_(kernel_size) {}                  // NOLINT
  AvgPool2dOptions& stride(int64_t s) {
    stride_ = {s, s};
    return *this;
  }
  AvgPool2dOptions& stride(Dims s) {
    stride_ = s;
    return *this;
  }
  AvgPool2dOptions& padding(int64_t p) {
    padding_ = {p, p};
    return *this;
  }
  AvgPool2dOptions& padding(Dims p) {
    padding_ = p;
    return *this;
  }
  Dims kernel_size_, stride_{}, padding_{0, 0};
};

class AvgPool2d : public Module {
 public:
  AvgPool2d(AvgPool2dOptions options);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const AvgPool2dOptions& options() const { return options_; }

 private:
  AvgPool2dOptions options_;
};

}  // namespace gradsleuth::nn
