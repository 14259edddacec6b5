// The catalogue of checks: one row per check of the debug module (D1-D16,
// L1-L8, M1-M30, O1-O10, W1-W10), with where it lives in the C++ API and on the
// command line, and the public sources it comes from. `gradsleuth checks
// --list` prints it; docs/checks.md explains each one (rule, thresholds,
// causes, sources).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace gradsleuth::debug {

// A document a check comes from (or a tool docs/checks.md compares the checks with), cited so
// that a reader can look it up: authors or organisation, title, year, and a URL or DOI.
struct SourceInfo {
  std::string short_name;  // "Karpathy 2019": the form the table and CheckInfo::sources use
  std::string title;       // the full public title: Andrej Karpathy, "A Recipe for Training Neural Networks" (2019)
  std::string about;       // one line on what it covers
  std::string authors;     // "Andrej Karpathy", "PyTorch contributors", "Amazon Web Services"
  std::string year;        // "2019"; "current" for documentation that is kept up to date
  std::string link;        // URLs and/or "doi:..." / "arXiv:...", "; "-separated; empty when there is none
  std::string no_link;     // why there is no link ("course notes, no public URL"); empty when `link` is set
  bool compared = false;   // a related tool or catalogue, not cited by a check (docs/checks.md compares them)

  // "https://...; doi:10.14778/3415478.3415530", or the no_link note.
  std::string where() const { return link.empty() ? no_link : link; }
};

// The sources, in the order docs/checks.md lists them: those the checks cite first, then the
// related tools and catalogues (compared = true).
const std::vector<SourceInfo>& all_sources();
// The source whose short_name is `short_name`, or nullptr.
const SourceInfo* find_source(std::string_view short_name);

struct CheckInfo {
  std::string id;                    // "M7"
  std::string name;                  // "dead-ReLU statistics"
  std::string group;                 // "data", "loss", "model", "optimisation", "workflow"
  std::vector<std::string> sources;  // short names of its sources (SourceInfo::short_name), main one first
  std::string what;                  // what it must do: the rule in one line
  std::string api;                   // the C++ entry point: "debug::DeadReluTracker"
  std::string cli;                   // how to reach it from the command line ("" if only from C++)
  bool implemented = false;
  // Its home: the one file that holds its rule and thresholds and makes its findings
  // ("debug/checks/model/activation_stats.cpp"); docs/checks.md's section names it too.
  std::string home = {};
};

// All 75 checks, in catalogue order (D, L, M, O, W; by number).
const std::vector<CheckInfo>& all_checks();
// The row for `id` ("M7", case-insensitive), or nullptr.
const CheckInfo* find_check(std::string_view id);
// "M7 dead-ReLU statistics": the id and the name, for output a person reads
// (just the id when it is not a catalogued check).
std::string check_label(std::string_view id);
// CheckInfo::sources joined by "; " ("Karpathy 2019; Debugging Training").
std::string sources_str(const CheckInfo& c);

}  // namespace gradsleuth::debug
