// Lab 11 starter code: three rungs of the float32 matmul ladder (README.md, Tasks 11.1-11.3).
// Replace each `throw` marked TODO with your code, rebuild and grade:   ./run.sh lab check 11
// The grader checks each function against a float64 reference at sizes that no block or
// vector width divides, then times it against the workbench's rungs on this machine.
#include "tutorials/lab11_fast/lab11.h"

#include <algorithm>

#include "core/error.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>  // __m256, _mm256_loadu_ps, _mm256_fmadd_ps, _mm256_broadcast_ss, ...
#endif

namespace gradsleuth::lab11 {

// TODO(lab 11, task 1): zero row i of C, then for each k add A(i, k) * (row k of B) to it:
//   for i: C[i, :] = 0;  for k: a = A[i * K + k];  for j: C[i * N + j] += a * B[k * N + j]
// The inner loop is now over j: unit stride in B and C, which the compiler vectorises.
void matmul_ikj(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
  throw Error("lab 11", "not implemented: lab 11 task 1 (matmul_ikj in tutorials/lab11_fast/lab11.cpp)");
}

// TODO(lab 11, task 2): zero C, then loop over blocks of B: j0 in steps of kNc, k0 in steps
// of kKc (the last block of each may be shorter: min(N, j0 + kNc), min(K, k0 + kKc)); inside,
// your ikj loop restricted to that block, for every row i of C. Pick kKc x kNc so that a block
// of B fits in the L2 cache and a row segment of C (kNc floats) in L1 (README: "Choosing the
// block sizes"). Mark the pointers `__restrict` to tell the compiler they do not overlap.
void matmul_blocked(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
  throw Error("lab 11", "not implemented: lab 11 task 2 (matmul_blocked in tutorials/lab11_fast/lab11.cpp)");
}

// TODO(lab 11, task 3): a 6 x 16 tile of C in 12 __m256 accumulators. For each k-block and
// each full tile (i, j): load the tile of C (or start from zero on the first k-block), then
// per k: b0, b1 = the 16 floats of B(k, j..j+15) (_mm256_loadu_ps), and for each of the 6
// rows r: a = _mm256_broadcast_ss(&A(i + r, k)), acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]),
// acc[r][1] = ... b1 ...; store the tile back. The last M % 6 rows and N % 16 columns do not
// fill a tile: give them your ikj loop. Keep the AVX2 code inside
// `#if defined(__AVX2__) && defined(__FMA__)` and call matmul_blocked otherwise.
void matmul_simd(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
  throw Error("lab 11", "not implemented: lab 11 task 3 (matmul_simd in tutorials/lab11_fast/lab11.cpp)");
}

}  // namespace gradsleuth::lab11
