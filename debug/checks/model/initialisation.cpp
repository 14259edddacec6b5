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
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/activation.h"
#include "nn/checkpoint.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "optim/adam.h"

namespace gradsleuth::debug {

using namespace model_detail;
using detail::make;
using detail::num;

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
    const TensorSummary ws = summarize(w);
    const double std = ws.std;
    // One value everywhere (a constant initialisation): its scale is |mean|, and what is wrong is that every
    // unit is the same (M27 names the symmetric units), not the size.
    if (std < 1e-3 * std::fabs(ws.mean) && ws.mean != 0.0) continue;
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

// ---- M9 over the run: weights loaded from a checkpoint and re-drawn before training ------------
namespace {
// The correlation of two samples of equal length (0 where either is constant).
double correlation(const std::vector<double>& a, const std::vector<double>& b) {
  const double c = detail::pearson(a, b);
  return std::isnan(c) ? 0.0 : c;
}

// Values as nn::init::default_linear_init_ draws them for a weight of this shape: within 1 / sqrt(fan_in)
// of 0, with that bound's uniform spread (bound / sqrt(3), within 15%: a 256-value sample's spread is
// known to about 3%) and a mean near 0. A weight trained for a few hundred steps leaves the band.
bool looks_initialised(const std::vector<double>& v, const Tensor& w) {
  if (v.size() < 64 || w.dim() < 2 || w.size(0) == 0) return false;
  const double fan_in = static_cast<double>(w.numel() / w.size(0));
  const double bound = 1.0 / std::sqrt(fan_in), spread = bound / std::sqrt(3.0);
  double top = 0.0;
  for (double x : v) top = std::max(top, std::fabs(x));
  const auto [mean, var] = detail::mean_and_variance(v);
  return top <= bound * (1 + 1e-6) && std::fabs(std::sqrt(var) - spread) <= 0.15 * spread &&
         std::fabs(mean) <= 0.2 * spread;
}

// Every weight loaded from a checkpoint as a fresh initialisation draws it: the checkpoint was written
// before training (nn::save before the fit), or from a model that never trained. A warning where the
// loaded weights do not train (a frozen pretrained body); info where they do (a run restarted from its
// saved initialisation, as a lottery-ticket rewind does).
Finding untrained_checkpoint(const std::string& path, int64_t loaded, bool frozen) {
  Finding f = make("M9", frozen ? Severity::Warning : Severity::Info,
                   "every weight loaded from '" + path + "' (" + num(loaded) +
                       ") holds values as a fresh initialisation draws them: the checkpoint holds an untrained model" +
                       (frozen ? ", and the run keeps those weights frozen" : ""));
  f.kind = Kind::LoadedUntrained;
  f.step = 1;
  f.evidence = {{"weights the model holds from the latest nn::load", static_cast<double>(loaded), ">= 2"},
                {"of them within 1 / sqrt(fan_in) with a uniform draw's spread", static_cast<double>(loaded),
                 "all of them: as initialised"},
                {"loaded weights frozen (no gradient, or in no optimizer group)", frozen ? 1.0 : 0.0,
                 "1 warns; 0 (they train): info"}};
  f.cause =
      "the checkpoint was written before the model trained (nn::save called before fit(), or saved from a copy "
      "that never trained), so the 'pretrained' weights are random";
  f.fix = frozen ? "save after training (nn::save after fit()), and check the loaded model's loss on a batch: a "
                   "pretrained body starts far below chance"
                 : "none needed if starting from the saved initialisation is meant (a lottery-ticket rewind); "
                   "otherwise save after training";
  return f;
}

// At the first step the monitor sees (before its update), each weight of the model that nn::load wrote
// (the latest load into it) is compared with what was loaded: unchanged, moved (a step taken before the
// Session, an average: its values still follow the loaded ones), or re-drawn (uncorrelated with them).
class LoadedWeightsRunCheck final : public RunCheck {
 public:
  explicit LoadedWeightsRunCheck(const MonitorOptions& o) : o_(o.run) {}
  std::string ids() const override { return "M9"; }
  uint32_t events() const override { return RunEvent::BeforeStep; }
  void before_step(RunContext& c, bool) override {
    if (done_) return;
    done_ = true;
    c.note_ran("M9");
    const std::vector<nn::LoadRecord> records = nn::load_records();
    if (records.empty()) return;
    std::map<const void*, std::pair<std::string, Tensor>> weights;  // identity -> (name, tensor), dim >= 2
    for (auto& [name, t] : c.model.named_parameters())
      if (t.dim() >= 2) weights[t.impl_ptr().get()] = {name, t};
    skipped_under_other_names(c, records, weights);
    std::set<const void*> seen;
    std::string path;
    std::vector<std::string> redrawn, as_initialised;
    int64_t loaded = 0;
    bool frozen = true;  // every loaded weight: requires no gradient, or no optimizer group holds it
    const std::set<const TensorImpl*> held = held_parameters(c.optimizer);
    for (auto r = records.rbegin(); r != records.rend(); ++r)
      for (const nn::LoadedTensor& l : r->tensors) {
        const std::shared_ptr<TensorImpl> into = l.into.lock();  // null: that model is gone
        auto w = weights.find(into.get());
        if (!into || w == weights.end() || !seen.insert(into.get()).second || l.sample.empty()) continue;
        ++loaded;
        if (path.empty()) path = r->path;
        const std::vector<double> now = nn::load_sample(w->second.second);
        if (now != l.sample && std::fabs(correlation(now, l.sample)) < o_.redrawn_correlation)
          redrawn.push_back(w->second.first);
        if (looks_initialised(l.sample, w->second.second)) as_initialised.push_back(w->second.first);
        frozen = frozen && (!w->second.second.requires_grad() || !held.count(into.get()));
      }
    if (redrawn.empty() && static_cast<int64_t>(as_initialised.size()) == loaded && loaded >= 2) {
      c.add(untrained_checkpoint(path, loaded, frozen));
      return;
    }
    if (redrawn.empty()) return;
    const bool all = static_cast<int64_t>(redrawn.size()) == loaded && loaded >= 2;
    Finding f = make("M9", all ? Severity::Warning : Severity::Info,
                     all ? "every weight loaded from '" + path + "' (" + num(loaded) +
                               ") was drawn again before training: the model starts from a fresh initialisation, "
                               "not from the checkpoint"
                         : num(static_cast<int64_t>(redrawn.size())) + " of " + num(loaded) + " weights loaded from '" +
                               path + "' were drawn again before training (" + redrawn.front() +
                               (redrawn.size() > 1 ? ", ..." : "") + "): the others start from the checkpoint");
    f.kind = Kind::LoadedRedrawn;
    f.step = 1;
    f.evidence = {
        {"weights the model holds from the latest nn::load", static_cast<double>(loaded), ""},
        {"of them drawn again (values uncorrelated with the loaded ones)", static_cast<double>(redrawn.size()),
         "|correlation| < " + fmt_num(o_.redrawn_correlation) + "; all of them (2 or more) warns"}};
    f.cause = all ? "the re-initialisation meant for a new head ran over every layer (its name filter missing, "
                    "reset_parameters() on the whole model), or the model was built again after the load"
                  : "a new head re-initialised after loading a pretrained body, as transfer learning does";
    f.fix = all ? "re-initialise only the layers the checkpoint does not cover (filter by name), and check the "
                  "initial loss: a pretrained body starts below log(C)"
                : "none needed";
    c.add(f);
  }

 private:
  // The name without its first k dotted components ("" where it has no more).
  static std::string tail(const std::string& name, int k) {
    size_t at = 0;
    for (int i = 0; i < k; ++i) {
      const size_t dot = name.find('.', at);
      if (dot == std::string::npos) return "";
      at = dot + 1;
    }
    return name.substr(at);
  }
  // The same tensor under another prefix: a tail of 2 components or more in common, one or both names
  // cut ("features.1.weight" and "encoder.1.weight", "module.fc.weight" and "fc.weight").
  static bool renamed(const std::string& a, const std::string& b) {
    for (int i = 0; i <= 2; ++i)
      for (int j = 0; j <= 2; ++j) {
        const std::string ta = tail(a, i), tb = tail(b, j);
        if ((i || j) && !ta.empty() && ta == tb && ta.find('.') != std::string::npos) return true;
      }
    return false;
  }
  // The latest load into the model that skipped its weights (strict=false), where the file holds each under
  // another prefix with the same shape: they keep their initialisation.
  void skipped_under_other_names(RunContext& c, const std::vector<nn::LoadRecord>& records,
                                 const std::map<const void*, std::pair<std::string, Tensor>>& mine) {
    for (auto r = records.rbegin(); r != records.rend(); ++r) {
      std::vector<std::pair<std::string, std::string>> pairs;  // (the model's name, the file's)
      bool into_model = false;
      for (const nn::LoadedTensor& l : r->tensors) into_model = into_model || mine.count(l.into.lock().get());
      for (const nn::SkippedTensor& m : r->missing) {
        const std::shared_ptr<TensorImpl> into = m.into.lock();
        if (!into || !mine.count(into.get())) continue;
        into_model = true;
        for (const nn::SkippedTensor& u : r->unexpected)
          if (u.shape == m.shape && renamed(m.name, u.name)) {
            pairs.emplace_back(m.name, u.name);
            break;
          }
      }
      if (!into_model) continue;  // an older load into another model
      if (pairs.empty()) return;
      Finding f =
          make("M9", Severity::Warning,
               num(static_cast<int64_t>(pairs.size())) + " weight" + (pairs.size() == 1 ? "" : "s") +
                   " of the model kept their initialisation: '" + r->path + "' holds them under other names (" +
                   pairs.front().second + " for " + pairs.front().first + "), and nn::load(strict=false) skipped them");
      f.kind = Kind::LoadedSkipped;
      f.step = 1;
      f.evidence = {{"weights of the model the load skipped, held by the file under another prefix",
                     static_cast<double>(pairs.size()), ">= 1 warns"},
                    {"tensors the load wrote", static_cast<double>(r->tensors.size()), ""},
                    {"tensors of the file it skipped", static_cast<double>(r->unexpected.size()), ""}};
      f.cause =
          "the model names its layers otherwise than the model the checkpoint was saved from (a renamed attribute, "
          "the 'module.' prefix of a data-parallel wrapper), and strict=false skipped every name that differs: "
          "those layers start from a fresh initialisation, not from the checkpoint";
      f.fix =
          "rename the checkpoint's keys to the model's (nn::load_state, then the names mapped, then "
          "nn::save_state) or the model's attributes to the checkpoint's, and load with strict=true";
      c.add(f);
      return;
    }
  }

  RunCheckOptions o_;
  bool done_ = false;
};
}  // namespace

std::unique_ptr<RunCheck> make_loaded_weights_run_check(const MonitorOptions& o) {
  return std::make_unique<LoadedWeightsRunCheck>(o);
}

}  // namespace gradsleuth::debug
