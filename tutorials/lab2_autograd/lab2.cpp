// Lab 2 starter code: autograd by hand.
// Read the worked example (add), then replace each `throw` marked TODO with your
// code (README.md, Tasks 2.1-2.5), rebuild and grade:   ./run.sh lab check 2
#include "tutorials/lab2_autograd/lab2.h"

namespace gradsleuth::lab2 {

// ---- the worked example: add ---------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b) {
  // 1. Forward: the values, computed with recording switched off (the library's
  //    own add would record its own backward; we want ours).
  Tensor out;
  {
    NoGradGuard no_grad;
    out = gs::add(a, b);
  }
  // 2. Backward: recorded only when recording is on and an input needs a gradient.
  if (needs_grad(a, b)) {
    // d(a + b)/da = 1 and d(a + b)/db = 1: each input receives the output's
    // gradient g as it is, except where broadcasting made it bigger:
    // a (3, 1) + b (1, 4) -> out (3, 4) used a[i, 0] in 4 outputs, so its
    // gradient is the sum of those 4. sum_to(g, shape) sums the broadcast dims away.
    // The lambda keeps only what the backward needs: here two shapes, no tensors.
    record("lab2::add", out, {&a, &b}, [shape_a = a.shape(), shape_b = b.shape()](const Tensor& g, Node&) {
      return tensor_list{sum_to(g, shape_a), sum_to(g, shape_b)};  // one gradient per input, in order
    });
  }
  return out;
}

// TODO(lab 2, task 1): mul. The gradient for a is g * b and for b is g * a, each
// summed back to its input's shape. The backward needs the inputs' values: save
// them as SavedTensor(a, "lab2::mul") in the lambda's captures and read them with
// saved.unpack(node) (the Node& argument). Never capture the Tensor itself: a
// SavedTensor notices when an in-place op changes it before the backward runs.
Tensor mul(const Tensor& a, const Tensor& b) {
  throw Error("lab 2", "not implemented: lab 2 task 1 (mul in tutorials/lab2_autograd/lab2.cpp)");
}

// TODO(lab 2, task 2): tanh. With y = tanh(x), dy/dx = 1 - y^2: save the output
// y, not x: SavedTensor(out, "lab2::tanh", /*is_output=*/true).
Tensor tanh(const Tensor& x) {
  throw Error("lab 2", "not implemented: lab 2 task 2 (tanh in tutorials/lab2_autograd/lab2.cpp)");
}

// TODO(lab 2, task 3): matmul, 2-D. Check the shapes first (gs::Error naming
// them). out = a @ b, so grad_a = g @ b^T and grad_b = a^T @ g. Write the shapes
// next to each line: g (N, M), b^T (M, K) -> grad_a (N, K).
Tensor matmul(const Tensor& a, const Tensor& b) {
  throw Error("lab 2", "not implemented: lab 2 task 3 (matmul in tutorials/lab2_autograd/lab2.cpp)");
}

// TODO(lab 2, task 4): sum over one dim. Each input element was added once into
// one output element, so its gradient is that output's gradient: put the summed
// dim back (unsqueeze when !keepdim) and expand g to x's shape. Wrap a negative
// dim first: wrap_dim(dim, x.dim(), "lab2::sum").
Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  throw Error("lab 2", "not implemented: lab 2 task 4 (sum in tutorials/lab2_autograd/lab2.cpp)");
}

// TODO(lab 2, task 5): softmax. With y = softmax(x), the backward is
//   grad_x = y * (g - sum(g * y, dim, keepdim=true))
// (README.md derives it). Save the output, as in tanh.
Tensor softmax(const Tensor& x, int64_t dim) {
  throw Error("lab 2", "not implemented: lab 2 task 5 (softmax in tutorials/lab2_autograd/lab2.cpp)");
}

}  // namespace gradsleuth::lab2
