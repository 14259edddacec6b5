// Lab 1 reference solution (built only with -DGRADSLEUTH_LAB_SOLUTIONS=ON).
// Tensors, views, strides and broadcasting; see ../README.md.
#include "tutorials/lab1_tensors/lab1.h"

#include <string>

#include "core/ops.h"

namespace gradsleuth::lab1 {

// Task 1.1
Strides contiguous_strides(const Shape& shape) {
  Strides st(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * shape[d + 1];
  return st;
}

// Task 1.2
int64_t storage_index(const Tensor& t, const std::vector<int64_t>& index) {
  GS_CHECK(static_cast<int64_t>(index.size()) == t.dim(), "lab1::storage_index", "index has ", index.size(),
           " entries, but ", t.str(), " has ", t.dim(), " dims");
  int64_t pos = t.offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    GS_CHECK(index[d] >= 0 && index[d] < t.size(d), "lab1::storage_index", "index ", index[d],
             " is out of range for dim ", d, " of size ", t.size(d), " in ", t.str());
    pos += index[d] * t.stride(d);
  }
  return pos;
}

// Task 1.3
Tensor transpose_view(const Tensor& t, int64_t d0, int64_t d1) {
  GS_CHECK(d0 >= 0 && d0 < t.dim() && d1 >= 0 && d1 < t.dim(), "lab1::transpose_view", "dims ", d0, " and ", d1,
           " must be in [0, ", t.dim(), ") for ", t.str());
  Shape shape = t.shape();
  Strides strides = t.strides();
  std::swap(shape[d0], shape[d1]);
  std::swap(strides[d0], strides[d1]);
  return detail::make_alias(t, shape, strides, t.offset());
}

// Task 1.4
Tensor narrow_view(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  GS_CHECK(dim >= 0 && dim < t.dim(), "lab1::narrow_view", "dim ", dim, " is out of range for ", t.str());
  GS_CHECK(start >= 0 && length >= 0 && start + length <= t.size(dim), "lab1::narrow_view", "entries ", start, "..",
           start + length - 1, " are outside dim ", dim, " of size ", t.size(dim), " in ", t.str());
  Shape shape = t.shape();
  shape[dim] = length;
  return detail::make_alias(t, shape, t.strides(), t.offset() + start * t.stride(dim));
}

// Task 1.5
Tensor contiguous_copy(const Tensor& t) {
  GS_CHECK(t.dtype() == kFloat32, "lab1::contiguous_copy", "expects float32, got ", t.str());
  Tensor out = empty(t.shape());
  const float* base = static_cast<const float*>(t.storage()->data());
  float* dst = out.data_ptr<float>();
  std::vector<int64_t> index(t.dim(), 0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    dst[i] = base[storage_index(t, index)];
    for (int64_t d = t.dim() - 1; d >= 0; --d) {  // the odometer: carry into the next dim on overflow
      if (++index[d] < t.size(d)) break;
      index[d] = 0;
    }
  }
  return out;
}

// Task 1.6
Shape broadcast_shape(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n, 1);
  for (size_t i = 0; i < n; ++i) {  // i counts from the right
    const int64_t sa = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t sb = i < b.size() ? b[b.size() - 1 - i] : 1;
    GS_CHECK(sa == sb || sa == 1 || sb == 1, "lab1::broadcast_shape", "shapes ", shape_str(a), " and ", shape_str(b),
             " do not broadcast: sizes ", sa, " and ", sb, " at dim ", n - 1 - i, " (counted in the result)");
    out[n - 1 - i] = sa == 1 ? sb : sa;
  }
  return out;
}

// Task 1.7
Tensor broadcast_to(const Tensor& t, const Shape& shape) {
  GS_CHECK(static_cast<int64_t>(shape.size()) >= t.dim(), "lab1::broadcast_to", "cannot broadcast ", t.str(),
           " to fewer dims ", shape_str(shape));
  const int64_t lead = static_cast<int64_t>(shape.size()) - t.dim();
  Strides strides(shape.size(), 0);
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t want = shape[lead + d];
    GS_CHECK(t.size(d) == want || t.size(d) == 1, "lab1::broadcast_to", "cannot broadcast ", t.str(), " to ",
             shape_str(shape), ": dim ", d, " has size ", t.size(d), ", not 1 or ", want);
    strides[lead + d] = t.size(d) == want ? t.stride(d) : 0;
  }
  return detail::make_alias(t, shape, strides, t.offset());
}

}  // namespace gradsleuth::lab1
