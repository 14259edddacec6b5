// debug::to_dot: the autograd graph as DOT (ops, shapes, modules, leaves with their
// version counters), highlighting what a finding names; and `gradsleuth graph`.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/saved_capture.h"
#include "debug/checks/model/model_checks.h"
#include "debug/evidence/finding.h"
#include "debug/report/graph.h"
#include "nn/nn.h"

namespace nn = gs::nn;
namespace debug = gs::debug;
using gs::Tensor;

namespace {
size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}
// The line that declares the node whose label contains `text`.
std::string line_with(const std::string& dot, const std::string& text) {
  const size_t p = dot.find(text);
  if (p == std::string::npos) return "";
  const size_t b = dot.rfind('\n', p) + 1, e = dot.find('\n', p);
  return dot.substr(b, e - b);
}
}  // namespace

TEST_CASE("to_dot draws every op once, with shapes, and names the leaves it is given") {
  gs::manual_seed(1);
  Tensor w = gs::randn({3, 4}).requires_grad_(true);
  Tensor x = gs::randn({2, 3});
  gs::SavedCapture saved;
  Tensor y = gs::relu(gs::matmul(x, w));
  Tensor loss = gs::sum(y * y);
  saved.stop();
  Tensor after = y * 2.0;  // recorded after stop(): nothing captured for it
  const std::string dot = debug::to_dot(loss, debug::DotOptions().params({{"w", w}}).saved(&saved));
  CAPTURE(dot);
  CHECK(dot.rfind("digraph autograd {", 0) == 0);
  CHECK(dot.back() == '\n');
  CHECK(count(dot, "{") == count(dot, "}"));
  // One node per op: matmul, relu, mul, sum; the leaf w with its shape and version.
  for (const char* op : {"\"matmul\\n", "\"relu\\n", "\"mul\\n", "\"sum\\n"}) CHECK(count(dot, op) == 1);
  CHECK(dot.find("float32[2, 4]") != std::string::npos);  // matmul's output
  CHECK(dot.find("w\\nfloat32[3, 4]\\nversion 0") != std::string::npos);
  CHECK(dot.find("output float32[]") != std::string::npos);
  // What each op saved for backward: mul both operands (relu's output, twice), relu one tensor,
  // matmul only x: w's gradient needs x, and x needs no gradient, so w is not kept.
  CHECK(dot.find("\"mul\\nfloat32[2, 4]\\nsaved float32[2, 4] v0\\nsaved float32[2, 4] v0\"") != std::string::npos);
  CHECK(dot.find("\"matmul\\nfloat32[2, 4]\\nsaved float32[2, 3] v0\"") != std::string::npos);
  CHECK(saved.saved(after.grad_fn().get()) == nullptr);
  CHECK(saved.saved(loss.grad_fn().get()) != nullptr);
  // Without the capture the labels list nothing saved.
  CHECK(debug::to_dot(loss).find("saved ") == std::string::npos);
  // y * y: relu feeds mul through two edges.
  CHECK(count(dot, " -> ") >= 5);
  // An in-place change shows in the leaf's version counter.
  {
    gs::NoGradGuard ng;
    w.add_(1.0);
  }
  CHECK(debug::to_dot(loss, debug::DotOptions().params({{"w", w}})).find("version 1") != std::string::npos);
  // Nothing is red without a finding.
  CHECK(dot.find("color=red") == std::string::npos);
}

TEST_CASE("to_dot tags ops with their module under GraphModuleTags and highlights a finding's module") {
  gs::manual_seed(2);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 5), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(5, 2));
  Tensor x = gs::randn({3, 4});
  Tensor out;
  {
    debug::GraphModuleTags tags(*model);
    out = gs::sum((*model)(x));
  }
  debug::Finding f;
  f.check = "M6";
  f.module = "2";
  const std::string dot = debug::to_dot(out, debug::DotOptions().params(model->named_parameters()).highlight(f));
  CAPTURE(dot);
  CHECK(dot.find("in 0 (Linear)") != std::string::npos);
  CHECK(dot.find("in 2 (Linear)") != std::string::npos);
  CHECK(dot.find("2.weight\\nfloat32[2, 5]") != std::string::npos);
  // Ops of module 2 are red, those of module 0 are not.
  const std::string in2 = line_with(dot, "in 2 (Linear)"), in0 = line_with(dot, "in 0 (Linear)");
  CHECK(in2.find("color=red") != std::string::npos);
  CHECK(in0.find("color=red") == std::string::npos);
  // A parameter finding marks its leaf.
  debug::Finding p;
  p.parameter = "0.bias";
  const std::string dot2 = debug::to_dot(out, debug::DotOptions().params(model->named_parameters()).highlight(p));
  CHECK(line_with(dot2, "0.bias\\n").find("color=red") != std::string::npos);
  CHECK(line_with(dot2, "0.weight\\n").find("color=red") == std::string::npos);
}

TEST_CASE("to_dot: tensors without history, the node cap, and labels that need escaping") {
  Tensor leaf = gs::ones({2}).requires_grad_(true);
  CHECK(debug::to_dot(leaf).find("a leaf: no history") != std::string::npos);
  CHECK(debug::to_dot(gs::ones({2})).find("does not require grad") != std::string::npos);
  CHECK_THROWS_AS(debug::to_dot(Tensor()), gs::Error);
  Tensor t = leaf;
  for (int i = 0; i < 50; ++i) t = t * 1.5;
  const std::string cut = debug::to_dot(gs::sum(t), debug::DotOptions().max_nodes(10).title("a \"quoted\" title"));
  CHECK(count(cut, "\"mul\\n") <= 10);
  CHECK(cut.find("more nodes not drawn (max_nodes 10)") != std::string::npos);
  CHECK(cut.find("label=\"a \\\"quoted\\\" title\"") != std::string::npos);
}

TEST_CASE("M6 names the module that mixes the batch, and the graph draws that module's ops in red") {
  gs::manual_seed(3);
  auto mixer = std::make_shared<nn::Linear>(5, 4);
  mixer->inject_bug(nn::Bug::B13);  // reshape where a transpose was meant
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 5), std::make_shared<nn::ReLU>(), mixer,
                                                std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(4, 3));
  Tensor x = gs::randn({8, 6});
  const std::vector<debug::Finding> fs = debug::batch_mixing_test(*model, x);
  auto err = std::find_if(fs.begin(), fs.end(), [](const debug::Finding& f) { return f.fires(); });
  REQUIRE(err != fs.end());
  CHECK(err->check == "M6");
  CHECK(err->module == "2 (Linear)");  // the layer whose rows mix when it runs alone, not the layers after it
  CHECK(err->fix.find("in 2 (Linear)") != std::string::npos);
  CHECK(err->op == "view");  // the reshape from [4, 8] to [8, 4]: rows made of a tensor whose dim 0 is not the batch
  CHECK(err->location() == "module 2 (Linear), op view, shape [8, 6]");
  Tensor out;
  {
    debug::GraphModuleTags tags(*model);
    out = gs::sum((*model)(x));
  }
  const std::string dot = debug::to_dot(out, debug::DotOptions().params(model->named_parameters()).highlight(*err));
  CAPTURE(dot);
  // The module's ops are red, the reshape that interleaves the rows with a double border;
  // module 0's ops are not red.
  CHECK(line_with(dot, "in 2 (Linear)").find("color=red") != std::string::npos);
  CHECK(count(dot, "color=red") >= 2);
  const std::string reshape = line_with(dot, "label=\"view\\n");
  CHECK(reshape.find("in 2 (Linear)") != std::string::npos);
  CHECK(reshape.find("peripheries=2") != std::string::npos);
  CHECK(count(dot, "peripheries=2") == 1);
  CHECK(line_with(dot, "in 0 (Linear)").find("color=red") == std::string::npos);
  // A softmax over the batch dim: the module is named, no reshape is.
  auto head = std::make_shared<nn::LogSoftmax>(1);
  head->inject_bug(nn::Bug::B14);
  auto soft = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 3), head);
  const std::vector<debug::Finding> fs14 = debug::batch_mixing_test(*soft, x);
  auto err14 = std::find_if(fs14.begin(), fs14.end(), [](const debug::Finding& f) { return f.fires(); });
  REQUIRE(err14 != fs14.end());
  CHECK(err14->module == "1 (LogSoftmax)");
  CHECK(err14->op.empty());
  // A clean model names nothing.
  auto clean = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 5), std::make_shared<nn::ReLU>());
  for (const debug::Finding& f : debug::batch_mixing_test(*clean, x)) CHECK_FALSE(f.fires());
}
