// One function per lab that builds its grader (grade_labN.cpp); labs.cpp lists them in course order.
#pragma once
#include "tutorials/grader/grader.h"

namespace gradsleuth::labs {

Lab make_lab1();  // tensors, views, strides, broadcasting
Lab make_lab2();  // autograd by hand
Lab make_lab3();  // an MLP on Fashion-MNIST

}  // namespace gradsleuth::labs
