// cuda/workbench/run.cu: runs one kernel version of the workbench: uploads the inputs, launches,
// validates against the CPU reference and, on a real GPU only, times it with CUDA events against
// its reference row (cuBLAS, or a device-to-device copy of the same bytes). Built twice: as
// gradsleuth::workbench::emu (the CPU emulator: never timed) and gradsleuth::workbench::gpu (nvcc).
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/format.h"
#include "cuda/workbench/device.h"

namespace gradsleuth::workbench::GS_WB_NS {
namespace {

constexpr bool kEmulator = GS_CUDA_EMU != 0;

std::string err_text(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }

// Throws std::runtime_error naming the problem and the failed call.
struct Ctx {
  std::string what;  // "matmul v3 at 64 x 64 x 64 (M x N x K)"
  void check(cudaError_t e, const char* call) const {
    if (e != cudaSuccess)
      throw std::runtime_error(
          what + ": " + call + " failed: " + err_text(e) +
          (e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure
               ? "; a kernel read or wrote outside its buffers: check its bounds tests and index math"
               : ""));
  }
};

struct DeviceBuf {
  float* p = nullptr;
  DeviceBuf(const Ctx& c, size_t n) { c.check(cudaMalloc(&p, (n > 0 ? n : 1) * sizeof(float)), "cudaMalloc"); }
  ~DeviceBuf() {
    if (p) cudaFree(p);
  }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
};

cudaError_t dispatch(const std::string& kernel, int version, const float* const* in, float* out, const Shape& s,
                     cudaStream_t stream) {
  if (kernel == "matmul") return launch_matmul(version, in, out, s, stream);
  if (kernel == "softmax") return launch_softmax(version, in, out, s, stream);
  if (kernel == "reduce") return launch_reduce(version, in, out, s, stream);
  if (kernel == "layernorm") return launch_layernorm(version, in, out, s, stream);
  return launch_gelu(version, in, out, s, stream);
}

std::string device_name() {
  if (kEmulator) return "CPU emulator (cuda/emu)";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    cudaGetLastError();
    return "CUDA device 0";
  }
  return prop.name;
}

// x rounded to bf16 (to nearest, ties to even) and back: the values a bf16 tensor-core version reads.
float round_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;  // NaN
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// The device's own peaks from its attributes (0 when unknown): DRAM 2 x memory clock x bus
// width; FP32 SMs x FP32 lanes per SM x 2 (an FMA) x clock; dense bf16 tensor-core flops per SM
// per clock: 2048 on sm_80 (A100: 312 TFLOP/s), 4096 on sm_90 (H100/H200: 989 TFLOP/s at 1.83 GHz).
void device_peaks(double* gflops, double* gb_per_s, double* bf16_gflops) {
  *gflops = *gb_per_s = *bf16_gflops = 0.0;
#if !GS_CUDA_EMU
  int sms = 0, clock_khz = 0, mem_khz = 0, bus_bits = 0, major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess &&
      cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0) == cudaSuccess &&
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess &&
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) == cudaSuccess) {
    const int lanes = (major == 8 && minor == 0) || major < 8 ? 64 : 128;  // A100 and older: 64 FP32 lanes per SM
    *gflops = 2.0 * sms * lanes * clock_khz * 1e3 / 1e9;
    const int bf16_per_clock = major == 8 && minor == 0 ? 2048 : (major == 9 && minor == 0 ? 4096 : 0);
    *bf16_gflops = static_cast<double>(sms) * bf16_per_clock * clock_khz * 1e3 / 1e9;
  }
  if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0) == cudaSuccess)
    *gb_per_s = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  cudaGetLastError();
#endif
}

// Mean ms of one call of f over `repeats`, after `warmup` calls.
template <class F>
double time_ms(const Ctx& c, F&& f, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) c.check(f(), "a warm-up launch");
  c.check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the warm-up");
  cudaEvent_t start = nullptr, stop = nullptr;
  c.check(cudaEventCreate(&start), "cudaEventCreate");
  c.check(cudaEventCreate(&stop), "cudaEventCreate");
  c.check(cudaEventRecord(start, nullptr), "cudaEventRecord");
  for (int i = 0; i < repeats; ++i) c.check(f(), "a timed launch");
  c.check(cudaEventRecord(stop, nullptr), "cudaEventRecord");
  c.check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float total = 0.0f;
  c.check(cudaEventElapsedTime(&total, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return repeats > 0 ? total / repeats : 0.0;
}

}  // namespace

DeviceReport devices() {
  DeviceReport r;
  r.built = true;
  int count = 0;  // without a driver cudaGetDeviceCount fails (35) and leaves it unwritten
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    r.status = static_cast<int>(e);
    r.error = err_text(e);
    cudaGetLastError();
    return r;
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    r.devices.push_back(str_printf("%d: %s (sm_%d%d, %d SMs, %.1f GB)%s", d, p.name, p.major, p.minor,
                                   p.multiProcessorCount, static_cast<double>(p.totalGlobalMem) / 1e9,
                                   kEmulator ? " [the CPU emulator: validation only, never timed]" : ""));
  }
  return r;
}

RunResult run(const std::string& kernel, int version, const Shape& shape, const RunOptions& opt) {
  const KernelSpec& k = check_args(kernel, version, shape, kEmulator);
  Ctx c{kernel + " v" + std::to_string(version) + " at " + shape_str(k, shape)};
  if (!kEmulator) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      cudaGetLastError();
      throw std::runtime_error(c.what + ": no CUDA device (cudaGetDeviceCount: " +
                               (e != cudaSuccess ? err_text(e) : std::string("none found")) +
                               "); this gradsleuth runs the workbench on the GPU: reconfigure with "
                               "-DGRADSLEUTH_KERNELS_ON=EMU to validate on the CPU emulator instead");
    }
  }
  RunResult r;
  r.kernel = kernel;
  r.version = version;
  for (const Version& v : k.versions)
    if (v.number == version) r.version_name = v.name;
  r.shape = shape;
  r.cost = cost(k, shape);
  for (const Version& v : k.versions)
    if (v.number == version) r.tensor_core = v.tensor_core;
  r.emulator = kEmulator;
  r.device = device_name();

  Problem p = make_problem(k, shape);
  if (r.tensor_core) {
    // bf16 in: the reference is the float64 product of the bf16-rounded inputs, and the float32
    // bound on the sums applies as to SGEMM (a product of two bf16 values is exact in float32).
    for (std::vector<float>& x : p.inputs)
      for (float& v : x) v = round_to_bf16(v);
    p = matmul_problem(p.inputs[0], p.inputs[1], shape);
  }
  r.atol = p.atol;
  r.rtol = p.rtol;
  std::vector<DeviceBuf*> bufs;
  std::vector<const float*> in;
  struct Cleanup {
    std::vector<DeviceBuf*>& b;
    ~Cleanup() {
      for (DeviceBuf* x : b) delete x;
    }
  } cleanup{bufs};
  for (const std::vector<float>& h : p.inputs) {
    bufs.push_back(new DeviceBuf(c, h.size()));
    c.check(cudaMemcpy(bufs.back()->p, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice),
            "cudaMemcpy (inputs)");
    in.push_back(bufs.back()->p);
  }
  bufs.push_back(new DeviceBuf(c, p.want.size()));
  float* out = bufs.back()->p;
  // NaN everywhere first: an element the kernel never writes cannot pass by keeping an old value.
  c.check(cudaMemset(out, 0xff, p.want.size() * sizeof(float)), "cudaMemset (output)");

  auto launch = [&] { return dispatch(kernel, version, in.data(), out, shape, nullptr); };
  c.check(launch(), "the launch");
  c.check(cudaDeviceSynchronize(), "the kernel (cudaDeviceSynchronize)");
  std::vector<float> got(p.want.size());
  c.check(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy (result)");
  r.validation = validate_result(got.data(), p.want.data(), static_cast<int64_t>(got.size()), p.atol, p.rtol,
                                 p.atol_each.empty() ? nullptr : p.atol_each.data());

  if (!kEmulator && opt.time && r.validation.ok) {
    r.timed = true;
    r.ms = time_ms(c, launch, opt.warmup, opt.repeats);
    if (kernel == "matmul") {
      r.ref_name = "cuBLAS SGEMM";
      r.ref_ms = time_ms(
          c, [&] { return dispatch(kernel, 7, in.data(), out, shape, nullptr); }, opt.warmup, opt.repeats);
    } else {
      // A copy that reads and writes bytes / 2 each moves the same bytes as the kernel.
      const size_t half = static_cast<size_t>(r.cost.bytes / 2.0);
      DeviceBuf a(c, half / sizeof(float) + 1), b(c, half / sizeof(float) + 1);
      r.ref_name = "cudaMemcpy device-to-device of the same bytes";
      r.ref_ms = time_ms(
          c, [&] { return cudaMemcpyAsync(b.p, a.p, half, cudaMemcpyDeviceToDevice, nullptr); }, opt.warmup,
          opt.repeats);
    }
    device_peaks(&r.device_fp32_gflops, &r.device_gb_per_s, &r.device_bf16_gflops);
  }
  return r;
}

}  // namespace gradsleuth::workbench::GS_WB_NS
