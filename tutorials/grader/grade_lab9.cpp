// The grader of lab 9 (your first CUDA kernels). The answer keys, written here:
// an axpy and a matmul summed in double, the tolerance and validation rules of
// lab9.h, the launch geometry, a CPU simulation of the tiled kernel built from the
// student's index functions, and the napkin-math formulas. Tasks 9.1-9.4 run on
// every machine. Tasks 9.5-9.7 launch the student's kernels (GS_LAB9_CUDA, set by
// tutorials/CMakeLists.txt): on a GPU (nvcc, and cudaGetDeviceCount finds a device;
// otherwise skipped with the reason), or on the CPU emulator (GS_LAB9_EMU, cuda/emu/),
// where every check runs except the timings: a timing case validates a smaller problem
// instead and its points are for correctness ("emulator: validation only, no timing").
//
// Dimension letters: M = rows of A and C, K = the summed dim, N = columns of B and C.
#include "tutorials/grader/grader.h"
#include "tutorials/grader/labs.h"
#include "tutorials/lab9_cuda/lab9.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <vector>

#if GS_LAB9_CUDA
#include "tutorials/lab9_cuda/harness/gpu.h"
#endif
#ifndef GS_LAB9_EMU
#define GS_LAB9_EMU 0
#endif

namespace gradsleuth::labs {

namespace {

using lab9::RowCol;
using lab9::Tolerance;
using lab9::Traffic;

// ---- answer keys ------------------------------------------------------------------------
// n floats uniform in [lo, hi), the same on every machine (mt19937 is fully specified); the
// instructor's input seed (grader.h) draws other values.
std::vector<float> uniform(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(static_cast<uint32_t>(input_seed(seed)));
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = lo + (hi - lo) * static_cast<float>(gen() >> 8) * (1.0f / 16777216.0f);
  return v;
}

std::vector<float> key_axpy(float alpha, const std::vector<float>& x, const std::vector<float>& y) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = static_cast<float>(static_cast<double>(alpha) * x[i] + static_cast<double>(y[i]));
  return out;
}

// C (M, N) = A (M, K) @ B (K, N), summed in double (row by row, k outer: cache friendly).
std::vector<float> key_matmul(const std::vector<float>& A, const std::vector<float>& B, int64_t M, int64_t N,
                              int64_t K) {
  std::vector<float> C(static_cast<size_t>(M * N));
  std::vector<double> acc(static_cast<size_t>(N));
  for (int64_t i = 0; i < M; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const double a = A[i * K + k];
      const float* b = &B[k * N];
      for (int64_t j = 0; j < N; ++j) acc[j] += a * b[j];
    }
    for (int64_t j = 0; j < N; ++j) C[i * N + j] = static_cast<float>(acc[j]);
  }
  return C;
}

// One element of the product, in double.
[[maybe_unused]] double key_dot(const std::vector<float>& A, const std::vector<float>& B, int64_t N, int64_t K,
                                int64_t i, int64_t j) {
  double acc = 0.0;
  for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(A[i * K + k]) * B[k * N + j];
  return acc;
}

Tolerance key_tolerance(DType dtype, int64_t k) {
  const double eps = dtype == kFloat32 ? std::ldexp(1.0, -23) : dtype == kFloat64 ? std::ldexp(1.0, -52) : 0.0;
  const double t = eps * static_cast<double>(k > 1 ? k : 1);
  return {t, t};
}

lab9::Validation key_validate(const float* got, const float* want, int64_t n, Tolerance tol) {
  lab9::Validation v;
  for (int64_t i = 0; i < n; ++i) {
    const double g = got[i], w = want[i];
    bool match = false;
    double err = INFINITY;
    if (std::isfinite(g) && std::isfinite(w)) {
      err = std::fabs(g - w);
      match = err <= tol.atol + tol.rtol * std::fabs(w);
    } else if ((std::isnan(g) && std::isnan(w)) || (std::isinf(w) && g == w)) {
      continue;
    }
    if (err > v.max_abs_err) v.max_abs_err = err;
    if (std::isfinite(w) && w != 0.0 && err / std::fabs(w) > v.max_rel_err) v.max_rel_err = err / std::fabs(w);
    if (match) continue;
    if (v.mismatches++ == 0) v.first_bad = i, v.first_got = got[i], v.first_want = want[i];
  }
  v.ok = v.mismatches == 0;
  return v;
}

int64_t key_ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }

std::string dims3(int64_t M, int64_t N, int64_t K) {
  return "M = " + std::to_string(M) + ", N = " + std::to_string(N) + ", K = " + std::to_string(K);
}

// "(row, col)" of a flat index into a matrix with `cols` columns; "[i]" when cols = 0.
std::string where_str(int64_t i, int64_t cols) {
  return cols > 0 ? "(" + std::to_string(i / cols) + ", " + std::to_string(i % cols) + ")"
                  : "[" + std::to_string(i) + "]";
}

// Every element within atol + rtol |want| (or the same NaN or infinity); the
// failure names the worst element with 9 digits (floats one rounding apart differ
// only in the 8th or 9th digit).
void require_floats(Check& c, const std::vector<float>& got, const std::vector<float>& want, int64_t cols,
                    const std::string& what, double rtol, double atol) {
  c.require_eq(static_cast<int64_t>(got.size()), static_cast<int64_t>(want.size()), what + ": number of elements");
  int64_t bad = 0, worst = -1;
  double worst_excess = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i], tol = atol + rtol * std::fabs(w), err = std::fabs(g - w);
    if ((std::isnan(g) && std::isnan(w)) || (std::isinf(w) && g == w) || (std::isfinite(w) && err <= tol)) continue;
    ++bad;
    const double excess = std::isfinite(err) ? err - tol : INFINITY;
    if (worst < 0 || excess > worst_excess) worst = static_cast<int64_t>(i), worst_excess = excess;
  }
  if (worst < 0) return;
  c.fail(what + ": " + std::to_string(bad) + " of " + std::to_string(got.size()) + " elements differ; the worst at " +
         where_str(worst, cols) + ": expected " + g9(want[worst]) + ", got " + g9(got[worst]) + " (tolerance atol " +
         g9(atol) + ", rtol " + g9(rtol) + ")");
}

// ---- Task 9.2: a CPU simulation of the tiled kernel, from the student's index functions ----
// Runs every block, phase and thread of the tiled matmul as the GPU would (a phase's
// loads, then its sums), reading A and B only where the student's tile_load_a/b
// point inside them. Also counts how often each element of A and B is loaded.
struct Simulation {
  std::vector<float> C;
  std::vector<int64_t> loads_a, loads_b;  // per element of A (M, K) and B (K, N)
  std::string error;                      // the first thing that cannot be right, "" when none
};

Simulation simulate_tiled(const std::vector<float>& A, const std::vector<float>& B, int64_t M, int64_t N, int64_t K,
                          int64_t T) {
  Simulation s;
  s.C.assign(static_cast<size_t>(M * N), std::nanf(""));
  s.loads_a.assign(static_cast<size_t>(M * K), 0);
  s.loads_b.assign(static_cast<size_t>(K * N), 0);
  const int64_t grid_x = key_ceil_div(N, T), grid_y = key_ceil_div(M, T), phases = key_ceil_div(K, T);
  std::vector<double> As(static_cast<size_t>(T * T)), Bs(static_cast<size_t>(T * T)), acc(static_cast<size_t>(T * T));
  for (int64_t by = 0; by < grid_y; ++by)
    for (int64_t bx = 0; bx < grid_x; ++bx) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t p = 0; p < phases; ++p) {
        for (int64_t ty = 0; ty < T; ++ty)
          for (int64_t tx = 0; tx < T; ++tx) {
            const RowCol a = lab9::tile_load_a(by, ty, tx, p, T), b = lab9::tile_load_b(bx, ty, tx, p, T);
            const bool a_in = a.row >= 0 && a.row < M && a.col >= 0 && a.col < K;
            const bool b_in = b.row >= 0 && b.row < K && b.col >= 0 && b.col < N;
            As[ty * T + tx] = a_in ? A[a.row * K + a.col] : 0.0;
            Bs[ty * T + tx] = b_in ? B[b.row * N + b.col] : 0.0;
            if (a_in) ++s.loads_a[a.row * K + a.col];
            if (b_in) ++s.loads_b[b.row * N + b.col];
          }
        for (int64_t ty = 0; ty < T; ++ty)  // __syncthreads(); then the sums
          for (int64_t tx = 0; tx < T; ++tx)
            for (int64_t k = 0; k < T; ++k) acc[ty * T + tx] += As[ty * T + k] * Bs[k * T + tx];
      }
      for (int64_t ty = 0; ty < T; ++ty)
        for (int64_t tx = 0; tx < T; ++tx) {
          const RowCol o = lab9::tile_output(by, bx, ty, tx, T);
          if (o.row >= 0 && o.row < M && o.col >= 0 && o.col < N)
            s.C[o.row * N + o.col] = static_cast<float>(acc[ty * T + tx]);
        }
    }
  return s;
}

// ---- Task 9.3 ----------------------------------------------------------------------------
std::string validation_str(const lab9::Validation& v) {
  return std::string("{ok ") + (v.ok ? "true" : "false") + ", mismatches " + std::to_string(v.mismatches) +
         ", first_bad " + std::to_string(v.first_bad) + ", first_got " + g9(v.first_got) + ", first_want " +
         g9(v.first_want) + ", max_abs_err " + g9(v.max_abs_err) + ", max_rel_err " + g9(v.max_rel_err) + "}";
}

std::string floats_str(const std::vector<float>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size() && i < 12; ++i) s += (i ? ", " : "") + g9(v[i]);
  return s + (v.size() > 12 ? ", ...]" : "]");
}

Case validate_case(const std::string& name, std::vector<float> got, std::vector<float> want, Tolerance tol) {
  return {name, [=](Check& c) {
            c.input("got " + floats_str(got) + ", want " + floats_str(want) + " (n = " + std::to_string(got.size()) +
                    "), atol " + g9(tol.atol) + ", rtol " + g9(tol.rtol));
            const lab9::Validation v =
                lab9::validate_result(got.data(), want.data(), static_cast<int64_t>(got.size()), tol);
            const lab9::Validation k = key_validate(got.data(), want.data(), static_cast<int64_t>(got.size()), tol);
            auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
            const bool equal = v.ok == k.ok && v.mismatches == k.mismatches && v.first_bad == k.first_bad &&
                               same(v.first_got, k.first_got) && same(v.first_want, k.first_want) &&
                               same(v.max_abs_err, k.max_abs_err) && same(v.max_rel_err, k.max_rel_err);
            c.require(equal, "validate_result: expected " + validation_str(k) + "\n                  got " +
                                 validation_str(v));
          }};
}

// ---- the GPU ------------------------------------------------------------------------------
#if GS_LAB9_CUDA
#ifndef GS_LAB9_CUDA_ARCHS
#define GS_LAB9_CUDA_ARCHS "?"
#endif
namespace gpu = lab9::gpu;

bool g_poisoned = false;  // a kernel faulted: the context is unusable until gpu::reset()

// Every GPU case starts here: skips the task when there is no device, and
// recovers from a fault in an earlier case.
const gpu::DeviceInfo& require_gpu() {
  const gpu::DeviceInfo& d = gpu::device_info();
  if (d.status != 0) throw Skip(std::string("no CUDA device (cudaGetDeviceCount: ") + d.error + ")");
  if (d.count == 0) throw Skip("no CUDA device (cudaGetDeviceCount found none)");
  if (g_poisoned) {
    gpu::reset();
    g_poisoned = false;
  }
  gpu::clear_error();  // an error left by earlier code is not the next launch's
  return d;
}

std::string cuda_text(int err) { return gpu::error_text(err); }

// Device memory: `n` floats between two guard bands of kGuard floats, all filled with
// a signalling NaN (0x7fa5a5a5) so that an element the kernel never wrote, or one it
// wrote outside [0, n), can be told apart. A signalling NaN, because arithmetic never
// produces one: `out[n] = a * x[n] + y[n]` over guard bands of a quiet NaN would store
// that same quiet NaN back (a NaN operand's payload propagates), and the write past the
// end would go unseen. Any arithmetic result, NaN or not, differs from this pattern.
constexpr int64_t kGuard = 256;
constexpr uint32_t kFillBits = 0x7fa5a5a5u;

class DeviceBuffer {
 public:
  DeviceBuffer(Check& c, int64_t n, const std::string& what) : n_(n) {
    if (const int e = gpu::alloc(&base_, n + 2 * kGuard)) c.fail("cudaMalloc of " + what + " failed: " + cuda_text(e));
    float fill;
    std::memcpy(&fill, &kFillBits, sizeof fill);
    const std::vector<float> pattern(static_cast<size_t>(n + 2 * kGuard), fill);
    if (const int e = gpu::upload(base_, pattern.data(), n + 2 * kGuard))
      c.fail("filling " + what + " with the guard pattern failed: " + cuda_text(e));
  }
  DeviceBuffer(Check& c, const std::vector<float>& host, const std::string& what)
      : DeviceBuffer(c, static_cast<int64_t>(host.size()), what) {
    if (const int e = gpu::upload(get(), host.data(), n_))
      c.fail("copying " + what + " to the GPU failed: " + cuda_text(e));
  }
  ~DeviceBuffer() { gpu::release(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* get() const { return base_ + kGuard; }
  // The n elements; fails when a guard element changed (a write outside [0, n)).
  std::vector<float> read(Check& c, const std::string& what) const {
    std::vector<float> all(static_cast<size_t>(n_ + 2 * kGuard));
    if (const int e = gpu::download(all.data(), base_, n_ + 2 * kGuard)) {
      g_poisoned = true;
      c.fail("copying " + what + " back failed: " + cuda_text(e) + " (a kernel fault shows up at the next call)");
    }
    for (int64_t i = 0; i < 2 * kGuard; ++i) {
      const int64_t at = i < kGuard ? i : n_ + i;  // the front band, then the back band
      uint32_t bits;
      std::memcpy(&bits, &all[static_cast<size_t>(at)], sizeof bits);
      if (bits != kFillBits)
        c.fail(what + ": the kernel wrote outside the buffer, at index " + std::to_string(at - kGuard) +
               " of a buffer of " + std::to_string(n_) +
               " elements: a thread past the end must not write (check i < n, row < M, col < N)");
    }
    return std::vector<float>(all.begin() + kGuard, all.begin() + kGuard + n_);
  }

 private:
  float* base_ = nullptr;
  int64_t n_ = 0;
};

// After a launcher: not implemented, a failed launch, or a fault while the kernel ran.
void check_launch(Check& c, int rc, int task, const std::string& what) {
  if (rc == lab9::kNotImplemented)
    throw Error("lab 9", "not implemented: lab 9 task " + std::to_string(task) + " (" + what +
                             " in tutorials/lab9_cuda/lab9_kernels.cu)");
  if (rc != 0) {
    std::string hint;
    if (cuda_text(rc).find("NoKernelImage") != std::string::npos) {
      const gpu::DeviceInfo& d = gpu::device_info();
      hint = "\nthe kernels were compiled for CUDA architecture(s) " GS_LAB9_CUDA_ARCHS ", this GPU is sm_" +
             std::to_string(d.cc_major) + std::to_string(d.cc_minor) +
             ": reconfigure with -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(d.cc_major) + std::to_string(d.cc_minor);
    }
    c.fail(what + " reported a failed launch: " + cuda_text(rc) + hint);
  }
  if (const int e = gpu::synchronize()) {
    g_poisoned = true;
    c.fail("the kernel of " + what + " failed while it ran: " + cuda_text(e) +
           " (an illegal address is a read or write outside a buffer: check the bounds tests and the index math)");
  }
}

// Validates `got` against `want` with Task 9.1's tolerance for k-term sums. Names
// the first mismatch by its (row, col) when `cols` > 0, and says when it is an
// element the kernel never wrote.
void require_valid(Check& c, const std::vector<float>& got, const std::vector<float>& want, int64_t k, int64_t cols,
                   const std::string& what) {
  const Tolerance tol = key_tolerance(kFloat32, k);
  const lab9::Validation v = key_validate(got.data(), want.data(), static_cast<int64_t>(got.size()), tol);
  if (v.ok) return;
  uint32_t bits;
  std::memcpy(&bits, &got[static_cast<size_t>(v.first_bad)], sizeof bits);
  const std::string where = where_str(v.first_bad, cols);
  std::string m = what + ": " + std::to_string(v.mismatches) + " of " + std::to_string(got.size()) +
                  " elements differ from the CPU answer key (tolerance atol = rtol = " + g9(tol.atol) +
                  "); the first at " + where + ": expected " + g9(v.first_want) + ", got " + g9(v.first_got) +
                  "; max abs error " + g9(v.max_abs_err);
  if (bits == kFillBits)
    m += "\nthat element was never written (the grader fills the output with NaN before the launch): does the grid "
         "cover every element?";
  c.fail(m);
}

// ---- timing ----
struct AxpyArgs {
  int n;
  float alpha;
  const float *x, *y;
  float* out;
  int block;
};
int launch_axpy(void* p) {
  auto* a = static_cast<AxpyArgs*>(p);
  return lab9::axpy_gpu(a->n, a->alpha, a->x, a->y, a->out, a->block);
}

struct MatmulArgs {
  const float *A, *B;
  float* C;
  int M, N, K;
};
int launch_naive(void* p) {
  auto* a = static_cast<MatmulArgs*>(p);
  return lab9::matmul_naive_gpu(a->A, a->B, a->C, a->M, a->N, a->K);
}
int launch_tiled(void* p) {
  auto* a = static_cast<MatmulArgs*>(p);
  return lab9::matmul_tiled_gpu(a->A, a->B, a->C, a->M, a->N, a->K);
}
// cuBLAS statuses are not CUDA errors: kCublasBase + status keeps them apart in gpu::time_ms.
constexpr int kCublasBase = 100000;
int launch_cublas(void* p) {
  auto* a = static_cast<MatmulArgs*>(p);
  const int s = gpu::cublas_sgemm(a->A, a->B, a->C, a->M, a->N, a->K);
  return s ? kCublasBase + s : 0;
}
std::string error_or_status(int e) {
  return e >= kCublasBase ? std::string(gpu::cublas_status_text(e - kCublasBase)) : cuda_text(e);
}

double gflops(double flops, float ms) { return ms > 0 ? flops / (ms * 1e6) : 0.0; }

#else
[[noreturn]] void require_gpu() {
  throw Skip("built without CUDA (nvcc was not found, or GRADSLEUTH_CUDA=OFF): lab9_kernels.cu was not compiled");
}
#endif

// ---- the GPU cases ------------------------------------------------------------------------
Case axpy_gpu_case(const std::string& name, int n, int block) {
  return {name, [=](Check& c) {
            require_gpu();
#if GS_LAB9_CUDA
            c.input("axpy_gpu(n = " + std::to_string(n) +
                    ", alpha = 2.5, x, y uniform in [-1, 1), out, block = " + std::to_string(block) + ")");
            const std::vector<float> x = uniform(n, 901), y = uniform(n, 902);
            DeviceBuffer dx(c, x, "x"), dy(c, y, "y"), dout(c, n, "out");
            check_launch(c, lab9::axpy_gpu(n, 2.5f, dx.get(), dy.get(), dout.get(), block), 5, "axpy_gpu");
            require_valid(c, dout.read(c, "out"), key_axpy(2.5f, x, y), 2, 0, "out");
#endif
          }};
}

// Task 6 is the naive kernel, task 7 the tiled one.
Case matmul_gpu_case(const std::string& name, int task, int M, int N, int K) {
  return {name, [=](Check& c) {
            require_gpu();
#if GS_LAB9_CUDA
            const auto f = task == 6 ? lab9::matmul_naive_gpu : lab9::matmul_tiled_gpu;
            const std::string fname = task == 6 ? "matmul_naive_gpu" : "matmul_tiled_gpu";
            c.input(fname + "(A, B, C, " + dims3(M, N, K) + "), A and B uniform in [-1, 1)");
            const std::vector<float> A = uniform(int64_t{M} * K, 911 + M), B = uniform(int64_t{K} * N, 912 + N);
            DeviceBuffer dA(c, A, "A"), dB(c, B, "B"), dC(c, int64_t{M} * N, "C");
            check_launch(c, f(dA.get(), dB.get(), dC.get(), M, N, K), task, fname);
            require_valid(c, dC.read(c, "C"), key_matmul(A, B, M, N, K), K, N, "C");
#endif
          }};
}

// A 2048^3 product: the result checked (4096 elements against the CPU key, all of it
// against cuBLAS), then timed against cuBLAS SGEMM (and, for the tiled kernel, the naive one).
// On the emulator: 160 x 144 x 192 checked the same way (key and cuBLAS, the emulator's
// reference GEMM), not timed.
Case matmul_timing_case(int task) {
  return {
      GS_LAB9_EMU ? "timing (emulator: 160 x 144 x 192 against the key and cuBLAS, validation only)"
                  : "timing: 2048 x 2048 x 2048 against cuBLAS SGEMM (checked first)",
      [=](Check& c) {
        require_gpu();
#if GS_LAB9_CUDA
        const auto f = task == 6 ? lab9::matmul_naive_gpu : lab9::matmul_tiled_gpu;
        const std::string fname = task == 6 ? "matmul_naive_gpu" : "matmul_tiled_gpu";
#if GS_LAB9_EMU
        constexpr int M = 160, N = 144, K = 192;
#else
        constexpr int M = 2048, N = 2048, K = 2048;
#endif
        c.input(fname + "(A, B, C, " + dims3(M, N, K) + "), A and B uniform in [-1, 1)");
        const std::vector<float> A = uniform(int64_t{M} * K, 921), B = uniform(int64_t{K} * N, 922);
        DeviceBuffer dA(c, A, "A"), dB(c, B, "B"), dC(c, int64_t{M} * N, "C"), dRef(c, int64_t{M} * N, "C (cuBLAS)");
        check_launch(c, f(dA.get(), dB.get(), dC.get(), M, N, K), task, fname);
        const std::vector<float> got = dC.read(c, "C");
        // 4096 sampled elements against the double key.
        std::mt19937 pick(923);
        std::vector<float> got_s, want_s;
        std::vector<int64_t> at;
        for (int s = 0; s < 4096; ++s) {
          const int64_t i = pick() % M, j = pick() % N;
          at.push_back(i * N + j);
          got_s.push_back(got[static_cast<size_t>(i * N + j)]);
          want_s.push_back(static_cast<float>(key_dot(A, B, N, K, i, j)));
        }
        const Tolerance tol = key_tolerance(kFloat32, K);
        const lab9::Validation vs = key_validate(got_s.data(), want_s.data(), 4096, tol);
        if (!vs.ok) {
          const int64_t bad = at[static_cast<size_t>(vs.first_bad)];
          c.fail("C: " + std::to_string(vs.mismatches) +
                 " of 4096 sampled elements differ from the CPU answer key; the "
                 "first at (" +
                 std::to_string(bad / N) + ", " + std::to_string(bad % N) + "): expected " + g9(vs.first_want) +
                 ", got " + g9(vs.first_got));
        }
        // cuBLAS: the reference for speed, and for the whole result.
        const double flops = 2.0 * M * N * K;
        MatmulArgs ref{dA.get(), dB.get(), dRef.get(), M, N, K};
        float ms_ref = 0.0f;
        if (const int e = launch_cublas(&ref)) c.fail("cuBLAS SGEMM failed: " + error_or_status(e));
        if (const int e = gpu::synchronize()) c.fail("cuBLAS SGEMM failed while it ran: " + cuda_text(e));
        const std::vector<float> blas = dRef.read(c, "C (cuBLAS)");
        std::vector<float> blas_s;
        for (int64_t i : at) blas_s.push_back(blas[static_cast<size_t>(i)]);
        if (key_validate(blas_s.data(), want_s.data(), 4096, tol).ok) {
          // Two float32 results, each within tol of the key: within 2 tol of each other.
          const Tolerance tol2 = key_tolerance(kFloat32, 2 * K);
          const lab9::Validation vb = key_validate(got.data(), blas.data(), int64_t{M} * N, tol2);
          if (!vb.ok)
            c.fail("C: " + std::to_string(vb.mismatches) + " elements differ from cuBLAS SGEMM; the first at (" +
                   std::to_string(vb.first_bad / N) + ", " + std::to_string(vb.first_bad % N) + "): cuBLAS " +
                   g9(vb.first_want) + ", yours " + g9(vb.first_got));
        } else {
          c.note("cuBLAS SGEMM disagrees with the CPU key (TF32 math, NVIDIA_TF32_OVERRIDE?): not compared with it");
        }
#if GS_LAB9_EMU
        c.note(
            "emulator: validation only, no timing (on a GPU this case times 2048 x 2048 x 2048 against cuBLAS); "
            "its points are for the correct result");
        return;
#endif
        if (const int e = gpu::time_ms(launch_cublas, &ref, 2, 20, &ms_ref))
          c.fail("timing cuBLAS failed: " + error_or_status(e));
        MatmulArgs mine{dA.get(), dB.get(), dC.get(), M, N, K};
        float ms = 0.0f;
        if (const int e = gpu::time_ms(task == 6 ? launch_naive : launch_tiled, &mine, 1, 5, &ms)) {
          g_poisoned = true;
          c.fail("timing " + fname + " failed: " + cuda_text(e));
        }
        const double g = gflops(flops, ms), g_ref = gflops(flops, ms_ref);
        std::string line = fname + ": " + fixed(ms, 3) + " ms, " + fixed(g, 0) +
                           " GFLOP/s = " + fixed(100.0 * g / g_ref, 1) + "% of cuBLAS SGEMM (" + fixed(ms_ref, 3) +
                           " ms, " + fixed(g_ref, 0) + " GFLOP/s)";
        if (task == 7) {  // against version 1, when it is written
          float ms_naive = 0.0f;
          const int e = gpu::time_ms(launch_naive, &mine, 1, 5, &ms_naive);
          if (e == 0 && ms_naive > 0)
            line += "; " + fixed(ms_naive / ms, 2) + "x as fast as the naive kernel (" + fixed(ms_naive, 3) + " ms)";
          if (e > 0) g_poisoned = true;  // the naive kernel faulted: reset before the next GPU case
        }
        c.note(line);
        const Traffic naive = lab9::Traffic{flops, 4.0 * (2.0 * M * N * K + 1.0 * M * N)};
        const Traffic tiled = lab9::Traffic{flops, 4.0 * (1.0 * M * K * key_ceil_div(N, lab9::kTile) +
                                                          1.0 * K * N * key_ceil_div(M, lab9::kTile) + 1.0 * M * N)};
        const Traffic& t = task == 6 ? naive : tiled;
        const double gbs = t.bytes / (ms * 1e6), peak = gpu::device_info().peak_gb_per_s;
        std::string napkin = "napkin: it issues " + fixed(t.bytes / 1e9, 1) + " GB of global loads and stores (" +
                             fixed(t.flops / t.bytes, 2) + " flop/byte); at " + fixed(ms, 3) + " ms that is " +
                             fixed(gbs, 0) + " GB/s";
        if (peak > 0)
          napkin += gbs > peak ? ", more than the " + fixed(peak, 0) +
                                     " GB/s the DRAM can deliver: the L1 and L2 "
                                     "caches serve most of it"
                               : ", " + fixed(100.0 * gbs / peak, 0) + "% of the " + fixed(peak, 0) + " GB/s DRAM peak";
        c.note(napkin);
#endif
      }};
}

}  // namespace

Lab make_lab9() {
  Lab lab;
  lab.number = 9;
  lab.dir = "lab9_cuda";
  lab.title = "Your first CUDA kernels: axpy, a naive and a tiled matmul, against the CPU and cuBLAS";
  lab.starter = "tutorials/lab9_cuda/lab9.cpp";

  // ---- Task 9.1: the answer key ------------------------------------------------------------
  auto axpy_cpu_case = [](const std::string& name, int64_t n, float alpha) -> Case {
    return {name, [=](Check& c) {
              c.input("axpy_cpu(n = " + std::to_string(n) + ", alpha = " + g9(alpha) + ", x, y uniform in [-1, 1))");
              const std::vector<float> x = uniform(n, 101 + static_cast<uint32_t>(n)), y = uniform(n, 102);
              std::vector<float> out(static_cast<size_t>(n), std::nanf(""));
              lab9::axpy_cpu(n, alpha, x.data(), y.data(), out.data());
              require_floats(c, out, key_axpy(alpha, x, y), 0,
                             "out (the key computes alpha * x + y in double and rounds once)", 0.0, 0.0);
            }};
  };
  auto matmul_cpu_case = [](const std::string& name, int64_t M, int64_t N, int64_t K) -> Case {
    return {name, [=](Check& c) {
              c.input("matmul_cpu(A, B, C, " + dims3(M, N, K) + "), A and B uniform in [-1, 1)");
              const std::vector<float> A = uniform(M * K, 111 + static_cast<uint32_t>(K)), B = uniform(K * N, 112);
              std::vector<float> C(static_cast<size_t>(M * N), std::nanf(""));
              lab9::matmul_cpu(A.data(), B.data(), C.data(), M, N, K);
              // Double sums in another order differ by ~1e-16: at most one float rounding apart.
              require_floats(c, C, key_matmul(A, B, M, N, K), N, "C (the key sums in double, then rounds once)",
                             std::ldexp(1.0, -23), 1e-12);
            }};
  };
  lab.tasks.push_back(
      {1,
       "the CPU answer key",
       15,
       "lab9::axpy_cpu(), lab9::matmul_cpu(), lab9::tolerance()",
       {axpy_cpu_case("axpy, n = 1", 1, 2.5f),
        axpy_cpu_case("axpy, n = 1000, alpha = -0.75", 1000, -0.75f),
        axpy_cpu_case("axpy, n = 4099, alpha = 3", 4099, 3.0f),
        {"matmul on integers: [[1, 2], [3, 4]] @ [[5, 6, 7], [8, 9, 10]]",
         [](Check& c) {
           c.input("A (2, 2) = [[1, 2], [3, 4]], B (2, 3) = [[5, 6, 7], [8, 9, 10]]");
           const std::vector<float> A{1, 2, 3, 4}, B{5, 6, 7, 8, 9, 10};
           std::vector<float> C(6, std::nanf(""));
           lab9::matmul_cpu(A.data(), B.data(), C.data(), 2, 3, 2);
           require_floats(c, C, {21, 24, 27, 47, 54, 61}, 3, "C", 0.0, 0.0);
         }},
        matmul_cpu_case("matmul 1 x 1 x 1", 1, 1, 1),
        matmul_cpu_case("matmul (5, 7) from K = 3", 5, 7, 3),
        matmul_cpu_case("matmul 17 x 31 x 45 (nothing is a multiple of anything)", 17, 31, 45),
        {"matmul with K = 0: C is all zeros",
         [](Check& c) {
           c.input("matmul_cpu(A, B, C, M = 3, N = 4, K = 0), C filled with NaN before the call");
           std::vector<float> C(12, std::nanf(""));
           const float dummy = 0.0f;
           lab9::matmul_cpu(&dummy, &dummy, C.data(), 3, 4, 0);
           require_floats(c, C, std::vector<float>(12, 0.0f), 4, "C", 0.0, 0.0);
         }},
        matmul_cpu_case("matmul 4 x 6 x 4096: a float32 sum is off by many roundings here, a double one is not", 4, 6,
                        4096),
        {"tolerance(dtype, k): eps(dtype) * max(k, 1); exact for integers",
         [](Check& c) {
           const std::vector<std::pair<DType, int64_t>> args{{kFloat32, 0},    {kFloat32, 1},    {kFloat32, 2},
                                                             {kFloat32, 1024}, {kFloat32, 4096}, {kFloat64, 1},
                                                             {kFloat64, 300},  {kInt64, 50},     {kBool, 3}};
           for (const auto& [dt, k] : args) {
             c.input(std::string("tolerance(") + dtype_name(dt) + ", " + std::to_string(k) + ")");
             const Tolerance got = lab9::tolerance(dt, k), want = key_tolerance(dt, k);
             c.require_near(got.atol, want.atol, want.atol * 1e-12, "atol");
             c.require_near(got.rtol, want.rtol, want.rtol * 1e-12, "rtol");
           }
           c.input("tolerance(float32, -1)");
           c.require_throws([] { lab9::tolerance(kFloat32, -1); }, "tolerance with k < 0");
         }},
        {"tolerance(float32, K) accepts float32 sums in any order and rejects a dropped term", [](Check& c) {
           constexpr int64_t M = 64, N = 64, K = 2048;
           c.input(
               "A (64, 2048), B (2048, 64) uniform in [-1, 1); C summed in float32 forwards, backwards and in 16 "
               "tiles; and C with the last k term left out; compared with the key by validate (the grader's)");
           const std::vector<float> A = uniform(M * K, 121), B = uniform(K * N, 122);
           const std::vector<float> want = key_matmul(A, B, M, N, K);
           const Tolerance tol = lab9::tolerance(kFloat32, K);
           std::vector<float> fwd(M * N), bwd(M * N), tiles(M * N), dropped(M * N);
           for (int64_t i = 0; i < M; ++i)
             for (int64_t j = 0; j < N; ++j) {
               float f = 0, b = 0, t = 0, d = 0;
               for (int64_t k = 0; k < K; ++k) f = std::fma(A[i * K + k], B[k * N + j], f);
               for (int64_t k = K - 1; k >= 0; --k) b += A[i * K + k] * B[k * N + j];
               for (int64_t k0 = 0; k0 < K; k0 += 16) {
                 float part = 0;
                 for (int64_t k = k0; k < k0 + 16; ++k) part = std::fma(A[i * K + k], B[k * N + j], part);
                 t += part;
               }
               for (int64_t k = 0; k < K - 1; ++k) d += A[i * K + k] * B[k * N + j];
               fwd[i * N + j] = f, bwd[i * N + j] = b, tiles[i * N + j] = t, dropped[i * N + j] = d;
             }
           for (const auto& [what, got] : {std::pair{"forwards", &fwd}, {"backwards", &bwd}, {"in tiles", &tiles}}) {
             const lab9::Validation v = key_validate(got->data(), want.data(), M * N, tol);
             c.require(v.ok, std::string("a float32 sum ") + what + " fails your tolerance (atol " + g9(tol.atol) +
                                 ", rtol " + g9(tol.rtol) + ") at " + std::to_string(v.mismatches) +
                                 " elements: it is too strict for float32 rounding");
           }
           const lab9::Validation v = key_validate(dropped.data(), want.data(), M * N, tol);
           c.require(v.mismatches > M * N / 2, "your tolerance (atol " + g9(tol.atol) + ", rtol " + g9(tol.rtol) +
                                                   ") accepts " + std::to_string(M * N - v.mismatches) + " of " +
                                                   std::to_string(M * N) + " elements with a term missing: too loose");
         }}}});

  // ---- Task 9.2: launch geometry and index math -------------------------------------------
  lab.tasks.push_back(
      {2,
       "launch geometry and index math",
       20,
       "lab9::ceil_div(), launch_1d(), global_index(), launch_matmul(), k_phases(), tile_output(), tile_load_a/b()",
       {{"ceil_div on exact and inexact divisions, and its errors",
         [](Check& c) {
           for (const auto& [n, d] : std::vector<std::pair<int64_t, int64_t>>{{0, 1},
                                                                              {1, 1},
                                                                              {7, 2},
                                                                              {8, 2},
                                                                              {255, 256},
                                                                              {256, 256},
                                                                              {257, 256},
                                                                              {1000003, 256},
                                                                              {int64_t{1} << 40, 3}}) {
             c.input("ceil_div(" + std::to_string(n) + ", " + std::to_string(d) + ")");
             c.require_eq(lab9::ceil_div(n, d), key_ceil_div(n, d), "ceil_div");
           }
           c.input("ceil_div(5, 0), ceil_div(5, -2), ceil_div(-1, 4)");
           c.require_throws([] { lab9::ceil_div(5, 0); }, "ceil_div(5, 0)");
           c.require_throws([] { lab9::ceil_div(5, -2); }, "ceil_div(5, -2)");
           c.require_throws([] { lab9::ceil_div(-1, 4); }, "ceil_div(-1, 4)");
         }},
        {"launch_1d: the fewest blocks that cover n, for n around the block size and blocks of 32 to 1024",
         [](Check& c) {
           for (int64_t block : {32, 96, 256, 1024})
             for (int64_t n :
                  {int64_t{0}, int64_t{1}, block - 1, block, block + 1, int64_t{1000003}, int64_t{1} << 24}) {
               c.input("launch_1d(" + std::to_string(n) + ", " + std::to_string(block) + ")");
               const lab9::Launch1D l = lab9::launch_1d(n, block);
               c.require_eq(l.block, block, "block");
               c.require_eq(l.grid, key_ceil_div(n, block), "grid (grid * block >= n, (grid - 1) * block < n)");
             }
           c.input("launch_1d(100, 0), launch_1d(100, 1025), launch_1d(-1, 256)");
           c.require_throws([] { lab9::launch_1d(100, 0); }, "a block of 0 threads");
           c.require_throws([] { lab9::launch_1d(100, 1025); }, "a block of 1025 threads (the limit is 1024)");
           c.require_throws([] { lab9::launch_1d(-1, 256); }, "n < 0");
         }},
        {"global_index: every element of n = 1000, block 96, handled by exactly one thread",
         [](Check& c) {
           c.input("a launch of 11 blocks of 96 threads for n = 1000: global_index(b, 96, t) for every b, t");
           std::vector<int> hits(1000, 0);
           for (int64_t b = 0; b < 11; ++b)
             for (int64_t t = 0; t < 96; ++t) {
               const int64_t i = lab9::global_index(b, 96, t);
               c.require_eq(i, b * 96 + t, "global_index(" + std::to_string(b) + ", 96, " + std::to_string(t) + ")");
               if (i < 1000) ++hits[static_cast<size_t>(i)];
             }
           for (int64_t i = 0; i < 1000; ++i) c.require_eq(hits[i], 1, "threads handling element " + std::to_string(i));
         }},
        {"launch_matmul and k_phases: x along the columns, y along the rows",
         [](Check& c) {
           for (const auto& [M, N, T] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 1, 16},
                                                                                           {16, 16, 16},
                                                                                           {17, 33, 16},
                                                                                           {33, 17, 16},
                                                                                           {2048, 2048, 16},
                                                                                           {100, 1, 8},
                                                                                           {0, 5, 16},
                                                                                           {5, 7, 32}}) {
             c.input("launch_matmul(M = " + std::to_string(M) + ", N = " + std::to_string(N) +
                     ", tile = " + std::to_string(T) + ")");
             const lab9::Launch2D l = lab9::launch_matmul(M, N, T);
             c.require_eq(l.grid_x, key_ceil_div(N, T), "grid_x (blocks along the N columns)");
             c.require_eq(l.grid_y, key_ceil_div(M, T), "grid_y (blocks along the M rows)");
             c.require_eq(l.block_x, T, "block_x");
             c.require_eq(l.block_y, T, "block_y");
           }
           for (const auto& [K, T] :
                std::vector<std::pair<int64_t, int64_t>>{{0, 16}, {1, 16}, {16, 16}, {17, 16}, {2048, 16}, {9, 4}}) {
             c.input("k_phases(K = " + std::to_string(K) + ", tile = " + std::to_string(T) + ")");
             c.require_eq(lab9::k_phases(K, T), key_ceil_div(K, T), "k_phases");
           }
           c.input(
               "launch_matmul(4, 4, 0), launch_matmul(4, 4, 33) (33 x 33 = 1089 threads), launch_matmul(-1, 4, 16)");
           c.require_throws([] { lab9::launch_matmul(4, 4, 0); }, "tile 0");
           c.require_throws([] { lab9::launch_matmul(4, 4, 33); }, "tile 33: a block of 1089 threads");
           c.require_throws([] { lab9::launch_matmul(-1, 4, 16); }, "M < 0");
         }},
        {"tile_output: every element of C computed by exactly one thread; threadIdx.x along the columns",
         [](Check& c) {
           for (const auto& [M, N, T] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
                    {5, 7, 2}, {6, 6, 3}, {1, 9, 4}, {8, 8, 4}, {13, 3, 5}, {33, 17, 16}}) {
             c.input("every thread of the launch for C (" + std::to_string(M) + ", " + std::to_string(N) + "), tile " +
                     std::to_string(T) + ": tile_output(by, bx, ty, tx, " + std::to_string(T) + ")");
             std::map<std::pair<int64_t, int64_t>, int> hits;
             for (int64_t by = 0; by < key_ceil_div(M, T); ++by)
               for (int64_t bx = 0; bx < key_ceil_div(N, T); ++bx)
                 for (int64_t ty = 0; ty < T; ++ty)
                   for (int64_t tx = 0; tx < T; ++tx) {
                     const RowCol o = lab9::tile_output(by, bx, ty, tx, T);
                     const std::string who = "thread (ty " + std::to_string(ty) + ", tx " + std::to_string(tx) +
                                             ") of block (by " + std::to_string(by) + ", bx " + std::to_string(bx) +
                                             ")";
                     c.require(o.row == by * T + ty && o.col == bx * T + tx,
                               who + ": expected (row " + std::to_string(by * T + ty) + ", col " +
                                   std::to_string(bx * T + tx) + "), got (row " + std::to_string(o.row) + ", col " +
                                   std::to_string(o.col) +
                                   ") (x, the fast-moving index, runs along the columns: neighbouring threads, "
                                   "neighbouring addresses)");
                     if (o.row < M && o.col < N) ++hits[{o.row, o.col}];
                   }
             for (int64_t i = 0; i < M; ++i)
               for (int64_t j = 0; j < N; ++j)
                 c.require_eq(hits[{i, j}], 1,
                              "threads computing C[" + std::to_string(i) + "][" + std::to_string(j) + "]");
           }
         }},
        {"tile_load_a and tile_load_b: a CPU simulation of the tiled kernel built from them computes A @ B",
         [](Check& c) {
           for (const auto& [M, N, K, T] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
                    {5, 7, 9, 2}, {6, 6, 6, 3}, {1, 9, 4, 4}, {13, 3, 11, 5}, {16, 16, 16, 4}, {33, 17, 40, 16}}) {
             c.input(
                 "the tiled kernel run on the CPU (every block, phase and thread) with your tile_output, tile_load_a "
                 "and tile_load_b: " +
                 dims3(M, N, K) + ", tile " + std::to_string(T));
             for (const auto& [by, bx, ty, tx, p] :
                  std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>>{
                      {0, 0, 0, 0, 0}, {0, 0, 1, 0, 0}, {0, 0, 0, 1, 0}, {1, 2, 1, 0, 1}, {2, 1, 0, 1, 2}}) {
               if (T < 2) continue;
               const RowCol a = lab9::tile_load_a(by, ty, tx, p, T), b = lab9::tile_load_b(bx, ty, tx, p, T);
               const std::string who = " for thread (ty " + std::to_string(ty) + ", tx " + std::to_string(tx) +
                                       ") of block (by " + std::to_string(by) + ", bx " + std::to_string(bx) +
                                       ") in phase " + std::to_string(p);
               c.require(a.row == by * T + ty && a.col == p * T + tx,
                         "tile_load_a" + who + ": expected A[" + std::to_string(by * T + ty) + "][" +
                             std::to_string(p * T + tx) + "], got A[" + std::to_string(a.row) + "][" +
                             std::to_string(a.col) + "]");
               c.require(b.row == p * T + ty && b.col == bx * T + tx,
                         "tile_load_b" + who + ": expected B[" + std::to_string(p * T + ty) + "][" +
                             std::to_string(bx * T + tx) + "], got B[" + std::to_string(b.row) + "][" +
                             std::to_string(b.col) + "]");
             }
             const std::vector<float> A = uniform(M * K, 131 + static_cast<uint32_t>(M)), B = uniform(K * N, 132);
             const Simulation s = simulate_tiled(A, B, M, N, K, T);
             require_floats(c, s.C, key_matmul(A, B, M, N, K), N, "C from the simulated tiled kernel", 1e-6, 1e-6);
             for (int64_t i = 0; i < M * K; ++i)
               c.require_eq(
                   s.loads_a[i], key_ceil_div(N, T),
                   "loads of A[" + std::to_string(i / K) + "][" + std::to_string(i % K) + "] (once per block column)");
             for (int64_t i = 0; i < K * N; ++i)
               c.require_eq(
                   s.loads_b[i], key_ceil_div(M, T),
                   "loads of B[" + std::to_string(i / N) + "][" + std::to_string(i % N) + "] (once per block row)");
           }
         }}}});

  // ---- Task 9.3: validate_result --------------------------------------------------------
  const float nan = std::nanf(""), inf = INFINITY;
  lab.tasks.push_back(
      {3,
       "validate_result",
       10,
       "lab9::validate_result()",
       {validate_case("identical", {1, -2, 3.5f, 0}, {1, -2, 3.5f, 0}, {1e-6, 1e-6}),
        validate_case("small differences inside the tolerance: max_abs_err and max_rel_err",
                      {1.0f, 2.00001f, -4.0f, 0.5f}, {1.0f, 2.0f, -4.00002f, 0.5f}, {1e-4, 1e-4}),
        validate_case("one mismatch at index 5", {0, 1, 2, 3, 4, 5.5f, 6, 7, 8, 9}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
                      {1e-3, 1e-3}),
        validate_case("three mismatches: the first is the lowest index", {0, 1.5f, 2, 3.5f, 4, 5.5f},
                      {0, 1, 2, 3, 4, 5}, {1e-3, 1e-3}),
        validate_case("on the boundary: |got - want| = atol + rtol |want| matches; just above does not",
                      {1.5f, 1.50001f}, {1.0f, 1.0f}, {0.25, 0.25}),
        validate_case("want = 0: no relative error, atol decides", {1e-7f, -1e-5f}, {0.0f, 0.0f}, {1e-6, 1e-6}),
        validate_case("a NaN where a number belongs: a mismatch with error inf", {1, nan, 3}, {1, 2, 3}, {1e-3, 1e-3}),
        validate_case("NaN against NaN and inf against inf match; -inf against inf does not", {nan, inf, -inf, 2},
                      {nan, inf, inf, 2}, {1e-3, 1e-3}),
        validate_case("a finite value against inf is a mismatch, however large rtol", {1e30f, 5}, {inf, 5}, {1.0, 1.0}),
        {"n = 1048576 with one mismatch at the very end",
         [](Check& c) {
           std::vector<float> want = uniform(1 << 20, 141), got = want;
           got.back() += 0.5f;
           validate_case("", got, want, {1e-6, 1e-6}).run(c);
         }},
        {"n = 0 is ok; n < 0 and null pointers throw", [](Check& c) {
           c.input("validate_result(nullptr, nullptr, 0, {0, 0}); then n = -1; then null pointers with n = 3");
           const lab9::Validation v = lab9::validate_result(nullptr, nullptr, 0, {0, 0});
           c.require(v.ok && v.mismatches == 0 && v.first_bad == -1, "n = 0: expected ok, got " + validation_str(v));
           const float x[3] = {1, 2, 3};
           c.require_throws([&] { lab9::validate_result(x, x, -1, {0, 0}); }, "n = -1");
           c.require_throws([&] { lab9::validate_result(nullptr, x, 3, {0, 0}); }, "got = nullptr with n = 3");
           c.require_throws([&] { lab9::validate_result(x, nullptr, 3, {0, 0}); }, "want = nullptr with n = 3");
         }}}});

  // ---- Task 9.4: napkin math -----------------------------------------------------------------
  auto require_traffic = [](Check& c, const Traffic& got, const Traffic& want, const std::string& what) {
    c.require_near(got.flops, want.flops, want.flops * 1e-12, what + ".flops");
    c.require_near(got.bytes, want.bytes, want.bytes * 1e-12, what + ".bytes");
  };
  lab.tasks.push_back(
      {4,
       "napkin math: traffic and the roofline",
       10,
       "lab9::axpy_traffic(), matmul_naive_traffic(), matmul_tiled_traffic(), roofline_gflops(), warp_sectors()",
       {{"axpy_traffic: 2 flops and 12 bytes per element",
         [=](Check& c) {
           for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1} << 25}) {
             c.input("axpy_traffic(" + std::to_string(n) + ")");
             require_traffic(c, lab9::axpy_traffic(n), {2.0 * n, 12.0 * n}, "axpy_traffic");
           }
         }},
        {"matmul_naive_traffic: every thread reads a row of A and a column of B",
         [=](Check& c) {
           for (const auto& [M, N, K] :
                std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 1, 1}, {3, 5, 7}, {2048, 2048, 2048}}) {
             c.input("matmul_naive_traffic(" + dims3(M, N, K) + ")");
             const double m = M, n = N, k = K;
             require_traffic(c, lab9::matmul_naive_traffic(M, N, K), {2 * m * n * k, 4 * (2 * m * n * k + m * n)},
                             "matmul_naive_traffic");
           }
         }},
        {"matmul_tiled_traffic: each block column reads A once, each block row reads B once",
         [=](Check& c) {
           for (const auto& [M, N, K, T] :
                std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{{16, 16, 16, 16},
                                                                            {17, 33, 9, 16},
                                                                            {2048, 2048, 2048, 16},
                                                                            {2048, 2048, 2048, 32},
                                                                            {100, 3, 50, 8}}) {
             c.input("matmul_tiled_traffic(" + dims3(M, N, K) + ", tile " + std::to_string(T) + ")");
             const double m = M, n = N, k = K;
             require_traffic(c, lab9::matmul_tiled_traffic(M, N, K, T),
                             {2 * m * n * k, 4 * (m * k * key_ceil_div(N, T) + k * n * key_ceil_div(M, T) + m * n)},
                             "matmul_tiled_traffic");
           }
         }},
        {"roofline_gflops: memory-bound axpy, compute-bound at high intensity",
         [](Check& c) {
           // H100 SXM, round numbers: 67 TFLOP/s FP32 (no tensor cores), 3350 GB/s HBM3.
           const std::vector<std::pair<Traffic, double>> cases{
               {{2.0e6, 12.0e6}, 3350.0 / 6.0},                               // axpy: 1/6 flop per byte
               {{2.0 * 2048 * 2048 * 2048, 4.0 * 3 * 2048 * 2048}, 67000.0},  // ideal matmul traffic: 341 flop/byte
               {{1.0e9, 1.0e8}, 33500.0}};  // 10 flop/byte: still under the ridge at 20
           for (const auto& [t, want] : cases) {
             c.input("roofline_gflops({flops " + g9(t.flops) + ", bytes " + g9(t.bytes) +
                     "}, peak 67000 GFLOP/s, 3350 GB/s)");
             c.require_near(lab9::roofline_gflops(t, 67000.0, 3350.0), want, want * 1e-9, "GFLOP/s");
           }
           c.input("roofline_gflops({0, 100}, ...), roofline_gflops({100, 0}, ...)");
           c.require_throws([] { lab9::roofline_gflops({0.0, 100.0}, 1, 1); }, "flops = 0");
           c.require_throws([] { lab9::roofline_gflops({100.0, 0.0}, 1, 1); }, "bytes = 0");
         }},
        {"warp_sectors: contiguous floats take 4 sectors, strided ones up to 32", [](Check& c) {
           auto key = [](int64_t stride, int64_t eb) {
             std::set<int64_t> s;
             for (int64_t i = 0; i < 32; ++i)
               for (int64_t b = i * stride * eb; b < i * stride * eb + eb; ++b) s.insert(b / 32);
             return static_cast<int64_t>(s.size());
           };
           for (const auto& [stride, eb] : std::vector<std::pair<int64_t, int64_t>>{{1, 4},
                                                                                    {0, 4},
                                                                                    {2, 4},
                                                                                    {3, 4},
                                                                                    {8, 4},
                                                                                    {32, 4},
                                                                                    {2048, 4},
                                                                                    {1, 8},
                                                                                    {1, 2},
                                                                                    {1, 1},
                                                                                    {1, 64},
                                                                                    {5, 3}}) {
             c.input("warp_sectors(stride " + std::to_string(stride) + ", elem_bytes " + std::to_string(eb) + ")");
             c.require_eq(lab9::warp_sectors(stride, eb), key(stride, eb), "sectors");
           }
           c.input("warp_sectors(-1, 4), warp_sectors(1, 0)");
           c.require_throws([] { lab9::warp_sectors(-1, 4); }, "stride < 0");
           c.require_throws([] { lab9::warp_sectors(1, 0); }, "elem_bytes 0");
         }}}});

  // ---- Task 9.5: the axpy kernel (GPU) -----------------------------------------------------
  lab.tasks.push_back(
      {5,
       "GPU: an axpy kernel",
       10,
       "axpy_kernel, axpy_gpu()",
       {axpy_gpu_case("n = 1", 1, 256),
        axpy_gpu_case("n = 256: one full block", 256, 256),
        axpy_gpu_case("n = 257: one thread in a second block", 257, 256),
        axpy_gpu_case("n = 1000003, block 96 (not a power of 2)", 1000003, 96),
        axpy_gpu_case("n = 1000003, block 1024", 1000003, 1024),
        axpy_gpu_case("n = 100000, block 32", 100000, 32),
        {"n = 0: nothing to launch, and no error",
         [](Check& c) {
           require_gpu();
#if GS_LAB9_CUDA
           c.input("axpy_gpu(n = 0, ..., block = 256)");
           DeviceBuffer d(c, 1, "a buffer");
           check_launch(c, lab9::axpy_gpu(0, 2.5f, d.get(), d.get(), d.get(), 256), 5, "axpy_gpu");
           d.read(c, "out");
#endif
         }},
        {"block 2048: the launch must fail loudly",
         [](Check& c) {
           require_gpu();
#if GS_LAB9_CUDA
           c.input("axpy_gpu(n = 4096, ..., block = 2048): more threads per block than CUDA allows (1024)");
           DeviceBuffer x(c, 4096, "x"), out(c, 4096, "out");
           const int rc = lab9::axpy_gpu(4096, 2.5f, x.get(), x.get(), out.get(), 2048);
           if (rc == lab9::kNotImplemented) check_launch(c, rc, 5, "axpy_gpu");
           gpu::clear_error();
           c.require(rc != 0,
                     "axpy_gpu returned 0 (success), but a block of 2048 threads cannot launch: return "
                     "cudaGetLastError() after the launch, so that a failed launch is not silent");
#endif
         }},
        {GS_LAB9_EMU ? "timing (emulator: n = 2^18, block 256, validation only)"
                     : "timing: n = 2^25, block 256, against the memory bandwidth (checked first)",
         [](Check& c) {
           require_gpu();
#if GS_LAB9_CUDA
#if GS_LAB9_EMU
           constexpr int n = 1 << 18;
#else
           constexpr int n = 1 << 25;
#endif
           c.input("axpy_gpu(n = " + std::to_string(n) + ", alpha = 2.5, x, y uniform in [-1, 1), out, block = 256)");
           const std::vector<float> x = uniform(n, 951), y = uniform(n, 952);
           DeviceBuffer dx(c, x, "x"), dy(c, y, "y"), dout(c, n, "out");
           check_launch(c, lab9::axpy_gpu(n, 2.5f, dx.get(), dy.get(), dout.get(), 256), 5, "axpy_gpu");
           require_valid(c, dout.read(c, "out"), key_axpy(2.5f, x, y), 2, 0, "out");
#if GS_LAB9_EMU
           c.note(
               "emulator: validation only, no timing (on a GPU this case times n = 2^25 against the DRAM peak); "
               "its points are for the correct result");
           return;
#endif
           AxpyArgs args{n, 2.5f, dx.get(), dy.get(), dout.get(), 256};
           float ms = 0.0f;
           if (const int e = gpu::time_ms(launch_axpy, &args, 3, 20, &ms)) {
             g_poisoned = true;
             c.fail("timing axpy_gpu failed: " + cuda_text(e));
           }
           const double gbs = 12.0 * n / (ms * 1e6), peak = gpu::device_info().peak_gb_per_s;
           c.note("axpy n = 2^25: " + fixed(ms, 3) + " ms, " + fixed(gbs, 0) + " GB/s (12 bytes per element)" +
                  (peak > 0 ? " = " + fixed(100.0 * gbs / peak, 0) + "% of the " + fixed(peak, 0) +
                                  " GB/s DRAM peak of the " + gpu::device_info().name
                            : std::string()));
#endif
         }}}});

  // ---- Tasks 9.6 and 9.7: the matmuls (GPU) ------------------------------------------------
  const std::vector<std::tuple<std::string, int, int, int>> sizes{
      {"1 x 1 x 1", 1, 1, 1},
      {"16 x 16 x 16: one tile", 16, 16, 16},
      {"17 x 31 x 45: nothing a multiple of the tile", 17, 31, 45},
      {"100 x 1 x 37: one column", 100, 1, 37},
      {"1 x 200 x 300: one row", 1, 200, 300},
      {"127 x 129 x 130", 127, 129, 130},
      {"256 x 256 x 256", 256, 256, 256},
      {"33 x 40 x 0: K = 0, C is zeros", 33, 40, 0}};
  Task naive{6, "GPU: a naive matmul", 15, "matmul_naive_kernel, matmul_naive_gpu()", {}};
  Task tiled{7, "GPU: a shared-memory tiled matmul", 20, "matmul_tiled_kernel, matmul_tiled_gpu()", {}};
  for (const auto& [name, M, N, K] : sizes) {
    naive.cases.push_back(matmul_gpu_case(name, 6, M, N, K));
    tiled.cases.push_back(matmul_gpu_case(name, 7, M, N, K));
  }
  tiled.cases.push_back(
      matmul_gpu_case("300 x 49 x 513: many tiles and phases, none full at the edges", 7, 300, 49, 513));
  tiled.cases.push_back(
      {"the kernel holds its two tiles in shared memory", [](Check& c) {
         require_gpu();
#if GS_LAB9_CUDA
         c.input("matmul_tiled_shared_bytes() (cudaFuncGetAttributes of matmul_tiled_kernel)");
         DeviceBuffer d(c, 1, "a 1 x 1 matrix");
         check_launch(c, lab9::matmul_tiled_gpu(d.get(), d.get(), d.get(), 1, 1, 1), 7, "matmul_tiled_gpu");
         const int bytes = lab9::matmul_tiled_shared_bytes();
#if GS_LAB9_EMU
         if (bytes == -2) {  // the emulator cannot see static __shared__ arrays
           c.note(
               "emulator: a kernel's static shared memory is not visible here; this check runs on a "
               "GPU (cudaFuncGetAttributes), the tiled results above are checked on both");
           return;
         }
#endif
         const int need = 2 * lab9::kTile * lab9::kTile * static_cast<int>(sizeof(float));
         c.require(bytes >= need, "matmul_tiled_kernel declares " + std::to_string(bytes) +
                                      " bytes of shared memory; its two kTile x kTile float tiles "
                                      "need " +
                                      std::to_string(need) + " (__shared__ float As[kTile][kTile], Bs[kTile][kTile])");
         c.note("shared memory: " + std::to_string(bytes) + " bytes per block");
#endif
       }});
  naive.cases.push_back(matmul_timing_case(6));
  tiled.cases.push_back(matmul_timing_case(7));
  lab.tasks.push_back(naive);
  lab.tasks.push_back(tiled);
  return lab;
}

}  // namespace gradsleuth::labs
