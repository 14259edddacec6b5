// Scalar: a C++ number passed to an op (x * 2, x.add_(0.5), gs::full(s, true), x.clamp(0, 1)).
//
// It remembers whether the number was written as a bool, an integer or a floating value,
// because PyTorch's promotion depends on it and an API taking only `double` cannot tell `2`
// from `2.0`: int64 * 2 stays int64 while int64 * 2.0 is float32 (docs/dtypes.md).
// It converts implicitly from every bool, integral and floating C++ type, so a call that
// passed a double before still compiles and keeps its meaning.
#pragma once
#include <cstdint>
#include <limits>
#include <ostream>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"

namespace gradsleuth {

class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Integral, Floating };

  Scalar(bool v) : kind_(Kind::Bool), i_(v ? 1 : 0) {}
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Integral), i_(static_cast<int64_t>(v)) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t))
      GS_CHECK(v <= static_cast<T>(std::numeric_limits<int64_t>::max()), "Scalar", "the unsigned value ", v,
               " does not fit int64, the widest integer dtype; pass it as a double if approximate is fine");
  }
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::Floating), d_(static_cast<double>(v)) {}

  Kind kind() const { return kind_; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_integral() const { return kind_ == Kind::Integral; }
  bool is_floating() const { return kind_ == Kind::Floating; }
  // The dtype that holds the value exactly: bool, int64 or float64. In promotion a floating
  // number counts as kDefaultFloat (result_type), as PyTorch's Python floats do.
  DType dtype() const { return kind_ == Kind::Bool ? kBool : kind_ == Kind::Integral ? kInt64 : kFloat64; }

  double to_double() const { return kind_ == Kind::Floating ? d_ : static_cast<double>(i_); }
  int64_t to_int64() const { return kind_ == Kind::Floating ? static_cast<int64_t>(d_) : i_; }  // truncates
  bool to_bool() const { return kind_ == Kind::Floating ? d_ != 0.0 : i_ != 0; }

  // -x keeps the kind, except that -true is the integer -1 (a bool has no negative).
  Scalar operator-() const { return kind_ == Kind::Floating ? Scalar(-d_) : Scalar(-i_); }

 private:
  Kind kind_;
  int64_t i_ = 0;   // Bool (0/1) and Integral
  double d_ = 0.0;  // Floating
};

// "true", "2", "2.0": a floating value always shows a decimal point, so messages tell 2 from 2.0.
std::ostream& operator<<(std::ostream& os, const Scalar& s);

// Checks that `value` survives conversion to `dtype` for an op that stores it as it is
// (full, fill_, masked_fill): a fractional, non-finite or out-of-range number into int64, a
// number other than 0/1 into bool, or a finite number beyond float32's range into float32 is
// an error naming `op` (PyTorch errors on the overflow and silently truncates the others).
void check_scalar_fits(const Scalar& value, DType dtype, const char* op);

}  // namespace gradsleuth
