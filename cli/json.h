// Tiny helpers for writing JSON from the CLI commands (strings and numbers only).
#pragma once
#include <cmath>
#include <cstdio>
#include <string>

namespace gradsleuth::cli {

// "text" with quotes, backslashes and control characters escaped.
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
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o + "\"";
}

// A number (10 significant digits); JSON has no NaN/Inf, so those become null.
inline std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

inline const char* json_bool(bool b) { return b ? "true" : "false"; }

}  // namespace gradsleuth::cli
