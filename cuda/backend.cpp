// cuda/backend.cpp: the CUDA Backend (core/backend.h) for DeviceType::CUDA: turns Tensors into
// DevTensors and calls the kernels of cuda/*.cu. Plain C++: the one file that sees both core's
// Tensors and the kernels' descriptors.
#include <algorithm>
#include <initializer_list>
#include <string>

#include "core/backend.h"
#include "core/format.h"
#include "core/matmul_layout.h"
#include "core/shape.h"
#include "cuda/cuda.h"
#include "cuda/kernels.h"
#include "cuda/optim_kernels.h"

namespace gradsleuth::cuda {

static_assert(::gradsleuth::kMaxDims == ::gradsleuth::cuda::kMaxDims,
              "cuda/strided.h's kMaxDims must match core/shape.h");

namespace {

// The kernels' view of t, for the op `op` (named in errors). Every dtype has kernels (float16 and
// bfloat16 computed in float32, rounded once on store).
DevTensor dev(const char* op, const Tensor& t) {
  GS_CHECK(t.device().is_cuda(), "cuda backend", "a CUDA kernel was given ", t.str(), " on ", t.device().str(),
           ": an op made a helper tensor without .device(...) (pass TensorOptions().device(x.device())), or mixed "
           "devices slipped past its check");
  DevTensor d;
  d.data = t.unsafe_data();
  d.dtype = t.dtype();
  d.g.ndim = static_cast<int32_t>(t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) {
    d.g.sizes[i] = t.shape()[i];
    d.g.strides[i] = t.strides()[i];
  }
  return d;
}

// The device address of a fused optimizer step's operand; nullptr for unused (undefined) state.
void* addr(const Tensor& t) { return t.defined() ? t.unsafe_data() : nullptr; }

// p contiguous float32/float64 on a CUDA device, every defined operand contiguous, same dtype and
// device as p: what cuda/optim.cu's kernels read. A 16-bit p takes the optimizer's reference path,
// whose ops compute in float32 (optim/optimizer.h).
bool fusable(const Tensor& p, std::initializer_list<const Tensor*> others) {
  if (!p.device().is_cuda() || !p.is_contiguous() || (p.dtype() != DType::Float32 && p.dtype() != DType::Float64))
    return false;
  for (const Tensor* t : others)
    if (t->defined() && (!t->is_contiguous() || t->dtype() != p.dtype() || t->device() != p.device())) return false;
  return true;
}


class CudaBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::CUDA; }
  const char* name() const override { return "cuda"; }

  void* allocate(size_t nbytes) override { return device_allocate(nbytes); }
  void deallocate(void* p, size_t nbytes) override { device_free(p, nbytes); }
  void copy_to_host(void* dst, const void* src, size_t n) override { memcpy_d2h(dst, src, n); }
  void copy_from_host(void* dst, const void* src, size_t n) override { memcpy_h2d(dst, src, n); }
  void synchronize() override { cuda::synchronize(); }
  std::string memory_summary() const override { return cuda::memory_summary(); }

  void copy(const Tensor& out, const Tensor& in) override {
    const char* k = "copy";
    cuda::copy(dev(k, out), dev(k, in));
  }
  void fill(const Tensor& out, double value) override {
    const char* k = "fill";
    cuda::fill(dev(k, out), value);
  }
  void arange(const Tensor& out, double start, double step) override {
    const char* k = "arange";
    cuda::arange(dev(k, out), start, step);
  }

  void unary(UnaryOp op, const Tensor& out, const Tensor& in) override {
    const char* k = unary_op_name(op);
    cuda::unary(op, dev(k, out), dev(k, in));
  }
  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override {
    const char* k = binary_op_name(op);
    cuda::binary(op, dev(k, out), dev(k, a), dev(k, b));
  }
  void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override {
    const char* k = "where";
    cuda::where(dev(k, out), dev(k, cond), dev(k, a), dev(k, b));
  }
  void clamp(const Tensor& out, const Tensor& in, double lo, double hi) override {
    const char* k = "clamp";
    cuda::clamp(dev(k, out), dev(k, in), lo, hi);
  }
  void threshold_backward(const Tensor& out, const Tensor& grad, const Tensor& x, double threshold) override {
    const char* k = "relu backward (threshold_backward)";
    cuda::threshold_backward(dev(k, out), dev(k, grad), dev(k, x), threshold);
  }

  void reduce(ReduceOp op, const Tensor& out, const Tensor& in, const bool* reduced) override {
    const char* k = reduce_op_name(op);
    cuda::reduce(op, dev(k, out), dev(k, in), reduced);
  }
  void arg_reduce(bool is_max, const Tensor& out, const Tensor& in, int64_t dim) override {
    const char* k = (is_max ? "argmax" : "argmin");
    cuda::arg_reduce(is_max, dev(k, out), dev(k, in), dim);
  }
  void softmax_lastdim(const Tensor& out, const Tensor& in, bool log) override {
    const char* k = (log ? "log_softmax" : "softmax");
    cuda::softmax_lastdim(dev(k, out), dev(k, in), log);
  }

  void bmm(const Tensor& out, const Tensor& a, const Tensor& b) override {
    const char* k = "matmul (bmm)";
    const int64_t N = out.shape()[1], M = out.shape()[2], K = a.shape()[2];
    if (!is_floating(out.dtype())) {  // int64: the tiled kernel reads any strides
      cuda::bmm(dev(k, out), dev(k, a), -1, 0, dev(k, b), -1, 0);
      return;
    }
    int64_t lda = 0, ldb = 0;
    const Tensor A = detail::matmul_layout(a, N, K, lda) < 0 ? a.contiguous() : a;
    const Tensor B = detail::matmul_layout(b, K, M, ldb) < 0 ? b.contiguous() : b;
    const int la = detail::matmul_layout(A, N, K, lda), lb = detail::matmul_layout(B, K, M, ldb);
    cuda::bmm(dev(k, out), dev(k, A), la, lda, dev(k, B), lb, ldb);
  }

  void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) override {
    const char* k = "gather";
    cuda::gather(dev(k, out), dev(k, in), dim, dev(k, index));
  }
  void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override {
    const char* k = "scatter_add";
    cuda::scatter_add(dev(k, out), dim, dev(k, index), dev(k, src));
  }
  void index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) override {
    const char* k = "index_select";
    cuda::index_select(dev(k, out), dev(k, in), dim, dev(k, index));
  }
  void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override {
    const char* k = "index_add";
    cuda::index_add(dev(k, out), dim, dev(k, index), dev(k, src));
  }

  void im2col(const Tensor& cols, const Tensor& in, const Conv2dGeometry& g) override {
    const char* k = "conv2d (im2col)";
    cuda::im2col(dev(k, cols), dev(k, in), g);
  }
  void col2im(const Tensor& out, const Tensor& cols, const Conv2dGeometry& g) override {
    const char* k = "conv2d backward (col2im)";
    cuda::col2im(dev(k, out), dev(k, cols), g);
  }
  void max_pool2d(const Tensor& out, const Tensor& argmax, const Tensor& in, const Conv2dGeometry& g) override {
    const char* k = "max_pool2d";
    cuda::max_pool2d(dev(k, out), dev(k, argmax), dev(k, in), g);
  }
  void max_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& argmax,
                           const Conv2dGeometry& g) override {
    const char* k = "max_pool2d backward";
    cuda::max_pool2d_backward(dev(k, grad_in), dev(k, grad_out), dev(k, argmax), g);
  }
  void avg_pool2d(const Tensor& out, const Tensor& in, const Conv2dGeometry& g) override {
    const char* k = "avg_pool2d";
    cuda::avg_pool2d(dev(k, out), dev(k, in), g);
  }
  void avg_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Conv2dGeometry& g) override {
    const char* k = "avg_pool2d backward";
    cuda::avg_pool2d_backward(dev(k, grad_in), dev(k, grad_out), g);
  }

  void uniform(const Tensor& out, double lo, double hi, uint64_t seed, uint64_t offset) override {
    const char* k = "rand (uniform)";
    cuda::uniform(dev(k, out), lo, hi, seed, offset);
  }
  void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) override {
    const char* k = "randn (normal)";
    cuda::normal(dev(k, out), mean, std, seed, offset);
  }

  // Fused optimizer steps (cuda/optim.cu): every operand contiguous, p's dtype, on the device.
  bool sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStep& s) override {
    if (!fusable(p, {&g, &buf}) || (s.momentum != 0.0 && !buf.defined())) return false;
    cuda::sgd_step(p.dtype(), p.numel(), p.unsafe_data(), g.unsafe_data(), addr(buf), s);
    return true;
  }
  bool adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                 const AdamStep& s) override {
    if (!fusable(p, {&g, &m, &v, &vmax}) || !m.defined() || !v.defined() || (s.amsgrad && !vmax.defined()))
      return false;
    cuda::adam_step(p.dtype(), p.numel(), p.unsafe_data(), g.unsafe_data(), addr(m), addr(v), addr(vmax), s);
    return true;
  }
  bool rmsprop_step(const Tensor& p, const Tensor& g, const Tensor& square_avg, const Tensor& grad_avg,
                    const Tensor& buf, const RmspropStep& s) override {
    if (!fusable(p, {&g, &square_avg, &grad_avg, &buf}) || !square_avg.defined() ||
        (s.centered && !grad_avg.defined()) || (s.momentum > 0.0 && !buf.defined()))
      return false;
    cuda::rmsprop_step(p.dtype(), p.numel(), p.unsafe_data(), g.unsafe_data(), addr(square_avg), addr(grad_avg),
                       addr(buf), s);
    return true;
  }
};

std::string g_reason;

std::string mib(int64_t b) { return str_printf("%.2f MiB", static_cast<double>(b) / (1 << 20)); }

}  // namespace

bool init() {
  static const bool ok = [] {
    if (!device_available(&g_reason)) return false;
    static CudaBackend backend;
    register_backend(DeviceType::CUDA, &backend);
    return true;
  }();
  return ok;
}

std::string unavailable_reason() { return g_reason; }

bool is_emulated() {
#if GS_CUDA_EMU
  return true;
#else
  return false;
#endif
}

std::string memory_summary() {
  const AllocatorStats s = allocator_stats();
  return "cuda:0 caching allocator: " + mib(s.bytes_in_use) + " in use, " + mib(s.bytes_cached) + " cached, peak " +
         mib(s.peak_bytes_in_use) + ", " + std::to_string(s.malloc_calls) + " cudaMalloc calls, " +
         std::to_string(s.cache_hits) + " cache hits";
}

}  // namespace gradsleuth::cuda
