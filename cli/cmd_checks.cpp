// gradsleuth checks: the catalogue of the debug module's checks (CHECKS.md),
// with where each one lives in the C++ API and on the command line.
#include <cstdio>
#include <iostream>

#include "cli/cli.h"
#include "cli/json.h"
#include "core/error.h"
#include "debug/checks.h"

namespace gradsleuth::cli {

int cmd_checks(const std::vector<std::string>& args) {
  Args a("checks", args);
  a.about("Lists every check of the debug module (../shared/CHECKS.md: D1-D10 data, L1-L7 loss, M1-M20 model,\n"
          "O1-O6 optimisation, W1-W8 workflow) with its source documents, its C++ entry point and whether it\n"
          "is implemented. docs/checks.md explains each one. --id shows one check in full.");
  a.flag("list", "list the checks (the default)");
  a.flag("json", "print [{\"id\":\"D1\",\"name\":...,\"implemented\":true,...}, ...] instead of the table");
  a.option("id", "ID", "show only this check (e.g. M7)");
  if (!a.parse()) return 0;

  std::vector<const debug::CheckInfo*> rows;
  if (a.has("id")) {
    const debug::CheckInfo* c = debug::find_check(a.get("id"));
    GS_CHECK(c != nullptr, "checks", "unknown check '", a.get("id"),
             "': ids are D1-D10, L1-L7, M1-M20, O1-O6, W1-W8 (see gradsleuth checks --list)");
    rows.push_back(c);
  } else {
    for (const debug::CheckInfo& c : debug::all_checks()) rows.push_back(&c);
  }

  if (a.has("json")) {
    std::cout << "[";
    for (size_t i = 0; i < rows.size(); ++i) {
      const debug::CheckInfo& c = *rows[i];
      std::cout << (i ? "," : "") << "{\"id\":" << json_str(c.id) << ",\"name\":" << json_str(c.name)
                << ",\"group\":" << json_str(c.group) << ",\"sources\":" << json_str(c.sources)
                << ",\"what\":" << json_str(c.what) << ",\"api\":" << json_str(c.api)
                << ",\"cli\":" << json_str(c.cli) << ",\"implemented\":" << json_bool(c.implemented) << "}";
    }
    std::cout << "]\n";
    return 0;
  }
  if (a.has("id")) {
    const debug::CheckInfo& c = *rows[0];
    std::printf("%s  %s (%s)\n  sources:     %s\n  what:        %s\n  C++:         %s\n  command:     %s\n"
                "  implemented: %s\n",
                c.id.c_str(), c.name.c_str(), c.group.c_str(), c.sources.c_str(), c.what.c_str(), c.api.c_str(),
                c.cli.empty() ? "-" : c.cli.c_str(), c.implemented ? "yes" : "no");
    return 0;
  }
  std::printf("%-4s %-36s %-13s %-14s %-5s %s\n", "id", "check", "group", "sources", "impl", "C++ entry point");
  int done = 0;
  for (const debug::CheckInfo* c : rows) {
    std::printf("%-4s %-36s %-13s %-14s %-5s %s\n", c->id.c_str(), c->name.c_str(), c->group.c_str(),
                c->sources.c_str(), c->implemented ? "yes" : "no", c->api.c_str());
    done += c->implemented ? 1 : 0;
  }
  std::printf("%zu checks, %d implemented\n", rows.size(), done);
  return 0;
}

}  // namespace gradsleuth::cli
