// workbench/cpu_ladder.h: the kernel workbench on the CPU. Numbered versions of each kernel,
// each one step from the last, validated against the float64 reference of the shared
// workbench (workbench/workbench.h: Problem, validate_result) and timed against this
// machine's own limits, measured here: the FMA peak and a STREAM-like copy/triad bandwidth.
// The top rungs are the engine's own kernels (core/cpu/fast/sgemm.h, winograd.h, blas.h,
// conv_cols.h; core/cpu/accurate_sum.h), called through their headers: no second copy.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "workbench/workbench.h"

namespace gradsleuth::workbench::cpu {

// ---- the machine's limits ----
struct Limits {
  std::string cpu;  // the model name from /proc/cpuinfo
  std::string isa;  // the ISA level of this build: "AVX-512", "AVX2+FMA", "scalar ..."
  int threads = 1;
  double fma_gflops = 0;                         // peak float32 FMA rate, all threads together
  double copy_gb_per_s = 0, triad_gb_per_s = 0;  // best of the repeats; bytes read + written
  double stream_mib = 0;                         // the size of each STREAM array
  double l3_mib = 0;                             // the last-level cache (0: unknown)
  // confirm_fma_peak: the peak measured again after the versions ran (0: not yet), and whether a
  // version still ran faster than the best of both (then its % of the peak is not a measurement).
  double fma_gflops_after = 0;
  bool peak_exceeded = false;
  // How the roofline names its two ceilings (a GPU's: "FP32 peak", "memory").
  std::string peak_label = "FMA peak", bandwidth_label = "copy";
};
// The ISA level this build's SIMD rungs and FMA peak use: "AVX-512", "AVX2+FMA" or "scalar ...".
const char* isa_level();
// Measures once per process and thread count (about a second), then returns the same numbers.
// quick: short runs and arrays just past the LLC (for the tests; noisier).
const Limits& measure_limits(int threads, bool quick = false);
// The FMA peak alone (GFLOP/s, all threads together): the best of `bursts` runs of ~10 ms of
// independent FMA chains, without the STREAM arrays (measure_limits uses it with 30 bursts).
double measure_fma_peak(int threads, int bursts = 30);
// After the versions ran: the FMA peak measured again and kept as the best of both, and again (up
// to twice more) while `fastest_gflops` is above it. A shared machine's slow minute during the
// first measurement otherwise puts the fastest versions above 100% of a "peak" that the CPU's
// clock and FMA ports set. Sets fma_gflops_after and peak_exceeded; returns !peak_exceeded.
bool confirm_fma_peak(Limits& lim, double fastest_gflops, bool quick = false);

// ---- the ladder ----
// A version: its number, name, what it changes and why that is faster (KernelSpec's Version),
// and the function that runs it. in: the Problem's inputs; out: the output (Problem::want's size).
using KernelFn = std::function<void(const float* const* in, float* out, const Shape& s, int threads)>;
struct Rung {
  Version v;
  KernelFn fn;
  std::string skip;  // non-empty: not built in (no BLAS, no AVX2); the reason, printed instead
  // reduce: the a priori error bound of its summation order, relative to sum |x| (0: none given)
  std::function<double(int64_t n)> rel_bound;
};
struct Ladder {
  KernelSpec spec;  // name, what, file, shape_help, compute_bound, default sizes (CPU ones)
  std::vector<Rung> rungs;
};
// Every CPU kernel: matmul, softmax, reduce, layernorm, gelu, conv2d.
const std::vector<Ladder>& ladders();
const Ladder* find_ladder(const std::string& name);  // nullptr when unknown
std::string ladder_names();                          // "matmul, softmax, ..."

// conv2d's shape: m = channels in = channels out, n = height = width, k = batch; 3x3, padding 1.
Shape shape_for(const Ladder& l, int64_t size, int64_t rows);  // size/rows <= 0: the defaults
std::string shape_str(const Ladder& l, const Shape& s);
Cost cost(const Ladder& l, const Shape& s);
Problem make_problem(const Ladder& l, const Shape& s);
// Throws std::invalid_argument naming the valid choices.
const Ladder& check_args(const std::string& kernel, int version, const Shape& s);

// ---- one run ----
struct Options {
  int threads = 1;
  int warmup = 1, repeats = 5;  // repeats: at most; fewer (>= 3) when one run takes over max_seconds / 5
  double max_seconds = 3.0;     // time budget per version, after the first run
};
struct Result {
  std::string kernel, name;
  int version = 0;
  Shape shape;
  Cost cost;
  std::string skipped;  // non-empty: the version is not built in; nothing else is set
  Validation validation;
  double atol = 0, rtol = 0;
  std::string tolerance_note;
  int repeats = 0;
  double ms = 0, min_ms = 0, max_ms = 0;  // the median of the timed runs, and their spread
  // reduce: the sum of a second input (n copies of 0.1f, whose float running sum rounds the same
  // way at every step) against its exact sum: the relative error and this version's a priori
  // bound, both / sum |x|.
  bool has_accuracy = false;
  double accuracy_err = 0, accuracy_bound = 0;
  bool accuracy_ok = true;
  double gflops() const { return ms > 0 ? cost.flops / (ms * 1e6) : 0; }
  double gb_per_s() const { return ms > 0 ? cost.bytes / (ms * 1e6) : 0; }
  bool ok() const { return !skipped.empty() || (validation.ok && accuracy_ok); }
};
// progress (optional) is called before each timed run ("matmul v3: run 2 of 5").
Result run(const std::string& kernel, int version, const Shape& s, const Options& o,
           const std::function<void(const std::string&)>& progress = {});

// Splits [0, n) into `threads` contiguous chunks and runs fn(begin, end) on each, on as many
// threads (the caller's thread takes the first chunk).
void parallel_for(int threads, int64_t n, const std::function<void(int64_t, int64_t)>& fn);

// The roofline picture of results (SVG, the HTML report's plot style): arithmetic intensity
// (flops / byte, log) against GFLOP/s (log), the FMA ceiling and the copy-bandwidth slope.
std::string roofline_svg(const Limits& lim, const std::vector<Result>& results);

}  // namespace gradsleuth::workbench::cpu
