// gradsleuth kernels / gradsleuth devices: the kernel workbench: list the numbered kernel
// versions; on the CPU (workbench/) validate and time them against this machine's measured limits
// and draw its roofline; with CUDA (cuda/workbench/) validate one (the emulator) or validate and
// time it (a GPU); and which CUDA devices this build sees, or why none.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/error.h"
#include "core/format.h"
#include "core/io.h"
#include "core/json.h"
#include "workbench/cpu_ladder.h"

// Set by cli/CMakeLists.txt: where the kernels run (one of GPU, EMU) and what was built.
#ifndef GS_KERNELS_GPU
#define GS_KERNELS_GPU 0
#endif
#ifndef GS_KERNELS_EMU
#define GS_KERNELS_EMU 0
#endif
#ifndef GS_KERNELS_HAVE_EMU
#define GS_KERNELS_HAVE_EMU 0
#endif
// Set by cli/CMakeLists.txt when the CPU workbench is linked in (GRADSLEUTH_CLI_WORKBENCH): without it
// `gradsleuth kernels` says how to build it.
#ifndef GS_CLI_WORKBENCH
#define GS_CLI_WORKBENCH 0
#endif

namespace gradsleuth::cli {

#if GS_CLI_WORKBENCH
namespace {

namespace wb = ::gradsleuth::workbench;
constexpr bool kCudaBuilt = GS_KERNELS_GPU || GS_KERNELS_EMU;
constexpr bool kOnEmulator = GS_KERNELS_EMU != 0;

#if GS_KERNELS_GPU || GS_KERNELS_EMU
wb::RunResult run_one(const std::string& kernel, int version, const wb::Shape& s, const wb::RunOptions& o) {
#if GS_KERNELS_GPU
  return wb::gpu::run(kernel, version, s, o);
#else
  return wb::emu::run(kernel, version, s, o);
#endif
}
#endif

std::string fmt(double v, int digits) { return str_printf("%.*f", digits, v); }
std::string sci(double v) { return str_printf("%.2g", v); }
#if GS_KERNELS_GPU || GS_KERNELS_EMU
std::string sci3(double v) { return str_printf("%.3g", v); }
std::string human(double v, const char* unit) {  // 1.2 G, 340 M, ...
  const char* p = "";
  if (v >= 1e12)
    v /= 1e12, p = "T";
  else if (v >= 1e9)
    v /= 1e9, p = "G";
  else if (v >= 1e6)
    v /= 1e6, p = "M";
  else if (v >= 1e3)
    v /= 1e3, p = "k";
  return fmt(v, v < 10 ? 2 : 1) + " " + p + unit;
}

// The H100 SXM roofline for this problem: the lower bound on its time.
struct Bound {
  double us = 0.0;
  bool compute = false;
};
Bound h100_bound(const wb::Cost& c) {
  const double t_flop = c.flops / (wb::kH100Fp32Gflops * 1e3), t_byte = c.bytes / (wb::kH100HbmGbPerS * 1e3);
  return {std::max(t_flop, t_byte), t_flop > t_byte};
}

void print_result(std::ostream& os, const wb::KernelSpec& k, const wb::RunResult& r) {
  os << k.name << " v" << r.version << " (" << r.version_name << ") at " << wb::shape_str(k, r.shape) << " on "
     << r.device << "\n";
  const wb::Validation& v = r.validation;
  if (v.ok) {
    os << "  validation: passed against the CPU reference (" << v.n << " elements, max abs err " << sci(v.max_abs_err)
       << ", atol " << sci(r.atol) << ", rtol " << sci(r.rtol) << ")\n";
  } else {
    os << "  validation: FAILED: " << v.mismatches << " of " << v.n << " elements differ from the CPU reference; the "
       << "first at index " << v.first_bad << ": expected " << v.first_want << ", got " << v.first_got
       << " (max abs err " << sci(v.max_abs_err) << ", atol " << sci(r.atol) << ", rtol " << sci(r.rtol) << ")\n"
       << "  fix: " << k.file << ", version " << r.version
       << "; run the emulator tests (ctest -L cuda_emu) to see it under "
       << "several thread orders\n";
  }
  const Bound b = h100_bound(r.cost);
  os << "  napkin: " << human(r.cost.flops, "FLOP") << ", " << human(r.cost.bytes, "B") << " at least; H100 SXM bound "
     << sci3(b.us) << " us (" << (b.compute ? "compute" : "memory") << "-bound; 67 TFLOP/s FP32, 3.35 TB/s)\n";
  if (r.emulator) {
    os << "  emulator: validation only, no timing\n";
    return;
  }
  if (!r.timed) return;
  const double s = r.ms * 1e-3;
  os << "  time: " << fmt(r.ms, 4) << " ms (mean of the timed launches, after warm-up)\n";
  if (k.compute_bound) {
    // FP32 peaks, or the bf16 dense (tensor-core) peaks for a tensor-core version.
    const bool tc = r.tensor_core;
    const double gf = r.cost.flops / s / 1e9;
    const double peak = tc ? wb::kH100Bf16DenseGflops : wb::kH100Fp32Gflops;
    const double device = tc ? r.device_bf16_gflops : r.device_fp32_gflops;
    os << "  " << fmt(gf, 0) << " GFLOP/s = " << fmt(100.0 * gf / peak, 1) << "% of the H100 SXM's "
       << (tc ? "989.5 TFLOP/s bf16 dense (tensor cores)" : "67 TFLOP/s");
    if (device > 0)
      os << ", " << fmt(100.0 * gf / device, 1) << "% of this device's " << fmt(device, 0) << " GFLOP/s"
         << (tc ? " bf16 dense" : "");
    os << "\n";
  } else {
    const double gb = r.cost.bytes / s / 1e9;
    os << "  " << fmt(gb, 0) << " GB/s = " << fmt(100.0 * gb / wb::kH100HbmGbPerS, 1)
       << "% of the H100 SXM's 3.35 TB/s";
    if (r.device_gb_per_s > 0)
      os << ", " << fmt(100.0 * gb / r.device_gb_per_s, 1) << "% of this device's " << fmt(r.device_gb_per_s, 0)
         << " GB/s";
    os << "\n";
  }
  if (r.ref_ms > 0)
    os << "  vs " << r.ref_name << ": " << fmt(r.ref_ms, 4) << " ms; this version runs at "
       << fmt(100.0 * r.ref_ms / r.ms, 1) << "% of its speed\n";
}

std::string result_json(const wb::KernelSpec& k, const wb::RunResult& r) {
  std::ostringstream os;
  const wb::Validation& v = r.validation;
  os << "{\"kernel\":" << json_str(k.name) << ",\"version\":" << r.version << ",\"name\":" << json_str(r.version_name)
     << ",\"shape\":{\"m\":" << r.shape.m << ",\"n\":" << r.shape.n << ",\"k\":" << r.shape.k << "}"
     << ",\"device\":" << json_str(r.device) << ",\"emulator\":" << json_bool(r.emulator)
     << ",\"validation\":{\"passed\":" << json_bool(v.ok) << ",\"elements\":" << v.n
     << ",\"mismatches\":" << v.mismatches << ",\"first_bad\":" << v.first_bad
     << ",\"max_abs_err\":" << json_num(v.max_abs_err) << ",\"atol\":" << json_num(r.atol)
     << ",\"rtol\":" << json_num(r.rtol) << "}"
     << ",\"flops\":" << json_num(r.cost.flops) << ",\"bytes\":" << json_num(r.cost.bytes)
     << ",\"h100_bound_us\":" << json_num(h100_bound(r.cost).us) << ",\"timed\":" << json_bool(r.timed);
  if (r.timed) {
    const double s = r.ms * 1e-3;
    os << ",\"ms\":" << json_num(r.ms) << ",\"gflops\":" << json_num(r.cost.flops / s / 1e9)
       << ",\"gb_per_s\":" << json_num(r.cost.bytes / s / 1e9)
       << ",\"pct_h100_fp32\":" << json_num(100.0 * r.cost.flops / s / 1e9 / wb::kH100Fp32Gflops)
       << ",\"pct_h100_hbm\":" << json_num(100.0 * r.cost.bytes / s / 1e9 / wb::kH100HbmGbPerS)
       << ",\"pct_h100_bf16_dense\":" << json_num(100.0 * r.cost.flops / s / 1e9 / wb::kH100Bf16DenseGflops)
       << ",\"pct_device_bf16_dense\":"
       << json_num(r.device_bf16_gflops > 0 ? 100.0 * r.cost.flops / s / 1e9 / r.device_bf16_gflops : 0.0)
       << ",\"reference\":" << json_str(r.ref_name) << ",\"reference_ms\":" << json_num(r.ref_ms)
       << ",\"pct_of_reference\":" << json_num(r.ref_ms > 0 ? 100.0 * r.ref_ms / r.ms : 0.0);
  } else {
    os << ",\"note\":" << json_str(r.emulator ? "emulator: validation only, no timing" : "not timed");
  }
  os << "}";
  return os.str();
}

// The CUDA kernels (list): their JSON array, and their text section.
std::string cuda_kernels_json() {
  std::ostringstream os;
  os << "[";
  bool first = true;
  for (const wb::KernelSpec& k : wb::kernels()) {
    os << (first ? "" : ",") << "{\"name\":" << json_str(k.name) << ",\"what\":" << json_str(k.what)
       << ",\"file\":" << json_str(k.file) << ",\"size\":" << json_str(k.shape_help)
       << ",\"bound\":" << json_str(k.compute_bound ? "compute" : "memory")
       << ",\"reference\":" << json_str(k.gpu_reference) << ",\"versions\":[";
    first = false;
    bool fv = true;
    for (const wb::Version& v : k.versions) {
      os << (fv ? "" : ",") << "{\"version\":" << v.number << ",\"name\":" << json_str(v.name)
         << ",\"change\":" << json_str(v.change) << "}";
      fv = false;
    }
    os << "]}";
  }
  os << "]";
  return os.str();
}

void cuda_kernels_text(std::ostream& os) {
  os << "The kernel workbench with CUDA (cuda/workbench/): numbered versions of each kernel, each validated against\n"
        "one CPU reference"
     << (kOnEmulator ? "; this build runs them on the CPU emulator (validation only, no timing)"
                     : " and timed on the GPU")
     << ".\n";
  for (const wb::KernelSpec& k : wb::kernels()) {
    os << "\n"
       << k.name << ": " << k.what << "  (" << k.file << "; " << (k.compute_bound ? "compute" : "memory")
       << "-bound; reference: " << k.gpu_reference << ")\n  " << k.shape_help << "\n";
    for (const wb::Version& v : k.versions)
      os << "  v" << v.number << "  " << v.name << std::string(v.name.size() < 20 ? 20 - v.name.size() : 1, ' ')
         << v.change << "\n";
  }
  os << "\nRun one: gradsleuth kernels bench matmul --version 3 --size " << (kOnEmulator ? "64" : "4096") << "\n\n";
}

int kernels_bench(const Args& a) {
  const auto& pos = a.positional();
  GS_CHECK(pos.size() == 2, "kernels",
           "bench takes one kernel name: gradsleuth kernels bench NAME [--version V] [--size N]; "
           "the kernels are ",
           wb::kernel_names());
  const std::string name = pos[1];
  const wb::KernelSpec* k = wb::find_kernel(name);
  GS_CHECK(k != nullptr, "kernels", "unknown kernel '", name, "': the workbench has ", wb::kernel_names(),
           " (gradsleuth kernels list)");
  std::vector<int> versions;
  std::vector<std::string> skipped;  // tensor-core versions, which the emulator cannot run
  if (!a.has("version") || a.get("version") == "all") {
    for (const wb::Version& v : k->versions) {
      if (v.tensor_core && kOnEmulator)
        skipped.push_back("v" + std::to_string(v.number) + " (" + v.name + ")");
      else
        versions.push_back(v.number);
    }
  } else {
    versions.push_back(static_cast<int>(a.get_int_in("version", 1, 99)));
  }
  const int64_t size = a.has("size") ? a.get_int_in("size", 1, int64_t{1} << 30) : 0;
  const int64_t rows = a.has("rows") ? a.get_int_in("rows", 1, int64_t{1} << 30) : 0;
  GS_CHECK(!a.has("size") || size > 0, "kernels", "--size must be at least 1 (", k->shape_help, ")");
  GS_CHECK(!a.has("rows") || k->default_rows > 0, "kernels", name, " takes no --rows (", k->shape_help, ")");
  GS_CHECK(!a.has("rows") || rows > 0, "kernels", "--rows must be at least 1");
  const wb::Shape shape = wb::shape_for(*k, size, rows, kOnEmulator);
  wb::RunOptions o;
  if (a.has("repeats")) o.repeats = static_cast<int>(a.get_int_in("repeats", 1, 100000));
  if (a.has("warmup")) o.warmup = static_cast<int>(a.get_int_in("warmup", 0, 100000));
  GS_CHECK(o.repeats >= 1 && o.warmup >= 0, "kernels", "--repeats must be at least 1 and --warmup at least 0");
  // Every argument is checked before the first launch.
  for (int v : versions) {
    try {
      wb::check_args(name, v, shape, kOnEmulator);
    } catch (const std::invalid_argument& e) {
      GS_FAIL("kernels", e.what());
    }
  }
  const bool json = a.has("json");
  bool all_ok = true;
  std::vector<std::string> js;
  for (int v : versions) {
    const wb::RunResult r = run_one(name, v, shape, o);
    all_ok = all_ok && r.validation.ok;
    if (json)
      js.push_back(result_json(*k, r));
    else
      print_result(std::cout, *k, r);
  }
  for (const std::string& v : skipped)
    if (!json)
      std::cout << name << " " << v << ": skipped: it runs on tensor cores, which the CPU emulator does not have "
                << "(validated on a GPU only)\n";
  if (json) {
    std::cout << "{\"runs_on\":" << json_str(kOnEmulator ? "emulator" : "gpu") << ",\"results\":[";
    for (size_t i = 0; i < js.size(); ++i) std::cout << (i ? "," : "") << js[i];
    std::cout << "],\"skipped\":[";
    for (size_t i = 0; i < skipped.size(); ++i) std::cout << (i ? "," : "") << json_str(skipped[i]);
    std::cout << "],\"passed\":" << json_bool(all_ok) << "}\n";
  }
  return all_ok ? 0 : 1;
}
#endif

// ---- the CPU workbench (workbench/) ----
namespace cw = ::gradsleuth::workbench::cpu;

std::string cpu_kernels_json() {
  std::ostringstream os;
  os << "[";
  bool first = true;
  for (const cw::Ladder& l : cw::ladders()) {
    const wb::KernelSpec& k = l.spec;
    os << (first ? "" : ",") << "{\"name\":" << json_str(k.name) << ",\"what\":" << json_str(k.what)
       << ",\"file\":" << json_str(k.file) << ",\"size\":" << json_str(k.shape_help)
       << ",\"bound\":" << json_str(k.compute_bound ? "compute" : "memory") << ",\"versions\":[";
    first = false;
    for (size_t i = 0; i < l.rungs.size(); ++i) {
      const cw::Rung& r = l.rungs[i];
      os << (i ? "," : "") << "{\"version\":" << r.v.number << ",\"name\":" << json_str(r.v.name)
         << ",\"change\":" << json_str(r.v.change) << ",\"built\":" << json_bool(r.skip.empty());
      if (!r.skip.empty()) os << ",\"skipped\":" << json_str(r.skip);
      os << "}";
    }
    os << "]}";
  }
  os << "]";
  return os.str();
}

void cpu_kernels_text(std::ostream& os) {
  os << "The kernel workbench on the CPU (workbench/): numbered versions of each kernel, each one step from the last,\n"
        "validated against a float64 reference and timed against this machine's measured FMA peak and memory\n"
        "bandwidth (this build: "
     << cw::ladders().front().rungs.size() << " matmul versions, ISA level " << cw::isa_level() << ").\n";
  for (const cw::Ladder& l : cw::ladders()) {
    const wb::KernelSpec& k = l.spec;
    os << "\n"
       << k.name << ": " << k.what << "  (" << k.file << "; " << (k.compute_bound ? "compute" : "memory")
       << "-bound: % of the " << (k.compute_bound ? "FMA peak" : "copy bandwidth") << ")\n  " << k.shape_help << "\n";
    for (const cw::Rung& r : l.rungs) {
      os << "  v" << r.v.number << "  " << r.v.name << std::string(r.v.name.size() < 22 ? 22 - r.v.name.size() : 1, ' ')
         << r.v.change << "\n";
      if (!r.skip.empty()) os << "      (not in this build: " << r.skip << ")\n";
    }
  }
  os << "\nRun: gradsleuth kernels bench matmul --device cpu [--version V] [--size N] [--threads T] [--json]\n"
        "     gradsleuth kernels roofline --device cpu --out roofline.svg\n";
}

int kernels_list(bool json) {
  if (json) {
    std::cout << "{\"runs_on\":"
              << json_str(GS_KERNELS_GPU   ? "gpu"
                          : GS_KERNELS_EMU ? "emulator"
                                           : "none")
              << ",\"kernels\":";
#if GS_KERNELS_GPU || GS_KERNELS_EMU
    std::cout << cuda_kernels_json();
#else
    std::cout << "[]";
#endif
    std::cout << ",\"cpu\":{\"isa\":" << json_str(cw::isa_level()) << ",\"kernels\":" << cpu_kernels_json() << "}}\n";
    return 0;
  }
#if GS_KERNELS_GPU || GS_KERNELS_EMU
  cuda_kernels_text(std::cout);
#endif
  cpu_kernels_text(std::cout);
  return 0;
}

std::string limits_json(const cw::Limits& l) {
  std::ostringstream os;
  os << "{\"cpu\":" << json_str(l.cpu) << ",\"isa\":" << json_str(l.isa) << ",\"threads\":" << l.threads
     << ",\"fma_gflops\":" << json_num(l.fma_gflops) << ",\"copy_gb_per_s\":" << json_num(l.copy_gb_per_s)
     << ",\"triad_gb_per_s\":" << json_num(l.triad_gb_per_s) << ",\"stream_mib\":" << json_num(l.stream_mib)
     << ",\"l3_mib\":" << json_num(l.l3_mib)
     << ",\"fma_gflops_after\":" << (l.fma_gflops_after > 0 ? json_num(l.fma_gflops_after) : std::string("null"))
     << ",\"peak_exceeded\":" << json_bool(l.peak_exceeded) << "}";
  return os.str();
}

void limits_text(std::ostream& os, const cw::Limits& l) {
  os << "machine: " << l.cpu << ", " << l.isa << ", " << l.threads << (l.threads == 1 ? " thread" : " threads")
     << "\nlimits, measured now: FMA peak " << fmt(l.fma_gflops, 1) << " GFLOP/s"
     << (l.fma_gflops_after > 0 ? " (the best of before and after the runs)" : "") << "; copy "
     << fmt(l.copy_gb_per_s, 1) << " GB/s, triad " << fmt(l.triad_gb_per_s, 1) << " GB/s (STREAM arrays of "
     << fmt(l.stream_mib, 0) << " MiB"
     << (l.l3_mib > 0 ? ", last-level cache " + fmt(l.l3_mib, 0) + " MiB" : std::string()) << ")\n";
}

// The limit a kernel is compared with, and the rate it achieved against it.
double limit_of(const cw::Ladder& l, const cw::Limits& lim) {
  return l.spec.compute_bound ? lim.fma_gflops : lim.copy_gb_per_s;
}
double rate_of(const cw::Ladder& l, const cw::Result& r) { return l.spec.compute_bound ? r.gflops() : r.gb_per_s(); }

std::string cpu_result_json(const cw::Ladder& l, const cw::Limits& lim, const cw::Result& r, double speedup) {
  std::ostringstream os;
  os << "{\"kernel\":" << json_str(r.kernel) << ",\"version\":" << r.version << ",\"name\":" << json_str(r.name)
     << ",\"shape\":{\"m\":" << r.shape.m << ",\"n\":" << r.shape.n << ",\"k\":" << r.shape.k << "}"
     << ",\"flops\":" << json_num(r.cost.flops) << ",\"bytes\":" << json_num(r.cost.bytes);
  if (!r.skipped.empty()) {
    os << ",\"skipped\":" << json_str(r.skipped) << "}";
    return os.str();
  }
  const wb::Validation& v = r.validation;
  os << ",\"validation\":{\"passed\":" << json_bool(v.ok) << ",\"elements\":" << v.n
     << ",\"mismatches\":" << v.mismatches << ",\"first_bad\":" << v.first_bad
     << ",\"max_abs_err\":" << json_num(v.max_abs_err) << ",\"atol\":" << json_num(r.atol)
     << ",\"rtol\":" << json_num(r.rtol) << ",\"tolerance\":" << json_str(r.tolerance_note) << "}";
  if (r.has_accuracy)
    os << ",\"accuracy\":{\"rel_err\":" << json_num(r.accuracy_err) << ",\"bound\":" << json_num(r.accuracy_bound)
       << ",\"within_bound\":" << json_bool(r.accuracy_ok) << "}";
  const double rate = rate_of(l, r), limit = limit_of(l, lim);
  os << ",\"repeats\":" << r.repeats << ",\"ms\":" << json_num(r.ms) << ",\"min_ms\":" << json_num(r.min_ms)
     << ",\"max_ms\":" << json_num(r.max_ms) << ",\"gflops\":" << json_num(r.gflops())
     << ",\"gb_per_s\":" << json_num(r.gb_per_s()) << ",\"intensity\":" << json_num(r.cost.flops / r.cost.bytes)
     << ",\"limit\":" << json_str(l.spec.compute_bound ? "fma_peak" : "copy_bandwidth")
     << ",\"pct_of_limit\":" << json_num(limit > 0 ? 100.0 * rate / limit : 0.0)
     << ",\"speedup_over_previous\":" << (speedup > 0 ? json_num(speedup) : std::string("null")) << "}";
  return os.str();
}

int threads_option(const Args& a) { return a.has("threads") ? static_cast<int>(a.get_int_in("threads", 1, 256)) : 1; }

cw::Options cpu_options(const Args& a) {
  cw::Options o;
  o.threads = threads_option(a);
  if (a.has("repeats")) o.repeats = static_cast<int>(a.get_int_in("repeats", 1, 1000));
  if (a.has("warmup")) o.warmup = static_cast<int>(a.get_int_in("warmup", 0, 1000));
  return o;
}

// Progress on stderr (a line per step, overwritten on a terminal), so stdout stays the result.
void progress_line(const std::string& s) { std::cerr << "  ... " << s << "\n"; }

int cpu_bench(const Args& a) {
  const auto& pos = a.positional();
  GS_CHECK(pos.size() == 2, "kernels",
           "bench takes one kernel name: gradsleuth kernels bench NAME --device cpu "
           "[--version V] [--size N]; the CPU kernels are ",
           cw::ladder_names());
  const std::string name = pos[1];
  const cw::Ladder* l = cw::find_ladder(name);
  GS_CHECK(l != nullptr, "kernels", "unknown kernel '", name, "': the CPU workbench has ", cw::ladder_names(),
           " (gradsleuth kernels list)");
  std::vector<int> versions;
  if (!a.has("version") || a.get("version") == "all") {
    for (const cw::Rung& r : l->rungs) versions.push_back(r.v.number);
  } else {
    versions.push_back(a.get_int("version"));
  }
  const int64_t size = a.has("size") ? a.get_int_in("size", 1, int64_t{1} << 30) : 0;
  const int64_t rows = a.has("rows") ? a.get_int_in("rows", 1, int64_t{1} << 30) : 0;
  GS_CHECK(!a.has("size") || size > 0, "kernels", "--size must be at least 1 (", l->spec.shape_help, ")");
  GS_CHECK(!a.has("rows") || l->spec.default_rows > 0, "kernels", name, " takes no --rows (", l->spec.shape_help, ")");
  GS_CHECK(!a.has("rows") || rows > 0, "kernels", "--rows must be at least 1");
  const wb::Shape shape = cw::shape_for(*l, size, rows);
  const cw::Options o = cpu_options(a);
  for (int v : versions) {
    try {
      cw::check_args(name, v, shape);
    } catch (const std::invalid_argument& e) {
      GS_FAIL("kernels", e.what());
    }
  }
  const bool json = a.has("json");
  if (!json) std::cerr << "measuring this machine's limits (FMA peak, copy and triad bandwidth) ...\n";
  cw::Limits lim = cw::measure_limits(o.threads, a.has("quick"));
  std::vector<cw::Result> results;
  double fastest = 0;
  for (int v : versions) {
    results.push_back(cw::run(name, v, shape, o, json ? std::function<void(const std::string&)>{} : progress_line));
    if (results.back().skipped.empty()) fastest = std::max(fastest, results.back().gflops());
  }
  if (l->spec.compute_bound) {
    if (!json) std::cerr << "measuring the FMA peak again, after the runs ...\n";
    cw::confirm_fma_peak(lim, fastest, a.has("quick"));
  }
  std::ostringstream out;
  if (!json) {
    limits_text(out, lim);
    out << name << " at " << cw::shape_str(*l, shape) << ": time is the median of up to " << o.repeats << " runs after "
        << o.warmup << " warm-up (spread: fastest to slowest); % of the "
        << (l->spec.compute_bound ? "FMA peak" : "copy bandwidth") << "\n";
    out << "  v  name                    median ms   spread ms          "
        << (l->spec.compute_bound ? "GFLOP/s" : "   GB/s") << "  % limit  speed-up  validation\n";
  }
  std::vector<std::string> js;
  std::string note;  // the tolerance of the validation, from the first version run
  bool all_ok = true;
  double prev_ms = 0;
  for (const cw::Result& r : results) {
    all_ok = all_ok && r.ok();
    const double speedup = r.skipped.empty() && prev_ms > 0 ? prev_ms / r.ms : 0.0;
    if (r.skipped.empty()) prev_ms = r.ms;
    if (note.empty()) note = r.tolerance_note;
    if (json) {
      js.push_back(cpu_result_json(*l, lim, r, speedup));
      continue;
    }
    std::string nm = r.name.substr(0, 22);
    if (!r.skipped.empty()) {
      out << str_printf("  %d  %-22s  skipped: %s\n", r.version, nm.c_str(), r.skipped.c_str());
      continue;
    }
    const double rate = rate_of(*l, r), limit = limit_of(*l, lim);
    const std::string spread = fmt(r.min_ms, 3) + "-" + fmt(r.max_ms, 3);
    out << str_printf("  %d  %-22s %10.3f   %-17s %8.1f  %6.1f%%  %8s  %s\n", r.version, nm.c_str(), r.ms,
                      spread.c_str(), rate, limit > 0 ? 100.0 * rate / limit : 0.0,
                      speedup > 0 ? (fmt(speedup, 2) + "x").c_str() : "-", r.validation.ok ? "passed" : "FAILED");
    if (r.has_accuracy)
      out << "       accuracy on " << r.shape.n << " copies of 0.1f: relative error " << sci(r.accuracy_err)
          << ", a priori bound "
          << (std::isfinite(r.accuracy_bound) ? sci(r.accuracy_bound)
                                              : std::string("none (n u >= 1: gamma_n says nothing)"))
          << (r.accuracy_ok ? "" : "  EXCEEDED") << "\n";
    if (!r.validation.ok) {
      const wb::Validation& vv = r.validation;
      out << "       " << vv.mismatches << " of " << vv.n
          << " elements differ from the float64 reference; the first at index " << vv.first_bad << ": expected "
          << vv.first_want << ", got " << vv.first_got << " (max abs err " << sci(vv.max_abs_err)
          << "); fix: " << l->spec.file << ", version " << r.version << "\n";
    }
  }
  if (!json && lim.peak_exceeded)
    out << "note: a version ran faster than the FMA peak measured before and after it (" << fmt(lim.fma_gflops, 1)
        << " GFLOP/s): the machine's speed changed during the run (a shared or throttled CPU), so the % column is "
           "not a measurement; rerun on a quiet machine\n";
  if (json) {
    std::cout << "{\"device\":\"cpu\",\"kernel\":" << json_str(name)
              << ",\"shape\":" << json_str(cw::shape_str(*l, shape)) << ",\"threads\":" << o.threads
              << ",\"limits\":" << limits_json(lim) << ",\"results\":[";
    for (size_t i = 0; i < js.size(); ++i) std::cout << (i ? "," : "") << js[i];
    std::cout << "],\"passed\":" << json_bool(all_ok) << "}\n";
  } else {
    if (!note.empty()) out << "validation: against the float64 reference; tolerance: " << note << "\n";
    std::cout << out.str();
  }
  return all_ok ? 0 : 1;
}

// Small problems for --quick (the picture's check, not a measurement).
wb::Shape quick_shape(const cw::Ladder& l) {
  const std::string& n = l.spec.name;
  if (n == "matmul") return {96, 96, 96};
  if (n == "conv2d") return {8, 12, 2};
  if (l.spec.default_rows > 0) return {32, 1000, 0};
  return {0, 100000, 0};
}

#if GS_KERNELS_GPU || GS_KERNELS_EMU
// Every CUDA version of every kernel at its GPU size on the roofline of the device it ran on:
// the device's FP32 peak and memory bandwidth (its own numbers, or the H100 SXM's when the
// device does not report them).
int gpu_roofline(const Args& a) {
  GS_CHECK(!kOnEmulator, "kernels",
           "roofline --device cuda needs a GPU: this build runs the CUDA kernels on the CPU emulator, which "
           "validates them but does not time them; use --device cpu for this machine's roofline");
  GS_CHECK(!a.has("threads") && !a.has("quick"), "kernels", "--threads and --quick are for --device cpu");
  const std::string path = a.get("out");
  wb::RunOptions o;
  if (a.has("repeats")) o.repeats = static_cast<int>(a.get_int_in("repeats", 1, 100000));
  std::vector<cw::Result> results;
  cw::Limits lim;
  lim.isa = "CUDA";
  lim.threads = 0;
  lim.peak_label = "FP32 peak";
  lim.bandwidth_label = "memory";
  bool all_ok = true;
  for (const wb::KernelSpec& k : wb::kernels()) {
    const wb::Shape s = wb::shape_for(k, 0, 0, kOnEmulator);
    for (const wb::Version& v : k.versions) {
      std::cerr << "  " << k.name << " v" << v.number << " (" << v.name << ") at " << wb::shape_str(k, s) << "\n";
      const wb::RunResult r = run_one(k.name, v.number, s, o);
      cw::Result c;
      c.kernel = r.kernel;
      c.name = r.version_name;
      c.version = r.version;
      c.shape = r.shape;
      c.cost = r.cost;
      c.validation = r.validation;
      c.repeats = o.repeats;
      c.ms = c.min_ms = c.max_ms = r.timed ? r.ms : 0.0;
      results.push_back(c);
      all_ok = all_ok && r.validation.ok;
      lim.cpu = r.device;
      lim.fma_gflops = r.device_fp32_gflops > 0 ? r.device_fp32_gflops : wb::kH100Fp32Gflops;
      lim.copy_gb_per_s = r.device_gb_per_s > 0 ? r.device_gb_per_s : wb::kH100HbmGbPerS;
    }
  }
  write_file_atomic(path, cw::roofline_svg(lim, results), "kernels roofline");
  std::cout << "roofline of " << results.size() << " CUDA versions on " << lim.cpu << " (FP32 peak "
            << fmt(lim.fma_gflops, 0) << " GFLOP/s, memory " << fmt(lim.copy_gb_per_s, 0) << " GB/s) written to "
            << path << "\n";
  if (!all_ok) std::cout << "some versions FAILED validation: run kernels bench NAME for the details\n";
  return all_ok ? 0 : 1;
}
#endif

int cpu_roofline(const Args& a) {
  GS_CHECK(a.positional().size() == 1, "kernels",
           "'roofline' takes no kernel name: it runs every version of every kernel");
  GS_CHECK(a.has("out"), "kernels", "roofline needs --out FILE.svg (where to write the picture)");
  GS_CHECK(!a.has("version") && !a.has("size") && !a.has("rows"), "kernels",
           "roofline runs every version at its kernel's default size: drop --version, --size and --rows "
           "(use kernels bench for one version or size)");
  const std::string path = a.get("out");
  cw::Options o = cpu_options(a);
  const bool quick = a.has("quick"), json = a.has("json");
  if (!a.has("repeats")) o.repeats = quick ? 1 : 3;
  if (quick) o.warmup = 0, o.max_seconds = 0.2;
  std::cerr << "measuring this machine's limits (FMA peak, copy and triad bandwidth) ...\n";
  cw::Limits lim = cw::measure_limits(o.threads, quick);
  std::vector<cw::Result> results;
  bool all_ok = true;
  double fastest = 0;  // the compute-bound versions' best GFLOP/s, held against the FMA peak
  for (const cw::Ladder& l : cw::ladders()) {
    const wb::Shape s = quick ? quick_shape(l) : cw::shape_for(l, 0, 0);
    for (const cw::Rung& r : l.rungs) {
      std::cerr << "  " << l.spec.name << " v" << r.v.number << " (" << r.v.name << ") at " << cw::shape_str(l, s)
                << "\n";
      results.push_back(cw::run(l.spec.name, r.v.number, s, o));
      all_ok = all_ok && results.back().ok();
      if (l.spec.compute_bound && results.back().skipped.empty()) fastest = std::max(fastest, results.back().gflops());
    }
  }
  std::cerr << "measuring the FMA peak again, after the runs ...\n";
  cw::confirm_fma_peak(lim, fastest, quick);
  write_file_atomic(path, cw::roofline_svg(lim, results), "kernels roofline");
  if (json) {
    std::cout << "{\"device\":\"cpu\",\"out\":" << json_str(path) << ",\"quick\":" << json_bool(quick)
              << ",\"limits\":" << limits_json(lim) << ",\"results\":[";
    for (size_t i = 0; i < results.size(); ++i)
      std::cout << (i ? "," : "") << cpu_result_json(*cw::find_ladder(results[i].kernel), lim, results[i], 0.0);
    std::cout << "],\"passed\":" << json_bool(all_ok) << "}\n";
  } else {
    limits_text(std::cout, lim);
    size_t drawn = 0;
    for (const cw::Result& r : results) drawn += r.skipped.empty() ? 1 : 0;
    std::cout << "roofline of " << drawn << " versions (" << results.size() - drawn << " not in this build) written to "
              << path << "\n";
    if (!all_ok) std::cout << "some versions FAILED validation: run kernels bench NAME --device cpu for the details\n";
    if (lim.peak_exceeded)
      std::cout << "note: a version ran faster than the FMA peak measured before and after the runs: the machine's "
                   "speed changed during the run, so the dots above the roof are not a measurement; rerun on a "
                   "quiet machine\n";
  }
  return all_ok ? 0 : 1;
}

}  // namespace
#endif  // GS_CLI_WORKBENCH

int cmd_kernels(const std::vector<std::string>& args) {
  Args a("kernels", args);
  a.about(
      "The kernel workbench (docs/cuda.md \"The kernel workbench\", docs/benchmarks.md): numbered versions of\n"
      "matmul, softmax, reduce, layernorm, gelu (and conv2d on the CPU) side by side, each one step from the last,\n"
      "each validated against a reference.\n"
      "  gradsleuth kernels list                          the kernels and what each version changes\n"
      "  gradsleuth kernels bench NAME --device cpu [--version V] [--size N] [--rows R] [--threads T]\n"
      "                                                   on the CPU (workbench/): validate against float64, then\n"
      "                                                   time: median ms and spread, GFLOP/s or GB/s, % of this\n"
      "                                                   machine's measured FMA peak or copy bandwidth, speed-up\n"
      "                                                   over the previous version\n"
      "  gradsleuth kernels roofline --device cpu --out roofline.svg\n"
      "                                                   every CPU version on this machine's roofline (SVG)\n"
      "  gradsleuth kernels bench NAME [--device cuda] [--version V] [--size N] [--rows R]\n"
      "                                                   with CUDA (cuda/workbench/): validate; on a GPU also time\n"
      "                                                   it against the H100 peak and cuBLAS or a device copy\n"
      "On the CUDA emulator (-DGRADSLEUTH_KERNELS_ON=EMU, the default without a GPU) --device cuda validates only\n"
      "and says so; it never prints a timing. --device defaults to cuda where this build has it, else cpu.\n"
      "Exits 1 when a validation fails.");
  a.positionals("list | bench NAME | roofline", "what to do");
  a.option("device", "D", "bench, roofline: cpu or cuda");
  a.option("version", "V", "bench: the version number, or all", "all");
  a.option("size", "N",
           "bench: the problem size (matmul N x N x N; softmax/layernorm columns; reduce/gelu elements; "
           "conv2d image side)");
  a.option("rows", "R", "bench: rows of softmax and layernorm; conv2d's channels");
  a.option("threads", "T", "on the CPU: threads (each version splits its rows, batch or array; default 1)");
  a.option("repeats", "K",
           "timed runs: on the CPU at most K (default 5, at least 3 within a 3 s budget); on a GPU "
           "K launches (default 20)");
  a.option("warmup", "K", "untimed runs first (default 1 on the CPU, 3 on a GPU)");
  a.option("out", "FILE", "roofline: the SVG to write");
  a.flag("quick",
         "on the CPU: short limit measurements; roofline: small problems, one run each (checks the picture, "
         "measures nothing)");
  a.flag("json", "print one JSON object");
  if (!a.parse()) return 0;
#if !GS_CLI_WORKBENCH
  GS_FAIL("kernels",
          "this gradsleuth was built without the kernel workbench (-DGRADSLEUTH_CLI_WORKBENCH=OFF: ./run.sh "
          "leaves it out of a first build whose command is not `kernels`); build it with `./run.sh kernels "
          "...` (./run.sh adds it when the command is kernels) or `scripts/build.sh --target gradsleuth_cli -- "
          "-DGRADSLEUTH_CLI_WORKBENCH=ON`");
#else
  const auto& pos = a.positional();
  GS_CHECK(!pos.empty() && (pos[0] == "list" || pos[0] == "bench" || pos[0] == "roofline"), "kernels",
           "expected 'list', 'bench NAME' or 'roofline' (see gradsleuth kernels --help)");
  if (pos[0] == "list") {
    GS_CHECK(pos.size() == 1, "kernels", "'list' takes no argument");
    return kernels_list(a.has("json"));
  }
  const std::string device = a.has("device") ? a.get("device") : (kCudaBuilt ? "cuda" : "cpu");
  GS_CHECK(device == "cpu" || device == "cuda", "kernels", "--device ", device, ": use cpu or cuda");
  if (pos[0] == "roofline") {
    // The picture is written after seconds of measuring: a path that cannot be written fails first.
    if (a.has("out")) a.check_writable_file("out");
#if GS_KERNELS_GPU || GS_KERNELS_EMU
    if (device == "cuda") {
      GS_CHECK(a.positional().size() == 1, "kernels",
               "'roofline' takes no kernel name: it runs every version of every kernel");
      GS_CHECK(a.has("out"), "kernels", "roofline needs --out FILE.svg (where to write the picture)");
      GS_CHECK(!a.has("version") && !a.has("size") && !a.has("rows"), "kernels",
               "roofline runs every version at its kernel's default size: drop --version, --size and --rows");
      return gpu_roofline(a);
    }
#endif
    GS_CHECK(device == "cpu" || cuda_left_out().empty(), "kernels", "roofline --device cuda: ", cuda_left_out());
    GS_CHECK(device == "cpu", "kernels", "roofline --device cuda: this build has no CUDA; use --device cpu");
    return cpu_roofline(a);
  }
  if (device == "cpu") return cpu_bench(a);
  GS_CHECK(!a.has("threads") && !a.has("quick"), "kernels", "--threads and --quick are for --device cpu");
#if GS_KERNELS_GPU || GS_KERNELS_EMU
  return kernels_bench(a);
#else
  GS_CHECK(cuda_left_out().empty(), "kernels", "--device cuda: ", cuda_left_out());
  GS_FAIL("kernels",
          "this gradsleuth was built without CUDA kernels: --device cuda needs nvcc or the CPU emulator "
          "(apt-get install libboost-context-dev, then reconfigure); --device cpu runs the CPU workbench");
#endif
#endif  // GS_CLI_WORKBENCH
}

int cmd_devices(const std::vector<std::string>& args) {
  Args a("devices", args);
  a.about(
      "Lists the CUDA devices this build can use, or says why there are none, and whether the CPU emulator\n"
      "(cuda/emu/) is built and where `gradsleuth kernels bench` and lab 9's GPU tasks run.");
  a.flag("json", "print one JSON object");
  if (!a.parse()) return 0;
#if GS_KERNELS_HAVE_NVCC
  const bool nvcc = true;
#else
  const bool nvcc = false;
#endif
  const bool emu_built = GS_KERNELS_HAVE_EMU != 0;
  const std::string runs_on = GS_KERNELS_GPU ? "gpu" : GS_KERNELS_EMU ? "emulator" : "none";
  std::string status = "not built with nvcc", error;
  std::vector<std::string> devs;
  [[maybe_unused]] bool queried = false;
#if GS_KERNELS_GPU
  {
    const gradsleuth::workbench::DeviceReport d = gradsleuth::workbench::gpu::devices();
    queried = true;
    devs = d.devices;
    if (d.status != 0)
      status = "no CUDA device", error = "cudaGetDeviceCount: " + d.error;
    else if (devs.empty())
      status = "no CUDA device", error = "cudaGetDeviceCount found none";
    else
      status = std::to_string(devs.size()) + " CUDA device(s)";
  }
#endif
#ifdef GS_KERNELS_WHY
  if (!queried && nvcc)
    status = "none used: this binary runs the kernels on the CPU emulator (" GS_KERNELS_WHY
             "); on a machine with a GPU reconfigure (or -DGRADSLEUTH_KERNELS_ON=GPU)";
#endif
  if (a.has("json")) {
    std::cout << "{\"nvcc_build\":" << json_bool(nvcc) << ",\"emulator_built\":" << json_bool(emu_built)
              << ",\"kernels_run_on\":" << json_str(runs_on) << ",\"status\":" << json_str(status)
              << ",\"error\":" << json_str(error) << ",\"devices\":[";
    for (size_t i = 0; i < devs.size(); ++i) std::cout << (i ? "," : "") << json_str(devs[i]);
    std::cout << "]}\n";
    return 0;
  }
  std::cout << "CUDA (nvcc) build: " << (nvcc ? "yes" : "no (nvcc not found, or GRADSLEUTH_CUDA=OFF)") << "\n";
  std::cout << "GPUs: " << status << (error.empty() ? "" : " (" + error + ")") << "\n";
  for (const std::string& d : devs) std::cout << "  " << d << "\n";
  std::cout << "CPU emulator (cuda/emu/): "
            << (emu_built                  ? "built"
                : !cuda_left_out().empty() ? "left out of this build: " + cuda_left_out()
                                           : std::string("not built (apt-get install libboost-context-dev)"))
            << "\n";
  std::cout << "kernels bench and lab 9's GPU tasks run on: "
            << (runs_on == "gpu"           ? "the GPU"
                : runs_on == "emulator"    ? "the CPU emulator (validation only, no timing)"
                : !cuda_left_out().empty() ? "nothing in this build (the emulator was left out: above)"
                                           : "nothing (neither is built)")
            << "  (-DGRADSLEUTH_KERNELS_ON=AUTO|GPU|EMU)\n";
  return 0;
}

}  // namespace gradsleuth::cli
