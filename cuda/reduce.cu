// cuda/reduce.cu: sum/max/min over any set of dims and argmax/argmin along one dim, with
// the CPU's semantics (core/cpu/reduce.cpp): float32 sums accumulate in float64, NaN
// propagates through max/min, argmax/argmin take the first index on ties and the first NaN.
// float16/bfloat16 are widened on load: their sums accumulate in float64 like float32's, max/min
// compare in float32, and the result is rounded once on store.
#include "cuda/compat.h"

#include <math.h>

#include "core/elementwise_math.h"
#include "cuda/kernel_utils.h"

namespace gradsleuth::cuda {

namespace {

constexpr int kReduceThreads = 128;

// Accumulation type of a sum: float64 for float32 and the 16-bit floats, the element type otherwise.
template <class T>
using AccT = std::conditional_t<std::is_same_v<compute_t<T>, float>, double, T>;

template <class A>
__device__ A identity(ReduceOp op) {
  if (op == ReduceOp::Sum) return A(0);
  if constexpr (is_float_v<A>) {
    return op == ReduceOp::Max ? -static_cast<A>(INFINITY) : static_cast<A>(INFINITY);
  } else if constexpr (std::is_same_v<A, bool>) {
    return op == ReduceOp::Min;
  } else {
    return op == ReduceOp::Max ? static_cast<A>(-9223372036854775807LL - 1) : static_cast<A>(9223372036854775807LL);
  }
}

template <class A>
__device__ A combine(ReduceOp op, A a, A b) {
  switch (op) {
    case ReduceOp::Sum:
      if constexpr (std::is_same_v<A, bool>)
        return a || b;
      else
        return ew::wrap_add(a, b);  // an int64 sum wraps, like int64 add (core/elementwise_math.h)
    case ReduceOp::Max:
      if (is_nan(a) || is_nan(b)) return is_nan(a) ? a : b;  // NaN propagates
      return a > b ? a : b;
    case ReduceOp::Min:
      if (is_nan(a) || is_nan(b)) return is_nan(a) ? a : b;
      return a < b ? a : b;
    case ReduceOp::kCount: return a;
  }
  return a;
}

// One block per output element (grid-stride over the n_out outputs), blockDim.x a power of two
// <= kReduceThreads. Output j reads the input from kept.offset(j) and reduces the R = red.numel()
// elements at red.offset(r). Shape letters: out (n_out) contiguous keepdim, in any strides.
template <class T, class A, class TO>
__global__ void reduce_kernel(ReduceOp op, TO* out, const T* in, Strided kept, Strided red, int64_t n_out, int64_t R) {
  __shared__ A buf[kReduceThreads];
  for (int64_t j = blockIdx.x; j < n_out; j += gridDim.x) {
    const T* base = in + kept.offset(j);
    A acc = identity<A>(op);
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x)
      acc = combine<A>(op, acc, convert<A>(widen(base[red.offset(r)])));
    buf[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
      if (threadIdx.x < s) buf[threadIdx.x] = combine<A>(op, buf[threadIdx.x], buf[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) out[j] = convert<TO>(buf[0]);
    __syncthreads();  // buf is reused by the next output
  }
}

// One thread per output element: scans the n values along the dim (stride st). 1-D grid-stride.
template <class T>
__global__ void arg_reduce_kernel(bool is_max, int64_t* out, const T* in, Strided kept, int64_t n_out, int64_t n,
                                  int64_t st) {
  for (GS_GRID_STRIDE(j, n_out)) {
    const T* base = in + kept.offset(j);
    int64_t best = 0;
    compute_t<T> bv = widen(base[0]);
    for (int64_t i = 1; i < n; ++i) {
      const compute_t<T> v = widen(base[i * st]);
      bool better = is_max ? v > bv : v < bv;
      if (is_nan(bv))
        better = false;  // first NaN wins, as in PyTorch
      else if (is_nan(v))
        better = true;
      if (better) {
        bv = v;
        best = i;
      }
    }
    out[j] = best;
  }
}

const char* reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::kCount: break;
  }
  return "reduce";
}

}  // namespace

void reduce(ReduceOp op, const DevTensor& out, const DevTensor& in, const bool* reduced) {
  const int64_t n_out = out.numel();
  if (n_out == 0) return;
  Strided kept, red;
  for (int d = 0; d < in.g.ndim; ++d) {
    Strided& s = reduced[d] ? red : kept;
    s.sizes[s.ndim] = in.g.sizes[d];
    s.strides[s.ndim] = in.g.strides[d];
    ++s.ndim;
  }
  const int64_t R = red.numel();
  unsigned threads = 1;
  while (threads < static_cast<unsigned>(kReduceThreads) && static_cast<int64_t>(threads) < R) threads *= 2;
  const unsigned grid = static_cast<unsigned>(n_out < kMaxBlocks ? n_out : kMaxBlocks);
  dispatch(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch(out.dtype, [&](auto otag) {
      using TO = decltype(otag);
      if (op == ReduceOp::Sum)
        launch_op(reduce_name(op), reduce_kernel<T, AccT<T>, TO>, grid, threads, 0, op, static_cast<TO*>(out.data),
                  static_cast<const T*>(in.data), kept, red, n_out, R);
      else
        launch_op(reduce_name(op), reduce_kernel<T, compute_t<T>, TO>, grid, threads, 0, op, static_cast<TO*>(out.data),
                  static_cast<const T*>(in.data), kept, red, n_out, R);
    });
  });
}

void arg_reduce(bool is_max, const DevTensor& out, const DevTensor& in, int64_t dim) {
  const int64_t n_out = out.numel();
  if (n_out == 0) return;
  Strided kept = in.g;
  kept.sizes[dim] = 1;
  const int64_t n = in.g.sizes[dim], st = in.g.strides[dim];
  dispatch(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch_op(is_max ? "argmax" : "argmin", arg_reduce_kernel<T>, blocks_for(n_out), kThreads, 0, is_max,
              static_cast<int64_t*>(out.data), static_cast<const T*>(in.data), kept, n_out, n, st);
  });
}

}  // namespace gradsleuth::cuda
