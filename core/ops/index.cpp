// Indexing and joining: gather, index_select, embedding, cat, stack, split.
#include "core/ops/op_utils.h"

namespace gradsleuth {

namespace {

// Indices must be int64 and in range; an out-of-range index would read outside
// the tensor, so it is checked on the host before any kernel runs.
void check_indices(const Tensor& index, int64_t limit, const char* op, const Tensor& x, int64_t dim) {
  GS_CHECK(index.dtype() == kInt64, op, "indices must be int64, got ", index.str(), ". Convert with .to(gs::kInt64).");
  detail::check_same_device(op, x, index);
  if (index.numel() == 0) return;
  NoGradGuard ng;
  Tensor lo = amin(index.to(kInt64)), hi = amax(index);
  const int64_t mn = lo.item<int64_t>(), mx = hi.item<int64_t>();
  GS_CHECK(mn >= 0 && mx < limit, op, "index out of range: indices span [", mn, ", ", mx, "] but dim ", dim, " of ",
           x.str(), " has size ", limit, " (valid indices are 0..", limit - 1, ")");
}

}  // namespace

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  GS_CHECK(index.dim() == x.dim(), "gather", "index ", index.str(), " must have as many dims as the input ", x.str());
  for (int64_t k = 0; k < x.dim(); ++k)
    GS_CHECK(k == d || index.shape()[k] <= x.shape()[k], "gather", "index ", index.str(), " is larger than the input ",
             x.str(), " in dim ", k, " (only dim ", d, " may differ)");
  check_indices(index, x.shape()[d], "gather", x, d);
  Tensor out = empty(index.shape(), TensorOptions(x.dtype()).device(x.device()));
  backend_of(x).gather(out, x, d, index);
  notify_op("gather", {x, index}, out);
  if (needs_grad(x)) {
    // Each output element came from one input element: scatter-add the gradient back.
    record("gather", out, {&x, nullptr}, [idx = index.detach(), d, shx = x.shape()](const Tensor& g, Node&) {
      return tensor_list{detail::scatter_add_grad(g, idx, d, shx), Tensor()};
    });
  }
  return out;
}

namespace detail {
// zeros(shape).scatter_add(dim, index, g), recorded so that double backward works
// (its gradient is gather(gg, dim, index)).
Tensor scatter_add_grad(const Tensor& g, const Tensor& index, int64_t dim, const Shape& shape) {
  Tensor out = zeros(shape, TensorOptions(g.dtype()).device(g.device()));
  backend_of(g).scatter_add(out, dim, index, detail::contiguous_raw(g));
  if (needs_grad(g))
    record("scatter_add", out, {&g},
           [index, dim](const Tensor& gg, Node&) { return tensor_list{gather(gg, dim, index)}; });
  return out;
}

Tensor index_add_grad(const Tensor& g, const Tensor& index, int64_t dim, const Shape& shape) {
  Tensor out = zeros(shape, TensorOptions(g.dtype()).device(g.device()));
  backend_of(g).index_add(out, dim, index, g);
  if (needs_grad(g))
    record("index_add", out, {&g},
           [index, dim](const Tensor& gg, Node&) { return tensor_list{index_select(gg, dim, index)}; });
  return out;
}
}  // namespace detail

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  GS_CHECK(index.dim() <= 1, "index_select", "index must be 1-D, got ", index.str(), "; flatten it first");
  check_indices(index, x.shape()[d], "index_select", x, d);
  Shape s = x.shape();
  s[d] = index.numel();
  Tensor out = empty(s, TensorOptions(x.dtype()).device(x.device()));
  backend_of(x).index_select(out, x, d, index.reshape({-1}));
  notify_op("index_select", {x, index}, out);
  if (needs_grad(x))
    record("index_select", out, {&x, nullptr},
           [idx = index.detach().reshape({-1}), d, shx = x.shape()](const Tensor& g, Node&) {
             return tensor_list{detail::index_add_grad(g, idx, d, shx), Tensor()};
           });
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  GS_CHECK(weight.dim() == 2, "embedding", "weight must be 2-D (num_embeddings, embedding_dim), got ", weight.str());
  GS_CHECK(indices.dtype() == kInt64, "embedding", "indices must be int64 token ids, got ", indices.str());
  Tensor flat = indices.reshape({-1});
  Tensor rows = index_select(weight, 0, flat);  // (n, D)
  Shape s = indices.shape();
  s.push_back(weight.size(1));
  return rows.reshape(s);
}

Tensor cat(const tensor_list& ts, int64_t dim) {
  GS_CHECK(!ts.empty(), "cat", "expects a non-empty list of tensors");
  const Tensor& first = ts[0];
  const int64_t d = wrap_dim(dim, first.dim(), "cat");
  std::vector<PromotionOperand> operands;  // the dtype: result_type over all inputs, as torch.cat
  int64_t total = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    detail::check_same_device("cat", first, t);
    GS_CHECK(t.dim() == first.dim(), "cat", "tensor ", i, " ", t.str(), " has ", t.dim(), " dims but tensor 0 ",
             first.str(), " has ", first.dim());
    for (int64_t k = 0; k < t.dim(); ++k)
      GS_CHECK(k == d || t.shape()[k] == first.shape()[k], "cat", "sizes must match except in dim ", d, ": tensor ", i,
               " is ", t.str(), ", tensor 0 is ", first.str());
    operands.push_back(promotion_operand(t));
    total += t.shape()[d];
  }
  const DType dt = result_type(operands.data(), operands.size());
  Shape s = first.shape();
  s[d] = total;
  Tensor out = empty(s, TensorOptions(dt).device(first.device()));
  std::vector<int64_t> sizes;
  int64_t at = 0;
  for (const Tensor& t : ts) {
    Shape ps = s;
    ps[d] = t.shape()[d];
    Tensor part = detail::make_alias(out, ps, out.strides(), at * out.strides()[d]);
    if (t.numel()) backend_of(out).copy(part, t);
    sizes.push_back(t.shape()[d]);
    at += t.shape()[d];
  }
  notify_op("cat", ts, out);
  if (needs_grad(ts)) {
    std::vector<DType> dts;
    for (const Tensor& t : ts) dts.push_back(t.dtype());
    record("cat", out, ts, [sizes, d, dts](const Tensor& g, Node&) {
      tensor_list parts = split_with_sizes(g, sizes, d);
      for (size_t i = 0; i < parts.size(); ++i)
        if (parts[i].dtype() != dts[i] && is_floating(dts[i])) parts[i] = parts[i].to(dts[i]);
      return parts;
    });
  }
  return out;
}

Tensor stack(const tensor_list& ts, int64_t dim) {
  GS_CHECK(!ts.empty(), "stack", "expects a non-empty list of tensors");
  const int64_t d = wrap_dim(dim, ts[0].dim() + 1, "stack");
  tensor_list u;
  u.reserve(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    GS_CHECK(ts[i].shape() == ts[0].shape(), "stack", "all tensors must have the same shape: tensor ", i, " is ",
             ts[i].str(), ", tensor 0 is ", ts[0].str());
    u.push_back(ts[i].unsqueeze(d));
  }
  return cat(u, d);
}

std::vector<Tensor> split_with_sizes(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    GS_CHECK(s >= 0, "split", "negative split size ", s);
    total += s;
  }
  GS_CHECK(total == x.shape()[d], "split", "split sizes add up to ", total, " but dim ", d, " of ", x.str(),
           " has size ", x.shape()[d]);
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(d, at, s));
    at += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  GS_CHECK(split_size > 0, "split", "split_size must be positive, got ", split_size);
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < x.shape()[d]; at += split_size) sizes.push_back(std::min(split_size, x.shape()[d] - at));
  return split_with_sizes(x, sizes, d);
}

}  // namespace gradsleuth
