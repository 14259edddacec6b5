// The CPU backend's GEMM through a tuned BLAS (OpenBLAS, or BLIS) when the build
// found one (GRADSLEUTH_BLAS, see the top-level CMakeLists.txt); in a build without one, Eigen's
// own product (eigen_gemm, in eigen_gemm.cpp). Only the CBLAS `?gemm` entry points are used,
// declared here, so no vendor header is needed.
#pragma once
#include <cstdint>
#include <string>

namespace gradsleuth::cpu::fast {

// "OpenBLAS", "BLIS", or "Eigen" when no BLAS was built in.
const char* gemm_library();

// The vector extensions of the CPU this process runs on (cpuid, with the OS's support for the
// wider registers), whatever the build was compiled for.
struct CpuIsa {
  std::string brand;  // cpuid's brand string, e.g. "AMD EPYC"
  bool intel = false, amd = false;
  bool avx = false, avx2_fma = false, avx512f = false, amx = false;
  // Cache sizes in bytes, as the kernels block for them (0 when the system does not say): the L1
  // data cache and L2 of one core, the last level's size (shared, L3 on most CPUs). Read from
  // /sys/devices/system/cpu/cpu0/cache, else from glibc's sysconf.
  int64_t l1d = 0, l2 = 0, llc = 0;
  // 1 SSE only, 2 AVX, 3 AVX2 + FMA, 4 AVX-512F: the level a GEMM kernel can use.
  int level() const;
  std::string str() const;  // "AVX-512F, AVX2+FMA, no AMX"
};
const CpuIsa& cpu_isa();

// What the BLAS says about itself, looked up at run time (dlsym of openblas_get_config and
// openblas_get_corename, or BLIS's bli_info_get_version_str and bli_arch_string), so any BLAS
// still links. core_level is the ISA level (CpuIsa::level) of the kernels the library chose,
// 0 when unknown; `generic` when it runs its SSE-era kernels (level 1) on a CPU with AVX2 or
// AVX-512: a library older than the CPU, which did not recognise it.
struct BlasInfo {
  std::string library;  // gemm_library()
  std::string version;  // "0.3.21", "" when the library does not say
  std::string core;     // "Prescott", "Haswell", "SkylakeX", ...; "" when it does not say
  int core_level = 0;
  bool below_cpu = false;  // core_level < the CPU's level
  bool far_below = false;  // two levels or more below (AVX kernels on AVX-512), or generic
  bool generic = false;
  // The library's core type that suits this CPU, for OPENBLAS_CORETYPE ("" for another BLAS).
  std::string suggested_core;
  // "OpenBLAS 0.3.21, core Prescott (generic: this CPU is newer than the library)"
  std::string str() const;
};
const BlasInfo& blas_info();

// Where float32 products go: Auto measures at the first product (below), Blas and Engine force
// a path. GRADSLEUTH_GEMM=auto|blas|engine in the environment sets the start value.
enum class GemmRoute { Auto, Blas, Engine };
void set_gemm_route(GemmRoute r);  // Auto re-runs the decision at the next product
GemmRoute gemm_route();

// The decision for Auto, made once at the first float32 product: when the BLAS's kernels are
// far below the CPU's ISA (BlasInfo::far_below) a probe GEMM (128^3, one thread, best of a few,
// about a millisecond) times the BLAS against the engine's packing-free kernel (sgemm.h); when
// the BLAS reaches under kEngineRatio of the engine's rate, every float32 product that would go
// to the BLAS goes to the engine's kernel instead (on every thread count), and a note with the
// fix (OPENBLAS_CORETYPE=...) goes to stderr once. Kernels one level below (AVX2 ones on an
// AVX-512 CPU) keep the products without a probe: there the BLAS reaches about half the engine's
// rate at 128^3, too near the threshold for a timing to choose the same path in every run, and
// the two paths round differently (docs/benchmarks.md has the steps on both; GRADSLEUTH_GEMM=engine
// chooses the engine's kernel).
struct GemmDecision {
  bool engine = false;     // products go to the engine's kernel
  bool probed = false;     // the probe ran
  double blas_gflops = 0;  // the probe's rates, one thread
  double engine_gflops = 0;
  std::string why;  // one line: the figures and the reason
};
inline constexpr double kEngineRatio = 0.6;
const GemmDecision& gemm_decision();
// Whether float32 products go to the engine's kernel now (the route, or Auto's decision; never
// while set_sgemm_direct(false), in a build without the kernel, or in one without a BLAS).
bool gemm_uses_engine();
// Whether blas_gemm sends a float32 product of this shape to the engine's packing-free kernel
// (sgemm.h) on the calling thread: the 16-bit products use it to take the same kernel.
bool gemm_routes_direct(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K);
// How many times the note went to stderr in this process (0 or 1). The note is printed only
// when Auto chose the engine.
int gemm_notes_printed();

// While one is alive, blas_gemm calls made by this thread run the BLAS on one thread,
// whatever OpenMP's setting. The fused conv2d's per-sample products are too small to
// split: threaded, its second conv's forward + backward took 4-5x the wall time.
class BlasSingleThread {
 public:
  BlasSingleThread();
  ~BlasSingleThread();
  BlasSingleThread(const BlasSingleThread&) = delete;
  BlasSingleThread& operator=(const BlasSingleThread&) = delete;
};

// C (M, N) row-major with leading dimension ldc  =  A (M, K) @ B (K, N), where A is
// stored row-major (a_col = false: element (i, k) at A[i*lda + k]) or column-major
// (a_col = true: at A[k*lda + i]), and likewise B. Returns false, touching nothing,
// when no BLAS is built in. Runs on the library's thread count (OpenMP's setting).
// On one thread, a float32 product in the range sgemm_direct_pays() names goes to the
// packing-free kernel of sgemm.h instead of the BLAS; every float32 product does, on every
// thread count, when gemm_decision() chose the engine (a float64 one stays on the BLAS).
// With a BLAS built in, false only when a size does not fit CBLAS's int (gemm_fits_cblas).
// The general form: C = A @ B + beta * C (beta = 1 accumulates into C: the fused conv2d
// adds per-sample products into one weight gradient, and a prefilled bias into out).
bool blas_gemm(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
               int64_t ldb, float beta, float* C, int64_t ldc);
bool blas_gemm(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
               int64_t ldb, double beta, double* C, int64_t ldc);
// beta = 0: C is overwritten, never read.
inline bool blas_gemm(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                      const float* B, int64_t ldb, float* C, int64_t ldc) {
  return blas_gemm(a_col, b_col, M, N, K, A, lda, B, ldb, 0.0f, C, ldc);
}
inline bool blas_gemm(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda,
                      const double* B, int64_t ldb, double* C, int64_t ldc) {
  return blas_gemm(a_col, b_col, M, N, K, A, lda, B, ldb, 0.0, C, ldc);
}

// Whether every size and leading dimension of a product fits CBLAS's int. In a build with a
// BLAS, a product that does not is left to the reference loops (core/cpu/linalg.cpp, conv.cpp).
bool gemm_fits_cblas(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc);

#if GS_EIGEN_GEMM
// In a build without a BLAS (GS_EIGEN_GEMM, core/CMakeLists.txt): Eigen's own product, where
// blas_gemm declines. C (M, N) row-major, leading dimension ldc, = A @ B (+ C when accumulate),
// A and B as above. T is float or double (eigen_gemm.cpp).
template <class T>
void eigen_gemm(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
                int64_t ldb, bool accumulate, T* C, int64_t ldc);
#endif

}  // namespace gradsleuth::cpu::fast
