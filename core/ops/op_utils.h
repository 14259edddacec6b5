// Helpers shared by the op implementations (not part of the public API).
#pragma once
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/backend.h"
#include "core/observer.h"
#include "core/ops.h"

namespace gradsleuth::detail {

// Both operands must live on one device.
inline void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  GS_CHECK(a.device() == b.device(), op, "expected all tensors on the same device, but got ", a.str(), " on ",
           a.device().str(), " and ", b.str(), " on ", b.device().str(), ". Move one with .to(device) first.");
}

// The number `s` as the 0-dim operand of a tensor-scalar op with `like`, in the op's dtype
// result_type(like, s). A 0-dim tensor of that dtype promotes with `like` to that dtype
// again (it is never below like's dtype), so the tensor-tensor op computes exactly what
// PyTorch's tensor-scalar op does: int64 * 2 in int64, int64 * 2.0 in float32, float32 * 2.5
// in float32 (and int64 / 2 in float32 by div's own true-division rule).
// Beside a float16/bfloat16 tensor the number is a float32 0-dim tensor marked as a wrapped
// number instead: it promotes as the number it is (the result stays float16), and the arithmetic
// ops take it unrounded (scalar_operand_dtype): x * 65536.0 scales x in float32 and rounds once,
// as PyTorch does, where a float16 65536 would be inf.
inline Tensor wrap_scalar(const Scalar& s, const Tensor& like) {
  // Unchecked: float32 * 1e300 is inf, as in PyTorch (arithmetic may overflow; storing may not).
  const DType rt = result_type(like, s);
  Tensor t = empty({}, TensorOptions(is_reduced_float(rt) ? kFloat32 : rt).device(like.device()));
  fill_unchecked(t, s);
  if (is_reduced_float(rt)) t.impl().wrapped_number = true;
  return t;
}

// The dtype operand `t` enters a kernel in for an arithmetic op (add, sub, mul, div, pow)
// computing in `ct`: ct, except that a float32/float64 0-dim operand of a float16/bfloat16 op
// enters as float32, unrounded (the CPU computes 16-bit ops in float32; PyTorch too reads a
// 0-dim operand at its own precision there).
inline DType scalar_operand_dtype(const Tensor& t, DType ct) {
  return is_reduced_float(ct) && t.dim() == 0 && (t.dtype() == kFloat32 || t.dtype() == kFloat64) ? kFloat32 : ct;
}

// The dtype clamp computes in: the bounds take part in promotion, so clamp(int64 x, 0.5)
// is float32 (ops/elementwise.cpp).
DType clamp_result_type(const Tensor& x, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi);

// add/sub's alpha: floating only for a floating result, bool only for a bool one (PyTorch).
void check_alpha(const char* op, const Tensor& a, const Tensor& b, const Scalar& alpha);

// t cast to `dt` and broadcast (stride 0) to `shape`, without autograd: kernel input.
inline Tensor prepare(const Tensor& t, DType dt, const Shape& shape) {
  Tensor c = t;
  if (c.dtype() != dt) {
    Tensor tmp = empty(c.shape(), TensorOptions(dt).device(c.device()));
    backend_of(c).copy(tmp, c);
    c = tmp;
  }
  if (c.shape() == shape) return c;
  const int64_t lead = static_cast<int64_t>(shape.size()) - c.dim();
  Strides st(shape.size(), 0);
  for (int64_t i = 0; i < c.dim(); ++i) st[lead + i] = c.shape()[i] == shape[lead + i] ? c.strides()[i] : 0;
  return make_alias(c, shape, st, c.offset());
}

// Views and copies for use inside ops: no autograd, no observer events.
inline Tensor transpose_raw(const Tensor& t, int64_t d0, int64_t d1) {
  Shape s = t.shape();
  Strides st = t.strides();
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  return make_alias(t, s, st, t.offset());
}
inline Tensor contiguous_raw(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = empty(t.shape(), TensorOptions(t.dtype()).device(t.device()));
  backend_of(t).copy(out, t);
  return out;
}

// A writeable tensor must not have two indices on one element (expanded views).
inline void check_no_overlap(const Tensor& t, const char* op) {
  for (int64_t d = 0; d < t.dim(); ++d)
    GS_CHECK(t.strides()[d] != 0 || t.shape()[d] <= 1, op, "cannot write in place into ", t.str(),
             ": it is an expanded view whose dim ", d,
             " repeats one element (stride 0). Call contiguous() or "
             "clone() first.");
}

// Recorded helpers for backward formulas (ops/index.cpp).
Tensor scatter_add_grad(const Tensor& g, const Tensor& index, int64_t dim, const Shape& shape);
Tensor index_add_grad(const Tensor& g, const Tensor& index, int64_t dim, const Shape& shape);
// d(a/b)/db = -g a / b^2 without spurious overflow (ops/elementwise.cpp; div and div_).
Tensor div_grad_b(const Tensor& g, const Tensor& a, const Tensor& b);

// Wraps a backward that is written with raw kernels and so is not itself
// differentiable: under create_graph (grad mode on while the backward runs) it
// raises, naming the op, instead of returning a first derivative with no graph
// behind it, which would make every second derivative through the op silently
// miss its term. Such an op is registered with double_backward = false.
template <class F>
auto first_order_only(const char* op, F f) {
  return [op, f = std::move(f)](const Tensor& g, Node& n) {
    GS_CHECK(!GradMode::is_enabled(), op, "second derivatives are not supported for '", op,
             "': its backward is not "
             "itself differentiable, so backward(create_graph=true) through it would give a higher-order gradient "
             "without its term. Compute first derivatives without create_graph, or replace '",
             op,
             "' by ops that "
             "support double backward ('gradsleuth gradcheck --all-ops' lists them).");
    return f(g, n);
  };
}

// Sums a float mask (0/1) in dtype of g: gradients of piecewise ops.
inline Tensor mask_as(const Tensor& bool_mask, const Tensor& g) { return bool_mask.to(g.dtype()); }

}  // namespace gradsleuth::detail
