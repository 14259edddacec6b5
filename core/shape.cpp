// Shape arithmetic and the broadcasting rule.
#include "core/shape.h"

#include <sstream>

#include "core/error.h"

namespace gradsleuth {

void DimVector::too_many() {
  GS_FAIL("shape", "gradsleuth supports at most ", kMaxDims, " dimensions; reshape the tensor to fewer dims");
}

int64_t checked_mul(int64_t a, int64_t b, const char* op) {
  int64_t r;
  GS_CHECK(!__builtin_mul_overflow(a, b, &r), op, "size arithmetic overflows 64 bits: ", a, " x ", b,
           " does not fit in int64. A size, stride or byte count this large cannot be addressed; check the "
           "shape (or the file) it came from.");
  return r;
}

int64_t checked_add(int64_t a, int64_t b, const char* op) {
  int64_t r;
  GS_CHECK(!__builtin_add_overflow(a, b, &r), op, "size arithmetic overflows 64 bits: ", a, " + ", b,
           " does not fit in int64");
  return r;
}

int64_t numel_of(const Shape& s, const char* op) {
  // Sizes are multiplied as max(size, 1): the strides of a shape with a zero
  // somewhere still need the product of the other sizes to fit.
  int64_t n = 1;
  bool zero = false;
  for (int64_t d : s) {
    zero |= d == 0;
    if (__builtin_mul_overflow(n, d == 0 ? int64_t{1} : d, &n)) [[unlikely]]
      GS_FAIL(op, "shape ", shape_str(s),
              " has more elements than a 64-bit size can count (the product of its "
              "sizes overflows int64); no tensor this large can exist. Check the sizes (a wrapped negative "
              "number? a corrupted file?).");
  }
  return zero ? 0 : n;
}

int64_t checked_nbytes(const Shape& s, size_t elem_size, const char* op) {
  const int64_t n = numel_of(s, op);
  int64_t bytes;
  if (__builtin_mul_overflow(n, static_cast<int64_t>(elem_size), &bytes) || bytes > kMaxTensorBytes) [[unlikely]]
    GS_FAIL(op, "shape ", shape_str(s), " (", n, " elements of ", elem_size,
            " bytes) needs more bytes than the "
            "address space holds (at most ",
            kMaxTensorBytes,
            "); no tensor this large can be allocated. "
            "Check the sizes.");
  return bytes;
}

Strides contiguous_strides(const Shape& s) {
  Strides st(s.size(), 1);
  for (int64_t d = static_cast<int64_t>(s.size()) - 2; d >= 0; --d)
    if (__builtin_mul_overflow(st[d + 1], std::max<int64_t>(s[d + 1], 1), &st[d])) [[unlikely]]
      GS_FAIL("shape", "the strides of shape ", shape_str(s), " overflow int64; no tensor this large can exist");
  return st;
}

std::string shape_str(const DimVector& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n, 1);
  for (size_t i = 0; i < n; ++i) {
    // Align at the right: i counts from the last dim.
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    GS_CHECK(da == db || da == 1 || db == 1, op, "shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast: at dim ", static_cast<int64_t>(n - 1 - i),
             " (counting from the left of the "
             "broadcast shape) sizes ",
             da, " and ", db,
             " differ and neither is 1. Hint: reshape/unsqueeze one "
             "operand so that matching dims line up from the right.");
    out[n - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  GS_CHECK(dim >= lo && dim <= hi, op, "dimension ", dim, " is out of range for a tensor with ", ndim,
           " dims (expected a dim in [", lo, ", ", hi, "])");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

}  // namespace gradsleuth
