// The autograd explorer (explore.h): the recorded graph and backward as JSON, and the page
// around it (its template, styles, script and the dagre library are embedded at build time).
#include "debug/report/explore.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/io.h"
#include "core/json.h"
#include "core/ops.h"
#include "debug/evidence/tensor_stats.h"
#include "debug/report/graph.h"
#include "debug/report/html_report.h"

namespace gradsleuth::debug {

// The page's assets, generated from debug/report/explore/ and dagre at build time
// (debug/report/embed_assets.cmake); kDagre is empty in a build configured without dagre.
namespace explore_assets {
extern const char kTemplate[];
extern const char kStyle[];
extern const char kScript[];
extern const char kDagre[];
}  // namespace explore_assets

// ---- the capture --------------------------------------------------------------------------
ExploreCapture::ExploreCapture() = default;

ExploreCapture::ExploreCapture(nn::Module& model) : model_(&model) {
  tags_ = std::make_unique<GraphModuleTags>(model);
  for (auto& [path, m] : model.named_modules()) {
    const std::string label = module_label(path, *m);
    hooks_.pre(
        m,
        [this, label](nn::Module&, const Tensor& x) {
          open_.push_back(Open{label, x.defined() ? x.grad_fn().get() : nullptr});
        },
        false);
    hooks_.post(
        m,
        [this](nn::Module&, const Tensor&, const Tensor&) {
          if (!open_.empty()) open_.pop_back();
        },
        false);
  }
}

ExploreCapture::~ExploreCapture() { stop(); }

void ExploreCapture::stop() {
  trace_.stop();
  saved_.stop();
  hooks_.clear();
  tags_.reset();
}

void ExploreCapture::failed(const std::exception& e, const std::string& phase) {
  Failure f;
  if (const auto* ge = dynamic_cast<const Error*>(&e)) {
    f.op = ge->op();
    const std::string w = e.what();
    f.message =
        w.size() > f.op.size() + 2 && w.compare(0, f.op.size() + 2, f.op + ": ") == 0 ? w.substr(f.op.size() + 2) : w;
  } else {
    f.op = "error";
    f.message = e.what();
  }
  f.phase = phase;
  if (!open_.empty()) {
    f.module = open_.back().label;
    f.module_input = open_.back().input;
  }
  failure_ = f;
}

// ---- the replay recorder ---------------------------------------------------------------------
namespace {

double tensor_norm(const Tensor& t) {
  NoGradGuard ng;
  if (!t.defined() || t.numel() == 0) return 0.0;
  return summarize_norm(t.detach()).norm;
}

bool is_leaf_module(nn::Module& m) { return m.named_children().empty(); }

}  // namespace

ReplayRecorder::ReplayRecorder(nn::Module& model, optim::Optimizer& optimizer, int64_t every)
    : model_(model), opt_(optimizer), every_(std::max<int64_t>(every, 1)) {
  for (auto& [path, m] : model.named_modules()) {
    if (!is_leaf_module(*m)) continue;
    const std::string label = module_label(path, *m);
    const std::string type = m->type_name();
    hooks_.post(
        m,
        [this, label, type](nn::Module& self, const Tensor&, const Tensor& y) {
          if (!(steps_ == 0 || (steps_ + 1) % every_ == 0)) return;  // the monitor's sampled steps
          if (!self.is_training() || !GradMode::is_enabled() || !y.defined() || !y.is_floating_point() ||
              y.numel() == 0)
            return;
          NoGradGuard ng;
          const TensorSummary st = summarize(y);  // one pass over the values, as the monitor's trackers read them
          add(s_.out_mean, label, st.mean);
          add(s_.out_std, label, st.std);
          if (type != "Tanh" && type != "Sigmoid") return;
          const Tensor v = y.detach();
          if (type == "Tanh") add(s_.saturation, label, gradsleuth::mean((abs(v) > 0.99).to(kFloat32)).item<double>());
          if (type == "Sigmoid")
            add(s_.saturation, label,
                gradsleuth::mean(((v < 0.01).to(kFloat32) + (v > 0.99).to(kFloat32))).item<double>());
        },
        false);
  }
  opt_hooks_.push_back(optimizer.add_post_step_hook([this](optim::Optimizer&) {
    if (steps_ == 0 || (steps_ + 1) % every_ == 0)
      for (const auto& [name, p] : model_.named_parameters()) add(s_.weight_norm, name, tensor_norm(p));
    ++steps_;
  }));
}

ReplayRecorder::~ReplayRecorder() {
  for (size_t id : opt_hooks_) opt_.remove_hook(id);
  hooks_.clear();
}

void ReplayRecorder::add(std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>>& v,
                         const std::string& name, double value) {
  const int64_t step = steps_ + 1;
  auto it = std::find_if(v.begin(), v.end(), [&](const auto& e) { return e.first == name; });
  if (it == v.end()) {
    v.push_back({name, {}});
    it = v.end() - 1;
  }
  if (!it->second.empty() && it->second.back().first == step)
    it->second.back().second = value;  // the step's last forward
  else
    it->second.push_back({step, value});
}

// ---- the JSON ------------------------------------------------------------------------------
namespace {

std::string shape_json(const Shape& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? "," : "") + std::to_string(s[i]);
  return o + "]";
}
std::string ints_json(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? "," : "") + std::to_string(s[i]);
  return o + "]";
}

const char* device_name(Device d) { return d.type == DeviceType::CPU ? "cpu" : "cuda"; }

// {"shape":[..],"dtype":..,"norm":..,"sum":..,"min":..,"max":..,"values":[..]}
std::string tensor_json(const Tensor& t, size_t max_values) {
  if (!t.defined()) return "null";
  NoGradGuard ng;
  const Tensor h = t.detach().cpu();
  std::vector<double> v =
      h.is_floating_point() ? h.to(kFloat64).contiguous().to_vector<double>() : std::vector<double>{};
  double s = 0, sq = 0, lo = INFINITY, hi = -INFINITY;
  for (double x : v) {
    s += x;
    sq += x * x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  std::ostringstream os;
  os << "{\"shape\":" << shape_json(t.shape()) << ",\"dtype\":" << json_str(dtype_name(t.dtype()))
     << ",\"norm\":" << json_num(std::sqrt(sq)) << ",\"sum\":" << json_num(s)
     << ",\"min\":" << json_num(v.empty() ? NAN : lo) << ",\"max\":" << json_num(v.empty() ? NAN : hi);
  if (!v.empty() && v.size() <= max_values) {
    os << ",\"values\":[";
    for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << json_num(v[i]);
    os << "]";
  }
  os << "}";
  return os.str();
}

std::string series_json(const std::vector<std::pair<int64_t, double>>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i)
    o += (i ? ",[" : "[") + std::to_string(s[i].first) + "," + json_num(s[i].second) + "]";
  return o + "]";
}

// "3 (Linear)" -> "3"
std::string path_of(const std::string& label) {
  const size_t p = label.find(" (");
  return p == std::string::npos ? label : label.substr(0, p);
}

bool in_module(const std::string& path, const std::string& m) {
  if (m.empty()) return false;
  if (m == "(model)") return true;
  return path == m || (path.size() > m.size() && path.compare(0, m.size(), m) == 0 && path[m.size()] == '.');
}

// The table of nodes the JSON names, built once for explore_json and explore_node_names.
struct Graph {
  struct N {
    std::string id, kind, op, module;  // kind: op | param | input | failed | output
    int64_t fwd = -1;
    const Node* node = nullptr;
    const autograd::RecordedNode* rec = nullptr;
    Tensor param;                   // param: the leaf, when known
    autograd::TensorLayout layout;  // param/input: its layout
    std::vector<double> consts;     // scalar operands (0-dim constants)
  };
  struct E {
    size_t from, to;
    int64_t input;
    Shape shape;
  };
  std::vector<N> nodes;
  std::vector<E> edges;
  std::unordered_map<const Node*, size_t> by_node;
  std::unordered_map<const TensorImpl*, size_t> by_impl;  // constant inputs and leaves
  std::map<std::string, int> counts;
  std::set<std::string> ids;
  size_t left_out = 0;
  std::string failed_id;  // the node the failure is drawn on

  std::string fresh(const std::string& base, bool numbered) {
    if (!numbered && !ids.count(base)) {
      ids.insert(base);
      return base;
    }
    std::string id;
    do id = base + "#" + std::to_string(++counts[base]);
    while (ids.count(id));
    ids.insert(id);
    return id;
  }
  size_t add(N n) {
    nodes.push_back(std::move(n));
    return nodes.size() - 1;
  }
};

Graph build_graph(const ExploreCapture& cap, const Tensor& root, const ExploreOptions& o) {
  Graph g;
  // Names of the leaves: the parameters given, else the model's, else the tensors' own names.
  std::vector<std::pair<std::string, Tensor>> params = o.params;
  if (params.empty() && cap.model()) params = cap.model()->named_parameters();
  std::unordered_map<const TensorImpl*, std::string> param_name;
  std::unordered_map<const Node*, Tensor> param_of_acc;
  for (const auto& [name, p] : params) {
    if (!p.defined()) continue;
    param_name.emplace(&p.impl(), name);
    if (p.requires_grad() && p.is_leaf())
      if (const Edge e = gradient_edge(p); e.fn) param_of_acc.emplace(e.fn.get(), p);
  }
  // The leaf behind each accumulator the backward ran.
  std::unordered_map<const Node*, std::shared_ptr<const TensorImpl>> leaf_impl;
  for (const auto& s : cap.trace().backward())
    if (s.leaf_ptr) leaf_impl.emplace(s.node.get(), s.leaf_ptr);
  auto leaf_node = [&](const Node* acc, const autograd::TensorLayout* l) -> size_t {
    if (auto it = g.by_node.find(acc); it != g.by_node.end()) return it->second;
    Graph::N n;
    n.kind = "param";
    n.op = "AccumulateGrad";
    n.node = acc;
    std::string name;
    if (auto it = param_of_acc.find(acc); it != param_of_acc.end()) {
      n.param = it->second;
      name = param_name[&it->second.impl()];
      n.layout = autograd::GraphTrace::layout_of(it->second);
    } else if (l) {
      n.layout = *l;
      if (auto pn = param_name.find(l->impl); pn != param_name.end())
        name = pn->second;
      else
        name = l->name;
    } else if (auto li = leaf_impl.find(acc); li != leaf_impl.end()) {
      // Known from the backward only: the leaf is alive (its accumulator holds it).
      n.layout = autograd::GraphTrace::layout_of(Tensor(std::const_pointer_cast<TensorImpl>(li->second)));
      if (auto pn = param_name.find(li->second.get()); pn != param_name.end())
        name = pn->second;
      else
        name = li->second->name;
    }
    n.id = g.fresh(name.empty() ? "leaf" : name, name.empty());
    const size_t i = g.add(std::move(n));
    g.by_node.emplace(acc, i);
    return i;
  };
  auto op_node = [&](const Node* node, const autograd::RecordedNode* rec, int64_t fwd) -> size_t {
    Graph::N n;
    n.kind = "op";
    n.op = node->name();
    n.node = node;
    n.rec = rec;
    n.fwd = fwd;
    n.module = path_of(node->context);
    n.id = g.fresh(n.op, true);
    const size_t i = g.add(std::move(n));
    g.by_node.emplace(node, i);
    return i;
  };
  auto is_acc = [](const Node* n) { return n && std::string(n->name()) == "AccumulateGrad"; };

  // 1. The forward's nodes, in the order it made them.
  const auto& fwd = cap.trace().forward();
  int64_t k = 0;
  for (const auto& r : fwd) {
    if (g.nodes.size() >= o.max_nodes) {
      ++g.left_out;
      continue;
    }
    if (!g.by_node.count(r.node.get())) op_node(r.node.get(), &r, k++);
  }
  // 2. Nodes the backward reaches that the forward did not record (made before the capture, or a
  //    view's history re-derived lazily).
  std::vector<const Node*> todo;
  if (root.defined() && root.grad_fn()) todo.push_back(root.grad_fn().get());
  for (const auto& s : cap.trace().backward()) todo.push_back(s.node.get());
  std::unordered_set<const Node*> seen;
  std::vector<const Node*> deferred;
  while (!todo.empty()) {
    const Node* n = todo.back();
    todo.pop_back();
    if (!n || !seen.insert(n).second) continue;
    if (!g.by_node.count(n)) {
      if (g.nodes.size() >= o.max_nodes) {
        ++g.left_out;
        continue;
      }
      if (is_acc(n))
        deferred.push_back(n);  // named from the edges below, which know its layout
      else
        op_node(n, nullptr, -1);
    }
    for (const Edge& e : n->next_edges) todo.push_back(e.fn.get());
  }
  // 3. Edges, from each input to the op that used it.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].kind != "op") continue;
    const Node* n = g.nodes[i].node;
    const autograd::RecordedNode* rec = g.nodes[i].rec;
    for (size_t j = 0; j < n->next_edges.size(); ++j) {
      const Edge& e = n->next_edges[j];
      const autograd::TensorLayout* l = rec && j < rec->inputs.size() ? &rec->inputs[j] : nullptr;
      if (e.fn) {
        size_t from;
        if (auto it = g.by_node.find(e.fn.get()); it != g.by_node.end())
          from = it->second;
        else if (is_acc(e.fn.get()))
          from = leaf_node(e.fn.get(), l);
        else
          continue;  // cut by max_nodes
        if (g.nodes[from].kind == "param" && l && g.nodes[from].layout.impl == nullptr) g.nodes[from].layout = *l;
        g.edges.push_back({from, i, static_cast<int64_t>(j), e.shape});
      } else if (l && l->impl) {
        // An operand that needs no gradient: a scalar is listed on the op, a tensor drawn as an input.
        if (l->shape.empty()) continue;  // 0-dim: its value is not known here (see consts below)
        size_t from;
        if (auto it = g.by_impl.find(l->impl); it != g.by_impl.end()) {
          from = it->second;
        } else {
          Graph::N c;
          c.kind = "input";
          c.op = "input";
          c.layout = *l;
          std::string name = l->name;
          if (name.empty())
            if (auto pn = param_name.find(l->impl); pn != param_name.end()) name = pn->second;
          c.id = g.fresh(name.empty() ? "input" : name, name.empty());
          from = g.add(std::move(c));
          g.by_impl.emplace(l->impl, from);
        }
        g.edges.push_back({from, i, static_cast<int64_t>(j), l->shape});
      }
    }
  }
  for (const Node* n : deferred)
    if (!g.by_node.count(n)) leaf_node(n, nullptr);
  // 4. A backward that failed: the node whose backward raised (the last one the engine began).
  const auto& fail = cap.failure();
  const bool in_backward = fail && fail->phase == "backward" && !cap.trace().backward().empty();
  if (in_backward)
    if (auto it = g.by_node.find(cap.trace().backward().back().node.get()); it != g.by_node.end())
      g.failed_id = g.nodes[it->second].id;
  // A forward that failed: the failed op, drawn after what ran, fed by the failing module's input and parameters.
  if (fail && !in_backward) {
    const auto& f = fail;
    Graph::N n;
    n.kind = "failed";
    n.op = f->op;
    n.module = path_of(f->module);
    n.fwd = k;
    // Its name: the op's ("matmul#3"), or the leading word of a layer's ("Linear(5 -> 2)" -> "Linear#1").
    std::string base;
    for (char c : f->op) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':')) break;
      base += c;
    }
    n.id = g.fresh(base.empty() ? "failed" : base, true);
    g.failed_id = n.id;
    const size_t i = g.add(std::move(n));
    bool fed = false;
    if (f->module_input)
      if (auto it = g.by_node.find(f->module_input); it != g.by_node.end()) {
        g.edges.push_back({it->second, i, 0, f->module_input->out_shape});
        fed = true;
      }
    if (!f->module.empty() && cap.model())
      for (auto& [path, m] : cap.model()->named_modules())
        if (module_label(path, *m) == f->module)
          for (const auto& [pn, p] : m->named_parameters(false)) {
            size_t from = SIZE_MAX;
            if (p.requires_grad() && p.is_leaf()) from = leaf_node(gradient_edge(p).fn.get(), nullptr);
            if (from != SIZE_MAX) {
              if (g.nodes[from].layout.impl == nullptr) g.nodes[from].layout = autograd::GraphTrace::layout_of(p);
              g.edges.push_back({from, i, 1, p.shape()});
            }
          }
    // No module to go by: the last op the forward recorded.
    if (!fed && f->module.empty()) {
      for (size_t j = i; j-- > 0;)
        if (g.nodes[j].kind == "op" && g.nodes[j].fwd >= 0) {
          g.edges.push_back({j, i, 0, g.nodes[j].node->out_shape});
          break;
        }
    }
  }
  // 5. The output.
  if (root.defined() && root.grad_fn())
    if (auto it = g.by_node.find(root.grad_fn().get()); it != g.by_node.end()) {
      Graph::N n;
      n.kind = "output";
      n.op = "output";
      n.layout = autograd::GraphTrace::layout_of(root);
      n.id = g.fresh("output", false);
      const size_t i = g.add(std::move(n));
      g.edges.push_back({it->second, i, 0, root.shape()});
    }
  return g;
}

std::string layout_json(const autograd::TensorLayout& l, std::unordered_map<const void*, int>& storages) {
  if (!l.impl) return "";
  auto it = storages.find(l.storage);
  if (it == storages.end()) it = storages.emplace(l.storage, static_cast<int>(storages.size())).first;
  std::ostringstream os;
  os << ",\"shape\":" << shape_json(l.shape) << ",\"dtype\":" << json_str(dtype_name(l.dtype))
     << ",\"device\":" << json_str(device_name(l.device)) << ",\"strides\":" << ints_json(l.strides.vec())
     << ",\"offset\":" << l.offset << ",\"storage\":" << it->second << ",\"view\":" << json_bool(l.is_view)
     << ",\"version\":" << l.version << ",\"requires_grad\":" << json_bool(l.requires_grad);
  return os.str();
}

}  // namespace

std::string explore_json(const ExploreCapture& cap, const Tensor& root, const ExploreOptions& o) {
  const Graph g = build_graph(cap, root, o);
  std::unordered_map<const void*, int> storages;
  std::ostringstream os;
  os << "{\"format\":\"gradsleuth-explore/1\",\"title\":" << json_str(o.title);
  // Modules.
  os << ",\"modules\":[";
  if (cap.model()) {
    bool first = true;
    for (auto& [path, m] : cap.model()->named_modules()) {
      if (path.empty()) continue;
      const size_t dot = path.rfind('.');
      os << (first ? "" : ",") << "{\"path\":" << json_str(path) << ",\"class\":" << json_str(m->type_name())
         << ",\"parent\":" << json_str(dot == std::string::npos ? "" : path.substr(0, dot)) << "}";
      first = false;
    }
  }
  os << "]";
  // Nodes.
  os << ",\"nodes\":[";
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const auto& n = g.nodes[i];
    os << (i ? "," : "") << "{\"id\":" << json_str(n.id) << ",\"kind\":" << json_str(n.kind)
       << (n.id == g.failed_id ? ",\"failed\":true" : "") << ",\"op\":" << json_str(n.op)
       << ",\"module\":" << json_str(n.module) << ",\"fwd\":" << n.fwd;
    if (n.kind == "op") {
      const autograd::RecordedNode* r = n.rec;
      if (r) {
        os << layout_json(r->output, storages) << ",\"inplace\":" << json_bool(r->inplace);
      } else {
        os << ",\"shape\":" << shape_json(n.node->out_shape)
           << ",\"dtype\":" << json_str(dtype_name(n.node->out_dtype));
      }
      os << ",\"released\":" << json_bool(n.node->released());
      if (const std::vector<SavedInfo>* saved = cap.saved().saved(n.node)) {
        os << ",\"saved\":[";
        for (size_t s = 0; s < saved->size(); ++s) {
          const SavedInfo& si = (*saved)[s];
          os << (s ? "," : "") << "{\"by\":" << json_str(si.saved_by) << ",\"shape\":" << shape_json(si.shape)
             << ",\"dtype\":" << json_str(dtype_name(si.dtype)) << ",\"version\":" << si.version
             << ",\"output\":" << json_bool(si.is_output) << "}";
        }
        os << "]";
      }
    } else if (n.kind == "param" || n.kind == "input" || n.kind == "output") {
      os << layout_json(n.layout, storages);
      if (n.param.defined())
        os << ",\"version_now\":" << n.param.version() << ",\"grad\":" << tensor_json(n.param.grad(), o.max_values);
    }
    os << "}";
  }
  os << "]";
  // Edges (forward direction: input -> op).
  os << ",\"edges\":[";
  for (size_t i = 0; i < g.edges.size(); ++i) {
    const auto& e = g.edges[i];
    os << (i ? "," : "") << "{\"from\":" << json_str(g.nodes[e.from].id) << ",\"to\":" << json_str(g.nodes[e.to].id)
       << ",\"input\":" << e.input << ",\"shape\":" << shape_json(e.shape) << "}";
  }
  os << "],\"left_out\":" << g.left_out;
  // The forward's order.
  os << ",\"forward\":[";
  {
    std::vector<std::pair<int64_t, std::string>> f;
    for (const auto& n : g.nodes)
      if (n.fwd >= 0) f.push_back({n.fwd, n.id});
    std::sort(f.begin(), f.end());
    for (size_t i = 0; i < f.size(); ++i) os << (i ? "," : "") << json_str(f[i].second);
  }
  os << "]";
  // The backward, as the engine ran it.
  auto id_of = [&](const Node* n) -> std::string {
    if (!n) return "seed";
    auto it = g.by_node.find(n);
    return it == g.by_node.end() ? std::string("?") : g.nodes[it->second].id;
  };
  os << ",\"passes\":" << cap.trace().passes() << ",\"backward\":[";
  {
    const auto& b = cap.trace().backward();
    for (size_t i = 0; i < b.size(); ++i) {
      const auto& s = b[i];
      os << (i ? "," : "") << "{\"node\":" << json_str(id_of(s.node.get())) << ",\"ran\":" << json_bool(s.ran)
         << ",\"incoming\":[";
      for (size_t c = 0; c < s.incoming.size(); ++c)
        os << (c ? "," : "") << "{\"from\":" << json_str(id_of(s.incoming[c].from))
           << ",\"input\":" << s.incoming[c].input << ",\"grad\":" << tensor_json(s.incoming[c].grad, o.max_values)
           << "}";
      os << "],\"grad\":" << tensor_json(s.grad, o.max_values);
      if (s.leaf) os << ",\"leaf_grad\":" << tensor_json(s.leaf_grad, o.max_values);
      os << "}";
    }
  }
  os << "]";
  // The loss.
  if (root.defined()) os << ",\"loss\":" << tensor_json(root, o.max_values);
  // The failure.
  if (const auto& f = cap.failure()) {
    os << ",\"failure\":{\"node\":" << json_str(g.failed_id) << ",\"op\":" << json_str(f->op)
       << ",\"phase\":" << json_str(f->phase) << ",\"module\":" << json_str(f->module)
       << ",\"message\":" << json_str(f->message) << "}";
  } else {
    os << ",\"failure\":null";
  }
  // Findings, linked to the nodes they name.
  os << ",\"findings\":[";
  if (o.findings) {
    std::optional<Finding> lead = lead_finding(*o.findings);
    bool first = true;
    // The lead first, then the others in the report's order.
    std::vector<const Finding*> order;
    for (const Finding& f : o.findings->findings())
      if (f.fires()) order.push_back(&f);
    std::stable_partition(order.begin(), order.end(), [&](const Finding* f) {
      return lead && lead->check == f->check && lead->title == f->title && lead->module == f->module;
    });
    for (const Finding* fp : order) {
      const Finding& f = *fp;
      std::vector<std::string> named;
      const std::string mpath = path_of(f.module);
      for (const auto& n : g.nodes) {
        bool hit = false;
        if (!f.parameter.empty() && n.kind == "param" && n.id == f.parameter) hit = true;
        if (!mpath.empty() && n.kind != "param" && in_module(n.module, mpath) && (f.op.empty() || f.op == n.op))
          hit = true;
        if (!mpath.empty() && n.kind == "param" && in_module(n.id, mpath)) hit = true;
        if (mpath.empty() && f.parameter.empty() && !f.op.empty() && n.op == f.op) hit = true;
        if (hit) named.push_back(n.id);
      }
      const bool is_lead = lead && lead->check == f.check && lead->title == f.title && lead->module == f.module;
      os << (first ? "" : ",") << "{\"check\":" << json_str(f.check)
         << ",\"severity\":" << json_str(f.severity == Severity::Error ? "error" : "warning")
         << ",\"title\":" << json_str(f.title) << ",\"where\":" << json_str(f.location())
         << ",\"cause\":" << json_str(is_lead ? lead->cause : f.cause) << ",\"fix\":" << json_str(f.fix)
         << ",\"step\":" << f.step << ",\"lead\":" << json_bool(is_lead) << ",\"nodes\":" << json_list(named) << "}";
      first = false;
    }
  }
  os << "]";
  // The replay.
  if (o.replay) {
    const ReplayData& h = *o.replay;
    auto group = [&](const char* key, const NamedSeries& v) {
      os << ",\"" << key << "\":{";
      for (size_t i = 0; i < v.size(); ++i)
        os << (i ? "," : "") << json_str(v[i].first) << ":" << series_json(v[i].second);
      os << "}";
    };
    auto numbers = [&](const char* key, const std::vector<double>& v) {
      os << ",\"" << key << "\":[";
      for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << json_num(v[i]);
      os << "]";
    };
    os << ",\"replay\":{\"loss\":[";
    for (size_t i = 0; i < h.loss.size(); ++i) os << (i ? "," : "") << json_num(h.loss[i]);
    os << "]";
    numbers("epoch_train_loss", h.epoch_train_loss);
    numbers("epoch_val_loss", h.epoch_val_loss);
    group("grad_norm", h.grad_norm);
    group("update_ratio", h.update_ratio);
    group("dead", h.dead);
    group("weight_norm", h.extra.weight_norm);
    group("out_mean", h.extra.out_mean);
    group("out_std", h.extra.out_std);
    group("saturation", h.extra.saturation);
    os << "}";
  } else {
    os << ",\"replay\":null";
  }
  os << "}";
  return os.str();
}

std::vector<std::pair<const Node*, std::string>> explore_node_names(const ExploreCapture& cap, const Tensor& root,
                                                                    const ExploreOptions& o) {
  const Graph g = build_graph(cap, root, o);
  std::vector<std::pair<const Node*, std::string>> out;
  for (const auto& n : g.nodes)
    if (n.node) out.push_back({n.node, n.id});
  return out;
}

// ---- the page -------------------------------------------------------------------------------
namespace {

// JSON inside <script>: "</" would end the element, so it is written "<\/" (still the same JSON).
std::string script_safe(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<' && i + 1 < s.size() && s[i + 1] == '/') {
      o += "<\\/";
      ++i;
      continue;
    }
    o += s[i];
  }
  return o;
}

}  // namespace

std::string read_dagre(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  GS_CHECK(in && !text.str().empty(), "explore",
           "the page needs the dagre graph-layout library, which this build did not embed (Debian's "
           "node-dagre-layout was not installed when it was configured), and '",
           path,
           "' cannot be read. Install it: sudo apt-get install node-dagre-layout (scripts/setup.sh installs it). "
           "The next page written reads it; no rebuild is needed.");
  return text.str();
}

std::string dagre_source() {
  if (explore_assets::kDagre[0] != '\0') return explore_assets::kDagre;
  return read_dagre(kDagreSystemPath);
}

std::string render_explore_html(const std::string& json, const std::string& title) {
  // The template's markers, each replaced in one pass (an inserted text is never searched again).
  const std::pair<const char*, std::string> parts[] = {{"@TITLE@", html_escape(title)},
                                                       {"@STYLE@", explore_assets::kStyle},
                                                       {"@DATA@", script_safe(json)},
                                                       {"@DAGRE@", script_safe(dagre_source())},
                                                       {"@SCRIPT@", explore_assets::kScript}};
  const std::string tpl = explore_assets::kTemplate;
  std::string page;
  page.reserve(tpl.size() + json.size() + 200000);
  size_t data_markers = 0;
  for (size_t i = 0; i < tpl.size();) {
    bool hit = false;
    if (tpl[i] == '@')
      for (const auto& [marker, text] : parts) {
        const size_t n = std::char_traits<char>::length(marker);
        if (tpl.compare(i, n, marker) == 0) {
          page += text;
          i += n;
          hit = true;
          data_markers += std::string(marker) == "@DATA@";
          break;
        }
      }
    if (!hit) page += tpl[i++];
  }
  GS_CHECK(data_markers == 1, "render_explore_html", "the page template has ", data_markers, " @DATA@ markers, not 1");
  return page;
}

size_t write_explore(const std::string& path, const std::string& json, const std::string& title) {
  const std::string page = render_explore_html(json, title);
  write_file_atomic(path, page, "explore");
  return page.size();
}

std::string explore(nn::Module& model, const Tensor& x, const Tensor& y, const ExploreLoss& loss_fn,
                    const std::string& path, ExploreOptions o, std::string* json_out) {
  GS_CHECK(loss_fn != nullptr, "explore",
           "no loss function given: pass one, e.g. [](const Tensor& out, const Tensor& y) "
           "{ return gs::cross_entropy(out, y); }");
  // The model's gradients are put back as they were.
  std::vector<std::pair<Tensor, Tensor>> grads;
  for (auto& [name, p] : model.named_parameters()) {
    grads.push_back({p, p.grad()});
    p.impl().grad.reset();
  }
  std::string error;
  Tensor loss;
  {
    ExploreCapture cap(model);
    std::string phase = "forward";
    try {
      Tensor out = model(x);
      phase = "loss";
      loss = loss_fn(out, y);
      phase = "backward";
      loss.backward();
    } catch (const std::exception& e) {
      cap.failed(e, phase);
      error = e.what();
    }
    cap.stop();
    if (o.params.empty()) o.params = model.named_parameters();
    const std::string json = explore_json(cap, loss, o);
    if (!path.empty()) write_explore(path, json, o.title);
    if (json_out) *json_out = json;
  }
  for (auto& [p, g] : grads) p.impl().grad = g.defined() ? g.impl_ptr() : nullptr;
  return error;
}

}  // namespace gradsleuth::debug
