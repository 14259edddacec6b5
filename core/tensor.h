// Tensor: a handle to shared tensor state (value semantics, like torch::Tensor).
// A tensor is a view onto a Storage: shape + strides + offset + dtype.
//
//   element (i0, i1, ..., ik) lives at storage.data + (offset + sum_d i_d * stride_d) * dtype_size
//
// Copying a Tensor copies the handle, not the data. Views (view, transpose,
// narrow, expand, ...) share the storage; `contiguous()`/`clone()` copy.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/scalar.h"
#include "core/shape.h"
#include "core/storage.h"

namespace gradsleuth {

class Node;
class Tensor;
using tensor_list = std::vector<Tensor>;
using GradHook = std::function<Tensor(const Tensor&)>;  // returns a replacement grad, or an undefined Tensor to keep it

// Options for factories, PyTorch style: gs::zeros({2, 3}, gs::TensorOptions().dtype(gs::kFloat64).requires_grad(true))
// or simply gs::zeros({2, 3}, gs::kFloat64).
struct TensorOptions {
  DType dtype_ = DType::Float32;
  Device device_ = Device();
  bool requires_grad_ = false;
  bool has_dtype_ = false;  // dtype given explicitly: gs::full infers it from the value otherwise
  TensorOptions() = default;
  TensorOptions(DType t) : dtype_(t), has_dtype_(true) {}
  TensorOptions(Device d) : device_(d) {}
  TensorOptions dtype(DType t) const {
    auto o = *this;
    o.dtype_ = t;
    o.has_dtype_ = true;
    return o;
  }
  TensorOptions device(Device d) const {
    auto o = *this;
    o.device_ = d;
    return o;
  }
  TensorOptions requires_grad(bool r = true) const {
    auto o = *this;
    o.requires_grad_ = r;
    return o;
  }
};
inline TensorOptions dtype(DType t) { return TensorOptions(t); }
inline TensorOptions requires_grad(bool r = true) { return TensorOptions().requires_grad(r); }

// The state behind a Tensor handle. Students rarely touch it directly.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;
  bool requires_grad = false;
  bool is_view = false;                  // made by a view op from another tensor's storage
  bool retains_grad = false;             // non-leaf that keeps .grad (retain_grad())
  std::shared_ptr<Node> grad_fn;         // the op that produced this tensor (null for leaves)
  std::weak_ptr<Node> grad_accumulator;  // leaves: the node that accumulates into .grad
  std::shared_ptr<TensorImpl> grad;      // accumulated gradient (leaves, or retain_grad)
  std::vector<GradHook> leaf_hooks;      // hooks on leaves (non-leaf hooks live on grad_fn)
  std::string name;                      // optional, shown in errors and debug reports
  // Views (made by a view op; see docs/autograd.md): the root tensor whose storage
  // this view reads (never itself a view), and the base's grad_fn when this view's
  // own history was last derived. An in-place op on the base or on any view of it
  // rewrites the base's history; when the shared version counter has moved since
  // view_version and the base's grad_fn is no longer view_base_fn, the view's
  // grad_fn is re-derived from the base's (detail::refresh_view), so an old view
  // never hands out a gradient of values it no longer holds.
  std::shared_ptr<TensorImpl> view_base;
  std::weak_ptr<Node> view_base_fn;
  uint64_t view_version = 0;
  // A C++ number beside a float16/bfloat16 tensor, held in float32 (detail::wrap_scalar): it
  // promotes as the number it is (result_type's Number tier), not as a float32 0-dim tensor.
  bool wrapped_number = false;
};

namespace detail {
// Re-derives a view's history from its base's after the base changed in place (autograd.cpp).
void refresh_view(TensorImpl& view);
}  // namespace detail

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() == false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata ---------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& sizes() const { return impl().shape; }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  const Strides& strides() const { return impl().strides; }
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t numel() const { return numel_of(impl().shape); }
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  DType scalar_type() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_contiguous() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  size_t element_size() const { return dtype_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  uint64_t version() const { return impl().storage->version(); }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  std::string str() const;  // "float32[2, 3]" — used in error messages
  const std::string& name() const { return impl().name; }
  Tensor& set_name(std::string n) {
    impl().name = std::move(n);
    return *this;
  }

  // Raw element access (CPU only). data_ptr<T>() checks the dtype; writes through
  // it are invisible to autograd's version counter.
  template <class T>
  T* data_ptr() const;
  void* raw_data() const;  // pointer to element 0 (storage + offset); an error for a non-CPU tensor
  // The address of element 0 on whatever device the tensor lives on, unchecked: for
  // backends (a CUDA kernel's operand), never to be dereferenced on the host for device tensors.
  void* unsafe_data() const;
  template <class T>
  T item() const;  // the value of a 1-element tensor, converted to T
  double item_double() const { return item<double>(); }
  template <class T>
  std::vector<T> to_vector() const;  // values in row-major order

  // ---- autograd ---------------------------------------------------------
  bool requires_grad() const { return synced().requires_grad; }
  Tensor& requires_grad_(bool r = true);
  bool is_leaf() const { return synced().grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return synced().grad_fn; }
  Tensor grad() const;             // undefined until a backward reaches this tensor
  void set_grad(const Tensor& g);  // replace .grad (undefined Tensor clears it)
  void zero_grad();                // .grad = undefined
  void retain_grad();              // keep .grad on a non-leaf
  // backward(): this must hold one element unless `gradient` is given.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false, bool create_graph = false) const;
  Tensor detach() const;  // same storage, no history
  Tensor& detach_();
  // Registers a hook called with this tensor's gradient during backward; it may
  // return a replacement. Returns a handle for remove_hook().
  size_t register_hook(GradHook hook);
  void remove_hook(size_t handle);

  // ---- conversion and copies -------------------------------------------
  Tensor to(DType t, bool copy = false) const;
  Tensor to(Device d) const;
  Tensor cpu() const { return to(kCPU); }
  Tensor cuda() const { return to(kCUDA); }
  Tensor clone() const;
  Tensor contiguous() const;

  // ---- views (share storage; differentiable) ---------------------------
  Tensor view(const Shape& shape) const;     // needs compatible strides; -1 infers one size
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // 2-D transpose
  Tensor permute(const Dims& order) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // removes `dim`
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor expand(const Shape& shape) const;  // -1 keeps a size; stride 0 on expanded dims
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor view_as(const Tensor& o) const { return view(o.shape()); }
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;

  // ---- elementwise ops ---------------------------------------------------
  // A Scalar argument is a C++ number that keeps its kind (2 vs 2.0): see core/scalar.h.
  Tensor add(const Tensor& o, const Scalar& alpha = 1) const;
  Tensor add(const Scalar& o, const Scalar& alpha = 1) const;
  Tensor sub(const Tensor& o, const Scalar& alpha = 1) const;
  Tensor sub(const Scalar& o, const Scalar& alpha = 1) const;
  Tensor mul(const Tensor& o) const;
  Tensor mul(const Scalar& o) const;
  Tensor div(const Tensor& o) const;
  Tensor div(const Scalar& o) const;
  Tensor pow(const Tensor& e) const;
  Tensor pow(const Scalar& e) const;
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor sign() const;
  Tensor square() const;
  Tensor reciprocal() const;
  Tensor clamp(std::optional<Scalar> lo, std::optional<Scalar> hi) const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor maximum(const Tensor& o) const;
  Tensor maximum(const Scalar& o) const;
  Tensor minimum(const Tensor& o) const;
  Tensor minimum(const Scalar& o) const;
  Tensor eq(const Tensor& o) const;
  Tensor eq(const Scalar& o) const;
  Tensor ne(const Tensor& o) const;
  Tensor ne(const Scalar& o) const;
  Tensor lt(const Tensor& o) const;
  Tensor lt(const Scalar& o) const;
  Tensor le(const Tensor& o) const;
  Tensor le(const Scalar& o) const;
  Tensor gt(const Tensor& o) const;
  Tensor gt(const Scalar& o) const;
  Tensor ge(const Tensor& o) const;
  Tensor ge(const Scalar& o) const;
  Tensor masked_fill(const Tensor& mask, const Scalar& value) const;
  Tensor isnan() const;
  Tensor isinf() const;
  Tensor isfinite() const;

  // ---- reductions ---------------------------------------------------------
  Tensor sum() const;
  Tensor sum(const Dims& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Dims& dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor max(int64_t dim, bool keepdim = false) const;  // values (use argmax for indices)
  Tensor min() const;
  Tensor min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor var(const Dims& dims = {}, bool unbiased = true, bool keepdim = false) const;
  Tensor std(const Dims& dims = {}, bool unbiased = true, bool keepdim = false) const;

  // ---- linear algebra, indexing -------------------------------------------
  Tensor matmul(const Tensor& o) const;
  Tensor mm(const Tensor& o) const { return matmul(o); }
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor logsumexp(const Dims& dims, bool keepdim = false) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;

  // ---- in-place ops: bump the storage version --------------------------
  // The op's result type (as for the out-of-place op) must be castable to this tensor's
  // dtype: int64.add_(1.5) is an error, float32.add_(float64 tensor) computes then casts.
  Tensor& add_(const Tensor& o, const Scalar& alpha = 1);
  Tensor& add_(const Scalar& v);
  Tensor& sub_(const Tensor& o, const Scalar& alpha = 1);
  Tensor& sub_(const Scalar& v);
  Tensor& mul_(const Tensor& o);
  Tensor& mul_(const Scalar& v);
  Tensor& div_(const Tensor& o);
  Tensor& div_(const Scalar& v);
  Tensor& relu_();
  Tensor& clamp_(std::optional<Scalar> lo, std::optional<Scalar> hi);
  Tensor& zero_();
  Tensor& fill_(const Scalar& v);
  Tensor& copy_(const Tensor& src);
  Tensor& masked_fill_(const Tensor& mask, const Scalar& value);
  // Fills in place from the generator (no autograd): used by initialisers.
  Tensor& uniform_(double lo = 0.0, double hi = 1.0);
  Tensor& normal_(double mean = 0.0, double std = 1.0);

  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  // impl(), with a view's history brought up to date first: one pointer test for
  // a tensor that is not a view, and a version compare for one that is.
  TensorImpl& synced() const {
    TensorImpl& i = impl();
    if (i.view_base && i.view_version != i.storage->version()) detail::refresh_view(i);
    return i;
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- operators (C++ numbers promote as Scalars: result_type in dtype.h) ----
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator/(const Tensor& a, const Scalar& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Scalar& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Scalar& b);
Tensor operator<=(const Tensor& a, const Scalar& b);
Tensor operator>(const Tensor& a, const Scalar& b);
Tensor operator>=(const Tensor& a, const Scalar& b);
Tensor operator==(const Tensor& a, const Scalar& b);
Tensor operator!=(const Tensor& a, const Scalar& b);
Tensor operator&&(const Tensor& a, const Tensor& b);  // logical and of bool tensors
Tensor operator||(const Tensor& a, const Tensor& b);
Tensor operator!(const Tensor& a);
Tensor& operator+=(Tensor& a, const Tensor& b);  // in place (add_)
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, const Tensor& b);
Tensor& operator+=(Tensor& a, const Scalar& b);
Tensor& operator-=(Tensor& a, const Scalar& b);
Tensor& operator*=(Tensor& a, const Scalar& b);
Tensor& operator/=(Tensor& a, const Scalar& b);

// ---- making tensors ---------------------------------------------------------
// A fresh contiguous tensor with uninitialised values.
Tensor empty(const Shape& shape, TensorOptions opts = {});
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
// Without an explicit dtype, full takes the value's kind (PyTorch): full(s, true) is bool,
// full(s, 2) int64, full(s, 2.0) float32. The value must fit the dtype (check_scalar_fits).
Tensor full(const Shape& shape, const Scalar& value, TensorOptions opts = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, const Scalar& value);
Tensor empty_like(const Tensor& t);
Tensor scalar_tensor(const Scalar& value, TensorOptions opts = {});  // 0-dim, float32 unless opts say (PyTorch)
Tensor arange(double end, TensorOptions opts = {});                  // [0, end)
Tensor arange(double start, double end, double step = 1.0, TensorOptions opts = {});
Tensor linspace(double start, double end, int64_t steps, TensorOptions opts = {});
Tensor eye(int64_t n, TensorOptions opts = {});
Tensor eye(int64_t n, int64_t m, TensorOptions opts = {});
// From values: gs::tensor({1, 2, 3}) or gs::tensor({1, 2, 3, 4}, {2, 2}).
Tensor tensor(std::initializer_list<double> values, TensorOptions opts = {});
Tensor tensor(const std::vector<double>& values, const Shape& shape, TensorOptions opts = {});
Tensor tensor(const std::vector<float>& values, const Shape& shape, TensorOptions opts = {});
Tensor tensor(const std::vector<int64_t>& values, const Shape& shape, TensorOptions opts = kInt64);
Tensor tensor(std::initializer_list<double> values, const Shape& shape, TensorOptions opts = {});
// Copies `numel(shape)` values of opts.dtype from a host buffer the caller owns.
Tensor from_blob(void* data, const Shape& shape, TensorOptions opts = {});

// Sampling factories, reproducible from the seed (see generator.h).
class Generator;
Tensor rand(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);   // U[0, 1)
Tensor randn(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);  // N(0, 1)
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts = kInt64,
               Generator* gen = nullptr);              // integers in [low, high)
Tensor randperm(int64_t n, Generator* gen = nullptr);  // int64

// True when all elements are within atol + rtol * |b| (NaN never close).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
bool equal(const Tensor& a, const Tensor& b);  // same shape and identical values

namespace detail {
// A tensor sharing t's storage with the given geometry: no autograd, no observer.
// The building block of every view; kernels use it for sub-blocks.
Tensor make_alias(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset);
// t's dims reordered by falling stride (its memory order), as an alias; `order[i]` is the dim of t
// at place i. A permutation of a dense layout (a transposed matrix) comes out contiguous.
Tensor memory_order_alias(const Tensor& t, Dims& order);
// Writes `value` into every element of t (no autograd, no check_scalar_fits): an int64
// value beyond 2^53 is stored exactly, not through a double.
void fill_unchecked(const Tensor& t, const Scalar& value);
}  // namespace detail

}  // namespace gradsleuth

namespace gs = gradsleuth;
