// Weight initialisers (torch.nn.init): fill a parameter in place, without
// recording a graph, with values whose spread keeps activations well scaled.
//
//   auto fc = std::make_shared<nn::Linear>(784, 256);
//   nn::init::kaiming_normal_(fc->weight, 0.0, nn::init::FanMode::FanIn, nn::init::Nonlinearity::ReLU);
//   nn::init::zeros_(fc->bias);
//
// Fans: a Linear weight (out, in) has fan_in = in, fan_out = out; a Conv2d weight
// (O, C/groups, kH, kW) has fan_in = C/groups*kH*kW, fan_out = O*kH*kW.
// Every layer's default initialisation is listed in docs/nn.md.
#pragma once
#include <cstdint>
#include <utility>

#include "core/tensor.h"

namespace gradsleuth::nn::init {

enum class Nonlinearity { Linear, Conv2d, Sigmoid, Tanh, ReLU, LeakyReLU };
enum class FanMode { FanIn, FanOut };
const char* nonlinearity_name(Nonlinearity n);  // "relu", ...

// The gain that keeps the variance of activations constant through the
// nonlinearity: linear/conv/sigmoid 1, tanh 5/3, relu sqrt(2),
// leaky_relu sqrt(2 / (1 + a^2)) with a = negative slope (default 0.01).
double calculate_gain(Nonlinearity n, double param = 0.01);

// (fan_in, fan_out) of a weight with at least 2 dims: (out, in, k...) ->
// (in * prod(k), out * prod(k)). Throws for 0-D/1-D tensors (biases have no fan).
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& w);

// ---- in place; each returns its argument --------------------------------------
Tensor uniform_(Tensor t, double lo = 0.0, double hi = 1.0);
Tensor normal_(Tensor t, double mean = 0.0, double std = 1.0);
Tensor constant_(Tensor t, double value);
Tensor zeros_(Tensor t);
Tensor ones_(Tensor t);

// Xavier/Glorot (2010): std = gain * sqrt(2 / (fan_in + fan_out)).
//   uniform: U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out));   normal: N(0, std^2)
Tensor xavier_uniform_(Tensor t, double gain = 1.0);
Tensor xavier_normal_(Tensor t, double gain = 1.0);

// Kaiming/He (2015): std = gain / sqrt(fan), gain = calculate_gain(nonlinearity, a),
// fan = fan_in (preserves forward variance) or fan_out (backward variance).
//   uniform: U(-b, b) with b = sqrt(3) * std;   normal: N(0, std^2)
// The defaults match PyTorch's (a = 0, fan_in, leaky_relu, which is relu's gain for a = 0).
Tensor kaiming_uniform_(Tensor t, double a = 0.0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nonlinearity = Nonlinearity::LeakyReLU);
Tensor kaiming_normal_(Tensor t, double a = 0.0, FanMode mode = FanMode::FanIn,
                       Nonlinearity nonlinearity = Nonlinearity::LeakyReLU);

// The default of PyTorch's Linear and Conv layers: weight kaiming_uniform_(a = sqrt(5)),
// i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
void default_linear_init_(Tensor weight, Tensor bias);

}  // namespace gradsleuth::nn::init
