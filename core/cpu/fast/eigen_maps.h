// Eigen array maps over raw memory, for the tuned kernels that use Eigen's vectorised
// packet math (fast/elementwise.cpp, reduce.cpp, softmax.cpp).
#pragma once
#include <Eigen/Core>

namespace gradsleuth::cpu {

template <class T>
using EArr = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using ECArr = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

}  // namespace gradsleuth::cpu
