// Tensor's method forms of the ops: each forwards to the free function in ops.h.
#include "core/ops.h"

namespace gradsleuth {

Tensor Tensor::add(const Tensor& o, const Scalar& alpha) const { return gradsleuth::add(*this, o, alpha); }
Tensor Tensor::add(const Scalar& o, const Scalar& alpha) const { return gradsleuth::add(*this, o, alpha); }
Tensor Tensor::sub(const Tensor& o, const Scalar& alpha) const { return gradsleuth::sub(*this, o, alpha); }
Tensor Tensor::sub(const Scalar& o, const Scalar& alpha) const { return gradsleuth::sub(*this, o, alpha); }
Tensor Tensor::mul(const Tensor& o) const { return gradsleuth::mul(*this, o); }
Tensor Tensor::mul(const Scalar& o) const { return gradsleuth::mul(*this, o); }
Tensor Tensor::div(const Tensor& o) const { return gradsleuth::div(*this, o); }
Tensor Tensor::div(const Scalar& o) const { return gradsleuth::div(*this, o); }
Tensor Tensor::pow(const Tensor& e) const { return gradsleuth::pow(*this, e); }
Tensor Tensor::pow(const Scalar& e) const { return gradsleuth::pow(*this, e); }
Tensor Tensor::neg() const { return gradsleuth::neg(*this); }
Tensor Tensor::exp() const { return gradsleuth::exp(*this); }
Tensor Tensor::log() const { return gradsleuth::log(*this); }
Tensor Tensor::sqrt() const { return gradsleuth::sqrt(*this); }
Tensor Tensor::abs() const { return gradsleuth::abs(*this); }
Tensor Tensor::sign() const { return gradsleuth::sign(*this); }
Tensor Tensor::square() const { return gradsleuth::square(*this); }
Tensor Tensor::reciprocal() const { return gradsleuth::reciprocal(*this); }
Tensor Tensor::clamp(std::optional<Scalar> lo, std::optional<Scalar> hi) const {
  return gradsleuth::clamp(*this, lo, hi);
}
Tensor Tensor::relu() const { return gradsleuth::relu(*this); }
Tensor Tensor::sigmoid() const { return gradsleuth::sigmoid(*this); }
Tensor Tensor::tanh() const { return gradsleuth::tanh(*this); }
Tensor Tensor::maximum(const Tensor& o) const { return gradsleuth::maximum(*this, o); }
Tensor Tensor::maximum(const Scalar& o) const { return gradsleuth::maximum(*this, o); }
Tensor Tensor::minimum(const Tensor& o) const { return gradsleuth::minimum(*this, o); }
Tensor Tensor::minimum(const Scalar& o) const { return gradsleuth::minimum(*this, o); }
Tensor Tensor::eq(const Tensor& o) const { return gradsleuth::eq(*this, o); }
Tensor Tensor::eq(const Scalar& o) const { return gradsleuth::eq(*this, o); }
Tensor Tensor::ne(const Tensor& o) const { return gradsleuth::ne(*this, o); }
Tensor Tensor::ne(const Scalar& o) const { return gradsleuth::ne(*this, o); }
Tensor Tensor::lt(const Tensor& o) const { return gradsleuth::lt(*this, o); }
Tensor Tensor::lt(const Scalar& o) const { return gradsleuth::lt(*this, o); }
Tensor Tensor::le(const Tensor& o) const { return gradsleuth::le(*this, o); }
Tensor Tensor::le(const Scalar& o) const { return gradsleuth::le(*this, o); }
Tensor Tensor::gt(const Tensor& o) const { return gradsleuth::gt(*this, o); }
Tensor Tensor::gt(const Scalar& o) const { return gradsleuth::gt(*this, o); }
Tensor Tensor::ge(const Tensor& o) const { return gradsleuth::ge(*this, o); }
Tensor Tensor::ge(const Scalar& o) const { return gradsleuth::ge(*this, o); }
Tensor Tensor::masked_fill(const Tensor& mask, const Scalar& v) const {
  return gradsleuth::masked_fill(*this, mask, v);
}
Tensor Tensor::isnan() const { return gradsleuth::isnan(*this); }
Tensor Tensor::isinf() const { return gradsleuth::isinf(*this); }
Tensor Tensor::isfinite() const { return gradsleuth::isfinite(*this); }

Tensor Tensor::sum() const { return gradsleuth::sum(*this); }
Tensor Tensor::sum(const Dims& d, bool k) const { return gradsleuth::sum(*this, d, k); }
Tensor Tensor::mean() const { return gradsleuth::mean(*this); }
Tensor Tensor::mean(const Dims& d, bool k) const { return gradsleuth::mean(*this, d, k); }
Tensor Tensor::max() const { return gradsleuth::amax(*this); }
Tensor Tensor::max(int64_t d, bool k) const { return gradsleuth::max(*this, d, k); }
Tensor Tensor::min() const { return gradsleuth::amin(*this); }
Tensor Tensor::min(int64_t d, bool k) const { return gradsleuth::min(*this, d, k); }
Tensor Tensor::argmax(std::optional<int64_t> d, bool k) const { return gradsleuth::argmax(*this, d, k); }
Tensor Tensor::argmin(std::optional<int64_t> d, bool k) const { return gradsleuth::argmin(*this, d, k); }
Tensor Tensor::var(const Dims& d, bool u, bool k) const { return gradsleuth::var(*this, d, u, k); }
Tensor Tensor::std(const Dims& d, bool u, bool k) const { return gradsleuth::std(*this, d, u, k); }

Tensor Tensor::matmul(const Tensor& o) const { return gradsleuth::matmul(*this, o); }
Tensor Tensor::softmax(int64_t d) const { return gradsleuth::softmax(*this, d); }
Tensor Tensor::log_softmax(int64_t d) const { return gradsleuth::log_softmax(*this, d); }
Tensor Tensor::logsumexp(const Dims& d, bool k) const { return gradsleuth::logsumexp(*this, d, k); }
Tensor Tensor::gather(int64_t d, const Tensor& i) const { return gradsleuth::gather(*this, d, i); }
Tensor Tensor::index_select(int64_t d, const Tensor& i) const { return gradsleuth::index_select(*this, d, i); }

}  // namespace gradsleuth
