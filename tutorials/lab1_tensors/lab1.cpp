// Lab 1 starter code: tensors, views, strides and broadcasting.
// Replace each `throw` marked TODO with your code (README.md, Tasks 1.1-1.7),
// rebuild and grade:   ./run.sh lab check 1
#include "tutorials/lab1_tensors/lab1.h"

#include "core/ops.h"

namespace gradsleuth::lab1 {

// ---- a worked example ---------------------------------------------------------------
// A view is a new (shape, strides, offset) over the same storage. Here is the
// simplest one, a tensor seen as itself; your views in Tasks 1.3, 1.4 and 1.7
// follow the same pattern with different geometry:
//
//   Tensor same_view(const Tensor& t) {
//     return detail::make_alias(t, t.shape(), t.strides(), t.offset());
//   }
//
// detail::make_alias only builds the geometry you give it: it checks nothing,
// so a wrong stride or offset reads the wrong memory.

// TODO(lab 1, task 1): row-major strides. Walk the dims from the last to the
// first: the last dim has stride 1, and each earlier dim's stride is the next
// dim's stride times the next dim's size.
Strides contiguous_strides(const Shape& shape) {
  throw Error("lab 1", "not implemented: lab 1 task 1 (contiguous_strides in tutorials/lab1_tensors/lab1.cpp)");
}

// TODO(lab 1, task 2): offset + sum of index[d] * stride[d]. Check the index
// first (its length, and each entry against t.size(d)) and throw a gs::Error
// that names the bad entry, e.g. with GS_CHECK(cond, "lab1::storage_index", ...).
int64_t storage_index(const Tensor& t, const std::vector<int64_t>& index) {
  throw Error("lab 1", "not implemented: lab 1 task 2 (storage_index in tutorials/lab1_tensors/lab1.cpp)");
}

// TODO(lab 1, task 3): swap two entries of the shape and the same two entries of
// the strides; the offset does not change. Return detail::make_alias(...).
Tensor transpose_view(const Tensor& t, int64_t d0, int64_t d1) {
  throw Error("lab 1", "not implemented: lab 1 task 3 (transpose_view in tutorials/lab1_tensors/lab1.cpp)");
}

// TODO(lab 1, task 4): the size of `dim` becomes `length`, the strides stay, and
// the offset moves to the first kept element. Check the range first.
Tensor narrow_view(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  throw Error("lab 1", "not implemented: lab 1 task 4 (narrow_view in tutorials/lab1_tensors/lab1.cpp)");
}

// TODO(lab 1, task 5): allocate the result with gs::empty(t.shape()), then visit
// the indices in row-major order like an odometer (the last index turns fastest)
// and copy element by element. Read the source at storage_index(t, index)
// counted from the start of the storage:
//   const float* base = static_cast<const float*>(t.storage()->data());
// (t.data_ptr<float>() points at element 0 of t, which is already `offset` past it.)
Tensor contiguous_copy(const Tensor& t) {
  throw Error("lab 1", "not implemented: lab 1 task 5 (contiguous_copy in tutorials/lab1_tensors/lab1.cpp)");
}

// TODO(lab 1, task 6): align the shapes at the right; missing leading dims count
// as 1. Two sizes are compatible when they are equal or one of them is 1.
Shape broadcast_shape(const Shape& a, const Shape& b) {
  throw Error("lab 1", "not implemented: lab 1 task 6 (broadcast_shape in tutorials/lab1_tensors/lab1.cpp)");
}

// TODO(lab 1, task 7): align t's dims with the right end of `shape`. A dim of t
// that matches keeps its stride; a dim of size 1 that grows, and every new
// leading dim, gets stride 0 (all its indices read the same element).
Tensor broadcast_to(const Tensor& t, const Shape& shape) {
  throw Error("lab 1", "not implemented: lab 1 task 7 (broadcast_to in tutorials/lab1_tensors/lab1.cpp)");
}

}  // namespace gradsleuth::lab1
