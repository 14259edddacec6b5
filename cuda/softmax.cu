// cuda/softmax.cu: row-wise softmax / log_softmax over the last dim of a contiguous (R, C)
// input, max-subtracted, the denominator summed in float64 (as core/cpu/softmax.cpp). A float16 or
// bfloat16 row is computed in float32 and each output rounded once.
#include "cuda/compat.h"

#include <math.h>

#include "cuda/kernel_utils.h"

namespace gradsleuth::cuda {

namespace {

constexpr int kSoftmaxThreads = 128;

// One block per row (grid-stride over the R rows), blockDim.x a power of two <= 128.
// Shape letters: x, y (R, C) contiguous. A row whose max is NaN or +-inf comes out all NaN.
// S is the stored type, T = compute_t<S> the computed one; a 16-bit S keeps no exp in y between
// the passes (that would round twice): the last pass computes it again.
template <class S>
__global__ void softmax_kernel(S* y, const S* x, int64_t R, int64_t C, bool log_out) {
  using T = compute_t<S>;
  constexpr bool kStoreExp = !is_half_v<S>;
  __shared__ T mbuf[kSoftmaxThreads];
  __shared__ double sbuf[kSoftmaxThreads];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const S* xr = x + r * C;
    S* yr = y + r * C;
    T m = -static_cast<T>(INFINITY);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const T v = widen(xr[c]);
      if (v != v || m != m)
        m = (v != v) ? v : m;
      else
        m = v > m ? v : m;
    }
    mbuf[threadIdx.x] = m;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
      if (threadIdx.x < s) {
        const T a = mbuf[threadIdx.x], b = mbuf[threadIdx.x + s];
        mbuf[threadIdx.x] = (a != a) ? a : ((b != b) ? b : (a > b ? a : b));
      }
      __syncthreads();
    }
    m = mbuf[0];
    const bool finite = m == m && m != static_cast<T>(INFINITY) && m != -static_cast<T>(INFINITY);
    double s = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const T e = finite ? static_cast<T>(exp(widen(xr[c]) - m)) : T(0);
      if (kStoreExp && !log_out) yr[c] = narrow<S>(e);
      s += static_cast<double>(e);
    }
    sbuf[threadIdx.x] = s;
    __syncthreads();
    for (unsigned k = blockDim.x / 2; k > 0; k /= 2) {
      if (threadIdx.x < k) sbuf[threadIdx.x] += sbuf[threadIdx.x + k];
      __syncthreads();
    }
    const T sum = static_cast<T>(sbuf[0]);
    const S nan = narrow<S>(static_cast<T>(NAN));
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      if (!finite)
        yr[c] = nan;
      else if (log_out)
        yr[c] = narrow<S>((widen(xr[c]) - m) - static_cast<T>(log(sum)));
      else if (kStoreExp)
        yr[c] = narrow<S>(widen(yr[c]) / sum);
      else
        yr[c] = narrow<S>(static_cast<T>(exp(widen(xr[c]) - m)) / sum);
    }
    __syncthreads();  // the buffers are reused by the next row
  }
}

}  // namespace

void softmax_lastdim(const DevTensor& out, const DevTensor& in, bool log) {
  const int64_t C = in.g.ndim ? in.g.sizes[in.g.ndim - 1] : 1;
  const int64_t R = C > 0 ? in.numel() / C : 0;
  if (R == 0 || C == 0) return;
  unsigned threads = 1;
  while (threads < static_cast<unsigned>(kSoftmaxThreads) && static_cast<int64_t>(threads) < C) threads *= 2;
  const unsigned grid = static_cast<unsigned>(R < kMaxBlocks ? R : kMaxBlocks);
  dispatch(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_float_v<compute_t<T>>)
      launch_op(log ? "log_softmax" : "softmax", softmax_kernel<T>, grid, threads, 0, static_cast<T*>(out.data),
                static_cast<const T*>(in.data), R, C, log);
  });
}

}  // namespace gradsleuth::cuda
