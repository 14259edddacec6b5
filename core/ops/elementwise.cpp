// Elementwise ops with NumPy broadcasting. Each op: forward through the
// backend, then (if an input needs a gradient) its backward right below it.
// Backward formulas are written with differentiable ops, so create_graph gives
// second derivatives for free.
#include <cmath>

#include "core/ops/op_utils.h"

namespace gradsleuth {

using detail::prepare;

// ---- broadcasting ----------------------------------------------------------------
Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const int64_t lead = x.dim() - static_cast<int64_t>(shape.size());
  GS_CHECK(lead >= 0, "sum_to", "cannot reduce ", x.str(), " to the larger shape ", shape_str(shape));
  Dims dims;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && x.shape()[d] != 1)) dims.push_back(d);
  Tensor s = dims.empty() ? x : sum(x, dims, /*keepdim=*/true);
  return s.reshape(shape);
}

// Forward of a binary op: broadcast, promote (result_type), run the kernel, tell observers.
// A C++ number reaches here as the 0-dim tensor of detail::wrap_scalar, already in the
// tensor-scalar result type, so this one decision covers both forms.
static Tensor binary_forward(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  detail::check_same_device(name, a, b);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  DType ct = result_type(a, b);
  if (op == BinaryOp::Div && !is_floating(ct)) ct = kDefaultFloat;  // true division
  if (op == BinaryOp::LogicalAnd || op == BinaryOp::LogicalOr) ct = promote_types(ct, kBool);
  GS_CHECK(!(ct == kBool && (op == BinaryOp::Sub || op == BinaryOp::Pow)), name, "not defined for bool tensors (",
           a.str(), ", ", b.str(),
           "); convert with .to(gs::kInt64) or use "
           "logical ops");
  Tensor out = empty(shape, TensorOptions(is_comparison(op) ? kBool : ct).device(a.device()));
  const bool arithmetic =
      op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul || op == BinaryOp::Div || op == BinaryOp::Pow;
  backend_of(a).binary(op, out, prepare(a, arithmetic ? detail::scalar_operand_dtype(a, ct) : ct, shape),
                       prepare(b, arithmetic ? detail::scalar_operand_dtype(b, ct) : ct, shape));
  if (observers_active()) {
    const uint32_t mask = (a.shape() != shape ? 1u : 0u) | (b.shape() != shape ? 2u : 0u);
    notify_op(name, {a, b}, out, mask);
  }
  return out;
}

// A floating op (float_only: exp, log, sigmoid, ...) of an int64 or bool tensor computes in
// float32, as PyTorch's do: exp(int64) is a float32 result, neither an error nor exp
// truncated back to integers. (Integer tensors never require grad, so no backward needs it.)
static Tensor unary_forward(UnaryOp op, const char* name, const Tensor& x, bool float_only = true) {
  const bool pred =
      op == UnaryOp::IsNan || op == UnaryOp::IsInf || op == UnaryOp::IsFinite || op == UnaryOp::LogicalNot;
  const Tensor in = float_only && !x.is_floating_point() ? prepare(x, kDefaultFloat, x.shape()) : x;
  Tensor out = empty(x.shape(), TensorOptions(pred ? kBool : in.dtype()).device(x.device()));
  if (op == UnaryOp::LogicalNot && x.dtype() != kBool) {
    backend_of(x).unary(UnaryOp::LogicalNot, out, prepare(x, kBool, x.shape()));
  } else {
    backend_of(x).unary(op, out, in);
  }
  notify_op(name, {x}, out);
  return out;
}

// ---- arithmetic ------------------------------------------------------------------
// PyTorch's alpha rules: a floating alpha cannot scale an integral result (it would be
// truncated) and a bool alpha only scales a bool one.
void detail::check_alpha(const char* name, const Tensor& a, const Tensor& b, const Scalar& alpha) {
  const DType rt = result_type(a, b);
  GS_CHECK(!(alpha.is_floating() && !is_floating(rt)), name, "alpha ", alpha, " is floating point but ", a.str(),
           " and ", b.str(), " give a result of dtype ", dtype_name(rt),
           "; pass an integral alpha or convert an "
           "input with .to(gs::kFloat32)");
  GS_CHECK(!(alpha.is_bool() && rt != kBool), name, "a bool alpha (", alpha, ") only scales bool results, and ",
           a.str(), " and ", b.str(), " give ", dtype_name(rt), "; pass alpha as a number");
}

// b * alpha for add/sub. The product of a wrapped number (op_utils.h) is still a number.
static Tensor times_alpha(const Tensor& b, const Scalar& alpha) {
  Tensor r = mul(b, detail::wrap_scalar(alpha, b));
  if (b.impl().wrapped_number) r.impl().wrapped_number = true;
  return r;
}

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  detail::check_alpha("add", a, b, alpha);
  const bool one = alpha.to_double() == 1.0;
  Tensor out =
      one ? binary_forward(BinaryOp::Add, "add", a, b) : binary_forward(BinaryOp::Add, "add", a, times_alpha(b, alpha));
  if (needs_grad(a, b)) {
    // d(a + alpha b) = g, alpha g; broadcast dims are summed away.
    record("add", out, {&a, &b}, [sa = a.shape(), sb = b.shape(), alpha, one](const Tensor& g, Node&) {
      return tensor_list{sum_to(g, sa), sum_to(one ? g : g * alpha, sb)};
    });
  }
  return out;
}
Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha) { return add(a, detail::wrap_scalar(b, a), alpha); }

Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  detail::check_alpha("sub", a, b, alpha);
  const bool one = alpha.to_double() == 1.0;
  Tensor out =
      one ? binary_forward(BinaryOp::Sub, "sub", a, b) : binary_forward(BinaryOp::Sub, "sub", a, times_alpha(b, alpha));
  if (needs_grad(a, b)) {
    record("sub", out, {&a, &b}, [sa = a.shape(), sb = b.shape(), alpha](const Tensor& g, Node&) {
      return tensor_list{sum_to(g, sa), sum_to(g * -alpha, sb)};
    });
  }
  return out;
}
Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha) { return sub(a, detail::wrap_scalar(b, a), alpha); }

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::Mul, "mul", a, b);
  if (needs_grad(a, b)) {
    // d(ab) = g b, g a: each input's gradient needs the other input.
    SavedTensor sa(b.requires_grad() ? a : Tensor(), "mul"), sb(a.requires_grad() ? b : Tensor(), "mul");
    record("mul", out, {&a, &b},
           [sa, sb, ra = a.requires_grad(), rb = b.requires_grad(), sha = a.shape(), shb = b.shape()](const Tensor& g,
                                                                                                      Node& n) {
             return tensor_list{ra ? sum_to(g * sb.unpack(n), sha) : Tensor(),
                                rb ? sum_to(g * sa.unpack(n), shb) : Tensor()};
           });
  }
  return out;
}
Tensor mul(const Tensor& a, const Scalar& b) { return mul(a, detail::wrap_scalar(b, a)); }

// -g a / b^2 without a spurious overflow or underflow (b^2 overflows for |b| past the square root
// of the max where the gradient need not): for |b| >= 1 as -g ((a / b) / b); for |b| < 1 each
// step grows towards the result, -((g a) / b) / b, but for |a| < 1, where g a could lose digits
// below the smallest normal, -(g (a / b)) / b.
Tensor detail::div_grad_b(const Tensor& g, const Tensor& a, const Tensor& b) {
  Tensor q = a / b;
  const Tensor big_b = abs(b.detach()) >= 1.0, big_a = abs(a.detach()) >= 1.0;
  return where(big_b, -g * (q / b), where(big_a, -((g * a) / b) / b, -(g * q) / b));
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::Div, "div", a, b);
  if (needs_grad(a, b)) {
    // d(a/b) = g / b,  -g a / b^2 (detail::div_grad_b)
    SavedTensor sa(b.requires_grad() ? a : Tensor(), "div"), sb(b, "div");
    record("div", out, {&a, &b},
           [sa, sb, ra = a.requires_grad(), rb = b.requires_grad(), sha = a.shape(), shb = b.shape()](const Tensor& g,
                                                                                                      Node& n) {
             Tensor bv = sb.unpack(n);
             return tensor_list{ra ? sum_to(g / bv, sha) : Tensor(),
                                rb ? sum_to(detail::div_grad_b(g, sa.unpack(n), bv), shb) : Tensor()};
           });
  }
  return out;
}
Tensor div(const Tensor& a, const Scalar& b) { return div(a, detail::wrap_scalar(b, a)); }

// The smallest element of an int64 tensor, read on the host (for a CUDA tensor: reduced on
// its device, then one number copied back), without autograd or observer events.
static int64_t min_int64(const Tensor& b) {
  Tensor m = empty(Shape(static_cast<size_t>(b.dim()), 1), TensorOptions(kInt64).device(b.device()));
  if (b.dim() == 0) {
    backend_of(b).copy(m, b);
  } else {
    const std::vector<char> all(static_cast<size_t>(b.dim()), 1);
    backend_of(b).reduce(ReduceOp::Min, m, b, reinterpret_cast<const bool*>(all.data()));
  }
  int64_t v = 0;
  backend_of(m).copy_to_host(&v, m.unsafe_data(), sizeof v);
  return v;
}

Tensor pow(const Tensor& a, const Tensor& b) {
  if (autocast_enabled()) [[unlikely]] {
    detail::AutocastScope ac("pow");
    return pow(ac.cast(a), ac.cast(b));
  }
  // An integral result has no 2^-1: PyTorch refuses it rather than give 0. Checked on the
  // host before the kernel is launched, on every backend.
  if (result_type(a, b) == kInt64 && b.dtype() == kInt64 && b.numel() > 0) {
    const int64_t lowest = min_int64(b);
    GS_CHECK(lowest >= 0, "pow", "integers to negative integer powers are not allowed: ", a.str(), " ** ", b.str(),
             " (an exponent is ", lowest, "). Convert first: a.to(gs::kFloat32).pow(b)");
  }
  Tensor out = binary_forward(BinaryOp::Pow, "pow", a, b);
  if (needs_grad(a, b)) {
    // d(a^b) = g b a^(b-1),  g a^b log(a), with PyTorch's conventions at the edges:
    //   d/da is 0 wherever b == 0 (a^0 = 1 is constant in a, even at a = 0, where
    //     b a^(b-1) would be 0 * inf = NaN);
    //   d/db is 0 where a == 0 and b >= 0 (a^b log a -> 0 as a -> 0+), and
    //     a^b log(a) = inf * -inf = -inf where a == 0 and b < 0.
    SavedTensor sa(a, "pow"), sb(b, "pow"), so(out, "pow", true);
    record("pow", out, {&a, &b},
           [sa, sb, so, ra = a.requires_grad(), rb = b.requires_grad(), sha = a.shape(), shb = b.shape()](
               const Tensor& g, Node& n) {
             Tensor av = sa.unpack(n), bv = sb.unpack(n);
             Tensor ga, gb;
             const Tensor zero = zeros({}, TensorOptions(g.dtype()).device(g.device()));
             if (ra) {
               // b a^(b-1) as (b / a) a^b, from the forward's a^b: a^(b-1) is inf for a near the
               // dtype's smallest values and b near 0, where the derivative is moderate, and b - 1
               // rounds for large b. At a == 0, or where that is not finite, b a^(b-1).
               Tensor a0 = av.detach() == 0.0;
               Tensor safe_a = where(a0, ones_like(av.detach()), av);
               Tensor d = g * (bv / safe_a) * so.unpack(n);
               d = where(logical_or(a0, logical_not(isfinite(d.detach()))), g * bv * pow(av, bv - 1.0), d);
               ga = sum_to(where(bv.detach() == 0.0, zero, d), sha);
             }
             if (rb) {
               Tensor at_zero = logical_and(av.detach() == 0.0, bv.detach() >= 0.0);
               gb = sum_to(where(at_zero, zero, g * so.unpack(n) * log(av)), shb);
             }
             return tensor_list{ga, gb};
           });
  }
  return out;
}

Tensor pow(const Tensor& a, const Scalar& exponent) {
  if (autocast_enabled()) [[unlikely]] {
    detail::AutocastScope ac("pow");
    return pow(ac.cast(a), exponent);
  }
  // An integral result has no 2^-1: PyTorch refuses it rather than give 0.
  GS_CHECK(is_floating(result_type(a, exponent)) || exponent.to_int64() >= 0, "pow",
           "integers to negative integer "
           "powers are not allowed: ",
           a.str(), " ** ", exponent, ". Convert first: x.to(gs::kFloat32).pow(", exponent, ")");
  Tensor out = binary_forward(BinaryOp::Pow, "pow", a, detail::wrap_scalar(exponent, a));
  if (needs_grad(a)) {
    const double e = exponent.to_double();
    record("pow", out, {&a}, [sa = SavedTensor(a, "pow"), e](const Tensor& g, Node& n) {
      Tensor av = sa.unpack(n);
      return tensor_list{e == 0.0 ? zeros_like(g) : g * e * pow(av, e - 1.0)};
    });
  }
  return out;
}

// maximum/minimum: the gradient goes to the larger (smaller) input; ties split it evenly.
static Tensor extremum(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(op, name, a, b);
  if (needs_grad(a, b)) {
    record(name, out, {&a, &b},
           [sa = SavedTensor(a, name), sb = SavedTensor(b, name), op, sha = a.shape(), shb = b.shape()](const Tensor& g,
                                                                                                        Node& n) {
             Tensor av = sa.unpack(n).detach(), bv = sb.unpack(n).detach();
             // a's share is 1 unless b wins (or ties: half); b's likewise. Where either is NaN
             // neither wins nor ties, so both get the whole gradient (as in PyTorch) and the
             // NaN is not hidden from either input.
             Tensor a_loses = (op == BinaryOp::Maximum ? lt(av, bv) : gt(av, bv)).to(g.dtype());
             Tensor b_loses = (op == BinaryOp::Maximum ? gt(av, bv) : lt(av, bv)).to(g.dtype());
             Tensor tie = eq(av, bv).to(g.dtype()) * 0.5;
             return tensor_list{sum_to(g * (1.0 - a_loses - tie), sha), sum_to(g * (1.0 - b_loses - tie), shb)};
           });
  }
  return out;
}
Tensor maximum(const Tensor& a, const Tensor& b) { return extremum(BinaryOp::Maximum, "maximum", a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum(BinaryOp::Minimum, "minimum", a, b); }
Tensor maximum(const Tensor& a, const Scalar& b) { return maximum(a, detail::wrap_scalar(b, a)); }
Tensor minimum(const Tensor& a, const Scalar& b) { return minimum(a, detail::wrap_scalar(b, a)); }

// ---- comparisons and logic (bool results, no gradient) ---------------------------
Tensor eq(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::Eq, "eq", a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::Ne, "ne", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::Lt, "lt", a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::Le, "le", a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::Gt, "gt", a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::Ge, "ge", a, b); }
Tensor eq(const Tensor& a, const Scalar& b) { return eq(a, detail::wrap_scalar(b, a)); }
Tensor ne(const Tensor& a, const Scalar& b) { return ne(a, detail::wrap_scalar(b, a)); }
Tensor lt(const Tensor& a, const Scalar& b) { return lt(a, detail::wrap_scalar(b, a)); }
Tensor le(const Tensor& a, const Scalar& b) { return le(a, detail::wrap_scalar(b, a)); }
Tensor gt(const Tensor& a, const Scalar& b) { return gt(a, detail::wrap_scalar(b, a)); }
Tensor ge(const Tensor& a, const Scalar& b) { return ge(a, detail::wrap_scalar(b, a)); }
Tensor logical_and(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::LogicalAnd, "logical_and", a.to(kBool), b.to(kBool));
  return out;
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return binary_forward(BinaryOp::LogicalOr, "logical_or", a.to(kBool), b.to(kBool));
}
Tensor logical_not(const Tensor& a) { return unary_forward(UnaryOp::LogicalNot, "logical_not", a, false); }
Tensor isnan(const Tensor& x) { return unary_forward(UnaryOp::IsNan, "isnan", x, false); }
Tensor isinf(const Tensor& x) { return unary_forward(UnaryOp::IsInf, "isinf", x, false); }
Tensor isfinite(const Tensor& x) { return unary_forward(UnaryOp::IsFinite, "isfinite", x, false); }

// ---- unary math -------------------------------------------------------------------
Tensor neg(const Tensor& x) {
  GS_CHECK(x.dtype() != kBool, "neg", "negation is not defined for bool tensors; use logical_not");
  Tensor out = unary_forward(UnaryOp::Neg, "neg", x, false);
  if (needs_grad(x)) record("neg", out, {&x}, [](const Tensor& g, Node&) { return tensor_list{-g}; });
  return out;
}

Tensor exp(const Tensor& x) {
  if (autocast_enabled()) [[unlikely]] {
    detail::AutocastScope ac("exp");
    return exp(ac.cast(x));
  }
  Tensor y = unary_forward(UnaryOp::Exp, "exp", x);
  if (needs_grad(x))  // dy/dx = y
    record("exp", y, {&x},
           [sy = SavedTensor(y, "exp", true)](const Tensor& g, Node& n) { return tensor_list{g * sy.unpack(n)}; });
  return y;
}

Tensor log(const Tensor& x) {
  if (autocast_enabled()) [[unlikely]] {
    detail::AutocastScope ac("log");
    return log(ac.cast(x));
  }
  Tensor y = unary_forward(UnaryOp::Log, "log", x);
  if (needs_grad(x))  // dy/dx = 1/x
    record("log", y, {&x},
           [sx = SavedTensor(x, "log")](const Tensor& g, Node& n) { return tensor_list{g / sx.unpack(n)}; });
  return y;
}

Tensor sqrt(const Tensor& x) {
  Tensor y = unary_forward(UnaryOp::Sqrt, "sqrt", x);
  if (needs_grad(x))  // dy/dx = 1 / (2 sqrt(x))
    record("sqrt", y, {&x}, [sy = SavedTensor(y, "sqrt", true)](const Tensor& g, Node& n) {
      return tensor_list{g / (sy.unpack(n) * 2.0)};
    });
  return y;
}

Tensor rsqrt(const Tensor& x) {
  Tensor y = unary_forward(UnaryOp::Rsqrt, "rsqrt", x);
  if (needs_grad(x))  // dy/dx = -x^(-3/2) / 2 = -y^3 / 2, g first: y^3 alone overflows where g y^3 need not
    record("rsqrt", y, {&x}, [sy = SavedTensor(y, "rsqrt", true)](const Tensor& g, Node& n) {
      Tensor yv = sy.unpack(n);
      return tensor_list{g * -0.5 * yv * yv * yv};
    });
  return y;
}

Tensor abs(const Tensor& x) {
  Tensor y = unary_forward(UnaryOp::Abs, "abs", x, false);
  if (needs_grad(x))  // dy/dx = sign(x) (0 at 0)
    record("abs", y, {&x}, [sx = SavedTensor(x, "abs")](const Tensor& g, Node& n) {
      return tensor_list{g * sign(sx.unpack(n).detach())};
    });
  return y;
}

Tensor sign(const Tensor& x) { return unary_forward(UnaryOp::Sign, "sign", x, false); }

Tensor square(const Tensor& x) {
  // square is pow(x, 2), and bool ** 2 is int64 (result_type(bool, 2)), as in PyTorch.
  if (x.dtype() == kBool) return square(prepare(x, result_type(x, 2), x.shape()));
  Tensor y = unary_forward(UnaryOp::Square, "square", x, false);
  if (needs_grad(x))
    record("square", y, {&x},
           [sx = SavedTensor(x, "square")](const Tensor& g, Node& n) { return tensor_list{g * sx.unpack(n) * 2.0}; });
  return y;
}

Tensor reciprocal(const Tensor& x) {
  Tensor y = unary_forward(UnaryOp::Reciprocal, "reciprocal", x);
  if (needs_grad(x))  // d(1/x) = -1/x^2 = -y^2
    record("reciprocal", y, {&x}, [sy = SavedTensor(y, "reciprocal", true)](const Tensor& g, Node& n) {
      Tensor yv = sy.unpack(n);
      return tensor_list{-g * yv * yv};
    });
  return y;
}

Tensor erf(const Tensor& x) {
  Tensor y = unary_forward(UnaryOp::Erf, "erf", x);
  if (needs_grad(x))  // d erf(x) = 2/sqrt(pi) exp(-x^2)
    record("erf", y, {&x}, [sx = SavedTensor(x, "erf")](const Tensor& g, Node& n) {
      Tensor xv = sx.unpack(n);
      return tensor_list{g * exp(-(xv * xv)) * (2.0 / std::sqrt(M_PI))};
    });
  return y;
}

Tensor log1p(const Tensor& x) {
  Tensor y = unary_forward(UnaryOp::Log1p, "log1p", x);
  if (needs_grad(x))
    record("log1p", y, {&x},
           [sx = SavedTensor(x, "log1p")](const Tensor& g, Node& n) { return tensor_list{g / (sx.unpack(n) + 1.0)}; });
  return y;
}

// exp(x) - 1 without the cancellation of exp(x) - 1.0 for small |x| (the kernel calls expm1).
Tensor expm1(const Tensor& x) {
  Tensor y = unary_forward(UnaryOp::Expm1, "expm1", x);
  if (needs_grad(x))  // dy/dx = exp(x) = y + 1
    record("expm1", y, {&x}, [sy = SavedTensor(y, "expm1", true)](const Tensor& g, Node& n) {
      return tensor_list{g * (sy.unpack(n) + 1.0)};
    });
  return y;
}

Tensor sin(const Tensor& x) {
  Tensor y = unary_forward(UnaryOp::Sin, "sin", x);
  if (needs_grad(x))
    record("sin", y, {&x},
           [sx = SavedTensor(x, "sin")](const Tensor& g, Node& n) { return tensor_list{g * cos(sx.unpack(n))}; });
  return y;
}

Tensor cos(const Tensor& x) {
  Tensor y = unary_forward(UnaryOp::Cos, "cos", x);
  if (needs_grad(x))
    record("cos", y, {&x},
           [sx = SavedTensor(x, "cos")](const Tensor& g, Node& n) { return tensor_list{-g * sin(sx.unpack(n))}; });
  return y;
}

DType detail::clamp_result_type(const Tensor& x, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  PromotionOperand ops[3] = {promotion_operand(x)};
  size_t n = 1;
  if (lo) ops[n++] = promotion_operand(*lo);
  if (hi) ops[n++] = promotion_operand(*hi);
  return result_type(ops, n);
}

Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  GS_CHECK(x.dtype() != kBool, "clamp", "not defined for bool tensors");
  GS_CHECK(lo || hi, "clamp", "at least one of min and max must be given");
  const double l = lo ? lo->to_double() : -INFINITY, h = hi ? hi->to_double() : INFINITY;
  GS_CHECK(!(l > h), "clamp", "min ", *lo, " is greater than max ", *hi);
  const DType ct = detail::clamp_result_type(x, lo, hi);
  Tensor y = empty(x.shape(), TensorOptions(ct).device(x.device()));
  backend_of(x).clamp(y, prepare(x, ct, x.shape()), l, h);
  notify_op("clamp", {x}, y);
  if (needs_grad(x))  // gradient passes where lo <= x <= hi
    record("clamp", y, {&x}, [sx = SavedTensor(x, "clamp"), l, h](const Tensor& g, Node& n) {
      Tensor xv = sx.unpack(n).detach();
      return tensor_list{
          g * logical_and(ge(xv, detail::wrap_scalar(l, xv)), le(xv, detail::wrap_scalar(h, xv))).to(g.dtype())};
    });
  return y;
}

// ---- activations ------------------------------------------------------------------
Tensor relu(const Tensor& x) {
  Tensor y = unary_forward(UnaryOp::Relu, "relu", x, false);
  if (needs_grad(x))  // gradient passes where x is not <= 0: x > 0, and NaN (PyTorch's threshold_backward)
    record("relu", y, {&x}, [sx = SavedTensor(x, "relu")](const Tensor& g, Node& n) {
      // A 16-bit gradient meets x as saved (16 bits too): the backend's kernel computes from both in
      // float32 and rounds once, as the widened formula would, without a float32 copy of x.
      Tensor xv = (is_reduced_float(g.dtype()) ? sx.unpack_as_saved(n) : sx.unpack(n)).detach();
      // One fused pass (the backend's threshold_backward): x <= 0 ? 0 : g, a select, so an
      // infinite g at x <= 0 gives 0, not NaN, as PyTorch. Under create_graph (g needs a
      // gradient) the same formula through where(), which is differentiable in g.
      if (!needs_grad(g) && g.shape() == xv.shape() && g.dtype() == xv.dtype() && g.device() == xv.device()) {
        Tensor gx = empty(g.shape(), TensorOptions(g.dtype()).device(g.device()));
        backend_of(g).threshold_backward(gx, g, xv, 0.0);
        return tensor_list{gx};
      }
      Tensor zero = zeros({}, TensorOptions(g.dtype()).device(g.device()));
      return tensor_list{where(xv <= 0.0, zero, g)};
    });
  return y;
}

Tensor leaky_relu(const Tensor& x, double slope) {
  if (!x.is_floating_point()) return leaky_relu(prepare(x, kDefaultFloat, x.shape()), slope);
  Tensor pos = x.detach() > 0.0;
  Tensor y = where(pos, x, x * slope);
  return y;
}

Tensor sigmoid(const Tensor& x) {
  Tensor y = unary_forward(UnaryOp::Sigmoid, "sigmoid", x);
  if (needs_grad(x))  // dy/dx = y (1 - y)
    record("sigmoid", y, {&x}, [sy = SavedTensor(y, "sigmoid", true)](const Tensor& g, Node& n) {
      Tensor yv = sy.unpack(n);
      return tensor_list{g * yv * (1.0 - yv)};
    });
  return y;
}

Tensor tanh(const Tensor& x) {
  Tensor y = unary_forward(UnaryOp::Tanh, "tanh", x);
  if (needs_grad(x))  // dy/dx = 1 - y^2
    record("tanh", y, {&x}, [sy = SavedTensor(y, "tanh", true)](const Tensor& g, Node& n) {
      Tensor yv = sy.unpack(n);
      return tensor_list{g * (1.0 - yv * yv)};
    });
  return y;
}

// gelu(x) = x * Phi(x) = x/2 (1 + erf(x / sqrt 2)), built from differentiable ops.
// An integer x computes in float32, like the other floating ops.
// gelu(x) = x Phi(x), with Phi(x) = (1 + erf(x / sqrt 2)) / 2 taken first (x * 2 would overflow
// near the dtype's max); float16/bfloat16 compute in float32 and round once. The backward is
// written out, g (Phi(x) + x phi(x)): composed, its inner gradients overflow near the max.
Tensor gelu(const Tensor& x) {
  if (!x.is_floating_point()) return gelu(prepare(x, kDefaultFloat, x.shape()));
  Tensor y;
  {
    NoGradGuard ng;
    const Tensor xf = is_reduced_float(x.dtype()) ? x.to(kFloat32) : x;
    y = xf * ((erf(xf * M_SQRT1_2) + 1.0) * 0.5);
    if (y.dtype() != x.dtype()) y = y.to(x.dtype());
  }
  if (needs_grad(x))
    record("gelu", y, {&x}, [sx = SavedTensor(x, "gelu")](const Tensor& g, Node& n) {
      Tensor xv = sx.unpack(n);
      Tensor cdf = (erf(xv * M_SQRT1_2) + 1.0) * 0.5;
      // x * x is inf past the square root of the max, where exp gives phi = 0 exactly.
      Tensor pdf = exp(xv * xv * -0.5) * 0.3989422804014327;  // 1 / sqrt(2 pi)
      return tensor_list{g * (cdf + xv * pdf)};
    });
  return y;
}

// softplus(x) = 1/beta log(1 + exp(beta x)), linear above the threshold; the value
// is computed as relu(z) + log1p(exp(-|z|)) so that exp never overflows. The
// backward is written out (dy/dx = sigmoid(beta x)): differentiating that
// composition would give relu'(0) + abs'(0) terms, i.e. 0 instead of 0.5 at x = 0.
Tensor softplus(const Tensor& x, double beta, double threshold) {
  detail::AutocastSuspend no_autocast;  // not in the autocast table: its inner exp runs in x's dtype
  if (!x.is_floating_point()) return softplus(prepare(x, kDefaultFloat, x.shape()), beta, threshold);
  Tensor y;
  {
    NoGradGuard ng;
    Tensor z = x * beta;
    y = where(z > threshold, x, (relu(z) + log1p(exp(-abs(z)))) / beta);
  }
  if (needs_grad(x))
    record("softplus", y, {&x}, [sx = SavedTensor(x, "softplus"), beta, threshold](const Tensor& g, Node& n) {
      Tensor z = sx.unpack(n) * beta;
      return tensor_list{where(z.detach() > threshold, g, g * sigmoid(z))};
    });
  return y;
}

// ---- selection ----------------------------------------------------------------------
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  detail::check_same_device("where", cond, a);
  detail::check_same_device("where", a, b);
  GS_CHECK(cond.dtype() == kBool, "where", "condition must be a bool tensor, got ", cond.str(),
           "; build it with a comparison such as x > 0");
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  const DType ct = result_type(a, b);
  Tensor out = empty(shape, TensorOptions(ct).device(a.device()));
  backend_of(a).where(out, prepare(cond, kBool, shape), prepare(a, ct, shape), prepare(b, ct, shape));
  if (observers_active())
    notify_op("where", {cond, a, b}, out,
              (cond.shape() != shape ? 1u : 0u) | (a.shape() != shape ? 2u : 0u) | (b.shape() != shape ? 4u : 0u));
  if (needs_grad(a, b)) {
    record("where", out, {nullptr, &a, &b},
           [c = cond.detach(), sha = a.shape(), shb = b.shape()](const Tensor& g, Node&) {
             Tensor z = zeros_like(g.detach());
             return tensor_list{Tensor(), sum_to(where(c, g, z), sha), sum_to(where(c, z, g), shb)};
           });
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  GS_CHECK(mask.dtype() == kBool, "masked_fill", "mask must be a bool tensor, got ", mask.str(),
           "; build it with a comparison such as x > 0");
  // Out of place, input and mask broadcast against each other, as in PyTorch (a (T, T)
  // causal mask over (B, H, T, T) scores, a (B, 1, T) padding mask, ...); the
  // gradient of a broadcast input is summed back to its shape by where's backward.
  broadcast_shapes(x.shape(), mask.shape(), "masked_fill");  // a clear error when they do not broadcast
  // The result keeps x's dtype (PyTorch), so the value must survive the cast into it.
  check_scalar_fits(value, x.dtype(), "masked_fill");
  Tensor v = empty({}, TensorOptions(x.dtype()).device(x.device()));
  detail::fill_unchecked(v, value);
  return where(mask, v, x);
}

// ---- operators -------------------------------------------------------------------------
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, b); }
Tensor operator+(const Scalar& a, const Tensor& b) { return add(detail::wrap_scalar(a, b), b); }
Tensor operator-(const Scalar& a, const Tensor& b) { return sub(detail::wrap_scalar(a, b), b); }
Tensor operator*(const Scalar& a, const Tensor& b) { return mul(detail::wrap_scalar(a, b), b); }
Tensor operator/(const Scalar& a, const Tensor& b) { return div(detail::wrap_scalar(a, b), b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator<(const Tensor& a, const Scalar& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Scalar& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Scalar& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Scalar& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, const Scalar& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Scalar& b) { return ne(a, b); }
Tensor operator&&(const Tensor& a, const Tensor& b) { return logical_and(a, b); }
Tensor operator||(const Tensor& a, const Tensor& b) { return logical_or(a, b); }
Tensor operator!(const Tensor& a) { return logical_not(a); }

}  // namespace gradsleuth
