// Tuned reductions (fast.h): sum/max/min with threads and vectorised rows. The reference is
// core/cpu/reduce.cpp's serial walk over reduce_rows.h's rows (fold_rows), which this one
// splits across threads and speeds up where a row allows it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/eigen_maps.h"
#include "core/cpu/fast/fast.h"
#include "core/cpu/reduce_rows.h"

namespace gradsleuth::cpu::fast {

namespace {

// A row reduced to one value: contiguous float max/min through Eigen's vectorised
// maxCoeff/minCoeff (exact: a max or min rounds nothing), else the reference row.
template <class T, class A>
A row_value(ReduceOp op, const char* p, int64_t n, int64_t st) {
  if constexpr (std::is_floating_point_v<T>) {
    if (op != ReduceOp::Sum && st == sizeof(T)) {
      ECArr<T> a(reinterpret_cast<const T*>(p), n);
      if (a.isNaN().any()) return std::numeric_limits<A>::quiet_NaN();
      return static_cast<A>(op == ReduceOp::Max ? a.maxCoeff() : a.minCoeff());
    }
  }
  return reduce_row_as<T, A>(op, p, n, st);
}

// fold_rows with row_value, and a sum whose output moves along the row (a sum over dim 0)
// through plain restrict pointers (out is a fresh buffer, so they cannot overlap): the
// compiler vectorises it, 6x faster than the strided loop.
template <class T, class A>
void fold_rows_fast(ReduceOp op, const StridedIter<2>& it, int64_t b, int64_t e) {
  const int64_t inner = it.inner_size(), so = it.strides[0][it.ndim - 1], si = it.strides[1][it.ndim - 1];
  if (!(op == ReduceOp::Sum && so == sizeof(A) && si == sizeof(T)))
    return fold_rows<T, A>(op, it, b, e, &row_value<T, A>);
  char* p[2];
  for (int64_t r = b; r < e; ++r) {
    it.row_ptrs(r, p);
    A* __restrict o = reinterpret_cast<A*>(p[0]);
    const T* __restrict x = reinterpret_cast<const T*>(p[1]);
    for (int64_t i = 0; i < inner; ++i) o[i] = combine<A>(op, o[i], static_cast<A>(x[i]));
  }
}

template <class T, class A>
void reduce_kernel(ReduceOp op, const Tensor& out, const Tensor& in, const bool* reduced) {
  const StridedIter<2> it = reduce_iter<A>(op, out, in, reduced);
  const int64_t inner = it.inner_size(), outer = it.outer_size(), si = it.strides[1][it.ndim - 1];
  A* o0 = static_cast<A*>(out.raw_data());
  if (out.numel() == 1 && outer == 1 && inner >= kParallelGrain && num_threads() > 1) {
    // One long row: partial results per thread, then combined in thread order. (An array,
    // not std::vector<A>: threads writing neighbouring bits of a vector<bool> would race.)
    const int nt = num_threads();
    std::unique_ptr<A[]> partial(new A[nt]);
    std::fill_n(partial.get(), nt, reduce_identity<A>(op));
    parallel_for(inner, kParallelGrain, [&](int64_t b, int64_t e) {
#ifdef _OPENMP
      const int t = omp_get_thread_num();
#else
      const int t = 0;
#endif
      partial[t] = row_value<T, A>(op, it.base[1] + b * si, e - b, si);
    });
    for (int t = 0; t < nt; ++t) o0[0] = combine<A>(op, o0[0], partial[t]);
    return;
  }
  // Rows run in parallel only when they write disjoint outputs: each row reduces to its own
  // output (all reduced dims innermost). (Splitting the columns of a sum over dim 0 across 2
  // threads was 2-3x slower than the vectorised serial loop, measured on 2 cores:
  // docs/benchmarks.md.)
  bool rows_disjoint = it.strides[0][it.ndim - 1] == 0;
  for (int d = 0; d < it.ndim - 1 && rows_disjoint; ++d) rows_disjoint = it.strides[0][d] != 0;
  if (rows_disjoint)
    parallel_for(outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1)),
                 [&](int64_t b, int64_t e) { fold_rows_fast<T, A>(op, it, b, e); });
  else
    fold_rows_fast<T, A>(op, it, 0, outer);
}

}  // namespace

bool reduce(ReduceOp op, const Tensor& out, const Tensor& in, const bool* reduced) {
  bool done = false;
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (out.dtype() == in.dtype()) {
      reduce_kernel<T, T>(op, out, in, reduced);
      done = true;
    } else if constexpr (std::is_same_v<T, float>) {
      if (out.dtype() == DType::Float64) {  // a float32 sum accumulating in float64 (CpuBackend::reduce)
        reduce_kernel<float, double>(op, out, in, reduced);
        done = true;
      }
    }
  });
  return done;
}

}  // namespace gradsleuth::cpu::fast
