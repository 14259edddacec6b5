// Tests for core/observer.h: what an OpObserver is told about forward ops
// (names, operands, outputs, broadcast expansion, in-place) and backward nodes,
// and that detaching it stops the events.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/observer.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace {

using gs::Tensor;
using IVec = std::vector<int64_t>;

// Copies what it is told: the event's pointers are valid only during the call.
struct Recorder : gs::OpObserver {
  struct Op {
    std::string name;
    std::vector<IVec> inputs;
    IVec output;
    const void* output_storage;
    uint32_t expanded_mask;
    bool inplace;
  };
  struct Backward {
    std::string node;
    IVec grad_output;
    std::vector<IVec> grad_inputs;  // {} for an undefined gradient
  };
  std::vector<Op> ops;
  std::vector<Backward> backwards;

  void on_op(const gs::OpEvent& e) override {
    Op op{e.op, {}, e.output->shape().vec(), e.output->storage().get(), e.expanded_mask, e.inplace};
    for (size_t i = 0; i < e.num_inputs; ++i) op.inputs.push_back(e.input(i).shape().vec());
    ops.push_back(op);
  }
  void on_backward(const gs::BackwardEvent& e) override {
    Backward b{e.node->name(), e.grad_output->shape().vec(), {}};
    for (size_t i = 0; i < e.num_grad_inputs; ++i)
      b.grad_inputs.push_back(e.grad_inputs[i].defined() ? e.grad_inputs[i].shape().vec() : IVec{});
    backwards.push_back(b);
  }
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const Op& o : ops) n.push_back(o.name);
    return n;
  }
  const Op* find(const std::string& name) const {
    for (const Op& o : ops)
      if (o.name == name) return &o;
    return nullptr;
  }
};

}  // namespace

TEST_CASE("an observer sees each op with its operands and output") {
  Recorder rec;
  CHECK_FALSE(gs::observers_active());
  Tensor a = gs::ones({2, 3}), b = gs::ones({3, 4});
  Tensor c, r, s;
  {
    gs::ObserverGuard guard(&rec);
    CHECK(gs::observers_active());
    c = gs::matmul(a, b);
    r = gs::relu(c);
    s = gs::sum(r, {1});
  }
  REQUIRE(rec.ops.size() == 3);
  CHECK(rec.names() == std::vector<std::string>{"matmul", "relu", "sum"});
  const Recorder::Op& mm = rec.ops[0];
  CHECK(mm.inputs == std::vector<IVec>{{2, 3}, {3, 4}});
  CHECK(mm.output == IVec{2, 4});
  CHECK(mm.output_storage == c.storage().get());  // the event's output is the op's result
  CHECK(mm.expanded_mask == 0);
  CHECK_FALSE(mm.inplace);
  CHECK(rec.ops[1].inputs == std::vector<IVec>{{2, 4}});
  CHECK(rec.ops[1].output_storage == r.storage().get());
  CHECK(rec.ops[2].output == IVec{2});
}

TEST_CASE("views, scalars, comparisons and in-place ops are reported too") {
  Recorder rec;
  Tensor x = gs::ones({2, 3});
  {
    gs::ObserverGuard guard(&rec);
    Tensor t = x.t();
    Tensor y = x * 2.0;  // the scalar appears as a 0-dim operand, expanded to the output
    Tensor m = x > 0.5;
    y.add_(gs::ones({3}));
  }
  const Recorder::Op* t = rec.find("transpose");
  REQUIRE(t != nullptr);
  CHECK(t->output == IVec{3, 2});
  CHECK(t->output_storage == x.storage().get());  // a view shares storage
  const Recorder::Op* mul = rec.find("mul");
  REQUIRE(mul != nullptr);
  REQUIRE(mul->inputs.size() == 2);
  CHECK(mul->inputs[1].empty());
  CHECK(mul->expanded_mask == 2u);
  const Recorder::Op* gt = rec.find("gt");
  REQUIRE(gt != nullptr);
  CHECK(gt->output == IVec{2, 3});
  const Recorder::Op* inplace = rec.find("add_");
  REQUIRE(inplace != nullptr);
  CHECK(inplace->inplace);
  CHECK(inplace->expanded_mask == 2u);  // the (3) operand was broadcast over the rows
  CHECK(inplace->output == IVec{2, 3});
}

TEST_CASE("expanded_mask marks the operands broadcasting expanded") {
  Recorder rec;
  {
    gs::ObserverGuard guard(&rec);
    Tensor outer = gs::zeros({100, 1}) + gs::zeros({1, 100});  // both expanded
    Tensor bias = gs::zeros({8, 5}) + gs::zeros({5});          // (B, N) + (N): only the bias
    Tensor first = gs::zeros({5}) * gs::zeros({8, 5});         // only the first
    Tensor none = gs::zeros({8, 5}) - gs::zeros({8, 5});
    Tensor ones_dim = gs::zeros({1, 5}) * gs::zeros({1, 5});  // size-1 dims but nothing expanded
    Tensor w = gs::where(gs::zeros({4, 1}, gs::kBool), gs::zeros({1, 6}), gs::zeros({4, 6}));
  }
  REQUIRE(rec.ops.size() >= 6);
  auto mask_of = [&](const std::string& name, const IVec& a) -> int64_t {
    for (const auto& o : rec.ops)
      if (o.name == name && !o.inputs.empty() && o.inputs[0] == a) return o.expanded_mask;
    return -1;
  };
  CHECK(mask_of("add", {100, 1}) == 3);
  CHECK(mask_of("add", {8, 5}) == 2);
  CHECK(mask_of("mul", {5}) == 1);
  CHECK(mask_of("sub", {8, 5}) == 0);
  CHECK(mask_of("mul", {1, 5}) == 0);
  CHECK(mask_of("where", {4, 1}) == (1 | 2));  // condition and a expanded, b not
}

TEST_CASE("backward events name the nodes and carry their gradients") {
  Recorder rec;
  Tensor x = gs::ones({3}, gs::TensorOptions().requires_grad(true));
  Tensor w = gs::full({3}, 2.0, gs::TensorOptions().requires_grad(true));
  Tensor loss = (x * w).sum();
  {
    gs::ObserverGuard guard(&rec);
    loss.backward();
  }
  std::vector<std::string> nodes;
  for (const auto& b : rec.backwards) nodes.push_back(b.node);
  REQUIRE(nodes.size() == 4);
  CHECK(nodes[0] == "sum");
  CHECK(nodes[1] == "mul");
  CHECK(nodes[2] == "AccumulateGrad");
  CHECK(nodes[3] == "AccumulateGrad");
  CHECK(rec.backwards[0].grad_output.empty());  // d loss / d loss: 0-dim
  CHECK(rec.backwards[0].grad_inputs == std::vector<IVec>{{3}});
  CHECK(rec.backwards[1].grad_output == IVec{3});
  CHECK(rec.backwards[1].grad_inputs == std::vector<IVec>{{3}, {3}});
  // The backward's own ops (run under no-grad) are reported as ops too.
  CHECK(rec.find("mul") != nullptr);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 2, 2});
}

TEST_CASE("removing an observer stops the events") {
  Recorder a, b;
  {
    gs::ObserverGuard ga(&a);
    {
      gs::ObserverGuard gb(&b);
      Tensor t = gs::ones({2}) + gs::ones({2});
    }
    CHECK(a.ops.size() == 1);
    CHECK(b.ops.size() == 1);
    Tensor u = gs::ones({2}) * gs::ones({2});  // only a still listens
    CHECK(a.ops.size() == 2);
    CHECK(b.ops.size() == 1);
  }
  CHECK_FALSE(gs::observers_active());
  Tensor v = gs::ones({2}) - gs::ones({2});
  Tensor x = gs::ones({2}, gs::TensorOptions().requires_grad(true));
  (x * x).sum().backward();
  CHECK(a.ops.size() == 2);
  CHECK(a.backwards.empty());
  CHECK(b.ops.size() == 1);

  // add_observer / remove_observer by hand.
  Recorder c;
  gs::add_observer(&c);
  Tensor w = gs::exp(gs::ones({2}));
  gs::remove_observer(&c);
  Tensor z = gs::exp(gs::ones({2}));
  CHECK(c.names() == std::vector<std::string>{"exp"});
  CHECK_FALSE(gs::observers_active());
  gs::remove_observer(&c);  // removing twice is harmless
  CHECK_FALSE(gs::observers_active());
}

TEST_CASE("an observer may detach itself from inside its callback") {
  struct OneShot : gs::OpObserver {
    int calls = 0;
    void on_op(const gs::OpEvent&) override {
      ++calls;
      gs::remove_observer(this);
    }
  } once;
  gs::add_observer(&once);
  Tensor t = gs::ones({2}) + gs::ones({2});
  Tensor u = gs::ones({2}) + gs::ones({2});
  CHECK(once.calls == 1);
  CHECK_FALSE(gs::observers_active());
}
