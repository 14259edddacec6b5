// The CPU backend's tuned kernels, and the reference each one must equal.
//
// core/cpu/*.cpp is the answer key: one short loop per op, the code to read to see how
// an op is computed. This folder holds the speed work: a tuned BLAS and a packing-free
// SGEMM, Winograd convolution, a fused per-sample conv2d, vectorised transcendental
// functions and elementwise rows, threaded reductions, branch-free pooling, fused optimizer
// steps, huge pages for large buffers. A reference kernel hands its
// work to the tuned one below while tuned kernels are on (cpu_fast_kernels(),
// core/fast_kernels.h: GRADSLEUTH_FAST_KERNELS, ON by default, or set_cpu_fast_kernels at
// run time); each tuned entry returns false for a case it does not handle, and the
// reference loop runs. With GRADSLEUTH_FAST_KERNELS=OFF every op runs the reference
// loops, and the test suite passes the same way.
//
// Each entry names its reference and how closely it must agree with it;
// tests/test_cpu_fast.cpp compares every pair with tuned kernels on and off.
#pragma once
#include <cstddef>
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
// The same product with a and/or b in float16 or bfloat16 and out in float32, when bmm would run
// it on the packing-free SGEMM: that kernel widens the 16-bit operands as it reads them, for the
// bits bmm gives on float32 copies of them. False, touching nothing, otherwise.
// With `round_through` kFloat16 or kBFloat16, each value of out is rounded to that dtype as the
// kernel stores it (kept float32): the bits of out.to(round_through).to(kFloat32).
bool bmm_mixed(const Tensor& out, const Tensor& a, const Tensor& b, DType round_through = kFloat32);

// ---- elementwise (elementwise.cpp: unary; elementwise_binary.cpp: the rest) --------------
// o[0, n) = op(a[0, n)) for exp, log, sqrt, tanh, sigmoid, relu, square, abs and
// reciprocal, with Eigen's vectorised packet math; float and double only. Inputs outside
// the packet functions' exact range (exp's underflow and overflow, log of denormals, NaN)
// are recomputed with the formula. Reference: elementwise_unary.cpp's loop over
// elementwise_math.h's formula. Agreement: exact for relu, square, abs, sqrt and
// reciprocal; within a few ulps for exp, log, tanh and sigmoid; the special values
// (0, +-inf, NaN, underflow) exact.
bool unary_contiguous(UnaryOp op, float* o, const float* a, int64_t n);
bool unary_contiguous(UnaryOp op, double* o, const double* a, int64_t n);

// Binary ops and comparisons whose rows are contiguous, or contiguous against a broadcast
// scalar (x + b, relu's backward comparing with 0), spelled out so the compiler vectorises
// them; the op is chosen once per call. Declines (false) any other strides. Reference:
// elementwise_binary.cpp's strided loops (CpuBackend::binary). Agreement: bit for bit.
bool binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);
// where(cond, a, b) with contiguous out and cond, each branch contiguous or a broadcast
// scalar: a select GCC vectorises (both sides loaded unconditionally, cond read as bytes).
// Reference: elementwise.cpp's loop (CpuBackend::where). Agreement: bit for bit.
bool where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
// relu's backward, x <= threshold ? 0 : g, over contiguous rows as a compare and a masked
// move. Reference: elementwise.cpp's loop (CpuBackend::threshold_backward). Agreement: bit
// for bit (a select, so an infinite g at x <= threshold gives 0 in both).
bool threshold_backward(const Tensor& out, const Tensor& grad, const Tensor& x, double threshold);

// ---- reductions (reduce.cpp; core/cpu/reduce_rows.h) --------------------------------------
// sum/max/min over any set of dims with threads and vectorised rows: one long row split
// into per-thread partial results, rows with distinct outputs split across threads, a sum
// over an outer dim (the output moving with the row) through restrict pointers (6x faster
// for a sum over dim 0), contiguous max/min through Eigen. Reference: reduce.cpp's serial
// loop over reduce_rows.h's rows. Agreement: integer sums bit for bit; max and min the same
// value (Eigen may pick the other zero of -0 and +0); float
// sums within accurate_sum.h's bound (a long row's per-thread partial sums are added in
// thread order).
bool reduce(ReduceOp op, const Tensor& out, const Tensor& in, const bool* reduced);

// ---- memory (memory.cpp) ----------------------------------------------------------------
// A buffer of 2 MiB or more, 2 MiB aligned and marked MADV_HUGEPAGE (as PyTorch's CPU
// allocator with THP_MEM_ALLOC_ENABLE): a fresh buffer is paged in at first touch, and with
// 4 KiB pages those faults cost more than the op itself (a 64 MiB add: 16k faults); huge
// pages take 512x fewer. nullptr below 2 MiB. Freed by CpuBackend::deallocate like any
// block. Reference: memory.cpp's 64-byte aligned block (CpuBackend::aligned_block).
// Agreement: the same bytes, only the alignment and the page size differ.
void* allocate_huge(size_t nbytes);

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
bool rmsprop_step(const Tensor& p, const Tensor& g, const Tensor& square_avg, const Tensor& grad_avg, const Tensor& buf,
                  const RmspropStep& s);
// SGD and Adam where a float16/bfloat16 tensor takes part (a 16-bit parameter and its state, or the
// 16-bit gradient of a float32 master weight): chunks of a few hundred values widened into float32
// on the stack, the float32 update above run on them, the written ones rounded back while they are
// in L1, in one pass. The bits of widening whole tensors, updating and rounding (each value's update
// reads only its own position). False (nothing written) where an operand is not contiguous, not on
// the CPU, or of another dtype.
bool sgd_step_reduced(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStep& s);
bool adam_step_reduced(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                       const AdamStep& s);

}  // namespace gradsleuth::cpu::fast
