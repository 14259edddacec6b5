// The grader's feedback for two mistakes a student makes in lab 2, on a made-up lab whose
// "student code" has them on purpose (this file defines the lab table, so the test links
// the grading engine and no lab):
//   * a backward that forgets to sum a broadcast input's gradient: the feedback names the
//     backward and gives the expected and the got shapes;
//   * a backward that raises (a matmul of the wrong operands): the feedback says it was
//     raised in the student's backward, not in the forward.
// A correct implementation still passes, and a forward that raises is not blamed on a backward.
#include <doctest/doctest.h>

#include <sstream>
#include <string>

#include "core/autograd.h"
#include "core/observer.h"
#include "core/ops.h"
#include "tutorials/grader/grader.h"

namespace gs = gradsleuth;
namespace gl = gradsleuth::labs;
using gs::Tensor;

namespace {

// a * b with broadcasting, its backward written by hand. `reduce`: whether the backward sums
// each gradient to its input's shape (the mistake is to forget it).
Tensor student_mul(const Tensor& a, const Tensor& b, bool reduce) {
  Tensor out;
  {
    gs::NoGradGuard no_grad;
    out = gs::mul(a, b);
  }
  if (gs::needs_grad(a, b)) {
    gs::record("fake::mul", out, {&a, &b},
               [sa = gs::SavedTensor(a, "fake::mul"), sb = gs::SavedTensor(b, "fake::mul"), shape_a = a.shape(),
                shape_b = b.shape(), reduce](const Tensor& g, gs::Node& n) {
                 Tensor ga = g * sb.unpack(n), gb = g * sa.unpack(n);
                 if (reduce) ga = gs::sum_to(ga, shape_a), gb = gs::sum_to(gb, shape_b);
                 return gs::tensor_list{ga, gb};
               });
  }
  return out;
}

// a (N, K) @ b (K, M) whose backward computes grad_a as g @ b instead of g @ b^T: the
// library's matmul raises inside the student's backward.
Tensor student_matmul_bad_backward(const Tensor& a, const Tensor& b) {
  Tensor out;
  {
    gs::NoGradGuard no_grad;
    out = gs::matmul(a, b);
  }
  if (gs::needs_grad(a, b)) {
    gs::record("fake::matmul", out, {&a, &b},
               [sa = gs::SavedTensor(a, "fake::matmul"), sb = gs::SavedTensor(b, "fake::matmul")](const Tensor& g,
                                                                                                  gs::Node& n) {
                 return gs::tensor_list{gs::matmul(g, sb.unpack(n)), gs::matmul(sa.unpack(n).t(), g)};
               });
  }
  return out;
}

// The case body shared by the mul tasks: a (3, 1) * b (1, 4), both requiring grad.
void mul_case(gl::Check& c, bool reduce) {
  Tensor a = gl::randn_seeded({3, 1}, 1, 1.0).requires_grad_(true);
  Tensor b = gl::randn_seeded({1, 4}, 2, 1.0).requires_grad_(true);
  c.input("a " + a.str() + " * b " + b.str());
  Tensor out = gl::watch_backward(student_mul(a, b, reduce), "fake::");
  out.sum().backward();
  Tensor ra = a.detach().clone().requires_grad_(true), rb = b.detach().clone().requires_grad_(true);
  (ra * rb).sum().backward();
  c.require_close(a.grad(), ra.grad(), "a.grad", 1e-5, 1e-6);
  c.require_close(b.grad(), rb.grad(), "b.grad", 1e-5, 1e-6);
}

gl::Lab fake_lab() {
  gl::Lab lab;
  lab.number = 1;
  lab.dir = "fake";
  lab.title = "made-up lab with deliberate mistakes";
  lab.starter = "fake.cpp";
  lab.tasks.push_back(
      {1, "mul, correct", 10, "mul()", {{"broadcast (3, 1) * (1, 4)", [](gl::Check& c) { mul_case(c, true); }}}});
  lab.tasks.push_back(
      {2, "mul, broadcast dim not summed", 10, "mul()", {{"broadcast (3, 1) * (1, 4)", [](gl::Check& c) {
                                                            mul_case(c, false);
                                                          }}}});
  lab.tasks.push_back({3,
                       "matmul, backward raises",
                       10,
                       "matmul()",
                       {{"(3, 4) @ (4, 5)", [](gl::Check& c) {
                           Tensor a = gl::randn_seeded({3, 4}, 3).requires_grad_(true);
                           Tensor b = gl::randn_seeded({4, 5}, 4).requires_grad_(true);
                           c.input("a " + a.str() + " @ b " + b.str());
                           gl::watch_backward(student_matmul_bad_backward(a, b), "fake::").sum().backward();
                         }}}});
  lab.tasks.push_back(
      {4, "forward raises", 10, "matmul()", {{"(3, 4) @ (3, 4)", [](gl::Check& c) {
                                                // A backward that ran (and finished) earlier in the case is not blamed.
                                                Tensor a = gl::randn_seeded({3, 1}, 1).requires_grad_(true);
                                                gl::watch_backward(student_mul(a, a, true), "fake::").sum().backward();
                                                c.input("(3, 4) @ (3, 4)");
                                                student_matmul_bad_backward(gs::ones({3, 4}), gs::ones({3, 4}));
                                              }}}});
  lab.tasks.push_back({5,
                       "forward broadcasts to the wrong shape",
                       10,
                       "add()",
                       {{"(3, 4) + (4)", [](gl::Check& c) {
                           Tensor x = gl::randn_seeded({3, 4}, 5), y = gl::randn_seeded({4}, 6);
                           c.input("x " + x.str() + " + y " + y.str());
                           // The mistake: summing over the wrong dim keeps a size-1 dim that broadcasts.
                           Tensor got = gs::sum(x, {1}, true) + y;
                           c.require_close(got, x + y, "x + y");
                         }}}});
  return lab;
}

// The one case of the one task graded (grade(lab, task)).
const gl::CaseResult& only_case(const gl::LabResult& r, int task) {
  REQUIRE(r.tasks.size() == 1);
  REQUIRE(r.tasks[0].number == task);
  REQUIRE(r.tasks[0].cases.size() == 1);
  return r.tasks[0].cases[0];
}

}  // namespace

// The lab table of this test's grader.
const std::vector<gl::Lab>& gradsleuth::labs::all_labs() {
  static const std::vector<Lab> l = {fake_lab()};
  return l;
}

TEST_CASE("a correct hand-written backward passes with the watch attached") {
  const gl::LabResult r = gl::grade(gl::all_labs()[0], 1);
  const gl::CaseResult& c = only_case(r, 1);
  INFO(c.message);
  CHECK(c.passed);
  CHECK(r.points == 10);
  CHECK_FALSE(gs::observers_active());  // the grader's observer is detached after the case
}

TEST_CASE("a broadcast gradient not summed: the feedback names the backward and both shapes") {
  const gl::LabResult r = gl::grade(gl::all_labs()[0], 2);
  const gl::CaseResult& c = only_case(r, 2);
  INFO(c.message);
  CHECK_FALSE(c.passed);
  CHECK(c.message.rfind("in your backward of fake::mul: ", 0) == 0);
  CHECK(c.message.find("input 0: expected shape [3, 1] (the input's shape), got [3, 4]") != std::string::npos);
  CHECK(c.message.find("sum_to") != std::string::npos);
  CHECK(c.message.find("\ninput: a float32[3, 1] * b float32[1, 4]") != std::string::npos);
  CHECK_FALSE(gs::observers_active());
}

TEST_CASE("an exception in the student's backward says it came from there") {
  const gl::LabResult r = gl::grade(gl::all_labs()[0], 3);
  const gl::CaseResult& c = only_case(r, 3);
  INFO(c.message);
  CHECK_FALSE(c.passed);
  CHECK(c.message.rfind("in your backward of fake::matmul: raised gs::Error: ", 0) == 0);
  CHECK(c.message.find("matmul") != std::string::npos);
  // The text report shows it under the task.
  std::ostringstream os;
  gl::print_report(os, r);
  CHECK(os.str().find("in your backward of fake::matmul") != std::string::npos);
}

TEST_CASE("an exception in the forward is not blamed on a backward") {
  const gl::LabResult r = gl::grade(gl::all_labs()[0], 4);
  const gl::CaseResult& c = only_case(r, 4);
  INFO(c.message);
  CHECK_FALSE(c.passed);
  CHECK(c.message.rfind("raised gs::Error: ", 0) == 0);
  CHECK(c.message.find("in your backward") == std::string::npos);
}

TEST_CASE("a forward that broadcasts to the wrong shape: expected and got shapes") {
  const gl::LabResult r = gl::grade(gl::all_labs()[0], 5);
  const gl::CaseResult& c = only_case(r, 5);
  INFO(c.message);
  CHECK_FALSE(c.passed);
  // (3, 1) + (4) broadcasts to (3, 4) too: the values are wrong, the shape is not. Only the
  // values can show it here; the shape check is the require_tensor case below.
  CHECK(c.message.find("x + y: ") == 0);
  gl::Check check;
  check.input("(3, 4)");
  try {
    check.require_close(gs::ones({3, 1}), gs::ones({3, 4}), "out");
    FAIL("require_close accepted a (3, 1) tensor for a (3, 4) one");
  } catch (const gl::CaseFailed& f) {
    CHECK(f.message.find("out: expected shape [3, 4], got float32[3, 1]") != std::string::npos);
  }
}
