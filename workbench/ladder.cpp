// workbench/ladder.cpp: the CPU ladder's registry, shapes, costs and problems, and run():
// validate a version against the float64 reference, then time it (median of repeats).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "workbench/ladders.h"

namespace gradsleuth::workbench::cpu {

void parallel_for(int threads, int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (threads <= 1 || n <= 1) {
    fn(0, n);
    return;
  }
  const int64_t per = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int64_t b = per; b < n; b += per) pool.emplace_back([&fn, b, per, n] { fn(b, std::min(n, b + per)); });
  fn(0, std::min(n, per));
  for (std::thread& t : pool) t.join();
}

const std::vector<Ladder>& ladders() {
  static const std::vector<Ladder> r = [] {
    std::vector<Ladder> v = {matmul_ladder(),    softmax_ladder(), reduce_ladder(),
                             layernorm_ladder(), gelu_ladder(),    conv2d_ladder()};
    for (Ladder& l : v)
      for (const Rung& g : l.rungs) l.spec.versions.push_back(g.v);  // what version_list and `kernels list` show
    return v;
  }();
  return r;
}

const Ladder* find_ladder(const std::string& name) {
  for (const Ladder& l : ladders())
    if (l.spec.name == name) return &l;
  return nullptr;
}

std::string ladder_names() {
  std::string s;
  for (const Ladder& l : ladders()) s += (s.empty() ? "" : ", ") + l.spec.name;
  return s;
}

Shape shape_for(const Ladder& l, int64_t size, int64_t rows) {
  const KernelSpec& k = l.spec;
  if (size <= 0) size = k.default_size;
  if (k.name == "conv2d") return {rows > 0 ? rows : k.default_rows, size, 4};
  if (k.name == "matmul") return {size, size, size};
  if (k.default_rows > 0) return {rows > 0 ? rows : k.default_rows, size, 0};
  return {0, size, 0};
}

std::string shape_str(const Ladder& l, const Shape& s) {
  if (l.spec.name == "conv2d")
    return "batch " + std::to_string(s.k) + " x " + std::to_string(s.m) + " channels x " + std::to_string(s.n) + " x " +
           std::to_string(s.n) + " (3x3, padding 1, " + std::to_string(s.m) + " out)";
  return workbench::shape_str(l.spec, s);
}

Cost cost(const Ladder& l, const Shape& s) {
  if (l.spec.name == "conv2d") {
    const double C = static_cast<double>(s.m), P = static_cast<double>(s.n) * static_cast<double>(s.n),
                 B = static_cast<double>(s.k);
    return {2.0 * B * C * C * 9.0 * P, 4.0 * (2.0 * B * C * P + 9.0 * C * C)};
  }
  return workbench::cost(l.spec, s);
}

Problem make_problem(const Ladder& l, const Shape& s) {
  if (l.spec.name != "conv2d") return workbench::make_problem(l.spec, s);
  static std::mutex mu;
  static Shape last{-1, -1, -1};
  static std::shared_ptr<const Problem> cached;
  std::lock_guard<std::mutex> lock(mu);
  if (!cached || last.m != s.m || last.n != s.n || last.k != s.k) {
    cached.reset();
    cached = std::make_shared<const Problem>(conv2d_problem(s));
    last = s;
  }
  return *cached;
}

const Ladder& check_args(const std::string& kernel, int version, const Shape& s) {
  const Ladder* l = find_ladder(kernel);
  if (!l)
    throw std::invalid_argument("unknown kernel '" + kernel + "': the CPU workbench has " + ladder_names() +
                                " (gradsleuth kernels list)");
  const bool known =
      std::any_of(l->rungs.begin(), l->rungs.end(), [&](const Rung& r) { return r.v.number == version; });
  if (!known)
    throw std::invalid_argument(kernel + " has no CPU version " + std::to_string(version) + ": its versions are " +
                                version_list(l->spec));
  const bool rows = l->spec.default_rows > 0;
  if (s.n <= 0 || (rows && s.m <= 0) || ((kernel == "matmul" || kernel == "conv2d") && (s.m <= 0 || s.k <= 0)))
    throw std::invalid_argument(kernel + " v" + std::to_string(version) + ": the size must be at least 1 (" +
                                l->spec.shape_help + ")");
  // The problem and its float64 reference are held in memory: refuse what would not fit comfortably.
  const double elems = kernel == "matmul"
                           ? 3.0 * static_cast<double>(std::max({s.m, s.n, s.k})) * std::max({s.m, s.n, s.k})
                       : kernel == "conv2d" ? 2.0 * static_cast<double>(s.k) * s.m * s.n * s.n
                       : rows               ? static_cast<double>(s.m) * s.n
                                            : static_cast<double>(s.n);
  if (elems > 1.5e9)
    throw std::invalid_argument(kernel + " v" + std::to_string(version) + " at " + shape_str(*l, s) +
                                ": over 1.5e9 elements (the inputs, the reference and the output are held in memory); "
                                "use a smaller --size" +
                                (rows ? " or --rows" : ""));
  if (kernel == "matmul" && static_cast<double>(s.m) * s.n * s.k > 8.6e9)
    throw std::invalid_argument("matmul at " + shape_str(*l, s) +
                                ": the float64 reference alone would take minutes "
                                "(over 2048^3 multiply-adds); use --size 2048 or less");
  return *l;
}

namespace {
// reduce's accuracy input: n copies of 0.1f, the classic case (0.1f is not a short binary
// fraction, and a float running sum of it rounds the same way at every step, so its errors add
// up instead of cancelling), and its exact sum n * 0.1f in long double.
struct AccuracyInput {
  int64_t n = -1;
  std::vector<float> x;
  long double sum = 0;
};
const AccuracyInput& accuracy_input(int64_t n) {
  static std::mutex mu;
  static AccuracyInput a;
  std::lock_guard<std::mutex> lock(mu);
  if (a.n != n) {
    a.n = n;
    a.x.assign(static_cast<size_t>(n), 0.1f);
    a.sum = static_cast<long double>(n) * static_cast<long double>(0.1f);  // exact: 24 bits times n < 2^40 fit in 64
  }
  return a;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Result run(const std::string& kernel, int version, const Shape& s, const Options& o,
           const std::function<void(const std::string&)>& progress) {
  const Ladder& l = check_args(kernel, version, s);
  if (o.threads < 1 || o.threads > 1024)
    throw std::invalid_argument("kernels bench: --threads must be 1 to 1024, got " + std::to_string(o.threads));
  if (o.repeats < 1 || o.warmup < 0)
    throw std::invalid_argument("kernels bench: --repeats must be at least 1 and --warmup at least 0");
  const Rung& rung =
      *std::find_if(l.rungs.begin(), l.rungs.end(), [&](const Rung& r) { return r.v.number == version; });
  Result r;
  r.kernel = kernel;
  r.version = version;
  r.name = rung.v.name;
  r.shape = s;
  r.cost = cost(l, s);
  if (!rung.skip.empty()) {
    r.skipped = rung.skip;
    return r;
  }
  const std::string tag = kernel + " v" + std::to_string(version);
  if (progress) progress(tag + ": building the problem and its float64 reference");
  Problem p = make_problem(l, s);
  if (kernel == "conv2d" && rung.v.name.find("Winograd") != std::string::npos) {
    p.atol_each = conv2d_winograd_bounds(p, s);
    p.tolerance_note =
        "per element, |err| <= gamma_(C+8) 81 sum_c max|w_oc| max|x_c over the 4x4 tile| + u |y|: the a "
        "priori bound of Winograd F(2x2, 3x3) (core/cpu/winograd.cpp, Numerics)";
    p.atol = *std::max_element(p.atol_each.begin(), p.atol_each.end());
  }
  std::vector<const float*> in;
  for (const auto& v : p.inputs) in.push_back(v.data());
  std::vector<float> out(p.want.size(), std::numeric_limits<float>::quiet_NaN());
  // Validate on the first run (the output starts as NaN: an element never written fails).
  rung.fn(in.data(), out.data(), s, o.threads);
  r.validation = validate_result(out.data(), p.want.data(), static_cast<int64_t>(out.size()), p.atol, p.rtol,
                                 p.atol_each.empty() ? nullptr : p.atol_each.data());
  r.atol = p.atol;
  r.rtol = p.rtol;
  r.tolerance_note = p.tolerance_note;
  if (rung.rel_bound) {
    const AccuracyInput& a = accuracy_input(s.n);
    const float* ax = a.x.data();
    float got = 0.0f;
    rung.fn(&ax, &got, s, o.threads);
    const double exact = static_cast<double>(a.sum);
    r.has_accuracy = true;
    r.accuracy_err = std::fabs(static_cast<double>(got) - exact) / exact;
    // The threads' partial sums add o.threads - 1 roundings.
    r.accuracy_bound = rung.rel_bound(s.n) + (o.threads - 1) * 5.96e-8;
    r.accuracy_ok = r.accuracy_err <= r.accuracy_bound;
  }
  for (int w = 1; w < o.warmup; ++w) rung.fn(in.data(), out.data(), s, o.threads);  // the validating run was the first
  std::vector<double> ms;
  const double budget_ms = o.max_seconds * 1e3, start = now_ms();
  for (int i = 0; i < o.repeats; ++i) {
    if (i >= 3 && now_ms() - start > budget_ms) break;  // at least 3 timed runs, then within the budget
    if (progress) progress(tag + ": timed run " + std::to_string(i + 1) + " of at most " + std::to_string(o.repeats));
    const double t0 = now_ms();
    rung.fn(in.data(), out.data(), s, o.threads);
    ms.push_back(now_ms() - t0);
  }
  std::sort(ms.begin(), ms.end());
  r.repeats = static_cast<int>(ms.size());
  const size_t mid = ms.size() / 2;
  r.ms = ms.size() % 2 ? ms[mid] : 0.5 * (ms[mid - 1] + ms[mid]);
  r.min_ms = ms.front();
  r.max_ms = ms.back();
  return r;
}

}  // namespace gradsleuth::workbench::cpu
