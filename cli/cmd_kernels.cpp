// gradsleuth kernels / gradsleuth devices: the kernel workbench (cuda/workbench/): list the
// numbered kernel versions, validate one (the emulator) or validate and time it (a GPU); and
// which CUDA devices this build sees, or why none.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/error.h"
#include "core/json.h"

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
#if GS_KERNELS_GPU || GS_KERNELS_EMU
#include "cuda/workbench/workbench.h"
#endif

namespace gradsleuth::cli {

namespace {

#if GS_KERNELS_GPU || GS_KERNELS_EMU
namespace wb = ::gradsleuth::workbench;

constexpr bool kOnEmulator = GS_KERNELS_EMU != 0;

wb::RunResult run_one(const std::string& kernel, int version, const wb::Shape& s, const wb::RunOptions& o) {
#if GS_KERNELS_GPU
  return wb::gpu::run(kernel, version, s, o);
#else
  return wb::emu::run(kernel, version, s, o);
#endif
}

std::string fmt(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}
std::string sci(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.2g", v);
  return b;
}
std::string sci3(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}
std::string human(double v, const char* unit) {  // 1.2 G, 340 M, ...
  const char* p = "";
  if (v >= 1e12) v /= 1e12, p = "T";
  else if (v >= 1e9) v /= 1e9, p = "G";
  else if (v >= 1e6) v /= 1e6, p = "M";
  else if (v >= 1e3) v /= 1e3, p = "k";
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
       << "  fix: " << k.file << ", version " << r.version << "; run the emulator tests (ctest -L cuda_emu) to see it under "
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
    const double gf = r.cost.flops / s / 1e9;
    os << "  " << fmt(gf, 0) << " GFLOP/s = " << fmt(100.0 * gf / wb::kH100Fp32Gflops, 1) << "% of the H100 SXM's 67 TFLOP/s";
    if (r.device_fp32_gflops > 0) os << ", " << fmt(100.0 * gf / r.device_fp32_gflops, 1) << "% of this device's " << fmt(r.device_fp32_gflops, 0) << " GFLOP/s";
    os << "\n";
  } else {
    const double gb = r.cost.bytes / s / 1e9;
    os << "  " << fmt(gb, 0) << " GB/s = " << fmt(100.0 * gb / wb::kH100HbmGbPerS, 1) << "% of the H100 SXM's 3.35 TB/s";
    if (r.device_gb_per_s > 0) os << ", " << fmt(100.0 * gb / r.device_gb_per_s, 1) << "% of this device's " << fmt(r.device_gb_per_s, 0) << " GB/s";
    os << "\n";
  }
  if (r.ref_ms > 0)
    os << "  vs " << r.ref_name << ": " << fmt(r.ref_ms, 4) << " ms; this version runs at " << fmt(100.0 * r.ref_ms / r.ms, 1)
       << "% of its speed\n";
}

std::string result_json(const wb::KernelSpec& k, const wb::RunResult& r) {
  std::ostringstream os;
  const wb::Validation& v = r.validation;
  os << "{\"kernel\":" << json_str(k.name) << ",\"version\":" << r.version << ",\"name\":" << json_str(r.version_name)
     << ",\"shape\":{\"m\":" << r.shape.m << ",\"n\":" << r.shape.n << ",\"k\":" << r.shape.k << "}"
     << ",\"device\":" << json_str(r.device) << ",\"emulator\":" << json_bool(r.emulator)
     << ",\"validation\":{\"passed\":" << json_bool(v.ok) << ",\"elements\":" << v.n << ",\"mismatches\":" << v.mismatches
     << ",\"first_bad\":" << v.first_bad << ",\"max_abs_err\":" << json_num(v.max_abs_err) << ",\"atol\":" << json_num(r.atol)
     << ",\"rtol\":" << json_num(r.rtol) << "}"
     << ",\"flops\":" << json_num(r.cost.flops) << ",\"bytes\":" << json_num(r.cost.bytes)
     << ",\"h100_bound_us\":" << json_num(h100_bound(r.cost).us) << ",\"timed\":" << json_bool(r.timed);
  if (r.timed) {
    const double s = r.ms * 1e-3;
    os << ",\"ms\":" << json_num(r.ms) << ",\"gflops\":" << json_num(r.cost.flops / s / 1e9)
       << ",\"gb_per_s\":" << json_num(r.cost.bytes / s / 1e9)
       << ",\"pct_h100_fp32\":" << json_num(100.0 * r.cost.flops / s / 1e9 / wb::kH100Fp32Gflops)
       << ",\"pct_h100_hbm\":" << json_num(100.0 * r.cost.bytes / s / 1e9 / wb::kH100HbmGbPerS)
       << ",\"reference\":" << json_str(r.ref_name) << ",\"reference_ms\":" << json_num(r.ref_ms)
       << ",\"pct_of_reference\":" << json_num(r.ref_ms > 0 ? 100.0 * r.ref_ms / r.ms : 0.0);
  } else {
    os << ",\"note\":" << json_str(r.emulator ? "emulator: validation only, no timing" : "not timed");
  }
  os << "}";
  return os.str();
}

int kernels_list(bool json) {
  if (json) {
    std::cout << "{\"runs_on\":" << json_str(kOnEmulator ? "emulator" : "gpu") << ",\"kernels\":[";
    bool first = true;
    for (const wb::KernelSpec& k : wb::kernels()) {
      std::cout << (first ? "" : ",") << "{\"name\":" << json_str(k.name) << ",\"what\":" << json_str(k.what)
                << ",\"file\":" << json_str(k.file) << ",\"size\":" << json_str(k.shape_help)
                << ",\"bound\":" << json_str(k.compute_bound ? "compute" : "memory")
                << ",\"reference\":" << json_str(k.gpu_reference) << ",\"versions\":[";
      first = false;
      bool fv = true;
      for (const wb::Version& v : k.versions) {
        std::cout << (fv ? "" : ",") << "{\"version\":" << v.number << ",\"name\":" << json_str(v.name)
                  << ",\"change\":" << json_str(v.change) << "}";
        fv = false;
      }
      std::cout << "]}";
    }
    std::cout << "]}\n";
    return 0;
  }
  std::cout << "The kernel workbench (cuda/workbench/): numbered versions of each kernel, each validated against one\n"
               "CPU reference" << (kOnEmulator ? "; this build runs them on the CPU emulator (validation only, no timing)"
                                               : " and timed on the GPU") << ".\n";
  for (const wb::KernelSpec& k : wb::kernels()) {
    std::cout << "\n" << k.name << ": " << k.what << "  (" << k.file << "; " << (k.compute_bound ? "compute" : "memory")
              << "-bound; reference: " << k.gpu_reference << ")\n  " << k.shape_help << "\n";
    for (const wb::Version& v : k.versions)
      std::cout << "  v" << v.number << "  " << v.name << std::string(v.name.size() < 20 ? 20 - v.name.size() : 1, ' ')
                << v.change << "\n";
  }
  std::cout << "\nRun one: gradsleuth kernels bench matmul --version 3 --size " << (kOnEmulator ? "64" : "4096") << "\n";
  return 0;
}

int kernels_bench(const Args& a) {
  const auto& pos = a.positional();
  GS_CHECK(pos.size() == 2, "kernels", "bench takes one kernel name: gradsleuth kernels bench NAME [--version V] [--size N]; "
                                       "the kernels are ", wb::kernel_names());
  const std::string name = pos[1];
  const wb::KernelSpec* k = wb::find_kernel(name);
  GS_CHECK(k != nullptr, "kernels", "unknown kernel '", name, "': the workbench has ", wb::kernel_names(),
           " (gradsleuth kernels list)");
  std::vector<int> versions;
  if (!a.has("version") || a.get("version") == "all") {
    for (const wb::Version& v : k->versions) versions.push_back(v.number);
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
    if (json) js.push_back(result_json(*k, r));
    else print_result(std::cout, *k, r);
  }
  if (json) {
    std::cout << "{\"runs_on\":" << json_str(kOnEmulator ? "emulator" : "gpu") << ",\"results\":[";
    for (size_t i = 0; i < js.size(); ++i) std::cout << (i ? "," : "") << js[i];
    std::cout << "],\"passed\":" << json_bool(all_ok) << "}\n";
  }
  return all_ok ? 0 : 1;
}
#endif

}  // namespace

int cmd_kernels(const std::vector<std::string>& args) {
  Args a("kernels", args);
  a.about(
      "The kernel workbench (cuda/workbench/, docs/cuda.md \"The kernel workbench\"): numbered versions of matmul,\n"
      "softmax, reduce, layernorm and gelu side by side, each validated against one CPU reference.\n"
      "  gradsleuth kernels list                          the kernels and what each version changes\n"
      "  gradsleuth kernels bench NAME [--version V] [--size N] [--rows R]\n"
      "                                                   validate version V (default: every version); on a GPU\n"
      "                                                   also time it: ms, GFLOP/s or GB/s, % of the H100 peak,\n"
      "                                                   % of cuBLAS or of a device-to-device copy\n"
      "On the CPU emulator (-DGRADSLEUTH_KERNELS_ON=EMU, the default without a GPU) bench validates only and says\n"
      "so; it never prints a timing. Exits 1 when a validation fails.");
  a.positionals("list | bench NAME", "what to do");
  a.option("version", "V", "bench: the version number, or all", "all");
  a.option("size", "N", "bench: the problem size (matmul N x N x N; softmax/layernorm columns; reduce/gelu elements)");
  a.option("rows", "R", "bench: rows of softmax and layernorm");
  a.option("repeats", "K", "bench on a GPU: timed launches (default 20)");
  a.option("warmup", "K", "bench on a GPU: untimed launches first (default 3)");
  a.flag("json", "print one JSON object");
  if (!a.parse()) return 0;
  const auto& pos = a.positional();
  GS_CHECK(!pos.empty() && (pos[0] == "list" || pos[0] == "bench"), "kernels",
           "expected 'list' or 'bench NAME' (see gradsleuth kernels --help)");
#if GS_KERNELS_GPU || GS_KERNELS_EMU
  if (pos[0] == "list") {
    GS_CHECK(pos.size() == 1, "kernels", "'list' takes no argument");
    return kernels_list(a.has("json"));
  }
  return kernels_bench(a);
#else
  GS_FAIL("kernels", "this gradsleuth was built without the kernel workbench: it needs nvcc or the CPU emulator "
                     "(apt-get install libboost-context-dev, then reconfigure)");
#endif
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
    if (d.status != 0) status = "no CUDA device", error = "cudaGetDeviceCount: " + d.error;
    else if (devs.empty()) status = "no CUDA device", error = "cudaGetDeviceCount found none";
    else status = std::to_string(devs.size()) + " CUDA device(s)";
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
  std::cout << "CPU emulator (cuda/emu/): " << (emu_built ? "built" : "not built (apt-get install libboost-context-dev)")
            << "\n";
  std::cout << "kernels bench and lab 9's GPU tasks run on: "
            << (runs_on == "gpu" ? "the GPU" : runs_on == "emulator" ? "the CPU emulator (validation only, no timing)" : "nothing (neither is built)")
            << "  (-DGRADSLEUTH_KERNELS_ON=AUTO|GPU|EMU)\n";
  return 0;
}

}  // namespace gradsleuth::cli
