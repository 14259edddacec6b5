// cuda/index.cu: gather, scatter_add, index_select and index_add over any strides. The two
// accumulating kernels use atomicAdd (several sources may hit one output), so float sums may
// differ from the CPU's in the last bits; gather and index_select are exact. A float16/bfloat16
// output accumulates in a float32 copy (Float32Scratch) and is rounded once at the end.
#include "cuda/compat.h"

#include "cuda/kernel_utils.h"

namespace gradsleuth::cuda {

namespace {

// A geometry with `sizes` from `shape` and strides from `strides`, stride 0 along `zero_dim`.
Strided with_strides(const Strided& shape, const Strided& strides, int zero_dim) {
  Strided s = shape;
  for (int d = 0; d < s.ndim; ++d) s.strides[d] = d == zero_dim ? 0 : strides.strides[d];
  return s;
}
int64_t inner_of(const Strided& g, int64_t dim) {
  int64_t n = 1;
  for (int d = static_cast<int>(dim) + 1; d < g.ndim; ++d) n *= g.sizes[d];
  return n;
}

// out[i] = in[coords of i in index's shape, with index[i] along dim]. One thread per index
// element, 1-D grid-stride. xs: index's sizes with in's strides (0 along dim).
template <class T>
__global__ void gather_kernel(T* out, Strided os, const T* in, Strided xs, int64_t in_dim_stride, const int64_t* ix,
                              Strided is, int64_t n) {
  for (GS_GRID_STRIDE(i, n)) out[os.offset(i)] = in[xs.offset(i) + ix[is.offset(i)] * in_dim_stride];
}

// out[coords of i, index[i] along dim] += src[i]. One thread per index element, grid-stride.
// out is compute_t<T> (float32 for 16-bit T: the accumulator that is rounded once afterwards).
template <class T>
__global__ void scatter_add_kernel(compute_t<T>* out, Strided os, int64_t out_dim_stride, const int64_t* ix, Strided is,
                                   const T* src, Strided ss, int64_t n) {
  for (GS_GRID_STRIDE(i, n))
    atomic_add(out + os.offset(i) + ix[is.offset(i)] * out_dim_stride, widen(src[ss.offset(i)]));
}

// out[..., j, ...] = in[..., index[j], ...]. One thread per out element, grid-stride; j is
// (i / inner) % dim_size. xs: out's sizes with in's strides (0 along dim).
template <class T>
__global__ void index_select_kernel(T* out, Strided os, const T* in, Strided xs, int64_t in_dim_stride,
                                    const int64_t* ix, int64_t ist, int64_t inner, int64_t dim_size, int64_t n) {
  for (GS_GRID_STRIDE(i, n)) {
    const int64_t j = (i / inner) % dim_size;
    out[os.offset(i)] = in[xs.offset(i) + ix[j * ist] * in_dim_stride];
  }
}

// out[..., index[j], ...] += src[..., j, ...]. One thread per src element, grid-stride; out as in
// scatter_add_kernel.
template <class T>
__global__ void index_add_kernel(compute_t<T>* out, Strided os, int64_t out_dim_stride, const int64_t* ix, int64_t ist,
                                 const T* src, Strided ss, int64_t inner, int64_t dim_size, int64_t n) {
  for (GS_GRID_STRIDE(i, n)) {
    const int64_t j = (i / inner) % dim_size;
    atomic_add(out + os.offset(i) + ix[j * ist] * out_dim_stride, widen(src[ss.offset(i)]));
  }
}

}  // namespace

void gather(const DevTensor& out, const DevTensor& in, int64_t dim, const DevTensor& index) {
  const int64_t n = index.numel();
  if (n == 0) return;
  const Strided xs = with_strides(index.g, in.g, static_cast<int>(dim));
  dispatch(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch_op("gather", gather_kernel<T>, blocks_for(n), kThreads, 0, static_cast<T*>(out.data), out.g,
              static_cast<const T*>(in.data), xs, in.g.strides[dim], static_cast<const int64_t*>(index.data), index.g,
              n);
  });
}

void scatter_add(const DevTensor& out_, int64_t dim, const DevTensor& index, const DevTensor& src) {
  const int64_t n = index.numel();
  if (n == 0) return;
  accumulate_in_float32(out_, true, [&](const DevTensor& out) {
    const Strided os = with_strides(index.g, out.g, static_cast<int>(dim));
    const Strided ss = with_strides(index.g, src.g, -1);
    dispatch(src.dtype, [&](auto tag) {
      using T = decltype(tag);
      launch_op("scatter_add", scatter_add_kernel<T>, blocks_for(n), kThreads, 0, static_cast<compute_t<T>*>(out.data),
                os, out.g.strides[dim], static_cast<const int64_t*>(index.data), index.g,
                static_cast<const T*>(src.data), ss, n);
    });
  });
}

void index_select(const DevTensor& out, const DevTensor& in, int64_t dim, const DevTensor& index) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const Strided xs = with_strides(out.g, in.g, static_cast<int>(dim));
  const int64_t ist = index.g.ndim ? index.g.strides[0] : 0;
  dispatch(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch_op("index_select", index_select_kernel<T>, blocks_for(n), kThreads, 0, static_cast<T*>(out.data), out.g,
              static_cast<const T*>(in.data), xs, in.g.strides[dim], static_cast<const int64_t*>(index.data), ist,
              inner_of(out.g, dim), out.g.sizes[dim], n);
  });
}

void index_add(const DevTensor& out_, int64_t dim, const DevTensor& index, const DevTensor& src) {
  const int64_t n = src.numel();
  if (n == 0) return;
  const int64_t ist = index.g.ndim ? index.g.strides[0] : 0;
  accumulate_in_float32(out_, true, [&](const DevTensor& out) {
    const Strided os = with_strides(src.g, out.g, static_cast<int>(dim));
    dispatch(src.dtype, [&](auto tag) {
      using T = decltype(tag);
      launch_op("index_add", index_add_kernel<T>, blocks_for(n), kThreads, 0, static_cast<compute_t<T>*>(out.data), os,
                out.g.strides[dim], static_cast<const int64_t*>(index.data), ist, static_cast<const T*>(src.data),
                src.g, inner_of(src.g, dim), src.g.sizes[dim], n);
    });
  });
}

}  // namespace gradsleuth::cuda
