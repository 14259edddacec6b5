// The random draws of one forward (model_util.h's forward_draws): M2 tells a model that samples from a
// distribution it computes (a VAE's latent) from noise or dropout left on at evaluation. And the constant
// masks a forward multiplies by (forward_masked): M5 tells units masked by design from units unread.
#include <cstring>
#include <memory>
#include <unordered_set>
#include <vector>

#include "core/autograd.h"
#include "core/observer.h"
#include "core/ops.h"
#include "debug/checks/model/model_util.h"

namespace gradsleuth::debug::model_detail {

namespace {
class DrawWatch final : public OpObserver {
 public:
  DrawWatch(nn::Module& model, const Tensor& x) : batch_(x.dim() > 0 ? x.size(0) : -1) {
    for (const Tensor& p : model.parameters()) know(p);
    for (const Tensor& b : model.buffers()) know(b);
    know(x);
  }
  unsigned events() const override { return kOps; }
  void on_op(const OpEvent& e) override {
    if (std::strstr(e.op, "dropout") != nullptr) draws.dropout = true;
    int64_t fresh = -1, count = 0;
    for (size_t i = 0; i < e.num_inputs; ++i) {
      const Tensor& t = e.input(i);
      if (!t.defined() || t.dim() == 0 || t.numel() <= 1 || known_.count(t.impl_ptr().get())) continue;
      fresh = static_cast<int64_t>(i);
      ++count;
    }
    if (count > 0) {
      const bool mul = std::strcmp(e.op, "mul") == 0 && e.num_inputs == 2 && count == 1;
      const Tensor* other = mul ? &e.input(fresh == 0 ? 1 : 0) : nullptr;
      const bool per_example = other != nullptr && other->defined() && other->dim() >= 1 &&
                               known_.count(other->impl_ptr().get()) > 0 && other->size(0) == batch_ &&
                               batch_ > 1 && other->numel() > batch_ - 1;
      (per_example ? draws.scaled : draws.other) += count;
    }
    if (e.output && e.output->defined()) know(*e.output);
  }
  ForwardDraws draws;

 private:
  // Known tensors are kept alive while the forward runs: a freed result's address would otherwise be
  // reused by the next tensor made, and a draw taken for a known result.
  void know(const Tensor& t) {
    if (known_.insert(t.impl_ptr().get()).second) kept_.push_back(t.impl_ptr());
  }
  int64_t batch_;
  std::unordered_set<const void*> known_;
  std::vector<std::shared_ptr<TensorImpl>> kept_;
};
class MaskWatch final : public OpObserver {
 public:
  unsigned events() const override { return kOps; }
  void on_op(const OpEvent& e) override {
    if (masked || std::strcmp(e.op, "mul") != 0 || e.num_inputs != 2) return;
    for (size_t i = 0; i < 2; ++i) {
      const Tensor &m = e.input(i), &o = e.input(1 - i);
      if (!m.defined() || !o.defined() || m.requires_grad() || !m.is_floating_point() || m.numel() < 2 ||
          m.numel() > 65536 || o.dim() < 2 || !(m.dim() < o.dim() || m.size(0) == 1))
        continue;
      const Tensor v = m.detach().to(kCPU).to(kFloat64);
      const bool binary = amax(abs(v * (v - 1.0))).item<double>() == 0.0;  // every value 0 or 1
      if (binary && amin(v).item<double>() == 0.0 && amax(v).item<double>() == 1.0) masked = true;
    }
  }
  bool masked = false;
};
}  // namespace

Tensor forward_masked(nn::Module& model, const Tensor& x, bool& masked) {
  MaskWatch watch;
  Tensor out;
  {
    ObserverGuard on(&watch, ObserverScope::ThisThread);
    out = model(x);
  }
  masked = watch.masked;
  return out;
}

ForwardDraws forward_draws(nn::Module& model, const Tensor& x) {
  DrawWatch watch(model, x);
  NoGradGuard ng;
  {
    ObserverGuard on(&watch, ObserverScope::ThisThread);
    (void)model(x);
  }
  return watch.draws;
}

}  // namespace gradsleuth::debug::model_detail
