// workbench/workbench.h: what both kernel workbenches share (the llm.c way: numbered versions of a
// few kernels side by side, each validated against one float64 reference): the registry, the
// problems and their references, napkin-math costs and validate_result (workbench.cpp).
// Plain C++17 (nvcc compiles the CUDA workbench's .cu files that include it as C++17): no CUDA types.
//
// The CPU workbench (workbench/cpu_ladder.h) and lab 11's grader use it on the CPU; two builds of
// the CUDA workbench's .cu sources (cuda/workbench/) provide the run functions declared below:
//   gradsleuth::workbench::emu::run   the CPU emulator (cuda/emu/): validation only, never a timing;
//   gradsleuth::workbench::gpu::run   nvcc, on a real GPU: validation, then timing with CUDA events.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gradsleuth::workbench {

// H100 SXM5 limits used by the napkin math of every kernel (NVIDIA H100 Tensor Core GPU
// datasheet, "H100 SXM" column: FP32 67 teraFLOPS, GPU memory bandwidth 3.35 TB/s).
constexpr double kH100Fp32Gflops = 67000.0;
constexpr double kH100HbmGbPerS = 3350.0;
// The same datasheet's BF16 Tensor Core rate, dense (the 1,979 teraFLOPS it lists are with sparsity).
constexpr double kH100Bf16DenseGflops = 989500.0;

struct Version {
  int number = 0;
  std::string name;    // "naive", "shared-memory tiled", ...
  std::string change;  // what it changes against the previous version, and why it should be faster
  // Runs on tensor cores (bf16 in, float32 accumulate): GPU only (the CPU emulator has no tensor
  // cores and refuses it), measured against the bf16 dense peak.
  bool tensor_core = false;
};

struct KernelSpec {
  std::string name;            // "matmul", "softmax", "reduce", "layernorm", "gelu"
  std::string what;            // one line: what it computes
  std::string file;            // cuda/workbench/<family>.cu
  std::string shape_help;      // what --size (and --rows) mean
  bool compute_bound = false;  // GFLOP/s against the FP32 peak; else GB/s against HBM
  std::string gpu_reference;   // the timing reference row: "cuBLAS SGEMM" or "cudaMemcpy device-to-device"
  std::vector<Version> versions;
  int64_t default_size = 0;      // --size when not given, on a GPU
  int64_t emu_default_size = 0;  // on the emulator
  int64_t default_rows = 0;      // softmax and layernorm: rows when --rows is not given (0: no rows)
  int64_t emu_default_rows = 0;
  // The emulator runs about 10-50 million thread-steps a second: above this much work (matmul
  // m n k, otherwise elements) it would take minutes, so it is refused.
  double emu_max_work = 0.0;
};

// Every kernel family, in the order `gradsleuth kernels list` prints them.
const std::vector<KernelSpec>& kernels();
const KernelSpec* find_kernel(const std::string& name);  // nullptr when unknown
// "matmul, softmax, reduce, layernorm, gelu"
std::string kernel_names();
// "1 (naive), 2 (coalesced), ..."
std::string version_list(const KernelSpec& k);

// A problem: matmul uses m, n, k (C (m, n) = A (m, k) @ B (k, n)); softmax and layernorm
// rows = m, cols = n; reduce and gelu n elements.
struct Shape {
  int64_t m = 0, n = 0, k = 0;
};
// The shape for `--size size [--rows rows]` (rows <= 0: the kernel's default for `emulator`).
Shape shape_for(const KernelSpec& k, int64_t size, int64_t rows, bool emulator);
std::string shape_str(const KernelSpec& k, const Shape& s);  // "64 x 64 x 64", "64 rows x 1000"

// Napkin math: the flops it must do and the bytes it must move at least (each input read
// once, each output written once, float32).
struct Cost {
  double flops = 0.0, bytes = 0.0;
};
Cost cost(const KernelSpec& k, const Shape& s);

// The inputs of a problem (deterministic) and the CPU reference output, summed in double.
struct Problem {
  std::vector<std::vector<float>> inputs;  // matmul: A, B; layernorm: x, w, b; others: x
  std::vector<float> want;                 // the reference output
  double atol = 0.0, rtol = 0.0;           // the tolerance for this size (see tolerance_note)
  std::vector<float> atol_each;            // per-element absolute bounds, when the kernel has them (matmul)
  std::string tolerance_note;              // why that tolerance
};
Problem make_problem(const KernelSpec& k, const Shape& s);
// The matmul problem for given inputs a (m, k) and b (k, n): the reference summed in double and
// each element's a priori error bound (atol_each), as make_problem builds them for its own inputs.
// Throws std::invalid_argument when the sizes do not match the shape.
Problem matmul_problem(std::vector<float> a, std::vector<float> b, const Shape& s);

// |got - want| <= atol + rtol * |want| elementwise; NaN or inf never matches a finite value.
struct Validation {
  bool ok = true;
  int64_t n = 0, mismatches = 0, first_bad = -1;
  double first_got = 0.0, first_want = 0.0, max_abs_err = 0.0, max_rel_err = 0.0;
};
// atol_each (optional, n values): a per-element absolute bound used instead of atol.
Validation validate_result(const float* got, const float* want, int64_t n, double atol, double rtol,
                           const float* atol_each = nullptr);

struct RunOptions {
  bool time = true;  // ignored on the emulator (never timed)
  int warmup = 3, repeats = 20;
};

struct RunResult {
  std::string kernel;
  int version = 0;
  std::string version_name;
  Shape shape;
  Cost cost;
  bool emulator = false;
  std::string device;  // "NVIDIA H100 80GB HBM3", "CPU emulator"
  Validation validation;
  double atol = 0.0, rtol = 0.0;
  // Timing (GPU only): mean ms of one launch, and of the reference (cuBLAS, or a
  // device-to-device copy of the same bytes).
  bool timed = false;
  double ms = 0.0, ref_ms = 0.0;
  std::string ref_name;
  double device_fp32_gflops = 0.0, device_gb_per_s = 0.0;  // the device's own peaks (0: unknown)
  double device_bf16_gflops = 0.0;                         // its dense bf16 tensor-core peak (sm_80, sm_90; 0: unknown)
  bool tensor_core = false;                                // the version runs on tensor cores (Version::tensor_core)
};

// Devices as seen by one build.
struct DeviceReport {
  bool built = false;                // this build exists in the binary
  int status = 0;                    // cudaGetDeviceCount's error (0 = success)
  std::string error;                 // its name and description when status != 0
  std::vector<std::string> devices;  // one line per device: "0: NVIDIA H100 ... (sm_90, 132 SMs, 80 GB)"
};

// Throws std::invalid_argument for an unknown kernel or version or a bad size (naming the
// valid ones and the fix), std::runtime_error for a CUDA error (naming kernel, version, size).
namespace emu {
RunResult run(const std::string& kernel, int version, const Shape& shape, const RunOptions& opt);
DeviceReport devices();
}  // namespace emu
namespace gpu {
RunResult run(const std::string& kernel, int version, const Shape& shape, const RunOptions& opt);
DeviceReport devices();
}  // namespace gpu

// Checks kernel, version and shape before any work; throws std::invalid_argument naming the
// valid choices (the emulator's size limit when emulator, and that a tensor-core version runs on a
// GPU only).
const KernelSpec& check_args(const std::string& kernel, int version, const Shape& shape, bool emulator);

}  // namespace gradsleuth::workbench
