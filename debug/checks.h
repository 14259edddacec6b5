// The catalogue of checks: one row per check of CHECKS.md (D1-D10, L1-L7,
// M1-M20, O1-O6, W1-W8), with where it lives in the C++ API and on the command
// line. `gradsleuth checks --list` prints it; docs/checks.md explains each one.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace gradsleuth::debug {

struct CheckInfo {
  std::string id;           // "M7"
  std::string name;         // "dead-ReLU statistics"
  std::string group;        // "data", "loss", "model", "optimisation", "workflow"
  std::string sources;      // seed documents it comes from: "004" or "000, 003"
  std::string what;         // what it must do (CHECKS.md's words)
  std::string api;          // the C++ entry point: "debug::DeadReluTracker"
  std::string cli;          // how to reach it from the command line ("" if only from C++)
  bool implemented = false;
};

// All 51 checks, in CHECKS.md order.
const std::vector<CheckInfo>& all_checks();
// The row for `id` ("M7", case-insensitive), or nullptr.
const CheckInfo* find_check(std::string_view id);

}  // namespace gradsleuth::debug
