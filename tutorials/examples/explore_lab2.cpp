// Lab 2's explorer: a small network built from your ops (tutorials/lab2_autograd/lab2.cpp) is run
// forward and backward, and the autograd explorer's page (debug/report/explore.h) is written for
// it: step through *your* backward, node by node. Then each gradient your backward produced is
// compared with the engine's own ops on the same network, and the first node (in the order the
// engine ran the backward) where they differ is named.
//   build/tutorials/explore_lab2 [PAGE.html]        (default: lab2_explore.html)
// A stub that still throws "not implemented" stops the forward: the page then shows the graph up
// to that op, marked. Exit status: 0 when every gradient matches, 1 otherwise.
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/report/explore.h"
#include "tutorials/lab2_autograd/lab2.h"

namespace gs = gradsleuth;
using gs::Tensor;

namespace {

// The network, with either your ops or the engine's: every intermediate is used once, so the
// gradient that arrives at each node is the whole gradient of its output.
struct Net {
  Tensor x, t, w1, w2;
  std::vector<std::pair<std::string, Tensor>> steps;  // each intermediate, in forward order
  Tensor loss;
};

Net make(bool yours) {
  gs::manual_seed(7);
  const gs::TensorOptions f64 = gs::TensorOptions().dtype(gs::kFloat64);
  Net n;
  n.x = gs::randn({4, 3}, f64).set_name("x");
  n.t = gs::softmax(gs::randn({4, 2}, f64), 1).set_name("t");
  n.w1 = gs::randn({3, 5}, f64.requires_grad(true)).set_name("w1");
  n.w2 = gs::randn({5, 2}, f64.requires_grad(true)).set_name("w2");
  auto keep = [&](const char* name, Tensor v) {
    v.retain_grad();
    n.steps.push_back({name, v});
    return v;
  };
  namespace l2 = gs::lab2;
  Tensor h1 = keep("x @ w1", yours ? l2::matmul(n.x, n.w1) : gs::matmul(n.x, n.w1));
  Tensor a1 = keep("tanh", yours ? l2::tanh(h1) : gs::tanh(h1));
  Tensor h2 = keep("a1 @ w2", yours ? l2::matmul(a1, n.w2) : gs::matmul(a1, n.w2));
  Tensor p = keep("softmax", yours ? l2::softmax(h2, 1) : gs::softmax(h2, 1));
  Tensor q = keep("p * t", yours ? l2::mul(p, n.t) : gs::mul(p, n.t));
  Tensor s = keep("sum dim 1", yours ? l2::sum(q, 1) : gs::sum(q, {1}));
  n.loss = yours ? l2::sum(s, 0) : gs::sum(s, {0});
  return n;
}

double max_diff(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return INFINITY;
  return gs::amax(gs::abs(a - b)).item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string page = argc > 1 ? argv[1] : "lab2_explore.html";
  gs::debug::ExploreCapture cap;
  Net mine;
  std::string failed;
  try {
    mine = make(true);
    mine.loss.backward();
  } catch (const std::exception& e) {
    cap.failed(e, mine.loss.defined() ? "backward" : "forward");
    failed = e.what();
  }
  cap.stop();
  gs::debug::ExploreOptions o;
  o.title = "lab 2: your backward";
  o.params = {{"w1", mine.w1}, {"w2", mine.w2}};
  gs::debug::write_explore(page, gs::debug::explore_json(cap, mine.loss, o), o.title);
  std::printf("explore_lab2: wrote %s (open it in a browser; press b, then the right arrow)\n", page.c_str());
  if (!failed.empty()) {
    std::printf("explore_lab2: your network stopped: %s\n", failed.c_str());
    return 1;
  }

  // The engine's gradients on the same network, and the first node where yours part from them.
  Net ref = make(false);
  ref.loss.backward();
  std::vector<std::pair<const gs::Node*, std::string>> names = gs::debug::explore_node_names(cap, mine.loss, o);
  auto name_of = [&](const gs::Node* n) {
    for (const auto& [node, name] : names)
      if (node == n) return name;
    return std::string("?");
  };
  const double tol = 1e-8;
  for (const auto& s : cap.trace().backward()) {  // the engine's order
    // Which tensor's gradient this node received: an intermediate, or a weight at its accumulator.
    for (size_t i = 0; i < mine.steps.size(); ++i) {
      if (mine.steps[i].second.grad_fn().get() != s.node.get()) continue;
      const double d = max_diff(mine.steps[i].second.grad(), ref.steps[i].second.grad());
      if (d <= tol) break;
      const std::string sender = s.incoming.empty() ? "?" : name_of(s.incoming[0].from);
      std::printf(
          "explore_lab2: the gradient first differs at node %s (the output of %s): the gradient it "
          "received from %s is off by up to %.3g; check the backward of %s\n",
          name_of(s.node.get()).c_str(), mine.steps[i].first.c_str(), sender.c_str(), d, sender.c_str());
      return 1;
    }
    for (const auto& [w, rw, name] : {std::tuple{mine.w1, ref.w1, "w1"}, std::tuple{mine.w2, ref.w2, "w2"}})
      if (s.leaf == &w.impl() && max_diff(w.grad(), rw.grad()) > tol) {
        const std::string sender = s.incoming.empty() ? "?" : name_of(s.incoming[0].from);
        std::printf(
            "explore_lab2: your gradient for %s differs first at node %s: it arrived from %s, off by up to "
            "%.3g; check the backward of %s\n",
            name, name_of(s.node.get()).c_str(), sender.c_str(), max_diff(w.grad(), rw.grad()), sender.c_str());
        return 1;
      }
  }
  std::printf("explore_lab2: every gradient of the network matches the engine's (within %g)\n", tol);
  return 0;
}
