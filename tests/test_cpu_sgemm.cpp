// Tests for core/cpu/fast/sgemm.h, the packing-free float32 GEMM. Its contract is exact:
// every element of C is one chain of fused multiply-adds in k order starting from
// beta * C (0 when beta = 0), so each case compares bits against that chain written
// here with std::fmaf, for both layouts of A and B, leading dimensions larger than
// the rows, every kind of edge (rows not a multiple of the register tile, columns not a
// multiple of the vector, K not a multiple of the k-block) and the IEEE special values.
// A float64 product checks the chain itself against the textbook bound K u sum|a b|.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu/fast/blas.h"
#include "core/cpu/fast/sgemm.h"
#include "core/fast_kernels.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace {

// These tests are about the tuned kernels: on, even in a build whose default is the
// reference loops (GRADSLEUTH_FAST_KERNELS=OFF).
const bool kTunedKernelsOn = (gradsleuth::set_cpu_fast_kernels(true), true);

namespace cpu = gradsleuth::cpu;

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
constexpr bool kBuilt = true;
#else
constexpr bool kBuilt = false;
#endif
#if defined(__AVX512F__)
constexpr bool kDispatches = true;
#else
constexpr bool kDispatches = false;
#endif

// A product's operands in the layouts blas_gemm takes, with ld = rows + pad.
struct Case {
  bool a_col, b_col;
  int64_t M, N, K, lda, ldb, ldc;
  std::vector<float> A, B, C;
  float a(int64_t i, int64_t k) const { return a_col ? A[k * lda + i] : A[i * lda + k]; }
  float b(int64_t k, int64_t j) const { return b_col ? B[j * ldb + k] : B[k * ldb + j]; }
};

Case make(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, std::mt19937& gen, int64_t pad = 3) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  Case c{a_col, b_col, M, N, K, (a_col ? M : K) + pad, (b_col ? K : N) + pad, N + pad, {}, {}, {}};
  c.A.resize(static_cast<size_t>((a_col ? K : M) * c.lda));
  c.B.resize(static_cast<size_t>((b_col ? N : K) * c.ldb));
  c.C.resize(static_cast<size_t>(M * c.ldc));
  for (float& v : c.A) v = d(gen);
  for (float& v : c.B) v = d(gen);
  for (float& v : c.C) v = d(gen);
  return c;
}

// The contract: acc = beta * C (0 when beta = 0), then acc = fma(A(i, k), B(k, j), acc)
// for k = 0 .. K-1. The padding between rows of C is left as it was.
std::vector<float> chain(const Case& c, float beta) {
  std::vector<float> out = c.C;
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      const float c0 = c.C[i * c.ldc + j];
      float acc = beta == 0.0f ? 0.0f : (beta == 1.0f ? c0 : beta * c0);
      for (int64_t k = 0; k < c.K; ++k) acc = std::fmaf(c.a(i, k), c.b(k, j), acc);
      out[i * c.ldc + j] = acc;
    }
  return out;
}

std::vector<float> run(const Case& c, float beta) {
  std::vector<float> out = c.C;
  REQUIRE(cpu::fast::sgemm_direct(c.a_col, c.b_col, c.M, c.N, c.K, c.A.data(), c.lda, c.B.data(), c.ldb, beta,
                                  out.data(), c.ldc));
  return out;
}

// Bitwise equality, NaN included; reports the first element that differs.
bool same_bits(const std::vector<float>& x, const std::vector<float>& y, int64_t ldc) {
  if (x.size() != y.size()) return false;
  for (size_t e = 0; e < x.size(); ++e)
    if (std::memcmp(&x[e], &y[e], sizeof(float)) != 0) {
      MESSAGE("first difference at row " << e / ldc << ", column " << e % ldc << ": " << x[e] << " vs " << y[e]);
      return false;
    }
  return true;
}

// One case of the contract: a product of these layouts and sizes with fresh values from gen,
// checked against the chain bit for bit (the case named in the report when it fails).
void check_chain(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, float beta, std::mt19937& gen) {
  const Case c = make(a_col, b_col, M, N, K, gen);
  CAPTURE(a_col);
  CAPTURE(b_col);
  CAPTURE(M);
  CAPTURE(N);
  CAPTURE(K);
  CAPTURE(beta);
  CHECK(same_bits(run(c, beta), chain(c, beta), c.ldc));
}

}  // namespace

TEST_CASE("sgemm_direct: built exactly when the build has AVX2 and FMA") {
  CHECK(cpu::fast::sgemm_direct_available() == kBuilt);
  if (kBuilt) return;
  // Without the kernel the call declines and leaves C alone, so blas_gemm falls back.
  std::mt19937 gen(1);
  Case c = make(false, false, 40, 40, 40, gen);
  std::vector<float> out = c.C;
  CHECK_FALSE(
      cpu::fast::sgemm_direct(false, false, 40, 40, 40, c.A.data(), c.lda, c.B.data(), c.ldb, 0.0f, out.data(), c.ldc));
  CHECK(out == c.C);
}

TEST_CASE("sgemm_direct: each element is one FMA chain in k order, for every layout, edge and beta") {
  if (!kBuilt) return;
  std::mt19937 gen(2026);
  // M: under one tile, one tile, a tile plus a short rest (merged and split), two tiles.
  // N: under one vector, one vector +- 1, two vectors +- 1, several panels with a rest.
  // K: 1, short, one k-block, just over one block (two unequal blocks), several blocks.
  const int64_t Ms[] = {1, 5, 12, 13, 16, 20, 37};
  const int64_t Ns[] = {1, 7, 15, 16, 17, 32, 33, 70};
  const int64_t Ks[] = {1, 9, 256, 257, 600};
  const float betas[] = {0.0f, 1.0f, 0.5f, -2.0f};
  int cases = 0;
  for (bool a_col : {false, true})
    for (bool b_col : {false, true})
      for (int64_t M : Ms)
        for (int64_t N : Ns)
          for (int64_t K : Ks) {
            if (M * N * K > 400000) continue;  // keeps the scalar reference quick
            check_chain(a_col, b_col, M, N, K, betas[cases % 4], gen);
            ++cases;
          }
  CHECK(cases > 400);
}

TEST_CASE("sgemm_direct: both walks (in place, packed) give the chain's bits, on any CPU") {
  if (!kBuilt) return;
  struct Restore {
    ~Restore() { cpu::fast::set_sgemm_walk(cpu::fast::SgemmWalk::Auto); }
  } restore;
  // Auto names a concrete walk, and the in-place one on every CPU below 128 rows or columns or
  // 2^26 multiply-adds (the products of the MLP's training steps), whatever the sizes' product.
  cpu::fast::set_sgemm_walk(cpu::fast::SgemmWalk::Auto);
  CHECK(cpu::fast::sgemm_walk_for(512, 512, 512) != cpu::fast::SgemmWalk::Auto);
  CHECK(cpu::fast::sgemm_walk_for(64, 4096, 4096) == cpu::fast::SgemmWalk::InPlace);
  CHECK(cpu::fast::sgemm_walk_for(4096, 64, 4096) == cpu::fast::SgemmWalk::InPlace);
  CHECK(cpu::fast::sgemm_walk_for(256, 784, 256) == cpu::fast::SgemmWalk::InPlace);
  CHECK(cpu::fast::sgemm_walk_for(int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 40) !=
        cpu::fast::SgemmWalk::Auto);  // no overflow
  std::mt19937 gen(77);
  // M: a short rest merged and split (13, 20), whole tiles and a rest over 128 rows (130);
  // N: a partial panel (7, 33, 70); K: one k-block, two unequal ones (257).
  const int64_t Ms[] = {5, 13, 20, 130};
  const int64_t Ns[] = {7, 33, 70};
  const int64_t Ks[] = {9, 257};
  const float betas[] = {0.0f, 1.0f, 0.5f};
  int cases = 0;
  for (const auto walk : {cpu::fast::SgemmWalk::InPlace, cpu::fast::SgemmWalk::Packed}) {
    cpu::fast::set_sgemm_walk(walk);
    CHECK(cpu::fast::sgemm_walk_for(512, 512, 512) == walk);
    for (bool a_col : {false, true})
      for (bool b_col : {false, true})
        for (int64_t M : Ms)
          for (int64_t N : Ns)
            for (int64_t K : Ks) {
              CAPTURE(static_cast<int>(walk));
              check_chain(a_col, b_col, M, N, K, betas[cases % 3], gen);
              ++cases;
            }
  }
  CHECK(cases == 2 * 4 * 4 * 3 * 2);
}

TEST_CASE("sgemm_direct: the packed walk over several column blocks and k-blocks gives the chain's bits") {
  if (!kBuilt) return;
  struct Restore {
    ~Restore() {
      cpu::fast::set_sgemm_walk(cpu::fast::SgemmWalk::Auto);
      cpu::fast::set_sgemm_packed_caches(0, 0);
    }
  } restore;
  cpu::fast::set_sgemm_walk(cpu::fast::SgemmWalk::Packed);
  // A 4 KB L1 and a 64 KB L2: k-blocks of at most 128 (K = 257: 3 of 86), column blocks of 2
  // panels (64 columns with AVX-512, 32 with AVX2), so N = 70 and 160 have whole and partial
  // blocks, and the first row tile packs B in each of them.
  cpu::fast::set_sgemm_packed_caches(4096, 65536);
  std::mt19937 gen(78);
  const int64_t Ms[] = {5, 13, 130};
  const int64_t Ns[] = {33, 70, 160};
  const int64_t Ks[] = {9, 257, 300};
  const float betas[] = {0.0f, 1.0f, 0.5f};
  int cases = 0;
  for (bool a_col : {false, true})
    for (bool b_col : {false, true})
      for (int64_t M : Ms)
        for (int64_t N : Ns)
          for (int64_t K : Ks) {
            check_chain(a_col, b_col, M, N, K, betas[cases % 3], gen);
            ++cases;
          }
  CHECK(cases == 4 * 3 * 3 * 3);
}

TEST_CASE("sgemm_direct: a transposed operand over the kept scratch (1 MB) uses a buffer of its own") {
  if (!kBuilt) return;
  std::mt19937 gen(9);
  // B column-major and A row-major, 520 x 520 x 520: B is copied row-major, 270,400
  // floats, more than a thread keeps; twice, so a freed buffer would show.
  const Case c = make(false, true, 520, 520, 520, gen, 0);
  for (int rep = 0; rep < 2; ++rep) CHECK(same_bits(run(c, 1.0f), chain(c, 1.0f), c.ldc));
}

TEST_CASE("sgemm_direct: the chain is within K u sum|a b| of the float64 product") {
  if (!kBuilt) return;
  std::mt19937 gen(7);
  for (bool a_col : {false, true})
    for (bool b_col : {false, true}) {
      const Case c = make(a_col, b_col, 64, 96, 784, gen);
      const std::vector<float> out = run(c, 0.0f);
      double worst = 0.0;
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) {
          double exact = 0.0, mag = 0.0;
          for (int64_t k = 0; k < c.K; ++k) {
            exact += static_cast<double>(c.a(i, k)) * c.b(k, j);
            mag += std::fabs(static_cast<double>(c.a(i, k)) * c.b(k, j));
          }
          worst = std::max(worst, std::fabs(out[i * c.ldc + j] - exact) / (c.K * std::ldexp(1.0, -24) * mag));
        }
      CAPTURE(a_col);
      CAPTURE(b_col);
      CHECK(worst <= 1.0);
      CHECK(worst > 0.0);  // float32 rounding happened: the comparison is not vacuous
    }
}

TEST_CASE("sgemm_direct: beta = 0 never reads C, and Inf/NaN land where the chain puts them") {
  if (!kBuilt) return;
  std::mt19937 gen(3);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (bool a_col : {false, true})
    for (bool b_col : {false, true}) {
      Case c = make(a_col, b_col, 20, 40, 300, gen);
      for (float& v : c.C) v = nan;  // garbage in C: beta = 0 must not propagate it
      std::vector<float> out = run(c, 0.0f);
      bool finite = true;
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) finite = finite && std::isfinite(out[i * c.ldc + j]);
      CHECK(finite);
      // Specials in A and B: Inf * 0 = NaN, Inf - Inf = NaN, a lone Inf stays Inf.
      c.A[5] = inf;
      c.A[77] = -inf;
      c.A[130] = nan;
      c.B[11] = inf;
      c.B[200] = 0.0f;
      c.B[201] = -0.0f;
      for (float& v : c.C) v = 1.0f;
      CAPTURE(a_col);
      CAPTURE(b_col);
      CHECK(same_bits(run(c, 1.0f), chain(c, 1.0f), c.ldc));
      CHECK(same_bits(run(c, 0.0f), chain(c, 0.0f), c.ldc));
    }
}

TEST_CASE("blas_gemm routes a one-thread float32 product to the kernel by the measured rule") {
  // The rule (sgemm.h): AVX-512 builds only, every side >= 32, 2^20 to 2^27 multiply-adds (2^25 on Intel).
  CHECK(cpu::fast::sgemm_direct_pays(false, true, 64, 256, 784) == kDispatches);  // an MLP's forward
  CHECK(cpu::fast::sgemm_direct_pays(true, false, 256, 784, 64) == kDispatches);  // its weight gradient
  CHECK_FALSE(cpu::fast::sgemm_direct_pays(false, true, 64, 10, 256));            // a 10-class layer
  CHECK_FALSE(cpu::fast::sgemm_direct_pays(false, false, 64, 64, 64));            // under 2^20
  CHECK_FALSE(cpu::fast::sgemm_direct_pays(false, false, 1024, 1024, 1024));      // over 512^3
  // 2^25.6: an MLP's forward at batch 256 goes to OpenBLAS's SkylakeX kernels on an Intel CPU.
  CHECK(cpu::fast::sgemm_direct_pays(false, true, 256, 256, 784) == (kDispatches && !cpu::fast::cpu_isa().intel));
  CHECK(cpu::fast::sgemm_direct_pays(true, false, 128, 3136, 64) == kDispatches);  // 2^24.6: the CNN's fc1
  CHECK_FALSE(cpu::fast::sgemm_direct_pays(false, false, int64_t{1} << 40, 64, int64_t{1} << 40));  // no overflow
  if (std::strcmp(cpu::fast::gemm_library(), "Eigen") == 0) return;  // no BLAS: blas_gemm declines

  // Through blas_gemm: with the kernel on, a dispatched product has the chain's bits;
  // with it off, the BLAS's result, which agrees to the float32 bound.
  std::mt19937 gen(11);
  const Case c = make(false, true, 64, 256, 784, gen, 0);
  std::vector<float> on = c.C, off = c.C;
  REQUIRE(cpu::fast::blas_gemm(false, true, c.M, c.N, c.K, c.A.data(), c.lda, c.B.data(), c.ldb, on.data(), c.ldc));
  cpu::fast::set_sgemm_direct(false);
  CHECK_FALSE(cpu::fast::sgemm_direct_enabled());
  REQUIRE(cpu::fast::blas_gemm(false, true, c.M, c.N, c.K, c.A.data(), c.lda, c.B.data(), c.ldb, off.data(), c.ldc));
  cpu::fast::set_sgemm_direct(true);
  if (kDispatches)
    CHECK(same_bits(on, chain(c, 0.0f), c.ldc));
  else
    CHECK(same_bits(on, off, c.ldc));
  double worst = 0.0;
  for (size_t e = 0; e < on.size(); ++e) worst = std::max(worst, static_cast<double>(std::fabs(on[e] - off[e])));
  CHECK(worst < 2 * 784 * std::ldexp(1.0, -24) * 784);  // |a|, |b| < 1: sum|a b| < K
}

TEST_CASE("gs::matmul gives the same values with the kernel on and off") {
  gs::manual_seed(5);
  const gs::Tensor x = gs::randn({64, 784}), w = gs::randn({256, 784});
  const gs::Tensor on = gs::matmul(x, w.t());
  cpu::fast::set_sgemm_direct(false);
  const gs::Tensor off = gs::matmul(x, w.t());
  cpu::fast::set_sgemm_direct(true);
  const gs::Tensor exact = gs::matmul(x.to(gs::kFloat64), w.to(gs::kFloat64).t());
  const double scale = gs::matmul(x.abs().to(gs::kFloat64), w.abs().to(gs::kFloat64).t()).max().item<double>();
  const double bound = 784 * std::ldexp(1.0, -24) * scale;
  CHECK((on.to(gs::kFloat64) - exact).abs().max().item<double>() <= bound);
  CHECK((off.to(gs::kFloat64) - exact).abs().max().item<double>() <= bound);
}
