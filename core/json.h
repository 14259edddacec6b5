// Writing JSON by hand: quoted, escaped strings; numbers with NaN/Inf as null; booleans;
// arrays of strings. Shared by the debug module's reports, the CLI's --json output and the
// lab grader's JSON report.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "core/format.h"

namespace gradsleuth {

// "a\"b\n" -> "\"a\\\"b\\n\"": a quoted JSON string, control characters escaped.
inline std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      case '\r': o += "\\r"; break;
      default:
        if (c < 0x20) {
          o += str_printf("\\u%04x", c);
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o + "\"";
}

// A JSON number (10 significant digits); NaN and Inf, which JSON cannot spell, become null.
inline std::string json_num(double v) { return std::isfinite(v) ? str_printf("%.10g", v) : "null"; }

inline const char* json_bool(bool b) { return b ? "true" : "false"; }

// ["a","b"]: a JSON array of escaped strings.
inline std::string json_list(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + json_str(v[i]);
  return s + "]";
}

}  // namespace gradsleuth
