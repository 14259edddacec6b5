// The autograd graph in Graphviz's DOT language (see graph.h).
#include "debug/report/graph.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd.h"
#include "core/io.h"
#include "debug/evidence/finding.h"
#include "nn/module.h"

namespace gradsleuth::debug {

namespace {

// DOT's quoted strings: backslashes and quotes escaped, newlines as \n.
std::string q(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

// "3 (Linear)" -> "3": the module path of a node's context label.
std::string module_path_of(const std::string& label) {
  const size_t p = label.find(" (");
  return p == std::string::npos ? label : label.substr(0, p);
}

// A module path is highlighted when it is one of the named ones or inside one ("3" covers "3.inner").
bool in_module(const std::string& path, const std::set<std::string>& modules) {
  for (const std::string& m : modules)
    if (path == m || m == "(model)" ||
        (path.size() > m.size() && path.compare(0, m.size(), m) == 0 && path[m.size()] == '.'))
      return true;
  return false;
}

}  // namespace

DotOptions& DotOptions::highlight(const Finding& f) {
  if (!f.module.empty()) modules_.insert(module_path_of(f.module));  // "1 (Linear)" -> "1"
  if (!f.op.empty() && !f.module.empty())
    module_ops_.insert({module_path_of(f.module), f.op});
  else if (!f.op.empty())
    ops_.insert(f.op);
  if (!f.parameter.empty()) parameters_.insert(f.parameter);
  return *this;
}

std::string to_dot(const Tensor& root, const DotOptions& o) {
  GS_CHECK(root.defined(), "to_dot", "the tensor is undefined: pass the output whose graph to draw (e.g. the loss)");
  // Leaves by their accumulator node: gradient_edge gives a leaf's shared accumulator.
  std::unordered_map<const Node*, std::pair<std::string, Tensor>> leaves;
  for (const auto& [name, p] : o.params_)
    if (p.defined() && p.requires_grad() && p.is_leaf())
      if (const Edge e = gradient_edge(p); e.fn) leaves.emplace(e.fn.get(), std::make_pair(name, p));

  std::ostringstream os;
  os << "digraph autograd {\n  rankdir=BT;\n  node [fontname=\"Helvetica\", fontsize=10];\n";
  if (!o.title_.empty()) os << "  labelloc=t; label=" << q(o.title_) << ";\n";
  // The output tensor.
  os << "  out [shape=box, style=filled, fillcolor=\"#e8f0fe\", label="
     << q("output " + std::string(dtype_name(root.dtype())) + shape_str(root.shape()) + "\nversion " +
          std::to_string(root.version()))
     << "];\n";
  if (!root.grad_fn()) {
    os << "  note [shape=plaintext, label="
       << q(root.requires_grad() ? "a leaf: no history" : "no graph: the tensor does not require grad") << "];\n}\n";
    return os.str();
  }

  std::unordered_map<const Node*, size_t> id;
  std::vector<const Node*> order;  // breadth first from the output
  auto visit = [&](const Node* n) {
    if (!n || id.count(n)) return;
    id.emplace(n, order.size());
    order.push_back(n);
  };
  visit(root.grad_fn().get());
  size_t left_out = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    if (order.size() >= o.max_nodes_) break;
    for (const Edge& e : order[i]->next_edges) visit(e.fn.get());
  }
  // Count what the cut left out (nodes reachable but not drawn).
  {
    std::unordered_set<const Node*> seen(order.begin(), order.end());
    std::vector<const Node*> todo(order.begin(), order.end());
    while (!todo.empty()) {
      const Node* n = todo.back();
      todo.pop_back();
      for (const Edge& e : n->next_edges)
        if (e.fn && seen.insert(e.fn.get()).second) {
          ++left_out;
          todo.push_back(e.fn.get());
        }
    }
  }

  for (const Node* n : order) {
    const size_t i = id.at(n);
    const std::string name = n->name();
    if (auto it = leaves.find(n); it != leaves.end() || name == "AccumulateGrad") {
      std::string label = "leaf";
      bool red = false;
      if (it != leaves.end()) {
        const Tensor& p = it->second.second;
        label = it->second.first + "\n" + dtype_name(p.dtype()) + shape_str(p.shape()) + "\nversion " +
                std::to_string(p.version());
        red = o.parameters_.count(it->second.first) > 0;
      } else {
        label += " " + std::string(dtype_name(n->out_dtype)) + shape_str(n->out_shape);
      }
      os << "  n" << i << " [shape=box, style=\"rounded,filled\", fillcolor=" << (red ? "\"#f8d0d0\"" : "\"#eeeeee\"")
         << (red ? ", color=red, penwidth=2" : "") << ", label=" << q(label) << "];\n";
      continue;
    }
    const std::string module = n->context;
    const bool red = o.ops_.count(name) > 0 || (!module.empty() && in_module(module_path_of(module), o.modules_));
    bool named_op = false;  // the op a finding names inside its module
    for (const auto& [m, op] : o.module_ops_)
      named_op = named_op || (op == name && !module.empty() && in_module(module_path_of(module), {m}));
    std::string label = name + "\n" + dtype_name(n->out_dtype) + shape_str(n->out_shape);
    if (!module.empty()) label += "\nin " + module;
    if (n->released()) {
      label += "\n(saved tensors freed)";
    } else if (o.saved_) {
      if (const std::vector<SavedInfo>* saved = o.saved_->saved(n)) {
        for (size_t k = 0; k < saved->size() && k < 4; ++k) {
          const SavedInfo& si = (*saved)[k];
          label += "\nsaved " + std::string(si.is_output ? "output " : "") + dtype_name(si.dtype) +
                   shape_str(si.shape) + " v" + std::to_string(si.version);
        }
        if (saved->size() > 4) label += "\n+" + std::to_string(saved->size() - 4) + " more saved";
      }
    }
    os << "  n" << i << " [shape=ellipse" << (red ? ", style=filled, fillcolor=\"#f8d0d0\", color=red, penwidth=2" : "")
       << (named_op ? ", peripheries=2" : "") << ", label=" << q(label) << "];\n";
  }
  os << "  n" << id.at(root.grad_fn().get()) << " -> out;\n";
  for (const Node* n : order)
    for (const Edge& e : n->next_edges)
      if (e.fn && id.count(e.fn.get()))
        os << "  n" << id.at(e.fn.get()) << " -> n" << id.at(n) << " [tooltip=" << q(shape_str(e.shape)) << "];\n";
  if (left_out > 0)
    os << "  cut [shape=plaintext, label="
       << q(std::to_string(left_out) + " more nodes not drawn (max_nodes " + std::to_string(o.max_nodes_) + ")")
       << "];\n";
  os << "}\n";
  return os.str();
}

GraphModuleTags::GraphModuleTags(nn::Module& model) : tags_(AnomalyOptions{false, false, false, 0}) {
  tags_.attach(model);
  scope_ = tags_.enable();
}

GraphModuleTags::~GraphModuleTags() {
  scope_.reset();
  tags_.detach();
}

bool have_graphviz() { return std::system("command -v dot >/dev/null 2>&1") == 0; }

std::string dot_to_svg(const std::string& dot) {
  GS_CHECK(have_graphviz(), "dot_to_svg",
           "Graphviz's `dot` is not installed (apt-get install graphviz); write the "
           "DOT text instead (write_graph does that by itself)");
  char in_path[] = "/tmp/gradsleuth_graph_XXXXXX";
  const int fd = ::mkstemp(in_path);
  GS_CHECK(fd >= 0, "dot_to_svg", "cannot create a temporary file in /tmp");
  ::close(fd);
  {
    std::ofstream f(in_path);
    f << dot;
  }
  const std::string out_path = std::string(in_path) + ".svg";
  const std::string cmd = "dot -Tsvg -o '" + out_path + "' '" + in_path + "' 2>/dev/null";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(out_path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(in_path);
  std::remove(out_path.c_str());
  GS_CHECK(rc == 0 && !ss.str().empty(), "dot_to_svg", "Graphviz's dot failed (exit status ", rc, ") on a graph of ",
           dot.size(), " bytes");
  return ss.str();
}

std::string write_graph(const std::string& base, const std::string& dot) {
  if (have_graphviz()) {
    write_file_atomic(base + ".svg", dot_to_svg(dot), "write_graph");
    return base + ".svg";
  }
  write_file_atomic(base + ".dot", dot, "write_graph");
  return base + ".dot";
}

}  // namespace gradsleuth::debug
