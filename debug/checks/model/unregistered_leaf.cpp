// M5 during training, the monitor's run check for tensors the forward trains that no one registered: a
// layer kept as a module member never passed to register_module, and a layer built anew inside forward()
// at every call (see model_checks.h; M5's gate rules live in structure.cpp).
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "debug/checks/check_util.h"
#include "debug/checks/model/model_checks.h"
#include "debug/checks/model/model_util.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/checkpoint.h"

namespace gradsleuth::debug {

using namespace model_detail;

// ---- tensors the forward trains that no one registered ----------------------------------------
namespace {
constexpr size_t kMaxStrangers = 8;
constexpr int64_t kStrangerMinSteps = 5;
// At the first training loss: the leaves of the prediction's graph, inside the model's forward (the
// walk stops at the input's own graph), that require grad and that neither the model's parameters()
// nor the optimizer holds, other than tensors of the batch's length (the input, or a perturbation of
// it). Each is followed by a weak reference: one nothing else keeps alive was a temporary of its
// step. At the end, one still alive whose values never changed was trained by nothing: an
// unregistered layer (a module member never passed to register_module) or tensor.
class UnregisteredLeafRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "M5"; }
  uint32_t events() const override {
    return RunEvent::Forward | RunEvent::LossInput | RunEvent::Finish | RunEvent::Series;
  }
  void series(TrainingHistory& h) const override {
    for (const Stranger& s : rebuilt_) h.built_in_forward.push_back(shape_str(s.shape));
  }
  void forward(RunContext&, const Tensor& x) override {
    if (!looked_) input_ = x;
  }
  void loss_input(RunContext& c, nn::Loss&, const Tensor& input, const Tensor&) override {
    // The first training loss, then the first of a later step: a leaf of the first that died with its
    // step, and one of the same shape in the second's graph, are a layer built anew at every forward.
    if (looked_ && (again_ || c.steps <= steps_at_start_)) return;
    std::vector<Stranger> found;
    if (input.defined() && input.grad_fn()) {
      const int64_t batch = input_.defined() && input_.dim() > 0 ? input_.size(0) : -1;
      std::set<const Node*> input_graph;
      if (input_.defined() && input_.grad_fn()) input_graph.insert(input_.grad_fn().get());
      for (const Tensor& leaf :
           leaves_outside(input.grad_fn().get(), held_parameters(c.optimizer, &c.model), std::move(input_graph))) {
        if (found.size() >= kMaxStrangers) break;
        if (leaf.dim() == 0 || leaf.size(0) == batch || leaf.impl_ptr() == input_.impl_ptr()) continue;
        found.push_back({leaf.impl_ptr(), leaf.name(), leaf.shape(), nn::load_sample(leaf)});
      }
    }
    input_ = Tensor();
    if (!looked_) {
      looked_ = true;
      steps_at_start_ = c.steps;
      strangers_ = std::move(found);
      return;
    }
    again_ = true;
    for (const Stranger& s : strangers_)
      if (s.leaf.expired() && std::any_of(found.begin(), found.end(), [&](const Stranger& n) {
            return n.shape == s.shape && n.values != s.values;
          }))
        rebuilt_.push_back(s);
  }
  void finish(RunContext& c) override {
    const int64_t steps = c.steps - steps_at_start_;
    if (!rebuilt_.empty()) {
      std::vector<std::pair<std::string, Shape>> tensors;
      for (const Stranger& s : rebuilt_) tensors.emplace_back(s.name, s.shape);
      c.add(built_in_forward_finding(tensors));
    }
    for (const Stranger& s : strangers_) {
      const std::shared_ptr<TensorImpl> impl = s.leaf.lock();
      if (!impl || steps < kStrangerMinSteps) continue;  // a temporary of its step, or too short a run
      const Tensor t(impl);
      if (nn::load_sample(t) != s.values) continue;  // something trains it (another optimizer)
      const Tensor g = t.grad();
      c.add(unregistered_tensor_finding(s.name, s.shape, steps, kStrangerMinSteps,
                                        g.defined() ? summarize(g).norm : 0.0));
    }
    c.note_ran("M5");
  }

 private:
  struct Stranger {
    std::weak_ptr<TensorImpl> leaf;
    std::string name;
    Shape shape;
    std::vector<double> values;  // nn::load_sample at the first training loss
  };
  bool looked_ = false, again_ = false;
  Tensor input_;
  std::vector<Stranger> rebuilt_;  // leaves of the first step's graph made anew at a later step
  int64_t steps_at_start_ = 0;
  std::vector<Stranger> strangers_;
};
}  // namespace

std::unique_ptr<RunCheck> make_unregistered_leaf_run_check(const MonitorOptions&) {
  return std::make_unique<UnregisteredLeafRunCheck>();
}

}  // namespace gradsleuth::debug
