// CPU backend, reductions: sum/max/min over any set of dims (float32 sums in
// float64 through accurate_sum.h) and argmax/argmin along one dim.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu/accurate_sum.h"
#include "core/cpu/cpu_backend.h"
#include "core/elementwise_math.h"

namespace gradsleuth::cpu {

namespace {

// ---- reductions ---------------------------------------------------------------
template <class T>
T reduce_identity(ReduceOp op) {
  if (op == ReduceOp::Sum) return T(0);
  if constexpr (std::is_floating_point_v<T>) {
    return op == ReduceOp::Max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  } else {
    return op == ReduceOp::Max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  }
}

template <class T>
T combine(ReduceOp op, T a, T b) {
  if (op == ReduceOp::Sum) {
    if constexpr (std::is_same_v<T, bool>) return a || b;
    else return ew::wrap_add(a, b);  // an int64 sum wraps, like int64 add
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();  // NaN propagates
  }
  return op == ReduceOp::Max ? (a > b ? a : b) : (a < b ? a : b);
}

// The float64 sum of n floating values at stride `st` (bytes): accurate_sum.h's
// fixed-order lanes, so the result is the same at every SIMD width.
template <class T>
double sum_row(const char* p, int64_t n, int64_t st) {
  if (st == sizeof(T)) return accurate_sum(reinterpret_cast<const T*>(p), n);
  return accurate_sum_strided<T>(p, n, st);
}

// Reduces n elements at stride `st` (bytes) to one value.
template <class T>
T reduce_row(ReduceOp op, const char* p, int64_t n, int64_t st) {
  if constexpr (std::is_floating_point_v<T>) {
    if (op == ReduceOp::Sum) return static_cast<T>(sum_row<T>(p, n, st));
    if (st == sizeof(T)) {
      ECArr<T> a(reinterpret_cast<const T*>(p), n);
      if (a.isNaN().any()) return std::numeric_limits<T>::quiet_NaN();
      return op == ReduceOp::Max ? a.maxCoeff() : a.minCoeff();
    }
  }
  T acc = reduce_identity<T>(op);
  for (int64_t i = 0; i < n; ++i) acc = combine<T>(op, acc, *reinterpret_cast<const T*>(p + i * st));
  return acc;
}

// reduce_row as the accumulation type A: a float32 sum stays in float64 (no
// rounding to float between a row's sum and the output it is added to).
template <class T, class A>
A reduce_row_as(ReduceOp op, const char* p, int64_t n, int64_t st) {
  if constexpr (std::is_floating_point_v<T>) {
    if (op == ReduceOp::Sum) return static_cast<A>(sum_row<T>(p, n, st));
  }
  return static_cast<A>(reduce_row<T>(op, p, n, st));
}

// `in` holds T; `out` holds A, the type the results accumulate in (see reduce()).
template <class T, class A = T>
void reduce_kernel(ReduceOp op, const Tensor& out, const Tensor& in_any, const bool* reduced) {
  const Tensor in = in_any;
  const int64_t nd = in.dim();
  // View `out` with the input's shape: stride 0 along reduced dims.
  Strides ost = out.strides();
  for (int64_t d = 0; d < nd; ++d)
    if (reduced[d]) ost[d] = 0;
  Tensor ov = detail::make_alias(out, in.shape(), ost, out.offset());
  A* o0 = static_cast<A*>(out.raw_data());
  const int64_t on = out.numel();
  for (int64_t i = 0; i < on; ++i) o0[i] = reduce_identity<A>(op);

  StridedIter<2> it(in.shape(), {&ov, &in});
  const int64_t inner = it.inner_size(), outer = it.outer_size();
  const int64_t so = it.strides[0][it.ndim - 1], si = it.strides[1][it.ndim - 1];
  // Folds one input row into the output row it maps to (so != 0: the output
  // moves along the inner dim, e.g. a sum over dim 0).
  auto add_row = [&](char* const p[2]) {
    if (op == ReduceOp::Sum && so == sizeof(A) && si == sizeof(T)) {
      // Performance: plain restrict pointers (out is a fresh buffer, so they
      // cannot overlap) let the compiler vectorise this: 6x faster (sum dim 0).
      A* __restrict o = reinterpret_cast<A*>(p[0]);
      const T* __restrict x = reinterpret_cast<const T*>(p[1]);
      for (int64_t i = 0; i < inner; ++i) o[i] = combine<A>(op, o[i], static_cast<A>(x[i]));
      return;
    }
    for (int64_t i = 0; i < inner; ++i) {
      A& dst = *at<A>(p[0], i, so);
      dst = combine<A>(op, dst, static_cast<A>(*at<T>(p[1], i, si)));
    }
  };
  auto do_rows = [&](int64_t b, int64_t e) {
    char* p[2];
    for (int64_t r = b; r < e; ++r) {
      it.row_ptrs(r, p);
      if (so == 0) {
        A& dst = *reinterpret_cast<A*>(p[0]);
        dst = combine<A>(op, dst, reduce_row_as<T, A>(op, p[1], inner, si));
      } else {
        add_row(p);
      }
    }
  };
  if (on == 1 && outer == 1 && inner >= kParallelGrain && num_threads() > 1) {
    // One long contiguous-ish row: partial results per thread, then combine.
    std::vector<A> partial(num_threads(), reduce_identity<A>(op));
    parallel_for(inner, kParallelGrain, [&](int64_t b, int64_t e) {
#ifdef _OPENMP
      int t = omp_get_thread_num();
#else
      int t = 0;
#endif
      partial[t] = reduce_row_as<T, A>(op, it.base[1] + b * si, e - b, si);
    });
    for (A v : partial) o0[0] = combine<A>(op, o0[0], v);
    return;
  }
  // Rows write disjoint outputs only when the output does not move along the
  // outer dims that are reduced; keep it simple: parallel only for so == 0 with
  // distinct output per row (all reduced dims innermost). (Splitting the columns
  // of a sum over dim 0 across 2 threads was 2-3x slower than the vectorised
  // serial loop in add_row, measured on 2 cores: docs/benchmarks.md.)
  bool rows_disjoint = so == 0;
  for (int d = 0; d < it.ndim - 1 && rows_disjoint; ++d) rows_disjoint = it.strides[0][d] != 0;
  if (rows_disjoint)
    parallel_for(outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1)), do_rows);
  else
    do_rows(0, outer);
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
          if (std::isnan(bv)) better = false;  // first NaN wins, as in PyTorch
          else if (std::isnan(v)) better = true;
        }
        if (better) { bv = v; best = i; }
      }
      o[k++] = best;
    });
  });
}

}  // namespace gradsleuth::cpu
