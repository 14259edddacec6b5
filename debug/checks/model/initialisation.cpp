// M9 initialisation: each weight's std against He/Xavier (see model_checks.h).
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

// ---- M9 ------------------------------------------------------------------------------------
std::vector<Finding> check_initialisation(nn::Module& model, const ModelCheckOptions& o) {
  std::vector<Finding> out;
  // The last weight layer registered: the model's output layer in the usual order of registration.
  const nn::Module* last = nullptr;
  for (auto& [path, m] : model.named_modules())
    if (dynamic_cast<nn::Linear*>(m.get()) || dynamic_cast<nn::Conv2d*>(m.get())) last = m.get();
  for (auto& [path, m] : model.named_modules()) {
    Tensor w;
    if (auto* l = dynamic_cast<nn::Linear*>(m.get()))
      w = l->weight;
    else if (auto* c = dynamic_cast<nn::Conv2d*>(m.get()))
      w = c->weight;
    if (!w.defined() || w.dim() < 2 || w.numel() < 16) continue;
    const auto [fan_in, fan_out] = nn::init::calculate_fan_in_and_fan_out(w);
    const double std = summarize(w).std;
    const double def = 1.0 / std::sqrt(3.0 * static_cast<double>(fan_in));
    const double xavier = std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
    const double he = std::sqrt(2.0 / static_cast<double>(fan_in));
    const double lo = std::min({def, xavier, he}) / o.init_std_factor;
    const double hi = std::max({def, xavier, he}) * o.init_std_factor;
    if (std >= lo && std <= hi) continue;
    const bool big = std > hi;
    // An output layer started small (a policy or regression head scaled down, as a zero-initialised one
    // is): nothing comes after it for the signal to shrink through.
    const bool small_head = !big && m.get() == last;
    Finding f;
    f.check = "M9";
    f.severity = small_head ? Severity::Info : Severity::Warning;
    f.title = std::string("the weight of ") + module_label(path, *m) + " is initialised " +
              (big ? "far too large" : "far too small") + ": std " + fmt_num(std) + " vs He " + fmt_num(he) +
              " / Xavier " + fmt_num(xavier) +
              (small_head ? ", in the model's last layer: an output layer started small on purpose" : "");
    f.module = module_label(path, *m);
    f.parameter = (path.empty() ? "" : path + ".") + "weight";
    f.shape = shape_of(w);
    f.evidence = {{"weight std", std, "outside [" + fmt_num(lo) + ", " + fmt_num(hi) + "] flags"},
                  {"He std sqrt(2/fan_in)", he, ""},
                  {"Xavier std sqrt(2/(fan_in+fan_out))", xavier, ""},
                  {"fan_in", static_cast<double>(fan_in), ""}};
    if (small_head) {
      f.cause =
          "a small output layer (policy and regression heads scaled by 0.01-0.1) starts the outputs near 0; no "
          "layer follows it for the signal to vanish through";
      f.fix = "none needed if it was scaled on purpose";
      out.push_back(std::move(f));
      continue;
    }
    f.cause = big ? "weights drawn without the 1/sqrt(fan_in) scale (e.g. randn): each layer multiplies the "
                    "activations' scale, the logits and gradients explode and saturating units stop learning"
                  : "weights so small that activations and gradients shrink layer after layer (vanishing signal)";
    f.fix =
        "use the layer's default initialisation, or init::kaiming_normal_ (ReLU nets) / init::xavier_uniform_ "
        "(tanh/sigmoid nets)";
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace gradsleuth::debug
