// Element coordinates from a row-major flat index, and how messages print them: the
// gradient checker and the lab grader name the element where two tensors differ.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/shape.h"

namespace gradsleuth {

// Row-major flat index -> coordinates in `shape`: unravel(5, {2, 3}) = {1, 2}. A dim of
// size 0 gives coordinate 0.
inline std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> c(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    c[d] = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
  }
  return c;
}

// "(1, 2)"
inline std::string coords_str(const std::vector<int64_t>& c) {
  std::string s = "(";
  for (size_t i = 0; i < c.size(); ++i) s += (i ? ", " : "") + std::to_string(c[i]);
  return s + ")";
}

}  // namespace gradsleuth
