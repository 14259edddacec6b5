// Weight initialisers: gains, fans, and the in-place fills (under NoGradGuard).
#include "nn/init.h"

#include <cmath>

#include "core/autograd.h"

namespace gradsleuth::nn::init {

namespace {
void check_floating(const Tensor& t, const char* op) {
  GS_CHECK(t.defined(), op, "the tensor is undefined (a layer built with bias=false has no bias to initialise)");
  GS_CHECK(t.is_floating_point(), op, "can only fill floating-point tensors, got ", t.str());
}
double fan_of(const Tensor& t, FanMode mode, const char* op) {
  GS_CHECK(mode == FanMode::FanIn || mode == FanMode::FanOut, op, "mode value ", static_cast<int>(mode),
           " is not a FanMode; pass FanMode::FanIn or FanMode::FanOut");
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  const int64_t fan = mode == FanMode::FanIn ? fan_in : fan_out;
  GS_CHECK(fan > 0, op, "cannot initialise ", t.str(), ": its ", mode == FanMode::FanIn ? "fan_in" : "fan_out",
           " is 0 (an empty dim)");
  return static_cast<double>(fan);
}
}  // namespace

const char* nonlinearity_name(Nonlinearity n) {
  switch (n) {
    case Nonlinearity::Linear: return "linear";
    case Nonlinearity::Conv2d: return "conv2d";
    case Nonlinearity::Sigmoid: return "sigmoid";
    case Nonlinearity::Tanh: return "tanh";
    case Nonlinearity::ReLU: return "relu";
    case Nonlinearity::LeakyReLU: return "leaky_relu";
  }
  return "?";
}

double calculate_gain(Nonlinearity n, double param) {
  switch (n) {
    case Nonlinearity::Linear:
    case Nonlinearity::Conv2d:
    case Nonlinearity::Sigmoid: return 1.0;
    case Nonlinearity::Tanh: return 5.0 / 3.0;
    case Nonlinearity::ReLU: return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU: return std::sqrt(2.0 / (1.0 + param * param));
  }
  GS_FAIL("init::calculate_gain", "nonlinearity value ", static_cast<int>(n),
          " is not a Nonlinearity; pass one of Linear, Conv2d, Sigmoid, Tanh, ReLU, LeakyReLU");
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& w) {
  GS_CHECK(w.defined() && w.dim() >= 2, "init::calculate_fan_in_and_fan_out",
           "fan in and fan out need a weight with at least 2 dims (out, in, ...), got ",
           w.defined() ? w.str() : "undefined", ". Biases have no fan: initialise them with uniform_/zeros_ instead.");
  int64_t receptive = 1;  // kH * kW for a conv weight
  for (int64_t d = 2; d < w.dim(); ++d) receptive *= w.size(d);
  return {w.size(1) * receptive, w.size(0) * receptive};
}

Tensor uniform_(Tensor t, double lo, double hi) {
  check_floating(t, "init::uniform_");
  GS_CHECK(lo <= hi, "init::uniform_", "lower bound ", lo, " is above the upper bound ", hi);
  NoGradGuard ng;
  t.uniform_(lo, hi);
  return t;
}

Tensor normal_(Tensor t, double mean, double std) {
  check_floating(t, "init::normal_");
  GS_CHECK(std >= 0, "init::normal_", "std must be >= 0, got ", std);
  NoGradGuard ng;
  t.normal_(mean, std);
  return t;
}

Tensor constant_(Tensor t, double value) {
  check_floating(t, "init::constant_");
  NoGradGuard ng;
  t.fill_(value);
  return t;
}
Tensor zeros_(Tensor t) { return constant_(t, 0.0); }
Tensor ones_(Tensor t) { return constant_(t, 1.0); }

Tensor xavier_uniform_(Tensor t, double gain) {
  check_floating(t, "init::xavier_uniform_");
  auto [fi, fo] = calculate_fan_in_and_fan_out(t);
  GS_CHECK(fi + fo > 0, "init::xavier_uniform_", "cannot initialise the empty tensor ", t.str());
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fi + fo));
  const double bound = std::sqrt(3.0) * std;  // U(-b, b) has std b / sqrt(3)
  return uniform_(t, -bound, bound);
}

Tensor xavier_normal_(Tensor t, double gain) {
  check_floating(t, "init::xavier_normal_");
  auto [fi, fo] = calculate_fan_in_and_fan_out(t);
  GS_CHECK(fi + fo > 0, "init::xavier_normal_", "cannot initialise the empty tensor ", t.str());
  return normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fi + fo)));
}

Tensor kaiming_uniform_(Tensor t, double a, FanMode mode, Nonlinearity nonlinearity) {
  check_floating(t, "init::kaiming_uniform_");
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(fan_of(t, mode, "init::kaiming_uniform_"));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(t, -bound, bound);
}

Tensor kaiming_normal_(Tensor t, double a, FanMode mode, Nonlinearity nonlinearity) {
  check_floating(t, "init::kaiming_normal_");
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(fan_of(t, mode, "init::kaiming_normal_"));
  return normal_(t, 0.0, std);
}

void default_linear_init_(Tensor weight, Tensor bias) {
  // gain(leaky_relu, sqrt(5)) = sqrt(1/3), so the bound sqrt(3) * gain / sqrt(fan_in) = 1 / sqrt(fan_in).
  kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double fan_in = static_cast<double>(calculate_fan_in_and_fan_out(weight).first);
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(fan_in) : 0.0;
    uniform_(bias, -bound, bound);
  }
}

}  // namespace gradsleuth::nn::init
