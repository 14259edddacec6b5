// CPU backend, indexing: gather, scatter_add, index_select and index_add over
// arbitrary strides (int64 indices; ops/ has bounds-checked them).
#include "core/cpu/cpu_backend.h"
#include "core/elementwise_math.h"

namespace gradsleuth::cpu {

void CpuBackend::gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in.raw_data());
    const int64_t* ix = static_cast<const int64_t*>(index.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    int64_t k = 0;
    for_each_index(index.shape(), [&](const int64_t* idx) {
      int64_t xo = 0, io = 0;
      for (int64_t d = 0; d < in.dim(); ++d) {
        io += idx[d] * index.strides()[d];
        if (d != dim) xo += idx[d] * in.strides()[d];
      }
      o[k++] = x[xo + ix[io] * in.strides()[dim]];
    });
  });
}

void CpuBackend::scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.raw_data());
    const int64_t* ix = static_cast<const int64_t*>(index.raw_data());
    const T* s = static_cast<const T*>(src.raw_data());
    for_each_index(index.shape(), [&](const int64_t* idx) {
      int64_t oo = 0, io = 0, so = 0;
      for (int64_t d = 0; d < out.dim(); ++d) {
        io += idx[d] * index.strides()[d];
        so += idx[d] * src.strides()[d];
        if (d != dim) oo += idx[d] * out.strides()[d];
      }
      T& dst = o[oo + ix[io] * out.strides()[dim]];
      dst = ew::wrap_add(dst, s[so]);  // int64 wraps, like add
    });
  });
}

void CpuBackend::index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  // Copy slice in[..., index[j], ...] to out[..., j, ...] for each j.
  const int64_t* ix = static_cast<const int64_t*>(index.raw_data());
  const int64_t ist = index.dim() ? index.strides()[0] : 0;
  for (int64_t j = 0; j < index.numel(); ++j) copy(slice_raw(out, dim, j), slice_raw(in, dim, ix[j * ist]));
}

void CpuBackend::index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t* ix = static_cast<const int64_t*>(index.raw_data());
  const int64_t ist = index.dim() ? index.strides()[0] : 0;
  for (int64_t j = 0; j < index.numel(); ++j) {
    Tensor dst = slice_raw(out, dim, ix[j * ist]);
    binary(BinaryOp::Add, dst, dst, slice_raw(src, dim, j));
  }
}

}  // namespace gradsleuth::cpu
