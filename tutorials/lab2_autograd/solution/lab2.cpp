// Lab 2 reference solution (built only with -DGRADSLEUTH_LAB_SOLUTIONS=ON).
// Autograd by hand; see ../README.md. Each op: forward with recording off, then
// record() with the backward right below it.
#include "tutorials/lab2_autograd/lab2.h"

namespace gradsleuth::lab2 {

// The worked example (the same as in the starter).
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = gs::add(a, b);
  }
  if (needs_grad(a, b)) {
    record("lab2::add", out, {&a, &b}, [shape_a = a.shape(), shape_b = b.shape()](const Tensor& g, Node&) {
      return tensor_list{sum_to(g, shape_a), sum_to(g, shape_b)};
    });
  }
  return out;
}

// Task 2.1: d(ab) = g b, g a; each summed back over the dims broadcasting added.
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = gs::mul(a, b);
  }
  if (needs_grad(a, b)) {
    record("lab2::mul", out, {&a, &b},
           [sa = SavedTensor(a, "lab2::mul"), sb = SavedTensor(b, "lab2::mul"), shape_a = a.shape(),
            shape_b = b.shape()](const Tensor& g, Node& n) {
             return tensor_list{sum_to(g * sb.unpack(n), shape_a), sum_to(g * sa.unpack(n), shape_b)};
           });
  }
  return out;
}

// Task 2.2: y = tanh(x), dy/dx = 1 - y^2 (from the saved output).
Tensor tanh(const Tensor& x) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = gs::tanh(x);
  }
  if (needs_grad(x)) {
    record("lab2::tanh", y, {&x}, [sy = SavedTensor(y, "lab2::tanh", /*is_output=*/true)](const Tensor& g, Node& n) {
      Tensor yv = sy.unpack(n);
      return tensor_list{g * (1.0 - yv * yv)};
    });
  }
  return y;
}

// Task 2.3: out (N, M) = a (N, K) @ b (K, M).
Tensor matmul(const Tensor& a, const Tensor& b) {
  GS_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "lab2::matmul", "expects (N, K) @ (K, M), got ",
           a.str(), " @ ", b.str());
  Tensor out;
  {
    NoGradGuard no_grad;
    out = gs::matmul(a, b);
  }
  if (needs_grad(a, b)) {
    record("lab2::matmul", out, {&a, &b},
           [sa = SavedTensor(a, "lab2::matmul"), sb = SavedTensor(b, "lab2::matmul")](const Tensor& g, Node& n) {
             Tensor av = sa.unpack(n), bv = sb.unpack(n);
             return tensor_list{gs::matmul(g, bv.t()),   // g (N, M) @ b^T (M, K) -> (N, K)
                                gs::matmul(av.t(), g)};  // a^T (K, N) @ g (N, M) -> (K, M)
           });
  }
  return out;
}

// Task 2.4: every input element reaches one output element with weight 1.
Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = wrap_dim(dim, x.dim(), "lab2::sum");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = gs::sum(x, {d}, keepdim);
  }
  if (needs_grad(x)) {
    record("lab2::sum", out, {&x}, [shape = x.shape(), d, keepdim](const Tensor& g, Node&) {
      return tensor_list{(keepdim ? g : g.unsqueeze(d)).expand(shape)};
    });
  }
  return out;
}

// Task 2.5: grad_x = y * (g - sum(g * y, dim)).
Tensor softmax(const Tensor& x, int64_t dim) {
  const int64_t d = wrap_dim(dim, x.dim(), "lab2::softmax");
  Tensor y;
  {
    NoGradGuard no_grad;
    y = gs::softmax(x, d);
  }
  if (needs_grad(x)) {
    record("lab2::softmax", y, {&x}, [sy = SavedTensor(y, "lab2::softmax", true), d](const Tensor& g, Node& n) {
      Tensor yv = sy.unpack(n);
      return tensor_list{yv * (g - gs::sum(g * yv, {d}, true))};
    });
  }
  return y;
}

}  // namespace gradsleuth::lab2
