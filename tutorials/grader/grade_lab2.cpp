// The grader of lab 2 (autograd by hand). For each op: the forward against the
// library's op, the output's grad_fn must be the student's node (so the library's
// own backward cannot stand in for theirs), debug::gradcheck in float64 on
// several shapes, no graph when nothing needs a gradient, and for ops that save
// inputs, an in-place change between forward and backward must raise.
#include "tutorials/grader/grader.h"
#include "tutorials/grader/labs.h"
#include "tutorials/lab2_autograd/lab2.h"

#include "core/generator.h"
#include "debug/checks/model/gradcheck.h"

namespace gradsleuth::labs {

namespace {

using Fn = std::function<Tensor(const tensor_list&)>;

// Inputs: float64 for gradcheck, float32 elsewhere; the same seed gives the same values.
tensor_list randn_inputs(const std::vector<Shape>& shapes, DType dt, uint64_t seed, double scale = 1.0) {
  Generator gen(input_seed(seed));
  tensor_list xs;
  for (const Shape& s : shapes) xs.push_back(randn(s, dt, &gen) * scale);
  return xs;
}

std::string shapes_str(const tensor_list& xs) {
  std::string s;
  for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + xs[i].str();
  return s;
}

// The forward values against the library's op.
Case forward_case(const std::string& name, std::vector<Shape> shapes, Fn mine, Fn ref, double scale = 1.0) {
  return {"forward " + name, [=](Check& c) {
            const tensor_list xs = randn_inputs(shapes, kFloat32, 1, scale);
            c.input(shapes_str(xs) + (xs[0].numel() <= 12 ? ": x0 = " + values_str(xs[0]) : ""));
            const Tensor want = ref(xs);
            const Tensor got = mine(xs);
            c.require_close(got, want, "forward", 1e-5, 1e-6);
          }};
}

// The output's grad_fn must be the student's node: returning the library's op
// (which records the library's backward) would pass gradcheck without any work.
void require_node(Check& c, const Tensor& out, const std::string& node) {
  c.require(out.defined(), "the op returned an undefined Tensor");
  c.require(out.grad_fn() != nullptr, "the output has no grad_fn although an input requires grad: call record(\"" +
                                          node + "\", out, {...}, backward) after the forward");
  c.require(out.grad_fn()->name() == node,
            std::string("the output's grad_fn is '") + out.grad_fn()->name() + "', expected your node '" + node +
                "': compute the forward under NoGradGuard and record() your own backward");
}

Case node_case(const std::string& node, std::vector<Shape> shapes, Fn mine) {
  return {"records the node " + node, [=](Check& c) {
            tensor_list xs = randn_inputs(shapes, kFloat32, 2);
            for (Tensor& x : xs) x.requires_grad_(true);
            c.input(shapes_str(xs) + ", all requiring grad");
            require_node(c, mine(xs), node);
          }};
}

// debug::gradcheck: autograd's gradient (your backward) against central differences.
Case gradcheck_case(const std::string& name, const std::string& node, std::vector<Shape> shapes, Fn mine,
                    std::function<tensor_list(tensor_list)> prepare = nullptr) {
  return {"gradcheck " + name, [=](Check& c) {
            tensor_list xs = randn_inputs(shapes, kFloat64, 3);
            if (prepare) xs = prepare(xs);
            c.input(shapes_str(xs));
            {
              tensor_list probe;
              for (const Tensor& x : xs) probe.push_back(x.detach().requires_grad_(true));
              require_node(c, mine(probe), node);
            }
            const debug::GradcheckResult r = debug::gradcheck(mine, xs);
            // The explorer names each node by its op and its place among the ops of that name: in a
            // one-op check, the student's node is the first of its name.
            c.require(r.passed, "gradient check failed: " + r.message + ". It differs at your node " + node +
                                    "#1: build/tutorials/explore_lab2 writes a page where you can step the "
                                    "backward to that node and see the gradient it received and what it sent");
          }};
}

// Nothing requires grad (or recording is off): no node may be recorded.
Case no_graph_case(std::vector<Shape> shapes, Fn mine) {
  return {"no graph when no input needs a gradient", [=](Check& c) {
            const tensor_list xs = randn_inputs(shapes, kFloat32, 4);
            c.input(shapes_str(xs) + ", none requiring grad");
            const Tensor out = mine(xs);
            c.require(out.defined(), "the op returned an undefined Tensor");
            c.require(out.grad_fn() == nullptr && !out.requires_grad(),
                      "the output has a grad_fn although no input requires grad: record only when "
                      "needs_grad(...) is true");
            tensor_list ys = randn_inputs(shapes, kFloat32, 4);
            for (Tensor& y : ys) y.requires_grad_(true);
            c.input(shapes_str(ys) + ", requiring grad, inside a NoGradGuard");
            NoGradGuard no_grad;
            const Tensor out2 = mine(ys);
            c.require(out2.grad_fn() == nullptr,
                      "inside a NoGradGuard the op still recorded a node: guard the "
                      "record() call with needs_grad(...), which is false there");
          }};
}

// a requires grad, b does not: a's gradient against the library's, and b gets none.
Case one_input_case(const std::string& name, std::vector<Shape> shapes, Fn mine, Fn ref) {
  return {"only the first input needs a gradient: " + name, [=](Check& c) {
            tensor_list xs = randn_inputs(shapes, kFloat32, 5);
            tensor_list ys = {xs[0].clone().requires_grad_(true), xs[1]};
            xs[0].requires_grad_(true);
            c.input(name + ": a " + xs[0].str() + " requires grad, b " + xs[1].str() + " does not");
            mine(xs).sum().backward();
            ref(ys).sum().backward();
            c.require(xs[0].grad().defined(), "a.grad is undefined after backward()");
            c.require_close(xs[0].grad(), ys[0].grad(), "a.grad", 1e-4, 1e-5);
            c.require(!xs[1].grad().defined(), "b, which does not require grad, got a .grad");
          }};
}

// An op that saves an input must save it as a SavedTensor, so an in-place change
// between the forward and the backward raises instead of giving a wrong gradient.
Case inplace_case(const std::string& name, std::vector<Shape> shapes, Fn mine) {
  return {"an in-place change of a saved input is caught", [=](Check& c) {
            tensor_list xs = randn_inputs(shapes, kFloat32, 6);
            xs[0].requires_grad_(true);
            c.input(name + ": y = op(a, b) with a requiring grad; b.mul_(2); y.sum().backward()");
            Tensor y = mine(xs);
            xs[1].mul_(2.0);
            bool raised = false;
            try {
              y.sum().backward();
            } catch (const Error& e) {
              if (not_implemented_task(e.what()).first != 0) throw;
              raised = true;
            }
            c.require(raised,
                      "b was changed in place after the forward, and the backward used the new value without a "
                      "word: the gradient of a is now silently wrong. Save inputs as SavedTensor(b, \"...\") and "
                      "read them with unpack(node), which checks the version; do not capture the Tensor itself");
          }};
}

// Student code whose nodes ("lab2::...") are watched: an exception in their backward, or a
// gradient of the wrong shape, is reported as coming from the student's backward.
Fn watched(Fn f) {
  return [f = std::move(f)](const tensor_list& x) { return watch_backward(f(x), "lab2::"); };
}

Fn unary(Tensor (*f)(const Tensor&)) {
  return watched([f](const tensor_list& x) { return f(x[0]); });
}

}  // namespace

Lab make_lab2() {
  Lab lab;
  lab.number = 2;
  lab.dir = "lab2_autograd";
  lab.title = "Autograd by hand";
  lab.starter = "tutorials/lab2_autograd/lab2.cpp";

  const Fn mul = watched([](const tensor_list& x) { return lab2::mul(x[0], x[1]); });
  const Fn ref_mul = [](const tensor_list& x) { return x[0] * x[1]; };
  lab.tasks.push_back(
      {1,
       "mul, with broadcasting",
       20,
       "lab2::mul()",
       {forward_case("(3, 4) * (3, 4)", {{3, 4}, {3, 4}}, mul, ref_mul), node_case("lab2::mul", {{3, 4}, {3, 4}}, mul),
        gradcheck_case("(3, 4) * (3, 4)", "lab2::mul", {{3, 4}, {3, 4}}, mul),
        gradcheck_case("broadcast (3, 1) * (1, 4)", "lab2::mul", {{3, 1}, {1, 4}}, mul),
        gradcheck_case("broadcast (2, 3, 4) * (4)", "lab2::mul", {{2, 3, 4}, {4}}, mul),
        gradcheck_case("x * x (one tensor used twice)", "lab2::mul", {{5}},
                       watched([](const tensor_list& x) { return lab2::mul(x[0], x[0]); })),
        one_input_case("(3, 4) * (4)", {{3, 4}, {4}}, mul, ref_mul), no_graph_case({{3, 4}, {3, 4}}, mul),
        inplace_case("mul", {{3, 4}, {3, 4}}, mul)}});

  const Fn tanh = unary(lab2::tanh);
  lab.tasks.push_back({2,
                       "tanh, saving its output",
                       15,
                       "lab2::tanh()",
                       {forward_case("tanh (4, 5)", {{4, 5}}, tanh, unary(gs::tanh)),
                        node_case("lab2::tanh", {{4, 5}}, tanh),
                        gradcheck_case("tanh (4, 5)", "lab2::tanh", {{4, 5}}, tanh),
                        gradcheck_case("tanh(tanh(x)) (6)", "lab2::tanh", {{6}},
                                       watched([](const tensor_list& x) { return lab2::tanh(lab2::tanh(x[0])); })),
                        {"saturated inputs (|x| up to 40): gradients near 0, not NaN",
                         [](Check& c) {
                           Tensor x = tensor({-40, -10, -1, 0, 1, 10, 40}).requires_grad_(true);
                           Tensor y = x.detach().clone().requires_grad_(true);
                           c.input("x = " + values_str(x));
                           Tensor out = watch_backward(lab2::tanh(x), "lab2::");
                           require_node(c, out, "lab2::tanh");
                           out.sum().backward();
                           gs::tanh(y).sum().backward();
                           c.require(x.grad().defined(), "x.grad is undefined after backward()");
                           c.require_close(x.grad(), y.grad(), "x.grad", 1e-5, 1e-6);
                         }},
                        no_graph_case({{4, 5}}, tanh)}});

  const Fn mm = watched([](const tensor_list& x) { return lab2::matmul(x[0], x[1]); });
  const Fn ref_mm = [](const tensor_list& x) { return gs::matmul(x[0], x[1]); };
  lab.tasks.push_back(
      {3,
       "matmul (2-D)",
       20,
       "lab2::matmul()",
       {forward_case("(3, 4) @ (4, 5)", {{3, 4}, {4, 5}}, mm, ref_mm),
        node_case("lab2::matmul", {{3, 4}, {4, 5}}, mm),
        gradcheck_case("(3, 4) @ (4, 5)", "lab2::matmul", {{3, 4}, {4, 5}}, mm),
        gradcheck_case("(1, 3) @ (3, 1)", "lab2::matmul", {{1, 3}, {3, 1}}, mm),
        gradcheck_case("transposed (non-contiguous) inputs (3, 4) @ (4, 2)", "lab2::matmul", {{4, 3}, {2, 4}}, mm,
                       [](tensor_list x) {
                         return tensor_list{x[0].t(), x[1].t()};
                       }),
        one_input_case("(3, 4) @ (4, 2)", {{3, 4}, {4, 2}}, mm, ref_mm),
        {"mismatched shapes throw",
         [](Check& c) {
           c.input("(3, 4) @ (3, 4)");
           c.require_throws([] { lab2::matmul(ones({3, 4}), ones({3, 4})); }, "matmul (3, 4) @ (3, 4)");
         }},
        no_graph_case({{3, 4}, {4, 5}}, mm),
        inplace_case("matmul (3, 4) @ (4, 2)", {{3, 4}, {4, 2}}, mm)}});

  auto sum_fn = [](int64_t dim, bool keepdim) -> Fn {
    return watched([=](const tensor_list& x) { return lab2::sum(x[0], dim, keepdim); });
  };
  auto ref_sum = [](int64_t dim, bool keepdim) -> Fn {
    return [=](const tensor_list& x) { return gs::sum(x[0], {dim}, keepdim); };
  };
  lab.tasks.push_back({4,
                       "sum over one dim",
                       20,
                       "lab2::sum()",
                       {forward_case("sum dim 1 of (3, 4, 5)", {{3, 4, 5}}, sum_fn(1, false), ref_sum(1, false)),
                        forward_case("sum dim 1 of (3, 4, 5), keepdim", {{3, 4, 5}}, sum_fn(1, true), ref_sum(1, true)),
                        forward_case("sum dim -1 of (3, 4)", {{3, 4}}, sum_fn(-1, false), ref_sum(-1, false)),
                        node_case("lab2::sum", {{3, 4}}, sum_fn(0, false)),
                        gradcheck_case("sum dim 0 of (3, 4)", "lab2::sum", {{3, 4}}, sum_fn(0, false)),
                        gradcheck_case("sum dim 1 of (2, 3, 4), keepdim", "lab2::sum", {{2, 3, 4}}, sum_fn(1, true)),
                        gradcheck_case("sum dim -1 of (2, 3)", "lab2::sum", {{2, 3}}, sum_fn(-1, false)),
                        gradcheck_case("sum dim 0 of (5) -> 0-dim", "lab2::sum", {{5}}, sum_fn(0, false)),
                        no_graph_case({{3, 4}}, sum_fn(1, false))}});

  auto sm = [](int64_t dim) -> Fn { return watched([=](const tensor_list& x) { return lab2::softmax(x[0], dim); }); };
  auto ref_sm = [](int64_t dim) -> Fn { return [=](const tensor_list& x) { return gs::softmax(x[0], dim); }; };
  lab.tasks.push_back({5,
                       "softmax",
                       25,
                       "lab2::softmax()",
                       {forward_case("softmax dim 1 of (3, 5)", {{3, 5}}, sm(1), ref_sm(1)),
                        forward_case("softmax dim 1 of (3, 5), values up to ~3000 (overflow without the max trick)",
                                     {{3, 5}}, sm(1), ref_sm(1), 1000.0),
                        node_case("lab2::softmax", {{3, 5}}, sm(1)),
                        gradcheck_case("softmax dim 1 of (3, 5)", "lab2::softmax", {{3, 5}}, sm(1)),
                        gradcheck_case("softmax dim 0 of (4, 3)", "lab2::softmax", {{4, 3}}, sm(0)),
                        gradcheck_case("softmax dim -2 of (2, 3, 4)", "lab2::softmax", {{2, 3, 4}}, sm(-2)),
                        no_graph_case({{3, 5}}, sm(1))}});
  return lab;
}

}  // namespace gradsleuth::labs
