// A packing-free float32 GEMM for one thread: the CPU backend's kernel for the
// products where a tuned BLAS spends a large share of its time packing operands and
// zeroing C rather than multiplying — an MLP's weight gradient (K = the batch) and
// its forward at a small batch. blas.cpp routes a product here by the rule in
// sgemm_direct_pays() and everything else to the BLAS (or Eigen).
//
// How it works (sgemm.cpp has the details):
// - The micro-kernel keeps a tile of R rows x 2 vectors of C in registers (R = 12 with
//   AVX-512, 6 with AVX2) and, for each k, multiplies one row of B (two vector loads)
//   by R broadcast elements of A. B must therefore be row-major; A can be either layout,
//   since it is read one element at a time.
// - A column-major B is handled by computing C^T = B^T A^T instead, which needs A
//   column-major; when A is row-major too, the smaller of the two operands (or A and
//   C^T) is transposed into a scratch buffer by 8x8 register blocks.
// - On an Intel CPU, large products take a packed walk instead (SgemmWalk below): B's blocks
//   and each row tile of A copied into contiguous panels, as a BLAS does, blocked for this
//   CPU's L1 and L2.
// - Each element of C is one chain of fused multiply-adds in k order, starting from
//   beta * C (or 0): the same bits with AVX2 and AVX-512, whatever the blocking, and an
//   error bound of the textbook form |C - AB| <= K u |A||B| (u = 2^-24). bfloat16 products on
//   AVX-512 BF16's dot-product instruction (below) run the same chains, two k's per instruction.
#pragma once
#include <cstdint>

namespace gradsleuth::cpu::fast {

// True when this build has the kernel: it needs FMA and AVX2 (x86-64-v3 or later,
// e.g. -march=native on any machine since 2013). A portable build has none.
bool sgemm_direct_available();

// Whether the packing-free kernel beats a tuned BLAS at this product on one thread:
// in an AVX-512 build, products with every side >= 32 and 2^20 to 2^27 (512^3)
// multiply-adds, measured on Zen 5 against OpenBLAS 0.3.21 (bench_gemm's
// "sgemm_direct" cases); on an Intel CPU 2^20 to 2^25, measured against OpenBLAS's
// SkylakeX kernels. In an AVX2 build, never (see sgemm.cpp).
bool sgemm_direct_pays(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K);

// Turns the routing of blas_gemm to this kernel on (the default) or off, for every
// thread: the benchmarks time a training step both ways in one run, and the tests
// compare the two paths.
void set_sgemm_direct(bool on);
bool sgemm_direct_enabled();

// How the kernel walks a float32 product. InPlace: for each k-block and each column panel of
// B (2 vectors wide), every row tile of A, reading B's rows and A's rows where they are. Packed:
// for each block of B's columns (its packed k-block up to half of L2) and each k-block (a row
// tile of A up to half of L1), B's rows copied once into contiguous panels, by the first row
// tile as it multiplies them; for each row tile, its rows of A copied into a k-major tile, which
// stays in L1 while B's panels stream past it. Both give the
// same bits (the same chains in k order). Auto (the default) takes Packed on an Intel CPU in an
// AVX-512 build for products of 128 rows, 128 columns and 2^26 multiply-adds or more, InPlace
// elsewhere: the choice measured on each vendor's cores, alone and inside training steps
// (docs/benchmarks.md). A 16-bit A always takes InPlace. (The rows and columns are the walk's:
// C^T's where sgemm_direct computes C^T = B^T A^T.)
enum class SgemmWalk : uint8_t { Auto, InPlace, Packed };
// Forces a walk for every thread (Auto restores the choice): the tests check both walks' bits
// on any CPU, and the benchmarks time them side by side. GRADSLEUTH_SGEMM_WALK=auto|inplace|packed
// in the environment sets the start value.
void set_sgemm_walk(SgemmWalk w);
// The walk a float32 product of M rows, N columns and depth K takes now (never Auto).
SgemmWalk sgemm_walk_for(int64_t M, int64_t N, int64_t K);
// The L1 data and L2 sizes in bytes the packed walk blocks for (0, 0: this CPU's, the default).
// The tests set small ones, so that a small product has several column and k-blocks on any CPU.
void set_sgemm_packed_caches(int64_t l1_bytes, int64_t l2_bytes);

// C (M, N; row stride ldc) = A (M, K) @ B (K, N) + beta * C, on the calling thread.
// The layouts are blas_gemm's: a_col = false stores A(i, k) at A[i*lda + k], true at
// A[k*lda + i]; likewise B. beta = 0 never reads C (NaN there does not propagate).
// Returns false, touching nothing, when the kernel is not built in.
bool sgemm_direct(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                  int64_t ldb, float beta, float* C, int64_t ldc);

// The formats sgemm_direct_mixed reads: float32, or a 16-bit float as stored (its bits).
enum class Elem : uint8_t { Float32, BFloat16, Float16 };

// C (M, N; ldc) = A @ B (beta = 0) where A and B may each be bfloat16 or float16: the same bits
// as sgemm_direct on float32 copies of them (widening is exact), without the copies. A broadcast
// operand is widened in the micro-kernel as it is read, the other in the scratch copy that
// transposes it, or in a row-major copy. With `round` bfloat16 or float16, each value of C is
// rounded to that format as it is stored (kept in float32): the bits of C.to(round).to(float32),
// without the pass over C. Returns false, touching nothing, when the kernel is not built in or a
// side is empty.
bool sgemm_direct_mixed(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const void* A, Elem ea, int64_t lda,
                        const void* B, Elem eb, int64_t ldb, float* C, int64_t ldc, Elem round = Elem::Float32);

// bfloat16 x bfloat16 products with k contiguous in both operands (A row-major, B column-major: a
// Linear's forward) run on AVX-512 BF16's dot-product instruction where the build and the CPU have
// it: two k's per instruction, each lane's chain in k order, so the same bits as the FMA path. A
// product whose values could meet the instruction's flushing of subnormals, or that holds an
// infinity or NaN, takes the FMA path (sgemm.cpp has the rule). True when this build and CPU have
// the instruction and it computed the FMA chain's bits in a check at first use.
bool sgemm_bf16_dot_available();
// On by default; off sends every product to the FMA path (the tests and benchmarks compare them).
void set_sgemm_bf16_dot(bool on);
// How many products the dot-product path has computed in this process, on every thread (the tests
// check which path a product took).
uint64_t sgemm_bf16_dot_products();

}  // namespace gradsleuth::cpu::fast
