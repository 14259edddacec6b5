// A picture of the autograd graph, in the manner of micrograd's draw_dot: every op
// node with its name, output shape and dtype, the module that ran it and (when the
// forward ran under a SavedCapture) the tensors it saved for backward; every leaf
// with its parameter name, shape and version counter; edges from each op to the ops
// and leaves its gradient flows to. Nodes a check named are drawn in red.
//
//   SavedCapture saved;                  // optional: list what each op saved
//   Tensor loss = criterion(model(x), y);
//   saved.stop();
//   std::string dot = debug::to_dot(loss, debug::DotOptions().params(model.named_parameters()).saved(&saved));
//   debug::write_graph("graph", dot);    // graph.svg when Graphviz's `dot` is installed, else graph.dot
//
// `gradsleuth graph --model mlp --bug B13` draws the zoo's model with a bug switched on and the
// module the pre-training gate blamed highlighted. Op nodes learn their module when the forward
// ran under a debug::GraphModuleTags (or the anomaly mode, W4): otherwise they carry no module.
#pragma once
#include <cstddef>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/saved_capture.h"
#include "core/tensor.h"
#include "debug/checks/model/anomaly.h"

namespace gradsleuth::nn {
class Module;
}

namespace gradsleuth::debug {

struct Finding;

struct DotOptions {
  // Leaves are named by matching them to these (Module::named_parameters()).
  DotOptions& params(std::vector<std::pair<std::string, Tensor>> p) {
    params_ = std::move(p);
    return *this;
  }
  // Draws in red the op nodes of a module a finding names (its module path, "3" or
  // "encoder.fc1"), the ops of its op name, and the leaf of its parameter. A finding that names
  // a module and an op means that op inside the module: those nodes get a double border, and the
  // same op elsewhere (another module's view) stays as it is.
  DotOptions& highlight(const Finding& f);
  DotOptions& highlight_module(std::string path) {
    modules_.insert(std::move(path));
    return *this;
  }
  // Lists in each op node what its backward saved (recorded while the capture was active).
  DotOptions& saved(const SavedCapture* c) {
    saved_ = c;
    return *this;
  }
  DotOptions& max_nodes(size_t n) {
    max_nodes_ = n;
    return *this;
  }
  DotOptions& title(std::string t) {
    title_ = std::move(t);
    return *this;
  }

  std::vector<std::pair<std::string, Tensor>> params_;
  std::set<std::string> modules_, ops_, parameters_;
  std::set<std::pair<std::string, std::string>> module_ops_;  // {module path, op}
  const SavedCapture* saved_ = nullptr;
  size_t max_nodes_ = 400;  // larger graphs are cut, saying how many nodes were left out
  std::string title_;
};

// The graph behind `root` (its grad_fn and everything it reaches) in Graphviz's DOT language.
// A tensor with no history gives a graph of one node.
std::string to_dot(const Tensor& root, const DotOptions& o = {});

// Tags each op node with the module that ran it while the guard lives (attached to `model`).
class GraphModuleTags {
 public:
  explicit GraphModuleTags(nn::Module& model);
  ~GraphModuleTags();
  GraphModuleTags(const GraphModuleTags&) = delete;
  GraphModuleTags& operator=(const GraphModuleTags&) = delete;

 private:
  AnomalyMode tags_;
  std::unique_ptr<Scope> scope_;
};

// True when Graphviz's `dot` is on the PATH.
bool have_graphviz();
// The SVG Graphviz renders from `dot`; raises naming the failure when `dot` is missing or fails.
std::string dot_to_svg(const std::string& dot);
// Writes `base`.svg when Graphviz is installed, else `base`.dot (atomically); returns the path written.
std::string write_graph(const std::string& base, const std::string& dot);

}  // namespace gradsleuth::debug
