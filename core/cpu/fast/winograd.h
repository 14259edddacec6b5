// Winograd F(2x2, 3x3) convolution for the CPU backend: a 3x3, stride-1, padding-1
// convolution (the shape of a small CNN's inner layers: forward, input gradient, and by
// F(3x3, 2x2) the weight gradient)
// with 16 (O x C) @ (C x tiles) GEMMs through the BLAS instead of one
// (O x 9C) @ (9C x H*W) GEMM on an im2col copy: 2.25x fewer multiply-adds, and no
// 9x-inflated copy of the input. Formulation: Lavin & Gray, "Fast Algorithms for
// Convolutional Neural Networks" (2015); winograd.cpp has the matrices, the blocking
// and the error analysis.
#pragma once
#include <cstdint>

#include "core/op_kinds.h"

namespace gradsleuth::cpu::fast {

// True when winograd_conv3x3 handles the geometry: 3x3 kernel, stride 1, dilation 1,
// padding 1 on both axes (output size = input size), groups 1. (A grouped conv reaches
// the backend as per-group calls, so Conv2dGeometry itself carries no group count.)
bool winograd_eligible(const Conv2dGeometry& g);

// out (N, O, H, W), contiguous, = bias[o] + sum_c (x[n, c] cross-correlated with w[o, c]), padding 1.
// x (N, C, H, W) and w (O, C, 3, 3) contiguous; bias may be nullptr (then no bias).
// Any H, W >= 1 (odd sizes: the last tile is partial). float only. Single-threaded
// apart from the BLAS's own threads. Non-finite results are recomputed directly
// (see winograd.cpp), so an Inf/NaN lands where the im2col + GEMM path puts it.
void winograd_conv3x3(const float* x, const float* w, const float* bias, float* out, int64_t N, int64_t C, int64_t H,
                      int64_t W, int64_t O);

// wt (C, O, 3, 3), wt[c][o][i][j] = w[o][c][2-i][2-j], from w (O, C, 3, 3): the input
// gradient of a 3x3/pad-1 conv is then winograd_conv3x3(dY, wt, nullptr, dX, N, O, H, W, C).
void flip_transpose_3x3(const float* w, float* wt, int64_t O, int64_t C);

// gw (O, C, 3, 3) = sum over n, h, w of dy[n, o, h, w] * x[n, c, h + i - 1, w + j - 1] (zero outside),
// the weight gradient of a 3x3 / stride-1 / padding-1 conv; x (N, C, H, W), dy (N, O, H, W) contiguous.
// Overwrites gw (zeros when N, H or W is 0; nothing when O or C is). float only. Winograd
// F(3x3, 2x2) summed over the whole batch (see winograd.cpp): float32 partial sums of at
// most max(256, (W + 1) / 2) tiles, added in float64, so the error bound grows with that
// block, not with N. A non-finite result is recomputed by per-sample im2col + GEMM, so an
// Inf/NaN lands where the GEMM path puts it.
void winograd_conv3x3_weight_grad(const float* x, const float* dy, float* gw, int64_t N, int64_t C, int64_t H,
                                  int64_t W, int64_t O);

}  // namespace gradsleuth::cpu::fast
