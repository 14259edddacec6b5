// The choice between the BLAS and the engine's own kernel (core/cpu/fast/blas.h): the BLAS and the
// CPU describe themselves; with a BLAS on generic kernels (OPENBLAS_CORETYPE=Prescott on an AVX2 or
// AVX-512 CPU) the first product routes every float32 product to the engine's kernel and says so once
// on stderr with the fix; otherwise the BLAS keeps them. CTest runs this program three times
// (tests/CMakeLists.txt) and GS_EXPECT_GEMM says which case it is in:
//   library    the BLAS's own choice of kernels: the engine only where the library runs generic ones;
//   generic    OPENBLAS_CORETYPE=Prescott: the engine (where the build has its kernel);
//   forced     OPENBLAS_CORETYPE=Prescott GRADSLEUTH_GEMM=blas: the BLAS, and no note.
// On the engine's route every element is one FMA chain in k order, whatever the thread count, so
// results are compared bit for bit against that chain.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/cpu/fast/blas.h"
#include "core/cpu/fast/sgemm.h"
#include "core/fast_kernels.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/tensor.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

namespace fast = gradsleuth::cpu::fast;
const bool kTunedKernelsOn = (gradsleuth::set_cpu_fast_kernels(true), true);

std::string expectation() {
  const char* e = std::getenv("GS_EXPECT_GEMM");
  return e ? e : "library";
}
bool openblas() { return std::strcmp(fast::gemm_library(), "OpenBLAS") == 0; }
// Whether this build can route products to the engine: it has the kernel, and a BLAS to route from.
bool engine_possible() { return fast::sgemm_direct_available() && std::strcmp(fast::gemm_library(), "Eigen") != 0; }

// Whether the measured decision (GemmRoute::Auto) should route the products to the engine.
bool auto_expected() {
  const std::string e = expectation();
  if (!engine_possible()) return false;
  if (e == "generic" || e == "forced") return openblas() && fast::cpu_isa().level() >= 3;
  return fast::blas_info().generic;  // "library": only a library that does not know this CPU
}
// Whether the products go to the engine at the start (GRADSLEUTH_GEMM=blas forces the BLAS).
bool engine_expected() { return expectation() != "forced" && auto_expected(); }

// C = A B + beta C with the layouts of blas_gemm, as one std::fmaf chain per element in k order.
std::vector<float> fma_chain(bool a_col, bool b_col, int M, int N, int K, const std::vector<float>& A, int lda,
                             const std::vector<float>& B, int ldb, float beta, std::vector<float> C, int ldc) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float acc = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
      for (int k = 0; k < K; ++k)
        acc = std::fmaf(a_col ? A[k * lda + i] : A[i * lda + k], b_col ? B[j * ldb + k] : B[k * ldb + j], acc);
      C[i * ldc + j] = acc;
    }
  return C;
}

// Runs f with stderr going to a file; returns what was written there.
template <class F>
std::string capture_stderr(F f) {
  char path[] = "/tmp/gs_blas_route_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  f();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(path);
  return ss.str();
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

// First in the file: the decision is made at the process's first product.
TEST_CASE("the first product decides the route, and a note with the fix goes to stderr once") {
  REQUIRE(kTunedKernelsOn);
  const std::string err = capture_stderr([] {
    std::vector<float> a(96 * 80, 0.5f), b(80 * 64, 0.25f), c(96 * 64, 0.0f);
    for (int r = 0; r < 3; ++r) fast::blas_gemm(false, false, 96, 64, 80, a.data(), 80, b.data(), 64, c.data(), 64);
    gradsleuth::Tensor x = gradsleuth::randn({8, 3, 12, 12}), w = gradsleuth::randn({4, 3, 3, 3});
    (void)gradsleuth::conv2d(x, w);
  });
  INFO("case: ", expectation(), "; stderr: ", err);
  CHECK(fast::gemm_uses_engine() == engine_expected());
  const fast::GemmDecision& d = fast::gemm_decision();  // in the forced case, computed only now
  INFO("decision: ", d.why);
  CHECK(d.engine == auto_expected());
  if (engine_expected()) {
    CHECK(d.probed);
    CHECK(d.blas_gflops < fast::kEngineRatio * d.engine_gflops);
  }
  // The note: where the engine took over, and where the library runs generic kernels and a
  // portable build has no kernel to take over (then the fix alone).
  if (expectation() != "forced" && (engine_expected() || fast::blas_info().generic)) {
    CHECK(fast::gemm_notes_printed() == 1);
    CHECK(count_of(err, "gradsleuth: OpenBLAS") == 1);
    CHECK(count_of(err, "OPENBLAS_CORETYPE=" + fast::blas_info().suggested_core) == 1);
    if (fast::cpu_isa().avx512f) CHECK(fast::blas_info().suggested_core == "SkylakeX");
  } else {
    CHECK(fast::gemm_notes_printed() == 0);
    CHECK(count_of(err, "gradsleuth: OpenBLAS") == 0);
  }
}

TEST_CASE("the BLAS names its version and kernels beside the CPU's ISA") {
  const fast::BlasInfo& b = fast::blas_info();
  const fast::CpuIsa& cpu = fast::cpu_isa();
  INFO(b.str(), " on ", cpu.brand, " (", cpu.str(), ")");
  CHECK(b.library == fast::gemm_library());
#if defined(__AVX512F__)
  CHECK(cpu.avx512f);  // the build's -march ran here, so the CPU has what it was compiled for
#endif
#if defined(__AVX2__) && defined(__FMA__)
  CHECK(cpu.avx2_fma);
#endif
  CHECK(cpu.level() >= 1);
  if (!openblas()) return;
  CHECK_FALSE(b.version.empty());
  CHECK_FALSE(b.core.empty());
  CHECK(b.core_level > 0);
  if (expectation() != "library") {  // OPENBLAS_CORETYPE=Prescott
    CHECK(b.core == "Prescott");
    CHECK(b.core_level == 1);
    CHECK(b.generic == (cpu.level() >= 3));
    if (b.generic)
      CHECK(b.str() == "OpenBLAS " + b.version + ", core Prescott (generic: this CPU is newer than the library)");
  }
}

TEST_CASE("on the engine's route: every shape, layout, beta and thread count, bit for bit the FMA chain") {
  if (!fast::gemm_uses_engine()) {
    // The BLAS keeps the products here; the same cases run with the engine forced below.
    fast::set_gemm_route(fast::GemmRoute::Engine);
  }
  REQUIRE(fast::gemm_uses_engine() == engine_possible());
  if (!engine_possible()) return;  // a portable build, or one without a BLAS: nothing to route
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int shapes[][3] = {{1, 1, 1},      {3, 5, 7},       {13, 17, 29},    {64, 10, 256}, {37, 300, 5},
                           {200, 33, 129}, {128, 128, 128}, {257, 129, 300}, {1, 1000, 64}, {500, 2, 40}};
  for (const auto& s : shapes)
    for (int layout = 0; layout < 4; ++layout)
      for (float beta : {0.0f, 1.0f})
        for (int threads : {1, 2, 3}) {
          const int M = s[0], N = s[1], K = s[2];
          const bool a_col = layout & 1, b_col = layout & 2;
          const int lda = (a_col ? M : K) + 2, ldb = (b_col ? K : N) + 1, ldc = N + 3;
          std::vector<float> A(static_cast<size_t>((a_col ? K : M) * lda)),
              B(static_cast<size_t>((b_col ? N : K) * ldb)), C(static_cast<size_t>(M * ldc));
          for (float& v : A) v = u(gen);
          for (float& v : B) v = u(gen);
          for (float& v : C) v = u(gen);
          const std::vector<float> want = fma_chain(a_col, b_col, M, N, K, A, lda, B, ldb, beta, C, ldc);
#ifdef _OPENMP
          omp_set_num_threads(threads);
#endif
          CAPTURE(M);
          CAPTURE(N);
          CAPTURE(K);
          CAPTURE(a_col);
          CAPTURE(b_col);
          CAPTURE(beta);
          CAPTURE(threads);
          REQUIRE(fast::blas_gemm(a_col, b_col, M, N, K, A.data(), lda, B.data(), ldb, beta, C.data(), ldc));
          int bad = 0;
          for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j) bad += std::memcmp(&C[i * ldc + j], &want[i * ldc + j], sizeof(float)) != 0;
          CHECK(bad == 0);
        }
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
  // The engine's kernel is float32 only: float64 products stay on the BLAS on the engine's route.
  std::vector<double> a(16, 1.0), b(16, 1.0), c(16, 0.0);
  const bool took = fast::blas_gemm(false, false, 4, 4, 4, a.data(), 4, b.data(), 4, c.data(), 4);
  CHECK(took == (std::string(fast::gemm_library()) != "Eigen"));
  if (took)
    for (double v : c) CHECK(v == 4.0);
}

TEST_CASE("gemm_fits_cblas: every size and leading dimension within CBLAS's int") {
  const int64_t top = std::numeric_limits<int>::max();
  CHECK(fast::gemm_fits_cblas(64, 256, 784, 784, 784, 256));
  CHECK(fast::gemm_fits_cblas(top, top, top, top, top, top));
  CHECK(fast::gemm_fits_cblas(0, 0, 0, 0, 0, 0));
  for (int which = 0; which < 6; ++which) {
    CAPTURE(which);
    int64_t v[6] = {3, 4, 5, 5, 4, 4};
    v[which] = top + 1;
    CHECK_FALSE(fast::gemm_fits_cblas(v[0], v[1], v[2], v[3], v[4], v[5]));
    v[which] = -1;
    CHECK_FALSE(fast::gemm_fits_cblas(v[0], v[1], v[2], v[3], v[4], v[5]));
  }
}

TEST_CASE("conv2d and linear on the route agree with the reference loops") {
  fast::set_gemm_route(fast::GemmRoute::Engine);
  for (int threads : {1, 2}) {
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    CAPTURE(threads);
    gradsleuth::manual_seed(3);
    gradsleuth::Tensor x = gradsleuth::randn({4, 3, 16, 16}), w = gradsleuth::randn({8, 3, 3, 3}),
                       bias = gradsleuth::randn({8});
    gradsleuth::Tensor xl = gradsleuth::randn({64, 300}), wl = gradsleuth::randn({40, 300}),
                       bl = gradsleuth::randn({40});
    gradsleuth::set_cpu_fast_kernels(true);
    const std::vector<float> conv_fast = gradsleuth::conv2d(x, w, bias, {1, 1}, {1, 1}).to_vector<float>();
    const std::vector<float> lin_fast = gradsleuth::linear(xl, wl, bl).to_vector<float>();
    gradsleuth::set_cpu_fast_kernels(false);
    const std::vector<float> conv_ref = gradsleuth::conv2d(x, w, bias, {1, 1}, {1, 1}).to_vector<float>();
    const std::vector<float> lin_ref = gradsleuth::linear(xl, wl, bl).to_vector<float>();
    gradsleuth::set_cpu_fast_kernels(true);
    REQUIRE(conv_fast.size() == conv_ref.size());
    REQUIRE(lin_fast.size() == lin_ref.size());
    double worst = 0;
    for (size_t i = 0; i < conv_fast.size(); ++i)
      worst = std::max(worst, std::fabs(double(conv_fast[i]) - conv_ref[i]));
    for (size_t i = 0; i < lin_fast.size(); ++i) worst = std::max(worst, std::fabs(double(lin_fast[i]) - lin_ref[i]));
    CHECK(worst < 1e-3);  // sums of 27 and 300 products of N(0, 1) values: float32's rounding only
  }
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
}

TEST_CASE("set_gemm_route forces either path, and Auto decides again") {
  fast::set_gemm_route(fast::GemmRoute::Blas);
  CHECK_FALSE(fast::gemm_uses_engine());
  fast::set_gemm_route(fast::GemmRoute::Engine);
  CHECK(fast::gemm_uses_engine() == engine_possible());
  fast::set_gemm_route(fast::GemmRoute::Auto);
  CHECK(fast::gemm_uses_engine() == auto_expected());
  // Turning the packing-free kernel off (the benchmarks' raw-BLAS cases) turns the route off too.
  fast::set_gemm_route(fast::GemmRoute::Engine);
  fast::set_sgemm_direct(false);
  CHECK_FALSE(fast::gemm_uses_engine());
  fast::set_sgemm_direct(true);
  fast::set_gemm_route(fast::GemmRoute::Auto);
  CHECK(fast::gemm_notes_printed() <= 1);
}
