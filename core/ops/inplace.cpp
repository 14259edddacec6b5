// In-place ops. Each one checks that autograd allows it, writes into the
// tensor's own storage, bumps the storage's version counter (so a tensor saved
// for backward notices — see SavedTensor) and, when recording, routes the
// tensor's history through a new node whose first input is the old history.
#include <cmath>

#include "core/ops/op_utils.h"

namespace gradsleuth {

namespace {

const char* dtype_constant(DType t) {
  switch (t) {
    case DType::Bool: return "gs::kBool";
    case DType::Int64: return "gs::kInt64";
    case DType::Float32: return "gs::kFloat32";
    case DType::Float16: return "gs::kFloat16";
    case DType::BFloat16: return "gs::kBFloat16";
    case DType::Float64: break;
  }
  return "gs::kFloat64";
}
std::string describe(const Tensor& o) { return o.str(); }
std::string describe(const Scalar& v) { return detail::str_cat("the number ", v); }
std::string describe(const std::string& what) { return what; }

// PyTorch's rule for in-place ops: the op computes in the dtype the out-of-place op would
// give (result_type), and that must be castable to self's dtype (can_cast): int64.add_(1.5)
// would silently truncate 1.5, so it is an error; float32.add_(float64 tensor) just rounds.
template <class Other>
void check_castable(const char* op, const Tensor& self, DType rt, const Other& other) {
  GS_CHECK(can_cast(rt, self.dtype()), op, "result type ", dtype_name(rt), " (of ", self.str(), " and ",
           describe(other), ") can't be cast to the desired output type ", dtype_name(self.dtype()),
           " of the in-place op. Use the out-of-place op (it returns ", dtype_name(rt),
           "), or convert the tensor first: x = x.to(", dtype_constant(rt), ")");
}

DType inplace_result_type(BinaryOp bop, const Tensor& self, const Tensor& o) {
  const DType rt = result_type(self, o);
  return bop == BinaryOp::Div && !is_floating(rt) ? kDefaultFloat : rt;  // true division
}

void inplace_binary(BinaryOp bop, Tensor& self, const Tensor& o, const char* op) {
  check_inplace(self, op);
  detail::check_no_overlap(self, op);
  detail::check_same_device(op, self, o);
  Shape s = broadcast_shapes(self.shape(), o.shape(), op);
  GS_CHECK(s == self.shape(), op, "the result of shape ", shape_str(s), " cannot be stored in place into ", self.str(),
           ": an in-place op cannot change the tensor's shape. Use the out-of-place op.");
  const DType rt = inplace_result_type(bop, self, o);
  check_castable(op, self, rt, o);
  // An operand that shares memory with self element for element (x.add_(x)) is fine:
  // elementwise kernels read each position before writing it. One that overlaps it
  // otherwise (y.mul_(y[0]), z.add_(z.t())) would be read after the kernel already
  // overwrote some of its elements, so it is copied first.
  Tensor src = o;
  if (o.storage() == self.storage() &&
      !(o.offset() == self.offset() && o.shape() == self.shape() && o.strides() == self.strides())) {
    src = empty(o.shape(), TensorOptions(o.dtype()).device(o.device()));
    backend_of(o).copy(src, o);
  }
  if (rt == self.dtype()) {
    backend_of(self).binary(bop, self, self, detail::prepare(src, detail::scalar_operand_dtype(src, rt), self.shape()));
  } else {
    // Computed in the result type, then cast: float32.add_(float64 y) rounds x + y once, as PyTorch does.
    Tensor tmp = empty(self.shape(), TensorOptions(rt).device(self.device()));
    backend_of(self).binary(bop, tmp, detail::prepare(self, rt, self.shape()), detail::prepare(src, rt, self.shape()));
    backend_of(self).copy(self, tmp);
  }
}

}  // namespace

Tensor& Tensor::add_(const Tensor& o, const Scalar& alpha) {
  detail::check_alpha("add_", *this, o, alpha);
  Tensor other = o;
  if (alpha.to_double() != 1.0) {
    NoGradGuard ng;
    other = o * alpha;
  }
  inplace_binary(BinaryOp::Add, *this, other, "add_");
  finish_inplace(*this, "add_", {&o}, [so = o.shape(), alpha](const Tensor& g, Node&) {
    return tensor_list{g, sum_to(g * alpha, so)};
  });
  notify_op("add_", {*this, o}, *this, o.shape() != shape() ? 2u : 0u, true);
  return *this;
}

Tensor& Tensor::sub_(const Tensor& o, const Scalar& alpha) {
  GS_CHECK(result_type(*this, o) != kBool, "sub_", "subtraction is not defined for bool tensors (", str(), ", ",
           o.str(), "); use a != b (logical xor), or convert with .to(gs::kInt64)");
  // Checked here too, so that the messages name sub_ rather than the add_ it runs as.
  detail::check_alpha("sub_", *this, o, alpha);
  check_castable("sub_", *this, inplace_result_type(BinaryOp::Sub, *this, o), o);
  return add_(o, -alpha);
}
Tensor& Tensor::add_(const Scalar& v) {
  check_castable("add_", *this, result_type(*this, v), v);
  return add_(detail::wrap_scalar(v, *this));
}
Tensor& Tensor::sub_(const Scalar& v) {
  check_castable("sub_", *this, result_type(*this, v), v);
  return sub_(detail::wrap_scalar(v, *this));
}

Tensor& Tensor::mul_(const Tensor& o) {
  // Both gradients need a value this op destroys (self's old value) or keeps (o).
  // clone(), not detach().clone(): the copy keeps self's history, so that with
  // create_graph the gradient of o can be differentiated w.r.t. self.
  Tensor old = needs_grad(o) ? clone() : Tensor();
  inplace_binary(BinaryOp::Mul, *this, o, "mul_");
  finish_inplace(*this, "mul_", {&o}, [so = SavedTensor(o, "mul_"), old, sho = o.shape()](const Tensor& g, Node& n) {
    return tensor_list{g * so.unpack(n), old.defined() ? sum_to(g * old, sho) : Tensor()};
  });
  notify_op("mul_", {*this, o}, *this, o.shape() != shape() ? 2u : 0u, true);
  return *this;
}
Tensor& Tensor::mul_(const Scalar& v) {
  check_castable("mul_", *this, result_type(*this, v), v);
  return mul_(detail::wrap_scalar(v, *this));
}

Tensor& Tensor::div_(const Tensor& o) {
  Tensor old = needs_grad(o) ? clone() : Tensor();  // with history, as in mul_
  inplace_binary(BinaryOp::Div, *this, o, "div_");
  finish_inplace(*this, "div_", {&o}, [so = SavedTensor(o, "div_"), old, sho = o.shape()](const Tensor& g, Node& n) {
    Tensor ov = so.unpack(n);
    return tensor_list{g / ov, old.defined() ? sum_to(detail::div_grad_b(g, old, ov), sho) : Tensor()};
  });
  notify_op("div_", {*this, o}, *this, o.shape() != shape() ? 2u : 0u, true);
  return *this;
}
Tensor& Tensor::div_(const Scalar& v) {
  const DType rt = result_type(*this, v);
  check_castable("div_", *this, is_floating(rt) ? rt : kDefaultFloat, v);  // true division
  return div_(detail::wrap_scalar(v, *this));
}

Tensor& Tensor::relu_() {
  check_inplace(*this, "relu_");
  detail::check_no_overlap(*this, "relu_");
  Tensor mask = needs_grad(*this) ? (detach() > 0.0) : Tensor();
  backend_of(*this).unary(UnaryOp::Relu, *this, *this);
  finish_inplace(*this, "relu_", {}, [mask](const Tensor& g, Node&) { return tensor_list{g * mask.to(g.dtype())}; });
  notify_op("relu_", {*this}, *this, 0, true);
  return *this;
}

Tensor& Tensor::clamp_(std::optional<Scalar> lo, std::optional<Scalar> hi) {
  check_inplace(*this, "clamp_");
  detail::check_no_overlap(*this, "clamp_");
  GS_CHECK(dtype() != kBool, "clamp_", "not defined for bool tensors");
  GS_CHECK(lo || hi, "clamp_", "at least one of min and max must be given");
  const double l = lo ? lo->to_double() : -INFINITY, h = hi ? hi->to_double() : INFINITY;
  GS_CHECK(!(l > h), "clamp_", "min ", *lo, " is greater than max ", *hi);
  // A bound can only change the result type by raising its category (int64 x, bound 0.5),
  // which is never castable back; so a castable clamp_ computes in self's dtype.
  check_castable("clamp_", *this, detail::clamp_result_type(*this, lo, hi),
                 detail::str_cat("the bounds min=", lo ? detail::str_cat(*lo) : "none",
                                 ", max=", hi ? detail::str_cat(*hi) : "none"));
  // float16/bfloat16 compare in float32 with the bounds unrounded, as clamp's backward does.
  Tensor d = is_reduced_float(dtype()) ? detach().to(kFloat32) : detach();
  Tensor mask = needs_grad(*this) ? logical_and(d >= l, d <= h) : Tensor();
  backend_of(*this).clamp(*this, *this, l, h);
  finish_inplace(*this, "clamp_", {}, [mask](const Tensor& g, Node&) { return tensor_list{g * mask.to(g.dtype())}; });
  notify_op("clamp_", {*this}, *this, 0, true);
  return *this;
}

Tensor& Tensor::fill_(const Scalar& v) {
  check_inplace(*this, "fill_");
  detail::check_no_overlap(*this, "fill_");
  check_scalar_fits(v, dtype(), "fill_");
  detail::fill_unchecked(*this, v);
  // The old value no longer matters: no gradient flows to it.
  finish_inplace(*this, "fill_", {}, [](const Tensor&, Node&) { return tensor_list{Tensor()}; });
  notify_op("fill_", {*this}, *this, 0, true);
  return *this;
}

Tensor& Tensor::zero_() {
  check_inplace(*this, "zero_");
  detail::check_no_overlap(*this, "zero_");
  backend_of(*this).fill(*this, 0.0);
  finish_inplace(*this, "zero_", {}, [](const Tensor&, Node&) { return tensor_list{Tensor()}; });
  notify_op("zero_", {*this}, *this, 0, true);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  detail::check_no_overlap(*this, "copy_");
  Shape s = broadcast_shapes(shape(), src.shape(), "copy_");
  GS_CHECK(s == shape(), "copy_", "source ", src.str(), " does not broadcast to the destination ", str());
  Tensor from = src;
  if (src.device() != device()) from = src.detach().to(device());
  // copy() casts; a source overlapping the destination is copied out first.
  if (from.storage() == storage()) from = from.detach().clone();
  backend_of(*this).copy(*this, detail::prepare(from, from.dtype(), shape()));
  finish_inplace(*this, "copy_", {&src},
                 [ss = src.shape(), sd = src.dtype(), dev = src.device()](const Tensor& g, Node&) {
                   Tensor gs = sum_to(g, ss);
                   if (gs.dtype() != sd) gs = gs.to(sd);
                   if (gs.device() != dev) gs = gs.to(dev);
                   return tensor_list{Tensor(), gs};
                 });
  notify_op("copy_", {*this, src}, *this, src.shape() != shape() ? 2u : 0u, true);
  return *this;
}

Tensor& Tensor::masked_fill_(const Tensor& mask, const Scalar& value) {
  check_inplace(*this, "masked_fill_");
  detail::check_no_overlap(*this, "masked_fill_");
  GS_CHECK(mask.dtype() == kBool, "masked_fill_", "mask must be a bool tensor, got ", mask.str());
  Tensor m = detail::prepare(mask, kBool, broadcast_shapes(shape(), mask.shape(), "masked_fill_"));
  GS_CHECK(m.shape() == shape(), "masked_fill_", "mask ", mask.str(), " must broadcast to ", str());
  check_scalar_fits(value, dtype(), "masked_fill_");  // the tensor keeps its dtype: 2.5 into int64 would truncate
  Tensor fillv = empty({}, TensorOptions(dtype()).device(device()));
  detail::fill_unchecked(fillv, value);
  fillv = detail::prepare(fillv, dtype(), shape());
  backend_of(*this).where(*this, m, fillv, *this);
  finish_inplace(*this, "masked_fill_", {}, [m = mask.detach()](const Tensor& g, Node&) {
    return tensor_list{where(m, zeros_like(g.detach()), g)};
  });
  notify_op("masked_fill_", {*this, mask}, *this, 0, true);
  return *this;
}

Tensor& operator+=(Tensor& a, const Tensor& b) { return a.add_(b); }
Tensor& operator-=(Tensor& a, const Tensor& b) { return a.sub_(b); }
Tensor& operator*=(Tensor& a, const Tensor& b) { return a.mul_(b); }
Tensor& operator/=(Tensor& a, const Tensor& b) { return a.div_(b); }
Tensor& operator+=(Tensor& a, const Scalar& b) { return a.add_(b); }
Tensor& operator-=(Tensor& a, const Scalar& b) { return a.sub_(b); }
Tensor& operator*=(Tensor& a, const Scalar& b) { return a.mul_(b); }
Tensor& operator/=(Tensor& a, const Scalar& b) { return a.div_(b); }

}  // namespace gradsleuth
