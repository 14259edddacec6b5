// Helpers for writing JSON from the CLI commands (strings, numbers, booleans).
#pragma once
#include <string>
#include <vector>

#include "debug/finding.h"

namespace gradsleuth::cli {

// The debug module's writers: escaped strings, and numbers with NaN/Inf as null.
using debug::json_num;
using debug::json_str;

inline const char* json_bool(bool b) { return b ? "true" : "false"; }

// ["a","b"]: a JSON array of escaped strings.
inline std::string json_list(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + json_str(v[i]);
  return s + "]";
}

}  // namespace gradsleuth::cli
