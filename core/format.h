// Numbers (and other printf conversions) into a std::string: str_printf("%.4f", v). The
// one place that sizes a buffer for snprintf; the compiler checks the format against the
// arguments (-Wformat). Header-only plain C++, so nvcc-compiled host code can use it too.
#pragma once
#include <cstdarg>
#include <cstdio>
#include <string>

namespace gradsleuth {

// The text printf(fmt, ...) prints, whatever its length.
__attribute__((format(printf, 1, 2))) inline std::string str_printf(const char* fmt, ...) {
  char small[128];
  va_list args;
  va_start(args, fmt);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(small, sizeof small, fmt, args);
  va_end(args);
  std::string out;
  if (n < 0) {
    out = "(format error)";
  } else if (static_cast<size_t>(n) < sizeof small) {
    out.assign(small, static_cast<size_t>(n));
  } else {
    out.resize(static_cast<size_t>(n) + 1);
    std::vsnprintf(out.data(), out.size(), fmt, again);
    out.resize(static_cast<size_t>(n));
  }
  va_end(again);
  return out;
}

}  // namespace gradsleuth
