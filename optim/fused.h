// Helpers for the optimizers' fused update loops: runtime options become
// compile-time flags, so each variant's loop is branch-free and vectorises.
#pragma once
#include <type_traits>

#include "core/cpu/loops.h"
#include "core/dtype.h"

namespace gradsleuth::optim::detail {

// with_flags(f, a, b) calls f(std::bool_constant<a>{}, std::bool_constant<b>{}):
// inside f, `if constexpr (A)` removes the branch from the loop.
template <class F>
void with_flags(F&& f) {
  f();
}
template <class F, class... Rest>
void with_flags(F&& f, bool first, Rest... rest) {
  if (first) {
    with_flags([&](auto... flags) { f(std::true_type{}, flags...); }, rest...);
  } else {
    with_flags([&](auto... flags) { f(std::false_type{}, flags...); }, rest...);
  }
}

// Calls f(float{}) or f(double{}) for a floating dtype.
template <class F>
void with_float_type(DType t, F&& f) {
  if (t == DType::Float32) {
    f(float{});
  } else {
    f(double{});
  }
}

// Runs range(begin, end) over [0, n), split across threads when n is large.
// Write `range` as a call to a function whose pointer parameters are
// __restrict and whose coefficients are values: then the compiler knows the
// stores cannot change the inputs, and vectorises without run-time checks.
template <class Range>
void for_ranges(int64_t n, Range&& range) {
  cpu::parallel_for(n, cpu::kParallelGrain, range);
}

}  // namespace gradsleuth::optim::detail
