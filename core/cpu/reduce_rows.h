// The reductions' element rules, shared by the reference kernel (reduce.cpp) and the tuned
// one (fast/reduce.cpp): each op's identity and combine step, a row reduced to one value
// (float sums in float64 through accurate_sum.h), and the walk over (output, input) rows.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/cpu/accurate_sum.h"
#include "core/cpu/cpu_backend.h"
#include "core/elementwise_math.h"

namespace gradsleuth::cpu {

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
    if constexpr (std::is_same_v<T, bool>)
      return a || b;
    else
      return ew::wrap_add(a, b);  // an int64 sum wraps, like int64 add
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();  // NaN propagates
  }
  return op == ReduceOp::Max ? (a > b ? a : b) : (a < b ? a : b);
}

// n elements at stride `st` (bytes) reduced to one value as the accumulation type A: a
// floating sum is accurate_sum.h's float64 sum in fixed-order lanes (the same result at
// every SIMD width), and a float32 sum into A = double is not rounded to float on the way.
template <class T, class A>
A reduce_row_as(ReduceOp op, const char* p, int64_t n, int64_t st) {
  if constexpr (std::is_floating_point_v<T>) {
    if (op == ReduceOp::Sum) {
      if (st == sizeof(T)) return static_cast<A>(accurate_sum(reinterpret_cast<const T*>(p), n));
      return static_cast<A>(accurate_sum_strided<T>(p, n, st));
    }
  }
  T acc = reduce_identity<T>(op);
  for (int64_t i = 0; i < n; ++i) acc = combine<T>(op, acc, *reinterpret_cast<const T*>(p + i * st));
  return static_cast<A>(acc);
}

// The walk over `in` and `out` (which holds A) for a reduction over the dims marked in
// `reduced`: `out` viewed with the input's shape, stride 0 along the reduced dims. Sets every
// output to op's identity first.
template <class A>
StridedIter<2> reduce_iter(ReduceOp op, const Tensor& out, const Tensor& in, const bool* reduced) {
  Strides ost = out.strides();
  for (int64_t d = 0; d < in.dim(); ++d)
    if (reduced[d]) ost[d] = 0;
  const Tensor ov = detail::make_alias(out, in.shape(), ost, out.offset());
  A* o = static_cast<A*>(out.raw_data());
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = reduce_identity<A>(op);
  return StridedIter<2>(in.shape(), {&ov, &in});
}

// Folds input rows [b, e) of `it` into their outputs: a row whose output stays put (inner
// output stride 0) is reduced to one value first (by row_value); otherwise the output moves
// along the row (a sum over dim 0) and is combined element by element.
template <class T, class A, class RowValue = A (*)(ReduceOp, const char*, int64_t, int64_t)>
void fold_rows(ReduceOp op, const StridedIter<2>& it, int64_t b, int64_t e, RowValue row_value = &reduce_row_as<T, A>) {
  const int64_t inner = it.inner_size(), so = it.strides[0][it.ndim - 1], si = it.strides[1][it.ndim - 1];
  char* p[2];
  for (int64_t r = b; r < e; ++r) {
    it.row_ptrs(r, p);
    if (so == 0) {
      A& dst = *reinterpret_cast<A*>(p[0]);
      dst = combine<A>(op, dst, row_value(op, p[1], inner, si));
      continue;
    }
    for (int64_t i = 0; i < inner; ++i) {
      A& dst = *at<A>(p[0], i, so);
      dst = combine<A>(op, dst, static_cast<A>(*at<T>(p[1], i, si)));
    }
  }
}

}  // namespace gradsleuth::cpu
