// The CPU backend's tuned kernels, and the reference each one must equal.
//
// core/cpu/*.cpp is the answer key: one short loop per op, the code to read to see how
// an op is computed. This folder holds the speed work: a tuned BLAS and a packing-free
// SGEMM, Winograd convolution, a fused per-sample conv2d, vectorised transcendental
// functions, branch-free pooling, fused optimizer steps. A reference kernel hands its
// work to the tuned one below while tuned kernels are on (cpu_fast_kernels(),
// core/fast_kernels.h: GRADSLEUTH_FAST_KERNELS, ON by default, or set_cpu_fast_kernels at
// run time); each tuned entry returns false for a case it does not handle, and the
// reference loop runs. With GRADSLEUTH_FAST_KERNELS=OFF every op runs the reference
// loops, and the test suite passes the same way.
//
// Each entry names its reference and how closely it must agree with it;
// tests/test_cpu_fast.cpp compares every pair with tuned kernels on and off.
#pragma once
#include <cstdint>

#include "core/backend.h"
#include "core/fast_kernels.h"  // cpu_fast_kernels(): whether the backend calls the kernels below

namespace gradsleuth::cpu::fast {

// ---- matrix multiply (linalg.cpp; blas.h, sgemm.h) ----------------------------------------
// out (B, N, M) = a (B, N, K) @ b (B, K, M) through the BLAS (OpenBLAS by default), the
// packing-free SGEMM of sgemm.h for the products it wins, or Eigen's product; row- or
// column-major operands are used in place. Reference: linalg.cpp's loop. Agreement:
// within the dot-product bound K * u * sum_k |a_ik| |b_kj| per element.
bool bmm(const Tensor& out, const Tensor& a, const Tensor& b);

// ---- elementwise (elementwise.cpp) -------------------------------------------------------
// o[0, n) = op(a[0, n)) for exp, log, sqrt, tanh, sigmoid, relu, square, abs and
// reciprocal, with Eigen's vectorised packet math; float and double only. Inputs outside
// the packet functions' exact range (exp's underflow and overflow, log of denormals, NaN)
// are recomputed with the formula. Reference: elementwise.cpp's loop over
// elementwise_math.h's formula. Agreement: exact for relu, square, abs, sqrt and
// reciprocal; within a few ulps for exp, log, tanh and sigmoid; the special values
// (0, +-inf, NaN, underflow) exact.
bool unary_contiguous(UnaryOp op, float* o, const float* a, int64_t n);
bool unary_contiguous(UnaryOp op, double* o, const double* a, int64_t n);

// ---- softmax (softmax.cpp) ---------------------------------------------------------------
// Row-wise softmax / log_softmax over the last dim with Eigen's packet exp. Reference:
// softmax.cpp's loop. Agreement: a few ulps per element (the denominators are both
// accurate_sum's).
bool softmax_lastdim(const Tensor& out, const Tensor& in, bool log);

// ---- im2col / col2im (conv.cpp; conv_cols.h) ------------------------------------------
// One loop per kernel tap over the flattened plane when the stride is 1 and the width is
// kept ("same" convolutions), so the copy vectorises. Reference: conv.cpp's loops.
// Agreement: bit for bit.
bool im2col(const Tensor& cols, const Tensor& in, const Conv2dGeometry& g);
bool col2im(const Tensor& out, const Tensor& cols, const Conv2dGeometry& g);

// ---- max pooling (conv.cpp) -------------------------------------------------------------
// Windows without padding, branch-free (the 2x2 / stride 2 case one vector per row).
// Reference: conv.cpp's loop over pool_math.h's window. Agreement: bit for bit, the
// argmax included (the first maximum wins ties, the first NaN wins outright).
bool max_pool2d(const Tensor& out, const Tensor& argmax, const Tensor& in, const Conv2dGeometry& g);

// ---- fused conv2d (conv2d.cpp; winograd.h) -----------------------------------------------
// conv2d (groups 1, float32/float64) as one op: each sample's columns in a cache-resident
// buffer, a per-sample GEMM, Winograd F(2x2, 3x3) for 3x3 / stride 1 / padding 1 float32
// layers with >= 8 channels. Reference: the composite unfold + matmul of core/ops/conv.cpp
// (which runs on conv.cpp's and linalg.cpp's loops). Agreement: within the GEMM's bound;
// Winograd's as documented at set_conv_algorithm (core/ops.h).
bool conv2d_supported(const Conv2dGeometry& g, int64_t O, DType dt);
bool conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dGeometry& g);
bool conv2d_backward(const Tensor& grad_x, const Tensor& grad_w, const Tensor& grad_b, const Tensor& grad_out,
                     const Tensor& x, const Tensor& w, const Conv2dGeometry& g);

// ---- fused optimizer steps (optim.cpp) ---------------------------------------------------
// One loop per parameter over core/optim_step.h's element update. Reference: the
// optimizer's own tensor-op formula (optim/sgd.cpp, adam.cpp, rmsprop.cpp). Agreement: SGD
// bit for bit (both sides are compiled without FMA contraction); Adam and RMSprop within a
// few ulps (their square roots).
bool sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStep& s);
bool adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
               const AdamStep& s);
bool rmsprop_step(const Tensor& p, const Tensor& g, const Tensor& square_avg, const Tensor& grad_avg,
                  const Tensor& buf, const RmspropStep& s);

}  // namespace gradsleuth::cpu::fast
