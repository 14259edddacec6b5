// gradsleuth --version / gradsleuth version: what this binary is and how it was built (the
// facts a bug report needs). The configure-time facts come from cli/CMakeLists.txt, the commit from
// the header cli/git_commit.cmake writes at build time.
#include <cstdio>
#include <iostream>
#include <string>

#include "cli/cli.h"
#include "core/cpu/fast/blas.h"
#include "core/json.h"
#include "distributed/process_group.h"
#if defined(GS_WITH_CUDA_BACKEND)
#include "cuda/cuda.h"
#endif

#ifndef GS_VERSION
#define GS_VERSION "unknown"
#endif
#if __has_include("gs_git_commit.h")
#include "gs_git_commit.h"  // GS_GIT_COMMIT, written at build time (cli/git_commit.cmake)
#endif
#ifndef GS_GIT_COMMIT
#define GS_GIT_COMMIT "unknown"
#endif
#ifndef GS_BUILD_TYPE
#define GS_BUILD_TYPE "unknown"
#endif
#ifndef GS_MARCH
#define GS_MARCH ""
#endif
#ifndef GS_BLAS
#define GS_BLAS ""
#endif

namespace gradsleuth::cli {

namespace {

// The -march the build used and the widest vector extension it let the compiler use.
std::string isa_level() {
  const std::string march = GS_MARCH;
#if defined(__AVX512F__)
  const char* widest = "AVX-512";
#elif defined(__AVX2__)
  const char* widest = "AVX2";
#elif defined(__AVX__)
  const char* widest = "AVX";
#elif defined(__SSE4_2__)
  const char* widest = "SSE4.2";
#elif defined(__x86_64__)
  const char* widest = "SSE2";
#elif defined(__ARM_NEON)
  const char* widest = "NEON";
#else
  const char* widest = "scalar";
#endif
  return (march.empty() ? std::string("portable (no -march)") : "-march=" + march) + ", " + widest;
}

// gpu, emulator or off: where `--device cuda` would run.
std::string cuda_mode() {
#if defined(GS_WITH_CUDA_BACKEND)
  return cuda::is_emulated() ? "emulator" : "gpu";
#else
  return cuda_left_out().empty() ? "off" : "left out";
#endif
}

}  // namespace

int cmd_version(const std::vector<std::string>& args) {
  Args a("version", args);
  a.about(
      "Prints this gradsleuth's version and how it was built: git commit (at configure time), build type,\n"
      "ISA level (-march and the widest vector extension compiled in), the CPU's own ISA, the BLAS the CPU GEMM\n"
      "uses with its version and kernels (generic ones on a CPU newer than the library), which GEMM float32\n"
      "products take, the CUDA backend's mode (gpu, emulator or off) and whether MPI is linked.\n"
      "Also: gradsleuth --version.");
  a.flag("json", "print one JSON object instead");
  if (!a.parse()) return 0;
  const bool mpi = dist::mpi_available();
  namespace fast = cpu::fast;
  const fast::CpuIsa& isa = fast::cpu_isa();
  const fast::BlasInfo& blas = fast::blas_info();
  const bool engine = fast::gemm_uses_engine();  // the first product's decision (a probe of ~1 ms when needed)
  const std::string cpu = (isa.brand.empty() ? std::string("unknown CPU") : isa.brand) + ": " + isa.str();
  const std::string gemm = engine ? "gradsleuth's own kernel for float32 (" + fast::gemm_decision().why + ")"
                                  : std::string(fast::gemm_library() == std::string("Eigen") ? "Eigen" : "the BLAS");
  if (a.has("json")) {
    std::cout << "{\"version\":" << json_str(GS_VERSION) << ",\"commit\":" << json_str(GS_GIT_COMMIT)
              << ",\"build_type\":" << json_str(GS_BUILD_TYPE) << ",\"isa\":" << json_str(isa_level())
              << ",\"cpu\":" << json_str(isa.brand) << ",\"cpu_isa\":" << json_str(isa.str())
              << ",\"blas\":" << json_str(std::string(GS_BLAS)) << ",\"blas_version\":" << json_str(blas.version)
              << ",\"blas_core\":" << json_str(blas.core) << ",\"blas_generic\":" << json_bool(blas.generic)
              << ",\"blas_below_cpu\":" << json_bool(blas.below_cpu)
              << ",\"blas_far_below\":" << json_bool(blas.far_below)
              << ",\"blas_suggested_core\":" << json_str(blas.suggested_core)
              << ",\"gemm\":" << json_str(engine ? "engine" : "blas") << ",\"cuda\":" << json_str(cuda_mode())
              << ",\"mpi\":" << json_bool(mpi) << "}\n";
    return 0;
  }
  std::printf(
      "gradsleuth %s\n  commit:     %s\n  build type: %s\n  ISA level:  %s\n  CPU:        %s\n  BLAS:       %s\n"
      "  GEMM:       %s\n  CUDA:       %s\n  MPI:        %s\n",
      GS_VERSION, GS_GIT_COMMIT, GS_BUILD_TYPE, isa_level().c_str(), cpu.c_str(), blas.str().c_str(), gemm.c_str(),
      cuda_mode().c_str(), mpi ? "yes" : "no");
  return 0;
}

}  // namespace gradsleuth::cli
