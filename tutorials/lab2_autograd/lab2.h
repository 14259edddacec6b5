// Lab 2: autograd by hand (README.md in this folder). Differentiable ops you
// write yourself: the forward computes the values with the graph switched off,
// then record() attaches your backward, which saves what it needs as SavedTensor.
// Declared once for your code (lab2.cpp) and the reference solution
// (solution/lab2.cpp); the grader (../grader/grade_lab2.cpp) checks each one
// with debug::gradcheck.
//
// Inside namespace lab2, a plain `tanh(x)` means lab2::tanh. Call the library's
// ops as gs::tanh(x), gs::matmul(a, b), ... (or with operators: a * b).
//
// Dimension letters: N = rows, K = inner, M = columns.
#pragma once
#include <cstdint>

#include "core/autograd.h"
#include "core/ops.h"

namespace gradsleuth::lab2 {

// The worked example (given in lab2.cpp): a + b with broadcasting. Node "lab2::add".
Tensor add(const Tensor& a, const Tensor& b);

// Task 2.1: a * b elementwise, with broadcasting. Node "lab2::mul".
Tensor mul(const Tensor& a, const Tensor& b);

// Task 2.2: tanh(x), saving its output for the backward. Node "lab2::tanh".
Tensor tanh(const Tensor& x);

// Task 2.3: a (N, K) @ b (K, M) -> (N, M), 2-D only. Node "lab2::matmul".
Tensor matmul(const Tensor& a, const Tensor& b);

// Task 2.4: the sum over one dim (negative dims count from the end), the dim
// kept with size 1 when keepdim.   x (A, B, C), dim 1 -> (A, C)   Node "lab2::sum".
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);

// Task 2.5: softmax along `dim`: exp(x) / sum(exp(x), dim). Node "lab2::softmax".
Tensor softmax(const Tensor& x, int64_t dim);

}  // namespace gradsleuth::lab2
