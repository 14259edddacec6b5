// The autograd engine: graph recording, saved-tensor version checks,
// gradient accumulation into leaves, and the iterative backward pass.
#include "core/autograd.h"
#include "core/graph_trace.h"
#include "core/saved_capture.h"

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

#include <algorithm>
#include <unordered_map>

#include "core/autocast.h"
#include "core/backend.h"
#include "core/observer.h"
#include "core/ops.h"

namespace gradsleuth {

// ---- grad mode --------------------------------------------------------------
namespace {
thread_local bool t_grad_enabled = true;
}
bool GradMode::is_enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool e) { t_grad_enabled = e; }

bool needs_grad(const Tensor& a) { return t_grad_enabled && a.defined() && a.requires_grad(); }
bool needs_grad(const Tensor& a, const Tensor& b) {
  return t_grad_enabled && ((a.defined() && a.requires_grad()) || (b.defined() && b.requires_grad()));
}
bool needs_grad(const tensor_list& ts) {
  if (!t_grad_enabled) return false;
  for (const auto& t : ts)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}
bool needs_grad(std::initializer_list<const Tensor*> ts) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : ts)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

// ---- saved tensors ------------------------------------------------------------
// ---- SavedCapture (core/saved_capture.h) ----------------------------------------------
namespace {
thread_local SavedCapture* t_capture = nullptr;
thread_local autograd::GraphTrace* t_trace = nullptr;  // core/graph_trace.h
}  // namespace

SavedCapture::SavedCapture() : prev_(t_capture), active_(true) { t_capture = this; }

SavedCapture::~SavedCapture() { stop(); }

void SavedCapture::stop() {
  if (!active_) return;
  active_ = false;
  // Captures nest per thread; restore the one this one hid (if it is still ours to restore).
  if (t_capture == this) t_capture = prev_;
  pending_.clear();
}

const std::vector<SavedInfo>* SavedCapture::saved(const Node* n) const {
  const auto it = table_.find(n);
  if (it == table_.end() || it->second.first.expired() || it->second.first.lock().get() != n) return nullptr;
  return &it->second.second;
}

void SavedCapture::on_saved(const Tensor& t, const char* saved_by, bool is_output) {
  SavedCapture* c = t_capture;
  if (c == nullptr || !t.defined()) return;
  c->pending_.push_back(SavedInfo{saved_by ? saved_by : "", t.shape(), t.dtype(), t.version(), is_output});
}

void SavedCapture::on_node(const std::shared_ptr<Node>& node) {
  SavedCapture* c = t_capture;
  if (c == nullptr) return;
  auto& entry = c->table_[node.get()];
  entry.first = node;
  entry.second = std::move(c->pending_);
  c->pending_.clear();
}

SavedTensor::SavedTensor(const Tensor& t, const char* saved_by, bool is_output)
    : version_(t.defined() ? t.version() : 0), saved_by_(saved_by), is_output_(is_output) {
  if (!t.defined()) return;
  data_ = is_output ? t.detach() : t;
  if (t_capture != nullptr) [[unlikely]]
    SavedCapture::on_saved(t, saved_by, is_output);
}

namespace {
// The out-of-place form of the in-place op that was used, spelled as the user writes it:
// " ('relu' instead of 'relu_': y = x.relu() instead of x.relu_())", and for the
// arithmetic ops the operator form (" ... : x = x + y instead of x += y"). Generic
// when the op is unknown or not named like an in-place op.
std::string out_of_place_hint(const char* op) {
  const std::string s = op ? op : "";
  if (s.size() <= 1 || s.back() != '_')
    return " (the op without its trailing '_': relu instead of relu_, add instead of add_)";
  const std::string plain = s.substr(0, s.size() - 1);
  static const std::pair<const char*, const char*> kOperators[] = {
      {"add", "+"}, {"sub", "-"}, {"mul", "*"}, {"div", "/"}};
  for (const auto& [name, sym] : kOperators)
    if (plain == name)
      return " ('" + plain + "' instead of '" + s + "': x = x " + sym + " y instead of x " + sym + "= y)";
  return " ('" + plain + "' instead of '" + s + "': y = x." + plain + "(...) instead of x." + s + "(...))";
}
}  // namespace

namespace detail {
namespace {
thread_local bool t_widened = false;
}
WidenedBackward::WidenedBackward() : prev_(t_widened) { t_widened = true; }
WidenedBackward::~WidenedBackward() { t_widened = prev_; }
bool backward_widened() { return t_widened; }
Tensor to_keeping_layout(const Tensor& t, DType want) {
  const int64_t nd = t.dim();
  if (t.is_contiguous() || nd < 2 || GradMode::is_enabled()) return t.to(want);
  // A permutation of a dense layout (a transposed gradient): converted in its memory order, so
  // that both sides are read and written row by row.
  Dims order;
  const Tensor p = detail::memory_order_alias(t, order);
  if (!p.is_contiguous()) return t.to(want);
  const Tensor c = p.to(want);
  Strides st(nd, 0);
  for (int64_t i = 0; i < nd; ++i) st[order[i]] = c.strides()[i];
  return detail::make_alias(c, t.shape(), st, 0);
}
namespace {
// The fused backward of a cast from float32 to 16 bits (autocast's cast of a float32 parameter,
// and linear's transpose of it). The gradient, computed in float32, would be rounded to 16 bits
// for the cast's output (or the transpose's) and widened back by the cast's backward: two passes
// and a 16-bit copy. When it is the only gradient of the cast and of the views between, and no
// hook, observer, trace, grad() capture or create_graph can see the 16-bit step, it stays float32
// through the views (which only move values, so rounding before or after them is the same) and is
// rounded through the 16-bit dtype at the cast, in one pass (round_through: the bits of
// g.to(dtype).to(kFloat32), in place when the engine holds the only handle on its storage); the
// cast's backward then passes it on as it is.

thread_local bool t_plain_pass = false;  // set by run(): no create_graph, no grad() capture, no trace
class PlainPass {
 public:
  explicit PlainPass(bool plain) : prev_(t_plain_pass) { t_plain_pass = plain; }
  ~PlainPass() { t_plain_pass = prev_; }
  PlainPass(const PlainPass&) = delete;
  PlainPass& operator=(const PlainPass&) = delete;

 private:
  bool prev_;
};

// What happens to a float32 gradient bound for a 16-bit input (above).
enum class CastBackward : uint8_t {
  Round,         // rounded to the input's dtype, as every gradient is
  PassOn,        // kept float32: the input is a view on the way to a fused cast
  RoundThrough,  // rounded through the dtype, kept float32: the input is the fused cast's output
};
bool only_moves_values(const Node& n) {
  static const char* const kViews[] = {"transpose", "permute", "view", "squeeze", "unsqueeze"};
  for (const char* v : kViews)
    if (std::strcmp(n.name(), v) == 0) return true;
  return false;
}
CastBackward cast_backward(const Edge& e, DType g) {
  if (!t_plain_pass || !e.fn || g != kFloat32 || !is_reduced_float(e.dtype) || GradMode::is_enabled() ||
      observers_active() || !cast_backward_fused())
    return CastBackward::Round;
  for (const Node* n = e.fn.get();;) {
    // This gradient is the node's only one (none pending, no other consumer), seen by no hook.
    if (n->pass_local_ || n->pass_.dependencies != 1 || n->pass_.pending_grad.defined() || !n->pre_hooks.empty() ||
        n->next_edges.size() != 1 ||
        !n->next_edges[0].fn || n->out_dtype != e.dtype)
      return CastBackward::Round;
    const Edge& next = n->next_edges[0];
    if (std::strcmp(n->name(), "to_dtype") == 0 && next.dtype == kFloat32)
      return n == e.fn.get() ? CastBackward::RoundThrough : CastBackward::PassOn;
    if (!only_moves_values(*n) || next.dtype != e.dtype) return CastBackward::Round;
    n = next.fn.get();
  }
}

// Whether g is the only tensor that can see its storage, `handles` being the handles on g's
// TensorImpl its caller holds: then the storage may be kept as a gradient or changed in place.
bool storage_unshared(const Tensor& g, long handles) {
  // A gradient that is a view (sum_to's reshape of a bias gradient) shares the storage with its
  // base, which only the view itself may hold.
  const auto& base = g.impl().view_base;
  const long holders = 1 + (base && base.use_count() == 1 && base->storage == g.storage() ? 1 : 0);
  return g.impl_ptr().use_count() <= handles && g.storage().use_count() == holders && g.grad_fn() == nullptr &&
         !g.requires_grad();
}

// g.to(t).to(kFloat32).
Tensor round_through(const Tensor& g, DType t) {
  // A product that rounded its results as it stored them (rounded_through below) marked the storage.
  if (g.storage()->take_rounded_through(t)) return g;
  Backend& b = backend_of(g);
  // The engine's own gradient: its whole storage rounded in place (rounding is elementwise and
  // rounds a rounded value to itself, so any layout over it is rounded right).
  if (storage_unshared(g, 1) && g.storage()->nbytes() % sizeof(float) == 0) {
    const int64_t n = static_cast<int64_t>(g.storage()->nbytes() / sizeof(float));
    if (b.round_through(make_alias(g, {n}, {1}, 0), t)) return g;
  } else {
    Tensor c = empty(g.shape(), TensorOptions(kFloat32).device(g.device()));
    b.copy(c, g);
    if (b.round_through(c, t)) return c;
  }
  return g.to(t).to(kFloat32);
}
}  // namespace

std::optional<DType> rounded_through(const Node& node, size_t input) {
  if (input >= node.next_edges.size()) return std::nullopt;
  const Edge& e = node.next_edges[input];
  if (cast_backward(e, kFloat32) == CastBackward::Round) return std::nullopt;
  return e.dtype;
}

void round_to_inputs(tensor_list& grads, const Node& node) {
  for (size_t i = 0; i < grads.size() && i < node.next_edges.size(); ++i) {
    const Edge& e = node.next_edges[i];
    if (grads[i].defined() && e.fn && is_reduced_float(e.dtype) && grads[i].dtype() != e.dtype &&
        cast_backward(e, grads[i].dtype()) == CastBackward::Round)
      grads[i] = to_keeping_layout(grads[i], e.dtype);
  }
}

}  // namespace detail

Tensor SavedTensor::unpack(Node& node) const {
  Tensor t = unpack_as_saved(node);
  if (detail::backward_widened() && t.defined() && is_reduced_float(t.dtype()))
    return detail::to_keeping_layout(t, kFloat32);
  return t;
}

Tensor SavedTensor::unpack_as_saved(Node& node) const {
  if (!data_.defined()) return Tensor();
  const uint64_t now = data_.version();
  if (now != version_) {
    const char* by = data_.storage()->modifier_after(version_);
    GS_FAIL(node.name(),
            "one of the tensors needed for its gradient has been modified by an in-place operation. "
            "The ",
            data_.str(), " tensor was saved by '", saved_by_, "' at version ", version_,
            " and is now at "
            "version ",
            now, "; it was modified by '", by ? by : data_.storage()->last_modifier(), "'",
            (now - version_ > 1 ? " (first of " + std::to_string(now - version_) + " in-place modifications)" : ""),
            ". Fix: use the out-of-place op", out_of_place_hint(by ? by : data_.storage()->last_modifier()),
            ", or clone() the tensor before modifying it.");
  }
  if (!is_output_ || !GradMode::is_enabled()) return data_;
  // create_graph: re-attach the saved output to the node that made it, so that
  // the backward formula that uses it is itself differentiable.
  Tensor t = detail::make_alias(data_, data_.shape(), data_.strides(), data_.offset());
  t.impl().requires_grad = true;
  t.impl().grad_fn = node.shared_from_this();
  return t;
}

// ---- graph teardown ---------------------------------------------------------------
// Freeing the last handle to a long chain would destroy node i, whose edge
// destroys node i-1, ... one stack frame per node. Instead, a dying node hands
// the input nodes only it still holds to a local stack, which is emptied in a
// loop. Each of those first drops its saved tensors (which may hold the next
// node too), so that it dies with no edges left to recurse into. (This node's
// own saved tensors, derived members, are already gone when this body runs.)
std::atomic<int64_t> Node::live_{0};

Node::~Node() {
  live_.fetch_sub(1, std::memory_order_relaxed);
  std::vector<std::shared_ptr<Node>> orphans;
  auto adopt = [&orphans](Node& n) {
    for (Edge& e : n.next_edges)
      if (e.fn && e.fn.use_count() == 1) orphans.push_back(std::move(e.fn));
  };
  adopt(*this);
  while (!orphans.empty()) {
    std::shared_ptr<Node> n = std::move(orphans.back());
    orphans.pop_back();
    n->release_saved();
    if (!n->pass_local_) n->pass_.pending_grad = Tensor();  // a shared node's is never written
    adopt(*n);
  }
}

// ---- leaves: AccumulateGrad -----------------------------------------------------
namespace {

// The node at the end of every path: adds the arriving gradient into leaf.grad.
// Graphs built in several threads may share a leaf, and so its AccumulateGrad: the backward passes
// keep their state of it apart (pass_local_), and each adds into leaf.grad under the node's lock.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : Node("AccumulateGrad"), leaf_(std::move(leaf)) {
    pass_local_ = true;
  }
  tensor_list apply(const Tensor& grad_in) override {
    Tensor leaf(leaf_);
    Tensor g = grad_in;
    for (auto& hook : leaf_->leaf_hooks) {
      Tensor r = hook(g);
      if (r.defined()) g = r;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    Tensor cur = leaf.grad();
    if (GradMode::is_enabled()) {
      // create_graph: keep the gradient's own graph, accumulate out of place.
      leaf_->grad = (cur.defined() ? cur + g : g).impl_ptr();
    } else if (!cur.defined()) {
      // Steal the buffer when nobody else can see it; otherwise copy, so two
      // leaves never share one .grad (add's backward hands both inputs the same g).
      const bool sole = detail::storage_unshared(g, 2) && g.is_contiguous();
      if (sole) {
        // .grad becomes a tensor of its own, not a view keeping that base alive.
        g.impl().view_base.reset();
        g.impl().is_view = false;
      }
      leaf_->grad = (sole ? g : g.detach().clone()).impl_ptr();
    } else {
      cur.add_(g);
    }
    return {};
  }
  // Nothing saved, and the node is shared: a pass leaves it as it is.
  void release_saved() override {}
  Tensor leaf() const { return Tensor(leaf_); }
  std::shared_ptr<TensorImpl> leaf_;

 private:
  std::mutex mutex_;
};

// Guards each leaf's grad_accumulator: the first graphs of several threads may reach it at once.
std::mutex g_accumulator_mutex;

}  // namespace

Tensor autograd::accumulated_leaf(const Node& node) {
  const auto* acc = dynamic_cast<const AccumulateGrad*>(&node);
  return acc != nullptr ? acc->leaf() : Tensor();
}

Edge gradient_edge(const Tensor& t) {
  Edge e;
  if (!t.defined() || !t.requires_grad()) return e;
  e.shape = t.shape();
  e.dtype = t.dtype();
  if (t.grad_fn()) {
    e.fn = t.grad_fn();
    return e;
  }
  TensorImpl& impl = t.impl();
  std::lock_guard<std::mutex> lock(g_accumulator_mutex);
  std::shared_ptr<Node> acc = impl.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl.grad_accumulator = acc;
  }
  e.fn = std::move(acc);
  return e;
}

static void attach(Tensor& out, const std::shared_ptr<Node>& node) {
  if (t_capture != nullptr) [[unlikely]]
    SavedCapture::on_node(node);
  node->out_shape = out.shape();
  node->out_dtype = out.dtype();
  TensorImpl& impl = out.impl();
  impl.grad_fn = node;
  impl.requires_grad = true;
}

void set_history(Tensor& out, const std::shared_ptr<Node>& node, std::initializer_list<const Tensor*> inputs) {
  node->next_edges.reserve(inputs.size());
  for (const Tensor* t : inputs) node->next_edges.push_back(t ? gradient_edge(*t) : Edge{});
  attach(out, node);
  if (t_trace != nullptr) [[unlikely]]
    t_trace->on_record(node, out, std::vector<const Tensor*>(inputs.begin(), inputs.end()), false);
}

void set_history(Tensor& out, const std::shared_ptr<Node>& node, const tensor_list& inputs) {
  node->next_edges.reserve(inputs.size());
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  attach(out, node);
  if (t_trace != nullptr) [[unlikely]] {
    std::vector<const Tensor*> ins;
    for (const Tensor& t : inputs) ins.push_back(&t);
    t_trace->on_record(node, out, ins, false);
  }
}

// ---- views and in-place ops ----------------------------------------------------------
// A view and its base share one storage, so they share the version counter. Two
// things keep their histories right when either is modified in place (PyTorch's
// scheme):
//  - in place on a view rewrites the *base's* history with a CopySlices node: the
//    base's gradient passes unchanged outside the view's region, and inside it goes
//    through the in-place op's backward;
//  - a view whose base's history changed re-derives its own lazily
//    (detail::refresh_view): AsStridedBackward, the base's gradient restricted to
//    the view's elements, on top of the base's current grad_fn.
// Both express "the view's elements" by the view's geometry (shape, strides,
// offset) relative to the base's, so they work for any chain of view ops.
namespace {

struct Geometry {
  Shape shape;
  Strides strides;
  int64_t offset = 0;
};

// The base's and the view's geometry, with offsets relative to the first storage
// element the base covers, so that a buffer of `span` elements can stand in for
// the storage. `reduced` is the view with its expanded (stride 0) dims cut to 1:
// the elements it covers, each once.
struct ViewGeometry {
  Geometry base, view, reduced;
  Dims expanded;
  int64_t span = 1;
};
using ViewGeometryPtr = std::shared_ptr<const ViewGeometry>;

// True when two indices of `g` may reach one element: the dims (size > 1) sorted by
// stride must each step over everything the smaller ones cover.
bool may_overlap(const Shape& shape, const Strides& strides) {
  std::array<std::pair<int64_t, int64_t>, kMaxDims> dims;  // (|stride|, size); no allocation
  size_t k = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] > 1) dims[k++] = {strides[d] < 0 ? -strides[d] : strides[d], shape[d]};
  for (size_t i = 1; i < k; ++i)  // insertion sort: at most kMaxDims entries
    for (size_t j = i; j > 0 && dims[j] < dims[j - 1]; --j) std::swap(dims[j], dims[j - 1]);
  int64_t extent = 0;
  for (size_t i = 0; i < k; ++i) {
    if (dims[i].first <= extent) return true;
    extent += dims[i].first * (dims[i].second - 1);
  }
  return false;
}

ViewGeometryPtr view_geometry(const TensorImpl& base, const TensorImpl& view) {
  auto geo = std::make_shared<ViewGeometry>();
  int64_t lo = base.offset, hi = base.offset;
  if (numel_of(base.shape) > 0)
    for (size_t d = 0; d < base.shape.size(); ++d) {
      const int64_t ext = (base.shape[d] - 1) * base.strides[d];
      (ext < 0 ? lo : hi) += ext;
    }
  geo->span = hi - lo + 1;
  geo->base = Geometry{base.shape, base.strides, base.offset - lo};
  geo->view = Geometry{view.shape, view.strides, view.offset - lo};
  geo->reduced = geo->view;
  for (size_t d = 0; d < view.shape.size(); ++d)
    if (view.strides[d] == 0 && view.shape[d] > 1) {
      geo->expanded.push_back(static_cast<int64_t>(d));
      geo->reduced.shape[d] = 1;
    }
  return geo;
}

Tensor scatter_region(const Tensor& g, const ViewGeometryPtr& geo, bool reduced);

// The view's elements of `g` (a tensor of the base's shape): lay g out in a buffer
// with the base's geometry, read it back with the view's. Recorded (its backward
// is scatter_region), so double backward works.
Tensor gather_region(const Tensor& g, const ViewGeometryPtr& geo, bool reduced) {
  Tensor buf = empty({geo->span}, TensorOptions(g.dtype()).device(g.device()));
  Tensor b = detail::make_alias(buf, geo->base.shape, geo->base.strides, geo->base.offset);
  backend_of(b).copy(b, g);
  const Geometry& v = reduced ? geo->reduced : geo->view;
  Tensor out = detail::make_alias(buf, v.shape, v.strides, v.offset);
  if (needs_grad(g))
    record("as_strided", out, {&g},
           [geo, reduced](const Tensor& gg, Node&) { return tensor_list{scatter_region(gg, geo, reduced)}; });
  return out;
}

// The adjoint: `g` (the view's shape) written into zeros of the base's shape at the
// view's elements. An expanded view reaches one element several times, so its
// gradient is summed over the expanded dims first.
Tensor scatter_region(const Tensor& g, const ViewGeometryPtr& geo, bool reduced) {
  Tensor src = (!reduced && !geo->expanded.empty()) ? sum(g, geo->expanded, true) : g;
  Tensor buf = zeros({geo->span}, TensorOptions(g.dtype()).device(g.device()));
  {
    Tensor r = detail::make_alias(buf, geo->reduced.shape, geo->reduced.strides, geo->reduced.offset);
    backend_of(r).copy(r, src);
  }
  Tensor out = detail::make_alias(buf, geo->base.shape, geo->base.strides, geo->base.offset);
  if (needs_grad(src))
    record("as_strided_scatter", out, {&src},
           [geo](const Tensor& gg, Node&) { return tensor_list{gather_region(gg, geo, true)}; });
  return out;
}

// The base's new grad_fn after an in-place op on one of its views. `fn_` is that
// op's own node (its first gradient is for the view's old value, the rest for the
// other operands); edge 0 is the base's old history.
class CopySlices final : public Node {
 public:
  CopySlices(std::shared_ptr<Node> fn, ViewGeometryPtr geo)
      : Node("CopySlices"), fn_(std::move(fn)), geo_(std::move(geo)) {}
  tensor_list apply(const Tensor& g) override {
    tensor_list r = fn_->apply(gather_region(g, geo_, true));
    GS_CHECK(r.size() == next_edges.size(), fn_->name(), "backward returned ", r.size(), " gradients for ",
             next_edges.size(), " inputs");
    Tensor in_view;
    {
      NoGradGuard ng;  // which elements the view covers: a constant
      in_view =
          scatter_region(ones(geo_->reduced.shape, TensorOptions(g.dtype()).device(g.device())), geo_, true) != 0.0;
    }
    // where(), not arithmetic: an infinite gradient outside the view must not turn
    // into NaN inside it (inf - inf).
    Tensor self_part = r[0].defined() ? scatter_region(r[0], geo_, true) : zeros_like(g.detach());
    r[0] = where(in_view, self_part, g);
    return r;
  }
  void release_saved() override {
    fn_->release_saved();
    released_ = true;
  }

 private:
  std::shared_ptr<Node> fn_;
  ViewGeometryPtr geo_;
};

std::string view_and_base(const Tensor& view, const Tensor& base) {
  std::string s = "the view " + view.str() + " of " + base.str();
  if (base.grad_fn()) s += std::string(" (computed by '") + base.grad_fn()->name() + "')";
  return s;
}

}  // namespace

void detail::refresh_view(TensorImpl& v) {
  v.view_version = v.storage->version();
  TensorImpl& b = *v.view_base;  // a root: never itself a view, so its fields are current
  if (!b.requires_grad || v.view_base_fn.lock() == b.grad_fn) return;
  // The base's history changed (an in-place op on it or on one of its views): the
  // view's values now come from the base's new history.
  GS_CHECK(!may_overlap(b.shape, b.strides), "view", "cannot re-derive the history of a view of ",
           Tensor(v.view_base).str(),
           ": that tensor has overlapping memory (an expanded tensor that was "
           "detached); call clone() on it before taking views.");
  v.view_base_fn = b.grad_fn;
  auto node = std::make_shared<LambdaNode<std::function<tensor_list(const Tensor&, Node&)>>>(
      "AsStridedBackward",
      [geo = view_geometry(b, v)](const Tensor& g, Node&) { return tensor_list{scatter_region(g, geo, false)}; });
  node->next_edges.push_back(gradient_edge(Tensor(v.view_base)));
  node->out_shape = v.shape;
  node->out_dtype = v.dtype;
  if (v.grad_fn) node->pre_hooks = v.grad_fn->pre_hooks;  // hooks and retain_grad() on the view stay with it
  v.grad_fn = std::move(node);
  v.requires_grad = true;
}

void check_inplace(const Tensor& self, const char* op) {
  if (!GradMode::is_enabled()) return;
  GS_CHECK(!(self.requires_grad() && self.is_leaf()), op, "a leaf tensor that requires grad (", self.str(),
           ") is being modified in place. Autograd needs its value to compute gradients. If this is a parameter "
           "update, do it inside a gs::NoGradGuard; otherwise use the out-of-place op.");
  if (const auto& bp = self.impl().view_base) {
    Tensor base(bp);
    GS_CHECK(!(base.requires_grad() && base.is_leaf()), op, view_and_base(self, base),
             " is being modified in "
             "place, but that base is a leaf that requires grad: the op would change the leaf itself, whose value "
             "autograd needs (as in PyTorch, this is refused). If this is a parameter update, do it inside a "
             "gs::NoGradGuard; otherwise modify a copy: y = x.clone(), then y.narrow(...).",
             op, "(...).");
    GS_CHECK(!(base.requires_grad() && may_overlap(base.shape(), base.strides())), op, view_and_base(self, base),
             " is being modified in place, but the base has overlapping memory (an expanded tensor), so the "
             "gradient of its elements is ambiguous. Call clone() on the base first.");
  }
}

void finish_inplace(Tensor& self, const char* op, const std::shared_ptr<Node>& node,
                    std::initializer_list<const Tensor*> other_inputs) {
  self.storage()->bump_version(op);
  if (node == nullptr || !GradMode::is_enabled()) return;
  TensorImpl& si = self.impl();
  if (!si.view_base) {
    if (!(self.requires_grad() || needs_grad(other_inputs))) return;
    // The node's first input is self's old history; the rest are the other operands.
    node->next_edges.push_back(gradient_edge(self));
    for (const Tensor* t : other_inputs) node->next_edges.push_back(t ? gradient_edge(*t) : Edge{});
    if (t_trace != nullptr) [[unlikely]] {
      std::vector<const Tensor*> ins{&self};  // self's layout before the node becomes its history
      ins.insert(ins.end(), other_inputs.begin(), other_inputs.end());
      t_trace->on_record(node, self, ins, true);
    }
    attach(self, node);
    return;
  }
  // In place on a view: the base's history goes through CopySlices, and the view's
  // own is re-derived from it right away.
  Tensor base(si.view_base);
  if (!(base.requires_grad() || self.requires_grad() || needs_grad(other_inputs))) return;
  GS_CHECK(!may_overlap(base.shape(), base.strides()), op, view_and_base(self, base),
           " was modified in place with "
           "an operand that requires grad, but the base has overlapping memory (an expanded tensor), so the "
           "gradient of its elements is ambiguous. Call clone() on the base first.");
  node->out_shape = self.shape();
  node->out_dtype = self.dtype();
  auto cs = std::make_shared<CopySlices>(node, view_geometry(base.impl(), si));
  cs->next_edges.push_back(gradient_edge(base));
  for (const Tensor* t : other_inputs) cs->next_edges.push_back(t ? gradient_edge(*t) : Edge{});
  if (t_trace != nullptr) [[unlikely]] {
    std::vector<const Tensor*> ins{&base};
    ins.insert(ins.end(), other_inputs.begin(), other_inputs.end());
    t_trace->on_record(cs, base, ins, true);
  }
  attach(base, cs);
  si.view_base_fn.reset();
  detail::refresh_view(si);
}

// ---- GraphTrace (core/graph_trace.h) ------------------------------------------------------
namespace autograd {

GraphTrace::GraphTrace() : prev_(t_trace), active_(true) { t_trace = this; }
GraphTrace::~GraphTrace() { stop(); }

void GraphTrace::stop() {
  if (!active_) return;
  active_ = false;
  if (t_trace == this) t_trace = prev_;
  pending_.clear();
}

GraphTrace* GraphTrace::current() { return t_trace; }

TensorLayout GraphTrace::layout_of(const Tensor& t) {
  TensorLayout l;
  if (!t.defined()) return l;
  const TensorImpl& i = t.impl();
  l.impl = &i;
  l.storage = i.storage.get();
  l.shape = i.shape;
  l.strides = i.strides;
  l.offset = i.offset;
  l.dtype = i.dtype;
  l.device = t.device();
  l.version = t.version();
  l.requires_grad = i.requires_grad;
  l.is_leaf = i.grad_fn == nullptr;
  l.is_view = i.is_view;
  l.name = i.name;
  return l;
}

void GraphTrace::on_record(const std::shared_ptr<Node>& node, const Tensor& out,
                           const std::vector<const Tensor*>& inputs, bool inplace) {
  RecordedNode r;
  r.node = node;
  r.output = layout_of(out);
  r.inplace = inplace;
  r.inputs.reserve(inputs.size());
  for (const Tensor* t : inputs) r.inputs.push_back(t ? layout_of(*t) : TensorLayout{});
  forward_.push_back(std::move(r));
}

void GraphTrace::on_pass_begin() {
  ++passes_;
  pending_.clear();
}

void GraphTrace::on_contribution(Node* to, const Node* from, size_t input, const Tensor& grad) {
  pending_[to].push_back(GradContribution{from, input, grad.detach()});
}

void GraphTrace::on_run(Node* n, const Tensor& grad, bool ran) {
  BackwardStep s;
  s.node = n->shared_from_this();
  if (auto it = pending_.find(n); it != pending_.end()) {
    s.incoming = std::move(it->second);
    pending_.erase(it);
  }
  s.grad = grad.defined() ? grad.detach() : Tensor();
  s.ran = ran;
  backward_.push_back(std::move(s));
}

void GraphTrace::on_leaf(const std::shared_ptr<TensorImpl>& leaf) {
  if (backward_.empty() || leaf == nullptr) return;
  backward_.back().leaf = leaf.get();
  backward_.back().leaf_ptr = leaf;
  if (leaf->grad) {
    NoGradGuard ng;
    backward_.back().leaf_grad = Tensor(leaf->grad).detach().clone();
  }
}

}  // namespace autograd

// ---- the engine --------------------------------------------------------------------
namespace autograd {
namespace {
thread_local int t_backward_depth = 0;  // > 0 while a backward pass runs its nodes
// queue_callback's lists, one per backward running on this thread (nested when a hook calls backward).
thread_local std::vector<std::vector<std::function<void()>>> t_callbacks;
}  // namespace

namespace {

// Backward passes stamp the nodes they visit with a fresh epoch; atomic, so passes
// over separate graphs in several threads never share a stamp.
std::atomic<uint64_t> g_epoch{0};

Tensor ones_for(const Tensor& root) {
  GS_CHECK(root.numel() == 1, "backward",
           "grad can be implicitly created only for one-element outputs, but the "
           "output is ",
           root.str(),
           ". Reduce it to a scalar first (e.g. loss = out.sum() or out.mean()), or pass "
           "the gradient of the output explicitly: out.backward(grad).");
  return ones_like(root.detach());
}

// Adds g into a node's pending gradient (undefined + g = g).
void accumulate(Node::PassState& s, Tensor g) {
  if (!s.pending_grad.defined())
    s.pending_grad = std::move(g);
  else
    s.pending_grad = s.pending_grad + g;
}

struct RunOptions {
  bool retain_graph;
  bool create_graph;
  // grad(): capture gradients at these nodes instead of running them.
  std::unordered_map<Node*, size_t>* capture = nullptr;
  tensor_list* captured = nullptr;
};

void run(const tensor_list& roots, const tensor_list& grad_roots, const RunOptions& opt) {
  GS_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), "backward", "got ", roots.size(), " outputs but ",
           grad_roots.size(), " gradients");
  const uint64_t epoch = ++g_epoch;
  // Each gradient op runs in the dtype its forward op ran in, whether or not backward() is
  // called inside an autocast scope (docs/dtypes.md, "Autocast").
  detail::AutocastSuspend no_autocast;
  GraphTrace* const trace = t_trace;  // core/graph_trace.h; null unless someone records
  detail::PlainPass plain(!opt.create_graph && opt.capture == nullptr && trace == nullptr);
  if (trace != nullptr) [[unlikely]]
    trace->on_pass_begin();
  std::vector<Node*> order;  // every reachable node, discovery order
  std::vector<std::shared_ptr<Node>> keep_alive;
  // The pass's state of each node: in the node, or, for a leaf's AccumulateGrad (which another
  // thread's pass may be using at the same time), in this pass's own table.
  std::unordered_map<Node*, Node::PassState> leaves;
  const auto state = [&leaves](Node* n) -> Node::PassState& { return n->pass_local_ ? leaves[n] : n->pass_; };

  // 1. Count, for every node reachable from the roots, how many edges point to
  //    it (its dependencies). Iterative DFS: a 100,000-op chain needs no stack.
  std::vector<Node*> stack;
  auto visit = [&](Node* n) {
    Node::PassState& s = state(n);
    if (s.epoch != epoch) {
      s.epoch = epoch;
      s.dependencies = 0;
      s.pending_grad = Tensor();
      s.needed = true;
      order.push_back(n);
      stack.push_back(n);
    }
  };
  for (const Tensor& r : roots) {
    GS_CHECK(r.defined() && r.requires_grad(), "backward",
             "element of the outputs does not require grad and has no "
             "grad_fn (",
             r.defined() ? r.str() : "undefined",
             "): nothing to differentiate. Did you compute it "
             "under a NoGradGuard, detach() it, or forget requires_grad_() on the inputs?");
    Edge e = gradient_edge(r);
    keep_alive.push_back(e.fn);
    visit(e.fn.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (Edge& e : n->next_edges) {
      if (!e.fn) continue;
      visit(e.fn.get());
      ++state(e.fn.get()).dependencies;
    }
  }
  // For grad(): run only the nodes that lead to a captured input (post-order DFS).
  if (opt.capture) {
    for (Node* n : order) state(n).needed = false;
    // Post-order DFS over the same graph.
    std::vector<std::pair<Node*, size_t>> st;
    std::unordered_map<Node*, bool> done;
    for (const Tensor& r : roots) st.push_back({r.grad_fn() ? r.grad_fn().get() : gradient_edge(r).fn.get(), 0});
    while (!st.empty()) {
      auto& [n, i] = st.back();
      if (i == 0 && done.count(n)) {
        st.pop_back();
        continue;
      }
      if (i < n->next_edges.size()) {
        Node* c = n->next_edges[i++].fn.get();
        if (c && !done.count(c)) st.push_back({c, 0});
        continue;
      }
      // A node must run when one of its inputs' nodes is captured or must run.
      bool need = false;
      for (Edge& e : n->next_edges)
        if (e.fn && (state(e.fn.get()).needed || opt.capture->count(e.fn.get()))) need = true;
      state(n).needed = need;
      done[n] = true;
      st.pop_back();
    }
  }

  // 2. Seed the roots' gradients.
  for (size_t i = 0; i < roots.size(); ++i) {
    Tensor g = grad_roots.empty() || !grad_roots[i].defined() ? ones_for(roots[i]) : grad_roots[i];
    GS_CHECK(g.shape() == roots[i].shape(), "backward", "gradient of shape ", shape_str(g.shape()),
             " does not match the output's shape ", shape_str(roots[i].shape()));
    Node* seeded = gradient_edge(roots[i]).fn.get();
    if (trace != nullptr) [[unlikely]]
      trace->on_contribution(seeded, nullptr, i, g);
    accumulate(state(seeded), opt.create_graph ? g : g.detach());
  }

  // 3. Kahn's algorithm: a node runs once all of its consumers have sent their
  //    gradients (its dependencies reach 0).
  std::vector<Node*> ready;
  for (const Tensor& r : roots) {
    Node* n = gradient_edge(r).fn.get();
    if (state(n).dependencies == 0 && std::find(ready.begin(), ready.end(), n) == ready.end()) ready.push_back(n);
  }
  struct Restore {
    bool prev = GradMode::is_enabled();
    Restore() {
      ++t_backward_depth;
      t_callbacks.emplace_back();
    }
    ~Restore() {
      GradMode::set_enabled(prev);
      t_callbacks.pop_back();
      --t_backward_depth;
    }
  } restore;
  GradMode::set_enabled(opt.create_graph);
  try {
    while (!ready.empty()) {
      Node* n = ready.back();
      ready.pop_back();
      Node::PassState& s = state(n);
      Tensor g = std::move(s.pending_grad);
      s.pending_grad = Tensor();
      tensor_list grads;
      if (opt.capture) {
        auto it = opt.capture->find(n);
        if (it != opt.capture->end()) {
          Tensor& slot = (*opt.captured)[it->second];
          slot = slot.defined() ? slot + g : g;
        }
      }
      const bool run_it = s.needed && g.defined() && !(opt.capture && dynamic_cast<AccumulateGrad*>(n));
      if (run_it) {
        for (auto& hook : n->pre_hooks) {
          Tensor r = hook(g);
          if (r.defined()) g = r;
        }
        if (trace != nullptr) [[unlikely]]
          trace->on_run(n, g, true);
        grads = n->apply(g);
        if (trace != nullptr) [[unlikely]]
          if (auto* acc = dynamic_cast<AccumulateGrad*>(n)) trace->on_leaf(acc->leaf_);
        if (observers_active()) detail::notify_backward(BackwardEvent{n, &g, grads.data(), grads.size()});
        if (!opt.retain_graph) n->release_saved();
        g = Tensor();  // done with: a gradient below that shares its storage may then be rounded in place
        GS_CHECK(grads.empty() || grads.size() == n->next_edges.size(), n->name(), "backward returned ", grads.size(),
                 " gradients for ", n->next_edges.size(), " inputs");
      } else if (trace != nullptr) [[unlikely]] {
        trace->on_run(n, g, false);
      }
      for (size_t i = 0; i < n->next_edges.size(); ++i) {
        Edge& e = n->next_edges[i];
        if (!e.fn) continue;
        if (i < grads.size() && grads[i].defined()) {
          Tensor gi = std::move(grads[i]);
          // Validate what the op's backward produced: the most common bug in a
          // hand-written backward is a gradient of the wrong shape.
          GS_CHECK(gi.shape() == e.shape, n->name(), "backward produced a gradient of shape ", shape_str(gi.shape()),
                   " for input ", i, " of shape ", shape_str(e.shape),
                   ". A backward must return one gradient per input with that input's shape (reduce broadcast "
                   "dims with sum_to).");
          if (gi.dtype() != e.dtype) {
            const detail::CastBackward c = detail::cast_backward(e, gi.dtype());
            if (c == detail::CastBackward::Round) gi = gi.to(e.dtype);
            if (c == detail::CastBackward::RoundThrough) gi = detail::round_through(gi, e.dtype);
          }
          if (trace != nullptr) [[unlikely]]
            trace->on_contribution(e.fn.get(), n, i, gi);
          accumulate(state(e.fn.get()), std::move(gi));
        }
        if (--state(e.fn.get()).dependencies == 0) ready.push_back(e.fn.get());
      }
    }
    // queue_callback's callbacks, by index: a callback may queue another.
    for (size_t i = 0; i < t_callbacks.back().size(); ++i) {
      std::function<void()> cb = std::move(t_callbacks.back()[i]);
      cb();
    }
  } catch (...) {
    // A failed backward frees the graph's saved tensors as a finished one would:
    // an in-place op on a saved input (the usual cause) links that tensor to a
    // node that saved it, a reference cycle nothing else would break.
    for (Node* n : order) {
      state(n).pending_grad = Tensor();
      if (!opt.retain_graph) n->release_saved();
    }
    throw;
  }
}

}  // namespace

bool in_backward() { return t_backward_depth > 0; }

void queue_callback(std::function<void()> cb) {
  GS_CHECK(!t_callbacks.empty(), "autograd::queue_callback",
           "called outside a backward pass: queue a callback "
           "from a tensor hook while backward() runs (it then runs when that backward finishes)");
  t_callbacks.back().push_back(std::move(cb));
}

void backward(const tensor_list& roots, const tensor_list& grad_roots, bool retain_graph, bool create_graph) {
  run(roots, grad_roots, RunOptions{retain_graph || create_graph, create_graph});
}

tensor_list grad(const tensor_list& outputs, const tensor_list& inputs, const tensor_list& grad_outputs,
                 std::optional<bool> retain_graph, bool create_graph, bool allow_unused) {
  std::unordered_map<Node*, size_t> capture;
  std::vector<std::shared_ptr<Node>> keep;
  for (size_t i = 0; i < inputs.size(); ++i) {
    GS_CHECK(inputs[i].defined() && inputs[i].requires_grad(), "grad", "input ", i, " (",
             inputs[i].defined() ? inputs[i].str() : "undefined", ") does not require grad");
    Edge e = gradient_edge(inputs[i]);
    keep.push_back(e.fn);
    GS_CHECK(capture.emplace(e.fn.get(), i).second, "grad", "input ", i, " appears twice in inputs");
  }
  tensor_list captured(inputs.size());
  run(outputs, grad_outputs, RunOptions{retain_graph.value_or(create_graph), create_graph, &capture, &captured});
  for (size_t i = 0; i < inputs.size(); ++i) {
    GS_CHECK(captured[i].defined() || allow_unused, "grad", "input ", i, " (", inputs[i].str(),
             ") was not used to compute the outputs; pass allow_unused=true to get an undefined gradient for it");
  }
  return captured;
}

}  // namespace autograd
}  // namespace gradsleuth
