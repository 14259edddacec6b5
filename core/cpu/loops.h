// Strided loops for the CPU backend: walk N same-shaped tensors with arbitrary
// (even zero) strides, handing the kernel one inner row at a time.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>

#include "core/tensor.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace gradsleuth::cpu {

// Below this many elements a loop runs on one thread: forking costs ~µs.
inline constexpr int64_t kParallelGrain = 1 << 15;

int num_threads();

// Runs fn(begin, end) over [0, n) split into chunks, in parallel when n >= grain.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
#ifdef _OPENMP
  if (n >= grain && num_threads() > 1) {
    const int nt = static_cast<int>(std::min<int64_t>(num_threads(), (n + grain - 1) / grain));
#pragma omp parallel num_threads(nt)
    {
      const int t = omp_get_thread_num(), T = omp_get_num_threads();
      const int64_t chunk = (n + T - 1) / T;
      const int64_t b = t * chunk, e = std::min<int64_t>(n, b + chunk);
      if (b < e) fn(b, e);
    }
    return;
  }
#endif
  if (n > 0) fn(int64_t{0}, n);
}

// N operands over one shape, strides in bytes, after merging dims that are
// laid out back to back in every operand and dropping size-1 dims.
template <int N>
struct StridedIter {
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];  // bytes
  char* base[N];

  StridedIter(const Shape& shape, const std::array<const Tensor*, N>& ts) {
    for (int k = 0; k < N; ++k) base[k] = static_cast<char*>(ts[k]->raw_data());
    // Copy non-trivial dims, innermost last.
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1) continue;
      sizes[ndim] = shape[d];
      for (int k = 0; k < N; ++k) strides[k][ndim] = ts[k]->strides()[d] * static_cast<int64_t>(ts[k]->element_size());
      ++ndim;
    }
    // Merge dim i into i+1 when every operand has stride[i] == stride[i+1] * size[i+1].
    int w = 0;
    for (int i = 0; i < ndim; ++i) {
      if (w > 0) {
        bool mergeable = true;
        for (int k = 0; k < N; ++k) mergeable &= strides[k][w - 1] == strides[k][i] * sizes[i];
        if (mergeable) {
          sizes[w - 1] *= sizes[i];
          for (int k = 0; k < N; ++k) strides[k][w - 1] = strides[k][i];
          continue;
        }
      }
      sizes[w] = sizes[i];
      for (int k = 0; k < N; ++k) strides[k][w] = strides[k][i];
      ++w;
    }
    ndim = w;
    if (ndim == 0) {  // a single element
      ndim = 1;
      sizes[0] = 1;
      for (int k = 0; k < N; ++k) strides[k][0] = 0;
    }
  }
  int64_t inner_size() const { return sizes[ndim - 1]; }
  int64_t outer_size() const {
    int64_t n = 1;
    for (int d = 0; d < ndim - 1; ++d) n *= sizes[d];
    return n;
  }
  // Pointers to the start of outer row `row`.
  void row_ptrs(int64_t row, char* ptrs[N]) const {
    for (int k = 0; k < N; ++k) ptrs[k] = base[k];
    for (int d = ndim - 2; d >= 0; --d) {
      int64_t i = row % sizes[d];
      row /= sizes[d];
      for (int k = 0; k < N; ++k) ptrs[k] += i * strides[k][d];
    }
  }
};

// Calls row(ptrs, n, inner_strides_bytes) for every inner row, splitting rows
// (or, for a single long row, the row itself) across threads.
template <int N, class F>
void for_each_row(const Shape& shape, const std::array<const Tensor*, N>& ts, F&& row) {
  StridedIter<N> it(shape, ts);
  const int64_t inner = it.inner_size(), outer = it.outer_size();
  int64_t st[N];
  for (int k = 0; k < N; ++k) st[k] = it.strides[k][it.ndim - 1];
  if (outer == 1) {
    parallel_for(inner, kParallelGrain, [&](int64_t b, int64_t e) {
      char* p[N];
      for (int k = 0; k < N; ++k) p[k] = it.base[k] + b * st[k];
      row(p, e - b, st);
    });
    return;
  }
  parallel_for(outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
    char* p[N];
    for (int64_t r = b; r < e; ++r) {
      it.row_ptrs(r, p);
      row(p, inner, st);
    }
  });
}

// Visits every coordinate of `shape` in row-major order: fn(const int64_t* idx).
template <class F>
void for_each_index(const Shape& shape, F&& fn) {
  const int nd = static_cast<int>(shape.size());
  int64_t total = numel_of(shape);
  int64_t idx[kMaxDims] = {0};
  for (int64_t n = 0; n < total; ++n) {
    fn(static_cast<const int64_t*>(idx));
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace gradsleuth::cpu
