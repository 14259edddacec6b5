// Tensor basics: metadata, factories, conversion, printing, and the view ops
// (which share storage and carry their own backward).
#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/generator.h"
#include "core/observer.h"
#include "core/ops.h"

namespace gradsleuth {

TensorImpl& Tensor::impl() const {
  GS_CHECK(impl_ != nullptr, "Tensor",
           "this tensor is undefined (default-constructed, or a gradient that was never "
           "computed). Check defined() before using it.");
  return *impl_;
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "Tensor::size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "Tensor::stride")]; }

bool Tensor::is_contiguous() const {
  const auto& s = shape();
  const auto& st = strides();
  int64_t expected = 1;
  for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
    if (s[d] == 1) continue;  // a size-1 dim's stride never matters
    if (st[d] != expected) return false;
    expected *= s[d];
  }
  return true;
}

std::string Tensor::str() const {
  if (!defined()) return "undefined";
  std::string s;
  if (!name().empty()) s.append("'").append(name()).append("' ");
  s.append(dtype_name(dtype())).append(shape_str(shape()));
  if (!device().is_cpu()) s.append("@").append(device().str());
  return s;
}

void* Tensor::unsafe_data() const {
  return static_cast<char*>(storage()->data()) + offset() * static_cast<int64_t>(element_size());
}

void* Tensor::raw_data() const {
  GS_CHECK(storage()->device().is_cpu(), "Tensor::raw_data", "tensor ", str(), " lives on ", device().str(),
           ", so its memory cannot be read or written on the host. Call .cpu() first (a copy), or, inside a "
           "backend, use unsafe_data().");
  return unsafe_data();
}

template <class T>
T* Tensor::data_ptr() const {
  GS_CHECK(dtype() == dtype_of_v<T>, "Tensor::data_ptr", "asked for ", dtype_name(dtype_of_v<T>),
           " data but the tensor is ", str(), "; use data_ptr<matching type>() or .to(dtype) first");
  GS_CHECK(device().is_cpu(), "Tensor::data_ptr", "tensor ", str(), " is on ", device().str(),
           "; call .cpu() before reading its data on the host");
  return static_cast<T*>(raw_data());
}

// The float value of the float16/bfloat16 element `i` of `data`.
static float reduced_element(DType t, const void* data, int64_t i) {
  const uint16_t bits = static_cast<const uint16_t*>(data)[i];
  return t == kFloat16 ? to_float(Half::from_bits(bits)) : to_float(BFloat16::from_bits(bits));
}

// static_cast between element types, through float for the 16-bit floats (they have no
// arithmetic of their own).
template <class T, class S>
static T element_cast(S v) {
  if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>)
    return element_cast<T>(to_float(v));
  else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

template <class T>
T Tensor::item() const {
  GS_CHECK(numel() == 1, "Tensor::item", "only a one-element tensor can be converted to a scalar, got ", str(),
           ". Reduce it first (sum(), mean(), ...) or index one element.");
  Tensor c = device().is_cpu() ? *this : cpu();
  if (is_reduced_float(c.dtype())) return element_cast<T>(reduced_element(c.dtype(), c.raw_data(), 0));
  return dispatch_dtype(
      c.dtype(), [&](auto tag) -> T { return element_cast<T>(*static_cast<const decltype(tag)*>(c.raw_data())); });
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = detach().to(kCPU).to(dtype_of_v<T>).contiguous();
  const T* p = static_cast<const T*>(c.raw_data());
  return std::vector<T>(p, p + c.numel());
}

#define GS_INSTANTIATE(T)                  \
  template T* Tensor::data_ptr<T>() const; \
  template T Tensor::item<T>() const;      \
  template std::vector<T> Tensor::to_vector<T>() const;
GS_INSTANTIATE(float)
GS_INSTANTIATE(double)
GS_INSTANTIATE(int64_t)
GS_INSTANTIATE(bool)
GS_INSTANTIATE(Half)
GS_INSTANTIATE(BFloat16)
#undef GS_INSTANTIATE

// ---- autograd accessors ---------------------------------------------------
Tensor& Tensor::requires_grad_(bool r) {
  GS_CHECK(!r || is_floating_point(), "requires_grad_", "only floating-point tensors can require gradients; ", str(),
           " is ", dtype_name(dtype()), ". Convert with .to(gs::kFloat32) first.");
  GS_CHECK(r || is_leaf(), "requires_grad_", "cannot turn off requires_grad on a non-leaf tensor ", str(),
           " (it was computed by '", grad_fn()->name(), "'); use detach() instead");
  impl().requires_grad = r;
  return *this;
}

Tensor Tensor::grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }
void Tensor::set_grad(const Tensor& g) {
  if (g.defined())
    GS_CHECK(g.shape() == shape(), "Tensor::set_grad", "gradient of shape ", shape_str(g.shape()),
             " does not match the tensor's shape ", shape_str(shape()));
  impl().grad = g.impl_ptr();
}
void Tensor::zero_grad() { impl().grad.reset(); }

void Tensor::retain_grad() {
  if (is_leaf()) return;  // leaves keep .grad anyway
  if (impl().retains_grad) return;
  impl().retains_grad = true;
  std::weak_ptr<TensorImpl> weak = impl_;
  grad_fn()->pre_hooks.push_back([weak](const Tensor& g) {
    if (auto p = weak.lock()) {
      Tensor self(p);
      Tensor cur = self.grad();
      self.impl().grad = (cur.defined() ? cur + g.detach() : g.detach().clone()).impl_ptr();
    }
    return Tensor();
  });
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, gradient.defined() ? tensor_list{gradient} : tensor_list{}, retain_graph, create_graph);
}

Tensor Tensor::detach() const {
  Tensor t = detail::make_alias(*this, shape(), strides(), offset());
  return t;
}

Tensor& Tensor::detach_() {
  impl().grad_fn.reset();
  impl().requires_grad = false;
  return *this;
}

size_t Tensor::register_hook(GradHook hook) {
  GS_CHECK(requires_grad(), "register_hook", "cannot register a hook on ", str(),
           " because it does not require grad; call requires_grad_() first");
  if (is_leaf()) {
    impl().leaf_hooks.push_back(std::move(hook));
    return impl().leaf_hooks.size() - 1;
  }
  grad_fn()->pre_hooks.push_back(std::move(hook));
  return grad_fn()->pre_hooks.size() - 1;
}

void Tensor::remove_hook(size_t handle) {
  auto& hooks = is_leaf() ? impl().leaf_hooks : grad_fn()->pre_hooks;
  GS_CHECK(handle < hooks.size(), "remove_hook", "no hook with handle ", handle);
  hooks[handle] = [](const Tensor&) { return Tensor(); };  // keeps other handles valid
}

// ---- making tensors ---------------------------------------------------------
namespace detail {
Tensor memory_order_alias(const Tensor& t, Dims& order) {
  const int64_t nd = t.dim();
  order = Dims(static_cast<size_t>(nd), 0);
  for (int64_t i = 0; i < nd; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return t.strides()[a] > t.strides()[b]; });
  Shape ps(nd, 0);
  Strides pst(nd, 0);
  for (int64_t i = 0; i < nd; ++i) ps[i] = t.shape()[order[i]], pst[i] = t.strides()[order[i]];
  return make_alias(t, ps, pst, t.offset());
}

Tensor make_alias(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.storage();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}
}  // namespace detail

Tensor empty(const Shape& shape, TensorOptions opts) {
  check_dtype(opts.dtype_, "tensor factory (empty/zeros/ones/full/rand...)");
  check_device(opts.device_, "tensor factory (empty/zeros/ones/full/rand...)");
  for (int64_t s : shape)
    GS_CHECK(s >= 0, "tensor factory (empty/zeros/ones/full/rand...)", "negative size in shape ", shape_str(shape),
             "; sizes must be >= 0");
  const int64_t nbytes =
      checked_nbytes(shape, dtype_size(opts.dtype_), "tensor factory (empty/zeros/ones/full/rand...)");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(nbytes), opts.device_);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = opts.dtype_;
  Tensor t(std::move(impl));
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}

void detail::fill_unchecked(const Tensor& t, const Scalar& value) {
  // The backends fill from a double, exact for every int64 up to 2^53; a larger integer
  // is written on the host and copied (rare: ids and hashes, not arithmetic).
  const int64_t i = value.to_int64();
  if (t.dtype() != kInt64 || !value.is_integral() || (i >= -(int64_t{1} << 53) && i <= (int64_t{1} << 53))) {
    backend_of(t).fill(t, value.to_double());
    return;
  }
  Tensor host = empty(t.shape(), kInt64);
  std::fill_n(host.data_ptr<int64_t>(), host.numel(), i);
  backend_of(t).copy(t, t.is_cuda() ? host.to(t.device()) : host);
}

Tensor full(const Shape& shape, const Scalar& value, TensorOptions opts) {
  // No dtype given: the value's kind decides, as torch.full does (a floating value gives
  // the default float32, not float64).
  if (!opts.has_dtype_) opts = opts.dtype(value.is_floating() ? kDefaultFloat : value.dtype());
  check_scalar_fits(value, opts.dtype_, "full");
  bool rg = opts.requires_grad_;
  Tensor t = empty(shape, opts.requires_grad(false));
  detail::fill_unchecked(t, value);
  if (rg) t.requires_grad_(true);
  return t;
}
Tensor zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0.0, opts); }
Tensor ones(const Shape& shape, TensorOptions opts) { return full(shape, 1.0, opts); }
static TensorOptions like(const Tensor& t) { return TensorOptions(t.dtype()).device(t.device()); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), like(t)); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), like(t)); }
Tensor full_like(const Tensor& t, const Scalar& v) { return full(t.shape(), v, like(t)); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), like(t)); }
// torch.scalar_tensor does not infer the dtype from the value: float32 unless opts say.
Tensor scalar_tensor(const Scalar& value, TensorOptions opts) {
  return full({}, value, opts.has_dtype_ ? opts : opts.dtype(kDefaultFloat));
}

Tensor arange(double end, TensorOptions opts) { return arange(0, end, 1, opts); }
Tensor arange(double start, double end, double step, TensorOptions opts) {
  GS_CHECK(step != 0, "arange", "step must be non-zero");
  GS_CHECK((end - start) / step >= 0, "arange", "range [", start, ", ", end, ") is empty for step ", step,
           "; swap start and end or change the sign of step");
  const double count = std::ceil((end - start) / step);
  GS_CHECK(std::isfinite(count) && count < 9.2e18, "arange", "range [", start, ", ", end, ") with step ", step, " has ",
           count, " elements, more than a tensor can hold");
  const int64_t n = static_cast<int64_t>(count);
  Tensor t = empty({n}, opts.requires_grad(false));
  backend_of(t).arange(t, start, step);
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}
Tensor linspace(double start, double end, int64_t steps, TensorOptions opts) {
  GS_CHECK(steps >= 0, "linspace", "steps must be >= 0, got ", steps);
  Tensor t = empty({steps}, opts.requires_grad(false));
  backend_of(t).arange(t, start, steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0);
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}
Tensor eye(int64_t n, TensorOptions opts) { return eye(n, n, opts); }
Tensor eye(int64_t n, int64_t m, TensorOptions opts) {
  Tensor t = zeros({n, m}, opts.requires_grad(false));
  // The diagonal is a strided view with stride m + 1.
  Tensor diag = detail::make_alias(t, {std::min(n, m)}, {m + 1}, 0);
  backend_of(t).fill(diag, 1.0);
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}

template <class T>
static Tensor from_values(const T* values, size_t count, const Shape& shape, TensorOptions opts, const char* op) {
  GS_CHECK(static_cast<int64_t>(count) == numel_of(shape), op, count, " values cannot fill shape ", shape_str(shape),
           " (", numel_of(shape), " elements)");
  Tensor src = empty(shape, TensorOptions(dtype_of_v<T>));
  if (count) std::memcpy(src.raw_data(), values, count * sizeof(T));
  Tensor t = src.to(opts.dtype_);
  if (!opts.device_.is_cpu()) t = t.to(opts.device_);
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}
Tensor tensor(std::initializer_list<double> v, TensorOptions o) {
  return from_values(v.begin(), v.size(), {static_cast<int64_t>(v.size())}, o, "tensor");
}
Tensor tensor(std::initializer_list<double> v, const Shape& s, TensorOptions o) {
  return from_values(v.begin(), v.size(), s, o, "tensor");
}
Tensor tensor(const std::vector<double>& v, const Shape& s, TensorOptions o) {
  return from_values(v.data(), v.size(), s, o, "tensor");
}
Tensor tensor(const std::vector<float>& v, const Shape& s, TensorOptions o) {
  return from_values(v.data(), v.size(), s, o, "tensor");
}
Tensor tensor(const std::vector<int64_t>& v, const Shape& s, TensorOptions o) {
  return from_values(v.data(), v.size(), s, o, "tensor");
}

Tensor from_blob(void* data, const Shape& shape, TensorOptions opts) {
  // Copy semantics keep ownership simple: the caller may free `data` afterwards.
  Tensor t = empty(shape, TensorOptions(opts.dtype_));
  std::memcpy(t.raw_data(), data, t.nbytes());
  if (!opts.device_.is_cpu()) t = t.to(opts.device_);
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}

// Words of Philox output a sampler consumes, to advance the generator.
static uint64_t uniform_words(DType t, int64_t n) { return static_cast<uint64_t>(n) * (t == kFloat64 ? 2 : 1); }
static uint64_t normal_words(int64_t n) { return static_cast<uint64_t>((n + 1) / 2) * 4; }

Tensor rand(const Shape& shape, TensorOptions opts, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, opts.requires_grad(false));
  GS_CHECK(t.is_floating_point(), "rand", "rand needs a floating dtype, got ", dtype_name(t.dtype()),
           "; use randint for integers");
  backend_of(t).uniform(t, 0.0, 1.0, g.seed(), g.reserve(uniform_words(t.dtype(), t.numel())));
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}
Tensor randn(const Shape& shape, TensorOptions opts, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, opts.requires_grad(false));
  GS_CHECK(t.is_floating_point(), "randn", "randn needs a floating dtype, got ", dtype_name(t.dtype()));
  backend_of(t).normal(t, 0.0, 1.0, g.seed(), g.reserve(normal_words(t.numel())));
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts, Generator* gen) {
  GS_CHECK(high > low, "randint", "empty range [", low, ", ", high, ")");
  Generator& g = gen ? *gen : default_generator();
  // Uniform doubles in [0, high - low): truncation to int64 is then a floor.
  Tensor u = empty(shape, TensorOptions(kFloat64).device(opts.device_));
  backend_of(u).uniform(u, 0.0, static_cast<double>(high - low), g.seed(),
                        g.reserve(uniform_words(kFloat64, u.numel())));
  Tensor i = empty(shape, TensorOptions(kInt64).device(opts.device_));
  backend_of(u).copy(i, u);
  if (low != 0)
    backend_of(i).binary(BinaryOp::Add, i, i,
                         full(shape, static_cast<double>(low), TensorOptions(kInt64).device(opts.device_)));
  return opts.dtype_ == kInt64 ? i : i.to(opts.dtype_);
}
Tensor randperm(int64_t n, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[g.next_below(static_cast<uint64_t>(i + 1))]);  // Fisher–Yates
  return tensor(p, {n});
}

Tensor& Tensor::uniform_(double lo, double hi) {
  NoGradGuard ng;
  Generator& g = default_generator();
  Tensor tmp = is_contiguous() ? *this : empty_like(*this);
  backend_of(tmp).uniform(tmp, lo, hi, g.seed(), g.reserve(uniform_words(dtype(), numel())));
  if (!is_contiguous()) backend_of(*this).copy(*this, tmp);
  storage()->bump_version("uniform_");
  return *this;
}
Tensor& Tensor::normal_(double mean, double stdv) {
  NoGradGuard ng;
  Generator& g = default_generator();
  Tensor tmp = is_contiguous() ? *this : empty_like(*this);
  backend_of(tmp).normal(tmp, mean, stdv, g.seed(), g.reserve(normal_words(numel())));
  if (!is_contiguous()) backend_of(*this).copy(*this, tmp);
  storage()->bump_version("normal_");
  return *this;
}

// ---- conversion and copies ------------------------------------------------
// A contiguous copy in dtype `t` (no autograd).
static Tensor copy_raw(const Tensor& x, DType t, Device d) {
  Tensor out = empty(x.shape(), TensorOptions(t).device(d));
  if (x.numel() == 0) return out;
  if (d == x.device()) {
    backend_of(x).copy(out, x);
  } else {
    // Cross-device: make the source contiguous on its device (unless it is: a device without
    // kernels for the dtype, CUDA for float16, still moves it), then move bytes.
    Tensor c = x;
    if (!x.is_contiguous() || t != x.dtype()) {
      c = empty(x.shape(), TensorOptions(t).device(x.device()));
      backend_of(x).copy(c, x);
    }
    if (x.device().is_cpu())
      backend_for(d).copy_from_host(out.unsafe_data(), c.raw_data(), c.nbytes());
    else if (d.is_cpu())
      backend_of(x).copy_to_host(out.raw_data(), c.unsafe_data(), c.nbytes());
    else
      return copy_raw(copy_raw(x, t, kCPU), t, d);  // between two devices: through the host
  }
  return out;
}

Tensor Tensor::to(DType t, bool copy) const {
  check_dtype(t, "Tensor::to");
  if (t == dtype() && !copy) return *this;
  return to_dtype(*this, t);
}

Tensor Tensor::to(Device d) const {
  check_device(d, "Tensor::to");
  if (d == device()) return *this;
  Tensor out = copy_raw(*this, dtype(), d);
  if (needs_grad(*this)) {
    Device src = device();
    record("to_device", out, {this}, [src](const Tensor& g, Node&) { return tensor_list{g.to(src)}; });
  }
  notify_op("to_device", {*this}, out);
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = copy_raw(*this, dtype(), device());
  if (needs_grad(*this)) record("clone", out, {this}, [](const Tensor& g, Node&) { return tensor_list{g}; });
  notify_op("clone", {*this}, out);
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor to_dtype(const Tensor& x, DType t) {
  check_dtype(t, "to_dtype");
  Tensor out = copy_raw(x, t, x.device());
  if (is_floating(t) && needs_grad(x)) {
    DType src = x.dtype();
    record("to_dtype", out, {&x}, [src](const Tensor& g, Node&) { return tensor_list{g.to(src)}; });
  }
  notify_op("to_dtype", {x}, out);
  return out;
}

// ---- views ----------------------------------------------------------------
// Every view op: build the alias, mark it a view, record how to send the
// gradient back, tell observers.
// A view remembers its root base (a view of a view shares its base) and the
// base's history at this moment: an in-place op on the base or on any of its
// views rewrites the base's history, and this view's is then re-derived from it
// (detail::refresh_view in autograd.cpp). No allocation: two pointer copies.
template <class F>
static Tensor finish_view(const char* op, const Tensor& self, Tensor out, F&& backward) {
  TensorImpl& v = out.impl();
  v.is_view = true;
  const TensorImpl& s = self.impl();
  v.view_base = s.view_base ? s.view_base : self.impl_ptr();
  if (needs_grad(self)) record(op, out, {&self}, std::forward<F>(backward));
  v.view_base_fn = v.view_base->grad_fn;
  v.view_version = v.storage->version();
  notify_op(op, {self}, out);
  return out;
}

// Infers a -1 entry and checks the element count.
static Shape infer_shape(const Shape& shape, int64_t numel, const char* op, const Shape& from) {
  Shape s = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      GS_CHECK(infer < 0, op, "only one dimension can be -1, got ", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      GS_CHECK(s[i] >= 0, op, "invalid size ", s[i], " in shape ", shape_str(shape));
      known = checked_mul(known, s[i], op);
    }
  }
  if (infer >= 0) {
    GS_CHECK(known != 0 && numel % known == 0, op, "cannot view a tensor of shape ", shape_str(from), " (", numel,
             " elements) as ", shape_str(shape));
    s[infer] = numel / known;
  }
  GS_CHECK(numel_of(s) == numel, op, "shape ", shape_str(shape), " is invalid for a tensor of shape ", shape_str(from),
           " (", numel, " elements vs ", numel_of(s), ")");
  return s;
}

// Strides for viewing (old shape, strides) as `shape` without copying, if possible
// (the same rule as PyTorch: each new dim must lie inside one contiguous chunk).
static bool view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& shape, Strides& out) {
  out = Strides(shape.size(), 0);
  if (numel_of(old_shape) <= 1 || old_shape.empty()) {
    out = contiguous_strides(shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

Tensor Tensor::view(const Shape& shape_in) const {
  Shape s = infer_shape(shape_in, numel(), "view", shape());
  Strides st;
  GS_CHECK(is_contiguous() ? (st = contiguous_strides(s), true) : view_strides(shape(), strides(), s, st), "view",
           "cannot view ", str(), " with strides ", shape_str(strides()), " as ", shape_str(s),
           " without copying: the tensor is not contiguous in the dims being merged. Use reshape() (which copies "
           "when it must) or call contiguous() first.");
  Shape in_shape = shape();
  return finish_view("view", *this, detail::make_alias(*this, s, st, offset()),
                     [in_shape](const Tensor& g, Node&) { return tensor_list{g.reshape(in_shape)}; });
}

Tensor Tensor::reshape(const Shape& shape_in) const {
  Shape s = infer_shape(shape_in, numel(), "reshape", shape());
  Strides st;
  if (view_strides(shape(), strides(), s, st)) return view(s);
  return contiguous().view(s);
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (dim() == 0) return reshape({1});
  start = wrap_dim(start, dim(), "flatten");
  end = wrap_dim(end, dim(), "flatten");
  GS_CHECK(start <= end, "flatten", "start_dim ", start, " comes after end_dim ", end);
  Shape s;
  for (int64_t d = 0; d < start; ++d) s.push_back(shape()[d]);
  int64_t m = 1;
  for (int64_t d = start; d <= end; ++d) m *= shape()[d];
  s.push_back(m);
  for (int64_t d = end + 1; d < dim(); ++d) s.push_back(shape()[d]);
  return reshape(s);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  Shape s = shape();
  Strides st = strides();
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  return finish_view("transpose", *this, detail::make_alias(*this, s, st, offset()),
                     [d0, d1](const Tensor& g, Node&) { return tensor_list{g.transpose(d0, d1)}; });
}

Tensor Tensor::t() const {
  GS_CHECK(dim() <= 2, "t", "expects a tensor with <= 2 dims, got ", str(), "; use transpose(d0, d1) or permute");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::permute(const Dims& order) const {
  GS_CHECK(static_cast<int64_t>(order.size()) == dim(), "permute", "order ", shape_str(order), " has ", order.size(),
           " entries but the tensor ", str(), " has ", dim(), " dims");
  Shape s(order.size(), 0);
  Strides st(order.size(), 0);
  Dims inverse(order.size(), -1);
  for (size_t i = 0; i < order.size(); ++i) {
    int64_t d = wrap_dim(order[i], dim(), "permute");
    GS_CHECK(inverse[d] == -1, "permute", "dim ", d, " appears twice in ", shape_str(order));
    inverse[d] = static_cast<int64_t>(i);
    s[i] = shape()[d];
    st[i] = strides()[d];
  }
  return finish_view("permute", *this, detail::make_alias(*this, s, st, offset()),
                     [inverse](const Tensor& g, Node&) { return tensor_list{g.permute(inverse)}; });
}

// Backward of narrow/slice/select: scatter the gradient into zeros of the input's
// shape through the same view. Recorded itself, so double backward works.
static Tensor view_scatter(const Tensor& g, const Shape& in_shape,
                           const std::function<Tensor(const Tensor&)>& view_fn) {
  Tensor out = zeros(in_shape, TensorOptions(g.dtype()).device(g.device()));
  {
    Tensor dst = view_fn(out.detach());
    backend_of(out).copy(dst, g);
  }
  if (needs_grad(g))
    record("view_scatter", out, {&g}, [view_fn](const Tensor& gg, Node&) { return tensor_list{view_fn(gg)}; });
  return out;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim(), "slice");
  GS_CHECK(step > 0, "slice", "step must be positive, got ", step);
  const int64_t n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape();
  Strides st = strides();
  s[d] = end == start ? 0 : (end - start - 1) / step + 1;   // no overflow for a huge step
  if (s[d] > 1) st[d] = checked_mul(st[d], step, "slice");  // a single element's stride never matters
  Shape in_shape = shape();
  auto fn = [d, start, end, step](const Tensor& t) { return t.slice(d, start, end, step); };
  return finish_view("slice", *this, detail::make_alias(*this, s, st, offset() + start * strides()[d]),
                     [in_shape, fn](const Tensor& g, Node&) { return tensor_list{view_scatter(g, in_shape, fn)}; });
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  const int64_t n = shape()[d];
  if (start < 0) start += n;
  GS_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow", "range [", start, ", ", start + length,
           ") is outside dim ", d, " of size ", n, " in ", str());
  Shape s = shape();
  s[d] = length;
  Shape in_shape = shape();
  auto fn = [d, start, length](const Tensor& t) { return t.narrow(d, start, length); };
  return finish_view("narrow", *this, detail::make_alias(*this, s, strides(), offset() + start * strides()[d]),
                     [in_shape, fn](const Tensor& g, Node&) { return tensor_list{view_scatter(g, in_shape, fn)}; });
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d, dim(), "select");
  const int64_t n = shape()[d];
  GS_CHECK(index >= -n && index < n, "select", "index ", index, " is out of range for dim ", d, " of size ", n, " in ",
           str());
  if (index < 0) index += n;
  Shape s = shape();
  Strides st = strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  Shape in_shape = shape();
  auto fn = [d, index](const Tensor& t) { return t.select(d, index); };
  return finish_view("select", *this, detail::make_alias(*this, s, st, offset() + index * strides()[d]),
                     [in_shape, fn](const Tensor& g, Node&) { return tensor_list{view_scatter(g, in_shape, fn)}; });
}

Tensor Tensor::expand(const Shape& target) const {
  GS_CHECK(static_cast<int64_t>(target.size()) >= dim(), "expand", "cannot expand ", str(), " to fewer dims ",
           shape_str(target));
  const int64_t lead = static_cast<int64_t>(target.size()) - dim();
  Shape s = target;
  Strides st(target.size(), 0);
  for (int64_t i = static_cast<int64_t>(target.size()) - 1; i >= 0; --i) {
    const int64_t j = i - lead;
    if (j < 0) {
      GS_CHECK(target[i] >= 0, "expand", "new leading dims need explicit sizes, got ", shape_str(target));
      continue;  // new leading dim: stride 0
    }
    const int64_t have = shape()[j];
    if (target[i] == -1) s[i] = have;
    GS_CHECK(s[i] == have || have == 1, "expand", "cannot expand ", str(), " to ", shape_str(target), ": dim ", j,
             " has size ", have, " (only size-1 dims can be expanded)");
    st[i] = (s[i] == have) ? strides()[j] : 0;
  }
  if (s == shape()) return *this;
  for (int64_t v : s) GS_CHECK(v >= 0, "expand", "cannot expand ", str(), " to ", shape_str(target), ": negative size");
  checked_nbytes(s, element_size(), "expand");  // its dense copy must be addressable
  Shape in_shape = shape();
  return finish_view("expand", *this, detail::make_alias(*this, s, st, offset()),
                     [in_shape](const Tensor& g, Node&) { return tensor_list{sum_to(g, in_shape)}; });
}

Tensor Tensor::squeeze() const {
  Shape s;
  for (int64_t v : shape())
    if (v != 1) s.push_back(v);
  return s == shape() ? *this : view(s);
}
Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d, dim(), "squeeze");
  if (shape()[d] != 1) return *this;
  Shape s = shape();
  s.erase(s.begin() + d);
  Strides st = strides();
  st.erase(st.begin() + d);
  Shape in_shape = shape();
  return finish_view("squeeze", *this, detail::make_alias(*this, s, st, offset()),
                     [in_shape](const Tensor& g, Node&) { return tensor_list{g.reshape(in_shape)}; });
}
Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape s = shape();
  Strides st = strides();
  const int64_t new_stride = d < dim() ? strides()[d] * shape()[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, new_stride);
  return finish_view("unsqueeze", *this, detail::make_alias(*this, s, st, offset()),
                     [d](const Tensor& g, Node&) { return tensor_list{g.squeeze(d)}; });
}

std::vector<Tensor> Tensor::split(int64_t split_size, int64_t d) const {
  return gradsleuth::split(*this, split_size, d);
}
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t d) const {
  GS_CHECK(chunks > 0, "chunk", "chunks must be positive, got ", chunks);
  const int64_t n = size(d);
  return gradsleuth::split(*this, std::max<int64_t>(1, (n + chunks - 1) / chunks), d);
}

// ---- printing ----------------------------------------------------------------
static void print_rec(std::ostream& os, const Tensor& t, int64_t d, std::vector<int64_t>& idx, int indent,
                      bool summarize) {
  const int64_t n = t.shape()[d];
  const int64_t edge = 3;
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * edge && i == edge) {
      os << (d + 1 == t.dim() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - edge - 1;
      continue;
    }
    idx[d] = i;
    if (d + 1 == t.dim()) {
      int64_t off = t.offset();
      for (int64_t k = 0; k < t.dim(); ++k) off += idx[k] * t.strides()[k];
      if (is_reduced_float(t.dtype())) {
        os << std::setw(9) << std::setprecision(4) << std::fixed
           << reduced_element(t.dtype(), t.storage()->data(), off);
      } else
        dispatch_dtype(t.dtype(), [&](auto tag) {
          using T = decltype(tag);
          T v = static_cast<const T*>(t.storage()->data())[off];
          if constexpr (std::is_same_v<T, bool>)
            os << (v ? "true" : "false");
          else if constexpr (std::is_integral_v<T>)
            os << v;
          else
            os << std::setw(9) << std::setprecision(4) << std::fixed << v;
        });
      if (i + 1 < n) os << ", ";
    } else {
      print_rec(os, t, d + 1, idx, indent + 1, summarize);
      if (i + 1 < n) os << ",\n" << std::string(indent + 1, ' ');
    }
  }
  os << ']';
}

std::ostream& operator<<(std::ostream& os, const Tensor& t0) {
  if (!t0.defined()) return os << "tensor(undefined)";
  Tensor t = t0.device().is_cpu() ? t0 : t0.detach().cpu();
  std::ios_base::fmtflags f = os.flags();
  os << "tensor(";
  if (t.dim() == 0) {
    std::vector<int64_t> idx;
    if (is_reduced_float(t.dtype()))
      os << reduced_element(t.dtype(), t.raw_data(), 0);
    else
      dispatch_dtype(t.dtype(), [&](auto tag) { os << +*static_cast<const decltype(tag)*>(t.raw_data()); });
  } else if (t.numel() == 0) {
    os << "[]";
  } else {
    std::vector<int64_t> idx(static_cast<size_t>(t.dim()), 0);
    print_rec(os, t, 0, idx, 7, t.numel() > 1000);
  }
  os.flags(f);
  os << ", dtype=" << dtype_name(t0.dtype()) << ", shape=" << shape_str(t0.shape());
  if (!t0.device().is_cpu()) os << ", device=" << t0.device();
  if (t0.grad_fn())
    os << ", grad_fn=" << t0.grad_fn()->name();
  else if (t0.requires_grad())
    os << ", requires_grad=true";
  return os << ')';
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.shape() != b.shape()) return false;
  NoGradGuard ng;
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) return false;
    if (x[i] == y[i]) continue;  // equal infinities
    if (std::fabs(x[i] - y[i]) > atol + rtol * std::fabs(y[i])) return false;
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  NoGradGuard ng;
  return a.to_vector<double>() == b.to_vector<double>();
}

}  // namespace gradsleuth
