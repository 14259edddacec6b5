// The switch between the CPU backend's tuned kernels (this folder) and its reference
// loops (core/cpu/*.cpp), core/fast_kernels.h; fast.h lists the pairs. The starting value is
// the build's GRADSLEUTH_FAST_KERNELS, unless the environment variable of the same name says
// otherwise (0/off or 1/on: the reference loops without rebuilding).
#include "core/cpu/fast/fast.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/fast_kernels.h"

#ifndef GRADSLEUTH_FAST_KERNELS
#define GRADSLEUTH_FAST_KERNELS 1
#endif

namespace gradsleuth {

namespace {

bool starting_value() {
  const char* env = std::getenv("GRADSLEUTH_FAST_KERNELS");
  if (env == nullptr || *env == '\0') return GRADSLEUTH_FAST_KERNELS != 0;
  if (std::strcmp(env, "0") == 0 || std::strcmp(env, "off") == 0 || std::strcmp(env, "OFF") == 0) return false;
  if (std::strcmp(env, "1") == 0 || std::strcmp(env, "on") == 0 || std::strcmp(env, "ON") == 0) return true;
  std::fprintf(stderr,
               "gradsleuth: GRADSLEUTH_FAST_KERNELS='%s' is not 0, 1, off or on; using the build's default (%s)\n", env,
               GRADSLEUTH_FAST_KERNELS != 0 ? "on" : "off");
  return GRADSLEUTH_FAST_KERNELS != 0;
}

std::atomic<bool>& flag() {
  static std::atomic<bool> on{starting_value()};
  return on;
}

}  // namespace

void set_cpu_fast_kernels(bool on) { flag().store(on, std::memory_order_relaxed); }
bool cpu_fast_kernels() { return flag().load(std::memory_order_relaxed); }
bool cpu_fast_kernels_default() { return GRADSLEUTH_FAST_KERNELS != 0; }

}  // namespace gradsleuth
