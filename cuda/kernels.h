// cuda/kernels.h: the host entry points of the CUDA kernels (cuda/*.cu), one per Backend
// function, on plain descriptors. backend.cpp turns Tensors into DevTensors and calls these;
// the .cu files never see core/tensor.h, only these descriptors.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/op_kinds.h"
#include "cuda/strided.h"

namespace gradsleuth::cuda {

// A tensor on the device: element 0's address, dtype and geometry.
struct DevTensor {
  void* data = nullptr;
  DType dtype = DType::Float32;
  Strided g;
  int64_t numel() const { return g.numel(); }
};

// ---- allocator.cu: the caching allocator ----
struct AllocatorStats {
  int64_t bytes_in_use = 0;  // blocks handed out and not yet freed
  int64_t bytes_cached = 0;  // freed blocks kept for reuse
  int64_t peak_bytes_in_use = 0;
  int64_t malloc_calls = 0;  // cudaMalloc calls (cache misses)
  int64_t cache_hits = 0;    // allocations served from the cache
  int64_t frees = 0;
  int64_t limit_bytes = 0;  // 0: no limit but the device's
};
void* device_allocate(size_t nbytes);  // throws gradsleuth::Error (op "cuda allocate") when out of memory
void device_free(void* p, size_t nbytes);
AllocatorStats allocator_stats();
void reset_allocator_peak();
void empty_cache();                    // cudaFree every cached block
void set_memory_limit(int64_t bytes);  // caps bytes_in_use + bytes_cached (0: none); for tests and sharing a GPU

// ---- memory.cu ----
bool device_available(std::string* why);  // a device exists (cudaGetDeviceCount succeeded with >= 1)
void memcpy_d2h(void* dst, const void* src, size_t n);
void memcpy_h2d(void* dst, const void* src, size_t n);
void synchronize();  // reports an asynchronous error with the op that launched last
void copy(const DevTensor& out, const DevTensor& in);
void fill(const DevTensor& out, double value);

// ---- elementwise.cu ----
void arange(const DevTensor& out, double start, double step);
void unary(UnaryOp op, const DevTensor& out, const DevTensor& in);
void binary(BinaryOp op, const DevTensor& out, const DevTensor& a, const DevTensor& b);
void where(const DevTensor& out, const DevTensor& cond, const DevTensor& a, const DevTensor& b);
void clamp(const DevTensor& out, const DevTensor& in, double lo, double hi);
void threshold_backward(const DevTensor& out, const DevTensor& grad, const DevTensor& x, double threshold);

// ---- reduce.cu ----
void reduce(ReduceOp op, const DevTensor& out, const DevTensor& in, const bool* reduced);
void arg_reduce(bool is_max, const DevTensor& out, const DevTensor& in, int64_t dim);

// ---- softmax.cu ----
void softmax_lastdim(const DevTensor& out, const DevTensor& in, bool log);

// ---- linalg.cu ----
// out (B, N, M) contiguous = a (B, N, K) @ b (B, K, M).
// layout_a/b: 0 row-major, 1 column-major in the last two dims with leading dimension ld_a/b
// (cuBLAS path, float32/float64); -1: any strides (tiled kernel, every dtype but bool).
void bmm(const DevTensor& out, const DevTensor& a, int layout_a, int64_t ld_a, const DevTensor& b, int layout_b,
         int64_t ld_b);

// ---- index.cu ----
void gather(const DevTensor& out, const DevTensor& in, int64_t dim, const DevTensor& index);
void scatter_add(const DevTensor& out, int64_t dim, const DevTensor& index, const DevTensor& src);
void index_select(const DevTensor& out, const DevTensor& in, int64_t dim, const DevTensor& index);
void index_add(const DevTensor& out, int64_t dim, const DevTensor& index, const DevTensor& src);

// ---- conv.cu ----
void im2col(const DevTensor& cols, const DevTensor& in, const Conv2dGeometry& g);
void col2im(const DevTensor& out, const DevTensor& cols, const Conv2dGeometry& g);
void max_pool2d(const DevTensor& out, const DevTensor& argmax, const DevTensor& in, const Conv2dGeometry& g);
void max_pool2d_backward(const DevTensor& grad_in, const DevTensor& grad_out, const DevTensor& argmax,
                         const Conv2dGeometry& g);
void avg_pool2d(const DevTensor& out, const DevTensor& in, const Conv2dGeometry& g);
void avg_pool2d_backward(const DevTensor& grad_in, const DevTensor& grad_out, const Conv2dGeometry& g);

// ---- random.cu ----
void uniform(const DevTensor& out, double lo, double hi, uint64_t seed, uint64_t offset);
void normal(const DevTensor& out, double mean, double std, uint64_t seed, uint64_t offset);

}  // namespace gradsleuth::cuda
