// Shape arithmetic and the broadcasting rule.
#include "core/shape.h"

#include <sstream>

#include "core/error.h"

namespace gradsleuth {

void DimVector::too_many() {
  GS_FAIL("shape", "gradsleuth supports at most ", kMaxDims, " dimensions; reshape the tensor to fewer dims");
}

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Strides contiguous_strides(const Shape& s) {
  Strides st(s.size(), 1);
  for (int64_t d = static_cast<int64_t>(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * std::max<int64_t>(s[d + 1], 1);
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
             " cannot be broadcast: at dim ", static_cast<int64_t>(n - 1 - i), " (counting from the left of the "
             "broadcast shape) sizes ", da, " and ", db, " differ and neither is 1. Hint: reshape/unsqueeze one "
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
