// The pieces of a progress display on stderr, shared by the Trainer's bar and the
// CLI's long commands (gradsleuth zoo): a bar for a fraction done and the time left.
#pragma once
#include <cmath>
#include <string>

#include "core/format.h"

namespace gradsleuth::optim {

// "[=========>          ]" for fraction in [0, 1], `width` characters between the brackets.
inline std::string progress_bar(double fraction, int width = 24) {
  fraction = std::isfinite(fraction) ? std::fmin(std::fmax(fraction, 0.0), 1.0) : 0.0;
  const int filled = static_cast<int>(width * fraction);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < width) bar += '>' + std::string(static_cast<size_t>(width - filled - 1), ' ');
  return "[" + bar + "]";
}

// "ETA 3m05s": the time left if the rest goes at the pace so far (elapsed / fraction
// per unit of work); "ETA --" before there is a pace to go by.
inline std::string eta(double elapsed_seconds, double fraction) {
  if (!(fraction > 0.0) || !std::isfinite(elapsed_seconds)) return "ETA --";
  const double left = elapsed_seconds * (1.0 - std::fmin(fraction, 1.0)) / fraction;
  const long s = std::lround(left);
  if (s >= 3600) return str_printf("ETA %ldh%02ldm", s / 3600, (s / 60) % 60);
  if (s >= 60) return str_printf("ETA %ldm%02lds", s / 60, s % 60);
  return str_printf("ETA %lds", s);
}

}  // namespace gradsleuth::optim
