// CPU backend, elementwise binary ops and comparisons (the reference loops; elementwise.cpp
// has the rest of the family). The scalar formula of each op is core/elementwise_math.h's;
// each op gets its own loop. With tuned kernels on, the contiguous and broadcast-scalar rows
// go to fast/elementwise.cpp.
#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/fast.h"
#include "core/elementwise_math.h"

namespace gradsleuth::cpu {

namespace {

template <class T>
void binary_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  ew::with_binary_op(op, [&](auto op_c) {
    constexpr BinaryOp Op = decltype(op_c)::value;
    if constexpr (!ew::kBinaryComparison<Op>) {  // the comparisons go through compare_kernel
      for_each_row<3>(out.shape(), {&out, &a, &b}, [&](char** p, int64_t n, const int64_t* st) {
        for (int64_t i = 0; i < n; ++i)
          *at<T>(p[0], i, st[0]) = ew::binary_op<Op>(*at<T>(p[1], i, st[1]), *at<T>(p[2], i, st[2]));
      });
    }
  });
}

// A bool out of non-bool inputs for an op that is not a comparison: false everywhere.
void fill_false(const Tensor& out, const Tensor& a, const Tensor& b) {
  for_each_row<3>(out.shape(), {&out, &a, &b}, [&](char** p, int64_t n, const int64_t* st) {
    for (int64_t i = 0; i < n; ++i) *at<bool>(p[0], i, st[0]) = false;
  });
}

// out (bool) = a op b for a comparison; any other op gives false (fill_false, one loop for all).
template <class T>
void compare_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  if (!is_comparison(op)) {
    fill_false(out, a, b);
    return;
  }
  ew::with_binary_op(op, [&](auto op_c) {
    constexpr BinaryOp Op = decltype(op_c)::value;
    if constexpr (ew::kBinaryComparison<Op>) {
      for_each_row<3>(out.shape(), {&out, &a, &b}, [&](char** p, int64_t n, const int64_t* st) {
        for (int64_t i = 0; i < n; ++i)
          *at<bool>(p[0], i, st[0]) = ew::binary_op<Op>(*at<T>(p[1], i, st[1]), *at<T>(p[2], i, st[2]));
      });
    }
  });
}

}  // namespace

void CpuBackend::binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  if (cpu_fast_kernels() && fast::binary(op, out, a, b)) return;
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (is_comparison(op) || (out.dtype() == DType::Bool && a.dtype() != DType::Bool))
      compare_kernel<T>(op, out, a, b);
    else
      binary_kernel<T>(op, out, a, b);
  });
}

}  // namespace gradsleuth::cpu
