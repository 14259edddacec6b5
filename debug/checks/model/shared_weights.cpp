// M4 shared weights (see model_checks.h): one layer instance at two places in the model, or one
// parameter tensor registered under two names.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "debug/checks/model/model_checks.h"
#include "debug/checks/model/model_util.h"

namespace gradsleuth::debug {

using namespace model_detail;

// ---- M4 ------------------------------------------------------------------------------------
std::vector<Finding> check_shared_weights(nn::Module& model) {
  std::vector<Finding> out;
  std::map<const nn::Module*, std::vector<std::string>> module_paths;
  std::vector<std::pair<std::string, nn::ModulePtr>> unique;
  for (auto& [path, m] : model.named_modules()) {
    auto& v = module_paths[m.get()];
    if (v.empty()) unique.emplace_back(path, m);
    v.push_back(path.empty() ? "(model)" : path);
  }
  for (auto& [path, m] : unique) {
    const auto& paths = module_paths[m.get()];
    if (paths.size() < 2 || m->num_parameters() == 0) continue;
    Finding f;
    f.check = "M4";
    f.severity = Severity::Warning;
    std::string list;
    for (const auto& p : paths) list += (list.empty() ? "" : " and ") + p;
    f.title = "one " + m->type_name() + " instance is used at " + list + ": its " +
              std::to_string(m->num_parameters()) + " parameters are shared";
    f.module = module_label(path, *m);
    f.evidence = {{"paths", static_cast<double>(paths.size()), "> 1 means shared"},
                  {"shared parameters", static_cast<double>(m->num_parameters()), ""}};
    f.cause =
        "the same layer object was added twice (e.g. reusing a variable in a loop or in Sequential) where two "
        "layers were meant: both places compute with one set of weights, which get the sum of both "
        "gradients, and the model has fewer parameters than it looks";
    f.fix =
        "create a new layer instance for each place (std::make_shared<nn::Linear>(...) twice); if the weights "
        "are tied on purpose, ignore this";
    out.push_back(std::move(f));
  }
  // Parameters registered in two different modules that share one storage
  // (register_parameter detaches, so the handles differ but the memory is one).
  std::map<const Storage*, std::vector<std::string>> param_paths;
  std::map<const Storage*, Shape> shapes;
  std::vector<const Storage*> order;
  for (auto& [path, m] : unique)
    for (auto& [n, p] : m->named_parameters(false)) {
      const Storage* st = p.storage().get();
      auto& v = param_paths[st];
      if (v.empty()) {
        order.push_back(st);
        shapes[st] = p.shape();
      }
      v.push_back(path.empty() ? n : path + "." + n);
    }
  for (const Storage* t : order) {
    const auto& paths = param_paths[t];
    if (paths.size() < 2) continue;
    Finding f;
    f.check = "M4";
    f.severity = Severity::Warning;
    std::string list;
    for (const auto& p : paths) list += (list.empty() ? "" : ", ") + p;
    f.title = "one parameter tensor is registered under " + std::to_string(paths.size()) + " names: " + list;
    f.parameter = paths[0];
    f.shape = shape_str(shapes[t]);
    f.evidence = {{"names", static_cast<double>(paths.size()), "> 1 means shared"}};
    f.cause = "two layers hold the same tensor (assigned from one to the other): they update together";
    f.fix = "give each layer its own parameter (clone() it); if the tying is intended, ignore this";
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace gradsleuth::debug
