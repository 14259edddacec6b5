// The CPU backend's class and the helpers its kernel files share. The kernels
// live one family per file (memory, elementwise, reduce, softmax, linalg, index,
// conv, random), side by side with cuda/'s files of the same names.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/backend.h"
#include "core/cpu/loops.h"

namespace gradsleuth::cpu {

// The size-1 slice at `i` along `dim`, as a plain alias (no autograd, no observer).
inline Tensor slice_raw(const Tensor& t, int64_t dim, int64_t i) {
  Shape s = t.shape();
  s[dim] = 1;
  return detail::make_alias(t, s, t.strides(), t.offset() + i * t.strides()[dim]);
}

// The element `i` strides (bytes) after p.
template <class T>
T* at(char* p, int64_t i, int64_t stride) {
  return reinterpret_cast<T*>(p + i * stride);
}

// `inner` behind a Backend that gives it float32 copies of float16/bfloat16 operands and rounds
// its results back (reduced_float.cpp): the kernels themselves know the four other dtypes only.
std::unique_ptr<Backend> with_reduced_floats(Backend& inner);
// out[k] = in[k] rounded to `dtype` (float16 or bfloat16), stored as its 16 bits, for k < n: the
// roundings of Tensor::to (core/cpu/reduced_float.cpp).
void narrow_floats(DType dtype, void* out, const float* in, int64_t n);
// out[k] = in[k] (float16 or bfloat16, as `dtype` says) widened to float32, exactly, for k < n.
void widen_floats(DType dtype, float* out, const void* in, int64_t n);

// The reference implementation of every kernel in core/backend.h.
class CpuBackend final : public Backend {
 public:
  CpuBackend();
  DeviceType type() const override { return DeviceType::CPU; }
  const char* name() const override { return "cpu"; }

  static constexpr size_t kAlign = 64;
  static constexpr size_t kHugeBytes = size_t{2} << 20;

  // memory.cpp
  void* allocate(size_t nbytes) override;
  void deallocate(void* p, size_t nbytes) override;
  // nbytes from malloc, aligned to `align` (a power of two >= 16) by hand, the malloc'd
  // pointer kept just below the block, where deallocate finds it.
  static void* aligned_block(size_t nbytes, size_t align);
  [[noreturn]] static void out_of_memory(size_t nbytes);
  void copy_to_host(void* dst, const void* src, size_t n) override;
  void copy_from_host(void* dst, const void* src, size_t n) override;
  void copy(const Tensor& out, const Tensor& in) override;
  void fill(const Tensor& out, double value) override;
  // elementwise.cpp, elementwise_unary.cpp (unary), elementwise_binary.cpp (binary)
  void arange(const Tensor& out, double start, double step) override;
  void unary(UnaryOp op, const Tensor& out, const Tensor& in) override;
  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override;
  void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override;
  void clamp(const Tensor& out, const Tensor& in, double lo, double hi) override;
  void threshold_backward(const Tensor& out, const Tensor& grad, const Tensor& x, double threshold) override;
  // reduce.cpp
  void reduce(ReduceOp op, const Tensor& out, const Tensor& in, const bool* reduced) override;
  void arg_reduce(bool is_max, const Tensor& out, const Tensor& in, int64_t dim) override;
  // softmax.cpp
  void softmax_lastdim(const Tensor& out, const Tensor& in, bool log) override;
  // linalg.cpp
  void bmm(const Tensor& out, const Tensor& a, const Tensor& b) override;
  // index.cpp
  void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) override;
  void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override;
  void index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) override;
  void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override;
  // conv.cpp
  void im2col(const Tensor& cols, const Tensor& in, const Conv2dGeometry& g) override;
  void col2im(const Tensor& out, const Tensor& cols, const Conv2dGeometry& g) override;
  void max_pool2d(const Tensor& out, const Tensor& argmax, const Tensor& in, const Conv2dGeometry& g) override;
  void max_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& argmax,
                           const Conv2dGeometry& g) override;
  void avg_pool2d(const Tensor& out, const Tensor& in, const Conv2dGeometry& g) override;
  void avg_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Conv2dGeometry& g) override;
  // conv_gemm.cpp
  bool conv2d_fused_supported(const Conv2dGeometry& g, int64_t O, DType dt) const override;
  bool conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                      const Conv2dGeometry& g) override;
  bool conv2d_backward(const Tensor& grad_x, const Tensor& grad_w, const Tensor& grad_b, const Tensor& grad_out,
                       const Tensor& x, const Tensor& w, const Conv2dGeometry& g) override;
  // random.cpp
  void uniform(const Tensor& out, double lo, double hi, uint64_t seed, uint64_t offset) override;
  void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) override;
  bool sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStep& s) override;
  bool adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                 const AdamStep& s) override;
  bool rmsprop_step(const Tensor& p, const Tensor& g, const Tensor& square_avg, const Tensor& grad_avg,
                    const Tensor& buf, const RmspropStep& s) override;
};

}  // namespace gradsleuth::cpu
