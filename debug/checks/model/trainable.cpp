// M10 trainable parameters against the optimizer's groups (see model_checks.h).
#include "debug/checks/model/model_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/hooks.h"
#include "debug/checks/model/behaviour.h"
#include "debug/checks/model/model_util.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "optim/adam.h"

namespace gradsleuth::debug {

using namespace model_detail;

// ---- M10 -----------------------------------------------------------------------------------
std::vector<Finding> check_trainable(nn::Module& model, const optim::Optimizer* optimizer) {
  std::vector<Finding> out;
  const auto params = model.named_parameters();
  int64_t trainable_n = 0, frozen_n = 0, trainable_t = 0, frozen_t = 0;
  std::ostringstream per_module;
  for (auto& [path, m] : model.named_modules()) {
    int64_t tr = 0, fr = 0;
    for (auto& [n, p] : m->named_parameters(false)) (p.requires_grad() ? tr : fr) += p.numel();
    if (tr + fr == 0) continue;
    per_module << "\n  " << module_label(path, *m) << ": " << tr << " trainable, " << fr << " frozen";
  }
  for (auto& [n, p] : params) {
    if (p.requires_grad()) {
      trainable_n += p.numel();
      ++trainable_t;
    } else {
      frozen_n += p.numel();
      ++frozen_t;
    }
  }
  Finding info;
  info.check = "M10";
  info.severity = Severity::Info;
  info.title = std::to_string(trainable_n) + " trainable and " + std::to_string(frozen_n) + " frozen parameters";
  info.module = "(model)";
  info.evidence = {{"trainable values", static_cast<double>(trainable_n), ""},
                   {"frozen values", static_cast<double>(frozen_n), ""}};
  info.cause = "per module:" + per_module.str();
  out.push_back(info);

  if (optimizer) {
    const std::set<const TensorImpl*> held = held_parameters(*optimizer);
    std::vector<std::string> frozen_held, missing;
    for (auto& [n, p] : params) {
      const bool in = held.count(p.impl_ptr().get()) > 0;
      if (in && !p.requires_grad()) frozen_held.push_back(n);
      if (!in && p.requires_grad()) missing.push_back(n);
    }
    auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + v[i];
      if (v.size() > 8) s += ", ...";
      return s;
    };
    if (!frozen_held.empty()) {
      // A frozen body under a head that trains is how fine-tuning goes (the optimizer skips a
      // parameter without a gradient, and gradual unfreezing builds it over every layer and unfreezes
      // them later); a frozen parameter of the output layer is the wrong module frozen.
      std::set<std::string> head;  // the output layer's parameters: the last leaf module with parameters
      bool head_trains = false;
      const auto leaves = leaf_modules(model);
      for (auto it = leaves.rbegin(); it != leaves.rend() && head.empty(); ++it)
        for (auto& [n, p] : it->second->named_parameters(false)) {
          head.insert(it->first.empty() ? n : it->first + "." + n);
          head_trains = head_trains || p.requires_grad();
        }
      const auto in_head = std::count_if(frozen_held.begin(), frozen_held.end(),
                                         [&](const std::string& n) { return head.count(n) > 0; });
      const bool body_only = head_trains && in_head == 0;
      Finding f;
      f.check = "M10";
      f.kind = Kind::FrozenInOptimizer;
      f.severity = body_only ? Severity::Info : Severity::Warning;
      f.title = std::to_string(frozen_held.size()) + " frozen parameters are in the optimizer (" + optimizer->name() +
                (body_only ? "), below a head that trains: it skips them while they stay frozen: "
                           : "): it expects to train them, but they never get a gradient: ") +
                list(frozen_held);
      f.parameter = frozen_held[0];
      f.evidence = {{"frozen parameters held by the optimizer", static_cast<double>(frozen_held.size()), ""},
                    {"of them in the output layer", static_cast<double>(in_head), "> 0 (or no trainable head) warns"}};
      f.cause = body_only ? "a frozen body (feature extraction), or layers unfrozen later in training (gradual "
                            "unfreezing): the optimizer holds them and updates them once they get gradients"
                          : "requires_grad_(false) was applied to layers the optimizer was built to train: often the "
                            "wrong module was frozen (the head instead of the backbone)";
      f.fix = body_only ? "nothing to fix if the freezing is meant"
                        : "freeze exactly the modules you mean to keep fixed, and build the optimizer from the "
                          "trainable parameters only";
      out.push_back(std::move(f));
    }
    if (!missing.empty()) {
      Finding f;
      f.check = "M10";
      f.kind = Kind::MissingFromOptimizer;
      f.severity = Severity::Warning;
      f.title = std::to_string(missing.size()) +
                " trainable parameters are in no optimizer group: they get "
                "gradients but never change: " +
                list(missing);
      f.parameter = missing[0];
      f.evidence = {
          {"trainable parameters missing from the optimizer", static_cast<double>(missing.size()), "> 0 warns"}};
      f.cause = "the optimizer was built before these layers existed, or from a sub-module's parameters only";
      f.fix = "build the optimizer from model.parameters() (or add_param_group for layers added later)";
      out.push_back(std::move(f));
    }
  }
  // A frozen output layer while the rest trains.
  // Only where a layer trains: a parameter of the wrapper itself (a temperature fitted after training, with
  // every layer frozen) is no earlier layer.
  const auto leaves = leaf_modules(model);
  const bool a_layer_trains = std::any_of(leaves.begin(), leaves.end(), [](const auto& pm) {
    for (auto& [n, p] : pm.second->named_parameters(false))
      if (p.requires_grad()) return true;
    return false;
  });
  if (trainable_t > 0 && a_layer_trains) {
    for (auto it = leaves.rbegin(); it != leaves.rend(); ++it) {
      const auto own = it->second->named_parameters(false);
      if (own.empty()) continue;
      bool all_frozen = true;
      for (auto& [n, p] : own) all_frozen = all_frozen && !p.requires_grad();
      if (all_frozen) {
        Finding f;
        f.check = "M10";
        f.severity = Severity::Warning;
        f.title = "the output layer " + module_label(it->first, *it->second) + " is frozen while earlier layers train";
        f.module = module_label(it->first, *it->second);
        f.evidence = {{"frozen output parameters", static_cast<double>(own.size()), ""}};
        f.cause =
            "when fine-tuning one freezes the pretrained backbone and trains the new head; this is the "
            "reverse: the randomly initialised head is fixed";
        f.fix = "freeze the backbone and leave the head trainable";
        out.push_back(std::move(f));
      }
      break;
    }
  }
  return out;
}

void revise_missing_from_optimizer(Report& gate, nn::Module& model, const optim::Optimizer& optimizer) {
  for (size_t i = 0; i < gate.findings().size(); ++i) {
    Finding f = gate.findings()[i];
    if (!f.fires() || !f.is("M10", Kind::MissingFromOptimizer)) continue;
    // Held now: the finding's first parameter, and every trainable parameter of the model.
    const std::set<const TensorImpl*> held = held_parameters(optimizer);
    const auto params = model.named_parameters();
    const auto first =
        std::find_if(params.begin(), params.end(), [&](const auto& np) { return np.first == f.parameter; });
    const bool all_held = std::none_of(params.begin(), params.end(), [&](const auto& np) {
      return np.second.requires_grad() && !held.count(np.second.impl_ptr().get());
    });
    if (first == params.end() || !all_held || !held.count(first->second.impl_ptr().get())) continue;
    f.severity = Severity::Info;
    f.title += " (at the start of the run; by its end the optimizer holds them: added during training)";
    f.evidence.push_back({"trainable parameters outside the optimizer at the end of the run", 0.0, "0: added later"});
    f.cause =
        "layers kept out of the optimizer at first and added with add_param_group during the run (a backbone "
        "unfrozen after a few epochs, gradual unfreezing): they change from the step they were added on";
    f.fix =
        "nothing, if the staging is meant; to skip computing their gradients while they wait, give them "
        "requires_grad_(false) until they are added";
    gate.replace(i, f);
  }
}

}  // namespace gradsleuth::debug
