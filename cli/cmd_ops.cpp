// gradsleuth ops: lists the op registry, the table every op-wide test walks.
#include <cstdio>
#include <iostream>

#include "cli/cli.h"
#include "core/json.h"
#include "core/op_registry.h"

namespace gradsleuth::cli {

int cmd_ops(const std::vector<std::string>& args) {
  Args a("ops", args);
  a.about(
      "Lists every op of the engine's registry (core/op_registry.cpp): its name, category, whether it is\n"
      "differentiable and whether its backward is itself differentiable (double backward).");
  a.flag("json", "print one JSON object {\"ops\":[...]} instead of the table");
  if (!a.parse()) return 0;
  const auto& ops = op_registry();
  if (a.has("json")) {
    std::cout << "{\"ops\":[";
    for (size_t i = 0; i < ops.size(); ++i)
      std::cout << (i ? "," : "") << "{\"name\":" << json_str(ops[i].name)
                << ",\"category\":" << json_str(ops[i].category)
                << ",\"differentiable\":" << json_bool(ops[i].differentiable)
                << ",\"double_backward\":" << json_bool(ops[i].double_backward) << "}";
    std::cout << "]}\n";
    return 0;
  }
  std::printf("%-24s %-12s %-15s %s\n", "op", "category", "differentiable", "double_backward");
  for (const OpInfo& o : ops)
    std::printf("%-24s %-12s %-15s %s\n", o.name.c_str(), o.category.c_str(), o.differentiable ? "yes" : "no",
                o.double_backward ? "yes" : "no");
  std::printf("%zu ops\n", ops.size());
  return 0;
}

}  // namespace gradsleuth::cli
