// gradsleuth checks: the catalogue of the debug module's checks, with their
// public sources and where each one lives in the C++ API and on the command line.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli/cli.h"
#include "core/error.h"
#include "core/format.h"
#include "core/json.h"
#include "debug/diagnosis/diagnosis.h"
#include "debug/evidence/catalogue.h"

namespace gradsleuth::cli {

namespace {
// The id ranges of the check table, per group in table order: "D1-D16 data, L1-L8 loss, ...".
std::string id_ranges(bool with_groups) {
  struct Range {
    char letter;
    std::string group;
    int lo, hi;
  };
  std::vector<Range> ranges;
  for (const debug::CheckInfo& c : debug::all_checks()) {
    const int n = std::atoi(c.id.c_str() + 1);
    if (ranges.empty() || ranges.back().letter != c.id[0]) ranges.push_back({c.id[0], c.group, n, n});
    ranges.back().lo = std::min(ranges.back().lo, n);
    ranges.back().hi = std::max(ranges.back().hi, n);
  }
  std::string out;
  for (const Range& r : ranges) {
    out += (out.empty() ? "" : ", ") + std::string(1, r.letter) + std::to_string(r.lo);
    if (r.hi != r.lo) out += "-" + std::string(1, r.letter) + std::to_string(r.hi);
    if (with_groups) out += " " + r.group;
  }
  return out;
}
}  // namespace

int cmd_checks(const std::vector<std::string>& args) {
  Args a("checks", args);
  a.about("Lists every check of the debug module (" + std::to_string(debug::all_checks().size()) + ": " +
          id_ranges(true) +
          ")\nwith its C++ entry point and the public sources it comes from (short titles; --id gives them in full,\n"
          "--sources with authors, year and URL or DOI). docs/checks.md explains each check: its rule, thresholds\n"
          "and likely causes. --id shows one check in full.");
  a.flag("list", "list the checks (the default)");
  a.flag("json", "print [{\"id\":\"D1\",\"name\":...,\"implemented\":true,...}, ...] instead of the table");
  a.option("id", "ID", "show only this check (e.g. M7)");
  a.flag("sources", "list the sources the checks cite: title, authors, year, URL or DOI");
  a.flag("causes", "print the diagnosis's tables (Markdown): each symptom's candidate causes, each cause's probe");
  if (!a.parse()) return 0;
  // One view at a time: each of these prints something different and exits.
  const char* views[] = {"list", "id", "sources", "causes"};
  for (size_t i = 0; i < 4; ++i)
    for (size_t j = i + 1; j < 4; ++j) a.refuse_together(views[i], views[j], "each prints its own view; pass one");
  a.refuse_together("causes", "json", "--causes prints Markdown tables");

  if (a.has("causes")) {
    std::cout << debug::diagnosis_tables_markdown();
    return 0;
  }

  if (a.has("sources")) {
    if (a.has("json")) {
      std::cout << "[";
      bool first = true;
      for (const debug::SourceInfo& s : debug::all_sources()) {
        std::cout << (first ? "" : ",") << "{\"short\":" << json_str(s.short_name) << ",\"title\":" << json_str(s.title)
                  << ",\"authors\":" << json_str(s.authors) << ",\"year\":" << json_str(s.year)
                  << ",\"link\":" << json_str(s.link) << ",\"no_link\":" << json_str(s.no_link)
                  << ",\"compared\":" << json_bool(s.compared) << ",\"about\":" << json_str(s.about) << "}";
        first = false;
      }
      std::cout << "]\n";
      return 0;
    }
    bool compared = false;
    for (const debug::SourceInfo& s : debug::all_sources()) {
      if (s.compared && !compared) {
        std::printf("\nrelated tools and catalogues (docs/checks.md compares the checks with them):\n\n");
        compared = true;
      }
      std::printf("%-26s %s\n%-26s   by:    %s (%s)\n%-26s   where: %s\n%-26s   %s\n", s.short_name.c_str(),
                  s.title.c_str(), "", s.authors.c_str(), s.year.c_str(), "", s.where().c_str(), "", s.about.c_str());
    }
    return 0;
  }

  // A check's sources by full title ("Karpathy 2019" -> Andrej Karpathy, "A Recipe for ...").
  auto titles = [](const debug::CheckInfo& c) {
    std::vector<std::string> t;
    for (const std::string& s : c.sources) {
      const debug::SourceInfo* si = debug::find_source(s);
      t.push_back(si ? si->title : s);
    }
    return t;
  };

  std::vector<const debug::CheckInfo*> rows;
  if (a.has("id")) {
    const debug::CheckInfo* c = debug::find_check(a.get("id"));
    GS_CHECK(c != nullptr, "checks", "unknown check '", a.get("id"), "': ids are ", id_ranges(false),
             " (see gradsleuth checks --list)");
    rows.push_back(c);
  } else {
    for (const debug::CheckInfo& c : debug::all_checks()) rows.push_back(&c);
  }

  if (a.has("json")) {
    std::cout << "[";
    for (size_t i = 0; i < rows.size(); ++i) {
      const debug::CheckInfo& c = *rows[i];
      std::cout << (i ? "," : "") << "{\"id\":" << json_str(c.id) << ",\"name\":" << json_str(c.name)
                << ",\"group\":" << json_str(c.group) << ",\"sources\":" << json_list(titles(c))
                << ",\"what\":" << json_str(c.what) << ",\"api\":" << json_str(c.api) << ",\"cli\":" << json_str(c.cli)
                << ",\"home\":" << json_str(c.home) << ",\"implemented\":" << json_bool(c.implemented) << "}";
    }
    std::cout << "]\n";
    return 0;
  }
  if (a.has("id")) {
    const debug::CheckInfo& c = *rows[0];
    std::printf("%s  %s (%s)\n  what:        %s\n  C++:         %s\n  command:     %s\n  implemented: %s\n",
                c.id.c_str(), c.name.c_str(), c.group.c_str(), c.what.c_str(), c.api.c_str(),
                c.cli.empty() ? "-" : c.cli.c_str(), c.implemented ? "yes" : "no");
    const std::vector<std::string> t = titles(c);
    for (size_t i = 0; i < t.size(); ++i) std::printf("  %s %s\n", i ? "            " : "sources:    ", t[i].c_str());
    std::printf("  home:        %s\n", c.home.c_str());
    std::printf("  details:     docs/checks.md, section %s\n", c.id.c_str());
    return 0;
  }
  // The last column wraps to the terminal's width. Wide terminals get the C++ entry point and
  // the sources as columns of their own; narrower ones one wrapped column "entry point (sources)".
  // (A check not implemented yet says so after its name; today every check is.)
  const int width = terminal_width();
  const bool wide = width >= 150;
  auto prefix = [wide](const std::string& id, const std::string& name, const std::string& group,
                       const std::string& api) {
    if (wide) return str_printf("%-4s %-36s %-13s %-52s ", id.c_str(), name.c_str(), group.c_str(), api.c_str());
    return str_printf("%-4s %-36s %-13s ", id.c_str(), name.c_str(), group.c_str());
  };
  std::cout << wrap_last_column(prefix("id", "check", "group", "C++ entry point"),
                                wide ? "sources" : "C++ entry point (sources)", width);
  for (const debug::CheckInfo* c : rows) {
    const std::string name = c->name + (c->implemented ? "" : " (not implemented)");
    const std::string last = wide ? debug::sources_str(*c) : c->api + " (" + debug::sources_str(*c) + ")";
    std::cout << wrap_last_column(prefix(c->id, name, c->group, c->api), last, width);
  }
  std::cout << wrap_last_column("",
                                std::to_string(rows.size()) +
                                    " checks; sources with authors, year and URL: "
                                    "gradsleuth checks --sources; each check's rule, thresholds and causes: "
                                    "docs/checks.md",
                                width);
  return 0;
}

}  // namespace gradsleuth::cli
