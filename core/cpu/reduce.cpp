// CPU backend, reductions: sum/max/min over any set of dims (float32 sums in
// float64 through accurate_sum.h) and argmax/argmin along one dim. With tuned kernels
// on, sum/max/min go to fast/reduce.cpp (threads, vectorised rows).
#include <cmath>
#include <type_traits>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/fast.h"
#include "core/cpu/reduce_rows.h"

namespace gradsleuth::cpu {

namespace {

// `in` holds T; `out` holds A, the type the results accumulate in (see reduce()).
template <class T, class A = T>
void reduce_kernel(ReduceOp op, const Tensor& out, const Tensor& in, const bool* reduced) {
  if (cpu_fast_kernels() && fast::reduce(op, out, in, reduced)) return;
  const StridedIter<2> it = reduce_iter<A>(op, out, in, reduced);
  fold_rows<T, A>(op, it, 0, it.outer_size());
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, const Tensor& out, const Tensor& in, const bool* reduced) {
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) {
      if (op == ReduceOp::Sum) {
        // float32 sums accumulate in float64: along an outer dim each element
        // is added one by one, and 0.1f added 2^18 times in float is 0.25% off.
        Tensor acc = empty(out.shape(), kFloat64);
        reduce_kernel<float, double>(op, acc, in, reduced);
        copy(out, acc);
        return;
      }
    }
    reduce_kernel<T>(op, out, in, reduced);
  });
}

void CpuBackend::arg_reduce(bool is_max, const Tensor& out, const Tensor& in, int64_t dim) {
  // Walk every output position; scan along `dim` with its stride.
  const int64_t n = in.shape()[dim], st = in.strides()[dim];
  Shape oshape = in.shape();
  oshape[dim] = 1;
  int64_t* o = static_cast<int64_t*>(out.raw_data());
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* base = static_cast<const T*>(in.raw_data());
    int64_t k = 0;
    for_each_index(oshape, [&](const int64_t* idx) {
      int64_t off = 0;
      for (int64_t d = 0; d < in.dim(); ++d) off += idx[d] * in.strides()[d];
      int64_t best = 0;
      T bv = base[off];
      for (int64_t i = 1; i < n; ++i) {
        T v = base[off + i * st];
        bool better = is_max ? v > bv : v < bv;
        if constexpr (std::is_floating_point_v<T>) {
          if (std::isnan(bv))
            better = false;  // first NaN wins, as in PyTorch
          else if (std::isnan(v))
            better = true;
        }
        if (better) {
          bv = v;
          best = i;
        }
      }
      o[k++] = best;
    });
  });
}

}  // namespace gradsleuth::cpu
