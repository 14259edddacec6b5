// How a batched matmul operand's last two dims lie in memory, decided once for every backend (the CPU's
// BLAS route and CUDA's cuBLAS route use an operand without a copy exactly where this says they can).
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/tensor.h"

namespace gradsleuth::detail {

// Layout of the last two dims of a (B, rows, cols) operand: 0 = row-major, 1 = column-major,
// -1 = neither; ld its leading dimension.
inline int matmul_layout(const Tensor& t, int64_t rows, int64_t cols, int64_t& ld) {
  const int64_t sr = t.strides()[1], sc = t.strides()[2];
  if (sc == 1 || cols == 1) {
    ld = std::max<int64_t>(rows == 1 ? cols : sr, cols);
    return (rows == 1 || sr >= cols) ? 0 : -1;
  }
  if (sr == 1 || rows == 1) {
    ld = std::max<int64_t>(cols == 1 ? rows : sc, rows);
    return (cols == 1 || sc >= rows) ? 1 : -1;
  }
  return -1;
}

}  // namespace gradsleuth::detail
