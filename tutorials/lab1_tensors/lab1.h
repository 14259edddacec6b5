// Lab 1: tensors, views, strides and broadcasting (README.md in this folder).
// The functions you write, declared once for your code (lab1.cpp) and the
// reference solution (solution/lab1.cpp); the grader (../grader/grade_lab1.cpp)
// calls them through this header.
//
// Every tensor is a view onto a Storage (one flat buffer):
//   element (i0, ..., ik) lives at storage position  offset + i0 * stride0 + ... + ik * stridek
// Positions, offsets and strides are counted in elements, not bytes.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace gradsleuth::lab1 {

// Task 1.1: the strides of a contiguous (row-major, C-order) tensor of `shape`.
//   (2, 3, 4) -> (12, 4, 1)      (5) -> (1)      () -> ()
Strides contiguous_strides(const Shape& shape);

// Task 1.2: the storage position of element `index` of `t`:
//   t.offset() + sum_d index[d] * t.stride(d)
// Throws gs::Error when index has the wrong number of entries or an entry is
// outside [0, t.size(d)).
int64_t storage_index(const Tensor& t, const std::vector<int64_t>& index);

// Task 1.3: t with dims d0 and d1 swapped, as a view (no copy: shares t's storage).
// d0, d1 in [0, t.dim()).                      t (A, B, C), d0 = 0, d1 = 2 -> (C, B, A)
Tensor transpose_view(const Tensor& t, int64_t d0, int64_t d1);

// Task 1.4: entries start .. start + length - 1 of dim `dim`, as a view.
// Throws gs::Error when they are not all inside [0, t.size(dim)).
//                                              t (A, B), dim 1, start 1, length 2 -> (A, 2)
Tensor narrow_view(const Tensor& t, int64_t dim, int64_t start, int64_t length);

// Task 1.5: a contiguous float32 copy of a float32 tensor with any strides and
// offset, made element by element in row-major order.
Tensor contiguous_copy(const Tensor& t);

// Task 1.6: the shape that a and b broadcast to (NumPy's rule); gs::Error when they do not.
//   (3, 1) and (1, 4) -> (3, 4)      (2, 3, 4) and (4) -> (2, 3, 4)      (3) and (4) -> error
Shape broadcast_shape(const Shape& a, const Shape& b);

// Task 1.7: t seen as `shape` without copying: the broadcast dims get stride 0.
// gs::Error when t cannot broadcast to shape.    t (3, 1) -> shape (2, 3, 4): strides (0, s0, 0)
Tensor broadcast_to(const Tensor& t, const Shape& shape);

}  // namespace gradsleuth::lab1
