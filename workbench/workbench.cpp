// workbench/workbench.cpp: what both kernel workbenches share (workbench.h): the kernel registry,
// shapes, napkin-math costs, inputs, CPU references (summed in double), tolerances and
// validate_result.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>

#include "workbench/workbench.h"

namespace gradsleuth::workbench {

namespace {
constexpr double kEps = 1.1920928955078125e-07;  // 2^-23: float32 machine epsilon

std::vector<KernelSpec> make_registry() {
  std::vector<KernelSpec> r;
  r.push_back(
      {"matmul",
       "C (M, N) = A (M, K) @ B (K, N), float32, row-major",
       "cuda/workbench/matmul.cu",
       "--size N: M = N = K = N",
       true,
       "cuBLAS SGEMM",
       {{1, "naive", "one thread per element of C, threadIdx.x along the rows: uncoalesced loads of A"},
        {2, "coalesced", "threadIdx.x along the columns: a warp reads 128 contiguous bytes of B, 8x fewer sectors"},
        {3, "shared-memory tiled", "32 x 32 tiles of A and B staged in shared memory: 32x less global traffic"},
        {4, "2-D register tiled",
         "64 x 64 block tile, 4 x 4 outputs per thread in registers: 0.5 shared loads per FMA"},
        {5, "vectorised", "v4 with float4 global and shared accesses: 4x fewer load/store instructions"},
        {6, "warp tiled", "a 32 x 32 tile per warp, 8 x 4 per thread: 0.375 shared loads per FMA, conflict-free"},
        {7, "cuBLAS", "cublasSgemm, the reference row (the emulator's is a CPU reference GEMM)"},
        {8, "tensor cores (bf16)",
         "WMMA 16x16x16 bf16 fragments, float32 accumulate, 32 x 32 per warp; GPU only: the emulator has no tensor "
         "cores and refuses it, so it is validated on a GPU (against the float64 product of the bf16-rounded inputs); "
         "% of the bf16 dense peak",
         true}},
       4096,
       64,
       0,
       0,
       256.0 * 256.0 * 256.0});
  r.push_back({"softmax",
               "row softmax of x (rows, cols), float32",
               "cuda/workbench/softmax.cu",
               "--size C: columns per row; --rows R (default 4096 on a GPU, 64 on the emulator)",
               false,
               "cudaMemcpy device-to-device",
               {{1, "naive", "one thread per row, three passes: few threads, uncoalesced"},
                {2, "block per row", "256 threads per row, coalesced, max and sum as shared-memory tree reductions"},
                {3, "warp online",
                 "one warp per row, online max/sum in one pass, warp shuffles: no shared memory, no barrier"}},
               4096,
               1000,
               4096,
               64,
               4.0e6});
  r.push_back(
      {"reduce",
       "sum of n float32 values into one float",
       "cuda/workbench/reduce.cu",
       "--size N: elements",
       false,
       "cudaMemcpy device-to-device",
       {{1, "atomic", "one atomicAdd per element on one address: fully serialised"},
        {2, "shared tree", "a shared-memory tree per block of 512 elements, one atomic per block"},
        {3, "warp shuffle", "grid-stride loop in registers, warp shuffles, one barrier and one atomic per block"}},
       int64_t{1} << 26,
       100000,
       0,
       0,
       4.0e6});
  r.push_back({"layernorm",
               "layer norm of x (rows, cols) over the columns, with weight and bias",
               "cuda/workbench/layernorm.cu",
               "--size C: columns per row; --rows R (default 4096 on a GPU, 64 on the emulator)",
               false,
               "cudaMemcpy device-to-device",
               {{1, "naive", "one thread per row, two-pass mean and variance: few threads, uncoalesced"},
                {2, "block per row", "256 threads per row, two-pass, shared-memory reductions"},
                {3, "warp welford", "one warp per row, Welford in one pass, merged with warp shuffles"}},
               4096,
               1000,
               4096,
               64,
               4.0e6});
  r.push_back({"gelu",
               "GELU (tanh approximation) of n float32 values: the elementwise op",
               "cuda/workbench/gelu.cu",
               "--size N: elements",
               false,
               "cudaMemcpy device-to-device",
               {{1, "plain", "one thread per element"},
                {2, "grid-stride", "a grid sized to the machine loops over the array"},
                {3, "float4", "16-byte loads and stores in the grid-stride loop: 4x fewer memory instructions"}},
               int64_t{1} << 26,
               100000,
               0,
               0,
               4.0e6});
  return r;
}

// Deterministic inputs: the same on every machine (mt19937 and this mapping are fully
// specified), different for every kernel and input.
std::vector<float> uniform(const std::string& kernel, int which, int64_t n, float lo, float hi) {
  const std::string key = kernel + "#" + std::to_string(which);
  std::seed_seq seq(key.begin(), key.end());
  std::mt19937 gen(seq);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = lo + (hi - lo) * static_cast<float>(gen() >> 8) * (1.0f / 16777216.0f);
  return v;
}

bool row_kernel(const KernelSpec& k) { return k.default_rows > 0; }
}  // namespace

const std::vector<KernelSpec>& kernels() {
  static const std::vector<KernelSpec> r = make_registry();
  return r;
}

const KernelSpec* find_kernel(const std::string& name) {
  for (const KernelSpec& k : kernels())
    if (k.name == name) return &k;
  return nullptr;
}

std::string kernel_names() {
  std::string s;
  for (const KernelSpec& k : kernels()) s += (s.empty() ? "" : ", ") + k.name;
  return s;
}

std::string version_list(const KernelSpec& k) {
  std::string s;
  for (const Version& v : k.versions) s += (s.empty() ? "" : ", ") + std::to_string(v.number) + " (" + v.name + ")";
  return s;
}

Shape shape_for(const KernelSpec& k, int64_t size, int64_t rows, bool emulator) {
  if (size <= 0) size = emulator ? k.emu_default_size : k.default_size;
  if (k.name == "matmul") return {size, size, size};
  if (row_kernel(k)) return {rows > 0 ? rows : (emulator ? k.emu_default_rows : k.default_rows), size, 0};
  return {0, size, 0};
}

std::string shape_str(const KernelSpec& k, const Shape& s) {
  if (k.name == "matmul")
    return std::to_string(s.m) + " x " + std::to_string(s.n) + " x " + std::to_string(s.k) + " (M x N x K)";
  if (row_kernel(k)) return std::to_string(s.m) + " rows x " + std::to_string(s.n) + " columns";
  return std::to_string(s.n) + " elements";
}

Cost cost(const KernelSpec& k, const Shape& s) {
  const double m = static_cast<double>(s.m), n = static_cast<double>(s.n), kk = static_cast<double>(s.k);
  if (k.name == "matmul") return {2.0 * m * n * kk, 4.0 * (m * kk + kk * n + m * n)};
  if (k.name == "softmax") return {5.0 * m * n, 8.0 * m * n};
  if (k.name == "layernorm") return {8.0 * m * n, 8.0 * m * n + 8.0 * n};
  if (k.name == "reduce") return {n, 4.0 * n + 4.0};
  return {10.0 * n, 8.0 * n};  // gelu
}

const KernelSpec& check_args(const std::string& kernel, int version, const Shape& s, bool emulator) {
  const KernelSpec* k = find_kernel(kernel);
  if (!k)
    throw std::invalid_argument("unknown kernel '" + kernel + "': the workbench has " + kernel_names() +
                                " (gradsleuth kernels list)");
  const bool known =
      std::any_of(k->versions.begin(), k->versions.end(), [&](const Version& v) { return v.number == version; });
  if (!known)
    throw std::invalid_argument(kernel + " has no version " + std::to_string(version) + ": its versions are " +
                                version_list(*k));
  for (const Version& v : k->versions)
    if (v.number == version && v.tensor_core && emulator)
      throw std::invalid_argument(
          kernel + " v" + std::to_string(version) + " (" + v.name +
          ") runs on a GPU only: the CPU emulator has no tensor cores (WMMA/mma.sync), so it can neither run nor "
          "validate it. Run it on a GPU machine (gradsleuth built with -DGRADSLEUTH_KERNELS_ON=GPU; "
          "scripts/gpu_check.sh does), or bench versions 1-7 here");
  const bool row = row_kernel(*k);
  if (s.n <= 0 || (row && s.m <= 0) || (k->name == "matmul" && (s.m <= 0 || s.k <= 0)))
    throw std::invalid_argument(kernel + " v" + std::to_string(version) + ": the size must be at least 1 (" +
                                k->shape_help + ")");
  const double elems =
      k->name == "matmul"
          ? std::max({static_cast<double>(s.m) * s.k, static_cast<double>(s.k) * s.n, static_cast<double>(s.m) * s.n})
          : (row ? static_cast<double>(s.m) * s.n : static_cast<double>(s.n));
  if (elems > static_cast<double>(std::numeric_limits<int>::max()) || s.m > std::numeric_limits<int>::max() ||
      s.n > std::numeric_limits<int>::max() || s.k > std::numeric_limits<int>::max())
    throw std::invalid_argument(kernel + " v" + std::to_string(version) + " at " + shape_str(*k, s) +
                                ": more than 2^31 - 1 elements; the kernels index with int: use a smaller --size");
  if (emulator) {
    const double work = k->name == "matmul" ? static_cast<double>(s.m) * s.n * s.k : elems;
    if (work > k->emu_max_work) {
      std::ostringstream os;
      os << kernel << " v" << version << " at " << shape_str(*k, s)
         << " is too big for the CPU emulator (it would take "
         << "minutes): it validates up to ";
      if (k->name == "matmul")
        os << "--size " << static_cast<int64_t>(std::cbrt(k->emu_max_work) + 0.5);
      else
        os << static_cast<int64_t>(k->emu_max_work) << (row ? " elements (rows x columns)" : " elements");
      os << "; use a smaller --size" << (row ? " or --rows" : "") << " (timings need a GPU)";
      throw std::invalid_argument(os.str());
    }
  }
  return *k;
}

Problem matmul_problem(std::vector<float> a, std::vector<float> b, const Shape& s) {
  if (s.m < 0 || s.n < 0 || s.k < 0 || static_cast<int64_t>(a.size()) != s.m * s.k ||
      static_cast<int64_t>(b.size()) != s.k * s.n)
    throw std::invalid_argument("matmul_problem: A has " + std::to_string(a.size()) + " elements and B " +
                                std::to_string(b.size()) + ", but M, N, K = " + std::to_string(s.m) + ", " +
                                std::to_string(s.n) + ", " + std::to_string(s.k) + " needs M * K and K * N");
  Problem p;
  p.inputs = {std::move(a), std::move(b)};
  const int64_t M = s.m, N = s.n, K = s.k;
  const std::vector<float>&A = p.inputs[0], &B = p.inputs[1];
  p.want.assign(static_cast<size_t>(M * N), 0.0f);
  p.atol_each.assign(static_cast<size_t>(M * N), 0.0f);
  // The a priori bound of a K-term float dot product in any order (Higham, "Accuracy and Stability
  // of Numerical Algorithms", 3.1): |err| <= gamma_K * sum_k |a_ik b_kj|, gamma_K = K u / (1 - K u),
  // u = eps / 2; with FMAs or not, tiles or not. Plus half an ulp for rounding the reference.
  const double u = kEps / 2.0, Ku = static_cast<double>(std::max<int64_t>(K, 1)) * u, gamma = Ku / (1.0 - Ku);
  std::vector<double> acc(static_cast<size_t>(N)), mag(static_cast<size_t>(N));
  double widest = 0.0;
  for (int64_t i = 0; i < M; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    std::fill(mag.begin(), mag.end(), 0.0);
    for (int64_t kk = 0; kk < K; ++kk) {
      const double a = A[static_cast<size_t>(i * K + kk)];
      const float* b = &B[static_cast<size_t>(kk * N)];
      for (int64_t j = 0; j < N; ++j) {
        acc[static_cast<size_t>(j)] += a * b[j];
        mag[static_cast<size_t>(j)] += std::fabs(a * b[j]);
      }
    }
    for (int64_t j = 0; j < N; ++j) {
      const size_t at = static_cast<size_t>(i * N + j);
      p.want[at] = static_cast<float>(acc[static_cast<size_t>(j)]);
      const double bound = gamma * mag[static_cast<size_t>(j)] + u * std::fabs(acc[static_cast<size_t>(j)]);
      p.atol_each[at] = static_cast<float>(bound * (1.0 + 1e-6));  // rounded up, never down
      widest = std::max(widest, bound);
    }
  }
  p.atol = widest;  // shown; each element is checked against its own bound
  p.rtol = 0.0;
  p.tolerance_note =
      "per element, |err| <= gamma_K sum_k |a_ik b_kj| + u |c_ij| (gamma_K = K u / (1 - K u), "
      "u = eps / 2): the a priori bound of a K-term dot product in any order; atol shows the widest";
  return p;
}

namespace {
Problem build_problem(const KernelSpec& k, const Shape& s) {
  Problem p;
  const std::string& name = k.name;
  if (name == "matmul") {
    p = matmul_problem(uniform(name, 0, s.m * s.k, -1.0f, 1.0f), uniform(name, 1, s.k * s.n, -1.0f, 1.0f), s);
  } else if (name == "softmax") {
    const int64_t R = s.m, C = s.n;
    p.inputs = {uniform(name, 0, R * C, -4.0f, 4.0f)};
    const std::vector<float>& x = p.inputs[0];
    p.want.resize(static_cast<size_t>(R * C));
    for (int64_t r = 0; r < R; ++r) {
      const float* xr = &x[static_cast<size_t>(r * C)];
      double m = -std::numeric_limits<double>::infinity(), sum = 0.0;
      for (int64_t c = 0; c < C; ++c) m = std::max(m, static_cast<double>(xr[c]));
      for (int64_t c = 0; c < C; ++c) sum += std::exp(xr[c] - m);
      for (int64_t c = 0; c < C; ++c)
        p.want[static_cast<size_t>(r * C + c)] = static_cast<float>(std::exp(xr[c] - m) / sum);
    }
    p.atol = 1e-12;
    p.rtol = kEps * static_cast<double>(C + 16);
    p.tolerance_note =
        "rtol = eps * (C + 16): the C-term sum of exponentials, plus a few ulp for expf and the division";
  } else if (name == "layernorm") {
    const int64_t R = s.m, C = s.n;
    std::vector<float> x = uniform(name, 0, R * C, -1.0f, 1.0f);
    for (float& v : x) v += 0.5f;  // a nonzero mean, so the centring matters
    p.inputs = {std::move(x), uniform(name, 1, C, 0.5f, 1.5f), uniform(name, 2, C, -0.5f, 0.5f)};
    const std::vector<float>&xs = p.inputs[0], &w = p.inputs[1], &b = p.inputs[2];
    p.want.resize(static_cast<size_t>(R * C));
    for (int64_t r = 0; r < R; ++r) {
      const float* xr = &xs[static_cast<size_t>(r * C)];
      double mean = 0.0, var = 0.0;
      for (int64_t c = 0; c < C; ++c) mean += xr[c];
      mean /= static_cast<double>(C);
      for (int64_t c = 0; c < C; ++c) var += (xr[c] - mean) * (xr[c] - mean);
      var /= static_cast<double>(C);
      const double rstd = 1.0 / std::sqrt(var + 1e-5);
      for (int64_t c = 0; c < C; ++c)
        p.want[static_cast<size_t>(r * C + c)] = static_cast<float>((xr[c] - mean) * rstd * w[c] + b[c]);
    }
    p.atol = p.rtol = kEps * static_cast<double>(C + 16);
    p.tolerance_note = "atol = rtol = eps * (C + 16): the C-term sums of the mean and the variance, plus a few ulp";
  } else if (name == "reduce") {
    const int64_t n = s.n;
    // Non-negative integers: kept elements are 1, 2 or 3, the others 0, with the kept share chosen
    // so that the total stays near 2^23. Every partial sum, in any order, is then an integer no
    // larger than the total, and while the total is below 2^24 every float addition is exact: the
    // reference is compared with tolerance 0, so a lost block, a doubled element or a race shows at
    // every size. Each skipped block of 256 elements loses ~2 * 256 * share (> 40 at 2^26).
    const double share = std::min(1.0, 8388608.0 / (2.0 * static_cast<double>(std::max<int64_t>(n, 1))));
    std::vector<float> x = uniform(name, 0, n, 0.0f, 1.0f);
    for (float& v : x) {
      const double u = v;
      v = u < share ? static_cast<float>(1 + std::min(2, static_cast<int>(3.0 * u / share))) : 0.0f;
    }
    double sum = 0.0;
    for (float v : x) sum += v;
    p.inputs = {std::move(x)};
    p.want = {static_cast<float>(sum)};
    p.rtol = 0.0;
    if (sum < 16777216.0) {
      p.atol = 0.0;
      p.tolerance_note =
          "exact: the inputs are small non-negative integers summing to < 2^24, so every partial sum, "
          "in any order, is exact in float";
    } else {  // not reached by the inputs above; the a priori bound of any summation order
      p.atol = kEps * static_cast<double>(n) * sum;
      p.tolerance_note = "atol = eps * n * sum |x|: the worst-case bound of recursive summation in any order";
    }
  } else {  // gelu
    const int64_t n = s.n;
    p.inputs = {uniform(name, 0, n, -5.0f, 5.0f)};
    p.want.resize(static_cast<size_t>(n));
    const double k = std::sqrt(2.0 / 3.14159265358979323846);
    for (int64_t i = 0; i < n; ++i) {
      const double x = p.inputs[0][static_cast<size_t>(i)];
      p.want[static_cast<size_t>(i)] = static_cast<float>(0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x))));
    }
    p.atol = 1e-6;
    p.rtol = 16 * kEps;
    p.tolerance_note = "atol 1e-6, rtol 16 eps: tanhf is within a few ulp, and 1 + tanh cancels for negative x";
  }
  return p;
}
}  // namespace

// The CPU reference of a 4096^3 matmul takes tens of seconds; `kernels bench` validates every
// version of a kernel at one shape, so the last problem is kept (inputs and reference depend only
// on the kernel and the shape) and each version gets a copy.
Problem make_problem(const KernelSpec& k, const Shape& s) {
  static std::mutex mu;
  static std::string last_kernel;
  static Shape last_shape;
  static std::shared_ptr<const Problem> last;
  std::lock_guard<std::mutex> lock(mu);
  if (!last || last_kernel != k.name || last_shape.m != s.m || last_shape.n != s.n || last_shape.k != s.k) {
    last.reset();  // free the old one before building the next
    last = std::make_shared<const Problem>(build_problem(k, s));
    last_kernel = k.name;
    last_shape = s;
  }
  return *last;
}

Validation validate_result(const float* got, const float* want, int64_t n, double atol, double rtol,
                           const float* atol_each) {
  Validation v;
  v.n = n;
  for (int64_t i = 0; i < n; ++i) {
    const double g = got[i], w = want[i];
    const double err = std::fabs(g - w);
    bool ok;
    if (std::isnan(w) || std::isnan(g))
      ok = std::isnan(w) && std::isnan(g);
    else if (std::isinf(w) || std::isinf(g))
      ok = g == w;
    else
      ok = err <= (atol_each ? static_cast<double>(atol_each[i]) : atol) + rtol * std::fabs(w);
    if (std::isfinite(err)) {
      v.max_abs_err = std::max(v.max_abs_err, err);
      if (w != 0.0) v.max_rel_err = std::max(v.max_rel_err, err / std::fabs(w));
    }
    if (!ok) {
      if (v.mismatches == 0) v.first_bad = i, v.first_got = g, v.first_want = w;
      ++v.mismatches;
    }
  }
  v.ok = v.mismatches == 0;
  return v;
}

}  // namespace gradsleuth::workbench
