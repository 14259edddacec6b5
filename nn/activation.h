// Activation layers: elementwise nonlinearities and the softmax family.
// None has parameters; each is a thin module around a core op so that hooks
// (and the debug module's dead-unit / saturation statistics) can see it.
#pragma once
#include <cstdint>
#include <string>

#include "nn/module.h"

namespace gradsleuth::nn {

// max(x, 0). Gradient 1 where x > 0, else 0 (a unit that is never positive is "dead").
class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;
};

// x where x > 0, negative_slope * x elsewhere: keeps a small gradient for x <= 0.
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : Module("LeakyReLU"), negative_slope_(negative_slope) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;  // "negative_slope=0.01"
  double negative_slope() const { return negative_slope_; }

 private:
  double negative_slope_;
};

// 1 / (1 + exp(-x)); saturates (gradient ~ 0) for |x| beyond ~5.
class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& x) override;
};

// tanh(x); saturates for |x| beyond ~3.
class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& x) override;
};

// x * Phi(x) (exact, "none"), or the tanh approximation ("tanh"):
//   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;  // "approximate='none'"

 private:
  std::string approximate_;
};

// softmax along `dim`: every slice along dim sums to 1. The dim has no default,
// because the wrong one silently mixes examples: use dim=1 (or -1) for logits (B, C).
class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : Module("Softmax"), dim_(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;  // "dim=1"
  int64_t dim() const { return dim_; }

 private:
  int64_t dim_;
};

// log(softmax(x)) computed stably as x - logsumexp(x). Pair it with NLLLoss,
// or use CrossEntropyLoss on the raw logits instead.
class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : Module("LogSoftmax"), dim_(dim) {}
  Tensor forward(const Tensor& x) override;
  // B14 wrong dim, B20 log(softmax(x)), B21 exp without the max (overflows in half precision).
  std::vector<Bug> injectable_bugs() const override { return {Bug::B14, Bug::B20, Bug::B21}; }
  std::string extra_repr() const override;
  int64_t dim() const { return dim_; }

 private:
  int64_t dim_;
};

}  // namespace gradsleuth::nn
