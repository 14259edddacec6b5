// One function per lab that builds its grader (grade_labN.cpp); labs.cpp calls the one of the
// lab its executable grades (labN_grader links grade_labN.cpp only).
#pragma once
#include "tutorials/grader/grader.h"

namespace gradsleuth::labs {

Lab make_lab1();   // tensors, views, strides, broadcasting
Lab make_lab2();   // autograd by hand
Lab make_lab3();   // an MLP on Fashion-MNIST
Lab make_lab4();   // broadcasting and in-place bugs
Lab make_lab5();   // batches that mix examples
Lab make_lab6();   // dead ReLUs, saturation, vanishing gradients, initialisation
Lab make_lab7();   // hunting a NaN: log-sum-exp, anomaly mode, half precision
Lab make_lab8();   // data bugs: misalignment, leakage, normalisation, class imbalance
Lab make_lab9();   // CUDA kernels: axpy, a naive and a tiled matmul, against the CPU and cuBLAS
Lab make_lab10();  // data-parallel training: sharding, gradient averaging, the replica checks
Lab make_lab11();  // make it fast: the matmul ladder on the CPU (loop order, blocking, a SIMD micro-kernel)
Lab make_lab12();  // reduced precision: float16/bfloat16 by hand, dynamic loss scaling, the autocast policy

}  // namespace gradsleuth::labs
