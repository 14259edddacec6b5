// Shapes, strides and the broadcasting rule.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace gradsleuth {

// At most this many dimensions. A fixed bound keeps shapes inline (no heap
// allocation per tensor) and lets a shape travel by value into a CUDA kernel.
inline constexpr int kMaxDims = 8;

// A list of up to kMaxDims int64 values with the parts of std::vector's interface
// that shape code needs. Used for sizes, strides and dim lists.
class DimVector {
 public:
  using value_type = int64_t;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;

  DimVector() = default;
  DimVector(std::initializer_list<int64_t> v) { assign(v.begin(), v.end()); }
  DimVector(const std::vector<int64_t>& v) { assign(v.begin(), v.end()); }
  DimVector(size_t n, int64_t value) { resize(n, value); }
  template <class It>
  DimVector(It first, It last) {
    assign(first, last);
  }

  template <class It>
  void assign(It first, It last) {
    n_ = 0;
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t& operator[](size_t i) { return d_[i]; }
  int64_t operator[](size_t i) const { return d_[i]; }
  int64_t* data() { return d_.data(); }
  const int64_t* data() const { return d_.data(); }
  iterator begin() { return d_.data(); }
  iterator end() { return d_.data() + n_; }
  const_iterator begin() const { return d_.data(); }
  const_iterator end() const { return d_.data() + n_; }
  int64_t& back() { return d_[n_ - 1]; }
  int64_t back() const { return d_[n_ - 1]; }
  int64_t front() const { return d_[0]; }
  void push_back(int64_t v) {
    if (n_ >= kMaxDims) too_many();
    d_[n_++] = v;
  }
  void pop_back() { --n_; }
  void clear() { n_ = 0; }
  void resize(size_t n, int64_t value = 0) {
    if (n > static_cast<size_t>(kMaxDims)) too_many();
    for (size_t i = n_; i < n; ++i) d_[i] = value;
    n_ = static_cast<uint8_t>(n);
  }
  void insert(const_iterator pos, int64_t v) {
    size_t at = static_cast<size_t>(pos - begin());
    push_back(0);
    for (size_t i = n_ - 1; i > at; --i) d_[i] = d_[i - 1];
    d_[at] = v;
  }
  void erase(const_iterator pos) {
    for (size_t i = static_cast<size_t>(pos - begin()); i + 1 < n_; ++i) d_[i] = d_[i + 1];
    --n_;
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  bool operator==(const DimVector& o) const { return n_ == o.n_ && std::equal(begin(), end(), o.begin()); }
  bool operator!=(const DimVector& o) const { return !(*this == o); }

 private:
  [[noreturn]] static void too_many();
  std::array<int64_t, kMaxDims> d_{};
  uint8_t n_ = 0;
};

using Shape = DimVector;    // sizes, outermost first
using Strides = DimVector;  // in elements, not bytes
using Dims = DimVector;     // a list of dimension indices

// ---- checked size arithmetic ----------------------------------------------------
// Every product of sizes, strides x sizes, element count x element size and offset
// goes through these helpers: an overflow is a gs::Error naming `op`, never a wrap.
// The largest byte size of a tensor (and of any file section a loader allocates for):
// the signed address space, PTRDIFF_MAX = 2^63 - 1 on 64-bit hosts.
inline constexpr int64_t kMaxTensorBytes = INT64_MAX;
int64_t checked_mul(int64_t a, int64_t b, const char* op);
int64_t checked_add(int64_t a, int64_t b, const char* op);

// The number of elements, checked: the product of the sizes (with 0-sizes counted as 1,
// as strides need) must fit in int64, or a gs::Error names `op` and the shape.
int64_t numel_of(const Shape& s, const char* op = "shape");
// numel_of(s) * elem_size bytes, checked against kMaxTensorBytes; the error names
// `op`, the shape and the element size ("allocate" a tensor of 2^62 float32...).
int64_t checked_nbytes(const Shape& s, size_t elem_size, const char* op);
// Row-major strides: stride[d] = stride[d+1] * size[d+1], stride[last] = 1 (checked).
Strides contiguous_strides(const Shape& s);
std::string shape_str(const DimVector& s);  // "[2, 3]"
inline std::ostream& operator<<(std::ostream& os, const DimVector& s) { return os << shape_str(s); }

// NumPy broadcasting: align shapes at the right; each pair of sizes must be equal
// or one of them 1. (3,1) and (1,4) broadcast to (3,4). Throws naming `op`.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Wraps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

}  // namespace gradsleuth
