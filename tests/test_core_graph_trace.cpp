// Tests for core/graph_trace.h: the forward's nodes in the order recorded, with layouts (views,
// in-place ops, versions), and the backward as the engine ran it: its order (the same the op
// observer sees), each gradient contribution, their sum, and the .grad each leaf ends with.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/graph_trace.h"
#include "core/observer.h"
#include "core/ops.h"

namespace {

using gs::Tensor;
using Vec = std::vector<double>;
const gs::TensorOptions kF64 = gs::TensorOptions().dtype(gs::kFloat64);
const gs::TensorOptions kLeaf = kF64.requires_grad(true);

Vec vals(const Tensor& t) { return t.to_vector<double>(); }

// The nodes a backward ran, in the order the op observer heard them.
struct Order : gs::OpObserver {
  unsigned events() const override { return kBackwardNodes; }
  void on_backward(const gs::BackwardEvent& e) override { nodes.push_back(e.node); }
  std::vector<const gs::Node*> nodes;
};

}  // namespace

TEST_CASE("a tensor used twice: two contributions arrive at its leaf and sum to its .grad") {
  Tensor a = gs::tensor({1.0, -2.0, 3.0}, kLeaf);
  gs::autograd::GraphTrace trace;
  Tensor b = a + a;  // b = 2a: a.grad = 2
  Tensor loss = b.sum();
  loss.backward();
  trace.stop();
  CHECK(vals(a.grad()) == Vec{2, 2, 2});

  REQUIRE(trace.forward().size() == 2);
  CHECK(std::string(trace.forward()[0].node->name()) == "add");
  CHECK(std::string(trace.forward()[1].node->name()) == "sum");
  CHECK(trace.forward()[0].inputs.size() == 2);
  CHECK(trace.forward()[0].inputs[0].impl == &a.impl());
  CHECK(trace.forward()[0].output.shape == gs::Shape{3});

  const auto& steps = trace.backward();
  CHECK(trace.passes() == 1);
  REQUIRE(steps.size() == 3);  // sum, add, a's AccumulateGrad
  CHECK(std::string(steps[0].node->name()) == "sum");
  REQUIRE(steps[0].incoming.size() == 1);
  CHECK(steps[0].incoming[0].from == nullptr);  // the seed: d loss / d loss = 1
  CHECK(vals(steps[0].grad) == Vec{1});
  CHECK(std::string(steps[1].node->name()) == "add");
  const auto& acc = steps[2];
  CHECK(std::string(acc.node->name()) == "AccumulateGrad");
  CHECK(acc.leaf == &a.impl());
  REQUIRE(acc.incoming.size() == 2);  // one per operand of add
  CHECK(acc.incoming[0].from == steps[1].node.get());
  CHECK(acc.incoming[0].input == 0);
  CHECK(acc.incoming[1].input == 1);
  CHECK(vals(acc.incoming[0].grad) == Vec{1, 1, 1});
  CHECK(vals(acc.incoming[1].grad) == Vec{1, 1, 1});
  CHECK(vals(acc.grad) == Vec{2, 2, 2});
  CHECK(vals(acc.leaf_grad) == vals(a.grad()));
}

TEST_CASE("the backward order is the engine's own: the observer hears the same nodes in the same order") {
  Tensor x = gs::tensor({0.5, 1.5}, kLeaf);
  Tensor w = gs::tensor({2.0, -1.0}, kLeaf);
  Order order;
  gs::autograd::GraphTrace trace;
  Tensor h = gs::tanh(x * w);
  Tensor loss = (h * h + h * x).sum();  // h is used three times, x twice
  {
    gs::ObserverGuard g(&order);
    loss.backward();
  }
  std::vector<const gs::Node*> ran;
  for (const auto& s : trace.backward())
    if (s.ran) ran.push_back(s.node.get());
  CHECK(ran == order.nodes);
  // A topological order: every node runs after each node that sends it a gradient.
  for (size_t i = 0; i < trace.backward().size(); ++i)
    for (const auto& c : trace.backward()[i].incoming) {
      if (c.from == nullptr) continue;
      bool before = false;
      for (size_t j = 0; j < i; ++j) before = before || trace.backward()[j].node.get() == c.from;
      CHECK(before);
    }
  // h's tanh node receives three contributions (h * h twice, h * x once) whose sum is what it ran with.
  bool seen_tanh = false;
  for (const auto& s : trace.backward()) {
    if (std::string(s.node->name()) != "tanh") continue;
    seen_tanh = true;
    REQUIRE(s.incoming.size() == 3);
    Tensor total = s.incoming[0].grad + s.incoming[1].grad + s.incoming[2].grad;
    CHECK(vals(total) == vals(s.grad));
  }
  CHECK(seen_tanh);
  // The leaves' last copies equal their final .grad.
  for (const auto& s : trace.backward())
    if (s.leaf == &x.impl()) CHECK(vals(s.leaf_grad) == vals(x.grad()));
}

TEST_CASE("views, in-place ops and versions are recorded as the forward saw them") {
  Tensor a = gs::tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3}, kLeaf);
  gs::autograd::GraphTrace trace;
  Tensor b = a * 2.0;
  Tensor t = b.transpose(0, 1);  // a view of b: same storage, swapped strides
  Tensor c = b.exp();
  c.mul_(3.0);  // in place: c's version moves to 1
  trace.stop();
  Tensor d = c + 1.0;  // after stop(): not recorded
  const auto& f = trace.forward();
  REQUIRE(f.size() == 4);
  CHECK(std::string(f[1].node->name()) != "");
  CHECK(f[1].output.is_view);
  CHECK(f[1].output.storage == f[0].output.storage);
  CHECK(f[1].output.strides == gs::Strides{1, 3});
  CHECK(f[3].inplace);
  CHECK(f[3].output.version == 1);
  CHECK(f[3].inputs[0].impl == &c.impl());
  CHECK(f[3].output.requires_grad);
  CHECK_FALSE(trace.active());
}

TEST_CASE("nested traces: the inner one records, the outer resumes after it; none costs a graph") {
  Tensor a = gs::tensor({1.0}, kLeaf);
  gs::autograd::GraphTrace outer;
  Tensor b = a * 3.0;
  {
    gs::autograd::GraphTrace inner;
    Tensor c = b * 2.0;
    CHECK(inner.forward().size() == 1);
  }
  Tensor d = b + 1.0;
  CHECK(outer.forward().size() == 2);  // mul and add, not the inner mul
  CHECK(gs::autograd::GraphTrace::current() == &outer);
  outer.stop();
  CHECK(gs::autograd::GraphTrace::current() == nullptr);
}

TEST_CASE("gradients that accumulate over two backward passes: each pass's steps, the .grad after each") {
  Tensor a = gs::tensor({1.0, 2.0}, kLeaf);
  gs::autograd::GraphTrace trace;
  (a * 3.0).sum().backward();
  (a * a).sum().backward();  // adds 2a: .grad = 3 + 2a
  CHECK(trace.passes() == 2);
  std::vector<Vec> leaf_grads;
  for (const auto& s : trace.backward())
    if (s.leaf == &a.impl()) leaf_grads.push_back(vals(s.leaf_grad));
  REQUIRE(leaf_grads.size() == 2);
  CHECK(leaf_grads[0] == Vec{3, 3});
  CHECK(leaf_grads[1] == Vec{5, 7});
}

TEST_CASE("accumulated_leaf: the leaf behind an AccumulateGrad node; undefined for any other node") {
  Tensor w = gs::randn({3, 2}).requires_grad_(true);
  Tensor x = gs::randn({3, 2});
  Tensor y = (w * x).sum();
  CHECK_FALSE(gs::autograd::accumulated_leaf(*y.grad_fn()).defined());  // sum
  const gs::Node& mul = *y.grad_fn()->next_edges.at(0).fn;
  CHECK_FALSE(gs::autograd::accumulated_leaf(mul).defined());
  int found = 0;
  for (const gs::Edge& e : mul.next_edges) {
    if (!e.fn) continue;  // x needs no gradient
    const Tensor leaf = gs::autograd::accumulated_leaf(*e.fn);
    REQUIRE(leaf.defined());
    CHECK(leaf.impl_ptr() == w.impl_ptr());
    ++found;
  }
  CHECK(found == 1);
}
