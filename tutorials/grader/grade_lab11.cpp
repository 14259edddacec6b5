// The grader of lab 11 (make it fast). Correctness first: each rung against the workbench's
// float64 reference with its a priori error bound per element (workbench/workbench.h:
// matmul_problem, validate_result), at sizes drawn from the input seed that no block or vector
// width divides (primes), with C's neighbours watched for stray writes. Then speed, as a ratio
// to a reference rung of the CPU workbench (workbench/matmul.cpp: v1 naive ijk, v2 loop order
// ikj) timed in the same run on this machine, interleaved with the student's runs (the medians
// of both): a ratio, never an absolute time, so the grade does not depend on the machine. Each
// timing case also prints the rung's point on this core's roofline (GFLOP/s, arithmetic
// intensity, % of the FMA peak that workbench/limits.cpp measures).
//
// Dimension letters: M = rows of A and C, K = the summed dim, N = columns of B and C.
#include "tutorials/grader/grader.h"
#include "tutorials/grader/labs.h"
#include "tutorials/lab11_fast/lab11.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <random>
#include <vector>

#include "workbench/cpu_ladder.h"

#if defined(__AVX2__) && defined(__FMA__)
#define GS_LAB11_SIMD 1
#else
#define GS_LAB11_SIMD 0
#endif

namespace gradsleuth::labs {

namespace {

namespace wb = gradsleuth::workbench;
namespace wbc = gradsleuth::workbench::cpu;
using MatmulFn = void (*)(const float*, const float*, float*, int64_t, int64_t, int64_t);

// One rung the student writes: its task, its function and name.
struct Rung {
  int task;
  MatmulFn fn;
  const char* name;
};

std::string dims3(int64_t M, int64_t N, int64_t K) {
  return "M = " + std::to_string(M) + ", N = " + std::to_string(N) + ", K = " + std::to_string(K);
}

// n floats uniform in [-1, 1), the same on every machine for a given input seed.
std::vector<float> uniform(int64_t n, std::mt19937_64& gen) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = -1.0f + 2.0f * static_cast<float>(gen() >> 40) * (1.0f / 16777216.0f);
  return v;
}

// A prime in [lo, hi]: no tile, block or vector width (2, 4, 6, 8, 16, 64, 128, 256, ...) divides it.
int64_t draw_prime(std::mt19937_64& gen, int64_t lo, int64_t hi) {
  std::vector<int64_t> primes;
  for (int64_t p = std::max<int64_t>(lo, 2); p <= hi; ++p) {
    bool prime = true;
    for (int64_t d = 2; d * d <= p && prime; ++d) prime = p % d != 0;
    if (prime) primes.push_back(p);
  }
  return primes[static_cast<size_t>(gen() % primes.size())];
}

// C lives between two guard bands, all of it filled with a signalling NaN before the call: an
// element the function never wrote (or accumulated into without zeroing) reads NaN, and a write
// outside C's M * N elements changes a guard.
constexpr int64_t kGuard = 64;
constexpr uint32_t kFillBits = 0x7fa5a5a5u;
float fill_value() {
  float f;
  std::memcpy(&f, &kFillBits, sizeof f);
  return f;
}
bool is_fill(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b == kFillBits;
}

// Runs rung r on problem p (shape s), then checks the guard bands and every element of C
// against its a priori bound.
void run_and_check(Check& c, const Rung& r, const wb::Problem& p, const wb::Shape& s) {
  const int64_t n = s.m * s.n;
  std::vector<float> buf(static_cast<size_t>(n + 2 * kGuard), fill_value());
  float* C = buf.data() + kGuard;
  r.fn(p.inputs[0].data(), p.inputs[1].data(), C, s.m, s.n, s.k);
  for (int64_t g = 0; g < kGuard; ++g) {
    if (!is_fill(buf[static_cast<size_t>(g)]))
      c.fail(std::string(r.name) + " wrote before C's first element (C[" + std::to_string(g - kGuard) +
             "]): check the start of your row and column loops");
    if (!is_fill(buf[static_cast<size_t>(kGuard + n + g)]))
      c.fail(std::string(r.name) + " wrote past C's last element (C[" + std::to_string(n + g) +
             "], C has M * N = " + std::to_string(n) +
             " elements): a tile or vector store that runs over the edge; the last rows and "
             "columns need their own, narrower path");
  }
  const wb::Validation v = wb::validate_result(C, p.want.data(), n, 0.0, 0.0, p.atol_each.data());
  if (v.ok) return;
  const int64_t i = v.first_bad / std::max<int64_t>(s.n, 1), j = v.first_bad % std::max<int64_t>(s.n, 1);
  std::string msg = "C: " + std::to_string(v.mismatches) + " of " + std::to_string(n) +
                    " elements outside their error bound; the first at (" + std::to_string(i) + ", " +
                    std::to_string(j) + "): expected " + g9(v.first_want) + ", got " + g9(v.first_got) + " (bound " +
                    g9(p.atol_each[static_cast<size_t>(v.first_bad)]) +
                    ": gamma_K sum_k |A(i, k) B(k, j)| + u |C(i, j)|, the a priori bound of a K-term float dot product "
                    "in any order)";
  if (std::isnan(v.first_got))
    msg +=
        ". C held NaN before the call: an element you never wrote, or one you added to (+=) without "
        "setting C to 0 first, reads NaN";
  c.fail(msg);
}

// A correctness case: the product at the sizes `sizes` draws from the case's input seed stream.
Case product_case(const Rung& r, const std::string& name, uint64_t stream,
                  std::function<wb::Shape(std::mt19937_64&)> sizes) {
  return {name, [=](Check& c) {
            std::mt19937_64 gen(input_seed(stream));
            const wb::Shape s = sizes(gen);
            c.input(std::string(r.name) + "(A, B, C, " + dims3(s.m, s.n, s.k) +
                    "), A and B uniform in [-1, 1), C filled with NaN before the call");
            std::vector<float> A = uniform(s.m * s.k, gen), B = uniform(s.k * s.n, gen);
            run_and_check(c, r, wb::matmul_problem(std::move(A), std::move(B), s), s);
          }};
}

std::vector<Case> product_cases(const Rung& r) {
  const uint64_t base = 1100 + 10 * static_cast<uint64_t>(r.task);
  auto fixed_shape = [](int64_t m, int64_t n, int64_t k) {
    return [=](std::mt19937_64&) { return wb::Shape{m, n, k}; };
  };
  return {
      product_case(r, "1 x 1 x 1", base + 0, fixed_shape(1, 1, 1)),
      product_case(r, "K = 0: C is all zeros", base + 1, fixed_shape(5, 7, 0)),
      product_case(r, "one row of C (M = 1), N and K drawn", base + 2,
                   [](std::mt19937_64& g) {
                     return wb::Shape{1, draw_prime(g, 37, 131), draw_prime(g, 37, 131)};
                   }),
      product_case(r, "one column of C (N = 1), M and K drawn", base + 3,
                   [](std::mt19937_64& g) {
                     return wb::Shape{draw_prime(g, 37, 131), 1, draw_prime(g, 37, 131)};
                   }),
      product_case(r, "smaller than one tile: every size a prime under 16", base + 4,
                   [](std::mt19937_64& g) {
                     return wb::Shape{draw_prime(g, 2, 13), draw_prime(g, 2, 13), draw_prime(g, 2, 13)};
                   }),
      product_case(r, "sizes drawn among the primes 37-131: no block or vector width divides them", base + 5,
                   [](std::mt19937_64& g) {
                     return wb::Shape{draw_prime(g, 37, 131), draw_prime(g, 37, 131), draw_prime(g, 37, 131)};
                   }),
      product_case(r, "K past a k-block: K a prime in 257-401", base + 6,
                   [](std::mt19937_64& g) {
                     return wb::Shape{draw_prime(g, 17, 67), draw_prime(g, 17, 67), draw_prime(g, 257, 401)};
                   }),
      product_case(r, "N past a column block: N a prime in 257-521", base + 7,
                   [](std::mt19937_64& g) {
                     return wb::Shape{draw_prime(g, 7, 31), draw_prime(g, 257, 521), draw_prime(g, 31, 67)};
                   }),
  };
}

// ---- speed ----------------------------------------------------------------------------------
double seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// This core's FMA peak (GFLOP/s), measured once per grading run by the workbench.
double fma_peak() {
  static const double peak = wbc::measure_fma_peak(1, 30);
  return peak;
}

// The timed problem: 255 x 257 x 253. Odd row lengths, so the rows of A, B and C start at every
// alignment in turn: a kernel's speed does not hang on whether its buffers happen to start on a
// cache line (at 256 x 256 x 256 the compiler's ikj loop runs 1.8x faster on 64-byte-aligned
// rows than on the 16-byte-aligned ones malloc returns, and the ratios with it). B (257 KB)
// stays in L2 on current CPUs, so the ratios measure the cores, not a shared L3 or memory.
constexpr int64_t kTimedM = 255, kTimedN = 257, kTimedK = 253;
constexpr int kAttempts = 3;  // a ratio below the threshold is measured again, up to this often

// n floats on a 64-byte boundary (a cache line), whatever the allocator's state: the timed
// buffers start the same way in every run.
struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float[], FreeDeleter>;
Buffer aligned_floats(int64_t n, const float* from = nullptr) {
  const size_t bytes = (static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float) + 63) / 64 * 64;
  Buffer b(static_cast<float*>(std::aligned_alloc(64, bytes)));
  if (!b) throw std::bad_alloc();
  if (from) std::copy(from, from + n, b.get());
  return b;
}

// Checks rung r at kTimedM x kTimedN x kTimedK, then times it against the workbench's rung `ref_version`, interleaved
// (reference, student, reference, ...), until at least 7 pairs and 0.25 s; the ratio of the
// medians must reach `min_ratio`. A machine busy with other work slows both alike; a ratio
// below the threshold is measured again (up to kAttempts times) and the best one counts.
Case speed_case(const Rung& r, int ref_version, double min_ratio, const std::string& why_slow) {
  const wbc::Ladder* ladder = wbc::find_ladder("matmul");
  const std::string ref_name =
      ladder && ref_version <= static_cast<int>(ladder->rungs.size())
          ? "v" + std::to_string(ref_version) + " (" + ladder->rungs[static_cast<size_t>(ref_version - 1)].v.name + ")"
          : "v" + std::to_string(ref_version);
  const std::string name = "speed at 255 x 257 x 253: at least " + fixed(min_ratio, min_ratio < 1 ? 1 : 0) +
                           "x the workbench's " + ref_name + ", timed in the same run";
  return {
      name,
      [=](Check& c) {
        c.require(ladder != nullptr, "the CPU workbench has no matmul ladder (workbench/matmul.cpp)");
        const wbc::Rung& ref = ladder->rungs[static_cast<size_t>(ref_version - 1)];
        const wb::Shape s{kTimedM, kTimedN, kTimedK};
        c.input(std::string(r.name) + "(A, B, C, " + dims3(s.m, s.n, s.k) +
                "), the workbench's inputs (uniform in [-1, 1)); the reference: workbench/matmul.cpp " + ref_name);
        const wb::Problem p = wbc::make_problem(*ladder, s);
        run_and_check(c, r, p, s);  // correct before it is timed
#if !GS_LAB11_SIMD
        if (r.task == 3) {
          c.note(std::string("this build has no AVX2 + FMA (") + wbc::isa_level() +
                 "; -march=native on an AVX2 machine, or scripts/build.sh --arch x86-64-v3, has them): "
                 "Task 11.3 is graded for correctness only, its speed is not measured");
          return;
        }
#endif
        const Buffer a = aligned_floats(s.m * s.k, p.inputs[0].data()),
                     b = aligned_floats(s.k * s.n, p.inputs[1].data());
        const Buffer out = aligned_floats(s.m * s.n), out_ref = aligned_floats(s.m * s.n);
        const float* A = a.get();
        const float* B = b.get();
        const float* in[2] = {A, B};
        auto time_mine = [&] {
          const double t0 = seconds();
          r.fn(A, B, out.get(), s.m, s.n, s.k);
          return seconds() - t0;
        };
        auto time_ref = [&] {
          const double t0 = seconds();
          ref.fn(in, out_ref.get(), s, 1);
          return seconds() - t0;
        };
        double ratio = 0.0, ms = 0.0, ms_ref = 0.0;
        int pairs = 0, attempt = 0;
        while (attempt < kAttempts) {
          ++attempt;
          time_ref(), time_mine();  // warm-up: caches, page faults
          std::vector<double> mine, refs;
          const double start = seconds();
          for (;;) {
            refs.push_back(time_ref());
            mine.push_back(time_mine());
            const double spent = seconds() - start;
            if ((mine.size() >= 7 && spent >= 0.25) || (mine.size() >= 3 && spent >= 3.0) || mine.size() >= 400) break;
          }
          const double m = median(mine), mr = median(refs);
          if (m > 0 && mr / m > ratio)
            ratio = mr / m, ms = 1e3 * m, ms_ref = 1e3 * mr, pairs = static_cast<int>(mine.size());
          if (ratio >= min_ratio) break;
        }
        const wb::Cost cost = wbc::cost(*ladder, s);
        const double gf = cost.flops / (ms * 1e6), gf_ref = cost.flops / (ms_ref * 1e6), peak = fma_peak();
        const std::string attempts = attempt > 1 ? ", best of " + std::to_string(attempt) + " attempts" : "";
        c.note(std::string(r.name) + ": " + fixed(ms, 3) + " ms, " + fixed(ratio, 2) + "x the workbench's " + ref_name +
               " (" + fixed(ms_ref, 3) + " ms; medians of " + std::to_string(pairs) + " interleaved runs each" +
               attempts + "; needed: " + fixed(min_ratio, 1) + "x)");
        c.note(
            "roofline: " + fixed(gf, 1) + " GFLOP/s at " + fixed(cost.flops / cost.bytes, 1) +
            " flop/byte (A and B read once, C written once; a current core's ridge lies at 5-20 flop/byte, so the roof "
            "here is the FMA peak) = " +
            fixed(100.0 * gf / peak, 1) + "% of this core's FMA peak, " + fixed(peak, 0) + " GFLOP/s (" +
            wbc::isa_level() + ", measured now by workbench/limits.cpp); " + ref_name + ": " + fixed(gf_ref, 1) +
            " GFLOP/s = " + fixed(100.0 * gf_ref / peak, 1) + "%");
        if (ratio < min_ratio)
          c.fail(std::string(r.name) + " is " + fixed(ratio, 2) + "x as fast as the workbench's " + ref_name +
                 " on this machine (" + fixed(ms, 3) + " ms against " + fixed(ms_ref, 3) + " ms), below the " +
                 fixed(min_ratio, 1) + "x this task asks for. " + why_slow);
      },
      8};
}

}  // namespace

Lab make_lab11() {
  Lab lab;
  lab.number = 11;
  lab.dir = "lab11_fast";
  lab.title = "Make it fast: the float32 matmul ladder on the CPU, from the loop order to a SIMD micro-kernel";
  lab.starter = "tutorials/lab11_fast/lab11.cpp";

  const Rung ikj{1, lab11::matmul_ikj, "matmul_ikj"};
  const Rung blocked{2, lab11::matmul_blocked, "matmul_blocked"};
  const Rung simd{3, lab11::matmul_simd, "matmul_simd"};

  std::vector<Case> t1 = product_cases(ikj);
  t1.push_back(speed_case(
      ikj, 1, 2.0, "Is the inner loop over j (unit stride in B and C)? With k innermost it is the naive loop again."));
  lab.tasks.push_back({1, "the loop order: ikj", 30, "lab11::matmul_ikj()", std::move(t1)});

  std::vector<Case> t2 = product_cases(blocked);
  t2.push_back(speed_case(blocked, 2, 0.9,
                          "Blocking adds loops but must not slow the inner one down: keep the inner loop over j long "
                          "(a column block of 128 or more floats), mark the pointers __restrict, and make sure the "
                          "block of B is small enough to stay in L2 (README: \"Choosing the block sizes\")."));
  lab.tasks.push_back({2, "cache blocking", 30, "lab11::matmul_blocked()", std::move(t2)});

  std::vector<Case> t3 = product_cases(simd);
  t3.push_back(speed_case(simd, 2, 2.0,
                          "Is the tile kept in registers over the whole k-block (loaded once before the k loop, stored "
                          "once after)? Are the 6 x 16 full tiles taking the vector path (only the edges the scalar "
                          "one)? Compare with workbench/matmul.cpp's v5."));
  lab.tasks.push_back({3, "a SIMD register-blocked micro-kernel", 40, "lab11::matmul_simd()", std::move(t3)});
  return lab;
}

}  // namespace gradsleuth::labs
