// CPU backend, elementwise unary ops (the reference loops; elementwise.cpp has the rest of the
// family). The scalar formula of each op is core/elementwise_math.h's; each op gets its own
// loop, so the formula inlines. With tuned kernels on, contiguous floating-point rows of
// exp/log/tanh/sigmoid/... go to fast/elementwise.cpp.
#include <type_traits>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/fast.h"
#include "core/elementwise_math.h"

namespace gradsleuth::cpu {

void CpuBackend::unary(UnaryOp op, const Tensor& out, const Tensor& in) {
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ew::with_unary_op(op, [&](auto op_c) {
      constexpr UnaryOp Op = decltype(op_c)::value;
      using R = decltype(ew::unary_op<Op>(T{}));  // T, or bool for a predicate
      for_each_row<2>(out.shape(), {&out, &in}, [&](char** p, int64_t n, const int64_t* st) {
        if (st[0] == sizeof(R) && st[1] == sizeof(T)) {
          R* o = reinterpret_cast<R*>(p[0]);
          const T* x = reinterpret_cast<const T*>(p[1]);
          if constexpr (std::is_same_v<R, T> && std::is_floating_point_v<T>)
            if (cpu_fast_kernels() && fast::unary_contiguous(Op, o, x, n)) return;
          for (int64_t k = 0; k < n; ++k) o[k] = ew::unary_op<Op>(x[k]);
          return;
        }
        for (int64_t k = 0; k < n; ++k) *at<R>(p[0], k, st[0]) = ew::unary_op<Op>(*at<T>(p[1], k, st[1]));
      });
    });
  });
}

}  // namespace gradsleuth::cpu
