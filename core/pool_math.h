// core/pool_math.h: the pooling window, written once for the CPU loops (core/cpu/conv.cpp) and
// the CUDA kernels (cuda/conv.cu).
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/host_device.h"
#include "core/op_kinds.h"

namespace gradsleuth {

// Calls f(offset) for each input element (offset h * W + w in its (H, W) plane) of the window of
// output (oh, ow), the padding excluded.
template <class F>
GS_HOST_DEVICE inline void for_each_in_window(const Conv2dGeometry& g, int64_t oh, int64_t ow, F&& f) {
  for (int64_t ki = 0; ki < g.kH; ++ki) {
    const int64_t h = oh * g.sH - g.pH + ki;
    if (h < 0 || h >= g.H) continue;
    for (int64_t kj = 0; kj < g.kW; ++kj) {
      const int64_t w = ow * g.sW - g.pW + kj;
      if (w >= 0 && w < g.W) f(h * g.W + w);
    }
  }
}

// The plane P of the two functions below is a pointer to its elements, or anything indexed like one
// (cuda/conv.cu's widening reader of 16-bit planes); the result has the type plane[k] gives.
template <class P>
using plane_value_t = std::decay_t<decltype(std::declval<P>()[0])>;

// avg_pool2d's output (oh, ow) of one (H, W) plane: the window's sum in float64 over kH * kW
// (padding counts as zeros, as PyTorch's count_include_pad=True).
template <class P, class T = plane_value_t<P>>
GS_HOST_DEVICE inline T avg_pool_at(P plane, const Conv2dGeometry& g, int64_t oh, int64_t ow) {
  double s = 0;
  for_each_in_window(g, oh, ow, [&](int64_t k) { s += static_cast<double>(plane[k]); });
  return static_cast<T>(s * (1.0 / static_cast<double>(g.kH * g.kW)));
}

// max_pool2d's output (oh, ow) of one (H, W) plane, with dilation: the first maximum wins ties and
// the first NaN wins outright (as in PyTorch). *index gets the offset h * W + w of the element
// taken, -1 for a window entirely in the padding (which ops/ rejects): then -inf (0 for integers).
template <class P, class T = plane_value_t<P>>
GS_HOST_DEVICE inline T max_pool_at(P plane, const Conv2dGeometry& g, int64_t oh, int64_t ow, int64_t* index) {
  T best = T(0);
  int64_t bi = -1;
  for (int64_t ki = 0; ki < g.kH; ++ki) {
    const int64_t h = oh * g.sH - g.pH + ki * g.dH;
    if (h < 0 || h >= g.H) continue;
    for (int64_t kj = 0; kj < g.kW; ++kj) {
      const int64_t w = ow * g.sW - g.pW + kj * g.dW;
      if (w < 0 || w >= g.W) continue;
      const T v = plane[h * g.W + w];
      const bool nan = v != v;  // false for integers
      if (bi < 0 || v > best || nan) {
        best = v;
        bi = h * g.W + w;
        if (nan) {
          *index = bi;
          return best;
        }
      }
    }
  }
  if constexpr (std::is_floating_point_v<T>)
    if (bi < 0) best = -static_cast<T>(INFINITY);
  *index = bi;
  return best;
}

}  // namespace gradsleuth
