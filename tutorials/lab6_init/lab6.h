// Lab 6: dead ReLUs, saturation, vanishing and exploding gradients, and the
// initialisation that prevents them (README.md in this folder). Declared once
// for your code (lab6.cpp) and the reference solution (solution/lab6.cpp); the
// grader (../grader/grade_lab6.cpp) calls them here and compares with the debug
// module's trackers (debug/checks/model/activation_stats.h M7/M8, debug/checks/optim/optim_checks.h O1).
//
// Dimension letters: B = batch, D = features, C = channels, H/W = height/width,
// U = units (D of a (B, D) activation, C of a (B, C, H, W) one), M = out features.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/generator.h"
#include "nn/container.h"
#include "nn/module.h"

namespace gradsleuth::lab6 {

// Task 6.1: the dead units of a ReLU layer over some batches of its outputs.
// A unit is a feature of a (B, D) activation or a channel of a (B, C, H, W) one
// (every dim after C counts as more examples of that channel). It is dead when
// it is <= 0 for every example and position of every batch given.
//   activations: one or more tensors (B_i, U, ...) with the same U -> (U) bool, true = dead.
// Throws gs::Error for an empty list, a tensor with fewer than 2 dims, or
// batches that disagree on U.
Tensor dead_units(const std::vector<Tensor>& activations);
// The fraction of dead units, in [0, 1].
double dead_fraction(const std::vector<Tensor>& activations);

// Task 6.2: the fans of a weight with at least 2 dims, (M, D, k...) ->
// (fan_in, fan_out) = (D * prod(k), M * prod(k)). gs::Error for 0-D/1-D tensors.
std::pair<int64_t, int64_t> fan_in_and_out(const Tensor& w);
// In place, without recording a graph, from `gen` only (reproducible):
//   He (Kaiming) normal for a layer followed by ReLU:  N(0, 2 / fan_in)
//   Xavier (Glorot) normal otherwise:                  N(0, 2 / (fan_in + fan_out))
void he_normal_(Tensor w, Generator& gen);
void xavier_normal_(Tensor w, Generator& gen);

// Task 6.3: the L2 norm of the gradient of every weight (a parameter with
// dim >= 2 that requires grad), named by its path ("0.weight"), in registration
// order; a weight without a gradient counts as 0. Call after loss.backward().
std::vector<std::pair<std::string, double>> weight_grad_norms(const nn::Module& model);
// ||grad of the first weight|| / ||grad of the last weight||: far below 1 when
// gradients vanish towards the input, far above when they explode. gs::Error
// when the model has fewer than two weights.
double first_last_ratio(const nn::Module& model);

// Task 6.4: a deep MLP of `depth` hidden layers of `width` units:
//   Linear(in, width), act, Linear(width, width), act, ..., Linear(width, out)
// with 2 * depth + 1 layers. Sigmoid: act = nn::Sigmoid and every Linear drawn
// with xavier_normal_. ReLUHe: act = nn::ReLU and every hidden Linear drawn with
// he_normal_, the output layer with xavier_normal_. Every bias zero.
enum class Stack { Sigmoid, ReLUHe };
std::shared_ptr<nn::Sequential> deep_stack(int64_t in, int64_t width, int64_t depth, int64_t out, Stack kind,
                                           Generator& gen);

// Given (Task 6.5): an MLP for Fashion-MNIST that does not train:
//   Flatten, Linear(784, 128), Sigmoid, Linear(128, 128), ReLU, Linear(128, 10)
// with the first layer's weights drawn from N(0, 1) (the pattern of bug B16) and
// the second layer's biases at -4 (the pattern of bug B18).
std::shared_ptr<nn::Sequential> make_broken_mlp(uint64_t seed);

// Task 6.5: re-initialise every nn::Linear of a Sequential in place: he_normal_
// when the next layer is an nn::ReLU, xavier_normal_ otherwise; biases zero.
// The architecture and the parameter tensors stay the same.
void fix_initialisation(nn::Sequential& model, Generator& gen);

}  // namespace gradsleuth::lab6
