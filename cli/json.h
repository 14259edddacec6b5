// Helpers for writing JSON from the CLI commands (strings, numbers, booleans).
#pragma once
#include <string>

#include "debug/finding.h"

namespace gradsleuth::cli {

// The debug module's writers: escaped strings, and numbers with NaN/Inf as null.
using debug::json_num;
using debug::json_str;

inline const char* json_bool(bool b) { return b ? "true" : "false"; }

}  // namespace gradsleuth::cli
