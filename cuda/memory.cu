// cuda/memory.cu: device discovery, host<->device copies, the launch/synchronise error
// reporting that names the op, and the copy (dtype cast, any strides) and fill kernels.
#include "cuda/compat.h"

#include "cuda/kernel_utils.h"

namespace gradsleuth::cuda {

namespace {
const char* g_last_op = "(none)";  // the op whose kernel was launched last
}

void after_launch(const char* op, cudaError_t err) {
  g_last_op = op;
#ifndef NDEBUG
  if (err == cudaSuccess) err = cudaGetLastError();
#endif
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear a launch (not sticky) error
    GS_FAIL(op, "CUDA kernel launch failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
            "). Check the launch geometry and the operands' device.");
  }
}

void check_runtime(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  GS_FAIL(what, cudaGetErrorName(err), " (", cudaGetErrorString(err), "), reported here; the last kernel launched was ",
          g_last_op,
          "'s. Kernels run asynchronously: the error may come from that op; debug builds check every launch.");
}

bool device_available(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);  // leaves n unwritten without a GPU
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
    return false;
  }
  if (n < 1) {
    if (why) *why = "no CUDA device";
    return false;
  }
  return true;
}

void memcpy_d2h(void* dst, const void* src, size_t n) {
  if (n) check_runtime(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "cuda copy to host");
}
void memcpy_h2d(void* dst, const void* src, size_t n) {
  if (n) check_runtime(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "cuda copy from host");
}
void synchronize() { check_runtime(cudaDeviceSynchronize(), "cuda synchronize"); }

namespace {

// out[i] = in[i] converted to TO (a 16-bit TO through float32, rounded once) for n elements in
// row-major order of the shared shape. 1-D grid-stride.
template <class TO, class TI>
__global__ void copy_kernel(TO* out, Strided so, const TI* in, Strided si, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[so.offset(i)] = convert<TO>(in[si.offset(i)]);
}

// out[i] = v. 1-D grid-stride.
template <class T>
__global__ void fill_kernel(T* out, Strided so, T v, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[so.offset(i)] = v;
}

}  // namespace

void copy(const DevTensor& out, const DevTensor& in) {
  const int64_t n = out.numel();
  if (n == 0) return;
  if (out.dtype == in.dtype && out.g.contiguous() && in.g.contiguous()) {
    check_runtime(
        cudaMemcpy(out.data, in.data, static_cast<size_t>(n) * dtype_size(out.dtype), cudaMemcpyDeviceToDevice),
        "copy");
    return;
  }
  dispatch(out.dtype, [&](auto o) {
    using TO = decltype(o);
    dispatch(in.dtype, [&](auto i) {
      using TI = decltype(i);
      launch_op("copy", copy_kernel<TO, TI>, blocks_for(n), kThreads, 0, static_cast<TO*>(out.data), out.g,
                static_cast<const TI*>(in.data), in.g, n);
    });
  });
}

void fill(const DevTensor& out, double value) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch_op("fill", fill_kernel<T>, blocks_for(n), kThreads, 0, static_cast<T*>(out.data), out.g, convert<T>(value),
              n);
  });
}

Float32Scratch::Float32Scratch(const DevTensor& like, bool keep) {
  t_.dtype = DType::Float32;
  t_.g.ndim = like.g.ndim;
  int64_t stride = 1;
  for (int d = like.g.ndim - 1; d >= 0; --d) {
    t_.g.sizes[d] = like.g.sizes[d];
    t_.g.strides[d] = stride;
    stride *= like.g.sizes[d];
  }
  bytes_ = static_cast<size_t>(t_.numel()) * sizeof(float);
  t_.data = bytes_ ? device_allocate(bytes_) : nullptr;
  if (keep) copy(t_, like);
}
Float32Scratch::~Float32Scratch() {
  if (t_.data) device_free(t_.data, bytes_);
}

}  // namespace gradsleuth::cuda
