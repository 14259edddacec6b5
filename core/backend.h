// The backend contract: the low-level kernels a device must implement.
// Every op in ops/ is written in terms of these (tinygrad's lesson: a new
// backend is a table to fill, not a tree to copy). The CPU backend (cpu/) is
// the answer key; the CUDA backend (cuda/) implements the same interface.
//
// Conventions for every kernel:
//  - `out` is freshly allocated and contiguous unless the comment says otherwise;
//    inputs may have any strides, including 0 (broadcast) — ops/ expands operands
//    to the output shape before calling, so kernels never broadcast themselves.
//  - dtypes are already resolved by ops/ (operands cast to the compute dtype).
//  - Kernels validate nothing about user input; ops/ has checked it.
#pragma once
#include <cstdint>
#include <string>

#include "core/op_kinds.h"
#include "core/optim_step.h"
#include "core/tensor.h"

namespace gradsleuth {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType type() const = 0;
  virtual const char* name() const = 0;

  // ---- memory ----
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* p, size_t nbytes) = 0;
  // Copies between this device and the host (contiguous bytes).
  virtual void copy_to_host(void* dst, const void* src, size_t nbytes) = 0;
  virtual void copy_from_host(void* dst, const void* src, size_t nbytes) = 0;
  virtual void synchronize() {}
  // One line on the device allocator for memory reports (W8); "" when it keeps no cache.
  virtual std::string memory_summary() const { return ""; }

  // ---- data movement ----
  // out (any strides, may not overlap in) <- in (same shape, any strides), casting dtype.
  virtual void copy(const Tensor& out, const Tensor& in) = 0;
  // out (any strides) <- value.
  virtual void fill(const Tensor& out, double value) = 0;
  // out[i] = start + i * step (contiguous).
  virtual void arange(const Tensor& out, double start, double step) = 0;

  // ---- elementwise ----
  virtual void unary(UnaryOp op, const Tensor& out, const Tensor& in) = 0;
  // a, b have out's shape (possibly stride-0 views) and the same dtype; out has
  // that dtype, or bool for comparisons.
  virtual void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) = 0;
  // out = cond ? a : b   (cond bool; all of out's shape)
  virtual void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) = 0;
  // out = clamp(in, lo, hi) — lo/hi may be +-inf.
  virtual void clamp(const Tensor& out, const Tensor& in, double lo, double hi) = 0;
  // out = x <= threshold ? 0 : grad   (relu's backward in one pass; grad and x of out's
  // shape and dtype). A NaN x passes the gradient (x <= threshold is false), and an
  // infinite grad where x <= threshold gives 0, not NaN: a select, never a multiply.
  virtual void threshold_backward(const Tensor& out, const Tensor& grad, const Tensor& x, double threshold) = 0;

  // ---- reductions ----
  // `out` has `in`'s rank with size 1 on reduced dims (keepdim shape); reduced[d] marks dims.
  virtual void reduce(ReduceOp op, const Tensor& out, const Tensor& in, const bool* reduced) = 0;
  // Index (int64) of the max/min along `dim`; out has keepdim shape. First index wins ties.
  virtual void arg_reduce(bool is_max, const Tensor& out, const Tensor& in, int64_t dim) = 0;
  // Row-wise over the last dim of a contiguous (R, C) input: softmax or log_softmax.
  virtual void softmax_lastdim(const Tensor& out, const Tensor& in, bool log) = 0;

  // ---- linear algebra ----
  // out (B, n, m) contiguous = a (B, n, k) @ b (B, k, m); a and b may have any strides.
  virtual void bmm(const Tensor& out, const Tensor& a, const Tensor& b) = 0;

  // ---- indexing ----
  // out[i][j][k] = in[i][index[i][j][k]][k] (dim = 1 example); index int64, out has index's shape.
  virtual void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) = 0;
  // out (pre-filled) [i][index[i][j][k]][k] += src[i][j][k].
  virtual void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) = 0;
  // out = in.index_select(dim, index): out's size along dim = index.numel().
  virtual void index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) = 0;
  // out (pre-filled) .index_add_(dim, index, src).
  virtual void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) = 0;

  // ---- convolution and pooling (NCHW, contiguous) ----
  // cols (N, C*kH*kW, outH*outW) <- in (N, C, H, W). `cols` has unit stride along its
  // last dim but any strides along the first two: conv2d passes a (C*kH*kW, N, L)
  // buffer seen as (N, C*kH*kW, L), so one GEMM covers the whole batch.
  virtual void im2col(const Tensor& cols, const Tensor& in, const Conv2dGeometry& g) = 0;
  // out (N, C, H, W), pre-zeroed, += scattered cols (N, C*kH*kW, outH*outW); cols
  // strided as in im2col.
  virtual void col2im(const Tensor& out, const Tensor& cols, const Conv2dGeometry& g) = 0;
  // out (N, C, outH, outW), argmax (same shape, int64: flat h*W+w index in the input plane)
  virtual void max_pool2d(const Tensor& out, const Tensor& argmax, const Tensor& in, const Conv2dGeometry& g) = 0;
  // grad_in (N, C, H, W), uninitialised: the kernel writes every element, 0 plus the sum of
  // grad_out over the windows whose argmax it is (0 + g: a -0 gradient is written as +0).
  virtual void max_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& argmax,
                                   const Conv2dGeometry& g) = 0;
  // count_include_pad semantics: divides by kH*kW.
  virtual void avg_pool2d(const Tensor& out, const Tensor& in, const Conv2dGeometry& g) = 0;
  virtual void avg_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Conv2dGeometry& g) = 0;

  // ---- fused convolution (optional; groups = 1) ----
  // Whether conv2d_forward/backward take this case (O output channels, every tensor of
  // dtype dt). Asked before the output is allocated: the default (no fused kernel) sends
  // conv2d straight to its composite path.
  virtual bool conv2d_fused_supported(const Conv2dGeometry& /*g*/, int64_t /*O*/, DType /*dt*/) const { return false; }
  // out (N, O, outH, outW) = conv2d(x (N, C, H, W), w (O, C, kH, kW)) + bias (O), or no
  // bias when `bias` is undefined. All contiguous, one floating dtype, on this device.
  // Return false, touching nothing, when this backend has no fused kernel for the case:
  // ops/conv.cpp then runs the composite (unfold + matmul) path.
  virtual bool conv2d_forward(const Tensor& /*out*/, const Tensor& /*x*/, const Tensor& /*w*/, const Tensor& /*bias*/,
                              const Conv2dGeometry& /*g*/) {
    return false;
  }
  // Its first-order backward for the incoming gradient grad_out (N, O, outH, outW): writes
  // (not accumulates) grad_x (x's shape), grad_w (w's shape) and grad_b (O); each is
  // undefined when not needed and then not computed. Same contract as the forward.
  virtual bool conv2d_backward(const Tensor& /*grad_x*/, const Tensor& /*grad_w*/, const Tensor& /*grad_b*/,
                               const Tensor& /*grad_out*/, const Tensor& /*x*/, const Tensor& /*w*/,
                               const Conv2dGeometry& /*g*/) {
    return false;
  }

  // ---- random (counter-based, see generator.h) ----
  // uniform in [lo, hi) / normal(mean, std), element i uses Philox(seed, offset + i/4) word i%4.
  virtual void uniform(const Tensor& out, double lo, double hi, uint64_t seed, uint64_t offset) = 0;
  virtual void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) = 0;

  // ---- fused optimizer steps (optim/; the formulas are in core/optim_step.h) ----
  // Update p in place from its gradient g and the optimizer's state, in one pass. All tensors
  // are contiguous, of one floating dtype, on this device (the optimizer checked); a state
  // tensor the options do not use (the momentum buffer without momentum, ...) is undefined.
  // Return false when this backend has no fused step: the optimizer then runs its tensor ops.
  virtual bool sgd_step(const Tensor& /*p*/, const Tensor& /*g*/, const Tensor& /*buf*/, const SgdStep& /*s*/) {
    return false;
  }
  virtual bool adam_step(const Tensor& /*p*/, const Tensor& /*g*/, const Tensor& /*m*/, const Tensor& /*v*/,
                         const Tensor& /*vmax*/, const AdamStep& /*s*/) {
    return false;
  }
  virtual bool rmsprop_step(const Tensor& /*p*/, const Tensor& /*g*/, const Tensor& /*square_avg*/,
                            const Tensor& /*grad_avg*/, const Tensor& /*buf*/, const RmspropStep& /*s*/) {
    return false;
  }

  // ---- the fused backward of a cast to 16 bits (core/autograd.cpp, detail::round_through) ----
  // Rounds each value of the contiguous float32 tensor t in place to the nearest `dtype`
  // (float16/bfloat16) value, kept in float32: the bits of t.to(dtype).to(kFloat32), in one pass
  // and without the 16-bit copy. Return false when this backend has no such kernel: the caller
  // then converts twice.
  virtual bool round_through(const Tensor& /*t*/, DType /*dtype*/) { return false; }
  // bmm (out float32; a and b float32, float16 or bfloat16) whose every result is rounded to
  // `dtype` as it is stored, kept in float32: the bits of bmm then round_through, in one pass.
  // Return false, touching nothing, when this backend has no such kernel for these operands.
  virtual bool bmm_round_through(const Tensor& /*out*/, const Tensor& /*a*/, const Tensor& /*b*/, DType /*dtype*/) {
    return false;
  }
};

// The backend for a device. Throws a clear error when the device's backend is
// not built (CUDA without GRADSLEUTH_CUDA) or the device does not exist.
Backend& backend_for(Device d);
inline Backend& backend_of(const Tensor& t) { return backend_for(t.device()); }
// Backends register themselves (the CUDA library does so when loaded).
void register_backend(DeviceType type, Backend* backend);
bool has_backend(DeviceType type);

}  // namespace gradsleuth
